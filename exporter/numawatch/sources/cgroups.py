"""The cgroups source: what every Kubernetes container actually got from the kernel.

Walks the kubepods cgroup (kubelet.md §6) and reads, per container leaf:

- cgroup v2, one tree under ``<cgroupfs>/``: ``cpuset.cpus.effective``, ``cpuset.mems.effective``,
  ``memory.numa_stat`` (bytes, ``anon N0=<b> N1=<b>``), ``cpu.max`` (``max 100000`` / ``200000 100000``),
  ``cgroup.procs``.
- cgroup v1, the same relative path in each hierarchy: ``cpuset/`` (``cpuset.effective_cpus``,
  ``cpuset.effective_mems``, ``cgroup.procs``), ``memory/`` (``memory.numa_stat`` in pages, ``total=<p> N0=<p>``),
  ``cpu,cpuacct/`` or ``cpu/`` (``cpu.cfs_quota_us``, ``cpu.cfs_period_us``).

Layouts: the systemd driver (``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice``) and
the cgroupfs driver (``kubepods/burstable/pod<uid>``); Guaranteed pods sit directly under kubepods. Leaves are
containerd (``cri-containerd-<id>.scope`` / ``<id>``) or CRI-O (``crio-<id>.scope`` / ``crio-<id>``).

This runs every 15 s over ~860 containers, so it uses ``os.scandir`` (no stat per entry), raw ``os.open``/``os.read``
into bytes and string paths instead of pathlib. Cgroups vanish while we walk them: that is normal and skipped.
A malformed file in one container makes that field ``None`` (unknown) and is logged once, not fatal.
"""

from __future__ import annotations

import functools
import logging
import os
import re

from numawatch.cpuset import CPUListError, CPUSet, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.model import (
    QOS_BESTEFFORT,
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    Cgroups,
    ContainerCgroup,
    PodCgroup,
    frozen_map,
)
from numawatch.paths import Paths

log = logging.getLogger(__name__)

MAX_PIDS = 64  # PIDs kept per container: enough for process-level sources, bounded on fork-heavy containers
# 64 PIDs need at most 64 x 8 bytes (PID_MAX_LIMIT is 7 digits); one read of this size is always enough.
_PROCS_READ_BYTES = 1024
_READ_CHUNK = 65536
_READ_LIMIT = 4 * 1024 * 1024  # memory.numa_stat on a 32-node host is ~20 KB; anything near this is corrupt

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")  # cgroup v1 memory.numa_stat counts pages of the host we run on

_CONTAINER_ID = re.compile(r"[0-9a-f]{64}\Z")
_POD_UID = re.compile(r"[0-9A-Za-z_-]+\Z")  # API UIDs are 8-4-4-4-12 hex; static pods use a bare 32-hex hash

_V1_CPU_HIERARCHIES = ("cpu,cpuacct", "cpuacct,cpu", "cpu")


# --------------------------------------------------------------------------------------------------- names
def parse_container_dir(name: str) -> tuple[str, str] | None:
    """``(runtime, container_id)`` for a container leaf directory name, None for anything else.

    containerd: ``cri-containerd-<64hex>.scope`` (systemd driver) or ``<64hex>`` (cgroupfs driver);
    CRI-O: ``crio-<64hex>.scope`` or ``crio-<64hex>``. ``crio-conmon-<id>`` (the monitor, not the container) and
    anything else (docker, systemd helper units) are not containers of ours.
    """
    if name.endswith(".scope"):
        stem = name[:-6]
        if stem.startswith("cri-containerd-"):
            runtime, cid = "containerd", stem[15:]
        elif stem.startswith("crio-"):
            runtime, cid = "crio", stem[5:]
        else:
            return None
    elif name.startswith("crio-"):
        runtime, cid = "crio", name[5:]
    else:
        runtime, cid = "containerd", name
    if _CONTAINER_ID.match(cid) is None:
        return None  # also rejects crio-conmon-<id>
    return runtime, cid


def parse_pod_dir(name: str, driver: str, qos: str) -> str | None:
    """The pod UID (with dashes) from a pod cgroup directory name, None if it is not a pod of this QoS class.

    systemd: ``kubepods-pod<uid_>.slice`` (Guaranteed) or ``kubepods-<qos>-pod<uid_>.slice``, the UID's dashes
    escaped as ``_`` by ``ToSystemd()``; cgroupfs: ``pod<uid>``.
    """
    if driver == "systemd":
        prefix = "kubepods-pod" if qos == QOS_GUARANTEED else f"kubepods-{qos}-pod"
        if not (name.startswith(prefix) and name.endswith(".slice")):
            return None
        uid = name[len(prefix) : -6].replace("_", "-")
    else:
        if not name.startswith("pod"):
            return None
        uid = name[3:]
    if not uid or _POD_UID.match(uid) is None:
        return None
    return uid


# --------------------------------------------------------------------------------------------------- parsers
def _node_values(rest: bytes, what: str) -> dict[int, int]:
    """``N0=<int> N1=<int> ...`` into {node: value}."""
    values: dict[int, int] = {}
    for item in rest.split():
        node, sep, value = item.partition(b"=")
        if not sep or node[:1] != b"N" or not node[1:].isdigit() or not value.isdigit():
            raise ValueError(f"bad per-node field {item[:40]!r} in the {what!r} line")
        values[int(node[1:])] = int(value)
    return values


def _line_after(data: bytes, key: bytes) -> bytes | None:
    """The rest of the line that starts with ``key`` (found by key, as new keys may appear in between)."""
    if data.startswith(key):
        start = len(key)
    else:
        found = data.find(b"\n" + key)
        if found < 0:
            return None
        start = found + 1 + len(key)
    end = data.find(b"\n", start)
    return data[start:] if end < 0 else data[start:end]


def parse_numa_stat_v2(data: bytes) -> dict[int, int]:
    """cgroup v2 ``memory.numa_stat``: resident bytes per node = ``anon`` + ``file`` (lines ``anon N0=<bytes> ...``).

    Raises ValueError when either line is missing or malformed.
    """
    resident: dict[int, int] = {}
    for key in (b"anon ", b"file "):
        rest = _line_after(data, key)
        if rest is None:
            raise ValueError(f"no {key.decode().strip()!r} line")
        for node, value in _node_values(rest, key.decode().strip()).items():
            resident[node] = resident.get(node, 0) + value
    if not resident:
        raise ValueError("no per-node values")
    return resident


def parse_numa_stat_v1(data: bytes, page_size: int = PAGE_SIZE) -> dict[int, int]:
    """cgroup v1 ``memory.numa_stat``: the ``total=<pages> N0=<pages> ...`` line, converted to bytes per node.

    ``total`` counts file + anon + unevictable pages of this cgroup alone (``hierarchical_total`` adds children).
    Raises ValueError when the line is missing or malformed.
    """
    rest = _line_after(data, b"total=")
    if rest is None:
        raise ValueError("no 'total=' line")
    _total, _, nodes = rest.partition(b" ")
    if not _total.isdigit():
        raise ValueError(f"bad total {_total[:40]!r}")
    pages = _node_values(nodes, "total")
    if not pages:
        raise ValueError("no per-node values on the 'total=' line")
    return {node: count * page_size for node, count in pages.items()}


def parse_cpu_max(data: bytes) -> tuple[int | None, int]:
    """cgroup v2 ``cpu.max``: ``<quota|max> <period>`` into (quota_us or None for "max", period_us)."""
    fields = data.split()
    if len(fields) != 2 or not fields[1].isdigit() or (fields[0] != b"max" and not fields[0].isdigit()):
        raise ValueError(f"expected '<quota|max> <period>', got {data.strip()[:60]!r}")
    quota = None if fields[0] == b"max" else int(fields[0])
    return quota, int(fields[1])


def parse_int(data: bytes) -> int:
    """A file holding one (possibly negative) integer, such as ``cpu.cfs_quota_us``."""
    text = data.strip()
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text[:60]!r}") from None


def parse_procs(data: bytes, limit: int = MAX_PIDS) -> tuple[int, ...]:
    """The first ``limit`` PIDs of ``cgroup.procs`` (one per line)."""
    pids = []
    for line in data.split(b"\n", limit)[:limit]:
        line = line.strip()
        if not line:
            continue
        if not line.isdigit():
            raise ValueError(f"bad PID {line[:20]!r}")
        pids.append(int(line))
    return tuple(pids)


@functools.lru_cache(maxsize=4096)
def _parse_cpus(data: bytes) -> CPUSet:
    # Memoised: most containers repeat a handful of lists (every sandbox and burstable container carries the same
    # shared pool), and the sets are immutable, so sharing them is safe.
    try:
        return parse_cpulist(data.decode("ascii", errors="replace"))
    except CPUListError as error:
        raise ValueError(str(error)) from None


# --------------------------------------------------------------------------------------------------- reading
def _read(path: str, size: int = _READ_CHUNK) -> bytes | None:
    """The file's bytes, or None when it cannot be read (vanished cgroup, ENODEV after rmdir, controller off).

    One open, one read, one close for every file here: cgroup files are seq_files that fill the buffer until
    EOF, so a short read is the whole file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, size)
        if len(data) == size and size == _READ_CHUNK:
            chunks = [data]
            total = len(data)
            while chunk := os.read(fd, _READ_CHUNK):
                chunks.append(chunk)
                total += len(chunk)
                if total > _READ_LIMIT:
                    _report(path, f"larger than the {_READ_LIMIT}-byte limit")
                    return None
            data = b"".join(chunks)
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


_reported: set[str] = set()


def _report(path: str, what: str) -> None:
    """Log a malformed file once per path (this runs every 15 s; one line per broken file is enough)."""
    if path in _reported:
        return
    if len(_reported) < 4096:
        _reported.add(path)
    log.warning("%s", MalformedFile(path, what))


def _parsed(path: str, data: bytes | None, parse):
    if data is None:
        return None
    try:
        return parse(data)
    except ValueError as error:
        _report(path, str(error))
        return None


class _Layout:
    """Where one scan reads each file: the cgroup version decides which hierarchy holds what."""

    def __init__(self, paths: Paths, version: int) -> None:
        base = str(paths.cgroupfs)
        self.version = version
        self.procfs = str(paths.procfs)
        if version == 2:
            self.cpuset = self.memory = self.cpu = base
            self.cpus_file, self.mems_file = "/cpuset.cpus.effective", "/cpuset.mems.effective"
        else:
            self.cpuset = base + "/cpuset"
            self.memory = base + "/memory"
            self.cpu = next(
                (f"{base}/{name}" for name in _V1_CPU_HIERARCHIES if os.path.isdir(f"{base}/{name}")),
                base + "/cpu",
            )
            self.cpus_file, self.mems_file = "/cpuset.effective_cpus", "/cpuset.effective_mems"


def _detect(paths: Paths) -> tuple[int, str, str]:
    """(version, driver, kubepods relative path) or SourceUnavailable naming where we looked."""
    base = paths.cgroupfs
    for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
        if os.path.exists(base / name / "cgroup.controllers"):
            return 2, driver, name
    for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
        if os.path.isdir(base / "cpuset" / name):
            return 1, driver, name
    raise SourceUnavailable(
        f"no kubepods cgroup under {base} (looked for kubepods.slice and kubepods with cgroup.controllers, "
        f"and under {base / 'cpuset'} for cgroup v1): no kubelet on this host?"
    )


def _subdirs(path: str) -> list[str]:
    """Names of the subdirectories, [] when the directory vanished mid-scan."""
    try:
        with os.scandir(path) as entries:
            return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _is_pause(layout: _Layout, pid: int) -> bool:
    return _read(f"{layout.procfs}/{pid}/comm", 64) == b"pause\n"


def _read_container(layout: _Layout, rel: str, runtime: str, cid: str) -> ContainerCgroup | None:
    """One container leaf, or None when it vanished while we read it."""
    cpuset_dir = f"{layout.cpuset}/{rel}"
    # cgroup.procs exists in every cgroup whatever the controllers: if it is gone, so is the container.
    procs_data = _read(cpuset_dir + "/cgroup.procs", _PROCS_READ_BYTES)
    if procs_data is None:
        return None
    if len(procs_data) == _PROCS_READ_BYTES:  # more PIDs than we read: drop the cut last line
        procs_data = procs_data[: procs_data.rfind(b"\n") + 1]
    cpus_path = cpuset_dir + layout.cpus_file
    mems_path = cpuset_dir + layout.mems_file
    numa_path = f"{layout.memory}/{rel}/memory.numa_stat"
    cpus_data = _read(cpus_path)
    mems_data = _read(mems_path)
    numa_data = _read(numa_path)
    if layout.version == 2:
        max_data = _read(f"{layout.cpu}/{rel}/cpu.max")
        quota_period = _parsed(f"{layout.cpu}/{rel}/cpu.max", max_data, parse_cpu_max)
        quota, period = quota_period if quota_period is not None else (None, None)
        numa = _parsed(numa_path, numa_data, parse_numa_stat_v2)
        missing = max_data is None
    else:
        quota_path = f"{layout.cpu}/{rel}/cpu.cfs_quota_us"
        period_path = f"{layout.cpu}/{rel}/cpu.cfs_period_us"
        quota_data, period_data = _read(quota_path, 64), _read(period_path, 64)
        quota = _parsed(quota_path, quota_data, parse_int)
        if quota is not None and quota < 0:
            quota = None  # -1: no limit
        period = _parsed(period_path, period_data, parse_int)
        numa = _parsed(numa_path, numa_data, parse_numa_stat_v1)
        missing = quota_data is None or period_data is None
    if (missing or cpus_data is None or mems_data is None or numa_data is None) and not os.path.isdir(cpuset_dir):
        return None  # removed after we read cgroup.procs
    pids = _parsed(cpuset_dir + "/cgroup.procs", procs_data, parse_procs) or ()
    return ContainerCgroup(
        container_id=cid,
        runtime=runtime,
        cgroup_path=rel,
        cpus_effective=_parsed(cpus_path, cpus_data, _parse_cpus),
        mems_effective=_parsed(mems_path, mems_data, _parse_cpus),
        numa_bytes=frozen_map(numa) if numa is not None else None,
        cpu_quota_us=quota,
        cpu_period_us=period,
        is_sandbox=bool(pids) and _is_pause(layout, pids[0]),
        pids=pids,
    )


def _read_pod(layout: _Layout, rel: str, uid: str, qos: str) -> PodCgroup | None:
    names = _subdirs(f"{layout.cpuset}/{rel}")
    if not names and not os.path.isdir(f"{layout.cpuset}/{rel}"):
        return None  # the pod went away
    containers = []
    for name in sorted(names):
        parsed = parse_container_dir(name)
        if parsed is None:
            continue
        container = _read_container(layout, f"{rel}/{name}", *parsed)
        if container is not None:
            containers.append(container)
    return PodCgroup(uid=uid, qos=qos, cgroup_path=rel, containers=tuple(containers))


def _pod_dirs(layout: _Layout, driver: str, kubepods: str) -> list[tuple[str, str, str]]:
    """(relative path, uid, qos) of every pod cgroup under kubepods."""
    found = []
    top = _subdirs(f"{layout.cpuset}/{kubepods}")
    qos_dirs = {}
    for qos in (QOS_BURSTABLE, QOS_BESTEFFORT):
        qos_dirs[f"kubepods-{qos}.slice" if driver == "systemd" else qos] = qos
    for name in top:
        if name in qos_dirs:
            qos = qos_dirs[name]
            parent = f"{kubepods}/{name}"
            for pod_name in _subdirs(f"{layout.cpuset}/{parent}"):
                uid = parse_pod_dir(pod_name, driver, qos)
                if uid is not None:
                    found.append((f"{parent}/{pod_name}", uid, qos))
            continue
        uid = parse_pod_dir(name, driver, QOS_GUARANTEED)
        if uid is not None:
            found.append((f"{kubepods}/{name}", uid, QOS_GUARANTEED))
    found.sort()
    return found


def read(paths: Paths) -> Cgroups:
    """Every pod and container cgroup under kubepods; SourceUnavailable when there is no kubepods cgroup."""
    version, driver, kubepods = _detect(paths)
    layout = _Layout(paths, version)
    pods = []
    for rel, uid, qos in _pod_dirs(layout, driver, kubepods):
        pod = _read_pod(layout, rel, uid, qos)
        if pod is not None:
            pods.append(pod)
    root_cpus_path = f"{layout.cpuset}/{kubepods}{layout.cpus_file}"
    return Cgroups(
        version=version,
        driver=driver,
        kubepods_path=kubepods,
        pods=tuple(pods),
        root_cpus_effective=_parsed(root_cpus_path, _read(root_cpus_path), _parse_cpus),
    )


SOURCE = SourceSpec(
    name="cgroups",
    read=read,
    description="kubepods cgroups: per-container effective cpuset, memory placement per NUMA node, CPU quota",
)
