// The "numawatch / Fleet overview" dashboard (dashboards/README.md says what it shows): a list of panels, each made by a
// lib/dashboards.libsonnet helper (lib.stat, lib.timeseries, lib.table, lib.stateTimeline, lib.barGauge: title,
// description, queries) plus what is its own; lib.at(width, height, panel) places it on the grid, lib.row starts
// a row. %(N)s in a query is the numawatch selector with the cluster, job and instance variables, %(C)s the
// cluster matcher of per-cluster recorded series, %(cl)s the cluster label.
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
    lib.at(4, 4, lib.stat(
      "Nodes reporting",
      "numawatch exporters whose metrics Prometheus has now.",
      [
        lib.instantQuery("count(max by (%(cl)s, instance) (numawatch_build_info{%(N)s}))" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null]]),
          unit: "short",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "Exporters up",
      "Share of numawatch scrape targets that answered the last scrape (up == 1).",
      [
        lib.instantQuery("sum(up{%(N)s}) / count(up{%(N)s})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          max: 1,
          min: 0,
          thresholds: lib.thresholds([["red", null], ["orange", 0.9], ["green", 1]]),
          unit: "percentunit",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "Nodes with drift",
      "Nodes where at least one selected check has a finding now.",
      [
        lib.instantQuery("count(max by (%(cl)s, instance) (numawatch_drift_findings{%(N)s, check=~\"$check\"}) > 0) or vector(0)" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null], ["red", 1]]),
          unit: "short",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "GPU nodes drifting",
      "Share of GPU nodes (numawatch sees a GPU) with any finding; recording rule cluster:numawatch_gpu_nodes_drifting:ratio.",
      [
        lib.instantQuery("avg(cluster:numawatch_gpu_nodes_drifting:ratio{%(C)s})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          max: 1,
          min: 0,
          thresholds: lib.thresholds([["green", null], ["orange", 0.0001], ["red", 0.2]]),
          unit: "percentunit",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "Containers in drift",
      "Containers with at least one finding of the selected checks now.",
      [
        lib.instantQuery("count(count by (%(cl)s, instance, namespace, pod, container) (numawatch_drift{%(N)s, check=~\"$check\", container!=\"\"})) or vector(0)" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null], ["red", 1]]),
          unit: "short",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "Numawatch alerts firing",
      "numawatch alerts in state firing (Prometheus' ALERTS series).",
      [
        lib.instantQuery("count(ALERTS{alertname=~\"Numawatch.+\", alertstate=\"firing\", %(C)s}) or vector(0)" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null], ["red", 1]]),
          unit: "short",
        },
      },
    }),
    lib.row("Drift by check"),
    lib.at(24, 9, lib.stateTimeline(
      "Drift by check",
      "Per check: red while any node of the selected clusters has a finding (0 = OK, 1 = DRIFT).",
      [
        lib.rangeQuery("clamp_max(sum by (check) (cluster_check:numawatch_drift_findings:sum{%(C)s, check=~\"$check\"}), 1)" % s, "{{check}}"),
      ],
    )),
    lib.at(12, 8, lib.timeseries(
      "Drifting nodes by check",
      "Nodes with at least one finding, per check (recording rule cluster_check:numawatch_drift_nodes:count).",
      [
        lib.rangeQuery("sum by (check) (cluster_check:numawatch_drift_nodes:count{%(C)s, check=~\"$check\"})" % s, "{{check}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          min: 0,
          unit: "short",
        },
      },
    }),
    lib.at(12, 8, lib.timeseries(
      "Share of nodes drifting by check",
      "Share of reporting nodes failing each check; NumawatchDriftWidespread pages at 20 % and 3 nodes.",
      [
        lib.rangeQuery("max by (check) (cluster_check:numawatch_drift_nodes:ratio{%(C)s, check=~\"$check\"})" % s, "{{check}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          max: 1,
          min: 0,
          unit: "percentunit",
        },
      },
    }),
    lib.row("Offenders"),
    lib.at(24, 10, lib.table(
      "Current findings",
      "Every finding now, one row each. Click a node for its dashboard, a check for its meaning and remediation.",
      [
        lib.tableQuery("max by (%(cl)s, instance, check, severity, namespace, pod, container, gpu) (numawatch_drift{%(N)s, check=~\"$check\"})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
        overrides: [
          lib.linkColumn("node", "Node dashboard", links.node),
          lib.linkColumn("check", "What this check means and how to fix it", c.checksDocURL + "#${__data.fields.check}", targetBlank=true),
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
      transformations: lib.columns([s.cl, "instance", "check", "severity", "namespace", "pod", "container", "gpu"], { instance: "node" }),
    }),
    lib.at(24, 8, lib.table(
      "Firing alerts",
      "numawatch alerts firing now; the alert name links to its runbook.",
      [
        lib.tableQuery("max by (alertname, severity, %(cl)s, instance, check, namespace, pod, container) (ALERTS{alertname=~\"Numawatch.+\", alertstate=\"firing\", %(C)s})" % s),
      ], sortBy="alertname",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
        overrides: [
          lib.linkColumn("alertname", "Runbook", c.runbookURLPattern % "${__data.fields.alertname}", targetBlank=true),
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
      transformations: lib.columns(["alertname", "severity", s.cl, "instance", "check", "namespace", "pod", "container"], { instance: "node" }),
    }),
    lib.row("GPU bubbles (host side)"),
    lib.at(4, 9, lib.stat(
      "GPU time idle while held",
      "Share of the sampled time of every GPU in the selected clusters that a GPU sat idle while a container held it (NVML utilisation, 5 minutes; recording rule cluster:numawatch_gpu_held_idle:ratio_rate5m). Coarse: idle gaps shorter than NVML's sample period (1/6-1 s) count as busy. Empty without NVML.",
      [
        lib.instantQuery("avg(cluster:numawatch_gpu_held_idle:ratio_rate5m{%(C)s})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          max: 1,
          min: 0,
          thresholds: lib.thresholds([["green", null], ["orange", 0.1], ["red", 0.3]]),
          unit: "percentunit",
        },
      },
    }),
    lib.at(20, 9, lib.table(
      "GPUs idle while held, next to their holder's run-queue wait",
      "Each held GPU's coarse idle-while-held share over 5 minutes next to the seconds per second its holder container's threads, summed, waited for a CPU (recording rules instance_gpu:numawatch_gpu_held_idle:ratio_rate5m and instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m). Both high together: a host-side bubble suspect (docs/gpu.md); a GPU idle with no requests queued is not one. Click a node for its GPU view.",
      [
        lib.tableQuery(lib.withVendor(c, "max by (%(cl)s, instance, gpu, uuid, namespace, pod, container) (instance_gpu:numawatch_gpu_held_idle:ratio_rate5m{%(C)s})" % s, "%(cl)s, instance, gpu" % s)),
        lib.tableQuery("max by (%(cl)s, instance, namespace, pod, container) (instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m{%(C)s})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
        overrides: [
          lib.linkColumn("node", "GPU dashboard", links.gpu),
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
      transformations: [{ id: "merge", options: {} }] + lib.columns(
        [s.cl, "instance", "gpu", "vendor", "namespace", "pod", "container", "Value #A", "Value #B"],
        { "Value #A": "idle while held", "Value #B": "run-queue wait", instance: "node" },
      ),
    }),
    lib.row("NUMA capacity"),
    lib.at(24, 4, lib.stat(
      "How many more $shape replicas fit in the cluster right now",
      "Pods of this shape (the intent file's shapes) the nodes' kubelets would still admit now, one after another, under each node's Topology Manager policy: the NUMA-aware answer, which the scheduler's per-node totals overstate (recording rule cluster_shape:numawatch_capacity_shape_replicas:sum).",
      [
        lib.instantQuery("sum(cluster_shape:numawatch_capacity_shape_replicas:sum{%(C)s, shape=~\"$shape\"})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          thresholds: lib.thresholds([["red", null], ["orange", 1], ["green", 3]]),
          unit: "short",
        },
      },
      maxPerRow: 6,
      repeat: "shape",
      repeatDirection: "h",
    }),
    lib.at(8, 8, lib.timeseries(
      "Replicas that fit, by shape",
      "How many more pods of each shape the selected clusters admit, over time: falls as pods are placed, rises as they go.",
      [
        lib.rangeQuery("sum by (shape) (cluster_shape:numawatch_capacity_shape_replicas:sum{%(C)s, shape=~\"$shape\"})" % s, "{{shape}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          min: 0,
          unit: "short",
        },
      },
    }),
    lib.at(8, 8, lib.timeseries(
      "Nodes that would admit another replica",
      "Nodes that would admit at least one more pod of each shape (recording rule cluster_shape:numawatch_capacity_shape_nodes:count); 0 when none would.",
      [
        lib.rangeQuery("sum by (shape) (cluster_shape:numawatch_capacity_shape_nodes:count{%(C)s, shape=~\"$shape\"} or cluster_shape:numawatch_capacity_shape_replicas:sum{%(C)s, shape=~\"$shape\"} * 0)" % s, "{{shape}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          min: 0,
          unit: "short",
        },
      },
    }),
    lib.at(8, 8, lib.timeseries(
      "Pending pods (kube-state-metrics)",
      "Pods waiting for a node, from kube-state-metrics' kube_pod_status_phase: replicas that fit while pods stay Pending point at something other than NUMA capacity (taints, affinity, quotas). Shows no data where kube-state-metrics is not scraped by this Prometheus.",
      [
        lib.rangeQuery("sum by (%(cl)s) (kube_pod_status_phase{%(C)s, phase=\"Pending\"})" % s, "{{%(cl)s}} pending" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          min: 0,
          unit: "short",
        },
      },
    }),
    lib.at(6, 6, lib.barGauge(
      "Free exclusive CPUs and devices",
      "Exclusive CPUs no container holds and devices (GPUs) no container holds, summed over every NUMA node of the selected clusters (recording rules cluster:numawatch_capacity_free_cpus:sum and cluster_resource:numawatch_capacity_free_devices:sum).",
      [
        lib.instantQuery("label_replace(sum(cluster:numawatch_capacity_free_cpus:sum{%(C)s}), \"resource\", \"cpu\", \"\", \"\")\nor sum by (resource) (cluster_resource:numawatch_capacity_free_devices:sum{%(C)s})" % s, "{{resource}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          min: 0,
          thresholds: lib.thresholds([["green", null]]),
          unit: "short",
        },
      },
    }),
    lib.at(6, 6, lib.barGauge(
      "Free Memory Manager memory and huge pages",
      "Memory and huge pages the Memory Manager (Static policy) can still hand out, summed over every NUMA node (recording rule cluster_resource:numawatch_capacity_free_bytes:sum).",
      [
        lib.instantQuery("sum by (resource) (cluster_resource:numawatch_capacity_free_bytes:sum{%(C)s})" % s, "{{resource}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          thresholds: lib.thresholds([["green", null]]),
          unit: "bytes",
        },
      },
    }),
    lib.at(6, 6, lib.barGauge(
      "Largest CPU and device request one NUMA node takes",
      "The largest request of each resource that a single NUMA node somewhere could still grant alone: a pod asking for more is refused under single-numa-node (recording rules cluster:numawatch_capacity_largest_fit_cpus:max and cluster_resource:numawatch_capacity_largest_fit_devices:max).",
      [
        lib.instantQuery("label_replace(max(cluster:numawatch_capacity_largest_fit_cpus:max{%(C)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (resource) (cluster_resource:numawatch_capacity_largest_fit_devices:max{%(C)s})" % s, "{{resource}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          min: 0,
          thresholds: lib.thresholds([["green", null]]),
          unit: "short",
        },
      },
    }),
    lib.at(6, 6, lib.barGauge(
      "Largest memory request one NUMA node takes",
      "The largest Memory Manager memory or huge page request a single NUMA node somewhere could still grant alone (0 while earlier multi-node allocations group the nodes; recording rule cluster_resource:numawatch_capacity_largest_fit_bytes:max).",
      [
        lib.instantQuery("max by (resource) (cluster_resource:numawatch_capacity_largest_fit_bytes:max{%(C)s})" % s, "{{resource}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          thresholds: lib.thresholds([["green", null]]),
          unit: "bytes",
        },
      },
    }),
    lib.row("Exporters"),
    lib.at(12, 7, lib.timeseries(
      "numawatch versions",
      "Nodes per numawatch version: a drift that starts with a rollout of numawatch itself shows up here.",
      [
        lib.rangeQuery("count by (version) (numawatch_build_info{%(N)s})" % s, "{{version}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          min: 0,
          unit: "short",
        },
      },
    }),
    lib.at(12, 7, lib.timeseries(
      "Evaluation time, p99 over nodes",
      "Time one evaluation takes (read every source, run every check), slowest nodes' 99th percentile.",
      [
        lib.rangeQuery("histogram_quantile(0.99, sum by (le) (rate(numawatch_evaluation_duration_seconds_bucket{%(N)s}[$__rate_interval])))" % s, "p99"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "s",
        },
      },
    }),
  ])
