"""Hosts made by hand as a HostReader's readings are: every source with a generation, every pod stamped with the
reading that made it, and one ``Store`` shared along the chain, so what one reading derived is there for the next
exactly as in serve."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from numawatch.host import Host
from numawatch.model import frozen_map
from numawatch.store import Store


def as_reading(host: Host) -> Host:
    """``host`` as a HostReader's first reading: every source at generation 1, every pod made by reading 1."""
    results = dict(host.results)
    if host.cgroups is not None:
        pods = tuple(pod if pod.generation else replace(pod, generation=1) for pod in host.cgroups.pods)
        results["cgroups"] = replace(host.cgroups, pods=pods)
    return replace(
        host, results=frozen_map(results), generations=dict.fromkeys(host.statuses or results, 1), store=Store()
    )


def next_reading(previous: Host, **results: Any) -> Host:
    """The reading after ``previous``: the same snapshots with the same generations unless replaced; a replaced
    source has this reading's generation, and so has every pod of a replaced cgroups snapshot that is not one of
    the previous reading's pod objects (the cgroups source hands unchanged pods out again)."""
    number = max(previous.generations.values(), default=0) + 1
    generations = dict(previous.generations)
    cgroups = results.get("cgroups")
    if cgroups is not None:
        before = {id(pod) for pod in previous.cgroups.pods} if previous.cgroups is not None else set()
        pods = tuple(pod if id(pod) in before else replace(pod, generation=number) for pod in cgroups.pods)
        results["cgroups"] = replace(cgroups, pods=pods)
    for name in results:
        generations[name] = number
    return Host(
        paths=previous.paths,
        results=frozen_map({**previous.results, **results}),
        statuses=previous.statuses,
        previous=replace(previous, previous=None),
        generations=generations,
        store=previous.store,
    )


def from_scratch(host: Host) -> Host:
    """The same reading (and previous reading) with nothing derived before: nothing to reuse, everything anew."""
    previous = None if host.previous is None else replace(host.previous, store=Store())
    return replace(host, previous=previous, store=Store())


def stored(store: Store, name: object) -> object:
    """What ``store`` holds under ``name`` (None: nothing), to look at what serve keeps."""
    entry = store._entries.get(name)  # type: ignore[arg-type]
    return None if entry is None else entry[1]
