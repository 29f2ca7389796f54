"""Declared derivations (numawatch.derivation): made once per Host, made again at a later reading of a HostReader
only when a source they declare moved (or the intent, for one made per intent), handed what they made last when
incremental; and declared wrongly, refused at import."""

from __future__ import annotations

import pytest
from numawatch.derivation import derivation
from numawatch.host import Host, HostReader, SourceSpec
from numawatch.inputs import SELF, Source
from numawatch.intent import Intent
from numawatch.model import frozen_map
from numawatch.paths import Paths
from numawatch.refresh import EVERY

PATHS = Paths.from_root("/nonexistent")


class Values:
    """Two sources whose readings the test sets, read at every reading."""

    def __init__(self) -> None:
        self.values = {"a": 1, "b": 10}

    def reader(self) -> HostReader:
        specs = [SourceSpec(name, lambda paths, name=name: {"v": self.values[name]}) for name in self.values]
        return HostReader(PATHS, specs, policies=dict.fromkeys(self.values, EVERY))


MADE: list[tuple[str, object]] = []


@derivation("tests.derivation.a_plus_one", inputs=(Source("a"),))
def a_plus_one(host: Host) -> int:
    MADE.append(("a_plus_one", host.get("a")["v"]))
    return host.get("a")["v"] + 1


@derivation("tests.derivation.running_total", inputs=(Source("a"),), incremental=True)
def running_total(host: Host, previous: int | None) -> int:
    MADE.append(("running_total", previous))
    return (previous or 0) + host.get("a")["v"]


@derivation("tests.derivation.scaled", inputs=(Source("b"),), per_intent=True)
def scaled(host: Host, intent: Intent) -> int:
    MADE.append(("scaled", intent.reserved_cpus))
    return host.get("b")["v"] * (len(intent.reserved_cpus or ()) + 1)


def test_a_derivation_is_made_again_only_when_a_source_it_declares_moves():
    values = Values()
    reader = values.reader()
    MADE.clear()
    first = reader.read()
    assert a_plus_one(first) == a_plus_one(first) == 2
    values.values["b"] = 20  # not declared: the value stands
    assert a_plus_one(reader.read()) == 2
    values.values["a"] = 5
    assert a_plus_one(reader.read()) == 6
    assert MADE == [("a_plus_one", 1), ("a_plus_one", 5)]


def test_an_incremental_derivation_is_handed_what_it_made_last():
    values = Values()
    reader = values.reader()
    MADE.clear()
    totals = []
    for a in (1, 1, 2, 3):
        values.values["a"] = a
        totals.append(running_total(reader.read()))
    assert totals == [1, 1, 3, 6]  # the second reading changed nothing: not made
    assert MADE == [("running_total", None), ("running_total", 1), ("running_total", 3)]


def test_a_derivation_made_per_intent_is_keyed_by_the_intents_content():
    values = Values()
    reader = values.reader()
    MADE.clear()
    plain, isolating = Intent(), Intent(reserved_cpus=frozenset({2, 3}))
    host = reader.read()
    assert scaled(host, plain) == 10 and scaled(host, isolating) == 30
    assert scaled(host, Intent()) == 10  # an equal intent: the value made for the first
    assert len(MADE) == 2
    with pytest.raises(TypeError, match="made per intent"):
        scaled(host)


def test_a_host_not_made_by_a_reader_makes_its_own_once():
    MADE.clear()
    host = Host(paths=PATHS, results=frozen_map({"a": {"v": 4}}), statuses=frozen_map({}))
    assert a_plus_one(host) == a_plus_one(host) == 5
    other = Host(paths=PATHS, results=frozen_map({"a": {"v": 7}}), statuses=frozen_map({}), store=host.store)
    assert a_plus_one(other) == 8  # no generations: nothing is shared across Hosts, even one store
    assert MADE == [("a_plus_one", 4), ("a_plus_one", 7)]


def test_a_derivation_must_declare_host_inputs_and_a_name_of_its_own():
    with pytest.raises(ValueError, match="must declare the host inputs"):
        derivation("tests.derivation.own_state", inputs=(SELF,))(lambda host: 0)
    with pytest.raises(ValueError, match="must declare the host inputs"):
        derivation("tests.derivation.nothing", inputs=())(lambda host: 0)
    with pytest.raises(ValueError, match="two derivations are named"):
        derivation("tests.derivation.a_plus_one", inputs=(Source("a"),))(lambda host: 0)
