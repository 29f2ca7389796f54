"""Values derived from a Host that several checks and metric families use (the workloads join, the device IRQ join,
GPU telemetry as one reading), declared with what they read, as a check declares its inputs.

    @derivation("capacity.threads_per_core", inputs=(TOPOLOGY,))
    def threads_per_core(host: Host) -> int | None: ...

    threads_per_core(host)  # made once per Host; in serve, reused while the topology keeps its generation

The engine decides what is reused (``Host.value``, numawatch.store): a value is made once per Host, and made again
at a later reading only when a source it declares moved (its generation), or the intent, for one made per intent.
An ``incremental`` one is handed what it made last (``previous``, None the first time) to keep the parts whose own
inputs did not move, as a source's parser is handed its previous parse. Its declared inputs must cover everything
it reads of the Host (tests/test_dataflow.py records what each one reads on a variety of hosts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from numawatch.inputs import Input, Keying, keying

if TYPE_CHECKING:
    from numawatch.host import Host
    from numawatch.intent import Intent

_T = TypeVar("_T")

# Every derivation by name: a name is a store key, so two may not share one.
DERIVATIONS: dict[str, Derivation[Any]] = {}


class Derivation(Generic[_T]):
    """A declared value: call it with a Host (and the intent, for one made ``per_intent``)."""

    __slots__ = ("_make", "incremental", "inputs", "keyed", "name", "per_intent")

    def __init__(
        self, name: str, inputs: tuple[Input, ...], make: Callable[..., _T], *, incremental: bool, per_intent: bool
    ) -> None:
        keyed = keying(inputs)
        if keyed is None:
            raise ValueError(f"derivation {name} must declare the host inputs it reads")
        self.name = name
        self.inputs = inputs
        self.keyed: Keying = keyed
        self.incremental = incremental
        self.per_intent = per_intent
        self._make = make

    def __call__(self, host: Host, intent: Intent | None = None) -> _T:
        if self.per_intent and intent is None:
            raise TypeError(f"derivation {self.name} is made per intent: pass it")
        return host.value(self, intent if self.per_intent else None)

    def make(self, host: Host, intent: Intent | None, previous: _T | None) -> _T:
        """The value made anew (the engine calls it: ``Host.value``)."""
        arguments: list[Any] = [host]
        if self.per_intent:
            arguments.append(intent)
        if self.incremental:
            arguments.append(previous)
        return self._make(*arguments)

    def __repr__(self) -> str:
        return f"Derivation({self.name!r})"


def derivation(
    name: str, *, inputs: tuple[Input, ...], incremental: bool = False, per_intent: bool = False
) -> Callable[[Callable[..., _T]], Derivation[_T]]:
    """Declares ``make`` a derived value named ``name`` reading ``inputs``: ``make(host)``, with ``per_intent``
    ``make(host, intent)``, and with ``incremental`` a last argument ``previous`` (what it made last, or None)."""

    def declare(make: Callable[..., _T]) -> Derivation[_T]:
        if name in DERIVATIONS:
            raise ValueError(f"two derivations are named {name}")
        declared = DERIVATIONS[name] = Derivation(name, inputs, make, incremental=incremental, per_intent=per_intent)
        return declared

    return declare
