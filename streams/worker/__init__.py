"""The Faust worker (``streams.worker.faust_app``, the only Faust import) and its pure parts.

Importing this package does not import Faust: ``create_app`` is loaded on first use,
so ``streams.worker.state`` / ``streams.worker.processor`` stay cheap for tests and tools;
:class:`WorkerConfig` (``streams.worker.config``) is plain data.
"""

from __future__ import annotations

import typing

from streams.worker.config import WorkerConfig

_LAZY = ("WorkerApp", "create_app")
__all__ = ["WorkerApp", "WorkerConfig", "create_app"]


def __getattr__(name: str) -> typing.Any:
    if name in _LAZY:
        from streams.worker import faust_app

        return getattr(faust_app, name)
    raise AttributeError(name)
