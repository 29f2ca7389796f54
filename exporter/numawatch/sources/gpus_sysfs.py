"""Accelerators on the PCI bus (NVIDIA and AMD GPUs, Intel Gaudi) and their NUMA locality, from sysfs (no vendor
library needed).

Which functions are accelerators (``VENDORS``; docs/gpu.md "Vendors" has the table with its sources): the PCI
vendor ID and the top 16 bits of the class code, from the PCI ID database (pci.ids) and the drivers' ID tables:

- NVIDIA ``0x10de``: ``0x0302`` 3D controller (data-centre GPUs) or ``0x0300`` VGA; NVIDIA's audio, USB and
  NVSwitch functions have other classes;
- AMD ``0x1002`` (the former ATI ID, which amdgpu binds; AMD's CPUs' functions are ``0x1022``): ``0x0380`` display
  controller (Instinct MI100/MI200), ``0x1200`` processing accelerator (Instinct MI300), ``0x0302`` 3D controller,
  and ``0x0300`` VGA only when bound to amdgpu (a Radeon card): a server's on-board ATI VGA (ES1000, driven by
  ``radeon`` or nothing) is not an accelerator; the cards' HDMI audio functions (``0x0403``) are left out;
- Habana Labs (Intel Gaudi) ``0x1da3``: ``0x1200`` processing accelerator.

Files read (every path from ``Paths``), per PCI function under ``sys/bus/pci/devices/<DDDD:BB:DD.F>/``
(Documentation/ABI/testing/sysfs-bus-pci):

- ``vendor``, ``device`` (``0x2330``), ``class`` (24 bits, ``0x030200``);
- ``numa_node``: decimal, ``-1`` when firmware gave no proximity (_PXM) — common in VMs and with NUMA-per-socket
  off in the BIOS; reported as None ("unknown"), which a check must not confuse with node 0. An absent file (a
  kernel or a capture without it, as on POWER9 with NVLink-attached GPUs) is unknown too, and named in
  ``GpuDevice.problems``, never read as -1;
- ``local_cpulist``: the CPUs near the device (``0-55,112-167``); without it the ``local_cpus`` hex mask.

Then the driver's own description, where its module is loaded (absent: stable id and model unknown):

- AMD (amdgpu, Documentation/gpu/amdgpu/driver-misc.rst): ``unique_id`` (16 hex digits, on Instinct parts) and
  ``product_name`` (from the board's FRU) in the function's directory; without ``unique_id``, the KFD topology
  (``sys/class/kfd/kfd/topology/nodes/<n>/properties``, drivers/gpu/drm/amd/amdkfd/kfd_topology.c), whose GPU node
  for this function (``domain`` and ``location_id`` = bus << 8 | devfn) prints ``unique_id`` in decimal;
- Gaudi (habanalabs, Documentation/ABI/testing/sysfs-driver-habanalabs, where ``/sys/class/accel/accel<n>/device``
  is this function): ``serial_number`` and ``device_type`` (``GAUDI2``);
- NVIDIA: ``proc/driver/nvidia/gpus/<bdf>/information``::

    Model:           NVIDIA H100 80GB HBM3
    IRQ:             137
    GPU UUID:        GPU-5c3b2f1e-8d7a-4b6c-9e0f-1a2b3c4d5e6f
    ...
    Bus Location:    0000:18:00.0
    Device Minor:    0

The entries of ``sys/bus/pci/devices`` are relative symlinks into ``sys/devices/pci*``. They are resolved with
``Paths.resolve`` and every attribute is read through the Paths' HostFs, so a captured tree with an absolute link
(``/sys/devices/...``), or an attribute that is itself a link, is read inside the host root, never from this
machine's own /sys.

``GpuDevice.uuid`` is the device's stable id whichever the vendor: NVIDIA's ``GPU-<uuid>``, AMD's ``unique_id``,
Gaudi's serial number.

Essential: the ``sys/bus/pci/devices`` listing. Optional, per function: a ``class`` that cannot be parsed leaves the
function out (``GpuInventory.problems``); a malformed ``numa_node`` or ``local_cpulist`` leaves that value unknown
(``GpuDevice.problems``), which is not the kernel's -1. So does a driver attribute that is not what the driver
prints, or that cannot be read (NVIDIA's ``information``, AMD's ``unique_id`` and ``product_name`` or a KFD node's
``properties``, Gaudi's ``serial_number`` and ``device_type``): the device is kept with its stable id or model
unknown, the file named under ``problems[<file name>]``; it never takes the inventory down.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from numawatch.confined import HostFs
from numawatch.cpuset import parse_cpulist, parse_cpumask
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import checked, printable, strip_value
from numawatch.model import frozen_map
from numawatch.model.gpu import GpuDevice, GpuInventory
from numawatch.paths import Paths
from numawatch.source import SourceSpec

NVIDIA_VENDOR = "0x10de"
AMD_VENDOR = "0x1002"
HABANA_VENDOR = "0x1da3"
# The top 16 bits of the PCI class: base class 0x03 (display), subclass 0x00 (VGA) or 0x02 (3D controller).
GPU_CLASSES = frozenset({0x0300, 0x0302})
# Base class 0x03 subclass 0x80 (other display controller) and base class 0x12 (processing accelerator).
DISPLAY_OTHER_CLASS = 0x0380
PROCESSING_ACCELERATOR_CLASS = 0x1200


@dataclass(frozen=True)
class AcceleratorVendor:
    """A vendor whose PCI functions of ``classes`` are accelerators (``name`` is the ``vendor`` label)."""

    name: str
    vendor_id: str  # as sysfs prints it: "0x10de"
    classes: frozenset[int]  # top 16 bits of the class code


NVIDIA = AcceleratorVendor("nvidia", NVIDIA_VENDOR, GPU_CLASSES)
AMD = AcceleratorVendor("amd", AMD_VENDOR, GPU_CLASSES | {DISPLAY_OTHER_CLASS, PROCESSING_ACCELERATOR_CLASS})
HABANA = AcceleratorVendor("habana", HABANA_VENDOR, frozenset({PROCESSING_ACCELERATOR_CLASS}))
VENDORS: Mapping[str, AcceleratorVendor] = {v.vendor_id: v for v in (NVIDIA, AMD, HABANA)}
# Drivers whose bound functions' numa_node the fingerprint watches (an administrator may rewrite it).
_DRIVERS = ("amdgpu", "habanalabs")
_VGA_CLASS = 0x0300

T = TypeVar("T")

_ATTRIBUTE_LIMIT = 1 << 16  # sysfs attributes are at most one page; anything bigger is not a sysfs file

# A PCI function as sysfs names it (``DDDD:BB:DD.F``; VMD domains have 5 hex digits): the ``gpu`` label.
PCI_ADDRESS = re.compile(r"[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_GPU_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_AMD_UNIQUE_ID = re.compile(r"[0-9a-f]{1,16}")  # amdgpu prints %016llx
_HABANA_SERIAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # the board's serial number ("AN01234567")
_MODEL_LIMIT = 96  # the driver's model names are a few words ("NVIDIA H100 80GB HBM3")
_KFD_NODES = "class/kfd/kfd/topology/nodes"
# MI300 compute partitions: amdxcp's platform devices (drivers/gpu/drm/amd/amdxcp/amdgpu_xcp_drv.c), each with a DRM
# render node; ROCm's k8s-device-plugin registers them under these names (internal/pkg/amdgpu/amdgpu.go, GetAMDGPUs)
_PLATFORM = "devices/platform"
_XCP = re.compile(r"amdgpu_xcp_[0-9]{1,4}")
_RENDER = re.compile(r"renderD([0-9]{1,5})")
_XCP_LIMIT = 1024  # partitions read (8 GPUs x 8 partitions is far below)
_KFD_NODE_LIMIT = 256  # KFD nodes: one per CPU socket and one per GPU (or MI300 partition)


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
    """NVIDIA's GPU classes (VGA or 3D controller)."""
    return (class_code >> 8) in GPU_CLASSES


def accelerator_vendor(vendor_id: str, class_code: int) -> AcceleratorVendor | None:
    """The vendor when a function of ``vendor_id`` (``0x10de``, any case) and ``class_code`` is an accelerator."""
    vendor = VENDORS.get(vendor_id.lower())
    if vendor is None or (class_code >> 8) not in vendor.classes:
        return None
    return vendor


def parse_kfd_properties(text: str) -> dict[str, int]:
    """A KFD node's ``properties``: lines ``name value`` (decimal) -> {name: value}; other lines are ignored."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = strip_value(line).partition(" ")
        value = value.strip()
        if name and value.isascii() and value.isdigit():
            values[name] = int(value)
    return values


def kfd_pci_address(properties: Mapping[str, int]) -> str | None:
    """The PCI function of a KFD GPU node (``domain``, ``location_id`` = bus << 8 | devfn); None for a CPU node."""
    location, domain = properties.get("location_id"), properties.get("domain", 0)
    if not properties.get("simd_count") or location is None or location > 0xFFFF or domain > 0xFFFFF:
        return None
    bus, devfn = location >> 8, location & 0xFF
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"


@dataclass(frozen=True)
class KfdIds:
    """What the KFD topology says of the AMD GPUs' ids: PCI address -> ``unique_id``, and the nodes whose
    ``properties`` could not be read (one line each: an AMD GPU without its own ``unique_id`` names them)."""

    ids: Mapping[str, str]
    problems: tuple[str, ...] = ()
    # DRM render minor (``drm_render_minor``) -> the PCI function KFD places that node at: on an MI300 in a compute
    # partition mode one node per partition, with the partition's number in the function bits of ``location_id``
    # (kfd_topology.c ORs the node id into it for GC 9.4.3)
    render_minors: Mapping[int, str] = field(default_factory=frozen_map)


def _kfd_unique_ids(paths: Paths) -> KfdIds:
    """PCI address -> ``unique_id`` (as amdgpu spells it: 16 hex digits) of every KFD GPU node that has one.

    An MI300 in a compute partition mode has one KFD node per partition, all at the same PCI function and with the
    same ``unique_id``; the first wins. A node whose ``properties`` cannot be read is left out and named.
    """
    nodes = paths.sysfs / _KFD_NODES
    found: dict[str, str] = {}
    minors: dict[int, str] = {}
    problems: list[str] = []
    try:
        names = paths.fs.list_dir(nodes)
    except OSError as error:
        return KfdIds({}, (f"{nodes}: {error.strerror or error}",))
    for name in sorted(names, key=lambda n: (len(n), n))[:_KFD_NODE_LIMIT]:
        if not name.isdigit():
            continue
        path = nodes / name / "properties"
        try:
            text = paths.fs.read_optional_text(path, _ATTRIBUTE_LIMIT)
        except MalformedFile as error:
            problems.append(str(error))
            continue
        except OSError as error:
            problems.append(f"{path}: {error.strerror or error}")
            continue
        if text is None:
            continue
        properties = parse_kfd_properties(text)
        address, unique = kfd_pci_address(properties), properties.get("unique_id")
        if address is not None and unique and unique < 1 << 64:
            found.setdefault(address, f"{unique:016x}")
        minor = properties.get("drm_render_minor")
        if address is not None and minor:
            minors.setdefault(minor, address)
    return KfdIds(found, tuple(problems), frozen_map(minors))


def _partition_parents(paths: Paths, kfd: KfdIds, amd: Mapping[str, GpuDevice]) -> dict[str, str]:
    """MI300 partition name (``amdgpu_xcp_<n>``) -> the PCI address of the AMD GPU it is part of: the partition's
    render node (``sys/devices/platform/amdgpu_xcp_<n>/drm/renderD<minor>``), the KFD node with that
    ``drm_render_minor``, its PCI function (function 0 of that device when KFD's function bits carry the
    partition's number). A partition that leads nowhere in the inventory is left out."""
    platform = paths.sysfs / _PLATFORM
    parents: dict[str, str] = {}
    names = sorted((name for name in paths.fs.list_dir(platform) if _XCP.fullmatch(name)), key=lambda n: (len(n), n))
    for name in names[:_XCP_LIMIT]:
        try:
            entries = paths.fs.list_dir(platform / name / "drm")
        except OSError:
            continue
        for entry in entries:
            match = _RENDER.fullmatch(entry)
            address = kfd.render_minors.get(int(match.group(1))) if match else None
            if address is None:
                continue
            for candidate in (address, address[:-1] + "0"):
                if candidate in amd:
                    parents[name] = candidate
                    break
            if name in parents:
                break
    return parents



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


def _attribute(fs: HostFs, path: Path) -> str | None:
    return fs.read_optional_text(path, _ATTRIBUTE_LIMIT)


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


def _read_attribute(fs: HostFs, path: Path, problems: dict[str, str]) -> str | None:
    """A driver's file: None when absent, or when unreadable (then named in ``problems`` under its file name)."""
    try:
        return _attribute(fs, path)
    except MalformedFile as error:
        problems[path.name] = str(error)
    except OSError as error:  # unreadable (EIO from a wedged device, EACCES): this device's value is unknown
        problems[path.name] = f"{path}: {error.strerror or error}"
    return None


def _driver_info(paths: Paths, address: str, problems: dict[str, str]) -> Mapping[str, str]:
    path = paths.procfs / "driver/nvidia/gpus" / address / "information"
    text = _read_attribute(paths.fs, path, problems)
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
        problems[path.name] = str(MalformedFile(path, str(error)))
        return {}
    return fields


def _driver_name(fs: HostFs, directory: Path) -> str | None:
    """The name of the driver bound to the function (its ``driver`` link's last component); None when unbound."""
    try:
        target = fs.readlink(directory / "driver")
    except OSError:
        return None
    return target.rstrip("/").rpartition("/")[2] or None


def _driver_attribute(
    fs: HostFs, directory: Path, name: str, pattern: re.Pattern[str] | None, problems: dict[str, str]
) -> str | None:
    """A driver's attribute in the function's directory: None when absent or empty, and when unreadable or not what
    the driver prints (``pattern``, else printable text of a model name's length): then named in ``problems``."""
    text = _read_attribute(fs, directory / name, problems)
    value = strip_value(text) if text is not None else ""
    if not value:
        return None
    try:
        return checked(value, pattern, name) if pattern is not None else printable(value, name, _MODEL_LIMIT)
    except ValueError as error:
        problems[name] = str(MalformedFile(directory / name, str(error)))
        return None


def _identity(
    paths: Paths,
    vendor: AcceleratorVendor,
    address: str,
    directory: Path,
    kfd: Callable[[], KfdIds],
    problems: dict[str, str],
) -> tuple[str | None, str | None]:
    """(stable id, model) as the vendor's driver gives them; (None, None) without the driver. A driver file that
    cannot be read or is malformed leaves its value unknown, named in ``problems``."""
    if vendor is NVIDIA:
        info = _driver_info(paths, address, problems)
        return info.get("GPU UUID") or None, info.get("Model") or None
    if vendor is AMD:
        unique = _driver_attribute(paths.fs, directory, "unique_id", _AMD_UNIQUE_ID, problems)
        if unique is None and "unique_id" not in problems:
            topology = kfd()
            unique = topology.ids.get(address)
            if unique is None and topology.problems:
                problems["unique_id"] = topology.problems[0]  # its KFD node may be the one that could not be read
        return unique, _driver_attribute(paths.fs, directory, "product_name", None, problems)
    return _driver_attribute(paths.fs, directory, "serial_number", _HABANA_SERIAL, problems), _driver_attribute(
        paths.fs, directory, "device_type", None, problems
    )


def _read_device(
    paths: Paths, address: str, directory: Path, skipped: list[str], kfd: Callable[[], KfdIds]
) -> GpuDevice | None:
    """The accelerator at ``directory``, or None when it is not one, vanished (hot unplug) during the scan, or has
    a class that cannot be parsed (then described in ``skipped``)."""
    fs = paths.fs
    vendor_text = _attribute(fs, directory / "vendor")
    vendor_id = strip_value(vendor_text).lower() if vendor_text is not None else ""
    if vendor_id not in VENDORS:
        return None
    class_code = _parsed(directory / "class", parse_class, _attribute(fs, directory / "class"), skipped)
    vendor = accelerator_vendor(vendor_id, class_code) if class_code is not None else None
    if vendor is None or class_code is None:
        return None
    if vendor is AMD and class_code >> 8 == _VGA_CLASS and _driver_name(fs, directory) != "amdgpu":
        return None
    problems: dict[str, str] = {}
    numa_text = _attribute(fs, directory / "numa_node")
    numa_node = _parsed(directory / "numa_node", parse_numa_node, numa_text, problems)
    if numa_text is None:
        # An absent file is not the kernel's -1: the node is unknown (GpuDevice.cpu_node takes it from local_cpus
        # where those lie on one node: POWER9's NVLink GPUs have only the mask).
        problems["numa_node"] = f"{directory / 'numa_node'}: missing"
    cpulist_text = _attribute(fs, directory / "local_cpulist")
    if cpulist_text is not None:
        local_cpus = _parsed(directory / "local_cpulist", parse_cpulist, cpulist_text, problems)
    else:
        mask = _parsed(directory / "local_cpus", parse_cpumask, _attribute(fs, directory / "local_cpus"), problems)
        if "local_cpus" in problems:
            problems["local_cpulist"] = problems.pop("local_cpus")
        local_cpus = mask
    device = _attribute(fs, directory / "device")
    stable_id, model = _identity(paths, vendor, address, directory, kfd, problems)
    return GpuDevice(
        pci_address=address,
        numa_node=numa_node,
        local_cpus=local_cpus,
        vendor_id=vendor.vendor_id,
        device_id=strip_value(device).lower() if device is not None else "",
        class_code=f"0x{class_code:06x}",
        uuid=stable_id,
        model=model,
        problems=frozen_map(problems),
        vendor=vendor.name,
    )


def read(paths: Paths) -> GpuInventory:
    """Every accelerator function on the PCI bus, sorted by PCI address. None at all is an empty inventory."""
    devices_dir = paths.sysfs / "bus/pci/devices"
    if not paths.fs.is_dir(devices_dir):
        raise SourceUnavailable(f"{devices_dir} does not exist")
    gpus = []
    skipped: list[str] = []
    kfd_ids: list[KfdIds] = []  # read once, on the first AMD GPU without its own unique_id

    def kfd() -> KfdIds:
        if not kfd_ids:
            kfd_ids.append(_kfd_unique_ids(paths))
        return kfd_ids[0]

    for address in sorted(paths.fs.list_dir(devices_dir), key=pci_sort_key):
        if PCI_ADDRESS.fullmatch(address) is None:
            continue  # not a PCI function's name: nothing sysfs would list (and it would become a label)
        # The device's own directory (errors name it); resolved, and then read, inside the root (paths.fs).
        try:
            directory = paths.resolve(devices_dir / address)
        except OSError:  # a link loop in a captured tree: not a device we can read
            continue
        gpu = _read_device(paths, address, directory, skipped, kfd)
        if gpu is not None:
            gpus.append(gpu)
    amd = {gpu.pci_address: gpu for gpu in gpus if gpu.vendor == AMD.name}
    partitions = _partition_parents(paths, kfd(), amd) if amd else {}
    return GpuInventory(gpus=tuple(gpus), problems=tuple(skipped), partitions=frozen_map(partitions))


def fingerprint(paths: Paths) -> tuple[tuple[str, ...], tuple[tuple[str, str | None], ...]]:
    """The entries of ``sys/bus/pci/devices``, and each GPU of ``proc/driver/nvidia/gpus`` and each function bound to
    amdgpu or habanalabs (``sys/bus/pci/drivers/<driver>/<bdf>``) with its ``numa_node``.

    What this source reads is fixed for a PCI function's lifetime (IDs, class, ``local_cpulist``) or for the
    driver's (UUID, model), so a function coming or going (hotplug, a VF, the driver loading) changes the result —
    and ``numa_node``, which the kernel lets an administrator rewrite to correct firmware that reports -1 (the very
    fix for a ``gpu_numa_unknown`` finding), so it is part of the fingerprint for the driver's GPUs: two listings and
    one small read per GPU instead of resolving ~20 device links and reading ~50 attributes every 15 s.
    """
    sysfs = os.fspath(paths.sysfs)  # strings, not pathlib: this runs at every reading
    devices = f"{sysfs}/bus/pci/devices"
    bound = paths.fs.list_dir(f"{os.fspath(paths.procfs)}/driver/nvidia/gpus")
    for driver in _DRIVERS:
        bound += paths.fs.list_dir(f"{sysfs}/bus/pci/drivers/{driver}")
    gpus = sorted(name for name in set(bound) if PCI_ADDRESS.fullmatch(name))
    # MI300 partitions come and go with a compute partition mode change, which adds no PCI function
    partitions = tuple(sorted(name for name in paths.fs.list_dir(f"{sysfs}/{_PLATFORM}") if _XCP.fullmatch(name)))
    return (
        (*sorted(paths.fs.list_dir(devices)), *partitions),
        tuple((gpu, paths.fs.read_attribute_text(f"{devices}/{gpu}/numa_node", 64)) for gpu in gpus),
    )


SOURCE = SourceSpec(
    name="gpus_sysfs",
    read=read,
    fingerprint=fingerprint,
    description="NVIDIA and AMD GPUs and Gaudi accelerators on the PCI bus with their NUMA node, local CPUs and "
    "stable id (sysfs, /proc/driver/nvidia, the KFD topology)",
)

__all__ = [
    "AMD",
    "AMD_VENDOR",
    "GPU_CLASSES",
    "HABANA",
    "HABANA_VENDOR",
    "NVIDIA",
    "NVIDIA_VENDOR",
    "SOURCE",
    "VENDORS",
    "AcceleratorVendor",
    "accelerator_vendor",
    "fingerprint",
    "is_gpu_class",
    "kfd_pci_address",
    "parse_class",
    "parse_kfd_properties",
    "parse_numa_node",
    "parse_nvidia_information",
    "pci_sort_key",
    "read",
]
