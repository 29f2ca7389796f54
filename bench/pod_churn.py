"""Pods coming and going on a generated host, as on a busy shared node: what bench/churn.py ``--pods`` moves.

``PodChurn(root)`` reads the tree's pods once (from the kubepods cgroups, the kubelet's checkpoints and the pod log
directories) and each ``advance()`` then:

- replaces ``per_advance`` Burstable or BestEffort pods, each by a new one in its namespace (a fraction accumulates:
  0.5 replaces one every other advance): the oldest such pod goes (its cgroups in every hierarchy, its runtime
  bundles, its log directory and its ``/proc/<pid>`` entries), and a new one comes with a new UID, 1-4 containers plus
  the pause sandbox, their processes (``comm``, ``status``, ``cgroup``, ``stat``, ``schedstat``) and bundles, written
  with the same fake-host builders as the generator (tests/fakehost/pods.py), on the shared pool the CPU Manager's
  ``defaultCpuSet`` names. The number of pods, containers and processes stays about the same; the set changes.
- every ``pinned_every`` advances (0: never), replaces one Guaranteed pod that holds exclusive CPUs and no GPU (a
  tokeniser, a pinned platform pod): it is deleted and created again under a new UID on the same CPUs and node, and
  the kubelet's ``cpu_manager_state`` and ``memory_manager_state`` are rewritten with the new UID (valid checksums),
  as the kubelet rewrites them when it releases and assigns exclusive CPUs. Readers that key work on those files
  see them change.

GPU pods (which hold every planted drift) are never touched, so the checks that fire keep firing. Files are
written in place or created, and directories removed whole: a reader racing an advance sees a pod half-made or
half-gone, as it does on a node, and the sources skip what vanished under them.
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))

import generate_host as gen  # noqa: E402  (puts tests/ on sys.path for fakehost)
from fakehost import FakeHost  # noqa: E402
from fakehost.kubelet import write_cpu_manager_state, write_memory_manager_state  # noqa: E402
from fakehost.pods import ContainerSpec, add_pod  # noqa: E402
from numawatch.cpuset import CPUSet, format_cpulist, parse_cpulist  # noqa: E402
from numawatch.model.kubelet import CpuManagerState  # noqa: E402
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED  # noqa: E402
from numawatch.paths import Paths  # noqa: E402
from numawatch.sources.cgroups import parse_container_dir, parse_pod_dir  # noqa: E402
from numawatch.sources.kubelet_state import (  # noqa: E402
    parse_cpu_manager_state,
    parse_device_checkpoint,
    parse_memory_manager_state,
)

MiB = 1 << 20
CPU_STATE = "var/lib/kubelet/cpu_manager_state"
MEMORY_STATE = "var/lib/kubelet/memory_manager_state"
DEVICE_CHECKPOINT = "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
BUNDLE_DIRS = ("run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io",
               "run/containerd/io.containerd.runtime.v2.task/k8s.io")  # fmt: skip
PIDS_PER_CONTAINER = (1, 1, 1, 2, 2, 3)


class PodChurnError(ValueError):
    """The tree is not one pods can be churned on: ``<path>: <what>``."""


@dataclass(frozen=True)
class _TreePod:
    """A pod as found in the tree (or made by the churner): enough to remove it whole."""

    uid: str
    qos: str
    rel: str  # the pod cgroup, relative to the cgroup mount (v2) or to each v1 hierarchy
    container_ids: tuple[str, ...]  # the sandbox's included
    pids: tuple[int, ...]


@dataclass(frozen=True)
class PodStep:
    """What one ``advance()`` did."""

    removed: int
    added: int
    pinned_swapped: bool


def _layout(cgroupfs: Path) -> tuple[int, str, str]:
    """(cgroup version, driver, kubepods directory name) of the tree, as the generator wrote them."""
    for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
        if (cgroupfs / name / "cgroup.controllers").exists():
            return 2, driver, name
        if (cgroupfs / "cpuset" / name).is_dir():
            return 1, driver, name
    raise PodChurnError(f"{cgroupfs}: no kubepods cgroup")


def _read_text(path: str | Path) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


class PodChurn:
    """Pods of a generated tree replaced ``per_advance`` at a time, a pinned one every ``pinned_every`` advances."""

    def __init__(self, root: str | os.PathLike[str], *, per_advance: float = 1.0, pinned_every: int = 0,
                 seed: int = 1) -> None:  # fmt: skip
        if per_advance < 0 or pinned_every < 0:
            raise ValueError(f"pods per advance and pinned_every must not be negative ({per_advance}, {pinned_every})")
        self.root = os.fspath(root)
        self.host = FakeHost(self.root)
        self.paths = Paths.from_root(self.root)
        self.cgroupfs = Path(self.paths.cgroupfs)
        self.version, self.driver, self.kubepods = _layout(self.cgroupfs)
        self.per_advance = per_advance
        self.pinned_every = pinned_every
        self.rng = random.Random(f"{seed}/pods")
        self.owed = 0.0
        self.advances = 0
        cpu_state = self._cpu_state()
        self.shared: CPUSet = cpu_state.default_cpuset
        mems_file = "cpuset.mems.effective" if self.version == 2 else "cpuset.effective_mems"
        mems_dir = self.cgroupfs / self.kubepods if self.version == 2 else self.cgroupfs / "cpuset" / self.kubepods
        self.nodes = sorted(parse_cpulist(_read_text(mems_dir / mems_file) or "0"))
        gpu_pods = self._gpu_pods()
        pinned = set(cpu_state.entries) - gpu_pods
        self.movable: deque[_TreePod] = deque()
        self.pinned: deque[_TreePod] = deque()
        # Every pod UID in the tree: a new pod never takes one. A mover started on a tree that an earlier mover
        # churned draws the same UIDs from the same seed; without this its new pods were written over that mover's
        # (one pod fewer per advance, so a second round measured a shrinking tree).
        self.uids: set[str] = set()
        for pod in self._tree_pods():
            self.uids.add(pod.uid)
            if pod.uid in gpu_pods:  # the planted drift sits on GPU pods too: it stays
                continue
            if pod.qos in (QOS_BURSTABLE, QOS_BESTEFFORT):
                self.movable.append(pod)
            elif pod.uid in pinned:
                self.pinned.append(pod)
        if per_advance and not self.movable:
            raise PodChurnError(f"{self.root}: no Burstable or BestEffort pod to replace")
        if pinned_every and not self.pinned:
            raise PodChurnError(f"{self.root}: no pinned pod without a GPU to replace")
        self.next_pid = 1 + max((int(entry) for entry in os.listdir(self.paths.procfs) if entry.isdigit()), default=1)
        self.shim = min((pod.pids[0] for pod in self.movable if pod.pids), default=1)
        self.added_numa_stats: list[str] = []  # memory.numa_stat files of pods added since the last call
        self.removed_dirs: list[str] = []  # cgroup directories of pods removed since the last call

    # ------------------------------------------------------------------------------------------- reading the tree
    def _cpu_state(self) -> CpuManagerState:
        path = f"{self.root}/{CPU_STATE}"
        data = _read_text(path)
        state, problem = parse_cpu_manager_state(data or "", path) if data is not None else (None, None)
        if state is None:
            raise PodChurnError(f"{path}: {problem.what if problem else 'missing'}")
        return state

    def _gpu_pods(self) -> set[str]:
        path = f"{self.root}/{DEVICE_CHECKPOINT}"
        data = _read_text(path)
        if data is None:
            return set()
        checkpoint, _problem = parse_device_checkpoint(data, path)
        return {entry.pod_uid for entry in checkpoint.entries} if checkpoint is not None else set()

    def _hierarchy(self, rel: str) -> str:
        """The directory holding a cgroup's cpuset and cgroup.procs files."""
        return f"{self.cgroupfs}/{rel}" if self.version == 2 else f"{self.cgroupfs}/cpuset/{rel}"

    def _pod_at(self, rel: str, uid: str, qos: str) -> _TreePod:
        ids: list[str] = []
        pids: list[int] = []
        directory = self._hierarchy(rel)
        for name in sorted(os.listdir(directory)):
            parsed = parse_container_dir(name)
            if parsed is None:
                continue
            ids.append(parsed[1])
            procs = _read_text(f"{directory}/{name}/cgroup.procs") or ""
            pids.extend(int(word) for word in procs.split() if word.isdigit())
        return _TreePod(uid, qos, rel, tuple(ids), tuple(pids))

    def _tree_pods(self) -> Iterable[_TreePod]:
        top = self._hierarchy(self.kubepods)
        qos_dirs = {(f"kubepods-{qos}.slice" if self.driver == "systemd" else qos): qos
                    for qos in (QOS_BURSTABLE, QOS_BESTEFFORT)}  # fmt: skip
        for name in sorted(os.listdir(top)):
            if name in qos_dirs:
                for pod_name in sorted(os.listdir(f"{top}/{name}")):
                    uid = parse_pod_dir(pod_name, self.driver, qos_dirs[name])
                    if uid is not None:
                        yield self._pod_at(f"{self.kubepods}/{name}/{pod_name}", uid, qos_dirs[name])
                continue
            uid = parse_pod_dir(name, self.driver, QOS_GUARANTEED)
            if uid is not None:
                yield self._pod_at(f"{self.kubepods}/{name}", uid, QOS_GUARANTEED)

    # ------------------------------------------------------------------------------------------- writing
    def _remove(self, pod: _TreePod) -> tuple[str, str] | None:
        """Delete everything of ``pod``; returns its (namespace, name) from its log directory when it has one."""
        base = str(self.cgroupfs)
        hierarchies = [f"{base}/{pod.rel}"] if self.version == 2 else [
            f"{base}/{hierarchy}/{pod.rel}" for hierarchy in ("cpuset", "memory", "cpu,cpuacct")]  # fmt: skip
        targets = list(hierarchies)
        for cid in pod.container_ids:
            targets += [f"{self.root}/{directory}/{cid}" for directory in BUNDLE_DIRS]
        logs = glob.glob(f"{self.root}/var/log/pods/*_{pod.uid}")
        targets += logs
        targets += [f"{self.paths.procfs}/{pid}" for pid in pod.pids]
        for target in targets:
            shutil.rmtree(target, ignore_errors=True)
        self.uids.discard(pod.uid)
        self.removed_dirs += hierarchies
        if logs:
            namespace, name, _uid = os.path.basename(logs[0]).split("_", 2)
            return namespace, name
        return None

    def _pids(self, count: int) -> tuple[int, ...]:
        pids = tuple(range(self.next_pid, self.next_pid + count))
        self.next_pid += count
        return pids

    def _add(self, qos: str, namespace: str, name: str, containers: list[ContainerSpec]) -> _TreePod:
        rng = self.rng
        uid = gen._uid(rng)
        while uid in self.uids:
            uid = gen._uid(rng)
        self.uids.add(uid)
        handle = add_pod(self.host, uid=uid, qos=qos, namespace=namespace, name=name, containers=containers)
        ids, pids = [], []
        mems = format_cpulist(self.nodes)
        for container in ([handle.sandbox] if handle.sandbox else []) + list(handle.containers):
            ids.append(container.container_id)
            pool = sorted(container.cpus)
            for pid in container.pids:
                comm = "pause" if container.is_sandbox else container.name[:15]
                proc = gen._Proc(pid, comm, self.shim, rng.choice(pool), cgroup="/" + container.cgroup_path,
                                 allowed=container.cpus, in_pod=True)  # fmt: skip
                gen._write_proc(self.root, proc, self.version, rng, full=False, mems=mems)
                pids.append(pid)
            directory = (f"{self.cgroupfs}/{container.cgroup_path}" if self.version == 2
                         else f"{self.cgroupfs}/memory/{container.cgroup_path}")  # fmt: skip
            if os.path.exists(f"{directory}/memory.numa_stat"):
                self.added_numa_stats.append(f"{directory}/memory.numa_stat")
        return _TreePod(uid, qos, handle.cgroup_path, tuple(ids), tuple(pids))

    def _replace_movable(self) -> None:
        rng = self.rng
        old = self.movable.popleft()
        # The new pod comes in the old one's namespace: the mix of namespaces stays, and so does the planted
        # foreign workload (node_workload_not_isolated) when its pod is the one replaced.
        where = self._remove(old)
        namespace = where[0] if where is not None else rng.choice(gen._NAMESPACES)
        app = rng.choice(gen._APPS)
        qos = QOS_BURSTABLE if rng.random() < 0.7 else QOS_BESTEFFORT
        containers = []
        for index in range(rng.choice(gen.CONTAINERS_PER_POD)):
            cname = app if index == 0 else gen._SIDECARS[(index - 1) % len(gen._SIDECARS)]
            quota = rng.choice((50000, 100000, 200000, 400000)) if qos == QOS_BURSTABLE else None
            numa = gen._numa_split(rng, rng.randrange(20, 2000) * MiB, len(self.nodes))
            containers.append(ContainerSpec(cname, self.shared, set(self.nodes), numa, cpu_quota_us=quota,
                                            pids=self._pids(rng.choice(PIDS_PER_CONTAINER))))  # fmt: skip
        name = f"{app}-{gen._suffix(rng, 9)}-{gen._suffix(rng, 5)}"
        self.movable.append(self._add(qos, namespace, name, containers))

    def _replace_pinned(self) -> None:
        """A pinned pod deleted and created again under a new UID on the same CPUs, the checkpoints following."""
        old = self.pinned.popleft()
        memory_path = f"{self.root}/{MEMORY_STATE}"
        cpu_state = self._cpu_state()
        memory_text = _read_text(memory_path)
        memory_state = parse_memory_manager_state(memory_text, memory_path)[0] if memory_text is not None else None
        assigned = dict(cpu_state.entries.get(old.uid, {}))
        specs = []
        directory = self._hierarchy(old.rel)
        for name in sorted(os.listdir(directory)):
            parsed = parse_container_dir(name)
            if parsed is None:
                continue
            bundle = next((f"{self.root}/{d}/{parsed[1]}/config.json" for d in BUNDLE_DIRS
                           if os.path.exists(f"{self.root}/{d}/{parsed[1]}/config.json")), None)  # fmt: skip
            annotations = json.loads(_read_text(bundle) or "{}").get("annotations", {}) if bundle else {}
            if annotations.get("io.kubernetes.cri.container-type") == "sandbox":
                continue
            cname = annotations.get("io.kubernetes.cri.container-name", f"c{len(specs)}")
            cpus_file = "cpuset.cpus.effective" if self.version == 2 else "cpuset.effective_cpus"
            mems_file = "cpuset.mems.effective" if self.version == 2 else "cpuset.effective_mems"
            cpus = parse_cpulist(_read_text(f"{directory}/{name}/{cpus_file}") or "")
            mems = parse_cpulist(_read_text(f"{directory}/{name}/{mems_file}") or "")
            node = min(mems) if mems else self.nodes[0]
            resident = self.rng.randrange(256, 4096) * MiB
            specs.append(ContainerSpec(cname, cpus, mems, {node: resident}, cpu_quota_us=100000 * max(1, len(cpus)),
                                       pids=self._pids(self.rng.choice(PIDS_PER_CONTAINER))))  # fmt: skip
        where = self._remove(old)
        namespace, name = where if where is not None else ("inference", f"pinned-{self.advances}")
        stem = name.rsplit("-", 1)[0]
        new = self._add(QOS_GUARANTEED, namespace, f"{stem}-{gen._suffix(self.rng, 5)}", specs)
        entries = {uid: dict(containers) for uid, containers in cpu_state.entries.items() if uid != old.uid}
        entries[new.uid] = assigned
        write_cpu_manager_state(self.host, policy=cpu_state.policy_name, default_cpuset=cpu_state.default_cpuset,
                                entries={uid: {c: format_cpulist(cpus) for c, cpus in containers.items()}
                                         for uid, containers in entries.items()})  # fmt: skip
        if memory_state is not None:
            memory_entries = {uid: dict(blocks) for uid, blocks in memory_state.entries.items() if uid != old.uid}
            if old.uid in memory_state.entries:
                memory_entries[new.uid] = dict(memory_state.entries[old.uid])
            write_memory_manager_state(self.host, policy=memory_state.policy_name,
                                       machine_state=memory_state.machine_state, entries=memory_entries)  # fmt: skip
        self.pinned.append(new)

    def advance(self) -> PodStep:
        self.advances += 1
        self.owed += self.per_advance
        replaced = 0
        while self.owed >= 1.0:
            self.owed -= 1.0
            self._replace_movable()
            replaced += 1
        swapped = bool(self.pinned_every) and self.advances % self.pinned_every == 0
        if swapped:
            self._replace_pinned()
        return PodStep(replaced + swapped, replaced + swapped, swapped)

    def take_changes(self) -> tuple[list[str], list[str]]:
        """(memory.numa_stat files added, cgroup directories removed) since the last call, for the counters' churn."""
        added, removed = self.added_numa_stats, self.removed_dirs
        self.added_numa_stats, self.removed_dirs = [], []
        return added, removed

    def describe(self) -> str:
        return (f"{len(self.movable)} Burstable/BestEffort pods, {self.per_advance:g} replaced per advance; "
                f"{len(self.pinned)} pinned pods without a GPU, one replaced every "
                f"{self.pinned_every or 'never'} advances")  # fmt: skip
