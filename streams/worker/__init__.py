"""The Faust worker (``streams.worker.faust_app``, the only Faust import) and its pure parts.

Importing this package does not import Faust: ``create_app`` is loaded on first use,
so ``streams.worker.state`` / ``streams.worker.processor`` stay cheap for tests and tools;
:class:`WorkerConfig` (``streams.worker.config``) is plain data.
"""

from __future__ import annotations

import typing

from streams.core.lazy import lazy_exports as _lazy_exports
from streams.worker.config import WorkerConfig

if typing.TYPE_CHECKING:
    from streams.worker.faust_app import WorkerApp, create_app

_LAZY = {"WorkerApp": "streams.worker.faust_app", "create_app": "streams.worker.faust_app"}
__all__ = ["WorkerApp", "WorkerConfig", "create_app"]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY)
