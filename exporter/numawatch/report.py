"""`numawatch check` output: a text table for a person on the node, JSON for scripts, and one line for
node-problem-detector (``--format npd``, one node condition per group of checks: ``NODE_CONDITIONS``).

The table and JSON show the same three parts, because "no findings" means nothing without the other two: the
findings (grouped by severity), the checks that could not be evaluated and why, and how reading each source went.
All three end with the same verdict, which is also the exit status (``verdict``): findings (1), clean (0), or
unknown (2) when numawatch could not look. Which findings count is ``check --fail-on``'s: those of that severity or
worse (``FAIL_ON_DEFAULT``); the others are shown but leave the verdict to the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from numawatch import __version__
from numawatch.checks import SEVERITIES, SUBJECT_LABELS, Evaluation, Finding
from numawatch.host import window_seconds
from numawatch.hosttext import escaped

_WORKLOAD_KEYS = ("namespace", "pod", "container")

# Exit statuses of `numawatch check`, node-problem-detector's custom-plugin protocol: 0 OK, 1 NonOK, 2 Unknown.
EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_UNKNOWN = 2

# Sources without which "no findings" says nothing: the CPU/NUMA topology (online CPUs, NUMA nodes, isolation) is
# what nearly every check compares with, and numawatch never guesses it. With such a source down a clean result is
# "unknown", not "clean"; findings are still findings (what was seen is true whatever could not be read).
ESSENTIAL_SOURCES = ("topology",)

# The least severe finding that makes ``check`` exit 1, per format. A person's report (table, JSON) fails on warning
# and critical: an info finding is "worth knowing, nothing is wrong by itself" (docs/checks.md), such as Debian's
# default vm.swappiness. node-problem-detector's conditions are set by every finding of their group, info included,
# as the alerts count every numawatch_drift series (NumawatchHostTuningDrift fires on vm_swappiness too).
FAIL_ON_DEFAULT: Mapping[str, str] = {"table": "warning", "json": "warning", "npd": "info"}


@dataclass(frozen=True)
class Verdict:
    """What one evaluation amounts to: ``status`` "findings", "clean" or "unknown", its exit status, and for
    "unknown" the one-line reason."""

    status: str
    exit_code: int
    reason: str | None = None
    below: int = 0  # findings less severe than --fail-on: shown, not counted
    fail_on: str = "info"


def verdict(evaluation: Evaluation, fail_on: str = "info") -> Verdict:
    """Findings of severity ``fail_on`` or worse win (exit 1); else unknown (exit 2) when no check could be evaluated
    or an essential source is down; else clean (exit 0)."""
    worst = SEVERITIES.index(fail_on)
    failing = sum(1 for finding in evaluation.findings if SEVERITIES.index(finding.severity) <= worst)
    if failing:
        return Verdict("findings", EXIT_FINDINGS, below=len(evaluation.findings) - failing, fail_on=fail_on)
    outcome = _without_findings(evaluation)
    return replace(outcome, below=len(evaluation.findings), fail_on=fail_on)


def _without_findings(evaluation: Evaluation) -> Verdict:
    host = evaluation.host
    total = len(evaluation.checks)
    if total == len(evaluation.not_evaluated):
        down = sum(1 for status in host.statuses.values() if not status.up)
        disabled = sum(1 for item in evaluation.not_evaluated if item.reason == "disabled by intent")
        why = f", {disabled} disabled by intent" if disabled else ""
        return Verdict(
            "unknown",
            EXIT_UNKNOWN,
            f"no check could be evaluated ({total} of {total} not evaluated{why}; {down} of {len(host.statuses)} "
            f"source{_s(len(host.statuses))} down)",
        )
    for name in ESSENTIAL_SOURCES:
        status = host.statuses.get(name)
        if status is not None and not status.up:
            return Verdict(
                "unknown",
                EXIT_UNKNOWN,
                f"the {name} source is down ({_one_line(status.reason)}), so finding nothing does not mean the "
                "node is clean",
            )
    return Verdict("clean", EXIT_CLEAN)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def subject(labels: Mapping[str, str]) -> str:
    """A finding's subject in one short phrase: ``namespace/pod/container`` first, then ``key=value`` pairs.

    The pod UID is left out when the pod's name is known (it is in the JSON); "node" when the finding is about the
    node as a whole.
    """
    parts: list[str] = []
    shown: set[str] = set()
    if labels.get("namespace") and labels.get("pod"):
        keys = [key for key in _WORKLOAD_KEYS if labels.get(key)]
        parts.append("/".join(labels[key] for key in keys))
        shown.update(keys)
        shown.add("pod_uid")
    for key in SUBJECT_LABELS:
        if key not in shown and labels.get(key):
            parts.append(f"{key}={labels[key]}")
    return " ".join(parts) or "node"


def timestamp(seconds: float) -> str:
    """RFC 3339 UTC with milliseconds, e.g. ``2026-11-30T08:54:00.123Z``."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def as_dict(evaluation: Evaluation, host_root: str, fail_on: str = FAIL_ON_DEFAULT["json"]) -> dict[str, Any]:
    """The JSON document of ``check --format json``. The first two keys are a contract; the rest are additions."""
    host = evaluation.host
    window = window_seconds(host)
    outcome = verdict(evaluation, fail_on)
    return {
        "findings": [finding.as_dict() for finding in evaluation.findings],
        "not_evaluated": [{"check": item.check, "reason": item.reason} for item in evaluation.not_evaluated],
        "not_applicable": [{"check": item.check, "reason": item.reason} for item in evaluation.not_applicable],
        "sources": [
            {
                "name": status.name,
                "up": status.up,
                "reason": status.reason,
                "duration_seconds": round(status.duration_seconds, 6),
                "cached": status.cached,
            }
            for status in host.statuses.values()
        ],
        "intent": evaluation.intent.source,
        "host_root": host_root,
        "version": __version__,
        "timestamp": timestamp(host.timestamp),
        "checks": list(evaluation.checks),
        "duration_seconds": round(evaluation.duration_seconds, 6),
        "window_seconds": None if window is None else round(window, 3),
        "status": outcome.status,
        "exit_code": outcome.exit_code,
        "status_reason": outcome.reason,
        "fail_on": outcome.fail_on,
    }


def render_json(evaluation: Evaluation, host_root: str, fail_on: str = FAIL_ON_DEFAULT["json"]) -> str:
    return json.dumps(as_dict(evaluation, host_root, fail_on), indent=2) + "\n"


def summary(evaluation: Evaluation) -> str:
    """One line: how many findings of which severity, and how much of the host could be looked at."""
    counts = {severity: 0 for severity in SEVERITIES}
    for finding in evaluation.findings:
        counts[finding.severity] = counts.get(finding.severity, 0) + 1
    evaluated = len(evaluation.checks) - len(evaluation.not_evaluated)
    down = sum(1 for status in evaluation.host.statuses.values() if not status.up)
    if evaluation.findings:
        by_severity = ", ".join(f"{count} {severity}" for severity, count in counts.items() if count)
        head = f"{len(evaluation.findings)} finding{_s(len(evaluation.findings))} ({by_severity})"
    else:
        head = "No findings"
    return (
        f"{head}; {evaluated} of {len(evaluation.checks)} check{_s(len(evaluation.checks))} evaluated, "
        f"{down} of {len(evaluation.host.statuses)} source{_s(len(evaluation.host.statuses))} down."
    )


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _grouped(findings: tuple[Finding, ...]) -> dict[str, list[Finding]]:
    groups: dict[str, list[Finding]] = {severity: [] for severity in SEVERITIES}
    for finding in findings:
        groups.setdefault(finding.severity, []).append(finding)
    return {severity: items for severity, items in groups.items() if items}


def _indented(text: str, prefix: str) -> list[str]:
    lines = text.splitlines() or [""]
    return [prefix + lines[0], *(prefix + "  " + line for line in lines[1:])]


def render_table(evaluation: Evaluation, host_root: str, fail_on: str = FAIL_ON_DEFAULT["table"]) -> str:
    """The human report: findings by severity, then not-evaluated checks, then sources, then a summary line.

    Every text in it passes ``hosttext.escaped``: messages and reasons quote what host files hold, and a terminal
    must never receive a control character from them (an escape sequence, a newline that forges a line)."""
    return "\n".join(escaped(line) for line in _table_lines(evaluation, host_root, fail_on)) + "\n"


def _table_lines(evaluation: Evaluation, host_root: str, fail_on: str) -> list[str]:
    host = evaluation.host
    window = window_seconds(host)
    over = f" over a {window:.1f}s window" if window is not None else ""
    out = [
        f"numawatch {__version__} check of {host_root} against {evaluation.intent.source}, "
        f"{timestamp(host.timestamp)}{over}",
        "",
    ]
    groups = _grouped(evaluation.findings)
    if not groups:
        out += ["Findings: none", ""]
    for severity, findings in groups.items():
        out.append(f"{severity.upper()} ({len(findings)})")
        width = max(len(finding.check) for finding in findings)
        for finding in findings:
            out.append(f"  {finding.check:<{width}}  {subject(finding.labels)}")
            # A message of numawatch's own may span lines: its later lines are indented under the first, so no
            # line of it starts where a finding, a heading or the verdict does.
            out += _indented(finding.message, "      ")
            out += _indented(f"fix: {finding.remediation}", "      ")
        out.append("")

    if evaluation.not_evaluated:
        out.append(f"Not evaluated ({len(evaluation.not_evaluated)})")
        width = max(len(item.check) for item in evaluation.not_evaluated)
        out += [f"  {item.check:<{width}}  {item.reason}" for item in evaluation.not_evaluated]
        out.append("")

    if evaluation.not_applicable:
        out.append(f"Not applicable on this host ({len(evaluation.not_applicable)})")
        width = max(len(item.check) for item in evaluation.not_applicable)
        out += [f"  {item.check:<{width}}  {item.reason}" for item in evaluation.not_applicable]
        out.append("")

    out.append("Sources")
    statuses = list(host.statuses.values())
    width = max((len(status.name) for status in statuses), default=0)
    for status in statuses:
        state = "up" if status.up else "down"
        detail = status.reason if not status.up else ("cached" if status.cached else "")
        line = f"  {status.name:<{width}}  {state:<4}  {status.duration_seconds:8.4f}s  {detail}"
        out.append(line.rstrip())
    out += ["", verdict_line(verdict(evaluation, fail_on)), summary(evaluation)]
    return out


def verdict_line(outcome: Verdict) -> str:
    """The table's verdict, above its summary line: ``Result: unknown (exit 2): <why>``, ``Result: clean (exit 0)``,
    ``Result: clean (exit 0; 1 finding below --fail-on warning)``."""
    below = f"; {outcome.below} finding{_s(outcome.below)} below --fail-on {outcome.fail_on}" if outcome.below else ""
    if outcome.reason:
        return f"Result: {outcome.status} (exit {outcome.exit_code}{below}): {outcome.reason}"
    return f"Result: {outcome.status} (exit {outcome.exit_code}{below})"


# --------------------------------------------------------------------------------------- node-problem-detector
# `check --format npd` is node-problem-detector's custom-plugin protocol: the exit status is the condition's status
# (0 OK: condition False, 1 NonOK: True, 2 Unknown) and stdout, trimmed, is its message. NPD cuts the message at the
# plugin config's max_output_length (default 80 bytes, byte-wise: a cut could split a UTF-8 character), so the
# line is printable ASCII and never longer. docs/checks.md ("Node conditions") documents the groups below.
NPD_MAX_OUTPUT = 80


@dataclass(frozen=True)
class ConditionGroup:
    """One node condition set through node-problem-detector: the checks it summarises and how NPD names it.

    ``reason`` is the condition's reason while it is True (the NPD rule's); ``healthy_reason`` and
    ``healthy_message`` are NPD's default condition, shown while it is False. ``window`` is the ``--window`` the
    group's rate checks need (0: none of its checks needs two readings); ``nvml``: whether any of its checks needs
    NVML (the GPU holders), so the other groups skip NVML's start-up.
    """

    condition: str
    reason: str
    healthy_reason: str
    healthy_message: str
    summary: str
    checks: tuple[str, ...]
    window: float = 0.0
    nvml: bool = False


NODE_CONDITIONS: tuple[ConditionGroup, ...] = (
    ConditionGroup(
        condition="KubeletPolicyDrift",
        reason="KubeletPolicyMismatch",
        healthy_reason="KubeletPolicyAsIntended",
        healthy_message="kubelet CPU, Memory and Topology Manager settings are as intended",
        summary="the kubelet is not configured to pin as the intent asks (policies, scope, reserved CPUs)",
        checks=(
            "kubelet_cpu_manager_policy",
            "kubelet_topology_manager_policy",
            "kubelet_topology_manager_scope",
            "kubelet_memory_manager_policy",
            "kubelet_reserved_cpus_mismatch",
            "kubelet_reserved_incoherent",
        ),
    ),
    ConditionGroup(
        condition="KubeletStateStale",
        reason="KubeletCheckpointStale",
        healthy_reason="KubeletCheckpointCurrent",
        healthy_message="the kubelet's CPU and Memory Manager checkpoints match its settings",
        summary="the kubelet will refuse to start after its next restart (a checkpoint written under other settings)",
        checks=("kubelet_state_stale", "kubelet_podresources_checkpoint_mismatch"),
    ),
    ConditionGroup(
        condition="NUMAPinningDrift",
        reason="PinningDriftFound",
        healthy_reason="PinnedAsIntended",
        healthy_message="containers that must be pinned are, on their GPUs' NUMA node",
        summary="workloads are not pinned as intended: QoS, exclusive CPUs, cpusets, NUMA alignment, GPU holders",
        checks=(
            "pod_not_guaranteed",
            "container_not_exclusive",
            "container_cpuset_drift",
            "exclusive_cpu_overlap",
            "container_numa_split",
            "container_gpu_numa_mismatch",
            "container_memory_numa_mismatch",
            "container_memory_remote",
            "container_outside_isolated",
            "gpu_process_remote",
            "gpu_holder_mismatch",
            "container_gpus_not_peered",
        ),
        nvml=True,
    ),
    ConditionGroup(
        condition="GPUNodeNotDedicated",
        reason="GPUNodeShared",
        healthy_reason="GPUNodeDedicated",
        healthy_message="the node declares the intent's taints and labels and runs no foreign workloads",
        summary="other workloads can land on the GPU node: a missing taint or label, a pod that holds no GPU",
        checks=("node_taint_missing", "node_workload_not_isolated"),
    ),
    ConditionGroup(
        condition="NUMATopologyInconsistent",
        reason="NUMATopologyUnreliable",
        healthy_reason="NUMATopologyConsistent",
        healthy_message="the kernel's NUMA map, GPUs' NUMA nodes and GPU-NIC paths are consistent",
        summary="the NUMA or PCIe layout is wrong: bad firmware NUMA data, a GPU without a NUMA node or near NIC",
        checks=("gpu_numa_unknown", "numa_topology_inconsistent", "gpu_nic_path"),
    ),
    ConditionGroup(
        condition="CPUIsolationDrift",
        reason="IsolationBroken",
        healthy_reason="IsolationAsIntended",
        healthy_message="isolated CPUs are isolated: parameters, IRQs, ticks and irqbalance",
        summary="isolated CPUs are disturbed: isolation parameters, device IRQs, timer ticks, irqbalance's bans",
        checks=(
            "isolation_params_mismatch",
            "irq_on_isolated_cpu",
            "irq_activity_on_isolated_cpu",
            "tick_on_nohz_full",
            "irqbalance_unbanned",
        ),
        window=3.0,
    ),
    ConditionGroup(
        condition="HostTuningDrift",
        reason="HostTuningMismatch",
        healthy_reason="HostTunedAsIntended",
        healthy_message="kernel memory, CPU frequency and idle settings are as intended",
        summary="kernel tuning differs from the intent: NUMA balancing, THP, swappiness, governor, C-states, memory",
        checks=(
            "kernel_numa_balancing",
            "thp_enabled",
            "thp_defrag",
            "vm_swappiness",
            "cpufreq_governor",
            "cpuidle_deep_state",
            "hugepages_shortfall",
            "gpu_process_memlock",
        ),
        nvml=True,
    ),
)
CONDITION_BY_NAME: Mapping[str, ConditionGroup] = {group.condition: group for group in NODE_CONDITIONS}


def restrict(evaluation: Evaluation, checks: Collection[str]) -> Evaluation:
    """The evaluation as if only ``checks`` existed: what a node condition (``check --group``) is judged on."""
    wanted = set(checks)
    return replace(
        evaluation,
        findings=tuple(finding for finding in evaluation.findings if finding.check in wanted),
        not_evaluated=tuple(item for item in evaluation.not_evaluated if item.check in wanted),
        not_applicable=tuple(item for item in evaluation.not_applicable if item.check in wanted),
        checks=tuple(check for check in evaluation.checks if check in wanted),
    )


def npd_line(text: str, host_root: str = "/") -> str:
    """``text`` as NPD shows it: one line of printable ASCII of at most NPD_MAX_OUTPUT characters, the host root's
    prefix taken out of the paths it names (in the DaemonSet every path would start with /host)."""
    root = host_root.rstrip("/")
    if root:
        text = text.replace(root + "/", "/")
    text = " ".join(text.split())
    text = "".join(char if " " <= char <= "~" else "?" for char in text)
    if len(text) > NPD_MAX_OUTPUT:
        text = text[: NPD_MAX_OUTPUT - 3].rstrip() + "..."
    return text


def npd_message(evaluation: Evaluation, host_root: str, fail_on: str = FAIL_ON_DEFAULT["npd"]) -> str:
    """The condition's message for ``check --format npd`` (the exit status is ``verdict``'s)."""
    outcome = verdict(evaluation, fail_on)
    if outcome.status == "findings":
        worst = SEVERITIES.index(fail_on)
        return _npd_findings(tuple(f for f in evaluation.findings if SEVERITIES.index(f.severity) <= worst),
                             host_root)
    if outcome.status == "unknown":
        return npd_line(f"unknown: {_npd_unknown_reason(evaluation, outcome)}", host_root)
    evaluated = len(evaluation.checks) - len(evaluation.not_evaluated)
    total = len(evaluation.checks)
    found = f"{outcome.below} below --fail-on {fail_on}" if outcome.below else "no findings"
    return npd_line(f"clean: {found}, {evaluated} of {total} check{_s(total)} evaluated", host_root)


def render_npd(evaluation: Evaluation, host_root: str, fail_on: str = FAIL_ON_DEFAULT["npd"]) -> str:
    return npd_message(evaluation, host_root, fail_on) + "\n"


def _npd_findings(findings: tuple[Finding, ...], host_root: str) -> str:
    """``3 findings: container_numa_split llm/vllm-0/server (+2 more)``: the count, then the most severe finding,
    shortened in the middle so the count and the "+N more" always survive the cut."""
    head = f"{len(findings)} finding{_s(len(findings))}: "
    tail = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    first = npd_line(f"{findings[0].check} {subject(findings[0].labels)}", host_root)
    room = NPD_MAX_OUTPUT - len(head) - len(tail)
    if len(first) > room:
        first = first[: room - 3].rstrip() + "..."
    return head + first + tail


def _npd_unknown_reason(evaluation: Evaluation, outcome: Verdict) -> str:
    """Why the condition is Unknown, shortest first: an essential source that is down, else the first check that
    could not be evaluated and why (the whole reason is on stderr, which NPD logs)."""
    for name in ESSENTIAL_SOURCES:
        status = evaluation.host.statuses.get(name)
        if status is not None and not status.up:
            return f"{name} source down: {status.reason}"
    if evaluation.not_evaluated:
        item = evaluation.not_evaluated[0]
        # The checks say "needs the <source> source: <why it is down>": the source and its reason are what to fix.
        source = _NEEDS_SOURCE.match(item.reason)
        if source is not None:
            return f"{source['name']} source down: {source['why']}"
        return f"{item.check}: {item.reason}"
    return outcome.reason or "cannot tell"


_NEEDS_SOURCE = re.compile(r"needs the (?P<name>\w+) source: (?P<why>.+)", re.DOTALL)
