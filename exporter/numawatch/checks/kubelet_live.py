"""The live kubelet against its checkpoint files: what it has handed out now (the pod-resources API) and what it
wrote down, and will restore at its next start (cpu_manager_state, memory_manager_state, the device checkpoint).

They are written together (the managers update the checkpoint in the same step as their memory), so a
difference is either a checkpoint someone edited or restored, or a kubelet whose writes fail: after a restart the
kubelet will hand out what the file says, not what the containers hold. numawatch takes assignments from the live
answer (workloads.py); this check says where the two disagree instead of choosing silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from numawatch.checks.check import Check, Finding, NotEvaluated, require
from numawatch.cpuset import CPUSet, format_cpulist
from numawatch.host import Host
from numawatch.inputs import POD_RESOURCES
from numawatch.intent import Intent
from numawatch.model.kubelet import (
    ContainerResources,
    DeviceAssignment,
    KubeletState,
    MemoryBlock,
    PodResources,
    ResourceDevices,
)
from numawatch.model.workloads import Names

_Devices = Mapping[str, Mapping[str, frozenset[int]]]  # resource -> device ID -> NUMA nodes (-1: no topology)


def _cpus(cpus: CPUSet) -> str:
    return format_cpulist(cpus) if cpus else "none"


def _blocks(blocks: tuple[MemoryBlock, ...]) -> Counter[tuple[str, int, tuple[int, ...]]]:
    return Counter((block.type, block.size, tuple(sorted(block.numa_affinity))) for block in blocks)


def _show_blocks(blocks: Counter[tuple[str, int, tuple[int, ...]]]) -> str:
    if not blocks:
        return "none"
    shown = []
    for (kind, size, nodes), count in sorted(blocks.items()):
        where = ",".join(str(node) for node in nodes) or "?"
        shown.append(f"{kind} {size} B on node {where}" + (f" x{count}" if count > 1 else ""))
    return "; ".join(shown)


def _devices(listed: tuple[ResourceDevices, ...] | list[DeviceAssignment]) -> _Devices:
    out: dict[str, dict[str, set[int]]] = {}
    for entry in listed:
        for node, ids in entry.devices_per_numa.items():
            for device_id in ids:
                out.setdefault(entry.resource_name, {}).setdefault(device_id, set()).add(node)
    return {resource: {d: frozenset(n) for d, n in ids.items()} for resource, ids in out.items()}


def _show_devices(devices: _Devices) -> str:
    if not devices:
        return "none"
    return "; ".join(f"{resource} {','.join(sorted(ids))}" for resource, ids in sorted(devices.items()))


def _uids(names: Names) -> dict[tuple[str, str], set[str]]:
    by_name: dict[tuple[str, str], set[str]] = {}
    for identity in names.pods.values():
        by_name.setdefault((identity.namespace, identity.name), set()).add(identity.uid)
    return by_name


def differences(uid: str, container: str, held: ContainerResources, state: KubeletState) -> list[str]:
    """How the checkpoints' entries of (``uid``, ``container``) differ from what the live kubelet says it holds,
    one clause each; only the files the kubelet keeps are compared (a CPU Manager checkpoint of v1, keyed by
    container ID, or with pod-level entries for the pod, is not)."""
    found: list[str] = []
    cpu = state.cpu
    if cpu is not None and cpu.version >= 2 and uid not in cpu.pod_entries:
        written = cpu.entries.get(uid, {}).get(container, frozenset())
        if written != held.exclusive_cpus:
            found.append(
                f"exclusive CPUs {_cpus(held.exclusive_cpus)} live, {_cpus(written)} in {cpu.file}"
            )
    memory = state.memory
    if memory is not None and uid not in memory.pod_entries:
        written_blocks = _blocks(tuple(memory.entries.get(uid, {}).get(container, ())))
        live_blocks = _blocks(held.memory_blocks)
        if written_blocks != live_blocks:
            found.append(
                f"memory blocks {_show_blocks(live_blocks)} live, {_show_blocks(written_blocks)} in {memory.file}"
            )
    devices = state.devices
    if devices is not None:
        written_devices = _devices(
            [entry for entry in devices.entries if entry.pod_uid == uid and entry.container_name == container]
        )
        live_devices = _devices(held.devices)
        if written_devices != live_devices:
            found.append(
                f"devices {_show_devices(live_devices)} live, {_show_devices(written_devices)} in {devices.file}"
            )
    return found


def check_podresources_mismatch(host: Host, intent: Intent) -> Iterator[Finding]:
    live: PodResources = require(host, "pod_resources")
    state: KubeletState = require(host, "kubelet_state")
    names: Names = require(host, "names")
    if state.cpu is None and state.memory is None and state.devices is None:
        raise NotEvaluated("the kubelet keeps no checkpoint file to compare with its pod-resources answer")
    uids = _uids(names)
    for (namespace, pod), containers in live.pods.items():
        owners = uids.get((namespace, pod), set())
        if len(owners) != 1:
            continue  # the runtime does not name the pod's UID (or names two): its checkpoint entries are unknown
        (uid,) = owners
        for container, held in containers.items():
            found = differences(uid, container, held, state)
            if found:
                yield MISMATCH.finding(
                    intent,
                    {"namespace": namespace, "pod": pod, "pod_uid": uid, "container": container},
                    f"the kubelet's pod-resources answer and its checkpoints disagree for {namespace}/{pod}/"
                    f"{container}: {'; '.join(found)}; numawatch judges what the kubelet answers, and the kubelet "
                    f"restores the checkpoint at its next start",
                )


MISMATCH = Check(
    id="kubelet_podresources_checkpoint_mismatch",
    severity="warning",
    summary="The live kubelet (pod-resources API) and its checkpoint files disagree on a container's CPUs, memory "
    "or devices.",
    remediation="find what rewrote or restored the checkpoint (a backup, a config tool, a full disk that fails the "
    "kubelet's writes); drain the node, stop the kubelet, remove the disagreeing checkpoint, start it again",
    run=check_podresources_mismatch,
    inputs=(POD_RESOURCES,),
    knob="1",
)

CHECKS: tuple[Check, ...] = (MISMATCH,)
