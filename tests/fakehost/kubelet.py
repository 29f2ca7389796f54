"""Fake-host builder for the kubelet: configuration (RKE2 or kubeadm) and checkpoint files with valid checksums.

Everything is written where the real node keeps it (``/etc/rancher/rke2``, ``/var/lib/kubelet``, ...) under the fake
host's root, in the kubelet's own serialisation (compact JSON, Go map-key order), so the numawatch sources read
them exactly as they read a node. Checksums are computed with numawatch.checkpoint_checksum unless a test asks for a
specific (wrong) value with ``checksum=<int>``.

Typical use::

    write_kubelet_config(host, "rke2", cpu_manager_policy="static", reserved_cpus="0-1,64-65")
    write_cpu_manager_state(host, policy="static", default_cpuset="0-1,64-65",
                            entries={"<pod uid>": {"vllm": "2-31"}})
    state = kubelet_memory_machine_state({0: 256 << 30, 1: 256 << 30}, reserved_memory={0: {"memory": "4Gi"}})
    write_memory_manager_state(host, policy="Static", machine_state=state, entries={})
    write_device_checkpoint(host, entries=[DeviceAssignment(uid, "vllm", "nvidia.com/gpu", {1: ("GPU-...",)})],
                            registered={"nvidia.com/gpu": ["GPU-..."]})
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from numawatch.checkpoint_checksum import (
    DeviceEntryRecord,
    cpu_manager_checksum,
    data_checksum,
    device_checkpoint_checksum,
    dump_cpu_manager_v3,
    dump_memory_manager_v2,
    fnv1a_32,
    memory_manager_checksum,
)
from numawatch.cpuset import format_cpulist, parse_cpulist
from numawatch.model import frozen_map
from numawatch.model.kubelet import DeviceAssignment, MemoryBlock, MemoryNodeState, MemoryTable
from numawatch.model.topology import Topology
from numawatch.quantity import format_binary, hugepage_resource_name, quantity_bytes

from fakehost import FakeHost

__all__ = [
    "CPU_STATE",
    "DEVICE_CHECKPOINT",
    "MEMORY_STATE",
    "RKE2_CONFIG",
    "RKE2_DROPIN_DIR",
    "kubelet_memory_machine_state",
    "machine_state_from_topology",
    "nvidia_alloc_resp",
    "write_cpu_manager_state",
    "write_device_checkpoint",
    "write_kubelet_config",
    "write_memory_manager_state",
]

KUBELET_ROOT = "var/lib/kubelet"
CPU_STATE = f"{KUBELET_ROOT}/cpu_manager_state"
MEMORY_STATE = f"{KUBELET_ROOT}/memory_manager_state"
DEVICE_CHECKPOINT = f"{KUBELET_ROOT}/device-plugins/kubelet_internal_checkpoint"
RKE2_CONFIG = "etc/rancher/rke2/config.yaml"
RKE2_DROPIN_DIR = "var/lib/rancher/rke2/agent/etc/kubelet.conf.d"
KUBEADM_CONFIG = f"{KUBELET_ROOT}/config.yaml"
KUBEADM_FLAGS = f"{KUBELET_ROOT}/kubeadm-flags.env"

_HEADER = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}
# What RKE2 renders into 00-rke2-defaults.conf (the fields that matter here; the real file has more).
_RKE2_DEFAULTS = {**_HEADER, "cgroupDriver": "systemd", "clusterDomain": "cluster.local", "failSwapOn": False}

CpuList = str | Iterable[int]
Checksum = str | int  # "valid", or the exact number to write


def _cpus(value: CpuList) -> str:
    return value if isinstance(value, str) else format_cpulist(value)


def _quantity(value: int | str) -> str:
    return value if isinstance(value, str) else format_binary(value)


def _json(document: Any) -> bytes:
    """Compact JSON, as Go's json.Marshal writes it (the key order of ``document`` is kept)."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def _go_keys(mapping: Mapping[Any, Any]) -> list[Any]:
    """Go's json.Marshal sorts map keys by their string form ("-1" < "0" < "1" < "10" < "2")."""
    return sorted(mapping, key=str)


# --------------------------------------------------------------------------------------------------- configuration
def write_kubelet_config(
    host: FakeHost,
    flavor: str = "rke2",
    *,
    cpu_manager_policy: str | None = None,
    topology_manager_policy: str | None = None,
    topology_manager_scope: str | None = None,
    memory_manager_policy: str | None = None,
    reserved_cpus: CpuList | None = None,
    reserved_memory: Mapping[int, Mapping[str, int | str]] | None = None,
    cpu_manager_policy_options: Mapping[str, str] | None = None,
    system_reserved: Mapping[str, str] | None = None,
    kube_reserved: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    as_flags: bool = True,
    rke2_defaults: bool = True,
    node_taints: Sequence[str] | None = None,
    node_labels: Sequence[str] | None = None,
) -> Path:
    """Write the kubelet configuration of a node and return the main file written.

    flavor: "rke2" (``/etc/rancher/rke2/config.yaml``) or "kubeadm" (``/var/lib/kubelet/config.yaml`` +
        ``kubeadm-flags.env``).
    Settings left None are not written, so the kubelet's defaults apply (and they are not "explicit").
    reserved_cpus: a CPU list string or CPU numbers. reserved_memory: NUMA node -> {"memory" or "hugepages-1Gi":
        bytes (int) or a quantity string}. cpu_manager_policy_options / system_reserved / kube_reserved: k -> v.
    extra_args: more kubelet flags as RKE2 spells them, ``"name=value"`` without dashes (written verbatim into
        ``kubelet-arg`` for RKE2 and as ``--name=value`` for kubeadm), e.g. ``('cpu-manager-policy="static"',)``.
    as_flags: True writes the settings as flags (kubelet-arg / KUBELET_KUBEADM_ARGS); False as KubeletConfiguration
        fields (RKE2: a drop-in ``50-numawatch.conf`` in RKE2's kubelet.conf.d; kubeadm: ``config.yaml``).
    rke2_defaults: RKE2 only, also write ``00-rke2-defaults.conf`` as recent RKE2 releases do.
    node_taints / node_labels: what the node registers with (``key=value:Effect``, ``key=value``): RKE2's
        ``node-taint`` / ``node-label`` lists; kubeadm's ``--register-with-taints`` and ``--node-labels`` flags
        (with as_flags False, the taints as ``registerWithTaints`` in config.yaml: labels have no field). None
        writes nothing (kubeadm: taints set through the API).
    """
    fields: dict[str, Any] = {}  # KubeletConfiguration field -> value
    flags: list[str] = []  # "flag=value", as RKE2's kubelet-arg spells them
    for flag, field, value in (
        ("cpu-manager-policy", "cpuManagerPolicy", cpu_manager_policy),
        ("cpu-manager-policy-options", "cpuManagerPolicyOptions", cpu_manager_policy_options),
        ("system-reserved", "systemReserved", system_reserved),
        ("kube-reserved", "kubeReserved", kube_reserved),
        ("topology-manager-policy", "topologyManagerPolicy", topology_manager_policy),
        ("topology-manager-scope", "topologyManagerScope", topology_manager_scope),
        ("memory-manager-policy", "memoryManagerPolicy", memory_manager_policy),
    ):
        if value is None:
            continue
        if isinstance(value, Mapping):
            flags.append(f"{flag}=" + ",".join(f"{k}={v}" for k, v in value.items()))
            fields[field] = dict(value)
        else:
            flags.append(f"{flag}={value}")
            fields[field] = value
    if reserved_cpus is not None:
        flags.append(f"reserved-cpus={_cpus(reserved_cpus)}")
        fields["reservedSystemCPUs"] = _cpus(reserved_cpus)
    if reserved_memory is not None:
        nodes = sorted(reserved_memory.items())
        flags.append(
            "reserved-memory="
            + ";".join(
                f"{node}:" + ",".join(f"{k}={_quantity(v)}" for k, v in limits.items()) for node, limits in nodes
            )
        )
        fields["reservedMemory"] = [
            {"numaNode": node, "limits": {k: _quantity(v) for k, v in limits.items()}} for node, limits in nodes
        ]

    registration: dict[str, Any] = {}
    if flavor == "rke2":
        if node_taints is not None:
            registration["node-taint"] = list(node_taints)
        if node_labels is not None:
            registration["node-label"] = list(node_labels)
        return _write_rke2(host, fields, flags, extra_args, as_flags, rke2_defaults, registration)
    if flavor == "kubeadm":
        extra = list(extra_args)
        if node_taints is not None:
            if as_flags:
                extra.append("register-with-taints=" + ",".join(node_taints))
            else:
                fields["registerWithTaints"] = [_taint_field(taint) for taint in node_taints]
        if node_labels is not None:
            extra.append("node-labels=" + ",".join(node_labels))
        return _write_kubeadm(host, fields, flags, extra, as_flags)
    raise ValueError(f"unknown flavor {flavor!r}: rke2 or kubeadm")


def _yaml(document: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(document), default_flow_style=False, sort_keys=False)


def _taint_field(taint: str) -> dict[str, str]:
    """``key=value:Effect`` -> the KubeletConfiguration's ``{key, value, effect}``."""
    body, _, effect = taint.rpartition(":")
    key, _, value = body.partition("=")
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def _write_rke2(
    host: FakeHost,
    fields: dict[str, Any],
    flags: list[str],
    extra: Sequence[str],
    as_flags: bool,
    defaults: bool,
    registration: Mapping[str, Any] | None = None,
) -> Path:
    if defaults:
        host.write(f"{RKE2_DROPIN_DIR}/00-rke2-defaults.conf", _yaml(_RKE2_DEFAULTS))
    document: dict[str, Any] = {"write-kubeconfig-mode": "0644", **(registration or {})}
    args = [*(flags if as_flags else ()), *extra]
    if args:
        document["kubelet-arg"] = args
    if not as_flags and fields:
        host.write(f"{RKE2_DROPIN_DIR}/50-numawatch.conf", _yaml({**_HEADER, **fields}))
    return host.write(RKE2_CONFIG, _yaml(document))


def _write_kubeadm(
    host: FakeHost, fields: dict[str, Any], flags: list[str], extra: Sequence[str], as_flags: bool
) -> Path:
    document = {**_HEADER, "cgroupDriver": "systemd", "clusterDomain": "cluster.local"}
    if not as_flags:
        document.update(fields)
    args = ["--container-runtime-endpoint=unix:///run/containerd/containerd.sock"]
    args += [f"--{flag}" for flag in (flags if as_flags else ())]
    args += [f"--{arg}" for arg in extra]
    host.write(KUBEADM_FLAGS, f"KUBELET_KUBEADM_ARGS={json.dumps(' '.join(args))}")
    return host.write(KUBEADM_CONFIG, _yaml(document))


def write_rke2_data_dir(host: FakeHost, version: str, *, release: str = "rke2r1", current: bool = True) -> str:
    """Install an RKE2 release's data directory, ``/var/lib/rancher/rke2/data/<version>-<release>-<hash>/bin``, as
    the RKE2 installer unpacks it; ``current`` points ``/var/lib/rancher/rke2/bin`` at it (RKE2's own link, which
    an upgrade moves while the old directory stays). Returns the directory's name."""
    name = f"{version}-{release}-{fnv1a_32(version + release):012x}"  # RKE2's hash is 12 hex digits too
    host.write(f"var/lib/rancher/rke2/data/{name}/bin/kubelet", "")
    if current:
        host.symlink("var/lib/rancher/rke2/bin", f"/var/lib/rancher/rke2/data/{name}/bin")
    return name


# --------------------------------------------------------------------------------------------------- CPU manager
def write_cpu_manager_state(
    host: FakeHost,
    *,
    policy: str = "static",
    default_cpuset: CpuList = "",
    entries: Mapping[str, Any] | None = None,
    version: int = 2,
    checksum: Checksum = "valid",
    pod_entries: Mapping[str, CpuList] | None = None,
) -> Path:
    """Write ``cpu_manager_state`` as the kubelet would.

    entries: version 1: container ID -> CPUs; versions 2-4: pod UID -> container name -> CPUs (CPU list strings,
        written verbatim, even invalid ones, or CPU numbers).
    version 3 adds ``podEntries`` (pod UID -> CPUs); version 4 writes a v2/v3 body with checksum 0 plus ``data``
        and ``dataChecksum``.
    checksum: "valid" (computed as a 1.36+ kubelet writes it: v3 hashes its struct, ``podEntries`` included, under
        the legacy type name), or the number to write (v4: the dataChecksum).
    """
    entries = entries or {}
    if version == 1:
        legacy = {cid: _cpus(cpus) for cid, cpus in sorted(entries.items())}
        value = cpu_manager_checksum(policy, _cpus(default_cpuset), legacy, version=1)
        document: dict[str, Any] = {"policyName": policy, "defaultCpuSet": _cpus(default_cpuset)}
        if legacy:
            document["entries"] = legacy
        document["checksum"] = value if checksum == "valid" else checksum
        return host.write(CPU_STATE, _json(document))
    by_pod = {
        pod: {name: _cpus(cpus) for name, cpus in sorted(containers.items())}
        for pod, containers in sorted(entries.items())
    }
    body: dict[str, Any] = {"policyName": policy, "defaultCpuSet": _cpus(default_cpuset)}
    if by_pod:
        body["entries"] = by_pod
    if version >= 3 and pod_entries:
        body["podEntries"] = {pod: {"cpuSet": _cpus(cpus)} for pod, cpus in sorted(pod_entries.items())}
    if version == 4:
        data = _json(body).decode()
        document = {**body, "checksum": 0, "data": data}
        document["dataChecksum"] = data_checksum(data) if checksum == "valid" else checksum
        return host.write(CPU_STATE, _json(document))
    if version == 3:
        pods = {pod: parse_cpulist(_cpus(cpus)) for pod, cpus in (pod_entries or {}).items()}
        value = fnv1a_32(
            dump_cpu_manager_v3(policy, _cpus(default_cpuset), by_pod, pods, type_name="CPUManagerCheckpoint")
        )
    else:
        value = cpu_manager_checksum(policy, _cpus(default_cpuset), by_pod)
    body["checksum"] = value if checksum == "valid" else checksum
    return host.write(CPU_STATE, _json(body))


# --------------------------------------------------------------------------------------------------- memory manager
def kubelet_memory_machine_state(
    mem_total: Mapping[int, int],
    *,
    hugepages: Mapping[int, Mapping[int, int]] | None = None,
    reserved_memory: Mapping[int, Mapping[str, int | str]] | None = None,
    entries: Mapping[str, Mapping[str, Sequence[MemoryBlock]]] | None = None,
    hugepage_sizes_kb: Iterable[int] = (2048, 1048576),
) -> dict[int, MemoryNodeState]:
    """The machine state the kubelet's Static memory policy computes, so a test can write a consistent file.

    mem_total: NUMA node -> MemTotal in bytes (nodeN/meminfo). hugepages: node -> page size in kB -> pages
    (nodeN/hugepages/hugepages-<kB>kB/nr_hugepages); every size in ``hugepage_sizes_kb`` exists on every node with 0
    pages unless given, as sysfs lists the directories even when empty. reserved_memory: node -> resource ->
    bytes or quantity (``--reserved-memory``). entries: pod -> container -> blocks, replayed as the kubelet does.

    Algorithm (policy_static.go getDefaultMachineState + validateState; kubelet.md §2.4): per node a table for each
    huge page size (total = pages * size, allocatable = total - reserved) and one for "memory" (total = MemTotal,
    allocatable = MemTotal - reserved - all huge page bytes), free = allocatable; then every block takes its size
    from the free memory of its NUMA nodes in order and sets ``cells`` to its affinity.
    """
    nodes: dict[int, dict[str, list[int]]] = {}
    assignments: dict[int, int] = {}
    cells: dict[int, tuple[int, ...]] = {}
    sizes = tuple(hugepage_sizes_kb)
    for node, total in sorted(mem_total.items()):
        reserved = {
            name: quantity_bytes(_quantity(size)) for name, size in (reserved_memory or {}).get(node, {}).items()
        }
        pages = {size: 0 for size in sizes} | dict((hugepages or {}).get(node, {}))
        tables: dict[str, list[int]] = {}
        hugepage_bytes = 0
        for size_kb, count in sorted(pages.items()):
            name = hugepage_resource_name(size_kb)
            size = count * size_kb * 1024
            allocatable = size - reserved.get(name, 0)
            tables[name] = [size, reserved.get(name, 0), allocatable, 0, allocatable]  # total, sys, alloc, rsv, free
            hugepage_bytes += size
        allocatable = total - reserved.get("memory", 0) - hugepage_bytes
        tables["memory"] = [total, reserved.get("memory", 0), allocatable, 0, allocatable]
        nodes[node], assignments[node], cells[node] = tables, 0, (node,)
    for _pod, containers in sorted((entries or {}).items()):
        for _name, blocks in sorted(containers.items()):
            for block in blocks:
                remaining = block.size
                for node in block.numa_affinity:
                    assignments[node] += 1
                    cells[node] = tuple(block.numa_affinity)
                    table = nodes[node][block.type]
                    taken = min(table[4], remaining)
                    table[3] += taken
                    table[4] -= taken
                    remaining -= taken
    return {
        node: MemoryNodeState(
            number_of_assignments=assignments[node],
            memory_map=frozen_map({name: MemoryTable(*values) for name, values in tables.items()}),
            cells=cells[node],
        )
        for node, tables in nodes.items()
    }


def machine_state_from_topology(
    topology: Topology,
    *,
    reserved_memory: Mapping[int, Mapping[str, int | str]] | None = None,
    entries: Mapping[str, Mapping[str, Sequence[MemoryBlock]]] | None = None,
) -> dict[int, MemoryNodeState]:
    """kubelet_memory_machine_state for the nodes of a Topology snapshot (MemTotal and huge pages per node)."""
    return kubelet_memory_machine_state(
        {node_id: node.mem_total_bytes or 0 for node_id, node in topology.nodes.items()},
        hugepages={node_id: dict(node.hugepages_total) for node_id, node in topology.nodes.items()},
        reserved_memory=reserved_memory,
        entries=entries,
        hugepage_sizes_kb=(),
    )


def _node_json(node: MemoryNodeState) -> dict[str, Any]:
    tables = {
        name: {
            "total": table.total,
            "systemReserved": table.system_reserved,
            "allocatable": table.allocatable,
            "reserved": table.reserved,
            "free": table.free,
        }
        for name, table in sorted(node.memory_map.items())
    }
    return {"numberOfAssignments": node.number_of_assignments, "memoryMap": tables, "cells": list(node.cells)}


def _blocks_json(blocks: Sequence[MemoryBlock]) -> list[dict[str, Any]]:
    return [{"numaAffinity": list(b.numa_affinity), "type": b.type, "size": b.size} for b in blocks]


def write_memory_manager_state(
    host: FakeHost,
    *,
    policy: str = "Static",
    machine_state: Mapping[int, MemoryNodeState],
    entries: Mapping[str, Mapping[str, Sequence[MemoryBlock]]] | None = None,
    checksum: Checksum = "valid",
    version: int = 1,
    pod_entries: Mapping[str, Sequence[MemoryBlock]] | None = None,
) -> Path:
    """Write ``memory_manager_state`` as the kubelet would.

    machine_state: NUMA node -> MemoryNodeState (see kubelet_memory_machine_state); entries: pod UID -> container
    -> blocks. version 2 adds ``podEntries`` (pod UID -> blocks); version 3 writes the v1 body plus ``data`` and
    ``dataChecksum``. checksum: "valid" (v2: the hash of the v2 struct, ``podEntries`` included, as 1.36+ writes
    it) or the number to write (v3: the dataChecksum).
    """
    entries = entries or {}
    body: dict[str, Any] = {
        "policyName": policy,
        "machineState": {str(node): _node_json(machine_state[node]) for node in _go_keys(machine_state)},
    }
    if entries:
        body["entries"] = {
            pod: {name: _blocks_json(blocks) for name, blocks in sorted(containers.items())}
            for pod, containers in sorted(entries.items())
        }
    value = memory_manager_checksum(policy, machine_state, entries)
    if version == 2 and pod_entries:
        body["podEntries"] = {pod: {"memoryBlocks": _blocks_json(b)} for pod, b in sorted(pod_entries.items())}
        value = fnv1a_32(dump_memory_manager_v2(policy, machine_state, entries, pod_entries))
    if version == 3:
        data_body = dict(body)
        if pod_entries:
            data_body["podEntries"] = {pod: {"memoryBlocks": _blocks_json(b)} for pod, b in sorted(pod_entries.items())}
        data = _json(data_body).decode()
        document = {**body, "checksum": value, "data": data}
        document["dataChecksum"] = data_checksum(data) if checksum == "valid" else checksum
        return host.write(MEMORY_STATE, _json(document))
    body["checksum"] = value if checksum == "valid" else checksum
    return host.write(MEMORY_STATE, _json(body))


# --------------------------------------------------------------------------------------------------- device manager
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def nvidia_alloc_resp(device_ids: Sequence[str]) -> bytes:
    """A ContainerAllocateResponse protobuf with only ``envs{NVIDIA_VISIBLE_DEVICES: "<id>,<id>"}``, as the
    NVIDIA device plugin's minimal answer (field 1, a map entry of key=1, value=2)."""
    key = b"NVIDIA_VISIBLE_DEVICES"
    value = ",".join(device_ids).encode()
    entry = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(value)) + value
    return b"\x0a" + _varint(len(entry)) + entry


def write_device_checkpoint(
    host: FakeHost,
    *,
    entries: Iterable[DeviceAssignment],
    registered: Mapping[str, Sequence[str]],
    checksum: Checksum = "valid",
    boot_id: str | None = None,
    legacy: bool = False,
    alloc_resp: Mapping[tuple[str, str], bytes] | None = None,
) -> Path:
    """Write ``device-plugins/kubelet_internal_checkpoint`` as the kubelet would.

    entries: DeviceAssignment(pod_uid, container_name, resource_name, {NUMA node (-1: none): device IDs}).
    registered: resource -> healthy device IDs. boot_id: written as ``BootID`` (newest kubelets), outside the
    checksum. legacy: the kubelet <= 1.19 shape, DeviceIDs a plain list. alloc_resp: (pod UID, container) -> the
    AllocResp bytes; by default nvidia_alloc_resp of the entry's devices.
    """
    records: list[DeviceEntryRecord] = []
    rendered: list[dict[str, Any]] = []
    for entry in entries:
        per_numa = {int(numa): list(ids) for numa, ids in entry.devices_per_numa.items()}
        flat = [device for numa in sorted(per_numa) for device in per_numa[numa]]
        response = (alloc_resp or {}).get((entry.pod_uid, entry.container_name), nvidia_alloc_resp(flat))
        ids: Any = flat if legacy else per_numa
        records.append(DeviceEntryRecord(entry.pod_uid, entry.container_name, entry.resource_name, ids, response))
        rendered.append(
            {
                "PodUID": entry.pod_uid,
                "ContainerName": entry.container_name,
                "ResourceName": entry.resource_name,
                "DeviceIDs": flat if legacy else {str(n): per_numa[n] for n in _go_keys(per_numa)},
                "AllocResp": base64.b64encode(response).decode(),
            }
        )
    devices = {resource: list(ids) for resource, ids in sorted(registered.items())}
    # With no assignment the kubelet's slice is nil: it writes null and hashes <nil>.
    value = device_checkpoint_checksum(records or None, devices, legacy=legacy)
    document: dict[str, Any] = {
        "Data": {"PodDeviceEntries": rendered or None, "RegisteredDevices": devices},
        "Checksum": value if checksum == "valid" else checksum,
    }
    if boot_id:
        document["BootID"] = boot_id
    return host.write(DEVICE_CHECKPOINT, _json(document))
