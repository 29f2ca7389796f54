"""Checks of kernel tuning against intent: NUMA balancing, THP, swappiness, cpufreq, isolation, huge pages.

Knobs h3, h4/8, h5, h6/h7, h9 and h10 of the reference profile (DOMAIN.md). Each compares what the kernel reports
(the kernel, topology and numastat sources) with ``intent.kernel``; a feature the kernel does not have at all (no
THP, no NUMA balancing, no cpufreq in a VM) cannot be wrong: the check is "not applicable" and says what is absent.
A setting that could not be read (malformed, or missing from a partial tree) makes the check "not evaluated" with
the file and the reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from numawatch.checks.check import Check, Finding, NotApplicable, NotEvaluated, partial_topology, require, require_known
from numawatch.cpuset import EMPTY, CPUSet, format_cpulist
from numawatch.host import Host
from numawatch.inputs import CPUFREQ_GOVERNORS, KERNEL, NUMASTAT, TOPOLOGY
from numawatch.intent import Intent
from numawatch.model.kernel import KernelSettings, NumaCounters
from numawatch.model.topology import Topology
from numawatch.sources.kernel import NUMA_BALANCING as NO_NUMA_BALANCING
from numawatch.sources.kernel import THP as NO_THP


def _unreadable(settings: KernelSettings, setting: str) -> None:
    problem = settings.problems.get(setting)
    if problem is not None:
        raise NotEvaluated(problem)


def size_label(size_kb: int) -> str:
    """The ``size`` label of a huge page size, as sysfs names its directory (``2048kB``, ``1048576kB``)."""
    return f"{size_kb}kB"


# --------------------------------------------------------------------------------------------- numa_balancing
_BALANCING_MODES = {0: "disabled", 1: "NUMA_BALANCING_NORMAL", 2: "memory tiering", 3: "normal and memory tiering"}


def check_numa_balancing(host: Host, intent: Intent) -> Iterator[Finding]:
    settings: KernelSettings = require(host, "kernel")
    _unreadable(settings, "numa_balancing")
    expected = intent.kernel.numa_balancing
    value = settings.numa_balancing
    if value is None:
        if NO_NUMA_BALANCING not in settings.absent_features:
            raise NotEvaluated("kernel.numa_balancing could not be read: proc/sys/kernel/numa_balancing is missing")
        if expected == 0:
            raise NotApplicable(
                "the kernel has no NUMA balancing (no kernel.numa_balancing: built without CONFIG_NUMA_BALANCING), so "
                "it cannot migrate pages of pinned workloads"
            )
        raise NotEvaluated("kernel.numa_balancing does not exist (kernel built without NUMA balancing)")
    if value == expected:
        return
    meaning = _BALANCING_MODES.get(value, "unknown mode")
    yield NUMA_BALANCING.finding(
        intent,
        {"setting": "kernel.numa_balancing", "value": str(value), "expected": str(expected)},
        f"kernel.numa_balancing is {value} ({meaning}), intent is {expected}: the kernel unmaps pages of pinned "
        "workloads to sample their accesses (NUMA hinting faults) and migrates them, adding latency and undoing "
        "membind",
        f"sysctl -w kernel.numa_balancing={expected} and persist it in /etc/sysctl.d/ (or boot with "
        f"numa_balancing={'disable' if expected == 0 else 'enable'})",
    )


# --------------------------------------------------------------------------------------------- THP
def _thp_check(setting: str, attr: str, allowed_attr: str, why: str) -> Check:
    def run(host: Host, intent: Intent) -> Iterator[Finding]:
        settings: KernelSettings = require(host, "kernel")
        _unreadable(settings, attr)
        value = getattr(settings, attr)
        if value is None:
            if NO_THP in settings.absent_features:
                raise NotApplicable(
                    "the kernel has no THP (no sys/kernel/mm/transparent_hugepage: built without "
                    "CONFIG_TRANSPARENT_HUGEPAGE, as PREEMPT_RT kernels are)"
                )
            raise NotEvaluated(f"transparent_hugepage/{setting} could not be read: the file is missing")
        allowed: frozenset[str] = getattr(intent.kernel, allowed_attr)
        if value in allowed:
            return
        expected = ",".join(sorted(allowed))
        pick = sorted(allowed)[0]
        yield CHECK_BY_ID[attr].finding(
            intent,
            {"setting": f"transparent_hugepage/{setting}", "value": value, "expected": expected},
            f"transparent_hugepage/{setting} is {value!r}, intent allows {expected}: {why}",
            f"echo {pick} > /sys/kernel/mm/transparent_hugepage/{setting} and make it persistent "
            f"({'transparent_hugepage=' + pick + ' on the kernel command line, ' if setting == 'enabled' else ''}"
            "a tuned profile or a systemd unit)",
        )

    return Check(
        id=attr,
        severity="warning",
        summary=f"Transparent huge pages {setting} mode is not one the intent allows.",
        remediation=f"write an allowed mode to /sys/kernel/mm/transparent_hugepage/{setting} and persist it",
        run=run,
        inputs=(KERNEL,),
        knob="h5",
    )


# --------------------------------------------------------------------------------------------- swappiness
def check_swappiness(host: Host, intent: Intent) -> Iterator[Finding]:
    settings: KernelSettings = require(host, "kernel")
    _unreadable(settings, "swappiness")
    value = settings.swappiness
    expected = intent.kernel.swappiness
    if value is None:
        raise NotEvaluated("vm.swappiness does not exist under proc/sys")
    if value == expected:
        return
    yield SWAPPINESS.finding(
        intent,
        {"setting": "vm.swappiness", "value": str(value), "expected": str(expected)},
        f"vm.swappiness is {value}, intent is {expected}: the kernel may swap out pages of serving processes "
        "(pinned host buffers excepted) instead of dropping page cache, and a swapped-in page stalls its thread",
        f"sysctl -w vm.swappiness={expected} and persist it in /etc/sysctl.d/",
    )


# --------------------------------------------------------------------------------------------- cpufreq
def check_governor(host: Host, intent: Intent) -> Iterator[Finding]:
    settings: KernelSettings = require(host, "kernel")
    _unreadable(settings, "cpufreq_governor")
    if settings.governors is None:
        # Virtual machines and kernels without cpufreq: the hypervisor or the firmware decides the clocks.
        raise NotApplicable("no cpufreq policy on this host (no sys/devices/system/cpu/cpufreq/policy*)")
    expected = intent.kernel.cpufreq_governor
    by_governor: dict[str, set[int]] = {}
    for cpu, governor in settings.governors.items():
        if governor != expected:
            by_governor.setdefault(governor, set()).add(cpu)
    for governor, cpus in sorted(by_governor.items()):
        cpulist = format_cpulist(cpus)
        yield GOVERNOR.finding(
            intent,
            {"governor": governor, "cpus": cpulist, "expected": expected},
            f"CPUs {cpulist} run the {governor!r} cpufreq governor, intent is {expected!r}: a CPU that clocks down "
            "between short CUDA launches wakes up slow, which shows as launch latency and GPU bubbles",
            f"cpupower -c {cpulist} frequency-set -g {expected} and persist it (tuned profile, or a unit writing "
            "scaling_governor at boot)",
        )


# --------------------------------------------------------------------------------------------- isolation
def _cmdline_or_sys(cmdline: CPUSet | None, sysfs: CPUSet | None) -> CPUSet | None:
    return cmdline if cmdline is not None else sysfs


def isolation_sets(topology: Topology) -> tuple[CPUSet, CPUSet, CPUSet, CPUSet]:
    """(isolcpus, nohz_full, rcu_nocbs as given, RCU-offloaded in effect), all within the present CPUs.

    The command line wins, with what sysfs reports as a fallback. The kernel offloads RCU callbacks of nohz_full CPUs
    too (kernel/rcu/tree_nocb.h), so the offloaded set is rcu_nocbs plus nohz_full.
    """
    present = frozenset(topology.cpus)
    isolation = topology.isolation
    isolcpus = (_cmdline_or_sys(isolation.isolcpus, isolation.sys_isolated) or EMPTY) & present
    nohz = (_cmdline_or_sys(isolation.nohz_full, isolation.sys_nohz_full) or EMPTY) & present
    rcu = (isolation.rcu_nocbs or EMPTY) & present
    return isolcpus, nohz, rcu, rcu | nohz


def check_isolation_params(host: Host, intent: Intent) -> Iterator[Finding]:
    # The check compares the command line's parameters: without the file it would state values it never read.
    topology: Topology = require_known(partial_topology(host), "cmdline", "isolated", "nohz_full")
    isolcpus, nohz, rcu, offloaded = isolation_sets(topology)
    if not (isolcpus or nohz or rcu):
        return  # no isolation asked at all: nothing to disagree
    # (setting, CPUs in effect, CPUs it names itself, effect when an isolated CPU is missing, effect when extra,
    # how to show it). Extra RCU-offloaded CPUs that only nohz_full put there are the nohz_full finding's business.
    cases = (
        (
            "nohz_full",
            nohz,
            nohz,
            "still take the scheduler tick (up to HZ interrupts per second while running)",
            "are not isolated from the scheduler's load balancing, so other tasks may land on them",
            f"nohz_full={format_cpulist(nohz)}",
        ),
        (
            "rcu_nocbs",
            offloaded,
            rcu,
            "still run RCU callbacks themselves (softirq work at unpredictable times)",
            "have their RCU callbacks offloaded although they are not isolated",
            f"rcu_nocbs={format_cpulist(rcu)}" + (f" (plus nohz_full {format_cpulist(nohz)})" if nohz else ""),
        ),
    )
    for setting, cpus, named, missing_effect, extra_effect, shown in cases:
        missing = isolcpus - cpus
        extra = named - isolcpus
        if not missing and not extra:
            continue
        parts = []
        if missing:
            parts.append(f"isolated CPUs {format_cpulist(missing)} are not in it and {missing_effect}")
        if extra:
            parts.append(f"CPUs {format_cpulist(extra)} are in it but not in isolcpus and {extra_effect}")
        yield ISOLATION.finding(
            intent,
            {
                "setting": setting,
                "cpus": format_cpulist(missing | extra),
                "value": format_cpulist(cpus),
                "expected": format_cpulist(isolcpus),
            },
            f"isolcpus={format_cpulist(isolcpus) or '(absent)'} but {shown}: " + "; ".join(parts),
            f"boot with the same CPU list in isolcpus=, nohz_full= and rcu_nocbs= "
            f"({format_cpulist(isolcpus | cpus)} or the set you mean to isolate) and reboot",
        )


# --------------------------------------------------------------------------------------------- huge pages
def _asks(host: Host, intent: Intent) -> tuple[dict[int, tuple[int, str]], dict[tuple[int, int], tuple[int, str]]]:
    """Huge page requests: size -> (pages, who asked) in total, and (node, size) -> (pages, who asked)."""
    totals: dict[int, tuple[int, str]] = {}
    per_node: dict[tuple[int, int], tuple[int, str]] = {}

    def ask(table: dict, key: Any, pages: int, who: str) -> None:
        if pages > table.get(key, (0, ""))[0]:
            table[key] = (pages, who)

    topology = host.topology
    settings: KernelSettings | None = host.kernel
    if topology is not None:
        for size, pages in topology.isolation.cmdline_hugepages.items():
            ask(totals, size, pages, "the kernel command line")
    if settings is not None:
        for node, sizes in settings.cmdline_hugepages_per_node.items():
            for size, pages in sizes.items():
                ask(per_node, (node, size), pages, "the kernel command line")
    for size, pages in intent.kernel.hugepages.items():
        ask(totals, size, pages, f"the intent ({intent.source})")
    for node, sizes in intent.kernel.hugepages_per_node.items():
        for size, pages in sizes.items():
            ask(per_node, (node, size), pages, f"the intent ({intent.source})")
    return totals, per_node


def _reserved_total(host: Host, size: int) -> int | None:
    settings: KernelSettings | None = host.kernel
    if settings is not None and size in settings.hugepages:
        return settings.hugepages[size].total
    topology = host.topology
    if topology is not None and topology.nodes:
        require_known(topology, "hugepages")
        return sum(node.hugepages_total.get(size, 0) for node in topology.nodes.values())
    if settings is not None and settings.hugepages:
        return 0  # the kernel lists its sizes and this one is not among them
    return None


def _reserved_on_node(host: Host, node: int, size: int) -> int | None:
    counters: NumaCounters | None = host.numastat
    if counters is not None and node in counters.nodes:
        if counters.nodes[node].hugepages_problem is not None:
            raise NotEvaluated(counters.nodes[node].hugepages_problem)
        pool = counters.nodes[node].hugepages.get(size)
        return pool.total if pool is not None else 0
    topology = host.topology
    if topology is not None and node in topology.nodes:
        require_known(topology, "hugepages")
        return topology.nodes[node].hugepages_total.get(size, 0)
    return None


def check_hugepages(host: Host, intent: Intent) -> Iterator[Finding]:
    if host.kernel is None and host.topology is None:
        raise NotEvaluated(f"needs the kernel or topology source: {host.down_reason('kernel')}")
    totals, per_node = _asks(host, intent)
    for size, (asked, who) in sorted(totals.items()):
        reserved = _reserved_total(host, size)
        if reserved is None:
            raise NotEvaluated(f"the {size_label(size)} huge page pool could not be read")
        if reserved >= asked:
            continue
        yield HUGEPAGES.finding(
            intent,
            {"size": size_label(size), "value": str(reserved), "expected": str(asked)},
            f"{reserved} huge pages of {size_label(size)} are reserved, {who} asks for {asked}: pods requesting "
            "hugepages will not fit, or their buffers fall back to small pages",
            _hugepage_remediation(size, asked, None),
        )
    for (node, size), (asked, who) in sorted(per_node.items()):
        reserved = _reserved_on_node(host, node, size)
        if reserved is None:
            raise NotEvaluated(f"huge pages of NUMA node {node} could not be read (no such node?)")
        if reserved >= asked:
            continue
        yield HUGEPAGES.finding(
            intent,
            {"size": size_label(size), "numa_node": str(node), "value": str(reserved), "expected": str(asked)},
            f"NUMA node {node} has {reserved} huge pages of {size_label(size)} reserved, {who} asks for {asked}: "
            "buffers meant for this node's GPUs and threads will come from another node or from small pages",
            _hugepage_remediation(size, asked, node),
        )


def _hugepage_remediation(size: int, pages: int, node: int | None) -> str:
    if node is None:
        where = f"/sys/kernel/mm/hugepages/hugepages-{size}kB/nr_hugepages"
    else:
        where = f"/sys/devices/system/node/node{node}/hugepages/hugepages-{size}kB/nr_hugepages"
    gigantic = ""
    if size >= 1 << 20:
        gigantic = " (1 GiB pages are only reliably reserved at boot: hugepagesz=1G hugepages=...)"
    return f"reserve them at boot on the kernel command line, or echo {pages} > {where} early after boot{gigantic}"


# --------------------------------------------------------------------------------------------- registry
NUMA_BALANCING = Check(
    id="kernel_numa_balancing",
    severity="warning",
    summary="Automatic NUMA balancing (kernel.numa_balancing) is not as intended (0: off).",
    remediation="sysctl -w kernel.numa_balancing=0 and persist it in /etc/sysctl.d/",
    run=check_numa_balancing,
    inputs=(KERNEL,),
    knob="h3",
)
THP_ENABLED = _thp_check(
    "enabled",
    "thp_enabled",
    "thp_enabled",
    "with 'always' every anonymous mapping may be backed by huge pages at fault time, with compaction stalls and "
    "khugepaged collapsing pages under the serving threads",
)
THP_DEFRAG = _thp_check(
    "defrag",
    "thp_defrag",
    "thp_defrag",
    "'always' stalls page faults in direct reclaim and compaction, 'defer' and 'defer+madvise' wake kswapd and "
    "kcompactd to do that work on some CPU",
)
SWAPPINESS = Check(
    id="vm_swappiness",
    severity="info",
    summary="vm.swappiness is not the intended value (0).",
    remediation="sysctl -w vm.swappiness=0 and persist it in /etc/sysctl.d/",
    run=check_swappiness,
    inputs=(KERNEL,),
    knob="h10",
)
GOVERNOR = Check(
    id="cpufreq_governor",
    severity="warning",
    summary="CPUs run a cpufreq governor other than the intended one (performance); silent where there is no cpufreq.",
    remediation="cpupower frequency-set -g performance on the CPUs named, and persist it",
    run=check_governor,
    inputs=(CPUFREQ_GOVERNORS,),
    knob="h9",
)
ISOLATION = Check(
    id="isolation_params_mismatch",
    severity="warning",
    summary="isolcpus, nohz_full and rcu_nocbs name different CPU sets.",
    remediation="give isolcpus=, nohz_full= and rcu_nocbs= the same CPU list and reboot",
    run=check_isolation_params,
    inputs=(TOPOLOGY,),
    knob="h7",
)
HUGEPAGES = Check(
    id="hugepages_shortfall",
    severity="warning",
    summary="Fewer huge pages are reserved (per size, per NUMA node where asked) than the command line or intent asks.",
    remediation="reserve the huge pages at boot (hugepagesz=/hugepages= on the command line) or through sysfs",
    run=check_hugepages,
    inputs=(KERNEL, NUMASTAT, TOPOLOGY),
    knob="h4",
)

CHECKS: tuple[Check, ...] = (NUMA_BALANCING, THP_ENABLED, THP_DEFRAG, SWAPPINESS, GOVERNOR, ISOLATION, HUGEPAGES)
CHECK_BY_ID: Mapping[str, Check] = {check.id: check for check in CHECKS}
