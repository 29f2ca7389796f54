"""The admission simulation against the kubelet's rules on model-level capacities (no files), where a test can name
every hint: merge choices, the Memory Manager's node groups, and the shortcut that generates only preferred hints
under single-numa-node and restricted, checked against generating them all."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from numawatch import capacity as capacity_module
from numawatch.capacity import (
    Capacity,
    DeviceResource,
    _Sim,
    replicas,
)
from numawatch.model import frozen_map
from numawatch.model.kubelet import MemoryNodeState, MemoryTable
from numawatch.shapes import parse_shape

GiB = 1 << 30
GPU = "nvidia.com/gpu"


def capacity(
    free_cpus: list[int],
    *,
    policy: str = "single-numa-node",
    scope: str = "pod",
    node_cpus: int = 8,
    memory_free: list[int] | None = None,
    memory_allocatable: int = 16 * GiB,
    cells: list[tuple[int, ...]] | None = None,
    assignments: list[int] | None = None,
    gpus: dict[str, frozenset[int]] | None = None,
    gpus_held: frozenset[str] = frozenset(),
    distances: dict[tuple[int, int], int] | None = None,
    prefer_closest: bool = False,
) -> Capacity:
    nodes = tuple(range(len(free_cpus)))
    cpus = {n: frozenset(range(n * 100, n * 100 + node_cpus)) for n in nodes}
    free = {n: frozenset(range(n * 100, n * 100 + free_cpus[n])) for n in nodes}
    memory = None
    if memory_free is not None:
        memory = {
            n: MemoryNodeState(
                number_of_assignments=(assignments or [0] * len(nodes))[n],
                memory_map=frozen_map(
                    {"memory": MemoryTable(memory_allocatable, 0, memory_allocatable, 0, memory_free[n])}
                ),
                cells=(cells or [(n,) for n in nodes])[n],
            )
            for n in nodes
        }
    devices = {}
    if gpus is not None:
        devices[GPU] = DeviceResource(GPU, frozen_map(gpus), frozenset(gpus_held))
    return Capacity(
        topology_manager_policy=policy,
        topology_manager_scope=scope,
        cpu_manager_policy="static",
        memory_manager_policy="Static" if memory is not None else "None",
        full_pcpus_only=False,
        distribute_cpus_across_numa=False,
        prefer_closest_numa_nodes=prefer_closest,
        threads_per_core=2,
        node_ids=nodes,
        node_cpus=frozen_map({n: node_cpus for n in nodes}),
        reserved_cpus=frozenset(),
        allocatable_cpus=frozen_map(cpus),
        free_cpus=frozen_map(free),
        memory=frozen_map(memory) if memory is not None else None,
        devices=frozen_map(devices),
        distances=frozen_map(distances or {}),
    )


def admit(cap: Capacity, text: str):
    return _Sim(cap).admit(parse_shape(text))


def test_single_numa_node_takes_the_lowest_node_where_cpu_memory_and_gpu_all_fit():
    cap = capacity(
        [8, 8, 8],
        memory_free=[1 * GiB, 8 * GiB, 8 * GiB],
        gpus={"g0": frozenset({0}), "g1": frozenset({1}), "g2": frozenset({2})},
        gpus_held=frozenset({"g1"}),
    )

    outcome = admit(cap, "cpu=4,memory=2Gi,nvidia.com/gpu=1")

    assert outcome.admitted and outcome.placement == (0b100,)


def test_a_gpu_plugin_with_topology_on_some_devices_only_aligns_with_those():
    # g-loose has no topology: it counts in no mask, so a 2-GPU pod cannot be aligned with it.
    cap = capacity([8, 8], gpus={"g0": frozenset({0}), "g-loose": frozenset()})

    assert not admit(cap, "cpu=2,memory=1Gi,nvidia.com/gpu=2").admitted


def test_memory_hint_is_no_preference_when_nothing_fits_and_the_memory_manager_then_refuses():
    cap = capacity([8, 8], memory_free=[1 * GiB, 1 * GiB])

    outcome = admit(cap, "cpu=2,memory=4Gi")

    assert not outcome.admitted
    assert outcome.error == "UnexpectedAdmissionError"
    assert "cannot widen them" in outcome.reason


def test_best_effort_spreads_memory_over_a_new_group_and_that_group_then_blocks_single_node_memory():
    cap = capacity([8, 8], policy="best-effort", memory_free=[10 * GiB, 10 * GiB])
    sim = _Sim(cap)

    first = sim.admit(parse_shape("cpu=2,memory=14Gi"))

    assert first.admitted and first.placement == (0b11,)
    assert sim.memory[0].cells == (0, 1) and sim.memory[1].cells == (0, 1)
    assert sim.memory_hints({"memory": GiB}) == [(0b11, False)]


def test_container_scope_places_each_container_with_what_the_previous_one_left():
    cap = capacity([6, 6], scope="container")

    outcome = admit(cap, "cpu=4,memory=1Gi+cpu=4,memory=1Gi")

    assert outcome.admitted and outcome.placement == (0b01, 0b10)


def test_restricted_prefers_the_narrowest_then_the_lowest_pair_of_nodes():
    cap = capacity([0, 8, 8, 8], policy="restricted")

    assert admit(cap, "cpu=12,memory=1Gi").placement == (0b0110,)


def test_prefer_closest_numa_nodes_breaks_ties_by_average_distance():
    distances = {(a, b): 10 if a == b else (11 if a // 2 == b // 2 else 21) for a in range(4) for b in range(4)}
    cap = capacity([0, 8, 8, 8], policy="restricted", distances=distances, prefer_closest=True)

    assert admit(cap, "cpu=12,memory=1Gi").placement == (0b1100,)


def test_best_effort_without_a_preferred_merge_aims_at_the_widest_narrowest_hint():
    # CPUs: only {0,1} holds 10 (non-preferred, a node has 8). GPUs: one free, on node 1 (preferred {1}). No
    # permutation is preferred; the kubelet aims at 2 nodes (the CPU's narrowest hint) and keeps {0,1}.
    gpus = {"g0": frozenset({0}), "g1": frozenset({1})}
    cap = capacity([6, 6], policy="best-effort", gpus=gpus, gpus_held=frozenset({"g0"}))

    outcome = admit(cap, "cpu=10,memory=1Gi,nvidia.com/gpu=1")

    assert outcome.admitted and outcome.placement == (0b11,)


def test_replicas_are_reused_for_the_same_capacity_and_recounted_when_it_changes(monkeypatch):
    shape = parse_shape("cpu=2,memory=1Gi", name="small")
    cap = capacity([8, 8])
    counted: list[object] = []
    real = capacity_module._count_replicas
    monkeypatch.setattr(capacity_module, "_count_replicas", lambda *args: counted.append(args) or real(*args))
    answers = capacity_module.ReplicaAnswers()

    assert replicas(cap, shape, answers) == 8
    assert replicas(replace(cap), shape, answers) == 8
    assert len(counted) == 1  # the same capacity: the answer kept by its owner
    assert replicas(capacity([8, 4]), shape, answers) == 6
    assert len(counted) == 2
    assert replicas(cap, shape) == 8 and len(counted) == 3  # without an owner's answers, nothing is kept


def _random_case(rng: random.Random) -> tuple[Capacity, str]:
    nodes = rng.choice((2, 3, 4))
    policy = rng.choice(("single-numa-node", "restricted"))
    free = [rng.randrange(0, 9) for _ in range(nodes)]
    memory_free = [rng.randrange(0, 17) * GiB for _ in range(nodes)]
    cells: list[tuple[int, ...]] = [(n,) for n in range(nodes)]
    assignments = [rng.randrange(0, 2) for _ in range(nodes)]
    if rng.random() < 0.3:
        cells[0] = cells[1] = (0, 1)
        assignments[0] = assignments[1] = 1
    gpus = {f"g{n}": frozenset({n}) for n in range(nodes)}
    if rng.random() < 0.3:
        gpus["g-loose"] = frozenset()
    held = frozenset(g for g in gpus if rng.random() < 0.4)
    cap = capacity(
        free,
        policy=policy,
        scope=rng.choice(("pod", "container")),
        memory_free=memory_free,
        cells=cells,
        assignments=assignments,
        gpus=gpus,
        gpus_held=held,
    )
    containers = []
    for _ in range(rng.choice((1, 1, 2))):
        parts = [f"cpu={rng.randrange(1, 13)}", f"memory={rng.randrange(1, 21)}Gi"]
        if rng.random() < 0.5:
            parts.append(f"nvidia.com/gpu={rng.randrange(1, 3)}")
        containers.append(",".join(parts))
    return cap, "+".join(containers)


@pytest.mark.parametrize("seed", range(40))
def test_generating_only_preferred_hints_admits_exactly_as_generating_them_all(seed):
    rng = random.Random(seed)
    for _ in range(10):
        cap, text = _random_case(rng)
        shape = parse_shape(text)
        fast, full = _Sim(cap), _Sim(cap)
        full.preferred_only = False
        for _ in range(6):
            a, b = fast.admit(shape), full.admit(shape)
            assert (a.admitted, a.placement, a.error) == (b.admitted, b.placement, b.error), (seed, text)
            if not a.admitted:
                break
