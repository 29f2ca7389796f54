"""The checks that judge pod by pod (pod_not_guaranteed, container_cpuset_drift, exclusive_cpu_overlap,
node_workload_not_isolated, and the NUMA alignment checks container_numa_split, container_gpu_numa_mismatch,
container_memory_numa_mismatch and container_memory_remote) make a pod's findings once and reuse them while the
pod's generations and their other inputs stay (``perpod.pod_values``, through ``workloads.per_pod``): through
random sequences of changes to a node (pods added, removed, lingering under a second QoS cgroup, cpusets rewritten,
the CPU Manager's state rewritten, pod usage moving, a CPU going offline, another intent), every reading's findings,
in order, are those of the same reading judged from scratch; and what is reused is the previous reading's, for the
pods that did not change."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
import readings
from fakehost.kubelet import write_cpu_manager_state
from fakehost.pods import (
    ContainerSpec,
    PodHandle,
    add_pod,
    remove_pod,
    set_container_cpus,
    set_numa_bytes,
    set_pod_usage,
)
from fakehost.reference import (
    DEFAULT_CPUSET,
    HOUSEKEEPING,
    NODE_EXPORTER,
    ONLINE,
    TRTLLM,
    VLLM,
    ReferenceNode,
    reference_node,
    reference_snapshot,
    replace_container,
)
from numawatch.checks import NotApplicable, NotEvaluated, all_checks
from numawatch.gpuholders import holders_by_container
from numawatch.host import Host, HostReader
from numawatch.intent import REFERENCE, Intent, NodeIntent, PodSelector
from numawatch.model import frozen_map
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED
from numawatch.workloads import build_workloads, per_pod, workloads_by_pod

REUSING = ("pod_not_guaranteed", "container_cpuset_drift", "exclusive_cpu_overlap", "node_workload_not_isolated")
# Also judged pod by pod (``per_pod``, the NUMA alignment checks), held to a from-scratch judgement the same way.
ALSO_PER_POD = (
    "container_numa_split",
    "container_gpu_numa_mismatch",
    "container_memory_numa_mismatch",
    "container_memory_remote",
)
CHECKS = {check.id: check for check in all_checks()}

# The intents a reading is judged against: the same objects come back, as serve's intent does between reloads.
INTENTS = (
    REFERENCE,
    Intent(node=NodeIntent(system_namespaces=("batch",))),
    Intent(pinned=(PodSelector(namespace="analytics"),), severities=frozen_map({"container_cpuset_drift": "info"})),
    Intent(pin_gpu_containers=False),
)
NAMESPACES = ("default", "batch", "analytics", "kube-system", "inference")
QOS = (QOS_GUARANTEED, QOS_BURSTABLE, QOS_BESTEFFORT)


def outcome(host: Host, intent: Intent, check_id: str) -> tuple:
    """What the check says about ``host``: its findings in the order it makes them, or why it did not judge."""
    try:
        return ("findings", [finding.as_dict() for finding in CHECKS[check_id].run(host, intent)])
    except (NotEvaluated, NotApplicable) as reason:
        return (type(reason).__name__, str(reason))


# ------------------------------------------------------------------------------------------------ a changing node
@dataclass
class Node:
    """The reference node with pods of its own coming and going."""

    node: ReferenceNode
    rng: random.Random
    extra: list[PodHandle] = field(default_factory=list)
    offline: set[int] = field(default_factory=set)
    serial: int = 0

    def add(self, uid: str | None = None, qos: str | None = None, namespace: str | None = None) -> PodHandle:
        self.serial += 1
        uid = uid or f"00000000-0000-4000-8000-{self.serial:012d}"
        containers = [
            ContainerSpec(f"c{self.serial}-{index}", cpus=self.shared(), mems={0, 1}, numa_bytes={0: 1 << 20})
            for index in range(self.rng.randint(1, 3))
        ]
        pod = add_pod(
            self.node.host,
            uid=uid,
            qos=qos or self.rng.choice(QOS),
            namespace=namespace or self.rng.choice(NAMESPACES),
            name=f"pod-{self.serial}",
            containers=containers,
            runtime=self.node.runtime,
            bundle_root="k3s",
        )
        self.extra.append(pod)
        return pod

    def shared(self) -> frozenset[int]:
        return DEFAULT_CPUSET - self.offline

    def add_pod(self) -> None:
        self.add()

    def linger(self) -> None:
        """A pod's old cgroup under another QoS class stays beside its new one (one UID, two pod cgroups)."""
        if self.extra:
            old = self.rng.choice(self.extra)
            self.add(uid=old.uid, qos=self.rng.choice([q for q in QOS if q != old.qos]))

    def remove_pod(self) -> None:
        if self.extra:
            pod = self.extra.pop(self.rng.randrange(len(self.extra)))
            remove_pod(self.node.host, pod)

    def rewrite_cpuset(self) -> None:
        """Someone rewrites a container's cpuset (drift), or the kubelet puts it back on the shared pool."""
        if not self.extra:
            return
        pod = self.rng.choice(self.extra)
        container = self.rng.choice(pod.containers)
        online = sorted(ONLINE - self.offline)
        cpus = self.shared() if self.rng.random() < 0.4 else frozenset(self.rng.sample(online, 6))
        set_container_cpus(self.node.host, pod, container.name, cpus)

    def rewrite_cpu_state(self) -> None:
        """The CPU Manager's checkpoint changes: a shared pool without one CPU, or the reference one again."""
        default = self.shared() - {self.rng.choice(sorted(self.shared()))} if self.rng.random() < 0.5 else self.shared()
        entries = {uid: {_app(uid): cpus} for uid, cpus in sorted(self.node.exclusive.items())}
        write_cpu_manager_state(self.node.host, policy="static", default_cpuset=default, entries=entries)

    def repin_vllm(self) -> None:
        """The kubelet gives vllm other exclusive CPUs (state and cgroups together)."""
        choices = ({1, 2, 3, 4, 17, 18, 19, 20}, {1, 2, 3, 17, 18, 19})
        self.node.pin(VLLM, self.rng.choice(choices) - self.offline)

    def move_usage(self) -> None:
        pods = [*self.extra, self.node.pod(NODE_EXPORTER)]
        pod = self.rng.choice(pods)
        used = self.rng.randint(1, 8) << 30
        set_pod_usage(self.node.host, pod, cpu_seconds=self.rng.uniform(0, 1000), memory_bytes=used)

    def move_numa_bytes(self) -> None:
        """A container's resident memory per node moves (all that most re-read pods change under churn)."""
        pods = [pod for pod in self.extra if pod.containers]
        if pods:
            pod = self.rng.choice(pods)
            container = self.rng.choice(pod.containers)
            set_numa_bytes(self.node.host, pod, container.name, {0: self.rng.randint(1, 64) << 20, 1: 1 << 20})

    def make_burstable(self) -> None:
        self.node.make_burstable(TRTLLM)

    def spread_vllm(self) -> None:
        """The kubelet gives vllm exclusive CPUs on both nodes and both nodes' memory (container_numa_split; the
        Memory Manager's node-0 blocks no longer match: container_memory_numa_mismatch)."""
        self.node.pin(VLLM, {1, 2, 3, 4, 9, 10, 11, 12} - self.offline, mems={0, 1})

    def move_vllm_memory_away(self) -> None:
        """Most of vllm's resident memory sits on node 1 (container_memory_remote while its CPUs are node 0's)."""
        pod = self.node.pod(VLLM)
        set_numa_bytes(self.node.host, pod, VLLM.container.name, {0: 1 << 20, 1: self.rng.randint(4, 16) << 30})

    def take_cpu_offline(self) -> None:
        candidates = sorted(DEFAULT_CPUSET - HOUSEKEEPING - self.offline)
        if len(self.offline) < 2 and candidates:
            cpu = self.rng.choice(candidates)
            self.node.take_cpu_offline(cpu)
            self.offline.add(cpu)

    def nothing(self) -> None:
        pass


def _app(uid: str) -> str:
    return next(pod.container.name for pod in (VLLM, TRTLLM) if pod.uid == uid)


CHANGES: tuple[Callable[[Node], None], ...] = (
    Node.add_pod,
    Node.add_pod,
    Node.linger,
    Node.remove_pod,
    Node.rewrite_cpuset,
    Node.rewrite_cpuset,
    Node.rewrite_cpu_state,
    Node.repin_vllm,
    Node.move_usage,
    Node.move_numa_bytes,
    Node.make_burstable,
    Node.take_cpu_offline,
    Node.nothing,
    Node.nothing,
)


def judge_a_changing_node(
    fake_host, seed: int, cgroup_version: int, changes: tuple[Callable[[Node], None], ...], check_ids: tuple[str, ...]
) -> tuple[dict[str, set[str]], int]:
    """24 readings of the reference node under random ``changes``, each judged by ``check_ids`` and held to the same
    reading judged from scratch; returns what each check said (fired, clean, or why not judged) and how many
    findings were the previous reading's objects."""
    rng = random.Random(seed)
    node = Node(reference_node(fake_host, cgroup_version=cgroup_version), rng)
    for _ in range(4):
        node.add()
    reader = HostReader(node.node.paths, stagger=2)
    seen: dict[str, set[str]] = {check_id: set() for check_id in check_ids}
    reused = 0
    previous: dict[str, list] = {}
    for step in range(24):
        change = rng.choice(changes)
        change(node)
        host = reader.read()
        intent = rng.choice(INTENTS)
        for check_id in check_ids:
            made = outcome(host, intent, check_id)
            assert made == outcome(readings.from_scratch(host), intent, check_id), (step, change.__name__, check_id)
            seen[check_id].add(made[0] if made[0] != "findings" else ("fired" if made[1] else "clean"))
        # The reused findings are the previous reading's objects: count them, so the reuse is known to happen.
        for check_id in check_ids:
            try:
                findings = list(CHECKS[check_id].run(host, intent))
            except (NotEvaluated, NotApplicable):
                continue
            before = {id(finding) for finding in previous.get(check_id, [])}
            reused += sum(id(finding) in before for finding in findings)
            previous[check_id] = findings
    return seen, reused


@pytest.mark.parametrize(("seed", "cgroup_version"), [(1, 2), (2, 2), (3, 1), (4, 2)])
@pytest.mark.slow
def test_every_reading_of_a_changing_node_finds_what_judging_it_from_scratch_does(fake_host, seed, cgroup_version):
    seen, reused = judge_a_changing_node(fake_host, seed, cgroup_version, CHANGES, REUSING)
    assert reused > 0
    for check_id in REUSING:
        assert "fired" in seen[check_id], check_id  # the changes did plant what each check looks for


# vllm's CPUs and memory moving as well: what the NUMA alignment checks look for.
SPREADING: tuple[Callable[[Node], None], ...] = (*CHANGES, Node.spread_vllm, Node.move_vllm_memory_away) * 2


@pytest.mark.parametrize(("seed", "cgroup_version"), [(5, 2), (7, 1), (9, 2)])
@pytest.mark.slow
def test_the_numa_alignment_checks_judged_pod_by_pod_find_what_judging_from_scratch_does(
    fake_host, seed, cgroup_version
):
    seen, reused = judge_a_changing_node(fake_host, seed, cgroup_version, SPREADING, ALSO_PER_POD)
    assert reused > 0
    for check_id in ALSO_PER_POD:
        assert "fired" in seen[check_id], (check_id, seen[check_id])
        assert "clean" in seen[check_id] or len(seen[check_id]) > 1, (check_id, seen[check_id])


# ------------------------------------------------------------------------------------------------ what is reused
def drift_everywhere(host: Host) -> Host:
    """Every container's cpuset off its assignment: every check above has findings on several pods."""
    for pod in host.cgroups.pods:
        for container in pod.containers:
            host = replace_container(host, container.container_id, cpus_effective=frozenset({5, 6}))
    return host


def findings_by_pod(host: Host, check_id: str, intent: Intent = REFERENCE) -> dict[str, list]:
    found: dict[str, list] = {}
    for finding in CHECKS[check_id].run(host, intent):
        found.setdefault(finding.labels["pod_uid"], []).append(finding)
    return found


@pytest.mark.parametrize("check_id", REUSING)
@pytest.mark.slow
def test_an_unchanged_reading_gives_back_the_previous_readings_findings(fake_host, check_id):
    node = Node(reference_node(fake_host), random.Random(0))
    node.node.make_burstable(TRTLLM)
    node.node.widen_cpuset(VLLM)
    foreign = node.add(qos=QOS_BURSTABLE, namespace="analytics")
    set_container_cpus(fake_host, foreign, foreign.containers[0].name, {3, 5})  # 3 is vllm's
    reader = HostReader(node.node.paths)
    reader.read()  # the first reading has no CPU rates yet: the second is the first of the steady state
    second = reader.read()
    before = findings_by_pod(second, check_id)
    assert before  # something to reuse

    after = findings_by_pod(reader.read(), check_id)

    assert after.keys() == before.keys()
    assert all(new is old for uid in before for new, old in zip(after[uid], before[uid], strict=True))


def test_a_changed_pod_gets_new_findings_and_the_other_pods_keep_theirs():
    first = readings.as_reading(drift_everywhere(reference_snapshot()))
    before = findings_by_pod(first, "container_cpuset_drift")
    drifted = replace_container(first, VLLM.container.container_id, cpus_effective=frozenset({7}))
    pods = tuple(
        new if new.uid == VLLM.uid else old for old, new in zip(first.cgroups.pods, drifted.cgroups.pods, strict=True)
    )
    second = readings.next_reading(first, cgroups=replace(drifted.cgroups, pods=pods))

    after = findings_by_pod(second, "container_cpuset_drift")

    assert after[VLLM.uid][0] is not before[VLLM.uid][0] and after[VLLM.uid][0].labels["cpus"] == "7"
    for uid in before.keys() - {VLLM.uid}:
        assert after[uid] == before[uid] and after[uid][0] is before[uid][0]


def test_a_new_cpu_manager_state_or_intent_judges_every_pod_again():
    first = readings.as_reading(drift_everywhere(reference_snapshot()))
    before = findings_by_pod(first, "container_cpuset_drift")
    state = first.kubelet_state
    second = readings.next_reading(
        first, kubelet_state=replace(state, cpu=replace(state.cpu, default_cpuset=state.cpu.default_cpuset - {7}))
    )
    other = Intent(severities=frozen_map({"container_cpuset_drift": "info"}))

    after = findings_by_pod(second, "container_cpuset_drift")
    judged_again = findings_by_pod(second, "container_cpuset_drift", other)

    assert not any(new is old for uid in before for new, old in zip(after[uid], before[uid], strict=True))
    assert {finding.severity for findings in judged_again.values() for finding in findings} == {"info"}


def next_with_pod(first: Host, changed: Host, uid: str, **results) -> Host:
    """The reading after ``first`` in which only pod ``uid`` is a new pod object (``changed``'s), as the cgroups
    source hands out the others again."""
    pods = tuple(
        new if new.uid == uid else old for old, new in zip(first.cgroups.pods, changed.cgroups.pods, strict=True)
    )
    return readings.next_reading(first, cgroups=replace(changed.cgroups, pods=pods), **results)


def test_a_cpu_manager_change_of_one_pod_joins_and_judges_only_that_pod_again():
    first = readings.as_reading(drift_everywhere(reference_snapshot()))
    before = workloads_by_pod(first, REFERENCE)
    findings_before = findings_by_pod(first, "container_cpuset_drift")
    state = first.kubelet_state
    entries = {**state.cpu.entries, VLLM.uid: {VLLM.container.name: frozenset({5, 6})}}
    second = readings.next_reading(first, kubelet_state=replace(state, cpu=replace(state.cpu, entries=entries)))

    after = workloads_by_pod(second, REFERENCE)
    findings_after = findings_by_pod(second, "container_cpuset_drift")

    for pod, old, new in zip(second.cgroups.pods, before, after, strict=True):
        assert (new is old) == (pod.uid != VLLM.uid), pod.uid
    assert after == workloads_by_pod(readings.from_scratch(second), REFERENCE)
    assert VLLM.uid in findings_before and VLLM.uid not in findings_after  # {5, 6} is now its assignment: clean
    for uid in findings_before.keys() - {VLLM.uid}:
        assert all(new is old for new, old in zip(findings_after[uid], findings_before[uid], strict=True))
    for check_id in REUSING:
        assert outcome(second, REFERENCE, check_id) == outcome(readings.from_scratch(second), REFERENCE, check_id)


def test_a_pod_whose_memory_placement_alone_moved_keeps_the_values_that_read_none():
    host = drift_everywhere(reference_snapshot())
    first = readings.as_reading(replace_container(host, VLLM.container.container_id, numa_bytes={0: 8 << 30}))
    drift_before = findings_by_pod(first, "container_cpuset_drift")
    assert VLLM.uid not in findings_by_pod(first, "container_memory_remote")
    moved = replace_container(first, VLLM.container.container_id, numa_bytes={0: 1 << 30, 1: 7 << 30})
    second = next_with_pod(first, moved, VLLM.uid)
    made: list[str] = []

    def make(workloads):
        made.append(workloads[0].pod_uid)
        return workloads[0].numa_bytes

    per_pod(first, REFERENCE, "test.numa", (), make)
    per_pod(first, REFERENCE, "test.cpus", (), make, reads_numa_bytes=False)
    made.clear()
    numa = per_pod(second, REFERENCE, "test.numa", (), make)
    assert made == [VLLM.uid]  # what reads the placement is made again for the pod that moved
    made.clear()
    per_pod(second, REFERENCE, "test.cpus", (), make, reads_numa_bytes=False)
    assert made == []  # what reads none keeps every pod's value
    assert numa == per_pod(readings.from_scratch(second), REFERENCE, "test.numa", (), make)

    drift_after = findings_by_pod(second, "container_cpuset_drift")
    assert drift_after[VLLM.uid] and drift_after[VLLM.uid][0] is drift_before[VLLM.uid][0]
    remote = findings_by_pod(second, "container_memory_remote")
    assert VLLM.uid in remote  # the memory check sees the new placement: 7 GiB on node 1
    for check_id in (*REUSING, "container_memory_remote"):
        assert outcome(second, REFERENCE, check_id) == outcome(readings.from_scratch(second), REFERENCE, check_id)


def test_a_host_not_made_by_a_reader_reuses_nothing():
    host = drift_everywhere(reference_snapshot())
    calls = []

    def make(workloads):
        calls.append(workloads[0].pod_uid)
        return len(workloads)

    per_pod(host, REFERENCE, "test", (), make)
    per_pod(host, REFERENCE, "test", (), make)

    assert len(calls) == 2 * len([pod for pod in host.cgroups.pods if pod.containers])


def test_pod_inputs_decide_per_pod_and_the_inputs_for_every_pod():
    first = readings.as_reading(reference_snapshot())
    second = readings.next_reading(first)
    made: list[str] = []

    def make(workloads):
        made.append(workloads[0].pod_uid)
        return workloads[0].pod_uid

    values = per_pod(first, REFERENCE, "test", 1, make, pod_input=lambda pod: pod[0].pod_uid == VLLM.uid)
    made.clear()
    assert per_pod(second, REFERENCE, "test", 1, make, pod_input=lambda pod: pod[0].pod_uid != VLLM.uid) == values
    assert sorted(made) == sorted(values)  # every pod's own input changed

    made.clear()
    per_pod(second, REFERENCE, "test", 1, make, pod_input=lambda pod: pod[0].pod_uid != VLLM.uid)
    assert made == []
    per_pod(second, REFERENCE, "test", 2, make, pod_input=lambda pod: pod[0].pod_uid != VLLM.uid)
    assert sorted(made) == sorted(values)  # the inputs of every pod changed


def test_by_uid_joins_the_pod_cgroups_of_one_uid_in_the_order_it_is_first_listed():
    host = reference_snapshot()
    pods = host.cgroups.pods
    lingering = replace(pods[0], cgroup_path=pods[0].cgroup_path + "-old", qos=QOS_BESTEFFORT)
    cgroups = replace(host.cgroups, pods=(*pods, lingering))
    host = readings.as_reading(replace(host, results={**host.results, "cgroups": cgroups}))

    grouped = per_pod(host, REFERENCE, "test", (), lambda workloads: workloads, by_uid=True)

    assert [workloads[0].pod_uid for workloads in grouped] == [pod.uid for pod in pods if pod.containers]
    half = len(grouped[0]) // 2
    assert [w.qos for w in grouped[0]] == [pods[0].qos] * half + [QOS_BESTEFFORT] * half


# ------------------------------------------------------------------------------------------------ holders
def test_the_holders_are_made_once_per_host_and_intent():
    host = reference_snapshot()
    other = Intent(pin_gpu_containers=False)

    first = holders_by_container(host, REFERENCE)

    assert first is holders_by_container(host, REFERENCE)
    assert holders_by_container(host, other) is not first
    assert dict(first) == {w.container_id: w for w in build_workloads(host, REFERENCE)}
    assert holders_by_container(replace(host), REFERENCE) is not first  # another Host makes its own
