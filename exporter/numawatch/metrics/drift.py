"""The drift families and the label contract behind them: which labels of a finding name its subject (and become
``numawatch_drift``'s series labels), which describe it (``numawatch_drift_info``), and which are readings that
change from one evaluation to the next (the finding's message and ``numawatch check --format json`` only).

A finding carries every label its check knows (``Finding.labels``, the JSON contract); the exporter decides what
becomes a series label. ``numawatch_drift`` is what alerts fire on, so its series must keep one identity for as long
as the drift lasts: a label whose value moves while the subject stays the same (the CPUs an IRQ hit in the last
window, the value a setting has now) would end the series and start another, resetting every alert's ``for:`` and
filling Prometheus with series that each lived one scrape. So a drift series is the check, its severity and the
check's identity labels (the subject: a container, a GPU, an IRQ, a setting, a file...), and nothing else; an
identity label that does not apply to a finding is left out, never written empty.

``numawatch_drift_info`` repeats every drift series' labels and adds the details: what the subject looks like now
against what it should be (``value`` and ``expected``, the CPUs of a cpuset). Details change only when someone
changes the host, so the info series is as stable as the drift behind it, and one query shows every finding with
what is wrong. Readings (``cpus`` of the rate checks, the nodes a container's memory spills to right now) stay out
of both: they would churn a series per evaluation.

Check ids are public contracts, and so is this table: docs/checks.md shows each check's **Labels:** (identity) and
**Details:** from it, and tests/test_checks_kubelet.py holds the two in step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from numawatch.checks import SUBJECT_LABELS, Evaluation, Finding
from numawatch.inputs import FINDINGS, exposes
from numawatch.metrics.exposition import GaugeRows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelContract:
    """How one check's finding labels are exported."""

    identity: tuple[str, ...]  # numawatch_drift's labels after check and severity: what drifted
    details: tuple[str, ...] = ()  # added in numawatch_drift_info: what it looks like against what it should be
    readings: tuple[str, ...] = ()  # measured anew every evaluation: in the message and JSON only

    def __post_init__(self) -> None:
        named = (*self.identity, *self.details, *self.readings)
        if len(set(named)) != len(named) or not set(named) <= set(SUBJECT_LABELS):
            raise ValueError(f"labels must be distinct subject labels: {named}")


CONTAINER = ("namespace", "pod", "pod_uid", "container")
POD = ("namespace", "pod", "pod_uid")
# A process outside any container is named by its command instead of the container labels.
GPU_USER = (*CONTAINER, "name")
SETTING = LabelContract(identity=("setting",), details=("value", "expected"))

CONTRACT: Mapping[str, LabelContract] = {
    # kubelet configuration and state
    "kubelet_cpu_manager_policy": SETTING,
    "kubelet_topology_manager_policy": SETTING,
    "kubelet_topology_manager_scope": SETTING,
    "kubelet_memory_manager_policy": SETTING,
    "kubelet_reserved_cpus_mismatch": LabelContract(identity=(), details=("cpus", "expected")),
    "kubelet_state_stale": LabelContract(identity=("file", "reason")),
    "kubelet_podresources_checkpoint_mismatch": LabelContract(identity=CONTAINER),
    # pods and containers
    "pod_not_guaranteed": LabelContract(identity=POD),
    "container_not_exclusive": LabelContract(identity=CONTAINER),
    "container_cpuset_drift": LabelContract(identity=CONTAINER, details=("cpus", "expected")),
    "exclusive_cpu_overlap": LabelContract(identity=CONTAINER, details=("cpus",)),
    "container_numa_split": LabelContract(identity=CONTAINER, details=("numa_node",)),
    "container_gpu_numa_mismatch": LabelContract(identity=(*CONTAINER, "gpu"), details=("numa_node",)),
    "container_memory_numa_mismatch": LabelContract(identity=CONTAINER, details=("numa_node",)),
    # Which remote nodes hold more than nothing moves with every page the container touches.
    "container_memory_remote": LabelContract(identity=CONTAINER, readings=("numa_node",)),
    "container_outside_isolated": LabelContract(identity=CONTAINER, details=("cpus",)),
    # GPUs
    "gpu_numa_unknown": LabelContract(identity=("gpu", "reason"), details=("uuid",)),
    # host topology and kernel
    "numa_topology_inconsistent": LabelContract(identity=("reason", "numa_node", "gpu"), details=("cpus",)),
    "kernel_numa_balancing": SETTING,
    "thp_enabled": SETTING,
    "thp_defrag": SETTING,
    "vm_swappiness": SETTING,
    "cpufreq_governor": LabelContract(identity=("governor",), details=("cpus", "expected")),
    "isolation_params_mismatch": LabelContract(identity=("setting",), details=("cpus", "value", "expected")),
    "hugepages_shortfall": LabelContract(identity=("size", "numa_node"), details=("value", "expected")),
    # interrupts: the CPUs a rate check saw hit are those of the last window
    "irq_on_isolated_cpu": LabelContract(identity=("irq", "name"), details=("cpus", "managed")),
    "irq_activity_on_isolated_cpu": LabelContract(identity=("irq", "name"), details=("managed",), readings=("cpus",)),
    "tick_on_nohz_full": LabelContract(identity=(), readings=("cpus",)),
    "irqbalance_unbanned": LabelContract(identity=("reason", "file"), details=("cpus",)),
    # GPU processes
    "gpu_process_remote": LabelContract(identity=("gpu", *GPU_USER), details=("uuid", "numa_node", "cpus")),
    "gpu_process_memlock": LabelContract(identity=GPU_USER, details=("value", "expected")),
    "gpu_holder_mismatch": LabelContract(identity=("gpu", *CONTAINER, "reason"), details=("uuid", "expected")),
    # the platform around pinned CPUs and GPUs
    "kubelet_reserved_incoherent": LabelContract(identity=("reason", "setting"), details=("cpus", "value", "expected")),
    # The taint or label asked is the subject; what the node declares instead and where is what it looks like.
    "node_taint_missing": LabelContract(identity=("setting", "expected"), details=("file", "value")),
    "node_workload_not_isolated": LabelContract(identity=POD, details=("value",)),
    "gpu_nic_path": LabelContract(identity=("gpu", "reason"), details=("uuid", "value", "expected")),
    # The GPUs a container holds stay the same for its life.
    "container_gpus_not_peered": LabelContract(identity=(*CONTAINER, "gpu")),
    # The idle states are the subject; which CPUs are protected moves as pinned pods come and go.
    "cpuidle_deep_state": LabelContract(identity=("name",), details=("cpus", "value", "expected")),
}

# A check without an entry (one added without deciding; tests/test_checks_kubelet.py fails until it has one) is
# exported with the labels that name a subject in every check, and the labels that are details in every check.
FALLBACK = LabelContract(
    identity=tuple(label for label in SUBJECT_LABELS if label not in ("cpus", "value", "expected", "uuid", "managed")),
    details=("cpus", "value", "expected", "uuid", "managed"),
)


def contract_of(check: str) -> LabelContract:
    return CONTRACT.get(check, FALLBACK)


def _labels(finding: Finding, names: tuple[str, ...]) -> dict[str, str]:
    """The finding's values of ``names`` that it has, in the order of SUBJECT_LABELS (values are never empty)."""
    labels = finding.labels
    return {"check": finding.check, "severity": finding.severity,
            **{name: labels[name] for name in SUBJECT_LABELS if name in names and name in labels}}


def series_labels(finding: Finding) -> dict[str, str]:
    """The finding's numawatch_drift labels: check, severity and the check's identity labels it has."""
    return _labels(finding, contract_of(finding.check).identity)


def info_labels(finding: Finding) -> dict[str, str]:
    """The finding's numawatch_drift_info labels: its drift labels and its details."""
    contract = contract_of(finding.check)
    return _labels(finding, (*contract.identity, *contract.details))


class Unexported:
    """The (check, label) pairs already logged as in no part of the check's label contract, by whoever renders a
    sequence of evaluations (the server): one line per pair is enough."""

    def __init__(self) -> None:
        self._logged: set[tuple[str, str]] = set()

    def warn(self, evaluation: Evaluation) -> None:
        """Log (once per check and label) a finding label that the check's contract does not place: a check changed
        without its contract. It stays in the message and the JSON either way."""
        for finding in evaluation.findings:
            contract = contract_of(finding.check)
            if contract is FALLBACK:
                continue
            known = {*contract.identity, *contract.details, *contract.readings}
            for name in finding.labels:
                if name not in known and (finding.check, name) not in self._logged:
                    self._logged.add((finding.check, name))
                    log.warning(
                        "check %s: label %s is in no part of its label contract; it is not exported", finding.check,
                        name,
                    )


def _family(name: str, help_text: str, rows: list[dict[str, str]]) -> Metric:
    # Series of different checks carry different label names, so the samples are added directly (Prometheus treats
    # a label that is left out exactly like an empty one; the exposition is smaller and says what applies).
    family = GaugeMetricFamily(name, help_text)
    seen: set[tuple[tuple[str, str], ...]] = set()
    for labels in rows:
        key = tuple(labels.items())
        # Two findings with one identity would be one series twice, which Prometheus rejects; the count per check
        # stays exact in numawatch_drift_findings.
        if key in seen:
            continue
        seen.add(key)
        family.add_sample(name, labels, 1)
    return family


@exposes("numawatch_drift", inputs=(FINDINGS,))
def drift(evaluation: Evaluation) -> Metric:
    return _family(
        "numawatch_drift",
        "1 for every drift subject: the check id, its severity and the labels that name what drifted (which labels "
        "a check uses is its label contract, docs/checks.md); details are in numawatch_drift_info.",
        [series_labels(finding) for finding in evaluation.findings],
    )


@exposes("numawatch_drift_info", inputs=(FINDINGS,))
def drift_info(evaluation: Evaluation) -> Metric:
    return _family(
        "numawatch_drift_info",
        "Always 1, one series per drift finding: the labels of its numawatch_drift series and the details of what "
        "is wrong (value against expected, the CPUs concerned); measured readings are in numawatch check only.",
        [info_labels(finding) for finding in evaluation.findings],
    )


@exposes("numawatch_drift_findings", inputs=(FINDINGS,))
def drift_findings(evaluation: Evaluation) -> Metric:
    family = GaugeRows(
        "numawatch_drift_findings",
        "Number of drift findings per check that was evaluated (0: it looked and found nothing, or the host lacks "
        "what it protects); absent for a check that was not evaluated (see numawatch_check_evaluated).",
        labels=("check",),
    )
    skipped = {item.check for item in evaluation.not_evaluated}
    for check, count in evaluation.findings_per_check().items():
        if check not in skipped:
            family.rows.append((check, count))
    return family


@exposes("numawatch_check_evaluated", inputs=(FINDINGS,))
def check_evaluated(evaluation: Evaluation) -> Metric:
    family = GaugeRows(
        "numawatch_check_evaluated",
        "1 when the check ran, 0 when it could not (its inputs are missing, or the intent disables it); "
        "numawatch check shows the reason.",
        labels=("check",),
    )
    skipped = {item.check for item in evaluation.not_evaluated}
    family.rows.extend([(check, 0 if check in skipped else 1) for check in evaluation.checks])
    return family


@exposes("numawatch_check_applicable", inputs=(FINDINGS,))
def check_applicable(evaluation: Evaluation) -> Metric:
    family = GaugeRows(
        "numawatch_check_applicable",
        "1 when the check ran on a host that has what it protects, 0 when the host lacks it (no THP, no cpufreq, "
        "no NUMA balancing: evaluated, nothing can be wrong); absent for a check that was not evaluated.",
        labels=("check",),
    )
    skipped = {item.check for item in evaluation.not_evaluated}
    absent = {item.check for item in evaluation.not_applicable}
    for check in evaluation.checks:
        if check not in skipped:
            family.rows.append((check, 0 if check in absent else 1))
    return family
