"""metrics/exposition.py writes exactly what prometheus_client's encoders write, byte for byte: the text format as
``generate_latest`` writes it (for the families without their ``_created`` samples, which the classic format leaves
out) and OpenMetrics as ``prometheus_client.openmetrics.exposition.generate_latest`` writes it; for the families of
whole evaluations (the reference node with planted drift and NVML, and the benchmark's generated node) and for every
corner of the format our families could reach (escaping, names, types, values, timestamps)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
from fake_pynvml import reference_nvml, write_reference_threads
from fakehost import FakeHost
from fakehost.reference import reference_node
from gpu_readers import GpuReaders
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.metrics import exposition
from numawatch.metrics.core import EvaluationStats
from numawatch.nvml_session import NvmlSession
from numawatch.paths import Paths
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Exemplar

BENCH_GENERATOR = Path(__file__).resolve().parent.parent / "bench" / "generate_host.py"


class _Collector:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def without_created(families: list[Metric]) -> list[Metric]:
    """The families with their ``_created`` samples left out, as the text format carries them."""
    out = []
    for family in families:
        copy = Metric(family.name, family.documentation, family.type, family.unit)
        copy.samples = [s for s in family.samples if s.name != family.name + "_created"]
        out.append(copy)
    return out


def reference_bytes(families: list[Metric]) -> bytes:
    """What prometheus_client writes for these families in the text format (without created samples)."""
    registry = CollectorRegistry()
    registry.register(_Collector(without_created(families)))
    return generate_latest(registry)


def reference_openmetrics(families: list[Metric]) -> bytes:
    registry = CollectorRegistry()
    registry.register(_Collector(families))
    return generate_openmetrics(registry)


def _same(written: bytes, expected: bytes) -> None:
    if written != expected:  # show the first differing line, not two 500 KB blobs
        for ours, theirs in zip(written.splitlines(), expected.splitlines(), strict=False):
            assert ours == theirs
    assert written == expected


def assert_written_like_generate_latest(families: list[Metric]) -> bytes:
    """Both formats equal to prometheus_client's encoders; the text format's bytes are returned."""
    openmetrics = exposition.write(families, openmetrics=True)
    _same(openmetrics, reference_openmetrics(families))
    written = exposition.write(families)
    _same(written, reference_bytes(families))
    return written


def evaluation_families(reader: HostReader) -> list[Metric]:
    reader.read()
    host = reader.read()  # a second reading, so rate and counter families have samples too
    evaluation = evaluate(host, REFERENCE)
    stats = EvaluationStats()
    stats.observe(0.0123, 1_700_000_000.5)
    stats.observe(3.5, 1_700_000_015.25)
    return metrics.families(evaluation, stats)


# ------------------------------------------------------------------------------------------------ whole evaluations
def test_the_reference_node_with_drift_and_gpus_is_written_byte_for_byte_as_generate_latest(tmp_path):
    node = reference_node(FakeHost(tmp_path / "host"))
    node.split_across_nodes()
    node.host.write("proc/irq/150/smp_affinity_list", "2")
    node.host.write("proc/irq/150/effective_affinity_list", "2")
    write_reference_threads(node.host)
    gpu = GpuReaders(NvmlSession(nvml=reference_nvml()))
    try:
        families = evaluation_families(HostReader(node.host.paths, nvml=gpu.session, clock=gpu.clock))
    finally:
        gpu.session.close()

    body = assert_written_like_generate_latest(families)

    parsed = {family.name for family in text_string_to_metric_families(body.decode())}
    assert {"numawatch_drift", "numawatch_container_cpus", "numawatch_evaluation_duration_seconds"} <= parsed
    assert b'numawatch_drift{check="container_numa_split"' in body
    # OpenMetrics: the same families, which client_python's strict OpenMetrics parser reads back.
    openmetrics = exposition.write(families, openmetrics=True).decode()
    assert {family.name for family in parse_openmetrics(openmetrics)} == {
        family.name for family in text_string_to_metric_families(body.decode())
    } - {"numawatch_evaluations_created"}
    assert openmetrics.endswith("\n# EOF\n")


def _load_generator():
    spec = importlib.util.spec_from_file_location("bench_generate_host_exposition", BENCH_GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_generated_benchmark_node_is_written_byte_for_byte_as_generate_latest(tmp_path):
    generator = _load_generator()
    generated = generator.generate(tmp_path / "bench", generator.HostSpec.scaled(32))
    families = evaluation_families(HostReader(Paths.from_root(generated.root)))

    body = assert_written_like_generate_latest(families)

    series = [line for line in body.splitlines() if line and not line.startswith(b"#")]
    assert len(series) > 300
    assert b"numawatch_drift{" in body  # the generator plants drift, so findings are part of what is compared


def test_render_is_the_direct_writer_over_the_families():
    evaluation = evaluate(HostReader(Paths.from_root("/nonexistent-root"), ()).read(), REFERENCE)
    stats = EvaluationStats()

    assert metrics.render(evaluation, stats) == reference_bytes(metrics.families(evaluation, stats))
    assert metrics.render(evaluation, stats, openmetrics=True) == reference_openmetrics(
        metrics.families(evaluation, stats)
    )


# ------------------------------------------------------------------------------------------------ corners
def gauge(name: str = "g", labels: tuple[str, ...] = ("a",), rows=(), documentation: str = "help") -> Metric:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


@pytest.mark.parametrize(
    "value",
    ['plain', 'back\\slash', 'quo"te', 'new\nline', 'all \\ " \n three', '\\n literal', 'ünïcødé ✓', '', '{}=,',
     '%s %d %%', '"', '\\'],
)  # fmt: skip
def test_label_values_are_escaped_as_generate_latest_escapes_them(value):
    family = gauge(labels=("a", "b"), rows=[((value, "x"), 1), (("x", value), 2)])

    body = assert_written_like_generate_latest([family])

    [parsed] = text_string_to_metric_families(body.decode())
    assert [sample.labels for sample in parsed.samples] == [{"a": value, "b": "x"}, {"a": "x", "b": value}]


def test_labels_are_sorted_by_name_whatever_order_the_family_declares():
    family = gauge(labels=("zone", "cpu", "b_", "B"), rows=[(("z", "1", "b", "capital"), 1)])

    body = assert_written_like_generate_latest([family])

    assert b'g{B="capital",b_="b",cpu="1",zone="z"} 1.0\n' in body


@pytest.mark.parametrize("name", ["9lives", "has-dash", "dotted.name", "colon:inside", "ünï", "_ok", "__reserved"])
def test_label_names_outside_the_legacy_set_are_escaped_with_underscores(name):
    # Metric families validate their label names only when built through the metric classes; a collector may hand
    # over anything, and the writer must escape it the same way.
    family = Metric("m", "help", "gauge")
    family.add_sample("m", {name: "v", "ok": "w"}, 1)

    assert_written_like_generate_latest([family])


@pytest.mark.parametrize("name", ["9lives", "has-dash", "dotted.name", "colon:inside", ":lead", "ünï"])
def test_metric_names_outside_the_legacy_set_are_escaped_with_underscores(name):
    family = Metric(name, "help", "gauge")
    family.add_sample(name, {"a": "1"}, 1)
    family.add_sample(name, {}, 2)

    assert_written_like_generate_latest([family])


@pytest.mark.parametrize(
    "value",
    [0, 1, -1, 7, 999_999, 1_000_000, 1_234_567, -1_234_567, 10**15, -(10**15), 10**16, -(10**16), 10**21, 2**63,
     0.0, -0.0, 0.5, 1e-7, 123456.789, 1234567.5, 1e21, 1.5e300, -2.5e-300, math.inf, -math.inf, math.nan, True,
     False, 12.0],
)  # fmt: skip
def test_values_are_formatted_as_go_formats_a_float64(value):
    family = gauge(labels=(), rows=[((), value)])

    assert_written_like_generate_latest([family])
    assert exposition.format_value(value).encode() in exposition.write([family])


def test_help_text_escapes_backslashes_and_newlines_but_not_quotes():
    family = gauge(documentation='two\nlines, a \\ and "quotes"', rows=[(("x",), 1)])

    body = assert_written_like_generate_latest([family])

    assert b'# HELP g two\\nlines, a \\\\ and "quotes"\n' in body


def test_every_family_type_is_munged_into_the_classic_format_as_generate_latest_does():
    counter = CounterMetricFamily("requests", "Requests.", labels=("code",), created=1_700_000_000.0)
    counter.add_metric(("200",), 5, created=1_700_000_000.25)
    counter.add_metric(("500",), 1)
    histogram = HistogramMetricFamily("latency_seconds", "Latency.", labels=("path",))
    histogram.add_metric(("/",), buckets=[("0.1", 3), ("1.0", 5), ("+Inf", 6)], sum_value=2.5)
    gauge_histogram = GaugeHistogramMetricFamily("queue", "Queue.", buckets=[("1.0", 1), ("+Inf", 2)], gsum_value=3)
    summary = SummaryMetricFamily("size_bytes", "Size.", count_value=4, sum_value=1e7)
    info = InfoMetricFamily("build", "Build.", value={"version": "1.2", "branch": "main"})
    stateset = StateSetMetricFamily("state", "State.", value={"up": True, "down": False})
    unknown = UnknownMetricFamily("mystery", "Mystery.", value=42)
    empty = gauge("nothing_yet")

    families = [counter, histogram, gauge_histogram, summary, info, stateset, unknown, empty]
    body = assert_written_like_generate_latest(families)

    assert b"# TYPE requests_total counter\n" in body
    assert b"_created" not in body  # the classic format has no created timestamps
    assert b"# TYPE build_info gauge\n" in body
    assert b"# TYPE mystery untyped\n" in body
    assert b"# TYPE queue histogram\n" in body
    assert b"# TYPE queue_gsum gauge\n" in body
    assert b"# HELP nothing_yet help\n# TYPE nothing_yet gauge\n" in body
    openmetrics = exposition.write(families, openmetrics=True)
    created = b'requests_created{code="200"} 1.70000000025e+09\n'
    assert b'# TYPE requests counter\nrequests_total{code="200"} 5.0\n' + created in openmetrics
    assert b"# TYPE build info\n" in openmetrics
    assert b"# TYPE mystery unknown\n" in openmetrics
    assert b"# TYPE queue gaugehistogram\n" in openmetrics
    assert openmetrics.endswith(b"nothing_yet help\n# TYPE nothing_yet gauge\n# EOF\n")
    assert [family.name for family in parse_openmetrics(openmetrics.decode())] == [
        "requests", "latency_seconds", "queue", "size_bytes", "build", "state", "mystery", "nothing_yet",
    ]


def test_timestamps_are_written_in_milliseconds():
    family = gauge(labels=("a",))
    family.add_metric(("x",), 1, timestamp=1_700_000_000.1234)
    family.add_metric(("y",), 2, timestamp=0)
    family.add_metric(("z",), 3)

    body = assert_written_like_generate_latest([family])

    assert b'g{a="x"} 1.0 1700000000123\n' in body


def test_samples_with_different_label_sets_in_one_family_each_get_their_own_labels():
    family = Metric("mixed", "help", "gauge")
    family.add_sample("mixed", {"a": "1"}, 1)
    family.add_sample("mixed", {"b": "2"}, 2)
    family.add_sample("mixed", {"a": "3", "b": "4"}, 3)
    family.add_sample("mixed", {"a": "5"}, 4)
    family.add_sample("mixed", {}, 5)

    body = assert_written_like_generate_latest([family])

    assert body.endswith(b'mixed{a="5"} 4.0\nmixed 5.0\n')


def test_no_families_is_an_empty_body():
    assert exposition.write([]) == reference_bytes([]) == b""
    assert exposition.write([], openmetrics=True) == reference_openmetrics([]) == b"# EOF\n"


def test_openmetrics_escapes_quotes_in_help_and_writes_units_and_timestamps_in_seconds():
    family = Metric("size_bytes", 'a "quoted"\nhelp \\', "gauge", unit="bytes")
    family.add_sample("size_bytes", {"a": "x"}, 1, timestamp=1_700_000_000.25)
    family.add_sample("size_bytes", {"a": "y"}, 2, timestamp=0)

    assert_written_like_generate_latest([family])

    assert exposition.write([family], openmetrics=True) == (
        b'# HELP size_bytes a \\"quoted\\"\\nhelp \\\\\n# TYPE size_bytes gauge\n# UNIT size_bytes bytes\n'
        b'size_bytes{a="x"} 1.0 1700000000.25\nsize_bytes{a="y"} 2.0 0\n# EOF\n'
    )


def test_an_exemplar_is_refused_naming_the_family_rather_than_dropped_silently():
    family = CounterMetricFamily("hits", "help")
    family.add_metric([], 1)
    family.samples[0] = family.samples[0]._replace(exemplar=Exemplar({"trace": "a"}, 1.0))

    with pytest.raises(ValueError, match="exemplars") as raised:
        exposition.write([family], openmetrics=True)

    assert family in raised.value.args


def test_a_family_that_cannot_be_written_is_named_in_the_error():
    family = gauge(rows=[(("x",), "not a number")])

    with pytest.raises(ValueError) as raised:
        exposition.write([family])

    assert family in raised.value.args


# ------------------------------------------------------------------------------------------------ row families
def test_a_gauge_row_family_is_written_as_the_samples_it_stands_for():
    family = exposition.GaugeRows("rows", "help", labels=("zeta", "alpha", "mid"))
    family.rows.extend([
        ("z", "a", "m", 1),
        ('q"uote', "back\\slash", "new\nline", 2.5),  # escaped only where needed
        ("", "", "", 123_456_789_012),  # a byte count: Go's exponent form
        ("x", "y", "z", -3),
        ("big", "int", "v", 2**60),
        ("inf", "nan", "f", math.inf),
    ])  # fmt: skip

    written = assert_written_like_generate_latest([family])

    assert written.count(b"\nrows{alpha=") == 6
    assert family.samples[0].labels == {"zeta": "z", "alpha": "a", "mid": "m"}


def test_a_counter_row_family_writes_total_samples():
    family = exposition.CounterRows("hits", "help", labels=("cpu", "kind"))
    family.rows.extend([("0", "device", 5), ("1", "ipi", 0)])

    written = assert_written_like_generate_latest([family])

    assert b'hits_total{cpu="0",kind="device"} 5.0\n' in written
    assert family.samples[0].name == "hits_total"


@pytest.mark.parametrize("labels", [(), ("one",), ("a", "b")])
def test_row_families_of_any_label_count_match_generate_latest(labels):
    family = exposition.GaugeRows("g", "help", labels=labels)
    family.rows.extend([(*(f"{name}{index}" for name in labels), index) for index in range(3)])

    assert_written_like_generate_latest([family])


def test_a_row_family_also_filled_through_add_metric_writes_both():
    family = exposition.GaugeRows("mixed", "help", labels=("a",))
    family.rows.append(("row", 1))
    family.add_metric(("sample",), 2)

    written = assert_written_like_generate_latest([family])

    assert b'mixed{a="row"} 1.0' in written and b'mixed{a="sample"} 2.0' in written


# ------------------------------------------------------------------------------------------------ line cache
def row_family(rows, name: str = "cached", labels=("cpu", "kind")) -> exposition.GaugeRows:
    family = exposition.GaugeRows(name, "help", labels=labels)
    family.rows.extend(rows)
    return family


def test_a_cached_write_is_the_uncached_write_as_rows_change_come_and_go():
    cache = exposition.LineCache()
    sequence = [
        [("0", "device", 5), ("1", "ipi", 0), ('q"uote', "x", 1)],
        [("0", "device", 6), ("1", "ipi", 0), ('q"uote', "x", 1), ("2", "new", 2.5)],  # one moved, one came
        [("1", "ipi", 0)],  # two went away
        [("0", "device", 5), ("1", "ipi", 0), ("1", "ipi2", math.nan)],  # one came back
    ]
    openmetrics_cache = exposition.LineCache()
    for rows in sequence:
        cached = exposition.write([row_family(rows), gauge(rows=[(("s",), len(rows))])], cache)
        assert cached == exposition.write([row_family(rows), gauge(rows=[(("s",), len(rows))])])
        cached = exposition.write([row_family(rows)], openmetrics_cache, openmetrics=True)
        assert cached == exposition.write([row_family(rows)], openmetrics=True)


def test_an_unchanged_row_is_the_last_writes_line_and_a_gone_one_is_forgotten():
    cache = exposition.LineCache()
    exposition.write([row_family([("0", "device", 5), ("1", "ipi", 7)])], cache)
    first = dict(cache.previous[("cached", ("cpu", "kind"))])

    exposition.write([row_family([("0", "device", 5), ("1", "ipi", 8)])], cache)
    second = cache.previous[("cached", ("cpu", "kind"))]

    assert second[("0", "device", 5)] is first[("0", "device", 5)]  # not formatted again
    assert set(second) == {("0", "device", 5), ("1", "ipi", 8)}  # the row with 7 is not kept


def test_families_with_the_same_name_but_other_labels_do_not_share_lines():
    cache = exposition.LineCache()
    exposition.write([row_family([("a", 1)], labels=("x",))], cache)

    written = exposition.write([row_family([("a", 1)], labels=("y",))], cache)

    assert b'cached{y="a"} 1.0' in written


def test_a_row_family_with_an_unhashable_value_is_written_uncached():
    cache = exposition.LineCache()
    rows = [("0", 1), (["not", "hashable"], 2)]  # a bug elsewhere must not break the exposition

    written = exposition.write([row_family(rows, labels=("a",))], cache)

    assert written == exposition.write([row_family(rows, labels=("a",))])


def test_the_servers_renderer_renders_what_render_renders_evaluation_after_evaluation(tmp_path):
    node = reference_node(FakeHost(tmp_path / "host"))
    reader = HostReader(node.host.paths, stagger=2)
    renderer = metrics.Renderer()
    stats = EvaluationStats()
    for step in range(4):
        if step == 2:
            node.split_across_nodes()  # drift appears: findings, flags and placement rows change
        evaluation = evaluate(reader.read(), REFERENCE)
        assert renderer.render(evaluation, stats) == metrics.render(evaluation, stats)
        assert renderer.write(metrics.families(evaluation, stats), openmetrics=True) == metrics.render(
            evaluation, stats, openmetrics=True
        )
