"""Checks: pure functions from (Host, Intent) to findings, and the registry that names them.

A check id is a public contract (alert rules, dashboards and users' scripts key on it). A check whose inputs are
missing raises ``NotEvaluated`` with the reason instead of returning nothing, so "clean" and "could not look"
never look the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from numawatch.checks import registry
from numawatch.checks.check import (
    SEVERITIES,
    SUBJECT_LABELS,
    Check,
    CheckFunction,
    Evaluation,
    Finding,
    NotApplicable,
    NotApplicableCheck,
    NotEvaluated,
    NotEvaluatedCheck,
    partial_topology,
    require,
    require_known,
)
from numawatch.host import Host
from numawatch.intent import Intent

__all__ = [
    "SEVERITIES",
    "SUBJECT_LABELS",
    "Check",
    "CheckFunction",
    "Evaluation",
    "Finding",
    "NotApplicable",
    "NotApplicableCheck",
    "NotEvaluated",
    "NotEvaluatedCheck",
    "all_checks",
    "evaluate",
    "partial_topology",
    "require",
    "require_known",
]


def all_checks() -> tuple[Check, ...]:
    """Every registered check, in documentation order."""
    return registry.CHECKS


_FOUND, _NOT_EVALUATED, _NOT_APPLICABLE, _FAILED = "found", "not evaluated", "not applicable", "failed"
_Verdict = tuple[str, Any]  # (one of the above, the findings as a tuple or the reason)


def _run(check: Check, host: Host, intent: Intent) -> _Verdict:
    try:
        return _FOUND, tuple(check.run(host, intent))
    except NotEvaluated as reason:
        return _NOT_EVALUATED, str(reason)
    except NotApplicable as reason:
        return _NOT_APPLICABLE, str(reason)
    except Exception as error:  # a bug in one check must not hide the others' findings
        return _FAILED, f"internal error: {type(error).__name__}: {error}"


def _judged(check: Check, host: Host, intent: Intent) -> _Verdict:
    """``check``'s verdict on ``host``: the one an earlier reading of a HostReader got, while the intent says the
    same (``Intent.version``) and every source the check declares reading (``Check.inputs``) has the same generation
    (for a rate, in the previous Host too); else judged now.

    A check is a function of the Host and the intent alone, and reads nothing it does not declare
    (tests/test_dataflow.py), so an unchanged reading of what it declares gives the same verdict (``Host.reuse``). A
    check that failed, or declares nothing of the host, is judged again at every reading."""
    return host.reuse(("check", check.id), check.keyed, intent, lambda _: _run(check, host, intent), _not_failed)


def _not_failed(verdict: _Verdict) -> bool:
    return verdict[0] != _FAILED


def evaluate(host: Host, intent: Intent, checks: Iterable[Check] | None = None) -> Evaluation:
    """Run every enabled check; a check that raises anything but NotEvaluated is reported, never propagated."""
    start = time.perf_counter()
    selected = tuple(checks if checks is not None else all_checks())
    findings: list[Finding] = []
    not_evaluated: list[NotEvaluatedCheck] = []
    not_applicable: list[NotApplicableCheck] = []
    for check in selected:
        if not intent.check_enabled(check.id):
            not_evaluated.append(NotEvaluatedCheck(check.id, "disabled by intent"))
            continue
        verdict, found = _judged(check, host, intent)
        if verdict == _FOUND:
            findings.extend(found)
        elif verdict == _NOT_APPLICABLE:
            not_applicable.append(NotApplicableCheck(check.id, found))
        else:
            not_evaluated.append(NotEvaluatedCheck(check.id, found))
    findings.sort(key=lambda f: (SEVERITIES.index(f.severity), f.check, sorted(f.labels.items())))
    return Evaluation(
        host=host,
        intent=intent,
        findings=tuple(findings),
        not_evaluated=tuple(not_evaluated),
        checks=tuple(c.id for c in selected),
        duration_seconds=time.perf_counter() - start,
        not_applicable=tuple(not_applicable),
    )
