"""The PCI hierarchy source, nvidia-smi's path levels, gpu_nic_path firing and clean, numawatch_gpu_nic_path_info."""

from __future__ import annotations

import os

import pytest
from fakehost import FakeHost
from fakehost.gpus import (
    CLASS_ETHERNET,
    add_gpu,
    add_pci_device,
    add_pcie_switch,
    add_rdma_nic,
)
from fakehost.reference import GPUS, NODE_CPUS, SLOTS, reference_node
from fakehost.topology import add_topology
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.checks.gpu_nic import GPU_NIC_PATH
from numawatch.gpupaths import pcie_level
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.intentfile import parse_intent
from numawatch.model.pci import PciFunction
from numawatch.sources import pci_topology
from prometheus_client.parser import text_string_to_metric_families


# --------------------------------------------------------------------------------------------------- places
@pytest.mark.parametrize(
    ("relative", "address", "expected"),
    [
        ("pci0000:17/0000:17:01.0/0000:18:00.0", "0000:18:00.0", ("pci0000:17", ("0000:17:01.0",))),
        ("pci0000:00/0000:00:1f.2", "0000:00:1f.2", ("pci0000:00", ())),
        # Hyper-V: VMBus parents before the host bridge are not PCI
        ("LNXSYSTM:00/LNXSYBUS:00/PNP0A03:00/device:07/VMBUS:01/47505500-0001/pci0001:00/0001:00:00.0",
         "0001:00:00.0", ("pci0001:00", ())),
        # Intel VMD: a host bridge of its own under the VMD function
        ("pci0000:00/0000:00:0e.0/pci10000:00/10000:00:02.0/10000:01:00.0", "10000:01:00.0",
         ("pci0000:00", ("0000:00:0e.0", "pci10000:00", "10000:00:02.0"))),
    ],
)  # fmt: skip
def test_a_functions_place_comes_from_its_path_under_sys_devices(relative, address, expected):
    assert pci_topology.place(relative, address) == expected


@pytest.mark.parametrize(
    ("relative", "address"),
    [
        ("pci0000:17/0000:17:01.0", "0000:18:00.0"),  # the link leads to another function
        ("platform/serial8250/0000:18:00.0", "0000:18:00.0"),  # no host bridge on the way
        ("pci0000:17/usb1/0000:18:00.0", "0000:18:00.0"),  # something that is not a PCI function in between
        ("", "0000:18:00.0"),
    ],
)
def test_a_path_that_is_no_pci_functions_place_is_refused(relative, address):
    assert pci_topology.place(relative, address) is None


def fn(address: str, root: str, *parents: str) -> PciFunction:
    return PciFunction(address=address, root=root, parents=parents, class_code=None)


RP, USP = "0000:15:01.0", "0000:16:00.0"


@pytest.mark.parametrize(
    ("a", "b", "nodes", "one_node", "level"),
    [
        (fn("g", "pci0000:15", RP, USP, "0000:17:00.0"), fn("n", "pci0000:15", RP, USP, "0000:17:01.0"), (0, 0),
         False, "PIX"),  # two downstream ports of one switch
        (fn("g", "pci0000:15", RP), fn("n", "pci0000:15", RP), (0, 0), False, "PIX"),  # two functions of one card
        (fn("g", "pci0000:15", RP, USP, "0000:17:00.0"),
         fn("n", "pci0000:15", RP, USP, "0000:17:01.0", "0000:19:00.0", "0000:1a:00.0"), (0, 0), False, "PXB"),
        (fn("g", "pci0000:15", RP, USP, "0000:17:00.0"), fn("n", "pci0000:15", "0000:15:02.0"), (0, 0), False, "PHB"),
        (fn("g", "pci0000:15", RP), fn("n", "pci0000:27", "0000:27:01.0"), (0, 0), False, "NODE"),
        (fn("g", "pci0000:15", RP), fn("n", "pci0000:97", "0000:97:01.0"), (0, 1), False, "SYS"),
        (fn("g", "pci0000:15", RP), fn("n", "pci0000:97", "0000:97:01.0"), (0, None), False, None),
        (fn("g", "pci0000:15", RP), fn("n", "pci0000:97", "0000:97:01.0"), (None, None), True, "NODE"),
    ],
)  # fmt: skip
def test_nvidia_smi_levels_from_the_common_ancestors(a, b, nodes, one_node, level):
    assert pcie_level(a, b, *nodes, one_node) == level
    assert pcie_level(b, a, *reversed(nodes), one_node) == level


# --------------------------------------------------------------------------------------------------- the source
def test_the_reference_nodes_hierarchy_and_nics(fake_host):
    reference_node(fake_host)

    pci = pci_topology.read(fake_host.paths)

    slot = SLOTS[0]
    assert pci.problems == ()
    assert pci.functions[GPUS[0].pci_address].parents == (slot.root_port, slot.upstream, slot.gpu_port)
    assert pci.functions[slot.nic].root == "pci0000:15"
    assert [(nic.address, nic.rdma_devices, nic.numa_node, nic.virtual) for nic in pci.nics] == [
        (s.nic, (s.rdma_device,), gpu.numa_node, False) for s, gpu in zip(SLOTS, GPUS, strict=True)
    ]


def test_roce_nics_nics_without_driver_and_virtual_functions(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add_rdma_nic(fake_host, "0000:31:00.0", name="mlx5_0", numa_node=0, local_cpus="0-1", class_code=CLASS_ETHERNET)
    add_rdma_nic(fake_host, "0000:31:00.2", name="mlx5_2", numa_node=0, local_cpus="0-1", class_code=CLASS_ETHERNET,
                 virtual_of="0000:31:00.0")  # fmt: skip
    add_rdma_nic(fake_host, "0000:41:00.0", name=None, numa_node=None, local_cpus="0-1")  # IB, no driver bound
    add_pci_device(fake_host, "0000:51:00.0", vendor_id="0x8086", device_id="0x1593", class_code=CLASS_ETHERNET)

    pci = pci_topology.read(fake_host.paths)

    assert [(n.address, n.rdma_devices, n.numa_node, n.virtual) for n in pci.nics] == [
        ("0000:31:00.0", ("mlx5_0",), 0, False),
        ("0000:31:00.2", ("mlx5_2",), 0, True),
        ("0000:41:00.0", (), None, False),
    ]  # the plain Ethernet NIC without RDMA is not one


def test_functions_that_cannot_be_placed_or_read_are_named_and_left_out(fake_host):
    add_pci_device(fake_host, "0000:18:00.0", vendor_id="0x10de", device_id="0x2330", class_code="0x030200")
    add_pci_device(fake_host, "0000:19:00.0", vendor_id="0x15b3", device_id="0x1021", class_code="0x020700")
    fake_host.write("sys/devices/pci0000:19/0000:19:00.0/class", "network")
    fake_host.symlink("sys/bus/pci/devices/0000:20:00.0", "../../../devices/platform/thing/0000:20:00.0")
    fake_host.mkdir("sys/devices/platform/thing/0000:20:00.0")
    fake_host.symlink("sys/bus/pci/devices/0000:21:00.0", "0000:21:00.0")  # a loop
    fake_host.mkdir("sys/bus/pci/devices/not-an-address")

    pci = pci_topology.read(fake_host.paths)

    assert sorted(pci.functions) == ["0000:18:00.0", "0000:19:00.0"]
    assert pci.functions["0000:19:00.0"].class_code is None
    assert len(pci.problems) == 4
    assert any("0000:19:00.0/class" in p and "hex PCI class" in p for p in pci.problems)
    assert any("0000:20:00.0: the link does not lead to a PCI function under a host bridge" in p for p in pci.problems)


def test_an_absolute_link_resolves_inside_the_host_root(fake_host):
    add_pci_device(fake_host, "0000:18:00.0", vendor_id="0x10de", device_id="0x2330", class_code="0x030200")
    fake_host.symlink("sys/bus/pci/devices/0000:18:00.0", "/sys/devices/pci0000:18/0000:18:00.0")

    assert pci_topology.read(fake_host.paths).functions["0000:18:00.0"].root == "pci0000:18"


def test_the_fingerprint_reads_an_absolute_rdma_link_inside_the_host_root(fake_host):
    reference_node(fake_host)
    slot = SLOTS[0]
    target = f"/sys/devices/pci0000:15/{slot.root_port}/{slot.upstream}/{slot.nic_port}/{slot.nic}"
    fake_host.symlink(f"sys/class/infiniband/{slot.rdma_device}", f"{target}/infiniband/{slot.rdma_device}")
    fake_host.symlink(f"{target.lstrip('/')}/infiniband/{slot.rdma_device}/device", target)

    _listing, numa = pci_topology.fingerprint(fake_host.paths)

    assert numa[0] == (slot.rdma_device, "0\n")  # the fake's numa_node, not this machine's


def test_the_fingerprint_follows_nics_coming_and_their_numa_node(fake_host):
    reference_node(fake_host)
    before = pci_topology.fingerprint(fake_host.paths)
    fake_host.write(f"sys/bus/pci/devices/{SLOTS[1].nic}/numa_node", "1")
    moved = pci_topology.fingerprint(fake_host.paths)
    add_rdma_nic(fake_host, "0000:c1:00.0", name="mlx5_9", numa_node=1, local_cpus=NODE_CPUS[1])

    assert len({before, moved, pci_topology.fingerprint(fake_host.paths)}) == 3


def test_the_fingerprint_reads_each_numa_node_through_its_link_as_resolving_it_would(fake_host):
    reference_node(fake_host)
    rdma_dir = fake_host.paths.sysfs / "class/infiniband"
    resolved = tuple(
        (name, (fake_host.paths.resolve(rdma_dir / name / "device") / "numa_node").read_text())
        for name in sorted(os.listdir(rdma_dir))
    )
    assert pci_topology.fingerprint(fake_host.paths)[1] == resolved and resolved
    # A link that leads nowhere, or into a loop, is an unknown node (the fingerprint still answers).
    fake_host.symlink("sys/class/infiniband/mlx5_8/device", "../../../devices/pci0000:99/0000:99:00.0")
    fake_host.symlink("sys/class/infiniband/mlx5_9", "mlx5_9")
    _listing, numa = pci_topology.fingerprint(fake_host.paths)
    assert ("mlx5_8", None) in numa and ("mlx5_9", None) in numa


def test_without_the_pci_listing_the_source_is_down(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=1, threads_per_core=1)
    with pytest.raises(pci_topology.SourceUnavailable, match="bus/pci/devices does not exist"):
        pci_topology.read(fake_host.paths)


# --------------------------------------------------------------------------------------------------- the check
def run(node) -> tuple:
    evaluation = evaluate(node.read(), REFERENCE, [GPU_NIC_PATH])
    return evaluation.findings, evaluation.not_evaluated, evaluation.not_applicable


def test_the_reference_node_with_a_nic_under_each_gpus_switch_is_clean(fake_host):
    assert run(reference_node(fake_host)) == ((), (), ())


def test_a_gpu_whose_nic_is_gone_fires_because_the_others_have_theirs(fake_host):
    node = reference_node(fake_host)
    gone = SLOTS[3]
    fake_host.remove(f"sys/bus/pci/devices/{gone.nic}")
    fake_host.remove(f"sys/class/infiniband/{gone.rdma_device}")

    (finding,), _, _ = run(node)

    assert dict(finding.labels) == {
        "gpu": GPUS[3].pci_address, "uuid": GPUS[3].uuid, "value": "NODE", "expected": "PXB",
        "reason": "better_placed_elsewhere",
    }  # fmt: skip
    assert f"nearest RDMA NIC {SLOTS[2].nic} (mlx5_2) only at NODE" in finding.message


def test_gpus_with_no_nic_on_their_socket_fire(fake_host):
    node = reference_node(fake_host)
    for slot in SLOTS[2:]:
        fake_host.remove(f"sys/bus/pci/devices/{slot.nic}")
        fake_host.remove(f"sys/class/infiniband/{slot.rdma_device}")

    findings, _, _ = run(node)

    assert [(f.labels["gpu"], f.labels["value"], f.labels["reason"]) for f in findings] == [
        (GPUS[2].pci_address, "SYS", "no_nic_on_socket"),
        (GPUS[3].pci_address, "SYS", "no_nic_on_socket"),
    ]
    assert "inter-socket link" in findings[0].message


def host_bridge_nics(fake_host: FakeHost) -> None:
    """Two GPUs on root ports of one host bridge per socket, each NIC on a root port of its own: PHB everywhere."""
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    for node, bus in ((0, 0x15), (1, 0x97)):
        cpus = f"{node * 2}-{node * 2 + 1}"
        add_pci_device(fake_host, f"0000:{bus:02x}:01.0", vendor_id="0x8086", device_id="0x352a",
                       class_code="0x060400", numa_node=node, local_cpus=cpus, buses=(bus, bus + 1, bus + 1))
        add_pci_device(fake_host, f"0000:{bus:02x}:02.0", vendor_id="0x8086", device_id="0x352a",
                       class_code="0x060400", numa_node=node, local_cpus=cpus, buses=(bus, bus + 2, bus + 2))
        add_gpu(fake_host, f"0000:{bus + 1:02x}:00.0", numa_node=node, local_cpus=cpus,
                parent=f"sys/devices/pci0000:{bus:02x}/0000:{bus:02x}:01.0")
        add_rdma_nic(fake_host, f"0000:{bus + 2:02x}:00.0", name=f"mlx5_{node}", numa_node=node, local_cpus=cpus,
                     parent=f"sys/devices/pci0000:{bus:02x}/0000:{bus:02x}:02.0")  # fmt: skip


def test_a_platform_whose_nics_all_hang_off_root_ports_is_clean_unless_the_intent_says_pix(fake_host):
    host_bridge_nics(fake_host)
    host = HostReader(fake_host.paths).read()

    assert evaluate(host, REFERENCE, [GPU_NIC_PATH]).findings == ()
    assert evaluate(host, parse_intent("gpus: {maxNicPathLevel: PIX}"), [GPU_NIC_PATH]).findings == ()


def test_the_intent_level_is_the_limit(fake_host):
    node = reference_node(fake_host)
    gone = SLOTS[3]
    fake_host.remove(f"sys/bus/pci/devices/{gone.nic}")
    fake_host.remove(f"sys/class/infiniband/{gone.rdma_device}")
    host = node.read()

    assert evaluate(host, parse_intent("gpus: {maxNicPathLevel: NODE}"), [GPU_NIC_PATH]).findings == ()


def test_no_nic_or_no_gpu_is_not_applicable_and_an_unknown_numa_node_not_evaluated(fake_host):
    host_bridge_nics(fake_host)
    fake_host.remove("sys/bus/pci/devices/0000:17:00.0")
    fake_host.remove("sys/class/infiniband/mlx5_0")
    fake_host.write("sys/devices/pci0000:97/0000:97:02.0/0000:99:00.0/numa_node", "-1")

    evaluation = evaluate(HostReader(fake_host.paths).read(), REFERENCE, [GPU_NIC_PATH])

    assert evaluation.findings == ()
    (item,) = evaluation.not_evaluated
    assert "0000:16:00.0" in item.reason and "NUMA node" in item.reason
    for rel in ("sys/bus/pci/devices/0000:99:00.0", "sys/class/infiniband/mlx5_1"):
        fake_host.remove(rel)
    none = evaluate(HostReader(fake_host.paths).read(), REFERENCE, [GPU_NIC_PATH])
    assert "no RDMA-capable NIC" in none.not_applicable[0].reason


# --------------------------------------------------------------------------------------------------- the metric
def test_the_info_metric_has_every_gpu_and_nic_pair_with_its_level(fake_host):
    node = reference_node(fake_host)
    exposition = metrics.render(evaluate(node.read(), REFERENCE)).decode()
    (family,) = [f for f in text_string_to_metric_families(exposition) if f.name == "numawatch_gpu_nic_path_info"]

    found = {(s.labels["gpu"], s.labels["nic"]): s.labels["level"] for s in family.samples}

    assert len(found) == 16
    assert found[(GPUS[0].pci_address, SLOTS[0].nic)] == "PIX"
    assert found[(GPUS[0].pci_address, SLOTS[1].nic)] == "NODE"
    assert found[(GPUS[0].pci_address, SLOTS[2].nic)] == "SYS"
    assert found[(GPUS[3].pci_address, SLOTS[3].nic)] == "PIX"


def test_a_pcie_switch_puts_its_ports_in_a_chain(fake_host):
    ports = add_pcie_switch(fake_host, "0000:c0:01.0", "0000:c1:00.0", ("0000:c2:00.0", "0000:c2:01.0"),
                            numa_node=0, local_cpus=None)  # fmt: skip
    assert ports["0000:c2:01.0"] == "sys/devices/pci0000:c0/0000:c0:01.0/0000:c1:00.0/0000:c2:01.0"
    config = fake_host.path(f"{ports['0000:c2:01.0']}/config").read_bytes()
    assert (config[0x0E], config[0x18], config[0x19], config[0x1A]) == (1, 0xC2, 0xC4, 0xC4)


def test_no_pci_config_space_is_opened_and_no_cpu_latency_device(fake_host):
    """Reading a function's ``config`` resumes it when runtime PM suspended it (the kernel wakes the device to answer),
    and opening /dev/cpu_dma_latency registers a latency request: the sysfs nesting and attributes are enough."""
    from open_audit import recording

    node = reference_node(fake_host)
    fake_host.write("dev/cpu_dma_latency", b"\0\0\0\0")
    with recording() as opened:
        evaluation = node.evaluate()

    assert evaluation.host.statuses["pci_topology"].up and evaluation.host.statuses["cpuidle"].up
    assert any(path.endswith("/class") for path in opened)  # the recorder works: PCI attributes were read
    assert [path for path in opened if path.endswith(("/config", "cpu_dma_latency"))] == []


@pytest.mark.parametrize(
    ("name", "nics"),
    [
        ("32em64t-2n8c+dax+nvme+mic+dimms", [("0000:82:00.0", ("mlx4_0",), 1)]),  # ConnectX-3, Ethernet class
        ("40intel64-2g2n4c+pcilocality", [("0000:43:00.0", ("qib0",), 2)]),  # QLogic HCA, class 0x0c06
        ("fakepcilocalities", [("0000:43:00.0", ("qib0",), 1)]),
    ],
)
def test_the_corpus_rdma_nics_are_found_and_without_an_nvidia_gpu_the_check_is_not_applicable(name, nics):
    from corpus import corpus_root
    from numawatch.host import read_host
    from numawatch.paths import Paths

    root = corpus_root(name)
    pci = pci_topology.read(Paths.from_root(root))
    evaluation = evaluate(read_host(Paths.from_root(root)), REFERENCE, [GPU_NIC_PATH])

    assert [(n.address, n.rdma_devices, n.numa_node) for n in pci.nics] == nics
    assert evaluation.not_applicable[0].reason == "no GPU on the PCI bus"
