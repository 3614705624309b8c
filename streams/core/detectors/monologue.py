"""Monologue: the agent says the same thing again and again without acting.

An *utterance* is an agent ``message`` (``metadata.role`` absent or
``assistant``) or a ``model_step`` with text.  A run counts consecutive
utterances that are the same or nearly the same as the run's first one (text
normalized: case, whitespace and digits; then word-set Jaccard similarity >=
``similarity_threshold``).  A ``tool_call`` ends the run (the agent acted);
user messages do not (OpenHands' stuck detector ignores them too: an agent
answering every user turn with the same text is still stuck).

The pattern is present while the run has ``threshold`` or more utterances:
confidence 0.7 at ``threshold``, +0.1 per further repeat (so 0.9, a warning,
two repeats later).  O(words of the utterance) per event; the state is the
run's anchor text and a counter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, Monologue
from streams.core.similarity import abbreviate
from streams.core.statecodec import state_type

_DIGITS: Final = re.compile(r"\d+")
#: Utterances are compared on at most this many characters (bounded cost and state).
MAX_TEXT: Final = 2000


def normalize_utterance(text: str) -> str:
    """Lower case, digits masked, whitespace collapsed (what "the same message" means)."""
    return " ".join(_DIGITS.sub("#", text[:MAX_TEXT].lower()).split())


def _similar(a: str, b: str, threshold: float) -> bool:
    if a == b:
        return True
    wa, wb = set(a.split()), set(b.split())
    if not wa or not wb:
        return False
    return len(wa & wb) / len(wa | wb) >= threshold


@state_type("monologue.snapshot/1")
@dataclass(frozen=True, slots=True)
class MonologueSnapshot:
    """Plain state of :class:`MonologueLogic`."""

    anchor: str | None
    run: int
    last_text: str


@dataclass(frozen=True, slots=True)
class MonologueDetector:
    """Config: ``threshold`` near-identical utterances in a row (>= 2), compared
    with word-set Jaccard ``similarity_threshold`` (0 < s <= 1)."""

    threshold: int = 3
    similarity_threshold: float = 0.9

    @property
    def name(self) -> str:
        return "monologue"

    def build(
        self, analysis_config: Any, snapshot: MonologueSnapshot | None = None
    ) -> MonologueLogic:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int):
            raise ConfigError("monologue.threshold", f"expected an integer, got {self.threshold!r}")
        if self.threshold < 2:
            raise ConfigError("monologue.threshold", f"must be >= 2, got {self.threshold}")
        if not 0 < self.similarity_threshold <= 1:
            raise ConfigError(
                "monologue.similarity_threshold",
                f"must be in (0, 1], got {self.similarity_threshold!r}",
            )
        logic = MonologueLogic(self.threshold, float(self.similarity_threshold))
        if snapshot is not None:
            logic.anchor, logic.run, logic.last_text = (
                snapshot.anchor,
                snapshot.run,
                snapshot.last_text,
            )
        return logic


class MonologueLogic:
    """Per-session monologue state (see the module docstring)."""

    __slots__ = ("_seen", "anchor", "last_text", "run", "sim", "thr")

    def __init__(self, threshold: int, sim: float) -> None:
        self.thr = threshold
        self.sim = sim
        # the last utterance's raw text -> (normalized, cited form): a monologue is
        # the same text again, whose normalization need not be redone.  A cache,
        # not state (not in the snapshot; derived from the text alone).
        self._seen: tuple[str, str, str] | None = None
        self.reset()

    @property
    def name(self) -> str:
        return "monologue"

    def reset(self) -> None:
        self.anchor: str | None = None
        self.run = 0
        self.last_text = ""

    def snapshot(self) -> MonologueSnapshot:
        return MonologueSnapshot(self.anchor, self.run, self.last_text)

    def detect(self, analysis: AnalysisView) -> Monologue | None:
        """A completed tool call: the agent acted, the run is over."""
        self.reset()
        return None

    def on_event(self, event: Any, analysis: AnalysisView) -> Monologue | None:
        etype = event.type
        if etype == "tool_call":
            self.reset()
            return None
        text = event.text
        utterance = (
            (etype == "message" and event.metadata.get("role", "assistant") == "assistant")
            or etype == "model_step"
        ) and isinstance(text, str)
        if utterance and text.strip():
            seen = self._seen
            if seen is not None and seen[0] == text:
                norm, cited = seen[1], seen[2]
            else:
                norm = normalize_utterance(text)
                cited = abbreviate(" ".join(text.split()), 200)
                self._seen = (text, norm, cited)
            if self.anchor is not None and _similar(self.anchor, norm, self.sim):
                self.run += 1
            else:
                self.anchor, self.run = norm, 1
            self.last_text = cited
        return self._pattern(event.timestamp_ms, analysis.tool_call_count)

    def _pattern(self, ts: int, call_index: int) -> Monologue | None:
        if self.run < self.thr:
            return None
        return Monologue(
            confidence=min(1.0, (7 + self.run - self.thr) / 10),
            evidence=(
                f'"{self.last_text}"',
                f"the same message {self.run}x in a row with no tool call in between",
            ),
            first_seen_ms=ts,
            call_index=call_index,
            repetitions=self.run,
            message=self.last_text,
        )


__all__ = ["MonologueDetector", "MonologueLogic", "MonologueSnapshot", "normalize_utterance"]
