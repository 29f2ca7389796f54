"""/proc/interrupts parsing, the watched CPUs, two readings (Host.previous) and the rate checks."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.kernel import FakeIrq, add_irqs, format_interrupts, write_interrupts
from fakehost.kubelet import write_cpu_manager_state
from fakehost.topology import add_topology
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch.checks import evaluate
from numawatch.checks.host_irq import CHECK_BY_ID
from numawatch.cpuset import parse_cpulist
from numawatch.derivation import derivation
from numawatch.errors import MalformedFile
from numawatch.host import Host, HostReader, read_host_window, window_seconds
from numawatch.inputs import TOPOLOGY
from numawatch.intent import Intent, KernelIntent
from numawatch.model.interrupts import KIND_DEVICE, KIND_IPI, KIND_LOCAL_TIMER, KIND_OTHER
from numawatch.paths import Paths
from numawatch.refresh import POLICIES
from numawatch.sources import interrupts, irqs, kubelet_state, topology
from numawatch.sources.interrupts import (
    classify,
    parse_header,
    parse_interrupts,
    split_tail,
    watched_cpus,
)

SOURCES = (topology.SOURCE, kubelet_state.SOURCE, interrupts.SOURCE, irqs.SOURCE)


def naive_parse(text: str, watched: set[int]) -> dict[str, dict[int, int]]:
    """The obvious, slow reading of /proc/interrupts: split every line, convert every count."""
    lines = text.splitlines()
    cpus = [int(token[3:]) for token in lines[0].split()]
    result: dict[str, dict[int, int]] = {}
    for line in lines[1:]:
        key, _, rest = line.partition(":")
        fields = rest.split()
        counts = []
        for field in fields[: len(cpus)]:
            if not field.isdigit():
                break
            counts.append(int(field))
        if len(counts) < len(cpus):
            continue  # ERR / MIS
        result[key.strip()] = {cpu: n for cpu, n in zip(cpus, counts, strict=True) if n and cpu in watched}
    return result


def parsed_counts(data: str, watched) -> dict[str, dict[int, int]]:
    return {row.key: dict(row.counts) for row in parse_interrupts(data.encode(), watched).rows}


# --------------------------------------------------------------------------------------------------- parsing
def test_header_names_cpus_not_columns():
    assert parse_header(b"           CPU0       CPU2       CPU8") == (0, 2, 8)


@pytest.mark.parametrize("header", [b"", b"CPU0 GPU1", b"CPU0 CPUx", b"CPU1 CPU1"])
def test_bad_header_is_malformed_naming_the_file(header):
    with pytest.raises(MalformedFile, match="/proc/interrupts"):
        parse_header(header)


def test_the_capture_maps_columns_through_the_header_with_cpu7_offline(realkernel_root):
    data = (realkernel_root / "proc/interrupts").read_bytes()

    parsed = parse_interrupts(data, {8, 10})

    assert parsed.cpus == (0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11)
    assert parsed.watched == {8, 10}
    rows = parsed.by_key()
    assert dict(rows["35"].counts) == {8: 13}  # nvme0q5: the pinned pod's own disk read on CPU 8
    assert dict(rows["25"].counts) == {10: 23}  # virtio0-input.0 on isolated CPU 10
    assert dict(rows["LOC"].counts) == {8: 4254, 10: 1157}
    assert dict(rows["IWI"].counts) == {8: 46583}
    assert (rows["35"].name, rows["35"].chip, rows["35"].kind) == ("nvme0q5", "PCI-MSI 34095109-edge", KIND_DEVICE)
    assert "ERR" not in rows and "MIS" not in rows


def test_the_capture_parses_like_the_naive_reading(realkernel_root):
    text = (realkernel_root / "proc/interrupts").read_text()
    watched = {0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11}

    assert parsed_counts(text, watched) == naive_parse(text, watched)


def test_unwatched_cpus_keep_no_counts(realkernel_root):
    data = (realkernel_root / "proc/interrupts").read_bytes()

    parsed = parse_interrupts(data, ())

    assert parsed.watched == frozenset()
    assert all(not row.counts for row in parsed.rows)
    assert len(parsed.rows) == 25 + 17  # every IRQ and named row is still listed, with its name (not ERR/MIS)


def test_old_and_new_cell_layouts_give_the_same_counts():
    irqs_ = [FakeIrq(30, "nvme0q0", frozenset({0}), counts={0: 7, 3: 1234567890})]
    named = {"LOC": {0: 10, 1: 20, 2: 30, 3: 40}}
    new = format_interrupts([0, 1, 2, 3], irqs_, named)
    old = format_interrupts([0, 1, 2, 3], irqs_, named, old_layout=True)

    assert parsed_counts(old, {0, 1, 2, 3}) == parsed_counts(new, {0, 1, 2, 3}) == naive_parse(new, {0, 1, 2, 3})


def test_a_count_wider_than_ten_digits_shifts_the_line_and_is_still_read():
    text = format_interrupts([0, 1, 2], named={"LOC": {0: 12_345_678_901, 1: 5, 2: 99_999_999_999}})

    assert parsed_counts(text, {0, 1, 2})["LOC"] == {0: 12_345_678_901, 1: 5, 2: 99_999_999_999}


def test_wide_counts_shifting_the_line_by_exactly_one_cell_are_still_read():
    """Five wide counts add 1+2+2+3+3 = 11 bytes: the cells realign at the end of the counts, one cell late."""
    wide = {0: 10**10, 1: 10**11, 2: 10**11, 3: 10**12, 4: 10**12, 5: 0, 6: 7}
    text = format_interrupts(list(range(7)), [FakeIrq(40, "eth0", frozenset(), counts=wide)])

    assert parsed_counts(text, set(range(7)))["40"] == {cpu: n for cpu, n in wide.items() if n}


def test_arm64_ipi_rows_without_the_space_after_the_colon():
    text = (
        "           CPU0       CPU1\n"
        " 11:       5000       4000     GICv3  27 Level     arch_timer\n"
        "IPI0:        12         34       Rescheduling interrupts\n"
        "IPI1:         1          2       Function call interrupts\n"
        "Err:          0\n"
    )

    parsed = parse_interrupts(text.encode(), {0, 1})

    rows = parsed.by_key()
    assert (rows["11"].kind, dict(rows["11"].counts)) == (KIND_LOCAL_TIMER, {0: 5000, 1: 4000})
    assert (rows["IPI0"].kind, dict(rows["IPI0"].counts)) == (KIND_IPI, {0: 12, 1: 34})
    assert rows["IPI1"].name == "Function call interrupts"


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("           CPU0       CPU1\nLOC 1 2 Local timer\n", "without ':'"),
        ("           CPU0       CPU1       CPU2\n 25:          1          2 x PCI-MSI 1-edge eth0\n", "2 counts"),
        ("           CPU0\nLOC:          1   Local\nLOC:          2   Local\n", "twice"),
        ("           CPU0\nL O C:          1   Local\n", "bad row label"),
    ],
)
def test_malformed_lines_name_the_file_and_the_problem(text, what):
    with pytest.raises(MalformedFile, match=what) as error:
        parse_interrupts(text.encode(), {0}, path="/host/proc/interrupts")

    assert "/host/proc/interrupts" in str(error.value)


@settings(max_examples=150, deadline=None)
@given(
    cpu_ids=st.lists(st.integers(0, 400), min_size=1, max_size=24, unique=True),
    rows=st.lists(
        st.lists(
            st.one_of(st.just(0), st.integers(1, 9_999), st.integers(10**9, 10**12)), min_size=24, max_size=24
        ),
        min_size=1,
        max_size=12,
    ),
    old_layout=st.booleans(),
    data=st.data(),
)
@pytest.mark.slow
def test_fast_parse_equals_the_naive_reading(cpu_ids, rows, old_layout, data):
    """Any CPU numbering (gaps, offline CPUs), counts of any width, either cell layout, any watched subset."""
    watched = set(data.draw(st.lists(st.sampled_from(cpu_ids), unique=True)))
    irqs_ = [
        FakeIrq(40 + index, f"dev{index}", frozenset(), counts=dict(zip(cpu_ids, counts, strict=False)))
        for index, counts in enumerate(rows)
    ]
    named = {"LOC": dict(zip(cpu_ids, rows[0], strict=False)), "RES": {cpu_ids[0]: 3}}
    text = format_interrupts(cpu_ids, irqs_, named, old_layout=old_layout)

    assert parsed_counts(text, watched) == naive_parse(text, watched)


def test_row_kinds():
    assert classify("25", "nvme0q1") == KIND_DEVICE
    assert classify("11", "arch_timer") == KIND_LOCAL_TIMER
    assert classify("LOC", "") == KIND_LOCAL_TIMER
    assert [classify(key, "") for key in ("RES", "CAL", "TLB", "IWI", "IPI3")] == [KIND_IPI] * 5
    assert [classify(key, "") for key in ("NMI", "PMI", "MCP", "HYP")] == [KIND_OTHER] * 4


def test_tail_gives_chip_and_shared_action_names():
    assert split_tail(b"  IO-APIC  16-fasteoi   i801_smbus, ehci_hcd:usb1", True) == (
        "IO-APIC 16-fasteoi",
        "i801_smbus, ehci_hcd:usb1",
    )
    assert split_tail(b"   Local timer interrupts", False) == ("", "Local timer interrupts")


@pytest.mark.realhost
def test_this_machine_interrupts_parse_with_a_column_per_online_cpu():
    data = Path("/proc/interrupts").read_bytes()
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())

    parsed = parse_interrupts(data, online)

    assert set(parsed.cpus) == online
    assert parsed.row("LOC") is not None or any(row.kind == KIND_LOCAL_TIMER for row in parsed.rows)
    assert {row.key: dict(row.counts) for row in parsed.rows} == naive_parse(data.decode(), set(online))


# --------------------------------------------------------------------------------------------------- watched CPUs
def test_watched_cpus_are_isolated_nohz_full_and_exclusive(fake_host):
    add_topology(fake_host, cmdline="isolcpus=2-3 nohz_full=4")
    write_cpu_manager_state(fake_host, default_cpuset="0-5,8-15", entries={"pod-a": {"vllm": "6-7"}})
    cpus = topology.read(fake_host.paths)
    state = kubelet_state.read(fake_host.paths)

    assert watched_cpus(cpus, state) == {2, 3, 4, 6, 7}
    # Either source down contributes nothing: what the other one knows is still watched.
    assert (watched_cpus(None, state), watched_cpus(cpus, None), watched_cpus(None, None)) == ({6, 7}, {2, 3, 4}, set())


@pytest.mark.parametrize(
    ("version", "entries", "pod_entries", "exclusive"),
    [
        (1, {"c0ffee": "2-3"}, None, {2, 3}),
        (3, {"p": {"a": "1", "b": "4-5"}}, {"q": "9"}, {1, 4, 5, 9}),
        (4, {"p": {"a": "7"}}, None, {7}),
    ],
)
def test_the_source_watches_the_exclusive_cpus_of_every_state_version(fake_host, version, entries, pod_entries,
                                                                      exclusive):
    add_topology(fake_host, sockets=1, cores_per_socket=16, threads_per_core=1)
    add_irqs(fake_host, list(range(16)), [], {"LOC": dict.fromkeys(range(16), 7)})
    write_cpu_manager_state(fake_host, default_cpuset="0", entries=entries, version=version, pod_entries=pod_entries)

    host = HostReader(fake_host.paths, SOURCES).read()

    assert host.interrupts is not None and host.interrupts.watched == exclusive


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"entries": "2-3"}', '{"entries": {"p": {"a": "x-y"}}}'])
def test_an_unreadable_cpu_manager_state_contributes_no_cpus(fake_host, text):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-5")
    add_irqs(fake_host, CPUS, [], {"LOC": dict.fromkeys(CPUS, 7)})
    fake_host.write("var/lib/kubelet/cpu_manager_state", text)

    host = HostReader(fake_host.paths, SOURCES).read()

    assert host.statuses["interrupts"].up and host.interrupts is not None
    assert host.interrupts.watched == {4, 5}


def test_the_interrupts_source_reads_without_the_sources_it_needs(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-5")
    add_irqs(fake_host, CPUS, [], {"LOC": dict.fromkeys(CPUS, 7)})

    host = HostReader(fake_host.paths, (interrupts.SOURCE,)).read()  # neither topology nor kubelet_state is read

    assert host.statuses["interrupts"].up and host.interrupts is not None
    assert host.interrupts.watched == frozenset()


# --------------------------------------------------------------------------------------------------- two readings
def reading(text: str, watched, at: float) -> interrupts.Interrupts:
    return parse_interrupts(text.encode(), watched, read_at=at)


def host_with(fake_host, current, previous=None, **extra) -> Host:
    """A host of the fake tree's topology and kubelet state, with hand-made interrupts readings."""
    base = HostReader(fake_host.paths, (topology.SOURCE, kubelet_state.SOURCE, irqs.SOURCE)).read()
    results = dict(base.results, interrupts=current, **extra)
    before = None
    if previous is not None:
        before = Host(paths=base.paths, results={"interrupts": previous}, statuses={}, timestamp=base.timestamp - 10)
    return replace(base, results=results, previous=before)


CPUS = list(range(8))


def test_rate_checks_without_a_previous_reading_are_not_evaluated(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7 nohz_full=4-7")
    text = format_interrupts(CPUS, named={"LOC": {4: 100}})
    host = host_with(fake_host, reading(text, {4, 5, 6, 7}, 0.0))

    rate_checks = [CHECK_BY_ID["irq_activity_on_isolated_cpu"], CHECK_BY_ID["tick_on_nohz_full"]]
    evaluation = evaluate(host, Intent(), rate_checks)

    assert evaluation.findings == ()
    assert [n.reason.startswith("needs two readings") for n in evaluation.not_evaluated] == [True, True]


def test_device_interrupts_on_an_isolated_cpu_during_the_window_fire(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7")
    add_irqs(fake_host, CPUS, [FakeIrq(40, "eth0-TxRx-0", frozenset({5}), frozenset({5}))])
    before = format_interrupts(CPUS, [FakeIrq(40, "eth0-TxRx-0", frozenset(), counts={0: 10, 5: 100})])
    after = format_interrupts(CPUS, [FakeIrq(40, "eth0-TxRx-0", frozenset(), counts={0: 999, 5: 600})])
    host = host_with(fake_host, reading(after, {4, 5, 6, 7}, 110.0), reading(before, {4, 5, 6, 7}, 100.0))

    evaluation = evaluate(host, Intent(), [CHECK_BY_ID["irq_activity_on_isolated_cpu"]])

    assert [dict(f.labels) for f in evaluation.findings] == [
        {"irq": "40", "name": "eth0-TxRx-0", "cpus": "5", "managed": "false"}
    ]
    assert "500 times in 10.0 s (50.0/s" in evaluation.findings[0].message


def test_device_interrupts_below_the_threshold_or_on_housekeeping_are_clean(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7")
    before = format_interrupts(CPUS, [FakeIrq(40, "eth0", frozenset(), counts={0: 10, 5: 100})])
    after = format_interrupts(CPUS, [FakeIrq(40, "eth0", frozenset(), counts={0: 99999, 5: 105})])
    host = host_with(fake_host, reading(after, {4, 5, 6, 7}, 110.0), reading(before, {4, 5, 6, 7}, 100.0))

    evaluation = evaluate(host, Intent(), [CHECK_BY_ID["irq_activity_on_isolated_cpu"]])

    assert (evaluation.findings, evaluation.not_evaluated) == ((), ())


def test_exempt_names_and_reused_irq_numbers(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7")
    before = format_interrupts(CPUS, [FakeIrq(40, "nvme0q5", frozenset(), counts={5: 9000}),
                                      FakeIrq(41, "old-dev", frozenset(), counts={6: 9000})])
    after = format_interrupts(CPUS, [FakeIrq(40, "nvme0q5", frozenset(), counts={5: 9500}),
                                     FakeIrq(41, "new-dev", frozenset(), counts={6: 40})])
    host = host_with(fake_host, reading(after, {4, 5, 6, 7}, 110.0), reading(before, {4, 5, 6, 7}, 100.0))
    intent = Intent(kernel=KernelIntent(irq_exempt=("nvme*",)))

    evaluation = evaluate(host, intent, [CHECK_BY_ID["irq_activity_on_isolated_cpu"]])

    # nvme0q5 is exempt; IRQ 41 now belongs to another device, so its 40 interrupts are all new (4/s > 1/s).
    assert [(f.labels["irq"], f.labels["name"], f.labels["cpus"]) for f in evaluation.findings] == [
        ("41", "new-dev", "6")
    ]


def test_interrupts_on_exclusive_cpus_of_a_pinned_container_fire_without_isolation(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1)
    write_cpu_manager_state(fake_host, default_cpuset="0-1,4-7", entries={"pod-a": {"vllm": "2-3"}})
    before = format_interrupts(CPUS, [FakeIrq(40, "mlx5_comp2", frozenset(), counts={3: 1})])
    after = format_interrupts(CPUS, [FakeIrq(40, "mlx5_comp2", frozenset(), counts={3: 301})])
    host = host_with(fake_host, reading(after, {2, 3}, 60.0), reading(before, {2, 3}, 0.0))

    evaluation = evaluate(host, Intent(), [CHECK_BY_ID["irq_activity_on_isolated_cpu"]])

    assert [f.labels["cpus"] for f in evaluation.findings] == ["3"]
    assert "(exclusive)" in evaluation.findings[0].message


def test_ticks_on_nohz_full_cpus_above_the_threshold_fire_once_with_the_cpu_list(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7 nohz_full=4-7")
    before = format_interrupts(CPUS, named={"LOC": {0: 0, 4: 10, 5: 10, 6: 10, 7: 10}})
    after = format_interrupts(CPUS, named={"LOC": {0: 99999, 4: 20, 5: 2510, 6: 10, 7: 1010}})
    host = host_with(fake_host, reading(after, {4, 5, 6, 7}, 10.0), reading(before, {4, 5, 6, 7}, 0.0))

    evaluation = evaluate(host, Intent(), [CHECK_BY_ID["tick_on_nohz_full"]])

    assert [dict(f.labels) for f in evaluation.findings] == [{"cpus": "5,7"}]
    assert "CPU 5: 250/s" in evaluation.findings[0].message


def test_a_stopped_tick_is_clean_and_no_nohz_full_is_clean(fake_host, tmp_path):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7 nohz_full=4-7")
    before = format_interrupts(CPUS, named={"LOC": {4: 10}})
    after = format_interrupts(CPUS, named={"LOC": {4: 19}})
    host = host_with(fake_host, reading(after, {4, 5, 6, 7}, 10.0), reading(before, {4, 5, 6, 7}, 0.0))
    plain = FakeHost(tmp_path / "plain")
    add_topology(plain, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7")
    busy = format_interrupts(CPUS, named={"LOC": {4: 99999}})
    plain_host = host_with(plain, reading(busy, {4, 5, 6, 7}, 10.0), reading(before, {4, 5, 6, 7}, 0.0))

    tick = [CHECK_BY_ID["tick_on_nohz_full"]]
    assert (evaluate(host, Intent(), tick).findings, evaluate(host, Intent(), tick).not_evaluated) == ((), ())
    assert evaluate(plain_host, Intent(), tick).findings == ()  # isolated but not nohz_full: the tick is expected


def test_serve_style_reader_keeps_the_previous_reading_one_deep(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7 nohz_full=4-7")
    reader = HostReader(fake_host.paths, SOURCES)
    write_interrupts(fake_host, CPUS, named={"LOC": {4: 10}})
    first = reader.read()
    write_interrupts(fake_host, CPUS, named={"LOC": {4: 100_000}})
    second = reader.read()
    write_interrupts(fake_host, CPUS, named={"LOC": {4: 100_001}})
    third = reader.read()

    assert first.previous is None
    assert second.previous is not None and second.previous.previous is None
    assert second.previous.get("interrupts").row("LOC").count(4) == 10
    assert third.previous.get("interrupts").row("LOC").count(4) == 100_000
    # 99,990 ticks between two reads microseconds apart: far above 10/s.
    assert [f.labels["cpus"] for f in evaluate(second, Intent(), [CHECK_BY_ID["tick_on_nohz_full"]]).findings] == ["4"]


def test_serve_reads_the_file_one_reading_in_every_and_its_rates_span_the_two_last_readings_of_it(fake_host):
    every = POLICIES["interrupts"].every
    assert every > 1
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7 nohz_full=4-7")
    reader = HostReader(fake_host.paths, SOURCES, stagger=4)  # serve's: the interrupts policy's every applies
    tick = CHECK_BY_ID["tick_on_nohz_full"]
    verdicts, counts = [], []
    written = [10] + [100_000] * (every - 1) + [100_001] + [200_000] * (2 * every - 1)
    for ticks in written:
        write_interrupts(fake_host, CPUS, named={"LOC": {4: ticks}})
        host = reader.read()
        found = host.interrupts
        assert found is not None
        counts.append(found.row("LOC").count(4))
        evaluation = evaluate(host, Intent(), [tick])
        cpus = [finding.labels["cpus"] for finding in evaluation.findings]
        verdicts.append("not evaluated" if evaluation.not_evaluated else cpus)

    # Read at readings 1, 1 + every and 1 + 2 every; the readings between hand the last one out again, with the
    # same verdict.
    assert counts == [10] * every + [100_001] * every + [200_000] * every
    assert verdicts == ["not evaluated"] * every + [["4"]] * (2 * every)
    last = reader.read()  # reading 1 + 3 every reads 200,000 again: nothing ticked since 1 + 2 every
    assert last.interrupts is not None and last.interrupts.before is not None
    assert last.interrupts.before.row("LOC").count(4) == 200_000 and last.interrupts.before.before is None
    assert evaluate(last, Intent(), [tick]).findings == ()


def test_serve_reads_the_file_out_of_turn_when_the_watched_cpus_change_and_not_for_another_cpu_manager_change(
    fake_host,
):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-5")
    write_cpu_manager_state(fake_host, default_cpuset="0-5", entries={"pod-a": {"vllm": "6-7"}})
    write_interrupts(fake_host, CPUS, named={"LOC": {4: 10, 6: 10}})
    reader = HostReader(fake_host.paths, SOURCES, stagger=4)
    reader.read()  # the file's turn

    # The pinned pod replaced on the same CPUs: a new state file, the same watched CPUs: the last reading stands.
    write_cpu_manager_state(fake_host, default_cpuset="0-5", entries={"pod-b": {"vllm": "6-7"}})
    second = reader.read()
    assert second.generation("kubelet_state") == 2
    assert second.statuses["interrupts"].cached is True and second.interrupts.watched == {4, 5, 6, 7}

    # A pod pinned on other CPUs: the watched CPUs change, and the file is read at once, out of its turn.
    write_cpu_manager_state(fake_host, default_cpuset="0-2,4-5", entries={"pod-b": {"vllm": "3,6-7"}})
    write_interrupts(fake_host, CPUS, named={"LOC": {3: 20, 4: 20, 6: 20}})
    third = reader.read()
    assert third.statuses["interrupts"].cached is False and third.interrupts.watched == {3, 4, 5, 6, 7}
    assert third.interrupts.row("LOC").count(3) == 20


def test_a_one_off_reader_reads_the_file_at_every_reading(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7 nohz_full=4-7")
    reader = HostReader(fake_host.paths, SOURCES)  # check --window's: stagger 1
    counts = []
    for ticks in (10, 20, 30):
        write_interrupts(fake_host, CPUS, named={"LOC": {4: ticks}})
        counts.append(reader.read().interrupts.row("LOC").count(4))
    assert counts == [10, 20, 30]


MADE: list[int] = []


@derivation("tests.host_interrupts.online_cpus", inputs=(TOPOLOGY,))
def online_cpus(host: Host) -> int:
    MADE.append(1)
    return len(host.topology.online)


def test_a_derivation_is_made_once_per_host_and_again_only_when_what_it_reads_moves(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1)
    write_interrupts(fake_host, CPUS, named={"LOC": {4: 10}})
    reader = HostReader(fake_host.paths, SOURCES)
    MADE.clear()
    first = reader.read()
    assert online_cpus(first) == online_cpus(first) == 8 and len(MADE) == 1  # once per Host

    # The topology's files do not change: its generation stays, and the value made from it is the later readings'.
    second, third = reader.read(), reader.read()
    assert online_cpus(second) == online_cpus(third) == 8 and len(MADE) == 1
    assert third.previous is not None and third.previous.previous is None
    assert first.generation("topology") == third.generation("topology") is not None
    assert first.generation("interrupts") != third.generation("interrupts")  # read for real at every reading

    (fake_host.root / "sys/devices/system/cpu/online").write_text("0-6\n")
    reader.invalidate("topology")  # what a hotplug event does
    fourth = reader.read()
    assert fourth.generation("topology") != third.generation("topology")
    assert online_cpus(fourth) == 7 and len(MADE) == 2


def test_a_fresh_reader_or_a_host_without_generations_reuses_nothing(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1)
    write_interrupts(fake_host, CPUS, named={"LOC": {4: 10}})
    MADE.clear()
    host = HostReader(fake_host.paths, SOURCES).read()
    online_cpus(host)
    online_cpus(HostReader(fake_host.paths, SOURCES).read())  # another reader: its own store
    assert len(MADE) == 2
    plain = replace(host, generations={})  # not a HostReader's: what it makes is its own, once
    online_cpus(plain), online_cpus(plain)
    assert len(MADE) == 3
    assert HostReader(fake_host.paths, SOURCES).read().previous is None
    assert len(host.store) == 1  # one entry per name


def test_read_host_window_takes_two_readings_that_far_apart(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7")
    write_interrupts(fake_host, CPUS, named={"LOC": {4: 10}})

    host = read_host_window(fake_host.paths, 0.05, SOURCES)

    assert host.previous is not None
    assert window_seconds(host) >= 0.05
    assert host.get("interrupts").read_at - host.previous.get("interrupts").read_at >= 0.05
    assert window_seconds(read_host_window(fake_host.paths, 0, SOURCES)) is None


def test_interrupts_source_is_down_without_the_file(tmp_path):
    snapshot = HostReader(Paths.from_root(tmp_path), (interrupts.SOURCE,)).read()

    assert not snapshot.statuses["interrupts"].up
    assert "interrupts does not exist" in snapshot.statuses["interrupts"].reason


@pytest.mark.realhost
def test_two_readings_of_this_machine_give_non_negative_deltas():
    paths = Paths.from_root("/")
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    first = parse_interrupts(Path("/proc/interrupts").read_bytes(), online, read_at=0.0)
    os.sched_yield()
    second = parse_interrupts(Path("/proc/interrupts").read_bytes(), online, read_at=1.0)

    from numawatch.checks.host_irq import deltas

    changes = list(deltas(first, second, frozenset(online), (KIND_DEVICE, KIND_LOCAL_TIMER, KIND_IPI, KIND_OTHER)))
    assert all(delta > 0 for _, changed in changes for delta in changed.values())
    assert paths.procfs == Path("/proc")
