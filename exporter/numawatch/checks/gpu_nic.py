"""The PCIe path between each GPU and the RDMA NICs (knob h1: the map ``nvidia-smi topo -m`` shows before pinning).

GPUDirect RDMA moves data between a GPU and a NIC without the host's memory; it is fast when the two sit under one
PCIe switch and loses much of its advantage through the host bridge, and half of it across the inter-socket link
("un GPUDirect RDMA con la NIC bajo el otro socket pierde la mitad de su ventaja"). The levels are nvidia-smi's
(PIX, PXB, PHB, NODE, SYS), worked out in gpupaths.py.
"""

from __future__ import annotations

from collections.abc import Iterator

from numawatch.checks.check import Check, Finding, NotApplicable, NotEvaluated
from numawatch.checks.kubelet import require
from numawatch.gpupaths import GpuPaths, gpu_nic_paths, rank
from numawatch.host import Host
from numawatch.inputs import GPUS, PCI_TOPOLOGY, TOPOLOGY
from numawatch.intent import Intent
from numawatch.model.gpu import GpuInventory
from numawatch.model.pci import PciTopology, RdmaNic


def _nic(nic: RdmaNic) -> str:
    return f"{nic.address} ({', '.join(nic.rdma_devices)})" if nic.rdma_devices else nic.address


def check_gpu_nic_path(host: Host, intent: Intent) -> Iterator[Finding]:
    inventory: GpuInventory = require(host, "gpus_sysfs")
    pci: PciTopology = require(host, "pci_topology")
    if not inventory.gpus:
        raise NotApplicable("no GPU on the PCI bus")
    if not pci.nics:
        raise NotApplicable(
            "no RDMA-capable NIC (no PCI function of class 0x0207 and no device under sys/class/infiniband)"
        )
    found = gpu_nic_paths(host) or ()
    limit = intent.gpus.max_nic_path_level
    # Some GPU of this node reaches a NIC within the limit: the platform does place NICs next to GPUs, so a GPU that
    # does not has a NIC missing, down or in the wrong slot.
    achievable = any(paths.best is not None and rank(paths.best) <= rank(limit) for paths in found)
    unknown = []
    findings = []
    for paths in found:
        best = paths.best
        if best is None:
            unknown.append(paths.gpu.pci_address)
            continue
        if rank(best) <= rank(limit):
            continue
        if best == "SYS":
            reason = "no_nic_on_socket"
        elif achievable:
            reason = "better_placed_elsewhere"
        else:
            continue
        findings.append(_finding(intent, paths, best, limit, reason))
    if not findings and unknown:
        raise NotEvaluated(
            f"the PCIe path of GPUs {', '.join(unknown)} to the RDMA NICs is unknown: a GPU or NIC is not in the PCI "
            "hierarchy (see the pci_topology source), or the NUMA node of one is unknown on a multi-node host"
        )
    yield from findings


def _finding(intent: Intent, paths: GpuPaths, best: str, limit: str, reason: str) -> Finding:
    gpu = paths.gpu
    nearest = ", ".join(_nic(nic) for nic in paths.nearest())
    name = f"GPU {gpu.pci_address}" + (f" ({gpu.uuid})" if gpu.uuid else "")
    if reason == "no_nic_on_socket":
        why = (
            "no RDMA NIC is on its NUMA node: every GPUDirect RDMA transfer crosses the inter-socket link, which "
            "costs about half of its bandwidth advantage"
        )
    else:
        why = (
            f"other GPUs of this node reach a NIC at {limit} or better, so this GPU's NIC is missing, down or in a "
            "slot away from it: its GPUDirect RDMA traffic goes through the host bridge"
        )
    message = f"{name} reaches its nearest RDMA NIC {nearest} only at {best} (intent: {limit} or better): {why}"
    remediation = (
        "check the NIC next to this GPU is present and its RDMA device up (ibv_devinfo, rdma link), and that it sits "
        "in a slot under the GPU's PCIe switch (nvidia-smi topo -m shows PIX/PXB); until then point NCCL at the "
        "nearest NIC (NCCL_IB_HCA) and keep the GPU's process on the NIC's NUMA node"
    )
    return GPU_NIC_PATH.finding(
        intent,
        {"gpu": gpu.pci_address, "uuid": gpu.uuid or "", "value": best, "expected": limit, "reason": reason},
        message,
        remediation,
    )


GPU_NIC_PATH = Check(
    id="gpu_nic_path",
    severity="warning",
    summary="A GPU's PCIe path to its nearest RDMA NIC is worse than the intent's level (PXB) where it can be better.",
    remediation="put an RDMA NIC under the GPU's PCIe switch (nvidia-smi topo -m: PIX or PXB), or on its socket",
    run=check_gpu_nic_path,
    inputs=(GPUS, PCI_TOPOLOGY, TOPOLOGY),
    knob="h1",
)

CHECKS: tuple[Check, ...] = (GPU_NIC_PATH,)
