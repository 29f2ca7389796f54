"""CPU per metric family of one warm evaluation: building it (the builder) and writing it (``exposition.write``).

    .venv/bin/python bench/render_families.py --host-root /tmp/host384 [--repeat 30] [--stagger K]

The evaluation is what serve's warm reader gives (``bench/run.py``'s ``serve_reader``); each builder runs
``--repeat`` times through ``core.safely``, then the families it built are written ``--repeat`` times. Prints the
milliseconds per build and per write, most expensive first, and the sum over the families.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run  # bench/run.py, next to this file
from numawatch.checks import evaluate
from numawatch.intent import REFERENCE
from numawatch.metrics import capacity, core, exposition, gpu
from numawatch.metrics import host as host_metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-root", required=True, help="a host tree (bench/generate_host.py)")
    parser.add_argument("--repeat", type=int, default=30, help="builds and writes per family (default: 30)")
    parser.add_argument("--stagger", type=int, default=None, metavar="K", help="serve's --stagger (default: serve's)")
    args = parser.parse_args(argv)

    reader = run.serve_reader(args.host_root, args.stagger)
    reader.read()
    evaluation = evaluate(reader.read(), REFERENCE)
    builders = [(build.__name__, build) for build in core.PER_EVALUATION]
    builders += [(f"host.{build.__name__}", build) for build in host_metrics.BUILDERS]
    builders += [("gpu.families", gpu.families), ("capacity.families", capacity.families)]
    rows = []
    for name, build in builders:
        start = time.process_time()
        for _ in range(args.repeat):
            families = core.safely(build, evaluation)
        built = time.process_time()
        for _ in range(args.repeat):
            exposition.write(families)
        written = time.process_time()
        series = sum(len(family.samples) for family in families)
        rows.append(((built - start) / args.repeat * 1000, (written - built) / args.repeat * 1000, name, series))
    rows.sort(key=lambda row: row[0] + row[1], reverse=True)
    for build_ms, write_ms, name, series in rows:
        print(f"{build_ms:6.2f} ms build {write_ms:6.2f} ms write  {name} ({series} series)")
    print(f"sum: {sum(row[0] + row[1] for row in rows):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
