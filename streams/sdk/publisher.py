"""The publisher SDK: how an agent puts its trajectory on Kafka.

::

    from streams.sdk import Publisher
    from streams.settings import Settings

    with Publisher(Settings()) as pub:
        with pub.session("run-42", agent_id="coder", task="fix the bug") as s:
            cid = s.tool_call("bash", {"command": "pytest -x"})
            s.tool_result(cid, {"exit_code": 1}, is_error=True, error="1 failed")
            s.model_step(text="Let me look at the test", input_tokens=900, output_tokens=40)

What it guarantees:

* **Order and exactly-once effect.**  Every session gets its own topic
  (``settings.session_topic(session_id)``, one partition, ``retention.ms`` from
  settings) and a per-session ``seq`` 0, 1, 2 ... assigned here.  The producer is
  idempotent (``enable.idempotence=true``, ``acks=all``): retries neither reorder
  nor duplicate; consumers drop any duplicate ``seq`` anyway.
* **Fast discovery.**  A new session is announced on ``settings.control_topic``
  (key = session id, value = JSON ``{"topic": ..., "session_id": ..., ...}``) so
  the router subscribes at once instead of waiting for a regex metadata refresh.
* **Nothing is dropped silently.**  Values are validated and encoded *before*
  sending: a function, a set, bytes, NaN, a non-``str`` key or a cycle raises
  :class:`~streams.errors.UnserializableError` naming the path
  (``input.args[2]``) and the ``seq`` is not consumed.  Oversized input/output is
  truncated to a valid JSON summary flagged in metadata (or raises with
  ``on_oversize="raise"``; see :mod:`streams.sdk._validate`).  Broker-side
  failures come back through the delivery callback and are raised as
  :class:`~streams.errors.DeliveryError` on the next SDK call, on
  :meth:`Publisher.flush` or on :meth:`Publisher.close`; ``close()`` also raises
  if anything is still undelivered after its timeout.
* **Privacy.**  With ``settings.privacy == "summary"`` only the abbreviated
  ``params_summary`` leaves the process: input and output are dropped (model and
  message ``text`` is still sent).

Event time: ``timestamp_ms`` is the wall clock (``time.time_ns() // 1_000_000``)
at the call, made non-decreasing within a session; every method takes an explicit
``timestamp_ms=`` to replay recorded trajectories.  The Kafka record timestamp is
left to the producer (send time) on purpose: replaying a year-old file with its
original CreateTime would make the broker delete it at once under ``retention.ms``.

Thread-safety: a :class:`Publisher` may be shared by threads (the confluent-kafka
producer is thread-safe; the SDK's own state is behind a lock).  A :class:`Session`
may also be used from several threads: ``seq`` assignment and the produce call are
one critical section, so ``seq`` order is the order on the topic.  Neither is safe
across ``fork()``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from streams.core.events import (
    META_INPUT_TRUNCATED,
    META_OBSERVER_PROFILE,
    META_OUTPUT_TRUNCATED,
    META_SNAPSHOT_ID,
    META_TASK,
    Budget,
    EventType,
    JsonValue,
    TraceEvent,
)
from streams.errors import DeliveryError, InvalidEventError
from streams.sdk._validate import (
    OnOversize,
    as_str_metadata,
    cap_payload,
    check_on_oversize,
    summarize_params,
)
from streams.security import (
    client_config,
    explain_kafka_error,
    raise_if_security_error,
    verify_connection,
    weak_method,
)
from streams.serde import EventSerde
from streams.settings import Settings, check_session_id
from streams.tenancy import tenant_of
from streams.topics import (
    SIZE_MARGIN,
    TopicSpec,
    control_topic_spec,
    ensure_topics,
    session_topic_spec,
)

#: How many delivery failures a DeliveryError message spells out.
_SHOWN_FAILURES: Final = 5

#: The producer's ``linger.ms`` unless ``producer_config`` sets it.  An agent
#: publishes a few events a second, each alone in its batch, so a longer linger
#: only delays it: a plain idempotent lz4 producer at 10 msg/s acked p50 2.3 /
#: 3.4 / 7.6 ms at linger 0 / 1 / 5 for the same librdkafka CPU per message
#: (~100 us, per request, not per linger), and 50,000 SDK events in a loop took
#: as long at 1 as at 5 (``tests/bench/bench_sdk_linger.py``; docs/kafka-notes.md
#: "Measured defaults of the router and the SDK").
DEFAULT_LINGER_MS: Final = 1


def now_ms() -> int:
    """Wall-clock epoch milliseconds (the SDK is the shell; the core never calls this)."""
    return time.time_ns() // 1_000_000


def delivery_failure(what: str, topic: str, err: Any, settings: Settings) -> str:
    """The text of one failed delivery; a refused one names the ACL and the command.

    A produce the ACLs refuse (``TOPIC_AUTHORIZATION_FAILED``) names the grant it
    lacks (WRITE on ``topic``) and the ``trajectory acl`` command that gives it: for
    a session topic that is the agent role of the session's tenant, for the control
    topic the agent role of any tenant (docs/security.md).  Login/TLS failures get
    :func:`~streams.security.explain_kafka_error`'s message naming the setting.  Every
    other error keeps librdkafka's text and code name.
    """
    name = err.name()
    if name != "TOPIC_AUTHORIZATION_FAILED":
        explained = explain_kafka_error(err, settings.security)
        return f"{what}: {explained or f'{err.str()} ({name})'}"
    user = settings.security.username or "<user>"
    session_prefix = f"{settings.prefix}.session."
    if topic.startswith(session_prefix):
        tenant = tenant_of(topic[len(session_prefix) :])
        if tenant is None:
            fix = (
                "session ids on a secured cluster carry their tenant, <tenant>.<session>, "
                f"so that `trajectory acl grant agent --user {user} --tenant <tenant>` "
                "can cover them"
            )
        else:
            fix = (
                f"the agent role of tenant {tenant!r} grants it: "
                f"`trajectory acl grant agent --user {user} --tenant {tenant}`"
            )
    else:
        fix = (
            f"the agent role (any tenant) or the service role grants it: "
            f"`trajectory acl grant agent --user {user} --tenant <tenant>`"
        )
    return (
        f"{what}: {name}: Kafka's ACLs do not allow User:{user} WRITE on TOPIC {topic!r}; "
        f"{fix} (with an admin credential; docs/security.md), or publish with a "
        "credential that has it"
    )


class Publisher:
    """Publishes sessions to Kafka; see the module docstring for the guarantees.

    ``producer_config`` entries override the SDK's librdkafka settings (tests use
    it for short timeouts); ``enable.idempotence`` and ``acks`` cannot be weakened.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        producer_config: Mapping[str, Any] | None = None,
        on_oversize: OnOversize | str = "truncate",
        admin_timeout_s: float = 30.0,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self.on_oversize: OnOversize = check_on_oversize(on_oversize)
        s = self.settings
        self.serde = EventSerde(
            "confluent" if s.schema_registry_url else "single-object",
            registry=s.schema_registry_url,
            max_bytes=s.max_message_bytes,
        )
        config: dict[str, Any] = {
            "bootstrap.servers": s.bootstrap,
            "linger.ms": DEFAULT_LINGER_MS,
            "compression.type": "lz4",
            "message.max.bytes": max(1_000_000, s.max_message_bytes + SIZE_MARGIN),
            **client_config(s.security),
        }
        for key, value in (producer_config or {}).items():
            if key in ("enable.idempotence", "acks", "on_delivery", "error_cb"):
                raise InvalidEventError(
                    f"producer_config[{key!r}]", "is fixed by the SDK (idempotent, acks=all)"
                )
            config[key] = value
        config["enable.idempotence"] = True
        config["acks"] = "all"
        # held weakly: a bound method would put the producer in a reference cycle
        # with this publisher, freed only by the garbage collector, possibly in
        # librdkafka's own thread, where destroying a client aborts the process
        config["error_cb"] = weak_method(self._on_error)
        if s.security.protocol != "PLAINTEXT":  # wrong password/CA: fail here, not in a retry loop
            verify_connection(s.bootstrap, s.security)
        self._producer: Producer | _ClosedProducer = Producer(config)
        self._admin: AdminClient | None = AdminClient(
            {"bootstrap.servers": s.bootstrap, **client_config(s.security)}
        )
        self._admin_timeout_s = admin_timeout_s
        self._lock = threading.Lock()
        self._failures: list[DeliveryError] = []
        self._fatal: DeliveryError | None = None
        self._topics: set[str] = set()
        self._closed = False

    # -- context management ------------------------------------------------
    def __enter__(self) -> Publisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- sessions ----------------------------------------------------------
    def session(
        self,
        session_id: str,
        *,
        agent_id: str | None = None,
        parent_session_id: str | None = None,
        task: str | None = None,
        observer_profile: str | None = None,
        metadata: Mapping[str, str] | None = None,
        timestamp_ms: int | None = None,
        flush_on_exit: bool = True,
    ) -> Session:
        """A session context: ``session_start`` on enter, ``session_end`` on exit."""
        check_session_id(session_id)
        if parent_session_id is not None:
            check_session_id(parent_session_id)
        meta = as_str_metadata(metadata)
        if task is not None:
            meta[META_TASK] = _require_str(task, "task")
        if observer_profile is not None:
            meta[META_OBSERVER_PROFILE] = _require_str(observer_profile, "observer_profile")
        return Session(
            self,
            session_id,
            agent_id=agent_id,
            parent_session_id=parent_session_id,
            start_metadata=meta,
            start_timestamp_ms=timestamp_ms,
            flush_on_exit=flush_on_exit,
        )

    # -- topics ------------------------------------------------------------
    def ensure_session_topic(self, session_id: str) -> str:
        """Create the session's topic (1 partition, configured retention) if needed."""
        return self.ensure_session_topics([session_id])[0]

    def ensure_session_topics(self, session_ids: Iterable[str]) -> list[str]:
        """Create many session topics in one admin request (replaying many sessions)."""
        specs = [session_topic_spec(self.settings, sid) for sid in session_ids]
        self._ensure_topics(specs)
        return [spec.name for spec in specs]

    def _ensure_topics(self, wanted: Iterable[TopicSpec]) -> None:
        if self._admin is None:
            raise DeliveryError("cannot create topics: the publisher is closed")
        with self._lock:
            missing = {s.name: s for s in wanted if s.name not in self._topics}
        if not missing:
            return
        ensure_topics(
            self._admin,
            missing.values(),
            bootstrap=self.settings.bootstrap,
            timeout_s=self._admin_timeout_s,
        )
        with self._lock:
            self._topics.update(missing)

    def announce(self, session_id: str, topic: str, info: Mapping[str, JsonValue]) -> None:
        """Tell routers that ``topic`` exists (key = session id, JSON value)."""
        control = self.settings.control_topic
        self._ensure_topics([control_topic_spec(self.settings)])
        value = json.dumps(
            {"topic": topic, "session_id": session_id, **info},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode("utf-8")
        self._produce(control, session_id.encode("utf-8"), value, f"announcement of {session_id}")

    # -- sending -----------------------------------------------------------
    def send(self, event: TraceEvent) -> None:
        """Encode and produce one already-numbered event to its session topic.

        Low level: :class:`Session` assigns ``seq``; use this only for events you
        numbered yourself.  Raises before sending if the event cannot be encoded.
        """
        self.check()
        data = self.serde.encode(event)
        topic = self.settings.session_topic(event.session_id)
        self._produce(topic, event.session_id.encode("utf-8"), data, f"{topic} seq {event.seq}")

    def _produce(self, topic: str, key: bytes, value: bytes, what: str) -> None:
        if self._closed:
            raise DeliveryError(f"cannot send {what}: the publisher is closed")

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                partition = msg.partition() if msg is not None else None
                self._record_failure(
                    DeliveryError.from_kafka(
                        delivery_failure(what, topic, err, self.settings),
                        err,
                        topic=topic,
                        partition=partition if partition is not None and partition >= 0 else None,
                    )
                )

        deadline = time.monotonic() + 30.0
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                break
            except BufferError:
                # Local queue full: serve delivery reports to make room, then retry.
                if time.monotonic() > deadline:
                    raise DeliveryError(
                        f"cannot send {what}: the producer queue stayed full for 30 s "
                        "(is the broker reachable?)",
                        topic=topic,
                        retriable=True,
                    ) from None
                self._producer.poll(0.1)
            except KafkaException as exc:
                # (e.g. TOPIC_AUTHORIZATION_FAILED when librdkafka already knows the
                # ACLs refuse the topic: the same text as the delivery report's)
                raise DeliveryError.from_kafka(
                    "cannot send " + delivery_failure(what, topic, exc.args[0], self.settings),
                    exc,
                    topic=topic,
                ) from exc
        self._producer.poll(0)

    def _record_failure(self, failure: DeliveryError) -> None:
        with self._lock:
            self._failures.append(failure)

    def _on_error(self, err: KafkaError) -> None:
        # Global client errors: only fatal ones (e.g. an idempotence violation) end
        # the producer; transient ones (broker down) are retried by librdkafka and
        # surface as delivery failures if they outlast message.timeout.ms.
        raise_if_security_error(err, self.settings.security)  # wrong password/CA: fail fast
        if err.fatal():
            with self._lock:
                self._fatal = DeliveryError.from_kafka(
                    f"the producer hit a fatal error: {err.str()} ({err.name()}); "
                    "create a new Publisher",
                    err,
                    retriable=False,
                )

    def check(self) -> None:
        """Raise :class:`DeliveryError` for failures reported since the last check.

        Its ``topic``/``partition``/``code`` are those of the first failure; it is
        ``retriable`` only when every failure was.
        """
        self._producer.poll(0)
        with self._lock:
            failures, self._failures = self._failures, []
            fatal = self._fatal
        if fatal is not None:
            raise fatal
        if failures:
            shown = "; ".join(str(f) for f in failures[:_SHOWN_FAILURES])
            more = len(failures) - _SHOWN_FAILURES
            tail = f"; and {more} more" if more > 0 else ""
            first = failures[0]
            raise DeliveryError(
                f"{len(failures)} message(s) were not delivered: {shown}{tail}",
                topic=first.topic,
                partition=first.partition,
                code=first.code,
                code_number=first.code_number,
                retriable=all(f.retriable for f in failures),
            )

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait for every outstanding message; raise if any failed or is still pending."""
        if self._closed:
            raise DeliveryError("cannot flush: the publisher is closed (close() flushed)")
        remaining = self._producer.flush(timeout_s)
        self.check()
        if remaining:
            raise DeliveryError(
                f"{remaining} message(s) still undelivered after {timeout_s} s "
                f"(broker {self.settings.bootstrap} unreachable or slow?)",
                retriable=True,
            )

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush and close; raises :class:`DeliveryError` if anything was not delivered.

        The producer and admin client are freed here, in the calling thread (not
        left for the garbage collector: see :func:`streams.security.weak_method`);
        anything still undelivered after ``timeout_s`` is reported, then dropped.
        """
        if self._closed:
            return
        try:
            self.flush(timeout_s)
        finally:
            self._closed = True
            self._producer = _ClosedProducer()
            self._admin = None


class _ClosedProducer:
    """What a closed :class:`Publisher` holds instead of its producer: nothing is
    pending, nothing can be sent (``_produce`` refuses before it gets here)."""

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        raise DeliveryError("cannot send: the publisher is closed")


def _require_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidEventError(path, f"expected str, got {type(value).__name__}")
    return value


def _opt_int(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEventError(path, f"expected int, got {type(value).__name__}")
    return value


class Session:
    """One live session; create with :meth:`Publisher.session` (see module docs)."""

    def __init__(
        self,
        publisher: Publisher,
        session_id: str,
        *,
        agent_id: str | None,
        parent_session_id: str | None,
        start_metadata: dict[str, str],
        start_timestamp_ms: int | None,
        flush_on_exit: bool,
    ) -> None:
        self.publisher = publisher
        self.session_id = session_id
        self.agent_id = agent_id
        self.parent_session_id = parent_session_id
        self.topic = publisher.settings.session_topic(session_id)
        self._start_metadata = start_metadata
        self._start_ts = start_timestamp_ms
        self._flush_on_exit = flush_on_exit
        self._lock = threading.RLock()  # re-entered by start()/end() -> _emit
        self._seq = 0
        self._last_ts: int | None = None
        self._calls: dict[str, str] = {}  # call_id -> tool_name, for results
        self._started = False
        self._ended = False

    @property
    def next_seq(self) -> int:
        return self._seq

    # -- lifecycle ---------------------------------------------------------
    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._ended:
            return
        meta: dict[str, str] = {}
        error: str | None = None
        if exc is not None:
            meta["outcome"] = "exception"
            error = f"{type(exc).__name__}: {exc}"[:2000]
        self.end(metadata=meta, error_message=error)

    def start(self) -> None:
        """Create the topic, announce it, emit ``session_start`` (idempotent)."""
        with self._lock:
            if self._started:
                return
            pub = self.publisher
            pub.ensure_session_topic(self.session_id)
            ts = self._start_ts
            info: dict[str, JsonValue] = {
                "agent_id": self.agent_id,
                "parent_session_id": self.parent_session_id,
                "timestamp_ms": ts if ts is not None else now_ms(),
            }
            pub.announce(self.session_id, self.topic, info)
            self._emit("session_start", timestamp_ms=ts, metadata=self._start_metadata)
            self._started = True

    def end(
        self,
        *,
        metadata: Mapping[str, str] | None = None,
        error_message: str | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Emit ``session_end`` (and flush unless ``flush_on_exit=False``)."""
        with self._lock:
            if self._ended:
                return
            self._emit(
                "session_end",
                timestamp_ms=timestamp_ms,
                metadata=as_str_metadata(metadata),
                error_message=error_message,
            )
            self._ended = True
        if self._flush_on_exit:
            self.publisher.flush()

    # -- events ------------------------------------------------------------
    def tool_call(
        self,
        name: str,
        input: JsonValue = None,
        call_id: str | None = None,
        *,
        params_summary: str | None = None,
        metadata: Mapping[str, str] | None = None,
        timestamp_ms: int | None = None,
    ) -> str:
        """Record a tool invocation; returns its ``call_id`` (generated if not given)."""
        _require_str(name, "tool_name")
        cid = call_id if call_id is not None else f"call-{uuid.uuid4().hex[:16]}"
        _require_str(cid, "call_id")
        summary = params_summary if params_summary is not None else summarize_params(input)
        self._emit(
            "tool_call",
            timestamp_ms=timestamp_ms,
            call_id=cid,
            tool_name=name,
            input=input,
            params_summary=summary,
            metadata=as_str_metadata(metadata),
        )
        with self._lock:
            self._calls[cid] = name
        return cid

    def tool_result(
        self,
        call_id: str,
        output: JsonValue = None,
        is_error: bool = False,
        error: str | None = None,
        latency_ms: int | None = None,
        *,
        tool_name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Record the result of ``call_id``; ``is_error=True`` marks a tool failure."""
        _require_str(call_id, "call_id")
        if not isinstance(is_error, bool):
            raise InvalidEventError("is_error", f"expected bool, got {type(is_error).__name__}")
        with self._lock:
            name = tool_name if tool_name is not None else self._calls.pop(call_id, None)
        self._emit(
            "tool_result",
            timestamp_ms=timestamp_ms,
            call_id=call_id,
            tool_name=name,
            output=output,
            is_error=is_error or error is not None,
            error_message=error,
            latency_ms=_opt_int(latency_ms, "latency_ms"),
            metadata=as_str_metadata(metadata),
        )

    def error(
        self,
        message: str,
        call_id: str | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """An error: of the call ``call_id`` (its failed result) or of the agent."""
        _require_str(message, "error_message")
        with self._lock:
            name = self._calls.pop(call_id, None) if call_id is not None else None
        self._emit(
            "error",
            timestamp_ms=timestamp_ms,
            call_id=call_id,
            tool_name=name,
            is_error=True,
            error_message=message,
            metadata=as_str_metadata(metadata),
        )

    def model_step(
        self,
        text: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        latency_ms: int | None = None,
        metadata: Mapping[str, str] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """One model call: its text and token usage."""
        self._emit(
            "model_step",
            timestamp_ms=timestamp_ms,
            text=text,
            input_tokens=_opt_int(input_tokens, "input_tokens"),
            output_tokens=_opt_int(output_tokens, "output_tokens"),
            latency_ms=_opt_int(latency_ms, "latency_ms"),
            metadata=as_str_metadata(metadata),
        )

    def message(
        self,
        text: str,
        *,
        metadata: Mapping[str, str] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """A message (user or assistant text that is not a model step)."""
        self._emit(
            "message",
            timestamp_ms=timestamp_ms,
            text=_require_str(text, "text"),
            metadata=as_str_metadata(metadata),
        )

    def budget(
        self,
        *,
        deadline_ms: int | None = None,
        max_tokens: int | None = None,
        tokens_used: int | None = None,
        max_tool_calls: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Set the session's budget (replaces the previous one)."""
        self._emit(
            "budget",
            timestamp_ms=timestamp_ms,
            budget=Budget(
                deadline_ms=_opt_int(deadline_ms, "budget.deadline_ms"),
                max_tokens=_opt_int(max_tokens, "budget.max_tokens"),
                tokens_used=_opt_int(tokens_used, "budget.tokens_used"),
                max_tool_calls=_opt_int(max_tool_calls, "budget.max_tool_calls"),
            ),
        )

    def snapshot(self, snapshot_id: str | None = None, *, timestamp_ms: int | None = None) -> str:
        """Ask the observer for a restore point; returns its id.

        Emits a ``snapshot`` control event (``metadata["snapshot_id"]``).  The id
        defaults to ``snap-<seq>`` where ``seq`` is this event's own seq, so it
        is unique within the session.  See :mod:`streams.snapshots` for what the
        worker stores and what a later :meth:`restore` brings back.
        """
        from streams.snapshots import check_snapshot_id

        with self._lock:  # the id names the seq this very event gets
            self.start()
            sid = snapshot_id if snapshot_id is not None else f"snap-{self._seq}"
            check_snapshot_id(sid, field="snapshot_id")
            self._emit("snapshot", timestamp_ms=timestamp_ms, metadata={META_SNAPSHOT_ID: sid})
        return sid

    def restore(self, snapshot_id: str, *, timestamp_ms: int | None = None) -> None:
        """Make the observer go back to the restore point ``snapshot_id``.

        Trajectory window, observer state, budget and current assessment return
        to that point; later events continue from there (``seq`` keeps growing).
        An id the observer no longer holds is dead-lettered by the worker.
        """
        from streams.snapshots import check_snapshot_id

        check_snapshot_id(snapshot_id, field="snapshot_id")
        self._emit("restore", timestamp_ms=timestamp_ms, metadata={META_SNAPSHOT_ID: snapshot_id})

    def emit(self, event: TraceEvent) -> TraceEvent:
        """Publish a prepared event (e.g. read from a file) as part of this session.

        ``session_id``, ``seq``, ``agent_id`` / ``parent_session_id`` (when unset) are
        this session's; the event's own ``timestamp_ms`` is kept.  Returns what was sent.
        """
        return self._emit(
            event.type,
            timestamp_ms=event.timestamp_ms,
            call_id=event.call_id,
            tool_name=event.tool_name,
            input=event.input,
            output=event.output,
            params_summary=event.params_summary
            if event.params_summary is not None
            else (summarize_params(event.input) if event.type == "tool_call" else None),
            is_error=event.is_error,
            error_message=event.error_message,
            text=event.text,
            input_tokens=event.input_tokens,
            output_tokens=event.output_tokens,
            latency_ms=event.latency_ms,
            metadata=dict(event.metadata),
            budget=event.budget,
            agent_id=event.agent_id,
            parent_session_id=event.parent_session_id,
        )

    # -- the one path to the wire --------------------------------------------
    def _emit(
        self,
        etype: EventType,
        *,
        timestamp_ms: int | None,
        input: JsonValue = None,
        output: JsonValue = None,
        metadata: dict[str, str] | None = None,
        agent_id: str | None = None,
        parent_session_id: str | None = None,
        **fields: Any,
    ) -> TraceEvent:
        pub = self.publisher
        if not self._started and etype != "session_start":
            self.start()  # locked and idempotent
        meta = dict(metadata or {})
        s = pub.settings
        if s.privacy == "summary":
            input = None
            output = None
        else:
            input, cut_in = cap_payload(input, "input", s.max_payload_bytes, pub.on_oversize)
            output, cut_out = cap_payload(output, "output", s.max_payload_bytes, pub.on_oversize)
            if cut_in:
                meta[META_INPUT_TRUNCATED] = "true"
            if cut_out:
                meta[META_OUTPUT_TRUNCATED] = "true"
        explicit_ts = _opt_int(timestamp_ms, "timestamp_ms")
        with self._lock:
            if self._ended:
                raise InvalidEventError(
                    "session", f"session {self.session_id!r} has ended; start a new session"
                )
            if explicit_ts is None:
                ts = now_ms()
                if self._last_ts is not None and ts < self._last_ts:
                    ts = self._last_ts  # wall clock stepped back: keep event time monotone
            else:
                ts = explicit_ts
            event = TraceEvent(
                type=etype,
                session_id=self.session_id,
                seq=self._seq,
                timestamp_ms=ts,
                agent_id=agent_id if agent_id is not None else self.agent_id,
                parent_session_id=parent_session_id
                if parent_session_id is not None
                else self.parent_session_id,
                input=input,
                output=output,
                metadata=meta,
                **fields,
            )
            # Encode/produce inside the lock: seq order == order on the topic, and a
            # value that cannot be encoded does not consume a seq.
            pub.send(event)
            self._seq += 1
            self._last_ts = ts if self._last_ts is None else max(ts, self._last_ts)
        return event


__all__ = ["DEFAULT_LINGER_MS", "Publisher", "Session", "now_ms"]
