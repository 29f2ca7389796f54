"""workloads_by_pod: the workload join pod by pod, keeping an unchanged pod's tuple from one reading to the next while
its generations stay (the per-container metric families reuse what they made of it by the same keys)."""

from __future__ import annotations

from dataclasses import fields, replace

import readings
from fakehost.reference import (
    DEFAULT_CPUSET,
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
