"""`numawatch check` output: the text table for people and the JSON document for scripts."""

from __future__ import annotations

import json
from dataclasses import replace

from numawatch import __version__, report
from numawatch.checks import Check, Evaluation, NotApplicable, NotEvaluated, evaluate
from numawatch.host import Host, SourceStatus
from numawatch.intent import REFERENCE, Intent
from numawatch.paths import Paths


def fixed_check(check_id: str, *subjects: dict[str, str], severity: str = "warning", message: str = "") -> Check:
    def run(host: Host, intent: Intent):
        return [check.finding(intent, labels, message or f"{check_id} fired") for labels in subjects]

    check = Check(id=check_id, severity=severity, summary="", remediation=f"do what fixes {check_id}", run=run)
    return check


def blind_check(check_id: str, reason: str) -> Check:
    def run(host: Host, intent: Intent):
        raise NotEvaluated(reason)

    return Check(id=check_id, severity="warning", summary="", remediation="", run=run)


def make_evaluation(checks: tuple[Check, ...], intent: Intent = REFERENCE) -> Evaluation:
    statuses = {
        "topology": SourceStatus("topology", True, 0.0042),
        "kubelet_config": SourceStatus("kubelet_config", True, 0.0001, cached=True),
        "cgroups": SourceStatus("cgroups", False, 0.0003, "no kubepods cgroup under /sys/fs/cgroup"),
    }
    host = Host(paths=Paths.from_root("/host"), results={}, statuses=statuses, timestamp=1_790_000_000.25)
    return evaluate(host, intent, checks)


MIXED = (
    fixed_check("thp_enabled", {"setting": "transparent_hugepage/enabled", "value": "always"}, severity="info"),
    fixed_check("container_numa_split", {"namespace": "llm", "pod": "vllm-0", "pod_uid": "uid-1",
                                         "container": "server", "cpus": "3-4"}, severity="critical"),
    fixed_check("kubelet_topology_manager_policy", {"setting": "topologyManagerPolicy", "value": "best-effort"}),
    blind_check("container_memory_remote", "needs the cgroups source: no kubepods cgroup"),
)


# ------------------------------------------------------------------------------------------------ subject
def test_subject_names_a_container_as_namespace_pod_container_and_drops_the_uid():
    labels = {"namespace": "llm", "pod": "vllm-0", "pod_uid": "uid-1", "container": "server", "cpus": "3-4"}

    assert report.subject(labels) == "llm/vllm-0/server cpus=3-4"


def test_subject_keeps_the_uid_when_the_pod_name_is_unknown():
    assert report.subject({"pod_uid": "uid-1", "container": "server"}) == "pod_uid=uid-1 container=server"


def test_subject_of_a_node_wide_finding_is_node():
    assert report.subject({}) == "node"


def test_timestamp_is_rfc3339_utc_with_milliseconds():
    assert report.timestamp(1_790_000_000.25) == "2026-09-21T14:13:20.250Z"


# ------------------------------------------------------------------------------------------------ table
def test_table_groups_findings_by_severity_most_severe_first_with_subject_message_and_fix():
    table = report.render_table(make_evaluation(MIXED), "/host")

    critical, warning, info = (table.index(f"{s} (1)") for s in ("CRITICAL", "WARNING", "INFO"))
    assert critical < warning < info
    assert "container_numa_split  llm/vllm-0/server cpus=3-4" in table
    assert "      container_numa_split fired" in table
    assert "      fix: do what fixes container_numa_split" in table
    assert "setting=topologyManagerPolicy value=best-effort" in table


def test_table_lists_not_evaluated_checks_with_their_reason_and_every_source_status():
    table = report.render_table(make_evaluation(MIXED), "/host")

    assert "Not evaluated (1)\n  container_memory_remote  needs the cgroups source: no kubepods cgroup" in table
    assert "  topology        up      0.0042s" in table
    assert "  kubelet_config  up      0.0001s  cached" in table
    assert "  cgroups         down    0.0003s  no kubepods cgroup under /sys/fs/cgroup" in table


def test_table_header_and_summary_say_what_was_checked_and_how_much():
    table = report.render_table(make_evaluation(MIXED), "/host")

    assert table.startswith(f"numawatch {__version__} check of /host against reference profile, 2026-09-21T14:13:20")
    assert table.endswith(
        "3 findings (1 critical, 1 warning, 1 info); 3 of 4 checks evaluated, 1 of 3 sources down.\n"
    )


def test_table_header_names_the_window_when_the_host_was_read_twice():
    evaluation = make_evaluation(MIXED)
    earlier = replace(evaluation.host, timestamp=evaluation.host.timestamp - 5)
    windowed = replace(evaluation, host=replace(evaluation.host, previous=earlier))

    assert " over a 5.0s window\n" in report.render_table(windowed, "/").splitlines(keepends=True)[0]
    assert report.as_dict(windowed, "/")["window_seconds"] == 5.0
    assert report.as_dict(evaluation, "/")["window_seconds"] is None


def test_table_of_a_clean_host_says_none_and_still_shows_what_could_not_be_looked_at():
    table = report.render_table(make_evaluation((fixed_check("thp_enabled"), MIXED[-1])), "/")

    assert "Findings: none" in table
    assert "Not evaluated (1)" in table
    assert table.endswith("No findings; 1 of 2 checks evaluated, 1 of 3 sources down.\n")


def test_multi_line_messages_stay_indented_under_their_finding():
    check = fixed_check("kubelet_state_stale", {"file": "/var/lib/kubelet/cpu_manager_state"},
                        message="policy changed\nthe kubelet will refuse to start")
    table = report.render_table(make_evaluation((check,)), "/")

    assert "      policy changed\n        the kubelet will refuse to start\n" in table


# ------------------------------------------------------------------------------------------------ JSON
def test_json_starts_with_findings_and_not_evaluated_then_sources_intent_and_metadata():
    document = json.loads(report.render_json(make_evaluation(MIXED), "/host"))

    assert list(document)[:8] == \
        ["findings", "not_evaluated", "not_applicable", "sources", "intent", "host_root", "version", "timestamp"]
    assert document["intent"] == "reference profile"
    assert document["host_root"] == "/host"
    assert __version__ == document["version"]
    assert document["timestamp"] == "2026-09-21T14:13:20.250Z"


def test_json_findings_carry_check_severity_labels_message_and_remediation_most_severe_first():
    document = json.loads(report.render_json(make_evaluation(MIXED), "/host"))

    first = document["findings"][0]
    assert set(first) == {"check", "severity", "labels", "message", "remediation"}
    assert [finding["severity"] for finding in document["findings"]] == ["critical", "warning", "info"]
    assert first["labels"] == \
        {"namespace": "llm", "pod": "vllm-0", "pod_uid": "uid-1", "container": "server", "cpus": "3-4"}
    assert document["not_evaluated"] == \
        [{"check": "container_memory_remote", "reason": "needs the cgroups source: no kubepods cgroup"}]


def test_json_sources_say_up_reason_and_duration():
    document = json.loads(report.render_json(make_evaluation(MIXED), "/host"))

    sources = {source["name"]: source for source in document["sources"]}
    assert sources["cgroups"] == {
        "name": "cgroups", "up": False, "reason": "no kubepods cgroup under /sys/fs/cgroup",
        "duration_seconds": 0.0003, "cached": False,
    }
    assert sources["topology"]["up"] is True
    assert sources["topology"]["reason"] == ""


def test_json_names_the_intent_file_when_one_is_used():
    document = report.as_dict(make_evaluation(MIXED, Intent(source="/etc/numawatch/intent.yaml")), "/")

    assert document["intent"] == "/etc/numawatch/intent.yaml"


# ------------------------------------------------------------------------------------------------ not applicable
def absent_check(check_id: str, reason: str) -> Check:
    def run(host: Host, intent: Intent):
        raise NotApplicable(reason)

    return Check(id=check_id, severity="warning", summary="", remediation="", run=run)


def test_a_check_the_host_has_nothing_for_is_not_applicable_in_json_and_table_and_counts_as_evaluated():
    evaluation = make_evaluation((absent_check("thp_enabled", "the kernel has no THP"), *MIXED))

    document = json.loads(report.render_json(evaluation, "/host"))
    table = report.render_table(evaluation, "/host")

    assert document["not_applicable"] == [{"check": "thp_enabled", "reason": "the kernel has no THP"}]
    assert "thp_enabled" not in {item["check"] for item in document["not_evaluated"]}
    assert "Not applicable on this host (1)\n  thp_enabled  the kernel has no THP\n" in table
    assert report.summary(evaluation).endswith("4 of 5 checks evaluated, 1 of 3 sources down.")


# ------------------------------------------------------------------------------------------------ verdict
def make_host(topology_up: bool) -> Host:
    statuses = {
        "topology": SourceStatus("topology", topology_up, 0.001, "" if topology_up else "/h/sys/devices/system/cpu\n"
                                 "does not exist"),
        "kernel": SourceStatus("kernel", True, 0.001),
    }  # fmt: skip
    return Host(paths=Paths.from_root("/h"), results={}, statuses=statuses, timestamp=1_790_000_000.25)


def both(evaluation: Evaluation) -> tuple[dict, str]:
    return json.loads(report.render_json(evaluation, "/h")), report.render_table(evaluation, "/h")


def test_a_clean_evaluation_with_the_topology_up_is_clean_exit_0_in_json_and_table():
    evaluation = evaluate(make_host(True), REFERENCE, (fixed_check("thp_enabled"), blind_check("vm_swappiness", "x")))

    document, table = both(evaluation)

    assert report.verdict(evaluation) == report.Verdict("clean", 0)
    assert (document["status"], document["exit_code"], document["status_reason"]) == ("clean", 0, None)
    assert table.splitlines()[-2] == "Result: clean (exit 0)"


def test_findings_are_exit_1_even_when_the_topology_is_down():
    evaluation = evaluate(make_host(False), REFERENCE, (fixed_check("thp_enabled", {"value": "always"}),))

    document, table = both(evaluation)

    assert report.verdict(evaluation).exit_code == report.EXIT_FINDINGS == 1
    assert (document["status"], document["exit_code"], document["status_reason"]) == ("findings", 1, None)
    assert table.splitlines()[-2] == "Result: findings (exit 1)"


def test_no_finding_with_the_topology_down_is_unknown_exit_2_and_says_why_in_one_line():
    evaluation = evaluate(make_host(False), REFERENCE, (fixed_check("thp_enabled"),))

    document, table = both(evaluation)

    reason = (
        "the topology source is down (/h/sys/devices/system/cpu does not exist), so finding nothing does not mean "
        "the node is clean"
    )
    assert report.verdict(evaluation) == report.Verdict("unknown", report.EXIT_UNKNOWN, reason)
    assert (document["status"], document["exit_code"], document["status_reason"]) == ("unknown", 2, reason)
    assert table.splitlines()[-2] == f"Result: unknown (exit 2): {reason}"
    assert report.ESSENTIAL_SOURCES == ("topology",)


def test_nothing_evaluated_is_unknown_even_with_every_source_up():
    checks = (blind_check("thp_enabled", "x"), blind_check("vm_swappiness", "y"))
    evaluation = evaluate(make_host(True), REFERENCE, checks)

    document, table = both(evaluation)

    reason = "no check could be evaluated (2 of 2 not evaluated; 0 of 2 sources down)"
    assert (document["status"], document["exit_code"], document["status_reason"]) == ("unknown", 2, reason)
    assert table.splitlines()[-2] == f"Result: unknown (exit 2): {reason}"


def test_every_check_disabled_by_intent_is_unknown_and_says_so():
    evaluation = evaluate(make_host(True), Intent(disabled=frozenset({"thp_enabled"})), (fixed_check("thp_enabled"),))

    assert report.verdict(evaluation).reason == (
        "no check could be evaluated (1 of 1 not evaluated, 1 disabled by intent; 0 of 2 sources down)"
    )


def test_findings_less_severe_than_fail_on_are_shown_and_leave_the_verdict_to_the_rest():
    checks = (fixed_check("vm_swappiness", {"setting": "vm.swappiness"}, severity="info"),)
    up, down = evaluate(make_host(True), REFERENCE, checks), evaluate(make_host(False), REFERENCE, checks)

    assert report.verdict(up, "warning") == report.Verdict("clean", 0, below=1, fail_on="warning")
    assert report.verdict(up, "info").exit_code == 1
    assert report.verdict(down, "warning").status == "unknown"
    document = json.loads(report.render_json(up, "/h", "warning"))
    assert (document["status"], document["exit_code"], document["fail_on"], len(document["findings"])) == (
        "clean", 0, "warning", 1)
    table = report.render_table(up, "/h", "warning")
    assert "INFO (1)" in table
    assert table.splitlines()[-2] == "Result: clean (exit 0; 1 finding below --fail-on warning)"


def test_the_default_fail_on_is_warning_for_people_and_info_for_node_problem_detector():
    assert report.FAIL_ON_DEFAULT == {"table": "warning", "json": "warning", "npd": "info"}
    checks = (fixed_check("vm_swappiness", {"setting": "vm.swappiness"}, severity="info"),)
    evaluation = evaluate(make_host(True), REFERENCE, checks)

    assert json.loads(report.render_json(evaluation, "/h"))["exit_code"] == 0
    assert report.npd_message(evaluation, "/h") == "1 finding: vm_swappiness setting=vm.swappiness"
    assert report.npd_message(evaluation, "/h", "warning").startswith("clean: 1 below --fail-on warning, ")
