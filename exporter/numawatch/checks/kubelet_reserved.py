"""Knob 9: ``system-reserved`` / ``kube-reserved`` "debe ser coherente con reserved-cpus".

Two ways the CPU reservation says two things at once (kubelet.md §7; the kubelet's flag help: ``--reserved-cpus``
"will supersede cpu counts in --system-reserved and --kube-reserved"):

- ``cpu_reservation_ignored``: a cpu quantity in ``system-reserved`` or ``kube-reserved`` *and* ``reserved-cpus``:
  the kubelet reserves the CPU list and ignores the quantities for CPU allocation, so one of the two statements is
  wrong (usually the quantity, left over from before the list);
- ``reserved_cpus_split_cores``: ``reserved-cpus`` names one SMT thread of a core but not its sibling while the
  static CPU Manager hands out whole cores only (``full-pcpus-only=true``): the sibling stays in the shared pool and
  can never be given exclusively, so a core's worth of CPU is neither the system's nor the pods'.
"""

from __future__ import annotations

from collections.abc import Iterator

from numawatch.checks.check import Check, Finding
from numawatch.checks.kubelet import kubelet_root, require, restart_steps, set_setting
from numawatch.cpuset import format_cpulist
from numawatch.host import Host
from numawatch.inputs import KUBELET_CONFIG
from numawatch.intent import Intent
from numawatch.model.kubelet import KubeletConfig
from numawatch.model.topology import Topology


def full_cores_only(config: KubeletConfig) -> bool:
    return config.cpu_manager_policy == "static" and (
        config.cpu_manager_policy_options.get("full-pcpus-only", "").lower() == "true"
    )


def check_kubelet_reserved_incoherent(host: Host, intent: Intent) -> Iterator[Finding]:
    config: KubeletConfig = require(host, "kubelet_config")
    reserved = config.reserved_cpus
    if not reserved:
        return  # no CPU list: the quantities are the reservation, nothing to disagree with
    quantities = [
        (name, values["cpu"])
        for name, values in (("system-reserved", config.system_reserved), ("kube-reserved", config.kube_reserved))
        if "cpu" in values
    ]
    listed = format_cpulist(reserved)
    if quantities:
        said = " and ".join(f"{name} cpu={value}" for name, value in quantities)
        yield KUBELET_RESERVED_INCOHERENT.finding(
            intent,
            {
                "reason": "cpu_reservation_ignored",
                "setting": ",".join(name for name, _ in quantities),
                "value": ",".join(value for _, value in quantities),
                "cpus": listed,
            },
            f"{said} is set together with reserved-cpus={listed} ({len(reserved)} CPUs): the kubelet reserves the "
            "CPU list and ignores the cpu quantities for CPU allocation, so one of the two statements is wrong",
            "keep reserved-cpus (the list the CPU Manager and the host's isolcpus must agree on) and drop cpu= from "
            "system-reserved and kube-reserved, keeping their memory; then restart the kubelet",
        )
    if not full_cores_only(config):
        return
    topology: Topology = require(host, "topology")
    split: set[int] = set()
    for cpu in sorted(reserved & topology.online):
        known = topology.cpus.get(cpu)
        if known is None or not known.siblings:
            continue
        siblings = known.siblings & topology.online
        if not siblings <= reserved:
            split |= siblings
    if not split:
        return
    whole = reserved | frozenset(split)
    change = set_setting(config, "reserved-cpus", "reservedSystemCPUs", format_cpulist(whole))
    yield KUBELET_RESERVED_INCOHERENT.finding(
        intent,
        {
            "reason": "reserved_cpus_split_cores",
            "setting": "reserved-cpus",
            "value": listed,
            "cpus": format_cpulist(split - reserved),
            "expected": format_cpulist(whole),
        },
        f"reserved-cpus={listed} takes part of the cores {format_cpulist(split)} while the CPU Manager hands out "
        f"whole cores only (full-pcpus-only=true): their other threads {format_cpulist(split - reserved)} stay in the "
        "shared pool and can never be given exclusively",
        restart_steps(config, change, f"{kubelet_root(config)}/cpu_manager_state")
        + " (or reserve fewer whole cores; isolcpus= must then leave the same CPUs out)",
    )


KUBELET_RESERVED_INCOHERENT = Check(
    id="kubelet_reserved_incoherent",
    severity="info",
    summary="system-reserved/kube-reserved cpu set together with reserved-cpus, or reserved-cpus splits cores "
    "under full-pcpus-only.",
    remediation="reserve CPUs with reserved-cpus alone, in whole cores when the CPU Manager allocates full cores",
    run=check_kubelet_reserved_incoherent,
    inputs=(KUBELET_CONFIG,),
    knob="9",
)

CHECKS: tuple[Check, ...] = (KUBELET_RESERVED_INCOHERENT,)
