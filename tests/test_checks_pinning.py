from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.kubelet import write_cpu_manager_state, write_kubelet_config
from fakehost.reference import (
    DEFAULT_CPUSET,
    NODE_EXPORTER,
    ONLINE,
    TRTLLM,
    VLLM,
    GiB,
    MiB,
    reference_node,
    reference_snapshot,
    replace_config,
    replace_container,
    replace_pod,
    replace_state,
    with_results,
    with_source_down,
)
from fakehost.topology import add_topology
from numawatch.checks import all_checks, evaluate
from numawatch.checks import pinning as pinning_checks
from numawatch.cpuset import format_cpulist, parse_cpulist
from numawatch.host import read_host
from numawatch.intent import REFERENCE, Intent, PodSelector
from numawatch.model import frozen_map
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.paths import Paths

VLLM_ID = VLLM.container.container_id
TRTLLM_ID = TRTLLM.container.container_id
EXPORTER_ID = NODE_EXPORTER.container.container_id
VLLM_LABELS = {"namespace": "inference", "pod": "vllm-llama-0", "pod_uid": VLLM.uid, "container": "vllm"}

PINNING_CHECKS = [
    "pod_not_guaranteed",
    "container_not_exclusive",
    "container_cpuset_drift",
    "exclusive_cpu_overlap",
    "container_numa_split",
    "container_gpu_numa_mismatch",
    "container_memory_numa_mismatch",
    "container_memory_remote",
    "container_outside_isolated",
]


def check(check_id: str):
    return next(c for c in all_checks() if c.id == check_id)


def findings(check_id, host, intent=REFERENCE):
    evaluation = evaluate(host, intent, [check(check_id)])
    assert evaluation.not_evaluated == (), evaluation.not_evaluated
    return evaluation.findings


def not_evaluated(check_id, host, intent=REFERENCE) -> str:
    evaluation = evaluate(host, intent, [check(check_id)])
    assert evaluation.findings == ()
    (reason,) = evaluation.not_evaluated
    assert not reason.reason.startswith("internal error"), reason.reason
    return reason.reason


def without_vllm_exclusive_entry(host):
    cpu = host.kubelet_state.cpu
    entries = {uid: c for uid, c in cpu.entries.items() if uid != VLLM.uid}
    return replace_state(host, cpu=replace(cpu, entries=frozen_map(entries), default_cpuset=ONLINE - TRTLLM.exclusive))


@pytest.mark.parametrize("check_id", PINNING_CHECKS)
def test_pinning_check_is_clean_on_the_reference_node(check_id):
    assert findings(check_id, reference_snapshot()) == ()


@pytest.mark.parametrize("check_id", PINNING_CHECKS)
def test_pinning_check_is_not_evaluated_without_cgroups(check_id):
    host = with_source_down(reference_snapshot(), "cgroups", "no cgroup2 mount at /sys/fs/cgroup")

    assert "no cgroup2 mount" in not_evaluated(check_id, host)


# --------------------------------------------------------------------------------------------- pod_not_guaranteed
def test_burstable_gpu_pod_is_not_guaranteed():
    # The seed's gotcha #1: static policy on the node, requests != limits on the pod.
    host = replace_pod(reference_snapshot(), TRTLLM.uid, qos="burstable")

    (finding,) = findings("pod_not_guaranteed", host)

    assert dict(finding.labels) == {"namespace": "inference", "pod": "trtllm-mistral-0", "pod_uid": TRTLLM.uid}
    assert "Burstable" in finding.message and "nvidia.com/gpu" in finding.message
    assert "integer cpu" in finding.remediation


def test_burstable_pod_without_gpus_or_selector_need_not_be_guaranteed():
    assert findings("pod_not_guaranteed", reference_snapshot()) == ()  # node-exporter is Burstable


def test_pod_named_by_an_intent_selector_must_be_guaranteed():
    intent = Intent(pinned=(PodSelector(namespace="kube-system"),))

    (finding,) = findings("pod_not_guaranteed", reference_snapshot(), intent)

    assert finding.labels["pod"] == "node-exporter-x7k2p"
    assert "pinning.pods" in finding.message


def test_gpu_pod_without_names_is_still_known_to_need_pinning_from_the_device_checkpoint():
    host = with_source_down(replace_pod(reference_snapshot(), TRTLLM.uid, qos="besteffort"), "names")
    devices = host.kubelet_state.devices
    # A second container entry makes the checkpoint fallback ambiguous, so the container stays unnamed.
    extra = replace(devices.entries[1], container_name="sidecar")
    host = replace_state(host, devices=replace(devices, entries=(*devices.entries, extra)))

    (finding,) = findings("pod_not_guaranteed", host)

    assert finding.labels["pod_uid"] == TRTLLM.uid
    assert "BestEffort" in finding.message


# --------------------------------------------------------------------------------------------- container_not_exclusive
def test_gpu_container_without_exclusive_cpus_fires_with_the_cause():
    host = without_vllm_exclusive_entry(reference_snapshot())
    host = replace_container(host, VLLM_ID, cpus_effective=ONLINE - TRTLLM.exclusive)

    (finding,) = findings("container_not_exclusive", host)

    assert dict(finding.labels) == VLLM_LABELS
    assert "not an integer" in finding.message


def test_container_not_exclusive_names_the_none_policy_as_the_cause():
    host = without_vllm_exclusive_entry(replace_config(reference_snapshot(), cpu_manager_policy="none"))

    (finding,) = findings("container_not_exclusive", host)

    assert '"none"' in finding.message
    assert 'kubelet-arg "cpu-manager-policy=static"' in finding.remediation


def test_container_not_exclusive_is_not_evaluated_without_cpu_manager_state():
    host = replace_state(reference_snapshot(), cpu=None)

    assert "cpu_manager_state" in not_evaluated("container_not_exclusive", host)


# --------------------------------------------------------------------------------------------- container_cpuset_drift
def test_exclusive_container_whose_cpuset_was_widened_drifts():
    # kubernetes/kubernetes#120230: a daemon-reload resets a Guaranteed pod's cpuset to every CPU.
    host = replace_container(reference_snapshot(), VLLM_ID, cpus_effective=ONLINE)

    (finding,) = findings("container_cpuset_drift", host)

    assert dict(finding.labels) == {**VLLM_LABELS, "cpus": "0-31", "expected": "1-4,17-20"}
    assert "not assigned to it" in finding.message
    assert "daemon-reload" in finding.remediation


def test_shared_pool_container_must_run_on_the_default_cpuset():
    host = replace_container(reference_snapshot(), EXPORTER_ID, cpus_effective=frozenset({0, 8}))

    (finding,) = findings("container_cpuset_drift", host)

    assert finding.labels["container"] == "node-exporter"
    assert "shared pool" in finding.message and "missing" in finding.message


def test_cpuset_drift_is_not_evaluated_under_the_none_policy():
    host = replace_config(reference_snapshot(), cpu_manager_policy="none")

    assert "none" in not_evaluated("container_cpuset_drift", host)


def test_cpuset_drift_skips_containers_it_cannot_name_in_a_pod_with_exclusive_entries():
    host = with_source_down(reference_snapshot(), "names")
    cpu = host.kubelet_state.cpu
    entries = dict(cpu.entries)
    entries[VLLM.uid] = frozen_map({"vllm": VLLM.exclusive, "init": frozenset({10})})
    host = replace_state(host, cpu=replace(cpu, entries=frozen_map(entries)))

    assert findings("container_cpuset_drift", host) == ()


# --------------------------------------------------------------------------------------------- exclusive_cpu_overlap
def test_container_running_on_another_containers_exclusive_cpus_overlaps():
    host = replace_container(reference_snapshot(), EXPORTER_ID, cpus_effective=DEFAULT_CPUSET | {9, 10})

    (finding,) = findings("exclusive_cpu_overlap", host)

    assert finding.labels["container"] == "node-exporter"
    assert finding.labels["cpus"] == "9-10"
    assert "inference/trtllm-mistral-0/trtllm" in finding.message
    assert "kube-system/node-exporter-x7k2p/node-exporter" in finding.message


def test_exclusive_containers_do_not_overlap_themselves():
    assert findings("exclusive_cpu_overlap", reference_snapshot()) == ()


# --------------------------------------------------------------------------------------------- container_numa_split
def test_pod_scope_reports_a_pod_whose_pinned_cpus_span_two_nodes_without_a_container_label():
    # CPUs 1-13,17-19 style split of kubelet.md §1.2 (best-effort admitted it).
    split = frozenset({1, 2, 3, 13, 14})
    host = replace_container(reference_snapshot(), VLLM_ID, cpus_effective=split)
    host = replace_state(
        host,
        cpu=replace(
            host.kubelet_state.cpu,
            entries=frozen_map({**host.kubelet_state.cpu.entries, VLLM.uid: frozen_map({"vllm": split})}),
        ),
    )

    (finding,) = findings("container_numa_split", host)

    assert dict(finding.labels) == {
        "namespace": "inference",
        "pod": "vllm-llama-0",
        "pod_uid": VLLM.uid,
        "numa_node": "0,1",
    }


def test_container_scope_reports_the_container():
    host = replace_container(reference_snapshot(), TRTLLM_ID, cpus_effective=frozenset({5, 9}))

    (finding,) = findings("container_numa_split", host, Intent(topology_manager_scope="container"))

    assert finding.labels["container"] == "trtllm"
    assert finding.labels["numa_node"] == "0,1"


def test_shared_pool_containers_are_not_numa_split():
    # node-exporter runs on both nodes by design: only pinned containers are judged.
    assert findings("container_numa_split", reference_snapshot(), Intent(topology_manager_scope="container")) == ()


# --------------------------------------------------------------------------------------------- GPU locality
def test_container_on_the_node_remote_to_its_gpus_mismatches_per_gpu():
    host = replace_container(reference_snapshot(), VLLM_ID, cpus_effective=frozenset({13, 14}))

    found = findings("container_gpu_numa_mismatch", host)

    assert [(f.labels["gpu"], f.labels["numa_node"]) for f in found] == [("0000:18:00.0", "0"), ("0000:2a:00.0", "0")]
    assert "NUMA nodes 1" in found[0].message


def test_gpu_container_on_the_shared_pool_spanning_both_nodes_mismatches():
    host = without_vllm_exclusive_entry(reference_snapshot())
    host = replace_container(host, VLLM_ID, cpus_effective=ONLINE - TRTLLM.exclusive)

    found = findings("container_gpu_numa_mismatch", host)

    assert len(found) == 2
    assert "shared pool" in found[0].message


def test_gpu_numa_mismatch_is_not_evaluated_without_the_device_checkpoint():
    host = replace_state(reference_snapshot(), devices=None)

    assert "device-plugin checkpoint" in not_evaluated("container_gpu_numa_mismatch", host)


def test_gpus_of_unknown_numa_node_are_left_to_gpu_numa_unknown():
    host = reference_snapshot()
    gpus = tuple(replace(g, numa_node=None) for g in host.gpus.gpus)
    devices = host.kubelet_state.devices
    entries = tuple(replace(e, devices_per_numa=frozen_map({-1: e.devices_per_numa[next(iter(e.devices_per_numa))]}))
                    for e in devices.entries)  # fmt: skip
    host = with_results(host, gpus_sysfs=replace(host.gpus, gpus=gpus))
    host = replace_state(host, devices=replace(devices, entries=entries))
    host = replace_container(host, VLLM_ID, cpus_effective=frozenset({13, 14}))

    assert findings("container_gpu_numa_mismatch", host) == ()


# --------------------------------------------------------------------------------------------- memory placement
def test_pinned_container_allowed_on_every_memory_node_mismatches():
    # Pinning cores but not memory: the seed's "--membind forgotten".
    host = replace_container(reference_snapshot(), TRTLLM_ID, mems_effective=frozenset({0, 1}))

    (finding,) = findings("container_memory_numa_mismatch", host)

    assert finding.labels["container"] == "trtllm"
    assert finding.labels["numa_node"] == "0,1"
    assert "Memory Manager assigned NUMA nodes 1" in finding.message
    assert "cpuset.mems" in finding.remediation


def test_memory_numa_mismatch_without_memory_manager_blocks_compares_with_the_cpus_nodes():
    host = replace_state(reference_snapshot(), memory=None)
    host = replace_container(host, VLLM_ID, mems_effective=frozenset({1}))

    (finding,) = findings("container_memory_numa_mismatch", host)

    assert "CPUs are on NUMA nodes 0" in finding.message
    assert "memory-manager-policy=Static" in finding.remediation


def test_shared_pool_container_with_memory_bound_by_the_memory_manager_is_clean():
    # A fractional-CPU container of a Guaranteed pod: the CPU Manager leaves it on the shared pool (both nodes) while
    # the Memory Manager binds its memory to one node. That is the kubelet working as designed, not drift.
    host = reference_snapshot()
    cpu = host.kubelet_state.cpu
    entries = {
        uid: frozen_map({name: cpus for name, cpus in containers.items() if name != "vllm"})
        for uid, containers in cpu.entries.items()
    }
    host = replace_state(host, cpu=replace(cpu, entries=frozen_map(entries)))
    host = replace_container(host, VLLM_ID, cpus_effective=cpu.default_cpuset)

    assert findings("container_memory_numa_mismatch", host) == ()


def test_memory_numa_mismatch_is_not_evaluated_when_intent_does_not_bind_memory():
    assert "memoryManagerPolicy" in not_evaluated(
        "container_memory_numa_mismatch", reference_snapshot(), Intent(memory_manager_policy="None")
    )


def test_pinned_container_with_most_memory_on_the_remote_node_fires():
    host = replace_container(reference_snapshot(), VLLM_ID, numa_bytes=frozen_map({0: 2 * GiB, 1: 6 * GiB}))

    (finding,) = findings("container_memory_remote", host)

    assert dict(finding.labels) == {**VLLM_LABELS, "numa_node": "1"}
    assert "6.0 GiB of its 8.0 GiB" in finding.message and "75%" in finding.message


def test_remote_memory_below_the_byte_floor_is_ignored():
    # 50% remote, but only 40 MiB of it: under the 64 MiB floor.
    host = replace_container(reference_snapshot(), VLLM_ID, numa_bytes=frozen_map({0: 40 * MiB, 1: 40 * MiB}))

    assert findings("container_memory_remote", host) == ()


def test_remote_memory_threshold_comes_from_intent():
    host = replace_container(reference_snapshot(), VLLM_ID, numa_bytes=frozen_map({0: 7 * GiB, 1: 3 * GiB}))

    assert findings("container_memory_remote", host) != ()
    assert findings("container_memory_remote", host, Intent(remote_memory_ratio=0.5)) == ()


def test_memory_remote_is_not_evaluated_when_no_pinned_container_has_numa_stat():
    host = replace_container(reference_snapshot(), VLLM_ID, numa_bytes=None)
    host = replace_container(host, TRTLLM_ID, numa_bytes=None)

    assert "numa_stat" in not_evaluated("container_memory_remote", host)


# --------------------------------------------------------------------------------------------- isolation
def test_exclusive_cpus_outside_isolcpus_fire():
    # The seed's reserved-cpus != isolcpus: the kubelet hands out housekeeping CPU 16.
    host = reference_snapshot()
    cpu = host.kubelet_state.cpu
    exclusive = VLLM.exclusive | {16}
    entries = {**cpu.entries, VLLM.uid: frozen_map({"vllm": exclusive})}
    host = replace_state(host, cpu=replace(cpu, entries=frozen_map(entries), default_cpuset=DEFAULT_CPUSET - {16}))
    host = replace_container(host, VLLM_ID, cpus_effective=exclusive)

    (finding,) = findings("container_outside_isolated", host)

    assert dict(finding.labels) == {**VLLM_LABELS, "cpus": "16"}
    assert 'kubelet-arg "reserved-cpus=0,8,16,24"' in finding.remediation


def test_outside_isolated_is_not_evaluated_without_isolcpus():
    host = reference_snapshot()
    topology = host.topology
    host = with_results(
        host,
        topology=replace(topology, isolation=replace(topology.isolation, isolcpus=None, sys_isolated=None)),
    )

    assert "isolcpus is absent" in not_evaluated("container_outside_isolated", host)


# --------------------------------------------------------------------------------------------- end to end, from files
@pytest.mark.parametrize(
    ("drift", "check_id", "labels"),
    [
        ("make_burstable", "pod_not_guaranteed", {"pod": "trtllm-mistral-0", "pod_uid": TRTLLM.uid}),
        ("make_burstable", "container_not_exclusive", {"container": "trtllm"}),
        ("widen_cpuset", "container_cpuset_drift", {**VLLM_LABELS, "cpus": "0-31", "expected": "1-4,17-20"}),
        ("intrude", "exclusive_cpu_overlap", {"container": "node-exporter", "cpus": "9-10"}),
        ("split_across_nodes", "container_numa_split", {"pod": "vllm-llama-0", "numa_node": "0,1"}),
        ("pin_away_from_gpus", "container_gpu_numa_mismatch", {**VLLM_LABELS, "gpu": "0000:18:00.0", "numa_node": "0"}),
        ("unbind_memory", "container_memory_numa_mismatch", {**VLLM_LABELS, "numa_node": "0,1"}),
        ("spill_memory", "container_memory_remote", {**VLLM_LABELS, "numa_node": "1"}),
        ("pin_on_housekeeping", "container_outside_isolated", {"container": "trtllm", "cpus": "8,24"}),
    ],
)
@pytest.mark.parametrize(
    "variant",
    [
        pytest.param({}, id="cgroup2-systemd-containerd"),
        pytest.param({"cgroup_version": 1, "driver": "cgroupfs"}, id="cgroup1-cgroupfs-containerd"),
        pytest.param({"runtime": "crio"}, id="cgroup2-systemd-crio"),
    ],
)
@pytest.mark.slow
def test_planted_pinning_drift_is_caught_reading_the_files(fake_host, drift, check_id, labels, variant):
    node = reference_node(fake_host, **variant)
    getattr(node, drift)()

    found = [f for f in node.evaluate().findings if f.check == check_id]

    assert found, f"{drift} did not make {check_id} fire"
    assert any(labels.items() <= f.labels.items() for f in found), [dict(f.labels) for f in found]


def test_a_daemon_reload_that_widened_a_pinned_cpuset_is_caught_with_the_exclusive_owner_named(fake_host):
    node = reference_node(fake_host)
    node.widen_cpuset()

    found = node.evaluate().findings

    (overlap,) = [f for f in found if f.check == "exclusive_cpu_overlap"]
    assert overlap.labels["container"] == "vllm" and overlap.labels["cpus"] == "9-12,25-28"
    assert "inference/trtllm-mistral-0/trtllm" in overlap.message


# --------------------------------------------------------------------------------------------- a real kernel's files
# The real-kernel capture of tests/corpus (2 sockets, 4 NUMA nodes in sub-NUMA style, CPU 7 offline, cgroupfs-driver
# pods): a correct Guaranteed pod on node 2's isolated core 8-9, and a "drifted" Guaranteed pod whose cpuset 3-4 spans
# nodes 0 and 1 of socket 0. The capture has no kubelet and no runtime state: the test adds what the kubelet would
# have written (it assigned the drifted pod the whole core 2-3) and the runtime's bundles, on a copy of the tree.
REAL_PODS = {
    # pod UID: (namespace, pod, QoS, app container ID, sandbox ID, kubelet's exclusive CPUs)
    "e63915c9-ac18-439e-ad4e-e5512e55d16f": (
        "inference", "correct-0", "c1f1542ce8198c3966101e22f64392a7ac7489d67dafa1023e133176fd439e71",
        "28bf2b0d08ac4d4fe4b522acb1317d06e5ac32226e213368f9e3b0a889d880df", "8-9",
    ),
    "48d41daf-5e1a-41c2-838f-d7f049010161": (
        "inference", "drifted-0", "5c0064f5f984f126784d4a0e670738b3589587d7d008b532aa539ee134cd3f0e",
        "fc5666cd2d90a3a144ed6f6d5cc08fae948f3d6f9e99850b131bf4f300b9e9a5", "2-3",
    ),
    "39804e6b-f4c5-4a6d-8af1-77e31cc4eb3e": (
        "monitoring", "agent-0", "11d45abbed0078f6791c6c4b1309dd3a6cd40d9d354a760b31a6da77af2c3072",
        "22779b2b096d7832f55259cbe5108387ca2c2c5a5982f92c8467fd11b2037eff", None,
    ),
}  # fmt: skip


def real_kernel_node(realkernel_root, tmp_path) -> FakeHost:
    host = FakeHost(tmp_path / "host")
    shutil.copytree(realkernel_root, host.root, dirs_exist_ok=True)
    tasks = "run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io"
    for uid, (namespace, name, app, sandbox, _) in REAL_PODS.items():
        for cid, kind in ((app, "container"), (sandbox, "sandbox")):
            annotations = {
                "io.kubernetes.cri.container-type": kind,
                "io.kubernetes.cri.sandbox-name": name,
                "io.kubernetes.cri.sandbox-namespace": namespace,
                "io.kubernetes.cri.sandbox-uid": uid,
            }
            if kind == "container":
                annotations["io.kubernetes.cri.container-name"] = "app"
            host.write(f"{tasks}/{cid}/config.json", json.dumps({"ociVersion": "1.2.0", "annotations": annotations}))
    write_kubelet_config(
        host,
        "rke2",
        cpu_manager_policy="static",
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
        reserved_cpus="0-1,6",
    )
    exclusive = {uid: {"app": cpus} for uid, (*_, cpus) in REAL_PODS.items() if cpus}
    write_cpu_manager_state(host, policy="static", default_cpuset="0-1,4-6,10-11", entries=exclusive)
    return host


def test_real_kernel_capture_drifted_pod_is_caught_and_the_correct_pod_is_not(realkernel_root, tmp_path):
    host = real_kernel_node(realkernel_root, tmp_path)

    evaluation = evaluate(read_host(host.paths), Intent(memory_manager_policy="None"))

    by_check = defaultdict(list)
    for finding in evaluation.findings:
        by_check[finding.check].append(dict(finding.labels))
    drifted = {"namespace": "inference", "pod": "drifted-0", "pod_uid": "48d41daf-5e1a-41c2-838f-d7f049010161"}
    assert {**drifted, "container": "app", "cpus": "3-4", "expected": "2-3"} in by_check["container_cpuset_drift"]
    # Nodes 0 and 1 share socket 0 (distance 11): a per-socket check would miss this split.
    assert by_check["container_numa_split"] == [{**drifted, "numa_node": "0,1"}]
    for check in PINNING_CHECKS:
        assert all(labels.get("pod") != "correct-0" for labels in by_check[check]), check
    assert by_check["container_outside_isolated"] == []
    assert by_check["exclusive_cpu_overlap"] == []


# --------------------------------------------------------------------------------------------- this machine's cgroups
CGROUP_V1 = Path("/sys/fs/cgroup")
REAL_HIERARCHIES = ("cpuset", "memory", "cpu")
REAL_UID = "3c9f7a21-6d4e-4b8a-9e0f-1a2b3c4d5e6f"
REAL_APP_ID = "c3" * 32


def _unusable_v1() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    for hierarchy in REAL_HIERARCHIES:
        base = CGROUP_V1 / hierarchy
        if not (base / "cgroup.procs").exists() or not os.access(base, os.W_OK):
            return f"no writable cgroup v1 {hierarchy} hierarchy at {base}"
    return None


def _rmdir_tree(base: Path) -> None:
    for directory, subdirs, _files in os.walk(base, topdown=False):
        for name in subdirs:
            os.rmdir(os.path.join(directory, name))
    os.rmdir(base)


@pytest.fixture
def real_guaranteed_pod(tmp_path):
    """A Guaranteed pod's container in this machine's real cgroup v1 hierarchies, with a real process in it.

    The tree lives under a private parent in each hierarchy (not at the top, where another test or a real kubelet
    may own ``kubepods``); those parents are bind-mounted at the fake host's ``sys/fs/cgroup/<hierarchy>``, so the
    cgroups source reads the kernel's own files inside the host root (a link out of the root is not followed).
    The container is pinned on the machine's highest CPU.
    """
    reason = _unusable_v1()
    if reason:
        pytest.skip(reason)
    host = FakeHost(tmp_path / "host")
    parent = f"numawatch-checks-{os.getpid()}"
    created: list[Path] = []
    mounted: list[Path] = []
    process = None
    try:
        root_cpus = parse_cpulist((CGROUP_V1 / "cpuset/cpuset.cpus").read_text())
        root_mems = parse_cpulist((CGROUP_V1 / "cpuset/cpuset.mems").read_text())
        app_cpus = frozenset({max(root_cpus)})
        pod = f"kubepods/pod{REAL_UID}"
        for hierarchy in REAL_HIERARCHIES:
            base = CGROUP_V1 / hierarchy / parent
            base.mkdir()
            created.append(base)
            for rel, cpus in (
                ("", root_cpus),
                ("kubepods", root_cpus),
                (pod, root_cpus),
                (f"{pod}/{REAL_APP_ID}", app_cpus),
            ):
                directory = base / rel
                directory.mkdir(exist_ok=True)
                if hierarchy == "cpuset":  # v1 cpusets start empty: every level needs cpus and mems before tasks
                    (directory / "cpuset.cpus").write_text(format_cpulist(cpus))
                    (directory / "cpuset.mems").write_text(format_cpulist(root_mems))
            target = host.mkdir(f"sys/fs/cgroup/{hierarchy}")
            bound = subprocess.run(["mount", "--bind", str(base), str(target)], capture_output=True, text=True)
            if bound.returncode != 0:
                pytest.skip(f"cannot bind-mount a cgroup here: {bound.stderr.strip()}")
            mounted.append(target)

        def join() -> None:  # in the child before exec, so the process is in the container from its first page
            for hierarchy in REAL_HIERARCHIES:
                with open(CGROUP_V1 / hierarchy / parent / pod / REAL_APP_ID / "cgroup.procs", "w") as procs:
                    procs.write("0")

        process = subprocess.Popen(["sleep", "300"], preexec_fn=join)
        add_topology(host, sockets=1, cores_per_socket=max(1, (max(root_cpus) + 2) // 2), threads_per_core=2)
        host.write(f"var/log/pods/inference_real-0_{REAL_UID}/app/0.log", "")
        write_kubelet_config(host, "rke2", cpu_manager_policy="static", reserved_cpus=format_cpulist({min(root_cpus)}))
        yield host, app_cpus, root_cpus
    finally:
        if process is not None:
            process.kill()
            process.wait()
        for target in mounted:
            subprocess.run(["umount", str(target)], check=True)
        for base in created:
            _rmdir_tree(base)


@pytest.mark.realhost
def test_a_real_cgroup_whose_cpuset_differs_from_the_kubelets_assignment_drifts(real_guaranteed_pod):
    host, app_cpus, root_cpus = real_guaranteed_pod
    if len(root_cpus) < 2:
        pytest.skip("a one-CPU machine cannot run a container off the CPUs the kubelet assigned it")
    assigned = frozenset({min(root_cpus - app_cpus)})  # the kubelet's record says another CPU than the kernel's
    write_cpu_manager_state(host, default_cpuset=root_cpus - assigned, entries={REAL_UID: {"app": assigned}})

    evaluation = evaluate(read_host(Paths.from_root(host.root, procfs="/proc")), REFERENCE)

    found = [dict(f.labels) for f in evaluation.findings if f.check == "container_cpuset_drift"]
    assert found == [
        {
            "namespace": "inference",
            "pod": "real-0",
            "pod_uid": REAL_UID,
            "container": "app",
            "cpus": format_cpulist(app_cpus),
            "expected": format_cpulist(assigned),
        }
    ]


@pytest.mark.realhost
def test_a_real_cgroup_on_its_assigned_cpus_does_not_drift(real_guaranteed_pod):
    host, app_cpus, root_cpus = real_guaranteed_pod
    write_cpu_manager_state(host, default_cpuset=root_cpus - app_cpus, entries={REAL_UID: {"app": app_cpus}})

    evaluation = evaluate(read_host(Paths.from_root(host.root, procfs="/proc")), REFERENCE)

    assert evaluation.host.statuses["cgroups"].up, evaluation.host.statuses["cgroups"].reason
    assert [f for f in evaluation.findings if f.check == "container_cpuset_drift"] == []
    assert "container_cpuset_drift" not in {n.check for n in evaluation.not_evaluated}


# ------------------------------------------------------------------------------------------- work shared in one check
def with_exporter_sidecar(host, cpus):
    """The node-exporter pod with a second container (unnamed: the pod's one log directory names it node-exporter too);
    both on ``cpus``, one object, as the cgroups reader shares one parsed list between containers that read the same."""
    pod = host.cgroups.pod(NODE_EXPORTER.uid)
    exporter = next(c for c in pod.containers if c.container_id == EXPORTER_ID)
    sidecar = replace(exporter, container_id="5" * 64, pids=(9191,), cpus_effective=cpus)
    host = replace_pod(host, NODE_EXPORTER.uid, containers=(*pod.containers, sidecar))
    return replace_container(host, EXPORTER_ID, cpus_effective=cpus)


def test_every_container_on_the_same_drifted_cpuset_drifts():
    host = with_exporter_sidecar(reference_snapshot(), frozenset({0, 8}))

    found = findings("container_cpuset_drift", host)

    assert [(f.labels["container"], f.labels["cpus"]) for f in found] == [("node-exporter", "0,8")] * 2


def test_a_cpuset_equal_to_the_shared_pool_but_parsed_apart_does_not_drift():
    copy = frozenset(set(DEFAULT_CPUSET))
    assert copy is not DEFAULT_CPUSET
    assert findings("container_cpuset_drift", with_exporter_sidecar(reference_snapshot(), copy)) == ()


def test_every_container_on_the_same_intruding_cpuset_overlaps():
    host = with_exporter_sidecar(reference_snapshot(), DEFAULT_CPUSET | {9, 10})

    found = findings("exclusive_cpu_overlap", host)

    assert [(f.labels["container"], f.labels["cpus"]) for f in found] == [("node-exporter", "9-10")] * 2


def odd_topology():
    """Two nodes, an offline CPU still on node 1, and a CPU that no node lists."""
    cpus = {i: Cpu(i, online=i != 6, socket=0, core=i, numa_node=0 if i < 4 else 1) for i in range(8)}
    cpus[7] = Cpu(7, online=True, socket=0, core=7, numa_node=None)
    nodes = {0: NumaNode(0, frozenset(range(4))), 1: NumaNode(1, frozenset({4, 5}))}
    return Topology(cpus=frozen_map(cpus), online=frozenset(range(8)) - {6}, nodes=frozen_map(nodes),
                    isolation=IsolationParams())  # fmt: skip


@pytest.mark.parametrize("topology", [reference_snapshot().topology, odd_topology()], ids=["reference", "odd"])
def test_the_checks_cpu_nodes_answer_what_the_topology_answers(topology):
    host = with_results(reference_snapshot(), topology=topology)
    nodes_of = pinning_checks.cpu_nodes(host, REFERENCE).nodes_of
    sets = [frozenset(), frozenset({99}), frozenset({7}), frozenset({6}), frozenset({3, 4}), frozenset(topology.cpus)]
    sets += [frozenset({cpu}) for cpu in topology.cpus] + [frozenset(range(n)) for n in range(0, 40, 3)]

    for cpus in sets * 2:  # the second time from what it remembered
        assert nodes_of(cpus) == topology.nodes_of(cpus), sorted(cpus)
