"""OpenAI chat transcripts with tool calls (tau-bench's historical trajectories).

Accepted shapes: a run ``{"traj": [messages], "task_id", "reward", "info", "trial"}``,
a JSON array of such runs (the tau-bench file), ``{"messages": [...]}``, or a bare
array of chat messages (one run).

Mapping per message:

* ``system``: not an event (the policy prompt, identical across runs);
* ``user`` → ``message`` (role user);
* ``assistant`` → ``model_step`` (its text, token ``usage`` if present) and one
  ``tool_call`` per ``tool_calls[]`` entry, tool = ``function.name``, input = the
  parsed ``function.arguments`` (kept as the raw string if it is not JSON);
* ``tool`` → ``tool_result`` for the pending call with that ``tool_call_id``
  (tau-bench reuses ids inside a run, so a reused id answers the latest call that
  has it); ``is_error`` when the content starts with ``Error:``.

No timestamps: message *i* of a run is at ``SYNTHETIC_BASE_MS + i * 1000``.
Session id: ``<file>-task<task_id>-trial<trial>`` (or ``<file>-<index>``).
``reward`` (tau-bench's success signal, 1.0 = solved) goes to both the
``session_start`` and ``session_end`` metadata, as ``reward`` and ``resolved``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from streams.core.events import META_TASK, JsonValue, TraceEvent
from streams.errors import ImportFormatError
from streams.importers._common import (
    SYNTHETIC_BASE_MS,
    SYNTHETIC_STEP_MS,
    SessionWriter,
    as_int,
    file_stem,
    json_value,
    meta,
    summarize,
)

FORMAT = "openai-chat"

_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})


def _is_message(obj: object) -> bool:
    return isinstance(obj, Mapping) and obj.get("role") in _ROLES


def _is_run(obj: object) -> bool:
    return isinstance(obj, Mapping) and (
        isinstance(obj.get("traj"), list)
        or (isinstance(obj.get("messages"), list) and "history" not in obj)
    )


def sniff(doc: object) -> bool:
    if _is_run(doc):
        assert isinstance(doc, Mapping)
        msgs = doc.get("traj") if isinstance(doc.get("traj"), list) else doc.get("messages")
        assert isinstance(msgs, list)
        return all(_is_message(m) for m in msgs[:5])
    if isinstance(doc, list) and doc:
        return all(_is_run(r) for r in doc[:3]) or all(_is_message(m) for m in doc[:5])
    return False


def _runs(doc: object) -> list[tuple[str, Mapping[str, Any] | None, Sequence[Any]]]:
    """(default name suffix, run object or None, messages) for every run in *doc*."""
    if isinstance(doc, Mapping):
        msgs = doc.get("traj") if isinstance(doc.get("traj"), list) else doc.get("messages")
        assert isinstance(msgs, list)
        return [("0", doc, msgs)]
    assert isinstance(doc, list)
    if all(_is_message(m) for m in doc):
        return [("0", None, doc)]
    out: list[tuple[str, Mapping[str, Any] | None, Sequence[Any]]] = []
    for i, run in enumerate(doc):
        if not _is_run(run):
            raise ImportFormatError("", f"[{i}]: expected a run with traj[] or messages[]")
        msgs = run.get("traj") if isinstance(run.get("traj"), list) else run.get("messages")
        out.append((str(i), run, msgs))
    return out


def _text(content: object) -> str | None:
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return json.dumps(content, sort_keys=True)


def _reward(run: Mapping[str, Any] | None) -> float | None:
    if run is None:
        return None
    value = run.get("reward")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def read(doc: object, path: Path) -> Iterator[TraceEvent]:
    if not sniff(doc):
        raise ImportFormatError(str(path), "not an OpenAI chat transcript (no traj[]/messages[])")
    try:
        runs = _runs(doc)
    except ImportFormatError as exc:
        raise ImportFormatError(str(path), str(exc).lstrip(": ")) from exc
    stem = file_stem(path)
    for suffix, run, messages in runs:
        yield from _read_run(path, stem, suffix, run, messages)


def _read_run(
    path: Path,
    stem: str,
    suffix: str,
    run: Mapping[str, Any] | None,
    messages: Sequence[Any],
) -> Iterator[TraceEvent]:
    prefix = f"[{suffix}]" if run is not None and len(suffix) else ""
    if run is not None and "task_id" in run:
        sid = f"{stem}-task{run.get('task_id')}-trial{run.get('trial', 0)}"
    else:
        sid = f"{stem}-{suffix}"
    w = SessionWriter(sid, SYNTHETIC_BASE_MS)
    reward = _reward(run)
    info = run.get("info") if run is not None else None
    task_info = info.get("task") if isinstance(info, Mapping) else None
    instruction = task_info.get("instruction") if isinstance(task_info, Mapping) else None
    outcome = {
        "reward": reward,
        "resolved": "unknown" if reward is None else ("true" if reward >= 1.0 else "false"),
    }
    w.emit(
        "session_start",
        SYNTHETIC_BASE_MS,
        metadata=meta(
            {
                "source_format": FORMAT,
                "task_id": None if run is None else run.get("task_id"),
                "trial": None if run is None else run.get("trial"),
                META_TASK: instruction if isinstance(instruction, str) else None,
                **outcome,
            }
        ),
    )
    pending: dict[str, tuple[str, str]] = {}  # source tool_call_id -> (call_id, tool)
    for i, m in enumerate(messages):
        where = f"{prefix}traj[{i}]"
        if not _is_message(m):
            raise ImportFormatError(str(path), f"{where}.role: expected one of {sorted(_ROLES)}")
        ts = SYNTHETIC_BASE_MS + (i + 1) * SYNTHETIC_STEP_MS
        role = m["role"]
        if role in ("system", "developer"):
            continue
        if role == "user":
            w.emit("message", ts, text=_text(m.get("content")) or "", metadata={"role": "user"})
            continue
        if role == "assistant":
            usage = m.get("usage")
            usage = usage if isinstance(usage, Mapping) else {}
            w.emit(
                "model_step",
                ts,
                text=_text(m.get("content")),
                input_tokens=as_int(usage.get("prompt_tokens")),
                output_tokens=as_int(usage.get("completion_tokens")),
            )
            tool_calls = m.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                raise ImportFormatError(str(path), f"{where}.tool_calls: expected a list")
            for j, tc in enumerate(tool_calls):
                fn = tc.get("function") if isinstance(tc, Mapping) else None
                name = fn.get("name") if isinstance(fn, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise ImportFormatError(
                        str(path), f"{where}.tool_calls[{j}].function.name: missing"
                    )
                raw_args = fn.get("arguments") if isinstance(fn, Mapping) else None
                args: JsonValue
                if isinstance(raw_args, str):
                    try:
                        args = json_value(json.loads(raw_args)) if raw_args.strip() else {}
                    except json.JSONDecodeError:
                        args = raw_args
                else:
                    args = json_value(raw_args)
                raw_id = tc.get("id") if isinstance(tc, Mapping) else None
                call_id = w.unique_call_id(raw_id if isinstance(raw_id, str) else None)
                if isinstance(raw_id, str):
                    pending[raw_id] = (call_id, name)
                w.emit(
                    "tool_call",
                    ts,
                    call_id=call_id,
                    tool_name=name,
                    input=args,
                    params_summary=summarize(args),
                )
            continue
        # role == "tool"
        raw_id = m.get("tool_call_id")
        content = _text(m.get("content")) or ""
        if isinstance(raw_id, str) and raw_id in pending:
            call_id, tool = pending.pop(raw_id)
        else:
            raise ImportFormatError(
                str(path), f"{where}.tool_call_id: {raw_id!r} answers no pending tool call"
            )
        failed = content.lstrip().startswith("Error:")
        w.emit(
            "tool_result",
            ts,
            call_id=call_id,
            tool_name=tool,
            output=content,
            is_error=failed,
            error_message=summarize(content) if failed else None,
        )
    w.emit(
        "session_end",
        w.last_ms + SYNTHETIC_STEP_MS,
        metadata=meta({"source_format": FORMAT, **outcome}),
    )
    yield from w.events


__all__ = ["FORMAT", "read", "sniff"]
