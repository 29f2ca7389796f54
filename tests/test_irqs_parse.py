"""The pure parser of one IRQ's affinity files, ``parse_irq(irq, affinity, effective, writable, previous)``: real
kernels' files, bad and odd input, and what a previous parse may change (only which entry object is handed back)."""

from __future__ import annotations

import pytest
from corpus import REALKERNEL_PREFIX, corpus_root, tree_names
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch.errors import MalformedFile
from numawatch.paths import Paths
from numawatch.sources import irqs
from numawatch.sources.irqs import SeenIrq, parse_irq

REAL_KERNELS = sorted(name for name in tree_names() if name.startswith(REALKERNEL_PREFIX))


def real_irq_files(name: str) -> list[tuple[int, bytes, bytes | None]]:
    """Every IRQ directory of a real kernel's capture: its number and its two files' bytes (None: absent)."""
    root = corpus_root(name) / "proc/irq"
    found = []
    for directory in sorted(root.iterdir()):
        if directory.name.isdigit():
            effective = directory / "effective_affinity_list"
            found.append(
                (
                    int(directory.name),
                    (directory / "smp_affinity_list").read_bytes(),
                    effective.read_bytes() if effective.exists() else None,
                )
            )
    return found


@pytest.mark.parametrize("name", REAL_KERNELS)
def test_a_real_kernels_irq_files_parse_as_the_reader_reads_them(name):
    host = irqs.read(Paths.from_root(corpus_root(name)))
    files = real_irq_files(name)
    assert files

    for irq, affinity, effective in files:
        parsed = parse_irq(irq, affinity, effective, host.irqs[irq].writable)
        assert parsed.entry == host.irqs[irq]
        assert parsed.entry.affinity  # every IRQ may go somewhere
        assert parse_irq(irq, affinity, effective, parsed.entry.writable, parsed) is parsed


def test_the_entry_holds_both_lists_and_the_mode():
    parsed = parse_irq(30, b"0-3,8\n", b"2\n", False, generation=4)

    assert isinstance(parsed, SeenIrq)
    assert (parsed.entry.irq, parsed.entry.affinity, parsed.entry.effective) == (30, {0, 1, 2, 3, 8}, {2})
    assert (parsed.entry.writable, parsed.entry.generation) == (False, 4)
    assert (parsed.affinity, parsed.effective) == (b"0-3,8\n", b"2\n")


@pytest.mark.parametrize(
    ("affinity", "effective", "expected"),
    [
        (b"0-383\n", b"\n", ({*range(384)}, set())),  # a chained IRQ (the cascade): an empty effective line
        (b"5\n", None, ({5}, None)),  # a kernel without GENERIC_IRQ_EFFECTIVE_AFF_MASK: no effective file
        (b"0,2,4,6", b"6", ({0, 2, 4, 6}, {6})),  # no trailing newline
    ],
    ids=["empty-effective", "no-effective-file", "no-newline"],
)
def test_odd_but_valid_files(affinity, effective, expected):
    entry = parse_irq(7, affinity, effective, None).entry

    assert (entry.affinity, entry.effective) == expected


@pytest.mark.parametrize(
    ("affinity", "effective", "file"),
    [(b"3-x\n", b"3\n", "smp_affinity_list"), (b"3\n", b"\xff\n", "effective_affinity_list"), (b"5-2", None, "smp")],
    ids=["letters", "binary", "reversed-range"],
)
def test_a_malformed_list_is_refused_naming_the_file(affinity, effective, file):
    previous = parse_irq(9, b"1\n", b"1\n", True)

    for before in (None, previous):
        with pytest.raises(MalformedFile, match=f"/host/proc/irq/9/{file}") as error:
            parse_irq(9, affinity, effective, True, before, directory="/host/proc/irq/9")
        assert "\n" not in str(error.value)


def test_an_unchanged_irq_is_the_previous_entry_and_a_moved_one_is_new_with_this_generation():
    first = parse_irq(30, b"0-3\n", b"1\n", True, generation=1)

    same = parse_irq(30, b"0-3\n", b"1\n", True, first, generation=2)
    moved = parse_irq(30, b"0-3\n", b"2\n", True, first, generation=2)

    assert same is first and same.entry.generation == 1
    assert (moved.entry.effective, moved.entry.generation) == ({2}, 2)
    assert moved == parse_irq(30, b"0-3\n", b"2\n", True)


lists = st.sampled_from([b"0-3\n", b"1\n", b"\n", b"0,2\n", b"0-383\n", b"7"])


@settings(max_examples=200, deadline=None)
@given(
    affinity=lists,
    effective=st.one_of(st.none(), lists),
    writable=st.sampled_from([True, False, None]),
    other=st.tuples(st.integers(0, 3), lists, st.one_of(st.none(), lists), st.sampled_from([True, False, None])),
)
def test_a_previous_parse_of_anything_changes_nothing_but_which_entry_is_handed_back(
    affinity, effective, writable, other
):
    fresh = parse_irq(3, affinity, effective, writable)
    previous = parse_irq(*other, generation=1)

    after = parse_irq(3, affinity, effective, writable, previous, generation=2)

    assert after == fresh and after.entry == fresh.entry
    assert (after is previous) == (other == (3, affinity, effective, writable))  # another IRQ's files: never reused
