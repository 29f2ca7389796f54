// The "numawatch / Fleet overview" dashboard (dashboards/README.md says what it shows). Each lib.at(width, height, panel)
// places a panel on the grid, lib.row starts a row; %(N)s in a query is the numawatch selector with the cluster, job
// and instance variables, %(C)s the cluster matcher of per-cluster recorded series, %(cl)s the cluster label.
local lib = import '../lib/dashboards.libsonnet';

function(c)
  local s = lib.selectors(c);
  local links = lib.links(c);
  lib.dashboard(c, 'numawatch-fleet.json', "Fleet overview", "Pinning drift across the fleet: coverage, which checks fail where, and the offenders.", lib.standardVariables(c) + [
    lib.queryVariable('check', 'Check', 'label_values(numawatch_drift_findings{%(N)s}, check)' % s,
                      'numawatch check ids (docs/checks.md).'),
    lib.queryVariable('shape', 'Pod shape', 'label_values(cluster_shape:numawatch_capacity_shape_replicas:sum{%(C)s}, shape)' % s,
                      "Named pod shapes of the intent file (docs/capacity.md); empty when none is configured."),
  ], [
    lib.row("Coverage and drift now"),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "numawatch exporters whose metrics Prometheus has now.",
      fieldConfig: {
        defaults: {
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
            ],
          },
          unit: "short",
        },
        overrides: [],
      },
      options: {
        colorMode: "background",
        graphMode: "none",
        justifyMode: "auto",
        orientation: "auto",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        textMode: "value",
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "count(max by (%(cl)s, instance) (numawatch_build_info{%(N)s}))" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Nodes reporting",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Share of numawatch scrape targets that answered the last scrape (up == 1).",
      fieldConfig: {
        defaults: {
          max: 1,
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "red", value: null },
              { color: "orange", value: 0.9 },
              { color: "green", value: 1 },
            ],
          },
          unit: "percentunit",
        },
        overrides: [],
      },
      options: {
        colorMode: "background",
        graphMode: "none",
        justifyMode: "auto",
        orientation: "auto",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        textMode: "value",
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "sum(up{%(N)s}) / count(up{%(N)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Exporters up",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Nodes where at least one selected check has a finding now.",
      fieldConfig: {
        defaults: {
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "red", value: 1 },
            ],
          },
          unit: "short",
        },
        overrides: [],
      },
      options: {
        colorMode: "background",
        graphMode: "none",
        justifyMode: "auto",
        orientation: "auto",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        textMode: "value",
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "count(max by (%(cl)s, instance) (numawatch_drift_findings{%(N)s, check=~\"$check\"}) > 0) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Nodes with drift",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Share of GPU nodes (numawatch sees a GPU) with any finding; recording rule cluster:numawatch_gpu_nodes_drifting:ratio.",
      fieldConfig: {
        defaults: {
          max: 1,
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "orange", value: 0.0001 },
              { color: "red", value: 0.2 },
            ],
          },
          unit: "percentunit",
        },
        overrides: [],
      },
      options: {
        colorMode: "background",
        graphMode: "none",
        justifyMode: "auto",
        orientation: "auto",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        textMode: "value",
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "avg(cluster:numawatch_gpu_nodes_drifting:ratio{%(C)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPU nodes drifting",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Containers with at least one finding of the selected checks now.",
      fieldConfig: {
        defaults: {
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "red", value: 1 },
            ],
          },
          unit: "short",
        },
        overrides: [],
      },
      options: {
        colorMode: "background",
        graphMode: "none",
        justifyMode: "auto",
        orientation: "auto",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        textMode: "value",
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "count(count by (%(cl)s, instance, namespace, pod, container) (numawatch_drift{%(N)s, check=~\"$check\", container!=\"\"})) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Containers in drift",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "numawatch alerts in state firing (Prometheus' ALERTS series).",
      fieldConfig: {
        defaults: {
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "red", value: 1 },
            ],
          },
          unit: "short",
        },
        overrides: [],
      },
      options: {
        colorMode: "background",
        graphMode: "none",
        justifyMode: "auto",
        orientation: "auto",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        textMode: "value",
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "count(ALERTS{alertname=~\"Numawatch.+\", alertstate=\"firing\", %(C)s}) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Numawatch alerts firing",
      type: "stat",
    }),
    lib.row("Drift by check"),
    lib.at(24, 9, {
      datasource: lib.datasource,
      description: "Per check: red while any node of the selected clusters has a finding (0 = OK, 1 = DRIFT).",
      fieldConfig: {
        defaults: {
          custom: { fillOpacity: 80, lineWidth: 0 },
          mappings: [
            {
              options: {
                "0": { color: "green", index: 0, text: "OK" },
              },
              type: "value",
            },
            {
              options: {
                from: 1,
                result: { color: "red", index: 1, text: "DRIFT" },
                to: 1000000000000.0,
              },
              type: "range",
            },
            {
              options: {
                "-1": { color: "text", index: 2, text: "NOT EVALUATED" },
              },
              type: "value",
            },
          ],
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "red", value: 1 },
            ],
          },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        alignValue: "left",
        legend: { displayMode: "list", placement: "bottom", showLegend: true },
        mergeValues: true,
        rowHeight: 0.8,
        showValue: "never",
        tooltip: { mode: "single", sort: "none" },
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "clamp_max(sum by (check) (cluster_check:numawatch_drift_findings:sum{%(C)s, check=~\"$check\"}), 1)" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{check}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Drift by check",
      type: "state-timeline",
    }),
    lib.at(12, 8, {
      datasource: lib.datasource,
      description: "Nodes with at least one finding, per check (recording rule cluster_check:numawatch_drift_nodes:count).",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          decimals: 0,
          min: 0,
          unit: "short",
        },
        overrides: [],
      },
      options: {
        legend: {
          calcs: ["lastNotNull"],
          displayMode: "table",
          placement: "right",
          showLegend: true,
        },
        tooltip: { mode: "multi", sort: "desc" },
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "sum by (check) (cluster_check:numawatch_drift_nodes:count{%(C)s, check=~\"$check\"})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{check}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Drifting nodes by check",
      type: "timeseries",
    }),
    lib.at(12, 8, {
      datasource: lib.datasource,
      description: "Share of reporting nodes failing each check; NumawatchDriftWidespread pages at 20 % and 3 nodes.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          max: 1,
          min: 0,
          unit: "percentunit",
        },
        overrides: [],
      },
      options: {
        legend: {
          calcs: ["lastNotNull"],
          displayMode: "table",
          placement: "right",
          showLegend: true,
        },
        tooltip: { mode: "multi", sort: "desc" },
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "max by (check) (cluster_check:numawatch_drift_nodes:ratio{%(C)s, check=~\"$check\"})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{check}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Share of nodes drifting by check",
      type: "timeseries",
    }),
    lib.row("Offenders"),
    lib.at(24, 10, {
      datasource: lib.datasource,
      description: "Every finding now, one row each. Click a node for its dashboard, a check for its meaning and remediation.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [
          {
            matcher: { id: "byName", options: "node" },
            properties: [
              {
                id: "links",
                value: [
                  {
                    targetBlank: false,
                    title: "Node dashboard",
                    url: links.node,
                  },
                ],
              },
            ],
          },
          {
            matcher: { id: "byName", options: "check" },
            properties: [
              {
                id: "links",
                value: [
                  {
                    targetBlank: true,
                    title: "What this check means and how to fix it",
                    url: c.checksDocURL + "#${__data.fields.check}",
                  },
                ],
              },
            ],
          },
          {
            matcher: { id: "byName", options: "severity" },
            properties: [
              {
                id: "mappings",
                value: [
                  {
                    options: {
                      critical: { color: "red", index: 0, text: "critical" },
                      info: { color: "blue", index: 2, text: "info" },
                      warning: { color: "orange", index: 1, text: "warning" },
                    },
                    type: "value",
                  },
                ],
              },
              {
                id: "custom.cellOptions",
                value: { type: "color-text" },
              },
            ],
          },
        ],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "node" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "max by (%(cl)s, instance, check, severity, namespace, pod, container, gpu) (numawatch_drift{%(N)s, check=~\"$check\"})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Current findings",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: [s.cl, "instance", "check", "severity", "namespace", "pod", "container", "gpu"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { check: 2, [s.cl]: 0, container: 6, gpu: 7, instance: 1, namespace: 4, pod: 5, severity: 3 },
            renameByName: { instance: "node" },
          },
        },
      ],
      type: "table",
    }),
    lib.at(24, 8, {
      datasource: lib.datasource,
      description: "numawatch alerts firing now; the alert name links to its runbook.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [
          {
            matcher: { id: "byName", options: "alertname" },
            properties: [
              {
                id: "links",
                value: [
                  {
                    targetBlank: true,
                    title: "Runbook",
                    url: c.runbookURLPattern % "${__data.fields.alertname}",
                  },
                ],
              },
            ],
          },
          {
            matcher: { id: "byName", options: "severity" },
            properties: [
              {
                id: "mappings",
                value: [
                  {
                    options: {
                      critical: { color: "red", index: 0, text: "critical" },
                      info: { color: "blue", index: 2, text: "info" },
                      warning: { color: "orange", index: 1, text: "warning" },
                    },
                    type: "value",
                  },
                ],
              },
              {
                id: "custom.cellOptions",
                value: { type: "color-text" },
              },
            ],
          },
        ],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "alertname" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "max by (alertname, severity, %(cl)s, instance, check, namespace, pod, container) (ALERTS{alertname=~\"Numawatch.+\", alertstate=\"firing\", %(C)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Firing alerts",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: [
                "alertname",
                "severity",
                s.cl,
                "instance",
                "check",
                "namespace",
                "pod",
                "container",
              ],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: {
              alertname: 0,
              check: 4,
              [s.cl]: 2,
              container: 7,
              instance: 3,
              namespace: 5,
              pod: 6,
              severity: 1,
            },
            renameByName: { instance: "node" },
          },
        },
      ],
      type: "table",
    }),
    lib.row("GPU bubbles (host side)"),
    lib.at(4, 9, {
      datasource: lib.datasource,
      description: "Share of the sampled time of every GPU in the selected clusters that a GPU sat idle while a container held it (NVML utilisation, 5 minutes; recording rule cluster:numawatch_gpu_held_idle:ratio_rate5m). Coarse: idle gaps shorter than NVML's sample period (1/6-1 s) count as busy. Empty without NVML.",
      fieldConfig: {
        defaults: {
          max: 1,
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "orange", value: 0.1 },
              { color: "red", value: 0.3 },
            ],
          },
          unit: "percentunit",
        },
        overrides: [],
      },
      options: {
        colorMode: "background",
        graphMode: "none",
        justifyMode: "auto",
        orientation: "auto",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        textMode: "value",
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "avg(cluster:numawatch_gpu_held_idle:ratio_rate5m{%(C)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPU time idle while held",
      type: "stat",
    }),
    lib.at(20, 9, {
      datasource: lib.datasource,
      description: "Each held GPU's coarse idle-while-held share over 5 minutes next to the seconds per second its holder container's threads, summed, waited for a CPU (recording rules instance_gpu:numawatch_gpu_held_idle:ratio_rate5m and instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m). Both high together: a host-side bubble suspect (docs/gpu.md); a GPU idle with no requests queued is not one. Click a node for its GPU view.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [
          {
            matcher: { id: "byName", options: "node" },
            properties: [
              {
                id: "links",
                value: [
                  {
                    targetBlank: false,
                    title: "GPU dashboard",
                    url: links.gpu,
                  },
                ],
              },
            ],
          },
          {
            matcher: { id: "byName", options: "idle while held" },
            properties: [
              { id: "unit", value: "percentunit" },
              {
                id: "thresholds",
                value: {
                  mode: "absolute",
                  steps: [
                    { color: "green", value: null },
                    { color: "orange", value: 0.1 },
                    { color: "red", value: 0.3 },
                  ],
                },
              },
              {
                id: "custom.cellOptions",
                value: { type: "color-background" },
              },
            ],
          },
          {
            matcher: { id: "byName", options: "run-queue wait" },
            properties: [
              { id: "unit", value: "percentunit" },
              {
                id: "thresholds",
                value: {
                  mode: "absolute",
                  steps: [
                    { color: "green", value: null },
                    { color: "orange", value: 0.005 },
                    { color: "red", value: 0.05 },
                  ],
                },
              },
              {
                id: "custom.cellOptions",
                value: { type: "color-background" },
              },
            ],
          },
        ],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: true, displayName: "idle while held" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: lib.withVendor(c, "max by (%(cl)s, instance, gpu, uuid, namespace, pod, container) (instance_gpu:numawatch_gpu_held_idle:ratio_rate5m{%(C)s})" % s, "%(cl)s, instance, gpu" % s),
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
        {
          datasource: lib.datasource,
          expr: "max by (%(cl)s, instance, namespace, pod, container) (instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m{%(C)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "B",
        },
      ],
      title: "GPUs idle while held, next to their holder's run-queue wait",
      transformations: [{ id: "merge", options: {} }] + lib.columns(
        [s.cl, "instance", "gpu", "vendor", "namespace", "pod", "container", "Value #A", "Value #B"],
        { "Value #A": "idle while held", "Value #B": "run-queue wait", instance: "node" },
      ),
      type: "table",
    }),
    lib.row("NUMA capacity"),
    lib.at(24, 4, {
      datasource: lib.datasource,
      description: "Pods of this shape (the intent file's shapes) the nodes' kubelets would still admit now, one after another, under each node's Topology Manager policy: the NUMA-aware answer, which the scheduler's per-node totals overstate (recording rule cluster_shape:numawatch_capacity_shape_replicas:sum).",
      fieldConfig: {
        defaults: {
          decimals: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "red", value: null },
              { color: "orange", value: 1 },
              { color: "green", value: 3 },
            ],
          },
          unit: "short",
        },
        overrides: [],
      },
      maxPerRow: 6,
      options: {
        colorMode: "background",
        graphMode: "none",
        justifyMode: "auto",
        orientation: "auto",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        textMode: "value",
      },
      repeat: "shape",
      repeatDirection: "h",
      targets: [
        {
          datasource: lib.datasource,
          expr: "sum(cluster_shape:numawatch_capacity_shape_replicas:sum{%(C)s, shape=~\"$shape\"})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "How many more $shape replicas fit in the cluster right now",
      type: "stat",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "How many more pods of each shape the selected clusters admit, over time: falls as pods are placed, rises as they go.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          decimals: 0,
          min: 0,
          unit: "short",
        },
        overrides: [],
      },
      options: {
        legend: {
          calcs: ["lastNotNull"],
          displayMode: "table",
          placement: "right",
          showLegend: true,
        },
        tooltip: { mode: "multi", sort: "desc" },
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "sum by (shape) (cluster_shape:numawatch_capacity_shape_replicas:sum{%(C)s, shape=~\"$shape\"})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{shape}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Replicas that fit, by shape",
      type: "timeseries",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Nodes that would admit at least one more pod of each shape (recording rule cluster_shape:numawatch_capacity_shape_nodes:count); 0 when none would.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          decimals: 0,
          min: 0,
          unit: "short",
        },
        overrides: [],
      },
      options: {
        legend: {
          calcs: ["lastNotNull"],
          displayMode: "table",
          placement: "right",
          showLegend: true,
        },
        tooltip: { mode: "multi", sort: "desc" },
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "sum by (shape) (cluster_shape:numawatch_capacity_shape_nodes:count{%(C)s, shape=~\"$shape\"} or cluster_shape:numawatch_capacity_shape_replicas:sum{%(C)s, shape=~\"$shape\"} * 0)" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{shape}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Nodes that would admit another replica",
      type: "timeseries",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Pods waiting for a node, from kube-state-metrics' kube_pod_status_phase: replicas that fit while pods stay Pending point at something other than NUMA capacity (taints, affinity, quotas). Shows no data where kube-state-metrics is not scraped by this Prometheus.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          decimals: 0,
          min: 0,
          unit: "short",
        },
        overrides: [],
      },
      options: {
        legend: {
          calcs: ["lastNotNull"],
          displayMode: "table",
          placement: "right",
          showLegend: true,
        },
        tooltip: { mode: "multi", sort: "desc" },
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "sum by (%(cl)s) (kube_pod_status_phase{%(C)s, phase=\"Pending\"})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{%(cl)s}} pending" % s,
          range: true,
          refId: "A",
        },
      ],
      title: "Pending pods (kube-state-metrics)",
      type: "timeseries",
    }),
    lib.at(6, 6, {
      datasource: lib.datasource,
      description: "Exclusive CPUs no container holds and devices (GPUs) no container holds, summed over every NUMA node of the selected clusters (recording rules cluster:numawatch_capacity_free_cpus:sum and cluster_resource:numawatch_capacity_free_devices:sum).",
      fieldConfig: {
        defaults: {
          decimals: 0,
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
            ],
          },
          unit: "short",
        },
        overrides: [],
      },
      options: {
        displayMode: "gradient",
        orientation: "horizontal",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        showUnfilled: true,
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "label_replace(sum(cluster:numawatch_capacity_free_cpus:sum{%(C)s}), \"resource\", \"cpu\", \"\", \"\")\nor sum by (resource) (cluster_resource:numawatch_capacity_free_devices:sum{%(C)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "{{resource}}",
          range: false,
          refId: "A",
        },
      ],
      title: "Free exclusive CPUs and devices",
      type: "bargauge",
    }),
    lib.at(6, 6, {
      datasource: lib.datasource,
      description: "Memory and huge pages the Memory Manager (Static policy) can still hand out, summed over every NUMA node (recording rule cluster_resource:numawatch_capacity_free_bytes:sum).",
      fieldConfig: {
        defaults: {
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
            ],
          },
          unit: "bytes",
        },
        overrides: [],
      },
      options: {
        displayMode: "gradient",
        orientation: "horizontal",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        showUnfilled: true,
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "sum by (resource) (cluster_resource:numawatch_capacity_free_bytes:sum{%(C)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "{{resource}}",
          range: false,
          refId: "A",
        },
      ],
      title: "Free Memory Manager memory and huge pages",
      type: "bargauge",
    }),
    lib.at(6, 6, {
      datasource: lib.datasource,
      description: "The largest request of each resource that a single NUMA node somewhere could still grant alone: a pod asking for more is refused under single-numa-node (recording rules cluster:numawatch_capacity_largest_fit_cpus:max and cluster_resource:numawatch_capacity_largest_fit_devices:max).",
      fieldConfig: {
        defaults: {
          decimals: 0,
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
            ],
          },
          unit: "short",
        },
        overrides: [],
      },
      options: {
        displayMode: "gradient",
        orientation: "horizontal",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        showUnfilled: true,
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "label_replace(max(cluster:numawatch_capacity_largest_fit_cpus:max{%(C)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (resource) (cluster_resource:numawatch_capacity_largest_fit_devices:max{%(C)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "{{resource}}",
          range: false,
          refId: "A",
        },
      ],
      title: "Largest CPU and device request one NUMA node takes",
      type: "bargauge",
    }),
    lib.at(6, 6, {
      datasource: lib.datasource,
      description: "The largest Memory Manager memory or huge page request a single NUMA node somewhere could still grant alone (0 while earlier multi-node allocations group the nodes; recording rule cluster_resource:numawatch_capacity_largest_fit_bytes:max).",
      fieldConfig: {
        defaults: {
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
            ],
          },
          unit: "bytes",
        },
        overrides: [],
      },
      options: {
        displayMode: "gradient",
        orientation: "horizontal",
        reduceOptions: {
          calcs: ["lastNotNull"],
          fields: "",
          values: false,
        },
        showUnfilled: true,
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "max by (resource) (cluster_resource:numawatch_capacity_largest_fit_bytes:max{%(C)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "{{resource}}",
          range: false,
          refId: "A",
        },
      ],
      title: "Largest memory request one NUMA node takes",
      type: "bargauge",
    }),
    lib.row("Exporters"),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "Nodes per numawatch version: a drift that starts with a rollout of numawatch itself shows up here.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          decimals: 0,
          min: 0,
          unit: "short",
        },
        overrides: [],
      },
      options: {
        legend: {
          calcs: ["lastNotNull"],
          displayMode: "table",
          placement: "right",
          showLegend: true,
        },
        tooltip: { mode: "multi", sort: "desc" },
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "count by (version) (numawatch_build_info{%(N)s})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{version}}",
          range: true,
          refId: "A",
        },
      ],
      title: "numawatch versions",
      type: "timeseries",
    }),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "Time one evaluation takes (read every source, run every check), slowest nodes' 99th percentile.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          min: 0,
          unit: "s",
        },
        overrides: [],
      },
      options: {
        legend: {
          calcs: ["lastNotNull"],
          displayMode: "table",
          placement: "right",
          showLegend: true,
        },
        tooltip: { mode: "multi", sort: "desc" },
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "histogram_quantile(0.99, sum by (le) (rate(numawatch_evaluation_duration_seconds_bucket{%(N)s}[$__rate_interval])))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "p99",
          range: true,
          refId: "A",
        },
      ],
      title: "Evaluation time, p99 over nodes",
      type: "timeseries",
    }),
  ])
