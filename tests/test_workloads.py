from __future__ import annotations

import gc
import weakref
from dataclasses import replace

import pytest
import readings
from fakehost.kubelet import kubelet_memory_machine_state
from fakehost.pods import set_container_cpus
from fakehost.reference import (
    DEFAULT_CPUSET,
    GPU_RESOURCE,
    GPUS,
    HUGEPAGES_PER_NODE,
    MEM_TOTAL,
    NODE_EXPORTER,
    RESERVED_MEMORY,
    TRTLLM,
    VLLM,
    machine_state_tables,
    reference_node,
    reference_snapshot,
    replace_container,
    replace_pod,
    replace_state,
    with_results,
    with_source_down,
)
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.checks import gpus as gpu_checks
from numawatch.checks import kubelet as kubelet_checks
from numawatch.checks import pinning as pinning_checks
from numawatch.host import Host, HostReader, read_host
from numawatch.intent import REFERENCE, Intent, PodSelector
from numawatch.model import frozen_map
from numawatch.model.gpu import GpuInventory
from numawatch.model.kubelet import DeviceAssignment
from numawatch.workloads import build_workloads


def by_name(workloads):
    return {w.container_name: w for w in workloads}


def test_reference_node_joins_every_app_container_and_leaves_out_sandboxes():
    workloads = build_workloads(reference_snapshot(), REFERENCE)

    assert sorted(w.container_name for w in workloads) == ["node-exporter", "trtllm", "vllm"]
    assert VLLM.sandbox.container_id not in {w.container_id for w in workloads}


def test_reference_gpu_container_carries_identity_exclusive_cpus_gpus_and_memory_blocks():
    vllm = by_name(build_workloads(reference_snapshot(), REFERENCE))["vllm"]

    assert (vllm.namespace, vllm.pod_name, vllm.pod_uid, vllm.qos) == (
        "inference",
        "vllm-llama-0",
        VLLM.uid,
        "guaranteed",
    )
    assert vllm.exclusive_cpus == VLLM.exclusive
    assert vllm.cpus == VLLM.exclusive
    assert vllm.mems == frozenset({0})
    assert [(g.device_id, g.pci_address, g.numa_node) for g in vllm.gpus] == [
        (GPUS[0].uuid, GPUS[0].pci_address, 0),
        (GPUS[1].uuid, GPUS[1].pci_address, 0),
    ]
    assert vllm.memory_blocks == VLLM.memory_blocks
    assert vllm.memory_nodes == frozenset({0})
    assert vllm.must_pin and vllm.pinned
    assert vllm.labels == {
        "namespace": "inference",
        "pod": "vllm-llama-0",
        "pod_uid": VLLM.uid,
        "container": "vllm",
    }
    assert vllm.subject == tuple(vllm.labels[name] for name in ("namespace", "pod", "pod_uid", "container"))


def test_a_workloads_subject_is_its_labels_values_when_its_names_are_unknown():
    from dataclasses import replace

    vllm = by_name(build_workloads(reference_snapshot(), REFERENCE))["vllm"]
    unnamed = replace(vllm, namespace=None, container_name=None)

    assert unnamed.subject == ("", vllm.pod_name, VLLM.uid, vllm.container_id[:12])
    assert unnamed.subject == tuple(unnamed.labels[name] for name in ("namespace", "pod", "pod_uid", "container"))


def test_shared_pool_container_has_no_exclusive_cpus_and_need_not_be_pinned():
    exporter = by_name(build_workloads(reference_snapshot(), REFERENCE))["node-exporter"]

    assert exporter.exclusive_cpus is None
    assert not exporter.pinned
    assert not exporter.must_pin
    assert exporter.gpus == ()


def test_a_container_the_runtime_calls_sandbox_is_left_out_even_when_cgroups_did_not_flag_it():
    host = replace_container(reference_snapshot(), VLLM.sandbox.container_id, is_sandbox=False)

    ids = {w.container_id for w in build_workloads(host, REFERENCE)}

    assert VLLM.sandbox.container_id not in ids


def test_without_cgroups_there_is_nothing_to_join():
    host = with_source_down(reference_snapshot(), "cgroups")

    assert build_workloads(host, REFERENCE) == ()


def test_without_names_the_pod_name_is_its_uid_and_single_container_pods_are_named_from_the_checkpoints():
    host = with_source_down(reference_snapshot(), "names")

    workloads = {w.pod_uid: w for w in build_workloads(host, REFERENCE)}

    vllm = workloads[VLLM.uid]
    assert vllm.namespace is None
    assert vllm.pod_name == VLLM.uid
    assert vllm.container_name == "vllm"  # the pod's only entry in cpu/memory/device checkpoints
    assert vllm.exclusive_cpus == VLLM.exclusive
    assert vllm.must_pin
    assert workloads[NODE_EXPORTER.uid].container_name is None  # no checkpoint entry for a shared-pool pod


def test_container_name_falls_back_to_the_pods_only_log_directory():
    host = reference_snapshot()
    names = host.names
    containers = dict(names.containers)
    containers[VLLM.container.container_id] = replace(containers[VLLM.container.container_id], container_name=None)
    host = with_results(host, names=replace(names, containers=frozen_map(containers)))

    vllm = {w.container_id: w for w in build_workloads(host, REFERENCE)}[VLLM.container.container_id]

    assert vllm.container_name == "vllm"
    assert vllm.exclusive_cpus == VLLM.exclusive


def test_two_log_directories_and_two_checkpoint_names_leave_the_container_unnamed():
    host = reference_snapshot()
    names = host.names
    containers = dict(names.containers)
    containers[VLLM.container.container_id] = replace(containers[VLLM.container.container_id], container_name=None)
    logs = dict(names.pod_log_containers)
    logs[VLLM.uid] = ("vllm", "metrics-sidecar")
    host = with_results(
        host, names=replace(names, containers=frozen_map(containers), pod_log_containers=frozen_map(logs))
    )
    cpu = host.kubelet_state.cpu
    entries = dict(cpu.entries)
    entries[VLLM.uid] = frozen_map({"vllm": VLLM.exclusive, "init-weights": VLLM.exclusive})
    host = replace_state(host, cpu=replace(cpu, entries=frozen_map(entries)))

    vllm = {w.container_id: w for w in build_workloads(host, REFERENCE)}[VLLM.container.container_id]

    assert vllm.container_name is None
    assert vllm.exclusive_cpus is None


def test_v1_cpu_manager_state_is_joined_by_container_id():
    host = reference_snapshot()
    cpu = host.kubelet_state.cpu
    v1 = replace(
        cpu, version=1, entries=frozen_map(), entries_v1=frozen_map({VLLM.container.container_id: VLLM.exclusive})
    )
    host = replace_state(host, cpu=v1)

    workloads = by_name(build_workloads(host, REFERENCE))

    assert workloads["vllm"].exclusive_cpus == VLLM.exclusive
    assert workloads["trtllm"].exclusive_cpus is None


def test_gpu_registered_without_topology_takes_its_numa_node_from_sysfs_through_the_uuid():
    host = reference_snapshot()
    devices = host.kubelet_state.devices
    entry = DeviceAssignment(VLLM.uid, "vllm", GPU_RESOURCE, frozen_map({-1: (GPUS[0].uuid + "::3",)}))
    host = replace_state(host, devices=replace(devices, entries=(entry,)))

    (gpu,) = by_name(build_workloads(host, REFERENCE))["vllm"].gpus

    assert gpu.plugin_without_topology
    assert gpu.plugin_numa_nodes == frozenset()
    assert gpu.uuid == GPUS[0].uuid  # the time-slicing replica suffix is not part of the UUID
    assert gpu.sysfs_numa_node == 0
    assert gpu.numa_node == 0
    assert gpu.label == GPUS[0].pci_address


def test_gpu_missing_from_sysfs_uses_the_plugins_node_and_its_device_id_as_label():
    host = with_results(reference_snapshot(), gpus_sysfs=GpuInventory(gpus=()))

    gpus = by_name(build_workloads(host, REFERENCE))["trtllm"].gpus

    assert [(g.numa_node, g.label, g.pci_address) for g in gpus] == [
        (1, GPUS[2].uuid, None),
        (1, GPUS[3].uuid, None),
    ]


def test_devices_of_other_resources_are_not_gpus_and_do_not_require_pinning():
    host = reference_snapshot()
    devices = host.kubelet_state.devices
    nic = DeviceAssignment(NODE_EXPORTER.uid, "node-exporter", "rdma/hca", frozen_map({0: ("mlx5_0",)}))
    host = replace_state(host, devices=replace(devices, entries=(*devices.entries, nic)))

    exporter = by_name(build_workloads(host, REFERENCE))["node-exporter"]

    assert exporter.gpus == ()
    assert not exporter.must_pin


def test_intent_selectors_make_a_container_must_pin_and_gpu_pinning_can_be_turned_off():
    intent = Intent(pin_gpu_containers=False, pinned=(PodSelector(namespace="kube-system", pod="node-exporter-*"),))

    workloads = by_name(build_workloads(reference_snapshot(), intent))

    assert workloads["node-exporter"].must_pin
    assert not workloads["vllm"].must_pin
    assert workloads["vllm"].gpus  # still joined, just not a reason to pin


def test_qos_comes_from_the_pod_cgroup():
    host = replace_pod(reference_snapshot(), TRTLLM.uid, qos="burstable")

    assert by_name(build_workloads(host, REFERENCE))["trtllm"].qos == "burstable"


# --------------------------------------------------------------------------------------------- the files, end to end
VARIANTS = [
    pytest.param({}, id="rke2-cgroup2-systemd-containerd"),
    pytest.param({"cgroup_version": 1, "driver": "cgroupfs"}, id="rke2-cgroup1-cgroupfs-containerd"),
    pytest.param({"runtime": "crio"}, id="rke2-cgroup2-systemd-crio"),
    pytest.param({"flavor": "kubeadm", "cgroup_version": 1, "driver": "systemd"}, id="kubeadm-cgroup1-systemd"),
]
CORE_SOURCES = ("topology", "cgroups", "names", "kubelet_config", "kubelet_state", "gpus_sysfs")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.slow
def test_reference_node_read_from_its_files_is_clean_end_to_end(fake_host, variant):
    node = reference_node(fake_host, **variant)

    evaluation = node.evaluate()

    assert [(f.check, dict(f.labels)) for f in evaluation.findings] == []
    for name in CORE_SOURCES:
        assert evaluation.host.statuses[name].up, evaluation.host.statuses[name].reason
    skipped = {n.check: n.reason for n in evaluation.not_evaluated}
    core_checks = {c.id for c in (*kubelet_checks.CHECKS, *pinning_checks.CHECKS, *gpu_checks.CHECKS)}
    assert not core_checks & set(skipped), skipped


def essentials(workload):
    return (
        workload.namespace,
        workload.pod_name,
        workload.container_name,
        workload.container_id,
        workload.qos,
        workload.exclusive_cpus,
        workload.cpus,
        workload.mems,
        dict(workload.numa_bytes or {}),
        tuple((g.device_id, g.numa_node, g.pci_address, g.plugin_without_topology) for g in workload.gpus),
        workload.memory_blocks,
        workload.must_pin,
    )


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.slow
def test_reference_files_and_reference_snapshot_describe_the_same_node(fake_host, variant):
    from_files = reference_node(fake_host, **variant).read()
    snapshot = reference_snapshot()

    assert sorted(map(essentials, build_workloads(from_files, REFERENCE))) == sorted(
        map(essentials, build_workloads(snapshot, REFERENCE))
    )
    topology, expected = from_files.topology, snapshot.topology
    assert (topology.online, topology.isolated, topology.housekeeping) == (
        expected.online,
        expected.isolated,
        expected.housekeeping,
    )
    assert {n: (node.cpus, node.mem_total_bytes, dict(node.hugepages_total)) for n, node in topology.nodes.items()} == {
        n: (node.cpus, node.mem_total_bytes, dict(node.hugepages_total)) for n, node in expected.nodes.items()
    }
    config, expected_config = from_files.kubelet_config, snapshot.kubelet_config
    for attr in (
        "cpu_manager_policy",
        "topology_manager_policy",
        "topology_manager_scope",
        "memory_manager_policy",
        "reserved_cpus",
    ):
        assert getattr(config, attr) == getattr(expected_config, attr), attr
    assert {n: dict(r) for n, r in config.reserved_memory.items()} == RESERVED_MEMORY
    state = from_files.kubelet_state
    assert state.problems == ()
    assert state.cpu.default_cpuset == DEFAULT_CPUSET
    assert {
        n: (s.number_of_assignments, dict(s.memory_map), tuple(s.cells)) for n, s in state.memory.machine_state.items()
    } == {n: (s.number_of_assignments, dict(s.memory_map), tuple(s.cells)) for n, s in machine_state_tables().items()}


def test_hand_written_machine_state_is_what_the_kubelet_builder_computes_for_the_same_node():
    # Two independent statements of the kubelet's arithmetic (fakehost.kubelet's and this module's literal numbers).
    computed = kubelet_memory_machine_state(
        {0: MEM_TOTAL, 1: MEM_TOTAL},
        hugepages={0: HUGEPAGES_PER_NODE, 1: HUGEPAGES_PER_NODE},
        reserved_memory=RESERVED_MEMORY,
        entries={pod.uid: {pod.container.name: pod.memory_blocks} for pod in (VLLM, TRTLLM)},
    )

    assert {n: (s.number_of_assignments, dict(s.memory_map), tuple(s.cells)) for n, s in computed.items()} == {
        n: (s.number_of_assignments, dict(s.memory_map), tuple(s.cells)) for n, s in machine_state_tables().items()
    }


def test_the_join_is_reused_for_the_same_host_and_intent_and_redone_for_another_intent():
    host = reference_snapshot()
    first = build_workloads(host, REFERENCE)

    assert build_workloads(host, REFERENCE) is first
    other = build_workloads(host, Intent(pin_gpu_containers=False))
    assert other is not first
    assert not any(w.must_pin for w in other)


# --------------------------------------------------------------------------------------------- reuse across readings
def from_scratch(host: Host, intent: Intent = REFERENCE):
    return build_workloads(readings.from_scratch(host), intent)  # nothing derived before: everything joined anew


def reused(workloads, earlier) -> set[str]:
    """Container IDs whose Workload is the very object of the earlier join."""
    earlier_ids = {id(w) for w in earlier}
    return {w.container_id for w in workloads if id(w) in earlier_ids}


ALL_CONTAINERS = {VLLM.container.container_id, TRTLLM.container.container_id, NODE_EXPORTER.container.container_id}


def test_a_reading_with_the_same_pod_and_input_objects_reuses_every_workload_of_the_previous_join():
    first = readings.as_reading(reference_snapshot())
    earlier = build_workloads(first, REFERENCE)
    second = readings.next_reading(first)

    workloads = build_workloads(second, REFERENCE)

    assert reused(workloads, earlier) == ALL_CONTAINERS
    assert workloads == from_scratch(second)


def test_a_changed_pod_is_joined_again_and_the_unchanged_pods_are_reused():
    first = readings.as_reading(reference_snapshot())
    earlier = build_workloads(first, REFERENCE)
    changed = replace_container(first, VLLM.container.container_id, cpus_effective=DEFAULT_CPUSET)  # drift
    second = readings.next_reading(first, cgroups=changed.cgroups)

    workloads = build_workloads(second, REFERENCE)

    # replace_container copies every pod: equal to the previous ones, but each read again (a new generation).
    assert reused(workloads, earlier) == set()
    # The cgroups source hands an unchanged pod out again (its generation stays): only the drifted one is joined again.
    first = readings.as_reading(reference_snapshot())  # another HostReader's readings
    earlier = build_workloads(first, REFERENCE)
    pods = tuple(
        new if new.uid == VLLM.uid else old for old, new in zip(first.cgroups.pods, changed.cgroups.pods, strict=True)
    )
    third = readings.next_reading(first, cgroups=replace(changed.cgroups, pods=pods))
    workloads = build_workloads(third, REFERENCE)
    assert reused(workloads, earlier) == ALL_CONTAINERS - {VLLM.container.container_id}
    assert by_name(workloads)["vllm"].cpus == DEFAULT_CPUSET
    assert workloads == from_scratch(third)


def changed_names(host: Host):
    names = host.names
    containers = dict(names.containers)
    cid = VLLM.container.container_id
    containers[cid] = replace(containers[cid], pod_name="vllm-llama-1")
    return replace(names, containers=frozen_map(containers))


def changed_state(host: Host):
    cpu = host.kubelet_state.cpu
    entries = dict(cpu.entries)
    entries[VLLM.uid] = frozen_map({"vllm": TRTLLM.exclusive})
    return replace(host.kubelet_state, cpu=replace(cpu, entries=frozen_map(entries)))


def test_a_new_gpu_snapshot_joins_every_pod_again():
    first = readings.as_reading(reference_snapshot())
    earlier = build_workloads(first, REFERENCE)
    second = readings.next_reading(first, gpus_sysfs=GpuInventory(gpus=()))

    workloads = build_workloads(second, REFERENCE)

    assert reused(workloads, earlier) == set()
    assert workloads == from_scratch(second)


def changed_pool(host: Host):
    cpu = host.kubelet_state.cpu
    return replace(host.kubelet_state, cpu=replace(cpu, default_cpuset=cpu.default_cpuset - {7}))


@pytest.mark.parametrize(
    ("change", "joined_again"),
    [
        pytest.param(changed_state, {VLLM.container.container_id}, id="one-pods-cpus"),
        # The shared pool is no pod's entry: no join reads it (container_cpuset_drift names it in its inputs).
        pytest.param(changed_pool, set(), id="shared-pool"),
        # Read again (a new generation) but saying the same of every pod: the CPU Manager rewrites its checkpoint
        # for every pod pinned or gone, and every other pod's entries stay.
        pytest.param(lambda host: replace(host.kubelet_state), set(), id="equal-copy"),
        pytest.param(lambda host: None, ALL_CONTAINERS, id="state-down"),
    ],
)
def test_a_new_kubelet_state_joins_again_only_the_pods_whose_entries_changed(change, joined_again):
    first = readings.as_reading(reference_snapshot())
    earlier = build_workloads(first, REFERENCE)
    second = readings.next_reading(first, kubelet_state=change(first))

    workloads = build_workloads(second, REFERENCE)

    assert reused(workloads, earlier) == ALL_CONTAINERS - joined_again
    assert workloads == from_scratch(second)


@pytest.mark.parametrize(
    ("change", "joined_again"),
    [
        pytest.param(changed_names, {VLLM.container.container_id}, id="one-pods-names"),
        # Read again (a new generation) but saying the same of every pod: under pod churn the names source is read
        # again at nearly every evaluation, for the one pod that came or went.
        pytest.param(lambda host: replace(host.names), set(), id="equal-copy"),
        pytest.param(lambda host: None, ALL_CONTAINERS, id="names-down"),
    ],
)
def test_a_new_names_snapshot_joins_again_only_the_pods_whose_names_changed(change, joined_again):
    first = readings.as_reading(reference_snapshot())
    earlier = build_workloads(first, REFERENCE)
    second = readings.next_reading(first, names=change(first))

    workloads = build_workloads(second, REFERENCE)

    assert reused(workloads, earlier) == ALL_CONTAINERS - joined_again
    assert workloads == from_scratch(second)


def test_names_changed_and_changed_back_join_the_pod_as_each_reading_says():
    first = readings.as_reading(reference_snapshot())
    build_workloads(first, REFERENCE)
    second = readings.next_reading(first, names=changed_names(first))
    third = readings.next_reading(second, names=first.names)  # back as it was, read again

    assert by_name(build_workloads(second, REFERENCE))["vllm"].pod_name == "vllm-llama-1"
    assert by_name(build_workloads(third, REFERENCE))["vllm"].pod_name == VLLM.name
    assert build_workloads(third, REFERENCE) == from_scratch(third)


def test_the_changed_inputs_show_in_the_new_join():
    first = readings.as_reading(reference_snapshot())
    build_workloads(first, REFERENCE)

    names = by_name(build_workloads(readings.next_reading(first, names=changed_names(first)), REFERENCE))
    state = by_name(build_workloads(readings.next_reading(first, kubelet_state=changed_state(first)), REFERENCE))
    gpus = by_name(build_workloads(readings.next_reading(first, gpus_sysfs=GpuInventory(gpus=())), REFERENCE))

    assert names["vllm"].pod_name == "vllm-llama-1"
    assert state["vllm"].exclusive_cpus == TRTLLM.exclusive
    assert all(g.pci_address is None for g in gpus["vllm"].gpus)


def test_another_intent_joins_every_pod_again():
    first = readings.as_reading(reference_snapshot())
    earlier = build_workloads(first, REFERENCE)
    second = readings.next_reading(first)
    intent = Intent(pin_gpu_containers=False)

    workloads = build_workloads(second, intent)

    assert reused(workloads, earlier) == set()
    assert not any(w.must_pin for w in workloads)
    assert workloads == from_scratch(second, intent)


def test_a_previous_reading_that_was_not_joined_or_had_no_cgroups_gives_nothing_to_reuse():
    unjoined = reference_snapshot()
    down = with_source_down(reference_snapshot(), "cgroups")
    assert build_workloads(down, REFERENCE) == ()

    for previous in (unjoined, down):
        second = readings.next_reading(previous, cgroups=unjoined.cgroups)
        workloads = build_workloads(second, REFERENCE)
        assert {w.container_id for w in workloads} == ALL_CONTAINERS
        assert workloads == from_scratch(second)


@pytest.mark.slow
def test_a_staggered_reader_hands_unchanged_pods_the_previous_readings_workloads(fake_host):
    node = reference_node(fake_host)
    reader = HostReader(node.paths, stagger=4)
    first = reader.read()
    earlier = build_workloads(first, REFERENCE)

    for _ in range(4):  # every pod's turn comes once in four readings: reuse must survive a re-read turn
        host = reader.read()
        workloads = build_workloads(host, REFERENCE)
        assert {w.container_id for w in workloads} == reused(workloads, earlier) == ALL_CONTAINERS
        assert workloads == from_scratch(host)
        earlier = workloads


def test_a_staggered_reader_joins_a_drifted_container_again(fake_host):
    node = reference_node(fake_host)
    reader = HostReader(node.paths, stagger=4)
    earlier = build_workloads(reader.read(), REFERENCE)
    set_container_cpus(fake_host, node.pod(VLLM), "vllm", DEFAULT_CPUSET)

    host = reader.read()
    workloads = build_workloads(host, REFERENCE)

    assert by_name(workloads)["vllm"].cpus == DEFAULT_CPUSET
    assert VLLM.container.container_id not in reused(workloads, earlier)
    assert workloads == from_scratch(host)


def test_a_fresh_reader_has_no_previous_reading_and_joins_everything(fake_host):
    node = reference_node(fake_host)
    reader = HostReader(node.paths, stagger=4)
    earlier = build_workloads(reader.read(), REFERENCE)

    host = read_host(node.paths)  # numawatch check
    workloads = build_workloads(host, REFERENCE)

    assert host.previous is None
    assert reused(workloads, earlier) == set()
    assert workloads == earlier


def test_keeping_the_previous_readings_join_does_not_keep_older_readings_alive(fake_host):
    node = reference_node(fake_host)
    reader = HostReader(node.paths, stagger=4)
    renderer = metrics.Renderer()

    def serve_once() -> Host:
        host = reader.read()
        renderer.render(evaluate(host, REFERENCE))  # every check and family: everything they memoise
        return host

    first = serve_once()
    second = serve_once()
    gone = [weakref.ref(first), weakref.ref(second.previous)]
    assert len(reader.store) > 0  # what the next reading may reuse: by generations, holding no Host
    del first, second
    third = serve_once()
    gc.collect()

    assert [ref() for ref in gone] == [None, None]
    assert third.previous is not None and third.previous.previous is None
