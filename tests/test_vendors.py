"""Every accelerator on the node: AMD Instinct and Intel Gaudi beside NVIDIA, and NVIDIA MIG.

The fake nodes are the reference node (tests/fakehost/reference.py) with another vendor's accelerators in its four
GPU slots, written as amdgpu and habanalabs lay out sysfs, and registered by that vendor's device plugin the way it
names devices (AMD's plugin: the PCI address; Habana's: HLML's id, the board serial). They are read by the real
sources and evaluated by the real checks; hwloc reads the same trees as the oracle of each accelerator's NUMA node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from fakehost import FakeHost
from fakehost.gpus import (
    AMD,
    CLASS_AMD_AUDIO,
    CLASS_DISPLAY_OTHER,
    CLASS_VGA,
    MI250X,
    add_amd_gpu,
    add_gaudi,
    add_gpu,
    add_kfd_cpu_node,
    add_pci_device,
    fake_amd_unique_id,
    fake_gaudi_serial,
)
from fakehost.pods import remove_pod
from fakehost.reference import (
    GPUS,
    TRTLLM,
    VLLM,
    reference_node,
    reference_snapshot,
    replace_state,
)
from fakehost.topology import add_topology
from hwloc_oracle import hwloc_reading, lstopo_available
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.hotplug import GPU_SOURCES, sources_to_refresh
from numawatch.intent import REFERENCE, IntentError
from numawatch.intentfile import parse_intent
from numawatch.model import frozen_map
from numawatch.model.gpu import GpuInventory
from numawatch.model.kubelet import DeviceAssignment
from numawatch.sources import gpus_sysfs
from numawatch.sources.gpus_sysfs import kfd_pci_address, parse_kfd_properties
from numawatch.workloads import build_workloads
from prometheus_client.parser import text_string_to_metric_families

VENDORS = ("amd", "habana")
RESOURCES = {"amd": "amd.com/gpu", "habana": "habana.ai/gaudi"}


def gpu_checks(evaluation, check: str) -> list[dict[str, str]]:
    return [dict(f.labels) for f in evaluation.findings if f.check == check]


def gpu_info(evaluation) -> dict[str, dict[str, str]]:
    text = metrics.render(evaluation).decode()
    family = next(f for f in text_string_to_metric_families(text) if f.name == "numawatch_gpu_info")
    return {sample.labels["gpu"]: sample.labels for sample in family.samples}


# --------------------------------------------------------------------------------------------------- inventory
def test_amd_instinct_node_inventories_each_gpu_with_its_node_cpus_model_and_unique_id(fake_host):
    reference_node(fake_host, vendor="amd")

    inventory = gpus_sysfs.read(fake_host.paths)

    assert [(g.pci_address, g.numa_node, g.vendor, g.vendor_id, g.class_code) for g in inventory.gpus] == [
        (gpu.pci_address, gpu.numa_node, "amd", "0x1002", "0x120000") for gpu in GPUS
    ]
    first = inventory.gpus[0]
    assert first.uuid == fake_amd_unique_id(GPUS[0].pci_address) and len(first.uuid) == 16
    assert first.model == "AMD Instinct MI300X"
    assert first.local_cpus == frozenset({*range(0, 8), *range(16, 24)})


def test_gaudi_node_inventories_each_accelerator_with_its_serial_and_device_type(fake_host):
    reference_node(fake_host, vendor="habana")

    inventory = gpus_sysfs.read(fake_host.paths)

    assert [(g.pci_address, g.numa_node, g.vendor, g.model) for g in inventory.gpus] == [
        (gpu.pci_address, gpu.numa_node, "habana", "GAUDI2") for gpu in GPUS
    ]
    assert inventory.gpus[2].uuid == fake_gaudi_serial(GPUS[2].pci_address)


def test_amd_unique_id_comes_from_the_kfd_topology_when_the_function_lacks_it(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    add_kfd_cpu_node(fake_host, 0, 2)
    add_kfd_cpu_node(fake_host, 1, 2)
    add_amd_gpu(fake_host, "0000:c1:00.0", numa_node=1, local_cpus="2-3", unique_id="00a1b2c3d4e5f607",
                sysfs_unique_id=False, kfd_node=2)  # fmt: skip

    (gpu,) = gpus_sysfs.read(fake_host.paths).gpus

    assert gpu.uuid == "00a1b2c3d4e5f607"


def test_mi200_display_controller_is_an_accelerator_and_the_cards_audio_and_a_bmc_vga_are_not(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add_amd_gpu(fake_host, "0000:29:00.0", numa_node=0, local_cpus="0-1", device_id=MI250X,
                class_code=CLASS_DISPLAY_OTHER, model="AMD Instinct MI250X")  # fmt: skip
    add_pci_device(fake_host, "0000:29:00.1", vendor_id=AMD, device_id="0xab38", class_code=CLASS_AMD_AUDIO,
                   numa_node=0, local_cpus="0-1")  # fmt: skip
    add_pci_device(fake_host, "0000:02:00.0", vendor_id=AMD, device_id="0x515e", class_code=CLASS_VGA,
                   numa_node=0, local_cpus="0-1")  # an ES1000 on the BMC: no amdgpu  # fmt: skip
    add_pci_device(fake_host, "0000:03:00.0", vendor_id="0x1022", device_id="0x14ab", class_code="0x120000",
                   numa_node=0, local_cpus="0-1")  # an AMD CPU's own function (vendor 0x1022)  # fmt: skip

    inventory = gpus_sysfs.read(fake_host.paths)

    assert [(g.pci_address, g.class_code, g.model) for g in inventory.gpus] == [
        ("0000:29:00.0", "0x038000", "AMD Instinct MI250X")
    ]


def test_a_radeon_vga_function_bound_to_amdgpu_is_a_gpu(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add_amd_gpu(fake_host, "0000:0a:00.0", numa_node=0, local_cpus="0-1", device_id="0x7448", class_code=CLASS_VGA,
                model="AMD Radeon PRO W7900")  # fmt: skip

    (gpu,) = gpus_sysfs.read(fake_host.paths).gpus

    assert (gpu.pci_address, gpu.vendor, gpu.class_code) == ("0000:0a:00.0", "amd", "0x030000")


@pytest.mark.parametrize("vendor", VENDORS)
def test_without_the_driver_an_accelerator_is_inventoried_without_id_or_model(fake_host, vendor):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    add = add_amd_gpu if vendor == "amd" else add_gaudi
    add(fake_host, "0000:18:00.0", numa_node=None, local_cpus="0-3", driver=False)

    (gpu,) = gpus_sysfs.read(fake_host.paths).gpus

    assert (gpu.vendor, gpu.uuid, gpu.model) == (vendor, None, None)
    assert gpu.numa_node is None and "numa_node" not in gpu.problems  # the kernel's -1: unknown, never node 0


@pytest.mark.parametrize(
    ("vendor", "attribute", "value"),
    [("amd", "unique_id", "not-hex-at-all"), ("amd", "product_name", "MI300X\x1b[2J"),
     ("habana", "serial_number", "AN 0123 ; rm"), ("habana", "device_type", "x" * 200)],
)  # fmt: skip
def test_a_driver_attribute_no_driver_would_print_is_a_fault_of_that_device_only(fake_host, vendor, attribute, value):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add = add_amd_gpu if vendor == "amd" else add_gaudi
    gpu = add(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-1")
    other = add(fake_host, "0000:2a:00.0", numa_node=0, local_cpus="0-1")
    (gpu.device_dir / attribute).write_text(value + "\n")

    broken, fine = gpus_sysfs.read(fake_host.paths).gpus

    assert set(broken.problems) == {attribute}
    assert broken.problems[attribute].startswith(f"{gpu.device_dir / attribute}: ")
    field = "uuid" if attribute in ("unique_id", "serial_number") else "model"
    assert getattr(broken, field) is None and broken.numa_node == 0  # kept, with that value unknown
    assert (fine.uuid, fine.model, fine.problems) == (other.uuid, other.model, {})


def test_an_unreadable_amd_serial_or_kfd_node_leaves_that_gpus_id_unknown_and_named(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    from_kfd = add_amd_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-1", sysfs_unique_id=False,
                           kfd_node=1)  # fmt: skip
    unreadable = add_amd_gpu(fake_host, "0000:2a:00.0", numa_node=0, local_cpus="0-1")
    (unreadable.device_dir / "unique_id").write_bytes(b"\xff\xfe" * 40000)  # larger than any sysfs attribute
    (fake_host.path("sys/class/kfd/kfd/topology/nodes/1/properties")).write_bytes(b"x" * 70000)

    first, second = gpus_sysfs.read(fake_host.paths).gpus

    assert first.uuid is None and "sys/class/kfd/kfd/topology/nodes/1/properties" in first.problems["unique_id"]
    assert second.uuid is None and set(second.problems) == {"unique_id"}
    assert (first.model, second.model, first.numa_node) == (from_kfd.model, unreadable.model, 0)


def test_a_malformed_nvidia_information_file_leaves_that_gpus_uuid_unknown(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-1")
    fake_host.write("proc/driver/nvidia/gpus/0000:18:00.0/information", "Model:\t\tH100\nGPU UUID:\tGPU-$(reboot)\n")

    (gpu,) = gpus_sysfs.read(fake_host.paths).gpus

    assert (gpu.uuid, gpu.model, gpu.numa_node) == (None, None, 0)
    assert "GPU UUID" in gpu.problems["information"]


@pytest.mark.parametrize("vendor", VENDORS)
def test_empty_or_padded_driver_attributes_read_as_the_driver_meant(fake_host, vendor):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add = add_amd_gpu if vendor == "amd" else add_gaudi
    gpu = add(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-1")
    stable, model = ("unique_id", "product_name") if vendor == "amd" else ("serial_number", "device_type")
    (gpu.device_dir / stable).write_text("\0\n")  # a driver that never set it: unknown
    (gpu.device_dir / model).write_text("  Model X \0\n")

    (read,) = gpus_sysfs.read(fake_host.paths).gpus

    assert (read.uuid, read.model) == (None, "Model X")


def test_kfd_properties_parse_with_odd_lines_and_cpu_nodes_have_no_pci_address():
    text = (
        "cpu_cores_count 0\n\nsimd_count 1216\nlocation_id 49408\ndomain 0\nbogus line here\nname x\n"
        "unique_id 42\0\n"
    )

    properties = parse_kfd_properties(text)

    assert properties == {"cpu_cores_count": 0, "simd_count": 1216, "location_id": 49408, "domain": 0, "unique_id": 42}
    assert kfd_pci_address(properties) == "0000:c1:00.0"  # 49408 = 0xc100: bus 0xc1, device 0, function 0
    assert kfd_pci_address({"simd_count": 0, "location_id": 0, "domain": 0}) is None
    assert kfd_pci_address({"simd_count": 4, "location_id": 1 << 20, "domain": 0}) is None  # not a bus/devfn


@pytest.mark.slow
def test_rewriting_an_amd_gpus_numa_node_changes_the_fingerprint(fake_host):
    node = reference_node(fake_host, vendor="amd")
    before = gpus_sysfs.fingerprint(fake_host.paths)

    (node.gpus[3].device_dir / "numa_node").write_text("0\n")

    assert gpus_sysfs.fingerprint(fake_host.paths) != before


@pytest.mark.parametrize(
    ("pci_id", "pci_class", "refresh"),
    [("1002:74A1", "120000", GPU_SOURCES), ("1002:740C", "38000", GPU_SOURCES), ("1DA3:1020", "120000", GPU_SOURCES),
     ("1002:AB38", "40300", frozenset()), ("1022:14AB", "120000", frozenset()), ("1DA3:1020", "20000", frozenset())],
)  # fmt: skip
def test_hotplug_of_an_amd_or_gaudi_accelerator_refreshes_the_gpu_sources(pci_id, pci_class, refresh):
    assert sources_to_refresh("add", "pci", {"PCI_ID": pci_id, "PCI_CLASS": pci_class}) == refresh


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.slow
def test_hwloc_places_each_accelerator_on_the_numa_node_numawatch_reads(tmp_path, vendor):
    if not lstopo_available():
        pytest.fail("lstopo-no-graphics is not installed: apt-get install hwloc (tests/install-and-run.sh does)")
    host = FakeHost(tmp_path / "host")
    reference_node(host, vendor=vendor)

    theirs = hwloc_reading(host.root).gpus
    ours = {g.pci_address: g.numa_node for g in gpus_sysfs.read(host.paths).gpus}

    assert theirs == ours == {gpu.pci_address: gpu.numa_node for gpu in GPUS}


# --------------------------------------------------------------------------------------------------- the joins
@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.slow
def test_the_clean_node_joins_every_pods_accelerators_and_finds_nothing_about_them(fake_host, vendor):
    node = reference_node(fake_host, vendor=vendor)
    host = node.read()

    evaluation = evaluate(host, REFERENCE)
    held = {w.container_name: w.gpus for w in build_workloads(host, REFERENCE) if w.gpus}

    assert [(g.resource, g.pci_address, g.numa_node, g.vendor) for g in held[VLLM.container.name]] == [
        (RESOURCES[vendor], gpu.pci_address, 0, vendor) for gpu in VLLM.gpus
    ]
    assert {f.check for f in evaluation.findings} & {"container_gpu_numa_mismatch", "gpu_numa_unknown"} == set()
    labels = gpu_info(evaluation)[GPUS[0].pci_address]
    assert (labels["vendor"], labels["pod"], labels["uuid"]) == (vendor, VLLM.name, node.gpus[0].uuid)


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.slow
def test_a_pod_pinned_away_from_its_accelerators_mismatches(fake_host, vendor):
    node = reference_node(fake_host, vendor=vendor)
    node.pin_away_from_gpus()

    found = gpu_checks(node.evaluate(), "container_gpu_numa_mismatch")

    assert [(f["gpu"], f["numa_node"], f["container"]) for f in found] == [
        (gpu.pci_address, "0", VLLM.container.name) for gpu in VLLM.gpus
    ]


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.slow
def test_accelerators_the_plugin_registers_without_topology_name_that_vendors_plugin(fake_host, vendor):
    node = reference_node(fake_host, vendor=vendor)
    node.register_gpus_without_topology()
    plugin = {"amd": "ROCm k8s-device-plugin", "habana": "habanalabs device plugin"}[vendor]

    found = [f for f in node.evaluate().findings if f.check == "gpu_numa_unknown"]

    assert found and all(plugin in f.remediation and "NVIDIA" not in f.remediation for f in found)


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.slow
def test_accelerators_the_plugin_registers_without_topology_are_numa_unknown(fake_host, vendor):
    node = reference_node(fake_host, vendor=vendor)
    node.register_gpus_without_topology()

    found = gpu_checks(node.evaluate(), "gpu_numa_unknown")

    assert found == [
        {"gpu": gpu.pci_address, "uuid": node.gpus[GPUS.index(gpu)].uuid, "reason": "device_plugin"}
        for gpu in VLLM.gpus
    ]


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.slow
def test_an_accelerator_whose_function_reports_numa_node_minus_one_is_unknown_from_sysfs(fake_host, vendor):
    node = reference_node(fake_host, vendor=vendor)
    node.hide_gpu_numa_node(3)

    found = gpu_checks(node.evaluate(), "gpu_numa_unknown")

    assert found == [{"gpu": GPUS[3].pci_address, "uuid": node.gpus[3].uuid, "reason": "sysfs"}]


def test_gaudi_ids_the_inventory_does_not_know_keep_the_plugins_node(fake_host):
    """HLML's id may be something sysfs does not print: the plugin's NUMA node is then what is known."""
    host = reference_snapshot()
    entry = DeviceAssignment(VLLM.uid, VLLM.container.name, "habana.ai/gaudi", frozen_map({0: ("hl-uuid-0",)}))
    host = replace_state(host, devices=replace(host.kubelet_state.devices, entries=(entry,)))

    (workload,) = [w for w in build_workloads(host, REFERENCE) if w.gpus]
    (gpu,) = workload.gpus

    assert (gpu.pci_address, gpu.numa_node, gpu.label, gpu.plugin_vendor) == (None, 0, "hl-uuid-0", "habana")


# --------------------------------------------------------------------------------------------------- MIG
MIG_UUID = "MIG-4f2d9a9c-8b7e-5a61-9a3c-0d1e2f3a4b5c"


def mig_host(devices_per_numa):
    host = reference_snapshot()
    entry = DeviceAssignment(VLLM.uid, VLLM.container.name, "nvidia.com/mig-1g.10gb", frozen_map(devices_per_numa))
    return replace_state(host, devices=replace(host.kubelet_state.devices, entries=(entry,)))


def test_a_mig_slice_is_a_gpu_resource_on_its_parents_numa_node():
    host = mig_host({1: (MIG_UUID,)})

    (workload,) = [w for w in build_workloads(host, REFERENCE) if w.gpus]

    assert [(g.resource, g.uuid, g.numa_node) for g in workload.gpus] == [("nvidia.com/mig-1g.10gb", MIG_UUID, 1)]
    found = gpu_checks(evaluate(host, REFERENCE), "container_gpu_numa_mismatch")
    assert [(f["gpu"], f["numa_node"]) for f in found] == [(MIG_UUID, "1")]  # vllm runs on node 0


def test_a_legacy_mig_id_names_its_parent_gpu_whose_sysfs_node_wins():
    legacy = f"MIG-{GPUS[2].uuid}/7/0"
    host = mig_host({0: (legacy,)})

    (workload,) = [w for w in build_workloads(host, REFERENCE) if w.gpus]
    (gpu,) = workload.gpus

    assert (gpu.pci_address, gpu.numa_node) == (GPUS[2].pci_address, 1)


def test_a_mig_slice_registered_without_topology_is_numa_unknown():
    found = gpu_checks(evaluate(mig_host({-1: (MIG_UUID,)}), REFERENCE), "gpu_numa_unknown")

    assert found == [{"gpu": MIG_UUID, "uuid": MIG_UUID, "reason": "device_plugin"}]


def test_device_ids_map_to_the_inventory_for_every_vendor():
    inventory = GpuInventory(
        gpus=(
            replace(reference_snapshot().gpus.gpus[0]),
            replace(reference_snapshot().gpus.gpus[1], pci_address="0000:c1:00.0", vendor="amd", uuid="00ab"),
            replace(reference_snapshot().gpus.gpus[2], pci_address="0000:33:00.0", vendor="habana", uuid="AN01"),
        )
    )

    assert inventory.for_device_id(GPUS[0].uuid + "::3").pci_address == GPUS[0].pci_address
    assert inventory.for_device_id("0000:C1:00.0").vendor == "amd"
    assert inventory.for_device_id("AN01").vendor == "habana"
    assert inventory.for_device_id(f"MIG-{GPUS[0].uuid}/1/0").pci_address == GPUS[0].pci_address
    assert inventory.for_device_id(MIG_UUID) is None
    assert inventory.for_device_id("amdgpu_xcp_3") is None


# --------------------------------------------------------------------------------------------------- intent
def test_gpu_resources_accept_prefixes_and_the_default_covers_every_vendor():
    intent = parse_intent("pinning:\n  gpuResources: [nvidia.com/mig-*, example.com/npu]\n")

    assert intent.is_gpu_resource("nvidia.com/mig-3g.40gb") and intent.is_gpu_resource("example.com/npu")
    assert not intent.is_gpu_resource("nvidia.com/gpu") and not intent.is_gpu_resource("nvidia.com/mig-*")
    for resource in ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu", "habana.ai/gaudi"):
        assert REFERENCE.is_gpu_resource(resource)
    assert not REFERENCE.is_gpu_resource("rdma/hca_shared_devices_a")


@pytest.mark.parametrize("value", ["'*'", "nvidia.com/*gpu", "nvidia.com/mig-**", "/mig-*"])
def test_gpu_resource_patterns_other_than_a_trailing_star_are_refused(value):
    with pytest.raises(IntentError) as raised:
        parse_intent(f"pinning:\n  gpuResources: [{value}]\n")

    assert "gpuResources" in str(raised.value)


# --------------------------------------------------------------------------------------------------- capacity
def numawatch_fit(root, shape: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numawatch", "--host-root", str(root), "check", "--fit", shape, "--format", "json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.slow
def test_check_fit_counts_the_vendors_free_accelerators_per_numa_node(fake_host, vendor):
    node = reference_node(fake_host, vendor=vendor)
    remove_pod(fake_host, node.pod(TRTLLM))  # its two accelerators on node 1 are free again
    resource = RESOURCES[vendor]

    fits = numawatch_fit(fake_host.root, f"cpu=2,memory=1Gi,{resource}=2")
    too_many = numawatch_fit(fake_host.root, f"cpu=2,memory=1Gi,{resource}=3")

    answer = json.loads(fits.stdout)["fit"]
    assert fits.returncode == 0, fits.stderr
    assert answer["numa_nodes"] == [1]
    assert {entry["numa_node"]: entry["free"][resource] for entry in answer["per_node"]} == {0: 0, 1: 2}
    assert too_many.returncode == 1
    assert f"3 {resource} is more than one NUMA node has" in json.loads(too_many.stdout)["fit"]["reason"]


def test_an_nvidia_gpu_beside_amd_ones_keeps_its_own_vendor(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-1")
    add_amd_gpu(fake_host, "0000:9a:00.0", numa_node=1, local_cpus="2-3")
    add_gaudi(fake_host, "0000:b3:00.0", numa_node=1, local_cpus="2-3")

    vendors = [(g.pci_address, g.vendor) for g in gpus_sysfs.read(fake_host.paths).gpus]

    assert vendors == [("0000:18:00.0", "nvidia"), ("0000:9a:00.0", "amd"), ("0000:b3:00.0", "habana")]


# --------------------------------------------------------------------------------------------------- Grace-class
GiB = 1 << 30


def grace_like(host: FakeHost):
    """The reference node with two CPU-less NUMA nodes (2, 3) holding GPU memory, as on a Grace-class node, and the
    first two GPUs' functions reporting memory node 2 while their local CPUs are node 0's."""
    node = reference_node(host)
    node._rewrite_topology(memory_only_nodes=2)
    for gpu in node.gpus[:2]:
        (gpu.device_dir / "numa_node").write_text("2\n")
    return node


def test_a_gpu_on_a_cpu_less_memory_node_is_local_to_the_cpu_node_next_to_it(fake_host):
    node = grace_like(fake_host)
    host = node.read()

    assert host.topology.nodes[2].cpus == frozenset()
    (vllm,) = [w for w in build_workloads(host, REFERENCE) if w.container_name == VLLM.container.name]
    assert [(g.pci_address, g.numa_node) for g in vllm.gpus] == [(gpu.pci_address, 0) for gpu in VLLM.gpus]
    assert gpu_checks(evaluate(host, REFERENCE), "container_gpu_numa_mismatch") == []

    node.pin_away_from_gpus()  # on node 1: remote to the CPUs next to its GPUs
    found = gpu_checks(node.evaluate(), "container_gpu_numa_mismatch")
    assert [(f["gpu"], f["numa_node"]) for f in found] == [(gpu.pci_address, "0") for gpu in VLLM.gpus]


def test_gpu_memory_on_cpu_less_nodes_is_not_remote_for_a_gpu_holder_but_is_for_others(fake_host):
    from fakehost.pods import set_numa_bytes

    node = grace_like(fake_host)
    set_numa_bytes(fake_host, node.pod(VLLM), VLLM.container.name, {0: 2 * GiB, 2: 6 * GiB})

    assert gpu_checks(node.evaluate(), "container_memory_remote") == []
    no_gpus = replace(REFERENCE, gpu_resources=())  # the same pod judged as one holding no GPU
    (finding,) = gpu_checks(evaluate(node.read(), no_gpus), "container_memory_remote")
    assert (finding["container"], finding["numa_node"]) == (VLLM.container.name, "2")

    set_numa_bytes(fake_host, node.pod(VLLM), VLLM.container.name, {0: 2 * GiB, 1: 6 * GiB})
    (finding,) = gpu_checks(node.evaluate(), "container_memory_remote")  # a CPU node's memory stays remote
    assert finding["numa_node"] == "1"


def test_a_gpu_holder_allowed_the_gpu_memory_nodes_is_not_a_memory_mismatch(fake_host):
    from fakehost.pods import set_container_cpus

    node = grace_like(fake_host)
    pod, name, cpus = node.pod(VLLM), VLLM.container.name, node.exclusive[VLLM.uid]

    set_container_cpus(fake_host, pod, name, cpus, mems={0, 2, 3})
    assert gpu_checks(node.evaluate(), "container_memory_numa_mismatch") == []

    set_container_cpus(fake_host, pod, name, cpus, mems={0, 1, 2})
    (finding,) = gpu_checks(node.evaluate(), "container_memory_numa_mismatch")
    assert finding["numa_node"] == "0,1,2"


@pytest.mark.slow
def test_check_fit_never_seats_cpus_on_a_cpu_less_node(fake_host):
    node = grace_like(fake_host)
    remove_pod(fake_host, node.pod(TRTLLM))

    result = numawatch_fit(fake_host.root, "cpu=2,memory=1Gi,nvidia.com/gpu=2")

    answer = json.loads(result.stdout)["fit"]
    assert result.returncode == 0, result.stderr
    assert answer["numa_nodes"] == [1]
    free = {entry["numa_node"]: entry["free"] for entry in answer["per_node"]}
    assert (free[2]["cpu"], free[3]["cpu"], free[1]["nvidia.com/gpu"]) == (0, 0, 2)
    cpus_only = json.loads(numawatch_fit(fake_host.root, "cpu=2,memory=1Gi").stdout)["fit"]
    assert cpus_only["fits"] and set(cpus_only["numa_nodes"]) <= {0, 1}


def test_cpu_node_keeps_numa_node_unless_it_is_cpu_less_and_the_local_cpus_name_one_node():
    host = reference_snapshot()
    topology = host.topology
    gpu = host.gpus.gpus[0]
    memory_node = replace(topology.nodes[0], id=2, cpus=frozenset())
    cpuless = replace(topology, nodes=frozen_map({**topology.nodes, 2: memory_node}))

    assert gpu.cpu_node(topology) == 0 and gpu.cpu_node(None) == 0
    assert replace(gpu, numa_node=2).cpu_node(cpuless) == 0
    assert replace(gpu, numa_node=2, local_cpus=frozenset({0, 8})).cpu_node(cpuless) == 2  # two nodes: no guess
    assert replace(gpu, numa_node=2, local_cpus=None).cpu_node(cpuless) == 2
    assert replace(gpu, numa_node=None).cpu_node(cpuless) is None


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.slow
def test_capacity_families_count_free_accelerators_per_numa_node_for_the_vendors_resource(fake_host, vendor):
    node = reference_node(fake_host, vendor=vendor)
    remove_pod(fake_host, node.pod(VLLM))  # the two on node 0 are free again

    text = metrics.render(node.evaluate()).decode()
    family = next(f for f in text_string_to_metric_families(text) if f.name == "numawatch_capacity_free_devices")
    free = {(s.labels["numa_node"], s.labels["resource"]): s.value for s in family.samples}

    assert free == {("0", RESOURCES[vendor]): 2.0, ("1", RESOURCES[vendor]): 0.0}


# --------------------------------------------------------------------------------------------------- MI300 partitions
def test_mi300_partitions_map_to_their_parent_gpus_pci_address_and_numa_node(fake_host):
    from fakehost.gpus import add_amd_partitions
    from numawatch.host import HostReader

    node = reference_node(fake_host, vendor="amd")
    first = add_amd_partitions(fake_host, node.gpus[0], 4, first_xcp=0, first_kfd_node=20, first_minor=160)
    third = add_amd_partitions(fake_host, node.gpus[2], 4, first_xcp=8, first_kfd_node=30, first_minor=170)
    fake_host.write("sys/devices/platform/amdgpu_xcp_99/drm/renderD999/dev", "226:999")  # no KFD node: nowhere

    host = HostReader(fake_host.paths).read()
    inventory = host.gpus

    assert dict(inventory.partitions) == {
        **{name: GPUS[0].pci_address for name in first}, **{name: GPUS[2].pci_address for name in third}}
    assert inventory.for_device_id("amdgpu_xcp_2").pci_address == GPUS[0].pci_address
    assert inventory.for_device_id("amdgpu_xcp_99") is None
    # The amd.com/gpu join of the plugin's partition IDs: each partition is its parent GPU, on its parent's node
    entry = DeviceAssignment(VLLM.uid, VLLM.container.name, "amd.com/gpu",
                             frozen_map({GPUS[2].numa_node: (third[1],)}))  # fmt: skip
    joined = replace_state(host, devices=replace(host.kubelet_state.devices, entries=(entry,)))
    (workload,) = [w for w in build_workloads(joined, REFERENCE) if w.gpus]
    (gpu,) = workload.gpus
    assert (gpu.pci_address, gpu.numa_node) == (GPUS[2].pci_address, GPUS[2].numa_node)
    found = gpu_checks(evaluate(joined, REFERENCE), "container_gpu_numa_mismatch")
    assert [(f["gpu"], f["numa_node"]) for f in found] == [(GPUS[2].pci_address, str(GPUS[2].numa_node))]


def test_a_partition_mode_change_changes_the_inventorys_fingerprint(fake_host):
    from fakehost.gpus import add_amd_partitions

    node = reference_node(fake_host, vendor="amd")
    before = gpus_sysfs.fingerprint(fake_host.paths)
    add_amd_partitions(fake_host, node.gpus[0], 2, first_xcp=0, first_kfd_node=20, first_minor=160)

    assert gpus_sysfs.fingerprint(fake_host.paths) != before
