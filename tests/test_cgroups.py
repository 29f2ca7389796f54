"""The cgroups source: every kubepods layout, the per-container files, and what happens when they are odd."""

from __future__ import annotations

import logging
import shutil

import pytest
from fakehost.pods import (
    PAGE_SIZE,
    ContainerSpec,
    add_kubepods,
    add_pod,
    container_id_for,
    remove_pod,
    set_container_cpus,
    set_numa_bytes,
)
from numawatch.errors import SourceUnavailable
from numawatch.host import read_host
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED
from numawatch.sources import cgroups
from numawatch.sources.cgroups import (
    parse_container_dir,
    parse_numa_stat_v1,
    parse_numa_stat_v2,
    parse_pod_dir,
    parse_procs,
)
from source_inputs import Driven

UID = "5f0c3a9e-7b21-4d8e-9c4a-1e2f3a4b5c6d"
OTHER_UID = "0b9e8d7c-6a5f-4e3d-8c2b-a1b2c3d4e5f6"
HEX = "c1f1542ce8198c3966101e22f64392a7ac7489d67dafa1023e133176fd439e71"
GiB = 1 << 30


def vllm(**overrides) -> ContainerSpec:
    values = dict(
        name="vllm",
        cpus="4-7",
        mems="0",
        numa_bytes={0: 6 * GiB, 1: 64 * PAGE_SIZE},
        cpu_quota_us=400000,
        pids=(4242, 4243),
    )
    values.update(overrides)
    return ContainerSpec(**values)


def only_pod(result):
    assert len(result.pods) == 1
    return result.pods[0]


def app_containers(pod):
    return [container for container in pod.containers if not container.is_sandbox]


# --------------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"cri-containerd-{HEX}.scope", ("containerd", HEX)),
        (HEX, ("containerd", HEX)),
        (f"crio-{HEX}.scope", ("crio", HEX)),
        (f"crio-{HEX}", ("crio", HEX)),
        (f"crio-conmon-{HEX}.scope", None),
        (f"crio-conmon-{HEX}", None),
        (f"docker-{HEX}.scope", None),
        (HEX[:-1], None),
        (HEX.upper(), None),
        ("init.scope", None),
        ("cri-containerd-.scope", None),
    ],
)
def test_container_dir_names_map_to_runtime_and_id(name, expected):
    assert parse_container_dir(name) == expected


@pytest.mark.parametrize(
    ("name", "driver", "qos", "expected"),
    [
        (f"kubepods-pod{UID.replace('-', '_')}.slice", "systemd", QOS_GUARANTEED, UID),
        (f"kubepods-burstable-pod{UID.replace('-', '_')}.slice", "systemd", QOS_BURSTABLE, UID),
        (f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice", "systemd", QOS_BESTEFFORT, UID),
        (f"kubepods-burstable-pod{UID.replace('-', '_')}.slice", "systemd", QOS_GUARANTEED, None),
        (f"pod{UID}", "cgroupfs", QOS_GUARANTEED, UID),
        ("pod6e3a1f0b2c4d5e6f7a8b9c0d1e2f3a4b", "cgroupfs", QOS_GUARANTEED, "6e3a1f0b2c4d5e6f7a8b9c0d1e2f3a4b"),
        ("pod", "cgroupfs", QOS_GUARANTEED, None),
        ("burstable", "cgroupfs", QOS_GUARANTEED, None),
        ("kubepods-pod.slice", "systemd", QOS_GUARANTEED, None),
        (f"pod{UID}", "systemd", QOS_GUARANTEED, None),
    ],
)
def test_pod_dir_names_give_the_uid_with_dashes(name, driver, qos, expected):
    assert parse_pod_dir(name, driver, qos) == expected


# --------------------------------------------------------------------------------------------------- parsers
REAL_NUMA_STAT_V2 = (
    b"anon N0=0 N1=0 N2=6430720 N3=0\n"
    b"file N0=0 N1=0 N2=0 N3=0\n"
    b"kernel_stack N0=0 N1=0 N2=16384 N3=0\n"
    b"pagetables N0=0 N1=0 N2=40960 N3=0\n"
    b"shmem N0=0 N1=0 N2=0 N3=0\n"
    b"file_mapped N0=0 N1=0 N2=0 N3=0\n"
    b"anon_thp N0=0 N1=0 N2=0 N3=0\n"
    b"inactive_anon N0=0 N1=0 N2=6381568 N3=0\n"
)


def test_numa_stat_v2_sums_anon_and_file_bytes_per_node():
    data = b"anon N0=1000 N1=20\nfile N0=5 N1=7\nkernel_stack N0=16384 N1=0\n"
    assert parse_numa_stat_v2(data) == {0: 1005, 1: 27}


def test_numa_stat_v2_reads_a_real_kernel_file():
    assert parse_numa_stat_v2(REAL_NUMA_STAT_V2) == {0: 0, 1: 0, 2: 6430720, 3: 0}


def test_numa_stat_v2_finds_keys_by_name_when_new_keys_come_first_or_in_between():
    data = (
        b"anon_thp N0=999 N1=999\nfuture_key N0=1 N1=1\nanon N0=10 N1=20\n"
        b"zswap N0=7 N1=7\nfile_mapped N0=888 N1=888\nfile N0=1 N1=2\n"
    )
    assert parse_numa_stat_v2(data) == {0: 11, 1: 22}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no 'anon' line"),
        (b"anon N0=1 N1=2\n", "no 'file' line"),
        (b"anon N0=x N1=2\nfile N0=1 N1=2\n", "bad per-node field"),
        (b"anon N0:1\nfile N0=1\n", "bad per-node field"),
        (b"anon 0=1\nfile N0=1\n", "bad per-node field"),
        (b"anon N0=-1\nfile N0=1\n", "bad per-node field"),
        (b"anon\nfile\n", "no 'anon' line"),
        (b"anon \nfile \n", "no per-node values"),
    ],
)
def test_numa_stat_v2_rejects_malformed_content(data, message):
    with pytest.raises(ValueError, match=message):
        parse_numa_stat_v2(data)


def test_numa_stat_v1_converts_total_pages_to_bytes():
    data = (
        b"hierarchical_total=9999 N0=9000 N1=999\n"  # children included: not this cgroup's own pages
        b"total=42 N0=40 N1=2\nfile=15 N0=15 N1=0\nanon=27 N0=25 N1=2\nunevictable=0 N0=0 N1=0\n"
    )
    assert parse_numa_stat_v1(data, page_size=4096) == {0: 40 * 4096, 1: 2 * 4096}
    assert parse_numa_stat_v1(data, page_size=65536) == {0: 40 * 65536, 1: 2 * 65536}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no 'total=' line"),
        (b"hierarchical_total=5 N0=5\n", "no 'total=' line"),
        (b"total=x N0=5\n", "bad total"),
        (b"total=5\n", "no per-node values"),
        (b"total=5 N0=five\n", "bad per-node field"),
    ],
)
def test_numa_stat_v1_rejects_malformed_content(data, message):
    with pytest.raises(ValueError, match=message):
        parse_numa_stat_v1(data, page_size=4096)


def test_procs_keeps_at_most_the_limit():
    data = b"".join(b"%d\n" % pid for pid in range(100, 300))
    assert parse_procs(data, limit=64) == tuple(range(100, 164))
    assert parse_procs(b"") == ()


def test_procs_rejects_non_numeric_lines():
    with pytest.raises(ValueError, match="bad PID"):
        parse_procs(b"12\nabc\n")


# --------------------------------------------------------------------------------------------------- layouts
LAYOUTS = [
    (version, driver, runtime, qos)
    for version in (1, 2)
    for driver in ("systemd", "cgroupfs")
    for runtime in ("containerd", "crio")
    for qos in (QOS_GUARANTEED, QOS_BURSTABLE, QOS_BESTEFFORT)
]


@pytest.mark.parametrize(("version", "driver", "runtime", "qos"), LAYOUTS)
def test_every_layout_yields_the_pod_its_containers_and_their_placement(fake_host, version, driver, runtime, qos):
    add_kubepods(fake_host, version=version, driver=driver, cpus="2-15", mems="0-1")
    pod = add_pod(
        fake_host,
        uid=UID,
        qos=qos,
        namespace="llm",
        name="vllm-0",
        runtime=runtime,
        containers=[vllm(), ContainerSpec("sidecar", cpus="2-15", mems="0-1", numa_bytes={1: 8 * PAGE_SIZE})],
    )
    result = cgroups.read(fake_host.paths)

    assert (result.version, result.driver) == (version, driver)  # under kubepods.slice, or kubepods for cgroupfs
    assert result.root_cpus_effective == frozenset(range(2, 16))
    found = only_pod(result)
    assert (found.uid, found.qos, found.cgroup_path) == (UID, qos, pod.cgroup_path)
    by_id = {container.container_id: container for container in found.containers}
    assert set(by_id) == {pod.sandbox.container_id, *(c.container_id for c in pod.containers)}

    main = by_id[container_id_for(UID, "vllm")]
    assert main.runtime == runtime
    assert main.cgroup_path == pod.container("vllm").cgroup_path
    assert main.cpus_effective == frozenset({4, 5, 6, 7})
    assert main.mems_effective == frozenset({0})
    assert dict(main.numa_bytes) == {0: 6 * GiB, 1: 64 * PAGE_SIZE}
    assert main.pids == (4242, 4243)
    assert main.is_sandbox is False

    sidecar = by_id[container_id_for(UID, "sidecar")]
    assert dict(sidecar.numa_bytes) == {0: 0, 1: 8 * PAGE_SIZE}

    sandbox = by_id[pod.sandbox.container_id]
    assert sandbox.is_sandbox is True
    assert sandbox.cpus_effective == frozenset(range(2, 16))


def test_pods_of_every_qos_class_are_found_together(fake_host):
    add_kubepods(fake_host, cpus="0-7", mems="0")
    uids = {}
    for index, qos in enumerate((QOS_GUARANTEED, QOS_BURSTABLE, QOS_BESTEFFORT)):
        uid = f"00000000-0000-4000-8000-00000000000{index}"
        uids[uid] = qos
        add_pod(fake_host, uid=uid, qos=qos, namespace="ns", name=f"p{index}", containers=[vllm(pids=())])
    result = cgroups.read(fake_host.paths)
    assert {pod.uid: pod.qos for pod in result.pods} == uids


def test_a_static_pod_uid_without_dashes_is_kept_as_is(fake_host):
    static_uid = "6e3a1f0b2c4d5e6f7a8b9c0d1e2f3a4b"
    add_pod(fake_host, uid=static_uid, qos=QOS_BURSTABLE, namespace="kube-system", name="etcd", containers=[vllm()])
    assert only_pod(cgroups.read(fake_host.paths)).uid == static_uid


def test_no_kubepods_cgroup_makes_the_source_unavailable_naming_where_it_looked(fake_host):
    fake_host.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory")
    with pytest.raises(SourceUnavailable, match=r"no kubepods cgroup under .*sys/fs/cgroup"):
        cgroups.read(fake_host.paths)


def test_no_kubepods_cgroup_reports_the_source_down_and_not_a_crash(fake_host):
    host = read_host(fake_host.paths, [cgroups.SOURCE])
    assert host.cgroups is None
    assert host.statuses["cgroups"].up is False
    assert "no kubepods cgroup" in host.down_reason("cgroups")


def test_a_v1_kubepods_without_a_v2_marker_is_read_as_v1(fake_host):
    # A hybrid host: the unified mount has no kubepods, the cpuset hierarchy does.
    fake_host.write("sys/fs/cgroup/unified/cgroup.controllers", "")
    add_kubepods(fake_host, version=1, driver="cgroupfs", cpus="0-3", mems="0")
    assert cgroups.read(fake_host.paths).version == 1


def test_an_empty_kubepods_gives_no_pods(fake_host):
    add_kubepods(fake_host, cpus="0-3", mems="0")
    result = cgroups.read(fake_host.paths)
    assert result.pods == ()
    assert result.root_cpus_effective == frozenset(range(4))


# --------------------------------------------------------------------------------------------------- per-container
@pytest.mark.parametrize("version", [1, 2])
def test_the_cpu_quota_files_are_not_read(fake_host, monkeypatch, version):
    # No check or metric uses the CFS quota: its files (one open in five per container) are left alone.
    add_kubepods(fake_host, version=version, driver="cgroupfs", cpus="0-3", mems="0")
    add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    real_read = cgroups._read
    opened: list[str] = []
    monkeypatch.setattr(cgroups, "_read", lambda path, *args: opened.append(path) or real_read(path, *args))

    (main,) = app_containers(only_pod(cgroups.read(fake_host.paths)))

    assert main.cpus_effective == frozenset({4, 5, 6, 7})
    assert any(path.endswith("/memory.numa_stat") for path in opened)
    quota_files = ("cpu.max", "cpu.cfs_quota_us", "cpu.cfs_period_us")
    assert not [path for path in opened if path.rsplit("/", 1)[1] in quota_files]


def test_v1_without_the_memory_hierarchy_leaves_the_placement_unknown(fake_host):
    add_kubepods(fake_host, version=1, driver="systemd", cpus="0-3", mems="0")
    add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    fake_host.remove("sys/fs/cgroup/memory")
    fake_host.remove("sys/fs/cgroup/cpu,cpuacct")
    (main,) = app_containers(only_pod(cgroups.read(fake_host.paths)))
    assert main.cpus_effective == frozenset({4, 5, 6, 7})
    assert main.numa_bytes is None


@pytest.mark.parametrize("version", [1, 2])
def test_a_container_without_numa_stat_has_unknown_memory_placement(fake_host, version):
    add_kubepods(fake_host, version=version, cpus="0-7", mems="0")
    add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm(numa_bytes=None)])
    (main,) = app_containers(only_pod(cgroups.read(fake_host.paths)))
    assert main.numa_bytes is None
    assert main.cpus_effective == frozenset({4, 5, 6, 7})


def test_pids_are_bounded_to_64_from_cgroup_procs(fake_host):
    many = vllm(pids=tuple(range(1000, 1500)))
    add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[many])
    (main,) = app_containers(only_pod(cgroups.read(fake_host.paths)))
    assert main.pids == tuple(range(1000, 1064))


def test_sandbox_is_the_container_whose_first_process_is_pause(fake_host):
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    found = only_pod(cgroups.read(fake_host.paths))
    assert [c.container_id for c in found.containers if c.is_sandbox] == [pod.sandbox.container_id]


def test_a_container_running_pause_later_than_its_first_pid_is_not_a_sandbox(fake_host):
    add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm(pids=(4242, 4243))])
    fake_host.write("proc/4243/comm", "pause")
    (main,) = [c for c in only_pod(cgroups.read(fake_host.paths)).containers if c.pids == (4242, 4243)]
    assert main.is_sandbox is False


def test_a_sandbox_whose_process_exited_is_not_recognised_and_nothing_breaks(fake_host):
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()], sandbox=True)
    fake_host.remove(f"proc/{pod.sandbox.pids[0]}")
    found = only_pod(cgroups.read(fake_host.paths))
    assert not any(container.is_sandbox for container in found.containers)
    assert len(found.containers) == 2


def test_a_pod_without_sandbox_or_processes_has_no_sandbox(fake_host):
    add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm(pids=())], sandbox=False)
    (main,) = only_pod(cgroups.read(fake_host.paths)).containers
    assert (main.pids, main.is_sandbox) == ((), False)


def test_other_directories_in_a_pod_cgroup_are_not_containers(fake_host):
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()], sandbox=False)
    base = f"sys/fs/cgroup/{pod.cgroup_path}"
    fake_host.write(f"{base}/crio-conmon-{HEX}.scope/cgroup.procs", "77")
    fake_host.write(f"{base}/docker-{HEX}.scope/cgroup.procs", "78")
    fake_host.write(f"{base}/helper/cgroup.procs", "79")
    fake_host.write(f"{base}/{HEX}", "a file, not a cgroup")
    assert [c.container_id for c in only_pod(cgroups.read(fake_host.paths)).containers] == [
        container_id_for(UID, "vllm")
    ]


def test_unrelated_directories_under_kubepods_are_not_pods(fake_host):
    add_kubepods(fake_host, cpus="0-3", mems="0")
    fake_host.write("sys/fs/cgroup/kubepods.slice/system-helper.slice/cgroup.procs", "")
    fake_host.write("sys/fs/cgroup/kubepods.slice/kubepods-pod.slice/cgroup.procs", "")
    assert cgroups.read(fake_host.paths).pods == ()


# --------------------------------------------------------------------------------------------------- malformed
@pytest.mark.parametrize(
    ("version", "filename", "content", "unknown"),
    [
        (2, "cpuset.cpus.effective", "4-x", "cpus_effective"),
        (2, "cpuset.mems.effective", "zero", "mems_effective"),
        (2, "memory.numa_stat", "anon N0=twelve\nfile N0=1\n", "numa_bytes"),
        (1, "cpuset.effective_cpus", "7-3", "cpus_effective"),
        (1, "memory.numa_stat", "total=1 N0\n", "numa_bytes"),
    ],
)
def test_a_malformed_file_makes_only_that_field_unknown_and_is_logged_with_its_path(
    fake_host, caplog, version, filename, content, unknown
):
    add_kubepods(fake_host, version=version, driver="cgroupfs", cpus="0-7", mems="0")
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    add_pod(fake_host, uid=OTHER_UID, qos=QOS_GUARANTEED, namespace="ns", name="q", containers=[vllm()])
    rel = pod.container("vllm").cgroup_path
    if version == 2:
        target = f"sys/fs/cgroup/{rel}/{filename}"
    else:
        hierarchy = "memory" if filename == "memory.numa_stat" else "cpuset"
        target = f"sys/fs/cgroup/{hierarchy}/{rel}/{filename}"
    fake_host.write(target, content)

    with caplog.at_level(logging.WARNING, logger="numawatch.sources.cgroups"):
        result = cgroups.read(fake_host.paths)
    broken = next(c for c in result.pod(UID).containers if c.cgroup_path == rel)
    healthy = next(c for c in result.pod(OTHER_UID).containers if not c.is_sandbox)
    assert getattr(broken, unknown) is None
    assert getattr(healthy, unknown) is not None
    known = {"cpus_effective", "mems_effective", "numa_bytes"} - {unknown}
    assert all(getattr(broken, field) is not None for field in known)
    assert str(fake_host.path(target)) in caplog.text


def test_a_malformed_file_is_logged_once_not_on_every_scan(fake_host, caplog):
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    target = fake_host.write(f"sys/fs/cgroup/{pod.container('vllm').cgroup_path}/memory.numa_stat", "garbage")
    reader = Driven("cgroups")
    with caplog.at_level(logging.WARNING, logger="numawatch.sources.cgroups"):
        reader.read(fake_host.paths)
        reader.read(fake_host.paths)
    assert caplog.text.count(str(target)) == 1
    # What was logged is in the memory a HostReader keeps, not the process's: another HostReader logs it too.
    with caplog.at_level(logging.WARNING, logger="numawatch.sources.cgroups"):
        Driven("cgroups").read(fake_host.paths)
    assert caplog.text.count(str(target)) == 2


def test_a_malformed_kubepods_cpuset_leaves_the_root_cpus_unknown(fake_host):
    add_kubepods(fake_host, cpus="0-3", mems="0")
    fake_host.write("sys/fs/cgroup/kubepods.slice/cpuset.cpus.effective", "0-")
    assert cgroups.read(fake_host.paths).root_cpus_effective is None


def test_a_huge_numa_stat_is_refused_not_read_whole(fake_host, monkeypatch):
    monkeypatch.setattr(cgroups, "_READ_LIMIT", 100_000)
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    fake_host.write(f"sys/fs/cgroup/{pod.container('vllm').cgroup_path}/memory.numa_stat", "x" * 300_000)
    (main,) = app_containers(only_pod(cgroups.read(fake_host.paths)))
    assert main.numa_bytes is None
    assert main.cpus_effective == frozenset({4, 5, 6, 7})


# --------------------------------------------------------------------------------------------------- vanishing
def test_a_container_removed_between_listing_and_reading_is_skipped(fake_host, monkeypatch):
    pod = add_pod(
        fake_host,
        uid=UID,
        qos=QOS_GUARANTEED,
        namespace="ns",
        name="p",
        containers=[vllm(), ContainerSpec("sidecar", cpus="0-1", mems="0")],
    )
    doomed = fake_host.path(f"sys/fs/cgroup/{pod.container('sidecar').cgroup_path}")
    listing = cgroups._container_entries

    def list_then_remove(path, *args):
        names = listing(path, *args)
        if doomed.parent == type(doomed)(path):
            shutil.rmtree(doomed)  # the runtime removed it right after we listed the pod
        return names

    monkeypatch.setattr(cgroups, "_container_entries", list_then_remove)
    found = only_pod(cgroups.read(fake_host.paths))
    assert container_id_for(UID, "sidecar") not in {c.container_id for c in found.containers}
    assert container_id_for(UID, "vllm") in {c.container_id for c in found.containers}


def test_a_container_removed_while_its_files_are_read_is_skipped(fake_host, monkeypatch):
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    doomed = str(fake_host.path(f"sys/fs/cgroup/{pod.container('vllm').cgroup_path}"))
    read = cgroups._read

    def read_then_remove(path, *args):
        data = read(path, *args)
        if path == doomed + "/cgroup.procs":
            shutil.rmtree(doomed)
        return data

    monkeypatch.setattr(cgroups, "_read", read_then_remove)
    found = only_pod(cgroups.read(fake_host.paths))
    assert [c.is_sandbox for c in found.containers] == [True]


def test_a_pod_removed_between_listing_and_reading_is_skipped(fake_host, monkeypatch):
    doomed_pod = add_pod(fake_host, uid=UID, qos=QOS_BURSTABLE, namespace="ns", name="p", containers=[vllm()])
    add_pod(fake_host, uid=OTHER_UID, qos=QOS_BURSTABLE, namespace="ns", name="q", containers=[vllm()])
    pod_dirs = cgroups._pod_dirs

    def list_then_remove(*args):
        found = pod_dirs(*args)
        remove_pod(fake_host, doomed_pod)
        return found

    monkeypatch.setattr(cgroups, "_pod_dirs", list_then_remove)
    result = cgroups.read(fake_host.paths)
    assert [pod.uid for pod in result.pods] == [OTHER_UID]


# --------------------------------------------------------------------------------------------------- fake host
def test_planted_cpuset_drift_shows_in_the_next_read(fake_host):
    add_kubepods(fake_host, cpus="0-15", mems="0-1")
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    set_container_cpus(fake_host, pod, "vllm", "0-15", mems="0-1")
    (main,) = app_containers(only_pod(cgroups.read(fake_host.paths)))
    assert main.cpus_effective == frozenset(range(16))
    assert main.mems_effective == frozenset({0, 1})
    status = fake_host.path("proc/4242/status").read_text()
    assert "Cpus_allowed_list:\t0-15\n" in status
    assert "Cpus_allowed:\t0000ffff\n" in status


@pytest.mark.parametrize("version", [1, 2])
def test_planted_remote_memory_shows_in_the_next_read(fake_host, version):
    add_kubepods(fake_host, version=version, cpus="0-15", mems="0-1")
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    set_numa_bytes(fake_host, pod, "vllm", {0: GiB, 1: 3 * GiB})
    (main,) = app_containers(only_pod(cgroups.read(fake_host.paths)))
    assert dict(main.numa_bytes) == {0: GiB, 1: 3 * GiB}


@pytest.mark.parametrize("version", [1, 2])
def test_removed_pod_disappears_from_the_next_read(fake_host, version):
    add_kubepods(fake_host, version=version, cpus="0-15", mems="0")
    gone = add_pod(fake_host, uid=UID, qos=QOS_BURSTABLE, namespace="ns", name="p", containers=[vllm()])
    add_pod(fake_host, uid=OTHER_UID, qos=QOS_GUARANTEED, namespace="ns", name="q", containers=[vllm(pids=(5000,))])
    remove_pod(fake_host, gone)
    assert [pod.uid for pod in cgroups.read(fake_host.paths).pods] == [OTHER_UID]
    assert not fake_host.path("proc/4242").exists()
    assert not fake_host.path(f"var/log/pods/ns_p_{UID}").exists()


def test_fake_processes_carry_their_container_cgroup_and_cpus(fake_host):
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    assert fake_host.path("proc/4242/comm").read_text() == "vllm\n"
    assert fake_host.path("proc/4242/cgroup").read_text() == f"0::/{pod.container('vllm').cgroup_path}\n"
    assert "Cpus_allowed_list:\t4-7\n" in fake_host.path("proc/4242/status").read_text()
    assert fake_host.path(f"proc/{pod.sandbox.pids[0]}/comm").read_text() == "pause\n"


def test_fake_host_refuses_a_second_layout_on_the_same_host(fake_host):
    add_kubepods(fake_host, version=2, driver="systemd", cpus="0-3", mems="0")
    with pytest.raises(ValueError, match="kubepods"):
        add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()], version=1)


def test_fake_host_pods_follow_the_existing_kubepods_layout(fake_host):
    add_kubepods(fake_host, version=1, driver="cgroupfs", cpus="0-3", mems="0")
    pod = add_pod(fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="ns", name="p", containers=[vllm()])
    assert (pod.version, pod.driver, pod.cgroup_path) == (1, "cgroupfs", f"kubepods/pod{UID}")


# --------------------------------------------------------------------------------------------------- real capture
def test_reads_the_real_kernel_capture_with_its_drifted_and_correct_pods(realkernel_root):
    from numawatch.paths import Paths

    result = cgroups.read(Paths.from_root(realkernel_root))
    assert (result.version, result.driver) == (2, "cgroupfs")
    assert result.root_cpus_effective == frozenset({0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11})
    assert {pod.uid: pod.qos for pod in result.pods} == {
        "e63915c9-ac18-439e-ad4e-e5512e55d16f": QOS_GUARANTEED,
        "48d41daf-5e1a-41c2-838f-d7f049010161": QOS_GUARANTEED,
        "39804e6b-f4c5-4a6d-8af1-77e31cc4eb3e": QOS_BURSTABLE,
    }
    containers = {c.container_id[:12]: c for pod in result.pods for c in pod.containers}
    correct = containers["c1f1542ce819"]
    assert (correct.cpus_effective, correct.mems_effective) == (frozenset({8, 9}), frozenset({2}))
    assert dict(correct.numa_bytes) == {0: 0, 1: 0, 2: 6430720, 3: 0}
    assert correct.pids == (526, 595)
    drifted = containers["5c0064f5f984"]
    assert (drifted.cpus_effective, drifted.mems_effective) == (frozenset({3, 4}), frozenset({0, 1}))
    burstable = containers["11d45abbed00"]
    assert burstable.cpus_effective == frozenset({0, 1, 6})  # cpuset.cpus 0-1,6-7 with CPU 7 offline
    # The capture's sandboxes run busybox sleep, not pause: only the names source can tell them apart.
    assert not any(c.is_sandbox for c in containers.values())
