"""What each pod uses of CPU and memory, from its pod cgroup (not its containers': two files per pod).

Files read, per pod cgroup under kubepods (the layouts and QoS slices of sources/cgroups.py):

- cgroup v2: ``cpu.stat`` (the ``usage_usec`` line: CPU time in µs) and ``memory.current`` (bytes charged now);
- cgroup v1: ``cpuacct/<pod>/cpuacct.usage`` (ns; ``cpu,cpuacct/`` where the hierarchy has no ``cpuacct`` link) and
  ``memory/<pod>/memory.usage_in_bytes``; the pods are those the cgroups source found (``needs``), listed in the
  ``cpuset`` hierarchy by this source itself only when it is called without that reading.

Only node_workload_not_isolated uses it, to say how much a pod that does not belong on a GPU node takes from it, so
the cost is kept small: the pod level (a pod's containers are summed there by the kernel), no per-container file.
The CPU use is a rate, cores on average since the HostReader's previous reading of the pod (``read_incremental``;
``check --window`` reads twice); one reading has only the cumulative time. With serve's ``--stagger k`` a reading
reads a rotating share of the pods (1/(4k): the refresh table stretches the family; turn by the UID's CRC, as the
cgroups source staggers Burstable pods) and hands the others' last values on; a new pod is read at once.
A malformed or vanished file leaves that value unknown.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from typing import NamedTuple

from numawatch.confined import HostFs
from numawatch.errors import MalformedFile
from numawatch.hosttext import strip_value
from numawatch.model import frozen_map
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED, Cgroups, PodsUsage, PodUsage
from numawatch.paths import Paths
from numawatch.refresh import POD_USAGE, Carried, Refresh
from numawatch.source import Inputs, SourceSpec
from numawatch.sources.cgroups import _detect as detect_kubepods
from numawatch.sources.cgroups import parse_pod_dir

_LIMIT = 8192  # cpu.stat is a dozen lines


def parse_usage_usec(text: str) -> float:
    """cgroup v2 ``cpu.stat`` -> CPU seconds (its ``usage_usec`` line)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            value = value.strip()
            if value.isascii() and value.isdigit() and len(value) <= 20:
                return int(value) / 1e6
            raise ValueError(f"usage_usec is not a number: {value[:40]!r}")
    raise ValueError("no usage_usec line")


def parse_nanoseconds(text: str) -> float:
    """cgroup v1 ``cpuacct.usage`` (ns) -> seconds."""
    value = strip_value(text)
    if not value.isascii() or not value.isdigit() or len(value) > 20:
        raise ValueError(f"expected nanoseconds, got {value[:40]!r}")
    return int(value) / 1e9


def parse_bytes(text: str) -> int:
    value = strip_value(text)
    if not value.isascii() or not value.isdigit() or len(value) > 20:
        raise ValueError(f"expected a number of bytes, got {value[:40]!r}")
    return int(value)


def pod_directories(paths: Paths) -> tuple[int, list[tuple[str, str, str]]]:
    """(cgroup version, [(path relative to the hierarchy, uid, qos)]) of every pod cgroup."""
    version, driver, kubepods = detect_kubepods(paths)
    fs = paths.fs
    base = paths.cgroupfs if version == 2 else paths.cgroupfs / "cpuset"
    found = []
    qos_dirs = {
        (f"kubepods-{qos}.slice" if driver == "systemd" else qos): qos for qos in (QOS_BURSTABLE, QOS_BESTEFFORT)
    }
    for name in sorted(fs.list_dir(base / kubepods)):
        if name in qos_dirs:
            qos = qos_dirs[name]
            for pod_name in sorted(fs.list_dir(base / kubepods / name)):
                uid = parse_pod_dir(pod_name, driver, qos)
                if uid is not None:
                    found.append((f"{kubepods}/{name}/{pod_name}", uid, qos))
            continue
        uid = parse_pod_dir(name, driver, QOS_GUARANTEED)
        if uid is not None:
            found.append((f"{kubepods}/{name}", uid, QOS_GUARANTEED))
    return version, found


def _value(fs: HostFs, path: str, parse: Callable[[str], float | int]) -> float | int | None:
    # One read: a cgroup's cpu.stat and memory.current are a few hundred bytes, filled in one read by the kernel.
    text = fs.read_small_text(path, _LIMIT)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as error:
        raise MalformedFile(path, str(error)) from None


def _cpu_hierarchy(paths: Paths, version: int) -> str:
    """Where the pods' CPU time is: the unified tree, or v1's cpuacct (``cpu,cpuacct`` without the link)."""
    root = os.fspath(paths.cgroupfs)  # strings, not pathlib: this runs at every reading
    if version == 2:
        return root
    return f"{root}/cpuacct" if paths.fs.is_dir(f"{root}/cpuacct") else f"{root}/cpu,cpuacct"


def _read_pod(
    paths: Paths, version: int, cpu_root: str, rel: str, uid: str, qos: str, problems: dict[str, str]
) -> PodUsage:
    root = str(paths.cgroupfs)
    if version == 2:
        cpu_path, cpu_parse = f"{root}/{rel}/cpu.stat", parse_usage_usec
        memory_path = f"{root}/{rel}/memory.current"
    else:
        cpu_path, cpu_parse = f"{cpu_root}/{rel}/cpuacct.usage", parse_nanoseconds
        memory_path = f"{root}/memory/{rel}/memory.usage_in_bytes"
    values: list[float | int | None] = []
    for path, parse in ((cpu_path, cpu_parse), (memory_path, parse_bytes)):
        try:
            values.append(_value(paths.fs, path, parse))
        except MalformedFile as error:
            values.append(None)  # that value of that pod is unknown; the rest is read
            problems.setdefault(uid, str(error))
    cpu, memory = values
    return PodUsage(
        uid=uid,
        qos=qos,
        cpu_seconds=float(cpu) if cpu is not None else None,
        memory_bytes=int(memory) if memory is not None else None,
    )


def _pods(paths: Paths, inputs: Inputs | None) -> tuple[int, list[tuple[str, str, str]]]:
    """(cgroup version, [(path relative to the hierarchy, uid, qos)]) of the pod cgroups: those of the cgroups
    source's reading when this one is handed it (the directories are not listed twice per evaluation), else listed
    here (a direct call)."""
    found: Cgroups | None = inputs.get("cgroups") if inputs is not None else None
    if found is None:
        return pod_directories(paths)
    return found.version, [(pod.cgroup_path, pod.uid, pod.qos) for pod in found.pods]


def read(paths: Paths, inputs: Inputs | None = None) -> PodsUsage:
    version, pods = _pods(paths, inputs)
    problems: dict[str, str] = {}
    cpu_root = _cpu_hierarchy(paths, version)
    found = {uid: _read_pod(paths, version, cpu_root, rel, uid, qos, problems) for rel, uid, qos in pods}
    return PodsUsage(pods=frozen_map(found), problems=frozen_map(problems))


class PodSample(NamedTuple):
    """A pod's usage and the HostReader's clock when it was read: the other end of its next rate."""

    usage: PodUsage
    at: float


# What a reading leaves for the next one (``Carried.memory``; the HostReader keeps it): per pod UID, its last
# sample. Pods that went away are not in it.
PodUsageMemory = dict[str, PodSample]


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading handed the previous one's memory: the CPU use is a rate over the time since each pod was last
    read, and with the rotation on (``POD_USAGE``) 1/K of the pods are read per reading (turn by the UID's CRC)."""
    last: PodUsageMemory = refresh.memory or {}
    version, pods = _pods(paths, inputs)
    now = refresh.now
    cpu_root = _cpu_hierarchy(paths, version)
    found: dict[str, PodUsage] = {}
    kept: PodUsageMemory = {}
    problems: dict[str, str] = {}
    for rel, uid, qos in pods:
        previous = last.get(uid)
        if previous is not None and not refresh.due(POD_USAGE, zlib.crc32(uid.encode())):
            found[uid] = previous.usage
            kept[uid] = previous
            continue
        usage = _read_pod(paths, version, cpu_root, rel, uid, qos, problems)
        if previous is not None:
            usage = _with_rate(usage, previous, now)
        found[uid] = usage
        kept[uid] = PodSample(usage, now)
    return Carried(PodsUsage(pods=frozen_map(found), problems=frozen_map(problems)), kept)


def _with_rate(usage: PodUsage, previous: PodSample, now: float) -> PodUsage:
    """``usage`` with its CPU use as a rate since the ``previous`` sample, when there is one to take."""
    before, elapsed = previous.usage, now - previous.at
    if usage.cpu_seconds is None or before.cpu_seconds is None or elapsed <= 0:
        return usage
    spent = usage.cpu_seconds - before.cpu_seconds
    if spent < 0:  # a pod re-created under the same UID is impossible; a counter that went down is not a rate
        return usage
    return PodUsage(usage.uid, usage.qos, usage.cpu_seconds, usage.memory_bytes, cpu_cores=spent / elapsed)


SOURCE = SourceSpec(
    name="pod_usage",
    read=read,
    incremental=read_incremental,
    # The pod cgroups the cgroups source found: the same directories, listed once per evaluation.
    needs=("cgroups",),
    description="CPU time and memory charged per pod cgroup (pod level: two files per pod)",
)

__all__ = [
    "SOURCE",
    "parse_bytes",
    "parse_nanoseconds",
    "parse_usage_usec",
    "pod_directories",
    "read",
    "read_incremental",
]
