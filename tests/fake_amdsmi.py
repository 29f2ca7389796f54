"""A fake ``amdsmi`` for tests (never imported by numawatch itself): the AMD SMI calls numawatch makes, on
programmable GPUs, with the real Python API's names, argument order, return shapes and exceptions.

From AMD SMI's Python API reference (rocm.docs.amd.com/projects/amdsmi, "Python API"; amdsmi_interface.py and
amdsmi_exception.py of ROCm/amdsmi):

- ``amdsmi_init(flags=AmdSmiInitFlags.INIT_AMD_GPUS)``, ``amdsmi_shut_down()``; any other call before init raises
  ``AmdSmiLibraryException`` with ``AMDSMI_STATUS_NOT_INIT``.
- ``amdsmi_get_processor_handles()`` a list of handles; ``amdsmi_get_gpu_device_bdf(h)`` ``"0000:c1:00.0"``;
  ``amdsmi_get_gpu_device_uuid(h)`` a string; ``amdsmi_get_gpu_asic_info(h)`` a dict with ``market_name``.
- ``amdsmi_get_gpu_activity(h)`` ``{"gfx_activity", "umc_activity", "mm_activity"}`` in percent, ``"N/A"`` for a
  value the GPU does not report (0xFFFF from the C library).
- ``amdsmi_get_gpu_memory_total(h, AmdSmiMemoryType.VRAM)`` and ``amdsmi_get_gpu_memory_usage(h, ...)`` in bytes.
- ``amdsmi_get_gpu_process_list(h)``: since ROCm 6.2 a list of dicts (``name``, ``pid``, ``mem``, ``engine_usage``,
  ``memory_usage`` with ``gtt_mem``, ``cpu_mem``, ``vram_mem``, ``cu_occupancy``); before, a list of process handles,
  each described by ``amdsmi_get_gpu_process_info(h, process)`` (``process_handles=True`` here).
- Errors are ``AmdSmiLibraryException(err_code)`` (a subclass of ``AmdSmiException``) whose ``err_info`` is
  ``"AMDSMI_STATUS_<NAME> - <text>"`` and ``get_error_code()`` the code; numawatch reads the status name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fake_library import FakeLibrary

# amdsmi_status_t: the codes amdsmi_exception.py names (numawatch keys on the name in err_info, not on the number)
_STATUSES = {
    1: ("AMDSMI_STATUS_INVAL", "Invalid parameters"),
    2: ("AMDSMI_STATUS_NOT_SUPPORTED", "Feature not supported"),
    4: ("AMDSMI_STATUS_FAIL_LOAD_MODULE", "Fail to load lib"),
    10: ("AMDSMI_STATUS_NO_PERM", "Permission Denied"),
    32: ("AMDSMI_STATUS_NOT_INIT", "Device not initialized"),
    34: ("AMDSMI_STATUS_DRIVER_NOT_LOADED", "Driver not loaded"),
    40: ("AMDSMI_STATUS_NO_DATA", "No data was found for a given input"),
}
INVAL, NOT_SUPPORTED, NO_PERM, NOT_INIT, DRIVER_NOT_LOADED = 1, 2, 10, 32, 34


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        name, text = _STATUSES.get(err_code, ("AMDSMI_STATUS_UNKNOWN_ERROR", "An unknown error occurred"))
        self.err_info = f"{name} - {text}"

    def __str__(self) -> str:
        return f"An error occured with code: {self.err_code}({self.err_info})"

    def get_error_info(self) -> str:
        return self.err_info

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiInitFlags:
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1


class AmdSmiMemoryType:
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


@dataclass
class FakeAmdGpu:
    """One GPU. ``activity`` is gfx_activity (percent, or "N/A"); ``processes`` (pid, VRAM bytes); ``errors`` maps a
    function name to the status code it raises; ``values`` overrides what a function returns (garbled answers)."""

    bdf: str  # "0000:c1:00.0"
    uuid: str = ""
    market_name: str = "AMD Instinct MI300X"
    activity: Any = 0
    vram_total: int = 192 << 30
    vram_used: int = 0
    processes: list[tuple[int, int]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


class FakeAmdSmi(FakeLibrary):
    """A stand-in for the ``amdsmi`` module."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiMemoryType = AmdSmiMemoryType

    def __init__(
        self, gpus: Iterable[FakeAmdGpu] = (), *, driver: bool = True, process_handles: bool = False
    ) -> None:
        super().__init__("amdsmi")
        self.gpus = list(gpus)
        self.driver = driver
        self.process_handles = process_handles
        self.init_flags: list[Any] = []

    def _device(self, name: str, handle: FakeAmdGpu, *args: Any) -> FakeAmdGpu:
        self._enter(name, handle, *args)
        if not self.initialised:
            raise AmdSmiLibraryException(NOT_INIT)
        if not isinstance(handle, FakeAmdGpu):
            raise AmdSmiLibraryException(INVAL)
        if name in handle.errors:
            raise AmdSmiLibraryException(handle.errors[name])
        return handle

    def _answer(self, name: str, gpu: FakeAmdGpu, value: Any) -> Any:
        return gpu.values.get(name, value)

    # ------------------------------------------------------------------------------------ the API
    def amdsmi_init(self, flags: Any = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self._enter("amdsmi_init", flags)
        self.init_calls += 1
        self.init_flags.append(flags)
        if not self.driver:
            raise AmdSmiLibraryException(DRIVER_NOT_LOADED)
        self.initialised += 1

    def amdsmi_shut_down(self) -> None:
        self._enter("amdsmi_shut_down")
        if not self.initialised:
            raise AmdSmiLibraryException(NOT_INIT)
        self.shutdown_calls += 1
        self.initialised -= 1

    def amdsmi_get_processor_handles(self) -> list[FakeAmdGpu]:
        self._enter("amdsmi_get_processor_handles")
        if not self.initialised:
            raise AmdSmiLibraryException(NOT_INIT)
        return list(self.gpus)

    def amdsmi_get_gpu_device_bdf(self, handle: FakeAmdGpu) -> str:
        gpu = self._device("amdsmi_get_gpu_device_bdf", handle)
        return self._answer("amdsmi_get_gpu_device_bdf", gpu, gpu.bdf)

    def amdsmi_get_gpu_device_uuid(self, handle: FakeAmdGpu) -> str:
        gpu = self._device("amdsmi_get_gpu_device_uuid", handle)
        return self._answer("amdsmi_get_gpu_device_uuid", gpu, gpu.uuid)

    def amdsmi_get_gpu_asic_info(self, handle: FakeAmdGpu) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_asic_info", handle)
        info = {"market_name": gpu.market_name, "vendor_id": "0x1002", "vendor_name": "Advanced Micro Devices Inc.",
                "device_id": "0x74a1", "rev_id": "0x00", "asic_serial": "0x0", "oam_id": 0}  # fmt: skip
        return self._answer("amdsmi_get_gpu_asic_info", gpu, info)

    def amdsmi_get_gpu_activity(self, handle: FakeAmdGpu) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_activity", handle)
        return self._answer("amdsmi_get_gpu_activity", gpu,
                            {"gfx_activity": gpu.activity, "umc_activity": 0, "mm_activity": "N/A"})  # fmt: skip

    def amdsmi_get_gpu_memory_total(self, handle: FakeAmdGpu, mem_type: int) -> int:
        gpu = self._device("amdsmi_get_gpu_memory_total", handle, mem_type)
        if mem_type != AmdSmiMemoryType.VRAM:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return self._answer("amdsmi_get_gpu_memory_total", gpu, gpu.vram_total)

    def amdsmi_get_gpu_memory_usage(self, handle: FakeAmdGpu, mem_type: int) -> int:
        gpu = self._device("amdsmi_get_gpu_memory_usage", handle, mem_type)
        if mem_type != AmdSmiMemoryType.VRAM:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return self._answer("amdsmi_get_gpu_memory_usage", gpu, gpu.vram_used)

    def _process(self, pid: int, vram: int) -> dict[str, Any]:
        return {"name": "python3", "pid": pid, "mem": vram, "engine_usage": {"gfx": 0, "enc": 0},
                "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": vram}, "cu_occupancy": "N/A"}  # fmt: skip

    def amdsmi_get_gpu_process_list(self, handle: FakeAmdGpu) -> list[Any]:
        gpu = self._device("amdsmi_get_gpu_process_list", handle)
        if self.process_handles:
            return [("process", pid) for pid, _ in gpu.processes]
        return self._answer("amdsmi_get_gpu_process_list", gpu,
                            [self._process(pid, vram) for pid, vram in gpu.processes])  # fmt: skip

    def amdsmi_get_gpu_process_info(self, handle: FakeAmdGpu, process: Any) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_process_info", handle, process)
        for pid, vram in gpu.processes:
            if process == ("process", pid):
                return self._process(pid, vram)
        raise AmdSmiLibraryException(INVAL)


def reference_amdsmi(**kwargs: Any) -> FakeAmdSmi:
    """AMD SMI of fakehost.reference's node with AMD Instinct GPUs in its slots (``reference_node(vendor="amd")``):
    vllm's process on GPUs 0 and 1 (60 % busy), trtllm's on 2 and 3 (95 %), each using 40 GiB of VRAM."""
    from fake_pynvml import reference_pid
    from fakehost.reference import GPUS, TRTLLM, VLLM

    holders = {0: VLLM, 1: VLLM, 2: TRTLLM, 3: TRTLLM}
    busy = {0: 60, 1: 60, 2: 95, 3: 95}
    gpus = [
        FakeAmdGpu(
            bdf=gpu.pci_address,
            uuid=f"5cff74a1-0000-1000-80{index:02x}-000000000000",
            activity=busy[index],
            vram_used=40 << 30,
            processes=[(reference_pid(holders[index]), 40 << 30)],
        )
        for index, gpu in enumerate(GPUS)
    ]
    return FakeAmdSmi(gpus, **kwargs)
