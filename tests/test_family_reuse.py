"""A ``host_only`` family builder's families handed out again between a HostReader's readings (``core.built`` through
``Host.reuse``): every marked builder reads nothing of the evaluation but its host and intent, its families are the
earlier reading's exactly while what it declares reading keeps its generation, a builder that failed is run again,
and an incremental derivation a reused value was made through (the device IRQ join) is made from its last value
when it is made again. The end-to-end proof over a changing node is tests/test_render_reuse.py."""

from __future__ import annotations

import logging

import pytest
from fakehost.reference import ISOLATED, reference_node
from numawatch.checks import evaluate
from numawatch.derivation import derivation
from numawatch.host import Host, HostReader, SourceSpec
from numawatch.inputs import Source, exposes
from numawatch.intent import REFERENCE
from numawatch.metrics import capacity, core, exposition, gpu, platform
from numawatch.metrics import host as host_metrics
from numawatch.paths import Paths
from numawatch.refresh import EVERY, POLICIES
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from test_docs_metrics import reference_evaluation  # noqa: F401
from test_render_reuse import write_irqs

BUILDERS = (*core.PER_EVALUATION, *host_metrics.BUILDERS, *platform.BUILDERS, *gpu.BUILDERS)
HOST_ONLY = tuple(build for build in BUILDERS if core.is_host_only(build))


class HostAndIntentOnly:
    """An evaluation that holds its host and intent and nothing else: a builder reading anything more fails."""

    def __init__(self, host: Host, intent: object) -> None:
        self.host = host
        self.intent = intent

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a host_only builder read evaluation.{name}")


def written(families) -> bytes:
    return exposition.write(families, openmetrics=True)


def test_the_builders_marked_are_the_expensive_host_only_ones():
    names = {build.__name__ for build in HOST_ONLY}
    assert {"cpu_interrupts", "irq_affinity", "cpuidle_latency", "kernel_settings", "gpu_nic_path"} <= names
    # Builders that read findings, the clock or the process are never marked.
    assert not names & {"drift", "drift_findings", "check_evaluated", "self_cpus", "build_info"}
    assert capacity.families not in HOST_ONLY


@pytest.mark.parametrize("build", HOST_ONLY, ids=lambda build: build.__name__)
def test_a_host_only_builder_reads_nothing_but_the_host_and_intent(build, reference_evaluation):  # noqa: F811
    from_everything = core.safely(build, reference_evaluation)
    from_host_only = build(HostAndIntentOnly(reference_evaluation.host, reference_evaluation.intent))
    made = [from_host_only] if isinstance(from_host_only, Metric) else list(from_host_only)
    assert written(made) == written(from_everything)


def irq_families(evaluation) -> list:
    return core.built((host_metrics.cpu_interrupts, host_metrics.irq_affinity), evaluation)


def test_families_are_the_earlier_readings_while_what_they_read_keeps_its_generation(fake_host):
    node = reference_node(fake_host)
    write_irqs(node, 0, on_isolated=min(ISOLATED))
    reader = HostReader(node.paths, stagger=4)  # serve's
    first = irq_families(evaluate(reader.read(), REFERENCE))
    node.spill_memory()  # the cgroups move; neither family reads them
    second = irq_families(evaluate(reader.read(), REFERENCE))
    assert [a is b for a, b in zip(first, second, strict=True)] == [True, True]

    write_irqs(node, 1, on_isolated=min(ISOLATED))  # the counters move, seen at the next reading of the file
    for _ in range(POLICIES["interrupts"].every - 1):
        third = irq_families(evaluate(reader.read(), REFERENCE))
    assert third[0] is not first[0]
    fresh = HostReader(node.paths).read()
    assert written(third) == written(irq_families(evaluate(fresh, REFERENCE)))
    assert written(third) != written(first)
    # The GPU vector's count on the isolated CPU, as the second reading of the file has it.
    assert (str(min(ISOLATED)), "device", 50) in third[0].rows


class Counts:
    """One source whose reading the test sets, read at every reading."""

    def __init__(self) -> None:
        self.value: dict[str, int] = {"n": 1}

    def reader(self) -> HostReader:
        return HostReader(Paths.from_root("/nonexistent"), [SourceSpec("counts", lambda paths: dict(self.value))],
                          policies={"counts": EVERY})  # fmt: skip


def test_a_builder_that_failed_is_run_again_and_logged_again(caplog):
    counts = Counts()
    reader = counts.reader()
    runs: list[int] = []

    @exposes("numawatch_test_counts", inputs=(Source("counts"),))
    @core.host_only
    def flaky(evaluation):
        runs.append(1)
        value = evaluation.host.get("counts")
        if len(runs) == 1:
            raise RuntimeError("a bug")
        family = GaugeMetricFamily("numawatch_test_counts", "A test family.")
        family.add_metric((), value["n"])
        return family

    with caplog.at_level(logging.ERROR):
        assert core.built([flaky], evaluate(reader.read(), REFERENCE, [])) == []
    assert "building metric family with" in caplog.text
    second = core.built([flaky], evaluate(reader.read(), REFERENCE, []))
    third = core.built([flaky], evaluate(reader.read(), REFERENCE, []))
    assert len(runs) == 2 and second[0] is third[0]  # run again after the failure, then reused
    counts.value = {"n": 2}
    fourth = core.built([flaky], evaluate(reader.read(), REFERENCE, []))
    assert len(runs) == 3 and [sample.value for sample in fourth[0].samples] == [2]


INNER: list[tuple[int, int | None]] = []


@derivation("tests.family_reuse.inner", inputs=(Source("counts"),), incremental=True)
def inner(host: Host, previous: int | None) -> int:
    """An incremental value (made from its last one) that a reused family is made through."""
    INNER.append((host.get("counts")["n"], previous))
    return (previous or 0) + 1


def test_a_reused_value_keeps_what_it_was_derived_through():
    counts = Counts()
    reader = counts.reader()
    made: list[int] = []

    @exposes("numawatch_test_inner", inputs=(Source("counts"),))
    @core.host_only
    def outer(evaluation):
        made.append(inner(evaluation.host))
        family = GaugeMetricFamily("numawatch_test_inner", "A test family.")
        family.add_metric((), made[-1])
        return family

    INNER.clear()
    for _ in range(4):  # made at the first reading, handed out again at the three after it
        core.built([outer], evaluate(reader.read(), REFERENCE, []))
    assert made == [1] and INNER == [(1, None)]
    counts.value = {"n": 5}
    fifth = core.built([outer], evaluate(reader.read(), REFERENCE, []))
    # Four readings later the inner value is still there: made again from it.
    assert made == [1, 2] and INNER == [(1, None), (5, 1)]
    assert [sample.value for sample in fifth[0].samples] == [2]
