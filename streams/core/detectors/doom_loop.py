"""DoomLoop: the same cycle of actions repeated.

An action's identity is tool name + normalized arguments
(:attr:`ToolCallRecord.exact_key`), because some agents (mini-swe-agent) use one
tool, ``bash``, for everything.  Three ways to match, most certain first:

1. the *same* action ``threshold`` times in a row (cycle length 1);
2. a cycle of ``min_length..max_length`` actions repeated exactly ``threshold``
   times (smallest period wins);
3. fuzzy: the last ``threshold`` blocks of coarse action keys (digits masked,
   long arguments cut) have pairwise :func:`sequence_similarity` >=
   ``similarity_threshold`` — argument noise does not hide the loop, but the
   evidence is weaker, so confidence stays <= 0.6.

Cost per call is O(max_length) counter updates (period-match counters and a
rolling count of coarse matches), independent of the analysis window; the
Jaccard test runs only when the rolling count says a fuzzy loop is possible.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, DoomLoop, ToolCallRecord
from streams.core.similarity import abbreviate, sequence_similarity
from streams.core.statecodec import state_type


@state_type("doom_loop.snapshot/1")
@dataclass(frozen=True, slots=True)
class DoomLoopSnapshot:
    """Plain state of :class:`DoomLoopLogic`."""

    history: tuple[ToolCallRecord, ...]
    coarse_bits: tuple[tuple[bool, ...], ...]
    run: int
    run_same_output: bool
    exact_runs: tuple[int, ...]
    output_runs: tuple[int, ...]
    coarse_counts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DoomLoopDetector:
    """Config; ``None`` fields take the analysis config's values."""

    threshold: int | None = None
    min_length: int | None = None
    max_length: int = 6
    similarity_threshold: float | None = None

    @property
    def name(self) -> str:
        return "doom_loop"

    def build(
        self, analysis_config: Any, snapshot: DoomLoopSnapshot | None = None
    ) -> DoomLoopLogic:
        thr = self.threshold if self.threshold is not None else analysis_config.doom_loop_threshold
        min_len = (
            self.min_length if self.min_length is not None else analysis_config.doom_loop_min_length
        )
        sim = (
            self.similarity_threshold
            if self.similarity_threshold is not None
            else analysis_config.similarity_threshold
        )
        if thr < 2:
            raise ConfigError("doom_loop.threshold", f"must be >= 2, got {thr}")
        if not 1 <= min_len <= self.max_length:
            raise ConfigError(
                "doom_loop.min_length",
                f"must be in 1..max_length ({self.max_length}), got {min_len}",
            )
        logic = DoomLoopLogic(thr, min_len, self.max_length, float(sim))
        if snapshot is not None:
            logic.restore(snapshot)
        return logic


def _label(rec: ToolCallRecord) -> str:
    return f"{rec.tool_name}({abbreviate(rec.params_summary, 40)})"


def _canonical(keys: list[str]) -> str:
    """Rotation-invariant signature of a cycle (so a running loop keeps one key)."""
    n = len(keys)
    return "|".join(min((keys[i:] + keys[:i] for i in range(n)), key=tuple))


class DoomLoopLogic:
    """Per-session doom-loop state (see the module docstring)."""

    __slots__ = (
        "_bits",
        "_ccount",
        "_exact",
        "_hist",
        "_max",
        "_min",
        "_out",
        "_run",
        "_same",
        "_sim",
        "_thr",
    )

    def __init__(self, threshold: int, min_length: int, max_length: int, sim: float) -> None:
        self._thr = threshold
        self._min = min_length
        self._max = max_length
        self._sim = sim
        self.reset()

    @property
    def name(self) -> str:
        return "doom_loop"

    def reset(self) -> None:
        size = self._max * self._thr + 1
        self._hist: deque[ToolCallRecord] = deque(maxlen=size)
        self._bits: deque[tuple[bool, ...]] = deque(maxlen=size)
        self._run = 0
        self._same = True
        self._exact = [0] * (self._max + 1)
        self._out = [0] * (self._max + 1)
        self._ccount = [0] * (self._max + 1)

    def snapshot(self) -> DoomLoopSnapshot:
        return DoomLoopSnapshot(
            tuple(self._hist),
            tuple(self._bits),
            self._run,
            self._same,
            tuple(self._exact),
            tuple(self._out),
            tuple(self._ccount),
        )

    def restore(self, snap: DoomLoopSnapshot) -> None:
        self.reset()
        self._hist.extend(snap.history)
        self._bits.extend(snap.coarse_bits)
        self._run = snap.run
        self._same = snap.run_same_output
        self._exact = list(snap.exact_runs)
        self._out = list(snap.output_runs)
        self._ccount = list(snap.coarse_counts)

    def detect(self, analysis: AnalysisView) -> DoomLoop | None:
        rec = analysis.last_call
        if rec is None:
            return None
        hist = self._hist
        n = len(hist)
        if n and hist[-1].exact_key == rec.exact_key:
            self._run += 1
            self._same = self._same and hist[-1].output_key == rec.output_key
        else:
            self._run = 1
            self._same = True
        thr = self._thr
        exact = self._exact
        outs = self._out
        ccount = self._ccount
        past = self._bits
        n_past = len(past)
        key = rec.exact_key
        coarse = rec.coarse_key
        out_key = rec.output_key
        bits: list[bool] = [False]
        for length in range(1, self._max + 1):
            if n >= length:
                prev = hist[-length]
                if prev.exact_key == key:
                    exact[length] += 1
                    outs[length] = outs[length] + 1 if prev.output_key == out_key else 0
                else:
                    exact[length] = 0
                    outs[length] = 0
                bit = prev.coarse_key == coarse
            else:
                bit = False
            bits.append(bit)
            # rolling count of coarse period matches over the last length*(thr-1) calls
            span = length * (thr - 1)
            ccount[length] += bit
            if n_past >= span:
                ccount[length] -= past[-span][length]
        hist.append(analysis.last_compact or rec)
        self._bits.append(tuple(bits))

        if self._run >= thr:
            return self._single(rec)
        for length in range(max(2, self._min), self._max + 1):
            if exact[length] >= length * (thr - 1):
                block = list(hist)[-length:]
                if len({r.exact_key for r in block}) >= 2:
                    return self._cycle(block, 1 + exact[length] // length, outs[length], True, 1.0)
        return self._fuzzy()

    def _single(self, rec: ToolCallRecord) -> DoomLoop:
        reps = self._run
        # The same call `threshold` times in a row is already strong evidence (never
        # seen in resolved mini-swe-agent runs): 0.7, or 0.9 when the results were
        # identical too (nothing new was learned); each further repeat adds 0.2.
        conf = (7 + 2 * (reps - self._thr) + (2 if self._same else 0)) / 10
        recent = list(self._hist)[-min(reps, 3) :]
        evidence = (
            *tuple(r.cite() for r in recent),
            f"same action {reps}x in a row" + (" with identical results" if self._same else ""),
        )
        return DoomLoop(
            confidence=min(1.0, conf),
            evidence=evidence,
            first_seen_ms=rec.timestamp_ms,
            call_index=rec.call_index,
            cycle_length=1,
            repetitions=reps,
            cycle_actions=(_label(rec),),
            signature=rec.exact_key,
            exact=True,
        )

    def _cycle(
        self,
        block: list[ToolCallRecord],
        reps: int,
        out_run: int,
        exact: bool,
        similarity: float,
    ) -> DoomLoop:
        length = len(block)
        thr = self._thr
        if exact:
            same_out = out_run >= length * (thr - 1)
            conf = min(0.95, 0.5 + 0.15 * (reps - thr) + (0.15 if same_out else 0.0))
            sig = _canonical([r.exact_key for r in block])
            note = f"cycle of {length} actions repeated {reps}x"
        else:
            frac = (similarity - self._sim) / (1.0 - self._sim) if self._sim < 1.0 else 1.0
            conf = min(0.6, 0.25 + 0.25 * frac)
            sig = "~" + _canonical([r.coarse_key for r in block])
            note = f"similar cycle of {length} actions {reps}x (similarity {similarity:.2f})"
        last = block[-1]
        return DoomLoop(
            confidence=conf,
            evidence=(*tuple(r.cite() for r in block), note),
            first_seen_ms=last.timestamp_ms,
            call_index=last.call_index,
            cycle_length=length,
            repetitions=reps,
            cycle_actions=tuple(_label(r) for r in block),
            signature=sig,
            exact=exact,
        )

    def _fuzzy(self) -> DoomLoop | None:
        thr = self._thr
        hist = self._hist
        for length in range(self._min, self._max + 1):
            span = length * (thr - 1)
            need = length * thr
            if len(hist) < need or self._ccount[length] < self._sim * span:
                continue
            recs = list(hist)[-need:]
            keys = [r.coarse_key for r in recs]
            blocks = [keys[i * length : (i + 1) * length] for i in range(thr)]
            if length >= 2 and len(set(blocks[-1])) < 2:
                continue
            sims = [sequence_similarity(blocks[i], blocks[i + 1]) for i in range(thr - 1)]
            low = min(sims)
            if low >= self._sim:
                return self._cycle(recs[-length:], thr, 0, False, low)
        return None


__all__ = ["DoomLoopDetector", "DoomLoopLogic", "DoomLoopSnapshot"]
