"""Canonical, fail-loudly serialization of session state.

The worker stores each session's :class:`~streams.core.engine.SessionState` in a
changelogged table, replay compares states byte for byte, and snapshots are kept
for restore.  All of that needs one encoding that is

* **canonical** — the same value always gives the same bytes: object keys
  sorted, compact separators, UTF-8 (no ``\\u`` escapes for non-ASCII), ints stay
  ints, floats are written with ``repr`` (shortest round-tripping form);
* **loud** — anything that is not plainly representable raises
  :class:`~streams.core.errors.UnserializableError` naming the path of the first
  bad leaf (``state.analysis.records[3].params.fn``).  Functions, sets, bytes,
  NaN/infinity, non-``str`` dict keys, cycles and unknown objects are all
  rejected; nothing is ever dropped or stringified behind the caller's back;
* **exact** — frozen dataclasses carry a type tag so :func:`decode_state`
  rebuilds the very same values, and ``encode(decode(encode(s))) == encode(s)``.

Wire form of non-JSON shapes (JSON itself has only objects and arrays):

=========================  ===============================================
Python value               JSON
=========================  ===============================================
``tuple``                  array
``list``                   ``{"!list": [...]}``
``dict`` (str keys)        object; ``{"!dict": {...}}`` if a key starts "!"
frozen dataclass           ``{"!t": "module:QualName", "!f": {fields}}``
``datetime.timedelta``     ``{"!td": [days, seconds, microseconds]}``
=========================  ===============================================

Only dataclasses defined in ``streams.core.*`` modules are decoded (the tag is
resolved by importing that module and checking the class is a frozen
dataclass), so state bytes can never make the decoder construct arbitrary
objects.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from datetime import timedelta
from typing import Any, Final, cast

from streams.core.errors import StateDecodeError, UnserializableError

#: Version of the state envelope; bump on incompatible changes.
STATE_FORMAT: Final = "trajectory-session-state"
STATE_VERSION: Final = 1

_TAG: Final = "!t"
_FIELDS: Final = "!f"
_LIST: Final = "!list"
_DICT: Final = "!dict"
_TD: Final = "!td"
_ALLOWED_MODULE_PREFIX: Final = "streams.core."

_SCALARS: Final = (str, int, bool, type(None))


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def _to_plain(value: object, path: str, active: set[int]) -> Any:
    """Translate ``value`` into JSON-ready plain values, or raise naming ``path``.

    ``active`` holds the ids of containers on the current descent path, so a
    container reached again through itself is a cycle (shared, non-cyclic
    references are fine and are simply encoded twice).
    """
    vtype = type(value)
    if vtype is str or vtype is int or vtype is bool or value is None:
        return value
    if vtype is float:
        if not math.isfinite(cast(float, value)):
            raise UnserializableError(
                path, f"{value!r} is not a finite number (JSON has no NaN/inf)"
            )
        return value
    if vtype is tuple or vtype is list or vtype is dict or dataclasses.is_dataclass(value):
        ident = id(value)
        if ident in active:
            raise UnserializableError(path, "cycle: the value contains itself")
        active.add(ident)
        try:
            if vtype is tuple or vtype is list:
                items = cast("tuple[object, ...] | list[object]", value)
                arr = [_to_plain(v, f"{path}[{i}]", active) for i, v in enumerate(items)]
                return arr if vtype is tuple else {_LIST: arr}
            if vtype is dict:
                mapping = cast("dict[object, object]", value)
                out: dict[str, Any] = {}
                escape = False
                for k, v in mapping.items():
                    if type(k) is not str:
                        raise UnserializableError(
                            f"{path}[{k!r}]",
                            f"dict key of type {type(k).__name__}; only str keys are encodable",
                        )
                    if k.startswith("!"):
                        escape = True
                    out[k] = _to_plain(v, _child(path, k), active)
                return {_DICT: out} if escape else out
            return _dataclass_to_plain(value, path, active)
        finally:
            active.discard(ident)
    if vtype is timedelta:
        td: timedelta = value  # type: ignore[assignment]
        return {_TD: [td.days, td.seconds, td.microseconds]}
    if isinstance(value, (set, frozenset)):
        raise UnserializableError(
            path, f"{vtype.__name__} has no canonical order; use a sorted tuple"
        )
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise UnserializableError(
            path, f"{vtype.__name__} where JSON text was expected; decode it first"
        )
    if callable(value):
        raise UnserializableError(
            path, f"{vtype.__name__} {getattr(value, '__qualname__', value)!r} is code, not data"
        )
    if isinstance(value, (str, int, float, tuple, list, dict)):
        raise UnserializableError(
            path, f"subclass {vtype.__qualname__} of a JSON type; convert it to the plain type"
        )
    raise UnserializableError(
        path, f"unknown object of type {vtype.__module__}.{vtype.__qualname__}"
    )


#: Per dataclass: (tag, field names), or the error (path suffix, message) it raises.
_CLASS_INFO: dict[type[Any], tuple[str, tuple[str, ...]] | tuple[None, tuple[str, str]]] = {}


def _class_info(cls: type[Any]) -> tuple[str, tuple[str, ...]] | tuple[None, tuple[str, str]]:
    info = _CLASS_INFO.get(cls)
    if info is not None:
        return info
    params = getattr(cls, "__dataclass_params__", None)
    result: tuple[str, tuple[str, ...]] | tuple[None, tuple[str, str]]
    if params is None or not params.frozen:
        result = (
            None,
            ("", f"dataclass {cls.__qualname__} is not frozen; state values must be immutable"),
        )
    elif "<locals>" in cls.__qualname__:
        result = (
            None,
            ("", f"dataclass {cls.__qualname__} is local to a function; it cannot be decoded"),
        )
    else:
        bad = [f.name for f in dataclasses.fields(cls) if not f.init]
        if bad:
            result = (None, (f".{bad[0]}", "init=False field cannot be reconstructed"))
        else:
            names = tuple(f.name for f in dataclasses.fields(cls))
            result = (f"{cls.__module__}:{cls.__qualname__}", names)
    _CLASS_INFO[cls] = result
    return result


def _dataclass_to_plain(value: Any, path: str, active: set[int]) -> Any:
    if isinstance(value, type):
        raise UnserializableError(path, f"class object {value.__qualname__}; expected an instance")
    tag, rest = _class_info(type(value))
    if tag is None:
        suffix, message = cast("tuple[str, str]", rest)
        raise UnserializableError(path + suffix, message)
    fields_out: dict[str, Any] = {}
    for name in rest:
        fields_out[name] = _to_plain(getattr(value, name), f"{path}.{name}", active)
    return {_TAG: tag, _FIELDS: fields_out}


class _Slow(Exception):
    """Raised by the fast walk on anything unusual; the path-tracking walk then
    runs to produce the error with its field path (or the exact result)."""


def _fast_plain(value: object, active: set[int]) -> Any:
    """:func:`_to_plain` without building path strings (the hot path: state is
    encoded per event).  Any doubt raises :class:`_Slow`."""
    vtype = type(value)
    if vtype is str or vtype is int or vtype is bool or value is None:
        return value
    if vtype is float:
        if not math.isfinite(cast(float, value)):
            raise _Slow
        return value
    ident = id(value)
    if ident in active:
        raise _Slow
    if vtype is tuple or vtype is list:
        active.add(ident)
        arr = [_fast_plain(v, active) for v in cast("tuple[object, ...] | list[object]", value)]
        active.discard(ident)
        return arr if vtype is tuple else {_LIST: arr}
    if vtype is dict:
        active.add(ident)
        out: dict[str, Any] = {}
        for k, v in cast("dict[object, object]", value).items():
            if type(k) is not str or k.startswith("!"):
                raise _Slow
            out[k] = _fast_plain(v, active)
        active.discard(ident)
        return out
    if vtype is timedelta:
        td = cast(timedelta, value)
        return {_TD: [td.days, td.seconds, td.microseconds]}
    info = _CLASS_INFO.get(vtype)
    if info is not None and info[0] is not None:
        active.add(ident)
        fields_out = {n: _fast_plain(getattr(value, n), active) for n in info[1]}
        active.discard(ident)
        return {_TAG: info[0], _FIELDS: fields_out}
    raise _Slow


def _plain(value: object, root: str) -> Any:
    try:
        return _fast_plain(value, set())
    except _Slow:
        return _to_plain(value, root, set())


def _dumps(plain: Any, root: str, original: object) -> bytes:
    text = json.dumps(
        plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # Rare path: find which string holds the lone surrogate, for the message.
        bad = _find_unencodable(original, root, set())
        raise UnserializableError(
            bad or root, "string is not valid Unicode (lone surrogate)"
        ) from exc


def _find_unencodable(value: object, path: str, seen: set[int]) -> str | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if id(value) in seen:
        return None
    seen.add(id(value))
    items: list[tuple[str, object]] = []
    if isinstance(value, (tuple, list)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str):
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    return f"{path}[{k!r}]"
                items.append((_child(path, k), v))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(f"{path}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    for p, v in items:
        found = _find_unencodable(v, p, seen)
        if found:
            return found
    return None


def to_canonical(value: object, root: str = "state") -> bytes:
    """Canonical JSON bytes of ``value``; :class:`UnserializableError` names a bad path."""
    return _dumps(_plain(value, root), root, value)


# --------------------------------------------------------------------------- decode

_CLASS_CACHE: dict[str, type[Any]] = {}


def _resolve(tag: object, path: str) -> type[Any]:
    if not isinstance(tag, str):
        raise StateDecodeError(f"{path}: type tag must be a string, got {type(tag).__name__}")
    cached = _CLASS_CACHE.get(tag)
    if cached is not None:
        return cached
    module_name, sep, qualname = tag.partition(":")
    if not sep or not module_name.startswith(_ALLOWED_MODULE_PREFIX):
        raise StateDecodeError(f"{path}: type tag {tag!r} is not a streams.core dataclass")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise StateDecodeError(
            f"{path}: unknown type {tag!r} (state from another version?)"
        ) from exc
    params = getattr(obj, "__dataclass_params__", None)
    if not isinstance(obj, type) or params is None or not params.frozen:
        raise StateDecodeError(f"{path}: {tag!r} is not a frozen dataclass")
    _CLASS_CACHE[tag] = obj
    return obj


def _from_plain(value: Any, path: str) -> Any:
    vtype = type(value)
    if vtype is str or vtype is int or vtype is float or vtype is bool or value is None:
        return value
    if vtype is list:
        return tuple([_from_plain(v, f"{path}[{i}]") for i, v in enumerate(value)])
    if vtype is dict:
        if _TAG in value:
            if set(value) != {_TAG, _FIELDS} or not isinstance(value[_FIELDS], dict):
                raise StateDecodeError(f"{path}: malformed dataclass record (keys {sorted(value)})")
            cls = _resolve(value[_TAG], path)
            kwargs = {k: _from_plain(v, f"{path}.{k}") for k, v in value[_FIELDS].items()}
            try:
                return cls(**kwargs)
            except (TypeError, ValueError) as exc:
                raise StateDecodeError(f"{path}: cannot rebuild {value[_TAG]}: {exc}") from exc
        if _LIST in value:
            if len(value) != 1 or not isinstance(value[_LIST], list):
                raise StateDecodeError(f"{path}: malformed list record")
            return [_from_plain(v, f"{path}[{i}]") for i, v in enumerate(value[_LIST])]
        if _TD in value:
            td = value[_TD]
            if len(value) != 1 or not (
                isinstance(td, list) and len(td) == 3 and all(type(x) is int for x in td)
            ):
                raise StateDecodeError(f"{path}: malformed timedelta record")
            return timedelta(days=td[0], seconds=td[1], microseconds=td[2])
        if _DICT in value:
            if len(value) != 1 or not isinstance(value[_DICT], dict):
                raise StateDecodeError(f"{path}: malformed escaped dict record")
            value = value[_DICT]
        elif any(k.startswith("!") for k in value):
            raise StateDecodeError(f"{path}: unknown record marker in keys {sorted(value)}")
        return {k: _from_plain(v, _child(path, k)) for k, v in value.items()}
    return value


def _fast_from_plain(value: Any) -> Any:
    """:func:`_from_plain` without path strings; raises :class:`_Slow` on anything
    unusual so the path-tracking decoder produces the error."""
    vtype = type(value)
    if vtype is str or vtype is int or vtype is float or vtype is bool or value is None:
        return value
    if vtype is list:
        return tuple([_fast_from_plain(v) for v in value])
    if vtype is dict:
        if _TAG in value:
            cls = _CLASS_CACHE.get(value[_TAG]) if type(value[_TAG]) is str else None
            fields_in = value.get(_FIELDS)
            if cls is None or len(value) != 2 or type(fields_in) is not dict:
                raise _Slow
            try:
                return cls(**{k: _fast_from_plain(v) for k, v in fields_in.items()})
            except (TypeError, ValueError) as exc:
                raise _Slow from exc
        for k in value:
            if k.startswith("!"):
                raise _Slow
        return {k: _fast_from_plain(v) for k, v in value.items()}
    raise _Slow


def _decode_plain(plain: Any, root: str) -> Any:
    try:
        return _fast_from_plain(plain)
    except _Slow:
        return _from_plain(plain, root)


def from_canonical(data: bytes, root: str = "state") -> Any:
    """Inverse of :func:`to_canonical` (raises :class:`StateDecodeError` on bad bytes)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateDecodeError(f"expected bytes, got {type(data).__name__}")
    try:
        plain = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateDecodeError(f"state bytes are not canonical JSON: {exc}") from exc
    return _decode_plain(plain, root)


def encode_state(state: object) -> bytes:
    """Versioned canonical bytes of a :class:`~streams.core.engine.SessionState`."""
    from streams.core.engine import SessionState

    if not isinstance(state, SessionState):
        raise UnserializableError("state", f"expected SessionState, got {type(state).__name__}")
    envelope = {"format": STATE_FORMAT, "version": STATE_VERSION, "state": state}
    return _dumps(_plain(envelope, ""), "", envelope)


def decode_state(data: bytes) -> Any:
    """Rebuild the :class:`SessionState` that :func:`encode_state` wrote.

    Raises :class:`StateDecodeError` for garbage, another format, an unknown
    version, or a payload that is not a SessionState.
    """
    from streams.core.engine import SessionState

    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateDecodeError(f"expected bytes, got {type(data).__name__}")
    try:
        plain = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateDecodeError(
            f"state bytes are not canonical JSON ({exc}); not written by encode_state"
        ) from exc
    if not isinstance(plain, dict) or plain.get("format") != STATE_FORMAT:
        raise StateDecodeError(f"not a session state: expected format {STATE_FORMAT!r}")
    version = plain.get("version")
    if version != STATE_VERSION:
        raise StateDecodeError(
            f"unknown state version {version!r} (this build reads version {STATE_VERSION}); "
            "rebuild the state by replaying the session's events"
        )
    if set(plain) != {"format", "version", "state"}:
        raise StateDecodeError(f"unexpected envelope keys {sorted(plain)}")
    state = _decode_plain(plain["state"], "state")
    if not isinstance(state, SessionState):
        raise StateDecodeError(f"state payload is a {type(state).__name__}, not a SessionState")
    return state


__all__ = [
    "STATE_FORMAT",
    "STATE_VERSION",
    "decode_state",
    "encode_state",
    "from_canonical",
    "to_canonical",
]
