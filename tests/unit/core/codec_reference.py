"""The state encoder as it was before the fragment writer (the codec tests' reference).

A walk to plain dicts (copied verbatim, so a change to ``streams.core.statecodec``
cannot move the reference with it), else the module's path-tracking walk, then
``json.dumps``.  Used by ``test_codec.py`` and ``tests/bench/bench_codec.py``.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

from streams.core import statecodec as codec
from streams.core.engine import SessionState
from streams.core.errors import UnserializableError


def _old_fast_plain(value: object, active: set[int]) -> Any:
    vtype = type(value)
    if vtype is str or vtype is int or vtype is bool or value is None:
        return value
    if vtype is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise codec._Slow
        return value
    ident = id(value)
    if ident in active:
        raise codec._Slow
    if vtype is tuple or vtype is list:
        active.add(ident)
        arr = [_old_fast_plain(v, active) for v in value]  # type: ignore[attr-defined]
        active.discard(ident)
        return arr if vtype is tuple else {"!list": arr}
    if vtype is dict:
        active.add(ident)
        out: dict[str, Any] = {}
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str or k.startswith("!"):
                raise codec._Slow
            out[k] = _old_fast_plain(v, active)
        active.discard(ident)
        return out
    if vtype is timedelta:
        td: Any = value
        return {"!td": [td.days, td.seconds, td.microseconds]}
    info = codec._CLASS_INFO.get(vtype)
    if info is not None and info[0] is not None:
        active.add(ident)
        fields_out = {n: _old_fast_plain(getattr(value, n), active) for n in info[1]}
        active.discard(ident)
        return {"!t": info[0], "!f": fields_out}
    raise codec._Slow


def reference_canonical(value: object, root: str = "state") -> bytes:
    """What ``to_canonical`` returned before the fragment writer."""
    try:
        plain = _old_fast_plain(value, set())
    except codec._Slow:
        plain = codec._to_plain(value, root, set())
    text = json.dumps(
        plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = codec._find_unencodable(value, root, set())
        raise UnserializableError(
            bad or root, "string is not valid Unicode (lone surrogate)"
        ) from exc


def reference_encode_state(state: SessionState) -> bytes:
    envelope = {"format": codec.STATE_FORMAT, "version": codec.STATE_VERSION, "state": state}
    return reference_canonical(envelope, "")


__all__ = ["reference_canonical", "reference_encode_state"]
