"""Deep C-states on the CPUs that feed GPUs (knob h9, its second half: "shallow C-states").

A pinned thread that launches short CUDA kernels sleeps between them; if its CPU drops into a deep idle state it pays
the state's exit latency on every wake-up (C6 on a server: 100-200 µs), the same bubble a slow governor makes. The
judged CPUs are the protected ones of the IRQ checks: isolated (isolcpus) and held exclusively by pinned containers
(cpu_manager_state). A state counts when the CPU may enter it: not disabled, and within the CPU's PM QoS resume
latency limit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from numawatch.checks.check import Check, Finding, NotApplicable, NotEvaluated
from numawatch.checks.host_irq import describe_cpus, protected_cpus, require
from numawatch.cpuset import CPUSet, format_cpulist
from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.idlestates import allowed_states
from numawatch.inputs import CPUIDLE, CPUIDLE_SETTINGS, KUBELET_STATE, TOPOLOGY
from numawatch.intent import Intent
from numawatch.model.kernel import CpuIdle, IdleState
from numawatch.model.topology import Topology
from numawatch.sources.topology import parse_cmdline

# Command-line parameters that bound the idle states (Documentation/admin-guide/kernel-parameters.txt).
IDLE_PARAMETERS = ("intel_idle.max_cstate", "processor.max_cstate", "idle", "cpuidle.off", "intel_idle.states_off")


def idle_parameters(cmdline: str) -> dict[str, str]:
    """The idle-related parameters of a command line, last one winning (names as the kernel compares them)."""
    found: dict[str, str] = {}
    for name, value in parse_cmdline(cmdline):
        if name in IDLE_PARAMETERS:
            found[name] = value if value is not None else ""
    return found


@derivation("cpuidle.idle_parameters", inputs=(TOPOLOGY,))
def _idle_parameters_of(host: Host) -> Mapping[str, str]:
    """``idle_parameters`` of the topology's command line (it changes only at a reboot)."""
    topology = host.topology
    return MappingProxyType(idle_parameters(topology.isolation.cmdline if topology is not None else ""))


Allowed = dict[int, tuple[IdleState, ...] | None]


def deep_states(allowed: Allowed, cpu: int, limit_us: int) -> tuple[IdleState, ...] | None:
    """The states ``cpu`` may enter whose exit latency exceeds ``limit_us``; None when that is unknown."""
    enabled = allowed.get(cpu)
    if enabled is None:
        return None
    return tuple(state for state in enabled if state.exit_latency_us > limit_us)


def check_cpuidle_deep_state(host: Host, intent: Intent) -> Iterator[Finding]:
    idle: CpuIdle = require(host, "cpuidle")
    topology: Topology = require(host, "topology")
    parameters = _idle_parameters_of(host)
    if parameters.get("idle") == "poll":
        raise NotApplicable("idle=poll on the kernel command line: the CPUs never enter an idle state")
    if idle.driver is None:
        if idle.problems:
            raise NotEvaluated(idle.problems[0])
        raise NotApplicable(
            "no cpuidle on this host (no sys/devices/system/cpu/cpuidle/current_driver: a kernel without "
            "CONFIG_CPU_IDLE)"
        )
    if idle.driver == "none" or not idle.states:
        raise NotApplicable(
            f"no idle driver with deep states (current_driver {idle.driver}): the CPUs idle with the architecture's "
            "default instruction (HLT, WFI), a shallow state"
        )
    isolated, exclusive = protected_cpus(host)
    judged = (isolated | exclusive) & topology.online
    if not judged:
        if host.kubelet_state is None:
            raise NotEvaluated(
                "no CPU is isolated and the exclusive CPUs are unknown: "
                f"needs the kubelet_state source: {host.down_reason('kubelet_state')}"
            )
        return
    limit = intent.kernel.max_idle_exit_latency_us
    allowed = allowed_states(host)
    groups: dict[tuple[IdleState, ...], set[int]] = {}
    unknown: list[int] = []
    for cpu in sorted(judged):
        found = deep_states(allowed, cpu, limit)
        if found is None:
            unknown.append(cpu)
        elif found:
            key = tuple(sorted({(s.name, s.exit_latency_us): s for s in found}.values(), key=_order))
            groups.setdefault(key, set()).add(cpu)
    findings = [
        _finding(intent, idle, parameters, frozenset(cpus), states, isolated, exclusive, limit)
        for states, cpus in sorted(groups.items(), key=lambda item: min(item[1]))
    ]
    if not findings and unknown:
        reason = idle.problems[0] if idle.problems else "their idle states were not read"
        raise NotEvaluated(f"idle states of CPUs {format_cpulist(unknown)} are unknown: {reason}")
    yield from findings


def _order(state: IdleState) -> tuple[int, str]:
    return state.exit_latency_us, state.name


def _finding(
    intent: Intent,
    idle: CpuIdle,
    parameters: Mapping[str, str],
    cpus: CPUSet,
    states: tuple[IdleState, ...],
    isolated: CPUSet,
    exclusive: CPUSet,
    limit: int,
) -> Finding:
    cpulist = format_cpulist(cpus)
    shown = ", ".join(f"{state.name} ({state.exit_latency_us} µs)" for state in states)
    worst = max(state.exit_latency_us for state in states)
    given = ", ".join(f"{name}={value}" if value else name for name, value in parameters.items())
    message = (
        f"{describe_cpus(cpus, isolated, exclusive)} may enter idle states that take longer than "
        f"{limit} µs to leave: {shown} (driver {idle.driver}"
        + (f", governor {idle.governor}" if idle.governor else "")
        + (f"; the command line says {given}" if given else "")
        + "): a pinned thread that sleeps between short CUDA launches pays the exit latency on every wake-up, "
        "a GPU bubble each time"
    )
    deepest_allowed = max((state.index for state in _allowed_states(idle, cpus, limit)), default=0)
    parameter = "intel_idle.max_cstate" if idle.driver == "intel_idle" else "processor.max_cstate"
    # max_cstate=0 would switch intel_idle off (acpi_idle then takes over with its own states): when no deep
    # state is within the limit, only polling is.
    boot = f"{parameter}={deepest_allowed}" if deepest_allowed else "idle=poll"
    remediation = (
        f"cpupower -c {cpulist} idle-set -D {limit + 1} (disables every state with an exit latency of "
        f"{limit + 1} µs or more on those CPUs) and persist it with a unit run at boot or a tuned profile; or bound "
        f"the states for every CPU at boot with {boot}"
    )
    return CPUIDLE_DEEP_STATE.finding(
        intent,
        {
            "cpus": cpulist,
            "name": ",".join(state.name for state in states),
            "value": str(worst),
            "expected": str(limit),
        },
        message,
        remediation,
    )


def _allowed_states(idle: CpuIdle, cpus: CPUSet, limit: int) -> list[IdleState]:
    """States within the limit on the first of ``cpus``: the deepest of them is what a max_cstate keeps."""
    states = idle.states.get(min(cpus), ())
    return [state for state in states if state.exit_latency_us <= limit]


CPUIDLE_DEEP_STATE = Check(
    id="cpuidle_deep_state",
    severity="warning",
    summary="Isolated or exclusively pinned CPUs may enter idle states whose exit latency exceeds the intent's limit.",
    remediation="cpupower -c <cpus> idle-set -D <limit + 1>, persisted, or intel_idle.max_cstate= at boot",
    run=check_cpuidle_deep_state,
    inputs=(CPUIDLE, CPUIDLE_SETTINGS, KUBELET_STATE, TOPOLOGY),
    knob="h9",
)

CHECKS: tuple[Check, ...] = (CPUIDLE_DEEP_STATE,)
