"""Fault injection on a whole reference node: every source read by ``HostReader``, every check run by ``evaluate``.

Each test starts from the clean reference GPU node (fakehost.reference: every source up that can be here, no
finding), injects one fault and asserts the issue's contract: no crash; the affected source, and only it, is down
with a one-line reason naming the file; every other source is as up as before; and no stale or wrong finding (a
container that vanished mid-scan yields no drift finding, a file that cannot be read is "not evaluated", never
"clean" or "drifted").

Faults: cgroups and /proc/<pid> entries vanishing mid-scan (a read helper is wrapped so that the directory is
removed just before the read it is about to make), permission denied (tests run as root, where ``chmod 000``
denies nothing, so ``open``/``os.open`` are wrapped to raise EACCES for one path), truncated and malformed files,
100 MB files where small ones are expected (refused by the bounded reads; peak memory measured with tracemalloc),
``cpu_manager_state`` replaced by rename while it is being read, CPUs going offline between and during readings, an
exception inside one source or its fingerprint, NVML hanging or failing (the fake pynvml), and uevent storms.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import math
import os
import shutil
import tracemalloc
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest
from fake_library import wait_idle
from fake_pynvml import FakeNvml, reference_nvml, reference_pid, write_reference_threads
from fakehost import FakeHost
from fakehost.kernel import add_irqbalance
from fakehost.kubelet import write_cpu_manager_state
from fakehost.reference import TRTLLM, VLLM, ReferenceNode, reference_node
from gpu_readers import GpuReaders
from numawatch import confined
from numawatch.checks import Evaluation, evaluate
from numawatch.host import Host, HostReader
from numawatch.hotplug import CPU_SOURCES, GPU_SOURCES, HotplugMonitor, invalidator
from numawatch.intent import REFERENCE
from numawatch.model.workloads import ContainerCgroup
from numawatch.nvml_session import NvmlSession
from numawatch.sources import cgroups, gpus_sysfs, irqbalance, processes

MiB = 1 << 20


# ------------------------------------------------------------------------------------------------------------- helpers
@pytest.fixture
def node(fake_host) -> ReferenceNode:
    return reference_node(fake_host)


def evaluate_node(node: ReferenceNode, reader: HostReader | None = None) -> Evaluation:
    host = (reader or HostReader(node.paths)).read()
    return evaluate(host, REFERENCE)


def down(host: Host) -> dict[str, str]:
    return {name: status.reason for name, status in host.statuses.items() if not status.up}


def findings(evaluation: Evaluation) -> list[tuple[str, dict[str, str]]]:
    return [(finding.check, dict(finding.labels)) for finding in evaluation.findings]


def assert_only_down(evaluation: Evaluation, clean: Evaluation, source: str, *naming: str) -> str:
    """``source`` is down (and nothing else that was up on the clean node) with a one-line reason naming ``naming``."""
    now, before = down(evaluation.host), down(clean.host)
    assert set(now) - set(before) == {source}, f"down now: {now}"
    reason = now[source]
    assert reason and "\n" not in reason
    for text in naming:
        assert text in reason, f"{text!r} not in {reason!r}"
    return reason


def assert_nothing_else_down(evaluation: Evaluation, clean: Evaluation) -> None:
    assert down(evaluation.host) == down(clean.host)


@pytest.fixture
def clean(node: ReferenceNode) -> Evaluation:
    """The node before the fault: the baseline every test compares with (and itself checked to be clean)."""
    evaluation = evaluate_node(node)
    assert evaluation.findings == ()
    assert {"topology", "cgroups", "names", "kubelet_config", "kubelet_state", "gpus_sysfs"} <= {
        name for name, status in evaluation.host.statuses.items() if status.up
    }
    return evaluation


def container_dirs(node: ReferenceNode, rel: str) -> list[Path]:
    """A cgroup's directory in every hierarchy (one on cgroup v2, one per controller on v1)."""
    root = node.paths.cgroupfs
    return [path for path in (root / rel, *(child / rel for child in root.iterdir())) if path.is_dir()]


def remove_cgroup(node: ReferenceNode, rel: str) -> None:
    for path in container_dirs(node, rel):
        # A real cgroup is removed with rmdir of an empty directory; the fake's files go with it.
        shutil.rmtree(path)


def vanishing_before(
    monkeypatch: pytest.MonkeyPatch, module, name: str, when: Callable[[str], bool], vanish: Callable[[], None]
) -> list[str]:
    """Wrap ``module.name`` (a read helper taking a path first, or a ``HostFs`` method taking one after the fs) so
    that ``vanish()`` runs just before the first call whose path satisfies ``when``: the entry is gone between the
    listing and the read."""
    real = getattr(module, name)
    fired: list[str] = []

    def wrapper(path, *args, **kwargs):
        if not fired and when(os.fspath(path)):
            fired.append(os.fspath(path))
            vanish()
        return real(path, *args, **kwargs)

    def method(fs, path, *args, **kwargs):
        if not fired and when(os.fspath(path)):
            fired.append(os.fspath(path))
            vanish()
        return real(fs, path, *args, **kwargs)

    monkeypatch.setattr(module, name, method if module is confined.HostFs else wrapper)
    return fired


def deny(monkeypatch: pytest.MonkeyPatch, *paths: Path) -> None:
    """EACCES from ``open``, ``os.open`` and the confined opener (where every host read goes) for these paths. Tests
    run as root, which ``chmod 000`` does not stop, so the permission check the kernel would make is made here."""
    denied = {os.fspath(path) for path in paths}
    real_open, real_os_open, real_open_regular = builtins.open, os.open, confined.HostFs._open_regular

    def check(file) -> None:
        if isinstance(file, (str, bytes, os.PathLike)) and os.fsdecode(file) in denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(file))

    def fake_open(file, *args, **kwargs):
        check(file)
        return real_open(file, *args, **kwargs)

    def fake_os_open(path, *args, **kwargs):
        check(path)
        return real_os_open(path, *args, **kwargs)

    def fake_open_regular(fs, path, absent=frozenset()):  # what open_file and the optional reads open with
        check(path)
        return real_open_regular(fs, path, absent)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)
    monkeypatch.setattr(confined.HostFs, "_open_regular", fake_open_regular)


def cgroup_file(node: ReferenceNode, ref, name: str) -> Path:
    """A file of a reference pod's application container cgroup, in the hierarchy that holds it."""
    rel = node.pod(ref).container(ref.container.name).cgroup_path
    matches = [path / name for path in container_dirs(node, rel) if (path / name).is_file()]
    assert len(matches) == 1, matches
    return matches[0]


def cgroup_of(evaluation: Evaluation, uid: str, container_id: str) -> ContainerCgroup:
    pod = evaluation.host.cgroups.pod(uid)
    assert pod is not None
    return next(c for c in pod.containers if c.container_id == container_id)


def app_containers(host: Host) -> set[str]:
    return {c.container_id for pod in host.cgroups.pods for c in pod.containers}


# --------------------------------------------------------------------------------------------------- cgroups vanishing
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("at", ["cgroup.procs", "cpus", "memory.numa_stat"])
@pytest.mark.slow
def test_a_container_cgroup_removed_between_listing_and_reading_is_skipped_without_a_finding(
    fake_host, monkeypatch, version, at
):
    node = reference_node(fake_host, cgroup_version=version, driver="cgroupfs" if version == 1 else "systemd")
    clean = evaluate_node(node)
    assert clean.findings == ()
    rel = node.pod(TRTLLM).container("trtllm").cgroup_path
    files = {
        "cgroup.procs": ("/cgroup.procs",),  # the first read of a container
        "cpus": ("/cpuset.cpus.effective", "/cpuset.effective_cpus"),  # after cgroup.procs was read
        "memory.numa_stat": ("/memory.numa_stat",),  # another hierarchy on v1
    }[at]
    fired = vanishing_before(
        monkeypatch,
        cgroups,
        "_read",
        lambda path: rel in path and path.endswith(files),
        lambda: remove_cgroup(node, rel),
    )

    evaluation = evaluate_node(node)

    assert fired, "the wrapped read helper never reached the container"
    assert_nothing_else_down(evaluation, clean)
    assert TRTLLM.container.container_id not in app_containers(evaluation.host)
    assert VLLM.container.container_id in app_containers(evaluation.host)
    # The kubelet's checkpoint still lists trtllm's exclusive CPUs: that is not drift of a container that is gone.
    assert findings(evaluation) == []


def test_a_pod_cgroup_removed_while_its_containers_are_listed_is_skipped(node, clean, monkeypatch):
    pod = node.pod(VLLM)
    fired = vanishing_before(
        monkeypatch,
        cgroups,
        "_container_entries",
        lambda path: path.endswith(pod.cgroup_path),
        lambda: remove_cgroup(node, pod.cgroup_path),
    )

    evaluation = evaluate_node(node)

    assert fired
    assert_nothing_else_down(evaluation, clean)
    assert evaluation.host.cgroups.pod(VLLM.uid) is None
    assert findings(evaluation) == []
    # ... and the next reading, with the pod gone for good, agrees.
    monkeypatch.undo()
    assert findings(evaluate_node(node)) == []


# ----------------------------------------------------------------------------------------------- /proc/<pid> vanishing
def test_a_sandbox_process_vanishing_before_its_comm_is_read_does_not_make_it_an_app_container(
    node, clean, monkeypatch
):
    pid = node.pod(VLLM).sandbox.pids[0]
    proc = node.paths.procfs / str(pid)
    fired = vanishing_before(
        monkeypatch, cgroups, "_read", lambda path: path == f"{proc}/comm", lambda: shutil.rmtree(proc)
    )

    evaluation = evaluate_node(node)

    assert fired
    assert_nothing_else_down(evaluation, clean)
    sandbox = cgroup_of(evaluation, VLLM.uid, node.pod(VLLM).sandbox.container_id)
    assert not sandbox.is_sandbox  # cgroups alone can no longer tell...
    assert findings(evaluation) == []  # ...but the runtime's annotations still do: no "pause is not pinned" finding


def test_irqbalance_exiting_between_the_listing_and_its_comm_is_not_running(node, clean, monkeypatch):
    # Running, with a ban list that leaves the isolated CPUs to it: that alone is a finding.
    add_irqbalance(node.host, pid=4242, environ={"IRQBALANCE_BANNED_CPULIST": "0"})
    running = evaluate_node(node)
    assert running.host.get("irqbalance").pids == (4242,)
    assert [check for check, _ in findings(running)] == ["irqbalance_unbanned"]
    proc = node.paths.procfs / "4242"
    # The daemon exits after /proc was listed, before the first comm is read.
    real_comm = irqbalance._comm
    fired: list[str] = []

    def comm(fs, procfs, pid):
        if not fired:
            fired.append(pid)
            shutil.rmtree(proc)
        return real_comm(fs, procfs, pid)

    monkeypatch.setattr(irqbalance, "_comm", comm)

    evaluation = evaluate_node(node)

    assert fired
    assert_nothing_else_down(evaluation, clean)
    assert evaluation.host.get("irqbalance").pids == ()
    assert findings(evaluation) == []  # no "irqbalance runs unbanned" for a daemon that is not there


def test_irqbalance_whose_environ_vanishes_falls_back_to_its_environment_files(node, clean, monkeypatch):
    add_irqbalance(node.host, pid=4242, environ={"IRQBALANCE_BANNED_CPULIST": "0"}, env_file="debian",
                   file_text="IRQBALANCE_BANNED_CPULIST=1-7,9-15,17-23,25-31\n")  # fmt: skip
    environ = node.paths.procfs / "4242/environ"
    deny(monkeypatch, environ)  # EACCES on another user's environ reads like an exited process: skip to the files

    evaluation = evaluate_node(node)

    assert_nothing_else_down(evaluation, clean)
    config = evaluation.host.get("irqbalance").config
    assert config.origin.endswith("etc/default/irqbalance")
    assert config.banned_cpulist == frozenset(range(32)) - {0, 8, 16, 24}


class GpuNode(NamedTuple):
    node: ReferenceNode
    fake: FakeNvml
    gpu: GpuReaders
    reader: HostReader
    clean: Evaluation


@pytest.fixture
def gpu_node(node: ReferenceNode):
    """The reference node with NVML (the fake pynvml) and the GPU holders' threads: nvml and processes up."""
    write_reference_threads(node.host)
    fake = reference_nvml()
    gpu = GpuReaders(NvmlSession(nvml=fake, call_timeout=0.5))
    reader = HostReader(node.paths, nvml=gpu.session, clock=gpu.clock)
    clean = evaluate(reader.read(), REFERENCE)
    assert clean.host.statuses["nvml"].up and clean.host.statuses["processes"].up
    assert clean.findings == ()
    yield GpuNode(node, fake, gpu, reader, clean)
    fake.release()
    gpu.session.close()


def test_a_gpu_holder_thread_vanishing_mid_scan_is_skipped(gpu_node, monkeypatch):
    node, reader, clean = gpu_node.node, gpu_node.reader, gpu_node.clean
    pid = reference_pid(VLLM)
    task = node.paths.procfs / f"{pid}/task/{pid * 10 + 2}"
    fired = vanishing_before(
        monkeypatch, processes, "_read", lambda path: path == f"{task}/status", lambda: shutil.rmtree(task)
    )

    evaluation = evaluate(reader.read(), REFERENCE)

    assert fired
    assert_nothing_else_down(evaluation, clean)
    holders = evaluation.host.get("processes")
    assert holders.processes[pid].threads_read == holders.processes[pid].threads_seen - 1
    assert findings(evaluation) == []


def test_a_gpu_holder_process_vanishing_mid_scan_is_skipped(gpu_node, monkeypatch):
    node, reader, clean = gpu_node.node, gpu_node.reader, gpu_node.clean
    pid = reference_pid(TRTLLM)
    proc = node.paths.procfs / str(pid)
    fired = vanishing_before(
        monkeypatch, processes, "_tids", lambda path: path == f"{proc}/task", lambda: shutil.rmtree(proc)
    )

    evaluation = evaluate(reader.read(), REFERENCE)

    assert fired
    assert_nothing_else_down(evaluation, clean)
    assert pid not in evaluation.host.get("processes").processes
    assert findings(evaluation) == []


def test_a_gpu_container_with_more_processes_than_the_read_limit_keeps_the_processes_source_up(gpu_node):
    node, reader, clean = gpu_node.node, gpu_node.reader, gpu_node.clean
    procs = cgroup_file(node, VLLM, "cgroup.procs")
    pid = reference_pid(VLLM)
    procs.write_text("".join(f"{pid if i == 0 else 200000 + i}\n" for i in range(12000)))  # ~84 KB

    evaluation = evaluate(reader.read(), REFERENCE)

    assert_nothing_else_down(evaluation, clean)
    assert evaluation.host.get("processes").containers[VLLM.container.container_id].truncated
    assert findings(evaluation) == []


# --------------------------------------------------------------------------------------------------- link loops
@pytest.mark.parametrize("fault", ["link loop", "permission denied"])
def test_an_unreadable_cmdline_degrades_only_what_reads_the_command_line(node, clean, monkeypatch, fault):
    # The CPU map does not depend on /proc/cmdline: topology and kernel stay up, only the check of the command line's
    # parameters is not evaluated, naming the file.
    cmdline = node.paths.procfs / "cmdline"
    if fault == "link loop":
        cmdline.unlink()
        os.symlink(cmdline.name, cmdline)
    else:
        deny(monkeypatch, cmdline)

    evaluation = evaluate_node(node)

    assert_nothing_else_down(evaluation, clean)
    assert findings(evaluation) == []
    reasons = {item.check: item.reason for item in evaluation.not_evaluated}
    assert str(cmdline) in reasons["isolation_params_mismatch"] and "\n" not in reasons["isolation_params_mismatch"]
    assert evaluation.host.topology.online == clean.host.topology.online


# --------------------------------------------------------------------------------------------------- permission denied
@pytest.mark.parametrize(
    ("rel", "source"),
    [
        ("var/lib/kubelet/cpu_manager_state", "kubelet_state"),
        ("var/lib/kubelet/memory_manager_state", "kubelet_state"),
        ("etc/rancher/rke2/config.yaml", "kubelet_config"),
        ("proc/interrupts", "interrupts"),
        ("proc/irq/default_smp_affinity", "irqs"),
        ("sys/devices/system/node/node0/meminfo", "topology"),
        ("sys/devices/system/node/node1/numastat", "numastat"),
    ],
)
@pytest.mark.slow
def test_permission_denied_takes_down_only_the_source_that_reads_the_file(node, clean, monkeypatch, rel, source):
    path = node.host.path(rel)
    deny(monkeypatch, path)

    evaluation = evaluate_node(node)

    assert_only_down(evaluation, clean, source, "Permission denied", str(path))
    assert findings(evaluation) == []  # its checks are "not evaluated", never "clean" or "drifted"


def test_a_container_file_that_cannot_be_read_is_unknown_not_drift(node, clean, monkeypatch):
    cpus = cgroup_file(node, VLLM, "cpuset.cpus.effective")
    deny(monkeypatch, cpus)

    evaluation = evaluate_node(node)

    assert_nothing_else_down(evaluation, clean)
    container = cgroup_of(evaluation, VLLM.uid, VLLM.container.container_id)
    assert container.cpus_effective is None and container.mems_effective == frozenset({0})
    assert findings(evaluation) == []


# ------------------------------------------------------------------------------------------------ truncated, malformed
STATE_FILES = (
    "var/lib/kubelet/cpu_manager_state",
    "var/lib/kubelet/memory_manager_state",
    "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
)


@pytest.mark.parametrize("rel", STATE_FILES)
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
@pytest.mark.slow
def test_a_damaged_checkpoint_is_reported_as_the_file_the_kubelet_will_refuse_and_nothing_else(
    node, clean, rel, damage
):
    path = node.host.path(rel)
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"\x00\xff{]", "empty": b""}[damage])

    evaluation = evaluate_node(node)

    assert_nothing_else_down(evaluation, clean)
    assert findings(evaluation) == [("kubelet_state_stale", {"file": "/" + rel, "reason": "unparsable"})]


def test_a_malformed_kubelet_config_takes_its_source_down_naming_the_file(node, clean):
    node.host.write("etc/rancher/rke2/config.yaml", "kubelet-arg:\n  - cpu-manager-policy=static\n  when: 2024-13-45\n")

    evaluation = evaluate_node(node)

    assert_only_down(evaluation, clean, "kubelet_config", "/etc/rancher/rke2/config.yaml")
    assert findings(evaluation) == []


@pytest.mark.parametrize(
    ("rel", "content", "source"),
    [
        ("sys/devices/system/cpu/online", "0-31,\n", "topology"),
        ("sys/devices/system/node/node1/cpulist", "8-15,x\n", "topology"),
        (
            "proc/interrupts",
            "           CPU0       CPU1\n  0:         12   IO-APIC   2-edge      timer\n",
            "interrupts",
        ),
        ("proc/interrupts", "CPU" + "9" * 5000 + "\n", "interrupts"),
        ("sys/devices/system/node/node1/numastat", "numa_hit " + "9" * 5000 + "\n", "numastat"),
    ],
)
def test_a_malformed_host_file_takes_its_source_down_naming_the_file(node, clean, rel, content, source):
    node.host.write(rel, content)

    evaluation = evaluate_node(node)

    assert_only_down(evaluation, clean, source, str(node.host.path(rel)))
    assert findings(evaluation) == []


def test_a_malformed_memory_numa_stat_leaves_that_container_unknown_not_remote(node, clean):
    cgroup_file(node, VLLM, "memory.numa_stat").write_text("anon N0=12 N1=lots\nfile N0=1 N1=1\n")

    evaluation = evaluate_node(node)

    assert_nothing_else_down(evaluation, clean)
    container = cgroup_of(evaluation, VLLM.uid, VLLM.container.container_id)
    assert container.numa_bytes is None
    assert findings(evaluation) == []


# ------------------------------------------------------------------------------------------------ absurdly large files
HUGE_FILE = 100 * MiB
PEAK_LIMIT = 24 * MiB  # the largest bounded read is 16 MiB; 100 MB read whole would be far above


def _peak_while(function: Callable[[], Evaluation]) -> tuple[Evaluation, int]:
    tracemalloc.start()
    try:
        result = function()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("rel", "source"),
    [
        ("var/lib/kubelet/cpu_manager_state", "kubelet_state"),
        ("var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "kubelet_state"),
        ("proc/interrupts", "interrupts"),
        ("etc/rancher/rke2/config.yaml", "kubelet_config"),
        ("sys/devices/system/node/node0/meminfo", "topology"),
    ],
)
def test_a_100_mb_file_is_refused_by_the_bounded_read_without_reading_it_whole(node, clean, rel, source):
    path = node.host.path(rel)
    os.truncate(path, HUGE_FILE)  # sparse: costs no disk, reads as 100 MB of NULs

    evaluation, peak = _peak_while(lambda: evaluate_node(node))

    assert_only_down(evaluation, clean, source, str(path), "limit")
    assert peak < PEAK_LIMIT, f"peak {peak / MiB:.1f} MiB while refusing a {HUGE_FILE / MiB:.0f} MB file"
    assert findings(evaluation) == []


@pytest.mark.parametrize("name", ["memory.numa_stat", "cpuset.cpus.effective"])
def test_a_100_mb_container_file_is_refused_and_that_field_is_unknown(node, clean, name):
    path = cgroup_file(node, VLLM, name)
    os.truncate(path, HUGE_FILE)

    evaluation, peak = _peak_while(lambda: evaluate_node(node))

    assert_nothing_else_down(evaluation, clean)
    assert peak < PEAK_LIMIT
    container = cgroup_of(evaluation, VLLM.uid, VLLM.container.container_id)
    assert (container.numa_bytes if name == "memory.numa_stat" else container.cpus_effective) is None
    assert findings(evaluation) == []


def test_a_100_mb_runtime_bundle_is_refused_and_the_container_named_from_the_pod_logs(node, clean):
    bundle = next(Path(node.host.root).glob(f"run/k3s/containerd/**/{VLLM.container.container_id}/config.json"))
    os.truncate(bundle, HUGE_FILE)

    evaluation, peak = _peak_while(lambda: evaluate_node(node))

    assert_nothing_else_down(evaluation, clean)
    assert peak < PEAK_LIMIT
    assert VLLM.container.container_id not in evaluation.host.names.containers
    assert findings(evaluation) == []


# ------------------------------------------------------------------------------------------------- state file replaced
def test_cpu_manager_state_replaced_by_rename_during_a_read_gives_the_old_or_the_new_file_never_a_mix(
    node, clean, monkeypatch, tmp_path
):
    """The kubelet writes a checkpoint to a temporary file and renames it over the old one. A reader that opened the
    old inode reads it whole and consistent; the next reading sees the new inode (the fingerprint changes) and the
    new content: neither a torn file nor a stale one."""
    moved = frozenset({1, 2, 3, 17, 18, 19})
    scratch = FakeHost(tmp_path / "scratch")  # the kubelet's next checkpoint: vllm moved to other CPUs
    default = frozenset(range(32)) - moved - TRTLLM.exclusive
    entries = {VLLM.uid: {VLLM.container.name: moved}, TRTLLM.uid: {TRTLLM.container.name: TRTLLM.exclusive}}
    new_bytes = write_cpu_manager_state(scratch, default_cpuset=default, entries=entries).read_bytes()
    path = node.host.path("var/lib/kubelet/cpu_manager_state")
    reader = HostReader(node.paths)
    reader.read()
    path.touch()  # a new mtime: the next reading reads the checkpoint again
    real_read_bytes = confined.HostFs.read_bytes
    renamed: list[int] = []

    def read_while_replaced(fs, file, limit):
        if os.fspath(file) != str(path):
            return real_read_bytes(fs, file, limit)
        with open(file, "rb", buffering=0) as handle:  # the old inode is open...
            temporary = path.with_name(".cpu_manager_state.tmp")
            temporary.write_bytes(new_bytes)
            os.replace(temporary, path)  # ...when the kubelet renames its new checkpoint over it
            renamed.append(os.stat(path).st_ino)
            assert renamed[0] != os.fstat(handle.fileno()).st_ino
            return handle.read(limit + 1)

    monkeypatch.setattr(confined.HostFs, "read_bytes", read_while_replaced)
    during = evaluate_node(node, reader)
    monkeypatch.undo()
    node.pin(VLLM, moved)  # the kubelet then moves the cgroup (and rewrites the same checkpoint)
    assert path.read_bytes() == new_bytes
    after = evaluate_node(node, reader)

    assert renamed
    assert_nothing_else_down(during, clean)
    old = during.host.kubelet_state.cpu
    assert old.checksum_ok and old.entries[VLLM.uid][VLLM.container.name] == VLLM.exclusive
    assert during.host.kubelet_state.problems == ()
    assert findings(during) == []
    new = after.host.kubelet_state.cpu
    assert not after.host.statuses["kubelet_state"].cached
    assert new.checksum_ok and new.entries[VLLM.uid][VLLM.container.name] == moved
    assert findings(after) == []


# -------------------------------------------------------------------------------------------------- CPUs going offline
def test_a_cpu_going_offline_between_two_readings_changes_the_topology_fingerprint(node, clean):
    reader = HostReader(node.paths)
    reader.read()
    assert reader.read().statuses["topology"].cached

    node.take_cpu_offline(31)
    evaluation = evaluate_node(node, reader)

    assert not evaluation.host.statuses["topology"].cached
    assert 31 not in evaluation.host.topology.online and not evaluation.host.topology.cpus[31].online
    assert_nothing_else_down(evaluation, clean)
    # The one true consequence: the CPU manager's checkpoint was written for other online CPUs.
    assert findings(evaluation) == [
        ("kubelet_state_stale", {"file": "/var/lib/kubelet/cpu_manager_state", "reason": "online_cpus_changed"})
    ]


def test_a_cpu_going_offline_during_the_topology_scan_is_read_again_at_the_next_reading(node, clean, monkeypatch):
    reader = HostReader(node.paths)
    reader.read()
    reader.invalidate("topology")  # a uevent for another CPU: the next reading scans the topology
    cpu_dir = str(node.paths.sysfs / "devices/system/cpu/cpu5/topology")
    fired = vanishing_before(
        monkeypatch,
        confined.HostFs,
        "read_optional_text",
        lambda path: path.startswith(cpu_dir),
        lambda: node.take_cpu_offline(5),
    )

    during = reader.read()
    monkeypatch.undo()
    after = reader.read()

    assert fired
    assert during.statuses["topology"].up
    assert during.topology.cpus[5].socket is None  # topology/ went away under the reader: unknown, not an error
    assert not after.statuses["topology"].cached  # cpu/online changed: the half-read result is not kept
    assert 5 not in after.topology.online


# ------------------------------------------------------------------------------------------------- a bug in one source
def test_an_exception_inside_one_source_takes_down_only_that_source(node, clean, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("bug")

    monkeypatch.setattr(gpus_sysfs, "_read_device", broken)

    evaluation = evaluate_node(node)

    assert_only_down(evaluation, clean, "gpus_sysfs", "internal error: KeyError")
    assert findings(evaluation) == []
    assert evaluation.host.gpus is None


def test_an_exception_inside_a_fingerprint_reads_the_source_for_real(node, clean, monkeypatch):
    reader = HostReader(node.paths)
    reader.read()

    def broken(paths):
        raise RuntimeError("bug in the fingerprint")

    monkeypatch.setattr(
        reader, "sources", tuple(s if s.name != "topology" else replace(s, fingerprint=broken) for s in reader.sources)
    )
    evaluation = evaluate_node(node, reader)

    assert evaluation.host.statuses["topology"].up and not evaluation.host.statuses["topology"].cached
    assert_nothing_else_down(evaluation, clean)
    assert findings(evaluation) == []


# ---------------------------------------------------------------------------------------------------------------- NVML
@pytest.mark.slow
def test_nvml_hanging_takes_down_nvml_and_processes_and_no_gpu_finding_is_made(gpu_node):
    fake, gpu, reader, clean = gpu_node.fake, gpu_node.gpu, gpu_node.reader, gpu_node.clean
    fake.hang("nvmlDeviceGetComputeRunningProcesses")
    try:
        evaluation = evaluate(reader.read(), REFERENCE)  # returns although the driver call is still blocked

        reason = evaluation.host.statuses["nvml"].reason
        assert "nvmlDeviceGetComputeRunningProcesses" in reason and "\n" not in reason
        assert not evaluation.host.statuses["processes"].up
        others = set(down(evaluation.host)) - {"nvml", "processes"}
        assert others == set(down(clean.host))
        assert findings(evaluation) == []
        assert {"gpu_process_remote", "gpu_holder_mismatch"} <= {item.check for item in evaluation.not_evaluated}
    finally:
        fake.release()
    assert wait_idle(gpu.session, 10)  # a bound on a hang, not a timing assertion
    assert reader.read().statuses["nvml"].up


def test_nvml_failing_on_one_gpu_leaves_the_others_and_makes_no_finding_about_it(gpu_node):
    fake, reader, clean = gpu_node.fake, gpu_node.reader, gpu_node.clean
    fake.gpus[2].lost = True  # trtllm's first GPU fell off the bus

    evaluation = evaluate(reader.read(), REFERENCE)

    snapshot = evaluation.host.get("nvml")
    assert [g.up for g in snapshot.gpus] == [True, True, False, True]
    assert evaluation.host.statuses["nvml"].up and evaluation.host.statuses["processes"].up
    assert_nothing_else_down(evaluation, clean)
    assert findings(evaluation) == []


def test_nvml_without_a_driver_is_down_with_the_reason_and_everything_else_works(node, clean):
    gpu = GpuReaders(NvmlSession(nvml=reference_nvml(library=False)))
    try:
        evaluation = evaluate(HostReader(node.paths, nvml=gpu.session, clock=gpu.clock).read(), REFERENCE)
    finally:
        gpu.session.close()

    assert "NVMLError_LibraryNotFound" in evaluation.host.statuses["nvml"].reason
    assert set(down(evaluation.host)) - {"nvml", "processes"} == set(down(clean.host)) - {"nvml", "processes"}
    assert findings(evaluation) == []


# ------------------------------------------------------------------------------------------------------- uevent storms
class _Device:
    def __init__(self, action: str, subsystem: str, properties: dict[str, str]) -> None:
        self.action, self.subsystem, self.properties = action, subsystem, properties
        self.sys_name = "storm"


class _StormMonitor:
    """A stand-in netlink socket with a burst of uevents queued, some of them undecodable."""

    def __init__(self, events: Iterable[_Device | Exception]) -> None:
        self.pending = list(events)
        self.polls = 0

    def poll(self, timeout: float):
        self.polls += 1
        if not self.pending:
            return None
        event = self.pending.pop(0)
        if isinstance(event, Exception):
            raise event
        return event


def test_a_uevent_storm_costs_one_refresh_per_wakeup_and_readings_stay_right(node, clean):
    gpu = GpuReaders(NvmlSession(nvml=reference_nvml()))
    reader = HostReader(node.paths, nvml=gpu.session, clock=gpu.clock)
    reader.read()
    nvml_inits = gpu.session.nvml.init_calls
    calls: list[frozenset[str]] = []
    on_change = invalidator(reader, reader.state("nvml"))
    monitor = HotplugMonitor(lambda names: (calls.append(names), on_change(names)))
    gpu_event = {"PCI_ID": "10DE:2330", "PCI_CLASS": "30200"}
    storm: list[_Device | Exception] = []
    for index in range(5000):
        kind = index % 4
        if kind == 0:
            storm.append(_Device("online" if index % 8 else "offline", "cpu", {}))
        elif kind == 1:
            storm.append(_Device("add", "pci", gpu_event))
        elif kind == 2:
            storm.append(_Device("change", "block", {}))  # refreshes nothing
        else:
            storm.append(OSError(errno.ENOBUFS, "No buffer space available"))  # the socket overflowed
    monitor._monitor = _StormMonitor(storm)  # drive drain() directly, as the event loop would on each wakeup

    wakeups = 0
    while monitor._monitor.pending:
        monitor.drain()
        wakeups += 1
    try:
        evaluation = evaluate(reader.read(), REFERENCE)
    finally:
        gpu.session.close()

    assert wakeups == math.ceil(5000 / 1024)  # every wakeup drains a bounded batch, never forever
    assert len(calls) == wakeups and all(names == CPU_SOURCES | GPU_SOURCES for names in calls)
    assert gpu.session.nvml.init_calls == nvml_inits + 1  # thousands of GPU events, one re-enumeration
    assert not evaluation.host.statuses["topology"].cached
    assert evaluation.host.statuses["nvml"].up
    assert findings(evaluation) == []


@pytest.mark.realhost
async def test_a_storm_of_real_cpu_uevents_is_heard_in_batches(node):
    uevent = Path("/sys/devices/system/cpu/cpu0/uevent")
    if os.geteuid() != 0 or not uevent.exists() or not os.access(uevent, os.W_OK):
        pytest.skip(f"{uevent} is not writable here (synthetic uevents need root)")
    reader = HostReader(node.paths)
    reader.read()
    calls: list[frozenset[str]] = []
    arrived = asyncio.Event()
    on_change = invalidator(reader)

    def record(names: frozenset[str]) -> None:
        calls.append(names)
        on_change(names)
        arrived.set()

    monitor = HotplugMonitor(record)
    if not monitor.start():
        pytest.skip("kernel uevents cannot be received here")
    events = 300
    try:
        with open(uevent, "w") as handle:
            for _ in range(events):  # synthetic "online" uevents: the CPU stays as it is
                handle.write("online")
                handle.flush()
        await asyncio.wait_for(arrived.wait(), timeout=10)  # a bound on a hang, not a timing assertion
        monitor.drain()  # whatever the first wakeup left
    finally:
        monitor.stop()

    assert calls and all(names == CPU_SOURCES for names in calls)
    assert len(calls) < events  # batched: far fewer refreshes than uevents
    host = reader.read()
    assert not host.statuses["topology"].cached and host.statuses["topology"].up
