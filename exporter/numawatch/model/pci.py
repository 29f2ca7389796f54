"""The PCI hierarchy and RDMA NICs (sources/pci_topology.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


# --------------------------------------------------------------------------------------------------- PCI
@dataclass(frozen=True)
class PciFunction:
    """One PCI function and where it hangs in the PCI hierarchy (the resolved ``sys/bus/pci/devices`` link)."""

    address: str  # "0000:18:00.0"
    root: str  # the host bridge (root complex) it is under, as sysfs names its directory: "pci0000:17"
    # The PCI functions between the host bridge and this one, from the top down: root ports, switch ports, bridges.
    parents: tuple[str, ...]
    class_code: int | None  # 24 bits (0x020700 InfiniBand); None when ``class`` could not be read


@dataclass(frozen=True)
class RdmaNic:
    """A NIC that can do RDMA: PCI class 0x0207 (InfiniBand), or a function with an RDMA device under
    ``sys/class/infiniband`` (an Ethernet NIC with RoCE, an InfiniBand HCA with its driver)."""

    address: str
    rdma_devices: tuple[str, ...]  # names under sys/class/infiniband ("mlx5_0"); empty without a driver
    numa_node: int | None  # sysfs numa_node; None for -1 or unreadable
    virtual: bool = False  # an SR-IOV virtual function (it has a ``physfn`` link): on its physical function's path


@dataclass(frozen=True)
class PciTopology:
    functions: Mapping[str, PciFunction]  # by address, every function sys/bus/pci/devices lists
    nics: tuple[RdmaNic, ...] = ()
    problems: tuple[str, ...] = ()  # functions that could not be placed, or whose files are malformed
