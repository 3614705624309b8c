"""JSON text without ``json.dumps``' per-call set-up: :func:`compiled_encoder`.

Why: ``json.dumps(value, **settings)`` builds a ``JSONEncoder``, then
``JSONEncoder.encode`` -> ``iterencode`` builds the C encoder, for every value.
For the small values the hot paths encode (a tool call's arguments in the core,
an event's canonical text in the worker, each per event) that set-up costs more
than the encoding itself (~1 us of ~3).  A compiled encoder builds the C encoder
``iterencode`` would build, with the same arguments and a fresh
circular-reference table per call, and calls it directly.

Invariant: ``compiled_encoder(enc)(value) == enc.encode(value)`` for every value,
including the exception raised (``TypeError``, ``ValueError`` for NaN without
``allow_nan`` or a circular reference, ``RecursionError``); without CPython's C
accelerator it *is* ``enc.encode``.  tests/unit/core/test_jsontext.py and the
callers' own property tests pin it against ``json.dumps``.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any, Final

__all__ = ["compiled_encoder"]

_C_MAKE_ENCODER: Final[Any] = getattr(json.encoder, "c_make_encoder", None)


def compiled_encoder(encoder: json.JSONEncoder) -> Callable[[object], str]:
    """A function giving ``encoder.encode(value)``, without its per-call set-up.

    ``encoder`` must not indent (the C encoder does not) and must not be a
    subclass that overrides ``encode`` or ``iterencode`` (their behaviour would be
    bypassed); both raise ``ValueError`` here, at set-up, rather than giving other
    text later.  Its ``default`` is read once: give it at construction.
    """
    if encoder.indent is not None:
        raise ValueError("compiled_encoder: an indenting encoder has no C fast path")
    cls = type(encoder)
    base = json.JSONEncoder
    if cls.encode is not base.encode or cls.iterencode is not base.iterencode:
        raise ValueError(f"compiled_encoder: {cls.__name__} overrides encode/iterencode")
    if _C_MAKE_ENCODER is None:
        return encoder.encode
    escape: Any = (
        json.encoder.encode_basestring_ascii
        if encoder.ensure_ascii
        else json.encoder.encode_basestring
    )
    make = _C_MAKE_ENCODER
    circular = encoder.check_circular
    # (markers, default, encoder, indent, key_separator, item_separator, sort_keys,
    # skipkeys, allow_nan): what JSONEncoder.iterencode passes for a one-shot encode
    args = (
        encoder.default,
        escape,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )

    def encode(value: object) -> str:
        if isinstance(value, str):
            return str(escape(value))
        return "".join(make({} if circular else None, *args)(value, 0))

    encode.__doc__ = f"``{encoder!r}.encode(value)`` (see :func:`compiled_encoder`)."
    return encode
