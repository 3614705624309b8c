"""JSON text for the ``input_json`` / ``output_json`` / ``*_json`` Avro fields.

Why a walker: ``json.dumps`` reports *what* failed (``Object of type set is not
JSON serializable``) but not *where*; in a tool input that is dozens of levels
deep that is useless.  :func:`find_unencodable` walks the value and names the
first bad leaf with a path like ``input.args[2]`` or ``input.env["PATH"]``.

Rules (the same ones the core's :class:`~streams.core.events.JsonValue` states):
``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list``/``tuple`` and
``dict`` with ``str`` keys, nested at most :data:`MAX_JSON_DEPTH` containers
deep.  Everything else -- sets, bytes, functions, NaN and infinities, non-``str``
keys, cycles, deeper nesting -- is rejected with
:class:`~streams.errors.UnserializableError` naming the path.  Nothing is
coerced silently (a tuple is accepted as a JSON array because that is lossless
for JSON readers).

Decoding (:func:`loads_json`) applies the same rules to a JSON *text* read off
the wire, and is total: every way the text can be wrong (invalid JSON, NaN or
Infinity, a number that overflows to infinity, a lone surrogate escape, nesting
deeper than :data:`MAX_JSON_DEPTH`) is a
:class:`~streams.errors.MalformedMessageError` naming the field, never a
``RecursionError`` or a value the worker's state codec cannot encode later.
What the SDK accepts (:func:`check_json`) the decoder accepts, and what the
decoder accepts the worker can encode: one rule, one depth limit.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any, Final

from streams.errors import MalformedMessageError, UnserializableError

#: Deepest nesting of JSON containers (arrays/objects) accepted anywhere: by the
#: SDK when it encodes, by the serde when it decodes (router and worker).  ``[]``
#: is 1 level, ``[[1]]`` 2.  Why 64: real tool inputs/outputs are a handful of
#: levels deep; the worker's state codec (streams.core.statecodec) writes and reads a
#: session state recursively (a few Python frames per level, under Python's
#: default recursion limit of 1,000), with the event's value nested ~10 records
#: below the state's root; 64 keeps a wide margin, and a deeper text is rejected
#: before ``json.loads`` recurses into it.
MAX_JSON_DEPTH: Final = 64


def _key_path(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def find_unencodable(
    value: Any, root: str, max_depth: int = MAX_JSON_DEPTH
) -> tuple[str, str] | None:
    """``(path, reason)`` of the first value that is not plain JSON, else ``None``.

    Iterative (no recursion limit for deep inputs), cycle-aware, and bounded: a
    container nested deeper than ``max_depth`` is reported at its path (so a cycle
    or a 100,000-deep value costs at most ``max_depth`` levels of walking).
    """
    stack: list[tuple[Any, str]] = [(value, root)]
    # ids of containers on the current path -> detect cycles, allow shared refs.
    active: dict[int, str] = {}
    exit_marker = object()
    while stack:
        item, path = stack.pop()
        if item is exit_marker:
            active.pop(int(path), None)
            continue
        if item is None or isinstance(item, (bool, str, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return path, f"{item!r} is not valid JSON (NaN/Infinity are not allowed)"
            continue
        if isinstance(item, (list, tuple, dict)):
            ident = id(item)
            if ident in active:
                return path, f"cycle: this container is also at {active[ident]}"
            if len(active) >= max_depth:
                return path, (
                    f"nested deeper than {max_depth} levels (JSON arrays/objects; "
                    "flatten the value or pass a summary)"
                )
            active[ident] = path
            stack.append((exit_marker, str(ident)))
            if isinstance(item, dict):
                children: list[tuple[Any, str]] = []
                for key, child in item.items():
                    if not isinstance(key, str):
                        return (
                            f"{path}[{key!r}]",
                            f"dict key of type {type(key).__name__}; JSON object keys must be str",
                        )
                    children.append((child, _key_path(path, key)))
                stack.extend(reversed(children))
            else:
                stack.extend(
                    (child, f"{path}[{i}]") for i, child in reversed(list(enumerate(item)))
                )
            continue
        kind = type(item).__name__
        hint = " (decode bytes to str first)" if isinstance(item, (bytes, bytearray)) else ""
        return path, f"{kind} is not a JSON value{hint}"
    return None


def check_json(value: Any, root: str) -> None:
    """Raise :class:`UnserializableError` naming the path if ``value`` is not plain JSON."""
    bad = find_unencodable(value, root)
    if bad is not None:
        raise UnserializableError(bad[0], bad[1])


def dumps_json(value: Any, root: str) -> str:
    """Compact JSON text of ``value`` (UTF-8 kept, key order kept as given).

    The value is walked first: ``json.dumps`` would silently turn ``{1: "x"}`` into
    ``{"1": "x"}`` (the round trip would then differ), so non-``str`` keys, like
    every other non-JSON value, are an :class:`UnserializableError` naming the path.
    """
    check_json(value, root)
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnserializableError(root, str(exc)) from exc


# ------------------------------------------------------------------ decoding

#: A JSON string literal (what json.loads would read as one), escapes included.
_STRING: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
#: Depth change of each container bracket.
_BRACKET_DELTA: Final = {"[": 1, "{": 1, "]": -1, "}": -1}
#: A \uD800-\uDFFF escape: json.loads turns a lone one into a lone surrogate,
#: which no UTF-8 encoder (the worker's state codec included) can write.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
_BRACKETS: Final = re.compile(r"[\[\]{}]")


def json_depth_exceeds(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """True when ``text`` nests containers deeper than ``max_depth`` levels.

    Cheap and non-recursive, so it can run *before* ``json.loads`` (whose C
    scanner recurses once per level: 200,000 levels raise ``RecursionError``, and
    fewer still cost stack).  Brackets inside string literals do not count.  For
    a text that is not valid JSON the answer may be too high, never too low for
    the part ``json.loads`` would read before failing: it scans left to right
    with the same string rules.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return False  # fast path: not enough containers to be that deep
    if '"' in text:
        text = _STRING.sub("", text)
    brackets = _BRACKETS.findall(text)
    if len(brackets) <= max_depth:
        return False
    return max(accumulate(map(_BRACKET_DELTA.__getitem__, brackets))) > max_depth


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (NaN/Infinity are not allowed)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} does not fit a finite double")
    return value


#: One decoder for every text: ``json.loads`` with keyword arguments builds a new
#: ``JSONDecoder`` (and its scanner) per call, a third of the cost of a small text.
_DECODER: Final = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def loads_json(text: str, field: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse a JSON text read off the wire, totally (see the module docstring).

    Raises :class:`MalformedMessageError` whose message starts with ``field``
    (e.g. ``input_json: nested deeper than 64 levels``) for every bad text; the
    result is always a value :func:`check_json` accepts.
    """
    if not isinstance(text, str):
        raise MalformedMessageError(f"{field}: expected a JSON text, got {type(text).__name__}")
    if json_depth_exceeds(text, max_depth):
        raise MalformedMessageError(
            f"{field}: nested deeper than {max_depth} levels (JSON arrays/objects); "
            "the publisher must flatten or summarize it"
        )
    try:
        if text.startswith("\ufeff"):  # what json.loads refuses before decoding
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _DECODER.decode(text)
    except RecursionError as exc:  # not expected after the depth check; never escape
        raise MalformedMessageError(f"{field}: nested too deep to parse") from exc
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, huge float, huge int
        raise MalformedMessageError(f"{field} is not valid JSON text: {exc}") from exc
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        # Paired escapes decode to one character; a lone one leaves a surrogate.
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise MalformedMessageError(
                f"{field}: a \\u escape is a lone UTF-16 surrogate (not a character)"
            ) from exc
    return value


__all__ = [
    "MAX_JSON_DEPTH",
    "check_json",
    "dumps_json",
    "find_unencodable",
    "json_depth_exceeds",
    "loads_json",
]
