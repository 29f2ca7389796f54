"""Checks that interrupts stay off the CPUs serving inference: IRQ placement, IRQ and tick activity, irqbalance.

Knobs h7 and h8 of the reference profile (DOMAIN.md). The *protected* CPUs are the isolated ones (isolcpus) and
those the kubelet's CPU Manager holds exclusively for pinned containers (``cpu_manager_state`` entries): a device
interrupt or a scheduler tick there preempts the thread that feeds a GPU.

Managed IRQs. Multi-queue drivers (nvme, some NICs) let the kernel spread one vector per CPU group and own the
affinity (``IRQD_AFFINITY_MANAGED``): user space cannot move them, irqbalance skips them, and ``isolcpus=managed_irq``
only steers those whose mask also holds a housekeeping CPU. A per-CPU queue on an isolated CPU fires only for I/O
issued from that CPU, so such findings are labelled ``managed="true"`` and explained rather than hidden. How they are
recognised, most reliable first:

1. ``/proc/irq/<n>/smp_affinity`` is read-only: since Linux 6.12 the kernel drops the write bit for IRQs whose
   affinity user space cannot set. When any IRQ on the host shows that, the mode is taken as the whole truth.
2. Otherwise (older kernels print 0644 for all; captures lose modes), a device's vectors whose requested masks are
   pairwise disjoint and together cover every CPU, two or more in IRQ order, are the kernel's managed spread
   (``irq_create_affinity_masks``). Vectors are grouped per device from the /proc/interrupts chip column
   (``PCI-MSIX-<bdf>``, or the requester ID in the x86 ``PCI-MSI`` hwirq, ``hwirq >> 11``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import eq, ne

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
from numawatch.model.interrupts import (
    KIND_DEVICE,
    KIND_LOCAL_TIMER,
    InterruptRow,
    Interrupts,
    IrqAffinity,
    Irqbalance,
    Irqs,
)
from numawatch.model.kubelet import KubeletState
from numawatch.model.topology import Topology

_MSI_CHIP = re.compile(r"(?:IR-)?PCI-MSI(?:X)?(?:-(?P<bdf>[0-9a-fA-F:.]+))?\s+(?P<hwirq>\d+)-")


# --------------------------------------------------------------------------------------------- protected CPUs
def exclusive_cpus(state: KubeletState | None) -> CPUSet:
    """Every CPU the kubelet's CPU Manager assigns exclusively (container, v1 and pod-level entries)."""
    if state is None or state.cpu is None:
        return EMPTY
    return state.cpu.exclusive_cpus


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


# --------------------------------------------------------------------------------------------- managed IRQs
def device_key(row: InterruptRow) -> str | None:
    """Which device an IRQ row belongs to, from its chip column; None when the chip does not say."""
    match = _MSI_CHIP.match(row.chip)
    if match is None:
        return None
    if match.group("bdf"):
        return match.group("bdf")
    # x86 PCI-MSI domain: hwirq = vector index | PCI requester ID << 11 | domain << 27 (pci_msi_domain_calc_hwirq)
    return f"msi:{int(match.group('hwirq')) >> 11}"


def spread_vectors(masks: list[tuple[int, CPUSet]], all_cpus: CPUSet) -> set[int]:
    """IRQs forming a managed spread among one device's vectors (``masks``: (irq, requested mask) in IRQ order).

    A spread is a run of two or more consecutive vectors whose masks are pairwise disjoint and together cover
    ``all_cpus``. Runs are found with a sliding window (every maximal disjoint window from each start) and the
    longest win, so a device's non-managed admin vector before its queues (nvme0q0) is not swallowed.
    """
    count = len(masks)
    owner: dict[int, int] = {}
    covered = 0
    end = 0
    candidates: list[tuple[int, int, int]] = []
    for start in range(count):
        end = max(end, start)
        while end < count and masks[end][1] and not any(cpu in owner for cpu in masks[end][1]):
            for cpu in masks[end][1]:
                owner[cpu] = end
                covered += cpu in all_cpus
            end += 1
        if end - start >= 2 and covered >= len(all_cpus):
            candidates.append((end - start, start, end))
        if end > start:
            for cpu in masks[start][1]:
                del owner[cpu]
                covered -= cpu in all_cpus
    found: set[int] = set()
    taken: list[tuple[int, int]] = []
    for _, start, end in sorted(candidates, key=lambda c: (-c[0], c[1])):
        if any(start < other_end and other_start < end for other_start, other_end in taken):
            continue
        taken.append((start, end))
        found.update(irq for irq, _ in masks[start:end])
    return found


def device_vectors(irqs: Irqs, interrupts: Interrupts) -> dict[str, list[tuple[int, CPUSet]]]:
    """Per device (``device_key``), its vectors as (IRQ, requested mask) in row order: the rows whose chip names a
    device and whose /proc/irq entry has a requested mask."""
    groups: dict[str, list[tuple[int, CPUSet]]] = {}
    for row in interrupts.rows:
        irq = row.irq
        found = irqs.irqs.get(irq) if irq is not None else None
        key = device_key(row)
        if irq is None or found is None or key is None or found.affinity is None:
            continue
        groups.setdefault(key, []).append((irq, found.affinity))
    return groups


def spread_irqs(irqs: Irqs, interrupts: Interrupts | None, all_cpus: CPUSet) -> frozenset[int]:
    """The IRQs of every device's managed spread (``spread_vectors``); empty when the modes tell managed IRQs
    (``read_only_modes_seen``), without /proc/interrupts or without the CPUs."""
    if irqs.read_only_modes_seen or interrupts is None or not all_cpus:
        return frozenset()
    spread: set[int] = set()
    for members in device_vectors(irqs, interrupts).values():
        if len(members) >= 2:
            spread |= spread_vectors(sorted(members), all_cpus)
    return frozenset(spread)


class ManagedIrqs:
    """Answers "is this IRQ managed by the kernel?" for one reading, with the evidence used. ``spread``: the IRQs of
    the devices' managed spreads when already known (``spread_irqs`` of the same inputs), else worked out here."""

    def __init__(
        self, irqs: Irqs, interrupts: Interrupts | None, all_cpus: CPUSet, spread: frozenset[int] | None = None
    ) -> None:
        self.irqs = irqs
        self.by_mode = irqs.read_only_modes_seen
        self._spread = spread_irqs(irqs, interrupts, all_cpus) if spread is None else spread

    def managed(self, irq: int) -> bool:
        found = self.irqs.irqs.get(irq)
        if found is not None and found.writable is False:
            return True
        if self.by_mode:
            return False
        return irq in self._spread

    def evidence(self, irq: int) -> str:
        found = self.irqs.irqs.get(irq)
        if found is not None and found.writable is False:
            return "its smp_affinity is read-only"
        return "its vector belongs to a device's per-CPU spread"


@dataclass(frozen=True, eq=False)
class _ManagedSpread:
    """``spread_irqs`` of one reading with what it was made from, for a later reading to reuse (``Host.derived``)."""

    rows: tuple[InterruptRow, ...]  # /proc/interrupts' rows
    irqs: Mapping[int, IrqAffinity]  # the /proc/irq entries
    all_cpus: CPUSet
    spread: frozenset[int]


def _same_layout(rows: Sequence[InterruptRow], prior: Sequence[InterruptRow]) -> bool:
    """Whether two readings list the same rows (keys, in order) on the same chips: the spread depends on the rows
    only through their IRQ number and chip, and a row keeps its generation while it reads the same, so only the
    rows of another generation (``changed_positions``: those whose counts moved) are compared."""
    positions = changed_positions(rows, prior)
    return positions is not None and all(rows[index].chip == prior[index].chip for index in positions)


def _same_masks(new: Mapping[int, IrqAffinity], old: Mapping[int, IrqAffinity]) -> bool:
    """Whether two readings' /proc/irq entries are the same IRQs, in the same order, with the same requested masks
    (the spread depends on nothing else of them): an entry of the same generation is the same object."""
    if same_entries(new, old):
        return True
    if len(new) != len(old) or not all(map(eq, new, old)):
        return False
    return all(a is b or a.affinity == b.affinity for a, b in zip(new.values(), old.values(), strict=True))


def _spread_of(host: Host, irqs: Irqs, all_cpus: CPUSet) -> frozenset[int]:
    """``spread_irqs`` of this reading, reused from an earlier reading (``Host.derived``) while the rows' layout
    (IRQ, chip) and the IRQs' requested masks are the same: they change with drivers and hotplug, not with counts,
    and grouping ~2,000 rows by device and sliding every device's vectors is the placement check's largest part."""
    interrupts: Interrupts | None = host.interrupts
    if irqs.read_only_modes_seen or interrupts is None or not all_cpus:
        return frozenset()
    rows, by_irq = interrupts.rows, irqs.irqs
    prior = host.derived.get("checks.managed_spread")
    if (
        isinstance(prior, _ManagedSpread)
        and prior.all_cpus == all_cpus
        and _same_masks(by_irq, prior.irqs)
        and _same_layout(rows, prior.rows)
    ):
        spread = prior.spread
    else:
        spread = spread_irqs(irqs, interrupts, all_cpus)
    host.derived.put("checks.managed_spread", _ManagedSpread(rows, by_irq, all_cpus, spread))
    return spread


def managed_irqs(host: Host) -> ManagedIrqs | None:
    """The managed-IRQ answers for this reading (None without the irqs source), computed once per Host, the devices'
    spreads reused from an earlier reading while what they depend on is the same (``_spread_of``)."""
    found: Irqs | None = host.irqs
    if found is None:
        return None
    topology = host.topology
    all_cpus = frozenset(topology.cpus) if topology is not None else frozenset()
    return host.memo(
        "managed_irqs", lambda: ManagedIrqs(found, host.interrupts, all_cpus, _spread_of(host, found, all_cpus))
    )


# The device rows of /proc/interrupts joined with their /proc/irq entry: (row, IRQ number, entry, delivered-to CPUs).
DeviceIrq = tuple[InterruptRow, int, IrqAffinity, CPUSet]


def changed_positions(new: Sequence[InterruptRow], old: Sequence[InterruptRow]) -> list[int] | None:
    """The positions where ``new``'s row may differ from ``old``'s: another generation (``InterruptRow.generation``:
    the interrupts source hands an unchanged row out again with the generation it was made in), or an unknown one
    (0); None when the two do not list the same keys in the same order.

    Between two serve readings a few of /proc/interrupts' ~2,000 rows differ; the keys are compared as two lists
    and the generations with map and compress, without a Python step per row. One reading makes one row per key,
    so a key with the same generation is the same row.
    """
    if len(new) != len(old):
        return None
    generations = [row.generation for row in new]
    if 0 in generations:
        return list(range(len(new)))
    if [row.key for row in new] != [row.key for row in old]:
        return None
    return list(compress(range(len(new)), map(ne, generations, [row.generation for row in old])))


def same_entries(new: Mapping[int, IrqAffinity], old: Mapping[int, IrqAffinity]) -> bool:
    """Whether two readings' /proc/irq entries are the same IRQs in the same order with the same generations
    (``IrqAffinity.generation``, never 0): then each entry is the one of the other reading."""
    if new is old:
        return True
    if len(new) != len(old) or not all(map(eq, new, old)):
        return False
    generations = [entry.generation for entry in new.values()]
    return 0 not in generations and generations == [entry.generation for entry in old.values()]


@dataclass(frozen=True, eq=False)
class _DeviceIrqJoin:
    """``device_irqs`` of one reading, with what it was made from for a later reading to reuse (``Host.derived``)."""

    rows: tuple[InterruptRow, ...]  # /proc/interrupts' rows
    irqs: Mapping[int, IrqAffinity]  # the /proc/irq entries
    aligned: tuple[DeviceIrq | None, ...]  # each row's join, None for a row that has none
    joined: tuple[DeviceIrq, ...]


def device_irqs(host: Host) -> tuple[DeviceIrq, ...]:
    """Every device row that has a /proc/irq entry, in row order, computed once per Host: the placement check and the
    ``numawatch_irq_affinity_info`` family both walk the ~2,000 rows of a large node only to keep the few delivered
    to protected CPUs, so the key parsing and lookups are done once for both. Empty without either source.

    In serve nearly every row and /proc/irq entry keeps its generation from reading to reading (the interrupts and
    irqs sources hand out unchanged ones again): when every entry does (``same_entries``), only the rows whose
    generation changed (``changed_positions``) are joined again, and the others keep the last join's
    (``Host.derived``, which holds the last join with the rows and entries it was made from)."""
    key = "device_irqs"

    def join() -> _DeviceIrqJoin:
        interrupts: Interrupts | None = host.interrupts
        irqs: Irqs | None = host.irqs
        if interrupts is None or irqs is None:
            return _DeviceIrqJoin((), {}, (), ())
        rows, by_irq = interrupts.rows, irqs.irqs
        prior = host.derived.get("checks.device_irqs")
        positions = None
        if isinstance(prior, _DeviceIrqJoin) and same_entries(by_irq, prior.irqs):
            positions = changed_positions(rows, prior.rows)
        if positions is None or not isinstance(prior, _DeviceIrqJoin):
            aligned = [_join_row(row, by_irq) for row in rows]
        else:
            aligned = list(prior.aligned)
            for index in positions:
                aligned[index] = _join_row(rows[index], by_irq)
        made = _DeviceIrqJoin(rows, by_irq, tuple(aligned), tuple(entry for entry in aligned if entry is not None))
        host.derived.put("checks.device_irqs", made)
        return made

    result: _DeviceIrqJoin = host.memo(key, join)
    return result.joined


def _join_row(row: InterruptRow, by_irq: Mapping[int, IrqAffinity]) -> DeviceIrq | None:
    if row.kind != KIND_DEVICE:
        return None
    irq = row.irq
    found = by_irq.get(irq) if irq is not None else None
    if found is None or irq is None:
        return None
    return (row, irq, found, found.delivered_to)


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
    host.reads_previous()
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


def deltas(previous: Interrupts, current: Interrupts, cpus: CPUSet, kinds: Iterable[str]) -> Iterator[
    tuple[InterruptRow, dict[int, int]]
]:
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
