"""The pod_resources source, its place in the workloads join and kubelet_podresources_checkpoint_mismatch, against a
real gRPC server on a Unix socket in the fake host's tree speaking the API's messages (tests/podresources_server.py),
fed from the reference node's pods."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.reference import (
    GPUS,
    NODE_EXPORTER,
    PODS,
    TRTLLM,
    VLLM,
    ReferenceNode,
    RefPod,
    reference_node,
    reference_snapshot,
    with_results,
    with_source_down,
)
from numawatch import capture, podresources
from numawatch.checks import Evaluation, evaluate, kubelet_live
from numawatch.cli import build_parser, make_paths
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import Host, HostReader, read_host
from numawatch.intent import REFERENCE
from numawatch.model import frozen_map
from numawatch.model.kubelet import ContainerResources, KubeletState, PodResources, ResourceDevices
from numawatch.paths import Paths
from numawatch.sources import pod_resources
from numawatch.workloads import build_workloads, workloads_by_pod
from podresources_server import (
    SOCKET,
    Behaviour,
    Held,
    allocatable_response,
    api,
    container_message,
    list_response,
    serving,
)
from readings import as_reading, from_scratch, next_reading

CHECK = "kubelet_podresources_checkpoint_mismatch"
SOCKET_HOST_PATH = "/" + SOCKET


def held_of(node: ReferenceNode, pod: RefPod) -> Held:
    """What the reference node's kubelet holds for ``pod``'s container: what its checkpoints say."""
    devices: dict[str, dict[int | None, list[str]]] = {}
    if pod.gpus:
        numa = node.device_numa[pod.uid]
        devices[node.resource] = {None if numa < 0 else numa: [node.device_id(g) for g in pod.gpus]}
    return Held(
        cpus=node.exclusive.get(pod.uid, ()),
        devices=devices,
        memory=[(b.type, b.size, b.numa_affinity) for b in pod.memory_blocks],
    )


def answers(node: ReferenceNode, **changed: Held) -> dict[tuple[str, str], dict[str, Held]]:
    """The List answer of the reference node, with some pods' containers (by pod name) holding something else."""
    return {
        (pod.namespace, pod.name): {pod.container.name: changed.get(pod.name, held_of(node, pod))} for pod in PODS
    }


def behaviour(node: ReferenceNode, **changed: Held) -> Behaviour:
    devices = {node.resource: {gpu.numa_node: [node.device_id(gpu)] for gpu in GPUS[:1]}}
    return Behaviour(
        list_bytes=list_response(answers(node, **changed)),
        allocatable_bytes=allocatable_response(range(32), devices),
    )


@pytest.fixture
def node(tmp_path: Path) -> ReferenceNode:
    return reference_node(FakeHost(tmp_path / "host"))


def mismatches(evaluation: Evaluation) -> list[dict[str, str]]:
    return [dict(f.labels) for f in evaluation.findings if f.check == CHECK]


def not_evaluated(evaluation: Evaluation) -> dict[str, str]:
    return {item.check: item.reason for item in evaluation.not_evaluated}


def finding_keys(evaluation: Evaluation) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(f.check, tuple(sorted(f.labels.items()))) for f in evaluation.findings}


# --------------------------------------------------------------------------------------------------- agree / differ
def test_a_kubelet_that_agrees_with_its_checkpoints_adds_no_finding(node: ReferenceNode) -> None:
    without = node.evaluate()
    with serving(node.host.root, behaviour(node)) as served:
        host = node.read()
        evaluation = evaluate(host, REFERENCE)
    assert host.statuses["pod_resources"].up, host.down_reason("pod_resources")
    assert CHECK not in not_evaluated(evaluation)
    assert mismatches(evaluation) == []
    assert finding_keys(evaluation) == finding_keys(without)
    assert served.calls == [podresources.LIST, podresources.GET_ALLOCATABLE, podresources.GET]
    live = host.pod_resources
    assert live is not None and live.get_served is True
    assert live.allocatable_cpus == frozenset(range(32))
    assert live.pods[(VLLM.namespace, VLLM.name)][VLLM.container.name].exclusive_cpus == VLLM.exclusive


def test_a_container_whose_live_cpus_differ_from_the_checkpoint_fires_and_the_join_takes_the_live_ones(
    node: ReferenceNode,
) -> None:
    moved = frozenset({1, 2, 3, 5, 17, 18, 19, 21})
    changed = held_of(node, VLLM)
    changed.cpus = moved
    with serving(node.host.root, behaviour(node, **{VLLM.name: changed})):
        host = node.read()
        evaluation = evaluate(host, REFERENCE)
    (finding,) = [f for f in evaluation.findings if f.check == CHECK]
    assert dict(finding.labels) == {
        "namespace": VLLM.namespace,
        "pod": VLLM.name,
        "pod_uid": VLLM.uid,
        "container": VLLM.container.name,
    }
    assert "exclusive CPUs 1-3,5,17-19,21 live, 1-4,17-20 in /var/lib/kubelet/cpu_manager_state" in finding.message
    (vllm,) = [w for w in build_workloads(host, REFERENCE) if w.pod_uid == VLLM.uid]
    assert vllm.exclusive_cpus == moved


def test_live_devices_and_memory_that_differ_fire_each_naming_its_file(node: ReferenceNode) -> None:
    changed = held_of(node, TRTLLM)
    changed.devices = {node.resource: {1: [node.device_id(GPUS[2])]}}  # one GPU of its two
    changed.memory = [("memory", 8 << 30, (1,))]
    with serving(node.host.root, behaviour(node, **{TRTLLM.name: changed})):
        host = node.read()
        evaluation = evaluate(host, REFERENCE)
    (finding,) = [f for f in evaluation.findings if f.check == CHECK]
    assert finding.labels["pod"] == TRTLLM.name
    assert "kubelet_internal_checkpoint" in finding.message and "memory_manager_state" in finding.message
    (trtllm,) = [w for w in build_workloads(host, REFERENCE) if w.pod_uid == TRTLLM.uid]
    assert [g.device_id for g in trtllm.gpus] == [node.device_id(GPUS[2])]
    assert [b.size for b in trtllm.memory_blocks] == [8 << 30]


def test_a_device_listed_without_topology_is_filed_under_no_node_as_the_checkpoint_does(node: ReferenceNode) -> None:
    changed = held_of(node, VLLM)
    changed.devices = {node.resource: {None: [node.device_id(g) for g in VLLM.gpus]}}
    with serving(node.host.root, behaviour(node, **{VLLM.name: changed})):
        host = node.read()
        evaluation = evaluate(host, REFERENCE)
    (vllm,) = [w for w in build_workloads(host, REFERENCE) if w.pod_uid == VLLM.uid]
    assert all(g.plugin_without_topology and not g.plugin_numa_nodes for g in vllm.gpus)
    (finding,) = [f for f in evaluation.findings if f.check == CHECK]
    assert finding.labels["pod"] == VLLM.name


def test_a_pod_the_kubelet_does_not_list_keeps_its_checkpoint_assignments(node: ReferenceNode) -> None:
    live = answers(node)
    del live[(VLLM.namespace, VLLM.name)]
    with serving(node.host.root, Behaviour(list_bytes=list_response(live))):
        host = node.read()
        evaluation = evaluate(host, REFERENCE)
    (vllm,) = [w for w in build_workloads(host, REFERENCE) if w.pod_uid == VLLM.uid]
    assert vllm.exclusive_cpus == VLLM.exclusive
    assert mismatches(evaluation) == []


# --------------------------------------------------------------------------------------------------- fallbacks
def test_without_the_socket_the_source_is_down_the_check_not_evaluated_and_the_checkpoints_stand(
    node: ReferenceNode,
) -> None:
    host = node.read()
    assert host.down_reason("pod_resources") == f"no pod-resources socket at {SOCKET_HOST_PATH}"
    evaluation = evaluate(host, REFERENCE)
    assert "needs the pod_resources source" in not_evaluated(evaluation)[CHECK]
    (vllm,) = [w for w in build_workloads(host, REFERENCE) if w.pod_uid == VLLM.uid]
    assert vllm.exclusive_cpus == VLLM.exclusive


def test_without_checkpoint_files_the_check_is_not_evaluated(node: ReferenceNode) -> None:
    for name in ("cpu_manager_state", "memory_manager_state", "device-plugins/kubelet_internal_checkpoint"):
        node.host.remove(f"var/lib/kubelet/{name}")
    with serving(node.host.root, behaviour(node)):
        evaluation = node.evaluate()
    assert "no checkpoint file" in not_evaluated(evaluation)[CHECK]


def test_a_kubelet_that_hangs_is_given_up_on_at_the_deadline_and_the_checkpoints_stand(node: ReferenceNode) -> None:
    hanging = behaviour(node)
    hanging.hang = 10.0
    with serving(node.host.root, hanging):
        start = time.monotonic()
        host = node.read()
        took = time.monotonic() - start
    assert took < podresources.DEADLINE_SECONDS + 1.5
    assert host.down_reason("pod_resources") == f"pod-resources socket {SOCKET_HOST_PATH}: List: no answer within 1 s"
    (vllm,) = [w for w in build_workloads(host, REFERENCE) if w.pod_uid == VLLM.uid]
    assert vllm.exclusive_cpus == VLLM.exclusive


def test_a_socket_nobody_listens_on_is_a_refused_connection(node: ReferenceNode) -> None:
    path = node.host.path(SOCKET)
    path.parent.mkdir(parents=True)
    short = Path(os.path.dirname(path)) / "s"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(short))
    listener.close()  # the file stays, nothing listens
    os.rename(short, path)
    with pytest.raises(SourceUnavailable, match="refused the connection"):
        pod_resources.read(node.paths)


def test_a_regular_file_where_the_socket_should_be_is_not_connected_to(node: ReferenceNode) -> None:
    node.host.write(SOCKET, "not a socket")
    with pytest.raises(SourceUnavailable) as raised:
        pod_resources.read(node.paths)
    assert str(raised.value) == f"not a socket (a regular file): {SOCKET_HOST_PATH}"


def test_a_symlink_to_a_socket_outside_the_root_resolves_inside_it(node: ReferenceNode, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    with serving(outside, behaviour(node)) as served:
        node.host.mkdir("var/lib/kubelet/pod-resources")
        node.host.symlink(SOCKET, str(outside / SOCKET))
        with pytest.raises(SourceUnavailable, match="no pod-resources socket"):
            pod_resources.read(node.paths)
    assert served.calls == []


def test_get_answered_unimplemented_or_refused_by_the_feature_gate_is_recorded_and_nothing_else_changes(
    node: ReferenceNode,
) -> None:
    for get, served in (("unimplemented", False), ("disabled", False), ("served", True)):
        answering = behaviour(node)
        answering.get = get
        with serving(node.host.root, answering):
            live = pod_resources.read(node.paths)
        assert live.get_served is served, get
        assert len(live.pods) == len(PODS)


def test_a_kubelet_without_get_allocatable_resources_still_lists() -> None:
    class Old(podresources.Client):
        def __init__(self) -> None:
            pass

        def list(self) -> bytes:
            return b""

        def allocatable(self) -> bytes:
            raise podresources.Unsupported("the kubelet does not serve GetAllocatableResources")

    listed, allocatable, get_served = pod_resources._ask(Old(), None)
    assert (listed, allocatable, get_served) == (b"", None, None)


def test_an_unchanged_answer_keeps_the_generation_and_a_changed_one_moves_it(node: ReferenceNode) -> None:
    answering = behaviour(node)
    with serving(node.host.root, answering):
        reader = HostReader(node.paths)
        first = reader.read()
        second = reader.read()
        changed = held_of(node, VLLM)
        changed.cpus = frozenset({1, 2})
        answering.list_bytes = list_response(answers(node, **{VLLM.name: changed}))
        third = reader.read()
    assert first.generation("pod_resources") == second.generation("pod_resources")
    assert third.generation("pod_resources") != second.generation("pod_resources")
    (vllm,) = [w for w in build_workloads(third, REFERENCE) if w.pod_uid == VLLM.uid]
    assert vllm.exclusive_cpus == frozenset({1, 2})
    assert [f.labels["pod"] for f in evaluate(third, REFERENCE).findings if f.check == CHECK] == [VLLM.name]


# --------------------------------------------------------------------------------------------------- hostile answers
def _pod_bytes(namespace: str, name: str, container: str, held: Held) -> bytes:
    pb = api()
    return pb.ListPodResourcesResponse(
        pod_resources=[
            pb.PodResources(name=name, namespace=namespace, containers=[container_message(pb, container, held)])
        ]
    ).SerializeToString()


@pytest.mark.parametrize(
    ("namespace", "name", "container", "held", "said"),
    [
        ("inference", "vllm\nlevel=error", "vllm", Held(), "pod name 'vllm\\nlevel=error'"),
        ("Inference", "vllm", "vllm", Held(), "namespace 'Inference'"),
        ("inference", "vllm", "../../etc", Held(), "container name '../../etc'"),
        ("inference", "vllm", "vllm", Held(cpus=[1, 9000]), "CPU 9000 is out of range"),
        ("inference", "vllm", "vllm", Held(cpus=[-1]), "CPU -1 is out of range"),
        ("inference", "vllm", "vllm", Held(devices={"nvidia.com/gpu x": {0: ["GPU-0"]}}), "resource name"),
        ("inference", "vllm", "vllm", Held(devices={"nvidia.com/gpu": {0: ["GPU 0"]}}), "device ID 'GPU 0'"),
        ("inference", "vllm", "vllm", Held(devices={"nvidia.com/gpu": {5000: ["GPU-0"]}}), "NUMA node 5000"),
        ("inference", "vllm", "vllm", Held(memory=[("memory\x1b[2J", 1, [0])]), "memory type"),
    ],
)
def test_hostile_names_and_numbers_make_the_answer_malformed_naming_the_socket(
    tmp_path: Path, namespace: str, name: str, container: str, held: Held, said: str
) -> None:
    answer = Behaviour(list_bytes=_pod_bytes(namespace, name, container, held))
    with serving(tmp_path, answer), pytest.raises(MalformedFile) as raised:
        pod_resources.read(Paths.from_root(tmp_path))
    assert raised.value.path == SOCKET_HOST_PATH
    assert said in raised.value.what
    assert "\n" not in str(raised.value) and "\x1b" not in str(raised.value)


def test_a_pod_listed_twice_is_malformed(tmp_path: Path) -> None:
    once = _pod_bytes("inference", "vllm", "vllm", Held())
    twice = Behaviour(list_bytes=once + once)  # two occurrences of a repeated field: two pods
    with serving(tmp_path, twice), pytest.raises(MalformedFile, match="pod inference/vllm is listed twice"):
        pod_resources.read(Paths.from_root(tmp_path))


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"\x0a\x05abc", "runs past the end of the message"),
        (b"\x0a", "truncated varint"),
        (b"\x0b", "wire type 3"),
        (b"\x08\x01", "has wire type 0, expected 2"),
        (b"\x0a\x04\x0a\x02\xff\xfe", "not valid UTF-8"),
        (b"\x0a" + b"\xff" * 11, "varint longer than"),
    ],
)
def test_answers_that_are_not_the_messages_are_malformed(tmp_path: Path, answer: bytes, said: str) -> None:
    with serving(tmp_path, Behaviour(list_bytes=answer)), pytest.raises(MalformedFile, match="pod-resources") as raised:
        pod_resources.read(Paths.from_root(tmp_path))
    assert "not a pod-resources answer" in str(raised.value)
    assert said in str(raised.value)


# --------------------------------------------------------------------------------------------------- the codec
def decode_list(data: bytes) -> tuple[podresources.Pod, ...]:
    return tuple(podresources.decode_pod(message) for message in podresources.pod_messages(data))


def test_the_codec_reads_what_protobuf_writes_packed_or_not_with_unknown_fields_skipped() -> None:
    pb = api()
    message = container_message(pb, "vllm", Held(cpus=[0, 5, 4095], memory=[("hugepages-1Gi", 2 << 30, [1])]))
    packed = pb.ListPodResourcesResponse(
        pod_resources=[pb.PodResources(name="p", namespace="n", containers=[message])]
    ).SerializeToString()
    (pod,) = decode_list(packed)
    (container,) = pod.containers
    assert container.cpu_ids == (0, 5, 4095)
    assert container.memory == (podresources.Memory("hugepages-1Gi", 2 << 30, (1,)),)
    # The same CPUs unpacked (one varint each), a DRA dynamic_resources field (5) and an unknown field (15).
    unpacked = b"\x0a\x04vllm" + b"\x18\x00\x18\x05\x18\xff\x1f" + b"\x2a\x02\x12\x00" + b"\x78\x01"
    pod_bytes = b"\x0a\x01p\x12\x01n\x1a" + bytes([len(unpacked)]) + unpacked
    (again,) = decode_list(b"\x0a" + bytes([len(pod_bytes)]) + pod_bytes)
    assert again.containers[0].cpu_ids == (0, 5, 4095)


def test_negative_int64_values_decode_as_negative() -> None:
    pb = api()
    data = pb.AllocatableResourcesResponse(cpu_ids=[-1, 3]).SerializeToString()
    assert podresources.decode_allocatable_response(data).cpu_ids == (-1, 3)


def test_the_get_request_is_what_protobuf_reads() -> None:
    pb = api()
    asked = pb.GetPodResourcesRequest.FromString(podresources.encode_get_request("vllm-0", "inference"))
    assert (asked.pod_name, asked.pod_namespace) == ("vllm-0", "inference")


def test_a_get_answer_decodes_its_pod() -> None:
    pb = api()
    data = pb.GetPodResourcesResponse(pod_resources=pb.PodResources(name="a", namespace="b")).SerializeToString()
    assert podresources.decode_get_response(data) == podresources.Pod("a", "b")
    assert podresources.decode_get_response(b"") is None


# --------------------------------------------------------------------------------------------------- recording, flags
def test_a_recorded_answer_loads_back_equal_and_a_hostile_one_is_refused(node: ReferenceNode) -> None:
    with serving(node.host.root, behaviour(node)):
        live = pod_resources.read(node.paths)
    recording = pod_resources.Recording()
    assert recording.load(recording.dump(live)) == live
    hostile = recording.dump(live).replace(b'"vllm-llama-0"', b'"vllm\\nllama"')
    with pytest.raises(MalformedFile, match="recorded pod_resources reading"):
        recording.load(hostile)
    with pytest.raises(MalformedFile, match="expected a version 1 recording"):
        recording.load(b"{}")


def test_the_socket_follows_the_kubelet_root_and_its_own_flag(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(["check", "--host-root", str(tmp_path), "--path.kubelet", str(tmp_path / "k")])
    assert make_paths(args).pod_resources == tmp_path / "k/pod-resources/kubelet.sock"
    moved = tmp_path / "run/podres.sock"
    args = parser.parse_args(["serve", "--host-root", str(tmp_path), "--path.pod-resources-socket", str(moved)])
    assert make_paths(args).pod_resources == moved


def test_a_socket_given_by_its_flag_is_read(node: ReferenceNode) -> None:
    elsewhere = "run/kubelet/podres.sock"
    with serving(node.host.root, behaviour(node), socket=elsewhere):
        paths = Paths.from_root(node.host.root, pod_resources=node.host.path(elsewhere))
        host = read_host(paths)
    assert host.statuses["pod_resources"].up
    live: Mapping[tuple[str, str], object] | None = host.pod_resources.pods if host.pod_resources else None
    assert live is not None and (NODE_EXPORTER.namespace, NODE_EXPORTER.name) in live



def test_an_unchanged_answer_is_not_decoded_again_nor_get_asked_and_a_changed_pod_alone_is(
    node: ReferenceNode,
) -> None:
    answering = behaviour(node)
    with serving(node.host.root, answering):
        reader = HostReader(node.paths)
        first = reader.read()
        second = reader.read()
        assert second.statuses["pod_resources"].cached
        assert second.pod_resources is first.pod_resources
        assert answering.calls.count(podresources.GET) == 1  # asked at the first reading only
        changed = held_of(node, VLLM)
        changed.cpus = frozenset({1, 2})
        answering.list_bytes = list_response(answers(node, **{VLLM.name: changed}))
        third = reader.read()
        assert answering.calls.count(podresources.GET) == 2  # the answer changed: asked again
        whole = pod_resources.read(node.paths)
    before, after = first.pod_resources, third.pod_resources
    assert before is not None and after is not None
    trtllm = (TRTLLM.namespace, TRTLLM.name)
    assert after.pods[trtllm] is before.pods[trtllm]  # an unchanged pod's message: what it was checked into, kept
    assert after.pods[(VLLM.namespace, VLLM.name)][VLLM.container.name].exclusive_cpus == frozenset({1, 2})
    assert after == whole  # the incremental reading gives what a whole one gives


def test_capture_keeps_the_answer_and_copies_no_socket(node: ReferenceNode, tmp_path: Path) -> None:
    bundle = tmp_path / "node.tar.gz"
    with serving(node.host.root, behaviour(node)):
        live = pod_resources.read(node.paths)
        capture.capture(node.paths, REFERENCE, bundle)
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(next(n for n in names if n.endswith(capture.MANIFEST))).read())
        member = manifest["readings"]["pod_resources"]
        recorded = tar.extractfile(next(n for n in names if n.endswith(member))).read()
    assert not any(name.endswith("kubelet.sock") for name in names)
    assert pod_resources.Recording().load(recorded) == live


def test_a_capture_without_the_socket_records_why(node: ReferenceNode, tmp_path: Path) -> None:
    bundle = tmp_path / "node.tar.gz"
    capture.capture(node.paths, REFERENCE, bundle)
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(next(n for n in names if n.endswith(capture.MANIFEST))).read())
    assert manifest["down"]["pod_resources"] == f"no pod-resources socket at {SOCKET_HOST_PATH}"


# --------------------------------------------------------------------------------------------------- the join, reused
def _live(state: KubeletState, **cpus: frozenset[int]) -> PodResources:
    """The reference snapshot's kubelet answering what its checkpoints say, some pods' (by name) CPUs changed."""
    assert state.cpu is not None and state.memory is not None and state.devices is not None
    pods = {}
    for pod in PODS:
        devices = tuple(
            ResourceDevices(entry.resource_name, entry.devices_per_numa)
            for entry in state.devices.entries
            if entry.pod_uid == pod.uid
        )
        held = ContainerResources(
            exclusive_cpus=cpus.get(pod.name, state.cpu.entries.get(pod.uid, {}).get(pod.container.name, frozenset())),
            devices=devices,
            memory_blocks=tuple(state.memory.entries.get(pod.uid, {}).get(pod.container.name, ())),
        )
        pods[(pod.namespace, pod.name)] = frozen_map({pod.container.name: held})
    return PodResources(SOCKET_HOST_PATH, frozen_map(pods))


def test_the_join_reused_across_readings_is_the_join_made_from_scratch() -> None:
    reference = reference_snapshot()
    state = reference.kubelet_state
    assert state is not None
    first = as_reading(with_results(reference, pod_resources=_live(state)))
    readings = [first]
    # The kubelet moves one pod's CPUs; then the runtime names that pod otherwise (a pod the kubelet does not list:
    # its checkpoint entries stand); then the kubelet lists it under that name.
    readings.append(next_reading(readings[-1], pod_resources=_live(state, **{VLLM.name: frozenset({1, 2})})))
    names = reference.names
    assert names is not None
    renamed = replace(
        names,
        pods=frozen_map({**names.pods, VLLM.uid: replace(names.pods[VLLM.uid], name="vllm-llama-1")}),
        containers=frozen_map(
            {
                cid: replace(identity, pod_name="vllm-llama-1") if identity.pod_uid == VLLM.uid else identity
                for cid, identity in names.containers.items()
            }
        ),
    )
    readings.append(next_reading(readings[-1], names=renamed))
    relisted = _live(state, **{VLLM.name: frozenset({1, 2})})
    moved = {(ns, "vllm-llama-1" if name == VLLM.name else name): c for (ns, name), c in relisted.pods.items()}
    readings.append(next_reading(readings[-1], pod_resources=replace(relisted, pods=frozen_map(moved))))
    expected_vllm = [VLLM.exclusive, frozenset({1, 2}), VLLM.exclusive, frozenset({1, 2})]
    for reading, cpus in zip(readings, expected_vllm, strict=True):
        joined = build_workloads(reading, REFERENCE)
        assert joined == build_workloads(from_scratch(reading), REFERENCE)
        (vllm,) = [w for w in joined if w.pod_uid == VLLM.uid]
        assert vllm.exclusive_cpus == cpus
    # A pod whose entries did not change keeps the tuple its join made at the reading before.
    before, after = (workloads_by_pod(reading, REFERENCE) for reading in readings[:2])
    at = [pod.uid for pod in readings[0].cgroups.pods].index(TRTLLM.uid)  # type: ignore[union-attr]
    assert after[at] is before[at]


# --------------------------------------------------------------------------------------------------- the check alone
def _checked(host: Host) -> Evaluation:
    return evaluate(host, REFERENCE, [kubelet_live.MISMATCH])


def test_the_check_on_the_model_fires_on_cpus_and_is_clean_when_they_agree() -> None:
    reference = reference_snapshot()
    state = reference.kubelet_state
    assert state is not None
    assert mismatches(_checked(with_results(reference, pod_resources=_live(state)))) == []
    moved = with_results(reference, pod_resources=_live(state, **{VLLM.name: frozenset({1, 2})}))
    assert [f["pod"] for f in mismatches(_checked(moved))] == [VLLM.name]


def test_a_v1_cpu_checkpoint_and_pod_level_entries_are_not_compared() -> None:
    reference = reference_snapshot()
    state = reference.kubelet_state
    assert state is not None and state.cpu is not None
    live = _live(state, **{VLLM.name: frozenset({1, 2})})
    v1 = replace(state, cpu=replace(state.cpu, version=1))
    assert mismatches(_checked(with_results(reference, kubelet_state=v1, pod_resources=live))) == []
    pod_level = replace(state, cpu=replace(state.cpu, pod_entries=frozen_map({VLLM.uid: frozenset({1, 2})})))
    assert mismatches(_checked(with_results(reference, kubelet_state=pod_level, pod_resources=live))) == []


def test_a_pod_whose_uid_the_runtime_does_not_name_or_names_twice_is_not_compared() -> None:
    reference = reference_snapshot()
    state, names = reference.kubelet_state, reference.names
    assert state is not None and names is not None
    live = _live(state, **{VLLM.name: frozenset({1, 2})})
    twin = "00000000-0000-4000-8000-000000000001"
    doubled = replace(names, pods=frozen_map({**names.pods, twin: replace(names.pods[VLLM.uid], uid=twin)}))
    assert mismatches(_checked(with_results(reference, names=doubled, pod_resources=live))) == []
    evaluation = _checked(with_source_down(with_results(reference, pod_resources=live), "names"))
    assert "needs the names source" in not_evaluated(evaluation)[CHECK]


def test_grpcio_is_imported_only_once_a_socket_is_there(tmp_path):
    """serve's modules and a reading of a node without the socket leave grpcio (about 21.5 MB resident) unimported;
    the first connection imports it."""
    script = (
        "import sys\n"
        "from numawatch import cli, server\n"
        "from numawatch.host import read_host\n"
        "from numawatch.paths import Paths\n"
        f"host = read_host(Paths.from_root({str(tmp_path)!r}))\n"
        "assert not host.statuses['pod_resources'].up\n"
        "assert 'grpc' not in sys.modules, 'grpc imported'\n"
        "from numawatch import podresources\n"
        "with podresources.Client('unix:/nonexistent/socket'):\n"
        "    pass\n"
        "assert 'grpc' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
