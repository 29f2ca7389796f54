"""What real kernels print that fake hosts did not: padding, "(null)", old layouts, firmware that contradicts itself.

Kernel quirks, each on the smallest tree that shows it (the corpus tests run the real trees): a value padded with
NULs or "(null)" means what it says without them; an old kernel without ``cpu/online``, ``nodeN/cpulist`` or
``thread_siblings_list`` still gives its map; a CPU that two nodes claim goes to the lower one, as hwloc decides;
and the numa_topology_inconsistent check reports each contradiction and stays quiet on a consistent node.
"""

from __future__ import annotations

import pytest
from fakehost import FakeHost
from fakehost.gpus import add_gpu
from fakehost.reference import GPUS, reference_node
from fakehost.topology import add_topology
from numawatch.checks import evaluate
from numawatch.checks.numa_topology import NUMA_TOPOLOGY_INCONSISTENT
from numawatch.cpuset import format_cpulist, parse_cpulist, parse_cpumask
from numawatch.host import read_host
from numawatch.hosttext import is_null, strip_value
from numawatch.intent import REFERENCE
from numawatch.sources import SOURCES, gpus_sysfs, topology
from numawatch.sources.topology import parse_distance, parse_int_attribute, parse_sys_cpulist

R = frozenset
cpus = parse_cpulist
NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"


# --------------------------------------------------------------------------------------------------- padding
@pytest.mark.parametrize("text", ["0-31\n\x00", "0-31\x00", "  0-31\n", "0-31\n\x00\x00\x00", "\x000-31\n"])
def test_a_cpu_list_padded_with_nuls_or_spaces_is_the_list(text):
    assert parse_cpulist(text) == R(range(32))


@pytest.mark.parametrize("text", ["\x00\n", "  (null)\n", "(null)", "", "\n", "\x00"])
def test_a_never_allocated_sysfs_mask_reads_as_none(text):
    """RHEL/CentOS 7 print "\\0\\n" for cpu/nohz_full without nohz_full=, Debian's 6.1 "  (null)\\n"."""
    assert parse_sys_cpulist(text) == R()
    assert is_null(text)


def test_padding_is_taken_off_the_ends_only():
    assert strip_value("\x00 0-3 \n\x00") == "0-3"
    with pytest.raises(ValueError):
        parse_cpulist("0-3\x00,5")
    assert parse_cpumask("0000000f\n\x00") == R(range(4))
    assert parse_int_attribute("3\n\x00") == 3
    assert parse_distance("10 21\n\x00") == (10, 21)


def test_a_tree_whose_files_end_in_nuls_reads_as_without_them(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=2, cmdline="ro")
    clean = topology.read(fake_host.paths)
    for path in sorted(fake_host.root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != "cmdline":
            path.write_bytes(path.read_bytes() + b"\x00")
    fake_host.write(f"{CPU}/nohz_full", b"\x00\n")

    padded = topology.read(fake_host.paths)

    assert padded.problems == {}
    assert padded.cpus == clean.cpus and padded.nodes == clean.nodes and padded.online == clean.online
    assert padded.isolation.sys_nohz_full == R()


# --------------------------------------------------------------------------------------------------- old kernels
def test_a_kernel_without_cpu_online_takes_each_cpus_online_flag(fake_host):
    """16em64t-4s2c2t-offlines: no cpu/online; offline CPUs read cpuN/online 0, the boot CPU has no such file."""
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1, offline=(2,))
    for name in ("online", "present", "possible", "offline"):
        fake_host.remove(f"{CPU}/{name}")

    result = topology.read(fake_host.paths)

    assert result.online == R({0, 1, 3})
    assert result.cpus[2].online is False
    assert result.problems == {}


def test_node_cpus_come_from_cpumap_then_from_cpu_links_on_old_kernels(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    for node in (0, 1):
        fake_host.remove(f"{NODE}/node{node}/cpulist")
    fake_host.remove(f"{NODE}/node1/cpumap")
    for cpu in layout.node_cpus(1):
        fake_host.symlink(f"{NODE}/node1/cpu{cpu}", f"../../cpu/cpu{cpu}")

    result = topology.read(fake_host.paths)

    assert {node: result.nodes[node].cpus for node in (0, 1)} == {0: layout.node_cpus(0), 1: layout.node_cpus(1)}
    assert all(result.cpus[cpu].numa_node == layout.node_of[cpu] for cpu in layout.online)


def test_an_old_cpumap_that_names_offline_cpus_gives_the_node_its_online_cpus_only(fake_host):
    layout = add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1, offline=(3,))
    fake_host.remove(f"{NODE}/node0/cpulist")
    fake_host.write(f"{NODE}/node0/cpumap", "00000000,0000000f")

    assert topology.read(fake_host.paths).nodes[0].cpus == layout.online


def test_siblings_come_from_the_mask_when_the_list_is_missing(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=2, numbering="packed")
    for cpu in range(4):
        fake_host.remove(f"{CPU}/cpu{cpu}/topology/thread_siblings_list")
        fake_host.write(f"{CPU}/cpu{cpu}/topology/thread_siblings", "3" if cpu < 2 else "c")

    result = topology.read(fake_host.paths)

    assert [result.cpus[cpu].siblings for cpu in range(4)] == [R({0, 1}), R({0, 1}), R({2, 3}), R({2, 3})]


# --------------------------------------------------------------------------------------------------- firmware
def overlapping(host: FakeHost) -> None:
    """Every node's cpulist (and cpumap) claims every CPU: the known buggy-SRAT case."""
    add_topology(host, sockets=2, cores_per_socket=2, threads_per_core=2)
    for node in (0, 1):
        host.write(f"{NODE}/node{node}/cpulist", "0-7")
        host.write(f"{NODE}/node{node}/cpumap", "ff")


def test_a_cpu_two_nodes_claim_belongs_to_the_lowest_and_the_listing_is_kept(fake_host):
    overlapping(fake_host)

    result = topology.read(fake_host.paths)

    assert {cpu.id: cpu.numa_node for cpu in result.cpus.values()} == dict.fromkeys(range(8), 0)
    assert result.nodes[0].cpus == R(range(8)) and result.nodes[0].listed_cpus is None
    assert result.nodes[1].cpus == R() and result.nodes[1].claimed_cpus == R(range(8))


def test_an_online_cpu_in_no_node_has_no_node_not_the_one_its_link_names(fake_host):
    """offline-cpu0-node0: node0 is absent but its CPUs are online and keep their cpuN/node0 links."""
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    node0 = topology.read(fake_host.paths).nodes[0].cpus
    fake_host.remove(f"{NODE}/node0")

    result = topology.read(fake_host.paths)

    assert all(result.cpus[cpu].numa_node is None for cpu in node0)
    assert sorted(result.nodes) == [1]


def inconsistencies(host: FakeHost) -> tuple[list[dict[str, str]], list[str]]:
    snapshot = read_host(host.paths, (topology.SOURCE, gpus_sysfs.SOURCE))
    evaluation = evaluate(snapshot, REFERENCE, [NUMA_TOPOLOGY_INCONSISTENT])
    return [dict(f.labels) for f in evaluation.findings], [n.reason for n in evaluation.not_evaluated]


def test_overlapping_cpulists_fire_once_per_higher_node(fake_host):
    overlapping(fake_host)

    found, _ = inconsistencies(fake_host)

    assert found == [{"reason": "overlapping_cpulists", "numa_node": "1", "cpus": "0-7"}]


def test_an_online_cpu_in_no_node_fires(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    fake_host.write(f"{NODE}/node1/cpulist", "")
    fake_host.write(f"{NODE}/node1/cpumap", "0")

    found, _ = inconsistencies(fake_host)

    assert found == [{"reason": "cpu_without_node", "cpus": format_cpulist(layout.node_cpus(1))}]


def test_a_kernel_without_numa_puts_every_cpu_in_node_0_and_is_consistent(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1, numa=False)

    assert inconsistencies(fake_host) == ([], [])


def test_an_asymmetric_or_short_distance_table_fires(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    fake_host.write(f"{NODE}/node0/distance", "10 21")
    fake_host.write(f"{NODE}/node1/distance", "31 10")

    found, _ = inconsistencies(fake_host)
    assert found == [{"reason": "distance_table"}]

    fake_host.write(f"{NODE}/node1/distance", "21")
    snapshot = read_host(fake_host.paths, (topology.SOURCE,))
    (finding,) = evaluate(snapshot, REFERENCE, [NUMA_TOPOLOGY_INCONSISTENT]).findings
    assert "node1/distance has 1 entries for 2 nodes" in finding.message


def test_an_unreadable_distance_table_on_an_otherwise_consistent_map_is_not_evaluated(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    fake_host.write(f"{NODE}/node1/distance", "21 ten")

    found, reasons = inconsistencies(fake_host)

    assert found == []
    assert reasons == [f"{fake_host.path(NODE)}/node1/distance: expected decimal distances, got '21 ten'"]


def test_a_gpu_whose_numa_node_and_local_cpulist_disagree_fires(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus=layout.node_cpus(0))
    add_gpu(fake_host, "0000:98:00.0", numa_node=0, local_cpus=layout.node_cpus(1))  # numa_node written by hand

    found, _ = inconsistencies(fake_host)

    assert found == [{"reason": "gpu_locality", "gpu": "0000:98:00.0", "numa_node": "0"}]


def test_the_reference_node_is_consistent(fake_host):
    node = reference_node(fake_host)
    assert len(GPUS) >= 2

    evaluation = evaluate(read_host(node.paths, SOURCES), REFERENCE)

    assert [f for f in evaluation.findings if f.check == "numa_topology_inconsistent"] == []
    assert "numa_topology_inconsistent" not in {n.check for n in evaluation.not_evaluated}
