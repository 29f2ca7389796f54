"""MIG through NVML: a GPU in MIG mode enumerates its MIG devices (nvmlDeviceGetMigMode,
nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex, their MIG-<uuid>s), each process is placed on
the slice it runs on (the MIG handle's own compute processes) and still counts for the parent GPU, and
gpu_holder_mismatch judges a slice's processes against the container the plugin assigned that MIG UUID to.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from fake_pynvml import FakeMig, reference_nvml, reference_pid, write_reference_threads
from fakehost.reference import GPUS, TRTLLM, VLLM, reference_node, reference_snapshot, replace_state, with_results
from gpu_readers import GpuReaders
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.model import frozen_map
from numawatch.model.kubelet import DeviceAssignment
from numawatch.nvml_session import NvmlSession

SLICE = "MIG-4f2d9a9c-8b7e-5a61-9a3c-0d1e2f3a4b5c"
OTHER_SLICE = "MIG-0b9e8d7c-6a5f-5e4d-8c3b-2a1f0e9d8c7b"


def mig_nvml():
    """The reference node's NVML with GPU 0 in MIG mode: vllm's process on its first slice, slot 1 empty."""
    fake = reference_nvml()
    gpu = fake.gpus[0]
    gpu.mig_enabled = True
    gpu.migs = [FakeMig(SLICE, processes=gpu.processes), None, FakeMig(OTHER_SLICE)]
    gpu.processes = []
    return fake


@pytest.mark.slow
def test_a_gpu_in_mig_mode_lists_its_slices_and_places_each_process_on_its_slice(fake_host):
    reference_node(fake_host)
    write_reference_threads(fake_host)
    fake = mig_nvml()
    gpu = GpuReaders(NvmlSession(nvml=fake))
    try:
        host = HostReader(fake_host.paths, nvml=gpu.session).read()
    finally:
        gpu.session.close()

    first, second = host.nvml.gpus[:2]
    assert first.mig_devices == (SLICE, OTHER_SLICE)  # the empty slot is no device
    (process,) = first.processes
    assert (process.pid, process.mig_uuid) == (reference_pid(VLLM), SLICE)
    assert process.container_id == VLLM.container.container_id  # the slice's holder is a holder of its parent GPU
    assert (second.mig_devices, second.processes[0].mig_uuid) == ((), None)  # no MIG: NotSupported, not a problem
    assert first.problems == () and second.problems == ()
    assert host.statuses["processes"].up and VLLM.container.container_id in host.processes.containers
    assert len(fake.calls_to("nvmlDeviceGetMigDeviceHandleByIndex")) == 7  # once per enumeration, every slot


def on_a_slice(owner, node=None):
    """The reference snapshot with vllm's process on GPU 0 placed on SLICE, which the plugin assigned to ``owner``."""
    from fake_pynvml import reference_gpu_results

    host = reference_snapshot()
    results = reference_gpu_results()
    nvml = results["nvml"]
    first = nvml.gpus[0]
    placed = replace(first, mig_devices=(SLICE,), processes=(replace(first.processes[0], mig_uuid=SLICE),))
    results["nvml"] = replace(nvml, gpus=(placed, *nvml.gpus[1:]))
    slice_entry = DeviceAssignment(owner.uid, owner.container.name, "nvidia.com/mig-1g.10gb",
                                   frozen_map({GPUS[0].numa_node if node is None else node: (SLICE,)}))  # fmt: skip
    devices = host.kubelet_state.devices
    host = replace_state(host, devices=replace(devices, entries=(*devices.entries, slice_entry)))
    return with_results(host, **results)


def test_a_slices_process_in_the_container_it_was_assigned_to_is_clean():
    evaluation = evaluate(on_a_slice(VLLM), REFERENCE)

    assert "gpu_holder_mismatch" not in {item.check for item in evaluation.not_evaluated}
    assert [f for f in evaluation.findings if f.check == "gpu_holder_mismatch"] == []


def test_a_slices_process_in_another_container_than_the_slices_is_a_mismatch_naming_the_slice():
    evaluation = evaluate(on_a_slice(TRTLLM), REFERENCE)

    (finding,) = [f for f in evaluation.findings if f.check == "gpu_holder_mismatch"]
    assert (finding.labels["gpu"], finding.labels["uuid"], finding.labels["reason"]) == (
        GPUS[0].pci_address, SLICE, "other_container")
    assert finding.labels["container"] == VLLM.container.name
    assert f"MIG device {SLICE} of GPU {GPUS[0].pci_address}" in finding.message


def test_a_slices_process_is_judged_against_its_parent_gpus_numa_node(fake_host):
    from fake_pynvml import FakeThread, write_threads
    from fakehost.reference import NODE_CPUS

    reference_node(fake_host)
    write_reference_threads(fake_host)
    pid = reference_pid(VLLM)
    far = min(NODE_CPUS[1])  # GPU 0, the slice's parent, is on node 0
    write_threads(fake_host, pid, [FakeThread(pid, frozenset(VLLM.exclusive) | {far})])
    gpu = GpuReaders(NvmlSession(nvml=mig_nvml()))
    try:
        evaluation = evaluate(HostReader(fake_host.paths, nvml=gpu.session).read(), REFERENCE)
    finally:
        gpu.session.close()

    found = [dict(f.labels) for f in evaluation.findings if f.check == "gpu_process_remote"]
    assert {(f["gpu"], f["numa_node"]) for f in found} == {(GPUS[0].pci_address, "0"), (GPUS[1].pci_address, "0")}


def test_a_mig_slice_joins_its_parent_gpus_pci_function_and_sysfs_numa_node():
    from numawatch.workloads import build_workloads

    host = on_a_slice(VLLM, node=1)  # the plugin says node 1; the slice's parent, GPU 0, is on node 0 in sysfs

    (vllm,) = [w for w in build_workloads(host, REFERENCE) if w.container_name == VLLM.container.name]
    (joined,) = [g for g in vllm.gpus if g.device_id == SLICE]
    assert (joined.pci_address, joined.numa_node) == (GPUS[0].pci_address, GPUS[0].numa_node)
    found = [dict(f.labels) for f in evaluate(host, REFERENCE).findings if f.check == "gpu_numa_unknown"]
    assert found == []


def test_a_mig_slice_registered_without_topology_is_named_by_its_parent_gpu():
    found = [dict(f.labels) for f in evaluate(on_a_slice(VLLM, node=-1), REFERENCE).findings
             if f.check == "gpu_numa_unknown"]  # fmt: skip

    assert found == [{"gpu": GPUS[0].pci_address, "uuid": GPUS[0].uuid, "reason": "device_plugin"}]
