"""The pure /proc/interrupts parser, ``parse_reading(data, watched, previous)``: real files whole and in blocks,
what a previous parse may and may not change (nothing but which objects are handed back), and bad input with one."""

from __future__ import annotations

import pytest
from corpus import PEER_PROCFS, REALKERNEL_PREFIX, corpus_root, tree_names
from fakehost.kernel import FakeIrq, format_interrupts
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch.errors import MalformedFile
from numawatch.sources.interrupts import InterruptsParse, Remembered, parse_interrupts, parse_reading

REAL_KERNELS = sorted(name for name in tree_names() if name.startswith(REALKERNEL_PREFIX))


def real_file(name: str) -> bytes:
    return (corpus_root(name) / "proc/interrupts").read_bytes()


def in_blocks(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


def remembered(data: bytes, watched, generation: int = 1) -> Remembered:
    """What a first parse of ``data`` leaves for the next one."""
    return parse_reading(data, watched, Remembered(), generation=generation).remembered


def rendered(cpus, devices: dict[int, dict[int, int]], loc: dict[int, int], *, names: str = "q") -> bytes:
    rows = [FakeIrq(irq, f"{names}{irq}", frozenset(), counts=counts) for irq, counts in devices.items()]
    return format_interrupts(cpus, rows, {"LOC": loc, "RES": {}}).encode()


# --------------------------------------------------------------------------------------------------- real files
@pytest.mark.parametrize("name", REAL_KERNELS)
def test_a_real_kernels_file_parses_the_same_whole_in_blocks_and_after_any_other_reading(name):
    data = real_file(name)
    whole = parse_reading(data, range(0, 64, 3))

    assert whole.rows and whole.cpus
    for size in (1, 13, 4096):
        assert parse_reading(in_blocks(data, size), range(0, 64, 3)) == whole
    for other in REAL_KERNELS:  # another kernel's file: other CPUs online, other IRQs
        assert parse_reading(data, range(0, 64, 3), remembered(real_file(other), range(0, 64, 2))) == whole
    assert parse_reading(data, range(0, 64, 3), remembered(data, range(0, 64, 3))) == whole


def test_procfs_fixture_parses_with_its_counts_and_names():
    data = (corpus_root(PEER_PROCFS) / "proc/interrupts").read_bytes()

    parsed = parse_reading(data, {0, 1, 2, 3})

    rows = {row.key: row for row in parsed.rows}
    assert parsed.cpus == (0, 1, 2, 3)
    assert dict(rows["LOC"].counts) == {0: 10196, 1: 7429, 2: 8542, 3: 8229}
    assert rows["LOC"].name == "Local timer interrupts"
    assert "ERR" not in rows and "MIS" not in rows
    assert parse_reading(data, {0, 1, 2, 3}, remembered(data, {0, 1, 2, 3})) == parsed


def test_a_reading_from_a_real_file_hands_its_rows_back_when_nothing_changed(realkernel_root):
    data = (realkernel_root / "proc/interrupts").read_bytes()
    first = parse_reading(data, {8, 10}, Remembered(), generation=1)

    again = parse_reading(data, {8, 10}, first.remembered, generation=2)

    assert again == first
    assert all(a is b for a, b in zip(first.rows, again.rows, strict=True))
    assert {row.generation for row in again.rows} == {1}


# --------------------------------------------------------------------------------------------------- previous
def test_a_parse_is_one_value_with_or_without_previous_and_remembered_is_not_part_of_it():
    data = rendered([0, 1, 2, 3], {40: {2: 5}, 41: {}}, {2: 100, 3: 7})

    fresh = parse_reading(data, {2, 3})
    again = parse_reading(data, {2, 3}, remembered(data, {2, 3}))

    assert isinstance(fresh, InterruptsParse)
    assert fresh == again and fresh.rows == again.rows
    assert fresh.remembered.rows == {}  # a one-off parse keeps nothing of its rows
    assert set(again.remembered.rows) == {b" 40", b" 41", b"LOC", b"RES"}
    assert fresh.interrupts(5.0) == parse_interrupts(data, {2, 3}, read_at=5.0)


def test_unchanged_rows_are_the_previous_objects_and_changed_ones_are_new_with_this_generation():
    before = rendered([0, 1, 2, 3], {40: {2: 5}, 41: {1: 9}, 42: {}}, {2: 100, 3: 7})
    after = rendered([0, 1, 2, 3], {40: {2: 6}, 41: {1: 10}, 42: {}}, {2: 100, 3: 8})  # 41 moved off the watched CPUs
    first = parse_reading(before, {2, 3}, Remembered(), generation=1)

    second = parse_reading(after, {2, 3}, first.remembered, generation=2)

    old, new = ({row.key: row for row in parse.rows} for parse in (first, second))
    assert [key for key in old if new[key] is old[key]] == ["41", "42", "RES"]
    assert (dict(new["40"].counts), new["40"].generation) == ({2: 6}, 2)
    assert (dict(new["LOC"].counts), new["LOC"].generation) == ({2: 100, 3: 8}, 2)
    assert new["LOC"].name == old["LOC"].name == "Local timer interrupts"
    assert second == parse_reading(after, {2, 3})


def test_a_parse_leaves_the_previous_it_was_handed_as_it_was():
    before = rendered([0, 1, 2, 3], {40: {2: 5}}, {2: 100})
    first = remembered(before, {2, 3})
    kept = dict(first.rows)

    parse_reading(rendered([0, 1, 2, 3], {40: {2: 6}, 43: {3: 1}}, {2: 101}), {2, 3}, first)

    assert dict(first.rows) == kept


def test_a_row_whose_text_is_refused_keeps_its_problem_when_only_its_counts_move():
    """The row made again from the previous one's name and chip (its text unchanged) is the row a parse without
    a previous makes: its problem included."""

    def file(count: int) -> bytes:
        return rendered([0, 1, 2, 3], {40: {2: count}}, {2: 100}, names="bad\x1bname")

    first = parse_reading(file(1), {2, 3}, Remembered())
    assert first.rows[0].problem

    second = parse_reading(file(2), {2, 3}, first.remembered)

    assert second == parse_reading(file(2), {2, 3})
    assert second.rows[0].problem == first.rows[0].problem and dict(second.rows[0].counts) == {2: 2}


def test_a_row_widening_past_its_cell_after_a_previous_parse_is_split_the_slow_way_and_read():
    before = rendered([0, 1, 2, 3], {40: {0: 10**9 + 1, 2: 3}}, {2: 1})
    after = rendered([0, 1, 2, 3], {40: {0: 10**11, 2: 3}}, {2: 1})  # shifts the rest of row 40

    second = parse_reading(after, {2, 3}, remembered(before, {2, 3}))

    assert second == parse_reading(after, {2, 3})
    assert dict(second.rows[0].counts) == {2: 3}
    assert second.remembered.rows[b" 40"].digest is None  # split the slow way: searched again next time


def test_arm64_rows_without_the_space_after_the_colon_read_the_same_after_a_previous_parse():
    def file(count: int) -> bytes:
        return (
            "           CPU0       CPU1\n"
            f" 11:       5000 {count:10d}     GICv3  27 Level     arch_timer\n"
            "IPI0:        12         34       Rescheduling interrupts\n"
            "Err:          0\n"
        ).encode()

    first = parse_reading(file(4000), {0, 1}, Remembered())
    second = parse_reading(file(4001), {0, 1}, first.remembered)

    assert second == parse_reading(file(4001), {0, 1})
    assert [dict(row.counts) for row in second.rows] == [{0: 5000, 1: 4001}, {0: 12, 1: 34}]
    assert second.rows[1] is first.rows[1]


# --------------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda data: data.replace(b"         7 ", b"        -7 ", 1), r"row LOC: bad count b'-7'"),
        (lambda data: data + data.split(b"\n")[1] + b"\n", "row 40 appears twice"),
        (lambda data: data.replace(b" 41:", b"4 1:"), "bad row label"),
        (lambda data: data.replace(b" 41:", b" 41 "), "line without ':'"),
        (lambda data: data.replace(b"CPU3", b"CPUx"), "bad header column"),
    ],
    ids=["negative-count", "repeated-row", "label", "no-colon", "header"],
)
def test_bad_input_fails_the_same_with_a_previous_parse_naming_the_file_and_what(change, message):
    good = rendered([0, 1, 2, 3], {40: {2: 5}, 41: {}}, {0: 7, 1: 7, 2: 7, 3: 7})
    bad = change(good)
    assert bad != good

    for previous in (None, Remembered(), remembered(good, {0, 1, 2, 3})):
        for blocks in (bad, in_blocks(bad, 10)):
            with pytest.raises(MalformedFile, match=message) as error:
                parse_reading(blocks, {0, 1, 2, 3}, previous, path="/host/proc/interrupts")
            assert str(error.value).startswith("/host/proc/interrupts: ")


def test_a_line_longer_than_this_file_allows_is_refused_in_blocks():
    with pytest.raises(MalformedFile, match="a line longer than the"):
        parse_reading(in_blocks(b"CPU0" + b" " * (1 << 21), 1 << 16))


# --------------------------------------------------------------------------------------------------- property
counts = st.one_of(st.just(0), st.integers(1, 10**6), st.integers(10**9, 10**11))
files = st.builds(
    lambda cpus, devices, loc, names: rendered(cpus, devices, dict(zip(cpus, loc, strict=False)), names=names),
    st.lists(st.integers(0, 40), min_size=1, max_size=10, unique=True),
    st.dictionaries(st.integers(20, 60), st.dictionaries(st.integers(0, 40), counts, max_size=4), max_size=6),
    st.lists(counts, max_size=10),
    st.sampled_from(["q", "nic", "bad\x07"]),
)


@settings(max_examples=150, deadline=None)
@given(data=files, other=files, watched=st.sets(st.integers(0, 40)), other_watched=st.sets(st.integers(0, 40)))
@pytest.mark.slow
def test_a_previous_parse_of_anything_changes_nothing_but_which_objects_are_handed_back(
    data, other, watched, other_watched
):
    """Whatever the previous parse read (other CPUs online, rows added and removed, other watched CPUs, counts
    widening, names changed), a parse with it equals one without it, row by row and count by count; parsing the
    same data twice hands the rows back as the same objects."""
    fresh = parse_reading(data, watched)
    after_other = parse_reading(data, watched, remembered(other, other_watched))
    twice = parse_reading(data, watched, after_other.remembered)

    assert after_other == fresh and twice == fresh
    assert [list(row.counts.items()) for row in after_other.rows] == [list(row.counts.items()) for row in fresh.rows]
    assert all(a is b for a, b in zip(after_other.rows, twice.rows, strict=True))
