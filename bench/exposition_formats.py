"""CPU to write one evaluation's families: numawatch's writer (metrics/exposition.py) against prometheus_client's
encoders, in the text format and OpenMetrics, and the sizes of the two bodies plain and gzipped.

    .venv/bin/python bench/exposition_formats.py --host-root /tmp/host384 [--repeat 30]
    .venv/bin/python bench/exposition_formats.py --reference   # the reference node with drift (bench/drift_series.py)

The evaluation is what serve's warm reader gives (bench/run.py's ``serve_reader``, two readings), or the reference
node of the tests with many drifts planted and NVML's fake GPUs. Each writer writes
freshly built families ``--repeat`` times (process CPU time, median); "cached" is the writer with the line cache serve
keeps between evaluations, fed the same evaluation again (what an unchanged node costs). Before timing, the bytes of
each format are compared with prometheus_client's (the text format without ``_created`` samples): the run stops if
they differ. This is the measurement behind keeping the hand-written writer (docs/performance.md).
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run  # bench/run.py, next to this file
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.intent import REFERENCE
from numawatch.metrics import exposition
from numawatch.metrics.core import EvaluationStats
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import CollectorRegistry


class _Collector:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _registry(families: list[Metric], created: bool = True) -> CollectorRegistry:
    if not created:
        stripped = []
        for family in families:
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = [s for s in family.samples if s.name != family.name + "_created"]
            stripped.append(copy)
        families = stripped
    registry = CollectorRegistry()
    registry.register(_Collector(families))
    return registry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--host-root", help="a host tree (bench/generate_host.py)")
    source.add_argument("--reference", action="store_true", help="the reference node with drift planted")
    parser.add_argument("--repeat", type=int, default=30, help="writes per writer (default: 30)")
    args = parser.parse_args(argv)

    if args.reference:
        import drift_series  # bench/drift_series.py

        scratch = tempfile.TemporaryDirectory(prefix="numawatch-reference-")
        evaluation = drift_series.reference_evaluation(Path(scratch.name) / "host")
        args.host_root = "the reference node"
    else:
        reader = run.serve_reader(args.host_root)
        reader.read()
        evaluation = evaluate(reader.read(), REFERENCE)
    stats = EvaluationStats.of(evaluation)

    def build() -> list[Metric]:
        return metrics.families(evaluation, stats)

    text, openmetrics = exposition.write(build()), exposition.write(build(), openmetrics=True)
    if text != generate_latest(_registry(build(), created=False)):
        raise SystemExit("the text format differs from prometheus_client's generate_latest")
    if openmetrics != generate_openmetrics(_registry(build())):
        raise SystemExit("OpenMetrics differs from prometheus_client's openmetrics generate_latest")

    def timed(write) -> float:
        samples = []
        for _ in range(args.repeat):
            families = build()
            start = time.process_time()
            write(families)
            samples.append(time.process_time() - start)
        return statistics.median(samples) * 1000

    text_cache, om_cache = exposition.LineCache(), exposition.LineCache()
    exposition.write(build(), text_cache)
    exposition.write(build(), om_cache, openmetrics=True)
    rows = [
        ("text, numawatch", timed(exposition.write)),
        ("text, numawatch with the line cache", timed(lambda f: exposition.write(f, text_cache))),
        ("text, prometheus_client generate_latest", timed(lambda f: generate_latest(_registry(f, created=False)))),
        ("OpenMetrics, numawatch", timed(lambda f: exposition.write(f, openmetrics=True))),
        ("OpenMetrics, numawatch with the line cache",
         timed(lambda f: exposition.write(f, om_cache, openmetrics=True))),
        ("OpenMetrics, prometheus_client generate_latest", timed(lambda f: generate_openmetrics(_registry(f)))),
    ]
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    print(f"{args.host_root}: {series} series; both formats byte for byte as prometheus_client writes them")
    for name, ms in rows:
        print(f"{ms:8.2f} ms  {name}")
    for name, body in (("text", text), ("OpenMetrics", openmetrics)):
        print(f"{name}: {len(body)} bytes, {len(gzip.compress(body, compresslevel=1))} gzipped (level 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
