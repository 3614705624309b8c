"""The Faust worker (``streams.app.faust_app``, the only Faust import) and its pure parts.

Importing this package does not import Faust: ``create_app`` is loaded on first use,
so ``streams.app.state`` / ``streams.app.processor`` stay cheap for tests and tools.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WorkerApp", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from streams.app import faust_app

        return getattr(faust_app, name)
    raise AttributeError(name)
