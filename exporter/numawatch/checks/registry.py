"""Every check numawatch knows, in the order docs/checks.md lists them."""

from __future__ import annotations

from numawatch.checks import gpu_process, gpus, host, kubelet, kubelet_live, pinning, platform
from numawatch.checks.check import Check

CHECKS: tuple[Check, ...] = (
    *kubelet.CHECKS,
    *kubelet_live.CHECKS,
    *pinning.CHECKS,
    *gpus.CHECKS,
    *host.CHECKS,
    *gpu_process.CHECKS,
    *platform.CHECKS,
)
