"""docs/verified.md is what tools/generate_verified.py writes from the corpus, and README.md links it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hwloc_oracle import LSTOPO, lstopo_available

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO / "tools" / "generate_verified.py"


def load_generator():
    """The generator is a script, not a package module: load it by path."""
    name = "numawatch_generate_verified"
    spec = importlib.util.spec_from_file_location(name, GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_committed_page_is_what_the_generator_writes():
    if not lstopo_available():
        pytest.fail(f"{LSTOPO} is not installed: apt-get install hwloc (tests/install-and-run.sh does)")
    for path, text in load_generator().outputs().items():
        assert path.read_text() == text, f"{path.name} is stale: run python tools/generate_verified.py"


def test_the_page_has_a_row_per_corpus_tree_and_readme_links_it():
    from corpus import tree_names

    page = (REPO / "docs/verified.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]

    assert [row.split("`")[1] for row in rows] == list(tree_names())
    assert "(docs/verified.md)" in (REPO / "README.md").read_text()


def test_facts_come_from_the_trees_files(tmp_path):
    generator = load_generator()
    root = tmp_path / "host"
    (root / "proc").mkdir(parents=True)
    (root / "proc/version").write_text("Linux version 6.8.0-52-generic (buildd@lcy02) #53-Ubuntu SMP\n")
    (root / "proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n")
    (root / "proc/mounts").write_text("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"
                                      "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n")  # fmt: skip
    function = root / "sys/devices/pci0000:00/0000:00:02.0"
    function.mkdir(parents=True)
    (function / "class").write_text("0x030200\n")
    (function / "driver").symlink_to("../../../bus/pci/drivers/nvidia")

    assert generator.kernel_version(root) == "6.8.0-52-generic"
    assert generator.architecture(root) == "x86 (AuthenticAMD)"
    assert generator.cgroups(root) == "v1 (cpuset) + v2"
    assert generator.pci(root) == (1, ("nvidia",))


def test_a_hostile_value_in_a_tree_does_not_reach_the_page(tmp_path):
    generator = load_generator()
    root = tmp_path / "host"
    (root / "proc").mkdir(parents=True)
    (root / "proc/version").write_text("Linux version <script>|x\0`y`[z](http://e)\n")

    assert generator.kernel_version(root) == "scriptxyzhttpe"
