"""Small fakes of the analysis view for unit tests of pure observer code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FakeCall:
    call_index: int
    tool_name: str
    params_summary: str = ""
    success: bool = True
    error_message: str | None = None
    timestamp_ms: int = 0


@dataclass(frozen=True)
class FakeAnalysis:
    tool_call_count: int = 0
    error_count: int = 0
    consecutive_errors: int = 0
    calls: tuple[FakeCall, ...] = ()
    active: Mapping[str, Any] = field(default_factory=dict)

    def recent_tool_calls(self, n: int) -> tuple[FakeCall, ...]:
        return self.calls[-n:] if n > 0 else ()

    def patterns(self) -> Mapping[str, Any]:
        return self.active
