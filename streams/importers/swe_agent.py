"""SWE-agent ``.traj`` files: ``{"trajectory": [...], "info": {...}, ...}``.

Mapping, per step ``{action, observation, thought, response, state}``:

* ``thought`` (else ``response``) → ``model_step`` (no token counts: SWE-agent only
  records them per run);
* ``action`` → ``tool_call``: the tool is the first word of the action, the
  parameters (``input`` and ``params_summary``) the rest of it;
* ``observation`` → ``tool_result``, ``is_error`` when the text shows a failure
  (:func:`observation_error`).  A step whose action is empty gets no call; its
  observation becomes a ``message``.  The harness' own exits (``exit_cost``,
  ``exit_context``, ``exit_format``, ``exit_error``, ``exit_api``: SWE-agent
  appends them when a limit stops the run) are not the agent's tool calls: they
  become a ``message`` with ``metadata.harness_exit``.

SWE-agent records no timestamps, so event time is synthetic and deterministic:
step *i* happens at ``SYNTHETIC_BASE_MS + (i + 1) * 1000`` (its model step and
call at that instant, the result 1 ms later).  ``info.model_stats`` (cost, tokens
sent/received, API calls) becomes a ``budget`` event with ``tokens_used`` and the
``session_end`` metadata, together with ``info.exit_status`` (``None`` = the run
crashed).  Whether the run *resolved* its issue is not in the file: it is
recorded as ``resolved=unknown``.

The session id is the file's instance id; when the file sits in a ``trajs``
folder (the layout of SWE-agent experiment outputs) the folder above, the model
name, is prefixed, because the same instance is run by several models.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from streams.core.events import META_TASK, Budget, TraceEvent
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

FORMAT = "swe-agent"

#: Failure signatures in an observation (shell, Python, Java toolchain, SWE-agent tools).
ERROR_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.MULTILINE)
    for p in (
        r"No such file or directory",
        r"command not found",
        r"Traceback \(most recent call last\)",
        r"(?:^|\s)(?:\w+)?Error: ",
        r"^Error\b",
        r"^\S+\.(?:java|py|c|cpp|go|rs|ts|js|kt|scala):\d+(?::\d+)?: error:",
        r"^error: ",
        r"\[ERROR\]",
        r"BUILD FAILURE",
        r"FAILURE: Build failed",
        r"Exception in thread ",
        r"Your proposed edit has introduced new syntax error",
        r"Permission denied",
        r"^fatal: ",
        r"^E: ",
        r"Segmentation fault",
        r"^Usage: ",
        r"^(?:File|Directory) .* not found$",
        r": not found$",
        r"cannot find symbol",
        r"^/bin/(?:ba)?sh: .*(?:unexpected|syntax error)",
        r"EXECUTION TIMED OUT",
    )
)

#: Pseudo-actions SWE-agent's harness appends when it stops a run.
HARNESS_EXITS: frozenset[str] = frozenset(
    {"exit_cost", "exit_context", "exit_format", "exit_error", "exit_api"}
)

#: SWE-agent's own tools print these on success: a file view (``open``, ``goto``,
#: ``scroll_*``, a successful ``edit``) or search hits.  Their bodies are file
#: content, in which "Error:" or "not found" are just text, so they are not scanned.
SUCCESS_PREFIXES: tuple[str, ...] = ("[File: ", "Found ")


def observation_error(observation: str) -> str | None:
    """The first line that shows a failure, or ``None`` when the output looks fine."""
    if observation.lstrip().startswith(SUCCESS_PREFIXES):
        return None
    for pattern in ERROR_PATTERNS:
        match = pattern.search(observation)
        if match:
            start = observation.rfind("\n", 0, match.start()) + 1
            end = observation.find("\n", match.end())
            line = observation[start : end if end >= 0 else len(observation)].strip()
            return line[:300] or match.group(0).strip()
    return None


def sniff(doc: object) -> bool:
    return (
        isinstance(doc, Mapping)
        and isinstance(doc.get("trajectory"), list)
        and all(isinstance(s, Mapping) and "action" in s for s in doc["trajectory"][:3])
    )


def _session_id(path: Path) -> str:
    stem = file_stem(path)
    if path.parent.name == "trajs" and path.parent.parent.name:
        return f"{path.parent.parent.name}.{stem}"
    return stem


def _task(doc: Mapping[str, Any]) -> str | None:
    history = doc.get("history")
    if isinstance(history, list):
        for item in history:
            if isinstance(item, Mapping) and item.get("role") == "user":
                content = item.get("content")
                if isinstance(content, str):
                    return content
    return None


def read(doc: object, path: Path) -> Iterator[TraceEvent]:
    if not sniff(doc):
        raise ImportFormatError(str(path), "not a SWE-agent .traj (no trajectory[] of steps)")
    assert isinstance(doc, Mapping)
    info = doc.get("info") or {}
    if not isinstance(info, Mapping):
        raise ImportFormatError(str(path), "info: expected an object")
    w = SessionWriter(_session_id(path), SYNTHETIC_BASE_MS)
    w.emit(
        "session_start",
        SYNTHETIC_BASE_MS,
        metadata=meta(
            {
                "source_format": FORMAT,
                "environment": doc.get("environment"),
                META_TASK: _task(doc),
            }
        ),
    )
    for i, step in enumerate(doc["trajectory"]):
        where = f"trajectory[{i}]"
        if not isinstance(step, Mapping):
            raise ImportFormatError(str(path), f"{where}: expected an object")
        action = step.get("action")
        observation = step.get("observation")
        thought = step.get("thought") or step.get("response")
        if not isinstance(action, str):
            raise ImportFormatError(str(path), f"{where}.action: expected a string")
        if observation is not None and not isinstance(observation, str):
            raise ImportFormatError(str(path), f"{where}.observation: expected a string")
        ts = SYNTHETIC_BASE_MS + (i + 1) * SYNTHETIC_STEP_MS
        if isinstance(thought, str) and thought:
            w.emit("model_step", ts, text=thought)
        stripped = action.strip()
        if not stripped:
            if observation:
                w.emit("message", ts + 1, text=observation, metadata={"role": "environment"})
            continue
        parts = stripped.split(maxsplit=1)
        tool = parts[0]
        if tool in HARNESS_EXITS:
            w.emit(
                "message",
                ts + 1,
                text=observation or tool,
                metadata={"role": "environment", "harness_exit": tool},
            )
            continue
        params = parts[1] if len(parts) > 1 else ""
        call_id = w.unique_call_id(f"step-{i}")
        w.emit(
            "tool_call",
            ts,
            call_id=call_id,
            tool_name=tool,
            input=params,
            params_summary=summarize(params) if params else "",
        )
        out = observation or ""
        err = observation_error(out)
        w.emit(
            "tool_result",
            ts + 1,
            call_id=call_id,
            tool_name=tool,
            output=out,
            is_error=err is not None,
            error_message=err,
            latency_ms=1,
        )
    end_ts = w.last_ms + SYNTHETIC_STEP_MS
    stats = info.get("model_stats")
    stats = stats if isinstance(stats, Mapping) else {}
    sent = as_int(stats.get("tokens_sent"))
    received = as_int(stats.get("tokens_received"))
    if sent is not None or received is not None:
        w.emit("budget", end_ts, budget=Budget(tokens_used=(sent or 0) + (received or 0)))
    w.emit(
        "session_end",
        end_ts,
        metadata=meta(
            {
                "source_format": FORMAT,
                "exit_status": info.get("exit_status") if "exit_status" in info else None,
                "crashed": "true" if info.get("exit_status") is None else "false",
                "resolved": "unknown",
                "instance_cost": stats.get("instance_cost"),
                "tokens_sent": sent,
                "tokens_received": received,
                "api_calls": as_int(stats.get("api_calls")),
            }
        ),
    )
    yield from w.events


__all__ = [
    "ERROR_PATTERNS",
    "FORMAT",
    "HARNESS_EXITS",
    "SUCCESS_PREFIXES",
    "observation_error",
    "read",
    "sniff",
]
