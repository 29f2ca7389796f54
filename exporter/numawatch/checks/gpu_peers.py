"""Whether the GPUs one container holds talk over NVLink (post 1 of the seed's series, and "con el interconnect").

A tensor-parallel pod (TP=2, TP=4) exchanges activations between its GPUs on every layer: over NVLink or NVSwitch
that is hundreds of GB/s, over PCIe through the host bridge a fraction of it. The Topology Manager keeps the GPUs
on one NUMA node; it knows nothing of NVLink, and neither does the PCI hierarchy, so this check needs NVML
(``nvlink_peers`` of the nvml source: nvmlDeviceGetP2PStatus with the NVLink index, else the GPUs' active links).
"""

from __future__ import annotations

from collections.abc import Iterator

from numawatch.checks.check import Check, Finding, NotApplicable, NotEvaluated
from numawatch.checks.kubelet import require
from numawatch.checks.pinning import workloads
from numawatch.host import Host
from numawatch.inputs import WORKLOADS
from numawatch.intent import Intent
from numawatch.model.gpu import NvmlGpu, NvmlSnapshot
from numawatch.model.kubelet import KubeletState
from numawatch.workloads import GpuAssignment, Workload


def physical_gpus(workload: Workload) -> tuple[GpuAssignment, ...]:
    """The whole GPUs a container holds, once each: time-sliced replicas (``GPU-…::N``) of one GPU are one GPU, and
    MIG instances are left out (no peer-to-peer between MIG instances)."""
    seen: dict[str, GpuAssignment] = {}
    for gpu in workload.gpus:
        uuid = gpu.uuid
        if uuid is None or not uuid.startswith("GPU-"):
            continue
        seen.setdefault(uuid, gpu)
    return tuple(seen[uuid] for uuid in sorted(seen))


def check_container_gpus_not_peered(host: Host, intent: Intent) -> Iterator[Finding]:
    found = workloads(host, intent)
    state: KubeletState = require(host, "kubelet_state")
    if state.devices is None:
        raise NotEvaluated("the kubelet has no readable device-plugin checkpoint, so GPU assignments are unknown")
    # Most containers hold no GPU, and one holding fewer than two devices holds fewer than two whole GPUs.
    holders = [
        (workload, gpus) for workload in found if len(workload.gpus) >= 2 and len(gpus := physical_gpus(workload)) >= 2
    ]
    if not holders:
        raise NotApplicable("no container holds two or more GPUs")
    nvml: NvmlSnapshot = require(host, "nvml")
    unknown: list[str] = []
    findings = []
    for workload, gpus in holders:
        known: dict[str | None, NvmlGpu | None] = {gpu.uuid: nvml.by_uuid(gpu.uuid) for gpu in gpus if gpu.uuid}
        if any(g is None or g.nvlink_peers is None for g in known.values()):
            unknown.append(workload.display)
            continue
        pairs = []
        for position, first in enumerate(gpus):
            for second in gpus[position + 1 :]:
                one = known[first.uuid]
                assert one is not None and one.nvlink_peers is not None and second.uuid is not None
                if second.uuid not in one.nvlink_peers:
                    pairs.append((first, second, one))
        if pairs:
            findings.append(_finding(intent, workload, gpus, pairs))
    if not findings and unknown:
        raise NotEvaluated(
            f"NVML does not say whether the GPUs of {', '.join(unknown[:3])} are NVLink peers (a GPU NVML does not "
            "list, or its NVLink calls failed: see the nvml source)"
        )
    yield from findings


def _finding(
    intent: Intent,
    workload: Workload,
    gpus: tuple[GpuAssignment, ...],
    pairs: list[tuple[GpuAssignment, GpuAssignment, NvmlGpu]],
) -> Finding:
    described = []
    for first, second, nvml_gpu in pairs:
        path = nvml_gpu.pcie_paths.get(second.uuid or "")
        described.append(f"{first.label} and {second.label}" + (f" (PCIe {path})" if path else ""))
    links = {gpu.nvlink_links for _, _, gpu in pairs}
    no_nvlink = links == {0}
    message = (
        f"container {workload.display} holds {len(gpus)} GPUs, but "
        + "; ".join(described)
        + " are not NVLink peers: "
        + ("these GPUs have no NVLink at all, so " if no_nvlink else "")
        + "their tensor-parallel traffic goes over PCIe, a fraction of NVLink's bandwidth, on every layer"
    )
    remediation = (
        "give the pod GPUs that share an NVLink domain: on a baseboard where only some GPUs are bridged (NVLink "
        "bridges in pairs), schedule by that topology (the device plugin's NVLink-aware allocation, DRA, or one "
        "GPU per pod); check nvidia-smi topo -m and nvidia-smi nvlink -s for links that are down"
    )
    return CONTAINER_GPUS_NOT_PEERED.finding(
        intent,
        {**workload.labels, "gpu": ",".join(gpu.label for gpu in gpus)},
        message,
        remediation,
    )


CONTAINER_GPUS_NOT_PEERED = Check(
    id="container_gpus_not_peered",
    severity="warning",
    summary="A container holds two or more GPUs that are not NVLink or NVSwitch peers (needs NVML).",
    remediation="give the pod GPUs of one NVLink domain (nvidia-smi topo -m: NV# between them)",
    run=check_container_gpus_not_peered,
    inputs=(WORKLOADS,),
    knob="h1",
)

CHECKS: tuple[Check, ...] = (CONTAINER_GPUS_NOT_PEERED,)
