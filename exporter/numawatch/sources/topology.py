"""CPU and NUMA topology and CPU isolation, from sysfs and the kernel command line.

Files read (every path from ``Paths``):

- ``sys/devices/system/cpu/{present,online,possible}``: CPU lists (Documentation/ABI/testing/sysfs-devices-system-cpu).
  ``possible`` only gives the value of ``N`` in command-line CPU lists. A kernel without ``online`` (before 2.6.26)
  says per CPU in ``cpuN/online`` (``0`` offline; the boot CPU has no such file).
- ``sys/devices/system/cpu/cpuN/topology/{physical_package_id,core_id,thread_siblings_list}`` for online CPUs
  (``core_cpus_list``, ``thread_siblings`` or ``core_cpus`` where a kernel has only those). The kernel removes
  ``topology/`` when a CPU goes offline, so an offline CPU has no socket, core or siblings.
- ``sys/devices/system/node/nodeN/cpulist`` (online CPUs only; ``cpumap`` or the ``cpuM`` links on old kernels),
  ``distance`` (``10 21``), ``meminfo`` (``Node 0 MemTotal:   524288 kB``) and
  ``hugepages/hugepages-<kB>kB/nr_hugepages`` (Documentation/ABI/stable/sysfs-devices-node). A CPU no cpulist names
  (an offline one) gets its node from the ``cpuN/nodeM`` link, which the kernel keeps while the CPU is present.

Values may carry the padding real kernels print (trailing NULs, ``(null)``: hosttext.py). Which files are
essential and which optional is in ``read``'s docstring.
- ``proc/cmdline``: ``isolcpus=``, ``nohz_full=``, ``rcu_nocbs=``, ``irqaffinity=`` and the
  ``default_hugepagesz=`` / ``hugepagesz=`` / ``hugepages=`` pairs (Documentation/admin-guide/kernel-parameters.txt).
- ``sys/devices/system/cpu/{isolated,nohz_full}``: what the kernel says took effect.

A kernel without CONFIG_NUMA has no ``node/`` directory: the machine is then one node, 0, holding every CPU, the
MemTotal of ``proc/meminfo`` and the global huge pages of ``sys/kernel/mm/hugepages``.

The topology changes only on CPU or memory hotplug, a reboot or a huge page reservation, so ``fingerprint`` lets the
host reader skip the ~3 files per CPU (1,150 on a 384-CPU host) while nothing changed; it reads each node's MemTotal
and huge page counts, since the kubelet's Memory Manager checkpoint is judged against them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from numawatch.confined import HostFs
from numawatch.cpuset import EMPTY, CPUListError, CPUSet, parse_cpulist, parse_cpumask
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import excerpt, is_null, shown, strip_value
from numawatch.model import frozen_map
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.paths import Paths
from numawatch.source import SourceSpec

T = TypeVar("T")

# isolcpus= flags the kernel knows (kernel/sched/isolation.c, housekeeping_isolcpus_setup). Without any of them the
# kernel applies "domain"; an unknown alphabetic flag is skipped with a log line, so it is kept here but implies
# nothing.
ISOLCPUS_KNOWN_FLAGS = frozenset({"nohz", "domain", "managed_irq"})

# HPAGE_SIZE on x86-64: the size a hugepages= applies to when neither default_hugepagesz= nor hugepagesz= came
# before it.
DEFAULT_HUGEPAGE_KB = 2048

_FLAG_LIMIT = 32

_SIZE_SUFFIXES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50, "e": 1 << 60}


# --------------------------------------------------------------------------------------------------- parsers
def _apply(path: Path | str, parse: Callable[[str], T], text: str) -> T:
    """Run a text parser, turning its ValueError into MalformedFile naming the file."""
    try:
        return parse(text)
    except ValueError as error:
        raise MalformedFile(path, str(error)) from None


def parse_cmdline(text: str) -> list[tuple[str, str | None]]:
    """Split a kernel command line (``/proc/cmdline``) into ``(name, value)`` pairs in order.

    Follows the kernel's ``next_arg()`` (lib/cmdline.c): parameters are separated by unquoted white space; a double
    quote around the value (``foo="a b"``) or the whole parameter (``"foo=a b"``) keeps spaces; the first ``=``
    splits name from value; a parameter without ``=`` has the value None. Dashes in names equal underscores
    (``parameq()``), so names come back with underscores. A bare ``--`` ends the kernel's part: the rest belongs to
    init. An unterminated quote (a truncated line) runs to the end of the text. Repeated names are all returned;
    see ``last_values`` for the usual "last one wins".
    """
    params: list[tuple[str, str | None]] = []
    length = len(text)
    i = 0
    while i < length:
        while i < length and text[i].isspace():
            i += 1
        if i >= length:
            break
        start = i
        in_quote = False
        while i < length and (in_quote or not text[i].isspace()):
            if text[i] == '"':
                in_quote = not in_quote
            i += 1
        token = text[start:i]
        if token.startswith('"'):
            token = token[1:]
            if token.endswith('"'):
                token = token[:-1]
        name, equals, value = token.partition("=")
        if not equals:
            if name == "--":
                break
            params.append((name.replace("-", "_"), None))
            continue
        if value.startswith('"'):
            value = value[1:]
            if value.endswith('"'):
                value = value[:-1]
        params.append((name.replace("-", "_"), value))
    return params


def last_values(params: Iterable[tuple[str, str | None]]) -> dict[str, str | None]:
    """Name -> value with the last occurrence winning, as the kernel's setup handlers overwrite earlier ones."""
    return dict(params)


def parse_cmdline_cpulist(value: str, last_cpu: int | None = None) -> CPUSet:
    """A CPU list as boot parameters take it: the sysfs format plus ``N`` (the last CPU) and ``all`` (lib/bitmap.c).

    ``last_cpu`` is nr_cpu_ids - 1 (the highest possible CPU); without it ``N`` and ``all`` are errors.
    """
    if last_cpu is not None and ("N" in value or "all" in value):
        elements = []
        for element in value.split(","):
            head, colon, stride = element.strip().partition(":")
            if head == "all":
                head = f"0-{last_cpu}"
            else:
                head = "-".join(str(last_cpu) if bound.strip() == "N" else bound for bound in head.split("-"))
            elements.append(head + colon + stride)
        value = ",".join(elements)
    return parse_cpulist(value)


def parse_isolcpus(value: str, last_cpu: int | None = None) -> tuple[CPUSet, tuple[str, ...]]:
    """``isolcpus=[flag,...,]<cpu-list>`` -> (CPUs, flags), e.g. ``domain,managed_irq,2-5`` -> ({2..5}, flags).

    As in the kernel, leading words starting with a letter are flags and the rest is the CPU list. Flags keep their
    order; "domain" is appended when no known flag was given, because that is what the kernel applies.
    """
    flags: list[str] = []
    rest = value.strip()
    while rest[:1].isalpha():
        flag, comma, rest = rest.partition(",")
        if not all(char.isalpha() or char == "_" for char in flag):
            # The kernel refuses the whole parameter in this case ("isolcpus: Invalid flag").
            raise CPUListError(f"invalid isolcpus flag {excerpt(flag)}")
        if len(flag) > _FLAG_LIMIT:  # flags become a label value; the kernel's own are a few letters
            raise CPUListError(f"isolcpus flag {excerpt(flag)} is longer than {_FLAG_LIMIT} characters")
        if flag not in flags:
            flags.append(flag)
        if not comma:
            rest = ""
    cpus = parse_cmdline_cpulist(rest, last_cpu)
    if not ISOLCPUS_KNOWN_FLAGS.intersection(flags):
        flags.append("domain")
    return cpus, tuple(flags)


def _problem(path: str, parameter: str, error: Exception) -> str:
    """One line naming the file and the parameter (a value whose quote was left open runs to the end of the text,
    newlines included); a parameter that is long or not printable is quoted as an escaped excerpt."""
    return " ".join(f"{path}: {shown(parameter)}: {error}".split())


def parse_size_kb(text: str) -> int:
    """A memparse() size (``2M``, ``1G``, ``2097152``) as kB, the unit sysfs names huge page sizes in."""
    stripped = text.strip()
    number, multiplier = stripped, 1
    if stripped[-1:].lower() in _SIZE_SUFFIXES:
        number, multiplier = stripped[:-1], _SIZE_SUFFIXES[stripped[-1].lower()]
    if not number.isascii() or not number.isdigit():
        raise ValueError(f"bad size {excerpt(text)}")
    size = int(number) * multiplier
    if size <= 0 or size % 1024:
        raise ValueError(f"size {excerpt(text)} is not a positive multiple of 1 kB")
    return size // 1024


def parse_hugepages_count(text: str) -> int:
    """``hugepages=`` value: a count, or the per-node form ``0:4,1:4`` (kernel >= 5.15), summed to a total."""
    total = 0
    for element in text.split(","):
        node, colon, count = element.strip().rpartition(":")
        if not _is_decimal(count) or (colon and not _is_decimal(node)):
            raise ValueError(f"bad huge page count {excerpt(text)}")
        total += int(count)
    return total


def _is_decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def hugepage_requests(
    params: Iterable[tuple[str, str | None]], bad: Callable[[str, str | None, ValueError], None] | None = None
) -> Iterator[tuple[int, str]]:
    """(size in kB, ``hugepages=`` value) for every ``hugepages=`` the kernel applies, in command-line order.

    ``hugepages=`` applies to the ``hugepagesz=`` before it; one before any ``hugepagesz=`` applies to
    ``default_hugepagesz=`` (wherever that appears on the line), else to 2048 kB (x86); one after an invalid
    ``hugepagesz=`` is ignored, as the kernel ignores it. Invalid sizes go to ``bad`` (when given), else are skipped.
    The one walk both the totals (here) and the per-node requests (the kernel source) are read with.
    """
    params = list(params)
    default_kb = DEFAULT_HUGEPAGE_KB
    for name, value in params:
        if name == "default_hugepagesz":
            try:
                default_kb = parse_size_kb(value or "")
            except ValueError as error:
                if bad is not None:
                    bad(name, value, error)
    current_kb: int | None = None
    current_valid = True
    for name, value in params:
        if name == "hugepagesz":
            try:
                current_kb, current_valid = parse_size_kb(value or ""), True
            except ValueError as error:
                current_valid = False
                if bad is not None:
                    bad(name, value, error)
        elif name == "hugepages" and current_valid:
            yield (current_kb if current_kb is not None else default_kb), value or ""


def parse_cmdline_hugepages(
    params: Iterable[tuple[str, str | None]], problems: list[str] | None = None, path: str = "cmdline"
) -> dict[int, int]:
    """Huge page reservations asked on the command line: size in kB -> pages (see ``hugepage_requests``).

    A later ``hugepages=`` for the same size wins. Bad values are reported into ``problems`` (when given) and
    skipped, as the kernel skips them; without ``problems`` they raise ValueError.
    """

    def bad(name: str, value: str | None, error: ValueError) -> None:
        if problems is None:
            raise error
        problems.append(_problem(path, f"{name}={value}", error))

    result: dict[int, int] = {}
    for size_kb, value in hugepage_requests(params, bad):
        try:
            result[size_kb] = parse_hugepages_count(value)
        except ValueError as error:
            bad("hugepages", value, error)
    return result


def parse_isolation(
    cmdline: str,
    *,
    last_cpu: int | None = None,
    sys_isolated: CPUSet | None = None,
    sys_nohz_full: CPUSet | None = None,
    path: str = "cmdline",
) -> IsolationParams:
    """The isolation-related parameters of a kernel command line.

    A parameter whose value the kernel would reject (bad CPU list) is left as None and described in
    ``problems`` (naming ``path``), so one typo does not hide the rest of the topology. A bare parameter
    (``rcu_nocbs`` without ``=``, accepted by newer kernels) is an empty set: given, but naming no CPU.
    """
    params = parse_cmdline(cmdline)
    values = last_values(params)
    problems: list[str] = []

    def cpus_of(name: str) -> CPUSet | None:
        if name not in values:
            return None
        value = values[name]
        try:
            return parse_cmdline_cpulist(value or "", last_cpu)
        except CPUListError as error:
            problems.append(_problem(path, f"{name}={value}", error))
            return None

    isolcpus: CPUSet | None = None
    flags: tuple[str, ...] = ()
    if "isolcpus" in values:
        value = values["isolcpus"]
        try:
            isolcpus, flags = parse_isolcpus(value or "", last_cpu)
        except CPUListError as error:
            problems.append(_problem(path, f"isolcpus={value}", error))
    nohz_full = cpus_of("nohz_full")
    rcu_nocbs = cpus_of("rcu_nocbs")
    irqaffinity = cpus_of("irqaffinity")
    hugepages = parse_cmdline_hugepages(params, problems, path)
    return IsolationParams(
        cmdline=cmdline.strip(),
        isolcpus=isolcpus,
        isolcpus_flags=flags,
        nohz_full=nohz_full,
        rcu_nocbs=rcu_nocbs,
        irqaffinity=irqaffinity,
        sys_isolated=sys_isolated,
        sys_nohz_full=sys_nohz_full,
        cmdline_hugepages=frozen_map(hugepages),
        problems=tuple(problems),
    )


def parse_sys_cpulist(text: str) -> CPUSet:
    """``cpu/isolated`` or ``cpu/nohz_full``: a CPU list, or nothing when none (hosttext.py: ``(null)``, the
    printk of a never-allocated mask on Debian's 6.1, and ``\\0\\n`` on RHEL/CentOS 7 when the parameter was not
    given)."""
    if is_null(text):
        return EMPTY
    return parse_cpulist(text)


def parse_meminfo_total(text: str) -> int:
    """MemTotal in bytes from ``nodeN/meminfo`` (``Node 0 MemTotal:   524288 kB``) or ``/proc/meminfo``."""
    for line in strip_value(text).splitlines():
        name, colon, rest = line.partition(":")
        if not colon or not name.endswith("MemTotal"):
            continue
        fields = rest.split()
        if not fields or not fields[0].isascii() or not fields[0].isdigit():
            raise ValueError(f"bad MemTotal line {excerpt(line.strip())}")
        unit = fields[1] if len(fields) > 1 else ""
        if unit not in ("kB", ""):
            raise ValueError(f"unexpected unit {excerpt(unit)} in MemTotal line")
        return int(fields[0]) * (1024 if unit == "kB" else 1)
    raise ValueError("no MemTotal line")


def parse_distance(text: str) -> tuple[int, ...]:
    """``nodeN/distance``: one distance per online node, in node order (``10 21``)."""
    fields = strip_value(text).split()
    if not fields or not all(field.isascii() and field.isdigit() for field in fields):
        raise ValueError(f"expected decimal distances, got {text.strip()[:60]!r}")
    return tuple(int(field) for field in fields)


def parse_int_attribute(text: str) -> int:
    stripped = strip_value(text)
    try:
        return int(stripped)
    except ValueError:
        raise ValueError(f"expected an integer, got {stripped[:60]!r}") from None


def hugepage_size_kb(dirname: str) -> int | None:
    """``hugepages-2048kB`` -> 2048; None for anything else."""
    if dirname.startswith("hugepages-") and dirname.endswith("kB"):
        number = dirname[len("hugepages-") : -2]
        if number.isascii() and number.isdigit() and len(number) <= 20:  # int() refuses 4,300 digits
            return int(number)
    return None


def _numbered(names: Iterable[str], prefix: str) -> list[int]:
    """``cpu12``/``node3`` entries -> sorted numbers, ignoring ``cpufreq``, ``online`` and the like."""
    numbers = []
    for name in names:
        suffix = name[len(prefix) :]
        if name.startswith(prefix) and suffix.isascii() and suffix.isdigit():
            numbers.append(int(suffix))
    return sorted(numbers)


# --------------------------------------------------------------------------------------------------- readers
def _essential(fs: HostFs, path: Path, parse: Callable[[str], T]) -> T | None:
    """An essential file's value, None when it does not exist; malformed, it takes the source down (MalformedFile)."""
    text = fs.read_optional_text(path, 1 << 20)
    return None if text is None else _apply(path, parse, text)


def _optional(fs: HostFs, path: Path, parse: Callable[[str], T], problems: dict[str, str], key: str) -> T | None:
    """An optional file's value, None when it does not exist or is malformed; the first malformed file of each
    ``key`` is described in ``problems`` so that only what depends on it is not evaluated."""
    text = fs.read_optional_text(path, 1 << 20)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as error:
        problems.setdefault(key, str(MalformedFile(path, str(error))))
        return None


def _read_hugepages(fs: HostFs, directory: Path, problems: dict[str, str]) -> dict[int, int]:
    """``<dir>/hugepages-<kB>kB/nr_hugepages`` for every size -> {kB: pages}."""
    pages: dict[int, int] = {}
    for name in fs.list_dir(directory):
        size = hugepage_size_kb(name)
        if size is None:
            continue
        count = _optional(fs, directory / name / "nr_hugepages", parse_int_attribute, problems, "hugepages")
        if count is not None:
            pages[size] = count
    return pages


def _listed_cpus(fs: HostFs, directory: Path) -> CPUSet:
    """The CPUs a node directory names: ``cpulist``, else the ``cpumap`` mask (kernels before 2.6.26 have no
    cpulist), else its ``cpuM`` links (the oldest kernels have neither file). Essential: a malformed one raises."""
    cpus = _essential(fs, directory / "cpulist", parse_cpulist)
    if cpus is None:
        cpus = _essential(fs, directory / "cpumap", parse_cpumask)
    if cpus is None:
        cpus = frozenset(_numbered(fs.list_dir(directory), "cpu"))
    return cpus


def _lists_cpus(fs: HostFs, directory: Path) -> bool:
    """Whether a node directory says its CPUs at all: a CPU-less node still has an empty ``cpulist`` (or ``cpumap``);
    one with none of them (a partial capture) has CPUs nobody can tell."""
    names = fs.list_dir(directory)
    return "cpulist" in names or "cpumap" in names or bool(_numbered(names, "cpu"))


def _read_nodes(paths: Paths, online: CPUSet, problems: dict[str, str]) -> tuple[dict[int, NumaNode], bool]:
    """The NUMA nodes, and whether the kernel has any (False: no ``node/`` directory, one synthetic node 0).

    Each online CPU belongs to the lowest node whose list names it. Firmware with a broken SRAT can make several
    nodes claim the same CPUs; hwloc then keeps the CPU in the first node, and so does numawatch (the node's
    ``listed_cpus`` keeps what the file said, for the numa_topology_inconsistent check).
    """
    fs = paths.fs
    node_dir = paths.sysfs / "devices/system/node"
    node_ids = _numbered(fs.list_dir(node_dir), "node")
    if not node_ids:
        # CONFIG_NUMA=n (or a capture without node/): one node with everything, as the kernel then behaves.
        node = NumaNode(
            id=0,
            cpus=online,
            distances=(10,),
            mem_total_bytes=_optional(fs, paths.procfs / "meminfo", parse_meminfo_total, problems, "meminfo"),
            hugepages_total=frozen_map(_read_hugepages(fs, paths.sysfs / "kernel/mm/hugepages", problems)),
        )
        return {0: node}, False
    owner: dict[int, int] = {}
    listed: dict[int, CPUSet] = {}
    for node_id in node_ids:
        # Old kernels' cpumap names offline CPUs too; the node's CPUs are its online ones, as cpulist says today.
        listed[node_id] = _listed_cpus(fs, node_dir / f"node{node_id}") & online
        if not listed[node_id] and not _lists_cpus(fs, node_dir / f"node{node_id}"):
            problems.setdefault("cpulist", f"{node_dir / f'node{node_id}' / 'cpulist'}: missing")
        for cpu in listed[node_id]:
            owner.setdefault(cpu, node_id)
    nodes: dict[int, NumaNode] = {}
    for node_id in node_ids:
        directory = node_dir / f"node{node_id}"
        cpus = frozenset(cpu for cpu in listed[node_id] if owner[cpu] == node_id)
        distances = _optional(fs, directory / "distance", parse_distance, problems, "distance")
        if distances is None:
            # Every NUMA kernel writes the file; without it the table is unknown, not empty.
            problems.setdefault("distance", f"{directory / 'distance'}: missing")
        nodes[node_id] = NumaNode(
            id=node_id,
            cpus=cpus,
            distances=distances or (),
            mem_total_bytes=_optional(fs, directory / "meminfo", parse_meminfo_total, problems, "meminfo"),
            hugepages_total=frozen_map(_read_hugepages(fs, directory / "hugepages", problems)),
            listed_cpus=None if cpus == listed[node_id] else listed[node_id],
        )
    return nodes, True


def _node_from_link(fs: HostFs, cpu_dir: Path) -> int | None:
    """The node of a CPU from its ``cpuN/nodeM`` link (offline CPUs keep it; their node's cpulist drops them)."""
    numbers = _numbered(fs.list_dir(cpu_dir), "node")
    return numbers[0] if numbers else None


def _read_cpu(fs: HostFs, cpu_dir: Path, cpu: int, online: bool, node: int | None, problems: dict[str, str]) -> Cpu:
    if not online:
        return Cpu(id=cpu, online=False, socket=None, core=None, numa_node=node)
    topology = cpu_dir / "topology"
    # A CPU that goes offline during the scan loses topology/: its fields are then unknown, not an error.
    socket = _optional(fs, topology / "physical_package_id", parse_int_attribute, problems, "cpu_topology")
    core = _optional(fs, topology / "core_id", parse_int_attribute, problems, "cpu_topology")
    siblings = _read_siblings(fs, topology, problems)
    return Cpu(
        id=cpu,
        online=True,
        socket=socket if socket is not None and socket >= 0 else None,  # -1: the architecture does not know
        core=core if core is not None and core >= 0 else None,
        numa_node=node,
        siblings=siblings or EMPTY,
    )


# The SMT siblings of a CPU, in the order kernels offer them: the list and, since 5.7, its new name core_cpus_list;
# before 2.6.32 only the masks. The first file present is the one read (a malformed one is not replaced by another).
_SIBLING_FILES = (
    ("thread_siblings_list", parse_cpulist),
    ("core_cpus_list", parse_cpulist),
    ("thread_siblings", parse_cpumask),
    ("core_cpus", parse_cpumask),
)


def _read_siblings(fs: HostFs, topology: Path, problems: dict[str, str]) -> CPUSet | None:
    for name, parse in _SIBLING_FILES:
        text = fs.read_optional_text(topology / name, 1 << 20)
        if text is None:
            continue
        try:
            return parse(text)
        except ValueError as error:
            problems.setdefault("cpu_topology", str(MalformedFile(topology / name, str(error))))
            return None
    return None


def _online_without_list(fs: HostFs, cpu_root: Path, present: CPUSet, problems: dict[str, str]) -> CPUSet:
    """Online CPUs of a kernel without ``cpu/online``: each CPU's ``cpuN/online`` (the boot CPU has none)."""
    online = set()
    for cpu in present:
        flag = _optional(fs, cpu_root / f"cpu{cpu}/online", parse_int_attribute, problems, "present")
        if flag != 0:
            online.add(cpu)
    return frozenset(online)


def _read_cmdline(fs: HostFs, path: Path, problems: dict[str, str]) -> str:
    """``proc/cmdline``, or "" with the reason in ``problems["cmdline"]`` when it is missing or cannot be read (a
    partial capture, a link loop): the CPU map does not depend on it, only the checks of its parameters do."""
    try:
        text = fs.read_optional_text(path, 1 << 20)
    except (OSError, MalformedFile) as error:
        problems["cmdline"] = str(error) if isinstance(error, MalformedFile) else f"{path}: {error.strerror or error}"
        return ""
    if text is None:
        problems["cmdline"] = f"{path}: missing"
        return ""
    return text


def read(paths: Paths) -> Topology:
    """Read the CPU/NUMA topology and isolation parameters of the host under ``paths``.

    Essential (malformed: the source is down, naming the file): ``cpu/online`` and each node's CPU list, since
    every CPU-to-node judgement rests on them. Everything else is optional: malformed, its value is unknown and the
    reason is kept in ``Topology.problems`` under its key (model.TOPOLOGY_OPTIONAL_FILES), so only the checks that
    use it are not evaluated: ``present`` and ``possible`` (and the per-CPU ``online`` flags of kernels without
    ``cpu/online``), ``cpu_topology`` (socket, core, siblings), ``distance``, ``meminfo``, ``hugepages``,
    ``isolated`` and ``nohz_full``; a missing ``distance`` and a node that names its CPUs nowhere (``cpulist``) are
    unknown the same way, and so is a missing or unreadable ``proc/cmdline`` (``cmdline``: its parameters are then
    unknown, the CPU map is not). Command-line values the kernel would reject are in ``isolation.problems``.
    """
    fs = paths.fs
    cpu_root = paths.sysfs / "devices/system/cpu"
    if not fs.is_dir(cpu_root):
        raise SourceUnavailable(f"{cpu_root} does not exist")
    problems: dict[str, str] = {}
    present = _optional(fs, cpu_root / "present", parse_cpulist, problems, "present")
    if present is None:
        present = frozenset(_numbered(fs.list_dir(cpu_root), "cpu"))
    online = _essential(fs, cpu_root / "online", parse_cpulist)
    if online is None:  # very old or stripped sysfs
        online = _online_without_list(fs, cpu_root, present, problems)
    # cpu/offline names the present CPUs that are not online; where it and cpu/online (or the per-CPU flags)
    # disagree, a CPU it lists is not counted online.
    offline = _optional(fs, cpu_root / "offline", parse_sys_cpulist, problems, "present")
    if offline:
        online = online - offline
    possible = _optional(fs, cpu_root / "possible", parse_cpulist, problems, "possible")

    nodes, numa = _read_nodes(paths, online, problems)
    node_of: dict[int, int] = {}
    for node in nodes.values():
        for cpu in node.cpus:
            node_of[cpu] = node.id

    cpus: dict[int, Cpu] = {}
    for cpu in sorted(present | online):
        cpu_dir = cpu_root / f"cpu{cpu}"
        node_id = node_of.get(cpu) if numa else 0
        if node_id is None and cpu not in online:
            # Only for offline CPUs: an online CPU that no node lists (a node the kernel left offline, firmware
            # that forgot it) has no node, as hwloc says too; numa_topology_inconsistent reports it.
            node_id = _node_from_link(fs, cpu_dir)
        cpus[cpu] = _read_cpu(fs, cpu_dir, cpu, cpu in online, node_id, problems)

    every = possible or present | online
    last_cpu = max(every) if every else None
    cmdline_path = paths.procfs / "cmdline"
    isolation = parse_isolation(
        _read_cmdline(fs, cmdline_path, problems),
        last_cpu=last_cpu,
        sys_isolated=_optional(fs, cpu_root / "isolated", parse_sys_cpulist, problems, "isolated"),
        sys_nohz_full=_optional(fs, cpu_root / "nohz_full", parse_sys_cpulist, problems, "nohz_full"),
        path=str(cmdline_path),
    )
    return Topology(
        cpus=frozen_map(cpus),
        online=online,
        nodes=frozen_map(nodes),
        isolation=isolation,
        problems=frozen_map(problems),
        numa=numa,
    )


def _mem_total_line(fs: HostFs, path: str) -> bytes | None:
    """The ``MemTotal`` line of a meminfo file as it is (None without the file): its other lines move all the time."""
    data = fs.read_small(path, 1 << 16)
    if data is None:
        return None
    start = data.find(b"MemTotal:")
    if start < 0:
        return b""  # no MemTotal line: the reading says so, and reading it again would say the same
    end = data.find(b"\n", start)
    return data[start : end if end >= 0 else len(data)]


def _node_memory(fs: HostFs, sysfs: str, procfs: str, sizes: list[str]) -> tuple[object, ...]:
    """What the Memory Manager's machine state is compared with, per node: its MemTotal (memory taken offline or
    added, a balloon) and its huge pages per size (``sizes``: the ``hugepages-<kB>kB`` names; pages moved from one
    node to another leave the global count as it was). A kernel without nodes: ``proc/meminfo``'s MemTotal. With
    each node its ``cpulist``: the kernel takes a CPU going offline out of ``cpu/online`` before it takes it out of
    its node's list (and puts one coming back in its node's list first), so a reading between the two must not
    stand once the second is written."""
    node_dir = f"{sysfs}/devices/system/node"
    nodes = _numbered(fs.list_dir(node_dir), "node")
    if not nodes:
        return (_mem_total_line(fs, f"{procfs}/meminfo"),)
    return tuple(
        (
            _mem_total_line(fs, f"{node_dir}/node{node}/meminfo"),
            tuple(fs.read_small(f"{node_dir}/node{node}/hugepages/{size}/nr_hugepages", 1 << 16) for size in sizes),
            fs.read_small(f"{node_dir}/node{node}/cpulist", 1 << 16),
        )
        for node in nodes
    )


def fingerprint(paths: Paths) -> tuple[object, ...]:
    """Raw bytes of the few files whose change means the topology must be read again: cpu/online (hotplug),
    node/online, proc/cmdline, the global ``nr_hugepages`` per size (a reservation on any node changes it) and each
    node's memory (``_node_memory``).

    Raises when ``cpu/online`` cannot be read, so the reader reads for real and reports why.
    """
    fs = paths.fs
    sysfs = os.fspath(paths.sysfs)  # strings, not pathlib: this runs at every reading
    procfs = os.fspath(paths.procfs)
    online = fs.read_file(f"{sysfs}/devices/system/cpu/online", 1 << 16)
    hugepages_dir = f"{sysfs}/kernel/mm/hugepages"
    sizes = sorted(fs.list_dir(hugepages_dir))
    hugepages = tuple((name, fs.read_small(f"{hugepages_dir}/{name}/nr_hugepages", 1 << 16)) for name in sizes)
    return (
        online,
        fs.read_small(f"{sysfs}/devices/system/node/online", 1 << 16),
        fs.read_small(f"{procfs}/cmdline", 1 << 16),
        hugepages,
        _node_memory(fs, sysfs, procfs, sizes),
    )


SOURCE = SourceSpec(
    name="topology",
    read=read,
    fingerprint=fingerprint,
    description="CPUs, NUMA nodes, SMT siblings and CPU isolation (sysfs, /proc/cmdline)",
)

__all__ = [
    "SOURCE",
    "fingerprint",
    "hugepage_size_kb",
    "last_values",
    "parse_cmdline",
    "parse_cmdline_cpulist",
    "parse_cmdline_hugepages",
    "parse_distance",
    "parse_hugepages_count",
    "parse_isolation",
    "parse_isolcpus",
    "parse_meminfo_total",
    "parse_size_kb",
    "parse_sys_cpulist",
    "read",
]
