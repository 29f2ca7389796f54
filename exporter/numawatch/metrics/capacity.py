"""Capacity metric families (issue 5): what each NUMA node can still hand out, and how many more replicas of each
named pod shape this node would admit under its Topology Manager policy and scope.

Resources follow kube-state-metrics' ``kube_node_status_allocatable`` spelling (``resource`` and ``unit`` labels:
``cpu``/``core``, ``memory`` and ``hugepages-<size>``/``byte``, device resources/``integer``) so the two join on
``resource``. A dimension numawatch cannot count (the CPU Manager is not static, the Memory Manager is not Static, a
state file is unreadable) has no series; every family is emitted, empty when there is nothing to say.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from numawatch.capacity import MAX_REPLICAS, Capacity, CapacityUnavailable, build_capacity, largest_fit, replicas
from numawatch.checks import Evaluation
from numawatch.shapes import CPU, Shape

CAPACITY_LABELS = ("numa_node", "resource", "unit")


def _unit(resource: str) -> str:
    if resource == CPU:
        return "core"
    if resource == "memory" or resource.startswith("hugepages-"):
        return "byte"
    return "integer"


def _node(node: int | None) -> str:
    # A device registered without NUMA topology belongs to no node: the label is empty, as for anything unknown.
    return "" if node is None else str(node)


def _allocatable(capacity: Capacity | None) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_capacity_allocatable",
        "What the kubelet can hand out per NUMA node and resource: exclusive CPUs (online, not reserved; whole "
        "cores only under full-pcpus-only), Memory Manager memory and huge pages in bytes (memory_manager_state), "
        "and devices the device plugin registered on the node (numa_node empty: registered without topology).",
        labels=CAPACITY_LABELS,
    )
    for (node, resource), value in _allocatable_values(capacity).items():
        family.add_metric((_node(node), resource, _unit(resource)), value)
    return family


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


def _free(capacity: Capacity | None) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_capacity_free",
        "What is still free for the next pod per NUMA node and resource: exclusive CPUs in no container's exclusive "
        "set (whole free cores only under full-pcpus-only), free Memory Manager memory and huge pages in bytes, and "
        "registered devices no container holds; entries of pods that are gone count as free.",
        labels=CAPACITY_LABELS,
    )
    if capacity is None:
        return family
    rows: dict[tuple[int | None, str], int] = {}
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
    for (node_id, resource), value in rows.items():
        family.add_metric((_node(node_id), resource, _unit(resource)), value)
    return family


def _largest_fit(capacity: Capacity | None) -> Metric:
    family = GaugeMetricFamily(
        "numawatch_capacity_largest_fit",
        "The largest request of the resource a pod could still get on that NUMA node alone (0 for memory while an "
        "earlier multi-node allocation groups the node with others); numa_node empty for devices registered without "
        "topology, usable from any node.",
        labels=CAPACITY_LABELS,
    )
    if capacity is None:
        return family
    for (node, resource), value in largest_fit(capacity).items():
        family.add_metric((_node(node), resource, _unit(resource)), value)
    return family


def _shape_replicas(capacity: Capacity | None, shapes: Sequence[Shape]) -> Metric:
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
        count = replicas(capacity, shape)
        if count is not None:
            family.add_metric((shape.name,), count)
    return family


def families(evaluation: Evaluation, shapes: Sequence[Shape] | None = None) -> Iterable[Metric]:
    """The capacity families of one evaluation; ``shapes`` defaults to the intent's named shapes."""
    if shapes is None:
        shapes = getattr(evaluation.intent, "shapes", ())
    try:
        capacity: Capacity | None = build_capacity(evaluation.host, evaluation.intent)
    except CapacityUnavailable:
        capacity = None
    return [_allocatable(capacity), _free(capacity), _largest_fit(capacity), _shape_replicas(capacity, shapes)]
