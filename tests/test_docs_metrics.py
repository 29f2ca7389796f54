"""docs/metrics.md and the exposition agree: every family documented with its type, labels and help, and every
documented metric exposed. Rendered end to end from the reference node's files with planted drift, so (nearly)
every family has series whose labels can be compared."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from fake_pynvml import reference_nvml, write_reference_threads
from fakehost import FakeHost
from fakehost.reference import reference_node
from gpu_readers import GpuReaders
from numawatch import metrics
from numawatch.checks import SUBJECT_LABELS, Evaluation, evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.metrics import drift
from numawatch.nvml_session import NvmlSession
from numawatch.shapes import parse_shape
from prometheus_client.parser import text_string_to_metric_families

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
ROW = re.compile(r"^\|\s*`(?P<name>numawatch_\w+)`\s*\|\s*(?P<type>\w+)\s*\|(?P<labels>[^|]*)\|(?P<help>.*)\|\s*$")


@dataclass(frozen=True)
class Documented:
    name: str
    type: str
    labels: frozenset[str]
    help: str


def documented() -> dict[str, Documented]:
    rows: dict[str, Documented] = {}
    for line in DOCS.read_text().splitlines():
        match = ROW.match(line)
        if match is None:
            continue
        labels = frozenset(re.findall(r"`(\w+)`", match["labels"]))
        name = match["name"]
        assert name not in rows, f"{name} is documented twice"
        rows[name] = Documented(name, match["type"], labels, match["help"].strip())
    return rows


# Families that need hardware a fake tree cannot give: perf_event_open on the uncore PMUs of a real multi-socket
# CPU. Their HELP and TYPE are still checked; only their labels go unchecked here.
NEEDS_HARDWARE = {"numawatch_intersocket_bytes_total"}
# Families only the other vendors' libraries fill (AMD SMI, HLML): the reference node's GPUs are NVIDIA's. Their labels
# are compared with docs/metrics.md on the AMD and Gaudi nodes of tests/test_vendor_telemetry.py.
OTHER_VENDORS = {
    "numawatch_gpu_memory_used_bytes",
    "numawatch_gpu_memory_total_bytes",
    "numawatch_gpu_library_call_seconds",
    "numawatch_gpu_library_call_failures_total",
}


@pytest.fixture(scope="module")
def reference_evaluation(tmp_path_factory) -> Evaluation:
    """The reference node's files with drift planted: vllm split across both NUMA nodes (away from its GPUs) and a
    GPU's IRQ moved onto an isolated CPU; read by the real sources, judged by the real checks."""
    node = reference_node(FakeHost(tmp_path_factory.mktemp("docs") / "host"))
    node.split_across_nodes()
    node.host.write("proc/irq/150/smp_affinity_list", "2")
    node.host.write("proc/irq/150/effective_affinity_list", "2")
    # GPU families need NVML (the fake one) and the GPU holders' threads; counters need two readings.
    write_reference_threads(node.host)
    gpu = GpuReaders(NvmlSession(nvml=reference_nvml()))
    try:
        reader = HostReader(node.host.paths, nvml=gpu.session, clock=gpu.clock)
        reader.read()
        host = reader.read()
    finally:
        gpu.session.close()
    # A named shape, so the per-shape replicas family has series too.
    evaluation = evaluate(host, replace(REFERENCE, shapes=(parse_shape("cpu=2,memory=4Gi", name="small"),)))
    assert {"container_numa_split", "irq_on_isolated_cpu"} <= {finding.check for finding in evaluation.findings}
    return evaluation


@pytest.fixture(scope="module")
def exposition(reference_evaluation: Evaluation) -> str:
    """The exposition of ``reference_evaluation``."""
    return metrics.render(reference_evaluation).decode()


def exposed(text: str) -> dict[str, tuple[str, str]]:
    """Family name as exposed (counters with _total) -> (type, help), from the HELP and TYPE lines."""
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.MULTILINE))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert set(helps) == set(types)
    return {name: (types[name], helps[name].replace("\\\\", "\\").replace("\\n", "\n")) for name in types}


def sample_labels(text: str) -> dict[str, set[str]]:
    """Exposed family name -> every label name its samples carry."""
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        for sample in family.samples:
            labels.setdefault(name, set()).update(sample.labels)
    return labels


def test_every_exposed_family_is_documented_with_its_type_and_help(exposition):
    docs = documented()

    for name, (kind, help_text) in exposed(exposition).items():
        assert name in docs, f"{name} is exposed but not in docs/metrics.md"
        assert kind == docs[name].type, f"{name}: exposed as {kind}, documented as {docs[name].type}"
        assert help_text == docs[name].help, f"{name}: help differs from docs/metrics.md"


def test_every_documented_metric_is_exposed(exposition):
    missing = set(documented()) - set(exposed(exposition))

    assert set() == missing, f"documented in docs/metrics.md but not exposed: {sorted(missing)}"


# The drift families' series carry the labels of their check's contract, so one exposition shows only the labels of
# the checks that fired; what they may carry is the contract's union (metrics/drift.py).
_CONTRACTS = (*drift.CONTRACT.values(), drift.FALLBACK)
CONTRACT_LABELS = {
    "numawatch_drift": (
        "check", "severity", *(label for label in SUBJECT_LABELS if any(label in c.identity for c in _CONTRACTS))
    ),
    "numawatch_drift_info": (
        "check",
        "severity",
        *(label for label in SUBJECT_LABELS if any(label in (*c.identity, *c.details) for c in _CONTRACTS)),
    ),
}


def test_documented_labels_are_the_labels_the_series_carry(exposition):
    docs = documented()

    for name, labels in sample_labels(exposition).items():
        if name in CONTRACT_LABELS:
            assert frozenset(labels) <= docs[name].labels, f"{name}: labels not in docs/metrics.md"
            continue
        assert frozenset(labels) == docs[name].labels, f"{name}: labels differ from docs/metrics.md"


def test_the_drift_families_document_every_label_their_contract_allows():
    docs = documented()

    for name, labels in CONTRACT_LABELS.items():
        assert docs[name].labels == frozenset(labels), name


def test_the_fixture_exposes_drift_and_the_full_inventory(exposition):
    """Guards the other tests: a family without series would have its labels go unchecked."""
    labels = sample_labels(exposition)

    missing = set(documented()) - set(labels) - NEEDS_HARDWARE - OTHER_VENDORS
    assert set() == missing, f"documented families without series in the fixture: {sorted(missing)}"
    assert {"numawatch_drift", "numawatch_drift_info", "numawatch_container_cpus", "numawatch_gpu_info",
            "numawatch_cpu_info", "numawatch_kubelet_config_info", "numawatch_check_applicable"} <= set(labels)
