"""JSON text for the ``input_json`` / ``output_json`` / ``*_json`` Avro fields.

Why a walker: ``json.dumps`` reports *what* failed (``Object of type set is not
JSON serializable``) but not *where*; in a tool input that is dozens of levels
deep that is useless.  :func:`find_unencodable` walks the value and names the
first bad leaf with a path like ``input.args[2]`` or ``input.env["PATH"]``.

Rules (the same ones the core's :class:`~streams.core.events.JsonValue` states):
``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list``/``tuple`` and
``dict`` with ``str`` keys.  Everything else -- sets, bytes, functions, NaN and
infinities, non-``str`` keys, cycles -- is rejected with
:class:`~streams.core.errors.UnserializableError` naming the path.  Nothing is
coerced silently (a tuple is accepted as a JSON array because that is lossless
for JSON readers).
"""

from __future__ import annotations

import json
import math
from typing import Any

from streams.core.errors import UnserializableError


def _key_path(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def find_unencodable(value: Any, root: str) -> tuple[str, str] | None:
    """``(path, reason)`` of the first value that is not plain JSON, else ``None``.

    Iterative (no recursion limit for deep inputs) and cycle-aware.
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


__all__ = ["check_json", "dumps_json", "find_unencodable"]
