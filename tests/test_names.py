"""The names source: pod and container identities from runtime bundles and var/log/pods."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace

import pytest
from fakehost.pods import ContainerSpec, add_pod, container_id_for, remove_pod
from numawatch.errors import SourceUnavailable
from numawatch.host import HostReader, Inputs
from numawatch.model.workloads import QOS_BURSTABLE, QOS_GUARANTEED, PodIdentity
from numawatch.refresh import FULL, POD_LOG_DIRS
from numawatch.sources import names
from numawatch.sources.names import identity_from_annotations, parse_annotations, parse_pod_log_dir
from source_inputs import Driven

UID = "5f0c3a9e-7b21-4d8e-9c4a-1e2f3a4b5c6d"
OTHER_UID = "0b9e8d7c-6a5f-4e3d-8c2b-a1b2c3d4e5f6"
CID = "c1f1542ce8198c3966101e22f64392a7ac7489d67dafa1023e133176fd439e71"


def containers(*names_):
    return [ContainerSpec(name, cpus="0-3", mems="0") for name in names_]


def vllm_pod(host, **kwargs):
    values = dict(uid=UID, qos=QOS_GUARANTEED, namespace="llm", name="vllm-0", containers=containers("vllm", "proxy"))
    values.update(kwargs)
    return add_pod(host, **values)


# --------------------------------------------------------------------------------------------------- parsers
def test_annotations_are_the_top_level_string_map():
    data = json.dumps(
        {
            "ociVersion": "1.2.0",
            "process": {"env": ["A=1"]},
            "annotations": {"io.kubernetes.cri.sandbox-name": "vllm-0", "odd": 5},
            "linux": {"annotations": {"nested": "ignored"}},
        }
    ).encode()
    assert parse_annotations(data) == {"io.kubernetes.cri.sandbox-name": "vllm-0"}


def test_a_config_without_annotations_has_none():
    assert parse_annotations(b'{"ociVersion": "1.2.0"}') == {}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not valid JSON"),
        (b'{"annotations": {"a": "b"', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"[]", "expected a JSON object, got list"),
        (b'{"annotations": ["a"]}', "'annotations' is a list"),
        (b"[" * 200_000 + b"]" * 200_000, "not valid JSON"),
    ],
)
def test_malformed_config_json_is_rejected_with_a_reason(data, message):
    with pytest.raises(ValueError, match=message):
        parse_annotations(data)


def test_containerd_annotations_give_pod_and_container():
    identity = identity_from_annotations(
        CID,
        "containerd",
        {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.container-name": "vllm",
            "io.kubernetes.cri.sandbox-name": "vllm-0",
            "io.kubernetes.cri.sandbox-namespace": "llm",
            "io.kubernetes.cri.sandbox-uid": UID,
        },
    )
    assert (identity.pod_uid, identity.namespace, identity.pod_name) == (UID, "llm", "vllm-0")
    assert (identity.container_name, identity.container_type, identity.origin) == ("vllm", "container", "containerd")


def test_crio_annotations_give_pod_and_container():
    identity = identity_from_annotations(
        CID,
        "crio",
        {
            "io.kubernetes.cri-o.ContainerType": "sandbox",
            "io.kubernetes.container.name": "POD",
            "io.kubernetes.pod.name": "vllm-0",
            "io.kubernetes.pod.namespace": "llm",
            "io.kubernetes.pod.uid": UID,
        },
    )
    assert (identity.pod_uid, identity.namespace, identity.pod_name) == (UID, "llm", "vllm-0")
    assert (identity.container_name, identity.container_type, identity.origin) == ("POD", "sandbox", "crio")


def test_a_bundle_without_kubernetes_annotations_is_not_a_kubernetes_container():
    assert identity_from_annotations(CID, "crio", {"org.opencontainers.image.title": "podman"}) is None
    assert identity_from_annotations(CID, "containerd", {}) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"llm_vllm-0_{UID}", PodIdentity(UID, "llm", "vllm-0")),
        (f"kube-system_etcd-node1_{'a' * 32}", PodIdentity("a" * 32, "kube-system", "etcd-node1")),
        (f"llm_vllm_0_{UID}", None),
        (f"llm_{UID}", None),
        (f"_vllm-0_{UID}", None),
        ("lost+found", None),
    ],
)
def test_pod_log_directory_names_give_namespace_pod_and_uid(name, expected):
    assert parse_pod_log_dir(name) == expected


# --------------------------------------------------------------------------------------------------- locations
@pytest.mark.parametrize(
    ("runtime", "bundle_root", "config"),
    [
        ("containerd", "k3s", "run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json"),
        ("containerd", "containerd", "run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json"),
        ("crio", "run", "run/containers/storage/overlay-containers/{id}/userdata/config.json"),
        ("crio", "var", "var/lib/containers/storage/overlay-containers/{id}/userdata/config.json"),
    ],
)
def test_names_come_from_each_runtime_bundle_location(fake_host, runtime, bundle_root, config):
    pod = vllm_pod(fake_host, runtime=runtime, bundle_root=bundle_root, pod_logs=False)
    vllm_id = pod.container("vllm").container_id
    assert fake_host.path(config.format(id=vllm_id)).is_file()

    result = names.read(fake_host.paths)

    assert set(result.containers) == {pod.sandbox.container_id, vllm_id, pod.container("proxy").container_id}
    vllm = result.containers[vllm_id]
    assert (vllm.pod_uid, vllm.namespace, vllm.pod_name, vllm.container_name) == (UID, "llm", "vllm-0", "vllm")
    assert (vllm.container_type, vllm.origin) == ("container", runtime)
    assert result.containers[pod.sandbox.container_id].container_type == "sandbox"
    assert result.pods == {UID: PodIdentity(UID, "llm", "vllm-0")}
    assert dict(result.pod_log_containers) == {}


def test_pod_logs_alone_give_pods_and_their_container_names(fake_host):
    vllm_pod(fake_host, bundle_root=None)
    result = names.read(fake_host.paths)
    assert dict(result.containers) == {}
    assert result.pods == {UID: PodIdentity(UID, "llm", "vllm-0")}
    assert result.pod_log_containers == {UID: ("proxy", "vllm")}


def test_bundles_and_pod_logs_are_merged(fake_host):
    vllm_pod(fake_host)
    add_pod(
        fake_host, uid=OTHER_UID, qos=QOS_BURSTABLE, namespace="web", name="nginx", containers=containers("nginx"),
        bundle_root=None,
    )  # fmt: skip
    result = names.read(fake_host.paths)
    assert set(result.pods) == {UID, OTHER_UID}
    assert result.pods[OTHER_UID] == PodIdentity(OTHER_UID, "web", "nginx")
    assert {c.pod_uid for c in result.containers.values()} == {UID}
    assert result.pod_log_containers[OTHER_UID] == ("nginx",)


def test_an_id_in_both_crio_locations_is_named_from_run(fake_host):
    pod = vllm_pod(fake_host, runtime="crio", bundle_root="run", pod_logs=False)
    vllm_id = pod.container("vllm").container_id
    stale = {"annotations": {"io.kubernetes.pod.uid": UID, "io.kubernetes.container.name": "stale"}}
    fake_host.write(f"var/lib/containers/storage/overlay-containers/{vllm_id}/userdata/config.json", json.dumps(stale))
    assert names.read(fake_host.paths).containers[vllm_id].container_name == "vllm"


def test_nothing_anywhere_makes_the_source_unavailable(fake_host):
    fake_host.mkdir("run")
    with pytest.raises(SourceUnavailable, match=r"no container runtime bundles .* and no .*var/log/pods"):
        names.read(fake_host.paths)


def test_empty_runtime_and_log_directories_give_an_empty_result_not_a_failure(fake_host):
    fake_host.mkdir("run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io")
    fake_host.mkdir("var/log/pods")
    result = names.read(fake_host.paths)
    assert (dict(result.containers), dict(result.pods)) == ({}, {})


# --------------------------------------------------------------------------------------------------- malformed
def test_a_malformed_config_json_skips_only_that_container_and_is_logged(fake_host, caplog):
    pod = vllm_pod(fake_host, pod_logs=False)
    broken = pod.container("proxy").container_id
    target = fake_host.write(
        f"run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{broken}/config.json", '{"annotations": {'
    )
    with caplog.at_level(logging.WARNING, logger="numawatch.sources.names"):
        result = names.read(fake_host.paths)
    assert broken not in result.containers
    assert pod.container("vllm").container_id in result.containers
    assert str(target) in caplog.text
    assert "not valid JSON" in caplog.text


def test_an_oversized_config_json_is_skipped(fake_host, monkeypatch, caplog):
    monkeypatch.setattr(names, "CONFIG_READ_LIMIT", 200)
    pod = vllm_pod(fake_host, pod_logs=False)
    with caplog.at_level(logging.WARNING, logger="numawatch.sources.names"):
        result = names.read(fake_host.paths)
    assert pod.container("vllm").container_id not in result.containers
    assert "larger than the 200-byte limit" in caplog.text


def test_a_bundle_whose_config_json_is_not_written_yet_is_skipped_and_read_later(fake_host):
    pod = vllm_pod(fake_host, pod_logs=False)
    vllm_id = pod.container("vllm").container_id
    config = fake_host.path(f"run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{vllm_id}/config.json")
    content = config.read_bytes()
    config.unlink()
    reader = HostReader(fake_host.paths, [names.SOURCE])

    assert vllm_id not in reader.read().names.containers
    config.write_bytes(content)  # same listing: only the pending flag makes the reader look again
    assert vllm_id in reader.read().names.containers


def test_a_rewritten_config_json_is_parsed_again(fake_host):
    pod = vllm_pod(fake_host, pod_logs=False)
    vllm_id = pod.container("vllm").container_id
    names.read(fake_host.paths)
    config = f"run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{vllm_id}/config.json"
    spec = json.loads(fake_host.path(config).read_text())
    spec["annotations"]["io.kubernetes.cri.container-name"] = "vllm-renamed"
    fake_host.write(config, json.dumps(spec))
    assert names.read(fake_host.paths).containers[vllm_id].container_name == "vllm-renamed"


# --------------------------------------------------------------------------------------------------- incremental
# (tests/test_names_incremental.py drives random sequences of changes against a full read)
def test_a_reading_after_nothing_changed_hands_out_the_previous_snapshot_unchanged(fake_host):
    vllm_pod(fake_host)
    driven = Driven(names.SOURCE, stagger=4)
    first = driven.read(fake_host.paths)
    carried = names.read_incremental(fake_host.paths, Inputs({}), replace(FULL, memory=driven.memory, whole=False))
    assert carried.unchanged and carried.snapshot is first
    assert driven.read(fake_host.paths) is first


def test_a_pod_added_or_removed_is_seen_at_the_next_reading(fake_host):
    pod = vllm_pod(fake_host)
    driven = Driven(names.SOURCE, stagger=4)
    driven.read(fake_host.paths)
    other = add_pod(fake_host, uid=OTHER_UID, qos=QOS_BURSTABLE, namespace="web", name="n", containers=containers("n"))
    added = driven.read(fake_host.paths)
    assert set(added.pods) == {UID, OTHER_UID} and added == names.read(fake_host.paths)
    remove_pod(fake_host, other)
    remove_pod(fake_host, pod)
    gone = driven.read(fake_host.paths)
    assert (dict(gone.pods), dict(gone.containers), dict(gone.pod_log_containers)) == ({}, {}, {})


@pytest.mark.parametrize("settled", [False, True])
def test_a_container_log_directory_appearing_is_seen_at_its_pods_turn(fake_host, settled):
    vllm_pod(fake_host, bundle_root=None)
    log_dir = fake_host.path(f"var/log/pods/llm_vllm-0_{UID}")
    if settled:  # its mtime old enough to stand for its listing: the new entry moves it
        old = time.time_ns() - 10 * names.RACY_SECONDS * 1_000_000_000
        os.utime(log_dir, ns=(old, old))
    driven = Driven(names.SOURCE, stagger=4)
    assert driven.read(fake_host.paths).pod_log_containers[UID] == ("proxy", "vllm")
    fake_host.mkdir(f"var/log/pods/llm_vllm-0_{UID}/init-weights")
    seen = [
        driven.read(fake_host.paths).pod_log_containers[UID] == ("init-weights", "proxy", "vllm")
        for _ in range(driven.readings_per_round(POD_LOG_DIRS))
    ]
    # Settled, it is stat'ed again in its turn of the round; not settled (a directory changed within the last
    # RACY_SECONDS), at every reading.
    assert seen[-1] and all(seen[seen.index(True) :])
    assert seen[0] or settled
    assert driven.read(fake_host.paths) == names.read(fake_host.paths)


def test_host_reader_reuses_names_until_a_container_comes(fake_host):
    vllm_pod(fake_host)
    reader = HostReader(fake_host.paths, [names.SOURCE])
    first = reader.read()
    second = reader.read()
    assert second.statuses["names"].cached is True
    assert second.names is first.names
    add_pod(fake_host, uid=OTHER_UID, qos=QOS_BURSTABLE, namespace="web", name="n", containers=containers("n"))
    third = reader.read()
    assert third.statuses["names"].cached is False
    assert OTHER_UID in third.names.pods


def test_names_and_cgroups_agree_on_container_ids(fake_host):
    from numawatch.sources import cgroups

    pod = vllm_pod(fake_host)
    cgroup_ids = {c.container_id for p in cgroups.read(fake_host.paths).pods for c in p.containers}
    named = names.read(fake_host.paths).containers
    assert cgroup_ids == set(named)
    assert named[container_id_for(UID, "vllm")].container_name == "vllm"
    assert named[pod.sandbox.container_id].container_type == "sandbox"
