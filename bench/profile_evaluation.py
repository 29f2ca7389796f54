"""Profile numawatch evaluations on a host tree: where the CPU of ``serve``'s steady state (or one ``check``) goes.

    .venv/bin/python bench/generate_host.py --out /tmp/host384
    .venv/bin/python bench/profile_evaluation.py --host-root /tmp/host384                  # cProfile, top 30
    .venv/bin/python bench/profile_evaluation.py --host-root /tmp/host384 --pyinstrument   # call tree
    .venv/bin/python bench/profile_evaluation.py --host-root /tmp/host384 --memory         # tracemalloc peaks

What is profiled is what ``numawatch serve`` does per evaluation: ``HostReader.read()`` (warm: the fingerprinted
sources come from the cache after the first reading, and the stateful readers are staggered as in serve:
``--stagger K``, else serve's default), ``evaluate()``, ``metrics.render()`` and the gzip of the body,
``--evaluations`` times; ``--cold`` profiles a fresh reader each time (what ``check`` does: it reads everything).
pyinstrument is optional (``.venv/bin/pip install pyinstrument``; not a project dependency); cProfile and
tracemalloc are in the standard library.
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import pstats
import sys
import time
import tracemalloc
from collections.abc import Callable

from numawatch import cli, metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.paths import Paths


def evaluation_loop(root: str, evaluations: int, *, cold: bool, stagger: int | None = None) -> Callable[[], None]:
    """A function running ``evaluations`` evaluations the way serve (or, with ``cold``, check) does."""
    paths = Paths.from_root(root)
    # serve's reader; code from before staggered readings existed (through PYTHONPATH) gets a plain one.
    share = stagger if stagger is not None else getattr(cli, "DEFAULT_STAGGER", 1)
    reader = HostReader(paths, **({"stagger": share} if share != 1 else {}))
    reader.read()
    stats = metrics.EvaluationStats()

    def loop() -> None:
        for _ in range(evaluations):
            host = (HostReader(paths) if cold else reader).read()
            evaluation = evaluate(host, REFERENCE)
            gzip.compress(metrics.render(evaluation, stats), compresslevel=1)

    return loop


def profile_cprofile(loop: Callable[[], None], evaluations: int, top: int) -> str:
    profiler = cProfile.Profile()
    start = time.process_time()
    profiler.runcall(loop)
    cpu = time.process_time() - start
    out = io.StringIO()
    out.write(f"{evaluations} evaluations, {cpu / evaluations * 1000:.1f} ms CPU each under cProfile\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def profile_pyinstrument(loop: Callable[[], None]) -> str:
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise SystemExit("pyinstrument is not installed: .venv/bin/pip install pyinstrument") from None
    profiler = Profiler(interval=0.0005)
    profiler.start()
    loop()
    profiler.stop()
    return profiler.output_text(unicode=False, color=False, show_all=False)


def profile_memory(loop: Callable[[], None], top: int) -> str:
    tracemalloc.start(25)
    loop()
    current, peak = tracemalloc.get_traced_memory()
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    out = [f"traced Python memory: {current / 2**20:.1f} MiB now, {peak / 2**20:.1f} MiB peak during the loop"]
    out += [str(stat) for stat in snapshot.statistics("lineno")[:top]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-root", required=True, help="a host tree (bench/generate_host.py) or /")
    parser.add_argument("--evaluations", type=int, default=20, help="evaluations to profile (default: 20)")
    parser.add_argument("--cold", action="store_true", help="a fresh HostReader per evaluation, as check does")
    parser.add_argument("--stagger", type=int, default=None, metavar="K",
                        help="the warm reader's stagger (default: serve's; 1 reads everything every evaluation)")
    parser.add_argument("--top", type=int, default=30, help="rows of the cProfile tables (default: 30)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--pyinstrument", action="store_true", help="a pyinstrument call tree instead of cProfile")
    mode.add_argument("--memory", action="store_true", help="tracemalloc: the lines holding the most memory")
    args = parser.parse_args(argv)
    loop = evaluation_loop(args.host_root, args.evaluations, cold=args.cold, stagger=args.stagger)
    if args.pyinstrument:
        sys.stdout.write(profile_pyinstrument(loop))
    elif args.memory:
        sys.stdout.write(profile_memory(loop, args.top))
    else:
        sys.stdout.write(profile_cprofile(loop, args.evaluations, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
