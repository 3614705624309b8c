"""PEP 562 lazy exports for a package's ``__init__``.

Why: a package that re-exports names from its modules would import all of them on
``import package``; ``streams`` would load the Kafka client, ``streams.core`` every
detector (and ``import streams.errors`` pulls in ``streams.core``).  With lazy
exports a name's module is imported on first access, and the value is then bound
in the package, so later lookups skip ``__getattr__``.  Type checkers still see the
real names through the package's ``if typing.TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, serving ``exports`` (name -> the
    module that defines it).  Invariant: a name not in ``exports`` raises
    ``AttributeError`` naming the package, as a plain module attribute would."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # loaded once
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
