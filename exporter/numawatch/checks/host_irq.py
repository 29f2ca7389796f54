"""Checks that interrupts stay off the CPUs serving inference: IRQ placement, IRQ and tick activity, irqbalance.

Knobs h7 and h8 of the reference profile (DOMAIN.md). The *protected* CPUs are the isolated ones (isolcpus) and
those the kubelet's CPU Manager holds exclusively for pinned containers (``cpu_manager_state`` entries): a device
interrupt or a scheduler tick there preempts the thread that feeds a GPU.

How IRQs are joined with their /proc/irq entries and which are managed by the kernel: irqplacement.py.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator, Mapping

from numawatch.checks.check import Check, Finding, NotEvaluated, require, require_known
from numawatch.cpuset import EMPTY, CPUSet, format_cpulist
from numawatch.host import Host
from numawatch.inputs import (
    INTERRUPT_RATES,
    INTERRUPTS,
    IRQ_AFFINITIES,
    IRQ_REQUESTED_MASKS,
    IRQBALANCE_DAEMON,
    KUBELET_STATE,
    TOPOLOGY,
)
from numawatch.intent import Intent
from numawatch.irqplacement import ManagedIrqs, changed_positions, device_irqs, managed_irqs
from numawatch.model.interrupts import (
    KIND_DEVICE,
    KIND_LOCAL_TIMER,
    InterruptRow,
    Interrupts,
    IrqAffinity,
    Irqbalance,
    Irqs,
)
from numawatch.model.kubelet import exclusive_cpus
from numawatch.model.topology import Topology


# --------------------------------------------------------------------------------------------- protected CPUs
def protected_cpus(host: Host) -> tuple[CPUSet, CPUSet]:
    """(isolated CPUs, exclusive CPUs) that interrupts must stay off; needs the topology source."""
    topology: Topology = require_known(require(host, "topology"), "isolated")
    return topology.isolated, exclusive_cpus(host.kubelet_state) & topology.online


def describe_cpus(cpus: CPUSet, isolated: CPUSet, exclusive: CPUSet) -> str:
    """``CPUs 2-3 (isolated), 8 (exclusive)`` for messages."""
    parts = []
    both = cpus & isolated & exclusive
    only_isolated = (cpus & isolated) - both
    only_exclusive = (cpus & exclusive) - both
    for group, what in ((both, "isolated, exclusive"), (only_isolated, "isolated"), (only_exclusive, "exclusive")):
        if group:
            parts.append(f"{format_cpulist(group)} ({what})")
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ", ".join(parts)


def exempt(name: str, patterns: Iterable[str]) -> bool:
    """Whether intent.kernel.irq_exempt lets this IRQ be on protected CPUs (matches the whole name or any action)."""
    names = [name, *(part.strip() for part in name.split(","))]
    return any(fnmatch.fnmatchcase(candidate, pattern) for pattern in patterns for candidate in names if candidate)


# --------------------------------------------------------------------------------------------- irq_on_isolated_cpu
def check_irq_placement(host: Host, intent: Intent) -> Iterator[Finding]:
    isolated, exclusive = protected_cpus(host)
    irqs: Irqs = require(host, "irqs")
    interrupts: Interrupts = require(host, "interrupts")
    topology: Topology = require(host, "topology")
    protected = isolated | exclusive
    if not protected:
        if host.kubelet_state is None:
            raise NotEvaluated(
                "no CPU is isolated and the exclusive CPUs are unknown: "
                f"needs the kubelet_state source: {host.down_reason('kubelet_state')}"
            )
        return
    managed = managed_irqs(host) or ManagedIrqs(irqs, interrupts, frozenset(topology.cpus))
    flags = topology.isolation.isolcpus_flags
    findings = list(_placement_findings(host, intent, managed, isolated, exclusive, topology, flags))
    if not findings and irqs.problems:
        # The IRQs that could be read are fine, but where the unreadable ones go is unknown.
        raise NotEvaluated(irqs.problems[0])
    yield from findings


def _placement_findings(
    host: Host,
    intent: Intent,
    managed: ManagedIrqs,
    isolated: CPUSet,
    exclusive: CPUSet,
    topology: Topology,
    flags: tuple[str, ...],
) -> Iterator[Finding]:
    protected = isolated | exclusive
    for row, irq, found, delivered in device_irqs(host):
        if delivered.isdisjoint(protected):  # most rows: no intersection built
            continue
        hit = delivered & protected
        if exempt(row.name, intent.kernel.irq_exempt):
            continue
        is_managed = managed.managed(irq)
        where = "effective affinity" if found.effective is not None else "affinity"
        message = (
            f"IRQ {irq} ({row.name}) is delivered to {describe_cpus(hit, isolated, exclusive)}: its {where} is "
            f"{format_cpulist(delivered)} (requested {format_cpulist(found.affinity or EMPTY)})"
        )
        yield IRQ_PLACEMENT.finding(
            intent,
            {"irq": str(irq), "name": row.name, "cpus": format_cpulist(hit), "managed": str(is_managed).lower()},
            message + _placement_advice(found, is_managed, managed, protected, flags),
            _placement_remediation(found, is_managed, protected, topology, flags),
        )


def _placement_advice(
    found: IrqAffinity, is_managed: bool, managed: ManagedIrqs, protected: CPUSet, flags: tuple[str, ...]
) -> str:
    if not is_managed:
        return ""
    advice = f"; the kernel manages it ({managed.evidence(found.irq)}), so it cannot be moved through /proc/irq"
    requested = found.affinity or EMPTY
    if requested and requested <= protected:
        advice += (
            ", and its mask holds no housekeeping CPU: it is the device's queue for these CPUs and fires only for I/O "
            "issued from them"
        )
    elif "managed_irq" not in flags:
        advice += ", but its mask holds housekeeping CPUs, which isolcpus=managed_irq would make the kernel prefer"
    return advice


def _placement_remediation(
    found: IrqAffinity, is_managed: bool, protected: CPUSet, topology: Topology, flags: tuple[str, ...]
) -> str:
    housekeeping = format_cpulist(topology.online - protected)
    if not is_managed:
        return (
            f"echo {housekeeping} > /proc/irq/{found.irq}/smp_affinity_list, boot with irqaffinity={housekeeping} so "
            "new IRQs start there, and keep irqbalance off the protected CPUs (or stop it)"
        )
    if "managed_irq" not in flags and not (found.affinity or EMPTY) <= protected:
        return "add managed_irq to isolcpus= (isolcpus=managed_irq,domain,<cpus>) and reboot"
    return (
        "expected while the pinned workload itself does I/O on this device (the queue serves I/O submitted from these "
        "CPUs): exempt it by name in the intent (kernel.irq_exempt); otherwise lower the device's queue count "
        "(ethtool -L for NICs) so every queue's mask also holds a housekeeping CPU, or use isolcpus=io_queue where "
        "the kernel has it"
    )


# --------------------------------------------------------------------------------------------- rates
def two_readings(host: Host) -> tuple[Interrupts, Interrupts, float]:
    """(previous, current, seconds between them) of /proc/interrupts, or NotEvaluated. The previous reading is
    the source's own (``Interrupts.before``: a HostReader's), else the previous Host's (a Host built without one)."""
    current: Interrupts = require(host, "interrupts")
    if current.before is not None:
        previous_reading = current.before
        window = current.read_at - previous_reading.read_at
        if window <= 0:
            raise NotEvaluated("needs two readings taken at different times")
        return previous_reading, current, window
    if host.previous is None:
        raise NotEvaluated("needs two readings (numawatch serve keeps the last one; numawatch check takes --window)")
    previous: Interrupts | None = host.previous.interrupts
    if previous is None:
        reason = host.previous.down_reason("interrupts")
        raise NotEvaluated(f"needs two readings: the previous one has no interrupts ({reason})")
    window = current.read_at - previous.read_at
    if window <= 0:
        raise NotEvaluated("needs two readings taken at different times")
    return previous, current, window


def deltas(
    previous: Interrupts, current: Interrupts, cpus: CPUSet, kinds: Iterable[str]
) -> Iterator[tuple[InterruptRow, dict[int, int]]]:
    """(row, {cpu: interrupts since the previous reading}) for rows of ``kinds``, only CPUs watched in both readings.

    A row whose count went down, or whose name changed (the IRQ number was reused by another device), restarted:
    its current count is all new.
    """
    watched = cpus & current.watched & previous.watched
    if not watched:
        return
    wanted = frozenset(kinds)
    for row, old in _changed_rows(previous, current):
        if row.kind not in wanted or not row.counts:
            continue
        if old is not None and old.name != row.name:
            old = None
        changed: dict[int, int] = {}
        before = old.counts if old is not None else {}
        for cpu, count in row.counts.items():
            if cpu not in watched:
                continue
            prior = before.get(cpu, 0)
            delta = count - prior if count >= prior else count
            if delta:
                changed[cpu] = delta
        if changed:
            yield row, changed


def _changed_rows(previous: Interrupts, current: Interrupts) -> list[tuple[InterruptRow, InterruptRow | None]]:
    """(row, the previous reading's row of its key or None) for the rows of ``current`` that may have counted since
    ``previous``: a row with the generation of the previous reading's row of its key is that row and counted nothing.

    The interrupts source hands an unchanged row out again, so between two serve readings a handful of ~2,000 rows
    differ (the architecture rows, the IRQs firing on watched CPUs): those are found by position
    (``changed_positions``). Rows that moved (an IRQ came or went) are paired by key."""
    rows = current.rows
    positions = changed_positions(rows, previous.rows)
    if positions is not None:
        pairs: list[tuple[InterruptRow, InterruptRow | None]] = [
            (rows[index], previous.rows[index]) for index in positions
        ]
        if all(old is not None and row.key == old.key for row, old in pairs):
            return pairs
    before = previous.by_key()
    return [(row, before.get(row.key)) for row in rows]


def check_irq_activity(host: Host, intent: Intent) -> Iterator[Finding]:
    isolated, exclusive = protected_cpus(host)
    previous, current, window = two_readings(host)
    protected = isolated | exclusive
    threshold = intent.kernel.irq_activity_threshold_per_second
    managed = managed_irqs(host)
    for row, changed in deltas(previous, current, protected, (KIND_DEVICE,)):
        if exempt(row.name, intent.kernel.irq_exempt):
            continue
        hot = {cpu: delta for cpu, delta in changed.items() if delta / window > threshold}
        if not hot:
            continue
        total = sum(hot.values())
        labels = {"irq": row.key, "name": row.name, "cpus": format_cpulist(hot)}
        if managed is not None and row.irq is not None:
            labels["managed"] = str(managed.managed(row.irq)).lower()
        yield IRQ_ACTIVITY.finding(
            intent,
            labels,
            f"IRQ {row.key} ({row.name}) interrupted {describe_cpus(frozenset(hot), isolated, exclusive)} {total} "
            f"times in {window:.1f} s ({total / window:.1f}/s; threshold {threshold:g}/s per CPU)",
        )


def nohz_full_cpus(topology: Topology) -> CPUSet:
    """nohz_full CPUs in effect (sysfs), else as asked on the command line; online ones only."""
    isolation = topology.isolation
    cpus = isolation.sys_nohz_full if isolation.sys_nohz_full else isolation.nohz_full
    return (cpus or EMPTY) & topology.online


def check_tick(host: Host, intent: Intent) -> Iterator[Finding]:
    topology: Topology = require_known(require(host, "topology"), "nohz_full")
    nohz = nohz_full_cpus(topology)
    if not nohz:
        return
    previous, current, window = two_readings(host)
    threshold = intent.kernel.tick_threshold_per_second
    ticks: dict[int, int] = {}
    for _, changed in deltas(previous, current, nohz, (KIND_LOCAL_TIMER,)):
        for cpu, delta in changed.items():
            ticks[cpu] = ticks.get(cpu, 0) + delta
    hot = {cpu: count / window for cpu, count in ticks.items() if count / window > threshold}
    if not hot:
        return
    worst = max(hot, key=lambda cpu: hot[cpu])
    yield TICK.finding(
        intent,
        {"cpus": format_cpulist(hot)},
        f"nohz_full CPUs {format_cpulist(hot)} took local timer interrupts above {threshold:g}/s over {window:.1f} s "
        f"(CPU {worst}: {hot[worst]:.0f}/s): the tick is not stopped, usually because more than one task is "
        "runnable on the CPU (a second thread, a kworker, a timer armed there) or RCU/irq_work keeps it alive",
    )


# --------------------------------------------------------------------------------------------- irqbalance
def check_irqbalance(host: Host, intent: Intent) -> Iterator[Finding]:
    if not intent.kernel.check_irqbalance:
        return
    state: Irqbalance = require(host, "irqbalance")
    if not state.running:
        return
    topology: Topology = require_known(require(host, "topology"), "isolated")
    isolated = topology.isolated
    if not isolated:
        return
    config = state.config
    isolation = topology.isolation
    if config is not None and config.banned_cpulist_raw is not None:
        if config.banned_cpulist is None:
            raise NotEvaluated(_problem(state, "IRQBALANCE_BANNED_CPULIST"))
        banned, reason = config.banned_cpulist, "banned_cpulist"
        how = (
            f"IRQBALANCE_BANNED_CPULIST={config.banned_cpulist_raw!r} ({config.origin}) replaces irqbalance's "
            "automatic ban of isolated and nohz_full CPUs"
        )
    elif config is not None and config.banned_cpus_raw is not None:
        if config.banned_cpus is None:
            raise NotEvaluated(_problem(state, "IRQBALANCE_BANNED_CPUS"))
        banned, reason = config.banned_cpus, "banned_cpus"
        how = (
            f"IRQBALANCE_BANNED_CPUS={config.banned_cpus_raw!r} ({config.origin}) replaces irqbalance's automatic "
            "ban of isolated and nohz_full CPUs"
        )
    else:
        # irqbalance reads these two files itself, so an unreadable one leaves its ban unknown.
        for key in ("isolated", "nohz_full"):
            if key in topology.problems:
                raise NotEvaluated(topology.problems[key])
        banned = (isolation.sys_isolated or EMPTY) | (isolation.sys_nohz_full or EMPTY)
        reason = "automatic_ban"
        how = (
            "irqbalance bans only /sys/devices/system/cpu/isolated and nohz_full "
            f"({format_cpulist(banned) or 'empty'}) by default"
        )
    unbanned = isolated - banned
    if not unbanned:
        return
    labels = {"cpus": format_cpulist(unbanned), "reason": reason}
    if config is not None and not config.origin.startswith("environment"):
        labels["file"] = config.origin
    pids = ", ".join(str(pid) for pid in state.pids)
    yield IRQBALANCE.finding(
        intent,
        labels,
        f"irqbalance (PID {pids}) may move IRQs onto isolated CPUs {format_cpulist(unbanned)}: {how}",
        f"set IRQBALANCE_BANNED_CPULIST={format_cpulist(isolated | banned)} (it replaces the automatic ban, so list "
        "every isolated CPU) in /etc/default/irqbalance or /etc/sysconfig/irqbalance and restart irqbalance, or stop "
        "irqbalance and pin IRQs yourself",
    )


def _problem(state: Irqbalance, variable: str) -> str:
    for problem in state.problems:
        if variable in problem:
            return problem
    return f"{variable} could not be parsed"


# --------------------------------------------------------------------------------------------- registry
IRQ_PLACEMENT = Check(
    id="irq_on_isolated_cpu",
    severity="warning",
    summary="A device IRQ's effective affinity includes isolated CPUs or CPUs held exclusively by pinned containers.",
    remediation="move the IRQ to housekeeping CPUs (smp_affinity_list, irqaffinity=, irqbalance ban list)",
    run=check_irq_placement,
    inputs=(IRQ_AFFINITIES, IRQ_REQUESTED_MASKS, INTERRUPTS, KUBELET_STATE, TOPOLOGY),
    knob="h8",
)
IRQ_ACTIVITY = Check(
    id="irq_activity_on_isolated_cpu",
    severity="warning",
    summary="Device interrupts were delivered to isolated or exclusive CPUs during the window, above the threshold.",
    remediation="move the IRQ off those CPUs (see irq_on_isolated_cpu), or exempt it by name in the intent",
    run=check_irq_activity,
    inputs=(INTERRUPT_RATES, IRQ_AFFINITIES, KUBELET_STATE, TOPOLOGY),
    knob="h8",
)
TICK = Check(
    id="tick_on_nohz_full",
    severity="warning",
    summary="nohz_full CPUs take local timer interrupts (the tick) above the threshold rate.",
    remediation="keep one runnable thread per nohz_full CPU and move timers, kworkers and RCU work to housekeeping",
    run=check_tick,
    inputs=(INTERRUPT_RATES, TOPOLOGY),
    knob="h7",
)
IRQBALANCE = Check(
    id="irqbalance_unbanned",
    severity="warning",
    summary="irqbalance runs and its configuration does not keep it off the isolated CPUs.",
    remediation="list every isolated CPU in IRQBALANCE_BANNED_CPULIST and restart irqbalance, or stop irqbalance",
    run=check_irqbalance,
    inputs=(IRQBALANCE_DAEMON,),
    knob="h8",
)

CHECKS: tuple[Check, ...] = (IRQ_PLACEMENT, IRQ_ACTIVITY, TICK, IRQBALANCE)
CHECK_BY_ID: Mapping[str, Check] = {check.id: check for check in CHECKS}
