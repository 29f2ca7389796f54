"""Move a generated host's counters between evaluations, as ~15 s on a busy, well-configured inference node would.

    .venv/bin/python bench/churn.py --root /tmp/host384 --every 1.0            # until SIGTERM / Ctrl-C
    .venv/bin/python bench/churn.py --root /tmp/host384 --every 0 --count 20   # 20 advances back to back, timed

Why: a tree written by bench/generate_host.py never changes, so anything numawatch reuses when its inputs did not
change (rows of /proc/interrupts, container snapshots) would be reused at every evaluation, which flatters it next
to node_exporter. ``Churn(root)`` reads the tree once; each ``advance()`` then moves it on by one evaluation interval
(``seconds`` of the node: 15 by default, serve's interval on a node; bench/run.py ``--churn`` advances by its own
serve interval, 1 s, every second, so that the rates numawatch works out over its window are a node's) in place.
What one advance changes, values only (the set of files and of lines, and every line's layout, stay as they are):

1. ``proc/interrupts``, patched in place in a kept copy: every cell keeps its 11 bytes (`` %10u``), so a reader's
   fixed-width fast path still applies and no line changes length. Counts are 32-bit in the kernel: a cell stops
   growing at 2^32-1 rather than wrap (an advance never makes a count smaller) or widen, and a cell already wider
   than 10 digits (an irregular line: numawatch parses it the slow way) is left exactly as it is.

   - architecture rows LOC, RES, CAL, TLB, IWI, NMI, PMI and MCP grow on every CPU, housekeeping CPUs by more
     (rates per second in ``ARCH_RATES``): LOC 250-1000 on housekeeping (HZ=1000, less when idle) and 1-1.2 on
     isolated CPUs (nohz_full's residual 1 Hz tick); IPIs land everywhere, isolated CPUs only now and then. Each
     of these cells grows by at least 1 per advance, so every cell of these rows moves: NMI, PMI and MCP thereby
     count more often than on a real node (watchdog every 10 s, machine-check poll every 5 min), which changes no
     reader's work. Rows that count nothing (SPU, RTR, TRM, THR, DFR, MCE) and ERR/MIS stay as they are.
   - device rows grow on their current target CPU only (the first CPU of ``proc/irq/<n>/effective_affinity_list``,
     else of ``smp_affinity_list``: housekeeping CPUs on this node): every NIC vector (``mlx5_*``: inference
     traffic; 200-5,000/s with adaptive moderation, the async vector a few), every GPU vector (``nvidia``,
     100-2,000/s) and a random quarter of the NVMe queues (5-500/s). The legacy IO-APIC lines (timer, rtc0,
     acpi) and unknown devices do not move. A vector whose affinity names an isolated CPU (the generator's planted
     ``irq_on_isolated_cpu``) counts there, as it would on a real node.
   - ``stray`` (0 by default: the benchmark node is the well-configured reference node): the fraction of device
     rows that also get 1-5 counts on a random isolated CPU at each advance (misrouted interrupts).

   The file is written to a temporary name in the same directory and renamed over the old one (``os.replace``),
   so a reader sees either reading whole, never half of one.
2. Every container's ``memory.numa_stat`` (cgroup v2 ``anon N0=<bytes> N1=<bytes>``, ``file ...`` and the other
   keys; v1 ``total=<pages> N0=...`` with each line's total kept the sum of its nodes): every non-zero value is its
   starting value (as ``Churn`` read it) +-3 %, drawn anew at each advance: it moves, and stays put over long runs,
   so the planted remote-memory pod stays remote and no check's verdict flips; zeros stay zero.
3. The node-wide counters node_exporter's cpu, meminfo_numa and vmstat collectors read (numawatch reads numastat):

   - ``proc/stat``: every ``cpuN`` line gains ``USER_HZ x seconds`` ticks, split like its own totals so far (busy
     pinned CPUs stay busy), and the ``cpu`` line is their sum; ``intr`` gains exactly what /proc/interrupts gained
     (per IRQ number, and in its total with the architecture rows); ``ctxt``, ``processes`` and ``softirq`` (total
     and vectors) grow at their average rate since boot (their value over the generator's 41-day uptime); btime,
     procs_running and procs_blocked stay.
   - ``sys/devices/system/node/nodeN/numastat``: each counter grows at its average rate since boot, kept
     consistent as the kernel counts them (local_node + other_node = numa_hit + numa_miss; a node's numa_foreign
     grows with the other node's numa_miss).
   - ``proc/vmstat``: numa_hit, numa_miss, numa_foreign, numa_interleave, numa_local and numa_other grow by the
     nodes' numastat growth; every other non-zero event counter (pg*, thp_*, compact_*...) at its average rate since
     boot; the gauges that follow nodeN/meminfo (nr_free_pages, nr_file_pages, nr_(zone_)inactive_file, nr_dirty,
     nr_zone_write_pending) follow it; zeros (swap, KSM...) and the NUMA-balancing counters (numa_balancing is 0)
     stay.
   - ``nodeN/meminfo`` and ``proc/meminfo``: MemFree moves within +-0.5 % of its starting value (MemUsed follows,
     the page cache -- FilePages, Inactive(file), Inactive, Cached -- gives or takes the difference, MemAvailable
     follows MemFree) and Dirty within 50-150 % of its own; /proc/meminfo's MemFree moves by the nodes' sum.
     Numbers are printed right-aligned in the same span (the kernel's ``%8lu``), so lines keep their lengths.
   - ``cpufreq/policyN/scaling_cur_freq`` where the tree has it: its starting value +-5 %, within the policy's
     scaling_min_freq..scaling_max_freq (numawatch never opens this file; node_exporter does).
4. Pods only when asked (``--pods N``, ``--pinned-every K``; bench/pod_churn.py says what changes): N
   Burstable/BestEffort pods replaced per advance, a pinned pod (and with it the kubelet's ``cpu_manager_state`` and
   ``memory_manager_state``) every K advances; the new containers' ``memory.numa_stat`` then move like the others.
   Otherwise nothing about pods, cpusets, ``cgroup.procs``, processes (``proc/<pid>/*``), IRQ affinity, topology or
   the kubelet's files changes: those are stable on a running node.

Writing. /proc/interrupts is renamed into place (above). The ~1,250 small files (860 memory.numa_stat, 384
scaling_cur_freq...) are written over in place when the new text has the old one's layout (digits changed in place,
the usual case), because a rename costs ~250 us on ext4 against ~20 us: a reader racing that write may get a number
made of old and new digits, in the right layout (the kernel's own files are no snapshot either), never a short or
misaligned file; any other change is renamed into place.

Rates since boot use the generator's notional uptime (``node_exporter_files.UPTIME_S``, 41 days). The same seed gives
the same sequence of trees. One advance of the 384-CPU tree rewrites 1,252 files (8.7 MB of them /proc/interrupts,
5,000 of its cells) in 50-70 ms of wall time on the 2-vCPU benchmark machine (~70 ms of CPU, half of it the
kernel's); reading the tree first takes ~0.5 s.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import re
import signal
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))

import node_exporter_files as nefiles  # noqa: E402
from numawatch.cpuset import CPUListError, parse_cpulist  # noqa: E402
from numawatch.paths import Paths  # noqa: E402
from numawatch.sources.topology import parse_isolation  # noqa: E402

DEFAULT_SECONDS = 15.0  # one evaluation interval of numawatch serve on a node
U32_MAX = (1 << 32) - 1  # the kernel's per-CPU interrupt counts are unsigned int
CELL = 11  # bytes per /proc/interrupts count: " %10u" (or "%10u " on old kernels)
FIELD = 10  # the %10u part of a cell, which is what gets rewritten

# Architecture rows: (housekeeping low, high, isolated low, high) in interrupts per second on every CPU.
ARCH_RATES: dict[str, tuple[float, float, float, float]] = {
    "LOC": (250.0, 1000.0, 1.0, 1.2),  # HZ=1000 on busy housekeeping CPUs; nohz_full's residual 1 Hz tick
    "RES": (20.0, 200.0, 0.1, 0.5),  # rescheduling IPIs
    "CAL": (10.0, 100.0, 0.05, 0.2),  # function-call IPIs
    "TLB": (5.0, 50.0, 0.05, 0.2),  # shootdowns: the pinned workloads rarely unmap
    "IWI": (1.0, 20.0, 0.02, 0.1),  # irq_work
    "NMI": (0.1, 0.2, 0.0, 0.0),  # perf NMI watchdog (off on nohz_full CPUs): the 1-per-advance floor applies
    "PMI": (0.1, 0.2, 0.0, 0.0),
    "MCP": (0.0, 0.0, 0.0, 0.0),  # machine-check polls every 5 min: only the floor
}
# Device vectors, interrupts per second on their target CPU.
NIC_RATE = (200.0, 5000.0)  # mlx5 completion vectors with adaptive moderation, inference traffic on every rail
NIC_ASYNC_RATE = (0.0, 0.2)  # mlx5_async: firmware events
GPU_RATE = (100.0, 2000.0)  # nvidia: one vector per GPU
NVME_RATE = (5.0, 500.0)  # an NVMe queue that saw I/O in this interval
NVME_BUSY_SHARE = 0.25  # the share of NVMe queues that see I/O in one interval
STRAY_COUNTS = (1, 5)  # a misrouted vector's counts on an isolated CPU per interval

NUMA_STAT_DRIFT = 0.03
MEMFREE_DRIFT = 0.005
DIRTY_RANGE = (0.5, 1.5)
CUR_FREQ_DRIFT = 0.05

# nodeN/numastat fields and the /proc/vmstat keys that sum them.
NUMASTAT_TO_VMSTAT = {
    "numa_hit": "numa_hit",
    "numa_miss": "numa_miss",
    "numa_foreign": "numa_foreign",
    "interleave_hit": "numa_interleave",
    "local_node": "numa_local",
    "other_node": "numa_other",
}
# /proc/vmstat gauges (pages) that nodeN/meminfo fields (kB) give, as generate_host derives them.
VMSTAT_FROM_MEMINFO = {"nr_free_pages": "MemFree", "nr_file_pages": "FilePages", "nr_inactive_file": "Inactive(file)",
                       "nr_zone_inactive_file": "Inactive(file)", "nr_dirty": "Dirty",
                       "nr_zone_write_pending": "Dirty"}  # fmt: skip
# With kernel.numa_balancing 0 these do not count.
VMSTAT_FROZEN = frozenset({"numa_pte_updates", "numa_huge_pte_updates", "numa_hint_faults", "numa_hint_faults_local",
                           "numa_pages_migrated"})  # fmt: skip


class ChurnError(ValueError):
    """A file of the tree is not in the layout churn patches: ``<path>: <what>``."""

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        super().__init__(f"{os.fspath(path)}: {what}")


@dataclass(frozen=True)
class Step:
    """What one ``advance()`` did."""

    files: int  # files rewritten
    cells: int  # /proc/interrupts counts that grew
    seconds: float  # wall time of the advance


# --------------------------------------------------------------------------------------------------- helpers
def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _text(path: str) -> str | None:
    data = _read(path)
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ChurnError(path, "not UTF-8 text") from None


def _replace(path: str, data: bytes | bytearray) -> None:
    """Write ``data`` to a temporary name beside ``path``, then rename it over ``path``: a reader opens either the
    old file or the new one, never a half-written one. The file keeps its permission bits."""
    directory, name = os.path.split(path)
    temporary = f"{directory}/.{name}.churn{os.getpid()}"
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.chmod(temporary, mode)  # the umask narrowed what os.open asked for
    os.replace(temporary, path)


_SKELETON = bytes.maketrans(b"123456789", b"000000000")


def _rewrite(path: str, old: bytes, new: bytes) -> bytes:
    """Write a small file's new text; returns it (the next call's ``old``).

    Where the new text has the old one's layout (the same bytes but for digits at the same places: the usual case,
    as a number rarely gains a digit) it is written over the old one in place, which costs a tenth of a rename on
    ext4 (~20 us instead of ~250 us; 1,250 files per advance at 384 CPUs). A reader racing that write sees each
    number made of old and new digits, in the right layout, as the kernel's own files give no snapshot either;
    it never sees a short or misaligned file. Any other change goes through ``_replace``."""
    if len(new) == len(old) and new.translate(_SKELETON) == old.translate(_SKELETON):
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.pwrite(fd, new, 0)
        finally:
            os.close(fd)
    else:
        _replace(path, new)
    return new


def _events(rng: random.Random, total: int, seconds: float) -> int:
    """Events in ``seconds`` for a counter at ``total`` after the tree's uptime: its average rate, +-50 %, rounded
    at random so that slow counters still move now and then."""
    expected = total / nefiles.UPTIME_S * seconds * rng.uniform(0.5, 1.5)
    return int(expected + rng.random())


def _at_least_one(rng: random.Random, low: float, high: float, seconds: float) -> int:
    return max(1, int(rng.uniform(low, high) * seconds + rng.random()))


def isolated_cpus(paths: Paths) -> frozenset[int]:
    """The isolated CPUs: ``cpu/isolated`` and ``cpu/nohz_full``, else ``isolcpus=``/``nohz_full=`` of the command
    line."""
    cpus: set[int] = set()
    for name in ("isolated", "nohz_full"):
        text = _text(f"{paths.sysfs}/devices/system/cpu/{name}")
        if text is None or text.strip() == "(null)":
            continue
        try:
            cpus |= parse_cpulist(text)
        except CPUListError as error:
            raise ChurnError(f"{paths.sysfs}/devices/system/cpu/{name}", str(error)) from None
    if not cpus:
        isolation = parse_isolation(_text(f"{paths.procfs}/cmdline") or "")
        cpus |= (isolation.isolcpus or frozenset()) | (isolation.nohz_full or frozenset())
    return frozenset(cpus)


# --------------------------------------------------------------------------------------------------- /proc/interrupts
@dataclass(frozen=True)
class IrqRow:
    """One row of /proc/interrupts as churn patches it.

    ``base`` is the offset just after the row's ``:`` in the file; ``ends`` None means the regular layout (count
    ``i`` ends at ``base + 11 * (i + 1)``), else each count's end offset, None for a cell left alone (wider than
    10 digits)."""

    key: str
    name: str  # device rows: the action name; named rows: the description
    base: int
    ends: tuple[int | None, ...] | None = None

    def end(self, column: int) -> int | None:
        return self.base + CELL * (column + 1) if self.ends is None else self.ends[column]


_COUNT = re.compile(rb"\S+")


def parse_interrupt_cells(
    data: bytes | bytearray, path: str = "/proc/interrupts"
) -> tuple[tuple[int, ...], list[IrqRow]]:
    """/proc/interrupts -> (the CPUs of the header's columns, the rows with one count per CPU).

    Rows with one count per CPU: device rows (``%*d:``) and the architecture rows (``LOC:``...); ERR/MIS (one global
    count) are left out. Every cell of a regular row is 11 bytes; a row with a count wider than 10 digits gets each
    count's end offset, and ChurnError names the file and the row when a row is not counts then names."""
    first = data.find(b"\n")
    if first < 0:
        raise ChurnError(path, "no header line")
    cpus = []
    for token in bytes(data[:first]).split():
        if not token.startswith(b"CPU") or not token[3:].isdigit():
            raise ChurnError(path, f"bad header column {token[:20]!r} (expected CPU<n>)")
        cpus.append(int(token[3:]))
    if not cpus:
        raise ChurnError(path, "empty header")
    ncols = len(cpus)
    span = CELL * ncols
    rows: list[IrqRow] = []
    pos = first + 1
    size = len(data)
    while pos < size:
        eol = data.find(b"\n", pos)
        if eol < 0:
            eol = size
        line = bytes(data[pos:eol])
        colon = line.find(b":")
        if colon < 0:
            if line.strip():
                raise ChurnError(path, f"line without ':': {line.strip()[:60]!r}")
            pos = eol + 1
            continue
        key = line[:colon].strip().decode(errors="replace")
        fields = line[colon + 1 :]
        tokens = fields.split(None, ncols)
        leading = 0
        while leading < min(len(tokens), ncols) and tokens[leading].isdigit():
            leading += 1
        if leading < ncols:
            if leading <= 1 and not key.isdigit():
                pos = eol + 1  # ERR:/MIS:, one global count
                continue
            raise ChurnError(path, f"row {key}: {leading} counts for {ncols} CPUs")
        tail = tokens[ncols].decode(errors="replace") if len(tokens) > ncols else ""
        cut = tail.rfind("  ")
        name = tail[cut + 2 :].strip() if key.isdigit() and cut >= 0 else " ".join(tail.split())
        base = pos + colon + 1
        regular = (
            len(fields) >= span
            and all(len(token) <= FIELD for token in tokens[:ncols])
            and fields[FIELD:span:CELL].isdigit()  # the last digit of every count where the layout puts it
            and (len(fields) == span or not fields[span : span + 1].isdigit())
            and len(fields[:span].split()) == ncols
        )
        if regular:
            rows.append(IrqRow(key, name, base))
        else:
            ends: list[int | None] = []
            previous = 0
            for match in _COUNT.finditer(fields):
                if len(ends) == ncols:
                    break
                start, stop = match.span()
                # A count of at most 10 digits with a separator before its %10u field is patched in that field.
                ends.append(base + stop if stop - start <= FIELD and stop - CELL >= previous else None)
                previous = stop
            rows.append(IrqRow(key, name, base, tuple(ends)))
        pos = eol + 1
    return tuple(cpus), rows


def _grow_cell(data: bytearray, end: int | None, delta: int) -> int:
    """Add ``delta`` to the count whose %10u field ends at ``end``, in place: the delta added (0 when the cell is
    left alone or already at 2^32-1)."""
    if end is None or delta <= 0:
        return 0
    old = int(data[end - FIELD : end])
    new = min(old + delta, U32_MAX)
    if new <= old:
        return 0
    data[end - FIELD : end] = b"%10d" % new
    return new - old


def _device_kind(name: str) -> str:
    if name.startswith("mlx5_async"):
        return "nic_async"
    if name.startswith("mlx5"):
        return "nic"
    if name.startswith("nvidia"):
        return "gpu"
    if re.match(r"nvme\d+q\d+", name):
        return "nvme"
    return "quiet"


class _Interrupts:
    """proc/interrupts, kept as a bytearray patched in place, and where each device row is routed."""

    def __init__(self, path: str, paths: Paths, isolated: frozenset[int], data: bytes) -> None:
        self.path = path
        self.data = bytearray(data)
        self.cpus, rows = parse_interrupt_cells(self.data, path)
        self.isolated_columns = [column for column, cpu in enumerate(self.cpus) if cpu in isolated]
        self.isolated = frozenset(self.isolated_columns)
        self.arch = [row for row in rows if row.key in ARCH_RATES]
        self.devices: list[tuple[IrqRow, int, str, int]] = []  # (row, IRQ number, kind, target column)
        column_of = {cpu: column for column, cpu in enumerate(self.cpus)}
        for row in rows:
            if row.key.isdigit():
                irq = int(row.key)
                self.devices.append((row, irq, _device_kind(row.name), self._target(paths, irq, row, column_of)))

    def _target(self, paths: Paths, irq: int, row: IrqRow, column_of: dict[int, int]) -> int:
        """The column of the CPU the IRQ is delivered to: the first of its effective affinity, else of its
        affinity, else the CPU that counted most of it."""
        for name in ("effective_affinity_list", "smp_affinity_list"):
            text = _text(f"{paths.procfs}/irq/{irq}/{name}")
            if not text or not text.strip():
                continue
            try:
                cpus = sorted(cpu for cpu in parse_cpulist(text) if cpu in column_of)
            except CPUListError as error:
                raise ChurnError(f"{paths.procfs}/irq/{irq}/{name}", str(error)) from None
            if cpus:
                return column_of[cpus[0]]
        counts = []
        for column in range(len(self.cpus)):
            end = row.end(column)
            counts.append(int(self.data[end - FIELD : end]) if end is not None else -1)
        return max(range(len(counts)), key=counts.__getitem__)

    def advance(self, rng: random.Random, seconds: float, stray: float) -> tuple[dict[int, int], int, int]:
        """Grow the counts of one interval and write the file: (growth per IRQ number, growth of the architecture
        rows, cells that grew)."""
        data = self.data
        isolated = self.isolated
        cells = 0
        arch_total = 0
        for row in self.arch:
            hk_low, hk_high, iso_low, iso_high = ARCH_RATES[row.key]
            for column in range(len(self.cpus)):
                low, high = (iso_low, iso_high) if column in isolated else (hk_low, hk_high)
                grown = _grow_cell(data, row.end(column), _at_least_one(rng, low, high, seconds))
                arch_total += grown
                cells += grown > 0
        per_irq: dict[int, int] = {}
        nvme = [index for index, (_, _, kind, _) in enumerate(self.devices) if kind == "nvme"]
        busy = set(rng.sample(nvme, round(len(nvme) * NVME_BUSY_SHARE))) if nvme else set()
        for index, (row, irq, kind, target) in enumerate(self.devices):
            if kind == "nic":
                delta = _at_least_one(rng, *NIC_RATE, seconds)
            elif kind == "nic_async":
                delta = _at_least_one(rng, *NIC_ASYNC_RATE, seconds)
            elif kind == "gpu":
                delta = _at_least_one(rng, *GPU_RATE, seconds)
            elif kind == "nvme" and index in busy:
                delta = _at_least_one(rng, *NVME_RATE, seconds)
            else:
                continue
            grown = _grow_cell(data, row.end(target), delta)
            if grown:
                per_irq[irq] = per_irq.get(irq, 0) + grown
                cells += 1
        if stray > 0 and self.isolated_columns and self.devices:
            for row, irq, _kind, _target in rng.sample(self.devices, round(len(self.devices) * min(stray, 1.0))):
                column = rng.choice(self.isolated_columns)
                grown = _grow_cell(data, row.end(column), rng.randint(*STRAY_COUNTS))
                if grown:
                    per_irq[irq] = per_irq.get(irq, 0) + grown
                    cells += 1
        _replace(self.path, data)
        return per_irq, arch_total, cells


# --------------------------------------------------------------------------------------------------- /proc/stat
class _ProcStat:
    """/proc/stat: ``label value value...`` lines (fs/proc/stat.c), re-printed from their values."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.written = text.encode()
        self.lines: list[tuple[str, list[int]]] = []  # (label with its separator, values); no values: verbatim
        for line in text.splitlines():
            match = re.fullmatch(r"(\S+\s+)(\d+(?: \d+)*)", line)
            if match is None:
                raise ChurnError(path, f"unexpected line {line[:60]!r} (expected a label and numbers)")
            self.lines.append((match[1], [int(value) for value in match[2].split(" ")]))
        self.index = {label.strip(): position for position, (label, _) in enumerate(self.lines)}
        self.cpu_lines = [position for position, (label, _) in enumerate(self.lines)
                          if re.fullmatch(r"cpu\d+", label.strip())]  # fmt: skip

    def advance(self, rng: random.Random, seconds: float, per_irq: dict[int, int], arch_total: int) -> None:
        ticks = round(nefiles.USER_HZ * seconds)
        for position in self.cpu_lines:
            values = self.lines[position][1]
            # Split like this CPU's time so far, a little jittered; what rounding leaves goes to its largest field.
            weights = [value * rng.uniform(0.9, 1.1) for value in values]
            whole = sum(weights)
            if not whole:
                continue
            deltas = [int(ticks * weight / whole) for weight in weights]
            deltas[max(range(len(values)), key=values.__getitem__)] += ticks - sum(deltas)
            for field, delta in enumerate(deltas):
                values[field] += delta
        if "cpu" in self.index and self.cpu_lines:
            total = self.lines[self.index["cpu"]][1]
            for field in range(len(total)):
                total[field] = sum(self.lines[position][1][field] for position in self.cpu_lines
                                   if field < len(self.lines[position][1]))  # fmt: skip
        if "intr" in self.index:
            intr = self.lines[self.index["intr"]][1]
            grown = arch_total
            for irq, delta in per_irq.items():
                if irq + 1 < len(intr):
                    intr[irq + 1] += delta
                grown += delta
            intr[0] += grown
        for name in ("ctxt", "processes"):
            if name in self.index:
                values = self.lines[self.index[name]][1]
                values[0] += _events(rng, values[0], seconds)
        if "softirq" in self.index:
            values = self.lines[self.index["softirq"]][1]
            grown = 0
            for field in range(1, len(values)):
                delta = _events(rng, values[field], seconds)
                values[field] += delta
                grown += delta
            values[0] += grown
        text = "".join(label + " ".join(map(str, values)) + "\n" for label, values in self.lines)
        self.written = _rewrite(self.path, self.written, text.encode())


# --------------------------------------------------------------------------------------------------- key/value files
_KEY_VALUE = re.compile(r"((?:Node \d+ )?([^\s:]+):?)( +)(\d+)( kB)?")


class _KeyValues:
    """A file of ``key value`` lines (numastat, vmstat) or ``[Node N ]Key:   value[ kB]`` lines (meminfo). A
    changed value is printed right-aligned in the span its old value and the spaces before it took (the kernel's
    ``%8lu``), so the line keeps its length unless the number outgrows the span."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.written = text.encode()
        self.lines: list[list[str]] = []  # [key, head, spaces, digits, tail]
        self.values: dict[str, int] = {}
        for line in text.splitlines():
            match = _KEY_VALUE.fullmatch(line)
            if match is None:
                raise ChurnError(path, f"unexpected line {line[:60]!r} (expected a key and a number)")
            key = match[2]
            if key in self.values:
                raise ChurnError(path, f"{key} appears twice")
            self.values[key] = int(match[4])
            self.lines.append([key, match[1], match[3], match[4], match[5] or ""])
        self.base = dict(self.values)

    def set(self, key: str, value: int) -> None:
        if key in self.values:
            self.values[key] = max(0, value)

    def write(self) -> None:
        out = []
        for line in self.lines:
            key, head, spaces, digits, tail = line
            value = str(self.values[key])
            if value != digits:
                width = len(spaces) + len(digits)
                spaces = " " * (width - len(value)) if len(value) < width else " "
                line[2], line[3] = spaces, value
            out.append(f"{head}{spaces}{value}{tail}\n")
        self.written = _rewrite(self.path, self.written, "".join(out).encode())


class _Nodes:
    """nodeN/numastat and nodeN/meminfo of every node, proc/meminfo and proc/vmstat, moved together so that their
    sums stay as the kernel keeps them (and as generate_host writes them)."""

    def __init__(self, paths: Paths) -> None:
        node_root = f"{paths.sysfs}/devices/system/node"
        try:
            names = sorted((entry for entry in os.listdir(node_root) if re.fullmatch(r"node\d+", entry)),
                           key=lambda entry: int(entry[4:]))  # fmt: skip
        except (FileNotFoundError, NotADirectoryError):
            names = []
        self.numastat: list[_KeyValues] = []
        self.meminfo: list[_KeyValues] = []
        for name in names:
            for kind, found in (("numastat", self.numastat), ("meminfo", self.meminfo)):
                path = f"{node_root}/{name}/{kind}"
                text = _text(path)
                if text is not None:
                    found.append(_KeyValues(path, text))
        self.proc_meminfo = self._optional(f"{paths.procfs}/meminfo")
        self.vmstat = self._optional(f"{paths.procfs}/vmstat")
        self.files = len(self.numastat) + len(self.meminfo) + (self.proc_meminfo is not None) + (
            self.vmstat is not None)  # fmt: skip

    @staticmethod
    def _optional(path: str) -> _KeyValues | None:
        text = _text(path)
        return None if text is None else _KeyValues(path, text)

    def advance(self, rng: random.Random, seconds: float) -> None:
        numa_growth = dict.fromkeys(NUMASTAT_TO_VMSTAT, 0)
        misses = []
        for node in self.numastat:
            values = node.values
            grown = {
                key: _events(rng, values.get(key, 0), seconds)
                for key in ("numa_hit", "numa_miss", "interleave_hit", "other_node")
            }
            grown["other_node"] = min(grown["other_node"], grown["numa_hit"] + grown["numa_miss"])
            # Pages this node gave = allocated by its own CPUs + by the other node's: local + other = hit + miss.
            grown["local_node"] = grown["numa_hit"] + grown["numa_miss"] - grown["other_node"]
            misses.append(grown["numa_miss"])
            for key, delta in grown.items():
                node.set(key, values.get(key, 0) + delta)
                numa_growth[key] += delta if key in values else 0
        for position, node in enumerate(self.numastat):
            # A page meant for this node but taken from the next one: that one's miss is this one's foreign.
            delta = misses[(position + 1) % len(misses)] if len(misses) > 1 else 0
            if "numa_foreign" in node.values:
                node.set("numa_foreign", node.values["numa_foreign"] + delta)
                numa_growth["numa_foreign"] += delta
            node.write()

        meminfo_before = self._meminfo_sums()
        free_shift = 0
        for node in self.meminfo:
            free_shift += self._move_memory(rng, node, "Inactive(file)", ("FilePages", "Inactive(file)", "Inactive"))
            node.write()
        meminfo_after = self._meminfo_sums()

        if self.proc_meminfo is not None:
            memory = self.proc_meminfo
            if self.meminfo:
                self._shift(memory, free_shift, ("Cached", "Inactive"))
            else:
                self._move_memory(rng, memory, "Cached", ("Cached", "Inactive"))
            if "Dirty" in memory.base:
                memory.set("Dirty", int(memory.base["Dirty"] * rng.uniform(*DIRTY_RANGE)))
            memory.write()

        if self.vmstat is not None:
            vmstat = self.vmstat
            for key, value in vmstat.values.items():
                if not value or key in VMSTAT_FROZEN or key.startswith("nr_"):
                    continue
                if key in NUMASTAT_TO_VMSTAT.values() and self.numastat:
                    continue
                vmstat.set(key, value + _events(rng, value, seconds))
            for field, key in NUMASTAT_TO_VMSTAT.items():
                if self.numastat and key in vmstat.values:
                    vmstat.set(key, vmstat.values[key] + numa_growth[field])
            for key, field in VMSTAT_FROM_MEMINFO.items():
                if key in vmstat.values and field in meminfo_after:
                    pages = meminfo_after[field] // nefiles.PAGE_KB - meminfo_before[field] // nefiles.PAGE_KB
                    vmstat.set(key, vmstat.values[key] + pages)
            vmstat.write()

    def _meminfo_sums(self) -> dict[str, int]:
        sums: dict[str, int] = {}
        for node in self.meminfo:
            for key, value in node.values.items():
                sums[key] = sums.get(key, 0) + value
        return sums

    def _move_memory(self, rng: random.Random, memory: _KeyValues, cache: str, takers: Sequence[str]) -> int:
        """MemFree to within +-0.5 % of its generated value (no more than half the page cache ``cache`` can give),
        the page cache ``takers`` giving or taking the difference; MemUsed and MemAvailable follow, Dirty moves
        within 50-150 % of its generated value. Returns how much MemFree moved (kB)."""
        base, values = memory.base, memory.values
        if "MemFree" not in base:
            return 0
        amplitude = min(base["MemFree"] * MEMFREE_DRIFT, base.get(cache, 0) / 2)
        target = int(base["MemFree"] + rng.uniform(-amplitude, amplitude))
        shift = target - values["MemFree"]
        self._shift(memory, shift, takers)
        if "Dirty" in base and memory is not self.proc_meminfo:
            memory.set("Dirty", int(base["Dirty"] * rng.uniform(*DIRTY_RANGE)))
        return shift

    @staticmethod
    def _shift(memory: _KeyValues, shift: int, takers: Iterable[str]) -> None:
        values = memory.values
        if "MemFree" not in values:
            return
        memory.set("MemFree", values["MemFree"] + shift)
        for key in ("MemAvailable",):
            if key in values:
                memory.set(key, values[key] + shift)
        if "MemUsed" in values:
            memory.set("MemUsed", values["MemUsed"] - shift)
        for key in takers:
            if key in values:
                memory.set(key, values[key] - shift)


# --------------------------------------------------------------------------------------------------- memory.numa_stat
_NUMA_LINE = re.compile(r"([a-z_]+)(=\d+)?((?: N\d+=\d+)+)")
_NODE_VALUE = re.compile(r" N(\d+)=(\d+)")


def parse_numa_stat_lines(text: str, path: str) -> list[tuple[str, bool, list[tuple[int, int]]]]:
    """``memory.numa_stat`` -> [(key, whether the line has a ``=total`` (v1), [(node, value)])], checked to print
    back byte for byte (``format_numa_stat``)."""
    lines = []
    for line in text.splitlines():
        match = _NUMA_LINE.fullmatch(line)
        if match is None:
            raise ChurnError(path, f"unexpected line {line[:60]!r} (expected 'key N0=<n> ...' or 'key=<n> N0=<n> ...')")
        nodes = [(int(node), int(value)) for node, value in _NODE_VALUE.findall(match[3])]
        lines.append((match[1], match[2] is not None, nodes))
        if match[2] is not None and int(match[2][1:]) != sum(value for _, value in nodes):
            raise ChurnError(path, f"line {match[1]}: the total is not the sum of the nodes")
    if format_numa_stat(lines) != text:
        raise ChurnError(path, "does not print back as read (unexpected spacing)")
    return lines


def format_numa_stat(lines: Iterable[tuple[str, bool, Sequence[tuple[int, int]]]]) -> str:
    out = []
    for key, total, nodes in lines:
        head = f"{key}={sum(value for _, value in nodes)}" if total else key
        out.append(head + "".join(f" N{node}={value}" for node, value in nodes) + "\n")
    return "".join(out)


class _NumaStats:
    """Every container's memory.numa_stat under the kubepods cgroups."""

    def __init__(self, paths: Paths) -> None:
        # Per file: its lines, each either its text (all zeros: it never changes) or (key, total, generated values).
        self.files: list[tuple[str, list[str | tuple[str, bool, list[tuple[int, int]]]]]] = []
        self.written: dict[str, bytes] = {}
        for directory, _dirs, names in os.walk(paths.cgroupfs):
            if "memory.numa_stat" in names and "kubepods" in directory:
                self.track(f"{directory}/memory.numa_stat")
        self.files.sort()

    def track(self, path: str) -> None:
        """Move this file too from now on (a container that came after the tree was read)."""
        text = _text(path)
        if text is not None:
            lines = parse_numa_stat_lines(text, path)
            kept = [line if any(value for _, value in line[2]) else format_numa_stat([line]) for line in lines]
            self.files.append((path, kept))
            self.written[path] = text.encode()

    def forget(self, directories: Sequence[str]) -> None:
        """Stop moving the files under these directories (pods that went away)."""
        prefixes = tuple(directory.rstrip("/") + "/" for directory in directories)
        if prefixes:
            self.files = [(path, lines) for path, lines in self.files if not path.startswith(prefixes)]
            self.written = {path: data for path, data in self.written.items() if not path.startswith(prefixes)}

    def advance(self, rng: random.Random) -> int:
        uniform, written = rng.uniform, self.written
        for path, lines in self.files:
            out = []
            for line in lines:
                if isinstance(line, str):
                    out.append(line)
                    continue
                key, total, nodes = line
                moved = [
                    (node, round(value * (1 + uniform(-NUMA_STAT_DRIFT, NUMA_STAT_DRIFT)))) for node, value in nodes
                ]
                out.append(format_numa_stat([(key, total, moved)]))
            written[path] = _rewrite(path, written[path], "".join(out).encode())
        return len(self.files)


# --------------------------------------------------------------------------------------------------- cpufreq
class _CurFreq:
    """cpufreq/policyN/scaling_cur_freq (kHz) of every policy that has one."""

    def __init__(self, paths: Paths) -> None:
        root = f"{paths.sysfs}/devices/system/cpu/cpufreq"
        self.files: list[tuple[str, int, int, int]] = []  # (path, generated kHz, min, max)
        self.written: dict[str, bytes] = {}
        try:
            policies = sorted(entry for entry in os.listdir(root) if entry.startswith("policy"))
        except (FileNotFoundError, NotADirectoryError):
            policies = []
        for policy in policies:
            values, raw = {}, {}
            for name in ("scaling_cur_freq", "scaling_min_freq", "scaling_max_freq"):
                text = _text(f"{root}/{policy}/{name}")
                if text is not None:
                    if not text.strip().isdigit():
                        raise ChurnError(f"{root}/{policy}/{name}", f"not a frequency: {text.strip()[:20]!r}")
                    values[name], raw[name] = int(text), text.encode()
            if "scaling_cur_freq" in values:
                cur = values["scaling_cur_freq"]
                low, high = values.get("scaling_min_freq", cur), values.get("scaling_max_freq", cur)
                path = f"{root}/{policy}/scaling_cur_freq"
                self.files.append((path, cur, min(low, cur), max(high, cur)))
                self.written[path] = raw["scaling_cur_freq"]

    def advance(self, rng: random.Random) -> int:
        for path, cur, low, high in self.files:
            value = int(cur * (1 + rng.uniform(-CUR_FREQ_DRIFT, CUR_FREQ_DRIFT)))
            self.written[path] = _rewrite(path, self.written[path], f"{min(max(value, low), high)}\n".encode())
        return len(self.files)


# --------------------------------------------------------------------------------------------------- Churn
class Churn:
    """A host tree whose counters ``advance()`` moves on by ``seconds`` of a busy inference node (see the module's
    docstring for what moves and how). Reads the tree once, here; ChurnError names a file it cannot patch."""

    def __init__(self, root: str | os.PathLike[str], *, seed: int = 1, stray: float = 0.0,
                 seconds: float = DEFAULT_SECONDS, pods: float = 0.0, pinned_every: int = 0) -> None:  # fmt: skip
        if not 0.0 <= stray <= 1.0:
            raise ValueError(f"stray must be a fraction between 0 and 1, not {stray}")
        # Pods coming and going (bench/pod_churn.py), off unless asked for: the counters alone are what earlier
        # figures were measured with.
        self.pods = None
        if pods or pinned_every:
            from pod_churn import PodChurn

            self.pods = PodChurn(root, per_advance=pods, pinned_every=pinned_every, seed=seed)
        self.root = os.fspath(root)
        self.paths = paths = Paths.from_root(self.root)
        self.rng = random.Random(seed)
        self.stray = stray
        self.seconds = seconds
        self.isolated = isolated_cpus(paths)
        path = f"{paths.procfs}/interrupts"
        data = _read(path)
        self.interrupts = _Interrupts(path, paths, self.isolated, data) if data is not None else None
        path = f"{paths.procfs}/stat"
        text = _text(path)
        self.stat = _ProcStat(path, text) if text is not None else None
        self.nodes = _Nodes(paths)
        self.numa_stats = _NumaStats(paths)
        self.cur_freq = _CurFreq(paths)
        self.advances = 0
        if not self.files_per_advance:
            raise ChurnError(self.root, "nothing to churn (no /proc/interrupts, /proc/stat, numastat, meminfo, "
                                        "vmstat, memory.numa_stat or scaling_cur_freq)")  # fmt: skip

    @property
    def files_per_advance(self) -> int:
        return (
            (self.interrupts is not None) + (self.stat is not None) + self.nodes.files
            + len(self.numa_stats.files) + len(self.cur_freq.files)
        )  # fmt: skip

    def describe(self) -> str:
        interrupts = self.interrupts
        rows = f"{len(interrupts.devices)} device rows x {len(interrupts.cpus)} CPUs" if interrupts else "none"
        pods = f"; pods: {self.pods.describe()}" if self.pods is not None else ""
        return (f"{self.root}: /proc/interrupts ({rows}), {len(self.numa_stats.files)} memory.numa_stat, "
                f"{self.nodes.files} numastat/meminfo/vmstat, {len(self.cur_freq.files)} scaling_cur_freq, "
                f"/proc/stat {'yes' if self.stat else 'no'}; {len(self.isolated)} isolated CPUs; stray {self.stray}; "
                f"{self.seconds:g} s per advance{pods}")  # fmt: skip

    def advance(self) -> Step:
        """Move every counter on by one interval and write the files (each atomically)."""
        started = time.perf_counter()
        rng = self.rng
        per_irq: dict[int, int] = {}
        arch_total = cells = 0
        if self.interrupts is not None:
            per_irq, arch_total, cells = self.interrupts.advance(rng, self.seconds, self.stray)
        if self.stat is not None:
            self.stat.advance(rng, self.seconds, per_irq, arch_total)
        self.nodes.advance(rng, self.seconds)
        if self.pods is not None:
            self.pods.advance()
            added, removed = self.pods.take_changes()
            self.numa_stats.forget(removed)
            for path in added:
                self.numa_stats.track(path)
        self.numa_stats.advance(rng)
        self.cur_freq.advance(rng)
        self.advances += 1
        return Step(self.files_per_advance, cells, time.perf_counter() - started)


# --------------------------------------------------------------------------------------------------- CLI
def add_churn_arguments(parser: argparse.ArgumentParser, when: str) -> None:
    """``--churn`` and ``--stray`` as the harnesses take them (``when``: when the tree moves)."""
    parser.add_argument("--churn", action="store_true",
                        help=f"move the tree's counters {when} as a busy node would (bench/churn.py; changes the tree "
                        "in place; default: a static tree)")  # fmt: skip
    parser.add_argument("--stray", type=float, default=0.0, metavar="F",
                        help="with --churn, the fraction of device IRQ rows that also count on an isolated CPU at "
                        "each advance (default: 0, the well-configured node)")  # fmt: skip
    parser.add_argument("--pods", type=float, default=0.0, metavar="N",
                        help="with --churn, Burstable/BestEffort pods replaced per advance (bench/pod_churn.py; "
                        "default: 0, pods stay)")  # fmt: skip
    parser.add_argument("--pinned-every", type=int, default=0, metavar="K",
                        help="with --churn, replace a pinned pod without a GPU every K advances (default: 0, never)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="a host tree written by bench/generate_host.py (changed in "
                                                      "place)")  # fmt: skip
    parser.add_argument("--every", type=float, default=1.0, help="seconds between advances (default: 1; 0: back to "
                                                                 "back)")  # fmt: skip
    parser.add_argument("--count", type=int, default=None, help="stop after this many advances (default: until "
                                                                "SIGTERM or Ctrl-C)")  # fmt: skip
    parser.add_argument("--stray", type=float, default=0.0, help="fraction of device rows that also count on an "
                                                                 "isolated CPU per advance (default: 0)")  # fmt: skip
    parser.add_argument(
        "--seconds",
        type=float,
        default=DEFAULT_SECONDS,
        help=f"node time one advance stands for (default: {DEFAULT_SECONDS:g})",
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    parser.add_argument("--pods", type=float, default=0.0, metavar="N",
                        help="Burstable/BestEffort pods replaced per advance (bench/pod_churn.py; default: 0)")
    parser.add_argument("--pinned-every", type=int, default=0, metavar="K",
                        help="replace a pinned pod without a GPU every K advances (default: 0, never)")
    args = parser.parse_args(argv)
    try:
        churn = Churn(args.root, seed=args.seed, stray=args.stray, seconds=args.seconds, pods=args.pods,
                      pinned_every=args.pinned_every)  # fmt: skip
        lock = lock_tree(args.root)
    except (ValueError, OSError) as error:
        print(f"churn: error: {error}", file=sys.stderr)
        return 2
    try:
        return _churn(churn, args.every, args.count)
    finally:
        os.close(lock)


def lock_tree(root: str) -> int:
    """An exclusive lock on the tree's root directory while this churner runs (released when the process ends):
    two churners advancing one tree at once undo each other's advances, and two such runs once left a
    ``memory.numa_stat`` with a stray newline, so a second one is refused. Returns the locked descriptor; OSError naming
    the tree when another churner holds it."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OSError(f"{root}: another bench/churn.py is moving this tree; run one churner per tree") from None
    except OSError:
        os.close(fd)
        raise
    return fd


def _churn(churn: Churn, every: float, count: int | None) -> int:
    stopping = []

    def stop(_signum: int, _frame: object) -> None:
        stopping.append(True)  # finish the advance in progress: every file is replaced whole or not at all

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"churning {churn.describe()}", flush=True)  # bench/run.py waits for this line
    timings: list[float] = []
    due = time.monotonic()
    while not stopping and (count is None or len(timings) < count):
        timings.append(churn.advance().seconds)
        due += every
        while not stopping and time.monotonic() < due:
            time.sleep(min(0.05, max(0.0, due - time.monotonic())))
        due = max(due, time.monotonic() - every)  # fell behind: do not burst to catch up
    if timings:
        print(f"{len(timings)} advances, median {statistics.median(timings) * 1000:.1f} ms, "
              f"max {max(timings) * 1000:.1f} ms", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
