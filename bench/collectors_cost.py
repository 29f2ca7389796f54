"""CPU of building the metric families of one warm evaluation with collectors turned off.

    .venv/bin/python bench/collectors_cost.py --host-root /var/tmp/numawatch-shapes/b384 [--runs 21]

For each choice of collectors (all on, each one off alone, all off) two of serve's warm readers
(``bench/run.py``'s ``serve_reader``) read the tree in turn, each keeping its own history as serve's does: one
builds only the enabled families (``metrics.families(..., collectors=)``, what serve does now), the other builds
every family and drops the disabled ones (``Collectors.keep``, what serve did before). The reading and its
evaluation are outside the timed region; building, and writing the text exposition, are timed (CPU). Prints the
medians of both and the exposition's size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run  # bench/run.py, next to this file
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.collectors import COLLECTORS, Collectors
from numawatch.intent import REFERENCE
from numawatch.metrics import exposition


def configurations() -> list[tuple[str, Collectors]]:
    every = frozenset(c.name for c in COLLECTORS)
    chosen = [("all on", Collectors(every))]
    chosen += [(f"{c.name} off", Collectors(every - {c.name})) for c in COLLECTORS]
    chosen.append(("all off", Collectors(frozenset())))
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-root", required=True, help="a host tree (bench/shapes.py, bench/generate_host.py)")
    parser.add_argument("--runs", type=int, default=21, help="readings per configuration and way (default: 21)")
    args = parser.parse_args(argv)

    print(f"{'':26s} {'build, skipping':>16s} {'build all, drop':>16s} {'write':>8s} {'size':>9s}")
    for name, chosen in configurations():
        timings: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
        readers = {skipping: run.serve_reader(args.host_root) for skipping in (True, False)}
        memories = {skipping: metrics.Memory() for skipping in (True, False)}
        stats = metrics.EvaluationStats()
        for reader in readers.values():
            reader.read()  # fill the fingerprint caches, as serve's first evaluation does
        size = 0
        for _ in range(args.runs):
            for skipping, reader in readers.items():
                evaluation = evaluate(reader.read(), REFERENCE)
                start = time.process_time()
                if skipping:
                    built = metrics.families(evaluation, stats, memories[skipping], collectors=chosen)
                else:
                    built = chosen.keep(metrics.families(evaluation, stats, memories[skipping]))
                middle = time.process_time()
                body = exposition.write(built)
                end = time.process_time()
                timings[skipping][0].append((middle - start) * 1000)
                timings[skipping][1].append((end - middle) * 1000)
                size = len(body)
        skip_ms, all_ms = (statistics.median(timings[way][0]) for way in (True, False))
        write_ms = statistics.median(timings[True][1] + timings[False][1])
        print(f"{name:26s} {skip_ms:13.2f} ms {all_ms:13.2f} ms {write_ms:5.2f} ms {size / 1000:6.1f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
