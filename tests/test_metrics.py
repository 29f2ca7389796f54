"""The exposition of one evaluation: drift, health, self and inventory families, built fresh every time."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
from numawatch import __version__, buildinfo, metrics
from numawatch.checks import SUBJECT_LABELS, Check, Evaluation, all_checks, evaluate
from numawatch.host import Host, SourceStatus
from numawatch.intent import REFERENCE, Intent
from numawatch.metrics import core
from numawatch.metrics.core import DURATION_BUCKETS, EvaluationStats
from numawatch.model.gpu import GpuDevice, GpuInventory
from numawatch.model.kubelet import CpuManagerState, DeviceAssignment, DeviceCheckpoint, KubeletConfig, KubeletState
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.model.workloads import (
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    Cgroups,
    ContainerCgroup,
    ContainerIdentity,
    Names,
    PodCgroup,
)
from numawatch.paths import Paths
from prometheus_client.parser import text_string_to_metric_families

POD_UID = "1f9d5c3e-2a4b-4c6d-8e0f-123456789abc"
OTHER_UID = "9a8b7c6d-5e4f-4a3b-9c2d-0123456789ef"


# ------------------------------------------------------------------------------------------------ snapshot builders
def two_socket_topology() -> Topology:
    """8 CPUs, 2 sockets, one NUMA node each (0-3, 4-7); isolcpus=2-3,6-7; CPU 7 offline."""
    cpus = {}
    for cpu in range(8):
        online = cpu != 7
        node = 0 if cpu < 4 else 1
        cpus[cpu] = Cpu(
            id=cpu,
            online=online,
            socket=node if online else None,
            core=(cpu % 4) // 2 if online else None,
            numa_node=node,
        )
    nodes = {
        0: NumaNode(0, frozenset(range(4)), (10, 21)),
        1: NumaNode(1, frozenset(range(4, 7)), (21, 10)),
    }
    isolation = IsolationParams(cmdline="isolcpus=2-3,6-7", isolcpus=frozenset({2, 3, 6, 7}))
    return Topology(cpus=cpus, online=frozenset(range(7)), nodes=nodes, isolation=isolation)


def workload_results() -> dict[str, object]:
    """A guaranteed GPU container pinned to CPUs 2-3 and a burstable one spread over both nodes."""
    pinned = ContainerCgroup("a" * 64, "containerd", "kubepods.slice/pod/a", frozenset({2, 3}), frozenset({0}))
    spread = ContainerCgroup("b" * 64, "containerd", "kubepods.slice/pod/b", frozenset({0, 1, 4}), frozenset({0, 1}))
    cgroups = Cgroups(
        version=2,
        driver="systemd",
        pods=(
            PodCgroup(POD_UID, QOS_GUARANTEED, "kubepods.slice/pod", (pinned,)),
            PodCgroup(OTHER_UID, QOS_BURSTABLE, "kubepods.slice/other", (spread,)),
        ),
    )
    names = Names(
        containers={
            "a" * 64: ContainerIdentity("a" * 64, POD_UID, "llm", "vllm-0", "server", "container", "containerd"),
            "b" * 64: ContainerIdentity("b" * 64, OTHER_UID, "web", "api-1", "app", "container", "containerd"),
        },
        pods={},
    )
    state = KubeletState(
        cpu=CpuManagerState(
            file="/var/lib/kubelet/cpu_manager_state",
            version=2,
            policy_name="static",
            default_cpuset=frozenset({0, 1, 4, 5, 6}),
            entries={POD_UID: {"server": frozenset({2, 3})}},
        ),
        memory=None,
        devices=DeviceCheckpoint(
            file="/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
            entries=(DeviceAssignment(POD_UID, "server", "nvidia.com/gpu", {0: ("GPU-aaaa",)}),),
            registered={"nvidia.com/gpu": ("GPU-aaaa", "GPU-bbbb")},
        ),
    )
    gpus = GpuInventory(
        gpus=(
            GpuDevice("0000:9a:00.0", 1, frozenset({4, 5, 6, 7}), "0x10de", "0x2330", "0x030200", "GPU-bbbb", "H100"),
            GpuDevice("0000:18:00.0", 0, frozenset({0, 1, 2, 3}), "0x10de", "0x2330", "0x030200", "GPU-aaaa", "H100"),
        )
    )
    return {"cgroups": cgroups, "names": names, "kubelet_state": state, "gpus_sysfs": gpus}


def make_host(results: dict[str, object], down: dict[str, str] | None = None) -> Host:
    statuses = {name: SourceStatus(name, True, 0.002) for name in results}
    for name, reason in (down or {}).items():
        statuses[name] = SourceStatus(name, False, 0.001, reason)
    return Host(paths=Paths.from_root("/nonexistent"), results=results, statuses=statuses, timestamp=1_790_000_000.0)


def fixed_check(check_id: str, *subjects: dict[str, str], severity: str = "warning") -> Check:
    """A check that reports one finding per subject, whatever the host."""

    def run(host: Host, intent: Intent):
        return [check.finding(intent, labels, f"{check_id} on {labels}") for labels in subjects]

    check = Check(id=check_id, severity=severity, summary="test", remediation="fix it", run=run)
    return check


def make_evaluation(
    results: dict[str, object] | None = None,
    checks: tuple[Check, ...] = (),
    down: dict[str, str] | None = None,
    intent: Intent = REFERENCE,
) -> Evaluation:
    return evaluate(make_host(results or {}, down), intent, checks)


def families(evaluation: Evaluation, stats: EvaluationStats | None = None) -> dict[str, object]:
    text = metrics.render(evaluation, stats).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def series(evaluation: Evaluation, name: str, stats: EvaluationStats | None = None) -> list[tuple[dict, float]]:
    family = families(evaluation, stats)[name]
    return [(sample.labels, sample.value) for sample in family.samples]


# ------------------------------------------------------------------------------------------------ drift
def test_a_drift_series_is_the_check_its_severity_and_the_subject_while_details_go_to_drift_info():
    checks = (
        fixed_check("container_cpuset_drift", {"namespace": "llm", "pod": "vllm-0", "pod_uid": POD_UID,
                                               "container": "server", "cpus": "0-7", "expected": "2-3"},
                    severity="critical"),
        fixed_check("thp_enabled", {"setting": "transparent_hugepage/enabled", "value": "always",
                                    "expected": "madvise,never"}),
        fixed_check("tick_on_nohz_full", {"cpus": "4-5"}),
    )
    evaluation = make_evaluation(checks=checks)

    drift = {labels["check"]: labels for labels, value in series(evaluation, "numawatch_drift") if value == 1}
    info = {labels["check"]: labels for labels, value in series(evaluation, "numawatch_drift_info") if value == 1}
    assert drift == {
        "container_cpuset_drift": {"check": "container_cpuset_drift", "severity": "critical", "namespace": "llm",
                                   "pod": "vllm-0", "pod_uid": POD_UID, "container": "server"},
        "thp_enabled": {"check": "thp_enabled", "severity": "warning", "setting": "transparent_hugepage/enabled"},
        "tick_on_nohz_full": {"check": "tick_on_nohz_full", "severity": "warning"},
    }
    assert info["container_cpuset_drift"] == {**drift["container_cpuset_drift"], "cpus": "0-7", "expected": "2-3"}
    assert info["thp_enabled"] == {**drift["thp_enabled"], "value": "always", "expected": "madvise,never"}
    # The CPUs a rate check saw in its last window are a reading: in the message and JSON only.
    assert info["tick_on_nohz_full"] == drift["tick_on_nohz_full"]
    assert {"cpus": "4-5"} in [f.as_dict()["labels"] for f in evaluation.findings]  # the JSON keeps every label


def test_a_drift_series_keeps_its_identity_while_the_details_change():
    def evaluation_with(cpus: str, expected: str) -> Evaluation:
        subject = {"namespace": "llm", "pod": "vllm-0", "pod_uid": POD_UID, "container": "server"}
        return make_evaluation(checks=(fixed_check("container_cpuset_drift", {**subject, "cpus": cpus,
                                                                             "expected": expected}),))

    before, after = evaluation_with("0-7", "2-3"), evaluation_with("0-15", "2-3")

    assert series(before, "numawatch_drift") == series(after, "numawatch_drift")
    assert series(before, "numawatch_drift_info") != series(after, "numawatch_drift_info")


def test_a_check_without_a_label_contract_exports_the_labels_that_name_subjects_everywhere():
    evaluation = make_evaluation(checks=(fixed_check("new_check", {"irq": "42", "name": "eth0", "cpus": "3",
                                                                   "value": "x"}),))

    [(drift, _)] = series(evaluation, "numawatch_drift")
    [(info, _)] = series(evaluation, "numawatch_drift_info")
    assert drift == {"check": "new_check", "severity": "warning", "irq": "42", "name": "eth0"}
    assert info == {**drift, "cpus": "3", "value": "x"}


def test_every_label_a_contract_names_is_a_subject_label_and_in_one_part_only():
    for check, contract in metrics.drift.CONTRACT.items():
        named = [*contract.identity, *contract.details, *contract.readings]
        assert len(named) == len(set(named)), check
        assert set(named) <= set(SUBJECT_LABELS), check
    assert set(metrics.drift.CONTRACT) == {check.id for check in all_checks()}


def test_two_findings_with_the_same_subject_make_one_series_while_the_per_check_count_stays_exact():
    subject = {"irq": "42", "cpus": "2"}
    evaluation = make_evaluation(checks=(fixed_check("irq_on_isolated_cpu", subject, subject),))

    assert len(series(evaluation, "numawatch_drift")) == 1
    assert series(evaluation, "numawatch_drift_findings") == [({"check": "irq_on_isolated_cpu"}, 2.0)]


def test_drift_findings_is_zero_for_clean_checks_and_absent_for_checks_that_did_not_run():
    def blind(host, intent):
        from numawatch.checks import NotEvaluated

        raise NotEvaluated("needs the cgroups source")

    def lacking(host, intent):
        from numawatch.checks import NotApplicable

        raise NotApplicable("no THP on this kernel")

    checks = (
        fixed_check("clean_check"),
        fixed_check("firing_check", {"name": "x"}),
        Check(id="blind_check", severity="warning", summary="", remediation="", run=blind),
        Check(id="lacking_check", severity="warning", summary="", remediation="", run=lacking),
    )
    evaluation = make_evaluation(checks=checks)

    counts = {labels["check"]: value for labels, value in series(evaluation, "numawatch_drift_findings")}
    evaluated = {labels["check"]: value for labels, value in series(evaluation, "numawatch_check_evaluated")}
    applicable = {labels["check"]: value for labels, value in series(evaluation, "numawatch_check_applicable")}
    # "Could not look" is not "found nothing": no count at all, so sums and "> 0" never read it as clean.
    assert counts == {"clean_check": 0, "firing_check": 1, "lacking_check": 0}
    assert evaluated == {"clean_check": 1, "firing_check": 1, "blind_check": 0, "lacking_check": 1}
    # Not applicable: evaluated, nothing can be wrong, and said so.
    assert applicable == {"clean_check": 1, "firing_check": 1, "lacking_check": 0}


def test_a_check_disabled_by_intent_is_reported_not_evaluated():
    intent = Intent(disabled=frozenset({"firing_check"}))
    evaluation = make_evaluation(checks=(fixed_check("firing_check", {"name": "x"}),), intent=intent)

    assert series(evaluation, "numawatch_drift") == []
    assert series(evaluation, "numawatch_check_evaluated") == [({"check": "firing_check"}, 0.0)]
    assert series(evaluation, "numawatch_drift_findings") == []


def test_a_fixed_drift_is_absent_from_the_next_exposition():
    firing = fixed_check("exclusive_cpu_overlap", {"pod": "a", "cpus": "4"})
    quiet = fixed_check("exclusive_cpu_overlap")
    stats = EvaluationStats()

    before = series(make_evaluation(checks=(firing,)), "numawatch_drift", stats)
    after = series(make_evaluation(checks=(quiet,)), "numawatch_drift", stats)

    assert len(before) == 1
    assert after == []


def test_label_values_with_quotes_backslashes_and_newlines_stay_parseable():
    nasty = 'a "quoted"\\path\nnext line'
    evaluation = make_evaluation(checks=(fixed_check("weird", {"file": nasty}),))

    [(labels, _)] = series(evaluation, "numawatch_drift")
    assert nasty == labels["file"]


# ------------------------------------------------------------------------------------------------ sources and self
def test_source_up_and_duration_follow_each_source_status():
    evaluation = make_evaluation({"topology": two_socket_topology()}, down={"cgroups": "no kubepods cgroup"})

    up = {labels["source"]: value for labels, value in series(evaluation, "numawatch_source_up")}
    durations = {labels["source"]: value for labels, value in series(evaluation, "numawatch_source_duration_seconds")}
    assert up == {"topology": 1, "cgroups": 0}
    assert durations["topology"] == pytest.approx(0.002)
    assert durations["cgroups"] == pytest.approx(0.001)


def test_build_info_and_intent_info_name_the_version_and_the_intent_source():
    evaluation = make_evaluation(intent=Intent(source="/etc/numawatch/intent.yaml"))

    [(build, _)] = series(evaluation, "numawatch_build_info")
    [(intent, _)] = series(evaluation, "numawatch_intent_info")
    assert __version__ == build["version"]
    assert sys.version.split()[0] == build["python_version"]
    assert build["revision"] == buildinfo.revision()
    assert intent == {"source": "/etc/numawatch/intent.yaml"}


def test_evaluation_counter_and_histogram_accumulate_across_evaluations():
    stats = EvaluationStats()
    stats.observe(0.003, 1_790_000_000.0)
    stats.observe(0.2, 1_790_000_015.0)
    stats.observe(45.0, 1_790_000_030.0)  # longer than every bucket: only +Inf counts it
    found = families(make_evaluation(), stats)

    [total] = found["numawatch_evaluations"].samples
    assert total.name == "numawatch_evaluations_total"
    assert total.value == 3
    histogram = {
        (sample.name, sample.labels.get("le")): sample.value
        for sample in found["numawatch_evaluation_duration_seconds"].samples
    }
    assert histogram[("numawatch_evaluation_duration_seconds_bucket", "0.005")] == 1
    assert histogram[("numawatch_evaluation_duration_seconds_bucket", "0.25")] == 2
    assert histogram[("numawatch_evaluation_duration_seconds_bucket", repr(float(DURATION_BUCKETS[-1])))] == 2
    assert histogram[("numawatch_evaluation_duration_seconds_bucket", "+Inf")] == 3
    assert histogram[("numawatch_evaluation_duration_seconds_count", None)] == 3
    assert pytest.approx(45.203) == histogram[("numawatch_evaluation_duration_seconds_sum", None)]
    [last] = found["numawatch_last_evaluation_timestamp_seconds"].samples
    assert last.value == 1_790_000_030.0


def test_a_one_off_render_counts_itself_as_one_evaluation():
    found = families(make_evaluation({"topology": two_socket_topology()}))

    assert found["numawatch_evaluations"].samples[0].value == 1
    assert len(found["numawatch_last_evaluation_timestamp_seconds"].samples) == 1


# ------------------------------------------------------------------------------------------------ inventory
def test_cpu_info_maps_every_cpu_to_socket_core_node_isolation_reservation_and_online():
    config = KubeletConfig(flavor="rke2", reserved_cpus=frozenset({0, 1, 4, 5}))
    evaluation = make_evaluation({"topology": two_socket_topology(), "kubelet_config": config})

    cpus = {labels["cpu"]: labels for labels, _ in series(evaluation, "numawatch_cpu_info")}
    assert sorted(cpus, key=int) == [str(cpu) for cpu in range(8)]
    assert cpus["2"] == {
        "cpu": "2", "socket": "0", "core": "1", "numa_node": "0",
        "isolated": "true", "reserved": "false", "online": "true",
    }
    assert cpus["4"]["reserved"] == "true"
    assert cpus["4"]["isolated"] == "false"
    assert {"socket": "", "core": "", "online": "false", "isolated": "false"}.items() <= cpus["7"].items()


def test_cpu_info_leaves_reserved_empty_when_the_kubelet_config_is_unknown():
    evaluation = make_evaluation({"topology": two_socket_topology()}, down={"kubelet_config": "no kubelet"})

    assert {labels["reserved"] for labels, _ in series(evaluation, "numawatch_cpu_info")} == {""}


def test_numa_node_cpus_counts_online_cpus_per_node():
    evaluation = make_evaluation({"topology": two_socket_topology()})

    assert series(evaluation, "numawatch_numa_node_cpus") == [({"numa_node": "0"}, 4.0), ({"numa_node": "1"}, 3.0)]


def test_kubelet_config_info_carries_the_effective_policies():
    config = KubeletConfig(
        flavor="rke2",
        cpu_manager_policy="static",
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
        memory_manager_policy="Static",
        reserved_cpus=frozenset({0, 1, 4, 5}),
    )
    [(labels, value)] = series(make_evaluation({"kubelet_config": config}), "numawatch_kubelet_config_info")

    assert value == 1
    assert labels == {
        "cpu_manager_policy": "static",
        "topology_manager_policy": "single-numa-node",
        "topology_manager_scope": "pod",
        "memory_manager_policy": "Static",
        "reserved_cpus": "0-1,4-5",
        "flavor": "rke2",
    }


def test_container_cpus_counts_each_containers_cpus_per_numa_node():
    evaluation = make_evaluation({"topology": two_socket_topology(), **workload_results()})

    rows = {(labels["pod"], labels["numa_node"]): (labels, value) for labels, value in
            series(evaluation, "numawatch_container_cpus")}
    assert set(rows) == {("vllm-0", "0"), ("api-1", "0"), ("api-1", "1")}
    pinned, count = rows[("vllm-0", "0")]
    assert count == 2
    assert pinned == {
        "namespace": "llm", "pod": "vllm-0", "pod_uid": POD_UID, "container": "server", "numa_node": "0",
        "qos": "guaranteed", "exclusive": "true",
    }
    assert rows[("api-1", "0")][1] == 2
    assert rows[("api-1", "1")][1] == 1
    assert {"qos": "burstable", "exclusive": "false"}.items() <= rows[("api-1", "1")][0].items()


def test_container_cpus_places_offline_cpus_by_their_node_and_unknown_cpus_under_an_empty_node():
    results = {"topology": two_socket_topology(), **workload_results()}
    cgroups = results["cgroups"]
    pod = cgroups.pods[0]
    odd = replace(pod.containers[0], cpus_effective=frozenset({0, 7, 99}))  # 7 is offline, 99 does not exist
    results["cgroups"] = replace(cgroups, pods=(replace(pod, containers=(odd,)),))

    rows = {labels["numa_node"]: value for labels, value in series(make_evaluation(results), "numawatch_container_cpus")
            if labels["pod"] == "vllm-0"}
    assert rows == {"0": 1, "1": 1, "": 1}


def test_container_cpus_leaves_exclusive_empty_without_cpu_manager_state():
    results = {"topology": two_socket_topology(), **workload_results()}
    del results["kubelet_state"]
    evaluation = make_evaluation(results, down={"kubelet_state": "no state files"})

    assert {labels["exclusive"] for labels, _ in series(evaluation, "numawatch_container_cpus")} == {""}


def test_gpu_info_lists_every_gpu_with_the_container_holding_it():
    evaluation = make_evaluation({"topology": two_socket_topology(), **workload_results()})

    gpus = {labels["gpu"]: labels for labels, _ in series(evaluation, "numawatch_gpu_info")}
    assert gpus["0000:18:00.0"] == {
        "gpu": "0000:18:00.0", "uuid": "GPU-aaaa", "numa_node": "0", "model": "H100", "namespace": "llm",
        "pod": "vllm-0", "container": "server", "vendor": "nvidia",
    }
    assert {"namespace": "", "pod": "", "container": "", "numa_node": "1"}.items() <= gpus["0000:9a:00.0"].items()


def test_gpu_info_shows_a_checkpointed_gpu_that_sysfs_does_not():
    results = {"topology": two_socket_topology(), **workload_results()}
    del results["gpus_sysfs"]
    evaluation = make_evaluation(results, down={"gpus_sysfs": "no NVIDIA PCI functions"})

    [(labels, _)] = series(evaluation, "numawatch_gpu_info")
    assert {"gpu": "GPU-aaaa", "uuid": "GPU-aaaa", "numa_node": "0", "model": "", "pod": "vllm-0",
            "vendor": "nvidia"}.items() <= labels.items()


def test_every_family_is_present_even_when_every_source_is_down():
    down = {name: "down" for name in ("topology", "cgroups", "names", "kubelet_config", "kubelet_state", "gpus_sysfs")}
    found = families(make_evaluation(down=down))

    assert {
        "numawatch_drift", "numawatch_drift_info", "numawatch_drift_findings", "numawatch_check_evaluated",
        "numawatch_check_applicable", "numawatch_source_up",
        "numawatch_source_duration_seconds", "numawatch_build_info", "numawatch_intent_info",
        "numawatch_evaluations", "numawatch_evaluation_duration_seconds",
        "numawatch_last_evaluation_timestamp_seconds", "numawatch_cpu_info", "numawatch_numa_node_cpus",
        "numawatch_container_cpus", "numawatch_gpu_info", "numawatch_kubelet_config_info",
    } <= set(found)
    assert found["numawatch_cpu_info"].samples == []


# ------------------------------------------------------------------------------------------------ composition
def test_a_failing_family_builder_costs_only_its_family(monkeypatch, caplog):
    def broken(evaluation):
        raise RuntimeError("bug in a builder")

    monkeypatch.setattr(core, "PER_EVALUATION", (*core.PER_EVALUATION[:-1], broken))
    monkeypatch.setattr(metrics.host, "families", broken)
    found = families(make_evaluation({"topology": two_socket_topology()}))

    assert "numawatch_kubelet_config_info" not in found
    assert "numawatch_cpu_info" in found
    assert "bug in a builder" in caplog.text


def test_render_output_is_the_classic_text_format_and_gzips_losslessly():
    body = metrics.render(make_evaluation({"topology": two_socket_topology()}))

    assert body.startswith(b"# HELP numawatch_")
    assert body == gzip.decompress(gzip.compress(body))
    assert metrics.CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) is not installed")
def test_promtool_finds_no_naming_or_format_problem_in_the_exposition():
    evaluation = make_evaluation(
        {"topology": two_socket_topology(), "kubelet_config": KubeletConfig(flavor="rke2"), **workload_results()},
        checks=(fixed_check("container_numa_split", {"pod": "x", "cpus": "3-4"}),),
    )
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=metrics.render(evaluation), capture_output=True, timeout=60
    )

    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


@pytest.mark.realhost
def test_cpu_info_on_this_machine_lists_exactly_its_online_cpus():
    from numawatch.cpuset import parse_cpulist
    from numawatch.host import read_host

    paths = Paths.from_root("/")
    online = parse_cpulist((paths.sysfs / "devices/system/cpu/online").read_text())
    evaluation = evaluate(read_host(paths), REFERENCE)

    cpus = {int(labels["cpu"]) for labels, _ in series(evaluation, "numawatch_cpu_info") if labels["online"] == "true"}
    per_node = sum(value for _, value in series(evaluation, "numawatch_numa_node_cpus"))
    assert cpus == online
    assert per_node == len(online)
