from __future__ import annotations

import time
from pathlib import Path

import pytest
from fakehost.reference import reference_snapshot, replace_config
from numawatch.checks import evaluate
from numawatch.intent import REFERENCE, REFERENCE_PROFILE, Intent, IntentError, KernelIntent
from numawatch.intentfile import load_intent, parse_intent

DOCS = Path(__file__).resolve().parents[1] / "docs"
EXAMPLE = DOCS / "intent.example.yaml"


def write(tmp_path: Path, text: str, name: str = "intent.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(text: str) -> str:
    with pytest.raises(IntentError) as caught:
        parse_intent(text, source="/etc/numawatch/intent.yaml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("/etc/numawatch/intent.yaml: ")
    return message


# --------------------------------------------------------------------------------------------- valid files
def test_documented_example_loads_cleanly(tmp_path):
    intent = load_intent(EXAMPLE)

    assert intent.source == str(EXAMPLE)
    assert intent.cpu_manager_policy == "static"
    assert intent.reserved_cpus is None
    assert intent.pinned[0].matches("inference", "vllm-llama-0", "vllm")
    assert intent.severity_for("kubelet_topology_manager_scope", "warning") == "info"
    assert intent.kernel.hugepages == {1048576: 8}
    assert intent.kernel.hugepages_per_node == {0: {1048576: 4}, 1: {1048576: 4}}
    assert intent.kernel.irq_exempt == ("nvme*q0",)


def test_an_empty_file_is_the_reference_profile_under_the_files_name(tmp_path):
    path = write(tmp_path, "# nothing to change\n")

    intent = load_intent(path)

    assert intent == Intent(source=str(path))
    assert REFERENCE.source == REFERENCE_PROFILE


def test_every_key_is_read_into_the_intent(tmp_path):
    path = write(
        tmp_path,
        """
kubelet:
  cpuManagerPolicy: none
  topologyManagerPolicy: restricted
  topologyManagerScope: container
  memoryManagerPolicy: None
  reservedCPUs: "0-1,32-33"
  version: "v1.35.4"
pinning:
  gpuContainers: false
  gpuResources: [nvidia.com/gpu, nvidia.com/mig-1g.10gb]
  pods:
    - {namespace: db, pod: "pg-*"}
    - container: sidecar
thresholds:
  remoteMemoryRatio: 0.25
  remoteMemoryMinBytes: 1Gi
checks:
  gpu_numa_unknown: {enabled: false}
  container_memory_remote: {severity: critical}
kernel:
  numaBalancing: 1
  thpEnabled: [never]
  thpDefrag: [defer+madvise]
  swappiness: 10
  cpufreqGovernor: schedutil
  hugepages: {2048kB: 512, 1Gi: 16}
  hugepagesPerNode: {"1": {2Mi: 256}}
  irqExempt: [eth0-tx*]
  irqActivityThresholdPerSecond: 5
  tickThresholdPerSecond: 2.5
  checkIrqbalance: false
""",
    )

    intent = load_intent(path)

    assert (
        intent.cpu_manager_policy,
        intent.topology_manager_policy,
        intent.topology_manager_scope,
        intent.memory_manager_policy,
    ) == ("none", "restricted", "container", "None")
    assert intent.reserved_cpus == frozenset({0, 1, 32, 33})
    assert intent.kubelet_version == "v1.35.4"
    assert intent.pin_gpu_containers is False
    assert intent.gpu_resources == ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    assert [(s.namespace, s.pod, s.container) for s in intent.pinned] == [("db", "pg-*", "*"), ("*", "*", "sidecar")]
    assert intent.remote_memory_ratio == 0.25
    assert intent.remote_memory_min_bytes == 1 << 30
    assert not intent.check_enabled("gpu_numa_unknown")
    assert intent.severity_for("container_memory_remote", "warning") == "critical"
    assert intent.kernel == KernelIntent(
        numa_balancing=1,
        thp_enabled=frozenset({"never"}),
        thp_defrag=frozenset({"defer+madvise"}),
        swappiness=10,
        cpufreq_governor="schedutil",
        hugepages={2048: 512, 1048576: 16},
        hugepages_per_node={1: {2048: 256}},
        irq_exempt=("eth0-tx*",),
        irq_activity_threshold_per_second=5.0,
        tick_threshold_per_second=2.5,
        check_irqbalance=False,
    )


def test_reserved_cpus_accept_housekeeping_a_list_or_a_bare_cpu_number():
    assert parse_intent("kubelet: {reservedCPUs: housekeeping}").reserved_cpus is None
    assert parse_intent("kubelet: {reservedCPUs: 0}").reserved_cpus == frozenset({0})
    assert parse_intent("kubelet: {reservedCPUs: '0-1'}").reserved_cpus == frozenset({0, 1})


def test_remote_memory_floor_accepts_plain_bytes():
    assert parse_intent("thresholds: {remoteMemoryMinBytes: 1048576}").remote_memory_min_bytes == 1048576


def test_a_loaded_intent_changes_what_evaluate_reports(tmp_path):
    host = replace_config(reference_snapshot(), topology_manager_scope="container")
    path = write(
        tmp_path,
        "checks:\n  kubelet_topology_manager_scope: {severity: info}\n  kubelet_cpu_manager_policy: {enabled: false}\n",
    )

    evaluation = evaluate(host, load_intent(path))

    assert [(f.check, f.severity) for f in evaluation.findings] == [("kubelet_topology_manager_scope", "info")]
    assert ("kubelet_cpu_manager_policy", "disabled by intent") in {
        (n.check, n.reason) for n in evaluation.not_evaluated
    }


# --------------------------------------------------------------------------------------------- invalid files
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "thresholds: {remoteMemoryRatio: 1.5}",
            "thresholds.remoteMemoryRatio: expected a number from 0 to 1, found 1.5",
        ),
        (
            "thresholds: {remoteMemoryRatio: high}",
            "thresholds.remoteMemoryRatio: expected a number from 0 to 1, found 'high'",
        ),
        ("thresholds: {remoteMemoryRatio: true}", "thresholds.remoteMemoryRatio: expected a number"),
        ("thresholds: {remoteMemoryMinBytes: 64Mb}", "thresholds.remoteMemoryMinBytes: expected a quantity of bytes"),
        ("thresholds: {remoteMemoryMinBytes: -1}", "thresholds.remoteMemoryMinBytes: expected a quantity of bytes"),
        (
            "kubelet: {cpuManagerPolicy: Static}",
            "kubelet.cpuManagerPolicy: expected one of none, static, found 'Static'",
        ),
        ("kubelet: {memoryManagerPolicy: static}", "kubelet.memoryManagerPolicy: expected one of None, Static"),
        (
            "kubelet: {topologyManagerPolicy: single}",
            "kubelet.topologyManagerPolicy: expected one of none, best-effort",
        ),
        ("kubelet: {topologyManagerScope: node}", "kubelet.topologyManagerScope: expected one of container, pod"),
        ("kubelet: {reservedCPUs: '0-'}", 'kubelet.reservedCPUs: expected "housekeeping" or a CPU list'),
        ("kubelet: {reservedCPUs: ''}", 'kubelet.reservedCPUs: expected "housekeeping" or a CPU list'),
        (
            "kubelet: {reservedCPUs: [0, 1]}",
            'kubelet.reservedCPUs: expected "housekeeping" or a CPU list such as "0-1,32-33", found a list',
        ),
        ("kubelet: static", "kubelet: expected a mapping, found 'static'"),
        ("pinning: {gpuContainers: yes please}", "pinning.gpuContainers: expected true or false, found 'yes please'"),
        ("pinning: {gpuContainers: 1}", "pinning.gpuContainers: expected true or false, found 1"),
        ("pinning: {gpuResources: nvidia.com/gpu}", "pinning.gpuResources: expected a list, found 'nvidia.com/gpu'"),
        ("pinning: {gpuResources: [gpu]}", "pinning.gpuResources[0]: expected an extended resource name"),
        ("pinning: {pods: [{}]}", "pinning.pods[0]: expected a mapping with namespace, pod and/or container"),
        ("pinning: {pods: [{namespace: 3}]}", "pinning.pods[0].namespace: expected a non-empty string, found 3"),
        ("pinning: {pods: {namespace: x}}", "pinning.pods: expected a list"),
        (
            "checks: {gpu_numa_unknown: {severity: high}}",
            "checks.gpu_numa_unknown.severity: expected one of critical, warning, info, found 'high'",
        ),
        (
            "checks: {gpu_numa_unknown: {enabled: 'no'}}",
            "checks.gpu_numa_unknown.enabled: expected true or false, found 'no'",
        ),
        ("checks: {gpu_numa_unknown: false}", "checks.gpu_numa_unknown: expected a mapping, found False"),
        ("kernel: {numaBalancing: 4}", "kernel.numaBalancing: expected an integer from 0 to 3, found 4"),
        ("kernel: {swappiness: 0.5}", "kernel.swappiness: expected an integer from 0 to 200, found 0.5"),
        ("kernel: {thpEnabled: always}", "kernel.thpEnabled: expected a list, found 'always'"),
        (
            "kernel: {thpEnabled: [sometimes]}",
            "kernel.thpEnabled[0]: expected one of always, madvise, never, found 'sometimes'",
        ),
        ("kernel: {thpDefrag: []}", "kernel.thpDefrag: expected a non-empty list"),
        ("kernel: {cpufreqGovernor: performace}", "kernel.cpufreqGovernor: expected one of performance"),
        ("kernel: {hugepages: {3Mb: 1}}", "kernel.hugepages.3Mb: expected a huge page size such as 2Mi, 1Gi or 2048kB"),
        ("kernel: {hugepages: {1Gi: -1}}", "kernel.hugepages.1Gi: expected an integer 0 or more, found -1"),
        (
            "kernel: {hugepages: {1Gi: 1, 1048576kB: 2}}",
            "kernel.hugepages.1048576kB: expected each huge page size once",
        ),
        ("kernel: {hugepagesPerNode: {zero: {1Gi: 1}}}", "kernel.hugepagesPerNode.zero: expected a NUMA node number"),
        ("kernel: {hugepagesPerNode: {0: [1Gi]}}", "kernel.hugepagesPerNode.0: expected a mapping of huge page size"),
        ("kernel: {irqExempt: ['']}", "kernel.irqExempt[0]: expected a non-empty string"),
        (
            "kernel: {tickThresholdPerSecond: -1}",
            "kernel.tickThresholdPerSecond: expected a number 0 or more, found -1",
        ),
        ("kernel: {irqActivityThresholdPerSecond: .nan}", "kernel.irqActivityThresholdPerSecond: expected a number"),
        ("kernel: {checkIrqbalance: null}", "kernel.checkIrqbalance: expected true or false, found nothing (null)"),
        ("- kubelet", "(top level): expected a mapping, found a list"),
        ("kubelet: {version: 1.35}", 'kubelet.version: expected a Kubernetes version such as "1.35"'),
        (
            "kubelet: {version: latest}",
            'kubelet.version: expected a Kubernetes version such as "1.35" or "v1.36.2" (quoted), found \'latest\'',
        ),
    ],
)
def test_invalid_value_is_one_line_naming_the_key_what_was_expected_and_what_was_found(text, expected):
    assert expected in error_of(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "thresholds: {remoteMemoryRatoi: 0.2}",
            "thresholds.remoteMemoryRatoi: unknown key (did you mean 'remoteMemoryRatio'?)",
        ),
        ("kubelet: {reservedCpus: housekeeping}", "kubelet.reservedCpus: unknown key (did you mean 'reservedCPUs'?)"),
        ("threshold: {}", "threshold: unknown key (did you mean 'thresholds'?)"),
        (
            "checks: {container_memory_remoet: {enabled: false}}",
            "checks.container_memory_remoet: unknown key (did you mean 'container_memory_remote'?)",
        ),
        ("checks: {gpu_numa_unknown: {disabled: true}}", "checks.gpu_numa_unknown.disabled: unknown key"),
        ("pinning: {pods: [{namspace: x}]}", "pinning.pods[0].namspace: unknown key (did you mean 'namespace'?)"),
        ("kernel: {numa_balancing: 0}", "kernel.numa_balancing: unknown key (did you mean 'numaBalancing'?)"),
    ],
)
def test_unknown_keys_are_errors_so_a_typo_never_silently_does_nothing(text, expected):
    assert expected in error_of(text)


def test_unknown_check_id_error_lists_the_known_ids():
    message = error_of("checks: {no_such_check: {enabled: false}}")

    assert "checks.no_such_check: unknown key" in message
    assert "kubelet_state_stale" in message


def test_duplicate_keys_are_errors_because_the_first_would_silently_do_nothing():
    message = error_of("thresholds:\n  remoteMemoryRatio: 0.2\n  remoteMemoryRatio: 0.3\n")

    assert "duplicate key 'remoteMemoryRatio'" in message
    assert "line 3" in message


def test_yaml_syntax_errors_are_one_line_with_the_position():
    message = error_of("kubelet:\n  cpuManagerPolicy: [static\n")

    assert "not valid YAML at line" in message


def test_yaml_tags_that_build_python_objects_are_refused():
    message = error_of("kubelet: !!python/object/apply:os.system ['true']")

    assert "not valid YAML" in message


def test_a_missing_file_is_an_intent_error_naming_it(tmp_path):
    with pytest.raises(IntentError, match=r"missing\.yaml: cannot read the intent file: No such file"):
        load_intent(tmp_path / "missing.yaml")


def test_a_binary_file_is_an_intent_error(tmp_path):
    path = tmp_path / "intent.yaml"
    path.write_bytes(b"\xff\xfe\x00kubelet")

    with pytest.raises(IntentError, match="not UTF-8"):
        load_intent(path)


def test_deeply_nested_intent_is_a_one_line_error_at_little_cost():
    """1.9 KB of '[' as the intent cost 4.9 s of CPU before a RecursionError was turned into an error."""
    started = time.process_time()
    with pytest.raises(IntentError) as caught:
        parse_intent("[" * 1900, source="/etc/numawatch/intent.yaml")
    spent = time.process_time() - started

    assert str(caught.value) == ("/etc/numawatch/intent.yaml: not valid YAML at line 1, column 33: nested deeper than "
                                 "32 levels")
    assert spent < 1.0
