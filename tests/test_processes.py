"""The processes source: parsers of the per-process and per-thread files, the reader on fake trees (monotonic
counters, bounds, malformed files), and the whole path on this machine's real /proc and a real cgroup."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from fake_pynvml import (
    FakeGpu,
    FakeNvml,
    FakeThread,
    reference_nvml,
    reference_pid,
    write_reference_threads,
    write_threads,
)
from fakehost.reference import TRTLLM, VLLM, reference_node
from gpu_readers import GpuReaders
from numawatch.cpuset import format_cpulist, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.model.gpu import Limit
from numawatch.nvml_session import NvmlSession
from numawatch.paths import Paths
from numawatch.sources import processes
from numawatch.sources.processes import (
    cgroup_identity,
    parse_memlock,
    parse_nr_migrations,
    parse_proc_cgroup,
    parse_schedstat,
    parse_thread_status,
)

CID = "ab" * 32


# --------------------------------------------------------------------------------------------------- parsers
def test_proc_cgroup_v2_gives_the_unified_path():
    assert parse_proc_cgroup("0::/kubepods.slice/x.scope\n") == (2, "/kubepods.slice/x.scope")


def test_proc_cgroup_v1_and_hybrid_give_the_cpuset_hierarchys_path():
    text = "12:cpuset:/kubepods/pod1/abc\n11:memory:/kubepods/pod1/abc\n1:name=systemd:/x\n0::/\n"
    assert parse_proc_cgroup(text) == (1, "/kubepods/pod1/abc")
    assert parse_proc_cgroup("3:cpu,cpuset:/a\n") == (1, "/a")


def test_proc_cgroup_without_cpuset_or_unified_line_is_unknown():
    assert parse_proc_cgroup("4:memory:/a\n") is None
    assert parse_proc_cgroup("") is None


@pytest.mark.parametrize("bad", ["cpuset:/a", "x:cpuset:/a", "3:cpuset:relative"])
def test_malformed_proc_cgroup_lines_are_rejected_with_the_line(bad):
    with pytest.raises(ValueError, match="expected 'id:controllers:/path'"):
        parse_proc_cgroup(bad + "\n")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (f"/kubepods.slice/kubepods-pod7f9c2a3e_5b1d_4c8e_9a0f_2d6b8e1c4a57.slice/cri-containerd-{CID}.scope",
         (CID, "7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57")),
        (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab12.slice/crio-{CID}.scope",
         (CID, "ab12")),
        (f"/kubepods/besteffort/pod0b6e1f2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b/{CID}",
         (CID, "0b6e1f2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b")),
        ("/system.slice/containerd.service", (None, None)),
        ("/", (None, None)),
        (f"/docker/{CID}", (CID, None)),
    ],
)  # fmt: skip
def test_cgroup_paths_name_container_and_pod(path, expected):
    assert cgroup_identity(path) == expected


def test_schedstat_gives_the_run_queue_wait():
    assert parse_schedstat(b"80432592 100999186 287\n") == 100999186


@pytest.mark.parametrize("bad", [b"", b"1 2\n", b"1 two 3\n", b"1 2 3 4\n"])
def test_malformed_schedstat_names_the_file(bad):
    with pytest.raises(MalformedFile, match="task/5/schedstat: expected three counters"):
        parse_schedstat(bad, "task/5/schedstat")


def test_thread_status_gives_preemptions_and_allowed_cpus():
    text = b"Name:\tpython\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,8\nvoluntary_ctxt_switches:\t9\n" \
        b"nonvoluntary_ctxt_switches:\t78\n"  # fmt: skip
    assert parse_thread_status(text) == (78, frozenset({0, 1, 2, 3, 8}))
    assert parse_thread_status(b"Name:\tx\n") == (None, None)


@pytest.mark.parametrize(
    ("bad", "what"),
    [
        (b"nonvoluntary_ctxt_switches:\tmany\n", "nonvoluntary_ctxt_switches is not a count"),
        (b"Cpus_allowed_list:\t3-1\n", "Cpus_allowed_list:"),
    ],
)
def test_malformed_thread_status_names_the_file_and_the_line(bad, what):
    with pytest.raises(MalformedFile, match=f"t/status: {what}"):
        parse_thread_status(bad, "t/status")


def test_sched_gives_nr_migrations_or_none_without_the_line():
    text = b"python (123, #threads: 4)\n---\nse.exec_start   :   12.5\nse.nr_migrations      :                   19\n"
    assert parse_nr_migrations(text) == 19
    assert parse_nr_migrations(b"se.exec_start : 1.0\n") is None
    with pytest.raises(MalformedFile, match=r"se\.nr_migrations is not a count"):
        parse_nr_migrations(b"se.nr_migrations : -\n")


def test_limits_give_the_locked_memory_limit():
    text = (
        b"Limit                     Soft Limit           Hard Limit           Units     \n"
        b"Max locked memory         8388608              unlimited            bytes     \n"
    )
    assert parse_memlock(text) == Limit(soft=8388608, hard=None)
    assert parse_memlock(text.replace(b"8388608", b"unlimited")).unlimited
    assert parse_memlock(b"Limit Soft Hard\n") is None
    with pytest.raises(MalformedFile, match="Max locked memory: expected bytes or 'unlimited'"):
        parse_memlock(b"Max locked memory         lots                 lots                 bytes\n")
    with pytest.raises(MalformedFile, match="expected soft and hard limits"):
        parse_memlock(b"Max locked memory  42\n")


# --------------------------------------------------------------------------------------------------- fake trees
def gpu_readers(fake: FakeNvml) -> GpuReaders:
    return GpuReaders(NvmlSession(nvml=fake))


def read_both(gpu: GpuReaders, paths: Paths):
    gpu.nvml.read(paths)
    return gpu.processes.read(paths)


def test_holder_containers_sum_every_thread_of_their_processes(fake_host):
    reference_node(fake_host)
    write_reference_threads(fake_host)

    holders = read_both(gpu_readers(reference_nvml()), fake_host.paths)

    vllm = holders.containers[VLLM.container.container_id]
    assert (vllm.pod_uid, vllm.pids, vllm.threads) == (VLLM.uid, (reference_pid(VLLM),), 4)
    assert vllm.run_delay_seconds == pytest.approx((1 + 3 * 2) / 1000)
    assert (vllm.involuntary_switches, vllm.migrations, vllm.truncated) == (5 + 3 * 7, 2 + 3 * 3, False)
    process = holders.processes[reference_pid(VLLM)]
    assert dict(process.cpus_allowed) == {VLLM.exclusive: 4}
    assert process.memlock == Limit(None, None)
    assert process.comm == "vllm"
    assert holders.nvml_pids == {reference_pid(VLLM), reference_pid(TRTLLM)}


def test_the_other_processes_of_a_holder_container_are_read_too(fake_host):
    reference_node(fake_host)
    write_reference_threads(fake_host)
    vllm_procs = next(fake_host.root.glob(f"sys/fs/cgroup/**/cri-containerd-{VLLM.container.container_id}.scope"))
    (vllm_procs / "cgroup.procs").write_text(f"{reference_pid(VLLM)}\n5555\n")
    write_threads(fake_host, 5555, [FakeThread(5555, VLLM.exclusive, run_delay_ns=10**9)], memlock=65536)

    holders = read_both(gpu_readers(reference_nvml()), fake_host.paths)

    vllm = holders.containers[VLLM.container.container_id]
    assert vllm.pids == (reference_pid(VLLM), 5555)
    assert vllm.run_delay_seconds == pytest.approx(1.007)
    # Limits are read for NVML's processes only (the checks judge those).
    assert holders.processes[5555].memlock is None


def test_counters_never_go_down_when_a_thread_exits(fake_host):
    reference_node(fake_host)
    write_reference_threads(fake_host)
    gpu = gpu_readers(reference_nvml())
    pid = reference_pid(VLLM)
    before = read_both(gpu, fake_host.paths).containers[VLLM.container.container_id]

    fake_host.remove(f"proc/{pid}/task/{pid * 10 + 1}")  # a thread exits
    write_threads(
        fake_host, pid, [FakeThread(pid, VLLM.exclusive, run_delay_ns=3_000_000, involuntary=9, migrations=4)]
    )
    after = read_both(gpu, fake_host.paths).containers[VLLM.container.container_id]

    assert after.threads == 3
    assert after.run_delay_seconds == pytest.approx(before.run_delay_seconds + 0.002)
    assert after.involuntary_switches == before.involuntary_switches + 4
    assert after.migrations == before.migrations + 2


def test_a_reused_thread_id_with_lower_counters_counts_as_a_new_thread(fake_host):
    reference_node(fake_host)
    write_reference_threads(fake_host)
    gpu = gpu_readers(reference_nvml())
    pid = reference_pid(VLLM)
    before = read_both(gpu, fake_host.paths).containers[VLLM.container.container_id]

    write_threads(fake_host, pid, [FakeThread(pid * 10 + 1, VLLM.exclusive, run_delay_ns=500, involuntary=1)])
    after = read_both(gpu, fake_host.paths).containers[VLLM.container.container_id]

    assert after.involuntary_switches == before.involuntary_switches + 1


def test_without_sched_files_migrations_are_unknown_and_not_read_again(fake_host, monkeypatch):
    reference_node(fake_host)
    pid = reference_pid(VLLM)
    write_threads(fake_host, pid, [FakeThread(pid, VLLM.exclusive, migrations=None)])
    fake = reference_nvml()
    fake.gpus = fake.gpus[:1]
    opened: list[str] = []
    real_read = processes._read
    monkeypatch.setattr(
        processes, "_read", lambda path, *args, **kw: opened.append(path) or real_read(path, *args, **kw)
    )
    gpu = gpu_readers(fake)

    read_both(gpu, fake_host.paths)
    holders = read_both(gpu, fake_host.paths)

    assert holders.containers[VLLM.container.container_id].migrations is None
    assert len([path for path in opened if path.endswith("/sched")]) == 1


def test_threads_beyond_the_bound_are_not_read_and_the_container_says_truncated(fake_host, monkeypatch):
    monkeypatch.setattr(processes, "MAX_THREADS_PER_PROCESS", 3)
    reference_node(fake_host)
    pid = reference_pid(VLLM)
    write_threads(fake_host, pid, [FakeThread(pid * 10 + k, VLLM.exclusive, involuntary=1) for k in range(10)])
    fake = reference_nvml()

    holders = read_both(gpu_readers(fake), fake_host.paths)

    vllm = holders.containers[VLLM.container.container_id]
    assert (vllm.threads, vllm.involuntary_switches, vllm.truncated) == (3, 3, True)
    assert holders.processes[pid].threads_seen == 10


def test_a_malformed_thread_file_skips_that_thread_and_names_the_file(fake_host):
    reference_node(fake_host)
    write_reference_threads(fake_host)
    pid = reference_pid(VLLM)
    fake_host.write(f"proc/{pid}/task/{pid * 10 + 2}/schedstat", "garbage")

    holders = read_both(gpu_readers(reference_nvml()), fake_host.paths)

    assert holders.containers[VLLM.container.container_id].threads == 3
    assert len(holders.problems) == 1
    assert holders.problems[0].endswith(f"proc/{pid}/task/{pid * 10 + 2}/schedstat: expected three counters, "
                                        "got b'garbage'")  # fmt: skip


def test_a_holder_that_exited_is_skipped(fake_host):
    reference_node(fake_host)
    write_reference_threads(fake_host)
    gpu = gpu_readers(reference_nvml())
    gpu.nvml.read(fake_host.paths)
    fake_host.remove(f"proc/{reference_pid(TRTLLM)}")  # gone between the two sources

    holders = gpu.processes.read(fake_host.paths)

    assert reference_pid(TRTLLM) not in holders.processes
    assert holders.containers[TRTLLM.container.container_id].pids == ()


def test_without_nvml_the_holders_are_unknown(fake_host):
    gpu = gpu_readers(FakeNvml(library=False))
    with pytest.raises(SourceUnavailable):
        gpu.nvml.read(fake_host.paths)

    with pytest.raises(SourceUnavailable, match="the nvml source is down"):
        gpu.processes.read(fake_host.paths)


def test_never_reads_numa_maps_or_frequency_files(fake_host, monkeypatch):
    reference_node(fake_host)
    write_reference_threads(fake_host)
    opened: list[str] = []
    real_read = processes._read
    monkeypatch.setattr(
        processes, "_read", lambda path, *args, **kw: opened.append(path) or real_read(path, *args, **kw)
    )

    read_both(gpu_readers(reference_nvml()), fake_host.paths)

    assert opened
    assert not [p for p in opened if p.endswith(("numa_maps", "smaps", "cur_freq"))]


# --------------------------------------------------------------------------------------------------- this machine
CPUSET = Path("/sys/fs/cgroup/cpuset")


def _cpuset_writable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    if not (CPUSET / "cpuset.cpus").exists():
        return f"no cgroup v1 cpuset hierarchy at {CPUSET}"
    if not os.access(CPUSET, os.W_OK):
        return f"{CPUSET} is not writable"
    return None


@pytest.fixture
def real_gpu_process():
    """A real process with 4 extra threads in a real cpuset cgroup named like a Kubernetes container, with a 64 KiB
    RLIMIT_MEMLOCK; everything is removed afterwards."""
    reason = _cpuset_writable()
    if reason:
        pytest.skip(reason)
    top = CPUSET / f"numawatch-test-{uuid.uuid4().hex[:8]}"
    pod_uid = str(uuid.uuid4())
    levels = [top, top / f"pod{pod_uid}", top / f"pod{pod_uid}" / CID]
    root_cpus = parse_cpulist((CPUSET / "cpuset.cpus").read_text())
    mems = (CPUSET / "cpuset.mems").read_text().strip()
    cpus = frozenset({max(root_cpus)})
    process = None
    try:
        for level in levels:
            level.mkdir()
            (level / "cpuset.cpus").write_text(format_cpulist(cpus))
            (level / "cpuset.mems").write_text(mems)
        leaf = levels[-1]

        def join() -> None:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))
            with open(leaf / "cgroup.procs", "w") as procs:
                procs.write("0")

        code = (
            "import threading, time\n"
            "stop = threading.Event()\n"
            "for _ in range(4): threading.Thread(target=stop.wait, daemon=True).start()\n"
            "print('ready', flush=True)\n"
            "time.sleep(300)\n"
        )
        process = subprocess.Popen([sys.executable, "-c", code], preexec_fn=join, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield {"pid": process.pid, "pod_uid": pod_uid, "cpus": cpus}
    finally:
        if process is not None:
            process.kill()
            process.wait()
        for level in reversed(levels):
            if level.is_dir():
                level.rmdir()


@pytest.mark.realhost
def test_a_real_process_in_a_real_cgroup_is_found_and_read_from_this_machines_proc(real_gpu_process):
    pid = real_gpu_process["pid"]
    fake = FakeNvml([FakeGpu("GPU-real", "00000000:18:00.0", processes=[(pid, 1 << 30)])])
    gpu = GpuReaders(NvmlSession(nvml=fake))
    paths = Paths.from_root("/")

    snapshot = gpu.nvml.read(paths)
    holders = gpu.processes.read(paths)

    listed = snapshot.gpus[0].processes[0]
    assert (listed.container_id, listed.pod_uid, listed.cgroup_version) == (CID, real_gpu_process["pod_uid"], 1)
    container = holders.containers[CID]
    assert container.pids == (pid,)
    assert container.threads == 5  # the main thread and four more, each read from /proc/<pid>/task/<tid>
    assert container.run_delay_seconds is not None and container.run_delay_seconds >= 0
    assert container.involuntary_switches is not None
    process = holders.processes[pid]
    assert dict(process.cpus_allowed) == {real_gpu_process["cpus"]: 5}
    assert process.memlock == Limit(65536, 65536)
    assert process.comm == "python3" or process.comm.startswith("python")


@pytest.mark.realhost
def test_this_test_process_itself_reads_as_a_host_process():
    fake = FakeNvml([FakeGpu("GPU-self", "00000000:18:00.0", processes=[(os.getpid(), None)])])
    gpu = GpuReaders(NvmlSession(nvml=fake))
    paths = Paths.from_root("/")

    gpu.nvml.read(paths)
    holders = gpu.processes.read(paths)

    mine = holders.processes[os.getpid()]
    assert mine.container_id is None
    assert mine.threads_read >= 1 and sum(mine.cpus_allowed.values()) == mine.threads_read
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    expected = Limit(None if soft == resource.RLIM_INFINITY else soft, None if hard == resource.RLIM_INFINITY else hard)
    assert mine.memlock == expected
    gpu.session.close()


@pytest.mark.parametrize("scheduling", [True, False])
def test_without_the_holder_families_the_threads_scheduling_files_are_not_read(fake_host, scheduling):
    """serve without the gpu_holders collector (``HostReader(holder_scheduling=False)``): schedstat and sched of the
    holders' threads are not opened and their counters stay unknown; status (allowed CPUs, preemptions) still is."""
    from numawatch.host import HostReader
    from open_audit import recording

    reference_node(fake_host)
    write_reference_threads(fake_host)
    session = NvmlSession(nvml=reference_nvml())
    try:
        reader = HostReader(fake_host.paths, nvml=session, holder_scheduling=scheduling)
        with recording() as opened:
            holders = reader.read().processes
    finally:
        session.close()

    assert holders is not None
    names = {os.path.basename(path) for path in opened if "/task/" in path}
    assert ({"schedstat", "sched"} <= names) is scheduling
    assert ({"schedstat", "sched"} & names == set()) is not scheduling
    assert "status" in names
    vllm = holders.containers[VLLM.container.container_id]
    assert (vllm.run_delay_seconds is None, vllm.migrations is None) == (not scheduling, not scheduling)
    assert vllm.involuntary_switches == 5 + 3 * 7
    assert dict(holders.processes[reference_pid(VLLM)].cpus_allowed) == {VLLM.exclusive: 4}
