"""Detection latency as a contract: random changes made to a live fake-host tree under a real ``numawatch serve``
(serve's default ``--stagger`` 4, so its rotations are at work), each shown within its bound, and serve's findings
those of ``check`` on the same tree.

The changes, one at a time, in an order drawn from a seed (printed when the test fails; ``NUMAWATCH_CHURN_SEED``
replays one): a Guaranteed container's cpuset rewritten and put back, a pinned pod admitted with a drifted cpuset and
removed, a Guaranteed container's memory moved to the remote node and back, its ``cpuset.mems`` widened and put back,
a device IRQ's affinity moved onto an isolated CPU and back, kernel settings (transparent hugepages, NUMA balancing,
swappiness) changed and put back, a CPU taken offline and brought back. What each change does to the findings is
what ``check`` says of the tree before and after it; each finding it adds or removes must show in serve's
``numawatch_drift_info`` within its bound, counted in serve's evaluations (``numawatch_evaluations_total``): 2 for a
Guaranteed pod's cpusets and memory placement (the contract, whatever the stagger), else
``dataflow.worst_case_evaluations`` of the finding's check. After the longest bound of each change, serve shows
exactly what check shows.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.kubelet import write_cpu_manager_state
from fakehost.pods import ContainerSpec, PodHandle, add_pod, remove_pod, set_container_cpus, set_numa_bytes
from fakehost.reference import (
    GPU_IRQ_BASE,
    HOUSEKEEPING,
    NODE_EXPORTER,
    ONLINE,
    TRTLLM,
    VLLM,
    GiB,
    ReferenceNode,
    reference_node,
)
from fakehost.saved import Saved
from numawatch.checks import evaluate
from numawatch.cpuset import CPUSet, format_cpulist
from numawatch.dataflow import worst_case_evaluations
from numawatch.host import read_host
from numawatch.intent import REFERENCE
from numawatch.metrics.drift import info_labels
from numawatch.model.workloads import QOS_GUARANTEED
from serving import Labels, drift_info, healthy, numawatch_serve

pytestmark = pytest.mark.slow

K = 4  # serve's default --stagger
INTERVAL = "0.25"
GUARANTEED_LATENCY = 2  # a Guaranteed pod's cpusets and memory placement: within 2 evaluations, whatever K
STEPS = 14
# Checks whose verdict is a rate over the time between two readings: check reads the tree once, serve every interval.
RATES = frozenset({"irq_activity_on_isolated_cpu", "tick_on_nohz_full", "node_workload_not_isolated"})

Finding = Labels


# ------------------------------------------------------------------------------------------------ the node
@dataclass(frozen=True)
class Pinned:
    """A Guaranteed pod of one container on exclusive CPUs, besides the reference node's own."""

    uid: str
    name: str
    cpus: CPUSet
    node: int


# Pinned pods on the free isolated cores of each socket (the reference pods hold cores 1-4 of each): more Guaranteed
# pods, in other turns of serve's rotations.
PINNED = (
    Pinned("3b0c6f5e-8d21-4a7f-9e35-0f6a1c2d4b71", "embedder-0", frozenset({5, 21}), 0),
    Pinned("8e4a2d1c-7b3f-4c60-a95e-1d2c3b4a5f60", "reranker-0", frozenset({13, 29}), 1),
    Pinned("c2f7e91a-0d4b-4e38-b6a5-7c8d9e0f1a2b", "tokenizer-0", frozenset({14, 30}), 1),
)
# A pod admitted and removed by the churn: the kubelet assigns it cores 7 (23) of socket 0, and its cgroup holds a
# CPU more (someone else widened it).
ARRIVING = Pinned("5d9e3a7b-1c2f-4d8e-a6b0-3f4e5d6c7b8a", "late-0", frozenset({7, 23}), 0)


class Node:
    """The reference node with the pinned pods, and what the kubelet writes as pods come and go: the CPU Manager's
    checkpoint (every exclusive assignment, the shared pool) and node-exporter's cpuset following the pool."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.reference: ReferenceNode = reference_node(host)
        self.pods: dict[str, PodHandle] = {}
        self.assigned: dict[str, tuple[str, CPUSet]] = {}  # uid -> (container, exclusive CPUs)
        for pinned in PINNED:
            self.admit(pinned)

    def admit(self, pinned: Pinned, cgroup_cpus: CPUSet | None = None) -> PodHandle:
        spec = ContainerSpec("app", cpus=cgroup_cpus or pinned.cpus, mems={pinned.node},
                             numa_bytes={pinned.node: 2 * GiB}, pids=(41000 + len(self.pods),))  # fmt: skip
        pod = add_pod(self.host, uid=pinned.uid, qos=QOS_GUARANTEED, namespace="inference", name=pinned.name,
                      containers=[spec])  # fmt: skip
        self.pods[pinned.uid] = pod
        self.assigned[pinned.uid] = ("app", pinned.cpus)
        self.write_state()
        return pod

    def remove(self, pinned: Pinned) -> None:
        remove_pod(self.host, self.pods.pop(pinned.uid))
        del self.assigned[pinned.uid]
        self.write_state()

    def write_state(self) -> None:
        entries = {ref.uid: {ref.container.name: ref.exclusive} for ref in (VLLM, TRTLLM)}
        entries |= {uid: {container: cpus} for uid, (container, cpus) in self.assigned.items()}
        pool = ONLINE - frozenset().union(*(cpus for pod in entries.values() for cpus in pod.values()))
        write_cpu_manager_state(self.host, default_cpuset=pool, entries=entries)
        online = self.reference.layout.online
        node_exporter = self.reference.pod(NODE_EXPORTER)
        set_container_cpus(self.host, node_exporter, NODE_EXPORTER.container.name, pool & online)


# ------------------------------------------------------------------------------------------------ the changes
@dataclass
class Change:
    """One kind of change: ``apply`` makes it, ``revert`` undoes it; ``check`` is what it must make fire;
    ``guaranteed``: it moves a Guaranteed pod's cpusets or memory placement (bound: the contract's 2 evaluations)."""

    name: str
    check: str
    apply: Callable[[], None]
    revert: Callable[[], None]
    guaranteed: bool = False
    active: bool = False


def irq_dir(host: FakeHost) -> Path:
    """A GPU's IRQ directory (the reference node's device IRQs are on the housekeeping CPUs)."""
    return host.path(f"proc/irq/{GPU_IRQ_BASE}")


def set_irq_affinity(host: FakeHost, cpus: CPUSet) -> None:
    """Its requested affinity ``cpus``, and the kernel's effective one, the first of them."""
    directory = irq_dir(host)
    width = len((directory / "smp_affinity").read_text().strip())
    effective = frozenset({min(cpus)})

    def mask(of: CPUSet) -> str:
        return f"{sum(1 << cpu for cpu in of):0{width}x}"

    files = {"smp_affinity": mask(cpus), "smp_affinity_list": format_cpulist(cpus),
             "effective_affinity": mask(effective), "effective_affinity_list": format_cpulist(effective)}  # fmt: skip
    for name, text in files.items():
        if (directory / name).exists():
            (directory / name).write_text(text + "\n")


def changes(node: Node) -> list[Change]:
    host = node.host
    embedder, reranker = PINNED[0], PINNED[1]
    saved: list[Saved] = []

    def take_offline() -> None:
        saved.append(Saved(host, ("sys/devices/system/cpu", "sys/devices/system/node", "sys/fs/cgroup", "proc")))
        node.reference.take_cpu_offline(31)

    def bring_online() -> None:
        saved.pop().restore()
        node.reference.layout = replace(node.reference.layout, online=ONLINE, offline=frozenset())

    def knob(rel: str, value: str) -> Callable[[], None]:
        return lambda: host.write(rel, value + "\n")

    thp = "sys/kernel/mm/transparent_hugepage/enabled"

    return [
        Change("cpuset rewritten", "container_cpuset_drift",
               lambda: set_container_cpus(host, node.pods[embedder.uid], "app", embedder.cpus | {6}),
               lambda: set_container_cpus(host, node.pods[embedder.uid], "app", embedder.cpus), guaranteed=True),
        Change("cpuset moved", "container_cpuset_drift",
               lambda: set_container_cpus(host, node.pods[reranker.uid], "app", {15, 31}),
               lambda: set_container_cpus(host, node.pods[reranker.uid], "app", reranker.cpus), guaranteed=True),
        Change("pod admitted with a drifted cpuset", "container_cpuset_drift",
               lambda: node.admit(ARRIVING, cgroup_cpus=ARRIVING.cpus | {6}), lambda: node.remove(ARRIVING),
               guaranteed=True),
        Change("memory moved to the remote node", "container_memory_remote",
               lambda: set_numa_bytes(host, node.reference.pod(TRTLLM), TRTLLM.container.name,
                                      {0: 6 * GiB, 1: 4 * GiB}),
               lambda: set_numa_bytes(host, node.reference.pod(TRTLLM), TRTLLM.container.name,
                                      dict(TRTLLM.numa_bytes)), guaranteed=True),
        Change("cpuset.mems widened", "container_memory_numa_mismatch", node.reference.unbind_memory,
               lambda: set_container_cpus(host, node.reference.pod(VLLM), VLLM.container.name, VLLM.exclusive,
                                          mems={0}), guaranteed=True),
        Change("IRQ moved onto an isolated CPU", "irq_on_isolated_cpu",
               lambda: set_irq_affinity(host, frozenset({3})), lambda: set_irq_affinity(host, HOUSEKEEPING)),
        Change("transparent hugepages always", "thp_enabled", knob(thp, "[always] madvise never"),
               knob(thp, "always [madvise] never")),
        Change("NUMA balancing on", "kernel_numa_balancing", knob("proc/sys/kernel/numa_balancing", "1"),
               knob("proc/sys/kernel/numa_balancing", "0")),
        Change("swappiness 60", "vm_swappiness", knob("proc/sys/vm/swappiness", "60"),
               knob("proc/sys/vm/swappiness", "0")),
        Change("CPU 31 offline", "kubelet_state_stale", take_offline, bring_online),
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------------ comparing
def check_findings(root: Path) -> set[Finding]:
    """What ``numawatch check`` shows of the tree, as serve exports it (numawatch_drift_info's labels)."""
    evaluation = evaluate(read_host(FakeHost(root).paths), REFERENCE)
    return {frozenset(info_labels(f).items()) for f in evaluation.findings if f.check not in RATES}


def serve_findings(url: str) -> tuple[int, set[Finding]]:
    """(the evaluation's number, its findings) as serve exports them now."""
    return drift_info(url, lambda labels: labels.get("check") not in RATES)


def check_of(finding: Finding) -> str:
    return dict(finding)["check"]


def shown(findings: Iterable[Finding]) -> str:
    return "; ".join(sorted(",".join(f"{k}={v}" for k, v in sorted(labels)) for labels in findings))


class Watch:
    """Serve's evaluations after each change, against what check says of the tree before and after it."""

    def __init__(self, url: str, root: Path, seed: int) -> None:
        self.url = url
        self.root = root
        self.seed = seed
        self.problems: list[str] = []
        self.latencies: list[tuple[str, str, int, int]] = []  # (change, check, evaluations taken, bound)
        deadline = time.monotonic() + 60
        while not healthy(url):
            assert time.monotonic() < deadline, "numawatch serve never finished its first evaluation"
            time.sleep(0.05)
        self.expected = check_findings(root)

    def bound(self, change: Change, finding: Finding) -> int:
        if change.guaranteed:
            return GUARANTEED_LATENCY
        return worst_case_evaluations(check_of(finding), K)

    def after(self, label: str, change: Change) -> None:
        """Watch serve from the change just made to its longest bound, then compare with check."""
        since, _ = serve_findings(self.url)
        before, self.expected = self.expected, check_findings(self.root)
        added, removed = self.expected - before, before - self.expected
        if not any(check_of(finding) == change.check for finding in added | removed):
            self.problems.append(f"{label}: check shows no change of {change.check} (the change did nothing?)")
        moved = {finding: self.bound(change, finding) for finding in added | removed}
        # Evaluation since+1 may have begun before the change was whole; since+2 began after it: a bound of B
        # evaluations is met by evaluation since+1+B.
        last = since + 1 + max(moved.values(), default=1)
        shown_at: dict[Finding, int] = {}
        number = since
        deadline = time.monotonic() + 120
        while number < last:
            assert time.monotonic() < deadline, f"{label}: serve did not reach evaluation {last} in 120 s"
            number, found = serve_findings(self.url)
            for finding in moved:
                present = finding in found
                if present == (finding in added):
                    shown_at.setdefault(finding, number)
                else:
                    shown_at.pop(finding, None)  # not (or no longer) shown: it must be, later
            time.sleep(0.02)
        for finding, bound in moved.items():
            taken = shown_at.get(finding)
            verb = "fired" if finding in added else "cleared"
            if taken is None:
                self.problems.append(f"{label}: {check_of(finding)} not {verb} by evaluation {number - since - 1} "
                                     f"after it (bound {bound}): {shown([finding])}")  # fmt: skip
            else:
                self.latencies.append((label, check_of(finding), taken - since - 1, bound))
                if taken > since + 1 + bound:
                    self.problems.append(f"{label}: {check_of(finding)} {verb} {taken - since - 1} evaluations "
                                         f"after it, bound {bound}: {shown([finding])}")  # fmt: skip
        self.agree(label)

    def settle(self, evaluations: int) -> None:
        """Wait for ``evaluations`` evaluations that began after now."""
        since, _ = serve_findings(self.url)
        deadline = time.monotonic() + 120
        while serve_findings(self.url)[0] < since + 1 + evaluations:
            assert time.monotonic() < deadline, f"serve did not make {evaluations} evaluations in 120 s"
            time.sleep(0.05)

    def agree(self, label: str) -> None:
        number, found = serve_findings(self.url)
        if found != self.expected:
            self.problems.append(
                f"{label}: at evaluation {number} serve shows what check does not: {shown(found - self.expected)}; "
                f"misses what check shows: {shown(self.expected - found)}"
            )


def seeds() -> list[int]:
    replay = os.environ.get("NUMAWATCH_CHURN_SEED")
    return [int(replay)] if replay else [20261206]


@pytest.mark.parametrize("seed", seeds())
def test_each_change_shows_within_its_bound_and_serve_agrees_with_check(fake_host, seed):
    rng = random.Random(seed)
    node = Node(fake_host)
    kinds = changes(node)
    with numawatch_serve(fake_host.root, "--no-self-pin", "--stagger", str(K), interval=INTERVAL) as (_process, url):
        watch = Watch(url, fake_host.root, seed)
        watch.agree("start")
        for step in range(STEPS):
            change = rng.choice(kinds)
            # A CPU brought back online restores the files it took: nothing else changes while it is offline.
            offline = next((kind for kind in kinds if kind.active and kind.check == "kubelet_state_stale"), None)
            if offline is not None:
                change = offline
            time.sleep(rng.uniform(0, float(INTERVAL)))  # at any point of serve's rotation
            if change.active:
                change.revert()
            else:
                change.apply()
            change.active = not change.active
            watch.after(f"step {step}: {change.name}{'' if change.active else ' undone'}", change)
        for change in kinds:  # everything put back: the node is clean again
            if change.active:
                change.revert()
                change.active = False
                watch.after(f"end: {change.name} undone", change)
        # The longest bound of any check the changes moved: whatever rotation was under way has come round.
        watch.settle(max(worst_case_evaluations(kind.check, K) for kind in kinds))
        watch.agree("after the longest bound")

    report = ", ".join(f"{label} {check} {taken}/{bound}" for label, check, taken, bound in watch.latencies)
    assert not watch.problems, "\n".join([f"seed {seed} (NUMAWATCH_CHURN_SEED={seed} replays it)", *watch.problems,
                                          f"latencies (evaluations/bound): {report}"])  # fmt: skip
    assert len(watch.latencies) >= STEPS  # every change moved at least one finding, and each was timed
