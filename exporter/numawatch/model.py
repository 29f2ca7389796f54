"""The typed, frozen snapshot of a host that sources produce and checks judge.

Sources turn files into these types and make no judgement; checks read them and never touch files. Fields that a
source could not determine are ``None`` (unknown), never a made-up default, so a check can tell "unknown" from
"empty". Sets of CPUs and NUMA nodes are ``frozenset[int]`` (see cpuset.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from numawatch.cpuset import EMPTY, CPUSet
from numawatch.taints import Taint


def frozen_map(items: Mapping | None = None) -> Mapping:
    """An immutable mapping, so a snapshot cannot be changed after a source built it."""
    return MappingProxyType(dict(items or {}))


# --------------------------------------------------------------------------------------------------- topology
@dataclass(frozen=True)
class Cpu:
    id: int
    online: bool
    socket: int | None  # topology/physical_package_id; None for offline CPUs (topology/ is gone)
    core: int | None  # topology/core_id, unique only within a socket
    numa_node: int | None  # the nodeN that lists it; None when no node does
    siblings: CPUSet = EMPTY  # topology/thread_siblings_list (SMT siblings including itself)


@dataclass(frozen=True)
class NumaNode:
    id: int
    # The online CPUs numawatch maps to this node: nodeN/cpulist, less the CPUs a lower node's cpulist claims too
    # (firmware that makes nodes overlap; a CPU belongs to the lowest node that claims it, as hwloc decides).
    cpus: CPUSet
    distances: tuple[int, ...] = ()  # nodeN/distance, indexed by node position in Topology.node_ids; () unknown
    mem_total_bytes: int | None = None  # nodeN/meminfo MemTotal
    # huge page size in kB -> number of pages reserved on this node (nodeN/hugepages/hugepages-<kB>kB/nr_hugepages)
    hugepages_total: Mapping[int, int] = field(default_factory=frozen_map)
    # nodeN/cpulist as the file says it; None when it equals ``cpus`` (the usual case), so snapshots stay small.
    listed_cpus: CPUSet | None = None

    @property
    def claimed_cpus(self) -> CPUSet:
        """Every CPU nodeN/cpulist names, including those a lower node claims as well."""
        return self.cpus if self.listed_cpus is None else self.listed_cpus


@dataclass(frozen=True)
class IsolationParams:
    """CPU isolation as requested on the kernel command line and as the kernel reports it took effect."""

    cmdline: str = ""
    isolcpus: CPUSet | None = None  # cpus of isolcpus= (None: parameter absent)
    isolcpus_flags: tuple[str, ...] = ()  # e.g. ("domain", "managed_irq"); "domain" is implied without flags
    nohz_full: CPUSet | None = None
    rcu_nocbs: CPUSet | None = None
    irqaffinity: CPUSet | None = None
    sys_isolated: CPUSet | None = None  # /sys/devices/system/cpu/isolated (domain-isolated CPUs in effect)
    sys_nohz_full: CPUSet | None = None  # /sys/devices/system/cpu/nohz_full
    # hugepages= requests on the command line: size in kB -> pages (default_hugepagesz applied)
    cmdline_hugepages: Mapping[int, int] = field(default_factory=frozen_map)
    # Command-line values the kernel would have rejected (bad CPU list, bad size), one line each naming the file and
    # the parameter; the parameter itself is then left as None/absent, as the kernel ignores it too.
    problems: tuple[str, ...] = ()


# Keys of Topology.problems: the optional topology files that can be unreadable on their own (see the topology
# source's docstring for which file is which).
TOPOLOGY_OPTIONAL_FILES = (
    "present",
    "possible",
    "cpu_topology",
    "distance",
    "meminfo",
    "hugepages",
    "isolated",
    "nohz_full",
)


@dataclass(frozen=True)
class Topology:
    cpus: Mapping[int, Cpu]  # every present CPU, online or not
    online: CPUSet
    nodes: Mapping[int, NumaNode]
    isolation: IsolationParams
    # An optional file (a key of TOPOLOGY_OPTIONAL_FILES) that was malformed -> one line naming the file and what was
    # wrong. What it would have told is unknown (None) and only what depends on it is not evaluated.
    problems: Mapping[str, str] = field(default_factory=frozen_map)
    # Whether the kernel has NUMA at all (a node/ directory); False: one synthetic node 0 holding every CPU.
    numa: bool = True

    def problem(self, key: str) -> str | None:
        """Why what the optional file ``key`` tells is unknown, or None when it is known.

        The isolated and nohz_full CPUs stay known with their sysfs file unreadable when the command line says them
        (``isolcpus=``, ``nohz_full=``): that is what numawatch uses first.
        """
        if key == "isolated" and self.isolation.isolcpus is not None:
            return None
        if key == "nohz_full" and self.isolation.nohz_full is not None:
            return None
        return self.problems.get(key)

    @property
    def offline(self) -> CPUSet:
        return frozenset(self.cpus) - self.online

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.nodes))

    @property
    def sockets(self) -> frozenset[int]:
        return frozenset(c.socket for c in self.cpus.values() if c.socket is not None)

    @property
    def isolated(self) -> CPUSet:
        """CPUs isolated from the scheduler: isolcpus= as asked, else what sysfs says took effect."""
        if self.isolation.isolcpus is not None:
            return self.isolation.isolcpus & self.online
        return (self.isolation.sys_isolated or EMPTY) & self.online

    @property
    def housekeeping(self) -> CPUSet:
        """Online CPUs that are not isolated: where the kubelet's reserved CPUs and daemons belong."""
        return self.online - self.isolated

    def node_of(self, cpu: int) -> int | None:
        found = self.cpus.get(cpu)
        return found.numa_node if found else None

    def nodes_of(self, cpus: CPUSet) -> frozenset[int]:
        """The NUMA nodes the given CPUs sit on (unknown CPUs are ignored)."""
        nodes = set()
        for cpu in cpus:
            node = self.node_of(cpu)
            if node is not None:
                nodes.add(node)
        return frozenset(nodes)


# --------------------------------------------------------------------------------------------------- cgroups
QOS_GUARANTEED = "guaranteed"
QOS_BURSTABLE = "burstable"
QOS_BESTEFFORT = "besteffort"


@dataclass(frozen=True)
class ContainerCgroup:
    container_id: str
    runtime: str  # "containerd", "crio" or "unknown"
    cgroup_path: str  # relative to the cgroup mount (v2) or the cpuset hierarchy (v1), e.g. kubepods.slice/...
    cpus_effective: CPUSet | None  # cpuset.cpus.effective (v2) / cpuset.effective_cpus (v1)
    mems_effective: frozenset[int] | None  # cpuset.mems.effective / cpuset.effective_mems
    # resident memory per NUMA node in bytes from memory.numa_stat (v2: anon+file; v1: total= pages x page size)
    numa_bytes: Mapping[int, int] | None = None
    is_sandbox: bool = False  # the pause container; left out of every container check
    pids: tuple[int, ...] = ()  # a few PIDs from cgroup.procs (bounded), for process-level sources


@dataclass(frozen=True)
class PodCgroup:
    uid: str  # with dashes, as the API server spells it
    qos: str  # QOS_*
    cgroup_path: str
    containers: tuple[ContainerCgroup, ...]


@dataclass(frozen=True)
class Cgroups:
    version: int  # 1 or 2
    driver: str  # "systemd" or "cgroupfs"
    kubepods_path: str  # relative path of the kubepods cgroup, e.g. "kubepods.slice" or "kubepods"
    pods: tuple[PodCgroup, ...]
    root_cpus_effective: CPUSet | None = None  # cpus of the kubepods cgroup

    def pod(self, uid: str) -> PodCgroup | None:
        for pod in self.pods:
            if pod.uid == uid:
                return pod
        return None


# --------------------------------------------------------------------------------------------------- names
@dataclass(frozen=True)
class ContainerIdentity:
    container_id: str
    pod_uid: str | None
    namespace: str | None
    pod_name: str | None
    container_name: str | None
    container_type: str | None  # "container" or "sandbox" (io.kubernetes.cri.container-type)
    origin: str  # where it was learnt: "containerd", "crio", "pod-logs"


@dataclass(frozen=True)
class PodIdentity:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class Names:
    containers: Mapping[str, ContainerIdentity]  # by container ID
    pods: Mapping[str, PodIdentity]  # by pod UID
    # pod UID -> container names seen in /var/log/pods/<ns>_<pod>_<uid>/<container>/ (fallback join)
    pod_log_containers: Mapping[str, tuple[str, ...]] = field(default_factory=frozen_map)


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
    cgroup_driver: str | None = None
    cgroup_root: str | None = None
    root_dir: str | None = None
    files: tuple[str, ...] = ()  # every file that contributed, in the order applied (host paths)
    explicit: frozenset[str] = frozenset()  # KubeletConfiguration field names set by a file or flag
    # Inputs read leniently that the kubelet itself may reject, one line each naming the file (e.g. a quoted
    # kubelet-arg value, whose quotes RKE2 passes to the kubelet verbatim).
    warnings: tuple[str, ...] = ()
    registration: NodeRegistration = field(default_factory=NodeRegistration)


# --------------------------------------------------------------------------------------------------- kubelet state
@dataclass(frozen=True)
class StateFileProblem:
    """A checkpoint file the kubelet would refuse at its next start because it cannot be read back."""

    file: str  # host path
    reason: str  # "unparsable" or "checksum_mismatch"
    detail: str


@dataclass(frozen=True)
class CpuManagerState:
    file: str
    version: int  # 1-4
    policy_name: str
    default_cpuset: CPUSet
    # v2+: pod UID -> container name -> exclusive CPUs; v1 files are keyed by container ID (see entries_v1)
    entries: Mapping[str, Mapping[str, CPUSet]]
    entries_v1: Mapping[str, CPUSet] = field(default_factory=frozen_map)
    checksum_ok: bool | None = None  # None: cannot be verified (e.g. v3 podEntries)
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
    checksum_ok: bool | None = None
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


# --------------------------------------------------------------------------------------------------- GPUs (sysfs)
@dataclass(frozen=True)
class GpuDevice:
    pci_address: str  # "0000:18:00.0", as sysfs names it
    numa_node: int | None  # sysfs numa_node; None when the kernel says -1
    local_cpus: CPUSet | None  # local_cpulist
    vendor_id: str  # "0x10de", "0x1002", "0x1da3"
    device_id: str
    class_code: str  # "0x030200" (3D controller), "0x030000" (VGA), "0x038000", "0x120000" (accelerator)
    # The device's stable id from its driver: NVIDIA's "GPU-<uuid>" (/proc/driver/nvidia/gpus/<bdf>/information),
    # AMD's unique_id (16 hex digits), Gaudi's serial number; None when the driver does not say.
    uuid: str | None = None
    model: str | None = None
    # Attribute ("numa_node", "local_cpulist") -> why its value is unknown although the kernel may know it (a
    # malformed file, named). numa_node None without a problem is the kernel's -1.
    problems: Mapping[str, str] = field(default_factory=frozen_map)
    vendor: str = "nvidia"  # "nvidia", "amd" or "habana" (gpus_sysfs.VENDORS): the vendor label

    def cpu_node(self, topology: Topology | None) -> int | None:
        """The NUMA node whose CPUs are next to the device: ``numa_node``, unless that node has no CPUs.

        On a Grace-class node GPU memory is onlined as CPU-less NUMA nodes; a device whose ``numa_node`` names one
        is local to the CPU node its ``local_cpulist`` lies on (when exactly one), which is what pinning needs.
        """
        node = self.numa_node
        if node is None or topology is None:
            return node
        found = topology.nodes.get(node)
        if found is None or found.cpus or not self.local_cpus:
            return node
        near = [n for n, other in topology.nodes.items() if not other.cpus.isdisjoint(self.local_cpus)]
        return near[0] if len(near) == 1 else node


@dataclass(frozen=True)
class GpuInventory:
    gpus: tuple[GpuDevice, ...]
    # Accelerator vendors' PCI functions left out because their class could not be parsed (whether they are
    # accelerators is unknown).
    problems: tuple[str, ...] = ()

    def unreadable(self, attribute: str) -> tuple[str, ...]:
        """Why ``attribute`` of some GPU is unknown: functions left out, and GPUs whose file is malformed."""
        return self.problems + tuple(gpu.problems[attribute] for gpu in self.gpus if attribute in gpu.problems)

    def by_uuid(self, uuid: str) -> GpuDevice | None:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        return None

    def by_pci(self, address: str) -> GpuDevice | None:
        for gpu in self.gpus:
            if gpu.pci_address == address:
                return gpu
        return None

    def for_device_id(self, device_id: str) -> GpuDevice | None:
        """The accelerator a device plugin's device ID names (docs/gpu.md, "Device plugins"), or None.

        - NVIDIA: ``GPU-<uuid>``, time-sliced replicas ``GPU-<uuid>::<n>``; a MIG device in the form drivers before
          R470 gave (``MIG-GPU-<uuid>/<gi>/<ci>``) names its parent GPU. A MIG device's own ``MIG-<uuid>`` is not in
          sysfs: None (the plugin's NUMA node, its parent's, is what is known);
        - AMD (ROCm k8s-device-plugin): the PCI address of the function amdgpu binds (``0000:c1:00.0``);
        - Gaudi (habanalabs device plugin): HLML's id for the device, matched with the stable id sysfs gives (the
          serial number) or the PCI address.
        """
        base = device_id.split("::", 1)[0]
        if base.startswith("MIG-GPU-"):
            base = base[len("MIG-") :].split("/", 1)[0]
        return self.by_pci(base.lower()) or self.by_uuid(base)
