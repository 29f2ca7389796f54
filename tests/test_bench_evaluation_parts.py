"""bench/evaluation_parts.py prints serve's evaluation by part on a generated tree, static or moved on before each
evaluation (``--churn``: the tree changes in place, so a copy is measured)."""

from __future__ import annotations

import pytest
from bench_modules import load_bench

gen = load_bench("bench_generate_host", "generate_host.py")
parts = load_bench("bench_evaluation_parts", "evaluation_parts.py")
SMALL = gen.HostSpec(cpus=16, gpus=2, pods=6, irqs=40, processes=60)
PARTS = ["read", "join", "checks", "families", "write+gzip", "total"]


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "host"
    gen.generate(root, SMALL)  # one per test: --churn changes it in place
    return root


def printed(capsys) -> dict[str, float]:
    words = capsys.readouterr().out.split()
    return {name: float(value) for name, value in zip(words[::2], words[1::2], strict=True)}


@pytest.mark.parametrize("churn", [[], ["--churn", "--pods", "1", "--pinned-every", "1"]])
def test_it_prints_every_part_of_an_evaluation(tree, capsys, churn):
    assert parts.main([str(tree), "--runs", "2", *churn]) == 0

    found = printed(capsys)
    assert list(found) == PARTS
    assert all(value >= 0 for value in found.values())
    assert found["total"] >= max(found[name] for name in PARTS[:-1])


def test_the_churn_options_need_churn(tree):
    with pytest.raises(SystemExit):
        parts.main([str(tree), "--pods", "2"])


def test_pace_sleeps_before_every_evaluation_outside_the_timings(tree, capsys, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(parts.time, "sleep", slept.append)

    assert parts.main([str(tree), "--runs", "2", "--pace", "0.5"]) == 0

    assert slept == [0.5] * 5  # the three warm-up evaluations and the two measured
    assert list(printed(capsys)) == PARTS


def test_without_pace_nothing_sleeps(tree, capsys, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(parts.time, "sleep", slept.append)

    assert parts.main([str(tree), "--runs", "1"]) == 0

    assert slept == []
