"""The capacity families on the reference node (fakehost.reference, written as files and read by the sources), and
docs/metrics.md's Capacity section kept in step with them.

The reference node's numbers, by hand: 14 exclusive CPUs per NUMA node (16 minus reserved 0,16 / 8,24), of which
vllm holds 8 on node 0 and trtllm 8 on node 1, so 6 free each; the Memory Manager has 58 GiB of memory per node
(64 - 2 reserved - 4 of huge pages) with 16 GiB taken on each, and 4 GiB of hugepages-1Gi per node with 2 GiB taken
on node 0; 2 GPUs per node, all four held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.reference import reference_node, reference_snapshot, with_source_down
from numawatch.checks import Evaluation, evaluate
from numawatch.intent import REFERENCE, Intent
from numawatch.metrics import capacity as capacity_metrics
from numawatch.shapes import Shape, parse_shape
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from test_capacity import GPU_UUIDS, Node, Pod

GiB = 1 << 30
DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
QUANTITIES = ("numawatch_capacity_allocatable", "numawatch_capacity_free", "numawatch_capacity_largest_fit")
UNITS = ("cpus", "bytes", "devices")
# One family per quantity and unit (never two units in one family), then the replicas per shape.
FAMILIES = (*(f"{quantity}_{unit}" for quantity in QUANTITIES for unit in UNITS), "numawatch_capacity_shape_replicas")


class _Collector:
    def __init__(self, families) -> None:
        self.families = list(families)

    def collect(self):
        return self.families


def render(evaluation: Evaluation, shapes: tuple[Shape, ...] | None = None) -> str:
    registry = CollectorRegistry()
    registry.register(_Collector(capacity_metrics.families(evaluation, shapes)))
    return generate_latest(registry).decode()


def samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def series(name_samples, **labels) -> float:
    return name_samples[tuple(sorted(labels.items()))]


@pytest.fixture(scope="module")
def reference_exposition(tmp_path_factory) -> str:
    node = reference_node(FakeHost(tmp_path_factory.mktemp("reference")))
    shapes = (
        parse_shape("cpu=2,memory=4Gi", name="small"),
        parse_shape("cpu=4,memory=8Gi,nvidia.com/gpu=1", name="tp1"),
        parse_shape("cpu=2,memory=1Gi,hugepages-1Gi=2Gi", name="pinned-buffers"),
    )
    return render(evaluate(node.read(), REFERENCE), shapes)


def test_reference_node_exclusive_cpus_per_numa_node(reference_exposition):
    values = samples(reference_exposition)

    for node in ("0", "1"):
        assert series(values["numawatch_capacity_allocatable_cpus"], numa_node=node) == 14
        assert series(values["numawatch_capacity_free_cpus"], numa_node=node) == 6
        assert series(values["numawatch_capacity_largest_fit_cpus"], numa_node=node) == 6


def test_reference_node_memory_manager_memory_and_hugepages_per_numa_node(reference_exposition):
    allocatable = samples(reference_exposition)["numawatch_capacity_allocatable_bytes"]
    free = samples(reference_exposition)["numawatch_capacity_free_bytes"]

    for node in ("0", "1"):
        assert series(allocatable, numa_node=node, resource="memory") == 58 * GiB
        assert series(free, numa_node=node, resource="memory") == 42 * GiB
        assert series(allocatable, numa_node=node, resource="hugepages-1Gi") == 4 * GiB
        assert series(allocatable, numa_node=node, resource="hugepages-2Mi") == 0
    assert series(free, numa_node="0", resource="hugepages-1Gi") == 2 * GiB
    assert series(free, numa_node="1", resource="hugepages-1Gi") == 4 * GiB


def test_reference_node_gpus_are_registered_two_per_numa_node_and_all_held(reference_exposition):
    values = samples(reference_exposition)

    for node in ("0", "1"):
        labels = {"numa_node": node, "resource": "nvidia.com/gpu"}
        assert series(values["numawatch_capacity_allocatable_devices"], **labels) == 2
        assert series(values["numawatch_capacity_free_devices"], **labels) == 0
        assert series(values["numawatch_capacity_largest_fit_devices"], **labels) == 0


def test_reference_node_shape_replicas(reference_exposition):
    replicas = samples(reference_exposition)["numawatch_capacity_shape_replicas"]

    assert replicas == {
        (("shape", "small"),): 6,  # 3 per node: 6 free CPUs, 2 each
        (("shape", "tp1"),): 0,  # every GPU is held
        (("shape", "pinned-buffers"),): 3,  # huge pages: 2 GiB free on node 0, 4 GiB on node 1
    }


def test_every_series_has_one_label_set_and_no_unknown_node_on_a_topology_aware_node(reference_exposition):
    values = samples(reference_exposition)

    for name in FAMILIES[:-1]:
        assert {dict(k)["numa_node"] for k in values[name]} == {"0", "1"}, name
        expected = {"numa_node"} if name.endswith("_cpus") else {"numa_node", "resource"}
        assert all({key for key, _ in k} == expected for k in values[name]), name


def test_each_family_holds_one_unit_only(reference_exposition):
    values = samples(reference_exposition)

    for quantity in QUANTITIES:
        assert {dict(k)["resource"] for k in values[f"{quantity}_bytes"]} == {"memory", "hugepages-1Gi",
                                                                               "hugepages-2Mi"}
        assert {dict(k)["resource"] for k in values[f"{quantity}_devices"]} == {"nvidia.com/gpu"}


def test_gpus_registered_without_topology_are_exported_under_an_empty_numa_node(fake_host):
    host = Node(pods=(Pod("a", gpus=(0, 1), gpu_key=-1),)).write(fake_host)

    values = samples(render(evaluate(host, REFERENCE), ()))

    labels = {"numa_node": "", "resource": "nvidia.com/gpu"}
    assert series(values["numawatch_capacity_allocatable_devices"], **labels) == len(GPU_UUIDS)
    assert series(values["numawatch_capacity_free_devices"], **labels) == 2
    assert series(values["numawatch_capacity_largest_fit_devices"], **labels) == 2
    assert not any(dict(k)["numa_node"] for k in values["numawatch_capacity_free_devices"])


def test_a_dimension_numawatch_cannot_count_has_no_series(fake_host):
    host = Node(cpu_policy="none", memory_policy="None").write(fake_host)

    values = samples(render(evaluate(host, REFERENCE), (parse_shape("cpu=2,memory=1Gi", name="cpu-only"),)))

    assert {dict(k)["resource"] for k in values["numawatch_capacity_free_devices"]} == {"nvidia.com/gpu"}
    assert "numawatch_capacity_free_cpus" not in values and "numawatch_capacity_free_bytes" not in values
    assert "numawatch_capacity_shape_replicas" not in values  # consumes nothing numawatch counts


def test_without_a_topology_every_family_is_still_emitted_empty():
    host = with_source_down(reference_snapshot(), "topology", "planted: sysfs not mounted")

    text = render(evaluate(host, REFERENCE), (parse_shape("cpu=2,memory=1Gi", name="small"),))

    for name in FAMILIES:
        assert f"# TYPE {name} gauge" in text
    assert samples(text) == {}


def test_shapes_default_to_the_intents_named_shapes():
    @dataclass(frozen=True)
    class ShapedIntent(Intent):  # the intent field the lead wires in (Intent.shapes)
        shapes: tuple[Shape, ...] = ()

    intent = ShapedIntent(shapes=(parse_shape("cpu=2,memory=4Gi", name="small"),))
    evaluation = replace(evaluate(reference_snapshot(), REFERENCE), intent=intent)

    assert samples(render(evaluation))["numawatch_capacity_shape_replicas"] == {(("shape", "small"),): 6}
    assert "numawatch_capacity_shape_replicas" not in samples(render(evaluate(reference_snapshot(), REFERENCE)))


# --------------------------------------------------------------------------------------------- docs/metrics.md
ROW = re.compile(
    r"^\|\s*`(?P<name>numawatch_capacity_\w+)`\s*\|\s*(?P<type>\w+)\s*\|(?P<labels>[^|]*)\|(?P<help>.*)\|\s*$"
)


def test_docs_metrics_capacity_section_matches_the_families_type_labels_and_help(reference_exposition):
    rows = {m["name"]: m for m in map(ROW.match, DOCS.read_text().splitlines()) if m}
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", reference_exposition, re.MULTILINE))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", reference_exposition, re.MULTILINE))
    labels = {name: set() for name in FAMILIES}
    for name, keys in samples(reference_exposition).items():
        for key in keys:
            labels[name].update(label for label, _ in key)

    assert set(rows) == set(FAMILIES)
    for name in FAMILIES:
        row = rows[name]
        assert row["type"] == types[name]
        assert row["help"].strip() == helps[name].replace("\\\\", "\\")
        assert set(re.findall(r"`(\w+)`", row["labels"])) == labels[name]
