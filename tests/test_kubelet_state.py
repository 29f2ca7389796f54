"""The kubelet_state source: every version of the three checkpoint files, Go-style lenient decoding, and the files
the kubelet would refuse (reported as problems, not as a source failure)."""

from __future__ import annotations

import json
import os

import pytest
from fakehost.kubelet import (
    CPU_STATE,
    DEVICE_CHECKPOINT,
    MEMORY_STATE,
    kubelet_memory_machine_state,
    write_cpu_manager_state,
    write_device_checkpoint,
    write_memory_manager_state,
    write_rke2_data_dir,
)
from numawatch.checkpoint_checksum import cpu_manager_checksum, dump_cpu_manager_v2, fnv1a_32, memory_manager_checksum
from numawatch.errors import SourceUnavailable
from numawatch.host import read_host
from numawatch.model.kubelet import (
    ERAS,
    SINCE_1_36,
    UNTIL_1_35,
    DeviceAssignment,
    KubeletState,
    MemoryBlock,
    StateFileProblem,
)
from numawatch.sources import kubelet_state
from numawatch.sources.kubelet_state import (
    parse_cpu_manager_state,
    parse_device_checkpoint,
    parse_memory_manager_state,
)

CPU = "/var/lib/kubelet/cpu_manager_state"
MEMORY = "/var/lib/kubelet/memory_manager_state"
DEVICES = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
POD = "7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57"
GPUS = [f"GPU-{str(d) * 8}-0000-0000-0000-00000000000{d}" for d in range(4)]
GiB = 1 << 30


def _machine(entries=None):
    return kubelet_memory_machine_state(
        {0: 256 * GiB, 1: 256 * GiB},
        hugepages={1: {1048576: 8}},
        reserved_memory={0: {"memory": "4Gi"}},
        entries=entries,
    )


# --------------------------------------------------------------------------------------------------- the source
def test_no_kubelet_directory_makes_the_source_unavailable(fake_host):
    with pytest.raises(SourceUnavailable, match="no kubelet directory"):
        kubelet_state.read(fake_host.paths)


def test_a_kubelet_directory_without_state_files_reads_as_all_none(fake_host):
    fake_host.mkdir("var/lib/kubelet")
    assert kubelet_state.read(fake_host.paths) == KubeletState(None, None, None, ())


def test_reads_all_three_files_written_by_the_kubelet(fake_host):
    blocks = {POD: {"vllm": [MemoryBlock((1,), "memory", 64 * GiB), MemoryBlock((1,), "hugepages-1Gi", 4 * GiB)]}}
    write_cpu_manager_state(fake_host, policy="static", default_cpuset="0-1,4-7", entries={POD: {"vllm": "2-3"}})
    write_memory_manager_state(fake_host, policy="Static", machine_state=_machine(blocks), entries=blocks)
    write_device_checkpoint(
        fake_host,
        entries=[DeviceAssignment(POD, "vllm", "nvidia.com/gpu", {1: (GPUS[2], GPUS[3])})],
        registered={"nvidia.com/gpu": GPUS},
        boot_id="6c0d3c2e-2d55-4d5e-8a58-4bd8d4f3a0a1",
    )
    state = kubelet_state.read(fake_host.paths)
    assert state.problems == ()
    assert (state.cpu.file, state.cpu.version, state.cpu.checksum_ok) == (CPU, 2, True)
    assert state.cpu.entries == {POD: {"vllm": frozenset({2, 3})}}
    assert state.cpu.default_cpuset == frozenset({0, 1, 4, 5, 6, 7})
    assert (state.memory.file, state.memory.policy_name, state.memory.checksum_ok) == (MEMORY, "Static", True)
    assert state.memory.entries[POD]["vllm"] == tuple(blocks[POD]["vllm"])
    node1 = state.memory.machine_state[1]
    assert node1.number_of_assignments == 2
    assert node1.memory_map["hugepages-1Gi"].reserved == 4 * GiB
    assert node1.memory_map["memory"].allocatable == 256 * GiB - 8 * GiB
    assert state.memory.machine_state[0].memory_map["memory"].system_reserved == 4 * GiB
    assert (state.devices.file, state.devices.checksum_ok) == (DEVICES, True)
    assert state.devices.entries[0].devices_per_numa == {1: (GPUS[2], GPUS[3])}
    assert state.devices.registered == {"nvidia.com/gpu": tuple(GPUS)}
    assert state.devices.boot_id == "6c0d3c2e-2d55-4d5e-8a58-4bd8d4f3a0a1"


def test_a_refused_file_is_a_problem_while_the_others_are_read(fake_host):
    write_cpu_manager_state(fake_host, policy="static", default_cpuset="0-7", checksum=12345)
    fake_host.write(MEMORY_STATE, '{"policyName":"Static","machineState":{"0":')
    write_device_checkpoint(fake_host, entries=[], registered={"nvidia.com/gpu": GPUS})
    state = kubelet_state.read(fake_host.paths)
    assert state.cpu.checksum_ok is False
    assert state.memory is None
    assert state.devices.checksum_ok is True
    assert [(p.file, p.reason) for p in state.problems] == [(CPU, "checksum_mismatch"), (MEMORY, "unparsable")]


def test_problems_keep_the_source_up_in_the_host_reader(fake_host):
    fake_host.write(CPU_STATE, "not json")
    host = read_host(fake_host.paths, [kubelet_state.SOURCE])
    assert host.statuses["kubelet_state"].up
    assert host.kubelet_state.problems[0].reason == "unparsable"


def test_a_state_path_that_is_a_directory_takes_the_source_down(fake_host):
    fake_host.mkdir(CPU_STATE)
    host = read_host(fake_host.paths, [kubelet_state.SOURCE])
    assert not host.statuses["kubelet_state"].up
    assert "cpu_manager_state" in host.statuses["kubelet_state"].reason


def test_fingerprint_changes_when_the_kubelet_renames_a_new_file_into_place(fake_host):
    write_cpu_manager_state(fake_host, policy="static", default_cpuset="0-7")
    before = kubelet_state.fingerprint(fake_host.paths)
    assert kubelet_state.fingerprint(fake_host.paths) == before
    replacement = fake_host.path("var/lib/kubelet/.cpu_manager_state.tmp")
    replacement.write_bytes(fake_host.path(CPU_STATE).read_bytes())
    os.replace(replacement, fake_host.path(CPU_STATE))  # same content and size, new inode
    assert kubelet_state.fingerprint(fake_host.paths) != before


def test_fingerprint_notices_a_file_appearing(fake_host):
    fake_host.mkdir("var/lib/kubelet")
    before = kubelet_state.fingerprint(fake_host.paths)
    write_device_checkpoint(fake_host, entries=[], registered={})
    assert kubelet_state.fingerprint(fake_host.paths) != before


# --------------------------------------------------------------------------------------------------- kubelet version
def test_the_rke2_data_directory_the_bin_link_names_gives_the_kubelet_version(fake_host):
    write_cpu_manager_state(fake_host, default_cpuset="0-7")
    write_rke2_data_dir(fake_host, "v1.35.4")
    name = write_rke2_data_dir(fake_host, "v1.36.1", release="rke2r2")  # the upgrade: the old directory stays
    version = kubelet_state.read(fake_host.paths).rke2_version
    assert (version.major, version.minor, version.text) == (1, 36, "v1.36.1")
    assert version.origin == f"RKE2's data directory /var/lib/rancher/rke2/data/{name}"


def test_without_the_bin_link_a_single_data_directory_gives_the_version_and_several_none(fake_host):
    write_cpu_manager_state(fake_host, default_cpuset="0-7")
    write_rke2_data_dir(fake_host, "v1.35.4", current=False)
    assert kubelet_state.read(fake_host.paths).rke2_version.text == "v1.35.4"
    write_rke2_data_dir(fake_host, "v1.36.1", current=False)
    assert kubelet_state.read(fake_host.paths).rke2_version is None


@pytest.mark.parametrize(
    "target",
    [
        "/var/lib/rancher/rke2/data/v1.36.1-rke2r1-\x1b[31mevil/bin",  # not a data directory's name: never repeated
        "/opt/elsewhere/bin",
        "data/latest/bin",
    ],
)
def test_a_bin_link_to_something_else_falls_back_to_the_data_directories(fake_host, target):
    write_cpu_manager_state(fake_host, default_cpuset="0-7")
    write_rke2_data_dir(fake_host, "v1.35.4", current=False)
    fake_host.symlink("var/lib/rancher/rke2/bin", target)
    version = kubelet_state.read(fake_host.paths).rke2_version
    assert version.text == "v1.35.4"
    assert "evil" not in version.origin


def test_a_kubeadm_node_has_no_rke2_version(fake_host):
    write_cpu_manager_state(fake_host, default_cpuset="0-7")
    assert kubelet_state.read(fake_host.paths).rke2_version is None


def test_fingerprint_changes_when_an_rke2_upgrade_moves_the_bin_link(fake_host):
    write_cpu_manager_state(fake_host, default_cpuset="0-7")
    write_rke2_data_dir(fake_host, "v1.35.4")
    before = kubelet_state.fingerprint(fake_host.paths)
    write_rke2_data_dir(fake_host, "v1.36.1")
    assert kubelet_state.fingerprint(fake_host.paths) != before


def test_host_paths_name_files_as_the_node_does_under_a_custom_root(fake_host):
    write_cpu_manager_state(fake_host, policy="none", default_cpuset="", checksum=7)
    (problem,) = kubelet_state.read(fake_host.paths).problems
    assert problem.file == "/var/lib/kubelet/cpu_manager_state"


# --------------------------------------------------------------------------------------------------- CPU versions
def test_cpu_v1_file_is_keyed_by_container_id(fake_host):
    write_cpu_manager_state(fake_host, version=1, default_cpuset="0,3-7", entries={"abc123": "1-2"})
    state = kubelet_state.read(fake_host.paths).cpu
    assert (state.version, state.checksum_ok) == (1, True)
    assert state.entries_v1 == {"abc123": frozenset({1, 2})}
    assert state.entries == {}


def test_cpu_v3_file_carries_pod_entries(fake_host):
    write_cpu_manager_state(
        fake_host, version=3, default_cpuset="0-1", entries={POD: {"a": "2-3"}}, pod_entries={"pod-b": [4, 5, 6, 7]}
    )
    state = kubelet_state.read(fake_host.paths)
    # 1.36+ verify the v3 hash, pod entries included; a kubelet <= 1.35 reads it as v2, whose hash differs.
    assert [(p.reason, p.eras) for p in state.problems] == [("checksum_mismatch", frozenset({UNTIL_1_35}))]
    assert (state.cpu.version, state.cpu.checksum_ok) == (3, None)
    assert state.cpu.pod_entries == {"pod-b": frozenset({4, 5, 6, 7})}


def test_cpu_v3_file_without_pod_entries_verifies_from_1_36(fake_host):
    write_cpu_manager_state(fake_host, version=3, default_cpuset="0-1", entries={POD: {"a": "2-3"}})
    fake_host.write(CPU_STATE, fake_host.path(CPU_STATE).read_text().replace("}},", '}},"podEntries":{},', 1))
    state = kubelet_state.read(fake_host.paths)
    assert (state.cpu.version, state.cpu.checksum_ok) == (3, None)
    assert [p.eras for p in state.problems] == [frozenset({UNTIL_1_35})]


def test_cpu_v4_restores_from_data_and_verifies_its_data_checksum(fake_host):
    write_cpu_manager_state(fake_host, version=4, default_cpuset="0-1", entries={POD: {"a": "2-3"}})
    document = json.loads(fake_host.path(CPU_STATE).read_text())
    document["policyName"] = "none"  # the legacy body may differ: data is what a 1.37 kubelet restores
    fake_host.write(CPU_STATE, json.dumps(document))
    state = kubelet_state.read(fake_host.paths)
    assert state.problems == ()
    assert (state.cpu.version, state.cpu.policy_name, state.cpu.checksum_ok) == (4, "static", True)
    assert state.cpu.entries == {POD: {"a": frozenset({2, 3})}}


def test_cpu_v4_with_a_wrong_data_checksum_is_a_mismatch(fake_host):
    write_cpu_manager_state(fake_host, version=4, default_cpuset="0-1", checksum=1)
    state = kubelet_state.read(fake_host.paths)
    # A kubelet <= 1.35 knows no data and reads the legacy body, written with checksum 0 for it.
    assert state.cpu.checksum_ok is None
    assert state.problems[0].eras == frozenset({SINCE_1_36})
    assert "dataChecksum 1 in the file" in state.problems[0].detail


def test_cpu_v4_whose_data_is_not_json_is_unparsable():
    text = json.dumps({"policyName": "static", "checksum": 0, "data": "{not json", "dataChecksum": 1})
    state, problem = parse_cpu_manager_state(text, CPU)
    assert (problem.reason, problem.eras) == ("unparsable", frozenset({SINCE_1_36}))
    assert "data" in problem.detail
    assert state.version == 2  # what a kubelet <= 1.35 restores: the legacy body


def test_cpu_none_policy_file_with_only_the_policy(fake_host):
    write_cpu_manager_state(fake_host, policy="none", default_cpuset="")
    state = kubelet_state.read(fake_host.paths).cpu
    assert (state.policy_name, state.default_cpuset, state.checksum_ok) == ("none", frozenset(), True)


# --------------------------------------------------------------------------------------------------- lenient decoding
def test_cpu_keys_match_case_insensitively_as_go_does():
    value = cpu_manager_checksum("static", "0-3", {"pod": {"c": "4-5"}})
    text = json.dumps(
        {"POLICYNAME": "static", "DefaultCPUSet": "0-3", "Entries": {"pod": {"c": "4-5"}}, "CheckSum": value}
    )
    state, problem = parse_cpu_manager_state(text, CPU)
    assert problem is None
    assert (state.policy_name, state.checksum_ok) == ("static", True)
    assert state.entries == {"pod": {"c": frozenset({4, 5})}}


def test_unknown_keys_are_ignored_and_the_last_duplicate_wins():
    value = cpu_manager_checksum("static", "0-3", {})
    text = (
        f'{{"policyName":"none","future":{{"x":[1,2]}},"policyname":"static","defaultCpuSet":"0-3","checksum":{value}}}'
    )
    state, problem = parse_cpu_manager_state(text, CPU)
    assert problem is None
    assert state.policy_name == "static"


def test_null_entries_hash_as_a_nil_map():
    value = fnv1a_32(dump_cpu_manager_v2("static", "0-3", None))
    state, problem = parse_cpu_manager_state(
        json.dumps({"policyName": "static", "defaultCpuSet": "0-3", "entries": None, "checksum": value}), CPU
    )
    assert problem is None
    assert state.checksum_ok is True


def test_memory_keys_match_case_insensitively():
    blocks = {POD: {"c": [MemoryBlock((0,), "memory", GiB)]}}
    machine = _machine(blocks)
    value = memory_manager_checksum("Static", machine, blocks)
    document = {
        "PolicyName": "Static",
        "MACHINESTATE": {
            str(n): {
                "NumberOfAssignments": s.number_of_assignments,
                "MemoryMap": {
                    k: {
                        "Total": t.total,
                        "SystemReserved": t.system_reserved,
                        "ALLOCATABLE": t.allocatable,
                        "reserved": t.reserved,
                        "Free": t.free,
                    }
                    for k, t in s.memory_map.items()
                },
                "Cells": list(s.cells),
            }
            for n, s in machine.items()
        },
        "Entries": {POD: {"c": [{"NUMAAffinity": [0], "Type": "memory", "Size": GiB}]}},
        "Checksum": value,
    }
    state, problem = parse_memory_manager_state(json.dumps(document), MEMORY)
    assert problem is None
    assert state.checksum_ok is True
    assert state.entries[POD]["c"] == (MemoryBlock((0,), "memory", GiB),)


# --------------------------------------------------------------------------------------------------- malformed input
@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "invalid JSON"),
        ('{"policyName":"static","defaultCpuSet":"0-3","chec', "invalid JSON"),
        ("[1, 2]", "expected an object, got an array"),
        ('{"policyName":5,"checksum":0}', "policyName: expected a string, got a number"),
        ('{"policyName":"static","checksum":-1}', "checksum: expected an integer"),
        ('{"policyName":"static","checksum":1.0}', "checksum: expected an integer"),
        ('{"policyName":"static","checksum":18446744073709551616}', "checksum: expected an integer"),
        ('{"policyName":"static","checksum":"123"}', "checksum: expected an integer"),
        ('{"policyName":"static","entries":[],"checksum":0}', "entries: expected an object, got an array"),
        ('{"policyName":"static","entries":{"pod":{"c":7}},"checksum":0}', "entries.pod.c: expected a string"),
        ('{"policyName":"static","checksum":NaN}', "NaN is not valid JSON"),
        ('{"policyName":"static","checksum":0} trailing', "invalid JSON"),
        ('{"policyName":"static","defaultCpuSet":"0-3,","checksum":0}', "defaultCpuSet: empty element"),
        (b"\xff\xfe\x00garbage", "invalid JSON"),
    ],
)
def test_malformed_cpu_state_is_an_unparsable_problem(text, detail):
    state, problem = parse_cpu_manager_state(text, CPU)
    assert state is None
    assert problem == StateFileProblem(CPU, "unparsable", problem.detail)
    assert detail in problem.detail
    assert "\n" not in problem.detail


@pytest.mark.parametrize(
    ("document", "detail"),
    [
        ({"policyName": "Static", "machineState": [], "checksum": 1}, "machineState: expected an object"),
        ({"policyName": "Static", "machineState": {"zero": {}}, "checksum": 1}, "key 'zero' is not an integer"),
        (
            {"policyName": "Static", "machineState": {"0": {"numberOfAssignments": "0"}}, "checksum": 1},
            "machineState.0.numberOfAssignments: expected an integer",
        ),
        (
            {"policyName": "Static", "machineState": {"0": {"memoryMap": {"memory": {"total": -1}}}}, "checksum": 1},
            "machineState.0.memoryMap.memory.total",
        ),
        (
            {"policyName": "Static", "entries": {"pod": {"c": [{"numaAffinity": "0"}]}}, "checksum": 1},
            "entries.pod.c[0].numaAffinity: expected an array",
        ),
    ],
)
def test_wrong_types_in_memory_state_are_unparsable(document, detail):
    state, problem = parse_memory_manager_state(json.dumps(document), MEMORY)
    assert state is None
    assert problem.reason == "unparsable"
    assert detail in problem.detail


def test_memory_data_of_the_wrong_type_is_unparsable_from_1_36():
    state, problem = parse_memory_manager_state(
        json.dumps({"policyName": "Static", "data": 5, "dataChecksum": 1}), MEMORY
    )
    # 1.36+ cannot decode data; a kubelet <= 1.35 reads the legacy body and refuses its checksum 0.
    assert (problem.reason, problem.eras) == ("unparsable", ERAS)
    assert "kubelet >=1.36: data: expected a string" in problem.detail
    assert "kubelet <=1.35: checksum 0 in the file" in problem.detail
    assert state.version == 1


def test_truncated_memory_state_is_unparsable(fake_host):
    write_memory_manager_state(fake_host, machine_state=_machine())
    data = fake_host.path(MEMORY_STATE).read_bytes()
    fake_host.write(MEMORY_STATE, data[: len(data) // 2])
    state = kubelet_state.read(fake_host.paths)
    assert state.memory is None
    assert state.problems[0].reason == "unparsable"


def test_a_bad_cpuset_behind_a_wrong_checksum_is_reported_as_the_mismatch():
    text = '{"policyName":"static","defaultCpuSet":"zero","checksum":99}'
    state, problem = parse_cpu_manager_state(text, CPU)
    assert state is None
    assert problem.reason == "checksum_mismatch"


# --------------------------------------------------------------------------------------------------- memory versions
def test_memory_v2_file_carries_pod_entries(fake_host):
    write_memory_manager_state(
        fake_host, machine_state=_machine(), version=2, pod_entries={"pod-b": [MemoryBlock((1,), "memory", GiB)]}
    )
    state = kubelet_state.read(fake_host.paths)
    # 1.36+ verify the v2 hash, pod entries included; a kubelet <= 1.35 reads the v1 struct, whose hash differs.
    assert [(p.reason, p.eras) for p in state.problems] == [("checksum_mismatch", frozenset({UNTIL_1_35}))]
    assert (state.memory.version, state.memory.checksum_ok) == (2, None)
    assert state.memory.pod_entries == {"pod-b": (MemoryBlock((1,), "memory", GiB),)}


def test_memory_v3_restores_from_data(fake_host):
    blocks = {POD: {"c": [MemoryBlock((1,), "memory", GiB)]}}
    write_memory_manager_state(fake_host, machine_state=_machine(blocks), entries=blocks, version=3)
    state = kubelet_state.read(fake_host.paths)
    assert state.problems == ()
    assert (state.memory.version, state.memory.checksum_ok) == (3, True)
    assert state.memory.machine_state[1].number_of_assignments == 1


def test_memory_v3_with_a_wrong_data_checksum_is_a_mismatch(fake_host):
    write_memory_manager_state(fake_host, machine_state=_machine(), version=3, checksum=42)
    state = kubelet_state.read(fake_host.paths)
    # A kubelet <= 1.35 reads the legacy v1 body next to data, whose checksum is valid.
    assert state.memory.checksum_ok is None
    assert (state.problems[0].reason, state.problems[0].eras) == ("checksum_mismatch", frozenset({SINCE_1_36}))


def test_memory_checksum_mismatch_keeps_the_decoded_state(fake_host):
    write_memory_manager_state(fake_host, machine_state=_machine(), checksum=42)
    state = kubelet_state.read(fake_host.paths)
    assert state.memory.checksum_ok is False
    assert set(state.memory.machine_state) == {0, 1}


def test_machine_state_helper_replays_a_block_spanning_two_nodes():
    blocks = {POD: {"c": [MemoryBlock((0, 1), "memory", 300 * GiB)]}}
    machine = kubelet_memory_machine_state({0: 256 * GiB, 1: 256 * GiB}, entries=blocks, hugepage_sizes_kb=())
    assert [machine[n].cells for n in (0, 1)] == [(0, 1), (0, 1)]
    assert machine[0].memory_map["memory"].free == 0
    assert machine[1].memory_map["memory"].reserved == 44 * GiB
    assert set(machine[0].memory_map) == {"memory"}


# --------------------------------------------------------------------------------------------------- device checkpoint
def test_device_without_numa_topology_sits_under_minus_one(fake_host):
    write_device_checkpoint(
        fake_host, entries=[DeviceAssignment(POD, "c", "nvidia.com/gpu", {-1: (GPUS[0],)})], registered={}
    )
    checkpoint = kubelet_state.read(fake_host.paths).devices
    assert checkpoint.entries[0].devices_per_numa == {-1: (GPUS[0],)}
    assert checkpoint.checksum_ok is True
    assert checkpoint.boot_id is None


def test_legacy_device_lists_are_read_as_numa_node_zero(fake_host):
    write_device_checkpoint(
        fake_host,
        entries=[DeviceAssignment(POD, "c", "nvidia.com/gpu", {1: (GPUS[1], GPUS[0])})],
        registered={"nvidia.com/gpu": GPUS},
        legacy=True,
    )
    assert '"DeviceIDs":["' in fake_host.path(DEVICE_CHECKPOINT).read_text()
    checkpoint = kubelet_state.read(fake_host.paths).devices
    assert checkpoint.checksum_ok is True
    assert checkpoint.entries[0].devices_per_numa == {0: (GPUS[1], GPUS[0])}


def test_device_checksum_mismatch_says_the_kubelet_forgets_allocations(fake_host):
    write_device_checkpoint(fake_host, entries=[], registered={"nvidia.com/gpu": GPUS}, checksum=5)
    (problem,) = kubelet_state.read(fake_host.paths).problems
    assert (problem.file, problem.reason, problem.refuses_start) == (DEVICES, "checksum_mismatch", False)
    assert "forgets its device allocations" in problem.detail


def test_device_keys_match_case_insensitively():
    text = '{"data":{"podDeviceEntries":null,"registereddevices":{"nvidia.com/gpu":["a"]}},"checksum":0}'
    checkpoint, problem = parse_device_checkpoint(text, DEVICES)
    assert checkpoint.registered == {"nvidia.com/gpu": ("a",)}
    assert problem.reason == "checksum_mismatch"


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ('{"Data":[],"Checksum":1}', "Data: expected an object"),
        ('{"Data":{"PodDeviceEntries":{}},"Checksum":1}', "Data.PodDeviceEntries: expected an array"),
        (
            '{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"x":["a"]}}]},"Checksum":1}',
            "Data.PodDeviceEntries[0].DeviceIDs: key 'x' is not an integer",
        ),
        ('{"Data":{"PodDeviceEntries":[{"AllocResp":"***"}]},"Checksum":1}', "AllocResp: not valid base64"),
        (
            '{"Data":{"PodDeviceEntries":[{"DeviceIDs":["a"]},{"DeviceIDs":{"0":["b"]}}]},"Checksum":1}',
            "Data.PodDeviceEntries[1].DeviceIDs: expected an array",
        ),
        ('{"Data":{"RegisteredDevices":{"r":"a"}},"Checksum":1}', "Data.RegisteredDevices.r: expected an array"),
        ('{"Data":{},"Checksum":1,"BootID":7}', "BootID: expected a string"),
    ],
)
def test_malformed_device_checkpoint_is_unparsable(text, detail):
    checkpoint, problem = parse_device_checkpoint(text, DEVICES)
    assert checkpoint is None
    assert problem.reason == "unparsable"
    assert detail in problem.detail
