"""The PCIe path between each GPU and the RDMA NICs, at nvidia-smi's levels (``nvidia-smi topo -m``), computed from
the PCI hierarchy in sysfs (sources/pci_topology.py); the gpu_nic_path check (checks/gpu_nic.py) judges it and the
GPU-NIC path metric exports it. The levels, best first:

- ``PIX``: the paths meet at one bridge, at most one more on each side (the two downstream ports of one switch);
- ``PXB``: they meet at a bridge further up (several switches), without the host bridge;
- ``PHB``: they meet at the host bridge (two root ports of one root complex);
- ``NODE``: different host bridges of one NUMA node;
- ``SYS``: different NUMA nodes (the inter-socket link: UPI, Infinity Fabric).
"""

from __future__ import annotations

from dataclasses import dataclass

from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.inputs import GPUS, PCI_TOPOLOGY, TOPOLOGY
from numawatch.intent import PCI_PATH_LEVELS
from numawatch.model.gpu import GpuDevice, GpuInventory
from numawatch.model.pci import PciFunction, PciTopology, RdmaNic
from numawatch.model.topology import Topology


def pcie_level(a: PciFunction, b: PciFunction, node_a: int | None, node_b: int | None, one_node: bool) -> str | None:
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


@derivation("gpupaths.gpu_nic_paths", inputs=(GPUS, PCI_TOPOLOGY, TOPOLOGY))
def gpu_nic_paths(host: Host) -> tuple[GpuPaths, ...] | None:
    """Every GPU of the sysfs inventory with its paths to the judged NICs; None without both sources (the check and
    the metrics share it)."""
    inventory: GpuInventory | None = host.gpus
    pci: PciTopology | None = host.pci_topology
    if inventory is None or pci is None:
        return None
    topology: Topology | None = host.topology
    one_node = topology is not None and len(topology.nodes) <= 1
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

