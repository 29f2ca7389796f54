"""Whether the firmware's NUMA topology agrees with itself (knob h1: read the map before pinning anything).

Every other check trusts the CPU-to-node map, so a map the firmware got wrong is worth a finding of its own. The
kernel takes the ACPI SRAT/SLIT (or the device tree) as it is; what numawatch can see in sysfs:

- NUMA nodes whose ``cpulist`` name the same CPUs (a buggy SRAT; seen as every node claiming every CPU). The
  topology source maps such a CPU to the lowest node that claims it, as hwloc does, and the finding says so;
- an online CPU that no node lists, on a kernel with NUMA (a node the kernel left offline, a CPU the SRAT forgot):
  it has no NUMA node, so no check can tell whether its work is local;
- a GPU whose ``numa_node`` disagrees with its ``local_cpulist`` (the kernel takes the first from the device's
  ``_PXM``, the second from its bus, or someone wrote ``numa_node`` by hand);
- a distance table (``nodeN/distance``) that is not square and symmetric: the kernel's and the Topology Manager's
  notion of "closest node" comes from it.
"""

from __future__ import annotations

from collections.abc import Iterator

from numawatch.checks.check import Check, Finding, NotEvaluated, partial_topology
from numawatch.cpuset import format_cpulist
from numawatch.host import Host
from numawatch.inputs import GPUS, TOPOLOGY
from numawatch.intent import Intent
from numawatch.model.gpu import GpuInventory
from numawatch.model.topology import Topology

FIRMWARE_REMEDIATION = (
    "update the BIOS/firmware and check its NUMA settings (SRAT/SLIT, NUMA per socket / sub-NUMA clustering, "
    "node interleaving off); on a VM, give the guest a consistent vNUMA topology; until then, pin by the map hwloc "
    "(lstopo) and numawatch_cpu_info show, not by what each file says"
)


def overlapping_nodes(topology: Topology) -> Iterator[tuple[int, frozenset[int], tuple[int, ...]]]:
    """(node, CPUs its cpulist shares with lower nodes, those lower nodes) for every node that overlaps one."""
    ids = topology.node_ids
    for index, node_id in enumerate(ids):
        claimed = topology.nodes[node_id].claimed_cpus
        shared: set[int] = set()
        lower: list[int] = []
        for other in ids[:index]:
            common = claimed & topology.nodes[other].claimed_cpus
            if common:
                shared |= common
                lower.append(other)
        if shared:
            yield node_id, frozenset(shared), tuple(lower)


def distance_problems(topology: Topology) -> Iterator[str]:
    """One phrase per way the distance table is not square and symmetric."""
    ids = topology.node_ids
    rows = {node_id: topology.nodes[node_id].distances for node_id in ids}
    for node_id, row in rows.items():
        if len(row) != len(ids):
            yield f"node{node_id}/distance has {len(row)} entries for {len(ids)} nodes"
    for i, a in enumerate(ids):
        for j in range(i + 1, len(ids)):
            b = ids[j]
            if j < len(rows[a]) and i < len(rows[b]) and rows[a][j] != rows[b][i]:
                yield f"distance {a}->{b} is {rows[a][j]} but {b}->{a} is {rows[b][i]}"


def check_numa_topology(host: Host, intent: Intent) -> Iterator[Finding]:
    topology: Topology = partial_topology(host)
    findings: list[Finding] = []
    for node_id, shared, lower in overlapping_nodes(topology):
        cpus = format_cpulist(shared)
        others = ", ".join(str(other) for other in lower)
        findings.append(
            NUMA_TOPOLOGY_INCONSISTENT.finding(
                intent,
                {"reason": "overlapping_cpulists", "numa_node": str(node_id), "cpus": cpus},
                f"NUMA node {node_id}'s cpulist names CPUs {cpus}, which node{'s' if len(lower) > 1 else ''} "
                f"{others} list too: the firmware's SRAT gives these CPUs more than one node. numawatch maps each "
                "to the lowest node that claims it, as hwloc does; the kernel's own placement may differ",
                FIRMWARE_REMEDIATION,
            )
        )
    if topology.numa and topology.problem("cpulist") is None:
        orphans = frozenset(cpu.id for cpu in topology.cpus.values() if cpu.online and cpu.numa_node is None)
        if orphans:
            cpus = format_cpulist(orphans)
            findings.append(
                NUMA_TOPOLOGY_INCONSISTENT.finding(
                    intent,
                    {"reason": "cpu_without_node", "cpus": cpus},
                    f"online CPUs {cpus} are in no NUMA node's cpulist (nodes: "
                    f"{', '.join(str(n) for n in topology.node_ids)}): their node is unknown, so neither the "
                    "kubelet's Topology Manager nor numawatch can tell whether work on them is local",
                    FIRMWARE_REMEDIATION,
                )
            )
    if topology.problem("cpulist") is None:
        findings.extend(_gpu_locality(topology, host.gpus, intent))
    # A node that names its CPUs nowhere leaves "which CPU is in no node" unknown, as a missing distance file
    # leaves the table unknown.
    unknown: list[str | None] = [topology.problem("cpulist"), topology.problem("distance")]
    if host.gpus is not None:
        unknown += [*host.gpus.unreadable("numa_node"), *host.gpus.unreadable("local_cpulist")]
    if topology.problem("distance") is None:
        problems = list(distance_problems(topology))
        if problems:
            findings.append(
                NUMA_TOPOLOGY_INCONSISTENT.finding(
                    intent,
                    {"reason": "distance_table"},
                    "the NUMA distance table (nodeN/distance, from the firmware's SLIT) is not square and "
                    f"symmetric: {'; '.join(problems)}",
                    FIRMWARE_REMEDIATION,
                )
            )
    reasons = [reason for reason in unknown if reason]
    if not findings and reasons:
        # What could be read agrees with itself; whether the rest does is unknown.
        raise NotEvaluated(reasons[0])
    yield from findings


def _gpu_locality(topology: Topology, inventory: GpuInventory | None, intent: Intent) -> Iterator[Finding]:
    if inventory is None or len(topology.nodes) < 2:
        return
    for gpu in inventory.gpus:
        if gpu.numa_node is None or gpu.local_cpus is None or gpu.numa_node not in topology.nodes:
            continue  # an unknown node (or an unreadable attribute) is gpu_numa_unknown's business
        local = gpu.local_cpus & topology.online
        node_cpus = topology.nodes[gpu.numa_node].claimed_cpus
        if not local or local == node_cpus:
            continue
        yield NUMA_TOPOLOGY_INCONSISTENT.finding(
            intent,
            {"reason": "gpu_locality", "gpu": gpu.pci_address, "numa_node": str(gpu.numa_node)},
            f"GPU {gpu.pci_address} reports numa_node {gpu.numa_node} (CPUs {format_cpulist(node_cpus)}) but its "
            f"local_cpulist is {format_cpulist(local)}: the device's _PXM and its PCI bus disagree (or numa_node "
            "was written by hand), so tools that read one or the other pin its threads differently",
            FIRMWARE_REMEDIATION,
        )


NUMA_TOPOLOGY_INCONSISTENT = Check(
    id="numa_topology_inconsistent",
    severity="warning",
    summary="The firmware's NUMA topology contradicts itself (overlapping node CPU lists, an online CPU in no node, "
    "a GPU's numa_node against its local_cpulist, an asymmetric distance table).",
    remediation=FIRMWARE_REMEDIATION,
    run=check_numa_topology,
    inputs=(TOPOLOGY, GPUS),
    knob="h1",
)

CHECKS: tuple[Check, ...] = (NUMA_TOPOLOGY_INCONSISTENT,)
