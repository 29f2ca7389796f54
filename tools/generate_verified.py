"""Generate docs/verified.md: what numawatch has been verified on, one row per tree of the corpus (tests/corpus).

Every fact comes from the tree itself (kernel version from ``proc/version``, hwloc's ``proc/hwloc-nofile-info`` or
the capture's console log; architecture from ``hwloc-nofile-info`` or ``proc/cpuinfo``; cgroup mounts from
``proc/mounts`` or the layout of ``sys/fs/cgroup``; PCI functions and their drivers from ``sys/devices/pci*``), the
CPU map from hwloc (``lstopo-no-graphics``, the oracle), and the comparison from tests/hwloc_oracle.py with the
expectations of tests/corpus_expectations.py, so the page changes when numawatch's reading does. Needs hwloc
installed. Run ``python tools/generate_verified.py`` after changing the corpus or a reader, ``--check`` to only
compare (tests/test_verified_doc.py does).
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _directory in (REPO / "tools", REPO / "tests"):
    if str(_directory) not in sys.path:
        sys.path.insert(0, str(_directory))

from corpus import CorpusTree, corpus_root, trees  # noqa: E402
from corpus_expectations import CORPUS, Expected  # noqa: E402
from generated_files import sync  # noqa: E402
from hwloc_oracle import FIELDS, FieldResult, Reading, compare, readings, summary  # noqa: E402
from numawatch.host import read_host  # noqa: E402
from numawatch.paths import Paths  # noqa: E402
from oracle_shapes import FIRMWARE_OVERLAP, SHAPES  # noqa: E402

OUTPUT = REPO / "docs" / "verified.md"
_LIMIT = 4096  # the first bytes of a file are all a fact here needs
_SAFE = re.compile(r"[^A-Za-z0-9._+=~-]")  # what may reach the page from a tree's files: no markup, no spaces


def _text(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(_LIMIT).decode("utf-8", "replace")
    except OSError:
        return None


def _clean(value: str, limit: int = 60) -> str:
    return _SAFE.sub("", value.replace("\0", "")).strip()[:limit]


def _nofile_info(root: Path) -> dict[str, str]:
    """hwloc-gather-topology's record of uname: ``OSRelease: 5.15.0``, ``Architecture: aarch64``."""
    found = {}
    for line in (_text(root / "proc/hwloc-nofile-info") or "").splitlines():
        name, colon, value = line.partition(":")
        if colon:
            found[name.strip()] = value.strip()
    return found


def kernel_version(root: Path, console: Path | None = None) -> str:
    version = _text(root / "proc/version")
    match = re.match(r"Linux version (\S+)", version or "")
    if match:
        return _clean(match.group(1))
    release = _nofile_info(root).get("OSRelease")
    if release:
        return _clean(release)
    log = _text(console) if console is not None else None
    match = re.search(r"Linux version (\S+)", log or "")
    if match:
        return _clean(match.group(1)) + " (console)"
    return "not recorded"


def architecture(root: Path) -> str:
    recorded = _nofile_info(root).get("Architecture")
    if recorded and not recorded.isdigit():  # some trees record an ARM architecture level ("7", "8") only
        return _clean(recorded)
    cpuinfo = _text(root / "proc/cpuinfo") or ""
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.MULTILINE)
    if vendor:
        return f"x86 ({_clean(vendor.group(1))})"
    if re.search(r"^CPU implementer\s*:", cpuinfo, re.MULTILINE) or "ARM" in cpuinfo or recorded:
        return "ARM" + (f" (v{_clean(recorded)})" if recorded else "")
    return "not recorded"


def cgroups(root: Path) -> str:
    """The cgroup hierarchies mounted where the tree was gathered: v1 (with its controllers), v2, or both."""
    v1: set[str] = set()
    v2 = False
    mounts = _text(root / "proc/mounts")
    if mounts is not None:
        for line in mounts.splitlines():
            fields = line.split()
            if len(fields) < 4:
                continue
            if fields[2] == "cgroup2":
                v2 = True
            elif fields[2] == "cgroup":
                options = set(fields[3].split(","))
                v1 |= {name for name in ("cpuset", "cpu", "memory", "cpuacct", "freezer", "pids") if name in options}
                v1 |= {_clean(option, 30) for option in options if option.startswith("name=")}
    else:
        top = root / "sys/fs/cgroup"
        v2 = (top / "cgroup.controllers").is_file()
        v1 = {name for name in ("cpuset", "cpu", "memory") if (top / name).is_dir()}
    parts = []
    if v1:
        parts.append(f"v1 ({', '.join(sorted(v1))})")
    if v2:
        parts.append("v2")
    return " + ".join(parts) if parts else "none captured"


def pci(root: Path) -> tuple[int, tuple[str, ...]]:
    """PCI functions (directories of ``sys/devices/pci*`` with a ``class``) and the drivers bound to them."""
    functions = 0
    drivers: set[str] = set()
    for top in sorted((root / "sys/devices").glob("pci*")):
        for directory, _subdirs, files in os.walk(top):
            if "class" not in files or not re.search(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", directory):
                continue
            functions += 1
            link = Path(directory) / "driver"
            if link.is_symlink():
                drivers.add(_clean(os.path.basename(os.readlink(link)), 30))
    return functions, tuple(sorted(drivers))


# --------------------------------------------------------------------------------------------------- the page
@dataclass(frozen=True)
class Row:
    tree: CorpusTree
    root: Path
    ours: Reading
    theirs: Reading
    results: Mapping[str, FieldResult]
    expected: Expected
    topology_up: bool


def _row(tree: CorpusTree) -> Row:
    root = corpus_root(tree.name)
    ours, theirs = readings(root)
    host = read_host(Paths.from_root(root))
    status = host.statuses.get("topology")
    return Row(
        tree, root, ours, theirs, compare(ours, theirs), CORPUS.get(tree.name, Expected()),
        status is not None and status.up,
    )  # fmt: skip


def _verdict(row: Row) -> str:
    differing = [name for name in FIELDS if name not in row.expected.blind and not row.results[name].equal]
    blind = [name for name in FIELDS if name in row.expected.blind]
    if not differing:
        text = f"equal on {len(FIELDS) - len(blind)} of {len(FIELDS)} fields"
    else:
        text = f"**differs on {len(differing)}** ({', '.join(differing)}; issue 14)"
    if blind:
        text += f"; not compared: {', '.join(blind)}"
    return text


def _sockets(row: Row) -> str:
    sockets = {cpu.socket for cpu in row.theirs.cpus.values() if cpu.socket is not None}
    if sockets:
        return str(len(sockets))
    ours = {cpu.socket for cpu in row.ours.cpus.values() if cpu.socket is not None}
    return f"{len(ours)} (numawatch; hwloc cannot tell)" if ours else "unknown"


def _nodes(row: Row) -> str:
    cpuless = row.theirs.cpuless_nodes
    return str(len(row.theirs.nodes)) + (f" ({len(cpuless)} CPU-less)" if cpuless else "")


def _present(root: Path) -> int:
    return sum(1 for path in (root / "sys/devices/system/cpu").glob("cpu[0-9]*") if path.is_dir())


def _pci(root: Path, gpus: int) -> str:
    functions, drivers = pci(root)
    if not functions:
        return "none captured"
    text = f"{functions}" + (f" ({', '.join(drivers)})" if drivers else " (no driver links captured)")
    return text + (f", {gpus} NVIDIA GPUs" if gpus else "")


def _origin(tree: CorpusTree) -> str:
    if tree.kind == "realkernel":
        return "QEMU, this project"
    return "hwloc, edited" if tree.name.startswith("fake") else "hwloc, real machine"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _table(rows: Iterable[Row]) -> list[str]:
    lines = [
        "| tree | from | kernel | architecture | CPUs online / present | sockets | NUMA nodes | cgroups "
        "| PCI functions (drivers) | topology source | CPU map against hwloc |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = (
            f"`{row.tree.name}`",
            _origin(row.tree),
            kernel_version(row.root, row.tree.console),
            architecture(row.root),
            f"{len(row.theirs.online)} / {_present(row.root)}",
            _sockets(row),
            _nodes(row),
            cgroups(row.root),
            _pci(row.root, len(row.theirs.gpus)),
            "up" if row.topology_up else "**down** (issue 14)",
            _verdict(row),
        )
        lines.append("| " + " | ".join(_escape(cell) for cell in cells) + " |")
    return lines


def _details(rows: Iterable[Row]) -> list[str]:
    """Per tree: each known reader bug once, with the fields it makes differ and how; then what is not compared."""
    lines: list[str] = []
    for row in rows:
        entries = []
        by_reason: dict[str, list[str]] = {}
        for name in FIELDS:
            if name in row.expected.blind or row.results[name].equal:
                continue
            reason = row.expected.known.get(name, "not expected: a difference no expectation names")
            by_reason.setdefault(reason, []).append(f"  - {name}: {summary(row.results[name], 3)}")
        for reason, fields in by_reason.items():
            entries += [f"- {reason}.", *fields]
        entries += [f"- {name} not compared: {why}." for name, why in row.expected.blind.items()]
        if entries:
            lines += ["", f"### `{row.tree.name}`", "", *entries]
    return lines or ["", "None: numawatch and hwloc agree on every field of every tree."]


def _paragraph(text: str) -> list[str]:
    return textwrap.wrap(text, width=120, break_long_words=False, break_on_hyphens=False)


def _peer_table() -> list[str]:
    """The peers' trees, which hwloc cannot read: what numawatch finds there (tests/test_peer_corpus.py compares it
    with what node_exporter and procfs expect of them)."""
    lines = [
        "| tree | from | kernel | architecture | CPUs online / present (numawatch) | NUMA nodes (numawatch) "
        "| topology source | kernel source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for tree in trees():
        if tree.kind != "peer":
            continue
        root = corpus_root(tree.name)
        host = read_host(Paths.from_root(root))
        topology = host.topology
        statuses = host.statuses
        online = f"{len(topology.online)} / {len(topology.cpus)}" if topology is not None else "unknown"
        nodes = str(len(topology.nodes)) if topology is not None else "unknown"
        cells = (
            f"`{tree.name}`",
            tree.name.removeprefix("peer-") + "'s fixtures",
            kernel_version(root),
            architecture(root),
            online,
            nodes,
            "up" if statuses["topology"].up else "**down**",
            "up" if statuses["kernel"].up else "**down**",
        )
        lines.append("| " + " | ".join(_escape(cell) for cell in cells) + " |")
    return lines


def render() -> str:
    rows = [_row(tree) for tree in trees() if tree.kind != "peer"]
    equal = sum(1 for row in rows if all(row.results[name].equal for name in FIELDS if name not in row.expected.blind))
    intro = (
        "Every tree below is a `/sys` and `/proc` that a real kernel printed: real machines' trees from hwloc's "
        "regression suite ([tests/corpus/hwloc](../tests/corpus/hwloc/README.md); a few were edited by hwloc's "
        "developers to reproduce a firmware case, *hwloc, edited* below) and kernels this project booted under QEMU "
        "(`tests/corpus/realkernel-*`, each with its build script and a README that says what is true there). The "
        "test suite reads every one of them on every run:"
    )
    checks = [
        "`numawatch check --host-root TREE --format json` must not crash, and the topology source must be up "
        "(tests/test_corpus_oracle.py);",
        "numawatch's CPU map, as `numawatch_cpu_info`, `numawatch_numa_node_cpus` and `numawatch_gpu_info` expose "
        "it, must equal what Debian's hwloc (`lstopo-no-graphics --input TREE --of xml`, an independent reader) "
        "finds in the same files, field by field: " + ", ".join(FIELDS) + " (tests/hwloc_oracle.py says what each "
        "means on both sides);",
        "the real-kernel trees' findings are tested against their READMEs (tests/test_checks_pinning.py, "
        "tests/test_host_kernel.py and the other tests that take `realkernel_root`).",
    ]
    outcome = (
        f"**{equal} of {len(rows)} trees** read exactly as hwloc reads them. Where one does not, numawatch has a "
        "reader bug that issue 14 names: the test of that field is an expected failure, so its fix shows. Where "
        "hwloc cannot tell (the capture lacks the files it reads), the field is not compared. The columns CPUs "
        "online, sockets and NUMA nodes are hwloc's reading; \"none captured\" means the tree has no such files."
    )
    fakes = (
        "The trees the test suite's own builders write (tests/fakehost, bench/generate_host.py) must agree with "
        "hwloc on every field, with nothing left uncompared; a difference there means the builder writes what no "
        "kernel would. Compared: "
        + "; ".join(f"`{shape.name}`: {shape.description}" for shape in SHAPES)
        + f". And `{FIRMWARE_OVERLAP.name}`: {FIRMWARE_OVERLAP.description}, where hwloc maps each CPU to the lowest "
        "node that claims it and drops the other nodes (numawatch's mapping there is an expected failure, issue 14)."
    )
    peers = (
        "node_exporter and procfs test themselves on real kernels' files and say what they expect to read there "
        "([tests/corpus/peers](../tests/corpus/peers/README.md), Apache-2.0). hwloc cannot read these partial "
        "captures, so they are not in the table above: tests/test_peer_corpus.py compares numawatch's reading "
        "with node_exporter's expected metrics (`e2e-output.txt`: NUMA counters, CPU topology, cpufreq governors, "
        "interrupts by kind, isolated and offline CPUs) and with procfs's asserted values, value by value, and "
        "checks that what the trees lack (`nodeN/distance`, `proc/cmdline`, `nodeN/cpulist`) is \"not evaluated\" "
        "naming the file, never a finding."
    )
    lines = [
        "# What numawatch has been verified on",
        "",
        "<!-- Generated by tools/generate_verified.py from tests/corpus; tests/test_verified_doc.py keeps it current."
        " Do not edit by hand. -->",
        "",
        *_paragraph(intro),
        "",
        *(line for check in checks for line in textwrap.wrap(check, 120, initial_indent="- ", subsequent_indent="  ",
                                                               break_long_words=False, break_on_hyphens=False)),
        "",
        *_paragraph(outcome),
        "",
        *_table(rows),
        "",
        "## Differences, and fields not compared",
        *_details(rows),
        "",
        "## The fake hosts, compared the same way",
        "",
        *_paragraph(fakes),
        "",
        "## The peers' trees, compared with what the peers expect",
        "",
        *_paragraph(peers),
        "",
        *_peer_table(),
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def outputs() -> dict[Path, str]:
    return {OUTPUT: render()}


def main(argv: list[str] | None = None) -> int:
    return sync(outputs, "tools/generate_verified.py", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
