"""The stated bounds of what serve remembers between evaluations: ``Derived`` (host.py) holds the keys of two readings
and nothing of a pod a reading after it goes; the exposition's ``LineCache`` holds one exposition; and a HostReader
judged and rendered as serve does, through pods coming and going, ends at the size it has with the same pods and
keeps no key of a pod that went."""

from __future__ import annotations

import random

from fakehost.pods import ContainerSpec, add_pod, remove_pod
from fakehost.reference import DEFAULT_CPUSET, reference_node
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.host import Derived, HostReader
from numawatch.intent import REFERENCE
from numawatch.metrics import exposition
from numawatch.metrics.exposition import GaugeRows, LineCache
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED


def _pod_keys(uid: str) -> tuple[tuple[str, str], ...]:
    return (("join", uid), ("rows", uid), ("findings", uid))


def test_derived_holds_the_keys_of_two_readings_through_a_thousand_readings_of_churning_pods():
    derived = Derived()
    live = [f"pod-{index}" for index in range(50)]
    serial = len(live)
    gone: list[tuple[int, str]] = []  # (reading it went at, uid)
    rng = random.Random(34)
    for reading in range(1000):
        derived.next_reading()
        # One pod replaced per reading, as d384churn's churn does.
        leaving = live.pop(rng.randrange(len(live)))
        gone.append((reading, leaving))
        live.append(f"pod-{serial}")
        serial += 1
        for uid in live:
            keys = _pod_keys(uid)
            for key in keys[:2]:
                if derived.get(key) is None:
                    derived.put(key, reading)
            derived.reuse(keys[2], ("generation", 1), lambda uid=uid: ("finding", uid))
        derived.touched({key for uid in live for key in _pod_keys(uid)})  # the pod checks' shared set
        # This reading's keys and the previous one's: 3 per live pod, one pod's worth more (the pod that went), and
        # the shared set of each reading.
        assert len(derived) <= 3 * len(live) + 3 + 2
        held = {key[1] for key in derived if key[0] != "derived.touched"}
        assert held <= set(live) | {leaving}
        assert not any(uid in held for at, uid in gone if at < reading)  # a gone pod is gone a reading after
    derived.next_reading()
    derived.next_reading()
    assert len(derived) == 0  # nothing asked for at two readings: nothing held


def test_derived_keeps_a_value_not_asked_for_at_one_reading_for_the_next():
    derived = Derived()
    derived.put("rotated", 1)
    derived.next_reading()  # a reading that did not ask (its source was not re-read this turn)
    derived.next_reading()
    assert derived.get("rotated") is None
    derived.put("rotated", 2)
    derived.next_reading()
    assert derived.get("rotated") == 2  # asked for again: carried on
    derived.next_reading()
    derived.next_reading()
    assert list(derived) == []


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
    steady = len(reader.derived)
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
    # Two pods of the same kind make the same number of entries; the replacements drew their container counts anew.
    assert len(reader.derived) <= steady + 2 * 3 * len(pods)
    # What the reader, its sources' memories and the exposition's caches hold names the live pods, and no other.
    held = repr(list(reader.derived)) + repr(reader._memory) + repr(renderer._lines.previous) + repr(
        renderer._openmetrics_lines.previous
    )
    assert all(pod.uid in held for pod in pods)
    assert not [uid for uid in gone if uid in held]
