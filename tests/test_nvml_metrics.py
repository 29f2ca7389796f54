"""The GPU metric families (metrics/gpu.py): values on the reference node with the fake pynvml, behaviour when NVML is
down, and docs/metrics.md's "GPUs" table kept in step with the exposition (type, labels, exact help)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fake_pynvml import FakeNvml, reference_nvml, write_reference_threads
from fakehost.pods import set_container_cpus
from fakehost.reference import GPUS, TRTLLM, VLLM, reference_node
from gpu_readers import GpuReaders
from numawatch.checks import Evaluation, evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.metrics import gpu as gpu_metrics
from numawatch.nvml_session import NvmlSession
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
GPU_DOC = DOCS.with_name("gpu.md")
ROW = re.compile(r"^\|\s*`(?P<name>numawatch_\w+)`\s*\|\s*(?P<type>\w+)\s*\|(?P<labels>[^|]*)\|(?P<help>.*)\|\s*$")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def render(evaluation: Evaluation) -> str:
    class Families:
        def collect(self):
            return gpu_metrics.families(evaluation)

    registry = CollectorRegistry()
    registry.register(Families())
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def series(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in samples(text).items() if sample == name}


@pytest.fixture
def gpu_host(fake_host):
    """The reference node read twice 15 s apart, with new utilisation samples in between on GPU 0."""
    reference_node(fake_host)
    write_reference_threads(fake_host)
    fake = reference_nvml()
    clock = Clock()
    gpu = GpuReaders(NvmlSession(nvml=fake), clock=clock)
    reader = HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock)
    reader.read()
    clock.now += 15
    fake.gpus[0].samples += [(3_000_000, 100), (3_500_000, 20)]
    yield fake, reader
    gpu.session.close()


def test_busy_sampled_and_held_idle_counters_per_gpu(gpu_host):
    _, reader = gpu_host
    text = render(evaluate(reader.read(), REFERENCE))

    gpu0 = (("gpu", GPUS[0].pci_address), ("uuid", GPUS[0].uuid), ("vendor", "nvidia"))
    gpu1 = (("gpu", GPUS[1].pci_address), ("uuid", GPUS[1].uuid), ("vendor", "nvidia"))
    assert series(text, "numawatch_gpu_busy_seconds_total")[gpu0] == pytest.approx(0.5 + 0.1)
    assert series(text, "numawatch_gpu_sampled_seconds_total")[gpu0] == pytest.approx(1.0)
    assert series(text, "numawatch_gpu_held_idle_seconds_total")[gpu0] == pytest.approx(0.4)
    # GPU 1 produced no samples: 15 s at its utilisation rate (0 %), held by vllm the whole time.
    assert series(text, "numawatch_gpu_sampled_seconds_total")[gpu1] == pytest.approx(15)
    assert series(text, "numawatch_gpu_held_idle_seconds_total")[gpu1] == pytest.approx(15)
    assert set(series(text, "numawatch_gpu_nvml_up").values()) == {1.0}


def test_every_gpu_says_who_holds_it(gpu_host):
    _, reader = gpu_host
    text = render(evaluate(reader.read(), REFERENCE))

    holders = {
        (dict(labels)["gpu"], dict(labels)["pod"], dict(labels)["container"]): value
        for labels, value in series(text, "numawatch_gpu_processes").items()
    }
    assert holders == {
        (GPUS[0].pci_address, VLLM.name, "vllm"): 1,
        (GPUS[1].pci_address, VLLM.name, "vllm"): 1,
        (GPUS[2].pci_address, TRTLLM.name, "trtllm"): 1,
        (GPUS[3].pci_address, TRTLLM.name, "trtllm"): 1,
    }


def test_holder_counters_sum_threads_and_count_interrupts_on_the_holders_cpus(gpu_host):
    _, reader = gpu_host
    text = render(evaluate(reader.read(), REFERENCE))

    vllm = (("container", "vllm"), ("namespace", "inference"), ("pod", VLLM.name), ("pod_uid", VLLM.uid))
    assert series(text, "numawatch_gpu_holder_run_delay_seconds_total")[vllm] == pytest.approx(0.007)
    assert series(text, "numawatch_gpu_holder_involuntary_switches_total")[vllm] == 26
    assert series(text, "numawatch_gpu_holder_migrations_total")[vllm] == 11
    assert series(text, "numawatch_gpu_holder_threads")[vllm] == 4
    interrupts = {
        dict(labels)["kind"]: value
        for labels, value in series(text, "numawatch_gpu_holder_interrupts_total").items()
        if dict(labels)["container"] == "vllm"
    }
    # The reference node's local timer fired once on each isolated CPU; vllm holds 8 of them.
    assert interrupts == {"device": 0, "local_timer": 8, "ipi": 0, "other": 0}


def test_a_holder_on_no_watched_cpu_has_no_interrupt_series_rather_than_zeros(fake_host):
    # As on a GPU VM with no isolated CPUs: nobody counts interrupts per CPU there, so zero would be a claim.
    node = reference_node(fake_host)
    write_reference_threads(fake_host)
    set_container_cpus(fake_host, node.pod(TRTLLM), TRTLLM.container.name, {0, 16})  # housekeeping: unwatched
    gpu = GpuReaders(NvmlSession(nvml=reference_nvml()))
    try:
        text = render(evaluate(HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock).read(), REFERENCE))
    finally:
        gpu.session.close()

    interrupts = series(text, "numawatch_gpu_holder_interrupts_total")
    assert {dict(labels)["container"] for labels in interrupts} == {"vllm"}
    trtllm = {dict(labels)["container"] for labels in series(text, "numawatch_gpu_holder_threads")}
    assert "trtllm" in trtllm  # still a holder, with its other counters


def test_a_lost_gpu_reads_as_down_and_keeps_its_counters(gpu_host):
    fake, reader = gpu_host
    fake.gpus[2].lost = True
    text = render(evaluate(reader.read(), REFERENCE))

    up = {dict(labels)["gpu"]: value for labels, value in series(text, "numawatch_gpu_nvml_up").items()}
    assert up[GPUS[2].pci_address] == 0 and up[GPUS[0].pci_address] == 1
    busy = {dict(labels)["gpu"] for labels in series(text, "numawatch_gpu_busy_seconds_total")}
    assert GPUS[2].pci_address in busy
    assert GPUS[2].pci_address not in {dict(labels)["gpu"] for labels in series(text, "numawatch_gpu_processes")}


def test_the_cost_of_each_nvml_call_is_exported(gpu_host):
    _, reader = gpu_host
    text = render(evaluate(reader.read(), REFERENCE))

    counts = series(text, "numawatch_nvml_call_seconds_count")
    assert counts[(("call", "nvmlDeviceGetSamples"),)] == 8
    assert counts[(("call", "nvmlInit"),)] == 1
    failures = series(text, "numawatch_nvml_call_failures_total")
    assert failures[(("call", "nvmlDeviceGetSamples"), ("failure", "timeout"))] == 0


def test_without_nvml_every_family_is_present_and_empty(fake_host):
    reference_node(fake_host)
    gpu = GpuReaders(NvmlSession(nvml=FakeNvml(library=False)))
    text = render(evaluate(HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock).read(), REFERENCE))

    helps = re.findall(r"^# HELP (\S+) ", text, re.MULTILINE)
    assert len(helps) == 18
    assert [line for line in text.splitlines() if not line.startswith("#")] == []


# --------------------------------------------------------------------------------------------------- docs
def gpu_rows() -> dict[str, tuple[str, frozenset[str], str]]:
    text = DOCS.read_text()
    section = text.split("\n## GPUs\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows[match["name"]] = (
                match["type"],
                frozenset(re.findall(r"`(\w+)`", match["labels"])),
                match["help"].strip(),
            )
    return rows


def test_docs_metrics_gpus_table_matches_the_exposition(gpu_host):
    _, reader = gpu_host
    text = render(evaluate(reader.read(), REFERENCE))
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.MULTILINE))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        for sample in family.samples:
            labels.setdefault(name, set()).update(k for k in sample.labels if k not in ("quantile",))

    rows = gpu_rows()

    assert set(rows) == set(helps), "docs/metrics.md's GPUs table and the GPU families differ"
    for name, (kind, documented_labels, help_text) in rows.items():
        assert types[name] == kind, name
        assert helps[name].replace("\\\\", "\\") == help_text, name
        # The families an NVIDIA node has no series of (AMD SMI's and HLML's memory and calls) are compared with
        # their table rows where they have series: tests/test_vendor_telemetry.py
        if name in labels:
            assert labels[name] == documented_labels, name


def promql_expressions(path: Path) -> list[str]:
    """Every expression of the ```promql blocks of a page: runs of lines between comments and blank lines."""
    expressions: list[str] = []
    for block in re.findall(r"```promql\n(.*?)```", path.read_text(), re.DOTALL):
        current: list[str] = []
        for line in [*block.splitlines(), ""]:
            if line.strip() and not line.lstrip().startswith("#"):
                current.append(line)
            elif current:
                expressions.append("\n".join(current))
                current = []
    return expressions


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return path


def test_the_promql_of_the_gpu_docs_is_valid(tmp_path):
    expressions = promql_expressions(GPU_DOC) + promql_expressions(DOCS)
    rules = {"groups": [{"name": "docs", "rules": [{"record": f"docs:expr{i}", "expr": e} for i, e in
                                                  enumerate(expressions)]}]}  # fmt: skip
    (tmp_path / "rules.yml").write_text(json.dumps(rules))

    result = subprocess.run([promtool(), "check", "rules", str(tmp_path / "rules.yml")], capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip

    assert len(expressions) >= 8
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_suspected_bubble_query_finds_the_holder_whose_threads_wait(tmp_path):
    bubble = next(e for e in promql_expressions(GPU_DOC) if "> 0.10" in e)
    held = {"instance": "node1", "job": "numawatch"}
    delay = "numawatch_gpu_holder_run_delay_seconds_total"

    def labels(**extra: str) -> str:
        return "{" + ",".join(f'{k}="{v}"' for k, v in {**held, **extra}.items()) + "}"

    series = [
        # Two GPUs held 20 % idle (12 of every 60 s), one holder waiting for CPUs, the other not.
        (f"numawatch_gpu_held_idle_seconds_total{labels(gpu='g0', uuid='u0')}", "0+12x20"),
        (f"numawatch_gpu_sampled_seconds_total{labels(gpu='g0', uuid='u0')}", "0+60x20"),
        (f"numawatch_gpu_held_idle_seconds_total{labels(gpu='g1', uuid='u1')}", "0+12x20"),
        (f"numawatch_gpu_sampled_seconds_total{labels(gpu='g1', uuid='u1')}", "0+60x20"),
        (f"numawatch_gpu_processes{labels(gpu='g0', uuid='u0', namespace='ns', pod='a', container='vllm')}", "1x20"),
        (f"numawatch_gpu_processes{labels(gpu='g1', uuid='u1', namespace='ns', pod='b', container='vllm')}", "2x20"),
        (f"{delay}{labels(namespace='ns', pod='a', pod_uid='ua', container='vllm')}", "0+3x20"),
        (f"{delay}{labels(namespace='ns', pod='b', pod_uid='ub', container='vllm')}", "0+0x20"),
    ]  # fmt: skip
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": values} for name, values in series],
                "promql_expr_test": [
                    {
                        "expr": bubble,
                        "eval_time": "15m",
                        "exp_samples": [
                            {"labels": '{instance="node1", namespace="ns", pod="a", container="vllm"}', "value": 0.2}
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(json.dumps(test))

    result = subprocess.run([promtool(), "test", "rules", str(tmp_path / "test.yml")], capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_reference_snapshot_with_the_gpu_readings_has_series_in_every_gpu_family():
    """What the docs test of the whole exposition needs from a snapshot fixture (reference_gpu_results)."""
    from fake_pynvml import reference_gpu_results
    from fakehost.reference import reference_snapshot, with_results
    from numawatch.model import frozen_map
    from numawatch.model.interrupts import KIND_LOCAL_TIMER, InterruptRow, Interrupts

    ticks = InterruptRow("LOC", KIND_LOCAL_TIMER, "Local timer interrupts", counts=frozen_map({1: 5, 9: 7}))
    interrupts = Interrupts(cpus=tuple(range(32)), watched=frozenset(range(32)), rows=(ticks,), read_at=0.0)
    host = with_results(reference_snapshot(), **reference_gpu_results(), interrupts=interrupts)
    evaluation = evaluate(host, REFERENCE)

    text = render(evaluation)

    exposed = {family.name for family in text_string_to_metric_families(text) if family.samples}
    assert len(exposed) == 14
    assert not [f for f in evaluation.findings if f.check.startswith("gpu_")]
