"""The monitoring mixin (numawatch-mixin/): rendered with Debian's jsonnet, it is what alerts/ and dashboards/ hold,
and a rendering with another job selector and cluster label carries them into every expression.

The committed files are compared parsed-equal with the mixin's output here (tests/test_alerts.py and
tests/test_dashboards.py compare them byte for byte with what alerts/generate.py and dashboards/generate.py write).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from promql_selectors import selectors

ROOT = Path(__file__).resolve().parents[1]
MIXIN = ROOT / "numawatch-mixin"
sys.path.insert(0, str(MIXIN))
from render import JsonnetMissing, render  # noqa: E402

# Another fleet's conventions: its own scrape job and cluster label, one cluster (no cluster picker).
CUSTOM = {"numawatchSelector": 'job="nw-prod"', "clusterLabel": "k8s_cluster", "showMultiCluster": False}
CUSTOM_JOB = ("job", "=", "nw-prod")

pytestmark = pytest.mark.skipif(
    shutil.which("jsonnet") is None, reason="jsonnet is not installed (apt-get install jsonnet)"
)


@functools.cache
def _render_once(field: str, config_json: str) -> str:
    return json.dumps(render(field, json.loads(config_json)))


def rendered(field: str, config: dict | None = None) -> Any:
    """The mixin's field under ``config``, rendered once per session (each test gets its own copy)."""
    try:
        return json.loads(_render_once(field, json.dumps(config or {}, sort_keys=True)))
    except JsonnetMissing as missing:
        pytest.skip(str(missing))


def load_script(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def rule_groups(paths: list[Path]) -> dict[str, dict]:
    return {group["name"]: group for path in paths for group in yaml.safe_load(path.read_text())["groups"]}


def strip_block_newlines(groups: dict[str, dict]) -> dict[str, dict]:
    """A ||| block's closing newline is dropped when the rule files are written; nothing else changes."""
    for group in groups.values():
        for rule in group["rules"]:
            rule["expr"] = rule["expr"].rstrip("\n")
    return groups


# --- the committed files are the mixin's output ----------------------------------------------------------------


def test_checks_json_is_what_checks_py_writes():
    module = load_script(MIXIN / "checks.py", "numawatch_mixin_checks")
    for path, text in module.outputs().items():
        assert path.read_text() == text, "numawatch-mixin/checks.json is stale: run python numawatch-mixin/checks.py"


@pytest.mark.slow
def test_committed_rule_files_are_the_mixins_rules_parsed_equal():
    alerts = strip_block_newlines({g["name"]: g for g in rendered("prometheusAlerts")["groups"]})
    rules = strip_block_newlines({g["name"]: g for g in rendered("prometheusRules")["groups"]})
    assert rule_groups([ROOT / "alerts" / "numawatch-alerts.yml"]) == alerts
    committed = rule_groups([ROOT / "alerts" / "numawatch-rules.yml", ROOT / "alerts" / "numawatch-capacity.rules.yml"])
    assert committed == rules


@pytest.mark.slow
def test_committed_dashboards_are_the_mixins_dashboards_parsed_equal():
    dashboards = rendered("grafanaDashboards")
    assert set(dashboards) == {path.name for path in (ROOT / "dashboards").glob("*.json")}
    for name, dashboard in dashboards.items():
        assert json.loads((ROOT / "dashboards" / name).read_text()) == dashboard, name


def test_the_mixin_needs_no_external_jsonnet_library():
    manifest = json.loads((MIXIN / "jsonnetfile.json").read_text())
    assert manifest["dependencies"] == []
    imports = set()
    for path in MIXIN.rglob("*.libsonnet"):
        imports |= set(re.findall(r"import(?:str)? '([^']+)'", path.read_text()))
    for name in imports:
        assert not name.startswith(("github.com", "grafonnet", "vendor")), name


def test_every_registry_check_is_covered_by_one_dedicated_alert_in_the_mixin():
    checks = {check["id"] for check in json.loads((MIXIN / "checks.json").read_text())["checks"]}
    (drift,) = [g for g in rendered("prometheusAlerts")["groups"] if g["name"] == "numawatch-drift"]
    catch_all = [r for r in drift["rules"] if r["alert"] == "NumawatchDriftDetected"]
    (excluded,) = [m for r in catch_all for s in selectors(r["expr"]) for m in s.matchers if m[:2] == ("check", "!~")]
    assert set(excluded[2].split("|")) == checks


# --- alert texts that say how long -------------------------------------------------------------------------------

UNITS = {"y": "year", "w": "week", "d": "day", "h": "hour", "m": "minute", "s": "second", "ms": "millisecond"}
# A duration in an alert's text: "15 minutes", "1 hour 5 minutes".
_UNIT_WORD = r"\d+ (?:" + "|".join(UNITS.values()) + r")s?\b"
DURATION_IN_TEXT = re.compile(rf"\b{_UNIT_WORD}(?: {_UNIT_WORD})*")


def duration_words(duration: str) -> str:
    """A Prometheus duration in words, written here independently of the mixin's lib/durations.libsonnet."""
    parts = re.findall(r"(\d+)(ms|[ywdhms])", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return " ".join(f"{int(n)} {UNITS[u]}{'' if int(n) == 1 else 's'}" for n, u in parts)


def durations_said(rule: dict) -> list[str]:
    return [found for text in rule["annotations"].values() for found in DURATION_IN_TEXT.findall(text)]


def test_duration_words_reads_prometheus_durations():
    assert duration_words("15m") == "15 minutes"
    assert duration_words("1h5m") == "1 hour 5 minutes"
    assert duration_words("1d") == "1 day"


@pytest.mark.slow
def test_every_alert_text_says_the_for_it_is_configured_with():
    """An alert whose description says how long its condition has held says its `for:`: rendered with other
    durations (a different one per alert and severity), every duration in every alert's text is its own."""
    defaults = rendered("_config")["alertFor"]
    custom: dict[str, object] = {}
    for index, (name, value) in enumerate(sorted(defaults.items())):
        minutes = 17 + index
        if isinstance(value, dict):
            custom[name] = {severity: f"1h{minutes + offset}m" for offset, severity in enumerate(sorted(value))}
        else:
            custom[name] = f"{minutes}m" if index % 2 else f"1h{minutes}m"
    said = 0
    for config, durations in (({}, defaults), ({"alertFor": custom}, custom)):
        for group in rendered("prometheusAlerts", config)["groups"]:
            for rule in group["rules"]:
                configured = durations[rule["alert"]]
                if isinstance(configured, dict):
                    configured = configured[rule["labels"]["severity"]]
                assert rule["for"] == configured, rule["alert"]
                for found in durations_said(rule):
                    assert found == duration_words(configured), (rule["alert"], found, configured)
                    said += 1
    assert said >= 4  # NumawatchDown and NumawatchMissingOnGPUNode say theirs, in both renderings


def test_an_alert_for_that_is_no_prometheus_duration_is_refused():
    with pytest.raises(RuntimeError, match="not a Prometheus duration: 15"):
        render("prometheusAlerts", {"alertFor": {**rendered("_config")["alertFor"], "NumawatchDown": "15"}})


# --- another job selector and cluster label ----------------------------------------------------------------------


def every_expression(config: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every alert, recording rule, dashboard target and variable query of a rendering."""
    found = []
    for field in ("prometheusAlerts", "prometheusRules"):
        for group in rendered(field, config)["groups"]:
            for rule in group["rules"]:
                found.append((f"{group['name']}/{rule.get('alert') or rule.get('record')}", rule["expr"]))
    for name, dashboard in rendered("grafanaDashboards", config).items():
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                found.append((f"{name}/{panel['title']}", target["expr"]))
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                match = re.fullmatch(r"label_values\((.+), *(\w+)\)", variable["query"]["query"])
                assert match, (name, variable["name"])
                found.append((f"{name}/variable {variable['name']}", match.group(1)))
    return found


@pytest.mark.slow
def test_every_numawatch_selector_carries_the_configured_job_selector():
    expressions = every_expression(CUSTOM)
    seen = 0
    for where, expr in expressions:
        for selector in selectors(expr):
            if selector.metric.startswith("numawatch_") or selector.metric == "up":
                seen += 1
                assert selector.has(*CUSTOM_JOB), f"{where}: {selector.metric} lacks job=\"nw-prod\""
                assert not selector.has("job", "=", "numawatch"), where
    assert seen > 100  # every alert, rule and panel was looked at, not an empty rendering


def test_every_cluster_grouping_and_matcher_uses_the_configured_cluster_label():
    for where, expr in every_expression(CUSTOM):
        for clause in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr):
            labels = {label.strip() for label in clause.split(",")}
            assert "cluster" not in labels, f"{where}: groups by cluster"
        for selector in selectors(expr):
            assert all(label != "cluster" for label, _, _ in selector.matchers), where
            on_dashboard = ".json/" in where
            if on_dashboard and (":" in selector.metric or selector.metric == "ALERTS"):
                # recorded per cluster, or an alert: only the cluster label to select on
                assert selector.has("k8s_cluster", "=~", "$cluster"), where
    text = json.dumps(rendered("prometheusAlerts", CUSTOM))
    assert "$labels.cluster" not in text and "$labels.k8s_cluster" in text


def test_the_cluster_picker_is_hidden_without_multi_cluster():
    for config, hide in ((CUSTOM, 2), ({}, 0)):
        for name, dashboard in rendered("grafanaDashboards", config).items():
            (cluster,) = [v for v in dashboard["templating"]["list"] if v["name"] == "cluster"]
            assert cluster["hide"] == hide, name
            assert cluster["allValue"] == ".*", name  # matches a Prometheus without the label too


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def write_rules(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "custom-rules.yml"
    groups = rendered("prometheusAlerts", config)["groups"] + rendered("prometheusRules", config)["groups"]
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def test_promtool_check_rules_passes_on_the_custom_rendering(tmp_path):
    result = subprocess.run(
        [promtool(), "check", "rules", str(write_rules(tmp_path, CUSTOM))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_custom_rendering_selects_its_own_job_and_groups_by_its_cluster_label(tmp_path):
    """A promtool unit test on the custom rendering: the nw-prod job's drift fires with its k8s_cluster label and
    is rolled up per k8s_cluster; the same series from a job named numawatch (another team's) is never selected."""
    rules = write_rules(tmp_path, CUSTOM)
    labels = 'check="kubelet_state_stale",severity="critical",k8s_cluster="prod-eu",node="gpu-1",instance="gpu-1"'
    other = labels.replace("gpu-1", "gpu-2")
    test = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f'numawatch_drift{{{labels},job="nw-prod"}}', "values": "1x10"},
                    {"series": f'numawatch_drift_findings{{{labels},job="nw-prod"}}', "values": "1x10"},
                    {"series": f'numawatch_drift{{{other},job="numawatch"}}', "values": "1x10"},
                    {"series": f'numawatch_drift_findings{{{other},job="numawatch"}}', "values": "1x10"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "6m",
                        "alertname": "NumawatchKubeletStateStale",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "k8s_cluster": "prod-eu",
                                    "node": "gpu-1",
                                    "instance": "gpu-1",
                                    "check": "kubelet_state_stale",
                                },
                                "exp_annotations": {
                                    "summary": "A kubelet checkpoint file no longer matches the kubelet's policy; the "
                                    "next kubelet start fails.",
                                    "description": "gpu-1: 1 kubelet state file(s) were written under another policy. "
                                    "The kubelet refuses to start with them: the next restart (upgrade, reboot, config "
                                    "change) takes the node out. Fix it before that happens. The expected and actual "
                                    "values are in numawatch_drift_info (same labels) and in `numawatch check` on the "
                                    "node.",
                                    "runbook_url": "https://github.com/numawatch/numawatch/blob/main/docs/runbooks/"
                                    "NumawatchKubeletStateStale.md",
                                },
                            }
                        ],
                    }
                ],
                "promql_expr_test": [
                    {
                        "expr": "cluster_check:numawatch_drift_nodes:count",
                        "eval_time": "6m",
                        "exp_samples": [
                            {
                                "labels": 'cluster_check:numawatch_drift_nodes:count{k8s_cluster="prod-eu",'
                                'check="kubelet_state_stale"}',
                                "value": 1,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "custom_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run(
        [promtool(), "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_custom_dashboard_queries_are_valid_promql(tmp_path):
    substitutions = {"$__rate_interval": "1m", "$cluster": ".*", "$job": ".+", "$instance": ".+", "$check": ".*"}
    substitutions["$shape"] = ".*"
    rules = []
    for index, (where, expr) in enumerate(every_expression(CUSTOM)):
        if ".json/" not in where:
            continue
        for variable, value in substitutions.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:query_{index}:check", "expr": expr})
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
