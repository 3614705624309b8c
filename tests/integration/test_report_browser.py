"""The HTML report opens in headless Chromium and the screenshot shows the timeline.

Skipped (with the reason) when no ``chromium`` is installed
(Debian: ``apt-get install -y chromium``).  The PNG is decoded with the stdlib
(zlib + the five PNG row filters) and checked: many distinct colours, and the
timeline's success-green and failure-red call dots are actually painted.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from streams.cli import main
from streams.core.events import TraceEvent
from streams.core.jsonl import dumps_event

pytestmark = [pytest.mark.timeout(180)]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
T0 = 1_700_000_000_000
OK = (0x2E, 0x9D, 0x4F)
FAIL = (0xD0, 0x34, 0x2C)


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, channels, raw RGB(A) rows without filter bytes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    height = depth = ctype = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and ctype in (2, 6), f"unexpected PNG format depth={depth} type={ctype}"
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    out = bytearray(height * stride)
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        out[y * stride : (y + 1) * stride] = line
        prev = line
    return width, height, bpp, bytes(out)


def session(sid: str, start: int) -> list[TraceEvent]:
    out = [TraceEvent("session_start", sid, 0, start, metadata={"task": "fix foo.py"})]
    t = start
    for i in range(14):
        t += 1500
        fail = i % 3 != 2
        tool = ("bash", "read_file", "edit")[i % 3]
        out.append(
            TraceEvent(
                "tool_call",
                sid,
                len(out),
                t,
                tool_name=tool,
                call_id=f"c{i}",
                input={"command": "pytest -x tests/test_foo.py"},
            )
        )
        out.append(
            TraceEvent(
                "tool_result",
                sid,
                len(out),
                t + 400,
                call_id=f"c{i}",
                is_error=fail,
                error_message="1 failed: test_foo" if fail else None,
            )
        )
        out.append(
            TraceEvent("model_step", sid, len(out), t + 600, input_tokens=900, output_tokens=40)
        )
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_report_screenshot_shows_timeline(tmp_path: Path) -> None:
    src = tmp_path / "events.jsonl"
    evs = session("run-a", T0) + session("run-b", T0 + 4000)
    src.write_text("".join(dumps_event(e) + "\n" for e in evs), "utf-8")
    page = tmp_path / "report.html"
    assert main(["report", str(src), "--out", str(page), "--json", str(tmp_path / "r.json")]) == 0
    png = tmp_path / "shot.png"
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1400,1000",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert png.exists(), (
        f"chromium wrote no screenshot (rc {proc.returncode}): {proc.stderr[-1500:]}"
    )
    width, height, bpp, pixels = decode_png(png.read_bytes())
    assert (width, height) == (1400, 1000)
    colours = {pixels[i : i + 3] for i in range(0, len(pixels), bpp * 7)}
    assert len(colours) > 100, f"only {len(colours)} distinct colours: blank page?"
    # the first timeline sits in the upper half: its call dots are painted there
    half = pixels[: (height // 2) * width * bpp]
    rgb = [half[i : i + 3] for i in range(0, len(half), bpp)]
    greens = sum(1 for p in rgb if p == bytes(OK))
    reds = sum(1 for p in rgb if p == bytes(FAIL))
    assert greens > 20 and reds > 20, f"timeline dots not visible (green {greens}, red {reds})"
