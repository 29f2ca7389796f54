// The "numawatch / Node" dashboard (dashboards/README.md says what it shows): a list of panels, each made by a
// lib/dashboards.libsonnet helper (lib.stat, lib.timeseries, lib.table, lib.stateTimeline, lib.barGauge: title,
// description, queries) plus what is its own; lib.at(width, height, panel) places it on the grid, lib.row starts
// a row. %(N)s in a query is the numawatch selector with the cluster, job and instance variables, %(C)s the
// cluster matcher of per-cluster recorded series, %(cl)s the cluster label.
local lib = import '../lib/dashboards.libsonnet';

function(c)
  local s = lib.selectors(c);
  local links = lib.links(c);
  lib.dashboard(c, 'numawatch-node.json', "Node", "One node: its findings with remediation, the NUMA map of CPUs, containers and GPUs, and numawatch's health.", lib.standardVariables(c), [
    lib.row("Health"),
    lib.at(4, 4, lib.stat(
      "Findings",
      "Drift findings on this node now, all checks.",
      [
        lib.instantQuery("sum(numawatch_drift_findings{%(N)s})" % s),
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
      "Checks not evaluated",
      "Checks that could not look (a source is down or the intent disables them): blind, not clean.",
      [
        lib.instantQuery("count(numawatch_check_evaluated{%(N)s} == 0) or vector(0)" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null], ["orange", 1]]),
          unit: "short",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "Sources down",
      "numawatch sources that could not read their host files in the last evaluation.",
      [
        lib.instantQuery("count(numawatch_source_up{%(N)s} == 0) or vector(0)" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null], ["orange", 1]]),
          unit: "short",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "Last evaluation",
      "Age of the data: seconds since numawatch last finished an evaluation (every 15 s when healthy).",
      [
        lib.instantQuery("time() - max(numawatch_last_evaluation_timestamp_seconds{%(N)s})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null], ["orange", 60], ["red", 120]]),
          unit: "s",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "Online CPUs",
      "CPUs online on this node.",
      [
        lib.instantQuery("sum(numawatch_numa_node_cpus{%(N)s})" % s),
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
      "Isolated CPUs",
      "Online CPUs in isolcpus: where pinned inference threads should run.",
      [
        lib.instantQuery("count(numawatch_cpu_info{%(N)s, isolated=\"true\", online=\"true\"}) or vector(0)" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null]]),
          unit: "short",
        },
      },
    }),
    lib.row("Findings"),
    lib.at(24, 10, lib.table(
      "Findings with remediation",
      "Every finding on the node now (numawatch_drift_info: its subject and details), with the check's remediation. Click a check for docs/checks.md; `numawatch check` on the node prints the full message.",
      [
        lib.tableQuery("label_replace(numawatch_drift_info{%(N)s}, \"remediation\", \"$1\", \"check\", \"(.*)\")" % s),
      ], sortBy="check",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
        overrides: [
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
          lib.remediationOverride,
        ],
      },
      transformations: lib.columns(["check", "severity", "namespace", "pod", "container", "gpu", "irq", "name", "setting", "governor", "size", "file", "reason", "numa_node", "cpus", "value", "expected", "remediation"]),
    }),
    lib.at(12, 10, lib.stateTimeline(
      "Drift by check",
      "Per check on this node: 0 = OK, 1 = DRIFT (any finding), -1 = NOT EVALUATED (the check could not look: blind, not clean).",
      [
        lib.rangeQuery("clamp_max(max by (check) (numawatch_drift_findings{%(N)s}), 1)\nor (max by (check) (numawatch_check_evaluated{%(N)s}) == 0) - 1" % s, "{{check}}"),
      ],
    )),
    lib.at(12, 10, lib.stateTimeline(
      "Drift by container",
      "Per container: DRIFT while it has any finding; gaps mean no finding.",
      [
        lib.rangeQuery("max by (namespace, pod, container) (numawatch_drift{%(N)s, container!=\"\"})" % s, "{{namespace}}/{{pod}} {{container}}"),
      ],
    )),
    lib.row("NUMA map"),
    lib.at(12, 10, lib.table(
      "CPUs",
      "One row per CPU: socket, core, NUMA node, isolated (isolcpus), reserved (kubelet reserved-cpus), online.",
      [
        lib.tableQuery("numawatch_cpu_info{%(N)s}" % s),
      ], sortBy="cpu",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(["cpu", "socket", "core", "numa_node", "isolated", "reserved", "online"]),
    }),
    lib.at(12, 10, lib.table(
      "Containers per NUMA node",
      "CPUs of each container's effective cpuset per NUMA node; a container on two rows spans two nodes.",
      [
        lib.tableQuery("numawatch_container_cpus{%(N)s}" % s),
      ], sortBy="namespace",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(["namespace", "pod", "container", "numa_node", "qos", "exclusive", "Value"], { Value: "cpus" }),
    }),
    lib.at(12, 6, lib.barGauge(
      "Exclusive CPUs per NUMA node",
      "CPUs the static CPU Manager handed out exclusively, per NUMA node, out of its online CPUs.",
      [
        lib.instantQuery("sum by (numa_node) (numawatch_container_cpus{%(N)s, exclusive=\"true\"}) / on (numa_node) sum by (numa_node) (numawatch_numa_node_cpus{%(N)s})" % s, "node {{numa_node}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          max: 1,
          min: 0,
          thresholds: lib.thresholds([["green", null], ["orange", 0.8], ["red", 0.95]]),
          unit: "percentunit",
        },
      },
    }),
    lib.at(12, 6, lib.table(
      "GPUs and holders",
      "Each GPU: PCI address, NUMA node (empty = unknown), model, and the container the kubelet assigned it to.",
      [
        lib.tableQuery("numawatch_gpu_info{%(N)s}" % s),
      ], sortBy="gpu",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(["gpu", "uuid", "numa_node", "vendor", "model", "namespace", "pod", "container"]),
    }),
    lib.row("NUMA capacity"),
    lib.at(12, 7, lib.table(
      "Exclusive CPUs and devices per NUMA node",
      "Per NUMA node: exclusive CPUs (static CPU Manager; whole cores under full-pcpus-only) and devices (GPUs) the kubelet can hand out, how many are free, and the largest request that node alone could still grant. An empty numa_node is a device registered without topology, usable from any node.",
      [
        lib.tableQuery("label_replace(max by (numa_node) (numawatch_capacity_allocatable_cpus{%(N)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (numa_node, resource) (numawatch_capacity_allocatable_devices{%(N)s})" % s),
        lib.tableQuery("label_replace(max by (numa_node) (numawatch_capacity_free_cpus{%(N)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (numa_node, resource) (numawatch_capacity_free_devices{%(N)s})" % s),
        lib.tableQuery("label_replace(max by (numa_node) (numawatch_capacity_largest_fit_cpus{%(N)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (numa_node, resource) (numawatch_capacity_largest_fit_devices{%(N)s})" % s),
      ], sortBy="numa_node",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: [{ id: "merge", options: {} }] + lib.columns(["numa_node", "resource", "Value #A", "Value #B", "Value #C"], { "Value #A": "allocatable", "Value #B": "free", "Value #C": "largest fit" }),
    }),
    lib.at(12, 7, lib.table(
      "Memory Manager memory and huge pages per NUMA node",
      "Per NUMA node (Memory Manager Static policy): memory and huge pages allocatable, free, and the largest request that node alone could still grant (0 while an earlier multi-node allocation groups it).",
      [
        lib.tableQuery("max by (numa_node, resource) (numawatch_capacity_allocatable_bytes{%(N)s})" % s),
        lib.tableQuery("max by (numa_node, resource) (numawatch_capacity_free_bytes{%(N)s})" % s),
        lib.tableQuery("max by (numa_node, resource) (numawatch_capacity_largest_fit_bytes{%(N)s})" % s),
      ], sortBy="numa_node",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "bytes",
        },
      },
      transformations: [{ id: "merge", options: {} }] + lib.columns(["numa_node", "resource", "Value #A", "Value #B", "Value #C"], { "Value #A": "allocatable", "Value #B": "free", "Value #C": "largest fit" }),
    }),
    lib.at(12, 7, lib.timeseries(
      "Free exclusive CPUs and devices per NUMA node",
      "Exclusive CPUs and devices no container holds, per NUMA node, over time.",
      [
        lib.rangeQuery("label_replace(max by (numa_node) (numawatch_capacity_free_cpus{%(N)s}), \"resource\", \"cpu\", \"\", \"\")\nor max by (numa_node, resource) (numawatch_capacity_free_devices{%(N)s})" % s, "{{resource}} node {{numa_node}}"),
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
    lib.at(12, 7, lib.barGauge(
      "Replicas of each shape this node admits",
      "How many more pods of each named shape (intent file) this node's kubelet would admit now, one after another, under its Topology Manager policy; `numawatch check --fit SHAPE` on the node says why not.",
      [
        lib.instantQuery("max by (shape) (numawatch_capacity_shape_replicas{%(N)s})" % s, "{{shape}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          decimals: 0,
          min: 0,
          thresholds: lib.thresholds([["red", null], ["green", 1]]),
          unit: "short",
        },
      },
    }),
    lib.row("Memory and host"),
    lib.at(12, 8, lib.timeseries(
      "Container memory per NUMA node",
      "Resident memory of each container on each NUMA node (cgroup memory.numa_stat).",
      [
        lib.rangeQuery("sum by (namespace, pod, container, numa_node) (numawatch_container_memory_numa_bytes{%(N)s})" % s, "{{namespace}}/{{pod}} {{container}} node {{numa_node}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "bytes",
        },
      },
    }),
    lib.at(12, 8, lib.table(
      "Remote memory share per container",
      "Share of each container's resident memory on NUMA nodes where it has no CPU: every access to it crosses the inter-socket link.",
      [
        lib.tableQuery("(sum by (namespace, pod, container) (numawatch_container_memory_numa_bytes{%(N)s} unless on (instance, namespace, pod, container, numa_node) numawatch_container_cpus{%(N)s}) or sum by (namespace, pod, container) (numawatch_container_memory_numa_bytes{%(N)s}) * 0) / sum by (namespace, pod, container) (numawatch_container_memory_numa_bytes{%(N)s})" % s),
      ], sortBy="namespace",
    ) + {
      fieldConfig+: {
        defaults+: {
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
      transformations: lib.columns(["namespace", "pod", "container", "Value"], { Value: "remote share" }),
    }),
    lib.at(12, 8, lib.timeseries(
      "Interrupts on watched CPUs per second",
      "Interrupts per second on the isolated, nohz_full and exclusively held CPUs, by kind: device IRQs, the local timer tick and IPIs. Device IRQs here stall pinned threads.",
      [
        lib.rangeQuery("sum by (kind) (rate(numawatch_cpu_interrupts_total{%(N)s}[$__rate_interval]))" % s, "{{kind}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "short",
        },
      },
    }),
    lib.at(6, 8, lib.table(
      "Kernel settings",
      "Kernel knobs numawatch compares with the intent: NUMA balancing, swappiness, THP, isolation parameters.",
      [
        lib.tableQuery("numawatch_kernel_setting_info{%(N)s}" % s),
      ], sortBy="setting",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(["setting", "value"]),
    }),
    lib.at(6, 8, lib.table(
      "Huge pages per NUMA node",
      "Huge pages reserved, free and surplus per NUMA node and page size (kB).",
      [
        lib.tableQuery("numawatch_numa_node_hugepages{%(N)s}" % s),
      ], sortBy="numa_node",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(["numa_node", "size", "state", "Value"], { Value: "pages" }),
    }),
    lib.row("Idle states and GPU-NIC paths"),
    lib.at(12, 7, lib.table(
      "Deepest idle state per CPU group",
      "The exit latency of the deepest idle state each group of CPUs may enter (not disabled, within its PM QoS limit; 0: polling only), by role: exclusive (held by a pinned container), isolated, housekeeping. cpuidle_deep_state fires when an exclusive or isolated group exceeds the intent's limit (10 µs).",
      [
        lib.tableQuery("max by (role, cpus) (numawatch_cpuidle_exit_latency_max_seconds{%(N)s})" % s),
      ], sortBy="role",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "s",
        },
      },
      transformations: lib.columns(["role", "cpus", "Value"], { Value: "exit latency" }),
    }),
    lib.at(12, 7, lib.table(
      "GPU to RDMA NIC PCIe paths",
      "Every GPU and RDMA-capable NIC with the PCIe path between them, in nvidia-smi topo's levels: PIX (one switch), PXB (several switches), PHB (host bridge), NODE (host bridges of one NUMA node), SYS (across sockets). GPUDirect RDMA wants PIX or PXB.",
      [
        lib.tableQuery(lib.withVendor(c, "max by (instance, gpu, nic, level) (numawatch_gpu_nic_path_info{%(N)s})" % s)),
      ], sortBy="gpu",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(["gpu", "vendor", "nic", "level"]),
    }),
    lib.row("numawatch"),
    lib.at(8, 8, lib.table(
      "Sources",
      "Each source numawatch reads: UP when the last evaluation read it.",
      [
        lib.tableQuery("numawatch_source_up{%(N)s}" % s),
      ], sortBy="source",
    ) + {
      fieldConfig+: {
        defaults+: {
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
      transformations: lib.columns(["source", "Value"], { Value: "state" }),
    }),
    lib.at(8, 8, lib.timeseries(
      "Source read time",
      "Time each source took in the last evaluation (near 0 when numawatch reused an unchanged result).",
      [
        lib.rangeQuery("numawatch_source_duration_seconds{%(N)s}" % s, "{{source}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "s",
        },
      },
    }),
    lib.at(8, 8, lib.timeseries(
      "Evaluations",
      "Evaluations per second and the mean evaluation time.",
      [
        lib.rangeQuery("sum(rate(numawatch_evaluations_total{%(N)s}[$__rate_interval]))" % s, "evaluations/s"),
        lib.rangeQuery("sum(rate(numawatch_evaluation_duration_seconds_sum{%(N)s}[$__rate_interval])) / sum(rate(numawatch_evaluation_duration_seconds_count{%(N)s}[$__rate_interval]))" % s, "mean seconds"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "short",
        },
      },
    }),
    lib.at(24, 4, lib.table(
      "Kubelet configuration",
      "The kubelet's effective CPU, Topology and Memory Manager settings as numawatch read them.",
      [
        lib.tableQuery("numawatch_kubelet_config_info{%(N)s}" % s),
      ], sortBy=null,
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(lib.checks.kubeletConfigLabels),
    }),
  ])
