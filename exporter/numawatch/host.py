"""One evaluation's view of the host: every source's snapshot plus how reading it went.

Sources are independent: one that fails (missing files, malformed content, a bug) is reported down with its reason
and every other source is still read. Sources whose inputs cannot change between events (topology, kubelet config)
declare a cheap fingerprint; a ``HostReader`` re-reads them only when the fingerprint changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.model import Cgroups, GpuInventory, KubeletConfig, KubeletState, Names, Topology
from numawatch.paths import Paths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceSpec:
    name: str
    read: Callable[[Paths], Any]
    # Cheap key of everything the source's result depends on; None means "always re-read".
    fingerprint: Callable[[Paths], Hashable] | None = None
    description: str = ""
    # For a source that keeps state between readings (a parse cache, NVML counters it integrates): called once per
    # HostReader, it returns an object with ``read(paths)`` and optionally ``fingerprint(paths)`` used instead of
    # the two above, and optionally ``set_stagger(k)`` (see HostReader's ``stagger``). State lives in the reader
    # that owns it, never in module globals.
    factory: Callable[[], Any] | None = None
    # For a source that reads no files (NVML): an object with ``dump(result) -> bytes`` and ``load(data) -> result``.
    # ``numawatch capture`` stores the reading in the bundle with it and ``check --from`` reads it back instead of
    # asking the (absent) device. File-reading sources need nothing: their files are recorded as they are read.
    recording: Any | None = None


@dataclass(frozen=True)
class SourceStatus:
    name: str
    up: bool
    duration_seconds: float
    reason: str = ""  # why it is down (one line), empty when up
    cached: bool = False  # result reused because its fingerprint did not change


@dataclass(frozen=True)
class Host:
    paths: Paths
    results: Mapping[str, Any]
    statuses: Mapping[str, SourceStatus]
    timestamp: float = field(default_factory=time.time)
    # The reading before this one, for checks that need a rate (interrupts per second). Kept one deep: a previous
    # host never has a previous of its own.
    previous: Host | None = None
    # Values derived from this snapshot that several checks and the metrics need (the workloads join): computed
    # once per Host, dropped with it. Not part of equality or of a replace() copy. A HostReader's next reading
    # sees them as its ``previous``'s (``memoized``), so a value must never hold the Host itself: through the
    # Host's own ``previous`` that would chain every reading ever made.
    _memo: dict[Hashable, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The value for ``key`` derived from this host, computed on first use."""
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = compute()
            return value

    def memoized(self, key: Hashable) -> Any | None:
        """The value ``memo`` computed for ``key``, or None when none was: computes nothing. The next reading asks
        its ``previous`` this to reuse the parts of a derived value whose inputs are the same objects."""
        return self._memo.get(key)

    def get(self, name: str) -> Any | None:
        return self.results.get(name)

    @property
    def topology(self) -> Topology | None:
        return self.results.get("topology")

    @property
    def cgroups(self) -> Cgroups | None:
        return self.results.get("cgroups")

    @property
    def names(self) -> Names | None:
        return self.results.get("names")

    @property
    def kubelet_config(self) -> KubeletConfig | None:
        return self.results.get("kubelet_config")

    @property
    def kubelet_state(self) -> KubeletState | None:
        return self.results.get("kubelet_state")

    @property
    def gpus(self) -> GpuInventory | None:
        return self.results.get("gpus_sysfs")

    def down_reason(self, name: str) -> str:
        status = self.statuses.get(name)
        if status is None:
            return f"source {name} was not read"
        return status.reason or f"source {name} is down"


def _read_one(spec: SourceSpec, read: Callable[[Paths], Any], paths: Paths) -> tuple[Any | None, SourceStatus]:
    start = time.perf_counter()
    try:
        result = read(paths)
    except (SourceUnavailable, MalformedFile) as error:
        return None, SourceStatus(spec.name, False, time.perf_counter() - start, _one_line(str(error)))
    except OSError as error:
        reason = f"{error.strerror or error}: {error.filename}" if error.filename else str(error)
        return None, SourceStatus(spec.name, False, time.perf_counter() - start, _one_line(reason))
    except Exception as error:  # a bug in one source must not take the others down
        log.exception("source %s failed", spec.name)
        reason = f"internal error: {type(error).__name__}: {error}"
        return None, SourceStatus(spec.name, False, time.perf_counter() - start, _one_line(reason))
    return result, SourceStatus(spec.name, True, time.perf_counter() - start)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line[:300]


class HostReader:
    """Reads every source, reusing results of fingerprinted sources whose inputs did not change.

    ``stagger`` > 1 (serve only) lets the stateful sources that offer ``set_stagger`` re-read their slow-drifting
    files for a rotating 1/``stagger`` of their objects per reading and carry the rest over from their previous
    reading (cgroups: ``memory.numa_stat``; irqs: the affinity files), so a value may be ``stagger - 1`` readings
    old. The default, 1, reads everything every time: ``check`` (``--window`` included), ``capture`` and
    ``check --from`` always do.
    """

    def __init__(self, paths: Paths, sources: Iterable[SourceSpec] | None = None, *, stagger: int = 1) -> None:
        from numawatch.sources import SOURCES

        if stagger < 1:
            raise ValueError(f"stagger must be at least 1, got {stagger}")
        self.paths = paths
        self.sources = tuple(sources if sources is not None else SOURCES)
        self.stagger = stagger
        self._cache: dict[str, tuple[Hashable, Any, SourceStatus]] = {}
        self._stateful = {spec.name: spec.factory() for spec in self.sources if spec.factory is not None}
        if stagger > 1:
            for state in self._stateful.values():
                set_stagger = getattr(state, "set_stagger", None)
                if set_stagger is not None:
                    set_stagger(stagger)
        self._last: Host | None = None

    def invalidate(self, name: str | None = None) -> None:
        """Forget cached results (all, or one source): called on udev events and SIGHUP. A staggered stateful
        reader of the source reads everything at its next reading (``refresh_all``)."""
        if name is None:
            self._cache.clear()
        else:
            self._cache.pop(name, None)
        for source, state in self._stateful.items():
            refresh_all = getattr(state, "refresh_all", None)
            if refresh_all is not None and name in (None, source):
                refresh_all()

    def read(self) -> Host:
        results: dict[str, Any] = {}
        statuses: dict[str, SourceStatus] = {}
        for spec in self.sources:
            state = self._stateful.get(spec.name)
            read = state.read if state is not None else spec.read
            fingerprint = getattr(state, "fingerprint", None) if state is not None else spec.fingerprint
            key: Hashable = None
            if fingerprint is not None:
                start = time.perf_counter()
                try:
                    key = fingerprint(self.paths)
                except Exception:  # an unreadable fingerprint just means "read it for real"
                    key = None
                cached = self._cache.get(spec.name)
                if key is not None and cached is not None and cached[0] == key and cached[2].up:
                    results[spec.name] = cached[1]
                    statuses[spec.name] = SourceStatus(spec.name, True, time.perf_counter() - start, cached=True)
                    continue
            result, status = _read_one(spec, read, self.paths)
            if fingerprint is not None and key is not None:
                self._cache[spec.name] = (key, result, status)
            if result is not None:
                results[spec.name] = result
            statuses[spec.name] = status
        host = Host(paths=self.paths, results=results, statuses=statuses, previous=self._last)
        last = replace(host, previous=None)  # one deep: the next reading's previous has no previous
        # The copy shares the memo dict (replace() would start an empty one), so what the evaluation of this
        # reading memoises is there for the next reading to reuse (the workloads join of unchanged pods).
        object.__setattr__(last, "_memo", host._memo)
        self._last = last
        return host


def read_host(paths: Paths, sources: Iterable[SourceSpec] | None = None) -> Host:
    """Read every source once, without caching (``numawatch check``)."""
    return HostReader(paths, sources).read()


def read_host_window(paths: Paths, seconds: float, sources: Iterable[SourceSpec] | None = None) -> Host:
    """Read the host twice, ``seconds`` apart; the second reading has the first as ``previous``.

    ``numawatch check --window`` uses it so that rate checks (interrupts on isolated CPUs, ticks on nohz_full CPUs)
    can judge a real interval; ``window_seconds(host)`` says how long it was. With ``seconds <= 0`` it reads once.
    """
    reader = HostReader(paths, sources)
    if seconds <= 0:
        return reader.read()
    reader.read()
    time.sleep(seconds)
    return reader.read()


def window_seconds(host: Host) -> float | None:
    """Seconds between ``host.previous`` and ``host``, or None with a single reading."""
    if host.previous is None:
        return None
    return host.timestamp - host.previous.timestamp
