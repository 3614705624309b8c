"""The agent's side of live assessments: the context block for its next prompt.

Two ways to get it:

* :func:`context_for` — one-shot: looks up the session's latest record on the
  compacted ``<prefix>.assessments`` topic.  It reads only the partition the
  session id maps to (:func:`partition_for_key`, the Java client's murmur2
  partitioner) from its end backwards in chunks (or whole, when small), so the
  cost does not grow with the number of other sessions' records after it.
* :class:`PromptContext` — for a long-running agent: keeps a subscriber open in
  a background thread from the topic's beginning and answers from memory (a dict
  lookup per call).

The text returned is the ``rendered`` field of the assessment record, unchanged:
the worker puts ``CurrentAssessment.render()`` there, so it is byte-identical to
what the offline core renders for the same events.  Staleness follows the
specification's ``CurrentAssessment.is_stale``: with ``current_call_index`` given,
an assessment made more than ``max_age_calls`` tool calls earlier
(``current_call_index - call_index > max_age_calls``) gives ""; without it the
assessment is measured against itself (never stale), as in the specification's
``build_context`` sketch.

Partitioner contract: the worker must produce ``<prefix>.assessments`` with the
murmur2 partitioner over the UTF-8 session id, ``(murmur2(key) & 0x7fffffff) %
partitions``: that is what Java clients, aiokafka's ``DefaultPartitioner`` (so
Faust) and librdkafka's ``partitioner=murmur2_random`` do — but *not*
librdkafka's default ``consistent_random`` (CRC32).  A record the worker put in
another partition is not found by :func:`context_for` (PromptContext reads all
partitions and is unaffected).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams.errors import BrokerError, ConfigError
from streams.security import SecurityError, client_config, explain_kafka_error
from streams.serde.avro import AssessmentSerde, AssessmentWire
from streams.settings import Settings, check_session_id

#: Partitions with at most this many offsets are read whole, front to back.
SMALL_PARTITION: Final = 2000
#: Offsets read per backwards step otherwise.
CHUNK: Final = 1000


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), as unsigned 32 bits."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    end4 = length - length % 4
    for i in range(0, end4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    extra = length % 4
    if extra >= 3:
        h ^= data[end4 + 2] << 16
    if extra >= 2:
        h ^= data[end4 + 1] << 8
    if extra >= 1:
        h ^= data[end4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java default partitioner (and murmur2_random) picks for ``key``."""
    if num_partitions < 1:
        raise ConfigError("num_partitions", f"must be >= 1, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def render_if_fresh(
    wire: AssessmentWire | None, current_call_index: int | None, max_age_calls: int
) -> str:
    """``wire.rendered`` unless there is none or it is stale (module docstring)."""
    if wire is None:
        return ""
    if current_call_index is not None and current_call_index - wire.call_index > max_age_calls:
        return ""
    return wire.rendered


def _serde(settings: Settings) -> AssessmentSerde:
    return AssessmentSerde(
        "confluent" if settings.schema_registry_url else "single-object",
        registry=settings.schema_registry_url,
        max_bytes=settings.max_message_bytes,
    )


def latest_assessment(
    session_id: str,
    *,
    settings: Settings,
    timeout_s: float = 10.0,
    consumer_config: Mapping[str, Any] | None = None,
) -> AssessmentWire | None:
    """The latest (highest offset) assessment of ``session_id``, or None.

    None also when the latest record is a tombstone (session deleted) or the
    topic does not exist yet.  A malformed latest record raises
    :class:`~streams.errors.MalformedMessageError`.
    """
    check_session_id(session_id)
    topic = settings.assessments_topic
    key = session_id.encode("utf-8")
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        # the metadata request below names the topic: never let it create one
        "allow.auto.create.topics": False,
        "group.id": f"{settings.prefix}.context.{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 50,
        **client_config(settings.security),
    }
    config.update(consumer_config or {})
    config["isolation.level"] = "read_committed"
    consumer = Consumer(config)
    try:
        try:
            md = consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            raise BrokerError.from_kafka(
                f"cannot read metadata of {topic} from Kafka at {settings.bootstrap}: {exc} "
                "(is the broker running? `trajectory broker start`)",
                exc,
                topic=topic,
            ) from exc
        tm = md.topics.get(topic)
        if tm is None or tm.error is not None or not tm.partitions:
            if (
                tm is not None
                and tm.error is not None
                and tm.error.code()
                not in (
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    KafkaError.LEADER_NOT_AVAILABLE,
                )
            ):
                refused = explain_kafka_error(tm.error, settings.security)  # a missing ACL
                if refused is not None:
                    raise SecurityError(f"reading {topic}: {refused}", code=tm.error.name())
                raise BrokerError.from_kafka(
                    f"metadata of {topic}: {tm.error.str()}", tm.error, topic=topic
                )
            return None
        partition = partition_for_key(key, len(tm.partitions))
        tp = TopicPartition(topic, partition)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        deadline = time.monotonic() + timeout_s
        if high - low <= SMALL_PARTITION:
            found = _scan(consumer, tp, low, high, key, deadline)
        else:
            found = None
            end = high
            while end > low and found is None:
                start = max(low, end - CHUNK)
                found = _scan(consumer, tp, start, end, key, deadline)
                end = start
        if found is None or not found:
            return None
        return _serde(settings).decode(found)
    finally:
        consumer.close()


def _scan(
    consumer: Consumer, tp: TopicPartition, start: int, end: int, key: bytes, deadline: float
) -> bytes | None:
    """Value of the last record with ``key`` in offsets [start, end); b"" = tombstone.

    Offsets may be missing (compaction, transaction markers): the scan stops at
    the first record at or past ``end - 1`` or at the partition's end (EOF).
    """
    if start >= end:
        return None
    consumer.assign([TopicPartition(tp.topic, tp.partition, start)])
    last: bytes | None = None
    try:
        while True:
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"reading {tp.topic} partition {tp.partition} offsets {start}..{end} "
                    "timed out (raise timeout_s, or check the broker)",
                    topic=tp.topic,
                    partition=tp.partition,
                    retriable=True,
                )
            first = consumer.poll(0.5)  # returns at the first message, unlike consume
            batch = [] if first is None else [first, *consumer.consume(_BATCH, 0)]
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return last
                    if err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise BrokerError.from_kafka(
                            f"reading {tp.topic}: {err.str()}",
                            err,
                            topic=tp.topic,
                            partition=tp.partition,
                        )
                    continue  # transient: librdkafka retries until the deadline
                offset = msg.offset()
                if offset is None or offset >= end:
                    return last
                if msg.key() == key:
                    last = msg.value() or b""
                if offset >= end - 1:
                    return last
    finally:
        consumer.unassign()


_BATCH: Final = 500


def context_for(
    session_id: str,
    *,
    settings: Settings,
    max_age_calls: int = 20,
    current_call_index: int | None = None,
    timeout_s: float = 10.0,
) -> str:
    """The context block for the agent's next prompt ("" when none or stale)."""
    wire = latest_assessment(session_id, settings=settings, timeout_s=timeout_s)
    return render_if_fresh(wire, current_call_index, max_age_calls)


#: Environment variables :func:`context_from_view` reads when no argument is given.
VIEW_URL_ENV: Final = "TRAJECTORY_VIEW_URL"
VIEW_TOKEN_ENV: Final = "TRAJECTORY_VIEW_TOKEN"
VIEW_TOKEN_FILE_ENV: Final = "TRAJECTORY_VIEW_TOKEN_FILE"


def _view_token(token: str | None, token_file: str | None) -> str | None:
    import os

    if token:
        return token
    path = token_file or os.environ.get(VIEW_TOKEN_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                first = fh.readline().strip()
        except OSError as exc:
            raise ConfigError(
                "view_token_file",
                f"{path!r} cannot be read ({exc}); give the file holding the tenant's "
                f"bearer token ({VIEW_TOKEN_FILE_ENV})",
            ) from exc
        if not first:
            raise ConfigError("view_token_file", f"{path!r} is empty: put the token on line 1")
        return first
    return os.environ.get(VIEW_TOKEN_ENV) or None


def context_from_view(
    session_id: str,
    *,
    view_url: str | None = None,
    token: str | None = None,
    token_file: str | None = None,
    ca_file: str | None = None,
    max_age_calls: int = 20,
    current_call_index: int | None = None,
    timeout_s: float = 5.0,
) -> str:
    """:func:`context_for` through the worker's HTTP view instead of Kafka.

    Why: on a secured cluster an agent's Kafka credential may write its own session
    topics but read nothing (``docs/security.md``: Kafka ACLs are per topic, and the
    assessments topic holds every tenant's sessions).  The view checks the tenant's
    bearer token and answers only that tenant's sessions, so this is how an agent
    with least privilege reads its assessment.  Same answer as :func:`context_for`
    ("" when there is none yet, or it is stale).

    ``view_url`` (``TRAJECTORY_VIEW_URL``, e.g. ``https://observer:6066``), ``token``
    (``TRAJECTORY_VIEW_TOKEN``) or ``token_file`` (``TRAJECTORY_VIEW_TOKEN_FILE``),
    ``ca_file``: the CA of the view's certificate when it serves HTTPS with a
    private CA.  A refused token raises :class:`~streams.security.SecurityError`; an
    unreachable view raises :class:`~streams.errors.BrokerError`.
    """
    import json
    import os
    import ssl
    import urllib.error
    import urllib.parse
    import urllib.request

    check_session_id(session_id)
    base = view_url or os.environ.get(VIEW_URL_ENV)
    if not base:
        raise ConfigError("view_url", f"no HTTP view to ask: pass view_url= or set {VIEW_URL_ENV}")
    url = (
        f"{base.rstrip('/')}/sessions/{urllib.parse.quote(session_id, safe='')}"
        "/assessment?format=json"
    )
    headers = {"Accept": "application/json"}
    bearer = _view_token(token, token_file)
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    context = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as resp:
            body = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return ""  # unknown session, or no assessment yet: nothing to say
        if exc.code in (401, 403):
            raise SecurityError(
                f"the HTTP view at {base} refused the token ({exc.code}) for session "
                f"{session_id!r}: check view_token / {VIEW_TOKEN_ENV} (or "
                f"{VIEW_TOKEN_FILE_ENV}) and that the token's tenant owns the session"
            ) from exc
        raise BrokerError(f"the HTTP view at {base} answered {exc.code} for {url}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise BrokerError(
            f"the HTTP view at {base} cannot be reached ({exc}); check view_url / "
            f"{VIEW_URL_ENV} (the worker's --web-port)"
        ) from exc
    call_index = body.get("call_index")
    rendered = body.get("rendered")
    if not isinstance(call_index, int) or not isinstance(rendered, str):
        raise BrokerError(f"the HTTP view at {base} answered an unexpected body for {url}")
    if current_call_index is not None and current_call_index - call_index > max_age_calls:
        return ""
    return rendered


class PromptContext:
    """Answers :func:`context_for` questions from memory for long-running agents.

    A background thread keeps an :class:`~streams.sdk.subscriber.AssessmentSubscriber`
    reading ``<prefix>.assessments`` from the beginning (restricted to
    ``sessions`` / ``globs`` / ``trees`` when given, to bound memory: one record
    per session followed) and keeps each session's latest record (a tombstone
    forgets it).  :meth:`context` is a dict lookup.  Construction waits until the
    topic was read to its end once (``startup_timeout_s``), so the first answer
    is not emptier than :func:`context_for`'s would be.  An error in the thread
    is re-raised by the next :meth:`context` / :meth:`latest` call.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        sessions: str | Iterable[str] | None = None,
        globs: str | Iterable[str] | None = None,
        trees: str | Iterable[str] | None = None,
        startup_timeout_s: float = 30.0,
        poll_interval_s: float = 0.1,
    ) -> None:
        from streams.sdk.subscriber import AssessmentSubscriber, Tombstone

        self._tombstone = Tombstone
        self._sub = AssessmentSubscriber(
            settings,
            sessions=sessions,
            globs=globs,
            trees=trees,
            start="beginning",
            tombstones=True,
            poll_interval_s=poll_interval_s,
        )
        self._lock = threading.Lock()
        self._latest: dict[str, AssessmentWire] = {}
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._caught_up = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="prompt-context", daemon=True)
        self._thread.start()
        if not self._caught_up.wait(startup_timeout_s):
            self.close()
            self._raise_error()
            raise BrokerError(
                f"PromptContext: {settings.assessments_topic} was not read to its end within "
                f"{startup_timeout_s:g}s (does it exist? the worker creates it)"
            )
        self._raise_error()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self._sub.poll()
                if batch:
                    with self._lock:
                        for item in batch:
                            if isinstance(item, self._tombstone):
                                self._latest.pop(item.session_id, None)
                            elif isinstance(item, AssessmentWire):
                                self._latest[item.session_id] = item
                if self._sub.caught_up:
                    self._caught_up.set()
        except BaseException as exc:  # handed to the caller's thread, never dropped
            self._error = exc
            self._caught_up.set()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def latest(self, session_id: str) -> AssessmentWire | None:
        self._raise_error()
        with self._lock:
            return self._latest.get(session_id)

    def context(
        self, session_id: str, *, current_call_index: int | None = None, max_age_calls: int = 20
    ) -> str:
        """Same answer as :func:`context_for`, from memory."""
        return render_if_fresh(self.latest(session_id), current_call_index, max_age_calls)

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(self._latest)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        self._sub.close()

    def __enter__(self) -> PromptContext:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = [
    "CHUNK",
    "SMALL_PARTITION",
    "PromptContext",
    "context_for",
    "context_from_view",
    "latest_assessment",
    "murmur2",
    "partition_for_key",
    "render_if_fresh",
]
