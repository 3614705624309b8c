"""Pure per-session values the worker keeps in its tables (no Faust, no Kafka).

Why this module exists: the Faust worker must make at-least-once delivery look
exactly-once in its tables.  Each table value carries the ``last_seq`` it has
applied, and an event is applied to a value only when ``event.seq > last_seq``.
Because every table value is checked independently, a crash between two
changelog writes of the same event can never double-apply it in the table that
*was* written, nor lose it in the one that was not (redelivery re-applies it there).

It holds **no detection logic** -- only counters, the latest budget and a
bounded window of recent events.  Detection is ``streams.core.engine``'s job.

Encodings are canonical JSON bytes (sorted keys, compact, UTF-8) with a version
field ``"v"``: the same value always encodes to the same bytes and
``decode(encode(x)) == x``.

Invariants:

* ``last_seq`` is ``-1`` before any event was applied; afterwards it is the
  largest ``seq`` applied, and it only grows.
* Counters only grow, and only when an event is applied.
* ``recent`` holds at most ``RECENT_LIMIT`` events (JSON Lines dicts), oldest first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

from streams.core.events import TraceEvent
from streams.core.frozen import quick_init
from streams.core.jsonl import event_to_json
from streams.core.jsontext import compiled_encoder
from streams.errors import StateDecodeError

STATE_VERSION: Final = 1
#: How many recent events a session value keeps (bounded: table values stay small).
RECENT_LIMIT: Final = 20
#: Width of the per-session count windows, in event-time milliseconds.
MINUTE_MS: Final = 60_000


def canonical_bytes(value: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8: one byte string per value."""
    return canonical_text(value).encode("utf-8")


#: The settings of every canonical text (``json.dumps`` keyword arguments).
_CANONICAL: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
#: :func:`canonical_bytes` before the UTF-8 encoding (which fails on a lone
#: surrogate): the same text, and the same errors, as ``json.dumps(value,
#: sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)``,
#: without its per-call set-up (:mod:`streams.core.jsontext`).  Why: the worker
#: makes one per event (the event's JSON, :func:`streams.worker.processor.storable_json`)
#: and several per flushed value; ``json.dumps`` spent ~1 us of its ~3 us per event
#: on that set-up (docs/faust-notes.md "Measured costs").
canonical_text: Final = compiled_encoder(_CANONICAL)


#: How ``SessionCounters.encode`` finds where the recent entries go (see there).
_EMPTY_RECENT: Final = '"recent":[],"seq_gaps":'
#: The length of its ``"recent":[]`` part.
_RECENT_KEY_LEN: Final = len('"recent":[]')


#: class -> its dataclass field names, in order (``dataclasses.fields`` rebuilds the
#: tuple on every call: about half of a small value's encode).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _fields(value: Any) -> dict[str, Any]:
    """Shallow field dict: ``dataclasses.asdict`` deep-copies every nested value
    (the recent-events window), which dominated the worker's per-event time
    (docs/faust-notes.md "Measured costs behind the worker's code")."""
    cls = type(value)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(value))
    return {name: getattr(value, name) for name in names}


def _load(data: bytes, kind: str) -> dict[str, Any]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise StateDecodeError(f"{kind}: expected bytes, got {type(data).__name__}")
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateDecodeError(f"{kind}: stored bytes are not canonical JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise StateDecodeError(f"{kind}: expected a JSON object, got {type(obj).__name__}")
    if obj.get("v") != STATE_VERSION:
        raise StateDecodeError(
            f"{kind}.v: unknown state version {obj.get('v')!r} (this worker reads "
            f"{STATE_VERSION}); run a matching worker version or rebuild the tables"
        )
    return obj


def _build(cls: type[Any], obj: dict[str, Any], kind: str) -> Any:
    body = {k: v for k, v in obj.items() if k != "v"}
    try:
        return cls(**body)
    except TypeError as exc:
        raise StateDecodeError(f"{kind}: fields do not match {cls.__name__}: {exc}") from exc


@quick_init
@dataclass(frozen=True, slots=True)
class SessionCounters:
    """What the worker knows about one session without running detectors."""

    session_id: str
    events: int = 0
    tool_calls: int = 0
    tool_results: int = 0
    errors: int = 0
    model_steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    last_seq: int = -1
    #: How many times an applied seq skipped numbers (seq > last_seq + 1): lost events upstream.
    seq_gaps: int = 0
    first_event_ms: int | None = None
    last_event_ms: int | None = None
    ended: bool = False
    recent: tuple[dict[str, Any], ...] = ()
    #: How often the core engine reported each pattern type as fired (not detected here).
    patterns_fired: dict[str, int] = field(default_factory=dict)
    #: A cache for :meth:`encode`, neither encoded nor compared: the canonical JSON
    #: text of each ``recent`` entry (``canonical_bytes(entry)`` as ``str``), aligned
    #: with ``recent``, ``None`` where not known (a value read back from a table);
    #: ``()`` when none is known.  Why: the worker writes a session's counters at every
    #: commit it was touched in, and dumping the 20 recent events again each time cost
    #: ~40 us per session (docs/faust-notes.md "Measured costs"); the worker makes each
    #: text once anyway, when it checks the event is storable.
    recent_text: tuple[str | None, ...] = field(default=(), compare=False, repr=False)

    def apply(
        self,
        event: TraceEvent,
        event_json: dict[str, Any] | None = None,
        event_text: str | None = None,
    ) -> SessionCounters | None:
        """The value after ``event``, or ``None`` when ``event.seq`` was already applied.

        ``event_json``: ``event_to_json(event)`` if the caller made it already (the
        worker does, to check the event is storable); it becomes the newest
        ``recent`` entry, so it must not be changed afterwards.  ``event_text``:
        ``canonical_bytes(event_json).decode()`` if the caller made it (only with
        ``event_json``); :meth:`encode` then writes that text instead of dumping the
        entry again.  The counting rules live in :meth:`SessionWork.apply` (the
        worker's path), so there is one copy of them.
        """
        work = SessionWork(self)
        if event_json is None:
            event_json, event_text = event_to_json(event), None
        if not work.apply(event, event_json, event_text):
            return None
        return work.freeze()

    def with_patterns(self, pattern_types: tuple[str, ...]) -> SessionCounters:
        """Count patterns the engine fired on the event just applied."""
        if not pattern_types:
            return self
        work = SessionWork(self)
        work.add_patterns(pattern_types)
        return work.freeze()

    def to_json(self) -> dict[str, Any]:
        out = _fields(self)
        del out["recent_text"]
        out["recent"] = list(self.recent)
        return out

    def encode(self) -> bytes:
        """``canonical_bytes({"v": STATE_VERSION, **self.to_json()})``, with each
        ``recent`` entry's known text (``recent_text``) written as is: the same bytes
        (canonical JSON of a list is its items' canonical texts joined by commas)."""
        texts = self.recent_text
        if not texts or len(texts) != len(self.recent):
            return canonical_bytes({"v": STATE_VERSION, **self.to_json()})
        out = self.to_json()
        out["recent"] = []
        out["v"] = STATE_VERSION
        text = canonical_text(out)
        # The one top-level "recent" key: inside a JSON string a quote is escaped, so
        # no string can hold this marker, and "seq_gaps" is the next key in sorted
        # order (patterns_fired, the only key before it with user-given keys, holds
        # ints).
        at = text.index(_EMPTY_RECENT)
        items = ",".join(
            [
                t if t is not None else canonical_text(r)
                for t, r in zip(texts, self.recent, strict=True)
            ]
        )
        return (text[:at] + '"recent":[' + items + "]" + text[at + _RECENT_KEY_LEN :]).encode(
            "utf-8"
        )

    @classmethod
    def decode(cls, data: bytes) -> SessionCounters:
        obj = _load(data, "session_state")
        recent = obj.get("recent", [])
        if not isinstance(recent, list):
            raise StateDecodeError("session_state.recent: expected a list")
        obj["recent"] = tuple(recent)
        value: SessionCounters = _build(cls, obj, "session_state")
        return value


class SessionWork:
    """A session's counters being applied to, in place: the worker's working copy of a
    :class:`SessionCounters` between two flushes.

    Why: :meth:`SessionCounters.apply` builds a new 17-field value and copies the
    ``recent`` window (and its texts) on every event, ~2 us of the worker's per-event
    path (docs/faust-notes.md, issue #12); a table only needs a value when it is
    written, at a flush.  :meth:`apply` changes this object in place and
    :meth:`freeze` makes the frozen value (cached until the next change).

    Invariants: this is the one copy of the counting rules
    (:meth:`SessionCounters.apply` goes through it); after the same events,
    ``freeze()`` equals what the plain one-value-per-event rules in
    tests/counters_reference.py give, and encodes to the same bytes; ``recent_text``
    stays aligned with ``recent`` (``None`` where the text is not known); a frozen
    value shares no mutable container with this object (its ``recent`` entries, the
    events' JSON dicts, are never changed by anyone).
    """

    __slots__ = (
        "_frozen",
        "ended",
        "errors",
        "events",
        "first_event_ms",
        "input_tokens",
        "last_event_ms",
        "last_seq",
        "model_steps",
        "output_tokens",
        "patterns_fired",
        "recent",
        "recent_text",
        "seq_gaps",
        "session_id",
        "tool_calls",
        "tool_results",
    )

    def __init__(self, value: SessionCounters) -> None:
        self.session_id = value.session_id
        self.events = value.events
        self.tool_calls = value.tool_calls
        self.tool_results = value.tool_results
        self.errors = value.errors
        self.model_steps = value.model_steps
        self.input_tokens = value.input_tokens
        self.output_tokens = value.output_tokens
        self.last_seq = value.last_seq
        self.seq_gaps = value.seq_gaps
        self.first_event_ms = value.first_event_ms
        self.last_event_ms = value.last_event_ms
        self.ended = value.ended
        self.recent: list[dict[str, Any]] = list(value.recent)
        texts = value.recent_text
        self.recent_text: list[str | None] = (
            list(texts) if len(texts) == len(value.recent) else [None] * len(value.recent)
        )
        self.patterns_fired: dict[str, int] = dict(value.patterns_fired)
        #: the value as of now, or None after a change (made again by freeze)
        self._frozen: SessionCounters | None = value

    def apply(self, event: TraceEvent, event_json: dict[str, Any], event_text: str | None) -> bool:
        """Apply ``event`` in place; False (and
        nothing changed) when ``event.seq`` was already applied.

        ``event_json`` becomes the newest ``recent`` entry: it must not be changed
        afterwards; ``event_text`` is its canonical text if known.
        """
        last_seq = self.last_seq
        seq = event.seq
        if seq <= last_seq:
            return False
        self._frozen = None
        etype = event.type
        ts = event.timestamp_ms
        self.events += 1
        if etype == "tool_call":
            self.tool_calls += 1
        elif etype == "tool_result":
            self.tool_results += 1
            if event.is_error:
                self.errors += 1
        elif etype == "model_step":
            self.model_steps += 1
        elif etype == "error":
            self.errors += 1
        elif etype == "session_end":
            self.ended = True
        if event.input_tokens:
            self.input_tokens += event.input_tokens
        if event.output_tokens:
            self.output_tokens += event.output_tokens
        self.last_seq = seq
        if seq > last_seq + 1:
            self.seq_gaps += 1
        first = self.first_event_ms
        if first is None or ts < first:
            self.first_event_ms = ts
        last = self.last_event_ms
        if last is None or ts > last:
            self.last_event_ms = ts
        recent = self.recent
        texts = self.recent_text
        recent.append(event_json)
        texts.append(event_text)
        if len(recent) > RECENT_LIMIT:
            del recent[0]
            del texts[0]
        return True

    def add_patterns(self, pattern_types: Iterable[str]) -> None:
        """Count patterns the engine fired on the event just applied."""
        counts = self.patterns_fired
        for name in pattern_types:
            self._frozen = None
            counts[name] = counts.get(name, 0) + 1

    def freeze(self) -> SessionCounters:
        """The frozen value as of now (the same object until the next change)."""
        frozen = self._frozen
        if frozen is None:
            texts = self.recent_text
            frozen = self._frozen = SessionCounters(
                session_id=self.session_id,
                events=self.events,
                tool_calls=self.tool_calls,
                tool_results=self.tool_results,
                errors=self.errors,
                model_steps=self.model_steps,
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                last_seq=self.last_seq,
                seq_gaps=self.seq_gaps,
                first_event_ms=self.first_event_ms,
                last_event_ms=self.last_event_ms,
                ended=self.ended,
                recent=tuple(self.recent),
                patterns_fired=dict(self.patterns_fired),
                recent_text=tuple(texts) if any(t is not None for t in texts) else (),
            )
        return frozen


@quick_init
@dataclass(frozen=True, slots=True)
class BudgetState:
    """The latest ``budget`` of a session plus the tokens the worker saw since.

    ``tokens_used`` = the agent's last reported ``tokens_used`` (0 if it never
    reported one) + the ``model_step`` tokens seen after that report.  A budget
    event that reports ``tokens_used`` restarts the count from its value; one
    that leaves it ``None`` keeps the running count.
    """

    session_id: str
    last_seq: int = -1
    deadline_ms: int | None = None
    max_tokens: int | None = None
    max_tool_calls: int | None = None
    reported_tokens_used: int | None = None
    tokens_since_report: int = 0
    budget_seq: int | None = None

    @property
    def tokens_used(self) -> int:
        return (self.reported_tokens_used or 0) + self.tokens_since_report

    def apply(self, event: TraceEvent) -> BudgetState | None:
        """The value after ``event``; ``None`` if already applied or irrelevant."""
        if event.seq <= self.last_seq:
            return None
        if event.type == "budget" and event.budget is not None:
            b = event.budget
            reported = b.tokens_used if b.tokens_used is not None else self.reported_tokens_used
            since = 0 if b.tokens_used is not None else self.tokens_since_report
            return replace(
                self,
                last_seq=event.seq,
                deadline_ms=b.deadline_ms,
                max_tokens=b.max_tokens,
                max_tool_calls=b.max_tool_calls,
                reported_tokens_used=reported,
                tokens_since_report=since,
                budget_seq=event.seq,
            )
        if event.type == "model_step" and event.total_tokens:
            # the constructor, not dataclasses.replace: this runs for every model step
            return BudgetState(
                session_id=self.session_id,
                last_seq=event.seq,
                deadline_ms=self.deadline_ms,
                max_tokens=self.max_tokens,
                max_tool_calls=self.max_tool_calls,
                reported_tokens_used=self.reported_tokens_used,
                tokens_since_report=self.tokens_since_report + event.total_tokens,
                budget_seq=self.budget_seq,
            )
        return None

    def to_json(self) -> dict[str, Any]:
        out = _fields(self)
        out["tokens_used"] = self.tokens_used
        return out

    def encode(self) -> bytes:
        return canonical_bytes({"v": STATE_VERSION, **_fields(self)})

    @classmethod
    def decode(cls, data: bytes) -> BudgetState:
        value: BudgetState = _build(cls, _load(data, "budget_state"), "budget_state")
        return value


def minute_start(timestamp_ms: int) -> int:
    """Start of the tumbling event-time minute holding ``timestamp_ms``."""
    return timestamp_ms - timestamp_ms % MINUTE_MS


def minute_key(session_id: str, timestamp_ms: int) -> str:
    """Table key of a session's minute: ``<session_id>@<minute_start_ms>``.

    ``@`` is outside the session id charset, so the split is unambiguous.
    """
    return f"{session_id}@{minute_start(timestamp_ms)}"


@quick_init
@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """Tool calls and errors of one session in one event-time minute."""

    session_id: str
    minute_start_ms: int
    tool_calls: int = 0
    errors: int = 0
    last_seq: int = -1

    @staticmethod
    def counts(event: TraceEvent) -> bool:
        """Whether ``event`` changes a minute value (only these are written)."""
        return event.type in ("tool_call", "error") or (
            event.type == "tool_result" and event.is_error
        )

    def apply(self, event: TraceEvent) -> MinuteCounts | None:
        if event.seq <= self.last_seq or not self.counts(event):
            return None
        etype = event.type
        is_error = etype == "error" or (etype == "tool_result" and event.is_error)
        # the constructor, not dataclasses.replace (which looks the fields up on every
        # call): this runs for every tool call and error
        return MinuteCounts(
            session_id=self.session_id,
            minute_start_ms=self.minute_start_ms,
            tool_calls=self.tool_calls + (etype == "tool_call"),
            errors=self.errors + is_error,
            last_seq=event.seq,
        )

    def to_json(self) -> dict[str, Any]:
        return _fields(self)

    def encode(self) -> bytes:
        return canonical_bytes({"v": STATE_VERSION, **_fields(self)})

    @classmethod
    def decode(cls, data: bytes) -> MinuteCounts:
        value: MinuteCounts = _build(cls, _load(data, "minute_counts"), "minute_counts")
        return value


__all__ = [
    "MINUTE_MS",
    "RECENT_LIMIT",
    "STATE_VERSION",
    "BudgetState",
    "MinuteCounts",
    "SessionCounters",
    "SessionWork",
    "canonical_bytes",
    "canonical_text",
    "minute_key",
    "minute_start",
]
