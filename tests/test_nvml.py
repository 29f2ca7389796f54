"""The nvml source, through the fake pynvml: inventory, busy-time integration, processes mapped to containers, and
every way NVML fails (no library, empty sample buffers, a GPU lost mid-scrape, a hung call)."""

from __future__ import annotations

import re

import pytest
from fake_library import wait_idle
from fake_pynvml import (
    NO_PERMISSION,
    NOT_SUPPORTED,
    FakeGpu,
    FakeNvml,
    NVMLError,
    reference_nvml,
    reference_pid,
    write_reference_threads,
)
from fakehost.reference import GPUS, TRTLLM, VLLM, reference_node
from gpu_readers import GpuReaders
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import HostReader, read_host
from numawatch.intent import REFERENCE
from numawatch.model.gpu import UTILIZATION_RATES, UTILIZATION_SAMPLES
from numawatch.nvml_session import NvmlSession
from numawatch.paths import Paths
from numawatch.sources import SOURCES
from numawatch.sources.nvml import (
    MAX_SAMPLE_GAP_US,
    NvmlReader,
    cpu_words,
    mask_bits,
    normalise_bus_id,
    process_cgroup,
    sample_value,
)
from numawatch.sources.processes import ProcessReader


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def readers(fake: FakeNvml, clock: Clock, **session) -> GpuReaders:
    return GpuReaders(NvmlSession(nvml=fake, **session), clock=clock)


def only_gpu(samples=(), rate=0, processes=()) -> FakeNvml:
    return FakeNvml([FakeGpu("GPU-aaaa", "00000000:18:00.0", samples=list(samples), rate=rate,
                             processes=list(processes))])  # fmt: skip


# --------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("nvml", "sysfs"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("00000000:8D:00.0", "0000:8d:00.0"),
        ("00010000:01:00.0", "10000:01:00.0"),  # a VMD domain keeps its fifth digit
        (b"00000000:AB:00.0", "0000:ab:00.0"),  # very old bindings returned bytes
    ],
)
def test_nvml_bus_ids_are_normalised_to_sysfs_spelling(nvml, sysfs):
    assert normalise_bus_id(nvml) == sysfs


@pytest.mark.parametrize("bad", ["", "18:00.0", "0000:zz:00.0", "0000:18:00", "garbage"])
def test_malformed_bus_ids_are_unknown_not_guessed(bad):
    assert normalise_bus_id(bad) is None


def test_affinity_words_are_64_bits_each_lowest_first():
    assert mask_bits([0b101, 1 << 63, 1]) == {0, 2, 127, 128}
    assert mask_bits([0, 0]) == frozenset()


def test_sample_values_are_read_by_their_nvml_value_type():
    class Value:
        dVal, uiVal, ullVal = 1.5, 42, 7

    assert sample_value(1, Value()) == 42.0
    assert sample_value(0, Value()) == 1.5
    with pytest.raises(ValueError, match="unknown NVML value type 9"):
        sample_value(9, Value())


def test_cpu_mask_width_comes_from_the_possible_cpus(fake_host):
    fake_host.write("sys/devices/system/cpu/possible", "0-383")
    assert cpu_words(fake_host.paths) == 6
    fake_host.write("sys/devices/system/cpu/possible", "0")
    assert cpu_words(fake_host.paths) == 1
    fake_host.remove("sys/devices/system/cpu/possible")
    assert cpu_words(fake_host.paths) == 16


def test_a_malformed_proc_cgroup_names_the_file(fake_host):
    fake_host.write("proc/77/cgroup", "this is not a cgroup line")

    with pytest.raises(MalformedFile, match=r"proc/77/cgroup: expected 'id:controllers:/path'"):
        process_cgroup(fake_host.paths, 77)
    assert process_cgroup(fake_host.paths, 78) is None  # gone


# --------------------------------------------------------------------------------------------------- normal data
def test_inventory_joins_on_pci_address_and_uuid_with_numa_node_from_memory_affinity(fake_host, clock):
    reference_node(fake_host)
    gpu = readers(reference_nvml(), clock)

    snapshot = gpu.nvml.read(fake_host.paths)

    assert snapshot.driver_version == "570.86.15"
    assert [(g.index, g.uuid, g.pci_address, g.numa_node) for g in snapshot.gpus] == [
        (index, ref.uuid, ref.pci_address, ref.numa_node) for index, ref in enumerate(GPUS)
    ]
    assert all(g.up and g.name == "NVIDIA H100 80GB HBM3" for g in snapshot.gpus)
    assert snapshot.gpus[2].cpu_affinity == frozenset({*range(8, 16), *range(24, 32)})


@pytest.mark.parametrize(
    ("variant", "version"), [({}, 2), ({"cgroup_version": 1, "driver": "cgroupfs"}, 1), ({"runtime": "crio"}, 2)]
)
def test_compute_processes_are_mapped_to_their_container_and_pod_through_proc_cgroup(
    fake_host, clock, variant, version
):
    reference_node(fake_host, **variant)
    gpu = readers(reference_nvml(), clock)

    snapshot = gpu.nvml.read(fake_host.paths)

    vllm = snapshot.gpus[0].processes[0]
    assert (vllm.pid, vllm.container_id, vllm.pod_uid) == (reference_pid(VLLM), VLLM.container.container_id, VLLM.uid)
    assert vllm.cgroup_version == version
    assert vllm.used_memory_bytes == 40 << 30
    trtllm = snapshot.gpus[3].processes[0]
    assert (trtllm.container_id, trtllm.pod_uid) == (TRTLLM.container.container_id, TRTLLM.uid)


def test_a_process_outside_any_container_is_a_host_process(fake_host, clock):
    fake_host.write("proc/900/cgroup", "0::/system.slice/llm-batch.service")
    gpu = readers(only_gpu(processes=[(900, None), (901, 1 << 30)]), clock)

    processes = gpu.nvml.read(fake_host.paths).gpus[0].processes

    assert [(p.pid, p.cgroup_path, p.container_id, p.pod_uid) for p in processes] == [
        (900, "/system.slice/llm-batch.service", None, None),
        (901, None, None, None),  # exited before we looked
    ]


def test_busy_time_integrates_samples_between_readings_and_counts_idle_only_while_held(fake_host, clock):
    fake = only_gpu(samples=[(1_000_000, 100)], processes=[(900, None)])
    fake_host.write("proc/900/cgroup", "0::/")
    gpu = readers(fake, clock)
    first = gpu.nvml.read(fake_host.paths).gpus[0]
    assert (first.busy_seconds, first.sampled_seconds) == (0.0, 0.0)  # the first reading is the baseline

    fake.gpus[0].samples += [(1_500_000, 100), (2_000_000, 50), (2_500_000, 0)]
    second = gpu.nvml.read(fake_host.paths).gpus[0]

    assert second.sampled_seconds == pytest.approx(1.5)
    assert second.busy_seconds == pytest.approx(0.5 + 0.25 + 0.0)
    assert second.held_idle_seconds == pytest.approx(0.25 + 0.5)
    assert (second.utilization, second.utilization_source) == (0.0, UTILIZATION_SAMPLES)
    # lastSeen is always a timestamp NVML returned: 0, then the newest sample of the previous reading.
    assert [args[2] for args in fake.calls_to("nvmlDeviceGetSamples")] == [0, 1_000_000]

    fake.gpus[0].processes = []
    fake.gpus[0].samples += [(3_000_000, 0)]
    third = gpu.nvml.read(fake_host.paths).gpus[0]
    assert third.held_idle_seconds == pytest.approx(second.held_idle_seconds)  # nobody held it: not a bubble
    assert third.sampled_seconds == pytest.approx(2.0)


def test_a_gap_between_samples_longer_than_any_sample_period_is_not_guessed(fake_host, clock):
    fake = only_gpu(samples=[(1_000_000, 100)])
    gpu = readers(fake, clock)
    gpu.nvml.read(fake_host.paths)

    fake.gpus[0].samples += [(1_000_000 + MAX_SAMPLE_GAP_US + 1, 100), (1_500_000 + MAX_SAMPLE_GAP_US + 1, 100)]
    reading = gpu.nvml.read(fake_host.paths).gpus[0]

    assert reading.sampled_seconds == pytest.approx(0.5)
    assert reading.busy_seconds == pytest.approx(0.5)


def test_an_empty_sample_buffer_falls_back_to_utilization_rates_over_the_elapsed_time(fake_host, clock):
    fake = only_gpu(samples=[(1_000_000, 100)], rate=0, processes=[(900, None)])
    fake_host.write("proc/900/cgroup", "0::/")
    gpu = readers(fake, clock)
    gpu.nvml.read(fake_host.paths)

    clock.now += 15  # the GPU idled: the driver produced no samples
    fake.gpus[0].rate = 20
    idle = gpu.nvml.read(fake_host.paths).gpus[0]

    assert (idle.utilization, idle.utilization_source) == (0.2, UTILIZATION_RATES)
    assert idle.sampled_seconds == pytest.approx(15)
    assert idle.busy_seconds == pytest.approx(3)
    assert idle.held_idle_seconds == pytest.approx(12)

    # Samples come back: the first one starts a new chain, so the 15 s are not counted twice.
    clock.now += 15
    fake.gpus[0].samples += [(40_000_000, 100), (40_500_000, 100)]
    back = gpu.nvml.read(fake_host.paths).gpus[0]
    assert back.sampled_seconds == pytest.approx(15.5)
    assert back.busy_seconds == pytest.approx(3.5)


def test_an_idle_gpu_with_an_empty_buffer_from_the_start_reads_as_idle(fake_host, clock):
    fake = only_gpu(rate=0)
    gpu = readers(fake, clock)
    gpu.nvml.read(fake_host.paths)
    clock.now += 10

    reading = gpu.nvml.read(fake_host.paths).gpus[0]

    assert (reading.busy_seconds, reading.sampled_seconds, reading.utilization) == (0.0, 10.0, 0.0)


def test_per_process_utilization_never_asks_from_timestamp_zero(fake_host, clock):
    reference_node(fake_host)
    fake = reference_nvml()
    gpu = readers(fake, clock)

    first = gpu.nvml.read(fake_host.paths)
    fake.gpus[0].process_samples.append((reference_pid(VLLM), 9_000_000, 40))
    second = gpu.nvml.read(fake_host.paths)

    stamps = [args[1] for args in fake.calls_to("nvmlDeviceGetProcessUtilization")]
    assert stamps and 0 not in stamps
    # First reading: from the newest GPU sample (2.5 s), so samples at 2.0-3.5 s newer than it average 80 %.
    assert first.gpus[0].processes[0].sm_utilization == pytest.approx(0.8)
    # Second: only the sample newer than the first reading's newest (3.5 s).
    assert second.gpus[0].processes[0].sm_utilization == pytest.approx(0.4)


def test_per_process_utilization_treats_nvml_error_zero_as_no_samples(fake_host, clock):
    reference_node(fake_host)
    fake = reference_nvml()
    fake.gpus[0].errors["nvmlDeviceGetProcessUtilization"] = 0  # pynvml raises NVMLError(SUCCESS) when empty
    gpu = readers(fake, clock)

    reading = gpu.nvml.read(fake_host.paths).gpus[0]

    assert reading.up and reading.problems == ()
    assert reading.processes[0].sm_utilization is None


def test_unsupported_and_forbidden_calls_leave_values_unknown_and_the_gpu_up(fake_host, clock):
    fake = only_gpu(samples=[(1_000_000, 50)])
    fake.gpus[0].errors.update(
        {"nvmlDeviceGetMemoryAffinity": NOT_SUPPORTED, "nvmlDeviceGetComputeRunningProcesses": NO_PERMISSION}
    )
    reading = readers(fake, clock).nvml.read(fake_host.paths).gpus[0]

    assert reading.up
    assert reading.numa_node is None
    assert reading.processes is None  # unknown, not "none"
    assert reading.problems == (
        "nvmlDeviceGetComputeRunningProcesses: NVMLError_NoPermission (no permission to use NVML)",
    )


def test_utilization_that_cannot_be_read_is_unknown_and_counts_no_time(fake_host, clock):
    fake = only_gpu(samples=[(1_000_000, 50)])
    fake.gpus[0].errors["nvmlDeviceGetSamples"] = NOT_SUPPORTED  # as on a MIG-enabled GPU
    gpu = readers(fake, clock)
    gpu.nvml.read(fake_host.paths)
    clock.now += 15

    reading = gpu.nvml.read(fake_host.paths).gpus[0]

    assert reading.up and (reading.utilization, reading.utilization_source) == (None, None)
    assert (reading.busy_seconds, reading.sampled_seconds) == (0.0, 0.0)
    assert reading.problems == ("nvmlDeviceGetSamples: NVMLError_NotSupported: Not Supported",)


def test_a_sample_value_type_numawatch_does_not_know_is_a_problem_not_a_crash(fake_host, clock):
    class NewerDriver(FakeNvml):
        def nvmlDeviceGetSamples(self, handle, kind, last_seen):
            return 42, super().nvmlDeviceGetSamples(handle, kind, last_seen)[1]

    fake = NewerDriver([FakeGpu("GPU-aaaa", "00000000:18:00.0", samples=[(1_000_000, 50)])])

    reading = readers(fake, clock).nvml.read(fake_host.paths).gpus[0]

    assert reading.up and reading.problems == ("nvmlDeviceGetSamples: unknown NVML value type 42",)


# --------------------------------------------------------------------------------------------------- failures
def test_a_gpu_lost_mid_scrape_is_down_while_the_others_keep_reporting(fake_host, clock):
    reference_node(fake_host)
    fake = reference_nvml()
    gpu = readers(fake, clock)
    gpu.nvml.read(fake_host.paths)

    fake.gpus[1].lost = True
    fake.gpus[1].samples.append((9_000_000, 100))
    snapshot = gpu.nvml.read(fake_host.paths)

    lost = snapshot.gpus[1]
    assert (lost.up, lost.reason) == (False, "NVMLError_GpuIsLost (the GPU fell off the bus)")
    assert lost.uuid == GPUS[1].uuid and lost.processes == ()
    assert [g.up for g in snapshot.gpus] == [True, False, True, True]
    assert snapshot.gpus[0].processes[0].container_id == VLLM.container.container_id

    # A lost GPU is not asked again (its calls could stall); a hotplug refresh retries it.
    asked = len(fake.log)
    gpu.nvml.read(fake_host.paths)
    assert not [name for name, args in fake.log[asked:] if args and args[0] is fake.gpus[1]]
    fake.gpus[1].lost = False
    gpu.nvml.invalidate({"gpus_sysfs"})
    assert gpu.nvml.read(fake_host.paths).gpus[1].up
    assert fake.init_calls == 2  # NVML enumerated again


def test_a_gpu_lost_before_enumeration_is_reported_down_by_index(fake_host, clock):
    fake = FakeNvml([FakeGpu("GPU-aaaa", "00000000:18:00.0"), FakeGpu("GPU-bbbb", "00000000:2a:00.0", lost=True)])

    snapshot = readers(fake, clock).nvml.read(fake_host.paths)

    assert [(g.index, g.uuid, g.up) for g in snapshot.gpus] == [(0, "GPU-aaaa", True), (1, None, False)]
    assert snapshot.gpus[1].reason.startswith("cannot open GPU 1: NVMLError_GpuIsLost")


def test_without_the_library_the_nvml_source_is_down_and_every_other_source_works(fake_host, clock):
    reference_node(fake_host)
    gpu = readers(reference_nvml(library=False), clock)

    host = HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock).read()

    assert not host.statuses["nvml"].up
    assert "NVMLError_LibraryNotFound" in host.statuses["nvml"].reason
    assert host.statuses["processes"].reason == "the GPU holders are unknown: the nvml source is down"
    others = {name: status.up for name, status in host.statuses.items() if name not in ("nvml", "processes")}
    assert others["gpus_sysfs"] and others["topology"] and others["cgroups"] and others["kubelet_state"]
    assert len(host.gpus.gpus) == 4


def test_a_hung_call_makes_the_source_down_without_blocking_the_evaluation(fake_host, clock):
    reference_node(fake_host)
    fake = reference_nvml()
    gpu = readers(fake, clock, call_timeout=0.2)
    reader = HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock)
    reader.read()
    fake.hang("nvmlDeviceGetSamples")
    try:
        host = reader.read()  # returns although the driver call is still blocked

        assert not host.statuses["nvml"].up
        assert "nvmlDeviceGetSamples did not return within 0.2s" in host.statuses["nvml"].reason
        assert not host.statuses["processes"].up
        assert host.statuses["gpus_sysfs"].up and host.statuses["cgroups"].up
        assert "has not returned" in reader.read().statuses["nvml"].reason  # fails fast while still stuck
    finally:
        fake.release()
    assert wait_idle(gpu.session, 10)
    assert reader.read().statuses["nvml"].up
    gpu.session.close()


def test_the_registry_placeholder_reports_nvml_not_enabled(fake_host):
    reference_node(fake_host)

    host = read_host(fake_host.paths)

    assert host.statuses["nvml"].reason == "NVML is not enabled in this numawatch process"
    assert not host.statuses["processes"].up


def test_the_host_reader_makes_the_nvml_and_processes_readers_on_its_session():
    session = NvmlSession(nvml=FakeNvml())
    paths = Paths.from_root("/nonexistent")

    reader = HostReader(paths, nvml=session)

    nvml = reader.state("nvml")
    assert isinstance(nvml, NvmlReader) and nvml.session is session
    assert isinstance(reader.state("processes"), ProcessReader)
    without = HostReader(paths)  # no session: the registry's own reads say NVML is not enabled
    assert (without.state("nvml"), without.state("processes")) == (None, None)
    session.close()


def test_the_snapshot_reports_what_each_nvml_call_cost(fake_host, clock):
    reference_node(fake_host)
    gpu = readers(reference_nvml(), clock)
    gpu.nvml.read(fake_host.paths)

    calls = {call.name: call for call in gpu.nvml.read(fake_host.paths).calls}

    assert calls["nvmlDeviceGetSamples"].count == 8  # 4 GPUs x 2 readings
    assert calls["nvmlDeviceGetUUID"].count == 4  # static attributes are read once per enumeration
    assert calls["nvmlInit"].count == 1
    assert all(call.seconds >= 0 and call.timeouts == 0 for call in calls.values())


def test_end_to_end_with_threads_both_gpu_sources_are_up(fake_host, clock):
    reference_node(fake_host)
    write_reference_threads(fake_host)
    gpu = readers(reference_nvml(), clock)

    host = HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock).read()

    assert host.statuses["nvml"].up and host.statuses["processes"].up
    assert set(host.get("processes").containers) == {VLLM.container.container_id, TRTLLM.container.container_id}


def test_nvml_error_unknown_on_enumeration_makes_the_source_down_with_the_reason(fake_host, clock):
    class Broken(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise NVMLError(999)

    with pytest.raises(SourceUnavailable, match="nvmlDeviceGetCount failed: NVMLError_Unknown"):
        readers(Broken(), clock).nvml.read(fake_host.paths)


# --------------------------------------------------------------------------------------------------- capture bundles
def test_the_nvml_and_processes_readings_round_trip_through_their_recordings(fake_host, clock):
    reference_node(fake_host)
    write_reference_threads(fake_host, memlock=65536)
    gpu = readers(reference_nvml(), clock)
    host = HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock).read()
    by_name = {spec.name: spec for spec in SOURCES}

    for name in ("nvml", "processes"):
        recording = by_name[name].recording
        assert recording.load(recording.dump(host.get(name))) == host.get(name)


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"not json", "not JSON"),
        (b'{"version": 99, "result": {}}', "expected a version 1 recording"),
        (b'{"version": 1, "result": []}', "result: expected an object"),
        (b'{"version": 1, "result": {"driver_version": null}}', "result: gpus is missing"),
        (b'{"version": 1, "result": {"driver_version": 7, "gpus": []}}', "result.driver_version: expected a string"),
        (b'{"version": 1, "result": {"driver_version": null, "gpus": [{"index": true}]}}', "expected an integer"),
        (b'{"version": 1, "result": {"driver_version": null, "gpus": {}}}', "result.gpus: expected a list"),
        (b"[" * 100000 + b"]" * 100000, "not JSON"),
    ],
)
def test_a_malformed_recorded_reading_is_rejected_naming_the_field(data, what):
    recording = next(spec for spec in SOURCES if spec.name == "nvml").recording

    with pytest.raises(MalformedFile, match=re.escape(what)):
        recording.load(data)


@pytest.mark.slow
def test_a_capture_bundle_replays_nvml_and_processes_without_a_gpu(fake_host, clock, tmp_path):
    from numawatch.capture import capture, evaluate_bundle

    reference_node(fake_host)
    write_reference_threads(fake_host, memlock=65536)
    gpu = readers(reference_nvml(), clock)
    bundle = tmp_path / "node.tar.gz"

    captured = capture(fake_host.paths, REFERENCE, bundle, nvml=gpu.session)
    replayed = evaluate_bundle(str(bundle))  # the registry's placeholders: the readings come from the bundle

    assert replayed.host.statuses["nvml"].up and replayed.host.statuses["processes"].up
    assert replayed.host.get("nvml") == captured.evaluation.host.get("nvml")

    def memlock(evaluation):
        return sorted(dict(f.labels)["container"] for f in evaluation.findings if f.check == "gpu_process_memlock")

    assert memlock(replayed) == memlock(captured.evaluation) == ["trtllm", "vllm"]
