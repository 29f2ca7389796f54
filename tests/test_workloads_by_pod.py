"""workloads_by_pod: the workload join pod by pod, keeping an unchanged pod's tuple from one reading to the next while
its generations stay (the per-container metric families reuse what they made of it by the same keys)."""

from __future__ import annotations

from dataclasses import fields, replace

import readings
from fakehost.reference import (
    DEFAULT_CPUSET,
    TRTLLM,
    VLLM,
    reference_snapshot,
    replace_container,
    with_source_down,
)
from numawatch.intent import REFERENCE, Intent
from numawatch.model.workloads import ContainerCgroup
from numawatch.workloads import _layout_of, build_workloads, workloads_by_pod


def test_the_pods_workloads_concatenate_to_the_join_in_cgroup_order():
    host = reference_snapshot()

    per_pod = workloads_by_pod(host, REFERENCE)

    assert len(per_pod) == len(host.cgroups.pods)
    assert tuple(w for pod in per_pod for w in pod) == build_workloads(host, REFERENCE)
    for pod, workloads in zip(host.cgroups.pods, per_pod, strict=True):
        assert {w.pod_uid for w in workloads} <= {pod.uid}


def test_an_unchanged_pod_keeps_its_tuple_and_a_changed_one_gets_a_new_one():
    first = readings.as_reading(reference_snapshot())
    before = workloads_by_pod(first, REFERENCE)
    drifted = replace_container(first, VLLM.container.container_id, cpus_effective=DEFAULT_CPUSET)
    # The cgroups source hands out unchanged pods again: only the drifted pod is a new one (a new generation).
    pods = tuple(
        new if new.uid == VLLM.uid else old for old, new in zip(first.cgroups.pods, drifted.cgroups.pods, strict=True)
    )
    second = readings.next_reading(first, cgroups=replace(drifted.cgroups, pods=pods))

    after = workloads_by_pod(second, REFERENCE)

    for pod, old, new in zip(pods, before, after, strict=True):
        assert (new is old) == (pod.uid != VLLM.uid)
    assert after == workloads_by_pod(readings.from_scratch(second), REFERENCE)  # equal to a join from scratch
    # A Host not made by a HostReader (no generations), even beside that chain's store: joined anew.
    one_off = replace(reference_snapshot(), store=second.store)
    assert not any(new is old for new, old in zip(workloads_by_pod(one_off, REFERENCE), after, strict=True) if old)


def test_another_intent_has_its_own_per_pod_join():
    host = reference_snapshot()
    intent = Intent(pin_gpu_containers=False)

    assert workloads_by_pod(host, intent) is not workloads_by_pod(host, REFERENCE)
    assert not any(w.must_pin for pod in workloads_by_pod(host, intent) for w in pod)


def test_without_cgroups_there_are_no_pods():
    assert workloads_by_pod(with_source_down(reference_snapshot(), "cgroups"), REFERENCE) == ()


def test_the_layout_a_pod_is_keyed_by_holds_every_field_of_its_containers_but_numa_bytes():
    # _layout_of lists them by hand (a tuple is cheaper than a copy): a field added to ContainerCgroup must be added
    # there, or a per-pod value that reads no numa_bytes would be reused when that field moved.
    pod = reference_snapshot().cgroups.pods[0]
    container = pod.containers[0]
    listed = _layout_of(pod)[2][0]
    values = tuple(getattr(container, f.name) for f in fields(ContainerCgroup) if f.name != "numa_bytes")
    assert listed == values
    assert _layout_of(replace(pod, containers=(replace(container, numa_bytes={0: 1}),)))[2] == (values,)


def test_a_pod_whose_only_change_is_its_memory_numbers_is_not_joined_again_and_reads_the_new_numbers(monkeypatch):
    import numawatch.workloads as workloads

    first = readings.as_reading(reference_snapshot())
    before = workloads_by_pod(first, REFERENCE)
    moved = {0: 1 << 20, 1: 7 << 30}
    drifted = replace_container(first, VLLM.container.container_id, numa_bytes=moved)
    pods = tuple(
        new if new.uid == VLLM.uid else old for old, new in zip(first.cgroups.pods, drifted.cgroups.pods, strict=True)
    )
    second = readings.next_reading(first, cgroups=replace(drifted.cgroups, pods=pods))
    joined: list[str] = []
    real = workloads._join_pod
    monkeypatch.setattr(workloads, "_join_pod", lambda pod, shared: joined.append(pod.uid) or real(pod, shared))

    after = workloads_by_pod(second, REFERENCE)

    assert joined == []  # the same layout: the last join over the new container objects
    vllm = next(pod for pod in after if pod and pod[0].pod_uid == VLLM.uid)
    assert next(w for w in vllm if w.container_id == VLLM.container.container_id).numa_bytes == moved
    assert after == workloads_by_pod(readings.from_scratch(second), REFERENCE)  # equal to a join from scratch
    assert [new is old for new, old in zip(after, before, strict=True)] == [
        pod.uid != VLLM.uid for pod in second.cgroups.pods
    ]


def test_a_join_over_new_container_objects_keeps_every_other_field_of_each_workload():
    # _over_containers calls Workload's constructor field by field (cheaper than dataclasses.replace): a field added
    # to Workload must be added there too, or a pod whose memory numbers moved would lose it.
    from numawatch.workloads import Workload, _over_containers

    assert [f.name for f in fields(Workload)] == [
        "pod_uid", "qos", "namespace", "pod_name", "container_name", "container_id", "cgroup", "exclusive_cpus",
        "gpus", "memory_blocks", "must_pin",
    ]  # fmt: skip
    host = reference_snapshot()
    for pod, workloads in zip(host.cgroups.pods, workloads_by_pod(host, REFERENCE), strict=True):
        moved = replace(pod, containers=tuple(replace(c, numa_bytes={0: 4096}) for c in pod.containers))
        by_id = {c.container_id: c for c in moved.containers}
        assert _over_containers(workloads, moved) == tuple(replace(w, cgroup=by_id[w.container_id]) for w in workloads)


def _renamed(names, container_id: str, container_name: str):
    """``names`` with the container's name changed (a new identity object), everything else the same objects."""
    from numawatch.model import frozen_map

    containers = dict(names.containers)
    containers[container_id] = replace(containers[container_id], container_name=container_name)
    return replace(names, containers=frozen_map(containers))


def test_the_names_entries_that_moved_are_told_from_those_that_did_not():
    from numawatch.model import frozen_map
    from numawatch.workloads import _names_moved

    names = reference_snapshot().names
    vllm, trtllm = VLLM.container.container_id, TRTLLM.container.container_id
    assert _names_moved(names, names) == frozenset()
    assert _names_moved(None, names) is None and _names_moved(names, None) is None
    # An equal entry in a new object has not moved; a changed one has.
    copied = replace(names, containers=frozen_map({k: replace(v) for k, v in names.containers.items()}))
    assert _names_moved(names, copied) == frozenset()
    assert _names_moved(names, _renamed(names, vllm, "vllm-2")) == {vllm}
    # Added and removed, in each of the three mappings.
    fewer = replace(names, containers=frozen_map({k: v for k, v in names.containers.items() if k != trtllm}))
    assert _names_moved(names, fewer) == {trtllm} == _names_moved(fewer, names)
    pods = replace(names, pods=frozen_map({k: v for k, v in names.pods.items() if k != VLLM.uid}))
    assert _names_moved(names, pods) == {VLLM.uid}
    logs = replace(names, pod_log_containers=frozen_map({**names.pod_log_containers, TRTLLM.uid: ("trtllm", "x")}))
    assert names.pod_log_containers.get(TRTLLM.uid) != ("trtllm", "x")
    assert _names_moved(names, logs) == {TRTLLM.uid}


def test_a_container_renamed_rejoins_its_pod_only_and_the_join_equals_one_from_scratch(monkeypatch):
    import numawatch.workloads as workloads

    first = readings.as_reading(reference_snapshot())
    before = workloads_by_pod(first, REFERENCE)
    second = readings.next_reading(first, names=_renamed(first.names, VLLM.container.container_id, "vllm-renamed"))
    joined: list[str] = []
    real = workloads._join_pod
    monkeypatch.setattr(workloads, "_join_pod", lambda pod, shared: joined.append(pod.uid) or real(pod, shared))
    viewed: list[str] = []
    view = workloads._NamesOf.__call__
    monkeypatch.setattr(workloads._NamesOf, "__call__", lambda self, pod: viewed.append(pod.uid) or view(self, pod))

    after = workloads_by_pod(second, REFERENCE)

    assert joined == [VLLM.uid]
    assert viewed == [VLLM.uid]  # the other pods' names were not looked up again: none of their entries moved
    assert [new is old for new, old in zip(after, before, strict=True)] == [
        pod.uid != VLLM.uid for pod in second.cgroups.pods
    ]
    vllm = next(pod for pod in after if pod and pod[0].pod_uid == VLLM.uid)
    assert [w.container_name for w in vllm] == ["vllm-renamed"]
    assert after == workloads_by_pod(readings.from_scratch(second), REFERENCE)
    # Renamed back at the next reading: joined again, with its first name.
    joined.clear()
    third = readings.next_reading(second, names=first.names)
    assert workloads_by_pod(third, REFERENCE) == before
    assert joined == [VLLM.uid]
