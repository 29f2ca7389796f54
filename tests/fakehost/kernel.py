"""Fake host layer: kernel tunables, cpufreq, /proc/interrupts, /proc/irq, numastat, irqbalance and uncore PMUs.

Each helper writes what the kernel (or the daemon) shows, in its own layout:

- ``add_kernel_settings``: ``proc/sys/kernel/numa_balancing``, ``proc/sys/vm/swappiness``,
  ``sys/kernel/mm/transparent_hugepage/{enabled,defrag}`` (every mode, the active one bracketed) and cpufreq
  (``cpu/cpufreq/policyN`` plus ``cpuN/cpufreq/scaling_governor``) unless ``governors`` is None (a VM).
- ``format_interrupts`` / ``write_interrupts``: /proc/interrupts as ``show_interrupts`` prints it: a ``CPU<n>``
  header for online CPUs only, ``%*d:`` labels, one `` %10u`` cell per CPU (or ``%10u `` with ``old_layout``), chip,
  hwirq and action names; named rows (``LOC``...) with their description; ``ERR``/``MIS`` with one count.
- ``add_irqs``: ``proc/irq/<n>/{smp_affinity,smp_affinity_list,effective_affinity,effective_affinity_list,node}`` and
  ``proc/irq/default_smp_affinity``; a managed IRQ's ``smp_affinity*`` are made read-only, as Linux >= 6.12 does.
- ``add_numastat``: ``sys/devices/system/node/nodeN/numastat``.
- ``add_irqbalance``: a running irqbalance (``proc/<pid>/{comm,environ}``) and/or its environment file.
- ``add_uncore_pmus``: ``sys/bus/event_source/devices/uncore_upi_<n>`` (or any PMU name) with type, cpumask and
  format files, plus ``proc/sys/kernel/perf_event_paranoid``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from numawatch.cpuset import CPUSet, format_cpulist

if TYPE_CHECKING:
    from numawatch.model.topology import Topology

    from fakehost import FakeHost

THP_ENABLED_MODES = ("always", "madvise", "never")
THP_DEFRAG_MODES = ("always", "defer", "defer+madvise", "madvise", "never")

NAMED_DESCRIPTIONS = {
    "NMI": "Non-maskable interrupts",
    "LOC": "Local timer interrupts",
    "SPU": "Spurious interrupts",
    "PMI": "Performance monitoring interrupts",
    "IWI": "IRQ work interrupts",
    "RTR": "APIC ICR read retries",
    "RES": "Rescheduling interrupts",
    "CAL": "Function call interrupts",
    "TLB": "TLB shootdowns",
    "TRM": "Thermal event interrupts",
    "MCP": "Machine check polls",
}


def _bracketed(modes: Sequence[str], active: str) -> str:
    return " ".join(f"[{mode}]" if mode == active else mode for mode in modes)


def add_kernel_settings(
    host: FakeHost,
    *,
    numa_balancing: int | None = 0,
    swappiness: int | None = 0,
    thp_enabled: str | None = "madvise",
    thp_defrag: str | None = "madvise",
    governors: str | Mapping[int, str] | None = None,
    cpus: Iterable[int] = (),
) -> None:
    """Kernel knobs; ``None`` leaves a file out (a kernel without that feature).

    ``governors``: None writes no cpufreq at all (a VM); a string gives every CPU of ``cpus`` that governor; a
    mapping gives each CPU its own (CPUs not named get no cpufreq directory).
    """
    # What every kernel has beside these knobs, so a knob left out reads as a kernel without the feature, as on a
    # real one (PREEMPT_RT: no transparent_hugepage beside hugepages/), not as a tree that was never captured.
    host.write("proc/sys/kernel/pid_max", "4194304")
    host.mkdir("sys/kernel/mm/hugepages")
    if numa_balancing is not None:
        host.write("proc/sys/kernel/numa_balancing", str(numa_balancing))
    if swappiness is not None:
        host.write("proc/sys/vm/swappiness", str(swappiness))
    if thp_enabled is not None:
        modes = THP_ENABLED_MODES if thp_enabled in THP_ENABLED_MODES else (*THP_ENABLED_MODES, thp_enabled)
        host.write("sys/kernel/mm/transparent_hugepage/enabled", _bracketed(modes, thp_enabled))
    if thp_defrag is not None:
        modes = THP_DEFRAG_MODES if thp_defrag in THP_DEFRAG_MODES else (*THP_DEFRAG_MODES, thp_defrag)
        host.write("sys/kernel/mm/transparent_hugepage/defrag", _bracketed(modes, thp_defrag))
    host.mkdir("sys/devices/system/cpu/cpufreq")  # exists even without a driver, as on a VM
    if governors is None:
        return
    per_cpu = dict.fromkeys(cpus, governors) if isinstance(governors, str) else dict(governors)
    for cpu, governor in per_cpu.items():
        # intel_pstate and acpi-cpufreq give each CPU its own policy; cpuN/cpufreq is a link to it.
        policy = f"sys/devices/system/cpu/cpufreq/policy{cpu}"
        host.write(f"{policy}/scaling_governor", governor)
        host.write(f"{policy}/affected_cpus", str(cpu))
        host.symlink(f"sys/devices/system/cpu/cpu{cpu}/cpufreq", f"../cpufreq/policy{cpu}")


# --------------------------------------------------------------------------------------------------- interrupts
@dataclass(frozen=True)
class FakeIrq:
    irq: int
    name: str
    affinity: CPUSet
    effective: CPUSet | None = None  # None: no effective_affinity files (kernel without the option)
    counts: Mapping[int, int] = field(default_factory=dict)
    managed: bool = False
    chip: str = "PCI-MSI"
    hwirq: str = ""  # defaults to "<irq>-edge"
    node: int = -1


def format_interrupts(
    cpus: Sequence[int],
    irqs: Iterable[FakeIrq] = (),
    named: Mapping[str, Mapping[int, int]] | None = None,
    *,
    old_layout: bool = False,
) -> str:
    """A /proc/interrupts text for the online ``cpus`` (columns in the order given)."""
    irqs = sorted(irqs, key=lambda irq: irq.irq)
    prec = max(3, len(str(max((irq.irq for irq in irqs), default=0))))
    lines = [" " * (prec + 8) + "".join(f"CPU{cpu:<8d}" for cpu in cpus)]

    def cells(counts: Mapping[int, int]) -> str:
        if old_layout:
            return " " + "".join(f"{counts.get(cpu, 0):10d} " for cpu in cpus)
        return "".join(f" {counts.get(cpu, 0):10d}" for cpu in cpus)

    for irq in irqs:
        hwirq = irq.hwirq or f"{irq.irq}-edge"
        lines.append(f"{irq.irq:>{prec}d}:{cells(irq.counts)}  {irq.chip:>8} {hwirq}      {irq.name}")
    named = named if named is not None else {"LOC": {}}
    for key, counts in named.items():
        description = NAMED_DESCRIPTIONS.get(key, f"{key} interrupts")
        lines.append(f"{key:>{prec}}:{cells(counts)}   {description}")
    lines.append(f"{'ERR':>{prec}}:          0")
    lines.append(f"{'MIS':>{prec}}:          0")
    return "\n".join(lines) + "\n"


def write_interrupts(
    host: FakeHost,
    cpus: Sequence[int],
    irqs: Iterable[FakeIrq] = (),
    named: Mapping[str, Mapping[int, int]] | None = None,
    *,
    old_layout: bool = False,
) -> None:
    host.write("proc/interrupts", format_interrupts(cpus, irqs, named, old_layout=old_layout))


def _mask(cpus: Iterable[int], nr_cpu_ids: int) -> str:
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    groups = []
    for index in range((max(nr_cpu_ids, 1) + 31) // 32):
        groups.append(f"{(value >> (index * 32)) & 0xFFFFFFFF:08x}")
    return ",".join(reversed(groups))


def add_irqs(
    host: FakeHost,
    cpus: Sequence[int],
    irqs: Iterable[FakeIrq],
    named: Mapping[str, Mapping[int, int]] | None = None,
    *,
    default_affinity: Iterable[int] | None = None,
    nr_cpu_ids: int | None = None,
    old_layout: bool = False,
) -> None:
    """/proc/interrupts plus one /proc/irq/<n>/ per IRQ, for the online ``cpus``."""
    irqs = list(irqs)
    nr = nr_cpu_ids if nr_cpu_ids is not None else max(cpus) + 1
    write_interrupts(host, cpus, irqs, named, old_layout=old_layout)
    for irq in irqs:
        directory = f"proc/irq/{irq.irq}"
        for name, content in (
            ("smp_affinity", _mask(irq.affinity, nr)),
            ("smp_affinity_list", format_cpulist(irq.affinity)),
            ("affinity_hint", _mask((), nr)),
            ("node", str(irq.node)),
        ):
            host.write(f"{directory}/{name}", content)
        if irq.effective is not None:
            host.write(f"{directory}/effective_affinity", _mask(irq.effective, nr))
            host.write(f"{directory}/effective_affinity_list", format_cpulist(irq.effective))
        mode = 0o444 if irq.managed else 0o644
        os.chmod(host.path(f"{directory}/smp_affinity"), mode)
        os.chmod(host.path(f"{directory}/smp_affinity_list"), mode)
    everyone = default_affinity if default_affinity is not None else range(nr)
    host.write("proc/irq/default_smp_affinity", _mask(everyone, nr))


# --------------------------------------------------------------------------------------------------- numastat
# intel_idle's states on a Sapphire Rapids server (drivers/idle/intel_idle.c spr_cstates): name, exit latency µs.
INTEL_IDLE_STATES: tuple[tuple[str, int], ...] = (("POLL", 0), ("C1", 1), ("C1E", 2), ("C6", 290))


def add_cpuidle(
    host: FakeHost,
    cpus: Iterable[int],
    *,
    driver: str = "intel_idle",
    governor: str = "menu",
    states: Sequence[tuple[str, int]] = INTEL_IDLE_STATES,
    disabled: Mapping[int, Iterable[str]] | None = None,
    resume_latency: Mapping[int, str] | None = None,
) -> None:
    """Write ``cpu/cpuidle/{current_driver,current_governor}`` and, per CPU, ``cpuidle/stateK/{name,desc,latency,
    residency,disable,usage,time}`` and ``power/pm_qos_resume_latency_us`` as the kernel lays them out.

    ``disabled``: CPU -> names of its states whose ``disable`` is 1 (``cpupower idle-set -d``); ``resume_latency``:
    CPU -> the PM QoS file's text (default ``0``: no limit; ``n/a``: polling only).
    """
    base = "sys/devices/system/cpu"
    host.write(f"{base}/cpuidle/current_driver", driver)
    host.write(f"{base}/cpuidle/current_governor", governor)
    host.write(f"{base}/cpuidle/current_governor_ro", governor)
    host.write(f"{base}/cpuidle/available_governors", "ladder menu teo")
    off = {cpu: set(names) for cpu, names in (disabled or {}).items()}
    for cpu in cpus:
        for index, (name, latency) in enumerate(states):
            state = f"{base}/cpu{cpu}/cpuidle/state{index}"
            host.write(f"{state}/name", name)
            host.write(f"{state}/desc", "CPUIDLE CORE POLL IDLE" if latency == 0 else f"MWAIT {index:#04x}")
            host.write(f"{state}/latency", str(latency))
            host.write(f"{state}/residency", str(latency * 3))
            host.write(f"{state}/disable", "1" if name in off.get(cpu, ()) else "0")
            host.write(f"{state}/usage", str(1000 * (index + 1)))
            host.write(f"{state}/time", str(50_000 * (index + 1)))
        host.write(f"{base}/cpu{cpu}/power/pm_qos_resume_latency_us", (resume_latency or {}).get(cpu, "0"))


def add_numastat(host: FakeHost, node: int, **counters: int) -> None:
    """``nodeN/numastat`` with the six kernel fields (0 unless given) plus any extra ones given."""
    fields = dict.fromkeys(
        ("numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node"), 0
    )
    fields.update(counters)
    host.write(
        f"sys/devices/system/node/node{node}/numastat", "".join(f"{name} {value}\n" for name, value in fields.items())
    )


# --------------------------------------------------------------------------------------------------- irqbalance
def add_irqbalance(
    host: FakeHost,
    *,
    pid: int | None = 4242,
    environ: Mapping[str, str] | None = None,
    env_file: str | None = None,
    file_text: str = "",
    socket: bool = False,
    started: int = 1000,
) -> None:
    """A running irqbalance (``pid``; None: not running, started ``started`` clock ticks after boot) and/or its
    environment file.

    ``environ``: the daemon's environment (None: /proc/<pid>/environ is absent, as when it cannot be read);
    ``env_file``: ``debian`` (etc/default/irqbalance), ``rhel`` (etc/sysconfig/irqbalance) or None, holding
    ``file_text``; ``socket``: list its abstract socket in proc/1/net/unix.
    """
    if pid is not None:
        host.write(f"proc/{pid}/comm", "irqbalance")
        host.write(f"proc/{pid}/stat", proc_stat(pid, "irqbalance", started))
        if environ is not None:
            host.write(
                f"proc/{pid}/environ", b"".join(f"{key}={value}".encode() + b"\0" for key, value in environ.items())
            )
        if socket:
            host.write(
                "proc/1/net/unix",
                "Num       RefCount Protocol Flags    Type St Inode Path\n"
                f"0000000000000000: 00000002 00000000 00010000 0001 01 31337 @irqbalance{pid}.sock\n",
            )
    if env_file is not None:
        rel = {"debian": "etc/default/irqbalance", "rhel": "etc/sysconfig/irqbalance"}[env_file]
        host.write(rel, file_text)


def proc_stat(pid: int, comm: str, started: int) -> str:
    """A ``/proc/<pid>/stat`` line as the kernel prints it (``do_task_stat``): the start time is field 22."""
    return f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 812 0 0 0 15 9 0 0 20 0 1 0 {started} 10948608 782 " + (
        "18446744073709551615 1 1 0 0 0 0 0 4096 16387 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    )


def add_process(host: FakeHost, pid: int, comm: str, started: int = 2000) -> None:
    """Any other process, so that the irqbalance scan has something to skip."""
    host.write(f"proc/{pid}/comm", comm)
    host.write(f"proc/{pid}/stat", proc_stat(pid, comm, started))


# --------------------------------------------------------------------------------------------------- uncore PMUs
def add_uncore_pmus(
    host: FakeHost,
    names: Iterable[str] = ("uncore_upi_0", "uncore_upi_1"),
    *,
    cpumask: str = "0,8",
    paranoid: int = 2,
    umask_field: str = "umask_ext",
) -> None:
    """Uncore PMU directories the way the kernel exposes them (type, cpumask, format/*), plus perf_event_paranoid."""
    for index, name in enumerate(names):
        directory = f"sys/bus/event_source/devices/{name}"
        host.write(f"{directory}/type", str(20 + index))
        host.write(f"{directory}/cpumask", cpumask)
        host.write(f"{directory}/format/event", "config:0-7")
        host.write(f"{directory}/format/{umask_field}", "config:8-15,32-55")
    for name in ("cpu", "software", "tracepoint"):
        host.write(f"sys/bus/event_source/devices/{name}/type", "4" if name == "cpu" else "1")
    host.write("proc/sys/kernel/perf_event_paranoid", str(paranoid))


# --------------------------------------------------------------------------------------------------- model objects
def host_layer_results(topology: Topology, *, irq_on_cpu: int | None = None) -> dict[str, object]:
    """Snapshots of every host-layer source for a clean node of ``topology``, as model objects (no files).

    Kernel knobs as the reference profile wants them (numa_balancing 0, swappiness 0, THP madvise, the performance
    governor everywhere), the huge pages the command line asks reserved evenly over the nodes, NUMA counters, one UPI
    link per socket, device IRQs on housekeeping CPUs and a few ticks on the watched (isolated) CPUs, no irqbalance.
    ``irq_on_cpu`` plants drift: a managed nvme queue delivered to that CPU (so it appears in
    ``numawatch_irq_affinity_info`` and ``irq_on_isolated_cpu`` fires when the CPU is protected).

    Meant to be merged into a model-only snapshot, e.g. ``with_results(host, **host_layer_results(topology))``.
    """
    from numawatch.model import frozen_map
    from numawatch.model.interrupts import InterruptRow, Interrupts, IrqAffinity, Irqbalance, Irqs
    from numawatch.model.kernel import (
        HugePageCounts,
        InterSocketTraffic,
        KernelSettings,
        LinkTraffic,
        NodeCounters,
        NumaCounters,
    )
    from numawatch.sources.interrupts import classify

    online = topology.online
    watched = topology.isolated | (topology.isolation.sys_nohz_full or frozenset())
    housekeeping = sorted(online - watched) or sorted(online)
    nodes = topology.node_ids or (0,)
    asked = dict(topology.isolation.cmdline_hugepages)
    per_node = {size: pages // len(nodes) for size, pages in asked.items()}
    kernel = KernelSettings(
        numa_balancing=0,
        swappiness=0,
        thp_enabled="madvise",
        thp_defrag="madvise",
        governors=frozen_map(dict.fromkeys(sorted(online), "performance")),
        hugepages=frozen_map(
            {size: HugePageCounts(total=pages, free=pages, surplus=0, reserved=0) for size, pages in asked.items()}
        ),
    )
    numastat = NumaCounters(
        nodes=frozen_map(
            {
                node: NodeCounters(
                    node=node,
                    numastat=frozen_map(
                        {"numa_hit": 1_000_000, "numa_miss": 0, "numa_foreign": 0, "interleave_hit": 100,
                         "local_node": 990_000, "other_node": 10_000}
                    ),
                    hugepages=frozen_map(
                        {size: HugePageCounts(total=pages, free=pages, surplus=0) for size, pages in per_node.items()}
                    ),
                )
                for node in nodes
            }
        )
    )
    sockets = sorted(topology.sockets) or [0]
    intersocket = InterSocketTraffic(
        links=tuple(
            LinkTraffic(socket=socket, link="uncore_upi_0", pmu="uncore_upi_0", bytes=64 * 10**9, cpu=housekeeping[0])
            for socket in sockets
        ),
        event="UNC_UPI_TxL_FLITS.ALL_DATA x 64/9",
    )
    rows = [
        InterruptRow(key="30", kind="device", name="nvme0q0", chip="PCI-MSIX-0000:01:00.0 0-edge",
                     counts=frozen_map({})),
    ]
    affinities = {30: IrqAffinity(irq=30, affinity=frozenset(housekeeping), effective=frozenset(housekeeping[:1]),
                                  writable=True)}
    if irq_on_cpu is not None:
        rows.append(
            InterruptRow(key="31", kind="device", name="nvme0q1", chip="PCI-MSIX-0000:01:00.0 1-edge",
                         counts=frozen_map({irq_on_cpu: 42} if irq_on_cpu in watched else {}))
        )
        affinities[31] = IrqAffinity(irq=31, affinity=frozenset({irq_on_cpu}), effective=frozenset({irq_on_cpu}),
                                     writable=False)
    for key, per_cpu in (("LOC", 250), ("RES", 3), ("CAL", 40), ("TLB", 1), ("NMI", 0)):
        counts = {cpu: per_cpu for cpu in watched} if per_cpu else {}
        rows.append(InterruptRow(key=key, kind=classify(key, ""), name=NAMED_DESCRIPTIONS.get(key, key),
                                 counts=frozen_map(counts)))
    interrupts = Interrupts(cpus=tuple(sorted(online)), watched=frozenset(watched), rows=tuple(rows), read_at=0.0)
    irqs = Irqs(irqs=frozen_map(affinities), default_affinity=frozenset(housekeeping), read_only_modes_seen=True)
    return {
        "kernel": kernel,
        "numastat": numastat,
        "intersocket": intersocket,
        "interrupts": interrupts,
        "irqs": irqs,
        "irqbalance": Irqbalance(pids=(), config=None),
    }
