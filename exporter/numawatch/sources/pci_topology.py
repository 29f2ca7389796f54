"""The PCI hierarchy: under which host bridge, root port and switch each PCI function sits, and the RDMA NICs.

Files read (every path from ``Paths``):

- the ``sys/bus/pci/devices`` listing, and each entry's link resolved inside the host root (``Paths.resolve``). The
  link's target is the function's place in the hierarchy, as the kernel builds ``sys/devices``:
  ``devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0`` is a function under host bridge
  ``pci0000:17`` (the root complex), behind root port ``17:01.0`` and the two ports of a PCIe switch (upstream
  ``18:00.0``, downstream ``19:00.0``). Every PCI function between the host bridge and the device is a bridge; a
  ``pciDDDD:BB`` deeper in the path (an Intel VMD domain) is a host bridge of its own and counts as one of them.
  Components before the first ``pciDDDD:BB`` (ACPI or Hyper-V VMBus parents) are not PCI and are skipped;
- each function's ``class`` (24 bits, ``0x020700`` InfiniBand, ``0x020000`` Ethernet, ``0x060400`` PCI bridge);
- ``sys/class/infiniband/<name>/device``, a link to the PCI function of each RDMA device (``mlx5_0``): Ethernet NICs
  with RoCE and InfiniBand HCAs with their driver loaded. A function of class 0x0207 is an RDMA NIC without it too;
- for each RDMA NIC, ``numa_node`` (``-1`` unknown) and whether it has a ``physfn`` link (an SR-IOV virtual function).

hwloc builds the same hierarchy from the bridges' configuration space (secondary and subordinate bus numbers); the
two agree on every tree of the corpus and of the fake-host builder (tests/test_pci_oracle.py).

The hierarchy changes only when a PCI function comes or goes (hotplug, SR-IOV, a driver binding an RDMA device), so
the fingerprint is the two listings and each RDMA device's ``numa_node`` (which an administrator may rewrite), and
the ~2 system calls per function of a reading are paid only then.

Essential: the ``sys/bus/pci/devices`` listing. Optional, per function: a link that does not resolve into
``sys/devices/pci*`` or a malformed ``class`` leaves that function out (or its class unknown), named in ``problems``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Hashable
from pathlib import Path

from numawatch.confined import HostFs
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.model import frozen_map
from numawatch.model.pci import PciFunction, PciTopology, RdmaNic
from numawatch.paths import Paths
from numawatch.source import SourceSpec
from numawatch.sources.gpus_sysfs import parse_class, parse_numa_node, pci_sort_key

BDF = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}\Z")
RDMA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
CLASS_INFINIBAND = 0x02_07  # base class 0x02 (network), subclass 0x07

_ATTRIBUTE_LIMIT = 4096


def place(relative: str, address: str) -> tuple[str, tuple[str, ...]] | None:
    """(host bridge, bridges from the top down) of a function from its path under ``sys/devices``; None when the
    path is not a PCI function's under a host bridge, or does not end with ``address``."""
    parts = [part for part in relative.split("/") if part]
    if not parts or parts[-1] != address:
        return None
    start = next((i for i, part in enumerate(parts) if HOST_BRIDGE.match(part)), None)
    if start is None:
        return None
    above = parts[start + 1 : -1]
    if not all(BDF.match(part) or HOST_BRIDGE.match(part) for part in above):
        return None
    return parts[start], tuple(above)


def _relative(paths: Paths, resolved: Path, devices_root: str) -> str | None:
    text = os.fspath(resolved)
    if not text.startswith(devices_root + "/"):
        return None
    return text[len(devices_root) + 1 :]


def _devices_root(paths: Paths) -> str:
    try:
        return os.fspath(paths.resolve(paths.sysfs / "devices"))
    except OSError:
        return os.fspath(paths.sysfs / "devices")


def _rdma_devices(paths: Paths, problems: list[str]) -> dict[str, list[str]]:
    """PCI address -> names of its RDMA devices, from ``sys/class/infiniband/*/device``."""
    found: dict[str, list[str]] = {}
    directory = paths.sysfs / "class/infiniband"
    for name in sorted(paths.fs.list_dir(directory)):
        if not RDMA_NAME.match(name):
            problems.append(f"{directory}: an entry whose name is not an RDMA device name was skipped")
            continue
        try:
            target = paths.resolve(directory / name / "device")
        except OSError:
            continue
        address = target.name
        if BDF.match(address):
            found.setdefault(address, []).append(name)
    return found


def _attribute(fs: HostFs, path: Path, parse: Callable[[str], int | None], problems: list[str]) -> int | None:
    """A function's optional attribute parsed; None when absent, and when malformed (noted in ``problems``)."""
    text = fs.read_optional_text(path, _ATTRIBUTE_LIMIT)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as error:
        problems.append(str(MalformedFile(path, str(error))))
        return None


def read(paths: Paths) -> PciTopology:
    devices_dir = paths.sysfs / "bus/pci/devices"
    if not paths.fs.is_dir(devices_dir):
        raise SourceUnavailable(f"{devices_dir} does not exist")
    devices_root = _devices_root(paths)
    problems: list[str] = []
    functions: dict[str, PciFunction] = {}
    directories: dict[str, Path] = {}
    for address in sorted(paths.fs.list_dir(devices_dir), key=pci_sort_key):
        if not BDF.match(address):
            problems.append(f"{devices_dir}: an entry that is not a PCI address was skipped")
            continue
        try:
            resolved = paths.resolve(devices_dir / address)
        except OSError:  # a link loop in a captured tree: not a function we can place
            problems.append(f"{devices_dir / address}: the link does not resolve")
            continue
        relative = _relative(paths, resolved, devices_root)
        placed = place(relative, address) if relative is not None else None
        if placed is None:
            problems.append(f"{devices_dir / address}: the link does not lead to a PCI function under a host bridge")
            continue
        class_code = _attribute(paths.fs, resolved / "class", parse_class, problems)
        root, parents = placed
        functions[address] = PciFunction(address=address, root=root, parents=parents, class_code=class_code)
        directories[address] = resolved
    rdma = _rdma_devices(paths, problems)
    nics = []
    for address, function in functions.items():
        names = rdma.get(address)
        infiniband = function.class_code is not None and function.class_code >> 8 == CLASS_INFINIBAND
        if not names and not infiniband:
            continue
        directory = directories[address]
        numa_node = _attribute(paths.fs, directory / "numa_node", parse_numa_node, problems)
        nics.append(
            RdmaNic(
                address=address,
                rdma_devices=tuple(sorted(names or ())),
                numa_node=numa_node,
                virtual=os.path.islink(directory / "physfn"),
            )
        )
    return PciTopology(functions=frozen_map(functions), nics=tuple(nics), problems=tuple(problems[:64]))


def fingerprint(paths: Paths) -> Hashable:
    """The ``sys/bus/pci/devices`` and ``sys/class/infiniband`` listings, and each RDMA device's ``numa_node`` (its
    links resolved inside the host root, as ``read`` does: a captured tree's absolute link must not reach this
    machine's /sys)."""
    sysfs = os.fspath(paths.sysfs)  # strings, not pathlib: this runs at every reading
    root = f"{sysfs}/class/infiniband"
    found: list[tuple[str, str | None]] = []
    for name in sorted(paths.fs.list_dir(root)):
        # Opened through the device link: the Paths' HostFs follows it inside the host root as ``paths.resolve``
        # does, in one call instead of a walk per link. A link that does not resolve reads as unknown.
        try:
            text = paths.fs.read_attribute_text(f"{root}/{name}/device/numa_node", 64)
        except OSError:
            text = None
        found.append((name, text))
    return tuple(sorted(paths.fs.list_dir(f"{sysfs}/bus/pci/devices"))), tuple(found)


SOURCE = SourceSpec(
    name="pci_topology",
    read=read,
    fingerprint=fingerprint,
    description="the PCI hierarchy (host bridges, root ports, switches) and the RDMA-capable NICs",
)

__all__ = ["BDF", "CLASS_INFINIBAND", "SOURCE", "fingerprint", "place", "read"]
