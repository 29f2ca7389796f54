"""The shapes benchmark: every tree shape side by side with node_exporter, in one run (never a timed test).

    .venv/bin/python bench/shapes.py --work /var/tmp/numawatch-shapes                  # every shape and sweep
    .venv/bin/python bench/shapes.py --work DIR --shapes b384,d384churn --no-sweeps    # some shapes only
    .venv/bin/python bench/shapes.py --work DIR --profile-only                          # the per-phase profiles
    .venv/bin/python bench/shapes.py --merge run1.json run2.json                        # several runs as one report

The trees are generate_host.SHAPES (host32, a192, b384, c768, d384churn, and b384nosandboxnuma and
e384noirqbalance12k, which hold what once removed a saving: what each models and how their layouts differ is in that
table; bench/open_counts.py counts the files an evaluation opens on one) and four sweeps on the layout of b384: 32
to 768 CPUs at 110 pods, 10 to 300 pods at 384 CPUs, the share of Guaranteed pods from none but the GPU and
tokeniser pods to nine in ten, and the default tree turned into b384 one difference at a time (what hid the costs
measured). Each tree is generated into ``--work`` once and reused while its recorded spec (``<name>.json``
beside it) is the same; a tree whose pods and counters move (d384churn) is generated again for every run, since the
churn changes it in place.

Per shape:

1. **Side by side, paced like against like** (bench/interleaved_side_by_side.py): ``numawatch serve --interval 1``
   and node_exporter 1.5 (Debian's ``prometheus-node-exporter``, ``--collector.disable-defaults`` with exactly the
   cpu, cpufreq, meminfo_numa and vmstat collectors, gzip asked for), both started afresh for each of ``--rounds``
   rounds, both running over the same ``--window`` seconds: serve evaluates every second, node_exporter is scraped
   every second half a second after each evaluation starts, and serve right after it, each over one kept-alive
   connection as Prometheus scrapes. CPU seconds (each process's CPU-time clock, to the nanosecond) over the
   window per evaluation (serve's ``numawatch_evaluations_total`` delta) and per scrape. The ratio is taken per
   round, and the report gives every round's range. For d384churn, bench/churn.py moves the counters and replaces
   pods every second in a child process meanwhile (its CPU counts for neither). Before each round every file of the
   tree is read once (``warm_tree``; ``--cold-tree`` leaves it out): on a node these files are made by the kernel
   when read and are never paged in, while on this VM a tree page left idle is taken back by the host and faulted
   in again on its next read, which costs a reader that reads a rotating share of the files each second (serve)
   far more than one that reads every file every second (node_exporter), whose pages stay resident.
2. **serve alone** (bench/run.py ``measure_serve``): peak RSS (``VmHWM``), the series of one scrape, and scrape
   latency with 1 and ``--concurrency`` concurrent scrapers (aiohttp, keep-alive, gzip; ``--requests`` requests in
   all per run, evaluations still running every second); p99 is the nearest-rank percentile.
3. **Where an evaluation goes**, in this process, a warm ``HostReader`` as serve keeps it (staggered as serve's
   default), ``--evaluations`` times (for d384churn with one churn advance before each, outside the timed part):
   each source's CPU time (its wall time too, in the JSON), each check's (run one by one, in the registry's order,
   memos shared as in ``evaluate``; a check's median is over the evaluations that judged it: one whose verdict was
   reused costs nothing and is not counted), each group of metric families, the exposition writer and the gzip (as
   serve makes it: ``gzipbody.SegmentedGzip``, deflating only the parts that changed), medians in milliseconds. An
   evaluation here follows the previous one at once: after an idle second, as serve runs, the same work costs more on
   this VM (docs/performance.md), which is why the verdict comes from 1.

Per sweep point: 1 with ``--sweep-rounds`` rounds of ``--sweep-window`` seconds, and 3.

Targets (for the engine to meet): ratio at most 0.6 on every shape (1.0 on the 32-CPU host), peak RSS at
most 80 MB, p99 at most 100 ms with 20 concurrent scrapers. The report says per shape whether today's code meets
them; a shape is met only when every round is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import churn as bench_churn  # noqa: E402
import generate_host as gen  # noqa: E402
import run as bench_run  # noqa: E402
from interleaved_side_by_side import interleaved  # noqa: E402
from paced_side_by_side import SMALL  # noqa: E402  (node_exporter's small configuration: the four collectors)

TARGET_RATIO = 0.6
TARGET_RATIO_SMALL_HOST = 1.0  # the 32-CPU host, where node_exporter's scrape is itself small
SMALL_HOST = "host32"
TARGET_RSS_MB = 80.0
TARGET_P99_MS = 100.0
# d384churn: one Burstable/BestEffort pod replaced per advance (one a second), a pinned one every 30 advances.
CHURN_PODS_PER_ADVANCE = 1.0
CHURN_PINNED_EVERY = 30

CPU_SWEEP = (32, 96, 192, 384, 768)  # at SWEEP_PODS pods
SWEEP_PODS = 110
POD_SWEEP = (10, 30, 110, 300)  # at 384 CPUs
GUARANTEED_SWEEP = (0.0, 0.3, 0.6, 0.9)  # at 384 CPUs, 300 pods


# --------------------------------------------------------------------------------------------------- arithmetic
@dataclass(frozen=True)
class Spread:
    """The range of a few measurements of one figure: lowest, median, highest."""

    low: float
    median: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if not values:
            return None
        return cls(min(values), statistics.median(values), max(values), len(values))

    def text(self, scale: float = 1.0, digits: int = 1) -> str:
        """``12.3`` for one value, ``10.1-14.2 (12.3)`` (low-high (median)) for more."""
        low, median, high = (round(value * scale, digits) for value in (self.low, self.median, self.high))
        if self.count == 1 or low == high:
            return f"{median:.{digits}f}"
        return f"{low:.{digits}f}-{high:.{digits}f} ({median:.{digits}f})"


def ratios(pairs: Sequence[tuple[float, float]]) -> list[float]:
    """serve's CPU per evaluation over node_exporter's CPU per scrape, round by round (pairs measured together)."""
    return [serve / exporter for serve, exporter in pairs if exporter > 0]


def ratio_target(shape: str) -> float:
    return TARGET_RATIO_SMALL_HOST if shape == SMALL_HOST else TARGET_RATIO


def met(value: float | None, target: float) -> str:
    """"met" when the worst measurement is within the target, "NOT met" otherwise, "–" when there is none."""
    if value is None:
        return "–"
    return "met" if value <= target else "NOT met"


def growth(points: Sequence[tuple[object, float | None]]) -> list[tuple[object, float | None, float | None]]:
    """(x, value, value / the first point's value) for a sweep; the factor is None where either is unknown."""
    first = points[0][1] if points else None
    out = []
    for x, value in points:
        factor = value / first if value is not None and first else None
        out.append((x, value, factor))
    return out


# --------------------------------------------------------------------------------------------------- trees
@dataclass(frozen=True)
class Tree:
    """A generated tree in the work directory, and what the generator said about it."""

    name: str
    root: str
    spec: gen.HostSpec
    summary: dict[str, Any]
    generated_now: bool


def _stamp(work: Path, name: str) -> Path:
    return work / f"{name}.json"


def ensure_tree(work: Path, name: str, spec: gen.HostSpec, *, fresh: bool = False) -> Tree:
    """The tree ``name`` of ``spec`` under ``work``: generated when absent, when its stamp records another spec, or
    when ``fresh`` (a tree that gets churned); otherwise the one there, with the summary its generation recorded."""
    root = work / name
    stamp = _stamp(work, name)
    wanted = asdict(spec)
    if not fresh and root.is_dir() and stamp.is_file():
        recorded = json.loads(stamp.read_text())
        if recorded.get("spec") == wanted:
            return Tree(name, str(root), spec, recorded["summary"], False)
    if root.exists():
        shutil.rmtree(root)
    stamp.unlink(missing_ok=True)
    found = gen.generate(root, spec)
    summary = json.loads(json.dumps({key: value for key, value in asdict(found).items() if key != "spec"}))
    stamp.write_text(json.dumps({"spec": wanted, "summary": summary}, indent=1) + "\n")
    return Tree(name, str(root), spec, summary, True)


SWEEPS = ("cpus", "pods", "guaranteed", "hiders")  # sweep_specs' keys, in its order


def sweep_specs() -> dict[str, list[tuple[str, object, gen.HostSpec]]]:
    """The sweeps' points: (tree name, x, spec), on b384's layout."""
    base = gen.SHAPES["b384"].spec
    cpus_points = []
    for cpus in CPU_SWEEP:
        scaled = gen.HostSpec.scaled(cpus)
        spec = replace(base, cpus=cpus, pods=SWEEP_PODS, gpus=scaled.gpus, irqs=min(gen.BASE_IRQS, scaled.irqs),
                       processes=scaled.processes)  # fmt: skip
        cpus_points.append((f"sweep-cpus{cpus}-pods{SWEEP_PODS}", cpus, spec))
    pod_points = [(f"sweep-cpus384-pods{pods}", pods, replace(base, pods=pods)) for pods in POD_SWEEP]
    guaranteed_points = [(f"sweep-guaranteed{round(share * 100)}", share, replace(base, guaranteed=share))
                         for share in GUARANTEED_SWEEP]  # fmt: skip
    # From the default tree to b384 one difference at a time: which of them hid the costs.
    unmodified = gen.HostSpec.scaled(gen.BASE_CPUS)
    steps = [("the default tree", unmodified)]
    steps.append(("+ irqbalance unseen, no socket table", replace(steps[-1][1], irqbalance=base.irqbalance,
                                                                  socket_table=base.socket_table)))  # fmt: skip
    steps.append((f"+ {base.guaranteed:.0%} of pods Guaranteed", replace(steps[-1][1], guaranteed=base.guaranteed)))
    steps.append(("+ a kernel before 6.12 (= b384)", replace(steps[-1][1], managed_modes=base.managed_modes)))
    assert steps[-1][1] == base
    hider_points = [(f"sweep-hiders{index}", label, spec) for index, (label, spec) in enumerate(steps)]
    return {"cpus": cpus_points, "pods": pod_points, "guaranteed": guaranteed_points, "hiders": hider_points}


# --------------------------------------------------------------------------------------------------- measuring
def node_exporter_binary(given: str | None) -> str:
    """node_exporter to measure: the one given, else Debian's installed one, else the one bench/run.py unpacks
    (``apt-get download`` + ``dpkg -x`` under /tmp/nodeexp; ``apt-get install prometheus-node-exporter`` works too)."""
    if given:
        return given
    installed = shutil.which("prometheus-node-exporter")
    if installed:
        return installed
    if not Path(bench_run.DEFAULT_NODE_EXPORTER).exists():
        bench_run.unpack_node_exporter()
    return bench_run.DEFAULT_NODE_EXPORTER


def node_exporter_version(binary: str) -> str:
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError as error:
        return f"unknown ({error})"
    text = (done.stdout + done.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def collectors_ok(binary: str, root: str) -> dict[str, bool]:
    """Whether each of node_exporter's four collectors succeeds on the tree (``node_scrape_collector_success``): a
    collector failing on a file the tree lacks would make its scrape cheap for the wrong reason."""
    port = bench_run.free_port()
    argv = [binary, f"--path.procfs={root}/proc", f"--path.sysfs={root}/sys", f"--path.rootfs={root}",
            f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
            *(f"--collector.{name}" for name in SMALL)]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
                    body = response.read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait()
    found = dict(re.findall(r'^node_scrape_collector_success\{collector="(\w+)"\} (\d)$', body, re.MULTILINE))
    return {name: found.get(name) == "1" for name in SMALL}


@contextlib.contextmanager
def moving(root: str, churn: bool) -> Iterator[None]:
    """With ``churn``, bench/churn.py advancing the tree every second (counters and pods) while the block runs."""
    with bench_run.churning(root, churn, pods=CHURN_PODS_PER_ADVANCE if churn else 0.0,
                            pinned_every=CHURN_PINNED_EVERY if churn else 0):  # fmt: skip
        yield


@dataclass
class Round:
    serve_seconds: float  # CPU per evaluation
    exporter_seconds: float  # CPU per scrape
    evaluations: int
    scrapes: int
    load: float  # 1-minute load average when the round ended


def warm_tree(root: str) -> tuple[int, float]:
    """Read every regular file under ``root`` once (links not followed), so that a round starts with the tree in the
    page cache, as a node's kernel-made files always are; (files read, seconds taken)."""
    started = time.monotonic()
    count = 0
    pending = [root]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    try:
                        with open(entry.path, "rb") as file:
                            while file.read(1 << 20):
                                pass
                        count += 1
                    except OSError:
                        continue  # a file churn replaced meanwhile, or one nobody may read: nothing to warm
    return count, time.monotonic() - started


def measure_pairs(numawatch: str, exporter: str, root: str, *, rounds: int, window: float, warmup: float,
                  churn: bool, warm: bool = True) -> list[Round]:  # fmt: skip
    found = []
    for _ in range(rounds):
        if warm:
            files, seconds = warm_tree(root)
            bench_run.log(f"    tree warmed: {files} files read in {seconds:.1f} s")
        try:
            with moving(root, churn):
                ports = (bench_run.free_port(), bench_run.free_port())
                serve, scrape, evaluations, scrapes = interleaved(numawatch, exporter, root, 1.0, window, warmup,
                                                                  ports=ports)  # fmt: skip
        except (OSError, RuntimeError, ZeroDivisionError) as error:
            # A scrape that timed out while another tenant held the VM: this round has no figure, the others stand.
            bench_run.log(f"    round failed, left out: {type(error).__name__}: {error}")
            continue
        found.append(Round(serve, scrape, evaluations, scrapes, os.getloadavg()[0]))
        bench_run.log(f"    round: serve {serve * 1000:.1f} ms/evaluation, node_exporter {scrape * 1000:.1f} "
                      f"ms/scrape, ratio {serve / scrape:.2f}, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    return found


class _TimedCheck:
    """A check run as ``evaluate`` runs it, its CPU time (findings included) added to ``spent``."""

    def __init__(self, check: Any, spent: dict[str, float]) -> None:
        self.check = check
        self.id = check.id
        self.spent = spent

    def __getattr__(self, name: str) -> Any:
        """The check's other attributes (its declared inputs, by which ``evaluate`` reuses its verdict) as its own."""
        return getattr(self.check, name)

    def run(self, host: Any, intent: Any) -> list[Any]:
        started = time.process_time()
        try:
            return list(self.check.run(host, intent))
        finally:
            self.spent[self.id] = self.spent.get(self.id, 0.0) + time.process_time() - started


def _metric_groups(evaluation: Any, stats: Any) -> list[tuple[str, Callable[[], list[Any]]]]:
    """The metric families in the groups ``metrics.families`` builds them in (one group when that changes)."""
    from numawatch import metrics

    try:
        from numawatch.metrics import capacity, core, gpu, platform
        from numawatch.metrics import host as host_metrics
    except ImportError:
        return [("all families", lambda: list(metrics.families(evaluation, stats)))]
    return [
        ("drift, health, inventory (core)", lambda: list(core.families(evaluation, stats))),
        ("host: kernel, isolation, IRQs", lambda: list(core.safely(host_metrics.families, evaluation))),
        ("GPUs", lambda: list(core.safely(gpu.families, evaluation))),
        ("capacity", lambda: list(core.safely(capacity.families, evaluation))),
        ("platform: idle states, PCIe paths, pods' use", lambda: list(core.safely(platform.families, evaluation))),
    ]


@contextlib.contextmanager
def source_cpu_meter(spent: dict[str, float]) -> Iterator[bool]:
    """Each source's CPU time (its read, when not answered from the fingerprint cache) added to ``spent`` while the
    block runs, by wrapping ``numawatch.host._read_one``, which HostReader calls for every read. Yields False (and
    measures nothing) when that function is gone: the profile then gives each source's wall time."""
    from numawatch import host as host_module

    original = getattr(host_module, "_read_one", None)
    if original is None:
        yield False
        return

    def timed(spec: Any, read: Any, paths: Any) -> Any:
        started = time.process_time()
        try:
            return original(spec, read, paths)
        finally:
            spent[spec.name] = spent.get(spec.name, 0.0) + time.process_time() - started

    host_module._read_one = timed  # type: ignore[attr-defined]
    try:
        yield True
    finally:
        host_module._read_one = original  # type: ignore[attr-defined]


def profile(root: str, evaluations: int, *, churn: bool) -> dict[str, Any]:
    """Medians in ms of every part of a warm evaluation (see the module docstring, 3)."""
    from numawatch import metrics
    from numawatch.checks import all_checks, evaluate
    from numawatch.intent import REFERENCE
    from numawatch.metrics import exposition, gzipbody

    mover = bench_churn.Churn(root, seconds=1.0, pods=CHURN_PODS_PER_ADVANCE, pinned_every=CHURN_PINNED_EVERY) \
        if churn else None  # fmt: skip
    reader = bench_run.serve_reader(root)
    reader.read()  # as serve's first evaluation: caches filled
    stats = metrics.EvaluationStats()
    lines = exposition.LineCache()
    packer = gzipbody.SegmentedGzip(1)
    reference = metrics.Renderer()
    parts: dict[str, list[float]] = {}
    checked = False

    def keep(name: str, seconds: float) -> None:
        parts.setdefault(name, []).append(seconds)

    for _ in range(evaluations):
        if mover is not None:
            mover.advance()
        spent: dict[str, float] = {}
        checks = [_TimedCheck(check, spent) for check in all_checks()]
        sources: dict[str, float] = {}
        with source_cpu_meter(sources) as metered:
            began = time.process_time()
            host = reader.read()
            read = time.process_time()
        evaluation = evaluate(host, REFERENCE, checks)  # type: ignore[arg-type]
        judged = time.process_time()
        stats.observe(judged - began, time.time())
        families: list[Any] = []
        for name, build in _metric_groups(evaluation, stats):
            started = time.process_time()
            families += build()
            keep(f"metrics: {name}", time.process_time() - started)
        started = time.process_time()
        segments = exposition.write_segments(families, lines)
        body = b"".join(segments)
        keep("exposition (write)", time.process_time() - started)
        started = time.process_time()
        packer.compress(segments, body)
        ended = time.process_time()
        keep("gzip", ended - started)
        if not checked:  # the parts add up to what serve renders (else the profile measures something else)
            checked = True
            if body != reference.render(evaluation, stats):
                raise RuntimeError("the profile's exposition differs from metrics.Renderer's: update bench/shapes.py")
        keep("read: all sources (CPU)", read - began)
        keep("checks: all (CPU)", judged - read)
        keep("render: families + exposition (CPU)", started - judged)
        keep("total (CPU)", ended - began)
        for status in host.statuses.values():
            # CPU where it was measured; a source answered from its fingerprint cache costs its (wall) lookup.
            cpu = sources.get(status.name) if metered else None
            keep(f"source: {status.name}", status.duration_seconds if cpu is None else cpu)
            keep(f"source wall: {status.name}", status.duration_seconds)
        for check_id, seconds in spent.items():
            keep(f"check: {check_id}", seconds)
    return {name: round(statistics.median(values) * 1000, 2) for name, values in parts.items()}


# --------------------------------------------------------------------------------------------------- results
@dataclass
class ShapeResult:
    name: str
    description: str
    tree: dict[str, Any]
    rounds: list[Round] = field(default_factory=list)
    serve: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, float] = field(default_factory=dict)
    churn: bool = False

    def pairs(self) -> list[tuple[float, float]]:
        return [(r.serve_seconds, r.exporter_seconds) for r in self.rounds]


@dataclass
class SweepPoint:
    sweep: str
    x: object
    tree: dict[str, Any]
    rounds: list[Round] = field(default_factory=list)
    profile: dict[str, float] = field(default_factory=dict)


def measure_shape(args: argparse.Namespace, numawatch: str, exporter: str, shape: gen.Shape) -> ShapeResult:
    bench_run.log(f"[{shape.name}] tree")
    tree = ensure_tree(Path(args.work), shape.name, shape.spec, fresh=shape.churn)
    summary = dict(tree.summary, root=tree.root, reused=not tree.generated_now)
    result = ShapeResult(shape.name, shape.description, summary, churn=shape.churn)
    if not args.profile_only:
        try:
            result.tree["node_exporter_collectors_ok"] = collectors_ok(exporter, tree.root)
        except OSError as error:
            result.tree["node_exporter_collectors_ok"] = {"unknown": False}
            bench_run.log(f"[{shape.name}] node_exporter's collectors unknown: {error}")
        if not all(result.tree["node_exporter_collectors_ok"].values()):
            bench_run.log(f"[{shape.name}] WARNING: node_exporter collectors failing: "
                          f"{result.tree['node_exporter_collectors_ok']}")  # fmt: skip
        bench_run.log(f"[{shape.name}] side by side: {args.rounds} x {args.window:g} s")
        result.rounds = measure_pairs(numawatch, exporter, tree.root, rounds=args.rounds, window=args.window,
                                      warmup=args.warmup, churn=shape.churn, warm=not args.cold_tree)  # fmt: skip
        bench_run.log(f"[{shape.name}] serve alone: RSS, series, latency with 1 and {args.concurrency} scrapers")
        try:
            serve = bench_run.measure_serve(numawatch, tree.root, warmup=2, evaluations=args.evaluations,
                                            requests=args.requests, concurrency=args.concurrency, stagger=None,
                                            churn=shape.churn, pods=CHURN_PODS_PER_ADVANCE if shape.churn else 0.0,
                                            pinned_every=CHURN_PINNED_EVERY if shape.churn else 0)  # fmt: skip
        except (OSError, RuntimeError) as error:
            bench_run.log(f"[{shape.name}] serve alone failed, left out: {type(error).__name__}: {error}")
        else:
            result.serve = {key: serve[key] for key in ("cpu_seconds_per_evaluation", "vm_hwm_mb", "series",
                                                        "body_kb", "body_gzip_kb", "scrape_1", "scrape_many",
                                                        "errors")}  # fmt: skip
    bench_run.log(f"[{shape.name}] profile: {args.evaluations} evaluations in-process")
    result.profile = profile(tree.root, args.evaluations, churn=shape.churn)
    return result


def measure_sweeps(args: argparse.Namespace, numawatch: str, exporter: str, shapes: Mapping[str, ShapeResult],
                   points: list[SweepPoint], measured: Callable[[], None] = lambda: None) -> None:  # fmt: skip
    """The sweeps ``args.sweeps`` names, each point appended to ``points`` as it is measured (then ``measured()``:
    a run cut short keeps the points it has)."""
    done: dict[str, SweepPoint] = {}
    for sweep, specs in sweep_specs().items():
        if sweep not in args.sweeps:
            continue
        for name, x, spec in specs:
            same_shape = next((result for shape_name, result in shapes.items()
                               if gen.SHAPES[shape_name].spec == spec and not gen.SHAPES[shape_name].churn
                               and result.rounds), None)  # fmt: skip
            if same_shape is not None:  # that shape's tree: its figures (more rounds) stand for the point
                points.append(SweepPoint(sweep, x, same_shape.tree, same_shape.rounds, same_shape.profile))
                continue
            if name in done:  # a point two sweeps share
                points.append(replace(done[name], sweep=sweep, x=x))
                continue
            bench_run.log(f"[sweep {sweep} {x}] tree, {args.sweep_rounds} x {args.sweep_window:g} s side by side, "
                          "profile")  # fmt: skip
            tree = ensure_tree(Path(args.work), name, spec)
            point = SweepPoint(sweep, x, dict(tree.summary, root=tree.root, reused=not tree.generated_now))
            point.rounds = measure_pairs(numawatch, exporter, tree.root, rounds=args.sweep_rounds,
                                         window=args.sweep_window, warmup=args.warmup, churn=False,
                                         warm=not args.cold_tree)  # fmt: skip
            point.profile = profile(tree.root, args.evaluations, churn=False)
            done[name] = point
            points.append(point)
            measured()


# --------------------------------------------------------------------------------------------------- report
def _ms(spread: Spread | None, digits: int = 1) -> str:
    return spread.text(1000, digits) if spread is not None else "–"


def _layout(spec: Mapping[str, Any]) -> str:
    nodes = spec["nodes_per_socket"]
    snc = f", SNC {nodes} nodes/socket" if nodes > 1 else ""
    return (f"{spec['numbering']}{snc}; cgroup v{spec['cgroup_version']} {spec['cgroup_driver']}; irqbalance "
            f"{spec['irqbalance']}, socket table {'yes' if spec['socket_table'] else 'no'}; managed IRQs "
            f"{spec['managed_modes']}")  # fmt: skip


def trees_table(results: Sequence[ShapeResult], specs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = [
        "| shape | CPUs (sockets x cores x SMT) | NUMA nodes | layout | pods (G/Bu/BE) | container cgroups "
        "| exclusive CPUs | processes | IRQs | /proc/interrupts | generated in | files | on disk |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        t, spec = r.tree, specs[r.name]
        qos = t.get("qos", {})
        cores = spec["cpus"] // (spec["sockets"] * 2)
        when = f"{t.get('seconds', 0):.1f} s" + (" (kept)" if t.get("reused") else "")
        lines.append(
            f"| {r.name} | {t['online_cpus']} ({spec['sockets']} x {cores} x 2) | {t.get('numa_nodes', '–')} "
            f"| {_layout(spec)} | {t['pods']} ({qos.get('guaranteed', 0)}/{qos.get('burstable', 0)}/"
            f"{qos.get('besteffort', 0)}) | {t['container_cgroups']} | {t.get('exclusive_cpus', '–')} "
            f"| {t['processes']} | {t['irqs']} | {t['interrupts_bytes'] / 1e6:.1f} MB | {when} "
            f"| {t.get('files', 0):,} | {t.get('bytes_on_disk', 0) / 1e6:.0f} MB |"
        )
    return lines


def side_by_side_table(results: Sequence[ShapeResult]) -> list[str]:
    lines = [
        "| shape | serve ms CPU / evaluation | node_exporter ms CPU / scrape | ratio (target) | serve alone ms "
        "| peak RSS MB | p99 ms, 20 scrapers | series | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        serve = Spread.of([x.serve_seconds for x in r.rounds])
        exporter = Spread.of([x.exporter_seconds for x in r.rounds])
        found = Spread.of(ratios(r.pairs()))
        target = ratio_target(r.name)
        ratio = f"{found.text(1, 2)} ({met(found.high, target)}, ≤ {target:g})" if found else "–"
        s = r.serve
        alone = _ms(Spread.of(s.get("cpu_all", [s["cpu_seconds_per_evaluation"]]))) if s else "–"
        rss = f"{s['vm_hwm_mb']:.1f} ({met(s['vm_hwm_mb'], TARGET_RSS_MB)})" if s else "–"
        p99 = s.get("scrape_many", {}).get("p99_ms") if s else None
        latency = f"{p99:.1f} ({met(p99, TARGET_P99_MS)})" if p99 is not None else "–"
        load = Spread.of([x.load for x in r.rounds])
        lines.append(f"| {r.name} | {_ms(serve)} | {_ms(exporter)} | {ratio} | {alone} | {rss} | {latency} "
                     f"| {s.get('series', '–') if s else '–'} | {load.text(1, 2) if load else '–'} |")  # fmt: skip
    return lines


def sweep_table(points: Sequence[SweepPoint], sweep: str, label: str) -> list[str]:
    """One sweep: serve's and node_exporter's CPU per evaluation or scrape, their growth from the first point, the
    ratio, and the in-process totals with the two sources the issue names."""
    chosen = [p for p in points if p.sweep == sweep]
    serve = [Spread.of([r.serve_seconds for r in p.rounds]) for p in chosen]
    exporter = [Spread.of([r.exporter_seconds for r in p.rounds]) for p in chosen]
    serve_growth = growth([(p.x, s.median if s else None) for p, s in zip(chosen, serve, strict=True)])
    exporter_growth = growth([(p.x, e.median if e else None) for p, e in zip(chosen, exporter, strict=True)])
    lines = [
        f"| {label} | serve ms CPU / evaluation | growth | node_exporter ms CPU / scrape | growth | ratio "
        "| in-process ms: total (read / checks / render) | cgroups ms | irqbalance ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for index, point in enumerate(chosen):
        found = Spread.of(ratios([(r.serve_seconds, r.exporter_seconds) for r in point.rounds]))
        prof = point.profile
        parts = " / ".join(f"{prof.get(key, 0):.1f}" for key in ("read: all sources (CPU)", "checks: all (CPU)",
                                                                 "render: families + exposition (CPU)"))  # fmt: skip
        lines.append(
            f"| {point.x} | {_ms(serve[index])} | {_factor(serve_growth[index][2])} | {_ms(exporter[index])} "
            f"| {_factor(exporter_growth[index][2])} | {found.text(1, 2) if found else '–'} "
            f"| {prof.get('total (CPU)', 0):.1f} ({parts}) | {prof.get('source: cgroups', 0):.1f} "
            f"| {prof.get('source: irqbalance', 0):.1f} |"
        )
    return lines


def _factor(value: float | None) -> str:
    return f"x{value:.1f}" if value is not None else "–"


def profile_table(results: Sequence[ShapeResult], floor_ms: float = 0.2) -> list[str]:
    """Every part above ``floor_ms`` on some shape, in the order sources, checks, metrics, totals."""
    names: list[str] = []
    for r in results:
        for name in r.profile:
            if name not in names:
                names.append(name)
    order = ("source: ", "source wall: ", "read:", "check: ", "checks:", "metrics: ", "exposition", "render:", "gzip",
             "total")  # fmt: skip
    names.sort(key=lambda name: next(i for i, prefix in enumerate(order) if name.startswith(prefix)))
    lines = ["| part (ms, median) | " + " | ".join(r.name for r in results) + " |",
             "|---|" + "---|" * len(results)]  # fmt: skip
    for name in names:
        if name.startswith("source wall: "):
            continue  # in the JSON: what a source took with the kernel's (here: the page cache's) share
        values = [r.profile.get(name) for r in results]
        if name.startswith(("source: ", "check: ", "metrics: ")) and max(v or 0 for v in values) < floor_ms:
            continue
        label = f"**{name}**" if name.startswith(("read:", "checks:", "render:", "total")) else name
        lines.append(f"| {label} | " + " | ".join("–" if v is None else f"{v:.2f}" for v in values) + " |")
    return lines


def markdown(results: Sequence[ShapeResult], points: Sequence[SweepPoint], header: Mapping[str, Any]) -> str:
    specs = {r.name: asdict(gen.SHAPES[r.name].spec) for r in results}
    lines = [
        f"Command: `{header['command']}`",
        "",
        f"Machine: {header['machine']}; node_exporter: {header['node_exporter']}. Load average (1, 5, 15 min): "
        f"{header['load_before']} before, {header['load_after']} after; {header['started']} to {header['ended']}.",
        "",
        "**Trees**",
        "",
        *trees_table(results, specs),
        "",
        "**Side by side** (serve `--interval 1` and node_exporter scraped once a second, in the same minutes; ranges "
        "over the rounds: low-high (median); serve alone: `bench/run.py`'s measurement, peak RSS is VmHWM):",
        "",
        *side_by_side_table(results),
    ]
    if points:
        for sweep, label, title in (
            ("cpus", f"CPUs ({SWEEP_PODS} pods)", "Growth with CPUs (layout of b384)"),
            ("pods", "pods (384 CPUs)", "Growth with pods (layout of b384)"),
            ("guaranteed", "Guaranteed share (384 CPUs, 300 pods)", "The share of Guaranteed pods (layout of b384)"),
            ("hiders", "tree (384 CPUs, 300 pods)", "From the default tree to b384, one difference at a time"),
        ):
            if any(p.sweep == sweep for p in points):
                lines += ["", f"**{title}**:", "", *sweep_table(points, sweep, label)]
    if any(r.profile for r in results):
        lines += ["", "**Where an evaluation goes** (in-process, warm, one evaluation right after another; CPU ms, "
                  "medians; a source answered from its fingerprint cache: the wall time of its lookup; a check: over "
                  "the evaluations that judged it, not those that reused its verdict):", "",
                  *profile_table(results)]  # fmt: skip
    return "\n".join(lines) + "\n"


def merge(documents: Sequence[Mapping[str, Any]]) -> tuple[list[ShapeResult], list[SweepPoint], dict[str, Any]]:
    """Several runs' JSON as one: every round of every run in the ranges, each profile part the median of the runs'
    medians, serve alone at its worst (highest RSS, highest p99) across runs, the headers' times and loads joined."""
    shapes: dict[str, ShapeResult] = {}
    points: dict[tuple[str, str], SweepPoint] = {}
    profiles: dict[str, list[dict[str, float]]] = {}
    point_profiles: dict[tuple[str, str], list[dict[str, float]]] = {}
    for document in documents:
        for item in document["shapes"]:
            rounds = [Round(**r) for r in item["rounds"]]
            found = shapes.get(item["name"])
            if found is None:
                found = shapes[item["name"]] = ShapeResult(item["name"], item["description"], item["tree"],
                                                           churn=item["churn"])  # fmt: skip
            found.rounds += rounds
            profiles.setdefault(item["name"], []).append(item["profile"])
            serve = item["serve"]
            if serve:
                seen = found.serve.get("cpu_all", [])
                if not found.serve or serve["vm_hwm_mb"] > found.serve["vm_hwm_mb"]:
                    found.serve = dict(serve, scrape_many=found.serve.get("scrape_many", serve["scrape_many"]))
                if serve["scrape_many"]["p99_ms"] >= found.serve["scrape_many"]["p99_ms"]:
                    found.serve["scrape_many"] = serve["scrape_many"]
                found.serve["cpu_all"] = [*seen, serve["cpu_seconds_per_evaluation"]]
        for item in document["sweeps"]:
            key = (item["sweep"], str(item["x"]))
            point = points.get(key)
            if point is None:
                point = points[key] = SweepPoint(item["sweep"], item["x"], item["tree"])
            point.rounds += [Round(**r) for r in item["rounds"]]
            point_profiles.setdefault(key, []).append(item["profile"])

    def medians(runs: list[dict[str, float]]) -> dict[str, float]:
        names = {name for run in runs for name in run}
        return {name: round(statistics.median(run[name] for run in runs if name in run), 2) for name in names}

    for name, runs in profiles.items():
        shapes[name].profile = medians(runs)
    for key, runs in point_profiles.items():
        points[key].profile = medians(runs)
    headers = [document["header"] for document in documents]
    header = dict(headers[-1])
    header["command"] = "; ".join(dict.fromkeys(h["command"] for h in headers))
    header["load_before"] = ", ".join(h["load_before"] for h in headers)
    header["load_after"] = ", ".join(h["load_after"] for h in headers)
    header["started"], header["ended"] = headers[0]["started"], headers[-1]["ended"]
    return list(shapes.values()), list(points.values()), header


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", help="where the trees are generated and kept between runs (required unless --merge)")
    parser.add_argument("--shapes", default=",".join(gen.SHAPES),
                        help=f"comma-separated shapes (default: all: {','.join(gen.SHAPES)})")
    parser.add_argument("--no-sweeps", action="store_true", help="measure the shapes only")
    parser.add_argument("--sweeps", default=",".join(SWEEPS),
                        help=f"comma-separated sweeps (default: all: {','.join(SWEEPS)})")  # fmt: skip
    parser.add_argument("--profile-only", action="store_true", help="only the in-process profiles (no serve, "
                        "no node_exporter, no sweeps)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="side-by-side rounds per shape (default: 3)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds per round (default: 60)")
    parser.add_argument("--sweep-window", type=float, default=40.0, help="seconds per sweep round (default: 40)")
    parser.add_argument("--sweep-rounds", type=int, default=2, help="side-by-side rounds per sweep point (default: 2)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds serve runs before a round (default: 10)")
    parser.add_argument("--cold-tree", action="store_true",
                        help="do not read the tree once before each side-by-side round (see the docstring)")
    parser.add_argument("--evaluations", type=int, default=10, help="evaluations profiled, and measured for serve "
                        "alone (default: 10)")  # fmt: skip
    parser.add_argument("--requests", type=int, default=200, help="scrapes per latency run (default: 200)")
    parser.add_argument("--concurrency", type=int, default=20, help="concurrent scrapers (default: 20)")
    parser.add_argument("--node-exporter", metavar="BINARY", help="node_exporter to compare with (default: Debian's "
                        "prometheus-node-exporter, installed or unpacked)")  # fmt: skip
    parser.add_argument("--json-out", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="measure nothing: report these runs' --json-out "
                        "files as one (every round of every run in the ranges)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.merge:
        results, points, header = merge([json.loads(Path(path).read_text()) for path in args.merge])
        print(markdown(results, points, header), end="")
        return 0
    if not args.work:
        parser.error("--work is required")
    names = [name.strip() for name in args.shapes.split(",") if name.strip()]
    unknown = [name for name in names if name not in gen.SHAPES]
    if unknown:
        parser.error(f"unknown shapes {', '.join(unknown)} (known: {', '.join(gen.SHAPES)})")
    args.sweeps = [name.strip() for name in args.sweeps.split(",") if name.strip()]
    unknown = [name for name in args.sweeps if name not in SWEEPS]
    if unknown:
        parser.error(f"unknown sweeps {', '.join(unknown)} (known: {', '.join(SWEEPS)})")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    numawatch = bench_run.numawatch_binary()
    exporter = node_exporter_binary(args.node_exporter)
    header: dict[str, Any] = {
        "command": " ".join(["python", "bench/shapes.py", *(argv if argv is not None else sys.argv[1:])]),
        "load_before": bench_run.load_average(),
        "started": time.strftime("%Y-%m-%d %H:%M"),
        "node_exporter": f"{node_exporter_version(exporter)} ({exporter})",
    }
    machine = bench_run.machine_description()
    header["machine"] = (f"{machine['cpus']} vCPU {machine['cpu_model']}, {machine['os']}, Linux {machine['kernel']}, "
                         f"Python {machine['python']}, numawatch at {machine['revision']}")  # fmt: skip
    results: dict[str, ShapeResult] = {}
    points: list[SweepPoint] = []

    def save() -> None:  # after every shape, so that a run cut short keeps what it measured
        if args.json_out:
            header.update(load_after=bench_run.load_average(), ended=time.strftime("%Y-%m-%d %H:%M"))
            document = {"header": header, "machine": machine, "shapes": [asdict(r) for r in results.values()],
                        "sweeps": [asdict(p) for p in points]}  # fmt: skip
            Path(args.json_out).write_text(json.dumps(document, indent=1, default=str) + "\n")

    for name in names:
        results[name] = measure_shape(args, numawatch, exporter, gen.SHAPES[name])
        save()
    if not (args.no_sweeps or args.profile_only):
        measure_sweeps(args, numawatch, exporter, results, points, save)
    header |= {"load_after": bench_run.load_average(), "ended": time.strftime("%Y-%m-%d %H:%M")}
    save()
    print(markdown(list(results.values()), points, header), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
