"""What the kubelet declares.

Its configuration, node registration, and the CPU, Memory and device managers' checkpoints
(sources/kubelet_config.py, kubelet_state.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numawatch.cpuset import CPUSet
from numawatch.model import frozen_map
from numawatch.taints import Taint


# --------------------------------------------------------------------------------------------------- kubelet config
@dataclass(frozen=True)
class NodeRegistration:
    """The taints and labels the node registers with, as the files numawatch reads declare them
    (sources/node_registration.py)."""

    taints: tuple[Taint, ...] | None = None  # None: no file numawatch reads declares them (set through the API)
    labels: Mapping[str, str] | None = None
    files: tuple[str, ...] = ()  # host paths of the files that declared them
    # Declarations the kubelet (or RKE2) would refuse, one line each naming the file: that half is then unknown.
    taint_problems: tuple[str, ...] = ()
    label_problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class KubeletConfig:
    """The kubelet's effective CPU/Memory/Topology Manager settings, with the kubelet's defaults applied."""

    flavor: str  # "rke2", "kubeadm" or "unknown"
    cpu_manager_policy: str = "none"
    cpu_manager_policy_options: Mapping[str, str] = field(default_factory=frozen_map)
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    topology_manager_policy_options: Mapping[str, str] = field(default_factory=frozen_map)
    memory_manager_policy: str = "None"
    reserved_cpus: CPUSet | None = None  # reservedSystemCPUs / --reserved-cpus; None: not set
    # NUMA node -> resource name ("memory", "hugepages-1Gi") -> bytes
    reserved_memory: Mapping[int, Mapping[str, int]] = field(default_factory=frozen_map)
    system_reserved: Mapping[str, str] = field(default_factory=frozen_map)
    kube_reserved: Mapping[str, str] = field(default_factory=frozen_map)
    root_dir: str | None = None
    files: tuple[str, ...] = ()  # every file that contributed, in the order applied (host paths)
    explicit: frozenset[str] = frozenset()  # KubeletConfiguration field names set by a file or flag
    # Inputs read leniently that the kubelet itself may reject, one line each naming the file (e.g. a quoted
    # kubelet-arg value, whose quotes RKE2 passes to the kubelet verbatim).
    warnings: tuple[str, ...] = ()
    registration: NodeRegistration = field(default_factory=NodeRegistration)


# --------------------------------------------------------------------------------------------------- kubelet state
# The kubelet's checkpoint rule sets, named by the versions that follow them (kubelet_version.py says what changed).
UNTIL_1_35 = "<=1.35"
SINCE_1_36 = ">=1.36"
ERAS = frozenset({UNTIL_1_35, SINCE_1_36})


@dataclass(frozen=True)
class KubeletVersion:
    major: int
    minor: int
    text: str  # as the origin spells it (matched against a version pattern, so safe to repeat in a message)
    origin: str  # where it was learnt, for messages: "RKE2's data directory /var/lib/rancher/rke2/data/..."


@dataclass(frozen=True)
class StateFileProblem:
    """A checkpoint file the kubelet cannot read back at its next start."""

    file: str  # host path
    reason: str  # "unparsable" or "checksum_mismatch"
    detail: str
    eras: frozenset[str] = ERAS  # the kubelet rule sets that refuse it (model ERAS)
    # False for the device manager's checkpoint: the kubelet logs the failure and starts without it.
    refuses_start: bool = True
    # Where the rule sets refuse it for different reasons, each one's (reason, detail); reason and detail above are
    # then the newest kubelet's reason and every detail.
    by_era: Mapping[str, tuple[str, str]] = field(default_factory=frozen_map)

    def for_era(self, era: str) -> tuple[str, str] | None:
        """(reason, detail) as a kubelet following rule set ``era`` refuses the file; None when it reads it back."""
        if era not in self.eras:
            return None
        return self.by_era.get(era, (self.reason, self.detail))


@dataclass(frozen=True)
class CpuManagerState:
    file: str
    version: int  # 1-4
    policy_name: str
    default_cpuset: CPUSet
    # v2+: pod UID -> container name -> exclusive CPUs; v1 files are keyed by container ID (see entries_v1)
    entries: Mapping[str, Mapping[str, CPUSet]]
    entries_v1: Mapping[str, CPUSet] = field(default_factory=frozen_map)
    # True: every kubelet version accepts the checksum; False: none does; None: they differ (StateFileProblem.eras)
    checksum_ok: bool | None = None
    # v3+ (PodLevelResourceManagers): pod UID -> CPUs held exclusively by the pod as a whole (podEntries)
    pod_entries: Mapping[str, CPUSet] = field(default_factory=frozen_map)

    @property
    def exclusive_cpus(self) -> CPUSet:
        """Every CPU the CPU Manager assigns exclusively: container, v1 and pod-level entries."""
        cpus: set[int] = set()
        for containers in self.entries.values():
            for assigned in containers.values():
                cpus |= assigned
        for assigned in self.entries_v1.values():
            cpus |= assigned
        for assigned in self.pod_entries.values():
            cpus |= assigned
        return frozenset(cpus)


@dataclass(frozen=True)
class MemoryTable:
    total: int
    system_reserved: int
    allocatable: int
    reserved: int
    free: int


@dataclass(frozen=True)
class MemoryNodeState:
    number_of_assignments: int
    memory_map: Mapping[str, MemoryTable]
    cells: tuple[int, ...]


@dataclass(frozen=True)
class MemoryBlock:
    numa_affinity: tuple[int, ...]
    type: str  # "memory", "hugepages-1Gi", ...
    size: int


@dataclass(frozen=True)
class MemoryManagerState:
    file: str
    version: int
    policy_name: str
    machine_state: Mapping[int, MemoryNodeState]
    entries: Mapping[str, Mapping[str, tuple[MemoryBlock, ...]]]  # pod UID -> container -> blocks
    checksum_ok: bool | None = None  # as CpuManagerState.checksum_ok
    # v2+ (PodLevelResourceManagers): pod UID -> blocks held by the pod as a whole (podEntries)
    pod_entries: Mapping[str, tuple[MemoryBlock, ...]] = field(default_factory=frozen_map)


@dataclass(frozen=True)
class DeviceAssignment:
    pod_uid: str
    container_name: str
    resource_name: str
    devices_per_numa: Mapping[int, tuple[str, ...]]  # NUMA node (-1: no topology) -> device IDs


@dataclass(frozen=True)
class DeviceCheckpoint:
    file: str
    entries: tuple[DeviceAssignment, ...]
    registered: Mapping[str, tuple[str, ...]]  # resource -> healthy device IDs
    checksum_ok: bool | None = None
    boot_id: str | None = None  # kernel boot_id when the kubelet wrote it (newest kubelets; outside the checksum)


@dataclass(frozen=True)
class KubeletState:
    cpu: CpuManagerState | None
    memory: MemoryManagerState | None
    devices: DeviceCheckpoint | None
    problems: tuple[StateFileProblem, ...] = ()
    rke2_version: KubeletVersion | None = None  # from RKE2's versioned data directory (kubelet_version.py)


def exclusive_cpus(state: KubeletState | None) -> CPUSet:
    """Every CPU the kubelet's CPU Manager assigns exclusively (container, v1 and pod-level entries)."""
    if state is None or state.cpu is None:
        return frozenset()
    return state.cpu.exclusive_cpus


# --------------------------------------------------------------------------------------------------- pod resources
@dataclass(frozen=True)
class ResourceDevices:
    """Devices of one resource a container holds, by NUMA node (-1: the device plugin gave them no topology), as
    the kubelet's pod-resources API lists them (sources/pod_resources.py)."""

    resource_name: str
    devices_per_numa: Mapping[int, tuple[str, ...]]


@dataclass(frozen=True)
class ContainerResources:
    """What the live kubelet says one container holds."""

    exclusive_cpus: CPUSet  # empty: the shared pool
    devices: tuple[ResourceDevices, ...] = ()
    memory_blocks: tuple[MemoryBlock, ...] = ()  # the Memory Manager's blocks (Static policy only)


@dataclass(frozen=True)
class PodResources:
    """The kubelet's pod-resources answer (``List``, ``GetAllocatableResources``, ``Get``): what it has handed out
    now, from its own memory, where the checkpoint files say what it wrote down (``KubeletState``)."""

    socket: str  # the socket's host path
    # (namespace, pod name) -> container name -> what it holds: the API names pods, never their UIDs
    pods: Mapping[tuple[str, str], Mapping[str, ContainerResources]]
    # GetAllocatableResources: what the kubelet may hand out; None where it does not serve it (before 1.21)
    allocatable_cpus: CPUSet | None = None
    allocatable_devices: tuple[ResourceDevices, ...] = ()
    allocatable_memory: tuple[MemoryBlock, ...] = ()
    # Whether the kubelet serves Get (1.27+ with the KubeletPodResourcesGet gate); None: no pod to ask about
    get_served: bool | None = None
