"""Sources: one module per host subsystem. Each reads files into a frozen snapshot and makes no judgement.

The registry is an explicit tuple so the set of sources and the order they are reported in are visible in one
place; a source that ``needs`` another is read after it (``host.dependency_order``, checked here at import: two
sources that need each other are an error before anything is read).
"""

from __future__ import annotations

from numawatch.source import SourceSpec, dependency_order
from numawatch.sources import (
    amdsmi,
    cgroups,
    cpuidle,
    gpus_sysfs,
    hlml,
    interrupts,
    irqbalance,
    irqs,
    kernel,
    kubelet_config,
    kubelet_state,
    kubernetes_api,
    names,
    numastat,
    nvml,
    own_pod,
    pci_topology,
    pod_resources,
    pod_usage,
    processes,
    topology,
)

SOURCES: tuple[SourceSpec, ...] = (
    topology.SOURCE,
    cgroups.SOURCE,
    names.SOURCE,
    kubelet_config.SOURCE,
    kubelet_state.SOURCE,
    # the live kubelet's pod-resources API: first source of assignments, the checkpoints its fallback
    pod_resources.SOURCE,
    gpus_sysfs.SOURCE,
    # host layer
    kernel.SOURCE,
    numastat.SOURCE,
    numastat.INTERSOCKET,
    interrupts.SOURCE,
    irqs.SOURCE,
    irqbalance.SOURCE,
    # GPUs: read through the HostReader's NVML session (HostReader(paths, nvml=session)); down without one
    nvml.SOURCE,
    # the other vendors' libraries: up with no GPUs where sysfs lists none of their accelerators
    amdsmi.SOURCE,
    hlml.SOURCE,
    processes.SOURCE,
    # the platform around pinned CPUs and GPUs
    cpuidle.SOURCE,
    pci_topology.SOURCE,
    pod_usage.SOURCE,
    # the node's own objects: the API where numawatch has access, and the pod numawatch runs in
    kubernetes_api.SOURCE,
    own_pod.SOURCE,
)

dependency_order(SOURCES)
