from __future__ import annotations

from dataclasses import replace

import pytest
from fakehost.reference import (
    GPU_RESOURCE,
    GPUS,
    VLLM,
    reference_node,
    reference_snapshot,
    replace_state,
    with_results,
    with_source_down,
)
from numawatch.checks import all_checks, evaluate
from numawatch.intent import REFERENCE
from numawatch.model import frozen_map
from numawatch.model.kubelet import DeviceAssignment
from numawatch.model.topology import NumaNode

CHECK = next(c for c in all_checks() if c.id == "gpu_numa_unknown")


def findings(host, intent=REFERENCE):
    evaluation = evaluate(host, intent, [CHECK])
    assert evaluation.not_evaluated == (), evaluation.not_evaluated
    return evaluation.findings


def sysfs_unknown(host, index: int):
    gpus = list(host.gpus.gpus)
    gpus[index] = replace(gpus[index], numa_node=None)
    return with_results(host, gpus_sysfs=replace(host.gpus, gpus=tuple(gpus)))


def plugin_without_topology(host, device_ids: tuple[str, ...]):
    devices = host.kubelet_state.devices
    entry = DeviceAssignment(VLLM.uid, "vllm", GPU_RESOURCE, frozen_map({-1: device_ids}))
    return replace_state(host, devices=replace(devices, entries=(entry, *devices.entries[1:])))


def test_reference_gpus_all_have_a_numa_node():
    assert findings(reference_snapshot()) == ()


def test_gpu_whose_pci_function_reports_numa_node_minus_one_is_unknown_from_sysfs():
    (finding,) = findings(sysfs_unknown(reference_snapshot(), 2))

    assert dict(finding.labels) == {"gpu": GPUS[2].pci_address, "uuid": GPUS[2].uuid, "reason": "sysfs"}
    assert "numa_node -1" in finding.message and "2-node host" in finding.message
    assert "BIOS" in finding.remediation


def test_gpu_registered_by_the_device_plugin_under_minus_one_is_unknown_to_the_topology_manager():
    host = plugin_without_topology(reference_snapshot(), (GPUS[0].uuid, GPUS[1].uuid))

    found = findings(host)

    assert [dict(f.labels) for f in found] == [
        {"gpu": GPUS[0].pci_address, "uuid": GPUS[0].uuid, "reason": "device_plugin"},
        {"gpu": GPUS[1].pci_address, "uuid": GPUS[1].uuid, "reason": "device_plugin"},
    ]
    assert "device plugin" in found[0].remediation


def test_time_sliced_replicas_of_one_gpu_are_reported_once():
    host = plugin_without_topology(reference_snapshot(), (GPUS[0].uuid + "::0", GPUS[0].uuid + "::1"))

    (finding,) = findings(host)

    assert finding.labels["uuid"] == GPUS[0].uuid


def test_device_plugin_gpu_missing_from_sysfs_is_labelled_by_its_device_id():
    host = with_source_down(plugin_without_topology(reference_snapshot(), ("tegra",)), "gpus_sysfs")

    (finding,) = findings(host)

    assert dict(finding.labels) == {"gpu": "tegra", "reason": "device_plugin"}


def test_other_resources_under_minus_one_are_not_gpus():
    host = reference_snapshot()
    devices = host.kubelet_state.devices
    nic = DeviceAssignment(VLLM.uid, "vllm", "rdma/hca", frozen_map({-1: ("mlx5_0",)}))
    host = replace_state(host, devices=replace(devices, entries=(*devices.entries, nic)))

    assert findings(host) == ()


def test_a_single_numa_node_host_has_no_gpu_placement_to_know():
    host = sysfs_unknown(reference_snapshot(), 0)
    topology = host.topology
    host = with_results(host, topology=replace(topology, nodes=frozen_map({0: NumaNode(0, topology.online)})))

    assert findings(host) == ()


def test_gpu_numa_unknown_is_not_evaluated_without_sysfs_gpus_and_device_checkpoint():
    host = with_source_down(replace_state(reference_snapshot(), devices=None), "gpus_sysfs", "no PCI bus in sysfs")

    evaluation = evaluate(host, REFERENCE, [CHECK])

    assert evaluation.findings == ()
    (reason,) = evaluation.not_evaluated
    assert "no PCI bus in sysfs" in reason.reason


def test_gpu_numa_unknown_is_not_evaluated_without_topology():
    host = with_source_down(reference_snapshot(), "topology", "no /sys/devices/system/node")

    (reason,) = evaluate(host, REFERENCE, [CHECK]).not_evaluated

    assert "no /sys/devices/system/node" in reason.reason


# --------------------------------------------------------------------------------------------- end to end, from files
@pytest.mark.slow
def test_gpus_registered_without_topology_are_caught_reading_the_checkpoint(fake_host):
    node = reference_node(fake_host)
    node.register_gpus_without_topology()

    found = [f for f in node.evaluate().findings if f.check == "gpu_numa_unknown"]

    assert [dict(f.labels) for f in found] == [
        {"gpu": GPUS[0].pci_address, "uuid": GPUS[0].uuid, "reason": "device_plugin"},
        {"gpu": GPUS[1].pci_address, "uuid": GPUS[1].uuid, "reason": "device_plugin"},
    ]


@pytest.mark.slow
def test_gpu_without_a_numa_node_in_sysfs_is_caught_reading_sysfs(fake_host):
    node = reference_node(fake_host)
    node.hide_gpu_numa_node(3)

    found = [f for f in node.evaluate().findings if f.check == "gpu_numa_unknown"]

    assert [dict(f.labels) for f in found] == [{"gpu": GPUS[3].pci_address, "uuid": GPUS[3].uuid, "reason": "sysfs"}]
