"""``numawatch explain``: worst-case staleness computed from the refresh table (numawatch.dataflow) for every check
and metric family from the inputs they declare, its text, Markdown and JSON forms, the one-line error for an unknown
name, and docs/sources.md's tables, which are its output (tools/generate_staleness.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from numawatch import cli, dataflow
from numawatch.checks import all_checks
from numawatch.dataflow import UnknownName, bound_of, explain, metric_declarations, worst_case_evaluations
from numawatch.inputs import FINDINGS, MEMORY_PLACEMENT, Source
from numawatch.refresh import (
    DAEMON_SEARCH,
    DEFAULT_INTERVAL,
    DEFAULT_STAGGER,
    FULL_PROCESS_SCAN,
    GUARANTEED_PODS,
    PLACEMENT,
    POLICIES,
    SHARED_PODS,
    Policy,
)

REPO = Path(__file__).resolve().parents[1]
K = 4


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------------- the computation
def test_bounds_follow_the_policy_of_each_input():
    cgroups = POLICIES["cgroups"]
    placement_round = cgroups.stretch[PLACEMENT] * K
    pods_rounds = [cgroups.stretch.get(family, 1) * K for family in cgroups.waits[PLACEMENT]]
    # A rotating family waiting for its pod's turn: its own round plus the longest of those it waits for.
    assert bound_of(MEMORY_PLACEMENT, K).evaluations == placement_round + max(pods_rounds)
    assert worst_case_evaluations("container_memory_remote", K) == placement_round + max(pods_rounds)
    # Read at one evaluation in N; a rate between two such readings shows what stopped one reading later.
    every = POLICIES["interrupts"].every
    assert worst_case_evaluations("numawatch_cpu_interrupts_total", K) == every
    assert worst_case_evaluations("tick_on_nohz_full", K) == 2 * every
    # On change, every evaluation, numawatch's own state: the next evaluation.
    assert worst_case_evaluations("kubelet_cpu_manager_policy", K) == 1
    assert worst_case_evaluations("numawatch_source_up", K) == 1
    assert worst_case_evaluations("numawatch_http_requests_refused_total", K) == 1
    # A stretched family: S x K; the drift families: the stalest check.
    assert worst_case_evaluations("cpufreq_governor", K) == POLICIES["kernel"].stretch["cpufreq governors"] * K
    assert worst_case_evaluations("numawatch_drift", K) == max(
        worst_case_evaluations(check.id, K) for check in all_checks()
    )


def test_with_a_stagger_of_one_everything_is_one_evaluation_old_but_the_rates_and_the_periodic_looks():
    rates = {"irq_activity_on_isolated_cpu", "tick_on_nohz_full"}
    # irqbalance's searches keep their periods whatever K: its check waits for the longest of the two it declares.
    searched = max(POLICIES["irqbalance"].periodic[look] for look in (DAEMON_SEARCH, FULL_PROCESS_SCAN))
    periodic = {"irqbalance_unbanned": searched, "numawatch_irqbalance_running": searched}
    for check in all_checks():
        expected = periodic.get(check.id, 2 if check.id in rates else 1)
        assert worst_case_evaluations(check.id, 1) == expected, check.id
    for name, (_, inputs) in metric_declarations().items():
        # The drift families are as stale as the stalest check: irqbalance's.
        expected = searched if FINDINGS in inputs else periodic.get(name, 1)
        assert worst_case_evaluations(name, 1) == expected, name


def test_a_check_is_as_stale_as_its_stalest_input_and_a_larger_stagger_never_makes_it_fresher():
    for check in all_checks():
        explained = explain(check.id, K)
        assert explained.evaluations == max(bound.evaluations for bound in explained.bounds)
        assert worst_case_evaluations(check.id, 2 * K) >= explained.evaluations


def test_a_fixed_round_does_not_grow_with_the_stagger_and_what_waits_for_it_adds_it(monkeypatch):
    table = dict(POLICIES)
    table["cgroups"] = Policy(
        rotating=frozenset({PLACEMENT, SHARED_PODS, GUARANTEED_PODS}),
        stretch={PLACEMENT: 8, SHARED_PODS: 2},
        fixed={GUARANTEED_PODS: 2},
        waits={PLACEMENT: (GUARANTEED_PODS,)},
    )
    monkeypatch.setattr(dataflow, "POLICIES", table)
    for stagger in (2, 4, 16):
        assert bound_of(Source("cgroups", GUARANTEED_PODS), stagger).evaluations == 2
        assert bound_of(Source("cgroups", SHARED_PODS), stagger).evaluations == 2 * stagger
        assert bound_of(MEMORY_PLACEMENT, stagger).evaluations == 8 * stagger + 2
    assert bound_of(Source("cgroups", GUARANTEED_PODS), 1).evaluations == 1
    # The family waited on read at every reading: one reading more.
    table["cgroups"] = Policy(rotating=frozenset({PLACEMENT}), stretch={PLACEMENT: 8},
                              waits={PLACEMENT: (SHARED_PODS,)})  # fmt: skip
    assert bound_of(MEMORY_PLACEMENT, 4).evaluations == 8 * 4 + 1


def test_the_kubernetes_api_adds_its_own_interval_in_seconds():
    explained = explain("node_taint_missing", K, api_interval=60.0)
    assert explained.evaluations == 1
    assert explained.seconds(15.0) == 15.0 + 60.0


def test_a_counter_is_found_with_or_without_its_total_suffix_and_an_unknown_name_is_refused():
    assert explain("numawatch_cpu_interrupts").name == explain("numawatch_cpu_interrupts_total").name
    with pytest.raises(UnknownName):
        explain("no_such_check")


# ------------------------------------------------------------------------------------------------- the command
def test_explain_of_a_check_prints_its_inputs_and_its_worst_case_at_the_interval(capsys):
    code, out, err = run(capsys, "container_memory_remote", "--interval", "10", "--stagger", "2")
    worst = worst_case_evaluations("container_memory_remote", 2)
    assert (code, err) == (0, "")
    assert out.startswith("container_memory_remote (check): ")
    assert f"worst-case staleness: {worst} evaluations, {worst * 10:g} s at --interval 10 and --stagger 2" in out
    assert "- cgroups: container memory placement: a rotating 1/16 of its objects per evaluation" in out
    assert "memory.numa_stat" in out and "- workloads join: derived from " in out
    assert f"why that is safe: {POLICIES['cgroups'].why}" in out  # the table's reason, under each stale input


def test_explain_of_a_metric_names_its_builder_and_its_inputs(capsys):
    code, out, _ = run(capsys, "numawatch_cpu_interrupts")
    every = POLICIES["interrupts"].every
    assert code == 0
    assert out.startswith("numawatch_cpu_interrupts_total (metric): built by numawatch.metrics.host.cpu_interrupts")
    assert f"worst-case staleness: {every} evaluations, {every * DEFAULT_INTERVAL:g} s" in out
    assert f"- interrupts (/proc/interrupts counts on isolated, nohz_full and exclusively pinned CPUs): one " \
           f"evaluation in {every}" in out  # fmt: skip


def test_explain_of_an_unknown_name_is_one_line_and_exit_2(capsys):
    code, out, err = run(capsys, "container_cpuset_drfit\x1b[31m")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "\x1b" not in err
    assert err.startswith("numawatch: error: no check or metric is named 'container_cpuset_drfit\\x1b[31m'")


def test_explain_without_a_name_answers_for_every_check_and_metric(capsys):
    code, out, _ = run(capsys)
    assert code == 0
    headings = [line.split(" (")[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert headings == [check.id for check in all_checks()] + list(metric_declarations())


def test_explain_as_json(capsys):
    code, out, _ = run(capsys, "irq_activity_on_isolated_cpu", "--format", "json", "--kubernetes.interval", "40")
    document = json.loads(out)
    assert code == 0
    assert (document["interval"], document["stagger"], document["kubernetes_interval"]) == (15.0, 4, 40.0)
    [explained] = document["explanations"]
    assert explained["name"] == "irq_activity_on_isolated_cpu" and explained["kind"] == "check"
    assert explained["evaluations"] == worst_case_evaluations("irq_activity_on_isolated_cpu", DEFAULT_STAGGER)
    assert explained["seconds"] == explained["evaluations"] * 15.0
    rate = explained["inputs"][0]
    assert rate["input"] == "rate of interrupts" and rate["reads"][0]["source"] == "interrupts"
    affinities = next(item for item in explained["inputs"] if item.get("family") == "irq affinities")
    assert affinities["source"] == "irqs" and affinities["description"] and affinities["why"] == POLICIES["irqs"].why

    code, out, _ = run(capsys, "--format", "json")
    names = [item["name"] for item in json.loads(out)["explanations"]]
    assert names == [check.id for check in all_checks()] + list(metric_declarations())


def test_explain_as_markdown_is_two_tables(capsys):
    code, out, _ = run(capsys, "numawatch_container_memory_numa_bytes", "--format", "markdown")
    worst = worst_case_evaluations("numawatch_container_memory_numa_bytes", DEFAULT_STAGGER)
    assert code == 0
    assert "| cgroups: container memory placement | a rotating 1/" in out
    assert f"| `numawatch_container_memory_numa_bytes` | workloads join, container memory placement | " \
           f"{worst} | {worst * DEFAULT_INTERVAL:g} s |" in out  # fmt: skip
    assert all(line.startswith("|") for line in out.splitlines() if line)
    _, out, _ = run(capsys, "--format", "markdown")
    assert "var/log/pods/&lt;pod&gt;" in out and "<pod>" not in out  # no cell is taken for HTML


def test_a_bad_stagger_or_format_is_a_usage_error(capsys):
    assert run(capsys, "--stagger", "0")[0] == 2
    assert run(capsys, "--format", "yaml")[0] == 2


# ------------------------------------------------------------------------------------------------- the documentation
def test_the_staleness_tables_of_docs_sources_md_are_explains_output(capsys):
    _, tables, _ = run(capsys, "--format", "markdown")
    text = (REPO / "docs" / "sources.md").read_text()
    begin = "<!-- numawatch explain --format markdown: begin -->\n"
    end = "<!-- numawatch explain --format markdown: end -->\n"
    assert text.split(begin, 1)[1].split(end, 1)[0] == tables, (
        "docs/sources.md's staleness tables are stale: run python tools/generate_staleness.py"
    )


def test_the_generator_agrees():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "generate_staleness.py"), "--check"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
