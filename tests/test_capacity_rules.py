"""alerts/numawatch-capacity.rules.yml: valid for promtool, unit-tested (alerts/tests/capacity_test.yml), and built
only on metrics numawatch exposes. promtool comes from Debian's `prometheus` package; without it those tests skip."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from fakehost.reference import reference_snapshot
from numawatch.checks import evaluate
from numawatch.intent import REFERENCE
from numawatch.metrics import capacity as capacity_metrics

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "alerts" / "numawatch-capacity.rules.yml"
UNIT_TEST = ROOT / "alerts" / "tests" / "capacity_test.yml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return path


def run(*argv: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_capacity_rules_pass_promtool_check_rules():
    result = run(promtool(), "check", "rules", RULES)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_capacity_recording_rules_pass_their_promtool_unit_test():
    result = run(promtool(), "test", "rules", UNIT_TEST.name, cwd=UNIT_TEST.parent)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_wrong_expectation_fails_the_promtool_unit_test(tmp_path):
    """Guards the test above: promtool must fail, not pass silently, when the sum is not what the rule gives."""
    document = yaml.safe_load(UNIT_TEST.read_text())
    document["rule_files"] = [str(RULES)]
    document["tests"][0]["promql_expr_test"][0]["exp_samples"][0]["value"] = 4
    broken = tmp_path / "broken_test.yml"
    broken.write_text(yaml.safe_dump(document))

    result = run(promtool(), "test", "rules", broken)

    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def test_every_rule_is_recorded_per_cluster_from_a_metric_numawatch_exposes():
    exposed = {f.name for f in capacity_metrics.families(evaluate(reference_snapshot(), REFERENCE), ())}

    for rule in rules():
        assert re.fullmatch(r"cluster(_\w+)?:numawatch_capacity_\w+:(sum|count|max)", rule["record"]), rule["record"]
        used = set(re.findall(r"numawatch_\w+", rule["expr"]))
        assert used and used <= exposed, rule["record"]
        assert re.search(r"by \(cluster[,)]", rule["expr"]), rule["record"]


def test_the_fleet_sum_dedupes_a_node_scraped_by_two_jobs():
    (rule,) = [r for r in rules() if r["record"] == "cluster_shape:numawatch_capacity_shape_replicas:sum"]

    assert "max by (cluster, instance, shape)" in rule["expr"]
