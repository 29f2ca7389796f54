"""The CPU list / mask parser and formatter (numawatch.cpuset)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from numawatch.cpuset import EMPTY, MAX_CPU_ID, CPUListError, format_cpulist, parse_cpulist, parse_cpumask

cpu_sets = st.frozensets(st.integers(min_value=0, max_value=1023), max_size=200)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}),
        ("5", {5}),
        ("0-3\n", {0, 1, 2, 3}),
        (" 2-3 , 7 ", {2, 3, 7}),
        ("3,1,2", {1, 2, 3}),
        ("0-3,2-5", {0, 1, 2, 3, 4, 5}),
        ("4-4", {4}),
        ("0-15:2/4", {0, 1, 4, 5, 8, 9, 12, 13}),
        ("0-7:1/1", set(range(8))),
        (f"{MAX_CPU_ID}", {MAX_CPU_ID}),
    ],
)
def test_parse_cpulist_reads_kernel_lists(text, expected):
    assert frozenset(expected) == parse_cpulist(text)


@pytest.mark.parametrize("text", ["", "\n", "   "])
def test_parse_cpulist_empty_text_is_the_empty_set(text):
    assert parse_cpulist(text) == EMPTY


@pytest.mark.parametrize(
    "text",
    [
        "a",
        "1,,2",
        "1,",
        ",1",
        "3-1",
        "-1",
        "1-",
        "1-2-3",
        "0x3",
        "+1",
        "1_0",
        "١",  # an Arabic-Indic digit: int() would take it
        "0-3:",
        "0-3:2",
        "0-3:0/4",
        "0-3:5/4",
        "0-3:a/b",
        f"0-{MAX_CPU_ID + 1}",
        "0-4294967295",
    ],
)
def test_parse_cpulist_rejects_malformed_lists(text):
    with pytest.raises(CPUListError):
        parse_cpulist(text)


def test_parse_cpulist_error_names_the_offending_element():
    with pytest.raises(CPUListError, match="'x'"):
        parse_cpulist("0-3,x")


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [
        ([], ""),
        ([0], "0"),
        ([0, 1], "0-1"),
        ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
        ([11, 10, 8, 3, 2, 1, 0], "0-3,8,10-11"),
        ([1, 1, 2], "1-2"),
        ([0, 2, 4], "0,2,4"),
    ],
)
def test_format_cpulist_collapses_runs_like_the_kernel(cpus, expected):
    assert expected == format_cpulist(cpus)


@given(cpu_sets)
def test_format_then_parse_is_identity(cpus):
    assert cpus == parse_cpulist(format_cpulist(cpus))


@given(cpu_sets)
def test_format_of_parse_is_the_canonical_form(cpus):
    """Any way of writing a set (shuffled, overlapping ranges, single CPUs) formats back to one canonical text."""
    canonical = format_cpulist(cpus)
    noisy = ",".join([str(cpu) for cpu in sorted(cpus, reverse=True)] + ([canonical] if canonical else []))
    assert canonical == format_cpulist(parse_cpulist(noisy))


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 40)), max_size=20))
def test_ranges_parse_to_their_union(ranges):
    text = ",".join(f"{lo}-{lo + width}" for lo, width in ranges)
    expected = frozenset(cpu for lo, width in ranges for cpu in range(lo, lo + width + 1))
    assert expected == parse_cpulist(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", set()),
        ("00000000,00000000", set()),
        ("f", {0, 1, 2, 3}),
        ("fff", set(range(12))),
        ("00d", {0, 2, 3}),
        ("c00\n", {10, 11}),
        ("ff,00000001", {0, 32, 33, 34, 35, 36, 37, 38, 39}),
        ("80000000,00000000", {63}),
        ("1,0", {32}),  # every group is one 32-bit word, even when it is written short
        ("FF", set(range(8))),
        ("", set()),
    ],
)
def test_parse_cpumask_reads_32_bit_groups_most_significant_first(text, expected):
    assert frozenset(expected) == parse_cpumask(text)


@pytest.mark.parametrize("text", ["g", "0x3", "f_f", ",ff", "ff,", "ff,,ff", "123456789", "ff ff", "-1"])
def test_parse_cpumask_rejects_malformed_masks(text):
    with pytest.raises(CPUListError):
        parse_cpumask(text)


def test_parse_cpumask_rejects_masks_wider_than_the_cpu_cap():
    with pytest.raises(CPUListError, match="longer than"):
        parse_cpumask(",".join(["ffffffff"] * ((MAX_CPU_ID + 1) // 32 + 1)))


@given(cpu_sets)
def test_parse_cpumask_agrees_with_parse_cpulist(cpus):
    value = sum(1 << cpu for cpu in cpus)
    words = [(value >> shift) & 0xFFFFFFFF for shift in range(0, 1024, 32)]
    text = ",".join(f"{word:08x}" for word in reversed(words))
    assert cpus == parse_cpumask(text)
