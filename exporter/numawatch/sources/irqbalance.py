"""irqbalance: whether the daemon runs, and which CPUs its configuration keeps it away from.

Why it matters: irqbalance re-pins device IRQs every 10 s. By default it leaves alone the CPUs in
``/sys/devices/system/cpu/isolated`` and ``nohz_full`` (irqbalance ``cputree.c`` ``setup_banned_cpus``), but
``IRQBALANCE_BANNED_CPULIST`` (or the deprecated hex mask ``IRQBALANCE_BANNED_CPUS``), when set at all, *replaces*
that automatic ban instead of adding to it: a ban list written before more CPUs were isolated lets irqbalance move
IRQs onto the new isolated CPUs (gpu-and-host.md §6).

What is read (paths from ``Paths``):

- whether it runs: processes whose ``<procfs>/<pid>/comm`` is ``irqbalance``. Candidates come cheaply from its
  abstract control socket (``@irqbalance<pid>.sock`` in ``<procfs>/1/net/unix``, the host's network namespace; every
  irqbalance since 1.4 listens on it) and from its systemd unit's ``cgroup.procs``. Only when the socket table cannot
  be read are all ``<procfs>/<pid>/comm`` read (about 4 µs per process): an irqbalance older than 1.4, without the
  socket and outside its systemd unit, is then the one case missed.
- its settings: the running daemon's own environment (``<procfs>/<pid>/environ``, NUL-separated ``KEY=VALUE``), which
  is what it actually uses, else the environment files ``<root>/etc/default/irqbalance.env`` (upstream),
  ``<root>/etc/default/irqbalance`` (Debian) and ``<root>/etc/sysconfig/irqbalance`` (RHEL), later ones overriding
  earlier ones: systemd ``EnvironmentFile`` syntax, ``KEY=value`` lines, optional quotes, ``#`` comments.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from numawatch import confined
from numawatch.cpuset import CPUListError, parse_cpulist, parse_cpumask
from numawatch.errors import SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.hosttext import excerpt
from numawatch.model_host import Irqbalance, IrqbalanceConfig
from numawatch.paths import Paths
from numawatch.sources._files import parse_env_file, read_optional_text

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
def _comm(procfs: str, pid: str) -> str | None:
    try:
        fd = confined.open_file(f"{procfs}/{pid}/comm")
    except OSError:
        return None  # exited, or not a process directory
    try:
        return os.read(fd, 64).decode("utf-8", errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def find_pids(paths: Paths) -> tuple[int, ...]:
    procfs = str(paths.procfs)
    sockets = read_optional_text(paths.procfs / "1/net/unix", 4 << 20)
    candidates: set[int] = set(socket_pids(sockets or ""))
    for rel in UNIT_CGROUPS:
        text = read_optional_text(paths.cgroupfs / rel, 1 << 16) or ""
        candidates.update(int(word) for word in text.split() if word.isdigit())
    found = sorted(pid for pid in candidates if _comm(procfs, str(pid)) == COMM)
    if found:
        return tuple(found)
    if sockets is not None:
        # irqbalance >= 1.4 always listens on @irqbalance<pid>.sock: with the host's socket table readable and no
        # such socket (nor a systemd unit with processes), it is not running. Skipping the scan below saves ~20 ms
        # per evaluation on a node with 5,000 processes.
        return ()
    try:
        entries = confined.listdir(procfs)
    except FileNotFoundError:
        raise SourceUnavailable(f"{procfs} does not exist") from None
    return tuple(sorted(int(entry) for entry in entries if entry.isdigit() and _comm(procfs, entry) == COMM))


def _file_config(root: Path, problems: list[str]) -> IrqbalanceConfig | None:
    merged: dict[str, str] = {}
    origins: list[str] = []
    for rel in ENV_FILES:
        path = root / rel
        text = read_optional_text(path, 1 << 20)
        if text is None:
            continue
        values = parse_env_file(text)
        merged.update(values)
        origins.append(f"/{rel}")  # as the host names it: the host root is where numawatch reads it, not a host path
    if not origins:
        return None
    return config_from(merged, ", ".join(origins), problems)


def read(paths: Paths) -> Irqbalance:
    if not confined.is_dir(paths.procfs):
        raise SourceUnavailable(f"{paths.procfs} does not exist")
    pids = find_pids(paths)
    problems: list[str] = []
    config = None
    for pid in pids:
        try:
            environ = confined.read_file(paths.procfs / str(pid) / "environ", 1 << 20)
        except OSError:
            continue  # exited, or no permission: fall back to the files
        config = config_from(parse_environ(environ), f"environment of irqbalance (PID {pid})", problems)
        break
    if config is None:
        config = _file_config(paths.root, problems)
    return Irqbalance(pids=pids, config=config, problems=tuple(problems))


SOURCE = SourceSpec(
    name="irqbalance",
    read=read,
    description="whether irqbalance runs and the CPUs its configuration bans",
)

__all__ = ["SOURCE", "config_from", "find_pids", "parse_env_file", "parse_environ", "read", "socket_pids"]
