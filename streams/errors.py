"""Public re-export of the project's exception tree (see :mod:`streams.core.errors`)."""

from streams.core.errors import *  # noqa: F403
from streams.core.errors import __all__ as __all__
