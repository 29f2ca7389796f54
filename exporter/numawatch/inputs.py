"""What a check or a metric family reads: its declared inputs, the words ``Check.inputs`` and ``exposes`` are written
in (as a source names its ``needs``).

An input is one of:

- ``Source``: a source's reading (its name in the registry, numawatch.sources), either its parts read at every
  reading of it or, with ``family``, one of the rotating families of the refresh table (numawatch.refresh);
- ``Derived``: a value numawatch derives from several sources (the workloads join), standing for what it reads;
- ``Rate``: a rate between a source's two last readings (or the previous Host's, ``check --window``);
- ``FINDINGS``: the verdicts of every check (the drift families);
- ``Own``: numawatch's own state, no host input (its counters, its build, its intent, how its readings went).

How stale each one may be is computed from the refresh table by numawatch.dataflow (``numawatch explain``); this
module imports neither the checks nor the metrics, so both can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from numawatch.refresh import (
    AFFINITIES,
    BUNDLE_CONFIGS,
    DAEMON_SEARCH,
    FULL_PROCESS_SCAN,
    GOVERNORS,
    GUARANTEED_CONTAINERS,
    GUARANTEED_PODS,
    IDLE_STATES,
    PLACEMENT,
    POD_LOG_DIRS,
    POD_USAGE,
    REQUESTED_MASKS,
    SHARED_PODS,
)


@dataclass(frozen=True)
class Source:
    """Source ``name``'s reading: the parts of it read at every reading of the source, or (``family``) one of its
    rotating families."""

    name: str
    family: str | None = None

    def __str__(self) -> str:
        return self.name if self.family is None else f"{self.name}: {self.family}"


@dataclass(frozen=True)
class Derived:
    """A value derived from several sources' readings (the workloads join), as stale as the stalest of them."""

    name: str
    reads: tuple[Source, ...]

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Rate:
    """A rate over the interval between two readings of ``source``: a change shows at its next reading, and what
    stopped still counts in the rate one reading later."""

    source: Source

    def __str__(self) -> str:
        return f"rate of {self.source}"


@dataclass(frozen=True)
class Findings:
    """The verdicts of every check: as stale as the stalest check."""

    def __str__(self) -> str:
        return "every check's findings"


@dataclass(frozen=True)
class Own:
    """numawatch's own state (no host input): current at every evaluation."""

    what: str

    def __str__(self) -> str:
        return self.what


Input = Source | Derived | Rate | Findings | Own

TOPOLOGY = Source("topology")
KERNEL = Source("kernel")
CPUFREQ_GOVERNORS = Source("kernel", GOVERNORS)
NUMASTAT = Source("numastat")
INTERSOCKET = Source("intersocket")
INTERRUPTS = Source("interrupts")
IRQS = Source("irqs")
IRQ_AFFINITIES = Source("irqs", AFFINITIES)
# The requested masks: messages, the affinity label and the managed-IRQ evidence.
IRQ_REQUESTED_MASKS = Source("irqs", REQUESTED_MASKS)
# Whether irqbalance runs and its settings: a daemon found is verified at every reading, one not yet found waits for
# the periodic searches (a process that execs irqbalance, where the socket table cannot be read, for a full scan).
IRQBALANCE_DAEMON = Derived(
    "irqbalance daemon", (Source("irqbalance", DAEMON_SEARCH), Source("irqbalance", FULL_PROCESS_SCAN))
)
KUBELET_CONFIG = Source("kubelet_config")
KUBELET_STATE = Source("kubelet_state")
POD_RESOURCES = Source("pod_resources")
GPUS = Source("gpus_sysfs")
NVML = Source("nvml")
AMDSMI = Source("amdsmi")
HLML = Source("hlml")
PROCESSES = Source("processes")
CPUIDLE = Source("cpuidle")
CPUIDLE_SETTINGS = Source("cpuidle", IDLE_STATES)
PCI_TOPOLOGY = Source("pci_topology")
POD_USAGES = Source("pod_usage", POD_USAGE)
KUBERNETES_API = Source("kubernetes_api")
OWN_POD = Source("own_pod")
# A container's memory placement (memory.numa_stat, cpuset.mems): Workload.numa_bytes and Workload.mems.
# Containers' memory placement: a Guaranteed pod's containers' in their fixed round, every other container's (and
# every sandbox's) in the slower placement rotation.
MEMORY_PLACEMENT = Derived(
    "container memory placement", (Source("cgroups", GUARANTEED_CONTAINERS), Source("cgroups", PLACEMENT))
)

# Every vendor's GPU telemetry as one reading (numawatch.telemetry).
GPU_TELEMETRY = Derived("GPU telemetry", (NVML, AMDSMI, HLML))
# The workloads join (numawatch.workloads): each container's cgroup and cpuset, its names, the kubelet's
# assignments (checkpoints, else the live pod-resources answer), its GPUs (the sysfs inventory, NVML's MIG devices)
# on the topology. A container's memory placement is not in it: a value reading it says MEMORY_PLACEMENT.
WORKLOADS = Derived(
    "workloads join",
    (
        Source("cgroups", SHARED_PODS),
        Source("cgroups", GUARANTEED_PODS),
        Source("cgroups", GUARANTEED_CONTAINERS),
        Source("names", BUNDLE_CONFIGS),
        Source("names", POD_LOG_DIRS),
        KUBELET_STATE,
        POD_RESOURCES,
        GPUS,
        NVML,
        TOPOLOGY,
    ),
)
INTERRUPT_RATES = Rate(INTERRUPTS)
# The cgroups read at every reading: the QoS slices listed, so a pod coming or going shows at once.
POD_LISTING = Source("cgroups")
FINDINGS = Findings()
SELF = Own("numawatch's own process and counters")
READINGS = Own("how each source's last reading went")
INTENT = Own("the intent in force (read again on SIGHUP and when its file changes)")
RELOADS = Own("the configuration files' reloads")
SERVER = Own("the HTTP server's own counters")


@dataclass(frozen=True)
class Declaration:
    """What a metric family builder makes (the metric names as exposed: a counter's with ``_total``) and reads."""

    names: tuple[str, ...]
    inputs: tuple[Input, ...]
    keyed: Keying | None = None  # keying(inputs)


_DECLARATION = "numawatch_family"

Builder = TypeVar("Builder", bound=Callable[..., object])


def exposes(*names: str, inputs: tuple[Input, ...]) -> Callable[[Builder], Builder]:
    """Declares what a family builder makes (``names``) and reads (``inputs``), for ``numawatch explain``;
    tests/test_dataflow.py holds every builder to it on a variety of hosts."""
    if not names or not inputs:
        raise ValueError("a family builder declares the names it makes and at least one input")

    def declare(build: Builder) -> Builder:
        setattr(build, _DECLARATION, Declaration(names, inputs, keying(inputs)))
        return build

    return declare


def declaration_of(build: Callable[..., object]) -> Declaration | None:
    found = getattr(build, _DECLARATION, None)
    return found if isinstance(found, Declaration) else None


def sources_of(inputs: tuple[Input, ...]) -> frozenset[str]:
    """The names of the sources ``inputs`` read (a derived value's included)."""
    names: set[str] = set()
    for item in inputs:
        if isinstance(item, Source):
            names.add(item.name)
        elif isinstance(item, Derived):
            names.update(source.name for source in item.reads)
        elif isinstance(item, Rate):
            names.add(item.source.name)
    return frozenset(names)


def reads_previous(inputs: tuple[Input, ...]) -> bool:
    """Whether ``inputs`` may read the previous Host (a rate)."""
    return any(isinstance(item, Rate) for item in inputs)


@dataclass(frozen=True)
class Keying:
    """What a value declaring some inputs is made from, as the store (numawatch.store) keys it: the generations of
    ``sources`` in its Host, and of ``rates`` in the previous Host too (a rate reads two readings)."""

    sources: tuple[str, ...]
    rates: tuple[str, ...] = ()


def keying(inputs: tuple[Input, ...]) -> Keying | None:
    """How a value declaring ``inputs`` is keyed; None when it is made at every evaluation: it declares nothing, or
    something besides the host (numawatch's own state, the findings)."""
    if not inputs or any(isinstance(item, (Own, Findings)) for item in inputs):
        return None
    rates = sorted({item.source.name for item in inputs if isinstance(item, Rate)})
    return Keying(tuple(sorted(sources_of(inputs))), tuple(rates))


__all__ = [
    "AMDSMI",
    "CPUFREQ_GOVERNORS",
    "CPUIDLE",
    "CPUIDLE_SETTINGS",
    "FINDINGS",
    "GPUS",
    "GPU_TELEMETRY",
    "HLML",
    "INTENT",
    "INTERRUPTS",
    "INTERRUPT_RATES",
    "INTERSOCKET",
    "IRQBALANCE_DAEMON",
    "IRQS",
    "IRQ_AFFINITIES",
    "IRQ_REQUESTED_MASKS",
    "KERNEL",
    "KUBELET_CONFIG",
    "KUBELET_STATE",
    "KUBERNETES_API",
    "MEMORY_PLACEMENT",
    "NUMASTAT",
    "NVML",
    "OWN_POD",
    "PCI_TOPOLOGY",
    "POD_LISTING",
    "POD_RESOURCES",
    "POD_USAGES",
    "PROCESSES",
    "READINGS",
    "RELOADS",
    "SELF",
    "SERVER",
    "TOPOLOGY",
    "WORKLOADS",
    "Declaration",
    "Derived",
    "Findings",
    "Input",
    "Keying",
    "Own",
    "Rate",
    "Source",
    "declaration_of",
    "exposes",
    "keying",
    "reads_previous",
    "sources_of",
]
