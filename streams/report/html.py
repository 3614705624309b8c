"""Render the report data of :func:`streams.report.aggregate.aggregate` as one HTML file.

Self-contained on purpose: inline CSS and inline SVG drawn here, no script, no
font, no CDN, so the file opens offline, attaches to a ticket and survives an
air-gapped review.  Every piece of text from the data goes through
:func:`html.escape` (tool names and error messages come from agents and may
contain markup).

Plots: per-session timelines (one lane per tool, calls coloured by success,
detections as severity-coloured markers with their pattern type), the fleet
view (one swimlane per session, coloured by the assessment severity over
time), tool frequency bars, patterns over time (stacked), budget burn lines.
Large inputs are capped (:data:`MAX_TIMELINES`, :data:`MAX_FLEET_ROWS` ...) and
the page says what was left out.
"""

from __future__ import annotations

from html import escape
from typing import Any, Final

from streams.core.jsonl import ms_to_iso

MAX_TIMELINES: Final = 8
MAX_FLEET_ROWS: Final = 60
MAX_LANES: Final = 14
MAX_BURN_LINES: Final = 20
WIDTH: Final = 1200

OK_COLOUR: Final = "#2e9d4f"
FAIL_COLOUR: Final = "#d0342c"
SEVERITY_COLOUR: Final[dict[str, str]] = {
    "info": "#3b7dd8",
    "caution": "#e69a00",
    "warning": "#b0006e",
    "none": "#c9ced6",
}
PALETTE: Final[tuple[str, ...]] = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)

CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;
background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde1e7;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 4px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:20px}
table{border-collapse:collapse;background:#fff;margin:6px 0}
th,td{border:1px solid #dde1e7;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px}svg{background:#fff;border:1px solid #dde1e7;border-radius:4px;display:block;
margin:6px 0}.note{color:#6b7280}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;
border-radius:2px}
"""


def _fmt_dur(ms: float) -> str:
    s = ms / 1000.0
    if s < 120:
        return f"+{s:.1f}s"
    if s < 7200:
        return f"+{s / 60:.1f}m"
    return f"+{s / 3600:.1f}h"


def _scale(lo: float, hi: float, x0: float, x1: float) -> Any:
    span = hi - lo if hi > lo else 1.0

    def f(v: float) -> float:
        return round(x0 + (v - lo) * (x1 - x0) / span, 2)

    return f


def _axis(lo: int, hi: int, x: Any, y: float, ticks: int = 6) -> list[str]:
    out = [f'<line x1="{x(lo)}" y1="{y}" x2="{x(hi)}" y2="{y}" stroke="#9aa3af"/>']
    for i in range(ticks + 1):
        t = lo + (hi - lo) * i / ticks
        out.append(f'<line x1="{x(t)}" y1="{y}" x2="{x(t)}" y2="{y + 4}" stroke="#9aa3af"/>')
        out.append(
            f'<text x="{x(t)}" y="{y + 16}" font-size="11" text-anchor="middle" '
            f'fill="#4b5563">{escape(_fmt_dur(t - lo))}</text>'
        )
    return out


def _legend(items: list[tuple[str, str]]) -> str:
    return (
        '<div class="legend">'
        + "".join(
            f'<span><i style="background:{c}"></i>{escape(label)}</span>' for label, c in items
        )
        + "</div>"
    )


def timeline_svg(session: dict[str, Any]) -> str:
    """One session: a lane per tool, calls as dots, detections as marked lines."""
    calls = session["tool_calls"]
    counts: dict[str, int] = {}
    for c in calls:
        counts[c["tool"]] = counts.get(c["tool"], 0) + 1
    lanes = sorted(counts, key=lambda t: (-counts[t], t))
    if len(lanes) > MAX_LANES:
        lanes = [*lanes[: MAX_LANES - 1], "(other)"]
    lane_of = {t: i for i, t in enumerate(lanes)}
    top, lane_h, left, right = 46, 22, 170, 20
    height = top + max(1, len(lanes)) * lane_h + 34
    lo, hi = session["start_ms"], max(session["end_ms"], session["start_ms"] + 1)
    x = _scale(lo, hi, left, WIDTH - right)
    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="timeline of {escape(session["session_id"], quote=True)}">'
    ]
    for i, tool in enumerate(lanes):
        y = top + i * lane_h + lane_h / 2
        fill = "#f6f7f9" if i % 2 == 0 else "#ffffff"
        parts.append(
            f'<rect x="{left}" y="{top + i * lane_h}" width="{WIDTH - right - left}" '
            f'height="{lane_h}" fill="{fill}"/>'
        )
        parts.append(
            f'<text x="{left - 8}" y="{y + 4}" font-size="12" text-anchor="end" '
            f'fill="#1d2330">{escape(tool[:24])}</text>'
        )
    for k, det in enumerate(session["detections"]):
        dx = x(det["timestamp_ms"])
        colour = SEVERITY_COLOUR.get(det["severity"], "#555")
        bottom = top + len(lanes) * lane_h
        label_y = 12 + (k % 3) * 11
        parts.append(
            f'<line class="detection" x1="{dx}" y1="{label_y + 2}" x2="{dx}" y2="{bottom}" '
            f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="4 3"/>'
        )
        parts.append(
            f'<path d="M{dx - 5},{top - 6} L{dx + 5},{top - 6} L{dx},{top} Z" fill="{colour}">'
            f"<title>{escape(det['pattern_type'])} [{escape(det['severity'])}] at call "
            f"#{det['call_index']}</title></path>"
        )
        near_end = dx > WIDTH - right - 110
        parts.append(
            f'<text x="{dx - 3 if near_end else dx + 3}" y="{label_y}" font-size="10" '
            f'text-anchor="{"end" if near_end else "start"}" fill="{colour}">'
            f"{escape(det['pattern_type'])}</text>"
        )
    for c in calls:
        lane = lane_of.get(c["tool"], len(lanes) - 1)
        cy = top + lane * lane_h + lane_h / 2
        colour = OK_COLOUR if c["success"] else FAIL_COLOUR
        lat = "" if c["latency_ms"] is None else f", {c['latency_ms']} ms"
        parts.append(
            f'<circle class="call" cx="{x(c["timestamp_ms"])}" cy="{cy}" r="4.5" '
            f'fill="{colour}" stroke="#ffffff" stroke-width="0.8"><title>#{c["call_index"]} '
            f"{escape(c['tool'])} {'ok' if c['success'] else 'failed'}{lat}</title></circle>"
        )
    parts.extend(_axis(lo, hi, x, top + max(1, len(lanes)) * lane_h + 4))
    parts.append("</svg>")
    return "".join(parts)


def fleet_svg(data: dict[str, Any]) -> str:
    """Sessions by severity over time: one swimlane per session."""
    rows = sorted(
        data["sessions"],
        key=lambda s: (-_sev_rank(s["max_severity"]), s["start_ms"], s["session_id"]),
    )[:MAX_FLEET_ROWS]
    lo, hi = (
        data["summary"]["start_ms"],
        max(data["summary"]["end_ms"], data["summary"]["start_ms"] + 1),
    )
    top, row_h, left, right = 10, 16, 200, 20
    height = top + max(1, len(rows)) * row_h + 30
    x = _scale(lo, hi, left, WIDTH - right)
    parts = [
        f'<svg class="fleet" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="fleet severity over time">'
    ]
    for i, s in enumerate(rows):
        y = top + i * row_h
        parts.append(
            f'<text x="{left - 8}" y="{y + 11}" font-size="11" text-anchor="end">'
            f"{escape(s['session_id'][:30])}</text>"
        )
        width = max(1.0, x(s["end_ms"]) - x(s["start_ms"]))
        parts.append(
            f'<rect x="{x(s["start_ms"])}" y="{y + 2}" width="{width}" '
            f'height="{row_h - 4}" fill="{SEVERITY_COLOUR["none"]}"/>'
        )
        lane = s["severity_over_time"]
        for j, point in enumerate(lane):
            end = lane[j + 1]["timestamp_ms"] if j + 1 < len(lane) else s["end_ms"]
            x0, x1 = x(point["timestamp_ms"]), x(max(end, point["timestamp_ms"]))
            parts.append(
                f'<rect class="sev" x="{x0}" y="{y + 2}" width="{max(1.0, x1 - x0)}" '
                f'height="{row_h - 4}" fill="{SEVERITY_COLOUR.get(point["severity"], "#555")}">'
                f"<title>{escape(s['session_id'])}: {escape(point['severity'])}</title></rect>"
            )
    parts.extend(_axis(lo, hi, x, top + max(1, len(rows)) * row_h + 4))
    parts.append("</svg>")
    return "".join(parts)


def _sev_rank(sev: str) -> int:
    return {"none": -1, "info": 0, "caution": 1, "warning": 2}.get(sev, -1)


def tools_svg(data: dict[str, Any]) -> str:
    rows = data["tool_frequency"][:20]
    top, row_h, left, right = 8, 20, 180, 80
    height = top + max(1, len(rows)) * row_h + 8
    most = max((r["calls"] for r in rows), default=1)
    x = _scale(0, most, left, WIDTH - right)
    parts = [
        f'<svg class="tools" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="tool frequency">'
    ]
    for i, r in enumerate(rows):
        y = top + i * row_h
        ok_w = x(r["calls"] - r["errors"]) - left
        err_w = x(r["calls"]) - x(r["calls"] - r["errors"])
        parts.append(
            f'<text x="{left - 8}" y="{y + 14}" font-size="12" text-anchor="end">'
            f"{escape(r['tool'][:26])}</text>"
            f'<rect x="{left}" y="{y + 3}" width="{ok_w}" height="{row_h - 6}" fill="{OK_COLOUR}"/>'
            f'<rect x="{left + ok_w}" y="{y + 3}" width="{err_w}" height="{row_h - 6}" '
            f'fill="{FAIL_COLOUR}"/>'
            f'<text x="{x(r["calls"]) + 6}" y="{y + 14}" font-size="11" fill="#4b5563">'
            f"{r['calls']} ({r['errors']} failed)</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def patterns_svg(data: dict[str, Any]) -> str:
    pot = data["patterns_over_time"]
    types = pot["pattern_types"]
    buckets = pot["buckets"]
    top, bottom, left, right = 10, 30, 50, 20
    height = 200
    most = max((sum(b["counts"].values()) for b in buckets), default=0) or 1
    bw = (WIDTH - left - right) / max(1, len(buckets))
    parts = [
        f'<svg class="patterns" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="patterns over time">'
    ]
    plot_h = height - top - bottom
    for i, b in enumerate(buckets):
        y = height - bottom
        for k, t in enumerate(types):
            n = b["counts"].get(t, 0)
            if not n:
                continue
            h = plot_h * n / most
            y -= h
            parts.append(
                f'<rect x="{round(left + i * bw + 1, 2)}" y="{round(y, 2)}" '
                f'width="{round(bw - 2, 2)}" height="{round(h, 2)}" '
                f'fill="{PALETTE[k % len(PALETTE)]}"><title>{escape(t)}: {n}</title></rect>'
            )
    lo = data["summary"]["start_ms"]
    hi = lo + pot["bucket_ms"] * len(buckets)
    parts.extend(_axis(lo, hi, _scale(lo, hi, left, WIDTH - right), height - bottom + 1))
    parts.append(
        f'<text x="{left - 6}" y="{top + 10}" font-size="11" text-anchor="end">{most}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def burn_svg(data: dict[str, Any]) -> str:
    rows = [s for s in data["sessions"] if s["budget_burn"]]
    rows = sorted(rows, key=lambda s: (-s["tokens"], s["session_id"]))[:MAX_BURN_LINES]
    height, top, bottom, left, right = 240, 12, 30, 70, 20
    lo, hi = (
        data["summary"]["start_ms"],
        max(data["summary"]["end_ms"], data["summary"]["start_ms"] + 1),
    )
    most = max([s["tokens"] for s in rows] + [s["max_tokens"] or 0 for s in rows] + [1])
    x = _scale(lo, hi, left, WIDTH - right)
    y = _scale(0, most, height - bottom, top)
    parts = [
        f'<svg class="burn" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="budget burn">'
    ]
    for k, s in enumerate(rows):
        colour = PALETTE[k % len(PALETTE)]
        pts = [(s["start_ms"], 0), *s["budget_burn"]]
        path = " ".join(f"{x(t)},{y(v)}" for t, v in pts)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.6">'
            f"<title>{escape(s['session_id'])}: {s['tokens']} tokens</title></polyline>"
        )
        if s["max_tokens"]:
            parts.append(
                f'<line x1="{x(s["start_ms"])}" x2="{x(s["end_ms"])}" y1="{y(s["max_tokens"])}" '
                f'y2="{y(s["max_tokens"])}" stroke="{colour}" stroke-dasharray="2 3"/>'
            )
    parts.append(
        f'<text x="{left - 6}" y="{top + 8}" font-size="11" text-anchor="end">{most:,}</text>'
        f'<text x="{left - 6}" y="{height - bottom}" font-size="11" text-anchor="end">0</text>'
    )
    parts.extend(_axis(lo, hi, x, height - bottom + 1))
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=n' if i in numeric else ''}>{escape(str(v))}</td>"
            for i, v in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(data: dict[str, Any], *, title: str = "Trajectory report") -> str:
    """The whole report page (a str; write it UTF-8)."""
    s = data["summary"]
    cards = [
        ("sessions", s["sessions"]),
        ("events", s["events"]),
        ("tool calls", s["tool_calls"]),
        ("failed calls", s["failed_tool_calls"]),
        ("detections", s["pattern_detections"]),
    ]
    span = (
        f"{ms_to_iso(s['start_ms'])} \u2013 {ms_to_iso(s['end_ms'])}" if s["sessions"] else "empty"
    )
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<div class="note">{escape(span)}</div>',
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{v:,}</b>{escape(k)}</div>' for k, v in cards)
        + "</div>",
    ]
    ranked = sorted(
        data["sessions"],
        key=lambda r: (-_sev_rank(r["max_severity"]), -len(r["detections"]), r["session_id"]),
    )
    out.append("<h2>Session timelines</h2>")
    out.append(
        _legend(
            [
                ("tool call ok", OK_COLOUR),
                ("tool call failed", FAIL_COLOUR),
                *((f"detection: {k}", v) for k, v in SEVERITY_COLOUR.items() if k != "none"),
            ]
        )
    )
    for row in ranked[:MAX_TIMELINES]:
        out.append(
            f"<h3>{escape(row['session_id'])} <span class=note>({len(row['tool_calls'])} calls, "
            f"{len(row['detections'])} detections, max severity {escape(row['max_severity'])})"
            "</span></h3>"
        )
        out.append(timeline_svg(row))
    if len(ranked) > MAX_TIMELINES:
        out.append(
            f'<p class="note">{len(ranked) - MAX_TIMELINES} more session(s) not drawn (the '
            f"{MAX_TIMELINES} most severe are shown; all are in the JSON).</p>"
        )
    out.append("<h2>Fleet: sessions by severity over time</h2>")
    out.append(_legend([(k, v) for k, v in SEVERITY_COLOUR.items()]))
    out.append(fleet_svg(data))
    if len(data["sessions"]) > MAX_FLEET_ROWS:
        out.append(
            f'<p class="note">first {MAX_FLEET_ROWS} of {len(data["sessions"])} sessions.</p>'
        )
    out.append("<h2>Tool frequency</h2>")
    out.append(tools_svg(data))
    out.append("<h2>Latency per tool</h2>")
    out.append(
        _table(
            ["tool", "results", "mean ms", "min ms", "max ms", "p95 ms"],
            [
                [
                    r["tool"],
                    r["count"],
                    f"{r['mean_ms']:.1f}",
                    r["min_ms"],
                    r["max_ms"],
                    r["p95_ms"],
                ]
                for r in data["latency"]
            ],
            {1, 2, 3, 4, 5},
        )
    )
    out.append("<h2>Errors by signature</h2>")
    out.append(
        _table(
            ["count", "signature", "tools", "example"],
            [
                [r["count"], r["signature"], ", ".join(r["tools"]), r["example"][:200]]
                for r in data["error_signatures"]
            ],
            {0},
        )
    )
    out.append("<h2>Most common action sequences</h2>")
    for n, grams in data["ngrams"].items():
        out.append(f"<h3>{escape(n)}-grams</h3>")
        out.append(
            _table(
                ["count", "sequence"],
                [[g["count"], " \u2192 ".join(g["sequence"])] for g in grams],
                {0},
            )
        )
    out.append("<h2>Patterns over time</h2>")
    types = data["patterns_over_time"]["pattern_types"]
    out.append(_legend([(t, PALETTE[k % len(PALETTE)]) for k, t in enumerate(types)]))
    out.append(patterns_svg(data))
    out.append("<h2>Budget burn (tokens over event time)</h2>")
    out.append(burn_svg(data))
    out.append("</body></html>")
    return "\n".join(out)


__all__ = [
    "MAX_FLEET_ROWS",
    "MAX_TIMELINES",
    "burn_svg",
    "fleet_svg",
    "patterns_svg",
    "render_html",
    "timeline_svg",
    "tools_svg",
]
