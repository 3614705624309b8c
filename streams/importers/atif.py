"""ATIF (Harbor's Agent Trajectory Interchange Format) v1.4-v1.8: import and export.

Import (``read``): a ``Trajectory`` document (``schema_version`` ``ATIF-v1.4`` ...
``ATIF-v1.8``), or one per line.  Per step, in order:

* ``source: "user"`` / ``"system"`` → ``message`` (``metadata.role``); the first
  user message is the session's task;
* ``source: "agent"`` → ``model_step`` (text = ``message``, tokens from
  ``metrics.prompt_tokens`` / ``completion_tokens``, ``model_name``) unless
  ``llm_call_count == 0`` (a deterministic dispatch: no model step), then one
  ``tool_call`` per ``tool_calls[]`` (``tool_call_id``, ``function_name``,
  ``arguments``) and one ``tool_result`` per ``observation.results[]`` with a
  ``source_call_id`` (``content``; multimodal parts joined as text; an error when
  ``extra.is_error`` is true, with ``extra.error_message``); a result without a
  call id is a ``message`` of role ``observation``;
* embedded ``subagent_trajectories`` (v1.7+) become child sessions
  (``parent_session_id`` = this session; id ``<parent>.<trajectory_id>``), and a
  result's ``subagent_trajectory_ref`` is kept in its metadata.

Times: ``step.timestamp`` (ISO 8601) when present, else the synthetic clock of the
other timestamp-free formats (1 s per step).  ``final_metrics`` go into
``session_end`` metadata.

Export (:func:`to_atif`, ``trajectory export --format atif``): one ATIF-v1.8
trajectory per root session, child sessions embedded as
``subagent_trajectories``; a tool call joins the agent step of the model step
before it (or a new agent step with ``llm_call_count: 0``), its result joins that
step's ``observation``.  The output validates against the ``atif`` package's
models (tests/unit/importers/test_atif.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from streams.core.events import META_TASK, TraceEvent
from streams.core.jsonl import iso_to_ms, ms_to_iso
from streams.errors import ImportFormatError
from streams.importers._common import (
    SYNTHETIC_BASE_MS,
    SYNTHETIC_STEP_MS,
    SessionWriter,
    as_int,
    file_stem,
    json_value,
    meta,
    sanitize_session_id,
    summarize,
)

FORMAT = "atif"
EXPORT_VERSION = "ATIF-v1.8"
_VERSION = re.compile(r"^ATIF-v1\.(\d+)$")
_MIN_MINOR, _MAX_MINOR = 4, 8


def sniff(doc: object) -> bool:
    return (
        isinstance(doc, Mapping)
        and isinstance(doc.get("schema_version"), str)
        and str(doc["schema_version"]).startswith("ATIF-")
        and isinstance(doc.get("steps"), list)
    )


def _text(value: object) -> str | None:
    """A message/content as text: strings as they are, multimodal parts joined."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, Mapping):
                if part.get("type") == "text":
                    parts.append(str(part.get("text") or ""))
                else:
                    src = part.get("source")
                    where = src.get("path") if isinstance(src, Mapping) else None
                    parts.append(f"[{part.get('type')}: {where}]")
        return "\n".join(parts)
    return json.dumps(value, sort_keys=True)


def _check_version(doc: Mapping[str, Any], where: str, path: Path) -> None:
    version = str(doc.get("schema_version"))
    m = _VERSION.match(version)
    if m is None or not _MIN_MINOR <= int(m.group(1)) <= _MAX_MINOR:
        raise ImportFormatError(
            str(path),
            f"{where}schema_version: {version!r} is not supported; "
            f"use ATIF-v1.{_MIN_MINOR} ... ATIF-v1.{_MAX_MINOR}",
        )


def _trajectory(
    doc: Mapping[str, Any], sid: str, parent: str | None, where: str, path: Path
) -> Iterator[TraceEvent]:
    _check_version(doc, where, path)
    steps = doc.get("steps")
    if not isinstance(steps, list):
        raise ImportFormatError(str(path), f"{where}steps: expected a list")
    agent = doc.get("agent") if isinstance(doc.get("agent"), Mapping) else {}
    assert isinstance(agent, Mapping)
    times: list[int] = []
    for i, step in enumerate(steps):
        if not isinstance(step, Mapping):
            raise ImportFormatError(str(path), f"{where}steps[{i}]: expected an object")
        stamp = step.get("timestamp")
        if isinstance(stamp, str) and stamp:
            try:
                times.append(iso_to_ms(stamp, field=f"{where}steps[{i}].timestamp"))
            except Exception as exc:
                raise ImportFormatError(str(path), str(exc)) from exc
        else:
            times.append(SYNTHETIC_BASE_MS + i * SYNTHETIC_STEP_MS)
    start = times[0] if times else SYNTHETIC_BASE_MS
    w = SessionWriter(sid, start)
    task = next(
        (_text(s.get("message")) for s in steps if s.get("source") == "user"),
        None,
    )
    w.emit(
        "session_start",
        start,
        metadata=meta(
            {
                "source_format": FORMAT,
                "atif_version": doc.get("schema_version"),
                "agent": agent.get("name"),
                "agent_version": agent.get("version"),
                "model": agent.get("model_name"),
                "atif_session_id": doc.get("session_id"),
                META_TASK: task,
            }
        ),
    )
    children: list[TraceEvent] = []
    for i, (step, ts) in enumerate(zip(steps, times, strict=True)):
        at = f"{where}steps[{i}]"
        source = step.get("source")
        text = _text(step.get("message"))
        if source in ("user", "system"):
            w.emit("message", ts, text=text or "", metadata={"role": str(source)})
            continue
        if source != "agent":
            raise ImportFormatError(
                str(path), f"{at}.source: {source!r}; use 'system', 'user' or 'agent'"
            )
        metrics = step.get("metrics") if isinstance(step.get("metrics"), Mapping) else {}
        assert isinstance(metrics, Mapping)
        if step.get("llm_call_count") != 0:
            w.emit(
                "model_step",
                ts,
                text=text,
                input_tokens=as_int(metrics.get("prompt_tokens")),
                output_tokens=as_int(metrics.get("completion_tokens")),
                metadata=meta(
                    {
                        "model": step.get("model_name"),
                        "reasoning": step.get("reasoning_content"),
                        "step_id": step.get("step_id"),
                        "cost_usd": metrics.get("cost_usd"),
                    }
                ),
            )
        ids: dict[str, str] = {}
        names: dict[str, str] = {}
        for k, call in enumerate(step.get("tool_calls") or []):
            if not isinstance(call, Mapping) or not call.get("function_name"):
                raise ImportFormatError(
                    str(path), f"{at}.tool_calls[{k}]: expected an object with function_name"
                )
            raw = str(call.get("tool_call_id") or f"{at}-{k}")
            cid = w.unique_call_id(raw)
            ids[raw] = cid
            names[cid] = str(call["function_name"])
            args = json_value(call.get("arguments"))
            w.emit(
                "tool_call",
                ts,
                call_id=cid,
                tool_name=names[cid],
                input=args,
                params_summary=summarize(args) if args is not None else None,
            )
        observation = step.get("observation")
        results = observation.get("results") if isinstance(observation, Mapping) else None
        for k, res in enumerate(results or []):
            if not isinstance(res, Mapping):
                raise ImportFormatError(str(path), f"{at}.observation.results[{k}]: not an object")
            extra = res.get("extra") if isinstance(res.get("extra"), Mapping) else {}
            assert isinstance(extra, Mapping)
            refs = res.get("subagent_trajectory_ref")
            md = meta({"subagent_trajectory_ref": refs}) if refs else {}
            source_id = res.get("source_call_id")
            content = _text(res.get("content"))
            if source_id is None:
                w.emit("message", ts, text=content or "", metadata={"role": "observation", **md})
                continue
            cid = ids.get(str(source_id), str(source_id))
            failed = bool(extra.get("is_error"))
            w.emit(
                "tool_result",
                ts,
                call_id=cid,
                tool_name=names.get(cid),
                output=content,
                is_error=failed,
                error_message=str(extra.get("error_message") or "error") if failed else None,
                metadata=md,
            )
    final = doc.get("final_metrics")
    w.emit(
        "session_end",
        w.last_ms,
        metadata=meta({"source_format": FORMAT, "final_metrics": final}),
    )
    for event in w.events:
        yield dataclasses.replace(event, parent_session_id=parent) if parent else event
    subs = doc.get("subagent_trajectories") or []
    for k, sub in enumerate(subs):
        if not isinstance(sub, Mapping) or not sub.get("trajectory_id"):
            raise ImportFormatError(
                str(path), f"{where}subagent_trajectories[{k}]: needs a trajectory_id"
            )
        child = sanitize_session_id(f"{w.session_id}.{sub['trajectory_id']}")
        children.extend(
            _trajectory(sub, child, w.session_id, f"{where}subagent_trajectories[{k}].", path)
        )
    yield from children


def read(docs: list[object], path: Path) -> Iterator[TraceEvent]:
    """Every session (and sub-agent session) of the ATIF documents in *docs*."""
    for d, doc in enumerate(docs):
        where = f"document {d}: " if len(docs) > 1 else ""
        if not sniff(doc):
            raise ImportFormatError(str(path), f"{where}not an ATIF trajectory")
        assert isinstance(doc, Mapping)
        raw = doc.get("session_id") or doc.get("trajectory_id") or file_stem(path)
        sid = str(raw) if len(docs) == 1 else f"{raw}"
        yield from _trajectory(doc, sanitize_session_id(sid), None, where, path)


# -- export ------------------------------------------------------------------------------


def _content(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _steps(events: list[TraceEvent]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    step_of_call: dict[str, dict[str, Any]] = {}
    open_agent: dict[str, Any] | None = None  # the agent step tool calls join

    def new_step(source: str, ts: int, message: str) -> dict[str, Any]:
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "timestamp": ms_to_iso(ts),
            "source": source,
            "message": message,
        }
        steps.append(step)
        return step

    for e in events:
        if e.type == "message":
            role = e.metadata.get("role", "user")
            if role == "observation" and open_agent is not None:
                obs = open_agent.setdefault("observation", {"results": []})
                obs["results"].append({"content": e.text or ""})
                continue
            open_agent = None
            new_step("system" if role == "system" else "user", e.timestamp_ms, e.text or "")
        elif e.type == "model_step":
            open_agent = new_step("agent", e.timestamp_ms, e.text or "")
            model = e.metadata.get("model")
            if model:
                open_agent["model_name"] = model
            if e.input_tokens is not None or e.output_tokens is not None:
                open_agent["metrics"] = {
                    k: v
                    for k, v in (
                        ("prompt_tokens", e.input_tokens),
                        ("completion_tokens", e.output_tokens),
                    )
                    if v is not None
                }
        elif e.type == "tool_call":
            if open_agent is None or "observation" in open_agent:
                open_agent = new_step("agent", e.timestamp_ms, "")
                open_agent["llm_call_count"] = 0
            cid = e.call_id or f"call-{e.seq}"
            args = e.input if isinstance(e.input, dict) else {"input": e.input}
            if e.input is None:
                args = {}
            open_agent.setdefault("tool_calls", []).append(
                {"tool_call_id": cid, "function_name": e.tool_name or "unknown", "arguments": args}
            )
            step_of_call[cid] = open_agent
        elif e.type in ("tool_result", "error") and e.call_id in step_of_call:
            step = step_of_call[e.call_id]
            result: dict[str, Any] = {
                "source_call_id": e.call_id,
                "content": _content(e.output) or (e.error_message or ""),
            }
            if e.is_error or e.type == "error":
                result["extra"] = {"is_error": True, "error_message": e.error_message or "error"}
            step.setdefault("observation", {"results": []})["results"].append(result)
        elif e.type in ("tool_result", "error"):
            # a result whose call we never saw, or an agent-level error
            open_agent = None
            step = new_step("system", e.timestamp_ms, e.error_message or _content(e.output) or "")
            step["extra"] = {"event_type": e.type, "is_error": e.is_error, "call_id": e.call_id}
    return steps


def _trajectory_doc(
    sid: str,
    by_session: Mapping[str, list[TraceEvent]],
    children: Mapping[str, list[str]],
    parent: str | None = None,
) -> dict[str, Any]:
    events = by_session[sid]
    start = next((e for e in events if e.type == "session_start"), None)
    md = dict(start.metadata) if start is not None else {}
    agent_id = next((e.agent_id for e in events if e.agent_id), None)
    steps = _steps(events)
    prompt = sum(e.input_tokens or 0 for e in events if e.type == "model_step")
    completion = sum(e.output_tokens or 0 for e in events if e.type == "model_step")
    doc: dict[str, Any] = {
        "schema_version": EXPORT_VERSION,
        "session_id": sid,
        # an imported child is "<parent>.<trajectory_id>": give back its own id
        "trajectory_id": sid[len(parent) + 1 :]
        if parent is not None and sid.startswith(parent + ".")
        else sid,
        "agent": {
            "name": md.get("agent") or agent_id or "unknown",
            "version": md.get("agent_version") or "unknown",
            **({"model_name": md["model"]} if md.get("model") else {}),
        },
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_steps": len(steps),
        },
        "extra": {"exported_by": "trajectory-streams", "event_count": len(events)},
    }
    subs = [_trajectory_doc(c, by_session, children, sid) for c in children.get(sid, [])]
    if subs:
        doc["subagent_trajectories"] = subs
    return doc


def to_atif(events: Iterable[TraceEvent]) -> list[dict[str, Any]]:
    """One ATIF-v1.8 trajectory (a JSON object) per root session of *events*."""
    by_session: dict[str, list[TraceEvent]] = {}
    parents: dict[str, str | None] = {}
    for e in events:
        by_session.setdefault(e.session_id, []).append(e)
        if e.parent_session_id:
            parents[e.session_id] = e.parent_session_id
        else:
            parents.setdefault(e.session_id, None)
    for evs in by_session.values():
        evs.sort(key=lambda x: x.seq)
    children: dict[str, list[str]] = {}
    roots = []
    for sid, parent in parents.items():
        if parent is not None and parent in by_session and parent != sid:
            children.setdefault(parent, []).append(sid)
        else:
            roots.append(sid)
    return [_trajectory_doc(sid, by_session, children) for sid in roots]


def write_atif(events: Iterable[TraceEvent], out: str | Path) -> int:
    """Write *events* as ATIF: one document, or one per line for several roots.

    Returns the number of events written.
    """
    events = list(events)
    docs = to_atif(events)
    with open(out, "w", encoding="utf-8") as fh:
        if len(docs) == 1:
            json.dump(docs[0], fh, ensure_ascii=False, indent=2)
            fh.write("\n")
        else:
            for doc in docs:
                fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return len(events)


__all__ = ["EXPORT_VERSION", "FORMAT", "read", "sniff", "to_atif", "write_atif"]
