"""The cgroups source: what every Kubernetes container actually got from the kernel.

Walks the kubepods cgroup (kubelet.md §6) and reads, per container leaf:

- cgroup v2, one tree under ``<cgroupfs>/``: ``cpuset.cpus.effective``, ``cpuset.mems.effective``,
  ``memory.numa_stat`` (bytes, ``anon N0=<b> N1=<b>``), ``cgroup.procs``.
- cgroup v1, the same relative path in each hierarchy: ``cpuset/`` (``cpuset.effective_cpus``,
  ``cpuset.effective_mems``, ``cgroup.procs``), ``memory/`` (``memory.numa_stat`` in pages, ``total=<p> N0=<p>``).

The CPU quota (``cpu.max`` / ``cpu.cfs_quota_us``) is not read: no check or metric uses it, and it was one open in
five per container.

Layouts: the systemd driver (``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice``) and
the cgroupfs driver (``kubepods/burstable/pod<uid>``); Guaranteed pods sit directly under kubepods. Leaves are
containerd (``cri-containerd-<id>.scope`` / ``<id>``) or CRI-O (``crio-<id>.scope`` / ``crio-<id>``).

This runs every 15 s over ~860 containers, so it lists directories without a stat per entry (``os.scandir``; a pod's
directory by ``os.listdir`` and the names' length), reads with raw ``os.open``/``os.read`` into bytes and builds
string paths instead of pathlib. A HostReader's reading (``read_incremental``) leaves a ``CgroupsMemory`` for the next
one (the HostReader keeps it) that remembers which
containers are pod sandboxes (so ``/proc/<pid>/comm`` is read only until that is certain), shares parsed CPU lists
between readings and hands out a container's previous (immutable) snapshot again while its files read the same
bytes.
With serve's ``--stagger k`` (the refresh table rotates ``PLACEMENT``, ``SHARED_PODS``, ``GUARANTEED_PODS`` and
``GUARANTEED_CONTAINERS``) a reading reads a share of the tree and carries the rest over from the previous reading.

A Guaranteed pod's containers are what the CPU and Memory Managers pin, and their drift is what numawatch is for:
their cpusets, ``cpuset.mems.effective`` and ``memory.numa_stat`` are read at one reading in 2 whatever k is
(``GUARANTEED_CONTAINERS``, a fixed round in the table; turn by the pod's UID), so a cpuset someone rewrote or memory
moved to another node shows within 2 readings. The pod's directory is listed in its own turn, every k-th reading
(``GUARANTEED_PODS``): a container started or restarted in it shows then, and a container removed shows at its next
read (its cpusets fail to read).

Every other container's memory placement drifts over minutes, and the alerts on it wait 30 minutes:
``memory.numa_stat`` and ``cpuset.mems.effective`` are read at the container's turn once in ``PLACEMENT``'s round, 8k
readings (a new container at once), at its pod's first visit after that turn. ``cgroup.procs`` is read here only for
the sandbox verdict (the process-level sources read it themselves), so a staggered reading skips it outside the
container's ``PLACEMENT`` turn once the verdict is settled (a Guaranteed pod's containers too): its PIDs may then be as
old as that round, and a removed container shows as its cpusets failing to read. A settled sandbox (``pause``) is not
read between its ``PLACEMENT`` turns: nothing judges its cpuset or placement.

Burstable and BestEffort pods, which never hold exclusive CPUs, are staggered whole: outside its turn, every 2k-th
reading (``SHARED_PODS``), such a pod is handed out again as it was, without a read or even a listing of its
directory, as long as everything about it was known; in its turn it is listed and its containers' cpusets read. The
QoS slices are listed at every reading, so a pod coming or going shows at once. Every container without exclusive
CPUs, whatever its pod's QoS class (a Guaranteed pod's fractional sidecar too), has its cpuset rewritten by the kubelet
when its CPU Manager's shared pool (``defaultCpuSet``, and the policy) changes: for k readings from the one that sees
the pool the kubelet_state source read change (this source needs that one), every shared pod, and every Guaranteed pod
holding a container whose cpuset was on the pool before or after the change, is listed and its cpusets read at every
reading. A change of the exclusive assignments alone (a pinned pod replaced on the same CPUs) moves no shared cpuset.
A CPU going offline or coming back moves the cpusets that held it, or will: for k readings from the one that sees the
kubepods cgroup's effective CPUs change (the kernel keeps them to the online CPUs, and a container's are a part of
them), every pod is listed and its cpusets read at every reading. So no container is judged on a cpuset older than
such a change. A cpuset someone else rewrote shows within 2 readings for a Guaranteed pod's container and 2k readings
for a shared one (the drift alerts wait 10-15 minutes).
Carrying a pod over costs the same whatever its size: the memory keeps each pod's state (its listing, its containers'
records and verdicts, its snapshot) in one object, handed on as it is. Unstaggered (``check``, ``capture``) everything
is listed and read every time. Cgroups vanish while we walk them: that is normal and skipped. A malformed file in one
container makes that field ``None`` (unknown) and is logged once, not fatal.
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from collections.abc import Callable, Mapping
from functools import partial
from typing import NamedTuple

from numawatch.confined import HostFs
from numawatch.cpuset import EMPTY, CPUListError, CPUSet, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.model import frozen_map
from numawatch.model.kubelet import CpuManagerState, KubeletState
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED, Cgroups, ContainerCgroup, PodCgroup
from numawatch.paths import Paths
from numawatch.refresh import (
    FULL,
    GUARANTEED_CONTAINERS,
    GUARANTEED_PODS,
    PLACEMENT,
    SHARED_PODS,
    Carried,
    Refresh,
    turn_since,
)
from numawatch.source import Inputs, SourceSpec
from numawatch.sources._files import line_after

log = logging.getLogger(__name__)

MAX_PIDS = 64  # PIDs kept per container: enough for process-level sources, bounded on fork-heavy containers
# 64 PIDs need at most 64 x 8 bytes (PID_MAX_LIMIT is 7 digits); one read of this size is always enough.
_PROCS_READ_BYTES = 1024
_READ_CHUNK = 65536
_READ_LIMIT = 4 * 1024 * 1024  # memory.numa_stat on a 32-node host is ~20 KB; anything near this is corrupt

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")  # cgroup v1 memory.numa_stat counts pages of the host we run on

_CONTAINER_ID = re.compile(r"[0-9a-f]{64}\Z")
_POD_UID = re.compile(r"[0-9A-Za-z_-]+\Z")  # API UIDs are 8-4-4-4-12 hex; static pods use a bare 32-hex hash


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
_NODE_LINE = re.compile(rb"(?:N[0-9]+=[0-9]+ )*N[0-9]+=[0-9]+")
_NODE_FIELD = re.compile(rb"N([0-9]+)=([0-9]+)")
_NUMA_STAT_V2_HEAD = re.compile(rb"anon (%s)\nfile (%s)\n" % (_NODE_LINE.pattern, _NODE_LINE.pattern))


def _node_values(rest: bytes, what: str) -> dict[int, int]:
    """``N0=<int> N1=<int> ...`` into {node: value}."""
    # The kernel's exact layout (one space before each field) is checked by one regex match and split by another,
    # about half the cost of the field-by-field loop; anything else takes that loop, which says what is wrong.
    if _NODE_LINE.fullmatch(rest) is not None:
        return {int(node): int(value) for node, value in _NODE_FIELD.findall(rest)}
    values: dict[int, int] = {}
    for item in rest.split():
        node, sep, value = item.partition(b"=")
        if not sep or node[:1] != b"N" or not node[1:].isdigit() or not value.isdigit():
            raise ValueError(f"bad per-node field {item[:40]!r} in the {what!r} line")
        values[int(node[1:])] = int(value)
    return values


def parse_numa_stat_v2(data: bytes) -> dict[int, int]:
    """cgroup v2 ``memory.numa_stat``: resident bytes per node = ``anon`` + ``file`` (lines ``anon N0=<bytes> ...``).

    Raises ValueError when either line is missing or malformed.
    """
    # The kernel prints anon and file as the first two lines (memory_stats[] order): one anchored match validates
    # both, and their numbers come out in node/value pairs. Any other layout takes the search by key below.
    head = _NUMA_STAT_V2_HEAD.match(data)
    if head is not None:
        # findall() hands out (node, value) pairs; this is a third cheaper than pairing up the bare numbers.
        resident = {int(node): int(value) for node, value in _NODE_FIELD.findall(head[1])}
        for node_text, value in _NODE_FIELD.findall(head[2]):
            node = int(node_text)
            resident[node] = resident.get(node, 0) + int(value)
        return resident
    resident = {}
    for key in (b"anon ", b"file "):
        rest = line_after(data, key)
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
    rest = line_after(data, b"total=")
    if rest is None:
        raise ValueError("no 'total=' line")
    _total, _, nodes = rest.partition(b" ")
    if not _total.isdigit():
        raise ValueError(f"bad total {_total[:40]!r}")
    pages = _node_values(nodes, "total")
    if not pages:
        raise ValueError("no per-node values on the 'total=' line")
    return {node: count * page_size for node, count in pages.items()}


class NumaPlacement(NamedTuple):
    """A container's ``memory.numa_stat`` as parsed: resident bytes per NUMA node (frozen), and the CRC-32 of the
    bytes it was parsed from (None: not known)."""

    crc: int | None
    numa: Mapping[int, int]


def parse_placement(
    data: bytes, parse: Callable[[bytes], dict[int, int]], previous: NumaPlacement | None = None
) -> NumaPlacement:
    """``memory.numa_stat`` parsed by ``parse`` (``parse_numa_stat_v2`` or ``_v1``), frozen. Pure: with or without
    ``previous`` (the container's previous placement) the same values; ``previous`` is handed back when the bytes'
    CRC-32 is its own (the file is not parsed again: a Guaranteed pod's containers' is read every 2 readings, and
    their bytes would hold a kilobyte per container), and its mapping kept when they parse to the same values, so
    that an unchanged placement stays one object. ValueError (``parse``'s) when malformed."""
    crc = zlib.crc32(data)
    if previous is not None and previous.crc == crc:
        return previous
    parsed = parse(data)
    if previous is not None and parsed == previous.numa:
        return NumaPlacement(crc, previous.numa)
    return NumaPlacement(crc, frozen_map(parsed))


def parse_procs(data: bytes, limit: int = MAX_PIDS) -> tuple[int, ...]:
    """The first ``limit`` PIDs of ``cgroup.procs`` (one per line)."""
    lines = data.split(b"\n", limit)[:limit]
    if lines and not lines[-1]:
        lines.pop()  # the newline ending the last line
    if all(lines) and b"".join(lines).isdigit():
        return tuple(map(int, lines))  # the kernel's layout: bare digits, one PID a line (and int() of each is safe)
    pids = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if not line.isdigit():
            raise ValueError(f"bad PID {line[:20]!r}")
        pids.append(int(line))
    return tuple(pids)


def _parse_cpus(data: bytes) -> CPUSet:
    try:
        return parse_cpulist(data.decode("ascii", errors="replace"))
    except CPUListError as error:
        raise ValueError(str(error)) from None


# --------------------------------------------------------------------------------------------------- reading
def _read(path: str, scan: _Scan, size: int = _READ_CHUNK) -> bytes | None:
    """The file's bytes, or None when it cannot be read (vanished cgroup, ENODEV after rmdir, controller off).

    One open, one read, one close for every file here: cgroup files are seq_files that fill the buffer until
    EOF, so a short read is the whole file. A file over the limit is logged as malformed (``scan.reported``).
    """
    try:
        fd = scan.open_file(path)
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
                    scan.reported.malformed(path, f"larger than the {_READ_LIMIT}-byte limit")
                    return None
            data = b"".join(chunks)
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


class Reported:
    """The malformed files already logged, handed from reading to reading in the memory: a reading runs every
    evaluation, and one line per broken file is enough."""

    LIMIT = 4096  # paths remembered; past it a broken file may be logged again, memory stays bounded

    def __init__(self) -> None:
        self._paths: set[str] = set()

    def malformed(self, path: str, what: str) -> None:
        """Log ``path`` as malformed (``what`` was wrong), unless it already was."""
        if path in self._paths:
            return
        if len(self._paths) < self.LIMIT:
            self._paths.add(path)
        log.warning("%s", MalformedFile(path, what))


def _parsed(path: str, data: bytes | None, parse, reported: Reported):
    if data is None:
        return None
    try:
        return parse(data)
    except ValueError as error:
        reported.malformed(path, str(error))
        return None


class _Layout:
    """Where one scan reads each file, and through what (the Paths' ``HostFs``): the cgroup version decides which
    hierarchy holds what."""

    def __init__(self, paths: Paths, version: int) -> None:
        base = str(paths.cgroupfs)
        self.fs = paths.fs
        self.version = version
        self.procfs = str(paths.procfs)
        if version == 2:
            self.cpuset = self.memory = base
            self.cpus_file, self.mems_file = "/cpuset.cpus.effective", "/cpuset.mems.effective"
            self.parse_numa = parse_numa_stat_v2
        else:
            self.cpuset = base + "/cpuset"
            self.memory = base + "/memory"
            self.cpus_file, self.mems_file = "/cpuset.effective_cpus", "/cpuset.effective_mems"
            self.parse_numa = parse_numa_stat_v1


def _detect(paths: Paths) -> tuple[int, str, str]:
    """(version, driver, kubepods relative path) or SourceUnavailable naming where we looked."""
    base, fs = os.fspath(paths.cgroupfs), paths.fs  # strings, not pathlib: this runs at every reading
    for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
        if fs.exists(f"{base}/{name}/cgroup.controllers"):
            return 2, driver, name
    for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
        if fs.is_dir(f"{base}/cpuset/{name}"):
            return 1, driver, name
    raise SourceUnavailable(
        f"no kubepods cgroup under {base} (looked for kubepods.slice and kubepods with cgroup.controllers, "
        f"and under {base}/cpuset for cgroup v1): no kubelet on this host?"
    )


def _subdirs(path: str, fs: HostFs) -> list[str]:
    """Names of the subdirectories, [] when the directory vanished mid-scan."""
    try:
        with fs.scandir(path) as entries:
            return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


# The shortest container directory name: a bare 64-hex containerd ID (cgroupfs driver).
_CONTAINER_NAME_MIN = 64


def _container_entries(path: str, fs: HostFs) -> list[str]:
    """Names in a pod cgroup directory long enough to be container directories, [] when it vanished mid-scan.

    A pod cgroup holds its ~3 containers and 60-80 interface files (``cpuset.cpus``, ``memory.stat``...), none of
    them 64 characters long, so the name's length sorts them without asking each entry whether it is a directory
    (``os.listdir`` makes no ``DirEntry`` per file). ``parse_container_dir`` then checks the name's shape; an entry
    of that shape that is not a directory fails its reads and is skipped, as a vanished container is.
    """
    try:
        return [name for name in fs.listdir(path) if len(name) >= _CONTAINER_NAME_MIN]
    except OSError:
        return []


class ContainerRecord(NamedTuple):
    """What a reading remembers of a container: the bytes its snapshot was parsed from, the snapshot, and when its
    memory placement was last read. A file reading the same bytes again has the value the snapshot holds."""

    procs: bytes  # cgroup.procs
    cpus: bytes | None  # the effective cpus file (None: unreadable)
    mems: bytes | None  # the effective mems file (None: unreadable)
    container: ContainerCgroup
    placed_at: int  # the reading (``Refresh.readings``) at which its memory placement was last read
    # A CRC-32 of the memory.numa_stat bytes its placement was parsed from (None: not read), so that a file reading
    # the same is not parsed again (a Guaranteed pod's containers' is read every 2 readings; the bytes themselves
    # would hold a kilobyte per container).
    numa_crc: int | None


class SandboxVerdict(NamedTuple):
    """Whether a container is its pod's sandbox, as decided for its first PID (``_Scan.is_sandbox``)."""

    pid: int  # the first PID the verdict was made for
    verdict: int  # _PAUSE, _NOT_PAUSE_ONCE or _NOT_PAUSE


class _Prefetched(NamedTuple):
    """What ``_settled_unchanged`` read of a Guaranteed pod's container in its turn and found changed, for the
    general path to take instead of reading it again."""

    cid: str
    cpus: bytes | None
    mems: bytes | None
    numa: bytes | None  # memory.numa_stat


# Sandbox verdicts.
_PAUSE = 0  # that PID's comm was "pause": a sandbox (pause never execs anything else)
_NOT_PAUSE_ONCE = 1  # not pause at one reading: maybe a runtime's init (runc:[2:INIT]) about to exec pause
_NOT_PAUSE = 2  # not pause at two readings in a row: an application container


class _PodState:
    """What a reading remembers of one pod for the next one (in ``CgroupsMemory``).

    ``names``: the container-sized names its directory listed (sorted); ``entries``: (relative path, runtime,
    container ID) of those that are container directories, which depend on ``names`` alone, so an unchanged listing
    reuses them (the same ~860 names come back every 15 s: each is matched against the regex once). ``records``:
    container ID -> the container's ``ContainerRecord``, for those whose memory placement is known; ``verdicts``:
    container ID -> its sandbox verdict. ``pod``: the snapshot. ``complete``: every container in it fully known
    (recorded, verdict settled), so a staggered reading may hand the pod out again outside its turn: the state is then
    carried over as it is, one object, however many containers the pod has.
    """

    __slots__ = ("complete", "entries", "names", "pod", "records", "verdicts")

    def __init__(
        self,
        names: tuple[str, ...],
        entries: tuple[tuple[str, str, str], ...],
        records: dict[str, ContainerRecord],
        verdicts: dict[str, SandboxVerdict],
        pod: PodCgroup,
        complete: bool,
    ) -> None:
        self.names = names
        self.entries = entries
        self.records = records
        self.verdicts = verdicts
        self.pod = pod
        self.complete = complete


class _Scan:
    """What one reading of the kubepods tree carries along: where files are, parsed values to share, verdicts.

    ``lists`` maps file contents to their parsed value: most containers repeat a handful of CPU lists (every sandbox
    and Burstable container holds the same shared pool), and the values are immutable, so one object serves them
    all. ``old_pods`` is the previous reading's state of each pod (``_PodState``, by relative path; empty for a
    one-off reading), ``pods`` this reading's. While a pod is read (``_read_pod`` points them at it), ``sandboxes``
    and ``old_containers`` are its previous verdicts and container records, and this reading's are collected in
    ``verdicts`` and ``containers``: a container whose files read the same is its previous (immutable) snapshot
    again, and a staggered reading (``share`` > 1) carries its memory placement over when it is not the container's
    turn. Everything is rebuilt from what this reading saw (a carried pod is what the previous one saw of it), so
    nothing grows with containers or pods that are gone.
    """

    def __init__(
        self,
        layout: _Layout,
        lists: dict[bytes, CPUSet] | None = None,
        pods: dict[str, _PodState] | None = None,
        refresh: Refresh = FULL,
        reported: Reported | None = None,
    ) -> None:
        self.layout = layout
        # Bound once: every file a reading reads is opened through it (hundreds of opens an evaluation).
        self.open_file = layout.fs.open_file
        self.reported = reported if reported is not None else Reported()
        self.old_lists = lists or {}
        self.old_pods = pods or {}
        self.refresh = refresh
        self.share = refresh.share_of(PLACEMENT)  # a container's placement is read once in ``share`` readings
        # A Guaranteed pod's containers are read once in this share of readings (GUARANTEED_CONTAINERS), in this turn
        self.guaranteed_containers_share, self.guaranteed_containers_turn = refresh.rotation(GUARANTEED_CONTAINERS)
        self.readings = refresh.readings
        self.lists: dict[bytes, CPUSet] = {}
        self.pods: dict[str, _PodState] = {}
        # Pod-level staggering (outside its turn a pod's state is carried over): off unless the reading turns it on,
        # per QoS class. A Burstable or BestEffort pod's turn is SHARED_PODS', a Guaranteed pod's listing
        # GUARANTEED_PODS' (its containers are read in GUARANTEED_CONTAINERS' turns besides).
        self.carry_shared = self.carry_guaranteed = False
        self.pool_moved: CPUSet = EMPTY  # the CPUs the shared pool moved over (``_Moves.pool_moved``)
        self.pod_share, self.pod_turn = 1, 0
        self.guaranteed_share, self.guaranteed_turn = 1, 0
        # Whether the pod being read is Guaranteed: its containers' memory placement is read in their turn
        # (GUARANTEED_CONTAINERS), not only in PLACEMENT's.
        self.guaranteed = False
        self.prefetched: _Prefetched | None = None
        self.generation = 0  # stamped on the pods this reading makes (Refresh.generation)
        # The pod being read (see above).
        self.sandboxes: dict[str, SandboxVerdict] = {}
        self.old_containers: dict[str, ContainerRecord] = {}
        self.verdicts: dict[str, SandboxVerdict] = {}
        self.containers: dict[str, ContainerRecord] = {}

    def cpus(self, path: str, data: bytes | None) -> CPUSet | None:
        if data is None:
            return None
        found = self.lists.get(data)
        if found is None:
            found = self.old_lists.get(data)
            if found is None:
                found = _parsed(path, data, _parse_cpus, self.reported)
                if found is None:
                    return None
            self.lists[data] = found
        return found

    def keep(self, data: bytes | None, cpus: CPUSet | None) -> None:
        """Share a reused container's parsed list with the rest of this reading (and the next one)."""
        if data is not None and cpus is not None:
            self.lists.setdefault(data, cpus)

    def carried(self, cid: str) -> ContainerRecord | None:
        """The previous reading's record of this container when this reading may skip its staggered files
        (``memory.numa_stat``, ``cpuset.mems.effective``, and ``cgroup.procs`` once the sandbox verdict is settled),
        else None (read them).
        A container's turn is fixed by its ID (random hex, so the shares are about equal) and comes every
        ``share``-th reading; a container not seen before, or one whose placement was unknown, is read at once. A
        pod is visited at some readings only (carried over between its own turns), so a container is read at the
        first visit since its turn came, not only at a visit that falls on it."""
        if self.share <= 1:
            return None
        known = self.old_containers.get(cid)
        if known is None or self.placement_due(cid, known):
            return None
        return known

    def placement_due(self, cid: str, known: ContainerRecord) -> bool:
        """Whether the container's placement turn came since ``known`` was read (at this reading or between)."""
        return self._due_since(self.share, int(cid[:8], 16), known.placed_at)

    def guaranteed_due(self, cid: str, known: ContainerRecord) -> bool:
        """Whether the pod being read is Guaranteed and its container's turn (GUARANTEED_CONTAINERS: its cpusets and
        memory placement) came since ``known`` was read: its placement is read again, not carried. Not a sandbox's:
        nothing judges it, and its placement keeps PLACEMENT's round."""
        return (
            self.guaranteed
            and not known.container.is_sandbox
            and self._due_since(self.guaranteed_containers_share, int(cid[:8], 16), known.placed_at)
        )

    def _due_since(self, share: int, key: int, last: int) -> bool:
        """``turn_since`` for a family whose share this reading took once (it is asked for every container at every
        visit)."""
        return turn_since(share, key, self.readings, last)

    def settled(self, cid: str, container: ContainerCgroup) -> bool:
        """Whether this container's sandbox verdict is final for the first PID its snapshot lists: then its
        ``cgroup.procs`` says nothing new to this source until its turn (``pids`` is read only for that verdict;
        the process-level sources read ``cgroup.procs`` themselves), and a removed container shows as its
        cpusets failing to read."""
        known = self.sandboxes.get(cid)
        return (
            known is not None
            and known.verdict != _NOT_PAUSE_ONCE
            and bool(container.pids)
            and known.pid == container.pids[0]
        )

    def is_sandbox(self, cid: str, pids: tuple[int, ...]) -> bool:
        """Whether the container's first process is ``pause`` (the pod sandbox).

        Reading ``/proc/<pid>/comm`` of 860 containers every 15 s is a sixth of this source's opens, and the answer
        does not change for a running container: the verdict is kept per container ID and first PID. "pause" is
        kept from the first reading; "not pause" from the second one in a row, because a sandbox's process is
        briefly the runtime's init before it execs pause. A new first PID (the process exited) is asked again.
        """
        if not pids:
            return False
        pid = pids[0]
        known = self.sandboxes.get(cid)
        if known is not None and known.pid == pid and known.verdict != _NOT_PAUSE_ONCE:
            verdict = known.verdict
        else:
            comm = _read(f"{self.layout.procfs}/{pid}/comm", self, 64)
            if comm is None:
                return False  # exited (or never readable): nothing to remember
            if comm == b"pause\n":
                verdict = _PAUSE
            else:
                verdict = _NOT_PAUSE if known is not None and known.pid == pid else _NOT_PAUSE_ONCE
        self.verdicts[cid] = SandboxVerdict(pid, verdict)
        return verdict == _PAUSE


def _settled_unchanged(scan: _Scan, rel: str, cid: str) -> ContainerCgroup | None:
    """A staggered reading's short path for a container outside its turn whose sandbox verdict is settled.

    That is most containers at most of serve's readings (all but one of each round's), and for them only the CPUs
    are read.
    A settled sandbox (pause) is not read at all: nothing downstream looks at its cpuset. When their bytes are the
    previous ones, the previous snapshot is this one: the general path
    (``_read_container``) reaches the same answer, since the container's ``cgroup.procs``, mems and placement are
    then the carried ones, but through its path building and comparisons. Returns that snapshot, or None: take
    the general path (which reads the CPUs again: they changed, or the container went away, both rare).
    """
    known = scan.old_containers.get(cid)
    if known is None or scan.share <= 1 or scan.placement_due(cid, known):
        return None  # as ``_Scan.carried``: new, unstaggered, or its turn came: read in full
    _procs, old_cpus, mems_data, container, _placed, _crc = known
    verdict = scan.sandboxes.get(cid)
    if verdict is None:
        return None  # as ``_Scan.settled``: no verdict yet
    pids = container.pids
    verdict_pid, kind = verdict
    if (
        kind == _NOT_PAUSE_ONCE
        or not pids
        or verdict_pid != pids[0]
        or (kind == _PAUSE) != container.is_sandbox
        or mems_data is None
        or container.cgroup_path != rel
    ):
        return None  # as ``_Scan.settled``: the verdict is not final for this snapshot; or its mems must be read
    if kind == _PAUSE:
        # A sandbox: no check or metric judges its cpuset (the workloads join leaves it out), so between its turns
        # nothing of it is read; a removed one goes with its pod's directory, or at its turn.
        cpus_data = old_cpus
    elif scan.guaranteed_due(cid, known):
        # A Guaranteed pod's container in its turn: its placement is read too. Its cpusets reading the same bytes:
        # the previous snapshot, or a copy holding the placement read now when memory.numa_stat moved (the usual
        # change, at every turn of a busy container); anything else: the general path takes the bytes read here.
        layout = scan.layout
        cpuset_dir = layout.cpuset + "/" + rel
        cpus_data = _read(cpuset_dir + layout.cpus_file, scan)
        read_mems = _read(cpuset_dir + layout.mems_file, scan)
        numa_path = layout.memory + "/" + rel + "/memory.numa_stat"
        numa_data = _read(numa_path, scan)
        if cpus_data is None or cpus_data != old_cpus or read_mems != mems_data or numa_data is None:
            scan.prefetched = _Prefetched(cid, cpus_data, read_mems, numa_data)
            return None
        parse = partial(parse_placement, parse=layout.parse_numa, previous=_placement_of(known))
        placement = _parsed(numa_path, numa_data, parse, scan.reported)
        if placement is None:
            scan.prefetched = _Prefetched(cid, cpus_data, read_mems, numa_data)
            return None
        if placement.numa is not container.numa_bytes:
            container = ContainerCgroup(
                container_id=cid,
                runtime=container.runtime,
                cgroup_path=rel,
                cpus_effective=container.cpus_effective,
                mems_effective=container.mems_effective,
                numa_bytes=placement.numa,
                is_sandbox=container.is_sandbox,
                pids=container.pids,
            )
        known = ContainerRecord(known.procs, cpus_data, read_mems, container, scan.refresh.readings, placement.crc)
    else:
        layout = scan.layout
        cpus_data = _read(layout.cpuset + "/" + rel + layout.cpus_file, scan)
        if cpus_data is None or cpus_data != old_cpus:
            return None
    # What the general path would do with a reused snapshot: share its parsed lists with the rest of this reading,
    # keep its (settled) verdict and carry its record over.
    lists = scan.lists
    if container.cpus_effective is not None and cpus_data is not None:
        lists.setdefault(cpus_data, container.cpus_effective)
    if container.mems_effective is not None:
        lists.setdefault(mems_data, container.mems_effective)
    scan.verdicts[cid] = verdict
    scan.containers[cid] = known
    return container


def _read_container(scan: _Scan, rel: str, runtime: str, cid: str) -> ContainerCgroup | None:
    """One container leaf, or None when it vanished while we read it."""
    layout = scan.layout
    cpuset_dir = f"{layout.cpuset}/{rel}"
    prefetched, scan.prefetched = scan.prefetched, None
    if prefetched is not None and prefetched.cid != cid:
        prefetched = None
    carried = scan.carried(cid)
    settled = carried is not None and scan.settled(cid, carried.container)
    procs_path = cpuset_dir + "/cgroup.procs"
    if settled and carried is not None:
        # Not its turn and nothing for cgroup.procs to decide: its previous bytes stand in (so an unchanged
        # container is still its previous snapshot), and the cpuset reads below notice a removed cgroup.
        procs_data = carried.procs
    else:
        # cgroup.procs exists in every cgroup whatever the controllers: if it is gone, so is the container.
        read_procs = _read(procs_path, scan, _PROCS_READ_BYTES)
        if read_procs is None:
            return None
        if len(read_procs) == _PROCS_READ_BYTES:  # more PIDs than we read: drop the cut last line
            read_procs = read_procs[: read_procs.rfind(b"\n") + 1]
        procs_data = read_procs
    cpus_path = cpuset_dir + layout.cpus_file
    mems_path = cpuset_dir + layout.mems_file
    cpus_data = prefetched.cpus if prefetched is not None else _read(cpus_path, scan)
    # cpuset.mems.effective goes with memory.numa_stat: memory placement, whose alerts wait 30 minutes, and which
    # no other pod's admission rewrites (the Memory Manager does not reconcile shared containers' mems the way the
    # CPU Manager does their cpus), except a Guaranteed pod's, read in its containers' turn (the Memory Manager pins
    # them). The CPUs are read whenever the container is.
    placement = carried if carried is not None and not scan.guaranteed_due(cid, carried) else None
    mems_data: bytes | None
    if placement is not None and placement.mems is not None:
        mems_data = placement.mems
    else:
        mems_data = prefetched.mems if prefetched is not None else _read(mems_path, scan)
    known = scan.old_containers.get(cid)
    if known is not None and known.container.cgroup_path != rel:
        known = None  # another directory: nothing of it applies here
    numa = placement.container.numa_bytes if placement is not None else None
    numa_crc = placement.numa_crc if placement is not None else None
    numa_missing = False
    if numa is None:
        # v2: one unified tree, the same directory; v1: the same relative path in the memory hierarchy.
        numa_path = f"{layout.memory}/{rel}/memory.numa_stat"
        numa_data = prefetched.numa if prefetched is not None else _read(numa_path, scan)
        numa_missing = numa_data is None
        parse = partial(parse_placement, parse=layout.parse_numa, previous=_placement_of(known))
        parsed = _parsed(numa_path, numa_data, parse, scan.reported)
        if parsed is not None:
            numa_crc, numa = parsed
    if (numa_missing or cpus_data is None or mems_data is None) and not layout.fs.is_dir(cpuset_dir):
        return None  # removed after we read cgroup.procs (or, when that was skipped, since the last reading)
    # A file that reads the bytes it read last time has the value the previous snapshot holds (parsing is
    # deterministic): only what changed is parsed, which under moving counters is memory.numa_stat alone.
    if known is not None and known.procs == procs_data:
        pids = known.container.pids
    else:
        pids = _parsed(procs_path, procs_data, parse_procs, scan.reported) or ()
    if known is not None and known.cpus == cpus_data:
        cpus = known.container.cpus_effective
        scan.keep(cpus_data, cpus)
    else:
        cpus = scan.cpus(cpus_path, cpus_data)
    if known is not None and known.mems == mems_data:
        mems = known.container.mems_effective
        scan.keep(mems_data, mems)
    else:
        mems = scan.cpus(mems_path, mems_data)
    previous = known.container if known is not None else None
    is_sandbox = scan.is_sandbox(cid, pids)
    if (
        previous is not None
        and pids is previous.pids
        and cpus is previous.cpus_effective
        and mems is previous.mems_effective
        and is_sandbox == previous.is_sandbox
        and (numa is previous.numa_bytes or numa == previous.numa_bytes)  # a carried placement is the same object
    ):
        # Nothing changed (the usual case): the previous snapshot is this one.
        container = previous
    else:
        container = ContainerCgroup(
            container_id=cid,
            runtime=runtime,
            cgroup_path=rel,
            cpus_effective=cpus,
            mems_effective=mems,
            numa_bytes=numa,
            is_sandbox=is_sandbox,
            pids=pids,
        )
    # A malformed placement is not worth carrying over: the next reading asks again. An absent memory.numa_stat (the
    # memory controller not delegated to this cgroup, as for a pause sandbox) is carried like a known one: asked
    # again at the container's placement turn, so a pod of such containers stays complete and is staggered.
    if numa is not None or numa_missing:
        placed = placement.placed_at if placement is not None else scan.refresh.readings
        scan.containers[cid] = ContainerRecord(procs_data, cpus_data, mems_data, container, placed, numa_crc)
    return container


def _placement_of(known: ContainerRecord | None) -> NumaPlacement | None:
    """The placement a container's record holds, for ``parse_placement`` to hand back; None when it holds none."""
    if known is None or known.container.numa_bytes is None:
        return None
    return NumaPlacement(known.numa_crc, known.container.numa_bytes)


def _container_dirs(rel: str, names: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    """(relative path, runtime, container ID) of the names in a pod's listing that are container directories."""
    entries = []
    for name in names:
        parsed = parse_container_dir(name)
        if parsed is not None:
            entries.append((f"{rel}/{name}", *parsed))
    return tuple(entries)


def _read_pod(scan: _Scan, rel: str, uid: str, qos: str) -> PodCgroup | None:
    """One pod cgroup and its containers, or None when it went away; records its state in ``scan.pods``."""
    old = scan.old_pods.get(rel)
    if old is not None and (old.pod.uid != uid or old.pod.qos != qos):
        old = None
    # Pod-level staggering: outside its turn a pod whose every container is known is handed out again as the
    # previous reading saw it, without even listing its directory (see read_incremental). In its turn, and at every
    # reading while shared pods may not be carried (a change of the CPU Manager's shared pool moves their cpusets), it
    # is listed and its containers' cpusets read, each container's memory placement (and settled cgroup.procs) when
    # its own turn (PLACEMENT) came since it was last read. A Guaranteed pod is listed in its turn (GUARANTEED_PODS)
    # and its known containers are read, cpusets and memory placement, in theirs (GUARANTEED_CONTAINERS), which comes
    # more often: the listing only finds containers started or restarted in the pod.
    scan.guaranteed = qos == QOS_GUARANTEED
    if not scan.guaranteed:
        carry, share, turn = scan.carry_shared, scan.pod_share, scan.pod_turn
    else:
        carry, share, turn = scan.carry_guaranteed, scan.guaranteed_share, scan.guaranteed_turn
        # While the shared pool moves, a Guaranteed pod's containers without exclusive CPUs move with it.
        if carry and old is not None and scan.pool_moved and _on_cpus(old.pod, scan.pool_moved):
            carry = False
    # A pod's turn from its UID's CRC (not hash(): the same pods take the same turns in every process).
    key = zlib.crc32(uid.encode())
    if carry and old is not None and old.complete and key % share != turn:
        if not scan.guaranteed or key % scan.guaranteed_containers_share != scan.guaranteed_containers_turn:
            # Its parsed CPU lists are not added to ``scan.lists``: that is a cache of parses, and a list that only
            # carried pods hold is at worst parsed once more, by another container that comes to read those bytes.
            scan.pods[rel] = old
            return old.pod
        names = old.names  # its containers' turn, not its listing's: the containers it held are read
    else:
        pod_dir = f"{scan.layout.cpuset}/{rel}"
        fs = scan.layout.fs
        names = tuple(sorted(_container_entries(pod_dir, fs)))
        if not names and not fs.is_dir(pod_dir):
            return None  # the pod went away
    entries = old.entries if old is not None and old.names == names else _container_dirs(rel, names)
    # What the container-level functions look up and fill in (see _Scan): this pod's part of either reading.
    if old is not None:
        scan.old_containers, scan.sandboxes = old.records, old.verdicts
    else:
        scan.old_containers, scan.sandboxes = {}, {}
    records: dict[str, ContainerRecord] = {}
    verdicts: dict[str, SandboxVerdict] = {}
    scan.containers, scan.verdicts = records, verdicts
    containers = []
    complete = True
    for container_rel, runtime, cid in entries:
        container = _settled_unchanged(scan, container_rel, cid) or _read_container(scan, container_rel, runtime, cid)
        if container is None:
            complete = False  # vanished mid-read: the next reading lists the pod again
            continue
        containers.append(container)
        verdict = verdicts.get(cid)
        if cid not in records or (container.pids and (verdict is None or verdict.verdict == _NOT_PAUSE_ONCE)):
            complete = False  # something about it is still unknown (placement, sandbox or not): read it next time
    found = tuple(containers)
    # The previous (immutable) pod snapshot when it holds the same containers (compared by identity first): an
    # unchanged pod stays one object from reading to reading, which later stages (the workloads join) recognise.
    if old is not None and old.pod.containers == found:
        pod = old.pod
    else:
        pod = PodCgroup(uid=uid, qos=qos, cgroup_path=rel, containers=found, generation=scan.generation)
    scan.pods[rel] = _PodState(names, entries, records, verdicts, pod, complete)
    return pod


def _on_cpus(pod: PodCgroup, cpus: CPUSet) -> bool:
    """Whether a container of the pod (not its sandbox, whose cpuset nothing judges) was on any of ``cpus`` when it
    was last read, or its CPUs were unknown."""
    return any(
        not container.is_sandbox and (container.cpus_effective is None or not cpus.isdisjoint(container.cpus_effective))
        for container in pod.containers
    )


def _pod_dirs(
    layout: _Layout, driver: str, kubepods: str, known: Mapping[str, _PodState] | None = None
) -> list[tuple[str, str, str]]:
    """(relative path, uid, qos) of every pod cgroup under kubepods. A directory the previous reading held as a pod
    (``known``, by relative path) is that pod's UID without parsing its name again: the path names the driver (its
    kubepods directory), the QoS class (its parent) and the name, which are all the UID is parsed from."""
    known = known or {}
    found = []
    fs = layout.fs
    top = _subdirs(f"{layout.cpuset}/{kubepods}", fs)
    qos_dirs = {}
    for qos in (QOS_BURSTABLE, QOS_BESTEFFORT):
        qos_dirs[f"kubepods-{qos}.slice" if driver == "systemd" else qos] = qos
    for name in top:
        if name in qos_dirs:
            qos = qos_dirs[name]
            parent = f"{kubepods}/{name}"
            for pod_name in _subdirs(f"{layout.cpuset}/{parent}", fs):
                rel = f"{parent}/{pod_name}"
                old = known.get(rel)
                uid = old.pod.uid if old is not None else parse_pod_dir(pod_name, driver, qos)
                if uid is not None:
                    found.append((rel, uid, qos))
            continue
        rel = f"{kubepods}/{name}"
        old = known.get(rel)
        uid = old.pod.uid if old is not None else parse_pod_dir(name, driver, QOS_GUARANTEED)
        if uid is not None:
            found.append((rel, uid, QOS_GUARANTEED))
    found.sort()
    return found


class CgroupsMemory(NamedTuple):
    """What a reading leaves for the next one (``Carried.memory``; the HostReader keeps it): what cannot change for
    a running container (whether it is the pod sandbox), each pod's state (``_PodState``), the parsed CPU lists by
    their bytes (so an unchanged file is not parsed again), the malformed files already logged, and what decides
    when pods may be carried over (see ``_Moves``)."""

    lists: dict[bytes, CPUSet]
    pods: dict[str, _PodState]
    reported: Reported
    moves: _Moves

    @property
    def containers(self) -> dict[str, ContainerRecord]:
        """Every container's record, gathered from the pods that keep them (for tests and debugging)."""
        return {cid: record for state in self.pods.values() for cid, record in state.records.items()}

    @property
    def sandboxes(self) -> dict[str, SandboxVerdict]:
        """Every container's sandbox verdict, gathered from the pods that keep them (for tests and debugging)."""
        return {cid: verdict for state in self.pods.values() for cid, verdict in state.verdicts.items()}


class SharedPool(NamedTuple):
    """The CPU Manager's policy and shared pool (``defaultCpuSet``): what every shared container's cpuset follows."""

    policy: str
    cpus: CPUSet


def shared_pool(state: CpuManagerState | None) -> SharedPool | None:
    """What the kubelet's reconcile loop writes into every container without exclusive CPUs: its static policy gives
    each the default set (``GetCPUSetOrDefault``), so the exclusive assignments themselves move no shared cpuset."""
    return SharedPool(state.policy_name, state.default_cpuset) if state is not None else None


class _Moves(NamedTuple):
    """What moves cpusets without their pods' turns, as the last reading saw it, and how many readings from now on
    must still read the pods it moves (the kubelet and the kernel rewrite the cpusets some time after the change
    they follow shows).

    ``shared_pool``: the CPU Manager's policy and shared pool (from the kubelet_state source; None when it is
    absent, unreadable or down), which every container without exclusive CPUs follows; ``pool_moved``: the CPUs the
    pool covered before or after its changes within the window (a Guaranteed pod's container on any of them follows
    it); ``online``: the kubepods cgroup's effective CPUs, which the kernel keeps to the online CPUs, and of which
    every container's cpuset is a part (a CPU going offline or coming back changes them).
    """

    shared_pool: SharedPool | None = None
    pool_readings_left: int = 0
    pool_moved: CPUSet = EMPTY
    online: CPUSet | None = None
    online_readings_left: int = 0

    def next(self, pool: SharedPool | None, online: CPUSet | None, stagger: int, first: bool) -> _Moves:
        """The moves as this reading sees them: a change opens a window of ``stagger`` readings from this one. The
        first reading (``first``) reads every pod anyway, and takes the online CPUs it finds as no change."""
        pool_left = max(self.pool_readings_left - 1, 0)
        moved = self.pool_moved if pool_left else EMPTY
        if pool != self.shared_pool:
            pool_left = stagger
            moved = moved.union(*(found.cpus for found in (self.shared_pool, pool) if found is not None))
        online_left = max(self.online_readings_left - 1, 0)
        if online != self.online and not first:
            online_left = stagger
        return _Moves(pool, pool_left, moved if pool_left else EMPTY, online, online_left)


def _read_all(
    paths: Paths, memory: CgroupsMemory | None, inputs: Inputs | None, refresh: Refresh
) -> tuple[Cgroups, CgroupsMemory]:
    version, driver, kubepods = _detect(paths)
    layout = _Layout(paths, version)
    if memory is None:
        scan = _Scan(layout, None, None, refresh)
    else:
        scan = _Scan(layout, memory.lists, memory.pods, refresh, reported=memory.reported)
    scan.pod_share, scan.pod_turn = refresh.rotation(SHARED_PODS)
    scan.generation = refresh.generation
    state: KubeletState | None = inputs.get("kubelet_state") if inputs is not None else None
    pool = shared_pool(state.cpu if state is not None else None)
    scan.guaranteed_share, scan.guaranteed_turn = refresh.rotation(GUARANTEED_PODS)
    # Read before the pods: a change of the online CPUs it shows means their cpusets must be read now.
    root_cpus_path = f"{layout.cpuset}/{kubepods}{layout.cpus_file}"
    root_cpus = scan.cpus(root_cpus_path, _read(root_cpus_path, scan))
    before = memory.moves if memory is not None else _Moves()
    moves = before.next(pool, root_cpus, refresh.stagger, memory is None)
    online_moving = moves.online_readings_left > 0
    # Within the windows after a change of the shared pool (shared pods; Guaranteed pods on the pool: _read_pod) or of
    # the online CPUs (every pod), the pods whose cpusets the change moves are read at every reading.
    scan.carry_guaranteed = scan.guaranteed_share > 1 and not online_moving
    scan.carry_shared = scan.pod_share > 1 and not online_moving and moves.pool_readings_left == 0
    scan.pool_moved = moves.pool_moved
    pods = []
    for rel, uid, qos in _pod_dirs(layout, driver, kubepods, scan.old_pods):
        pod = _read_pod(scan, rel, uid, qos)
        if pod is not None:
            pods.append(pod)
    result = Cgroups(
        version=version,
        driver=driver,
        pods=tuple(pods),
        root_cpus_effective=root_cpus,
    )
    return result, CgroupsMemory(scan.lists, scan.pods, scan.reported, moves)


def read(paths: Paths, inputs: Inputs | None = None) -> Cgroups:
    """Every pod and container cgroup under kubepods; SourceUnavailable when there is no kubepods cgroup. A one-off
    reading reads everything, so it uses none of its ``inputs``."""
    return _read_all(paths, None, None, FULL)[0]


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading handed the previous one's memory (``CgroupsMemory``): reads the same as ``read`` unless the
    rotation is on (serve's ``--stagger K``; the module docstring says what it skips).

    With the rotation on, a Guaranteed pod's containers' cpusets and memory placement are read every 2 readings
    (``GUARANTEED_CONTAINERS``) and its directory listed every K (``GUARANTEED_PODS``); a Burstable or BestEffort
    pod is listed and its cpusets read every 2K readings (``SHARED_PODS``), its containers' placement at the pod's
    first turn after their own (``PLACEMENT``, every 8K), as are every container's settled PIDs. Within the K
    readings from a change of ``cpu_manager_state``'s shared pool (shared pods, and Guaranteed pods with a container
    on the pool) or of the online CPUs (every pod), the pods it moves are read at every reading. New pods are read at
    once, and a removed pod is gone at once."""
    result, memory = _read_all(paths, refresh.memory, inputs, refresh)
    return Carried(result, memory)


SOURCE = SourceSpec(
    name="cgroups",
    read=read,
    incremental=read_incremental,
    # The CPU Manager state: a change of its shared pool is when the cpusets of the containers on it move (see above).
    needs=("kubelet_state",),
    description="kubepods cgroups: per-container effective cpuset and memory placement per NUMA node",
)
