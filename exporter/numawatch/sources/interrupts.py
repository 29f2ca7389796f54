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

Cost. A host with hundreds of CPUs and thousands of IRQs prints megabytes here every read, and converting every cell
in Python would be the most expensive part of an evaluation, so counts are kept only for the *watched* CPUs
(isolated, nohz_full and exclusively pinned: the ones a finding or metric is about) and found without splitting:
every count is printed in an 11-byte cell (`` %10u`` on current kernels, ``%10u `` on older ones, both right-aligned
to the same offsets after the ``:``), so the watched columns are byte ranges of the line; digits 1-9 are marked with
one ``bytes.translate`` and found with ``bytes.find`` (both C loops), so only non-zero counts are touched in Python
and zeros, the vast majority, are never converted. A line whose layout does not check out (a count wider than 10
digits shifts the cells; arm64 prints ``IPI0:`` without the extra space) is split the slow, safe way;
``_looks_like_a_count`` says why the checks are exact. The file is read in 256 KiB blocks (``read_interrupts``, the
only I/O) handed to the pure parser as they arrive (``parse_reading``), so neither it nor its marked copy is ever
held whole. See bench/bench_interrupts.py and
docs/performance.md.

The watched CPUs come from the sources this one needs: the isolation the topology source read (``isolcpus=``,
``nohz_full=``, sysfs ``isolated`` and ``nohz_full``) and the exclusive CPUs of the kubelet_state source's CPU Manager
state; either down contributes nothing (``watched_cpus``). Rates come from two readings: a HostReader's reading holds
the one before it (``Interrupts.before``), since serve reads the file at one evaluation in several (refresh.POLICIES).
The HostReader works the watched CPUs out once per change of those sources' readings (``SourceSpec.uses``), and reads
the file out of its turn only when they changed. What a HostReader's reading leaves for the next (``InterruptsMemory``)
is itself, the columns worked out from the last header and watched CPUs, and the previous reading's rows with a CRC-32
of each row's watched cells: a row whose watched cells and text read the same is the previous row without being searched
(devices routed to housekeeping CPUs move only unwatched cells, so on a well-placed node only the tick and IPI rows are
searched again). A row also keeps one CRC-32 of the whole span from its first to its last watched cell, which is
checked first: with several runs of watched columns one zlib call per row instead of one per run (each call has a
fixed setup cost before its first byte), with one run the digest itself. A row whose unwatched cells inside that span
move (a busy device on a housekeeping CPU between isolated ones) is checked run by run instead until it is searched
again. The tick and IPI rows, which count on nearly every watched CPU, are converted run by run in C loops
(``_dense_counts``) rather than one count at a time. Without watched CPUs a row is the previous one whenever its
text is.
"""

from __future__ import annotations

import os
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from numawatch.confined import HostFs
from numawatch.cpuset import EMPTY, CPUSet
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import excerpt, printable
from numawatch.model import frozen_map
from numawatch.model.interrupts import KIND_DEVICE, KIND_IPI, KIND_LOCAL_TIMER, KIND_OTHER, InterruptRow, Interrupts
from numawatch.model.kubelet import KubeletState
from numawatch.model.topology import Topology
from numawatch.paths import Paths
from numawatch.refresh import Carried, Refresh
from numawatch.source import Inputs, SourceSpec
from numawatch.sources._files import DEFAULT_READ_LIMIT

# Bytes read (and digit-marked) at a time: the whole file is never held, nor its marked copy. Small enough that
# Python's buffer for each read comes from memory the allocator keeps, not from a fresh mapping faulted in page by
# page at every reading.
BLOCK = 1 << 18
# A row is 11 bytes per online CPU plus its names: ~90 KB with 8,192 CPUs. Anything longer is not this file.
MAX_LINE = 1 << 20
# The file grows with CPUs times IRQs: 17 MB on a 768-CPU node with 2,000 IRQs, more than any fixed read limit of
# the other files. Its limit is worked out from the header instead: this many rows, each as long as the header
# (one 11-byte cell per CPU) plus its chip and names. 16,384 rows is more than the kernel sets up on a two-socket
# node with a queue per CPU on every NVMe drive and NIC; a hostile file is still cut off within that bound.
MAX_ROWS = 16384
_ROW_TAIL = 1024 + 256 + 64  # the names, the chip and the hwirq and trigger after the counts
CELL = 11  # bytes per count: " %10u" (or "%10u " on older kernels); both end each count at the same offset
_MARK_NONZERO = bytes.maketrans(b"123456789", b"xxxxxxxxx")
_DIGITS = frozenset(b"0123456789")
_MAX_RUNS = 8  # beyond this many separate runs of watched columns, one span with a membership test is cheaper
# A row whose previous reading had at least 1/_DENSE_SHARE of the watched counts non-zero is converted run by run
# (``_dense_counts``): past that share, converting whole runs in C loops is cheaper than finding and converting the
# non-zero counts one at a time (bench/bench_interrupts.py).
_DENSE_SHARE = 4

IPI_KEYS = frozenset({"RES", "CAL", "TLB", "IWI"})
# A row's key: an IRQ number or an architecture's counter name ("LOC", "IPI0", s390's "I/O").
_ROW_KEY = re.compile(rb"[\x21-\x7e]{1,16}")
# The action names of a row (shared IRQs list several) and its chip: free-form kernel text, bounded.
_NAME_LIMIT = 1024
_CHIP_LIMIT = 256
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


def _dense_counts(
    data: bytes, base: int, runs: Sequence[tuple[int, int, tuple[int, ...], bytes]], counts: dict[int, int]
) -> bool:
    """Add the non-zero counts of a fast-path row's watched ``runs`` (cells ``base + low`` to ``base + high``, their
    CPUs, one space per cell) to ``counts``, each run converted by ``split`` and ``int`` in C loops.

    When every cell of a run starts with a space and ends with a digit, every cell boundary ends a token and every
    cell holds one, so a run of n cells splits into n tokens exactly when each cell holds one token: that cell's
    number, which ``int`` converts as it would the whole cell. Anything else (a cell such as ``  12 3``, ``-5``,
    ``x``) returns False with ``counts`` untouched: the cell-by-cell search then converts or refuses it.
    """
    found: dict[int, int] = {}
    for low, high, run_cpus, spaces in runs:
        segment = data[base + low : base + high]
        if segment[::CELL] != spaces or not segment[CELL - 1 :: CELL].isdigit():
            return False
        tokens = segment.split()
        if len(tokens) != len(run_cpus):
            return False
        try:
            values = list(map(int, tokens))
        except ValueError:
            return False
        if min(values) < 0:
            return False
        found.update({cpu: value for cpu, value in zip(run_cpus, values, strict=True) if value})
    counts.update(found)
    return True


class KnownRow(NamedTuple):
    """What a parse remembers of a row for the next one, by the row's label as printed (`` 24``, ``LOC``)."""

    tail: bytes  # the bytes after its counts
    row: InterruptRow  # the row built from them
    digest: int | None  # CRC-32 of its watched cells, when the fast path read it (else None)
    # CRC-32 of all its cells from the first to the last watched one: None without watched cells, or while
    # unwatched cells inside that span move (see ``_RowParser``).
    whole: int | None


# The layout the digests of a parse were taken with: the CPU of each column and the watched columns. A parse with
# another layout (a CPU went offline, a container was pinned) cannot compare digests with it.
_Layout = tuple[tuple[int, ...], tuple[int, ...]]


class _DenseRun(NamedTuple):
    """A run of watched cells as ``_dense_counts`` converts it: its byte range from a row's ":", its CPUs and the
    space each of its cells starts with."""

    low: int
    high: int
    cpus: tuple[int, ...]
    spaces: bytes


class _Columns:
    """What a parse's header and watched CPUs decide: the CPU of each column, the watched columns and their runs,
    and the byte ranges (from a row's ":") that the digests and the run-by-run conversion use. The next parse reuses
    it while the header and the watched CPUs are the same (parsing the header is most of the cost of working it out,
    and it grows with the CPUs)."""

    __slots__ = (
        "columns", "cpus", "dense_at", "dense_runs", "digest_spans", "header", "layout", "ncols", "runs", "span",
        "watched", "watched_cpus", "whole_is_digest", "whole_span",
    )  # fmt: skip

    def __init__(self, header: bytes, watched: frozenset[int], path: str) -> None:
        self.header, self.watched = header, watched
        self.cpus = cpus = parse_header(header, path)
        self.ncols = len(cpus)
        column_of = {cpu: index for index, cpu in enumerate(cpus)}
        self.columns = columns = sorted(column_of[cpu] for cpu in watched if cpu in column_of)
        self.watched_cpus = frozenset(cpus[column] for column in columns)
        self.span = CELL * self.ncols
        self.runs = runs = _runs(columns)
        # The byte ranges whose CRC stands for a row's watched counts: each run of watched columns, or, past
        # _MAX_RUNS runs, the span from the first to the last (unwatched cells inside it then count too).
        if len(runs) <= _MAX_RUNS:
            self.digest_spans = [(CELL * start, CELL * stop) for start, stop in runs]
        else:
            self.digest_spans = [(CELL * columns[0], CELL * (columns[-1] + 1))]
        # One CRC-32 over the whole span from the first to the last watched cell is checked first: with several runs,
        # one call instead of one per run, each of which pays zlib.crc32's setup before its first byte; with one
        # digest span it is that span, and its CRC-32 the digest.
        self.whole_span = (CELL * columns[0], CELL * (columns[-1] + 1)) if columns else None
        self.whole_is_digest = len(self.digest_spans) == 1
        # A row with many non-zero watched counts (the tick and IPI rows count on every CPU) converts each run of
        # watched cells in one go (``_dense_counts``).
        self.dense_runs = (
            [_DenseRun(CELL * start, CELL * stop, cpus[start:stop], b" " * (stop - start)) for start, stop in runs]
            if len(runs) <= _MAX_RUNS
            else None
        )
        self.dense_at = max(1, len(columns) // _DENSE_SHARE)
        self.layout: _Layout = (cpus, tuple(columns))


@dataclass(frozen=True, slots=True)
class Remembered:
    """What a parse leaves for the next one (its ``previous``): its rows by label and the columns worked out from its
    header and watched CPUs. ``Remembered()`` is a first parse's previous: nothing to reuse, but rows to remember."""

    rows: Mapping[bytes, KnownRow] = field(default_factory=dict)
    columns: _Columns | None = None


@dataclass(frozen=True, slots=True)
class InterruptsParse:
    """A parse of /proc/interrupts: its columns' CPUs, the watched CPUs among them and the rows, and what the next
    parse may reuse (``remembered``, not part of equality: rows a parse with a ``previous`` gives again are the
    previous rows themselves, equal to those a parse without one makes)."""

    cpus: tuple[int, ...]
    watched: CPUSet
    rows: tuple[InterruptRow, ...]
    remembered: Remembered = field(compare=False, repr=False)

    def interrupts(self, read_at: float = 0.0) -> Interrupts:
        """The reading, read at ``read_at`` (time.monotonic(), for rates)."""
        return Interrupts(cpus=self.cpus, watched=self.watched, rows=self.rows, read_at=read_at)


class _RowParser:
    """The rows of one parse of /proc/interrupts, fed in blocks of whole lines (the whole file is one block).

    ``previous`` (the previous parse's ``Remembered``, or None: remember nothing) lets a row whose text after the
    counts is unchanged skip the chip/name split, and a row whose watched counts are unchanged too be the previous
    (immutable) row itself. When the previous parse had the same columns and watched CPUs, a fast-path row whose
    watched cells have the same CRC-32 as then is that row without being searched at all: on a real node only the
    rows that count something new on an isolated or pinned CPU (the tick and IPI rows, a misrouted device) are
    searched.
    """

    def __init__(
        self, header: bytes, watched: Iterable[int], path: str, previous: Remembered | None, generation: int
    ) -> None:
        self.path = path
        self.generation = generation  # stamped on the rows this parse makes (Refresh.generation)
        watched = frozenset(watched)
        # The previous parse's columns while the header and the watched CPUs are the same (shared, never changed).
        shape = previous.columns if previous is not None else None
        if shape is None or shape.header != header or shape.watched != watched:
            shape = _Columns(header, watched, path)
        self.shape = shape
        self.cpus, self.ncols, self.span, self.columns = shape.cpus, shape.ncols, shape.span, shape.columns
        self.remember = previous is not None
        self.known: Mapping[bytes, KnownRow] = previous.rows if previous is not None else {}
        # Digests are taken when there is a next parse to compare with (``previous`` given), and compared when the
        # previous parse's were taken with the same columns and watched the same ones. Without watched columns a
        # row's digest is that of no cells: the row is the previous one whenever its text after the counts is.
        self.digest_spans = shape.digest_spans if self.remember else None
        self.whole_span = shape.whole_span if self.digest_spans is not None else None
        previous_columns = previous.columns if previous is not None else None
        self.compare = (
            self.digest_spans is not None and previous_columns is not None and previous_columns.layout == shape.layout
        )
        # Marking a whole block costs in proportion to its bytes; worth it when many columns are watched and most rows
        # are to be searched. With the previous digests most rows are not searched at all: mark only the segments of
        # those that are.
        self.mark_blocks = len(shape.columns) * 4 >= self.ncols and not self.compare
        self.runs, self.only = shape.runs, None
        # With the block marked, one find() over the span from the first to the last watched column and a membership
        # test per non-zero count beats one find() per run: most rows have no non-zero count there at all.
        if len(self.runs) > _MAX_RUNS or (self.mark_blocks and len(self.runs) > 1):
            self.runs, self.only = [(shape.columns[0], shape.columns[-1] + 1)], frozenset(shape.columns)
        self.rows: list[InterruptRow] = []
        self.seen: set[str] = set()
        self.now: dict[bytes, KnownRow] = {}

    def feed(self, data: bytes, pos: int, length: int) -> None:
        """Parse the lines of ``data[pos:length]``: each ends at a newline, the last one at ``length`` at the latest
        (a newline there or the end of the data)."""
        marked = data.translate(_MARK_NONZERO) if self.mark_blocks else None
        view = memoryview(data) if self.digest_spans is not None else None
        known, compare, span, digits = self.known, self.compare, self.span, _DIGITS
        rows, seen, now = self.rows, self.seen, self.now
        whole_low, whole_high = self.whole_span or (0, 0)
        whole_is_digest = self.shape.whole_is_digest
        crc32 = zlib.crc32
        try:
            while pos < length:
                eol = data.find(b"\n", pos, length)
                if eol < 0:
                    eol = length
                colon = data.find(b":", pos, eol)
                if colon < 0:
                    if data[pos:eol].strip():
                        raise MalformedFile(self.path, f"line without ':': {data[pos:eol].strip()[:80]!r}")
                    pos = eol + 1
                    continue
                label = data[pos:colon]  # as printed, padding included: what the previous parse's rows are known by
                base, end = colon + 1, colon + 1 + span
                before = known.get(label)
                kept = digest = whole = None  # the previous row, if unchanged; this row's CRC-32s, once taken
                if (
                    compare
                    and before is not None
                    and before.digest is not None
                    and end <= eol
                    and data[end:eol] == before.tail
                    and data[base + CELL - 1] in digits
                    and data[end - 1] in digits
                ):
                    # The previous parse took this row by the fast path, and the text after ``span`` bytes of counts
                    # is that row's tail again: the tail began with no count cell (the fast path checked), so the
                    # counts still fill exactly ``span`` bytes in 11-byte cells. The watched cells' CRC-32s then say
                    # whether the row is the previous one, first the whole span's when the row has one
                    # (``_by_runs`` says why a row may have none).
                    whole_before = before.whole
                    if whole_before is not None:
                        whole = crc32(view[base + whole_low : base + whole_high])  # type: ignore[index]
                        if whole == whole_before:
                            kept = before
                        elif whole_is_digest:
                            digest = whole  # the one digest span moved: searched below
                    if kept is None and digest is None:
                        kept, digest = self._by_runs(view, before, base)  # type: ignore[arg-type]
                pos = eol + 1
                if kept is None:
                    self._search(data, view, marked, label, before, base, eol, digest, whole)
                    continue
                row = kept.row
                if row.key in seen or label in now:
                    raise MalformedFile(self.path, f"row {row.key} appears twice")
                seen.add(row.key)
                now[label] = kept  # compared with a previous parse: this one remembers too
                rows.append(row)
        finally:
            if view is not None:
                view.release()  # data may be a block the caller reuses; do not keep it exported

    def _by_runs(self, view: memoryview, before: KnownRow, base: int) -> tuple[KnownRow | None, int]:
        """Whether the row at ``base``, whose span CRC-32 is not ``before``'s (or which has none), has ``before``'s
        watched cells: ``before`` without its span CRC when their CRC-32 is the same, else None; and that CRC-32.

        Most rows are unchanged on a real node, since devices are routed to housekeeping CPUs, whose cells are not
        in the digest. Different cells share a CRC-32 with odds of 2^-32: such a row would show its previous counts
        for one parse. A row whose unwatched cells inside the span moved (a device on a housekeeping CPU between two
        runs of watched ones) is checked run by run, and from then on only run by run (its span CRC is dropped)
        until it is searched again: a busy device keeps counting there."""
        digest = self._digest(view, base)
        if digest != before.digest:
            return None, digest
        return (before if before.whole is None else before._replace(whole=None)), digest

    def _digest(self, view: memoryview, base: int) -> int:
        """The CRC-32 of the watched cells of the row whose counts start at ``base``."""
        digest = 0
        for low, high in self.digest_spans:  # type: ignore[union-attr]  # a view implies digest spans
            digest = zlib.crc32(view[base + low : base + high], digest)
        return digest

    def _whole(self, view: memoryview, base: int, digest: int) -> int | None:
        """The CRC-32 of the row's cells from the first to the last watched one (``digest`` when that is the one
        digest span); None without watched cells."""
        if self.whole_span is None:
            return None
        if self.shape.whole_is_digest:
            return digest
        low, high = self.whole_span
        return zlib.crc32(view[base + low : base + high])

    def _search(
        self, data: bytes, view: memoryview | None, marked: bytes | None, label: bytes, before: KnownRow | None,
        base: int, eol: int, digest: int | None, whole: int | None,
    ) -> None:  # fmt: skip
        """Read the row at ``base`` (after its ``:``) to ``eol`` and take it (as ``feed`` takes an unchanged one): its
        watched non-zero counts and its text. A row with one global count (``ERR``/``MIS``) is dropped. ``digest`` and
        ``whole``: the row's CRC-32s when the comparison with the previous row took them already."""
        raw_key = label.strip()
        if _ROW_KEY.fullmatch(raw_key) is None:  # the key is the irq label: printable ASCII, short
            raise MalformedFile(self.path, f"bad row label in {excerpt(data[base - len(label) - 1 : eol].strip())}")
        key = raw_key.decode()
        counts: dict[int, int] = {}
        end = base + self.span
        digits = _DIGITS
        if (
            end <= eol
            and data[base + CELL - 1] in digits
            and data[end - 1] in digits
            and (end == eol or data[end] not in digits)
            and not _looks_like_a_count(data[end : end + CELL])
        ):
            # Fast path: every count sits in its 11-byte cell: a digit ends the first and the last cell, and no digit
            # or further count cell follows (``_looks_like_a_count``).
            # A row that had many non-zero watched counts last time (the tick, the IPIs) has them again: its runs of
            # cells are converted in C loops rather than one count at a time.
            shape = self.shape
            if self.runs and (
                before is None
                or shape.dense_runs is None
                or len(before.row.counts) < shape.dense_at
                or not _dense_counts(data, base, shape.dense_runs, counts)
            ):
                self._sparse(data, marked, base, key, counts)
            tail = data[end:eol]
            if view is not None:
                digest = self._digest(view, base) if digest is None else digest
                whole = self._whole(view, base, digest) if whole is None else whole
        else:
            digest = whole = None  # a row split the slow way keeps no digest: the next parse searches it again
            split = _split_row(data[base:eol], self.ncols, self.columns, self.cpus, key, self.path, counts)
            if split is None:
                return
            tail = split
        if before is not None and before.tail == tail:
            row = before.row
            if row.counts != counts:
                frozen = frozen_map(counts) if counts else _NO_COUNTS
                row = InterruptRow(key, row.kind, row.name, row.chip, frozen, self.generation, row.problem)
        else:
            row = _new_row(key, tail, counts, self.generation, self.path)
        if key in self.seen or label in self.now:
            raise MalformedFile(self.path, f"row {key} appears twice")
        self.seen.add(key)
        if self.remember:
            self.now[label] = KnownRow(tail, row, digest, whole)
        self.rows.append(row)

    def _sparse(self, data: bytes, marked: bytes | None, base: int, key: str, counts: dict[int, int]) -> None:
        """The row's non-zero watched counts into ``counts``. In the digit-marked copy a non-zero count is the only
        thing with an "x" in it, so memchr-speed find() skips the zeros; only non-zero watched counts are converted."""
        cpus, only, path = self.cpus, self.only, self.path
        for start, stop in self.runs:
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

    def result(self) -> InterruptsParse:
        return InterruptsParse(
            cpus=self.cpus,
            watched=self.shape.watched_cpus,
            rows=tuple(self.rows),
            remembered=Remembered(self.now, self.shape),
        )


def parse_reading(
    data: bytes | Iterable[bytes],
    watched: Iterable[int] = (),
    previous: Remembered | None = None,
    *,
    path: str = "/proc/interrupts",
    generation: int = 0,
) -> InterruptsParse:
    """Parse /proc/interrupts, whole (``bytes``) or in blocks as they are read (an iterable of ``bytes``: whole lines
    are parsed as each block arrives, a line cut by a block's end waits for the next one, so neither the file nor
    its digit-marked copy is ever held whole), keeping counts only for ``watched`` CPUs (those without a column are
    ignored). Pure: no I/O; the same data gives an equal parse with or without ``previous``.

    ``previous`` (what the previous parse remembered, ``InterruptsParse.remembered``; ``Remembered()`` at first)
    lets unchanged rows be the previous rows themselves, without being searched again, and the columns worked out
    from an unchanged header and watched CPUs be reused; the parse then remembers its own rows for the next one.
    Without it nothing is remembered (a one-off parse: no digests taken). Rows it makes carry ``generation``.
    MalformedFile naming ``path`` on bad content, or a line longer than ``MAX_LINE`` in blocks.
    """
    parser: _RowParser | None = None
    pending = b""
    for chunk in (data,) if isinstance(data, bytes) else data:
        start = 0
        if parser is None or pending:
            newline = chunk.find(b"\n")
            if newline < 0:
                if len(pending) + len(chunk) > MAX_LINE:  # not a line of this file: do not gather it
                    raise MalformedFile(path, f"a line longer than the {MAX_LINE}-byte limit")
                pending += chunk
                continue
            line, start, pending = pending + chunk[:newline], newline + 1, b""
            if parser is None:
                parser = _RowParser(line, watched, path, previous, generation)
            else:
                parser.feed(line, 0, len(line))
        cut = chunk.rfind(b"\n")
        parser.feed(chunk, start, cut)  # nothing when the only newline was the one just consumed
        pending = chunk[cut + 1 :]
    if parser is None:
        parser = _RowParser(pending, watched, path, previous, generation)  # a header without a newline (or empty)
    elif pending:
        parser.feed(pending, 0, len(pending))
    return parser.result()


def parse_interrupts(
    data: bytes, watched: Iterable[int] = (), *, path: str = "/proc/interrupts", read_at: float = 0.0
) -> Interrupts:
    """Parse /proc/interrupts, keeping counts only for ``watched`` CPUs (those without a column are ignored)."""
    return parse_reading(data, watched, path=path).interrupts(read_at)


def _blocks(fd: int, path: str, block: int, limit: int | None) -> Iterator[bytes]:
    """The file open as ``fd``, ``block`` bytes at a time. MalformedFile past ``limit`` bytes (None: ``size_limit``
    of the header, and the files' read limit until the header is read)."""
    derived = limit is None
    if limit is None:
        limit = DEFAULT_READ_LIMIT
    total = 0
    head: bytes | None = b""  # the header's bytes so far, until its newline arrives (None after)
    while chunk := os.read(fd, block):
        total += len(chunk)
        if total > limit:
            raise MalformedFile(path, f"larger than the {limit}-byte limit")
        if head is not None:
            newline = chunk.find(b"\n")
            if newline < 0:
                head += chunk  # bounded: the parser refuses a line past MAX_LINE
            else:
                if derived:
                    limit = max(limit, size_limit(head + chunk[:newline]))
                head = None
        yield chunk


def read_interrupts(
    fs: HostFs,
    path: str,
    watched: Iterable[int],
    *,
    block: int = BLOCK,
    limit: int | None = None,
    known: Remembered | None = None,
    generation: int = 0,
) -> tuple[Interrupts, Remembered]:
    """Read /proc/interrupts, opened through ``fs``, ``block`` bytes at a time and parse it as they arrive
    (``parse_reading``, ``known`` its ``previous``): the same result as ``parse_interrupts`` of the whole file,
    without ever holding the whole file (8 MB on a 384-CPU host, and as much again digit-marked). Returns the reading
    and what the next reading may reuse (no rows unless ``known`` is given). FileNotFoundError when the file does not
    exist; MalformedFile past ``limit`` bytes (None: ``size_limit`` of the header, and the files' read limit until
    the header is read) or on bad content.
    """
    fd = fs.open_file(path)
    try:
        parsed = parse_reading(_blocks(fd, path, block, limit), watched, known, path=path, generation=generation)
    finally:
        os.close(fd)
    return parsed.interrupts(time.monotonic()), parsed.remembered


def size_limit(header: bytes) -> int:
    """The most bytes a /proc/interrupts with this header may hold: ``MAX_ROWS`` rows as long as the header plus
    their names (never below the read limit of the other files)."""
    return max(DEFAULT_READ_LIMIT, MAX_ROWS * (len(header) + _ROW_TAIL))


_NO_COUNTS = frozen_map()  # shared by every row without a non-zero watched count


def _split_row(
    text: bytes, ncols: int, columns: list[int], cpus: tuple[int, ...], key: str, path: str, counts: dict[int, int]
) -> bytes | None:
    """Split a row's ``text`` after its ``:`` the slow, safe way: its watched non-zero counts go into ``counts``, and
    the text after the counts is returned; None for a row with one global count (``ERR``/``MIS``), which is dropped."""
    parts = text.split(None, ncols)
    leading = 0
    while leading < min(len(parts), ncols) and parts[leading].isdigit() and len(parts[leading]) <= 20:
        leading += 1
    if leading < ncols:
        if leading <= 1 and not key.isdigit():
            return None
        # A device row always has a count per CPU: one cut short is a damaged file, not a row to drop.
        raise MalformedFile(path, f"row {key}: {leading} counts for {ncols} CPUs")
    for column in columns:
        value = int(parts[column])
        if value:
            counts[cpus[column]] = value
    return parts[ncols] if len(parts) > ncols else b""


def _new_row(key: str, tail: bytes, counts: dict[int, int], generation: int, path: str) -> InterruptRow:
    """The row ``key`` whose text after the counts is ``tail``, its chip and name split out and checked."""
    chip, name = split_tail(tail, key.isdigit())
    problem = ""
    try:  # both become label values and message text: a row whose text is not printable keeps neither
        printable(name, f"row {key}: name", _NAME_LIMIT)
        printable(chip, f"row {key}: chip", _CHIP_LIMIT)
    except ValueError as error:
        problem, chip, name = f"{path}: {error}", "", ""
    return InterruptRow(
        key=key,
        kind=classify(key, name),
        name=name,
        chip=chip,
        counts=frozen_map(counts) if counts else _NO_COUNTS,
        generation=generation,
        problem=problem,
    )


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
def watched_cpus(topology: Topology | None, state: KubeletState | None) -> CPUSet:
    """Isolated, nohz_full and exclusively pinned CPUs: whose interrupts numawatch counts.

    From the topology source's isolation (``isolcpus=`` and ``nohz_full=`` as asked on the command line, and the
    sysfs ``isolated`` and ``nohz_full`` files as in effect) and the exclusive CPUs of the kubelet_state source's
    CPU Manager state. Either source down contributes nothing: what the other knows is still watched.
    """
    cpus: set[int] = set()
    if topology is not None:
        isolation = topology.isolation
        for known in (isolation.isolcpus, isolation.nohz_full, isolation.sys_isolated, isolation.sys_nohz_full):
            if known is not None:
                cpus |= known
    if state is not None and state.cpu is not None:
        cpus |= state.cpu.exclusive_cpus
    return frozenset(cpus)


# --------------------------------------------------------------------------------------------------- reader
NEEDS = ("topology", "kubelet_state")


def _read(
    paths: Paths, known: Remembered | None, watched: CPUSet, generation: int = 0
) -> tuple[Interrupts, Remembered]:
    path = paths.procfs / "interrupts"
    try:
        return read_interrupts(paths.fs, str(path), watched, known=known, generation=generation)
    except FileNotFoundError:
        raise SourceUnavailable(f"{path} does not exist") from None


def _watched_of(inputs: Inputs | None) -> CPUSet:
    if inputs is None:
        return EMPTY
    return watched_cpus(inputs.get("topology"), inputs.get("kubelet_state"))


def read(paths: Paths, inputs: Inputs | None = None) -> Interrupts:
    """/proc/interrupts with counts for the CPUs ``inputs`` (topology, kubelet_state) say are watched; without
    inputs, none are."""
    return _read(paths, None, _watched_of(inputs))[0]


class InterruptsMemory(NamedTuple):
    """What a reading leaves for the next one (``Carried.memory``; the HostReader keeps it)."""

    known: Remembered  # the rows and the columns worked out from the header and watched CPUs
    last: Interrupts | None = None  # this reading (without its ``before``): the next one's ``before``


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading handed the previous one's memory: unchanged rows are not split and built again and the columns
    worked out from the previous header are reused. The watched CPUs are what the HostReader worked out of the
    needs (``SourceSpec.uses``: once per change of their readings). Reads the same as ``read``, with the previous
    reading as ``before`` (the rates' other end)."""
    memory: InterruptsMemory | None = refresh.memory
    watched = inputs.used if isinstance(inputs.used, frozenset) else _watched_of(inputs)
    result, known = _read(paths, memory.known if memory is not None else Remembered(), watched, refresh.generation)
    before = memory.last if memory is not None else None
    snapshot = replace(result, before=before) if before is not None else result
    return Carried(snapshot, InterruptsMemory(known, result))


SOURCE = SourceSpec(
    name="interrupts",
    read=read,
    incremental=read_incremental,
    needs=NEEDS,
    # Only the watched CPUs: a CPU Manager state rewritten for a pinned pod replaced on the same CPUs reads nothing new.
    uses=_watched_of,
    description="/proc/interrupts counts on isolated, nohz_full and exclusively pinned CPUs",
)

__all__ = [
    "BLOCK",
    "CELL",
    "MAX_ROWS",
    "NEEDS",
    "SOURCE",
    "InterruptsMemory",
    "InterruptsParse",
    "KnownRow",
    "Remembered",
    "classify",
    "parse_header",
    "parse_interrupts",
    "parse_reading",
    "read",
    "read_incremental",
    "read_interrupts",
    "size_limit",
    "split_tail",
    "watched_cpus",
]
