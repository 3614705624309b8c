"""Payload checks of the publisher: JSON validity, size caps, privacy summaries.

Pure functions (no Kafka): they run before anything is sent, so a bad value fails
in the caller's frame with the field path (``input.args[2]``), never in a
delivery callback and never silently.

The JSON walker itself lives in :mod:`streams.serde.jsontext` (the serde needs the
same rule when it encodes); this module adds the publisher's policies on top.

Truncation (``on_oversize="truncate"``, the default): when the compact JSON text
of an input/output is larger than ``max_payload_bytes`` (UTF-8 bytes), the value
is replaced by a *valid JSON summary*::

    {"_truncated": true, "original_bytes": 123456, "original_type": "object",
     "preview": "<the first bytes of the JSON text>"}

and ``metadata["input_truncated"]`` / ``metadata["output_truncated"]`` is set to
``"true"``.  The summary itself always fits the cap (the preview is shortened to
make room).  ``on_oversize="raise"`` raises
:class:`~streams.errors.OversizedMessageError` naming the field instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from streams.core.events import JsonValue
from streams.errors import InvalidEventError, OversizedMessageError
from streams.serde.jsontext import check_json, dumps_json

OnOversize = Literal["truncate", "raise"]
ON_OVERSIZE: Final[tuple[str, ...]] = ("truncate", "raise")

#: Longest ``params_summary`` the SDK derives (characters, an ellipsis included).
SUMMARY_MAX_CHARS: Final = 80
#: Input keys that best describe a call, in order of preference.
SUMMARY_KEYS: Final[tuple[str, ...]] = (
    "command",
    "cmd",
    "path",
    "file_path",
    "filename",
    "file",
    "url",
    "query",
    "pattern",
    "code",
)
#: Smallest cap that leaves room for a truncation summary with some preview.
MIN_PAYLOAD_BYTES: Final = 256


def check_on_oversize(value: str) -> OnOversize:
    if value not in ON_OVERSIZE:
        raise InvalidEventError("on_oversize", f"{value!r}: use 'truncate' or 'raise'")
    return "raise" if value == "raise" else "truncate"


def _abbreviate(text: str, limit: int = SUMMARY_MAX_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summarize_params(value: JsonValue, root: str = "input") -> str | None:
    """An abbreviated, human-readable description of a tool input (<= 80 chars).

    A string input is used as is; for an object the first of :data:`SUMMARY_KEYS`
    present wins (a command line, a path ...); otherwise compact JSON.

    The value is checked first (:func:`~streams.serde.jsontext.check_json`): this
    runs before the payload checks of ``Session._emit``, and ``json.dumps`` would
    raise ``ValueError`` for a cycle and ``RecursionError`` for deep nesting, or
    quietly ``str()`` a set.  So a bad value raises
    :class:`~streams.errors.UnserializableError` naming its path, as the
    publisher promises, whatever the privacy mode.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return _abbreviate(value)
    check_json(value, root)
    if isinstance(value, Mapping):
        for key in SUMMARY_KEYS:
            found = value.get(key)
            if isinstance(found, str) and found.strip():
                return _abbreviate(found)
            if isinstance(found, list) and found:
                words = [x for x in found if isinstance(x, str)]
                if len(words) == len(found):
                    return _abbreviate(" ".join(words))
    return _abbreviate(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _json_type(value: JsonValue) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def cap_payload(
    value: JsonValue, root: str, max_bytes: int, on_oversize: OnOversize
) -> tuple[JsonValue, bool]:
    """Validate ``value`` as JSON and apply the size cap.

    Returns ``(value_to_send, truncated)``.  Raises
    :class:`~streams.errors.UnserializableError` (with the path) for a value
    that is not plain JSON, :class:`OversizedMessageError` when it is too big and
    ``on_oversize == "raise"``.
    """
    if value is None:
        return None, False
    text = dumps_json(value, root)
    size = len(text.encode("utf-8"))
    if size <= max_bytes:
        return value, False
    if on_oversize == "raise":
        raise OversizedMessageError(
            f"{root}: {size} bytes of JSON exceed max_payload_bytes={max_bytes} "
            "(raise TRAJECTORY_MAX_PAYLOAD_BYTES, or use on_oversize='truncate')"
        )
    summary: dict[str, JsonValue] = {
        "_truncated": True,
        "original_bytes": size,
        "original_type": _json_type(value),
        "preview": "",
    }
    room = max_bytes - len(dumps_json(summary, root).encode("utf-8"))
    if room <= 0:
        raise OversizedMessageError(
            f"{root}: max_payload_bytes={max_bytes} is too small to hold even a truncation "
            f"summary; use at least {MIN_PAYLOAD_BYTES}"
        )
    # Shrink until the escaped preview fits (escaping can grow the text).
    preview = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    while True:
        summary["preview"] = preview
        if len(dumps_json(summary, root).encode("utf-8")) <= max_bytes:
            return summary, True
        over = len(dumps_json(summary, root).encode("utf-8")) - max_bytes
        preview = preview[: max(0, len(preview) - max(over, 1))]


def as_str_metadata(metadata: Mapping[str, Any] | None, root: str = "metadata") -> dict[str, str]:
    """Metadata must be ``str -> str``; anything else is an error naming the key."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidEventError(root, f"expected a mapping, got {type(metadata).__name__}")
    out: dict[str, str] = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise InvalidEventError(f"{root}[{key!r}]", "metadata keys must be str")
        if not isinstance(value, str):
            raise InvalidEventError(
                f"{root}[{key!r}]",
                f"metadata values must be str, got {type(value).__name__} (json.dumps it first)",
            )
        out[key] = value
    return out


__all__ = [
    "MIN_PAYLOAD_BYTES",
    "ON_OVERSIZE",
    "SUMMARY_KEYS",
    "SUMMARY_MAX_CHARS",
    "OnOversize",
    "as_str_metadata",
    "cap_payload",
    "check_on_oversize",
    "summarize_params",
]
