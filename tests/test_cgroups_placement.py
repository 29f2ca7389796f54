"""A container's memory placement, ``parse_placement(data, parse, previous)``: real kernels' ``memory.numa_stat``
(v1 and v2), bad and odd files, and what a previous parse may change (only which mapping is handed back)."""

from __future__ import annotations

import pytest
from corpus import REALKERNEL_PREFIX, corpus_root, tree_names
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch.sources.cgroups import NumaPlacement, parse_numa_stat_v1, parse_numa_stat_v2, parse_placement

REAL_KERNELS = sorted(name for name in tree_names() if name.startswith(REALKERNEL_PREFIX))


def real_numa_stats(name: str) -> list[tuple[bytes, object]]:
    """Every container's memory.numa_stat in a real kernel's capture, with the parser of its cgroup version."""
    root = corpus_root(name) / "sys/fs/cgroup"
    v1 = (root / "memory").is_dir()
    files = sorted((root / "memory" if v1 else root).rglob("memory.numa_stat"))
    return [(path.read_bytes(), parse_numa_stat_v1 if v1 else parse_numa_stat_v2) for path in files]


@pytest.mark.parametrize("name", REAL_KERNELS)
def test_a_real_kernels_files_parse_as_their_version_parses_them_and_come_back_unchanged(name):
    files = real_numa_stats(name)
    assert files

    for data, parse in files:
        placement = parse_placement(data, parse)
        assert isinstance(placement, NumaPlacement)
        assert placement.numa == parse(data) and placement.crc is not None
        assert parse_placement(data, parse, placement) is placement
        with pytest.raises(TypeError):
            placement.numa[0] = 1  # type: ignore[index]  # shared by snapshots: immutable


def test_memory_moved_to_another_node_is_a_new_mapping_and_moved_back_the_same_values():
    before = parse_placement(b"anon N0=4096 N1=0\nfile N0=0 N1=0\n", parse_numa_stat_v2)

    moved = parse_placement(b"anon N0=0 N1=4096\nfile N0=0 N1=0\n", parse_numa_stat_v2, before)
    back = parse_placement(b"anon N0=4096 N1=0\nfile N0=0 N1=0\n", parse_numa_stat_v2, moved)

    assert dict(moved.numa) == {0: 0, 1: 4096} and moved.numa is not before.numa
    assert back == before


def test_other_bytes_with_the_same_values_keep_the_previous_mapping():
    """A counter the placement does not sum moved (kernel_stack): other bytes, the same placement object."""
    before = parse_placement(b"anon N0=1 N1=2\nfile N0=3 N1=4\nkernel_stack N0=0 N1=0\n", parse_numa_stat_v2)

    after = parse_placement(b"anon N0=1 N1=2\nfile N0=3 N1=4\nkernel_stack N0=8192 N1=0\n", parse_numa_stat_v2, before)

    assert after.numa is before.numa and after.crc != before.crc


@pytest.mark.parametrize(
    ("data", "parse", "message"),
    [
        (b"file N0=1\n", parse_numa_stat_v2, "no 'anon' line"),
        (b"anon N0=x\nfile N0=1\n", parse_numa_stat_v2, "bad per-node field"),
        (b"total=5 N0=-5\n", parse_numa_stat_v1, "bad per-node field"),
        (b"hierarchical_total=5 N0=5\n", parse_numa_stat_v1, "no 'total=' line"),
    ],
    ids=["v2-no-anon", "v2-letters", "v1-negative", "v1-no-total"],
)
def test_a_malformed_file_is_refused_saying_what_with_or_without_a_previous_placement(data, parse, message):
    previous = parse_placement(b"anon N0=1\nfile N0=1\n", parse_numa_stat_v2)

    for before in (None, previous):
        with pytest.raises(ValueError, match=message):
            parse_placement(data, parse, before)


@pytest.mark.parametrize(
    ("data", "parse", "expected"),
    [
        (b"kernel N0=0\nanon N1=3 N0=4\nshmem N0=1\nfile N0=1 N1=1\n", parse_numa_stat_v2, {0: 5, 1: 4}),
        (b"anon N0=1 N2=2\nfile N0=10 N3=20\n", parse_numa_stat_v2, {0: 11, 2: 2, 3: 20}),
        (b"total=3 N0=1 N1=2\nfile=0 N0=0 N1=0\n", lambda data: parse_numa_stat_v1(data, 4096), {0: 4096, 1: 8192}),
    ],
    ids=["v2-keys-in-any-order", "v2-nodes-differing-between-lines", "v1-pages"],
)
def test_odd_but_valid_files(data, parse, expected):
    assert dict(parse_placement(data, parse).numa) == expected


lines = st.dictionaries(st.integers(0, 3), st.integers(0, 10**12), min_size=1, max_size=4)


def numa_stat(anon: dict[int, int], file: dict[int, int]) -> bytes:
    def line(key: str, values: dict[int, int]) -> str:
        return f"{key} " + " ".join(f"N{node}={value}" for node, value in sorted(values.items()))

    return f"{line('anon', anon)}\n{line('file', file)}\n".encode()


@settings(max_examples=150, deadline=None)
@given(data=st.tuples(lines, lines), other=st.tuples(lines, lines))
def test_a_previous_placement_of_anything_changes_nothing_but_which_mapping_is_handed_back(data, other):
    text, other_text = numa_stat(*data), numa_stat(*other)
    fresh = parse_placement(text, parse_numa_stat_v2)

    after = parse_placement(text, parse_numa_stat_v2, parse_placement(other_text, parse_numa_stat_v2))
    again = parse_placement(text, parse_numa_stat_v2, after)

    assert after == fresh and again is after
