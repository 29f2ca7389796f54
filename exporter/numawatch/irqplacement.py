"""Where device interrupts are delivered: /proc/interrupts' device rows joined with their /proc/irq entries, and
which IRQs the kernel manages. The IRQ checks (checks/host_irq.py) and the IRQ metric families (metrics/host.py)
both walk the ~2,000 rows of a large node; the join and the managed-IRQ answers are derivations, made once per
Host.

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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import eq, ne

from numawatch.cpuset import CPUSet
from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.inputs import INTERRUPTS, IRQ_REQUESTED_MASKS, IRQS, TOPOLOGY
from numawatch.model.interrupts import KIND_DEVICE, InterruptRow, Interrupts, IrqAffinity, Irqs

_MSI_CHIP = re.compile(r"(?:IR-)?PCI-MSI(?:X)?(?:-(?P<bdf>[0-9a-fA-F:.]+))?\s+(?P<hwirq>\d+)-")


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
    """``spread_irqs`` of one reading with what it was made from, for the next to reuse (``_managed_spread``)."""

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


@derivation(
    "irqplacement.managed_spread", inputs=(INTERRUPTS, IRQ_REQUESTED_MASKS, TOPOLOGY), incremental=True
)
def _managed_spread(host: Host, previous: _ManagedSpread | None) -> _ManagedSpread:
    """``spread_irqs`` of this reading, the previous one's (``previous``) while the rows' layout (IRQ, chip) and the
    IRQs' requested masks are the same: they change with drivers and hotplug, not with counts, and grouping ~2,000
    rows by device and sliding every device's vectors is the placement check's largest part (5-6 ms on a 384-CPU
    node, against 0.2 ms to find it unchanged). Comparing by generations, only the rows whose counts moved are
    looked at: a version of every row's chip and every IRQ's mask would take 0.9 ms and hold ~0.3 MB more."""
    interrupts: Interrupts | None = host.interrupts
    irqs: Irqs | None = host.irqs
    all_cpus = _all_cpus(host)
    if irqs is None or irqs.read_only_modes_seen or interrupts is None or not all_cpus:
        return _ManagedSpread((), {}, all_cpus, frozenset())
    rows, by_irq = interrupts.rows, irqs.irqs
    if (
        previous is not None
        and previous.rows
        and previous.all_cpus == all_cpus
        and _same_masks(by_irq, previous.irqs)
        and _same_layout(rows, previous.rows)
    ):
        spread = previous.spread
    else:
        spread = spread_irqs(irqs, interrupts, all_cpus)
    return _ManagedSpread(rows, by_irq, all_cpus, spread)


def _all_cpus(host: Host) -> CPUSet:
    topology = host.topology
    return frozenset(topology.cpus) if topology is not None else frozenset()


@derivation("irqplacement.managed_irqs", inputs=(IRQS, INTERRUPTS, TOPOLOGY))
def managed_irqs(host: Host) -> ManagedIrqs | None:
    """The managed-IRQ answers for this reading (None without the irqs source), the devices' spreads reused from an
    earlier reading while what they depend on is the same (``_managed_spread``)."""
    found: Irqs | None = host.irqs
    if found is None:
        return None
    return ManagedIrqs(found, host.interrupts, _all_cpus(host), _managed_spread(host).spread)


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
    """``device_irqs`` of one reading, with what it was made from, for the next to reuse (``_device_irq_join``)."""

    rows: tuple[InterruptRow, ...]  # /proc/interrupts' rows
    irqs: Mapping[int, IrqAffinity]  # the /proc/irq entries
    aligned: tuple[DeviceIrq | None, ...]  # each row's join, None for a row that has none
    joined: tuple[DeviceIrq, ...]


def device_irqs(host: Host) -> tuple[DeviceIrq, ...]:
    """Every device row that has a /proc/irq entry, in row order: the placement check and the
    ``numawatch_irq_affinity_info`` family both walk the ~2,000 rows of a large node only to keep the few delivered
    to protected CPUs, so the key parsing and lookups are done once for both. Empty without either source."""
    return _device_irq_join(host).joined


@derivation("irqplacement.device_irqs", inputs=(INTERRUPTS, IRQS), incremental=True)
def _device_irq_join(host: Host, previous: _DeviceIrqJoin | None) -> _DeviceIrqJoin:
    """``device_irqs`` with what it was made from. In serve nearly every row and /proc/irq entry keeps its generation
    from reading to reading (the interrupts and irqs sources hand out unchanged ones again): when every entry does
    (``same_entries``), only the rows whose generation changed (``changed_positions``) are joined again, and the
    others keep ``previous``'s join: 0.4 ms on a 384-CPU node against 0.7-0.9 ms for joining every row."""
    interrupts: Interrupts | None = host.interrupts
    irqs: Irqs | None = host.irqs
    if interrupts is None or irqs is None:
        return _DeviceIrqJoin((), {}, (), ())
    rows, by_irq = interrupts.rows, irqs.irqs
    positions = None
    if previous is not None and same_entries(by_irq, previous.irqs):
        positions = changed_positions(rows, previous.rows)
    if positions is None or previous is None:
        aligned = [_join_row(row, by_irq) for row in rows]
    else:
        aligned = list(previous.aligned)
        for index in positions:
            aligned[index] = _join_row(rows[index], by_irq)
    return _DeviceIrqJoin(rows, by_irq, tuple(aligned), tuple(entry for entry in aligned if entry is not None))


def _join_row(row: InterruptRow, by_irq: Mapping[int, IrqAffinity]) -> DeviceIrq | None:
    if row.kind != KIND_DEVICE:
        return None
    irq = row.irq
    found = by_irq.get(irq) if irq is not None else None
    if found is None or irq is None:
        return None
    return (row, irq, found, found.delivered_to)
