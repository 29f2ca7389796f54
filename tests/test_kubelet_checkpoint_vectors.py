# ruff: noqa: E501  (the checkpoints are copied verbatim from the kubelet's tests, long lines included)
"""The kubelet's own checkpoint test vectors, judged by numawatch as each kubelet version judges them.

Every checkpoint content below is copied verbatim from a kubelet unit test (``TestCheckpointStateRestore`` and the
checksum compatibility tests), written into a fake node's kubelet directory, read by the kubelet_state source and
judged by ``kubelet_state_stale``. The expected verdict for the kubelet versions the test was written for is the
test's own (its ``expectedError``: none = restored; "checkpoint is corrupted" = corrupt; a JSON, decoding or "could
not parse" error = unparsable; a policy mismatch = restored, the policy being compared afterwards); the verdict for
the other rule set is what that release's ``checkpoint.go`` / ``state_checkpoint.go`` (same sources) do with the
content, and the comment on each says why.

Sources, kubernetes/kubernetes (as the search index stores them):

- MASTER_CPU: pkg/kubelet/cm/cpumanager/state/state_checkpoint_test.go at 0411cc704533ed25a1bfc6e21a3195d9c6a2f0f2
  (master, 1.37 development: v4 ``data``, v3 ``podEntries``, no v1), with checkpoint.go and state_checkpoint.go
  of the same generation (v4 -> v3 -> v2 fallback; v3 verified under CPUManagerCheckpointV3 and CPUManagerCheckpoint).
- OLD_CPU: the same test file as release branches before 1.36 hold it (k8s.io/utils/cpuset, no feature gates,
  NewCheckpointState without a logger: 1.28-1.35), and checkpoint.go at 04791b4906602ffda5ccf9bc4c84d3329f1d7080
  (v2 -> v1 fallback, checksum 0 accepted).
- MASTER_MEMORY: pkg/kubelet/cm/memorymanager/state/state_checkpoint_test.go as master holds it (v3 ``data``,
  v2 ``podEntries``), with checkpoint.go of the same generation (v2 verified under MemoryManagerCheckpoint; v1
  fallback accepts checksum 0).
- OLD_MEMORY: the same test file before 1.36 (v1 only, ``NewCheckpointState(testingDir, ...)``, testify ``assert``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest
from fakehost.reference import CPU_STATE_FILE, MEMORY_STATE_FILE, reference_node, reference_snapshot, replace_state
from numawatch import cli
from numawatch.checks import all_checks, evaluate
from numawatch.intent import REFERENCE
from numawatch.sources import kubelet_state

MASTER_CPU = "cpumanager/state/state_checkpoint_test.go@0411cc70 (master)"
MASTER_CPU_COMPAT = (
    "cpumanager/state/state_checkpoint_test.go@0411cc70 (master) TestCPUManagerCheckpointV3_VerifyChecksum"
)
OLD_CPU = "cpumanager/state/state_checkpoint_test.go (release branches 1.28-1.35)"
MASTER_MEMORY = "memorymanager/state/state_checkpoint_test.go (master)"
OLD_MEMORY = "memorymanager/state/state_checkpoint_test.go (release branches before 1.36)"

RESTORED, CORRUPT, UNPARSABLE = "restored", "checksum_mismatch", "unparsable"


@dataclass(frozen=True)
class Vector:
    name: str  # the kubelet test case's description
    source: str
    file: str  # "cpu" or "memory"
    content: str  # verbatim
    until_1_35: str  # what a kubelet <= 1.35 does with it
    since_1_36: str  # what a kubelet >= 1.36 does with it


# --------------------------------------------------------------------------------------------------- CPU, master
# Every v4 vector's legacy body carries checksum 1234 ("intentionally corrupted to verify that it is not used"):
# a kubelet <= 1.35 knows no ``data`` and refuses that body. Legacy bodies with 1942532442 / 98002435 / 1659543133
# are hashed over the v3 struct (PodEntries included), which a kubelet <= 1.35 does not reproduce.
CPU_MASTER = [
    Vector(
        "Fail to restore checkpoint without data section",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "static",
				"defaultCPUSet": "7-9",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "1-3"
					}
				},
				"checksum": 1942532442,
				"dataChecksum": 1234
			}""",
        CORRUPT,
        UNPARSABLE,
    ),
    Vector(
        "Fail to restore checkpoint without dataChecksum section",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "static",
				"defaultCPUSet": "7-9",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "1-3"
					}
				},
				"checksum": 1942532442,
				"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"7-9\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"1-3\"}}}"
			}""",
        CORRUPT,
        CORRUPT,
    ),
    Vector(
        "Restore default CPU set",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "other",
				"defaultCPUSet": "1-9",
				"checksum": 1234,
				"data": "{\"policyName\":\"none\",\"defaultCPUSet\":\"4-6\"}",
				"dataChecksum": 657950972
			}""",
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Restore valid checkpoint with InPlacePodVerticalScalingExclusiveCPUs disabled/enabled",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "other",
				"defaultCPUSet": "1-9",
				"checksum": 1234,
				"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"7-9\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"1-3\"}}}",
				"dataChecksum": 1420829534
			}""",
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Fail to restore checkpoint with invalid checksum",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "static",
				"defaultCPUSet": "7-9",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "1-3"
					}
				},
				"checksum": 1942532442,
				"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"7-9\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"1-3\"}}}",
				"dataChecksum": 1234
			}""",
        CORRUPT,
        CORRUPT,
    ),
    Vector("Fail to restore checkpoint with invalid JSON", MASTER_CPU, "cpu", "{", UNPARSABLE, UNPARSABLE),
    # The file is read back; the policy ("other" against the configured "none") is compared afterwards.
    Vector(
        "Fail to restore checkpoint with invalid policy name",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "static",
				"defaultCPUSet": "7-9",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "1-3"
					}
				},
				"checksum": 1942532442,
				"data": "{\"policyName\":\"other\",\"defaultCPUSet\":\"7-9\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"1-3\"}}}",
				"dataChecksum": 1432271708
			}""",
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Fail to restore checkpoint with unparsable default CPU set",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "7-9",
				"checksum": 98002435,
				"data": "{\"policyName\":\"none\",\"defaultCPUSet\":\"1.3\"}",
				"dataChecksum": 3033143655
			}""",
        CORRUPT,
        UNPARSABLE,
    ),
    Vector(
        "Fail to restore checkpoint with unparsable assignment entry",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "static",
				"defaultCPUSet": "1-3",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "7-9"
					}
				},
				"checksum": 1659543133,
				"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"1-3\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"asd\"}}}",
				"dataChecksum": 3794806925
			}""",
        CORRUPT,
        UNPARSABLE,
    ),
    Vector(
        "Restore checkpoint ignoring unknown fields in data section",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "other",
				"defaultCPUSet": "1-9",
				"checksum": 1234,
				"data": "{\"policyName\":\"none\",\"defaultCPUSet\":\"4-6\",\"unknownField\":\"value\"}",
				"dataChecksum": 3492408555
			}""",
        CORRUPT,
        RESTORED,
    ),
    # 1694838852 is the v1 struct's hash: read back by the v1 fallback of kubelets <= 1.35 (OLD_CPU's
    # "Restore checkpoint from checkpoint with v1 checksum").
    Vector(
        "Fail to restore checkpoint from checkpoint with v1 checksum",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "1-3",
				"checksum": 1694838852
			}""",
        RESTORED,
        CORRUPT,
    ),
    # Entries keyed by container ID: migrated by kubelets <= 1.35 (the older tests' "Restore checkpoint with
    # migration" holds this very content), not decoded by 1.36+.
    Vector(
        "Fail to restore checkpoint from v1 (migration)",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "static",
				"defaultCPUSet": "7-9",
				"entries": {
					"containerID1": "4-6",
					"containerID2": "1-3"
				},
				"checksum": 2026311253
			}""",
        RESTORED,
        UNPARSABLE,
    ),
    # The v2 file master restores: its checksum is the v3 struct's with empty podEntries.
    Vector(
        "Restore checkpoint from v2 (migration) with InPlacePodVerticalScalingExclusiveCPUs disabled/enabled",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "static",
				"defaultCPUSet": "7-9",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "1-3"
					}
				},
				"checksum": 1942532442
			}""",
        CORRUPT,
        RESTORED,
    ),
    # A v3 file makes a kubelet <= 1.35 fail with "checkpoint is corrupted" (website: pod-level-resource-managers).
    Vector(
        "Restore checkpoint from v3 (migration) with PodLevelResourceManagers and "
        "InPlacePodVerticalScalingExclusiveCPUs disabled/enabled (4 cases)",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "static",
				"defaultCPUSet": "1-2",
				"entries": {
					"pod1": {
						"container1": "5-6",
						"container2": "3-4"
					}
				},
				"podEntries": {
					"pod2": {
						"cpuSet":"7-9"
					}
				},
				"checksum": 766259872
			}""",
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Restore valid v4 checkpoint with PodLevelResourceManagers and InPlacePodVerticalScalingExclusiveCPUs "
        "disabled/enabled (4 cases)",
        MASTER_CPU,
        "cpu",
        r"""{
				"policyName": "other",
				"defaultCPUSet": "1-9",
				"checksum": 1234,
				"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"1-3\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"7-9\"}},\"podEntries\":{\"pod\":{\"cpuSet\":\"4-10\"}},\"baselines\":{\"pod\":{\"container1\":{\"baseline\":\"4-5\"},\"container2\":{\"baseline\":\"7-8\"}}}}",
				"dataChecksum": 1032795074
			}""",
        CORRUPT,
        RESTORED,
    ),
    # TestGetBaselineCPUSet / TestDeletePod: files with data only. The legacy body is empty with checksum 0, which
    # the v2 struct of kubelets <= 1.35 accepts (its policy "" is then compared with the configured one).
    Vector(
        "TestGetBaselineCPUSet: baselines field included",
        MASTER_CPU,
        "cpu",
        r"""{
				"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"1-3\",\"entries\":{\"pod\":{\"container\":\"4-5\"}},\"podEntries\":{\"pod\":{\"cpuSet\":\"4-6\"}},\"baselines\":{\"pod\":{\"container\":{\"baseline\":\"5\"}}}}",
				"dataChecksum": 4038000775
			}""",
        RESTORED,
        RESTORED,
    ),
    Vector(
        "TestGetBaselineCPUSet: baselines field excluded",
        MASTER_CPU,
        "cpu",
        r"""{
				"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"1-3\",\"entries\":{\"pod\":{\"container\":\"4-5\"}},\"podEntries\":{\"pod\":{\"cpuSet\":\"4-6\"}}}",
				"dataChecksum": 234652157
			}""",
        RESTORED,
        RESTORED,
    ),
    Vector(
        "TestDeletePod",
        MASTER_CPU,
        "cpu",
        r"""{
				"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"1-3\",\"entries\":{\"pod1\":{\"container\":\"4-5\"},\"pod2\":{\"container\":\"7-8\"}},\"podEntries\":{\"pod1\":{\"cpuSet\":\"4-6\"},\"pod2\":{\"cpuSet\":\"7-9\"}}}",
				"dataChecksum": 2086345991
			}""",
        RESTORED,
        RESTORED,
    ),
    # TestCPUManagerCheckpointV3_VerifyChecksum_Compatibility builds this struct with both checksums and expects
    # VerifyChecksum to accept them; here it is the file that struct marshals to.
    Vector(
        "accepts legacy v3 checksum",
        MASTER_CPU_COMPAT,
        "cpu",
        '{"policyName":"static","defaultCpuSet":"1-2","entries":{"pod1":{"container1":"5-6","container2":"3-4"}},'
        '"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":766259872}',
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "accepts current v3 checksum",
        MASTER_CPU_COMPAT,
        "cpu",
        '{"policyName":"static","defaultCpuSet":"1-2","entries":{"pod1":{"container1":"5-6","container2":"3-4"}},'
        '"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":2284712151}',
        CORRUPT,
        RESTORED,
    ),
]

# --------------------------------------------------------------------------------------------- CPU, before 1.36
# 1.36+ read these as v3 (no match) and then v2, whose hash under the legacy name CPUManagerCheckpoint they are.
CPU_OLD = [
    Vector(
        "Restore default cpu set",
        OLD_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "4-6",
				"entries": {},
				"checksum": 354655845
			}""",
        RESTORED,
        RESTORED,
    ),
    Vector(
        "Restore valid checkpoint",
        OLD_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "1-3",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "1-3"
					}
				},
				"checksum": 3610638499
			}""",
        RESTORED,
        RESTORED,
    ),
    Vector(
        "Restore checkpoint with invalid checksum",
        OLD_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "4-6",
				"entries": {},
				"checksum": 1337
			}""",
        CORRUPT,
        CORRUPT,
    ),
    Vector("Restore checkpoint with invalid JSON", OLD_CPU, "cpu", "{", UNPARSABLE, UNPARSABLE),
    Vector(
        "Restore checkpoint with invalid policy name",
        OLD_CPU,
        "cpu",
        r"""{
				"policyName": "other",
				"defaultCPUSet": "1-3",
				"entries": {},
				"checksum": 1394507217
			}""",
        RESTORED,
        RESTORED,
    ),
    Vector(
        "Restore checkpoint with unparsable default cpu set",
        OLD_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "1.3",
				"entries": {},
				"checksum": 3021697696
			}""",
        UNPARSABLE,
        UNPARSABLE,
    ),
    Vector(
        "Restore checkpoint with unparsable assignment entry",
        OLD_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "1-3",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "asd"
					}
				},
				"checksum": 962272150
			}""",
        UNPARSABLE,
        UNPARSABLE,
    ),
    # MASTER_CPU turns this very content into "Fail to restore checkpoint from checkpoint with v1 checksum".
    Vector(
        "Restore checkpoint from checkpoint with v1 checksum",
        OLD_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "1-3",
				"checksum": 1694838852
			}""",
        RESTORED,
        CORRUPT,
    ),
    Vector(
        "Restore checkpoint with migration",
        OLD_CPU,
        "cpu",
        r"""{
				"policyName": "none",
				"defaultCPUSet": "1-3",
				"entries": {
					"containerID1": "4-6",
					"containerID2": "1-3"
				},
				"checksum": 3680390589
			}""",
        RESTORED,
        UNPARSABLE,
    ),
]

# --------------------------------------------------------------------------------------------------- memory, master
_MEMORY_V1_BODY = r"""
				"policyName":"static",
				"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
				"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},"""
_MEMORY_DATA = r"""
				"data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}","""
_MEMORY_CORRUPT_BODY = r"""
				"policyName":"other",
				"machineState":{"0":{"numberOfAssignments":5,"memoryMap":{"memory":{"total":1024,"systemReserved":256,"allocatable":768,"reserved":256,"free":512}},"cells":[]}},
				"entries":{"pod":{"containerX":[{"numaAffinity":[0],"type":"memory","size":128}]}},"""
_MEMORY_POD_ENTRIES = r"""
				"podEntries":{"pod":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":512}]}},"""


def _memory(*parts: str) -> str:
    """The kubelet tests' memory checkpoints, written as their Go raw strings are: ``{`` + lines + ``\n\t\t\t}``."""
    return "{" + "".join(parts) + "\n\t\t\t}"


# A kubelet <= 1.35 knows no ``data`` and verifies the legacy v1 body: valid (4215593881) or corrupt (1234); it
# accepts no checksum 0 and no hash over podEntries.
MEMORY_MASTER = [
    Vector(
        "Fail to restore checkpoint without data section",
        MASTER_MEMORY,
        "memory",
        _memory(_MEMORY_V1_BODY, '\n\t\t\t\t"checksum": 4215593881,\n\t\t\t\t"dataChecksum": 1234'),
        RESTORED,
        UNPARSABLE,
    ),
    Vector(
        "Fail to restore checkpoint without dataChecksum section",
        MASTER_MEMORY,
        "memory",
        _memory(_MEMORY_V1_BODY, '\n\t\t\t\t"checksum": 4215593881,', _MEMORY_DATA.rstrip(",")),
        RESTORED,
        CORRUPT,
    ),
    Vector(
        "Restore valid checkpoint",
        MASTER_MEMORY,
        "memory",
        _memory(
            _MEMORY_CORRUPT_BODY, '\n\t\t\t\t"checksum": 1234,', _MEMORY_DATA, '\n\t\t\t\t"dataChecksum": 1849615440'
        ),
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Fail to restore checkpoint with invalid dataChecksum",
        MASTER_MEMORY,
        "memory",
        _memory(_MEMORY_V1_BODY, '\n\t\t\t\t"checksum": 4215593881,', _MEMORY_DATA, '\n\t\t\t\t"dataChecksum": 1234'),
        RESTORED,
        CORRUPT,
    ),
    Vector(
        "Fail to restore checkpoint with invalid data JSON",
        MASTER_MEMORY,
        "memory",
        _memory(
            _MEMORY_V1_BODY, '\n\t\t\t\t"checksum": 4215593881,\n\t\t\t\t"data": "{",\n\t\t\t\t"dataChecksum": 1234'
        ),
        RESTORED,
        UNPARSABLE,
    ),
    Vector("Fail to restore checkpoint with invalid JSON", MASTER_MEMORY, "memory", "{", UNPARSABLE, UNPARSABLE),
    Vector(
        "Fail to restore checkpoint with invalid policy name",
        MASTER_MEMORY,
        "memory",
        _memory(
            _MEMORY_CORRUPT_BODY, '\n\t\t\t\t"checksum": 1234,', _MEMORY_DATA, '\n\t\t\t\t"dataChecksum": 1849615440'
        ),
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Restore checkpoint ignoring unknown fields in data section",
        MASTER_MEMORY,
        "memory",
        _memory(
            _MEMORY_CORRUPT_BODY,
            '\n\t\t\t\t"checksum": 1234,',
            r"""
				"data": "{\"unknownField\":\"value\",\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",""",
            '\n\t\t\t\t"dataChecksum": 2100279793',
        ),
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Restore checkpoint from v1 (migration)",
        MASTER_MEMORY,
        "memory",
        _memory(_MEMORY_V1_BODY, '\n\t\t\t\t"checksum": 4215593881'),
        RESTORED,
        RESTORED,
    ),
    Vector(
        "Restore checkpoint from v1 (migration) with checksum zeroed",
        MASTER_MEMORY,
        "memory",
        _memory(_MEMORY_V1_BODY, '\n\t\t\t\t"checksum": 0'),
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Fail to restore checkpoint from v1 with invalid checksum",
        MASTER_MEMORY,
        "memory",
        r"""{
				"policyName":"static",
				"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
				"entries":{"pod":{"container1":[{"affinity":[0],"type":"memory","size":512}]}},
				"checksum": 101010
			}""",
        CORRUPT,
        CORRUPT,
    ),
    Vector(
        "Restore checkpoint from v2 with PodLevelResourceManagers enabled/disabled",
        MASTER_MEMORY,
        "memory",
        _memory(_MEMORY_V1_BODY, _MEMORY_POD_ENTRIES, '\n\t\t\t\t"checksum": 1278640530'),
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Restore checkpoint from v2 with zeroed checksum and with PodLevelResourceManagers disabled",
        MASTER_MEMORY,
        "memory",
        _memory(_MEMORY_V1_BODY, _MEMORY_POD_ENTRIES, '\n\t\t\t\t"checksum": 0'),
        CORRUPT,
        RESTORED,
    ),
    Vector(
        "Fail to restore checkpoint from v2 with invalid checksum",
        MASTER_MEMORY,
        "memory",
        _memory(_MEMORY_V1_BODY, _MEMORY_POD_ENTRIES, '\n\t\t\t\t"checksum": 101010'),
        CORRUPT,
        CORRUPT,
    ),
    Vector(
        "Restore checkpoint from v3 with PodLevelResourceManagers enabled/disabled",
        MASTER_MEMORY,
        "memory",
        r"""{
				"policyName":"other",
				"machineState":{"0":{"numberOfAssignments":5,"memoryMap":{"memory":{"total":1024,"systemReserved":256,"allocatable":768,"reserved":256,"free":512}},"cells":[]}},
				"entries":{"pod":{"containerX":[{"numaAffinity":[0],"type":"memory","size":128}]}},
				"podEntries":{"podY":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":64}]}},
				"checksum": 1234,
				"data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}},\"podEntries\":{\"pod\":{\"memoryBlocks\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",
				"dataChecksum": 637296054
			}""",
        CORRUPT,
        RESTORED,
    ),
]

# ------------------------------------------------------------------------------------------ memory, before 1.36
MEMORY_OLD = [
    Vector(
        "Restore valid checkpoint",
        OLD_MEMORY,
        "memory",
        r"""{
				"policyName":"static",
				"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
				"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},
				"checksum": 4215593881
			}""",
        RESTORED,
        RESTORED,
    ),
    Vector(
        "Restore checkpoint with invalid checksum",
        OLD_MEMORY,
        "memory",
        r"""{
				"policyName":"static",
				"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
				"entries":{"pod":{"container1":[{"affinity":[0],"type":"memory","size":512}]}},
				"checksum": 101010
			}""",
        CORRUPT,
        CORRUPT,
    ),
    Vector("Restore checkpoint with invalid JSON", OLD_MEMORY, "memory", "{", UNPARSABLE, UNPARSABLE),
]

VECTORS = CPU_MASTER + CPU_OLD + MEMORY_MASTER + MEMORY_OLD
IDS = [f"{v.file}:{v.source.split()[-1].strip('()')}:{v.name}" for v in VECTORS]

STATE_FILES = {"cpu": ("cpu_manager_state", CPU_STATE_FILE), "memory": ("memory_manager_state", MEMORY_STATE_FILE)}
STALE = next(c for c in all_checks() if c.id == "kubelet_state_stale")


def read_back_findings(fake_host, vector: Vector, kubelet_version: str | None):
    """Write the vector into the node's kubelet directory, read it with the kubelet_state source and judge it with
    kubelet_state_stale on the reference node; only the read-back verdicts (the policy and the machine are judged
    afterwards, by the same check, and differ from the reference node's by design)."""
    relative, file = STATE_FILES[vector.file]
    fake_host.write(f"var/lib/kubelet/{relative}", vector.content)
    state = kubelet_state.read(fake_host.paths)
    host = replace_state(
        reference_snapshot(), cpu=state.cpu, memory=state.memory, problems=state.problems, rke2_version=None
    )
    intent = replace(REFERENCE, kubelet_version=kubelet_version)
    evaluation = evaluate(host, intent, [STALE])
    return [f for f in evaluation.findings if f.labels["reason"] in (CORRUPT, UNPARSABLE) and f.labels["file"] == file]


@pytest.mark.parametrize(("version", "era"), [("1.35", "until_1_35"), ("v1.37.0", "since_1_36")])
@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_every_kubelet_vector_gets_that_kubelets_verdict(fake_host, vector, version, era):
    expected = getattr(vector, era)
    found = read_back_findings(fake_host, vector, version)
    if expected == RESTORED:
        assert found == [], [f.message for f in found]
        return
    (finding,) = found
    assert finding.labels["reason"] == expected
    assert finding.severity == "critical"
    assert "will refuse to start" in finding.message


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_with_the_kubelet_version_unknown_only_a_file_every_version_refuses_is_critical(fake_host, vector):
    found = read_back_findings(fake_host, vector, None)
    verdicts = {vector.until_1_35, vector.since_1_36}
    if verdicts == {RESTORED}:
        assert found == []
        return
    (finding,) = found
    if RESTORED in verdicts:
        assert finding.severity == "warning"
        assert "judged leniently" in finding.message
        assert "set kubelet.version in the intent" in finding.message
    else:
        assert finding.severity == "critical"
        assert "judged leniently" not in finding.message


def test_the_tables_hold_every_vector_once_per_source():
    assert len(set(IDS)) == len(IDS)
    assert len(CPU_MASTER) == 20 and len(CPU_OLD) == 9 and len(MEMORY_MASTER) == 15 and len(MEMORY_OLD) == 3


MASTER_V2 = next(v for v in CPU_MASTER if v.name.startswith("Restore checkpoint from v2 (migration)"))


@pytest.mark.parametrize(("version", "expected"), [("1.37", []), ("1.35", [("critical", CORRUPT)])])
def test_numawatch_check_gives_the_kubelets_verdict_on_a_node(fake_host, tmp_path, capsys, version, expected):
    # The first defect end to end: master's v2 vector on an RKE2 node, `numawatch check` with the intent
    # naming the kubelet's version.
    reference_node(fake_host)
    fake_host.write("var/lib/kubelet/cpu_manager_state", MASTER_V2.content)
    intent = tmp_path / "intent.yaml"
    intent.write_text(f'kubelet:\n  version: "{version}"\n')

    cli.main(["check", "--host-root", str(fake_host.root), "--intent", str(intent), "--format", "json"])

    report = json.loads(capsys.readouterr().out)
    found = [
        (f["severity"], f["labels"]["reason"])
        for f in report["findings"]
        if f["check"] == "kubelet_state_stale" and f["labels"]["reason"] in (CORRUPT, UNPARSABLE)
    ]
    assert found == expected
