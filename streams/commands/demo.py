"""Run the whole pipeline on this machine and watch it work.

The demo starts (or reuses) a local Kafka broker, starts the ingest router and a
Faust worker as child processes on a fresh topic prefix, drives a simulated
fleet through the publisher SDK (a quarter of it pathological: looping,
stalled, budget-burning agents), and shows each session's table state changing
live, read back from the worker's HTTP view.  When the fleet is done it waits
for the worker to catch up, prints the final table, and stops everything it
started (a broker it found already running is left running).

Examples:
  trajectory demo                               # ~40 s, 12 sessions
  trajectory demo --sessions 30 --rate 80 --duration 60
  trajectory demo --keep-broker                 # leave the broker up afterwards

Child process logs go to .cache/demo/<prefix>/{router,worker}.log.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=12, help="concurrent sessions (default 12)")
    parser.add_argument(
        "--rate", type=float, default=40.0, help="events/s across the fleet (default 40)"
    )
    parser.add_argument(
        "--duration", type=float, default=30.0, help="seconds of traffic (default 30)"
    )
    parser.add_argument("--seed", type=int, default=0, help="fleet seed (default 0)")
    parser.add_argument(
        "--port", type=int, default=9092, help="local broker port (default 9092; reused if running)"
    )
    parser.add_argument("--controller-port", type=int, default=9093, help="KRaft controller port")
    parser.add_argument(
        "--web-port", type=int, default=0, help="worker HTTP port (default: a free one)"
    )
    parser.add_argument(
        "--keep-broker", action="store_true", help="do not stop a broker we started"
    )
    parser.add_argument(
        "--no-live", action="store_true", help="print periodic tables instead of a live view"
    )


def _get_json(url: str, timeout: float = 2.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    from streams.core.errors import TrajectoryError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TrajectoryError(f"worker exited with {proc.returncode}; see {log}")
        with contextlib.suppress(OSError):
            status, _ = _get_json(url, timeout=1.0)
            if status == 200:
                return
        time.sleep(0.5)
    raise TrajectoryError(f"worker did not answer on {url} within {timeout_s:.0f}s; see {log}")


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    fh = open(log, "wb")  # noqa: SIM115 - owned by the child for its lifetime
    return subprocess.Popen(
        [sys.executable, "-m", "streams", *args],
        stdout=fh,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[bytes], name: str, timeout_s: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"demo: {name} did not stop in {timeout_s:.0f}s; killing it", file=sys.stderr)
        proc.kill()
        proc.wait()


def _table(rows: dict[str, dict[str, Any]], title: str) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("session", "events", "tool calls", "errors", "tokens", "last seq", "budget"):
        t.add_column(col, justify="left" if col in ("session", "budget") else "right")
    for sid in sorted(rows):
        row = rows[sid]
        st = row.get("state") or {}
        budget = row.get("budget") or {}
        btxt = ""
        if budget.get("max_tokens"):
            btxt = f"{budget.get('tokens_used', 0):,}/{budget['max_tokens']:,} tok"
        style = "" if sid.endswith("healthy") else "yellow"
        t.add_row(
            f"[{style}]{sid}[/]" if style else sid,
            str(st.get("events", "")),
            str(st.get("tool_calls", "")),
            str(st.get("errors", "")),
            f"{st.get('input_tokens', 0) + st.get('output_tokens', 0):,}" if st else "",
            str(st.get("last_seq", "")),
            btxt,
        )
    return t


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from streams.broker import LocalBroker, free_port, kafka_ready
    from streams.sdk import Publisher
    from streams.settings import Settings
    from streams.sim.driver import DriveReport, drive
    from streams.sim.fleet import FleetConfig

    console = Console(stderr=False)
    prefix = f"demo{int(time.time())}"
    workdir = Path(os.environ.get("TRAJECTORY_CACHE_DIR", ".cache")) / "demo" / prefix
    workdir.mkdir(parents=True, exist_ok=True)
    bootstrap = f"127.0.0.1:{args.port}"

    broker: LocalBroker | None = None
    if kafka_ready("127.0.0.1", args.port):
        console.print(f"[bold]broker[/]: reusing the Kafka already answering on {bootstrap}")
    else:
        broker = LocalBroker(port=args.port, controller_port=args.controller_port)
        console.print(f"[bold]broker[/]: starting Kafka on {bootstrap} (first run downloads jars)")
        broker.start()
        console.print(f"[bold]broker[/]: up on {broker.bootstrap}")

    settings = Settings().with_(bootstrap=bootstrap, prefix=prefix)
    web_port = args.web_port or free_port()
    common = ["--bootstrap", bootstrap, "--prefix", prefix]
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        router = _spawn(["router", *common], workdir / "router.log")
        procs.append(("router", router))
        worker = _spawn(
            ["worker", *common, "--data-dir", str(workdir / "worker"), "--web-port", str(web_port)],
            workdir / "worker.log",
        )
        procs.append(("worker", worker))
        base = f"http://127.0.0.1:{web_port}"
        console.print(
            f"[bold]router[/] and [bold]worker[/] starting (prefix {prefix}, view {base})"
        )
        _wait_http(f"{base}/stats", worker, workdir / "worker.log", timeout_s=90)
        console.print("[bold]worker[/]: ready; starting the simulated fleet")

        fleet = FleetConfig(sessions=args.sessions, seed=args.seed, id_prefix="sim")
        report_box: dict[str, DriveReport] = {}
        errors: list[BaseException] = []
        seen: set[str] = set()

        def progress(r: DriveReport) -> None:
            seen.update(r.events_per_session)

        def fleet_thread() -> None:
            try:
                with Publisher(settings) as publisher:
                    report_box["r"] = drive(
                        publisher,
                        fleet,
                        rate=args.rate,
                        duration_s=args.duration,
                        progress=progress,
                    )
                    seen.update(report_box["r"].events_per_session)
            except BaseException as exc:  # surfaced below, never swallowed
                errors.append(exc)

        t = threading.Thread(target=fleet_thread, name="fleet", daemon=True)
        t.start()
        rows: dict[str, dict[str, Any]] = {}

        def poll() -> None:
            for sid in sorted(seen):
                status, body = _get_json(f"{base}/sessions/{sid}/state")
                if status == 200 and body:
                    rows[sid] = body

        def title(phase: str) -> str:
            return f"{phase}: {len(rows)} sessions in the worker's table (prefix {prefix})"

        expected: dict[str, int] = {}
        settle_deadline: float | None = None
        with Live(
            _table(rows, title("live")),
            console=console,
            refresh_per_second=2,
            transient=args.no_live,
        ) as live:
            while True:
                poll()
                live.update(_table(rows, title("live" if t.is_alive() else "catching up")))
                if not t.is_alive():
                    if errors:
                        raise errors[0]
                    if not expected:
                        expected = dict(report_box["r"].events_per_session)
                        settle_deadline = time.monotonic() + 60
                    done = all(
                        (rows.get(sid, {}).get("state") or {}).get("events") == n
                        for sid, n in expected.items()
                    )
                    if done or (settle_deadline is not None and time.monotonic() > settle_deadline):
                        break
                for name, p in procs:
                    if p.poll() is not None:
                        raise SystemExit(f"demo: {name} exited with {p.returncode}; see {workdir}")
                time.sleep(1.0)
        console.print(_table(rows, title("final")))
        r = report_box["r"]
        applied = sum((rows.get(s, {}).get("state") or {}).get("events", 0) for s in expected)
        console.print(
            f"published {r.events} events across {r.started} sessions in {r.elapsed_s:.1f}s; "
            f"the worker's tables hold {applied} of them"
            + ("" if applied == r.events else "  [red](not all arrived in time)[/]")
        )
        return 0 if applied == r.events else 1
    finally:
        for name, p in reversed(procs):
            _stop(p, name)
        if broker is not None and not args.keep_broker:
            console.print("[bold]broker[/]: stopping")
            broker.stop()
        console.print(f"logs: {workdir}")
