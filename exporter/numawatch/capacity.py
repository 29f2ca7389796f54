"""NUMA capacity: what each NUMA node can still hand out, and whether a pod would get a table (the maître d').

Inputs, all from one ``Host`` (no file is read here):

- exclusive CPUs: the node's online CPUs minus the kubelet's reserved CPUs (``reservedSystemCPUs``; without it, the
  count ``systemReserved.cpu + kubeReserved.cpu`` taken as the static policy does, lowest whole cores first), minus
  every exclusive set in ``cpu_manager_state``. With the CPU Manager option ``full-pcpus-only`` a CPU counts only
  when every online SMT sibling of its core counts too (whole physical cores);
- memory and huge pages: ``memory_manager_state``'s ``machineState`` (allocatable and free per NUMA node and
  resource), only under the Memory Manager's ``Static`` policy;
- devices: the device checkpoint's ``RegisteredDevices`` (healthy devices) minus its ``PodDeviceEntries``. A device's
  NUMA node is the key the kubelet filed its assignment under (``-1``: the plugin gave no topology); for a device
  nobody holds yet, the PCI function's sysfs ``numa_node`` found through its device ID (a GPU UUID, an AMD PCI
  address, a Gaudi serial: ``GpuInventory.for_device_id``), unless the plugin is known to
  register that resource without topology (an assignment filed under ``-1`` only).

State entries of pods that have no cgroup any more are released first, as the kubelet's managers do before they
answer a new pod (``removeStaleState`` / ``UpdateAllocatedDevices``): "free" means free for the next admission.

Admission follows the kubelet's Topology Manager (pkg/kubelet/cm/topologymanager): each hint provider (CPU, Memory,
Device Manager) offers NUMA masks that could hold its request, marked preferred when the mask is as narrow as the
machine allows; the policy merges them (``single-numa-node`` keeps only single-node preferred hints, ``restricted``
admits only a preferred merge, ``best-effort`` admits the best merge whatever it is, ``none`` does not align) and
the providers then allocate inside the merged mask. ``topology-manager-scope=pod`` merges once for the sum of the
pod's containers; ``container`` merges and allocates container by container. Where the kubelet's choice depends on
allocator details numawatch does not see (which CPUs of a multi-node mask the packed allocator takes), counts are
kept per NUMA node and filled fullest-node first; under ``single-numa-node`` every answer is exact.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from numawatch import telemetry
from numawatch.cpuset import EMPTY, CPUSet, format_cpulist
from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.inputs import TOPOLOGY
from numawatch.intent import Intent
from numawatch.model import frozen_map
from numawatch.model.gpu import GpuInventory
from numawatch.model.kubelet import (
    CpuManagerState,
    DeviceCheckpoint,
    KubeletConfig,
    MemoryBlock,
    MemoryManagerState,
    MemoryNodeState,
    MemoryTable,
)
from numawatch.model.topology import Topology
from numawatch.quantity import QuantityError, parse_quantity
from numawatch.shapes import CPU, MEMORY, ContainerShape, Shape

__all__ = [
    "ADMISSION_ERROR",
    "EXIT_FITS",
    "EXIT_REJECTED",
    "EXIT_UNKNOWN",
    "MAX_REPLICAS",
    "SMT_ALIGNMENT_ERROR",
    "TOPOLOGY_AFFINITY_ERROR",
    "Capacity",
    "CapacityUnavailable",
    "DeviceResource",
    "FitAnswer",
    "ReplicaAnswers",
    "build_capacity",
    "fit_answer",
    "largest_fit",
    "replicas",
]

SINGLE_NUMA_NODE = "single-numa-node"
RESTRICTED = "restricted"
BEST_EFFORT = "best-effort"
NONE = "none"
SCOPE_POD = "pod"
TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
SMT_ALIGNMENT_ERROR = "SMTAlignmentError"
ADMISSION_ERROR = "UnexpectedAdmissionError"
# The device plugin files a device without NUMA topology under this key (devicemanager nodeWithoutTopology).
NODE_WITHOUT_TOPOLOGY = -1
# Replicas are admitted one by one; a shape so small that this many fit is "plenty" on any node.
MAX_REPLICAS = 1000
# The kubelet's Topology Manager refuses more NUMA nodes unless max-allowable-numa-nodes is raised; its hint
# generation walks every subset of nodes, and so does ours.
MAX_NUMA_NODES = 8

EXIT_FITS = 0
EXIT_REJECTED = 1
EXIT_UNKNOWN = 2


class CapacityUnavailable(Exception):
    """The capacity cannot be computed at all (no topology); the message says why, in one line."""


# --------------------------------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class DeviceResource:
    """One device-plugin resource on this node."""

    name: str
    topology: Mapping[str, frozenset[int]]  # healthy device ID -> NUMA nodes (empty: no topology)
    allocated: frozenset[str]  # of those, the ones live containers hold

    @property
    def aligned(self) -> bool:
        """Whether the Device Manager gives NUMA hints for it: some device carries topology."""
        return any(self.topology.values())

    @property
    def free(self) -> frozenset[str]:
        return frozenset(self.topology) - self.allocated

    def on_node(self, node: int) -> frozenset[str]:
        return frozenset(d for d, nodes in self.topology.items() if node in nodes)

    @property
    def without_topology(self) -> frozenset[str]:
        return frozenset(d for d, nodes in self.topology.items() if not nodes)


@dataclass(frozen=True)
class Capacity:
    """What the kubelet's managers can still hand out on this node, per NUMA node, and the policies that decide."""

    topology_manager_policy: str
    topology_manager_scope: str
    cpu_manager_policy: str
    memory_manager_policy: str
    full_pcpus_only: bool
    distribute_cpus_across_numa: bool
    prefer_closest_numa_nodes: bool
    threads_per_core: int
    node_ids: tuple[int, ...]  # every NUMA node of the topology
    node_cpus: Mapping[int, int]  # online CPUs per node, reserved ones included (what the CPU Manager's hints count)
    reserved_cpus: CPUSet
    # Exclusive CPUs per node (whole cores only under full-pcpus-only); None when the CPU Manager policy is not
    # static (no exclusive CPUs exist) or its state is unknown (see ``unknown``).
    allocatable_cpus: Mapping[int, CPUSet] | None
    free_cpus: Mapping[int, CPUSet] | None
    # memory_manager_state's machine state after releasing stale entries; None unless the policy is Static and the
    # state was read.
    memory: Mapping[int, MemoryNodeState] | None
    devices: Mapping[str, DeviceResource]
    distances: Mapping[tuple[int, int], int] = field(default_factory=frozen_map)
    unknown: Mapping[str, str] = field(default_factory=frozen_map)  # "cpu" / "memory" / "devices" -> why
    notes: tuple[str, ...] = ()

    @property
    def cpu_nodes(self) -> tuple[int, ...]:
        return tuple(n for n in self.node_ids if self.node_cpus.get(n, 0) > 0)


def _option(options: Mapping[str, Any], name: str) -> bool:
    # Flags give "true"; a YAML KubeletConfiguration may give a real boolean.
    return str(options.get(name, "false")).strip().lower() == "true"


def build_capacity(host: Host, intent: Intent) -> Capacity:
    """The node's capacity from one reading; raises CapacityUnavailable when the topology is unknown.

    A kubelet configuration that cannot be read is replaced by the intent's policies (with a note); a state file
    that cannot be read leaves its dimension in ``unknown``.
    """
    topology = host.topology
    if topology is None:
        raise CapacityUnavailable(f"the CPU/NUMA topology is unknown: {host.down_reason('topology')}")
    config = host.kubelet_config
    notes: list[str] = []
    if config is None:
        notes.append(
            f"the kubelet configuration could not be read ({host.down_reason('kubelet_config')}); "
            "the intent's policies are assumed"
        )
        policy, scope = intent.topology_manager_policy, intent.topology_manager_scope
        cpu_policy, memory_policy = intent.cpu_manager_policy, intent.memory_manager_policy
        cpu_options: Mapping[str, Any] = {}
        topology_options: Mapping[str, Any] = {}
        wanted = intent.reserved_cpus if intent.reserved_cpus is not None else topology.housekeeping
        reserved = wanted & topology.online
    else:
        policy, scope = config.topology_manager_policy, config.topology_manager_scope
        cpu_policy, memory_policy = config.cpu_manager_policy, config.memory_manager_policy
        cpu_options, topology_options = config.cpu_manager_policy_options, config.topology_manager_policy_options
        if config.reserved_cpus is not None:
            reserved = config.reserved_cpus & topology.online
        else:
            reserved, note = _implicit_reserved(topology, config)
            if note:
                notes.append(note)
    full = _option(cpu_options, "full-pcpus-only")
    live = _live(host)
    state = host.kubelet_state
    unknown: dict[str, str] = {}

    node_ids = topology.node_ids
    online_of = {n: topology.nodes[n].cpus & topology.online for n in node_ids}
    allocatable: dict[int, CPUSet] | None = None
    free: dict[int, CPUSet] | None = None
    if cpu_policy == "static":
        if state is None or state.cpu is None:
            unknown[CPU] = _state_reason(host, state, "cpu_manager_state")
        else:
            pool = topology.online - reserved
            unused = pool - _exclusive_in_use(state.cpu, live)
            if full:
                # A core is usable only when all its online threads are: the kubelet also treats the siblings of
                # reserved CPUs as unavailable under full-pcpus-only.
                pool, unused = _whole_cores(topology, pool), _whole_cores(topology, unused)
            allocatable = {n: online_of[n] & pool for n in node_ids}
            free = {n: online_of[n] & unused for n in node_ids}

    memory: dict[int, MemoryNodeState] | None = None
    if memory_policy == "Static":
        if state is None or state.memory is None:
            unknown[MEMORY] = _state_reason(host, state, "memory_manager_state")
        else:
            memory = _release_stale_memory(state.memory, live)

    devices: dict[str, DeviceResource] = {}
    if state is None or state.devices is None:
        unknown["devices"] = _state_reason(host, state, "kubelet_internal_checkpoint")
    else:
        devices = _device_resources(state.devices, telemetry.inventory_of(host), topology, live)

    distances: dict[tuple[int, int], int] = {}
    for node in node_ids:
        row = topology.nodes[node].distances
        if len(row) == len(node_ids):
            distances.update({(node, other): row[index] for index, other in enumerate(node_ids)})
    return Capacity(
        topology_manager_policy=policy,
        topology_manager_scope=scope,
        cpu_manager_policy=cpu_policy,
        memory_manager_policy=memory_policy,
        full_pcpus_only=full,
        distribute_cpus_across_numa=_option(cpu_options, "distribute-cpus-across-numa"),
        prefer_closest_numa_nodes=_option(topology_options, "prefer-closest-numa-nodes"),
        threads_per_core=_threads_per_core_of(host),
        node_ids=node_ids,
        node_cpus=frozen_map({n: len(online_of[n]) for n in node_ids}),
        reserved_cpus=reserved,
        allocatable_cpus=frozen_map(allocatable) if allocatable is not None else None,
        free_cpus=frozen_map(free) if free is not None else None,
        memory=frozen_map(memory) if memory is not None else None,
        devices=frozen_map(devices),
        distances=frozen_map(distances),
        unknown=frozen_map(unknown),
        notes=tuple(notes),
    )


def _state_reason(host: Host, state: Any, file: str) -> str:
    if state is None:
        return f"the kubelet state could not be read: {host.down_reason('kubelet_state')}"
    return f"{file} was not found"


def _live(host: Host) -> tuple[frozenset[str], frozenset[str]] | None:
    """Pod UIDs and container IDs that have a cgroup; None when the cgroups are unknown (then nothing is stale)."""
    cgroups = host.cgroups
    if cgroups is None:
        return None
    pods = frozenset(pod.uid for pod in cgroups.pods)
    containers = frozenset(c.container_id for pod in cgroups.pods for c in pod.containers)
    return pods, containers


def _siblings(topology: Topology, cpu: int) -> CPUSet:
    found = topology.cpus.get(cpu)
    siblings = found.siblings if found is not None and found.siblings else frozenset({cpu})
    return siblings & topology.online


def _whole_cores(topology: Topology, pool: CPUSet) -> CPUSet:
    return frozenset(cpu for cpu in pool if _siblings(topology, cpu) <= pool)


@derivation("capacity.threads_per_core", inputs=(TOPOLOGY,))
def _threads_per_core_of(host: Host) -> int:
    topology = host.topology
    return 1 if topology is None else _threads_per_core(topology)


def _threads_per_core(topology: Topology) -> int:
    """The kubelet's CPUsPerCore: online CPUs over physical cores (the SMT level)."""
    cores = {_siblings(topology, cpu) for cpu in topology.online}
    return max(1, len(topology.online) // len(cores)) if cores else 1


def _implicit_reserved(topology: Topology, config: KubeletConfig) -> tuple[CPUSet, str]:
    """Reserved CPUs when ``reservedSystemCPUs`` is not set: ceil(systemReserved.cpu + kubeReserved.cpu) CPUs, taken
    whole cores first from the lowest-numbered CPUs of the first NUMA node, as the static policy's packed allocator
    does on an idle machine."""
    try:
        wanted = parse_quantity(config.system_reserved.get("cpu", "0")) + parse_quantity(
            config.kube_reserved.get("cpu", "0")
        )
    except QuantityError:
        return EMPTY, "systemReserved/kubeReserved cpu is not a quantity: no reserved CPUs assumed"
    count = math.ceil(wanted)
    if count <= 0:
        return EMPTY, ""
    cores: list[CPUSet] = []
    for cpu in sorted(topology.online, key=lambda c: (topology.node_of(c) or 0, c)):
        siblings = _siblings(topology, cpu)
        if siblings not in cores:
            cores.append(siblings)
    chosen: set[int] = set()
    for core in cores:
        if len(chosen) + len(core) <= count:
            chosen |= core
    for cpu in sorted(topology.online - chosen):
        if len(chosen) >= count:
            break
        chosen.add(cpu)
    note = (
        f"reservedSystemCPUs is not set: the {count} CPU(s) of systemReserved+kubeReserved are assumed to be "
        f"{format_cpulist(chosen)}"
    )
    return frozenset(chosen), note


def _exclusive_in_use(state: CpuManagerState, live: tuple[frozenset[str], frozenset[str]] | None) -> CPUSet:
    used: set[int] = set()
    for pod, containers in state.entries.items():
        if live is None or pod in live[0]:
            for cpus in containers.values():
                used |= cpus
    for pod, cpus in state.pod_entries.items():
        if live is None or pod in live[0]:
            used |= cpus
    for container_id, cpus in state.entries_v1.items():
        if live is None or container_id in live[1]:
            used |= cpus
    return frozenset(used)


def _release_stale_memory(
    state: MemoryManagerState, live: tuple[frozenset[str], frozenset[str]] | None
) -> dict[int, MemoryNodeState]:
    """The machine state after the Memory Manager removes the blocks of pods that are gone (policy_static.go
    RemoveContainer: each block gives its size back to its nodes in order, and a node left without assignments
    becomes its own group again)."""
    machine = {n: _MemNode.of(node) for n, node in state.machine_state.items()}
    if live is not None:
        stale: list[MemoryBlock] = []
        for pod, containers in state.entries.items():
            if pod not in live[0]:
                stale += [block for blocks in containers.values() for block in blocks]
        for pod, blocks in state.pod_entries.items():
            if pod not in live[0]:
                stale += list(blocks)
        for block in stale:
            released = block.size
            for node_id in block.numa_affinity:
                node = machine.get(node_id)
                if node is None:
                    continue
                node.assignments -= 1
                if node.assignments <= 0:
                    node.assignments = 0
                    node.cells = (node_id,)
                table = node.tables.get(block.type)
                if released == 0 or table is None or table.reserved == 0:
                    continue
                given = min(table.reserved, released)
                table.reserved -= given
                table.free += given
                released -= given
    return {n: node.frozen() for n, node in machine.items()}


def _device_resources(
    checkpoint: DeviceCheckpoint,
    inventory: GpuInventory | None,
    topology: Topology,
    live: tuple[frozenset[str], frozenset[str]] | None,
) -> dict[str, DeviceResource]:
    filed: dict[tuple[str, str], set[int]] = {}  # (resource, device) -> NUMA keys its assignments were filed under
    allocated: dict[str, set[str]] = {}
    for entry in checkpoint.entries:
        is_live = live is None or entry.pod_uid in live[0]
        for node, device_ids in entry.devices_per_numa.items():
            for device in device_ids:
                filed.setdefault((entry.resource_name, device), set()).add(node)
                if is_live:
                    allocated.setdefault(entry.resource_name, set()).add(device)
    resources: dict[str, DeviceResource] = {}
    for resource, device_ids in checkpoint.registered.items():
        keys = [nodes for (name, _), nodes in filed.items() if name == resource]
        # Assignments filed only under -1: this plugin registers the resource without topology.
        without = bool(keys) and all(nodes == {NODE_WITHOUT_TOPOLOGY} for nodes in keys)
        placed: dict[str, frozenset[int]] = {}
        for device in device_ids:
            nodes = filed.get((resource, device))
            if nodes is not None:
                placed[device] = frozenset(n for n in nodes if n != NODE_WITHOUT_TOPOLOGY)
            elif without:
                placed[device] = frozenset()
            else:
                placed[device] = _sysfs_node(device, inventory, topology)
        resources[resource] = DeviceResource(
            name=resource,
            topology=frozen_map(placed),
            allocated=frozenset(allocated.get(resource, set()) & set(placed)),
        )
    return resources


def _sysfs_node(device: str, inventory: GpuInventory | None, topology: Topology) -> frozenset[int]:
    """The sysfs NUMA node of the accelerator a device ID names (any vendor's: GpuInventory.for_device_id), or the
    CPU node next to it when that node has no CPUs (GpuDevice.cpu_node)."""
    gpu = inventory.for_device_id(device) if inventory is not None else None
    node = gpu.cpu_node(topology) if gpu is not None else None
    return frozenset({node}) if node is not None else frozenset()


# --------------------------------------------------------------------------------------------------- simulation
@dataclass
class _Table:
    total: int
    system_reserved: int
    allocatable: int
    reserved: int
    free: int


@dataclass
class _MemNode:
    assignments: int
    cells: tuple[int, ...]
    tables: dict[str, _Table]

    @classmethod
    def of(cls, node: MemoryNodeState) -> _MemNode:
        tables = {
            name: _Table(t.total, t.system_reserved, t.allocatable, t.reserved, t.free)
            for name, t in node.memory_map.items()
        }
        return cls(node.number_of_assignments, tuple(node.cells), tables)

    def frozen(self) -> MemoryNodeState:
        tables = {
            name: MemoryTable(t.total, t.system_reserved, t.allocatable, t.reserved, t.free)
            for name, t in self.tables.items()
        }
        return MemoryNodeState(self.assignments, frozen_map(tables), self.cells)

    def free(self, resource: str) -> int:
        table = self.tables.get(resource)
        return table.free if table is not None else 0

    def allocatable(self, resource: str) -> int:
        table = self.tables.get(resource)
        return table.allocatable if table is not None else 0


Hint = tuple[int | None, bool]  # (NUMA mask as bits, or None for "any"; preferred)


@dataclass(frozen=True)
class _Request:
    """What one admission asks the managers for (already filtered by QoS and policy)."""

    cpus: int  # exclusive CPUs (0: the CPU Manager gives none)
    memory: Mapping[str, int]  # Memory Manager requests (empty: it does not take part)
    devices: Mapping[str, int]

    @property
    def consumes(self) -> bool:
        return bool(self.cpus or self.memory or self.devices)


@dataclass(frozen=True)
class _Outcome:
    admitted: bool
    placement: tuple[int | None, ...]  # per container: the NUMA nodes its resources landed on (None: none counted)
    error: str = ""
    reason: str = ""
    consumed: bool = False


def _bits(mask: int) -> tuple[int, ...]:
    return tuple(node for node in range(mask.bit_length()) if mask >> node & 1)


def _mask(nodes: Iterable[int]) -> int:
    value = 0
    for node in nodes:
        value |= 1 << node
    return value


class _Masks:
    """Every non-empty subset ("pick") of some NUMA nodes, as bitmask.IterateBitMasks walks them, with per-subset
    sums computed in one pass over the picks (each pick is a smaller pick plus one node)."""

    def __init__(self, nodes: Iterable[int]) -> None:
        self.nodes = tuple(nodes)
        count = 1 << len(self.nodes)
        self.mask = [0] * count  # pick -> NUMA node bitmask
        self.size = [0] * count
        for pick in range(1, count):
            low = pick & -pick
            self.mask[pick] = self.mask[pick ^ low] | 1 << self.nodes[low.bit_length() - 1]
            self.size[pick] = self.size[pick ^ low] + 1
        self.all = range(1, count)
        self.by_size: dict[int, list[int]] = {}
        for pick in self.all:
            self.by_size.setdefault(self.size[pick], []).append(pick)
        self.members = [tuple(n for i, n in enumerate(self.nodes) if pick >> i & 1) for pick in range(count)]
        self.position = {node: index for index, node in enumerate(self.nodes)}

    def sums(self, values: Mapping[int, int]) -> list[int]:
        """Per pick, the sum of ``values`` (by NUMA node) over its nodes."""
        out = [0] * len(self.mask)
        for pick in self.all:
            low = pick & -pick
            out[pick] = out[pick ^ low] + values.get(self.nodes[low.bit_length() - 1], 0)
        return out

    def candidates(self, min_size: int, preferred_only: bool, single: bool) -> Iterable[int]:
        """The picks worth generating hints for: all of them, or only the preferred ones (as wide as the narrowest
        that could ever hold the request) when the policy admits nothing else; single-numa-node also wants them to
        be one node."""
        if not preferred_only:
            return self.all
        if single and min_size != 1:
            return ()
        return self.by_size.get(min_size, ())

    def total(self, pick: int, values: Mapping[int, int]) -> int:
        return sum(values.get(node, 0) for node in self.members[pick])

    def min_size(self, totals: list[int], request: int) -> int:
        """The fewest nodes whose totals could hold the request (all of them when none can)."""
        return min((self.size[p] for p in self.all if totals[p] >= request), default=len(self.nodes))


class _Sim:
    """A mutable copy of the capacity that admissions consume, one pod after another."""

    def __init__(self, capacity: Capacity) -> None:
        self.touched: set[int] = set()
        if len(capacity.node_ids) > MAX_NUMA_NODES:
            raise CapacityUnavailable(
                f"{len(capacity.node_ids)} NUMA nodes: the Topology Manager handles at most {MAX_NUMA_NODES} "
                "unless max-allowable-numa-nodes is raised, and numawatch does not simulate more"
            )
        self.cap = capacity
        self.all_mask = _mask(capacity.node_ids)
        self.cpu_free = {n: len(c) for n, c in capacity.free_cpus.items()} if capacity.free_cpus is not None else None
        self.memory = (
            {n: _MemNode.of(node) for n, node in capacity.memory.items()} if capacity.memory is not None else None
        )
        self.device_free = {name: set(d.free) for name, d in capacity.devices.items()}
        self.single = capacity.topology_manager_policy == SINGLE_NUMA_NODE
        self.preferred_only = capacity.topology_manager_policy in (SINGLE_NUMA_NODE, RESTRICTED)
        # What never changes while pods are admitted (node sizes, allocatable memory, registered devices) is summed
        # per pick once; only the free amounts are summed again for each admission.
        self._cpu_masks = _Masks(capacity.cpu_nodes)
        self._cpu_totals = self._cpu_masks.sums(capacity.node_cpus)
        self._cpu_min: dict[int, int] = {}
        self._all_masks = _Masks(capacity.node_ids)
        self._memory_masks = _Masks(sorted(self.memory)) if self.memory is not None else _Masks(())
        self._memory_allocatable: dict[str, list[int]] = {}
        self._memory_fits: dict[tuple[tuple[str, int], ...], tuple[list[int], int]] = {}
        self._device_positions = {
            name: {
                d: sum(1 << self._all_masks.position[n] for n in nodes if n in self._all_masks.position)
                for d, nodes in device.topology.items()
            }
            for name, device in capacity.devices.items()
        }
        self._device_min: dict[tuple[str, int], int] = {}

    # ------------------------------------------------------------------------------------------- requests
    def request(self, shape: Shape, container: ContainerShape | None) -> _Request:
        """The request of the whole pod (``container`` None) or of one container, as the managers see it."""
        cap = self.cap
        part = shape.total() if container is None else container
        cpus = 0
        if cap.cpu_manager_policy == "static" and shape.guaranteed:
            cpus = shape.pod_exclusive_cpus() if container is None else container.exclusive_cpus
        memory: Mapping[str, int] = {}
        if cap.memory_manager_policy == "Static" and shape.guaranteed:
            memory = part.memory_requests()
        return _Request(cpus, frozen_map(memory), part.devices)

    # ------------------------------------------------------------------------------------------- hints
    def hints(self, request: _Request) -> list[list[Hint]]:
        """Every provider's hints per resource; "no preference" providers are left out (they merge as a no-op).

        Under single-numa-node and restricted only preferred hints can make an admitted merge, so only those are
        generated (a provider left with none refuses either way); best-effort needs them all.
        """
        lists: list[list[Hint]] = []
        if request.cpus and self.cpu_free is not None:
            lists.append(self.cpu_hints(request.cpus, self.preferred_only) or [(None, False)])
        if request.memory and self.memory is not None:
            memory_hints = self.memory_hints(request.memory, self.preferred_only)
            if not memory_hints and self.preferred_only and self.memory_hints(request.memory):
                memory_hints = [(None, False)]  # hints exist, none preferred: refused
            # An empty answer is "no preference" to the Topology Manager; the Memory Manager fails later instead.
            if memory_hints:
                lists.extend(memory_hints for _ in request.memory)
        for resource, count in request.devices.items():
            device = self.cap.devices.get(resource)
            if device is None or not device.aligned:
                continue  # no hint: the Topology Manager cannot align what has no topology
            free = self.device_free[resource]
            if len(free) < count:
                lists.append([(None, False)])
                continue
            lists.append(self.device_hints(device, free, count, self.preferred_only) or [(None, False)])
        return lists

    def cpu_hints(self, request: int, preferred_only: bool = False) -> list[Hint]:
        """policy_static.go generateCPUTopologyHints: masks with enough free CPUs; preferred when the mask is as
        narrow as the machine allows for this request (counting every CPU of the nodes, free or not)."""
        assert self.cpu_free is not None
        masks = self._cpu_masks
        min_size = self._cpu_min.get(request)
        if min_size is None:
            min_size = self._cpu_min[request] = masks.min_size(self._cpu_totals, request)
        free = self.cpu_free
        if preferred_only:
            picks = masks.candidates(min_size, True, self.single)
            return [(masks.mask[p], True) for p in picks if masks.total(p, free) >= request]
        sums = masks.sums(free)
        return [(masks.mask[p], masks.size[p] == min_size) for p in masks.all if sums[p] >= request]

    def memory_hints(self, requests: Mapping[str, int], preferred_only: bool = False) -> list[Hint]:
        """memorymanager policy_static.go calculateHints: masks whose allocatable and free memory hold every
        requested type, skipping nodes already grouped with other nodes by an earlier multi-node allocation."""
        machine = self.memory
        assert machine is not None
        masks = self._memory_masks
        key = tuple(sorted(requests.items()))
        cached = self._memory_fits.get(key)
        if cached is None:
            allocatable = {r: self._allocatable_sums(r) for r in requests}
            fits = [p for p in masks.all if all(allocatable[r][p] >= size for r, size in requests.items())]
            cached = self._memory_fits[key] = (fits, min((masks.size[p] for p in fits), default=len(masks.nodes)))
        fits, min_size = cached
        if preferred_only:
            wanted = set(masks.candidates(min_size, True, self.single))
            fits = [p for p in fits if p in wanted]
        free = {r: {n: node.free(r) for n, node in machine.items()} for r in requests}
        # A node in use by a single-node allocation cannot join a multi-node one; a node in a group only with it.
        lone = 0
        grouped: dict[int, int] = {}  # node position bit -> the pick of its group
        for node_id, node in machine.items():
            position = 1 << masks.position[node_id]
            if len(node.cells) > 1:
                grouped[position] = sum(1 << masks.position[c] for c in node.cells if c in masks.position)
            elif node.assignments > 0:
                lone |= position
        hints: list[Hint] = []
        for pick in fits:
            if masks.size[pick] == 1:
                if pick in grouped:
                    continue
            elif pick & lone or any(pick & position and pick != group for position, group in grouped.items()):
                continue
            if all(masks.total(pick, free[r]) >= size for r, size in requests.items()):
                hints.append((masks.mask[pick], masks.size[pick] == min_size))
        return hints

    def _allocatable_sums(self, resource: str) -> list[int]:
        sums = self._memory_allocatable.get(resource)
        if sums is None:
            machine = self.memory or {}
            sums = self._memory_allocatable[resource] = self._memory_masks.sums(
                {n: node.allocatable(resource) for n, node in machine.items()}
            )
        return sums

    def device_hints(
        self, device: DeviceResource, free: set[str], request: int, preferred_only: bool = False
    ) -> list[Hint]:
        """devicemanager topology_hints.go generateDeviceTopologyHints."""
        masks = self._all_masks
        positions = self._device_positions[device.name]
        min_size = self._device_min.get((device.name, request))
        if min_size is None:
            registered = [sum(1 for d in positions.values() if d & p) for p in range(len(masks.mask))]
            min_size = self._device_min[(device.name, request)] = masks.min_size(registered, request)
        hints: list[Hint] = []
        for pick in masks.candidates(min_size, preferred_only, self.single):
            if sum(1 for d in free if positions[d] & pick) >= request:
                hints.append((masks.mask[pick], masks.size[pick] == min_size))
        return hints

    # ------------------------------------------------------------------------------------------- merge
    def merge(self, lists: list[list[Hint]]) -> tuple[int | None, bool, bool]:
        """The Topology Manager policy's Merge: (mask or None, preferred, admit)."""
        policy = self.cap.topology_manager_policy
        if policy not in (SINGLE_NUMA_NODE, RESTRICTED, BEST_EFFORT):
            return None, True, True  # none: no alignment, every pod admitted
        if policy == SINGLE_NUMA_NODE:
            lists = [[h for h in hints if h[1] and (h[0] is None or h[0].bit_count() == 1)] for hints in lists]
        mask: int | None
        mask, preferred = self._best(lists)
        if policy == SINGLE_NUMA_NODE and mask == self.all_mask:
            mask = None  # every provider said "any node": no NUMA affinity at all
        admit = preferred if policy in (SINGLE_NUMA_NODE, RESTRICTED) else True
        return mask, preferred, admit

    def _narrow_key(self, mask: int) -> tuple[int, float, int]:
        """bitmask IsNarrowerThan (fewer nodes, then the lower mask), with prefer-closest-numa-nodes comparing the
        average distance between the nodes of equally wide masks first."""
        distance = 0.0
        if self.cap.prefer_closest_numa_nodes and self.cap.distances:
            nodes = _bits(mask)
            pairs = [self.cap.distances.get((a, b), 0) for a in nodes for b in nodes]
            distance = sum(pairs) / len(pairs)
        return mask.bit_count(), distance, mask

    def _best(self, lists: list[list[Hint]]) -> tuple[int, bool]:
        """HintMerger.Merge over every permutation of the providers' hints, computed without enumerating them:
        a permutation is preferred only when every hint is preferred and every non-"any" mask is the same."""
        every = self.all_mask
        if any(not hints for hints in lists):
            return every, False  # a provider with no usable hint: no permutation at all
        preferred: set[int] = set()
        if all((None, True) in hints for hints in lists):
            preferred.add(every)
        for mask in {h[0] for hints in lists for h in hints if h[1] and h[0] is not None}:
            if all((mask, True) in hints or (None, True) in hints for hints in lists):
                preferred.add(mask & every)
        preferred.discard(0)
        if preferred:
            return min(preferred, key=self._narrow_key), True
        merged = {every}
        for hints in lists:
            merged = {m & (h[0] if h[0] is not None else every) for m in merged for h in hints}
        merged.discard(0)
        if not merged:
            return every, False
        # Among non-preferred merges the kubelet aims for the widest of the providers' narrowest hints.
        narrowest = [min((h[0].bit_count() for h in hints if h[0] is not None), default=0) for hints in lists]
        target = max(narrowest, default=0)
        equal = [m for m in merged if m.bit_count() == target]
        if equal:
            return min(equal, key=self._narrow_key), False
        below = [m for m in merged if m.bit_count() < target]
        if below:
            widest = max(m.bit_count() for m in below)
            return min((m for m in below if m.bit_count() == widest), key=self._narrow_key), False
        return min(merged, key=self._narrow_key), False

    # ------------------------------------------------------------------------------------------- allocation
    def allocate(self, request: _Request, mask: int | None, preferred: bool) -> tuple[str, str] | None:
        """Each manager's Allocate inside the merged mask; (error, reason) when one refuses. ``touched`` then holds
        the NUMA nodes the container's CPUs, memory blocks and devices landed on (which may be wider than the
        merged mask: best-effort takes CPUs from other nodes once the mask's run out)."""
        self.touched = set()
        if request.cpus and self.cpu_free is not None:
            refused = self._allocate_cpus(request.cpus, mask)
            if refused:
                return refused
        if request.memory and self.memory is not None:
            refused = self._allocate_memory(request.memory, mask, preferred)
            if refused:
                return refused
        for resource, count in request.devices.items():
            refused = self._allocate_devices(resource, count, mask)
            if refused:
                return refused
        return None

    def _allocate_cpus(self, count: int, mask: int | None) -> tuple[str, str] | None:
        cap, free = self.cap, self.cpu_free
        assert free is not None
        total = sum(free.values())
        if cap.full_pcpus_only:
            if count % cap.threads_per_core:
                return SMT_ALIGNMENT_ERROR, (
                    f"{count} CPUs is not a multiple of the {cap.threads_per_core} threads per core that "
                    "full-pcpus-only allocates"
                )
            if count > total:
                return SMT_ALIGNMENT_ERROR, f"needs {count} CPUs in whole cores, {total} free in whole cores"
        elif count > total:
            return ADMISSION_ERROR, f"needs {count} exclusive CPUs, {total} free on the whole node"
        inside = [n for n in cap.cpu_nodes if mask is None or mask >> n & 1]
        outside = [n for n in cap.cpu_nodes if n not in inside]
        remaining = count
        if cap.distribute_cpus_across_numa and len(inside) > 1:
            share, extra = divmod(count, len(inside))
            for index, node in enumerate(inside):
                take = min(free[node], share + (1 if index < extra else 0))
                free[node] -= take
                remaining -= take
                if take:
                    self.touched.add(node)
        for group in (inside, outside):
            # The packed allocator fills the fullest node first.
            for node in sorted(group, key=lambda n: (free[n], n)):
                take = min(free[node], remaining)
                if cap.full_pcpus_only:
                    take -= take % cap.threads_per_core
                free[node] -= take
                remaining -= take
                if take:
                    self.touched.add(node)
        return None

    def _allocate_memory(
        self, requests: Mapping[str, int], mask: int | None, preferred: bool
    ) -> tuple[str, str] | None:
        """memorymanager policy_static.go Allocate: the merged mask, the default hint when there is none, extended
        to a wider valid mask when it cannot hold the request."""
        machine = self.memory
        assert machine is not None
        what = ", ".join(f"{name} {_amount(name, size)}" for name, size in sorted(requests.items()))
        best, best_preferred = mask, preferred
        if best is None:
            hints = self.memory_hints(requests)
            if not hints:
                return ADMISSION_ERROR, f"no NUMA node or group of nodes has {what} free for the Memory Manager"
            best, hinted = _find_best(hints)
            if not hinted and best_preferred:
                return ADMISSION_ERROR, f"the Memory Manager has no preferred NUMA placement for {what}"
            best_preferred = hinted
        if not all(sum(machine[n].free(r) for n in _bits(best) if n in machine) >= s for r, s in requests.items()):
            wanted = set(_bits(best))
            hints = [h for h in self.memory_hints(requests) if wanted <= set(_bits(h[0] or 0))]
            if not hints:
                names = ",".join(map(str, _bits(best)))
                return ADMISSION_ERROR, f"NUMA node(s) {names} lack {what} and the Memory Manager cannot widen them"
            extended, hinted = _find_best(hints)
            if not hinted and best_preferred:
                return ADMISSION_ERROR, f"the Memory Manager has no preferred NUMA placement for {what}"
            best = extended
        nodes = [n for n in _bits(best) if n in machine]
        self.touched.update(nodes)
        for resource, size in requests.items():
            remaining = size
            for node_id in nodes:
                node = machine[node_id]
                node.assignments += 1
                node.cells = tuple(nodes)
                table = node.tables.get(resource)
                if remaining == 0 or table is None or table.free <= 0:
                    continue
                take = min(table.free, remaining)
                table.free -= take
                table.reserved += take
                remaining -= take
        return None

    def _allocate_devices(self, resource: str, count: int, mask: int | None) -> tuple[str, str] | None:
        device = self.cap.devices.get(resource)
        if device is None:
            return ADMISSION_ERROR, f"{resource} is not registered by any device plugin on this node"
        free = self.device_free[resource]
        if len(free) < count:
            return ADMISSION_ERROR, f"needs {count} {resource}, {len(free)} free on the whole node"
        if mask is None:
            order = sorted(free)
        else:
            wanted = set(_bits(mask))
            aligned = sorted(d for d in free if device.topology[d] & wanted)
            loose = sorted(d for d in free if not device.topology[d])
            order = aligned + loose + sorted(free - set(aligned) - set(loose))
        free.difference_update(order[:count])
        for taken in order[:count]:
            self.touched.update(device.topology[taken])
        return None

    # ------------------------------------------------------------------------------------------- admission
    def admit(self, shape: Shape) -> _Outcome:
        """Admit one pod of ``shape`` as the kubelet would, consuming what it gets; stop at the first refusal."""
        containers = len(shape.containers)
        if self.cap.topology_manager_scope == SCOPE_POD:
            request = self.request(shape, None)
            mask, preferred, admit = self.merge(self.hints(request))
            if not admit:
                return _Outcome(False, (), TOPOLOGY_AFFINITY_ERROR, self.explain(request, "the pod"))
            placement: list[int | None] = []
            for index, container in enumerate(shape.containers):
                refused = self.allocate(self.request(shape, container), mask, preferred)
                if refused:
                    return _Outcome(False, (), refused[0], _who(index, containers) + refused[1])
                placement.append(_mask(self.touched) or None)
            return _Outcome(True, tuple(placement), consumed=request.consumes)
        placement = []
        consumed = False
        for index, container in enumerate(shape.containers):
            request = self.request(shape, container)
            mask, preferred, admit = self.merge(self.hints(request))
            who = "the pod" if containers == 1 else f"container {index + 1} of {containers}"
            if not admit:
                return _Outcome(False, (), TOPOLOGY_AFFINITY_ERROR, self.explain(request, who))
            refused = self.allocate(request, mask, preferred)
            if refused:
                return _Outcome(False, (), refused[0], _who(index, containers) + refused[1])
            placement.append(_mask(self.touched) or None)
            consumed = consumed or request.consumes
        return _Outcome(True, tuple(placement), consumed=consumed)

    # ------------------------------------------------------------------------------------------- explaining
    def aligned(self, request: _Request) -> dict[str, int]:
        """The parts of the request the Topology Manager aligns (devices without topology are not among them)."""
        wanted: dict[str, int] = {}
        if request.cpus and self.cpu_free is not None:
            wanted[CPU] = request.cpus
        if self.memory is not None:
            wanted.update(request.memory)
        for resource, count in request.devices.items():
            device = self.cap.devices.get(resource)
            if device is not None and device.aligned:
                wanted[resource] = count
        return wanted

    def node_free(self, node: int, request: _Request) -> dict[str, int]:
        """What a single-node placement on ``node`` could use for each resource the request names."""
        free: dict[str, int] = {}
        if request.cpus and self.cpu_free is not None:
            free[CPU] = self.cpu_free.get(node, 0)
        if request.memory and self.memory is not None:
            machine_node = self.memory.get(node)
            for resource in request.memory:
                grouped = machine_node is not None and len(machine_node.cells) > 1
                free[resource] = 0 if machine_node is None or grouped else machine_node.free(resource)
        for resource in request.devices:
            device = self.cap.devices.get(resource)
            if device is not None and device.aligned:
                free[resource] = len({d for d in self.device_free[resource] if node in device.topology[d]})
        return free

    def seats_alone(self, request: _Request) -> tuple[int, ...]:
        """NUMA nodes that could hold every aligned resource of the request by themselves right now."""
        wanted = self.aligned(request)
        return tuple(
            node
            for node in self.cap.node_ids
            if all(self.node_free(node, request).get(r, 0) >= need for r, need in wanted.items())
        )

    def explain(self, request: _Request, who: str) -> str:
        """Why the Topology Manager refuses: the resource no single NUMA node holds (and by how much), or, when each
        fits somewhere, what each node lacks."""
        wanted = self.aligned(request)
        per_node = {node: self.node_free(node, request) for node in self.cap.node_ids}
        policy = self.cap.topology_manager_policy
        lead = (
            f"{policy} needs one NUMA node for {who}"
            if policy == SINGLE_NUMA_NODE
            else f"{policy} admits {who} only on the narrowest NUMA placement possible"
        )
        short = []
        for resource, need in wanted.items():
            node, most = max(
                ((n, f.get(resource, 0)) for n, f in per_node.items()), key=lambda item: (item[1], -item[0])
            )
            if most < need:
                short.append(
                    f"{resource} needs {_amount(resource, need)}, at most {_amount(resource, most)} free on one "
                    f"NUMA node (node {node}): {_amount(resource, need - most)} short"
                )
        grouped = [n for n, node in (self.memory or {}).items() if request.memory and len(node.cells) > 1]
        tail = ""
        if grouped:
            tail = f" (nodes {','.join(map(str, grouped))} are grouped by an earlier multi-node memory allocation)"
        if short:
            return f"{lead}: " + "; ".join(short) + tail
        lacks = []
        for node, free in per_node.items():
            missing = [
                f"{r} (needs {_amount(r, need)}, {_amount(r, free.get(r, 0))} free)"
                for r, need in wanted.items()
                if free.get(r, 0) < need
            ]
            if missing:
                lacks.append(f"node {node} lacks " + ", ".join(missing))
        if not lacks:
            return f"{lead}: no placement is preferred{tail}"
        return f"{lead}: each resource fits on some node but none holds them all: " + "; ".join(lacks) + tail


def _who(index: int, containers: int) -> str:
    return "" if containers == 1 else f"container {index + 1} of {containers}: "


def _find_best(hints: list[Hint]) -> tuple[int, bool]:
    """memorymanager findBestHint: preferred first, then the narrowest (then the lowest) mask."""
    best_mask, best_preferred = 0, False
    for mask, preferred in hints:
        mask = mask or 0
        if not best_mask or (preferred and not best_preferred):
            best_mask, best_preferred = mask, preferred
        elif preferred == best_preferred and (mask.bit_count(), mask) < (best_mask.bit_count(), best_mask):
            best_mask = mask
    return best_mask, best_preferred


def _amount(resource: str, value: int) -> str:
    """A resource amount for a sentence: CPUs and devices as numbers, memory in binary units."""
    if resource == CPU:
        return f"{value} CPU" if value == 1 else f"{value} CPUs"
    if resource == MEMORY or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if value >= size:
                shown = value / size
                return f"{shown:.0f}{suffix}" if value % size == 0 else f"{shown:.1f}{suffix}"
        return "0" if value == 0 else f"{value} bytes"
    return str(value)


def _labelled(resource: str, value: int) -> str:
    """``6 CPUs``, ``memory 42Gi``, ``nvidia.com/gpu 2``."""
    return _amount(resource, value) if resource == CPU else f"{resource} {_amount(resource, value)}"


# --------------------------------------------------------------------------------------------------- answers
def replicas(capacity: Capacity, shape: Shape, answers: ReplicaAnswers | None = None) -> int | None:
    """How many more pods of ``shape`` this node would admit now, one after another; None when numawatch cannot
    tell (a needed state is unknown) or when the shape consumes nothing numawatch counts (no limit it can see).
    At most MAX_REPLICAS."""
    if _missing(capacity, shape):
        return None
    if answers is None:
        return _count_replicas(capacity, shape)
    return answers.answer(capacity, shape)


class ReplicaAnswers:
    """The answers of ``replicas`` for the last capacity seen, kept by whoever renders a sequence of evaluations (the
    server's metrics). Between two evaluations the kubelet's state rarely changes, and admitting a small shape a few
    hundred times over several NUMA nodes is the slow part of the capacity families: every evaluation with the same
    capacity reuses them."""

    def __init__(self) -> None:
        self._slot: tuple[Hashable, dict[str, int | None]] | None = None

    def answer(self, capacity: Capacity, shape: Shape) -> int | None:
        key = _simulation_key(capacity)
        slot = self._slot
        if slot is None or slot[0] != key:
            slot = (key, {})
            self._slot = slot  # one assignment: a concurrent caller sees the old slot or the new, never half
        answers = slot[1]
        if shape.text not in answers:
            answers[shape.text] = _count_replicas(capacity, shape)
        return answers[shape.text]


def _simulation_key(capacity: Capacity) -> Hashable:
    """Everything a simulation reads from the capacity (free CPUs as counts, as the simulation keeps them)."""
    memory = None
    if capacity.memory is not None:
        memory = tuple(
            (n, node.number_of_assignments, tuple(node.cells), _tables_key(node))
            for n, node in sorted(capacity.memory.items())
        )
    return (
        capacity.topology_manager_policy,
        capacity.topology_manager_scope,
        capacity.cpu_manager_policy,
        capacity.memory_manager_policy,
        capacity.full_pcpus_only,
        capacity.distribute_cpus_across_numa,
        capacity.prefer_closest_numa_nodes,
        capacity.threads_per_core,
        tuple(sorted(capacity.node_cpus.items())),
        None if capacity.free_cpus is None else tuple(sorted((n, len(c)) for n, c in capacity.free_cpus.items())),
        memory,
        tuple(
            (name, tuple(sorted(d.topology.items(), key=lambda item: item[0])), tuple(sorted(d.free)))
            for name, d in sorted(capacity.devices.items())
        ),
        tuple(sorted(capacity.distances.items())),
        tuple(sorted(capacity.unknown.items())),
    )


def _tables_key(node: MemoryNodeState) -> tuple[tuple[str, int, int], ...]:
    return tuple(sorted((name, t.allocatable, t.free) for name, t in node.memory_map.items()))


def _count_replicas(capacity: Capacity, shape: Shape) -> int | None:
    try:
        sim = _Sim(capacity)
    except CapacityUnavailable:
        return None
    count = 0
    while count < MAX_REPLICAS:
        outcome = sim.admit(shape)
        if not outcome.admitted:
            return count
        if not outcome.consumed:
            return None
        count += 1
    return count


def largest_fit(capacity: Capacity) -> dict[tuple[int | None, str], int]:
    """Per (NUMA node, resource): the largest request of that resource a pod could still get on that node alone.

    Exclusive CPUs: the node's free (whole-core under full-pcpus-only) CPUs; memory and huge pages: the node's free
    memory, or 0 while an earlier multi-node allocation groups it with other nodes; aligned devices: free devices
    on the node. A resource registered without topology has one entry under node None: its free devices, usable
    from any node.
    """
    out: dict[tuple[int | None, str], int] = {}
    if capacity.free_cpus is not None:
        for node, cpus in capacity.free_cpus.items():
            out[(node, CPU)] = len(cpus)
    if capacity.memory is not None:
        for node, state in capacity.memory.items():
            for resource, table in state.memory_map.items():
                out[(node, resource)] = 0 if len(state.cells) > 1 else table.free
    for resource, device in capacity.devices.items():
        if device.aligned:
            for node in capacity.node_ids:
                out[(node, resource)] = len(device.on_node(node) & device.free)
        else:
            out[(None, resource)] = len(device.free)
    return out


def _needs(shape: Shape) -> set[str]:
    needs = {CPU} if any(c.exclusive_cpus for c in shape.containers) and shape.guaranteed else set()
    if shape.guaranteed and any(c.memory_requests() for c in shape.containers):
        needs.add(MEMORY)
    if any(c.devices for c in shape.containers):
        needs.add("devices")
    return needs


def _missing(capacity: Capacity, shape: Shape) -> dict[str, str]:
    return {dim: why for dim, why in capacity.unknown.items() if dim in _needs(shape)}


def _never(capacity: Capacity, sim: _Sim, shape: Shape) -> tuple[str, str]:
    """Why no pod of ``shape`` could ever be admitted here, even on an empty node, and the kubelet error it would
    meet first when that is known without simulating (SMTAlignmentError); ("", "") when a pod could be admitted."""
    cap = capacity
    if cap.full_pcpus_only and cap.allocatable_cpus is not None:
        # The CPU Manager checks each container's own request against the SMT level.
        for index, container in enumerate(shape.containers):
            cpus = sim.request(shape, container).cpus
            if cpus % cap.threads_per_core:
                who = "" if len(shape.containers) == 1 else f"container {index + 1}: "
                return (
                    f"{who}{cpus} CPUs is not a multiple of the {cap.threads_per_core} threads per core that "
                    "full-pcpus-only allocates"
                ), SMT_ALIGNMENT_ERROR
    return _too_large(cap, sim, shape), ""


def _too_large(cap: Capacity, sim: _Sim, shape: Shape) -> str:
    """The request no NUMA node (single-numa-node) or no node at all could ever hold; "" when none."""
    units = (
        [(None, sim.request(shape, None))]
        if cap.topology_manager_scope == SCOPE_POD
        else [(index, sim.request(shape, c)) for index, c in enumerate(shape.containers)]
    )
    single = cap.topology_manager_policy == SINGLE_NUMA_NODE
    for index, request in units:
        who = "" if index is None or len(shape.containers) == 1 else f"container {index + 1}: "
        if request.cpus and cap.allocatable_cpus is not None:
            sizes = {n: len(cpus) for n, cpus in cap.allocatable_cpus.items()}
            if request.cpus > sum(sizes.values()):
                return f"{who}{request.cpus} exclusive CPUs is more than the node has ({sum(sizes.values())})"
            node = max(sizes, key=lambda n: (sizes[n], -n))
            if single and request.cpus > sizes[node]:
                return (
                    f"{who}{request.cpus} exclusive CPUs is more than one NUMA node has: the largest, node {node}, "
                    f"has {sizes[node]} allocatable of {cap.node_cpus[node]} online CPUs"
                )
        if request.memory and cap.memory is not None:
            for resource, size in request.memory.items():
                sizes = {n: _MemNode.of(node).allocatable(resource) for n, node in cap.memory.items()}
                if size > sum(sizes.values()):
                    return f"{who}{resource} {_amount(resource, size)} is more than the node has allocatable"
                node = max(sizes, key=lambda n: (sizes[n], -n))
                if single and size > sizes[node]:
                    return (
                        f"{who}{resource} {_amount(resource, size)} is more than one NUMA node has: the largest, "
                        f"node {node}, has {_amount(resource, sizes[node])} allocatable"
                    )
        for resource, count in request.devices.items():
            device = cap.devices.get(resource)
            if device is None:
                continue  # "not registered" is today's state, not the hardware's
            if count > len(device.topology):
                return f"{who}{count} {resource} is more than the node has ({len(device.topology)})"
            if single and device.aligned:
                per_node = {n: len(device.on_node(n)) for n in cap.node_ids}
                node = max(per_node, key=lambda n: (per_node[n], -n))
                if count > per_node[node]:
                    return (
                        f"{who}{count} {resource} is more than one NUMA node has: the most, node {node}, has "
                        f"{per_node[node]}"
                    )
    return ""


@dataclass(frozen=True)
class FitAnswer:
    """The answer to ``numawatch check --fit SHAPE``."""

    shape: Shape
    fits: bool
    numa_nodes: tuple[int, ...]  # every node that could seat the whole pod alone right now; empty unless it fits
    policy: str  # the Topology Manager policy the answer follows
    scope: str
    reason: str
    per_node: tuple[tuple[int, Mapping[str, int]], ...] = ()  # (node, {resource: free amount})
    placement: tuple[tuple[int, ...] | None, ...] = ()  # per container: the nodes it would get (None: no alignment)
    never: bool = False  # no pod of this shape can be admitted on this hardware and configuration
    error: str = ""  # the kubelet's admission error when it would be rejected
    determined: bool = True  # False when the inputs to answer are missing
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """0 when it fits, 1 when it would be rejected, 2 when numawatch cannot tell."""
        if not self.determined:
            return EXIT_UNKNOWN
        return EXIT_FITS if self.fits else EXIT_REJECTED

    def as_dict(self) -> dict[str, Any]:
        """``{"fit": {...}}``: fits, numa_nodes, policy, reason and per_node are the contract; the rest additions."""
        return {
            "fit": {
                "fits": self.fits,
                "numa_nodes": list(self.numa_nodes),
                "policy": self.policy,
                "reason": self.reason,
                "per_node": [{"numa_node": node, "free": dict(free)} for node, free in self.per_node],
                "scope": self.scope,
                "shape": self.shape.text,
                "placement": [list(nodes) if nodes is not None else None for nodes in self.placement],
                "never": self.never,
                "error": self.error,
                "determined": self.determined,
                "notes": list(self.notes),
            }
        }

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def as_text(self) -> str:
        if not self.determined:
            verdict = "CANNOT TELL"
        elif self.fits:
            verdict = "FITS"
        else:
            verdict = f"REJECTED ({self.error})" if self.error else "REJECTED"
        lines = [
            f"shape {self.shape.text} under topology-manager-policy={self.policy}, scope={self.scope}",
            f"{verdict}: {self.reason.removeprefix('cannot tell: ')}",
        ]
        if self.determined:
            seats = ", ".join(map(str, self.numa_nodes)) if self.numa_nodes else "none"
            lines.append(f"NUMA nodes that could seat it alone now: {seats}")
        for node, free in self.per_node:
            shown = ", ".join(_labelled(r, v) for r, v in free.items()) or "nothing numawatch counts"
            lines.append(f"  node {node} free: {shown}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


def fit_answer(host: Host, intent: Intent, shape: Shape) -> FitAnswer:
    """Would the kubelet admit a pod of ``shape`` on this node now, and on which NUMA node(s)?"""
    try:
        capacity = build_capacity(host, intent)
    except CapacityUnavailable as unavailable:
        policy, scope = intent.topology_manager_policy, intent.topology_manager_scope
        return FitAnswer(shape, False, (), policy, scope, f"cannot tell: {unavailable}", determined=False)
    policy, scope = capacity.topology_manager_policy, capacity.topology_manager_scope
    notes = tuple(capacity.notes) + tuple(_shape_notes(capacity, shape))
    missing = _missing(capacity, shape)
    if missing:
        # One unreadable kubelet directory leaves cpu, memory and devices unknown for one reason: say it once.
        by_reason: dict[str, list[str]] = {}
        for dim, why in sorted(missing.items()):
            by_reason.setdefault(why, []).append(dim)
        reason = "cannot tell: " + "; ".join(f"{', '.join(dims)}: {why}" for why, dims in by_reason.items())
        return FitAnswer(shape, False, (), policy, scope, reason, determined=False, notes=notes)
    try:
        sim = _Sim(capacity)
    except CapacityUnavailable as unavailable:
        return FitAnswer(shape, False, (), policy, scope, f"cannot tell: {unavailable}", determined=False, notes=notes)
    pod = sim.request(shape, None)
    seats = sim.seats_alone(pod)
    per_node = tuple((node, _per_node_free(sim, node, pod)) for node in capacity.node_ids)
    never, never_error = _never(capacity, sim, shape)
    outcome = sim.admit(shape)
    # A rejected pod is seated nowhere: numa_nodes stays empty for it, whatever each node has free (per_node says
    # that), so the answer never lists a node that could seat a pod it also says the kubelet refuses.
    if never:
        # _never only names what no admission can get past, so the simulation refuses too.
        reason = f"can never fit on this node: {never}"
        error = never_error or outcome.error
        return FitAnswer(shape, False, (), policy, scope, reason, per_node, never=True, error=error, notes=notes)
    if not outcome.admitted:
        reason, error = outcome.reason, outcome.error
        return FitAnswer(shape, False, (), policy, scope, reason, per_node, error=error, notes=notes)
    placement = tuple(_bits(mask) if mask is not None else None for mask in outcome.placement)
    reason = _seated(capacity, placement)
    return FitAnswer(shape, True, seats, policy, scope, reason, per_node, placement, notes=notes)


def _per_node_free(sim: _Sim, node: int, pod: _Request) -> dict[str, int]:
    """What a single-node placement on ``node`` could use now (memory: 0 while the node is grouped with others)."""
    free: dict[str, int] = {}
    if sim.cpu_free is not None:
        free[CPU] = sim.cpu_free.get(node, 0)
    if sim.memory is not None:
        machine_node = sim.memory.get(node)
        usable = machine_node is not None and len(machine_node.cells) <= 1
        for resource in sorted(set(pod.memory) | {MEMORY}):
            free[resource] = machine_node.free(resource) if usable and machine_node is not None else 0
    for resource in sorted(pod.devices):
        device = sim.cap.devices.get(resource)
        if device is not None and device.aligned:
            free[resource] = len({d for d in sim.device_free[resource] if node in device.topology[d]})
    return free


def _seated(capacity: Capacity, placement: tuple[tuple[int, ...] | None, ...]) -> str:
    def where(nodes: tuple[int, ...] | None) -> str:
        if nodes is None:
            return "no particular NUMA node (nothing it asks for is placed per NUMA node)"
        if len(nodes) == 1:
            return f"NUMA node {nodes[0]}"
        return f"NUMA nodes {','.join(map(str, nodes))} (split across nodes)"

    if len(set(placement)) <= 1:
        text = f"the kubelet would seat it on {where(placement[0] if placement else None)}"
    else:
        parts = [f"container {i + 1} on {where(nodes)}" for i, nodes in enumerate(placement)]
        text = "the kubelet would seat " + "; ".join(parts)
    split = any(p is not None and len(p) > 1 for p in placement)
    if capacity.topology_manager_policy == BEST_EFFORT and split:
        text += "; best-effort admits the split, single-numa-node would refuse it"
    elif capacity.topology_manager_policy == NONE:
        text += "; topology-manager-policy none aligns nothing"
    return text


def _shape_notes(capacity: Capacity, shape: Shape) -> list[str]:
    notes = []
    if not shape.guaranteed:
        notes.append(
            "the pod is not Guaranteed (a container lacks cpu or memory): it gets no exclusive CPUs and no "
            "Memory Manager placement"
        )
    elif capacity.cpu_manager_policy == "static" and any(c.cpu_millis % 1000 for c in shape.containers):
        notes.append("a fractional CPU request gets no exclusive CPUs: that container runs on the shared pool")
    if capacity.cpu_manager_policy != "static":
        notes.append(f"cpu-manager-policy is {capacity.cpu_manager_policy}: no exclusive CPUs, CPUs are not aligned")
    if capacity.memory_manager_policy != "Static":
        notes.append(
            f"memory-manager-policy is {capacity.memory_manager_policy}: memory and huge pages are not placed per "
            "NUMA node (numawatch does not count them)"
        )
    for resource in sorted({r for c in shape.containers for r in c.devices}):
        device = capacity.devices.get(resource)
        if device is not None and not device.aligned:
            notes.append(
                f"{resource} is registered without NUMA topology: the Topology Manager cannot align it, any free "
                f"device is used ({len(device.free)} free on the node)"
            )
    return notes
