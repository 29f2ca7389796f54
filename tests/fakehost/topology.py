"""Fake CPU/NUMA topology: the sysfs cpu and node trees, /proc/cmdline and the kernel's isolation files.

``add_topology`` writes what a multi-socket machine's kernel shows, in the shapes the kernel uses:

- ``sys/devices/system/cpu/{present,possible,online,offline,kernel_max}``;
- per CPU ``cpuN/online`` (not for cpu0, which cannot be unplugged), the ``cpuN/nodeM -> ../../node/nodeM`` link
  (kept for offline CPUs, as the kernel does), and for online CPUs ``cpuN/topology/`` with ``physical_package_id``,
  ``die_id``, ``core_id`` and the sibling sets as list and mask: ``thread_siblings`` and ``core_cpus`` (the same
  set under its old and its Linux 5.4 name), ``core_siblings``, ``package_cpus`` and ``die_cpus`` (one die per
  package). Offline CPUs have no ``topology/``, and the sets of their online siblings no longer name them. hwloc
  reads the masks, numawatch the lists: both must be there for the oracle (tests/hwloc_oracle.py) to read the tree.
  Cache, cluster and frequency attributes are left out to keep big hosts quick to build;
- ``sys/devices/system/node/{online,possible,has_cpu,has_memory}`` and per node ``cpulist`` (online CPUs only),
  ``cpumap``, ``distance`` (10 local, 11 same socket, 21 other socket), ``meminfo`` and
  ``hugepages/hugepages-{2048,1048576}kB/{nr,free,surplus}_hugepages``;
- ``sys/kernel/mm/hugepages/hugepages-<kB>kB/*`` with the totals over nodes;
- ``proc/cmdline``, and ``sys/devices/system/cpu/{isolated,nohz_full}`` derived from it as the kernel reports them
  (``isolated`` = the ``isolcpus=`` CPUs when domain isolation applies, ``nohz_full`` = ``(null)`` without the
  parameter).

A 384-CPU host builds in well under a second (about 5,400 files): files are written with bare ``os.open`` and each
directory is created once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from numawatch.cpuset import CPUSet, format_cpulist, parse_cpulist

if TYPE_CHECKING:
    from fakehost import FakeHost

GiB = 1 << 30
HUGEPAGE_SIZES_KB = (2048, 1048576)
NODE_DISTANCE_LOCAL = 10
NODE_DISTANCE_SAME_SOCKET = 11  # sub-NUMA clustering: another node of the same package
NODE_DISTANCE_REMOTE = 21
NODE_DISTANCE_MEMORY_ONLY = 20  # CPU-less nodes (HBM, CXL) added with memory_only_nodes=

DEFAULT_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro"


def format_cpumask(cpus: Iterable[int], nr_cpu_ids: int) -> str:
    """A kernel hex CPU mask of ``nr_cpu_ids`` bits: 32-bit groups, most significant first, comma-separated, the
    first group as short as the width allows (12 CPUs: ``fff``; 40 CPUs: ``ff,ffffffff``)."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    nbits = max(nr_cpu_ids, 1)
    groups = []
    for index in range((nbits + 31) // 32):
        bits = min(32, nbits - index * 32)
        groups.append(f"{(value >> (index * 32)) & 0xFFFFFFFF:0{(bits + 3) // 4}x}")
    return ",".join(reversed(groups))


@dataclass(frozen=True)
class TopologyLayout:
    """What ``add_topology`` built, so tests can name CPUs by role instead of by number.

    ``core_of`` is the core index within its socket (also the ``core_id`` written); ``node_of`` covers offline CPUs
    too (their node by construction, though the kernel's node cpulist no longer names them).
    """

    sockets: int
    cores_per_socket: int
    threads_per_core: int
    nodes_per_socket: int
    cpus: tuple[int, ...]  # every present CPU, sorted
    online: CPUSet
    offline: CPUSet
    socket_of: Mapping[int, int]
    core_of: Mapping[int, int]
    thread_of: Mapping[int, int]
    node_of: Mapping[int, int]
    memory_only_nodes: tuple[int, ...] = ()
    cmdline: str = DEFAULT_CMDLINE
    _slots: Mapping[tuple[int, int, int], int] = field(default_factory=dict, repr=False)

    @property
    def cpu_nodes(self) -> tuple[int, ...]:
        """Nodes that have CPUs, in order."""
        return tuple(range(self.sockets * self.nodes_per_socket))

    @property
    def nodes(self) -> tuple[int, ...]:
        """Every node, the CPU-less ones last."""
        return self.cpu_nodes + self.memory_only_nodes

    def cpu(self, socket: int, core: int, thread: int = 0) -> int:
        """The CPU id of thread ``thread`` of core ``core`` (index within the socket) on ``socket``."""
        return self._slots[(socket, core, thread)]

    def node_cpus(self, node: int, *, include_offline: bool = False) -> CPUSet:
        """CPUs of a node; by default only online ones, as ``nodeN/cpulist`` lists them."""
        pool = self.cpus if include_offline else self.online
        return frozenset(cpu for cpu in pool if self.node_of.get(cpu) == node)

    def socket_cpus(self, socket: int, *, include_offline: bool = False) -> CPUSet:
        pool = self.cpus if include_offline else self.online
        return frozenset(cpu for cpu in pool if self.socket_of[cpu] == socket)

    def socket_of_node(self, node: int) -> int:
        return node // self.nodes_per_socket

    def siblings(self, cpu: int, *, include_offline: bool = False) -> CPUSet:
        """The SMT threads of ``cpu``'s core, itself included."""
        socket, core = self.socket_of[cpu], self.core_of[cpu]
        threads = (self._slots[(socket, core, thread)] for thread in range(self.threads_per_core))
        return frozenset(t for t in threads if include_offline or t in self.online)

    def core_cpus(self, socket: int, core: int, *, include_offline: bool = False) -> CPUSet:
        return self.siblings(self.cpu(socket, core), include_offline=include_offline)

    def cores_of(self, cpus: Iterable[int]) -> frozenset[tuple[int, int]]:
        """The (socket, core) pairs the given CPUs sit on."""
        return frozenset((self.socket_of[cpu], self.core_of[cpu]) for cpu in cpus)

    def whole_cores(self, node: int, count: int, *, skip: int = 0) -> CPUSet:
        """All online threads of ``count`` cores of ``node``, after skipping ``skip`` cores (for exclusive pins)."""
        socket = self.socket_of_node(node)
        cores = sorted({self.core_of[cpu] for cpu in self.node_cpus(node, include_offline=True)})
        chosen: set[int] = set()
        for core in cores[skip : skip + count]:
            chosen |= self.core_cpus(socket, core)
        return frozenset(chosen)


class _Writer:
    """Writes many small files fast: each directory is created once, files with a bare open()."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self._made: set[str] = set()

    def dir(self, rel: str) -> str:
        path = os.path.join(self.root, rel)
        if path not in self._made:
            os.makedirs(path, exist_ok=True)
            self._made.add(path)
        return path

    def file(self, rel_dir: str, name: str, content: str) -> None:
        data = (content if content.endswith("\n") else content + "\n").encode()
        fd = os.open(os.path.join(self.dir(rel_dir), name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def link(self, rel_dir: str, name: str, target: str) -> None:
        path = os.path.join(self.dir(rel_dir), name)
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(target, path)


def _cmdline_value(cmdline: str, name: str) -> str | None:
    """The last ``name=value`` of a simple command line (the fake's own derivation, independent of the source)."""
    found = None
    for token in cmdline.split():
        key, equals, value = token.partition("=")
        if equals and key.replace("-", "_") == name:
            found = value.strip('"')
    return found


def _kernel_cpulist(text: str, last_cpu: int) -> str | None:
    """A boot-parameter CPU list as the kernel would print it back, or None when the kernel would reject it."""
    text = ",".join("0-N" if element == "all" else element for element in text.split(","))
    try:
        return format_cpulist(parse_cpulist(text.replace("N", str(last_cpu))))
    except ValueError:
        return None


def _sys_isolated(cmdline: str, last_cpu: int) -> str:
    value = _cmdline_value(cmdline, "isolcpus")
    if value is None:
        return ""
    elements = value.split(",")
    flags = []
    while elements and elements[0][:1].isalpha():
        flags.append(elements.pop(0))
    known = {"nohz", "domain", "managed_irq"} & set(flags)
    if known and "domain" not in known:
        return ""  # isolcpus=nohz,... or managed_irq,... without domain: no scheduler-domain isolation
    return _kernel_cpulist(",".join(elements), last_cpu) or ""  # a rejected list isolates nothing


def _sys_nohz_full(cmdline: str, last_cpu: int) -> str:
    value = _cmdline_value(cmdline, "nohz_full")
    if value is None:
        return "(null)"
    return _kernel_cpulist(value, last_cpu) or "(null)"


def add_topology(
    host: FakeHost,
    *,
    sockets: int = 2,
    cores_per_socket: int = 4,
    threads_per_core: int = 2,
    nodes_per_socket: int = 1,
    offline: Iterable[int] = (),
    cmdline: str = DEFAULT_CMDLINE,
    numbering: str = "interleaved",
    mem_per_node_bytes: int = 64 * GiB,
    hugepages_per_node: Mapping[int, int] | Sequence[Mapping[int, int]] | None = None,
    write_sys_isolated: bool = True,
    cpu_ids: Sequence[int] | None = None,
    memory_only_nodes: int = 0,
    numa: bool = True,
) -> TopologyLayout:
    """Write a CPU/NUMA topology into ``host`` (a FakeHost) and return its layout.

    - ``sockets`` x ``cores_per_socket`` x ``threads_per_core`` CPUs; each socket's cores are split into
      ``nodes_per_socket`` equal runs of cores, one NUMA node each (SNC / NPS when > 1). Node ids are socket-major:
      socket 0 has nodes 0..nodes_per_socket-1.
    - ``numbering``: ``"interleaved"`` (common Intel/AMD server numbering: cpu = thread * (sockets * cores) +
      socket * cores + core, so SMT siblings are ``sockets * cores`` apart and each socket's first threads come
      first) or ``"packed"`` (siblings adjacent: cpu = (socket * cores + core) * threads + thread).
    - ``cpu_ids``: renumber for non-contiguous ids; ``cpu_ids[k]`` is the id of the CPU that would otherwise be
      ``k`` under ``numbering``. Must have one distinct id per CPU.
    - ``offline``: CPU ids to show offline (no topology/, absent from node cpulists and siblings).
    - ``cmdline``: written to proc/cmdline; ``isolcpus=`` and ``nohz_full=`` in it also produce
      ``cpu/isolated`` and ``cpu/nohz_full`` unless ``write_sys_isolated`` is False (an old kernel without them).
    - ``mem_per_node_bytes``: MemTotal of each node (memory-only nodes too).
    - ``hugepages_per_node``: ``{size_kB: pages}`` reserved on every node, or a sequence of such mappings indexed by
      node id; None reserves none. Sizes not named read 0 for 2048 and 1048576 kB.
    - ``memory_only_nodes``: that many extra CPU-less nodes after the CPU nodes (HBM/CXL-style).
    - ``numa``: False writes no ``node/`` tree at all (a CONFIG_NUMA=n kernel) and a ``proc/meminfo`` instead.
    """
    if numbering not in ("interleaved", "packed"):
        raise ValueError(f"numbering must be 'interleaved' or 'packed', not {numbering!r}")
    if nodes_per_socket < 1 or cores_per_socket % nodes_per_socket:
        raise ValueError("cores_per_socket must be a multiple of nodes_per_socket")
    total = sockets * cores_per_socket * threads_per_core
    if cpu_ids is not None and (len(cpu_ids) != total or len(set(cpu_ids)) != total):
        raise ValueError(f"cpu_ids must hold {total} distinct ids")
    cores_per_node = cores_per_socket // nodes_per_socket

    slots: dict[tuple[int, int, int], int] = {}
    socket_of: dict[int, int] = {}
    core_of: dict[int, int] = {}
    thread_of: dict[int, int] = {}
    node_of: dict[int, int] = {}
    for socket in range(sockets):
        for core in range(cores_per_socket):
            for thread in range(threads_per_core):
                if numbering == "interleaved":
                    cpu = thread * (sockets * cores_per_socket) + socket * cores_per_socket + core
                else:
                    cpu = (socket * cores_per_socket + core) * threads_per_core + thread
                if cpu_ids is not None:
                    cpu = cpu_ids[cpu]
                slots[(socket, core, thread)] = cpu
                socket_of[cpu] = socket
                core_of[cpu] = core
                thread_of[cpu] = thread
                node_of[cpu] = socket * nodes_per_socket + core // cores_per_node
    present = frozenset(socket_of)
    offline_set = frozenset(offline)
    if not offline_set <= present:
        raise ValueError(f"offline CPUs {format_cpulist(offline_set - present)} are not present")
    online = present - offline_set
    cpu_nodes = sockets * nodes_per_socket
    memory_nodes = tuple(range(cpu_nodes, cpu_nodes + memory_only_nodes))
    all_nodes = tuple(range(cpu_nodes)) + memory_nodes
    nr_cpu_ids = max(present) + 1

    writer = _Writer(host.root)
    cpu_root = "sys/devices/system/cpu"
    writer.file(cpu_root, "present", format_cpulist(present))
    writer.file(cpu_root, "possible", format_cpulist(range(nr_cpu_ids)))  # contiguous, gaps are "not present"
    writer.file(cpu_root, "online", format_cpulist(online))
    writer.file(cpu_root, "offline", format_cpulist(offline_set))
    writer.file(cpu_root, "kernel_max", "8191")
    if write_sys_isolated:
        writer.file(cpu_root, "isolated", _sys_isolated(cmdline, nr_cpu_ids - 1))
        writer.file(cpu_root, "nohz_full", _sys_nohz_full(cmdline, nr_cpu_ids - 1))

    online_by_core: dict[tuple[int, int], list[int]] = {}
    online_by_socket: dict[int, list[int]] = {}
    for cpu in online:
        online_by_core.setdefault((socket_of[cpu], core_of[cpu]), []).append(cpu)
        online_by_socket.setdefault(socket_of[cpu], []).append(cpu)
    # Each core's and each package's online CPUs as the kernel prints them, list and mask: (list, mask).
    core_sets = {key: (format_cpulist(c), format_cpumask(c, nr_cpu_ids)) for key, c in online_by_core.items()}
    package_sets = {key: (format_cpulist(c), format_cpumask(c, nr_cpu_ids)) for key, c in online_by_socket.items()}
    for cpu in sorted(present):
        cpu_dir = f"{cpu_root}/cpu{cpu}"
        if cpu != 0:
            writer.file(cpu_dir, "online", "1" if cpu in online else "0")
        else:
            writer.dir(cpu_dir)
        if numa:
            writer.link(cpu_dir, f"node{node_of[cpu]}", f"../../node/node{node_of[cpu]}")
        if cpu not in online:
            continue
        topology_dir = f"{cpu_dir}/topology"
        core_list, core_mask = core_sets[(socket_of[cpu], core_of[cpu])]
        package_list, package_mask = package_sets[socket_of[cpu]]
        writer.file(topology_dir, "physical_package_id", str(socket_of[cpu]))
        writer.file(topology_dir, "die_id", "0")
        writer.file(topology_dir, "core_id", str(core_of[cpu]))
        for name in ("thread_siblings", "core_cpus"):  # the old and the current name (Linux 5.4) of one set
            writer.file(topology_dir, name, core_mask)
            writer.file(topology_dir, f"{name}_list", core_list)
        for name in ("core_siblings", "package_cpus", "die_cpus"):  # one die per package
            writer.file(topology_dir, name, package_mask)
            writer.file(topology_dir, f"{name}_list", package_list)

    pages_of = _hugepages_by_node(hugepages_per_node, all_nodes)
    totals = {size: sum(pages_of[node].get(size, 0) for node in all_nodes) for size in _sizes(pages_of)}
    if numa:
        node_root = "sys/devices/system/node"
        writer.file(node_root, "online", format_cpulist(all_nodes))
        writer.file(node_root, "possible", format_cpulist(all_nodes))
        writer.file(node_root, "has_cpu", format_cpulist(range(cpu_nodes)))
        writer.file(node_root, "has_memory", format_cpulist(all_nodes))
        writer.file(node_root, "has_normal_memory", format_cpulist(all_nodes))
        for node in all_nodes:
            node_dir = f"{node_root}/node{node}"
            cpus = [cpu for cpu in online if node_of[cpu] == node]
            writer.file(node_dir, "cpulist", format_cpulist(cpus))
            writer.file(node_dir, "cpumap", format_cpumask(cpus, nr_cpu_ids))
            distances = (_distance(node, other, nodes_per_socket, cpu_nodes) for other in all_nodes)
            writer.file(node_dir, "distance", " ".join(map(str, distances)))
            writer.file(node_dir, "meminfo", _node_meminfo(node, mem_per_node_bytes, pages_of[node]))
            for size in _sizes(pages_of):
                size_dir = f"{node_dir}/hugepages/hugepages-{size}kB"
                pages = pages_of[node].get(size, 0)
                writer.file(size_dir, "nr_hugepages", str(pages))
                writer.file(size_dir, "free_hugepages", str(pages))
                writer.file(size_dir, "surplus_hugepages", "0")
    else:
        kb = mem_per_node_bytes * len(all_nodes) // 1024
        writer.file("proc", "meminfo", f"MemTotal:       {kb:>10} kB\nMemFree:        {kb // 2:>10} kB\n")
    for size, pages in totals.items():
        size_dir = f"sys/kernel/mm/hugepages/hugepages-{size}kB"
        writer.file(size_dir, "nr_hugepages", str(pages))
        writer.file(size_dir, "free_hugepages", str(pages))
        writer.file(size_dir, "resv_hugepages", "0")
        writer.file(size_dir, "surplus_hugepages", "0")
        writer.file(size_dir, "nr_overcommit_hugepages", "0")
    writer.file("proc", "cmdline", cmdline)

    return TopologyLayout(
        sockets=sockets,
        cores_per_socket=cores_per_socket,
        threads_per_core=threads_per_core,
        nodes_per_socket=nodes_per_socket,
        cpus=tuple(sorted(present)),
        online=online,
        offline=offline_set,
        socket_of=socket_of,
        core_of=core_of,
        thread_of=thread_of,
        node_of=node_of if numa else dict.fromkeys(present, 0),
        memory_only_nodes=memory_nodes,
        cmdline=cmdline,
        _slots=slots,
    )


def _distance(node: int, other: int, nodes_per_socket: int, cpu_nodes: int) -> int:
    if node == other:
        return NODE_DISTANCE_LOCAL
    if node >= cpu_nodes or other >= cpu_nodes:
        return NODE_DISTANCE_MEMORY_ONLY
    if node // nodes_per_socket == other // nodes_per_socket:
        return NODE_DISTANCE_SAME_SOCKET
    return NODE_DISTANCE_REMOTE


def _hugepages_by_node(
    spec: Mapping[int, int] | Sequence[Mapping[int, int]] | None, nodes: tuple[int, ...]
) -> dict[int, Mapping[int, int]]:
    if spec is None:
        return {node: {} for node in nodes}
    if isinstance(spec, Mapping):
        return {node: spec for node in nodes}
    return {node: (spec[node] if node < len(spec) else {}) for node in nodes}


def _sizes(pages_of: Mapping[int, Mapping[int, int]]) -> list[int]:
    sizes = set(HUGEPAGE_SIZES_KB)
    for pages in pages_of.values():
        sizes.update(pages)
    return sorted(sizes)


def _node_meminfo(node: int, total_bytes: int, pages: Mapping[int, int]) -> str:
    kb = total_bytes // 1024
    reserved_kb = sum(size * count for size, count in pages.items())
    free = max(kb - reserved_kb - kb // 100, 0)
    lines = [
        ("MemTotal", f"{kb} kB"),
        ("MemFree", f"{free} kB"),
        ("MemUsed", f"{kb - free} kB"),
        ("HugePages_Total", str(pages.get(2048, 0))),
        ("HugePages_Free", str(pages.get(2048, 0))),
        ("HugePages_Surp", "0"),
    ]
    return "".join(f"Node {node} {name + ':':<16}{value:>15}\n" for name, value in lines)
