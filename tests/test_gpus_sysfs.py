"""The GPU sysfs source: NVIDIA GPUs on the PCI bus and their NUMA locality (numawatch.sources.gpus_sysfs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakehost.gpus import CLASS_AUDIO, CLASS_BRIDGE_OTHER, CLASS_ETHERNET, CLASS_VGA, add_gpu, add_pci_device, fake_uuid
from fakehost.topology import add_topology
from numawatch.cpuset import parse_cpulist
from numawatch.errors import SourceUnavailable
from numawatch.host import HostReader
from numawatch.paths import Paths
from numawatch.sources import gpus_sysfs
from numawatch.sources.gpus_sysfs import (
    is_gpu_class,
    parse_class,
    parse_numa_node,
    parse_nvidia_information,
    pci_sort_key,
)

INFORMATION = """Model: \t\t NVIDIA H100 80GB HBM3
IRQ:   \t\t 137
GPU UUID: \t GPU-5c3b2f1e-8d7a-4b6c-9e0f-1a2b3c4d5e6f
Video BIOS: \t 96.00.74.00.0d
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t 0000:18:00.0
Device Minor: \t 0
GPU Excluded:\t No
"""


# --------------------------------------------------------------------------------------------------- parsers
@pytest.mark.parametrize(("text", "expected"), [("0\n", 0), ("3", 3), (" 1 \n", 1), ("-1\n", None)])
def test_parse_numa_node_reads_a_node_or_unknown(text, expected):
    assert parse_numa_node(text) == expected


@pytest.mark.parametrize("text", ["", "x", "0x1", "-2", "1.0", "node0"])
def test_parse_numa_node_rejects_garbage(text):
    with pytest.raises(ValueError, match="NUMA node"):
        parse_numa_node(text)


def test_parse_class_reads_the_24_bit_class():
    assert parse_class("0x030200\n") == 0x030200
    assert parse_class("0X030000") == 0x030000


@pytest.mark.parametrize("text", ["", "030200", "0x", "0xzz0200", "class"])
def test_parse_class_rejects_garbage(text):
    with pytest.raises(ValueError, match="PCI class"):
        parse_class(text)


@pytest.mark.parametrize(
    ("code", "gpu"),
    [(0x030200, True), (0x030000, True), (0x030201, True), (0x040300, False), (0x068000, False), (0x020000, False)],
)
def test_is_gpu_class_keeps_vga_and_3d_controllers(code, gpu):
    assert is_gpu_class(code) is gpu


def test_parse_nvidia_information_reads_name_value_lines():
    info = parse_nvidia_information(INFORMATION)
    assert info["Model"] == "NVIDIA H100 80GB HBM3"
    assert info["GPU UUID"] == "GPU-5c3b2f1e-8d7a-4b6c-9e0f-1a2b3c4d5e6f"
    assert info["Bus Location"] == "0000:18:00.0"
    assert info["Device Minor"] == "0"


def test_parse_nvidia_information_ignores_lines_without_a_colon_and_survives_truncation():
    assert parse_nvidia_information("garbage\nModel: \t A100\nGPU UU") == {"Model": "A100"}
    assert parse_nvidia_information("") == {}


def test_pci_sort_key_orders_numerically_including_long_vmd_domains():
    addresses = ["10000:01:00.0", "0000:b8:00.0", "0000:18:00.1", "0000:18:00.0", "0000:1a:00.0"]
    assert sorted(addresses, key=pci_sort_key) == [
        "0000:18:00.0",
        "0000:18:00.1",
        "0000:1a:00.0",
        "0000:b8:00.0",
        "10000:01:00.0",
    ]


# --------------------------------------------------------------------------------------------------- fake hosts
@pytest.fixture
def gpu_host(fake_host):
    """A 2-socket host with 4 GPUs (two per socket, added out of order), a NIC and NVIDIA's non-GPU functions."""
    layout = add_topology(fake_host, sockets=2, cores_per_socket=8, threads_per_core=2)
    add_gpu(fake_host, "0000:9a:00.0", numa_node=1, local_cpus=layout.node_cpus(1))
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus=layout.node_cpus(0))
    add_gpu(fake_host, "0000:2a:00.0", numa_node=0, local_cpus=layout.node_cpus(0), model="NVIDIA H200")
    add_gpu(fake_host, "0000:ab:00.0", numa_node=1, local_cpus=layout.node_cpus(1))
    add_pci_device(
        fake_host, "0000:19:00.0", vendor_id="0x15b3", device_id="0x1021", class_code=CLASS_ETHERNET, numa_node=0,
        local_cpus=layout.node_cpus(0),
    )
    add_pci_device(fake_host, "0000:9a:00.1", vendor_id="0x10de", device_id="0x22ba", class_code=CLASS_AUDIO)
    add_pci_device(fake_host, "0000:07:00.0", vendor_id="0x10de", device_id="0x22a3", class_code=CLASS_BRIDGE_OTHER)
    return fake_host, layout


def test_reads_nvidia_gpus_sorted_by_pci_address(gpu_host):
    host, layout = gpu_host
    inventory = gpus_sysfs.read(host.paths)
    assert [gpu.pci_address for gpu in inventory.gpus] == [
        "0000:18:00.0",
        "0000:2a:00.0",
        "0000:9a:00.0",
        "0000:ab:00.0",
    ]
    first = inventory.gpus[0]
    assert first.numa_node == 0
    assert first.local_cpus == layout.node_cpus(0)
    assert (first.vendor_id, first.device_id, first.class_code) == ("0x10de", "0x2330", "0x030200")
    assert first.uuid == fake_uuid("0000:18:00.0")
    assert first.model == "NVIDIA H100 80GB HBM3"
    assert inventory.gpus[1].model == "NVIDIA H200"
    assert [gpu.numa_node for gpu in inventory.gpus] == [0, 0, 1, 1]


def test_nics_and_nvidia_audio_and_nvswitch_functions_are_not_gpus(gpu_host):
    host, _ = gpu_host
    addresses = {gpu.pci_address for gpu in gpus_sysfs.read(host.paths).gpus}
    assert not addresses & {"0000:19:00.0", "0000:9a:00.1", "0000:07:00.0"}


def test_by_uuid_finds_a_gpu(gpu_host):
    host, _ = gpu_host
    inventory = gpus_sysfs.read(host.paths)
    assert inventory.by_uuid(fake_uuid("0000:ab:00.0")).pci_address == "0000:ab:00.0"
    assert inventory.by_uuid("GPU-nope") is None


def test_a_gpu_without_numa_topology_has_an_unknown_node(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=None, local_cpus="0-63")
    assert fake_host.path("sys/devices/pci0000:18/0000:18:00.0/numa_node").read_text() == "-1\n"
    gpu = gpus_sysfs.read(fake_host.paths).gpus[0]
    assert gpu.numa_node is None
    assert gpu.local_cpus == parse_cpulist("0-63")


def test_a_vga_class_gpu_is_kept(fake_host):
    add_gpu(fake_host, "0000:01:00.0", numa_node=0, local_cpus="0-3", class_code=CLASS_VGA, device_id="0x2684")
    gpu = gpus_sysfs.read(fake_host.paths).gpus[0]
    assert (gpu.class_code, gpu.device_id) == ("0x030000", "0x2684")


def test_without_the_nvidia_driver_uuid_and_model_are_unknown(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7", nvidia_proc=False)
    gpu = gpus_sysfs.read(fake_host.paths).gpus[0]
    assert (gpu.uuid, gpu.model) == (None, None)
    assert gpu.numa_node == 0


def test_an_explicit_uuid_is_read_back(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7", uuid="GPU-11111111-2222-3333-4444-555555555555")
    assert gpus_sysfs.read(fake_host.paths).gpus[0].uuid == "GPU-11111111-2222-3333-4444-555555555555"


def test_a_host_without_nvidia_gpus_is_an_empty_inventory(fake_host):
    add_pci_device(fake_host, "0000:00:00.0", vendor_id="0x8086", device_id="0x09a2", class_code="0x060000")
    add_pci_device(fake_host, "0000:19:00.0", vendor_id="0x15b3", device_id="0x1021", class_code=CLASS_ETHERNET)
    inventory = gpus_sysfs.read(fake_host.paths)
    assert inventory.gpus == ()


def test_without_a_pci_bus_directory_the_source_is_unavailable(fake_host):
    with pytest.raises(SourceUnavailable, match="bus/pci/devices"):
        gpus_sysfs.read(fake_host.paths)
    host = HostReader(fake_host.paths, [gpus_sysfs.SOURCE]).read()
    assert not host.statuses["gpus_sysfs"].up
    assert "bus/pci/devices" in host.down_reason("gpus_sysfs")


def test_a_missing_local_cpulist_is_unknown(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus=None)
    assert gpus_sysfs.read(fake_host.paths).gpus[0].local_cpus is None


@pytest.mark.parametrize(
    ("attribute", "content", "what"),
    [
        ("numa_node", "zero", "NUMA node"),
        ("local_cpulist", "0-3,x", "bad element"),
    ],
)
def test_garbage_in_a_gpu_attribute_leaves_that_value_unknown_and_names_the_file(fake_host, attribute, content, what):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    rel = f"sys/devices/pci0000:18/0000:18:00.0/{attribute}"
    fake_host.write(rel, content)

    (gpu,) = gpus_sysfs.read(fake_host.paths).gpus

    assert set(gpu.problems) == {attribute}
    assert gpu.problems[attribute].startswith(f"{fake_host.path(rel)}: ") and what in gpu.problems[attribute]
    assert (gpu.numa_node, gpu.local_cpus) == ((None, frozenset(range(8))) if attribute == "numa_node" else (0, None))
    assert HostReader(fake_host.paths, [gpus_sysfs.SOURCE]).read().statuses["gpus_sysfs"].up


def test_a_function_whose_class_is_garbage_is_left_out_and_named(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    add_gpu(fake_host, "0000:98:00.0", numa_node=1, local_cpus="8-15")
    rel = "sys/devices/pci0000:18/0000:18:00.0/class"
    fake_host.write(rel, "3d-controller")

    inventory = gpus_sysfs.read(fake_host.paths)

    assert [gpu.pci_address for gpu in inventory.gpus] == ["0000:98:00.0"]
    (problem,) = inventory.problems
    assert problem.startswith(f"{fake_host.path(rel)}: ") and "PCI class" in problem


def test_a_hostile_absolute_link_is_read_inside_the_host_root(fake_host):
    """An absolute link to /sys/devices/... in a captured tree is read under the root, never from this machine."""
    add_gpu(fake_host, "0000:00:00.0", numa_node=1, local_cpus="8-15", model="Captured GPU")
    # replace the kernel's relative link by an absolute one, as a careless capture tool would write it
    fake_host.symlink("sys/bus/pci/devices/0000:00:00.0", "/sys/devices/pci0000:00/0000:00:00.0")
    gpu = gpus_sysfs.read(fake_host.paths).gpus[0]
    assert (gpu.pci_address, gpu.numa_node, gpu.model) == ("0000:00:00.0", 1, "Captured GPU")


def test_an_absolute_link_to_a_device_missing_from_the_root_is_skipped(fake_host):
    """/sys/devices/pci0000:00/0000:00:00.0 may exist on this machine; inside the root it does not: no device."""
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    fake_host.symlink("sys/bus/pci/devices/0000:00:00.0", "/sys/devices/pci0000:00/0000:00:00.0")
    assert [gpu.pci_address for gpu in gpus_sysfs.read(fake_host.paths).gpus] == ["0000:18:00.0"]


def test_links_that_climb_past_the_root_stay_inside_it(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    fake_host.symlink(
        "sys/bus/pci/devices/0000:18:00.0", "../../../../../../../../../../../sys/devices/pci0000:18/0000:18:00.0"
    )
    assert gpus_sysfs.read(fake_host.paths).gpus[0].numa_node == 0


def test_dangling_and_looping_links_are_skipped(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    fake_host.symlink("sys/bus/pci/devices/0000:19:00.0", "../../../devices/pci0000:19/0000:19:00.0")  # unplugged
    fake_host.symlink("sys/bus/pci/devices/0000:1a:00.0", "0000:1a:00.0")  # points at itself
    assert [gpu.pci_address for gpu in gpus_sysfs.read(fake_host.paths).gpus] == ["0000:18:00.0"]


def test_a_sysfs_override_outside_the_root_is_read(tmp_path, fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    paths = Paths.from_root(tmp_path / "empty-root", sysfs=fake_host.path("sys"), procfs=fake_host.path("proc"))
    gpu = gpus_sysfs.read(paths).gpus[0]
    assert gpu.numa_node == 0
    assert gpu.uuid == fake_uuid("0000:18:00.0")


def test_fake_gpu_link_is_relative_as_the_kernel_makes_it(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    target = os.readlink(fake_host.path("sys/bus/pci/devices/0000:18:00.0"))
    assert target == "../../../devices/pci0000:18/0000:18:00.0"


def test_realkernel_4node_fixture_has_no_pci_bus_links(realkernel_root):
    """The capture has no symlinks (see its README), so there is no sys/bus/pci/devices to walk."""
    with pytest.raises(SourceUnavailable):
        gpus_sysfs.read(Paths.from_root(realkernel_root))


@pytest.mark.realhost
def test_reads_this_machines_pci_bus_without_error():
    paths = Paths.from_root("/")
    if not (paths.sysfs / "bus/pci/devices").is_dir():
        pytest.skip("this machine has no /sys/bus/pci/devices")
    inventory = gpus_sysfs.read(paths)
    bus = Path("/sys/bus/pci/devices")
    nvidia = [
        entry.name
        for entry in bus.iterdir()
        if (entry / "vendor").read_text().strip() == "0x10de"
        and int((entry / "class").read_text(), 16) >> 8 in (0x0300, 0x0302)
    ]
    assert [gpu.pci_address for gpu in inventory.gpus] == sorted(nvidia, key=pci_sort_key)
    for gpu in inventory.gpus:
        assert gpu.numa_node is None or gpu.numa_node >= 0


def test_a_warm_reader_reuses_the_inventory_until_a_pci_function_or_the_driver_comes_or_goes(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7", nvidia_proc=False)
    reader = HostReader(fake_host.paths, [gpus_sysfs.SOURCE])
    assert reader.read().gpus.gpus[0].uuid is None
    again = reader.read()
    assert again.statuses["gpus_sysfs"].cached
    assert [gpu.pci_address for gpu in again.gpus.gpus] == ["0000:18:00.0"]

    add_gpu(fake_host, "0000:9a:00.0", numa_node=1, local_cpus="8-15")  # hotplug, with the driver's entry
    after_hotplug = reader.read()
    assert not after_hotplug.statuses["gpus_sysfs"].cached
    assert [gpu.pci_address for gpu in after_hotplug.gpus.gpus] == ["0000:18:00.0", "0000:9a:00.0"]

    fake_host.remove("sys/bus/pci/devices/0000:9a:00.0")  # unplugged
    assert [gpu.pci_address for gpu in reader.read().gpus.gpus] == ["0000:18:00.0"]


def test_the_fingerprint_is_the_pci_and_driver_listings_and_the_gpus_numa_nodes(gpu_host):
    host, _ = gpu_host
    before = gpus_sysfs.fingerprint(host.paths)
    assert "0000:18:00.0" in before[0] and "0000:18:00.0" in dict(before[1])
    host.remove("proc/driver/nvidia/gpus/0000:18:00.0")  # the driver's entry goes (module unloaded)
    assert gpus_sysfs.fingerprint(host.paths) != before


def test_a_numa_node_rewritten_by_an_administrator_shows_at_the_next_warm_reading(fake_host):
    # echo 0 > .../numa_node is the usual fix for firmware that reports -1 (gpu_numa_unknown): it must clear at once.
    add_gpu(fake_host, "0000:18:00.0", numa_node=-1, local_cpus="0-7")
    reader = HostReader(fake_host.paths, [gpus_sysfs.SOURCE])
    assert reader.read().gpus.gpus[0].numa_node is None
    assert reader.read().statuses["gpus_sysfs"].cached

    fake_host.write("sys/bus/pci/devices/0000:18:00.0/numa_node", "0\n")
    fixed = reader.read()
    assert not fixed.statuses["gpus_sysfs"].cached
    assert fixed.gpus.gpus[0].numa_node == 0


def test_a_gpu_without_numa_node_and_only_a_local_cpus_mask_is_found_on_the_node_its_cpus_are(fake_host):
    # POWER9 with NVLink-attached GPUs: the PCI function has no numa_node file and no local_cpulist, only the
    # local_cpus mask; the GPU's memory is a CPU-less NUMA node of its own.
    from numawatch.checks import evaluate
    from numawatch.intent import REFERENCE

    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    fake_host.write("sys/devices/system/node/node8/cpulist", "\n")
    fake_host.write("sys/devices/system/node/node8/distance", "80 80 10\n")
    paths = Paths.from_root(fake_host.root)
    node1 = HostReader(paths).read().topology.nodes[1].cpus
    gpu = add_gpu(fake_host, "0035:03:00.0", numa_node=None, local_cpus=sorted(node1))
    device = fake_host.path(f"sys/bus/pci/devices/{gpu.pci_address}").resolve()
    (device / "numa_node").unlink()
    (device / "local_cpulist").unlink()
    (device / "local_cpus").write_text(f"{sum(1 << cpu for cpu in node1):08x}\n")

    inventory = gpus_sysfs.read(paths)
    host = HostReader(paths).read()

    [found] = inventory.gpus
    assert found.pci_address == "0035:03:00.0" and found.local_cpus == node1
    assert found.numa_node is None and found.problems["numa_node"] == f"{device}/numa_node: missing"
    assert found.cpu_node(host.topology) == 1
    # Unknown is unknown: never "reports numa_node -1".
    evaluation = evaluate(host, REFERENCE)
    assert not [f for f in evaluation.findings if f.check == "gpu_numa_unknown"]
    reasons = {item.check: item.reason for item in evaluation.not_evaluated}
    assert reasons["gpu_numa_unknown"] == f"{device}/numa_node: missing"
