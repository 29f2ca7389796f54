"""A fake ``pyhlml`` for tests (never imported by numawatch itself): the HLML calls numawatch makes, on programmable
Gaudi accelerators, with pyhlml's names, return shapes and errors (HabanaAI/pyhlml ``main.py``, ``hlml_types.py``,
``hlml_error.py``, ``hlml_lib.py``):

- ``hlmlInit()`` loads ``/usr/lib/habanalabs/libhlml.so``; without it pyhlml raises ``HLMLError(1)``
  (``HLMLError_Uninitialized``, "Libhlml not initialized"). ``hlmlShutdown()``.
- ``hlmlDeviceGetCount()`` an int; ``hlmlDeviceGetHandleByIndex(i)`` a handle; ``hlmlDeviceGetPCIInfo(h)`` a
  ``c_hlml_pci_info`` (``bus_id`` bytes ``b"0000:19:00.0"``, ``bus``, ``device``, ``domain``, ``pci_device_id``);
  ``hlmlDeviceGetUUID(h)`` and ``hlmlDeviceGetName(h)`` bytes.
- ``hlmlDeviceGetUtilizationRates(h)`` the ``aip`` field (percent over the past second);
  ``hlmlDeviceGetMemoryInfo(h)`` a ``c_hlml_memory`` (``free``, ``total``, ``used`` in bytes).
- Errors: ``HLMLError(code)`` builds the generated subclass ``HLMLError_<Name>`` (``HLMLError_AipIsLost`` for
  ``HLML_ERROR_AIP_IS_LOST``, 11) with ``value``; a lost device raises it from every call on its handle.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fake_library import FakeLibrary

_ERRORS = {
    1: ("Uninitialized", "Libhlml not initialized"),
    2: ("InvalidArgument", "Invalid argument"),
    3: ("NotSupported", "Not supported"),
    5: ("AlreadyInitialized", "Libhlml already initialized"),
    6: ("NotFound", "Not found"),
    7: ("InsufficientSize", "Insufficient size"),
    9: ("DriverNotLoaded", "Driver not loaded"),
    10: ("Timeout", "Timeout"),
    11: ("AipIsLost", "AIP Lost"),
    12: ("Memory", "Memory error"),
    13: ("NoData", "No Data"),
    14: ("Unknown", "Unknown"),
}
UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, AIP_IS_LOST, UNKNOWN = 1, 2, 3, 11, 14


class HLMLError(Exception):
    """As pyhlml's: ``HLMLError(code)`` is the generated subclass for the code, with ``value`` set."""

    def __new__(cls, value: int) -> HLMLError:
        if cls is HLMLError:
            cls = _CLASSES.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERRORS.get(self.value, ("", f"HLML error with code {self.value}"))[1]


_CLASSES: dict[int, type[HLMLError]] = {
    code: type(f"HLMLError_{name}", (HLMLError,), {}) for code, (name, _text) in _ERRORS.items()
}


@dataclass
class FakeGaudi:
    """One accelerator. ``errors`` maps a function name to the HLML error code it raises; ``values`` overrides what a
    function returns (garbled answers)."""

    bus_id: str  # "0000:19:00.0"
    uuid: str = ""
    name: str = "HL-225"
    utilization: int = 0
    memory_total: int = 96 << 30
    memory_used: int = 0
    lost: bool = False
    errors: dict[str, int] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


class FakeHlml(FakeLibrary):
    """A stand-in for the ``pyhlml`` module."""

    HLMLError = HLMLError

    def __init__(self, devices: Iterable[FakeGaudi] = (), *, library: bool = True) -> None:
        super().__init__("pyhlml")
        for error_class in _CLASSES.values():
            setattr(HLMLError, error_class.__name__, error_class)
        self.devices = list(devices)
        self.library = library

    def _device(self, name: str, handle: FakeGaudi, *args: Any) -> FakeGaudi:
        self._enter(name, handle, *args)
        if not self.initialised:
            raise HLMLError(UNINITIALIZED)
        if handle.lost:
            raise HLMLError(AIP_IS_LOST)
        if name in handle.errors:
            raise HLMLError(handle.errors[name])
        return handle

    # ------------------------------------------------------------------------------------ the API
    def hlmlInit(self) -> None:
        self._enter("hlmlInit")
        self.init_calls += 1
        if not self.library:
            raise HLMLError(UNINITIALIZED)  # LibHLML could not load libhlml.so
        self.initialised += 1

    def hlmlShutdown(self) -> None:
        self._enter("hlmlShutdown")
        if not self.initialised:
            raise HLMLError(UNINITIALIZED)
        self.shutdown_calls += 1
        self.initialised -= 1

    def hlmlDeviceGetCount(self) -> int:
        self._enter("hlmlDeviceGetCount")
        if not self.initialised:
            raise HLMLError(UNINITIALIZED)
        return len(self.devices)

    def hlmlDeviceGetHandleByIndex(self, index: int) -> FakeGaudi:
        self._enter("hlmlDeviceGetHandleByIndex", index)
        if not self.initialised:
            raise HLMLError(UNINITIALIZED)
        if not 0 <= index < len(self.devices):
            raise HLMLError(INVALID_ARGUMENT)
        return self.devices[index]

    def hlmlDeviceGetPCIInfo(self, handle: FakeGaudi) -> types.SimpleNamespace:
        device = self._device("hlmlDeviceGetPCIInfo", handle)
        domain, bus, rest = device.bus_id.split(":")
        info = types.SimpleNamespace(
            bus=int(bus, 16),
            bus_id=device.bus_id.encode(),
            device=int(rest.split(".")[0], 16),
            domain=int(domain, 16),
            pci_device_id=0x10201DA3,
        )
        return device.values.get("hlmlDeviceGetPCIInfo", info)

    def hlmlDeviceGetUUID(self, handle: FakeGaudi) -> bytes:
        device = self._device("hlmlDeviceGetUUID", handle)
        return device.values.get("hlmlDeviceGetUUID", device.uuid.encode())

    def hlmlDeviceGetName(self, handle: FakeGaudi) -> bytes:
        device = self._device("hlmlDeviceGetName", handle)
        return device.values.get("hlmlDeviceGetName", device.name.encode())

    def hlmlDeviceGetUtilizationRates(self, handle: FakeGaudi) -> int:
        device = self._device("hlmlDeviceGetUtilizationRates", handle)
        return device.values.get("hlmlDeviceGetUtilizationRates", device.utilization)

    def hlmlDeviceGetMemoryInfo(self, handle: FakeGaudi) -> types.SimpleNamespace:
        device = self._device("hlmlDeviceGetMemoryInfo", handle)
        memory = types.SimpleNamespace(free=device.memory_total - device.memory_used, total=device.memory_total,
                                       used=device.memory_used)  # fmt: skip
        return device.values.get("hlmlDeviceGetMemoryInfo", memory)


def reference_hlml(**kwargs: Any) -> FakeHlml:
    """HLML of fakehost.reference's node with Gaudi2 accelerators in its slots (``reference_node(vendor="habana")``):
    the first two 60 % busy, the other two 95 %, each with 40 GiB in use."""
    from fakehost.reference import GPUS

    busy = {0: 60, 1: 60, 2: 95, 3: 95}
    devices = [
        FakeGaudi(bus_id=gpu.pci_address, uuid=f"01P0-HL2080A0-15-TNB0{index}-04-07-0{index}",
                  utilization=busy[index], memory_used=40 << 30)
        for index, gpu in enumerate(GPUS)
    ]
    return FakeHlml(devices, **kwargs)
