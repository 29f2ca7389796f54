"""Host-layer metric families: kernel knobs, isolation, huge pages, NUMA counters, interrupts, IRQ
placement, inter-socket traffic, per-container memory per NUMA node, and where numawatch itself runs.

Cardinality follows the CPUs that matter, never IRQs x CPUs: interrupt counters exist only for watched CPUs
(isolated, nohz_full, exclusively pinned) and four kinds, 4 series per watched CPU (node_exporter's interrupts
collector makes ~237k series on a 192-CPU host with 1,220 IRQs); IRQs appear as info series only when they are
delivered to a watched CPU, which on a well-tuned node is a handful of managed queues. Governors and isolation sets
are CPU lists in a label, not one series per CPU. Every family is emitted even when empty, so HELP and TYPE never
depend on the host.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from numawatch import selfpin
from numawatch.checks import Evaluation
from numawatch.collectors import Collectors, builds
from numawatch.cpuset import format_cpulist
from numawatch.inputs import (
    CPUFREQ_GOVERNORS,
    INTERRUPTS,
    INTERSOCKET,
    IRQ_AFFINITIES,
    IRQ_REQUESTED_MASKS,
    IRQBALANCE_DAEMON,
    IRQS,
    KERNEL,
    MEMORY_PLACEMENT,
    NUMASTAT,
    SELF,
    TOPOLOGY,
    WORKLOADS,
    exposes,
)
from numawatch.intent import Intent
from numawatch.irqplacement import device_irqs, managed_irqs
from numawatch.metrics.core import built, host_only, pod_rows
from numawatch.metrics.exposition import CounterRows, GaugeRows
from numawatch.model.interrupts import INTERRUPT_KINDS, Interrupts, Irqbalance, Irqs
from numawatch.model.kernel import InterSocketTraffic, KernelSettings, NumaCounters
from numawatch.perpod import no_context, pod_judge
from numawatch.workloads import Workload


def _size(size_kb: int) -> str:
    return f"{size_kb}kB"


# --------------------------------------------------------------------------------------------------- kernel knobs
@exposes("numawatch_kernel_setting_info", inputs=(KERNEL, TOPOLOGY, IRQS))
@host_only
def kernel_settings(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_kernel_setting_info",
        "Always 1, one series per kernel setting numawatch compares with intent: numa_balancing, swappiness, THP "
        "modes, the isolation parameters of the command line and what sysfs says took effect (CPU lists).",
        labels=("setting", "value"),
    )
    host = evaluation.host
    settings: KernelSettings | None = host.kernel
    rows: list[tuple[str, str]] = []
    if settings is not None:
        if settings.numa_balancing is not None:
            rows.append(("kernel.numa_balancing", str(settings.numa_balancing)))
        if settings.swappiness is not None:
            rows.append(("vm.swappiness", str(settings.swappiness)))
        if settings.thp_enabled is not None:
            rows.append(("transparent_hugepage/enabled", settings.thp_enabled))
        if settings.thp_defrag is not None:
            rows.append(("transparent_hugepage/defrag", settings.thp_defrag))
    topology = host.topology
    if topology is not None:
        isolation = topology.isolation
        for setting, cpus in (
            ("isolcpus", isolation.isolcpus),
            ("nohz_full", isolation.nohz_full),
            ("rcu_nocbs", isolation.rcu_nocbs),
            ("irqaffinity", isolation.irqaffinity),
            ("cpu/isolated", isolation.sys_isolated),
            ("cpu/nohz_full", isolation.sys_nohz_full),
        ):
            if cpus is not None:
                rows.append((setting, format_cpulist(cpus)))
        if isolation.isolcpus is not None:
            rows.append(("isolcpus_flags", ",".join(isolation.isolcpus_flags)))
    irqs: Irqs | None = host.irqs
    if irqs is not None and irqs.default_affinity is not None:
        rows.append(("irq/default_smp_affinity", format_cpulist(irqs.default_affinity)))
    for setting, value in rows:
        family.add_metric((setting, value), 1)
    return family


@exposes("numawatch_cpufreq_governor_info", inputs=(CPUFREQ_GOVERNORS,))
@host_only
def governors(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_cpufreq_governor_info",
        "Always 1, one series per cpufreq governor in use; cpus is the CPU list running it. Absent without cpufreq "
        "(virtual machines).",
        labels=("governor", "cpus"),
    )
    settings: KernelSettings | None = evaluation.host.kernel
    if settings is not None and settings.governors is not None:
        by_governor: dict[str, set[int]] = {}
        for cpu, governor in settings.governors.items():
            by_governor.setdefault(governor, set()).add(cpu)
        for governor, cpus in sorted(by_governor.items()):
            family.add_metric((governor, format_cpulist(cpus)), 1)
    return family


# --------------------------------------------------------------------------------------------------- memory
@exposes("numawatch_hugepages", inputs=(KERNEL,))
@host_only
def hugepages(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_hugepages",
        "Huge pages of the host per size (kB, as sysfs names them) and state: total (reserved pool), free, surplus "
        "and reserved (promised to a mapping, not yet faulted).",
        labels=("size", "state"),
    )
    settings: KernelSettings | None = evaluation.host.kernel
    if settings is not None:
        for size, pool in sorted(settings.hugepages.items()):
            for state, value in (
                ("total", pool.total),
                ("free", pool.free),
                ("surplus", pool.surplus),
                ("reserved", pool.reserved),
            ):
                if value is not None:
                    family.add_metric((_size(size), state), value)
    return family


@exposes("numawatch_numa_node_hugepages", inputs=(NUMASTAT,))
def node_hugepages(evaluation: Evaluation) -> Metric:
    family = GaugeRows(
        "numawatch_numa_node_hugepages",
        "Huge pages per NUMA node, size (kB) and state: total (reserved on this node), free and surplus.",
        labels=("numa_node", "size", "state"),
    )
    counters: NumaCounters | None = evaluation.host.numastat
    if counters is not None:
        for node_id, node in sorted(counters.nodes.items()):
            for size, pool in sorted(node.hugepages.items()):
                for state, value in (("total", pool.total), ("free", pool.free), ("surplus", pool.surplus)):
                    if value is not None:
                        family.rows.append((str(node_id), _size(size), state, value))
    return family


@exposes("numawatch_numastat_pages_total", inputs=(NUMASTAT,))
def numastat(evaluation: Evaluation) -> Metric:
    family = CounterRows(
        "numawatch_numastat_pages",
        "Page allocations per NUMA node as nodeN/numastat counts them (numa_hit, numa_miss, numa_foreign, "
        "interleave_hit, local_node, other_node): allocations, not accesses; a rising other_node on a GPU's node "
        "means threads on other nodes allocate there.",
        labels=("numa_node", "field"),
    )
    counters: NumaCounters | None = evaluation.host.numastat
    if counters is not None:
        for node_id, node in sorted(counters.nodes.items()):
            for name, value in sorted(node.numastat.items()):
                family.rows.append((str(node_id), name, value))
    return family


@exposes("numawatch_container_memory_numa_bytes", inputs=(WORKLOADS, MEMORY_PLACEMENT))
@builds("container_memory_numa")
def container_numa_memory(evaluation: Evaluation) -> Metric:
    family = GaugeRows(
        "numawatch_container_memory_numa_bytes",
        "Resident memory of the container on each NUMA node it has memory on (cgroup memory.numa_stat: anon+file "
        "on cgroup v2, total on v1), in bytes.",
        labels=("namespace", "pod", "pod_uid", "container", "numa_node"),
    )
    family.rows.extend(pod_rows(evaluation, NUMA_MEMORY_ROWS))
    return family


def numa_memory_rows(context: None, intent: Intent, workloads: tuple[Workload, ...]) -> tuple[tuple, ...]:
    """(namespace, pod, pod_uid, container, numa_node, bytes) for the containers of one pod (``pod_rows``): they read
    nothing but its workloads."""
    rows: list[tuple] = []
    seen: set[tuple[str, ...]] = set()
    for workload in workloads:
        numa_bytes = workload.numa_bytes
        if numa_bytes is None:
            continue
        namespace, pod, pod_uid, container = workload.subject
        for node, value in sorted(numa_bytes.items()):
            if not value:
                continue  # nodes the container has nothing on: absent rather than 0, to keep the series count down
            numa_node = str(node)
            key = (namespace, pod, pod_uid, container, numa_node)
            if key in seen:
                continue  # a restarted container's old cgroup under the same name: one series per label set
            seen.add(key)
            rows.append((*key, value))  # a row, not a Sample (~1,100 on a 384-CPU node)
    return tuple(rows)


NUMA_MEMORY_ROWS = pod_judge("metrics.pod_rows.container_numa_memory", context=no_context, judge=numa_memory_rows)


@exposes("numawatch_intersocket_bytes_total", inputs=(INTERSOCKET,))
def intersocket(evaluation: Evaluation) -> Metric:
    family = CounterMetricFamily(
        "numawatch_intersocket_bytes",
        "Bytes a socket sent over its inter-socket links since numawatch opened the uncore counters: Intel UPI data "
        "flits x 64/9 per link (link is the PMU, e.g. uncore_upi_0); AMD data-fabric xGMI outbound data summed over "
        'the links (link="xgmi_out"); absent where the PMUs cannot be read (see '
        'numawatch_source_up{source="intersocket"}).',
        labels=("socket", "link"),
    )
    traffic: InterSocketTraffic | None = evaluation.host.intersocket
    if traffic is not None:
        for link in traffic.links:
            family.add_metric(("" if link.socket is None else str(link.socket), link.link), link.bytes)
    return family


# --------------------------------------------------------------------------------------------------- interrupts
@exposes("numawatch_cpu_interrupts_total", inputs=(INTERRUPTS,))
@builds("cpu_interrupts")
@host_only
def cpu_interrupts(evaluation: Evaluation) -> Metric:
    family = CounterRows(
        "numawatch_cpu_interrupts",
        "Interrupts since boot on each watched CPU (isolated, nohz_full or held exclusively by a pinned container), "
        "by kind: device (IRQs), local_timer (the tick), ipi (rescheduling, function call, TLB shootdown, irq_work) "
        "and other.",
        labels=("cpu", "kind"),
    )
    interrupts: Interrupts | None = evaluation.host.interrupts
    if interrupts is not None:
        totals = interrupts.totals_per_kind()
        per_kind = [(kind, totals.get(kind, {})) for kind in INTERRUPT_KINDS]
        # Rows, not Samples: 4 per watched CPU, ~1,500 on a 384-CPU node.
        rows = family.rows
        for cpu in sorted(interrupts.watched):
            cpu_label = str(cpu)
            for kind, of_kind in per_kind:
                rows.append((cpu_label, kind, of_kind.get(cpu, 0)))
    return family


@exposes("numawatch_irq_affinity_info", inputs=(IRQ_AFFINITIES, IRQ_REQUESTED_MASKS, INTERRUPTS, TOPOLOGY))
@builds("irq_affinity")
@host_only
def irq_affinity(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_irq_affinity_info",
        "Always 1, one series per device IRQ delivered to a watched CPU: its name, requested and effective affinity "
        "(CPU lists) and whether the kernel manages it.",
        labels=("irq", "name", "affinity", "effective", "managed"),
    )
    host = evaluation.host
    interrupts: Interrupts | None = host.interrupts
    irqs: Irqs | None = host.irqs
    if interrupts is None or irqs is None or not interrupts.watched:
        return family
    managed = managed_irqs(host)
    if managed is None:  # None only without the irqs source, ruled out above
        return family
    watched = interrupts.watched
    for row, _, found, delivered in device_irqs(host):  # joined once per Host with the placement check
        # isdisjoint: the same test as an empty intersection, without building one per IRQ (2,000 on a large node)
        if delivered.isdisjoint(watched):
            continue
        family.add_metric(
            (
                row.key,
                row.name,
                format_cpulist(found.affinity or ()),
                "" if found.effective is None else format_cpulist(found.effective),
                "true" if managed.managed(found.irq) else "false",
            ),
            1,
        )
    return family


@exposes("numawatch_irqbalance_running", inputs=(IRQBALANCE_DAEMON,))
@host_only
def irqbalance(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_irqbalance_running",
        "1 when an irqbalance process runs on the host, 0 when none does; absent when that could not be read.",
    )
    state: Irqbalance | None = evaluation.host.irqbalance
    if state is not None:
        family.add_metric((), 1 if state.running else 0)
    return family


# --------------------------------------------------------------------------------------------------- numawatch
@exposes("numawatch_self_cpus", inputs=(SELF, TOPOLOGY))
def self_cpus(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_self_cpus",
        "CPUs numawatch itself may run on (its affinity); cpus is the CPU list and housekeeping says whether they "
        "are all housekeeping CPUs (empty when the topology is unknown).",
        labels=("cpus", "housekeeping"),
    )
    cpus = selfpin.current_cpus()
    topology = evaluation.host.topology
    housekeeping = ""
    if topology is not None:
        housekeeping = "true" if cpus <= selfpin.housekeeping_cpus(topology) else "false"
    family.add_metric((format_cpulist(cpus), housekeeping), len(cpus))
    return family


BUILDERS = (
    kernel_settings,
    governors,
    hugepages,
    node_hugepages,
    numastat,
    container_numa_memory,
    intersocket,
    cpu_interrupts,
    irq_affinity,
    irqbalance,
    self_cpus,
)


def families(evaluation: Evaluation, collectors: Collectors | None = None) -> Iterable[Metric]:
    """Every host-layer family for one evaluation but those of collectors turned off; a family whose builder fails
    is left out (and logged)."""
    return built(BUILDERS, evaluation, collectors)
