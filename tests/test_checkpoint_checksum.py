"""Checkpoint checksums: every published vector of kubelet.md §4.6, at the dump level and at the file level.

The vectors are copied verbatim from the reference: 12 dumps with their FNV-1a-32, the published and synthesized
``cpu_manager_state`` / ``memory_manager_state`` / ``kubelet_internal_checkpoint`` files, and the two memory v3
``dataChecksum`` strings. All must match exactly: the kubelet_state_stale check trusts them to tell a corrupt file
from a stale one.
"""

from __future__ import annotations

import base64
import json

import pytest
from numawatch.checkpoint_checksum import (
    CPU_V3_TYPE_NAMES,
    DeviceEntryRecord,
    checksum_matches,
    cpu_manager_checksum,
    data_checksum,
    device_checkpoint_checksum,
    dump_cpu_manager_v1,
    dump_cpu_manager_v2,
    dump_cpu_manager_v3,
    dump_device_checkpoint,
    dump_memory_manager_v1,
    dump_memory_manager_v2,
    fnv1a_32,
    memory_manager_checksum,
)
from numawatch.model.kubelet import ERAS, SINCE_1_36, UNTIL_1_35, MemoryBlock, MemoryNodeState, MemoryTable
from numawatch.sources.kubelet_state import (
    parse_cpu_manager_state,
    parse_device_checkpoint,
    parse_memory_manager_state,
)

CPU = "/var/lib/kubelet/cpu_manager_state"
MEMORY = "/var/lib/kubelet/memory_manager_state"
DEVICES = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"

# ------------------------------------------------------------------------------------------ vectors (kubelet.md §4.6)
DUMP_VECTORS = [
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)4-6 Entries:(map[string]"
            "map[string]string)map[] Checksum:(checksum.Checksum)0}"
        ),
        354655845,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3 Entries:(map[string]"
            "map[string]string)map[pod:map[container1:4-6 container2:1-3]] Checksum:(checksum.Checksum)0}"
        ),
        3610638499,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)other DefaultCPUSet:(string)1-3 Entries:(map[string"
            "]map[string]string)map[] Checksum:(checksum.Checksum)0}"
        ),
        1394507217,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1.3 Entries:(map[string]"
            "map[string]string)map[] Checksum:(checksum.Checksum)0}"
        ),
        3021697696,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3 Entries:(map[string]"
            "map[string]string)map[pod:map[container1:4-6 container2:asd]] Checksum:(checksum.Checksum)0}"
        ),
        962272150,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3 Entries:(map[string]"
            "string)map[] Checksum:(checksum.Checksum)0}"
        ),
        1694838852,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3 Entries:(map[string]"
            "string)map[containerID1:4-6 containerID2:1-3] Checksum:(checksum.Checksum)0}"
        ),
        3680390589,
    ),
    (
        (
            "(*state.MemoryManagerCheckpoint){PolicyName:(string)static MachineState:(state.NUMANodeMap)map[0:<*>"
            "{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[memory:<*>{TotalMe"
            "mSize:(uint64)2048 SystemReserved:(uint64)512 Allocatable:(uint64)1536 Reserved:(uint64)512 Free:(ui"
            "nt64)1024}] Cells:([]int)[]}] Entries:(state.ContainerMemoryAssignments)map[pod:map[container1:[{NUM"
            "AAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)512}]]] Checksum:(checksum.Checksum)0"
            "}"
        ),
        4215593881,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0-27 Entries:(map[stri"
            "ng]map[string]string)map[] Checksum:(checksum.Checksum)0}"
        ),
        273146150,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0,20-27 Entries:(map[s"
            "tring]map[string]string)map[9388acc6-a396-4f03-a353-ce153da46aaf:map[app:1-13,17-19] f21fe02b-e6e2-4"
            "d04-9a4a-9e57367fa324:map[app:14-16]] Checksum:(checksum.Checksum)0}"
        ),
        4055801500,
    ),
    (
        (
            "(*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0-2,4-26,28-47 Entries"
            ":(map[string]string)map[ab9940917010576bd755870dab91e2cd2fc531a04ac362d44a62950aaa41c527:3,27] Check"
            "sum:(checksum.Checksum)0}"
        ),
        1300288133,
    ),
    (
        (
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)bf52b2cd"
            "-b611-4e79-86b1-280b283185c3 ContainerName:(string)check ResourceName:(string)nvidia.com/gpu DeviceI"
            "Ds:(checkpoint.DevicesPerNUMA)map[-1:[tegra]] AllocResp:([]uint8)[10 31 10 22 78 86 73 68 73 65 95 8"
            "6 73 83 73 66 76 69 95 68 69 86 73 67 69 83 18 5 116 101 103 114 97]}] RegisteredDevices:(map[string"
            "][]string)map[nvidia.com/gpu:[tegra]]}"
        ),
        3660592824,
    ),
]

CPU_FILES = [
    '{"policyName":"static","defaultCpuSet":"0-27","checksum":273146150}',
    (
        '{"policyName":"static","defaultCpuSet":"0,4-27","entries":{"39b37746-7f5e-4064-b8e1-eebd2bfaa003":{"'
        'app":"1-3"}},"checksum":3300516549}'
    ),
    (
        '{"policyName":"static","defaultCpuSet":"0,20-27","entries":{"9388acc6-a396-4f03-a353-ce153da46aaf":{'
        '"app":"1-13,17-19"},"f21fe02b-e6e2-4d04-9a4a-9e57367fa324":{"app":"14-16"}},"checksum":4055801500}'
    ),
    (
        '{"policyName":"static","defaultCpuSet":"0-2,4-26,28-47","entries":{"ab9940917010576bd755870dab91e2cd'
        '2fc531a04ac362d44a62950aaa41c527":"3,27"},"checksum":1300288133}'
    ),
    '{"policyName":"static","defaultCpuSet":"0-63","checksum":1058907510}',
    '{"policyName":"static","defaultCpuSet":"2-15,17-31,34-47,49-63","checksum":4141502832}',
    (
        '{"policyName":"static","defaultCpuSet":"0-31,40-47,56-95,104-111,120-127","entries":{"7f9c2a3e-5b1d-'
        '4c8e-9a0f-2d6b8e1c4a57":{"vllm":"32-39,96-103"},"c41d8e2b-0a6f-4f3b-8d2e-6b9a1c7e3f05":{"trtllm":"48'
        '-55,112-119"}},"checksum":2942188735}'
    ),
    '{"policyName":"none","defaultCPUSet":"4-6","entries":{},"checksum":354655845}',
    (
        '{"policyName":"none","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"1-3"}}'
        ',"checksum":3610638499}'
    ),
    '{"policyName":"other","defaultCPUSet":"1-3","entries":{},"checksum":1394507217}',
    (
        '{"policyName":"static","defaultCpuSet":"0,13","entries":{"55784671-0e4e-49e2-b4d6-c0377ca14c81":{"ap'
        'p":"1-12"},"6c5f3038-adfc-485d-9943-3fd5e825300d":{"app":"14-27"}},"checksum":3558029577}'
    ),
    (
        '{"policyName":"static","defaultCpuSet":"0,14-27","entries":{"c0c5c4b3-3f63-4677-ba68-52da74012371":{'
        '"app":"1-13"}},"checksum":1954249489}'
    ),
    (
        '{"policyName":"static","defaultCpuSet":"0-13","entries":{"6c5f3038-adfc-485d-9943-3fd5e825300d":{"ap'
        'p":"14-27"}},"checksum":3451722052}'
    ),
    (
        '{"policyName":"static","defaultCpuSet":"0,4-27","entries":{"513cb897-0262-4868-826f-aa943ee45a38":{"'
        'app":"1-3"}},"checksum":1982473279}'
    ),
    (
        '{"policyName":"static","defaultCpuSet":"0-13,17-27","entries":{"de6df8b8-a6b7-41cc-97a6-19d0fbd44714'
        '":{"app":"14-16"}},"checksum":3366848516}'
    ),
    (
        '{"policyName":"static","defaultCpuSet":"0,4-13,17-27","entries":{"513cb897-0262-4868-826f-aa943ee45a'
        '38":{"app":"1-3"},"94283d1b-ce5a-4797-bff8-0cf0c7143b2b":{"app":"14-16"}},"checksum":1623972425}'
    ),
    (
        '{"policyName":"static","defaultCpuSet":"0,13,17-27","entries":{"77025d90-6e46-4a87-ad3a-bf0c02c6713c'
        '":{"app":"1-12"},"f21fe02b-e6e2-4d04-9a4a-9e57367fa324":{"app":"14-16"}},"checksum":874856219}'
    ),
]

MEMORY_FILES = [
    (
        '{"policyName":"static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2'
        '048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},"entries":{"po'
        'd":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},"checksum":4215593881}'
    ),
    (
        '{"policyName":"Static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"hugepages-1Gi":{"t'
        'otal":0,"systemReserved":0,"allocatable":0,"reserved":0,"free":0},"hugepages-2Mi":{"total":0,"system'
        'Reserved":0,"allocatable":0,"reserved":0,"free":0},"memory":{"total":274877906944,"systemReserved":4'
        '294967296,"allocatable":270582939648,"reserved":0,"free":270582939648}},"cells":[0]},"1":{"numberOfA'
        'ssignments":2,"memoryMap":{"hugepages-1Gi":{"total":0,"systemReserved":0,"allocatable":0,"reserved":'
        '0,"free":0},"hugepages-2Mi":{"total":0,"systemReserved":0,"allocatable":0,"reserved":0,"free":0},"me'
        'mory":{"total":274877906944,"systemReserved":0,"allocatable":274877906944,"reserved":103079215104,"f'
        'ree":171798691840}},"cells":[1]}},"entries":{"7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57":{"vllm":[{"numaA'
        'ffinity":[1],"type":"memory","size":68719476736}]},"c41d8e2b-0a6f-4f3b-8d2e-6b9a1c7e3f05":{"trtllm":'
        '[{"numaAffinity":[1],"type":"memory","size":34359738368}]}},"checksum":1804211527}'
    ),
]

# The siderolabs/talos test file: real-world shape, dummy checksum (kubelet.md §2.2).
TALOS_MEMORY_FILE = (
    '{"policyName":"Static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":6'
    '8719476736,"systemReserved":1073741824,"allocatable":67645734912,"reserved":0,"free":67645734912}},"'
    'cells":[0]}},"entries":{},"checksum":1}'
)

DEVICE_FILES = [
    (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3","ContainerName":"check'
        '","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxF'
        'X0RFVklDRVMSBXRlZ3Jh"}],"RegisteredDevices":{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}'
    ),
    (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"513cb897-0262-4868-826f-aa943ee45a38","ContainerName":"app",'
        '"ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"]},"Allo'
        'cResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1lMzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMa'
        "JAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoC"
        "cncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVz"
        'ZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="},{"PodUID":"94'
        '283d1b-ce5a-4797-bff8-0cf0c7143b2b","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs'
        '":{"1":["GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841","GPU-9b341c59-f96b-ba85-c137-78c3652fea65"]},"All'
        'ocResp":"CmsKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSUUdQVS1jMWU5ZjI0OS1iMzdiLTgxYzItYThkOS1iYTVjYTAyOTQ4NDE'
        "sR1BVLTliMzQxYzU5LWY5NmItYmE4NS1jMTM3LTc4YzM2NTJmZWE2NRokCg4vZGV2L252aWRpYWN0bBIOL2Rldi9udmlkaWFjdGw"
        "aAnJ3GiYKDy9kZXYvbnZpZGlhLXV2bRIPL2Rldi9udmlkaWEtdXZtGgJydxoyChUvZGV2L252aWRpYS11dm0tdG9vbHMSFS9kZXY"
        "vbnZpZGlhLXV2bS10b29scxoCcncaLgoTL2Rldi9udmlkaWEtbW9kZXNldBITL2Rldi9udmlkaWEtbW9kZXNldBoCcncaIAoML2R"
        'ldi9udmlkaWExEgwvZGV2L252aWRpYTEaAnJ3GiAKDC9kZXYvbnZpZGlhMhIML2Rldi9udmlkaWEyGgJydw=="}],"Registered'
        'Devices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-'
        '78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":2442330366}'
    ),
    (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57","ContainerName":"vllm"'
        ',"ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-44444444-0000-0000-0000-000000000004","GPU-5'
        '5555555-0000-0000-0000-000000000005"]},"AllocResp":"CmsKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSUUdQVS00NDQ0'
        "NDQ0NC0wMDAwLTAwMDAtMDAwMC0wMDAwMDAwMDAwMDQsR1BVLTU1NTU1NTU1LTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwNQ=="
        '"}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-00000000-0000-0000-0000-000000000000","GPU-11111111-'
        '0000-0000-0000-000000000001","GPU-22222222-0000-0000-0000-000000000002","GPU-33333333-0000-0000-0000'
        '-000000000003","GPU-44444444-0000-0000-0000-000000000004","GPU-55555555-0000-0000-0000-000000000005"'
        ',"GPU-66666666-0000-0000-0000-000000000006","GPU-77777777-0000-0000-0000-000000000007"]}},"Checksum"'
        ":3247566705}"
    ),
    (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"513cb897-0262-4868-826f-aa943ee45a38","ContainerName":"app",'
        '"ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"]},"Allo'
        'cResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1lMzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMa'
        "JAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoC"
        "cncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVz"
        'ZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="}],"RegisteredD'
        'evices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-7'
        '8c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":133412836}'
    ),
    (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"9a15d2b5-c152-46b9-96e0-d57032629e1f","ContainerName":"app",'
        '"ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1'
        'e9f249-b37b-81c2-a8d9-ba5ca0294841"]},"AllocResp":"CmsKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSUUdQVS1jMWU5Z'
        "jI0OS1iMzdiLTgxYzItYThkOS1iYTVjYTAyOTQ4NDEsR1BVLTliMzQxYzU5LWY5NmItYmE4NS1jMTM3LTc4YzM2NTJmZWE2NRokC"
        "g4vZGV2L252aWRpYWN0bBIOL2Rldi9udmlkaWFjdGwaAnJ3GiYKDy9kZXYvbnZpZGlhLXV2bRIPL2Rldi9udmlkaWEtdXZtGgJyd"
        "xoyChUvZGV2L252aWRpYS11dm0tdG9vbHMSFS9kZXYvbnZpZGlhLXV2bS10b29scxoCcncaLgoTL2Rldi9udmlkaWEtbW9kZXNld"
        "BITL2Rldi9udmlkaWEtbW9kZXNldBoCcncaIAoML2Rldi9udmlkaWExEgwvZGV2L252aWRpYTEaAnJ3GiAKDC9kZXYvbnZpZGlhM"
        'hIML2Rldi9udmlkaWEyGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c'
        '5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}'
        '},"Checksum":2530956716}'
    ),
]

DATA_CHECKSUM_VECTORS = [
    (
        (
            '{"policyName":"static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2'
            '048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},"entries":{"po'
            'd":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}}}'
        ),
        1849615440,
    ),
    (
        (
            '{"unknownField":"value","policyName":"static","machineState":{"0":{"numberOfAssignments":0,"memoryMa'
            'p":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cel'
            'ls":[]}},"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}}}'
        ),
        2100279793,
    ),
]

JETSON_ALLOC_RESP = "Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"


def _rendered_dumps() -> list[str]:
    """The 12 dump vectors, rendered by this module from the decoded values, in DUMP_VECTORS order."""
    unit_memory = {0: MemoryNodeState(0, {"memory": MemoryTable(2048, 512, 1536, 512, 1024)}, ())}
    unit_blocks = {"pod": {"container1": [MemoryBlock((0,), "memory", 512)]}}
    jetson = DeviceEntryRecord(
        "bf52b2cd-b611-4e79-86b1-280b283185c3",
        "check",
        "nvidia.com/gpu",
        {-1: ["tegra"]},
        base64.b64decode(JETSON_ALLOC_RESP),
    )
    return [
        dump_cpu_manager_v2("none", "4-6", {}),
        dump_cpu_manager_v2("none", "1-3", {"pod": {"container1": "4-6", "container2": "1-3"}}),
        dump_cpu_manager_v2("other", "1-3", {}),
        dump_cpu_manager_v2("none", "1.3", {}),
        dump_cpu_manager_v2("none", "1-3", {"pod": {"container1": "4-6", "container2": "asd"}}),
        dump_cpu_manager_v1("none", "1-3", {}),
        dump_cpu_manager_v1("none", "1-3", {"containerID1": "4-6", "containerID2": "1-3"}),
        dump_memory_manager_v1("static", unit_memory, unit_blocks),
        dump_cpu_manager_v2("static", "0-27", {}),
        dump_cpu_manager_v2(
            "static",
            "0,20-27",
            {
                "9388acc6-a396-4f03-a353-ce153da46aaf": {"app": "1-13,17-19"},
                "f21fe02b-e6e2-4d04-9a4a-9e57367fa324": {"app": "14-16"},
            },
        ),
        dump_cpu_manager_v1(
            "static", "0-2,4-26,28-47", {"ab9940917010576bd755870dab91e2cd2fc531a04ac362d44a62950aaa41c527": "3,27"}
        ),
        dump_device_checkpoint([jetson], {"nvidia.com/gpu": ["tegra"]}),
    ]


# ------------------------------------------------------------------------------------------ dump level
def test_fnv1a_32_matches_the_reference_values():
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32("a") == 0xE40C292C
    assert fnv1a_32("foobar") == 0xBF9CF968


@pytest.mark.parametrize(("dump", "expected"), DUMP_VECTORS, ids=[str(v) for _, v in DUMP_VECTORS])
def test_every_published_dump_hashes_to_its_checksum(dump, expected):
    assert fnv1a_32(dump) == expected


@pytest.mark.parametrize("index", range(len(DUMP_VECTORS)), ids=[str(v) for _, v in DUMP_VECTORS])
def test_every_published_dump_is_rendered_exactly(index):
    assert _rendered_dumps()[index] == DUMP_VECTORS[index][0]


def test_nil_and_empty_maps_dump_differently():
    assert "Entries:(map[string]map[string]string)<nil>" in dump_cpu_manager_v2("none", "", None)
    assert "Entries:(map[string]map[string]string)map[]" in dump_cpu_manager_v2("none", "", {})
    node = MemoryNodeState(0, {"memory": None}, None)  # type: ignore[arg-type]
    dump = dump_memory_manager_v1("Static", {0: node}, None)
    assert "map[memory:<nil>] Cells:([]int)<nil>" in dump
    assert "Entries:(state.ContainerMemoryAssignments)<nil>" in dump


def test_map_keys_sort_numerically_for_numa_nodes_and_bytewise_for_names():
    entry = DeviceEntryRecord("u", "c", "r", {10: ["b"], -1: ["x"], 2: ["a"]}, b"")
    dump = dump_device_checkpoint([entry], {"b": ["1"], "B": ["2"], "a": []})
    assert "map[-1:[x] 2:[a] 10:[b]]" in dump
    assert "map[B:[2] a:[] b:[1]]" in dump
    assert "AllocResp:([]uint8)[]" in dump


def test_legacy_device_dump_uses_a_string_slice():
    entry = DeviceEntryRecord("u", "c", "nvidia.com/gpu", ["GPU-1", "GPU-0"], None)
    dump = dump_device_checkpoint([entry], {}, legacy=True)
    assert "DeviceIDs:([]string)[GPU-1 GPU-0] AllocResp:([]uint8)<nil>" in dump
    assert dump.startswith("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{")


def test_checksum_functions_compute_what_the_kubelet_writes():
    assert cpu_manager_checksum("none", "4-6", {}) == 354655845
    assert cpu_manager_checksum("none", "1-3", {"containerID1": "4-6", "containerID2": "1-3"}, version=1) == 3680390589
    unit_memory = {0: MemoryNodeState(0, {"memory": MemoryTable(2048, 512, 1536, 512, 1024)}, ())}
    blocks = {"pod": {"container1": [MemoryBlock((0,), "memory", 512)]}}
    assert memory_manager_checksum("static", unit_memory, blocks) == 4215593881
    jetson = DeviceEntryRecord(
        "bf52b2cd-b611-4e79-86b1-280b283185c3",
        "check",
        "nvidia.com/gpu",
        {-1: ["tegra"]},
        base64.b64decode(JETSON_ALLOC_RESP),
    )
    assert device_checkpoint_checksum([jetson], {"nvidia.com/gpu": ["tegra"]}) == 3660592824


@pytest.mark.parametrize(("data", "expected"), DATA_CHECKSUM_VECTORS, ids=[str(v) for _, v in DATA_CHECKSUM_VECTORS])
def test_data_checksum_vectors(data, expected):
    assert data_checksum(data) == expected


def test_checksum_matches_accepts_any_candidate():
    dumps = [dump_cpu_manager_v2("none", "4-6", {}, type_name=n) for n in ("Other", "CPUManagerCheckpoint")]
    assert checksum_matches(354655845, dumps)
    assert not checksum_matches(354655845, dumps[:1])


# ------------------------------------------------------------------------------------------ file level
V1_FILE = next(t for t in CPU_FILES if "1300288133" in t)


@pytest.mark.parametrize(
    "text", [t for t in CPU_FILES if t != V1_FILE], ids=[str(json.loads(t)["checksum"]) for t in CPU_FILES[1:]]
)
def test_every_published_cpu_manager_file_verifies(text):
    state, problem = parse_cpu_manager_state(text.encode(), CPU)
    assert problem is None
    assert state is not None
    assert state.checksum_ok is True


def test_the_published_v1_file_is_read_as_v1_by_old_kubelets_and_refused_by_1_36():
    state, problem = parse_cpu_manager_state(V1_FILE, CPU)
    # Kubelets up to 1.35 fall back to the v1 struct and verify it; 1.36+ read v2 at most, which it does not decode.
    assert (problem.reason, problem.eras) == ("unparsable", frozenset({SINCE_1_36}))
    assert "keyed by container ID" in problem.detail
    assert state.version == 1
    assert state.checksum_ok is True
    assert dict(state.entries_v1) == {"ab9940917010576bd755870dab91e2cd2fc531a04ac362d44a62950aaa41c527": {3, 27}}
    assert dict(state.entries) == {}


@pytest.mark.parametrize(
    ("text", "reason", "version"),
    [
        ('{"policyName":"none","defaultCPUSet":"1-3","entries":{},"checksum":1694838852}', "checksum_mismatch", 2),
        (
            '{"policyName":"none","defaultCPUSet":"1-3","entries":{"containerID1":"4-6","containerID2":"1-3"},'
            '"checksum":3680390589}',
            "unparsable",
            1,
        ),
    ],
)
def test_the_kubelet_v1_unit_vectors_verify_as_files_up_to_1_35(text, reason, version):
    # version: the state is what the newest kubelet that reads the file restores (1.36+ the v2 struct, when empty).
    state, problem = parse_cpu_manager_state(text, CPU)
    assert (problem.reason, problem.eras) == (reason, frozenset({SINCE_1_36}))
    assert state.version == version


@pytest.mark.parametrize(
    "text",
    [
        '{"policyName":"none","defaultCPUSet":"1.3","entries":{},"checksum":3021697696}',
        '{"policyName":"none","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"asd"}},'
        '"checksum":962272150}',
    ],
)
def test_invalid_cpusets_hash_normally_but_the_file_is_unparsable(text):
    state, problem = parse_cpu_manager_state(text, CPU)
    assert state is None
    assert (problem.reason, problem.eras) == ("unparsable", ERAS)
    assert "CPU list" in problem.detail


@pytest.mark.parametrize("text", MEMORY_FILES, ids=[str(json.loads(t)["checksum"]) for t in MEMORY_FILES])
def test_every_published_memory_manager_file_verifies(text):
    state, problem = parse_memory_manager_state(text, MEMORY)
    assert problem is None
    assert state.checksum_ok is True
    assert state.version == 1


def test_a_dummy_memory_checksum_is_a_mismatch():
    state, problem = parse_memory_manager_state(TALOS_MEMORY_FILE, MEMORY)
    assert state.checksum_ok is False
    assert (problem.file, problem.reason, problem.eras) == (MEMORY, "checksum_mismatch", ERAS)
    assert "checksum 1 in the file" in problem.detail


@pytest.mark.parametrize("text", DEVICE_FILES, ids=[str(json.loads(t)["Checksum"]) for t in DEVICE_FILES])
def test_every_published_device_checkpoint_verifies(text):
    checkpoint, problem = parse_device_checkpoint(text, DEVICES)
    assert problem is None
    assert checkpoint.checksum_ok is True


@pytest.mark.parametrize(("data", "expected"), DATA_CHECKSUM_VECTORS, ids=[str(v) for _, v in DATA_CHECKSUM_VECTORS])
def test_memory_v3_files_verify_the_data_checksum_and_restore_from_data(data, expected):
    # As in the kubelet test: the legacy body says "other" with a wrong checksum; data is authoritative for 1.36+,
    # while a kubelet <= 1.35 knows no data and refuses the body.
    legacy = json.loads(MEMORY_FILES[0])
    document = {**legacy, "policyName": "other", "checksum": 1234, "data": data, "dataChecksum": expected}
    state, problem = parse_memory_manager_state(json.dumps(document), MEMORY)
    assert (problem.reason, problem.eras) == ("checksum_mismatch", frozenset({UNTIL_1_35}))
    assert (state.version, state.policy_name, state.checksum_ok) == (3, "static", None)
    assert state.entries["pod"]["container1"] == (MemoryBlock((0,), "memory", 512),)


# ------------------------------------------------------------------------------------------ compatibility rules
def test_cpu_v2_hashed_under_the_v2_type_name_is_accepted_by_1_36_only():
    value = fnv1a_32(dump_cpu_manager_v2("static", "0-3", {}, type_name="CPUManagerCheckpointV2"))
    state, problem = parse_cpu_manager_state(
        json.dumps({"policyName": "static", "defaultCpuSet": "0-3", "checksum": value}), CPU
    )
    assert (problem.reason, problem.eras) == ("checksum_mismatch", frozenset({UNTIL_1_35}))
    assert state.checksum_ok is None


def test_memory_v1_hashed_under_the_v1_type_name_is_accepted():
    legacy = json.loads(MEMORY_FILES[0])
    unit_memory = {0: MemoryNodeState(0, {"memory": MemoryTable(2048, 512, 1536, 512, 1024)}, ())}
    blocks = {"pod": {"container1": [MemoryBlock((0,), "memory", 512)]}}
    value = fnv1a_32(dump_memory_manager_v1("static", unit_memory, blocks, type_name="MemoryManagerCheckpointV1"))
    state, problem = parse_memory_manager_state(json.dumps({**legacy, "checksum": value}), MEMORY)
    assert problem is None
    assert state.checksum_ok is True


def test_a_type_name_the_kubelet_never_used_is_a_mismatch():
    value = fnv1a_32(dump_cpu_manager_v2("static", "0-3", {}, type_name="SomethingElse"))
    state, problem = parse_cpu_manager_state(
        json.dumps({"policyName": "static", "defaultCpuSet": "0-3", "checksum": value}), CPU
    )
    assert state.checksum_ok is False
    assert (problem.reason, problem.eras) == ("checksum_mismatch", ERAS)


@pytest.mark.parametrize(
    "text",
    [
        '{"policyName":"static","defaultCpuSet":"0-27","checksum":0}',
        '{"policyName":"static","defaultCpuSet":"0,2-3","entries":{"pod":{"c":"1"}},"checksum":0}',
    ],
)
def test_checksum_zero_is_accepted_for_legacy_cpu_files(text):
    state, problem = parse_cpu_manager_state(text, CPU)
    assert problem is None
    assert state.checksum_ok is True


def test_checksum_zero_of_a_v1_cpu_file_is_accepted_up_to_1_35():
    text = '{"policyName":"static","defaultCpuSet":"0,2-3","entries":{"cid":"1"},"checksum":0}'
    state, problem = parse_cpu_manager_state(text, CPU)
    assert (problem.reason, problem.eras) == ("unparsable", frozenset({SINCE_1_36}))
    assert (state.version, state.checksum_ok) == (1, True)


def test_checksum_zero_of_a_memory_file_is_accepted_from_1_36():
    # 1.36+ fall back to the v1 struct, which accepts 0 (the kubelet's "v1 (migration) with checksum zeroed"
    # vector); earlier kubelets verify every checksum.
    legacy = json.loads(MEMORY_FILES[0])
    state, problem = parse_memory_manager_state(json.dumps({**legacy, "checksum": 0}), MEMORY)
    assert state.checksum_ok is None
    assert (problem.reason, problem.eras) == ("checksum_mismatch", frozenset({UNTIL_1_35}))


CPU_V3 = {
    "policyName": "static",
    "defaultCpuSet": "0-1",
    "entries": {"pod-a": {"c": "2-3"}},
    "podEntries": {"pod-b": {"cpuSet": "4-7"}},
}


@pytest.mark.parametrize("type_name", CPU_V3_TYPE_NAMES)
def test_cpu_v3_pod_entries_are_verified_as_1_36_hashes_them(type_name):
    value = fnv1a_32(
        dump_cpu_manager_v3("static", "0-1", {"pod-a": {"c": "2-3"}}, {"pod-b": {4, 5, 6, 7}}, type_name=type_name)
    )
    state, problem = parse_cpu_manager_state(json.dumps({**CPU_V3, "checksum": value}), CPU)
    # A kubelet <= 1.35 reads the v2 struct, which has no podEntries: the hash no longer matches.
    assert (problem.reason, problem.eras) == ("checksum_mismatch", frozenset({UNTIL_1_35}))
    assert (state.version, state.checksum_ok) == (3, None)
    assert state.pod_entries == {"pod-b": frozenset({4, 5, 6, 7})}


def test_a_corrupt_cpu_v3_checksum_is_reported():
    state, problem = parse_cpu_manager_state(json.dumps({**CPU_V3, "checksum": 987654321}), CPU)
    assert (problem.reason, problem.eras) == ("checksum_mismatch", ERAS)
    assert "checksum 987654321 in the file" in problem.detail
    assert (state.version, state.checksum_ok) == (3, False)


MEMORY_POD_ENTRIES = {"pod-b": {"memoryBlocks": [{"numaAffinity": [0], "type": "memory", "size": 1}]}}


def test_memory_v2_pod_entries_are_verified_as_1_36_hashes_them():
    legacy = json.loads(MEMORY_FILES[0])
    unit_memory = {0: MemoryNodeState(0, {"memory": MemoryTable(2048, 512, 1536, 512, 1024)}, ())}
    blocks = {"pod": {"container1": [MemoryBlock((0,), "memory", 512)]}}
    value = fnv1a_32(dump_memory_manager_v2("static", unit_memory, blocks, {"pod-b": [MemoryBlock((0,), "memory", 1)]}))
    document = {**legacy, "podEntries": MEMORY_POD_ENTRIES, "checksum": value}
    state, problem = parse_memory_manager_state(json.dumps(document), MEMORY)
    assert (problem.reason, problem.eras) == ("checksum_mismatch", frozenset({UNTIL_1_35}))
    assert (state.version, state.checksum_ok) == (2, None)
    assert state.pod_entries == {"pod-b": (MemoryBlock((0,), "memory", 1),)}


def test_a_corrupt_memory_v2_checksum_is_reported():
    legacy = json.loads(MEMORY_FILES[0])
    document = {**legacy, "podEntries": MEMORY_POD_ENTRIES, "checksum": 101010}
    state, problem = parse_memory_manager_state(json.dumps(document), MEMORY)
    assert (problem.reason, problem.eras) == ("checksum_mismatch", ERAS)
    assert "checksum 101010 in the file" in problem.detail
    assert (state.version, state.checksum_ok) == (2, False)


def test_a_v1_memory_checksum_next_to_pod_entries_is_read_back_as_v1():
    # The v1 hash ignores podEntries: kubelets <= 1.35 read the v1 struct, 1.36+ fall back to it after v2.
    legacy = json.loads(MEMORY_FILES[0])
    state, problem = parse_memory_manager_state(json.dumps({**legacy, "podEntries": MEMORY_POD_ENTRIES}), MEMORY)
    assert problem is None
    assert state.checksum_ok is True


def test_device_checksum_ignores_boot_id():
    document = json.loads(DEVICE_FILES[0])
    document["BootID"] = "0f3c1a9e-7a43-4b62-9e51-2d1c6a4f0b77"
    checkpoint, problem = parse_device_checkpoint(json.dumps(document), DEVICES)
    assert problem is None
    assert checkpoint.checksum_ok is True
    assert checkpoint.boot_id == "0f3c1a9e-7a43-4b62-9e51-2d1c6a4f0b77"
