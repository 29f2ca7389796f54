"""How much an evaluation of a running ``numawatch serve`` costs depending on the idle time before it.

    python bench/generate_host.py --out /tmp/host384 --cpus 384
    python bench/serve_idle_penalty.py --host /tmp/host384 --intervals 0.05,1,3

For each interval it starts serve on the tree, waits for warm-up, then divides the process's CPU time (its CPU-time
clock, ``bench/run.py``'s ``proc_cpu_seconds``) over a fixed window by the ``numawatch_evaluations_total`` delta. A
bench, not a test: the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
from run import proc_cpu_seconds as cpu_seconds  # noqa: E402

VENV_NUMAWATCH = BENCH.parent / ".venv/bin/numawatch"


def _evaluations(url: str) -> float:
    text = urllib.request.urlopen(url + "metrics", timeout=30).read().decode()
    match = re.search(r"^numawatch_evaluations_total (\S+)", text, re.M)
    if match is None:
        raise SystemExit("no numawatch_evaluations_total in the exposition")
    return float(match.group(1))


def measure(binary: str, host: str, interval: float, warmup: float, window: float) -> tuple[int, float]:
    command = [binary, "--host-root", host, "--log.level", "info", "serve", "--web.listen-address", "127.0.0.1:0",
               "--interval", str(interval)]
    # The log to a file, not a pipe: nobody reads it while serve runs.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            url = _listening_url(process, log)
            time.sleep(warmup)
            count, cpu = _evaluations(url), cpu_seconds(process.pid)
            time.sleep(window)
            evaluations = int(_evaluations(url) - count)
            return evaluations, (cpu_seconds(process.pid) - cpu) / max(evaluations, 1)
        finally:
            process.kill()
            process.wait(timeout=10)


def _listening_url(process: subprocess.Popen, log: IO[bytes], timeout: float = 60) -> str:
    """The URL of serve's "Listening on" log line (logfmt: ``msg="Listening on" ... url=http://...``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        log.seek(0)
        match = re.search(rb'msg="Listening on" .*?\burl=(\S+)', log.read())
        if match is not None:
            return match.group(1).decode()
        time.sleep(0.05)
    log.seek(0)
    raise SystemExit(f"serve did not start: {log.read().decode(errors='replace')[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="a generated host tree (bench/generate_host.py)")
    parser.add_argument("--intervals", default="0.05,1,3", help="comma-separated serve --interval values")
    parser.add_argument("--warmup", type=float, default=6.0)
    parser.add_argument("--window", type=float, default=12.0)
    parser.add_argument("--binary", default=str(VENV_NUMAWATCH))
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("| --interval s | evaluations | CPU ms / evaluation |\n|---|---|---|")
    for interval in (float(value) for value in args.intervals.split(",")):
        evaluations, cpu = measure(args.binary, args.host, interval, args.warmup, args.window)
        print(f"| {interval:g} | {evaluations} | {cpu * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
