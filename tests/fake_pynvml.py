"""A fake ``pynvml`` for tests (never imported by numawatch itself): the NVML calls numawatch makes, on programmable
GPUs, plus a writer for the procfs side of the processes NVML lists.

``FakeNvml`` is a module object: ``NvmlSession(nvml=FakeNvml([...]))`` uses it exactly as it would use nvidia-ml-py's
``pynvml`` (the same function names, return shapes and generated ``NVMLError_*`` classes with ``value``). What the
real module does that matters here (gpu-and-host.md §2.2-§2.4):

- ``nvmlInit`` without a driver raises ``NVMLError_LibraryNotFound``; any call before ``nvmlInit`` raises
  ``NVMLError_Uninitialized``.
- ``nvmlDeviceGetSamples(h, type, lastSeen)`` returns ``(valueType, samples)`` with samples newer than ``lastSeen``
  (``timeStamp``, ``sampleValue.uiVal``), or raises ``NVMLError_NotFound`` when there are none (the buffer runs dry
  while the GPU idles).
- ``nvmlDeviceGetProcessUtilization(h, lastSeen)`` returns samples newer than ``lastSeen``, NotFound when none.
- A lost GPU raises ``NVMLError_GpuIsLost`` from every call on its handle.
- NVLink (nvml.h, "NvLink Methods" and ``nvmlDeviceGetP2PStatus``): ``nvmlDeviceGetNvLinkState(h, link)`` returns
  ``NVML_FEATURE_ENABLED`` (1) or ``DISABLED`` (0) for each link the GPU has, raises ``NVMLError_InvalidArgument``
  past its last link and ``NVMLError_NotSupported`` on a GPU without NVLink; ``…GetNvLinkRemoteDeviceType`` and
  ``…GetNvLinkRemotePciInfo`` (the ``_v2`` C function behind pynvml's name) describe an active link's far end;
  ``nvmlDeviceGetP2PStatus(h1, h2, NVML_P2P_CAPS_INDEX_NVLINK)`` is ``NVML_P2P_STATUS_OK`` (0) when the two are
  linked directly or both reach NVSwitches, else ``NVML_P2P_STATUS_NOT_SUPPORTED`` (5);
  ``nvmlDeviceGetTopologyCommonAncestor(h1, h2)`` a ``NVML_TOPOLOGY_*`` level (the GPU's ``pcie_levels`` for the
  other's UUID, else NODE on one NUMA node, SYSTEM across nodes).

- MIG (nvml.h, "Multi Instance GPU Management"): ``nvmlDeviceGetMigMode(h)`` returns ``(current, pending)``
  (``NVML_DEVICE_MIG_ENABLE`` 1 / ``DISABLE`` 0; NotSupported on a GPU without MIG), ``nvmlDeviceGetMaxMigDeviceCount``
  the slots, ``nvmlDeviceGetMigDeviceHandleByIndex(h, i)`` a MIG device's handle or ``NVMLError_NotFound`` for an
  empty slot; a MIG handle answers ``nvmlDeviceGetUUID`` (``MIG-<uuid>``), ``nvmlDeviceGetComputeRunningProcesses``
  (its own processes) and ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle`` (the parent). On the parent,
  ``nvmlDeviceGetComputeRunningProcesses`` lists every slice's processes.

``hang(name)`` makes a function block until ``release()``, to test the time limit without waiting for it.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fake_library import FakeLibrary
from fakehost import FakeHost

NVML_SUCCESS = 0
_ERRORS = {
    1: ("Uninitialized", "Uninitialized"),
    2: ("InvalidArgument", "Invalid Argument"),
    3: ("NotSupported", "Not Supported"),
    4: ("NoPermission", "Insufficient Permissions"),
    6: ("NotFound", "Not Found"),
    9: ("DriverNotLoaded", "Driver Not Loaded"),
    10: ("Timeout", "Timeout"),
    12: ("LibraryNotFound", "NVML Shared Library Not Found"),
    13: ("FunctionNotFound", "Function Not Found"),
    15: ("GpuIsLost", "GPU is lost"),
    16: ("ResetRequired", "GPU requires restart"),
    18: ("LibRmVersionMismatch", "RM has detected an NVML/RM version mismatch."),
    21: ("NoData", "No data"),
    999: ("Unknown", "Unknown Error"),
}
UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND = 1, 2, 3, 4, 6
NVLINK_GPU, NVLINK_SWITCH = 0x00, 0x02  # NVML_NVLINK_DEVICE_TYPE_*
TOPOLOGY_SINGLE, TOPOLOGY_MULTIPLE, TOPOLOGY_HOSTBRIDGE, TOPOLOGY_NODE, TOPOLOGY_SYSTEM = 10, 20, 30, 40, 50
P2P_STATUS_OK, P2P_STATUS_NOT_SUPPORTED = 0, 5
LIBRARY_NOT_FOUND, GPU_IS_LOST, UNKNOWN = 12, 15, 999


class NVMLError(Exception):
    """As pynvml's: ``NVMLError(code)`` builds the generated subclass for the code, with ``value`` set."""

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = _CLASSES.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERRORS.get(self.value, ("", f"NVML Error with code {self.value}"))[1]


_CLASSES: dict[int, type[NVMLError]] = {
    code: type(f"NVMLError_{name}", (NVMLError,), {}) for code, (name, _text) in _ERRORS.items()
}


@dataclass
class FakeMig:
    """One MIG device (a GPU instance with its compute instance) of a GPU in MIG mode."""

    uuid: str  # "MIG-<uuid>"
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    parent: Any = None  # set by FakeNvml: the FakeGpu it belongs to


@dataclass
class FakeGpu:
    """One GPU. ``samples`` are (timestamp µs, utilisation %), ``processes`` (pid, used bytes or None),
    ``process_samples`` (pid, timestamp µs, SM %); ``errors`` maps a function name to the NVML error code it raises."""

    uuid: str
    bus_id: str  # NVML's spelling: "00000000:18:00.0"
    name: str = "NVIDIA H100 80GB HBM3"
    numa_nodes: frozenset[int] = frozenset({0})  # nvmlDeviceGetMemoryAffinity
    cpus: frozenset[int] = frozenset()  # nvmlDeviceGetCpuAffinity
    samples: list[tuple[int, int]] = field(default_factory=list)
    rate: int = 0  # nvmlDeviceGetUtilizationRates().gpu
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    process_samples: list[tuple[int, int, int]] = field(default_factory=list)
    lost: bool = False
    errors: dict[str, int] = field(default_factory=dict)
    # NVLink: how many links the GPU has (0: none, a PCIe card), and the far end of each active one, in link order:
    # (NVLINK_GPU or NVLINK_SWITCH, NVML bus ID). Links past the active ones are inactive.
    nvlink_slots: int = 0
    nvlinks: list[tuple[int, str]] = field(default_factory=list)
    pcie_levels: dict[str, int] = field(default_factory=dict)  # other GPU's UUID -> NVML_TOPOLOGY_* level
    # MIG: None, a GPU without MIG support (NotSupported); else whether MIG mode is on, and its devices by slot
    # (None: an empty slot), out of ``mig_slots``
    mig_enabled: bool | None = None
    migs: list[FakeMig | None] = field(default_factory=list)
    mig_slots: int = 7


def _words(bits: Iterable[int], size: int) -> list[int]:
    words = [0] * size
    for bit in bits:
        if bit // 64 < size:
            words[bit // 64] |= 1 << (bit % 64)
    return words


class FakeNvml(FakeLibrary):
    """A stand-in for the ``pynvml`` module."""

    NVMLError = NVMLError
    NVML_SUCCESS = NVML_SUCCESS
    NVML_GPU_UTILIZATION_SAMPLES = 1
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_AFFINITY_SCOPE_NODE = 0
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = P2P_STATUS_OK
    NVML_P2P_STATUS_NOT_SUPPORTED = P2P_STATUS_NOT_SUPPORTED
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus: Iterable[FakeGpu] = (), *, library: bool = True, driver: str = "570.86.15") -> None:
        super().__init__("pynvml")
        for error_class in _CLASSES.values():
            setattr(self, error_class.__name__, error_class)
        self.gpus = list(gpus)
        self.library = library
        self.driver = driver
        # ``initialised`` (FakeLibrary) is nvmlInit's reference count, as the library keeps it; the test controls
        # (hang, release, calls_to) are FakeLibrary's.

    def _device(self, name: str, handle: FakeGpu, *args: Any) -> FakeGpu:
        self._enter(name, handle, *args)
        if not self.initialised:
            raise NVMLError(UNINITIALIZED)
        if handle.lost:
            raise NVMLError(GPU_IS_LOST)
        if name in handle.errors:
            raise NVMLError(handle.errors[name])
        return handle

    # ------------------------------------------------------------------------------------ the API
    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.init_calls += 1
        if not self.library:
            raise NVMLError(LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        if not self.initialised:
            raise NVMLError(UNINITIALIZED)
        self.shutdown_calls += 1
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        if not self.initialised:
            raise NVMLError(UNINITIALIZED)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        if not self.initialised:
            raise NVMLError(UNINITIALIZED)
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGpu | FakeMig) -> str:
        if isinstance(handle, FakeMig):
            return self._mig("nvmlDeviceGetUUID", handle).uuid
        return self._device("nvmlDeviceGetUUID", handle).uuid

    # ------------------------------------------------------------------------------------ MIG
    def _mig(self, name: str, handle: FakeMig) -> FakeMig:
        self._device(name, handle.parent)
        return handle

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> tuple[int, int]:
        gpu = self._device("nvmlDeviceGetMigMode", handle)
        if gpu.mig_enabled is None:
            raise NVMLError(NOT_SUPPORTED)
        mode = self.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else self.NVML_DEVICE_MIG_DISABLE
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        gpu = self._device("nvmlDeviceGetMaxMigDeviceCount", handle)
        if gpu.mig_enabled is None:
            raise NVMLError(NOT_SUPPORTED)
        return gpu.mig_slots

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, index: int) -> FakeMig:
        gpu = self._device("nvmlDeviceGetMigDeviceHandleByIndex", handle, index)
        if not gpu.mig_enabled or not 0 <= index < gpu.mig_slots:
            raise NVMLError(INVALID_ARGUMENT)
        mig = gpu.migs[index] if index < len(gpu.migs) else None
        if mig is None:
            raise NVMLError(NOT_FOUND)
        mig.parent = gpu
        return mig

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: FakeMig) -> FakeGpu:
        return self._mig("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle).parent

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return self._device("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> types.SimpleNamespace:
        gpu = self._device("nvmlDeviceGetPciInfo", handle)
        return types.SimpleNamespace(busId=gpu.bus_id, busIdLegacy=gpu.bus_id[4:])

    def nvmlDeviceGetMemoryAffinity(self, handle: FakeGpu, size: int, scope: int) -> list[int]:
        return _words(self._device("nvmlDeviceGetMemoryAffinity", handle, size, scope).numa_nodes, size)

    def nvmlDeviceGetCpuAffinity(self, handle: FakeGpu, size: int) -> list[int]:
        return _words(self._device("nvmlDeviceGetCpuAffinity", handle, size).cpus, size)

    def nvmlDeviceGetSamples(self, handle: FakeGpu, kind: int, last_seen: int) -> tuple[int, list[Any]]:
        gpu = self._device("nvmlDeviceGetSamples", handle, kind, last_seen)
        newer = [
            types.SimpleNamespace(timeStamp=stamp, sampleValue=types.SimpleNamespace(uiVal=value))
            for stamp, value in gpu.samples
            if stamp > last_seen
        ]
        if not newer:
            raise NVMLError(NOT_FOUND)
        return self.NVML_VALUE_TYPE_UNSIGNED_INT, newer

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=self._device("nvmlDeviceGetUtilizationRates", handle).rate, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu | FakeMig) -> list[types.SimpleNamespace]:
        if isinstance(handle, FakeMig):
            mig = self._mig("nvmlDeviceGetComputeRunningProcesses", handle)
            slot = mig.parent.migs.index(mig)
            return [types.SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=slot, computeInstanceId=0)
                    for pid, used in mig.processes]  # fmt: skip
        gpu = self._device("nvmlDeviceGetComputeRunningProcesses", handle)
        found = [
            types.SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for pid, used in gpu.processes
        ]
        for slot, mig in enumerate(gpu.migs if gpu.mig_enabled else ()):
            for pid, used in mig.processes if mig is not None else ():
                found.append(types.SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=slot,
                                                   computeInstanceId=0))  # fmt: skip
        return found

    def nvmlDeviceGetProcessUtilization(self, handle: FakeGpu, last_seen: int) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetProcessUtilization", handle, last_seen)
        newer = [
            types.SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for pid, stamp, sm in gpu.process_samples
            if stamp > last_seen
        ]
        if not newer:
            raise NVMLError(NOT_FOUND)
        return newer


    # ------------------------------------------------------------------------------------ NVLink and topology
    def _link(self, name: str, handle: FakeGpu, link: int) -> FakeGpu:
        gpu = self._device(name, handle, link)
        if gpu.nvlink_slots == 0:
            raise NVMLError(NOT_SUPPORTED)
        if not 0 <= link < gpu.nvlink_slots:
            raise NVMLError(INVALID_ARGUMENT)
        return gpu

    def nvmlDeviceGetNvLinkState(self, handle: FakeGpu, link: int) -> int:
        gpu = self._link("nvmlDeviceGetNvLinkState", handle, link)
        return self.NVML_FEATURE_ENABLED if link < len(gpu.nvlinks) else self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeGpu, link: int) -> int:
        gpu = self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if link >= len(gpu.nvlinks):
            raise NVMLError(NOT_SUPPORTED)  # an inactive link has no far end
        return gpu.nvlinks[link][0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeGpu, link: int) -> types.SimpleNamespace:
        gpu = self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        if link >= len(gpu.nvlinks):
            raise NVMLError(NOT_SUPPORTED)
        bus_id = gpu.nvlinks[link][1]
        return types.SimpleNamespace(busId=bus_id, busIdLegacy=bus_id[4:])

    def nvmlDeviceGetP2PStatus(self, first: FakeGpu, second: FakeGpu, index: int) -> int:
        gpu = self._device("nvmlDeviceGetP2PStatus", first, second, index)
        if second.lost:
            raise NVMLError(GPU_IS_LOST)
        if index != self.NVML_P2P_CAPS_INDEX_NVLINK:
            raise NVMLError(NOT_SUPPORTED)  # this fake answers the NVLink index only
        direct = any(bus == second.bus_id for _, bus in gpu.nvlinks) or any(
            bus == gpu.bus_id for _, bus in second.nvlinks
        )
        switched = any(kind == NVLINK_SWITCH for kind, _ in gpu.nvlinks) and any(
            kind == NVLINK_SWITCH for kind, _ in second.nvlinks
        )
        return P2P_STATUS_OK if direct or switched else P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, first: FakeGpu, second: FakeGpu) -> int:
        gpu = self._device("nvmlDeviceGetTopologyCommonAncestor", first, second)
        if second.lost:
            raise NVMLError(GPU_IS_LOST)
        if second.uuid in gpu.pcie_levels:
            return gpu.pcie_levels[second.uuid]
        return TOPOLOGY_NODE if gpu.numa_nodes == second.numa_nodes else TOPOLOGY_SYSTEM


# --------------------------------------------------------------------------------------------------- procfs side
@dataclass(frozen=True)
class FakeThread:
    tid: int
    cpus: frozenset[int]
    run_delay_ns: int = 0
    involuntary: int = 0
    migrations: int | None = 0  # None: the kernel prints no se.nr_migrations (no sched file written)


MEMLOCK_UNLIMITED = None


def write_threads(
    host: FakeHost,
    pid: int,
    threads: Iterable[FakeThread],
    *,
    memlock: int | None = MEMLOCK_UNLIMITED,
    extra_files: Mapping[str, str] | None = None,
) -> None:
    """Write ``proc/<pid>/task/<tid>/{status,schedstat,sched}`` and ``proc/<pid>/limits`` as the kernel prints them.

    ``memlock`` is the soft and hard "Max locked memory" in bytes (None: unlimited). The process's own files
    (``comm``, ``status``, ``cgroup``) come from fakehost.pods; this adds what the processes source reads per thread.
    """
    for thread in threads:
        base = f"proc/{pid}/task/{thread.tid}"
        cpus = ",".join(str(cpu) for cpu in sorted(thread.cpus))
        host.write(
            f"{base}/status",
            f"Name:\tworker\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{thread.tid}\n"
            f"Cpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0-1\n"
            f"voluntary_ctxt_switches:\t100\nnonvoluntary_ctxt_switches:\t{thread.involuntary}\n",
        )
        host.write(f"{base}/schedstat", f"987654321 {thread.run_delay_ns} 4242")
        if thread.migrations is not None:
            host.write(
                f"{base}/sched",
                f"worker ({thread.tid}, #threads: 4)\n"
                "-------------------------------------------------------------------\n"
                f"se.exec_start                                :      12345678.901234\n"
                f"se.nr_migrations                             :{thread.migrations:>21}\n"
                "nr_switches                                  :                  120\n"
                f"nr_involuntary_switches                      :{thread.involuntary:>21}\n",
            )
    value = "unlimited" if memlock is None else str(memlock)
    host.write(
        f"proc/{pid}/limits",
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max cpu time              unlimited            unlimited            seconds   \n"
        f"Max locked memory         {value:<21}{value:<21}bytes     \n"
        "Max open files            1048576              1048576              files     \n",
    )
    for rel, text in (extra_files or {}).items():
        host.write(f"proc/{pid}/{rel}", text)


def nvml_bus_id(pci_address: str) -> str:
    """sysfs ``0000:18:00.0`` -> NVML ``00000000:18:00.0``."""
    domain, rest = pci_address.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


# --------------------------------------------------------------------------------------------------- reference node
def reference_pid(pod: Any) -> int:
    """The PID fakehost.reference gives a reference pod's application container (4100, 4101, ...)."""
    from fakehost.reference import PODS

    return 4100 + PODS.index(pod)


def reference_nvml(**kwargs: Any) -> FakeNvml:
    """NVML of fakehost.reference's node: its 4 GPUs (UUIDs, PCI addresses and NUMA nodes as sysfs has them), vllm's
    process on GPUs 0 and 1, trtllm's on 2 and 3, a busy sample stream on each."""
    from fakehost.reference import GPUS, NODE_CPUS, TRTLLM, VLLM

    holders = {0: VLLM, 1: VLLM, 2: TRTLLM, 3: TRTLLM}
    gpus = [
        FakeGpu(
            uuid=gpu.uuid,
            bus_id=nvml_bus_id(gpu.pci_address),
            numa_nodes=frozenset({gpu.numa_node}),
            cpus=NODE_CPUS[gpu.numa_node],
            samples=[(1_000_000 + step * 500_000, 90) for step in range(4)],
            processes=[(reference_pid(holders[index]), 40 << 30)],
            process_samples=[(reference_pid(holders[index]), 2_000_000 + step * 500_000, 80) for step in range(4)],
            # An HGX baseboard: every GPU's 18 NVLinks go to the NVSwitches (four of them, as PCI functions).
            nvlink_slots=18,
            nvlinks=[(NVLINK_SWITCH, NVSWITCHES[link % len(NVSWITCHES)]) for link in range(18)],
        )
        for index, gpu in enumerate(GPUS)
    ]
    return FakeNvml(gpus, **kwargs)


NVSWITCHES = ("00000000:C1:00.0", "00000000:C2:00.0", "00000000:C3:00.0", "00000000:C4:00.0")


def write_reference_threads(host: FakeHost, *, memlock: int | None = MEMLOCK_UNLIMITED) -> None:
    """Four threads for vllm and trtllm, each allowed on exactly its pod's exclusive CPUs (the clean placement)."""
    from fakehost.reference import TRTLLM, VLLM

    for pod in (VLLM, TRTLLM):
        pid = reference_pid(pod)
        threads = [
            FakeThread(pid, pod.exclusive, run_delay_ns=1_000_000, involuntary=5, migrations=2),
            *(
                FakeThread(pid * 10 + k, pod.exclusive, run_delay_ns=2_000_000, involuntary=7, migrations=3)
                for k in range(1, 4)
            ),
        ]
        write_threads(host, pid, threads, memlock=memlock)


def reference_gpu_results() -> dict[str, Any]:
    """The nvml and processes readings of fakehost.reference's node as model objects (no files, no NVML), for
    snapshot tests: ``with_results(reference_snapshot(), **reference_gpu_results())``. vllm holds GPUs 0-1, trtllm
    2-3, each GPU 90 % busy over 60 s of samples; every family of metrics/gpu.py has series from it."""
    from fakehost.reference import GPUS, NODE_CPUS, TRTLLM, VLLM
    from numawatch.model import frozen_map
    from numawatch.model.gpu import (
        UTILIZATION_SAMPLES,
        GpuHolders,
        GpuProcess,
        HolderContainer,
        HolderProcess,
        Limit,
        NvmlCall,
        NvmlGpu,
        NvmlSnapshot,
    )

    holders = {0: VLLM, 1: VLLM, 2: TRTLLM, 3: TRTLLM}

    def cgroup_path(pod: Any) -> str:
        return (
            f"/kubepods.slice/kubepods-pod{pod.uid.replace('-', '_')}.slice/"
            f"cri-containerd-{pod.container.container_id}.scope"
        )

    gpus = tuple(
        NvmlGpu(
            index=index,
            uuid=gpu.uuid,
            pci_address=gpu.pci_address,
            name="NVIDIA H100 80GB HBM3",
            up=True,
            numa_node=gpu.numa_node,
            cpu_affinity=NODE_CPUS[gpu.numa_node],
            utilization=0.9,
            utilization_source=UTILIZATION_SAMPLES,
            busy_seconds=54.0,
            sampled_seconds=60.0,
            held_idle_seconds=6.0,
            processes=(
                GpuProcess(
                    pid=reference_pid(holders[index]),
                    used_memory_bytes=40 << 30,
                    cgroup_path=cgroup_path(holders[index]),
                    cgroup_version=2,
                    container_id=holders[index].container.container_id,
                    pod_uid=holders[index].uid,
                    sm_utilization=0.8,
                ),
            ),
            nvlink_peers=tuple(sorted(other.uuid for other in GPUS if other is not gpu)),
            nvlink_links=18,
            nvlink_switch=True,
            pcie_paths=frozen_map(
                {o.uuid: "NODE" if o.numa_node == gpu.numa_node else "SYS" for o in GPUS if o is not gpu}
            ),
        )
        for index, gpu in enumerate(GPUS)
    )
    calls = (
        NvmlCall("nvmlDeviceGetComputeRunningProcesses", 16, 0.0008, 0.0001, 0, 0),
        NvmlCall("nvmlDeviceGetSamples", 16, 0.0016, 0.0002, 0, 0),
    )
    processes = {
        reference_pid(pod): HolderProcess(
            pid=reference_pid(pod),
            container_id=pod.container.container_id,
            comm=pod.container.name,
            threads_seen=4,
            threads_read=4,
            cpus_allowed=frozen_map({pod.exclusive: 4}),
            memlock=Limit(None, None),
        )
        for pod in (VLLM, TRTLLM)
    }
    containers = {
        pod.container.container_id: HolderContainer(
            container_id=pod.container.container_id,
            cgroup_path=cgroup_path(pod),
            pod_uid=pod.uid,
            pids=(reference_pid(pod),),
            threads=4,
            run_delay_seconds=0.007,
            involuntary_switches=26,
            migrations=11,
        )
        for pod in (VLLM, TRTLLM)
    }
    return {
        "nvml": NvmlSnapshot(driver_version="570.86.15", gpus=gpus, calls=calls),
        "processes": GpuHolders(
            processes=frozen_map(processes),
            containers=frozen_map(containers),
            nvml_pids=frozenset(processes),
        ),
    }
