"""Importers: real agent trace formats → normalized :class:`~streams.core.events.TraceEvent`.

``read_events(path, format="auto")`` yields the events of every session in a file
(a file may hold several runs: OpenHands output, tau-bench, OTLP); each event
carries its ``session_id`` (always ``[A-Za-z0-9._-]{1,200}``, derived
deterministically from the run's instance id / task id / file name) and a ``seq``
counting from 0 per session.  Files may be gzip-compressed whatever their name
(detected by the magic bytes).  The format is detected from the *content*
(:func:`detect_format`), never from the file name alone.

Formats (``FORMATS``):

``jsonl``           this project's JSON Lines form (:mod:`streams.core.jsonl`)
``agentv``          AgentV trace JSON: an array of AgentV TraceEvents or ``{"trace": [...]}``
``swe-agent``       SWE-agent ``.traj`` (:mod:`.swe_agent`)
``mini-swe-agent``  mini-swe-agent ``.traj.json`` (:mod:`.mini_swe_agent`)
``openhands``       OpenHands evaluation output JSONL (:mod:`.openhands`)
``openai-chat``     OpenAI chat with ``tool_calls`` / tau-bench runs (:mod:`.openai_chat`)
``otlp``            OTLP/JSON spans and log events (GenAI, OpenInference, Claude Code, Codex)
``atif``            Harbor's ATIF trajectories, v1.4-v1.8 (:mod:`.atif`)

Each run's outcome (exit status, ``resolved`` — unknown at import unless the file
says, as tau-bench's ``reward`` does —, cost and tokens) is recorded in its
``session_start`` / ``session_end`` metadata.
"""

from streams.importers.reader import FORMATS, detect_format, read_events

__all__ = ["FORMATS", "detect_format", "read_events"]
