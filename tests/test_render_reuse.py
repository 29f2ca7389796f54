"""What serve carries from one reading to the next (the per-container rows of unchanged pods, the device IRQ join, the
interrupt deltas) renders and finds exactly what evaluating the same reading from scratch does, through a node that
changes; and the parts that are reused are the previous reading's, found by generation numbers (``Host.store``)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import readings
from fakehost.kernel import FakeIrq, add_irqs
from fakehost.pods import remove_pod
from fakehost.reference import (
    DEFAULT_CPUSET,
    GPU_IRQ_BASE,
    GPUS,
    HOUSEKEEPING,
    ISOLATED,
    ONLINE,
    TRTLLM,
    VLLM,
    reference_node,
    reference_snapshot,
    replace_container,
    with_results,
)
from numawatch import metrics, workloads
from numawatch.capacity import build_capacity
from numawatch.checks import evaluate
from numawatch.host import Host, HostReader
from numawatch.intent import REFERENCE
from numawatch.metrics import core
from numawatch.metrics import host as host_metrics
from numawatch.metrics.core import EvaluationStats
from numawatch.model import frozen_map
from numawatch.model.interrupts import INTERRUPT_KINDS, InterruptRow, Interrupts
from numawatch.model.workloads import QOS_BURSTABLE
from numawatch.refresh import POLICIES
from numawatch.workloads import build_workloads


def stats() -> EvaluationStats:
    fixed = EvaluationStats()
    fixed.observe(0.25, 1_700_000_000.0)
    return fixed


from_scratch = readings.from_scratch


def outcome(evaluation) -> tuple:
    return (
        [finding.as_dict() for finding in evaluation.findings],
        [(item.check, item.reason) for item in evaluation.not_evaluated],
    )


# ------------------------------------------------------------------------------------------------ a changing node
def write_irqs(node, step: int, *, on_isolated: int | None = None) -> None:
    """The reference node's IRQs with every counter moved on by ``step`` (as a busy node's do); ``on_isolated`` moves
    the first GPU's vector onto that isolated CPU, where it counts too."""
    housekeeping_of = {0: 0, 1: 8}
    irqs = [
        FakeIrq(0, "timer", HOUSEKEEPING, frozenset({0}), {0: 120 + step}, chip="IO-APIC", hwirq="2-edge"),
        FakeIrq(9, "acpi", HOUSEKEEPING, frozenset({0}), {0: 3}, chip="IO-APIC", hwirq="9-fasteoi"),
    ]
    for index, gpu in enumerate(GPUS):
        target = housekeeping_of[gpu.numa_node]
        counts = {target: 1000 + 100 * step}
        affinity, effective = HOUSEKEEPING, frozenset({target})
        if index == 0 and on_isolated is not None:
            affinity = effective = frozenset({on_isolated})
            counts[on_isolated] = 50 * step
        irqs.append(
            FakeIrq(GPU_IRQ_BASE + index, "nvidia", affinity, effective, counts,
                    chip="PCI-MSIX-" + gpu.pci_address, hwirq="0-edge", node=gpu.numa_node)
        )  # fmt: skip
    online = sorted(ONLINE)
    named = {
        "LOC": {cpu: 5000 + 250 * step if cpu in HOUSEKEEPING else 1 + step for cpu in online},
        "RES": {cpu: 10 + step for cpu in online if cpu % 3 == 0},
        "NMI": {cpu: 7 for cpu in online},
    }
    add_irqs(node.host, online, irqs, named, default_affinity=HOUSEKEEPING)


CHANGES = [
    ("first reading", lambda node: write_irqs(node, 0)),
    ("nothing changed", lambda node: None),
    ("counters moved", lambda node: write_irqs(node, 1)),
    ("a container intruded on exclusive CPUs", lambda node: node.intrude()),
    ("memory moved to a remote node", lambda node: node.spill_memory()),
    ("counters moved again", lambda node: write_irqs(node, 2)),
    ("a container split across NUMA nodes", lambda node: node.split_across_nodes()),
    ("an IRQ moved onto an isolated CPU", lambda node: write_irqs(node, 3, on_isolated=min(ISOLATED))),
    ("it keeps firing there", lambda node: write_irqs(node, 4, on_isolated=min(ISOLATED))),
    ("a pod turned Burstable", lambda node: node.make_burstable()),
    ("a CPU went offline", lambda node: node.take_cpu_offline()),
    ("the kubelet reserved other CPUs", lambda node: node.set_reserved_cpus()),
    ("a pod was deleted", lambda node: remove_pod(node.host, node.pod(TRTLLM))),
    ("nothing changed again", lambda node: None),
]


@pytest.mark.parametrize("cgroup_version", [2, 1])
@pytest.mark.slow
def test_every_reading_of_a_changing_node_renders_and_finds_what_a_from_scratch_evaluation_does(
    fake_host, cgroup_version
):
    node = reference_node(fake_host, cgroup_version=cgroup_version)
    reader = HostReader(node.paths, stagger=2)
    renderer = metrics.Renderer()
    bodies = set()
    for what, change in CHANGES:
        change(node)
        host = reader.read()
        evaluation = evaluate(host, REFERENCE)
        scratch = evaluate(from_scratch(host), REFERENCE)

        body = renderer.render(evaluation, stats())
        assert body == metrics.render(scratch, stats()), what
        assert outcome(evaluation) == outcome(scratch), what
        bodies.add(body)
    assert len(bodies) > len(CHANGES) // 2  # the changes did change the exposition


@pytest.mark.slow
def test_the_node_above_fires_what_its_changes_plant(fake_host):
    node = reference_node(fake_host)
    reader = HostReader(node.paths, stagger=2)
    fired: set[str] = set()
    # A change to a stretched family (the IRQ affinities, memory placement) shows within its longer round (stagger
    # 2 times its stretch), before the next change can undo what it planted.
    longest = max((times for policy in POLICIES.values() for times in policy.stretch.values()), default=1)
    for _, change in CHANGES:
        change(node)
        for _ in range(2 * longest):
            fired |= {finding.check for finding in evaluate(reader.read(), REFERENCE).findings}

    assert {
        "container_memory_remote",
        "container_numa_split",
        "irq_on_isolated_cpu",
        "irq_activity_on_isolated_cpu",
        "pod_not_guaranteed",
        "exclusive_cpu_overlap",
    } <= fired


# ------------------------------------------------------------------------------------------------ per-pod rows
next_reading = readings.next_reading


def family_rows(host: Host) -> dict[str, tuple]:
    evaluation = evaluate(host, REFERENCE)
    return {
        "cpus": tuple(core.container_cpus(evaluation).rows),
        "memory": tuple(host_metrics.container_numa_memory(evaluation).rows),
    }


def rows_of_pod(rows: tuple, uid: str) -> list:
    return [row for row in rows if row[2] == uid]


def test_an_unchanged_reading_gives_back_the_previous_readings_rows():
    first = readings.as_reading(reference_snapshot())
    before = family_rows(first)

    after = family_rows(next_reading(first))

    for name in ("cpus", "memory"):
        assert after[name] and len(after[name]) == len(before[name])
        assert all(new is old for new, old in zip(after[name], before[name], strict=True)), name


def test_a_changed_pod_gets_new_rows_and_the_other_pods_keep_theirs():
    first = readings.as_reading(reference_snapshot())
    before = family_rows(first)
    changed = replace_container(first, VLLM.container.container_id, cpus_effective=DEFAULT_CPUSET,
                                numa_bytes=frozen_map({0: 1 << 30, 1: 3 << 30}))  # fmt: skip
    pods = tuple(
        new if new.uid == VLLM.uid else old for old, new in zip(first.cgroups.pods, changed.cgroups.pods, strict=True)
    )
    second = next_reading(first, cgroups=replace(changed.cgroups, pods=pods))

    after = family_rows(second)

    assert after == family_rows(from_scratch(second))
    for name in ("cpus", "memory"):
        kept = {id(row) for row in before[name]}
        for pod in pods:
            reused = [id(row) in kept for row in rows_of_pod(after[name], pod.uid)]
            assert reused and all(reused) == (pod.uid != VLLM.uid) and any(reused) == (pod.uid != VLLM.uid), name


def test_a_new_topology_makes_the_cpu_rows_again():
    first = readings.as_reading(reference_snapshot())
    before = family_rows(first)

    after = family_rows(next_reading(first, topology=replace(first.topology)))  # equal, but read again

    assert after["cpus"] == before["cpus"]
    assert not any(new is old for new, old in zip(after["cpus"], before["cpus"], strict=True))
    assert all(new is old for new, old in zip(after["memory"], before["memory"], strict=True))


def test_the_cpu_rows_and_threads_per_core_are_an_earlier_readings_until_topology_or_kubelet_config_is_read_again():
    """numawatch_cpu_info (a row per CPU) and the capacity's threads per core are made of the topology and the
    kubelet's reserved CPUs alone: the previous reading's objects while neither source was read again, made anew
    (and the same as from scratch) once one was."""
    first = readings.as_reading(reference_snapshot())
    before = core.cpu_info(evaluate(first, REFERENCE))
    threads = build_capacity(first, REFERENCE).threads_per_core

    unchanged = next_reading(first)
    assert core.cpu_info(evaluate(unchanged, REFERENCE)) is before
    assert build_capacity(unchanged, REFERENCE).threads_per_core == threads

    assert first.kubelet_config is not None
    reserved = frozenset({0, 1, 8, 9})
    reconfigured = next_reading(unchanged, kubelet_config=replace(first.kubelet_config, reserved_cpus=reserved))
    after = core.cpu_info(evaluate(reconfigured, REFERENCE))
    fresh = core.cpu_info(evaluate(from_scratch(reconfigured), REFERENCE))
    assert after is not before and after.rows == fresh.rows != before.rows
    assert {row[0] for row in after.rows if row[5] == "true"} == {str(cpu) for cpu in reserved}

    assert first.topology is not None
    offline = min(ISOLATED)
    cpus = {cpu: replace(info, online=False) if cpu == offline else info for cpu, info in first.topology.cpus.items()}
    topology = replace(first.topology, cpus=frozen_map(cpus), online=first.topology.online - {offline})
    moved = next_reading(reconfigured, topology=topology)
    again = core.cpu_info(evaluate(moved, REFERENCE))
    assert again is not after and again.rows == core.cpu_info(evaluate(from_scratch(moved), REFERENCE)).rows
    fresh_threads = build_capacity(from_scratch(moved), REFERENCE).threads_per_core
    assert build_capacity(moved, REFERENCE).threads_per_core == fresh_threads != threads


def test_the_rows_of_a_deleted_pod_are_not_kept():
    first = readings.as_reading(reference_snapshot())
    family_rows(first)
    pods = tuple(pod for pod in first.cgroups.pods if pod.uid != TRTLLM.uid)
    second = next_reading(first, cgroups=replace(first.cgroups, pods=pods))

    after = family_rows(second)
    family_rows(next_reading(second))  # a reading later, what only the first reading asked for is gone

    assert not rows_of_pod(after["cpus"], TRTLLM.uid) and not rows_of_pod(after["memory"], TRTLLM.uid)
    # One table per family (workloads.per_pod), of the pods of the readings it is kept for, by pod key: none of the
    # keys the deleted pod's join had is among them.
    joined = workloads._joined(first, REFERENCE)
    at = next(index for index, pod in enumerate(first.cgroups.pods) if pod.uid == TRTLLM.uid)
    trtllm_keys = {joined.keys[at], joined.layout_keys[at]}
    names = [key for key in first.store if key[:1] == ("per_pod",) and key[1].startswith("metrics.pod_rows.")]
    kept = [pod_key for name in names for pod_key in readings.stored(first.store, name).keys]
    assert None not in trtllm_keys and kept and not trtllm_keys & set(kept)


def naive_rows(host: Host) -> dict[str, list]:
    """The families' rows as the workload join gives them, one series per label set, the first one listed winning:
    an oracle written without any reuse."""
    evaluation = evaluate(from_scratch(host), REFERENCE)
    topology = host.topology
    cpus_rows, memory_rows, seen = [], [], set()
    for workload in build_workloads(evaluation.host, REFERENCE):
        labels = (workload.namespace or "", workload.pod_name, workload.pod_uid,
                  workload.container_name or workload.container_id[:12])  # fmt: skip
        for node in sorted(topology.node_ids):
            count = len((workload.cpus or frozenset()) & topology.nodes[node].cpus)
            row = (*labels, str(node), workload.qos, "true" if workload.pinned else "false")
            if count and ("cpus", row) not in seen:
                seen.add(("cpus", row))
                cpus_rows.append((*row, count))
        for node, value in sorted((workload.numa_bytes or {}).items()):
            row = (*labels, str(node))
            if value and ("memory", row) not in seen:
                seen.add(("memory", row))
                memory_rows.append((*row, value))
    return {"cpus": cpus_rows, "memory": memory_rows}


def test_two_pod_cgroups_with_one_uid_give_one_series_per_label_set_the_first_listed_winning():
    first = reference_snapshot()
    vllm = next(pod for pod in first.cgroups.pods if pod.uid == VLLM.uid)
    # An old cgroup of the pod lingering under another QoS class, with other memory figures.
    lingering = replace(
        vllm,
        qos=QOS_BURSTABLE,
        containers=tuple(replace(c, numa_bytes=frozen_map({0: 5 << 20, 1: 7 << 20})) for c in vllm.containers),
    )
    host = with_results(first, cgroups=replace(first.cgroups, pods=(*first.cgroups.pods, lingering)))

    rows = family_rows(host)

    assert {name: list(found) for name, found in rows.items()} == naive_rows(host)
    assert len(rows_of_pod(rows["cpus"], VLLM.uid)) > len(rows_of_pod(family_rows(first)["cpus"], VLLM.uid))
    assert rows_of_pod(rows["memory"], VLLM.uid) == rows_of_pod(family_rows(first)["memory"], VLLM.uid)


def test_the_rows_match_the_oracle_on_the_reference_node():
    host = reference_snapshot()

    assert {name: list(found) for name, found in family_rows(host).items()} == naive_rows(host)


# ------------------------------------------------------------------------------------------------ interrupt totals
def random_interrupts(rng: random.Random) -> Interrupts:
    cpus = tuple(range(rng.randint(1, 12)))
    watched = frozenset(cpu for cpu in cpus if rng.random() < 0.6)
    rows = []
    for index in range(rng.randint(0, 25)):
        counts = {cpu: rng.randint(1, 10**13) for cpu in watched if rng.random() < 0.5}
        kind = rng.choice(INTERRUPT_KINDS)
        rows.append(InterruptRow(key=str(index), kind=kind, name=f"irq{index}", counts=frozen_map(counts)))
    return Interrupts(cpus=cpus, watched=watched, rows=tuple(rows), read_at=1.0)


@pytest.mark.parametrize("seed", range(25))
def test_the_interrupt_rows_hold_the_totals_per_watched_cpu_and_kind(seed):
    interrupts = random_interrupts(random.Random(seed))
    host = with_results(reference_snapshot(), interrupts=interrupts)
    expected = dict.fromkeys(((cpu, kind) for cpu in interrupts.watched for kind in INTERRUPT_KINDS), 0)
    for row in interrupts.rows:
        for cpu, count in row.counts.items():
            expected[(cpu, row.kind)] += count

    rows = host_metrics.cpu_interrupts(evaluate(host, REFERENCE)).rows

    assert rows == [(str(cpu), kind, expected[(cpu, kind)]) for cpu in sorted(interrupts.watched)
                    for kind in INTERRUPT_KINDS]  # fmt: skip
