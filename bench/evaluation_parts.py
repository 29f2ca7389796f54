"""CPU milliseconds of one warm evaluation as serve makes it, by part: read, checks, families, write + gzip (never a
test).

    PYTHONPATH=exporter .venv/bin/python bench/evaluation_parts.py /var/tmp/numawatch-shapes/b384 --runs 12
    PYTHONPATH=/tmp/old/exporter .venv/bin/python bench/evaluation_parts.py TREE --bench /tmp/old/bench  # older
    cp -a /var/tmp/numawatch-shapes/d384churn /dev/shm/tree && PYTHONPATH=exporter .venv/bin/python \
        bench/evaluation_parts.py /dev/shm/tree --churn --pods 1 --pinned-every 30   # moving (changes the tree)
    PYTHONPATH=exporter .venv/bin/python bench/evaluation_parts.py TREE --pace 1   # each after an idle second

One ``HostReader`` as ``bench/run.py``'s ``serve_reader`` makes it (serve's stagger) and serve's garbage collector
settings (``cli.tune_gc_for_serve``), three warm-up evaluations, then
``--runs`` evaluations: ``reader.read()``, the workloads join (made first, as the first check to ask would make it),
every check, ``metrics.families`` and the gzip OpenMetrics body as serve
writes it (``server.Bodies``: the plain body, then its gzip at level 1; a version without ``Bodies`` writes the body
and gzips it whole). With ``--churn`` (bench/churn.py) the tree moves on before each evaluation, outside the timing,
so that what serve reuses from the last evaluation is measured as a busy node leaves it (it changes the tree in
place: measure a copy, a fresh one per run). CPU time of this process (``time.process_time``), medians; compare
versions interleaved, run after run.
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
    parser.add_argument("--pace", type=float, default=0.0, metavar="SECONDS",
                        help="sleep this long before each evaluation, outside the timings: serve's idle gap, after "
                             "which an evaluation costs more than back to back (0: back to back)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import churn as bench_churn  # bench/churn.py, next to this file

    bench_churn.add_churn_arguments(parser, "before each evaluation, outside the timings")
    args = parser.parse_args(argv)
    if (args.stray or args.pods or args.pinned_every) and not args.churn:
        parser.error("--stray, --pods and --pinned-every need --churn")
    sys.path.insert(0, args.bench)
    import run as bench_run  # bench/run.py of the version measured
    from numawatch import cli, metrics
    from numawatch.checks import all_checks, evaluate
    from numawatch.intent import REFERENCE
    from numawatch.workloads import build_workloads

    try:
        from numawatch.server import Bodies, BodyFormat
    except ImportError:  # a version older than serve's per-format bodies
        Bodies = None

    mover = bench_churn.Churn(args.tree, stray=args.stray, seconds=1.0, pods=args.pods,
                              pinned_every=args.pinned_every) if args.churn else None  # fmt: skip
    reader = bench_run.serve_reader(args.tree)
    # serve's collector settings (a version without them: CPython's defaults): with CPython's, a collection of
    # everything the warm reader holds falls into whichever part allocates past the threshold.
    tune_gc = getattr(cli, "tune_gc_for_serve", None)
    if tune_gc is not None:
        tune_gc()
    renderer = metrics.Renderer()
    stats = metrics.EvaluationStats()
    names = ("read", "join", "checks", "families", "write+gzip", "total")
    parts: dict[str, list[float]] = {name: [] for name in names}
    for index in range(args.runs + 3):
        if mover is not None:
            mover.advance()
        if args.pace:
            time.sleep(args.pace)
        t0 = time.process_time()
        host = reader.read()
        t1 = time.process_time()
        build_workloads(host, REFERENCE)  # made here, the checks and families then find it made
        t2 = time.process_time()
        evaluation = evaluate(host, REFERENCE, all_checks())
        t3 = time.process_time()
        families = metrics.families(evaluation, stats, renderer.memory)
        t4 = time.process_time()
        if Bodies is not None:
            Bodies(families, renderer).get(BodyFormat(True, True))
        else:
            gzip.compress(renderer.write(families, openmetrics=True), compresslevel=1)
        t5 = time.process_time()
        if index >= 3:
            for name, value in zip(names, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0), strict=True):
                parts[name].append(value * 1000)
    print(" ".join(f"{name} {statistics.median(values):.1f}" for name, values in parts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
