"""Every error this project raises on purpose: one tree, three branches.

::

    TrajectoryError                      root (streams.core.errors)
    ├── UsageError                       bad usage or input: fix it; retrying cannot help
    │   │                                (CLI exit 2)
    │   ├── ConfigError                  a setting; .key names it       (streams.core.errors)
    │   ├── InvalidEventError            an event; .field names it      (streams.core.errors)
    │   ├── UnserializableError          a value cannot be encoded      (streams.core.errors)
    │   ├── StateDecodeError             stored state bytes are corrupt (streams.core.errors)
    │   ├── ImportFormatError            a trajectory file; .source names it
    │   ├── MappingError                 an OTLP span/log record; .where names the attribute
    │   ├── SerdeError                   a Kafka message's bytes
    │   │   ├── UnknownSchemaError       names a schema we do not know
    │   │   ├── MalformedMessageError    not a framed Avro message of the schema
    │   │   └── OversizedMessageError    larger than the configured cap
    │   ├── UndecodableRecordError       replay --strict met a record it cannot use
    │   ├── OutputError                  an applied event whose outputs cannot be encoded
    │   ├── SecurityError                Kafka refused the credential, certificate or ACL
    │   └── BadRequest                   an HTTP request we answer 400; .parameter
    │       ├── UnsupportedMediaType     answered 415
    │       └── BodyTooLarge             answered 413
    ├── KafkaIOError                     talking to Kafka failed (CLI exit 4); carries
    │   │                                .topic .partition .code .code_number .retriable
    │   ├── BrokerError                  the broker cannot be obtained, started or reached
    │   ├── DeliveryError                a produce/commit/admin call was not acknowledged
    │   ├── SeekTimeoutError             the worker's seek to committed offsets never ended
    │   ├── RecoveryTimeoutError         a step of the worker's table recovery never ended
    │   └── ReplayReadError              reading recorded topics failed
    └── InternalError                    a bug, not bad input nor I/O (CLI exit 1)
        └── FlushError                   worker state values unencodable at a flush

Why the split: a caller (or a script around ``trajectory``) must tell "my input is
wrong" from "Kafka is unavailable": the first never heals by itself, the second may
(:attr:`KafkaIOError.retriable` says so when Kafka told us).  The pure core
(``streams.core``) defines and raises only the usage errors it needs; everything
about I/O lives here, and this module imports nothing but the core's error module,
so importing it loads no Kafka client.

Invariants: every public class is in ``__all__`` and under exactly one of
:class:`UsageError`, :class:`KafkaIOError`, :class:`InternalError`
(``tests/unit/test_errors.py`` checks both, and that no other module under
``streams/`` defines an exception class of its own apart from private
control-flow signals).  :func:`exit_code` is the one mapping from an error to the
CLI's exit code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol, Self, cast

from streams.core.errors import (
    ConfigError,
    InvalidEventError,
    StateDecodeError,
    TrajectoryError,
    UnserializableError,
    UsageError,
)

#: CLI exit codes (``trajectory --help`` and docs/errors.md document them).
EXIT_OK: Final = 0
#: The command ran and found a failure (``eval`` verdict fail, ``broker status`` down),
#: or an unexpected error (a bug: :class:`InternalError`, or a traceback).
EXIT_FAILURE: Final = 1
#: Bad usage or input (:class:`UsageError`, or an argparse error).
EXIT_USAGE: Final = 2
#: A stop ran out of its grace after SIGTERM (``trajectory router``; ``trajectory
#: worker --stop-timeout``).
EXIT_STOP_TIMEOUT: Final = 3
#: Kafka I/O failed (:class:`KafkaIOError`): the broker is down, slow or refused a write.
EXIT_IO: Final = 4


# -- usage: bad input ---------------------------------------------------------------
class ImportFormatError(UsageError, ValueError):
    """A trajectory file is not in the format it claims (or no format matched)."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        super().__init__(f"{source}: {message}")


class MappingError(UsageError, ValueError):
    """One span or log record that should be a trajectory step but cannot be mapped.

    ``where`` names the attribute (``attributes.gen_ai.tool.name``); ``str()`` is the
    full reason, fit for a ``partial_success.error_message``.
    """

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        super().__init__(f"{where}: {message}")


class SerdeError(UsageError):
    """Root of Kafka message encoding/decoding failures: the bytes, not the transport."""


class UnknownSchemaError(SerdeError):
    """The message names a schema (fingerprint or registry id) we do not know."""


class MalformedMessageError(SerdeError):
    """The bytes are not a valid framed Avro message of the expected schema."""


class OversizedMessageError(SerdeError):
    """The message is larger than the configured cap."""


class UndecodableRecordError(UsageError):
    """``--strict`` replay/export met a record it cannot use (undecodable or refused).

    Where the record is: ``topic``, ``partition``, ``offset``.  Without ``--strict``
    the same record is counted and reported, and the read goes on.
    """

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(message)


class OutputError(UsageError):
    """An applied event whose pattern/assessment/snapshot records cannot be encoded.

    The worker dead-letters the event with ``cause`` (the encoding error) as reason.
    """

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"applied, but its outputs cannot be encoded: {cause}")


class SecurityError(UsageError):
    """Kafka refused the credentials, the certificate or the operation (an ACL).

    A usage error: the message names the setting (or the ``trajectory acl`` grant)
    to fix, and retrying with the same credential cannot help.  ``code`` is the
    Kafka error name when the refusal came with one.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        self.code = code
        super().__init__(message)


class BadRequest(UsageError, ValueError):
    """An HTTP request the worker view or the OTLP receiver cannot use (answered 400).

    ``parameter`` names the query parameter when one is at fault (``str()`` then
    starts with it); the body is answered as is, so clients must not retry.
    """

    def __init__(self, message: str, *, parameter: str | None = None) -> None:
        self.parameter = parameter
        super().__init__(f"{parameter}: {message}" if parameter else message)


class UnsupportedMediaType(BadRequest):
    """Neither protobuf nor JSON (answered with 415)."""


class BodyTooLarge(BadRequest):
    """The (decompressed) body is over the size limit (answered with 413)."""


# -- I/O: Kafka ---------------------------------------------------------------------
class _KafkaErrorLike(Protocol):
    """What we read of a ``confluent_kafka.KafkaError`` (no import of the client here)."""

    def name(self) -> str: ...

    def code(self) -> int: ...

    def retriable(self) -> bool: ...


class KafkaIOError(TrajectoryError):
    """Talking to Kafka failed: the broker is down, slow, or did not acknowledge.

    Attributes (None when unknown): ``topic`` and ``partition`` the call was about;
    ``code`` the Kafka error name (``"_MSG_TIMED_OUT"``, ``"NOT_LEADER_FOR_PARTITION"``)
    and ``code_number`` its number, from ``confluent_kafka.KafkaError`` when Kafka
    gave one; ``retriable`` True only when Kafka (or the failure, e.g. a broker that
    does not answer yet) says the same call may succeed later.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        code: str | None = None,
        code_number: int | None = None,
        retriable: bool = False,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.code = code
        self.code_number = code_number
        self.retriable = retriable
        super().__init__(message)

    @classmethod
    def from_kafka(
        cls,
        message: str,
        err: object,
        *,
        topic: str | None = None,
        partition: int | None = None,
        retriable: bool | None = None,
    ) -> Self:
        """``cls(message, ...)`` with ``code``/``retriable`` read from ``err``.

        ``err`` is a ``confluent_kafka.KafkaError``, a ``KafkaException`` carrying
        one (``args[0]``), or anything else (then code is None and retriable False
        unless ``retriable`` is given).  A ``retriable`` argument overrides Kafka's.
        """
        kerr = kafka_error_of(err)
        code = kerr.name() if kerr is not None else None
        number = kerr.code() if kerr is not None else None
        if retriable is None:
            retriable = bool(kerr.retriable()) if kerr is not None else False
        return cls(
            message,
            topic=topic,
            partition=partition,
            code=code,
            code_number=number,
            retriable=retriable,
        )


class BrokerError(KafkaIOError):
    """The Kafka broker could not be obtained, started, stopped or reached."""


class DeliveryError(KafkaIOError):
    """Kafka did not acknowledge a produce, commit or admin call; nothing was dropped."""


class SeekTimeoutError(KafkaIOError):
    """The worker's seek to the committed offsets (the offset fetch from the group
    coordinator) did not end within ``--seek-timeout``: the worker stops, non-zero.

    Why stop: Faust's recovery waits ``broker_request_timeout`` (90 s) for that seek
    and, when it runs out, ends recovery *silently and for good*; the worker then
    stays up, answers HTTP and applies nothing (docs/faust-notes.md "A recovery seek
    that outlasts broker_request_timeout").  A restart seeks again; nothing of the
    assignment was handled before the seek, so nothing is lost or applied twice.
    """

    def __init__(
        self, partitions: Sequence[tuple[str, int]], waited_s: float, setting: str
    ) -> None:
        """``partitions``: the ``(topic, partition)`` pairs the seek was for, named by
        topic in the order first given (put the events topic first)."""
        self.partitions = list(partitions)
        self.waited_s = waited_s
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            by_topic.setdefault(topic, []).append(partition)
        named = ", ".join(
            f"{topic}[{','.join(map(str, sorted(ps)))}]" for topic, ps in list(by_topic.items())[:4]
        )
        more = f" and {len(by_topic) - 4} other topic(s)" if len(by_topic) > 4 else ""
        super().__init__(
            f"the seek of {named or 'no partition'}{more} to the committed offsets has "
            f"not ended after {waited_s:.0f} s (the group coordinator does not answer "
            f"the offset fetch); stopping the worker so that a restart seeks again "
            f"(nothing of this assignment was handled); raise {setting} for a slow cluster",
            retriable=True,
        )


class RecoveryTimeoutError(KafkaIOError):
    """A step of the worker's table recovery (a producer flush, the high watermarks or
    offsets of the changelogs, a seek) did not end within Faust's
    ``broker_request_timeout``: the worker stops, non-zero.

    Why: Faust then ends its recovery silently and for good (``Recovery._wait``
    raises ``ServiceStopped``, the loop ``break``s), the worker staying up and
    applying nothing (the same path as :class:`SeekTimeoutError`, whose bound is
    shorter).  Nothing was handled from the partitions under recovery.
    """

    def __init__(self, step: str, waited_s: float) -> None:
        self.step = step
        self.waited_s = waited_s
        super().__init__(
            f"table recovery: {step} has not ended after {waited_s:.0f} s (Faust's "
            f"broker_request_timeout; Kafka does not answer); stopping the worker so "
            f"that a restart recovers again (nothing of this assignment was handled)",
            retriable=True,
        )


class ReplayReadError(KafkaIOError):
    """Reading recorded topics for replay/export failed (a read error, no data in time)."""


# -- internal: a bug ----------------------------------------------------------------
class InternalError(TrajectoryError):
    """A broken invariant of this program, neither bad input nor failed I/O: report it."""


class _PendingWriteLike(Protocol):
    table: str
    key: bytes


class FlushError(InternalError, RuntimeError):
    """Values that could not be encoded at a flush (every other value was written).

    Input that cannot be encoded is dead-lettered when it is applied
    (``EventProcessor.apply``), so this is a bug, not bad input: the worker stops
    without committing the offsets, and the values stay dirty in memory.
    """

    def __init__(self, failed: Sequence[tuple[Any, Exception]]) -> None:
        self.failed = list(failed)
        named = "; ".join(f"{_describe(p)}: {type(e).__name__}: {e}" for p, e in self.failed[:5])
        more = f" (+{len(self.failed) - 5} more)" if len(self.failed) > 5 else ""
        super().__init__(
            f"state flush: {len(self.failed)} value(s) cannot be encoded, offsets not "
            f"committed: {named}{more}"
        )


def _describe(p: _PendingWriteLike) -> str:
    return f"{p.table}[{p.key.decode('utf-8', 'replace')!r}]"


# -- helpers ------------------------------------------------------------------------
def kafka_error_of(err: object) -> _KafkaErrorLike | None:
    """The ``KafkaError`` in ``err`` (itself, or a ``KafkaException``'s first arg)."""
    candidates: tuple[object, ...] = (err, *(getattr(err, "args", None) or ())[:1])
    for candidate in candidates:
        if all(callable(getattr(candidate, m, None)) for m in ("name", "code", "retriable")):
            return cast(_KafkaErrorLike, candidate)
    return None


def exit_code(exc: BaseException) -> int:
    """The CLI exit code for ``exc``: 2 usage, 4 Kafka I/O, 1 anything else."""
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, KafkaIOError):
        return EXIT_IO
    return EXIT_FAILURE


__all__ = [
    "EXIT_FAILURE",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_STOP_TIMEOUT",
    "EXIT_USAGE",
    "BadRequest",
    "BodyTooLarge",
    "BrokerError",
    "ConfigError",
    "DeliveryError",
    "FlushError",
    "ImportFormatError",
    "InternalError",
    "InvalidEventError",
    "KafkaIOError",
    "MalformedMessageError",
    "MappingError",
    "OutputError",
    "OversizedMessageError",
    "RecoveryTimeoutError",
    "ReplayReadError",
    "SecurityError",
    "SeekTimeoutError",
    "SerdeError",
    "StateDecodeError",
    "TrajectoryError",
    "UndecodableRecordError",
    "UnknownSchemaError",
    "UnserializableError",
    "UnsupportedMediaType",
    "UsageError",
    "exit_code",
    "kafka_error_of",
]
