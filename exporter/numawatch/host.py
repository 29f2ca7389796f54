"""One evaluation's view of the host: every source's snapshot plus how reading it went.

Sources are independent unless they declare otherwise: one that fails (missing files, malformed content, a bug) is
reported down with its reason and every other source is still read. A source that builds on another's snapshot
names it in ``needs``: the reader reads sources in dependency order and hands each one the snapshots it needs
(``Inputs``), so no source reads another's files. Sources whose inputs cannot change between events (topology,
kubelet config) declare a cheap fingerprint; a ``HostReader`` re-reads them only when the fingerprint, or the
reading of a source they need, changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from numawatch.descriptors import starved
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.inputs import Keying
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
from numawatch.store import Store

if TYPE_CHECKING:
    from numawatch.derivation import Derivation
    from numawatch.intent import Intent
    from numawatch.nvml_session import NvmlSession

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_NOT_MADE = object()  # a derivation not made yet for a Host (None is a value a derivation may make)


@dataclass(frozen=True)
class SourceStatus:
    name: str
    up: bool
    duration_seconds: float
    reason: str = ""  # why it is down (one line), empty when up
    cached: bool = False  # result reused: its fingerprint did not change, or the source found nothing changed
    starved: bool = False  # down for lack of file descriptors (EMFILE, ENFILE): says nothing about the host


@dataclass(frozen=True)
class Host:
    paths: Paths
    results: Mapping[str, Any]
    statuses: Mapping[str, SourceStatus]
    timestamp: float = field(default_factory=time.time)
    # The reading before this one, for checks that need a rate (interrupts per second, ``check --window``). Kept one
    # deep: a previous host never has a previous of its own. Never for skipping work: that is ``store``.
    previous: Host | None = None
    # Per source, the HostReader's count of its real readings (not answered from its fingerprint cache, nor found
    # unchanged by the source itself: ``Carried.unchanged``): what ``store`` keys values on. Empty for a Host not
    # made by a HostReader.
    generations: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    # What the HostReader's readings derived that a later one may reuse, by the versions it was made under
    # (numawatch.store); a Host not made by a HostReader reuses nothing across readings.
    store: Store = field(default_factory=Store, compare=False, repr=False)
    # The declared values (numawatch.derivation) made for this Host: each made once per Host, dropped with it. Not
    # part of equality or of a replace() copy.
    _made: dict[Hashable, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def value(self, derivation: Derivation[_T], intent: Intent | None = None) -> _T:
        """The value of ``derivation`` for this Host (and ``intent``, for one made per intent): made once per Host,
        and reused from an earlier reading of its HostReader while what it declares reading keeps its versions."""
        key = derivation.name if intent is None else (derivation.name, intent.version)
        found = self._made.get(key, _NOT_MADE)
        if found is not _NOT_MADE:
            return cast(_T, found)
        made = self._made[key] = self.reuse(
            derivation.name, derivation.keyed, intent, lambda previous: derivation.make(self, intent, previous)
        )
        return made

    def reuse(
        self,
        name: Hashable,
        keyed: Keying | None,
        intent: Intent | None,
        make: Callable[[Any | None], _T],
        keep: Callable[[_T], bool] | None = None,
    ) -> _T:
        """The value made under ``name`` (a check's verdict, a metric family, a derivation) by ``make(previous)``,
        reused from an earlier reading while the sources ``keyed`` names keep their generations (and, for a rate,
        their generations in the previous Host) and the intent its version (``Store.value``). Made at every reading
        when ``keyed`` is None (it reads more than the host) and for a Host not made by a HostReader."""
        if keyed is None or not self.generations:
            return make(None)
        return self.store.value(name, self.versions(keyed, intent), make, keep)

    def renew(self, name: Hashable, make: Callable[[Any | None], _T]) -> _T:
        """``Store.renew``: for a value that compares its own parts with the previous one (a per-pod table);
        ``make(None)`` for a Host not made by a HostReader."""
        if not self.generations:
            return make(None)
        return self.store.renew(name, make)

    def versions(self, keyed: Keying, intent: Intent | None = None) -> Hashable:
        """What a value keyed by ``keyed`` (for ``intent``) was made from, as a store key."""
        generations = self.generations
        now = tuple([generations.get(name) for name in keyed.sources])
        before: tuple[int | None, ...] = ()
        if keyed.rates:
            previous = self.previous
            before = tuple([None if previous is None else previous.generations.get(name) for name in keyed.rates])
        return now, before, None if intent is None else intent.version

    def _result(self, name: str) -> Any | None:
        return self.results.get(name)

    def generation(self, name: str) -> int | None:
        """The generation of source ``name``'s reading in this Host (see ``generations``), None when unknown."""
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
        self.policies = {
            spec.name: policy_of(spec.name, spec.fingerprint is not None, policies) for spec in self.sources
        }
        self._kept: dict[str, _Kept] = {spec.name: _Kept() for spec in self.sources}
        self.store = Store()
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
        kept = self._kept.get(name)
        return None if kept is None else kept.memory

    def invalidate(self, name: str | None = None) -> None:
        """Forget cached results (all, or one source): called on udev events and SIGHUP. An incremental source
        reads everything at its next reading (``Refresh.whole``). The sources that need it are read again with it:
        their cache is keyed on its readings."""
        for kept in self._kept.values() if name is None else [self._kept[name]] if name in self._kept else []:
            kept.fingerprinted = None
            kept.last = None
        self.turns.read_everything_next(name)

    def read(self) -> Host:
        results: dict[str, Any] = {}
        statuses: dict[str, SourceStatus] = {}
        now = self.context.clock()
        for spec in dependency_order(self.sources):
            result, status = self._read_source(spec, self._inputs(spec, results, statuses), now)
            if result is not None:
                results[spec.name] = result
            statuses[spec.name] = status
        # Reported in the sources' given order (the registry's), whatever order their needs made them read in.
        results = {spec.name: results[spec.name] for spec in self.sources if spec.name in results}
        statuses = {spec.name: statuses[spec.name] for spec in self.sources}
        self.turns.advance()
        host = Host(
            paths=self.paths,
            results=results,
            statuses=statuses,
            previous=self._last,
            generations={name: kept.generation for name, kept in self._kept.items() if kept.generation},
            store=self.store,
        )
        self._last = replace(host, previous=None)  # one deep: the next reading's previous has no previous
        return host

    def _read_source(self, spec: SourceSpec, inputs: Inputs, now: float) -> tuple[Any | None, SourceStatus]:
        """One source's snapshot at this reading, and how it went: the last one outside its turn (``Policy.every``)
        or while its fingerprint is the same (``Policy.on_change``), else read."""
        name, kept, policy = spec.name, self._kept[spec.name], self.policies[spec.name]
        needs_key = self._needs_key(spec, kept, inputs)
        last = kept.last
        turns = self.turns
        if (
            policy.every > 1
            and last is not None
            and last[0] == needs_key
            and not turns.due(policy)
            and not turns.whole_asked(name)
        ):
            return last[1], SourceStatus(name, True, 0.0, cached=True)  # not its turn: the last one stands
        fingerprint = spec.fingerprint if policy.on_change and kept.settled else None
        key: Hashable = None
        if fingerprint is not None:
            start = time.perf_counter()
            key = _fingerprint_of(fingerprint, self.paths, spec, needs_key)
            found = kept.fingerprinted
            if key is not None and found is not None and found[0] == key and found[2].up:
                return found[1], SourceStatus(name, True, time.perf_counter() - start, cached=True)
        state = self._stateful.get(name)
        incremental = spec.incremental is not None and state is None
        read: Callable[[Paths], Any]
        if incremental:
            read = _incrementally(spec, inputs, self.turns, policy, kept.memory, now)
        else:
            read = state.read if state is not None else spec.read
            if spec.needs:
                read = _with_inputs(read, inputs)
        result, status = _settled(kept, *_read_one(spec, read, self.paths), needs_key)
        if fingerprint is not None and key is not None:
            kept.fingerprinted = (key, result, status)
        if policy.every > 1 and not incremental:
            self.turns.served(name)  # (an incremental source's Refresh took it)
        return result, status

    def _needs_key(self, spec: SourceSpec, kept: _Kept, inputs: Inputs) -> Hashable:
        """What the source's reading depends on of the sources it needs: their generations, or what it takes of
        them (``SourceSpec.uses``), worked out again only when one of them was read again."""
        generations: Hashable = tuple(self._generation(need) for need in spec.needs)
        if spec.uses is None:
            return generations
        if kept.uses is None or kept.uses[0] != generations:
            kept.uses = (generations, spec.uses(inputs))
        inputs.used = kept.uses[1]
        return kept.uses[1]

    def _generation(self, name: str) -> int:
        kept = self._kept.get(name)
        return 0 if kept is None else kept.generation

    def _inputs(self, spec: SourceSpec, results: Mapping[str, Any], statuses: Mapping[str, SourceStatus]) -> Inputs:
        present = {need: results[need] for need in spec.needs if need in results}
        reasons = {}
        for need in spec.needs:
            if need not in present:
                status = statuses.get(need)
                reasons[need] = status.reason if status is not None and status.reason else f"source {need} was not read"
        generations = {need: self._generation(need) for need in spec.needs}
        return Inputs(present, reasons, generations)


@dataclass(slots=True)
class _Kept:
    """What a HostReader keeps of one source between its readings."""

    # Its readings that found something new (0: never read): what values derived from it are keyed on
    # (``Host.generations``), and what a source needing it keys its own reading on.
    generation: int = 0
    # Its last reading while up, with what it was read under of its needs (``_needs_key``): compared with the next
    # (an equal one keeps the generation), and handed out between its turns (``Policy.every``).
    last: tuple[Hashable, Any] | None = None
    uses: tuple[Hashable, Hashable] | None = None  # its needs' generations and what it took of them then
    fingerprinted: tuple[Hashable, Any, SourceStatus] | None = None  # its fingerprint's key, snapshot and status
    memory: Any = None  # what its last reading left for the next (Carried.memory)
    settled: bool = True  # False: its fingerprint cannot be trusted until its next reading (Carried.settled)
    down: str | None = None  # why its last reading was down; None: it was up (or never read)


def _fingerprint_of(
    fingerprint: Callable[[Paths], Hashable], paths: Paths, spec: SourceSpec, needs_key: Hashable
) -> Hashable:
    try:
        key = fingerprint(paths)
    except Exception:  # an unreadable fingerprint just means "read it for real"
        return None
    return (key, needs_key) if key is not None and spec.needs else key


def _settled(
    kept: _Kept, result: Any | None, status: SourceStatus, needs_key: Hashable
) -> tuple[Any | None, SourceStatus]:
    """A reading taken into ``kept``: its memory, and its generation, which stays when the source found nothing
    changed (``Carried.unchanged``) or the reading equals the last (the sources hand unchanged parts out as the
    same objects, so comparing costs little; the last snapshot then stands), and moves when it found something new
    or went down for another reason."""
    unchanged = False
    if isinstance(result, Carried):
        kept.memory = result.memory
        kept.settled = result.settled
        unchanged = result.unchanged
        result = result.snapshot
    last = kept.last
    equal = not unchanged and status.up and last is not None and result is not None and last[1] == result
    if equal:
        result = last[1]  # type: ignore[index]
    if (unchanged or equal) and status.up and kept.down is None and kept.generation:
        if unchanged:
            status = replace(status, cached=True)  # the source itself found nothing changed
    elif status.up or kept.down != status.reason:  # down again for the same reason: nothing new to see
        kept.generation += 1
    kept.down = None if status.up else status.reason
    kept.last = (needs_key, result) if status.up and result is not None else None
    return result, status


def _incrementally(
    spec: SourceSpec, inputs: Inputs, turns: Turns, policy: Policy, memory: Any, now: float
) -> Callable[[Paths], Carried]:
    """An incremental source's reading as ``_read_one`` calls it: its Refresh is taken when the reading starts."""
    assert spec.incremental is not None
    incremental = spec.incremental

    def reading(paths: Paths) -> Carried:
        return incremental(paths, inputs, turns.refresh(spec.name, policy, memory, now))

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
