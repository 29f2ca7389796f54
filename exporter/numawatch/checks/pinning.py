"""Checks of what containers actually got against what the kubelet assigned and what intent asks.

Knobs 2, 3, 5, 6, 10, h2 and h6 of the reference profile (DOMAIN.md). Every check here reads the workload join
(workloads.py); the "actual" side is always the cgroup's effective cpuset, mems and memory.numa_stat, because
the kubelet never reads cgroups back and a cpuset rewritten by someone else stays wrong (kubelet.md §0.3).

The "assigned" side is always the kubelet's assignment intersected with the online CPUs. When a CPU goes offline
(SMT switched off, ``echo 0 > cpuN/online``) after the kubelet assigned it, the kernel removes it from every cpuset
(v1: ``cpuset.cpus`` and ``cpuset.effective_cpus``; v2: ``cpuset.cpus.effective`` only, ``cpuset.cpus`` keeps it),
while the running kubelet keeps its assignment unchanged and never re-applies it. A shrunken cpuset is then what the
kubelet's assignment means on this machine, not drift; the checkpoint that still names offline CPUs is reported
once, by ``kubelet_state_stale``, and no message here names an offline CPU as missing, outside isolcpus or split.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain

from numawatch.checks.check import Check, Finding, NotEvaluated, require, require_known
from numawatch.checks.kubelet import kubelet_root, restart_steps, set_setting
from numawatch.cpuset import CPUSet, format_cpulist
from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.inputs import KUBELET_CONFIG, MEMORY_PLACEMENT, TOPOLOGY, WORKLOADS
from numawatch.intent import Intent
from numawatch.model.kubelet import CpuManagerState, KubeletState
from numawatch.model.topology import Topology
from numawatch.model.workloads import QOS_GUARANTEED
from numawatch.perpod import pod_judge, pod_values
from numawatch.workloads import Workload, build_workloads

_QOS_NAMES = {"guaranteed": "Guaranteed", "burstable": "Burstable", "besteffort": "BestEffort"}

GUARANTEED_HOWTO = (
    "give every container and init container of the pod requests equal to limits for cpu and memory, with an "
    'integer cpu (cpu: "16", not "15500m"), then recreate the pod'
)


def workloads(host: Host, intent: Intent) -> tuple[Workload, ...]:
    require(host, "cgroups")
    return build_workloads(host, intent)


def online_cpus(host: Host) -> CPUSet | None:
    """The CPUs that can run anything now: the topology's online CPUs, else the kubepods cgroup's effective CPUs
    (which the kernel keeps to the online ones too); None when neither is known."""
    if host.topology is not None:
        return host.topology.online
    if host.cgroups is not None:
        return host.cgroups.root_cpus_effective
    return None


def assigned_online(cpus: CPUSet, online: CPUSet | None) -> CPUSet:
    """The part of a kubelet assignment that a cpuset can hold now (all of it when the online CPUs are unknown)."""
    return cpus if online is None else cpus & online


def require_cpu_state(host: Host) -> CpuManagerState:
    state: KubeletState = require(host, "kubelet_state")
    if state.cpu is None:
        raise NotEvaluated("the kubelet has no readable cpu_manager_state, so exclusive CPUs are unknown")
    return state.cpu


def nodes_text(nodes: Iterable[int]) -> str:
    return ",".join(str(n) for n in sorted(nodes))


def qos_name(qos: str) -> str:
    return _QOS_NAMES.get(qos, qos)


@dataclass(frozen=True)
class CpuNodes:
    """What the NUMA alignment checks read of the topology, the context of their per-pod judges (``cpu_nodes``):
    which CPUs each node holds, the online CPUs and the nodes without CPUs."""

    by_node: tuple[tuple[int, CPUSet], ...]  # (node, its CPUs), as ``_cpus_by_node``
    online: CPUSet
    cpuless: frozenset[int]  # nodes without online CPUs (HBM, CXL, a Grace-class node's GPU memory)
    # ``nodes_of``'s answers per CPU set: the ~860 containers hold a handful of distinct sets.
    found: dict[CPUSet, frozenset[int]] = field(default_factory=dict, init=False, compare=False, repr=False)

    def nodes_of(self, cpus: CPUSet) -> frozenset[int]:
        """``Topology.nodes_of``: the same answer from each node's CPU set, one set test per node instead of a lookup
        per CPU (a shared pool holds hundreds)."""
        nodes = self.found.get(cpus)
        if nodes is None:
            nodes = self.found[cpus] = frozenset(node for node, members in self.by_node if not members.isdisjoint(cpus))
        return nodes


def cpu_nodes(host: Host, intent: Intent) -> CpuNodes:
    """The Host's ``CpuNodes`` (NotEvaluated without a topology whose CPU lists are known)."""
    topology: Topology = require(host, "topology")
    return CpuNodes(_host_cpus_by_node(host), topology.online, _cpuless_nodes(topology))


@derivation("pinning.cpus_by_node", inputs=(TOPOLOGY,))
def _host_cpus_by_node(host: Host) -> tuple[tuple[int, CPUSet], ...]:
    topology = host.topology
    return () if topology is None else _cpus_by_node(topology)


def _cpus_by_node(topology: Topology) -> tuple[tuple[int, CPUSet], ...]:
    """(node, its CPUs) for every node some CPU of the topology says it sits on (``Cpu.numa_node``, as node_of)."""
    members: dict[int, set[int]] = defaultdict(set)
    for cpu_id, cpu in topology.cpus.items():
        if cpu.numa_node is not None:
            members[cpu.numa_node].add(cpu_id)
    return tuple((node, frozenset(cpus)) for node, cpus in members.items())


def _pin_reason(workload: Workload, intent: Intent) -> str:
    if workload.gpus and intent.pin_gpu_containers:
        return f"holds {', '.join(sorted({g.resource for g in workload.gpus}))}"
    return "matches the intent's pinning.pods"


# --------------------------------------------------------------------------------------------- pod QoS
def check_pod_not_guaranteed(host: Host, intent: Intent) -> Iterator[Finding]:
    require(host, "cgroups")
    yield from chain.from_iterable(pod_values(host, intent, NOT_GUARANTEED_PODS))


def gpu_pods(host: Host, intent: Intent) -> frozenset[str]:
    """The UIDs of the pods the device checkpoint gives a GPU (none when the intent does not pin GPU containers): a pod
    holding a GPU must be pinned even when its containers' names (needed for the per-container join) are unknown."""
    state = host.kubelet_state
    if not intent.pin_gpu_containers or state is None or state.devices is None:
        return frozenset()
    return frozenset(e.pod_uid for e in state.devices.entries if intent.is_gpu_resource(e.resource_name))


def not_guaranteed(gpu_pods: frozenset[str], intent: Intent, members: tuple[Workload, ...]) -> tuple[Finding, ...]:
    """The finding of one pod UID (its pod cgroups together) that must be pinned and is not Guaranteed."""
    first = members[0]
    if first.qos == QOS_GUARANTEED:
        return ()
    reasons = [
        f"container {w.container_name or w.container_id[:12]} {_pin_reason(w, intent)}" for w in members if w.must_pin
    ]
    if not reasons and first.pod_uid in gpu_pods:
        reasons = ["it holds a GPU"]
    if not reasons:
        return ()
    return (
        POD_NOT_GUARANTEED.finding(
            intent,
            first.pod_labels,
            f"pod {first.pod_display} must be pinned ({'; '.join(reasons)}) but its QoS class is "
            f"{qos_name(first.qos)}: the CPU Manager gives exclusive CPUs only to Guaranteed pods with an integer "
            "CPU request, so it runs on the shared pool",
        ),
    )


# --------------------------------------------------------------------------------------------- exclusive CPUs
def check_container_not_exclusive(host: Host, intent: Intent) -> Iterator[Finding]:
    found = workloads(host, intent)
    cpu_state = require_cpu_state(host)
    config = host.kubelet_config
    policy = config.cpu_manager_policy if config is not None else cpu_state.policy_name
    for workload in found:
        if not workload.must_pin or workload.exclusive_cpus:
            continue
        if workload.container_name is None and workload.pod_uid in cpu_state.entries:
            continue  # the pod has exclusive entries but we cannot tell which is this container's
        if workload.qos != QOS_GUARANTEED:
            cause = f"its pod is {qos_name(workload.qos)}, not Guaranteed"
            remediation: str | None = GUARANTEED_HOWTO
        elif policy != "static":
            cause = f'the CPU Manager policy is "{policy}", not "static"'
            remediation = (
                restart_steps(
                    config,
                    set_setting(config, "cpu-manager-policy", "cpuManagerPolicy", "static"),
                    f"{kubelet_root(config)}/cpu_manager_state",
                )
                if config is not None
                else None
            )
        else:
            cause = "its CPU request is not an integer (a Guaranteed pod with fractional CPUs shares the pool)"
            remediation = GUARANTEED_HOWTO
        cpus = f" and runs on {format_cpulist(workload.cpus)}" if workload.cpus is not None else ""
        yield CONTAINER_NOT_EXCLUSIVE.finding(
            intent,
            workload.labels,
            f"container {workload.display} must be pinned ({_pin_reason(workload, intent)}) but has no exclusive "
            f"CPUs{cpus}: {cause}",
            remediation,
        )


def check_cpuset_drift(host: Host, intent: Intent) -> Iterator[Finding]:
    require(host, "cgroups")
    cpu_state = require_cpu_state(host)
    config = host.kubelet_config
    policy = config.cpu_manager_policy if config is not None else cpu_state.policy_name
    if policy != "static" or cpu_state.policy_name != "static":
        raise NotEvaluated(f'the CPU Manager policy is "{policy}": the kubelet assigns no cpusets to compare with')
    yield from chain.from_iterable(pod_values(host, intent, DRIFTED_CPUSETS))


@dataclass(frozen=True)
class Assignment:
    """What every container's cpuset is compared with besides its own exclusive CPUs (``cpuset_drifts``' context)."""

    shared: CPUSet  # the CPU Manager's shared pool (defaultCpuSet)
    online: CPUSet | None  # ``online_cpus``
    # Whether a cpuset equals what is expected, per pair: comparing two equal sets of hundreds of CPUs walks them all,
    # and ~860 containers hold a handful of distinct sets (mostly the shared pool).
    same: dict[tuple[CPUSet, CPUSet], bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    def equal(self, cpus: CPUSet, expected: CPUSet) -> bool:
        pair = (cpus, expected)
        equal = self.same.get(pair)
        if equal is None:
            equal = self.same[pair] = cpus == expected
        return equal


def assignment(host: Host, intent: Intent) -> Assignment:
    return Assignment(require_cpu_state(host).default_cpuset, online_cpus(host))


def cpu_entries(host: Host, intent: Intent) -> Mapping[str, object]:
    """The CPU Manager's entries by pod UID, for ``has_entries``."""
    return require_cpu_state(host).entries


def has_entries(entries: Mapping[str, object], pod: tuple[Workload, ...]) -> bool:
    """Whether the CPU Manager holds exclusive entries for the pod's UID (a pod's own input to ``cpuset_drifts``)."""
    return pod[0].pod_uid in entries


def cpuset_drifts(
    assigned_to: Assignment, intent: Intent, pod: tuple[Workload, ...], entries_held: bool
) -> tuple[Finding, ...]:
    """The findings of one pod's containers whose cpuset is not their assignment's online part."""
    found: list[Finding] = []
    for workload in pod:
        cpus = workload.cpus
        if cpus is None:
            continue
        if workload.container_name is None and entries_held:
            continue  # the pod has exclusive entries but we cannot tell which is this container's
        if workload.exclusive_cpus:
            assigned, what = workload.exclusive_cpus, "its exclusive CPUs"
        else:
            assigned, what = assigned_to.shared, "the shared pool (defaultCpuSet)"
        expected = assigned_online(assigned, assigned_to.online)
        if assigned_to.equal(cpus, expected):
            continue
        if not expected:
            # Every assigned CPU went offline: a v2 cpuset then falls back to its parent's CPUs (a v1 one empties
            # and its tasks move to the parent cgroup). The container is unpinned until it gets online CPUs again.
            found.append(
                CPUSET_DRIFT.finding(
                    intent,
                    {**workload.labels, "cpus": format_cpulist(cpus)},
                    f"container {workload.display} runs on CPUs {format_cpulist(cpus)}: every one of {what} is "
                    "offline, so the kernel runs it on its parent cgroup's CPUs",
                    "bring the CPUs back online, or rebuild the kubelet's CPU state (kubelet_state_stale names the "
                    "file) and recreate the pod so the kubelet assigns it online CPUs",
                )
            )
            continue
        extra, missing = cpus - expected, expected - cpus
        detail = []
        if extra:
            detail.append(f"{format_cpulist(extra)} not assigned to it")
        if missing:
            detail.append(f"{format_cpulist(missing)} missing")
        online_part = " (those of its assignment that are online)" if expected != assigned else ""
        found.append(
            CPUSET_DRIFT.finding(
                intent,
                {**workload.labels, "cpus": format_cpulist(cpus), "expected": format_cpulist(expected)},
                f"container {workload.display} runs on CPUs {format_cpulist(cpus)} but the kubelet assigned "
                f"{what} {format_cpulist(expected)}{online_part} ({', '.join(detail)})",
            )
        )
    return tuple(found)


def check_exclusive_overlap(host: Host, intent: Intent) -> Iterator[Finding]:
    found = workloads(host, intent)
    require_cpu_state(host)
    # Only exclusive CPUs of running containers count: entries of exited init containers are reused by their pod.
    if not any(w.exclusive_cpus for w in found):
        return
    yield from chain.from_iterable(pod_values(host, intent, OVERLAPS))


@dataclass(frozen=True)
class Owners:
    """Every running container given exclusive CPUs (``overlaps``' context): (its container ID, itself as findings
    name it, the online part of its exclusive CPUs), in the join's order."""

    owned: tuple[tuple[str, str, CPUSet], ...]
    # Whether a cpuset intrudes on another's exclusive CPUs, per (cpus, its own exclusive CPUs): most containers
    # hold one of a handful of CPU sets (the shared pool).
    intrudes: dict[tuple[CPUSet, CPUSet], bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    @cached_property
    def held(self) -> dict[str, CPUSet]:
        return {container_id: cpus for container_id, _, cpus in self.owned}

    @cached_property
    def everything(self) -> CPUSet:
        return frozenset().union(*self.held.values())

    def intruding(self, cpus: CPUSet, own: CPUSet) -> bool:
        pair = (cpus, own)
        intruding = self.intrudes.get(pair)
        if intruding is None:
            intruding = self.intrudes[pair] = bool((cpus & self.everything) - own)
        return intruding


def owners(host: Host, intent: Intent) -> Owners:
    """The Host's ``Owners``: an offline CPU is in no cpuset, so it never overlaps; comparing the online part says
    so in the code too."""
    found = [w for w in build_workloads(host, intent) if w.exclusive_cpus]
    online = online_cpus(host)
    held = {w.container_id: assigned_online(w.exclusive_cpus or frozenset(), online) for w in found}
    return Owners(tuple((owner.container_id, owner.display, held[owner.container_id]) for owner in found))


def overlaps(owners: Owners, intent: Intent, pod: tuple[Workload, ...]) -> tuple[Finding, ...]:
    """The findings of one pod's containers that can run on CPUs given exclusively to another container."""
    found: list[Finding] = []
    for workload in pod:
        if workload.cpus is None:
            continue
        own = owners.held.get(workload.container_id, frozenset())
        if not owners.intruding(workload.cpus, own):
            continue
        intruded = []
        overlap: set[int] = set()
        for container_id, display, cpus in owners.owned:
            if container_id == workload.container_id:
                continue
            shared = workload.cpus & cpus
            if shared:
                intruded.append(f"{display} ({format_cpulist(shared)})")
                overlap |= shared
        if not overlap:
            continue
        why = ""
        if workload.exclusive_cpus and not own:
            why = (
                ": every CPU of its own exclusive assignment is offline, so the kernel runs it on its parent "
                "cgroup's CPUs"
            )
        found.append(
            EXCLUSIVE_OVERLAP.finding(
                intent,
                {**workload.labels, "cpus": format_cpulist(overlap)},
                f"container {workload.display} can run on CPUs {format_cpulist(overlap)} given exclusively to "
                f"{', '.join(intruded)}{why}",
            )
        )
    return tuple(found)


# --------------------------------------------------------------------------------------------- NUMA alignment
def check_numa_split(host: Host, intent: Intent) -> Iterator[Finding]:
    require(host, "cgroups")
    require(host, "topology")
    require_cpu_state(host)
    # A container whose every exclusive CPU went offline runs on its parent's CPUs: where those span nodes, its
    # threads really are split now (as they really overlap other containers' CPUs), whatever caused it.
    if intent.topology_manager_scope != "pod":
        yield from chain.from_iterable(pod_values(host, intent, SPLIT_CONTAINERS))
        return
    nodes = cpu_nodes(host, intent)
    online = nodes.online
    by_pod: dict[str, list[Workload]] = defaultdict(list)
    for workload in (w for w in workloads(host, intent) if w.pinned):
        by_pod[workload.pod_uid].append(workload)
    for members in by_pod.values():
        split = nodes.nodes_of(frozenset().union(*(_cpus(w, online) for w in members)))
        if len(split) < 2:
            continue
        parts = [
            f"{w.container_name or w.container_id[:12]} on {nodes_text(nodes.nodes_of(_cpus(w, online)))}"
            for w in members
        ]
        yield NUMA_SPLIT.finding(
            intent,
            {**members[0].pod_labels, "numa_node": nodes_text(split)},
            f"pod {members[0].pod_display} has its pinned CPUs on NUMA nodes {nodes_text(split)} "
            f"({'; '.join(parts)})",
        )


def split_containers(nodes: CpuNodes, intent: Intent, pod: tuple[Workload, ...]) -> tuple[Finding, ...]:
    """The findings of one pod's pinned containers whose CPUs span NUMA nodes (topology-manager-scope container)."""
    found: list[Finding] = []
    for workload in pod:
        if not workload.pinned:
            continue
        cpus = _cpus(workload, nodes.online)
        split = nodes.nodes_of(cpus)
        if len(split) < 2:
            continue
        found.append(
            NUMA_SPLIT.finding(
                intent,
                {**workload.labels, "numa_node": nodes_text(split)},
                f"container {workload.display} has its CPUs {format_cpulist(cpus)} on NUMA nodes {nodes_text(split)}",
            )
        )
    return tuple(found)


def _cpus(workload: Workload, online: CPUSet | None) -> CPUSet:
    """Where the container can run: the cgroup's effective cpuset, else the online part of what the kubelet
    assigned (an offline CPU runs nothing, so it splits nothing)."""
    if workload.cpus is not None:
        return workload.cpus
    return assigned_online(workload.exclusive_cpus or frozenset(), online)


def check_gpu_numa_mismatch(host: Host, intent: Intent) -> Iterator[Finding]:
    require(host, "cgroups")
    topology: Topology = require(host, "topology")
    state: KubeletState = require(host, "kubelet_state")
    if state.devices is None:
        raise NotEvaluated("the kubelet has no readable device-plugin checkpoint, so GPU assignments are unknown")
    if len(topology.nodes) < 2:
        return
    # Per pod: its workloads (their GPUs come from the device checkpoint through the join) and where CPUs sit.
    yield from chain.from_iterable(pod_values(host, intent, GPU_MISMATCHES))


def gpu_mismatches(nodes: CpuNodes, intent: Intent, pod: tuple[Workload, ...]) -> tuple[Finding, ...]:
    """The findings of one pod's containers running on CPUs off their GPUs' NUMA node."""
    found: list[Finding] = []
    for workload in pod:
        if not workload.gpus or workload.cpus is None:
            continue
        cpus_on = nodes.nodes_of(workload.cpus)
        for gpu in workload.gpus:
            node = gpu.numa_node
            if node is None or cpus_on <= {node}:
                continue
            where = "its exclusive CPUs" if workload.pinned else "the shared pool"
            uuid = f" ({gpu.uuid})" if gpu.uuid and gpu.uuid != gpu.label else ""
            found.append(
                GPU_NUMA_MISMATCH.finding(
                    intent,
                    {**workload.labels, "gpu": gpu.label, "numa_node": str(node)},
                    f"container {workload.display} uses GPU {gpu.label}{uuid} on NUMA node {node} but runs on "
                    f"{where} {format_cpulist(workload.cpus)} (NUMA nodes {nodes_text(cpus_on)})",
                )
            )
    return tuple(found)


def check_memory_numa_mismatch(host: Host, intent: Intent) -> Iterator[Finding]:
    require(host, "cgroups")
    require(host, "topology")
    if intent.memory_manager_policy != "Static":
        raise NotEvaluated(f'intent does not bind memory (memoryManagerPolicy "{intent.memory_manager_policy}")')
    # Per pod: its workloads (their Memory Manager blocks come through the join) and where CPUs sit.
    yield from chain.from_iterable(pod_values(host, intent, MEMORY_MISMATCHES))


def memory_mismatches(nodes: CpuNodes, intent: Intent, pod: tuple[Workload, ...]) -> tuple[Finding, ...]:
    """The findings of one pod's pinned or memory-bound containers that may allocate memory off their CPUs' nodes or
    off the Memory Manager's."""
    found: list[Finding] = []
    for workload in pod:
        if not (workload.pinned or workload.memory_blocks) or workload.mems is None or workload.cpus is None:
            continue
        cpus_on = nodes.nodes_of(workload.cpus)
        # A GPU holder may be allowed the CPU-less nodes that hold GPU memory (Grace-class nodes): they are no CPU's
        # local memory, so they cannot be remote to its CPUs.
        mems = workload.mems - nodes.cpuless if workload.gpus else workload.mems
        problems = []
        # Only exclusive CPUs must share the memory's nodes. A shared-pool container of a Guaranteed pod (a
        # fractional-CPU sidecar) legitimately runs anywhere while the Memory Manager binds its memory to one node.
        # Memory on fewer nodes than the CPUs (CPUs split over two nodes, memory bound to one) is not remote memory:
        # container_numa_split reports the CPUs.
        if workload.pinned and not mems <= cpus_on:
            problems.append(f"its CPUs are on NUMA nodes {nodes_text(cpus_on)}")
        assigned = workload.memory_nodes
        if assigned and mems != assigned:
            problems.append(f"the Memory Manager assigned NUMA nodes {nodes_text(assigned)}")
        if not problems:
            continue
        remediation = None
        if assigned:
            # The Memory Manager did assign nodes, so something rewrote cpuset.mems after the kubelet wrote it.
            remediation = (
                "find what rewrote cpuset.mems (systemctl daemon-reload, an NRI/DRA plugin, a hand edit), then restart "
                "the container (kubectl delete pod) so the kubelet applies the Memory Manager's nodes again"
            )
        found.append(
            MEMORY_NUMA_MISMATCH.finding(
                intent,
                {**workload.labels, "numa_node": nodes_text(workload.mems)},
                f"container {workload.display} may allocate memory on NUMA nodes {nodes_text(workload.mems)} but "
                f"{' and '.join(problems)}",
                remediation,
            )
        )
    return tuple(found)


def check_memory_remote(host: Host, intent: Intent) -> Iterator[Finding]:
    require(host, "cgroups")
    require(host, "topology")
    # Per pod: its workloads (memory.numa_stat included) and where CPUs sit; the intent's thresholds are the intent's.
    pods = pod_values(host, intent, REMOTE_MEMORY)
    if any(candidate for candidate, _, _ in pods) and not any(measured for _, measured, _ in pods):
        raise NotEvaluated("no pinned container's memory.numa_stat could be read")
    for _, _, findings in pods:
        yield from findings


def remote_memory(
    nodes: CpuNodes, intent: Intent, pod: tuple[Workload, ...]
) -> tuple[bool, bool, tuple[Finding, ...]]:
    """(whether the pod has a container to measure, whether one was measured, the findings of its containers with
    too much of their resident memory on nodes remote to their CPUs)."""
    candidates = [w for w in pod if (w.pinned or w.must_pin) and w.cpus is not None]
    measured = [w for w in candidates if w.numa_bytes is not None]
    found: list[Finding] = []
    for workload in measured:
        local = nodes.nodes_of(_cpus(workload, nodes.online))
        numa_bytes = workload.numa_bytes or {}
        total = sum(numa_bytes.values())
        # GPU memory a GPU holder reaches through the driver sits on CPU-less nodes on Grace-class nodes: not remote.
        skipped = nodes.cpuless if workload.gpus else frozenset()
        remote_nodes = {n: b for n, b in numa_bytes.items() if n not in local and n not in skipped and b > 0}
        remote = sum(remote_nodes.values())
        if not total or remote < intent.remote_memory_min_bytes or remote / total <= intent.remote_memory_ratio:
            continue
        found.append(
            MEMORY_REMOTE.finding(
                intent,
                {**workload.labels, "numa_node": nodes_text(remote_nodes)},
                f"container {workload.display} has {_size(remote)} of its {_size(total)} resident memory "
                f"({remote / total:.0%}) on NUMA nodes {nodes_text(remote_nodes)}, remote to its CPUs on "
                f"{nodes_text(local)} (threshold {intent.remote_memory_ratio:.0%})",
            )
        )
    return bool(candidates), bool(measured), tuple(found)


def _cpuless_nodes(topology: Topology) -> frozenset[int]:
    """NUMA nodes without online CPUs (HBM, CXL, a Grace-class node's GPU memory)."""
    return frozenset(node for node, numa in topology.nodes.items() if not numa.cpus)


def _size(value: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def check_outside_isolated(host: Host, intent: Intent) -> Iterator[Finding]:
    found = workloads(host, intent)
    topology: Topology = require_known(require(host, "topology"), "isolated")
    require_cpu_state(host)
    isolated = topology.isolated
    if not isolated:
        raise NotEvaluated("isolcpus is absent: the node isolates no CPU")
    config = host.kubelet_config
    remediation = None
    if config is not None:
        remediation = (
            restart_steps(
                config,
                set_setting(config, "reserved-cpus", "reservedSystemCPUs", format_cpulist(topology.housekeeping)),
                f"{kubelet_root(config)}/cpu_manager_state",
            )
            + ", then recreate the pod"
        )
    for workload in found:
        if not workload.exclusive_cpus:
            continue
        # isolated is online CPUs only: an offline exclusive CPU that isolcpus lists is not "outside" it.
        outside = (workload.exclusive_cpus & topology.online) - isolated
        if not outside:
            continue
        yield OUTSIDE_ISOLATED.finding(
            intent,
            {**workload.labels, "cpus": format_cpulist(outside)},
            f"container {workload.display} was given exclusive CPUs {format_cpulist(outside)} that are not "
            f"isolated (isolcpus {format_cpulist(isolated)}): the kernel still schedules other work and ticks there",
            remediation,
        )


# --------------------------------------------------------------------------------------------- registry
POD_NOT_GUARANTEED = Check(
    id="pod_not_guaranteed",
    severity="critical",
    summary="A pod that must be pinned is not QoS Guaranteed, so the CPU Manager never pins it.",
    remediation=GUARANTEED_HOWTO,
    run=check_pod_not_guaranteed,
    inputs=(WORKLOADS,),
    knob="2",
)
CONTAINER_NOT_EXCLUSIVE = Check(
    id="container_not_exclusive",
    severity="critical",
    summary="A container that must be pinned has no exclusive CPUs.",
    remediation=GUARANTEED_HOWTO + "; keep cpu-manager-policy=static",
    run=check_container_not_exclusive,
    inputs=(WORKLOADS, KUBELET_CONFIG),
    knob="2",
)
CPUSET_DRIFT = Check(
    id="container_cpuset_drift",
    severity="critical",
    summary="A container's effective cpuset differs from what the kubelet assigned (it never corrects this).",
    remediation=(
        "find what rewrote the cpuset (systemctl daemon-reload, an NRI/DRA plugin, a hand edit) and stop it, then "
        "restart the container (kubectl delete pod) so the kubelet applies its assignment again"
    ),
    run=check_cpuset_drift,
    inputs=(WORKLOADS, KUBELET_CONFIG),
    knob="10",
)
EXCLUSIVE_OVERLAP = Check(
    id="exclusive_cpu_overlap",
    severity="critical",
    summary="A CPU given exclusively to one container is in another container's cpuset.",
    remediation=(
        "restore the intruding container's cpuset (restart it so the kubelet applies the shared pool) and find what "
        "widened it (systemctl daemon-reload, an NRI/DRA plugin, a hand edit)"
    ),
    run=check_exclusive_overlap,
    inputs=(WORKLOADS,),
    knob="10",
)
NUMA_SPLIT = Check(
    id="container_numa_split",
    severity="critical",
    summary="A pinned container's (scope pod: pod's) CPUs span more than one NUMA node.",
    remediation=(
        'set kubelet-arg "topology-manager-policy=single-numa-node" and "topology-manager-scope=pod" so the kubelet '
        "refuses misaligned pods, size the pod to fit one NUMA node, then recreate it"
    ),
    run=check_numa_split,
    inputs=(WORKLOADS,),
    knob="3",
)
GPU_NUMA_MISMATCH = Check(
    id="container_gpu_numa_mismatch",
    severity="critical",
    summary="A container's CPUs are not on its GPUs' NUMA node.",
    remediation=(
        'make the pod Guaranteed with integer CPUs, set kubelet-arg "topology-manager-policy=single-numa-node" and '
        "run the GPU device plugin with NUMA topology, then recreate the pod"
    ),
    run=check_gpu_numa_mismatch,
    inputs=(WORKLOADS,),
    knob="3",
)
MEMORY_NUMA_MISMATCH = Check(
    id="container_memory_numa_mismatch",
    severity="warning",
    summary="A pinned container may allocate memory on NUMA nodes other than its CPUs' (or the Memory Manager's).",
    remediation=(
        'set kubelet-arg "memory-manager-policy=Static" with "reserved-memory=0:memory=4Gi;1:memory=4Gi" (drain, '
        "stop the kubelet, rm /var/lib/kubelet/memory_manager_state, start), then recreate the pod"
    ),
    run=check_memory_numa_mismatch,
    inputs=(WORKLOADS, MEMORY_PLACEMENT),
    knob="5",
)
MEMORY_REMOTE = Check(
    id="container_memory_remote",
    severity="warning",
    summary="Too much of a pinned container's resident memory sits on NUMA nodes remote to its CPUs.",
    remediation=(
        'bind memory with kubelet-arg "memory-manager-policy=Static" (numactl --membind outside Kubernetes) and '
        "restart the container so its memory is allocated on its CPUs' node; keep kernel.numa_balancing=0"
    ),
    run=check_memory_remote,
    inputs=(WORKLOADS, MEMORY_PLACEMENT),
    knob="h2",
)
OUTSIDE_ISOLATED = Check(
    id="container_outside_isolated",
    severity="warning",
    summary="A pinned container's exclusive CPUs are not isolated CPUs.",
    remediation=(
        'set kubelet-arg "reserved-cpus=<housekeeping CPUs>" (online minus isolcpus) so only isolated CPUs are '
        "handed out: drain, stop the kubelet, rm /var/lib/kubelet/cpu_manager_state, start, recreate the pod"
    ),
    run=check_outside_isolated,
    inputs=(WORKLOADS, KUBELET_CONFIG),
    knob="h6",
)

CHECKS: tuple[Check, ...] = (
    POD_NOT_GUARANTEED,
    CONTAINER_NOT_EXCLUSIVE,
    CPUSET_DRIFT,
    EXCLUSIVE_OVERLAP,
    NUMA_SPLIT,
    GPU_NUMA_MISMATCH,
    MEMORY_NUMA_MISMATCH,
    MEMORY_REMOTE,
    OUTSIDE_ISOLATED,
)

# --------------------------------------------------------------------------------------------- per-pod judges
# What each pod-by-pod check reads besides a pod's workloads and the intent is its judge's context (numawatch.perpod).
NOT_GUARANTEED_PODS = pod_judge(
    f"findings.{POD_NOT_GUARANTEED.id}", context=gpu_pods, judge=not_guaranteed, by_uid=True, reads_numa_bytes=False
)
DRIFTED_CPUSETS = pod_judge(
    f"findings.{CPUSET_DRIFT.id}",
    context=assignment,
    judge=cpuset_drifts,
    pod_inputs=cpu_entries,
    pod_input=has_entries,
    reads_numa_bytes=False,
)
OVERLAPS = pod_judge(f"findings.{EXCLUSIVE_OVERLAP.id}", context=owners, judge=overlaps, reads_numa_bytes=False)
SPLIT_CONTAINERS = pod_judge(
    f"findings.{NUMA_SPLIT.id}", context=cpu_nodes, judge=split_containers, reads_numa_bytes=False
)
GPU_MISMATCHES = pod_judge(
    f"findings.{GPU_NUMA_MISMATCH.id}", context=cpu_nodes, judge=gpu_mismatches, reads_numa_bytes=False
)
MEMORY_MISMATCHES = pod_judge(
    f"findings.{MEMORY_NUMA_MISMATCH.id}", context=cpu_nodes, judge=memory_mismatches, reads_numa_bytes=False
)
REMOTE_MEMORY = pod_judge(f"findings.{MEMORY_REMOTE.id}", context=cpu_nodes, judge=remote_memory)
