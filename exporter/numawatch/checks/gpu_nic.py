"""The PCIe path between each GPU and the RDMA NICs (knob h1: the map ``nvidia-smi topo -m`` shows before pinning).

GPUDirect RDMA moves data between a GPU and a NIC without the host's memory; it is fast when the two sit under one
PCIe switch and loses much of its advantage through the host bridge, and half of it across the inter-socket link
("un GPUDirect RDMA con la NIC bajo el otro socket pierde la mitad de su ventaja"). The levels are nvidia-smi's,
computed from the PCI hierarchy in sysfs (sources/pci_topology.py):

- ``PIX``: the paths meet at one bridge, at most one more on each side (the two downstream ports of one switch);
- ``PXB``: they meet at a bridge further up (several switches), without the host bridge;
- ``PHB``: they meet at the host bridge (two root ports of one root complex);
- ``NODE``: different host bridges of one NUMA node;
- ``SYS``: different NUMA nodes (the inter-socket link: UPI, Infinity Fabric).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from numawatch.checks.check import Check, Finding, NotApplicable, NotEvaluated
from numawatch.checks.kubelet import require
from numawatch.host import Host
from numawatch.intent import PCI_PATH_LEVELS, Intent
from numawatch.model.gpu import GpuDevice, GpuInventory
from numawatch.model.pci import PciFunction, PciTopology, RdmaNic
from numawatch.model.topology import Topology


def pcie_level(
    a: PciFunction, b: PciFunction, node_a: int | None, node_b: int | None, one_node: bool
) -> str | None:
    """nvidia-smi's level of the path between two PCI functions; None when it depends on a NUMA node nobody knows."""
    if a.root != b.root:
        if one_node:
            return "NODE"
        if node_a is None or node_b is None:
            return None
        return "NODE" if node_a == node_b else "SYS"
    common = 0
    for mine, theirs in zip(a.parents, b.parents, strict=False):
        if mine != theirs:
            break
        common += 1
    if common == 0:
        return "PHB"
    if len(a.parents) - common <= 1 and len(b.parents) - common <= 1:
        return "PIX"
    return "PXB"


def rank(level: str) -> int:
    return PCI_PATH_LEVELS.index(level)


@dataclass(frozen=True)
class GpuPaths:
    """One GPU's paths to every judged NIC (level None: unknown), best first."""

    gpu: GpuDevice
    paths: tuple[tuple[RdmaNic, str | None], ...]

    @property
    def best(self) -> str | None:
        known = [level for _, level in self.paths if level is not None]
        return min(known, key=rank) if known else None

    def nearest(self) -> list[RdmaNic]:
        best = self.best
        return [nic for nic, level in self.paths if level == best]


def judged_nics(pci: PciTopology) -> tuple[RdmaNic, ...]:
    """The physical NICs (a virtual function shares its physical function's path); the VFs when there is no PF."""
    physical = tuple(nic for nic in pci.nics if not nic.virtual)
    return physical or pci.nics


def gpu_nic_paths(host: Host) -> tuple[GpuPaths, ...] | None:
    """Every GPU of the sysfs inventory with its paths to the judged NICs; None without both sources. Computed once
    per Host (the check and the metrics share it)."""
    inventory: GpuInventory | None = host.gpus
    pci: PciTopology | None = host.pci_topology
    if inventory is None or pci is None:
        return None
    topology: Topology | None = host.topology
    one_node = topology is not None and len(topology.nodes) <= 1

    def compute() -> tuple[GpuPaths, ...]:
        nics = judged_nics(pci)
        found = []
        for gpu in inventory.gpus:
            function = pci.functions.get(gpu.pci_address)
            rows: list[tuple[RdmaNic, str | None]] = []
            for nic in nics:
                other = pci.functions.get(nic.address)
                if function is None or other is None:
                    rows.append((nic, None))
                    continue
                rows.append((nic, pcie_level(function, other, gpu.numa_node, nic.numa_node, one_node)))
            rows.sort(key=lambda row: (rank(row[1]) if row[1] is not None else len(PCI_PATH_LEVELS), row[0].address))
            found.append(GpuPaths(gpu, tuple(rows)))
        return tuple(found)

    return host.memo("gpu_nic_paths", compute)  # of this Host's gpus_sysfs, pci_topology and topology readings


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
    knob="h1",
)

CHECKS: tuple[Check, ...] = (GPU_NIC_PATH,)
