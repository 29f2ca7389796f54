"""hwloc as the oracle of the PCI hierarchy: where each PCI function hangs, read by hwloc and by numawatch.

hwloc (``lstopo-no-graphics --input DIR --whole-io --of xml``, the Linux backend of hwloc 2.9) does not look at the
nesting of ``sys/devices`` at all: it reads each function's ``config`` file and builds the tree from bus numbers. A
function is a bridge when its class is 0x0604 (PCI-to-PCI) and its configuration header is of type 1; a bridge
takes the functions on the buses from its secondary to its subordinate bus; what no bridge takes goes under a host
bridge per PCI domain and bus (``bridge_pci="0000:[15-19]"``: domain 0, buses 0x15 to 0x19). numawatch reads the
nesting of the resolved ``sys/bus/pci/devices`` links instead (sources/pci_topology.py), so agreeing means the two
independent descriptions of one machine say the same thing.

Two limits of hwloc's reading, applied to numawatch's side from the tree's raw ``config`` files so that a tree is
compared on what hwloc can know:

- a bridge without a readable ``config`` (the QEMU captures copied attributes only) is an ordinary device to hwloc,
  and what is behind it starts a host bridge of its own at its bus (``hwloc_view``; such functions count as ``cut``);
- a bridge whose bus numbers are invalid (secondary or subordinate not above its own bus, or secondary above
  subordinate: a root port the firmware gave no bus, all zeros) is left out by hwloc altogether
  (``hwloc_pcidisc_find_bridge_buses`` fails and the Linux backend skips it; such functions count as ``dropped``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from hwloc_oracle import OracleError, lstopo_xml
from numawatch.model.pci import PciFunction, PciTopology
from numawatch.paths import Paths
from numawatch.sources import pci_topology

_RANGE = re.compile(r"([0-9a-f]{4,8}):\[([0-9a-f]{2})-([0-9a-f]{2})\]\Z")


@dataclass(frozen=True)
class Place:
    """Where a function hangs: its host bridge (``DDDD:BB``, the domain and first bus) and the bridges between the
    host bridge and it, from the top down."""

    host_bridge: str
    parents: tuple[str, ...]


def hwloc_places(xml: str) -> dict[str, Place]:
    """Every PCI function in hwloc's XML with its host bridge and parent bridges."""
    try:
        document = ElementTree.fromstring(xml)
    except ElementTree.ParseError as error:
        raise OracleError(f"hwloc printed XML that does not parse: {error}") from None
    places: dict[str, Place] = {}

    def walk(element: ElementTree.Element, host_bridge: str | None, parents: tuple[str, ...]) -> None:
        kind = element.get("type")
        busid = (element.get("pci_busid") or "").lower()
        if kind == "Bridge" and element.get("bridge_type", "").startswith("0-"):
            match = _RANGE.match((element.get("bridge_pci") or "").lower())
            if match is None:
                raise OracleError(f"a host bridge without a bus range: {element.attrib}")
            host_bridge, parents = f"{match.group(1)}:{match.group(2)}", ()
        elif kind in ("Bridge", "PCIDev") and busid:
            if host_bridge is None:
                raise OracleError(f"PCI function {busid} outside any host bridge")
            places[busid] = Place(host_bridge, parents)
            if kind == "Bridge":
                parents = (*parents, busid)
        for child in element:
            if child.tag == "object":
                walk(child, host_bridge, parents)

    for top in document:
        if top.tag == "object":
            walk(top, None, ())
    return places


def hwloc_bridge(root: Path, function: PciFunction) -> bool:
    """Whether hwloc takes ``function`` for a PCI-to-PCI bridge: class 0x0604 and a type 1 header in its config."""
    if function.class_code is None or function.class_code >> 8 != 0x0604:
        return False
    path = root / "sys/bus/pci/devices" / function.address / "config"
    try:
        header = path.read_bytes()[:0x40]
    except OSError:
        return False
    return len(header) > 0x0E and header[0x0E] & 0x7F == 0x01


def hwloc_drops(root: Path, function: PciFunction) -> bool:
    """Whether hwloc leaves ``function`` out: a bridge whose secondary/subordinate bus numbers are invalid."""
    if not hwloc_bridge(root, function):
        return False
    header = (root / "sys/bus/pci/devices" / function.address / "config").read_bytes()[:0x40]
    if len(header) <= 0x1A:
        return True
    bus = int(function.address.split(":")[1], 16)
    secondary, subordinate = header[0x19], header[0x1A]
    return secondary <= bus or subordinate <= bus or secondary > subordinate


def _bus_of(address: str) -> str:
    domain, bus, _ = address.split(":")
    return f"{domain}:{bus}"


def hwloc_view(root: Path, topology: PciTopology, function: PciFunction) -> tuple[Place, bool]:
    """numawatch's place of ``function`` as hwloc can see it, and whether a bridge without config cut it."""
    parents = function.parents
    cut = None
    for index, parent in enumerate(parents):
        known = topology.functions.get(parent)
        if known is None or not hwloc_bridge(root, known):
            cut = index
    if cut is None:
        host_bridge = function.root.removeprefix("pci")
        return Place(host_bridge, parents), False
    below = parents[cut + 1 :]
    return Place(_bus_of(below[0] if below else function.address), below), True


@dataclass(frozen=True)
class Comparison:
    differences: tuple[str, ...]
    compared: int  # functions whose place was compared
    cut: int  # of them, compared below a bridge hwloc cannot see (no config)
    dropped: int = 0  # functions hwloc leaves out (bridges with invalid bus numbers), checked to be absent there

    @property
    def equal(self) -> bool:
        return not self.differences


def numawatch_pci(root: Path) -> PciTopology:
    return pci_topology.read(Paths.from_root(root))


def compare_tree(root: Path) -> Comparison:
    """numawatch's PCI hierarchy of the tree at ``root`` against hwloc's, function by function."""
    ours = numawatch_pci(root)
    theirs = hwloc_places(lstopo_xml(root))
    differences = []
    cut = dropped = 0
    for address in sorted(set(ours.functions) | set(theirs)):
        function = ours.functions.get(address)
        if function is None:
            differences.append(f"{address}: hwloc {theirs[address]}, numawatch does not place it")
            continue
        found = theirs.get(address)
        if hwloc_drops(root, function):
            dropped += 1
            if found is not None:
                differences.append(f"{address}: a bridge with invalid bus numbers, yet hwloc places it: {found}")
            continue
        expected, was_cut = hwloc_view(root, ours, function)
        cut += was_cut
        if found != expected:
            differences.append(f"{address}: numawatch {expected}, hwloc {found}")
    return Comparison(tuple(differences), len(ours.functions) - dropped, cut, dropped)


__all__ = ["Comparison", "Place", "compare_tree", "hwloc_drops", "hwloc_places", "hwloc_view", "numawatch_pci"]
