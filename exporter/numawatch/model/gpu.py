"""GPUs.

The accelerators on the PCI bus of every vendor (``gpus_sysfs``, sources/gpus_sysfs.py); every GPU NVML enumerates,
its busy time integrated from NVML's utilisation samples, and the compute processes on it with the container their
cgroup names (``nvml``, sources/nvml.py); for the containers that hold GPUs, the scheduling counters summed over all
threads of their processes, and for each process its threads' allowed CPUs and its locked-memory limit
(``processes``, sources/processes.py). NVML's readings are kept in capture bundles as JSON (``JsonRecording``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from numawatch.cpuset import CPUSet
from numawatch.errors import MalformedFile
from numawatch.hosttext import printable
from numawatch.model import frozen_map
from numawatch.model.topology import Topology


# --------------------------------------------------------------------------------------------------- GPUs (sysfs)
@dataclass(frozen=True)
class GpuDevice:
    pci_address: str  # "0000:18:00.0", as sysfs names it
    numa_node: int | None  # sysfs numa_node; None when the kernel says -1
    local_cpus: CPUSet | None  # local_cpulist (the local_cpus mask where there is no list)
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
        An absent or malformed ``numa_node`` (not the kernel's -1) is unknown: the node is then the one its
        ``local_cpulist`` (or ``local_cpus`` mask) lies on, when exactly one.
        """
        node = self.numa_node
        if node is None and "numa_node" in self.problems and topology is not None and self.local_cpus:
            near = [n for n, other in topology.nodes.items() if not other.cpus.isdisjoint(self.local_cpus)]
            return near[0] if len(near) == 1 else None
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
    # Parts of a GPU by the device IDs plugins register them under -> the PCI address of the GPU each is part of: MI300
    # compute partitions (``amdgpu_xcp_<n>``; gpus_sysfs, through the render node and the KFD topology) and NVIDIA MIG
    # devices (``MIG-<uuid>``; added from NVML's MIG devices by telemetry.inventory_of)
    partitions: Mapping[str, str] = field(default_factory=frozen_map)

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
          R470 gave (``MIG-GPU-<uuid>/<gi>/<ci>``) names its parent GPU; a MIG device's own ``MIG-<uuid>`` is not in
          sysfs: its parent where NVML's MIG devices are in ``partitions`` (telemetry.inventory_of), else None;
        - AMD (ROCm k8s-device-plugin): the PCI address of the function amdgpu binds (``0000:c1:00.0``), or for an
          MI300 compute partition its platform device's name (``amdgpu_xcp_<n>``), which names its parent GPU;
        - Gaudi (habanalabs device plugin): HLML's id for the device, matched with the stable id sysfs gives (the
          serial number) or the PCI address.
        """
        base = device_id.split("::", 1)[0]
        parent = self.partitions.get(base)
        if parent is not None:
            return self.by_pci(parent)
        if base.startswith("MIG-GPU-"):
            base = base[len("MIG-") :].split("/", 1)[0]
        return self.by_pci(base.lower()) or self.by_uuid(base)


UTILIZATION_SAMPLES = "samples"  # integrated from nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)


UTILIZATION_RATES = "rates"  # the sample buffer was empty: nvmlDeviceGetUtilizationRates over the interval


# --------------------------------------------------------------------------------------------------- NVML
@dataclass(frozen=True)
class GpuProcess:
    """One compute process NVML lists on a GPU, and where its cgroup puts it."""

    pid: int  # in the host PID namespace (numawatch runs with hostPID)
    used_memory_bytes: int | None  # None when NVML cannot say (NVML_VALUE_NOT_AVAILABLE)
    # The cgroup path from /proc/<pid>/cgroup (the cpuset line on cgroup v1, the "0::" line on v2); None when the
    # process had exited by the time we looked.
    cgroup_path: str | None = None
    cgroup_version: int | None = None  # 1: cgroup_path is in the v1 cpuset hierarchy; 2: in the unified hierarchy
    container_id: str | None = None  # the 64-hex ID of the cgroup's leaf; None: not in a container (a host process)
    pod_uid: str | None = None  # from the pod cgroup above the leaf; None: not in a pod
    # Mean SM utilisation (0-1) of NVML's per-process samples newer than the previous reading; None: no sample.
    sm_utilization: float | None = None
    # The MIG device the process runs on (``MIG-<uuid>``), on a GPU in MIG mode; None: the whole GPU (or unknown)
    mig_uuid: str | None = None


@dataclass(frozen=True)
class NvmlGpu:
    """One GPU as NVML sees it. The counters are cumulative since numawatch started (the reader keeps them)."""

    index: int  # NVML's enumeration order: not the /dev/nvidiaN minor, not the CUDA ordinal; key on uuid or pci
    uuid: str | None
    pci_address: str | None  # NVML's bus ID in sysfs spelling ("00000000:18:00.0" -> "0000:18:00.0")
    name: str | None  # "NVIDIA H100 80GB HBM3"
    up: bool  # False when NVML reports the GPU lost (NVMLError_GpuIsLost) or needing a reset
    reason: str = ""  # why it is down, one line
    # nvmlDeviceGetMemoryAffinity when it names exactly one node; None when it names none or several (no NUMA, or
    # the call is not supported)
    numa_node: int | None = None
    cpu_affinity: CPUSet | None = None  # nvmlDeviceGetCpuAffinity (node scope)
    utilization: float | None = None  # the latest GPU utilisation (0-1): "a kernel was running" share of a period
    utilization_source: str | None = None  # UTILIZATION_SAMPLES, UTILIZATION_RATES, or None when unknown
    busy_seconds: float = 0.0  # sum of utilisation x interval over the intervals covered
    sampled_seconds: float = 0.0  # the seconds covered (the denominator of busy_seconds)
    held_idle_seconds: float = 0.0  # (1 - utilisation) x interval, over intervals ending with a compute process on it
    processes: tuple[GpuProcess, ...] | None = ()  # None: NVML could not list them (see problems)
    problems: tuple[str, ...] = ()  # calls that failed on this GPU without taking it down, one line each
    # NVLink, read once per enumeration: the UUIDs of the other GPUs this one reaches peer-to-peer over
    # NVLink or NVSwitch (nvmlDeviceGetP2PStatus with the NVLink index, else its active links' far ends); None when
    # NVML could not say. ``nvlink_links`` counts its active links (0: none, a PCIe-only GPU), ``nvlink_switch``
    # whether they lead to NVSwitches. ``pcie_paths``: other GPU's UUID -> NVML's common-ancestor level on PCIe
    # (nvmlDeviceGetTopologyCommonAncestor: "PIX", "PXB", "PHB", "NODE", "SYS", "internal").
    nvlink_peers: tuple[str, ...] | None = None
    nvlink_links: int | None = None
    nvlink_switch: bool | None = None
    pcie_paths: Mapping[str, str] = field(default_factory=frozen_map)
    # Whose library read it: "nvidia" (NVML), "amd" (AMD SMI, sources/amdsmi.py) or "habana" (HLML,
    # sources/hlml.py). The same record serves every vendor: what a library cannot say stays None.
    vendor: str = "nvidia"
    # Device memory in use and in all (bytes), where the library reports it (AMD SMI's and HLML's memory calls;
    # NVML's per-process figures are in ``processes``)
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    # NVML's MIG devices of a GPU in MIG mode (``MIG-<uuid>``, slot order), read once per enumeration; () otherwise
    mig_devices: tuple[str, ...] = ()


# The vendor of a telemetry reading -> the source (and library) that reads it; the ``library`` label.
TELEMETRY_LIBRARIES = {"nvidia": "nvml", "amd": "amdsmi", "habana": "hlml"}


@dataclass(frozen=True)
class NvmlCall:
    """What one library function has cost since the session started (calls made on the library's thread): NVML's, and
    AMD SMI's and HLML's the same way."""

    name: str
    count: int
    seconds: float  # total wall time
    max_seconds: float
    errors: int  # calls that raised an NVMLError (NotFound from an empty sample buffer included)
    timeouts: int  # calls that did not return within the time limit


@dataclass(frozen=True)
class NvmlSnapshot:
    """A GPU telemetry source's reading: NVML's (``nvml``), and in the same shape AMD SMI's (``amdsmi``) and HLML's
    (``hlml``), each GPU carrying its ``vendor``."""

    driver_version: str | None
    gpus: tuple[NvmlGpu, ...]
    calls: tuple[NvmlCall, ...] = ()

    def by_uuid(self, uuid: str) -> NvmlGpu | None:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        return None

    def by_pci(self, address: str) -> NvmlGpu | None:
        for gpu in self.gpus:
            if gpu.pci_address == address:
                return gpu
        return None


# --------------------------------------------------------------------------------------------------- processes
@dataclass(frozen=True)
class Limit:
    """One resource limit of /proc/<pid>/limits; ``None`` here means unlimited."""

    soft: int | None
    hard: int | None

    @property
    def unlimited(self) -> bool:
        return self.soft is None


@dataclass(frozen=True)
class HolderProcess:
    """A process of a GPU-holding container (or a host process NVML lists), as far as we read it."""

    pid: int
    container_id: str | None
    comm: str
    threads_seen: int  # entries of /proc/<pid>/task
    threads_read: int  # threads whose files we read (bounded; threads that exit while we read are skipped)
    # allowed-CPU set (task/<tid>/status Cpus_allowed_list) -> number of threads with it, over the threads read
    cpus_allowed: Mapping[CPUSet, int] = field(default_factory=frozen_map)
    memlock: Limit | None = None  # "Max locked memory" of /proc/<pid>/limits; None: not read or unreadable


@dataclass(frozen=True)
class HolderContainer:
    """Scheduling counters of one GPU-holding container, summed over every thread of its processes.

    The sums are cumulative since numawatch first saw each thread, and never go down when a thread exits: the reader
    keeps what exited threads had accumulated (prometheus counters must be monotonic).
    """

    container_id: str
    cgroup_path: str
    pod_uid: str | None
    pids: tuple[int, ...]  # processes read (cgroup.procs, bounded)
    threads: int  # threads read this time
    # task/<tid>/schedstat field 2: time runnable but waiting for a CPU; None without CONFIG_SCHED_INFO
    run_delay_seconds: float | None
    involuntary_switches: int | None  # task/<tid>/status nonvoluntary_ctxt_switches: preemptions
    migrations: int | None  # task/<tid>/sched se.nr_migrations; None when the kernel does not print it
    truncated: bool = False  # more processes or threads than the bounds: the sums cover part of the container


@dataclass(frozen=True)
class GpuHolders:
    """Result of the ``processes`` source."""

    processes: Mapping[int, HolderProcess]  # every process read, by PID
    containers: Mapping[str, HolderContainer]  # by container ID
    nvml_pids: frozenset[int] = frozenset()  # the PIDs NVML lists as compute processes (a subset of processes)
    problems: tuple[str, ...] = ()  # malformed per-thread files (that thread is skipped), one line each, bounded


# --------------------------------------------------------------------------------------------------- recordings
class JsonRecording:
    """A source result as JSON, for ``numawatch capture`` (``SourceSpec.recording``): NVML reads no files, so the
    bundle keeps its reading instead, and ``check --from`` loads it back without a GPU.

    ``load`` treats the data as hostile (a bundle from elsewhere): every field is checked against the dataclass's
    annotations, and anything else is a ``MalformedFile`` naming the reading and the field.
    """

    def __init__(self, kind: type, name: str) -> None:
        self.kind = kind
        self.name = name

    def dump(self, result: Any) -> bytes:
        if not isinstance(result, self.kind):
            raise TypeError(f"expected {self.kind.__name__}, got {type(result).__name__}")
        return json.dumps({"version": RECORDING_VERSION, "result": _encode(result)}, allow_nan=False).encode()

    def load(self, data: bytes) -> Any:
        where = f"recorded {self.name} reading"
        try:
            document = json.loads(data)
        except (ValueError, RecursionError) as error:
            raise MalformedFile(where, f"not JSON: {error}") from None
        if not isinstance(document, dict) or document.get("version") != RECORDING_VERSION:
            raise MalformedFile(where, f"expected a version {RECORDING_VERSION} recording")
        try:
            return _decode(self.kind, document.get("result"), "result")
        except ValueError as error:
            raise MalformedFile(where, str(error)) from None


RECORDING_VERSION = 1


_MAX_DEPTH = 8


_RECORDED_TEXT_LIMIT = 4096


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):  # keys may be sets (allowed CPUs): pairs, not a JSON object
        return [[_encode(key), _encode(item)] for key, item in value.items()]
    if isinstance(value, (frozenset, set)):
        return sorted(_encode(item) for item in value)
    if isinstance(value, (tuple, list)):
        return [_encode(item) for item in value]
    return value


def _decode(kind: Any, raw: Any, where: str, depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        raise ValueError(f"{where}: nested too deep")
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if raw is None and type(None) in args:
            return None
        (only,) = [arg for arg in args if arg is not type(None)]
        return _decode(only, raw, where, depth)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: expected an object")
        hints = typing.get_type_hints(kind)
        values = {}
        for f in dataclasses.fields(kind):
            if f.name in raw:
                values[f.name] = _decode(hints[f.name], raw[f.name], f"{where}.{f.name}", depth + 1)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where}: {f.name} is missing")
        build: Any = kind
        return build(**values)
    if origin in (tuple, frozenset):
        if not isinstance(raw, list):
            raise ValueError(f"{where}: expected a list")
        items = [_decode(args[0], item, f"{where}[]", depth + 1) for item in raw]
        return tuple(items) if origin is tuple else frozenset(items)
    if origin is Mapping:
        if not isinstance(raw, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in raw):
            raise ValueError(f"{where}: expected a list of [key, value] pairs")
        return frozen_map(
            {
                _decode(args[0], k, f"{where}.key", depth + 1): _decode(args[1], v, f"{where}[]", depth + 1)
                for k, v in raw
            }
        )
    if kind is bool:
        if not isinstance(raw, bool):
            raise ValueError(f"{where}: expected true or false")
        return raw
    if kind is int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError(f"{where}: expected an integer")
        return raw
    if kind is float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
            raise ValueError(f"{where}: expected a number")
        return float(raw)
    if kind is str:
        if not isinstance(raw, str):
            raise ValueError(f"{where}: expected a string")
        # Names and UUIDs of a reading become label values and message text, and come from a driver numawatch does
        # not control: printable, bounded.
        return printable(raw, f"{where}: text", _RECORDED_TEXT_LIMIT)
    raise ValueError(f"{where}: cannot decode {kind!r}")
