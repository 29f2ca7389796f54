"""The HostReader's declared dependencies: sources read in dependency order, handed the snapshots they need, a
down dependency seen as down with its reason, a cycle refused before anything is read, and a fingerprinted source
read again when a source it needs was; plus the typed accessors of every registry source on Host."""

from __future__ import annotations

import gc

import pytest
from numawatch.errors import SourceUnavailable
from numawatch.host import Host, HostReader, Inputs, SourceSpec, dependency_order
from numawatch.paths import Paths
from numawatch.source import DependencyCycle
from numawatch.sources import SOURCES

PATHS = Paths.from_root("/nonexistent")


def spec(name: str, read, *, needs: tuple[str, ...] = (), fingerprint=None) -> SourceSpec:
    return SourceSpec(name=name, read=read, needs=needs, fingerprint=fingerprint)


def test_a_source_is_read_after_the_sources_it_needs_and_reported_in_the_given_order():
    order: list[str] = []

    def reading(name):
        def read(paths, inputs=None):
            order.append(name)
            return {"name": name, "saw": inputs.get("base") if inputs is not None else None}

        return read

    sources = (spec("top", reading("top"), needs=("middle",)), spec("middle", reading("middle"), needs=("base",)),
               spec("base", reading("base")))  # fmt: skip

    host = HostReader(PATHS, sources).read()

    assert order == ["base", "middle", "top"]
    assert list(host.statuses) == list(host.results) == ["top", "middle", "base"]
    assert host.results["middle"]["saw"] == {"name": "base", "saw": None}


@pytest.mark.parametrize(
    "needs",
    [{"a": ("a",)}, {"a": ("b",), "b": ("a",)}, {"a": ("b",), "b": ("c",), "c": ("a",)}],
)
def test_sources_that_need_each_other_are_refused_before_anything_is_read(needs):
    read: list[str] = []
    sources = [
        spec(name, lambda paths, inputs, name=name: read.append(name), needs=need) for name, need in needs.items()
    ]

    with pytest.raises(DependencyCycle, match=r"sources need each other: a -> .*a"):
        HostReader(PATHS, sources)
    assert read == []


def test_ordering_the_sources_leaves_no_garbage_for_the_cyclic_collector():
    """A reading orders the sources every time: nothing of it may wait for the collector (serve's runs seldom)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            assert dependency_order(SOURCES)
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()


def test_a_source_given_twice_is_refused():
    with pytest.raises(ValueError, match="source a is given twice"):
        dependency_order([spec("a", lambda paths: 1), spec("a", lambda paths: 2)])


def test_the_registry_has_an_order():
    ordered = [s.name for s in dependency_order(SOURCES)]

    assert sorted(ordered) == sorted(s.name for s in SOURCES)
    for source in SOURCES:
        assert all(ordered.index(need) < ordered.index(source.name) for need in source.needs)


def test_a_down_or_unread_dependency_is_seen_as_down_with_its_reason():
    def broken(paths):
        raise SourceUnavailable("no such thing at /x")

    seen: dict[str, object] = {}

    def dependent(paths, inputs: Inputs):
        seen.update(broken=inputs.get("broken"), reason=inputs.reason("broken"), absent=inputs.reason("absent"))
        return inputs.require("broken")

    host = HostReader(PATHS, (spec("dependent", dependent, needs=("broken", "absent")), spec("broken", broken))).read()

    assert seen == {"broken": None, "reason": "no such thing at /x", "absent": "source absent was not read"}
    assert not host.statuses["dependent"].up
    assert host.statuses["dependent"].reason == "source broken is down: no such thing at /x"


def test_a_fingerprinted_source_is_read_again_when_a_source_it_needs_was():
    counter = {"base": 0, "cached": 0}
    base_fingerprint = {"key": 1}

    def base(paths):
        counter["base"] += 1
        return counter["base"]

    def cached(paths, inputs):
        counter["cached"] += 1
        return inputs.get("base")

    sources = (spec("base", base, fingerprint=lambda paths: base_fingerprint["key"]),
               spec("cached", cached, needs=("base",), fingerprint=lambda paths: "same"))  # fmt: skip
    reader = HostReader(PATHS, sources)

    assert [reader.read().results["cached"] for _ in range(3)] == [1, 1, 1]
    assert counter == {"base": 1, "cached": 1}  # nothing changed: both from the cache

    base_fingerprint["key"] = 2  # the base is read again: so is the source built on it
    host = reader.read()
    assert (host.results["cached"], host.statuses["cached"].cached, counter["cached"]) == (2, False, 2)
    assert reader.read().statuses["cached"].cached


def test_every_registry_source_has_a_typed_accessor_on_host():
    results = {source.name: object() for source in SOURCES}
    host = Host(paths=PATHS, results=results, statuses={})

    for source in SOURCES:
        accessor = "gpus" if source.name == "gpus_sysfs" else source.name
        assert isinstance(getattr(Host, accessor), property), accessor
        assert getattr(host, accessor) is results[source.name]
