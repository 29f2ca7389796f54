"""One evaluation's view of the host: every source's snapshot plus how reading it went.

Sources are independent unless they declare otherwise: one that fails (missing files, malformed content, a bug) is
reported down with its reason and every other source is still read. A source that builds on another's snapshot
names it in ``needs``: the reader reads sources in dependency order and hands each one the snapshots it needs
(``Inputs``), so no source reads another's files. Sources whose inputs cannot change between events (topology,
kubelet config) declare a cheap fingerprint; a ``HostReader`` re-reads them only when the fingerprint, or the
reading of a source they need, changes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from numawatch.descriptors import starved
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.model.cluster import ClusterView, OwnPod
from numawatch.model.gpu import GpuHolders, GpuInventory, NvmlSnapshot
from numawatch.model.interrupts import Interrupts, Irqbalance, Irqs
from numawatch.model.kernel import CpuIdle, InterSocketTraffic, KernelSettings, NumaCounters
from numawatch.model.kubelet import KubeletConfig, KubeletState, PodResources
from numawatch.model.pci import PciTopology
from numawatch.model.topology import Topology
from numawatch.model.workloads import Cgroups, Names, PodsUsage
from numawatch.paths import Paths
from numawatch.refresh import POLICIES, Carried, Policy, Turns, policy_of
from numawatch.source import Inputs, ReaderContext, SourceSpec, dependency_order
from numawatch.sources import SOURCES

if TYPE_CHECKING:
    from numawatch.nvml_session import NvmlSession

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# Recorded (Host.recording) when what is recorded read the previous Host: a value derived from it is never reused.
VOLATILE = "<previous reading>"
# The key under which Derived.touched keeps a shared set of keys (under itself).
_TOUCHED = "derived.touched"


@contextlib.contextmanager
def _collecting(stack: list[set[Any]]) -> Iterator[set[Any]]:
    """A new set on top of ``stack`` for the block to fill; on leaving, what it holds counts for the block around
    it too (a memo computed inside a check: what the memo read, the check read)."""
    collected: set[Any] = set()
    stack.append(collected)
    try:
        yield collected
    finally:
        stack.pop()
        if stack:
            stack[-1].update(collected)


@dataclass(frozen=True)
class SourceStatus:
    name: str
    up: bool
    duration_seconds: float
    reason: str = ""  # why it is down (one line), empty when up
    cached: bool = False  # result reused: its fingerprint did not change, or the source found nothing changed
    starved: bool = False  # down for lack of file descriptors (EMFILE, ENFILE): says nothing about the host


class Derived:
    """Values derived from readings (the workloads join of a pod, its metric rows, the device IRQ join) that the
    next reading may reuse: one per HostReader, shared by its Hosts. A key names everything the value was derived
    from by generation numbers (``Host.generation`` of a source, ``generation`` of an object such as a PodCgroup),
    never by object identity, so a value found under a key is right for any reading with those generations.

    An entry not asked for during a reading is dropped at the next one (the values of a deleted pod do not outlive
    it by more than a reading): entries asked for move from the previous reading's table to this one's.

    Size: the keys asked for or stored at this reading and the previous one, no more (two tables, swapped at each
    ``next_reading``). Per reading that is a few entries per live pod (its join, its metric rows, each pod check's
    verdict), one per check and metric family reused, and one shared key set per distinct set (``touched``); a pod
    that goes leaves nothing after the reading that follows (tests/test_cache_bounds.py holds it through a thousand
    readings of churning pods).
    """

    __slots__ = ("_current", "_kept", "_previous", "_touching")

    def __init__(self) -> None:
        self._current: dict[Hashable, Any] = {}  # what this reading asked for or stored
        self._previous: dict[Hashable, Any] = {}  # what the previous one did: dropped at the next reading
        self._touching: list[set[Hashable]] = []  # the keys asked for or stored inside each ``touching`` block
        # The key sets ``keep`` carried over at this reading, by identity (``touched`` hands equal sets out as one
        # object): the pod checks share one set of per-pod keys, carried once. Emptied at every reading.
        self._kept: dict[int, frozenset[Hashable]] = {}

    def next_reading(self) -> None:
        """A new reading starts: what the last one did not ask for is forgotten at the one after."""
        self._previous, self._current = self._current, {}
        self._kept = {}

    def touched(self, keys: set[Hashable]) -> frozenset[Hashable]:
        """``keys`` as a frozenset, the very object an equal set stored at this or the previous reading is (kept in
        the table under itself), so that ``keep`` carries each distinct set once per reading."""
        frozen = frozenset(keys)
        if not frozen:
            return frozen
        key = (_TOUCHED, frozen)
        found = self.get(key)
        if found is None:
            self.put(key, frozen)
            return frozen
        shared: frozenset[Hashable] = found
        return shared

    def touching(self) -> contextlib.AbstractContextManager[set[Hashable]]:
        """The keys asked for (``get``) or stored (``put``) inside the block: what a value made there was derived
        through, for ``keep`` to carry over when that value is handed out again without being made (``Host.reused``),
        so that an incremental value it went through (the device IRQ join) is not forgotten meanwhile."""
        return _collecting(self._touching)

    def keep(self, keys: frozenset[Hashable]) -> None:
        """Carry the values under ``keys`` into this reading, as asking for each of them would, and the shared set
        itself (``touched``)."""
        self.note(keys)
        if not keys or self._kept.get(id(keys)) is keys:
            return
        self._kept[id(keys)] = keys
        current, previous = self._current, self._previous
        for key in (keys - current.keys()) | {(_TOUCHED, keys)}:  # a set difference in C: most are here already
            found = previous.get(key)
            if found is not None:
                current[key] = found

    def note(self, keys: Iterable[Hashable]) -> None:
        """Count ``keys`` as touched inside the ``touching`` block under way (a memo's, used again)."""
        if self._touching:
            self._touching[-1].update(keys)

    def get(self, key: Hashable) -> Any | None:
        """The value stored under ``key`` at this or the previous reading, None when there is none."""
        if self._touching:
            self._touching[-1].add(key)
        found = self._current.get(key)
        if found is None:
            found = self._previous.get(key)
            if found is not None:
                self._current[key] = found
        return found

    def put(self, key: Hashable, value: Any) -> None:
        if self._touching:
            self._touching[-1].add(key)
        self._current[key] = value

    def reuse(self, key: Hashable, inputs: Hashable, make: Callable[[], _T]) -> _T:
        """``make()``, or the value it made under ``key`` at this or the previous reading when ``inputs`` were equal
        then. ``inputs`` must name everything ``make`` reads (generation numbers, small values)."""
        found = self.get(key)
        if found is not None and found[0] == inputs:
            return found[1]
        value = make()
        self.put(key, (inputs, value))
        return value

    def __len__(self) -> int:
        return len(self._current.keys() | self._previous.keys())

    def __iter__(self) -> Iterator[Hashable]:
        """The keys held (for tests and debugging)."""
        return iter(self._current.keys() | self._previous.keys())


@dataclass(frozen=True)
class Host:
    paths: Paths
    results: Mapping[str, Any]
    statuses: Mapping[str, SourceStatus]
    timestamp: float = field(default_factory=time.time)
    # The reading before this one, for checks that need a rate (interrupts per second, ``check --window``). Kept one
    # deep: a previous host never has a previous of its own. Never for skipping work: that is ``derived``.
    previous: Host | None = None
    # Per source, the HostReader's count of its real readings (not answered from its fingerprint cache, nor found
    # unchanged by the source itself: ``Carried.unchanged``): what ``derived`` keys values on. Empty for a Host not
    # made by a HostReader.
    generations: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    # What the HostReader's readings derived and the next may reuse, by generation numbers (``Derived``); a Host
    # not made by a HostReader has its own, empty one.
    derived: Derived = field(default_factory=Derived, compare=False, repr=False)
    # Values derived from this snapshot that several checks and the metrics need (the workloads join): computed
    # once per Host, dropped with it. Not part of equality or of a replace() copy.
    _memo: dict[Hashable, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    # What the checks being run read of this Host (``recording``): a stack of the sources' names, one set per
    # recording under way (a memo computed inside a check records into its own, then hands it to the check's).
    _reads: list[set[str]] = field(default_factory=list, init=False, compare=False, repr=False)
    _memo_reads: dict[Hashable, frozenset[str]] = field(default_factory=dict, init=False, compare=False, repr=False)
    # The ``derived`` keys each memo went through (``Derived.touching``), counted as touched by every later user.
    _memo_touched: dict[Hashable, frozenset[Hashable]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The value for ``key`` derived from this host, computed on first use. What computing it read of the Host
        counts as read by whoever asks for it (``recording``), at the first use and every later one."""
        try:
            value = self._memo[key]
        except KeyError:
            with self.recording() as read, self.derived.touching() as touched:
                value = self._memo[key] = compute()
            self._memo_reads[key] = frozenset(read)
            self._memo_touched[key] = frozenset(touched)
            return value
        if self._reads:
            self._reads[-1].update(self._memo_reads.get(key, ()))
        touched_before = self._memo_touched.get(key)
        if touched_before:
            self.derived.note(touched_before)
        return value

    def recording(self) -> contextlib.AbstractContextManager[set[str]]:
        """The names of the sources read of this Host inside the block (their results, down reasons or generations,
        directly or through a memo; ``VOLATILE`` when something read the previous Host), for a value derived from
        them that may be reused while their generations are the same (``checks.evaluate``)."""
        return _collecting(self._reads)

    def reads_previous(self) -> None:
        """What is being recorded read the previous Host (``previous``): its generations do not say it."""
        if self._reads:
            self._reads[-1].add(VOLATILE)

    def _result(self, name: str) -> Any | None:
        if self._reads:
            self._reads[-1].add(name)
        return self.results.get(name)

    def derive(self, key: Hashable, sources: tuple[str, ...], make: Callable[[], _T], extra: Hashable = ()) -> _T:
        """``make()``, reused from an earlier reading while the generations of ``sources`` (every source ``make``
        reads of this Host) and ``extra`` (what else it reads: the intent's settings, cheap to compare) are the
        same (``Derived.reuse``); made anew for a Host whose generations are unknown (not a HostReader's)."""
        if self._reads:
            self._reads[-1].update(sources)
        generations = tuple(self.generations.get(name) for name in sources)
        if None in generations:
            return make()
        return self.derived.reuse(key, (generations, extra), make)

    def reused(
        self, key: Hashable, owner: Hashable, make: Callable[[], _T], keep: Callable[[_T], bool] | None = None
    ) -> _T:
        """``make()``, or the value it made under ``key`` at an earlier reading of this HostReader while ``owner`` (the
        version of the intent it was made for: ``Intent.version``) is equal and every source ``make`` read then
        (``recording``) has the same generation: for a value that is a function of the Host and that intent alone (a
        check's verdict, a metric family). Not kept when ``make`` read nothing of the Host, read the previous Host
        (``reads_previous``), or ``keep(value)`` says no; made every time for a Host whose generations are unknown
        (not a HostReader's)."""
        generations = self.generations
        if not generations:
            return make()
        derived = self.derived
        prior = derived.get(key)
        if prior is not None and prior[0] == owner and all(generations.get(name) == seen for name, seen in prior[1]):
            if self._reads:
                self._reads[-1].update(name for name, _ in prior[1])
            derived.keep(prior[3])  # what it was derived through stays for when it is made again
            value: _T = prior[2]
            return value
        with self.recording() as read, derived.touching() as touched:
            value = make()
        if read and VOLATILE not in read and (keep is None or keep(value)):
            touched.discard(key)
            seen = tuple((name, generations.get(name)) for name in read)
            derived.put(key, (owner, seen, value, derived.touched(touched)))
        return value

    def generation(self, name: str) -> int | None:
        """The generation of source ``name``'s reading in this Host (see ``generations``), None when unknown."""
        if self._reads:
            self._reads[-1].add(name)
        return self.generations.get(name)

    def get(self, name: str) -> Any | None:
        return self._result(name)

    @property
    def topology(self) -> Topology | None:
        return self._result("topology")

    @property
    def cgroups(self) -> Cgroups | None:
        return self._result("cgroups")

    @property
    def names(self) -> Names | None:
        return self._result("names")

    @property
    def kubelet_config(self) -> KubeletConfig | None:
        return self._result("kubelet_config")

    @property
    def kubelet_state(self) -> KubeletState | None:
        return self._result("kubelet_state")

    @property
    def pod_resources(self) -> PodResources | None:
        return self._result("pod_resources")

    @property
    def gpus(self) -> GpuInventory | None:
        return self._result("gpus_sysfs")

    @property
    def kernel(self) -> KernelSettings | None:
        return self._result("kernel")

    @property
    def numastat(self) -> NumaCounters | None:
        return self._result("numastat")

    @property
    def intersocket(self) -> InterSocketTraffic | None:
        return self._result("intersocket")

    @property
    def interrupts(self) -> Interrupts | None:
        return self._result("interrupts")

    @property
    def irqs(self) -> Irqs | None:
        return self._result("irqs")

    @property
    def irqbalance(self) -> Irqbalance | None:
        return self._result("irqbalance")

    @property
    def nvml(self) -> NvmlSnapshot | None:
        return self._result("nvml")

    @property
    def amdsmi(self) -> NvmlSnapshot | None:
        return self._result("amdsmi")

    @property
    def hlml(self) -> NvmlSnapshot | None:
        return self._result("hlml")

    @property
    def processes(self) -> GpuHolders | None:
        return self._result("processes")

    @property
    def cpuidle(self) -> CpuIdle | None:
        return self._result("cpuidle")

    @property
    def pci_topology(self) -> PciTopology | None:
        return self._result("pci_topology")

    @property
    def pod_usage(self) -> PodsUsage | None:
        return self._result("pod_usage")

    @property
    def kubernetes_api(self) -> ClusterView | None:
        return self._result("kubernetes_api")

    @property
    def own_pod(self) -> OwnPod | None:
        return self._result("own_pod")

    def down_reason(self, name: str) -> str:
        if self._reads:
            self._reads[-1].add(name)
        status = self.statuses.get(name)
        if status is None:
            return f"source {name} was not read"
        return status.reason or f"source {name} is down"


def _read_one(spec: SourceSpec, read: Callable[[Paths], Any], paths: Paths) -> tuple[Any | None, SourceStatus]:
    start = time.perf_counter()
    try:
        result = read(paths)
    except (SourceUnavailable, MalformedFile) as error:
        return None, SourceStatus(spec.name, False, time.perf_counter() - start, _one_line(str(error)),
                                  starved=starved(error))
    except OSError as error:
        reason = f"{error.strerror or error}: {error.filename}" if error.filename else str(error)
        return None, SourceStatus(spec.name, False, time.perf_counter() - start, _one_line(reason),
                                  starved=starved(error))
    except Exception as error:  # a bug in one source must not take the others down
        log.exception("source %s failed", spec.name)
        reason = f"internal error: {type(error).__name__}: {error}"
        return None, SourceStatus(spec.name, False, time.perf_counter() - start, _one_line(reason))
    return result, SourceStatus(spec.name, True, time.perf_counter() - start)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line[:300]


class HostReader:
    """Reads every source in dependency order, applying the refresh table (numawatch.refresh): sources read on
    change are reused while their fingerprint and needs are the same; incremental sources are handed their turn
    and the memory their previous reading left.

    ``stagger`` > 1 (serve only) makes the rotating families of the table re-read their files for a rotating
    1/``stagger`` of their objects per reading and keep the rest from the previous reading (cgroups:
    ``memory.numa_stat``; irqs: the affinity files), so a value may be ``stagger - 1`` readings old. The default,
    1, reads everything every time: ``check`` (``--window`` included), ``capture`` and ``check --from`` always do.
    ``nvml`` is the NVML session the nvml and processes sources read through (None: NVML is not enabled and they are
    down saying so); ``clock`` is the time their counters integrate over; ``holder_scheduling`` False leaves out the GPU
    holders' scheduling counters (``ReaderContext``); ``libraries`` the other vendors' library sessions by source
    name (``amdsmi``, ``hlml``); ``kubernetes_api`` the Kubernetes API session (kubeapi.KubernetesApi) the
    kubernetes_api source reads (None: that source is down, not configured).
    """

    def __init__(
        self,
        paths: Paths,
        sources: Iterable[SourceSpec] | None = None,
        *,
        stagger: int = 1,
        nvml: NvmlSession | None = None,
        clock: Callable[[], float] = time.monotonic,
        holder_scheduling: bool = True,
        policies: Mapping[str, Policy] = POLICIES,
        libraries: Mapping[str, Any] | None = None,
        kubernetes_api: Any = None,
    ) -> None:
        self.turns = Turns(stagger)  # refuses a stagger below 1
        self.paths = paths
        self.sources = tuple(sources if sources is not None else SOURCES)
        dependency_order(self.sources)  # a cycle is an error now, not at the first reading
        self.stagger = stagger
        self.context = ReaderContext(nvml=nvml, clock=clock, holder_scheduling=holder_scheduling,
                                     libraries=dict(libraries or {}), kubernetes_api=kubernetes_api)  # fmt: skip
        self._cache: dict[str, tuple[Hashable, Any, SourceStatus]] = {}
        # Per source, its last reading while up and the generations of its needs then (what it ``uses`` of them,
        # when it says): compared with the next
        # reading (an equal one keeps the generation), and handed out between the readings of a source read one
        # reading in several (Policy.every).
        self._last_read: dict[str, tuple[Hashable, Any]] = {}
        # Per source with ``SourceSpec.uses``: the generations of its needs and what it took of them then.
        self._uses: dict[str, tuple[Hashable, Hashable]] = {}
        # Per source, how many times it was read for real: what a source that needs it keys its cache on.
        self._generations: dict[str, int] = {}
        self._down: dict[str, str | None] = {}  # per source, why its last reading was down (None: it was up)
        self.policies = {
            spec.name: policy_of(spec.name, spec.fingerprint is not None, policies) for spec in self.sources
        }
        # Per incremental source, what its last reading left for the next (Carried.memory) and whether its
        # fingerprint may be trusted (Carried.settled).
        self._memory: dict[str, Any] = {}
        self.derived = Derived()
        self._unsettled: set[str] = set()
        self._stateful: dict[str, Any] = {}
        for spec in self.sources:
            if spec.factory is not None:
                state = spec.factory(self.context)
                if state is not None:
                    self._stateful[spec.name] = state
        self._last: Host | None = None

    def state(self, name: str) -> Any | None:
        """The per-reader object of source ``name`` (its ``factory``'s), or None when it reads without one."""
        return self._stateful.get(name)

    def memory(self, name: str) -> Any | None:
        """What source ``name``'s last reading left for its next one (``Carried.memory``), None when nothing."""
        return self._memory.get(name)

    def invalidate(self, name: str | None = None) -> None:
        """Forget cached results (all, or one source): called on udev events and SIGHUP. An incremental source
        reads everything at its next reading (``Refresh.whole``). The sources that need it are read again with it:
        their cache is keyed on its readings."""
        if name is None:
            self._cache.clear()
            self._last_read.clear()
        else:
            self._cache.pop(name, None)
            self._last_read.pop(name, None)
        self.turns.read_everything_next(name)

    def read(self) -> Host:
        results: dict[str, Any] = {}
        statuses: dict[str, SourceStatus] = {}
        now = self.context.clock()
        for spec in dependency_order(self.sources):
            policy = self.policies[spec.name]
            state = self._stateful.get(spec.name)
            incremental = spec.incremental is not None and state is None
            fingerprint = spec.fingerprint if policy.on_change and spec.name not in self._unsettled else None
            inputs = self._inputs(spec, results, statuses)
            needs_read: Hashable = tuple(self._generations.get(need, 0) for need in spec.needs)
            if spec.uses is not None:
                # What it takes of its needs, worked out again only when one of them was read again.
                used = self._uses.get(spec.name)
                if used is None or used[0] != needs_read:
                    used = self._uses[spec.name] = (needs_read, spec.uses(inputs))
                needs_read = used[1]
                inputs.used = used[1]
            if incremental:
                read = _incrementally(spec, inputs, self.turns, policy, self._memory, now)
            else:
                read = state.read if state is not None else spec.read
                if spec.needs:
                    read = _with_inputs(read, inputs)
            if policy.every > 1:
                kept = self._last_read.get(spec.name)
                if (
                    kept is not None
                    and kept[0] == needs_read
                    and not self.turns.due(policy)
                    and not self.turns.whole_asked(spec.name)
                ):
                    results[spec.name] = kept[1]  # not its reading: the last one stands (Policy.every)
                    statuses[spec.name] = SourceStatus(spec.name, True, 0.0, cached=True)
                    continue
            key: Hashable = None
            if fingerprint is not None:
                start = time.perf_counter()
                try:
                    key = fingerprint(self.paths)
                except Exception:  # an unreadable fingerprint just means "read it for real"
                    key = None
                if key is not None and spec.needs:
                    key = (key, needs_read)
                cached = self._cache.get(spec.name)
                if key is not None and cached is not None and cached[0] == key and cached[2].up:
                    results[spec.name] = cached[1]
                    statuses[spec.name] = SourceStatus(spec.name, True, time.perf_counter() - start, cached=True)
                    continue
            result, status = _read_one(spec, read, self.paths)
            unchanged = False
            if isinstance(result, Carried):
                self._memory[spec.name] = result.memory
                if result.settled:
                    self._unsettled.discard(spec.name)
                else:
                    self._unsettled.add(spec.name)
                unchanged = result.unchanged
                result = result.snapshot
            before = self._down.get(spec.name)
            last = self._last_read.get(spec.name)
            equal = not unchanged and status.up and last is not None and result is not None and last[1] == result
            if equal:
                # Read for real, and equal to the last reading (the sources hand unchanged parts out as the same
                # objects, so comparing costs little): the last snapshot stands and its generation stays.
                result = last[1]  # type: ignore[index]
            if (unchanged or equal) and status.up and before is None and spec.name in self._generations:
                if unchanged:
                    status = replace(status, cached=True)  # the source itself found nothing changed
            elif status.up or before != status.reason:  # down again for the same reason: nothing new to see
                self._generations[spec.name] = self._generations.get(spec.name, 0) + 1
            self._down[spec.name] = None if status.up else status.reason
            if status.up and result is not None:
                self._last_read[spec.name] = (needs_read, result)
            else:
                self._last_read.pop(spec.name, None)
            if fingerprint is not None and key is not None:
                self._cache[spec.name] = (key, result, status)
            if policy.every > 1 and not incremental:
                self.turns.served(spec.name)  # (an incremental source's Refresh took it)
            if result is not None:
                results[spec.name] = result
            statuses[spec.name] = status
        # Reported in the sources' given order (the registry's), whatever order their needs made them read in.
        results = {spec.name: results[spec.name] for spec in self.sources if spec.name in results}
        statuses = {spec.name: statuses[spec.name] for spec in self.sources}
        self.turns.advance()
        self.derived.next_reading()
        host = Host(
            paths=self.paths,
            results=results,
            statuses=statuses,
            previous=self._last,
            generations=dict(self._generations),
            derived=self.derived,
        )
        self._last = replace(host, previous=None)  # one deep: the next reading's previous has no previous
        return host

    def _inputs(self, spec: SourceSpec, results: Mapping[str, Any], statuses: Mapping[str, SourceStatus]) -> Inputs:
        present = {need: results[need] for need in spec.needs if need in results}
        reasons = {}
        for need in spec.needs:
            if need not in present:
                status = statuses.get(need)
                reasons[need] = status.reason if status is not None and status.reason else f"source {need} was not read"
        generations = {need: self._generations.get(need, 0) for need in spec.needs}
        return Inputs(present, reasons, generations)


def _incrementally(
    spec: SourceSpec, inputs: Inputs, turns: Turns, policy: Policy, memory: Mapping[str, Any], now: float
) -> Callable[[Paths], Carried]:
    """An incremental source's reading as ``_read_one`` calls it: its Refresh is taken when the reading starts."""
    assert spec.incremental is not None
    incremental = spec.incremental

    def reading(paths: Paths) -> Carried:
        return incremental(paths, inputs, turns.refresh(spec.name, policy, memory.get(spec.name), now))

    return reading


def _with_inputs(read: Callable[..., Any], inputs: Inputs) -> Callable[[Paths], Any]:
    def reading(paths: Paths) -> Any:
        return read(paths, inputs)

    return reading


def read_host(
    paths: Paths,
    sources: Iterable[SourceSpec] | None = None,
    *,
    nvml: NvmlSession | None = None,
    libraries: Mapping[str, Any] | None = None,
    kubernetes_api: Any = None,
) -> Host:
    """Read every source once, without caching (``numawatch check``); ``nvml``, ``libraries`` and ``kubernetes_api``
    as for HostReader."""
    return HostReader(paths, sources, nvml=nvml, libraries=libraries, kubernetes_api=kubernetes_api).read()


def read_host_window(
    paths: Paths,
    seconds: float,
    sources: Iterable[SourceSpec] | None = None,
    *,
    nvml: NvmlSession | None = None,
    libraries: Mapping[str, Any] | None = None,
    kubernetes_api: Any = None,
) -> Host:
    """Read the host twice, ``seconds`` apart; the second reading has the first as ``previous``.

    ``numawatch check --window`` uses it so that rate checks (interrupts on isolated CPUs, ticks on nohz_full CPUs)
    can judge a real interval; ``window_seconds(host)`` says how long it was. With ``seconds <= 0`` it reads once.
    """
    reader = HostReader(paths, sources, nvml=nvml, libraries=libraries, kubernetes_api=kubernetes_api)
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
