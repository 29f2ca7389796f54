"""The join of everything numawatch knows about one container: who it is, what the kubelet declared, what it got.

Every container check and the per-container metrics read this join instead of re-joining the sources:

- identity: the cgroup path gives the pod UID, the QoS class and the container ID (cgroups source); the names
  source gives namespace, pod and container names (runtime bundles, with /var/log/pods as a fallback);
- declared: exclusive CPUs, devices (NUMA node per device, ``-1`` when the plugin gave no topology) and Memory
  Manager blocks, from the live kubelet's pod-resources answer (keyed by namespace, pod and container name) when
  the pod_resources source is up and lists the container; else from the checkpoint files: ``cpu_manager_state``
  (v2+ keyed by pod UID and container name, v1 by container ID), the device-plugin checkpoint
  (``kubelet_internal_checkpoint``) and ``memory_manager_state``;
- actual: the cgroup's effective cpuset and mems and its resident memory per NUMA node;
- intent: whether the container must be exclusively pinned.

Sandbox (pause) containers are left out: they are never pinned and hold no devices.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from numawatch import telemetry
from numawatch.cpuset import CPUSet
from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.inputs import WORKLOADS
from numawatch.intent import Intent
from numawatch.model.gpu import GpuInventory
from numawatch.model.kubelet import (
    ContainerResources,
    DeviceAssignment,
    KubeletState,
    MemoryBlock,
    PodResources,
    ResourceDevices,
)
from numawatch.model.topology import Topology
from numawatch.model.workloads import ContainerCgroup, ContainerIdentity, Names, PodCgroup

# The device plugin files a device without NUMA topology under this key (devicemanager nodeWithoutTopology).
NODE_WITHOUT_TOPOLOGY = -1
# The domain of a device plugin's resources -> the vendor label of its devices (docs/gpu.md, "Device plugins").
RESOURCE_VENDORS = {"nvidia.com": "nvidia", "amd.com": "amd", "habana.ai": "habana"}

T = TypeVar("T")


@dataclass(frozen=True)
class GpuAssignment:
    """One device of a GPU resource the device manager gave a container."""

    # As the plugin registered it: a UUID ("GPU-…"), "MIG-…", "GPU-…::N" for time-sliced replicas, a PCI address
    # (amd.com/gpu), HLML's id (habana.ai/gaudi): GpuInventory.for_device_id says how each maps to a PCI function.
    device_id: str
    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu", "habana.ai/gaudi"
    plugin_numa_nodes: frozenset[int]  # nodes the plugin registered it on; empty when only under "-1"
    plugin_without_topology: bool  # listed under "-1": the Topology Manager had no hint for it
    # The PCI function's numa_node, found through the device ID (a CPU-less node: the CPU node next to it,
    # GpuDevice.cpu_node); None: unknown
    sysfs_numa_node: int | None = None
    pci_address: str | None = None  # found through the device ID; None when it is not in the sysfs inventory
    device_uuid: str | None = None  # the accelerator's stable id in the sysfs inventory (GpuDevice.uuid)
    vendor: str | None = None  # the inventory's vendor ("nvidia", "amd", "habana"); None when not found there

    @property
    def uuid(self) -> str | None:
        """The device's stable id: the inventory's when the device was found there, else the GPU or MIG UUID the
        device ID names (replica suffix ``::N`` removed), else None."""
        if self.device_uuid is not None:
            return self.device_uuid
        base = self.device_id.split("::", 1)[0]
        return base if base.startswith(("GPU-", "MIG-")) else None

    @property
    def plugin_vendor(self) -> str | None:
        """The vendor: the inventory's, else the one whose device plugin serves the resource (its domain)."""
        return self.vendor or RESOURCE_VENDORS.get(self.resource.partition("/")[0])

    @property
    def numa_node(self) -> int | None:
        """Where the GPU really is: sysfs when it knows (ground truth), else the plugin's single node."""
        if self.sysfs_numa_node is not None:
            return self.sysfs_numa_node
        if len(self.plugin_numa_nodes) == 1:
            return next(iter(self.plugin_numa_nodes))
        return None

    @property
    def label(self) -> str:
        """The ``gpu`` label: the PCI address when known (stable, what nvidia-smi shows), else the device ID."""
        return self.pci_address or self.device_id


@dataclass(frozen=True)
class Workload:
    pod_uid: str
    qos: str  # model.QOS_*
    namespace: str | None
    pod_name: str  # the pod UID when the name is unknown
    container_name: str | None
    container_id: str
    cgroup: ContainerCgroup
    # Exclusive CPUs the CPU Manager assigned; None when it assigned none (shared pool) or its state is unknown.
    exclusive_cpus: CPUSet | None
    gpus: tuple[GpuAssignment, ...]  # devices of intent.gpu_resources (Intent.is_gpu_resource)
    memory_blocks: tuple[MemoryBlock, ...]  # Memory Manager blocks (Static policy only)
    must_pin: bool

    @property
    def cpus(self) -> CPUSet | None:
        return self.cgroup.cpus_effective

    @property
    def mems(self) -> frozenset[int] | None:
        return self.cgroup.mems_effective

    @property
    def numa_bytes(self) -> Mapping[int, int] | None:
        return self.cgroup.numa_bytes

    @property
    def pinned(self) -> bool:
        """Whether the CPU Manager gave this container exclusive CPUs."""
        return bool(self.exclusive_cpus)

    @property
    def memory_nodes(self) -> frozenset[int]:
        """NUMA nodes the Memory Manager assigned (union of every block's affinity); empty when none."""
        return frozenset(node for block in self.memory_blocks for node in block.numa_affinity)

    @property
    def pod_labels(self) -> dict[str, str]:
        return {"namespace": self.namespace or "", "pod": self.pod_name, "pod_uid": self.pod_uid}

    @property
    def labels(self) -> dict[str, str]:
        """Subject labels naming this container in findings and metrics."""
        return {**self.pod_labels, "container": self.container_name or self.container_id[:12]}

    @property
    def subject(self) -> tuple[str, str, str, str]:
        """The values of ``labels`` (namespace, pod, pod_uid, container) without building its dicts: a metric family
        makes a row of them for every container."""
        return self.namespace or "", self.pod_name, self.pod_uid, self.container_name or self.container_id[:12]

    @property
    def display(self) -> str:
        """``namespace/pod/container`` for messages."""
        return f"{self.namespace or '?'}/{self.pod_name}/{self.container_name or self.container_id[:12]}"

    @property
    def pod_display(self) -> str:
        return f"{self.namespace or '?'}/{self.pod_name}"


def build_workloads(host: Host, intent: Intent) -> tuple[Workload, ...]:
    """Join every non-sandbox container cgroup with names, kubelet state, device assignments and intent.

    Sources that are down simply leave their part unknown (no names, no exclusive CPUs, no GPUs); without the
    cgroups source there are no containers to join and the result is empty. Pure: the same host and intent always
    give the same tuple. About ten checks and the metrics ask for it in one evaluation, and on a node with ~860
    containers each join costs milliseconds, so it is a derivation (``_join``): made once per Host.

    A pod's join depends on the pod and on the names, kubelet state and GPU inventory readings alone (and on which GPUs
    the topology puts on another CPU node), so in serve it is the previous join's (``_join``'s ``previous``) while
    the pod's generation (the cgroups source hands an unchanged pod out again), the inventory's generation
    (fingerprinted: unchanged while its files are) and what the names and the kubelet state say of the pod and its
    containers are the same (``_Join.keys``).
    """
    return _joined(host, intent).workloads


def workloads_by_pod(host: Host, intent: Intent) -> tuple[tuple[Workload, ...], ...]:
    """``build_workloads`` pod by pod: one tuple per pod cgroup, in the cgroups source's order (empty for a pod of
    sandboxes only), whose concatenation is ``build_workloads``."""
    return _joined(host, intent).per_pod


def per_pod(
    host: Host,
    intent: Intent,
    name: str,
    inputs: Hashable,
    make: Callable[[tuple[Workload, ...]], T],
    *,
    pod_input: Callable[[tuple[Workload, ...]], Hashable] | None = None,
    by_uid: bool = False,
    reads_numa_bytes: bool = True,
) -> tuple[T, ...]:
    """``make(workloads of one pod)`` for every pod with workloads, in the cgroups source's order, each made once
    for as long as what it depends on stays the same (the one place a check or metric reuses per-pod values).

    ``make`` may depend on nothing but those workloads, the intent, ``inputs`` (what every pod's value depends on
    besides its workloads: generation numbers and values, compared once per reading) and ``pod_input(workloads)``
    (what one pod's value depends on besides: a value cheap to compare, such as its usage reading). A pod whose
    workloads were joined under the same key as at the previous reading (``_Join.keys``: the generations of the
    pod and the sources joined with it), with equal ``inputs`` and ``pod_input``, gets the value made then
    (``Host.renew``, one table per ``name`` holding the current pods only); a pod without a key (a Host not made by
    a HostReader) gets a new one. ``by_uid``: the pod cgroups of one UID (an old one lingering after a restart) are
    one pod, their workloads together, in the order the UID is first listed. ``reads_numa_bytes=False``: ``make``
    reads no ``Workload.numa_bytes``, so a pod is keyed by its join without them (``_versions``) and keeps its
    value when only its containers' memory.numa_stat numbers moved.
    """
    joined = _joined(host, intent)
    # Every table of this kind at this reading shares one list of units and of keys (made once per reading).
    units, keys = joined.units(reads_numa_bytes, by_uid)
    owns: list[Hashable] = [None] * len(units)
    if pod_input is not None:
        owns = [pod_input(workloads) for _, workloads in units]

    def table(prior: _PerPod[T] | None) -> _PerPod[T]:
        # The table holds the intent's version it was made for, what every pod's join depended on (part of every
        # pod key: when it changed, no pod's key is the same) and the inputs, compared once here.
        if (
            not isinstance(prior, _PerPod)
            or prior.intent != intent.version
            or prior.context != joined.context
            or prior.inputs != inputs
        ):
            prior = None
        if prior is not None and prior.keys == keys and prior.owns == owns and None not in keys:
            return prior  # nothing changed, the usual reading: the same pods under the same keys
        if prior is None:
            made = tuple(make(workloads) for _, workloads in units)
        else:
            made = _made(units, owns, joined.positions(reads_numa_bytes, by_uid, prior), prior, make)
        keys_of = (joined.serial, reads_numa_bytes, by_uid)
        return _PerPod(intent.version, joined.context, inputs, keys_of, keys, owns, made)

    return host.renew(("per_pod", name, reads_numa_bytes), table).made


@dataclass(frozen=True, eq=False)
class _PerPod(Generic[T]):
    """What ``per_pod`` made at one reading for one name: each pod's key, place, ``pod_input`` and value, in pod
    order."""

    intent: str  # Intent.version
    context: Hashable | None
    inputs: Hashable
    keys_of: tuple[int, bool, bool]  # whose ``keys`` these are: the join's serial, reads_numa_bytes, by_uid
    keys: list[Hashable | None]
    owns: list[Hashable]
    made: tuple[T, ...]


def _made(
    units: list[tuple[Hashable | None, tuple[Workload, ...]]],
    owns: list[Hashable],
    positions: list[int | None],
    prior: _PerPod[T],
    make: Callable[[tuple[Workload, ...]], T],
) -> tuple[T, ...]:
    """Each pod's value: the prior reading's where its key (``positions``: where it stood among the prior
    reading's, ``_positions``) and ``pod_input`` are the same, else made anew."""
    prior_owns, prior_made = prior.owns, prior.made
    made: list[T] = []
    for (_, workloads), own, at in zip(units, owns, positions, strict=True):
        if at is not None and prior_owns[at] == own:
            made.append(prior_made[at])
        else:
            made.append(make(workloads))
    return tuple(made)


def _positions(keys: list[Hashable | None], prior_keys: list[Hashable | None]) -> list[int | None]:
    """For each of ``keys``, where the same key stood in ``prior_keys`` (None: nowhere, or no key).

    The join hands an unchanged pod's key out as the object it made before (``_join``): the lookup compares such a
    key with itself at once."""
    at_of = {key: index for index, key in enumerate(prior_keys) if key is not None}
    return [None if key is None else at_of.get(key) for key in keys]


def _units(
    by_pod: tuple[tuple[Workload, ...], ...], keys: tuple[Hashable | None, ...], by_uid: bool
) -> list[tuple[Hashable | None, tuple[Workload, ...]]]:
    """(key, workloads) of every pod with workloads; ``by_uid``: of every pod UID, keyed by its pod cgroups' keys
    (None when one has none)."""
    pods = [(key, workloads) for key, workloads in zip(keys, by_pod, strict=True) if workloads]
    if not by_uid or _distinct(workloads[0].pod_uid for _, workloads in pods):
        return pods
    grouped: dict[str, list[tuple[Hashable | None, tuple[Workload, ...]]]] = {}
    for key, workloads in pods:
        grouped.setdefault(workloads[0].pod_uid, []).append((key, workloads))
    units: list[tuple[Hashable | None, tuple[Workload, ...]]] = []
    for members in grouped.values():
        if len(members) == 1:
            units.append(members[0])
            continue
        member_keys = tuple(key for key, _ in members)
        key = None if None in member_keys else ("uid", member_keys)
        units.append((key, tuple(w for _, workloads in members for w in workloads)))
    return units


def _distinct(values: Iterable[Hashable]) -> bool:
    listed = list(values)
    return len(set(listed)) == len(listed)


def _context(host: Host) -> tuple[Hashable, ...] | None:
    """What every pod's join depends on besides the pod: the generations of the sources it joins with, and the only
    part of the topology it reads (``_moved_gpus``); None when the generations are unknown."""
    if not host.generations:
        return None
    inventory = telemetry.inventory_of(host)
    # The devices named as parts of a GPU: NVML's MIG devices join in through telemetry.inventory_of, and the nvml
    # source is read at every evaluation, so its generation would never let a join be reused; what it adds is keyed.
    parts = tuple(sorted(inventory.partitions.items())) if inventory is not None else ()
    return (*(host.generation(name) for name in _JOINED_SOURCES), _moved_gpus(inventory, host.topology), parts)


# The sources a pod's join reads besides the pod, the topology, the names and the kubelet state (see _Shared); their
# generations key the join. The names and the kubelet state are keyed by what the pod's join reads of them
# (``_NamesOf``, ``_state_of``): under pod churn the names source is read again at nearly every evaluation, for one
# pod's bundles, and the CPU Manager's state changes with every pod pinned, and every other pod's join still holds.
_JOINED_SOURCES = ("gpus_sysfs",)


class _PodVersions(NamedTuple):
    """What ``_versions`` worked out for one pod, for the next join to start from. The generations of the names and
    the kubelet state it was worked out under are the join's (``_Join.names_generation``, ``state_generation``):
    every join works out every current pod's."""

    generation: int  # the pod's (PodCgroup.generation)
    versions: tuple[Hashable, Hashable, Hashable]  # of what the names, the kubelet state and the layout say of it
    views: tuple[Hashable, Hashable, Hashable]  # what they say of it
    looked_up: frozenset[str]  # what the names are looked up by for it: its UID and its containers' IDs


def _versions(
    pod: PodCgroup,
    known: _PodVersions | None,
    names: _NamesOf,
    state: _Declared,
    slices: _DevicesByUid,
    names_generation: int | None,
    state_generation: Hashable,
    read_again: tuple[bool, bool],
    names_moved: frozenset[str] | None,
) -> _PodVersions:
    """Tokens that change exactly when what the names say of ``pod`` (``_NamesOf``), what the kubelet state says of
    it (``_state_of``) and its layout (``_layout_of``: the pod less its containers' ``numa_bytes``) do: the
    generations at which each last changed. Small, so the keys holding them compare cheaply; each worked out again
    only when its source or the pod was read again, from what the previous join worked out (``known``).
    ``names_generation`` and ``state_generation``: those sources' generations in the Host (the latter those of
    the kubelet state and the pod-resources answer); ``read_again``: whether each moved since ``known`` was worked
    out; ``names_moved``: the names' entries that moved then (``_names_moved``; None: unknown)."""
    generation = pod.generation
    if known is None:
        names_view, state_view, layout_view = names(pod), _state_of(pod, state, slices), _layout_of(pod)
        return _PodVersions(
            generation,
            ((names_generation, generation), (state_generation, generation), generation),
            (names_view, state_view, layout_view),
            _looked_up(pod),
        )
    names_read, state_read = read_again
    same_layout = known.generation == generation
    looked_up = known.looked_up
    names_version, state_version, layout_version = known.versions
    names_view, state_view, layout_view = known.views
    # What the names and the kubelet state say of a pod depends on it through its UID and its containers' IDs alone,
    # which its layout holds: while the layout is the same (a new generation of the pod whose containers' memory
    # numbers moved, the usual one), those views change only with their sources, and the names' only when an entry
    # it is looked up by moved.
    if not same_layout:
        view = _layout_of(pod)
        same_layout = view == layout_view
        if not same_layout:
            layout_version = generation
            looked_up = _looked_up(pod)
        layout_view = view
    if same_layout and names_read and names_moved is not None and names_moved.isdisjoint(looked_up):
        names_read = False
    if known.generation == generation and not names_read and not state_read:
        return known  # nothing of it was read again
    if not same_layout or names_read:
        view = names(pod)
        if view != names_view:
            names_version = (names_generation, generation)
        names_view = view
    if not same_layout or state_read:
        view = _state_of(pod, state, slices)
        if view != state_view:
            state_version = (state_generation, generation)
        state_view = view
    return _PodVersions(
        generation, (names_version, state_version, layout_version), (names_view, state_view, layout_view), looked_up
    )


def _looked_up(pod: PodCgroup) -> frozenset[str]:
    return frozenset((pod.uid, *(container.container_id for container in pod.containers)))


def _state_of(pod: PodCgroup, declared: _Declared, slices: _DevicesByUid) -> Hashable:
    """All that a pod's join reads of what the kubelet declared (``_join_pod``, ``_checkpoint_fallback``): the
    pod-resources entries of the pod's names, and of the checkpoints the CPU Manager's entries of the pod's UID and
    v1 entries of its containers' IDs, the Memory Manager's entries of its UID and the device checkpoint's entries of
    its UID, each None when that file is unknown (None when the source is down)."""
    return declared.live_of(pod), _checkpoints_of(pod, declared.state, slices)


def _checkpoints_of(pod: PodCgroup, state: KubeletState | None, slices: _DevicesByUid) -> Hashable:
    if state is None:
        return None
    cpu, memory, devices = state.cpu, state.memory, state.devices
    cpu_part: Hashable = None
    if cpu is not None:
        own = cpu.entries.get(pod.uid)
        cpu_part = (
            tuple(own.items()) if own is not None else None,
            tuple(cpu.entries_v1.get(container.container_id) for container in pod.containers),
        )
    memory_part: Hashable = None
    if memory is not None:
        blocks = memory.entries.get(pod.uid)
        memory_part = tuple(blocks.items()) if blocks is not None else None
    device_part = slices.of(pod.uid) if devices is not None else None
    return cpu_part, memory_part, device_part


class _DevicesByUid:
    """The device checkpoint's entries by pod UID, gathered on the first pod whose kubelet state view is asked for."""

    __slots__ = ("_by_uid", "_entries")

    def __init__(self, state: KubeletState | None) -> None:
        self._entries = state.devices.entries if state is not None and state.devices is not None else ()
        self._by_uid: dict[str, tuple[DeviceAssignment, ...]] | None = None

    def of(self, uid: str) -> tuple[DeviceAssignment, ...]:
        if self._by_uid is None:
            grouped: dict[str, list[DeviceAssignment]] = defaultdict(list)
            for entry in self._entries:
                grouped[entry.pod_uid].append(entry)
            self._by_uid = {key: tuple(entries) for key, entries in grouped.items()}
        return self._by_uid.get(uid, ())


class _Declared:
    """What the kubelet declared, as a pod's join reads it: its checkpoint files (``state``) and, first, its live
    pod-resources answer (``live``), whose entries are found by the pod's namespace and name (``pod_keys``)."""

    __slots__ = ("live", "names", "state")

    def __init__(self, state: KubeletState | None, live: PodResources | None, names: Names | None) -> None:
        self.state = state
        self.live = live
        self.names = names

    def live_of(self, pod: PodCgroup) -> Hashable:
        """The pod-resources entries of the pod's names, each with its name (None when the source is down): a view
        looked at again only when the kubelet state or the answer is read again, so it names the names it looked
        up; a rename changes the pod's names version anyway, and at the next look a view under the new names."""
        live = self.live
        if live is None:
            return None
        return tuple((key, live.pods.get(key)) for key in pod_keys(pod, self.names))


def pod_keys(pod: PodCgroup, names: Names | None) -> tuple[tuple[str, str], ...]:
    """The (namespace, pod name) pairs the names source gives the pod's containers, in order: one on every node
    but one whose runtime state is inconsistent; none when the names are unknown."""
    if names is None:
        return ()
    keys: list[tuple[str, str]] = []
    for container in pod.containers:
        namespace, pod_name = _pod_identity(pod.uid, names.containers.get(container.container_id), names)
        if namespace is not None and pod_name is not None and (namespace, pod_name) not in keys:
            keys.append((namespace, pod_name))
    if not keys:
        identity = names.pods.get(pod.uid)
        if identity is not None:
            keys.append((identity.namespace, identity.name))
    return tuple(keys)


def _layout_of(pod: PodCgroup) -> Hashable:
    """The pod as its join reads it, less its containers' ``numa_bytes``: every other field of each container
    (tests/test_workloads_by_pod.py holds this list to the fields of ContainerCgroup)."""
    return (
        pod.uid,
        pod.qos,
        tuple(
            (c.container_id, c.runtime, c.cgroup_path, c.cpus_effective, c.mems_effective, c.is_sandbox, c.pids)
            for c in pod.containers
        ),
    )


class _NamesOf:
    """All that a pod's join reads of the names source (called with the pod): the pod's identity, its containers'
    identities and its log directory's container names, or None when the source is down. The source hands an
    unchanged bundle's identity out again (the same object), so comparing the view with the last one costs little."""

    __slots__ = ("_containers", "_logs", "_pods")

    def __init__(self, names: Names | None) -> None:
        self._pods = names.pods.get if names is not None else None
        self._containers = names.containers.get if names is not None else None
        self._logs = names.pod_log_containers.get if names is not None else None

    def __call__(self, pod: PodCgroup) -> Hashable:
        containers = self._containers
        if containers is None or self._pods is None or self._logs is None:
            return None
        return (
            self._pods(pod.uid),
            tuple([containers(container.container_id) for container in pod.containers]),
            self._logs(pod.uid),
        )


def _moved_gpus(inventory: GpuInventory | None, topology: Topology | None) -> tuple[tuple[str, int | None], ...]:
    """The GPUs whose CPU node is not their ``numa_node`` (a CPU-less memory node: GpuDevice.cpu_node), with it: the
    only part of the topology a pod's join depends on (empty on most nodes), so a re-read topology that leaves it
    alone keeps the joins."""
    if inventory is None:
        return ()
    nodes = [(gpu, gpu.cpu_node(topology)) for gpu in inventory.gpus]
    return tuple((gpu.pci_address, node) for gpu, node in nodes if node != gpu.numa_node)


def _joined(host: Host, intent: Intent) -> _Join:
    return _join(host, intent)


# Tells one join from every other (``_Join.serial``): a per_pod table names the join whose keys it holds by it.
_JOIN_SERIALS = itertools.count(1)
# A pod's key (and layout key) is a number drawn when its join is made and handed on while the join is reused, so
# that every per_pod table compares and looks up plain integers, never the versions a key stands for.
_KEY_SERIALS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class _PodJoin:
    """One pod's join, with what it was made under: the pod's generation, the versions of what the names and the
    kubelet state say of it, and its layout's version (the join's intent and ``_context`` are the ``_Join``'s); and
    its keys."""

    joined: tuple[Workload, ...]
    generation: int
    sources: tuple[Hashable, Hashable]  # the names' and the kubelet state's versions (``_PodVersions.versions``)
    layout_version: Hashable
    key: int  # the pod's key (``_Join.keys``): the same number exactly while this join is reused
    layout_key: int  # its key without its containers' numa_bytes (``_Join.layout_keys``)


@dataclass(frozen=True, eq=False)
class _Join:
    """One Host's join, and what the next join starts from (``by_path``, ``versions``: the current pods' only, so a
    pod that goes is forgotten with the next join)."""

    serial: int
    workloads: tuple[Workload, ...]
    per_pod: tuple[tuple[Workload, ...], ...]  # the workloads of each pod in cgroups.pods, in order
    # Each pod's key: a number that stays the same exactly while the pod's join is reused, that is while the pod's
    # generation, the versions of what the names and the kubelet state say of it, the intent's version and
    # ``context`` stay the same; None when one is unknown (a Host not made by a HostReader, a pod from a one-off
    # reading): never reused.
    keys: tuple[int | None, ...]
    context: Hashable | None = None  # what every pod's join depends on besides the pod (_context)
    # Each pod's key without its containers' numa_bytes (per_pod's reads_numa_bytes=False): the same number while
    # its layout's version (in place of its generation) and the rest stay the same.
    layout_keys: tuple[int | None, ...] = ()
    intent: str | None = None  # the version of the intent joined under
    by_path: Mapping[str, _PodJoin] = field(default_factory=dict, repr=False)  # by pod cgroup path
    versions: Mapping[str, _PodVersions] = field(default_factory=dict, repr=False)  # by pod cgroup path
    # The generations of the names and of the kubelet state (with the pod-resources answer) ``versions`` were worked
    # out under.
    names_generation: int | None = None
    state_generation: Hashable = None
    names: Names | None = field(default=None, repr=False)  # the names snapshot of ``names_generation``
    # What every per_pod table of one kind works out alike at this reading (``units``, ``positions``), made once.
    _shared: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def units(
        self, reads_numa_bytes: bool, by_uid: bool
    ) -> tuple[list[tuple[Hashable | None, tuple[Workload, ...]]], list[Hashable | None]]:
        """The (key, workloads) units of per_pod's tables of this kind, and their keys (one list, shared)."""
        found = self._shared.get((reads_numa_bytes, by_uid))
        if found is None:
            units = _units(self.per_pod, self.keys if reads_numa_bytes else self.layout_keys, by_uid)
            found = self._shared[(reads_numa_bytes, by_uid)] = (units, [key for key, _ in units])
        return found

    def positions(self, reads_numa_bytes: bool, by_uid: bool, prior: _PerPod[Any]) -> list[int | None]:
        """``_positions`` of this kind's keys among ``prior``'s: tables made from one join's shared list of keys
        (``_PerPod.keys_of``) ask for the same, worked out once."""
        key = ("positions", reads_numa_bytes, by_uid, prior.keys_of)
        found = self._shared.get(key)
        if found is None:
            found = self._shared[key] = _positions(self.units(reads_numa_bytes, by_uid)[1], prior.keys)
        return found


_NO_JOIN = _Join(0, (), (), (), None, ())


@derivation("workloads.join", inputs=(WORKLOADS,), per_intent=True, incremental=True)
def _join(host: Host, intent: Intent, previous: _Join | None) -> _Join:
    """The join of every pod, starting from the previous join (``previous``): a pod made under the same versions is
    the same workloads (and keys), and one whose layout is the same the same workloads over its new container
    objects. The previous join's pods are reused only when it was made for the same intent and ``_context``."""
    names, state, inventory, topology = host.names, host.kubelet_state, telemetry.inventory_of(host), host.topology
    cgroups = host.cgroups
    if cgroups is None:
        return _Join(next(_JOIN_SERIALS), (), (), (), None, ())
    before = previous if previous is not None else _NO_JOIN
    context = _context(host)
    reusable = context is not None and before.intent == intent.version and before.context == context
    before_by_path: Mapping[str, _PodJoin] = before.by_path if reusable else {}
    shared: _Shared | None = None  # built on the first pod that is joined: none when every pod is reused
    workloads: list[Workload] = []
    per_pod: list[tuple[Workload, ...]] = []
    keys: list[int | None] = []
    layout_keys: list[int | None] = []
    by_path: dict[str, _PodJoin] = {}
    versions_by_path: dict[str, _PodVersions] = {}
    slices = _DevicesByUid(state)
    names_of = _NamesOf(names)
    declared = _Declared(state, host.pod_resources, names)
    names_generation = host.generation("names")
    state_generation = (host.generation("kubelet_state"), host.generation("pod_resources"))
    names_read = names_generation != before.names_generation
    state_read = state_generation != before.state_generation
    # Under pod churn the names move at nearly every reading, for the few pods that came or went: the entries that
    # moved tell which pods' views to look at again (None: every pod's).
    moved = _names_moved(before.names, names) if names_read else None
    for pod in cgroups.pods:
        path = pod.cgroup_path
        if context is None or not pod.generation:
            if shared is None:
                shared = _Shared(names, state, host.pod_resources, inventory, topology, intent)
            joined = _join_pod(pod, shared)
            keys.append(None)
            layout_keys.append(None)
            per_pod.append(joined)
            workloads.extend(joined)
            continue
        versions = versions_by_path[path] = _versions(
            pod, before.versions.get(path), names_of, declared, slices, names_generation, state_generation,
            (names_read, state_read), moved,
        )  # fmt: skip
        names_version, state_version, layout_version = versions.versions
        entry = before_by_path.get(path)
        if entry is not None and (entry.sources[0] != names_version or entry.sources[1] != state_version):
            entry = None  # what the names or the kubelet state say of it moved: joined anew
        if entry is not None and entry.generation != pod.generation:
            if entry.layout_version == layout_version:
                # Only its containers' numa_bytes moved (a Guaranteed pod's at every turn of its fixed round): the
                # same workloads over the new container objects.
                joined = _over_containers(entry.joined, pod)
                entry = _PodJoin(joined, pod.generation, entry.sources, layout_version, next(_KEY_SERIALS),
                                 entry.layout_key)  # fmt: skip
            else:
                entry = None
        if entry is None:
            if shared is None:
                shared = _Shared(names, state, host.pod_resources, inventory, topology, intent)
            joined = _join_pod(pod, shared)
            entry = _PodJoin(joined, pod.generation, (names_version, state_version), layout_version,
                             next(_KEY_SERIALS), next(_KEY_SERIALS))  # fmt: skip
        by_path[path] = entry
        keys.append(entry.key)
        layout_keys.append(entry.layout_key)
        per_pod.append(entry.joined)
        workloads.extend(entry.joined)
    return _Join(
        next(_JOIN_SERIALS), tuple(workloads), tuple(per_pod), tuple(keys), context, tuple(layout_keys),
        intent.version, by_path, versions_by_path, names_generation, state_generation, names,
    )  # fmt: skip


_ABSENT = object()


def _names_moved(before: Names | None, now: Names | None) -> frozenset[str] | None:
    """The container IDs and pod UIDs whose entries in the names snapshot ``now`` differ from ``before``'s (added,
    removed or changed): all that ``_NamesOf`` looks a pod up by. None when either is unknown. The source hands an
    unchanged entry out as the same object, so most are told apart by identity, the rest by equality."""
    if before is None or now is None:
        return None
    moved: set[str] = set()
    for current, previous in (
        (now.containers, before.containers),
        (now.pods, before.pods),
        (now.pod_log_containers, before.pod_log_containers),
    ):
        if current is previous:
            continue
        get = previous.get
        present = 0
        for key, value in current.items():
            old = get(key, _ABSENT)
            if old is _ABSENT:
                moved.add(key)
                continue
            present += 1
            if old is not value and old != value:
                moved.add(key)
        if present != len(previous):  # some went
            moved.update(key for key in previous if key not in current)
    return frozenset(moved)


def _over_containers(workloads: tuple[Workload, ...], pod: PodCgroup) -> tuple[Workload, ...]:
    """``workloads``, joined for a pod of the same layout as ``pod`` (``_layout_of``: equal but for the containers'
    ``numa_bytes``), over ``pod``'s container objects: what the join took of a container is the same, and a value
    that reads ``Workload.numa_bytes`` reads the new numbers."""
    containers = {container.container_id: container for container in pod.containers}
    # The constructor, not dataclasses.replace (which reads every field by name): half the cost, and this runs for
    # every container of every Guaranteed pod at its turn.
    return tuple([_with_cgroup(w, containers[w.container_id]) for w in workloads])


def _with_cgroup(w: Workload, cgroup: ContainerCgroup) -> Workload:
    return Workload(w.pod_uid, w.qos, w.namespace, w.pod_name, w.container_name, w.container_id, cgroup,
                    w.exclusive_cpus, w.gpus, w.memory_blocks, w.must_pin)  # fmt: skip


class _Shared:
    """What every pod's join looks up, derived once per join."""

    __slots__ = ("cpu_state", "devices", "intent", "inventory", "live", "memory_state", "names", "state", "topology")

    def __init__(
        self,
        names: Names | None,
        state: KubeletState | None,
        live: PodResources | None,
        inventory: GpuInventory | None,
        topology: Topology | None,
        intent: Intent,
    ) -> None:
        self.names = names
        self.state = state
        self.live = live
        self.cpu_state = state.cpu if state else None
        self.memory_state = state.memory if state else None
        self.devices = _devices_by_container(state.devices.entries if state and state.devices else ())
        self.inventory = inventory
        self.topology = topology
        self.intent = intent


def _join_pod(pod: PodCgroup, shared: _Shared) -> tuple[Workload, ...]:
    """The workloads of one pod's non-sandbox containers."""
    names, state, intent = shared.names, shared.state, shared.intent
    cpu_state, memory_state = shared.cpu_state, shared.memory_state
    has_selectors = bool(intent.pinned)
    containers = [c for c in pod.containers if not _is_sandbox(c, names)]
    fallback_name = _pod_log_fallback(pod, containers, names) or _checkpoint_fallback(pod, containers, names, state)
    workloads: list[Workload] = []
    for container in containers:
        identity = names.containers.get(container.container_id) if names else None
        namespace, pod_name = _pod_identity(pod.uid, identity, names)
        container_name = identity.container_name if identity and identity.container_name else fallback_name

        live = _live_entry(shared.live, namespace, pod_name, container_name)
        exclusive: CPUSet | None = None
        blocks: tuple[MemoryBlock, ...] = ()
        assigned: Sequence[DeviceAssignment | ResourceDevices] | None = None
        if live is not None:
            exclusive, blocks, assigned = live.exclusive_cpus, live.memory_blocks, live.devices
        else:
            if cpu_state is not None:
                if container_name is not None:
                    exclusive = cpu_state.entries.get(pod.uid, {}).get(container_name)
                if exclusive is None:
                    exclusive = cpu_state.entries_v1.get(container.container_id)
            if memory_state is not None and container_name is not None:
                blocks = tuple(memory_state.entries.get(pod.uid, {}).get(container_name, ()))
            if container_name is not None:
                assigned = shared.devices.get((pod.uid, container_name))

        gpus: tuple[GpuAssignment, ...] = ()
        if assigned:  # most containers hold no device: skip the work for them (~860 on a large node)
            gpus = _gpu_assignments(
                [a for a in assigned if shared.intent.is_gpu_resource(a.resource_name)],
                shared.inventory,
                shared.topology,
            )

        must_pin = (intent.pin_gpu_containers and bool(gpus)) or (
            has_selectors and intent.must_pin(namespace, pod_name, container_name)
        )
        workloads.append(
            Workload(
                pod_uid=pod.uid,
                qos=pod.qos,
                namespace=namespace,
                pod_name=pod_name or pod.uid,
                container_name=container_name,
                container_id=container.container_id,
                cgroup=container,
                exclusive_cpus=exclusive or None,
                gpus=gpus,
                memory_blocks=blocks,
                must_pin=must_pin,
            )
        )
    return tuple(workloads)


def _live_entry(
    live: PodResources | None, namespace: str | None, pod_name: str | None, container_name: str | None
) -> ContainerResources | None:
    """What the live kubelet says the container holds: None when the source is down, the names are unknown, or
    the kubelet does not list it (a pod it no longer runs, an init container): the checkpoints then stand."""
    if live is None or namespace is None or pod_name is None or container_name is None:
        return None
    containers = live.pods.get((namespace, pod_name))
    return containers.get(container_name) if containers is not None else None


def _is_sandbox(container: ContainerCgroup, names: Names | None) -> bool:
    if container.is_sandbox:
        return True
    identity = names.containers.get(container.container_id) if names else None
    return identity is not None and identity.container_type == "sandbox"


def _pod_identity(uid: str, identity: ContainerIdentity | None, names: Names | None) -> tuple[str | None, str | None]:
    namespace = identity.namespace if identity else None
    pod_name = identity.pod_name if identity else None
    if (namespace is None or pod_name is None) and names is not None:
        pod = names.pods.get(uid)
        if pod is not None:
            namespace = namespace or pod.namespace
            pod_name = pod_name or pod.name
    return namespace, pod_name


def _pod_log_fallback(pod: PodCgroup, containers: list[ContainerCgroup], names: Names | None) -> str | None:
    """The container name /var/log/pods gives when the runtime did not: only when the pod has one container.

    With one log directory there is one container name, so every unnamed container of the pod is that container
    (an old and a new instance after a restart). With several we cannot tell which cgroup is which, and guessing
    would join the wrong exclusive CPUs or GPUs.
    """
    if names is None:
        return None
    logged = names.pod_log_containers.get(pod.uid, ())
    if len(logged) != 1:
        return None
    unnamed = [c for c in containers if not _named(c, names)]
    return logged[0] if unnamed else None


def _checkpoint_fallback(
    pod: PodCgroup, containers: list[ContainerCgroup], names: Names | None, state: KubeletState | None
) -> str | None:
    """The one container name the kubelet's checkpoints know for a pod with one container, when names are unknown.

    Without the names source (runtime state not mounted) a single-container pod can still be joined: every
    checkpoint entry of that pod UID is about its one container. Init containers that left entries behind make
    the name ambiguous, and then nothing is guessed.
    """
    if state is None or len(containers) != 1 or (names is not None and _named(containers[0], names)):
        return None
    known: set[str] = set()
    if state.cpu is not None:
        known.update(state.cpu.entries.get(pod.uid, {}))
    if state.memory is not None:
        known.update(state.memory.entries.get(pod.uid, {}))
    if state.devices is not None:
        known.update(e.container_name for e in state.devices.entries if e.pod_uid == pod.uid)
    return known.pop() if len(known) == 1 else None


def _named(container: ContainerCgroup, names: Names) -> bool:
    identity = names.containers.get(container.container_id)
    return identity is not None and bool(identity.container_name)


def _devices_by_container(entries: tuple[DeviceAssignment, ...]) -> dict[tuple[str, str], list[DeviceAssignment]]:
    by_container: dict[tuple[str, str], list[DeviceAssignment]] = defaultdict(list)
    for entry in entries:
        by_container[(entry.pod_uid, entry.container_name)].append(entry)
    return by_container


# A device ID or resource name as device plugins register them ("GPU-<uuid>", "MIG-...", "GPU-...::3",
# "nvidia.com/gpu"): printable ASCII without spaces, bounded. The checkpoint carries whatever was written into it.
_REPEATABLE = re.compile(r"[\x21-\x7e]{1,256}")


def _repeatable(value: str) -> bool:
    return _REPEATABLE.fullmatch(value) is not None


def _gpu_assignments(
    assigned: Sequence[DeviceAssignment | ResourceDevices], inventory: GpuInventory | None, topology: Topology | None
) -> tuple[GpuAssignment, ...]:
    # A device on several NUMA nodes is listed under each of them; collect its nodes first.
    nodes_of: dict[tuple[str, str], set[int]] = {}
    for entry in assigned:
        for node, device_ids in entry.devices_per_numa.items():
            for device_id in device_ids:
                nodes_of.setdefault((entry.resource_name, device_id), set()).add(node)
    result = []
    for (resource, device_id), nodes in nodes_of.items():
        if not _repeatable(device_id) or not _repeatable(resource):
            continue  # it would become a gpu label: only what a device plugin registers (kubelet_state decodes any)
        assignment = GpuAssignment(
            device_id=device_id,
            resource=resource,
            plugin_numa_nodes=frozenset(n for n in nodes if n != NODE_WITHOUT_TOPOLOGY),
            plugin_without_topology=NODE_WITHOUT_TOPOLOGY in nodes,
        )
        gpu = inventory.for_device_id(device_id) if inventory else None
        if gpu is not None:
            assignment = GpuAssignment(
                device_id=device_id,
                resource=resource,
                plugin_numa_nodes=assignment.plugin_numa_nodes,
                plugin_without_topology=assignment.plugin_without_topology,
                sysfs_numa_node=gpu.cpu_node(topology),
                pci_address=gpu.pci_address,
                device_uuid=gpu.uuid,
                vendor=gpu.vendor,
            )
        result.append(assignment)
    return tuple(sorted(result, key=lambda g: (g.resource, g.device_id)))
