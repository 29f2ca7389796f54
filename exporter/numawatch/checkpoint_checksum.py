"""Exact checksums of the kubelet's checkpoint files, so "the kubelet will refuse this file" is known, not guessed.

The kubelet's checksum (pkg/kubelet/checkpointmanager/checksum) is FNV-1a-32 over go-spew's ``%#v`` dump of the
decoded Go struct, with ``{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}`` (kubelet.md §4).
This module renders that dump for the three checkpoint structs and hashes it. A dump looks like::

    (*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3
     Entries:(map[string]map[string]string)map[pod:map[container1:4-6]] Checksum:(checksum.Checksum)0}

(one line). The spew rules that matter (§4.2): a value carries its Go type in parentheses unless it sits inside a
map or slice; strings are raw; map keys are sorted (ints numerically, strings bytewise); a pointer to a struct inside
a map is ``<*>{...}``; ``[]byte`` is a list of decimal numbers; nil is ``<nil>`` and an empty map ``map[]``.

Because the dump is of the *Go* value, ``None`` here always means Go's nil (a JSON ``null``, or a field the kubelet
does not pre-initialise), which dumps differently from an empty map or slice. Callers that decode a file must keep
that distinction; callers that build a file (the fake host) simply never pass None.

The ``dataChecksum`` of CPU v4 / memory v3 files is the same hash over the dump of a Go string: ``"(string)" + data``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "CPU_TYPE_NAMES",
    "CPU_V1_TYPE_NAMES",
    "CPU_V3_TYPE_NAMES",
    "MEMORY_TYPE_NAMES",
    "BlockLike",
    "DeviceEntryRecord",
    "MemoryTableLike",
    "NumaNodeLike",
    "checksum_matches",
    "cpu_manager_checksum",
    "data_checksum",
    "device_checkpoint_checksum",
    "dump_cpu_manager_v1",
    "dump_cpu_manager_v2",
    "dump_cpu_manager_v3",
    "dump_device_checkpoint",
    "dump_memory_manager_v1",
    "dump_memory_manager_v2",
    "fnv1a_32",
    "memory_manager_checksum",
]

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193

# The type name the dump starts with. The first name is the one the kubelet writes with today; the others are
# accepted because some releases hashed over them (§4.4: 1.36 wrote v2 files as CPUManagerCheckpointV2 and 1.37
# reverted; the memory manager's V1 fallback replaces MemoryManagerCheckpointV1 by MemoryManagerCheckpoint).
CPU_V1_TYPE_NAMES = ("CPUManagerCheckpoint",)  # the kubelet renames CPUManagerCheckpointV1 before hashing
CPU_TYPE_NAMES = ("CPUManagerCheckpoint", "CPUManagerCheckpointV2")
# 1.36+ verifies a v3 file under its own name first, then under the legacy name it writes for older kubelets
# (checkpoint.go CPUManagerCheckpointV3.VerifyChecksum); a v2 file read as v3 gets the same two tries.
CPU_V3_TYPE_NAMES = ("CPUManagerCheckpointV3", "CPUManagerCheckpoint")
MEMORY_TYPE_NAMES = ("MemoryManagerCheckpoint", "MemoryManagerCheckpointV1")


def fnv1a_32(data: bytes | str) -> int:
    """FNV-1a, 32-bit (Go's hash/fnv New32a) of the bytes, or of a string's UTF-8 encoding."""
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogateescape")
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def data_checksum(data: str) -> int:
    """The ``dataChecksum`` of a CPU v4 / memory v3 file: the hash of spew's dump of the Go string ``data``."""
    return fnv1a_32("(string)" + data)


def checksum_matches(stored: int, dumps: Iterable[str]) -> bool:
    """Whether the stored checksum is the hash of any of the candidate dumps (type-name variants)."""
    return any(fnv1a_32(dump) == stored for dump in dumps)


# --------------------------------------------------------------------------------------------------- spew
@dataclass(frozen=True)
class _Struct:
    """A Go struct value: (field name, Go type, value) in declaration order."""

    fields: tuple[tuple[str, str, Any], ...]


@dataclass(frozen=True)
class _Ptr:
    """A non-nil pointer to a struct (a nil pointer is just None)."""

    target: _Struct


def _spew(value: Any, go_type: str | None = None) -> str:
    """go-spew ``%#v`` of a value; ``go_type`` None means "inside a map or slice", where spew prints no type."""
    prefix = f"({go_type})" if go_type else ""
    if isinstance(value, str):  # the commonest value first: this runs once per value of a large checkpoint
        return prefix + value
    if value is None:
        return prefix + "<nil>"
    if isinstance(value, _Ptr):
        # spew shows a typed pointer as (*T){...} and an untyped one (a map value) as <*>{...}
        return (prefix if go_type else "<*>") + _spew(value.target)
    if isinstance(value, _Struct):
        return prefix + "{" + " ".join(f"{name}:{_spew(item, ftype)}" for name, ftype, item in value.fields) + "}"
    if isinstance(value, bool):
        return prefix + ("true" if value else "false")
    if isinstance(value, int):
        return prefix + str(value)
    if isinstance(value, (bytes, bytearray)):
        return prefix + "[" + " ".join(str(b) for b in value) + "]"
    if isinstance(value, Mapping):
        keys = sorted(value)  # ints numerically, str by code point = Go's bytewise order for valid UTF-8
        return prefix + "map[" + " ".join(f"{_spew(k)}:{_spew(value[k])}" for k in keys) + "]"
    if isinstance(value, (list, tuple)):
        return prefix + "[" + " ".join(_spew(item) for item in value) + "]"
    raise TypeError(f"cannot dump {type(value).__name__} as a Go value")


# --------------------------------------------------------------------------------------------------- CPU manager
def dump_cpu_manager_v2(
    policy_name: str,
    default_cpuset: str,
    entries: Mapping[str, Mapping[str, str] | None] | None,
    *,
    type_name: str = CPU_TYPE_NAMES[0],
) -> str:
    """The hashed dump of a v2 ``cpu_manager_state`` (also the body of v3/v4): entries pod UID -> container -> cpus.

    A file without ``entries`` still dumps ``map[]`` (the kubelet pre-initialises the map), so pass ``{}`` for an
    absent key and None only for a JSON ``null``. The cpuset strings are hashed as written, valid or not.
    """
    struct = _Struct(
        (
            ("PolicyName", "string", policy_name),
            ("DefaultCPUSet", "string", default_cpuset),
            ("Entries", "map[string]map[string]string", entries),
            ("Checksum", "checksum.Checksum", 0),
        )
    )
    return _spew(_Ptr(struct), f"*state.{type_name}")


def dump_cpu_manager_v1(
    policy_name: str,
    default_cpuset: str,
    entries: Mapping[str, str] | None,
    *,
    type_name: str = CPU_V1_TYPE_NAMES[0],
) -> str:
    """The hashed dump of a v1 ``cpu_manager_state`` (kubelet <= 1.17): entries container ID -> cpus."""
    struct = _Struct(
        (
            ("PolicyName", "string", policy_name),
            ("DefaultCPUSet", "string", default_cpuset),
            ("Entries", "map[string]string", entries),
            ("Checksum", "checksum.Checksum", 0),
        )
    )
    return _spew(_Ptr(struct), f"*state.{type_name}")


def _cpuset_value(cpus: Iterable[int] | None) -> _Struct:
    """A ``PodEntry`` of the CPU Manager: {CPUSet cpuset.CPUSet}, whose only field is ``elems map[int]struct{}``."""
    elems = None if cpus is None else dict.fromkeys(cpus, _Struct(()))
    return _Struct((("CPUSet", "cpuset.CPUSet", _Struct((("elems", "map[int]struct {}", elems),))),))


def dump_cpu_manager_v3(
    policy_name: str,
    default_cpuset: str,
    entries: Mapping[str, Mapping[str, str] | None] | None,
    pod_entries: Mapping[str, Iterable[int] | None] | None,
    *,
    type_name: str = CPU_V3_TYPE_NAMES[0],
) -> str:
    """The hashed dump of a v3 ``cpu_manager_state`` as 1.36+ kubelets verify it: v2's fields and ``PodEntries``.

    pod_entries: pod UID -> its CPUs (the parsed ``cpuSet``: the struct holds a set, not the string); ``{}`` for an
    absent key (pre-initialised), None only for a JSON null.
    """
    pods = None if pod_entries is None else {pod: _cpuset_value(cpus) for pod, cpus in pod_entries.items()}
    struct = _Struct(
        (
            ("PolicyName", "string", policy_name),
            ("DefaultCPUSet", "string", default_cpuset),
            ("Entries", "map[string]map[string]string", entries),
            ("PodEntries", "state.PodCPUAssignments", pods),
            ("Checksum", "checksum.Checksum", 0),
        )
    )
    return _spew(_Ptr(struct), f"*state.{type_name}")


def cpu_manager_checksum(
    policy_name: str,
    default_cpuset: str,
    entries: Mapping[str, Mapping[str, str]] | Mapping[str, str],
    *,
    version: int = 2,
) -> int:
    """The checksum the kubelet writes for this state (version 1: entries by container ID; 2: by pod, container)."""
    # ``version`` decides which shape ``entries`` has; the union cannot say so, hence the two ignores.
    if version == 1:
        return fnv1a_32(dump_cpu_manager_v1(policy_name, default_cpuset, entries))  # type: ignore[arg-type]
    return fnv1a_32(dump_cpu_manager_v2(policy_name, default_cpuset, entries))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------- memory manager
class MemoryTableLike(Protocol):
    """model.MemoryTable, or anything with its fields (bytes)."""

    total: int
    system_reserved: int
    allocatable: int
    reserved: int
    free: int


class NumaNodeLike(Protocol):
    """model.MemoryNodeState, or a decoded node whose memory_map / cells may be None (a JSON null)."""

    number_of_assignments: int
    memory_map: Mapping[str, MemoryTableLike | None] | None
    cells: Sequence[int] | None


class BlockLike(Protocol):
    """model.MemoryBlock, or a decoded block whose numa_affinity may be None."""

    numa_affinity: Sequence[int] | None
    type: str
    size: int


def _memory_table(table: MemoryTableLike | None) -> _Ptr | None:
    if table is None:
        return None
    return _Ptr(
        _Struct(
            (
                ("TotalMemSize", "uint64", table.total),
                ("SystemReserved", "uint64", table.system_reserved),
                ("Allocatable", "uint64", table.allocatable),
                ("Reserved", "uint64", table.reserved),
                ("Free", "uint64", table.free),
            )
        )
    )


def _numa_node(node: NumaNodeLike | None) -> _Ptr | None:
    if node is None:
        return None
    memory_map = None if node.memory_map is None else {k: _memory_table(v) for k, v in node.memory_map.items()}
    return _Ptr(
        _Struct(
            (
                ("NumberOfAssignments", "int", node.number_of_assignments),
                ("MemoryMap", "map[v1.ResourceName]*state.MemoryTable", memory_map),
                ("Cells", "[]int", None if node.cells is None else list(node.cells)),
            )
        )
    )


def _block(block: BlockLike) -> _Struct:
    affinity = None if block.numa_affinity is None else list(block.numa_affinity)
    return _Struct(
        (("NUMAAffinity", "[]int", affinity), ("Type", "v1.ResourceName", block.type), ("Size", "uint64", block.size))
    )


def _memory_entries(
    entries: Mapping[str, Mapping[str, Sequence[BlockLike] | None] | None] | None,
) -> dict | None:
    if entries is None:
        return None
    out: dict[str, dict | None] = {}
    for pod, containers in entries.items():
        if containers is None:
            out[pod] = None
            continue
        out[pod] = {c: None if blocks is None else [_block(b) for b in blocks] for c, blocks in containers.items()}
    return out


def dump_memory_manager_v1(
    policy_name: str,
    machine_state: Mapping[int, NumaNodeLike | None] | None,
    entries: Mapping[str, Mapping[str, Sequence[BlockLike] | None] | None] | None,
    *,
    type_name: str = MEMORY_TYPE_NAMES[0],
) -> str:
    """The hashed dump of a v1 ``memory_manager_state`` (also the v3 legacy body).

    machine_state: NUMA node -> node state; entries: pod UID -> container -> blocks. Both are pre-initialised by the
    kubelet, so pass ``{}`` for an absent key and None only for a JSON ``null``.
    """
    nodes = None if machine_state is None else {int(k): _numa_node(v) for k, v in machine_state.items()}
    struct = _Struct(
        (
            ("PolicyName", "string", policy_name),
            ("MachineState", "state.NUMANodeMap", nodes),
            ("Entries", "state.ContainerMemoryAssignments", _memory_entries(entries)),
            ("Checksum", "checksum.Checksum", 0),
        )
    )
    return _spew(_Ptr(struct), f"*state.{type_name}")


def dump_memory_manager_v2(
    policy_name: str,
    machine_state: Mapping[int, NumaNodeLike | None] | None,
    entries: Mapping[str, Mapping[str, Sequence[BlockLike] | None] | None] | None,
    pod_entries: Mapping[str, Sequence[BlockLike] | None] | None,
) -> str:
    """The hashed dump of a v2 ``memory_manager_state`` as 1.36+ kubelets verify it: v1's fields and ``PodEntries``
    (pod UID -> the pod's blocks), under the legacy type name the kubelet substitutes before hashing."""
    nodes = None if machine_state is None else {int(k): _numa_node(v) for k, v in machine_state.items()}
    pods = None
    if pod_entries is not None:
        pods = {
            pod: _Struct((("MemoryBlocks", "[]state.Block", None if blocks is None else [_block(b) for b in blocks]),))
            for pod, blocks in pod_entries.items()
        }
    struct = _Struct(
        (
            ("PolicyName", "string", policy_name),
            ("MachineState", "state.NUMANodeMap", nodes),
            ("Entries", "state.ContainerMemoryAssignments", _memory_entries(entries)),
            ("PodEntries", "state.PodMemoryAssignments", pods),
            ("Checksum", "checksum.Checksum", 0),
        )
    )
    return _spew(_Ptr(struct), f"*state.{MEMORY_TYPE_NAMES[0]}")


def memory_manager_checksum(
    policy_name: str,
    machine_state: Mapping[int, NumaNodeLike],
    entries: Mapping[str, Mapping[str, Sequence[BlockLike]]],
) -> int:
    """The checksum the kubelet writes for this memory manager state (v1 format)."""
    return fnv1a_32(dump_memory_manager_v1(policy_name, machine_state, entries))


# --------------------------------------------------------------------------------------------------- device manager
@dataclass(frozen=True)
class DeviceEntryRecord:
    """One ``PodDeviceEntries`` element as the Go struct holds it.

    device_ids: NUMA node -> device IDs (v2), or a plain list of IDs (legacy v1, kubelet <= 1.19); None for null.
    alloc_resp: the base64-decoded ``AllocResp`` bytes (a ContainerAllocateResponse protobuf); None for null.
    """

    pod_uid: str
    container_name: str
    resource_name: str
    device_ids: Mapping[int, Sequence[str] | None] | Sequence[str] | None
    alloc_resp: bytes | None


def dump_device_checkpoint(
    entries: Sequence[DeviceEntryRecord] | None,
    registered: Mapping[str, Sequence[str] | None] | None,
    *,
    legacy: bool = False,
) -> str:
    """The hashed dump of ``kubelet_internal_checkpoint``'s ``Data`` (Checksum and BootID sit outside it).

    ``legacy``: a v1 file, whose DeviceIDs are lists; the kubelet renames its V1 types before hashing, so only the
    DeviceIDs type differs. The kubelet pre-initialises both fields: pass ``[]`` / ``{}`` for absent keys.
    """
    ids_type = "[]string" if legacy else "checkpoint.DevicesPerNUMA"
    rendered = None
    if entries is not None:
        rendered = []
        for entry in entries:
            ids = entry.device_ids
            # ``legacy`` decides whether device_ids is a NUMA map or a plain list; the union cannot say so.
            if ids is not None and not legacy:
                ids = {int(k): None if v is None else list(v) for k, v in ids.items()}  # type: ignore[union-attr]
            elif ids is not None:
                ids = list(ids)  # type: ignore[arg-type]
            rendered.append(
                _Struct(
                    (
                        ("PodUID", "string", entry.pod_uid),
                        ("ContainerName", "string", entry.container_name),
                        ("ResourceName", "string", entry.resource_name),
                        ("DeviceIDs", ids_type, ids),
                        ("AllocResp", "[]uint8", entry.alloc_resp),
                    )
                )
            )
    devices = None
    if registered is not None:
        devices = {k: None if v is None else list(v) for k, v in registered.items()}
    struct = _Struct(
        (
            ("PodDeviceEntries", "[]checkpoint.PodDevicesEntry", rendered),
            ("RegisteredDevices", "map[string][]string", devices),
        )
    )
    return _spew(struct, "checkpoint.checkpointData")


def device_checkpoint_checksum(
    entries: Sequence[DeviceEntryRecord] | None,
    registered: Mapping[str, Sequence[str]] | None,
    *,
    legacy: bool = False,
) -> int:
    """The ``Checksum`` the kubelet writes for this device checkpoint data."""
    return fnv1a_32(dump_device_checkpoint(entries, registered, legacy=legacy))
