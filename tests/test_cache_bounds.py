"""The stated bounds of what serve remembers between evaluations: the ``Store`` (store.py) holds one entry per name
whatever the pods do, a per-pod table in it the current pods only; the exposition's ``LineCache`` holds one
exposition; and a HostReader judged and rendered as serve does, through pods coming and going, ends with the entries
it has with the same pods and keeps nothing of a pod that went."""

from __future__ import annotations

import random

import readings
from fakehost.pods import ContainerSpec, add_pod, remove_pod
from fakehost.reference import DEFAULT_CPUSET, reference_node
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.metrics import exposition
from numawatch.metrics.exposition import GaugeRows, LineCache
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED
from numawatch.store import Store


def test_the_store_holds_one_entry_per_name_through_a_thousand_readings_of_churning_pods():
    store = Store()
    live = [f"pod-{index}" for index in range(50)]
    serial = len(live)
    rng = random.Random(34)
    for reading in range(1000):
        # One pod replaced per reading, as d384churn's churn does.
        leaving = live.pop(rng.randrange(len(live)))
        live.append(f"pod-{serial}")
        serial += 1

        def table(previous: dict[str, int] | None, reading: int = reading) -> dict[str, int]:
            # A per-pod table: each current pod's value, the previous table's where the pod was there.
            return {uid: (previous or {}).get(uid, reading) for uid in live}

        held = store.renew("per-pod findings", table)
        store.value("a check's verdict", ("generation", reading // 10), lambda previous, made=reading: made)
        assert len(store) == 2
        assert set(held) == set(live) and leaving not in held
        assert held["pod-0"] == 0 if "pod-0" in live else True  # a pod that stays keeps its first value
    assert store.value("a check's verdict", ("generation", 99), lambda previous: -1) == 990  # unchanged: reused


def test_a_value_is_made_again_from_the_last_when_its_versions_move_and_not_kept_when_it_failed():
    store = Store()
    assert store.value("v", 1, lambda previous: ("made", previous)) == ("made", None)
    assert store.value("v", 1, lambda previous: "not made") == ("made", None)
    assert store.value("v", 2, lambda previous: previous) == ("made", None)  # made from the last value
    assert store.value("v", 3, lambda previous: "failed", keep=lambda value: value != "failed") == "failed"
    assert store.value("v", 3, lambda previous: previous) == ("made", None)  # the failure was not kept
    assert list(store) == ["v"]


def _family(rows: list[tuple[str, float]]) -> GaugeRows:
    family = GaugeRows("numawatch_test_rows", "Rows for the cache test.", ["pod_uid"])
    family.rows.extend(((uid,), value) for uid, value in rows)
    return family


def test_the_line_cache_holds_the_last_exposition_only():
    cache = LineCache()
    live = [f"pod-{index}" for index in range(20)]
    serial = len(live)
    for step in range(300):
        live.pop(0)
        live.append(f"pod-{serial}")
        serial += 1
        rows = [(uid, float(step % 3)) for uid in live]
        body = exposition.write([_family(rows)], cache)
        assert body == exposition.write([_family(rows)])  # what an uncached write says
        lines = [line for table in cache.previous.values() for line in table.values()]
        assert len(lines) <= len(live)
        assert {key[0][0] for table in cache.previous.values() for key in table} <= set(live)
        assert len(cache.previous_families) == 1 and not cache.current and not cache.current_families


def _add(node, rng: random.Random, serial: int):
    qos = (QOS_GUARANTEED, QOS_BURSTABLE, QOS_BESTEFFORT)[serial % 3]
    containers = [
        ContainerSpec(f"c{serial}-{index}", cpus=DEFAULT_CPUSET, mems={0, 1}, numa_bytes={0: 1 << 20})
        for index in range(rng.randint(1, 2))
    ]
    return add_pod(node.host, uid=f"00000000-0000-4000-8000-{serial:012d}", qos=qos, namespace="default",
                   name=f"churn-{serial}", runtime=node.runtime, bundle_root="k3s", containers=containers)  # fmt: skip


def _serve_once(reader: HostReader, renderer: metrics.Renderer, memory: metrics.Memory) -> None:
    """One evaluation as serve makes it: read, judge, build the families, write both formats through its caches."""
    evaluation = evaluate(reader.read(), REFERENCE)
    built = metrics.families(evaluation, None, memory)
    renderer.write(built)
    renderer.write(built, openmetrics=True)


def test_a_serving_reader_through_pods_coming_and_going_holds_what_it_holds_for_the_same_pods(fake_host):
    node = reference_node(fake_host)
    rng = random.Random(7)
    pods = [_add(node, rng, serial) for serial in range(6)]
    serial = len(pods)
    reader = HostReader(node.paths, stagger=4)  # serve's rotation: values kept between a pod's turns
    renderer, memory = metrics.Renderer(), metrics.Memory()
    for _ in range(4):
        _serve_once(reader, renderer, memory)
    steady = len(reader.store)
    assert steady > 0
    gone = []
    for _ in range(60):  # one pod replaced per evaluation
        leaving = pods.pop(rng.randrange(len(pods)))
        remove_pod(node.host, leaving)
        gone.append(leaving.uid)
        pods.append(_add(node, rng, serial))
        serial += 1
        _serve_once(reader, renderer, memory)
    for _ in range(4):  # the same number of pods, none moving
        _serve_once(reader, renderer, memory)
    assert len(reader.store) == steady  # one entry per name, whatever the pods did
    # What the reader's store, its sources' memories and the exposition's caches hold names the live pods, and no
    # other.
    memories = [reader.memory(spec.name) for spec in reader.sources]
    stored = [readings.stored(reader.store, name) for name in reader.store]
    held = repr(stored) + repr(memories) + repr(renderer._lines.previous) + repr(renderer._openmetrics_lines.previous)
    assert all(pod.uid in held for pod in pods)
    assert not [uid for uid in gone if uid in held]
