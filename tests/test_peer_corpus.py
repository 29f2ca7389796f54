"""The peers' fixture trees (tests/corpus/peers) read as the peers read them, value by value.

node_exporter keeps, beside its trees, the metrics it must expose for them (``node_exporter-e2e-output.txt``): every
value numawatch exposes too must be equal: the NUMA counters of ``nodeN/numastat``, the CPU topology (sockets and
cores), the cpufreq governors (the per-CPU layout of kernels before policy directories), interrupts summed by
numawatch's kinds, the isolated CPUs and the offline ones. procfs asserts its values in ``sysfs/system_cpu_test.go``
and ``proc_interrupts_test.go`` (commit 3c943fd): the CPUs, their topology, cpufreq governors and isolated CPUs of its
tree, which has no ``cpu/online`` but a ``cpu/offline``, and its ``/proc/interrupts``. Where numawatch deliberately
reads a value differently, the test says so.

Both trees are partial (no ``nodeN/distance``, no ``proc/cmdline``, NUMA nodes without ``cpulist``): what numawatch
cannot read there is "not evaluated" naming the file, never a finding.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from corpus import PEER_NODE_EXPORTER, PEER_PROCFS, PEERS, corpus_root
from numawatch import metrics
from numawatch.checks import Evaluation, evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.paths import Paths
from numawatch.sources.interrupts import classify
from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[dict[str, str], float]


def samples(text: str, name: str) -> list[Sample]:
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found.append((dict(sample.labels), sample.value))
    return found


@pytest.fixture(scope="module")
def expected() -> str:
    """node_exporter's e2e output, the oracle for its tree."""
    return (PEERS / "node_exporter-e2e-output.txt").read_text()


def evaluated(name: str) -> tuple[Path, Evaluation, str]:
    root = corpus_root(name)
    evaluation = evaluate(HostReader(Paths.from_root(root)).read(), REFERENCE)
    return root, evaluation, metrics.render(evaluation).decode()


@pytest.fixture(scope="module")
def node_exporter_tree() -> tuple[Path, Evaluation, str]:
    return evaluated(PEER_NODE_EXPORTER)


@pytest.fixture(scope="module")
def procfs_tree() -> tuple[Path, Evaluation, str]:
    return evaluated(PEER_PROCFS)


def not_evaluated(evaluation: Evaluation) -> dict[str, str]:
    return {item.check: item.reason for item in evaluation.not_evaluated}


def findings(evaluation: Evaluation, check: str) -> Iterator[dict[str, str]]:
    return (dict(finding.labels) for finding in evaluation.findings if finding.check == check)


# --------------------------------------------------------------------------------------------------- node_exporter
NUMASTAT_FIELDS = ("numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node")


def test_numastat_is_node_exporters_value_for_value(node_exporter_tree, expected):
    _, _, exposed = node_exporter_tree
    ours = {(s["numa_node"], s["field"]): v for s, v in samples(exposed, "numawatch_numastat_pages_total")}
    theirs = {
        (labels["node"], field): value
        for field in NUMASTAT_FIELDS
        for labels, value in samples(expected, f"node_memory_numa_{field}_total")
    }

    assert len(theirs) == 18
    assert ours == theirs


def test_cpu_topology_is_node_exporters(node_exporter_tree, expected):
    _, evaluation, exposed = node_exporter_tree
    info = samples(exposed, "numawatch_cpu_info")
    # node_exporter labels its per-core throttle counters by sysfs' physical_package_id and core_id.
    theirs = {(labels["package"], labels["core"]) for labels, _ in samples(expected, "node_cpu_core_throttles_total")}
    packages = {labels["package"] for labels, _ in samples(expected, "node_cpu_package_throttles_total")}
    nodes = {labels["node"] for labels, _ in samples(expected, "node_memory_numa_MemTotal")}

    assert {(labels["socket"], labels["core"]) for labels, _ in info} == theirs
    assert {labels["socket"] for labels, _ in info} == packages
    assert {labels["numa_node"] for labels, _ in samples(exposed, "numawatch_numa_node_cpus")} == nodes
    assert evaluation.host.topology.nodes[2].cpus == frozenset()  # node 2's cpulist is empty: a CPU-less node


def test_governors_of_the_per_cpu_cpufreq_layout_are_node_exporters(node_exporter_tree, expected):
    _, evaluation, _ = node_exporter_tree
    theirs = {
        int(labels["cpu"]): labels["governor"]
        for labels, value in samples(expected, "node_cpu_scaling_governor")
        if value == 1
    }

    assert theirs == {0: "powersave", 1: "powersave", 2: "powersave", 3: "powersave"}
    assert dict(evaluation.host.kernel.governors) == theirs
    # ... and so the check is evaluated on it: powersave is not the intended governor.
    assert list(findings(evaluation, "cpufreq_governor")) == [
        {"governor": "powersave", "cpus": "0-3", "expected": "performance"}
    ]


def test_interrupts_by_kind_are_node_exporters_sums(node_exporter_tree, expected):
    _, _, exposed = node_exporter_tree
    ours = {(s["cpu"], s["kind"]): v for s, v in samples(exposed, "numawatch_cpu_interrupts_total")}
    theirs: dict[tuple[str, str], float] = {}
    for labels, value in samples(expected, "node_interrupts_total"):
        key = (labels["cpu"], classify(labels["type"], labels["devices"]))
        theirs[key] = theirs.get(key, 0) + value
    watched = {cpu for cpu, _ in ours}

    assert watched == {"1", "3"}  # numawatch counts interrupts on watched (here: isolated) CPUs only
    assert ours == {key: value for key, value in theirs.items() if key[0] in watched}
    assert {kind for _, kind in ours} == {"device", "local_timer", "ipi", "other"}


def test_isolated_cpus_are_node_exporters_within_the_cpus_there_are(node_exporter_tree, expected):
    _, evaluation, exposed = node_exporter_tree
    theirs = {int(labels["cpu"]) for labels, value in samples(expected, "node_cpu_isolated") if value == 1}
    ours = {int(labels["cpu"]) for labels, _ in samples(exposed, "numawatch_cpu_info") if labels["isolated"] == "true"}

    assert theirs == {1, 3, 4, 5, 9}
    # Deliberately different: node_exporter repeats cpu/isolated as written (CPUs 4, 5 and 9 do not exist on this
    # 4-CPU tree); numawatch reports isolation for the CPUs there are, as numawatch_cpu_info has one series per CPU.
    assert ours == theirs & set(evaluation.host.topology.cpus) == {1, 3}


def test_no_cpu_is_offline_as_the_empty_offline_file_says(node_exporter_tree, expected):
    _, evaluation, _ = node_exporter_tree
    cpus_node_exporter_reports = {int(labels["cpu"]) for labels, _ in samples(expected, "node_cpu_scaling_governor")}

    assert evaluation.host.topology.offline == frozenset()
    assert evaluation.host.topology.online == frozenset(cpus_node_exporter_reports) == {0, 1, 2, 3}


def test_what_the_partial_tree_lacks_is_not_evaluated_naming_the_file(node_exporter_tree):
    root, evaluation, _ = node_exporter_tree
    reasons = not_evaluated(evaluation)

    # No nodeN/distance in the tree: the distance table is unknown, not "0 entries for 3 nodes".
    assert reasons["numa_topology_inconsistent"] == f"{root}/sys/devices/system/node/node0/distance: missing"
    # No proc/cmdline: no isolcpus=, nohz_full= or rcu_nocbs= value is stated that was never read.
    assert reasons["isolation_params_mismatch"] == f"{root}/proc/cmdline: missing"
    assert not list(findings(evaluation, "numa_topology_inconsistent"))
    assert not list(findings(evaluation, "isolation_params_mismatch"))
    assert evaluation.host.statuses["topology"].up and evaluation.host.statuses["kernel"].up


# --------------------------------------------------------------------------------------------------- procfs
def test_procfs_cpus_and_their_topology(procfs_tree):
    _, evaluation, _ = procfs_tree
    cpus = evaluation.host.topology.cpus

    # TestCPUTopology: three CPUs; cpu0 core 0, cpu1 package 0 with thread siblings 1,5.
    assert sorted(cpus) == [0, 1, 2]
    assert (cpus[0].core, cpus[0].socket, cpus[0].siblings) == (0, 0, frozenset({0, 4}))
    assert (cpus[1].core, cpus[1].socket, cpus[1].siblings) == (1, 0, frozenset({1, 5}))


def test_procfs_online_and_offline_cpus(procfs_tree):
    _, evaluation, _ = procfs_tree
    topology = evaluation.host.topology

    # cpu/offline lists CPU 2 (and the tree has no cpu/online): it is not online.
    assert 2 in topology.offline and not topology.cpus[2].online
    # TestCPUOnline: cpu0's online file says 1.
    assert topology.cpus[0].online
    # Deliberately different: procfs reads cpu1's missing cpuN/online as offline; the kernel leaves the file out for
    # a CPU that cannot be unplugged, which is online, and cpu/offline does not list it.
    assert topology.cpus[1].online
    assert topology.online == {0, 1}


def test_procfs_governors_both_layouts_without_cpu_online(procfs_tree):
    _, evaluation, _ = procfs_tree

    # TestSystemCpufreq: CPU 0 (cpu0/cpufreq links to policy0) and CPU 1 (a per-CPU directory) run powersave.
    assert dict(evaluation.host.kernel.governors) == {0: "powersave", 1: "powersave"}
    assert [labels["cpus"] for labels in findings(evaluation, "cpufreq_governor")] == ["0-1"]


def test_procfs_isolated_cpus_within_the_cpus_there_are(procfs_tree):
    _, evaluation, exposed = procfs_tree
    isolation = evaluation.host.topology.isolation
    ours = {int(labels["cpu"]) for labels, _ in samples(exposed, "numawatch_cpu_info") if labels["isolated"] == "true"}

    # TestIsolatedCPUs: 1-7 and 9, as cpu/isolated says (1,2-7,9).
    assert isolation.sys_isolated == {1, 2, 3, 4, 5, 6, 7, 9}
    # Deliberately different: numawatch_cpu_info's isolated label is for online CPUs (CPU 2 is offline, 3-9 absent).
    assert ours == {1}


def test_procfs_nodes_without_cpulist_leave_the_cpu_map_unknown_not_wrong(procfs_tree):
    root, evaluation, _ = procfs_tree
    reasons = not_evaluated(evaluation)
    missing = f"{root}/sys/devices/system/node/node1/cpulist: missing"

    # Nodes 1 and 2 hold only vmstat: no CPU is "in no node", the map is unknown.
    assert reasons["numa_topology_inconsistent"] == missing
    assert not list(findings(evaluation, "numa_topology_inconsistent"))
    assert evaluation.host.statuses["topology"].up


def test_procfs_interrupts(procfs_tree):
    _, evaluation, exposed = procfs_tree
    interrupts = evaluation.host.interrupts
    rows = {row.key: row for row in interrupts.rows}
    ours = {(s["cpu"], s["kind"]): v for s, v in samples(exposed, "numawatch_cpu_interrupts_total")}

    # TestProcInterrupts: 47 entries, ERR and MIS among them (numawatch keeps those two global counts apart).
    assert len(rows) + len({"ERR", "MIS"}) == 47 and not {"ERR", "MIS"} & set(rows)
    # "empty devices": LOC counts 10196, 7429, 8542, 8229 on CPUs 0-3; numawatch keeps the watched CPUs' (the
    # isolated ones the file has a column for).
    assert dict(rows["LOC"].counts) == {1: 7429, 2: 8542, 3: 8229}
    assert {cpu: value for (cpu, kind), value in ours.items() if kind == "local_timer"} == {
        "1": 7429, "2": 8542, "3": 8229
    }  # fmt: skip
    # "first line" (IO-APIC, 2-edge timer, 49 on CPU 0 only) and "last line" (PIW, nothing anywhere).
    assert (rows["0"].name, rows["0"].chip, dict(rows["0"].counts)) == ("timer", "IO-APIC 2-edge", {})
    assert (rows["PIW"].name, dict(rows["PIW"].counts)) == ("Posted-interrupt wakeup event", {})
