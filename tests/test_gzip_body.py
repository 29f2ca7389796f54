"""The bodies serve keeps between evaluations: a family unchanged since the last write is its last bytes, and the gzip
body deflates only the parts that changed (metrics/gzipbody.py). Whatever changes, appears or goes away, the body is
byte for byte what a fresh ``exposition.write`` writes, and its gzip is one valid member that every reader
(Python's gzip and zlib, curl, a real HTTP scrape of ``numawatch serve``) decompresses to it.
tests/test_e2e_prometheus.py has a real Prometheus (Go's gzip reader) scrape it."""

from __future__ import annotations

import gzip
import operator
import random
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from unittest import mock

import pytest
from fakehost.reference import reference_node
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch import metrics
from numawatch.metrics import exposition, gzipbody
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from serving import numawatch_serve as serve

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


# ------------------------------------------------------------------------------------------------ random families
def random_families(rng: random.Random, shape: dict[str, int]) -> list[Metric]:
    """A random exposition over a stable pool of families: each family present or not, and its series' values,
    label values and count drawn anew with a small chance each, so that most families stay as they were."""
    families: list[Metric] = []
    values = [0, 1, 2, 0.5, 0.0, 1e6, 12345678901, float("nan"), float("inf"), True, False]
    for index in range(shape["families"]):
        if rng.random() < 0.1:
            continue  # this family is away in this evaluation
        size = shape.get(f"size{index}", 3 + index % 40)
        if rng.random() < 0.1:  # it grows or shrinks
            size = shape[f"size{index}"] = max(0, size + rng.randint(-3, 3))
        changing = rng.random() < 0.2
        kind = index % 5
        name = f"fam{index}"
        if kind in (0, 1):
            family: Metric = (exposition.GaugeRows if kind == 0 else exposition.CounterRows)(
                name, f"rows {index}", labels=("cpu", "what")
            )
            for series in range(size):
                # No -0.0 in rows: rows equal as values are one line (LineCache), tested in test_exposition.py.
                value = rng.choice(values) if changing else series
                family.rows.append((str(series), 'q"uote\\' if series % 7 == 3 else "x", value))
        elif kind == 2:
            family = GaugeMetricFamily(name, f"gauge {index}\nwith a newline", labels=["node", "check"])
            for series in range(size):
                value = rng.choice([*values, -0.0]) if changing else series % 3
                family.add_metric([f"n{series % 2}", f"c{series}"], value)
        elif kind == 3:
            family = CounterMetricFamily(name, f"counter {index}", labels=["device"], created=None)
            for series in range(size):
                family.add_metric([f"d{series}"], rng.choice(values[:8]) if changing else series * 10)
        else:
            family = InfoMetricFamily(name, f"info {index}", labels=["kernel"])
            for series in range(size):
                family.add_metric([f"k{series}"], {"version": "6.1" if not changing else rng.choice(("6.1", "6.8"))})
        families.append(family)
    return families


def decompressed(body: bytes) -> bytes:
    """``body`` through every reader at hand, each of which must give the same bytes."""
    plain = gzip.decompress(body)
    assert zlib.decompress(body, wbits=31) == plain
    reader = zlib.decompressobj(wbits=31)
    streamed = b"".join(reader.decompress(body[start : start + 997]) for start in range(0, len(body), 997))
    assert reader.eof and not reader.unused_data
    assert streamed + reader.flush() == plain
    return plain


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
@pytest.mark.parametrize("seed", range(4))
def test_bodies_and_their_gzip_are_a_fresh_write_as_families_change_appear_and_vanish(seed, openmetrics):
    rng = random.Random(seed)
    shape = {"families": 60}
    renderer = metrics.Renderer()
    for _ in range(25):
        built = random_families(rng, shape)
        fresh = exposition.write(built, openmetrics=openmetrics)

        segments = renderer.write_segments(built, openmetrics=openmetrics)
        body = b"".join(segments)
        packed = renderer.gzip(segments, body, openmetrics=openmetrics)

        assert body == fresh
        assert decompressed(packed) == fresh


def test_a_family_made_of_what_it_was_made_of_is_its_last_bytes_and_a_changed_one_is_written_again():
    cache = exposition.LineCache()

    def build(value: float) -> list[Metric]:
        rows = exposition.GaugeRows("rows", "help", labels=("cpu",))
        rows.rows.extend([("0", 1), ("1", 2)])
        samples = GaugeMetricFamily("samples", "help", labels=["a"])
        samples.add_metric(["x"], value)
        return [rows, samples]

    first = exposition.write_segments(build(1), cache)
    second = exposition.write_segments(build(1), cache)
    third = exposition.write_segments(build(2), cache)

    assert second[0] is first[0] and second[1] is first[1]  # not written again
    assert third[0] is first[0]
    assert third[1] != first[1] and third[1] == exposition.write(build(2)[1:])


def test_a_row_family_reused_whole_keeps_its_lines_for_the_next_change():
    cache = exposition.LineCache()

    def build(*rows: tuple[str, float]) -> list[Metric]:
        family = exposition.GaugeRows("rows", "help", labels=("cpu",))
        family.rows.extend(rows)
        return [family]

    exposition.write(build(("0", 5), ("1", 7)), cache)
    line = cache.previous[("rows", ("cpu",))][("0", 5)]
    exposition.write(build(("0", 5), ("1", 7)), cache)  # unchanged: the whole family is reused
    exposition.write(build(("0", 5), ("1", 8)), cache)  # one row changed

    assert cache.previous[("rows", ("cpu",))][("0", 5)] is line
    assert set(cache.previous[("rows", ("cpu",))]) == {("0", 5), ("1", 8)}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ((("a",), 0), (("a",), -0.0)),  # equal values, printed "0.0" and "-0.0"
        ((("a",), -0.0), (("a",), 0)),
        (((1,), 2), ((True,), 2)),  # equal label values printed "1" and "True"
        (((1.0,), 2), ((1,), 2)),  # "1.0" and "1"
    ],
    ids=["zero-then-negative-zero", "negative-zero-then-zero", "int-then-bool-label", "float-then-int-label"],
)
@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
def test_samples_equal_as_values_but_printed_apart_are_written_again(before, after, openmetrics):
    cache = exposition.LineCache()

    def build(labels, value) -> list[Metric]:
        family = Metric("samples", "help", "gauge")
        family.samples = [Sample("samples", {"a": labels[0]}, value)]
        return [family]

    first = exposition.write(build(*before), cache, openmetrics=openmetrics)
    again = exposition.write(build(*after), cache, openmetrics=openmetrics)

    assert again == exposition.write(build(*after), openmetrics=openmetrics)
    assert again != first  # reusing the first write would have been wrong


def test_timestamps_equal_as_values_but_printed_apart_are_written_again():
    cache = exposition.LineCache()

    def build(stamp) -> list[Metric]:
        family = Metric("stamped", "help", "gauge")
        family.samples = [Sample("stamped", {}, 1, stamp)]
        return [family]

    first = exposition.write(build(1), cache, openmetrics=True)
    again = exposition.write(build(1.0), cache, openmetrics=True)

    assert again == exposition.write(build(1.0), openmetrics=True)
    assert again != first  # OpenMetrics writes a timestamp as given: reusing the first write would have been wrong


def test_one_cache_for_both_formats_never_hands_one_format_the_others_bytes():
    cache = exposition.LineCache()

    def build() -> list[Metric]:
        family = CounterMetricFamily("c", 'quote " in help', labels=["a"])
        family.add_metric(["x"], 3)
        return [family]

    text = exposition.write(build(), cache)
    openmetrics = exposition.write(build(), cache, openmetrics=True)

    assert text == exposition.write(build())
    assert openmetrics == exposition.write(build(), openmetrics=True)


def test_a_histogram_and_its_deferred_samples_are_reused_as_written():
    cache = exposition.LineCache()

    def build() -> list[Metric]:
        family = HistogramMetricFamily("h", "help", labels=["a"])
        family.add_metric(["x"], [("1.0", 2), ("+Inf", 3)], 4.5)
        return [family]

    for _ in range(3):
        assert exposition.write(build(), cache) == exposition.write(build())
        assert exposition.write(build(), cache, openmetrics=True) == exposition.write(build(), openmetrics=True)


# ------------------------------------------------------------------------------------------------ the gzip member
def test_parts_are_the_segments_in_order_and_a_big_segment_is_a_part_of_its_own():
    segments = [b"a" * 10, b"b" * 30, b"c" * 100, b"d" * 5, b"e" * 20, b"f"]

    parts = gzipbody.groups(segments, limit=32)

    assert [segment for part in parts for segment in part] == segments
    assert parts == [(segments[0], segments[1]), (segments[2],), (segments[3], segments[4], segments[5])]
    assert gzipbody.groups([], limit=32) == []


def deflations(monkeypatch) -> list[tuple[bytes, ...]]:
    """The parts gzipbody deflates from now on, in order."""
    deflated: list[tuple[bytes, ...]] = []
    real = gzipbody._deflate

    def counted(part, level):
        deflated.append(part)
        return real(part, level)

    monkeypatch.setattr(gzipbody, "_deflate", counted)
    return deflated


def test_only_the_parts_that_changed_are_deflated_again(monkeypatch):
    deflated = deflations(monkeypatch)
    packer = gzipbody.SegmentedGzip(1)
    big = [bytes([65 + index]) * gzipbody.GROUP_BYTES for index in range(4)]
    changed = b"changed\n" * 2

    first = packer.compress(big, b"".join(big))
    second = packer.compress(big, b"".join(big))
    third_segments = [big[0], changed, *big[2:]]
    third = packer.compress(third_segments, b"".join(third_segments))

    assert len(deflated) == 5  # four parts, then none, then the one that changed
    assert deflated[-1] == (changed,)
    assert decompressed(first) == decompressed(second) == b"".join(big)
    assert decompressed(third) == b"".join(third_segments)


def test_a_family_that_changes_every_time_is_deflated_alone_from_the_second_change_on(monkeypatch):
    """Small families share parts; one that changes at every evaluation (an evaluation's duration) must not make
    its neighbours' part deflated again at every evaluation."""
    deflated = deflations(monkeypatch)
    packer = gzipbody.SegmentedGzip(1)
    quarter = gzipbody.GROUP_BYTES // 4
    steady = [bytes([65 + index]) * quarter for index in range(8)]

    def body(tick: int) -> list[bytes]:
        return [*steady[:3], f"numawatch_evaluations_total {tick}\n".encode(), *steady[3:]]

    packed = []
    for tick in range(4):
        deflated.clear()
        segments = body(tick)
        packed.append((packer.compress(segments, b"".join(segments)), segments))

    assert deflated == [(b"numawatch_evaluations_total 3\n",)]  # the fourth: the changed family alone
    for member, segments in packed:
        assert decompressed(member) == b"".join(segments)


def test_a_changed_segment_in_the_middle_deflates_only_the_part_it_was_in(monkeypatch):
    """A new segment among known ones must not move the cut points of the known run after it: every later part is
    the last compression's, not deflated again."""
    deflated = deflations(monkeypatch)
    packer = gzipbody.SegmentedGzip(1)
    segments = [(b"family %d " % index) * 300 for index in range(60)]  # about 3 KB each, a dozen to a part
    packer.compress(segments)
    parts = list(deflated)
    deflated.clear()

    changed = [*segments[:25], b"family 25 changed\n" * 100, *segments[26:]]
    member = packer.compress(changed)

    (old,) = [part for part in parts if any(segment is segments[25] for segment in part)]
    again = [segment for part in deflated for segment in part]
    assert {id(segment) for segment in again} <= {id(segment) for segment in old} | {id(changed[25])}
    assert changed[25] in again
    assert decompressed(member) == b"".join(changed)


def test_a_part_is_reused_wherever_its_segments_come_back_in_a_row(monkeypatch):
    deflated = deflations(monkeypatch)
    packer = gzipbody.SegmentedGzip(1)
    big = [bytes([65 + index]) * gzipbody.GROUP_BYTES for index in range(4)]
    packer.compress(big)
    deflated.clear()

    moved = [b"new\n", big[2], big[3], b"another\n", big[0], big[1]]  # parts moved around, new ones between
    member = packer.compress(moved)

    assert deflated == [(b"new\n",), (b"another\n",)]
    assert decompressed(member) == b"".join(moved)


def counting(deflated: list[tuple[bytes, ...]]) -> Callable[[tuple[bytes, ...], int], bytes]:
    """gzipbody's ``_deflate``, noting each part it deflates in ``deflated``."""
    real = gzipbody._deflate

    def counted(part: tuple[bytes, ...], level: int) -> bytes:
        deflated.append(part)
        return real(part, level)

    return counted


# A change to a list of segments: ("new", at, size), ("remove", at, _), ("move", at, to).
SEGMENT_CHANGES = st.lists(
    st.tuples(
        st.sampled_from(("new", "remove", "move")),
        st.integers(min_value=0, max_value=1000),
        st.integers(min_value=2, max_value=40_000),
    ),
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(
    # Two bytes at least, as a family's lines are: CPython hands out one shared object for every 1-byte bytes.
    sizes=st.lists(st.integers(min_value=2, max_value=40_000), max_size=30),
    steps=st.lists(SEGMENT_CHANGES, min_size=1, max_size=6),
)
def test_every_part_that_comes_back_whole_is_reused_and_every_member_is_the_body(sizes, steps):
    serial = iter(range(1_000_000))

    def segment(size: int) -> bytes:
        return ((b"segment %d " % next(serial)) * (size // 10 + 1))[:size]

    packer = gzipbody.SegmentedGzip(1)
    segments = [segment(size) for size in sizes]
    assert decompressed(packer.compress(segments)) == b"".join(segments)
    for changes in steps:
        for kind, at, amount in changes:
            where = at % (len(segments) + 1)
            if kind == "new":
                segments.insert(where, segment(amount))
            elif segments and where < len(segments):
                gone = segments.pop(where)
                if kind == "move":
                    segments.insert(amount % (len(segments) + 1), gone)
        before = list(packer._previous)
        deflated: list[tuple[bytes, ...]] = []
        with mock.patch.object(gzipbody, "_deflate", counting(deflated)):
            member = packer.compress(segments)
        assert decompressed(member) == b"".join(segments)
        # Each part of the last compression whose segments are here again, in a row, is its deflated bytes again.
        at = {id(item): index for index, item in enumerate(segments)}
        for part, packed in before:
            first = at.get(id(part[0]))
            here = segments[first : first + len(part)] if first is not None else []
            if len(here) == len(part) and all(map(operator.is_, part, here)):
                assert (part, packed) in packer._previous
                assert not any(segment is part[0] for again in deflated for segment in again)
        # Parts hold the segments in order, each once.
        assert [item for part, _ in packer._previous for item in part] == segments


def test_known_segments_and_new_ones_never_share_a_part():
    old = [b"a" * 10, b"b" * 10, b"c" * 10]
    new = [b"x" * 10, b"y" * 10]
    segments = [old[0], new[0], old[1], old[2], new[1]]

    parts = gzipbody.groups(segments, limit=32, known={id(segment) for segment in old})

    assert parts == [(old[0],), (new[0],), (old[1], old[2]), (new[1],)]
    assert gzipbody.groups(segments, limit=32, known=set()) == gzipbody.groups(segments, limit=32)


def test_the_member_made_from_the_segments_alone_is_the_one_made_with_the_body_joined():
    segments = [b"# HELP x y\n" * 50, b"z" * 70_000, b"\xff\x00" * 10]
    joined = gzipbody.SegmentedGzip(1).compress(segments, b"".join(segments))

    assert gzipbody.SegmentedGzip(1).compress(segments) == joined


def test_an_empty_body_is_a_valid_empty_member():
    assert decompressed(gzipbody.SegmentedGzip(1).compress([], b"")) == b""


@pytest.mark.parametrize("level", [1, 6, 9])
def test_the_member_is_what_gzip_would_say_of_the_body(level):
    segments = [b"# HELP x y\n" * 50, b"z" * 70_000, b"\xff\x00" * 10]
    body = b"".join(segments)

    packed = gzipbody.SegmentedGzip(level).compress(segments, body)

    assert packed[:4] == b"\x1f\x8b\x08\x00"  # magic, deflate, no optional fields
    assert packed[-8:] == gzip.compress(body, compresslevel=level)[-8:]  # CRC-32 and length of the body
    assert decompressed(packed) == body


def test_concurrent_writes_and_gzips_of_two_evaluations_each_give_their_own_body():
    """A scrape writing an older evaluation's bodies races the sampler writing the newer one's (server.Bodies):
    every body and gzip must still be its own evaluation's."""
    renderer = metrics.Renderer()
    evaluations = [random_families(random.Random(seed), {"families": 40}) for seed in range(2)]
    expected = {
        (index, openmetrics): exposition.write(built, openmetrics=openmetrics)
        for index, built in enumerate(evaluations)
        for openmetrics in (False, True)
    }
    failures: list[str] = []

    def hammer(index: int, openmetrics: bool) -> None:
        for _ in range(15):
            segments = renderer.write_segments(evaluations[index], openmetrics=openmetrics)
            body = b"".join(segments)
            if body != expected[index, openmetrics]:
                failures.append(f"body of {index}")
            if gzip.decompress(renderer.gzip(segments, body, openmetrics=openmetrics)) != body:
                failures.append(f"gzip of {index}")

    threads = [
        threading.Thread(target=hammer, args=(index, openmetrics))
        for index in (0, 1)
        for openmetrics in (False, True)
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert not any(thread.is_alive() for thread in threads)
    assert failures == []


# ------------------------------------------------------------------------------------------------ a real serve
def fetch(url: str, accept: str, encoding: str) -> tuple[bytes, bytes]:
    """(the body as sent, decompressed) of one scrape."""
    request = urllib.request.Request(url, headers={"Accept": accept, "Accept-Encoding": encoding})
    with urllib.request.urlopen(request, timeout=10) as response:
        sent = response.read()
        packed = response.headers.get("Content-Encoding") == "gzip"
        assert packed == (encoding == "gzip")
    return sent, decompressed(sent) if packed else sent


def wait_for_first_evaluation(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url + "healthz", timeout=5):
                return
        except urllib.error.HTTPError as error:  # 503 until the first evaluation is done
            if error.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def evaluated_at(body: bytes) -> bytes:
    found = re.search(rb"^numawatch_last_evaluation_timestamp_seconds (\S+)", body, re.MULTILINE)
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize("accept", [OPENMETRICS, "text/plain"], ids=["openmetrics", "text"])
@pytest.mark.slow
def test_a_running_serve_answers_gzip_that_decompresses_to_its_plain_body_evaluation_after_evaluation(
    fake_host, accept
):
    reference_node(fake_host)
    matched: set[bytes] = set()
    with serve(fake_host.root, interval="0.3") as (_process, url):
        wait_for_first_evaluation(url)
        deadline = time.monotonic() + 60  # scrapes until three evaluations matched, however slow the machine
        while time.monotonic() < deadline:
            _sent, unpacked = fetch(url + "metrics", accept, "gzip")
            _sent, plain = fetch(url + "metrics", accept, "identity")
            if evaluated_at(unpacked) == evaluated_at(plain):  # both answered from one evaluation
                assert unpacked == plain
                matched.add(evaluated_at(plain))
            if len(matched) >= 3:
                break
    assert len(matched) >= 3
    parse = parse_openmetrics if accept == OPENMETRICS else text_string_to_metric_families
    assert any(family.name.startswith("numawatch_") for family in parse(plain.decode()))


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl (tests/install-and-run.sh installs it)")
@pytest.mark.slow
def test_curl_compressed_reads_the_gzip_body_of_a_running_serve(fake_host):
    reference_node(fake_host)
    with serve(fake_host.root, interval="0.3") as (_process, url):
        wait_for_first_evaluation(url)
        for _ in range(3):  # the first body written on demand, then ones written with their evaluations
            curled = subprocess.run(
                ["curl", "--silent", "--show-error", "--fail", "--compressed", "--dump-header", "-",
                 "-H", f"Accept: {OPENMETRICS}", url + "metrics"],
                capture_output=True, timeout=30, check=True,
            ).stdout
            headers, _, body = curled.partition(b"\r\n\r\n")
            assert re.search(rb"(?im)^content-encoding: gzip\r?$", headers)  # curl asked for it and undid it
            assert body.endswith(b"# EOF\n")
            assert any(family.name == "numawatch_drift" for family in parse_openmetrics(body.decode()))
            time.sleep(0.4)
