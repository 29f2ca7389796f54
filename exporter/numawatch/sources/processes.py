"""The processes source: scheduling counters and CPU placement of the processes that hold GPUs.

Which processes: the compute processes NVML lists (the nvml source's snapshot of the same evaluation; AMD SMI's
too, the amdsmi source's: telemetry.merge), and for each one that lives in a container, the other processes of that
container (its ``cgroup.procs``, at most ``MAX_PIDS``): a vLLM pod's engine-core process feeds the GPUs without
holding a CUDA context itself. Nothing else is read: on a node with ~860 containers, only the handful that hold GPUs
cost anything here.

Files read, per process (procfs; ``Documentation/filesystems/proc.rst``):

- ``<pid>/cgroup`` (by the nvml source): ``hierarchy-ID:controller-list:path`` lines; the cpuset line on cgroup v1
  (``3:cpuset:/kubepods/pod<uid>/<id>``), the ``0::`` line on v2. The leaf names the container
  (``cri-containerd-<64hex>.scope``, ``crio-<64hex>``, ``<64hex>``), its parent the pod.
- ``<pid>/comm``, ``<pid>/limits`` (NVML's processes only): the ``Max locked memory`` row, soft and hard limit in
  bytes or ``unlimited``.
- per thread (``<pid>/task/<tid>/``, at most ``MAX_THREADS_PER_PROCESS`` per process and
  ``MAX_THREADS_PER_CONTAINER`` per container):
  ``schedstat`` ``<on-cpu ns> <run-queue wait ns> <timeslices>`` (sched-stats.rst; needs CONFIG_SCHED_INFO);
  ``status`` lines ``nonvoluntary_ctxt_switches:\\t<n>`` (preemptions) and ``Cpus_allowed_list:\\t<cpus>``;
  ``sched`` line ``se.nr_migrations  :  <n>`` (kernel/sched/debug.c, present only with CONFIG_SCHED_DEBUG; not a
  stable ABI, so looked up by name and skipped when absent).

Per thread, not per process: ``<pid>/schedstat``, ``<pid>/sched`` and the switch counts of ``<pid>/status`` describe
the main thread only (gpu-and-host.md §3.3), and late ``sched_setaffinity`` leaves early threads on their old CPUs
(NVIDIA/TensorRT-LLM#18117), so every thread's ``Cpus_allowed_list`` counts. Never ``numa_maps``: it takes the target's
mmap lock and stalls inference processes (§4.7).

The counters are made monotonic here: threads come and go, so a plain sum over the live threads would drop when one
exits. A ``ProcessReader`` (kept across evaluations, never module state) remembers each thread's last values and adds
only what grew; what an exited thread accumulated stays in the container's total.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import NamedTuple

from numawatch import telemetry
from numawatch.confined import HostFs
from numawatch.cpuset import CPUListError, CPUSet, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import printable
from numawatch.model import frozen_map
from numawatch.model.gpu import GpuHolders, HolderContainer, HolderProcess, JsonRecording, Limit
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED
from numawatch.paths import Paths
from numawatch.source import Inputs, ReaderContext, SourceSpec
from numawatch.sources._files import line_after
from numawatch.sources.cgroups import MAX_PIDS, parse_container_dir, parse_pod_dir, parse_procs

log = logging.getLogger(__name__)

MAX_CONTAINERS = 64  # GPU-holding containers read per evaluation (8 GPUs x time-slicing replicas is far below)
MAX_THREADS_PER_PROCESS = 512  # a vLLM worker has ~100-200 threads (PyTorch, NCCL, gloo)
MAX_THREADS_PER_CONTAINER = 4096
MAX_PROBLEMS = 10
_READ_LIMIT = 1 << 16  # every file read here is a few KB; anything near this is not what we expect

_MEMLOCK = b"Max locked memory"
_NONVOLUNTARY = b"nonvoluntary_ctxt_switches:"
_CPUS_ALLOWED = b"Cpus_allowed_list:"
_NR_MIGRATIONS = b"se.nr_migrations"


# --------------------------------------------------------------------------------------------------- parsers
def parse_proc_cgroup(text: str) -> tuple[int, str] | None:
    """``/proc/<pid>/cgroup`` -> (version, path): the v1 cpuset hierarchy's path, else the v2 (``0::``) path.

    The cpuset line wins on hybrid hosts, where ``0::/`` names the mostly empty unified hierarchy. None when neither
    line is present; a line that is not ``id:controllers:path`` raises ValueError.
    """
    unified: str | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            raise ValueError(f"expected 'id:controllers:/path', got {line.strip()[:80]!r}")
        number, controllers, path = parts
        if "cpuset" in controllers.split(","):
            return 1, path
        if number == "0" and controllers == "":
            unified = path
    return (2, unified) if unified is not None else None


def cgroup_identity(path: str) -> tuple[str | None, str | None]:
    """(container ID, pod UID) named by a cgroup path; None for each part the path does not name.

    The leaf must be a container directory (containerd or CRI-O, either driver: cgroups.parse_container_dir) and its
    parent a pod directory (systemd ``kubepods-…pod<uid_>.slice`` or cgroupfs ``pod<uid>``, any QoS class).
    """
    parts = [part for part in path.split("/") if part]
    if not parts:
        return None, None
    parsed = parse_container_dir(parts[-1])
    _, container_id = parsed if parsed is not None else (None, None)
    pod_uid = None
    if len(parts) >= 2:
        for driver in ("systemd", "cgroupfs"):
            for qos in (QOS_GUARANTEED, QOS_BURSTABLE, QOS_BESTEFFORT):
                pod_uid = parse_pod_dir(parts[-2], driver, qos)
                if pod_uid is not None:
                    break
            if pod_uid is not None:
                break
    return container_id, pod_uid


def _is_count(value: bytes) -> bool:
    """ASCII digits that fit a u64 (20 digits): a longer "count" is a corrupt file, and int() would refuse one of
    more than 4,300 digits with a bare ValueError."""
    return value.isdigit() and len(value) <= 20


def parse_schedstat(data: bytes, path: str = "schedstat") -> int:
    """``<on-cpu ns> <run-queue wait ns> <timeslices>`` -> the run-queue wait in ns (field 2)."""
    fields = data.split()
    if len(fields) != 3 or not all(_is_count(field) for field in fields):
        raise MalformedFile(path, f"expected three counters, got {data.strip()[:60]!r}")
    return int(fields[1])


def _value_after(data: bytes, key: bytes) -> bytes | None:
    """The rest of the line starting with ``key``, stripped; None when no line does."""
    rest = line_after(data, key)
    return None if rest is None else rest.strip()


def parse_thread_status(data: bytes, path: str = "status") -> tuple[int | None, CPUSet | None]:
    """``task/<tid>/status`` -> (nonvoluntary_ctxt_switches, Cpus_allowed_list); None for a line that is absent."""
    switches: int | None = None
    raw = _value_after(data, _NONVOLUNTARY)
    if raw is not None:
        if not _is_count(raw):
            raise MalformedFile(path, f"nonvoluntary_ctxt_switches is not a count: {raw[:40]!r}")
        switches = int(raw)
    cpus: CPUSet | None = None
    raw = _value_after(data, _CPUS_ALLOWED)
    if raw is not None:
        try:
            cpus = parse_cpulist(raw.decode("ascii", errors="replace"))
        except CPUListError as error:
            raise MalformedFile(path, f"Cpus_allowed_list: {error}") from None
    return switches, cpus


def parse_nr_migrations(data: bytes, path: str = "sched") -> int | None:
    """``se.nr_migrations   :   19`` of ``task/<tid>/sched`` -> 19; None when the line is absent."""
    raw = _value_after(data, _NR_MIGRATIONS)
    if raw is None:
        return None
    _, colon, value = raw.partition(b":")
    value = value.strip()
    if not colon or not _is_count(value):
        raise MalformedFile(path, f"se.nr_migrations is not a count: {raw[:60]!r}")
    return int(value)


def parse_memlock(data: bytes, path: str = "limits") -> Limit | None:
    """The ``Max locked memory`` row of ``/proc/<pid>/limits`` (``unlimited`` -> None); None when the row is absent."""
    raw = _value_after(data, _MEMLOCK)
    if raw is None:
        return None
    fields = raw.split()
    if len(fields) < 2:
        raise MalformedFile(path, f"Max locked memory: expected soft and hard limits, got {raw[:60]!r}")

    def limit(value: bytes) -> int | None:
        if value == b"unlimited":
            return None
        if not _is_count(value):
            raise MalformedFile(path, f"Max locked memory: expected bytes or 'unlimited', got {value[:30]!r}")
        return int(value)

    return Limit(soft=limit(fields[0]), hard=limit(fields[1]))


# --------------------------------------------------------------------------------------------------- reading
def _read(path: str, fs: HostFs, *, prefix: bool = False) -> bytes | None:
    """A procfs/cgroupfs file's bytes; None when it (or its process) is gone, as happens mid-scan, or unreadable.

    ``prefix``: a file longer than the read limit gives its first whole lines instead of an error (``cgroup.procs`` of
    a fork-heavy container, of which only the first ``MAX_PIDS`` are wanted)."""
    try:
        fd = fs.open_file(path)
    except (FileNotFoundError, NotADirectoryError, ProcessLookupError, PermissionError):
        return None
    try:
        chunks = []
        size = 0
        while True:
            chunk = os.read(fd, 16384)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > _READ_LIMIT:
                if prefix:
                    data = b"".join(chunks)
                    return data[: data.rfind(b"\n") + 1]
                raise MalformedFile(path, f"larger than {_READ_LIMIT} bytes")
        return b"".join(chunks)
    except ProcessLookupError:  # ESRCH: the task exited between open and read
        return None
    finally:
        os.close(fd)


def _comm(path: str, fs: HostFs, problems: list[str]) -> str:
    """A process's name ("" when gone or malformed). Any process may set its own (prctl PR_SET_NAME), and it is
    repeated as a label and in messages: printable text of at most TASK_COMM_LEN - 1 characters, or a problem."""
    data = _read(path, fs)
    if data is None:
        return ""
    text = data.decode("utf-8", errors="replace").removesuffix("\n")
    try:
        return printable(text, "process name", _COMM_LIMIT)
    except ValueError as error:
        problems.append(str(MalformedFile(path, str(error))))
        return ""


_COMM_LIMIT = 15  # TASK_COMM_LEN is 16 with the NUL; UTF-8 makes it fewer characters, never more


def _tids(task_dir: str, fs: HostFs) -> list[int]:
    try:
        names = fs.listdir(task_dir)
    except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
        return []
    return sorted(int(name) for name in names if name.isdigit())


@dataclass
class _Thread:
    """One thread's counters as last read."""

    run_delay_ns: int | None
    switches: int | None
    migrations: int | None


@dataclass
class _Totals:
    run_delay_ns: int = 0
    switches: int = 0
    migrations: int = 0
    has_run_delay: bool = False
    has_switches: bool = False
    has_migrations: bool = False


class _Holder(NamedTuple):
    """A container whose processes NVML lists on a GPU: where its cgroup is, its pod, and those processes."""

    cgroup_version: int
    cgroup_path: str
    pod_uid: str | None
    pids: set[int]  # its NVML PIDs


def _grown(current: int | None, last: int | None) -> int:
    """How much a per-thread counter grew; a thread seen for the first time (or a reused TID whose counter is lower)
    contributes all it has."""
    if current is None:
        return 0
    if last is None or current < last:
        return current
    return current - last


class ProcessReader:
    """Reads the GPU holders' processes and keeps their counters monotonic across evaluations. Which processes
    hold GPUs comes from the nvml source's snapshot of the same reading (``needs``)."""

    def __init__(self, *, scheduling: bool = True) -> None:
        # False: the threads' run delay (schedstat) and migrations (sched) are not read, and stay unknown (None);
        # their status (allowed CPUs, preemptions) still is, for the checks.
        self._scheduling = scheduling
        self._threads: dict[tuple[str, int], _Thread] = {}  # (container ID, TID) -> last values
        self._totals: dict[str, _Totals] = {}
        # None until the first sched file is read: kernels without CONFIG_SCHED_DEBUG have no file at all, and some
        # have the file without se.nr_migrations; either way it is not read again.
        self._has_sched: bool | None = None

    def read(self, paths: Paths, inputs: Inputs) -> GpuHolders:
        readings = {name: inputs.get(name) for name in telemetry.SOURCES}
        snapshot = telemetry.merge(readings)
        if snapshot is None:
            down = telemetry.unknown_because(readings, inputs.reason)
            sources = f"the {down[0]} source is" if len(down) == 1 else f"the {_and(down)} sources are"
            raise SourceUnavailable(f"the GPU holders are unknown: {sources} down")
        nvml_pids: set[int] = set()
        containers: dict[str, _Holder] = {}  # by container ID
        host_pids: set[int] = set()
        for gpu in snapshot.gpus:
            for process in gpu.processes or ():
                nvml_pids.add(process.pid)
                if process.container_id and process.cgroup_path is not None and process.cgroup_version is not None:
                    entry = containers.setdefault(
                        process.container_id,
                        _Holder(process.cgroup_version, process.cgroup_path, process.pod_uid, set()),
                    )
                    entry.pids.add(process.pid)
                elif process.cgroup_path is not None:
                    host_pids.add(process.pid)

        problems: list[str] = []
        processes: dict[int, HolderProcess] = {}
        holders: dict[str, HolderContainer] = {}
        seen_threads: set[tuple[str, int]] = set()
        for container_id in sorted(containers)[:MAX_CONTAINERS]:
            version, cgroup_path, pod_uid, pids = containers[container_id]
            holders[container_id] = self._read_container(
                paths, container_id, version, cgroup_path, pod_uid, pids, processes, seen_threads, problems
            )
        for pid in sorted(host_pids - set(processes)):
            found = self._read_process(paths, pid, None, MAX_THREADS_PER_PROCESS, True, problems)
            if found is not None:
                processes[pid], _samples, _tids = found
        if len(containers) > MAX_CONTAINERS:
            log.warning("%d containers hold GPUs; reading the first %d", len(containers), MAX_CONTAINERS)

        # Forget threads that exited and containers that no longer hold a GPU; what they accumulated stays in totals
        # only as long as the container is a holder (a container that stops and starts holding starts over: a reset).
        self._threads = {key: value for key, value in self._threads.items() if key in seen_threads}
        self._totals = {key: value for key, value in self._totals.items() if key in holders}
        return GpuHolders(
            processes=frozen_map(processes),
            containers=frozen_map(holders),
            nvml_pids=frozenset(nvml_pids),
            problems=tuple(problems[:MAX_PROBLEMS]),
        )

    def _read_container(
        self,
        paths: Paths,
        container_id: str,
        version: int,
        cgroup_path: str,
        pod_uid: str | None,
        nvml_pids: set[int],
        processes: dict[int, HolderProcess],
        seen_threads: set[tuple[str, int]],
        problems: list[str],
    ) -> HolderContainer:
        base = paths.cgroupfs / "cpuset" if version == 1 else paths.cgroupfs
        procs_path = f"{base}/{cgroup_path.strip('/')}/cgroup.procs"
        data = _read(procs_path, paths.fs, prefix=True)
        listed: tuple[int, ...] = ()
        truncated = False
        if data is not None:
            try:
                listed = parse_procs(data, MAX_PIDS)
            except ValueError as error:
                problems.append(f"{procs_path}: {error}")
            truncated = data.count(b"\n") > MAX_PIDS
        pids = sorted(set(listed) | nvml_pids)
        totals = self._totals.setdefault(container_id, _Totals())
        budget = MAX_THREADS_PER_CONTAINER
        read_pids: list[int] = []
        threads = 0
        for pid in pids:
            if budget <= 0:
                truncated = True
                break
            found = self._read_process(
                paths, pid, container_id, min(budget, MAX_THREADS_PER_PROCESS), pid in nvml_pids, problems
            )
            if found is None:
                continue
            process, samples, listed_tids = found
            processes[pid] = process
            read_pids.append(pid)
            threads += process.threads_read
            budget -= process.threads_read
            truncated = truncated or process.threads_read < process.threads_seen
            for tid in listed_tids:
                seen_threads.add((container_id, tid))
            for tid, current in samples:
                last = self._threads.get((container_id, tid))
                totals.run_delay_ns += _grown(current.run_delay_ns, last.run_delay_ns if last else None)
                totals.switches += _grown(current.switches, last.switches if last else None)
                totals.migrations += _grown(current.migrations, last.migrations if last else None)
                totals.has_run_delay |= current.run_delay_ns is not None
                totals.has_switches |= current.switches is not None
                totals.has_migrations |= current.migrations is not None
                self._threads[(container_id, tid)] = current
        return HolderContainer(
            container_id=container_id,
            cgroup_path=cgroup_path,
            pod_uid=pod_uid,
            pids=tuple(read_pids),
            threads=threads,
            run_delay_seconds=totals.run_delay_ns / 1e9 if totals.has_run_delay else None,
            involuntary_switches=totals.switches if totals.has_switches else None,
            migrations=totals.migrations if totals.has_migrations else None,
            truncated=truncated,
        )

    def _read_process(
        self,
        paths: Paths,
        pid: int,
        container_id: str | None,
        thread_limit: int,
        with_limits: bool,
        problems: list[str],
    ) -> tuple[HolderProcess, list[tuple[int, _Thread]], list[int]] | None:
        """One process: its threads' counters and allowed CPUs; None when it exited before we could read it."""
        try:
            return self._read_process_files(paths, pid, container_id, thread_limit, with_limits, problems)
        except MalformedFile as error:  # a file far larger than procfs writes: skip the process, say which file
            problems.append(str(error))
            return None

    def _read_process_files(
        self,
        paths: Paths,
        pid: int,
        container_id: str | None,
        thread_limit: int,
        with_limits: bool,
        problems: list[str],
    ) -> tuple[HolderProcess, list[tuple[int, _Thread]], list[int]] | None:
        fs = paths.fs
        directory = f"{paths.procfs}/{pid}"
        all_tids = _tids(f"{directory}/task", fs)
        if not all_tids:
            return None
        comm = _comm(f"{directory}/comm", fs, problems)
        memlock = None
        if with_limits:
            limits_path = f"{directory}/limits"
            data = _read(limits_path, fs)
            if data is not None:
                try:
                    memlock = parse_memlock(data, limits_path)
                except MalformedFile as error:
                    problems.append(str(error))
        allowed: dict[CPUSet, int] = {}
        samples: list[tuple[int, _Thread]] = []
        for tid in all_tids[:thread_limit]:
            thread = self._read_thread(f"{directory}/task/{tid}", fs, problems)
            if thread is None:
                continue
            counters, cpus = thread
            samples.append((tid, counters))
            if cpus is not None:
                allowed[cpus] = allowed.get(cpus, 0) + 1
        process = HolderProcess(
            pid=pid,
            container_id=container_id,
            comm=comm,
            threads_seen=len(all_tids),
            threads_read=len(samples),
            cpus_allowed=frozen_map(allowed),
            memlock=memlock,
        )
        return process, samples, all_tids

    def _read_thread(self, directory: str, fs: HostFs, problems: list[str]) -> tuple[_Thread, CPUSet | None] | None:
        status_path = f"{directory}/status"
        try:
            status = _read(status_path, fs)
            if status is None:
                return None  # the thread exited
            switches, cpus = parse_thread_status(status, status_path)
            run_delay = None
            schedstat_path = f"{directory}/schedstat"
            data = _read(schedstat_path, fs) if self._scheduling else None
            if data is not None:
                run_delay = parse_schedstat(data, schedstat_path)
            migrations = None
            if self._scheduling and self._has_sched is not False:
                sched_path = f"{directory}/sched"
                data = _read(sched_path, fs)
                if data is not None:
                    migrations = parse_nr_migrations(data, sched_path)
                if self._has_sched is None:
                    self._has_sched = migrations is not None
        except MalformedFile as error:
            problems.append(str(error))
            return None
        return _Thread(run_delay, switches, migrations), cpus


def _and(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


def _nvml_not_enabled(paths: Paths, inputs: Inputs) -> GpuHolders:
    raise SourceUnavailable("the GPU holders come from NVML, which this numawatch process has not enabled")


def _reader(context: ReaderContext) -> ProcessReader | None:
    """The HostReader's ProcessReader (it keeps counters across evaluations); None when no GPU library is enabled."""
    enabled = context.nvml is not None or bool(context.libraries)
    return ProcessReader(scheduling=context.holder_scheduling) if enabled else None


SOURCE = SourceSpec(
    name="processes",
    read=_nvml_not_enabled,
    factory=_reader,
    needs=("nvml", "amdsmi", "hlml"),
    description="run-queue wait, preemptions, migrations and allowed CPUs of the threads of GPU-holding containers",
    # Its files are captured as read, but which processes to read comes from NVML: check --from replays the reading.
    recording=JsonRecording(GpuHolders, "processes"),
)


__all__ = [
    "MAX_CONTAINERS",
    "MAX_THREADS_PER_CONTAINER",
    "MAX_THREADS_PER_PROCESS",
    "SOURCE",
    "ProcessReader",
    "cgroup_identity",
    "parse_memlock",
    "parse_nr_migrations",
    "parse_proc_cgroup",
    "parse_schedstat",
    "parse_thread_status",
]
