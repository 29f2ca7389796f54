"""What "correct" means on this node: the reference profile for GPU inference nodes, or an intent file.

The reference profile is ../shared/DOMAIN.md's table as data. An intent YAML file overrides any part of it; see
docs/intent.md for the format. ``load_intent`` validates the file and rejects it with the file, the key and what
was expected, never a traceback.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field

from numawatch.cpuset import CPUSet
from numawatch.model import frozen_map

REFERENCE_PROFILE = "reference profile"


class IntentError(ValueError):
    """An invalid intent file. The message is one line: file, key, what was expected, what was found."""


@dataclass(frozen=True)
class PodSelector:
    """Containers that must be exclusively pinned, by shell-style patterns on names."""

    namespace: str = "*"
    pod: str = "*"
    container: str = "*"

    def matches(self, namespace: str | None, pod: str | None, container: str | None) -> bool:
        return (
            fnmatch.fnmatchcase(namespace or "", self.namespace)
            and fnmatch.fnmatchcase(pod or "", self.pod)
            and fnmatch.fnmatchcase(container or "", self.container)
        )


@dataclass(frozen=True)
class KernelIntent:
    """Host-layer expectations (issue 3): kernel knobs, isolation, IRQs, jitter thresholds."""

    numa_balancing: int = 0
    thp_enabled: frozenset[str] = frozenset({"madvise", "never"})
    thp_defrag: frozenset[str] = frozenset({"never", "madvise"})
    swappiness: int = 0
    cpufreq_governor: str = "performance"
    # huge page size in kB -> pages wanted in total; None per node means "whatever the command line asks"
    hugepages: Mapping[int, int] = field(default_factory=frozen_map)
    # NUMA node -> size in kB -> pages wanted on that node
    hugepages_per_node: Mapping[int, Mapping[int, int]] = field(default_factory=frozen_map)
    irq_exempt: tuple[str, ...] = ()  # IRQ name patterns (fnmatch) allowed on isolated CPUs
    irq_activity_threshold_per_second: float = 1.0  # device interrupts per second per isolated/exclusive CPU
    tick_threshold_per_second: float = 10.0  # local timer interrupts per second on a nohz_full CPU
    check_irqbalance: bool = True


@dataclass(frozen=True)
class Intent:
    source: str = REFERENCE_PROFILE  # the intent file's path, or "reference profile"
    cpu_manager_policy: str = "static"
    topology_manager_policy: str = "single-numa-node"
    topology_manager_scope: str = "pod"
    memory_manager_policy: str = "Static"
    # None: reserved CPUs must equal the housekeeping CPUs (online minus isolcpus), the seed's rule.
    reserved_cpus: CPUSet | None = None
    # Containers holding one of these resources must be exclusively pinned on their GPUs' NUMA node.
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    pin_gpu_containers: bool = True
    pinned: tuple[PodSelector, ...] = ()  # more containers that must be pinned
    remote_memory_ratio: float = 0.10  # container_memory_remote fires above this share of resident memory
    remote_memory_min_bytes: int = 64 * 1024 * 1024  # ...and only when at least this much is remote
    severities: Mapping[str, str] = field(default_factory=frozen_map)
    disabled: frozenset[str] = frozenset()
    kernel: KernelIntent = field(default_factory=KernelIntent)

    def severity_for(self, check_id: str, default: str) -> str:
        return self.severities.get(check_id, default)

    def check_enabled(self, check_id: str) -> bool:
        return check_id not in self.disabled

    def must_pin(self, namespace: str | None, pod: str | None, container: str | None) -> bool:
        """Whether intent names this container as one that must be pinned (GPU holders are decided elsewhere)."""
        return any(selector.matches(namespace, pod, container) for selector in self.pinned)


REFERENCE = Intent()
