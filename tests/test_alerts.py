"""The alerting and recording rules (alerts/), their runbooks (docs/runbooks/) and the Alertmanager example.

promtool and amtool come from Debian's `prometheus` and `prometheus-alertmanager` packages (tests/install-and-run.sh
installs them); tests that need them skip with the reason when they are missing.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ALERTS_DIR = ROOT / "alerts"
RULE_FILES = sorted(ALERTS_DIR.glob("numawatch-*.yml"))  # ours, and rule files other features add here
PROMTOOL_TESTS = sorted((ALERTS_DIR / "tests").glob("*.yml"))
RUNBOOKS = ROOT / "docs" / "runbooks"
AM_CONFIG = ALERTS_DIR / "alertmanager.example.yml"

# The stable check ids of the metric contract. The registry's ids are added below, so a check that lands later
# without an alert fails test_every_check_id_has_a_dedicated_alert.
CONTRACT_CHECK_IDS = {
    "kubelet_cpu_manager_policy",
    "kubelet_topology_manager_policy",
    "kubelet_topology_manager_scope",
    "kubelet_memory_manager_policy",
    "kubelet_reserved_cpus_mismatch",
    "kubelet_state_stale",
    "pod_not_guaranteed",
    "container_not_exclusive",
    "container_cpuset_drift",
    "exclusive_cpu_overlap",
    "container_numa_split",
    "container_gpu_numa_mismatch",
    "container_memory_numa_mismatch",
    "container_memory_remote",
    "container_outside_isolated",
    "gpu_numa_unknown",
    "kernel_numa_balancing",
    "thp_enabled",
    "thp_defrag",
    "vm_swappiness",
    "cpufreq_governor",
    "isolation_params_mismatch",
    "hugepages_shortfall",
    "irq_on_isolated_cpu",
    "irq_activity_on_isolated_cpu",
    "tick_on_nohz_full",
    "irqbalance_unbanned",
}

# Paging policy (docs/runbooks/README.md): only these alerts may carry severity critical.
PAGING_ALERTS = {
    "NumawatchContainerCPUSetDrift",
    "NumawatchExclusiveCPUOverlap",
    "NumawatchContainerNUMAMisaligned",
    "NumawatchGPUHolderMismatch",
    "NumawatchKubeletStateStale",
    "NumawatchDriftWidespread",
}
META_ALERTS = {"NumawatchDown", "NumawatchMissingOnGPUNode", "NumawatchSourceDown", "NumawatchEvaluationsStale",
               "NumawatchConfigReloadFailed"}
FLEET_ALERTS = {"NumawatchDriftWidespread"}
CATCH_ALL = "NumawatchDriftDetected"
RUNBOOK_SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")

# The check matcher of a numawatch_drift selector, wherever it sits among the matchers (the job selector comes first).
DRIFT_MATCHER = re.compile(r'numawatch_drift\{(?:[^{}]*?, )?check(=~|=|!~)"([^"]*)"[,}]')


@functools.cache
def load_generator():
    """alerts/generate.py is a script, not a package module: load it by path (dataclasses need sys.modules)."""
    name = "numawatch_alerts_generate"
    spec = importlib.util.spec_from_file_location(name, ALERTS_DIR / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def runbook_url_pattern() -> str:
    """The mixin's runbookURLPattern (config.libsonnet): every runbook_url is it with the alert name."""
    sys.path.insert(0, str(ROOT / "numawatch-mixin"))
    from render import JsonnetMissing, render

    try:
        return str(render("_config")["runbookURLPattern"])
    except JsonnetMissing as missing:
        pytest.skip(str(missing))


def alerting_rules() -> list[dict]:
    document = yaml.safe_load((ALERTS_DIR / "numawatch-alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def alert_names() -> set[str]:
    return {rule["alert"] for rule in alerting_rules()}


def registry_check_ids() -> set[str]:
    from numawatch.checks import all_checks

    return {check.id for check in all_checks()}


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (apt-get install prometheus prometheus-alertmanager)")
    return path


def run(*argv: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


# --- the generated files -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_committed_rule_files_are_what_generate_py_writes():
    generator = load_generator()
    for path, text in generator.outputs().items():
        assert path.read_text() == text, f"{path.name} is stale: run python alerts/generate.py"


def test_rule_files_pass_promtool_check_rules():
    promtool = require("promtool")
    result = run(promtool, "check", "rules", *RULE_FILES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.slow
def test_promtool_unit_tests_pass():
    promtool = require("promtool")
    assert PROMTOOL_TESTS, "no promtool tests under alerts/tests"
    result = run(promtool, "test", "rules", *PROMTOOL_TESTS, cwd=ALERTS_DIR / "tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(PROMTOOL_TESTS)


def test_promtool_reports_a_failing_unit_test(tmp_path):
    """Guards the test above: a wrong expectation must make promtool exit non-zero, not pass silently."""
    promtool = require("promtool")
    broken = {
        "rule_files": [str(ALERTS_DIR / "numawatch-alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": 'up{job="numawatch",instance="gpu-1"}', "values": "0x30"}],
                "alert_rule_test": [{"eval_time": "20m", "alertname": "NumawatchDown", "exp_alerts": []}],
            }
        ],
    }
    path = tmp_path / "broken_test.yml"
    path.write_text(yaml.safe_dump(broken))
    result = run(promtool, "test", "rules", path)
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


# --- every alert: labels, annotations, runbooks, tests -------------------------------------------------------


def test_every_alert_has_severity_summary_description_and_runbook_url():
    pattern = runbook_url_pattern()
    for rule in alerting_rules():
        name = rule["alert"]
        assert re.fullmatch(r"Numawatch[A-Z][A-Za-z]+", name), name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        annotations = rule["annotations"]
        assert set(annotations) >= {"summary", "description", "runbook_url"}, name
        # a static, sentence-shaped summary reads well as the headline of a grouped notification
        assert "{{" not in annotations["summary"], name
        assert annotations["summary"][0].isupper() and annotations["summary"].endswith("."), name
        assert annotations["runbook_url"] == pattern % name, name


def test_only_the_paging_policy_alerts_are_critical():
    critical = {rule["alert"] for rule in alerting_rules() if rule["labels"]["severity"] == "critical"}
    assert critical == PAGING_ALERTS


def test_drift_alerts_wait_and_keep_firing_against_flapping():
    for rule in alerting_rules():
        if rule["alert"] in META_ALERTS:
            continue
        assert rule.get("for"), rule["alert"]
        assert rule.get("keep_firing_for"), rule["alert"]


def test_every_alert_has_a_runbook_with_the_four_sections():
    for name in alert_names():
        path = RUNBOOKS / f"{name}.md"
        assert path.is_file(), f"missing runbook {path.relative_to(ROOT)}"
        text = path.read_text()
        assert text.startswith(f"# {name}\n"), path.name
        positions = [text.find(f"\n{section}\n") for section in RUNBOOK_SECTIONS]
        assert all(p >= 0 for p in positions), f"{path.name} lacks one of {RUNBOOK_SECTIONS}"
        assert positions == sorted(positions), f"{path.name}: sections out of order"


def test_no_runbook_without_an_alert_and_the_index_lists_every_alert():
    names = alert_names()
    pages = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert pages == names
    index = (RUNBOOKS / "README.md").read_text()
    for name in names:
        assert f"]({name}.md)" in index, f"docs/runbooks/README.md does not link {name}"


def test_runbook_links_between_pages_resolve():
    for page in RUNBOOKS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).resolve().is_file() or target.startswith("../"), f"{page.name} -> {target}"


def promtool_cases() -> dict[str, dict[str, bool]]:
    """For each alert name: whether some unit test expects it firing, and whether one expects it silent."""
    cases: dict[str, dict[str, bool]] = {}
    for path in PROMTOOL_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                seen = cases.setdefault(case["alertname"], {"firing": False, "silent": False})
                seen["firing" if case.get("exp_alerts") else "silent"] = True
    return cases


def test_every_alert_is_unit_tested_firing_and_not_firing():
    cases = promtool_cases()
    for name in alert_names():
        assert cases.get(name, {}).get("firing"), f"no promtool test where {name} fires"
        assert cases.get(name, {}).get("silent"), f"no promtool test where {name} stays silent"


@pytest.mark.slow
def test_unit_tests_assert_the_exact_runbook_url():
    pattern = runbook_url_pattern()
    for path in PROMTOOL_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                for alert in case.get("exp_alerts") or []:
                    assert alert["exp_annotations"]["runbook_url"] == pattern % case["alertname"]


# --- recording rules -----------------------------------------------------------------------------------------


def recording_rules() -> list[tuple[str, dict]]:
    """(rule file name, rule) for every recording rule of every rule file in alerts/."""
    return [
        (path.name, rule)
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    ]


def documented_metric_names() -> set[str]:
    return set(re.findall(r"`(numawatch_[a-z0-9_]+)`", (ROOT / "docs" / "metrics.md").read_text()))


@pytest.mark.slow
def test_generate_py_writes_every_rule_file_in_alerts():
    assert set(load_generator().outputs()) == set(RULE_FILES)


def test_every_rule_file_is_loaded_by_a_promtool_unit_test():
    loaded = set()
    for path in PROMTOOL_TESTS:
        for name in yaml.safe_load(path.read_text())["rule_files"]:
            loaded.add((path.parent / name).resolve())
    assert {path.resolve() for path in RULE_FILES} <= loaded


def test_every_recording_rule_is_asserted_by_a_promtool_unit_test():
    tested = " ".join(
        case["expr"]
        for path in PROMTOOL_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("promql_expr_test", [])
        if case.get("exp_samples")
    )
    for file_name, rule in recording_rules():
        assert re.search(rf"(?<![\w:]){re.escape(rule['record'])}(?![\w:])", tested), (file_name, rule["record"])


def test_recording_rules_are_named_level_metric_operations_and_built_on_documented_metrics():
    documented = documented_metric_names()
    for file_name, rule in recording_rules():
        level, metric, operations = rule["record"].split(":")
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", level), rule["record"]
        assert metric.startswith("numawatch_") and operations, rule["record"]
        used = {name.removesuffix("_total") for name in re.findall(r"\bnumawatch_\w+", rule["expr"])}
        known = {name.removesuffix("_total") for name in documented}
        assert used <= known, (file_name, rule["record"], sorted(used - known))


def test_recording_rules_use_fixed_windows_and_no_dashboard_variables():
    for _, rule in recording_rules():
        # $__rate_interval & co. exist only in Grafana; label_replace's $1 is PromQL's own
        assert not re.search(r"\$(?!\d)", rule["expr"]), rule["record"]
        for window in re.findall(r"\[([^\]]+)\]", rule["expr"]):
            assert window == "5m", rule["record"]


def test_gpu_bubble_rules_keep_the_holder_labels_on_both_sides():
    rules = {rule["record"]: rule["expr"] for _, rule in recording_rules()}
    idle = rules["instance_gpu:numawatch_gpu_held_idle:ratio_rate5m"]
    wait = rules["instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m"]
    for counter, expr in (
        ("numawatch_gpu_held_idle_seconds_total", idle),
        ("numawatch_gpu_sampled_seconds_total", idle),
        ("numawatch_gpu_holder_run_delay_seconds_total", wait),
    ):
        assert re.search(rf"{counter}(\{{[^}}]*\}})?\[5m\]", expr), counter
    assert "group_right" in idle and "numawatch_gpu_processes" in idle
    holder = "cluster, node, instance, namespace, pod, container"
    assert "gpu, uuid, namespace, pod, container) (numawatch_gpu_processes" in idle
    assert wait.startswith(f"sum by ({holder})")


def test_fleet_rules_fold_duplicate_scrapes_of_one_target():
    """A node scraped by two jobs counts once: sums, counts and averages over a cluster first take the max per
    target (a max over the cluster needs no such step)."""
    for _, rule in recording_rules():
        if rule["record"].startswith("cluster") and not rule["expr"].startswith("max by (cluster"):
            assert re.search(r"max by \(cluster, (node, )?instance\b", rule["expr"]), rule["record"]


# --- check ids -----------------------------------------------------------------------------------------------


def checks_per_alert() -> tuple[dict[str, set[str]], set[str]]:
    """Check ids each alert selects explicitly, and the ids the catch-all excludes."""
    covered: dict[str, set[str]] = {}
    excluded: set[str] = set()
    for rule in alerting_rules():
        for op, value in DRIFT_MATCHER.findall(rule["expr"]):
            ids = set(value.split("|"))
            if op == "!~":
                assert rule["alert"] == CATCH_ALL, rule["alert"]
                excluded |= ids
            else:
                covered.setdefault(rule["alert"], set()).update(ids)
    return covered, excluded


def test_every_check_id_has_a_dedicated_alert():
    covered, _ = checks_per_alert()
    all_covered = set().union(*covered.values())
    missing = (CONTRACT_CHECK_IDS | registry_check_ids()) - all_covered
    assert not missing, f"check ids without an alert: {sorted(missing)}"


def test_each_check_id_belongs_to_exactly_one_alert():
    covered, _ = checks_per_alert()
    owner: dict[str, str] = {}
    for alert, ids in covered.items():
        for check in ids:
            assert check not in owner or owner[check] == alert, f"{check} in {owner.get(check)} and {alert}"
            owner[check] = alert


def test_the_catch_all_alert_excludes_exactly_the_catalogued_checks():
    covered, excluded = checks_per_alert()
    assert excluded == set().union(*covered.values())


def test_check_ids_in_rules_are_well_formed():
    covered, _ = checks_per_alert()
    for ids in covered.values():
        for check in ids:
            assert re.fullmatch(r"[a-z][a-z0-9_]*", check), check


# --- Alertmanager example ------------------------------------------------------------------------------------


def test_alertmanager_example_passes_amtool_check_config():
    amtool = require("amtool")
    result = run(amtool, "check-config", AM_CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=NumawatchContainerCPUSetDrift", "severity=critical", "cluster=c1", "check=x"], "numawatch-pager"),
        (["alertname=NumawatchKubeletStateStale", "severity=critical", "cluster=c1"], "numawatch-pager"),
        (["alertname=NumawatchDriftWidespread", "severity=critical", "cluster=c1"], "numawatch-pager"),
        (["alertname=NumawatchContainerCPUSetDrift", "severity=warning", "cluster=c1"], "numawatch-ticket"),
        (["alertname=NumawatchHostTuningDrift", "severity=warning", "check=thp_enabled"], "numawatch-ticket"),
        (["alertname=NumawatchDown", "severity=warning"], "numawatch-ticket"),
        (["alertname=NumawatchSomethingInformative", "severity=info"], "null"),
        (["alertname=KubeNodeNotReady", "severity=critical"], "default"),
    ],
)
def test_alertmanager_routes_pages_tickets_and_the_rest(labels, receiver):
    amtool = require("amtool")
    result = run(
        amtool, "config", "routes", "test", f"--config.file={AM_CONFIG}", f"--verify.receivers={receiver}", *labels
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_amtool_route_test_fails_on_a_wrong_receiver():
    """Guards the routing tests: amtool must exit non-zero when the resolved receiver differs."""
    amtool = require("amtool")
    labels = ["alertname=NumawatchContainerCPUSetDrift", "severity=warning"]
    result = run(
        amtool, "config", "routes", "test", f"--config.file={AM_CONFIG}", "--verify.receivers=numawatch-pager", *labels
    )
    assert result.returncode != 0


@pytest.mark.slow
def test_every_alert_severity_is_routed_to_a_receiver_with_its_policy():
    amtool = require("amtool")
    expected = {"critical": "numawatch-pager", "warning": "numawatch-ticket", "info": "null"}
    for rule in alerting_rules():
        severity = rule["labels"]["severity"]
        labels = [f"alertname={rule['alert']}", f"severity={severity}", "cluster=c1", "check=some_check"]
        result = run(amtool, "config", "routes", "test", f"--config.file={AM_CONFIG}", *labels)
        assert result.stdout.strip().splitlines()[0] == expected[severity], (rule["alert"], result.stdout)


def test_notifications_group_by_cluster_alertname_and_check():
    config = yaml.safe_load(AM_CONFIG.read_text())
    numawatch = next(r for r in config["route"]["routes"] if 'alertname=~"Numawatch.+"' in r["matchers"])
    assert numawatch["group_by"] == ["cluster", "alertname", "check"]


def test_widespread_drift_inhibits_every_per_node_drift_alert_of_the_same_check():
    config = yaml.safe_load(AM_CONFIG.read_text())
    rule = next(r for r in config["inhibit_rules"] if r["source_matchers"] == ['alertname="NumawatchDriftWidespread"'])
    assert rule["equal"] == ["cluster", "check"]
    (matcher,) = rule["target_matchers"]
    pattern = re.fullmatch(r'alertname=~"(.+)"', matcher)
    assert pattern is not None
    per_node = alert_names() - META_ALERTS - FLEET_ALERTS
    inhibited = {name for name in alert_names() if re.fullmatch(pattern.group(1), name)}
    assert inhibited == per_node
