"""Cost of ``encode_state`` for the worker's write-behind flush: µs per state.

A script, not a test (no assertions on time).  Run from the repo root::

    python tests/bench/bench_codec.py [--sessions 1000] [--rounds 5] [--seed 1234]

It drives ``--sessions`` :class:`SessionEngine` instances with simulated
sessions (``streams.sim`` scripts of all four kinds, seeded, up to 60..400
events each; healthy ones end sooner), takes every engine's
:meth:`~SessionEngine.snapshot`, and times ``encode_state`` over all of them:

* **cold** -- fragment cache cleared first (every record is written);
* **warm** -- each engine gets one more event, then its new snapshot is encoded
  with the cache left by the previous pass (what the flush does every second);
  the first such round ("warm 1", right after cold) and the best of the others;
* **old** -- the previous algorithm (plain-dict walk + ``json.dumps``), kept
  here as a copy, over the same warm snapshots (best of the rounds).

It also prints how much the cache holds, and checks (after the timed passes,
as encoding a state twice would flatter them) that the bytes equal the old
algorithm's.  Event building, feeding and snapshots are outside the timed
regions.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streams.core import codec  # noqa: E402
from streams.core.engine import SessionEngine, SessionState  # noqa: E402
from streams.core.events import Budget, TraceEvent  # noqa: E402
from streams.sim.scenarios import SESSION_KINDS, session_script, task_for  # noqa: E402

T0 = 1_700_000_000_000


def sim_events(kind: str, seed: int, sid: str) -> Iterator[TraceEvent]:
    """The TraceEvents an SDK publisher would send for ``session_script(kind, seed)``."""
    rng = random.Random(seed)
    ts = T0 + seed
    yield TraceEvent(
        type="session_start",
        session_id=sid,
        seq=0,
        timestamp_ms=ts,
        metadata={"task": task_for(kind)},  # type: ignore[arg-type]
    )
    seq = 1
    call_ids: dict[int, str] = {}
    for a in session_script(kind, seed):  # type: ignore[arg-type]
        ts += rng.randint(200, 4000)
        common: dict[str, Any] = {"session_id": sid, "seq": seq, "timestamp_ms": ts}
        if a.kind == "tool_call":
            assert a.call is not None
            call_ids[a.call] = cid = f"{sid}-c{a.call}"
            ev = TraceEvent(
                type="tool_call", call_id=cid, tool_name=a.tool_name, input=a.input, **common
            )
        elif a.kind == "tool_result":
            assert a.call is not None
            ev = TraceEvent(
                type="tool_result",
                call_id=call_ids.pop(a.call),
                tool_name=a.tool_name,
                output=a.output,
                is_error=a.is_error,
                error_message=a.error,
                latency_ms=a.latency_ms,
                **common,
            )
        elif a.kind == "model_step":
            ev = TraceEvent(
                type="model_step",
                text=a.text,
                input_tokens=a.input_tokens,
                output_tokens=a.output_tokens,
                latency_ms=a.latency_ms,
                **common,
            )
        else:
            ev = TraceEvent(
                type="budget", budget=Budget(max_tokens=a.max_tokens, tokens_used=0), **common
            )
        yield ev
        seq += 1


# ------------------------------------------------------------ the old algorithm


def old_fast_plain(value: object, active: set[int]) -> Any:
    """The previous hot path of ``codec`` (plain dicts for ``json.dumps``), verbatim."""
    import math
    from datetime import timedelta

    vtype = type(value)
    if vtype is str or vtype is int or vtype is bool or value is None:
        return value
    if vtype is float:
        if not math.isfinite(cast(float, value)):
            raise codec._Slow
        return value
    ident = id(value)
    if ident in active:
        raise codec._Slow
    if vtype is tuple or vtype is list:
        active.add(ident)
        arr = [old_fast_plain(v, active) for v in cast("tuple[object, ...]", value)]
        active.discard(ident)
        return arr if vtype is tuple else {"!list": arr}
    if vtype is dict:
        active.add(ident)
        out: dict[str, Any] = {}
        for k, v in cast("dict[object, object]", value).items():
            if type(k) is not str or k.startswith("!"):
                raise codec._Slow
            out[k] = old_fast_plain(v, active)
        active.discard(ident)
        return out
    if vtype is timedelta:
        td = cast(timedelta, value)
        return {"!td": [td.days, td.seconds, td.microseconds]}
    info = codec._CLASS_INFO.get(vtype)
    if info is not None and info[0] is not None:
        active.add(ident)
        fields_out = {n: old_fast_plain(getattr(value, n), active) for n in info[1]}
        active.discard(ident)
        return {"!t": info[0], "!f": fields_out}
    raise codec._Slow


def old_encode_state(state: SessionState) -> bytes:
    envelope = {"format": codec.STATE_FORMAT, "version": codec.STATE_VERSION, "state": state}
    try:
        plain = old_fast_plain(envelope, set())
    except codec._Slow:
        plain = codec._to_plain(envelope, "", set())
    text = json.dumps(
        plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


# ------------------------------------------------------------------- harness


def timed(encode: Callable[[SessionState], bytes], states: Sequence[SessionState]) -> float:
    """Seconds to encode every state once."""
    gc.collect()
    t0 = time.perf_counter()
    for s in states:
        encode(s)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5, help="warm rounds (best is reported)")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}")

    rng = random.Random(args.seed)
    engines: list[SessionEngine] = []
    streams: list[Iterator[TraceEvent]] = []
    fed = 0
    t0 = time.perf_counter()
    for i in range(args.sessions):
        kind = SESSION_KINDS[i % len(SESSION_KINDS)]
        sid = f"bench-{i}"
        eng = SessionEngine.create(sid)
        events = sim_events(kind, args.seed + i, sid)
        for _ in range(rng.randint(60, 400)):
            ev = next(events, None)
            if ev is None:
                break
            eng.on_event(ev)
            fed += 1
        engines.append(eng)
        streams.append(events)
    print(
        f"{len(engines)} sessions, {fed} events fed in {time.perf_counter() - t0:.1f} s "
        f"(kinds: {', '.join(SESSION_KINDS)})"
    )

    def step() -> list[SessionState]:
        """One more event per session (when its script has one), then snapshots."""
        for eng, events in zip(engines, streams, strict=True):
            ev = next(events, None)
            if ev is not None:
                eng.on_event(ev)
        return [eng.snapshot() for eng in engines]

    states = [eng.snapshot() for eng in engines]
    n = len(states)
    total_bytes = sum(len(old_encode_state(s)) for s in states)
    print(f"mean state size {total_bytes / n / 1024:.1f} KiB")

    codec.clear_fragment_cache()
    cold = timed(codec.encode_state, states)
    warm: list[float] = []
    old = float("inf")
    for _ in range(args.rounds):
        states = step()
        warm.append(timed(codec.encode_state, states))
        old = min(old, timed(old_encode_state, states))
    entries = [*codec._frag_new.values(), *codec._frag_old.values()]
    text_bytes = 0
    for _, cached_text in entries:
        if isinstance(cached_text, str):
            text_bytes += sys.getsizeof(cached_text)
        else:
            head, rest = cached_text
            text_bytes += sys.getsizeof(head) + sum(sys.getsizeof(t) for _, t in rest)
    # Only now (encoding a state twice would make the timed passes unrealistic):
    # the bytes equal the old algorithm's, with the cache warm and then cold.
    identical = all(codec.encode_state(s) == old_encode_state(s) for s in states)
    codec.clear_fragment_cache()
    identical = identical and all(codec.encode_state(s) == old_encode_state(s) for s in states)

    best = min(warm[1:]) if len(warm) > 1 else warm[0]
    print(f"cold   (cache cleared)             {cold * 1e6 / n:8.1f} µs/state")
    print(f"warm 1 (+1 event, after cold)      {warm[0] * 1e6 / n:8.1f} µs/state")
    print(
        f"warm   (+1 event, rounds 2..{len(warm)} best) {best * 1e6 / n:8.1f} µs/state  "
        f"(rounds: {', '.join(f'{w * 1e6 / n:.0f}' for w in warm)})"
    )
    print(
        f"old    (plain walk + dumps)        {old * 1e6 / n:8.1f} µs/state  (best of {len(warm)})"
    )
    print(
        f"ratio old/warm {old / best:.2f}x   old/warm 1 {old / warm[0]:.2f}x   "
        f"old/cold {old / cold:.2f}x"
    )
    print(
        f"cache after the last round: {len(entries)} entries, {text_bytes / 2**20:.1f} MiB of "
        f"fragment text (limit {codec._FRAGMENT_CACHE_LIMIT} entries per generation); "
        f"{len(codec._probation)} records on probation"
    )
    print(f"bytes identical to the old algorithm (warm and cold): {'yes' if identical else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
