// The "numawatch / GPUs" dashboard (dashboards/README.md says what it shows): a list of panels, each made by a
// lib/dashboards.libsonnet helper (lib.stat, lib.timeseries, lib.table, lib.stateTimeline, lib.barGauge: title,
// description, queries) plus what is its own; lib.at(width, height, panel) places it on the grid, lib.row starts
// a row. %(N)s in a query is the numawatch selector with the cluster, job and instance variables, %(C)s the
// cluster matcher of per-cluster recorded series, %(cl)s the cluster label.
local lib = import '../lib/dashboards.libsonnet';

function(c)
  local s = lib.selectors(c);
  local links = lib.links(c);
  lib.dashboard(c, 'numawatch-gpu.json', "GPUs", "GPUs, their NUMA nodes and holders; each GPU's busy and coarse idle-while-held time next to its holder's run-queue wait, preemptions, migrations and interrupts; whether the holders' CPUs are local to their GPUs.", lib.standardVariables(c), [
    lib.row("GPUs"),
    lib.at(4, 4, lib.stat(
      "GPUs",
      "GPUs and accelerators numawatch sees on the selected nodes, by vendor (nvidia, amd, habana: numawatch_gpu_info's vendor label).",
      [
        lib.instantQuery("count by (vendor) (numawatch_gpu_info{%(N)s}) or on () vector(0)" % s, "{{vendor}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null]]),
          unit: "short",
        },
      },
      options+: { textMode: "value_and_name" },  // one count per vendor, named
    }),
    lib.at(4, 4, lib.stat(
      "GPUs held",
      "GPUs the kubelet's device checkpoint assigns to a container.",
      [
        lib.instantQuery("count(numawatch_gpu_info{%(N)s, container!=\"\"}) or vector(0)" % s),
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
      "GPUs without NUMA node",
      "GPUs whose NUMA node the kernel reports as -1: the Topology Manager cannot align them.",
      [
        lib.instantQuery("count(numawatch_gpu_info{%(N)s, numa_node=\"\"}) or vector(0)" % s),
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
      "GPU holders not NUMA-local",
      "Containers holding a GPU whose CPUs are not all on a NUMA node of their GPUs.",
      [
        lib.instantQuery("count((sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container, numa_node) numawatch_gpu_info{%(N)s})) < (sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container) numawatch_gpu_info{%(N)s}))) or vector(0)" % s),
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
      "NVML",
      "Whether numawatch could use NVML on every selected node (numawatch_source_up{source=\"nvml\"}): DOWN on a node without the NVIDIA driver library, with a hung driver call, or when run with --no-nvml; `numawatch check` says why. The busy, idle and holder panels below need it.",
      [
        lib.instantQuery("min(numawatch_source_up{%(N)s, source=\"nvml\"})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          mappings: [
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
          thresholds: lib.thresholds([["red", null], ["green", 1]]),
          unit: "none",
        },
      },
    }),
    lib.at(4, 4, lib.stat(
      "GPUs lost (NVML)",
      "GPUs NVML reports lost or needing a reset (numawatch_gpu_nvml_up 0): numawatch stops calling them until a PCI hotplug event brings them back.",
      [
        lib.instantQuery("count(numawatch_gpu_nvml_up{%(N)s} == 0) or vector(0)" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          thresholds: lib.thresholds([["green", null], ["red", 1]]),
          unit: "short",
        },
      },
    }),
    lib.row("Busy and idle while held, next to the holder's host delays"),
    lib.at(8, 8, lib.timeseries(
      "GPU busy",
      "Share of time each GPU was busy by NVML utilisation: at least one kernel ran during a sample period (1/6-1 s), so sub-millisecond gaps between kernels count as busy. Integrated from every NVML sample between evaluations (numawatch_gpu_busy_seconds_total over numawatch_gpu_sampled_seconds_total).",
      [
        lib.rangeQuery(lib.withVendor(c, "max by (instance, gpu, uuid) (rate(numawatch_gpu_busy_seconds_total{%(N)s}[$__rate_interval]))\n/ (max by (instance, gpu, uuid) (rate(numawatch_gpu_sampled_seconds_total{%(N)s}[$__rate_interval])) > 0)" % s), "{{instance}} {{gpu}} {{vendor}}"),
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
    lib.at(8, 8, lib.timeseries(
      "GPU idle while held",
      "Coarse idle while held: share of each GPU's sampled time it sat idle while a compute process of the named container held it. Catches stalls on the order of NVML's sample period or longer (a scheduler stall, a GC pause, a preempted launch thread), never launch-gap bubbles; idle with no requests queued is not a bubble. Compare with the holder's run-queue wait on the right.",
      [
        lib.rangeQuery(lib.withVendor(c, "(\n    max by (instance, gpu, uuid) (rate(numawatch_gpu_held_idle_seconds_total{%(N)s}[$__rate_interval]))\n  / (max by (instance, gpu, uuid) (rate(numawatch_gpu_sampled_seconds_total{%(N)s}[$__rate_interval])) > 0)\n)\n* on (instance, gpu, uuid) group_right () group by (instance, gpu, uuid, namespace, pod, container) (numawatch_gpu_processes{%(N)s, container!=\"\"})" % s), "{{instance}} {{gpu}} {{vendor}} held by {{namespace}}/{{pod}} {{container}}"),
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
    lib.at(8, 8, lib.timeseries(
      "Holder run-queue wait",
      "Seconds per second the threads of each GPU-holding container, summed, were runnable but waited for a CPU (task schedstat run delay): 5 % means 0.05 s of waiting per second, and it can exceed 100 % with many threads. docs/gpu.md starts to suspect a host-side bubble at 0.5 % next to 10 % idle while held.",
      [
        lib.rangeQuery("sum by (instance, namespace, pod, container) (rate(numawatch_gpu_holder_run_delay_seconds_total{%(N)s}[$__rate_interval]))" % s, "{{instance}} {{namespace}}/{{pod}} {{container}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          thresholds: lib.thresholds([["green", null], ["orange", 0.005], ["red", 0.05]]),
          unit: "percentunit",
        },
      },
    }),
    lib.at(8, 8, lib.timeseries(
      "Holder involuntary context switches",
      "Preemptions per second of the threads of each GPU-holding container: another task took their CPU. A pinned holder on isolated CPUs should see almost none.",
      [
        lib.rangeQuery("sum by (instance, namespace, pod, container) (rate(numawatch_gpu_holder_involuntary_switches_total{%(N)s}[$__rate_interval]))" % s, "{{instance}} {{namespace}}/{{pod}} {{container}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "cps",
        },
      },
    }),
    lib.at(8, 8, lib.timeseries(
      "Holder CPU migrations",
      "Moves between CPUs per second of the threads of each GPU-holding container (se.nr_migrations). No data where the kernel lacks CONFIG_SCHED_DEBUG.",
      [
        lib.rangeQuery("sum by (instance, namespace, pod, container) (rate(numawatch_gpu_holder_migrations_total{%(N)s}[$__rate_interval]))" % s, "{{instance}} {{namespace}}/{{pod}} {{container}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "cps",
        },
      },
    }),
    lib.at(8, 8, lib.timeseries(
      "Interrupts on holder CPUs",
      "Interrupts per second on the CPUs of each GPU-holding container's cpuset, by kind (device IRQs, the local timer tick, IPIs). Only watched CPUs count (isolated, nohz_full or exclusive): a holder on the shared pool shows few or none.",
      [
        lib.rangeQuery("sum by (instance, namespace, pod, container, kind) (rate(numawatch_gpu_holder_interrupts_total{%(N)s}[$__rate_interval]))" % s, "{{instance}} {{namespace}}/{{pod}} {{container}} {{kind}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "cps",
        },
      },
    }),
    lib.row("Inventory and holders"),
    lib.at(24, 8, lib.table(
      "GPU inventory",
      "Every GPU: node, PCI address, NUMA node (empty = unknown), model, the container the kubelet's device checkpoint assigns it to, and whether NVML answers for it (empty when NVML is not used on the node).",
      [
        lib.tableQuery("max by (instance, gpu, uuid, numa_node, vendor, model, namespace, pod, container) (numawatch_gpu_info{%(N)s})" % s),
        lib.tableQuery("max by (instance, gpu, uuid, index) (numawatch_gpu_nvml_up{%(N)s})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
        overrides: [
          lib.linkColumn("node", "Node dashboard", links.node),
          {
            matcher: { id: "byName", options: "NVML" },
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
      transformations: [{ id: "merge", options: {} }] + lib.columns(
        ["instance", "gpu", "uuid", "numa_node", "vendor", "model", "namespace", "pod", "container", "index", "Value #B"],
        { "Value #B": "NVML", index: "NVML index", instance: "node" },
      ),
    }),
    lib.at(12, 8, lib.table(
      "Compute processes per GPU",
      "The containers whose processes NVML lists on each GPU (empty holder: processes outside any container), how many processes, and their SM utilisation since the previous evaluation. Differs from the inventory's assignment when a GPU is used outside the device plugin (gpu_holder_mismatch).",
      [
        lib.tableQuery(lib.withVendor(c, "max by (instance, gpu, uuid, namespace, pod, container) (numawatch_gpu_processes{%(N)s})" % s)),
        lib.tableQuery(lib.withVendor(c, "max by (instance, gpu, uuid, namespace, pod, container) (numawatch_gpu_process_sm_utilization_ratio{%(N)s})" % s)),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
        overrides: [
          lib.linkColumn("node", "Node dashboard", links.node),
          {
            matcher: { id: "byName", options: "SM utilisation" },
            properties: [
              { id: "unit", value: "percentunit" },
            ],
          },
        ],
      },
      transformations: [{ id: "merge", options: {} }] + lib.columns(
        ["instance", "gpu", "vendor", "namespace", "pod", "container", "Value #A", "Value #B"],
        { "Value #A": "processes", "Value #B": "SM utilisation", instance: "node" },
      ),
    }),
    lib.at(12, 8, lib.table(
      "GPU-local CPU share per holder",
      "For each container holding a GPU: the share of its CPUs on the NUMA node of one of its GPUs (1 = aligned). Click the node for its dashboard.",
      [
        lib.tableQuery("(sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container, numa_node) numawatch_gpu_info{%(N)s}) or sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container) numawatch_gpu_info{%(N)s}) * 0) / sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container) numawatch_gpu_info{%(N)s})" % s),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
        overrides: [
          lib.linkColumn("node", "Node dashboard", links.node),
          {
            matcher: { id: "byName", options: "local share" },
            properties: [
              { id: "unit", value: "percentunit" },
              {
                id: "thresholds",
                value: {
                  mode: "absolute",
                  steps: [
                    { color: "red", value: null },
                    { color: "green", value: 1 },
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
      transformations: lib.columns(["instance", "namespace", "pod", "container", "Value"], { Value: "local share", instance: "node" }),
    }),
    lib.at(24, 6, lib.timeseries(
      "Time numawatch spends in NVML",
      "Seconds per second numawatch's NVML calls took, per node: NVML calls serialise in the driver and can stutter GPU work, so this should stay far below 1 %.",
      [
        lib.rangeQuery("sum by (instance) (rate(numawatch_nvml_call_seconds_sum{%(N)s}[$__rate_interval]))" % s, "{{instance}}"),
      ],
    ) + {
      fieldConfig+: {
        defaults+: {
          min: 0,
          unit: "percentunit",
        },
      },
    }),
    lib.row("GPU interconnect"),
    lib.at(12, 7, lib.table(
      "NVLink links per GPU",
      "Active NVLink links of each GPU as NVML enumerated them, and whether they lead to NVSwitches; 0 on a PCIe-only GPU. container_gpus_not_peered fires for a container holding GPUs that are not NVLink peers.",
      [
        lib.tableQuery(lib.withVendor(c, "max by (instance, gpu, uuid, switch) (numawatch_gpu_nvlink_links{%(N)s})" % s)),
      ], sortBy="gpu",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(["instance", "gpu", "uuid", "vendor", "switch", "Value"], { Value: "active links" }),
    }),
    lib.at(12, 7, lib.table(
      "Nearest RDMA NIC of each GPU",
      "Each GPU's PCIe paths to the RDMA NICs (nvidia-smi topo levels, PIX best, SYS worst); gpu_nic_path fires when a GPU's best path is worse than PXB where other GPUs do better, or no NIC is on its socket.",
      [
        lib.tableQuery(lib.withVendor(c, "max by (instance, gpu, nic, level) (numawatch_gpu_nic_path_info{%(N)s})" % s)),
      ], sortBy="gpu",
    ) + {
      fieldConfig+: {
        defaults+: {
          unit: "none",
        },
      },
      transformations: lib.columns(["instance", "gpu", "vendor", "nic", "level"]),
    }),
    lib.row("GPU-related drift"),
    lib.at(24, 8, lib.stateTimeline(
      "GPU placement drift by container",
      "DRIFT while a GPU holder's CPUs are off its GPU's NUMA node or span nodes, a GPU has no NUMA node, or a GPU is used by a container it was not assigned to.",
      [
        lib.rangeQuery("max by (instance, namespace, pod, container, gpu, check) (numawatch_drift{%(N)s, check=~\"container_gpu_numa_mismatch|container_numa_split|gpu_numa_unknown|gpu_process_remote|gpu_holder_mismatch|container_gpus_not_peered|gpu_nic_path\"})" % s, "{{instance}} {{namespace}}/{{pod}} {{container}}{{gpu}} {{check}}"),
      ],
    )),
    lib.at(24, 7, lib.timeseries(
      "Pinning drift of GPU holders",
      "Findings on containers that hold a GPU, per check: each one delays the host threads feeding a GPU.",
      [
        lib.rangeQuery("count by (check) (numawatch_drift{%(N)s, container!=\"\"} and on (instance, namespace, pod, container) numawatch_gpu_info{%(N)s, container!=\"\"})" % s, "{{check}}"),
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
  ])
