"""OpenHands evaluation output: JSON Lines, one run per line with ``history[]``.

Mapping of ``history`` entries (each has an ISO ``timestamp``, naive = UTC):

* ``action: system`` (the harness prompt) and the ``recall`` plumbing
  (``action: recall`` / ``observation: recall``, workspace context lookups by the
  runtime, not the agent) are not events;
* ``source: user, action: message`` → ``message`` (the first one is the task);
  ``source: agent, action: message`` → ``message``; ``action: finish`` →
  ``message`` with ``metadata.finish = "true"`` and ``task_completed``;
* every other agent action (``run``, ``read``, ``edit``, ``think``, ``browse``, ...)
  → a ``model_step`` (the agent's thought and the LLM response's token usage,
  counted once per LLM response even when it made several calls) and a
  ``tool_call`` whose tool is the action name and whose input is ``args``;
* an observation whose ``cause`` is such an action → its ``tool_result``:
  ``is_error`` when ``extras.metadata.exit_code`` is non-zero (``run``) or the
  content starts with ``ERROR:`` (the file editor's failures);
* ``observation: error`` (no cause: OpenHands rejected a malformed tool call)
  → ``error`` without ``call_id``.

Session id = ``instance_id``.  ``session_end`` metadata holds the run's ``error``
(e.g. the maximum-iteration stop), ``resolved=unknown`` and the accumulated token
usage from ``metrics``; the accumulated usage also becomes a ``budget`` event.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from streams.core.events import META_TASK, Budget, TraceEvent
from streams.core.jsonl import iso_to_ms
from streams.errors import ImportFormatError, InvalidEventError
from streams.importers._common import (
    SessionWriter,
    as_int,
    file_stem,
    json_value,
    meta,
    summarize,
)

FORMAT = "openhands"

_NOT_EVENTS_ACTIONS = frozenset({"system", "recall"})
_NOT_EVENTS_OBSERVATIONS = frozenset({"recall"})


def sniff_run(obj: object) -> bool:
    return (
        isinstance(obj, Mapping)
        and isinstance(obj.get("history"), list)
        and ("instance_id" in obj or "instruction" in obj or "metrics" in obj)
    )


def _ts(entry: Mapping[str, Any], where: str, path: Path) -> int:
    raw = entry.get("timestamp")
    if not isinstance(raw, str):
        raise ImportFormatError(str(path), f"{where}.timestamp: expected an ISO-8601 string")
    try:
        return iso_to_ms(raw, field=f"{where}.timestamp")
    except InvalidEventError as exc:
        raise ImportFormatError(str(path), str(exc)) from exc


def _usage(entry: Mapping[str, Any]) -> tuple[str | None, int | None, int | None]:
    tcm = entry.get("tool_call_metadata")
    if not isinstance(tcm, Mapping):
        return None, None, None
    response = tcm.get("model_response")
    if not isinstance(response, Mapping):
        return None, None, None
    usage = response.get("usage")
    rid = response.get("id")
    if not isinstance(usage, Mapping):
        return (rid if isinstance(rid, str) else None), None, None
    return (
        rid if isinstance(rid, str) else None,
        as_int(usage.get("prompt_tokens")),
        as_int(usage.get("completion_tokens")),
    )


def _params_summary(action: str, params: Mapping[str, Any]) -> str:
    """What identifies the call: the command run, the file read, the edit made."""
    if action == "run" and isinstance(params.get("command"), str):
        return summarize(params["command"])
    if action == "read" and isinstance(params.get("path"), str):
        view = params.get("view_range")
        return summarize(f"{params['path']} {view}" if view else params["path"])
    if action == "edit":
        parts = [str(params.get(k)) for k in ("command", "path") if params.get(k)]
        old = params.get("old_str")
        if isinstance(old, str) and old:
            parts.append(f"old_str={old[:60]!r}")
        return summarize(" ".join(parts))
    return summarize(params) if params else ""


def read_run(run: object, path: Path, line: int) -> Iterator[TraceEvent]:
    where_run = f"line {line}"
    if not sniff_run(run):
        raise ImportFormatError(str(path), f"{where_run}: not an OpenHands run (no history[])")
    assert isinstance(run, Mapping)
    history: Sequence[Any] = run["history"]
    instance = run.get("instance_id")
    sid = instance if isinstance(instance, str) and instance else f"{file_stem(path)}-{line}"
    first_ts = None
    for entry in history:
        if isinstance(entry, Mapping) and "timestamp" in entry:
            first_ts = _ts(entry, f"{where_run}.history[0]", path)
            break
    if first_ts is None:
        raise ImportFormatError(str(path), f"{where_run}.history: no entry has a timestamp")
    w = SessionWriter(sid, first_ts)
    metadata = run.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    llm = metadata.get("llm_config")
    instruction = run.get("instruction")
    w.emit(
        "session_start",
        first_ts,
        metadata=meta(
            {
                "source_format": FORMAT,
                "instance_id": instance,
                "agent_class": metadata.get("agent_class"),
                "model": llm.get("model") if isinstance(llm, Mapping) else None,
                "max_iterations": as_int(metadata.get("max_iterations")),
                META_TASK: instruction if isinstance(instruction, str) else None,
            }
        ),
    )
    calls: dict[int, tuple[str, str]] = {}  # action id -> (call_id, tool)
    seen_responses: set[str] = set()
    for i, entry in enumerate(history):
        where = f"{where_run}.history[{i}]"
        if not isinstance(entry, Mapping):
            raise ImportFormatError(str(path), f"{where}: expected an object")
        ts = _ts(entry, where, path)
        action = entry.get("action")
        observation = entry.get("observation")
        source = entry.get("source")
        if isinstance(action, str):
            if action in _NOT_EVENTS_ACTIONS:
                continue
            args = entry.get("args")
            args = args if isinstance(args, Mapping) else {}
            if action == "message":
                text = args.get("content", entry.get("message"))
                w.emit(
                    "message",
                    ts,
                    text=str(text or ""),
                    metadata={"role": "user" if source == "user" else "assistant"},
                )
                continue
            if action == "finish":
                text = args.get("final_thought") or args.get("thought") or entry.get("message")
                w.emit(
                    "message",
                    ts,
                    text=str(text or ""),
                    metadata=meta(
                        {
                            "role": "assistant",
                            "finish": "true",
                            "task_completed": args.get("task_completed"),
                        }
                    ),
                )
                continue
            if source != "agent":
                raise ImportFormatError(
                    str(path), f"{where}.action: unexpected {action!r} from source {source!r}"
                )
            rid, tokens_in, tokens_out = _usage(entry)
            if rid is not None and rid in seen_responses:
                tokens_in = tokens_out = None
            if rid is not None:
                seen_responses.add(rid)
            thought = args.get("thought")
            w.emit(
                "model_step",
                ts,
                text=thought if isinstance(thought, str) else None,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
            )
            tcm = entry.get("tool_call_metadata")
            raw_id = tcm.get("tool_call_id") if isinstance(tcm, Mapping) else None
            call_id = w.unique_call_id(raw_id if isinstance(raw_id, str) else f"action-{i}")
            params = {k: v for k, v in args.items() if k not in ("thought",)}
            eid = as_int(entry.get("id"))
            if eid is not None:
                calls[eid] = (call_id, action)
            w.emit(
                "tool_call",
                ts,
                call_id=call_id,
                tool_name=action,
                input=json_value(params),
                params_summary=_params_summary(action, params),
            )
            continue
        if isinstance(observation, str):
            if observation in _NOT_EVENTS_OBSERVATIONS:
                continue
            content = entry.get("content")
            content = content if isinstance(content, str) else str(entry.get("message") or "")
            cause = as_int(entry.get("cause"))
            if cause is None or cause not in calls:
                if observation == "error":
                    w.emit("error", ts, text=content, error_message=summarize(content))
                    continue
                raise ImportFormatError(
                    str(path),
                    f"{where}.cause: observation {observation!r} answers no "
                    "known action (cause missing or unknown)",
                )
            call_id, tool = calls.pop(cause)
            extras = entry.get("extras")
            extras = extras if isinstance(extras, Mapping) else {}
            md = extras.get("metadata")
            exit_code = as_int(md.get("exit_code")) if isinstance(md, Mapping) else None
            failed = (
                (exit_code is not None and exit_code != 0)
                or observation == "error"
                or (content.lstrip().startswith("ERROR:"))
            )
            if exit_code not in (None, 0):
                err: str | None = f"exit code {exit_code}"
            elif failed:
                err = summarize(content)
            else:
                err = None
            w.emit(
                "tool_result",
                ts,
                call_id=call_id,
                tool_name=tool,
                output=content,
                is_error=failed,
                error_message=err,
                metadata=meta({"exit_code": exit_code}),
            )
            continue
        raise ImportFormatError(str(path), f"{where}: neither an action nor an observation")
    metrics = run.get("metrics")
    metrics = metrics if isinstance(metrics, Mapping) else {}
    acc = metrics.get("accumulated_token_usage")
    acc = acc if isinstance(acc, Mapping) else {}
    prompt = as_int(acc.get("prompt_tokens"))
    completion = as_int(acc.get("completion_tokens"))
    if prompt is not None or completion is not None:
        w.emit("budget", w.last_ms, budget=Budget(tokens_used=(prompt or 0) + (completion or 0)))
    error = run.get("error")
    w.emit(
        "session_end",
        w.last_ms,
        metadata=meta(
            {
                "source_format": FORMAT,
                "error": error if isinstance(error, str) else None,
                "exit_status": "error" if isinstance(error, str) and error else "finished",
                "resolved": "unknown",
                "accumulated_cost": metrics.get("accumulated_cost"),
                "prompt_tokens": prompt,
                "completion_tokens": completion,
            }
        ),
    )
    yield from w.events


__all__ = ["FORMAT", "read_run", "sniff_run"]
