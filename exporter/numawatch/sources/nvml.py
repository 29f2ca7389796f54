"""The nvml source: every GPU NVML sees, its busy time, and the compute processes on it with their containers.

NVML (``pynvml`` from nvidia-ml-py; gpu-and-host.md §2) through an ``NvmlSession``: one thread, a time limit per
call, initialised once. Per GPU, read once per enumeration: ``nvmlDeviceGetHandleByIndex``, ``…GetUUID``,
``…GetPciInfo`` (``busId`` ``"00000000:18:00.0"``, normalised to sysfs's ``0000:18:00.0`` to join with the sysfs
inventory), ``…GetName``, ``…GetMemoryAffinity`` (NUMA-node bitmask, node scope) and ``…GetCpuAffinity``.
``nvmlDeviceGetNumaNodeId`` is not used: it only applies where GPUs are NUMA nodes themselves (Grace Hopper).

Per GPU, every evaluation:

- ``nvmlDeviceGetComputeRunningProcesses``: host PIDs, mapped to container and pod through ``<procfs>/<pid>/cgroup``.
- Busy time as a counter, not a point sample: ``nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES, lastSeen)``
  returns the driver's utilisation samples newer than ``lastSeen`` (a CPU timestamp in µs that NVML itself returned;
  never our clock). Each sample's value is the share of its period in which a kernel ran; integrated over the gaps
  between sample timestamps it gives busy seconds and covered seconds. Gaps longer than ``MAX_SAMPLE_GAP_US`` (the
  period is 1/6 s to 1 s) mean samples were lost from the ring buffer and are not guessed at.
- The buffer runs dry while the GPU idles (``NVMLError_NotFound`` or an empty list): then
  ``nvmlDeviceGetUtilizationRates`` is applied to the wall time since the previous reading, so idle reads as idle,
  not as "no data" (polarsignals/gpu-metrics-agent#37). The next sample starts a new chain, so no time counts twice.
- Seconds of an interval that ends with a compute process on the GPU also count as "held"; idle held seconds are the
  coarse bubble signal (a kernel running for any part of a sample period makes it busy: sub-millisecond launch gaps
  are invisible to NVML utilisation).
- ``nvmlDeviceGetProcessUtilization(lastSeen)`` for per-process SM utilisation, with the newest timestamp NVML
  returned, never 0: 0 returns the whole buffer and shows processes busy long after they stopped (Syllo/nvtop#91).

Failures: no library or driver makes the source down with the reason (``NvmlUnavailable``); a call that hangs makes it
down with the call's name (``NvmlTimeout``); ``NVMLError_GpuIsLost`` (or ``ResetRequired``) marks that GPU down, stops
calls to it until a hotplug event, and leaves the others; any other error of one call on one GPU is recorded in that
GPU's ``problems`` and leaves the value unknown.

The integration state lives in an ``NvmlReader``, kept by the running numawatch across evaluations (keyed by GPU
UUID, so it survives re-enumeration after hotplug), which the HostReader makes on the NVML session it was given
(``HostReader(paths, nvml=session)``); without one the source is down, reporting NVML not enabled.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from numawatch.cpuset import CPUSet
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import printable
from numawatch.model import frozen_map
from numawatch.model.gpu import UTILIZATION_RATES, UTILIZATION_SAMPLES, GpuProcess, JsonRecording, NvmlGpu, NvmlSnapshot
from numawatch.nvml_session import NvmlSession, NvmlUnavailable, describe, error_name, is_empty_answer
from numawatch.paths import Paths
from numawatch.source import ReaderContext, SourceSpec
from numawatch.sources.processes import cgroup_identity, parse_proc_cgroup

log = logging.getLogger(__name__)

NVML_GPU_UTILIZATION_SAMPLES = 1  # nvmlSamplingType_t
NVML_AFFINITY_SCOPE_NODE = 0
NVML_P2P_CAPS_INDEX_NVLINK = 2  # nvmlGpuP2PCapsIndex_t
NVML_P2P_STATUS_OK = 0  # nvmlGpuP2PStatus_t
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2  # nvmlIntNvLinkDeviceType_t
DEFAULT_NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS before Blackwell (pynvml defines it: 36 since)
# nvmlGpuTopologyLevel_t -> nvidia-smi topo's name for the PCIe path between two GPUs
TOPOLOGY_LEVELS = {0: "internal", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
MAX_SAMPLE_GAP_US = 2_000_000  # twice the longest sample period: a longer gap lost samples
MAX_RATES_INTERVAL = 120.0  # seconds one utilisation-rates reading may stand for (a paused exporter: not a guess)
DEFAULT_CPU_WORDS = 16  # 1,024 CPUs when sysfs does not say how many are possible
LOST = frozenset({"NVMLError_GpuIsLost", "NVMLError_ResetRequired"})
NVML_DEVICE_MIG_ENABLE = 1
MAX_MIG_DEVICES = 64  # NVML_MAX_MIG_DEVICE_COUNT is 7 per GPU (A100, H100); anything near this is not one GPU
_EMPTY_SLOT = frozenset({"NVMLError_NotFound", "NVMLError_InvalidArgument"})


# --------------------------------------------------------------------------------------------------- parsing
def normalise_bus_id(bus_id: str | bytes) -> str | None:
    """NVML's ``00000000:8D:00.0`` -> sysfs's ``0000:8d:00.0`` (4 hex digits of domain unless it needs more)."""
    text = bus_id.decode("ascii", errors="replace") if isinstance(bus_id, bytes) else bus_id
    parts = text.strip().lower().split(":")
    if len(parts) != 3:
        return None
    domain, bus, rest = parts
    device, dot, function = rest.partition(".")
    try:
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}" if dot else None
    except ValueError:
        return None


def mask_bits(words: Iterable[int]) -> frozenset[int]:
    """An NVML affinity array (64 bits per word, word 0 = bits 0-63) -> the set bits."""
    bits = set()
    for index, word in enumerate(words):
        value = int(word)
        base = index * 64
        while value:
            low = value & -value
            bits.add(base + low.bit_length() - 1)
            value ^= low
    return frozenset(bits)


_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # nvmlValueType_t order


def sample_value(value_type: int, value: Any) -> float:
    """The number in a ``c_nvmlValue_t`` union, by NVML's value type."""
    if not 0 <= value_type < len(_VALUE_FIELDS):
        raise ValueError(f"unknown NVML value type {value_type}")
    return float(getattr(value, _VALUE_FIELDS[value_type]))


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _ratio(percent: float) -> float:
    return min(max(percent / 100.0, 0.0), 1.0)


def cpu_words(paths: Paths) -> int:
    """64-bit words needed for a CPU mask of every possible CPU (sysfs ``cpu/possible``)."""
    text = paths.fs.read_optional_text(paths.sysfs / "devices/system/cpu/possible", 4096)
    if text:
        last = text.strip().replace(",", "-").split("-")[-1]
        if last.isdigit():
            return int(last) // 64 + 1
    return DEFAULT_CPU_WORDS


def process_cgroup(paths: Paths, pid: int) -> tuple[int, str] | None:
    """(cgroup version, path) of a PID from ``<procfs>/<pid>/cgroup``; None when the process is gone."""
    path = paths.procfs / str(pid) / "cgroup"
    text = paths.fs.read_optional_text(path, 1 << 16)
    if text is None:
        return None
    try:
        return parse_proc_cgroup(text)
    except ValueError as error:
        raise MalformedFile(path, str(error)) from None


# --------------------------------------------------------------------------------------------------- state
@dataclass
class _Counters:
    """What one GPU has accumulated (kept across evaluations and re-enumerations, by UUID)."""

    last_seen_us: int = 0  # newest GetSamples timestamp NVML returned
    chain_us: int | None = None  # where the next sample's interval starts; None: the next sample starts a chain
    process_seen_us: int = 0  # newest per-process sample timestamp NVML returned
    last_read: float | None = None  # our monotonic clock at the previous reading (for the rates fallback)
    busy: float = 0.0
    sampled: float = 0.0
    held_idle: float = 0.0
    utilization: float | None = None
    source: str | None = None
    lost: str = ""  # why the GPU is down; no more calls to it until a hotplug refresh

    def integrate(self, utilization: float, seconds: float, held: bool) -> None:
        self.busy += utilization * seconds
        self.sampled += seconds
        if held:
            self.held_idle += (1.0 - utilization) * seconds


@dataclass
class _Device:
    """What does not change while NVML stays initialised: read once per enumeration."""

    index: int
    handle: Any = None
    uuid: str | None = None
    pci_address: str | None = None
    name: str | None = None
    numa_node: int | None = None
    cpu_affinity: CPUSet | None = None
    problems: list[str] = field(default_factory=list)
    lost: str = ""
    nvlink_links: int | None = None  # active NVLink links; None: NVML could not say
    nvlink_switch: bool | None = None  # whether an active link leads to an NVSwitch
    nvlink_remote: frozenset[str] = frozenset()  # far ends' PCI addresses (sysfs spelling) of the active links
    nvlink_peers: tuple[str, ...] | None = None
    pcie_paths: dict[str, str] = field(default_factory=dict)
    migs: tuple[tuple[Any, str], ...] = ()  # (handle, "MIG-<uuid>") of each MIG device, in MIG mode

    @property
    def key(self) -> str:
        return self.uuid or f"index:{self.index}"


class _Lost(Exception):
    """The GPU is lost (raised inside a GPU's reading, caught at its end)."""


# --------------------------------------------------------------------------------------------------- reader
class NvmlReader:
    """The nvml source of one running numawatch: NVML calls through a session, counters kept across evaluations."""

    def __init__(self, session: NvmlSession, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self._clock = clock
        self._devices: list[_Device] | None = None
        self._counters: dict[str, _Counters] = {}
        self._driver_version: str | None = None

    def refresh(self) -> None:
        """GPUs were added or removed: enumerate again (re-initialising NVML) and retry lost GPUs."""
        self._devices = None
        for counters in self._counters.values():
            counters.lost = ""
        self.session.request_restart()

    def invalidate(self, names: Iterable[str]) -> None:
        """Hotplug: a change to the GPUs on the PCI bus makes NVML enumerate again."""
        if {"gpus_sysfs", "nvml"} & set(names):
            self.refresh()

    def read(self, paths: Paths) -> NvmlSnapshot:
        devices = self._enumerate(paths)
        gpus = tuple(self._read_gpu(paths, device) for device in devices)
        return NvmlSnapshot(driver_version=self._driver_version, gpus=gpus, calls=self.session.calls())

    # ----------------------------------------------------------------------------------------- calls
    def _call(self, name: str, *args: Any) -> Any:
        return self.session.call(name, *args)

    def _nvml_error(self, error: BaseException) -> bool:
        return self.session.is_nvml_error(error)

    def _enumerate(self, paths: Paths) -> list[_Device]:
        if self._devices is not None:
            return self._devices
        try:
            count = int(self._call("nvmlDeviceGetCount"))
        except NvmlUnavailable:
            raise
        except Exception as error:
            if not self._nvml_error(error):
                raise
            raise SourceUnavailable(f"nvmlDeviceGetCount failed: {describe(error)}") from None
        if self._driver_version is None:
            try:
                self._driver_version = _text(self._call("nvmlSystemGetDriverVersion"))
            except NvmlUnavailable:
                raise
            except Exception as error:
                if not self._nvml_error(error):
                    raise
        words = cpu_words(paths)
        devices = [self._identify(index, words) for index in range(count)]
        self._nvlink(devices)
        self._devices = devices
        log.info("NVML enumerates %d GPU(s)", count)
        return devices

    def _identify(self, index: int, cpu_words_needed: int) -> _Device:
        device = _Device(index)
        try:
            device.handle = self._call("nvmlDeviceGetHandleByIndex", index)
            device.uuid = _text(self._call("nvmlDeviceGetUUID", device.handle))
        except NvmlUnavailable:
            raise
        except Exception as error:
            if not self._nvml_error(error):
                raise
            device.lost = f"cannot open GPU {index}: {describe(error)}"
            return device
        device.pci_address = self._optional(device, "nvmlDeviceGetPciInfo", lambda info: normalise_bus_id(info.busId))
        device.name = self._optional(device, "nvmlDeviceGetName", _text)
        nodes = self._optional(device, "nvmlDeviceGetMemoryAffinity", mask_bits, 1, NVML_AFFINITY_SCOPE_NODE)
        device.numa_node = next(iter(nodes)) if nodes is not None and len(nodes) == 1 else None
        device.cpu_affinity = self._optional(device, "nvmlDeviceGetCpuAffinity", mask_bits, cpu_words_needed)
        device.migs = self._mig_devices(device)
        return device

    def _mig_devices(self, device: _Device) -> tuple[tuple[Any, str], ...]:
        """A GPU in MIG mode: the handle and UUID of each of its MIG devices (empty slots skipped). NotSupported
        from nvmlDeviceGetMigMode is a GPU without MIG."""
        mode = self._optional(device, "nvmlDeviceGetMigMode", lambda modes: int(modes[0]))
        if mode != NVML_DEVICE_MIG_ENABLE:
            return ()
        slots = self._optional(device, "nvmlDeviceGetMaxMigDeviceCount", int) or 0
        found: list[tuple[Any, str]] = []
        for index in range(min(slots, MAX_MIG_DEVICES)):
            try:
                handle = self._call("nvmlDeviceGetMigDeviceHandleByIndex", device.handle, index)
                uuid = printable(_text(self._call("nvmlDeviceGetUUID", handle)), "MIG device UUID", 96)
            except NvmlUnavailable:
                raise
            except ValueError as error:
                device.problems.append(f"MIG device {index}: {error}")
                continue
            except Exception as error:
                if not self._nvml_error(error):
                    raise
                if error_name(error) in LOST:
                    device.lost = describe(error)
                    return ()
                if error_name(error) not in _EMPTY_SLOT:
                    device.problems.append(f"MIG device {index}: {describe(error)}")
                continue
            found.append((handle, uuid))
        return tuple(found)

    # ----------------------------------------------------------------------------------------- NVLink
    def _nvlink(self, devices: list[_Device]) -> None:
        """Which GPUs reach each other over NVLink, once per enumeration: the topology of NVLink and NVSwitch is the
        baseboard's, and a link that fails later (Xid 74) is left to DCGM and nvidia-smi nvlink."""
        usable = [device for device in devices if not device.lost and device.uuid]
        for device in usable:
            self._links(device)
        peers: dict[str, set[str]] = {device.key: set() for device in usable}
        known: dict[str, bool] = {device.key: True for device in usable}
        for position, first in enumerate(usable):
            for second in usable[position + 1 :]:
                level = self._optional(first, "nvmlDeviceGetTopologyCommonAncestor", int, second.handle)
                if level is not None:
                    name = TOPOLOGY_LEVELS.get(level, str(level))
                    first.pcie_paths[second.key] = second.pcie_paths[first.key] = name
                peered = self._p2p_nvlink(first, second)
                if peered is None:
                    peered = self._linked(first, second)
                if peered is None:
                    known[first.key] = known[second.key] = False
                elif peered:
                    peers[first.key].add(second.key)
                    peers[second.key].add(first.key)
        for device in usable:
            # Only a GPU whose every pair is known says who its peers are: an unknown pair read as "not a peer"
            # would make a container holding that pair a finding.
            if known[device.key]:
                device.nvlink_peers = tuple(sorted(peers[device.key]))

    def _links(self, device: _Device) -> None:
        """The GPU's active NVLink links and their far ends (nvmlDeviceGetNvLinkState per link until NVML says the
        link does not exist; a GPU without NVLink answers NotSupported for link 0)."""
        limit = int(getattr(self.session.nvml, "NVML_NVLINK_MAX_LINKS", DEFAULT_NVLINK_MAX_LINKS))
        active = 0
        switch = False
        remote: set[str] = set()
        for link in range(limit):
            try:
                state = self._call("nvmlDeviceGetNvLinkState", device.handle, link)
            except NvmlUnavailable:
                raise
            except Exception as error:
                if not self._nvml_error(error):
                    raise
                if error_name(error) in LOST:
                    device.lost = describe(error)
                    return
                if link == 0 and error_name(error) not in ("NVMLError_NotSupported", "NVMLError_InvalidArgument"):
                    device.problems.append(f"nvmlDeviceGetNvLinkState: {describe(error)}")
                    return
                break  # past the GPU's last link (InvalidArgument), or no NVLink at all (NotSupported)
            if int(state) != 1:  # NVML_FEATURE_ENABLED
                continue
            active += 1
            kind = self._optional(device, "nvmlDeviceGetNvLinkRemoteDeviceType", int, link)
            if kind == NVML_NVLINK_DEVICE_TYPE_SWITCH:
                switch = True
            address = self._optional(
                device, "nvmlDeviceGetNvLinkRemotePciInfo", lambda info: normalise_bus_id(info.busId), link
            )
            if address:
                remote.add(address)
        device.nvlink_links = active
        device.nvlink_switch = switch
        device.nvlink_remote = frozenset(remote)

    def _p2p_nvlink(self, first: _Device, second: _Device) -> bool | None:
        """NVML's own answer to "can these two do peer-to-peer over NVLink"; None when it gives none."""
        if first.lost or second.lost:
            return None
        try:
            status = self._call("nvmlDeviceGetP2PStatus", first.handle, second.handle, NVML_P2P_CAPS_INDEX_NVLINK)
        except NvmlUnavailable:
            raise
        except Exception as error:
            if not self._nvml_error(error):
                raise
            if error_name(error) in LOST:
                first.lost = first.lost or describe(error)
            elif error_name(error) != "NVMLError_NotSupported":
                first.problems.append(f"nvmlDeviceGetP2PStatus: {describe(error)}")
            return None
        return int(status) == NVML_P2P_STATUS_OK

    @staticmethod
    def _linked(first: _Device, second: _Device) -> bool | None:
        """Peering from the links when NVML gives no P2P status: a link between the two, or both on NVSwitches."""
        if first.nvlink_links is None or second.nvlink_links is None:
            return None
        if second.pci_address in first.nvlink_remote or first.pci_address in second.nvlink_remote:
            return True
        return bool(first.nvlink_switch and second.nvlink_switch)

    def _optional(self, device: _Device, name: str, convert: Callable[[Any], Any], *args: Any) -> Any:
        """One static attribute; an NVML error leaves it unknown (and is recorded), a lost GPU is marked lost."""
        if device.lost:
            return None
        try:
            return convert(self._call(name, device.handle, *args))
        except NvmlUnavailable:
            raise
        except Exception as error:
            if not self._nvml_error(error):
                raise
            if error_name(error) in LOST:
                device.lost = describe(error)
            elif error_name(error) != "NVMLError_NotSupported":
                device.problems.append(f"{name}: {describe(error)}")
            return None

    # ----------------------------------------------------------------------------------------- one GPU
    def _read_gpu(self, paths: Paths, device: _Device) -> NvmlGpu:
        counters = self._counters.setdefault(device.key, _Counters())
        if device.lost and not counters.lost:
            counters.lost = device.lost
        problems = list(device.problems)
        found: tuple[GpuProcess, ...] | None = None
        if not counters.lost:
            try:
                found = self._processes(paths, device, problems)
                problem = self._utilization(device, counters, held=bool(found))
                if problem:
                    problems.append(problem)
                if found:
                    found = self._process_utilization(device, counters, found, problems)
            except _Lost as lost:
                counters.lost = str(lost)
                log.error("GPU %s (%s) is down: %s", device.index, device.uuid, lost)
        return NvmlGpu(
            index=device.index,
            uuid=device.uuid,
            pci_address=device.pci_address,
            name=device.name,
            up=not counters.lost,
            reason=counters.lost,
            numa_node=device.numa_node,
            cpu_affinity=device.cpu_affinity,
            utilization=None if counters.lost else counters.utilization,
            utilization_source=None if counters.lost else counters.source,
            busy_seconds=counters.busy,
            sampled_seconds=counters.sampled,
            held_idle_seconds=counters.held_idle,
            processes=() if counters.lost else found,
            problems=tuple(problems),
            mig_devices=tuple(uuid for _, uuid in device.migs),
            nvlink_peers=device.nvlink_peers,
            nvlink_links=device.nvlink_links,
            nvlink_switch=device.nvlink_switch,
            pcie_paths=frozen_map(device.pcie_paths),
        )

    def _guarded(self, name: str, device: _Device, *args: Any) -> Any:
        """A per-GPU call: a lost GPU raises _Lost; other NVML errors are returned for the caller to judge."""
        return self._guarded_handle(name, device.handle, *args)

    def _guarded_handle(self, name: str, handle: Any, *args: Any) -> Any:
        """``_guarded`` on a handle of its own (a MIG device's)."""
        try:
            return self._call(name, handle, *args)
        except NvmlUnavailable:
            raise
        except Exception as error:
            if not self._nvml_error(error):
                raise
            if error_name(error) in LOST:
                raise _Lost(describe(error)) from None
            return error

    def _processes(self, paths: Paths, device: _Device, problems: list[str]) -> tuple[GpuProcess, ...] | None:
        result = self._guarded("nvmlDeviceGetComputeRunningProcesses", device)
        if isinstance(result, BaseException):
            problems.append(f"nvmlDeviceGetComputeRunningProcesses: {describe(result)}")
            return None
        found: dict[int, GpuProcess] = {}
        for info in result:
            pid = int(info.pid)
            if pid in found:  # listed once per GPU/compute instance under MIG
                continue
            memory = getattr(info, "usedGpuMemory", None)
            try:
                placement = process_cgroup(paths, pid)
            except MalformedFile as error:
                problems.append(str(error))
                placement = None
            if placement is None:
                found[pid] = GpuProcess(pid=pid, used_memory_bytes=int(memory) if memory is not None else None)
                continue
            version, path = placement
            container_id, pod_uid = cgroup_identity(path)
            found[pid] = GpuProcess(
                pid=pid,
                used_memory_bytes=int(memory) if memory is not None else None,
                cgroup_path=path,
                cgroup_version=version,
                container_id=container_id,
                pod_uid=pod_uid,
            )
        if device.migs:
            slices = self._mig_processes(device, problems)
            found = {pid: dataclasses.replace(process, mig_uuid=slices.get(pid)) for pid, process in found.items()}
        return tuple(found[pid] for pid in sorted(found))

    def _mig_processes(self, device: _Device, problems: list[str]) -> dict[int, str]:
        """PID -> the MIG device it runs on: each MIG device's own compute processes (the parent lists them all)."""
        slices: dict[int, str] = {}
        for handle, uuid in device.migs:
            listed = self._guarded_handle("nvmlDeviceGetComputeRunningProcesses", handle)
            if isinstance(listed, BaseException):
                problems.append(f"nvmlDeviceGetComputeRunningProcesses ({uuid}): {describe(listed)}")
                continue
            for info in listed:
                slices.setdefault(int(info.pid), uuid)
        return slices

    def _utilization(self, device: _Device, counters: _Counters, held: bool) -> str | None:
        """Integrate the GPU's busy time since the previous reading; the problem, if a call failed."""
        now = self._clock()
        first = counters.last_read is None
        result = self._guarded("nvmlDeviceGetSamples", device, NVML_GPU_UTILIZATION_SAMPLES, counters.last_seen_us)
        points: list[tuple[int, float]] = []
        if isinstance(result, BaseException):
            if not is_empty_answer("nvmlDeviceGetSamples", result):
                counters.utilization, counters.source = None, None
                counters.last_read = now
                counters.chain_us = None
                return f"nvmlDeviceGetSamples: {describe(result)}"
        else:
            value_type, samples = result
            try:
                points = sorted(
                    (int(sample.timeStamp), sample_value(value_type, sample.sampleValue))
                    for sample in samples
                    if int(sample.timeStamp) > counters.last_seen_us
                )
            except ValueError as error:  # a value type this numawatch does not know: newer driver, say so
                return f"nvmlDeviceGetSamples: {error}"
        if points:
            for stamp, value in points:
                utilization = _ratio(value)
                if not first and counters.chain_us is not None:
                    gap = stamp - counters.chain_us
                    if 0 < gap <= MAX_SAMPLE_GAP_US:
                        counters.integrate(utilization, gap / 1e6, held)
                counters.chain_us = stamp
            counters.last_seen_us = points[-1][0]
            counters.utilization, counters.source = _ratio(points[-1][1]), UTILIZATION_SAMPLES
        else:
            rates = self._guarded("nvmlDeviceGetUtilizationRates", device)
            counters.chain_us = None  # the next sample starts a new chain: this interval is covered by the rate
            if isinstance(rates, BaseException):
                counters.utilization, counters.source = None, None
                counters.last_read = now
                return f"nvmlDeviceGetUtilizationRates: {describe(rates)}"
            utilization = _ratio(float(rates.gpu))
            if counters.last_read is not None:
                elapsed = now - counters.last_read
                if 0 < elapsed <= MAX_RATES_INTERVAL:
                    counters.integrate(utilization, elapsed, held)
            counters.utilization, counters.source = utilization, UTILIZATION_RATES
        counters.last_read = now
        return None

    def _process_utilization(
        self, device: _Device, counters: _Counters, found: tuple[GpuProcess, ...], problems: list[str]
    ) -> tuple[GpuProcess, ...]:
        if counters.process_seen_us == 0:
            # Never pass 0 (the whole buffer, stale for minutes): start from the newest GPU sample NVML returned.
            counters.process_seen_us = counters.last_seen_us
            if counters.process_seen_us == 0:
                return found
        result = self._guarded("nvmlDeviceGetProcessUtilization", device, counters.process_seen_us)
        if isinstance(result, BaseException):
            # An empty buffer (pynvml's NVMLError(0) included, §2.3) is an answer; NOT_SUPPORTED means no per-process
            # sampling on this GPU (MIG): neither is a problem of the reading.
            if not is_empty_answer("nvmlDeviceGetProcessUtilization", result) and (
                error_name(result) != "NVMLError_NotSupported"
            ):
                problems.append(f"nvmlDeviceGetProcessUtilization: {describe(result)}")
            return found
        per_pid: dict[int, list[float]] = {}
        newest = counters.process_seen_us
        for sample in result:
            stamp = int(sample.timeStamp)
            if stamp <= counters.process_seen_us:
                continue
            newest = max(newest, stamp)
            per_pid.setdefault(int(sample.pid), []).append(float(sample.smUtil))
        counters.process_seen_us = newest
        return tuple(_with_utilization(process, per_pid.get(process.pid)) for process in found)


def _with_utilization(process: GpuProcess, values: Sequence[float] | None) -> GpuProcess:
    if not values:
        return process
    return dataclasses.replace(process, sm_utilization=_ratio(sum(values) / len(values)))


# --------------------------------------------------------------------------------------------------- the source
def _not_enabled(paths: Paths) -> NvmlSnapshot:
    raise SourceUnavailable("NVML is not enabled in this numawatch process")


def _reader(context: ReaderContext) -> NvmlReader | None:
    """The HostReader's NvmlReader, on the session it was given; None without one (``_not_enabled`` reads)."""
    if context.nvml is None:
        return None
    return NvmlReader(context.nvml, clock=context.clock)


SOURCE = SourceSpec(
    name="nvml",
    read=_not_enabled,
    # Reading NVML needs a session and counters that live as long as the process: the HostReader's, made here.
    factory=_reader,
    description="GPUs as NVML sees them: busy time, compute processes and their containers",
    # NVML reads no files: numawatch capture keeps the reading itself, and check --from replays it.
    recording=JsonRecording(NvmlSnapshot, "nvml"),
)

__all__ = [
    "MAX_SAMPLE_GAP_US",
    "SOURCE",
    "NvmlReader",
    "cpu_words",
    "mask_bits",
    "normalise_bus_id",
    "process_cgroup",
    "sample_value",
]
