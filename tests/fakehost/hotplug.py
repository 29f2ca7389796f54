"""CPU hot-unplug on a fake host that is already built: what ``echo 0 > cpuN/online`` and ``echo off > smt/control``
change, file by file, as the kernel does it after the kubelet has placed pods.

``take_cpus_offline(host, cpus)`` rewrites an existing tree (``add_topology`` + ``add_pod`` + ``add_irqs`` ...):

- ``sys/devices/system/cpu``: ``online`` loses the CPUs and ``offline`` gains them; ``cpuN/online`` reads ``0``;
  ``cpuN/topology/`` is removed; the ``cpuN/nodeM`` link stays; the online CPUs' ``topology/*_list`` and mask files
  (``thread_siblings_list``, ``core_cpus_list``, ``thread_siblings``...) no longer name them. cpu0 cannot be
  unplugged (it has no ``online`` file), as on x86.
- ``sys/devices/system/node/nodeM/{cpulist,cpumap}`` drop them.
- cgroup v2 (``sys/fs/cgroup/cgroup.controllers``): every ``cpuset.cpus.effective`` drops them, top-down; one left
  empty takes its parent's effective CPUs. ``cpuset.cpus`` is what was written and keeps them.
- cgroup v1 (``sys/fs/cgroup/cpuset/``): ``cpuset.cpus`` and ``cpuset.effective_cpus`` both drop them; a cpuset left
  without CPUs keeps none and its tasks move to the nearest ancestor that has some (``cgroup.procs``, ``tasks``).
- ``proc/<pid>/status`` of every task of a cgroup whose CPUs changed: ``Cpus_allowed``/``Cpus_allowed_list`` follow
  the cgroup's new CPUs. Tasks of the root cgroup keep their mask (the kernel does not rewrite them; the real-kernel
  capture's PID 1 still lists its offline CPU).
- ``proc/interrupts`` loses the CPUs' columns (it lists online CPUs only).

Not modelled: IRQ effective affinities moving off the CPU, ``proc/stat``, cpufreq, and sleeping tasks whose
``stat`` processor field still names the offline CPU.

``smt_off(host)`` takes every SMT sibling but the first of each core offline (what ``smt/control = off`` does),
writes ``smt/control`` ``off`` and ``smt/active`` ``0``, and returns the CPUs it took offline.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from numawatch.cpuset import CPUSet, format_cpulist, parse_cpulist, parse_cpumask

from fakehost.topology import format_cpumask

if TYPE_CHECKING:
    from fakehost import FakeHost

__all__ = ["smt_off", "take_cpus_offline"]

CPU_ROOT = "sys/devices/system/cpu"
NODE_ROOT = "sys/devices/system/node"
_MASK_FILES = ("thread_siblings", "core_siblings", "core_cpus", "package_cpus", "die_cpus", "cluster_cpus")


def _read_list(path: Path) -> CPUSet:
    return parse_cpulist(path.read_text().strip()) if path.exists() else frozenset()


def _write(path: Path, text: str) -> None:
    path.write_text(text if text.endswith("\n") else text + "\n")


def _nr_cpu_ids(host: FakeHost) -> int:
    possible = _read_list(host.path(f"{CPU_ROOT}/possible")) | _read_list(host.path(f"{CPU_ROOT}/present"))
    return max(possible) + 1


def take_cpus_offline(host: FakeHost, cpus: Iterable[int]) -> CPUSet:
    """Unplug ``cpus`` (online ones; cpu0 refused) on an existing fake host; returns the CPUs taken offline."""
    going = frozenset(cpus)
    online = _read_list(host.path(f"{CPU_ROOT}/online"))
    if 0 in going:
        raise ValueError("cpu0 cannot be taken offline (it has no online file)")
    if not going <= online:
        raise ValueError(f"CPUs {format_cpulist(going - online)} are not online")
    nr_cpu_ids = _nr_cpu_ids(host)
    _unplug_cpu_tree(host, going, online, nr_cpu_ids)
    _unplug_nodes(host, going, nr_cpu_ids)
    _unplug_cgroups(host, going, nr_cpu_ids)
    _unplug_interrupts(host, going)
    return going


def smt_off(host: FakeHost) -> CPUSet:
    """``echo off > smt/control``: every online CPU that is not the first thread of its core goes offline."""
    online = _read_list(host.path(f"{CPU_ROOT}/online"))
    going: set[int] = set()
    for cpu in sorted(online):
        siblings = _read_list(host.path(f"{CPU_ROOT}/cpu{cpu}/topology/thread_siblings_list")) or {cpu}
        if cpu != min(siblings):
            going.add(cpu)
    taken = take_cpus_offline(host, going)
    smt = host.mkdir(f"{CPU_ROOT}/smt")
    _write(smt / "control", "off")
    _write(smt / "active", "0")
    return taken


# --------------------------------------------------------------------------------------------------- cpu and node trees
def _unplug_cpu_tree(host: FakeHost, going: CPUSet, online: CPUSet, nr_cpu_ids: int) -> None:
    root = host.path(CPU_ROOT)
    remaining = online - going
    _write(root / "online", format_cpulist(remaining))
    _write(root / "offline", format_cpulist(_read_list(root / "offline") | going))
    for cpu in sorted(going):
        _write(root / f"cpu{cpu}" / "online", "0")
        host.remove(f"{CPU_ROOT}/cpu{cpu}/topology")
    for cpu in sorted(remaining):
        topology = root / f"cpu{cpu}" / "topology"
        if not topology.is_dir():
            continue
        for entry in sorted(topology.iterdir()):
            if entry.name.endswith("_list"):
                _write(entry, format_cpulist(_read_list(entry) - going))
            elif entry.name in _MASK_FILES:
                kept = parse_cpumask(entry.read_text().strip()) - going
                _write(entry, format_cpumask(kept, nr_cpu_ids))


def _unplug_nodes(host: FakeHost, going: CPUSet, nr_cpu_ids: int) -> None:
    root = host.path(NODE_ROOT)
    if not root.is_dir():
        return
    for node_dir in sorted(root.glob("node[0-9]*")):
        cpulist = node_dir / "cpulist"
        if not cpulist.exists():
            continue
        kept = _read_list(cpulist) - going
        _write(cpulist, format_cpulist(kept))
        _write(node_dir / "cpumap", format_cpumask(kept, nr_cpu_ids))


# --------------------------------------------------------------------------------------------------- cgroups
def _unplug_cgroups(host: FakeHost, going: CPUSet, nr_cpu_ids: int) -> None:
    base = host.path("sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        _unplug_v2(host, base, None, going, nr_cpu_ids)
    elif (base / "cpuset").is_dir():
        _unplug_v1(host, base / "cpuset", None, going, nr_cpu_ids)


def _children(directory: Path) -> list[Path]:
    return sorted(entry for entry in directory.iterdir() if entry.is_dir() and not entry.is_symlink())


def _unplug_v2(host: FakeHost, directory: Path, parent: CPUSet | None, going: CPUSet, nr_cpu_ids: int) -> None:
    effective_file = directory / "cpuset.cpus.effective"
    effective = parent
    if effective_file.exists():
        before = _read_list(effective_file)
        effective = (before - going) or (parent or frozenset())
        if effective != before:
            _write(effective_file, format_cpulist(effective))
            if parent is not None:  # root-cgroup tasks keep their masks
                _retarget_tasks(host, directory / "cgroup.procs", effective, nr_cpu_ids)
    for child in _children(directory):
        _unplug_v2(host, child, effective, going, nr_cpu_ids)


def _unplug_v1(host: FakeHost, directory: Path, ancestor: Path | None, going: CPUSet, nr_cpu_ids: int) -> None:
    cpus_file = directory / "cpuset.cpus"
    has_cpus = ancestor
    if cpus_file.exists():
        before = _read_list(cpus_file)
        after = before - going
        if after != before:
            _write(cpus_file, format_cpulist(after))
            effective_file = directory / "cpuset.effective_cpus"
            if effective_file.exists():
                _write(effective_file, format_cpulist(_read_list(effective_file) - going))
            if not after and ancestor is not None:
                _move_tasks(directory, ancestor)
            elif ancestor is not None:
                _retarget_tasks(host, directory / "cgroup.procs", after, nr_cpu_ids)
        if after:
            has_cpus = directory
    for child in _children(directory):
        _unplug_v1(host, child, has_cpus, going, nr_cpu_ids)


def _move_tasks(directory: Path, ancestor: Path) -> None:
    """A v1 cpuset left without CPUs: its tasks move to the nearest ancestor with CPUs (kernel/cgroup/cpuset.c
    remove_tasks_in_empty_cpuset); they are then allowed that ancestor's CPUs."""
    for name in ("cgroup.procs", "tasks"):
        source, target = directory / name, ancestor / name
        if not source.exists():
            continue
        moved = source.read_text()
        if moved.strip():
            existing = target.read_text() if target.exists() else ""
            target.write_text(existing + moved)
        source.write_text("")


_ALLOWED = re.compile(r"^(Cpus_allowed(?:_list)?):\t.*$", re.MULTILINE)


def _retarget_tasks(host: FakeHost, procs: Path, cpus: CPUSet, nr_cpu_ids: int) -> None:
    if not procs.exists():
        return
    for line in procs.read_text().split():
        status = host.path(f"proc/{line}/status")
        if not line.isdigit() or not status.exists():
            continue
        text = status.read_text()
        allowed = re.search(r"^Cpus_allowed_list:\t(.*)$", text, re.MULTILINE)
        current = parse_cpulist(allowed.group(1)) if allowed else cpus
        mask = (current & cpus) or cpus

        def replace(match: re.Match[str], mask: CPUSet = mask) -> str:
            if match.group(1) == "Cpus_allowed_list":
                return f"Cpus_allowed_list:\t{format_cpulist(mask)}"
            return f"Cpus_allowed:\t{format_cpumask(mask, nr_cpu_ids)}"

        status.write_text(_ALLOWED.sub(replace, text))


# --------------------------------------------------------------------------------------------------- /proc/interrupts
_COUNT = re.compile(r"\s+(\d+)(?=\s|$)")


def _unplug_interrupts(host: FakeHost, going: CPUSet) -> None:
    """Drop the columns of the unplugged CPUs; rows with fewer counts than columns (ERR, MIS) stay as they are."""
    path = host.path("proc/interrupts")
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    header = [int(token[3:]) for token in lines[0].split()] if lines else []
    if not header or not going & set(header):
        return
    keep = [index for index, cpu in enumerate(header) if cpu not in going]
    width = len(lines[0]) - len(lines[0].lstrip())
    out = [" " * width + "".join(f"CPU{header[index]:<8d}" for index in keep)]
    for line in lines[1:]:
        key, colon, rest = line.partition(":")
        counts: list[int] = []
        position = 0
        for match in _COUNT.finditer(rest):
            if match.start() != position or len(counts) == len(header):
                break
            counts.append(int(match.group(1)))
            position = match.end()
        if not colon or len(counts) != len(header):
            out.append(line)
            continue
        cells = "".join(f" {counts[index]:10d}" for index in keep)
        out.append(f"{key}:{cells}{rest[position:]}")
    path.write_text("\n".join(out) + "\n")
