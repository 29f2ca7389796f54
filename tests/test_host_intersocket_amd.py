"""The AMD data-fabric part of the inter-socket traffic source: CPU generation, event encodings, counting.

No AMD hardware here (nor uncore PMUs on any machine we have): the amd_df PMU directory, the CPU identity files and
perf_event_open itself are faked. What is checked is which events are opened, where, with which config (against
configs computed by hand from perf's data-fabric.json values and the kernel's format bit layouts), and how counts
become bytes.
"""

from __future__ import annotations

import os

import pytest
from fakehost import FakeHost
from fakehost.topology import add_topology
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import HostReader
from numawatch.paths import Paths
from numawatch.sources import numastat
from numawatch.sources.numastat import (
    AMD_DATA_FABRIC_TABLES,
    CpuId,
    UncoreLinkCounters,
    amd_data_fabric_table,
    amd_zen_generation,
    encode_event,
    parse_cpu_modalias,
    parse_cpuinfo_id,
    parse_format,
    read_cpu_id,
    scale_count,
)

DF = "sys/bus/event_source/devices/amd_df"
# The kernel's amd_df format files (arch/x86/events/amd/uncore.c): family 0x17+ without PerfMonV2 (event14,
# umask8), and with PerfMonV2 (event14v2, umask12).
FORMAT_F17H = {"event": "config:0-7,32-35,59-60", "umask": "config:8-15"}
FORMAT_PERFMON_V2 = {"event": "config:0-7,32-37", "umask": "config:8-15,24-27"}
GENOA = (0x19, 0x11)  # Zen 4
MILAN = (0x19, 0x01)  # Zen 3
ROME = (0x17, 0x31)  # Zen 2
TURIN = (0x1A, 0x02)  # Zen 5

# Hand-computed from the JSON values and the bit layouts above.
# Zen 2/3 remote_outbound_data_controller_0..3, umask 0x02, F17h layout: event bits 0-7 -> 0-7, 8-11 -> 32-35.
ZEN23_CONFIGS = [0x7_0000_02C7, 0x8_0000_0207, 0x8_0000_0247, 0x8_0000_0287]
# Zen 4 local_socket_outbound_data_beats_link0..7 (0xb5f..0xd1f), umask 0xf3e, PerfMonV2 layout: event bits 8-13 ->
# 32-37; umask bits 0-7 -> 8-15, 8-11 -> 24-27 (0xf3e -> 0x0f00_3e00).
ZEN4_CONFIGS = [
    0xB_0F00_3E5F, 0xB_0F00_3E9F, 0xB_0F00_3EDF, 0xC_0F00_3E1F, 0xC_0F00_3E5F, 0xC_0F00_3E9F, 0xC_0F00_3EDF,
    0xD_0F00_3E1F,
]
# Zen 5 local_socket_outbound_data_beats_link_0..5 (0xd5f..0xe9f), umask 0xf3e.
ZEN5_CONFIGS = [0xD_0F00_3E5F, 0xD_0F00_3E9F, 0xD_0F00_3EDF, 0xE_0F00_3E1F, 0xE_0F00_3E5F, 0xE_0F00_3E9F]


def add_amd_df(
    host: FakeHost,
    cpu: tuple[int, int] = GENOA,
    *,
    formats: dict[str, str] | None = None,
    cpumask: str = "0,4",
    pmu_type: int = 11,
    paranoid: int = 0,
) -> None:
    """amd_df as the kernel exposes it, the CPU's modalias, perf_event_paranoid, and the core PMUs beside it."""
    host.write(f"{DF}/type", str(pmu_type))
    host.write(f"{DF}/cpumask", cpumask)
    for field, layout in (formats or FORMAT_PERFMON_V2).items():
        host.write(f"{DF}/format/{field}", layout)
    host.write("sys/bus/event_source/devices/cpu/type", "4")
    host.write("sys/bus/event_source/devices/amd_l3/type", "12")
    host.write("sys/devices/system/cpu/modalias", f"cpu:type:x86,ven0002fam{cpu[0]:04X}mod{cpu[1]:04X}:feature:,0000")
    host.write("proc/sys/kernel/perf_event_paranoid", str(paranoid))


class FakePerf:
    """Stands in for perf_event_open and read_counter: records each open, gives every fd a count."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, count=lambda opened: 1000) -> None:
        self.opened: list[tuple[int, int, int]] = []  # (type, config, cpu)
        self.count = count
        monkeypatch.setattr(numastat, "perf_event_open", self.open)
        monkeypatch.setattr(numastat, "read_counter", self.read)
        monkeypatch.setattr(numastat.os, "close", lambda fd: None)

    def open(self, pmu_type: int, config: int, *, pid: int = -1, cpu: int = -1) -> int:
        self.opened.append((pmu_type, config, cpu))
        return 5000 + len(self.opened) - 1

    def read(self, fd: int) -> int:
        return self.count(self.opened[fd - 5000])


def status(paths: Paths) -> tuple[bool, str]:
    state = HostReader(paths, (numastat.INTERSOCKET,)).read().statuses["intersocket"]
    return state.up, state.reason


def two_sockets(host: FakeHost, cmdline: str = "BOOT_IMAGE=/boot/vmlinuz ro") -> None:
    add_topology(host, sockets=2, cores_per_socket=4, threads_per_core=1, cmdline=cmdline)


# --------------------------------------------------------------------------------------------------- CPU identity
def test_modalias_gives_vendor_family_and_model_in_hex():
    text = "cpu:type:x86,ven0002fam0019mod0011:feature:,0000,0001,0002\n"

    assert parse_cpu_modalias(text) == CpuId("AuthenticAMD", 0x19, 0x11)
    assert parse_cpu_modalias("cpu:type:x86,ven0009fam0018mod0001:feature:") == CpuId("HygonGenuine", 0x18, 1)
    assert parse_cpu_modalias("cpu:type:x86,ven0005fam0007mod0001:feature:").vendor == "x86 vendor 5"


@pytest.mark.parametrize(
    "text", ["", "cpu:type:aarch64:feature:,0000", "cpu:type:x86,venZZZZfam0019mod0011:feature:", "garbage"]
)
def test_malformed_modalias_names_the_file(text):
    with pytest.raises(MalformedFile, match="cpu/modalias: expected"):
        parse_cpu_modalias(text, "/sys/devices/system/cpu/modalias")


def test_cpuinfo_identity_comes_from_the_first_processor_block():
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9654\n"
        "\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
    )

    assert parse_cpuinfo_id(text) == CpuId("AuthenticAMD", 25, 17)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("", "no 'vendor_id', 'cpu family', 'model'"),
        ("vendor_id\t: AuthenticAMD\ncpu family\t: 25\n\nmodel\t: 17\n", "no 'model'"),
        ("vendor_id\t: AuthenticAMD\ncpu family\t: 0x19\nmodel\t: 17\n", "'cpu family' is not a decimal number"),
        ("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t: 1234567\n", "'model' is not a decimal number"),
    ],
)
def test_malformed_cpuinfo_names_the_file_and_the_field(text, what):
    with pytest.raises(MalformedFile, match=f"/proc/cpuinfo: {what}"):
        parse_cpuinfo_id(text, "/proc/cpuinfo")


@pytest.mark.realhost
def test_this_machine_modalias_and_cpuinfo_agree():
    """The two ways of reading the CPU identity, on this machine's own files."""
    modalias = "/sys/devices/system/cpu/modalias"
    if not os.path.exists(modalias) or not os.path.exists("/proc/cpuinfo"):
        pytest.skip("this machine has no x86 modalias or no /proc/cpuinfo")
    with open("/proc/cpuinfo", "rb") as handle:
        head = handle.read(8192).decode()
    with open(modalias) as handle:
        text = handle.read()

    try:
        from_modalias = parse_cpu_modalias(text, modalias)
    except MalformedFile:
        pytest.skip("not an x86 machine")
    assert from_modalias == parse_cpuinfo_id(head) == read_cpu_id(Paths.from_root("/"))


def test_modalias_is_preferred_and_cpuinfo_is_the_fallback(fake_host):
    fake_host.write("proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t: 143\n")
    fake_host.write("sys/devices/system/cpu/modalias", "cpu:type:x86,ven0002fam001Amod0002:feature:,0000")

    assert read_cpu_id(fake_host.paths) == CpuId("AuthenticAMD", 0x1A, 2)
    fake_host.remove("sys/devices/system/cpu/modalias")
    assert read_cpu_id(fake_host.paths) == CpuId("GenuineIntel", 6, 143)
    fake_host.remove("proc/cpuinfo")
    with pytest.raises(SourceUnavailable, match=r"CPU generation is unknown: neither .*modalias nor .*cpuinfo"):
        read_cpu_id(fake_host.paths)


@pytest.mark.parametrize(
    ("family", "model", "generation"),
    [
        (0x17, 0x01, 1), (0x17, 0x08, 1), (0x17, 0x2F, 1),  # mapfile: AuthenticAMD-23-([12][0-9A-F]|[0-9A-F])
        (0x17, 0x31, 2), (0x17, 0x71, 2), (0x17, 0xA0, 2),  # AuthenticAMD-23-*
        (0x19, 0x01, 3), (0x19, 0x21, 3), (0x19, 0x44, 3), (0x19, 0x50, 3),  # 25-([245][[:xdigit:]]|[[:xdigit:]])
        (0x19, 0x11, 4), (0x19, 0x30, 4), (0x19, 0x61, 4), (0x19, 0xA0, 4),  # AuthenticAMD-25-*
        (0x1A, 0x02, 5), (0x1A, 0x11, 5),  # AuthenticAMD-26-*
        (0x15, 0x01, None), (0x1B, 0x00, None),
    ],
)
def test_zen_generation_follows_perfs_mapfile(family, model, generation):
    assert amd_zen_generation(CpuId("AuthenticAMD", family, model)) == generation


def test_other_vendors_have_no_zen_generation():
    assert amd_zen_generation(CpuId("HygonGenuine", 0x18, 0x01)) is None
    assert amd_zen_generation(CpuId("GenuineIntel", 0x19, 0x11)) is None


# --------------------------------------------------------------------------------------------------- encodings
def encoded(generation: int, formats: dict[str, str]) -> list[int]:
    layouts = {field: parse_format(text) for field, text in formats.items()}
    (count,) = AMD_DATA_FABRIC_TABLES[generation].counts
    return [encode_event(layouts, {"event": event, "umask": umask}) for event, umask in count.events]


def test_zen2_and_zen3_encode_the_remote_link_controllers_with_the_f17h_layout():
    assert encoded(2, FORMAT_F17H) == ZEN23_CONFIGS
    assert encoded(3, FORMAT_F17H) == ZEN23_CONFIGS


def test_zen4_encodes_the_xgmi_link_events_with_the_perfmon_v2_layout():
    assert encoded(4, FORMAT_PERFMON_V2) == ZEN4_CONFIGS


def test_zen5_encodes_the_cross_socket_link_events_with_the_perfmon_v2_layout():
    assert encoded(5, FORMAT_PERFMON_V2) == ZEN5_CONFIGS


def test_event_bits_above_twelve_go_where_the_f17h_format_puts_them():
    layouts = {field: parse_format(text) for field, text in FORMAT_F17H.items()}

    assert encode_event(layouts, {"event": 0x3ABC, "umask": 0}) == (0b11 << 59) | (0xA << 32) | 0xBC


def test_every_table_counts_data_sent_over_the_links_in_one_series_per_socket():
    for generation, table in AMD_DATA_FABRIC_TABLES.items():
        assert [count.link for count in table.counts] == ["xgmi_out"], generation
        assert table.event.startswith(f"AMD Zen {generation} data fabric: ")
    assert [count.bytes_per_count for table in AMD_DATA_FABRIC_TABLES.values() for count in table.counts] == [
        32, 32, 64, 64
    ]


@pytest.mark.parametrize(
    ("cpu", "reason"),
    [
        (CpuId("AuthenticAMD", 0x17, 0x01), r"AuthenticAMD family 0x17 model 0x1 \(Zen 1: .*four dies"),
        (CpuId("AuthenticAMD", 0x15, 0x02), r"AuthenticAMD family 0x15 model 0x2 \(numawatch knows"),
        (CpuId("HygonGenuine", 0x18, 0x01), r"HygonGenuine family 0x18 model 0x1 \(numawatch knows"),
    ],
)
def test_a_generation_without_known_encodings_is_unavailable_naming_the_cpu(cpu, reason):
    with pytest.raises(SourceUnavailable, match=f"no data-fabric event encoding is known for {reason}"):
        amd_data_fabric_table(cpu)


# --------------------------------------------------------------------------------------------------- counting
def test_zen4_opens_each_link_event_once_per_socket_and_sums_64_byte_beats(fake_host, monkeypatch):
    two_sockets(fake_host)
    add_amd_df(fake_host, GENOA, cpumask="0,4")
    perf = FakePerf(monkeypatch, count=lambda opened: 10 + (opened[1] & 0xF))  # 10 + a per-event share
    counters = UncoreLinkCounters()

    first = counters.read(fake_host.paths)
    second = counters.read(fake_host.paths)

    assert perf.opened == [(11, config, 0) for config in ZEN4_CONFIGS] + [(11, config, 4) for config in ZEN4_CONFIGS]
    beats = sum(10 + (config & 0xF) for config in ZEN4_CONFIGS)
    assert [(link.socket, link.link, link.pmu, link.cpu, link.bytes) for link in first.links] == [
        (0, "xgmi_out", "amd_df", 0, 64 * beats), (1, "xgmi_out", "amd_df", 4, 64 * beats)
    ]
    assert first.event.startswith("AMD Zen 4 data fabric: local_socket_outbound_data_beats_link")
    assert second == first
    assert len(perf.opened) == 16  # kept open across readings, not reopened


@pytest.mark.parametrize(
    ("cpu", "formats", "configs", "bytes_per_count"),
    [(ROME, FORMAT_F17H, ZEN23_CONFIGS, 32), (MILAN, FORMAT_F17H, ZEN23_CONFIGS, 32),
     (TURIN, FORMAT_PERFMON_V2, ZEN5_CONFIGS, 64)],
)
def test_other_generations_count_their_own_events(fake_host, monkeypatch, cpu, formats, configs, bytes_per_count):
    two_sockets(fake_host)
    add_amd_df(fake_host, cpu, formats=formats, cpumask="0,4")
    perf = FakePerf(monkeypatch, count=lambda opened: 100)

    traffic = UncoreLinkCounters().read(fake_host.paths)

    assert perf.opened == [(11, config, cpu) for cpu in (0, 4) for config in configs]
    assert [link.bytes for link in traffic.links] == [100 * len(configs) * bytes_per_count] * 2


def test_each_host_reader_keeps_its_own_amd_counters(fake_host, monkeypatch):
    two_sockets(fake_host)
    add_amd_df(fake_host, ROME, formats=FORMAT_F17H, cpumask="0,4")
    perf = FakePerf(monkeypatch, count=lambda opened: 1)

    reader = HostReader(fake_host.paths, (numastat.INTERSOCKET,))
    first, second = reader.read(), reader.read()

    assert len(perf.opened) == 8  # 4 events x 2 sockets, once for both readings
    assert first.statuses["intersocket"].up and second.statuses["intersocket"].up
    assert [link.bytes for link in second.get("intersocket").links] == [4 * 32, 4 * 32]


def test_the_cpu_identity_is_read_once_per_reader(fake_host, monkeypatch):
    two_sockets(fake_host)
    add_amd_df(fake_host, GENOA)
    FakePerf(monkeypatch)
    counters = UncoreLinkCounters()
    counters.read(fake_host.paths)

    fake_host.remove("sys/devices/system/cpu/modalias")

    assert counters.read(fake_host.paths).links


def test_a_multiplexed_estimate_that_dips_is_exported_as_the_last_value(fake_host, monkeypatch):
    """Scaled counts can go down between readings; a Prometheus counter that goes down reads as a reset."""
    two_sockets(fake_host)
    add_amd_df(fake_host, ROME, formats=FORMAT_F17H, cpumask="0")
    readings = iter([1000] * 4 + [900] * 4 + [1100] * 4)
    FakePerf(monkeypatch, count=lambda opened: next(readings))
    counters = UncoreLinkCounters()

    exported = [counters.read(fake_host.paths).links[0].bytes for _ in range(3)]

    assert exported == [4000 * 32, 4000 * 32, 4400 * 32]


def test_multiplexed_counts_are_scaled_by_time_enabled_over_running_in_integers():
    assert scale_count(1000, 200, 100) == 2000
    assert scale_count(1000, 100, 100) == 1000
    assert scale_count(7, 100, 0) == 7  # never scheduled yet: nothing to scale by
    assert scale_count(2**62 + 1, 3, 1) == 3 * (2**62 + 1)  # exact where a float would round


def test_an_isolated_cpumask_cpu_is_skipped_and_the_other_socket_counted(fake_host, monkeypatch):
    two_sockets(fake_host, cmdline="BOOT_IMAGE=/boot/vmlinuz ro isolcpus=0-3")
    add_amd_df(fake_host, GENOA, cpumask="0,4")
    perf = FakePerf(monkeypatch)

    traffic = UncoreLinkCounters().read(fake_host.paths)

    assert {cpu for _, _, cpu in perf.opened} == {4}
    assert [(link.socket, link.cpu) for link in traffic.links] == [(1, 4)]


def test_every_cpumask_cpu_isolated_leaves_the_source_down_naming_them(fake_host, monkeypatch):
    two_sockets(fake_host, cmdline="BOOT_IMAGE=/boot/vmlinuz ro isolcpus=0-7")
    add_amd_df(fake_host, GENOA, cpumask="0,4")
    perf = FakePerf(monkeypatch)

    up, reason = status(fake_host.paths)

    assert not up
    assert "amd_df on CPU 0; amd_df on CPU 4" in reason
    assert perf.opened == []


def test_an_unknown_generation_is_down_naming_vendor_family_and_model(fake_host, monkeypatch):
    add_amd_df(fake_host, (0x15, 0x02))
    perf = FakePerf(monkeypatch)

    up, reason = status(fake_host.paths)

    assert not up
    assert "no data-fabric event encoding is known for AuthenticAMD family 0x15 model 0x2" in reason
    assert reason.endswith("numastat counters remain the proxy")
    assert perf.opened == []


def test_a_zen4_kernel_without_the_perfmon_v2_format_is_down_saying_so(fake_host, monkeypatch):
    two_sockets(fake_host)
    add_amd_df(fake_host, GENOA, formats=FORMAT_F17H)
    perf = FakePerf(monkeypatch)

    up, reason = status(fake_host.paths)

    assert not up
    assert "cannot encode the Zen 4 data-fabric events: value 0xf3e does not fit field 'umask'" in reason
    assert "(config bits event 0-7,32-35,59-60; umask 8-15); Zen 4 and later need the PerfMonV2" in reason
    assert perf.opened == []


@pytest.mark.parametrize(
    ("rel", "content", "what"),
    [
        (f"{DF}/format/umask", "config:8-", "amd_df/format/umask: bad PMU format"),
        (f"{DF}/type", "eleven", "amd_df/type: expected an integer"),
        (f"{DF}/cpumask", "0-x", "amd_df/cpumask"),
        ("sys/devices/system/cpu/modalias", "cpu:type:x86:feature:", "cpu/modalias: expected"),
    ],
)
def test_malformed_amd_files_give_a_one_line_reason_naming_the_file(fake_host, monkeypatch, rel, content, what):
    two_sockets(fake_host)
    add_amd_df(fake_host, GENOA)
    fake_host.write(rel, content)
    FakePerf(monkeypatch)

    up, reason = status(fake_host.paths)

    assert not up
    assert what in reason
    assert "\n" not in reason


def test_a_missing_format_file_is_named(fake_host, monkeypatch):
    two_sockets(fake_host)
    add_amd_df(fake_host, GENOA)
    fake_host.remove(f"{DF}/format/event")
    FakePerf(monkeypatch)

    up, reason = status(fake_host.paths)

    assert not up
    assert "amd_df/format: no format for event" in reason


def test_amd_df_without_perf_access_says_what_is_needed(fake_host):
    add_amd_df(fake_host, GENOA, paranoid=2)
    fake_host.write("proc/self/status", "Name:\tnumawatch\nCapEff:\t0000000000000000\n")

    up, reason = status(fake_host.paths)

    assert not up
    assert "amd_df" in reason and "perf_event_paranoid=2" in reason and "CAP_PERFMON" in reason


def test_a_refused_amd_perf_event_open_makes_the_source_down_with_the_errno(fake_host):
    """The real syscall: PMU type 99999 does not exist here, so the kernel refuses (ENOENT), or perf is off."""
    two_sockets(fake_host)
    add_amd_df(fake_host, ROME, formats=FORMAT_F17H, pmu_type=99999, cpumask="0")

    up, reason = status(fake_host.paths)

    assert not up
    assert "perf_event_open" in reason or "unsupported architecture" in reason


def test_amd_df_without_a_cpumask_cpu_says_no_link_pmu_can_be_opened(fake_host, monkeypatch):
    """The kernel clears cpumask while the package's last CPU goes offline: nothing to open, nothing invented."""
    two_sockets(fake_host)
    add_amd_df(fake_host, GENOA, cpumask="")
    perf = FakePerf(monkeypatch)

    up, reason = status(fake_host.paths)

    assert not up
    assert "inter-socket traffic not counted: no link PMU under" in reason
    assert perf.opened == []
