"""The IRQ checks' use of what the sources hand out again: the device IRQ join re-joins only the rows whose generation
is not the previous reading's, the devices' managed spreads are worked out again only when a row's chip or an IRQ's
requested mask changed, and the interrupt deltas look only at such rows; all give exactly what joining, grouping or
comparing everything gives."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from numawatch.checks.host_irq import deltas
from numawatch.host import Host
from numawatch.irqplacement import changed_positions, device_irqs, managed_irqs, same_entries
from numawatch.model import frozen_map
from numawatch.model.interrupts import (
    INTERRUPT_KINDS,
    KIND_DEVICE,
    KIND_IPI,
    KIND_LOCAL_TIMER,
    InterruptRow,
    Interrupts,
    IrqAffinity,
    Irqs,
)
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.paths import Paths
from numawatch.store import Store

CPUS = tuple(range(8))
WATCHED = frozenset({2, 3, 6, 7})


def row(
    key: str, kind: str = KIND_DEVICE, counts: dict[int, int] | None = None, name: str = "", generation: int = 1
) -> InterruptRow:
    """A row as a reading with that generation made it (the interrupts source stamps its reading number)."""
    return InterruptRow(key=key, kind=kind, name=name or f"dev{key}", chip="PCI-MSI 1-edge",
                        counts=frozen_map(counts or {}), generation=generation)  # fmt: skip


def interrupts(rows, read_at: float = 1.0) -> Interrupts:
    return Interrupts(cpus=CPUS, watched=WATCHED, rows=tuple(rows), read_at=read_at)


def irqs(entries) -> Irqs:
    return Irqs(irqs=frozen_map({entry.irq: entry for entry in entries}))


def entry(irq: int, *cpus: int, generation: int = 1) -> IrqAffinity:
    return IrqAffinity(irq=irq, affinity=frozenset(cpus), effective=frozenset(cpus[:1]), generation=generation)


def next_generations(previous: Host | None) -> dict[str, int]:
    """A reading after ``previous`` read the interrupts and irqs again (their rows and entries keep their own
    generations where they are unchanged); the topology stays."""
    number = 1 if previous is None else previous.generations["interrupts"] + 1
    return {"topology": 1, "interrupts": number, "irqs": number}


def reading(rows, entries, previous: Host | None = None) -> Host:
    """A reading of a HostReader: the Hosts of one chain share what they derive (``Host.store``)."""
    results = {"interrupts": interrupts(rows), "irqs": irqs(entries)}
    store = previous.store if previous is not None else Store()
    return Host(paths=Paths.from_root("/nonexistent"), results=frozen_map(results), statuses=frozen_map({}),
                previous=previous, generations=next_generations(previous), store=store)  # fmt: skip


def from_scratch(host: Host) -> Host:
    """The same reading with nothing derived before: nothing to reuse, everything joined anew."""
    return replace(host, previous=None if host.previous is None else replace(host.previous), store=Store())


# ------------------------------------------------------------------------------------------------ helpers
def test_changed_positions_are_where_another_generation_sits():
    a, b, c = row("1"), row("2"), row("3")

    assert changed_positions((a, b, c), (a, b, c)) == []
    assert changed_positions([a, replace(b, generation=2), c], (a, b, c)) == [1]
    assert changed_positions((), ()) == []


def test_changed_positions_count_an_unknown_generation_as_changed_and_other_keys_as_unknown():
    first = row("1", counts={2: 5})

    assert changed_positions((replace(first, generation=0),), (first,)) == [0]  # a one-off reading's row
    assert changed_positions((replace(first, generation=2),), (first,)) == [0]  # equal, but re-read
    assert changed_positions((first,), (first, first)) is None
    assert changed_positions((row("1"), row("3")), (row("1"), row("2"))) is None  # same generation, another row


def test_same_entries_needs_the_same_generations_under_the_same_irqs_in_the_same_order():
    one, two = entry(1, 0), entry(2, 1)
    entries = frozen_map({1: one, 2: two})

    assert same_entries(entries, entries)
    assert same_entries(frozen_map({1: one, 2: two}), entries)
    assert not same_entries(frozen_map({1: one, 2: replace(two, generation=2)}), entries)  # equal, but re-read
    assert not same_entries(frozen_map({1: one, 2: replace(two, generation=0)}), frozen_map({1: one, 2: two}))
    assert not same_entries(frozen_map({2: two, 1: one}), entries)
    assert not same_entries(frozen_map({1: one}), entries)
    assert not same_entries(frozen_map({1: one, 3: two}), entries)


# ------------------------------------------------------------------------------------------------ device_irqs
ROWS = (row("10", counts={2: 1}), row("11"), row("12", counts={6: 4}), row("LOC", KIND_LOCAL_TIMER, {2: 9}))
ENTRIES = (entry(10, 2), entry(11, 0, 1), entry(12, 6, 7))


def test_unchanged_rows_keep_the_previous_readings_join():
    first = reading(ROWS, ENTRIES)
    before = device_irqs(first)
    moved = row("12", counts={6: 40}, generation=2)
    second = reading((*ROWS[:2], moved, ROWS[3]), ENTRIES, previous=first)

    after = device_irqs(second)

    assert after == device_irqs(from_scratch(second))
    assert [joined[0] for joined in after] == [ROWS[0], ROWS[1], moved]
    assert after[0] is before[0] and after[1] is before[1] and after[2] is not before[2]


def test_a_changed_irq_entry_joins_every_row_again():
    first = reading(ROWS, ENTRIES)
    device_irqs(first)
    moved = entry(11, 3, generation=2)  # the IRQ was moved onto a watched CPU
    second = reading(ROWS, (ENTRIES[0], moved, ENTRIES[2]), previous=first)

    after = device_irqs(second)

    assert after == device_irqs(from_scratch(second))
    assert after[1][2] is moved and after[1][3] == frozenset({3})


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param((*ROWS[:2], row("13", generation=2), *ROWS[2:]), id="an-irq-came"),
        pytest.param((ROWS[0], *ROWS[2:]), id="an-irq-went"),
        pytest.param((ROWS[1], ROWS[0], *ROWS[2:]), id="reordered"),
        pytest.param((*ROWS[:3], row("LOC", KIND_LOCAL_TIMER, {2: 10}, generation=2)), id="a-named-row-moved"),
        pytest.param((ROWS[0], row("13"), *ROWS[2:]), id="one-went-one-came-in-one-reading"),
    ],
)
def test_any_other_reading_joins_as_from_scratch(rows):
    first = reading(ROWS, ENTRIES)
    device_irqs(first)
    second = reading(rows, (*ENTRIES, entry(13, 5, generation=2)), previous=reading(ROWS, ENTRIES))
    third = reading(rows, ENTRIES, previous=first)

    for host in (second, third):
        assert device_irqs(host) == device_irqs(from_scratch(host))


def test_a_row_that_lost_its_irq_entry_leaves_the_join():
    first = reading(ROWS, ENTRIES)
    device_irqs(first)
    second = reading(ROWS, (ENTRIES[0], ENTRIES[2]), previous=first)

    assert [joined[1] for joined in device_irqs(second)] == [10, 12]


# ------------------------------------------------------------------------------------------------ managed spread
def topology(count: int) -> Topology:
    cpus = {cpu: Cpu(id=cpu, online=True, socket=0, core=cpu, numa_node=0) for cpu in range(count)}
    return Topology(cpus=frozen_map(cpus), online=frozenset(cpus), nodes=frozen_map({0: NumaNode(0, frozenset(cpus))}),
                    isolation=IsolationParams())  # fmt: skip


def vector(irq: int, chip: str = "PCI-MSIX-0000:01:00.0 1-edge", counts: dict[int, int] | None = None,
           generation: int = 1) -> InterruptRow:  # fmt: skip
    return InterruptRow(key=str(irq), kind=KIND_DEVICE, name=f"nvme0q{irq}", chip=chip,
                        counts=frozen_map(counts or {}), generation=generation)  # fmt: skip


def spread_reading(rows, entries, previous: Host | None = None, cpus: int = 8, read_only: bool = False) -> Host:
    """A HostReader's reading with the CPUs the spreads must cover; ``read_only``: the kernel marks managed IRQs."""
    results = {
        "topology": topology(cpus),
        "interrupts": interrupts(rows),
        "irqs": Irqs(irqs=frozen_map({entry.irq: entry for entry in entries}), read_only_modes_seen=read_only),
    }
    store = previous.store if previous is not None else Store()
    return Host(paths=Paths.from_root("/nonexistent"), results=frozen_map(results), statuses=frozen_map({}),
                previous=previous, generations=next_generations(previous), store=store)  # fmt: skip


def answers(host: Host) -> dict[int, bool]:
    managed = managed_irqs(host)
    assert managed is not None
    return {irq: managed.managed(irq) for irq in range(40)}


# An nvme device: an admin vector on CPUs 0-7, then four queues spread over the eight CPUs; and a NIC's two vectors.
SPREAD_ROWS = (
    vector(20),
    *(vector(irq) for irq in range(21, 25)),
    vector(30, chip="PCI-MSIX-0000:02:00.0 1-edge"),
    vector(31, chip="PCI-MSIX-0000:02:00.0 2-edge"),
)
SPREAD_ENTRIES = (
    entry(20, *range(8)),
    entry(21, 0, 1), entry(22, 2, 3), entry(23, 4, 5), entry(24, 6, 7),
    entry(30, 0, 1, 2), entry(31, 3, 4),
)  # fmt: skip


def test_a_reading_whose_rows_only_counted_reuses_the_spread():
    first = spread_reading(SPREAD_ROWS, SPREAD_ENTRIES)
    before = managed_irqs(first)
    counted = (*SPREAD_ROWS[:2], vector(22, counts={2: 9}, generation=2), *SPREAD_ROWS[3:])
    reread = (*SPREAD_ENTRIES[:3], entry(23, 4, 5, generation=2), *SPREAD_ENTRIES[4:])  # same mask, read again
    second = spread_reading(counted, reread, previous=first)

    after = managed_irqs(second)

    assert before is not None and after is not None
    assert after._spread is before._spread  # reused, not worked out again
    assert answers(second) == answers(from_scratch(second))
    assert [irq for irq, managed in answers(second).items() if managed] == [21, 22, 23, 24]


@pytest.mark.parametrize(
    ("rows", "entries", "cpus", "spread"),
    [
        pytest.param(SPREAD_ROWS, (*SPREAD_ENTRIES[:2], entry(22, 1, 2, 3, generation=2), *SPREAD_ENTRIES[3:]), 8,
                     [], id="a-mask-moved"),
        pytest.param((*SPREAD_ROWS[:3], vector(23, chip="PCI-MSIX-0000:03:00.0 1-edge", generation=2),
                      *SPREAD_ROWS[4:]), SPREAD_ENTRIES, 8, [], id="a-vector-on-another-device"),
        pytest.param((*SPREAD_ROWS[:3], vector(23, chip="PCI-MSIX-0000:03:00.0 1-edge", generation=0),
                      *SPREAD_ROWS[4:]), SPREAD_ENTRIES, 8, [], id="another-chip-unknown-generation"),
        pytest.param(SPREAD_ROWS[:4], SPREAD_ENTRIES, 8, [], id="a-vector-went"),
        pytest.param((SPREAD_ROWS[1], SPREAD_ROWS[0], *SPREAD_ROWS[2:]), SPREAD_ENTRIES, 8, [21, 22, 23, 24],
                     id="reordered"),
        pytest.param(SPREAD_ROWS, SPREAD_ENTRIES[:4] + SPREAD_ENTRIES[5:], 8, [], id="an-entry-went"),
        pytest.param(SPREAD_ROWS, SPREAD_ENTRIES, 10, [], id="cpus-came"),
        pytest.param(SPREAD_ROWS, SPREAD_ENTRIES, 5, [21, 22, 23, 24, 30, 31], id="cpus-went"),
        pytest.param(SPREAD_ROWS, (*SPREAD_ENTRIES[:1], replace(SPREAD_ENTRIES[1], affinity=None, generation=2),
                                   *SPREAD_ENTRIES[2:]), 8, [], id="a-mask-unreadable"),
    ],
)
def test_a_reading_whose_chips_masks_or_cpus_changed_works_the_spread_out_again(rows, entries, cpus, spread):
    first = spread_reading(SPREAD_ROWS, SPREAD_ENTRIES)
    assert [irq for irq, managed in answers(first).items() if managed] == [21, 22, 23, 24]
    second = spread_reading(rows, entries, previous=first, cpus=cpus)

    assert answers(second) == answers(from_scratch(second))
    assert [irq for irq, managed in answers(second).items() if managed] == spread


def test_read_only_modes_leave_the_spread_out_and_a_later_reading_works_it_out():
    first = spread_reading(SPREAD_ROWS, SPREAD_ENTRIES, read_only=True)
    second = spread_reading(SPREAD_ROWS, SPREAD_ENTRIES, previous=first)

    assert not any(answers(first).values())
    assert answers(second) == answers(from_scratch(second))
    assert any(answers(second).values())


@pytest.mark.parametrize("seed", range(20))
def test_the_spread_over_a_chain_of_readings_is_what_working_it_out_anew_gives(seed):
    rng = random.Random(seed)
    chips = [f"PCI-MSIX-0000:0{device}:00.0 1-edge" for device in range(3)] + ["IO-APIC 2-edge"]
    rows = [vector(irq, chip=rng.choice(chips)) for irq in range(20, 32)]
    entries = {irq: entry(irq, *rng.sample(range(8), rng.randint(1, 4))) for irq in range(20, 32)}
    host = spread_reading(rows, entries.values())
    for generation in range(2, 12):
        for _ in range(rng.randint(0, 3)):
            index = rng.randrange(len(rows))
            what = rng.random()
            if what < 0.4:  # counts moved: another generation, the same row otherwise
                rows[index] = replace(rows[index], counts=frozen_map({2: generation}), generation=generation)
            elif what < 0.6:
                rows[index] = replace(rows[index], chip=rng.choice(chips), generation=generation)
            else:
                irq = rows[index].irq
                assert irq is not None
                same = list(entries[irq].affinity or ())  # read again, the same mask
                cpus = rng.sample(range(8), rng.randint(1, 2)) if rng.random() < 0.8 else same
                entries[irq] = entry(irq, *cpus, generation=generation)
        host = spread_reading(list(rows), entries.values(), previous=host, cpus=rng.choice((8, 8, 8, 6)))
        assert answers(host) == answers(from_scratch(host))


# ------------------------------------------------------------------------------------------------ deltas
def deltas_by_key(previous: Interrupts, current: Interrupts, cpus, kinds) -> list:
    """The interrupt deltas compared row by row through the previous reading's rows by key: the oracle."""
    watched = cpus & current.watched & previous.watched
    if not watched:
        return []
    before = previous.by_key()
    found = []
    for current_row in current.rows:
        if current_row.kind not in kinds or not current_row.counts:
            continue
        old = before.get(current_row.key)
        if old is not None and old.name != current_row.name:
            old = None
        changed = {}
        for cpu, count in current_row.counts.items():
            prior = old.count(cpu) if old is not None else 0
            delta = count - prior if count >= prior else count
            if cpu in watched and delta:
                changed[cpu] = delta
        if changed:
            found.append((current_row, changed))
    return found


def next_rows(rng: random.Random, rows: list[InterruptRow], step: int) -> list[InterruptRow]:
    """A later reading: most rows handed out again, some counted more, restarted (lower), renamed, came or went (the
    rows this reading makes have its generation)."""
    result = []
    generation = step + 2
    for old in rows:
        fate = rng.random()
        if fate < 0.6:
            result.append(old)  # handed out again
        elif fate < 0.75:
            counts = {cpu: count + rng.randint(0, 50) for cpu, count in old.counts.items()}
            counts.update({cpu: rng.randint(1, 9) for cpu in WATCHED if rng.random() < 0.2})
            result.append(replace(old, counts=frozen_map(counts), generation=generation))
        elif fate < 0.8:
            restarted = frozen_map({cpu: 1 for cpu in old.counts})
            result.append(replace(old, counts=restarted, generation=generation))
        elif fate < 0.85:
            result.append(replace(old, name=old.name + "-reused", generation=generation))  # another device
        elif fate < 0.9:
            continue  # gone
        else:
            result.append(old)
            result.append(row(f"new{step}-{len(result)}", rng.choice(INTERRUPT_KINDS), {2: rng.randint(1, 9)},
                              generation=generation))  # fmt: skip
    if rng.random() < 0.2:
        rng.shuffle(result)
    return result


@pytest.mark.parametrize("seed", range(30))
def test_deltas_are_what_comparing_every_row_by_key_gives(seed):
    rng = random.Random(seed)
    rows = [
        row(str(index), rng.choice(INTERRUPT_KINDS), {cpu: rng.randint(1, 1000) for cpu in CPUS if rng.random() < 0.4})
        for index in range(rng.randint(0, 30))
    ]
    previous = interrupts(rows)
    for step in range(4):
        rows = next_rows(rng, rows, step)
        current = interrupts(rows, read_at=2.0 + step)
        for cpus, kinds in ((WATCHED, (KIND_DEVICE,)), (frozenset({2, 7}), (KIND_LOCAL_TIMER, KIND_IPI))):
            assert list(deltas(previous, current, cpus, kinds)) == deltas_by_key(previous, current, cpus, kinds)
        previous = current


def test_rows_handed_out_again_count_nothing():
    rows = [row("1", counts={2: 5, 3: 7}), row("LOC", KIND_LOCAL_TIMER, {2: 100})]
    moved = row("LOC", KIND_LOCAL_TIMER, {2: 130}, generation=2)

    assert list(deltas(interrupts(rows), interrupts(rows), WATCHED, INTERRUPT_KINDS)) == []
    assert list(deltas(interrupts(rows), interrupts([rows[0], moved]), WATCHED, INTERRUPT_KINDS)) == [
        (moved, {2: 30})
    ]
