"""FileChurn: the custom-detector example, shipped as a plugin.

Registered under the ``trajectory_streams.detectors`` entry-point group as
``file_churn`` (see ``pyproject.toml``) and loadable with
``load_detector("file_churn")`` or
``load_detector("streams.core.detectors.file_churn:FileChurnDetector")``.

It is deliberately *stateless* (like the spec's example): it looks at the last
``window`` calls each time a write completes, so it is its own factory
(``build`` returns itself) and needs no snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, FileChurn

_MODIFY = frozenset({"write", "create"})


@dataclass(frozen=True, slots=True)
class FileChurnDetector:
    """Fire when one path is modified ``churn_threshold`` times in ``window`` calls."""

    churn_threshold: int = 5
    window: int = 10

    def __post_init__(self) -> None:
        if not 2 <= self.churn_threshold <= self.window:
            raise ConfigError(
                "file_churn.churn_threshold",
                f"must be in 2..window ({self.window}), got {self.churn_threshold}",
            )

    @property
    def name(self) -> str:
        return "file_churn"

    def build(self, analysis_config: Any, snapshot: Any = None) -> FileChurnDetector:
        return self

    def reset(self) -> None:
        """Stateless: nothing to clear."""

    def snapshot(self) -> None:
        return None

    def detect(self, analysis: AnalysisView) -> FileChurn | None:
        last = analysis.last_call
        if last is None or last.kind not in _MODIFY or last.resource is None:
            return None
        hits = [
            c
            for c in analysis.recent_tool_calls(self.window)
            if c.kind in _MODIFY and c.resource == last.resource
        ]
        count = len(hits)
        if count < self.churn_threshold:
            return None
        return FileChurn(
            confidence=min(1.0, count / (self.churn_threshold * 2)),
            evidence=(
                *(c.cite() for c in hits[-3:]),
                f"{last.resource} modified {count} times in {self.window} calls",
            ),
            first_seen_ms=last.timestamp_ms,
            call_index=last.call_index,
            churned_file=last.resource,
            modification_count=count,
        )


__all__ = ["FileChurnDetector"]
