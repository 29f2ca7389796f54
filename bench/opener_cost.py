"""What reading the host through the confined opener costs: CPU per evaluation and host calls per evaluation.

    .venv/bin/python bench/generate_host.py --out /tmp/host384
    .venv/bin/python bench/opener_cost.py --host-root /tmp/host384                 # serve's warm reader
    .venv/bin/python bench/opener_cost.py --host-root /tmp/host384 --cold          # check's fresh reader
    strace -f -c -o /tmp/calls.txt .venv/bin/python bench/opener_cost.py --host-root /tmp/host384 --evaluations 20

An evaluation here is what serve does per cycle: ``HostReader.read()`` (warm, staggered as serve staggers it, unless
``--cold``), ``evaluate()`` and ``metrics.render()``. The CPU figure is the median of ``time.process_time`` per
evaluation. The counts come from an audit hook: ``open`` events (Python's ``open``, ``os.open`` and the confined
opener, which raises the event itself because its openat2 goes through ctypes) and ``os.listdir``/``os.scandir``;
``strace -c`` around the same run gives the system calls themselves (openat, openat2, fstat, getdents64...), divided
by ``--evaluations`` plus the warm-up.

The same script runs the code from before the opener (``PYTHONPATH=<copy of the old package>``): it uses nothing
the old code lacks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter

from numawatch import cli, metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.paths import Paths

_counts: Counter[str] = Counter()
_counting = False


def _hook(event: str, args: tuple[object, ...]) -> None:
    if _counting and event in ("open", "os.listdir", "os.scandir"):
        _counts[event] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-root", required=True, help="a host tree (bench/generate_host.py) or /")
    parser.add_argument("--evaluations", type=int, default=30, help="evaluations measured (default: 30)")
    parser.add_argument("--warmup", type=int, default=3, help="evaluations before measuring (default: 3)")
    parser.add_argument("--cold", action="store_true", help="a fresh HostReader per evaluation, as check does")
    args = parser.parse_args(argv)

    global _counting
    sys.addaudithook(_hook)
    paths = Paths.from_root(args.host_root)
    share = getattr(cli, "DEFAULT_STAGGER", 1)
    reader = HostReader(paths, **({"stagger": share} if share != 1 and not args.cold else {}))

    def one() -> None:
        host = (HostReader(paths) if args.cold else reader).read()
        metrics.render(evaluate(host, REFERENCE))

    for _ in range(args.warmup):
        one()
    cpu = []
    _counting = True
    for _ in range(args.evaluations):
        start = time.process_time()
        one()
        cpu.append(time.process_time() - start)
    _counting = False
    per = {event: count / args.evaluations for event, count in sorted(_counts.items())}
    mode = "cold (check)" if args.cold else f"warm (serve, stagger {share})"
    print(f"{mode}: {statistics.median(cpu) * 1000:.2f} ms CPU per evaluation (median of {args.evaluations}; "
          f"min {min(cpu) * 1000:.2f}, max {max(cpu) * 1000:.2f})")
    print("per evaluation: " + ", ".join(f"{event} {count:.0f}" for event, count in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
