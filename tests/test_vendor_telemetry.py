"""Telemetry of the other vendors' accelerators: AMD SMI (sources/amdsmi.py) and HLML (sources/hlml.py)
through their sessions, on the reference node with AMD Instinct or Gaudi accelerators in its GPU slots
(tests/fakehost), the libraries faked from their documented Python APIs (tests/fake_amdsmi.py, tests/fake_pyhlml.py).

Up with the library: busy, sampled and held-idle seconds, memory, the processes and their containers, the holders'
threads, gpu_holder_mismatch firing and clean; down with the reason without it; a hung call bounded; garbled answers
a problem of one GPU; an NVIDIA node never touching either library; a real ``numawatch serve`` exposing both.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fake_amdsmi import NO_PERM, NOT_SUPPORTED, FakeAmdSmi, reference_amdsmi
from fake_library import wait_idle
from fake_pyhlml import UNKNOWN, FakeHlml, reference_hlml
from fake_pynvml import FakeThread, reference_pid, write_reference_threads, write_threads
from fakehost.reference import GPUS, NODE_CPUS, TRTLLM, VLLM, reference_node
from numawatch import capture, metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.sources.amdsmi import amdsmi_session
from numawatch.sources.hlml import hlml_session
from prometheus_client.parser import text_string_to_metric_families
from serving import numawatch_serve
from test_nvml_metrics import gpu_rows

TESTS = Path(__file__).resolve().parent


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def series(text: str, name: str) -> dict[str, dict[str, object]]:
    """Samples of one family: label set (sorted pairs) -> value."""
    found: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def by_gpu(text: str, name: str) -> dict[str, float]:
    return {dict(labels)["gpu"]: value for labels, value in series(text, name).items()}


def amd_reader(fake_host, fake, clock, **session):
    return HostReader(fake_host.paths, clock=clock, libraries={"amdsmi": amdsmi_session(fake, **session)})


def hlml_reader(fake_host, fake, clock, **session):
    return HostReader(fake_host.paths, clock=clock, libraries={"hlml": hlml_session(fake, **session)})


def close(reader: HostReader) -> None:
    for session in reader.context.libraries.values():
        session.close()


def read_twice(reader: HostReader, clock: Clock, seconds: float = 15):
    reader.read()
    clock.now += seconds
    return reader.read()


# --------------------------------------------------------------------------------------------------- AMD SMI up
@pytest.fixture
def amd_node(fake_host):
    node = reference_node(fake_host, vendor="amd")
    write_reference_threads(fake_host)
    fake = reference_amdsmi()
    clock = Clock()
    reader = amd_reader(fake_host, fake, clock)
    yield node, fake, reader, clock
    close(reader)


def test_amd_smi_gives_busy_held_idle_memory_and_processes_with_their_containers(amd_node):
    _node, fake, reader, clock = amd_node

    host = read_twice(reader, clock)

    assert host.statuses["amdsmi"].up, host.statuses["amdsmi"].reason
    gpus = host.amdsmi.gpus
    assert [(g.pci_address, g.vendor, g.up) for g in gpus] == [(gpu.pci_address, "amd", True) for gpu in GPUS]
    first = gpus[0]
    # The uuid is sysfs's stable id of the function (numawatch_gpu_info's), not AMD SMI's own
    assert first.uuid == host.gpus.by_pci(first.pci_address).uuid
    assert first.utilization == pytest.approx(0.6)
    assert first.busy_seconds == pytest.approx(0.6 * 15)
    assert first.sampled_seconds == pytest.approx(15)
    assert first.held_idle_seconds == pytest.approx(0.4 * 15)
    assert (first.memory_used_bytes, first.memory_total_bytes) == (40 << 30, 192 << 30)
    (process,) = first.processes
    assert (process.pid, process.used_memory_bytes) == (reference_pid(VLLM), 40 << 30)
    assert (process.container_id, process.pod_uid) == (VLLM.container.container_id, VLLM.uid)
    assert fake.init_flags == [fake.AmdSmiInitFlags.INIT_AMD_GPUS]
    assert len(fake.calls_to("amdsmi_get_processor_handles")) == 1  # enumerated once, not every evaluation
    # The holders are read from AMD SMI's processes as from NVML's
    assert host.statuses["processes"].up
    assert set(host.processes.containers) == {VLLM.container.container_id, TRTLLM.container.container_id}


def test_amd_telemetry_families_carry_the_vendor_and_match_the_docs_table(amd_node):
    _, _, reader, clock = amd_node

    text = metrics.render(evaluate(read_twice(reader, clock), REFERENCE)).decode()

    busy = series(text, "numawatch_gpu_busy_seconds_total")
    assert {dict(labels)["vendor"] for labels in busy} == {"amd"}
    assert by_gpu(text, "numawatch_gpu_held_idle_seconds_total")[GPUS[2].pci_address] == pytest.approx(0.05 * 15)
    assert set(by_gpu(text, "numawatch_gpu_telemetry_up").values()) == {1.0}
    assert {dict(labels)["library"] for labels in series(text, "numawatch_gpu_telemetry_up")} == {"amdsmi"}
    assert by_gpu(text, "numawatch_gpu_memory_total_bytes")[GPUS[0].pci_address] == 192 << 30
    holders = {(dict(labels)["gpu"], dict(labels)["container"]) for labels in series(text, "numawatch_gpu_processes")}
    assert holders == {(GPUS[0].pci_address, "vllm"), (GPUS[1].pci_address, "vllm"),
                       (GPUS[2].pci_address, "trtllm"), (GPUS[3].pci_address, "trtllm")}  # fmt: skip
    calls = {dict(labels)["call"] for labels in series(text, "numawatch_gpu_library_call_seconds_count")}
    assert "amdsmi_get_gpu_activity" in calls
    assert series(text, "numawatch_gpu_nvml_up") == {}  # NVML's own family stays NVML's
    # docs/metrics.md's GPU table: the labels of every family this node has series of
    rows = gpu_rows()
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        if name in rows and family.samples:
            labels = {key for sample in family.samples for key in sample.labels if key != "quantile"}
            assert labels == rows[name][1], name


def test_the_holder_check_is_clean_when_each_amd_gpus_processes_are_its_assigned_containers(amd_node):
    _, _, reader, clock = amd_node

    evaluation = evaluate(read_twice(reader, clock), REFERENCE)

    assert "gpu_holder_mismatch" not in {item.check for item in evaluation.not_evaluated}
    assert [f for f in evaluation.findings if f.check == "gpu_holder_mismatch"] == []


def test_trtllm_on_an_amd_gpu_assigned_to_vllm_is_a_holder_mismatch(amd_node):
    _, fake, reader, clock = amd_node
    fake.gpus[0].processes.append((reference_pid(TRTLLM), 1 << 30))

    evaluation = evaluate(read_twice(reader, clock), REFERENCE)

    found = [dict(f.labels) for f in evaluation.findings if f.check == "gpu_holder_mismatch"]
    assert [(f["gpu"], f["container"], f["reason"]) for f in found] == [
        (GPUS[0].pci_address, "trtllm", "other_container")
    ]


def test_threads_of_an_amd_gpu_process_off_the_gpus_node_are_remote(amd_node):
    node, _, reader, clock = amd_node
    pid = reference_pid(VLLM)
    far = min(NODE_CPUS[1])  # vllm's GPUs are on node 0: one thread may also run on a CPU of node 1
    write_threads(node.host, pid, [FakeThread(pid, frozenset(VLLM.exclusive) | {far})])

    evaluation = evaluate(read_twice(reader, clock), REFERENCE)

    found = [dict(f.labels) for f in evaluation.findings if f.check == "gpu_process_remote"]
    assert {f["gpu"] for f in found} == {gpu.pci_address for gpu in GPUS[:2]}


@pytest.mark.slow
def test_old_amd_smi_process_handles_are_described_one_by_one(fake_host):
    reference_node(fake_host, vendor="amd")
    fake = reference_amdsmi(process_handles=True)
    reader = amd_reader(fake_host, fake, Clock())
    try:
        host = reader.read()
    finally:
        close(reader)

    assert [p.pid for p in host.amdsmi.gpus[0].processes] == [reference_pid(VLLM)]
    assert fake.calls_to("amdsmi_get_gpu_process_info")


# --------------------------------------------------------------------------------------------------- AMD SMI faults
def test_without_the_amdsmi_package_the_source_is_down_saying_so(fake_host):
    if "amdsmi" in sys.modules or any((Path(p) / "amdsmi").exists() for p in sys.path if p):
        pytest.skip("an amdsmi module is installed here")
    reference_node(fake_host, vendor="amd")
    reader = HostReader(fake_host.paths, libraries={"amdsmi": amdsmi_session()})
    try:
        host = reader.read()
    finally:
        close(reader)

    assert host.statuses["amdsmi"].reason == "the amdsmi package (module amdsmi) is not installed"
    assert host.statuses["processes"].reason == "the GPU holders are unknown: the nvml and amdsmi sources are down"
    assert host.statuses["gpus_sysfs"].up and len(host.gpus.gpus) == 4
    evaluation = evaluate(host, REFERENCE)
    reasons = {item.check: item.reason for item in evaluation.not_evaluated}
    assert "needs the amdsmi source: the amdsmi package" in reasons["gpu_holder_mismatch"]


def test_without_the_amdgpu_driver_amd_smi_init_fails_and_is_retried_later(fake_host):
    reference_node(fake_host, vendor="amd")
    fake = reference_amdsmi(driver=False)
    clock = Clock()
    reader = HostReader(fake_host.paths, clock=clock, libraries={"amdsmi": amdsmi_session(fake, clock=clock)})
    try:
        first = reader.read()
        second = reader.read()
        fake.driver = True
        clock.now += 61
        third = reader.read()
    finally:
        close(reader)

    assert first.statuses["amdsmi"].reason.startswith("amdsmi_init failed: AmdSmiLibraryException: "
                                                      "AMDSMI_STATUS_DRIVER_NOT_LOADED")
    assert not second.statuses["amdsmi"].up and fake.init_calls == 2  # retried only after retry_after
    assert third.statuses["amdsmi"].up


@pytest.mark.slow
def test_a_hung_amd_smi_call_makes_the_source_down_without_blocking_the_evaluation(amd_node):
    _, fake, reader, _ = amd_node
    session = reader.context.libraries["amdsmi"]
    session.call_timeout = 0.2
    reader.read()
    fake.hang("amdsmi_get_gpu_activity")
    try:
        host = reader.read()  # returns although the call is still blocked

        assert "AMD SMI call amdsmi_get_gpu_activity did not return within 0.2s" in host.statuses["amdsmi"].reason
        assert host.statuses["gpus_sysfs"].up and host.statuses["cgroups"].up
        assert "has not returned" in reader.read().statuses["amdsmi"].reason
    finally:
        fake.release()
    assert wait_idle(session, 10)
    assert reader.read().statuses["amdsmi"].up


def test_amd_smi_errors_and_garbled_answers_leave_one_value_unknown_and_say_which(fake_host):
    reference_node(fake_host, vendor="amd")
    fake = reference_amdsmi()
    fake.gpus[0].errors["amdsmi_get_gpu_activity"] = NOT_SUPPORTED  # unknown, not a problem
    fake.gpus[1].errors["amdsmi_get_gpu_memory_usage"] = NO_PERM
    fake.gpus[2].values["amdsmi_get_gpu_activity"] = {"gfx_activity": 250}
    fake.gpus[3].values["amdsmi_get_gpu_asic_info"] = {"market_name": "MI300X\x1b[31m"}
    fake.gpus[3].activity = "N/A"
    reader = amd_reader(fake_host, fake, Clock())
    try:
        gpus = reader.read().amdsmi.gpus
    finally:
        close(reader)

    assert (gpus[0].utilization, gpus[0].problems) == (None, ())
    assert gpus[1].memory_used_bytes is None
    assert gpus[1].problems == ("amdsmi_get_gpu_memory_usage: AmdSmiLibraryException: AMDSMI_STATUS_NO_PERM - "
                                "Permission Denied",)
    assert gpus[2].utilization is None and gpus[2].problems == (
        "amdsmi_get_gpu_activity: gfx_activity 250 is not a percentage",)
    assert gpus[3].name is None and "control characters" in gpus[3].problems[0]
    assert gpus[3].utilization is None and len(gpus[3].problems) == 1  # N/A: the GPU cannot say
    assert all(gpu.up for gpu in gpus) and gpus[2].processes  # the other values still read


def test_an_amd_smi_address_that_is_no_pci_address_is_a_problem_and_never_a_label(fake_host):
    reference_node(fake_host, vendor="amd")
    fake = reference_amdsmi()
    fake.gpus[0].bdf = "0000:zz:00.0\n"
    reader = amd_reader(fake_host, fake, Clock())
    try:
        gpu = reader.read().amdsmi.gpus[0]
    finally:
        close(reader)

    assert gpu.pci_address is None
    assert gpu.problems[0].startswith("amdsmi_get_gpu_device_bdf: BDF ")


@pytest.mark.slow
def test_a_new_amd_gpu_on_the_bus_makes_amd_smi_enumerate_again(amd_node):
    node, fake, reader, _ = amd_node
    reader.read()
    from fakehost.gpus import add_amd_gpu

    add_amd_gpu(node.host, "0000:e1:00.0", numa_node=1, local_cpus=NODE_CPUS[1], kfd_node=9)
    reader.invalidate("gpus_sysfs")  # what a hotplug uevent does
    fake.gpus.append(type(fake.gpus[0])(bdf="0000:e1:00.0", activity=10))

    host = reader.read()

    assert fake.init_calls == 2 and fake.shutdown_calls == 1
    assert [g.pci_address for g in host.amdsmi.gpus][-1] == "0000:e1:00.0"


def test_on_an_nvidia_node_amd_smi_and_hlml_are_up_without_gpus_and_never_loaded(fake_host):
    reference_node(fake_host)
    amd, hl = FakeAmdSmi(), FakeHlml()
    reader = HostReader(fake_host.paths, libraries={"amdsmi": amdsmi_session(amd), "hlml": hlml_session(hl)})
    try:
        host = reader.read()
    finally:
        close(reader)

    assert host.statuses["amdsmi"].up and host.amdsmi.gpus == ()
    assert host.statuses["hlml"].up and host.hlml.gpus == ()
    assert amd.log == [] and hl.log == []
    # NVML is not enabled here: the holders are unknown because of NVML alone
    assert host.statuses["processes"].reason == "the GPU holders are unknown: the nvml source is down"


def test_without_a_session_an_amd_node_says_amd_smi_is_not_enabled(fake_host):
    reference_node(fake_host, vendor="amd")

    host = HostReader(fake_host.paths).read()

    assert host.statuses["amdsmi"].reason == "AMD SMI is not enabled in this numawatch process"
    assert host.statuses["hlml"].up and host.hlml.gpus == ()


# --------------------------------------------------------------------------------------------------- HLML
@pytest.fixture
def gaudi_node(fake_host):
    node = reference_node(fake_host, vendor="habana")
    fake = reference_hlml()
    clock = Clock()
    reader = hlml_reader(fake_host, fake, clock)
    yield node, fake, reader, clock
    close(reader)


def test_hlml_gives_busy_seconds_and_memory_of_each_gaudi_and_no_processes(gaudi_node):
    _, _fake, reader, clock = gaudi_node

    host = read_twice(reader, clock)

    assert host.statuses["hlml"].up, host.statuses["hlml"].reason
    first = host.hlml.gpus[0]
    assert (first.pci_address, first.vendor, first.name) == (GPUS[0].pci_address, "habana", "HL-225")
    assert first.uuid == host.gpus.by_pci(first.pci_address).uuid  # the serial sysfs gives
    assert first.busy_seconds == pytest.approx(0.6 * 15) and first.sampled_seconds == pytest.approx(15)
    assert first.held_idle_seconds == 0  # HLML lists no processes: whether it was held is unknown
    assert first.processes is None
    assert (first.memory_used_bytes, first.memory_total_bytes) == (40 << 30, 96 << 30)
    text = metrics.render(evaluate(host, REFERENCE)).decode()
    assert {dict(labels)["vendor"] for labels in series(text, "numawatch_gpu_busy_seconds_total")} == {"habana"}
    assert {dict(labels)["library"] for labels in series(text, "numawatch_gpu_telemetry_up")} == {"hlml"}
    assert series(text, "numawatch_gpu_processes") == {}
    rows = gpu_rows()
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        if name in rows and family.samples:
            labels = {key for sample in family.samples for key in sample.labels if key != "quantile"}
            assert labels == rows[name][1], name


def test_a_lost_gaudi_is_down_and_not_called_again_while_the_others_report(gaudi_node):
    _, fake, reader, clock = gaudi_node
    reader.read()
    fake.devices[1].lost = True
    clock.now += 15
    host = reader.read()
    calls = len(fake.calls_to("hlmlDeviceGetUtilizationRates"))
    clock.now += 15
    again = reader.read()

    lost = host.hlml.gpus[1]
    assert (lost.up, lost.reason) == (False, "HLMLError_AipIsLost (the accelerator fell off the bus)")
    assert all(g.up for i, g in enumerate(again.hlml.gpus) if i != 1)
    assert len(fake.calls_to("hlmlDeviceGetUtilizationRates")) == calls + 3  # not the lost one
    text = metrics.render(evaluate(again, REFERENCE)).decode()
    assert by_gpu(text, "numawatch_gpu_telemetry_up")[GPUS[1].pci_address] == 0


@pytest.mark.slow
def test_without_libhlml_the_hlml_source_is_down_with_the_reason(fake_host):
    reference_node(fake_host, vendor="habana")
    reader = hlml_reader(fake_host, reference_hlml(library=False), Clock())
    try:
        host = reader.read()
    finally:
        close(reader)

    assert host.statuses["hlml"].reason == (
        "hlmlInit failed: HLMLError_Uninitialized (HLML is not initialised: no libhlml.so (/usr/lib/habanalabs) or "
        "no habanalabs driver)")
    assert host.statuses["gpus_sysfs"].up


@pytest.mark.slow
def test_an_hlml_error_on_one_call_is_a_problem_of_that_gaudi(gaudi_node):
    _, fake, reader, _ = gaudi_node
    fake.devices[0].errors["hlmlDeviceGetMemoryInfo"] = UNKNOWN
    fake.devices[1].values["hlmlDeviceGetUtilizationRates"] = -3

    gpus = reader.read().hlml.gpus

    assert gpus[0].memory_used_bytes is None and gpus[0].memory_total_bytes is None
    assert gpus[0].problems == ("hlmlDeviceGetMemoryInfo: HLMLError_Unknown: Unknown",) * 2
    assert gpus[1].problems == ("hlmlDeviceGetUtilizationRates: utilization -3 is not a percentage",)


# --------------------------------------------------------------------------------------------------- capture
@pytest.mark.slow
def test_a_captured_amd_node_is_judged_the_same_offline(amd_node, tmp_path):
    _, _, reader, _ = amd_node
    bundle = tmp_path / "node.tar.gz"

    capture.capture(reader.paths, REFERENCE, bundle, libraries=reader.context.libraries)
    evaluation = capture.evaluate_bundle(str(bundle))

    assert evaluation.host.statuses["amdsmi"].up
    assert [g.pci_address for g in evaluation.host.amdsmi.gpus] == [gpu.pci_address for gpu in GPUS]
    assert evaluation.host.statuses["processes"].up


# --------------------------------------------------------------------------------------------------- serve
@pytest.mark.parametrize(("vendor", "library"), [("amd", "amdsmi"), ("habana", "hlml")])
@pytest.mark.slow
def test_numawatch_serve_exposes_the_vendor_telemetry_from_its_library(fake_host, vendor, library):
    reference_node(fake_host, vendor=vendor)
    write_reference_threads(fake_host)
    env_path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    wrapper = ("env", f"PYTHONPATH={env_path}", f"FAKE_GPU_LIBRARY={library}")

    with numawatch_serve(fake_host.root, "--no-self-pin", "--no-nvml", module="serve_with_fake_vendors",
                         wrapper=wrapper) as (_, url):  # fmt: skip
        text = ""
        for _ in range(150):
            try:
                with urllib.request.urlopen(f"{url}metrics", timeout=5) as response:
                    text = response.read().decode()
            except urllib.error.HTTPError as error:  # 503 until the first evaluation is done
                assert error.code == 503
                time.sleep(0.2)
                continue
            busy = series(text, "numawatch_gpu_busy_seconds_total")
            if busy and all(value > 0 for value in busy.values()):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no busy seconds served:\n{text}")

    assert {dict(labels)["vendor"] for labels in busy} == {vendor}
    assert {dict(labels)["gpu"] for labels in busy} == {gpu.pci_address for gpu in GPUS}
    assert series(text, "numawatch_source_up")[(("source", library),)] == 1
    if vendor == "amd":
        holders = {dict(labels)["container"] for labels in series(text, "numawatch_gpu_processes")}
        assert holders == {"vllm", "trtllm"}
