"""What the corpus trees are known to show under the hwloc oracle, tree by tree (tests/test_corpus_oracle.py).

- ``known``: fields where numawatch reads a real kernel's files differently from hwloc because of a reader bug that
  issue 14 names: the test of that (tree, field) is ``xfail(strict=True)`` with this reason, so the fix turns it
  green (and a stale entry fails). docs/verified.md shows each with the difference found.
- ``blind``: fields hwloc cannot read on that tree (the files it needs are not in the capture), with why.
- ``repair``: rewrites a copy of the tree into what a reader without those bugs would read, so a test can require
  every field to agree on it: the reasons are the whole difference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from numawatch.cpuset import format_cpulist, parse_cpumask

PER_CPU_FIELDS = ("socket", "core", "NUMA node", "SMT siblings")


# --------------------------------------------------------------------------------------------------- repairs
# Each rewrites a copy of a tree into what a reader without that issue-14 bug reads from it.
def strip_nul_bytes(root: Path) -> None:
    """Kernels that pad sysfs files with NULs (``nodeN/cpulist`` ending ``"\\n\\0"``, ``nohz_full`` reading
    ``"\\0\\n"``): the same files without them."""
    for path in (root / "sys/devices/system").rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if b"\0" in data:
                path.write_bytes(data.replace(b"\0", b""))


def strip_nul_bytes_and_dangling_node_links(root: Path) -> None:
    """As ``strip_nul_bytes``, and without the ``cpuN/nodeM`` links to nodes that do not exist (an offline node):
    a CPU whose node is not online has no node, as hwloc reads it."""
    strip_nul_bytes(root)
    for link in (root / "sys/devices/system/cpu").glob("cpu[0-9]*/node[0-9]*"):
        if link.is_symlink() and not link.exists():
            link.unlink()


def _mask_as_list(path: Path, target: Path) -> None:
    if path.is_file() and not target.exists():
        target.write_text(format_cpulist(parse_cpumask(path.read_text())) + "\n")


def add_lists_of_old_kernels(root: Path) -> None:
    """Files an old kernel has not yet: ``cpu/online`` (from the per-CPU ``online`` files; a CPU without one is
    online), ``nodeN/cpulist`` (from ``cpumap``) and ``thread_siblings_list`` (from ``thread_siblings``, else
    ``core_cpus``), each written as the list form of what the kernel did print."""
    cpu_root = root / "sys/devices/system/cpu"
    if not (cpu_root / "online").exists():
        online = []
        for directory in cpu_root.glob("cpu[0-9]*"):
            flag = directory / "online"
            if not flag.is_file() or flag.read_text().strip() != "0":
                online.append(int(directory.name[3:]))
        (cpu_root / "online").write_text(format_cpulist(online) + "\n")
    for node in (root / "sys/devices/system/node").glob("node[0-9]*"):
        _mask_as_list(node / "cpumap", node / "cpulist")
    for topology in cpu_root.glob("cpu[0-9]*/topology"):
        _mask_as_list(topology / "thread_siblings", topology / "thread_siblings_list")
        _mask_as_list(topology / "core_cpus", topology / "thread_siblings_list")


# --------------------------------------------------------------------------------------------------- expectations
@dataclass(frozen=True)
class Expected:
    """What a corpus tree is known to show: fields that differ because of an issue-14 reader bug (field -> the
    reason, ``xfail`` until fixed), fields hwloc cannot read on it (field -> why), and the repair that removes the
    bug's trigger from a copy of the tree."""

    known: Mapping[str, str] = field(default_factory=dict)
    blind: Mapping[str, str] = field(default_factory=dict)
    repair: Callable[[Path], None] | None = None


def _every(fields: tuple[str, ...], reason: str) -> dict[str, str]:
    return dict.fromkeys(fields, reason)


# Trees on which the topology source goes down although they have a CPU topology: tree -> why.
TOPOLOGY_DOWN = {
    "128arm-2pa2n8cluster4co": 'issue 14: nodeN/cpulist ends in "\\n\\0" (kernel 5.15 on ARM; so do its '
    "topology/*_list files): the topology source goes down, numawatch lists no CPU and no node (hwloc: 128 CPUs, "
    "nodes 0-3)",
    "offline-cpu0-node0": 'issue 14: cpu/nohz_full reads "\\0\\n" (CentOS 7): the topology source goes down, '
    "numawatch lists no CPU and no node (hwloc: CPUs 4-20, node 1)",
}
TOPOLOGY_DOWN_FIELDS = ("online CPUs", *PER_CPU_FIELDS, "NUMA nodes")
CORPUS: dict[str, Expected] = {
    "128arm-2pa2n8cluster4co": Expected(
        known=_every(TOPOLOGY_DOWN_FIELDS, TOPOLOGY_DOWN["128arm-2pa2n8cluster4co"]), repair=strip_nul_bytes
    ),
    "offline-cpu0-node0": Expected(
        known={
            **_every(TOPOLOGY_DOWN_FIELDS, TOPOLOGY_DOWN["offline-cpu0-node0"]),
            "NUMA node": TOPOLOGY_DOWN["offline-cpu0-node0"] + "; and then, an online CPU in no online node: NUMA "
            "node 0 is offline, yet numawatch labels CPUs 4,6,...,20 node 0 from their dangling cpuN/node0 links, a "
            "node numawatch_numa_node_cpus does not list (hwloc: no node)",
        },
        repair=strip_nul_bytes_and_dangling_node_links,
    ),
    "16em64t-4s2c2t-offlines": Expected(
        known={
            "online CPUs": "issue 14: no cpu/online (old kernel): numawatch takes every CPU directory as online, "
            "ignoring the per-CPU online files (numawatch 0-15, hwloc 0-1,3-4,6-12,15)",
            "NUMA node": "issue 14: no nodeN/cpulist (old kernel): nodeN/cpumap is not read, so no CPU has a node "
            "(hwloc: node 0 for all)",
            "CPU-less nodes": "issue 14: no nodeN/cpulist (old kernel): node 0 shows 0 CPUs in "
            "numawatch_numa_node_cpus, so it reads as CPU-less (hwloc: 12 CPUs, no CPU-less node)",
            "SMT siblings": "issue 14: no thread_siblings_list (old kernel): the thread_siblings mask is not read "
            "(hwloc: pairs such as 0,8)",
        },
        repair=add_lists_of_old_kernels,
    ),
    "fakememinitiators-1np2c+1npp+gi": Expected(
        known={
            "NUMA node": "issue 14: no nodeN/cpulist, only cpumap: numawatch takes each CPU's node from its "
            "cpuN/nodeM link, which this edited tree left stale (CPU 1: numawatch 1, hwloc 0)",
            "CPU-less nodes": "issue 14: no nodeN/cpulist, only cpumap: every node shows 0 CPUs in "
            "numawatch_numa_node_cpus (numawatch 0-10 CPU-less, hwloc 4-10)",
            "SMT siblings": "issue 14: no thread_siblings_list, only the core_cpus mask: siblings unknown",
        },
        repair=add_lists_of_old_kernels,
    ),
    "realkernel-4node": Expected(
        blind={"socket": "the capture has package_cpus_list and core_siblings_list but not the package_cpus or "
               "core_siblings masks hwloc reads, so hwloc finds no Package (numawatch reads physical_package_id)"},
    ),
}  # fmt: skip
FIRMWARE_OVERLAP_EXPECTED = Expected(
    known={"NUMA node": "issue 14: every node claiming every CPU: numawatch maps each CPU to the last node that "
           "claims it (1), hwloc to the lowest (0)"},
    blind={
        "NUMA nodes": "hwloc drops a node whose CPUs a lower node already claimed, so it lists node 0 only",
        "CPU-less nodes": "hwloc drops node 1 altogether, so it cannot say whether node 1 has CPUs",
    },
)  # fmt: skip
