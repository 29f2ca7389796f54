"""The Grafana dashboards in dashboards/: schema, dashboard-linter rules re-implemented, and valid PromQL.

grafana/dashboard-linter ships only as a Go binary on GitHub, so the rules we keep are checked here. That every
query also returns data is tested against a real Prometheus in tests/test_e2e_prometheus.py.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
import yaml
from promql_selectors import selectors

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = ROOT / "dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))
SCHEMA = json.loads((DASHBOARDS / "schema" / "dashboard-v39.schema.json").read_text())
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
EXPECTED_UIDS = {
    "numawatch-fleet.json": "numawatch-fleet",
    "numawatch-node.json": "numawatch-node",
    "numawatch-gpu.json": "numawatch-gpu",
}
# Grafana's unit ids that the dashboards may use (a subset of Grafana's categories).
UNITS = {
    "none", "short", "percentunit", "percent", "s", "ms", "bytes", "decbytes", "ops", "reqps", "cps", "dateTimeAsIso",
}  # fmt: skip
# Metrics of other exporters the dashboards may query, with what provides them. A panel on one says in its
# description that it shows nothing without it (tests/test_e2e_prometheus.py lists it among the exempt queries).
EXTERNAL_METRICS = {
    "up": "Prometheus itself",
    "ALERTS": "Prometheus itself",
    "kube_pod_status_phase": "kube-state-metrics",
}

# Grafana's variables, replaced by plausible values so that promtool can parse the expressions.
SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "$cluster": ".*",
    "$job": "numawatch",
    "$instance": "gpu-1",
    "$check": ".*",
    "$shape": ".*",
}


@functools.cache
def load_generator():
    name = "numawatch_dashboards_generate"
    spec = importlib.util.spec_from_file_location(name, DASHBOARDS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def dashboards() -> Iterator[tuple[str, dict]]:
    for path in FILES:
        yield path.name, load(path)


def panels(document: dict) -> Iterator[dict]:
    for panel in document["panels"]:
        yield panel
        yield from panel.get("panels", [])


def data_panels(document: dict) -> Iterator[dict]:
    return (p for p in panels(document) if p["type"] != "row")


def substitute(expr: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    return expr


def all_expressions() -> list[tuple[str, str, str]]:
    """(dashboard file, panel or variable title, expression) for every query in every dashboard."""
    found = []
    for name, document in dashboards():
        for panel in data_panels(document):
            for target in panel["targets"]:
                found.append((name, panel["title"], target["expr"]))
    return found


def variable_queries() -> list[tuple[str, str, str]]:
    """(dashboard, variable, the PromQL selector inside label_values()) for every query variable."""
    found = []
    for name, document in dashboards():
        for variable in document["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((.+), *(\w+)\)", variable["query"]["query"])
            assert match, f"{name}: variable {variable['name']} is not label_values(<selector>, <label>)"
            found.append((name, variable["name"], match.group(1)))
    return found


# --- files and schema ----------------------------------------------------------------------------------------


def test_the_three_dashboards_exist_with_stable_uids():
    assert {path.name for path in FILES} == set(EXPECTED_UIDS)
    for name, document in dashboards():
        assert document["uid"] == EXPECTED_UIDS[name]


@pytest.mark.slow
def test_committed_dashboards_are_what_generate_py_writes():
    for path, text in load_generator().outputs().items():
        assert path.read_text() == text, f"{path.name} is stale: run python dashboards/generate.py"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_dashboard_validates_against_the_schema_of_its_declared_version(path):
    document = load(path)
    assert document["schemaVersion"] == SCHEMA["properties"]["schemaVersion"]["const"]
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)


@pytest.mark.slow
def test_schema_rejects_a_dashboard_of_another_version_or_with_a_bad_panel():
    """Guards the test above: the schema must actually constrain what it claims to."""
    document = load(FILES[0])
    for mutate in (
        lambda d: d.update(schemaVersion=27),
        lambda d: d.update(uid="x" * 41),
        lambda d: d["panels"][1].pop("targets"),
        lambda d: d["panels"][1].update(type="graph"),
    ):
        broken = json.loads(json.dumps(document))
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_uids_are_unique_and_at_most_40_characters():
    uids = [document["uid"] for _, document in dashboards()]
    assert len(uids) == len(set(uids))
    assert all(len(uid) <= 40 for uid in uids)


def test_dashboards_are_uneditable_utc_and_tagged():
    for name, document in dashboards():
        assert document["editable"] is False, name
        assert document["timezone"] == "utc", name
        assert "numawatch" in document["tags"], name


# --- variables -----------------------------------------------------------------------------------------------


def test_exactly_one_datasource_variable_named_datasource():
    for name, document in dashboards():
        sources = [v for v in document["templating"]["list"] if v["type"] == "datasource"]
        assert len(sources) == 1, name
        (source,) = sources
        assert (source["name"], source["label"], source["query"]) == ("datasource", "Data source", "prometheus")


def test_every_dashboard_has_cluster_job_and_instance_variables():
    for name, document in dashboards():
        names = [v["name"] for v in document["templating"]["list"]]
        # in this order: each one's query narrows by the ones before it
        assert names[:4] == ["datasource", "cluster", "job", "instance"], name


def test_query_variables_use_the_datasource_variable_and_refresh_on_time_change():
    for name, document in dashboards():
        for variable in document["templating"]["list"]:
            if variable["type"] == "query":
                assert variable["datasource"] == DATASOURCE, (name, variable["name"])
                assert variable["refresh"] == 2, (name, variable["name"])
                if variable.get("includeAll"):
                    # job and instance: dashboard-linter's `.+` (every numawatch series has both); the rest `.*`,
                    # which also matches series without the label (a single-cluster Prometheus has no cluster)
                    expected = ".+" if variable["name"] in ("job", "instance") else ".*"
                    assert variable["allValue"] == expected, (name, variable["name"])


def test_every_used_variable_is_defined():
    for name, document in dashboards():
        defined = {v["name"] for v in document["templating"]["list"]}
        text = json.dumps(document["panels"]) + json.dumps(document["templating"])
        used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", text)) - {"__rate_interval", "__interval", "__range"}
        used = {u for u in used if not u.startswith("__")}
        assert used <= defined, f"{name}: undefined variables {sorted(used - defined)}"


# --- panels (dashboard-linter rules) -------------------------------------------------------------------------


def test_every_panel_and_target_uses_the_datasource_variable():
    for name, document in dashboards():
        for panel in data_panels(document):
            assert panel["datasource"] == DATASOURCE, (name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"] == DATASOURCE, (name, panel["title"])


def test_every_panel_has_a_title_a_description_and_targets():
    for name, document in dashboards():
        for panel in data_panels(document):
            assert panel["title"].strip(), name
            assert len(panel["description"]) >= 20, (name, panel["title"])
            assert panel["targets"], (name, panel["title"])


def test_every_panel_has_a_unit_or_value_mappings():
    for name, document in dashboards():
        for panel in data_panels(document):
            defaults = panel["fieldConfig"]["defaults"]
            assert defaults.get("unit") in UNITS or defaults.get("mappings"), (name, panel["title"])


def test_rates_use_rate_interval_and_counters_are_never_graphed_raw():
    for name, title, expr in all_expressions():
        for window in re.findall(r"\b(?:rate|irate|increase)\([^\[]*\[([^\]]+)\]", expr):
            assert window == "$__rate_interval", (name, title, expr)
        for counter in re.finditer(r"\b(\w+_total)\b", expr):
            before = expr[: counter.start()]
            assert re.search(r"\b(?:rate|irate|increase)\([^()]*$", before), (name, title, expr)


def test_panel_ids_are_unique_and_panels_do_not_overlap():
    for name, document in dashboards():
        ids = [p["id"] for p in panels(document)]
        assert len(ids) == len(set(ids)), name
        cells: dict[tuple[int, int], str] = {}
        for panel in panels(document):
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, (name, panel["title"])
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    assert (x, y) not in cells, f"{name}: {panel['title']} overlaps {cells[(x, y)]}"
                    cells[(x, y)] = panel["title"]


def test_drift_state_timelines_map_0_to_ok_and_1_to_drift():
    timelines = [(n, p) for n, d in dashboards() for p in data_panels(d) if p["type"] == "state-timeline"]
    assert timelines
    for name, panel in timelines:
        mappings = panel["fieldConfig"]["defaults"]["mappings"]
        texts = json.dumps(mappings)
        assert '"OK"' in texts and '"DRIFT"' in texts, (name, panel["title"])


def runbook_url_pattern() -> str:
    sys.path.insert(0, str(ROOT / "numawatch-mixin"))
    from render import JsonnetMissing, render

    try:
        return str(render("_config")["runbookURLPattern"])
    except JsonnetMissing as missing:
        pytest.skip(str(missing))


def test_dashboards_link_each_other_and_the_runbooks():
    pattern = runbook_url_pattern()
    for name, document in dashboards():
        kinds = {link["type"]: link for link in document["links"]}
        assert kinds["dashboards"]["tags"] == ["numawatch"], name
        assert kinds["dashboards"]["includeVars"] is True, name
        assert kinds["link"]["url"] == pattern % "README", name


def test_firing_alerts_table_links_each_alert_to_its_runbook():
    fleet = load(DASHBOARDS / "numawatch-fleet.json")
    (alerts,) = [p for p in data_panels(fleet) if p["title"] == "Firing alerts"]
    links = [
        link["url"]
        for override in alerts["fieldConfig"]["overrides"]
        for prop in override["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]
    assert runbook_url_pattern() % "${__data.fields.alertname}" in links


def test_node_view_has_the_numa_map_gpu_holders_and_findings_with_remediation():
    node = load(DASHBOARDS / "numawatch-node.json")
    titles = {p["title"] for p in data_panels(node)}
    assert {"CPUs", "Containers per NUMA node", "GPUs and holders", "Findings with remediation"} <= titles
    (findings,) = [p for p in data_panels(node) if p["title"] == "Findings with remediation"]
    (remediation,) = [o for o in findings["fieldConfig"]["overrides"] if o["matcher"]["options"] == "remediation"]
    (mappings,) = [prop["value"] for prop in remediation["properties"] if prop["id"] == "mappings"]
    from numawatch.checks import all_checks

    assert set(mappings[0]["options"]) == {check.id for check in all_checks()}


# --- queries -------------------------------------------------------------------------------------------------


def metric_names(expr: str) -> set[str]:
    """Metric names selected by the expression (identifiers followed by `{`, or known name shapes)."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", without_strings))
    names |= set(re.findall(r"\b(numawatch_[a-z0-9_]+|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\b", without_strings))
    return names - {"by", "on", "without", "ignoring", "group_left", "group_right"}


def documented_metrics() -> set[str]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"`(numawatch_[a-z0-9_]+)`", text))
    # histograms are documented by family name
    for name in list(names):
        names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def recording_rules() -> set[str]:
    """Every rule recorded by the rule files in alerts/ (numawatch-rules.yml, numawatch-capacity.rules.yml, ...)."""
    records = set()
    for path in sorted((ROOT / "alerts").glob("numawatch-*.yml")):
        document = yaml.safe_load(path.read_text())
        records |= {rule["record"] for group in document["groups"] for rule in group["rules"] if "record" in rule}
    return records


def test_every_metric_a_dashboard_queries_is_documented_or_recorded():
    known = documented_metrics() | recording_rules() | set(EXTERNAL_METRICS)
    expressions = all_expressions() + variable_queries()
    for name, title, expr in expressions:
        unknown = metric_names(expr) - known
        assert not unknown, f"{name} / {title}: {sorted(unknown)} is neither in docs/metrics.md nor a recording rule"


def test_every_query_is_valid_promql(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    expressions = all_expressions() + variable_queries()
    rules = [
        {"record": f"dashboard:query_{index}:check", "expr": substitute(expr)}
        for index, (_, _, expr) in enumerate(expressions)
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        # name the offending panels: promtool reports rules by index
        detail = "\n".join(f"{i}: {n} / {t}: {e}" for i, (n, t, e) in enumerate(expressions))
        pytest.fail(f"promtool rejected a dashboard query:\n{result.stdout}{result.stderr}\n{detail}")
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


# --- GPU bubbles and NUMA capacity (issues 5 and 6) ----------------------------------------------------------


def panel_by_title(document: dict, title: str) -> dict:
    (found,) = [p for p in data_panels(document) if p["title"] == title]
    return found


def test_merged_tables_show_only_values_of_queries_they_have():
    for name, document in dashboards():
        for panel in data_panels(document):
            if panel["type"] != "table":
                continue
            refs = {target["refId"] for target in panel["targets"]}
            (included,) = [t for t in panel["transformations"] if t["id"] == "filterFieldsByName"]
            merged = any(t["id"] == "merge" for t in panel["transformations"])
            assert merged == (len(refs) > 1), (name, panel["title"])
            for column in included["options"]["include"]["names"]:
                match = re.fullmatch(r"Value #([A-Z])", column)
                assert match is None or match.group(1) in refs, (name, panel["title"], column)
                # a merged table names its values Value #A...; a lone query's value is just Value
                assert column != "Value" or not merged, (name, panel["title"])


def test_gpu_view_puts_busy_and_idle_while_held_next_to_the_holders_host_delays():
    gpu = load(DASHBOARDS / "numawatch-gpu.json")
    expected = {
        "GPU busy": ("numawatch_gpu_busy_seconds_total", "percentunit"),
        "GPU idle while held": ("numawatch_gpu_held_idle_seconds_total", "percentunit"),
        "Holder run-queue wait": ("numawatch_gpu_holder_run_delay_seconds_total", "percentunit"),
        "Holder involuntary context switches": ("numawatch_gpu_holder_involuntary_switches_total", "cps"),
        "Holder CPU migrations": ("numawatch_gpu_holder_migrations_total", "cps"),
        "Interrupts on holder CPUs": ("numawatch_gpu_holder_interrupts_total", "cps"),
    }
    for title, (counter, unit) in expected.items():
        panel = panel_by_title(gpu, title)
        (target,) = panel["targets"]
        assert f"rate({counter}{{" in target["expr"], title
        assert "[$__rate_interval]" in target["expr"], title
        assert panel["fieldConfig"]["defaults"]["unit"] == unit, title
    # the idle-while-held series carry the holder's labels, so they read next to the holder panels' legends
    idle = panel_by_title(gpu, "GPU idle while held")["targets"][0]
    assert "group_right" in idle["expr"] and "numawatch_gpu_processes" in idle["expr"]
    assert "{{namespace}}/{{pod}} {{container}}" in idle["legendFormat"]
    # side by side: the idle panel and the run-queue wait panel share a line, adjacent
    idle_grid = panel_by_title(gpu, "GPU idle while held")["gridPos"]
    wait_grid = panel_by_title(gpu, "Holder run-queue wait")["gridPos"]
    assert idle_grid["y"] == wait_grid["y"]
    assert idle_grid["x"] + idle_grid["w"] == wait_grid["x"]


def test_gpu_view_has_the_inventory_with_numa_node_holder_and_nvml_state():
    gpu = load(DASHBOARDS / "numawatch-gpu.json")
    inventory = panel_by_title(gpu, "GPU inventory")
    exprs = " ".join(t["expr"] for t in inventory["targets"])
    assert "numawatch_gpu_info" in exprs and "numawatch_gpu_nvml_up" in exprs
    (included,) = [t for t in inventory["transformations"] if t["id"] == "filterFieldsByName"]
    assert {"numa_node", "namespace", "pod", "container"} <= set(included["options"]["include"]["names"])
    nvml = panel_by_title(gpu, "NVML")
    assert 'source="nvml"' in nvml["targets"][0]["expr"]
    assert '"UP"' in json.dumps(nvml["fieldConfig"]["defaults"]["mappings"])


def test_fleet_view_answers_how_many_more_replicas_of_a_shape_fit_next_to_pending_pods():
    fleet = load(DASHBOARDS / "numawatch-fleet.json")
    variables = {v["name"]: v for v in fleet["templating"]["list"]}
    assert "cluster_shape:numawatch_capacity_shape_replicas:sum" in variables["shape"]["query"]["query"]
    (fits,) = [p for p in data_panels(fleet) if p.get("repeat") == "shape"]
    assert "$shape" in fits["title"]
    assert "cluster_shape:numawatch_capacity_shape_replicas:sum" in fits["targets"][0]["expr"]
    pending = panel_by_title(fleet, "Pending pods (kube-state-metrics)")
    assert "kube_pod_status_phase{" in pending["targets"][0]["expr"]
    assert "kube-state-metrics" in pending["description"] and "no data" in pending["description"]
    replicas = panel_by_title(fleet, "Replicas that fit, by shape")
    assert replicas["gridPos"]["y"] == pending["gridPos"]["y"]


def test_fleet_view_lists_gpus_idle_while_held_with_their_holders_run_queue_wait():
    fleet = load(DASHBOARDS / "numawatch-fleet.json")
    table = panel_by_title(fleet, "GPUs idle while held, next to their holder's run-queue wait")
    exprs = [t["expr"] for t in table["targets"]]
    assert "instance_gpu:numawatch_gpu_held_idle:ratio_rate5m" in exprs[0]
    assert "instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m" in exprs[1]
    # both sides keep the holder's labels so the merge joins a GPU with its container
    for expr in exprs:
        assert re.search(r"max by \([^)]*namespace, pod, container\)", expr), expr


def test_node_view_has_capacity_per_numa_node_and_the_largest_fit():
    node = load(DASHBOARDS / "numawatch-node.json")
    for title, unit, suffixes in (
        ("Exclusive CPUs and devices per NUMA node", "none", ("_cpus", "_devices")),
        ("Memory Manager memory and huge pages per NUMA node", "bytes", ("_bytes",)),
    ):
        panel = panel_by_title(node, title)
        exprs = " ".join(t["expr"] for t in panel["targets"])
        used = set(re.findall(r"numawatch_capacity_\w+", exprs))
        assert used == {f"numawatch_capacity_{quantity}{suffix}" for quantity in ("allocatable", "free", "largest_fit")
                        for suffix in suffixes}, title  # one unit per panel, never bytes next to counts
        assert panel["fieldConfig"]["defaults"]["unit"] == unit, title
    shapes = panel_by_title(node, "Replicas of each shape this node admits")
    assert "numawatch_capacity_shape_replicas" in shapes["targets"][0]["expr"]


# --- dashboard-linter's job and instance rules ---------------------------------------------------------------
# grafana/dashboard-linter's template-datasource-rule, template-job-rule, template-instance-rule, target-job-rule
# and target-instance-rule, as its rule definitions state them, with its exclusion file (dashboards/.lint, the
# linter's own format: a reason per rule and the dashboard/panel entries it excuses).

LINT_FILE = DASHBOARDS / ".lint"


def lint_exclusions() -> dict[str, list[dict]]:
    document = yaml.safe_load(LINT_FILE.read_text())
    return {rule: settings.get("entries", []) for rule, settings in document["exclusions"].items()}


def excluded(rule: str, dashboard: dict, panel: dict | None = None) -> bool:
    for entry in lint_exclusions().get(rule, []):
        if entry.get("dashboard") == dashboard["title"] and (panel is None or entry.get("panel") == panel["title"]):
            return True
    return False


def template_datasource_problems(document: dict) -> list[str]:
    sources = [v for v in document["templating"]["list"] if v["type"] == "datasource"]
    if not sources:
        return ["no templated data source"]
    problems = []
    for source in sources:
        names = {f"{source['query'].lower()}_datasource"} | ({"datasource"} if len(sources) == 1 else set())
        labels = {f"{source['query'].title()} data source"} | ({"Data source"} if len(sources) == 1 else set())
        if source["name"] not in names:
            problems.append(f"data source variable named {source['name']!r}, not one of {sorted(names)}")
        if source["label"] not in labels:
            problems.append(f"data source variable labelled {source['label']!r}, not one of {sorted(labels)}")
    return problems


def template_problems(document: dict, name: str) -> list[str]:
    """The linter's checkTemplate: a multi-select Prometheus query variable on $datasource, allValue `.+`."""
    found = [v for v in document["templating"]["list"] if v["name"] == name]
    if not found:
        return [f"missing the {name} template"]
    (variable,) = found
    problems = []
    if variable.get("datasource", {}).get("uid") not in ("$datasource", "${datasource}"):
        problems.append(f"{name} does not use the $datasource variable")
    if variable["type"] != "query":
        problems.append(f"{name} is a {variable['type']} variable, not a Prometheus query")
    if variable.get("label") != name.title():
        problems.append(f"{name} is labelled {variable.get('label')!r}, not {name.title()!r}")
    if not variable.get("multi"):
        problems.append(f"{name} is not a multi select")
    if variable.get("allValue") != ".+":
        problems.append(f"{name} allValue is {variable.get('allValue')!r}, not '.+'")
    return problems


def target_problems(document: dict, label: str) -> list[str]:
    """target-<label>-rule: every selector of every query carries label=~"$label" (unless excluded)."""
    problems = []
    for panel in data_panels(document):
        if excluded(f"target-{label}-rule", document, panel):
            continue
        for index, target in enumerate(panel["targets"]):
            for selector in selectors(target["expr"]):
                if not selector.has(label, "=~", f"${label}"):
                    problems.append(f"{panel['title']!r} target {index}: {selector.metric or '{...}'} lacks {label}")
    return problems


def test_dashboards_pass_the_template_datasource_job_and_instance_rules():
    for name, document in dashboards():
        assert template_datasource_problems(document) == [], name
        for variable in ("job", "instance"):
            assert template_problems(document, variable) == [], name


@pytest.mark.parametrize("label", ["job", "instance"])
@pytest.mark.slow
def test_dashboards_pass_the_target_job_and_instance_rules(label):
    for name, document in dashboards():
        assert target_problems(document, label) == [], name


def test_every_lint_exclusion_has_a_reason_and_is_needed():
    """An exclusion that no longer excuses anything is a rule silently switched off for the next panel."""
    document = yaml.safe_load(LINT_FILE.read_text())
    by_title = {d["title"]: d for _, d in dashboards()}
    for rule, settings in document["exclusions"].items():
        assert settings.get("reason"), rule
        label = rule.removeprefix("target-").removesuffix("-rule")
        assert rule in ("target-job-rule", "target-instance-rule"), rule
        for entry in settings["entries"]:
            dashboard = by_title[entry["dashboard"]]
            (panel,) = [p for p in data_panels(dashboard) if p["title"] == entry["panel"]]
            lacking = [
                s for t in panel["targets"] for s in selectors(t["expr"]) if not s.has(label, "=~", f"${label}")
            ]
            assert lacking, f"{rule}: {entry} excuses nothing"


def test_the_lint_rules_catch_what_they_are_for():
    _, fleet = next(d for d in dashboards() if d[0] == "numawatch-node.json")
    broken = json.loads(json.dumps(fleet))
    broken["templating"]["list"] = [v for v in broken["templating"]["list"] if v["name"] != "job"]
    for variable in broken["templating"]["list"]:
        if variable["name"] == "instance":
            variable["allValue"], variable["multi"] = ".*", False
    assert template_problems(broken, "job") == ["missing the job template"]
    assert len(template_problems(broken, "instance")) == 2
    first = next(p for p in data_panels(broken) if p["targets"])
    first["targets"][0]["expr"] = 'sum(numawatch_drift_findings{job=~"$job"})'
    assert target_problems(broken, "instance") and not target_problems(broken, "job")
    broken["templating"]["list"][0]["name"] = "ds"
    assert template_datasource_problems(broken)


# --- accelerators of every vendor ------------------------------------------------------------------------------

# The families with one series per GPU (a `gpu` label: its PCI address), and the recorded one the fleet view reads.
PER_GPU = re.compile(
    r"\bnumawatch_gpu_(?:info|busy_seconds_total|sampled_seconds_total|held_idle_seconds_total|nvml_up|processes"
    r"|process_sm_utilization_ratio|nvlink_links|nic_path_info)\{|\binstance_gpu:numawatch_gpu_held_idle:ratio_rate5m\{"
)


def table_columns(panel: dict) -> list[str]:
    (included,) = [t for t in panel["transformations"] if t["id"] == "filterFieldsByName"]
    return included["options"]["include"]["names"]


def carries_vendor(expr: str) -> bool:
    """The query's series have numawatch_gpu_info's vendor label: the info series themselves, an aggregation that
    keeps vendor, or the join that adds it."""
    if "group_left (vendor) max by (" in expr and "vendor) (numawatch_gpu_info{" in expr:
        return True
    if re.fullmatch(r"numawatch_gpu_info\{[^}]*\}", expr):
        return True
    return bool(re.search(r"\bby \([^)]*\bvendor\b[^)]*\) \(numawatch_gpu_info\{", expr))


def test_every_panel_that_shows_a_gpu_shows_its_vendor():
    shown = 0
    for name, document in dashboards():
        for panel in data_panels(document):
            targets = [t for t in panel["targets"] if PER_GPU.search(t["expr"])]
            if panel["type"] == "table":
                if targets and "gpu" in table_columns(panel):
                    assert "vendor" in table_columns(panel), (name, panel["title"])
                    assert any(carries_vendor(t["expr"]) for t in targets), (name, panel["title"])
                    shown += 1
                continue
            for target in targets:
                if "{{gpu}}" in target.get("legendFormat", ""):
                    assert "{{vendor}}" in target["legendFormat"], (name, panel["title"])
                    assert carries_vendor(target["expr"]), (name, panel["title"])
                    shown += 1
    assert shown >= 9  # busy, idle while held, inventory, processes, NVLink, two NIC tables, GPUs and holders, fleet


def test_the_gpu_count_is_split_by_vendor():
    gpus = panel_by_title(load(DASHBOARDS / "numawatch-gpu.json"), "GPUs")
    (target,) = gpus["targets"]
    assert target["expr"].startswith("count by (vendor) (numawatch_gpu_info{")
    assert target["expr"].endswith("or on () vector(0)")  # 0 without GPUs, no extra 0 series beside the counts
    assert target["legendFormat"] == "{{vendor}}"


def test_the_vendor_join_labels_every_gpu_with_or_without_a_vendor_label_of_its_own(tmp_path):
    """promtool evaluates the GPU busy and NVLink panels' queries: a GPU whose NVML series have no vendor label, one
    whose series already carry one (NVML families labelled by vendor), and one numawatch_gpu_info does not list (kept,
    without vendor)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    gpu = load(DASHBOARDS / "numawatch-gpu.json")
    busy = substitute(panel_by_title(gpu, "GPU busy")["targets"][0]["expr"])
    nvlink = substitute(panel_by_title(gpu, "NVLink links per GPU")["targets"][0]["expr"])
    target = 'job="numawatch",instance="gpu-1"'
    gpus = {  # PCI address -> (uuid, vendor label on the NVML series, vendor in numawatch_gpu_info)
        "0000:01:00.0": ("GPU-a", None, "nvidia"),
        "0000:02:00.0": ("GPU-b", "nvidia", "nvidia"),
        "0000:03:00.0": ("GPU-c", None, None),
    }
    series = []
    for address, (uuid, own_vendor, info_vendor) in gpus.items():
        labels = f'{target},gpu="{address}",uuid="{uuid}"' + (f',vendor="{own_vendor}"' if own_vendor else "")
        series += [
            {"series": f"numawatch_gpu_busy_seconds_total{{{labels}}}", "values": "0+7.5x40"},
            {"series": f"numawatch_gpu_sampled_seconds_total{{{labels}}}", "values": "0+15x40"},
            {"series": f'numawatch_gpu_nvlink_links{{{labels},switch="true"}}', "values": "18x40"},
        ]
        if info_vendor is not None:
            series.append({
                "series": f'numawatch_gpu_info{{{target},gpu="{address}",uuid="{uuid}",numa_node="0",model="H200",'
                          f'namespace="",pod="",container="",vendor="{info_vendor}"}}',
                "values": "1x40",
            })

    def expected(extra: str, value: float) -> list[dict]:
        found = []
        for address, (uuid, _, info_vendor) in gpus.items():
            vendor = f',vendor="{info_vendor}"' if info_vendor else ""
            found.append({"labels": f'{{instance="gpu-1",gpu="{address}",uuid="{uuid}"{extra}{vendor}}}',
                          "value": value})
        return found

    tests = {
        "rule_files": [],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": series,
            "promql_expr_test": [
                {"expr": busy, "eval_time": "5m", "exp_samples": expected("", 0.5)},
                {"expr": nvlink, "eval_time": "5m", "exp_samples": expected(',switch="true"', 18)},
            ],
        }],
    }
    path = tmp_path / "vendor_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_capacity_panels_show_every_device_resource_of_every_vendor():
    """numawatch_capacity_*_devices has one series per device-plugin resource (nvidia.com/gpu, MIG profiles,
    amd.com/gpu, habana.ai/gaudi, ...): the capacity panels pick none out, keep `resource` and show it."""
    panels_seen = 0
    for name, document in dashboards():
        for panel in data_panels(document):
            targets = [t for t in panel["targets"] if re.search(r"numawatch_capacity_\w+_devices", t["expr"])]
            if not targets:
                continue
            panels_seen += 1
            for target in targets:
                for selector in selectors(target["expr"]):
                    if selector.metric.endswith("_devices") or selector.metric.endswith("_devices:sum") or (
                        selector.metric.endswith("_devices:max")
                    ):
                        assert all(label != "resource" for label, _, _ in selector.matchers), (name, panel["title"])
                assert re.search(r"by \([^)]*\bresource\b", target["expr"]), (name, panel["title"])
            shows = "resource" in table_columns(panel) if panel["type"] == "table" else all(
                "{{resource}}" in t["legendFormat"] for t in targets
            )
            assert shows, (name, panel["title"])
    assert panels_seen >= 4
