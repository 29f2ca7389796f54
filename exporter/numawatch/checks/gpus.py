"""Checks of the GPUs' NUMA placement as the kernel and the device plugin report it.

Knob 7 of the reference profile (DOMAIN.md): the Topology Manager can keep a GPU's CPUs and memory on its NUMA
node only when the device plugin registered the GPU with that node. A GPU the plugin files under NUMA ``-1`` has
no hint, so ``single-numa-node`` aligns CPUs and memory and leaves the GPU to chance (kubelet.md §3.3); a GPU whose
PCI function reports ``numa_node`` -1 leaves every tool guessing (gpu-and-host.md §2.6).
"""

from __future__ import annotations

from collections.abc import Iterator

from numawatch import telemetry
from numawatch.checks.check import Check, Finding, NotEvaluated, require
from numawatch.host import Host
from numawatch.inputs import GPUS, KUBELET_STATE, NVML, TOPOLOGY
from numawatch.intent import Intent
from numawatch.model.gpu import GpuInventory
from numawatch.model.kubelet import KubeletState
from numawatch.model.topology import Topology
from numawatch.workloads import NODE_WITHOUT_TOPOLOGY

SYSFS_REMEDIATION = (
    "enable NUMA reporting in the BIOS (ACPI _PXM / SRAT; NUMA-per-socket on, not interleaved), or on a VM give "
    "the guest a NUMA topology with the GPU's host node (pxb-pcie numa_node); as a stopgap "
    "echo <node> > /sys/bus/pci/devices/<gpu>/numa_node at boot"
)
PLUGIN_REMEDIATION = (
    "run the accelerator's device plugin with topology reporting (NVIDIA's device plugin / GPU Operator, AMD's ROCm "
    "k8s-device-plugin, the habanalabs device plugin; it must see the device's NUMA node: fix sysfs numa_node first), "
    "then restart the plugin and recreate the pods that hold the device"
)
# The device plugin of each vendor's resources (docs/gpu.md, "Device plugins"), for a finding's own remediation
_PLUGINS = (
    ("nvidia.com/", "the NVIDIA device plugin / GPU Operator"),
    ("amd.com/", "AMD's ROCm k8s-device-plugin (or the AMD GPU Operator)"),
    ("habana.ai/", "the habanalabs device plugin"),
)


def plugin_remediation(resource: str) -> str:
    """What to do about devices of ``resource`` registered without topology: that vendor's plugin, by name."""
    for prefix, plugin in _PLUGINS:
        if resource.startswith(prefix):
            return (
                f"run {plugin} with topology reporting (it must see the device's NUMA node: fix sysfs numa_node "
                "first), then restart the plugin and recreate the pods that hold the device"
            )
    return PLUGIN_REMEDIATION


def check_gpu_numa_unknown(host: Host, intent: Intent) -> Iterator[Finding]:
    findings = list(_unknown_nodes(host, intent))
    inventory = host.gpus
    topology = host.topology
    several_nodes = topology is not None and len(topology.nodes) > 1
    unreadable = inventory.unreadable("numa_node") if inventory is not None else ()
    if not findings and several_nodes and unreadable:
        # Every GPU that could be read has a node; the others' are unknown for a reason that is not the kernel's -1.
        raise NotEvaluated(unreadable[0])
    yield from findings


def _unknown_nodes(host: Host, intent: Intent) -> Iterator[Finding]:
    topology: Topology = require(host, "topology")
    inventory: GpuInventory | None = telemetry.inventory_of(host)  # MIG slices: their parents (NVML)
    state: KubeletState | None = host.kubelet_state
    devices = state.devices if state is not None else None
    if inventory is None and devices is None:
        raise NotEvaluated(
            f"needs the gpus_sysfs source ({host.down_reason('gpus_sysfs')}) or the device-plugin checkpoint"
        )
    if len(topology.nodes) < 2:
        return  # one NUMA node: every GPU is local to every CPU
    reported: set[str] = set()
    for gpu in inventory.gpus if inventory is not None else ():
        if gpu.numa_node is not None or "numa_node" in gpu.problems:
            continue  # known, or unknown because its file is malformed (not the kernel's -1)
        reported.add(gpu.pci_address)
        yield GPU_NUMA_UNKNOWN.finding(
            intent,
            {"gpu": gpu.pci_address, "uuid": gpu.uuid or "", "reason": "sysfs"},
            f"GPU {gpu.pci_address}{f' ({gpu.uuid})' if gpu.uuid else ''} reports numa_node -1 on a "
            f"{len(topology.nodes)}-node host: the firmware does not say which NUMA node it is attached to",
            SYSFS_REMEDIATION,
        )
    if devices is None:
        return
    seen: set[str] = set()
    for entry in devices.entries:
        if not intent.is_gpu_resource(entry.resource_name):
            continue
        for device_id in entry.devices_per_numa.get(NODE_WITHOUT_TOPOLOGY, ()):
            base = device_id.split("::", 1)[0]
            device = inventory.for_device_id(device_id) if inventory is not None else None
            label = device.pci_address if device is not None else device_id
            if label in seen:
                continue
            seen.add(label)
            uuid = device.uuid if device is not None else (base if base.startswith(("GPU-", "MIG-")) else None)
            yield GPU_NUMA_UNKNOWN.finding(
                intent,
                {"gpu": label, "uuid": uuid or "", "reason": "device_plugin"},
                f"GPU {label} ({device_id}) is registered by the device plugin for {entry.resource_name} without NUMA "
                "topology (node -1): the Topology Manager cannot align it with the pod's CPUs and memory",
                plugin_remediation(entry.resource_name),
            )


GPU_NUMA_UNKNOWN = Check(
    id="gpu_numa_unknown",
    severity="warning",
    summary="A GPU's NUMA node is unknown (sysfs numa_node -1, or registered by the device plugin under -1).",
    remediation=PLUGIN_REMEDIATION,
    run=check_gpu_numa_unknown,
    inputs=(GPUS, NVML, KUBELET_STATE, TOPOLOGY),
    knob="7",
)

CHECKS: tuple[Check, ...] = (GPU_NUMA_UNKNOWN,)
