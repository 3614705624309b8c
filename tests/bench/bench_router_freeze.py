"""How a router stops when its broker hangs instead of going away (a script, not a test).

A broker that stops answering without closing its connections (a long GC pause,
a network black hole) is not a broker restart: requests in flight wait for their
own timeouts instead of failing at once.  Each run:

1. starts a broker of its own (free ports, a temp dir), 8 session topics, a
   steady publisher and one router (``--guarantee``, status every second);
2. once 400 events are routed, freezes the broker (SIGSTOP) for ``--freeze`` s;
3. sends the router SIGTERM and times its exit (the router command's own
   watchdog ends it with exit 3 after 15 s if the clean stop does not finish);
4. thaws and stops the broker.

It prints one line per run (exit status, seconds from SIGTERM to exit) and the
router log's last lines for a run that did not exit 0.

    python tests/bench/bench_router_freeze.py --runs 3 --guarantee at-least-once

Exit status 0 when every run exited by itself (0) within 30 s, 1 otherwise.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka_io import SessionStreamPublisher  # noqa: E402
from procs import RouterProc, frozen  # noqa: E402
from router_io import read_topic  # noqa: E402

from streams.broker import LocalBroker, ensure_jars, free_ports  # noqa: E402
from streams.core.events import TraceEvent  # noqa: E402
from streams.serde import EventSerde  # noqa: E402
from streams.settings import Settings  # noqa: E402

SERDE = EventSerde()
SESSIONS = [f"frz{i}" for i in range(8)]


def encoded(sid: str, seq: int) -> bytes:
    return SERDE.encode(TraceEvent(type="message", session_id=sid, seq=seq, timestamp_ms=seq))


def one_run(
    guarantee: str, freeze_s: float, workdir: Path, dump_after: float | None = None
) -> tuple[int | None, float, Path]:
    """(exit status or None if still running after 60 s, seconds to exit, router log).

    ``dump_after``: that many seconds after SIGTERM, ``py-spy dump --native`` of the
    router (every thread's Python and native stack) goes to ``workdir/stop-stacks.txt``.
    """
    port, controller = free_ports(2)
    broker = LocalBroker(workdir / "kafka", port, controller)
    broker.start()
    pid = broker.status().pid
    assert pid is not None
    settings = Settings(bootstrap=broker.bootstrap, prefix="frz", events_partitions=3)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    topics = [NewTopic(settings.session_topic(s), 1, 1) for s in SESSIONS]
    for future in admin.create_topics(topics).values():
        future.result(30)
    pub = SessionStreamPublisher(settings, SESSIONS, 200, encoded)
    log = workdir / "router.log"
    router = RouterProc(settings, log, "--guarantee", guarantee, "--status-every", "1")
    try:
        pub.start()
        deadline = time.monotonic() + 90
        while len(read_topic(settings.bootstrap, settings.events_topic, 400, timeout_s=5)) < 400:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing routed within 90 s; see {log}")
        with frozen(pid):
            time.sleep(freeze_s)
            t0 = time.monotonic()
            router.proc.send_signal(signal.SIGTERM)
            if dump_after is not None:
                try:
                    router.proc.wait(dump_after)
                except subprocess.TimeoutExpired:
                    try:
                        dump = subprocess.run(
                            ["py-spy", "dump", "--native", "--pid", str(router.proc.pid)],
                            capture_output=True,
                            text=True,
                            check=False,
                        )
                        text = dump.stdout + dump.stderr
                    except FileNotFoundError:
                        text = "py-spy is not installed (pip install py-spy): no stacks\n"
                    (workdir / "stop-stacks.txt").write_text(text)
            try:
                rc: int | None = router.proc.wait(60)
            except subprocess.TimeoutExpired:
                rc = None
            return rc, time.monotonic() - t0, log
    finally:
        pub.killed.set()
        router.stop(signal.SIGKILL)
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--guarantee", choices=("exactly-once", "at-least-once"), default="at-least-once"
    )
    ap.add_argument("--freeze", type=float, default=15.0, help="seconds frozen before SIGTERM")
    ap.add_argument("--workdir", help="keep logs and data here (default: a temp dir)")
    ap.add_argument(
        "--dump-after",
        type=float,
        metavar="S",
        help="S seconds after SIGTERM, write the router's stacks (py-spy dump --native, "
        "pip install py-spy) to <workdir>/runN/stop-stacks.txt: where the stop waits",
    )
    args = ap.parse_args(argv)
    ensure_jars()
    ok = True
    for i in range(1, args.runs + 1):
        base = (
            Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-freeze-"))
        )
        workdir = base / f"run{i}"
        workdir.mkdir(parents=True, exist_ok=True)
        rc, took, log = one_run(args.guarantee, args.freeze, workdir, args.dump_after)
        status = "still running after 60 s" if rc is None else f"exit {rc}"
        print(
            f"run {i}: {args.guarantee}, broker frozen {args.freeze:.0f} s, SIGTERM -> "
            f"{status} after {took:.1f} s",
            flush=True,
        )
        if rc != 0 or took > 30:
            ok = False
            lines = [
                line
                for line in log.read_text(errors="replace").splitlines()
                if "Connect to" not in line and "not yet delivered" not in line
            ]
            print("  router log, last lines:\n    " + "\n    ".join(x[:200] for x in lines[-6:]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
