"""What a check, a metric family or a derivation reads of a Host: a copy of the Host that notes every source asked
of it (its result, its down reason, its generation), and ``PREVIOUS`` when the previous reading is asked; and which
per-pod tables (numawatch.perpod's judges) it renews.

The copy keeps the Host's generations but starts with an empty store, so nothing is handed out from an earlier
reading: what a value reads, it reads now. A derivation (numawatch.derivation) is still made once per copy, and
what it read counts for every value that uses it, at its first use and every later one."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

from numawatch.derivation import Derivation
from numawatch.host import Host
from numawatch.intent import Intent
from numawatch.store import Store

PREVIOUS = "<previous reading>"
_T = TypeVar("_T")


@dataclass(frozen=True)
class RecordingHost(Host):
    # One set per recording under way, innermost last; shared with the previous reading's copy.
    stack: list[set[str]] = field(default_factory=list, compare=False, repr=False)
    # What each derivation made for this copy read, by its key in ``_made``.
    derivation_reads: dict[Any, frozenset[str]] = field(default_factory=dict, compare=False, repr=False)
    # Noted instead of the source's name (the previous reading's copy notes PREVIOUS).
    mark: str | None = field(default=None, compare=False, repr=False)
    # Every derivation's reads, by its name, over every use (for the derivations' own declarations).
    by_derivation: dict[str, set[str]] = field(default_factory=dict, compare=False, repr=False)
    # The name of every table renewed (``Host.renew``: a per-pod judge's is ("per_pod", its name, ...)), in order.
    renewed: list[Hashable] = field(default_factory=list, compare=False, repr=False)

    def _note(self, name: str) -> None:
        if self.stack:
            self.stack[-1].add(self.mark or name)

    def _result(self, name: str) -> Any | None:
        self._note(name)
        return super()._result(name)

    def generation(self, name: str) -> int | None:
        self._note(name)
        return super().generation(name)

    def down_reason(self, name: str) -> str:
        self._note(name)
        return super().down_reason(name)

    def value(self, derivation: Derivation[Any], intent: Intent | None = None) -> Any:
        key = derivation.name if intent is None else (derivation.name, intent.version)
        with self.reads() as read:
            made = super().value(derivation, intent)
        if key not in self.derivation_reads:
            self.derivation_reads[key] = frozenset(read)
            self.by_derivation.setdefault(derivation.name, set()).update(read)
        if self.stack:
            self.stack[-1].update(self.derivation_reads[key])
        return made

    def renew(self, name: Hashable, make: Callable[[Any | None], _T]) -> _T:
        self.renewed.append(name)
        return super().renew(name, make)

    @contextmanager
    def reads(self) -> Iterator[set[str]]:
        """The sources read inside the block (what a derivation it uses read included)."""
        read: set[str] = set()
        self.stack.append(read)
        try:
            yield read
        finally:
            self.stack.pop()


def recording(host: Host) -> RecordingHost:
    """``host`` as a RecordingHost (its previous reading too, noting ``PREVIOUS``), with an empty store."""
    stack: list[set[str]] = []
    previous = None
    if host.previous is not None:
        previous = _copy(host.previous, stack, None, PREVIOUS)
    return _copy(host, stack, previous, None)


def _copy(host: Host, stack: list[set[str]], previous: Host | None, mark: str | None) -> RecordingHost:
    return RecordingHost(
        paths=host.paths,
        results=host.results,
        statuses=host.statuses,
        timestamp=host.timestamp,
        previous=previous,
        generations=host.generations,
        store=Store(),
        stack=stack,
        mark=mark,
    )


def reads_of(host: RecordingHost, run: Callable[[], object]) -> set[str]:
    """What ``run()`` reads of ``host``, whatever it raises."""
    # NotEvaluated, NotApplicable, or a bug, which its own tests show: what it read before counts.
    with host.reads() as read, suppress(Exception):
        run()
    return read
