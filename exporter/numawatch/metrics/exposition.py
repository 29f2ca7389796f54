"""The Prometheus text exposition format (0.0.4) and OpenMetrics 1.0.0, written directly: the bytes ``/metrics``
serves.

``write(families)`` takes client_python metric families (``name``, ``documentation``, ``type``, ``samples`` of
``Sample(name, labels, value, timestamp, ...)``) and returns exactly what ``prometheus_client.generate_latest``
returns for a registry holding them with their ``_created`` samples left out; ``write(families, openmetrics=True)``
exactly what ``prometheus_client.openmetrics.exposition.generate_latest`` returns for them (tests/test_exposition.py
holds both equal, byte for byte):

- ``# HELP <name> <help>`` then ``# TYPE <name> <type>``. The text format escapes ``\\`` and newline in the help,
  exposes a counter as ``<name>_total``, an info family as ``<name>_info`` of type gauge, a stateset as a gauge, a
  gauge histogram as a histogram and an unknown family as untyped. OpenMetrics escapes ``"`` in the help too, keeps
  the family's own name and type (a counter's family is ``<name>``, its samples ``<name>_total``), adds ``# UNIT``
  for a family with a unit and ends with ``# EOF``;
- one line per sample, ``<name>{<label>="<value>",...} <value>[ <timestamp>]``, labels sorted by name, values
  with ``\\``, ``"`` and newline escaped, no braces without labels; timestamps in milliseconds (text) or as given,
  in seconds (OpenMetrics);
- values as Go prints float64 (``1.0``, ``2.5e+06``, ``+Inf``, ``-Inf``, ``NaN``);
- metric and label names outside the legacy character set with each offending character replaced by ``_`` (an
  OpenMetrics sample name also loses its colons, as client_python writes it);
- in the text format, the OpenMetrics-only samples ``_gsum`` and ``_gcount`` moved into a gauge family of their own
  after the family's other samples, and ``_created`` samples left out: the classic format has no created
  timestamps, and client_python's gauge ``<name>_created`` would be one more series per counter for every scraper
  that reads it (OpenMetrics carries them where the spec puts them, next to the counter's ``_total``).

Exemplars and native histograms are not written (no family of numawatch has them): a sample with an exemplar is an
error naming its family.

Why not generate_latest: it validates and escapes every label *name* of every sample (a regex match per label of every
series: most of the render on a large node). Here names are checked once per family and label set, and the
line is built from a ``%`` template; label values are escaped only when the finished line shows they need it.
docs/performance.md has the measured difference.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.samples import Sample

__all__ = ["CounterRows", "GaugeRows", "LineCache", "format_value", "write", "write_segments"]

# The legacy name sets, matched as client_python matches them (``$``, so a trailing newline passes as it does there).
_LEGACY_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LEGACY_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# Type munging of the classic text format: (suffix of the exposed name, type shown on the TYPE line).
_EXPOSED = {
    "counter": ("_total", "counter"),
    "info": ("_info", "gauge"),
    "stateset": ("", "gauge"),
    "gaugehistogram": ("", "histogram"),
    "unknown": ("", "untyped"),
}
_DEFERRED = ("_gcount", "_gsum")  # sorted: the order their families follow the main one in the text format
_CREATED = "_created"
_INF = math.inf
# Integers in this range print as "<n>.0" in Go's float formatting; outside it the exponent form may start.
_INT_LOW, _INT_HIGH = -(10**15), 1_000_000
_INT_EXACT = 10**15  # below this an integer's float repr is its digits and ".0" (no exponent, no rounding)
# Bytes of a chunk of a big row family, on average (write_segments): the gzip body deflates a changed chunk with
# what it is grouped with, so smaller chunks deflate fewer bytes per changed row and compress worse.
CHUNK_BYTES = 8192


def _escape_name(name: str, legacy: re.Pattern[str], colon: bool) -> str:
    """A metric (``colon``) or label name as the "underscores" escaping writes it: names in the legacy set as they
    are, any other character replaced by ``_`` (ASCII letters and ``_`` anywhere, digits after the first)."""
    if not name or legacy.match(name):
        return name
    return "".join(
        char
        if ("a" <= char <= "z" or "A" <= char <= "Z" or char == "_" or ("0" <= char <= "9" and index > 0)
            or (colon and char == ":"))
        else "_"
        for index, char in enumerate(name)
    )


def metric_name(name: str) -> str:
    return _escape_name(name, _LEGACY_METRIC_NAME, True)


# client_python's OpenMetrics writer escapes every sample name character by character with the label-name rule: no
# colon survives, and no regex shortcut lets a trailing newline through.
_OPENMETRICS_SAMPLE_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def openmetrics_sample_name(name: str) -> str:
    if _OPENMETRICS_SAMPLE_NAME.fullmatch(name):
        return name
    return "".join(
        char if ("a" <= char <= "z" or "A" <= char <= "Z" or char == "_" or ("0" <= char <= "9" and index > 0))
        else "_"
        for index, char in enumerate(name)
    )


def label_name(name: str) -> str:
    return _escape_name(name, _LEGACY_LABEL_NAME, False)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: Any) -> str:
    """A sample value as Go formats a float64 (what client_python's ``floatToGoString`` reproduces)."""
    if type(value) is int:
        if _INT_LOW < value < _INT_HIGH:
            return f"{value}.0"  # the common case (counts, flags): exactly repr(float(value))
        if _INT_HIGH <= value < _INT_EXACT:
            # Byte counts: a float holds these integers exactly, so repr(float(value)) prints their digits; Go's
            # exponent form is the first digit, the rest without trailing zeros, and the exponent.
            digits = str(value)
            rest = digits[1:].rstrip("0")
            return f"{digits[0]}.{rest}e+{len(digits) - 1:02d}" if rest else f"{digits[0]}e+{len(digits) - 1:02d}"
    number = float(value)
    if number == _INF:
        return "+Inf"
    if number == -_INF:
        return "-Inf"
    if number != number:
        return "NaN"
    text = repr(number)
    dot = text.find(".")
    # Go switches to the exponent form from 1e21 down to 7 integer digits; Python only at 1e16.
    if number > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


class _Template:
    """How the samples with one name and one set of label names are written: a ``%`` template and a getter."""

    __slots__ = ("name", "quotes", "size", "text", "values")

    def __init__(self, name: str, keys: Iterable[str], openmetrics: bool = False) -> None:
        ordered = sorted(keys)
        self.name = name
        self.size = len(ordered)
        self.quotes = 2 * len(ordered)
        # Escaped names use only [a-zA-Z0-9_:], so no '%' can reach the template from a name.
        head = openmetrics_sample_name(name) if openmetrics else metric_name(name)
        if ordered:
            labels = ",".join(f'{label_name(key)}="%s"' for key in ordered)
            self.text = f"{head}{{{labels}}} %s"
        else:
            self.text = f"{head} %s"
        self.values: Callable[[Any], tuple[Any, ...]]
        if len(ordered) == 1:
            (key,) = ordered
            self.values = lambda labels: (labels[key],)
        elif ordered:
            self.values = itemgetter(*ordered)
        else:
            self.values = lambda labels: ()


class _Rows:
    """A family whose series are rows: label values in the order of its ``labels``, then the value.

    The big per-container and per-CPU families have a thousand series each; ``write`` writes their rows through one
    template, without the label dict and ``Sample`` that ``add_metric`` builds per series (about half the cost of
    those families). ``samples`` builds those on demand, so the family is still an ordinary client_python family
    to anything else (the tests, generate_latest): asking for them turns the rows into samples for good, so
    ``add_metric`` after that appends to the very list they are in."""

    _labelnames: tuple[str, ...]
    name: str
    rows: list[tuple[Any, ...]]
    sample_suffix = ""

    @property
    def samples(self) -> list[Any]:
        if self.rows:
            name, labels = self.name + self.sample_suffix, self._labelnames
            self._samples.extend(Sample(name, dict(zip(labels, row[:-1], strict=True)), row[-1]) for row in self.rows)
            self.rows.clear()
        return self._samples

    @samples.setter
    def samples(self, value: list[Any]) -> None:  # Metric.__init__ starts it empty
        self._samples = value


class GaugeRows(_Rows, GaugeMetricFamily):
    """A gauge family filled through ``rows.append((*label_values, value))``."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.rows = []
        super().__init__(name, documentation, labels=labels)


class CounterRows(_Rows, CounterMetricFamily):
    """A counter family filled through ``rows.append((*label_values, value))`` (its samples are ``<name>_total``)."""

    sample_suffix = "_total"

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.rows = []
        super().__init__(name, documentation, labels=labels)


class _Chunk(NamedTuple):
    """Consecutive rows of a big row family as the last write wrote them."""

    rows: list[tuple[Any, ...]]
    segment: bytes  # their lines, each ended by a newline, UTF-8
    lines: dict[tuple[Any, ...], str]  # each row's line (empty where a row is unhashable)
    closed: bool  # its last row is a boundary (else it is the family's last chunk, ended by the rows' end)


class _Written(NamedTuple):
    """One family as the last write wrote it: what its bytes were made of, and the bytes."""

    items: list[Any] | None  # its rows (a row family in one segment) or its samples, copied
    values: bytes | None  # a family of samples: its values as float64s, bit for bit
    segments: list[bytes]  # its bytes: one segment, or (a row family in chunks) its header and its chunks' segments
    chunks: list[_Chunk] | None  # a row family in chunks: the chunks
    per_chunk: int  # a row family: the rows a chunk holds on average, fixed when the family is first written; else 0


class LineCache:
    """What the last ``write`` wrote, for the next one (one cache serves one sequence of writes, the server's):

    - a family made of the same rows or samples as the last write's family of that name, help, type and unit is
      written as the very bytes it was written as then: one list comparison instead of formatting it again (most of
      a node's families are placement and configuration, which stay put);
    - within a row family that did change, a row that comes back unchanged (same label values, same value) is the
      same line, found by one dict lookup instead of formatted again;
    - a big row family (rows of ``CHUNK_BYTES`` or more, twice over) is written in chunks of rows, each cut after a
      row chosen by its label values alone (``_chunks``), and kept chunk by chunk: a chunk made of the last write's
      rows is the very bytes it was then, whatever changed elsewhere in the family (a pod's rows coming or going, a
      value moving), and a changed chunk finds the lines of its unchanged rows in its last version.

    Size: only the last finished write's families, chunks and lines are kept (each write replaces them), plus those
    of the write under way, so a series that went away is forgotten at once and the cache never holds more than one
    exposition besides the one being written (tests/test_cache_bounds.py). Rows must be hashable (label strings and
    a number), a family whose rows are not is written uncached. Rows equal as Python values are one line: 0 and
    -0.0 would both print as the first one seen (no family of ours makes a negative zero; every other pair of equal
    numbers prints the same anyway), and a row family whose rows all equal the last write's is that write's bytes,
    which are the lines the line cache would give it. A family of samples is reused only where equal Python values
    are sure to print alike: its values the same float64s bit for bit (so 0 and -0.0 stay apart), and in the last
    write every label value a ``str`` and no sample with a timestamp (1 and 1.0 print apart there), an exemplar or a
    native histogram.
    """

    def __init__(self) -> None:
        self.previous: dict[tuple[str, tuple[str, ...]], dict[tuple[Any, ...], str]] = {}
        self.current: dict[tuple[str, tuple[str, ...]], dict[tuple[Any, ...], str]] = {}
        self.previous_families: dict[tuple[Any, ...], _Written] = {}
        self.current_families: dict[tuple[Any, ...], _Written] = {}

    def lines(self, sample_name: str, labelnames: tuple[str, ...]) -> tuple[dict[tuple[Any, ...], str], dict]:
        """(the last write's lines of this family, where this write's go)."""
        key = (sample_name, labelnames)
        known = self.previous.get(key, {})
        kept = self.current.get(key)
        if kept is None or kept is known:  # never write into the last write's lines (a reused family's, carried)
            kept = self.current[key] = {}
        return known, kept

    def start(self) -> None:
        """Forget what a write that failed half-way left for the next one (the last finished write's stays)."""
        self.current, self.current_families = {}, {}

    def done(self) -> None:
        self.previous, self.current = self.current, {}
        self.previous_families, self.current_families = self.current_families, {}


_VALUE = attrgetter("value")


def _float64s(values: Iterable[Any]) -> bytes | None:
    """``values`` as float64s, the bytes of them: equal bytes print alike (format_value prints a float64). None
    when one is not a number a float64 holds."""
    try:
        return array("d", values).tobytes()
    except (TypeError, OverflowError, ValueError):
        return None


def _plain(samples: Sequence[Any]) -> bool:
    """Whether samples equal to these as values are sure to be written as these are: label values all ``str``, no
    timestamp (1 and 1.0 are equal and print apart), exemplar or native histogram."""
    for sample in samples:
        if sample.timestamp is not None or sample.exemplar is not None or sample.native_histogram is not None:
            return False
        for value in sample.labels.values():
            if type(value) is not str:
                return False
    return True


class _RowFormat:
    """How the rows of one row family are written: its template, and the label values of a row in the order the
    template takes them."""

    __slots__ = ("pick", "quotes", "text")

    def __init__(self, metric: _Rows, sample_name: str, openmetrics: bool) -> None:
        names = metric._labelnames
        template = _Template(sample_name, names, openmetrics)
        order = sorted(range(len(names)), key=names.__getitem__)  # the template takes the values in label-name order
        size = len(names)
        # The label values of a row in that order, as a tuple (itemgetter of one index returns the item itself).
        self.pick: Callable[[tuple[Any, ...]], tuple[Any, ...]]
        if order == list(range(size)):
            self.pick = itemgetter(slice(0, size))
        elif size == 1:
            self.pick = lambda row: (row[0],)
        else:
            self.pick = itemgetter(*order)
        self.text, self.quotes = template.text, template.quotes

    def write(
        self,
        rows: Iterable[tuple[Any, ...]],
        out: list[str],
        known: dict[tuple[Any, ...], str],
        kept: dict[tuple[Any, ...], str] | None,
    ) -> None:
        """The lines of ``rows``, appended to ``out``: a row in ``known`` (the last write's lines) is its line there.
        Every row's line goes into ``kept`` (the next write's ``known``) as long as the rows are hashable."""
        pick, text, quotes = self.pick, self.text, self.quotes
        for row in rows:
            if kept is not None:
                try:
                    line = known.get(row)
                except TypeError:  # an unhashable label value: nothing more of this family can be kept
                    kept = None
                else:
                    if line is not None:
                        kept[row] = line
                        out.append(line)
                        continue
            values = pick(row)
            value = row[-1]
            rendered = f"{value}.0" if type(value) is int and _INT_LOW < value < _INT_HIGH else format_value(value)
            line = text % (*values, rendered)
            if line.count('"') != quotes or "\\" in line or "\n" in line:
                line = text % (*(escape_label_value(item) for item in values), rendered)
            if kept is not None:
                kept[row] = line
            out.append(line)

    def chunk(self, rows: list[tuple[Any, ...]], closed: bool, known: dict[tuple[Any, ...], str]) -> _Chunk:
        lines: list[str] = []
        kept: dict[tuple[Any, ...], str] = {}
        self.write(rows, lines, known, kept)
        return _Chunk(rows, ("\n".join(lines) + "\n").encode("utf-8"), kept, closed)


def _write_rows(
    metric: _Rows, sample_name: str, out: list[str], cache: LineCache | None = None, openmetrics: bool = False
) -> None:
    """The rows of a row family, written as ``_family`` writes the samples they stand for."""
    known, kept = cache.lines(sample_name, tuple(metric._labelnames)) if cache is not None else ({}, None)
    _RowFormat(metric, sample_name, openmetrics).write(metric.rows, out, known, kept)


def _chunks(metric: _Rows, per_chunk: int, before: Sequence[_Chunk], openmetrics: bool) -> list[_Chunk]:
    """``metric``'s rows cut after each boundary row (one whose label values hash to 0 modulo ``per_chunk``): a chunk
    made of the rows of one of ``before`` (the last write's chunks) is that chunk, its bytes not written again.

    Whether a row is a boundary depends on its label values alone, so a row that comes, goes or changes its value
    moves no boundary but its own: every other chunk comes back with the rows it had. The last write's chunks are
    tried in order, each where the one before it ended, so an unchanged stretch costs one comparison per chunk and
    no hashing; only where a comparison fails are the rows hashed to find where the chunk ends. Raises TypeError on
    an unhashable label value."""
    rows = metric.rows
    chunks: list[_Chunk] = []
    ends: dict[tuple[Any, ...], int] | None = None  # the last write's chunks by the label values of their last row
    form: _RowFormat | None = None  # made for the first chunk written (none when the family is unchanged)
    count, start, expected = len(rows), 0, 0
    while start < count:
        if expected < len(before):
            chunk = before[expected]
            end = start + len(chunk.rows)
            # The family's last chunk may end without a boundary: it is that chunk only where the rows end too.
            if rows[start:end] == chunk.rows and (chunk.closed or end == count):
                chunks.append(chunk)
                start, expected = end, expected + 1
                continue
        end = start
        while end < count and hash(rows[end][:-1]) % per_chunk:
            end += 1
        closed = end < count
        end += closed
        piece = rows[start:end]
        if ends is None:
            ends = {chunk.rows[-1][:-1]: index for index, chunk in enumerate(before)}
        index = ends.get(piece[-1][:-1])
        old = before[index] if index is not None else None
        if old is not None and old.closed == closed and old.rows == piece:
            chunks.append(old)
        else:
            # The rows' lines are most likely those of the chunk ending where this one does (values changed, rows
            # came or went) or of the one that was tried here (a boundary row came: this is its first part).
            tried = before[expected].lines if expected < len(before) else {}
            known = tried if old is None else old.lines if old.lines is tried else {**tried, **old.lines}
            if form is None:
                form = _RowFormat(metric, metric.name + metric.sample_suffix, openmetrics)
            chunks.append(form.chunk(piece, closed, known))
        if index is not None:
            expected = index + 1
        start = end
    return chunks


def _help(documentation: str, openmetrics: bool) -> str:
    escaped = documentation.replace("\\", "\\\\").replace("\n", "\\n")
    return escaped.replace('"', '\\"') if openmetrics else escaped


def _header(metric: Any, openmetrics: bool) -> list[str]:
    """A family's HELP and TYPE lines (and UNIT, in OpenMetrics)."""
    documentation = _help(metric.documentation, openmetrics)
    if openmetrics:
        exposed = metric_name(metric.name)
        header = [f"# HELP {exposed} {documentation}\n# TYPE {exposed} {metric.type}"]
        if metric.unit:
            header.append(f"# UNIT {exposed} {metric.unit}")
        return header
    suffix, shown = _EXPOSED.get(metric.type, ("", metric.type))
    exposed = metric_name(metric.name + suffix)
    return [f"# HELP {exposed} {documentation}\n# TYPE {exposed} {shown}"]


def _family(metric: Any, out: list[str], cache: LineCache | None = None, openmetrics: bool = False) -> None:
    name = metric.name
    documentation = _help(metric.documentation, openmetrics)
    out.extend(_header(metric, openmetrics))
    if isinstance(metric, _Rows) and not metric._samples:  # filled through add_metric too: the general way
        _write_rows(metric, name + metric.sample_suffix, out, cache, openmetrics)
        return
    # The text format's special samples: the created ones are left out, the others follow in gauges of their own.
    special: dict[str, str | None] = {}
    if not openmetrics:
        special = {name + suffix: suffix for suffix in _DEFERRED}
        special[name + _CREATED] = None
    deferred: dict[str, list[str]] = {}
    dropped: list[str] = []
    templates: dict[tuple[str, frozenset[str]], _Template] = {}
    template: _Template | None = None
    lines = out
    for sample in metric.samples:
        sample_name, labels, value = sample.name, sample.labels, sample.value
        # Samples of a family nearly always share one name and label set, so the last template is tried first: with
        # as many labels as it has, a label set it does not have misses one of its names (KeyError).
        try:
            if template is None or sample_name != template.name or len(labels) != template.size:
                raise KeyError(sample_name)
            values = template.values(labels)
        except KeyError:
            key = (sample_name, frozenset(labels))
            template = templates.get(key)
            if template is None:
                template = templates[key] = _Template(sample_name, labels, openmetrics)
            if sample_name in special:
                extra = special[sample_name]
                lines = dropped if extra is None else deferred.setdefault(extra, [])
            else:
                lines = out
            values = template.values(labels)
        if openmetrics:
            if sample.exemplar is not None:
                raise ValueError(f"{name}: exemplars are not written")
            if sample.native_histogram is not None:
                continue  # OpenMetrics 1.0 has none; client_python leaves them out below 2.0.0 too
        # format_value's common case inlined: most samples are small integers (flags, counts).
        rendered = f"{value}.0" if type(value) is int and _INT_LOW < value < _INT_HIGH else format_value(value)
        line = template.text % (*values, rendered)
        # The template holds two quotes per label and no backslash or newline: anything more came from a value that
        # needs escaping (rare), and only then are the values escaped one by one.
        if line.count('"') != template.quotes or "\\" in line or "\n" in line:
            line = template.text % (*(escape_label_value(text) for text in values), rendered)
        if sample.timestamp is not None:  # OpenMetrics: seconds as given; text: milliseconds
            stamp = sample.timestamp if openmetrics else f"{int(float(sample.timestamp) * 1000):d}"
            line = f"{line} {stamp}"
        lines.append(line)
    for extra in sorted(deferred):
        exposed_extra = metric_name(name + extra)
        out.append(f"# HELP {exposed_extra} {documentation}\n# TYPE {exposed_extra} gauge")
        out.extend(deferred[extra])


def _segments(metric: Any, cache: LineCache | None, openmetrics: bool) -> list[bytes]:
    """One family's lines, each ended by a newline, UTF-8, in one segment or (a big row family, with ``cache``) in
    several: the last write's bytes objects where they are made of what they were."""
    rows = isinstance(metric, _Rows) and not metric._samples  # as _family decides
    if cache is None:
        lines: list[str] = []
        _family(metric, lines, None, openmetrics)
        return [("\n".join(lines) + "\n").encode("utf-8")]
    labelnames = tuple(metric._labelnames) if rows else None
    # Everything the family's lines are made of besides its items (one cache may even serve both formats).
    key = (metric.name, metric.type, metric.documentation, metric.unit, labelnames, openmetrics)
    before = cache.previous_families.get(key) if key not in cache.current_families else None
    if rows:
        per_chunk = before.per_chunk if before is not None else 0
        if not per_chunk and metric.rows:  # fixed at first sight, so that the boundaries stay where they are
            first: list[str] = []
            _RowFormat(metric, metric.name + metric.sample_suffix, openmetrics).write(metric.rows[:1], first, {}, None)
            per_chunk = max(1, CHUNK_BYTES // (len(first[0]) + 1))
        if per_chunk and len(metric.rows) >= 2 * per_chunk:
            return _row_chunks(metric, key, before, per_chunk, cache, openmetrics)
    items = metric.rows if rows else metric.samples
    # Equal rows are what the line cache would write as the last write's lines anyway; samples must also have the
    # same float64s (that cache never saw them, so 0 and -0.0 must stay apart).
    if (
        before is not None
        and before.items is not None
        and items == before.items
        and (rows or _float64s(map(_VALUE, items)) == before.values)
    ):
        cache.current_families[key] = before
        if rows:  # its lines stay known for the next write, which may change a row of it
            line_key = (metric.name + metric.sample_suffix, tuple(metric._labelnames))
            known = cache.previous.get(line_key)
            if known is not None:
                cache.current.setdefault(line_key, known)
        return before.segments
    lines = []
    _family(metric, lines, cache, openmetrics)
    segments = [("\n".join(lines) + "\n").encode("utf-8")]
    if rows:
        cache.current_families[key] = _Written(list(items), None, segments, None, per_chunk)
    elif _plain(items):
        values = _float64s(map(_VALUE, items))
        if values is not None:
            cache.current_families[key] = _Written(list(items), values, segments, None, 0)
    return segments


def _row_chunks(
    metric: _Rows, key: tuple[Any, ...], before: _Written | None, per_chunk: int, cache: LineCache, openmetrics: bool
) -> list[bytes]:
    """A big row family as its header and its chunks (``_chunks``), each a segment."""
    if before is not None and before.chunks is not None:
        previous, header = before.chunks, before.segments[0]  # the header is made of the family's key alone
    else:
        previous, header = [], ("\n".join(_header(metric, openmetrics)) + "\n").encode("utf-8")
    try:
        chunks = _chunks(metric, per_chunk, previous, openmetrics)
    except TypeError:  # an unhashable label value: the family is written whole, uncached
        return _segments(metric, None, openmetrics)
    segments = [header, *(chunk.segment for chunk in chunks)]
    cache.current_families[key] = _Written(None, None, segments, chunks, per_chunk)
    return segments


def write_segments(
    families: Iterable[Any], cache: LineCache | None = None, *, openmetrics: bool = False
) -> list[bytes]:
    """``write``'s bytes cut where one family ends and the next begins (OpenMetrics' ``# EOF`` a segment of its own),
    and with ``cache`` a big row family also into its header and chunks of rows (about ``CHUNK_BYTES`` each, cut
    after rows chosen by their label values alone): ``b"".join`` of them is ``write``'s. A family, or a chunk of
    rows, that the last write with ``cache`` wrote the same is the very same bytes objects, so a reader of the
    segments (the gzip body) can tell it unchanged by identity."""
    segments: list[bytes] = []
    if cache is not None:
        cache.start()
    for metric in families:
        try:
            segments.extend(_segments(metric, cache, openmetrics))
        except Exception as error:  # as generate_latest does: say which family could not be written
            error.args = (*(error.args or ("",)), metric)
            raise
    if cache is not None:
        cache.done()
    if openmetrics:
        segments.append(b"# EOF\n")
    return segments


def write(families: Iterable[Any], cache: LineCache | None = None, *, openmetrics: bool = False) -> bytes:
    """The exposition of ``families``, in order, UTF-8: the text format 0.0.4, or OpenMetrics 1.0.0. With ``cache``
    (kept between writes of one format by one caller), families and rows of row families that the last write wrote
    too are not formatted again."""
    return b"".join(write_segments(families, cache, openmetrics=openmetrics))
