"""gpu_process_remote, gpu_process_memlock and gpu_holder_mismatch, firing and clean, end to end: the reference node's
files (fakehost.reference) plus the fake pynvml, read by the real sources and judged by the registered checks."""

from __future__ import annotations

import pytest
from fake_pynvml import (
    FakeGpu,
    FakeNvml,
    FakeThread,
    nvml_bus_id,
    reference_nvml,
    reference_pid,
    write_reference_threads,
    write_threads,
)
from fakehost.reference import GPUS, NODE_CPUS, NODE_EXPORTER, ONLINE, TRTLLM, VLLM, reference_node
from gpu_readers import GpuReaders
from numawatch.checks import Evaluation, Finding, evaluate
from numawatch.checks.gpu_process import CHECKS
from numawatch.checks.registry import CHECKS as REGISTERED
from numawatch.cpuset import format_cpulist
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.nvml_session import NvmlSession

IDS = ("gpu_process_remote", "gpu_process_memlock", "gpu_holder_mismatch")
DEVICE_CHECKPOINT = "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"


def gpu_node(fake_host, *, memlock: int | None = None) -> FakeNvml:
    """The clean reference node with its GPU processes' threads; returns its NVML, for the test to change."""
    reference_node(fake_host)
    write_reference_threads(fake_host, memlock=memlock)
    return reference_nvml()


def run(fake_host, fake: FakeNvml) -> Evaluation:
    gpu = GpuReaders(NvmlSession(nvml=fake))
    try:
        return evaluate(HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock).read(), REFERENCE)
    finally:
        gpu.session.close()


def found(evaluation: Evaluation, check: str) -> list[Finding]:
    return [f for f in evaluation.findings if f.check == check]


def not_evaluated(evaluation: Evaluation) -> dict[str, str]:
    return {item.check: item.reason for item in evaluation.not_evaluated}


def test_the_three_checks_are_registered_in_order():
    assert tuple(c.id for c in CHECKS) == IDS
    assert set(IDS) <= {c.id for c in REGISTERED}


@pytest.mark.slow
def test_the_reference_node_with_its_gpu_processes_is_clean(fake_host):
    evaluation = run(fake_host, gpu_node(fake_host))

    assert [f for f in evaluation.findings if f.check in IDS] == []
    assert not set(IDS) & set(not_evaluated(evaluation))


# --------------------------------------------------------------------------------------------- gpu_process_remote
def test_remote_fires_for_an_early_thread_left_on_every_cpu_by_late_pinning(fake_host):
    fake = gpu_node(fake_host)
    pid = reference_pid(VLLM)
    write_threads(fake_host, pid, [FakeThread(pid, ONLINE)])  # the main thread predates the pinning

    findings = found(run(fake_host, fake), "gpu_process_remote")

    assert [f.labels["gpu"] for f in findings] == [GPUS[0].pci_address, GPUS[1].pci_address]
    finding = findings[0]
    assert dict(finding.labels) == {
        "namespace": "inference",
        "pod": "vllm-llama-0",
        "pod_uid": VLLM.uid,
        "container": "vllm",
        "gpu": GPUS[0].pci_address,
        "uuid": GPUS[0].uuid,
        "cpus": format_cpulist(NODE_CPUS[1]),
        "numa_node": "0",
    }
    assert finding.severity == "warning"
    assert finding.message.startswith("1 of 4 threads of inference/vllm-llama-0/vllm (PID 4100), which uses GPU")


@pytest.mark.slow
def test_remote_fires_when_the_whole_process_is_pinned_to_the_other_node(fake_host):
    fake = gpu_node(fake_host)
    pid = reference_pid(TRTLLM)
    write_threads(
        fake_host, pid, [FakeThread(tid, frozenset({1, 2})) for tid in (pid, *(pid * 10 + k for k in (1, 2, 3)))]
    )

    findings = found(run(fake_host, fake), "gpu_process_remote")

    assert {(f.labels["container"], f.labels["gpu"], f.labels["cpus"]) for f in findings} == {
        ("trtllm", GPUS[2].pci_address, "1-2"),
        ("trtllm", GPUS[3].pci_address, "1-2"),
    }
    assert "4 of 4 threads" in findings[0].message


@pytest.mark.slow
def test_remote_judges_a_process_on_gpus_of_both_nodes_against_both_nodes(fake_host):
    fake = gpu_node(fake_host)
    pid = reference_pid(VLLM)
    fake.gpus[2].processes.append((pid, 1 << 30))  # vllm also drives a GPU on node 1
    write_threads(fake_host, pid, [FakeThread(pid, ONLINE)])

    assert found(run(fake_host, fake), "gpu_process_remote") == []


@pytest.mark.slow
def test_remote_ignores_offline_cpus_in_an_affinity_mask(fake_host):
    fake = gpu_node(fake_host)
    pid = reference_pid(VLLM)
    write_threads(fake_host, pid, [FakeThread(pid, VLLM.exclusive | {32, 33})])  # CPUs that do not exist here

    assert found(run(fake_host, fake), "gpu_process_remote") == []


@pytest.mark.slow
def test_remote_leaves_a_gpu_without_numa_node_to_gpu_numa_unknown(fake_host):
    fake = gpu_node(fake_host)
    fake.gpus[0].numa_nodes = frozenset()
    (fake_host.path("sys/bus/pci/devices") / GPUS[0].pci_address / "numa_node").write_text("-1\n")
    pid = reference_pid(VLLM)
    write_threads(fake_host, pid, [FakeThread(pid, ONLINE)])

    evaluation = run(fake_host, fake)

    assert [f.labels["gpu"] for f in found(evaluation, "gpu_process_remote")] == [GPUS[1].pci_address]
    assert [f.labels["gpu"] for f in found(evaluation, "gpu_numa_unknown")] == [GPUS[0].pci_address]


@pytest.mark.slow
def test_remote_names_a_host_process_by_its_command(fake_host):
    fake = gpu_node(fake_host)
    fake_host.write("proc/900/cgroup", "0::/system.slice/batch.service")
    fake_host.write("proc/900/comm", "batch-infer")
    write_threads(fake_host, 900, [FakeThread(900, ONLINE)])
    fake.gpus[3].processes.append((900, None))

    findings = found(run(fake_host, fake), "gpu_process_remote")

    assert [(f.labels["gpu"], f.labels["name"], f.labels["numa_node"]) for f in findings] == [
        (GPUS[3].pci_address, "batch-infer", "1")
    ]
    assert "host process batch-infer (PID 900)" in findings[0].message


# --------------------------------------------------------------------------------------------- gpu_process_memlock
def test_memlock_fires_per_container_with_the_soft_limit(fake_host):
    evaluation = run(fake_host, gpu_node(fake_host, memlock=64 * 1024))

    findings = found(evaluation, "gpu_process_memlock")
    assert sorted((f.labels["container"], f.labels["value"], f.labels["expected"]) for f in findings) == [
        ("trtllm", "65536", "unlimited"),
        ("vllm", "65536", "unlimited"),
    ]
    assert all("may lock only 64 KiB of memory" in f.message for f in findings)
    assert findings[0].severity == "warning"


@pytest.mark.slow
def test_memlock_is_clean_when_unlimited(fake_host):
    assert found(run(fake_host, gpu_node(fake_host, memlock=None)), "gpu_process_memlock") == []


def test_memlock_is_not_evaluated_when_no_limits_can_be_read(fake_host):
    fake = gpu_node(fake_host)
    for pod in (VLLM, TRTLLM):
        fake_host.remove(f"proc/{reference_pid(pod)}/limits")

    evaluation = run(fake_host, fake)

    assert "limits" in not_evaluated(evaluation)["gpu_process_memlock"]


# --------------------------------------------------------------------------------------------- gpu_holder_mismatch
@pytest.mark.slow
def test_mismatch_fires_when_another_container_uses_an_assigned_gpu(fake_host):
    fake = gpu_node(fake_host)
    fake.gpus[0].processes.append((reference_pid(TRTLLM), 1 << 30))

    findings = found(run(fake_host, fake), "gpu_holder_mismatch")

    assert len(findings) == 1
    labels = findings[0].labels
    assert (labels["gpu"], labels["container"], labels["reason"], labels["expected"]) == (
        GPUS[0].pci_address,
        "trtllm",
        "other_container",
        "inference/vllm-llama-0/vllm",
    )
    assert findings[0].severity == "critical"


def test_mismatch_fires_for_a_container_with_no_gpu_at_all(fake_host):
    fake = gpu_node(fake_host)
    fake.gpus[1].processes.append((reference_pid(NODE_EXPORTER), 1 << 20))

    (finding,) = found(run(fake_host, fake), "gpu_holder_mismatch")

    assert (finding.labels["pod"], finding.labels["gpu"]) == (NODE_EXPORTER.name, GPUS[1].pci_address)


@pytest.mark.slow
def test_mismatch_fires_on_a_gpu_the_plugin_assigned_to_nobody(fake_host):
    fake = gpu_node(fake_host)
    spare = "0000:bb:00.0"
    fake.gpus.append(FakeGpu("GPU-ffffffff-0000-4000-8000-000000000009", nvml_bus_id(spare), numa_nodes=frozenset({1})))
    fake.gpus[-1].processes.append((reference_pid(TRTLLM), 1 << 30))

    (finding,) = found(run(fake_host, fake), "gpu_holder_mismatch")

    assert (finding.labels["gpu"], finding.labels["reason"], finding.labels["expected"]) == (
        spare,
        "unassigned",
        "none",
    )


def test_mismatch_fires_for_a_host_process_on_an_assigned_gpu_but_not_on_a_free_one(fake_host):
    fake = gpu_node(fake_host)
    fake_host.write("proc/900/cgroup", "0::/system.slice/batch.service")
    fake.gpus[2].processes.append((900, None))
    fake.gpus.append(FakeGpu("GPU-free", "00000000:BC:00.0", numa_nodes=frozenset({1}), processes=[(900, None)]))

    findings = found(run(fake_host, fake), "gpu_holder_mismatch")

    assert [(f.labels["gpu"], f.labels["reason"]) for f in findings] == [(GPUS[2].pci_address, "host_process")]
    assert findings[0].labels["expected"] == "inference/trtllm-mistral-0/trtllm"


def test_mismatch_treats_replica_ids_as_their_gpu():
    from numawatch.checks.gpu_process import _assignments
    from numawatch.model import frozen_map
    from numawatch.model.kubelet import DeviceAssignment, DeviceCheckpoint, KubeletState

    state = KubeletState(
        cpu=None,
        memory=None,
        devices=DeviceCheckpoint(
            file="x",
            entries=(
                DeviceAssignment("pod-a", "app", "nvidia.com/gpu", frozen_map({0: ("GPU-1::0", "GPU-1::1")})),
                DeviceAssignment("pod-b", "app", "nvidia.com/mig-1g.10gb", frozen_map({0: ("MIG-7",)})),
                DeviceAssignment("pod-c", "app", "example.com/fpga", frozen_map({0: ("GPU-2",)})),
            ),
            registered=frozen_map(),
        ),
    )

    assigned, mig = _assignments(state, REFERENCE)

    assert assigned == {"GPU-1": {("pod-a", "app")}, "MIG-7": {("pod-b", "app")}}
    assert mig == {("pod-b", "app")}


@pytest.mark.slow
def test_mismatch_is_not_evaluated_without_the_device_checkpoint(fake_host):
    fake = gpu_node(fake_host)
    fake_host.remove(DEVICE_CHECKPOINT)

    assert "device-plugin checkpoint" in not_evaluated(run(fake_host, fake))["gpu_holder_mismatch"]


# --------------------------------------------------------------------------------------------- inputs missing
@pytest.mark.slow
def test_every_check_is_not_evaluated_when_nvml_is_down(fake_host):
    reference_node(fake_host)

    reasons = not_evaluated(run(fake_host, FakeNvml(library=False)))

    for check in IDS:
        assert "needs the " in reasons[check] and ("nvml" in reasons[check] or "processes" in reasons[check])
    assert "LibraryNotFound" in reasons["gpu_holder_mismatch"]
