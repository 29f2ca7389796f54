"""GPU telemetry of every vendor as one reading: NVML's (``nvml``), AMD SMI's (``amdsmi``) and HLML's
(``hlml``) GPUs side by side, each with its ``vendor``, for the holders, the checks and the metrics that are the same
whatever library read the GPU.

A vendor's source that is up without GPUs (no accelerator of that vendor on the PCI bus: nothing to read) says
nothing about holders; NVML's says there are no NVIDIA compute processes. So the telemetry is known when NVML is up,
or when a vendor library reads at least one GPU; otherwise it is unknown and the reasons are those sources'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from numawatch.derivation import derivation
from numawatch.inputs import GPU_TELEMETRY, GPUS, NVML
from numawatch.model import frozen_map
from numawatch.model.gpu import GpuInventory, NvmlSnapshot

if TYPE_CHECKING:
    from numawatch.host import Host

SOURCES = ("nvml", "amdsmi", "hlml")


def merge(snapshots: Mapping[str, NvmlSnapshot | None]) -> NvmlSnapshot | None:
    """The GPUs of every telemetry source that says something, in source order; None when none does."""
    usable = [
        snapshot
        for name in SOURCES
        if (snapshot := snapshots.get(name)) is not None and (name == "nvml" or snapshot.gpus)
    ]
    if not usable:
        return None
    nvml = snapshots.get("nvml")
    return NvmlSnapshot(
        driver_version=nvml.driver_version if nvml is not None else None,
        gpus=tuple(gpu for snapshot in usable for gpu in snapshot.gpus),
        calls=nvml.calls if nvml is not None else (),
    )


def unknown_because(snapshots: Mapping[str, NvmlSnapshot | None], reason: Callable[[str], str]) -> list[str]:
    """The sources that would have said something and are down: ``nvml``, and a vendor's that was read and is down
    (``reason``: why a source is absent, as ``Inputs.reason`` and ``Host.down_reason`` say it)."""
    return [
        name
        for name in SOURCES
        if snapshots.get(name) is None and (name == "nvml" or reason(name) != f"source {name} was not read")
    ]


@derivation("telemetry", inputs=(GPU_TELEMETRY,))
def of_host(host: Host) -> NvmlSnapshot | None:
    """Every vendor's GPU telemetry of one reading, or None when it is unknown (the holders, three checks and the
    GPU families all ask)."""
    return merge({name: host.get(name) for name in SOURCES})


@derivation("telemetry.inventory", inputs=(GPUS, NVML))
def inventory_of(host: Host) -> GpuInventory | None:
    """The sysfs inventory, with NVML's MIG devices (``MIG-<uuid>``, the device plugin's IDs for them) named as parts
    of their parent GPUs, so a MIG slice joins to its parent's PCI function and sysfs NUMA node. The inventory itself
    (the same object) where NVML lists no MIG device of a GPU sysfs knows."""
    return _with_mig_devices(host)


def _with_mig_devices(host: Host) -> GpuInventory | None:
    inventory: GpuInventory | None = host.gpus
    nvml: NvmlSnapshot | None = host.get("nvml")
    if inventory is None or nvml is None:
        return inventory
    parents = {
        uuid: gpu.pci_address
        for gpu in nvml.gpus
        if gpu.pci_address and inventory.by_pci(gpu.pci_address) is not None
        for uuid in gpu.mig_devices
    }
    if not parents:
        return inventory
    return replace(inventory, partitions=frozen_map({**inventory.partitions, **parents}))


__all__ = ["SOURCES", "inventory_of", "merge", "of_host", "unknown_because"]
