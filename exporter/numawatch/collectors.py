"""Metric families an operator can turn off: ``--collector.<name>`` / ``--no-collector.<name>`` on ``serve``.

Named after node_exporter's flags, which fleets already template. Only the families that grow with the node (one
series per CPU, per container and NUMA node, per IRQ, per GPU thread holder) are collectors: the drift, health and
inventory families everything else depends on (alerts, dashboards, the NPD conditions) cannot be turned off.
``--collector.disable-defaults`` starts from none, as node_exporter's does, and ``--collector.<name>`` then turns
single ones back on.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client.metrics_core import Metric


@dataclass(frozen=True)
class Collector:
    """One switchable group of families: ``families`` are prometheus_client names (counters without ``_total``)."""

    name: str
    families: tuple[str, ...]
    summary: str
    default: bool = True


COLLECTORS: tuple[Collector, ...] = (
    Collector("cpu_info", ("numawatch_cpu_info",), "the CPU map: one series per CPU"),
    Collector(
        "cpu_interrupts",
        ("numawatch_cpu_interrupts",),
        "interrupts by kind on each watched CPU (isolated, nohz_full, exclusive)",
    ),
    Collector("container_cpus", ("numawatch_container_cpus",), "each container's CPUs per NUMA node"),
    Collector(
        "container_memory_numa",
        ("numawatch_container_memory_numa_bytes",),
        "each container's resident memory per NUMA node",
    ),
    Collector("irq_affinity", ("numawatch_irq_affinity_info",), "each device IRQ delivered to a watched CPU"),
    Collector(
        "gpu_processes",
        ("numawatch_gpu_processes", "numawatch_gpu_process_sm_utilization_ratio"),
        "compute processes and their SM utilisation per GPU and container",
    ),
    Collector(
        "gpu_holders",
        (
            "numawatch_gpu_holder_run_delay_seconds",
            "numawatch_gpu_holder_involuntary_switches",
            "numawatch_gpu_holder_migrations",
            "numawatch_gpu_holder_threads",
            "numawatch_gpu_holder_interrupts",
        ),
        "scheduling of the threads of GPU-holding containers (run delay, switches, migrations, interrupts)",
    ),
    Collector("gpu_nic_paths", ("numawatch_gpu_nic_path_info",), "the PCIe level of every GPU and RDMA NIC pair"),
)
BY_NAME: Mapping[str, Collector] = {collector.name: collector for collector in COLLECTORS}
_OWNER: Mapping[str, str] = {family: c.name for c in COLLECTORS for family in c.families}
# The attribute ``builds`` marks a family builder with: the name of the collector whose families it builds.
_BUILDER_MARK = "numawatch_collector"

Builder = TypeVar("Builder", bound=Callable[..., object])


def builds(name: str) -> Callable[[Builder], Builder]:
    """Marks a metric family builder as building families of the collector ``name`` and nothing else, so that with
    the collector off the builder is not run at all (``Collectors.runs``): a family turned off costs nothing, not
    even the joins only it needs. tests/test_collectors.py checks every builder against the families it builds."""
    if name not in BY_NAME:
        raise ValueError(f"no collector is named {name!r}")

    def mark(build: Builder) -> Builder:
        setattr(build, _BUILDER_MARK, name)
        return build

    return mark


def collector_of(build: Callable[..., object]) -> str | None:
    """The collector a builder is marked with (``builds``); None for the builders of families that are always on."""
    owner = getattr(build, _BUILDER_MARK, None)
    return owner if isinstance(owner, str) else None


@dataclass(frozen=True)
class Collectors:
    """Which collectors are on. A family that belongs to no collector is always rendered."""

    enabled: frozenset[str]

    @classmethod
    def defaults(cls) -> Collectors:
        return cls(frozenset(c.name for c in COLLECTORS if c.default))

    @property
    def disabled(self) -> frozenset[str]:
        return frozenset(BY_NAME) - self.enabled

    def allows(self, family: str) -> bool:
        owner = _OWNER.get(family)
        return owner is None or owner in self.enabled

    def runs(self, build: Callable[..., object]) -> bool:
        """Whether the family builder ``build`` is to run: it builds no collector's families or an enabled one's."""
        owner = collector_of(build)
        return owner is None or owner in self.enabled

    def keep(self, families: Iterable[Metric]) -> list[Metric]:
        """The families that are not turned off (what the builders that ``runs`` allows build, from families built
        by every builder)."""
        if not self.disabled:
            return list(families)
        return [family for family in families if self.allows(family.name)]


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``--collector.<name>``, ``--no-collector.<name>`` for every collector and ``--collector.disable-defaults``."""
    group = parser.add_argument_group(
        "collectors", "metric families that grow with the node; all are on by default (see docs/metrics.md)"
    )
    group.add_argument("--collector.disable-defaults", dest="collector_disable_defaults", action="store_true",
                       help="turn every collector off; those given with --collector.<name> stay on")  # fmt: skip
    for collector in COLLECTORS:
        dest = f"collector_{collector.name}"
        group.add_argument(f"--collector.{collector.name}", dest=dest, action="store_const", const=True,
                           default=None, help=f"{collector.summary} (default: {'on' if collector.default else 'off'})")
        group.add_argument(f"--no-collector.{collector.name}", dest=dest, action="store_const", const=False,
                           help=argparse.SUPPRESS)  # fmt: skip


def from_args(args: argparse.Namespace) -> Collectors:
    """The collectors the flags ask for: the defaults (or none with ``--collector.disable-defaults``), then each
    ``--collector.<name>`` on and each ``--no-collector.<name>`` off (the last of the two given wins, as in
    node_exporter's kingpin flags)."""
    enabled = set() if getattr(args, "collector_disable_defaults", False) else set(Collectors.defaults().enabled)
    for collector in COLLECTORS:
        wanted = getattr(args, f"collector_{collector.name}", None)
        if wanted is True:
            enabled.add(collector.name)
        elif wanted is False:
            enabled.discard(collector.name)
    return Collectors(frozenset(enabled))
