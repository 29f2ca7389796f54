"""CPU milliseconds of one warm evaluation as serve makes it, by part: read, checks, families, write + gzip (never a
test).

    PYTHONPATH=exporter .venv/bin/python bench/evaluation_parts.py /var/tmp/numawatch-shapes/b384 --runs 12
    PYTHONPATH=/tmp/old/exporter .venv/bin/python bench/evaluation_parts.py TREE --bench /tmp/old/bench  # older

One ``HostReader`` as ``bench/run.py``'s ``serve_reader`` makes it (serve's stagger), three warm-up evaluations, then
``--runs`` evaluations: ``reader.read()``, every check, ``metrics.families`` and the OpenMetrics writer with gzip at
level 1. CPU time of this process (``time.process_time``), medians; compare versions interleaved, run after run.
``--churn`` (with ``--pods``, ``--pinned-every``, ``--stray``) moves the tree on before each evaluation, outside the
timings (bench/churn.py; it changes the tree in place: measure a copy, a fresh one per run).
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", help="a host tree made by bench/shapes.py or bench/generate_host.py")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--bench", default=str(Path(__file__).resolve().parent), help="the bench/ of the version")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import churn as bench_churn  # this bench/'s, whichever version is measured

    bench_churn.add_churn_arguments(parser, "before each evaluation, outside the timings")
    args = parser.parse_args(argv)
    if (args.stray or args.pods or args.pinned_every) and not args.churn:
        parser.error("--stray, --pods and --pinned-every need --churn")
    sys.path.insert(0, args.bench)
    import run as bench_run  # bench/run.py of the version measured
    from numawatch import metrics
    from numawatch.checks import all_checks, evaluate
    from numawatch.intent import REFERENCE

    reader = bench_run.serve_reader(args.tree)
    renderer = metrics.Renderer()
    stats = metrics.EvaluationStats()
    parts: dict[str, list[float]] = {"read": [], "checks": [], "families": [], "write+gzip": [], "total": []}
    churn = None
    if args.churn:
        churn = bench_churn.Churn(args.tree, stray=args.stray, pods=args.pods, pinned_every=args.pinned_every)
    for index in range(args.runs + 3):
        if churn is not None:
            churn.advance()
        t0 = time.process_time()
        host = reader.read()
        t1 = time.process_time()
        evaluation = evaluate(host, REFERENCE, all_checks())
        t2 = time.process_time()
        families = metrics.families(evaluation, stats, renderer.memory)
        t3 = time.process_time()
        gzip.compress(renderer.write(families, openmetrics=True), compresslevel=1)
        t4 = time.process_time()
        if index >= 3:
            for name, value in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0), strict=True):
                parts[name].append(value * 1000)
    print(" ".join(f"{name} {statistics.median(values):.1f}" for name, values in parts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
