"""Two versions of ``numawatch serve`` running at once, each on its own copy of one tree: B's CPU against A's.

    python bench/ab_simultaneous.py --host /var/tmp/numawatch-shapes/host32 --a /tmp/old/exporter --b exporter
    python bench/ab_simultaneous.py --host TREE --a exporter --b exporter   # A/A: the harness's own spread

Why: on this shared VM a side by side moves 5-10 % from one round to the next (bench/interleaved_side_by_side.py
against node_exporter, whose cost moves with serve's), so a change worth 5 % cannot be told from noise by comparing
rounds taken minutes apart. Here A and B run in the same seconds and meet the same VM: each is ``serve --interval 1``
on its own copy of the tree (in ``--scratch``, tmpfs by default, so neither reads pages the other has just warmed),
scraped over one kept-alive connection as Prometheus scrapes (its Accept header, gzip) half a second after each of
its evaluations starts. The two start half a second apart, so each evaluates while the other is scraped, and the one
started first alternates from round to round: the order matters (in A/A runs on host32 with a third of a second
between the starts, the one started second cost up to 5 % less; with half a second the A-first rounds of an A/B run
still came out 3-8 % lower than the B-first ones), so only the mean over an even number of rounds counts. CPU is each
process's CPU-time clock over the window, per evaluation (``numawatch_evaluations_total``); the figure is B / A per
round and the mean of the rounds. An A/A run (both sides the same code) shows how far the mean strays when nothing
differs: on host32, 2026-12-06, 0.996-1.048 per round, mean 1.02 (a third of a second apart).

A bench, not a test: the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
from interleaved_side_by_side import PROMETHEUS_ACCEPT, Scraper, _evaluations, _wait_for  # noqa: E402
from run import proc_cpu_seconds  # noqa: E402

STAGGER = 0.5  # seconds between the two starts: a half pace, so each side evaluates while the other is scraped
PACE = 1.0


@dataclass(frozen=True)
class Side:
    name: str  # "A" or "B"
    pythonpath: str  # the exporter/ directory of the version
    tree: str  # its own copy of the host tree
    port: int


def scrape_plan(started: dict[str, float], end: float, pace: float = PACE) -> list[tuple[float, str]]:
    """When to scrape each side up to ``end``: half a pace after each of its evaluations starts (``started``: when
    each side's serve was started, monotonic seconds; it evaluates at once, then every pace), in time order."""
    plan = []
    for name, start in started.items():
        at = start + pace / 2
        while at <= end:
            plan.append((at, name))
            at += pace
    return sorted(plan)


def first_sides(sides: tuple[Side, Side], round_number: int) -> tuple[Side, Side]:
    """The start order of a round: A first in odd rounds, B first in even ones."""
    return sides if round_number % 2 == 1 else (sides[1], sides[0])


def one_round(python: str, sides: tuple[Side, Side], window: float, warmup: float) -> dict[str, float]:
    """CPU seconds per evaluation of each side over one window, both started afresh in the given order."""
    processes: dict[str, subprocess.Popen[bytes]] = {}
    started: dict[str, float] = {}
    scrapers: dict[str, Scraper] = {}
    try:
        for side in sides:
            env = {**os.environ, "PYTHONPATH": side.pythonpath}
            started[side.name] = time.monotonic()
            processes[side.name] = subprocess.Popen(
                [python, "-m", "numawatch", "--log-level", "error", "serve", "--host-root", side.tree, "--interval",
                 str(PACE), "--listen", f"127.0.0.1:{side.port}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(STAGGER)
        for side in sides:
            _wait_for(f"http://127.0.0.1:{side.port}/metrics")
        time.sleep(warmup)
        headers = {"Accept-Encoding": "gzip", "Accept": PROMETHEUS_ACCEPT}
        scrapers = {side.name: Scraper(side.port, headers) for side in sides}
        for scraper in scrapers.values():
            scraper.get()  # the connection is made before the window, as a Prometheus scraping for a while has it
        urls = {side.name: f"http://127.0.0.1:{side.port}/metrics" for side in sides}
        first = {name: _evaluations(url) for name, url in urls.items()}
        cpu = {name: proc_cpu_seconds(process.pid) for name, process in processes.items()}
        end = time.monotonic() + window
        for at, name in scrape_plan(started, end):
            if at < time.monotonic():
                continue  # before the window
            time.sleep(max(0.0, at - time.monotonic()))
            scrapers[name].get()
        time.sleep(max(0.0, end - time.monotonic()))
        spent = {name: proc_cpu_seconds(process.pid) - cpu[name] for name, process in processes.items()}
        evaluations = {name: _evaluations(url) - first[name] for name, url in urls.items()}
        return {name: spent[name] / max(evaluations[name], 1.0) for name in spent}
    finally:
        for scraper in scrapers.values():
            scraper.close()
        for process in processes.values():
            process.terminate()
            process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, metavar="DIR", help="host tree (bench/shapes.py's or generate_host)")
    parser.add_argument("--a", required=True, metavar="EXPORTER_DIR", help="PYTHONPATH of version A (its exporter/)")
    parser.add_argument("--b", required=True, metavar="EXPORTER_DIR", help="PYTHONPATH of version B")
    parser.add_argument("--python", default=sys.executable, help="the interpreter both run on")
    parser.add_argument("--rounds", type=int, default=6, help="an even number: each side starts first as often")
    parser.add_argument("--window", type=float, default=40.0, help="seconds measured per round")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds both run before the window")
    parser.add_argument("--scratch", default="/dev/shm", help="where the two copies of the tree go (removed after)")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="numawatch-ab-", dir=args.scratch))
    try:
        trees = []
        for name in ("A", "B"):
            copy = scratch / name
            shutil.copytree(args.host, copy, symlinks=True)
            trees.append(str(copy))
        sides = (Side("A", str(Path(args.a).resolve()), trees[0], 19931),
                 Side("B", str(Path(args.b).resolve()), trees[1], 19932))  # fmt: skip
        print(f"host {args.host}; A {sides[0].pythonpath}; B {sides[1].pythonpath}; {args.rounds} rounds of "
              f"{args.window:g} s; load average {os.getloadavg()[0]:.2f}", flush=True)
        ratios = []
        for round_number in range(1, args.rounds + 1):
            order = first_sides(sides, round_number)
            cost = one_round(args.python, order, args.window, args.warmup)
            ratios.append(cost["B"] / cost["A"])
            print(f"round {round_number} ({order[0].name} first): A {cost['A'] * 1000:.2f} ms, "
                  f"B {cost['B'] * 1000:.2f} ms per evaluation, B/A {ratios[-1]:.3f}, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
        print(f"B/A: mean {statistics.fmean(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
