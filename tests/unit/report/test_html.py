"""The HTML report is well-formed, self-contained, escapes agent text and draws its plots."""

from __future__ import annotations

from html.parser import HTMLParser

from streams.core.events import TraceEvent
from streams.report.aggregate import aggregate
from streams.report.html import MAX_TIMELINES, render_html

VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "source", "wbr"}


class Checker(HTMLParser):
    """Tracks the open-element stack; any mismatch is recorded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.counts: dict[str, int] = {}
        self.attrs: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1
        self.attrs.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1
        self.attrs.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()


def sample_events(sessions: int = 2) -> list[TraceEvent]:
    out = []
    for s in range(sessions):
        sid = f"s{s}"
        t = 1_700_000_000_000 + s * 500
        seq = 0
        for i in range(8):
            tool = "<script>alert(1)</script>" if i == 3 else ("bash" if i % 2 else "read")
            out.append(TraceEvent("tool_call", sid, seq, t, tool_name=tool, call_id=f"c{i}"))
            out.append(
                TraceEvent(
                    "tool_result",
                    sid,
                    seq + 1,
                    t + 300,
                    call_id=f"c{i}",
                    is_error=i % 3 == 0,
                    error_message="E & <b>bad</b>" if i % 3 == 0 else None,
                )
            )
            out.append(
                TraceEvent("model_step", sid, seq + 2, t + 400, input_tokens=50, output_tokens=5)
            )
            seq += 3
            t += 1000
    return out


def detections() -> list[dict]:
    return [
        {
            "session_id": "s0",
            "timestamp_ms": 1_700_000_002_300,
            "call_index": 3,
            "kind": "pattern",
            "pattern_type": "doom_loop",
            "severity": "warning",
            "confidence": 0.9,
        },
        {
            "session_id": "s0",
            "timestamp_ms": 1_700_000_002_300,
            "kind": "assessment",
            "severity": "warning",
        },
    ]


def parse(page: str) -> Checker:
    checker = Checker()
    checker.feed(page)
    checker.close()
    return checker


def test_well_formed_and_plots_present() -> None:
    page = render_html(aggregate(sample_events(), detections()))
    c = parse(page)
    assert c.errors == []
    assert c.stack == []  # everything closed
    assert page.startswith("<!DOCTYPE html>")
    svg_classes = {a.get("class") for tag, a in c.attrs if tag == "svg"}
    assert {"timeline", "fleet", "tools", "patterns", "burn"} <= svg_classes
    calls = [a for tag, a in c.attrs if tag == "circle" and a.get("class") == "call"]
    assert len(calls) == 16  # every tool call of both sessions is a dot
    fills = {a["fill"] for a in calls}
    assert fills == {"#2e9d4f", "#d0342c"}  # successes and failures both drawn
    marks = [a for tag, a in c.attrs if tag == "line" and a.get("class") == "detection"]
    assert len(marks) == 1
    sev = [a for tag, a in c.attrs if tag == "rect" and a.get("class") == "sev"]
    assert sev and sev[0]["fill"] == "#b0006e"  # the warning swimlane segment


def test_self_contained_and_escaped() -> None:
    page = render_html(aggregate(sample_events(), detections()), title="A <b>title</b>")
    c = parse(page)
    assert c.counts.get("script", 0) == 0
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>bad</b>" not in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page
    assert c.counts.get("link", 0) == 0 and c.counts.get("img", 0) == 0


def test_caps_timelines_and_says_so() -> None:
    n = MAX_TIMELINES + 3
    page = render_html(aggregate(sample_events(n), []))
    c = parse(page)
    timelines = [a for tag, a in c.attrs if tag == "svg" and a.get("class") == "timeline"]
    assert len(timelines) == MAX_TIMELINES
    assert f"{n - MAX_TIMELINES} more session(s) not drawn" in page


def test_empty_report_renders() -> None:
    c = parse(render_html(aggregate([], [])))
    assert c.errors == [] and c.stack == []
