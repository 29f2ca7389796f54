"""Kernel settings and counters.

Sysctls, THP, huge pages, NUMA and inter-socket counters, idle states (sources/kernel.py, numastat.py, cpuidle.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numawatch.model import frozen_map


# --------------------------------------------------------------------------------------------------- kernel knobs
@dataclass(frozen=True)
class HugePageCounts:
    """One huge page size's pool, in pages (``hugepages-<kB>kB/{nr,free,surplus,resv}_hugepages``)."""

    total: int | None  # nr_hugepages: the persistent pool reserved
    free: int | None = None
    surplus: int | None = None
    reserved: int | None = None  # resv_hugepages: promised to a mapping but not faulted yet (global only)


@dataclass(frozen=True)
class KernelSettings:
    """Kernel tunables numawatch compares with the intent (gpu-and-host.md §6)."""

    numa_balancing: int | None = None  # /proc/sys/kernel/numa_balancing; None: absent (kernel without it)
    swappiness: int | None = None  # /proc/sys/vm/swappiness
    thp_enabled: str | None = None  # the bracketed mode of transparent_hugepage/enabled
    thp_defrag: str | None = None
    # online CPU -> cpufreq scaling_governor; None: no cpufreq on this host at all (VMs); CPUs without a
    # cpufreq directory are simply absent.
    governors: Mapping[int, str] | None = None
    # huge page size in kB -> the global pool (sys/kernel/mm/hugepages)
    hugepages: Mapping[int, HugePageCounts] = field(default_factory=frozen_map)
    # hugepages= on the command line with the per-node form (hugepages=0:4,1:4): node -> size kB -> pages
    cmdline_hugepages_per_node: Mapping[int, Mapping[int, int]] = field(default_factory=frozen_map)
    # setting -> one line naming the file and what was wrong with it; that setting's field is then None
    problems: Mapping[str, str] = field(default_factory=frozen_map)
    # Features the kernel was built without, seen as a file missing from a directory that is there (THP: no
    # transparent_hugepage under sys/kernel/mm; NUMA balancing: no numa_balancing under proc/sys/kernel). A file
    # missing because its whole directory is (a partial capture) is unknown instead, and not listed here.
    absent_features: frozenset[str] = frozenset()


# --------------------------------------------------------------------------------------------------- NUMA counters
@dataclass(frozen=True)
class NodeCounters:
    """One NUMA node's allocation counters (pages) and huge page pools."""

    node: int
    numastat: Mapping[str, int]  # nodeN/numastat field -> pages (monotonic counters)
    hugepages: Mapping[int, HugePageCounts] = field(default_factory=frozen_map)  # size kB -> pool on this node
    hugepages_problem: str | None = None  # a malformed pool file, named; its pool is left out of ``hugepages``


@dataclass(frozen=True)
class NumaCounters:
    nodes: Mapping[int, NodeCounters]


@dataclass(frozen=True)
class LinkTraffic:
    """Bytes one socket sent over one inter-socket link since numawatch opened the counter."""

    socket: int | None
    link: str  # the PMU name, e.g. "uncore_upi_0"
    pmu: str
    bytes: int
    cpu: int  # the CPU the counter is opened on (the PMU's cpumask)


@dataclass(frozen=True)
class InterSocketTraffic:
    links: tuple[LinkTraffic, ...]
    event: str  # what is counted, e.g. "UNC_UPI_TxL_FLITS.ALL_DATA x 64/9"


# --------------------------------------------------------------------------------------------------- cpuidle
@dataclass(frozen=True)
class IdleState:
    """One ``cpuN/cpuidle/stateK`` directory (Documentation/admin-guide/pm/cpuidle.rst)."""

    index: int  # K
    name: str  # "POLL", "C1", "C1E", "C6"
    exit_latency_us: int  # ``latency``: the worst-case time to leave the state, in microseconds
    disabled: bool | None  # ``disable`` is 1; None: the file could not be read


@dataclass(frozen=True)
class CpuIdle:
    """The idle states each online CPU may enter, and what limits them.

    ``resume_latency_us`` holds the per-CPU PM QoS limit of ``cpuN/power/pm_qos_resume_latency_us`` for the CPUs
    that have one: the governor never picks a state whose exit latency exceeds it (0: only polling). A CPU without a
    limit ("0" in the file, the usual case) is absent. The global limit that a process holding /dev/cpu_dma_latency
    sets (tuned's ``force_latency``) is not in sysfs and not here.
    """

    driver: str | None  # cpuidle/current_driver: "intel_idle", "acpi_idle", "haltpoll", "none"; None: no cpuidle
    governor: str | None  # cpuidle/current_governor (or current_governor_ro): "menu", "teo", "ladder", "haltpoll"
    states: Mapping[int, tuple[IdleState, ...]] = field(default_factory=frozen_map)  # online CPU -> its states
    resume_latency_us: Mapping[int, int] = field(default_factory=frozen_map)
    problems: tuple[str, ...] = ()  # malformed files, one line each (that CPU's value is unknown)

    def enabled(self, cpu: int) -> tuple[IdleState, ...] | None:
        """The states ``cpu`` may enter: not disabled and within its PM QoS limit; None when a ``disable`` file of
        it could not be read (so it is unknown whether a state is allowed)."""
        states = self.states.get(cpu)
        if states is None:
            return None
        if any(state.disabled is None for state in states):
            return None
        limit = self.resume_latency_us.get(cpu)
        return tuple(
            state
            for state in states
            if not state.disabled and (limit is None or state.exit_latency_us <= limit)
        )
