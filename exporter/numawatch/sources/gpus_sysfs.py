"""NVIDIA GPUs on the PCI bus and their NUMA locality, from sysfs (no NVML needed).

Files read (every path from ``Paths``), per PCI function under ``sys/bus/pci/devices/<DDDD:BB:DD.F>/``
(Documentation/ABI/testing/sysfs-bus-pci):

- ``vendor`` (``0x10de`` for NVIDIA), ``device`` (``0x2330``), ``class`` (24 bits: ``0x030200`` 3D controller, the
  usual data-centre GPU, or ``0x030000`` VGA; NVIDIA's audio, USB and NVSwitch functions have other classes);
- ``numa_node``: decimal, ``-1`` when firmware gave no proximity (_PXM) — common in VMs and with NUMA-per-socket
  off in the BIOS; reported as None ("unknown"), which a check must not confuse with node 0;
- ``local_cpulist``: the CPUs near the device (``0-55,112-167``).

And ``proc/driver/nvidia/gpus/<bdf>/information`` (present only with the nvidia module loaded)::

    Model:           NVIDIA H100 80GB HBM3
    IRQ:             137
    GPU UUID:        GPU-5c3b2f1e-8d7a-4b6c-9e0f-1a2b3c4d5e6f
    ...
    Bus Location:    0000:18:00.0
    Device Minor:    0

The entries of ``sys/bus/pci/devices`` are relative symlinks into ``sys/devices/pci*``. They are resolved with
``Paths.resolve`` and every attribute is read with the confined opener, so a captured tree with an absolute link
(``/sys/devices/...``), or an attribute that is itself a link, is read inside the host root, never from this
machine's own /sys.

Essential: the ``sys/bus/pci/devices`` listing. Optional, per function: a ``class`` that cannot be parsed leaves the
function out (``GpuInventory.problems``); a malformed ``numa_node`` or ``local_cpulist`` leaves that value unknown
(``GpuDevice.problems``), which is not the kernel's -1.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from numawatch import confined
from numawatch.cpuset import parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.hosttext import checked, printable, strip_value
from numawatch.model import GpuDevice, GpuInventory, frozen_map
from numawatch.paths import Paths
from numawatch.sources._files import list_dir, read_optional_text

NVIDIA_VENDOR = "0x10de"
# The top 16 bits of the PCI class: base class 0x03 (display), subclass 0x00 (VGA) or 0x02 (3D controller).
GPU_CLASSES = frozenset({0x0300, 0x0302})

T = TypeVar("T")

_ATTRIBUTE_LIMIT = 1 << 16  # sysfs attributes are at most one page; anything bigger is not a sysfs file

# A PCI function as sysfs names it (``DDDD:BB:DD.F``; VMD domains have 5 hex digits): the ``gpu`` label.
PCI_ADDRESS = re.compile(r"[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_GPU_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_MODEL_LIMIT = 96  # the driver's model names are a few words ("NVIDIA H100 80GB HBM3")


def parse_numa_node(text: str) -> int | None:
    """``numa_node``: a node number, or None for ``-1`` (unknown). Raise ValueError on anything else."""
    stripped = strip_value(text)
    try:
        node = int(stripped)
    except ValueError:
        raise ValueError(f"expected a NUMA node number or -1, got {stripped[:60]!r}") from None
    if node == -1:
        return None
    if node < 0:
        raise ValueError(f"expected a NUMA node number or -1, got {stripped[:60]!r}")
    return node


def parse_class(text: str) -> int:
    """``class``: ``0x030200`` -> 0x030200. Raise ValueError on anything else."""
    stripped = strip_value(text)
    digits = stripped[2:] if stripped[:2].lower() == "0x" else ""
    if not digits or not digits.isascii() or digits.strip("0123456789abcdefABCDEF"):
        raise ValueError(f"expected a hex PCI class such as 0x030200, got {stripped[:60]!r}")
    return int(digits, 16)


def is_gpu_class(class_code: int) -> bool:
    return (class_code >> 8) in GPU_CLASSES


def pci_sort_key(address: str) -> tuple[int, ...] | tuple[int, str]:
    """Numeric order of ``DDDD:BB:DD.F`` (VMD domains have 5 hex digits, so plain string order is not enough)."""
    try:
        return tuple(int(part, 16) for part in address.replace(".", ":").split(":"))
    except ValueError:
        return (1 << 32, address)


def parse_nvidia_information(text: str) -> dict[str, str]:
    """``proc/driver/nvidia/gpus/<bdf>/information`` -> {"Model": ..., "GPU UUID": ...}.

    Lines are ``Name: value`` with tabs and spaces in between; lines without a colon are ignored, a value of the
    form ``??`` is kept as the driver wrote it.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip():
            fields[name.strip()] = value.strip()
    return fields


def _attribute(path: Path) -> str | None:
    return read_optional_text(path, _ATTRIBUTE_LIMIT)


def _parsed(
    path: Path, parse: Callable[[str], T], text: str | None, problems: list[str] | dict[str, str]
) -> T | None:
    """The attribute's value; None when absent, or when malformed (then described in ``problems``: appended to a
    list, or under the file's name in a dict)."""
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as error:
        line = str(MalformedFile(path, str(error)))
        if isinstance(problems, dict):
            problems[path.name] = line
        else:
            problems.append(line)
        return None


def _driver_info(paths: Paths, address: str) -> Mapping[str, str]:
    path = paths.procfs / "driver/nvidia/gpus" / address / "information"
    text = read_optional_text(path, _ATTRIBUTE_LIMIT)
    if text is None:
        return {}
    fields = parse_nvidia_information(text)
    # Both become label values (numawatch_gpu_info's uuid and model): only what the driver prints.
    uuid, model = fields.get("GPU UUID"), fields.get("Model")
    try:
        if uuid:
            checked(uuid, _GPU_UUID, "GPU UUID")
        if model:
            printable(model, "Model", _MODEL_LIMIT)
    except ValueError as error:
        raise MalformedFile(path, str(error)) from None
    return fields


def _read_device(paths: Paths, address: str, directory: Path, skipped: list[str]) -> GpuDevice | None:
    """The GPU at ``directory``, or None when it is not an NVIDIA GPU, vanished (hot unplug) during the scan, or has
    a class that cannot be parsed (then described in ``skipped``)."""
    vendor = _attribute(directory / "vendor")
    if vendor is None or strip_value(vendor).lower() != NVIDIA_VENDOR:
        return None
    class_code = _parsed(directory / "class", parse_class, _attribute(directory / "class"), skipped)
    if class_code is None or not is_gpu_class(class_code):
        return None
    problems: dict[str, str] = {}
    # Without CONFIG_NUMA numa_node is absent: the locality is as unknown as with -1.
    numa_node = _parsed(directory / "numa_node", parse_numa_node, _attribute(directory / "numa_node"), problems)
    local_cpus = _parsed(directory / "local_cpulist", parse_cpulist, _attribute(directory / "local_cpulist"), problems)
    device = _attribute(directory / "device")
    info = _driver_info(paths, address)
    return GpuDevice(
        pci_address=address,
        numa_node=numa_node,
        local_cpus=local_cpus,
        vendor_id=NVIDIA_VENDOR,
        device_id=strip_value(device).lower() if device is not None else "",
        class_code=f"0x{class_code:06x}",
        uuid=info.get("GPU UUID") or None,
        model=info.get("Model") or None,
        problems=frozen_map(problems),
    )


def read(paths: Paths) -> GpuInventory:
    """Every NVIDIA GPU function on the PCI bus, sorted by PCI address. No GPU at all is an empty inventory."""
    devices_dir = paths.sysfs / "bus/pci/devices"
    if not confined.is_dir(devices_dir):
        raise SourceUnavailable(f"{devices_dir} does not exist")
    gpus = []
    skipped: list[str] = []
    for address in sorted(list_dir(devices_dir), key=pci_sort_key):
        if PCI_ADDRESS.fullmatch(address) is None:
            continue  # not a PCI function's name: nothing sysfs would list (and it would become a label)
        # The device's own directory (errors name it); resolved, and then read, inside the root (confined.py).
        try:
            directory = paths.resolve(devices_dir / address)
        except OSError:  # a link loop in a captured tree: not a device we can read
            continue
        gpu = _read_device(paths, address, directory, skipped)
        if gpu is not None:
            gpus.append(gpu)
    return GpuInventory(gpus=tuple(gpus), problems=tuple(skipped))


def fingerprint(paths: Paths) -> tuple[tuple[str, ...], tuple[tuple[str, str | None], ...]]:
    """The entries of ``sys/bus/pci/devices``, and each GPU of ``proc/driver/nvidia/gpus`` with its ``numa_node``.

    What this source reads is fixed for a PCI function's lifetime (IDs, class, ``local_cpulist``) or for the
    driver's (UUID, model), so a function coming or going (hotplug, a VF, the driver loading) changes the result —
    and ``numa_node``, which the kernel lets an administrator rewrite to correct firmware that reports -1 (the very
    fix for a ``gpu_numa_unknown`` finding), so it is part of the fingerprint for the driver's GPUs: two listings and
    one small read per GPU instead of resolving ~20 device links and reading ~50 attributes every 15 s.
    """
    devices = paths.sysfs / "bus/pci/devices"
    gpus = sorted(list_dir(paths.procfs / "driver/nvidia/gpus"))
    return (
        tuple(sorted(list_dir(devices))),
        tuple((gpu, read_optional_text(devices / gpu / "numa_node", 64)) for gpu in gpus),
    )


SOURCE = SourceSpec(
    name="gpus_sysfs",
    read=read,
    fingerprint=fingerprint,
    description="NVIDIA GPUs on the PCI bus with their NUMA node and local CPUs (sysfs, /proc/driver/nvidia)",
)

__all__ = [
    "GPU_CLASSES",
    "NVIDIA_VENDOR",
    "SOURCE",
    "fingerprint",
    "is_gpu_class",
    "parse_class",
    "parse_numa_node",
    "parse_nvidia_information",
    "pci_sort_key",
    "read",
]
