"""Kernel tunables that decide whether pinned inference threads get jitter-free, NUMA-local memory.

Files read (every path from ``Paths``; formats in gpu-and-host.md §6):

- ``proc/sys/kernel/numa_balancing``: a bitmask, ``0`` disabled, ``1`` NUMA_BALANCING_NORMAL, ``2`` memory
  tiering (Documentation/admin-guide/sysctl/kernel.rst). Absent on kernels built without NUMA balancing.
- ``proc/sys/vm/swappiness``: an integer, 0-200 since 5.8.
- ``sys/kernel/mm/transparent_hugepage/{enabled,defrag}``: every mode the kernel offers, the active one in
  brackets: ``always [madvise] never`` (Documentation/admin-guide/mm/transhuge.rst). Unknown words are kept.
- the governor of each online CPU (``performance``, ``powersave``, ``schedutil``, ...;
  Documentation/admin-guide/pm/cpufreq.rst), read once per policy: ``sys/devices/system/cpu/cpufreq/policyN/
  scaling_governor`` for the CPUs of its ``affected_cpus`` (``cpuN/cpufreq`` links to the policy; per CPU when a
  policy does not list its CPUs). A HostReader's reading remembers each policy's CPUs until ``online`` changes
  (``KernelMemory``), so a reading opens one file per policy with raw ``os`` calls (384 on a large intel_pstate
  host); with serve's ``--stagger k`` it opens those of a rotating 1/k of the policies (policy number modulo k)
  and keeps the others' governors of the previous reading, since a governor changes only when someone writes it. Only
  the governor: the current frequency files (``scaling_cur_freq``, ``cpuinfo_cur_freq``) make the kernel interrupt the
  CPU read, so they are never opened. Kernels before policy directories (RHEL 7's 3.10) have a real
  ``cpuN/cpufreq/`` per CPU, read per CPU. Without ``cpu/online`` the policies' ``affected_cpus`` (or the ``cpuN``
  directories) say which CPUs to report. Without any ``cpufreq/policyN`` and without ``cpufreq/`` in the first CPU's
  directory (virtual machines) the host has no cpufreq and ``governors`` is None.
- ``sys/kernel/mm/hugepages/hugepages-<kB>kB/{nr,free,surplus,resv}_hugepages``: the global pools.
- ``proc/cmdline``: only the per-node form of ``hugepages=`` (``hugepagesz=1G hugepages=0:8,1:8``, kernel >= 5.15);
  the totals per size are the topology source's (``IsolationParams.cmdline_hugepages``).

Everything here can change at run time (sysctl, echo into sysfs), so the source has no fingerprint. A malformed
file leaves its setting None and says why in ``problems``; the other settings are still read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from numawatch.confined import HostFs
from numawatch.cpuset import CPUListError, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import checked, excerpt, strip_value
from numawatch.model import frozen_map
from numawatch.model.kernel import HugePageCounts, KernelSettings
from numawatch.paths import Paths
from numawatch.refresh import GOVERNORS, Carried, Refresh
from numawatch.source import Inputs, SourceSpec
from numawatch.sources.topology import hugepage_requests, hugepage_size_kb, parse_cmdline

_SMALL = 4096  # every file here is a line or two

# KernelSettings.absent_features
THP = "thp"
NUMA_BALANCING = "numa_balancing"

# A THP mode as the kernel prints them (always, madvise, never, defer, defer+madvise, inherit, within_size, ...).
_THP_MODE = re.compile(r"[a-z][a-z0-9_+-]{0,31}")
# A cpufreq governor name: CPUFREQ_NAME_LEN is 16 with the NUL (include/linux/cpufreq.h).
_GOVERNOR = re.compile(r"[A-Za-z0-9_-]{1,15}")


# --------------------------------------------------------------------------------------------------- parsers
class Bracketed(NamedTuple):
    """A sysfs choice file: the active mode and every mode it offers, in order."""

    active: str
    modes: tuple[str, ...]


def parse_bracketed(text: str) -> Bracketed:
    """``always [madvise] never`` -> ("madvise", ("always", "madvise", "never")).

    Raises ValueError unless exactly one word is bracketed.
    """
    modes: list[str] = []
    active: list[str] = []
    for word in strip_value(text).split():
        if word.startswith("[") and word.endswith("]") and len(word) > 2:
            word = word[1:-1]
            active.append(word)
        elif "[" in word or "]" in word:
            raise ValueError(f"unbalanced brackets in {excerpt(text.strip())}")
        modes.append(checked(word, _THP_MODE, "mode"))  # modes become label values: only what the kernel prints
    if len(active) != 1:
        raise ValueError(f"expected exactly one [active] mode, got {excerpt(text.strip())}")
    return Bracketed(active[0], tuple(modes))


def parse_sysctl_int(text: str) -> int:
    stripped = strip_value(text)
    body = stripped[1:] if stripped.startswith("-") else stripped
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(f"expected an integer, got {excerpt(stripped)}")
    return int(stripped)


def parse_governor(text: str) -> str:
    """A governor name: one word of at most 15 ASCII letters, digits, ``_`` or ``-`` (it becomes a label value)."""
    stripped = strip_value(text)
    if _GOVERNOR.fullmatch(stripped) is None:
        raise ValueError(f"expected a governor name, got {excerpt(stripped)}")
    return stripped


def parse_cmdline_hugepages_per_node(cmdline: str) -> dict[int, dict[int, int]]:
    """Per-node huge page requests of a command line: node -> size kB -> pages.

    Only ``hugepages=<node>:<count>[,<node>:<count>...]`` asks per node (mm/hugetlb.c ``hugepages_setup``); it binds to
    the size of the ``hugepagesz=`` before it, else ``default_hugepagesz=``, else 2048 kB, exactly as the totals do
    in the topology source. The last request for a size wins. Bad values are skipped (the kernel skips them too, and
    the topology source reports them).
    """
    per_size: dict[int, dict[int, int]] = {}
    for size, value in hugepage_requests(parse_cmdline(cmdline)):
        if ":" not in value:
            continue
        nodes: dict[int, int] = {}
        for element in value.split(","):
            node_text, _, count = element.strip().partition(":")
            if not (node_text.isascii() and node_text.isdigit() and count.isascii() and count.isdigit()):
                nodes = {}
                break
            if len(node_text) > 9 or len(count) > 20:  # past any node or page count (and int()'s digit limit)
                nodes = {}
                break
            nodes[int(node_text)] = int(count)
        if nodes:
            per_size[size] = nodes
    result: dict[int, dict[int, int]] = {}
    for size, pages_per_node in per_size.items():
        for node, pages in pages_per_node.items():
            result.setdefault(node, {})[size] = pages
    return result


# --------------------------------------------------------------------------------------------------- readers
class _Problems:
    """Collects one line per unreadable setting, so one bad file leaves the others readable."""

    def __init__(self) -> None:
        self.lines: dict[str, str] = {}

    def parse(self, setting: str, path: Path | str, parse, text: str | None):
        if text is None:
            return None
        try:
            return parse(text)
        except ValueError as error:
            self.lines[setting] = str(MalformedFile(path, str(error)))
            return None


def _read_pool(fs: HostFs, directory: Path | str, problems: _Problems, setting: str) -> dict[int, HugePageCounts]:
    """``<directory>/hugepages-<kB>kB/*`` for every size -> {kB: counts}."""
    pools: dict[int, HugePageCounts] = {}
    root = os.fspath(directory)  # strings, not pathlib: four files per size and node at every reading
    for entry in sorted(fs.list_dir(directory)):
        size = hugepage_size_kb(entry)
        if size is None:
            continue
        values = {}
        for name in ("nr_hugepages", "free_hugepages", "surplus_hugepages", "resv_hugepages"):
            path = f"{root}/{entry}/{name}"
            values[name] = problems.parse(setting, path, parse_sysctl_int, fs.read_attribute_text(path, _SMALL))
        if values["nr_hugepages"] is None:
            continue
        pools[size] = HugePageCounts(
            total=values["nr_hugepages"],
            free=values["free_hugepages"],
            surplus=values["surplus_hugepages"],
            reserved=values["resv_hugepages"],
        )
    return pools


def read_hugepage_pool(fs: HostFs, directory: Path | str) -> tuple[dict[int, HugePageCounts], str | None]:
    """One directory of ``hugepages-<kB>kB`` pools (global or per node) and the first problem met, if any."""
    problems = _Problems()
    pools = _read_pool(fs, directory, problems, "hugepages")
    return pools, next(iter(problems.lines.values()), None)


def parse_affected_cpus(text: str) -> frozenset[int]:
    """cpufreq ``affected_cpus``: the online CPUs of a policy, space-separated (``0 1 2 3``)."""
    words = strip_value(text).split()
    if not all(word.isascii() and word.isdigit() and len(word) <= 9 for word in words):
        raise ValueError(f"expected CPU numbers separated by spaces, got {text.strip()[:60]!r}")
    return frozenset(int(word) for word in words)


def _governors_per_cpu(fs: HostFs, root: str, online: frozenset[int], problems: _Problems) -> dict[int, str]:
    """``cpuN/cpufreq/scaling_governor`` of every online CPU: the way when the policies do not say their CPUs."""
    governors: dict[int, str] = {}
    for cpu in sorted(online):
        path = f"{root}/cpu{cpu}/cpufreq/scaling_governor"
        # A CPU without cpufreq/ (or one going offline right now) just has no governor.
        value = problems.parse("cpufreq_governor", path, parse_governor, fs.read_small_text(path, _SMALL))
        if value is not None:
            governors[cpu] = value
    return governors


def _listed_cpus(fs: HostFs, cpu_root: str) -> frozenset[int]:
    """The ``cpuN`` directories: the CPUs to ask when ``cpu/online`` is missing (an offline CPU of such a kernel has
    no ``cpufreq/``, so asking it finds no governor)."""
    names = fs.list_dir(cpu_root)
    return frozenset(int(name[3:]) for name in names if name[:3] == "cpu" and name[3:].isascii() and name[3:].isdigit())


def _governors_without_policies(
    fs: HostFs, cpu_root: str, online: frozenset[int] | None, problems: _Problems
) -> dict[int, str] | None:
    """Kernels before cpufreq's ``policyN`` directories (RHEL 7's 3.10) keep each CPU's governor in a real
    ``cpuN/cpufreq/`` directory. None when the first CPU has no ``cpufreq`` either: no cpufreq driver at all
    (virtual machines), found with one listing instead of one failed open per CPU."""
    cpus = online if online is not None else _listed_cpus(fs, cpu_root)
    if not cpus or "cpufreq" not in fs.list_dir(f"{cpu_root}/cpu{min(cpus)}"):
        return None
    return _governors_per_cpu(fs, cpu_root, cpus, problems)


def _policy_turn(policy: str, share: int) -> int:
    """Which reading of every ``share`` re-reads this policy's governor: its number modulo ``share``."""
    number = policy[6:]
    return int(number) % share if number.isdigit() else 0


class KernelMemory(NamedTuple):
    """What a reading of this source leaves for the next one (``Carried.memory``; the HostReader keeps it)."""

    affected: dict[tuple[str, str], frozenset[int]]  # (policy, online list) -> the policy's CPUs
    governors: dict[str, str]  # policy -> its governor at that reading
    # The command line of that reading and its per-node huge page requests: it changes only at a reboot, so a
    # reading that finds the same text takes the parse over instead of parsing it again.
    cmdline: CmdlineRequests | None = None
    # That reading's governors when every policy of an online CPU had one, with what they were read under: while
    # the policies and the online list are the same and the policies due in a turn read the governors remembered,
    # the next reading's are these.
    settled: _Settled | None = None


class _Settled(NamedTuple):
    policies: list[str]  # the cpufreq directory's policies, sorted
    online: str  # the online list's text
    share: int  # the rotation's share that ``due`` is grouped by
    due: tuple[tuple[str, ...], ...]  # per turn, the policies of online CPUs whose governor is read in it
    governors: dict[int, str]  # per online CPU
    listing: list[str] | None = None  # the cpufreq directory's listing ``policies`` were found in


def _governors(
    paths: Paths, problems: _Problems, memory: KernelMemory | None, share: int = 1, turn: int = 0
) -> tuple[dict[int, str] | None, KernelMemory]:
    """The governor of every online CPU, read once per cpufreq policy (``cpufreq/policyN/scaling_governor``, for
    the CPUs its ``affected_cpus`` lists; ``cpuN/cpufreq`` is a link to the policy).

    The previous reading's ``memory`` remembers each policy's CPUs, keyed by policy and the ``online`` list: they
    change only when a CPU goes on- or offline, which changes ``online`` too. It also holds each policy's governor
    of the previous reading: with ``share`` > 1 a policy whose number is not ``turn`` modulo ``share`` keeps it
    instead of opening its file. A policy without a carried governor (new, or its file was unreadable or
    malformed) is read at once. Returns the governors and the memory for the next reading (the one handed in is
    not changed).
    """
    previous = memory.governors if memory is not None and share > 1 else {}
    # A reading that ends early (no policies, no online list, per-CPU files) carries no governor over.
    nothing = KernelMemory(dict(memory.affected) if memory is not None else {}, {})
    fs = paths.fs
    root = f"{os.fspath(paths.sysfs)}/devices/system/cpu"  # strings, not pathlib: this runs at every reading
    # No policy at all: no cpufreq driver (virtual machines, or cpufreq compiled out). Checked first so a VM does
    # not pay one failed open per CPU.
    listing = fs.list_dir(f"{root}/cpufreq")
    known = memory.settled if memory is not None else None
    if known is not None and known.listing == listing:
        policies = known.policies  # the same listing: the same policies (hundreds of names not sorted again)
    else:
        policies = sorted(name for name in listing if name.startswith("policy"))
    online_path = f"{root}/online"
    online_text = fs.read_attribute_text(online_path, 1 << 16)
    online: frozenset[int] | None = None  # unknown: a kernel or a capture without cpu/online
    if online_text is not None:
        try:
            online = parse_cpulist(online_text)
        except CPUListError as error:
            problems.lines["cpufreq_governor"] = str(MalformedFile(online_path, str(error)))
            return None, nothing
    if not policies:
        return _governors_without_policies(fs, root, online, problems), nothing
    if online_text is None:
        online_text = ""  # the memory's key: each policy's affected_cpus names only its online CPUs anyway
    settled = memory.settled if memory is not None and share > 1 else None
    # Nothing about the policies moved: only this turn's governors are read, each the one remembered (a changed or
    # unreadable one: the whole loop below works it out).
    if (
        memory is not None
        and settled is not None
        and (settled.share, settled.online, settled.policies) == (share, online_text, policies)
        and all(
            _read_governor(fs, f"{root}/cpufreq/{policy}/scaling_governor", problems) == memory.governors[policy]
            for policy in settled.due[turn]
        )
    ):
        return settled.governors, memory
    remembered = nothing.affected
    governors: dict[int, str] = {}
    names: dict[str, str] = {}  # file text -> governor: hundreds of policies print the same few names
    found: dict[str, str] = {}
    online_policies: list[str] = []
    complete = True  # every policy of an online CPU has a governor
    for policy in policies:
        directory = f"{root}/cpufreq/{policy}"
        cpus = remembered.get((policy, online_text))
        if cpus is None:
            text = fs.read_small_text(f"{directory}/affected_cpus", _SMALL)
            try:
                cpus = parse_affected_cpus(text) if text is not None else None
            except ValueError:
                cpus = None
            if cpus is None:  # a policy that does not say its CPUs: ask each CPU instead (never staggered)
                every = online if online is not None else _listed_cpus(fs, root)
                return _governors_per_cpu(fs, root, every, problems), KernelMemory({}, {})
            remembered[(policy, online_text)] = cpus
        covered = cpus & online if online is not None else cpus
        if not covered:
            continue  # the policy of CPUs that are offline now
        value = previous.get(policy)
        if value is None or _policy_turn(policy, share) == turn:
            value = _read_governor(fs, f"{directory}/scaling_governor", problems, names)
        if value is not None:
            found[policy] = value
            for cpu in covered:
                governors[cpu] = value
        else:
            complete = False
        online_policies.append(policy)
    if len(remembered) > len(policies):
        # Entries for an older online list: keep only this one's.
        for key in [(policy, online) for policy, online in remembered if online != online_text]:
            del remembered[key]
    # The governors are rebuilt from this reading: a policy that went away is forgotten.
    result = dict(sorted(governors.items()))
    settled = None
    if complete and share > 1:
        due = tuple(tuple(p for p in online_policies if _policy_turn(p, share) == each) for each in range(share))
        settled = _Settled(policies, online_text, share, due, result, listing)
    return result, KernelMemory(remembered, found, settled=settled)


def _read_governor(fs: HostFs, path: str, problems: _Problems, names: dict[str, str] | None = None) -> str | None:
    """One policy's ``scaling_governor``, None when unreadable or malformed (recorded in ``problems``). ``names``:
    file text -> governor, shared by a reading's policies (hundreds of them print the same few names)."""
    text = fs.read_small_text(path, _SMALL)
    value = names.get(text) if names is not None and text is not None else None
    if value is None:
        value = problems.parse("cpufreq_governor", path, parse_governor, text)
        if value is not None and text is not None and names is not None:
            names[text] = value
    return value


def _read_settings(
    paths: Paths, memory: KernelMemory | None, share: int = 1, turn: int = 0
) -> tuple[KernelSettings, KernelMemory]:
    # Strings, not pathlib: this runs at every reading.
    procfs = os.fspath(paths.procfs)
    sysfs = os.fspath(paths.sysfs)
    sysctl = f"{procfs}/sys"
    mm = f"{sysfs}/kernel/mm"
    cpufreq = f"{sysfs}/devices/system/cpu/cpufreq"
    fs = paths.fs
    if not fs.is_dir(sysctl) and not fs.is_dir(mm) and not fs.is_dir(cpufreq):
        # With cpufreq's directory alone (a capture of sysfs' CPUs only) the governors are still read; each other
        # setting is then missing, and only the checks of those are not evaluated.
        raise SourceUnavailable(f"neither {sysctl} nor {mm} nor {cpufreq} exists")
    problems = _Problems()

    def value(setting: str, path: str, parse):
        return problems.parse(setting, path, parse, fs.read_attribute_text(path, _SMALL))

    numa_balancing = value("numa_balancing", f"{sysctl}/kernel/numa_balancing", parse_sysctl_int)
    swappiness = value("swappiness", f"{sysctl}/vm/swappiness", parse_sysctl_int)
    enabled = value("thp_enabled", f"{mm}/transparent_hugepage/enabled", parse_bracketed)
    defrag = value("thp_defrag", f"{mm}/transparent_hugepage/defrag", parse_bracketed)
    governors, kept = _governors(paths, problems, memory, share, turn)
    hugepages = _read_pool(fs, f"{mm}/hugepages", problems, "hugepages")
    try:
        cmdline = fs.read_optional_text(f"{procfs}/cmdline", 1 << 16) or ""
    except (OSError, MalformedFile):
        cmdline = ""  # a link loop or a FIFO: no per-node request is known (the topology source names the file)
    requests = parse_per_node_requests(cmdline, memory.cmdline if memory is not None else None)
    absent = set()
    if enabled is None and "thp_enabled" not in problems.lines and _lacks(fs, mm, "transparent_hugepage"):
        absent.add(THP)
    if (
        numa_balancing is None
        and "numa_balancing" not in problems.lines
        and _lacks(fs, f"{sysctl}/kernel", "numa_balancing")
    ):
        absent.add(NUMA_BALANCING)
    settings = KernelSettings(
        numa_balancing=numa_balancing,
        swappiness=swappiness,
        thp_enabled=enabled.active if enabled else None,
        thp_defrag=defrag.active if defrag else None,
        governors=frozen_map(governors) if governors is not None else None,
        hugepages=frozen_map(hugepages),
        cmdline_hugepages_per_node=requests.per_node,
        problems=frozen_map(problems.lines),
        absent_features=frozenset(absent),
    )
    return settings, kept._replace(cmdline=requests)


class CmdlineRequests(NamedTuple):
    """A command line's per-node huge page requests (node -> size kB -> pages, frozen) and the text they are of."""

    cmdline: str
    per_node: Mapping[int, Mapping[int, int]]


def parse_per_node_requests(cmdline: str, previous: CmdlineRequests | None = None) -> CmdlineRequests:
    """``parse_cmdline_hugepages_per_node`` of ``cmdline``, frozen. Pure; ``previous`` (the previous reading's) is
    handed back when it is of the same text: the command line changes only at a reboot, and the mappings are
    immutable, so two snapshots may share them."""
    if previous is not None and previous.cmdline == cmdline:
        return previous
    per_node = parse_cmdline_hugepages_per_node(cmdline)
    return CmdlineRequests(cmdline, frozen_map({node: frozen_map(sizes) for node, sizes in per_node.items()}))


def _lacks(fs: HostFs, directory: str, name: str) -> bool:
    """The directory is there (so the kernel could have put ``name`` in it) and has no ``name``."""
    entries = fs.list_dir(directory)
    return bool(entries) and name not in entries


def read(paths: Paths) -> KernelSettings:
    return _read_settings(paths, None)[0]


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading handed the previous one's memory: each cpufreq policy's CPUs are remembered while ``online`` is
    the same, so a reading opens one file per policy instead of two; with the rotation on (``GOVERNORS``) it
    re-reads the governor of a rotating share of the policies (the family's share S: 1/K of them, stretched by the
    refresh table; a policy's turn is its number modulo S, so a changed governor shows within S readings; a new
    policy, or one whose governor was unknown, is read at once). The other settings are read every time."""
    share, turn = refresh.rotation(GOVERNORS)
    settings, memory = _read_settings(paths, refresh.memory, share, turn)
    return Carried(settings, memory)


SOURCE = SourceSpec(
    name="kernel",
    read=read,
    incremental=read_incremental,
    description="kernel tunables: numa_balancing, swappiness, THP, cpufreq governors, huge page pools",
)

__all__ = [
    "SOURCE",
    "Bracketed",
    "CmdlineRequests",
    "KernelMemory",
    "parse_affected_cpus",
    "parse_bracketed",
    "parse_cmdline_hugepages_per_node",
    "parse_governor",
    "parse_per_node_requests",
    "parse_sysctl_int",
    "read",
    "read_hugepage_pool",
    "read_incremental",
]
