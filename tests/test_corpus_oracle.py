"""numawatch's CPU map agrees with hwloc's on every corpus tree and on every tree the fake-host builders write.

One test per tree and field (tests/hwloc_oracle.py says what each field means on both sides): online CPUs, socket,
core, NUMA node and SMT siblings per CPU, the set of NUMA nodes, the CPU-less ones, and each GPU's NUMA node.

- A corpus tree (tests/corpus) is what a real kernel printed. Where numawatch reads it differently from hwloc
  because of a known reader bug, that exact (tree, field) is ``xfail(strict=True)`` with the difference
  in its reason, so the fix turns it green; ``test_a_known_reader_bug_is_the_only_difference`` rewrites a copy of
  the tree into what a fixed reader would see and requires every field to agree there, so each reason is the whole
  story. Where hwloc itself cannot tell (the tree lacks the masks it reads), the field is declared blind with the
  reason, and the test checks that hwloc indeed has nothing there.
- A fake tree (tests/oracle_shapes.py) must agree on every field, with nothing blind: a difference means the builder
  writes what no kernel would, and the builder gets fixed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from corpus import corpus_root, oracle_tree_names, tree_names
from corpus_expectations import CORPUS, FIRMWARE_OVERLAP_EXPECTED, PER_CPU_FIELDS, Expected
from hwloc_oracle import (
    FIELDS,
    LSTOPO,
    Reading,
    compare,
    hwloc_reading,
    lstopo_available,
    numawatch_reading,
    readings,
    summary,
)
from numawatch.cpuset import format_cpulist
from oracle_shapes import FIRMWARE_OVERLAP, SHAPES, Shape


def test_every_expectation_names_a_corpus_tree_and_a_field():
    assert set(CORPUS) <= set(tree_names())
    for expected in (*CORPUS.values(), FIRMWARE_OVERLAP_EXPECTED):
        assert set(expected.known) | set(expected.blind) <= set(FIELDS)
        assert not set(expected.known) & set(expected.blind)
        assert all(reason.startswith("reader bug: ") for reason in expected.known.values())


# --------------------------------------------------------------------------------------------------- the trees
@pytest.fixture(scope="session")
def lstopo() -> str:
    if not lstopo_available():
        pytest.fail(f"{LSTOPO} is not installed: apt-get install hwloc (tests/install-and-run.sh does)")
    return LSTOPO


@pytest.fixture(scope="session")
def fake_roots(tmp_path_factory) -> Callable[[Shape], Path]:
    built: dict[str, Path] = {}

    def root_of(shape: Shape) -> Path:
        if shape.name not in built:
            root = tmp_path_factory.mktemp("oracle") / shape.name
            shape.build(root)
            built[shape.name] = root
        return built[shape.name]

    return root_of


def _cases(expected_of: Callable[[str], Expected], names: tuple[str, ...]) -> list:
    cases = []
    for name in names:
        expected = expected_of(name)
        for name_of_field in FIELDS:
            if name_of_field in expected.blind and name_of_field not in PER_CPU_FIELDS:
                continue  # a set hwloc cannot read: nothing to compare (why: tests/corpus_expectations.py)
            marks = []
            if name_of_field in expected.known:
                marks.append(pytest.mark.xfail(strict=True, reason=expected.known[name_of_field]))
            cases.append(pytest.param(name, name_of_field, marks=marks, id=f"{name}:{name_of_field.replace(' ', '_')}"))
    return cases


def _check(name_of_field: str, ours: Reading, theirs: Reading, expected: Expected) -> None:
    result = compare(ours, theirs)[name_of_field]
    if name_of_field in expected.blind:
        assert result.compared == 0 and result.blind == theirs.online, (
            f"{name_of_field} was declared blind ({expected.blind[name_of_field]}) but hwloc has it for "
            f"CPUs {format_cpulist(theirs.online - result.blind)}"
        )
        return
    assert not result.blind, f"hwloc has no {name_of_field} for CPUs {format_cpulist(result.blind)}"
    assert result.equal, f"{name_of_field}: {summary(result)}"
    if name_of_field in PER_CPU_FIELDS or name_of_field == "online CPUs":
        assert result.compared > 0, f"no CPU to compare {name_of_field} on"


@pytest.mark.parametrize(
    ("tree", "name_of_field"), _cases(lambda name: CORPUS.get(name, Expected()), oracle_tree_names())
)
@pytest.mark.slow
def test_corpus_tree_reads_as_hwloc_reads_it(lstopo, tree, name_of_field):
    ours, theirs = readings(corpus_root(tree))

    _check(name_of_field, ours, theirs, CORPUS.get(tree, Expected()))


SHAPES_BY_NAME = {shape.name: shape for shape in (*SHAPES, FIRMWARE_OVERLAP)}


@pytest.mark.parametrize(
    ("shape", "name_of_field"),
    _cases(
        lambda name: FIRMWARE_OVERLAP_EXPECTED if name == FIRMWARE_OVERLAP.name else Expected(),
        tuple(SHAPES_BY_NAME),
    ),
)
@pytest.mark.slow
def test_fake_tree_reads_as_hwloc_reads_it(lstopo, fake_roots, shape, name_of_field):
    ours, theirs = readings(fake_roots(SHAPES_BY_NAME[shape]))

    expected = FIRMWARE_OVERLAP_EXPECTED if shape == FIRMWARE_OVERLAP.name else Expected()
    _check(name_of_field, ours, theirs, expected)


@pytest.mark.slow
def test_the_comparison_finds_a_planted_difference(lstopo, fake_roots, tmp_path):
    """The oracle is not vacuous. hwloc numbers a core by the core_id of its first CPU, so giving both threads of
    core 5 (CPUs 5 and 21) core_id 7 changes both readings alike; giving the second thread alone another core_id
    is exactly one difference, in the core field."""
    copy = tmp_path / "edited"
    shutil.copytree(fake_roots(SHAPES_BY_NAME["reference"]), copy, symlinks=True)
    (copy / "sys/devices/system/cpu/cpu5/topology/core_id").write_text("7\n")
    (copy / "sys/devices/system/cpu/cpu21/topology/core_id").write_text("7\n")

    results = compare(numawatch_reading(copy), hwloc_reading(copy))

    assert all(result.equal for result in results.values())
    (copy / "sys/devices/system/cpu/cpu21/topology/core_id").write_text("5\n")
    results = compare(numawatch_reading(copy), hwloc_reading(copy))
    assert results["core"].differences == ("CPU 21: numawatch 5, hwloc 7",)
    assert [name for name, result in results.items() if not result.equal] == ["core"]


# --------------------------------------------------------------------------------------------------- numawatch check
@pytest.mark.parametrize("tree", tree_names())
@pytest.mark.slow
def test_check_never_crashes_and_topology_is_up(tree):
    """``numawatch check --format json`` on every corpus tree: no traceback, an exit code the CLI documents, JSON
    that parses, and the topology source up (every corpus tree has a CPU topology)."""
    import json

    done = subprocess.run(
        [sys.executable, "-m", "numawatch", "check", "--host-root", str(corpus_root(tree)), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 1, 2), done.stderr[-2000:]
    report = json.loads(done.stdout)
    sources = {source["name"]: source for source in report["sources"]}
    assert sources["topology"]["up"], sources["topology"]["reason"]
