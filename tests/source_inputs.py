"""Sources' readings driven directly, handed the snapshots they ``need`` and the ``Refresh`` a HostReader hands them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from numawatch.errors import SourceUnavailable
from numawatch.host import Inputs, SourceSpec
from numawatch.model.kubelet import KubeletState
from numawatch.paths import Paths
from numawatch.refresh import POLICIES, Turns, policy_of
from numawatch.sources import SOURCES, cgroups, kubelet_state


def kubelet_state_of(paths: Paths) -> KubeletState | None:
    """The kubelet_state source's reading, None when it is down (no kubelet directory)."""
    try:
        return kubelet_state.read(paths)
    except SourceUnavailable:
        return None


def spec_of(name: str) -> SourceSpec:
    return next(spec for spec in SOURCES if spec.name == name)


class Driven:
    """One incremental source read again and again the way a HostReader reads it: the HostReader's ``Turns`` (the
    reading counter, the stagger, the whole reading after an invalidation), the source's policy from the refresh
    table and the memory each reading leaves handed to the next. Unlike a HostReader it raises what the source
    raises (a HostReader reports the source down), so a test can see why.

    ``inputs(paths)`` makes each reading's Inputs (default: none); ``clock`` is the HostReader's clock."""

    def __init__(
        self,
        spec: SourceSpec | str,
        *,
        stagger: int = 1,
        inputs: Callable[[Paths], Inputs] | None = None,
        clock: Callable[[], float] = time.monotonic,
        incremental: Callable[..., Any] | None = None,
    ) -> None:
        self.spec = spec_of(spec) if isinstance(spec, str) else spec
        found = incremental or self.spec.incremental
        if found is None:
            raise ValueError(f"source {self.spec.name} does not read incrementally")
        self._incremental = found
        self.policy = policy_of(self.spec.name, self.spec.fingerprint is not None, POLICIES)
        self.turns = Turns(stagger)
        self._inputs = inputs
        self._clock = clock
        self.memory: Any = None

    @property
    def readings(self) -> int:
        return self.turns.readings

    def set_stagger(self, share: int) -> None:
        """serve's ``--stagger``: a HostReader made with ``stagger=share``."""
        if share < 1:
            raise ValueError(f"stagger must be at least 1, got {share}")
        self.turns.stagger = share

    def readings_per_round(self, family: str) -> int:
        """How many readings one round of ``family``'s rotation takes: the stagger, times the family's stretch in
        the refresh table, or the family's fixed round in it."""
        if self.turns.stagger > 1 and family in self.policy.fixed:
            return self.policy.fixed[family]
        return self.turns.stagger * self.policy.stretch.get(family, 1)

    def without_rotation(self, family: str) -> Driven:
        """This driver with ``family`` read in full at every reading, as a refresh table that does not rotate it
        would have it (so a test can look at the rules of another family alone)."""
        self.policy = replace(self.policy, rotating=self.policy.rotating - {family})
        return self

    def rotating_like(self, family: str, other: str) -> Driven:
        """This driver with ``family`` rotating over ``other``'s round (the table's fixed round or stretch of ``family``
        replaced by ``other``'s), so that a test can look at the rules of ``other``'s rotation alone."""
        fixed = {name: readings for name, readings in self.policy.fixed.items() if name != family}
        stretch = {**self.policy.stretch, family: self.policy.stretch.get(other, 1)}
        self.policy = replace(self.policy, fixed=fixed, stretch=stretch)
        return self

    def refresh_all(self) -> None:
        """What ``HostReader.invalidate(name)`` does: the next reading reads everything."""
        self.turns.read_everything_next(self.spec.name)

    def __getattr__(self, name: str) -> Any:
        """The parts of the memory (cgroups: pods, lists, containers, sandboxes) read as the driver's attributes;
        before any reading, empty."""
        memory = self.__dict__.get("memory")
        if memory is None:
            if name in ("pods", "lists", "containers", "sandboxes"):
                return {}
            raise AttributeError(name)
        return getattr(memory, name)

    def read(self, paths: Paths, inputs: Inputs | None = None) -> Any:
        if inputs is None:
            inputs = self._inputs(paths) if self._inputs is not None else Inputs({})
        refresh = self.turns.refresh(self.spec.name, self.policy, self.memory, self._clock())
        try:
            carried = self._incremental(paths, inputs, refresh)
        finally:
            self.turns.advance()
        self.memory = carried.memory
        return carried.snapshot


class CgroupsReaderWithState(Driven):
    """The cgroups source driven with the kubelet_state source's reading of each moment (whose CPU Manager state
    changing is when shared pods are read at every reading)."""

    def __init__(self, stagger: int = 1) -> None:
        super().__init__(
            cgroups.SOURCE, stagger=stagger, inputs=lambda paths: Inputs.of(kubelet_state=kubelet_state_of(paths))
        )
