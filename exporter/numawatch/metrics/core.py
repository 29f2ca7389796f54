"""The core metric families: drift findings (``drift``), check and source health, numawatch itself, and the NUMA
inventory.

Every family is built fresh from one ``Evaluation`` (client_python's custom-collector idiom, and prometheus/docs
writing_exporters: "create new metrics each time"), so a fixed drift or a deleted pod's series are simply absent
from the next exposition instead of lingering in a registry. Families with nothing to report are still emitted,
empty, so the HELP and TYPE lines (and docs/metrics.md, which a test keeps in step with them) never depend on the
host's state.

Cardinality is bounded by the host's shape, never by activity: one series per CPU, per NUMA node, per container
and NUMA node, per GPU, per finding; never per PID or per IRQ and CPU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from numawatch import buildinfo
from numawatch.checks import Evaluation
from numawatch.collectors import Collectors, builds
from numawatch.cpuset import format_cpulist
from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.inputs import INTENT, KUBELET_CONFIG, READINGS, SELF, TOPOLOGY, WORKLOADS, declaration_of, exposes
from numawatch.intent import Intent
from numawatch.metrics import drift as drift_families
from numawatch.metrics.exposition import GaugeRows
from numawatch.model.topology import Topology
from numawatch.perpod import PodJudge, pod_judge, pod_values
from numawatch.workloads import Workload, build_workloads

log = logging.getLogger(__name__)

CPU_INFO_LABELS = ("cpu", "socket", "core", "numa_node", "isolated", "reserved", "online")
CONTAINER_CPUS_LABELS = ("namespace", "pod", "pod_uid", "container", "numa_node", "qos", "exclusive")
GPU_INFO_LABELS = ("gpu", "uuid", "numa_node", "model", "namespace", "pod", "container", "vendor")
KUBELET_CONFIG_LABELS = (
    "cpu_manager_policy",
    "topology_manager_policy",
    "topology_manager_scope",
    "memory_manager_policy",
    "reserved_cpus",
    "flavor",
)

# An evaluation reads a few thousand small files: milliseconds on a small node, meant to stay well under a second
# on a 384-CPU host with ~860 container cgroups. Buckets reach past the 15 s interval so an overrun shows up.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def flag(value: bool | None) -> str:
    """A boolean label value; empty when unknown (Prometheus treats an empty label as absent)."""
    if value is None:
        return ""
    return "true" if value else "false"


def _text(value: object) -> str:
    return "" if value is None else str(value)


@dataclass
class EvaluationStats:
    """What spans evaluations: their count and duration histogram. The server owns one; nothing is global."""

    count: int = 0
    duration_sum: float = 0.0
    bucket_counts: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    last_timestamp: float | None = None
    # Unix time the counting began: the OpenMetrics created timestamp of the counter and histogram.
    created: float = field(default_factory=time.time)

    def observe(self, duration_seconds: float, timestamp: float) -> None:
        self.count += 1
        self.duration_sum += duration_seconds
        self.last_timestamp = timestamp
        for index, bound in enumerate(DURATION_BUCKETS):
            if duration_seconds <= bound:
                self.bucket_counts[index] += 1

    @classmethod
    def of(cls, evaluation: Evaluation) -> EvaluationStats:
        """Stats for a one-off render: this evaluation alone (reading the sources plus running the checks)."""
        stats = cls(created=evaluation.started)
        reading = sum(status.duration_seconds for status in evaluation.host.statuses.values())
        stats.observe(reading + evaluation.duration_seconds, evaluation.started)
        return stats


# ------------------------------------------------------------------------------------------------- sources
@exposes("numawatch_source_up", inputs=(READINGS,))
def source_up(evaluation: Evaluation) -> Metric:
    family = GaugeRows(
        "numawatch_source_up",
        "1 when the source was read in the last evaluation, 0 when it is down (numawatch check shows why).",
        labels=("source",),
    )
    family.rows.extend([(status.name, 1 if status.up else 0) for status in evaluation.host.statuses.values()])
    return family


@exposes("numawatch_source_duration_seconds", inputs=(READINGS,))
def source_duration(evaluation: Evaluation) -> Metric:
    family = GaugeRows(
        "numawatch_source_duration_seconds",
        "Time the last evaluation spent reading the source (near 0 when a cached result was reused).",
        labels=("source",),
    )
    family.rows.extend([(status.name, status.duration_seconds) for status in evaluation.host.statuses.values()])
    return family


# ------------------------------------------------------------------------------------------------- numawatch itself
@exposes("numawatch_build_info", inputs=(SELF,))
def build_info(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_build_info",
        "Always 1; the numawatch version, the git revision it was built from (unknown when the installation does "
        "not say) and the Python version are labels.",
        labels=("version", "revision", "python_version"),
    )
    family.add_metric(buildinfo.labels(), 1)
    return family


@exposes("numawatch_intent_info", inputs=(INTENT,))
def intent_info(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_intent_info",
        "Always 1; source is the intent file the findings are judged against, or 'reference profile'.",
        labels=("source",),
    )
    family.add_metric((evaluation.intent.source,), 1)
    return family


@exposes("numawatch_evaluations_total", inputs=(SELF,))
def evaluations_total(stats: EvaluationStats) -> Metric:
    return CounterMetricFamily(
        "numawatch_evaluations", "Evaluations (read every source, run every check) since numawatch started.",
        value=stats.count, created=stats.created,
    )


@exposes("numawatch_evaluation_duration_seconds", inputs=(SELF,))
def evaluation_duration(stats: EvaluationStats) -> Metric:
    cumulative = []
    for bound, count in zip(DURATION_BUCKETS, stats.bucket_counts, strict=True):
        cumulative.append((_le(bound), count))
    cumulative.append(("+Inf", stats.count))
    return HistogramMetricFamily(
        "numawatch_evaluation_duration_seconds",
        "Wall time of an evaluation: reading every source and running every check.",
        buckets=cumulative,
        sum_value=stats.duration_sum,
    )


def _le(bound: float) -> str:
    return repr(float(bound))


@exposes("numawatch_last_evaluation_timestamp_seconds", inputs=(SELF,))
def last_evaluation(stats: EvaluationStats) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_last_evaluation_timestamp_seconds",
        "Unix time the last evaluation finished; the exposition is refreshed once per evaluation, "
        "not per scrape, so this says how old it is.",
    )
    if stats.last_timestamp is not None:
        family.add_metric((), stats.last_timestamp)
    return family


# ------------------------------------------------------------------------------------------------- inventory
@exposes("numawatch_cpu_info", inputs=(TOPOLOGY, KUBELET_CONFIG))
@builds("cpu_info")
def cpu_info(evaluation: Evaluation) -> Metric:
    return _cpu_info(evaluation.host)


# A row per CPU made of the topology and the kubelet's reserved CPUs alone: an earlier reading's family while neither
# source moved (hundreds of rows on a large node, rarely changed).
@derivation("metrics.cpu_info", inputs=(TOPOLOGY, KUBELET_CONFIG))
def _cpu_info(host: Host) -> Metric:
    family = GaugeRows(
        "numawatch_cpu_info",
        "Always 1, one series per CPU: the map of CPUs to sockets, cores and NUMA nodes, and whether each is "
        "isolated (isolcpus), in the kubelet's reserved CPUs (empty when unknown) and online.",
        labels=CPU_INFO_LABELS,
    )
    topology = host.topology
    if topology is None:
        return family
    # Unknown (empty label) when isolcpus= is absent and cpu/isolated was unreadable.
    isolated = None if topology.problem("isolated") else topology.isolated
    config = host.kubelet_config
    reserved = None if config is None else (config.reserved_cpus or frozenset())
    rows = family.rows
    for cpu_id in sorted(topology.cpus):
        cpu = topology.cpus[cpu_id]
        rows.append(
            (
                str(cpu_id),
                _text(cpu.socket),
                _text(cpu.core),
                _text(cpu.numa_node),
                flag(None if isolated is None else cpu_id in isolated),
                flag(None if reserved is None else cpu_id in reserved),
                flag(cpu.online),
                1,
            )
        )
    return family


@exposes("numawatch_numa_node_cpus", inputs=(TOPOLOGY,))
def numa_node_cpus(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_numa_node_cpus", "Online CPUs on the NUMA node.", labels=("numa_node",)
    )
    topology = evaluation.host.topology
    if topology is not None:
        for node_id in topology.node_ids:
            family.add_metric((str(node_id),), len(topology.nodes[node_id].cpus))
    return family


@exposes("numawatch_kubelet_config_info", inputs=(KUBELET_CONFIG,))
def kubelet_config_info(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_kubelet_config_info",
        "Always 1; the kubelet's effective CPU, Topology and Memory Manager settings (kubelet defaults applied) "
        "are labels. Absent when the kubelet configuration could not be read.",
        labels=KUBELET_CONFIG_LABELS,
    )
    config = evaluation.host.kubelet_config
    if config is not None:
        family.add_metric(
            (
                config.cpu_manager_policy,
                config.topology_manager_policy,
                config.topology_manager_scope,
                config.memory_manager_policy,
                format_cpulist(config.reserved_cpus or ()),
                config.flavor,
            ),
            1,
        )
    return family


@exposes("numawatch_container_cpus", inputs=(WORKLOADS,))
@builds("container_cpus")
def container_cpus(evaluation: Evaluation) -> Metric:
    family = GaugeRows(
        "numawatch_container_cpus",
        "CPUs in the container's effective cpuset, per NUMA node they sit on; exclusive is whether the kubelet's "
        "CPU Manager gave the container exclusive CPUs.",
        labels=CONTAINER_CPUS_LABELS,
    )
    family.rows.extend(_container_cpu_rows(evaluation))
    return family


@exposes("numawatch_gpu_info", inputs=(WORKLOADS,))
def gpu_info(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_gpu_info",
        "Always 1, one series per GPU or accelerator: its PCI address, stable id (UUID or serial), NUMA node, model "
        "and vendor, and the container the kubelet's device checkpoint assigns it to (empty when none).",
        labels=GPU_INFO_LABELS,
    )
    for row in _gpu_rows(evaluation):
        family.add_metric(row, 1)
    return family


def _container_cpu_rows(evaluation: Evaluation) -> tuple[tuple, ...]:
    """(namespace, pod, pod_uid, container, numa_node, qos, exclusive, count) per container and NUMA node."""
    return pod_rows(evaluation, CONTAINER_CPU_ROWS)


@dataclass(frozen=True)
class CpuPlaces:
    """What every pod's ``container_cpus`` rows read besides its workloads (``cpu_rows``' context)."""

    # The topology's generation as well: a topology read again makes every pod's rows again. Under one generation it
    # is one object (a HostReader hands out the last one while a new reading equals it), so comparing it costs little.
    generation: int | None
    topology: Topology | None
    # Without cpu_manager_state nobody knows whether CPUs are exclusive: say so with an empty label, not "false".
    exclusive_known: bool
    # Each distinct cpuset split per node once: most containers share a handful of cpusets (every Burstable and
    # BestEffort one holds the same shared pool, and the cgroups source hands out one set object per distinct list).
    splits: dict[frozenset[int], list[tuple[str, int]]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def per_node(self, cpus: frozenset[int]) -> list[tuple[str, int]]:
        per_node = self.splits.get(cpus)
        if per_node is None:
            per_node = self.splits[cpus] = sorted(_cpus_per_node(cpus, self.topology).items())
        return per_node


def cpu_places(host: Host, intent: Intent) -> CpuPlaces:
    state = host.kubelet_state
    return CpuPlaces(host.generation("topology"), host.topology, state is not None and state.cpu is not None)


def cpu_rows(places: CpuPlaces, intent: Intent, workloads: tuple[Workload, ...]) -> tuple[tuple, ...]:
    """The ``container_cpus`` rows of one pod's containers."""
    rows: list[tuple] = []
    seen: set[tuple[str, ...]] = set()
    for workload in workloads:
        cpus = workload.cpus
        if cpus is None:
            continue
        namespace, pod, uid, container = workload.subject
        exclusive = flag(workload.pinned if places.exclusive_known else None)
        for node, count in places.per_node(cpus):
            values = (namespace, pod, uid, container, node, workload.qos, exclusive)
            # A restarted container can leave its old cgroup behind for a moment under the same name; one series
            # per label set is all Prometheus accepts, so the first instance listed wins.
            if values in seen:
                continue
            seen.add(values)
            rows.append((*values, count))
    return tuple(rows)


def pod_rows(evaluation: Evaluation, rows: PodJudge[Any, tuple[tuple, ...]]) -> tuple[tuple, ...]:
    """The rows of a per-container family, made pod by pod by the judge ``rows`` (numawatch.perpod): the rows of one
    pod (label values, pod UID third, then the value; one row per label set).

    Making the rows of every container of a large node again is a noticeable part of a render, and in serve most
    pods' workloads were joined under the same generations as at the previous reading: such a pod gets the rows
    made then (``perpod.pod_values``).
    """
    made: list[tuple] = []
    uids: set[str] = set()
    for block in pod_values(evaluation.host, evaluation.intent, rows):
        if not block:
            continue
        uid = block[0][2]
        if uid in uids:
            # Rows of pods with other UIDs never share a label set (pod_uid is one). Two pod cgroups with one UID (an
            # old one lingering) can: the first listed wins, as it does within a pod.
            taken = {row[:-1] for row in made}
            block = tuple(row for row in block if row[:-1] not in taken)
        uids.add(uid)
        made.extend(block)
    return tuple(made)


CONTAINER_CPU_ROWS = pod_judge(
    "metrics.pod_rows.container_cpus", context=cpu_places, judge=cpu_rows, reads_numa_bytes=False
)


def _cpus_per_node(cpus: frozenset[int], topology: Topology | None) -> dict[str, int]:
    """How many of ``cpus`` sit on each NUMA node ("" for CPUs no node lists)."""
    per_node: dict[str, int] = {}
    rest = cpus
    if topology is not None:
        # Set intersections instead of a lookup per CPU: ~860 containers x up to 384 CPUs every evaluation.
        for node_id in topology.node_ids:
            count = len(cpus & topology.nodes[node_id].cpus)
            if count:
                per_node[str(node_id)] = count
            rest = rest - topology.nodes[node_id].cpus
    for cpu in rest:  # offline or unknown CPUs: rare, ask the CPU itself
        key = _text(topology.node_of(cpu) if topology is not None else None)
        per_node[key] = per_node.get(key, 0) + 1
    return per_node


def _gpu_rows(evaluation: Evaluation) -> Iterator[tuple[str, ...]]:
    """(gpu, uuid, numa_node, model, namespace, pod, container, vendor) per GPU and holder.

    Every GPU on the PCI bus appears (with empty holder labels when unassigned), plus any GPU the device checkpoint
    assigns that sysfs does not show, so a plugin/host disagreement is visible too. A time-sliced GPU shared by
    several containers has one series per holder.
    """
    host = evaluation.host
    holders: dict[str, list[tuple[str, str, str]]] = {}
    unmatched: dict[tuple[str, str, str, str], list[tuple[str, str, str]]] = {}
    for workload in build_workloads(host, evaluation.intent):
        if not workload.gpus:
            continue  # most containers hold no GPU
        holder = (workload.labels["namespace"], workload.labels["pod"], workload.labels["container"])
        for gpu in workload.gpus:
            if gpu.pci_address is not None:
                holders.setdefault(gpu.pci_address, []).append(holder)
            else:
                key = (gpu.label, gpu.uuid or "", _text(gpu.numa_node), gpu.plugin_vendor or "")
                unmatched.setdefault(key, []).append(holder)
    seen: set[tuple[str, ...]] = set()
    rows: list[tuple[str, ...]] = []
    inventory = host.gpus.gpus if host.gpus is not None else ()
    for device in sorted(inventory, key=lambda d: d.pci_address):
        columns = (device.pci_address, device.uuid or "", _text(device.numa_node), device.model or "")
        for holder in holders.get(device.pci_address) or [("", "", "")]:
            rows.append((*columns, *holder, device.vendor))
    for (label, uuid, node, vendor), held_by in sorted(unmatched.items()):
        for holder in held_by:
            rows.append((label, uuid, node, "", *holder, vendor))
    for row in rows:
        if row not in seen:
            seen.add(row)
            yield row


# ------------------------------------------------------------------------------------------------- composition
PER_EVALUATION: tuple[Callable[[Evaluation], Metric], ...] = (
    drift_families.drift,
    drift_families.drift_info,
    drift_families.drift_findings,
    drift_families.check_evaluated,
    drift_families.check_applicable,
    source_up,
    source_duration,
    build_info,
    intent_info,
    cpu_info,
    numa_node_cpus,
    container_cpus,
    gpu_info,
    kubelet_config_info,
)
ACROSS_EVALUATIONS: tuple[Callable[[EvaluationStats], Metric], ...] = (
    evaluations_total,
    evaluation_duration,
    last_evaluation,
)


def safely(build: Callable[..., Metric | Iterable[Metric]], *args: object) -> list[Metric]:
    """Run one family builder; a bug in it costs that family (logged), never the whole exposition."""
    return list(_attempt(build, *args)[1])


def _attempt(build: Callable[..., Metric | Iterable[Metric]], *args: object) -> tuple[bool, tuple[Metric, ...]]:
    """(whether ``build`` succeeded, its families); a failure is logged and builds nothing."""
    try:
        result = build(*args)
        return True, (result,) if isinstance(result, Metric) else tuple(result)
    except Exception:
        log.exception("building metric family with %s failed", getattr(build, "__qualname__", build))
        return False, ()


# The attribute ``host_only`` marks a family builder with.
_HOST_ONLY_MARK = "numawatch_host_only"

Builder = TypeVar("Builder", bound=Callable[..., object])


def host_only(build: Builder) -> Builder:
    """Marks a family builder whose families are a function of ``evaluation.host`` and ``evaluation.intent`` alone
    (no finding, no clock, no process state), read through the Host's accessors: ``built`` then hands out the
    families it built at an earlier reading of a HostReader while every source it read keeps its generation
    (``Host.reused``, as a check's verdict). tests/test_family_reuse.py runs every marked builder on an evaluation
    that holds nothing but the host and the intent."""
    setattr(build, _HOST_ONLY_MARK, True)
    return build


def is_host_only(build: Callable[..., object]) -> bool:
    return getattr(build, _HOST_ONLY_MARK, False) is True


def built(
    builders: Iterable[Callable[[Evaluation], Metric | Iterable[Metric]]],
    evaluation: Evaluation,
    collectors: Collectors | None = None,
) -> list[Metric]:
    """The families of ``builders`` for one evaluation, each builder run ``safely``; a builder of a collector that
    is off (``collectors``; None: all on) is not run, so nothing of its families is computed. A ``host_only``
    builder's families are an earlier reading's while what it read of the Host is unchanged."""
    result: list[Metric] = []
    for build in builders:
        if collectors is None or collectors.runs(build):
            if is_host_only(build):
                result.extend(_reused(build, evaluation))
            else:
                result.extend(safely(build, evaluation))
    return result


def _reused(build: Callable[[Evaluation], Metric | Iterable[Metric]], evaluation: Evaluation) -> tuple[Metric, ...]:
    """``safely(build, evaluation)`` through ``Host.reused``; a builder that failed is run again at the next reading
    (and logged again), as one that is not reused would be."""
    declaration = declaration_of(build)
    keyed = declaration.keyed if declaration is not None else None
    key = ("family", build.__module__, build.__qualname__)
    made = evaluation.host.reuse(key, keyed, evaluation.intent, lambda _: _attempt(build, evaluation), _succeeded)
    return made[1]


def _succeeded(made: tuple[bool, tuple[Metric, ...]]) -> bool:
    return made[0]


def families(evaluation: Evaluation, stats: EvaluationStats, collectors: Collectors | None = None) -> Iterator[Metric]:
    yield from built(PER_EVALUATION, evaluation, collectors)
    for build_stats in ACROSS_EVALUATIONS:
        yield from safely(build_stats, stats)


