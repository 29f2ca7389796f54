"""Checks of the kubelet's declared configuration and checkpoint files against intent and the machine.

Knobs 1, 3, 4, 5, 6 and 9 of the reference profile (DOMAIN.md): the CPU, Topology and Memory Manager policies,
the reserved CPUs that must equal the host's housekeeping CPUs, and the checkpoint files that make the kubelet
refuse to start after a policy or machine change (kubelet.md §1.3, §2.3, §2.4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from numawatch.checks.check import Check, Finding, NotEvaluated, require, require_known
from numawatch.cpuset import CPUSet, format_cpulist
from numawatch.host import Host
from numawatch.hosttext import k8s_label_shown, pod_uid_shown, shown
from numawatch.inputs import KUBELET_CONFIG, KUBELET_STATE, KUBERNETES_API, TOPOLOGY
from numawatch.intent import REFERENCE, Intent
from numawatch.kubelet_version import era_of, era_text, running_kubelet_version
from numawatch.model.kubelet import (
    ERAS,
    CpuManagerState,
    KubeletConfig,
    KubeletState,
    KubeletVersion,
    MemoryManagerState,
    MemoryTable,
    StateFileProblem,
)
from numawatch.model.topology import NumaNode, Topology
from numawatch.quantity import hugepage_resource_name

DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"
RKE2_CONFIG = "/etc/rancher/rke2/config.yaml"


# --------------------------------------------------------------------------------------------- remediation text
def set_setting(config: KubeletConfig, flag: str, field_name: str, value: str) -> str:
    """The edit that sets one kubelet setting, in the form the node's flavour uses."""
    if config.flavor == "rke2":
        return f'set kubelet-arg "{flag}={value}" in {RKE2_CONFIG}'
    kubelet_file = config.files[0] if config.files else f"{DEFAULT_KUBELET_ROOT}/config.yaml"
    return f"set {field_name}: {value} in {kubelet_file} (or --{flag}={value})"


def restart_steps(config: KubeletConfig, change: str | None, state_file: str | None = None) -> str:
    """Apply a change with a kubelet restart; when a checkpoint pins the old value, delete it while stopped."""
    service = "rke2-agent" if config.flavor == "rke2" else "kubelet"
    note = " (rke2-server instead of rke2-agent on a server node)" if config.flavor == "rke2" else ""
    if state_file is None:
        return f"{change}, then systemctl restart {service}{note}"
    steps = ["drain the node", f"systemctl stop {service}"]
    if change:
        steps.append(change)
    steps += [f"rm {state_file}", f"systemctl start {service}", "uncordon the node"]
    return ", ".join(steps) + note


def kubelet_root(config: KubeletConfig) -> str:
    return (config.root_dir or DEFAULT_KUBELET_ROOT).rstrip("/")


# --------------------------------------------------------------------------------------------- policies
@dataclass(frozen=True)
class _Setting:
    check_id: str
    flag: str
    field_name: str
    config_attr: str
    intent_attr: str
    state_file: str | None  # checkpoint that records the value: changing it requires deleting the file
    knob: str
    severity: str
    summary: str
    why: str


_SETTINGS = (
    _Setting(
        "kubelet_cpu_manager_policy",
        "cpu-manager-policy",
        "cpuManagerPolicy",
        "cpu_manager_policy",
        "cpu_manager_policy",
        "cpu_manager_state",
        "1",
        "critical",
        "The kubelet's CPU Manager policy differs from intent (without static nothing is ever pinned).",
        "without the static policy no container gets exclusive CPUs and nothing else aligns",
    ),
    _Setting(
        "kubelet_topology_manager_policy",
        "topology-manager-policy",
        "topologyManagerPolicy",
        "topology_manager_policy",
        "topology_manager_policy",
        None,
        "3",
        "critical",
        "The kubelet's Topology Manager policy differs from intent (best-effort admits misaligned pods silently).",
        "only single-numa-node refuses a pod whose CPUs, memory and GPUs do not fit on one NUMA node",
    ),
    _Setting(
        "kubelet_topology_manager_scope",
        "topology-manager-scope",
        "topologyManagerScope",
        "topology_manager_scope",
        "topology_manager_scope",
        None,
        "4",
        "warning",
        "The kubelet's Topology Manager scope differs from intent (container scope lets a sidecar split a pod).",
        "with scope container each container is aligned on its own and a pod can end up on two NUMA nodes",
    ),
    _Setting(
        "kubelet_memory_manager_policy",
        "memory-manager-policy",
        "memoryManagerPolicy",
        "memory_manager_policy",
        "memory_manager_policy",
        "memory_manager_state",
        "5",
        "warning",
        "The kubelet's Memory Manager policy differs from intent (without Static memory is not bound to the node).",
        "without the Static policy a pinned container's memory is not bound to its CPUs' NUMA node",
    ),
)


def _policy_check(setting: _Setting) -> Check:
    def run(host: Host, intent: Intent) -> Iterator[Finding]:
        config: KubeletConfig = require(host, "kubelet_config")
        value = getattr(config, setting.config_attr)
        expected = getattr(intent, setting.intent_attr)
        if value == expected:
            return
        default = "" if setting.field_name in config.explicit else " (not set: the kubelet's default)"
        message = f"kubelet {setting.flag} is {value!r}{default}, intent is {expected!r}"
        if expected == getattr(REFERENCE, setting.intent_attr):
            message += f": {setting.why}"  # the reason is the reference profile's; a custom intent has its own
        change = set_setting(config, setting.flag, setting.field_name, expected)
        state_file = f"{kubelet_root(config)}/{setting.state_file}" if setting.state_file else None
        remediation = restart_steps(config, change, state_file)
        if setting.config_attr == "memory_manager_policy" and expected == "Static" and not config.reserved_memory:
            remediation += (
                ' (Static also needs reserved-memory per NUMA node, e.g. "reserved-memory=0:memory=4Gi;'
                '1:memory=4Gi", summing to kube-reserved + system-reserved + eviction-hard memory)'
            )
        yield CHECK_BY_ID[setting.check_id].finding(
            intent, {"setting": setting.flag, "value": value, "expected": expected}, message, remediation
        )

    return Check(
        id=setting.check_id,
        severity=setting.severity,
        summary=setting.summary,
        remediation=f'set "{setting.flag}=<intended value>" in the kubelet configuration and restart the kubelet',
        run=run,
        inputs=(KUBELET_CONFIG,),
        knob=setting.knob,
    )


# --------------------------------------------------------------------------------------------- reserved CPUs
def check_reserved_cpus(host: Host, intent: Intent) -> Iterator[Finding]:
    config: KubeletConfig = require(host, "kubelet_config")
    topology: Topology | None = None
    if intent.reserved_cpus is not None:
        expected = intent.reserved_cpus
        expected_what = f"the intent's reserved CPUs ({intent.source})"
    else:
        topology = require_known(require(host, "topology"), "isolated")
        if not topology.isolated:
            raise NotEvaluated(
                "the node isolates no CPU (isolcpus= is absent), so there are no housekeeping CPUs to compare "
                "with; set kubelet.reservedCPUs in the intent file"
            )
        expected = topology.housekeeping
        expected_what = "the housekeeping CPUs (online minus isolcpus)"
    if topology is None:
        topology = host.topology
    # Offline CPUs are compared on neither side: a reserved-cpus that still names CPUs gone offline (SMT switched off)
    # is kubelet_state_stale's finding, since it is what stops the kubelet at its next start.
    online = topology.online if topology is not None else None
    reserved = config.reserved_cpus
    if online is not None:
        expected = expected & online
        reserved = reserved & online if reserved is not None else None
    if reserved == expected:
        return
    if reserved is None:
        detail = "reserved-cpus is not set, so the static CPU Manager picks its own reserved CPUs"
        cpu_reserved = [
            f"{name}={values['cpu']}"
            for name, values in (("kube-reserved", config.kube_reserved), ("system-reserved", config.system_reserved))
            if "cpu" in values
        ]
        if cpu_reserved:
            detail += f" (as many as {' + '.join(cpu_reserved)}), lowest-numbered cores first"
    else:
        detail = f"reserved-cpus is {format_cpulist(reserved)}" if reserved else "reserved-cpus names no online CPU"
        if online is not None and config.reserved_cpus != reserved:
            detail += " (its online CPUs)"
        if topology is not None and topology.isolated:
            isolated_reserved = reserved & topology.isolated
            if isolated_reserved:
                detail += f"; isolated CPUs {format_cpulist(isolated_reserved)} are kept for system daemons"
        handed_out = expected - reserved
        if handed_out:
            detail += f"; CPUs {format_cpulist(handed_out)} can be given exclusively to pods although they are not"
            detail += " isolated" if intent.reserved_cpus is None else " meant for pods"
    message = f"kubelet reserved CPUs differ from {expected_what} {format_cpulist(expected)}: {detail}"
    change = set_setting(config, "reserved-cpus", "reservedSystemCPUs", format_cpulist(expected))
    remediation = restart_steps(config, change, f"{kubelet_root(config)}/cpu_manager_state")
    yield RESERVED_CPUS.finding(
        intent,
        {"cpus": format_cpulist(reserved) if reserved is not None else "", "expected": format_cpulist(expected)},
        message,
        remediation,
    )


# --------------------------------------------------------------------------------------------- stale state files
@dataclass(frozen=True)
class StaleState:
    file: str
    reason: str
    detail: str
    change: str | None = None  # a kubelet setting that must change too (remediation wording)
    until: str = "the file is removed"  # what ends the kubelet's crash loop
    refuses_start: bool = True  # False: the kubelet starts without the file (the device manager's checkpoint)
    # Set when only some kubelet versions refuse the file and the node's is unknown: which ones do (judged leniently).
    refused_by: frozenset[str] | None = None


# What every refused checkpoint does to the kubelet (policy_static.go Start -> cpu_manager.go Start ->
# container_manager_linux.go Start -> kubelet.go initializeRuntimeDependentModules: os.Exit(1)); the memory manager's
# Start fails the same way.
_CRASH_LOOP = 'it exits at start ("Failed to start ContainerManager") and is restarted in a loop, the node NotReady'


# A device checkpoint the kubelet cannot read back (devicemanager/manager.go Start): it goes on without it.
_DEVICES_FORGOTTEN = (
    'its device manager logs "Continue after failing to read checkpoint file" and starts without it, forgetting '
    "which devices the running pods hold, so it can hand them to new pods as well"
)


def state_file_problems(problems: Iterable[StateFileProblem], version: KubeletVersion | None) -> list[StaleState]:
    """The checkpoint problems the node's kubelet has: each file is judged by that version's rules. With the version
    unknown, a file that only some versions refuse is kept, marked with the versions that do (reported leniently)."""
    era = era_of(version)
    stale: list[StaleState] = []
    for problem in problems:
        reason, detail = problem.reason, problem.detail
        if era is not None:
            verdict = problem.for_era(era)
            if verdict is None:
                continue
            reason, detail = verdict
        refused_by = problem.eras if era is None and problem.eras != ERAS else None
        if version is not None and problem.eras != ERAS:
            detail += f" (kubelet {version.text}, from {version.origin})"
        stale.append(
            StaleState(problem.file, reason, detail, refuses_start=problem.refuses_start, refused_by=refused_by)
        )
    return stale


def check_state_stale(host: Host, intent: Intent) -> Iterator[Finding]:
    config: KubeletConfig = require(host, "kubelet_config")
    state: KubeletState = require(host, "kubelet_state")
    topology: Topology = require(host, "topology")
    # The API is optional: where it is not read (or down) the version comes from RKE2's data directory or the intent.
    cluster = host.kubernetes_api
    node_reported = cluster.node.kubelet_version if cluster is not None else None
    version = running_kubelet_version(state.rke2_version, intent.kubelet_version, node_reported)
    problems = state_file_problems(state.problems, version)
    if state.cpu is not None:
        problems.extend(cpu_state_problems(state.cpu, config, topology))
    elif config.cpu_manager_policy == "static":
        problems.extend(_reserved_offline(config, topology, None))
    # The Memory Manager's machine state is computed from each node's MemTotal and huge pages: with one of those
    # files unreadable, whether the checkpoint still matches is unknown, never "changed".
    memory_unknown = None
    if state.memory is not None and config.memory_manager_policy == "Static":
        memory_unknown = topology.problem("meminfo") or topology.problem("hugepages")
    if state.memory is not None and memory_unknown is None:
        problems.extend(memory_state_problems(state.memory, config, topology))
    if not problems and memory_unknown is not None:
        raise NotEvaluated(memory_unknown)
    seen: set[tuple[str, str]] = set()
    for problem in problems:
        file = kubelet_file(config, problem.file)
        if (file, problem.reason) in seen:
            continue
        seen.add((file, problem.reason))
        severity = None
        if problem.reason == "reserved_cpus_offline":
            remove = f"{kubelet_root(config)}/cpu_manager_state"
            message = f"the kubelet will not start with {file} at its next restart: {problem.detail}"
        elif not problem.refuses_start:
            remove, severity = file, "warning"
            message = f"the kubelet cannot read back {file} at its next restart: {problem.detail}; {_DEVICES_FORGOTTEN}"
        elif problem.refused_by is not None:
            remove, severity = file, "warning"
            message = (
                f"{era_text(problem.refused_by)} will refuse to start with {file}: {problem.detail}; other kubelet "
                "versions read it back, and this node's is unknown (no Node object, RKE2 data directory or intent "
                "kubelet.version names it), so it is judged leniently: set kubelet.version in the intent"
            )
        else:
            remove = file
            message = (
                f"the kubelet will refuse to start with {file} at its next restart: {problem.detail}; "
                f"{_CRASH_LOOP}, until {problem.until}"
            )
        yield STATE_STALE.finding(
            intent,
            {"file": file, "reason": problem.reason},
            message,
            restart_steps(config, problem.change, remove),
            severity,
        )


_STATE_FILES = ("cpu_manager_state", "memory_manager_state", "device-plugins/kubelet_internal_checkpoint")


def kubelet_file(config: KubeletConfig, read_as: str) -> str:
    """A kubelet checkpoint as the kubelet names it (``<root-dir>/cpu_manager_state``), whatever path numawatch read
    it under (``--path.kubelet`` may point anywhere: a mount of the kubelet's directory in numawatch's container
    is not a path on the host); any other file as the source named it (the host's path)."""
    for relative in _STATE_FILES:
        if read_as == relative or read_as.endswith("/" + relative):
            return f"{kubelet_root(config)}/{relative}"
    return read_as


def cpu_state_problems(state: CpuManagerState, config: KubeletConfig, topology: Topology) -> list[StaleState]:
    """What the kubelet's CPU Manager would reject in its checkpoint at start (policy_static.go validateState), and a
    reserved-cpus that names CPUs which are not online (NewStaticPolicy, validateState)."""
    if state.policy_name != config.cpu_manager_policy:
        return [
            StaleState(
                state.file,
                "policy_mismatch",
                f'configured policy "{config.cpu_manager_policy}" differs from state checkpoint policy '
                f'"{state.policy_name}"',
            )
        ]
    if config.cpu_manager_policy != "static":
        return []
    assigned = [cpus for containers in state.entries.values() for cpus in containers.values()]
    assigned.extend(state.entries_v1.values())
    if not assigned and not state.default_cpuset:
        return _reserved_offline(config, topology, None)  # an empty state is initialised afresh
    problems: list[StaleState] = []
    reserved = config.reserved_cpus
    strict = config.cpu_manager_policy_options.get("strict-cpu-reservation", "").lower() == "true"
    # Reserved CPUs that are not online are missing from any checkpoint written since: that is reserved-cpus'
    # fault, reported by _reserved_offline (which quotes this very message), not the checkpoint's.
    if reserved is not None and not strict and not (reserved & topology.online) <= state.default_cpuset:
        problems.append(
            StaleState(
                state.file,
                "reserved_cpus_missing",
                f'not all reserved cpus "{format_cpulist(reserved)}" are present in defaultCpuSet '
                f'"{format_cpulist(state.default_cpuset)}"',
            )
        )
    if reserved is not None and strict and reserved & state.default_cpuset:
        problems.append(
            StaleState(
                state.file,
                "reserved_cpus_in_default",
                f'strictly reserved cpus "{format_cpulist(reserved & state.default_cpuset)}" are present in '
                f'defaultCpuSet "{format_cpulist(state.default_cpuset)}"',
            )
        )
    for pod_uid, containers in state.entries.items():
        for container, cpus in containers.items():
            if cpus & state.default_cpuset:
                problems.append(
                    StaleState(
                        state.file,
                        "assignment_overlaps_default",
                        f"pod {pod_uid_shown(pod_uid)}, container {k8s_label_shown(container)} cpuset "
                        f'"{format_cpulist(cpus)}" overlaps with '
                        f'default cpuset "{format_cpulist(state.default_cpuset)}"',
                    )
                )
    # The kubelet's CPUs are cadvisor's, which skips offline CPUs: the online ones, less the reserved ones under
    # strict-cpu-reservation (validateState's allCPUs).
    available = topology.online - reserved if strict and reserved is not None else topology.online
    known = state.default_cpuset.union(*assigned)
    if strict and reserved is not None:
        known -= reserved & state.default_cpuset  # already reserved_cpus_in_default; the kubelet stops at that one
    if known != available:
        changed = StaleState(
            state.file,
            "online_cpus_changed",
            f'current set of available CPUs "{format_cpulist(available)}" doesn\'t match with CPUs in state '
            f'"{format_cpulist(known)}"{_cpus_changed(known, available, topology)}',
        )
        problems.append(changed)
        folded = _reserved_offline(config, topology, changed)
        if folded:
            problems[-1] = folded[0]
    else:
        problems.extend(_reserved_offline(config, topology, None))
    return problems


def _cpus_changed(known: CPUSet, available: CPUSet, topology: Topology) -> str:
    """Which CPUs the checkpoint names that the machine no longer offers, and the reverse, in words."""
    gone = known - available
    offline = gone & topology.offline
    absent = gone - frozenset(topology.cpus)
    parts = []
    if offline:
        parts.append(
            f"CPUs {format_cpulist(offline)} of the checkpoint went offline after the kubelet assigned them (SMT "
            "switched off or CPUs unplugged); until its restart the kubelet keeps its assignments, and the kernel has "
            "already taken them out of every cpuset"
        )
    if absent:
        parts.append(f"CPUs {format_cpulist(absent)} of the checkpoint are not present on this machine")
    if gone - offline - absent:
        parts.append(f"CPUs {format_cpulist(gone - offline - absent)} of the checkpoint are not available to it")
    added = available - known
    if added:
        parts.append(f"CPUs {format_cpulist(added)} are online but not in the checkpoint")
    return ": " + "; ".join(parts) if parts else ""


def _reserved_offline(config: KubeletConfig, topology: Topology, changed: StaleState | None) -> list[StaleState]:
    """reserved-cpus naming CPUs that are not online stops the kubelet too; folded into the checkpoint's
    online_cpus_changed finding when there is one (one procedure fixes both), else a finding of its own."""
    reserved = config.reserved_cpus
    if config.cpu_manager_policy != "static" or reserved is None or reserved <= topology.online:
        return []
    gone = reserved - topology.online
    keep = reserved & topology.online
    change = set_setting(config, "reserved-cpus", "reservedSystemCPUs", format_cpulist(keep or topology.housekeeping))
    what = "offline" if gone <= topology.offline else "not online"
    why = (
        f"reserved-cpus {format_cpulist(reserved)} names CPUs {format_cpulist(gone)}, which are {what}, and that "
        "stops the kubelet by itself: a current one exits creating its CPU Manager (\"unable to build the reserved "
        'physical CPUs from the reserved set: unknown CPU ID: N"), an older one at the start after cpu_manager_state '
        'is rebuilt without them ("not all reserved cpus ... are present in defaultCpuSet")'
    )
    until = "reserved-cpus names online CPUs only"
    if changed is not None:
        return [
            StaleState(
                changed.file,
                changed.reason,
                f"{changed.detail}; and {why}",
                change=change,
                until=f"the file is removed and {until}",
            )
        ]
    return [StaleState(_config_file(config), "reserved_cpus_offline", f"{why}; it fails until {until}", change)]


def _config_file(config: KubeletConfig) -> str:
    """The file that sets reserved-cpus, as set_setting names it."""
    if config.flavor == "rke2":
        return RKE2_CONFIG
    return config.files[0] if config.files else f"{DEFAULT_KUBELET_ROOT}/config.yaml"


def memory_state_problems(state: MemoryManagerState, config: KubeletConfig, topology: Topology) -> list[StaleState]:
    """What the kubelet's Memory Manager would reject in its checkpoint at start (kubelet.md §2.3, §2.4)."""
    if state.policy_name != config.memory_manager_policy:
        return [
            StaleState(
                state.file,
                "policy_mismatch",
                f'[memorymanager] configured policy "{config.memory_manager_policy}" differs from state checkpoint '
                f'policy "{state.policy_name}"',
            )
        ]
    if config.memory_manager_policy != "Static":
        return []
    if any(node.mem_total_bytes is None for node in topology.nodes.values()):
        return []  # cannot compute what the kubelet would: the topology source could not read MemTotal
    difference = machine_state_difference(state, config.reserved_memory, topology.nodes)
    if difference is None:
        return []
    return [
        StaleState(
            state.file,
            "machine_state_changed",
            f"[memorymanager] the expected machine state is different from the real one: {difference}",
        )
    ]


@dataclass
class _Table:
    total: int
    system_reserved: int
    allocatable: int
    reserved: int = 0
    free: int = 0


@dataclass
class _NodeState:
    assignments: int = 0
    cells: tuple[int, ...] = ()
    tables: dict[str, _Table] = field(default_factory=dict)


_UINT64 = 1 << 64


def default_machine_state(
    nodes: Mapping[int, NumaNode], reserved_memory: Mapping[int, Mapping[str, int]]
) -> dict[int, _NodeState]:
    """The Memory Manager's machine state for a node without assignments (policy_static.go getDefaultMachineState)."""
    machine: dict[int, _NodeState] = {}
    for node_id, node in nodes.items():
        reserved = reserved_memory.get(node_id, {})
        state = _NodeState(cells=(node_id,))
        hugepage_bytes = 0
        for size_kb, pages in node.hugepages_total.items():
            name = hugepage_resource_name(size_kb)
            total = pages * size_kb * 1024
            system_reserved = reserved.get(name, 0)
            allocatable = (total - system_reserved) % _UINT64  # Go's uint64 arithmetic
            state.tables[name] = _Table(total, system_reserved, allocatable, 0, allocatable)
            hugepage_bytes += total
        total = node.mem_total_bytes or 0
        system_reserved = reserved.get("memory", 0)
        allocatable = (total - system_reserved - hugepage_bytes) % _UINT64
        state.tables["memory"] = _Table(total, system_reserved, allocatable, 0, allocatable)
        machine[node_id] = state
    return machine


def machine_state_difference(
    state: MemoryManagerState, reserved_memory: Mapping[int, Mapping[str, int]], nodes: Mapping[int, NumaNode]
) -> str | None:
    """Replay the checkpoint's assignments on the machine's default state and compare, as the kubelet does.

    Returns the first difference in words, or None when the kubelet would accept the checkpoint
    (policy_static.go validateState / areMachineStatesEqual, kubelet.md §2.4).
    """
    if not state.machine_state:
        if any(containers for containers in state.entries.values()):
            return "the machine state is empty but the checkpoint has memory assignments"
        return None  # an empty machine state is initialised afresh
    expected = default_machine_state(nodes, reserved_memory)
    for pod_uid, containers in state.entries.items():
        for container, blocks in containers.items():
            for block in blocks:
                remaining = block.size
                for node_id in block.numa_affinity:
                    node = expected.get(node_id)
                    if node is None:
                        return (
                            f"pod {pod_uid_shown(pod_uid)} container {k8s_label_shown(container)} is assigned NUMA "
                            f"node {node_id}, which does not exist"
                        )
                    node.assignments += 1
                    node.cells = tuple(block.numa_affinity)
                    table = node.tables.get(block.type)
                    if table is None:
                        return (
                            f"pod {pod_uid_shown(pod_uid)} container {k8s_label_shown(container)} is assigned "
                            f"{shown(block.type)} on NUMA node {node_id}, "
                            "which the node does not have"
                        )
                    if remaining == 0 or table.free == 0:
                        continue
                    taken = min(table.free, remaining)
                    table.reserved += taken
                    table.free -= taken
                    remaining -= taken
    return _compare_machine_states(state.machine_state, expected)


def _compare_machine_states(recorded: Mapping[int, Any], expected: dict[int, _NodeState]) -> str | None:
    if set(recorded) != set(expected):
        return f"NUMA nodes {_ids(recorded)} in the checkpoint, {_ids(expected)} on the machine"
    for node_id in sorted(recorded):
        ours, theirs = expected[node_id], recorded[node_id]
        if theirs.number_of_assignments != ours.assignments:
            return (
                f"NUMA node {node_id}: {theirs.number_of_assignments} assignments in the checkpoint, "
                f"{ours.assignments} from its entries"
            )
        if set(theirs.cells) != set(ours.cells):
            return f"NUMA node {node_id}: cells {list(theirs.cells)} in the checkpoint, {list(ours.cells)} expected"
        if set(theirs.memory_map) != set(ours.tables):
            return (
                f"NUMA node {node_id}: resources {sorted(theirs.memory_map)} in the checkpoint, "
                f"{sorted(ours.tables)} on the machine"
            )
        for name in sorted(ours.tables):
            table: MemoryTable = theirs.memory_map[name]
            mine = ours.tables[name]
            for label, have, want in (
                ("total", table.total, mine.total),
                ("systemReserved", table.system_reserved, mine.system_reserved),
                ("allocatable", table.allocatable, mine.allocatable),
            ):
                if have != want:
                    return f"NUMA node {node_id} {name} {label} is {have} in the checkpoint, {want} on the machine"
            # Free and reserved memory are compared summed over the node's cells: a multi-node assignment may take
            # from its nodes in any order (Go map iteration), only the group total is stable.
            have_totals = _cell_totals(theirs.cells, name, recorded, lambda node, n: node.memory_map.get(n))
            want_totals = _cell_totals(theirs.cells, name, expected, lambda node, n: node.tables.get(n))
            if have_totals != want_totals:
                return (
                    f"NUMA node {node_id} {name} free/reserved is {have_totals[0]}/{have_totals[1]} in the checkpoint, "
                    f"{want_totals[0]}/{want_totals[1]} from its entries"
                )
    return None


def _cell_totals(
    cells: tuple[int, ...], name: str, nodes: Mapping[int, Any], table_of: Callable[[Any, str], Any]
) -> tuple[int, int]:
    free = reserved = 0
    for cell in cells:
        node = nodes.get(cell)
        table = table_of(node, name) if node is not None else None
        if table is not None:
            free += table.free
            reserved += table.reserved
    return free, reserved


def _ids(nodes: Mapping[int, Any]) -> str:
    return ",".join(str(n) for n in sorted(nodes)) or "none"


# --------------------------------------------------------------------------------------------- registry
_POLICY_CHECKS = tuple(_policy_check(setting) for setting in _SETTINGS)

RESERVED_CPUS = Check(
    id="kubelet_reserved_cpus_mismatch",
    severity="warning",
    summary="The kubelet's reserved CPUs differ from the housekeeping CPUs (online minus isolcpus) or from intent.",
    remediation='set "reserved-cpus=<housekeeping CPUs>" in the kubelet configuration and restart the kubelet',
    run=check_reserved_cpus,
    inputs=(KUBELET_CONFIG, TOPOLOGY),
    knob="6",
)

STATE_STALE = Check(
    id="kubelet_state_stale",
    severity="critical",
    summary="A kubelet checkpoint or reserved-cpus the kubelet will refuse at its next start (node then NotReady).",
    remediation="drain the node, stop the kubelet, rm /var/lib/kubelet/cpu_manager_state, start",
    run=check_state_stale,
    inputs=(KUBELET_CONFIG, KUBELET_STATE, KUBERNETES_API, TOPOLOGY),
    knob="1",
)

CHECKS: tuple[Check, ...] = (*_POLICY_CHECKS, RESERVED_CPUS, STATE_STALE)
CHECK_BY_ID = {check.id: check for check in CHECKS}
