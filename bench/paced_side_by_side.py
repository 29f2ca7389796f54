"""numawatch serve and node_exporter side by side, each at two paces: back to back and once a second.

    python bench/generate_host.py --out /tmp/host384 --cpus 384
    python bench/paced_side_by_side.py --host /tmp/host384 --rounds 2
    python bench/churn.py --root /tmp/host384 --every 1 --seconds 1 &   # optionally, counters moving meanwhile

Why: on this benchmark VM an evaluation (or a scrape) that follows an idle second costs several times what one run
back to back costs (caches and kernel state go cold; see "A whole evaluation on a large node" in
docs/performance.md). bench/run.py compares serve at its 1 s interval with node_exporter scraped once a second (and
shows the back-to-back scrape beside it). Here both are measured both ways, alternately, minutes apart at most:

- node_exporter (Debian's 1.5.0, the small configuration: cpu, cpufreq, meminfo_numa, vmstat; gzip asked for): CPU
  seconds (the process's CPU-time clock, ``bench/run.py``'s ``proc_cpu_seconds``) over N scrapes, divided by N; back
  to back, then one a second;
- ``numawatch serve --interval 0.05`` (evaluations back to back) and ``--interval 1``: CPU seconds over a window
  divided by the ``numawatch_evaluations_total`` delta (two scrapes in the window, so serving costs nearly nothing).

A bench, not a test: the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
from run import proc_cpu_seconds as cpu_seconds  # noqa: E402

NUMAWATCH = BENCH.parent / ".venv/bin/numawatch"
NODE_EXPORTER = "/tmp/nodeexp/root/usr/bin/prometheus-node-exporter"  # bench/run.py unpacks it there
SMALL = ("cpu", "cpufreq", "meminfo_numa", "vmstat")


def node_exporter(binary: str, root: str, port: int, pace: float, scrapes: int) -> float:
    """CPU seconds per scrape, ``pace`` seconds of idleness before each."""
    argv = [binary, f"--path.procfs={root}/proc", f"--path.sysfs={root}/sys", f"--path.rootfs={root}",
            f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
            *(f"--collector.{name}" for name in SMALL)]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"})
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(request, timeout=30).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for _ in range(2):  # warm-up
            urllib.request.urlopen(request, timeout=30).read()
        start = cpu_seconds(process.pid)
        for _ in range(scrapes):
            if pace:
                time.sleep(pace)
            urllib.request.urlopen(request, timeout=30).read()
        return (cpu_seconds(process.pid) - start) / scrapes
    finally:
        process.terminate()
        process.wait()


def serve(binary: str, root: str, port: int, interval: float, window: float, warmup: float) -> float:
    """CPU seconds per evaluation of ``numawatch serve --interval interval`` over ``window`` seconds."""
    argv = [binary, "--log-level", "error", "serve", "--host-root", root, "--interval", str(interval),
            "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(warmup)  # start-up, then the first staggered readings (complete ones) are over

        def evaluations() -> float:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
            match = re.search(r"^numawatch_evaluations_total (\S+)", text, re.M)
            if match is None:
                raise SystemExit("no numawatch_evaluations_total in serve's exposition")
            return float(match.group(1))

        first, start = evaluations(), cpu_seconds(process.pid)
        time.sleep(window)
        last, end = evaluations(), cpu_seconds(process.pid)
        return (end - start) / (last - first)
    finally:
        process.terminate()
        process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True, metavar="DIR", help="host root (bench/generate_host.py output)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--node-exporter", default=NODE_EXPORTER, metavar="BINARY")
    parser.add_argument("--numawatch", default=str(NUMAWATCH), metavar="BINARY")
    parser.add_argument("--scrapes", type=int, default=40, help="node_exporter scrapes back to back (default 40)")
    parser.add_argument("--paced-scrapes", type=int, default=12, help="node_exporter scrapes, one a second")
    parser.add_argument("--window", type=float, default=12.0, help="seconds serve is measured over")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds serve runs before it is measured")
    args = parser.parse_args(argv)
    if not os.access(args.node_exporter, os.X_OK):
        raise SystemExit(f"{args.node_exporter}: not found; `python bench/run.py --node-exporter` unpacks it")
    print(f"host {args.host}; load average {os.getloadavg()[0]:.2f}; CPU ms per scrape / per evaluation")
    for round_number in range(1, args.rounds + 1):
        figures = {
            "node_exporter back to back": node_exporter(args.node_exporter, args.host, 19916, 0, args.scrapes),
            "node_exporter once a second": node_exporter(
                args.node_exporter, args.host, 19916, 1.0, args.paced_scrapes
            ),
            "serve --interval 0.05": serve(args.numawatch, args.host, 19917, 0.05, args.window, args.warmup),
            "serve --interval 1": serve(args.numawatch, args.host, 19917, 1.0, args.window, args.warmup),
        }
        for name, seconds in figures.items():
            print(f"round {round_number}  {name:28s} {seconds * 1000:7.1f} ms")
        warm = figures["serve --interval 0.05"] / figures["node_exporter back to back"]
        cold = figures["serve --interval 1"] / figures["node_exporter once a second"]
        print(f"round {round_number}  serve / node_exporter: back to back {warm:.2f}, once a second {cold:.2f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
