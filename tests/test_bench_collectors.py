"""bench/collectors_cost.py measures what it says: both ways of leaving collectors out, every configuration, on a
real tree (the reference node). Timings are never asserted; the sizes of the expositions are."""

from __future__ import annotations

import re

from bench_modules import load_bench
from numawatch.collectors import COLLECTORS

collectors_cost = load_bench("bench_collectors_cost", "collectors_cost.py")


def test_the_configurations_are_all_on_each_collector_off_alone_and_all_off():
    names = [name for name, _ in collectors_cost.configurations()]
    assert names == ["all on", *(f"{c.name} off" for c in COLLECTORS), "all off"]
    chosen = dict(collectors_cost.configurations())
    assert chosen["all off"].enabled == frozenset()
    assert chosen["cpu_info off"].disabled == {"cpu_info"}


def test_it_prints_each_configuration_both_ways_and_all_off_is_the_smallest_exposition(fake_host, capsys, monkeypatch):
    from fakehost.reference import reference_node

    reference_node(fake_host)
    every = collectors_cost.configurations()
    kept = [every[0], every[3], every[-1]]  # all on, one collector off, all off: each reads the tree afresh
    monkeypatch.setattr(collectors_cost, "configurations", lambda: kept)
    assert collectors_cost.main(["--host-root", str(fake_host.root), "--runs", "1"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines()[1:]:
        match = re.fullmatch(r"(.+?)\s+([\d.]+) ms\s+([\d.]+) ms\s+([\d.]+) ms\s+([\d.]+) KB", line)
        assert match, line
        rows[match.group(1)] = float(match.group(5))
    assert list(rows) == [name for name, _ in kept]
    assert rows["all off"] < rows["all on"]
    assert all(rows["all off"] <= size <= rows["all on"] for size in rows.values())
