"""Seeded generator of malformed and abusive inputs for the fault suite (issue #15).

Pure: :func:`generate` is a function of its arguments only (``random.Random(seed)``,
no clock, no Kafka), so the same seed gives byte-identical inputs and a failing
run can be reproduced from the seed the report prints.

Each :class:`ChaosInput` carries the bytes to produce, where to produce them, and
the outcome the pipeline must show for it (:attr:`ChaosInput.expect`):

* ``"dlq"``: the router must dead-letter it to ``<prefix>.dlq`` with a
  ``dlq.reason`` header (matched by ``dlq.source.*`` headers).  Classes:
  random bytes, truncated Avro, unknown schema fingerprint, payload session !=
  topic session, oversized (over ``max_message_bytes``), deep nesting in
  ``input_json`` (200,000 deep, and just over the depth limit), NaN/Infinity in
  ``input_json``, invalid UTF-8 in an Avro string.  These go to the topics of
  *live valid sessions* (``slot``: the driver resolves it to the session that
  slot runs at that moment), so a poison pill sits in front of valid events.
* ``"dedup"``: ``duplicate_seq``: an exact re-send of a valid event already
  published in that slot's session (the driver materialises the bytes; the
  generator only says which fraction of the published events to pick).  The
  worker applies every seq once, so the session's final ``events`` still equals
  its distinct published seqs.
* ``"apply"`` / ``"stale"``: events of the generator's own abuse sessions
  (``session`` set, bytes ready).  ``out_of_order_seq`` sessions publish their
  seqs out of order: the worker's contract is "seq strictly increasing per
  session; an older-or-equal seq is a redelivery", so an event whose seq is below
  the highest already published is ``"stale"`` (ignored, never applied) and the
  others are ``"apply"``.  ``clock_skew`` sessions are valid in order but with
  timestamps far in the past (epoch 0..1 day) or future (year ~2200): all
  ``"apply"``.  Their expected final ``events`` / ``last_seq`` are in
  :func:`expected_abuse_state`.

Sizes: ``oversized`` (~1 MiB each) and the 200,000-deep texts (400 kB each) are
few (one per 1,000 inputs, at least one); the other classes share the rest evenly.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

import fastavro

from streams.core.events import TraceEvent
from streams.serde import EventSerde
from streams.serde.jsontext import MAX_JSON_DEPTH

Expect = Literal["dlq", "dedup", "apply", "stale"]

#: The depth of the issue's poison pill (router ``RecursionError`` in ``json.loads``).
DEEP_NESTING: Final = 200_000
#: Depth limit the "just over the limit" inputs exceed: the serde's (``input_json``
#: nested deeper than this is dead-lettered by the router and the worker alike).
DEPTH_LIMIT: Final = MAX_JSON_DEPTH

DLQ_CLASSES: Final[tuple[str, ...]] = (
    "random_bytes",
    "truncated_avro",
    "unknown_fingerprint",
    "session_mismatch",
    "oversized",
    "deep_nesting",
    "deep_over_limit",
    "nan_infinity",
    "invalid_utf8",
)
OTHER_CLASSES: Final[tuple[str, ...]] = ("duplicate_seq", "out_of_order_seq", "clock_skew")
CLASSES: Final[tuple[str, ...]] = DLQ_CLASSES + OTHER_CLASSES
#: Classes whose inputs are large; capped at one per 1,000 inputs (at least one).
_BIG: Final = ("oversized", "deep_nesting")
#: Events per abuse session (out_of_order_seq / clock_skew).
ABUSE_SESSION_EVENTS: Final = 40
_SKEW_PAST_MS: Final = (0, 86_400_000)
_SKEW_FUTURE_MS: Final = (7_258_118_400_000, 7_300_000_000_000)  # ~year 2200

_NON_FINITE: Final = (
    '{"x": NaN}',
    "[Infinity]",
    '{"a": {"b": -Infinity}}',
    '{"v": [1, 2, NaN]}',
    "NaN",
)


@dataclass(frozen=True, slots=True)
class ChaosInput:
    """One generated input.  Exactly one of ``slot`` / ``session`` is set.

    Slot-targeted inputs (``slot`` set) are rendered by :meth:`payload` once the
    driver knows which session that slot runs (the payload must name the topic's
    session, else every class would be rejected as a session mismatch): the bytes
    are a pure function of (``rseed``, the session ids).  ``duplicate_seq`` has no
    payload (the driver re-sends a real event's bytes: ``pick`` in [0, 1) says
    which of the slot session's published ones).  Abuse-session inputs carry their
    bytes in ``value`` and their ``seq``.
    """

    index: int
    kind: str
    expect: Expect
    value: bytes | None = None
    slot: int | None = None
    session: str | None = None
    seq: int | None = None
    pick: float = 0.0
    rseed: int = 0
    max_message_bytes: int = 1024 * 1024

    def payload(self, topic_session: str = "", other_session: str = "") -> bytes:
        """The bytes to produce (to ``topic_session``'s topic for slot inputs)."""
        if self.value is not None:
            return self.value
        if self.kind not in DLQ_CLASSES:
            raise ValueError(f"{self.kind} input #{self.index} has no payload of its own")
        return _dlq_value(
            self.kind,
            random.Random(self.rseed),
            _SERDE,
            topic_session,
            other_session,
            self.max_message_bytes,
        )


_SERDE: Final = EventSerde()


def class_counts(n: int, exclude: Iterable[str] = ()) -> dict[str, int]:
    """How many inputs of each class ``generate(n=...)`` makes (every class >= 1,
    except those in ``exclude``: 0).  ``n`` must be at least the number of classes.

    ``exclude`` is for diagnosis only (e.g. leave out a known poison pill to see
    what else a run finds); the suite's outcomes are judged with every class.
    """
    skipped = set(exclude)
    unknown = skipped - set(CLASSES)
    if unknown:
        raise ValueError(f"exclude: unknown classes {sorted(unknown)}; known: {CLASSES}")
    kept = [c for c in CLASSES if c not in skipped]
    if not kept or n < len(kept):
        raise ValueError(f"n={n}: need at least {len(kept)} inputs (one per class)")
    big = max(1, n // 1000)
    counts = dict.fromkeys(CLASSES, 0)
    for name in _BIG:
        if name in kept:
            counts[name] = big
    rest = [c for c in kept if c not in _BIG]
    left = n - sum(counts.values())
    for i, name in enumerate(rest):
        counts[name] = left // len(rest) + (1 if i < left % len(rest) else 0)
    return counts


def _event(session: str, seq: int, ts: int, rng: random.Random) -> TraceEvent:
    kind = rng.choice(("message", "tool_call", "model_step"))
    if kind == "tool_call":
        return TraceEvent(
            type="tool_call",
            session_id=session,
            seq=seq,
            timestamp_ms=ts,
            call_id=f"c{seq}",
            tool_name=rng.choice(("bash", "read_file", "edit")),
            input={"arg": rng.randrange(1000)},
        )
    if kind == "model_step":
        return TraceEvent(
            type="model_step",
            session_id=session,
            seq=seq,
            timestamp_ms=ts,
            input_tokens=rng.randrange(1, 500),
            output_tokens=rng.randrange(1, 200),
        )
    return TraceEvent(type="message", session_id=session, seq=seq, timestamp_ms=ts, text="hi")


def _raw(serde: EventSerde, record: dict[str, Any], header: bytes | None = None) -> bytes:
    """Frame + Avro-write a record dict as is (no field checks: that is the point)."""
    import io

    buf = io.BytesIO()
    buf.write(header if header is not None else serde._header)
    fastavro.schemaless_writer(buf, serde._reader, record)
    return buf.getvalue()


def _with_input_json(serde: EventSerde, session: str, seq: int, text: str) -> bytes:
    record = serde.to_record(
        TraceEvent(type="tool_call", session_id=session, seq=seq, timestamp_ms=1, tool_name="t")
    )
    record["input_json"] = text
    return _raw(serde, record)


def _deep(depth: int, rng: random.Random) -> str:
    """Nested arrays (2 bytes a level: 200,000 deep is 400 kB, under the 1 MiB cap),
    or objects (6 bytes a level) when that stays small."""
    if depth * 6 > 100_000 or rng.random() < 0.5:
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


def _invalid_utf8(serde: EventSerde, session: str, seq: int, rng: random.Random) -> bytes:
    """A valid event whose ``text`` (or ``tool_name``) bytes are not UTF-8: Avro strings
    must be, so the body is undecodable although every length prefix is right."""
    marker = "M" * rng.randrange(4, 40)
    field = rng.choice(("text", "tool_name", "error_message"))
    record = serde.to_record(
        TraceEvent(type="tool_call", session_id=session, seq=seq, timestamp_ms=1)
    )
    record[field] = marker
    data = _raw(serde, record)
    bad = bytes(rng.choice((0xFF, 0xFE, 0xC0, 0x80)) for _ in marker)
    at = data.rindex(marker.encode())
    return data[:at] + bad + data[at + len(marker) :]


def _unknown_fp(serde: EventSerde, body: bytes, rng: random.Random) -> bytes:
    while True:
        fp = rng.getrandbits(64)
        if fp != serde.fingerprint:
            return b"\xc3\x01" + struct.pack("<Q", fp) + body[10:]


def _dlq_value(
    kind: str,
    rng: random.Random,
    serde: EventSerde,
    topic_session: str,
    other_session: str,
    max_message_bytes: int,
) -> bytes:
    seq = rng.randrange(1_000_000, 2_000_000)  # never a seq the load uses
    valid = serde.encode(_event(topic_session, seq, 1_700_000_000_000 + seq, rng))
    if kind == "random_bytes":
        return rng.randbytes(rng.randrange(1, 2000))
    if kind == "truncated_avro":
        return valid[: rng.randrange(1, len(valid))]
    if kind == "unknown_fingerprint":
        return _unknown_fp(serde, valid, rng)
    if kind == "session_mismatch":
        return serde.encode(_event(other_session, seq, 1_700_000_000_000, rng))
    if kind == "oversized":
        over = rng.randrange(1, 513)  # stays under the topic's max.message.bytes (+SIZE_MARGIN)
        base = TraceEvent(type="message", session_id=topic_session, seq=seq, timestamp_ms=1)
        probe = len(serde.encode(base))
        # text of length L adds L + varint(L) bytes (3 bytes for ~1 MiB)
        text = "x" * (max_message_bytes + over - probe - 3)
        data = EventSerde().encode(
            TraceEvent(type="message", session_id=topic_session, seq=seq, timestamp_ms=1, text=text)
        )
        assert len(data) > max_message_bytes, (len(data), max_message_bytes)
        return data
    if kind == "deep_nesting":
        return _with_input_json(serde, topic_session, seq, _deep(DEEP_NESTING, rng))
    if kind == "deep_over_limit":
        depth = DEPTH_LIMIT + 1 + rng.choice((0, 0, 0, 1, 10, 1000))
        return _with_input_json(serde, topic_session, seq, _deep(depth, rng))
    if kind == "nan_infinity":
        return _with_input_json(serde, topic_session, seq, rng.choice(_NON_FINITE))
    if kind == "invalid_utf8":
        return _invalid_utf8(serde, topic_session, seq, rng)
    raise AssertionError(kind)


def _abuse_sessions(
    kind: str, count: int, rng: random.Random, serde: EventSerde, start: int
) -> list[ChaosInput]:
    """``count`` inputs as whole abuse sessions of ABUSE_SESSION_EVENTS events."""
    out: list[ChaosInput] = []
    n_sessions = max(1, -(-count // ABUSE_SESSION_EVENTS))
    for s in range(n_sessions):
        sid = f"{'ooo' if kind == 'out_of_order_seq' else 'skew'}-{s}"
        length = min(ABUSE_SESSION_EVENTS, count - len(out))
        seqs = list(range(length))
        if kind == "out_of_order_seq":
            # swap ~1/4 of the neighbours, and move one seq far back
            for i in range(0, length - 1, 2):
                if rng.random() < 0.5:
                    seqs[i], seqs[i + 1] = seqs[i + 1], seqs[i]
            if length > 3:
                seqs.insert(rng.randrange(length // 2, length), seqs.pop(rng.randrange(2)))
        high = -1
        for seq in seqs:
            if kind == "clock_skew":
                lo, hi = _SKEW_PAST_MS if rng.random() < 0.5 else _SKEW_FUTURE_MS
                ts = rng.randrange(lo, hi)
            else:
                ts = 1_700_000_000_000 + seq
            expect: Expect = "apply" if seq > high else "stale"
            high = max(high, seq)
            out.append(
                ChaosInput(
                    index=start + len(out),
                    kind=kind,
                    expect=expect,
                    value=serde.encode(_event(sid, seq, ts, rng)),
                    session=sid,
                    seq=seq,
                )
            )
    return out


def generate(
    seed: int,
    n: int,
    *,
    slots: int,
    max_message_bytes: int = 1024 * 1024,
    exclude: Iterable[str] = (),
) -> list[ChaosInput]:
    """``n`` inputs (see :func:`class_counts`), shuffled so the classes interleave.

    ``slots``: how many concurrent valid sessions the driver runs; slot-targeted
    inputs name one in ``range(slots)``.  Abuse sessions come in publish order
    (their order is the point), interleaved with the rest.
    """
    if slots < 2:
        raise ValueError("slots must be >= 2 (session_mismatch needs another session)")
    rng = random.Random(seed)
    serde = EventSerde()
    counts = class_counts(n, exclude)
    loose: list[ChaosInput] = []
    for kind in DLQ_CLASSES:
        for _ in range(counts[kind]):
            loose.append(
                ChaosInput(
                    index=0,
                    kind=kind,
                    expect="dlq",
                    slot=rng.randrange(slots),
                    rseed=rng.getrandbits(63),
                    max_message_bytes=max_message_bytes,
                )
            )
    for _ in range(counts["duplicate_seq"]):
        loose.append(
            ChaosInput(
                index=0,
                kind="duplicate_seq",
                expect="dedup",
                value=None,
                slot=rng.randrange(slots),
                pick=rng.random(),
            )
        )
    rng.shuffle(loose)
    ordered = _abuse_sessions("out_of_order_seq", counts["out_of_order_seq"], rng, serde, 0)
    ordered += _abuse_sessions("clock_skew", counts["clock_skew"], rng, serde, 0)
    # merge: abuse events keep their relative order, the rest fill in between
    merged: list[ChaosInput] = []
    a, b = 0, 0
    total = len(loose) + len(ordered)
    while a < len(loose) or b < len(ordered):
        take_abuse = b < len(ordered) and (a >= len(loose) or rng.random() < len(ordered) / total)
        item = ordered[b] if take_abuse else loose[a]
        if take_abuse:
            b += 1
        else:
            a += 1
        merged.append(_reindex(item, len(merged)))
    return merged


def _reindex(item: ChaosInput, index: int) -> ChaosInput:
    return dataclasses.replace(item, index=index)


def expected_abuse_state(inputs: Iterable[ChaosInput]) -> dict[str, tuple[int, int]]:
    """``{session: (events, last_seq)}`` the worker must end with for abuse sessions."""
    out: dict[str, tuple[int, int]] = {}
    for item in inputs:
        if item.session is None or item.seq is None:
            continue
        events, last = out.get(item.session, (0, -1))
        if item.expect == "apply":
            events, last = events + 1, max(last, item.seq)
        out[item.session] = (events, last)
    return out


__all__ = [
    "CLASSES",
    "DEEP_NESTING",
    "DEPTH_LIMIT",
    "DLQ_CLASSES",
    "OTHER_CLASSES",
    "ChaosInput",
    "class_counts",
    "expected_abuse_state",
    "generate",
]
