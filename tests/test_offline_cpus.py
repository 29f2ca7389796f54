"""CPUs that go offline after the kubelet assigned them: offline CPUs become drift.

When SMT is switched off or a CPU is unplugged, the kernel removes the CPU from every cpuset (v1: ``cpuset.cpus`` and
``cpuset.effective_cpus``; v2: ``cpuset.cpus.effective`` only) while the running kubelet keeps its assignments.
Every comparison of an assignment with a cgroup is then made against assignment ∩ online CPUs: the shrunken cpusets
are not drift, offline CPUs are never missing, outside isolcpus, overlapping or split, and the checkpoint that still
names them is reported once, by ``kubelet_state_stale``.

The node (unless a test says otherwise): 2 sockets x 2 cores x SMT2, packed numbering (siblings adjacent), one NUMA
node per socket: node 0 = 0-3, node 1 = 4-7. isolcpus=2-3,6-7; reserved-cpus=0-1,4-5 (the housekeeping cores).
llm-a holds 2-3 (node 0), llm-b 6-7 (node 1), a burstable agent runs on the shared pool 0-1,4-5. SMT off takes
1,3,5,7 offline: the shared pool becomes 0,4, llm-a 2 and llm-b 6.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.hotplug import smt_off, take_cpus_offline
from fakehost.kubelet import write_cpu_manager_state, write_kubelet_config
from fakehost.pods import ContainerSpec, PodHandle, add_kubepods, add_pod, set_container_cpus
from fakehost.reference import (
    CPU_STATE_FILE,
    HOUSEKEEPING,
    reference_snapshot,
    replace_config,
    replace_state,
    with_source_down,
)
from fakehost.topology import add_topology
from numawatch.checks import Evaluation, all_checks, evaluate
from numawatch.cpuset import parse_cpulist
from numawatch.host import read_host
from numawatch.intent import Intent
from numawatch.model import frozen_map

INTENT = Intent(memory_manager_policy="None")
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro isolcpus=domain,managed_irq,2-3,6-7 nohz_full=2-3,6-7"
UID_A = "1a2b3c4d-0000-4000-8000-00000000000a"
UID_B = "1a2b3c4d-0000-4000-8000-00000000000b"
UID_AGENT = "1a2b3c4d-0000-4000-8000-0000000000cc"
RKE2_CONFIG = "/etc/rancher/rke2/config.yaml"

# Checks that compare a kubelet assignment (cpu_manager_state, reserved-cpus) with cgroups or the kernel's CPUs.
COMPARING = (
    "kubelet_reserved_cpus_mismatch",
    "kubelet_state_stale",
    "container_not_exclusive",
    "container_cpuset_drift",
    "exclusive_cpu_overlap",
    "container_numa_split",
    "container_outside_isolated",
)
VERSIONS = [pytest.param(2, id="cgroup-v2"), pytest.param(1, id="cgroup-v1")]


def build(
    host: FakeHost,
    version: int,
    *,
    reserved: str = "0-1,4-5",
    a_cpus: str = "2-3",
    options: dict[str, str] | None = None,
) -> dict[str, PodHandle]:
    add_topology_packed(host)
    add_kubepods(host, version=version, driver="cgroupfs" if version == 1 else "systemd", cpus="0-7", mems={0, 1})
    a_nodes = {0 if cpu < 4 else 1 for cpu in parse_cpulist(a_cpus)}
    pods = {
        "a": add_pod(host, uid=UID_A, qos="guaranteed", namespace="llm", name="llm-a",
                     containers=[ContainerSpec("engine", cpus=a_cpus, mems=a_nodes, pids=(5101,))]),
        "b": add_pod(host, uid=UID_B, qos="guaranteed", namespace="llm", name="llm-b",
                     containers=[ContainerSpec("engine", cpus="6-7", mems={1}, pids=(5102,))]),
        "agent": add_pod(host, uid=UID_AGENT, qos="burstable", namespace="monitoring", name="agent",
                         containers=[ContainerSpec("agent", cpus="0-1,4-5", mems={0, 1}, pids=(5103,))]),
    }  # fmt: skip
    write_kubelet_config(
        host,
        "rke2",
        cpu_manager_policy="static",
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
        reserved_cpus=reserved,
        cpu_manager_policy_options=options,
    )
    shared = parse_cpulist("0-7") - parse_cpulist(a_cpus) - {6, 7}
    write_cpu_manager_state(
        host, default_cpuset=shared, entries={UID_A: {"engine": a_cpus}, UID_B: {"engine": "6-7"}}
    )
    return pods


def add_topology_packed(host: FakeHost) -> None:
    add_topology(host, sockets=2, cores_per_socket=2, threads_per_core=2, numbering="packed", cmdline=CMDLINE)


def run(host: FakeHost) -> Evaluation:
    return evaluate(read_host(host.paths), INTENT)


def comparing(evaluation: Evaluation) -> list:
    """The findings of the comparing checks, after asserting each of them was evaluated."""
    skipped = {item.check: item.reason for item in evaluation.not_evaluated if item.check in COMPARING}
    assert skipped == {}, skipped
    return [finding for finding in evaluation.findings if finding.check in COMPARING]


def cpuset_files(host: FakeHost, pod: PodHandle, version: int) -> tuple[str, str]:
    """(cpuset.cpus, the effective file) of the pod's first container, as the kernel left them."""
    rel = pod.containers[0].cgroup_path
    if version == 2:
        base = host.path(f"sys/fs/cgroup/{rel}")
        return (base / "cpuset.cpus").read_text().strip(), (base / "cpuset.cpus.effective").read_text().strip()
    base = host.path(f"sys/fs/cgroup/cpuset/{rel}")
    return (base / "cpuset.cpus").read_text().strip(), (base / "cpuset.effective_cpus").read_text().strip()


# --------------------------------------------------------------------------------------------- the builder
@pytest.mark.parametrize("version", VERSIONS)
def test_smt_off_writes_what_the_kernel_leaves_behind(tmp_path, version):
    host = FakeHost(tmp_path / "host")
    pods = build(host, version)

    assert smt_off(host) == {1, 3, 5, 7}

    cpu = host.path("sys/devices/system/cpu")
    assert (cpu / "online").read_text() == "0,2,4,6\n"
    assert (cpu / "offline").read_text() == "1,3,5,7\n"
    assert (cpu / "cpu3/online").read_text() == "0\n"
    assert not (cpu / "cpu3/topology").exists()
    assert (cpu / "cpu3/node0").is_symlink()  # the node link stays
    assert (cpu / "cpu2/topology/thread_siblings_list").read_text() == "2\n"
    assert (cpu / "smt/control").read_text() == "off\n"
    assert host.path("sys/devices/system/node/node0/cpulist").read_text() == "0,2\n"
    assert host.path("sys/devices/system/node/node1/cpumap").read_text() == "50\n"
    # v2 keeps what was written in cpuset.cpus and drops offline CPUs from the effective set; v1 drops them from both.
    requested = {2: ("2-3", "0-1,4-5"), 1: ("2", "0,4")}[version]
    assert cpuset_files(host, pods["a"], version) == (requested[0], "2")
    assert cpuset_files(host, pods["agent"], version) == (requested[1], "0,4")
    status = host.path("proc/5101/status").read_text()
    assert "Cpus_allowed_list:\t2\n" in status and "Cpus_allowed:\t04\n" in status


def test_cpu0_and_offline_cpus_cannot_be_unplugged(tmp_path):
    host = FakeHost(tmp_path / "host")
    build(host, 2)
    take_cpus_offline(host, {3})

    with pytest.raises(ValueError, match="cpu0"):
        take_cpus_offline(host, {0})
    with pytest.raises(ValueError, match="not online"):
        take_cpus_offline(host, {3})


def test_a_v1_cpuset_left_without_cpus_hands_its_tasks_to_the_pod_cgroup(tmp_path):
    host = FakeHost(tmp_path / "host")
    pods = build(host, 1, a_cpus="3")

    take_cpus_offline(host, {3})

    container = host.path(f"sys/fs/cgroup/cpuset/{pods['a'].containers[0].cgroup_path}")
    assert (container / "cpuset.cpus").read_text().strip() == ""
    assert (container / "cgroup.procs").read_text() == ""
    assert "5101" in (container.parent / "cgroup.procs").read_text().split()


# --------------------------------------------------------------------------------------------- SMT off, one CPU off
@pytest.mark.parametrize("version", VERSIONS)
def test_smt_switched_off_after_assignment_is_only_a_stale_kubelet_state(tmp_path, version):
    host = FakeHost(tmp_path / "host")
    build(host, version)
    before = run(host)
    assert comparing(before) == []

    smt_off(host)
    found = comparing(run(host))

    assert [(f.check, dict(f.labels)) for f in found] == [
        ("kubelet_state_stale", {"file": CPU_STATE_FILE, "reason": "online_cpus_changed"})
    ]
    (stale,) = found
    assert stale.message.startswith(
        f"the kubelet will refuse to start with {CPU_STATE_FILE} at its next restart: current set of available "
        'CPUs "0,2,4,6" doesn\'t match with CPUs in state "0-7": CPUs 1,3,5,7 of the checkpoint went offline after '
        "the kubelet assigned them"
    )
    assert "the kernel has already taken them out of every cpuset" in stale.message
    # reserved-cpus 0-1,4-5 names 1 and 5 too: one procedure fixes both, so one finding says both.
    assert "reserved-cpus 0-1,4-5 names CPUs 1,5, which are offline" in stale.message
    assert "unknown CPU ID: N" in stale.message and "not all reserved cpus" in stale.message
    assert stale.message.endswith(
        'it exits at start ("Failed to start ContainerManager") and is restarted in a loop, the node NotReady, until '
        "the file is removed and reserved-cpus names online CPUs only"
    )
    assert stale.remediation == (
        'drain the node, systemctl stop rke2-agent, set kubelet-arg "reserved-cpus=0,4" in '
        f"{RKE2_CONFIG}, rm {CPU_STATE_FILE}, systemctl start rke2-agent, uncordon the node (rke2-server instead of "
        "rke2-agent on a server node)"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_one_isolated_cpu_offlined_after_assignment_is_only_a_stale_kubelet_state(tmp_path, version):
    host = FakeHost(tmp_path / "host")
    pods = build(host, version)

    take_cpus_offline(host, {3})  # llm-a's second thread, listed in isolcpus
    found = comparing(run(host))

    assert cpuset_files(host, pods["a"], version)[1] == "2"
    assert [(f.check, f.labels["reason"]) for f in found] == [("kubelet_state_stale", "online_cpus_changed")]
    (stale,) = found
    assert 'current set of available CPUs "0-2,4-7" doesn\'t match with CPUs in state "0-7": CPUs 3 of' in stale.message
    assert "reserved-cpus" not in stale.message
    assert stale.remediation.endswith(
        f"rm {CPU_STATE_FILE}, systemctl start rke2-agent, uncordon the node (rke2-server instead of rke2-agent on a "
        "server node)"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_really_drifted_container_on_such_a_host_names_only_online_cpus(tmp_path, version):
    host = FakeHost(tmp_path / "host")
    pods = build(host, version)
    smt_off(host)
    set_container_cpus(host, pods["a"], "engine", "2,4")  # a daemon-reload widened llm-a onto the shared CPU 4
    set_container_cpus(host, pods["agent"], "agent", "0")  # and narrowed the agent

    found = {(f.check, f.labels.get("container"), f.labels.get("pod")): f for f in comparing(run(host))}

    drift_a = found[("container_cpuset_drift", "engine", "llm-a")]
    assert (drift_a.labels["cpus"], drift_a.labels["expected"]) == ("2,4", "2")
    assert drift_a.message == (
        "container llm/llm-a/engine runs on CPUs 2,4 but the kubelet assigned its exclusive CPUs 2 (those of its "
        "assignment that are online) (4 not assigned to it)"
    )
    drift_agent = found[("container_cpuset_drift", "agent", "agent")]
    assert drift_agent.message == (
        "container monitoring/agent/agent runs on CPUs 0 but the kubelet assigned the shared pool (defaultCpuSet) 0,4 "
        "(those of its assignment that are online) (4 missing)"
    )
    # llm-a on CPU 4 is on node 1 too: a real split of online CPUs, not of offline ones.
    assert found[("container_numa_split", None, "llm-a")].labels["numa_node"] == "0,1"
    assert {check for check, *_ in found} == {"container_cpuset_drift", "container_numa_split", "kubelet_state_stale"}


@pytest.mark.parametrize("version", VERSIONS)
def test_an_intruder_overlaps_only_the_online_part_of_exclusive_cpus(tmp_path, version):
    host = FakeHost(tmp_path / "host")
    pods = build(host, version)
    smt_off(host)
    set_container_cpus(host, pods["agent"], "agent", "0,2,4")

    (overlap,) = [f for f in comparing(run(host)) if f.check == "exclusive_cpu_overlap"]

    assert overlap.labels["cpus"] == "2"
    assert overlap.message == (
        "container monitoring/agent/agent can run on CPUs 2 given exclusively to llm/llm-a/engine (2)"
    )


def test_a_container_whose_every_exclusive_cpu_went_offline_runs_on_its_parents_cpus_and_says_why(tmp_path):
    host = FakeHost(tmp_path / "host")
    build(host, 2, a_cpus="3")

    take_cpus_offline(host, {3})  # cgroup v2: the empty effective set falls back to the pod cgroup's CPUs
    found = {(f.check, f.labels.get("pod")): f for f in comparing(run(host))}

    drift = found[("container_cpuset_drift", "llm-a")]
    assert drift.message == (
        "container llm/llm-a/engine runs on CPUs 0-2,4-7: every one of its exclusive CPUs is offline, so the kernel "
        "runs it on its parent cgroup's CPUs"
    )
    assert "expected" not in drift.labels
    assert "recreate the pod" in drift.remediation
    overlap = found[("exclusive_cpu_overlap", "llm-a")]
    assert overlap.message.endswith(
        "given exclusively to llm/llm-b/engine (6-7): every CPU of its own exclusive assignment is offline, so the "
        "kernel runs it on its parent cgroup's CPUs"
    )
    # It really runs on both nodes now, whatever the cause; offline CPU 3 is not "outside".
    assert found[("container_numa_split", "llm-a")].message == (
        "pod llm/llm-a has its pinned CPUs on NUMA nodes 0,1 (engine on 0,1)"
    )
    assert ("container_outside_isolated", "llm-a") not in found
    assert ("kubelet_state_stale", None) in found


# --------------------------------------------------------------------------------------------- each check, offline CPUs
def test_outside_isolated_names_only_online_cpus_that_isolcpus_lacks(tmp_path):
    host = FakeHost(tmp_path / "host")
    build(host, 2, a_cpus="1-3", reserved="0,4-5")
    take_cpus_offline(host, {3})

    (outside,) = [f for f in comparing(run(host)) if f.check == "container_outside_isolated"]

    assert outside.labels["cpus"] == "1"
    assert outside.message.startswith(
        "container llm/llm-a/engine was given exclusive CPUs 1 that are not isolated (isolcpus 2,6-7)"
    )


def test_reserved_cpus_that_differ_on_online_cpus_still_mismatch_and_the_offline_ones_are_not_named(tmp_path):
    host = FakeHost(tmp_path / "host")
    build(host, 2, reserved="0-1,4")  # the second thread of socket 1's housekeeping core is not reserved
    smt_off(host)
    assert [f.check for f in comparing(run(host)) if f.check == "kubelet_reserved_cpus_mismatch"] == []

    write_kubelet_config(host, "rke2", cpu_manager_policy="static", topology_manager_policy="single-numa-node",
                         topology_manager_scope="pod", reserved_cpus="0-1")  # fmt: skip
    (mismatch,) = [f for f in comparing(run(host)) if f.check == "kubelet_reserved_cpus_mismatch"]

    assert dict(mismatch.labels) == {"cpus": "0", "expected": "0,4"}
    assert mismatch.message == (
        "kubelet reserved CPUs differ from the housekeeping CPUs (online minus isolcpus) 0,4: reserved-cpus is 0 "
        "(its online CPUs); CPUs 4 can be given exclusively to pods although they are not isolated"
    )


def test_reserved_cpus_naming_offline_cpus_with_a_checkpoint_rebuilt_since_is_its_own_finding(tmp_path):
    host = FakeHost(tmp_path / "host")
    build(host, 2)
    smt_off(host)
    # The checkpoint was removed and the kubelet rebuilt it on the 4 online CPUs; reserved-cpus still says 0-1,4-5.
    write_cpu_manager_state(host, default_cpuset="0,4", entries={UID_A: {"engine": "2"}, UID_B: {"engine": "6"}})

    found = comparing(run(host))

    assert [(f.check, dict(f.labels)) for f in found] == [
        ("kubelet_state_stale", {"file": RKE2_CONFIG, "reason": "reserved_cpus_offline"})
    ]
    (stale,) = found
    assert stale.message.startswith(
        f"the kubelet will not start with {RKE2_CONFIG} at its next restart: reserved-cpus 0-1,4-5 names CPUs 1,5, "
        "which are offline"
    )
    assert stale.message.endswith("it fails until reserved-cpus names online CPUs only")
    assert 'set kubelet-arg "reserved-cpus=0,4"' in stale.remediation


def test_a_checkpoint_that_matches_the_online_cpus_is_clean_after_the_unplug(tmp_path):
    host = FakeHost(tmp_path / "host")
    build(host, 2, reserved="0,4")
    smt_off(host)
    write_cpu_manager_state(host, default_cpuset="0,4", entries={UID_A: {"engine": "2"}, UID_B: {"engine": "6"}})

    assert comparing(run(host)) == []


def test_strict_cpu_reservation_compares_the_checkpoint_with_online_cpus_minus_the_reserved_ones():
    # validateState's allCPUs leaves the reserved CPUs out under strict-cpu-reservation: a default set without them
    # is what the kubelet writes, not a changed set of CPUs.
    strict = frozen_map({"strict-cpu-reservation": "true"})
    host = replace_config(reference_snapshot(), cpu_manager_policy_options=strict)
    cpu = host.kubelet_state.cpu
    host = replace_state(host, cpu=replace(cpu, default_cpuset=cpu.default_cpuset - HOUSEKEEPING))

    evaluation = evaluate(host, INTENT, [c for c in all_checks() if c.id == "kubelet_state_stale"])

    assert evaluation.not_evaluated == () and evaluation.findings == ()


# --------------------------------------------------------------------------------------------- a real kernel
# The real-kernel capture (tests/conftest.py realkernel_root): CPU 7, node 3's housekeeping CPU, went offline after
# the pods were placed; the burstable container's cpuset.cpus is 0-1,6-7, its effective set 0-1,6.
REAL_PODS = {
    # pod UID: (namespace, pod, app container ID, sandbox ID)
    "e63915c9-ac18-439e-ad4e-e5512e55d16f": (
        "inference", "correct-0", "c1f1542ce8198c3966101e22f64392a7ac7489d67dafa1023e133176fd439e71",
        "28bf2b0d08ac4d4fe4b522acb1317d06e5ac32226e213368f9e3b0a889d880df",
    ),
    "48d41daf-5e1a-41c2-838f-d7f049010161": (
        "inference", "drifted-0", "5c0064f5f984f126784d4a0e670738b3589587d7d008b532aa539ee134cd3f0e",
        "fc5666cd2d90a3a144ed6f6d5cc08fae948f3d6f9e99850b131bf4f300b9e9a5",
    ),
    "39804e6b-f4c5-4a6d-8af1-77e31cc4eb3e": (
        "monitoring", "agent-0", "11d45abbed0078f6791c6c4b1309dd3a6cd40d9d354a760b31a6da77af2c3072",
        "22779b2b096d7832f55259cbe5108387ca2c2c5a5982f92c8467fd11b2037eff",
    ),
}  # fmt: skip
GONE_POD = "5a1e0000-0000-4000-8000-000000000001"  # exited; its entry stays until the kubelet admits the next pod


def test_the_real_kernels_offline_cpu_7_is_only_a_stale_kubelet_state(realkernel_root, tmp_path):
    """The kubelet's files as they were before CPU 7 went offline: the shared pool was the housekeeping CPUs 0-1,6-7
    (what the capture's burstable container got), reserved-cpus the same, and the other isolated cores were held."""
    host = FakeHost(tmp_path / "host")
    shutil.copytree(realkernel_root, host.root, dirs_exist_ok=True)
    tasks = "run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io"
    for uid, (namespace, name, app, sandbox) in REAL_PODS.items():
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
    write_kubelet_config(host, "rke2", cpu_manager_policy="static", topology_manager_policy="single-numa-node",
                         topology_manager_scope="pod", reserved_cpus="0-1,6-7")  # fmt: skip
    entries = {
        "e63915c9-ac18-439e-ad4e-e5512e55d16f": {"app": "8-9"},
        "48d41daf-5e1a-41c2-838f-d7f049010161": {"app": "2-3"},
        GONE_POD: {"app": "4-5,10-11"},
    }
    write_cpu_manager_state(host, default_cpuset="0-1,6-7", entries=entries)

    evaluation = evaluate(read_host(host.paths), INTENT)
    found = comparing(evaluation)

    by_check = sorted((f.check, f.labels.get("pod", "")) for f in found)
    assert by_check == [
        ("container_cpuset_drift", "drifted-0"),
        ("container_numa_split", "drifted-0"),
        ("kubelet_state_stale", ""),
    ]
    (stale,) = [f for f in found if f.check == "kubelet_state_stale"]
    assert 'CPUs "0-6,8-11" doesn\'t match with CPUs in state "0-11": CPUs 7 of the checkpoint' in stale.message
    assert "reserved-cpus 0-1,6-7 names CPUs 7, which are offline" in stale.message
    (drift,) = [f for f in found if f.check == "container_cpuset_drift"]
    assert drift.message.endswith("the kubelet assigned its exclusive CPUs 2-3 (4 not assigned to it, 2 missing)")
    for finding in found:
        if finding.check != "kubelet_state_stale":
            assert "7" not in {*parse_list(finding.labels.get("cpus")), *parse_list(finding.labels.get("expected"))}


def parse_list(text: str | None) -> set[str]:
    return {str(cpu) for cpu in parse_cpulist(text)} if text else set()


def test_the_real_kernel_capture_files_are_read_as_the_kernel_wrote_them(realkernel_root):
    # Guard for the test above: the capture really has CPU 7 offline and the burstable cpuset shrunk.
    burstable = Path(realkernel_root, "sys/fs/cgroup/kubepods/burstable/pod39804e6b-f4c5-4a6d-8af1-77e31cc4eb3e",
                     "11d45abbed0078f6791c6c4b1309dd3a6cd40d9d354a760b31a6da77af2c3072")  # fmt: skip
    assert (burstable / "cpuset.cpus").read_text().strip() == "0-1,6-7"
    assert (burstable / "cpuset.cpus.effective").read_text().strip() == "0-1,6"
    assert Path(realkernel_root, "sys/devices/system/cpu/offline").read_text().strip() == "7"


def test_without_the_topology_the_kubepods_cgroups_cpus_stand_for_the_online_ones(tmp_path):
    host = FakeHost(tmp_path / "host")
    pods = build(host, 2)
    smt_off(host)
    set_container_cpus(host, pods["agent"], "agent", "0")
    snapshot = with_source_down(read_host(host.paths), "topology", "planted: sysfs not mounted")

    drift = evaluate(snapshot, INTENT, [c for c in all_checks() if c.id == "container_cpuset_drift"])

    assert [f.message for f in drift.findings] == [
        "container monitoring/agent/agent runs on CPUs 0 but the kubelet assigned the shared pool (defaultCpuSet) 0,4 "
        "(those of its assignment that are online) (4 missing)"
    ]
