"""Run the whole pipeline on this machine and watch it work.

The demo starts (or reuses) a local Kafka broker, starts the ingest router and a
Faust worker as child processes on a fresh topic prefix, drives a simulated
fleet through the publisher SDK (a quarter of it pathological: looping,
stalled, budget-burning agents), and shows live, per session, what the worker
knows and what it concluded: events applied, the latest assessment's severity
and the first line of its rendered markdown -- read back from the worker's
HTTP view (``GET /sessions``, ``GET /sessions/<id>/assessment``).  Session ids
end in their kind (``-looping``, ``-stalled``, ``-budget_burner``,
``-healthy``): the pathological ones should get caution/warning assessments,
the healthy ones none.  When the fleet is done it waits for the worker to catch
up, prints the final table and a summary "kind -> sessions with assessments /
sessions", and stops everything it started (a broker it found already running
is left running).

Exit status: 0 when every published event reached the worker's tables and
every looping session got a warning; 1 otherwise (the reason is printed).

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


def _get_text(url: str, timeout: float = 2.0) -> str | None:
    """The body of a 200 answer, None on 404 (e.g. no assessment yet); other errors raise."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    from streams.errors import InternalError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InternalError(f"worker exited with {proc.returncode}; see {log}")
        with contextlib.suppress(OSError):
            status, _ = _get_json(url, timeout=1.0)
            if status == 200:
                return
        time.sleep(0.5)
    raise InternalError(f"worker did not answer on {url} within {timeout_s:.0f}s; see {log}")


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


SEVERITY_STYLE = {"warning": "bold red", "caution": "yellow", "info": "cyan"}


def session_kind(session_id: str) -> str:
    """The simulated kind a fleet session id ends in (``sim-3-0-looping`` -> looping)."""
    from streams.sim.scenarios import SESSION_KINDS

    for kind in SESSION_KINDS:
        if session_id.endswith(f"-{kind}"):
            return kind
    return "other"


def headline(markdown: str) -> str:
    """The newest assessment in one line: ``<observer>: <summary>``.

    The rendering is ``## Trajectory Assessment``, ``_Generated after..._``, then per
    observer ``### name [severity]``, a blank line and its summary; the first
    observer block is shown (observers render in configuration order).
    """
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("### "):
            summary = next((x for x in lines[i + 1 :] if x.strip()), "")
            observer = line[4:].rsplit(" [", 1)[0]  # the severity has its own column
            return f"{observer}: {summary}"
    return ""


def _table(
    rows: dict[str, dict[str, Any]], heads: dict[str, str], title: str, width: int = 120
) -> Any:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    sid_w = max([len("session"), *(len(s) for s in rows)])
    fixed = {"session": sid_w, "events": 6, "last seq": 8, "severity": 8, "call #": 6}
    for col, w in fixed.items():
        t.add_column(
            col,
            justify="left" if col in ("session", "severity") else "right",
            no_wrap=True,
            min_width=w,
        )
    # what is left of the terminal: 3 border/padding characters per column + 1
    rest = max(20, width - sum(fixed.values()) - 3 * (len(fixed) + 1) - 1)
    t.add_column("latest assessment", no_wrap=True, overflow="ellipsis", max_width=rest)
    for sid in sorted(rows):
        row = rows[sid]
        sev = row.get("severity")
        style = "" if sid.endswith("healthy") else "yellow"
        t.add_row(
            f"[{style}]{sid}[/]" if style else sid,
            str(row.get("events", "")),
            str(row.get("last_seq", "")),
            f"[{SEVERITY_STYLE[sev]}]{sev}[/]" if sev in SEVERITY_STYLE else "-",
            "" if row.get("call_index") is None else str(row["call_index"]),
            escape(heads.get(sid, "")),  # "[warning]" is rich markup otherwise
        )
    return t


def summarize(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per kind: sessions, sessions with any assessment, with caution+, with a warning."""
    out: dict[str, dict[str, int]] = {}
    for sid, row in rows.items():
        k = out.setdefault(
            session_kind(sid), {"sessions": 0, "assessed": 0, "caution+": 0, "warning": 0}
        )
        sev = row.get("severity")
        k["sessions"] += 1
        k["assessed"] += sev is not None
        k["caution+"] += sev in ("caution", "warning")
        k["warning"] += sev == "warning"
    return out


def _summary_table(summary: dict[str, dict[str, int]]) -> Any:
    from rich.table import Table

    t = Table(title="kind -> sessions with assessments / sessions", title_justify="left")
    for col in ("kind", "assessed / sessions", "caution or warning", "warning"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for kind in sorted(summary, key=lambda k: (k == "healthy", k)):
        k = summary[kind]
        t.add_row(
            kind,
            f"{k['assessed']} / {k['sessions']}",
            str(k["caution+"]),
            str(k["warning"]),
        )
    return t


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from streams.broker import LocalBroker, free_port, kafka_ready
    from streams.errors import InternalError
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
            [
                "worker",
                *common,
                "--data-dir",
                str(workdir / "worker"),
                "--web-port",
                str(web_port),
                # below _stop's 20 s: a stop that hangs dumps its stacks into
                # worker.log (exit 3) before the demo would kill it blind
                "--stop-timeout",
                "15",
            ],
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
        heads: dict[str, str] = {}
        head_of: dict[str, tuple[int | None, int | None]] = {}

        def poll() -> None:
            status, body = _get_json(f"{base}/sessions")
            if status != 200 or not body:
                raise InternalError(f"GET {base}/sessions answered {status}: {body}")
            for row in body["sessions"]:
                sid = row["session_id"]
                rows[sid] = row
                mark = (row.get("assessment_seq"), row.get("call_index"))
                if row.get("severity") is not None and head_of.get(sid) != mark:
                    text = _get_text(f"{base}/sessions/{sid}/assessment")
                    if text is not None:
                        heads[sid] = headline(text)
                        head_of[sid] = mark

        def title(phase: str) -> str:
            assessed = sum(1 for r in rows.values() if r.get("severity"))
            return (
                f"{phase}: {len(rows)} sessions in the worker's tables, {assessed} with an "
                f"assessment (prefix {prefix})"
            )

        expected: dict[str, int] = {}
        settle_deadline: float | None = None
        with Live(
            _table(rows, heads, title("live"), console.width),
            console=console,
            refresh_per_second=2,
            transient=args.no_live,
        ) as live:
            while True:
                poll()
                live.update(
                    _table(
                        rows,
                        heads,
                        title("live" if t.is_alive() else "catching up"),
                        console.width,
                    )
                )
                if not t.is_alive():
                    if errors:
                        raise errors[0]
                    if not expected:
                        expected = dict(report_box["r"].events_per_session)
                        settle_deadline = time.monotonic() + 60
                    done = all(rows.get(sid, {}).get("events") == n for sid, n in expected.items())
                    if done or (settle_deadline is not None and time.monotonic() > settle_deadline):
                        break
                for name, p in procs:
                    if p.poll() is not None:
                        raise SystemExit(f"demo: {name} exited with {p.returncode}; see {workdir}")
                time.sleep(1.0)
        console.print(_table(rows, heads, title("final"), console.width))
        r = report_box["r"]
        applied = sum(rows.get(s, {}).get("events", 0) for s in expected)
        console.print(
            f"published {r.events} events across {r.started} sessions in {r.elapsed_s:.1f}s; "
            f"the worker's tables hold {applied} of them"
            + ("" if applied == r.events else "  [red](not all arrived in time)[/]")
        )
        published = {sid: rows.get(sid, {}) for sid in expected}
        summary = summarize(published)
        console.print(_summary_table(summary))
        failures = []
        if applied != r.events:
            failures.append(f"only {applied} of {r.events} events reached the worker")
        silent = sorted(
            sid
            for sid, row in published.items()
            if session_kind(sid) == "looping" and row.get("severity") != "warning"
        )
        if silent:
            failures.append(f"looping sessions without a warning: {', '.join(silent)}")
        if "looping" not in summary:
            console.print("(no looping session in this fleet: use more --sessions to see one)")
        for f in failures:
            console.print(f"[red]demo: {f}[/]")
        return 1 if failures else 0
    finally:
        for name, p in reversed(procs):
            _stop(p, name)
        if broker is not None and not args.keep_broker:
            console.print("[bold]broker[/]: stopping")
            broker.stop()
        console.print(f"logs: {workdir}")
