"""What a check is (``Check``, a pure function from (Host, Intent) to findings), what it finds (``Finding``), the
ways it says it could not look or found nothing to look at (``NotEvaluated``, ``NotApplicable``), and what an
evaluation of every check holds (``Evaluation``).

The checks import this module and the package (numawatch.checks) lists them through its registry: this module
imports neither, so the checks and the registry that names them do not depend on each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from numawatch.host import Host
from numawatch.inputs import Input, Keying, keying
from numawatch.intent import Intent
from numawatch.model import frozen_map
from numawatch.model.topology import Topology

SEVERITIES = ("critical", "warning", "info")

# Subject labels a finding may carry, in the order they are shown and exported. Keeping the list closed keeps the
# numawatch_drift series' label set stable and bounded (no per-PID or free-form labels).
SUBJECT_LABELS = (
    "namespace",
    "pod",
    "pod_uid",
    "container",
    "gpu",
    "uuid",
    "cpus",
    "numa_node",
    "file",
    "reason",
    "irq",
    "name",
    "managed",
    "setting",
    "value",
    "expected",
    "governor",
    "size",
)


class NotEvaluated(Exception):
    """The check's inputs are missing; the message says which and why."""


class NotApplicable(Exception):
    """The host lacks what the check protects (a kernel without THP has no THP mode to get wrong); the message says
    what is absent. The check was evaluated and found nothing: unlike NotEvaluated, this is not "could not look"."""


def require(host: Host, name: str) -> Any:
    """The source's snapshot, or NotEvaluated with the reason the source is down.

    A topology in which some NUMA node names its CPUs nowhere (``problem("cpulist")``) has a CPU-to-node map with
    holes: a check that places CPUs on nodes cannot judge it, so it is not evaluated, naming the file. The checks
    that can work on such a map (the command line's parameters, the map's own consistency) take ``partial_topology``.
    """
    value = partial_topology(host) if name == "topology" else host.get(name)
    if value is None:
        raise NotEvaluated(f"needs the {name} source: {host.down_reason(name)}")
    if name == "topology":
        require_known(value, "cpulist")
    return value


def partial_topology(host: Host) -> Topology:
    """The topology even where a node's CPU list is unknown (``require`` refuses that one); NotEvaluated when down."""
    value = host.get("topology")
    if value is None:
        raise NotEvaluated(f"needs the topology source: {host.down_reason('topology')}")
    return value


def require_known(topology: Topology, *keys: str) -> Topology:
    """The topology, or NotEvaluated naming the malformed optional file (a key of Topology.problems) that one of
    ``keys`` needs: a bad optional file makes only the checks that use it not evaluated."""
    for key in keys:
        problem = topology.problem(key)
        if problem is not None:
            raise NotEvaluated(problem)
    return topology


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str
    labels: Mapping[str, str]
    message: str
    remediation: str

    def as_dict(self) -> dict[str, object]:
        return {
            "check": self.check,
            "severity": self.severity,
            "labels": dict(self.labels),
            "message": self.message,
            "remediation": self.remediation,
        }


CheckFunction = Callable[[Host, Intent], Iterable[Finding]]


@dataclass(frozen=True)
class Check:
    id: str
    severity: str  # default; intent may override
    summary: str  # one line, shown in docs and the landing page
    remediation: str  # default remediation text; findings may specialise it
    run: CheckFunction
    knob: str = ""  # the reference-profile knob (DOMAIN.md) it protects, e.g. "1" or "h8"
    # What it reads of the Host (numawatch.inputs), besides the intent: ``numawatch explain`` computes its worst-case
    # staleness from them, and tests/test_dataflow.py holds every registered check to them. Its verdict is made
    # again only when one of them moved (``keyed``: numawatch.store).
    inputs: tuple[Input, ...] = ()
    keyed: Keying | None = field(init=False, compare=False, repr=False, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keyed", keying(self.inputs))

    def finding(
        self,
        intent: Intent,
        labels: Mapping[str, str],
        message: str,
        remediation: str | None = None,
        severity: str | None = None,
    ) -> Finding:
        """Build a finding with the intent's severity override and only known, non-empty labels.

        ``severity``: this finding's own, where it is milder than the check's (the intent's override still wins).
        """
        unknown = set(labels) - set(SUBJECT_LABELS)
        if unknown:
            raise ValueError(f"check {self.id}: unknown subject labels {sorted(unknown)}")
        clean = {k: str(labels[k]) for k in SUBJECT_LABELS if k in labels and labels[k] not in (None, "")}
        return Finding(
            check=self.id,
            severity=intent.severity_for(self.id, severity or self.severity),
            labels=frozen_map(clean),
            message=message,
            remediation=remediation or self.remediation,
        )


@dataclass(frozen=True)
class NotEvaluatedCheck:
    check: str
    reason: str


@dataclass(frozen=True)
class NotApplicableCheck:
    check: str
    reason: str


@dataclass(frozen=True)
class Evaluation:
    host: Host
    intent: Intent
    findings: tuple[Finding, ...]
    not_evaluated: tuple[NotEvaluatedCheck, ...]
    checks: tuple[str, ...]  # every known check id (enabled or not)
    started: float = field(default_factory=time.time)
    duration_seconds: float = 0.0
    # Checks that looked and found the host without what they protect; they count as evaluated with no finding.
    not_applicable: tuple[NotApplicableCheck, ...] = ()

    def findings_per_check(self) -> dict[str, int]:
        counts = dict.fromkeys(self.checks, 0)
        for finding in self.findings:
            counts[finding.check] = counts.get(finding.check, 0) + 1
        return counts
