"""The ``trajectory`` subcommands, one module each (``add_arguments`` + ``run``)."""

__all__: list[str] = []
