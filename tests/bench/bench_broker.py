"""Local broker timings: jar download (optional, cold), start, restart, stop.

A script, not a test (prints figures, asserts nothing).  Run from the repo root::

    python tests/bench/bench_broker.py [--rounds 3] [--cold-jars]

``--cold-jars`` first times ``ensure_jars()`` into a temporary cache with an
EMPTY temporary Maven repository (``-Dmaven.repo.local``), i.e. what a fresh CI
machine pays: Maven plugins + Kafka's ~57 jars from Maven Central.  Then, per
round, on free ports in a fresh temporary data dir: start (format + JVM + ready),
stop, restart on the formatted dir, stop.  "Ready" = answers a Metadata request
listing itself (streams.broker.probe).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streams.broker import LocalBroker, ensure_jars, free_ports  # noqa: E402


def _summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f}s  min {min(values):.2f}s  "
        f"max {max(values):.2f}s  (n={len(values)})"
    )


def cold_jars() -> float:
    scratch = Path(tempfile.mkdtemp(prefix="bench-jars-"))
    saved = {k: os.environ.get(k) for k in ("TRAJECTORY_CACHE_DIR", "MAVEN_OPTS")}
    os.environ["TRAJECTORY_CACHE_DIR"] = str(scratch / "cache")
    os.environ["MAVEN_OPTS"] = f"-Dmaven.repo.local={scratch / 'm2'}"
    try:
        started = time.monotonic()
        libs = ensure_jars()
        elapsed = time.monotonic() - started
        print(f"cold jar download: {elapsed:.1f}s ({len(list(libs.glob('*.jar')))} jars)")
        return elapsed
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold-jars", action="store_true", help="also time a cold jar download")
    args = ap.parse_args()
    if args.cold_jars:
        cold_jars()
    started = time.monotonic()
    ensure_jars()
    print(f"ensure_jars (project cache): {time.monotonic() - started:.2f}s")
    first, restart, stop = [], [], []
    for _ in range(args.rounds):
        data_dir = Path(tempfile.mkdtemp(prefix="bench-broker-"))
        port, controller_port = free_ports(2)
        broker = LocalBroker(data_dir, port, controller_port)
        try:
            for bucket in (first, restart):
                t = time.monotonic()
                broker.start()
                bucket.append(time.monotonic() - t)
                t = time.monotonic()
                broker.stop()
                stop.append(time.monotonic() - t)
        finally:
            broker.stop()
            shutil.rmtree(data_dir, ignore_errors=True)
    print(f"start, fresh data dir (format + JVM + ready): {_summary(first)}")
    print(f"start, formatted data dir:                    {_summary(restart)}")
    print(f"stop (SIGTERM -> exited, ports free):         {_summary(stop)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
