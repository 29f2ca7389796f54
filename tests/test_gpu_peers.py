"""NVLink peering: what the nvml source reads of NVLink through the fake pynvml, and container_gpus_not_peered."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fake_pynvml import (
    NOT_SUPPORTED,
    NVLINK_GPU,
    NVLINK_SWITCH,
    NVSWITCHES,
    TOPOLOGY_HOSTBRIDGE,
    UNKNOWN,
    FakeNvml,
    NVMLError,
    nvml_bus_id,
    reference_gpu_results,
    reference_nvml,
)
from fakehost.reference import GPUS, TRTLLM, VLLM, reference_node, reference_snapshot, replace_state, with_results
from gpu_readers import GpuReaders
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.checks.gpu_peers import CONTAINER_GPUS_NOT_PEERED, physical_gpus
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.model.gpu import NvmlSnapshot
from numawatch.model.kubelet import DeviceAssignment
from numawatch.nvml_session import NvmlSession
from numawatch.sources import SOURCES
from numawatch.workloads import build_workloads
from prometheus_client.parser import text_string_to_metric_families

UUIDS = [gpu.uuid for gpu in GPUS]


def pcie_only(fake: FakeNvml) -> FakeNvml:
    """The same GPUs as PCIe cards without NVLink (L40S-like): no link at all."""
    for gpu in fake.gpus:
        gpu.nvlink_slots, gpu.nvlinks = 0, []
    return fake


def bridged_pairs(fake: FakeNvml) -> FakeNvml:
    """H100 NVL-like: NVLink bridges join GPUs 0-1 and 2-3, four links each way."""
    first, second, third, fourth = fake.gpus
    for one, other in ((first, second), (second, first), (third, fourth), (fourth, third)):
        one.nvlink_slots, one.nvlinks = 18, [(NVLINK_GPU, other.bus_id)] * 4
    return fake


def read(fake_host, fake: FakeNvml) -> NvmlSnapshot:
    reference_node(fake_host)
    return GpuReaders(NvmlSession(nvml=fake)).nvml.read(fake_host.paths)


# --------------------------------------------------------------------------------------------------- the source
def test_nvswitch_gpus_are_all_peers_with_their_links_counted(fake_host):
    snapshot = read(fake_host, reference_nvml())

    for gpu in snapshot.gpus:
        assert gpu.nvlink_peers == tuple(sorted(u for u in UUIDS if u != gpu.uuid))
        assert (gpu.nvlink_links, gpu.nvlink_switch) == (18, True)
        assert gpu.problems == ()
    first = snapshot.gpus[0]
    assert dict(first.pcie_paths) == {UUIDS[1]: "NODE", UUIDS[2]: "SYS", UUIDS[3]: "SYS"}


def test_pcie_only_gpus_have_no_peers_and_no_links(fake_host):
    snapshot = read(fake_host, pcie_only(reference_nvml()))

    assert [(g.nvlink_peers, g.nvlink_links, g.nvlink_switch) for g in snapshot.gpus] == [((), 0, False)] * 4


def test_bridged_pairs_are_peers_of_each_other_only(fake_host):
    snapshot = read(fake_host, bridged_pairs(reference_nvml()))

    assert [g.nvlink_peers for g in snapshot.gpus] == [(UUIDS[1],), (UUIDS[0],), (UUIDS[3],), (UUIDS[2],)]
    assert [g.nvlink_links for g in snapshot.gpus] == [4, 4, 4, 4]


def test_without_a_p2p_status_peering_comes_from_the_links(fake_host):
    fake = bridged_pairs(reference_nvml())
    for gpu in fake.gpus:
        gpu.errors["nvmlDeviceGetP2PStatus"] = NOT_SUPPORTED  # an older driver for this query

    snapshot = read(fake_host, fake)

    assert [g.nvlink_peers for g in snapshot.gpus] == [(UUIDS[1],), (UUIDS[0],), (UUIDS[3],), (UUIDS[2],)]
    assert all(g.problems == () for g in snapshot.gpus)


def test_nvlink_calls_that_fail_leave_peering_unknown_and_say_why(fake_host):
    fake = reference_nvml()
    fake.gpus[1].errors["nvmlDeviceGetP2PStatus"] = UNKNOWN  # asked with GPU 1 first: its pairs with 2 and 3
    fake.gpus[1].errors["nvmlDeviceGetNvLinkState"] = UNKNOWN

    snapshot = read(fake_host, fake)

    assert snapshot.gpus[0].nvlink_peers == (UUIDS[1], UUIDS[2], UUIDS[3])  # every pair of GPU 0 is known
    assert [g.nvlink_peers for g in snapshot.gpus[1:]] == [None, None, None]  # each has a pair with 1 unknown
    assert snapshot.gpus[1].nvlink_links is None
    problems = " ".join(snapshot.gpus[1].problems)
    assert "nvmlDeviceGetNvLinkState: NVMLError_Unknown" in problems
    assert "nvmlDeviceGetP2PStatus: NVMLError_Unknown" in problems


def test_nvlink_is_read_once_per_enumeration(fake_host):
    fake = reference_nvml()
    reference_node(fake_host)
    reader = GpuReaders(NvmlSession(nvml=fake)).nvml
    reader.read(fake_host.paths)
    calls = len(fake.calls_to("nvmlDeviceGetNvLinkState")), len(fake.calls_to("nvmlDeviceGetP2PStatus"))

    reader.read(fake_host.paths)

    assert calls == (4 * 18, 6)
    assert (len(fake.calls_to("nvmlDeviceGetNvLinkState")), len(fake.calls_to("nvmlDeviceGetP2PStatus"))) == calls


def test_the_fake_answers_as_nvml_documents():
    fake = reference_nvml()
    fake.nvmlInit()
    gpu = fake.gpus[0]
    assert fake.nvmlDeviceGetNvLinkState(gpu, 17) == 1
    assert fake.nvmlDeviceGetNvLinkRemoteDeviceType(gpu, 0) == NVLINK_SWITCH
    assert fake.nvmlDeviceGetNvLinkRemotePciInfo(gpu, 1).busId == NVSWITCHES[1]
    with pytest.raises(NVMLError) as past:
        fake.nvmlDeviceGetNvLinkState(gpu, 18)
    assert type(past.value).__name__ == "NVMLError_InvalidArgument"
    gpu.pcie_levels[fake.gpus[1].uuid] = TOPOLOGY_HOSTBRIDGE
    assert fake.nvmlDeviceGetTopologyCommonAncestor(gpu, fake.gpus[1]) == TOPOLOGY_HOSTBRIDGE
    assert fake.nvmlDeviceGetP2PStatus(gpu, fake.gpus[3], fake.NVML_P2P_CAPS_INDEX_NVLINK) == fake.NVML_P2P_STATUS_OK
    assert nvml_bus_id("0000:18:00.0") == "00000000:18:00.0"


def test_the_nvlink_fields_round_trip_through_the_recording_and_an_old_recording_still_loads(fake_host):
    snapshot = read(fake_host, reference_nvml())
    recording = next(spec for spec in SOURCES if spec.name == "nvml").recording

    assert recording.load(recording.dump(snapshot)) == snapshot
    old = recording.dump(replace(snapshot, gpus=tuple(replace(g, nvlink_peers=None) for g in snapshot.gpus)))
    text = old.replace(b'"nvlink_peers": null, ', b"")
    assert b"nvlink_peers" not in text and recording.load(text).gpus[0].nvlink_peers is None


# --------------------------------------------------------------------------------------------------- the check
def evaluate_with(fake_host, fake: FakeNvml):
    node = reference_node(fake_host)
    gpu = GpuReaders(NvmlSession(nvml=fake))
    host = HostReader(node.paths, nvml=gpu.session, clock=gpu.clock).read()
    return evaluate(host, REFERENCE, [CONTAINER_GPUS_NOT_PEERED])


def test_the_reference_node_on_nvswitches_is_clean(fake_host):
    evaluation = evaluate_with(fake_host, reference_nvml())

    assert (evaluation.findings, evaluation.not_evaluated, evaluation.not_applicable) == ((), (), ())


def test_a_tp2_pod_on_pcie_only_gpus_fires_with_its_gpus_and_their_pcie_path(fake_host):
    fake = pcie_only(reference_nvml())
    fake.gpus[0].pcie_levels[GPUS[1].uuid] = TOPOLOGY_HOSTBRIDGE

    findings = evaluate_with(fake_host, fake).findings

    by_pod = {f.labels["pod"]: f for f in findings}
    vllm = by_pod[VLLM.name]
    assert dict(vllm.labels) == {
        "namespace": "inference", "pod": VLLM.name, "pod_uid": VLLM.uid, "container": "vllm",
        "gpu": f"{GPUS[0].pci_address},{GPUS[1].pci_address}",
    }  # fmt: skip
    assert f"{GPUS[0].pci_address} and {GPUS[1].pci_address} (PCIe PHB)" in vllm.message
    assert "no NVLink at all" in vllm.message
    assert set(by_pod) == {VLLM.name, TRTLLM.name}


def test_gpus_bridged_across_the_pods_pairs_fire_for_the_pod_that_straddles(fake_host):
    node_fake = bridged_pairs(reference_nvml())
    node = reference_node(fake_host)
    # vllm gets GPUs 0 and 2 (not bridged to each other), trtllm keeps 2 and 3
    node.device_numa[VLLM.uid] = 0
    from fakehost.kubelet import write_device_checkpoint

    write_device_checkpoint(
        fake_host,
        entries=[
            DeviceAssignment(VLLM.uid, "vllm", "nvidia.com/gpu", {0: (GPUS[0].uuid,), 1: (GPUS[2].uuid,)}),
            DeviceAssignment(TRTLLM.uid, "trtllm", "nvidia.com/gpu", {1: (GPUS[2].uuid, GPUS[3].uuid)}),
        ],
        registered={"nvidia.com/gpu": UUIDS},
    )
    host = HostReader(node.paths, nvml=NvmlSession(nvml=node_fake)).read()

    (finding,) = evaluate(host, REFERENCE, [CONTAINER_GPUS_NOT_PEERED]).findings

    assert finding.labels["pod"] == VLLM.name
    assert "have no NVLink at all" not in finding.message


def test_without_nvml_the_check_is_not_evaluated_and_without_multi_gpu_containers_not_applicable(fake_host):
    node = reference_node(fake_host)
    no_nvml = evaluate(node.read(), REFERENCE, [CONTAINER_GPUS_NOT_PEERED])
    one_each = replace_state(
        reference_snapshot(),
        devices=replace(
            reference_snapshot().kubelet_state.devices,
            entries=(DeviceAssignment(VLLM.uid, "vllm", "nvidia.com/gpu", {0: (GPUS[0].uuid,)}),),
        ),
    )

    assert "needs the nvml source: NVML is not enabled" in no_nvml.not_evaluated[0].reason
    (item,) = evaluate(one_each, REFERENCE, [CONTAINER_GPUS_NOT_PEERED]).not_applicable
    assert "no container holds two or more GPUs" in item.reason


def test_peering_unknown_for_a_gpu_is_not_evaluated(fake_host):
    results = reference_gpu_results()
    nvml = results["nvml"]
    host = with_results(
        reference_snapshot(), nvml=replace(nvml, gpus=tuple(replace(g, nvlink_peers=None) for g in nvml.gpus))
    )

    evaluation = evaluate(host, REFERENCE, [CONTAINER_GPUS_NOT_PEERED])

    assert evaluation.findings == ()
    assert "inference/vllm-llama-0/vllm" in evaluation.not_evaluated[0].reason


def test_time_sliced_replicas_count_once_and_mig_instances_are_not_judged():
    host = replace_state(
        reference_snapshot(),
        devices=replace(
            reference_snapshot().kubelet_state.devices,
            entries=(
                DeviceAssignment(VLLM.uid, "vllm", "nvidia.com/gpu", {0: (f"{GPUS[0].uuid}::0", f"{GPUS[0].uuid}::1")}),
                DeviceAssignment(TRTLLM.uid, "trtllm", "nvidia.com/gpu", {1: ("MIG-1111", "MIG-2222")}),
            ),
        ),
    )
    by_container = {w.container_name: physical_gpus(w) for w in build_workloads(host, REFERENCE)}

    assert [g.uuid for g in by_container["vllm"]] == [GPUS[0].uuid]
    assert by_container["trtllm"] == ()


def test_the_nvlink_metric_counts_links_per_gpu(fake_host):
    node = reference_node(fake_host)
    host = HostReader(node.paths, nvml=NvmlSession(nvml=bridged_pairs(reference_nvml()))).read()
    exposition = metrics.render(evaluate(host, REFERENCE)).decode()
    (family,) = [f for f in text_string_to_metric_families(exposition) if f.name == "numawatch_gpu_nvlink_links"]

    assert {(s.labels["gpu"], s.labels["switch"], s.value) for s in family.samples} == {
        (gpu.pci_address, "false", 4.0) for gpu in GPUS
    }
