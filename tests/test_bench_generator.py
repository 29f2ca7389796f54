"""bench/generate_host.py builds a node numawatch reads completely, with the counts it was asked for.

A small size (32 CPUs, 12 pods, 80 IRQs, 200 processes) keeps this fast; the benchmark runs the same code at 384.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from numawatch.checks import evaluate
from numawatch.host import read_host
from numawatch.intent import REFERENCE
from numawatch.model_host import KIND_DEVICE
from numawatch.paths import Paths

BENCH = Path(__file__).resolve().parent.parent / "bench" / "generate_host.py"


def _load_generator():
    spec = importlib.util.spec_from_file_location("bench_generate_host", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
SMALL = gen.HostSpec(cpus=32, gpus=4, pods=12, irqs=80, processes=200)


@pytest.fixture(scope="module")
def drifted(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-host")
    return gen.generate(root, SMALL)


@pytest.fixture(scope="module")
def drifted_host(drifted):
    return read_host(Paths.from_root(drifted.root))


# What a file tree can feed. Down by design: intersocket (no uncore PMUs, as on a VM) and the NVML-based sources
# (nvml, processes), which need a GPU driver.
TREE_SOURCES = ("topology", "cgroups", "names", "kubelet_config", "kubelet_state", "gpus_sysfs", "kernel", "numastat",
                "interrupts", "irqs", "irqbalance")  # fmt: skip


def test_every_source_a_file_tree_can_feed_reads_the_generated_host(drifted_host):
    down = {name: drifted_host.statuses[name].reason for name in TREE_SOURCES if not drifted_host.statuses[name].up}
    assert down == {}


def test_topology_has_the_requested_cpus_with_all_but_the_housekeeping_cores_isolated(drifted, drifted_host):
    topology = drifted_host.topology
    assert len(topology.online) == 32
    assert len(topology.isolated) == drifted.isolated_cpus == 28  # one housekeeping core (2 threads) per socket
    assert sorted(topology.node_ids) == [0, 1]


def test_cgroups_hold_every_pod_and_container_with_one_pause_sandbox_each(drifted, drifted_host):
    pods = drifted_host.cgroups.pods
    containers = [container for pod in pods for container in pod.containers]
    assert len(pods) == drifted.pods == 12
    assert len(containers) == drifted.container_cgroups
    assert sum(container.is_sandbox for container in containers) == 12
    assert all(1 <= len(pod.containers) - 1 <= 4 for pod in pods)


def test_runtime_bundles_name_every_container(drifted, drifted_host):
    names = drifted_host.names
    cgroup_ids = {c.container_id for pod in drifted_host.cgroups.pods for c in pod.containers}
    assert cgroup_ids <= set(names.containers)


def test_kubelet_state_pins_the_guaranteed_pods_and_assigns_every_gpu(drifted, drifted_host):
    state = drifted_host.kubelet_state
    assert state.cpu.policy_name == "static"
    pinned = sum(len(containers) for containers in state.cpu.entries.values())
    assert pinned == drifted.pinned_containers
    assigned = {device for entry in state.devices.entries for ids in entry.devices_per_numa.values() for device in ids}
    assert len(assigned) == 4


def test_only_the_nvidia_functions_are_gpus(drifted_host):
    gpus = drifted_host.gpus.gpus
    assert len(gpus) == 4  # the NICs and NVMe drives on the same bus are filtered out
    assert sorted(gpu.numa_node for gpu in gpus) == [0, 0, 1, 1]


def test_interrupts_and_irq_directories_cover_the_requested_irqs(drifted, drifted_host):
    rows = [row for row in drifted_host.get("interrupts").rows if row.kind == KIND_DEVICE]
    assert len(rows) == drifted.irqs == 80
    assert len(drifted_host.get("interrupts").cpus) == 32
    assert len(drifted_host.get("irqs").irqs) == 80


def test_proc_has_the_requested_processes_with_their_five_files(drifted):
    proc = Path(drifted.root) / "proc"
    pids = [entry for entry in os.listdir(proc) if entry.isdigit()]
    assert len(pids) == drifted.processes == 200
    for pid in pids:
        assert {"stat", "status", "comm", "cgroup", "schedstat"} <= set(os.listdir(proc / pid)), pid
        stat = (proc / pid / "stat").read_text()
        assert stat.startswith(f"{pid} (") and len(stat.rsplit(")", 1)[1].split()) == 50


def test_planted_drift_fires_its_checks(drifted, drifted_host):
    fired = {finding.check for finding in evaluate(drifted_host, REFERENCE).findings}
    assert set(drifted.planted) == {
        "container_cpuset_drift", "container_memory_remote", "pod_not_guaranteed", "irq_on_isolated_cpu",
        "thp_enabled",
    }  # fmt: skip
    assert set(drifted.planted) <= fired


def test_the_clean_host_has_no_findings(tmp_path):
    found = gen.generate(tmp_path / "clean", gen.HostSpec(cpus=16, gpus=2, pods=6, irqs=40, processes=80, drift=False))
    evaluation = evaluate(read_host(Paths.from_root(found.root)), REFERENCE)
    assert found.planted == ()
    assert [f"{f.check}: {f.message}" for f in evaluation.findings] == []


def test_the_same_seed_writes_the_same_tree(tmp_path):
    small = gen.HostSpec(cpus=16, gpus=2, pods=5, irqs=30, processes=60)
    first, second = gen.generate(tmp_path / "a", small), gen.generate(tmp_path / "b", small)
    for rel in ("proc/interrupts", "var/lib/kubelet/cpu_manager_state", "proc/100000/stat"):
        assert (Path(first.root) / rel).read_bytes() == (Path(second.root) / rel).read_bytes(), rel


def test_sizes_scale_from_the_384_cpu_host():
    assert gen.HostSpec.scaled(384) == gen.HostSpec(cpus=384, gpus=8, pods=300, irqs=2000, processes=5000)
    small = gen.HostSpec.scaled(32)
    assert (small.gpus, small.pods, small.irqs, small.processes) == (4, 25, 167, 417)


def test_too_few_cpus_for_the_gpus_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="GPUs need more than"):
        gen.generate(tmp_path / "tiny", gen.HostSpec(cpus=8, gpus=4, pods=4, irqs=20, processes=40))
    assert not (tmp_path / "tiny").exists()


def test_a_non_empty_output_directory_is_refused(tmp_path):
    (tmp_path / "keep").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        gen.generate(tmp_path, SMALL)
