"""The typed, frozen snapshot of a host that sources produce and checks judge, one module per domain.

Sources turn files into these types and make no judgement; checks read them and never touch files. Fields that a
source could not determine are ``None`` (unknown), never a made-up default, so a check can tell "unknown" from
"empty". Sets of CPUs and NUMA nodes are ``frozenset[int]`` (see cpuset.py).

- ``topology``: CPUs, NUMA nodes and the kernel's isolation parameters;
- ``workloads``: pods and containers (cgroups, runtime names, QoS, usage);
- ``kubelet``: the kubelet's configuration, registration and managers' checkpoints;
- ``kernel``: kernel settings and counters (sysctls, THP, huge pages, NUMA traffic, idle states);
- ``interrupts``: /proc/interrupts, IRQ affinities, irqbalance;
- ``pci``: the PCI hierarchy and RDMA NICs;
- ``gpu``: the GPU inventory, NVML readings and the GPU holders;
- ``cluster``: the node's own objects from the Kubernetes API, and the pod numawatch runs in.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType


def frozen_map(items: Mapping | None = None) -> Mapping:
    """An immutable mapping, so a snapshot cannot be changed after a source built it."""
    return MappingProxyType(dict(items or {}))
