"""An independent reading of a host tree: Debian's hwloc (``lstopo-no-graphics``) against numawatch's CPU map.

hwloc reads any directory as a file-system root (``--input DIR``) with its own parser, so agreeing with it on a tree
means numawatch read that tree the way a mature, widely used topology library does. What hwloc does, from its
Linux backend (hwloc/topology-linux.c, hwloc 2.9 as Debian ships it), and so what the comparison relies on:

- **online CPUs**: a PU per CPU that ``cpu/online`` lists (per CPU ``cpuN/online`` when that file is absent) and that
  still has a ``topology/`` directory;
- **socket**: a Package per distinct ``topology/package_cpus`` (older kernels: ``core_siblings``) *mask*, numbered by
  the ``physical_package_id`` of its first CPU. A tree without those masks has no Package at all (hwloc does not
  read the ``*_list`` files), so hwloc cannot tell sockets there;
- **core**: a Core per distinct ``topology/core_cpus`` (older: ``thread_siblings``) mask, numbered by the
  ``core_id`` of its first CPU. Two CPUs with the same ``core_id`` in one package but separate sibling masks (the
  kernel refused to pair them, as in the 4-node capture) are two Cores with the same number;
- **NUMA node**: a NUMANode per node that ``node/online`` lists (else per ``nodeN`` directory), with the CPUs of
  ``nodeN/cpumap`` (the mask, not ``cpulist``). A node whose CPUs an earlier node already claimed is dropped
  entirely ("buggy BIOS"), so a CPU claimed by several nodes belongs to the lowest one. With
  ``HWLOC_USE_NUMA_DISTANCES=0`` (set here) hwloc does not lend a CPU-less node its nearest node's CPUs (from
  distances or HMAT initiators), so CPU-less nodes are exactly the NUMANodes with an empty cpuset;
- **PCI locality**: a device's ``local_cpus`` mask places its host bridge under the smallest object holding those
  CPUs; the NUMA node of a device is then the node of that object, when it has exactly one;
- ``--disallowed`` keeps CPUs and nodes outside the gathering process's cpuset (numawatch reads the whole machine).

numawatch's side is read where a user sees it: the rendered ``numawatch_cpu_info``, ``numawatch_numa_node_cpus``
(a node with 0 online CPUs is CPU-less) and ``numawatch_gpu_info`` series of an evaluation of the tree, plus the
snapshot's SMT sibling sets (not a metric label, but what the SMT checks use).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.cpuset import format_cpulist
from numawatch.host import read_host
from numawatch.intent import Intent
from numawatch.paths import Paths
from prometheus_client.parser import text_string_to_metric_families

LSTOPO = "lstopo-no-graphics"
# I/O objects: a PCI device's NUMA node is that of its nearest ancestor that is none of these.
_IO_TYPES = frozenset({"Bridge", "PCIDev", "OSDev", "Misc"})
_MEMORY_TYPES = frozenset({"NUMANode", "MemCache"})

# The fields compared, in the order reports list them.
FIELDS = ("online CPUs", "socket", "core", "NUMA node", "SMT siblings", "NUMA nodes", "CPU-less nodes", "GPU NUMA node")


class OracleError(RuntimeError):
    """hwloc could not read the tree, or printed something this module does not understand."""


@dataclass(frozen=True)
class CpuReading:
    socket: int | None
    core: int | None
    numa_node: int | None
    siblings: frozenset[int] | None = None  # None: not known (numawatch without topology/, hwloc without a Core)


@dataclass(frozen=True)
class Reading:
    """One reader's CPU map of a tree: the online CPUs with their socket, core, node and siblings, the NUMA nodes,
    which of them have no CPU, and the NUMA node of every accelerator (NVIDIA and AMD GPUs, Gaudi; None: not local
    to one node)."""

    cpus: Mapping[int, CpuReading]
    nodes: frozenset[int]
    cpuless_nodes: frozenset[int]
    gpus: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def online(self) -> frozenset[int]:
        return frozenset(self.cpus)


def lstopo_available() -> bool:
    return shutil.which(LSTOPO) is not None


def parse_bitmap(text: str) -> frozenset[int]:
    """An hwloc XML bitmap (``0x000000ff,0x00000001``: 32-bit words, most significant first) -> its set bits."""
    value = 0
    for word in text.strip().split(","):
        digits = word[2:] if word[:2].lower() == "0x" else word
        value = (value << 32) | int(digits or "0", 16)
    return frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)


def lstopo_xml(root: Path, *, timeout: float = 60.0) -> str:
    """hwloc's XML reading of the tree at ``root`` (every CPU and node, allowed or not, and the PCI devices)."""
    environment = dict(os.environ, HWLOC_USE_NUMA_DISTANCES="0")
    command = [LSTOPO, "--input", str(root), "--disallowed", "--whole-io", "--of", "xml", "-"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise OracleError(f"{LSTOPO} on {root}: {error}") from None
    if done.returncode != 0 or "<topology" not in done.stdout:
        raise OracleError(f"{LSTOPO} on {root} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


# PCI vendor -> the classes of its accelerators, as pci.ids and the vendors' docs name them (docs/gpu.md, "Vendors"):
# NVIDIA's VGA and 3D controllers, AMD Instinct's display controller and processing accelerator (and 3D controller),
# Habana's processing accelerator. Spelled out here, not taken from gpus_sysfs, so the oracle stays independent.
_ACCELERATOR_CLASSES = {"10de": ("0300", "0302"), "1002": ("0302", "0380", "1200"), "1da3": ("1200",)}


def _os_index(element: ElementTree.Element) -> int | None:
    text = element.get("os_index")
    return int(text) if text is not None else None


def _gpu_node(ancestors: list[ElementTree.Element]) -> int | None:
    """The NUMA node of an I/O object: that of its nearest normal (non-I/O) ancestor, when it has exactly one."""
    for ancestor in reversed(ancestors):
        if ancestor.get("type") in _IO_TYPES:
            continue
        local = [child for child in ancestor if child.get("type") == "NUMANode"]
        if len(local) == 1:
            return _os_index(local[0])
        nodes = parse_bitmap(ancestor.get("nodeset", "0x0"))
        return next(iter(nodes)) if len(nodes) == 1 else None
    return None


def parse_lstopo_xml(text: str) -> Reading:
    """The CPU map in hwloc's XML (see the module docstring for what each field means there)."""
    try:
        document = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise OracleError(f"hwloc printed XML that does not parse: {error}") from None
    cpus: dict[int, CpuReading] = {}
    node_cpus: dict[int, frozenset[int]] = {}
    gpus: dict[str, int | None] = {}

    def walk(element: ElementTree.Element, ancestors: list[ElementTree.Element]) -> None:
        kind = element.get("type")
        if kind == "NUMANode":
            node = _os_index(element)
            if node is None:
                raise OracleError("a NUMANode without os_index")
            node_cpus[node] = parse_bitmap(element.get("cpuset", "0x0"))
        elif kind == "PU":
            cpu = _os_index(element)
            if cpu is None:
                raise OracleError("a PU without os_index")
            package = next((a for a in reversed(ancestors) if a.get("type") == "Package"), None)
            core = next((a for a in reversed(ancestors) if a.get("type") == "Core"), None)
            cpus[cpu] = CpuReading(
                socket=_os_index(package) if package is not None else None,
                core=_os_index(core) if core is not None else None,
                numa_node=None,  # filled from the NUMANodes' cpusets below
                siblings=parse_bitmap(core.get("cpuset", "0x0")) if core is not None else None,
            )
        elif kind == "PCIDev":
            busid, pci_type = element.get("pci_busid", ""), element.get("pci_type", "")
            # pci_type: "0302 [10de:2330] [10de:16c1] a1" = class, [vendor:device], [subsystem], revision
            class_code, _, rest = pci_type.partition(" ")
            if class_code[:4].lower() in _ACCELERATOR_CLASSES.get(rest[1:5].lower(), ()):
                gpus[busid.lower()] = _gpu_node(ancestors)
        for child in element:
            if child.tag == "object":
                walk(child, [*ancestors, element])

    for top in document:
        if top.tag == "object":
            walk(top, [])
    if not cpus:
        raise OracleError("hwloc found no PU")
    owners: dict[int, list[int]] = {}
    for node, members in node_cpus.items():
        for cpu in members:
            owners.setdefault(cpu, []).append(node)
    for cpu, reading in list(cpus.items()):
        nodes = owners.get(cpu, [])
        if len(nodes) > 1:
            raise OracleError(f"hwloc put CPU {cpu} in NUMA nodes {nodes}")
        cpus[cpu] = CpuReading(reading.socket, reading.core, nodes[0] if nodes else None, reading.siblings)
    return Reading(
        cpus=cpus,
        nodes=frozenset(node_cpus),
        cpuless_nodes=frozenset(node for node, members in node_cpus.items() if not members),
        gpus=gpus,
    )


def hwloc_reading(root: Path) -> Reading:
    return parse_lstopo_xml(lstopo_xml(root))


# --------------------------------------------------------------------------------------------- numawatch's side
def numawatch_reading(root: Path) -> Reading:
    """numawatch's CPU map of the tree, from the metrics an evaluation of it renders (what a user scrapes)."""
    host = read_host(Paths.from_root(root))
    exposition = metrics.render(evaluate(host, Intent())).decode()
    families = {family.name: family for family in text_string_to_metric_families(exposition)}
    topology = host.topology

    def number(text: str) -> int | None:
        return int(text) if text != "" else None

    cpus: dict[int, CpuReading] = {}
    for sample in families["numawatch_cpu_info"].samples:
        labels = sample.labels
        if labels["online"] != "true":
            continue
        cpu = int(labels["cpu"])
        known = topology.cpus.get(cpu) if topology is not None else None
        cpus[cpu] = CpuReading(
            socket=number(labels["socket"]),
            core=number(labels["core"]),
            numa_node=number(labels["numa_node"]),
            siblings=frozenset(known.siblings) if known is not None and known.siblings else None,
        )
    counts = {int(s.labels["numa_node"]): int(s.value) for s in families["numawatch_numa_node_cpus"].samples}
    gpus = {s.labels["gpu"].lower(): number(s.labels["numa_node"]) for s in families["numawatch_gpu_info"].samples}
    return Reading(
        cpus=cpus,
        nodes=frozenset(counts),
        cpuless_nodes=frozenset(node for node, count in counts.items() if count == 0),
        gpus=gpus,
    )


# --------------------------------------------------------------------------------------------- the comparison
def _cpus(cpus: Iterable[int]) -> str:
    return format_cpulist(cpus) or "none"


def _shown(value: object) -> str:
    if isinstance(value, frozenset):
        return "{" + _cpus(value) + "}"
    return "unknown" if value is None else str(value)


@dataclass(frozen=True)
class FieldResult:
    """One field of one tree: the differences found (none: equal), how many CPUs (or GPUs, for the GPU field)
    were compared, and the CPUs skipped because hwloc has no value for them (``blind``)."""

    differences: tuple[str, ...]
    compared: int
    blind: frozenset[int] = frozenset()

    @property
    def equal(self) -> bool:
        return not self.differences


_PER_CPU = {"socket": "socket", "core": "core", "NUMA node": "numa_node", "SMT siblings": "siblings"}


def compare(numawatch: Reading, hwloc: Reading) -> dict[str, FieldResult]:
    """Every field of ``FIELDS``, numawatch's reading against hwloc's.

    Per-CPU fields are compared on hwloc's online CPUs: one that numawatch does not list as online is a difference
    in every field (it has no value there), one only numawatch calls online is a difference of "online CPUs" alone.
    Where hwloc has no socket, core or siblings for a CPU (no Package or Core above it: the tree lacks the masks
    hwloc reads), that CPU is skipped for that field and named in ``blind``; a NUMA node hwloc cannot place is
    compared (numawatch must not invent one either). The set fields compare the whole set.
    """
    results: dict[str, FieldResult] = {}
    online = []
    if numawatch.online != hwloc.online:
        online.append(f"numawatch {_cpus(numawatch.online)}, hwloc {_cpus(hwloc.online)}")
    results["online CPUs"] = FieldResult(tuple(online), len(hwloc.online))
    for name, attribute in _PER_CPU.items():
        found, blind, compared = [], set(), 0
        for cpu in sorted(hwloc.online):
            theirs = getattr(hwloc.cpus[cpu], attribute)
            if theirs is None and attribute != "numa_node":
                blind.add(cpu)
                continue
            compared += 1
            if cpu not in numawatch.cpus:
                found.append(f"CPU {cpu}: numawatch does not list it online, hwloc {_shown(theirs)}")
                continue
            ours = getattr(numawatch.cpus[cpu], attribute)
            if ours != theirs:
                found.append(f"CPU {cpu}: numawatch {_shown(ours)}, hwloc {_shown(theirs)}")
        results[name] = FieldResult(tuple(found), compared, frozenset(blind))
    for name, ours, theirs in (("NUMA nodes", numawatch.nodes, hwloc.nodes),
                               ("CPU-less nodes", numawatch.cpuless_nodes, hwloc.cpuless_nodes)):  # fmt: skip
        difference = () if ours == theirs else (f"numawatch {_cpus(ours)}, hwloc {_cpus(theirs)}",)
        results[name] = FieldResult(difference, len(theirs))
    gpus = []
    for address in sorted(set(numawatch.gpus) | set(hwloc.gpus)):
        ours_gpu = _shown(numawatch.gpus[address]) if address in numawatch.gpus else "no such GPU"
        theirs_gpu = _shown(hwloc.gpus[address]) if address in hwloc.gpus else "no such GPU"
        if ours_gpu != theirs_gpu:
            gpus.append(f"GPU {address}: numawatch {ours_gpu}, hwloc {theirs_gpu}")
    results["GPU NUMA node"] = FieldResult(tuple(gpus), len(hwloc.gpus))
    return results


def summary(result: FieldResult, limit: int = 4) -> str:
    """The differences of one field in one line (the first ``limit``, then how many more)."""
    shown = "; ".join(result.differences[:limit])
    more = len(result.differences) - limit
    return shown + (f"; and {more} more" if more > 0 else "")


@cache
def readings(root: Path) -> tuple[Reading, Reading]:
    """(numawatch's, hwloc's) reading of a tree that nothing writes to any more (a corpus tree, a finished fake),
    read once per process: the oracle tests and tools/generate_verified.py share them."""
    return numawatch_reading(root), hwloc_reading(root)
