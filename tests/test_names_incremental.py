"""The names source read as serve reads it (``read_incremental``, staggered) gives what a full ``read`` gives.

Random sequences of changes (pods and containers coming and going, container log directories appearing, a bundle
seen before its config.json is written, a config.json rewritten in place, links among the log directories, entries
that are not pod log directories) are applied to a fake host, with the directories' mtimes stamped from a virtual
clock as the kernel stamps them: several changes within one tick leave one mtime, and the clock may stand still
between readings (the racy case). After every reading the incremental reading must equal a fresh full read; only a
config.json rewritten in place may be seen late, and within its family's round (K times its stretch).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
import zlib
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakehost import FakeHost
from fakehost.pods import ContainerSpec, PodHandle, add_pod, remove_pod
from numawatch.host import HostReader
from numawatch.model.workloads import QOS_BURSTABLE, Names
from numawatch.paths import Paths
from numawatch.refresh import BUNDLE_CONFIGS, POD_LOG_DIRS, POLICIES
from numawatch.sources import names
from source_inputs import Driven

K = 4
R = K * POLICIES["names"].stretch.get(BUNDLE_CONFIGS, 1)  # the bundle configs' round: each is stat'ed once in R
L = K * POLICIES["names"].stretch.get(POD_LOG_DIRS, 1)  # the pod log directories' round
SECOND = 1_000_000_000
LOCATIONS = (("containerd", "k3s"), ("containerd", "containerd"), ("crio", "run"), ("crio", "var"))
CONTAINER_NAMES = ("app", "sidecar", "proxy", "loader")


class Clock:
    """The names source's clock (``names.time``), moved by the test: what decides whether an mtime has settled."""

    def __init__(self) -> None:
        self.ns = time.time_ns()

    def time_ns(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * SECOND)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(names, "time", SimpleNamespace(time_ns=found.time_ns))
    return found


class Stamps:
    """Stamps every directory the names source judges by its mtime (the bundle directories, var/log/pods and each
    pod log directory) with the clock's time when its entries changed since the last stamp, as the kernel would
    have at that moment: changes stamped at one clock time share one mtime."""

    def __init__(self, host: FakeHost, clock: Clock) -> None:
        self.host = host
        self.clock = clock
        self.stamped: dict[Path, int] = {}

    def _directories(self) -> list[Path]:
        paths = self.host.paths
        found = [Path(directory) for _, directory, _ in names.bundle_locations(paths)] + [Path(paths.pod_logs)]
        if Path(paths.pod_logs).is_dir():
            found += [entry for entry in Path(paths.pod_logs).iterdir() if entry.is_dir() and not entry.is_symlink()]
        return [directory for directory in found if directory.is_dir()]

    def __call__(self) -> None:
        for directory in self._directories():
            if self.stamped.get(directory) != directory.stat().st_mtime_ns:
                os.utime(directory, ns=(self.clock.ns, self.clock.ns))
                self.stamped[directory] = self.clock.ns


class Scenario:
    """One random sequence of changes on a fake host, read incrementally after each step and checked."""

    def __init__(self, host: FakeHost, clock: Clock, seed: int) -> None:
        self.host = host
        self.clock = clock
        self.rng = random.Random(seed)
        self.stamps = Stamps(host, clock)
        self.driven = Driven(names.SOURCE, stagger=K)
        self.pods: list[PodHandle] = []
        self.hidden: dict[Path, bytes] = {}  # config.json files of bundles made without them yet
        self.links: list[tuple[Path, str]] = []  # targets of links among the container log directories, pod UIDs
        self.rewritten: dict[str, tuple[int, object]] = {}  # container ID -> (first reading after, identity before)
        # pod UID -> (first reading after its log directory's latest change, the containers it listed since before)
        self.logs_moved: dict[str, tuple[int, list[object]]] = {}
        self.made = 0
        self.last: Names | None = None

    # ---------------------------------------------------------------------------------------------- changes
    def add(self, *, pending: bool = False) -> None:
        self.made += 1
        runtime, bundle_root = self.rng.choice(LOCATIONS)
        chosen = self.rng.sample(CONTAINER_NAMES, self.rng.randint(1, 3))
        pod = add_pod(
            self.host,
            uid=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            qos=QOS_BURSTABLE,
            namespace=self.rng.choice(("web", "llm", "batch")),
            name=f"pod-{self.made}",
            containers=[ContainerSpec(name, cpus="0-3", mems="0") for name in chosen],
            runtime=runtime,
            bundle_root=bundle_root if self.rng.random() < 0.85 else None,
            pod_logs=self.rng.random() < 0.85,
        )
        self.pods.append(pod)
        if pending:  # the runtime made the bundle directories; their config.json comes later
            for config in self._configs(pod):
                self.hidden[config] = config.read_bytes()
                config.unlink()

    def remove(self) -> None:
        pod = self.pods.pop(self.rng.randrange(len(self.pods)))
        remove_pod(self.host, pod)
        for config in [config for config in self.hidden if not config.parent.exists()]:
            del self.hidden[config]

    def complete_pending(self) -> None:
        config = self.rng.choice(sorted(self.hidden))
        config.write_bytes(self.hidden.pop(config))

    def rewrite(self) -> None:
        """A config.json rewritten in place (same inode): the container renamed, or the file made malformed; or
        removed while its bundle directory stays. A known bundle's file is stat'ed again in its turn: seen late."""
        candidates = [
            (pod, handle, config)
            for pod in self.pods
            for handle, config in zip(pod.containers, self._configs(pod, sandbox=False), strict=False)
            if config.exists() and handle.container_id not in self.rewritten
        ]
        if not candidates or self.last is None:
            return
        pod, handle, config = self.rng.choice(candidates)
        before = self.last.containers.get(handle.container_id)
        data = config.read_bytes()
        try:
            spec = json.loads(data)
        except ValueError:
            return  # malformed already
        chance = self.rng.random()
        if chance < 0.15:  # the runtime tearing the bundle down: its directory stays in the listing
            config.unlink()
            self.rewritten[handle.container_id] = (self.driven.readings, before)
            return
        if chance < 0.4:
            replacement = data[: len(data) // 2]  # cut short: a different size, not valid JSON
        else:
            annotations = spec["annotations"]
            key = "io.kubernetes.container.name" if pod.runtime == "crio" else "io.kubernetes.cri.container-name"
            annotations[key] = (annotations[key] + "-x")[:63]
            replacement = json.dumps(spec).encode()
        inode = config.stat().st_ino
        with config.open("r+b") as file:  # in place: same inode, new content
            file.truncate(0)
            file.write(replacement)
        assert config.stat().st_ino == inode
        self.rewritten[handle.container_id] = (self.driven.readings, before)

    def add_log_container(self) -> None:
        logged = [pod for pod in self.pods if pod.log_dir and self.host.path(pod.log_dir).is_dir()]
        if logged:
            pod = self.rng.choice(logged)
            self._log_moves(pod.uid)
            self.host.mkdir(f"{pod.log_dir}/extra-{self.rng.randrange(1000)}")

    def _log_moves(self, uid: str) -> None:
        """The pod's log directory changes now: until its turn a reading may show what it listed before."""
        before = self.last.pod_log_containers.get(uid) if self.last is not None else None
        _, values = self.logs_moved.get(uid, (0, []))
        self.logs_moved[uid] = (self.driven.readings, [*values, before])

    def link_log_container(self) -> None:
        """A container log directory that is a link to a directory elsewhere under var/log."""
        logged = [pod for pod in self.pods if pod.log_dir and self.host.path(pod.log_dir).is_dir()]
        if logged:
            pod = self.rng.choice(logged)
            number = self.rng.randrange(1000)
            target = self.host.mkdir(f"var/log/elsewhere/{number}")
            self._log_moves(pod.uid)
            self.host.symlink(f"{pod.log_dir}/linked-{number}", f"../../elsewhere/{number}")
            self.links.append((target, pod.uid))

    def remove_link_target(self) -> None:
        """The link's target goes: the pod log directory holding the link does not change."""
        if self.links:
            target, uid = self.links.pop(self.rng.randrange(len(self.links)))
            self._log_moves(uid)
            target.rmdir()

    def add_stray_entry(self) -> None:
        """var/log/pods entries the kubelet did not make: a file with a pod log directory's name, a stray name."""
        number = self.rng.randrange(1000)
        if self.rng.random() < 0.5:
            self.host.write(f"var/log/pods/default_stray-{number}_{uuid.UUID(int=number, version=4)}", "x")
        else:
            self.host.mkdir(f"var/log/pods/lost+found-{number}")

    def _configs(self, pod: PodHandle, *, sandbox: bool = True) -> list[Path]:
        """The pod's config.json paths, the sandbox's first (as add_pod writes them) unless ``sandbox`` is False."""
        directories = list(pod.bundle_dirs)
        if not sandbox and pod.sandbox is not None and directories:
            directories = directories[1:]
        inner = "userdata/config.json" if pod.runtime == "crio" else "config.json"
        return [self.host.path(f"{directory}/{inner}") for directory in directories]

    # ---------------------------------------------------------------------------------------------- a step
    def step(self) -> None:
        for _ in range(self.rng.choice((0, 1, 1, 2, 3))):
            change = self.rng.random()
            if change < 0.25 or not self.pods:
                self.add(pending=self.rng.random() < 0.2)
            elif change < 0.4 or len(self.pods) > 10:
                self.remove()
            elif change < 0.5 and self.hidden:
                self.complete_pending()
            elif change < 0.65:
                self.rewrite()
            elif change < 0.75:
                self.add_log_container()
            elif change < 0.8:
                self.link_log_container()
            elif change < 0.85:
                self.remove_link_target()
            elif change < 0.9:
                self.add_stray_entry()
            elif change < 0.95:
                self.driven.refresh_all()  # a SIGHUP: the next reading reads everything
        self.stamps()
        self.clock.advance(self.rng.choice((0, 0, 0.5, 1, 2.5, 5)))  # 0: the reading shares the changes' tick
        self.check(self.driven.readings, self.driven.read(self.host.paths))

    def check(self, reading: int, incremental: Names) -> None:
        full = names.read(self.host.paths)
        for container_id in [cid for cid, (first, _) in self.rewritten.items() if reading >= first + R - 1]:
            del self.rewritten[container_id]  # its turn has come: it must be seen now
        for uid in [uid for uid, (first, _) in self.logs_moved.items() if reading >= first + L - 1]:
            del self.logs_moved[uid]  # its turn has come: it must be seen now
        assert incremental.pods == full.pods
        for uid in full.pod_log_containers.keys() | incremental.pod_log_containers.keys():
            now = full.pod_log_containers.get(uid)
            if uid in self.logs_moved:
                _, values = self.logs_moved[uid]
                assert incremental.pod_log_containers.get(uid) in (*values, now), uid
                values.append(now)  # seen by a full reading: a later reading may show it until the turn
            else:
                assert incremental.pod_log_containers.get(uid) == now, uid
        for container_id in full.containers.keys() | incremental.containers.keys():
            now = full.containers.get(container_id)
            if container_id in self.rewritten:
                assert incremental.containers.get(container_id) in (now, self.rewritten[container_id][1])
            else:
                assert incremental.containers.get(container_id) == now, container_id
        if not self.rewritten and not self.logs_moved:
            assert incremental == full
        self.last = full


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.slow
def test_an_incremental_reading_equals_a_full_read_through_random_changes(fake_host, clock, seed):
    scenario = Scenario(fake_host, clock, seed)
    fake_host.mkdir("var/log/pods")
    scenario.add()
    for _ in range(60):
        scenario.step()


@pytest.mark.parametrize("seed", range(3))
def test_a_rewritten_config_json_is_seen_within_k_readings_however_the_clock_moves(fake_host, clock, seed):
    scenario = Scenario(fake_host, clock, seed)
    for _ in range(6):
        scenario.add()
    scenario.stamps()
    clock.advance(10)
    scenario.check(scenario.driven.readings, scenario.driven.read(fake_host.paths))
    for _ in range(5):
        scenario.rewrite()
        for _ in range(R):  # nothing else changes: within these R readings every rewrite must be seen
            clock.advance(scenario.rng.choice((0, 1, 5)))
            scenario.check(scenario.driven.readings, scenario.driven.read(fake_host.paths))
        assert not scenario.rewritten
        assert scenario.driven.read(fake_host.paths) == names.read(fake_host.paths)


# ------------------------------------------------------------------------------------------------------ the rotation
def settled_host(host: FakeHost, clock: Clock, pods: int) -> Stamps:
    """Pods whose directories' mtimes have settled (well before the clock's time); the Stamps that stamped them."""
    for number in range(pods):
        add_pod(
            host,
            uid=str(uuid.UUID(int=number + 1, version=4)),
            qos=QOS_BURSTABLE,
            namespace="web",
            name=f"pod-{number}",
            containers=[ContainerSpec("app", cpus="0-3", mems="0"), ContainerSpec("sidecar", cpus="0-3", mems="0")],
        )
    stamps = Stamps(host, clock)
    stamps()
    clock.advance(10 * names.RACY_SECONDS)
    return stamps


class Seen:
    """The host paths the names source used during a block, by kind (HostFs.observe)."""

    def __init__(self) -> None:
        self.paths: dict[str, list[str]] = {"opened": [], "listed": [], "stated": []}

    def __call__(self, path: str, kind: str) -> None:
        self.paths[kind].append(path)

    def configs(self, kind: str) -> list[str]:
        return [path for path in self.paths[kind] if path.endswith("/config.json")]


def observed(read, paths: Paths) -> Seen:
    """What ``read(paths)`` used of the host, seen through the Paths' own HostFs."""
    seen = Seen()
    with paths.fs.observe(seen):
        read(paths)
    return seen


def test_the_names_policy_rotates_the_bundle_configs():
    assert BUNDLE_CONFIGS in POLICIES["names"].rotating and not POLICIES["names"].on_change
    assert names.SOURCE.fingerprint is None and names.SOURCE.incremental is not None


def test_each_known_bundle_is_stated_once_every_k_readings_and_a_whole_reading_states_all(fake_host, clock):
    settled_host(fake_host, clock, pods=8)
    driven = Driven(names.SOURCE, stagger=K)
    every = observed(driven.read, fake_host.paths).configs("stated")
    assert len(every) == 8 * 3  # the first reading knows nothing: every bundle (sandbox and two containers)
    stated: Counter[str] = Counter()
    for reading in range(3 * R):
        turn = driven.readings % R
        seen = observed(driven.read, fake_host.paths).configs("stated")
        # Its turn by a CRC-32 of the container ID: the same bundles at the same turn, whatever the process.
        assert sorted(seen) == sorted(
            path for path in every if zlib.crc32(Path(path).parent.name.encode()) % R == turn
        ), reading
        stated.update(seen)
    assert stated == Counter({path: 3 for path in every})  # once in every R readings

    driven.refresh_all()
    assert sorted(observed(driven.read, fake_host.paths).configs("stated")) == sorted(every)
    assert sorted(observed(names.read, fake_host.paths).configs("stated")) == sorted(every)


def test_a_reading_costs_what_changed(fake_host, clock):
    stamps = settled_host(fake_host, clock, pods=8)
    driven = Driven(names.SOURCE, stagger=K)
    first = driven.read(fake_host.paths)

    quiet = observed(driven.read, fake_host.paths)
    assert quiet.paths["listed"] == [str(fake_host.paths.pod_logs)]  # no bundle directory, no pod log directory
    assert quiet.paths["opened"] == []
    assert driven.read(fake_host.paths) is first

    new = add_pod(
        fake_host,
        uid="9d3e6c1a-0b2f-4c8d-9e7a-6b5c4d3e2f1a",
        qos=QOS_BURSTABLE,
        namespace="web",
        name="new",
        containers=[ContainerSpec("app", cpus="0-3", mems="0")],
    )
    stamps()
    after = observed(driven.read, fake_host.paths)
    bundles = str(names.bundle_locations(fake_host.paths)[1][1])
    assert sorted(after.paths["listed"]) == sorted(
        [bundles, str(fake_host.paths.pod_logs), str(fake_host.path(new.log_dir))]
    )
    assert sorted(Path(path).parent.name for path in after.configs("opened")) == sorted(
        handle.container_id for handle in (new.sandbox, *new.containers) if handle is not None
    )
    assert driven.read(fake_host.paths) == names.read(fake_host.paths)

    remove_pod(fake_host, new)
    stamps()
    gone = observed(driven.read, fake_host.paths)
    assert gone.paths["opened"] == []  # a bundle that went is dropped, nothing else is read again
    assert driven.read(fake_host.paths) == first


def test_a_bundle_directory_changed_within_its_mtime_tick_is_listed_again(fake_host, clock):
    """Two changes stamped with one mtime: the listing taken after the first proves nothing about the second while
    the mtime is recent, and the reading that finds it settled must not trust the racy listing either."""
    stamps = settled_host(fake_host, clock, pods=2)
    driven = Driven(names.SOURCE, stagger=K)
    driven.read(fake_host.paths)
    add_pod(fake_host, uid=str(uuid.UUID(int=100, version=4)), qos=QOS_BURSTABLE, namespace="web", name="a",
            containers=[ContainerSpec("app", cpus="0-3", mems="0")])  # fmt: skip
    stamps()
    assert driven.read(fake_host.paths) == names.read(fake_host.paths)  # listed while its mtime is recent
    add_pod(fake_host, uid=str(uuid.UUID(int=101, version=4)), qos=QOS_BURSTABLE, namespace="web", name="b",
            containers=[ContainerSpec("app", cpus="0-3", mems="0")])  # fmt: skip
    stamps()  # the same tick: the directories' mtimes do not move
    clock.advance(10 * names.RACY_SECONDS)  # ... and have settled by the next reading
    assert {pod.name for pod in driven.read(fake_host.paths).pods.values()} >= {"a", "b"}
    assert driven.read(fake_host.paths) == names.read(fake_host.paths)


def test_the_host_reader_keeps_the_names_generation_while_nothing_changed(fake_host, clock):
    stamps = settled_host(fake_host, clock, pods=3)
    reader = HostReader(fake_host.paths, [names.SOURCE], stagger=K)
    first = reader.read()
    quiet = [reader.read() for _ in range(2 * K)]
    assert {host.generation("names") for host in quiet} == {first.generation("names")}
    assert all(host.statuses["names"].cached and host.names is first.names for host in quiet)
    add_pod(fake_host, uid=str(uuid.UUID(int=200, version=4)), qos=QOS_BURSTABLE, namespace="web", name="c",
            containers=[ContainerSpec("app", cpus="0-3", mems="0")])  # fmt: skip
    stamps()
    changed = reader.read()
    assert changed.generation("names") != first.generation("names") and not changed.statuses["names"].cached
    assert changed.names == names.read(fake_host.paths)
