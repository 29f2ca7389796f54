"""Interrupts.

/proc/interrupts rows, IRQ affinities, irqbalance (sources/interrupts.py, irqs.py, irqbalance.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numawatch.cpuset import EMPTY, CPUSet
from numawatch.model import frozen_map

# --------------------------------------------------------------------------------------------------- interrupts
KIND_DEVICE = "device"


KIND_LOCAL_TIMER = "local_timer"


KIND_IPI = "ipi"


KIND_OTHER = "other"


INTERRUPT_KINDS = (KIND_DEVICE, KIND_LOCAL_TIMER, KIND_IPI, KIND_OTHER)


@dataclass(frozen=True)
class InterruptRow:
    """One line of /proc/interrupts, with counts kept only for the watched CPUs."""

    key: str  # "25" for an IRQ number, "LOC", "RES", "IPI0", ...
    kind: str  # KIND_*
    name: str  # device rows: the action names as printed ("nvme0q1", "ehci_hcd:usb1, ehci_hcd:usb2"); else text
    chip: str = ""  # device rows: chip, hwirq and trigger ("PCI-MSI 34095105-edge"); "" for named rows
    counts: Mapping[int, int] = field(default_factory=frozen_map)  # watched CPU -> count; zeros are left out
    # The reading (a HostReader's reading number) that made this object; the source hands the same object out again
    # while it is unchanged, so what was derived from it may be reused while the number is the same (numawatch.store).
    # 0: unknown (a one-off reading), never reused. Not part of equality.
    generation: int = field(default=0, compare=False)
    # Why the row's text was not kept (a name or chip with control characters: name and chip are then ""), one
    # line naming the file; "" when it was. The counts stand either way: one odd row is not the file's fault.
    problem: str = ""

    @property
    def irq(self) -> int | None:
        return int(self.key) if self.key.isdigit() else None

    def count(self, cpu: int) -> int:
        return self.counts.get(cpu, 0)


@dataclass(frozen=True)
class Interrupts:
    """/proc/interrupts parsed for the CPUs that matter: isolated, nohz_full and exclusively pinned ones."""

    cpus: tuple[int, ...]  # the CPU of each column, as the header names them (online CPUs only)
    watched: CPUSet  # CPUs whose counts were kept (a subset of cpus)
    rows: tuple[InterruptRow, ...]
    read_at: float  # time.monotonic() when the file was read, for rates
    # The source's previous reading of the file (its own ``before`` None), which rates are taken against: a reader
    # that reads the file one evaluation in several (refresh.Policy.every) hands this snapshot out again in between,
    # so the Host before this one may hold this very reading. None: the first reading. Not part of equality.
    before: Interrupts | None = field(default=None, compare=False, repr=False)

    @property
    def problems(self) -> tuple[str, ...]:
        """The rows whose text was malformed, one line each (``InterruptRow.problem``)."""
        return tuple(row.problem for row in self.rows if row.problem)

    def row(self, key: str) -> InterruptRow | None:
        for row in self.rows:
            if row.key == key:
                return row
        return None

    def by_key(self) -> dict[str, InterruptRow]:
        return {row.key: row for row in self.rows}

    def totals_per_kind(self) -> dict[str, dict[int, int]]:
        """kind -> {watched CPU: interrupts since boot}; kinds and CPUs that counted nothing are left out.

        A few architecture rows hold most counts (LOC, RES, CAL, TLB, NMI...: one per watched CPU each, ~3,000 on a
        384-CPU node) and each is the only or the first row of its kind, so a kind's sums start as a copy of its
        first row's counts (one C call) and only the rows after it are added CPU by CPU."""
        totals: dict[str, dict[int, int]] = {}
        for row in self.rows:
            counts = row.counts
            if not counts:
                continue
            into = totals.get(row.kind)
            if into is None:
                totals[row.kind] = dict(counts)
                continue
            for cpu, count in counts.items():
                into[cpu] = into.get(cpu, 0) + count
        return totals


# --------------------------------------------------------------------------------------------------- IRQ affinity
@dataclass(frozen=True)
class IrqAffinity:
    """One /proc/irq/<n>/ directory."""

    irq: int
    affinity: CPUSet | None  # smp_affinity_list: where the IRQ may be delivered (requested)
    effective: CPUSet | None  # effective_affinity_list: where it is delivered; None when the file is absent
    # False when smp_affinity is read-only: since Linux 6.12 the kernel creates it without the write bit for IRQs
    # whose affinity user space cannot set (managed IRQs). None: the mode says nothing (older kernel, or a capture
    # that lost file modes).
    writable: bool | None = None
    # The reading (a HostReader's reading number) that made this object; the source hands the same object out again
    # while it is unchanged, so what was derived from it may be reused while the number is the same (numawatch.store).
    # 0: unknown (a one-off reading), never reused. Not part of equality.
    generation: int = field(default=0, compare=False)

    @property
    def delivered_to(self) -> CPUSet:
        """Where the IRQ actually lands: the effective affinity, else the requested one."""
        if self.effective is not None:
            return self.effective
        return self.affinity or EMPTY


@dataclass(frozen=True)
class Irqs:
    irqs: Mapping[int, IrqAffinity]
    default_affinity: CPUSet | None = None  # /proc/irq/default_smp_affinity (hex mask)
    read_only_modes_seen: bool = False  # some smp_affinity is read-only: this kernel marks managed IRQs by mode
    # One line per IRQ file that could not be parsed (naming it); its IRQ is left out of ``irqs`` and tried again at
    # the next reading.
    problems: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------------- irqbalance
@dataclass(frozen=True)
class IrqbalanceConfig:
    """The irqbalance settings that decide which CPUs it leaves alone, and where they were read."""

    origin: str  # "environ of PID 1234" or the host path of the environment file
    banned_cpulist: CPUSet | None = None  # IRQBALANCE_BANNED_CPULIST (None: not set)
    banned_cpulist_raw: str | None = None
    banned_cpus: CPUSet | None = None  # IRQBALANCE_BANNED_CPUS, deprecated hex mask (None: not set)
    banned_cpus_raw: str | None = None
    args: str = ""  # IRQBALANCE_ARGS


@dataclass(frozen=True)
class Irqbalance:
    pids: tuple[int, ...]  # processes whose comm is "irqbalance"; empty: not running
    config: IrqbalanceConfig | None  # what the running daemon uses (its environ) else the environment files
    problems: tuple[str, ...] = ()  # malformed values, one line each naming the file

    @property
    def running(self) -> bool:
        return bool(self.pids)
