"""Host-layer checks: the firmware's NUMA map (numa_topology), kernel tuning drift (host_kernel) and interrupts on
protected CPUs (host_irq)."""

from __future__ import annotations

from numawatch.checks import host_irq, host_kernel, numa_topology
from numawatch.checks.check import Check

CHECKS: tuple[Check, ...] = (*numa_topology.CHECKS, *host_kernel.CHECKS, *host_irq.CHECKS)
