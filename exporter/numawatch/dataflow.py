# TEMPORARY: replaced by the dataflow branch at merge
"""How stale a check's verdict may be, in evaluations, from the refresh table: the bound its inputs' schedules give.

A stand-in for the declared dataflow: the checks' inputs (sources, and the rotating families of them they read) are
listed here by hand for the checks tests/test_churn.py drives.
"""

from __future__ import annotations

from collections.abc import Mapping

from numawatch.refresh import (
    AFFINITIES,
    GUARANTEED_CONTAINERS,
    GUARANTEED_PODS,
    PLACEMENT,
    POLICIES,
    SHARED_PODS,
    Policy,
)

# What each check reads: source -> the rotating families of it whose values it judges (empty: none of them).
_CPUSETS = {
    "cgroups": (SHARED_PODS, GUARANTEED_PODS, GUARANTEED_CONTAINERS),
    "kubelet_state": (),
    "kubelet_config": (),
    "topology": (),
}
_PLACEMENTS = {
    "cgroups": (SHARED_PODS, GUARANTEED_PODS, GUARANTEED_CONTAINERS, PLACEMENT),
    "kubelet_state": (),
    "topology": (),
}
_INPUTS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "container_cpuset_drift": _CPUSETS,
    "exclusive_cpu_overlap": _CPUSETS,
    "container_numa_split": _CPUSETS,
    "container_outside_isolated": _CPUSETS,
    "container_memory_numa_mismatch": _PLACEMENTS,
    "container_memory_remote": _PLACEMENTS,
    "kubelet_state_stale": {"kubelet_state": (), "kubelet_config": (), "topology": (), "cgroups": ()},
    "irq_on_isolated_cpu": {"irqs": (AFFINITIES,), "topology": (), "kubelet_config": ()},
    "kernel_numa_balancing": {"kernel": ()},
    "thp_enabled": {"kernel": ()},
    "thp_defrag": {"kernel": ()},
    "vm_swappiness": {"kernel": ()},
}


def _round(policy: Policy, family: str, stagger: int) -> int:
    """Readings over which ``family`` of a source of ``policy`` is read once (1: at every reading)."""
    if stagger <= 1 or family not in policy.rotating:
        return 1
    return policy.fixed.get(family) or stagger * policy.stretch.get(family, 1)


def _source_bound(name: str, families: tuple[str, ...], stagger: int) -> int:
    policy = POLICIES.get(name, Policy())
    bound = policy.every if stagger > 1 else 1
    for family in families:
        reads = _round(policy, family, stagger)
        if family == PLACEMENT:
            # read at the pod's first visit after the container's own turn: a shared pod's round on top
            reads += _round(policy, SHARED_PODS, stagger)
        bound = max(bound, reads)
    return bound


def worst_case_evaluations(name: str, stagger: int) -> int:
    """Evaluations after a change of its inputs within which check ``name``'s verdict shows it, with serve's
    ``--stagger`` ``stagger``; ValueError for a check this stand-in does not know."""
    inputs = _INPUTS.get(name)
    if inputs is None:
        raise ValueError(f"no declared inputs for check {name!r}")
    return max(_source_bound(source, families, stagger) for source, families in inputs.items())
