"""The amdsmi source: AMD Instinct GPUs as AMD SMI sees them: utilisation, VRAM in use, and the processes
on each GPU with their containers.

AMD SMI's Python bindings (module ``amdsmi``, shipped with ROCm and on PyPI; not a dependency of numawatch, imported
only on a node whose sysfs inventory lists AMD accelerators) through a ``LibrarySession``: one thread, a time limit
per call, initialised once with ``amdsmi_init(AmdSmiInitFlags.INIT_AMD_GPUS)``. The calls, from AMD SMI's Python
API reference (rocm.docs.amd.com/projects/amdsmi, "Python API" and amdsmi_interface.py):

- once per enumeration: ``amdsmi_get_processor_handles()`` (a list of handles), per handle
  ``amdsmi_get_gpu_device_bdf`` (``"0000:c1:00.0"``, sysfs's spelling: the ``gpu`` label),
  ``amdsmi_get_gpu_device_uuid``, ``amdsmi_get_gpu_asic_info`` (``market_name``) and
  ``amdsmi_get_gpu_memory_total(handle, AmdSmiMemoryType.VRAM)`` (bytes);
- every evaluation: ``amdsmi_get_gpu_activity`` (``gfx_activity``, percent, ``"N/A"`` when the GPU cannot say),
  ``amdsmi_get_gpu_memory_usage(handle, AmdSmiMemoryType.VRAM)`` (bytes; not ``amdsmi_get_gpu_vram_usage``, whose
  figures are MB) and ``amdsmi_get_gpu_process_list`` (a dict per process with ``pid`` and
  ``memory_usage.vram_mem`` since ROCm 6.2; process handles before, each described by ``amdsmi_get_gpu_process_info``).

Errors are ``AmdSmiLibraryException`` whose ``err_info`` names the status (``AMDSMI_STATUS_NOT_SUPPORTED - ...``):
that status is the error's name here. The rest of the discipline (what a failure costs, how busy time is integrated
from a current utilisation) is sources/_telemetry.py's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from numawatch.hosttext import excerpt
from numawatch.library_session import Library, LibrarySession, describe_class
from numawatch.model.gpu import GpuProcess, JsonRecording, NvmlSnapshot
from numawatch.paths import Paths
from numawatch.source import ReaderContext, SourceSpec
from numawatch.sources._telemetry import (
    Device,
    DeviceLost,
    Sample,
    VendorReader,
    byte_count,
    gpu_processes,
    not_enabled,
    pci_address,
    percent,
    text,
)

MAX_DEVICES = 256  # handles read per enumeration (an MI300X node in CPX mode has 64)
_STATUS = re.compile(r"AMDSMI_STATUS_[A-Z_]+")


def status_name(error: BaseException) -> str:
    """``AMDSMI_STATUS_NOT_SUPPORTED`` for an AmdSmiLibraryException saying so; the class name otherwise."""
    found = _STATUS.search(str(getattr(error, "err_info", "") or error))
    return found.group(0) if found else type(error).__name__


def describe(error: BaseException) -> str:
    """``AmdSmiLibraryException: AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded``, on one line."""
    info = getattr(error, "err_info", None)
    if isinstance(info, str) and info.strip():
        return f"{type(error).__name__}: {' '.join(info.split())}"
    return describe_class(error)


def _init_flags(module: Any) -> tuple[Any, ...]:
    flags = getattr(module, "AmdSmiInitFlags", None)
    gpus = getattr(flags, "INIT_AMD_GPUS", None) if flags is not None else None
    return (gpus,) if gpus is not None else ()


AMDSMI = Library(
    label="AMD SMI",
    module="amdsmi",
    package="amdsmi",
    init="amdsmi_init",
    shutdown="amdsmi_shut_down",
    error_base="AmdSmiException",
    thread="numawatch-amdsmi",
    init_args=_init_flags,
    describe=describe,
)


def amdsmi_session(module: Any | None = None, **kwargs: Any) -> LibrarySession:
    """AMD SMI for this process (``module``: the bindings, or a fake in tests; None imports ``amdsmi``)."""
    return LibrarySession(AMDSMI, module, **kwargs)


class AmdSmiReader(VendorReader):
    """The amdsmi source of one running numawatch: calls through a session, counters kept across evaluations."""

    vendor = "amd"
    not_supported_errors = frozenset({"AMDSMI_STATUS_NOT_SUPPORTED", "AMDSMI_STATUS_NOT_YET_IMPLEMENTED"})

    def error_name(self, error: BaseException) -> str:
        return status_name(error)

    def _vram(self) -> Any:
        kinds = getattr(self.session.module, "AmdSmiMemoryType", None)
        return getattr(kinds, "VRAM", 0) if kinds is not None else 0

    def enumerate(self) -> list[Device]:
        handles = self.required("amdsmi_get_processor_handles")
        if not isinstance(handles, (list, tuple)):
            raise ValueError(f"amdsmi_get_processor_handles returned {excerpt(handles)}, not a list")
        vram = self._vram()
        devices = []
        for index, handle in enumerate(handles[:MAX_DEVICES]):
            device = Device(index, handle)
            problems = device.problems
            try:
                device.pci_address = self.value(device, "amdsmi_get_gpu_device_bdf", lambda v: pci_address(v, "BDF"),
                                                problems)  # fmt: skip
                device.uuid = self.value(device, "amdsmi_get_gpu_device_uuid", lambda v: text(v, "UUID"), problems)
                device.name = self.value(
                    device, "amdsmi_get_gpu_asic_info", lambda info: text(info["market_name"], "market_name"), problems
                )
                device.memory_total_bytes = self.value(
                    device, "amdsmi_get_gpu_memory_total", lambda v: byte_count(v, "VRAM total"), problems, vram
                )
            except DeviceLost as lost:
                device.lost = str(lost)
            devices.append(device)
        return devices

    def sample(self, paths: Paths, device: Device, problems: list[str]) -> Sample:
        utilization = self.value(
            device, "amdsmi_get_gpu_activity", lambda activity: percent(activity["gfx_activity"], "gfx_activity"),
            problems,
        )  # fmt: skip
        memory = self.value(device, "amdsmi_get_gpu_memory_usage", lambda v: byte_count(v, "VRAM used"), problems,
                            self._vram())  # fmt: skip
        listed = self.value(device, "amdsmi_get_gpu_process_list", _as_list, problems)
        processes: tuple[GpuProcess, ...] | None = None
        if listed is not None:
            processes = gpu_processes(paths, self._pids(device, listed, problems), problems)
        return Sample(utilization, memory, processes, answered=any(v is not None for v in (utilization, memory,
                                                                                                listed)))

    def _pids(self, device: Device, listed: list[Any], problems: list[str]) -> list[tuple[Any, Any]]:
        pairs = []
        for entry in listed:
            if not isinstance(entry, Mapping):  # a process handle (ROCm before 6.2): ask for its information
                entry = self.value(device, "amdsmi_get_gpu_process_info", _as_mapping, problems, entry)
                if entry is None:
                    continue
            usage = entry.get("memory_usage")
            memory = usage.get("vram_mem") if isinstance(usage, Mapping) else entry.get("mem")
            pairs.append((entry.get("pid"), memory))
        return pairs


def _as_list(value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of processes, got {excerpt(value)}")
    return list(value)


def _as_mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a process's information, got {excerpt(value)}")
    return value


def _reader(context: ReaderContext) -> AmdSmiReader | None:
    """The HostReader's AmdSmiReader, on the AMD SMI session it was given; None without one."""
    session = context.libraries.get("amdsmi")
    return AmdSmiReader(session, clock=context.clock) if session is not None else None


SOURCE = SourceSpec(
    name="amdsmi",
    read=not_enabled("amd", "AMD SMI"),
    factory=_reader,
    needs=("gpus_sysfs",),
    description="AMD GPUs as AMD SMI sees them: utilisation, VRAM in use, compute processes and their containers",
    recording=JsonRecording(NvmlSnapshot, "amdsmi"),
)

__all__ = ["AMDSMI", "SOURCE", "AmdSmiReader", "amdsmi_session", "describe", "status_name"]
