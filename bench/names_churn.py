"""CPU milliseconds per evaluation of the names source alone, read as serve reads it, under pod churn (never a test).

    PYTHONPATH=exporter .venv/bin/python bench/names_churn.py --tree /var/tmp/numawatch-shapes/d384churn
    PYTHONPATH=/tmp/old/exporter .venv/bin/python bench/names_churn.py ...     # another version's code

The tree (a shape bench/shapes.py wrote) is copied to ``--copy`` first (the churn changes it; removed at the end).
Before each evaluation bench/churn.py advances it as the d384churn shape's serve run does (one Burstable/BestEffort
pod replaced per advance, a pinned one every 30, the counters moved); a ``HostReader`` of the names source alone,
staggered as serve (``--stagger``, 4), then reads it, timed with ``time.process_time`` (this process's CPU, the
kernel's part included), one evaluation per ``--interval`` seconds of wall time so that the directories' mtimes age as
in serve. The last reading is checked against a whole one. ``--profile`` adds cProfile's top functions. The machine's
load moves the figures: compare versions in runs made one after the other.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import statistics
import subprocess
import time

from churn import Churn  # bench/ is the script's directory: first on sys.path
from numawatch.host import HostReader
from numawatch.paths import Paths
from numawatch.sources import names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default="/var/tmp/numawatch-shapes/d384churn")
    parser.add_argument("--copy", default="/dev/shm/numawatch-names-churn")
    parser.add_argument("--evaluations", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=8, help="evaluations first, not counted (the first is whole)")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--stagger", type=int, default=4)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    shutil.rmtree(args.copy, ignore_errors=True)
    subprocess.run(["cp", "-a", args.tree, args.copy], check=True)
    try:
        churn = Churn(args.copy, stray=0, seconds=1.0, pods=1, pinned_every=30)
        reader = HostReader(Paths.from_root(args.copy), [names.SOURCE], stagger=args.stagger)
        profiler = cProfile.Profile()
        costs = []
        for number in range(args.warmup + args.evaluations):
            churn.advance()
            started = time.monotonic()
            counted = number >= args.warmup
            if counted and args.profile:
                profiler.enable()
            cpu = time.process_time()
            host = reader.read()
            cpu = time.process_time() - cpu
            profiler.disable()
            if not host.statuses["names"].up:
                raise SystemExit(f"the names source is down: {host.statuses['names']}")
            if counted:
                costs.append(cpu * 1000)
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
        last = reader.read()
        if last.names != names.read(Paths.from_root(args.copy)):
            raise SystemExit("the last reading differs from a whole one")
        costs.sort()
        print(f"names per evaluation: median {statistics.median(costs):.2f} ms CPU, p10 {costs[len(costs) // 10]:.2f}, "
              f"p90 {costs[len(costs) * 9 // 10]:.2f} over {len(costs)}; {len(last.names.containers)} containers, "
              f"{len(last.names.pods)} pods")  # fmt: skip
        if args.profile:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    finally:
        shutil.rmtree(args.copy, ignore_errors=True)


if __name__ == "__main__":
    main()
