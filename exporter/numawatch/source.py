"""What a source is: its declaration (``SourceSpec``), the snapshots of the sources it needs as it is handed them
(``Inputs``), what its reader gives the per-reader objects it makes (``ReaderContext``), and the order sources are read
in (``dependency_order``).

Sources declare themselves with these and the HostReader (numawatch.host) reads them: this module imports neither, so
the sources and the reader that lists them depend on it, not on each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from numawatch.errors import SourceUnavailable
from numawatch.paths import Paths
from numawatch.refresh import Carried

if TYPE_CHECKING:
    from numawatch.nvml_session import NvmlSession


@dataclass(frozen=True)
class ReaderContext:
    """What a HostReader gives the per-reader objects of its sources (``SourceSpec.factory``) when it makes them:
    what no host file holds."""

    nvml: NvmlSession | None = None  # this process's NVML session; None: NVML is not enabled
    # The other vendors' library sessions by source name ("amdsmi", "hlml": library_session.LibrarySession); a
    # source without one reads without its library
    libraries: Mapping[str, Any] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic  # for readers that integrate over time (NVML's busy seconds)
    # Whether the GPU holders' per-thread scheduling counters (schedstat, sched) are read: only the holder families
    # use them, so serve without the gpu_holders collector does not read them.
    holder_scheduling: bool = True
    # The Kubernetes API session (kubeapi.KubernetesApi) the kubernetes_api source reads its last answer from; None:
    # the API is not read by this reader (the source is down saying so).
    kubernetes_api: Any = None


class Inputs:
    """The snapshots of the sources a source ``needs``, as this reading has them: a source that is down (or not
    among the sources read) is absent, with the reason it is down."""

    __slots__ = ("_generations", "_reasons", "_results", "used")

    def __init__(
        self,
        results: Mapping[str, Any],
        reasons: Mapping[str, str] | None = None,
        generations: Mapping[str, int] | None = None,
        used: Hashable = None,
    ) -> None:
        self._results = results
        self._reasons = reasons or {}
        self._generations = generations
        # What the source takes of these (``SourceSpec.uses`` of them) when the reader worked it out, else None.
        self.used = used

    @classmethod
    def of(cls, **results: Any) -> Inputs:
        """Inputs holding these snapshots (None: that source is down), for calling a source's reader directly."""
        return cls({name: value for name, value in results.items() if value is not None})

    def get(self, name: str) -> Any | None:
        """The snapshot of ``name``, or None when it is down."""
        return self._results.get(name)

    def reason(self, name: str) -> str:
        """Why ``name`` is absent (empty when it is there)."""
        if name in self._results:
            return ""
        return self._reasons.get(name) or f"source {name} was not read"

    def require(self, name: str) -> Any:
        """The snapshot of ``name``; SourceUnavailable naming why when it is down."""
        found = self._results.get(name)
        if found is None:
            raise SourceUnavailable(f"source {name} is down: {self.reason(name)}")
        return found

    def generation(self, name: str) -> int | None:
        """A number that changes whenever the reader read ``name`` again (not from its fingerprint cache), so a
        reader may keep what it derived from an input while the number stays; None when unknown (a direct call)."""
        if self._generations is None:
            return None
        return self._generations.get(name)


@dataclass(frozen=True)
class SourceSpec:
    name: str
    # ``read(paths)``; with ``needs``, ``read(paths, inputs)`` where ``inputs`` (Inputs) holds the snapshots of the
    # sources named there.
    read: Callable[..., Any]
    # Cheap key of everything the source's result depends on besides its ``needs`` (whose readings are part of the
    # key anyway); None means "always re-read".
    fingerprint: Callable[[Paths], Hashable] | None = None
    description: str = ""
    # For a source that reads incrementally: ``incremental(paths, inputs, refresh) -> Carried``, handed the
    # ``Refresh`` of numawatch.refresh (its turn of the rotation its policy declares, and the ``memory`` its
    # previous reading left, which the HostReader keeps). ``read`` must give what ``incremental`` gives with
    # ``refresh.FULL``.
    incremental: Callable[[Paths, Inputs, Any], Carried] | None = None
    # For a source that holds a per-process resource across readings (the NVML session's counters, open perf
    # events): called once per HostReader with its ReaderContext, it returns an object with ``read`` (same
    # arguments as above); or None, to read with ``read`` (NVML without a session). Never for what a reading
    # could carry in its memory: that is ``incremental``.
    factory: Callable[[ReaderContext], Any] | None = None
    # For a source that reads no files (NVML): an object with ``dump(result) -> bytes`` and ``load(data) -> result``.
    # ``numawatch capture`` stores the reading in the bundle with it and ``check --from`` reads it back instead of
    # asking the (absent) device. File-reading sources need nothing: their files are recorded as they are read.
    recording: Any | None = None
    # The sources whose snapshots this one builds on: read before it and handed to its ``read``.
    needs: tuple[str, ...] = ()
    # What the source takes from its needs, ``uses(inputs) -> small value``, when that is less than their whole
    # readings (the interrupts source: the watched CPUs of the topology and the CPU Manager state). The HostReader
    # then keys the source's reading on it instead of the needs' generations: a need read again that gives the same
    # value does not make a source read out of its turn (``Policy.every``) or miss its fingerprint cache.
    uses: Callable[[Inputs], Hashable] | None = None


class DependencyCycle(ValueError):
    """Sources that need each other, directly or through others: no order can read them."""


def dependency_order(sources: Iterable[SourceSpec]) -> tuple[SourceSpec, ...]:
    """``sources`` in an order where every source comes after the sources it needs, otherwise as given.

    A need that is not among ``sources`` is no constraint (that source is seen as not read). Raises
    DependencyCycle naming the sources of a cycle, ValueError for a name given twice.
    """
    specs = tuple(sources)
    by_name: dict[str, SourceSpec] = {}
    for spec in specs:
        if spec.name in by_name:
            raise ValueError(f"source {spec.name} is given twice")
        by_name[spec.name] = spec
    ordered: list[SourceSpec] = []
    done: set[str] = set()
    for spec in specs:
        _visit(spec, by_name, done, [], ordered)
    return tuple(ordered)


def _visit(
    spec: SourceSpec, by_name: dict[str, SourceSpec], done: set[str], visiting: list[str], ordered: list[SourceSpec]
) -> None:
    """Append ``spec`` to ``ordered`` after what it needs. A function of the module, not a closure calling itself:
    that closure would be a reference cycle (the function holds the cell that holds it), left at every reading for the
    cyclic collector."""
    if spec.name in done:
        return
    if spec.name in visiting:
        cycle = [*visiting[visiting.index(spec.name) :], spec.name]
        raise DependencyCycle("sources need each other: " + " -> ".join(cycle))
    visiting.append(spec.name)
    for need in spec.needs:
        if need in by_name:
            _visit(by_name[need], by_name, done, visiting, ordered)
    visiting.pop()
    done.add(spec.name)
    ordered.append(spec)
