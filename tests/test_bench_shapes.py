"""The benchmark trees (bench/generate_host.py SHAPES) have the shapes they claim, hwloc reads each one's
topology as numawatch does, pods churn as bench/pod_churn.py says, and bench/shapes.py's arithmetic is right.

Every tree here is a small version of its shape (32-64 CPUs, a dozen pods) with the shape's layout: the benchmark
runs the same generator at full size. Nothing here is timed.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from bench_modules import load_bench
from hwloc_oracle import LSTOPO, compare, lstopo_available, readings, summary
from numawatch.checks import evaluate
from numawatch.host import read_host
from numawatch.intent import REFERENCE
from numawatch.model.interrupts import KIND_DEVICE
from numawatch.paths import Paths
from numawatch.sources.kubelet_state import parse_cpu_manager_state, parse_memory_manager_state

shapes = load_bench("bench_shapes", "shapes.py")
gen, run = shapes.gen, shapes.bench_run  # the modules shapes.py itself uses (bench/ is on sys.path from here on)
pod_churn = load_bench("bench_pod_churn", "pod_churn.py")
churn = load_bench("bench_churn", "churn.py")

# A small size per shape, the layout kept: 64 CPUs where the shape has four nodes per socket (4 cores each).
SMALL_SIZES = {"cpus": 32, "gpus": 4, "pods": 14, "irqs": 60, "processes": 200}
SMALL_SNC_SIZES = {"cpus": 64, "gpus": 4, "pods": 14, "irqs": 60, "processes": 250}
TREE_SOURCES = ("topology", "cgroups", "names", "kubelet_config", "kubelet_state", "gpus_sysfs", "kernel", "numastat",
                "interrupts", "irqs", "irqbalance")  # fmt: skip


def small(name: str, **overrides: object):
    spec = gen.SHAPES[name].spec
    sizes = SMALL_SNC_SIZES if spec.nodes_per_socket > 1 else SMALL_SIZES
    return replace(spec, **(sizes | overrides))


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """Every shape at small size, drifted (as benchmarked), with numawatch's reading of it."""
    built = {}
    for name in gen.SHAPES:
        spec = small(name)
        found = gen.generate(tmp_path_factory.mktemp(name) / "root", spec)
        built[name] = (spec, found, read_host(Paths.from_root(found.root)))
    return built


# --------------------------------------------------------------------------------------------------- the table
def test_the_full_size_shapes_are_the_ones_the_issue_names():
    a, b, c, d = (gen.SHAPES[name].spec for name in ("a192", "b384", "c768", "d384churn"))
    assert (a.cpus, a.pods, a.processes) == (192, 110, 1500)
    assert (b.cpus, b.pods, b.processes, b.irqs, b.gpus) == (384, 300, 5000, 2000, 8)
    assert (c.cpus, c.sockets, c.cpus // (c.sockets * 2), c.nodes_per_socket, c.gpus, c.pods) == (768, 2, 192, 4, 8,
                                                                                                  110)  # fmt: skip
    assert replace(d, seed=b.seed) == b and gen.SHAPES["d384churn"].churn
    assert gen.SHAPES["host32"].spec.cpus == 32


def test_the_layouts_vary_across_the_shapes():
    specs = [shape.spec for shape in gen.SHAPES.values()]
    assert {spec.numbering for spec in specs} == set(gen.NUMBERINGS)
    assert {spec.cgroup_version for spec in specs} == {1, 2}
    assert {spec.cgroup_driver for spec in specs} == set(gen.CGROUP_DRIVERS)
    assert {spec.irqbalance for spec in specs} == set(gen.IRQBALANCE_MODES)
    assert {spec.socket_table for spec in specs} == {True, False}
    assert {spec.managed_modes for spec in specs} == set(gen.MANAGED_MODES)
    assert {spec.nodes_per_socket for spec in specs} == {1, 4}
    assert all(spec.guaranteed >= 0.3 for spec in specs)  # a production share, not only the GPU pods


def test_the_default_spec_is_unchanged():
    spec = gen.HostSpec.scaled(384)
    assert (spec.numbering, spec.cgroup_version, spec.cgroup_driver, spec.nodes_per_socket) == (
        "interleaved", 2, "systemd", 1)  # fmt: skip
    assert (spec.guaranteed, spec.irqbalance, spec.socket_table, spec.managed_modes) == (0.0, "none", True,
                                                                                         "read-only")  # fmt: skip


# --------------------------------------------------------------------------------------------------- the trees
@pytest.mark.parametrize("name", list(gen.SHAPES))
@pytest.mark.slow
def test_every_tree_source_reads_each_shape(trees, name):
    _spec, _found, host = trees[name]
    down = {source: host.statuses[source].reason for source in TREE_SOURCES if not host.statuses[source].up}
    assert down == {}


@pytest.mark.parametrize("name", list(gen.SHAPES))
def test_each_shape_has_its_cpus_nodes_and_numbering(trees, name):
    spec, found, host = trees[name]
    topology = host.topology
    assert len(topology.online) == found.online_cpus == spec.cpus
    assert len(topology.node_ids) == found.numa_nodes == spec.sockets * spec.nodes_per_socket
    assert {cpu.socket for cpu in topology.cpus.values()} == set(range(spec.sockets))
    per_socket: dict[int, set[int]] = {}
    for node in topology.nodes.values():
        sockets = {topology.cpus[cpu].socket for cpu in node.cpus}
        assert len(sockets) == 1, f"node {node.id} spans sockets {sockets}"
        per_socket.setdefault(sockets.pop(), set()).add(node.id)
    assert all(len(nodes) == spec.nodes_per_socket for nodes in per_socket.values())
    sibling = min(topology.cpus[0].siblings - {0})
    assert sibling == (1 if spec.numbering == "packed" else spec.cpus // 2)
    housekeeping = topology.online - topology.isolated
    assert all(node.cpus & housekeeping for node in topology.nodes.values())  # every node keeps housekeeping CPUs


@pytest.mark.parametrize("name", list(gen.SHAPES))
def test_each_shape_has_its_pods_containers_processes_and_irqs(trees, name):
    spec, found, host = trees[name]
    cgroups = host.cgroups
    assert (cgroups.version, cgroups.driver) == (spec.cgroup_version, spec.cgroup_driver)
    containers = [container for pod in cgroups.pods for container in pod.containers]
    assert len(cgroups.pods) == found.pods == spec.pods
    assert len(containers) == found.container_cgroups
    guaranteed = sum(pod.qos == "guaranteed" for pod in cgroups.pods)
    assert guaranteed == found.qos["guaranteed"] >= round(spec.pods * spec.guaranteed)
    proc = Path(found.root) / "proc"
    assert sum(entry.isdigit() for entry in os.listdir(proc)) == found.processes == spec.processes
    rows = [row for row in host.get("interrupts").rows if row.kind == KIND_DEVICE]
    assert len(rows) == found.irqs == spec.irqs
    state = host.kubelet_state.cpu
    assert len(frozenset().union(*(c for pod in state.entries.values() for c in pod.values()))) == found.exclusive_cpus


def test_guaranteed_pods_beyond_the_gpu_ones_are_pinned_or_on_the_pool_with_their_memory_bound(tmp_path):
    found = gen.generate(tmp_path / "root", small("b384", pods=40, processes=400))
    host = read_host(Paths.from_root(found.root))
    state = host.kubelet_state
    gpu_pods = {entry.pod_uid for entry in state.devices.entries}
    extra = [pod for pod in host.cgroups.pods if pod.qos == "guaranteed" and pod.uid not in gpu_pods]
    pinned = [pod for pod in extra if pod.uid in state.cpu.entries]
    shared = [pod for pod in extra if pod.uid not in state.cpu.entries]
    assert pinned and shared
    for pod in extra:
        assert pod.uid in state.memory.entries  # the Memory Manager binds every Guaranteed pod
        for container in pod.containers:
            if not container.is_sandbox:
                assert len(container.mems_effective) == 1


@pytest.mark.parametrize("name", list(gen.SHAPES))
def test_irqbalance_runs_as_the_shape_says(trees, name):
    spec, found, _host = trees[name]
    root = Path(found.root)
    table = root / "proc/1/net/unix"
    assert table.exists() == spec.socket_table
    comms = {pid: (root / "proc" / pid / "comm").read_text() for pid in os.listdir(root / "proc") if pid.isdigit()}
    running = sorted(int(pid) for pid, comm in comms.items() if comm == "irqbalance\n")
    if spec.irqbalance == "none":
        assert running == [] and found.irqbalance_pid is None
        return
    assert running == [found.irqbalance_pid]
    cgroup = (root / f"proc/{found.irqbalance_pid}/cgroup").read_text()
    socket = f"@irqbalance{found.irqbalance_pid}.sock"
    if spec.irqbalance == "service":
        assert "/system.slice/irqbalance.service" in cgroup
        assert not spec.socket_table or socket in table.read_text()
    else:  # outside its unit, no socket
        assert "irqbalance.service" not in cgroup
        assert not spec.socket_table or socket not in table.read_text()
        assert not list(root.glob("sys/fs/cgroup/**/irqbalance.service"))


def test_numawatch_finds_irqbalance_through_its_socket_or_by_reading_every_comm(trees):
    for name in ("a192", "b384"):  # listed socket; no socket table (every comm read)
        _spec, found, host = trees[name]
        assert host.get("irqbalance").pids == (found.irqbalance_pid,), name


@pytest.mark.parametrize("name", list(gen.SHAPES))
def test_managed_irqs_show_the_mode_of_their_kernel(trees, name):
    spec, found, _host = trees[name]
    root = Path(found.root) / "proc/irq"
    modes = {}
    for directory in root.iterdir():
        if directory.is_dir():
            modes[int(directory.name)] = os.stat(directory / "smp_affinity").st_mode & 0o777
    read_only = [irq for irq, mode in modes.items() if mode == 0o444]
    assert found.managed_irqs > 0
    assert len(read_only) == (found.managed_irqs if spec.managed_modes == "read-only" else 0)


@pytest.mark.parametrize("name", list(gen.SHAPES))
@pytest.mark.slow
def test_each_layout_clean_has_no_findings(tmp_path, name):
    found = gen.generate(tmp_path / "clean", small(name, drift=False, pods=8, processes=160))
    findings = evaluate(read_host(Paths.from_root(found.root)), REFERENCE).findings
    assert [f"{f.check}: {f.message}" for f in findings] == []


@pytest.mark.parametrize("name", list(gen.SHAPES))
def test_planted_drift_fires_on_each_layout(trees, name):
    _spec, found, host = trees[name]
    fired = {finding.check for finding in evaluate(host, REFERENCE).findings}
    assert set(found.planted) <= fired


def test_a_spec_no_node_could_have_is_refused_before_anything_is_written(tmp_path):
    for overrides, message in (({"cpus": 40, "nodes_per_socket": 4}, "multiple of 16"),
                               ({"numbering": "scattered"}, "numbering must be one of"),
                               ({"irqbalance": "sometimes"}, "irqbalance must be one of"),
                               ({"guaranteed": 1.5}, "Guaranteed share")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            gen.generate(tmp_path / "refused", replace(gen.HostSpec(cpus=32), **overrides))
        assert not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_the_command_line_writes_a_shape_with_overrides(tmp_path, capsys):
    out = tmp_path / "cli"
    assert gen.main(["--shape", "c768", "--cpus", "64", "--gpus", "4", "--pods", "10", "--irqs", "60",
                     "--processes", "400", "--out", str(out)]) == 0  # fmt: skip
    written = json.loads(capsys.readouterr().out)
    assert written["spec"]["nodes_per_socket"] == 4 and written["numa_nodes"] == 8 and written["online_cpus"] == 64
    assert written["files"] > 0 and written["bytes_on_disk"] > 0


# --------------------------------------------------------------------------------------------------- hwloc
@pytest.mark.parametrize("name", list(gen.SHAPES))
def test_hwloc_reads_each_shapes_topology_as_numawatch_does_and_as_claimed(trees, name):
    if not lstopo_available():
        pytest.fail(f"{LSTOPO} is not installed: apt-get install hwloc (tests/install-and-run.sh does)")
    spec, found, _host = trees[name]
    ours, theirs = readings(Path(found.root))
    different = {field: summary(result) for field, result in compare(ours, theirs).items() if not result.equal}
    assert different == {}
    assert len(theirs.online) == spec.cpus
    assert len(theirs.nodes) == spec.sockets * spec.nodes_per_socket
    assert {cpu.socket for cpu in theirs.cpus.values()} == set(range(spec.sockets))
    cores = {(cpu.socket, cpu.core) for cpu in theirs.cpus.values()}
    assert len(cores) == spec.cpus // 2
    assert sorted(node for node in theirs.gpus.values()) == sorted(index * found.numa_nodes // spec.gpus
                                                                  for index in range(spec.gpus))  # fmt: skip


# --------------------------------------------------------------------------------------------------- pod churn
@pytest.fixture
def churned(tmp_path):
    found = gen.generate(tmp_path / "root", small("d384churn", pods=16, processes=220))
    return found


def _pod_uids(root: str) -> dict[str, str]:
    return {pod.uid: pod.qos for pod in read_host(Paths.from_root(root)).cgroups.pods}


@pytest.mark.slow
def test_pods_are_replaced_and_their_count_stays(churned):
    before = _pod_uids(churned.root)
    mover = pod_churn.PodChurn(churned.root, per_advance=1.5, pinned_every=0)
    steps = [mover.advance() for _ in range(4)]
    after = _pod_uids(churned.root)
    assert [step.removed for step in steps] == [1, 2, 1, 2]  # 1.5 a step: the fraction accumulates
    assert len(after) == len(before) and len(set(before) - set(after)) == 6
    assert all(after[uid] in ("burstable", "besteffort") for uid in set(after) - set(before))
    processes = sum(entry.isdigit() for entry in os.listdir(Path(churned.root) / "proc"))
    assert abs(processes - churned.processes) < 40


def test_a_mover_started_on_a_tree_another_mover_churned_keeps_the_pod_count(churned):
    # bench/shapes.py starts a mover per round on the same tree, each from the same seed: the second one's new
    # pods must not be written over the first one's (they were: every round after the first lost pods).
    before = _pod_uids(churned.root)
    first = pod_churn.PodChurn(churned.root, per_advance=1, pinned_every=2)
    for _ in range(4):
        first.advance()
    second = pod_churn.PodChurn(churned.root, per_advance=1, pinned_every=2)
    for _ in range(4):
        second.advance()
    after = _pod_uids(churned.root)
    assert len(after) == len(before)
    assert sorted(after.values()).count("guaranteed") == sorted(before.values()).count("guaranteed")


def test_a_removed_pod_leaves_nothing_behind_and_a_new_one_is_complete(churned):
    mover = pod_churn.PodChurn(churned.root, per_advance=1)
    gone = mover.movable[0]
    mover.advance()
    root = Path(churned.root)
    assert not (root / "sys/fs/cgroup" / gone.rel).exists()
    assert not list(root.glob(f"var/log/pods/*_{gone.uid}"))
    assert not any((root / "proc" / str(pid)).exists() for pid in gone.pids)
    new = mover.movable[-1]
    host = read_host(Paths.from_root(root))
    pod = host.cgroups.pod(new.uid)
    assert pod is not None and sum(c.is_sandbox for c in pod.containers) == 1
    assert {c.container_id for c in pod.containers} <= set(host.names.containers)
    for pid in new.pids:
        assert {"stat", "status", "comm", "cgroup", "schedstat"} <= set(os.listdir(root / "proc" / str(pid)))


def test_a_pinned_pod_swap_rewrites_both_checkpoints_with_valid_checksums(churned):
    root = Path(churned.root)
    cpu_path, memory_path = root / pod_churn.CPU_STATE, root / pod_churn.MEMORY_STATE
    cpu_before = parse_cpu_manager_state(cpu_path.read_text(), str(cpu_path))[0]
    mover = pod_churn.PodChurn(churned.root, per_advance=0, pinned_every=1)
    old = mover.pinned[0]
    assert mover.advance().pinned_swapped
    new = mover.pinned[-1]
    cpu_after = parse_cpu_manager_state(cpu_path.read_text(), str(cpu_path))[0]
    memory_after = parse_memory_manager_state(memory_path.read_text(), str(memory_path))[0]
    assert cpu_after.checksum_ok and memory_after.checksum_ok
    assert old.uid not in cpu_after.entries and cpu_after.entries[new.uid] == cpu_before.entries[old.uid]
    assert cpu_after.default_cpuset == cpu_before.default_cpuset
    assert new.uid in memory_after.entries and old.uid not in memory_after.entries
    host = read_host(Paths.from_root(root))
    assert host.cgroups.pod(new.uid).qos == "guaranteed"


def test_churning_pods_and_counters_keeps_the_planted_findings_and_nothing_else_new(churned):
    before = {f.check for f in evaluate(read_host(Paths.from_root(churned.root)), REFERENCE).findings}
    mover = churn.Churn(churned.root, seconds=1.0, pods=1.0, pinned_every=3)
    for _ in range(7):
        mover.advance()
    after = {f.check for f in evaluate(read_host(Paths.from_root(churned.root)), REFERENCE).findings}
    assert after == before and set(churned.planted) <= after
    assert all(os.path.exists(path) for path, _lines in mover.numa_stats.files)  # gone pods' files forgotten


@pytest.mark.slow
def test_the_churn_command_line_takes_pods(churned, capsys):
    assert churn.main(["--root", churned.root, "--every", "0", "--count", "2", "--pods", "1", "--pinned-every",
                       "2"]) == 0  # fmt: skip
    assert re.search(r"pods: \d+ Burstable/BestEffort pods, 1 replaced per advance", capsys.readouterr().out)


# --------------------------------------------------------------------------------------------------- arithmetic
def test_spread_gives_low_high_and_median():
    spread = shapes.Spread.of([0.050, 0.070, 0.060, 0.090])
    assert (spread.low, spread.median, spread.high, spread.count) == (0.050, 0.065, 0.090, 4)
    assert spread.text(1000, 1) == "50.0-90.0 (65.0)"
    assert shapes.Spread.of([0.0421]).text(1000, 1) == "42.1"
    assert shapes.Spread.of([]) is None


def test_ratios_are_taken_round_by_round():
    assert shapes.ratios([(0.06, 0.10), (0.09, 0.10), (0.05, 0.0)]) == pytest.approx([0.6, 0.9])


def test_a_target_is_met_only_by_the_worst_round():
    found = shapes.Spread.of(shapes.ratios([(0.05, 0.10), (0.07, 0.10)]))
    assert shapes.met(found.high, shapes.ratio_target("b384")) == "NOT met"
    assert shapes.met(found.high, shapes.ratio_target("host32")) == "met"
    assert shapes.met(0.6, 0.6) == "met" and shapes.met(None, 0.6) == "–"


def test_growth_is_relative_to_the_first_point():
    assert shapes.growth([(32, 0.01), (384, 0.04), (768, None)]) == [(32, 0.01, 1.0), (384, 0.04, 4.0),
                                                                     (768, None, None)]  # fmt: skip


def test_p99_is_the_nearest_rank():
    timings = [float(value) for value in range(1, 201)]  # 1..200 ms
    assert run.percentile(timings, 0.99) == 198.0
    assert run.percentile(timings, 0.50) == 100.0
    assert run.percentile([5.0], 0.99) == 5.0 and run.percentile([], 0.99) is None


def test_the_sweeps_hold_everything_but_their_variable():
    sweeps = shapes.sweep_specs()
    assert tuple(sweeps) == shapes.SWEEPS  # what --sweeps chooses from
    assert [x for _name, x, _spec in sweeps["cpus"]] == [32, 96, 192, 384, 768]
    assert {spec.pods for _name, _x, spec in sweeps["cpus"]} == {110}
    assert [spec.pods for _name, _x, spec in sweeps["pods"]] == [10, 30, 110, 300]
    assert {spec.cpus for _name, _x, spec in sweeps["pods"]} == {384}
    assert [spec.guaranteed for _name, _x, spec in sweeps["guaranteed"]] == [0.0, 0.3, 0.6, 0.9]
    b384 = gen.SHAPES["b384"].spec
    assert sweeps["pods"][-1][2] == b384 == sweeps["hiders"][-1][2]
    assert sweeps["hiders"][0][2] == gen.HostSpec.scaled(384)  # the default tree, then one difference at a time
    steps = [spec for _name, _label, spec in sweeps["hiders"]]
    for before, after in itertools.pairwise(steps):
        changed = {key for key, value in before.__dict__.items() if after.__dict__[key] != value}
        assert 1 <= len(changed) <= 2, changed  # irqbalance and its socket table go together
    for points in sweeps.values():
        if points is sweeps["hiders"]:
            continue
        for _name, _x, spec in points:
            assert (spec.numbering, spec.cgroup_version, spec.irqbalance) == (b384.numbering, b384.cgroup_version,
                                                                              b384.irqbalance)  # fmt: skip


def test_an_unknown_sweep_is_refused_before_anything_is_measured(tmp_path, capsys):
    with pytest.raises(SystemExit):
        shapes.main(["--work", str(tmp_path), "--sweeps", "cpus,gpus"])
    assert "unknown sweeps gpus" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_tree_is_kept_while_its_spec_is_the_same(tmp_path):
    spec = gen.HostSpec(cpus=16, gpus=2, pods=5, irqs=30, processes=60)
    first = shapes.ensure_tree(tmp_path, "t", spec)
    kept = shapes.ensure_tree(tmp_path, "t", spec)
    other = shapes.ensure_tree(tmp_path, "t", replace(spec, pods=6))
    fresh = shapes.ensure_tree(tmp_path, "t", replace(spec, pods=6), fresh=True)
    assert (first.generated_now, kept.generated_now, other.generated_now, fresh.generated_now) == (True, False, True,
                                                                                                  True)  # fmt: skip
    assert kept.summary == first.summary and other.summary["pods"] == 6


@pytest.mark.slow
def test_the_profile_names_every_source_check_and_phase(trees):
    from numawatch.checks import all_checks

    _spec, found, host = trees["host32"]
    parts = shapes.profile(found.root, 2, churn=False)  # it also checks its exposition is what serve renders
    assert {f"source: {name}" for name in host.statuses} <= set(parts)
    assert {f"check: {check.id}" for check in all_checks()} <= set(parts)
    assert {"read: all sources (CPU)", "checks: all (CPU)", "render: families + exposition (CPU)", "gzip",
            "exposition (write)", "total (CPU)"} <= set(parts)  # fmt: skip
    assert all(value >= 0 for value in parts.values())


def _run_document(serve: tuple[float, float], exporter: tuple[float, float], rss: float, p99: float) -> dict:
    rounds = [{"serve_seconds": a, "exporter_seconds": b, "evaluations": 60, "scrapes": 60, "load": 1.0}
              for a, b in zip(serve, exporter, strict=True)]  # fmt: skip
    return {
        "header": {"command": "python bench/shapes.py --work W", "load_before": "1.0", "load_after": "2.0",
                   "started": "t0", "ended": "t1", "machine": "m", "node_exporter": "1.5.0"},
        "shapes": [{"name": "b384", "description": "", "tree": {}, "churn": False, "rounds": rounds,
                    "serve": {"cpu_seconds_per_evaluation": serve[0], "vm_hwm_mb": rss, "series": 4240,
                              "scrape_many": {"p99_ms": p99}},
                    "profile": {"total (CPU)": serve[0] * 1000}}],
        "sweeps": [],
    }  # fmt: skip


def test_runs_merge_into_one_report_over_every_round():
    results, points, header = shapes.merge([_run_document((0.08, 0.09), (0.10, 0.10), 65.0, 7.0),
                                            _run_document((0.07, 0.12), (0.10, 0.10), 64.0, 9.0)])  # fmt: skip
    (b384,) = results
    spread = shapes.Spread.of(shapes.ratios(b384.pairs()))
    assert (spread.low, spread.median, spread.high, spread.count) == (pytest.approx(0.7), pytest.approx(0.85),
                                                                      pytest.approx(1.2), 4)  # fmt: skip
    assert b384.serve["vm_hwm_mb"] == 65.0 and b384.serve["scrape_many"]["p99_ms"] == 9.0  # the worst of each
    assert b384.serve["cpu_all"] == [0.08, 0.07]
    assert b384.profile["total (CPU)"] == 75.0  # the median of the runs' medians
    assert points == [] and header["load_before"] == "1.0, 1.0" and header["started"] == "t0"


def test_the_shape_without_sandbox_numa_stat_has_none_and_its_containers_have_theirs(trees):
    spec, found, host = trees["b384nosandboxnuma"]
    containers = [container for pod in host.cgroups.pods for container in pod.containers]

    assert not spec.sandbox_numa_stat and replace(spec, sandbox_numa_stat=True) == small("b384")
    assert {container.numa_bytes is None for container in containers if container.is_sandbox} == {True}
    assert all(container.numa_bytes is not None for container in containers if not container.is_sandbox)
    assert len([c for c in containers if c.is_sandbox]) == spec.pods
    assert len(list(Path(found.root, "sys/fs/cgroup").rglob("memory.numa_stat"))) == len(containers) - spec.pods


def test_the_12000_process_shape_has_no_irqbalance_and_no_socket_table(trees):
    full = gen.SHAPES["e384noirqbalance12k"].spec
    spec, found, host = trees["e384noirqbalance12k"]

    assert (full.processes, full.irqbalance, full.socket_table) == (12000, "none", False)
    assert found.processes == spec.processes and found.irqbalance_pid is None
    assert not Path(found.root, "proc/1/net/unix").exists()
    assert not host.get("irqbalance").running


def test_open_counts_counts_an_evaluations_opens_and_the_sandbox_shape_opens_no_more_than_b384(trees):
    open_counts = load_bench("bench_open_counts", "open_counts.py")
    sys.addaudithook(open_counts._audit)

    def totals(name: str) -> int:
        rows = open_counts.count(trees[name][1].root, evaluations=8, warm=2)
        assert len(rows) == 8 and all(row[0] > 0 and row[3] >= 0 for row in rows)
        return sum(row[0] for row in rows)

    # Without the sandboxes' memory.numa_stat the pods stay staggered: no more opens than with the files.
    assert totals("b384nosandboxnuma") <= totals("b384")
