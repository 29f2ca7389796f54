"""The topology source: CPUs, NUMA nodes, isolation parameters (numawatch.sources.topology)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from fakehost.topology import GiB, add_topology, format_cpumask
from numawatch.cpuset import CPUListError, format_cpulist, parse_cpulist, parse_cpumask
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import HostReader, read_host
from numawatch.paths import Paths
from numawatch.sources import topology
from numawatch.sources.topology import (
    last_values,
    parse_cmdline,
    parse_cmdline_cpulist,
    parse_cmdline_hugepages,
    parse_distance,
    parse_hugepages_count,
    parse_isolation,
    parse_isolcpus,
    parse_meminfo_total,
    parse_size_kb,
    parse_sys_cpulist,
)

R = frozenset
cpus = parse_cpulist


# --------------------------------------------------------------------------------------------------- cmdline
def test_parse_cmdline_splits_names_and_values_in_order():
    assert parse_cmdline("BOOT_IMAGE=/vmlinuz ro quiet isolcpus=2-5\n") == [
        ("BOOT_IMAGE", "/vmlinuz"),
        ("ro", None),
        ("quiet", None),
        ("isolcpus", "2-5"),
    ]


def test_parse_cmdline_keeps_spaces_inside_quoted_values_and_strips_the_quotes():
    assert parse_cmdline('dyndbg="file foo.c +p" ro') == [("dyndbg", "file foo.c +p"), ("ro", None)]
    assert parse_cmdline('"acpi_osi=Linux a" ro') == [("acpi_osi", "Linux a"), ("ro", None)]


def test_parse_cmdline_treats_dashes_in_names_as_underscores():
    assert parse_cmdline("nohz-full=2-5 rcu-nocbs=2-5") == [("nohz_full", "2-5"), ("rcu_nocbs", "2-5")]


def test_parse_cmdline_ignores_what_follows_the_double_dash_for_init():
    assert parse_cmdline("ro isolcpus=2 -- isolcpus=3 single") == [("ro", None), ("isolcpus", "2")]


def test_parse_cmdline_splits_on_the_first_equals_only():
    assert parse_cmdline("root=PARTUUID=abc=d") == [("root", "PARTUUID=abc=d")]


def test_parse_cmdline_runs_an_unterminated_quote_to_the_end_of_a_truncated_line():
    assert parse_cmdline('ro dyndbg="file foo.c') == [("ro", None), ("dyndbg", "file foo.c")]


def test_parse_cmdline_of_empty_text_is_empty():
    assert parse_cmdline("") == []
    assert parse_cmdline(" \n") == []


def test_last_values_lets_the_last_repeated_parameter_win():
    assert last_values(parse_cmdline("isolcpus=1 nohz_full=1 isolcpus=2-3")) == {"isolcpus": "2-3", "nohz_full": "1"}


def test_parse_cmdline_cpulist_understands_n_and_all_given_the_last_cpu():
    assert parse_cmdline_cpulist("8-N", last_cpu=11) == cpus("8-11")
    assert parse_cmdline_cpulist("all", last_cpu=3) == cpus("0-3")
    assert parse_cmdline_cpulist("N", last_cpu=7) == R({7})
    assert parse_cmdline_cpulist("0-N:1/2", last_cpu=7) == R({0, 2, 4, 6})


def test_parse_cmdline_cpulist_rejects_n_without_knowing_the_last_cpu():
    with pytest.raises(CPUListError):
        parse_cmdline_cpulist("8-N")


@pytest.mark.parametrize(
    ("value", "expected_cpus", "expected_flags"),
    [
        ("2-5,8-11", "2-5,8-11", ("domain",)),
        ("domain,managed_irq,2-5,8-11", "2-5,8-11", ("domain", "managed_irq")),
        ("managed_irq,domain,2-31", "2-31", ("managed_irq", "domain")),
        ("nohz,managed_irq,4-7", "4-7", ("nohz", "managed_irq")),
        ("managed_irq,2-3", "2-3", ("managed_irq",)),
        ("io_queue,2-3", "2-3", ("io_queue", "domain")),  # unknown flag: skipped by the kernel, domain applies
        ("domain,domain,2", "2", ("domain",)),
        ("domain", "", ("domain",)),
        ("", "", ("domain",)),
    ],
)
def test_parse_isolcpus_separates_flags_from_the_cpu_list(value, expected_cpus, expected_flags):
    assert parse_isolcpus(value) == (cpus(expected_cpus), expected_flags)


@pytest.mark.parametrize("value", ["domain,2-x", "dom-ain,2-3", "domain,2-", "nohz,managed_irq,5-3"])
def test_parse_isolcpus_rejects_bad_flags_and_lists(value):
    with pytest.raises(CPUListError):
        parse_isolcpus(value)


@pytest.mark.parametrize(
    ("text", "kb"),
    [("2M", 2048), ("2m", 2048), ("1G", 1048576), ("1g", 1048576), ("2097152", 2048), ("64K", 64), ("16G", 16777216)],
)
def test_parse_size_kb_reads_memparse_sizes(text, kb):
    assert parse_size_kb(text) == kb


@pytest.mark.parametrize("text", ["", "M", "2X", "1.5G", "-2M", "0", "100"])
def test_parse_size_kb_rejects_sizes_that_are_not_whole_kilobytes(text):
    with pytest.raises(ValueError):
        parse_size_kb(text)


def test_parse_hugepages_count_sums_the_per_node_form():
    assert parse_hugepages_count("32") == 32
    assert parse_hugepages_count("0:4,1:6") == 10
    with pytest.raises(ValueError):
        parse_hugepages_count("4x")
    with pytest.raises(ValueError):
        parse_hugepages_count("a:4")


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        ("default_hugepagesz=2M hugepagesz=2M hugepages=32", {2048: 32}),
        ("hugepages=64", {2048: 64}),  # no size given anywhere: x86's 2 MiB
        ("hugepages=8 default_hugepagesz=1G", {1048576: 8}),  # the default applies wherever it is written
        ("hugepagesz=1G hugepages=16 hugepagesz=2M hugepages=1024", {1048576: 16, 2048: 1024}),
        ("hugepagesz=1G hugepages=16 hugepages=4", {1048576: 4}),
        ("hugepagesz=1G hugepages=0:8,1:8", {1048576: 16}),
        ("hugepagesz=1G", {}),
        ("", {}),
    ],
)
def test_parse_cmdline_hugepages_pairs_counts_with_sizes(cmdline, expected):
    assert parse_cmdline_hugepages(parse_cmdline(cmdline)) == expected


def test_parse_cmdline_hugepages_skips_and_reports_values_the_kernel_rejects():
    problems: list[str] = []
    result = parse_cmdline_hugepages(
        parse_cmdline("hugepagesz=3X hugepages=4 hugepagesz=1G hugepages=lots hugepagesz=2M hugepages=8"),
        problems,
        "/proc/cmdline",
    )
    assert result == {2048: 8}
    assert len(problems) == 2
    assert problems[0].startswith("/proc/cmdline: hugepagesz=3X:")
    assert "hugepages=lots" in problems[1]


def test_parse_cmdline_hugepages_raises_without_a_problem_list():
    with pytest.raises(ValueError):
        parse_cmdline_hugepages(parse_cmdline("default_hugepagesz=huge"))


def test_parse_isolation_reads_every_isolation_parameter():
    params = parse_isolation(
        "ro isolcpus=domain,managed_irq,2-5,8-11 nohz_full=2-5,8-9 rcu_nocbs=2-3,8-11 irqaffinity=0-1,6-7 "
        "default_hugepagesz=1G hugepagesz=1G hugepages=4\n"
    )
    assert params.isolcpus == cpus("2-5,8-11")
    assert params.isolcpus_flags == ("domain", "managed_irq")
    assert params.nohz_full == cpus("2-5,8-9")
    assert params.rcu_nocbs == cpus("2-3,8-11")
    assert params.irqaffinity == cpus("0-1,6-7")
    assert dict(params.cmdline_hugepages) == {1048576: 4}
    assert params.cmdline.endswith("hugepages=4")
    assert params.problems == ()


def test_parse_isolation_leaves_absent_parameters_as_none():
    params = parse_isolation("BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro")
    assert (params.isolcpus, params.nohz_full, params.rcu_nocbs, params.irqaffinity) == (None, None, None, None)
    assert params.isolcpus_flags == ()
    assert dict(params.cmdline_hugepages) == {}


def test_parse_isolation_takes_a_bare_rcu_nocbs_as_an_empty_set():
    assert parse_isolation("rcu_nocbs").rcu_nocbs == R()


def test_parse_isolation_uses_the_last_of_repeated_parameters():
    assert parse_isolation("isolcpus=1-3 isolcpus=4-7 nohz_full=1 nohz_full=4-7").isolcpus == cpus("4-7")


def test_parse_isolation_expands_n_with_the_last_cpu():
    assert parse_isolation("nohz_full=4-N isolcpus=4-N", last_cpu=15).nohz_full == cpus("4-15")


@pytest.mark.parametrize(
    ("cmdline", "bad"),
    [
        ("isolcpus=domain,2-x nohz_full=2-5", "isolcpus"),
        ("isolcpus=2-5 nohz_full=5-2", "nohz_full"),
        ("isolcpus=2-5 rcu_nocbs=2,,3", "rcu_nocbs"),
        ("irqaffinity=0-1x", "irqaffinity"),
        ("ro isolcpus=2-5 nohz_full=2-", "nohz_full"),  # a command line cut off mid-value
    ],
)
def test_parse_isolation_reports_a_bad_cpu_list_and_keeps_the_rest(cmdline, bad):
    params = parse_isolation(cmdline, path="/host/proc/cmdline")
    assert getattr(params, bad) is None
    assert len(params.problems) == 1
    assert params.problems[0].startswith(f"/host/proc/cmdline: {bad}=")
    assert "\n" not in params.problems[0]
    others = {"isolcpus", "nohz_full"} - {bad}
    for name in others:
        if f"{name}=" in cmdline:
            assert getattr(params, name) == cpus("2-5")


def test_parse_isolation_survives_a_truncated_quoted_value():
    params = parse_isolation('isolcpus=2-5 nohz_full="2-5')
    assert params.nohz_full == cpus("2-5")
    assert params.problems == ()


# --------------------------------------------------------------------------------------------------- sysfs parsers
@pytest.mark.parametrize(("text", "expected"), [("(null)\n", R()), ("\n", R()), ("2-5,8-11\n", cpus("2-5,8-11"))])
def test_parse_sys_cpulist_reads_isolated_and_nohz_full(text, expected):
    assert parse_sys_cpulist(text) == expected


def test_parse_sys_cpulist_rejects_garbage():
    with pytest.raises(CPUListError):
        parse_sys_cpulist("(nil")


def test_parse_meminfo_total_reads_node_and_proc_forms_in_bytes():
    assert parse_meminfo_total("Node 0 MemTotal:         514140 kB\nNode 0 MemFree: 1 kB\n") == 514140 * 1024
    assert parse_meminfo_total("MemTotal:       16314480 kB\nMemFree: 3 kB\n") == 16314480 * 1024


@pytest.mark.parametrize(
    "text", ["", "Node 0 MemFree: 1 kB\n", "Node 0 MemTotal: lots kB\n", "Node 0 MemTotal:\n", "MemTotal: 5 MB\n"]
)
def test_parse_meminfo_total_rejects_malformed_meminfo(text):
    with pytest.raises(ValueError):
        parse_meminfo_total(text)


def test_parse_distance_reads_one_distance_per_node():
    assert parse_distance("10 11 21 21\n") == (10, 11, 21, 21)
    for garbage in ("", "10 x", "10,21", "-10"):
        with pytest.raises(ValueError):
            parse_distance(garbage)


# --------------------------------------------------------------------------------------------------- fake hosts
def test_reads_a_two_socket_smt_host(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=2)
    topo = topology.read(fake_host.paths)
    assert set(topo.cpus) == set(range(16))
    assert topo.online == R(range(16))
    assert topo.offline == R()
    assert topo.sockets == R({0, 1})
    assert topo.node_ids == (0, 1)
    # interleaved numbering: socket 0 has 0-3 and their siblings 8-11
    assert topo.nodes[0].cpus == cpus("0-3,8-11")
    assert topo.nodes[1].cpus == cpus("4-7,12-15")
    assert topo.cpus[0].siblings == R({0, 8})
    assert topo.cpus[13].socket == 1
    assert topo.cpus[13].core == 1
    assert topo.cpus[13].siblings == R({5, 13})
    assert topo.nodes[0].distances == (10, 21)
    assert topo.nodes[1].mem_total_bytes == 64 * GiB
    assert dict(topo.nodes[0].hugepages_total) == {2048: 0, 1048576: 0}
    for cpu in layout.cpus:
        assert topo.node_of(cpu) == layout.node_of[cpu]
        assert topo.cpus[cpu].siblings == layout.siblings(cpu)


def test_reads_packed_numbering_with_adjacent_siblings(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=2, numbering="packed")
    topo = topology.read(fake_host.paths)
    assert topo.cpus[0].siblings == R({0, 1})
    assert topo.cpus[5].siblings == R({4, 5})
    assert topo.nodes[1].cpus == cpus("4-7")


def test_reads_sub_numa_clustering_with_several_nodes_per_socket(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=2, nodes_per_socket=2)
    topo = topology.read(fake_host.paths)
    assert topo.node_ids == (0, 1, 2, 3)
    assert topo.nodes[0].cpus == cpus("0-1,8-9")
    assert topo.nodes[1].cpus == cpus("2-3,10-11")
    assert topo.nodes[3].cpus == cpus("6-7,14-15")
    assert topo.nodes[0].distances == (10, 11, 21, 21)
    assert topo.nodes[3].distances == (21, 21, 11, 10)
    assert {topo.cpus[cpu].socket for cpu in topo.nodes[1].cpus} == {0}
    assert topo.nodes_of(cpus("1,2")) == R({0, 1})
    assert layout.node_cpus(2) == topo.nodes[2].cpus


def test_offline_cpus_have_no_socket_core_or_siblings_but_keep_their_node(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=2, offline=(3, 12))
    topo = topology.read(fake_host.paths)
    assert topo.offline == R({3, 12})
    assert 3 not in topo.online
    assert topo.cpus[3].online is False
    assert (topo.cpus[3].socket, topo.cpus[3].core, topo.cpus[3].siblings) == (None, None, R())
    # node cpulists drop offline CPUs; the cpuN/nodeM link still tells
    assert 3 not in topo.nodes[0].cpus
    assert topo.cpus[3].numa_node == 0
    assert topo.cpus[12].numa_node == 1
    # the sibling of an offline CPU no longer lists it
    assert topo.cpus[11].siblings == R({11})
    assert topo.cpus[4].siblings == R({4})


def test_offline_cpu_without_a_node_link_has_an_unknown_node(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1, offline=(1,))
    fake_host.remove("sys/devices/system/cpu/cpu1/node0")
    topo = topology.read(fake_host.paths)
    assert topo.cpus[1].numa_node is None


def test_reads_non_contiguous_cpu_numbering(fake_host):
    ids = [0, 1, 2, 3, 16, 17, 18, 19]
    layout = add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=2, cpu_ids=ids)
    topo = topology.read(fake_host.paths)
    assert set(topo.cpus) == set(ids)
    assert topo.online == R(ids)
    # interleaved: slot k gets ids[k]; node 0 holds slots 0,1 (thread 0) and 4,5 (thread 1)
    assert topo.nodes[0].cpus == R({0, 1, 16, 17})
    assert topo.cpus[16].siblings == R({0, 16})
    assert layout.siblings(16) == R({0, 16})


def test_a_host_without_a_node_directory_is_one_node_holding_everything(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=2, offline=(7,), numa=False)
    assert not fake_host.path("sys/devices/system/node").exists()
    topo = topology.read(fake_host.paths)
    assert topo.node_ids == (0,)
    assert topo.nodes[0].cpus == topo.online
    assert topo.nodes[0].distances == (10,)
    assert topo.nodes[0].mem_total_bytes == 64 * GiB
    assert all(cpu.numa_node == 0 for cpu in topo.cpus.values())


def test_memory_only_nodes_have_memory_and_no_cpus(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1, memory_only_nodes=2)
    topo = topology.read(fake_host.paths)
    assert topo.node_ids == (0, 1, 2, 3)
    assert topo.nodes[2].cpus == R()
    assert topo.nodes[3].mem_total_bytes == 64 * GiB
    assert topo.nodes[0].distances == (10, 21, 20, 20)
    assert {cpu.numa_node for cpu in topo.cpus.values()} == {0, 1}


def test_reads_huge_pages_per_node(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, hugepages_per_node=[{1048576: 8}, {1048576: 4, 2048: 512}])
    topo = topology.read(fake_host.paths)
    assert dict(topo.nodes[0].hugepages_total) == {1048576: 8, 2048: 0}
    assert dict(topo.nodes[1].hugepages_total) == {1048576: 4, 2048: 512}


def test_reads_isolation_from_the_cmdline_and_sysfs(fake_host):
    add_topology(
        fake_host,
        sockets=2,
        cores_per_socket=4,
        cmdline="ro isolcpus=managed_irq,domain,2-7,10-15 nohz_full=2-7,10-15 rcu_nocbs=2-7,10-15 "
        "default_hugepagesz=1G hugepagesz=1G hugepages=16",
    )
    topo = topology.read(fake_host.paths)
    iso = topo.isolation
    assert iso.isolcpus == cpus("2-7,10-15")
    assert iso.isolcpus_flags == ("managed_irq", "domain")
    assert iso.sys_isolated == cpus("2-7,10-15")
    assert iso.sys_nohz_full == cpus("2-7,10-15")
    assert dict(iso.cmdline_hugepages) == {1048576: 16}
    assert topo.housekeeping == cpus("0-1,8-9")


def test_nohz_full_reads_null_when_the_parameter_is_absent(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2)
    assert fake_host.path("sys/devices/system/cpu/nohz_full").read_text() == "(null)\n"
    iso = topology.read(fake_host.paths).isolation
    assert iso.sys_nohz_full == R()
    assert iso.sys_isolated == R()
    assert iso.isolcpus is None


def test_kernels_without_isolation_files_leave_them_unknown(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, cmdline="isolcpus=1", write_sys_isolated=False)
    iso = topology.read(fake_host.paths).isolation
    assert (iso.sys_isolated, iso.sys_nohz_full) == (None, None)
    assert iso.isolcpus == R({1})


def test_a_bad_isolcpus_on_the_cmdline_keeps_the_topology_up_and_says_why(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, cmdline="isolcpus=domain,1-x nohz_full=1")
    topo = topology.read(fake_host.paths)
    assert topo.isolation.isolcpus is None
    assert topo.isolation.nohz_full == R({1})
    assert topo.isolation.problems == (
        f"{fake_host.path('proc/cmdline')}: isolcpus=domain,1-x: bad element '1-x' in CPU list '1-x'",
    )


def test_n_on_the_cmdline_means_the_last_possible_cpu(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=2, cmdline="nohz_full=8-N")
    assert topology.read(fake_host.paths).isolation.nohz_full == cpus("8-15")


def test_a_missing_cmdline_gives_empty_isolation_parameters(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2)
    fake_host.remove("proc/cmdline")
    iso = topology.read(fake_host.paths).isolation
    assert iso.cmdline == ""
    assert iso.isolcpus is None


@pytest.mark.slow
def test_a_384_cpu_host_reads_completely(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=96, threads_per_core=2, nodes_per_socket=2)
    topo = topology.read(fake_host.paths)
    assert len(topo.cpus) == 384
    assert topo.node_ids == (0, 1, 2, 3)
    assert sum(len(node.cpus) for node in topo.nodes.values()) == 384
    assert all(topo.cpus[cpu].siblings == layout.siblings(cpu) for cpu in layout.cpus)


def test_a_missing_cpu_directory_makes_the_source_unavailable(fake_host):
    with pytest.raises(SourceUnavailable, match="devices/system/cpu"):
        topology.read(fake_host.paths)


def test_host_reader_reports_topology_down_with_the_path(fake_host):
    host = HostReader(fake_host.paths, [topology.SOURCE]).read()
    assert host.topology is None
    assert not host.statuses["topology"].up
    assert str(fake_host.path("sys/devices/system/cpu")) in host.down_reason("topology")


def test_without_a_present_file_cpus_are_taken_from_the_cpu_directories(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1)
    fake_host.remove("sys/devices/system/cpu/present")
    assert set(topology.read(fake_host.paths).cpus) == {0, 1, 2, 3}


def test_a_cpu_whose_topology_vanished_mid_scan_has_unknown_fields(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    fake_host.remove("sys/devices/system/cpu/cpu1/topology")
    cpu = topology.read(fake_host.paths).cpus[1]
    assert (cpu.online, cpu.socket, cpu.core, cpu.siblings, cpu.numa_node) == (True, None, None, R(), 0)


def test_a_package_id_of_minus_one_is_unknown(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    fake_host.write("sys/devices/system/cpu/cpu0/topology/physical_package_id", "-1")
    assert topology.read(fake_host.paths).cpus[0].socket is None


@pytest.mark.parametrize(
    ("rel", "content", "what"),
    [
        ("sys/devices/system/node/node1/cpulist", "4-x", "bad element"),
        ("sys/devices/system/cpu/online", "0-", "bad element"),
    ],
)
def test_a_malformed_essential_file_takes_the_source_down_naming_the_file(fake_host, rel, content, what):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=2)
    fake_host.write(rel, content)
    with pytest.raises(MalformedFile) as raised:
        topology.read(fake_host.paths)
    assert raised.value.path == str(fake_host.path(rel))
    assert what in raised.value.what
    status = HostReader(fake_host.paths, [topology.SOURCE]).read().statuses["topology"]
    assert not status.up
    assert str(fake_host.path(rel)) in status.reason


@pytest.mark.parametrize(
    ("rel", "content", "key", "what"),
    [
        ("sys/devices/system/cpu/cpu2/topology/core_id", "two", "cpu_topology", "expected an integer"),
        ("sys/devices/system/cpu/cpu2/topology/thread_siblings_list", "2,,10", "cpu_topology", "empty element"),
        ("sys/devices/system/node/node0/distance", "10 twenty", "distance", "expected decimal distances"),
        ("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: many kB", "meminfo", "bad MemTotal line"),
        (
            "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages",
            "x",
            "hugepages",
            "expected an integer",
        ),
        ("sys/devices/system/cpu/isolated", "garbage", "isolated", "bad element"),
        ("sys/devices/system/cpu/nohz_full", "1-", "nohz_full", "bad element"),
        ("sys/devices/system/cpu/present", "0-x", "present", "bad element"),
        ("sys/devices/system/cpu/possible", "?", "possible", "bad element"),
    ],
)
def test_a_malformed_optional_file_leaves_the_source_up_and_says_which_file(fake_host, rel, content, key, what):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=2)
    clean = topology.read(fake_host.paths)
    fake_host.write(rel, content)

    result = topology.read(fake_host.paths)

    assert set(result.problems) == {key}
    assert result.problems[key].startswith(str(fake_host.path(rel)) + ": ") and what in result.problems[key]
    assert "\n" not in result.problems[key]
    # The CPU-to-node map, the rest of the topology, stays what it was.
    assert {cpu: c.numa_node for cpu, c in result.cpus.items()} == {cpu: c.numa_node for cpu, c in clean.cpus.items()}
    assert result.online == clean.online
    assert HostReader(fake_host.paths, [topology.SOURCE]).read().statuses["topology"].up


def test_layout_helpers_name_cpus_by_role(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=2, nodes_per_socket=2)
    assert layout.cpu(1, 3, 1) == 15
    assert layout.socket_cpus(1) == cpus("4-7,12-15")
    assert layout.core_cpus(0, 1) == R({1, 9})
    assert layout.cores_of([1, 9, 12]) == R({(0, 1), (1, 0)})
    assert layout.whole_cores(3, 1) == R({6, 14})
    assert layout.nodes == (0, 1, 2, 3)


def test_fake_cpumasks_match_the_kernels_shape(fake_host):
    assert format_cpumask([0, 2, 3], 12) == "00d"
    assert format_cpumask([10, 11], 12) == "c00"
    assert format_cpumask(range(40), 40) == "ff,ffffffff"
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=2)
    node0 = fake_host.path("sys/devices/system/node/node0")
    assert parse_cpumask((node0 / "cpumap").read_text()) == cpus((node0 / "cpulist").read_text())


# --------------------------------------------------------------------------------------------------- real kernel
def test_realkernel_4node_fixture_reads_exactly(realkernel_root):
    topo = topology.read(Paths.from_root(realkernel_root))
    assert set(topo.cpus) == set(range(12))
    assert topo.online == cpus("0-6,8-11")
    assert topo.offline == R({7})
    assert topo.cpus[7] == topology.Cpu(id=7, online=False, socket=None, core=None, numa_node=None)
    assert topo.node_ids == (0, 1, 2, 3)
    assert [format_cpulist(topo.nodes[n].cpus) for n in topo.node_ids] == ["0,2-3", "1,4-5", "6,8-9", "10-11"]
    assert [topo.nodes[n].distances for n in topo.node_ids] == [
        (10, 11, 21, 21),
        (11, 10, 21, 21),
        (21, 21, 10, 11),
        (21, 21, 11, 10),
    ]
    assert [topo.nodes[n].mem_total_bytes for n in topo.node_ids] == [
        514140 * 1024,
        515176 * 1024,
        469904 * 1024,
        514956 * 1024,
    ]
    assert all(dict(topo.nodes[n].hugepages_total) == {2048: 8, 1048576: 0} for n in topo.node_ids)
    assert topo.sockets == R({0, 1})
    assert {cpu for cpu, c in topo.cpus.items() if c.socket == 0} == cpus("0-5")
    # the kernel refused the cross-node SMT pairs: 0/1 and 6/7 share a core_id but are not siblings
    assert (topo.cpus[0].core, topo.cpus[1].core) == (0, 0)
    assert topo.cpus[0].siblings == R({0})
    assert topo.cpus[1].siblings == R({1})
    assert topo.cpus[6].siblings == R({6})
    assert topo.cpus[8].siblings == R({8, 9})
    assert topo.nodes_of(cpus("3-4")) == R({0, 1})  # the drifted pod's cpuset spans two nodes of one socket

    iso = topo.isolation
    assert iso.isolcpus == cpus("2-5,8-11")
    assert iso.isolcpus_flags == ("domain", "managed_irq")
    assert iso.nohz_full == cpus("2-5,8-9")
    assert iso.rcu_nocbs == cpus("2-3,8-11")
    assert iso.irqaffinity is None
    assert iso.sys_isolated == cpus("2-5,8-11")
    assert iso.sys_nohz_full == cpus("2-5,8-9")
    assert dict(iso.cmdline_hugepages) == {2048: 32}
    assert iso.problems == ()
    assert topo.isolated == cpus("2-5,8-11")
    assert topo.housekeeping == cpus("0-1,6")  # 7 is offline


def test_realkernel_4node_fixture_fingerprint_is_stable(realkernel_root):
    paths = Paths.from_root(realkernel_root)
    assert topology.fingerprint(paths) == topology.fingerprint(paths)


# --------------------------------------------------------------------------------------------------- this machine
@pytest.mark.realhost
def test_reads_this_machines_topology_sanely():
    paths = Paths.from_root("/")
    if not (paths.sysfs / "devices/system/cpu").is_dir():
        pytest.skip("this machine has no /sys/devices/system/cpu")
    topo = topology.read(paths)
    assert topo.online
    assert topo.online <= frozenset(topo.cpus)
    assert os.sched_getaffinity(0) <= topo.online
    for cpu in topo.online:
        assert topo.cpus[cpu].numa_node in topo.nodes
        assert cpu in topo.cpus[cpu].siblings or not topo.cpus[cpu].siblings
    assert sum(len(node.cpus) for node in topo.nodes.values()) == len(topo.online)
    assert topo.isolation.cmdline == Path("/proc/cmdline").read_text().strip()


@pytest.mark.realhost
def test_this_machines_fingerprint_does_not_change_between_two_reads():
    paths = Paths.from_root("/")
    assert topology.fingerprint(paths) == topology.fingerprint(paths)


# --------------------------------------------------------------------------------------------------- caching
def test_host_reader_reuses_the_topology_until_cpu_online_changes(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1)
    reader = HostReader(fake_host.paths, [topology.SOURCE])
    first = reader.read()
    second = reader.read()
    assert second.statuses["topology"].cached
    assert second.topology is first.topology

    fake_host.write("sys/devices/system/cpu/online", "0-2")
    fake_host.write("sys/devices/system/cpu/cpu3/online", "0")
    fake_host.remove("sys/devices/system/cpu/cpu3/topology")
    third = reader.read()
    assert not third.statuses["topology"].cached
    assert third.topology.offline == R({3})


@pytest.mark.parametrize(
    ("rel", "content"),
    [
        ("proc/cmdline", "ro isolcpus=2-3"),
        ("sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "8"),
        ("sys/devices/system/node/online", "0-1"),
    ],
)
def test_host_reader_rereads_the_topology_when_a_fingerprinted_file_changes(fake_host, rel, content):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1)
    reader = HostReader(fake_host.paths, [topology.SOURCE])
    reader.read()
    fake_host.write(rel, content)
    again = reader.read()
    assert not again.statuses["topology"].cached
    assert again.statuses["topology"].up


def test_host_reader_reads_the_topology_again_when_a_nodes_cpu_list_changes_after_the_online_cpus(fake_host):
    # The kernel takes a CPU going offline out of cpu/online, then out of its node's list: a reading between the
    # two must not stand once the node's list changed.
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    reader = HostReader(fake_host.paths, [topology.SOURCE])
    node = next(n.id for n in reader.read().topology.nodes.values() if 3 in n.cpus)
    fake_host.write("sys/devices/system/cpu/online", "0-2")
    fake_host.write("sys/devices/system/cpu/offline", "3")
    fake_host.write("sys/devices/system/cpu/cpu3/online", "0")
    reader.read()  # between the two
    cpulist = fake_host.path(f"sys/devices/system/node/node{node}/cpulist")
    remaining = parse_cpulist(cpulist.read_text()) - {3}
    cpulist.write_text(format_cpulist(remaining) + "\n")
    after = reader.read()

    assert not after.statuses["topology"].cached
    assert after.topology == read_host(fake_host.paths).topology
    assert 3 not in after.topology.nodes[node].cpus


def _set_mem_total(fake_host, rel: str, kb: int) -> None:
    path = fake_host.path(rel)
    path.write_text(re.sub(r"MemTotal:\s+\d+", lambda m: f"MemTotal:{kb:>{len(m.group(0)) - 9}}", path.read_text()))


def test_host_reader_reads_a_node_memory_change_at_once_and_its_return(fake_host):
    # Memory taken offline on node 1 (its MemTotal drops), then back: the Memory Manager's checkpoint is judged
    # against each node's MemTotal, so the topology is read again both times.
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1, mem_per_node_bytes=64 << 30)
    reader = HostReader(fake_host.paths, [topology.SOURCE])
    assert reader.read().topology.nodes[1].mem_total_bytes == 64 << 30
    meminfo = "sys/devices/system/node/node1/meminfo"
    _set_mem_total(fake_host, meminfo, (63 << 30) // 1024)
    shrunk = reader.read()
    _set_mem_total(fake_host, meminfo, (64 << 30) // 1024)
    restored = reader.read()

    assert not shrunk.statuses["topology"].cached and shrunk.topology.nodes[1].mem_total_bytes == 63 << 30
    assert not restored.statuses["topology"].cached and restored.topology.nodes[1].mem_total_bytes == 64 << 30


def test_host_reader_reads_huge_pages_moved_between_nodes(fake_host):
    # The global count stays the same: only the nodes' own counts say that the pages moved.
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1, hugepages_per_node={1048576: 2})
    reader = HostReader(fake_host.paths, [topology.SOURCE])
    reader.read()
    node = "sys/devices/system/node/node{}/hugepages/hugepages-1048576kB/nr_hugepages"
    fake_host.write(node.format(0), "1")
    fake_host.write(node.format(1), "3")
    moved = reader.read()

    assert not moved.statuses["topology"].cached
    assert {n: node.hugepages_total[1048576] for n, node in moved.topology.nodes.items()} == {0: 1, 1: 3}


def test_host_reader_keeps_the_topology_while_only_free_memory_moves(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    reader = HostReader(fake_host.paths, [topology.SOURCE])
    reader.read()
    meminfo = fake_host.path("sys/devices/system/node/node0/meminfo")
    meminfo.write_text(re.sub(r"MemFree:(\s+)\d+", r"MemFree:\g<1>12345", meminfo.read_text()))

    assert reader.read().statuses["topology"].cached


def test_host_reader_reads_a_memory_change_of_a_kernel_without_nodes(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1, numa=False,
                 mem_per_node_bytes=16 << 30)  # fmt: skip
    reader = HostReader(fake_host.paths, [topology.SOURCE])
    reader.read()
    _set_mem_total(fake_host, "proc/meminfo", (15 << 30) // 1024)
    again = reader.read()

    assert not again.statuses["topology"].cached
    assert again.topology.nodes[0].mem_total_bytes == 15 << 30


def test_host_reader_does_not_cache_a_down_topology(fake_host):
    reader = HostReader(fake_host.paths, [topology.SOURCE])
    assert not reader.read().statuses["topology"].up
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    host = reader.read()
    assert host.statuses["topology"].up
    assert not host.statuses["topology"].cached
