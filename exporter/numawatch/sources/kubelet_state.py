"""The kubelet's checkpoint files: what its CPU, Memory and Device Managers declare they handed out.

Reads (kubelet.md §1-4), each once per change (the kubelet replaces them by rename, so one open+read is atomic):

- ``<kubelet root>/cpu_manager_state``: JSON ``{"policyName","defaultCpuSet","entries","checksum"}``; v1 entries are
  container ID -> cpuset, v2 pod UID -> container -> cpuset, v3 adds ``podEntries`` {pod UID: {"cpuSet"}}, v4 adds
  ``data`` (the checkpoint as a JSON string, authoritative) and ``dataChecksum``.
- ``<kubelet root>/memory_manager_state``: ``{"policyName","machineState","entries","checksum"}`` (v1), v2 adds
  ``podEntries`` {pod UID: {"memoryBlocks"}}, v3 adds ``data`` + ``dataChecksum``.
- ``<kubelet root>/device-plugins/kubelet_internal_checkpoint``: ``{"Data":{"PodDeviceEntries","RegisteredDevices"},
  "Checksum"[,"BootID"]}``; ``DeviceIDs`` is NUMA node -> IDs, or a plain list in legacy (<= 1.19) files.

The files are decoded the way Go's encoding/json decodes them into the kubelet's structs (object keys matched
case-insensitively, the last duplicate winning, unknown keys ignored, wrong types an error), because the checksum is
computed over that decoded value. A file the kubelet could not read back (bad JSON, wrong types, a bad cpuset, a
checksum mismatch) is not a failure of this source: it is a ``StateFileProblem``, which the kubelet_state_stale check
reports, because the kubelet will refuse to start with it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from numawatch.checkpoint_checksum import (
    CPU_TYPE_NAMES,
    CPU_V1_TYPE_NAMES,
    CPU_V3_TYPE_NAMES,
    MEMORY_TYPE_NAMES,
    DeviceEntryRecord,
    data_checksum,
    dump_cpu_manager_v1,
    dump_cpu_manager_v2,
    dump_cpu_manager_v3,
    dump_device_checkpoint,
    dump_memory_manager_v1,
    dump_memory_manager_v2,
    fnv1a_32,
)
from numawatch.cpuset import CPUListError, CPUSet, parse_cpulist
from numawatch.errors import SourceUnavailable
from numawatch.hosttext import checked, excerpt
from numawatch.kubelet_version import parse_version
from numawatch.model import frozen_map
from numawatch.model.kubelet import (
    SINCE_1_36,
    UNTIL_1_35,
    CpuManagerState,
    DeviceAssignment,
    DeviceCheckpoint,
    KubeletState,
    KubeletVersion,
    MemoryBlock,
    MemoryManagerState,
    MemoryNodeState,
    MemoryTable,
    StateFileProblem,
)
from numawatch.paths import Paths
from numawatch.source import SourceSpec

CPU_STATE = "cpu_manager_state"
MEMORY_STATE = "memory_manager_state"
DEVICE_CHECKPOINT = "device-plugins/kubelet_internal_checkpoint"

UNPARSABLE = "unparsable"
CHECKSUM_MISMATCH = "checksum_mismatch"

# Checkpoints hold one line per container; 860 containers is well under 1 MB. Anything near this is not a checkpoint.
# The bound is also what a corrupt file costs before it is refused (read_bytes reads limit + 1 bytes): it stays well
# inside the DaemonSet's 128 MiB memory limit.
_READ_LIMIT = 16 * 1024 * 1024
_UINT64_MAX = (1 << 64) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_GO_INT_KEY = re.compile(r"[+-]?[0-9]+", re.ASCII)  # strconv.ParseInt's syntax for integer map keys


def host_name(paths: Paths, path: Path) -> str:
    """How the host names a path we read under the root (``<root>/var/lib/kubelet/x`` -> ``/var/lib/kubelet/x``)."""
    try:
        return "/" + str(path.relative_to(paths.root)).lstrip("/") if str(paths.root) != "/" else str(path)
    except ValueError:
        return str(path)  # a per-part override outside the root: the path is all we know


# --------------------------------------------------------------------------------------------------- Go-style JSON
class _Invalid(ValueError):
    """The file does not decode into the kubelet's struct; the message says where (``entries.pod1: ...``)."""


class _Obj:
    """A JSON object as Go's decoder walks it: key/value pairs in file order, duplicates kept."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def _reject_constant(name: str) -> Any:
    raise _Invalid(f"{name} is not valid JSON")


# A \uD800-\uDFFF escape in the JSON text: the only way a lone UTF-16 surrogate gets into a decoded string once the
# bytes were decoded strictly (json.loads(bytes) would let UTF-8-encoded surrogates through).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _loads(data: bytes | str) -> Any:
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text, object_pairs_hook=_Obj, parse_constant=_reject_constant)
        if _SURROGATE_ESCAPE.search(text):
            value = _go_strings(value)
        return value
    except _Invalid:
        raise
    except json.JSONDecodeError as error:
        raise _Invalid(f"invalid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    except (ValueError, RecursionError) as error:  # bad UTF-8, absurd nesting
        raise _Invalid(f"invalid JSON: {error}") from None


def _go_strings(value: Any) -> Any:
    """Lone surrogates replaced by U+FFFD, as Go's decoder does: the checksum is over Go's string, and a Python
    string holding one cannot even be encoded to be hashed."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_go_strings(item) for item in value]
    if isinstance(value, _Obj):
        return _Obj([(_go_strings(key), _go_strings(item)) for key, item in value.pairs])
    return value


def _kind(value: Any) -> str:
    if isinstance(value, _Obj):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"


def _where(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _struct(value: Any, path: str, names: tuple[str, ...]) -> dict[str, list[Any]]:
    """The occurrences of each struct field's key (matched case-insensitively, as Go does), in file order.

    A JSON ``null`` for a struct leaves it untouched in Go, so it reads as an object with no keys.
    """
    fields: dict[str, list[Any]] = {name: [] for name in names}
    if value is None:
        return fields
    if not isinstance(value, _Obj):
        raise _Invalid(f"{path or 'the file'}: expected an object, got {_kind(value)}")
    folded = {name.casefold(): name for name in names}
    for key, item in value.pairs:
        name = folded.get(key.casefold())
        if name is not None:
            fields[name].append(item)
    return fields


def _string(values: list[Any], path: str, default: str = "") -> str:
    result = default
    for value in values:
        if value is None:  # null leaves a Go string as it was
            continue
        if not isinstance(value, str):
            raise _Invalid(f"{path}: expected a string, got {_kind(value)}")
        result = value
    return result


def _integer(values: list[Any], path: str, lo: int, hi: int, default: int = 0) -> int:
    result = default
    for value in values:
        if value is None:
            continue
        # Go refuses 1.0 and 1e3 for integer fields; Python parses them as floats, so a float is always an error.
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise _Invalid(f"{path}: expected an integer in [{lo}, {hi}], got {_kind(value)} {_short(value)}")
        result = value
    return result


def _uint64(values: list[Any], path: str) -> int:
    return _integer(values, path, 0, _UINT64_MAX)


def _int(values: list[Any], path: str) -> int:
    return _integer(values, path, _INT64_MIN, _INT64_MAX)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, _Obj) else "{...}"
    return text if len(text) <= 40 else text[:37] + "..."


def _map(
    values: list[Any],
    path: str,
    decode: Callable[[Any, str], Any],
    *,
    initial: dict | None,
    int_keys: bool = False,
) -> dict | None:
    """A Go map field: null sets it to nil; an object adds its keys to the existing map (last duplicate wins)."""
    result = initial
    for value in values:
        if value is None:
            result = None
            continue
        if not isinstance(value, _Obj):
            raise _Invalid(f"{path}: expected an object, got {_kind(value)}")
        result = {} if result is None else result
        for key, item in value.pairs:
            map_key: Any = key
            if int_keys:
                # 20 characters hold every int64 ("-9223372036854775808"); a longer key would also be past the
                # 4,300 digits int() converts.
                if len(key) > 20 or not _GO_INT_KEY.fullmatch(key) or not _INT64_MIN <= int(key) <= _INT64_MAX:
                    raise _Invalid(f"{path}: key {excerpt(key)} is not an integer")
                map_key = int(key)
            result[map_key] = decode(item, _where(path, key))
    return result


def _slice(values: list[Any], path: str, decode: Callable[[Any, str], Any], *, initial: list | None) -> list | None:
    """A Go slice field: null sets it to nil; an array replaces it."""
    result = initial
    for value in values:
        if value is None:
            result = None
            continue
        if not isinstance(value, list):
            raise _Invalid(f"{path}: expected an array, got {_kind(value)}")
        result = [decode(item, f"{path}[{index}]") for index, item in enumerate(value)]
    return result


# Element decoders: inside a map or slice, null is the element type's zero value ("" / 0 / nil).
def _elem_string(value: Any, path: str) -> str:
    return _string([value], path)


def _elem_int(value: Any, path: str) -> int:
    return _int([value], path)


def _elem_string_map(value: Any, path: str) -> dict | None:
    return _map([value], path, _elem_string, initial=None)


def _elem_string_list(value: Any, path: str) -> list | None:
    return _slice([value], path, _elem_string, initial=None)


def _cpuset(text: str, path: str) -> CPUSet:
    try:
        return parse_cpulist(text)
    except CPUListError as error:
        raise _Invalid(f"{path}: {error}") from None


def _freeze_nested(mapping: dict | None) -> dict:
    return {key: frozen_map(value or {}) for key, value in (mapping or {}).items()}


# --------------------------------------------------------------------------------------------------- CPU manager
_CPU_FIELDS = ("policyName", "defaultCpuSet", "entries", "podEntries", "checksum", "data", "dataChecksum")
_CPU_BODY_FIELDS = ("policyName", "defaultCpuSet", "entries", "podEntries")
_REFUSED = "the kubelet refuses it: 'checkpoint is corrupted'"


def _pod_cpusets(values: list[Any], path: str) -> dict[str, str] | None:
    def one(value: Any, where: str) -> str:
        return _string(_struct(value, where, ("cpuSet",))["cpuSet"], f"{where}.cpuSet")

    return _map(values, path, one, initial={})


@dataclass(frozen=True)
class _Refusal:
    """Why one kubelet rule set cannot read the file back."""

    reason: str
    detail: str


def _verdict(file: str, refusals: Mapping[str, _Refusal | None]) -> tuple[bool | None, StateFileProblem | None]:
    """(checksum_ok, problem) from each rule set's refusal (None: it reads the file back).

    The problem names the rule sets that refuse the file; where they refuse it for different reasons, the detail
    gives each (the reason is the newest kubelet's).
    """
    refusing = {era: refusal for era, refusal in refusals.items() if refusal is not None}
    if not refusing:
        return True, None
    distinct = {(r.reason, r.detail) for r in refusing.values()}
    eras = frozenset(refusing)
    by_era: dict[str, tuple[str, str]] = {}
    if len(distinct) == 1:
        reason, detail = next(iter(distinct))
    else:
        by_era = {era: (refusal.reason, refusal.detail) for era, refusal in refusing.items()}
        reason = refusing[max(refusing)].reason  # ">=1.36" sorts after "<=1.35"
        detail = "; ".join(f"kubelet {era}: {refusing[era].detail}" for era in sorted(refusing, reverse=True))
    corrupt = [era for era, refusal in refusing.items() if refusal.reason == CHECKSUM_MISMATCH]
    checksum_ok = True if not corrupt else False if len(corrupt) == len(refusals) else None
    return checksum_ok, StateFileProblem(file, reason, detail, eras, by_era=frozen_map(by_era))


def _mismatch(stored: int, computed: int, key: str, consequence: str = _REFUSED) -> _Refusal:
    return _Refusal(CHECKSUM_MISMATCH, f"{key} {stored} in the file, {computed} computed ({consequence})")


def parse_cpu_manager_state(data: bytes | str, file: str) -> tuple[CpuManagerState | None, StateFileProblem | None]:
    """Decode ``cpu_manager_state`` (any version) and verify it as each kubelet rule set does.

    Returns the state (None when no kubelet could read it back) and the problem (None when every kubelet version
    reads it back; its ``eras`` otherwise). The state is what the newest kubelet restores where it can.
    """
    # v4: kubelets <= 1.35 know no ``data`` and read the legacy body (written with checksum 0 for them); 1.36+
    # restore ``data`` alone and never fall back to the body when it is bad (state_checkpoint.go).
    return _judged(data, file, _CPU_FIELDS, _CpuBody, _cpu_legacy, _cpu_v4)


_State = TypeVar("_State", CpuManagerState, MemoryManagerState)


def _judged(
    data: bytes | str,
    file: str,
    field_names: tuple[str, ...],
    body_of: Callable[[dict[str, list[Any]]], Any],
    legacy: Callable[[Any, str, str], tuple[_State | None, _Refusal | None]],
    with_data: Callable[[dict[str, list[Any]], str], tuple[_State | None, _Refusal | None]],
) -> tuple[_State | None, StateFileProblem | None]:
    """One checkpoint decoded and judged under both rule sets: kubelets <= 1.35 read its legacy body; 1.36+ read
    its ``data`` where it has one (``dataChecksum`` too), else the legacy body by their own rules. The state is the
    newest kubelet's where it restores one, and carries whether the checksums held (``checksum_ok``)."""
    try:
        fields = _struct(_loads(data), "", field_names)
    except _Invalid as error:
        return None, StateFileProblem(file, UNPARSABLE, str(error))
    try:
        body = body_of(fields)
    except _Invalid as error:  # a field every struct shares has the wrong type
        return None, StateFileProblem(file, UNPARSABLE, str(error))
    old_state, old_refusal = legacy(body, file, UNTIL_1_35)
    if fields["data"] or fields["dataChecksum"]:
        new_state, new_refusal = with_data(fields, file)
    else:
        new_state, new_refusal = legacy(body, file, SINCE_1_36)
    state = new_state if new_state is not None else old_state
    ok, problem = _verdict(file, {UNTIL_1_35: old_refusal, SINCE_1_36: new_refusal})
    if state is not None:
        state = dataclasses.replace(state, checksum_ok=ok)
    return state, problem


def _cpu_v4(fields: dict[str, list[Any]], file: str) -> tuple[CpuManagerState | None, _Refusal | None]:
    try:
        text = _string(fields["data"], "data")
        stored = _uint64(fields["dataChecksum"], "dataChecksum")
        body = _struct(_loads(text), "data", _CPU_BODY_FIELDS)
        entries = _map(body["entries"], "data.entries", _elem_string_map, initial={})
        pod_entries = _pod_cpusets(body["podEntries"], "data.podEntries")
        policy = _string(body["policyName"], "data.policyName")
        default = _string(body["defaultCpuSet"], "data.defaultCpuSet")
    except _Invalid as error:
        return None, _data_unparsable(error)
    computed = data_checksum(text)
    refusal = None if computed == stored else _mismatch(stored, computed, "dataChecksum")
    return _build(lambda: _cpu_state(file, 4, policy, default, entries, None, pod_entries), refusal)


def _data_unparsable(error: _Invalid) -> _Refusal:
    """``data`` that does not decode: 1.36+ refuse the file ("could not load v4 checkpoint") without falling back."""
    detail = str(error)
    return _Refusal(UNPARSABLE, detail if detail.startswith("data") else f"data: {detail}")


def _decoded(decode: Callable[[], Any]) -> tuple[Any, _Invalid | None]:
    try:
        return decode(), None
    except _Invalid as error:
        return None, error


class _CpuBody:
    """The legacy body of ``cpu_manager_state`` decoded once, as each struct the kubelet tries decodes it, with the
    checksums of its dumps computed at most once: both rule sets try some of the same ones, and hashing a large
    checkpoint costs milliseconds."""

    def __init__(self, fields: dict[str, list[Any]]) -> None:
        self.policy = _string(fields["policyName"], "policyName")
        self.default = _string(fields["defaultCpuSet"], "defaultCpuSet")
        self.stored = _uint64(fields["checksum"], "checksum")
        self.has_pods = bool(fields["podEntries"])
        self.v2_entries, self.v2_error = _decoded(
            lambda: _map(fields["entries"], "entries", _elem_string_map, initial={})
        )
        self.v1_entries, self.v1_error = _decoded(lambda: _map(fields["entries"], "entries", _elem_string, initial={}))
        self.pod_strings, self.pod_error = _decoded(lambda: _pod_cpusets(fields["podEntries"], "podEntries"))
        if self.pod_error is None and self.pod_strings is not None:
            pods = self.pod_strings
            self.pod_sets, self.pod_error = _decoded(
                lambda: {pod: _cpuset(text, f"podEntries.{pod}.cpuSet") for pod, text in pods.items()}
            )
        else:
            self.pod_sets = None
        self._hashes: dict[tuple[int, str], int] = {}
        self._states: dict[tuple[int, bool], CpuManagerState] = {}

    def hash(self, version: int, type_name: str) -> int:
        """The checksum of the v1, v2 or v3 struct's dump under ``type_name`` (the decoded entries must exist)."""
        key = (version, type_name)
        if key not in self._hashes:
            if version == 1:
                dump = dump_cpu_manager_v1(self.policy, self.default, self.v1_entries, type_name=type_name)
            elif version == 2:
                dump = dump_cpu_manager_v2(self.policy, self.default, self.v2_entries, type_name=type_name)
            else:
                dump = dump_cpu_manager_v3(
                    self.policy, self.default, self.v2_entries, self.pod_sets, type_name=type_name
                )
            self._hashes[key] = fnv1a_32(dump)
        return self._hashes[key]

    def matches(self, version: int, type_names: tuple[str, ...]) -> bool:
        return any(self.hash(version, name) == self.stored for name in type_names)

    def state(self, file: str, version: int, pods: bool = False) -> Callable[[], CpuManagerState]:
        """What the kubelet restores when it reads the file as ``version`` (1: entries by container ID); built once
        when both rule sets restore the same."""

        def build() -> CpuManagerState:
            key = (version, pods)
            if key not in self._states:
                if version == 1:
                    self._states[key] = _cpu_state(file, 1, self.policy, self.default, None, self.v1_entries, None)
                else:
                    pod_entries = self.pod_strings if pods and self.pod_error is None else None
                    self._states[key] = _cpu_state(
                        file, version, self.policy, self.default, self.v2_entries, None, pod_entries
                    )
            return self._states[key]

        return build


def _cpu_legacy(body: _CpuBody, file: str, era: str) -> tuple[CpuManagerState | None, _Refusal | None]:
    """A file without ``data``, as one rule set reads it.

    <= 1.35: the v2 struct (pod -> container -> cpuset), then v1 (container ID -> cpuset); a checksum of 0 is
    accepted by both ("compatibility with old file backend"). >= 1.36: the v3 struct (v2 plus ``podEntries``, hashed
    under two type names, no checksum 0), then v2 (checksum 0 accepted); v1 files are no longer read.
    """
    version = 3 if body.has_pods else 2
    if era == UNTIL_1_35:
        if body.v2_error is None and (body.stored == 0 or body.matches(2, CPU_TYPE_NAMES[:1])):
            return _build(body.state(file, version), None)
        if body.v1_error is None:
            if body.stored == 0 or body.matches(1, CPU_V1_TYPE_NAMES):
                return _build(body.state(file, 1), None)
            if body.v1_entries:  # a v1 file (entries keyed by container ID) that fails its check
                refusal = _mismatch(body.stored, body.hash(1, CPU_V1_TYPE_NAMES[0]), "checksum")
                return _build(body.state(file, 1), refusal)
        if body.v2_error is not None:
            return None, _Refusal(UNPARSABLE, str(body.v2_error))
        refusal = _mismatch(body.stored, body.hash(2, CPU_TYPE_NAMES[0]), "checksum")
        return _build(body.state(file, version), refusal)
    if body.v2_error is not None:
        if body.v1_error is None:
            return None, _Refusal(
                UNPARSABLE,
                "entries are keyed by container ID, the v1 format of kubelets <= 1.17, which kubelet 1.36+ no longer "
                f"reads ({body.v2_error})",
            )
        return None, _Refusal(UNPARSABLE, str(body.v2_error))
    v3_decoded = body.pod_error is None
    if not body.has_pods and (body.stored == 0 or body.matches(2, CPU_TYPE_NAMES)):
        # Without pod entries the v3 and v2 readings restore the same state: the v2 hash (the common file, written
        # by any kubelet up to 1.35) is tried first, as it was just computed for the older rule set.
        return _build(body.state(file, 2), None)
    if v3_decoded and body.matches(3, CPU_V3_TYPE_NAMES):
        return _build(body.state(file, version, pods=True), None)
    if body.stored == 0 or body.matches(2, CPU_TYPE_NAMES):
        return _build(body.state(file, 2), None)  # read as v2, the pod-level entries are dropped
    computed = body.hash(3, CPU_V3_TYPE_NAMES[-1]) if v3_decoded else body.hash(2, CPU_TYPE_NAMES[0])
    return _build(body.state(file, version, pods=True), _mismatch(body.stored, computed, "checksum"))


def _build(build: Callable[[], Any], refusal: _Refusal | None) -> tuple[Any, _Refusal | None]:
    """Build the snapshot once the checksum verdict is known.

    The kubelet verifies the checksum before it parses any cpuset, so a corrupt file with a bad cpuset is refused
    for its checksum, and a verified one with a bad cpuset as unparsable ("could not parse ... cpuset").
    """
    try:
        return build(), refusal
    except _Invalid as error:
        return None, refusal or _Refusal(UNPARSABLE, str(error))


# A checkpoint's policy name is repeated in messages (kubelet_state_stale): a short identifier, or empty (a v4 file
# holding only ``data`` leaves the legacy body's name empty, and the kubelet reads it back), or the file is
# unparsable. Pod UIDs, container names and device IDs are decoded exactly as the kubelet decodes them (any string,
# for the checksum) and are matched against the cgroups and the runtime's names, which are checked; where one is
# repeated on its own (a GPU's device ID as its label), the reader of the snapshot checks it (hosttext).
_POLICY_NAME = re.compile(r"(?:[A-Za-z][A-Za-z0-9_-]{0,31})?")


def _checked_policy(policy: str) -> str:
    try:
        return checked(policy, _POLICY_NAME, "policyName")
    except ValueError as error:
        raise _Invalid(str(error)) from None


def _cpu_state(
    file: str,
    version: int,
    policy: str,
    default: str,
    entries: dict | None,
    entries_v1: dict | None,
    pod_entries: dict | None,
) -> CpuManagerState:
    _checked_policy(policy)
    # The kubelet parses every cpuset after the checksum and refuses the file if one is bad ("could not parse").
    by_pod = {
        pod: {name: _cpuset(cpus, f"entries.{pod}.{name}") for name, cpus in (containers or {}).items()}
        for pod, containers in (entries or {}).items()
    }
    return CpuManagerState(
        file=file,
        version=version,
        policy_name=policy,
        default_cpuset=_cpuset(default, "defaultCpuSet"),
        entries=frozen_map(_freeze_nested(by_pod)),
        entries_v1=frozen_map({cid: _cpuset(cpus, f"entries.{cid}") for cid, cpus in (entries_v1 or {}).items()}),
        pod_entries=frozen_map({pod: _cpuset(c, f"podEntries.{pod}.cpuSet") for pod, c in (pod_entries or {}).items()}),
    )


# --------------------------------------------------------------------------------------------------- memory manager
_MEMORY_FIELDS = ("policyName", "machineState", "entries", "podEntries", "checksum", "data", "dataChecksum")
_MEMORY_BODY_FIELDS = ("policyName", "machineState", "entries", "podEntries")
_TABLE_FIELDS = ("total", "systemReserved", "allocatable", "reserved", "free")


@dataclass(frozen=True)
class _Node:
    """A decoded NUMANodeState, keeping Go's nil (None) apart from empty for the checksum."""

    number_of_assignments: int
    memory_map: dict[str, MemoryTable | None] | None
    cells: list[int] | None


@dataclass(frozen=True)
class _Block:
    numa_affinity: list[int] | None
    type: str
    size: int


def _decode_table(value: Any, path: str) -> MemoryTable | None:
    if value is None:  # a nil *MemoryTable
        return None
    fields = _struct(value, path, _TABLE_FIELDS)
    return MemoryTable(*(_uint64(fields[name], _where(path, name)) for name in _TABLE_FIELDS))


def _decode_node(value: Any, path: str) -> _Node | None:
    if value is None:  # a nil *NUMANodeState
        return None
    fields = _struct(value, path, ("numberOfAssignments", "memoryMap", "cells"))
    return _Node(
        _int(fields["numberOfAssignments"], _where(path, "numberOfAssignments")),
        _map(fields["memoryMap"], _where(path, "memoryMap"), _decode_table, initial=None),
        _slice(fields["cells"], _where(path, "cells"), _elem_int, initial=None),
    )


def _decode_block(value: Any, path: str) -> _Block:
    fields = _struct(value, path, ("numaAffinity", "type", "size"))
    return _Block(
        _slice(fields["numaAffinity"], _where(path, "numaAffinity"), _elem_int, initial=None),
        _string(fields["type"], _where(path, "type")),
        _uint64(fields["size"], _where(path, "size")),
    )


def _decode_blocks(value: Any, path: str) -> list[_Block] | None:
    return _slice([value], path, _decode_block, initial=None)


def _decode_containers(value: Any, path: str) -> dict | None:
    return _map([value], path, _decode_blocks, initial=None)


def _decode_pod_blocks(value: Any, path: str) -> list[_Block] | None:
    blocks = _struct(value, path, ("memoryBlocks",))["memoryBlocks"]
    return _slice(blocks, f"{path}.memoryBlocks", _decode_block, initial=None)


def parse_memory_manager_state(
    data: bytes | str, file: str
) -> tuple[MemoryManagerState | None, StateFileProblem | None]:
    """Decode ``memory_manager_state`` (v1, v2, v3) and verify it as each kubelet rule set does (as the CPU one)."""
    return _judged(data, file, _MEMORY_FIELDS, _MemoryBody, _memory_legacy, _memory_v3)


def _memory_v3(fields: dict[str, list[Any]], file: str) -> tuple[MemoryManagerState | None, _Refusal | None]:
    # ``data`` is authoritative for 1.36+; the legacy v1 body next to it may differ and is not what is restored.
    try:
        text = _string(fields["data"], "data")
        stored = _uint64(fields["dataChecksum"], "dataChecksum")
        body = _struct(_loads(text), "data", _MEMORY_BODY_FIELDS)
        decoded = _memory_body(body, "data.")
    except _Invalid as error:
        return None, _data_unparsable(error)
    computed = data_checksum(text)
    refusal = None if computed == stored else _mismatch(stored, computed, "dataChecksum")
    return _build(lambda: _memory_state(file, 3, *decoded), refusal)


class _MemoryBody:
    """The legacy body of ``memory_manager_state`` decoded once, each dump's checksum computed at most once."""

    def __init__(self, fields: dict[str, list[Any]]) -> None:
        self.stored = _uint64(fields["checksum"], "checksum")
        self.policy, self.machine, self.entries, self.pod_entries = _memory_body(fields, "")
        self.has_pods = bool(fields["podEntries"])
        self._hashes: dict[str, int] = {}
        self._states: dict[tuple[int, bool], MemoryManagerState] = {}

    def hash(self, type_name: str | None) -> int:
        """The checksum of the v1 struct's dump under ``type_name``, or of the v2 struct's (None)."""
        key = type_name or ""
        if key not in self._hashes:
            if type_name is None:
                dump = dump_memory_manager_v2(self.policy, self.machine, self.entries, self.pod_entries)
            else:
                dump = dump_memory_manager_v1(self.policy, self.machine, self.entries, type_name=type_name)
            self._hashes[key] = fnv1a_32(dump)
        return self._hashes[key]

    def v1_matches(self) -> bool:
        return any(self.hash(name) == self.stored for name in MEMORY_TYPE_NAMES)

    def state(self, file: str, version: int, pods: bool = False) -> Callable[[], MemoryManagerState]:
        """What the kubelet restores reading the file as ``version``; built once when both rule sets restore it."""

        def build() -> MemoryManagerState:
            key = (version, pods)
            if key not in self._states:
                pod_entries = self.pod_entries if pods else None
                self._states[key] = _memory_state(file, version, self.policy, self.machine, self.entries, pod_entries)
            return self._states[key]

        return build


def _memory_legacy(body: _MemoryBody, file: str, era: str) -> tuple[MemoryManagerState | None, _Refusal | None]:
    """A file without ``data``, as one rule set reads it.

    <= 1.35: the v1 struct only, and no checksum 0. >= 1.36: the v2 struct (v1 plus ``podEntries``, hashed under the
    legacy type name), then v1, which accepts a checksum of 0 (state_checkpoint.go, checkpoint.go).
    """
    version = 2 if body.has_pods else 1
    if era == UNTIL_1_35:
        # The v1 struct has no podEntries: they are dropped, and a hash that covered them does not match.
        refusal = None if body.v1_matches() else _mismatch(body.stored, body.hash(MEMORY_TYPE_NAMES[0]), "checksum")
        return _build(body.state(file, version), refusal)
    if not body.has_pods and (body.stored == 0 or body.v1_matches()):
        # Without pod entries the v2 and v1 readings restore the same state: the v1 hash, just computed for the older
        # rule set, is tried first.
        return _build(body.state(file, 1), None)
    if body.hash(None) == body.stored:
        return _build(body.state(file, version, pods=True), None)
    if body.stored == 0 or body.v1_matches():
        return _build(body.state(file, 1), None)
    computed = body.hash(None) if body.pod_entries else body.hash(MEMORY_TYPE_NAMES[0])
    return _build(body.state(file, version, pods=True), _mismatch(body.stored, computed, "checksum"))


def _memory_body(fields: dict[str, list[Any]], prefix: str) -> tuple[str, dict | None, dict | None, dict | None]:
    """policyName, machineState, entries and podEntries, decoded with Go's nil kept for the checksum.

    The kubelet pre-initialises the maps, so an absent key dumps as ``map[]`` and only a JSON null as ``<nil>``.
    """
    return (
        _string(fields["policyName"], f"{prefix}policyName"),
        _map(fields["machineState"], f"{prefix}machineState", _decode_node, initial={}, int_keys=True),
        _map(fields["entries"], f"{prefix}entries", _decode_containers, initial={}),
        _map(fields["podEntries"], f"{prefix}podEntries", _decode_pod_blocks, initial={}),
    )


def _memory_state(
    file: str,
    version: int,
    policy: str,
    machine: dict | None,
    entries: dict | None,
    pod_entries: dict | None,
) -> MemoryManagerState:
    _checked_policy(policy)
    nodes = {
        node_id: MemoryNodeState(
            number_of_assignments=node.number_of_assignments,
            memory_map=frozen_map({k: v for k, v in (node.memory_map or {}).items() if v is not None}),
            cells=tuple(node.cells or ()),
        )
        for node_id, node in (machine or {}).items()
        if node is not None
    }
    assignments = {
        pod: frozen_map({name: _blocks(blocks) for name, blocks in (containers or {}).items()})
        for pod, containers in (entries or {}).items()
    }
    return MemoryManagerState(
        file=file,
        version=version,
        policy_name=policy,
        machine_state=frozen_map(nodes),
        entries=frozen_map(assignments),
        pod_entries=frozen_map({pod: _blocks(blocks) for pod, blocks in (pod_entries or {}).items()}),
    )


def _blocks(blocks: list[_Block] | None) -> tuple[MemoryBlock, ...]:
    return tuple(MemoryBlock(tuple(b.numa_affinity or ()), b.type, b.size) for b in blocks or ())


# --------------------------------------------------------------------------------------------------- device manager
_ENTRY_FIELDS = ("PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp")


def _decode_alloc_resp(values: list[Any], path: str) -> bytes | None:
    """A Go []byte: base64 (standard alphabet, padded) in JSON; null is nil. Go skips CR/LF inside it."""
    result: bytes | None = None
    for value in values:
        if value is None:
            result = None
            continue
        if not isinstance(value, str):
            raise _Invalid(f"{path}: expected a base64 string, got {_kind(value)}")
        try:
            result = base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)
        except (binascii.Error, ValueError):
            raise _Invalid(f"{path}: not valid base64") from None
    return result


def _decode_entry(value: Any, path: str, legacy: bool) -> DeviceEntryRecord:
    fields = _struct(value, path, _ENTRY_FIELDS)
    ids_path = _where(path, "DeviceIDs")
    ids: Any
    if legacy:
        ids = _slice(fields["DeviceIDs"], ids_path, _elem_string, initial=None)
    else:
        ids = _map(fields["DeviceIDs"], ids_path, _elem_string_list, initial=None, int_keys=True)
    return DeviceEntryRecord(
        pod_uid=_string(fields["PodUID"], _where(path, "PodUID")),
        container_name=_string(fields["ContainerName"], _where(path, "ContainerName")),
        resource_name=_string(fields["ResourceName"], _where(path, "ResourceName")),
        device_ids=ids,
        alloc_resp=_decode_alloc_resp(fields["AllocResp"], _where(path, "AllocResp")),
    )


def _is_legacy(entries: list[Any]) -> bool:
    """Whether the entries use the v1 (<= 1.19) shape: a plain list of device IDs instead of NUMA -> IDs.

    The kubelet decodes the v2 struct first and falls back to v1 when that fails, so one list makes it a v1 file
    (in which a NUMA map is then an error).
    """
    return any(
        isinstance(ids, list)
        for entry in entries
        if isinstance(entry, _Obj)
        for ids in _struct(entry, "", _ENTRY_FIELDS)["DeviceIDs"]
    )


def parse_device_checkpoint(data: bytes | str, file: str) -> tuple[DeviceCheckpoint | None, StateFileProblem | None]:
    """Decode ``kubelet_internal_checkpoint`` (v2, or legacy v1 lists) and verify ``Checksum`` over ``Data``.

    Legacy v1 entries are reported as the kubelet converts them: every device on NUMA node 0.
    """
    try:
        top = _struct(_loads(data), "", ("Data", "Checksum", "BootID"))
        # Data is a struct value: every occurrence decodes into the same struct, so their keys simply add up.
        pairs = [pair for value in top["Data"] if isinstance(value, _Obj) for pair in value.pairs]
        for value in top["Data"]:
            if value is not None and not isinstance(value, _Obj):
                raise _Invalid(f"Data: expected an object, got {_kind(value)}")
        data_fields = _struct(_Obj(pairs), "Data", ("PodDeviceEntries", "RegisteredDevices"))
        raw_entries = [e for value in data_fields["PodDeviceEntries"] if isinstance(value, list) for e in value]
        legacy = _is_legacy(raw_entries)
        # The kubelet reads into an empty (non-nil) slice and map; a null in the file makes them nil.
        entries: list[DeviceEntryRecord] | None = _slice(
            data_fields["PodDeviceEntries"],
            "Data.PodDeviceEntries",
            lambda value, path: _decode_entry(value, path, legacy),
            initial=[],
        )
        registered = _map(data_fields["RegisteredDevices"], "Data.RegisteredDevices", _elem_string_list, initial={})
        stored = _uint64(top["Checksum"], "Checksum")
        boot_id = _string(top["BootID"], "BootID")
    except _Invalid as error:
        return None, _device_problem(file, _Refusal(UNPARSABLE, str(error)))
    computed = fnv1a_32(dump_device_checkpoint(entries, registered, legacy=legacy))
    assignments = []
    for entry in entries or ():
        device_ids = entry.device_ids
        per_numa: dict[int, tuple[str, ...]]
        if isinstance(device_ids, Mapping):  # v2: NUMA node -> IDs
            per_numa = {numa: tuple(ids or ()) for numa, ids in device_ids.items()}
        elif legacy:  # v1 list (or null): the kubelet puts every device on NUMA node 0
            per_numa = {0: tuple(device_ids or ())}
        else:  # v2 null map
            per_numa = {}
        assignments.append(
            DeviceAssignment(entry.pod_uid, entry.container_name, entry.resource_name, frozen_map(per_numa))
        )
    checkpoint = DeviceCheckpoint(
        file=file,
        entries=tuple(assignments),
        registered=frozen_map({res: tuple(ids or ()) for res, ids in (registered or {}).items()}),
        checksum_ok=computed == stored,
        boot_id=boot_id or None,
    )
    if checkpoint.checksum_ok:
        return checkpoint, None
    return checkpoint, _device_problem(file, _mismatch(stored, computed, "Checksum", _DISCARDED))


_DISCARDED = "the kubelet discards it at start and forgets its device allocations"


def _device_problem(file: str, refusal: _Refusal) -> StateFileProblem:
    """A device checkpoint the kubelet cannot read back does not stop it: every kubelet version logs "Continue
    after failing to read checkpoint file", starts without it and forgets which devices it handed out (manager.go)."""
    return StateFileProblem(file, refusal.reason, refusal.detail, refuses_start=False)


# --------------------------------------------------------------------------------------------------- the source
# An RKE2 data directory: <kubernetes version>-rke2r<release>-<hash of the bundled binaries>.
_RKE2_DATA_DIR = re.compile(r"(?P<version>v[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,4})-rke2r[0-9]{1,3}-[0-9a-f]{6,64}")


def _rke2_layout(paths: Paths) -> tuple[str | None, tuple[str, ...]]:
    """The target of RKE2's ``bin`` link (None: no link) and the names in its ``data`` directory. Unreadable parts
    read as absent: they only leave the kubelet version unknown."""
    data = os.fspath(paths.rke2_data)  # strings, not pathlib: this runs at every reading
    try:
        target: str | None = paths.fs.readlink(f"{data}/bin")
    except OSError:
        target = None
    try:
        names = tuple(sorted(paths.fs.list_dir(f"{data}/data")))
    except OSError:
        names = ()
    return target, names


def rke2_kubelet_version(paths: Paths) -> KubeletVersion | None:
    """The Kubernetes version of the RKE2 release installed on the node, from its data directory's name.

    ``<rke2 data>/bin`` links to ``data/<dir>/bin`` of the release that runs (older directories stay after an
    upgrade); without that link, a single data directory is the one that runs, and several leave it unknown.
    """
    target, listed = _rke2_layout(paths)
    names: list[str] = []
    if target is not None:
        parts = PurePosixPath(target).parts
        # ".../data/<dir>/bin" (absolute, as RKE2 writes it) or "data/<dir>/bin" (relative)
        if len(parts) >= 3 and parts[-1] == "bin" and parts[-3] == "data" and _RKE2_DATA_DIR.fullmatch(parts[-2]):
            names = [parts[-2]]
    if not names:
        names = [name for name in listed if _RKE2_DATA_DIR.fullmatch(name)]
    match = _RKE2_DATA_DIR.fullmatch(names[0]) if len(names) == 1 else None
    if match is None:
        return None
    return parse_version(match["version"], f"RKE2's data directory /var/lib/rancher/rke2/data/{names[0]}")


def _read_file(
    paths: Paths, relative: str, parse: Callable[[bytes, str], tuple[Any, StateFileProblem | None]]
) -> tuple[Any, StateFileProblem | None]:
    path = paths.kubelet / relative
    try:
        data = paths.fs.read_bytes(path, _READ_LIMIT)
    except (FileNotFoundError, NotADirectoryError):
        return None, None  # no such manager state yet (policy none never wrote one, or it was deleted)
    return parse(data, host_name(paths, path))


def read(paths: Paths) -> KubeletState:
    if not paths.fs.is_dir(paths.kubelet):
        raise SourceUnavailable(f"no kubelet directory at {paths.kubelet}")
    cpu, cpu_problem = _read_file(paths, CPU_STATE, parse_cpu_manager_state)
    memory, memory_problem = _read_file(paths, MEMORY_STATE, parse_memory_manager_state)
    devices, device_problem = _read_file(paths, DEVICE_CHECKPOINT, parse_device_checkpoint)
    problems = tuple(p for p in (cpu_problem, memory_problem, device_problem) if p is not None)
    return KubeletState(
        cpu=cpu, memory=memory, devices=devices, problems=problems, rke2_version=rke2_kubelet_version(paths)
    )


def fingerprint(paths: Paths) -> Hashable:
    """(inode, mtime_ns, size) of each checkpoint: the kubelet renames a new file into place on every write."""
    kubelet = os.fspath(paths.kubelet)  # strings, not pathlib: this runs at every reading
    key: list[Hashable] = [paths.fs.is_dir(kubelet)]
    for relative in (CPU_STATE, MEMORY_STATE, DEVICE_CHECKPOINT):
        st = paths.fs.stat_optional(f"{kubelet}/{relative}")
        key.append(None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size))
    # An RKE2 upgrade adds a data directory and moves the bin link: the kubelet version read with the files.
    key.append(_rke2_layout(paths))
    return tuple(key)


SOURCE = SourceSpec(
    name="kubelet_state",
    read=read,
    fingerprint=fingerprint,
    description="kubelet checkpoint files: cpu_manager_state, memory_manager_state, kubelet_internal_checkpoint",
)
