"""The cgroups source as serve staggers it (the refresh table rotates its pods): pods outside their turn (Burstable
and BestEffort ones over a longer round than Guaranteed ones) are handed out again as the previous reading saw them,
without even a listing of their directories, so a container started or removed inside such a pod shows at the pod's
turn (within its round); pods coming and going show at once; and a container read again is parsed only where its files
changed."""

from __future__ import annotations

import os
import random
import shutil
import zlib

import pytest
from fakehost.hotplug import take_cpus_offline
from fakehost.kubelet import write_cpu_manager_state
from fakehost.pods import ContainerSpec, add_pod, remove_pod, set_container_cpus, set_numa_bytes
from fakehost.topology import add_topology
from numawatch.host import HostReader
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED
from numawatch.refresh import PLACEMENT, POLICIES, SHARED_PODS
from numawatch.sources import cgroups, kubelet_state
from source_inputs import CgroupsReaderWithState

K = 4
# A carried pod's round: K readings times the shared pods' stretch in the refresh table.
S = K * POLICIES["cgroups"].stretch.get(SHARED_PODS, 1)
# A container's memory placement round; it is read at its pod's first turn after its own, so within P + S readings.
P = K * POLICIES["cgroups"].stretch.get(PLACEMENT, 1)
NEW_ID = "e" * 64


def shared_pods(fake_host, count: int = 8, qos: str = QOS_BURSTABLE, first: int = 100):
    """``count`` pods of an application container and a sidecar each on the shared pool, and (the first time) a
    kubelet state file to watch (its changes make every pod be read at every reading for a while)."""
    if not (fake_host.paths.kubelet / "cpu_manager_state").exists():
        write_cpu_manager_state(fake_host, default_cpuset="0-15")
    pods = []
    for index in range(first, first + count):
        containers = [
            ContainerSpec("app", cpus="0-15", mems="0", numa_bytes={0: 1 << 20}, pids=(7000 + index,)),
            ContainerSpec("sidecar", cpus="0-15", mems="0", numa_bytes={0: 1 << 16}, pids=(8000 + index,)),
        ]
        uid = f"00000000-0000-4000-8000-{index:012d}"
        pods.append(add_pod(fake_host, uid=uid, qos=qos, namespace="ns", name=f"b{index}", containers=containers))
    return pods


def settled_reader(fake_host):
    """A staggered reader past the readings that follow its first look at the kubelet's state: pods are carried."""
    reader = CgroupsReaderWithState()
    reader.set_stagger(K)
    for _ in range(K + 1):
        reader.read(fake_host.paths)
    return reader


def listed(monkeypatch) -> list[str]:
    """The pod directories listed from now on (``_container_entries`` is the pod listing)."""
    paths: list[str] = []
    real = cgroups._container_entries

    def recording(path, *args):
        paths.append(path)
        return real(path, *args)

    monkeypatch.setattr(cgroups, "_container_entries", recording)
    return paths


def pod_dir(fake_host, pod) -> str:
    return str(fake_host.root / "sys/fs/cgroup" / pod.cgroup_path)


def ids(result, pod) -> set[str]:
    return {container.container_id for container in result.pod(pod.uid).containers}


def add_container_like(fake_host, pod, name: str, new_id: str = NEW_ID) -> None:
    """A new container directory in the pod, a copy of one of its containers' (the runtime started another)."""
    source = fake_host.root / "sys/fs/cgroup" / pod.container(name).cgroup_path
    shutil.copytree(source, source.with_name(source.name.replace(pod.container(name).container_id, new_id)))


# --------------------------------------------------------------------------------------------------- no listing
def test_a_carried_pods_directory_and_a_guaranteed_pods_are_listed_only_in_their_turn(fake_host, monkeypatch):
    burstable = shared_pods(fake_host)
    burstable += shared_pods(fake_host, count=4, qos=QOS_BESTEFFORT, first=200)
    guaranteed = add_pod(
        fake_host, uid="0b9e8d7c-6a5f-4e3d-8c2b-a1b2c3d4e5f6", qos=QOS_GUARANTEED, namespace="ns", name="g",
        containers=[ContainerSpec("app", cpus="4-7", mems="0", numa_bytes={0: 1 << 20}, pids=(9000,))],
    )  # fmt: skip
    reader = settled_reader(fake_host)
    listings = listed(monkeypatch)
    by_reader: list[str] = []

    for _ in range(S):
        listings.clear()
        found = reader.read(fake_host.paths)
        by_reader += listings
        assert found == cgroups.read(fake_host.paths)  # nothing changed: the same answer as reading everything

    assert {pod.uid: by_reader.count(pod_dir(fake_host, pod)) for pod in burstable} == {pod.uid: 1 for pod in burstable}
    assert by_reader.count(pod_dir(fake_host, guaranteed)) == S // K  # a Guaranteed pod's listing: once in K


def test_a_guaranteed_pods_added_and_removed_containers_show_at_its_turn_within_the_stagger(fake_host, monkeypatch):
    shared_pods(fake_host)
    guaranteed = add_pod(
        fake_host, uid="0b9e8d7c-6a5f-4e3d-8c2b-a1b2c3d4e5f6", qos=QOS_GUARANTEED, namespace="ns", name="g",
        containers=[ContainerSpec("app", cpus="4-7", mems="0", numa_bytes={0: 1 << 20}, pids=(9000,)),
                    ContainerSpec("side", cpus="8-9", mems="0", numa_bytes={0: 1 << 20}, pids=(9001,))],
    )  # fmt: skip
    reader = settled_reader(fake_host)
    listings = listed(monkeypatch)
    for _ in range(K):  # to a reading right after the pod's listing turn
        listings.clear()
        reader.read(fake_host.paths)
        if pod_dir(fake_host, guaranteed) in listings:
            break
    add_container_like(fake_host, guaranteed, "app")
    seen = []
    for _ in range(K):
        found = reader.read(fake_host.paths)
        assert {container.cpus_effective for container in found.pod(guaranteed.uid).containers} >= {
            frozenset(range(4, 8)),
            frozenset({8, 9}),
        }
        seen.append(NEW_ID in ids(found, guaranteed))
    assert seen[-1] and not seen[0]  # within K readings, not at once (outside the pod's turn)
    assert found == cgroups.read(fake_host.paths)
    for _ in range(K):  # the new container's verdict settled: the pod is carried between its turns again
        reader.read(fake_host.paths)

    side = guaranteed.container("side").container_id
    shutil.rmtree(fake_host.root / "sys/fs/cgroup" / guaranteed.container("side").cgroup_path)
    gone = [side not in ids(reader.read(fake_host.paths), guaranteed) for _ in range(K)]

    assert gone[-1] and gone.index(True) < K and all(gone[gone.index(True) :])  # within K readings, for good
    assert reader.read(fake_host.paths) == cgroups.read(fake_host.paths)


def test_carrying_a_pod_hands_its_state_on_as_one_object(fake_host, monkeypatch):
    shared_pods(fake_host)
    reader = settled_reader(fake_host)
    listings = listed(monkeypatch)
    states = dict(reader.pods)

    reader.read(fake_host.paths)

    carried = [rel for rel, state in reader.pods.items() if state is states[rel]]
    assert carried  # some pods were outside their turn ...
    assert len(carried) < len(states)  # ... and some in it
    assert not any(path.endswith(rel) for rel in carried for path in listings)


# --------------------------------------------------------------------------------------------------- containers
def last_in_turn(monkeypatch, reader, fake_host, pods):
    """The pod whose turn comes last in the reader's next S readings (learnt from a round of S readings), so a
    change made to it now stays unseen for S-1 readings."""
    listings = listed(monkeypatch)
    for _ in range(S):
        listings.clear()
        reader.read(fake_host.paths)
    return next(pod for pod in pods if pod_dir(fake_host, pod) in listings)


def read_round(monkeypatch, reader, fake_host, pod) -> list:
    """S readings, checking that ``pod``'s directory is listed at the last one only (its turn)."""
    listings = listed(monkeypatch)
    readings = []
    for index in range(S):
        listings.clear()
        readings.append(reader.read(fake_host.paths))
        assert (pod_dir(fake_host, pod) in listings) == (index == S - 1)
    return readings


def test_a_container_started_in_a_carried_pod_shows_at_the_pods_turn_and_not_before(fake_host, monkeypatch):
    pods = shared_pods(fake_host)
    reader = settled_reader(fake_host)
    pod = last_in_turn(monkeypatch, reader, fake_host, pods)

    add_container_like(fake_host, pod, "app")
    readings = read_round(monkeypatch, reader, fake_host, pod)

    assert [NEW_ID in ids(found, pod) for found in readings] == [False] * (S - 1) + [True]
    assert readings[-1] == cgroups.read(fake_host.paths)


def test_a_container_started_in_a_pod_is_seen_at_once_by_an_unstaggered_reader(fake_host):
    pods = shared_pods(fake_host)
    reader = CgroupsReaderWithState()  # check and capture: no stagger
    reader.read(fake_host.paths)

    add_container_like(fake_host, pods[3], "app")

    assert NEW_ID in ids(reader.read(fake_host.paths), pods[3])
    assert NEW_ID in ids(cgroups.read(fake_host.paths), pods[3])


def test_a_container_removed_from_a_carried_pod_drops_out_at_the_pods_turn(fake_host, monkeypatch):
    pods = shared_pods(fake_host)
    reader = settled_reader(fake_host)
    pod = last_in_turn(monkeypatch, reader, fake_host, pods)
    sidecar = pod.container("sidecar")

    shutil.rmtree(fake_host.root / "sys/fs/cgroup" / sidecar.cgroup_path)
    readings = read_round(monkeypatch, reader, fake_host, pod)

    assert [sidecar.container_id in ids(found, pod) for found in readings] == [True] * (S - 1) + [False]
    assert sidecar.container_id not in reader.containers
    assert readings[-1] == cgroups.read(fake_host.paths)


def test_a_restarted_container_of_a_carried_pod_shows_at_the_pods_turn(fake_host, monkeypatch):
    pods = shared_pods(fake_host)
    reader = settled_reader(fake_host)
    pod = last_in_turn(monkeypatch, reader, fake_host, pods)
    old = pod.container("app")
    old_dir = fake_host.root / "sys/fs/cgroup" / old.cgroup_path

    os.rename(old_dir, old_dir.with_name(old_dir.name.replace(old.container_id, NEW_ID)))
    readings = read_round(monkeypatch, reader, fake_host, pod)

    seen = [(NEW_ID in ids(found, pod), old.container_id in ids(found, pod)) for found in readings]
    assert seen == [(False, True)] * (S - 1) + [(True, False)]


def test_while_pods_may_not_be_carried_every_pod_is_listed_and_a_new_container_shows_at_once(fake_host, monkeypatch):
    pods = shared_pods(fake_host)
    reader = settled_reader(fake_host)
    write_cpu_manager_state(fake_host, default_cpuset="0-11")  # the CPU Manager moved: every shared cpuset follows
    listings = listed(monkeypatch)

    reader.read(fake_host.paths)  # notices the change
    add_container_like(fake_host, pods[6], "sidecar")
    before = len(listings)
    found = reader.read(fake_host.paths)

    assert NEW_ID in ids(found, pods[6])
    assert sorted(listings[before:]) == sorted(pod_dir(fake_host, pod) for pod in pods)


def test_a_cpu_manager_change_that_leaves_the_shared_pool_alone_keeps_shared_pods_carried(fake_host, monkeypatch):
    pods = shared_pods(fake_host)
    reader = settled_reader(fake_host)
    # A pinned pod replaced on the same CPUs: new exclusive entries, the same defaultCpuSet (no shared cpuset moves).
    write_cpu_manager_state(fake_host, default_cpuset="0-15", entries={"00000000-0000-4000-8000-000000000999": {
        "app": "16-17"}})  # fmt: skip
    listings = listed(monkeypatch)

    for _ in range(S):
        before = len(listings)
        reader.read(fake_host.paths)
        assert len(listings) - before < len(pods)  # a share of the pods per reading, in their turn, as before
    assert sorted(set(listings)) == sorted(pod_dir(fake_host, pod) for pod in pods)  # each within its round


def pods_in_every_turn(fake_host, count: int, name: str, containers) -> list:
    """``count`` Guaranteed pods whose UIDs take every turn of the rotation of Guaranteed pods (a pod's turn is its
    UID's CRC modulo K), so that at any reading most of them are outside their turn; ``containers(index)`` gives each
    pod's containers."""
    pods, turns, index = [], set(), 0
    while len(pods) < count:
        uid = f"{zlib.crc32(name.encode()):08x}-0000-4000-8000-{index:012d}"
        index += 1
        turn = zlib.crc32(uid.encode()) % K
        if turn in turns and len(turns) < K:
            continue
        turns.add(turn)
        pods.append(add_pod(fake_host, uid=uid, qos=QOS_GUARANTEED, namespace="ns", name=f"{name}-{len(pods)}",
                            containers=containers(len(pods))))  # fmt: skip
    return pods


def test_a_shared_pool_change_reads_at_once_every_guaranteed_pod_with_a_container_on_the_pool(fake_host, monkeypatch):
    shared = shared_pods(fake_host, count=2)
    # Guaranteed pods of an exclusive server and a fractional sidecar (on the pool), and pinned ones without one.
    with_sidecar = pods_in_every_turn(fake_host, K, "served", lambda i: [
        ContainerSpec("server", cpus={16 + i}, mems="0", numa_bytes={0: 1 << 20}, pids=(9100 + i,)),
        ContainerSpec("metrics", cpus="0-15", mems="0", numa_bytes={0: 1 << 16}, pids=(9200 + i,))])  # fmt: skip
    pinned = pods_in_every_turn(fake_host, K, "pinned", lambda i: [
        ContainerSpec("app", cpus={24 + i}, mems="0", numa_bytes={0: 1 << 20}, pids=(9300 + i,))])  # fmt: skip
    reader = settled_reader(fake_host)
    # A pod admitted on CPUs 12-15: the pool shrinks and the kubelet's reconcile moves every container on it.
    write_cpu_manager_state(fake_host, default_cpuset="0-11")
    for pod in shared:
        for name in ("app", "sidecar"):
            set_container_cpus(fake_host, pod, name, "0-11")
    for pod in with_sidecar:
        set_container_cpus(fake_host, pod, "metrics", "0-11")
    listings = listed(monkeypatch)

    found = reader.read(fake_host.paths)
    read_now = set(listings)

    assert found == cgroups.read(fake_host.paths)  # no container is left on the pool as it was
    assert {pod_dir(fake_host, pod) for pod in with_sidecar} <= read_now
    assert len({pod_dir(fake_host, pod) for pod in pinned} & read_now) <= 1  # only in their turn


def test_the_online_cpus_changing_reads_every_pod_at_once(fake_host):
    # A CPU going offline leaves every cpuset that held it (the kernel's), the kubepods cgroup's first.
    add_topology(fake_host, sockets=2, cores_per_socket=8, threads_per_core=2)
    shared_pods(fake_host)
    pinned = pods_in_every_turn(fake_host, K, "pinned", lambda i: [
        ContainerSpec("app", cpus={16 + 2 * i, 17 + 2 * i}, mems="0", numa_bytes={0: 1 << 20}, pids=(9300 + i,))])
    reader = settled_reader(fake_host)

    take_cpus_offline(fake_host, {15, 17, 19, 21, 23})
    offline = reader.read(fake_host.paths)
    expected = cpusets(cgroups.read(fake_host.paths))
    later = [cpusets(reader.read(fake_host.paths)) for _ in range(S)]

    assert cpusets(offline) == expected  # every pod read at once, whatever its turn
    assert all(found == expected for found in later)
    assert 15 not in offline.root_cpus_effective
    assert [expected[pod.container("app").container_id] for pod in pinned] == [{16}, {18}, {20}, {22}]


def cpusets(found) -> dict[str, frozenset[int] | None]:
    """Each container's cpuset by its ID; not the sandboxes': nothing judges them, and a staggered reading reads them
    only in their turn."""
    return {
        container.container_id: container.cpus_effective
        for pod in found.pods
        for container in pod.containers
        if not container.is_sandbox
    }


# --------------------------------------------------------------------------------------------------- pods
def test_pods_removed_outside_their_turn_are_gone_at_once_and_forgotten(fake_host):
    pods = shared_pods(fake_host)
    reader = settled_reader(fake_host)
    gone, kept = pods[:5], pods[5:]
    for pod in gone:
        remove_pod(fake_host, pod)

    found = reader.read(fake_host.paths)

    assert {pod.uid for pod in found.pods} == {pod.uid for pod in kept}
    assert not {pod.cgroup_path for pod in gone} & set(reader.pods)
    assert not {c.container_id for pod in gone for c in pod.containers} & set(reader.containers)


def test_a_pod_added_between_turns_is_read_at_once(fake_host, monkeypatch):
    pods = shared_pods(fake_host)
    reader = settled_reader(fake_host)
    (new,) = shared_pods(fake_host, count=1, qos=QOS_BESTEFFORT, first=200)
    listings = listed(monkeypatch)

    found = reader.read(fake_host.paths)

    assert pod_dir(fake_host, new) in listings
    assert len(listings) < len(pods)  # the others were carried over (the new pod is read whatever its turn)
    assert found.pod(new.uid) == cgroups.read(fake_host.paths).pod(new.uid)


# --------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("stagger", [1, K])
def test_a_container_whose_only_change_is_its_memory_placement_has_nothing_else_parsed_again(
    fake_host, monkeypatch, stagger
):
    pods = shared_pods(fake_host, count=2)
    reader = CgroupsReaderWithState()
    reader.set_stagger(stagger)
    for _ in range(K + 1):
        before = reader.read(fake_host.paths)
    parsed: list[bytes] = []
    for name in ("parse_procs", "_parse_cpus"):
        real = getattr(cgroups, name)
        monkeypatch.setattr(cgroups, name, lambda data, real=real: parsed.append(data) or real(data))
    for pod in pods:
        set_numa_bytes(fake_host, pod, "app", {0: 1 << 10, 1: 1 << 30})

    for _ in range(P + S):  # every container's placement turn comes, and its pod's turn after it
        found = reader.read(fake_host.paths)

    assert parsed == []  # cgroup.procs and the cpusets read the same bytes: their previous values stand
    assert found == cgroups.read(fake_host.paths)
    for pod in pods:
        (app,) = (c for c in found.pod(pod.uid).containers if c.pids == pod.container("app").pids)
        (old,) = (c for c in before.pod(pod.uid).containers if c.container_id == app.container_id)
        assert dict(app.numa_bytes) == {0: 1 << 10, 1: 1 << 30}
        assert (app.cpus_effective, app.mems_effective, app.pids) == (old.cpus_effective, old.mems_effective, old.pids)
        assert app.cpus_effective is old.cpus_effective


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.slow
def test_containers_started_and_removed_in_carried_pods_settle_within_the_stagger(fake_host, seed):
    """Containers come and go inside pods (with pods, cpusets and placement changing too), then a round of quiet
    readings: the reader's answer is the one-off reading's."""
    rng = random.Random(seed)
    pods = shared_pods(fake_host, count=10)
    reader = settled_reader(fake_host)
    for step in range(8):
        pod = rng.choice(pods)
        change = rng.choice(["start", "remove", "numa", "pod"])
        if change == "start":
            add_container_like(fake_host, pod, "app", new_id=f"{step:x}" * 64)
        elif change == "remove":
            shutil.rmtree(fake_host.root / "sys/fs/cgroup" / pod.container("sidecar").cgroup_path, ignore_errors=True)
        elif change == "numa":
            set_numa_bytes(fake_host, pod, "app", {0: rng.randrange(1, 1 << 30)})
        else:
            remove_pod(fake_host, pod)
            pods.remove(pod)
        reader.read(fake_host.paths)
    for _ in range(P + S):
        found = reader.read(fake_host.paths)
    assert found == cgroups.read(fake_host.paths)


def test_sandboxes_without_memory_numa_stat_keep_their_pods_carried(fake_host):
    # The pause sandbox where the memory controller is not delegated to it has no memory.numa_stat: its placement
    # is unknown, which must not leave the pod "incomplete" and read at every reading (a missing optional file must
    # not remove the stagger's saving). Opens over a round, with the files and without.
    from open_audit import recording

    pods = shared_pods(fake_host)

    def opens_over_a_round() -> int:
        reader = settled_reader(fake_host)
        with recording() as opened:
            for _ in range(S):
                found = reader.read(fake_host.paths)
        assert found == cgroups.read(fake_host.paths)
        return len(opened)

    with_files = opens_over_a_round()
    for pod in pods:
        os.remove(os.path.join(pod_dir(fake_host, pod.sandbox), "memory.numa_stat"))
    without = opens_over_a_round()

    assert without <= with_files, (without, with_files)
    assert all(c.numa_bytes is None for p in cgroups.read(fake_host.paths).pods for c in p.containers if c.is_sandbox)


# --------------------------------------------------------------------------------------------------- Guaranteed pods
# A Guaranteed pod's containers are what the CPU and Memory Managers pin: their cpusets and memory placement are read
# within 2 readings of a change whatever serve's stagger (the refresh table's GUARANTEED_CONTAINERS fixed round).
LATENCY = 2


def pinned_pods(fake_host) -> list:
    """Guaranteed pods of an exclusive container each, over every turn of the rotation of Guaranteed pods."""
    return pods_in_every_turn(fake_host, K, "pinned", lambda i: [
        ContainerSpec("app", cpus={16 + 2 * i, 17 + 2 * i}, mems="0", numa_bytes={0: 1 << 30, 1: 0},
                      pids=(9300 + i,))])  # fmt: skip


def host_reader(fake_host, stagger: int = K) -> HostReader:
    """A HostReader of the cgroups (and the kubelet state it needs) as serve keeps it, past its first readings: the
    sandbox verdicts settled and the first look at the kubelet's state behind, so pods are carried between turns."""
    reader = HostReader(fake_host.paths, (kubelet_state.SOURCE, cgroups.SOURCE), stagger=stagger)
    for _ in range(stagger + 1):
        reader.read()
    return reader


def pinned_at(fake_host, offset: int, stagger: int = K) -> tuple[HostReader, list]:
    """Pinned pods beside some shared ones (and the kubelet state), and a serving reader ``offset`` readings into its
    rotation: a change made now comes at that turn."""
    shared_pods(fake_host, count=2)
    pods = pinned_pods(fake_host)
    reader = host_reader(fake_host, stagger)
    for _ in range(offset):
        reader.read()
    return reader, pods


def apps(reader: HostReader, pods) -> list:
    found = reader.read().cgroups
    assert found is not None
    return [next(c for c in found.pod(pod.uid).containers if not c.is_sandbox) for pod in pods]


@pytest.mark.parametrize("stagger", [K, 3, 7])
@pytest.mark.parametrize("offset", range(K))
def test_a_guaranteed_containers_rewritten_cpuset_shows_within_2_readings_whatever_the_stagger(
    fake_host, stagger, offset
):
    reader, pods = pinned_at(fake_host, offset, stagger)  # the change comes at every turn of the rotation

    for pod in pods:
        set_container_cpus(fake_host, pod, "app", "40-41")  # someone else rewrote the pinned cpusets
    seen = [[app.cpus_effective == frozenset({40, 41}) for app in apps(reader, pods)] for _ in range(LATENCY)]

    assert all(seen[-1]), f"cpusets seen at the readings after the change: {seen}"
    for index in range(len(pods)):  # once seen, it stays
        assert seen[0][index] <= seen[1][index]


@pytest.mark.parametrize("offset", range(K))
def test_a_guaranteed_containers_memory_moved_to_the_remote_node_shows_within_2_readings(fake_host, offset):
    reader, pods = pinned_at(fake_host, offset)

    for pod in pods:
        set_numa_bytes(fake_host, pod, "app", {0: 1 << 20, 1: 1 << 30})  # the kernel moved its pages to node 1
    seen = [[dict(app.numa_bytes or {}) == {0: 1 << 20, 1: 1 << 30} for app in apps(reader, pods)] for _ in range(2)]

    assert all(seen[-1]), f"placement seen at the readings after the change: {seen}"


@pytest.mark.parametrize("offset", range(K))
def test_a_guaranteed_containers_cpuset_mems_moved_shows_within_2_readings(fake_host, offset):
    reader, pods = pinned_at(fake_host, offset)

    for pod in pods:
        set_container_cpus(fake_host, pod, "app", pod.container("app").cpus, mems="1")  # mems moved to node 1
    seen = [[app.mems_effective == frozenset({1}) for app in apps(reader, pods)] for _ in range(LATENCY)]

    assert all(seen[-1]), f"cpuset.mems seen at the readings after the change: {seen}"
    assert reader.read().cgroups == cgroups.read(fake_host.paths)


def test_a_guaranteed_pods_containers_are_read_every_2_readings_and_listed_once_in_k(fake_host, monkeypatch):
    pods = pinned_pods(fake_host)
    reader = host_reader(fake_host)
    listings = listed(monkeypatch)
    reads: list[str] = []
    real = cgroups._read
    monkeypatch.setattr(cgroups, "_read", lambda path, *args: reads.append(path) or real(path, *args))

    for _ in range(2 * K):
        reader.read()

    for pod in pods:
        app = f"/{pod.container('app').cgroup_path}/"
        assert sum(path.endswith(app + "memory.numa_stat") for path in reads) == K  # once in 2 readings
        assert sum(path.endswith(app + "cpuset.cpus.effective") for path in reads) == K
        assert listings.count(pod_dir(fake_host, pod)) == 2  # its listing (containers started in it): once in K
    # the sandbox's placement, which nothing judges, keeps PLACEMENT's round
    sandboxes = [f"/{pod.sandbox.cgroup_path}/memory.numa_stat" for pod in pods]
    assert sum(path.endswith(sandbox) for path in reads for sandbox in sandboxes) <= len(pods)


def test_an_unstaggered_reader_reads_every_guaranteed_container_every_time(fake_host):
    pods = pinned_pods(fake_host)
    reader = host_reader(fake_host, stagger=1)

    set_numa_bytes(fake_host, pods[0], "app", {0: 0, 1: 1 << 30})
    set_container_cpus(fake_host, pods[1], "app", "40-41")
    found = apps(reader, pods)

    assert dict(found[0].numa_bytes or {}) == {0: 0, 1: 1 << 30}
    assert found[1].cpus_effective == frozenset({40, 41})
