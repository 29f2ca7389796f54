"""Who holds a GPU: a GPU process's container joined with the workloads, in the labels findings and metrics use.

The GPU process checks (checks/gpu_process.py) and the GPU metric families (metrics/gpu.py) both name a process by
its container; a large node has ~860 containers, so the lookup table is made once per Host and intent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from numawatch.derivation import derivation
from numawatch.host import Host
from numawatch.inputs import WORKLOADS
from numawatch.intent import Intent
from numawatch.model.gpu import NvmlGpu
from numawatch.workloads import Workload, build_workloads


@dataclass(frozen=True)
class Holder:
    """Who a GPU process is, in the labels findings and metrics use."""

    labels: Mapping[str, str]
    display: str
    pod_uid: str | None
    container_name: str | None


@derivation("gpuholders.by_container", inputs=(WORKLOADS,), per_intent=True)
def holders_by_container(host: Host, intent: Intent) -> Mapping[str, Workload]:
    """Workloads by container ID (empty when the cgroups source is down): three checks and two metric families look
    GPU processes up in it, and a large node has ~860 containers."""
    if host.cgroups is None:
        return {}
    return {workload.container_id: workload for workload in build_workloads(host, intent)}


def holder_of(
    container_id: str | None, pod_uid: str | None, workloads: Mapping[str, Workload], comm: str = ""
) -> Holder:
    """The labels of a process's container: from the workload join, else from its cgroup alone."""
    if container_id is None:
        name = comm or "?"
        return Holder({"name": name}, f"host process {name}", None, None)
    workload = workloads.get(container_id)
    if workload is not None:
        return Holder(workload.labels, workload.display, workload.pod_uid, workload.container_name)
    labels = {"pod": pod_uid or "", "pod_uid": pod_uid or "", "container": container_id[:12]}
    return Holder(labels, f"?/{pod_uid or '?'}/{container_id[:12]}", pod_uid, None)


def gpu_label(gpu: NvmlGpu) -> str:
    """The ``gpu`` label: the PCI address in sysfs spelling, as every other GPU series uses it."""
    return gpu.pci_address or gpu.uuid or f"nvml-index-{gpu.index}"
