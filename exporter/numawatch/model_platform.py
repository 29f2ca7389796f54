"""Frozen snapshots of the platform around the pinned CPUs and GPUs (issue 17): CPU idle states, the PCI hierarchy
between GPUs and RDMA NICs, and what each pod uses of CPU and memory.

Same rules as model.py: sources build these and make no judgement, checks read them and never touch files, and a
field a source could not determine is ``None`` (unknown), never a made-up default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numawatch.model import frozen_map


# --------------------------------------------------------------------------------------------------- cpuidle
@dataclass(frozen=True)
class IdleState:
    """One ``cpuN/cpuidle/stateK`` directory (Documentation/admin-guide/pm/cpuidle.rst)."""

    index: int  # K
    name: str  # "POLL", "C1", "C1E", "C6"
    exit_latency_us: int  # ``latency``: the worst-case time to leave the state, in microseconds
    disabled: bool | None  # ``disable`` is 1; None: the file could not be read


@dataclass(frozen=True)
class CpuIdle:
    """The idle states each online CPU may enter, and what limits them.

    ``resume_latency_us`` holds the per-CPU PM QoS limit of ``cpuN/power/pm_qos_resume_latency_us`` for the CPUs
    that have one: the governor never picks a state whose exit latency exceeds it (0: only polling). A CPU without a
    limit ("0" in the file, the usual case) is absent. The global limit that a process holding /dev/cpu_dma_latency
    sets (tuned's ``force_latency``) is not in sysfs and not here.
    """

    driver: str | None  # cpuidle/current_driver: "intel_idle", "acpi_idle", "haltpoll", "none"; None: no cpuidle
    governor: str | None  # cpuidle/current_governor (or current_governor_ro): "menu", "teo", "ladder", "haltpoll"
    states: Mapping[int, tuple[IdleState, ...]] = field(default_factory=frozen_map)  # online CPU -> its states
    resume_latency_us: Mapping[int, int] = field(default_factory=frozen_map)
    problems: tuple[str, ...] = ()  # malformed files, one line each (that CPU's value is unknown)

    def enabled(self, cpu: int) -> tuple[IdleState, ...] | None:
        """The states ``cpu`` may enter: not disabled and within its PM QoS limit; None when a ``disable`` file of
        it could not be read (so it is unknown whether a state is allowed)."""
        states = self.states.get(cpu)
        if states is None:
            return None
        if any(state.disabled is None for state in states):
            return None
        limit = self.resume_latency_us.get(cpu)
        return tuple(
            state
            for state in states
            if not state.disabled and (limit is None or state.exit_latency_us <= limit)
        )


# --------------------------------------------------------------------------------------------------- PCI
@dataclass(frozen=True)
class PciFunction:
    """One PCI function and where it hangs in the PCI hierarchy (the resolved ``sys/bus/pci/devices`` link)."""

    address: str  # "0000:18:00.0"
    root: str  # the host bridge (root complex) it is under, as sysfs names its directory: "pci0000:17"
    # The PCI functions between the host bridge and this one, from the top down: root ports, switch ports, bridges.
    parents: tuple[str, ...]
    class_code: int | None  # 24 bits (0x020700 InfiniBand); None when ``class`` could not be read


@dataclass(frozen=True)
class RdmaNic:
    """A NIC that can do RDMA: PCI class 0x0207 (InfiniBand), or a function with an RDMA device under
    ``sys/class/infiniband`` (an Ethernet NIC with RoCE, an InfiniBand HCA with its driver)."""

    address: str
    rdma_devices: tuple[str, ...]  # names under sys/class/infiniband ("mlx5_0"); empty without a driver
    numa_node: int | None  # sysfs numa_node; None for -1 or unreadable
    virtual: bool = False  # an SR-IOV virtual function (it has a ``physfn`` link): on its physical function's path


@dataclass(frozen=True)
class PciTopology:
    functions: Mapping[str, PciFunction]  # by address, every function sys/bus/pci/devices lists
    nics: tuple[RdmaNic, ...] = ()
    problems: tuple[str, ...] = ()  # functions that could not be placed, or whose files are malformed


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


__all__ = ["CpuIdle", "IdleState", "PciFunction", "PciTopology", "PodUsage", "PodsUsage", "RdmaNic"]
