"""The label contract of the drift families (metrics/drift.py), end to end from host files: every finding label has
its place (identity, detail or reading), drift series carry the identity only and keep it while the details and
readings move, and no label ever names a path under numawatch's host root."""

from __future__ import annotations

import shutil

import pytest
from bench_modules import load_bench
from fakehost import FakeHost
from fakehost.reference import reference_node
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.metrics import drift
from numawatch.paths import Paths
from prometheus_client.parser import text_string_to_metric_families

series_bench = load_bench("bench_drift_series", "drift_series.py")
gen = load_bench("bench_generate_host", "generate_host.py")
churn = load_bench("bench_churn", "churn.py")


def exposed(text: str, name: str) -> list[dict[str, str]]:
    families = {family.name: family for family in text_string_to_metric_families(text)}
    return [sample.labels for sample in families[name].samples]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The reference node with many drifts at once (bench/drift_series.py plants them), and its exposition."""
    root = tmp_path_factory.mktemp("contract") / "host"
    evaluation = series_bench.reference_evaluation(root)
    return root, evaluation, metrics.render(evaluation).decode()


def test_the_planted_node_fires_the_checks_whose_labels_this_file_is_about(planted):
    _, evaluation, _ = planted

    fired = {finding.check for finding in evaluation.findings}
    assert {"kubelet_state_stale", "irqbalance_unbanned", "container_numa_split", "exclusive_cpu_overlap",
            "irq_on_isolated_cpu", "gpu_numa_unknown", "vm_swappiness", "gpu_process_memlock"} <= fired


def test_every_label_of_every_finding_has_a_place_in_its_checks_contract(planted):
    _, evaluation, _ = planted

    for finding in evaluation.findings:
        contract = drift.CONTRACT[finding.check]
        placed = {*contract.identity, *contract.details, *contract.readings}
        assert set(finding.labels) <= placed, (finding.check, sorted(set(finding.labels) - placed))


def test_drift_series_carry_the_identity_and_drift_info_adds_the_details(planted):
    _, evaluation, text = planted
    series = exposed(text, "numawatch_drift")
    info = exposed(text, "numawatch_drift_info")

    for finding in evaluation.findings:
        contract = drift.CONTRACT[finding.check]
        identity = {"check": finding.check, "severity": finding.severity,
                    **{k: v for k, v in finding.labels.items() if k in contract.identity}}
        details = {k: v for k, v in finding.labels.items() if k in contract.details}
        assert identity in series, finding.check
        assert {**identity, **details} in info, finding.check
    assert len(series) <= len(evaluation.findings) == len(info)
    # No empty label is written: what does not apply is left out.
    assert all(value for labels in series + info for value in labels.values())


def test_no_label_value_names_a_path_under_the_host_root(planted):
    root, evaluation, text = planted

    for finding in evaluation.findings:
        assert all(str(root) not in value for value in finding.labels.values()), finding.check
    assert str(root) not in text
    (stale,) = [f for f in evaluation.findings if f.check == "kubelet_state_stale"]
    (banned,) = [f for f in evaluation.findings if f.check == "irqbalance_unbanned"]
    assert stale.labels["file"] == "/var/lib/kubelet/cpu_manager_state"
    assert banned.labels["file"] == "/etc/default/irqbalance"


def test_a_checkpoint_read_from_a_kubelet_directory_mounted_elsewhere_is_named_as_the_kubelet_names_it(tmp_path):
    node = reference_node(FakeHost(tmp_path / "host"))
    node.corrupt_cpu_state_checksum()
    mounted = tmp_path / "mounted-kubelet"  # --path.kubelet outside the host root, as a DaemonSet may mount it
    shutil.move(tmp_path / "host/var/lib/kubelet", mounted)

    paths = Paths.from_root(tmp_path / "host", kubelet=mounted)
    evaluation = evaluate(HostReader(paths).read(), REFERENCE)

    (stale,) = [f for f in evaluation.findings if f.check == "kubelet_state_stale"]
    assert stale.labels == {"file": "/var/lib/kubelet/cpu_manager_state", "reason": "checksum_mismatch"}
    assert str(tmp_path) not in stale.message


@pytest.mark.slow
def test_rate_findings_keep_one_drift_series_per_irq_while_the_cpus_they_hit_change(tmp_path):
    """The benchmark's node with device IRQs straying onto isolated CPUs at random: each evaluation sees them hit
    other CPUs, which the findings say (JSON), while each IRQ's drift series stays the one series."""
    generated = gen.generate(tmp_path / "host", gen.HostSpec(cpus=32, gpus=4, pods=12, irqs=80, processes=200))
    mover = churn.Churn(generated.root, stray=0.5, seconds=1.0)
    reader = HostReader(Paths.from_root(generated.root))
    reader.read()
    series: dict[str, set[tuple]] = {}
    readings: dict[str, set[str]] = {}
    for _ in range(6):
        mover.advance()
        evaluation = evaluate(reader.read(), REFERENCE)
        text = metrics.render(evaluation).decode()
        for labels in exposed(text, "numawatch_drift"):
            if labels["check"] == "irq_activity_on_isolated_cpu":
                series.setdefault(labels["irq"], set()).add(tuple(sorted(labels.items())))
        for finding in evaluation.findings:
            if finding.check == "irq_activity_on_isolated_cpu":
                readings.setdefault(finding.labels["irq"], set()).add(finding.labels["cpus"])

    assert any(len(cpus) > 1 for cpus in readings.values())  # the CPUs did move between evaluations
    assert series and all(len(kept) == 1 for kept in series.values())
