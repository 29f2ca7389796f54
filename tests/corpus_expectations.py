"""What the corpus trees are known to show under the hwloc oracle, tree by tree (tests/test_corpus_oracle.py).

- ``known``: fields where numawatch reads a real kernel's files differently from hwloc because of a known reader bug:
  the test of that (tree, field) is ``xfail(strict=True)`` with this reason, so the fix turns it green (and a stale
  entry fails). docs/verified.md shows each with the difference found. None is known today: the reader
  fixes (NUL padding, old kernels' files, overlapping and offline nodes) made every tree agree.
- ``blind``: fields hwloc cannot read on that tree (the files it needs are not in the capture), with why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PER_CPU_FIELDS = ("socket", "core", "NUMA node", "SMT siblings")


# --------------------------------------------------------------------------------------------------- expectations
@dataclass(frozen=True)
class Expected:
    """What a corpus tree is known to show: fields that differ because of a known reader bug (field -> the reason,
    ``xfail`` until fixed) and fields hwloc cannot read on it (field -> why)."""

    known: Mapping[str, str] = field(default_factory=dict)
    blind: Mapping[str, str] = field(default_factory=dict)


def _every(fields: tuple[str, ...], reason: str) -> dict[str, str]:
    return dict.fromkeys(fields, reason)


CORPUS: dict[str, Expected] = {
    "realkernel-4node": Expected(
        blind={"socket": "the capture has package_cpus_list and core_siblings_list but not the package_cpus or "
               "core_siblings masks hwloc reads, so hwloc finds no Package (numawatch reads physical_package_id)"},
    ),
}  # fmt: skip
FIRMWARE_OVERLAP_EXPECTED = Expected(
    blind={
        "NUMA nodes": "hwloc drops a node whose CPUs a lower node already claimed, so it lists node 0 only",
        "CPU-less nodes": "hwloc drops node 1 altogether, so it cannot say whether node 1 has CPUs",
    },
)  # fmt: skip
