"""A big row family written with a ``LineCache`` comes in chunks of rows (exposition.write_segments): whatever rows
come, go or change, the segments joined are byte for byte the uncached write, a chunk whose rows are the last
write's is the very same bytes object, and its gzip body (gzipbody.SegmentedGzip) decompresses to that body."""

from __future__ import annotations

import gzip
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch.metrics import exposition, gzipbody

LABELS = ("pod", "container", "numa_node")
# Small chunks, so that a family of a few hundred rows has dozens of them (the real size is about 8 KB).
CHUNK_BYTES = 400


def family(rows: list[tuple[object, ...]], counter: bool = False) -> exposition.GaugeRows:
    kind = exposition.CounterRows if counter else exposition.GaugeRows
    built = kind("numawatch_chunky", "A big row family.", LABELS)
    built.rows.extend(rows)
    return built


def pod_rows(serial: int, containers: int = 2, value: float = 1) -> list[tuple[object, ...]]:
    return [(f"pod-{serial}", f"c{index}", str(node), value) for index in range(containers) for node in (0, 1)]


def pods(count: int) -> list[tuple[object, ...]]:
    return [row for serial in range(count) for row in pod_rows(serial, value=serial)]


def write(rows, cache, openmetrics=False, counter=False) -> list[bytes]:
    segments = exposition.write_segments([family(rows, counter)], cache, openmetrics=openmetrics)
    assert b"".join(segments) == exposition.write([family(rows, counter)], openmetrics=openmetrics)
    return segments


def new_segments(before: list[bytes], after: list[bytes]) -> list[bytes]:
    """The segments of ``after`` that are not objects of ``before`` (with the two swapped: those that are gone)."""
    known = {id(segment) for segment in before}
    return [segment for segment in after if id(segment) not in known]


@mock.patch.object(exposition, "CHUNK_BYTES", CHUNK_BYTES)
def test_an_unchanged_big_family_is_the_same_objects_and_is_cut_in_chunks():
    cache = exposition.LineCache()
    first = write(pods(100), cache)
    again = write(pods(100), cache)

    assert len(first) > 20  # the header and many chunks
    assert first[0].startswith(b"# HELP numawatch_chunky ") and first[0].count(b"\n") == 2
    assert all(segment.endswith(b"\n") for segment in first)
    assert len(again) == len(first) and all(map(lambda a, b: a is b, again, first))


@mock.patch.object(exposition, "CHUNK_BYTES", CHUNK_BYTES)
def test_a_small_family_stays_one_segment():
    cache = exposition.LineCache()
    segments = write(pods(2), cache)

    assert len(segments) == 1


@mock.patch.object(exposition, "CHUNK_BYTES", CHUNK_BYTES)
def test_a_value_changed_in_the_middle_writes_only_its_chunk_again():
    cache = exposition.LineCache()
    rows = pods(100)
    before = write(rows, cache)
    rows[200] = (*rows[200][:-1], 12345)

    after = write(rows, cache)

    changed = new_segments(before, after)
    assert len(changed) == 1 and b'pod="pod-50"' in changed[0] and b"12345" in changed[0]
    assert after[0] is before[0]  # the header too


@mock.patch.object(exposition, "CHUNK_BYTES", CHUNK_BYTES)
def test_a_pod_coming_or_going_in_the_middle_moves_no_other_chunk():
    cache = exposition.LineCache()
    rows = pods(100)
    before = write(rows, cache)

    arrived = rows[:200] + pod_rows(1000) + rows[200:]  # a pod's four rows between pod-49 and pod-50
    with_pod = write(arrived, cache)
    gone = arrived[:100] + arrived[104:]  # pod-25 goes
    without = write(gone, cache)

    # The rows that came land in one chunk of the last write, which is written again (cut after each of them that
    # is a boundary); the rows that went leave what is left of the chunks they were in as one new chunk at most.
    assert len(new_segments(with_pod, before)) <= 1
    assert any(b'pod="pod-1000"' in segment for segment in new_segments(before, with_pod))
    assert len(new_segments(with_pod, without)) <= 1
    # Everything away from the change is the very same objects: the chunks before it and after it.
    assert with_pod[:3] == before[:3] and all(map(lambda a, b: a is b, with_pod[-5:], before[-5:]))
    assert all(map(lambda a, b: a is b, without[-5:], with_pod[-5:]))


@mock.patch.object(exposition, "CHUNK_BYTES", CHUNK_BYTES)
def test_a_changed_chunk_reuses_its_unchanged_rows_lines():
    cache = exposition.LineCache()
    rows = [(*row[:-1], row[-1] + 0.5) for row in pods(100)]  # floats: each line formatted goes through format_value
    write(rows, cache)
    rows[200] = (*rows[200][:-1], 7.25)
    calls: list[object] = []
    real = exposition.format_value

    def counted(value):
        calls.append(value)
        return real(value)

    with mock.patch.object(exposition, "format_value", counted):
        segments = exposition.write_segments([family(rows)], cache)

    assert calls == [7.25]  # the row that changed, and no other row of its chunk
    assert b"".join(segments) == exposition.write([family(rows)])


@mock.patch.object(exposition, "CHUNK_BYTES", CHUNK_BYTES)
def test_only_the_rows_around_a_change_are_hashed_to_find_where_their_chunk_ends():
    cache = exposition.LineCache()
    rows = pods(100)
    write(rows, cache)
    rows[200] = (*rows[200][:-1], 7)
    hashed: list[object] = []

    def counted(value):
        hashed.append(value)
        return hash(value)

    with mock.patch.object(exposition, "hash", counted, create=True):
        segments = exposition.write_segments([family(rows)], cache)

    assert b"".join(segments) == exposition.write([family(rows)])
    # About ten rows a chunk here (400 bytes): the changed chunk's rows, not the 200 rows after it.
    assert 0 < len(hashed) < 100


@mock.patch.object(exposition, "CHUNK_BYTES", CHUNK_BYTES)
def test_an_unhashable_label_in_a_big_family_is_written_uncached():
    cache = exposition.LineCache()
    rows = pods(100)
    rows[10] = (["not", "hashable"], "c0", "0", 1)  # a bug elsewhere must not break the exposition

    first = write(rows, cache)
    second = write(rows, cache)

    assert len(first) == len(second) == 1 and second[0] is not first[0]


# ------------------------------------------------------------------------------------------------ random changes
# A change to the rows: ("value", at, value), ("insert", at, serial of a new pod), ("remove", at, how many rows).
CHANGES = st.lists(
    st.tuples(
        st.sampled_from(("value", "insert", "remove")),
        st.integers(min_value=0, max_value=10_000),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=6,
)
VALUES = st.one_of(
    st.integers(min_value=-(10**18), max_value=10**18),
    st.floats(allow_nan=False).filter(lambda number: number != 0 or str(number) == "0.0"),  # rows equal as values
    # print alike, but for 0 and -0.0 (LineCache's docstring)
)


def apply(rows: list[tuple[object, ...]], change, serial: int, value: object) -> int:
    """``change`` made to ``rows`` in place, never to the first row (whose line sets the chunks' size at the first
    write); the number of rows it touched (a chunk each, at most)."""
    kind, at, amount = change
    at = 1 + at % len(rows)
    if kind == "value" and at < len(rows):
        rows[at] = (*rows[at][:-1], value)
        return 1
    if kind == "insert":
        rows[at:at] = pod_rows(serial, containers=1 + amount % 2, value=value)
        return 2 + 2 * (amount % 2)
    if kind == "remove" and at < len(rows):
        gone = min(amount + 1, len(rows) - at)
        del rows[at : at + gone]
        return gone
    return 0


@settings(max_examples=120, deadline=None)
@given(
    start=st.integers(min_value=1, max_value=120),
    steps=st.lists(st.tuples(CHANGES, VALUES), min_size=1, max_size=8),
    openmetrics=st.booleans(),
    counter=st.booleans(),
)
def test_bodies_are_the_uncached_write_and_only_changed_rows_chunks_are_new(start, steps, openmetrics, counter):
    cache = exposition.LineCache()
    packer = gzipbody.SegmentedGzip(1)
    rows = pods(start)
    serial = 10_000
    with mock.patch.object(exposition, "CHUNK_BYTES", CHUNK_BYTES):
        before = write(rows, cache, openmetrics, counter)
        for changes, value in steps:
            touched = 0
            for change in changes:
                serial += 1
                touched += apply(rows, change, serial, value)
            after = write(rows, cache, openmetrics, counter)  # the uncached write's bytes (write asserts it)
            assert gzip.decompress(packer.compress(after)) == b"".join(after)
            # Where the chunks end depends on the rows alone: a cache that never saw the earlier rows cuts the same.
            fresh = exposition.write_segments([family(rows, counter)], exposition.LineCache(), openmetrics=openmetrics)
            assert list(map(len, after)) == list(map(len, fresh))
            if len(before) > 1 and len(after) > 1:  # chunked both times: each row touched is in one new chunk
                # (two where a boundary row came: the chunk it cut)
                assert len(new_segments(before, after)) <= 2 * touched
            before = after
