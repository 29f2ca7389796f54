"""Faults stay local: every optional file broken on its own degrades only what depends on it.

Each case starts from the clean reference GPU node (no finding), breaks one optional file (docs/sources.md lists
them per source) and asserts: no source goes down; the checks that need the file, and only those, become "not
evaluated" with a reason naming the file; every other check is evaluated as on the clean node; no finding appears.
The essential files (whose fault takes their source down) are test_faults.py's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from fakehost import FakeHost
from fakehost.reference import GPU_IRQ_BASE, GPUS, NODE_EXPORTER, SLOTS, ReferenceNode, reference_node
from numawatch.checks import Evaluation, evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE

NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"
GPU = GPUS[0].pci_address


@dataclass(frozen=True)
class Fault:
    name: str
    rel: str  # the file broken, relative to the host root
    content: str
    degraded: frozenset[str]  # the checks it must make not evaluated
    setup: Callable[[ReferenceNode], None] | None = None


def _without_isolcpus(node: ReferenceNode) -> None:
    """The command line without isolcpus=, so cpu/isolated is all that says which CPUs are isolated."""
    cmdline = node.host.path("proc/cmdline").read_text()
    words = [word for word in cmdline.split() if not word.startswith(("isolcpus=", "nohz_full="))]
    node.host.write("proc/cmdline", " ".join(words))


FAULTS = (
    Fault("node distance", f"{NODE}/node0/distance", "10 x", frozenset({"numa_topology_inconsistent"})),
    Fault("node meminfo", f"{NODE}/node0/meminfo", "Node 0 MemTotal: x kB", frozenset({"kubelet_state_stale"})),
    Fault(
        "node huge pages",
        f"{NODE}/node0/hugepages/hugepages-2048kB/nr_hugepages",
        "x",
        frozenset({"kubelet_state_stale"}),
    ),
    Fault("cpu core_id", f"{CPU}/cpu3/topology/core_id", "three", frozenset()),
    Fault("cpu present", f"{CPU}/present", "0-x", frozenset()),
    Fault("cpu possible", f"{CPU}/possible", "?", frozenset()),
    # The command line says nohz_full= and isolcpus=, which numawatch uses first: nothing depends on the sysfs files.
    Fault("cpu nohz_full", f"{CPU}/nohz_full", "1-", frozenset()),
    Fault("cpu isolated", f"{CPU}/isolated", "x", frozenset()),
    Fault(
        "cpu isolated without isolcpus=",
        f"{CPU}/isolated",
        "x",
        frozenset(
            {
                "kubelet_reserved_cpus_mismatch",
                "container_outside_isolated",
                "isolation_params_mismatch",
                "irq_on_isolated_cpu",
                "cpuidle_deep_state",
            }
        ),
        _without_isolcpus,
    ),
    Fault("irq default affinity", "proc/irq/default_smp_affinity", "zz", frozenset()),
    Fault(
        "one irq's affinity",
        f"proc/irq/{GPU_IRQ_BASE}/effective_affinity_list",
        "0-",
        frozenset({"irq_on_isolated_cpu"}),
    ),
    Fault("swappiness", "proc/sys/vm/swappiness", "x", frozenset({"vm_swappiness"})),
    Fault("numa_balancing", "proc/sys/kernel/numa_balancing", "off", frozenset({"kernel_numa_balancing"})),
    Fault("thp enabled", "sys/kernel/mm/transparent_hugepage/enabled", "x", frozenset({"thp_enabled"})),
    Fault("thp defrag", "sys/kernel/mm/transparent_hugepage/defrag", "[a] [b]", frozenset({"thp_defrag"})),
    Fault("governor", f"{CPU}/cpufreq/policy3/scaling_governor", "per formance", frozenset({"cpufreq_governor"})),
    Fault(
        "per-node huge page pool",
        f"{NODE}/node1/hugepages/hugepages-2048kB/free_hugepages",
        "x",
        frozenset(),
    ),
    Fault(
        "gpu numa_node",
        f"sys/bus/pci/devices/{GPU}/numa_node",
        "zero",
        frozenset({"gpu_numa_unknown", "numa_topology_inconsistent"}),
    ),
    Fault(
        "gpu local_cpulist",
        f"sys/bus/pci/devices/{GPU}/local_cpulist",
        "0-",
        frozenset({"numa_topology_inconsistent"}),
    ),
    # idle states and the GPU-NIC paths
    Fault("idle state disable", f"{CPU}/cpu3/cpuidle/state3/disable", "on", frozenset({"cpuidle_deep_state"})),
    # The driver's table is read from the first CPU with one: cpu0, housekeeping, whose states nothing judges (cpu1's
    # table is read for the others).
    Fault("idle state latency", f"{CPU}/cpu0/cpuidle/state2/latency", "fast", frozenset()),
    Fault("pm qos limit", f"{CPU}/cpu3/power/pm_qos_resume_latency_us", "soon", frozenset({"cpuidle_deep_state"})),
    Fault("cpuidle governor", f"{CPU}/cpuidle/current_governor", "Menu!", frozenset()),
    # The NIC sits under its GPU's switch: its path is PIX whatever its NUMA node or class says.
    Fault("nic numa_node", f"sys/bus/pci/devices/{SLOTS[0].nic}/numa_node", "zero", frozenset()),
    Fault("nic class", f"sys/bus/pci/devices/{SLOTS[0].nic}/class", "ib", frozenset()),
    Fault("switch port class", f"sys/bus/pci/devices/{SLOTS[0].upstream}/class", "?", frozenset()),
    # node-exporter runs in kube-system: nothing judges its use.
    Fault(
        "pod cpu.stat",
        "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{NODE_EXPORTER.uid.replace('-', '_')}.slice/cpu.stat",
        "usage_usec lots",
        frozenset(),
    ),
)


def evaluate_node(node: ReferenceNode) -> Evaluation:
    return evaluate(HostReader(node.paths).read(), REFERENCE)


def down(evaluation: Evaluation) -> set[str]:
    return {name for name, status in evaluation.host.statuses.items() if not status.up}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Evaluation:
    evaluation = evaluate_node(reference_node(FakeHost(tmp_path_factory.mktemp("clean") / "host")))
    assert evaluation.findings == ()
    return evaluation


@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: fault.name)
@pytest.mark.slow
def test_a_broken_optional_file_degrades_only_the_checks_that_need_it(fault, clean, fake_host):
    node = reference_node(fake_host)
    if fault.setup is not None:
        fault.setup(node)
    baseline = evaluate_node(node)
    node.host.write(fault.rel, fault.content)

    evaluation = evaluate_node(node)

    assert down(evaluation) == down(clean), "an optional file took a source down"
    assert evaluation.findings == (), [f.message for f in evaluation.findings]
    before = {item.check for item in baseline.not_evaluated}
    now = {item.check: item.reason for item in evaluation.not_evaluated}
    assert set(now) - before == fault.degraded
    assert before <= set(now)
    broken = os.path.realpath(node.host.path(fault.rel))  # sysfs device links name the file by its real path
    for check in fault.degraded:
        assert broken in now[check], now[check]
        assert "\n" not in now[check]


def test_every_optional_topology_file_has_a_case():
    from numawatch.model.topology import TOPOLOGY_OPTIONAL_FILES

    covered = {"distance", "meminfo", "hugepages", "cpu_topology", "present", "possible", "nohz_full", "isolated"}
    covered |= {"cpulist", "cmdline"}  # missing (or a link loop), not malformed: the test below
    assert covered == set(TOPOLOGY_OPTIONAL_FILES)


# A file missing altogether (a partial capture, an old kernel) or a link loop in its place: unknown, like a malformed
# one, never a finding about what it would have said.
@pytest.mark.parametrize(
    ("name", "rel", "loop", "degraded"),
    [
        ("distance missing", f"{NODE}/node1/distance", False, frozenset({"numa_topology_inconsistent"})),
        # The CPU-to-node map has a hole: every check placing CPUs on nodes is not evaluated (None: more than one).
        ("cpulist missing", f"{NODE}/node1/cpulist", False, None),
        ("cmdline missing", "proc/cmdline", False, frozenset({"isolation_params_mismatch"})),
        ("cmdline link loop", "proc/cmdline", True, frozenset({"isolation_params_mismatch"})),
    ],
)
def test_a_missing_optional_file_degrades_only_the_checks_that_need_it(name, rel, loop, degraded, clean, fake_host):
    node = reference_node(fake_host)
    baseline = evaluate_node(node)
    path = node.host.path(rel)
    path.unlink()
    if loop:
        os.symlink(path.name, path)
    if path.name == "cpulist":  # and the cpumap and cpuM links older kernels name a node's CPUs with
        for other in [*path.parent.glob("cpu[0-9]*"), *path.parent.glob("cpumap")]:
            other.unlink()

    evaluation = evaluate_node(node)

    assert down(evaluation) == down(clean), "a missing optional file took a source down"
    assert evaluation.findings == (), [f.message for f in evaluation.findings]
    before = {item.check for item in baseline.not_evaluated}
    now = {item.check: item.reason for item in evaluation.not_evaluated}
    if degraded is None:
        degraded = frozenset(set(now) - before)
        assert {"numa_topology_inconsistent", "container_numa_split"} <= degraded
        assert "isolation_params_mismatch" not in degraded  # the command line's parameters do not depend on the map
    assert set(now) - before == degraded
    for check in degraded:
        assert str(path) in now[check] and "\n" not in now[check], now[check]
