"""A cheaper ``__init__`` for the frozen slotted dataclasses built on every event.

Why: ``@dataclass(frozen=True)`` writes each field in ``__init__`` with
``object.__setattr__(self, name, value)``, a global lookup, an attribute lookup
and a generic ``setattr`` that searches the class's MRO for the name, per field.
A :class:`~streams.core.events.TraceEvent` (19 fields) took ~5.6 µs to build on
the 2-core box, against ~0.6 µs for the same class unfrozen, and the worker and
replay build several such values per event (the decoded event, its tool-call
record, the observers' context).  :func:`quick_init` replaces that ``__init__``
with one that writes each field through its slot's member descriptor
(``TraceEvent.__dict__["seq"].__set__``), the very store ``object.__setattr__``
ends in, without the lookups: ~2.9 µs for the ``TraceEvent``.

Invariants (checked when the class is decorated, a ``TypeError`` naming the class
otherwise):

* the class is a dataclass with ``frozen=True`` and ``slots=True``, every field is
  an ``__init__`` parameter (no ``InitVar``); a ``__post_init__`` runs last, as before;
* the new ``__init__`` has exactly the dataclass's signature (names, kinds,
  defaults; a field with a ``default_factory`` calls it per instance, as before),
  so positional and keyword calls, ``dataclasses.replace``, ``copy`` and pickling
  behave as they did;
* the instance stays frozen: assigning or deleting a field still raises
  :class:`dataclasses.FrozenInstanceError` (the class's ``__setattr__`` is not
  touched).

``tests/unit/core/test_frozen.py`` builds every decorated class both ways and
compares the results field by field.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from types import MemberDescriptorType
from typing import Any, TypeVar

_T = TypeVar("_T")

#: Every class :func:`quick_init` rewrote, with the dataclass's own ``__init__``
#: (the tests compare the two).
_ORIGINAL_INITS: dict[type[Any], Callable[..., None]] = {}


def quick_init(cls: type[_T]) -> type[_T]:
    """Class decorator, above ``@dataclass(frozen=True, slots=True)``: give ``cls``
    an ``__init__`` that stores fields through their slot descriptors (module
    docstring).  Returns ``cls`` itself."""
    name = cls.__qualname__
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"quick_init({name}): needs @dataclass(frozen=True, slots=True) below it")
    original = cls.__init__
    signature = inspect.signature(original)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    if list(signature.parameters)[1:] != names:
        raise TypeError(f"quick_init({name}): every field must be an __init__ parameter")

    namespace: dict[str, Any] = {}
    args: list[str] = []
    body: list[str] = []
    keyword_only = False
    for f, p in zip(fields, list(signature.parameters.values())[1:], strict=True):
        descriptor = inspect.getattr_static(cls, f.name)
        if not isinstance(descriptor, MemberDescriptorType):
            raise TypeError(f"quick_init({name}): field {f.name!r} is not a slot")
        namespace[f"_set_{f.name}"] = descriptor.__set__
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only:
            args.append("*")
            keyword_only = True
        value = f.name
        if p.default is inspect.Parameter.empty:
            args.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = p.default
            args.append(f"{f.name}=_default_{f.name}")
            if f.default_factory is not dataclasses.MISSING:
                # the dataclass's own "<factory>" default: call the factory per instance
                namespace[f"_factory_{f.name}"] = f.default_factory
                value = f"_factory_{f.name}() if {f.name} is _default_{f.name} else {f.name}"
        body.append(f"    _set_{f.name}(self, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")  # last, as in the dataclass's own
    source = f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(compile(source, f"<quick_init {cls.__module__}.{name}>", "exec"), namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{name}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = original.__doc__
    init.__annotations__ = dict(getattr(original, "__annotations__", {}))
    if inspect.signature(init) != signature:  # the generated code says what it should
        raise TypeError(f"quick_init({name}): the new __init__'s signature differs")
    _ORIGINAL_INITS[cls] = original
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def quick_init_classes() -> dict[type[Any], Callable[..., None]]:
    """Every class :func:`quick_init` rewrote so far, with the dataclass's ``__init__``."""
    return dict(_ORIGINAL_INITS)


__all__ = ["quick_init", "quick_init_classes"]
