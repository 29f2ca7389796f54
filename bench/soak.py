"""A memory soak of ``numawatch serve`` (a benchmark, never a timed test): RSS over time on the benchmark trees.

    /work/venv/bin/python bench/soak.py --work /var/tmp/numawatch-shapes --shapes b384,d384churn,host32 \\
        --minutes 30 --code . --json-out soak.json

For each shape, a real ``numawatch serve --interval 1`` (the flags bench/run.py gives it) runs on the shape's tree
under ``--work`` (made by bench/shapes.py), started by ``--python`` with ``PYTHONPATH`` set to ``--code``'s
``exporter/``, so the harness of one tree can soak the code of another (e.g. a ``git worktree`` of main). A scraper
fetches /metrics every ``--scrape-every`` seconds as Prometheus does (its Accept header, gzip); every
``--sample-every`` seconds ``VmRSS`` and ``VmHWM`` are read from /proc/<pid>/status. A shape whose tree churns
(generate_host.SHAPES' ``churn``, d384churn) is soaked on a copy under ``--scratch`` (the churn changes a tree in
place and runs for the whole soak, as bench/shapes.py churns it: counters moving, one pod replaced per second, a
pinned one every 30 s), so the shared tree stays as bench/shapes.py left it.

Several shapes soak at once, one serve each on its own port: RSS is not CPU-bound, but every serve takes CPU each
second, so on a small machine keep it to a few (the load average is recorded with every sample). The table gives RSS
at 30 s, 2, 5, 10, 20 and 30 minutes (the sample nearest each, of those the run reached) and the peak (``VmHWM``).

The soaked tree's ``exporter/`` is compiled to bytecode first (``python -m compileall``, its ``__pycache__``
directories), as ``pip install`` leaves numawatch in the image: serve then loads ``.pyc`` files rather than compiling
every module at start, which costs about 3 MB of resident memory for good (the compiler's peak leaves the
allocator's arenas bigger; this machine's environment sets ``PYTHONDONTWRITEBYTECODE``, so nothing is cached
otherwise). ``--no-compile`` soaks it as the runs before 2026-12-06 09:00 did.

``--serve-wrapper SCRIPT`` starts serve through a script (``--python SCRIPT serve ...``), e.g.
bench/tracemalloc_serve.py, which records allocations and writes their growth on SIGUSR1; ``--env KEY=VALUE`` sets
serve's environment (``MALLOC_ARENA_MAX=2``).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import generate_host as gen  # noqa: E402
import run as bench_run  # noqa: E402
from interleaved_side_by_side import PROMETHEUS_ACCEPT  # noqa: E402

# The points of the table, in seconds after serve started.
POINTS = (30, 120, 300, 600, 1200, 1800)
TARGET_RSS_MB = 80.0
# d384churn's churn, as bench/shapes.py drives it (CHURN_PODS_PER_ADVANCE, CHURN_PINNED_EVERY).
CHURN_PODS_PER_ADVANCE = 1.0
CHURN_PINNED_EVERY = 30


@dataclass(frozen=True)
class Sample:
    seconds: float  # since serve started
    rss_kb: int
    hwm_kb: int
    load: str  # /proc/loadavg's three figures


@dataclass
class Soak:
    shape: str
    root: str
    churn: bool
    port: int
    samples: list[Sample] = field(default_factory=list)
    scrapes: int = 0
    scrape_errors: list[str] = field(default_factory=list)
    evaluations: float | None = None  # numawatch_evaluations_total at the last scrape
    cpu_seconds: float | None = None  # serve's CPU-time clock at the last sample
    errors: int = 0  # tracebacks and error lines serve logged
    exit_code: int | None = None  # set when serve stopped before the soak ended


# --------------------------------------------------------------------------------------------------- pure parts
def status_kb(text: str, keys: Iterable[str] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """The ``kB`` figures of ``keys`` in a /proc/<pid>/status text (absent keys are left out)."""
    wanted = set(keys)
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in wanted:
            fields = rest.split()
            if len(fields) == 2 and fields[1] == "kB" and fields[0].isdigit():
                found[name] = int(fields[0])
    return found


def nearest(samples: Sequence[Sample], seconds: float, tolerance: float) -> Sample | None:
    """The sample nearest ``seconds`` after the start, if one lies within ``tolerance`` of it."""
    best = min(samples, key=lambda sample: abs(sample.seconds - seconds), default=None)
    if best is None or abs(best.seconds - seconds) > tolerance:
        return None
    return best


def summarise(samples: Sequence[Sample], points: Sequence[int] = POINTS, tolerance: float = 10.0) -> dict[str, Any]:
    """RSS in MB at each point the run reached (by the sample nearest it), the peak (the largest ``VmHWM``) and
    when RSS first reached within 1 MB of it, and whether the peak meets TARGET_RSS_MB."""
    at = {}
    for point in points:
        sample = nearest(samples, point, tolerance)
        if sample is not None:
            at[str(point)] = round(sample.rss_kb / 1024, 1)
    peak_kb = max((sample.hwm_kb for sample in samples), default=0)
    reached = next((sample.seconds for sample in samples if sample.rss_kb >= peak_kb - 1024), None)
    return {
        "rss_mb_at": at,
        "peak_mb": round(peak_kb / 1024, 1),
        "peak_reached_s": None if reached is None else round(reached),
        "meets_target": bool(samples) and peak_kb / 1024 <= TARGET_RSS_MB,
        "duration_s": round(samples[-1].seconds) if samples else 0,
    }


def cpu_ms_per_evaluation(cpu_seconds: float | None, evaluations: float | None) -> float | None:
    """serve's whole CPU (start, scrapes and gzip included) over its evaluations, in ms; None without both."""
    if cpu_seconds is None or not evaluations:
        return None
    return cpu_seconds * 1000 / evaluations


def _label(point: int) -> str:
    return f"{point} s" if point < 60 else f"{point // 60} min"


def table(summaries: Mapping[str, Mapping[str, Any]], points: Sequence[int] = POINTS) -> str:
    """A Markdown table: one row per shape, RSS at each point ("-" where the run did not reach it) and the peak."""
    head = "| shape | " + " | ".join(_label(p) for p in points) + " | peak (VmHWM) | ≤ 80 MB |"
    rule = "|---" * (len(points) + 3) + "|"
    rows = [head, rule]
    for shape, summary in summaries.items():
        at = summary["rss_mb_at"]
        cells = [f"{at[str(p)]:.1f}" if str(p) in at else "-" for p in points]
        verdict = "yes" if summary["meets_target"] else "**no**"
        rows.append(f"| {shape} | " + " | ".join(cells) + f" | {summary['peak_mb']:.1f} | {verdict} |")
    return "\n".join(rows)


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a mapping (a pair without ``=`` or with an empty key is refused)."""
    env = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


# --------------------------------------------------------------------------------------------------- running
def _scrape(soak: Soak) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{soak.port}/metrics",
                                     headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
    except OSError as error:
        soak.scrape_errors.append(f"{time.strftime('%H:%M:%S')} {error}")
        return
    soak.scrapes += 1
    soak.evaluations = bench_run.sample_value(body, "numawatch_evaluations_total")


def _read_status(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as handle:
        return status_kb(handle.read())


class _Serve(bench_run.Server):
    """bench/run.py's Server with an environment of its own (PYTHONPATH of the code soaked); stdout unread."""

    def __init__(self, argv: Sequence[str], port: int, env: Mapping[str, str]) -> None:
        super().__init__(argv, port)
        self.env = dict(env)

    def __enter__(self) -> _Serve:
        self.log = self.stack.enter_context(tempfile.TemporaryFile())
        self.process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=self.log, env=self.env)
        return self


def compile_tree(python: str, directory: Path) -> None:
    """Every module under ``directory`` compiled to ``__pycache__`` by ``python`` (its bytecode is the one serve
    will load), as ``pip install`` compiles an installed package."""
    subprocess.run([python, "-m", "compileall", "-q", str(directory)], check=True, stdout=subprocess.DEVNULL)


def run(args: argparse.Namespace) -> dict[str, Any]:
    code = Path(args.code).resolve()
    machine = bench_run.machine_description()  # now: its revision is the harness's as it starts
    if not (code / "exporter/numawatch").is_dir():
        raise SystemExit(f"bench/soak.py: --code {code} has no exporter/numawatch")
    env = {**os.environ, "PYTHONPATH": str(code / "exporter"), **parse_env(args.env)}
    if not args.no_compile:
        compile_tree(args.python, code / "exporter")
    work = Path(args.work)
    scratch = Path(args.scratch)
    with contextlib.ExitStack() as stack:
        soaks: list[tuple[Soak, _Serve]] = []
        for name in args.shapes.split(","):
            churn = gen.SHAPES[name].churn and not args.no_churn
            root = work / name
            if not (root.is_dir() and (work / f"{name}.json").is_file()):
                raise SystemExit(f"bench/soak.py: no tree {root} (make it with bench/shapes.py --shapes {name})")
            if churn:
                scratch.mkdir(parents=True, exist_ok=True)
                copy = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=scratch, prefix=f"{name}-")))
                shutil.copytree(root, copy / name, symlinks=True)
                root = copy / name
                stack.enter_context(bench_run.churning(str(root), True, pods=CHURN_PODS_PER_ADVANCE,
                                                       pinned_every=CHURN_PINNED_EVERY))  # fmt: skip
            port = bench_run.free_port()
            program = [args.python, args.serve_wrapper] if args.serve_wrapper else [args.python, "-m", "numawatch"]
            argv = [*program, "serve", "--host-root", str(root), "--interval", "1", "--web.listen-address",
                    f"127.0.0.1:{port}", "--log.level", "info"]  # fmt: skip
            soaks.append((Soak(name, str(root), churn, port), _Serve(argv, port, env)))
        # Every tree copied and every churn under way before the first serve starts: the clock is each serve's.
        for _soak, server in soaks:
            stack.enter_context(server)
        started = time.monotonic()
        began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        duration = args.minutes * 60
        next_sample = 0.0
        next_scrape = args.first_scrape
        while True:
            now = time.monotonic() - started
            if now > duration:
                break
            if now >= next_sample:
                for soak, server in soaks:
                    if soak.exit_code is not None:
                        continue
                    if server.process is not None and server.process.poll() is not None:
                        soak.exit_code = server.process.returncode
                        continue
                    kb = _read_status(server.pid)
                    soak.cpu_seconds = bench_run.proc_cpu_seconds(server.pid)
                    soak.samples.append(Sample(round(now, 1), kb.get("VmRSS", 0), kb.get("VmHWM", 0),
                                               bench_run.load_average()))  # fmt: skip
                if args.progress:
                    print(f"{now:7.0f}s " + " ".join(
                        f"{s.shape}={s.samples[-1].rss_kb / 1024:.1f}/{s.samples[-1].hwm_kb / 1024:.1f}"
                        for s, _ in soaks if s.samples) + f" load {bench_run.load_average()}", flush=True)  # fmt: skip
                next_sample += args.sample_every
            if now >= next_scrape:
                for soak, _server in soaks:
                    if soak.exit_code is None:
                        _scrape(soak)
                next_scrape += args.scrape_every
            time.sleep(max(0.0, min(next_sample, next_scrape) - (time.monotonic() - started)))
        for soak, server in soaks:
            soak.errors = bench_run.logged_errors(server.stderr(limit=1 << 24))
        ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    summaries = {soak.shape: summarise(soak.samples) for soak, _ in soaks}
    return {
        "code": str(code),
        "revision": bench_run.revision(code),
        "python": args.python,
        "env": parse_env(args.env),
        "serve_wrapper": args.serve_wrapper,
        "compiled": not args.no_compile,
        "machine": machine,
        "began": began,
        "ended": ended,
        "summaries": summaries,
        "soaks": [asdict(soak) for soak, _ in soaks],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/var/tmp/numawatch-shapes", help="where bench/shapes.py made the trees")
    parser.add_argument("--shapes", default="b384,d384churn,host32", help="comma-separated generate_host.SHAPES")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--code", default=str(BENCH.parent), help="the tree whose exporter/ is soaked")
    parser.add_argument("--python", default=sys.executable, help="the interpreter serve runs on")
    parser.add_argument("--scratch", default="/var/tmp/numawatch-soak", help="where churned trees are copied")
    parser.add_argument("--no-churn", action="store_true", help="soak a churn shape's tree without moving it")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--scrape-every", type=float, default=15.0, help="seconds between scrapes (Prometheus')")
    parser.add_argument("--first-scrape", type=float, default=5.0, help="seconds after start of the first scrape")
    parser.add_argument("--serve-wrapper", help="a script the interpreter runs instead of -m numawatch")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for serve's environment")
    parser.add_argument("--no-compile", action="store_true", help="leave the soaked tree uncompiled (serve compiles "
                        "every module as it imports it)")
    parser.add_argument("--progress", action="store_true", help="print each sample as it is taken")
    parser.add_argument("--json-out", help="write the samples and summaries here")
    args = parser.parse_args(argv)
    result = run(args)
    print(f"code {result['code']} at {result['revision']}{'' if result['compiled'] else ' (not compiled)'}, "
          f"{result['began']} to {result['ended']}, python {args.python}, env {result['env'] or 'as inherited'}")
    print(table(result["summaries"]))
    for soak in result["soaks"]:
        if soak["exit_code"] is not None or soak["errors"] or soak["scrape_errors"]:
            print(f"{soak['shape']}: exit {soak['exit_code']}, {soak['errors']} logged errors, "
                  f"{len(soak['scrape_errors'])} failed scrapes {soak['scrape_errors'][:3]}")  # fmt: skip
        loads = [float(sample["load"].split()[0]) for sample in soak["samples"]]
        per = cpu_ms_per_evaluation(soak["cpu_seconds"], soak["evaluations"])
        print(f"{soak['shape']}: {soak['scrapes']} scrapes, {soak['evaluations']} evaluations "
              f"({'-' if per is None else f'{per:.1f}'} ms CPU each, scrapes and start included), 1-minute load "
              f"{min(loads, default=0):.2f}-{max(loads, default=0):.2f}")  # fmt: skip
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
