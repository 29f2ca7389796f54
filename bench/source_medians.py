"""Median milliseconds per source, per check, and for the checks and the render, in this process (never a test).

    .venv/bin/python bench/source_medians.py --host-root /tmp/host384                 # serve: warm, staggered
    .venv/bin/python bench/source_medians.py --host-root /tmp/host384 --cold          # check: a fresh reader each time
    PYTHONPATH=/tmp/old/exporter .venv/bin/python bench/source_medians.py ...        # another version's code

Warm (the default) is what ``numawatch serve`` does per evaluation: one ``HostReader`` (fingerprinted sources come
from its cache, stateful readers staggered: ``--stagger``, default serve's 4) read ``--runs`` times after three
warm-up readings; cold is what ``numawatch check`` does: a fresh reader, unstaggered, per reading. Each reading is
followed by the whole evaluation, serve's render and the gzip; the checks named by ``--checks`` are timed inside that
evaluation, as serve runs them (a check that makes what others reuse from the Host's memo, such as the workloads
join, is charged for it; a check run a second time on one reading would find its own findings made). Wall time,
medians; the machine's load moves them, so compare runs made one after the other.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from dataclasses import replace

from numawatch import metrics
from numawatch.checks import Check, Finding, all_checks, evaluate
from numawatch.host import Host, HostReader
from numawatch.intent import REFERENCE, Intent
from numawatch.paths import Paths


def ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


def timed(check: Check, seconds: dict[str, list[float]]) -> Check:
    """``check`` with its run timed into ``seconds[check.id]`` (its findings made in full inside the timing)."""
    run = check.run

    def timed_run(host: Host, intent: Intent) -> list[Finding]:
        began = time.perf_counter()
        try:
            return list(run(host, intent))
        finally:
            seconds.setdefault(check.id, []).append(time.perf_counter() - began)

    return replace(check, run=timed_run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-root", required=True)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--stagger", type=int, default=4, help="serve's --stagger (warm only; default 4)")
    parser.add_argument("--cold", action="store_true", help="a fresh, unstaggered reader per reading, as check")
    parser.add_argument("--checks", default="", help="comma-separated check ids whose own medians to print")
    args = parser.parse_args(argv)
    paths = Paths.from_root(args.host_root)
    reader = HostReader(paths, stagger=args.stagger)
    for _ in range(0 if args.cold else 3):
        evaluate(reader.read(), REFERENCE)
    renderer = metrics.Renderer()
    sources: dict[str, list[float]] = {}
    checks: dict[str, list[float]] = {}  # the runs of a check: none while its verdict is reused (checks.evaluate)
    phases: dict[str, list[float]] = {"read": [], "checks": [], "render+gzip": [], "total": []}
    wanted = {name for name in args.checks.split(",") if name}
    selected = tuple(timed(check, checks) if check.id in wanted else check for check in all_checks())
    for _ in range(args.runs):
        if args.cold:
            reader = HostReader(paths)
        start = time.perf_counter()
        host = reader.read()
        read = time.perf_counter() - start
        for name, status in host.statuses.items():
            sources.setdefault(name, []).append(status.duration_seconds)
        began = time.perf_counter()
        evaluation = evaluate(host, REFERENCE, selected)
        judged = time.perf_counter() - began
        began = time.perf_counter()
        gzip.compress(renderer.render(evaluation), 1)
        rendered = time.perf_counter() - began
        for phase, seconds in (("read", read), ("checks", judged), ("render+gzip", rendered)):
            phases[phase].append(seconds)
        phases["total"].append(read + judged + rendered)
    print(", ".join(f"{phase} {ms(values)} ms" for phase, values in phases.items()))
    print("sources (ms):", {name: ms(values) for name, values in sources.items()})
    if wanted:
        print("checks (ms):", {name: ms(checks[name]) if name in checks else "reused" for name in sorted(wanted)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
