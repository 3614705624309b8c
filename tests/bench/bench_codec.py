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

It also prints what ``compress=True`` (the worker's engine table form) adds:
the deflate time per state and the size ratio.  And how much the cache holds,
and checks (after the timed passes, as encoding a state twice would flatter
them) that the bytes equal the old algorithm's.  Event building, feeding and
snapshots are outside the timed regions.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streams.core import codec  # noqa: E402
from streams.core.engine import SessionEngine, SessionState  # noqa: E402
from streams.core.events import TraceEvent  # noqa: E402
from streams.sim.events import session_events  # noqa: E402
from streams.sim.scenarios import SESSION_KINDS  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "unit" / "core"))
from codec_reference import reference_encode_state as old_encode_state  # noqa: E402

T0 = 1_700_000_000_000


def sim_events(kind: str, seed: int, sid: str) -> Iterator[TraceEvent]:
    """The TraceEvents an SDK publisher would send for ``session_script(kind, seed)``."""
    return session_events(kind, seed, sid, t0_ms=T0 + seed)  # type: ignore[arg-type]


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

    # What ``compress=True`` (the worker's engine table form) adds: deflating the
    # canonical bytes, timed on their own, and how much smaller they get.
    plain = [codec.encode_state(s) for s in states]
    gc.collect()
    t0 = time.perf_counter()
    for b in plain:
        zlib.compress(b, codec._DEFLATE_LEVEL)
    deflate = time.perf_counter() - t0
    packed_bytes = sum(len(codec.encode_state(s, compress=True)) for s in states)
    plain_bytes = sum(len(b) for b in plain)

    best = min(warm[1:]) if len(warm) > 1 else warm[0]
    print(f"cold   (cache cleared)             {cold * 1e6 / n:8.1f} µs/state")
    print(
        f"deflate (compress=True adds)        {deflate * 1e6 / n:8.1f} µs/state  "
        f"(size {plain_bytes / packed_bytes:.1f}x smaller: {plain_bytes / n / 1024:.1f} -> "
        f"{packed_bytes / n / 1024:.1f} KiB)"
    )
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
