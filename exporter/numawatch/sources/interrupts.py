"""Interrupt counters per CPU from /proc/interrupts, kept only for the CPUs whose jitter matters.

Format (kernel/irq/proc.c ``show_interrupts`` and arch ``arch_show_interrupts``; gpu-and-host.md §3.3)::

               CPU0       CPU1       CPU2       CPU3
      25:          0          0         23          0   PCI-MSI 50872321-edge      virtio0-input.0
     LOC:      15596       4902        596        609   Local timer interrupts
     ERR:          0

- The header names one column per **online** CPU (``CPU0 CPU2`` when CPU 1 is offline): columns are mapped to CPUs
  through the header, never by position (node_exporter's bug with offline CPUs).
- Numeric rows are device IRQs: counts, then chip, hwirq/trigger and the action names (``, ``-separated when
  shared). Named rows are architecture counters: ``LOC`` (local timer, the scheduler tick), ``RES``/``CAL``/``TLB``
  (rescheduling, function-call and shootdown IPIs), ``IWI`` (irq_work self-IPI), ``NMI``, ``PMI``, ...; arm64 has
  ``IPI0``..``IPI6`` and its per-CPU timer as the numeric ``arch_timer`` row. ``ERR``/``MIS`` carry one global count.

Kinds: ``device`` (numeric rows), ``local_timer`` (LOC, arch_timer, riscv-timer), ``ipi`` (RES, CAL, TLB, IWI,
IPI<n>), ``other`` (the rest).

Cost. A 384-CPU host with 2,000 IRQs prints ~8 MB here every read. Converting every cell would cost ~80 ms of
Python per evaluation, so counts are kept only for the *watched* CPUs (isolated, nohz_full and exclusively pinned:
the ones a finding or metric is about) and found without splitting: every count is printed in an 11-byte cell
(`` %10u`` on current kernels, ``%10u `` on older ones, both right-aligned to the same offsets after the ``:``), so
the watched columns are byte ranges of the line; digits 1-9 are marked with one ``bytes.translate`` and found with
``bytes.find`` (both C loops), so only non-zero counts are touched in Python and zeros, the vast majority, are never
converted. A line whose layout does not check out (a count wider than 10 digits shifts the cells; arm64 prints
``IPI0:`` without the extra space) is split the slow, safe way; ``_looks_like_a_count`` says why the checks are
exact. The file is read in 1 MiB blocks parsed as they arrive (``read_interrupts``), so neither it nor its marked
copy is ever held whole (~2.5 MiB peak instead of ~18). See bench/bench_interrupts.py and docs/performance.md.

The watched CPUs are worked out here from cheap files, because a source does not see the others' results:
``sys/devices/system/cpu/{isolated,nohz_full}``, ``isolcpus=``/``nohz_full=`` of ``proc/cmdline``, and the
exclusive CPUs of the kubelet's ``cpu_manager_state`` (``<kubelet>/cpu_manager_state``; read tolerantly, the
kubelet_state source reports its problems). Rates come from two readings (``Host.previous``); the only state serve
keeps (``InterruptsReader``) is the previous reading's rows with a CRC-32 of each row's watched cells: a row whose
watched cells and text read the same is the previous row without being searched (devices routed to housekeeping
CPUs move only unwatched cells, so on a well-placed node only the tick and IPI rows are searched again).
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

from numawatch.cpuset import EMPTY, CPUListError, CPUSet, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.model import frozen_map
from numawatch.model_host import (
    KIND_DEVICE,
    KIND_IPI,
    KIND_LOCAL_TIMER,
    KIND_OTHER,
    InterruptRow,
    Interrupts,
)
from numawatch.paths import Paths
from numawatch.sources._files import DEFAULT_READ_LIMIT, read_optional_text
from numawatch.sources.topology import parse_cmdline, parse_cmdline_cpulist, parse_isolcpus, parse_sys_cpulist

BLOCK = 1 << 20  # bytes read (and digit-marked) at a time: the whole file is never held, nor its marked copy
# A row is 11 bytes per online CPU plus its names: ~90 KB with 8,192 CPUs. Anything longer is not this file.
MAX_LINE = 1 << 20
CELL = 11  # bytes per count: " %10u" (or "%10u " on older kernels); both end each count at the same offset
_MARK_NONZERO = bytes.maketrans(b"123456789", b"xxxxxxxxx")
_DIGITS = frozenset(b"0123456789")
_MAX_RUNS = 8  # beyond this many separate runs of watched columns, one span with a membership test is cheaper

IPI_KEYS = frozenset({"RES", "CAL", "TLB", "IWI"})
# Per-CPU timer IRQs that are printed as numeric rows (arm64 arch timer, RISC-V): the tick, not a device.
PERCPU_TIMER_NAMES = frozenset({"arch_timer", "riscv-timer"})


# --------------------------------------------------------------------------------------------------- parsing
def parse_header(line: bytes, path: str = "/proc/interrupts") -> tuple[int, ...]:
    """``CPU0 CPU2 CPU3`` -> (0, 2, 3)."""
    cpus = []
    for token in line.split():
        number = token[3:]
        # Nine digits are far beyond any CPU number; int() would refuse more than 4,300 with a bare ValueError.
        if not token.startswith(b"CPU") or not number.isdigit() or len(number) > 9:
            raise MalformedFile(path, f"bad header column {token[:20]!r} (expected CPU<n>)")
        cpus.append(int(number))
    if not cpus:
        raise MalformedFile(path, "empty header (expected CPU<n> columns)")
    if len(set(cpus)) != len(cpus):
        raise MalformedFile(path, "a CPU appears twice in the header")
    return tuple(cpus)


def classify(key: str, name: str) -> str:
    """The kind of a /proc/interrupts row: device, local_timer, ipi or other."""
    if key.isdigit():
        return KIND_LOCAL_TIMER if name in PERCPU_TIMER_NAMES else KIND_DEVICE
    if key == "LOC":
        return KIND_LOCAL_TIMER
    if key in IPI_KEYS or (key.startswith("IPI") and key[3:].isdigit()):
        return KIND_IPI
    return KIND_OTHER


def split_tail(tail: bytes, numeric: bool) -> tuple[str, str]:
    """The text after the counts -> (chip, name).

    Device rows print the chip and hwirq, then two spaces and the action names (``"  %s"``, shared actions joined
    by ``", "``), so the name is what follows the last double space. Named rows are just a description.
    """
    text = tail.decode("utf-8", errors="replace").strip()
    if not numeric:
        return "", " ".join(text.split())
    cut = text.rfind("  ")
    if cut < 0:
        return "", text
    return " ".join(text[:cut].split()), text[cut + 2 :].strip()


def _looks_like_a_count(cell: bytes) -> bool:
    """Whether the 11 bytes after the last expected cell are one more count cell.

    Counts wider than 10 digits shift the rest of the line right. A shift that is not a multiple of 11 leaves the last
    expected cell ending inside a number, which the digit tests around ``end`` catch; a shift of exactly 11 (or 22...)
    puts a number's end there again, but then another count cell follows instead of the chip or description text.
    """
    return len(cell) == CELL and cell[-1] in _DIGITS and not cell.strip(b" 0123456789")


def _runs(columns: list[int]) -> list[tuple[int, int]]:
    """Sorted column indices -> [start, stop) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for column in columns:
        if runs and runs[-1][1] == column:
            runs[-1] = (runs[-1][0], column + 1)
        else:
            runs.append((column, column + 1))
    return runs


# What a reader remembers of a row between readings, by its label as printed (`` 24``, ``LOC``): the bytes after its
# counts, the row built from them and, for a row read by the fast path, the CRC-32 of its watched cells (else None).
_Known = dict[bytes, tuple[bytes, InterruptRow, int | None]]
# The layout the digests of a reading were taken with: the CPU of each column and the watched columns. A reading with
# another layout (a CPU went offline, a container was pinned) cannot compare digests with it.
_Layout = tuple[tuple[int, ...], tuple[int, ...]]


class Remembered:
    """What a reading leaves for the next one (``read_interrupts``' ``known``): its rows by key and their layout."""

    __slots__ = ("layout", "rows")

    def __init__(self, layout: _Layout | None = None, rows: _Known | None = None) -> None:
        self.layout = layout
        self.rows: _Known = rows if rows is not None else {}


class _RowParser:
    """The rows of one reading of /proc/interrupts, fed in blocks of whole lines (the whole file is one block).

    ``known`` (a reader's previous reading, or None) lets a row whose text after the counts is unchanged skip the
    chip/name split, and a row whose watched counts are unchanged too be the previous (immutable) row itself. When
    the previous reading had the same columns and watched CPUs, a fast-path row whose watched cells have the same
    CRC-32 as then is that row without being searched at all: on a real node only the rows that count something new
    on an isolated or pinned CPU (the tick and IPI rows, a misrouted device) are searched.
    """

    def __init__(self, header: bytes, watched: Iterable[int], path: str, known: Remembered | None = None) -> None:
        self.path = path
        self.cpus = cpus = parse_header(header, path)
        self.ncols = ncols = len(cpus)
        column_of = {cpu: index for index, cpu in enumerate(cpus)}
        self.columns = columns = sorted(column_of[cpu] for cpu in set(watched) if cpu in column_of)
        self.span = CELL * ncols
        self.runs = _runs(columns)
        # The byte ranges (from the row's ":") whose CRC stands for its watched counts: each run of watched columns,
        # or, past _MAX_RUNS runs, the span from the first to the last (unwatched cells inside it then count too).
        if len(self.runs) <= _MAX_RUNS:
            self.digest_spans = [(CELL * start, CELL * stop) for start, stop in self.runs]
        else:
            self.digest_spans = [(CELL * columns[0], CELL * (columns[-1] + 1))]
        self.layout: _Layout = (cpus, tuple(columns))
        # The previous reading's digests are comparable only when it had the same columns and watched the same ones.
        self.digests = known is not None and known.layout == self.layout and bool(columns)
        # Marking a whole block costs ~0.4 ns/byte; worth it when many columns are watched and most rows are to be
        # searched. With the previous digests most rows are not searched at all: mark only the segments of those
        # that are.
        self.mark_blocks = len(columns) * 4 >= ncols and not self.digests
        self.only: frozenset[int] | None = None
        # With the block marked, one find() over the span from the first to the last watched column and a membership
        # test per non-zero count beats one find() per run: most rows have no non-zero count there at all.
        if len(self.runs) > _MAX_RUNS or (self.mark_blocks and len(self.runs) > 1):
            self.runs, self.only = [(columns[0], columns[-1] + 1)], frozenset(columns)
        self.rows: list[InterruptRow] = []
        self.seen: set[str] = set()
        self.known = known.rows if known is not None else None
        self.now: _Known = {}

    def feed(self, data: bytes, pos: int, length: int) -> None:
        """Parse the lines of ``data[pos:length]``: each ends at a newline, the last one at ``length`` at the latest
        (a newline there or the end of the data)."""
        path, cpus, ncols, columns, runs, only, span = (
            self.path, self.cpus, self.ncols, self.columns, self.runs, self.only, self.span
        )  # fmt: skip
        digits = _DIGITS
        marked = data.translate(_MARK_NONZERO) if self.mark_blocks else None
        rows, seen, known, now = self.rows, self.seen, self.known, self.now
        # Digests are taken when there is a next reading to compare with (a reader's), and used when the previous
        # reading's can be compared with them.
        digest_spans = self.digest_spans if known is not None and columns else None
        compare = self.digests and digest_spans is not None
        view = memoryview(data) if digest_spans is not None else None
        crc32 = zlib.crc32
        while pos < length:
            eol = data.find(b"\n", pos, length)
            if eol < 0:
                eol = length
            colon = data.find(b":", pos, eol)
            if colon < 0:
                if data[pos:eol].strip():
                    raise MalformedFile(path, f"line without ':': {data[pos:eol].strip()[:80]!r}")
                pos = eol + 1
                continue
            label = data[pos:colon]  # as printed, padding included: what the previous reading's rows are known by
            base = colon + 1
            end = base + span
            if compare:
                before = known.get(label)  # type: ignore[union-attr]  # compare implies known
                if (
                    before is not None
                    and before[2] is not None
                    and end <= eol
                    and data[end:eol] == before[0]
                    and data[base + CELL - 1] in digits
                    and data[end - 1] in digits
                ):
                    # The previous reading took this row by the fast path, and the text after ``span`` bytes of
                    # counts is that row's tail again: the tail began with no count cell (the fast path checked), so
                    # the counts still fill exactly ``span`` bytes in 11-byte cells. The watched cells' CRC-32 then
                    # says whether the row is the previous one: most rows are on a real node, since devices are
                    # routed to housekeeping CPUs, whose cells are not in the digest. Different cells share a CRC-32
                    # with odds of 2^-32: such a row would show its previous counts for one reading.
                    same = 0
                    for low, high in digest_spans:  # type: ignore[union-attr]  # compare implies digest_spans
                        same = crc32(view[base + low : base + high], same)  # type: ignore[index]
                    if same == before[2]:
                        row = before[1]
                        if row.key in seen or label in now:
                            raise MalformedFile(path, f"row {row.key} appears twice")
                        seen.add(row.key)
                        now[label] = before
                        rows.append(row)
                        pos = eol + 1
                        continue
            raw_key = label.strip()
            if not raw_key or not raw_key.isascii() or b" " in raw_key:
                raise MalformedFile(path, f"bad row label in {data[pos:eol].strip()[:80]!r}")
            key = raw_key.decode()
            counts: dict[int, int] = {}
            digest: int | None = None
            if (
                end <= eol
                and data[base + CELL - 1] in digits
                and data[end - 1] in digits
                and (end == eol or data[end] not in digits)
                and not _looks_like_a_count(data[end : end + CELL])
            ):
                # Fast path: every count sits in its 11-byte cell.
                if digest_spans is not None:
                    digest = 0
                    for low, high in digest_spans:
                        digest = crc32(view[base + low : base + high], digest)  # type: ignore[index]
                # In the digit-marked copy a non-zero count is the only thing with an "x" in it, so memchr-speed
                # find() skips the zeros; only non-zero watched counts are converted.
                for start, stop in runs:
                    low, high = base + CELL * start, base + CELL * stop
                    if marked is None:
                        segment, offset = data[low:high].translate(_MARK_NONZERO), low
                        found = segment.find(b"x")
                    else:
                        segment, offset = marked, 0
                        found = segment.find(b"x", low, high)
                    limit = high - offset
                    while found >= 0:
                        column = (found + offset - base) // CELL
                        cell_end = base + CELL * (column + 1)
                        if only is None or column in only:
                            counts[cpus[column]] = _count(data[cell_end - CELL : cell_end], key, path)
                        found = segment.find(b"x", cell_end - offset, limit)
                tail = data[end:eol]
            else:
                parts = data[base:eol].split(None, ncols)
                leading = 0
                while leading < min(len(parts), ncols) and parts[leading].isdigit() and len(parts[leading]) <= 20:
                    leading += 1
                if leading < ncols:
                    if leading <= 1 and not key.isdigit():
                        pos = eol + 1  # ERR:/MIS: carry one global count, not one per CPU
                        continue
                    # A device row always has a count per CPU: one cut short is a damaged file, not a row to drop.
                    raise MalformedFile(path, f"row {key}: {leading} counts for {ncols} CPUs")
                for column in columns:
                    value = int(parts[column])
                    if value:
                        counts[cpus[column]] = value
                tail = parts[ncols] if len(parts) > ncols else b""
            if key in seen or label in now:
                raise MalformedFile(path, f"row {key} appears twice")
            seen.add(key)
            before = known.get(label) if known is not None else None
            if before is not None and before[0] == tail:
                row = before[1]
                if row.counts != counts:
                    row = InterruptRow(key, row.kind, row.name, row.chip, frozen_map(counts) if counts else _NO_COUNTS)
            else:
                chip, name = split_tail(tail, key.isdigit())
                row = InterruptRow(
                    key=key,
                    kind=classify(key, name),
                    name=name,
                    chip=chip,
                    counts=frozen_map(counts) if counts else _NO_COUNTS,
                )
            if known is not None:
                now[label] = (tail, row, digest)
            rows.append(row)
            pos = eol + 1
        if view is not None:
            view.release()  # data may be a block the caller reuses; do not keep it exported

    def result(self, read_at: float) -> Interrupts:
        return Interrupts(
            cpus=self.cpus,
            watched=frozenset(self.cpus[column] for column in self.columns),
            rows=tuple(self.rows),
            read_at=read_at,
        )


def parse_interrupts(
    data: bytes, watched: Iterable[int] = (), *, path: str = "/proc/interrupts", read_at: float = 0.0
) -> Interrupts:
    """Parse /proc/interrupts, keeping counts only for ``watched`` CPUs (those without a column are ignored)."""
    first_eol = data.find(b"\n")
    if first_eol < 0:
        first_eol = len(data)
    parser = _RowParser(data[:first_eol], watched, path)
    parser.feed(data, first_eol + 1, len(data))
    return parser.result(read_at)


def read_interrupts(
    path: str,
    watched: Iterable[int],
    *,
    block: int = BLOCK,
    limit: int = DEFAULT_READ_LIMIT,
    known: Remembered | None = None,
) -> tuple[Interrupts, Remembered]:
    """Read and parse /proc/interrupts ``block`` bytes at a time: the same result as ``parse_interrupts`` of the
    whole file, without ever holding the whole file (8 MB on a 384-CPU host, and as much again digit-marked).

    Whole lines are parsed as each block arrives; a line cut by the block's end waits for the next block. Returns
    the reading and what a reader remembers for the next one (empty unless ``known`` is given). FileNotFoundError
    when the file does not exist; MalformedFile past ``limit`` bytes or on bad content.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        total = 0
        pending = b""
        parser: _RowParser | None = None
        while True:
            chunk = os.read(fd, block)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise MalformedFile(path, f"larger than the {limit}-byte limit")
            start = 0
            if parser is None or pending:
                newline = chunk.find(b"\n")
                if newline < 0:
                    if len(pending) + len(chunk) > MAX_LINE:  # not a line of this file: do not gather it
                        raise MalformedFile(path, f"a line longer than the {MAX_LINE}-byte limit")
                    pending += chunk
                    continue
                line, start = pending + chunk[:newline], newline + 1
                pending = b""
                if parser is None:
                    parser = _RowParser(line, watched, path, known)
                else:
                    parser.feed(line, 0, len(line))
            cut = chunk.rfind(b"\n")
            parser.feed(chunk, start, cut)  # nothing when the only newline was the one just consumed
            pending = chunk[cut + 1 :]
        if parser is None:
            parser = _RowParser(pending, watched, path, known)  # a header without a newline (or an empty file)
        elif pending:
            parser.feed(pending, 0, len(pending))
    finally:
        os.close(fd)
    return parser.result(time.monotonic()), Remembered(parser.layout, parser.now)


_NO_COUNTS = frozen_map()  # shared by every row without a non-zero watched count


def _count(cell: bytes, key: str, path: str) -> int:
    """One fast-path cell as a count. The layout checks only look at the ends of the row, so a cell in between may
    hold anything (``  abc 1``, ``-5``): that is a malformed file, not a count."""
    try:
        value = int(cell)
    except ValueError:
        value = -1
    if value < 0:
        raise MalformedFile(path, f"row {key}: bad count {cell.strip()[:20]!r}")
    return value


# --------------------------------------------------------------------------------------------------- watched CPUs
def exclusive_cpus_from_state(text: str) -> CPUSet:
    """Every CPU a ``cpu_manager_state`` assigns exclusively: ``entries`` (v2+ ``{pod: {container: list}}``, v1
    ``{id: list}``) and ``podEntries`` (v3+ ``{pod: {"cpuSet": list}}``), from ``data`` when v4 carries it.

    Tolerant on purpose: anything unreadable simply contributes nothing here; the kubelet_state source is the one
    that reports a broken file.
    """
    try:
        document = json.loads(text)
        if isinstance(document, dict) and isinstance(document.get("data"), str):
            document = json.loads(document["data"])  # v4: the checkpoint proper is this JSON string
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return EMPTY
    if not isinstance(document, dict):
        return EMPTY
    cpus: set[int] = set()
    for key in ("entries", "podEntries"):
        entries = document.get(key)
        if not isinstance(entries, dict):
            continue
        for value in entries.values():
            lists = value.values() if isinstance(value, dict) else [value]
            for cpulist in lists:
                if isinstance(cpulist, str):
                    try:
                        cpus |= parse_cpulist(cpulist)
                    except CPUListError:
                        continue
    return frozenset(cpus)


def _sys_cpus(path: Path) -> CPUSet:
    text = read_optional_text(path, 1 << 16)
    if text is None:
        return EMPTY
    try:
        return parse_sys_cpulist(text)
    except CPUListError:
        return EMPTY


def cmdline_isolated_cpus(cmdline: str, last_cpu: int | None = None) -> CPUSet:
    """CPUs named by ``isolcpus=`` or ``nohz_full=`` on a command line (bad values contribute nothing)."""
    cpus: set[int] = set()
    for name, value in parse_cmdline(cmdline):
        try:
            if name == "isolcpus" and value:
                cpus |= parse_isolcpus(value, last_cpu)[0]
            elif name == "nohz_full" and value:
                cpus |= parse_cmdline_cpulist(value, last_cpu)
        except CPUListError:
            continue
    return frozenset(cpus)


def watched_cpus(paths: Paths) -> CPUSet:
    """Isolated, nohz_full and exclusively pinned CPUs: whose interrupts numawatch counts."""
    cpu_root = paths.sysfs / "devices/system/cpu"
    possible = _sys_cpus(cpu_root / "possible")
    cpus = set(_sys_cpus(cpu_root / "isolated") | _sys_cpus(cpu_root / "nohz_full"))
    cpus |= cmdline_isolated_cpus(
        read_optional_text(paths.procfs / "cmdline", 1 << 16) or "", max(possible) if possible else None
    )
    try:
        state = read_optional_text(paths.kubelet / "cpu_manager_state", 4 << 20)
    except (OSError, MalformedFile):  # unreadable or oversized: the kubelet_state source reports it, not this one
        state = None
    if state is not None:
        cpus |= exclusive_cpus_from_state(state)
    return frozenset(cpus)


# --------------------------------------------------------------------------------------------------- reader
def _read(paths: Paths, known: Remembered | None) -> tuple[Interrupts, Remembered]:
    path = paths.procfs / "interrupts"
    watched = watched_cpus(paths)
    try:
        return read_interrupts(str(path), watched, known=known)
    except FileNotFoundError:
        raise SourceUnavailable(f"{path} does not exist") from None


def read(paths: Paths) -> Interrupts:
    return _read(paths, None)[0]


class InterruptsReader:
    """The interrupts source as serve runs it (one per HostReader): the previous reading's rows, so unchanged rows
    are not split and built again. Reads the same as ``read``."""

    def __init__(self) -> None:
        self._known = Remembered()

    def read(self, paths: Paths) -> Interrupts:
        result, self._known = _read(paths, self._known)
        return result


SOURCE = SourceSpec(
    name="interrupts",
    read=read,
    factory=InterruptsReader,
    description="/proc/interrupts counts on isolated, nohz_full and exclusively pinned CPUs",
)

__all__ = [
    "BLOCK",
    "CELL",
    "SOURCE",
    "InterruptsReader",
    "classify",
    "cmdline_isolated_cpus",
    "exclusive_cpus_from_state",
    "parse_header",
    "parse_interrupts",
    "read",
    "read_interrupts",
    "split_tail",
    "watched_cpus",
]
