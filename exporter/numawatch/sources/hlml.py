"""The hlml source: Intel Gaudi accelerators as HLML sees them: utilisation and device memory in use.

Habana's HLML through its Python bindings (module ``pyhlml``, package habana-pyhlml, HabanaAI/pyhlml; not a
dependency of numawatch, imported only on a node whose sysfs inventory lists Gaudi accelerators), through a
``LibrarySession``: one thread, a time limit per call, initialised once (``hlmlInit``). The calls, from pyhlml's
``main.py`` and ``hlml_types.py``:

- once per enumeration: ``hlmlDeviceGetCount``, ``hlmlDeviceGetHandleByIndex(i)``, per device
  ``hlmlDeviceGetPCIInfo`` (``bus_id``, ``b"0000:19:00.0"``: the ``gpu`` label), ``hlmlDeviceGetUUID``,
  ``hlmlDeviceGetName`` and ``hlmlDeviceGetMemoryInfo`` (``total``, bytes);
- every evaluation: ``hlmlDeviceGetUtilizationRates`` (the AIP's utilisation over the past second, percent) and
  ``hlmlDeviceGetMemoryInfo`` (``used``, bytes).

HLML lists no processes (pyhlml has no process call; ``hl-smi`` reads the driver's debugfs), so a Gaudi's
``processes`` are unknown (None): its busy seconds are counted, its held-idle seconds are not (who holds it is the
device plugin's word only), and ``gpu_holder_mismatch`` cannot judge it. Errors are pyhlml's generated
``HLMLError_*`` classes; ``HLMLError_AipIsLost`` marks the device down. pyhlml raises ``HLMLError_Uninitialized``
when it cannot load ``/usr/lib/habanalabs/libhlml.so``.
"""

from __future__ import annotations

from typing import Any

from numawatch.hosttext import excerpt
from numawatch.library_session import Library, LibrarySession, describe_class
from numawatch.model.gpu import JsonRecording, NvmlSnapshot
from numawatch.paths import Paths
from numawatch.source import ReaderContext, SourceSpec
from numawatch.sources._telemetry import (
    Device,
    DeviceLost,
    Sample,
    VendorReader,
    byte_count,
    not_enabled,
    pci_address,
    percent,
    text,
)

MAX_DEVICES = 64  # an HLS-Gaudi2 server has 8
_EXPLAINED = {
    "HLMLError_Uninitialized": "HLML is not initialised: no libhlml.so (/usr/lib/habanalabs) or no habanalabs driver",
    "HLMLError_DriverNotLoaded": "the habanalabs kernel module is not loaded",
    "HLMLError_AipIsLost": "the accelerator fell off the bus",
}


def describe(error: BaseException) -> str:
    """``HLMLError_AipIsLost (the accelerator fell off the bus)``."""
    return describe_class(error, _EXPLAINED)


HLML = Library(
    label="HLML",
    module="pyhlml",
    package="habana-pyhlml",
    init="hlmlInit",
    shutdown="hlmlShutdown",
    error_base="HLMLError",
    thread="numawatch-hlml",
    describe=describe,
)


def hlml_session(module: Any | None = None, **kwargs: Any) -> LibrarySession:
    """HLML for this process (``module``: the bindings, or a fake in tests; None imports ``pyhlml``)."""
    return LibrarySession(HLML, module, **kwargs)


def _utilization(value: Any) -> float | None:
    # pyhlml returns the struct's ``aip`` field; an older binding may hand the struct itself
    return percent(getattr(value, "aip", value), "utilization")


class HlmlReader(VendorReader):
    """The hlml source of one running numawatch: calls through a session, counters kept across evaluations."""

    vendor = "habana"
    lost_errors = frozenset({"HLMLError_AipIsLost"})
    not_supported_errors = frozenset({"HLMLError_NotSupported"})

    def enumerate(self) -> list[Device]:
        count = self.required("hlmlDeviceGetCount")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_DEVICES:
            raise ValueError(f"hlmlDeviceGetCount returned {excerpt(count)}, not a device count")
        devices = []
        for index in range(count):
            device = Device(index)
            try:
                handle = self.answer(device, "hlmlDeviceGetHandleByIndex", index)
                if isinstance(handle, BaseException):
                    device.lost = f"cannot open device {index}: {describe(handle)}"
                    devices.append(device)
                    continue
                device.handle = handle
                problems = device.problems
                device.pci_address = self.value(
                    device, "hlmlDeviceGetPCIInfo", lambda info: pci_address(info.bus_id, "bus_id"), problems
                )
                device.uuid = self.value(device, "hlmlDeviceGetUUID", lambda v: text(v, "UUID"), problems)
                device.name = self.value(device, "hlmlDeviceGetName", lambda v: text(v, "name"), problems)
                device.memory_total_bytes = self.value(
                    device, "hlmlDeviceGetMemoryInfo", lambda memory: byte_count(memory.total, "memory total"),
                    problems,
                )  # fmt: skip
            except DeviceLost as lost:
                device.lost = str(lost)
            devices.append(device)
        return devices

    def sample(self, paths: Paths, device: Device, problems: list[str]) -> Sample:
        utilization = self.value(device, "hlmlDeviceGetUtilizationRates", _utilization, problems)
        memory = self.value(
            device, "hlmlDeviceGetMemoryInfo", lambda memory: byte_count(memory.used, "memory used"), problems
        )
        return Sample(utilization, memory, None, answered=utilization is not None or memory is not None)


def _reader(context: ReaderContext) -> HlmlReader | None:
    """The HostReader's HlmlReader, on the HLML session it was given; None without one."""
    session = context.libraries.get("hlml")
    return HlmlReader(session, clock=context.clock) if session is not None else None


SOURCE = SourceSpec(
    name="hlml",
    read=not_enabled("habana", "HLML"),
    factory=_reader,
    needs=("gpus_sysfs",),
    description="Intel Gaudi accelerators as HLML sees them: utilisation and device memory in use",
    recording=JsonRecording(NvmlSnapshot, "hlml"),
)

__all__ = ["HLML", "SOURCE", "HlmlReader", "describe", "hlml_session"]
