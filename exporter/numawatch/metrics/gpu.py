"""GPU metric families: NVML busy time, who holds each GPU, and the host-side delays of the holders.

The "bubble" inputs are exported side by side and never combined here: per GPU, busy seconds and idle seconds while a
compute process holds it (NVML utilisation, coarse: a kernel running for any part of a 1/6-1 s sample period makes
it busy, so sub-millisecond launch gaps are invisible); per GPU-holding container, run-queue wait, preemptions, CPU
migrations and interrupts on its CPUs. Prometheus correlates them (docs/gpu.md has the PromQL); the exporter never
claims a cause.

Cardinality: one series per GPU, per GPU and holding container, per holding container (and interrupt kind), per
NVML function called; never per process or thread.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily

from numawatch import telemetry
from numawatch.checks import Evaluation
from numawatch.collectors import Collectors, builds
from numawatch.cpuset import CPUSet
from numawatch.gpuholders import Holder, gpu_label, holder_of, holders_by_container
from numawatch.inputs import AMDSMI, GPU_TELEMETRY, HLML, INTERRUPTS, NVML, PROCESSES, WORKLOADS, exposes
from numawatch.metrics.core import built
from numawatch.model.gpu import TELEMETRY_LIBRARIES, GpuHolders, HolderContainer, NvmlGpu, NvmlSnapshot
from numawatch.model.interrupts import INTERRUPT_KINDS, Interrupts
from numawatch.workloads import Workload

GPU_LABELS = ("gpu", "uuid")
# The telemetry families of every vendor carry the vendor of the GPU and so of the library that read it, so that a query
# can tell NVML's numbers from AMD SMI's and HLML's
TELEMETRY_LABELS = ("gpu", "uuid", "vendor")
GPU_HOLDER_LABELS = ("gpu", "uuid", "vendor", "namespace", "pod", "container")
HOLDER_LABELS = ("namespace", "pod", "pod_uid", "container")


def _nvml(evaluation: Evaluation) -> NvmlSnapshot | None:
    """NVML's reading alone: the NVML-only families (numawatch_gpu_nvml_up, numawatch_nvml_call_*)."""
    return evaluation.host.get("nvml")


def _telemetry(evaluation: Evaluation) -> NvmlSnapshot | None:
    """Every vendor's GPU telemetry (NVML, AMD SMI, HLML; telemetry.py)."""
    return telemetry.of_host(evaluation.host)


def _holders(evaluation: Evaluation) -> GpuHolders | None:
    return evaluation.host.get("processes")


def _gpu_key(gpu: NvmlGpu) -> tuple[str, str]:
    return gpu_label(gpu), gpu.uuid or ""


def _telemetry_key(gpu: NvmlGpu) -> tuple[str, str, str]:
    return gpu_label(gpu), gpu.uuid or "", gpu.vendor


# --------------------------------------------------------------------------------------------------- per GPU
@exposes("numawatch_gpu_nvml_up", inputs=(NVML,))
def nvml_up(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_gpu_nvml_up",
        "1 when NVML answered for the GPU in the last evaluation, 0 when it reports the GPU lost or needing a reset; "
        "index is NVML's enumeration order (not the CUDA ordinal).",
        labels=(*GPU_LABELS, "index"),
    )
    nvml = _nvml(evaluation)
    for gpu in nvml.gpus if nvml is not None else ():
        family.add_metric((*_gpu_key(gpu), str(gpu.index)), 1 if gpu.up else 0)
    return family


@exposes("numawatch_gpu_telemetry_up", inputs=(GPU_TELEMETRY,))
def telemetry_up(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_gpu_telemetry_up",
        "1 when the vendor's library (library: nvml, amdsmi or hlml) answered for the GPU in the last evaluation, 0 "
        "when it reports the GPU lost or needing a reset.",
        labels=(*TELEMETRY_LABELS, "library"),
    )
    found = _telemetry(evaluation)
    for gpu in found.gpus if found is not None else ():
        family.add_metric((*_telemetry_key(gpu), TELEMETRY_LIBRARIES.get(gpu.vendor, "")), 1 if gpu.up else 0)
    return family


def _gpu_counter(evaluation: Evaluation, name: str, help_text: str, attribute: str) -> Metric:
    family = CounterMetricFamily(name, help_text, labels=TELEMETRY_LABELS)
    found = _telemetry(evaluation)
    for gpu in found.gpus if found is not None else ():
        family.add_metric(_telemetry_key(gpu), getattr(gpu, attribute))
    return family


@exposes("numawatch_gpu_memory_used_bytes", "numawatch_gpu_memory_total_bytes", inputs=(GPU_TELEMETRY,))
def memory_bytes(evaluation: Evaluation) -> Iterable[Metric]:
    used = GaugeMetricFamily(
        "numawatch_gpu_memory_used_bytes",
        "Device memory in use (bytes), where the vendor's library reports it (AMD SMI: VRAM; HLML); not read from "
        "NVML (its per-process figures are behind numawatch_gpu_processes' holders).",
        labels=TELEMETRY_LABELS,
    )
    total = GaugeMetricFamily(
        "numawatch_gpu_memory_total_bytes",
        "Device memory in all (bytes), where the vendor's library reports it (AMD SMI: VRAM; HLML).",
        labels=TELEMETRY_LABELS,
    )
    found = _telemetry(evaluation)
    for gpu in found.gpus if found is not None else ():
        if gpu.memory_used_bytes is not None:
            used.add_metric(_telemetry_key(gpu), gpu.memory_used_bytes)
        if gpu.memory_total_bytes is not None:
            total.add_metric(_telemetry_key(gpu), gpu.memory_total_bytes)
    return used, total


@exposes("numawatch_gpu_busy_seconds_total", inputs=(GPU_TELEMETRY,))
def busy_seconds(evaluation: Evaluation) -> Metric:
    return _gpu_counter(
        evaluation,
        "numawatch_gpu_busy_seconds",
        "Seconds the GPU was busy by its library's utilisation (NVML: a kernel ran during a sample period of 1/6-1 s, "
        "integrated from its samples; AMD SMI's gfx_activity and HLML's utilisation, each applied to the interval "
        "since the previous evaluation); coarse: sub-millisecond idle gaps between kernels count as busy.",
        "busy_seconds",
    )


@exposes("numawatch_gpu_sampled_seconds_total", inputs=(GPU_TELEMETRY,))
def sampled_seconds(evaluation: Evaluation) -> Metric:
    return _gpu_counter(
        evaluation,
        "numawatch_gpu_sampled_seconds",
        "Seconds covered by the library's utilisation readings: the denominator of numawatch_gpu_busy_seconds_total "
        "(less than wall time when samples were lost).",
        "sampled_seconds",
    )


@exposes("numawatch_gpu_held_idle_seconds_total", inputs=(GPU_TELEMETRY,))
def held_idle_seconds(evaluation: Evaluation) -> Metric:
    return _gpu_counter(
        evaluation,
        "numawatch_gpu_held_idle_seconds",
        "Coarse idle seconds while at least one compute process held the GPU: idle by the library's utilisation, which "
        "cannot see sub-millisecond gaps between kernels; a candidate bubble, not a cause (never counted where the "
        "library lists no processes: HLML).",
        "held_idle_seconds",
    )


# --------------------------------------------------------------------------------------------------- holders
def _holder_values(holder: Holder) -> tuple[str, str, str]:
    labels = holder.labels
    return labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", "")


@exposes("numawatch_gpu_processes", "numawatch_gpu_process_sm_utilization_ratio", inputs=(WORKLOADS, GPU_TELEMETRY))
@builds("gpu_processes")
def gpu_processes(evaluation: Evaluation) -> Iterable[Metric]:
    count = GaugeMetricFamily(
        "numawatch_gpu_processes",
        "Compute processes the GPU's library lists on it (NVML, AMD SMI), per container they belong to (empty "
        "namespace, pod and container for processes outside any container).",
        labels=GPU_HOLDER_LABELS,
    )
    utilization = GaugeMetricFamily(
        "numawatch_gpu_process_sm_utilization_ratio",
        "SM utilisation (0-1) of the container's processes on the GPU: NVML's per-process samples since the previous "
        "evaluation, averaged per process and summed over the container's processes; 0 without samples.",
        labels=GPU_HOLDER_LABELS,
    )
    nvml = _telemetry(evaluation)
    if nvml is None:
        return count, utilization
    workloads = holders_by_container(evaluation.host, evaluation.intent)
    for gpu in nvml.gpus:
        if not gpu.up or gpu.processes is None:
            continue
        counts: dict[tuple[str, ...], int] = {}
        ratios: dict[tuple[str, ...], float] = {}
        for process in gpu.processes:
            if process.container_id is None:
                values: tuple[str, ...] = ("", "", "")
            else:
                values = _holder_values(holder_of(process.container_id, process.pod_uid, workloads))
            key = (*_telemetry_key(gpu), *values)
            counts[key] = counts.get(key, 0) + 1
            ratios[key] = ratios.get(key, 0.0) + (process.sm_utilization or 0.0)
        for key in sorted(counts):
            count.add_metric(key, counts[key])
            utilization.add_metric(key, min(ratios[key], 1.0))
    return count, utilization


def _holder_rows(evaluation: Evaluation) -> list[tuple[tuple[str, ...], HolderContainer, Workload | None]]:
    holders = _holders(evaluation)
    if holders is None:
        return []
    workloads = holders_by_container(evaluation.host, evaluation.intent)
    rows: list[tuple[tuple[str, ...], HolderContainer, Workload | None]] = []
    seen: set[tuple[str, ...]] = set()
    for container_id, container in sorted(holders.containers.items()):
        holder = holder_of(container_id, container.pod_uid, workloads)
        labels = holder.labels
        values = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("pod_uid", ""),
                  labels.get("container", ""))  # fmt: skip
        if values in seen:  # one series per label set: the first container listed wins (a restart's old cgroup)
            continue
        seen.add(values)
        rows.append((values, container, workloads.get(container_id)))
    return rows


@exposes(
    "numawatch_gpu_holder_run_delay_seconds_total",
    "numawatch_gpu_holder_involuntary_switches_total",
    "numawatch_gpu_holder_migrations_total",
    "numawatch_gpu_holder_threads",
    inputs=(WORKLOADS, PROCESSES),
)
@builds("gpu_holders")
def holder_counters(evaluation: Evaluation) -> Iterable[Metric]:
    run_delay = CounterMetricFamily(
        "numawatch_gpu_holder_run_delay_seconds",
        "Seconds the threads of a GPU-holding container's processes were runnable but waiting for a CPU "
        "(task schedstat run delay), summed over threads since numawatch first saw them.",
        labels=HOLDER_LABELS,
    )
    switches = CounterMetricFamily(
        "numawatch_gpu_holder_involuntary_switches",
        "Involuntary context switches (preemptions) of the threads of a GPU-holding container's processes, summed "
        "over threads since numawatch first saw them.",
        labels=HOLDER_LABELS,
    )
    migrations = CounterMetricFamily(
        "numawatch_gpu_holder_migrations",
        "CPU migrations (se.nr_migrations) of the threads of a GPU-holding container's processes, summed over threads "
        "since numawatch first saw them; absent when the kernel lacks CONFIG_SCHED_DEBUG.",
        labels=HOLDER_LABELS,
    )
    threads = GaugeMetricFamily(
        "numawatch_gpu_holder_threads",
        "Threads numawatch read for a GPU-holding container (its processes are bounded to 64 and threads to 4096).",
        labels=HOLDER_LABELS,
    )
    for values, container, _ in _holder_rows(evaluation):
        if container.run_delay_seconds is not None:
            run_delay.add_metric(values, container.run_delay_seconds)
        if container.involuntary_switches is not None:
            switches.add_metric(values, container.involuntary_switches)
        if container.migrations is not None:
            migrations.add_metric(values, container.migrations)
        threads.add_metric(values, container.threads)
    return run_delay, switches, migrations, threads


@exposes("numawatch_gpu_holder_interrupts_total", inputs=(WORKLOADS, PROCESSES, INTERRUPTS))
@builds("gpu_holders")
def holder_interrupts(evaluation: Evaluation) -> Metric:
    family = CounterMetricFamily(
        "numawatch_gpu_holder_interrupts",
        "Interrupts since boot on the CPUs of a GPU-holding container's cpuset, by kind (device, local_timer, ipi, "
        "other); only watched CPUs (isolated, nohz_full or exclusive) are counted, a holder without any has no series, "
        "and a cpuset change moves it.",
        labels=(*HOLDER_LABELS, "kind"),
    )
    interrupts: Interrupts | None = evaluation.host.get("interrupts")
    if interrupts is None:
        return family
    holders = _holders(evaluation)
    for values, container, workload in _holder_rows(evaluation):
        # Only watched CPUs have per-CPU counts: a holder with none of them gets no series, since zero would claim
        # that no interrupt landed where nobody counted (seen on a GPU VM with no isolated CPUs).
        cpus = _container_cpus(container, workload, holders) & interrupts.watched
        if not cpus:
            continue
        per_kind = dict.fromkeys(INTERRUPT_KINDS, 0)
        for row in interrupts.rows:
            for cpu, count in row.counts.items():
                if cpu in cpus:
                    per_kind[row.kind] = per_kind.get(row.kind, 0) + count
        for kind in INTERRUPT_KINDS:
            family.add_metric((*values, kind), per_kind[kind])
    return family


def _container_cpus(container: HolderContainer, workload: Workload | None, holders: GpuHolders | None) -> CPUSet:
    """The container's effective cpuset, else every CPU its threads may run on."""
    if workload is not None and workload.cpus is not None:
        return workload.cpus
    cpus: set[int] = set()
    for pid in container.pids:
        process = holders.processes.get(pid) if holders is not None else None
        if process is not None:
            for allowed in process.cpus_allowed:
                cpus |= allowed
    return frozenset(cpus)


# --------------------------------------------------------------------------------------------------- NVML itself
@exposes("numawatch_nvml_call_seconds", "numawatch_nvml_call_failures_total", inputs=(NVML,))
def nvml_calls(evaluation: Evaluation) -> Iterable[Metric]:
    seconds = SummaryMetricFamily(
        "numawatch_nvml_call_seconds",
        "Time spent in each NVML function since numawatch started (calls run on one thread with a time limit).",
        labels=("call",),
    )
    failures = CounterMetricFamily(
        "numawatch_nvml_call_failures",
        "NVML calls that raised an NVML error (error) or did not return within the time limit (timeout). An empty "
        "sample buffer (NotFound or NoData from nvmlDeviceGetSamples or nvmlDeviceGetProcessUtilization) is an "
        "answer, not a failure.",
        labels=("call", "failure"),
    )
    nvml = _nvml(evaluation)
    for call in nvml.calls if nvml is not None else ():
        seconds.add_metric((call.name,), count_value=call.count, sum_value=call.seconds)
        failures.add_metric((call.name, "error"), call.errors)
        failures.add_metric((call.name, "timeout"), call.timeouts)
    return seconds, failures


@exposes("numawatch_gpu_library_call_seconds", "numawatch_gpu_library_call_failures_total", inputs=(AMDSMI, HLML))
def library_calls(evaluation: Evaluation) -> Iterable[Metric]:
    seconds = SummaryMetricFamily(
        "numawatch_gpu_library_call_seconds",
        "Time spent in each function of the other vendors' GPU libraries (library: amdsmi, hlml) since numawatch "
        "started (calls run on one thread per library with a time limit); NVML's are numawatch_nvml_call_seconds.",
        labels=("library", "call"),
    )
    failures = CounterMetricFamily(
        "numawatch_gpu_library_call_failures",
        "Calls of the other vendors' GPU libraries that raised the library's error (error) or did not return within "
        "the time limit (timeout).",
        labels=("library", "call", "failure"),
    )
    for library in ("amdsmi", "hlml"):
        reading: NvmlSnapshot | None = evaluation.host.get(library)
        for call in reading.calls if reading is not None else ():
            seconds.add_metric((library, call.name), count_value=call.count, sum_value=call.seconds)
            failures.add_metric((library, call.name, "error"), call.errors)
            failures.add_metric((library, call.name, "timeout"), call.timeouts)
    return seconds, failures


BUILDERS = (
    nvml_up,
    telemetry_up,
    busy_seconds,
    sampled_seconds,
    held_idle_seconds,
    memory_bytes,
    gpu_processes,
    holder_counters,
    holder_interrupts,
    nvml_calls,
    library_calls,
)


def families(evaluation: Evaluation, collectors: Collectors | None = None) -> Iterable[Metric]:
    """Every GPU family for one evaluation but those of collectors turned off; a family whose builder fails is left
    out (and logged)."""
    return built(BUILDERS, evaluation, collectors)
