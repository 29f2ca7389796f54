"""serve says what check says: a live ``numawatch serve`` (real process, real HTTP, serve's default ``--stagger``)
driven through the changes its incremental readings must follow (pods admitted and removed, the CPU Manager's shared
pool moving with them, CPUs going offline and coming back, a NUMA node's memory shrinking and coming back), compared
at every evaluation with what ``check`` (a whole reading) says of the same tree.

After each change the tree stays as it is while the test watches serve's evaluations that began after the change
(an evaluation under way while the tree was being rewritten read some files before and some after, as on a node
while the kubelet writes). At each of them the critical findings serve shows (``numawatch_drift_info``: each
finding's identity and details) must be exactly the ones check shows: serve reads again, at the first reading that
sees a change, every container whose cpuset the change can move, and the node memory the Memory Manager's
checkpoint is compared with.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.kubelet import write_cpu_manager_state
from fakehost.pods import ContainerSpec, PodHandle, add_pod, remove_pod, set_container_cpus
from fakehost.reference import NODE_EXPORTER, PODS, ReferenceNode, reference_node
from fakehost.saved import Saved
from numawatch.checks import evaluate
from numawatch.cpuset import CPUSet
from numawatch.host import read_host
from numawatch.intent import REFERENCE
from numawatch.metrics.drift import info_labels
from numawatch.model.workloads import QOS_BURSTABLE, QOS_GUARANTEED
from numawatch.refresh import POLICIES, SHARED_PODS
from serving import Labels, drift_info, healthy, numawatch_serve

pytestmark = pytest.mark.slow

K = 4  # serve's default --stagger
INTERVAL = "0.25"
# Evaluations watched after each change: a round of the longest pod rotation (shared pods) and two more, so a
# container carried over with a stale cpuset shows whatever its turn.
WATCHED = K * POLICIES["cgroups"].stretch.get(SHARED_PODS, 1) + 2

# ------------------------------------------------------------------------------------------------ the kubelet's side
class Kubelet:
    """What the kubelet writes when pods come and go on the reference node: the CPU Manager's checkpoint (exclusive
    CPUs per pod and container, the shared pool ``defaultCpuSet``) and, as its reconcile loop leaves them, the
    cpusets of every container without exclusive CPUs, whatever its pod's QoS class."""

    def __init__(self, node: ReferenceNode) -> None:
        self.node = node
        self.host = node.host
        self.present = frozenset(node.layout.cpus)
        self.exclusive: dict[str, dict[str, CPUSet]] = {
            pod.uid: {pod.container.name: pod.exclusive} for pod in PODS if pod.exclusive
        }
        self.followers: list[tuple[PodHandle, str]] = [(node.pod(NODE_EXPORTER), NODE_EXPORTER.container.name)]

    def pool(self) -> CPUSet:
        """defaultCpuSet: every CPU no container holds exclusively (offline ones included: the kubelet keeps them)."""
        return self.present - frozenset().union(*(cpus for pod in self.exclusive.values() for cpus in pod.values()))

    def online(self) -> CPUSet:
        return frozenset(self.node.layout.online)

    def write(self) -> None:
        write_cpu_manager_state(self.host, default_cpuset=self.pool(), entries=self.exclusive)
        for pod, name in self.followers:
            set_container_cpus(self.host, pod, name, self.pool() & self.online())

    def admit(
        self, uid: str, name: str, qos: str, *, exclusive: Mapping[str, CPUSet] | None = None,
        shared: Iterable[str] = (), namespace: str = "monitoring", node: int = 0,
    ) -> PodHandle:  # fmt: skip
        """A pod with containers on exclusive CPUs (``exclusive``: name -> CPUs) and on the shared pool."""
        exclusive = dict(exclusive or {})
        if exclusive:
            self.exclusive[uid] = exclusive
        pool = self.pool() & self.online()
        containers = [
            ContainerSpec(container, cpus=cpus & self.online(), mems={node}, numa_bytes={node: 64 << 20})
            for container, cpus in exclusive.items()
        ]
        containers += [
            ContainerSpec(container, cpus=pool, mems={0, 1}, numa_bytes={node: 16 << 20}) for container in shared
        ]
        pod = add_pod(self.host, uid=uid, qos=qos, namespace=namespace, name=name, containers=containers)
        self.followers += [(pod, container) for container in shared]
        self.write()
        return pod

    def remove(self, pod: PodHandle) -> None:
        remove_pod(self.host, pod)
        self.exclusive.pop(pod.uid, None)
        self.followers = [(other, name) for other, name in self.followers if other.uid != pod.uid]
        self.write()


def fractional_uids(count: int) -> list[str]:
    """UIDs of Guaranteed pods that take every turn of serve's rotation of Guaranteed pods (a pod's turn is its UID's
    CRC modulo K), so that whatever the turn at a change, some of them are not due then."""
    uids: list[str] = []
    turns: set[int] = set()
    index = 0
    while len(uids) < count:
        uid = f"5e1dca40-0000-4000-8000-{index:012d}"
        index += 1
        turn = zlib.crc32(uid.encode()) % K
        if turn not in turns or len(turns) == K:
            turns.add(turn)
            uids.append(uid)
    return uids


# ------------------------------------------------------------------------------------------------ the host's side
def shrink_node_memory(host: FakeHost, node: int, by_bytes: int) -> bytes:
    """Take ``by_bytes`` of node ``node``'s memory offline (its MemTotal drops); returns the file as it was."""
    path = host.path(f"sys/devices/system/node/node{node}/meminfo")
    before = path.read_bytes()
    lines = []
    for line in before.decode().splitlines(keepends=True):
        head, _, rest = line.partition("MemTotal:")
        if rest:
            kb = int(rest.split()[0]) - by_bytes // 1024
            line = f"{head}MemTotal:{kb:>{len(rest) - len(' kB') - 1}} kB\n"
        lines.append(line)
    path.write_text("".join(lines))
    return before


# ------------------------------------------------------------------------------------------------ comparing
def check_criticals(root: Path) -> set[Labels]:
    """What ``numawatch check`` shows of the tree: its critical findings as serve would export them."""
    evaluation = evaluate(read_host(FakeHost(root).paths), REFERENCE)
    return {frozenset(info_labels(f).items()) for f in evaluation.findings if f.severity == "critical"}


def serve_criticals(url: str) -> tuple[int, set[Labels]]:
    """(the evaluation's number, its critical findings) as serve exports them now."""
    return drift_info(url, lambda labels: labels.get("severity") == "critical")


def shown(findings: Iterable[Labels]) -> str:
    return "; ".join(sorted(",".join(f"{k}={v}" for k, v in sorted(labels) if k != "severity") for labels in findings))


class Watch:
    """Serve's evaluations after each change, compared with check's reading of the same tree."""

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root
        self.problems: list[str] = []
        self.evaluations = 0
        self.changes: list[tuple[str, int]] = []  # (change, its critical findings in check)
        deadline = time.monotonic() + 30
        while not healthy(url):
            assert time.monotonic() < deadline, "numawatch serve never finished its first evaluation"
            time.sleep(0.05)

    def after(self, change: str) -> None:
        """Watch ``WATCHED`` evaluations that began after ``change`` was made (the tree no longer changes)."""
        since, _ = serve_criticals(self.url)
        expected = check_criticals(self.root)
        self.changes.append((change, len(expected)))
        # Evaluation since+1 may have begun before the change was made whole; since+2 began after it had ended.
        seen: set[int] = set()
        deadline = time.monotonic() + 120
        while len(seen) < WATCHED:
            assert time.monotonic() < deadline, f"{change}: serve evaluated {len(seen)} times in 120 s"
            number, found = serve_criticals(self.url)
            if number >= since + 2 and number not in seen:
                seen.add(number)
                if found - expected:
                    self.problems.append(
                        f"{change}: evaluation {number - since - 1} after it: serve shows what check does not: "
                        f"{shown(found - expected)}"
                    )
                if expected - found:
                    self.problems.append(
                        f"{change}: evaluation {number - since - 1} after it: serve misses what check shows: "
                        f"{shown(expected - found)}"
                    )
            time.sleep(0.03)
        self.evaluations += len(seen)


def test_serve_shows_what_check_shows_while_pods_come_and_go_cpus_go_offline_and_node_memory_moves(fake_host):
    node = reference_node(fake_host)
    kubelet = Kubelet(node)
    # Guaranteed pods of fractional CPUs (requests = limits = 500m): every container on the shared pool. With their
    # UIDs spread over every turn of serve's rotation, some are outside their turn at any change.
    fractional = [
        kubelet.admit(uid, f"metrics-agent-{index}", QOS_GUARANTEED, shared=("agent",))
        for index, uid in enumerate(fractional_uids(K))
    ]
    # An inference pod with a metrics sidecar: the server on exclusive CPUs (cores 5-6 of socket 0), the sidecar on
    # the shared pool.
    kubelet.admit("9d3a7c11-2b4e-4f60-8a1d-3c5e7f9b0d24", "llm-with-sidecar-0", QOS_GUARANTEED,
                  exclusive={"server": frozenset({5, 6, 21, 22})}, shared=("metrics",), namespace="inference")
    kubelet.write()

    with numawatch_serve(fake_host.root, "--no-self-pin", interval=INTERVAL) as (_process, url):
        watch = Watch(url, fake_host.root)
        watch.after("start")

        # A pinned pod admitted on cores 5-6 of socket 1: the pool shrinks, every shared container follows it.
        pinned = kubelet.admit("e07b5d92-6c1a-4d3f-9e28-41a6b0c7d853", "tokenizer-0", QOS_GUARANTEED,
                               exclusive={"tokenizer": frozenset({13, 14, 29, 30})}, namespace="inference", node=1)
        watch.after("pinned pod admitted")
        burstable = kubelet.admit("3f8e2a6d-1b7c-4e90-a5d4-6c2b8e0f1a37", "log-shipper-0", QOS_BURSTABLE,
                                  shared=("shipper", "sidecar"))
        watch.after("burstable pod admitted")
        kubelet.remove(pinned)
        watch.after("pinned pod removed (the pool grows back)")
        kubelet.remove(fractional[0])
        kubelet.remove(burstable)
        watch.after("shared pods removed")

        # CPUs offline: one of trtllm's exclusive CPUs, one of the sidecar pod's, one of the shared pool.
        saved = Saved(fake_host, ("sys/devices/system/cpu", "sys/devices/system/node", "sys/fs/cgroup", "proc"))
        node.take_cpu_offline(28)
        node.take_cpu_offline(22)
        node.take_cpu_offline(31)
        watch.after("CPUs 22, 28 and 31 offline")
        saved.restore()
        node.layout = replace(node.layout, online=frozenset(node.layout.cpus), offline=frozenset())
        watch.after("CPUs 22, 28 and 31 online again")

        # A pinned pod admitted while one of the CPUs it is given is offline: its cpuset holds the online ones.
        node.take_cpu_offline(30)
        pinned = kubelet.admit("a1c9e3f7-5d2b-4a86-9c04-7e1f3b5d9a62", "tokenizer-1", QOS_GUARANTEED,
                               exclusive={"tokenizer": frozenset({13, 14, 29, 30})}, namespace="inference", node=1)
        watch.after("pinned pod admitted while CPU 30 is offline")

        # Node memory: 1 GiB of node 1 taken offline (its MemTotal drops), then back.
        before = shrink_node_memory(fake_host, 1, 1 << 30)
        watch.after("node 1 memory shrunk")
        fake_host.path("sys/devices/system/node/node1/meminfo").write_bytes(before)
        watch.after("node 1 memory restored")

    summary = ", ".join(f"{change}: {count}" for change, count in watch.changes)
    assert not watch.problems, "\n".join([f"critical findings in check per change: {summary}", *watch.problems])
    # The changes were seen by check: the offline CPUs and the memory change make the kubelet's checkpoints stale.
    counts = dict(watch.changes)
    assert counts["node 1 memory shrunk"] > counts["node 1 memory restored"]
    assert counts["CPUs 22, 28 and 31 offline"] > counts["CPUs 22, 28 and 31 online again"]
    assert watch.evaluations >= WATCHED * len(watch.changes)
