"""bench/churn.py moves a generated host's counters as a busy node would, without changing the set of files, lines or
any line's layout, so that numawatch (and node_exporter) still read it the way they read the static tree.

A small generated node (32 CPUs, 12 pods, 80 IRQs) is made once and copied for each test: the churn changes it in
place.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from bench_modules import load_bench
from fakehost.kernel import FakeIrq, format_interrupts
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.model.interrupts import KIND_DEVICE
from numawatch.paths import Paths
from numawatch.sources.cgroups import parse_numa_stat_v1, parse_numa_stat_v2
from numawatch.sources.interrupts import parse_interrupts
from numawatch.sources.numastat import parse_numastat

gen = load_bench("bench_generate_host", "generate_host.py")
churn = load_bench("bench_churn", "churn.py")
nefiles = sys.modules["node_exporter_files"]
SMALL = gen.HostSpec(cpus=32, gpus=4, pods=12, irqs=80, processes=200)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("churn-host") / "host"
    return gen.generate(root, SMALL)


@pytest.fixture
def tree(generated, tmp_path) -> Path:
    copy = tmp_path / "host"
    shutil.copytree(generated.root, copy, symlinks=True)
    return copy


def _interrupts(root: Path):
    data = (root / "proc/interrupts").read_bytes()
    cpus = [int(token[3:]) for token in data.split(b"\n", 1)[0].split()]
    return parse_interrupts(data, cpus)  # every CPU watched: every count


def _counts(root: Path) -> dict[str, dict[int, int]]:
    return {row.key: dict(row.counts) for row in _interrupts(root).rows}


def _isolated(root: Path) -> frozenset[int]:
    return churn.isolated_cpus(Paths.from_root(root))


def _target(root: Path, irq: str) -> int:
    text = (root / f"proc/irq/{irq}/effective_affinity_list").read_text()
    return min(int(part.split("-")[0]) for part in text.strip().split(","))


def _numa_stats(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): path.read_text() for path in sorted(root.rglob("memory.numa_stat"))}


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*"))
            if path.is_file() and not path.is_symlink()}  # fmt: skip


# --------------------------------------------------------------------------------------------------- /proc/interrupts
@pytest.mark.slow
def test_interrupts_still_parse_with_the_same_rows_and_cpus(tree):
    before = _interrupts(tree)
    churn.Churn(tree).advance()
    after = _interrupts(tree)
    assert after.cpus == before.cpus
    assert [(row.key, row.kind, row.name, row.chip) for row in after.rows] == [
        (row.key, row.kind, row.name, row.chip) for row in before.rows
    ]


@pytest.mark.slow
def test_every_line_keeps_its_length_so_every_cell_stays_11_bytes_wide(tree):
    before = (tree / "proc/interrupts").read_bytes().split(b"\n")
    churn.Churn(tree).advance()
    after = (tree / "proc/interrupts").read_bytes().split(b"\n")
    assert [len(line) for line in after] == [len(line) for line in before]
    assert after != before


@pytest.mark.slow
def test_loc_grows_on_every_cpu_and_more_on_housekeeping_cpus(tree):
    before = _counts(tree)["LOC"]
    churn.Churn(tree).advance()
    grown = {cpu: count - before.get(cpu, 0) for cpu, count in _counts(tree)["LOC"].items()}
    assert sorted(grown) == list(range(32)) and min(grown.values()) > 0
    isolated = _isolated(tree)
    assert len(isolated) == 28
    assert min(delta for cpu, delta in grown.items() if cpu not in isolated) > max(
        delta for cpu, delta in grown.items() if cpu in isolated
    )


@pytest.mark.slow
def test_ipi_rows_grow_everywhere_and_quiet_rows_stay_quiet(tree):
    before = _counts(tree)
    churn.Churn(tree).advance()
    after = _counts(tree)
    for key in ("RES", "CAL", "TLB", "IWI", "NMI", "PMI", "MCP"):
        assert all(after[key][cpu] > before[key].get(cpu, 0) for cpu in range(32)), key
    for key in ("SPU", "RTR", "TRM", "THR", "DFR", "MCE"):
        assert after[key] == before[key] == {}, key


@pytest.mark.slow
def test_nic_vectors_grow_on_their_target_cpu_only_without_stray(tree):
    before = _counts(tree)
    churn.Churn(tree, stray=0.0).advance()
    after = _counts(tree)
    isolated = _isolated(tree)
    nic_rows = [row for row in _interrupts(tree).rows if row.name.startswith("mlx5_comp")]
    assert nic_rows
    checked = 0
    for row in nic_rows:
        target = _target(tree, row.key)
        if target in isolated:
            continue  # the planted misrouted vector: it counts where its affinity sends it
        grown = {cpu: count - before[row.key].get(cpu, 0) for cpu, count in after[row.key].items()}
        assert {cpu for cpu, delta in grown.items() if delta} == {target}, row.key
        checked += 1
    assert checked >= len(nic_rows) - 1


@pytest.mark.slow
def test_no_device_row_counts_on_an_isolated_cpu_unless_routed_there(tree):
    before = _counts(tree)
    churn.Churn(tree, stray=0.0).advance()
    after = _counts(tree)
    isolated = _isolated(tree)
    for row in _interrupts(tree).rows:
        if row.kind != KIND_DEVICE or _target(tree, row.key) in isolated:
            continue
        moved = {cpu for cpu in isolated if after[row.key].get(cpu, 0) != before[row.key].get(cpu, 0)}
        assert moved == set(), row.key


@pytest.mark.slow
def test_gpu_vectors_all_fire_and_a_quarter_of_the_nvme_queues_do(tree):
    before = _counts(tree)
    churn.Churn(tree).advance()
    after = _counts(tree)
    rows = _interrupts(tree).rows
    gpus = [row.key for row in rows if row.name == "nvidia"]
    nvme = [row.key for row in rows if re.fullmatch(r"nvme\d+q\d+", row.name)]
    assert len(gpus) == 4 and nvme
    assert all(after[key] != before[key] for key in gpus)
    fired = sum(after[key] != before[key] for key in nvme)
    assert fired == round(len(nvme) * churn.NVME_BUSY_SHARE)


@pytest.mark.slow
def test_stray_puts_device_counts_on_isolated_cpus(tree):
    before = _counts(tree)
    churn.Churn(tree, stray=1.0).advance()
    after = _counts(tree)
    isolated = _isolated(tree)
    strays = {row.key for row in _interrupts(tree).rows if row.kind == KIND_DEVICE
              and any(after[row.key].get(cpu, 0) > before[row.key].get(cpu, 0) for cpu in isolated)}  # fmt: skip
    assert len(strays) == 80  # every device row


@pytest.mark.slow
def test_counts_never_decrease_across_two_advances(tree):
    mover = churn.Churn(tree, stray=0.5)
    readings = [_counts(tree)]
    for _ in range(2):
        mover.advance()
        readings.append(_counts(tree))
    for older, newer in itertools.pairwise(readings):
        for key, counts in older.items():
            assert all(newer[key].get(cpu, 0) >= count for cpu, count in counts.items()), key


@pytest.mark.slow
def test_a_count_wider_than_10_digits_is_left_as_it_is_and_the_rest_of_its_row_moves(tree):
    path = tree / "proc/interrupts"
    lines = path.read_bytes().split(b"\n")
    index = next(i for i, line in enumerate(lines) if line.lstrip().startswith(b"LOC:"))
    colon = lines[index].index(b":")
    lines[index] = lines[index][: colon + 1] + b" 12345678901" + lines[index][colon + 12 :]  # CPU0: 11 digits
    path.write_bytes(b"\n".join(lines))
    before = _counts(tree)["LOC"]
    assert before[0] == 12345678901
    churn.Churn(tree).advance()
    after_lines = path.read_bytes().split(b"\n")
    assert [len(line) for line in after_lines] == [len(line) for line in lines]
    after = _counts(tree)["LOC"]
    assert after[0] == 12345678901
    assert all(after[cpu] > before[cpu] for cpu in range(1, 32))


@pytest.mark.slow
def test_a_count_stops_at_2_to_the_32_instead_of_widening(tree):
    path = tree / "proc/interrupts"
    lines = path.read_bytes().split(b"\n")
    index = next(i for i, line in enumerate(lines) if line.lstrip().startswith(b"LOC:"))
    colon = lines[index].index(b":")
    lines[index] = lines[index][: colon + 1] + b" %10d" % (churn.U32_MAX - 3) + lines[index][colon + 12 :]
    path.write_bytes(b"\n".join(lines))
    churn.Churn(tree).advance()
    assert _counts(tree)["LOC"][0] == churn.U32_MAX
    assert [len(line) for line in path.read_bytes().split(b"\n")] == [len(line) for line in lines]


@pytest.mark.parametrize("old_layout", [False, True])
def test_interrupt_cells_are_found_in_both_kernel_layouts(old_layout):
    irq = FakeIrq(5, "rtc0", frozenset({0}), counts={0: 7, 2: 123456})
    text = format_interrupts([0, 2], [irq], {"LOC": {0: 5, 2: 9}}, old_layout=old_layout).encode()
    cpus, rows = churn.parse_interrupt_cells(text)
    assert cpus == (0, 2)
    assert [(row.key, row.name, row.ends) for row in rows] == [("5", "rtc0", None), ("LOC", "Local timer interrupts",
                                                                                     None)]  # fmt: skip
    data = bytearray(text)
    assert churn._grow_cell(data, rows[0].end(1), 10) == 10
    assert churn._grow_cell(data, rows[1].end(0), 1) == 1
    assert len(data) == len(text)
    parsed = parse_interrupts(bytes(data), [0, 2])
    assert [dict(row.counts) for row in parsed.rows] == [{0: 7, 2: 123466}, {0: 6, 2: 9}]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (b"", "no header line"),
        (b"            CPU0       CPUX\n", "bad header column"),
        (b"            CPU0       CPU1\n 25:          1\n", "row 25: 1 counts for 2 CPUs"),
        (b"            CPU0       CPU1\n 25:          1          x  PCI-MSI  a\n", "row 25: 1 counts for 2 CPUs"),
        (b"            CPU0       CPU1\nnonsense\n", "line without ':'"),
    ],
    ids=["empty", "bad-header", "short-row", "letters-in-a-row", "no-colon"],
)
@pytest.mark.slow
def test_a_malformed_interrupts_file_is_refused_naming_the_file_and_the_row(tree, text, what):
    (tree / "proc/interrupts").write_bytes(text)
    with pytest.raises(churn.ChurnError, match=re.escape(f"{tree}/proc/interrupts: {what}")):
        churn.Churn(tree)


# --------------------------------------------------------------------------------------------------- memory.numa_stat
@pytest.mark.slow
def test_every_numa_stat_still_parses_with_the_same_nodes_and_moved_by_a_few_percent(generated, tree):
    before = _numa_stats(tree)
    assert len(before) == generated.container_cgroups  # the pause sandboxes' included
    churn.Churn(tree).advance()
    after = _numa_stats(tree)
    assert sorted(after) == sorted(before)
    moved = 0
    for path, text in after.items():
        old, new = parse_numa_stat_v2(before[path].encode()), parse_numa_stat_v2(text.encode())
        assert sorted(new) == sorted(old), path
        for node, value in old.items():
            assert abs(new[node] - value) <= value * churn.NUMA_STAT_DRIFT + 2, (path, node)
        assert [line.split()[0] for line in text.splitlines()] == [
            line.split()[0] for line in before[path].splitlines()
        ]
        moved += new != old
    assert moved == len(after)


@pytest.mark.slow
def test_numa_stat_stays_near_its_starting_value_over_many_advances(tree):
    before = {path: parse_numa_stat_v2(text.encode()) for path, text in _numa_stats(tree).items()}
    mover = churn.Churn(tree)
    for _ in range(20):
        mover.advance()
    for path, text in _numa_stats(tree).items():
        for node, value in parse_numa_stat_v2(text.encode()).items():
            assert abs(value - before[path][node]) <= before[path][node] * churn.NUMA_STAT_DRIFT + 2


@pytest.mark.slow
def test_cgroup_v1_numa_stat_keeps_each_total_the_sum_of_its_nodes(tmp_path):
    found = gen.generate(tmp_path / "v1", gen.HostSpec(cpus=16, gpus=2, pods=5, irqs=30, processes=60,
                                                       cgroup_version=1))  # fmt: skip
    root = Path(found.root)
    before = _numa_stats(root)
    assert before
    churn.Churn(root).advance()
    after = _numa_stats(root)
    assert sum(text != before[path] for path, text in after.items()) > len(after) // 2  # a few pages may not move
    for path, text in after.items():
        assert sorted(parse_numa_stat_v1(text.encode())) == sorted(parse_numa_stat_v1(before[path].encode()))
        for line in text.splitlines():
            head, *nodes = line.split()
            assert int(head.split("=")[1]) == sum(int(node.split("=")[1]) for node in nodes), (path, line)


@pytest.mark.slow
def test_a_malformed_numa_stat_is_refused_naming_the_file(tree):
    path = next(tree.rglob("memory.numa_stat"))
    path.write_text("anon N0=12 N1=x\n")
    with pytest.raises(churn.ChurnError, match=re.escape(f"{path}: unexpected line 'anon N0=12 N1=x'")):
        churn.Churn(tree)


# --------------------------------------------------------------------------------------------------- node counters
def _proc_stat(root: Path) -> dict[str, list[int]]:
    return {line.split()[0]: [int(value) for value in line.split()[1:]]
            for line in (root / "proc/stat").read_text().splitlines()}  # fmt: skip


@pytest.mark.slow
def test_proc_stat_grows_as_the_kernel_counts(tree):
    before, interrupts_before = _proc_stat(tree), _counts(tree)
    mover = churn.Churn(tree)
    mover.advance()
    after, interrupts_after = _proc_stat(tree), _counts(tree)
    assert list(after) == list(before)
    cpus = [f"cpu{cpu}" for cpu in range(32)]
    for name in cpus:
        assert sum(after[name]) - sum(before[name]) == nefiles.USER_HZ * churn.DEFAULT_SECONDS
        assert all(new >= old for new, old in zip(after[name], before[name], strict=True))
        assert all(new == 0 for new, old in zip(after[name], before[name], strict=True) if old == 0)  # no steal
    assert after["cpu"] == [sum(after[name][field] for name in cpus) for field in range(10)]
    grown = {
        key: sum(counts.values()) - sum(interrupts_before[key].values()) for key, counts in interrupts_after.items()
    }
    for key, delta in grown.items():
        if key.isdigit():
            assert after["intr"][int(key) + 1] - before["intr"][int(key) + 1] == delta, key
    assert after["intr"][0] - before["intr"][0] == sum(grown.values())
    assert after["softirq"][0] == before["softirq"][0] + sum(after["softirq"][1:]) - sum(before["softirq"][1:])
    assert after["ctxt"][0] > before["ctxt"][0] and after["processes"][0] >= before["processes"][0]
    for name in ("btime", "procs_running", "procs_blocked"):
        assert after[name] == before[name]


def _numastat(root: Path, node: int) -> dict[str, int]:
    path = root / f"sys/devices/system/node/node{node}/numastat"
    return parse_numastat(path.read_text(), str(path))


def _vmstat(root: Path) -> dict[str, int]:
    return {
        key: int(value) for key, value in (line.split() for line in (root / "proc/vmstat").read_text().splitlines())
    }


def _node_meminfo(root: Path, node: int) -> dict[str, int]:
    lines = (root / f"sys/devices/system/node/node{node}/meminfo").read_text().splitlines()
    return {line.split()[2].rstrip(":"): int(line.split()[3]) for line in lines}


@pytest.mark.slow
def test_numastat_vmstat_and_meminfo_move_and_still_add_up(tree):
    vmstat_before = _vmstat(tree)
    numastat_before = {node: _numastat(tree, node) for node in (0, 1)}
    mover = churn.Churn(tree)
    for _ in range(3):
        mover.advance()
    numastat = {node: _numastat(tree, node) for node in (0, 1)}
    vmstat = _vmstat(tree)
    assert numastat[0]["numa_hit"] > numastat_before[0]["numa_hit"]
    for node in (0, 1):
        counters = numastat[node]
        assert counters["local_node"] + counters["other_node"] == counters["numa_hit"] + counters["numa_miss"]
        assert all(counters[key] >= numastat_before[node][key] for key in counters)
    assert numastat[0]["numa_foreign"] == numastat[1]["numa_miss"] and numastat[1]["numa_foreign"] == numastat[0][
        "numa_miss"]  # fmt: skip
    for field, key in churn.NUMASTAT_TO_VMSTAT.items():
        assert vmstat[key] == sum(numastat[node][field] for node in (0, 1)), key
    assert list(vmstat) == list(vmstat_before)
    assert vmstat["pgfault"] > vmstat_before["pgfault"]
    assert all(vmstat[key] == 0 for key, value in vmstat_before.items() if value == 0)  # no swap stays no swap
    assert all(vmstat[key] >= value for key, value in vmstat_before.items() if not key.startswith("nr_"))
    meminfo = [_node_meminfo(tree, node) for node in (0, 1)]
    for values in meminfo:
        assert values["MemUsed"] == values["MemTotal"] - values["MemFree"]
    assert vmstat["nr_free_pages"] == sum(values["MemFree"] for values in meminfo) // nefiles.PAGE_KB
    assert vmstat["nr_dirty"] == sum(values["Dirty"] for values in meminfo) // nefiles.PAGE_KB


@pytest.mark.slow
def test_meminfo_lines_keep_their_layout(tree):
    paths = [tree / "proc/meminfo", *(tree / f"sys/devices/system/node/node{node}/meminfo" for node in (0, 1))]
    before = {path: path.read_text() for path in paths}
    churn.Churn(tree).advance()
    for path in paths:
        old, new = before[path].splitlines(), path.read_text().splitlines()
        assert new != old
        assert [len(line) for line in new] == [len(line) for line in old]
        assert [re.sub(r"\d+", "", line) for line in new] == [re.sub(r"\d+", "", line) for line in old]


@pytest.mark.slow
def test_scaling_cur_freq_moves_between_min_and_max(tree):
    policy = tree / "sys/devices/system/cpu/cpufreq/policy5"
    before = int((policy / "scaling_cur_freq").read_text())
    mover = churn.Churn(tree)
    seen = set()
    for _ in range(3):
        mover.advance()
        value = int((policy / "scaling_cur_freq").read_text())
        assert int((policy / "scaling_min_freq").read_text()) <= value <= int((policy / "scaling_max_freq").read_text())
        assert abs(value - before) <= before * churn.CUR_FREQ_DRIFT + 1
        seen.add(value)
    assert seen != {before}


@pytest.mark.slow
def test_a_malformed_meminfo_line_is_refused_naming_the_file(tree):
    path = tree / "sys/devices/system/node/node1/meminfo"
    path.write_text("Node 1 MemFree: lots\n")
    with pytest.raises(churn.ChurnError, match=re.escape(f"{path}: unexpected line 'Node 1 MemFree: lots'")):
        churn.Churn(tree)


# --------------------------------------------------------------------------------------------------- the tree
@pytest.mark.slow
def test_the_set_of_files_and_every_files_lines_are_unchanged(tree):
    before = _snapshot(tree)
    churn.Churn(tree, stray=0.2).advance()
    after = _snapshot(tree)
    assert sorted(after) == sorted(before)  # no temporary file left behind, none removed
    changed = {name for name in after if after[name] != before[name]}
    nodes = {f"sys/devices/system/node/node{node}/{name}" for node in (0, 1) for name in ("numastat", "meminfo")}
    node_wide = {"proc/interrupts", "proc/stat", "proc/meminfo", "proc/vmstat"} | nodes
    assert node_wide <= changed
    assert {name for name in before if name.endswith("/memory.numa_stat")} <= changed
    others = changed - node_wide - {name for name in changed if name.endswith("/memory.numa_stat")}
    assert others and all(re.fullmatch(r"sys/devices/system/cpu/cpufreq/policy\d+/scaling_cur_freq", name)
                          for name in others)  # fmt: skip

    def skeleton(data: bytes) -> list[bytes]:  # a line without its numbers
        return [re.sub(rb"[\d\s]+", b" ", line) for line in data.splitlines()]

    for name in changed:
        assert skeleton(after[name]) == skeleton(before[name]), name


@pytest.mark.slow
def test_the_same_seed_moves_two_copies_alike(generated, tmp_path):
    roots = []
    for name in ("a", "b"):
        shutil.copytree(generated.root, tmp_path / name, symlinks=True)
        churn.Churn(tmp_path / name, seed=7).advance()
        roots.append(tmp_path / name)
    assert _snapshot(roots[0]) == _snapshot(roots[1])


@pytest.mark.slow
def test_missing_parts_are_left_out_and_the_rest_moves(tree):
    (tree / "proc/vmstat").unlink()
    for path in tree.glob("sys/devices/system/cpu/cpufreq/policy*/scaling_cur_freq"):
        path.unlink()
    before = (tree / "proc/interrupts").read_bytes()
    mover = churn.Churn(tree)
    mover.advance()
    assert not (tree / "proc/vmstat").exists()
    assert not list(tree.glob("sys/devices/system/cpu/cpufreq/policy*/scaling_cur_freq"))
    assert (tree / "proc/interrupts").read_bytes() != before


def test_a_tree_with_nothing_to_move_is_refused(tmp_path):
    with pytest.raises(churn.ChurnError, match="nothing to churn"):
        churn.Churn(tmp_path)


def test_stray_must_be_a_fraction(tree):
    with pytest.raises(ValueError, match="stray must be a fraction"):
        churn.Churn(tree, stray=1.5)


@pytest.mark.slow
def test_numawatch_reads_the_moving_tree_with_every_tree_source_up_and_sees_the_planted_vector_fire(generated, tree):
    mover = churn.Churn(tree, seconds=1.0)
    reader = HostReader(Paths.from_root(tree))
    first = reader.read()
    mover.advance()
    second = reader.read()
    for host in (first, second):
        down = {name: status.reason for name, status in host.statuses.items() if not status.up}
        # what a file tree cannot feed
        assert set(down) <= {"intersocket", "nvml", "processes", "pod_resources", "kubernetes_api"}, down
    fired = {finding.check for finding in evaluate(second, REFERENCE).findings}
    assert set(generated.planted) <= fired
    assert "irq_activity_on_isolated_cpu" in fired  # the planted misrouted NIC vector is busy on its isolated CPU


def test_the_command_line_advances_a_given_number_of_times(tree, capsys):
    before = (tree / "proc/interrupts").read_bytes()
    assert churn.main(["--root", str(tree), "--every", "0", "--count", "2", "--stray", "0.1"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"churning {tree}: /proc/interrupts (80 device rows x 32 CPUs)")
    assert "2 advances" in err
    assert (tree / "proc/interrupts").read_bytes() != before


def test_the_command_line_reports_a_tree_it_cannot_move(tmp_path, capsys):
    assert churn.main(["--root", str(tmp_path)]) == 2
    assert "nothing to churn" in capsys.readouterr().err


def test_a_second_churner_on_the_same_tree_is_refused_naming_the_tree(tree, capsys):
    held = churn.lock_tree(str(tree))
    try:
        assert churn.main(["--root", str(tree), "--every", "0", "--count", "1"]) == 2
        error = capsys.readouterr().err
        assert str(tree) in error and "another bench/churn.py is moving this tree" in error
    finally:
        os.close(held)
    assert churn.main(["--root", str(tree), "--every", "0", "--count", "1"]) == 0  # free again once released
