"""Generate numawatch's Prometheus rule files: alerts/numawatch-{alerts,rules,capacity.rules}.yml.

The rules are data in this file (the monitoring-mixin layout without jsonnet): the knobs an operator may change
sit in ``CONFIG``; each alert is an ``Alert`` whose ``runbook_url`` is derived from its name, so every alert has a
runbook at docs/runbooks/<AlertName>.md (tests/test_alerts.py holds that, and that the committed files are what
this script writes). Run ``python alerts/generate.py`` after editing, ``--check`` to only compare.

Severity policy (docs/runbooks/README.md): page (``critical``) only where a person must act now: pinning drift on
a container that holds a GPU, a kubelet state file that will stop the next kubelet start, and one drift spreading
over many nodes of a cluster. Everything else is a ticket (``warning``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from generated_files import sync

HERE = Path(__file__).resolve().parent
ALERTS_FILE = HERE / "numawatch-alerts.yml"
RULES_FILE = HERE / "numawatch-rules.yml"
CAPACITY_FILE = HERE / "numawatch-capacity.rules.yml"

CONFIG = {
    # Selects numawatch's scrape targets in `up`; numawatch_* metrics need no selector (the prefix is unique).
    # deploy/servicemonitor.yaml sets job="numawatch" through jobLabel.
    "job_selector": 'job="numawatch"',
    "runbook_url_base": "https://github.com/numawatch/numawatch/blob/main/docs/runbooks/",
    # kube-state-metrics' GPU capacity series: a node is a GPU node when it advertises this resource.
    "gpu_capacity_selector": 'resource="nvidia_com_gpu"',
    # Nodes being drained or deleted drift as a matter of course; their alerts are noise (kubernetes-mixin's
    # kubeNodeUnreachableIgnoreKeys). Needs kube-state-metrics and a `node` label on numawatch's series (the
    # ServiceMonitor relabels it); without them nothing is excluded.
    "ignored_taints": "ToBeDeletedByClusterAutoscaler|cloud.google.com/impending-node-termination"
    "|aws-node-termination-handler/spot-itn",
    # NumawatchDriftWidespread: a check failing on at least this many nodes *and* this share of a cluster's nodes.
    "widespread_min_nodes": 3,
    "widespread_min_ratio": 0.2,
    # NumawatchSourceDown watches the sources every node must have. Others are down by design on many nodes:
    # intersocket needs uncore PMUs and perf access (the DaemonSet drops every capability), nvml and processes
    # need NVML enabled in numawatch. A source added later is not watched until it is listed here: a missed
    # meta-alert is cheaper than a fleet-wide false one.
    "required_sources": "topology|cgroups|names|kubelet_config|kubelet_state|gpus_sysfs|kernel|numastat|interrupts"
    "|irqs|irqbalance",
    # NumawatchEvaluationsStale: numawatch evaluates every 15 s; eight missed evaluations is not a hiccup.
    "stale_after_seconds": 120,
}

NODE = "cluster, node, instance"  # one numawatch per node; `node`/`cluster` exist when relabelled in a fleet
CONTAINER = f"{NODE}, namespace, pod, container"

JOB = CONFIG["job_selector"]
IGNORED_TAINTS = CONFIG["ignored_taints"]
REQUIRED_SOURCES = CONFIG["required_sources"]
EXCLUDE_NODES = (
    "unless on (cluster, node) (kube_node_spec_unschedulable == 1)\n"
    f'unless on (cluster, node) kube_node_spec_taint{{key=~"{IGNORED_TAINTS}"}}'
)

ON_NODE = "{{ $labels.instance }}"
# Pod-level findings (container_numa_split under scope pod, pod_not_guaranteed) carry no container label.
IN_CONTAINER = "{{ $labels.namespace }}/{{ $labels.pod }}{{ with $labels.container }} container {{ . }}{{ end }}"
SEE_CHECK = (
    "The expected and actual values are in numawatch_drift_info (same labels) and in `numawatch check` on the node."
)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    severity: str
    for_: str
    summary: str
    description: str
    keep_firing_for: str | None = None
    checks: tuple[str, ...] = ()  # the check ids it covers (documentation; tests read the expr itself)


def drift_selector(checks: tuple[str, ...]) -> str:
    if len(checks) == 1:
        return f'numawatch_drift{{check="{checks[0]}"}}'
    return f'numawatch_drift{{check=~"{"|".join(checks)}"}}'


def per_node(checks: tuple[str, ...]) -> str:
    """One alert per node and check; the value is the number of findings (IRQs, GPUs, settings...)."""
    return f"count by ({NODE}, check) ({drift_selector(checks)})\n{EXCLUDE_NODES}"


def per_subject(checks: tuple[str, ...], by: str) -> str:
    """One alert per subject (pod or container) and check. `max` folds duplicate scrapes of one target."""
    return f"max by ({by}, check) ({drift_selector(checks)})\n{EXCLUDE_NODES}"


def gpu_split(
    name: str,
    checks: tuple[str, ...],
    summary: str,
    description: str,
    for_critical: str = "10m",
    for_warning: str = "15m",
) -> list[Alert]:
    """Two rules under one alert name: critical when the container holds a GPU, warning otherwise.

    numawatch_gpu_info carries the holder of each GPU (namespace/pod/container, empty when free), so the join
    tells the inference containers, whose drift stalls a GPU, from the rest. A pod-level finding (no container
    label) joins with the holder's pod: the label_replace copy of the holders drops their container label.
    """
    base = f"max by ({CONTAINER}, check) ({drift_selector(checks)})"
    holders = 'numawatch_gpu_info{container!=""}'
    holds_gpu = f'on ({CONTAINER}) (\n  {holders}\n  or label_replace({holders}, "container", "", "container", ".*")\n)'
    return [
        Alert(
            name=name,
            expr=f"{base}\nand {holds_gpu}\n{EXCLUDE_NODES}",
            severity="critical",
            for_=for_critical,
            keep_firing_for="10m",
            summary=summary,
            description=f"{description} It holds a GPU, which idles while these host threads are delayed.",
            checks=checks,
        ),
        Alert(
            name=name,
            expr=f"{base}\nunless {holds_gpu}\n{EXCLUDE_NODES}",
            severity="warning",
            for_=for_warning,
            keep_firing_for="10m",
            summary=summary,
            description=f"{description} It holds no GPU.",
            checks=checks,
        ),
    ]


def gpu_holder_alerts() -> list[Alert]:
    """A GPU used outside the device plugin's assignment: critical when the GPU belongs to another container (or a
    host process uses an assigned GPU), warning when the GPU is assigned to nobody yet."""
    selector = drift_selector(("gpu_holder_mismatch",))
    by_gpu = f"max by ({CONTAINER}, check, gpu, reason)"
    assigned = f'{by_gpu} ({selector[:-1]}, reason!="unassigned"}})'
    unassigned = f'{by_gpu} ({selector[:-1]}, reason="unassigned"}})'
    user = (
        "{{ with $labels.container }}{{ $labels.namespace }}/{{ $labels.pod }} container {{ . }}"
        "{{ else }}a process outside any container{{ end }}"
    )
    description = (
        f"GPU {{{{ $labels.gpu }}}} on {ON_NODE} is used by {user}, which the device plugin did not assign it to "
        f"({{{{ $labels.reason }}}}): the GPU is shared outside the kubelet's accounting. {SEE_CHECK}"
    )
    summary = "A GPU is used by a container the device plugin did not assign it to."
    return [
        Alert(
            name="NumawatchGPUHolderMismatch",
            expr=f"{assigned}\n{EXCLUDE_NODES}",
            severity="critical",
            for_="10m",
            keep_firing_for="10m",
            summary=summary,
            description=f"{description} The GPU belongs to another workload, which now shares it.",
            checks=("gpu_holder_mismatch",),
        ),
        Alert(
            name="NumawatchGPUHolderMismatch",
            expr=f"{unassigned}\n{EXCLUDE_NODES}",
            severity="warning",
            for_="15m",
            keep_firing_for="10m",
            summary=summary,
            description=f"{description} The GPU is assigned to nobody yet; the next pod given it will share it.",
            checks=("gpu_holder_mismatch",),
        ),
    ]


KUBELET_POLICY_CHECKS = (
    "kubelet_cpu_manager_policy",
    "kubelet_topology_manager_policy",
    "kubelet_topology_manager_scope",
    "kubelet_memory_manager_policy",
)
HOST_TUNING_CHECKS = (
    "kernel_numa_balancing",
    "thp_enabled",
    "thp_defrag",
    "vm_swappiness",
    "cpufreq_governor",
    "gpu_process_memlock",
)
ISOLATION_CHECKS = ("isolation_params_mismatch", "tick_on_nohz_full")
IRQ_CHECKS = ("irq_on_isolated_cpu", "irq_activity_on_isolated_cpu", "irqbalance_unbanned")
NUMA_PLACEMENT_CHECKS = ("container_numa_split", "container_gpu_numa_mismatch", "gpu_process_remote")
MEMORY_CHECKS = ("container_memory_numa_mismatch", "container_memory_remote")
NODE_ISOLATION_CHECKS = ("node_taint_missing", "node_workload_not_isolated")


def platform_alerts() -> list[Alert]:
    """The knobs of issue 17: the CPU reservation stated twice, the node's taints and foreign pods, the GPUs'
    PCIe path to the RDMA NICs, NVLink peering of a container's GPUs, and deep C-states on pinned CPUs."""
    return [
        Alert(
            name="NumawatchKubeletReservedIncoherent",
            expr=per_node(("kubelet_reserved_incoherent",)),
            severity="info",
            for_="30m",
            keep_firing_for="15m",
            summary="The kubelet's CPU reservation is stated twice, or splits cores the CPU Manager hands out whole.",
            description=f"{ON_NODE}: system-reserved/kube-reserved cpu is set next to reserved-cpus (which the "
            "kubelet uses instead), or reserved-cpus takes one thread of a core under full-pcpus-only. "
            f"{SEE_CHECK}",
            checks=("kubelet_reserved_incoherent",),
        ),
        Alert(
            name="NumawatchNodeNotIsolated",
            expr=per_node(NODE_ISOLATION_CHECKS),
            severity="warning",
            for_="30m",
            keep_firing_for="15m",
            summary="A GPU node lacks its taint or label, or runs pods that do not belong on it.",
            description=f"{ON_NODE} fails {{{{ $labels.check }}}} ({{{{ $value }}}} finding(s)): workloads that "
            "need no GPU can share the node's memory bandwidth, cache and shared CPUs with the pinned inference "
            f"pods. {SEE_CHECK}",
            checks=NODE_ISOLATION_CHECKS,
        ),
        Alert(
            name="NumawatchGPUNICPathDegraded",
            expr=per_node(("gpu_nic_path",)),
            severity="warning",
            for_="30m",
            keep_firing_for="15m",
            summary="A GPU's nearest RDMA NIC is behind the host bridge or on the other socket.",
            description=f"{ON_NODE}: {{{{ $value }}}} GPU(s) reach no RDMA NIC under their PCIe switch although "
            "others do, or none on their socket: their GPUDirect RDMA traffic crosses the host bridge or the "
            f"inter-socket link. {SEE_CHECK}",
            checks=("gpu_nic_path",),
        ),
        Alert(
            name="NumawatchContainerGPUsNotPeered",
            expr=per_subject(("container_gpus_not_peered",), f"{CONTAINER}, gpu"),
            severity="warning",
            for_="15m",
            keep_firing_for="10m",
            summary="A container holds GPUs that are not NVLink peers.",
            description=f"{IN_CONTAINER} on {ON_NODE} holds GPUs {{{{ $labels.gpu }}}} that do not reach each "
            f"other over NVLink: its tensor-parallel traffic goes over PCIe. {SEE_CHECK}",
            checks=("container_gpus_not_peered",),
        ),
        Alert(
            name="NumawatchCPUIdleDeepState",
            expr=per_node(("cpuidle_deep_state",)),
            severity="warning",
            for_="30m",
            keep_firing_for="15m",
            summary="Isolated or pinned CPUs may enter deep idle states.",
            description=f"{ON_NODE}: {{{{ $value }}}} group(s) of isolated or exclusive CPUs may enter idle states "
            "whose exit latency exceeds the intent's limit: every wake-up between short CUDA launches pays it. "
            f"{SEE_CHECK}",
            checks=("cpuidle_deep_state",),
        ),
    ]


def drift_alerts() -> list[Alert]:
    """Per-node and per-container alerts, one family per check id (or per group of related check ids)."""
    alerts = [
        Alert(
            name="NumawatchKubeletPolicyMismatch",
            expr=per_node(KUBELET_POLICY_CHECKS),
            severity="warning",
            for_="15m",
            keep_firing_for="15m",
            summary="The kubelet's CPU, Memory or Topology Manager policy differs from the intended profile.",
            description=f"{ON_NODE} fails {{{{ $labels.check }}}}: the kubelet runs with a policy other than "
            f"the intent's, so new pods are admitted without the intended pinning. {SEE_CHECK}",
            checks=KUBELET_POLICY_CHECKS,
        ),
        Alert(
            name="NumawatchKubeletReservedCPUsMismatch",
            expr=per_node(("kubelet_reserved_cpus_mismatch",)),
            severity="warning",
            for_="15m",
            keep_firing_for="15m",
            summary="The kubelet's reserved CPUs differ from the host's housekeeping CPUs.",
            description=f"{ON_NODE}: reserved-cpus and the kernel's isolcpus disagree, so isolated cores idle or "
            f"housekeeping cores are handed out as exclusive CPUs. {SEE_CHECK}",
            checks=("kubelet_reserved_cpus_mismatch",),
        ),
        Alert(
            name="NumawatchKubeletStateStale",
            expr=per_node(("kubelet_state_stale",)),
            severity="critical",
            for_="5m",
            keep_firing_for="10m",
            summary="A kubelet checkpoint file no longer matches the kubelet's policy; the next kubelet start fails.",
            description=f"{ON_NODE}: {{{{ $value }}}} kubelet state file(s) were written under another policy. "
            "The kubelet refuses to start with them: the next restart (upgrade, reboot, config change) takes the "
            f"node out. Fix it before that happens. {SEE_CHECK}",
            checks=("kubelet_state_stale",),
        ),
        Alert(
            name="NumawatchPodNotGuaranteed",
            expr=per_subject(("pod_not_guaranteed",), f"{NODE}, namespace, pod"),
            severity="warning",
            for_="15m",
            keep_firing_for="10m",
            summary="A pod that should be pinned is not QoS Guaranteed, so the CPU Manager does not pin it.",
            description=f"{{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} on {ON_NODE} is not Guaranteed "
            "(requests must equal limits for CPU and memory): it runs on the shared CPU pool, unpinned.",
            checks=("pod_not_guaranteed",),
        ),
        Alert(
            name="NumawatchContainerNotExclusive",
            expr=per_subject(("container_not_exclusive",), CONTAINER),
            severity="warning",
            for_="15m",
            keep_firing_for="10m",
            summary="A container that should hold exclusive CPUs runs on the shared pool.",
            description=f"{IN_CONTAINER} on {ON_NODE} has no exclusive CPUs (a non-integer CPU request, or a "
            "non-static CPU Manager policy): it shares cores with everything else.",
            checks=("container_not_exclusive",),
        ),
        *gpu_split(
            "NumawatchContainerCPUSetDrift",
            ("container_cpuset_drift",),
            summary="A container's cgroup cpuset differs from the CPUs the kubelet assigned it.",
            description=f"{IN_CONTAINER} on {ON_NODE}: its cpuset was rewritten behind the kubelet's back "
            f"(systemd, an NRI plugin, a hand edit); the kubelet never corrects it. {SEE_CHECK}",
        ),
        *gpu_split(
            "NumawatchExclusiveCPUOverlap",
            ("exclusive_cpu_overlap",),
            summary="Exclusive CPUs of a container are shared with another container.",
            description=f"{IN_CONTAINER} on {ON_NODE} has exclusive CPUs that another container can also run "
            f"on: a noisy neighbour on cores that were promised to it alone. {SEE_CHECK}",
        ),
        *gpu_split(
            "NumawatchContainerNUMAMisaligned",
            NUMA_PLACEMENT_CHECKS,
            summary="A container's CPUs span NUMA nodes or sit on a NUMA node other than its GPU's.",
            description=f"{IN_CONTAINER} on {ON_NODE} fails {{{{ $labels.check }}}}: its threads reach the GPU "
            f"or their memory across the inter-socket link. {SEE_CHECK}",
            for_critical="15m",
            for_warning="30m",
        ),
        Alert(
            name="NumawatchContainerMemoryNUMADrift",
            expr=per_subject(MEMORY_CHECKS, CONTAINER),
            severity="warning",
            for_="30m",
            keep_firing_for="15m",
            summary="A pinned container's memory is not on the NUMA node of its CPUs.",
            description=f"{IN_CONTAINER} on {ON_NODE} fails {{{{ $labels.check }}}}: memory is allowed on, or "
            f"resident on, a remote NUMA node, so every access crosses the inter-socket link. {SEE_CHECK}",
            checks=MEMORY_CHECKS,
        ),
        Alert(
            name="NumawatchContainerOutsideIsolated",
            expr=per_subject(("container_outside_isolated",), CONTAINER),
            severity="warning",
            for_="15m",
            keep_firing_for="10m",
            summary="A pinned container runs on CPUs outside the isolated set.",
            description=f"{IN_CONTAINER} on {ON_NODE} holds exclusive CPUs that are not isolated (isolcpus): "
            f"the kernel schedules housekeeping work and interrupts on them. {SEE_CHECK}",
            checks=("container_outside_isolated",),
        ),
        Alert(
            name="NumawatchGPUNUMAUnknown",
            expr=per_node(("gpu_numa_unknown",)),
            severity="warning",
            for_="15m",
            keep_firing_for="10m",
            summary="GPUs are registered without a NUMA node, so the Topology Manager cannot align them.",
            description=f"{ON_NODE}: {{{{ $value }}}} GPU(s) have no NUMA node (sysfs numa_node -1 or a device "
            "plugin without topology): CPUs and memory are aligned, the GPU is left to chance.",
            checks=("gpu_numa_unknown",),
        ),
        *gpu_holder_alerts(),
        Alert(
            name="NumawatchNUMATopologyInconsistent",
            expr=per_node(("numa_topology_inconsistent",)),
            severity="warning",
            for_="30m",
            keep_firing_for="15m",
            summary="The firmware's NUMA topology contradicts itself, so every placement judgement rests on a guess.",
            description=f"{ON_NODE}: {{{{ $value }}}} inconsistencies in the NUMA map (node CPU lists that overlap, "
            "an online CPU in no node, a GPU's numa_node against its local_cpulist, or an asymmetric distance "
            f"table). {SEE_CHECK}",
            checks=("numa_topology_inconsistent",),
        ),
        Alert(
            name="NumawatchHostTuningDrift",
            expr=per_node(HOST_TUNING_CHECKS),
            severity="warning",
            for_="15m",
            keep_firing_for="15m",
            summary="A kernel or process tuning knob differs from the intended profile.",
            description=f"{ON_NODE} fails {{{{ $labels.check }}}} ({{{{ $value }}}} finding(s)): NUMA balancing, "
            f"THP, swappiness, the CPU frequency governor or memlock is not what the profile asks. {SEE_CHECK}",
            checks=HOST_TUNING_CHECKS,
        ),
        Alert(
            name="NumawatchCPUIsolationMismatch",
            expr=per_node(ISOLATION_CHECKS),
            severity="warning",
            for_="30m",
            keep_firing_for="10m",
            summary="CPU isolation is not effective: boot parameters disagree or isolated cores still tick.",
            description=f"{ON_NODE} fails {{{{ $labels.check }}}} ({{{{ $value }}}} finding(s)): isolcpus, "
            f"nohz_full and rcu_nocbs disagree, or nohz_full cores run more than one thread. {SEE_CHECK}",
            checks=ISOLATION_CHECKS,
        ),
        Alert(
            name="NumawatchHugepagesShortfall",
            expr=per_node(("hugepages_shortfall",)),
            severity="warning",
            for_="15m",
            keep_firing_for="15m",
            summary="Fewer hugepages are reserved than the intended profile asks.",
            description=f"{ON_NODE}: {{{{ $value }}}} hugepage pool(s) hold fewer pages than intended; pods "
            f"asking for hugepages are not admitted, or host buffers fall back to small pages. {SEE_CHECK}",
            checks=("hugepages_shortfall",),
        ),
        Alert(
            name="NumawatchIRQOnIsolatedCPU",
            expr=per_node(IRQ_CHECKS),
            severity="warning",
            for_="30m",
            keep_firing_for="10m",
            summary="Device interrupts are routed to, or served on, isolated CPUs.",
            description=f"{ON_NODE} fails {{{{ $labels.check }}}} ({{{{ $value }}}} finding(s)): interrupts "
            f"land on cores that feed GPUs and stall them. {SEE_CHECK}",
            checks=IRQ_CHECKS,
        ),
        *platform_alerts(),
    ]
    covered = sorted({check for alert in alerts for check in alert.checks})
    alerts.append(
        Alert(
            name="NumawatchDriftDetected",
            expr=f'count by ({NODE}, check) (numawatch_drift{{check!~"{"|".join(covered)}"}})\n{EXCLUDE_NODES}',
            severity="warning",
            for_="15m",
            keep_firing_for="10m",
            summary="Drift reported for a check that has no dedicated alert.",
            description=f"{ON_NODE} fails {{{{ $labels.check }}}} ({{{{ $value }}}} finding(s)). {SEE_CHECK}",
        )
    )
    return alerts


def fleet_alerts() -> list[Alert]:
    ratio_of = (
        "{{ with printf `cluster_check:numawatch_drift_nodes:ratio{cluster=%q,check=%q}` $labels.cluster "
        "$labels.check | query }}{{ . | first | value | humanizePercentage }}{{ end }}"
    )
    versions = (
        "{{ with printf `count(count by (version) (numawatch_build_info{cluster=%q}))` $labels.cluster | query }}"
        "{{ . | first | value }}{{ end }}"
    )
    return [
        Alert(
            name="NumawatchDriftWidespread",
            expr=(
                f"cluster_check:numawatch_drift_nodes:count >= {CONFIG['widespread_min_nodes']}\n"
                f"and cluster_check:numawatch_drift_nodes:ratio >= {CONFIG['widespread_min_ratio']}"
            ),
            severity="critical",
            for_="10m",
            keep_firing_for="15m",
            summary="One drift check fails on many nodes of a cluster.",
            description=f"{{{{ $value }}}} nodes ({ratio_of} of those that evaluated it) in cluster "
            f'"{{{{ $labels.cluster }}}}" fail {{{{ $labels.check }}}}; {versions} numawatch version(s) are '
            "running. A rollout (kubelet config, node image, numawatch itself) most likely caused it.",
        ),
    ]


def meta_alerts() -> list[Alert]:
    return [
        Alert(
            name="NumawatchDown",
            expr=f"up{{{JOB}}} == 0\n{EXCLUDE_NODES}",
            severity="warning",
            for_="15m",
            summary="Prometheus cannot scrape numawatch on a node.",
            description=f"numawatch on {ON_NODE} has been unreachable for 15 minutes: drift there goes unseen.",
        ),
        Alert(
            name="NumawatchMissingOnGPUNode",
            expr=(
                f"max by (cluster, node) (kube_node_status_capacity{{{CONFIG['gpu_capacity_selector']}}}) > 0\n"
                f"unless on (cluster, node) up{{{JOB}}}\n"
                f"{EXCLUDE_NODES}"
            ),
            severity="warning",
            for_="15m",
            summary="A GPU node has no numawatch target.",
            description="GPU node {{ $labels.node }} has had no numawatch scrape target for 15 minutes (the "
            "DaemonSet pod is missing, not scheduled, or not discovered): drift there goes unseen.",
        ),
        Alert(
            name="NumawatchSourceDown",
            expr=f'max by ({NODE}, source) (numawatch_source_up{{source=~"{REQUIRED_SOURCES}"}}) == 0\n{EXCLUDE_NODES}',
            severity="warning",
            for_="15m",
            summary="A numawatch source cannot read its host files.",
            description=f"numawatch on {ON_NODE} cannot read source {{{{ $labels.source }}}}: the checks that "
            "need it are not evaluated. The reason is on numawatch's landing page and in its log.",
        ),
        Alert(
            name="NumawatchEvaluationsStale",
            expr=(
                f"time() - max by ({NODE}) (numawatch_last_evaluation_timestamp_seconds)\n"
                f"> {CONFIG['stale_after_seconds']}"
            ),
            severity="warning",
            for_="10m",
            summary="The numawatch exporter answers scrapes but has stopped evaluating.",
            description=f"numawatch on {ON_NODE} last finished an evaluation {{{{ $value | humanizeDuration }}}} "
            "ago: its findings are stale.",
        ),
    ]


RECORDING_RULES = [
    {
        # Findings per check per cluster, de-duplicated across repeated scrapes of one target.
        "record": "cluster_check:numawatch_drift_findings:sum",
        "expr": "sum by (cluster, check) (max by (cluster, instance, check) (numawatch_drift_findings))",
    },
    {
        "record": "cluster_check:numawatch_drift_nodes:count",
        "expr": "count by (cluster, check) (max by (cluster, instance, check) (numawatch_drift_findings) > 0)",
    },
    {
        # Share of the cluster's nodes that evaluated the check and fail it (0 when none do). A node where the check
        # did not run has no numawatch_drift_findings for it, so it neither fails nor dilutes the share.
        "record": "cluster_check:numawatch_drift_nodes:ratio",
        "expr": "avg by (cluster, check) (max by (cluster, instance, check) (numawatch_drift_findings) > bool 0)",
    },
    {
        "record": "cluster:numawatch_nodes:count",
        "expr": "count by (cluster) (max by (cluster, instance) (numawatch_build_info))",
    },
    {
        # A GPU node is one whose numawatch sees a GPU; the node drifts when any check has a finding.
        "record": "cluster:numawatch_gpu_nodes_drifting:ratio",
        "expr": (
            "avg by (cluster) (\n"
            "  (max by (cluster, instance) (numawatch_drift_findings) > bool 0)\n"
            "  and on (cluster, instance) max by (cluster, instance) (numawatch_gpu_info)\n"
            ")"
        ),
    },
]


# Host-side GPU bubbles (docs/gpu.md "Correlating them in Prometheus"): the coarse idle-while-held share of each GPU
# and the run-queue wait of the container holding it, recorded over 5 minutes under the same holder labels
# (cluster, node, instance, namespace, pod, container) so a fleet view lists one next to the other and
#   instance_gpu:numawatch_gpu_held_idle:ratio_rate5m > 0.1
#   and on (cluster, node, instance, namespace, pod, container)
#   instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m > 0.005
# finds the suspects. `max by` folds duplicate scrapes of one target, as the fleet rules do.
GPU = "cluster, node, instance, gpu, uuid"
HOLDER = f"{NODE}, namespace, pod, container"
GPU_RECORDING_RULES = [
    {
        # One series per GPU and container holding it (holders from numawatch_gpu_processes; a time-sliced GPU has
        # one per sharing container). A GPU with no sampled time (lost, NVML down) has no series rather than NaN;
        # processes outside any container are left out: they have no host-side signals to put next to it.
        "record": "instance_gpu:numawatch_gpu_held_idle:ratio_rate5m",
        "expr": (
            "(\n"
            f"    max by ({GPU}) (rate(numawatch_gpu_held_idle_seconds_total[5m]))\n"
            f"  / (max by ({GPU}) (rate(numawatch_gpu_sampled_seconds_total[5m])) > 0)\n"
            ")\n"
            f"* on ({GPU}) group_right ()\n"
            f'  group by ({GPU}, namespace, pod, container) (numawatch_gpu_processes{{container!=""}})'
        ),
    },
    {
        # Seconds per second the holder's threads, summed, waited for a CPU (0.005 = 0.5 % of the time). pod_uid is
        # summed away: a pod re-created under the same name is the same holder for a fleet view.
        "record": "instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m",
        "expr": (
            f"sum by ({HOLDER}) (\n"
            f"  max by ({HOLDER}, pod_uid) (rate(numawatch_gpu_holder_run_delay_seconds_total[5m]))\n"
            ")"
        ),
    },
    {
        # Share of the cluster's sampled GPU time that GPUs sat idle while held: the fleet's headline number.
        "record": "cluster:numawatch_gpu_held_idle:ratio_rate5m",
        "expr": (
            "sum by (cluster) (max by (cluster, instance, gpu, uuid) "
            "(rate(numawatch_gpu_held_idle_seconds_total[5m])))\n"
            "/ (sum by (cluster) (max by (cluster, instance, gpu, uuid) "
            "(rate(numawatch_gpu_sampled_seconds_total[5m]))) > 0)"
        ),
    },
]

# NUMA capacity (docs/capacity.md). Every rule first takes the max per (cluster, instance, ...) so that a node
# scraped by two jobs is counted once.
CAPACITY_RECORDING_RULES = [
    {
        # How many more replicas of each named pod shape fit in the cluster right now: the sum over nodes of what
        # each node's kubelet would still admit under its own Topology Manager policy and scope.
        "record": "cluster_shape:numawatch_capacity_shape_replicas:sum",
        "expr": "sum by (cluster, shape) (max by (cluster, instance, shape) (numawatch_capacity_shape_replicas))",
    },
    {
        # Nodes that would admit at least one more replica of the shape.
        "record": "cluster_shape:numawatch_capacity_shape_nodes:count",
        "expr": "count by (cluster, shape) (max by (cluster, instance, shape) (numawatch_capacity_shape_replicas) > 0)",
    },
    # Free exclusive CPUs, Memory Manager memory and huge pages, and devices, summed over every NUMA node; and the
    # largest request of each that one NUMA node somewhere in the cluster could still take alone. One rule per unit,
    # as the families are.
    *(
        {
            "record": f"{prefix}:numawatch_capacity_{quantity}_{unit}:{aggregation}",
            "expr": (
                f"{aggregation} by ({by}) (\n"
                f"  max by (cluster, instance, numa_node{resource}) (numawatch_capacity_{quantity}_{unit})\n"
                ")"
            ),
        }
        for quantity, aggregation in (("free", "sum"), ("largest_fit", "max"))
        for unit, prefix, by, resource in (
            ("cpus", "cluster", "cluster", ""),
            ("bytes", "cluster_resource", "cluster, resource", ", resource"),
            ("devices", "cluster_resource", "cluster, resource", ", resource"),
        )
    ),
]


def rule(alert: Alert) -> dict[str, object]:
    out: dict[str, object] = {"alert": alert.name, "expr": alert.expr, "for": alert.for_}
    if alert.keep_firing_for:
        out["keep_firing_for"] = alert.keep_firing_for
    out["labels"] = {"severity": alert.severity}
    out["annotations"] = {
        "summary": alert.summary,
        "description": alert.description,
        "runbook_url": f"{CONFIG['runbook_url_base']}{alert.name}.md",
    }
    return out


def alerts_document() -> dict[str, object]:
    return {
        "groups": [
            {"name": "numawatch-drift", "rules": [rule(a) for a in drift_alerts()]},
            {"name": "numawatch-fleet", "rules": [rule(a) for a in fleet_alerts()]},
            {"name": "numawatch-meta", "rules": [rule(a) for a in meta_alerts()]},
        ]
    }


def rules_document() -> dict[str, object]:
    return {
        "groups": [
            {"name": "numawatch-recording", "rules": RECORDING_RULES},
            {"name": "numawatch-gpu", "rules": GPU_RECORDING_RULES},
        ]
    }


def capacity_document() -> dict[str, object]:
    return {"groups": [{"name": "numawatch-capacity", "rules": CAPACITY_RECORDING_RULES}]}


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line PromQL reads best as a literal block; everything else stays a plain or quoted scalar.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)

HEADER = "# Generated by alerts/generate.py; edit that file and run it, never this one.\n"


def render(document: dict[str, object]) -> str:
    return HEADER + yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def outputs() -> dict[Path, str]:
    return {
        ALERTS_FILE: render(alerts_document()),
        RULES_FILE: render(rules_document()),
        CAPACITY_FILE: render(capacity_document()),
    }


def main(argv: list[str] | None = None) -> int:
    return sync(outputs, "alerts/generate.py", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
