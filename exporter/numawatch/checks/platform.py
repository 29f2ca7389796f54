"""The checks of the platform around pinned CPUs and GPUs: deep C-states on pinned CPUs (cpuidle), the
PCIe path from each GPU to the RDMA NICs (gpu_nic), NVLink peering of a container's GPUs (gpu_peers), the node's
taints, labels and foreign pods (node_isolation), and the CPU reservation stated twice (kubelet_reserved)."""

from __future__ import annotations

from numawatch.checks import cpuidle, gpu_nic, gpu_peers, kubelet_reserved, node_isolation
from numawatch.checks.check import Check

CHECKS: tuple[Check, ...] = (
    *kubelet_reserved.CHECKS,
    *node_isolation.CHECKS,
    *gpu_nic.CHECKS,
    *gpu_peers.CHECKS,
    *cpuidle.CHECKS,
)
