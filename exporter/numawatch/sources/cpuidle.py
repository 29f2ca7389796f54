"""CPU idle states: which ones each online CPU may enter, and how long each takes to leave.

Files read (every path from ``Paths``; Documentation/admin-guide/pm/cpuidle.rst, ABI sysfs-devices-system-cpu):

- ``sys/devices/system/cpu/cpuidle/current_driver`` (``intel_idle``, ``acpi_idle``, ``haltpoll``, ``none``) and
  ``current_governor`` (``current_governor_ro`` on kernels that cannot switch governors). Without the directory the
  kernel has no cpuidle (CONFIG_CPU_IDLE off): ``driver`` is None.
- the ``sys/devices/system/cpu`` listing: which CPUs to read (an offline CPU has no ``cpuidle`` directory).
- per online CPU ``cpuN/cpuidle/stateK/{name,latency,disable}``: the state's name (``C6``), its exit latency in
  microseconds and whether it is disabled (``cpupower idle-set -d``, ``-D``; kernels before 3.7 have no ``disable``:
  every state is allowed there). States with an exit latency of 0 (``POLL``, ``C0`` on old kernels) are left out:
  they add no wake-up latency whatever the limit.
- per online CPU ``cpuN/power/pm_qos_resume_latency_us``: ``0`` no limit, ``n/a`` only polling, ``N`` a limit in
  microseconds that the governor respects (tuned's cpu plugin writes it).

All of them are plain attributes: reading them does not interrupt the CPU they describe (no IPI, unlike
``scaling_cur_freq``). Names and latencies are the driver's table of states (``drv->states``), one table for every
CPU unless the kernel runs one driver per CPU cluster (CONFIG_CPU_IDLE_MULTIPLE_DRIVERS, which adds a per-CPU
``cpuidle/driver`` directory): they are read from one CPU, or per CPU in that case. Only ``disable`` and the PM QoS
limit change at run time, and names and latencies are fixed while the driver is, so a HostReader's reading
(``read_incremental``) remembers them and then reads, per reading, one ``disable`` per state and one limit per CPU: 4
files per CPU on a server with three deep states (C1, C1E, C6). With serve's ``--stagger k``, a reading opens
those of a rotating 1/k of the CPUs (CPU number modulo k) and keeps the others' of the previous reading: someone must
write a file to change them.

A malformed file leaves that CPU's value unknown (``problems``); the rest is still read. The global PM QoS limit of
``/dev/cpu_dma_latency`` (held by tuned's ``force_latency`` or a low-latency runtime) has no sysfs view and is not
read: opening the device would itself register a latency request.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from numawatch.confined import HostFs
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import strip_value
from numawatch.model import frozen_map
from numawatch.model.kernel import CpuIdle, IdleState
from numawatch.paths import Paths
from numawatch.refresh import IDLE_STATES, Carried, Refresh
from numawatch.source import Inputs, SourceSpec

_SMALL = 256  # every file here is one short line
_STATE = re.compile(r"state(\d{1,3})\Z")
_CPU = re.compile(r"cpu(\d{1,5})\Z")
# What drivers name their states: "POLL", "C1", "C1E", "C6", "C1-SKX", "C10", "C3_ACPI", "haltpoll idle" (single
# spaces inside, as cpuidle-haltpoll.c names its state).
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_+.-]| (?! )){0,31}(?<! )\Z")
_WORD = re.compile(r"[a-z0-9_-]{1,32}\Z")
_DISABLE = {"0\n": False, "1\n": True}  # what the kernel prints, looked up before any parsing
_MAX_LATENCY_US = 10**9  # no idle state takes more than a second to leave; a bigger number is not a latency


# --------------------------------------------------------------------------------------------------- parsers
def parse_state_name(text: str) -> str:
    name = strip_value(text)
    if not _NAME.match(name):
        raise ValueError(f"expected an idle state name such as C6, got {name[:40]!r}")
    return name


def parse_latency(text: str) -> int:
    """``latency``: microseconds, a non-negative integer."""
    value = strip_value(text)
    if not value.isascii() or not value.isdigit() or len(value) > 10 or int(value) > _MAX_LATENCY_US:
        raise ValueError(f"expected an exit latency in microseconds, got {value[:40]!r}")
    return int(value)


def parse_disable(text: str) -> bool:
    value = strip_value(text)
    if value not in ("0", "1"):
        raise ValueError(f"expected 0 or 1, got {value[:40]!r}")
    return value == "1"


def parse_resume_latency(text: str) -> int | None:
    """``pm_qos_resume_latency_us`` -> the limit in µs, 0 for ``n/a`` (only polling), None for ``0`` (no limit)."""
    value = strip_value(text)
    if value == "n/a":
        return 0
    if not value.isascii() or not value.isdigit() or len(value) > 10:
        raise ValueError(f"expected a latency in microseconds or n/a, got {value[:40]!r}")
    number = int(value)
    return None if number == 0 else number


def parse_word(text: str, what: str) -> str:
    """A driver or governor name: lower-case letters, digits, ``_`` and ``-``."""
    value = strip_value(text)
    if not _WORD.match(value):
        raise ValueError(f"expected a cpuidle {what} name, got {value[:40]!r}")
    return value


# --------------------------------------------------------------------------------------------------- reading
# (index, name, latency) of a CPU's deep states: what does not change while the driver stays.
_Layout = tuple[tuple[int, str, int], ...]
SHARED = -1  # the layout key's CPU for a driver whose one table of states every CPU uses


class _LayoutKey(NamedTuple):
    """What a layout of deep states is remembered by: the driver and the CPU (SHARED: every CPU's)."""

    driver: str | None  # current_driver's text
    cpu: int


class _Reading:
    """One reading's problems, and the IdleState objects it shares (hundreds of CPUs have the same few states)."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.failures = 0  # malformed values met, all of them (problems keeps the first few)
        self.shared: dict[tuple[int, str, int, bool | None], IdleState] = {}

    def value(self, path: Path | str, parse, text: str | None):
        if text is None:
            return None
        try:
            return parse(text)
        except ValueError as error:
            self.failures += 1
            if len(self.problems) < 64:
                self.problems.append(str(MalformedFile(path, str(error))))
            return None

    def state(self, index: int, name: str, latency: int, disabled: bool | None) -> IdleState:
        key = (index, name, latency, disabled)
        found = self.shared.get(key)
        if found is None:
            found = self.shared[key] = IdleState(index, name, latency, disabled)
        return found


def _layout(fs: HostFs, reading: _Reading, cpu_dir: Path) -> _Layout | None:
    """The deep states of one CPU (latency > 0), by index; None when a name or latency could not be read."""
    states = []
    for entry in fs.list_dir(cpu_dir / "cpuidle"):
        match = _STATE.match(entry)
        if match is None:
            continue
        directory = cpu_dir / "cpuidle" / entry
        name = reading.value(directory / "name", parse_state_name, fs.read_attribute_text(directory / "name", _SMALL))
        latency_path = directory / "latency"
        latency = reading.value(latency_path, parse_latency, fs.read_attribute_text(latency_path, _SMALL))
        if name is None or latency is None:
            return None
        if latency > 0:
            states.append((int(match.group(1)), name, latency))
    return tuple(sorted(states))


class CpuListing(NamedTuple):
    """The CPU root's listing and the CPUs with a ``cpuN`` directory in it, sorted."""

    names: list[str]
    cpus: list[int]


def parse_cpu_listing(names: list[str], previous: CpuListing | None = None) -> CpuListing:
    """The CPUs a listing of ``devices/system/cpu`` has a ``cpuN`` directory of; only online ones have a ``cpuidle``
    directory in it (the driver removes it when a CPU goes offline), so ``cpu/online`` is not needed, and a
    malformed one costs this source nothing. Pure; ``previous`` is handed back when its listing is the same (the CPU
    directories change with hotplug only; 400 names are not matched again)."""
    if previous is not None and previous.names == names:
        return previous
    return CpuListing(names, sorted(int(m.group(1)) for m in map(_CPU.match, names) if m is not None))


class CpuIdleMemory(NamedTuple):
    """What a reading of this source leaves for the next one (``Carried.memory``; the HostReader keeps it)."""

    layouts: dict[_LayoutKey, _Layout]  # the deep states' names and latencies, while the driver stays
    last: CpuIdle  # the reading itself: the values a rotating reading keeps for CPUs outside its turn
    listed: CpuListing | None = None  # the CPU root's listing and the CPU directories found in it


def _cpu_settings(
    fs: HostFs,
    reading: _Reading,
    root: str,
    cpu: int,
    key: _LayoutKey,
    remembered: dict[_LayoutKey, _Layout],
) -> tuple[tuple[IdleState, ...] | None, int | None] | None:
    """One CPU's deep states (None: it went offline while read) and PM QoS limit (None: none); None when they are
    unknown (a malformed name, latency or limit) or it has no deep state (offline, or polling only)."""
    # One driver for every CPU (the usual kernel: no per-CPU cpuidle/driver directory) means one table of states
    # for every CPU: the names and latencies in sysfs are the driver's, read from one CPU.
    layout = remembered.get(key)
    if layout is None:
        found_layout = _layout(fs, reading, Path(f"{root}/cpu{cpu}"))
        if not found_layout:
            return None  # malformed (None), or no deep state (empty)
        layout = remembered[key] = found_layout
    limit: int | None = None
    limit_path = f"{root}/cpu{cpu}/power/pm_qos_resume_latency_us"
    limit_text = fs.read_attribute_text(limit_path, _SMALL)
    if limit_text != "0\n":  # "0": no limit, the usual case
        failures = reading.failures
        limit = reading.value(limit_path, parse_resume_latency, limit_text)
        if reading.failures > failures:
            return None  # a malformed limit: which states the CPU may enter is unknown
    found = []
    for index, name, latency in layout:
        path = f"{root}/cpu{cpu}/cpuidle/state{index}/disable"
        text = fs.read_attribute_text(path, _SMALL)
        if text is None:
            if not fs.is_dir(path[: -len("/disable")]):
                return None, limit  # gone since the layout was learnt: the CPU went offline
            text = "0\n"  # a kernel before 3.7 has no disable attribute: every state is allowed
        disabled = _DISABLE.get(text)
        if disabled is None:
            disabled = reading.value(path, parse_disable, text)
        found.append(reading.state(index, name, latency, disabled))
    return tuple(found), limit


def _read(
    paths: Paths, memory: CpuIdleMemory | None = None, share: int = 1, turn: int = 0
) -> tuple[CpuIdle, dict[_LayoutKey, _Layout], CpuListing, bool]:
    """(the reading, the layouts and (listing, CPUs) to remember, whether it is ``memory``'s reading handed out
    again)."""
    fs = paths.fs
    root = f"{os.fspath(paths.sysfs)}/devices/system/cpu"  # strings, not pathlib: this runs at every reading
    if not fs.is_dir(root):
        raise SourceUnavailable(f"{root} does not exist")
    reading = _Reading()
    idle_dir = f"{root}/cpuidle"
    driver_text = fs.read_attribute_text(f"{idle_dir}/current_driver", _SMALL)
    if driver_text is None:
        # No cpuidle in this kernel (or no driver ever registered): nothing more to read.
        return CpuIdle(driver=None, governor=None), {}, CpuListing([], []), False
    driver = reading.value(f"{idle_dir}/current_driver", lambda t: parse_word(t, "driver"), driver_text)
    governor_path = f"{idle_dir}/current_governor"
    governor_text = fs.read_attribute_text(governor_path, _SMALL)
    if governor_text is None:
        governor_path = f"{idle_dir}/current_governor_ro"
        governor_text = fs.read_attribute_text(governor_path, _SMALL)
    governor = reading.value(governor_path, lambda t: parse_word(t, "governor"), governor_text)
    listed = parse_cpu_listing(fs.list_dir(root), memory.listed if memory is not None else None)
    cpus = listed.cpus
    # A copy: the memory handed in stays as the previous reading left it.
    remembered = dict(memory.layouts) if memory is not None else {}
    carried = memory.last if memory is not None else None
    # With CONFIG_CPU_IDLE_MULTIPLE_DRIVERS (big.LITTLE arm64) each CPU has a cpuidle/driver directory and CPUs of
    # different clusters have different states.
    per_cpu_drivers = bool(cpus) and fs.is_dir(f"{root}/cpu{cpus[0]}/cpuidle/driver")
    shared = _LayoutKey(driver_text, SHARED)

    def settings_of(into: _Reading, cpu: int) -> tuple[tuple[IdleState, ...] | None, int | None] | None:
        key = _LayoutKey(driver_text, cpu) if per_cpu_drivers else shared
        return _cpu_settings(fs, into, root, cpu, key, remembered)

    if (
        memory is not None
        and carried is not None
        and share > 1
        and memory.listed is not None
        and memory.listed.cpus == cpus
        and not carried.problems
        and (carried.driver, carried.governor) == (driver, governor)
        and not reading.problems
        and _turn_unchanged(settings_of, cpus, carried, share, turn)
    ):
        # The same CPUs and driver, and every CPU read at this turn reads what it read before: the previous reading
        # is this one, handed out unchanged (its generation stays, so what was made from it is reused).
        return carried, remembered, listed, True
    states: dict[int, tuple[IdleState, ...]] = {}
    limits: dict[int, int] = {}
    for cpu in cpus:
        if carried is not None and share > 1 and cpu % share != turn and cpu in carried.states:
            states[cpu] = carried.states[cpu]
            if cpu in carried.resume_latency_us:
                limits[cpu] = carried.resume_latency_us[cpu]
            continue
        settings = settings_of(reading, cpu)
        if settings is None:
            continue  # its states are unknown
        found, limit = settings
        if limit is not None:
            limits[cpu] = limit
        if found is not None:
            states[cpu] = found
    if len(remembered) > 1:
        stale = [key for key in remembered if key.driver != driver_text or (key.cpu != SHARED and key.cpu not in cpus)]
        for key in stale:
            del remembered[key]
    result = CpuIdle(
        driver=driver,
        governor=governor,
        states=frozen_map(states),
        resume_latency_us=frozen_map(limits),
        problems=tuple(reading.problems),
    )
    return result, remembered, listed, False


def _turn_unchanged(
    settings_of: Callable[[_Reading, int], tuple[tuple[IdleState, ...] | None, int | None] | None],
    cpus: list[int],
    carried: CpuIdle,
    share: int,
    turn: int,
) -> bool:
    """Whether every CPU a rotating reading reads at this turn (its own, and those whose states are not known)
    reads the states and limit ``carried`` holds for it, with no problem met."""
    probe = _Reading()
    for cpu in cpus:
        known = carried.states.get(cpu)
        if known is not None and cpu % share != turn:
            continue
        settings = settings_of(probe, cpu)
        if probe.failures:
            return False
        if settings is None:
            if known is not None or cpu in carried.resume_latency_us:
                return False
            continue
        found, limit = settings
        if found != known or limit != carried.resume_latency_us.get(cpu):
            return False
    return True


def read(paths: Paths) -> CpuIdle:
    return _read(paths)[0]


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading handed the previous one's memory: each CPU's state names and latencies are remembered while the
    driver stays; with the rotation on (``IDLE_STATES``) the ``disable`` files and PM QoS limits of a rotating share
    of the CPUs (1/K of them, stretched by the refresh table) are read and the others' kept from the previous
    reading."""
    share, turn = refresh.rotation(IDLE_STATES)
    result, layouts, listed, unchanged = _read(paths, refresh.memory, share, turn)
    return Carried(result, CpuIdleMemory(layouts, result, listed), unchanged=unchanged)


SOURCE = SourceSpec(
    name="cpuidle",
    read=read,
    incremental=read_incremental,
    description="CPU idle states per online CPU: exit latency, disabled or not, PM QoS resume latency limits",
)

__all__ = [
    "SOURCE",
    "CpuIdleMemory",
    "CpuListing",
    "parse_cpu_listing",
    "parse_disable",
    "parse_latency",
    "parse_resume_latency",
    "parse_state_name",
    "parse_word",
    "read",
    "read_incremental",
]
