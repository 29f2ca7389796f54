"""irqbalance: whether the daemon runs, and which CPUs its configuration keeps it away from.

Why it matters: irqbalance re-pins device IRQs every 10 s. By default it leaves alone the CPUs in
``/sys/devices/system/cpu/isolated`` and ``nohz_full`` (irqbalance ``cputree.c`` ``setup_banned_cpus``), but
``IRQBALANCE_BANNED_CPULIST`` (or the deprecated hex mask ``IRQBALANCE_BANNED_CPUS``), when set at all, *replaces*
that automatic ban instead of adding to it: a ban list written before more CPUs were isolated lets irqbalance move
IRQs onto the new isolated CPUs (gpu-and-host.md §6).

What is read (paths from ``Paths``):

- whether it runs: processes whose ``<procfs>/<pid>/comm`` is ``irqbalance``. Candidates come cheaply from its
  abstract control socket (``@irqbalance<pid>.sock`` in ``<procfs>/1/net/unix``, the host's network namespace; every
  irqbalance since 1.4 listens on it), from the socket files of ``<root>/run/irqbalance/`` (where it listens when it
  cannot use the abstract one) and from its systemd unit's ``cgroup.procs``. Only when the socket table cannot be
  read are all ``<procfs>/<pid>/comm`` read: an irqbalance older than 1.4, without the socket and outside its
  systemd unit, is then the one case missed. A reader's later searches read only the comm of processes that were
  not there at its last search, and a search once the table's ``FULL_PROCESS_SCAN`` period has passed since the
  last one that read them all (numawatch.refresh) reads them all again: a process already seen that execs irqbalance
  (a fork caught between fork and exec) is found then.
- not on every evaluation: a HostReader's reading (``read_incremental``) remembers the daemons it found with
  their start times (``IrqbalanceMemory``, which the HostReader keeps) and only checks that each still runs
  (``<procfs>/<pid>/stat``: comm and start time, so a PID reused by another process does not pass). It looks again (the
  search above) when that check fails, when the listing of ``<root>/run/irqbalance/`` changes (a daemon started or
  stopped there), once the table's ``DAEMON_SEARCH`` period has passed while none runs (a daemon started without that
  hint), once its ``SEARCH_WHILE_RUNNING`` period has passed while the ones found check out (a second daemon: a
  search reads every process's comm where the socket table cannot be read, 5,000 opens on a large node), and after a
  SIGHUP. ``numawatch explain`` prints what these periods make of the irqbalance check's staleness.
- its settings: the running daemon's own environment (``<procfs>/<pid>/environ``, NUL-separated ``KEY=VALUE``), which
  is what it actually uses, else the environment files ``<root>/etc/default/irqbalance.env`` (upstream),
  ``<root>/etc/default/irqbalance`` (Debian) and ``<root>/etc/sysconfig/irqbalance`` (RHEL), later ones overriding
  earlier ones: systemd ``EnvironmentFile`` syntax, ``KEY=value`` lines, optional quotes, ``#`` comments.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from numawatch.confined import HostFs
from numawatch.cpuset import CPUListError, parse_cpulist, parse_cpumask
from numawatch.errors import SourceUnavailable
from numawatch.hosttext import excerpt
from numawatch.model.interrupts import Irqbalance, IrqbalanceConfig
from numawatch.paths import Paths, joined
from numawatch.refresh import DAEMON_SEARCH, FULL, FULL_PROCESS_SCAN, SEARCH_WHILE_RUNNING, Carried, Refresh
from numawatch.source import Inputs, SourceSpec
from numawatch.sources._files import parse_env_file

COMM = "irqbalance"
ENV_FILES = ("etc/default/irqbalance.env", "etc/default/irqbalance", "etc/sysconfig/irqbalance")
UNIT_CGROUPS = (
    "system.slice/irqbalance.service/cgroup.procs",  # cgroup v2
    "unified/system.slice/irqbalance.service/cgroup.procs",  # hybrid
    "systemd/system.slice/irqbalance.service/cgroup.procs",  # v1 name=systemd hierarchy
)
BANNED_CPULIST = "IRQBALANCE_BANNED_CPULIST"
BANNED_CPUS = "IRQBALANCE_BANNED_CPUS"
ARGS = "IRQBALANCE_ARGS"
_SOCKET = re.compile(r"@irqbalance([0-9]{1,10})\.sock\b")  # ASCII digits, at most PID_MAX_LIMIT's 7 (and then some)
_SOCKET_FILE = re.compile(r"irqbalance([0-9]{1,10})\.sock")
SOCKET_DIR = "irqbalance"  # under <root>/run: where irqbalance puts its socket file when not in the abstract namespace
MAX_HINT_NAMES = 64  # names of that directory kept as the hint: it holds one socket per daemon


# --------------------------------------------------------------------------------------------------- parsers
def parse_environ(data: bytes) -> dict[str, str]:
    """``/proc/<pid>/environ`` (NUL-separated ``KEY=VALUE``) -> {key: value}."""
    values: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, equals, value = item.partition(b"=")
        if equals and key:
            values[key.decode("utf-8", errors="replace")] = value.decode("utf-8", errors="replace")
    return values


def config_from(values: dict[str, str], origin: str, problems: list[str]) -> IrqbalanceConfig:
    """The ban settings of one environment; a value irqbalance could not parse is reported and left None."""
    cpulist_raw = values.get(BANNED_CPULIST)
    cpus_raw = values.get(BANNED_CPUS)
    cpulist = cpus = None
    if cpulist_raw is not None:
        try:
            cpulist = parse_cpulist(cpulist_raw)
        except CPUListError as error:
            problems.append(f"{origin}: {BANNED_CPULIST}={excerpt(cpulist_raw)}: {error}")
    if cpus_raw is not None:
        try:
            cpus = parse_cpumask(cpus_raw)
        except CPUListError as error:
            problems.append(f"{origin}: {BANNED_CPUS}={excerpt(cpus_raw)}: {error}")
    return IrqbalanceConfig(
        origin=origin,
        banned_cpulist=cpulist,
        banned_cpulist_raw=cpulist_raw,
        banned_cpus=cpus,
        banned_cpus_raw=cpus_raw,
        args=values.get(ARGS, ""),
    )


def socket_pids(unix_text: str) -> list[int]:
    """PIDs named by irqbalance's abstract sockets in a ``/proc/net/unix`` text."""
    return sorted({int(match.group(1)) for match in _SOCKET.finditer(unix_text)})


# --------------------------------------------------------------------------------------------------- readers
def _comm(fs: HostFs, procfs: str, pid: str) -> str | None:
    try:
        fd = fs.open_file(f"{procfs}/{pid}/comm")
    except OSError:
        return None  # exited, or not a process directory
    try:
        return os.read(fd, 64).decode("utf-8", errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def find_pids(paths: Paths, hinted: Iterable[int] = (), scan: _Scan | None = None) -> tuple[int, ...]:
    """The PIDs of every running irqbalance: candidates from its sockets (``hinted``: PIDs its socket files name),
    its systemd unit, and only when the socket table cannot be read, every process. ``scan`` (a reader's memory of
    the last such search) limits that last way to the processes it did not see; the PIDs listed go back into it."""
    fs = paths.fs
    procfs = str(paths.procfs)
    sockets = fs.read_optional_text(paths.procfs / "1/net/unix", 4 << 20)
    candidates: set[int] = set(socket_pids(sockets or ""))
    candidates.update(hinted)
    for rel in UNIT_CGROUPS:
        text = fs.read_optional_text(paths.cgroupfs / rel, 1 << 16) or ""
        candidates.update(int(word) for word in text.split() if word.isdigit())
    found = sorted(pid for pid in candidates if _comm(fs, procfs, str(pid)) == COMM)
    if found:
        return tuple(found)
    if sockets is not None:
        # irqbalance >= 1.4 always listens on @irqbalance<pid>.sock: with the host's socket table readable and no
        # such socket (nor a systemd unit with processes), it is not running, and reading every process's comm to
        # be sure would cost in proportion to the processes on the node.
        return ()
    try:
        entries = fs.listdir(procfs)
    except FileNotFoundError:
        raise SourceUnavailable(f"{procfs} does not exist") from None
    listed = [entry for entry in entries if entry.isdigit()]
    seen = scan.seen if scan is not None else frozenset()
    daemons = [entry for entry in listed if entry not in seen and _comm(fs, procfs, entry) == COMM]
    if scan is not None:
        scan.seen = frozenset(listed).difference(daemons)  # a daemon found is looked at again at every search
    return tuple(sorted(int(entry) for entry in daemons))


class _Scan:
    """The processes (``/proc`` names) whose comm the last search of every process read and found not irqbalance.
    A search reads only the others' comm: a daemon starts as a new process, under a PID not seen before. A process
    already seen that later execs irqbalance (a fork caught between fork and exec) is missed until the next search
    of them all, once the table's ``FULL_PROCESS_SCAN`` period has passed."""

    def __init__(self, seen: frozenset[str] = frozenset()) -> None:
        self.seen = seen


class ProcessIdentity(NamedTuple):
    """What tells a process from another that later takes its PID."""

    comm: str
    start_time: int  # clock ticks since boot


def parse_stat_identity(data: bytes) -> ProcessIdentity | None:
    """``/proc/<pid>/stat`` -> its comm and start time, or None when it does not read as one.

    The comm (field 2) is in parentheses and may itself hold spaces and parentheses, so the fields are split after
    the last ``)``; the start time is field 22.
    """
    opening, closing = data.find(b"("), data.rfind(b")")
    if opening < 0 or closing < opening:
        return None
    fields = data[closing + 1 :].split()
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return ProcessIdentity(data[opening + 1 : closing].decode("utf-8", errors="replace"), int(fields[19]))


def _identity(fs: HostFs, procfs: str, pid: int) -> ProcessIdentity | None:
    try:
        return parse_stat_identity(fs.read_file(f"{procfs}/{pid}/stat", 4096))
    except OSError:
        return None  # exited, or not a process directory


def _hint(paths: Paths) -> tuple[str, ...] | None:
    """The names in ``<root>/run/irqbalance/`` (None: no such directory): a change means a daemon came or went."""
    try:
        names = paths.fs.listdir(f"{os.fspath(paths.run)}/{SOCKET_DIR}")  # a string, not pathlib: at every reading
    except OSError:  # absent or not a directory
        return None
    return tuple(sorted(names)[:MAX_HINT_NAMES])


def hinted_pids(names: Iterable[str]) -> list[int]:
    """PIDs named by irqbalance's socket files (``irqbalance<pid>.sock``)."""
    return sorted({int(match.group(1)) for name in names if (match := _SOCKET_FILE.fullmatch(name))})


class Daemon(NamedTuple):
    """A daemon a search found: its PID and what it was then (None: its stat did not read)."""

    pid: int
    identity: ProcessIdentity | None


class IrqbalanceMemory(NamedTuple):
    """What a reading leaves for the next one (``Carried.memory``; the HostReader keeps it)."""

    daemons: tuple[Daemon, ...]  # the PIDs found
    hint: tuple[str, ...] | None  # the names in /run/irqbalance/ then
    readings_since_search: int
    # Where the socket table cannot be read: the processes the searches since the last search of every process saw
    # (their comm is not read again), and how many readings ago that search was.
    seen: frozenset[str] = frozenset()
    readings_since_full: int = 0


def read_incremental(
    paths: Paths,
    inputs: Inputs,
    refresh: Refresh,
    rescan_every: int | None = None,
    rescan_running_every: int | None = None,
    full_scan_every: int | None = None,
) -> Carried:
    """A reading handed the previous one's memory: the daemons found last time, checked cheaply and searched for
    again only when that check fails, the hint changes, ``rescan_every`` readings have passed (``rescan_running_every``
    while a daemon was found) or the reading is whole (the first, and after SIGHUP); a search reads every process's
    comm again once ``full_scan_every`` readings passed since the last that did. The periods are the refresh table's
    (``Policy.periodic``) unless given; see the module docstring. Reads the same as ``read`` whenever it searches."""
    periods = (
        rescan_every if rescan_every is not None else refresh.period(DAEMON_SEARCH, 1),
        rescan_running_every if rescan_running_every is not None else refresh.period(SEARCH_WHILE_RUNNING, 1),
        full_scan_every if full_scan_every is not None else refresh.period(FULL_PROCESS_SCAN, 1),
    )
    if min(periods) < 1:
        raise ValueError(f"searches must be at least 1 reading apart, got {periods}")
    if not paths.fs.is_dir(paths.procfs):
        raise SourceUnavailable(f"{paths.procfs} does not exist")
    memory = _pids(paths, None if refresh.whole else refresh.memory, *periods)
    return Carried(_reading(paths, tuple(daemon.pid for daemon in memory.daemons)), memory)


def _pids(
    paths: Paths, memory: IrqbalanceMemory | None, rescan_every: int, rescan_running_every: int, full_scan_every: int
) -> IrqbalanceMemory:
    fs = paths.fs
    procfs = str(paths.procfs)
    hint = _hint(paths)
    if (
        memory is not None
        and hint == memory.hint
        and memory.readings_since_search < (rescan_running_every if memory.daemons else rescan_every)
        and all(known is not None and _identity(fs, procfs, pid) == known for pid, known in memory.daemons)
    ):
        return memory._replace(
            readings_since_search=memory.readings_since_search + 1,
            readings_since_full=memory.readings_since_full + 1,
        )
    full = memory is None or memory.readings_since_full + 1 >= full_scan_every
    scan = _Scan(frozenset() if full or memory is None else memory.seen)
    pids = find_pids(paths, hinted_pids(hint or ()), scan)
    since_full = 0 if full or memory is None else memory.readings_since_full + 1
    return IrqbalanceMemory(
        tuple(Daemon(pid, _identity(fs, procfs, pid)) for pid in pids), hint, 1, scan.seen, since_full
    )


def _file_config(fs: HostFs, root: Path, problems: list[str]) -> IrqbalanceConfig | None:
    merged: dict[str, str] = {}
    origins: list[str] = []
    for rel in ENV_FILES:
        path = joined(root, rel)  # a string, not pathlib: read at every reading while no daemon runs
        text = fs.read_optional_text(path, 1 << 20)
        if text is None:
            continue
        values = parse_env_file(text)
        merged.update(values)
        origins.append(f"/{rel}")  # as the host names it: the host root is where numawatch reads it, not a host path
    if not origins:
        return None
    return config_from(merged, ", ".join(origins), problems)


def read(paths: Paths) -> Irqbalance:
    """A one-off reading: searches for the daemon (``check``, ``capture``)."""
    return read_incremental(paths, Inputs({}), FULL).snapshot


def _reading(paths: Paths, pids: tuple[int, ...]) -> Irqbalance:
    problems: list[str] = []
    config = None
    for pid in pids:
        try:
            environ = paths.fs.read_file(paths.procfs / str(pid) / "environ", 1 << 20)
        except OSError:
            continue  # exited, or no permission: fall back to the files
        config = config_from(parse_environ(environ), f"environment of irqbalance (PID {pid})", problems)
        break
    if config is None:
        config = _file_config(paths.fs, paths.root, problems)
    return Irqbalance(pids=pids, config=config, problems=tuple(problems))


SOURCE = SourceSpec(
    name="irqbalance",
    read=read,
    incremental=read_incremental,
    description="whether irqbalance runs and the CPUs its configuration bans",
)

__all__ = [
    "SOURCE",
    "Daemon",
    "IrqbalanceMemory",
    "ProcessIdentity",
    "config_from",
    "find_pids",
    "hinted_pids",
    "parse_env_file",
    "parse_environ",
    "parse_stat_identity",
    "read",
    "read_incremental",
    "socket_pids",
]
