"""Profile numawatch evaluations on a host tree: where the CPU of ``serve``'s steady state (or one ``check``) goes.

    .venv/bin/python bench/generate_host.py --out /tmp/host384
    .venv/bin/python bench/profile_evaluation.py --host-root /tmp/host384                  # cProfile, top 30
    .venv/bin/python bench/profile_evaluation.py --host-root /tmp/host384 --pyinstrument   # call tree
    .venv/bin/python bench/profile_evaluation.py --host-root /tmp/host384 --memory         # tracemalloc peaks
    PROFILE_CALLEES='_join' .venv/bin/python bench/profile_evaluation.py --host-root ...
        # cProfile, and what the functions matching the expression called

What is profiled is what ``numawatch serve`` does per evaluation: ``HostReader.read()`` (warm: the fingerprinted
sources come from the cache after the first reading, and the stateful readers are staggered as in serve:
``--stagger K``, else serve's default), ``evaluate()``, serve's ``metrics.Renderer`` and the gzip of the body,
``--evaluations`` times; ``--cold`` profiles a fresh reader each time (what ``check`` does: it reads everything).
pyinstrument is optional (``.venv/bin/pip install pyinstrument``; not a project dependency); cProfile and
tracemalloc are in the standard library.

``--churn`` (``--stray F``) moves the tree's counters on before each evaluation (bench/churn.py, in place), so that
what serve reuses when its inputs did not change is not reused every time. cProfile is disabled around each
``advance()``, and its CPU is taken out of the per-evaluation figure; pyinstrument and tracemalloc cannot be paused,
so there the advances are in the profile (under ``Churn.advance``).
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import os
import pstats
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from numawatch import cli, metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.paths import Paths

_BENCH = str(Path(__file__).resolve().parent)
if _BENCH not in sys.path:  # run as a script it is there already; imported from elsewhere it may not be
    sys.path.insert(0, _BENCH)
import churn as bench_churn  # noqa: E402

Pause = Callable[[], AbstractContextManager[object]]  # what suspends profiling around an advance


def evaluation_loop(
    root: str, evaluations: int, *, cold: bool, stagger: int | None = None, churn: bench_churn.Churn | None = None
) -> Callable[[Pause | None], None]:
    """A function running ``evaluations`` evaluations the way serve (or, with ``cold``, check) does; with ``churn``,
    ``churn.advance()`` before each, inside the ``pause`` it is given (what suspends the profiler, if it can be)."""
    paths = Paths.from_root(root)
    # serve's reader; code from before staggered readings existed (through PYTHONPATH) gets a plain one.
    share = stagger if stagger is not None else getattr(cli, "DEFAULT_STAGGER", 1)
    reader = HostReader(paths, **({"stagger": share} if share != 1 else {}))
    reader.read()
    stats = metrics.EvaluationStats()
    # serve's renderer (reuses unchanged rows' lines); check, and code from before it existed, render from scratch.
    render = metrics.Renderer().render if hasattr(metrics, "Renderer") and not cold else metrics.render

    def loop(pause: Pause | None = None) -> None:
        for _ in range(evaluations):
            if churn is not None:
                with (pause or nullcontext)():
                    churn.advance()
            host = (HostReader(paths) if cold else reader).read()
            evaluation = evaluate(host, REFERENCE)
            gzip.compress(render(evaluation, stats), compresslevel=1)

    return loop


def profile_cprofile(loop: Callable[[Pause | None], None], evaluations: int, top: int) -> str:
    profiler = cProfile.Profile()
    paused = [0.0]  # CPU seconds spent with the profiler off (advancing the churn)

    @contextmanager
    def pause() -> Iterator[None]:
        profiler.disable()
        started = time.process_time()
        try:
            yield
        finally:
            paused[0] += time.process_time() - started
            profiler.enable()

    start = time.process_time()
    profiler.runcall(loop, pause)
    cpu = time.process_time() - start - paused[0]
    out = io.StringIO()
    out.write(f"{evaluations} evaluations, {cpu / evaluations * 1000:.1f} ms CPU each under cProfile")
    if paused[0]:
        out.write(f" (counters moved before each, {paused[0] / evaluations * 1000:.1f} ms CPU each, not profiled)")
    out.write("\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    callees = os.environ.get("PROFILE_CALLEES")
    if callees:  # the callees of the functions named (a regular expression), for a closer look
        stats.print_callees(callees)
    return out.getvalue()


def profile_pyinstrument(loop: Callable[[Pause | None], None]) -> str:
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise SystemExit("pyinstrument is not installed: .venv/bin/pip install pyinstrument") from None
    profiler = Profiler(interval=0.0005)
    profiler.start()
    loop()
    profiler.stop()
    return profiler.output_text(unicode=False, color=False, show_all=False)


def profile_memory(loop: Callable[[Pause | None], None], top: int) -> str:
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
    bench_churn.add_churn_arguments(parser, "before each evaluation")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--pyinstrument", action="store_true", help="a pyinstrument call tree instead of cProfile")
    mode.add_argument("--memory", action="store_true", help="tracemalloc: the lines holding the most memory")
    args = parser.parse_args(argv)
    if args.stray and not args.churn:
        parser.error("--stray needs --churn")
    churn = (
        bench_churn.Churn(args.host_root, stray=args.stray, pods=args.pods, pinned_every=args.pinned_every)
        if args.churn
        else None
    )
    loop = evaluation_loop(args.host_root, args.evaluations, cold=args.cold, stagger=args.stagger, churn=churn)
    if churn is not None and (args.pyinstrument or args.memory):
        print("note: --churn's advances cannot be left out of this profile: they are in it, under Churn.advance",
              file=sys.stderr)  # fmt: skip
    if args.pyinstrument:
        sys.stdout.write(profile_pyinstrument(loop))
    elif args.memory:
        sys.stdout.write(profile_memory(loop, args.top))
    else:
        sys.stdout.write(profile_cprofile(loop, args.evaluations, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
