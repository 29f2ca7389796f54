"""The CPU and NUMA map.

CPUs, NUMA nodes, the kernel's isolation parameters (sources/topology.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numawatch.cpuset import EMPTY, CPUSet
from numawatch.model import frozen_map


# --------------------------------------------------------------------------------------------------- topology
@dataclass(frozen=True)
class Cpu:
    id: int
    online: bool
    socket: int | None  # topology/physical_package_id; None for offline CPUs (topology/ is gone)
    core: int | None  # topology/core_id, unique only within a socket
    numa_node: int | None  # the nodeN that lists it; None when no node does
    siblings: CPUSet = EMPTY  # topology/thread_siblings_list (SMT siblings including itself)


@dataclass(frozen=True)
class NumaNode:
    id: int
    # The online CPUs numawatch maps to this node: nodeN/cpulist, less the CPUs a lower node's cpulist claims too
    # (firmware that makes nodes overlap; a CPU belongs to the lowest node that claims it, as hwloc decides).
    cpus: CPUSet
    distances: tuple[int, ...] = ()  # nodeN/distance, indexed by node position in Topology.node_ids; () unknown
    mem_total_bytes: int | None = None  # nodeN/meminfo MemTotal
    # huge page size in kB -> number of pages reserved on this node (nodeN/hugepages/hugepages-<kB>kB/nr_hugepages)
    hugepages_total: Mapping[int, int] = field(default_factory=frozen_map)
    # nodeN/cpulist as the file says it; None when it equals ``cpus`` (the usual case), so snapshots stay small.
    listed_cpus: CPUSet | None = None

    @property
    def claimed_cpus(self) -> CPUSet:
        """Every CPU nodeN/cpulist names, including those a lower node claims as well."""
        return self.cpus if self.listed_cpus is None else self.listed_cpus


@dataclass(frozen=True)
class IsolationParams:
    """CPU isolation as requested on the kernel command line and as the kernel reports it took effect."""

    cmdline: str = ""
    isolcpus: CPUSet | None = None  # cpus of isolcpus= (None: parameter absent)
    isolcpus_flags: tuple[str, ...] = ()  # e.g. ("domain", "managed_irq"); "domain" is implied without flags
    nohz_full: CPUSet | None = None
    rcu_nocbs: CPUSet | None = None
    irqaffinity: CPUSet | None = None
    sys_isolated: CPUSet | None = None  # /sys/devices/system/cpu/isolated (domain-isolated CPUs in effect)
    sys_nohz_full: CPUSet | None = None  # /sys/devices/system/cpu/nohz_full
    # hugepages= requests on the command line: size in kB -> pages (default_hugepagesz applied)
    cmdline_hugepages: Mapping[int, int] = field(default_factory=frozen_map)
    # Command-line values the kernel would have rejected (bad CPU list, bad size), one line each naming the file and
    # the parameter; the parameter itself is then left as None/absent, as the kernel ignores it too.
    problems: tuple[str, ...] = ()


# Keys of Topology.problems: the optional topology files that can be unreadable on their own (see the topology
# source's docstring for which file is which).
TOPOLOGY_OPTIONAL_FILES = (
    "present",
    "possible",
    "cpu_topology",
    "distance",
    "meminfo",
    "hugepages",
    "isolated",
    "nohz_full",
    "cpulist",
    "cmdline",
)


@dataclass(frozen=True)
class Topology:
    cpus: Mapping[int, Cpu]  # every present CPU, online or not
    online: CPUSet
    nodes: Mapping[int, NumaNode]
    isolation: IsolationParams
    # An optional file (a key of TOPOLOGY_OPTIONAL_FILES) that was malformed -> one line naming the file and what was
    # wrong. What it would have told is unknown (None) and only what depends on it is not evaluated.
    problems: Mapping[str, str] = field(default_factory=frozen_map)
    # Whether the kernel has NUMA at all (a node/ directory); False: one synthetic node 0 holding every CPU.
    numa: bool = True

    def problem(self, key: str) -> str | None:
        """Why what the optional file ``key`` tells is unknown, or None when it is known.

        The isolated and nohz_full CPUs stay known with their sysfs file unreadable when the command line says them
        (``isolcpus=``, ``nohz_full=``): that is what numawatch uses first.
        """
        if key == "isolated" and self.isolation.isolcpus is not None:
            return None
        if key == "nohz_full" and self.isolation.nohz_full is not None:
            return None
        return self.problems.get(key)

    @property
    def offline(self) -> CPUSet:
        return frozenset(self.cpus) - self.online

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.nodes))

    @property
    def sockets(self) -> frozenset[int]:
        return frozenset(c.socket for c in self.cpus.values() if c.socket is not None)

    @property
    def isolated(self) -> CPUSet:
        """CPUs isolated from the scheduler: isolcpus= as asked, else what sysfs says took effect."""
        if self.isolation.isolcpus is not None:
            return self.isolation.isolcpus & self.online
        return (self.isolation.sys_isolated or EMPTY) & self.online

    @property
    def housekeeping(self) -> CPUSet:
        """Online CPUs that are not isolated: where the kubelet's reserved CPUs and daemons belong."""
        return self.online - self.isolated

    def node_of(self, cpu: int) -> int | None:
        found = self.cpus.get(cpu)
        return found.numa_node if found else None

    def nodes_of(self, cpus: CPUSet) -> frozenset[int]:
        """The NUMA nodes the given CPUs sit on (unknown CPUs are ignored)."""
        nodes = set()
        for cpu in cpus:
            node = self.node_of(cpu)
            if node is not None:
                nodes.add(node)
        return frozenset(nodes)
