"""Checks of the processes that actually use the GPUs (NVML's compute processes) against placement and intent.

Knobs h2 and h10 of the reference profile (DOMAIN.md), and knob 7 seen from the other side:

- ``gpu_process_remote``: a process using a GPU may run on CPUs outside the GPU's NUMA node. Judged per thread
  (``Cpus_allowed_list`` of every thread, from the processes source), not from the cgroup: a process that pins itself
  late (``sched_setaffinity``, ``numactl`` inside the container) leaves the threads it started earlier on their old
  CPUs (NVIDIA/TensorRT-LLM#18117), and a cpuset that is right says nothing about that.
- ``gpu_process_memlock``: a GPU process's RLIMIT_MEMLOCK is not unlimited, so pinned host buffers (cudaHostAlloc,
  NCCL, RDMA registrations) are capped or fall back to pageable copies.
- ``gpu_holder_mismatch``: NVML's processes on a GPU belong to a container the device plugin did not give it to (a
  privileged pod or ``NVIDIA_VISIBLE_DEVICES=all`` bypassing the plugin, or a stale assignment).

Who a process is comes from its cgroup (nvml source) joined with the workloads (workloads.py); the GPU's NUMA node
from the sysfs inventory (ground truth), else from NVML's memory affinity.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from numawatch import telemetry
from numawatch.checks.check import Check, Finding, NotEvaluated, require
from numawatch.cpuset import CPUSet, format_cpulist
from numawatch.gpuholders import Holder, gpu_label, holder_of, holders_by_container
from numawatch.host import Host
from numawatch.hosttext import k8s_label_shown, pod_uid_shown
from numawatch.inputs import GPU_TELEMETRY, PROCESSES, WORKLOADS
from numawatch.intent import Intent
from numawatch.model.gpu import GpuHolders, GpuInventory, GpuProcess, HolderProcess, NvmlGpu, NvmlSnapshot
from numawatch.model.kubelet import KubeletState
from numawatch.model.topology import Topology
from numawatch.workloads import Workload

REMOTE_REMEDIATION = (
    "pin the whole process to its GPU's NUMA node before it starts threads: give the container exclusive CPUs on "
    "that node (Guaranteed QoS, integer CPUs, topology-manager-policy=single-numa-node), or start it under "
    "numactl --cpunodebind=<node> --membind=<node> instead of calling sched_setaffinity late (vLLM --numa-bind)"
)
MEMLOCK_REMEDIATION = (
    "raise the locked-memory limit to unlimited for the container: the runtime's default ulimit (containerd "
    "LimitMEMLOCK=infinity in its systemd unit, or default_ulimits memlock=-1:-1 in CRI-O's crio.conf), then "
    "restart the pod"
)
MISMATCH_REMEDIATION = (
    "find how the container reaches a GPU it was not assigned (a privileged pod, NVIDIA_VISIBLE_DEVICES=all, a host "
    "path to /dev/nvidia*) and remove it; request GPUs only through the device plugin resource"
)


def gpu_numa_node(host: Host, gpu: NvmlGpu) -> int | None:
    """The GPU's NUMA node: sysfs's (the kernel's ground truth) when it knows, else NVML's memory affinity."""
    inventory = host.gpus
    if inventory is not None:
        device = inventory.by_uuid(gpu.uuid) if gpu.uuid else None
        if device is None and gpu.pci_address:
            device = next((d for d in inventory.gpus if d.pci_address == gpu.pci_address), None)
        if device is not None and device.numa_node is not None:
            return device.numa_node
    return gpu.numa_node


def require_telemetry(host: Host) -> NvmlSnapshot:
    """Every vendor's GPU telemetry (telemetry.py), or NotEvaluated naming the sources that are down and why."""
    found = telemetry.of_host(host)
    if found is None:
        down = telemetry.unknown_because({name: host.get(name) for name in telemetry.SOURCES}, host.down_reason)
        raise NotEvaluated("; ".join(f"needs the {name} source: {host.down_reason(name)}" for name in down))
    return found


def _gpus_with_processes(nvml: NvmlSnapshot) -> Iterator[tuple[NvmlGpu, tuple[GpuProcess, ...]]]:
    for gpu in nvml.gpus:
        if gpu.up and gpu.processes:
            yield gpu, gpu.processes


# --------------------------------------------------------------------------------------------- gpu_process_remote
@dataclass
class _Stray:
    pids: set[int] = field(default_factory=set)
    threads: int = 0
    total: int = 0
    cpus: set[int] = field(default_factory=set)


def check_gpu_process_remote(host: Host, intent: Intent) -> Iterator[Finding]:
    nvml = require_telemetry(host)
    holders: GpuHolders = require(host, "processes")
    topology: Topology = require(host, "topology")
    if len(topology.nodes) < 2:
        return  # one NUMA node: every CPU is local to every GPU
    # A process on GPUs of several nodes (one process driving GPUs on both sockets) may use the CPUs of all of them.
    nodes_of: dict[int, set[int]] = {}
    gpus_of: dict[int, list[NvmlGpu]] = {}
    for gpu, processes in _gpus_with_processes(nvml):
        node = gpu_numa_node(host, gpu)
        if node is None or node not in topology.nodes:
            continue  # gpu_numa_unknown says so
        for listed in processes:
            nodes_of.setdefault(listed.pid, set()).add(node)
            gpus_of.setdefault(listed.pid, []).append(gpu)
    workloads = holders_by_container(host, intent)
    stray: dict[tuple[str, str | None], tuple[NvmlGpu, Holder, _Stray]] = {}
    for pid, nodes in sorted(nodes_of.items()):
        process = holders.processes.get(pid)
        if process is None or not process.cpus_allowed:
            continue  # exited, or its threads could not be read
        local: CPUSet = frozenset().union(*(topology.nodes[node].cpus for node in nodes))
        outside = _outside(process, local, topology.online)
        if outside is None:
            continue
        threads, cpus = outside
        pod_uid = _pod_uid_of(nvml, pid)
        holder = holder_of(process.container_id, pod_uid, workloads, process.comm)
        for gpu in gpus_of[pid]:
            key = (gpu_label(gpu), process.container_id or f"pid:{pid}")
            entry = stray.setdefault(key, (gpu, holder, _Stray()))[2]
            entry.pids.add(pid)
            entry.threads += threads
            entry.total += process.threads_read
            entry.cpus |= cpus
    for (label, _), (gpu, holder, entry) in sorted(stray.items(), key=lambda item: item[0]):
        node = gpu_numa_node(host, gpu)
        pids = ", ".join(str(pid) for pid in sorted(entry.pids))
        yield GPU_PROCESS_REMOTE.finding(
            intent,
            {
                **holder.labels,
                "gpu": label,
                "uuid": gpu.uuid or "",
                "numa_node": str(node),
                "cpus": format_cpulist(entry.cpus),
            },
            f"{entry.threads} of {entry.total} threads of {holder.display} (PID {pids}), which uses GPU {label} on "
            f"NUMA node {node}, may run on CPUs {format_cpulist(entry.cpus)} of another node: its GPU work is "
            "launched across the inter-socket link (threads started before a late pinning keep their old CPUs)",
        )


def _outside(process: HolderProcess, local: CPUSet, online: CPUSet) -> tuple[int, set[int]] | None:
    """(threads allowed outside ``local``, those CPUs) or None when every thread stays on ``local``."""
    threads = 0
    cpus: set[int] = set()
    for allowed, count in process.cpus_allowed.items():
        # Offline CPUs in an affinity mask cannot run anything; only online ones count.
        beyond = (allowed & online) - local
        if beyond:
            threads += count
            cpus |= beyond
    return (threads, cpus) if threads else None


def _pod_uid_of(nvml: NvmlSnapshot, pid: int) -> str | None:
    for gpu in nvml.gpus:
        for process in gpu.processes or ():
            if process.pid == pid:
                return process.pod_uid
    return None


# --------------------------------------------------------------------------------------------- gpu_process_memlock
def check_gpu_process_memlock(host: Host, intent: Intent) -> Iterator[Finding]:
    nvml = require_telemetry(host)
    holders: GpuHolders = require(host, "processes")
    workloads = holders_by_container(host, intent)
    limited: dict[str, tuple[Holder, list[HolderProcess]]] = {}
    known = 0
    for pid in sorted(holders.nvml_pids):
        process = holders.processes.get(pid)
        if process is None or process.memlock is None:
            continue
        known += 1
        if process.memlock.unlimited:
            continue
        holder = holder_of(process.container_id, _pod_uid_of(nvml, pid), workloads, process.comm)
        key = process.container_id or f"pid:{pid}"
        limited.setdefault(key, (holder, []))[1].append(process)
    if holders.nvml_pids and not known:
        raise NotEvaluated("the locked-memory limit (/proc/<pid>/limits) of no GPU process could be read")
    for _, (holder, processes) in sorted(limited.items()):
        lowest = min(process.memlock.soft or 0 for process in processes if process.memlock is not None)
        pids = ", ".join(str(process.pid) for process in processes)
        yield GPU_PROCESS_MEMLOCK.finding(
            intent,
            {**holder.labels, "value": str(lowest), "expected": "unlimited"},
            f"GPU process {pids} of {holder.display} may lock only {_size(lowest)} of memory (RLIMIT_MEMLOCK "
            "soft limit): pinned host buffers for GPU copies, NCCL and RDMA are capped or fall back to pageable "
            "memory",
        )


def _size(value: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale} {unit}"
    return f"{value} bytes"


# --------------------------------------------------------------------------------------------- gpu_holder_mismatch
def _assignments(
    state: KubeletState, intent: Intent, inventory: GpuInventory | None = None
) -> tuple[dict[str, set[tuple[str, str]]], set[tuple[str, str]]]:
    """Device ID, and the PCI address of the accelerator it names (GpuInventory.for_device_id: AMD's plugin names
    devices by PCI address, NVIDIA's and Habana's by UUID or serial) -> (pod UID, container) the device plugin
    assigned it to; and the containers holding MIG devices."""
    assigned: dict[str, set[tuple[str, str]]] = {}
    mig: set[tuple[str, str]] = set()
    if state.devices is None:
        return assigned, mig
    for entry in state.devices.entries:
        if not intent.is_gpu_resource(entry.resource_name) and not entry.resource_name.startswith("nvidia.com/"):
            continue
        owner = (entry.pod_uid, entry.container_name)
        for device_ids in entry.devices_per_numa.values():
            for device_id in device_ids:
                uuid = device_id.split("::", 1)[0]  # time-sliced replicas: GPU-<uuid>::<n>
                if uuid.startswith("MIG-"):
                    mig.add(owner)
                assigned.setdefault(uuid, set()).add(owner)
                device = inventory.for_device_id(device_id) if inventory is not None else None
                if device is not None and device.pci_address != uuid:
                    assigned.setdefault(device.pci_address, set()).add(owner)
    return assigned, mig


def _owner_text(host: Host, owners: Iterable[tuple[str, str]], workloads: Mapping[str, Workload]) -> str:
    by_name = {(w.pod_uid, w.container_name): w.display for w in workloads.values()}
    names = host.names
    shown = []
    for pod_uid, container in sorted(owners):
        display = by_name.get((pod_uid, container))
        if display is None:
            pod = names.pods.get(pod_uid) if names is not None else None
            # The device checkpoint's names, decoded as the kubelet decodes them: repeated only in their grammar.
            owner = k8s_label_shown(container)
            display = (f"{pod.namespace}/{pod.name}/{owner}" if pod is not None
                       else f"?/{pod_uid_shown(pod_uid)}/{owner}")
        shown.append(display)
    return ", ".join(shown) if shown else "none"


def check_gpu_holder_mismatch(host: Host, intent: Intent) -> Iterator[Finding]:
    nvml = require_telemetry(host)
    state: KubeletState = require(host, "kubelet_state")
    if state.devices is None:
        raise NotEvaluated("the kubelet has no readable device-plugin checkpoint (kubelet_internal_checkpoint)")
    assigned, mig = _assignments(state, intent, telemetry.inventory_of(host))
    workloads = holders_by_container(host, intent)
    for gpu, processes in _gpus_with_processes(nvml):
        if gpu.uuid is None:
            continue
        label = gpu_label(gpu)
        gpu_owners = assigned.get(gpu.uuid, set()) | assigned.get(gpu.pci_address or "", set())
        # Per container and MIG device: a process on a MIG device (NVML's MIG handles) is the holder of that slice,
        # which the plugin assigns by its MIG UUID; one on the whole GPU is the GPU's holder.
        by_container: dict[tuple[str | None, str | None], list[GpuProcess]] = {}
        for process in processes:
            if process.cgroup_path is None:
                continue  # exited before we could see where it lived
            by_container.setdefault((process.container_id, process.mig_uuid), []).append(process)
        for (container_id, slice_uuid), members in sorted(
            by_container.items(), key=lambda item: (item[0][0] or "", item[0][1] or "")
        ):
            owners = assigned.get(slice_uuid, set()) if slice_uuid is not None else gpu_owners
            expected = _owner_text(host, owners, workloads)
            uuid = slice_uuid or gpu.uuid
            what = f"MIG device {slice_uuid} of GPU {label}" if slice_uuid else f"GPU {label} ({gpu.uuid})"
            pids = ", ".join(str(process.pid) for process in members)
            if container_id is None:
                if not owners:
                    continue  # a host process on a GPU Kubernetes does not hand out: outside numawatch's remit
                yield GPU_HOLDER_MISMATCH.finding(
                    intent,
                    {"gpu": label, "uuid": uuid, "reason": "host_process", "expected": expected},
                    f"{what} is used by host process {pids}, outside any container, but the device plugin assigned "
                    f"it to {expected}",
                )
                continue
            holder = holder_of(container_id, members[0].pod_uid, workloads)
            if slice_uuid is None and (holder.pod_uid, holder.container_name) in mig:
                continue  # a MIG holder NVML did not place on a slice: not comparable with the parent GPU's UUID
            if holder.container_name is not None:
                matches = (holder.pod_uid, holder.container_name) in owners
            else:  # the container's name is unknown: the pod must at least be the one assigned
                matches = any(pod_uid == holder.pod_uid for pod_uid, _ in owners)
            if matches:
                continue
            reason = "other_container" if owners else "unassigned"
            yield GPU_HOLDER_MISMATCH.finding(
                intent,
                {**holder.labels, "gpu": label, "uuid": uuid, "reason": reason, "expected": expected},
                f"{what} is used by {holder.display} (PID {pids}) but the device plugin assigned it to {expected}: "
                "the GPU is shared outside the kubelet's accounting",
            )


# --------------------------------------------------------------------------------------------- registry
GPU_PROCESS_REMOTE = Check(
    id="gpu_process_remote",
    severity="warning",
    summary="Threads of a process using a GPU may run on CPUs outside the GPU's NUMA node.",
    remediation=REMOTE_REMEDIATION,
    run=check_gpu_process_remote,
    inputs=(WORKLOADS, PROCESSES, GPU_TELEMETRY),
    knob="h2",
)
GPU_PROCESS_MEMLOCK = Check(
    id="gpu_process_memlock",
    severity="warning",
    summary="A process using a GPU has a locked-memory limit (RLIMIT_MEMLOCK) that is not unlimited.",
    remediation=MEMLOCK_REMEDIATION,
    run=check_gpu_process_memlock,
    inputs=(WORKLOADS, PROCESSES, GPU_TELEMETRY),
    knob="h10",
)
GPU_HOLDER_MISMATCH = Check(
    id="gpu_holder_mismatch",
    severity="critical",
    summary="A GPU is used by a container the device plugin did not assign it to.",
    remediation=MISMATCH_REMEDIATION,
    run=check_gpu_holder_mismatch,
    inputs=(WORKLOADS, GPU_TELEMETRY),
    knob="7",
)

CHECKS: tuple[Check, ...] = (GPU_PROCESS_REMOTE, GPU_PROCESS_MEMLOCK, GPU_HOLDER_MISMATCH)
