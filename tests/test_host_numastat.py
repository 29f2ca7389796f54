"""NUMA counters (nodeN/numastat, per-node huge pages) and the inter-socket traffic source (uncore PMUs)."""

from __future__ import annotations

import os

import pytest
from fakehost.kernel import add_numastat, add_uncore_pmus
from fakehost.topology import add_topology
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import HostReader
from numawatch.paths import Paths
from numawatch.sources import numastat
from numawatch.sources.numastat import (
    CAP_PERFMON,
    CAP_SYS_ADMIN,
    UncoreLinkCounters,
    encode_event,
    find_link_pmus,
    may_count_system_wide,
    parse_cap_eff,
    parse_format,
    parse_numastat,
    perf_event_open,
    read_counter,
)

# perf_event_open(2)'s software event that any process may count on itself: the call works without a PMU.
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_TASK_CLOCK = 1


# --------------------------------------------------------------------------------------------------- numastat
def test_numastat_fields_are_kept_by_name_including_new_ones():
    text = "numa_hit 24831\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 149\nlocal_node 24314\nother_node 517\nnew 1\n"

    assert parse_numastat(text)["other_node"] == 517
    assert parse_numastat(text)["new"] == 1


@pytest.mark.parametrize("text", ["", "numa_hit\n", "numa_hit 12 13\n", "numa_hit -5\n", "numa_hit 0x10\n"])
def test_malformed_numastat_names_the_file(text):
    with pytest.raises(MalformedFile, match="node0/numastat"):
        parse_numastat(text, "/sys/devices/system/node/node0/numastat")


def test_the_capture_has_four_nodes_with_their_counters_and_huge_pages(realkernel_root):
    counters = numastat.read(Paths.from_root(realkernel_root))

    assert sorted(counters.nodes) == [0, 1, 2, 3]
    assert dict(counters.nodes[2].numastat) == {
        "numa_hit": 10303, "numa_miss": 0, "numa_foreign": 0, "interleave_hit": 149, "local_node": 8628,
        "other_node": 1675,
    }
    assert (counters.nodes[3].hugepages[2048].total, counters.nodes[3].hugepages[2048].free) == (8, 8)


def test_fake_sub_numa_host_reads_every_node(fake_host):
    layout = add_topology(fake_host, nodes_per_socket=2, hugepages_per_node=[{1048576: 2}, {}, {1048576: 1}, {}])
    for node in layout.nodes:
        add_numastat(fake_host, node, numa_hit=1000 + node, other_node=node)

    counters = numastat.read(fake_host.paths)

    assert [counters.nodes[n].numastat["numa_hit"] for n in range(4)] == [1000, 1001, 1002, 1003]
    assert [counters.nodes[n].hugepages[1048576].total for n in range(4)] == [2, 0, 1, 0]


def test_a_kernel_without_numa_nodes_is_unavailable(fake_host):
    add_topology(fake_host, numa=False)

    with pytest.raises(SourceUnavailable, match="CONFIG_NUMA"):
        numastat.read(fake_host.paths)


@pytest.mark.realhost
def test_this_machine_numastat_reads():
    counters = numastat.read(Paths.from_root("/"))

    assert counters.nodes
    assert all(node.numastat["numa_hit"] >= 0 for node in counters.nodes.values())


# --------------------------------------------------------------------------------------------------- PMU formats
def test_link_pmus_are_found_by_name_in_link_order():
    names = ["cpu", "uncore_upi_1", "uncore_imc_0", "uncore_upi_0", "uncore_qpi", "amd_df", "software"]

    assert find_link_pmus(names) == (["uncore_qpi", "uncore_upi_0", "uncore_upi_1"], ["amd_df"])


def test_event_encoding_follows_the_format_files():
    formats = {"event": parse_format("config:0-7"), "umask": parse_format("config:8-15,32-55\n")}

    assert encode_event(formats, {"event": 0x02, "umask": 0x0F}) == 0x0F02
    assert encode_event(formats, {"event": 0x02, "umask": 0x1FF}) == (1 << 32) | 0xFF02


@pytest.mark.parametrize("text", ["event", "config:8-", "config:9-8", "config:0-64", "bogus:0-7"])
def test_bad_format_files_are_rejected(text):
    with pytest.raises(ValueError):
        parse_format(text)


def test_a_value_too_wide_for_its_field_is_rejected():
    with pytest.raises(ValueError, match="does not fit"):
        encode_event({"event": parse_format("config:0-7")}, {"event": 0x1FF})


def test_system_wide_counting_needs_paranoid_at_most_0_or_a_capability():
    assert may_count_system_wide(-1, 0)
    assert may_count_system_wide(0, None)
    assert not may_count_system_wide(2, 0)
    assert not may_count_system_wide(2, None)
    assert may_count_system_wide(2, 1 << CAP_PERFMON)
    assert may_count_system_wide(4, 1 << CAP_SYS_ADMIN)
    assert parse_cap_eff("Name:\tx\nCapEff:\t000001ffffffffff\n") == 0x1FFFFFFFFFF
    assert parse_cap_eff("CapEff:\tzz\n") is None


# --------------------------------------------------------------------------------------------------- the source
def intersocket(paths: Paths) -> tuple[bool, str]:
    status = HostReader(paths, (numastat.INTERSOCKET,)).read().statuses["intersocket"]
    return status.up, status.reason


@pytest.mark.realhost
def test_this_machine_has_no_link_pmus_and_says_numastat_remains_the_proxy():
    names = os.listdir("/sys/bus/event_source/devices") if os.path.isdir("/sys/bus/event_source/devices") else []
    if any(name.startswith(("uncore_upi", "uncore_qpi", "amd_df")) for name in names):
        pytest.skip("this machine exposes inter-socket PMUs")

    up, reason = intersocket(Paths.from_root("/"))

    assert not up
    assert "numastat counters remain the proxy" in reason


def test_pmus_present_but_paranoid_and_no_capability_says_what_is_needed(fake_host):
    add_uncore_pmus(fake_host, paranoid=2)
    fake_host.write("proc/self/status", "Name:\tnumawatch\nCapEff:\t0000000000000000\n")

    up, reason = intersocket(fake_host.paths)

    assert not up
    assert "perf_event_paranoid=2" in reason and "CAP_PERFMON" in reason and "uncore_upi_0" in reason


def test_amd_data_fabric_without_a_cpu_identity_says_the_generation_is_unknown(fake_host):
    """amd_df's events depend on the Zen generation (tests/test_host_intersocket_amd.py counts them)."""
    add_uncore_pmus(fake_host, names=("amd_df",), paranoid=0)

    up, reason = intersocket(fake_host.paths)

    assert not up
    assert "amd_df is present, but the CPU generation is unknown" in reason


def test_a_pmu_served_by_an_isolated_cpu_is_not_opened(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=1, cmdline="isolcpus=0-3,5-7")
    add_uncore_pmus(fake_host, names=("uncore_upi_0",), cpumask="0", paranoid=0)

    up, reason = intersocket(fake_host.paths)

    assert not up
    assert "uncore_upi_0 on CPU 0" in reason


def test_link_bytes_per_socket_from_the_counters(fake_host, monkeypatch):
    """The perf syscall itself is faked here (no UPI hardware); what is checked is which counters are opened,
    where, with which encoding, and how flits become bytes."""
    add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=1)
    add_uncore_pmus(fake_host, names=("uncore_upi_0", "uncore_upi_1"), cpumask="0,4", paranoid=0)
    opened: list[tuple[int, int, int]] = []

    def fake_open(pmu_type: int, config: int, *, pid: int = -1, cpu: int = -1) -> int:
        opened.append((pmu_type, config, cpu))
        return 1000 + len(opened)

    monkeypatch.setattr(numastat, "perf_event_open", fake_open)
    monkeypatch.setattr(numastat, "read_counter", lambda fd: 9 * (fd - 1000))
    counters = UncoreLinkCounters()

    first = counters.read(fake_host.paths)
    second = counters.read(fake_host.paths)

    assert opened == [(20, 0x0F02, 0), (20, 0x0F02, 4), (21, 0x0F02, 0), (21, 0x0F02, 4)]  # opened once, kept
    assert [(link.link, link.socket, link.bytes) for link in first.links] == [
        ("uncore_upi_0", 0, 64), ("uncore_upi_0", 1, 128), ("uncore_upi_1", 0, 192), ("uncore_upi_1", 1, 256)
    ]
    assert second == first


def test_a_refused_perf_event_open_makes_the_source_down_with_the_errno(fake_host):
    add_uncore_pmus(fake_host, names=("uncore_upi_0",), cpumask="0", paranoid=-1)
    fake_host.write("sys/bus/event_source/devices/uncore_upi_0/type", "99999")  # no such PMU type here

    up, reason = intersocket(fake_host.paths)

    assert not up
    assert "perf_event_open" in reason


def test_perf_event_open_counts_a_real_software_event():
    """The ctypes syscall plumbing, on an event every kernel allows for one's own task (task clock, pid 0)."""
    try:
        fd = perf_event_open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, pid=0, cpu=-1)
    except OSError as error:
        pytest.skip(f"perf_event_open refused here: {error}")
    try:
        sum(range(200_000))
        first = read_counter(fd)
        sum(range(200_000))
        assert read_counter(fd) > first > 0
    finally:
        os.close(fd)


def test_each_host_reader_keeps_its_own_open_counters_across_readings(fake_host, monkeypatch):
    add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=1)
    add_uncore_pmus(fake_host, names=("uncore_upi_0",), cpumask="0,4", paranoid=0)
    opened: list[int] = []

    def fake_open(pmu_type: int, config: int, *, pid: int = -1, cpu: int = -1) -> int:
        opened.append(cpu)
        return 2000 + len(opened)

    monkeypatch.setattr(numastat, "perf_event_open", fake_open)
    monkeypatch.setattr(numastat, "read_counter", lambda fd: 90)
    monkeypatch.setattr(numastat.os, "close", lambda fd: None)

    reader = HostReader(fake_host.paths, (numastat.INTERSOCKET,))
    first, second = reader.read(), reader.read()
    HostReader(fake_host.paths, (numastat.INTERSOCKET,)).read()

    assert opened == [0, 4, 0, 4]  # twice per reader, not per reading
    assert [link.bytes for link in second.get("intersocket").links] == [640, 640]
    assert first.statuses["intersocket"].up
