"""What the AMD SMI and HLML sources share: a reader of a vendor's GPU library through a LibrarySession
that gives the telemetry NVML gives (``NvmlSnapshot``, each GPU with its ``vendor``).

Neither library keeps a buffer of timestamped samples like NVML's ``nvmlDeviceGetSamples``: each answers a current
utilisation (AMD SMI's ``gfx_activity``, HLML's utilisation "over the past second"). So busy time is integrated the
way NVML's empty-buffer fallback does it: the reading applies to the wall time since the previous evaluation, at
most ``MAX_RATES_INTERVAL`` seconds of it (a paused exporter is not a guess), and held-idle time counts when the
GPU had a process at that evaluation. ``utilization_source`` is ``"rates"``.

Which GPUs: the library's own enumeration, read once (handles, PCI address, id, name, memory size) and again when the
sysfs inventory's set of that vendor's accelerators changes (hotplug; the library is initialised again, since it
enumerates at initialisation). The library is not touched at all while the inventory (``gpus_sysfs``, a ``needs``
input) lists none of its vendor's accelerators: on an NVIDIA node the ``amdsmi`` and ``hlml`` sources are up with no
GPUs and never import their modules. The ``uuid`` of a GPU is the inventory's stable id for its PCI address
(``numawatch_gpu_info``'s), so every GPU series joins on ``gpu`` and ``uuid`` whatever the vendor; the library's own
id stands in only for a GPU sysfs does not list.

Failures, as for NVML: no library or driver, or a call that hangs, makes the source down with the reason; an error
of the library's on one call of one GPU leaves that value unknown and is named in the GPU's ``problems`` (not
supported: unknown, not a problem); a GPU the library calls lost is down (``up`` false) and not called again until
the inventory changes. Every value from the library is checked before it becomes a label or a number.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import excerpt, printable
from numawatch.library_session import LibrarySession, LibraryUnavailable
from numawatch.model.gpu import UTILIZATION_RATES, GpuInventory, GpuProcess, NvmlGpu, NvmlSnapshot
from numawatch.paths import Paths
from numawatch.source import Inputs
from numawatch.sources.nvml import normalise_bus_id, process_cgroup
from numawatch.sources.processes import cgroup_identity

log = logging.getLogger(__name__)

MAX_RATES_INTERVAL = 120.0  # seconds one utilisation reading may stand for
MAX_PROCESSES = 1024  # per GPU; a GPU with more listed is not what these libraries report
_TEXT_LIMIT = 96  # a name or id from the library (as gpus_sysfs bounds the driver's model)


class DeviceLost(Exception):
    """The GPU is lost (raised inside a GPU's reading, caught at its end)."""


@dataclass
class Device:
    """What does not change while the library stays initialised: read once per enumeration."""

    index: int
    handle: Any = None
    pci_address: str | None = None
    uuid: str | None = None
    name: str | None = None
    memory_total_bytes: int | None = None
    problems: list[str] = field(default_factory=list)
    lost: str = ""

    @property
    def key(self) -> str:
        return self.pci_address or self.uuid or f"index:{self.index}"


@dataclass
class _Counters:
    """What one GPU has accumulated (kept across evaluations and re-enumerations, by PCI address)."""

    last_read: float | None = None
    busy: float = 0.0
    sampled: float = 0.0
    held_idle: float = 0.0
    lost: str = ""

    def integrate(self, utilization: float | None, now: float, held: bool) -> None:
        if utilization is not None and self.last_read is not None:
            elapsed = now - self.last_read
            if 0 < elapsed <= MAX_RATES_INTERVAL:
                self.busy += utilization * elapsed
                self.sampled += elapsed
                if held:
                    self.held_idle += (1.0 - utilization) * elapsed
        self.last_read = now


def percent(value: Any, what: str) -> float | None:
    """A utilisation percentage from a library -> 0-1; None for "N/A" (the library's unknown); ValueError for
    anything that is not a percentage."""
    if isinstance(value, str) and value.strip().upper() == "N/A":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} is not a number: {excerpt(value)}")
    if not 0 <= value <= 100:
        raise ValueError(f"{what} {value} is not a percentage")
    return float(value) / 100.0


def byte_count(value: Any, what: str) -> int | None:
    """A byte count from a library; None for "N/A"; ValueError for a negative or non-integer one."""
    if isinstance(value, str) and value.strip().upper() == "N/A":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} is not a byte count: {excerpt(value)}")
    return value


def text(value: Any, what: str) -> str:
    """A name or id the library returned (bytes or str), as printable text of bounded length."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise ValueError(f"{what} is not text: {excerpt(value)}")
    return printable(value.strip().rstrip("\x00"), what, _TEXT_LIMIT)


def pci_address(value: Any, what: str) -> str:
    """A PCI address the library returned (``0000:c1:00.0``, any case, NVML-style 8-digit domain) in sysfs spelling."""
    address = normalise_bus_id(text(value, what))
    if address is None:
        raise ValueError(f"{what} is not a PCI address: {excerpt(value)}")
    return address


def gpu_processes(paths: Paths, listed: Iterable[tuple[Any, Any]], problems: list[str]) -> tuple[GpuProcess, ...]:
    """(PID, bytes or None) pairs a library listed -> processes with the container their cgroup names, by PID."""
    found: dict[int, GpuProcess] = {}
    for pid, memory in listed:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            problems.append(f"process list: {excerpt(pid)} is not a PID")
            continue
        if pid in found:
            continue
        if len(found) >= MAX_PROCESSES:
            problems.append(f"process list: more than {MAX_PROCESSES} processes; the rest are left out")
            break
        try:
            used = byte_count(memory, f"memory of process {pid}") if memory is not None else None
        except ValueError as error:
            problems.append(f"process list: {error}")
            used = None
        try:
            placement = process_cgroup(paths, pid)
        except MalformedFile as error:
            problems.append(str(error))
            placement = None
        if placement is None:
            found[pid] = GpuProcess(pid=pid, used_memory_bytes=used)
            continue
        version, path = placement
        container_id, pod_uid = cgroup_identity(path)
        found[pid] = GpuProcess(pid=pid, used_memory_bytes=used, cgroup_path=path, cgroup_version=version,
                                container_id=container_id, pod_uid=pod_uid)  # fmt: skip
    return tuple(found[pid] for pid in sorted(found))


@dataclass
class Sample:
    """One evaluation's answers for one GPU; None: unknown."""

    utilization: float | None = None
    memory_used_bytes: int | None = None
    processes: tuple[GpuProcess, ...] | None = None
    answered: bool = False  # whether any call of this evaluation answered


class VendorReader:
    """A telemetry source on one vendor's library (subclasses say which calls give what)."""

    vendor = ""  # gpus_sysfs's vendor name of the accelerators this library reads
    lost_errors: frozenset[str] = frozenset()  # error names meaning the device fell off the bus
    not_supported_errors: frozenset[str] = frozenset()  # error names meaning "this device cannot say": unknown

    def __init__(self, session: LibrarySession, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self._clock = clock
        self._devices: list[Device] | None = None
        self._counters: dict[str, _Counters] = {}
        self._addresses: frozenset[str] | None = None  # the inventory's accelerators of the vendor, last seen

    # ----------------------------------------------------------------------------------------- what subclasses give
    def enumerate(self) -> list[Device]:
        raise NotImplementedError

    def sample(self, paths: Paths, device: Device, problems: list[str]) -> Sample:
        raise NotImplementedError

    def error_name(self, error: BaseException) -> str:
        return type(error).__name__

    def driver_version(self) -> str | None:
        return None

    # ----------------------------------------------------------------------------------------- calls
    def call(self, name: str, *args: Any) -> Any:
        return self.session.call(name, *args)

    def required(self, name: str, *args: Any) -> Any:
        """A call the enumeration cannot do without: the library's error makes the source down, naming it."""
        result = self.answer(None, name, *args)
        if isinstance(result, BaseException):
            raise SourceUnavailable(f"{name} failed: {self.session.library.describe(result)}")
        return result

    def answer(self, device: Device | None, name: str, *args: Any) -> Any:
        """A call's result, or the library's error for the caller to judge; a lost device raises DeviceLost."""
        try:
            return self.call(name, *args)
        except LibraryUnavailable:
            raise
        except Exception as error:
            if not self.session.is_library_error(error):
                raise
            if device is not None and self.error_name(error) in self.lost_errors:
                raise DeviceLost(self.session.library.describe(error)) from None
            return error

    def value(self, device: Device, name: str, convert: Callable[[Any], Any], problems: list[str], *args: Any) -> Any:
        """One value: converted, or None (and the problem noted; "not supported" is only unknown)."""
        result = self.answer(device, name, device.handle, *args)
        if isinstance(result, BaseException):
            if self.error_name(result) not in self.not_supported_errors:
                problems.append(f"{name}: {self.session.library.describe(result)}")
            return None
        try:
            return convert(result)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            problems.append(f"{name}: {error}")
            return None

    # ----------------------------------------------------------------------------------------- the reading
    def refresh(self) -> None:
        """Devices were added or removed: enumerate again (initialising the library again) and retry lost ones."""
        self._devices = None
        for counters in self._counters.values():
            counters.lost = ""
        self.session.request_restart()

    def read(self, paths: Paths, inputs: Inputs) -> NvmlSnapshot:
        inventory: GpuInventory | None = inputs.get("gpus_sysfs")
        if inventory is not None:
            addresses = frozenset(gpu.pci_address for gpu in inventory.gpus if gpu.vendor == self.vendor)
            if not addresses:
                return NvmlSnapshot(driver_version=None, gpus=(), calls=self.session.calls())
            if self._addresses is not None and addresses != self._addresses and self._devices is not None:
                log.info("the %s accelerators on the PCI bus changed: enumerating again", self.vendor)
                self.refresh()
            self._addresses = addresses
        if self._devices is None:
            self._devices = self.enumerate()
            log.info("%s enumerates %d GPU(s)", self.session.library.label, len(self._devices))
        gpus = tuple(self._read_gpu(paths, device, inventory) for device in self._devices)
        return NvmlSnapshot(driver_version=self.driver_version(), gpus=gpus, calls=self.session.calls())

    def _read_gpu(self, paths: Paths, device: Device, inventory: GpuInventory | None) -> NvmlGpu:
        counters = self._counters.setdefault(device.key, _Counters())
        if device.lost and not counters.lost:
            counters.lost = device.lost
        problems = list(device.problems)
        sample = Sample()
        if not counters.lost:
            try:
                sample = self.sample(paths, device, problems)
            except DeviceLost as lost:
                counters.lost = str(lost)
                log.error("%s GPU %s (%s) is down: %s", self.vendor, device.index, device.pci_address, lost)
        now = self._clock()
        if counters.lost:
            counters.last_read = None
        else:
            counters.integrate(sample.utilization, now, held=bool(sample.processes))
        known = inventory.by_pci(device.pci_address) if inventory is not None and device.pci_address else None
        return NvmlGpu(
            index=device.index,
            uuid=known.uuid if known is not None and known.uuid else device.uuid,
            pci_address=device.pci_address,
            name=device.name,
            up=not counters.lost,
            reason=counters.lost,
            utilization=None if counters.lost else sample.utilization,
            utilization_source=None if counters.lost or sample.utilization is None else UTILIZATION_RATES,
            busy_seconds=counters.busy,
            sampled_seconds=counters.sampled,
            held_idle_seconds=counters.held_idle,
            processes=() if counters.lost else sample.processes,
            problems=tuple(problems),
            vendor=self.vendor,
            memory_used_bytes=None if counters.lost else sample.memory_used_bytes,
            memory_total_bytes=device.memory_total_bytes,
        )


def not_enabled(vendor: str, label: str) -> Callable[[Paths, Inputs], NvmlSnapshot]:
    """The source's read without a session: down saying the library is not enabled where the inventory lists the
    vendor's accelerators; else up with no GPUs (without its library the source has nothing to read, and whether
    the node has such accelerators at all is the inventory's to say, down or not)."""

    def read(paths: Paths, inputs: Inputs) -> NvmlSnapshot:
        inventory: GpuInventory | None = inputs.get("gpus_sysfs")
        if inventory is not None and any(gpu.vendor == vendor for gpu in inventory.gpus):
            raise SourceUnavailable(f"{label} is not enabled in this numawatch process")
        return NvmlSnapshot(driver_version=None, gpus=())

    return read


__all__ = [
    "MAX_PROCESSES",
    "MAX_RATES_INTERVAL",
    "Device",
    "DeviceLost",
    "Sample",
    "VendorReader",
    "byte_count",
    "gpu_processes",
    "not_enabled",
    "pci_address",
    "percent",
    "text",
]
