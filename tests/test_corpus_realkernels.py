"""Real kernels this project booted under QEMU with Debian's packages (tests/corpus/realkernel-*/): numawatch's
findings on each tree are exactly those its README calls true, none else.

Each capture holds only what the kernel printed (``root.tar.gz``); the kubelet's side (configuration, CPU and Memory
Manager checkpoints with checksums the kubelet accepts, the device-plugin checkpoint, containerd's bundles naming
the pods) is written here, consistent with what the README says the kubelet assigned before the capture. The
expected findings below are copied from each README's "What is true here" table; a README and this file change
together.

Where numawatch is known to get a capture wrong, the correct expectation is kept in ``known_wrong`` and its test
marked ``xfail(strict=True)``, one test per check, so each flips on its own when the code is fixed. None is known
today: the issue-14 fixes (offline CPUs read as drift and as "not isolated") and the memory-node subset fix made
every capture read as its README says.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from corpus import corpus_root
from fakehost import FakeHost
from fakehost.kubelet import (
    kubelet_memory_machine_state,
    write_cpu_manager_state,
    write_device_checkpoint,
    write_kubelet_config,
    write_memory_manager_state,
)
from numawatch.checks import Evaluation, all_checks, evaluate
from numawatch.cpuset import parse_cpulist
from numawatch.host import Host, read_host
from numawatch.intent import REFERENCE
from numawatch.model.kubelet import MemoryBlock
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED
from numawatch.workloads import build_workloads

RT_V1 = "realkernel-rt-cgroupv1-smtoff"
V2_612 = "realkernel-6.12-systemd-noisolation"
ISO_612 = "realkernel-6.12-isolated-core-offline"

# What the kubelet reserves on both nodes: 4 CPUs (core 0 of each socket), 512 MiB of memory on NUMA node 0.
RESERVED_MEMORY = {0: {"memory": "512Mi"}}
SYSTEM_RESERVED = {"memory": "412Mi"}  # + the default eviction-hard memory.available 100Mi = reserved-memory
POD_MEMORY = 256 << 20  # each Guaranteed container's memory request, which the Memory Manager places on its node


@dataclass(frozen=True)
class Pod:
    uid: str
    namespace: str
    name: str
    qos: str
    app_id: str
    sandbox_id: str
    exclusive: str | None = None  # the CPU Manager's assignment (before any CPU went offline)
    memory_node: int | None = None  # the Memory Manager's assignment


@dataclass(frozen=True)
class Capture:
    name: str
    flavor: str  # how the kubelet is configured: "kubeadm" or "rke2"
    containerd_tasks: str  # where containerd keeps the bundles, under the host root
    kubelet_args: tuple[str, ...]
    default_cpuset: str  # the CPU Manager's shared pool (defaultCpuSet) as it wrote it
    pods: tuple[Pod, ...]
    # (check id, subject labels) of every finding the README calls true
    true_findings: frozenset[tuple[str, frozenset[tuple[str, str]]]]
    not_evaluated: frozenset[str]  # checks that cannot be evaluated on this capture, and why (README)
    sources_down: frozenset[str]
    known_wrong: Mapping[str, str] = field(default_factory=dict)  # check id -> why main misreads it today


def finding(check: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return check, frozenset(labels.items())


def container(pod: Pod) -> dict[str, str]:
    return {"namespace": pod.namespace, "pod": pod.name, "pod_uid": pod.uid, "container": "app"}


# ------------------------------------------------------------------------------------------- PREEMPT_RT, cgroup v1
RT_PODS = (
    Pod(
        "7cbad7f2-498d-4efe-b2cb-4f06e7aef8d8", "inference", "llm-a-0", QOS_GUARANTEED,
        "f2f93f61b4fb34018a0611fe2ccf40f3336ba4c90c0d56f4d41b27a4f48ae88a",
        "0e4f1c596b3afb7145ee2df0eb3a315520227281c86bcd2a26c9f507dda5b2de", "2-3", 0,
    ),
    Pod(
        "939877ba-5402-4c56-837e-9a8078ab1d08", "inference", "llm-b-0", QOS_GUARANTEED,
        "31e11c2bd4069d5785c1df3c7b9cf5135fd224e2e67c21669cf9a0113bcdfd18",
        "74229cf62efa2d95ffa595a92c2ff6740e3aa980388607aff97c1823bf14c47c", "8-11", 1,
    ),
    Pod(
        "8e572f69-a1ea-4e02-9953-8e989b75d1c0", "monitoring", "agent-0", QOS_BURSTABLE,
        "c5e6ed7651a8a2fc8c3d4efbe31c796ebbb7f3e6fc14369a3a4b81b929fba728",
        "9cff39f723a58604c11f17764a75f83c3e9c59579c2eb2189d527100f2f2b7ed",
    ),
    Pod(
        "f75d7464-e50e-4b9f-a089-650e7f12275e", "batch", "job-0", QOS_BESTEFFORT,
        "a1665f311566648aaa407bc3ecbccd360fe9422a2b0c352bdc6b6de083d052ee",
        "bbc7890b4733a42ded7b97083b334387b1a934bc330575a2f1586a5bd054f0be",
    ),
)  # fmt: skip
RT = Capture(
    name=RT_V1,
    flavor="kubeadm",
    containerd_tasks="run/containerd/io.containerd.runtime.v2.task/k8s.io",
    kubelet_args=("cgroup-driver=cgroupfs",),
    default_cpuset="0-1,4-7",
    pods=RT_PODS,
    true_findings=frozenset(
        {
            # Also says that reserved-cpus=0-1,6-7 names offline CPUs 1 and 7, which stops the kubelet by itself: one
            # finding, since one procedure (reserved-cpus=0,6, rm the checkpoint) fixes both. On the online CPUs the
            # reserved CPUs (0,6) are the housekeeping CPUs, so kubelet_reserved_cpus_mismatch has nothing to add.
            finding("kubelet_state_stale", file="/var/lib/kubelet/cpu_manager_state", reason="online_cpus_changed"),
        }
    ),
    not_evaluated=frozenset(
        {
            "irq_activity_on_isolated_cpu",
            "tick_on_nohz_full",
            "gpu_process_remote",
            "gpu_process_memlock",
            "gpu_holder_mismatch",
            "kubelet_podresources_checkpoint_mismatch",  # no kubelet answered in the guest: no socket
        }
    ),
    sources_down=frozenset({"intersocket", "nvml", "processes", "pod_resources", "kubernetes_api"}),
)

# ------------------------------------------------------------------------------ Debian 6.12, cgroup v2, systemd
V2_PODS = (
    Pod(
        "517cd77b-2f5a-491c-846b-ec3b1dfb41af", "inference", "llm-a-0", QOS_GUARANTEED,
        "4ccdd78a0fd8474dba826e727bc7dd4c2a7743f1c30142686dcd3205d3c66897",
        "c8ebb5db5ab49b3bb3f6178cc060765492c152f16ada090453ba4134b8b4a8cd", "2-3", 0,
    ),
    Pod(
        "a0a1e3bc-58de-402c-a493-34e7b3c51b85", "inference", "llm-b-0", QOS_GUARANTEED,
        "41ae8319ce253ee9f836a708563bf748772f65584ad774b65a16d3bf00773f0a",
        "9def6295320ab9fe0f175fff4761d8033c6db89f6dcfe3c371849779066d3bd3", "8-11", 1,
    ),
    Pod(
        "85ac0426-8062-41b0-bd4f-e8181320358c", "monitoring", "agent-0", QOS_BURSTABLE,
        "44b567476c31739d60947627e3ba73540983019ea7db3d81193b0d22c96313b7",
        "098d7dee8a516d58b0b7f8e9fbfdbea7fa31779ca3fc3b638079bb40580729e1",
    ),
    Pod(
        "f22999cf-68fa-450f-bbf0-151c7520d982", "batch", "job-0", QOS_BESTEFFORT,
        "1104b094426cb5fd37cb0f4b55df2c321e19059be5c805ca1ebdb5d02fd4ab21",
        "f6e8ae18f36e6beb0fbcc5577b588b7d0675649205245c39eae6f34b2b3afae0",
    ),
)  # fmt: skip
_WIDENED = container(V2_PODS[1])
V2 = Capture(
    name=V2_612,
    flavor="rke2",
    containerd_tasks="run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io",
    kubelet_args=(),
    default_cpuset="0-1,4-7",
    pods=V2_PODS,
    true_findings=frozenset(
        {
            # llm-b-0's container was rewritten to every CPU after the kubelet pinned it on 8-11
            finding("container_cpuset_drift", **_WIDENED, cpus="0-11", expected="8-11"),
            finding("exclusive_cpu_overlap", **_WIDENED, cpus="2-3"),
            finding("container_numa_split", **{k: v for k, v in _WIDENED.items() if k != "container"}, numa_node="0,1"),
            # device IRQs delivered to exclusive CPUs (2-3, 8-11): no isolcpus, no irqaffinity, no irqbalance
            finding("irq_on_isolated_cpu", irq="1", name="i8042", cpus="3", managed="false"),
            finding("irq_on_isolated_cpu", irq="12", name="i8042", cpus="2", managed="false"),
            finding("irq_on_isolated_cpu", irq="27", name="nvme0q3", cpus="8", managed="true"),
            finding("irq_on_isolated_cpu", irq="28", name="nvme0q4", cpus="9", managed="true"),
            finding("irq_on_isolated_cpu", irq="29", name="nvme0q5", cpus="10", managed="true"),
            finding("irq_on_isolated_cpu", irq="30", name="nvme0q6", cpus="11", managed="true"),
            finding("irq_on_isolated_cpu", irq="33", name="nvme0q9", cpus="2", managed="true"),
            finding("irq_on_isolated_cpu", irq="34", name="nvme0q10", cpus="3", managed="true"),
            # the kernel's defaults, which the reference profile does not want
            finding("kernel_numa_balancing", setting="kernel.numa_balancing", value="1", expected="0"),
            finding("thp_enabled", setting="transparent_hugepage/enabled", value="always", expected="madvise,never"),
            finding("vm_swappiness", setting="vm.swappiness", value="60", expected="0"),
        }
    ),
    not_evaluated=frozenset(
        {
            "kubelet_reserved_cpus_mismatch",
            "container_outside_isolated",
            "irq_activity_on_isolated_cpu",
            "gpu_process_remote",
            "gpu_process_memlock",
            "gpu_holder_mismatch",
            "kubelet_podresources_checkpoint_mismatch",  # no kubelet answered in the guest: no socket
        }
    ),
    sources_down=frozenset({"intersocket", "nvml", "processes", "pod_resources", "kubernetes_api"}),
)
# ------------------------------------------------------- Debian 6.12, isolated and tuned, a whole core taken offline
ISO_PODS = (
    Pod(
        "35cb9059-8248-4b49-a706-d1bb717b2a96", "inference", "llm-a-0", QOS_GUARANTEED,
        "d46e1c06d5a26efd9d297fc58beefe00d42581676cbec692c431b946929ff6bf",
        "fd2e8d04eaecc82b0f706af0164782a768852c71bd4f46b588ec05678f838ab6", "2-3", 0,
    ),
    Pod(
        "23a381a4-696b-4439-8934-f72a7cb1dd17", "inference", "llm-b-0", QOS_GUARANTEED,
        "abd4adf35b5faa2f4e23836d2e81472f0178622beea0688af2b95ac27b04872b",
        "c463834a5884b9c1ed400c1667ad17da64147f98b1f6dae9b3c19a9432d3d1ab", "8-9", 1,
    ),
    Pod(
        "79a14ca1-7c15-4b6c-8e3b-3a5b47dc19c9", "inference", "llm-c-0", QOS_GUARANTEED,
        "07d6eee929d0cc7c748d5ff3ca084f4d4e3c8eb49a230750999c6d19ed72b72b",
        "7124585b5088c85cfd5c8efa971838da63534b121bfb2e8bff9617b84dfa07c3", "10-11", 1,
    ),
    Pod(
        "699f5be9-d9fb-4227-89e0-7f9bf90d6423", "monitoring", "agent-0", QOS_BURSTABLE,
        "ac106821621e442567f33417dc94e5270ffb62e10cd16f01f01b933d05b426c5",
        "324679e9032d3b80cba353b0fe3d07a69c0472b479ea67bec9c9806620618439",
    ),
)  # fmt: skip
_FELL_BACK = container(ISO_PODS[2])
ISO = Capture(
    name=ISO_612,
    flavor="rke2",
    containerd_tasks="run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io",
    kubelet_args=(),
    default_cpuset="0-1,4-7",
    pods=ISO_PODS,
    true_findings=frozenset(
        {
            finding("kubelet_state_stale", file="/var/lib/kubelet/cpu_manager_state", reason="online_cpus_changed"),
            # llm-c-0's exclusive core 10-11 went offline; cgroup v2 gave its container the parent's CPUs, 0-9
            # No `expected`: none of the CPUs the kubelet gave it is online.
            finding("container_cpuset_drift", **_FELL_BACK, cpus="0-9"),
            finding("exclusive_cpu_overlap", **_FELL_BACK, cpus="2-3,8-9"),
            finding(
                "container_numa_split", **{k: v for k, v in _FELL_BACK.items() if k != "container"}, numa_node="0,1"
            ),
        }
    ),
    not_evaluated=frozenset(
        {
            "irq_activity_on_isolated_cpu",
            "tick_on_nohz_full",
            "gpu_process_remote",
            "gpu_process_memlock",
            "gpu_holder_mismatch",
            "kubelet_podresources_checkpoint_mismatch",  # no kubelet answered in the guest: no socket
        }
    ),
    sources_down=frozenset({"intersocket", "nvml", "processes", "pod_resources", "kubernetes_api"}),
)
CAPTURES = {capture.name: capture for capture in (RT, V2, ISO)}


# --------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def extracted() -> Callable[[str], Path]:
    """Each capture's tree, extracted once per process by the corpus loader (read-only use)."""
    return corpus_root


def node_mem_total(root: Path, node: int) -> int:
    text = (root / f"sys/devices/system/node/node{node}/meminfo").read_text()
    match = re.search(rf"^Node {node} MemTotal:\s+(\d+) kB$", text, re.MULTILINE)
    assert match, f"node{node}/meminfo has no MemTotal"
    return int(match.group(1)) * 1024


def node_hugepages(root: Path, node: int) -> dict[int, int]:
    """Page size in kB -> pages reserved on the node, as nodeN/hugepages/hugepages-<kB>kB/nr_hugepages say."""
    pages = {}
    for directory in (root / f"sys/devices/system/node/node{node}/hugepages").iterdir():
        size = re.fullmatch(r"hugepages-(\d+)kB", directory.name)
        assert size, directory
        pages[int(size.group(1))] = int((directory / "nr_hugepages").read_text())
    return pages


def complete(capture: Capture, tree: Path, into: Path) -> FakeHost:
    """A copy of the captured tree plus what the kubelet and containerd would have on disk there."""
    host = FakeHost(into)
    shutil.copytree(tree, host.root, symlinks=True, dirs_exist_ok=True)
    for pod in capture.pods:
        for cid, kind in ((pod.app_id, "container"), (pod.sandbox_id, "sandbox")):
            annotations = {
                "io.kubernetes.cri.container-type": kind,
                "io.kubernetes.cri.sandbox-name": pod.name,
                "io.kubernetes.cri.sandbox-namespace": pod.namespace,
                "io.kubernetes.cri.sandbox-uid": pod.uid,
            }
            if kind == "container":
                annotations["io.kubernetes.cri.container-name"] = "app"
            host.write(
                f"{capture.containerd_tasks}/{cid}/config.json",
                json.dumps({"ociVersion": "1.2.0", "annotations": annotations}),
            )
    write_kubelet_config(
        host,
        capture.flavor,
        cpu_manager_policy="static",
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
        memory_manager_policy="Static",
        reserved_cpus="0-1,6-7",
        reserved_memory=RESERVED_MEMORY,
        system_reserved=SYSTEM_RESERVED,
        extra_args=capture.kubelet_args,
    )
    # Written when the pods were admitted, before any CPU went offline: the kubelet never rewrites it for hotplug.
    write_cpu_manager_state(
        host,
        policy="static",
        default_cpuset=capture.default_cpuset,
        entries={pod.uid: {"app": pod.exclusive} for pod in capture.pods if pod.exclusive},
    )
    blocks = {
        pod.uid: {"app": (MemoryBlock(numa_affinity=(pod.memory_node,), type="memory", size=POD_MEMORY),)}
        for pod in capture.pods
        if pod.memory_node is not None
    }
    machine = kubelet_memory_machine_state(
        {node: node_mem_total(tree, node) for node in (0, 1)},
        hugepages={node: node_hugepages(tree, node) for node in (0, 1)},
        reserved_memory=RESERVED_MEMORY,
        entries=blocks,
    )
    write_memory_manager_state(host, policy="Static", machine_state=machine, entries=blocks)
    write_device_checkpoint(host, entries=[], registered={})  # no device plugin registered anything
    return host


@dataclass(frozen=True)
class Completed:
    capture: Capture
    host: FakeHost
    snapshot: Host
    evaluation: Evaluation


@pytest.fixture(scope="session")
def completed(extracted, tmp_path_factory) -> Callable[[str], Completed]:
    """Each capture completed with the kubelet's files, read and evaluated once against the reference profile."""
    done: dict[str, Completed] = {}

    def get(name: str) -> Completed:
        if name not in done:
            capture = CAPTURES[name]
            host = complete(capture, extracted(name), tmp_path_factory.mktemp(f"host-{name}") / "host")
            snapshot = read_host(host.paths)
            done[name] = Completed(capture, host, snapshot, evaluate(snapshot, REFERENCE))
        return done[name]

    return get


def found(evaluation: Evaluation, check: str | None = None) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    return {(f.check, frozenset(f.labels.items())) for f in evaluation.findings if check is None or f.check == check}


# --------------------------------------------------------------------------------------------------- the findings
def _per_check_params():
    params = []
    for capture in CAPTURES.values():
        for check in all_checks():
            marks = ()
            if check.id in capture.known_wrong:
                marks = (pytest.mark.xfail(strict=True, reason=capture.known_wrong[check.id]),)
            params.append(pytest.param(capture.name, check.id, marks=marks, id=f"{capture.name}-{check.id}"))
    return params


@pytest.mark.parametrize(("name", "check"), _per_check_params())
def test_each_check_finds_exactly_what_the_readme_calls_true(completed, name, check):
    done = completed(name)
    expected = {item for item in done.capture.true_findings if item[0] == check}

    actual = found(done.evaluation, check)
    assert actual == expected, (sorted(actual, key=str), sorted(expected, key=str))


@pytest.mark.parametrize("name", list(CAPTURES))
def test_the_checks_that_cannot_be_evaluated_are_those_the_readme_names(completed, name):
    done = completed(name)

    assert {item.check for item in done.evaluation.not_evaluated} == done.capture.not_evaluated


@pytest.mark.parametrize("name", list(CAPTURES))
def test_every_true_finding_is_one_of_a_registered_check(name):
    registered = {check.id for check in all_checks()}

    assert {check for check, _ in CAPTURES[name].true_findings} <= registered
    assert set(CAPTURES[name].known_wrong) <= registered


def test_the_stale_cpu_state_names_the_cpus_that_went_offline_and_the_offline_reserved_cpus(completed):
    (stale,) = [f for f in completed(RT_V1).evaluation.findings if f.check == "kubelet_state_stale"]

    assert "CPUs 1,3,5,7,9-11 of the checkpoint went offline" in stale.message
    assert "reserved-cpus 0-1,6-7 names CPUs 1,7, which are offline" in stale.message
    assert "reserved-cpus=0,6" in stale.remediation or "reservedSystemCPUs: 0,6" in stale.remediation


def test_the_drift_of_a_container_whose_cpus_all_went_offline_names_no_offline_cpu_missing(completed):
    (drift,) = [f for f in completed(ISO_612).evaluation.findings if f.check == "container_cpuset_drift"]

    assert "0-9" in drift.message
    assert "missing" not in drift.message


def test_the_stale_cpu_state_quotes_what_the_kubelet_will_say(completed):
    (stale,) = [f for f in completed(RT_V1).evaluation.findings if f.check == "kubelet_state_stale"]

    assert 'current set of available CPUs "0,2,4,6,8" doesn\'t match with CPUs in state "0-11"' in stale.message


@pytest.mark.parametrize("name", list(CAPTURES))
@pytest.mark.slow
def test_numawatch_check_on_the_tree_reports_the_same_findings_and_exits_1(completed, name):
    done = completed(name)

    result = subprocess.run(
        [sys.executable, "-m", "numawatch", "check", "--host-root", str(done.host.root), "--format", "json",
         "--window", "0", "--no-nvml"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    cli = {(f["check"], frozenset(f["labels"].items())) for f in document["findings"]}
    assert cli == found(done.evaluation)
    assert {item["check"] for item in document["not_evaluated"]} == done.capture.not_evaluated


# --------------------------------------------------------------------------------------------------- simpler facts
@pytest.mark.parametrize("name", list(CAPTURES))
def test_only_the_sources_the_readme_names_are_down(completed, name):
    done = completed(name)

    down = {source for source, status in done.snapshot.statuses.items() if not status.up}

    assert down == done.capture.sources_down, {s: done.snapshot.statuses[s].reason for s in down}


# CPU -> (socket, core, NUMA node, thread siblings) as sysfs shows them at capture time; offline CPUs have no topology.
RT_CPUS = {0: (0, 0, 0, "0"), 2: (0, 1, 0, "2"), 4: (0, 2, 0, "4"), 6: (1, 0, 1, "6"), 8: (1, 1, 1, "8")}
V2_CPUS = {
    cpu: (cpu // 6, (cpu % 6) // 2, cpu // 6, f"{cpu - cpu % 2}-{cpu - cpu % 2 + 1}") for cpu in range(12)
}  # socket-major numbering: socket 0 = node 0 = CPUs 0-5, thread siblings are adjacent
ISO_CPUS = {cpu: topology for cpu, topology in V2_CPUS.items() if cpu < 10}  # core 10-11 offline


@pytest.mark.parametrize(
    ("name", "cpus", "nodes"),
    [
        (RT_V1, RT_CPUS, {0: "0,2,4", 1: "6,8"}),
        (V2_612, V2_CPUS, {0: "0-5", 1: "6-11"}),
        (ISO_612, ISO_CPUS, {0: "0-5", 1: "6-9"}),
    ],
)
def test_the_cpu_map_is_the_one_the_kernel_printed(completed, name, cpus, nodes):
    topology = completed(name).snapshot.topology

    assert set(topology.cpus) == set(range(12))  # present = possible = 0-11 on every capture
    assert topology.online == frozenset(cpus)
    assert {
        cpu.id: (cpu.socket, cpu.core, cpu.numa_node, cpu.siblings) for cpu in topology.cpus.values() if cpu.online
    } == {cpu: (s, c, n, parse_cpulist(sib)) for cpu, (s, c, n, sib) in cpus.items()}
    assert all(cpu.socket is None for cpu in topology.cpus.values() if not cpu.online)
    assert {node.id: node.cpus for node in topology.nodes.values()} == {
        node: parse_cpulist(text) for node, text in nodes.items()
    }
    assert [topology.nodes[node].distances for node in (0, 1)] == [(10, 21), (21, 10)]


def test_the_rt_kernels_isolation_is_read_with_offline_cpus_still_listed(completed):
    isolation = completed(RT_V1).snapshot.topology.isolation

    isolated = parse_cpulist("2-5,8-11")
    assert (isolation.isolcpus, isolation.nohz_full, isolation.rcu_nocbs) == (isolated, isolated, isolated)
    assert isolation.irqaffinity == parse_cpulist("0-1,6-7")
    assert (isolation.sys_isolated, isolation.sys_nohz_full) == (isolated, isolated)
    assert set(isolation.isolcpus_flags) == {"domain", "managed_irq"}


def test_the_612_kernels_isolation_leaves_rcu_nocbs_to_the_kernel_and_reserves_huge_pages_per_node(completed):
    snapshot = completed(ISO_612).snapshot
    isolation = snapshot.topology.isolation

    isolated = parse_cpulist("2-5,8-11")  # 10-11 are offline and still listed
    assert (isolation.isolcpus, isolation.nohz_full, isolation.rcu_nocbs) == (isolated, isolated, None)
    assert isolation.isolcpus_flags == ("managed_irq", "domain")
    assert isolation.irqaffinity == parse_cpulist("0-1,6-7")
    assert (isolation.sys_isolated, isolation.sys_nohz_full) == (isolated, isolated)
    assert snapshot.get("kernel").cmdline_hugepages_per_node == {0: {2048: 16}, 1: {2048: 16}}
    assert {node.id: dict(node.hugepages_total) for node in snapshot.topology.nodes.values()} == {
        0: {2048: 16, 1048576: 0},
        1: {2048: 16, 1048576: 0},
    }


def test_the_612_kernel_without_isolation_parameters_isolates_nothing(completed):
    isolation = completed(V2_612).snapshot.topology.isolation

    assert (isolation.isolcpus, isolation.nohz_full, isolation.rcu_nocbs, isolation.irqaffinity) == (None,) * 4
    assert not isolation.sys_isolated  # the file is an empty line
    assert not isolation.sys_nohz_full  # "  (null)": nohz_full was not configured
    assert isolation.problems == ()


@pytest.mark.parametrize(
    ("name", "version", "driver", "kubepods"),
    [
        (RT_V1, 1, "cgroupfs", "kubepods"),
        (V2_612, 2, "systemd", "kubepods.slice"),
        (ISO_612, 2, "systemd", "kubepods.slice"),
    ],
)
def test_the_cgroup_layout_is_recognised(completed, name, version, driver, kubepods):
    done = completed(name)
    cgroups = done.snapshot.cgroups

    assert (cgroups.version, cgroups.driver) == (version, driver)
    assert all(pod.cgroup_path.startswith(f"{kubepods}/") for pod in cgroups.pods)
    assert {(pod.uid, pod.qos) for pod in cgroups.pods} == {(pod.uid, pod.qos) for pod in done.capture.pods}
    for pod in done.capture.pods:
        assert {c.container_id for c in cgroups.pod(pod.uid).containers} == {pod.app_id, pod.sandbox_id}


# Each app container's effective cpuset and memory nodes at capture time (README's cgroup table).
EFFECTIVE = {
    RT_V1: {"llm-a-0": ("2", "0"), "llm-b-0": ("8", "1"), "agent-0": ("0,4,6", "0-1"), "job-0": ("0,4,6", "0-1")},
    V2_612: {
        "llm-a-0": ("2-3", "0"),
        "llm-b-0": ("0-11", "1"),
        "agent-0": ("0-1,4-7", "0-1"),
        "job-0": ("0-1,4-7", "0-1"),
    },
    # llm-c-0 keeps cpuset.cpus 10-11, all offline: cgroup v2 gives it the parent's effective CPUs
    ISO_612: {"llm-a-0": ("2-3", "0"), "llm-b-0": ("8-9", "1"), "llm-c-0": ("0-9", "1"), "agent-0": ("0-1,4-7", "0-1")},
}


@pytest.mark.parametrize("name", list(CAPTURES))
def test_the_containers_are_joined_with_their_names_and_the_kubelets_assignment(completed, name):
    done = completed(name)

    joined = build_workloads(done.snapshot, REFERENCE)

    assert {(w.namespace, w.pod_name, w.container_name, w.container_id) for w in joined} == {
        (pod.namespace, pod.name, "app", pod.app_id) for pod in done.capture.pods
    }  # the sandboxes are recognised as such and left out
    by_pod = {w.pod_name: w for w in joined}
    for pod in done.capture.pods:
        workload = by_pod[pod.name]
        assert workload.exclusive_cpus == (parse_cpulist(pod.exclusive) if pod.exclusive else None)
        assert workload.memory_nodes == (frozenset({pod.memory_node}) if pod.memory_node is not None else frozenset())
        cpus, mems = EFFECTIVE[name][pod.name]
        assert (workload.cpus, workload.mems) == (parse_cpulist(cpus), parse_cpulist(mems))


def test_the_612_kernels_read_only_smp_affinity_is_kept_and_seen(completed):
    irqs = completed(V2_612).snapshot.get("irqs")

    assert irqs.read_only_modes_seen
    assert {irq for irq, found in irqs.irqs.items() if found.writable is False} == {0, 2, *range(25, 37)}
    assert irqs.irqs[24].writable  # the NVMe admin queue is not managed
    (nvme_on_cpu2,) = [
        f for f in completed(V2_612).evaluation.findings if f.check == "irq_on_isolated_cpu" and f.labels["irq"] == "33"
    ]
    assert "read-only" in nvme_on_cpu2.message


def test_the_v1_memory_numa_stat_is_read_in_pages(completed):
    done = completed(RT_V1)
    app = next(w for w in build_workloads(done.snapshot, REFERENCE) if w.pod_name == "llm-a-0")
    stat = (
        done.host.root
        / "sys/fs/cgroup/memory/kubepods"
        / f"pod{RT_PODS[0].uid}"
        / RT_PODS[0].app_id
        / "memory.numa_stat"
    ).read_text()
    pages = dict(item.split("=") for item in stat.splitlines()[0].split()[1:])  # "total=<p> N0=<p> N1=<p>"

    assert app.numa_bytes == {0: int(pages["N0"]) * 4096, 1: int(pages["N1"]) * 4096}
    assert app.numa_bytes[0] > 6 << 20  # the 6 MiB the container keeps, all on its node


@pytest.mark.parametrize(
    ("name", "numa_balancing", "thp", "swappiness"),
    [(RT_V1, None, None, 0), (V2_612, 1, "always", 60), (ISO_612, 0, "madvise", 0)],
)
def test_the_kernel_settings_are_read_as_the_kernel_has_them(completed, name, numa_balancing, thp, swappiness):
    kernel = completed(name).snapshot.get("kernel")

    assert (kernel.numa_balancing, kernel.thp_enabled, kernel.swappiness) == (numa_balancing, thp, swappiness)
    assert kernel.governors is None  # no cpufreq under QEMU
    assert kernel.problems == {}

