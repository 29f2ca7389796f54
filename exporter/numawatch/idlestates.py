"""The idle states each CPU may enter: enabled, and within the CPU's PM QoS resume latency limit (``CpuIdle.enabled``).
The deep C-state check (checks/cpuidle.py) and the idle-state metric family (metrics/platform.py) both need them for
every CPU."""

from __future__ import annotations

from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.inputs import CPUIDLE
from numawatch.model.kernel import CpuIdle, IdleState


@derivation("cpuidle.allowed_states", inputs=(CPUIDLE,))
def allowed_states(host: Host) -> dict[int, tuple[IdleState, ...] | None]:
    """Every CPU's states it may enter (``CpuIdle.enabled``) by the cpuidle reading: the check and the idle-state
    metric both need them for every CPU. Empty without the reading."""
    idle: CpuIdle | None = host.cpuidle
    if idle is None:
        return {}
    known: dict[tuple[IdleState, ...], tuple[IdleState, ...] | None] = {}  # most CPUs share one set of states
    found = {}
    for cpu, states in idle.states.items():
        if cpu in idle.resume_latency_us:
            found[cpu] = idle.enabled(cpu)
            continue
        if states not in known:
            known[states] = idle.enabled(cpu)
        found[cpu] = known[states]
    return found
