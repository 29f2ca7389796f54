"""Capacity metric families: what each NUMA node can still hand out, and how many more replicas of each
named pod shape this node would admit under its Topology Manager policy and scope.

Each quantity is split by unit, one family per unit (Prometheus' naming rule: never two units in one family):
``_cpus`` (exclusive CPUs, logical CPUs as the kubelet counts them), ``_bytes`` (Memory Manager memory and huge
pages) and ``_devices`` (device-plugin resources). ``resource`` follows kube-state-metrics'
``kube_node_status_allocatable`` spelling (``memory``, ``hugepages-1Gi``, ``nvidia.com/gpu``) so the two join on it;
the CPU families need no ``resource`` label, they are only ``cpu``. A dimension numawatch cannot count (the CPU
Manager is not static, the Memory Manager is not Static, a state file is unreadable) has no series; every family is
emitted, empty when there is nothing to say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from numawatch.capacity import (
    MAX_REPLICAS,
    Capacity,
    CapacityUnavailable,
    ReplicaAnswers,
    build_capacity,
    largest_fit,
    replicas,
)
from numawatch.checks import Evaluation
from numawatch.inputs import GPUS, KUBELET_CONFIG, KUBELET_STATE, NVML, POD_LISTING, TOPOLOGY, exposes
from numawatch.metrics.exposition import GaugeRows
from numawatch.shapes import CPU, Shape

# The unit suffix of each family and the resources that belong to it.
CPUS, BYTES, DEVICES = "cpus", "bytes", "devices"
UNITS = (CPUS, BYTES, DEVICES)


def unit_of(resource: str) -> str:
    if resource == CPU:
        return CPUS
    if resource == "memory" or resource.startswith("hugepages-"):
        return BYTES
    return DEVICES


def _node(node: int | None) -> str:
    # A device registered without NUMA topology belongs to no node: the label is empty, as for anything unknown.
    return "" if node is None else str(node)


def _by_unit(name: str, help_by_unit: Mapping[str, str], values: Mapping[tuple[int | None, str], int]) -> list[Metric]:
    """One family per unit: ``<name>_cpus{numa_node}``, ``<name>_bytes`` and ``<name>_devices{numa_node,resource}``."""
    out: dict[str, GaugeRows] = {
        CPUS: GaugeRows(f"{name}_{CPUS}", help_by_unit[CPUS], labels=("numa_node",)),
        BYTES: GaugeRows(f"{name}_{BYTES}", help_by_unit[BYTES], labels=("numa_node", "resource")),
        DEVICES: GaugeRows(f"{name}_{DEVICES}", help_by_unit[DEVICES], labels=("numa_node", "resource")),
    }
    for (node, resource), value in values.items():
        unit = unit_of(resource)
        out[unit].rows.append((_node(node), value) if unit == CPUS else (_node(node), resource, value))
    return [out[unit] for unit in UNITS]


def _allocatable(capacity: Capacity | None) -> list[Metric]:
    return _by_unit("numawatch_capacity_allocatable", {
        CPUS: "Exclusive CPUs the kubelet's CPU Manager can hand out per NUMA node: online, not reserved (whole "
              "cores only under full-pcpus-only).",
        BYTES: "Memory and huge pages the kubelet's Memory Manager can hand out per NUMA node and resource, in bytes "
               "(memory_manager_state).",
        DEVICES: "Devices the device plugin registered per NUMA node and resource (numa_node empty: registered "
                 "without topology).",
    }, _allocatable_values(capacity))


def _allocatable_values(capacity: Capacity | None) -> dict[tuple[int | None, str], int]:
    values: dict[tuple[int | None, str], int] = {}
    if capacity is None:
        return values
    if capacity.allocatable_cpus is not None:
        values.update({(node, CPU): len(cpus) for node, cpus in capacity.allocatable_cpus.items()})
    if capacity.memory is not None:
        for node, state in capacity.memory.items():
            values.update({(node, resource): table.allocatable for resource, table in state.memory_map.items()})
    for resource, device in capacity.devices.items():
        if device.aligned:
            values.update({(node, resource): len(device.on_node(node)) for node in capacity.node_ids})
            if device.without_topology:
                values[(None, resource)] = len(device.without_topology)
        else:
            values[(None, resource)] = len(device.topology)
    return values


def _free(capacity: Capacity | None) -> list[Metric]:
    return _by_unit("numawatch_capacity_free", {
        CPUS: "Exclusive CPUs still free for the next pod per NUMA node: in no container's exclusive set (whole free "
              "cores only under full-pcpus-only); entries of pods that are gone count as free.",
        BYTES: "Memory Manager memory and huge pages still free for the next pod per NUMA node and resource, in bytes; "
               "blocks of pods that are gone count as free.",
        DEVICES: "Registered devices no container holds per NUMA node and resource; devices of pods that are gone "
                 "count as free.",
    }, _free_values(capacity))


def _free_values(capacity: Capacity | None) -> dict[tuple[int | None, str], int]:
    rows: dict[tuple[int | None, str], int] = {}
    if capacity is None:
        return rows
    if capacity.free_cpus is not None:
        rows.update({(node, CPU): len(cpus) for node, cpus in capacity.free_cpus.items()})
    if capacity.memory is not None:
        for node, state in capacity.memory.items():
            rows.update({(node, resource): table.free for resource, table in state.memory_map.items()})
    for resource, device in capacity.devices.items():
        free = device.free
        if device.aligned:
            rows.update({(node, resource): len(device.on_node(node) & free) for node in capacity.node_ids})
            if device.without_topology:
                rows[(None, resource)] = len(device.without_topology & free)
        else:
            rows[(None, resource)] = len(free)
    return rows


def _largest_fit(capacity: Capacity | None) -> list[Metric]:
    return _by_unit("numawatch_capacity_largest_fit", {
        CPUS: "The most exclusive CPUs a pod could still get on that NUMA node alone.",
        BYTES: "The largest request of memory or huge pages, in bytes, a pod could still get on that NUMA node alone "
               "(0 while an earlier multi-node allocation groups the node with others).",
        DEVICES: "The most devices of the resource a pod could still get on that NUMA node alone; numa_node empty for "
                 "devices registered without topology, usable from any node.",
    }, largest_fit(capacity) if capacity is not None else {})


def _shape_replicas(capacity: Capacity | None, shapes: Sequence[Shape], answers: ReplicaAnswers | None) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_capacity_shape_replicas",
        "How many more pods of the intent's named shape this node would admit now, one after another, under its "
        f"Topology Manager policy and scope and its CPU Manager options (at most {MAX_REPLICAS}); absent when "
        "numawatch cannot tell.",
        labels=("shape",),
    )
    if capacity is None:
        return family
    for shape in shapes:
        count = replicas(capacity, shape, answers)
        if count is not None:
            family.add_metric((shape.name,), count)
    return family


@exposes(
    "numawatch_capacity_allocatable_cpus",
    "numawatch_capacity_allocatable_bytes",
    "numawatch_capacity_allocatable_devices",
    "numawatch_capacity_free_cpus",
    "numawatch_capacity_free_bytes",
    "numawatch_capacity_free_devices",
    "numawatch_capacity_largest_fit_cpus",
    "numawatch_capacity_largest_fit_bytes",
    "numawatch_capacity_largest_fit_devices",
    "numawatch_capacity_shape_replicas",
    inputs=(KUBELET_CONFIG, KUBELET_STATE, POD_LISTING, GPUS, NVML, TOPOLOGY),
)
def families(
    evaluation: Evaluation, shapes: Sequence[Shape] | None = None, answers: ReplicaAnswers | None = None
) -> Iterable[Metric]:
    """The capacity families of one evaluation; ``shapes`` defaults to the intent's named shapes; ``answers`` are the
    replica counts kept across evaluations by the caller (None: worked out for this one)."""
    if shapes is None:
        shapes = getattr(evaluation.intent, "shapes", ())
    try:
        capacity: Capacity | None = build_capacity(evaluation.host, evaluation.intent)
    except CapacityUnavailable:
        capacity = None
    return [
        *_allocatable(capacity), *_free(capacity), *_largest_fit(capacity), _shape_replicas(capacity, shapes, answers)
    ]
