"""Fake PCI functions: NVIDIA GPUs (and other devices, so the GPU filter is exercised) in the real sysfs shape.

Each device is a directory ``sys/devices/pci<domain>:<bus>/<bdf>/`` with ``vendor``, ``device``, ``class``,
``numa_node`` (``-1`` when unknown), ``local_cpulist``, ``local_cpus`` (hex mask), ``irq`` and ``msi_irqs/<n>``,
reached through the relative link ``sys/bus/pci/devices/<bdf> -> ../../../devices/pci<domain>:<bus>/<bdf>`` as
the kernel makes it. GPUs also get the driver's ``proc/driver/nvidia/gpus/<bdf>/information``.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from numawatch.cpuset import CPUSet, format_cpulist, parse_cpulist

from fakehost.topology import format_cpumask

if TYPE_CHECKING:
    from fakehost import FakeHost

NVIDIA = "0x10de"
CLASS_3D_CONTROLLER = "0x030200"  # data-centre GPUs (H100, A100, ...)
CLASS_VGA = "0x030000"
CLASS_ETHERNET = "0x020000"
CLASS_AUDIO = "0x040300"  # NVIDIA HDMI audio function on the same card as a VGA GPU
CLASS_BRIDGE_OTHER = "0x068000"  # NVSwitch

_BDF = re.compile(r"^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


@dataclass(frozen=True)
class FakeGpu:
    pci_address: str
    uuid: str
    model: str
    numa_node: int | None
    local_cpus: CPUSet | None
    device_dir: Path  # the real directory under sys/devices


def fake_uuid(pci_address: str) -> str:
    """A stable ``GPU-<uuid>`` for an address, so tests and benchmarks get the same UUIDs every run."""
    return f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'numawatch-fake-gpu:{pci_address}')}"


def _nr_cpu_ids(host: FakeHost, cpus: CPUSet) -> int:
    """The mask width: from the fake's cpu/possible when add_topology ran, else just wide enough."""
    possible = host.path("sys/devices/system/cpu/possible")
    if possible.is_file():
        ids = parse_cpulist(possible.read_text())
        if ids:
            return max(ids) + 1
    return max(cpus) + 1 if cpus else 1


def add_pci_device(
    host: FakeHost,
    pci_address: str,
    *,
    vendor_id: str,
    device_id: str,
    class_code: str,
    numa_node: int | None = None,
    local_cpus: Iterable[int] | str | None = None,
    msi_irqs: Iterable[int] = (),
) -> Path:
    """Write one PCI function and its ``sys/bus/pci/devices`` link; return its directory under sys/devices.

    ``numa_node`` None writes ``-1`` (firmware gave no locality). ``local_cpus`` is a CPU list string or CPU ids;
    None writes no local_cpulist/local_cpus (as on a kernel without NUMA). ``msi_irqs`` creates ``msi_irqs/<n>``
    entries (what the IRQ readers use to find a device's interrupts) and sets ``irq`` to the first one.
    """
    address = pci_address.lower()
    match = _BDF.match(address)
    if match is None:
        raise ValueError(f"PCI address must look like 0000:18:00.0, not {pci_address!r}")
    domain, bus = match.group(1), match.group(2)
    root_bus = f"pci{domain}:{bus}"
    rel_dir = f"sys/devices/{root_bus}/{address}"
    host.write(f"{rel_dir}/vendor", vendor_id)
    host.write(f"{rel_dir}/device", device_id)
    host.write(f"{rel_dir}/class", class_code)
    host.write(f"{rel_dir}/numa_node", str(-1 if numa_node is None else numa_node))
    if local_cpus is not None:
        cpus = parse_cpulist(local_cpus) if isinstance(local_cpus, str) else frozenset(local_cpus)
        host.write(f"{rel_dir}/local_cpulist", format_cpulist(cpus))
        host.write(f"{rel_dir}/local_cpus", format_cpumask(cpus, _nr_cpu_ids(host, cpus)))
    irqs = list(msi_irqs)
    host.write(f"{rel_dir}/irq", str(irqs[0] if irqs else 0))
    for irq in irqs:
        host.write(f"{rel_dir}/msi_irqs/{irq}", "msix")
    host.symlink(f"sys/bus/pci/devices/{address}", f"../../../devices/{root_bus}/{address}")
    return host.path(rel_dir)


def add_gpu(
    host: FakeHost,
    pci_address: str,
    *,
    numa_node: int | None,
    local_cpus: Iterable[int] | str | None,
    uuid: str | None = None,
    model: str = "NVIDIA H100 80GB HBM3",
    nvidia_proc: bool = True,
    device_id: str = "0x2330",
    class_code: str = CLASS_3D_CONTROLLER,
    minor: int | None = None,
    msi_irqs: Iterable[int] = (),
) -> FakeGpu:
    """Write an NVIDIA GPU at ``pci_address`` (``0000:18:00.0``).

    ``numa_node`` None means the kernel reports ``-1``; ``local_cpus`` as in ``add_pci_device``. ``uuid`` None
    derives a stable one from the address (``fake_uuid``). ``nvidia_proc`` False leaves out the driver's procfs
    entry (nvidia module not loaded: UUID and model unknown). ``minor`` is the ``Device Minor`` line (default: the
    number of GPUs already in proc/driver/nvidia/gpus).
    """
    address = pci_address.lower()
    gpu_uuid = uuid if uuid is not None else fake_uuid(address)
    irqs = list(msi_irqs)
    device_dir = add_pci_device(
        host,
        address,
        vendor_id=NVIDIA,
        device_id=device_id,
        class_code=class_code,
        numa_node=numa_node,
        local_cpus=local_cpus,
        msi_irqs=irqs,
    )
    if nvidia_proc:
        gpus_dir = host.path("proc/driver/nvidia/gpus")
        if minor is None:
            minor = len(list(gpus_dir.iterdir())) if gpus_dir.is_dir() else 0
        host.write(
            f"proc/driver/nvidia/gpus/{address}/information",
            f"Model: \t\t {model}\n"
            f"IRQ:   \t\t {irqs[0] if irqs else 0}\n"
            f"GPU UUID: \t {gpu_uuid}\n"
            "Video BIOS: \t 96.00.74.00.0d\n"
            "Bus Type: \t PCIe\n"
            "DMA Size: \t 52 bits\n"
            "DMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {address}\n"
            f"Device Minor: \t {minor}\n"
            "GPU Excluded:\t No\n",
        )
    if local_cpus is None:
        cpus = None
    else:
        cpus = parse_cpulist(local_cpus) if isinstance(local_cpus, str) else frozenset(local_cpus)
    return FakeGpu(address, gpu_uuid, model, numa_node, cpus, device_dir)
