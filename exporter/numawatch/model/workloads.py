"""Pods and containers as the host runs them.

Cgroups, names from the runtime, QoS, pod usage (sources/cgroups.py, names.py, pod_usage.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numawatch.cpuset import CPUSet
from numawatch.model import frozen_map

# --------------------------------------------------------------------------------------------------- cgroups
QOS_GUARANTEED = "guaranteed"


QOS_BURSTABLE = "burstable"


QOS_BESTEFFORT = "besteffort"


@dataclass(frozen=True)
class ContainerCgroup:
    container_id: str
    runtime: str  # "containerd", "crio" or "unknown"
    cgroup_path: str  # relative to the cgroup mount (v2) or the cpuset hierarchy (v1), e.g. kubepods.slice/...
    cpus_effective: CPUSet | None  # cpuset.cpus.effective (v2) / cpuset.effective_cpus (v1)
    mems_effective: frozenset[int] | None  # cpuset.mems.effective / cpuset.effective_mems
    # resident memory per NUMA node in bytes from memory.numa_stat (v2: anon+file; v1: total= pages x page size)
    numa_bytes: Mapping[int, int] | None = None
    is_sandbox: bool = False  # the pause container; left out of every container check
    pids: tuple[int, ...] = ()  # a few PIDs from cgroup.procs (bounded), for process-level sources


@dataclass(frozen=True)
class PodCgroup:
    uid: str  # with dashes, as the API server spells it
    qos: str  # QOS_*
    cgroup_path: str
    containers: tuple[ContainerCgroup, ...]
    # The reading (a HostReader's reading number) that made this object; the source hands the same object out again
    # while it is unchanged, so what was derived from it may be reused while the number is the same (numawatch.store).
    # 0: unknown (a one-off reading), never reused. Not part of equality.
    generation: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Cgroups:
    version: int  # 1 or 2
    driver: str  # "systemd" or "cgroupfs"
    pods: tuple[PodCgroup, ...]
    root_cpus_effective: CPUSet | None = None  # cpus of the kubepods cgroup

    def pod(self, uid: str) -> PodCgroup | None:
        for pod in self.pods:
            if pod.uid == uid:
                return pod
        return None


# --------------------------------------------------------------------------------------------------- names
@dataclass(frozen=True)
class ContainerIdentity:
    container_id: str
    pod_uid: str | None
    namespace: str | None
    pod_name: str | None
    container_name: str | None
    container_type: str | None  # "container" or "sandbox" (io.kubernetes.cri.container-type)
    origin: str  # where it was learnt: "containerd", "crio", "pod-logs"
    # Whether a DaemonSet made the pod, where the runtime's files say (a CRI-O sandbox's pod labels); None: unknown
    daemonset: bool | None = None


@dataclass(frozen=True)
class PodIdentity:
    uid: str
    namespace: str
    name: str
    daemonset: bool | None = None  # as ContainerIdentity.daemonset, from the pod's sandbox


@dataclass(frozen=True)
class Names:
    containers: Mapping[str, ContainerIdentity]  # by container ID
    pods: Mapping[str, PodIdentity]  # by pod UID
    # pod UID -> container names seen in /var/log/pods/<ns>_<pod>_<uid>/<container>/ (fallback join)
    pod_log_containers: Mapping[str, tuple[str, ...]] = field(default_factory=frozen_map)


# --------------------------------------------------------------------------------------------------- pod usage
@dataclass(frozen=True)
class PodUsage:
    """What one pod's cgroup has used: the pod level, so a pod costs two reads however many containers it has."""

    uid: str
    qos: str
    cpu_seconds: float | None  # cumulative CPU time of the pod (cpu.stat usage_usec; v1 cpuacct.usage)
    memory_bytes: int | None  # memory.current (v1 memory.usage_in_bytes): what the pod charges now
    # CPU cores used on average since this reader last read the pod; None with a single reading
    cpu_cores: float | None = None


@dataclass(frozen=True)
class PodsUsage:
    pods: Mapping[str, PodUsage]  # by pod UID
    problems: Mapping[str, str] = field(default_factory=frozen_map)  # pod UID -> a malformed file, named
