"""numawatch's PCI hierarchy agrees with hwloc's on every corpus tree with PCI devices and on the fake hosts.

tests/pci_oracle.py says what each side reads (numawatch: the nesting of the resolved sys/bus/pci/devices links;
hwloc: the bridges' bus numbers in their config space) and the two rules by which hwloc sees less than numawatch
(a bridge without config, a bridge with invalid bus numbers), each counted so a tree is never compared on nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from corpus import corpus_root, oracle_tree_names
from fakehost import FakeHost
from fakehost.gpus import CLASS_ETHERNET, CLASS_PCI_BRIDGE, add_gpu, add_pci_device, add_rdma_nic
from fakehost.reference import reference_node
from fakehost.topology import add_topology
from hwloc_oracle import LSTOPO, lstopo_available
from pci_oracle import compare_tree, hwloc_places, numawatch_pci

# Every corpus tree that has PCI devices, with how many functions hwloc can place (compared), how many of them sit
# behind a bridge whose config the capture lacks (cut), and how many bridges hwloc leaves out (dropped). Written from
# the trees themselves (ls sys/bus/pci/devices | wc -l, and their READMEs), not from numawatch's reading.
PCI_TREES = {
    "32em64t-2n8c+dax+nvme+mic+dimms": (136, 0, 1),  # 00:11.0 is a root port with bus numbers 0-0-0
    "40intel64-2g2n4c+pcilocality": (37, 0, 0),
    "fakepcilocalities": (30, 0, 0),
    "realkernel-6.12-isolated-core-offline": (5, 0, 0),
    "realkernel-6.12-systemd-noisolation": (8, 1, 0),  # QEMU's pxb bridge 20:00.0 was captured without config
    "realkernel-rt-cgroupv1-smtoff": (5, 0, 0),
}


@pytest.fixture(scope="module")
def lstopo() -> str:
    if not lstopo_available():
        pytest.fail(f"{LSTOPO} is not installed: apt-get install hwloc (tests/install-and-run.sh does)")
    return LSTOPO


def has_pci(root: Path) -> bool:
    devices = root / "sys/bus/pci/devices"
    return devices.is_dir() and any(devices.iterdir())


def test_the_trees_with_pci_devices_are_the_ones_listed():
    # hwloc cannot read the peer trees (no CPU topology files), so they are no oracle for their PCI devices either
    assert {name for name in oracle_tree_names() if has_pci(corpus_root(name))} == set(PCI_TREES)


@pytest.mark.parametrize("name", sorted(PCI_TREES))
def test_corpus_tree_pci_hierarchy_reads_as_hwloc_reads_it(lstopo, name):
    result = compare_tree(corpus_root(name))

    assert result.equal, result.differences[:5]
    assert (result.compared, result.cut, result.dropped) == PCI_TREES[name]


# --------------------------------------------------------------------------------------------------- fake trees
def bridge(host: FakeHost, address: str, parent: str | None, buses: tuple[int, int, int], near: dict) -> str:
    """A PCIe switch port (or root port) at ``address`` behind ``parent``; returns its directory."""
    directory = add_pci_device(host, address, vendor_id="0x1000", device_id="0xc030", class_code=CLASS_PCI_BRIDGE,
                               parent=parent, buses=buses, **near)  # fmt: skip
    return str(directory.relative_to(host.root))


def oddities(host: FakeHost) -> FakeHost:
    """What the reference node lacks: two levels of switches, an SR-IOV VF, a RoCE NIC, an InfiniBand HCA without its
    driver, a function with several functions on one card, a bridge with no bus assigned and a second PCI domain."""
    add_topology(host, sockets=2, cores_per_socket=2, threads_per_core=1)
    near = {"numa_node": 0, "local_cpus": "0-1"}
    parent: str | None = None
    # root port 30:01.0, switch 31:00.0 with ports 32:00.0 (to a second switch 33:00.0/34:00.0) and 32:01.0
    for address, buses in (("0000:30:01.0", (0x30, 0x31, 0x36)), ("0000:31:00.0", (0x31, 0x32, 0x36))):
        parent = bridge(host, address, parent, buses, near)
    switch = parent
    inner = bridge(host, "0000:32:00.0", switch, (0x32, 0x33, 0x35), near)
    for address, buses in (("0000:33:00.0", (0x33, 0x34, 0x35)), ("0000:34:00.0", (0x34, 0x35, 0x35))):
        inner = bridge(host, address, inner, buses, near)
    add_gpu(host, "0000:35:00.0", numa_node=0, local_cpus="0-1", parent=inner)
    top = {"0000:32:01.0": bridge(host, "0000:32:01.0", switch, (0x32, 0x36, 0x36), near)}
    add_rdma_nic(host, "0000:36:00.0", name="mlx5_0", numa_node=0, local_cpus="0-1", parent=top["0000:32:01.0"],
                 class_code=CLASS_ETHERNET)
    add_rdma_nic(host, "0000:36:00.1", name="mlx5_1", numa_node=0, local_cpus="0-1", parent=top["0000:32:01.0"],
                 class_code=CLASS_ETHERNET, virtual_of="0000:36:00.0")
    add_pci_device(host, "0000:30:1c.0", vendor_id="0x8086", device_id="0x7a38", class_code=CLASS_PCI_BRIDGE,
                   buses=(0, 0, 0))  # a root port the firmware gave no bus: hwloc leaves it out
    add_pci_device(host, "0001:80:01.0", vendor_id="0x8086", device_id="0x352a", class_code=CLASS_PCI_BRIDGE,
                   buses=(0x80, 0x81, 0x81), numa_node=1, local_cpus="2-3")
    add_rdma_nic(host, "0001:81:00.0", name=None, numa_node=1, local_cpus="2-3",
                 parent="sys/devices/pci0001:80/0001:80:01.0")  # fmt: skip
    return host


@pytest.mark.parametrize("build", [reference_node, oddities], ids=["reference-node", "oddities"])
def test_fake_tree_pci_hierarchy_reads_as_hwloc_reads_it(lstopo, fake_host, build):
    build(fake_host)

    result = compare_tree(fake_host.root)

    assert result.equal, result.differences[:5]
    assert result.cut == 0 and result.compared >= 10
    assert result.dropped == (1 if build is oddities else 0)


def test_a_bridge_without_config_is_compared_as_hwloc_sees_it(lstopo, fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=1, threads_per_core=1)
    add_pci_device(fake_host, "0000:20:00.0", vendor_id="0x1b36", device_id="0x0001", class_code=CLASS_PCI_BRIDGE,
                   config=False)  # fmt: skip
    add_pci_device(fake_host, "0000:21:01.0", vendor_id="0x1b36", device_id="0x0010", class_code="0x010802",
                   parent="sys/devices/pci0000:20/0000:20:00.0", config=False)  # fmt: skip

    result = compare_tree(fake_host.root)

    assert result.equal and result.cut == 1
    assert numawatch_pci(fake_host.root).functions["0000:21:01.0"].parents == ("0000:20:00.0",)


def test_the_comparison_finds_a_function_placed_where_its_bus_is_not(lstopo, fake_host, tmp_path):
    """Guards the tests above: a link that puts the NIC under the other switch must be a difference."""
    node = reference_node(fake_host)
    copy = tmp_path / "copy"
    shutil.copytree(node.host.root, copy, symlinks=True)
    wrong = "../../../devices/pci0000:27/0000:27:01.0/0000:28:00.0/0000:29:01.0/0000:19:00.0"
    (copy / "sys/bus/pci/devices/0000:19:00.0").unlink()
    (copy / "sys/bus/pci/devices/0000:19:00.0").symlink_to(wrong)
    moved = copy / "sys/devices/pci0000:27/0000:27:01.0/0000:28:00.0/0000:29:01.0/0000:19:00.0"
    shutil.copytree(copy / "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0", moved,
                    symlinks=True)  # fmt: skip

    result = compare_tree(copy)

    assert [d.split(":", 3)[:3] for d in result.differences] == [["0000", "19", "00.0"]]
    assert "0000:29:01.0" in result.differences[0]


def test_hwloc_places_reads_host_bridges_and_chains():
    xml = (
        '<topology><object type="Machine"><object type="Bridge" bridge_type="0-1" bridge_pci="0000:[15-19]">'
        '<object type="Bridge" bridge_type="1-1" bridge_pci="0000:[16-19]" pci_busid="0000:15:01.0">'
        '<object type="PCIDev" pci_busid="0000:16:00.0"/></object></object></object></topology>'
    )
    places = hwloc_places(xml)
    assert places["0000:16:00.0"].host_bridge == "0000:15"
    assert places["0000:16:00.0"].parents == ("0000:15:01.0",)
    assert places["0000:15:01.0"].parents == ()


def test_two_switches_apart_is_pxb_and_the_virtual_function_is_left_out(fake_host):
    from numawatch.gpupaths import gpu_nic_paths
    from numawatch.host import read_host

    oddities(fake_host)
    (gpu,) = gpu_nic_paths(read_host(fake_host.paths)) or ()

    assert [(nic.address, level) for nic, level in gpu.paths] == [("0000:36:00.0", "PXB"), ("0001:81:00.0", "SYS")]
