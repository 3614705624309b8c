"""mini-swe-agent ``.traj.json``: ``{"messages": [...], "info": {...}, "instance_id"}``.

Mapping:

* ``system`` message: not an event (it is the harness prompt, the same for every run);
* first ``user`` message → ``message`` and the session's task (``session_start``
  metadata ``task``);
* ``assistant`` turn → ``model_step`` (the THOUGHT text; tokens from
  ``extra.response.usage``) and, when it holds exactly one ```` ```bash ```` block, a
  ``tool_call`` of tool ``bash`` with ``{"command": ...}``.  Zero or several blocks
  is a format error in mini-swe-agent: no call is made;
* the next ``user`` turn answers the pending call → ``tool_result``:
  ``<returncode>N</returncode>`` with ``is_error = N != 0``; a timeout notice
  ("The last command ... timed out") is an error; any other answer (the final
  submission diff) is a successful result.  A ``user`` turn with no pending call
  (the harness' "Please always provide EXACTLY ONE action" complaint) → ``error``
  without ``call_id`` (an agent-level error).

Event time: ``extra.response.created`` (Unix seconds) of each assistant turn; a
tool's result is stamped with the next assistant turn's time (when the agent
saw it).  Turns without ``created`` advance the clock by 1 s.  ``info.exit_status``
and ``info.model_stats`` go to the ``session_end`` metadata, ``resolved=unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from streams.core.events import META_TASK, TraceEvent
from streams.errors import ImportFormatError
from streams.importers._common import (
    SYNTHETIC_BASE_MS,
    SYNTHETIC_STEP_MS,
    SessionWriter,
    as_int,
    file_stem,
    meta,
    summarize,
)

FORMAT = "mini-swe-agent"

_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RETURNCODE = re.compile(r"^\s*<returncode>(-?\d+)</returncode>")
_TIMEOUT = re.compile(r"^\s*The last command .* timed out", re.DOTALL)


def sniff(doc: object) -> bool:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("messages"), list):
        return False
    fmt = doc.get("trajectory_format")
    if isinstance(fmt, str) and fmt.startswith("mini-swe-agent"):
        return True
    info = doc.get("info")
    if isinstance(info, Mapping) and "mini_version" in info:
        return True
    return any(
        isinstance(m, Mapping)
        and m.get("role") == "user"
        and isinstance(m.get("content"), str)
        and _RETURNCODE.match(m["content"]) is not None
        for m in doc["messages"]
    )


def _content_text(content: object) -> str:
    """Message content as text (a string, or a list of ``{"type": "text"}`` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def _created_ms(message: Mapping[str, Any]) -> int | None:
    extra = message.get("extra")
    if not isinstance(extra, Mapping):
        return None
    response = extra.get("response")
    if not isinstance(response, Mapping):
        return None
    created = response.get("created")
    if isinstance(created, (int, float)) and not isinstance(created, bool):
        return int(created * 1000)
    return None


def _usage(message: Mapping[str, Any]) -> tuple[int | None, int | None]:
    extra = message.get("extra")
    response = extra.get("response") if isinstance(extra, Mapping) else None
    usage = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(usage, Mapping):
        return None, None
    return as_int(usage.get("prompt_tokens")), as_int(usage.get("completion_tokens"))


def _thought(content: str) -> str:
    block = content.find("```bash")
    text = content[:block] if block >= 0 else content
    text = text.strip()
    return text[len("THOUGHT:") :].strip() if text.startswith("THOUGHT:") else text


def read(doc: object, path: Path) -> Iterator[TraceEvent]:
    if not sniff(doc):
        raise ImportFormatError(str(path), "not a mini-swe-agent .traj.json (no messages[])")
    assert isinstance(doc, Mapping)
    messages: Sequence[Any] = doc["messages"]
    info = doc.get("info") or {}
    if not isinstance(info, Mapping):
        raise ImportFormatError(str(path), "info: expected an object")
    instance = doc.get("instance_id")
    created = [c for m in messages if isinstance(m, Mapping) and (c := _created_ms(m)) is not None]
    start = created[0] if created else SYNTHETIC_BASE_MS
    w = SessionWriter(
        instance if isinstance(instance, str) and instance else file_stem(path), start
    )
    task: str | None = None
    for m in messages:
        if isinstance(m, Mapping) and m.get("role") == "user":
            task = _content_text(m.get("content"))
            break
    stats = info.get("model_stats")
    stats = stats if isinstance(stats, Mapping) else {}
    config = info.get("config")
    model_name = None
    if isinstance(config, Mapping) and isinstance(config.get("model"), Mapping):
        model_name = config["model"].get("model_name")
    w.emit(
        "session_start",
        start,
        metadata=meta(
            {
                "source_format": FORMAT,
                "instance_id": instance,
                "mini_version": info.get("mini_version"),
                "model": model_name,
                META_TASK: task,
            }
        ),
    )
    pending: tuple[str, str] | None = None  # (call_id, command) awaiting its result
    seen_task = False
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise ImportFormatError(str(path), f"{where}: expected an object")
        role = m.get("role")
        content = _content_text(m.get("content"))
        if role == "system":
            continue
        if role == "assistant":
            ts = _created_ms(m)
            if ts is None:
                ts = w.last_ms + SYNTHETIC_STEP_MS
            if pending is not None:
                # The agent acted again before any answer arrived: the call completed
                # without output (the contract's rule for a call without a result).
                pending = None
            tokens_in, tokens_out = _usage(m)
            w.emit(
                "model_step",
                ts,
                text=_thought(content),
                input_tokens=tokens_in,
                output_tokens=tokens_out,
            )
            blocks = _BASH_BLOCK.findall(content)
            if len(blocks) == 1:
                command = blocks[0].strip()
                call_id = w.unique_call_id(f"step-{i}")
                w.emit(
                    "tool_call",
                    ts,
                    call_id=call_id,
                    tool_name="bash",
                    input={"command": command},
                    params_summary=summarize(command),
                )
                pending = (call_id, command)
            continue
        if role == "user":
            if not seen_task:
                seen_task = True
                w.emit("message", start, text=content, metadata={"role": "user"})
                continue
            ts = _next_created(messages, i)
            if pending is None:
                w.emit(
                    "error",
                    ts,
                    text=content,
                    error_message=summarize(content),
                    metadata={"role": "user", "kind": "format_error"},
                )
                continue
            call_id, _command = pending
            pending = None
            rc_match = _RETURNCODE.match(content)
            if rc_match:
                rc = int(rc_match.group(1))
                failed = rc != 0
                message = f"returncode {rc}" if failed else None
            elif _TIMEOUT.match(content):
                failed, message, rc = True, "timed out", None
            else:
                failed, message, rc = False, None, None
            w.emit(
                "tool_result",
                ts,
                call_id=call_id,
                tool_name="bash",
                output=content,
                is_error=failed,
                error_message=message,
                metadata=meta({"returncode": rc}),
            )
            continue
        raise ImportFormatError(
            str(path), f"{where}.role: {role!r} is not system, user or assistant"
        )
    w.emit(
        "session_end",
        w.last_ms,
        metadata=meta(
            {
                "source_format": FORMAT,
                "exit_status": info.get("exit_status"),
                "resolved": "unknown",
                "instance_cost": stats.get("instance_cost"),
                "api_calls": as_int(stats.get("api_calls")),
            }
        ),
    )
    yield from w.events


def _next_created(messages: Sequence[Any], index: int) -> int | None:
    """Time of the next assistant turn after *index* (when the agent saw the answer)."""
    for m in messages[index + 1 :]:
        if isinstance(m, Mapping) and m.get("role") == "assistant":
            return _created_ms(m)
    return None


__all__ = ["FORMAT", "read", "sniff"]
