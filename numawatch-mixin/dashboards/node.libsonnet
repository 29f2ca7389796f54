// The "numawatch / Node" dashboard (dashboards/README.md says what it shows). Each lib.at(width, height, panel)
// places a panel on the grid, lib.row starts a row; %(N)s in a query is the numawatch selector with the cluster, job
// and instance variables, %(C)s the cluster matcher of per-cluster recorded series, %(cl)s the cluster label.
local lib = import '../lib/dashboards.libsonnet';

function(c)
  local s = lib.selectors(c);
  local links = lib.links(c);
  lib.dashboard(c, 'numawatch-node.json', "Node", "One node: its findings with remediation, the NUMA map of CPUs, containers and GPUs, and numawatch's health.", lib.standardVariables(c), [
    lib.row("Health"),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Drift findings on this node now, all checks.",
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
          expr: "sum(numawatch_drift_findings{%(N)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Findings",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Checks that could not look (a source is down or the intent disables them): blind, not clean.",
      fieldConfig: {
        defaults: {
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "orange", value: 1 },
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
          expr: "count(numawatch_check_evaluated{%(N)s} == 0) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Checks not evaluated",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "numawatch sources that could not read their host files in the last evaluation.",
      fieldConfig: {
        defaults: {
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "orange", value: 1 },
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
          expr: "count(numawatch_source_up{%(N)s} == 0) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Sources down",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Age of the data: seconds since numawatch last finished an evaluation (every 15 s when healthy).",
      fieldConfig: {
        defaults: {
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "orange", value: 60 },
              { color: "red", value: 120 },
            ],
          },
          unit: "s",
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
          expr: "time() - max(numawatch_last_evaluation_timestamp_seconds{%(N)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Last evaluation",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "CPUs online on this node.",
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
          expr: "sum(numawatch_numa_node_cpus{%(N)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Online CPUs",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Online CPUs in isolcpus: where pinned inference threads should run.",
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
          expr: "count(numawatch_cpu_info{%(N)s, isolated=\"true\", online=\"true\"}) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Isolated CPUs",
      type: "stat",
    }),
    lib.row("Findings"),
    lib.at(24, 10, {
      datasource: lib.datasource,
      description: "Every finding on the node now (numawatch_drift_info: its subject and details), with the check's remediation. Click a check for docs/checks.md; `numawatch check` on the node prints the full message.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [
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
          lib.remediationOverride,
        ],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "check" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "label_replace(numawatch_drift_info{%(N)s}, \"remediation\", \"$1\", \"check\", \"(.*)\")" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Findings with remediation",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: [
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
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: {
              check: 0,
              container: 4,
              cpus: 14,
              expected: 16,
              file: 11,
              governor: 9,
              gpu: 5,
              irq: 6,
              name: 7,
              namespace: 2,
              numa_node: 13,
              pod: 3,
              reason: 12,
              remediation: 17,
              setting: 8,
              severity: 1,
              size: 10,
              value: 15,
            },
            renameByName: {},
          },
        },
      ],
      type: "table",
    }),
    lib.at(12, 10, {
      datasource: lib.datasource,
      description: "Per check on this node: 0 = OK, 1 = DRIFT (any finding), -1 = NOT EVALUATED (the check could not look: blind, not clean).",
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
          expr: "clamp_max(max by (check) (numawatch_drift_findings{%(N)s}), 1)\nor (max by (check) (numawatch_check_evaluated{%(N)s}) == 0) - 1" % s,
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
    lib.at(12, 10, {
      datasource: lib.datasource,
      description: "Per container: DRIFT while it has any finding; gaps mean no finding.",
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
          expr: "max by (namespace, pod, container) (numawatch_drift{%(N)s, container!=\"\"})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{namespace}}/{{pod}} {{container}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Drift by container",
      type: "state-timeline",
    }),
    lib.row("NUMA map"),
    lib.at(12, 10, {
      datasource: lib.datasource,
      description: "One row per CPU: socket, core, NUMA node, isolated (isolcpus), reserved (kubelet reserved-cpus), online.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "cpu" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "numawatch_cpu_info{%(N)s}" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "CPUs",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["cpu", "socket", "core", "numa_node", "isolated", "reserved", "online"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { core: 2, cpu: 0, isolated: 4, numa_node: 3, online: 6, reserved: 5, socket: 1 },
            renameByName: {},
          },
        },
      ],
      type: "table",
    }),
    lib.at(12, 10, {
      datasource: lib.datasource,
      description: "CPUs of each container's effective cpuset per NUMA node; a container on two rows spans two nodes.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "namespace" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "numawatch_container_cpus{%(N)s}" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Containers per NUMA node",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["namespace", "pod", "container", "numa_node", "qos", "exclusive", "Value"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { Value: 6, container: 2, exclusive: 5, namespace: 0, numa_node: 3, pod: 1, qos: 4 },
            renameByName: { Value: "cpus" },
          },
        },
      ],
      type: "table",
    }),
    lib.at(12, 6, {
      datasource: lib.datasource,
      description: "CPUs the static CPU Manager handed out exclusively, per NUMA node, out of its online CPUs.",
      fieldConfig: {
        defaults: {
          max: 1,
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "orange", value: 0.8 },
              { color: "red", value: 0.95 },
            ],
          },
          unit: "percentunit",
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
          expr: "sum by (numa_node) (numawatch_container_cpus{%(N)s, exclusive=\"true\"}) / on (numa_node) sum by (numa_node) (numawatch_numa_node_cpus{%(N)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "node {{numa_node}}",
          range: false,
          refId: "A",
        },
      ],
      title: "Exclusive CPUs per NUMA node",
      type: "bargauge",
    }),
    lib.at(12, 6, {
      datasource: lib.datasource,
      description: "Each GPU: PCI address, NUMA node (empty = unknown), model, and the container the kubelet assigned it to.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "gpu" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "numawatch_gpu_info{%(N)s}" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPUs and holders",
      transformations: lib.columns(["gpu", "uuid", "numa_node", "vendor", "model", "namespace", "pod", "container"]),
      type: "table",
    }),
    lib.row("NUMA capacity"),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "Per NUMA node: exclusive CPUs (static CPU Manager; whole cores under full-pcpus-only) and devices (GPUs) the kubelet can hand out, how many are free, and the largest request that node alone could still grant. An empty numa_node is a device registered without topology, usable from any node.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "numa_node" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "label_replace(max by (numa_node) (numawatch_capacity_allocatable_cpus{%(N)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (numa_node, resource) (numawatch_capacity_allocatable_devices{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
        {
          datasource: lib.datasource,
          expr: "label_replace(max by (numa_node) (numawatch_capacity_free_cpus{%(N)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (numa_node, resource) (numawatch_capacity_free_devices{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "B",
        },
        {
          datasource: lib.datasource,
          expr: "label_replace(max by (numa_node) (numawatch_capacity_largest_fit_cpus{%(N)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (numa_node, resource) (numawatch_capacity_largest_fit_devices{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "C",
        },
      ],
      title: "Exclusive CPUs and devices per NUMA node",
      transformations: [
        { id: "merge", options: {} },
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["numa_node", "resource", "Value #A", "Value #B", "Value #C"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { "Value #A": 2, "Value #B": 3, "Value #C": 4, numa_node: 0, resource: 1 },
            renameByName: { "Value #A": "allocatable", "Value #B": "free", "Value #C": "largest fit" },
          },
        },
      ],
      type: "table",
    }),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "Per NUMA node (Memory Manager Static policy): memory and huge pages allocatable, free, and the largest request that node alone could still grant (0 while an earlier multi-node allocation groups it).",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "bytes",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "numa_node" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "max by (numa_node, resource) (numawatch_capacity_allocatable_bytes{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
        {
          datasource: lib.datasource,
          expr: "max by (numa_node, resource) (numawatch_capacity_free_bytes{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "B",
        },
        {
          datasource: lib.datasource,
          expr: "max by (numa_node, resource) (numawatch_capacity_largest_fit_bytes{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "C",
        },
      ],
      title: "Memory Manager memory and huge pages per NUMA node",
      transformations: [
        { id: "merge", options: {} },
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["numa_node", "resource", "Value #A", "Value #B", "Value #C"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { "Value #A": 2, "Value #B": 3, "Value #C": 4, numa_node: 0, resource: 1 },
            renameByName: { "Value #A": "allocatable", "Value #B": "free", "Value #C": "largest fit" },
          },
        },
      ],
      type: "table",
    }),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "Exclusive CPUs and devices no container holds, per NUMA node, over time.",
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
          expr: "label_replace(max by (numa_node) (numawatch_capacity_free_cpus{%(N)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (numa_node, resource) (numawatch_capacity_free_devices{%(N)s})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{resource}} node {{numa_node}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Free exclusive CPUs and devices per NUMA node",
      type: "timeseries",
    }),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "How many more pods of each named shape (intent file) this node's kubelet would admit now, one after another, under its Topology Manager policy; `numawatch check --fit SHAPE` on the node says why not.",
      fieldConfig: {
        defaults: {
          decimals: 0,
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "red", value: null },
              { color: "green", value: 1 },
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
          expr: "max by (shape) (numawatch_capacity_shape_replicas{%(N)s})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "{{shape}}",
          range: false,
          refId: "A",
        },
      ],
      title: "Replicas of each shape this node admits",
      type: "bargauge",
    }),
    lib.row("Memory and host"),
    lib.at(12, 8, {
      datasource: lib.datasource,
      description: "Resident memory of each container on each NUMA node (cgroup memory.numa_stat).",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          min: 0,
          unit: "bytes",
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
          expr: "sum by (namespace, pod, container, numa_node) (numawatch_container_memory_numa_bytes{%(N)s})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{namespace}}/{{pod}} {{container}} node {{numa_node}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Container memory per NUMA node",
      type: "timeseries",
    }),
    lib.at(12, 8, {
      datasource: lib.datasource,
      description: "Share of each container's resident memory on NUMA nodes where it has no CPU: every access to it crosses the inter-socket link.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [
          {
            matcher: { id: "byName", options: "remote share" },
            properties: [
              { id: "unit", value: "percentunit" },
              {
                id: "thresholds",
                value: {
                  mode: "absolute",
                  steps: [
                    { color: "green", value: null },
                    { color: "orange", value: 0.1 },
                    { color: "red", value: 0.5 },
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
          { desc: false, displayName: "namespace" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "(sum by (namespace, pod, container) (numawatch_container_memory_numa_bytes{%(N)s} unless on (instance, namespace, pod, container, numa_node) numawatch_container_cpus{%(N)s}) or sum by (namespace, pod, container) (numawatch_container_memory_numa_bytes{%(N)s}) * 0) / sum by (namespace, pod, container) (numawatch_container_memory_numa_bytes{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Remote memory share per container",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["namespace", "pod", "container", "Value"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { Value: 3, container: 2, namespace: 0, pod: 1 },
            renameByName: { Value: "remote share" },
          },
        },
      ],
      type: "table",
    }),
    lib.at(12, 8, {
      datasource: lib.datasource,
      description: "Interrupts per second on the isolated, nohz_full and exclusively held CPUs, by kind: device IRQs, the local timer tick and IPIs. Device IRQs here stall pinned threads.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
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
          expr: "sum by (kind) (rate(numawatch_cpu_interrupts_total{%(N)s}[$__rate_interval]))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{kind}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Interrupts on watched CPUs per second",
      type: "timeseries",
    }),
    lib.at(6, 8, {
      datasource: lib.datasource,
      description: "Kernel knobs numawatch compares with the intent: NUMA balancing, swappiness, THP, isolation parameters.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "setting" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "numawatch_kernel_setting_info{%(N)s}" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Kernel settings",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["setting", "value"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { setting: 0, value: 1 },
            renameByName: {},
          },
        },
      ],
      type: "table",
    }),
    lib.at(6, 8, {
      datasource: lib.datasource,
      description: "Huge pages reserved, free and surplus per NUMA node and page size (kB).",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "numa_node" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "numawatch_numa_node_hugepages{%(N)s}" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Huge pages per NUMA node",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["numa_node", "size", "state", "Value"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { Value: 3, numa_node: 0, size: 1, state: 2 },
            renameByName: { Value: "pages" },
          },
        },
      ],
      type: "table",
    }),
    lib.row("Idle states and GPU-NIC paths"),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "The exit latency of the deepest idle state each group of CPUs may enter (not disabled, within its PM QoS limit; 0: polling only), by role: exclusive (held by a pinned container), isolated, housekeeping. cpuidle_deep_state fires when an exclusive or isolated group exceeds the intent's limit (10 µs).",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "s",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "role" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "max by (role, cpus) (numawatch_cpuidle_exit_latency_max_seconds{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Deepest idle state per CPU group",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["role", "cpus", "Value"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { Value: 2, cpus: 1, role: 0 },
            renameByName: { Value: "exit latency" },
          },
        },
      ],
      type: "table",
    }),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "Every GPU and RDMA-capable NIC with the PCIe path between them, in nvidia-smi topo's levels: PIX (one switch), PXB (several switches), PHB (host bridge), NODE (host bridges of one NUMA node), SYS (across sockets). GPUDirect RDMA wants PIX or PXB.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
        sortBy: [
          { desc: false, displayName: "gpu" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: lib.withVendor(c, "max by (instance, gpu, nic, level) (numawatch_gpu_nic_path_info{%(N)s})" % s),
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPU to RDMA NIC PCIe paths",
      transformations: lib.columns(["gpu", "vendor", "nic", "level"]),
      type: "table",
    }),
    lib.row("numawatch"),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Each source numawatch reads: UP when the last evaluation read it.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [
          {
            matcher: { id: "byName", options: "state" },
            properties: [
              {
                id: "mappings",
                value: [
                  {
                    options: {
                      "0": { color: "red", index: 0, text: "DOWN" },
                    },
                    type: "value",
                  },
                  {
                    options: {
                      "1": { color: "green", index: 1, text: "UP" },
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
          { desc: false, displayName: "source" },
        ],
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "numawatch_source_up{%(N)s}" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Sources",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["source", "Value"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { Value: 1, source: 0 },
            renameByName: { Value: "state" },
          },
        },
      ],
      type: "table",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Time each source took in the last evaluation (near 0 when numawatch reused an unchanged result).",
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
          expr: "numawatch_source_duration_seconds{%(N)s}" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{source}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Source read time",
      type: "timeseries",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Evaluations per second and the mean evaluation time.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
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
          expr: "sum(rate(numawatch_evaluations_total{%(N)s}[$__rate_interval]))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "evaluations/s",
          range: true,
          refId: "A",
        },
        {
          datasource: lib.datasource,
          expr: "sum(rate(numawatch_evaluation_duration_seconds_sum{%(N)s}[$__rate_interval])) / sum(rate(numawatch_evaluation_duration_seconds_count{%(N)s}[$__rate_interval]))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "mean seconds",
          range: true,
          refId: "B",
        },
      ],
      title: "Evaluations",
      type: "timeseries",
    }),
    lib.at(24, 4, {
      datasource: lib.datasource,
      description: "The kubelet's effective CPU, Topology and Memory Manager settings as numawatch read them.",
      fieldConfig: {
        defaults: {
          custom: { align: "auto", filterable: true },
          unit: "none",
        },
        overrides: [],
      },
      options: {
        cellHeight: "sm",
        footer: { show: false },
        showHeader: true,
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "numawatch_kubelet_config_info{%(N)s}" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "Kubelet configuration",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: lib.checks.kubeletConfigLabels,
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { [name]: std.find(name, lib.checks.kubeletConfigLabels)[0] for name in lib.checks.kubeletConfigLabels },
            renameByName: {},
          },
        },
      ],
      type: "table",
    }),
  ])
