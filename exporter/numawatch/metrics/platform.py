"""Metric families of the platform around pinned CPUs and GPUs: idle states, GPU-NIC paths, NVLink.

Cardinality: the idle-state family has one series per group of CPUs with the same role and deepest idle state (a
handful), never one per CPU; the path family one per GPU and physical RDMA NIC (64 on an 8-GPU, 8-NIC node); the
NVLink family one per GPU.
"""

from __future__ import annotations

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from numawatch.checks import Evaluation
from numawatch.collectors import Collectors, builds
from numawatch.cpuset import format_cpulist
from numawatch.gpupaths import gpu_nic_paths
from numawatch.idlestates import allowed_states
from numawatch.inputs import CPUIDLE, CPUIDLE_SETTINGS, GPUS, KUBELET_STATE, NVML, PCI_TOPOLOGY, TOPOLOGY, exposes
from numawatch.metrics.core import built, host_only
from numawatch.model.gpu import NvmlSnapshot
from numawatch.model.kernel import CpuIdle
from numawatch.model.kubelet import exclusive_cpus

ROLE_EXCLUSIVE = "exclusive"  # held exclusively by a pinned container (cpu_manager_state)
ROLE_ISOLATED = "isolated"  # isolcpus, not held by a container
ROLE_HOUSEKEEPING = "housekeeping"  # the rest


@exposes("numawatch_cpuidle_exit_latency_max_seconds", inputs=(CPUIDLE, CPUIDLE_SETTINGS, KUBELET_STATE, TOPOLOGY))
@host_only
def cpuidle_latency(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_cpuidle_exit_latency_max_seconds",
        "The exit latency of the deepest idle state the CPUs may enter (not disabled, within their PM QoS limit; 0: "
        "polling only), one series per role (exclusive, isolated, housekeeping) and latency; cpus is the CPU list.",
        labels=("role", "cpus"),
    )
    host = evaluation.host
    idle: CpuIdle | None = host.cpuidle
    topology = host.topology
    if idle is None or not idle.states:
        return family
    isolated = topology.isolated if topology is not None and topology.problem("isolated") is None else frozenset()
    exclusive = exclusive_cpus(host.kubelet_state)
    online = topology.online if topology is not None else frozenset(idle.states)
    allowed = allowed_states(host)
    groups: dict[tuple[str, int], set[int]] = {}
    for cpu in idle.states:
        if cpu not in online:
            continue
        enabled = allowed.get(cpu)
        if enabled is None:
            continue
        role = ROLE_EXCLUSIVE if cpu in exclusive else ROLE_ISOLATED if cpu in isolated else ROLE_HOUSEKEEPING
        deepest = max((state.exit_latency_us for state in enabled), default=0)
        groups.setdefault((role, deepest), set()).add(cpu)
    for (role, deepest), cpus in sorted(groups.items(), key=lambda item: (item[0][0], min(item[1]))):
        family.add_metric((role, format_cpulist(cpus)), deepest / 1e6)
    return family


@exposes("numawatch_cpuidle_info", inputs=(CPUIDLE,))
@host_only
def cpuidle_info(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_cpuidle_info",
        "Always 1: the cpuidle driver and governor in use (absent on a kernel without cpuidle).",
        labels=("driver", "governor"),
    )
    idle: CpuIdle | None = evaluation.host.cpuidle
    if idle is not None and idle.driver is not None:
        family.add_metric((idle.driver, idle.governor or ""), 1)
    return family


@exposes("numawatch_gpu_nic_path_info", inputs=(GPUS, PCI_TOPOLOGY, TOPOLOGY))
@builds("gpu_nic_paths")
@host_only
def gpu_nic_path(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_gpu_nic_path_info",
        "Always 1, one series per GPU and RDMA-capable NIC: the PCIe path between them with nvidia-smi's levels "
        "(PIX same switch, PXB several switches, PHB host bridge, NODE host bridges of one NUMA node, SYS across "
        "NUMA nodes), computed from the PCI hierarchy in sysfs.",
        labels=("gpu", "nic", "level"),
    )
    for paths in gpu_nic_paths(evaluation.host) or ():
        for nic, level in paths.paths:
            if level is not None:
                family.add_metric((paths.gpu.pci_address, nic.address, level), 1)
    return family


@exposes("numawatch_gpu_nvlink_links", inputs=(NVML,))
def gpu_nvlinks(evaluation: Evaluation) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_gpu_nvlink_links",
        "Active NVLink links of each GPU (0: none, a PCIe-only GPU or every link down), read when NVML enumerates the "
        "GPUs; switch is true when they lead to NVSwitches.",
        labels=("gpu", "uuid", "switch"),
    )
    nvml: NvmlSnapshot | None = evaluation.host.nvml
    for gpu in nvml.gpus if nvml is not None else ():
        if gpu.nvlink_links is None:
            continue
        switch = "" if gpu.nvlink_switch is None else "true" if gpu.nvlink_switch else "false"
        family.add_metric((gpu.pci_address or "", gpu.uuid or "", switch), gpu.nvlink_links)
    return family


BUILDERS = (cpuidle_latency, cpuidle_info, gpu_nic_path, gpu_nvlinks)


def families(evaluation: Evaluation, collectors: Collectors | None = None) -> list[Metric]:
    """Every platform family for one evaluation but those of collectors turned off."""
    return built(BUILDERS, evaluation, collectors)


__all__ = ["families"]
