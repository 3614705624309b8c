"""Format detection and reading behind :func:`streams.importers.read_events`.

The formats, session-id and gzip rules are the package's (:mod:`streams.importers`);
this module is its implementation, kept out of ``__init__`` so the package namespace
holds only its public names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.core.events import AGENTV_EVENT_TYPES, EVENT_TYPES, TraceEvent
from streams.core.jsonl import event_from_json, read_jsonl
from streams.errors import ImportFormatError, InvalidEventError
from streams.importers import atif, mini_swe_agent, openai_chat, openhands, otlp, swe_agent
from streams.importers._common import file_stem, read_text, sanitize_session_id

FORMATS: tuple[str, ...] = (
    "jsonl",
    "agentv",
    "swe-agent",
    "mini-swe-agent",
    "openhands",
    "openai-chat",
    "otlp",
    "atif",
)


@dataclass(frozen=True, slots=True)
class _Parsed:
    """A file's content parsed once: a whole JSON document, or JSON Lines."""

    text: str
    doc: object = None
    is_document: bool = False
    lines: tuple[object, ...] = ()
    line_error: str | None = None


def _parse(path: Path) -> _Parsed:
    text = read_text(path)
    stripped = text.strip()
    if not stripped:
        raise ImportFormatError(str(path), "empty file: no trajectory to import")
    try:
        return _Parsed(text, json.loads(stripped), is_document=True)
    except json.JSONDecodeError:
        pass
    objs: list[object] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            objs.append(json.loads(line))
        except json.JSONDecodeError as exc:
            return _Parsed(text, line_error=f"line {lineno} is not JSON ({exc.msg})")
    return _Parsed(text, lines=tuple(objs))


def _is_our_event(obj: object) -> bool:
    return (
        isinstance(obj, Mapping)
        and obj.get("type") in EVENT_TYPES
        and "timestamp" in obj
        and ("session_id" in obj or "seq" in obj)
    )


def _is_agentv_event(obj: object) -> bool:
    return (
        isinstance(obj, Mapping)
        and obj.get("type") in AGENTV_EVENT_TYPES
        and isinstance(obj.get("timestamp"), str)
    )


def _detect(parsed: _Parsed) -> str | None:
    if parsed.is_document:
        doc = parsed.doc
        if isinstance(doc, Mapping):
            if atif.sniff(doc):
                return "atif"
            if swe_agent.sniff(doc):
                return "swe-agent"
            if mini_swe_agent.sniff(doc):
                return "mini-swe-agent"
            if otlp.sniff(doc):
                return "otlp"
            if openhands.sniff_run(doc):
                return "openhands"
            if isinstance(doc.get("trace"), list) and all(
                _is_agentv_event(e) for e in doc["trace"][:5]
            ):
                return "agentv"
            if openai_chat.sniff(doc):
                return "openai-chat"
            if _is_our_event(doc):
                return "jsonl"
            return None
        if isinstance(doc, list):
            if not doc or all(_is_agentv_event(e) for e in doc[:5]):
                return "agentv"
            if openai_chat.sniff(doc):
                return "openai-chat"
        return None
    if parsed.lines:
        first = parsed.lines[0]
        if _is_our_event(first) or _is_agentv_event(first):
            return "jsonl"
        if openhands.sniff_run(first):
            return "openhands"
        if otlp.sniff(first):
            return "otlp"
        if atif.sniff(first):
            return "atif"
    return None


def detect_format(path: str | Path) -> str:
    """The format of the file at *path*, judged from its content (gzip or not)."""
    p = Path(path)
    parsed = _parse(p)
    fmt = _detect(parsed)
    if fmt is None:
        why = f" ({parsed.line_error})" if parsed.line_error else ""
        raise ImportFormatError(
            str(p),
            f"unrecognized trajectory format{why}; tried {', '.join(FORMATS)}. "
            "Pass --format to force one, or convert the file to JSONL events.",
        )
    return fmt


def _agentv_events(doc: object, path: Path) -> Iterator[TraceEvent]:
    if isinstance(doc, Mapping):
        trace = doc.get("trace")
        sid_raw = doc.get("session_id") or doc.get("id") or file_stem(path)
    else:
        trace = doc
        sid_raw = file_stem(path)
    if not isinstance(trace, list):
        raise ImportFormatError(str(path), "trace: expected a list of AgentV TraceEvents")
    sid = sanitize_session_id(str(sid_raw))
    for i, obj in enumerate(trace):
        try:
            event = event_from_json(obj, default_session_id=sid, default_seq=i)
        except InvalidEventError as exc:
            raise ImportFormatError(str(path), f"trace[{i}].{exc}") from exc
        if event.session_id != sid or event.seq != i:
            # AgentV traces are one attempt each: one session, seq = position.
            event = TraceEvent(**{**_fields(event), "session_id": sid, "seq": i})
        yield event


def _fields(event: TraceEvent) -> dict[str, Any]:
    return {name: getattr(event, name) for name in TraceEvent.__slots__}


def _jsonl_events(parsed: _Parsed, path: Path) -> Iterator[TraceEvent]:
    try:
        yield from read_jsonl(
            parsed.text.splitlines(),
            source=str(path),
            default_session_id=sanitize_session_id(file_stem(path)),
        )
    except InvalidEventError as exc:
        raise ImportFormatError(str(path), str(exc)) from exc


def read_events(path: str | Path, format: str = "auto") -> Iterator[TraceEvent]:
    """Every event of every session in the file at *path* (see the module docstring)."""
    p = Path(path)
    if format != "auto" and format not in FORMATS:
        raise ImportFormatError(
            str(p), f"unknown format {format!r}; use auto or one of {', '.join(FORMATS)}"
        )
    parsed = _parse(p)
    fmt = format
    if fmt == "auto":
        detected = _detect(parsed)
        if detected is None:
            why = f" ({parsed.line_error})" if parsed.line_error else ""
            raise ImportFormatError(
                str(p),
                f"unrecognized trajectory format{why}; tried {', '.join(FORMATS)}. "
                "Pass --format to force one, or convert the file to JSONL events.",
            )
        fmt = detected
    if fmt == "jsonl":
        if parsed.line_error:
            raise ImportFormatError(str(p), f"format jsonl: {parsed.line_error}")
        yield from _jsonl_events(parsed, p)
        return
    if fmt == "openhands":
        runs = [parsed.doc] if parsed.is_document else list(parsed.lines)
        if parsed.line_error:
            raise ImportFormatError(str(p), f"format openhands: {parsed.line_error}")
        for lineno, run in enumerate(runs, start=1):
            yield from openhands.read_run(run, p, lineno)
        return
    if fmt in ("otlp", "atif"):
        if parsed.line_error:
            raise ImportFormatError(str(p), f"format {fmt}: {parsed.line_error}")
        docs = [parsed.doc] if parsed.is_document else list(parsed.lines)
        yield from (otlp.read(docs, p) if fmt == "otlp" else atif.read(docs, p))
        return
    if not parsed.is_document:
        why = parsed.line_error or "it holds several JSON documents"
        raise ImportFormatError(str(p), f"format {fmt}: expected one JSON document, but {why}")
    if fmt == "agentv":
        yield from _agentv_events(parsed.doc, p)
    elif fmt == "swe-agent":
        yield from swe_agent.read(parsed.doc, p)
    elif fmt == "mini-swe-agent":
        yield from mini_swe_agent.read(parsed.doc, p)
    else:
        yield from openai_chat.read(parsed.doc, p)


__all__ = ["FORMATS", "detect_format", "read_events"]
