"""IRQ affinity: where each interrupt may go and where the kernel actually delivers it.

Files read, per ``proc/irq/<n>/`` (Documentation/core-api/irq/irq-affinity.rst, kernel/irq/proc.c):

- ``smp_affinity_list``: the requested CPUs, a CPU list (``0-3,8``).
- ``effective_affinity_list``: the CPU(s) the interrupt is really routed to (usually one, picked by the vector
  allocator from the requested mask). Present with CONFIG_GENERIC_IRQ_EFFECTIVE_AFF_MASK (x86: always); an empty
  line for chained IRQs such as the cascade. None when the file does not exist.
- the mode of ``smp_affinity``: since Linux 6.12 the kernel creates it read-only (``0444``) when user space cannot
  set the affinity (``irq_can_set_affinity_usr``: managed IRQs, chips without ``irq_set_affinity``). On older
  kernels every IRQ shows ``0644`` and the mode says nothing; see checks/host_irq.py for how managed IRQs are then
  recognised. A tree where *no* IRQ is writable is a copy that lost its modes (``cat`` into files made read-only),
  and its modes are ignored.
- ``proc/irq/default_smp_affinity``: the hex mask new IRQs start with (``irqaffinity=`` sets it).

Which IRQs have a handler and what they are called comes from /proc/interrupts (the interrupts source): an IRQ
directory also exists for descriptors without any action (unused legacy lines), which deliver nothing.

Cost: one directory listing plus two small reads and one stat per IRQ, with raw ``os`` calls (2,000 IRQs on a large
host). A HostReader reads it incrementally (``read_incremental``, handed the previous reading's ``IrqsMemory``): it
stats only IRQs it has not seen in the previous
reading (the mode is fixed when the kernel creates the IRQ's directory), does not look again for an
``effective_affinity_list`` an IRQ did not have, and reuses an IRQ's parsed entry while its files read the same
bytes. Unstaggered (the default, and always in ``check`` and ``capture``) it reads both affinity files of every IRQ
every time. With serve's ``--stagger k`` (the refresh table rotates ``AFFINITIES``) it reads them for the IRQs whose
number is congruent to the reading counter modulo k, about 1/k of them, and carries the other IRQs' entries over
from the previous reading: an IRQ's placement is then at most k - 1 readings old, while the alerts on IRQ placement
wait 30 minutes. Its ``smp_affinity_list`` is read in the IRQ's
turns of the table's ``REQUESTED_MASKS`` family (a multiple of ``AFFINITIES``' round), and in the others only when
the effective affinity changed (``_requested_turn``): the requested mask, which no check judges placement by, may
be older than the effective one (``numawatch explain`` says by how much), for a quarter fewer opens per reading.
The directory listing is still taken every reading, so a new IRQ is read at once and a vanished one
drops out at once. While the listing names the same entries as at the previous reading (the usual case), a staggered
reading copies the previous reading's entries in bulk and runs Python only for the IRQs in its turn (plus any the
previous reading could not read); see ``read_incremental``.
IRQs appear and vanish with drivers and hotplug: a directory gone mid-scan is skipped.

Essential: the ``proc/irq`` listing. Optional: every IRQ's files (a malformed one leaves that IRQ out, tried again
at the next reading, and is named in ``Irqs.problems``) and ``default_smp_affinity``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from types import MappingProxyType
from typing import NamedTuple

from numawatch.confined import HostFs
from numawatch.cpuset import CPUListError, CPUSet, parse_cpulist, parse_cpumask
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.model.interrupts import Interrupts, IrqAffinity, Irqs
from numawatch.paths import Paths
from numawatch.refresh import AFFINITIES, REQUESTED_MASKS, Carried, Refresh
from numawatch.source import Inputs, SourceSpec

_READ_SIZE = 1 << 16  # a CPU list of 8,192 CPUs in the worst (every other CPU) shape fits easily


def parse_cpulist_file(data: bytes, path: str, cache: dict[bytes, CPUSet] | None = None) -> CPUSet:
    """A CPU list file's bytes -> CPUs. ``cache`` (one per reading) reuses the result for identical contents: most
    IRQs share a handful of masks ("0-383", one CPU each), and parsing them again is most of this source's cost."""
    if cache is not None:
        found = cache.get(data)
        if found is not None:
            return found
    try:
        cpus = parse_cpulist(data.decode("ascii", errors="replace"))
    except CPUListError as error:
        raise MalformedFile(path, str(error)) from None
    if cache is not None:
        cache[data] = cpus
    return cpus


def _mode_writable(fs: HostFs, directory: str) -> bool | None:
    """Whether ``smp_affinity`` has its owner write bit; None when it cannot be stat'ed."""
    try:
        return bool(fs.stat_path(f"{directory}/smp_affinity").st_mode & stat.S_IWUSR)
    except OSError:
        return None


class SeenIrq(NamedTuple):
    """What a reading remembers of an IRQ: its two files' bytes and the entry parsed from them (mode included)."""

    affinity: bytes  # smp_affinity_list
    effective: bytes | None  # effective_affinity_list; None: the IRQ has none
    entry: IrqAffinity


def parse_irq(
    irq: int,
    affinity: bytes,
    effective: bytes | None,
    writable: bool | None,
    previous: SeenIrq | None = None,
    *,
    directory: str = "/proc/irq/?",
    generation: int = 0,
    cache: dict[bytes, CPUSet] | None = None,
) -> SeenIrq:
    """IRQ ``irq``'s ``smp_affinity_list`` and ``effective_affinity_list`` bytes (None: no such file) and whether
    its ``smp_affinity`` is writable (None: unknown) -> the IRQ's entry, with the bytes it was parsed from. Pure: no
    I/O. ``previous`` (what the previous reading parsed for this IRQ) is handed back as it is when the bytes and the
    mode are the same: the same immutable entry, its generation kept; else the entry is new, stamped ``generation``.
    ``directory`` names the files in errors (MalformedFile); ``cache``: as ``parse_cpulist_file``'s."""
    if (
        previous is not None
        and previous.entry.irq == irq
        and previous.affinity == affinity
        and previous.effective == effective
        and previous.entry.writable == writable
    ):
        return previous
    effective_path = f"{directory}/effective_affinity_list"
    entry = IrqAffinity(
        irq=irq,
        affinity=parse_cpulist_file(affinity, f"{directory}/smp_affinity_list", cache),
        effective=None if effective is None else parse_cpulist_file(effective, effective_path, cache),
        writable=writable,
        generation=generation,
    )
    return SeenIrq(affinity, effective, entry)


def _list_irq_root(paths: Paths) -> tuple[str, list[str]]:
    """``proc/irq``'s path and its entries (numbered IRQ directories plus ``default_smp_affinity``)."""
    irq_root = f"{os.fspath(paths.procfs)}/irq"  # a string, not pathlib: this runs at every reading
    try:
        return irq_root, paths.fs.listdir(irq_root)
    except (FileNotFoundError, NotADirectoryError):
        raise SourceUnavailable(f"{irq_root} does not exist") from None


def _read_one(
    fs: HostFs,
    root: str,
    entry: str,
    irq: int,
    known: SeenIrq | None,
    cache: dict[bytes, CPUSet],
    requested: bool = True,
    problems: list[str] | None = None,
    generation: int = 0,
) -> SeenIrq | None:
    """``_read_fresh``, with a malformed file of the IRQ described in ``problems`` and the IRQ then left out (None,
    as if it had vanished, so it is tried again at the next reading)."""
    try:
        return _read_fresh(fs, root, entry, irq, known, cache, requested, generation)
    except MalformedFile as error:
        if problems is None:
            raise
        problems.append(str(error))
        return None


def _read_fresh(
    fs: HostFs,
    root: str,
    entry: str,
    irq: int,
    known: SeenIrq | None,
    cache: dict[bytes, CPUSet],
    requested: bool = True,
    generation: int = 0,
) -> SeenIrq | None:
    """Read IRQ ``irq`` (directory ``entry``) again; ``known``: what the previous reading kept of it, returned as is
    when its files read the same bytes. None when the IRQ vanished.

    ``requested=False`` (a staggered reading's every other turn, see ``_requested_turn``): when the IRQ has an
    ``effective_affinity_list`` and it reads the same bytes as last time, the IRQ is ``known`` again without
    ``smp_affinity_list`` being opened; when it changed (the IRQ moved), both files are read as usual."""
    directory = f"{root}/{entry}"
    read_small = fs.read_small  # up to two reads per IRQ, 2,000 IRQs on a large node
    if not requested and known is not None and known.effective is not None:
        effective_data = read_small(f"{directory}/effective_affinity_list", _READ_SIZE, vanishing=True)
        if effective_data is None:
            return None  # vanished
        if effective_data == known.effective:
            return known
    affinity_data = read_small(f"{directory}/smp_affinity_list", _READ_SIZE, vanishing=True)
    if affinity_data is None:
        return None  # vanished
    # An IRQ's directory gets all its files when the IRQ is set up (register_irq_proc): one that had no
    # effective_affinity_list at the last reading has none now (kernels without GENERIC_IRQ_EFFECTIVE_AFF_MASK).
    effective_data = None
    if known is None or known.effective is not None:
        effective_data = read_small(f"{directory}/effective_affinity_list", _READ_SIZE, vanishing=True)
    if known is not None and known.affinity == affinity_data and known.effective == effective_data:
        return known  # the same bytes: parse_irq would hand it back, and its mode is not looked up
    # The mode is set when the directory is created: an IRQ present in the previous reading keeps it.
    writable = known.entry.writable if known is not None else None
    if writable is None:
        writable = _mode_writable(fs, directory)
    return parse_irq(
        irq, affinity_data, effective_data, writable, known, directory=directory, generation=generation, cache=cache
    )


def _requested_turn(irq: int, share: int, round_: int, every: int = 2) -> bool:
    """Whether a staggered reading in round ``round_`` (the reading counter divided by ``share``) reads IRQ ``irq``'s
    ``smp_affinity_list`` in its turn, or only its ``effective_affinity_list`` (``_read_one``'s ``requested``).

    The effective affinity is where the kernel delivers the IRQ, what the placement check and alert judge: it is
    read in every turn (every ``share`` readings). The requested mask is used for messages, the ``affinity`` label
    and the managed-IRQ evidence; it is read in one turn of the IRQ in ``every`` (the refresh table's
    ``REQUESTED_MASKS`` round over ``AFFINITIES``'), and at once whenever the effective affinity changed. Spreading
    by ``irq // share`` keeps each turn's share of the IRQs that read both files even, so every reading costs about
    the same; it is the IRQ's ``REQUESTED_MASKS`` turn (``Refresh.due``) whenever that falls on an ``AFFINITIES`` one.
    """
    return share <= 1 or every <= 1 or (irq // share - round_) % every == 0


def _requested_every(refresh: Refresh, share: int) -> int:
    """In how many of an IRQ's ``AFFINITIES`` turns one reads its requested mask too: the table's ``REQUESTED_MASKS``
    round over ``AFFINITIES``' (a round that is not a multiple of it reads the mask at every turn)."""
    requested = refresh.share_of(REQUESTED_MASKS)
    if share <= 1 or requested % share:
        return 1
    return requested // share


def _read_default(fs: HostFs, root: str) -> CPUSet | None:
    """``proc/irq/default_smp_affinity`` (a hex mask), None when absent or malformed: only the kernel-settings
    family shows it, and it leaves out what it does not know."""
    default_data = fs.read_small(f"{root}/default_smp_affinity", _READ_SIZE, vanishing=True)
    if default_data is None:
        return None
    try:
        return parse_cpumask(default_data.decode("ascii", errors="replace"))
    except CPUListError:
        return None


def _snapshot(
    entries: dict[int, IrqAffinity],
    default: CPUSet | None,
    any_writable: bool,
    any_read_only: bool,
    problems: list[str],
) -> Irqs:
    """The Irqs of ``entries`` (sorted by IRQ, modes as read). The snapshot wraps ``entries`` itself, as frozen_map
    would a copy of it: nobody changes it afterwards (the next reading works on a copy).
    Not one IRQ whose affinity may be set: a real kernel always has some (the legacy and timer lines), so this is
    a copy of /proc that lost the modes (a capture made with cat); the modes then mean nothing."""
    if entries and not any_writable:
        return Irqs(
            irqs=MappingProxyType({irq: replace(found, writable=None) for irq, found in entries.items()}),
            default_affinity=default,
            read_only_modes_seen=False,
            problems=tuple(problems),
        )
    return Irqs(
        irqs=MappingProxyType(entries),
        default_affinity=default,
        read_only_modes_seen=any_read_only,
        problems=tuple(problems),
    )


class _Reading(NamedTuple):
    """A reading's snapshot and what it remembers for the next one."""

    result: Irqs
    seen: dict[int, SeenIrq]  # per IRQ read or carried
    entries: dict[int, IrqAffinity]  # sorted by IRQ, modes as read (the snapshot may have dropped them)
    listing: list[str]  # proc/irq's names
    missed: list[tuple[int, str]]  # numbered entries that could not be read (vanished mid-read)


def _read_all(
    paths: Paths,
    seen: dict[int, SeenIrq] | None,
    share: int = 1,
    turn: int = 0,
    listed: tuple[str, list[str]] | None = None,
    round_: int = 0,
    generation: int = 0,
    every: int = 2,
) -> _Reading:
    """Every IRQ; with ``share`` > 1, the ones seen before whose number is not ``turn`` modulo ``share`` are carried
    over from ``seen`` instead of read, and those read skip ``smp_affinity_list`` as ``_requested_turn`` (in
    round ``round_``, one turn in ``every``) says. ``listed``: ``proc/irq`` already listed by the caller."""
    fs = paths.fs
    root, listing = listed or _list_irq_root(paths)
    previous = seen or {}
    now: dict[int, SeenIrq] = {}
    missed: list[tuple[int, str]] = []
    problems: list[str] = []
    cache: dict[bytes, CPUSet] = {}
    for entry in listing:
        if not entry.isdigit():
            continue
        irq = int(entry)
        known = previous.get(irq)
        if known is not None and share > 1 and irq % share != turn:
            now[irq] = known  # not its turn: the previous reading's (immutable) entry
            continue
        requested = _requested_turn(irq, share, round_, every)
        fresh = _read_one(fs, root, entry, irq, known, cache, requested, problems, generation)
        if fresh is None:
            missed.append((irq, entry))
        else:
            now[irq] = fresh
    entries = {irq: now[irq].entry for irq in sorted(now)}
    default = _read_default(fs, root)
    result = _snapshot(
        entries,
        default,
        any(found.writable for found in entries.values()),
        any(found.writable is False for found in entries.values()),
        problems,
    )
    return _Reading(result, now, entries, listing, missed)


def read(paths: Paths, inputs: Inputs | None = None) -> Irqs:
    """Every IRQ's requested and effective affinity and whether user space may set it."""
    return _read_all(paths, None).result


class TurnPlan(NamedTuple):
    """Which IRQs of a listing each turn of a rotation reads."""

    share: int  # the rotation's turns
    turns: list[list[tuple[int, str]]]  # per turn: its IRQs' numbers and directory names


class IrqsMemory(NamedTuple):
    """What a reading of this source leaves for the next one (``Carried.memory``; the HostReader keeps it)."""

    seen: dict[int, SeenIrq]  # per IRQ: its files' bytes and entry (mode included)
    entries: dict[int, IrqAffinity]  # sorted, modes as read
    listing: list[str] | None  # proc/irq's names; None: no fast path
    plan: TurnPlan | None  # built on the first fast reading of a listing
    missed: list[tuple[int, str]]  # numbered entries that could not be read
    # IRQs among ``entries`` with a writable and with a read-only smp_affinity; None: count them when needed.
    modes: tuple[int, int] | None
    # The numbered rows of /proc/interrupts (the interrupts source's reading) when ``listing`` was taken; None:
    # unknown, and proc/irq is listed at every reading.
    rows_hint: tuple[str, ...] | None = None
    # The generation of the interrupts reading ``rows_hint`` was taken from: while it is the same, so is the hint
    # (the interrupts source is read at one reading in several and hands its snapshot out again in between).
    hint_generation: int | None = None


def _rows_hint(inputs: Inputs | None) -> tuple[str, ...] | None:
    """The IRQ numbers /proc/interrupts lists (its numbered rows), or None without the interrupts source."""
    found: Interrupts | None = inputs.get("interrupts") if inputs is not None else None
    if found is None:
        return None
    return tuple(row.key for row in found.rows if row.key.isdigit())


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading handed the previous one's memory: an IRQ seen before is not stat'ed again (its mode is fixed when
    its directory is created), unchanged files are not parsed again, and with the rotation on (``AFFINITIES``)
    only the IRQs in this turn are read (see the module docstring).

    While ``proc/irq`` lists the same names as at the previous reading, a rotating reading starts from copies of
    the previous reading's entries and memory (C-level dict copies, already sorted) and runs Python only for the
    IRQs in this turn, the IRQs the previous reading could not read (they are tried again, as a first sighting is)
    and the default affinity; it gives exactly what the general path (``_read_all``) gives on the same history.
    The counts of writable and read-only IRQs keep the "no IRQ writable" rule and ``read_only_modes_seen`` right
    without scanning every IRQ. Any other listing, and every reading that does not rotate, takes the general path.
    """
    memory: IrqsMemory | None = refresh.memory
    share, turn = refresh.rotation(AFFINITIES)
    round_ = refresh.round_of(AFFINITIES)
    every = _requested_every(refresh, share)
    hint_generation = inputs.generation("interrupts") if inputs is not None else None
    if memory is not None and hint_generation is not None and hint_generation == memory.hint_generation:
        hint = memory.rows_hint
    else:
        hint = _rows_hint(inputs)
    listed = None
    if share > 1 and memory is not None and memory.listing is not None:
        if turn != 0 and hint is not None and hint == memory.rows_hint:
            # Every IRQ set up with a handler has its row in /proc/interrupts: while those rows are the ones of the
            # last listing, no IRQ came or went, and the 2,000-entry listing is not taken again. An IRQ directory
            # without a handler (it never fires) shows at the round's first turn, when proc/irq is listed anyway.
            root = f"{os.fspath(paths.procfs)}/irq"
            carried = _read_turn(paths.fs, memory, root, share, turn, round_, refresh.generation, every)
            return carried._replace(memory=carried.memory._replace(hint_generation=hint_generation))
        listed = _list_irq_root(paths)
        root, listing = listed
        if listing == memory.listing:  # one C comparison of the names
            carried = _read_turn(paths.fs, memory, root, share, turn, round_, refresh.generation, every)
            kept = carried.memory._replace(rows_hint=hint, hint_generation=hint_generation)
            return carried._replace(memory=kept)
    seen = memory.seen if memory is not None else None
    reading = _read_all(paths, seen, share, turn, listed, round_, refresh.generation, every)
    plan = memory.plan if memory is not None and reading.listing == memory.listing else None
    kept = IrqsMemory(reading.seen, reading.entries, reading.listing, plan, reading.missed, None, hint, hint_generation)
    return Carried(reading.result, kept)


def _read_turn(
    fs: HostFs, memory: IrqsMemory, root: str, share: int, turn: int, round_: int, generation: int = 0, every: int = 2
) -> Carried:
    """A rotating reading over the same listing as the previous one (see ``read_incremental``)."""
    plan = memory.plan
    if plan is None or plan.share != share:
        turns: list[list[tuple[int, str]]] = [[] for _ in range(share)]
        for irq, entry in _numbered(memory.listing or []):
            turns[irq % share].append((irq, entry))
        plan = TurnPlan(share, turns)
    modes = memory.modes
    if modes is None:
        modes = (
            sum(1 for found in memory.entries.values() if found.writable),
            sum(1 for found in memory.entries.values() if found.writable is False),
        )
    writable, read_only = modes
    todo = plan.turns[turn]
    if memory.missed:
        todo = todo + [(irq, entry) for irq, entry in memory.missed if irq % share != turn]
    seen = dict(memory.seen)
    entries = dict(memory.entries)
    cache: dict[bytes, CPUSet] = {}
    added = False
    missed: list[tuple[int, str]] = []
    problems: list[str] = []
    for irq, entry in todo:
        known = seen.get(irq)
        requested = _requested_turn(irq, share, round_, every)
        fresh = _read_one(fs, root, entry, irq, known, cache, requested, problems, generation)
        if fresh is known:
            if fresh is None:
                missed.append((irq, entry))  # still unreadable: tried again next time
            continue  # the same bytes: the same entry, in its place
        if known is not None:
            writable -= known.entry.writable is True
            read_only -= known.entry.writable is False
        if fresh is None:
            del seen[irq], entries[irq]  # vanished or malformed: drops out at once
            missed.append((irq, entry))
            continue
        if known is None:
            added = True
        found = fresh.entry
        writable += found.writable is True
        read_only += found.writable is False
        seen[irq] = fresh
        entries[irq] = found  # a carried IRQ keeps its place; an added one goes last, sorted below
    if added:
        entries = dict(sorted(entries.items()))
    # A turn that read the bytes it read before gives an equal snapshot: the HostReader then keeps the last one and
    # its generation, so what was made from it is reused.
    result = _snapshot(entries, _read_default(fs, root), writable > 0, read_only > 0, problems)
    memory = IrqsMemory(
        seen, entries, memory.listing, plan, missed, (writable, read_only), memory.rows_hint, memory.hint_generation
    )
    return Carried(result, memory)


def _numbered(listing: list[str]) -> list[tuple[int, str]]:
    """The IRQ directories of a ``proc/irq`` listing, with their numbers."""
    return [(int(entry), entry) for entry in listing if entry.isdigit()]


SOURCE = SourceSpec(
    name="irqs",
    read=read,
    incremental=read_incremental,
    # Its numbered rows say whether IRQs came or went, so proc/irq is not listed at every reading.
    needs=("interrupts",),
    description="requested and effective affinity of every IRQ (/proc/irq/<n>)",
)

__all__ = ["SOURCE", "IrqsMemory", "SeenIrq", "parse_cpulist_file", "parse_irq", "read", "read_incremental"]
