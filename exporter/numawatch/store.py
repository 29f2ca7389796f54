"""The one place serve remembers values derived from readings between evaluations.

A value derived from a Host (a check's verdict, a metric family, a value declared with ``numawatch.derivation``, a
table of per-pod values) is made again only when what it was made from changed: the store holds, per name, the
*versions* it was made under (the generations of the sources it declares, the intent's version, values cheap to
compare) and the value. Asked again under equal versions, it hands the value back; under other versions it makes
it anew, handing ``make`` the value made last so that an incremental value (the workloads join, the device IRQ
join) can keep the parts whose own inputs did not move.

How stale: never. A value is handed back only under versions equal to those it was made under, and a version
changes whenever the bytes it stands for do (a source's generation moves with every reading that found something
new). The only values older than the host are the readings the refresh table keeps (``numawatch explain``).

Size: one entry per name, and names are fixed by the code (a check's id, a builder's name, a derivation's name),
never a pod, a path or an intent: a value per pod lives inside its table, made from the pods of the reading that
made it, so a pod that goes is gone with the next table. tests/test_cache_bounds.py holds it through churn.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

_T = TypeVar("_T")


class Store:
    """Values derived from readings, by name: one per HostReader, shared by its Hosts (``Host.store``)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[Hashable, Any]] = {}

    def value(
        self,
        name: Hashable,
        versions: Hashable,
        make: Callable[[Any | None], _T],
        keep: Callable[[_T], bool] | None = None,
    ) -> _T:
        """The value stored under ``name`` when it was made under ``versions``; else ``make(previous)``, with the
        value last made under ``name`` (None when there is none), stored unless ``keep(value)`` says no (a failed
        check is judged again at the next reading). ``versions`` must stand for everything the value is made from."""
        entry = self._entries.get(name)
        if entry is not None and entry[0] == versions:
            found: _T = entry[1]
            return found
        value = make(None if entry is None else entry[1])
        if keep is None or keep(value):
            self._entries[name] = (versions, value)
        return value

    def renew(self, name: Hashable, make: Callable[[Any | None], _T]) -> _T:
        """``make(previous)``, stored under ``name``: for a value that compares its parts with the previous one's
        itself and keeps those whose own keys are the same (a table of per-pod values, keyed pod by pod)."""
        entry = self._entries.get(name)
        value = make(None if entry is None else entry[1])
        self._entries[name] = (None, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Hashable]:
        """The names held (for tests and debugging)."""
        return iter(list(self._entries))
