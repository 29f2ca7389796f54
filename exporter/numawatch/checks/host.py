"""Host-layer checks (issue 3): kernel tuning drift (host_kernel) and interrupts on protected CPUs (host_irq)."""

from __future__ import annotations

from numawatch.checks import Check, host_irq, host_kernel

CHECKS: tuple[Check, ...] = (*host_kernel.CHECKS, *host_irq.CHECKS)
