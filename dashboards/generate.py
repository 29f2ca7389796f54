"""Generate numawatch's Grafana dashboards: dashboards/numawatch-{fleet,node,gpu}.json.

Classic dashboard JSON (schemaVersion 39: Grafana 10.4 and 11 load it as is, 12 migrates it on load) built from
plain dicts; dashboards/README.md explains the choice. Run ``python dashboards/generate.py`` after editing,
``--check`` to only compare; tests/test_dashboards.py lints the output and tests/test_e2e_prometheus.py runs every
query against a real Prometheus that scraped numawatch.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from generated_files import sync
from numawatch.metrics.core import KUBELET_CONFIG_LABELS

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
RUNBOOKS = "https://github.com/numawatch/numawatch/blob/main/docs/runbooks/"
CHECKS_DOC = "https://github.com/numawatch/numawatch/blob/main/docs/checks.md"
TAG = "numawatch"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
UIDS = {"fleet": "numawatch-fleet", "node": "numawatch-node", "gpu": "numawatch-gpu"}

# What the checks' value mappings say: green 0 "OK", red 1 "DRIFT".
DRIFT_MAPPINGS = [
    {"type": "value", "options": {"0": {"text": "OK", "color": "green", "index": 0}}},
    {"type": "range", "options": {"from": 1, "to": 1e12, "result": {"text": "DRIFT", "color": "red", "index": 1}}},
    # A check that did not run has no findings count: the timelines show it as -1, never as OK.
    {"type": "value", "options": {"-1": {"text": "NOT EVALUATED", "color": "text", "index": 2}}},
]
UP_MAPPINGS = [
    {"type": "value", "options": {"0": {"text": "DOWN", "color": "red", "index": 0}}},
    {"type": "value", "options": {"1": {"text": "UP", "color": "green", "index": 1}}},
]
SEVERITY_COLOURS = {"critical": "red", "warning": "orange", "info": "blue"}

# Tables rename `instance` to `node`; the cluster is the dashboard's current one.
NODE_LINK = (
    f"/d/{UIDS['node']}/numawatch-node?${{datasource:queryparam}}&${{cluster:queryparam}}"
    "&var-node=${__data.fields.node}&${__url_time_range}"
)
CHECK_LINK = f"{CHECKS_DOC}#${{__data.fields.check}}"
GPU_LINK = (
    f"/d/{UIDS['gpu']}/numawatch-gpu?${{datasource:queryparam}}&${{cluster:queryparam}}"
    "&var-node=${__data.fields.node}&${__url_time_range}"
)


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"value": value, "color": color} for value, color in steps]}


def target(expr: str, legend: str = "", *, instant: bool = False, table: bool = False, ref: str = "A") -> dict:
    return {
        "refId": ref,
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend or "__auto",
        "instant": instant or table,
        "range": not (instant or table),
        "format": "table" if table else "time_series",
    }


@dataclass
class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping to a new line when a row is full."""

    x: int = 0
    y: int = 0
    line_height: int = 0
    next_id: int = 1
    panels: list[dict] = field(default_factory=list)

    def add(self, panel: dict, width: int, height: int) -> None:
        if self.x + width > 24:
            self.x, self.y, self.line_height = 0, self.y + self.line_height, 0
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": width, "h": height}
        panel["id"] = self.next_id
        self.next_id += 1
        self.x += width
        self.line_height = max(self.line_height, height)
        self.panels.append(panel)

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y, self.line_height = 0, self.y + self.line_height, 0
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "id": self.next_id,
                "collapsed": False,
                "panels": [],
                "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1},
            }
        )
        self.next_id += 1
        self.y += 1


def panel(kind: str, title: str, description: str, targets: list[dict], unit: str, **extra: Any) -> dict:
    defaults: dict[str, Any] = {"unit": unit}
    for key in ("mappings", "thresholds", "min", "max", "decimals", "color", "custom", "links"):
        if key in extra:
            defaults[key] = extra.pop(key)
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": extra.pop("overrides", [])},
        "options": extra.pop("options", {}),
        **extra,
    }


def stat(title: str, description: str, expr: str, unit: str = "short", *, legend: str = "", **extra: Any) -> dict:
    """One number per series; with a ``legend`` each series shows its name too (one stat per shape, per resource)."""
    extra.setdefault("thresholds", thresholds((None, "green")))
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "background",
        "graphMode": "none",
        "textMode": "value_and_name" if legend else "value",
        "justifyMode": "auto",
        "orientation": "auto",
    }
    return panel("stat", title, description, [target(expr, legend, instant=True)], unit, options=options, **extra)


def bargauge(title: str, description: str, expr: str, legend: str, unit: str, **extra: Any) -> dict:
    """Horizontal bars, one per series, of the current value."""
    extra.setdefault("thresholds", thresholds((None, "green")))
    extra.setdefault("min", 0)
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "orientation": "horizontal",
        "displayMode": "gradient",
        "showUnfilled": True,
    }
    return panel("bargauge", title, description, [target(expr, legend, instant=True)], unit, options=options, **extra)


def timeseries(title: str, description: str, targets: list[dict], unit: str, **extra: Any) -> dict:
    custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": False}
    options = {
        "legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull"], "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    extra.setdefault("min", 0)
    return panel("timeseries", title, description, targets, unit, custom=custom, options=options, **extra)


def state_timeline(title: str, description: str, expr: str, legend: str, **extra: Any) -> dict:
    options = {
        "showValue": "never",
        "mergeValues": True,
        "alignValue": "left",
        "rowHeight": 0.8,
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "single", "sort": "none"},
    }
    extra.setdefault("mappings", DRIFT_MAPPINGS)
    extra.setdefault("thresholds", thresholds((None, "green"), (1, "red")))
    return panel(
        "state-timeline",
        title,
        description,
        [target(expr, legend)],
        "none",
        custom={"fillOpacity": 80, "lineWidth": 0},
        options=options,
        **extra,
    )


def table(
    title: str,
    description: str,
    expr: str | list[str],
    columns: list[str],
    *,
    rename: dict[str, str] | None = None,
    overrides: list[dict] | None = None,
    unit: str = "none",
    sort: str | None = None,
    descending: bool = False,
) -> dict:
    """An instant table of the query's labels (and value); ``columns`` are shown in this order, the rest hidden.

    With several queries (refIds A, B, ...) Grafana's merge joins their rows on the labels they share and names the
    values ``Value #A``, ``Value #B``...; aggregate each query (``max by (...)``) so that ``__name__`` and labels
    one query lacks do not keep rows apart.
    """
    exprs = [expr] if isinstance(expr, str) else expr
    transformations = [{"id": "merge", "options": {}}] if len(exprs) > 1 else []
    transformations += [
        {"id": "filterFieldsByName", "options": {"include": {"names": columns}}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {},
                "indexByName": {name: index for index, name in enumerate(columns)},
                "renameByName": rename or {},
            },
        },
    ]
    options: dict[str, Any] = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    if sort:
        options["sortBy"] = [{"displayName": (rename or {}).get(sort, sort), "desc": descending}]
    return panel(
        "table",
        title,
        description,
        [target(e, table=True, ref=chr(ord("A") + i)) for i, e in enumerate(exprs)],
        unit,
        custom={"align": "auto", "filterable": True},
        overrides=overrides or [],
        options=options,
        transformations=transformations,
    )


def link_override(field_name: str, title: str, url: str) -> dict:
    return {
        "matcher": {"id": "byName", "options": field_name},
        "properties": [{"id": "links", "value": [{"title": title, "url": url, "targetBlank": url.startswith("http")}]}],
    }


def unit_override(field_name: str, unit: str, steps: dict[str, Any] | None = None) -> dict:
    """A table column with its own unit (and, with ``steps``, coloured by thresholds)."""
    properties: list[dict[str, Any]] = [{"id": "unit", "value": unit}]
    if steps is not None:
        properties += [
            {"id": "thresholds", "value": steps},
            {"id": "custom.cellOptions", "value": {"type": "color-background"}},
        ]
    return {"matcher": {"id": "byName", "options": field_name}, "properties": properties}


def up_override(field_name: str) -> dict:
    return {
        "matcher": {"id": "byName", "options": field_name},
        "properties": [
            {"id": "mappings", "value": UP_MAPPINGS},
            {"id": "custom.cellOptions", "value": {"type": "color-text"}},
        ],
    }


def severity_override(field_name: str = "severity") -> dict:
    mapping = {
        name: {"text": name, "color": colour, "index": i} for i, (name, colour) in enumerate(SEVERITY_COLOURS.items())
    }
    return {
        "matcher": {"id": "byName", "options": field_name},
        "properties": [
            {"id": "mappings", "value": [{"type": "value", "options": mapping}]},
            {"id": "custom.cellOptions", "value": {"type": "color-text"}},
        ],
    }


def remediation_override() -> dict:
    """Maps each check id to its one-line remediation (from the check registry) in the `remediation` column."""
    try:
        from numawatch.checks import all_checks
    except ImportError:  # generating without numawatch installed: leave the ids
        return {"matcher": {"id": "byName", "options": "remediation"}, "properties": []}
    options = {}
    for index, check in enumerate(all_checks()):
        text = check.remediation.split("; ")[0]
        options[check.id] = {"text": text if len(text) <= 200 else text[:197] + "...", "index": index}
    return {
        "matcher": {"id": "byName", "options": "remediation"},
        "properties": [
            {"id": "mappings", "value": [{"type": "value", "options": options}]},
            {"id": "custom.width", "value": 600},
        ],
    }


# --- variables -----------------------------------------------------------------------------------------------


def datasource_variable() -> dict:
    return {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def query_variable(
    name: str, label: str, query: str, *, multi: bool, include_all: bool, description: str
) -> dict[str, Any]:
    variable: dict[str, Any] = {
        "type": "query",
        "name": name,
        "label": label,
        "description": description,
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable", "qryType": 1},
        "refresh": 2,  # on time-range change: nodes come and go
        "sort": 1,
        "multi": multi,
        "includeAll": include_all,
        "current": {},
        "options": [],
        "hide": 0,
        "regex": "",
    }
    if include_all:
        # `.*` also matches series without the label, so a single-cluster Prometheus (no `cluster`) still works
        variable["allValue"] = ".*"
        variable["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return variable


def cluster_variable() -> dict:
    return query_variable(
        "cluster",
        "Cluster",
        "label_values(numawatch_build_info, cluster)",
        multi=False,
        include_all=True,
        description="The `cluster` label your Prometheus adds; All when there is none.",
    )


def node_variable(*, multi: bool) -> dict:
    return query_variable(
        "node",
        "Node",
        'label_values(numawatch_build_info{cluster=~"$cluster"}, instance)',
        multi=multi,
        include_all=multi,
        description="Nodes running numawatch (the ServiceMonitor sets instance to the node name).",
    )


def dashboard(key: str, title: str, description: str, variables: list[dict], layout: Layout) -> dict:
    return {
        "uid": UIDS[key],
        "title": title,
        "description": description,
        "tags": [TAG],
        "timezone": "utc",
        "editable": False,
        "graphTooltip": 1,
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "links": [
            {
                "type": "dashboards",
                "title": "numawatch",
                "tags": [TAG],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
                "icon": "external link",
                "targetBlank": False,
                "tooltip": "",
                "url": "",
            },
            {
                "type": "link",
                "title": "Runbooks",
                "url": f"{RUNBOOKS}README.md",
                "icon": "doc",
                "tags": [],
                "asDropdown": False,
                "includeVars": False,
                "keepTime": False,
                "targetBlank": True,
                "tooltip": "What each numawatch alert means and how to fix it",
            },
        ],
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": layout.panels,
    }


# --- the dashboards ------------------------------------------------------------------------------------------

C = 'cluster=~"$cluster"'
N = 'cluster=~"$cluster", instance=~"$node"'


def fleet() -> dict:
    k = f'{C}, check=~"$check"'
    layout = Layout()
    layout.row("Coverage and drift now")
    layout.add(
        stat(
            "Nodes reporting",
            "numawatch exporters whose metrics Prometheus has now.",
            f"count(max by (cluster, instance) (numawatch_build_info{{{C}}}))",
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Exporters up",
            "Share of numawatch scrape targets that answered the last scrape (up == 1).",
            f'sum(up{{job="numawatch", {C}}}) / count(up{{job="numawatch", {C}}})',
            "percentunit",
            min=0,
            max=1,
            thresholds=thresholds((None, "red"), (0.9, "orange"), (1, "green")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Nodes with drift",
            "Nodes where at least one selected check has a finding now.",
            f"count(max by (cluster, instance) (numawatch_drift_findings{{{k}}}) > 0) or vector(0)",
            thresholds=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "GPU nodes drifting",
            "Share of GPU nodes (numawatch sees a GPU) with any finding; recording rule "
            "cluster:numawatch_gpu_nodes_drifting:ratio.",
            f"avg(cluster:numawatch_gpu_nodes_drifting:ratio{{{C}}})",
            "percentunit",
            min=0,
            max=1,
            thresholds=thresholds((None, "green"), (0.0001, "orange"), (0.2, "red")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Containers in drift",
            "Containers with at least one finding of the selected checks now.",
            f'count(count by (cluster, instance, namespace, pod, container) (numawatch_drift{{{k}, container!=""}})) '
            "or vector(0)",
            thresholds=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Numawatch alerts firing",
            "numawatch alerts in state firing (Prometheus' ALERTS series).",
            f'count(ALERTS{{alertname=~"Numawatch.+", alertstate="firing", {C}}}) or vector(0)',
            thresholds=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )
    layout.row("Drift by check")
    layout.add(
        state_timeline(
            "Drift by check",
            "Per check: red while any node of the selected clusters has a finding (0 = OK, 1 = DRIFT).",
            f"clamp_max(sum by (check) (cluster_check:numawatch_drift_findings:sum{{{k}}}), 1)",
            "{{check}}",
        ),
        24,
        9,
    )
    layout.add(
        timeseries(
            "Drifting nodes by check",
            "Nodes with at least one finding, per check (recording rule cluster_check:numawatch_drift_nodes:count).",
            [target(f"sum by (check) (cluster_check:numawatch_drift_nodes:count{{{k}}})", "{{check}}")],
            "short",
            decimals=0,
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Share of nodes drifting by check",
            "Share of reporting nodes failing each check; NumawatchDriftWidespread pages at 20 % and 3 nodes.",
            [target(f"max by (check) (cluster_check:numawatch_drift_nodes:ratio{{{k}}})", "{{check}}")],
            "percentunit",
            max=1,
        ),
        12,
        8,
    )
    layout.row("Offenders")
    layout.add(
        table(
            "Current findings",
            "Every finding now, one row each. Click a node for its dashboard, a check for its meaning and remediation.",
            f"max by (cluster, instance, check, severity, namespace, pod, container, gpu) (numawatch_drift{{{k}}})",
            ["cluster", "instance", "check", "severity", "namespace", "pod", "container", "gpu"],
            rename={"instance": "node"},
            overrides=[
                link_override("node", "Node dashboard", NODE_LINK),
                link_override("check", "What this check means and how to fix it", CHECK_LINK),
                severity_override(),
            ],
            sort="node",
        ),
        24,
        10,
    )
    layout.add(
        table(
            "Firing alerts",
            "numawatch alerts firing now; the alert name links to its runbook.",
            f"max by (alertname, severity, cluster, instance, check, namespace, pod, container) "
            f'(ALERTS{{alertname=~"Numawatch.+", alertstate="firing", {C}}})',
            ["alertname", "severity", "cluster", "instance", "check", "namespace", "pod", "container"],
            rename={"instance": "node"},
            overrides=[
                link_override("alertname", "Runbook", f"{RUNBOOKS}${{__data.fields.alertname}}.md"),
                severity_override(),
            ],
            sort="alertname",
        ),
        24,
        8,
    )
    gpu_bubbles_fleet(layout)
    capacity_fleet(layout)
    layout.row("Exporters")
    layout.add(
        timeseries(
            "numawatch versions",
            "Nodes per numawatch version: a drift that starts with a rollout of numawatch itself shows up here.",
            [target(f"count by (version) (numawatch_build_info{{{C}}})", "{{version}}")],
            "short",
            decimals=0,
        ),
        12,
        7,
    )
    layout.add(
        timeseries(
            "Evaluation time, p99 over nodes",
            "Time one evaluation takes (read every source, run every check), slowest nodes' 99th percentile.",
            [
                target(
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate(numawatch_evaluation_duration_seconds_bucket{{{C}}}[$__rate_interval])))",
                    "p99",
                )
            ],
            "s",
        ),
        12,
        7,
    )
    variables = [
        cluster_variable(),
        query_variable(
            "check",
            "Check",
            f"label_values(numawatch_drift_findings{{{C}}}, check)",
            multi=True,
            include_all=True,
            description="numawatch check ids (docs/checks.md).",
        ),
        query_variable(
            "shape",
            "Pod shape",
            f"label_values(cluster_shape:numawatch_capacity_shape_replicas:sum{{{C}}}, shape)",
            multi=True,
            include_all=True,
            description="Named pod shapes of the intent file (docs/capacity.md); empty when none is configured.",
        ),
    ]
    return dashboard(
        "fleet",
        "numawatch / Fleet overview",
        "Pinning drift across the fleet: coverage, which checks fail where, and the offenders.",
        variables,
        layout,
    )


IDLE_STEPS = thresholds((None, "green"), (0.1, "orange"), (0.3, "red"))
# Run-queue wait in seconds per second, summed over a holder's threads: 0.005 is where docs/gpu.md starts to suspect it.
WAIT_STEPS = thresholds((None, "green"), (0.005, "orange"), (0.05, "red"))


def gpu_bubbles_fleet(layout: Layout) -> None:
    """GPU coarse idle while held next to the holder's run-queue wait, from the numawatch-gpu recording rules."""
    layout.row("GPU bubbles (host side)")
    layout.add(
        stat(
            "GPU time idle while held",
            "Share of the sampled time of every GPU in the selected clusters that a GPU sat idle while a container "
            "held it (NVML utilisation, 5 minutes; recording rule cluster:numawatch_gpu_held_idle:ratio_rate5m). "
            "Coarse: idle gaps shorter than NVML's sample period (1/6-1 s) count as busy. Empty without NVML.",
            f"avg(cluster:numawatch_gpu_held_idle:ratio_rate5m{{{C}}})",
            "percentunit",
            min=0,
            max=1,
            thresholds=IDLE_STEPS,
        ),
        4,
        9,
    )
    gpu_labels = "cluster, instance, gpu, uuid, namespace, pod, container"
    holder_labels = "cluster, instance, namespace, pod, container"
    layout.add(
        table(
            "GPUs idle while held, next to their holder's run-queue wait",
            "Each held GPU's coarse idle-while-held share over 5 minutes next to the seconds per second its holder "
            "container's threads, summed, waited for a CPU (recording rules "
            "instance_gpu:numawatch_gpu_held_idle:ratio_rate5m and "
            "instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m). Both high together: a host-side "
            "bubble suspect (docs/gpu.md); a GPU idle with no requests queued is not one. Click a node for its GPU "
            "view.",
            [
                f"max by ({gpu_labels}) (instance_gpu:numawatch_gpu_held_idle:ratio_rate5m{{{C}}})",
                f"max by ({holder_labels}) (instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m{{{C}}})",
            ],
            ["cluster", "instance", "gpu", "namespace", "pod", "container", "Value #A", "Value #B"],
            rename={"instance": "node", "Value #A": "idle while held", "Value #B": "run-queue wait"},
            overrides=[
                link_override("node", "GPU dashboard", GPU_LINK),
                unit_override("idle while held", "percentunit", IDLE_STEPS),
                unit_override("run-queue wait", "percentunit", WAIT_STEPS),
            ],
            sort="idle while held",
            descending=True,
        ),
        20,
        9,
    )


def capacity_fleet(layout: Layout) -> None:
    """Issue 5: how many more replicas of each pod shape fit now, next to the pods waiting for a node."""
    replicas = f'cluster_shape:numawatch_capacity_shape_replicas:sum{{{C}, shape=~"$shape"}}'
    layout.row("NUMA capacity")
    layout.add(
        {
            **stat(
                "How many more $shape replicas fit in the cluster right now",
                "Pods of this shape (the intent file's shapes) the nodes' kubelets would still admit now, one after "
                "another, under each node's Topology Manager policy: the NUMA-aware answer, which the scheduler's "
                "per-node totals overstate (recording rule cluster_shape:numawatch_capacity_shape_replicas:sum).",
                f"sum({replicas})",
                decimals=0,
                thresholds=thresholds((None, "red"), (1, "orange"), (3, "green")),
            ),
            "repeat": "shape",
            "repeatDirection": "h",
            "maxPerRow": 6,
        },
        24,
        4,
    )
    layout.add(
        timeseries(
            "Replicas that fit, by shape",
            "How many more pods of each shape the selected clusters admit, over time: falls as pods are placed, "
            "rises as they go.",
            [target(f"sum by (shape) ({replicas})", "{{shape}}")],
            "short",
            decimals=0,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Nodes that would admit another replica",
            "Nodes that would admit at least one more pod of each shape (recording rule "
            "cluster_shape:numawatch_capacity_shape_nodes:count); 0 when none would.",
            [
                target(
                    f'sum by (shape) (cluster_shape:numawatch_capacity_shape_nodes:count{{{C}, shape=~"$shape"}} '
                    f"or {replicas} * 0)",
                    "{{shape}}",
                )
            ],
            "short",
            decimals=0,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Pending pods (kube-state-metrics)",
            "Pods waiting for a node, from kube-state-metrics' kube_pod_status_phase: replicas that fit while pods "
            "stay Pending point at something other than NUMA capacity (taints, affinity, quotas). Shows no data "
            "where kube-state-metrics is not scraped by this Prometheus.",
            [target(f'sum by (cluster) (kube_pod_status_phase{{{C}, phase="Pending"}})', "{{cluster}} pending")],
            "short",
            decimals=0,
        ),
        8,
        8,
    )
    free_cpus = "cluster:numawatch_capacity_free_cpus:sum"
    largest_cpus = "cluster:numawatch_capacity_largest_fit_cpus:max"
    free = "cluster_resource:numawatch_capacity_free_{unit}:sum"
    largest = "cluster_resource:numawatch_capacity_largest_fit_{unit}:max"
    layout.add(
        bargauge(
            "Free exclusive CPUs and devices",
            "Exclusive CPUs no container holds and devices (GPUs) no container holds, summed over every NUMA node of "
            f"the selected clusters (recording rules {free_cpus} and {free.format(unit='devices')}).",
            f'label_replace(sum({free_cpus}{{{C}}}), "resource", "cpu", "", "")\n'
            f"or sum by (resource) ({free.format(unit='devices')}{{{C}}})",
            "{{resource}}",
            "short",
            decimals=0,
        ),
        6,
        6,
    )
    layout.add(
        bargauge(
            "Free Memory Manager memory and huge pages",
            "Memory and huge pages the Memory Manager (Static policy) can still hand out, summed over every NUMA node "
            f"(recording rule {free.format(unit='bytes')}).",
            f"sum by (resource) ({free.format(unit='bytes')}{{{C}}})",
            "{{resource}}",
            "bytes",
        ),
        6,
        6,
    )
    layout.add(
        bargauge(
            "Largest CPU and device request one NUMA node takes",
            "The largest request of each resource that a single NUMA node somewhere could still grant alone: a pod "
            f"asking for more is refused under single-numa-node (recording rules {largest_cpus} and "
            f"{largest.format(unit='devices')}).",
            f'label_replace(max({largest_cpus}{{{C}}}), "resource", "cpu", "", "")\n'
            f"or max by (resource) ({largest.format(unit='devices')}{{{C}}})",
            "{{resource}}",
            "short",
            decimals=0,
        ),
        6,
        6,
    )
    layout.add(
        bargauge(
            "Largest memory request one NUMA node takes",
            "The largest Memory Manager memory or huge page request a single NUMA node somewhere could still grant "
            f"alone (0 while earlier multi-node allocations group the nodes; recording rule "
            f"{largest.format(unit='bytes')}).",
            f"max by (resource) ({largest.format(unit='bytes')}{{{C}}})",
            "{{resource}}",
            "bytes",
        ),
        6,
        6,
    )


def capacity_node(layout: Layout) -> None:
    """Issue 5, per node: what each NUMA node can still hand out to a pinned pod, and the shapes it would admit."""
    labels = "numa_node, resource"

    def per_node(unit: str) -> list[str]:
        """allocatable, free and largest fit of one unit per NUMA node (and resource); the CPU families, which have
        no resource label, get resource="cpu" so that their rows sit next to the devices'."""
        queries = []
        for quantity in ("allocatable", "free", "largest_fit"):
            family = f"numawatch_capacity_{quantity}_{unit}"
            if unit == "cpus":
                queries.append(f'label_replace(max by (numa_node) ({family}{{{N}}}), "resource", "cpu", "", "")')
            else:
                queries.append(f"max by ({labels}) ({family}{{{N}}})")
        return queries

    def cpus_and_devices() -> list[str]:
        return [f"{cpus}\nor {devices}" for cpus, devices in zip(per_node("cpus"), per_node("devices"), strict=True)]

    columns = ["numa_node", "resource", "Value #A", "Value #B", "Value #C"]
    rename = {"Value #A": "allocatable", "Value #B": "free", "Value #C": "largest fit"}
    layout.row("NUMA capacity")
    layout.add(
        table(
            "Exclusive CPUs and devices per NUMA node",
            "Per NUMA node: exclusive CPUs (static CPU Manager; whole cores under full-pcpus-only) and devices "
            "(GPUs) the kubelet can hand out, how many are free, and the largest request that node alone could still "
            "grant. An empty numa_node is a device registered without topology, usable from any node.",
            cpus_and_devices(),
            columns,
            rename=rename,
            sort="numa_node",
        ),
        12,
        7,
    )
    layout.add(
        table(
            "Memory Manager memory and huge pages per NUMA node",
            "Per NUMA node (Memory Manager Static policy): memory and huge pages allocatable, free, and the largest "
            "request that node alone could still grant (0 while an earlier multi-node allocation groups it).",
            per_node("bytes"),
            columns,
            rename=rename,
            unit="bytes",
            sort="numa_node",
        ),
        12,
        7,
    )
    layout.add(
        timeseries(
            "Free exclusive CPUs and devices per NUMA node",
            "Exclusive CPUs and devices no container holds, per NUMA node, over time.",
            [target(cpus_and_devices()[1], "{{resource}} node {{numa_node}}")],
            "short",
            decimals=0,
        ),
        12,
        7,
    )
    layout.add(
        bargauge(
            "Replicas of each shape this node admits",
            "How many more pods of each named shape (intent file) this node's kubelet would admit now, one after "
            "another, under its Topology Manager policy; `numawatch check --fit SHAPE` on the node says why not.",
            f"max by (shape) (numawatch_capacity_shape_replicas{{{N}}})",
            "{{shape}}",
            "short",
            decimals=0,
            thresholds=thresholds((None, "red"), (1, "green")),
        ),
        12,
        7,
    )


def platform_node(layout: Layout) -> None:
    """Issue 17, per node: how deep the CPUs may sleep, and the PCIe path from each GPU to each RDMA NIC."""
    layout.row("Idle states and GPU-NIC paths")
    layout.add(
        table(
            "Deepest idle state per CPU group",
            "The exit latency of the deepest idle state each group of CPUs may enter (not disabled, within its PM "
            "QoS limit; 0: polling only), by role: exclusive (held by a pinned container), isolated, housekeeping. "
            "cpuidle_deep_state fires when an exclusive or isolated group exceeds the intent's limit (10 µs).",
            f"max by (role, cpus) (numawatch_cpuidle_exit_latency_max_seconds{{{N}}})",
            ["role", "cpus", "Value"],
            rename={"Value": "exit latency"},
            unit="s",
            sort="role",
        ),
        12,
        7,
    )
    layout.add(
        table(
            "GPU to RDMA NIC PCIe paths",
            "Every GPU and RDMA-capable NIC with the PCIe path between them, in nvidia-smi topo's levels: PIX (one "
            "switch), PXB (several switches), PHB (host bridge), NODE (host bridges of one NUMA node), SYS (across "
            "sockets). GPUDirect RDMA wants PIX or PXB.",
            f"max by (gpu, nic, level) (numawatch_gpu_nic_path_info{{{N}}})",
            ["gpu", "nic", "level"],
            sort="gpu",
        ),
        12,
        7,
    )


def node() -> dict:
    layout = Layout()
    layout.row("Health")
    layout.add(
        stat(
            "Findings",
            "Drift findings on this node now, all checks.",
            f"sum(numawatch_drift_findings{{{N}}})",
            thresholds=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Checks not evaluated",
            "Checks that could not look (a source is down or the intent disables them): blind, not clean.",
            f"count(numawatch_check_evaluated{{{N}}} == 0) or vector(0)",
            thresholds=thresholds((None, "green"), (1, "orange")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Sources down",
            "numawatch sources that could not read their host files in the last evaluation.",
            f"count(numawatch_source_up{{{N}}} == 0) or vector(0)",
            thresholds=thresholds((None, "green"), (1, "orange")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Last evaluation",
            "Age of the data: seconds since numawatch last finished an evaluation (every 15 s when healthy).",
            f"time() - max(numawatch_last_evaluation_timestamp_seconds{{{N}}})",
            "s",
            thresholds=thresholds((None, "green"), (60, "orange"), (120, "red")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Online CPUs",
            "CPUs online on this node.",
            f"sum(numawatch_numa_node_cpus{{{N}}})",
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "Isolated CPUs",
            "Online CPUs in isolcpus: where pinned inference threads should run.",
            f'count(numawatch_cpu_info{{{N}, isolated="true", online="true"}}) or vector(0)',
        ),
        4,
        4,
    )
    layout.row("Findings")
    layout.add(
        table(
            "Findings with remediation",
            "Every finding on the node now (numawatch_drift_info: its subject and details), with the check's "
            "remediation. Click a check for docs/checks.md; `numawatch check` on the node prints the full message.",
            f'label_replace(numawatch_drift_info{{{N}}}, "remediation", "$1", "check", "(.*)")',
            [
                "check",
                "severity",
                "namespace",
                "pod",
                "container",
                "gpu",
                "irq",
                "name",
                "setting",
                "governor",
                "size",
                "file",
                "reason",
                "numa_node",
                "cpus",
                "value",
                "expected",
                "remediation",
            ],
            overrides=[
                link_override("check", "What this check means and how to fix it", CHECK_LINK),
                severity_override(),
                remediation_override(),
            ],
            sort="check",
        ),
        24,
        10,
    )
    layout.add(
        state_timeline(
            "Drift by check",
            "Per check on this node: 0 = OK, 1 = DRIFT (any finding), -1 = NOT EVALUATED (the check could not look: "
            "blind, not clean).",
            f"clamp_max(max by (check) (numawatch_drift_findings{{{N}}}), 1)\n"
            f"or (max by (check) (numawatch_check_evaluated{{{N}}}) == 0) - 1",
            "{{check}}",
        ),
        12,
        10,
    )
    layout.add(
        state_timeline(
            "Drift by container",
            "Per container: DRIFT while it has any finding; gaps mean no finding.",
            f'max by (namespace, pod, container) (numawatch_drift{{{N}, container!=""}})',
            "{{namespace}}/{{pod}} {{container}}",
        ),
        12,
        10,
    )
    layout.row("NUMA map")
    layout.add(
        table(
            "CPUs",
            "One row per CPU: socket, core, NUMA node, isolated (isolcpus), reserved (kubelet reserved-cpus), online.",
            f"numawatch_cpu_info{{{N}}}",
            ["cpu", "socket", "core", "numa_node", "isolated", "reserved", "online"],
            sort="cpu",
        ),
        12,
        10,
    )
    layout.add(
        table(
            "Containers per NUMA node",
            "CPUs of each container's effective cpuset per NUMA node; a container on two rows spans two nodes.",
            f"numawatch_container_cpus{{{N}}}",
            ["namespace", "pod", "container", "numa_node", "qos", "exclusive", "Value"],
            rename={"Value": "cpus"},
            sort="namespace",
        ),
        12,
        10,
    )
    layout.add(
        {
            **panel(
                "bargauge",
                "Exclusive CPUs per NUMA node",
                "CPUs the static CPU Manager handed out exclusively, per NUMA node, out of its online CPUs.",
                [
                    target(
                        f'sum by (numa_node) (numawatch_container_cpus{{{N}, exclusive="true"}}) '
                        f"/ on (numa_node) sum by (numa_node) (numawatch_numa_node_cpus{{{N}}})",
                        "node {{numa_node}}",
                        instant=True,
                    )
                ],
                "percentunit",
                min=0,
                max=1,
                thresholds=thresholds((None, "green"), (0.8, "orange"), (0.95, "red")),
                options={
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "orientation": "horizontal",
                    "displayMode": "gradient",
                    "showUnfilled": True,
                },
            )
        },
        12,
        6,
    )
    layout.add(
        table(
            "GPUs and holders",
            "Each GPU: PCI address, NUMA node (empty = unknown), model, and the container the kubelet assigned it to.",
            f"numawatch_gpu_info{{{N}}}",
            ["gpu", "uuid", "numa_node", "model", "namespace", "pod", "container"],
            sort="gpu",
        ),
        12,
        6,
    )
    capacity_node(layout)
    layout.row("Memory and host")
    who = "namespace, pod, container"
    resident = f"sum by ({who}) (numawatch_container_memory_numa_bytes{{{N}}})"
    remote = (
        f"sum by ({who}) (numawatch_container_memory_numa_bytes{{{N}}} "
        f"unless on (instance, {who}, numa_node) numawatch_container_cpus{{{N}}})"
    )
    layout.add(
        timeseries(
            "Container memory per NUMA node",
            "Resident memory of each container on each NUMA node (cgroup memory.numa_stat).",
            [
                target(
                    f"sum by ({who}, numa_node) (numawatch_container_memory_numa_bytes{{{N}}})",
                    "{{namespace}}/{{pod}} {{container}} node {{numa_node}}",
                )
            ],
            "bytes",
        ),
        12,
        8,
    )
    layout.add(
        table(
            "Remote memory share per container",
            "Share of each container's resident memory on NUMA nodes where it has no CPU: every access to it "
            "crosses the inter-socket link.",
            f"({remote} or {resident} * 0) / {resident}",
            ["namespace", "pod", "container", "Value"],
            rename={"Value": "remote share"},
            overrides=[
                {
                    "matcher": {"id": "byName", "options": "remote share"},
                    "properties": [
                        {"id": "unit", "value": "percentunit"},
                        {"id": "thresholds", "value": thresholds((None, "green"), (0.1, "orange"), (0.5, "red"))},
                        {"id": "custom.cellOptions", "value": {"type": "color-background"}},
                    ],
                }
            ],
            sort="namespace",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Interrupts on watched CPUs per second",
            "Interrupts per second on the isolated, nohz_full and exclusively held CPUs, by kind: device IRQs, "
            "the local timer tick and IPIs. Device IRQs here stall pinned threads.",
            [
                target(
                    f"sum by (kind) (rate(numawatch_cpu_interrupts_total{{{N}}}[$__rate_interval]))",
                    "{{kind}}",
                )
            ],
            "short",
        ),
        12,
        8,
    )
    layout.add(
        table(
            "Kernel settings",
            "Kernel knobs numawatch compares with the intent: NUMA balancing, swappiness, THP, isolation parameters.",
            f"numawatch_kernel_setting_info{{{N}}}",
            ["setting", "value"],
            sort="setting",
        ),
        6,
        8,
    )
    layout.add(
        table(
            "Huge pages per NUMA node",
            "Huge pages reserved, free and surplus per NUMA node and page size (kB).",
            f"numawatch_numa_node_hugepages{{{N}}}",
            ["numa_node", "size", "state", "Value"],
            rename={"Value": "pages"},
            sort="numa_node",
        ),
        6,
        8,
    )
    platform_node(layout)
    layout.row("numawatch")
    layout.add(
        table(
            "Sources",
            "Each source numawatch reads: UP when the last evaluation read it.",
            f"numawatch_source_up{{{N}}}",
            ["source", "Value"],
            rename={"Value": "state"},
            overrides=[
                {
                    "matcher": {"id": "byName", "options": "state"},
                    "properties": [
                        {"id": "mappings", "value": UP_MAPPINGS},
                        {"id": "custom.cellOptions", "value": {"type": "color-text"}},
                    ],
                }
            ],
            sort="source",
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Source read time",
            "Time each source took in the last evaluation (near 0 when numawatch reused an unchanged result).",
            [target(f"numawatch_source_duration_seconds{{{N}}}", "{{source}}")],
            "s",
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Evaluations",
            "Evaluations per second and the mean evaluation time.",
            [
                target(f"sum(rate(numawatch_evaluations_total{{{N}}}[$__rate_interval]))", "evaluations/s"),
                target(
                    f"sum(rate(numawatch_evaluation_duration_seconds_sum{{{N}}}[$__rate_interval])) "
                    f"/ sum(rate(numawatch_evaluation_duration_seconds_count{{{N}}}[$__rate_interval]))",
                    "mean seconds",
                    ref="B",
                ),
            ],
            "short",
        ),
        8,
        8,
    )
    layout.add(
        table(
            "Kubelet configuration",
            "The kubelet's effective CPU, Topology and Memory Manager settings as numawatch read them.",
            f"numawatch_kubelet_config_info{{{N}}}",
            list(KUBELET_CONFIG_LABELS),  # the columns are the series' labels: one list, in metrics/core.py
        ),
        24,
        4,
    )
    return dashboard(
        "node",
        "numawatch / Node",
        "One node: its findings with remediation, the NUMA map of CPUs, containers and GPUs, and numawatch's health.",
        [cluster_variable(), node_variable(multi=False)],
        layout,
    )


def gpu() -> dict:
    holder = "instance, namespace, pod, container"
    local = (
        f"sum by ({holder}) (numawatch_container_cpus{{{N}}} and on ({holder}, numa_node) numawatch_gpu_info{{{N}}})"
    )
    every = f"sum by ({holder}) (numawatch_container_cpus{{{N}}} and on ({holder}) numawatch_gpu_info{{{N}}})"
    layout = Layout()
    layout.row("GPUs")
    layout.add(
        stat("GPUs", "GPUs numawatch sees on the selected nodes.", f"count(numawatch_gpu_info{{{N}}}) or vector(0)"),
        4,
        4,
    )
    layout.add(
        stat(
            "GPUs held",
            "GPUs the kubelet's device checkpoint assigns to a container.",
            f'count(numawatch_gpu_info{{{N}, container!=""}}) or vector(0)',
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "GPUs without NUMA node",
            "GPUs whose NUMA node the kernel reports as -1: the Topology Manager cannot align them.",
            f'count(numawatch_gpu_info{{{N}, numa_node=""}}) or vector(0)',
            thresholds=thresholds((None, "green"), (1, "orange")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "GPU holders not NUMA-local",
            "Containers holding a GPU whose CPUs are not all on a NUMA node of their GPUs.",
            f"count(({local}) < ({every})) or vector(0)",
            thresholds=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "NVML",
            'Whether numawatch could use NVML on every selected node (numawatch_source_up{source="nvml"}): DOWN '
            "on a node without the NVIDIA driver library, with a hung driver call, or when run with --no-nvml; "
            "`numawatch check` says why. The busy, idle and holder panels below need it.",
            f'min(numawatch_source_up{{{N}, source="nvml"}})',
            "none",
            mappings=UP_MAPPINGS,
            thresholds=thresholds((None, "red"), (1, "green")),
        ),
        4,
        4,
    )
    layout.add(
        stat(
            "GPUs lost (NVML)",
            "GPUs NVML reports lost or needing a reset (numawatch_gpu_nvml_up 0): numawatch stops calling them until "
            "a PCI hotplug event brings them back.",
            f"count(numawatch_gpu_nvml_up{{{N}}} == 0) or vector(0)",
            thresholds=thresholds((None, "green"), (1, "red")),
        ),
        4,
        4,
    )

    # Busy and coarse idle while held per GPU, next to the host delay signals of the container holding it.
    gpu_key = "instance, gpu, uuid"
    holders = f'group by ({gpu_key}, namespace, pod, container) (numawatch_gpu_processes{{{N}, container!=""}})'
    holder_legend = "{{instance}} {{namespace}}/{{pod}} {{container}}"

    def holder_rate(metric: str, by: str = holder) -> str:
        # pod_uid is summed away: the panel follows a holder by name across a re-created pod
        return f"sum by ({by}) (rate({metric}{{{N}}}[$__rate_interval]))"

    layout.row("Busy and idle while held, next to the holder's host delays")
    layout.add(
        timeseries(
            "GPU busy",
            "Share of time each GPU was busy by NVML utilisation: at least one kernel ran during a sample period "
            "(1/6-1 s), so sub-millisecond gaps between kernels count as busy. Integrated from every NVML sample "
            "between evaluations (numawatch_gpu_busy_seconds_total over numawatch_gpu_sampled_seconds_total).",
            [
                target(
                    f"max by ({gpu_key}) (rate(numawatch_gpu_busy_seconds_total{{{N}}}[$__rate_interval]))\n"
                    f"/ (max by ({gpu_key}) (rate(numawatch_gpu_sampled_seconds_total{{{N}}}[$__rate_interval])) > 0)",
                    "{{instance}} {{gpu}}",
                )
            ],
            "percentunit",
            max=1,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "GPU idle while held",
            "Coarse idle while held: share of each GPU's sampled time it sat idle while a compute process of the "
            "named container held it. Catches stalls on the order of NVML's sample period or longer (a scheduler "
            "stall, a GC pause, a preempted launch thread), never launch-gap bubbles; idle with no requests queued is "
            "not a bubble. Compare with the holder's run-queue wait on the right.",
            [
                target(
                    "(\n"
                    f"    max by ({gpu_key}) (rate(numawatch_gpu_held_idle_seconds_total{{{N}}}[$__rate_interval]))\n"
                    f"  / (max by ({gpu_key}) (rate(numawatch_gpu_sampled_seconds_total{{{N}}}[$__rate_interval])) > 0)"
                    f"\n)\n* on ({gpu_key}) group_right () {holders}",
                    "{{instance}} {{gpu}} held by {{namespace}}/{{pod}} {{container}}",
                )
            ],
            "percentunit",
            max=1,
            thresholds=IDLE_STEPS,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Holder run-queue wait",
            "Seconds per second the threads of each GPU-holding container, summed, were runnable but waited for a "
            "CPU (task schedstat run delay): 5 % means 0.05 s of waiting per second, and it can exceed 100 % with "
            "many threads. docs/gpu.md starts to suspect a host-side bubble at 0.5 % next to 10 % idle while held.",
            [target(holder_rate("numawatch_gpu_holder_run_delay_seconds_total"), holder_legend)],
            "percentunit",
            thresholds=WAIT_STEPS,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Holder involuntary context switches",
            "Preemptions per second of the threads of each GPU-holding container: another task took their CPU. A "
            "pinned holder on isolated CPUs should see almost none.",
            [target(holder_rate("numawatch_gpu_holder_involuntary_switches_total"), holder_legend)],
            "cps",
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Holder CPU migrations",
            "Moves between CPUs per second of the threads of each GPU-holding container (se.nr_migrations). No data "
            "where the kernel lacks CONFIG_SCHED_DEBUG.",
            [target(holder_rate("numawatch_gpu_holder_migrations_total"), holder_legend)],
            "cps",
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Interrupts on holder CPUs",
            "Interrupts per second on the CPUs of each GPU-holding container's cpuset, by kind (device IRQs, the "
            "local timer tick, IPIs). Only watched CPUs count (isolated, nohz_full or exclusive): a holder on the "
            "shared pool shows few or none.",
            [
                target(
                    holder_rate("numawatch_gpu_holder_interrupts_total", f"{holder}, kind"),
                    f"{holder_legend} {{{{kind}}}}",
                )
            ],
            "cps",
        ),
        8,
        8,
    )
    layout.row("Inventory and holders")
    layout.add(
        table(
            "GPU inventory",
            "Every GPU: node, PCI address, NUMA node (empty = unknown), model, the container the kubelet's device "
            "checkpoint assigns it to, and whether NVML answers for it (empty when NVML is not used on the node).",
            [
                f"max by ({gpu_key}, numa_node, model, namespace, pod, container) (numawatch_gpu_info{{{N}}})",
                f"max by ({gpu_key}, index) (numawatch_gpu_nvml_up{{{N}}})",
            ],
            ["instance", "gpu", "uuid", "numa_node", "model", "namespace", "pod", "container", "index", "Value #B"],
            rename={"instance": "node", "index": "NVML index", "Value #B": "NVML"},
            overrides=[link_override("node", "Node dashboard", NODE_LINK), up_override("NVML")],
            sort="node",
        ),
        24,
        8,
    )
    layout.add(
        table(
            "Compute processes per GPU",
            "The containers whose processes NVML lists on each GPU (empty holder: processes outside any container), "
            "how many processes, and their SM utilisation since the previous evaluation. Differs from the inventory's "
            "assignment when a GPU is used outside the device plugin (gpu_holder_mismatch).",
            [
                f"max by ({gpu_key}, namespace, pod, container) (numawatch_gpu_processes{{{N}}})",
                f"max by ({gpu_key}, namespace, pod, container) (numawatch_gpu_process_sm_utilization_ratio{{{N}}})",
            ],
            ["instance", "gpu", "namespace", "pod", "container", "Value #A", "Value #B"],
            rename={"instance": "node", "Value #A": "processes", "Value #B": "SM utilisation"},
            overrides=[
                link_override("node", "Node dashboard", NODE_LINK),
                unit_override("SM utilisation", "percentunit"),
            ],
            sort="node",
        ),
        12,
        8,
    )
    layout.add(
        table(
            "GPU-local CPU share per holder",
            "For each container holding a GPU: the share of its CPUs on the NUMA node of one of its GPUs "
            "(1 = aligned). Click the node for its dashboard.",
            f"({local} or {every} * 0) / {every}",
            ["instance", "namespace", "pod", "container", "Value"],
            rename={"instance": "node", "Value": "local share"},
            overrides=[
                link_override("node", "Node dashboard", NODE_LINK),
                {
                    "matcher": {"id": "byName", "options": "local share"},
                    "properties": [
                        {"id": "unit", "value": "percentunit"},
                        {"id": "thresholds", "value": thresholds((None, "red"), (1, "green"))},
                        {"id": "custom.cellOptions", "value": {"type": "color-background"}},
                    ],
                },
            ],
            sort="node",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Time numawatch spends in NVML",
            "Seconds per second numawatch's NVML calls took, per node: NVML calls serialise in the driver and can "
            "stutter GPU work, so this should stay far below 1 %.",
            [
                target(
                    f"sum by (instance) (rate(numawatch_nvml_call_seconds_sum{{{N}}}[$__rate_interval]))",
                    "{{instance}}",
                )
            ],
            "percentunit",
        ),
        24,
        6,
    )
    layout.row("GPU interconnect")
    layout.add(
        table(
            "NVLink links per GPU",
            "Active NVLink links of each GPU as NVML enumerated them, and whether they lead to NVSwitches; 0 on a "
            "PCIe-only GPU. container_gpus_not_peered fires for a container holding GPUs that are not NVLink peers.",
            f"max by (instance, gpu, uuid, switch) (numawatch_gpu_nvlink_links{{{N}}})",
            ["instance", "gpu", "uuid", "switch", "Value"],
            rename={"Value": "active links"},
            sort="gpu",
        ),
        12,
        7,
    )
    layout.add(
        table(
            "Nearest RDMA NIC of each GPU",
            "Each GPU's PCIe paths to the RDMA NICs (nvidia-smi topo levels, PIX best, SYS worst); gpu_nic_path fires "
            "when a GPU's best path is worse than PXB where other GPUs do better, or no NIC is on its socket.",
            f"max by (instance, gpu, nic, level) (numawatch_gpu_nic_path_info{{{N}}})",
            ["instance", "gpu", "nic", "level"],
            sort="gpu",
        ),
        12,
        7,
    )
    layout.row("GPU-related drift")
    gpu_checks = (
        "container_gpu_numa_mismatch|container_numa_split|gpu_numa_unknown|gpu_process_remote|gpu_holder_mismatch"
        "|container_gpus_not_peered|gpu_nic_path"
    )
    layout.add(
        state_timeline(
            "GPU placement drift by container",
            "DRIFT while a GPU holder's CPUs are off its GPU's NUMA node or span nodes, a GPU has no NUMA node, or a "
            "GPU is used by a container it was not assigned to.",
            f'max by (instance, namespace, pod, container, gpu, check) (numawatch_drift{{{N}, check=~"{gpu_checks}"}})',
            "{{instance}} {{namespace}}/{{pod}} {{container}}{{gpu}} {{check}}",
        ),
        24,
        8,
    )
    layout.add(
        timeseries(
            "Pinning drift of GPU holders",
            "Findings on containers that hold a GPU, per check: each one delays the host threads feeding a GPU.",
            [
                target(
                    f'count by (check) (numawatch_drift{{{N}, container!=""}} '
                    f'and on ({holder}) numawatch_gpu_info{{{N}, container!=""}})',
                    "{{check}}",
                )
            ],
            "short",
            decimals=0,
        ),
        24,
        7,
    )
    return dashboard(
        "gpu",
        "numawatch / GPUs",
        "GPUs, their NUMA nodes and holders; each GPU's busy and coarse idle-while-held time next to its holder's "
        "run-queue wait, preemptions, migrations and interrupts; whether the holders' CPUs are local to their GPUs.",
        [cluster_variable(), node_variable(multi=True)],
        layout,
    )


DASHBOARDS = {"numawatch-fleet.json": fleet, "numawatch-node.json": node, "numawatch-gpu.json": gpu}


def render(document: dict) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def outputs() -> dict[Path, str]:
    return {HERE / name: render(build()) for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    return sync(outputs, "dashboards/generate.py", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
