"""What every check and metric family reads, and how stale it may be: computed from the inputs they declare
(numawatch.inputs) and the refresh table (numawatch.refresh), never written down by hand (``numawatch explain``).

A bound is in evaluations of serve, as a function of its ``--stagger K``: the number of evaluations after a change on
the host within which the value shows it. A source read at every evaluation, or on change, shows a change at the next
one: 1. One read at one evaluation in N (``Policy.every``): N while K > 1. A rotating family reads each object once per
round: K evaluations, S x K for a family stretched S times, N for one with a fixed round of N; a family whose objects
are read only at the next turn of another family's object (``Policy.waits``) adds the longest round of those. With
K = 1 (``check``) everything is read every time: 1. A rate shows what stopped one reading of its source later: twice
its source's bound. A derived value is as stale as the stalest source it reads, the drift families as the stalest
check. The Kubernetes API source hands out its session's last answer, taken every ``--kubernetes.interval`` seconds:
that interval is added to its bound in seconds. A value's bound is the largest of its inputs'.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from numawatch import kubeapi
from numawatch.checks import all_checks
from numawatch.checks.check import Check
from numawatch.inputs import Derived, Findings, Input, Own, Rate, Source, declaration_of
from numawatch.metrics import DECLARED
from numawatch.refresh import DEFAULT_STAGGER, FAMILIES, POLICIES, Policy, policy_of
from numawatch.sources import SOURCES

CHECK = "check"
METRIC = "metric"


class UnknownName(LookupError):
    """Neither a check id nor a metric name numawatch exposes."""


@dataclass(frozen=True)
class Bound:
    """How one input is read and how stale it may be."""

    input: Input
    schedule: str  # how often it is read, in words
    evaluations: int  # the worst case in evaluations
    extra_seconds: float = 0.0  # what comes on top of the evaluations (the API session's interval)
    parts: tuple[Bound, ...] = ()  # a derived value's sources, a rate's source
    why: str = ""  # a source's: why the refresh table lets it be that stale (``Policy.why``)

    def seconds(self, interval: float) -> float:
        return self.evaluations * interval + self.extra_seconds


@dataclass(frozen=True)
class Explanation:
    """What a check or a metric family reads, and its worst-case staleness (the largest of its inputs')."""

    name: str
    kind: str  # CHECK or METRIC
    summary: str
    bounds: tuple[Bound, ...]
    stagger: int

    @property
    def evaluations(self) -> int:
        return max((bound.evaluations for bound in self.bounds), default=1)

    def seconds(self, interval: float) -> float:
        return max((bound.seconds(interval) for bound in self.bounds), default=interval)


def _policy(source: str) -> Policy:
    spec = next((spec for spec in SOURCES if spec.name == source), None)
    return policy_of(source, spec is not None and spec.fingerprint is not None, POLICIES)


def _family_round(policy: Policy, family: str, stagger: int) -> int:
    """Evaluations between two turns of an object of ``family`` (with K > 1): 1 when the policy does not rotate it."""
    if family not in policy.rotating:
        return 1
    fixed = policy.fixed.get(family)
    return fixed if fixed is not None else stagger * policy.stretch.get(family, 1)


def _read_every(policy: Policy, stagger: int) -> tuple[str, int]:
    """(schedule, bound) of a source's parts read at every reading of it."""
    if policy.every > 1 and stagger > 1:
        return f"one evaluation in {policy.every}", policy.every
    if policy.on_change:
        return "on change (its fingerprint), else its last reading again", 1
    return "every evaluation", 1


def _source_bound(source: Source, stagger: int, api_interval: float) -> Bound:
    policy = _policy(source.name)
    family = source.family
    period = policy.periodic.get(family) if family is not None else None
    if period is not None:
        return Bound(source, f"once in {period} evaluations, whatever --stagger", period, why=policy.why)
    if family is None or family not in policy.rotating:
        schedule, evaluations = _read_every(policy, stagger)
        if source.name == "kubernetes_api":
            return Bound(source, f"{schedule}: the API session's last answer, taken every --kubernetes.interval",
                         evaluations, api_interval, why=policy.why)  # fmt: skip
        return Bound(source, schedule, evaluations, why=policy.why)
    if stagger <= 1:
        return Bound(source, "every evaluation (K = 1 reads every object)", 1, why=policy.why)
    share = _family_round(policy, family, stagger)
    schedule = f"a rotating 1/{share} of its objects per evaluation ({FAMILIES.get(family, family)})"
    waited = policy.waits.get(family, ())
    if waited:
        schedule += f", each read at the next turn of its {' or '.join(waited)} after its own"
    evaluations = share + max((_family_round(policy, other, stagger) for other in waited), default=0)
    return Bound(source, schedule, evaluations, why=policy.why)


def bound_of(item: Input, stagger: int = DEFAULT_STAGGER, api_interval: float = kubeapi.DEFAULT_INTERVAL) -> Bound:
    """How ``item`` is read and its worst-case staleness with serve's ``--stagger`` ``stagger``."""
    if isinstance(item, Source):
        return _source_bound(item, stagger, api_interval)
    if isinstance(item, Derived):
        parts = tuple(bound_of(part, stagger, api_interval) for part in item.reads)
        evaluations = max(part.evaluations for part in parts)
        extra = max(part.extra_seconds for part in parts)
        return Bound(item, "derived from " + ", ".join(str(part) for part in item.reads), evaluations, extra, parts)
    if isinstance(item, Rate):
        source = bound_of(item.source, stagger, api_interval)
        return Bound(item, f"between the two last readings of {item.source}", 2 * source.evaluations,
                     2 * source.extra_seconds, (source,))  # fmt: skip
    if isinstance(item, Findings):
        checks = [explain_check(check, stagger, api_interval) for check in all_checks()]
        worst = max(checks, key=lambda explained: (explained.evaluations, explained.seconds(1.0)))
        return Bound(item, f"as the stalest check ({worst.name})", worst.evaluations,
                     max(bound.extra_seconds for bound in worst.bounds))  # fmt: skip
    assert isinstance(item, Own)
    return Bound(item, "at every evaluation", 1)


def explain_check(check: Check, stagger: int = DEFAULT_STAGGER,
                  api_interval: float = kubeapi.DEFAULT_INTERVAL) -> Explanation:  # fmt: skip
    bounds = tuple(bound_of(item, stagger, api_interval) for item in check.inputs)
    return Explanation(check.id, CHECK, check.summary, bounds, stagger)


@functools.cache
def metric_declarations() -> Mapping[str, tuple[Callable[..., object], tuple[Input, ...]]]:
    """Every metric name numawatch exposes (a counter's with ``_total``) -> its builder and what the builder reads."""
    found: dict[str, tuple[Callable[..., object], tuple[Input, ...]]] = {}
    for build in DECLARED:
        declaration = declaration_of(build)
        if declaration is None:
            raise ValueError(f"family builder {build.__qualname__} declares nothing (numawatch.inputs.exposes)")
        for name in declaration.names:
            if name in found:
                raise ValueError(f"metric {name} is declared twice")
            found[name] = (build, declaration.inputs)
    return found


def explain_metric(name: str, stagger: int = DEFAULT_STAGGER,
                   api_interval: float = kubeapi.DEFAULT_INTERVAL) -> Explanation:  # fmt: skip
    declarations = metric_declarations()
    found = declarations.get(name) or declarations.get(f"{name}_total")
    if found is None:
        raise UnknownName(name)
    build, inputs = found
    summary = f"built by {build.__module__}.{build.__qualname__}"
    bounds = tuple(bound_of(item, stagger, api_interval) for item in inputs)
    return Explanation(name if name in declarations else f"{name}_total", METRIC, summary, bounds, stagger)


def explain(name: str, stagger: int = DEFAULT_STAGGER, api_interval: float = kubeapi.DEFAULT_INTERVAL) -> Explanation:
    """What the check ``name`` (its id) or the metric ``name`` reads, and its worst-case staleness with serve's
    ``--stagger`` ``stagger``; UnknownName when it is neither."""
    for check in all_checks():
        if check.id == name:
            return explain_check(check, stagger, api_interval)
    return explain_metric(name, stagger, api_interval)


def explain_all(stagger: int = DEFAULT_STAGGER, api_interval: float = kubeapi.DEFAULT_INTERVAL) -> list[Explanation]:
    """Every check (in the registry's order), then every metric (in the builders' order)."""
    return [
        *(explain_check(check, stagger, api_interval) for check in all_checks()),
        *(explain_metric(name, stagger, api_interval) for name in metric_declarations()),
    ]


def worst_case_evaluations(name: str, stagger: int) -> int:
    """The evaluations of serve with ``--stagger`` ``stagger`` within which a change of what the check or metric
    ``name`` reads shows in it (UnknownName when it is neither)."""
    return explain(name, stagger).evaluations


def inputs_of(explanations: Iterable[Explanation]) -> list[Bound]:
    """The distinct inputs read by ``explanations``, a derived value's and a rate's sources included: sources in the
    registry's order (each one's parts read at every reading first, then its families), then derived values, rates
    and what is not the host's."""
    seen: dict[Input, Bound] = {}

    def add(bound: Bound) -> None:
        seen.setdefault(bound.input, bound)
        for part in bound.parts:
            add(part)

    for explanation in explanations:
        for bound in explanation.bounds:
            add(bound)
    return sorted(seen.values(), key=_input_order)


_KINDS = (Source, Derived, Rate, Findings, Own)
_REGISTRY_ORDER = {spec.name: index for index, spec in enumerate(SOURCES)}


def _input_order(bound: Bound) -> tuple[int, int, str]:
    item = bound.input
    if isinstance(item, Source):
        return 0, _REGISTRY_ORDER.get(item.name, len(_REGISTRY_ORDER)), item.family or ""
    return next(index for index, kind in enumerate(_KINDS) if isinstance(item, kind)), 0, str(item)


__all__ = [
    "CHECK",
    "METRIC",
    "Bound",
    "Explanation",
    "UnknownName",
    "bound_of",
    "explain",
    "explain_all",
    "metric_declarations",
    "worst_case_evaluations",
]
