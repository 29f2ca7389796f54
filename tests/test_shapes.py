from __future__ import annotations

import argparse

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch.shapes import ContainerShape, ShapeError, parse_shape, shape_argument, shapes_from_intent

GiB = 1 << 30


def test_command_line_shape_reads_cpu_memory_devices_and_hugepages():
    shape = parse_shape("cpu=16,memory=200Gi,nvidia.com/gpu=2,hugepages-1Gi=16Gi")

    (container,) = shape.containers
    assert container.cpu_millis == 16000
    assert container.exclusive_cpus == 16
    assert container.memory == 200 * GiB
    assert dict(container.hugepages) == {"hugepages-1Gi": 16 * GiB}
    assert dict(container.devices) == {"nvidia.com/gpu": 2}
    assert shape.guaranteed
    assert shape.text == "cpu=16,memory=200Gi,hugepages-1Gi=16Gi,nvidia.com/gpu=2"
    assert shape.name == "cpu=16,memory=200Gi,nvidia.com/gpu=2,hugepages-1Gi=16Gi"


def test_plus_joins_containers_but_not_a_quantity_exponent():
    shape = parse_shape("cpu=8,memory=1e+3+cpu=2,memory=4Gi")

    assert [c.cpu_millis for c in shape.containers] == [8000, 2000]
    assert [c.memory for c in shape.containers] == [1000, 4 * GiB]
    assert shape.total() == ContainerShape(cpu_millis=10000, memory=1000 + 4 * GiB)
    assert shape.pod_exclusive_cpus() == 10


def test_fractional_cpu_is_accepted_but_gets_no_exclusive_cpus():
    shape = parse_shape("cpu=1500m,memory=1Gi,nvidia.com/gpu=1+cpu=4,memory=1Gi")

    assert [c.exclusive_cpus for c in shape.containers] == [0, 4]
    assert shape.pod_exclusive_cpus() == 4
    assert shape.containers[0].text == "cpu=1500m,memory=1Gi,nvidia.com/gpu=1"


def test_a_container_without_memory_makes_the_pod_not_guaranteed_and_unpinned():
    shape = parse_shape("cpu=4,nvidia.com/gpu=1")

    assert not shape.guaranteed
    assert shape.pod_exclusive_cpus() == 0


def test_hugepage_resource_names_are_canonicalised_as_the_kubelet_names_them():
    shape = parse_shape("cpu=1,memory=1Gi,hugepages-1024Mi=2Gi")

    assert dict(shape.containers[0].hugepages) == {"hugepages-1Gi": 2 * GiB}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty shape"),
        ("   ", "empty shape"),
        ("cpu", "expected resource=amount"),
        ("cpu=", "expected resource=amount"),
        ("=16", "expected resource=amount"),
        ("cpu=16,,memory=1Gi", "expected resource=amount"),
        ("cpu=sixteen", "cpu: expected a CPU quantity"),
        ("cpu=-2", "cpu: expected a positive amount"),
        ("cpu=0", "cpu: expected a positive amount"),
        ("cpu=1n", "finer than a thousandth"),
        ("memory=lots", "memory: expected a quantity of bytes"),
        ("nvidia.com/gpu=1.5", "whole number of devices"),
        ("nvidia.com/gpu=500m", "whole number of devices"),
        ("gpu=1", "gpu: unknown resource"),
        ("ephemeral-storage=1Gi", "unknown resource"),
        ("hugepages-huge=1Gi", "not a huge page size"),
        ("hugepages-1Gi=1Gi,hugepages-1024Mi=1Gi", "hugepages-1Gi is given twice"),
        ("cpu=1,cpu=2", "cpu is given twice"),
        ("cpu=1+cpu=x", "container 2: cpu: expected a CPU quantity"),
        ("+".join(["cpu=1"] * 17), "at most 16"),
    ],
)
def test_malformed_command_line_shapes_are_one_line_errors_naming_the_part(text, message):
    with pytest.raises(ShapeError) as raised:
        parse_shape(text)

    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_argparse_type_reports_the_shape_error_verbatim():
    parser = argparse.ArgumentParser(prog="numawatch check", exit_on_error=False)
    parser.add_argument("--fit", type=shape_argument)

    assert parser.parse_args(["--fit", "cpu=2,memory=1Gi"]).fit.containers[0].cpu_millis == 2000
    with pytest.raises(argparse.ArgumentError) as raised:
        parser.parse_args(["--fit", "cpu=2,gpu=1"])
    assert "gpu: unknown resource" in str(raised.value)


def test_intent_shapes_keep_their_names_order_and_yaml_types():
    value = yaml.safe_load(
        """
        vllm-tp2: {cpu: 16, memory: 200Gi, nvidia.com/gpu: 2, hugepages-1Gi: 16Gi}
        pair:
          - {cpu: 8, memory: 64Gi, nvidia.com/gpu: 1}
          - {cpu: 0.5, memory: 1073741824}
        """
    )

    shapes = shapes_from_intent(value)

    assert [s.name for s in shapes] == ["vllm-tp2", "pair"]
    assert shapes[0].text == "cpu=16,memory=200Gi,hugepages-1Gi=16Gi,nvidia.com/gpu=2"
    assert [c.cpu_millis for c in shapes[1].containers] == [8000, 500]
    assert shapes[1].containers[1].memory == GiB
    assert shapes_from_intent(None) == ()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[a, b]", "shapes: expected a mapping of shape name to resources, found a list"),
        ("{tp2: 16}", "shapes.tp2: expected a mapping of resource to amount"),
        ("{tp2: []}", "shapes.tp2: expected a mapping of resource to amount (or a list of 1-16"),
        ("{tp2: [16]}", "shapes.tp2[0]: expected a mapping of resource to amount, found 16"),
        ("{tp2: {}}", "shapes.tp2: expected a mapping"),
        ("{'bad name': {cpu: 1}}", "shapes.bad name: a shape name is"),
        ("{-x: {cpu: 1}}", "shapes.-x: a shape name is"),
        ("{tp2: {cpu: true}}", "shapes.tp2.cpu: expected a CPU quantity"),
        ("{tp2: {cpu: .nan}}", "shapes.tp2.cpu: expected a CPU quantity"),
        ("{tp2: {memory: [1]}}", "shapes.tp2.memory: expected a quantity of bytes"),
        ("{tp2: {nvidia.com/gpu: 1.5}}", "shapes.tp2.nvidia.com/gpu: expected a whole number of devices"),
        ("{tp2: {cpus: 4}}", "shapes.tp2.cpus: unknown resource"),
        ("{tp2: [{cpu: 1}, {gpu: 1}]}", "shapes.tp2[1].gpu: unknown resource"),
        ("{tp2: {1: 4}}", "shapes.tp2.1: unknown resource"),
    ],
)
def test_malformed_intent_shapes_name_the_key_path(document, message):
    with pytest.raises(ShapeError) as raised:
        shapes_from_intent(yaml.safe_load(document))

    assert message in str(raised.value)


_ATOMS = st.sampled_from(
    ["cpu", "memory", "hugepages-1Gi", "hugepages-2Mi", "nvidia.com/gpu", "=", ",", "+", "16", "1.5", "200Gi", "1e+3",
     "-1", "0", "\x00", "é", " ", "m", "Ki", "9" * 120]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.lists(_ATOMS, max_size=12).map("".join)))
@pytest.mark.slow
def test_any_command_line_text_gives_a_shape_or_a_one_line_shape_error(text):
    try:
        shape = parse_shape(text)
    except ShapeError as error:
        assert "\n" not in str(error)
    else:
        assert shape.containers and all(c.amounts() for c in shape.containers)


_YAML_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), _ATOMS),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.one_of(_ATOMS, st.integers()), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(_YAML_VALUES)
@pytest.mark.slow
def test_any_parsed_yaml_value_gives_shapes_or_a_shape_error(value):
    try:
        shapes = shapes_from_intent(value)
    except ShapeError as error:
        assert str(error).startswith("shapes")
    else:
        assert isinstance(shapes, tuple)
