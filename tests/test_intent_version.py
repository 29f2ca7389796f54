"""What values derived for an intent are keyed on: ``Intent.version``, a digest of the intent's content. Equal intents
share it (an intent read again from an unchanged file reuses every verdict and row), any other intent has another
one, and an intent that takes over the memory of a collected one (the same ``id()``) gets its own findings and
families, never the collected one's."""

from __future__ import annotations

import weakref
from dataclasses import replace

import pytest
import readings
from fakehost.reference import DEFAULT_CPUSET, VLLM, reference_snapshot, replace_container
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.host import Host
from numawatch.intent import (
    REFERENCE,
    GpuIntent,
    Intent,
    KernelIntent,
    NodeIntent,
    PodSelector,
)
from numawatch.metrics.core import EvaluationStats
from numawatch.model import frozen_map
from numawatch.shapes import ContainerShape, Shape
from numawatch.taints import Taint

STATS = EvaluationStats()
STATS.observe(0.25, 1_700_000_000.0)


def severities(*pairs: tuple[str, str]) -> Intent:
    return Intent(severities=frozen_map(dict(pairs)))


# ------------------------------------------------------------------------------------------------ the digest
def test_equal_intents_share_a_version_whatever_order_their_mappings_were_filled_in():
    one = Intent(severities=frozen_map({"a": "info", "b": "warning"}), disabled=frozenset({"x", "y"}))
    other = Intent(severities=frozen_map({"b": "warning", "a": "info"}), disabled=frozenset({"y", "x"}))

    assert one == other and one is not other
    assert one.version == other.version
    assert Intent().version == REFERENCE.version
    assert len(REFERENCE.version) == 32 and int(REFERENCE.version, 16) >= 0


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(Intent(source="/etc/numawatch/intent.yaml"), id="source"),
        pytest.param(Intent(remote_memory_ratio=0.2), id="float"),
        pytest.param(Intent(reserved_cpus=frozenset({0, 1})), id="cpuset"),
        pytest.param(Intent(pin_gpu_containers=False), id="bool"),
        pytest.param(severities(("container_cpuset_drift", "info")), id="mapping"),
        pytest.param(Intent(disabled=frozenset({"container_cpuset_drift"})), id="set"),
        pytest.param(Intent(pinned=(PodSelector(namespace="batch"),)), id="selector"),
        pytest.param(Intent(kernel=KernelIntent(swappiness=1)), id="kernel"),
        pytest.param(
            Intent(kernel=KernelIntent(hugepages_per_node=frozen_map({0: frozen_map({2048: 8})}))), id="nested-mapping"
        ),
        pytest.param(Intent(node=NodeIntent(taints=(Taint("a", "b", "NoExecute"),))), id="taint"),
        pytest.param(Intent(gpus=GpuIntent(max_nic_path_level="PHB")), id="gpus"),
        pytest.param(Intent(shapes=(Shape("one", (ContainerShape(cpu_millis=1000),)),)), id="shape"),
    ],
)
def test_any_other_intent_has_another_version(other):
    assert other != REFERENCE
    assert other.version != REFERENCE.version
    assert replace(other).version == other.version  # a copy: equal, the same version


# ------------------------------------------------------------------------------------------------ reuse by content
def drifted() -> Host:
    """The reference node with vLLM's container off its exclusive CPUs and most of its memory remote: findings
    whose severity the intent sets."""
    snapshot = replace_container(reference_snapshot(), VLLM.container.container_id, cpus_effective=DEFAULT_CPUSET,
                                 numa_bytes=frozen_map({0: 1 << 30, 1: 3 << 30}))  # fmt: skip
    return readings.as_reading(snapshot)


def outcome(host: Host, intent: Intent) -> tuple:
    evaluation = evaluate(host, intent)
    return [finding.as_dict() for finding in evaluation.findings], metrics.render(evaluation, STATS)


def test_an_intent_at_a_collected_intents_address_gets_its_own_findings_and_families():
    host = drifted()
    info, warning = (frozen_map({"container_cpuset_drift": severity}) for severity in ("info", "warning"))
    held: list[Intent] = []
    # An intent judged, then dropped, and an intent of other content made at once: CPython hands the freed memory to
    # the next object of its size, unless another pool of that size comes first; tried until it does.
    for _ in range(200):
        first = Intent(severities=info)
        before = outcome(host, first)
        address, first_version, gone = id(first), first.version, weakref.ref(first)
        del first  # nothing else holds it: freed at once
        second = Intent(severities=warning)
        host = readings.next_reading(host)
        if gone() is None and id(second) == address:
            break
        held.append(second)  # the next tries' intents take other memory
    else:
        pytest.fail("no intent was made at a collected one's address in 200 tries")

    after = outcome(host, second)

    assert second.version != first_version
    assert after == outcome(readings.from_scratch(host), second)
    assert after != before
    drift = {finding["check"]: finding["severity"] for finding in after[0]}
    assert drift["container_cpuset_drift"] == "warning"


def test_an_equal_intent_reuses_what_was_derived_for_the_first():
    host = drifted()
    first = severities(("container_cpuset_drift", "info"))
    rows = {family.name: getattr(family, "rows", None) for family in metrics.families(evaluate(host, first), STATS)}
    reloaded = severities(("container_cpuset_drift", "info"))  # the same file read again
    host = readings.next_reading(host)

    again = evaluate(host, reloaded)
    rows_again = {family.name: getattr(family, "rows", None) for family in metrics.families(again, STATS)}

    assert reloaded is not first
    assert [finding.as_dict() for finding in again.findings] == outcome(readings.from_scratch(host), reloaded)[0]
    cpus = "numawatch_container_cpus"
    assert rows_again[cpus] and all(new is old for new, old in zip(rows_again[cpus], rows[cpus], strict=True))
