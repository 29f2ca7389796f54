// The "numawatch / GPUs" dashboard (dashboards/README.md says what it shows). Each lib.at(width, height, panel)
// places a panel on the grid, lib.row starts a row; %(N)s in a query is the numawatch selector with the cluster, job
// and instance variables, %(C)s the cluster matcher of per-cluster recorded series, %(cl)s the cluster label.
local lib = import '../lib/dashboards.libsonnet';

function(c)
  local s = lib.selectors(c);
  local links = lib.links(c);
  lib.dashboard(c, 'numawatch-gpu.json', "GPUs", "GPUs, their NUMA nodes and holders; each GPU's busy and coarse idle-while-held time next to its holder's run-queue wait, preemptions, migrations and interrupts; whether the holders' CPUs are local to their GPUs.", lib.standardVariables(c), [
    lib.row("GPUs"),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "GPUs and accelerators numawatch sees on the selected nodes, by vendor (nvidia, amd, habana: numawatch_gpu_info's vendor label).",
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
        textMode: "value_and_name",
      },
      targets: [
        {
          datasource: lib.datasource,
          expr: "count by (vendor) (numawatch_gpu_info{%(N)s}) or on () vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "{{vendor}}",
          range: false,
          refId: "A",
        },
      ],
      title: "GPUs",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "GPUs the kubelet's device checkpoint assigns to a container.",
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
          expr: "count(numawatch_gpu_info{%(N)s, container!=\"\"}) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPUs held",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "GPUs whose NUMA node the kernel reports as -1: the Topology Manager cannot align them.",
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
          expr: "count(numawatch_gpu_info{%(N)s, numa_node=\"\"}) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPUs without NUMA node",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Containers holding a GPU whose CPUs are not all on a NUMA node of their GPUs.",
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
          expr: "count((sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container, numa_node) numawatch_gpu_info{%(N)s})) < (sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container) numawatch_gpu_info{%(N)s}))) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPU holders not NUMA-local",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "Whether numawatch could use NVML on every selected node (numawatch_source_up{source=\"nvml\"}): DOWN on a node without the NVIDIA driver library, with a hung driver call, or when run with --no-nvml; `numawatch check` says why. The busy, idle and holder panels below need it.",
      fieldConfig: {
        defaults: {
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
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "red", value: null },
              { color: "green", value: 1 },
            ],
          },
          unit: "none",
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
          expr: "min(numawatch_source_up{%(N)s, source=\"nvml\"})" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "NVML",
      type: "stat",
    }),
    lib.at(4, 4, {
      datasource: lib.datasource,
      description: "GPUs NVML reports lost or needing a reset (numawatch_gpu_nvml_up 0): numawatch stops calling them until a PCI hotplug event brings them back.",
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
          expr: "count(numawatch_gpu_nvml_up{%(N)s} == 0) or vector(0)" % s,
          format: "time_series",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPUs lost (NVML)",
      type: "stat",
    }),
    lib.row("Busy and idle while held, next to the holder's host delays"),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Share of time each GPU was busy by NVML utilisation: at least one kernel ran during a sample period (1/6-1 s), so sub-millisecond gaps between kernels count as busy. Integrated from every NVML sample between evaluations (numawatch_gpu_busy_seconds_total over numawatch_gpu_sampled_seconds_total).",
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
          expr: lib.withVendor(c, "max by (instance, gpu, uuid) (rate(numawatch_gpu_busy_seconds_total{%(N)s}[$__rate_interval]))\n/ (max by (instance, gpu, uuid) (rate(numawatch_gpu_sampled_seconds_total{%(N)s}[$__rate_interval])) > 0)" % s),
          format: "time_series",
          instant: false,
          legendFormat: "{{instance}} {{gpu}} {{vendor}}",
          range: true,
          refId: "A",
        },
      ],
      title: "GPU busy",
      type: "timeseries",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Coarse idle while held: share of each GPU's sampled time it sat idle while a compute process of the named container held it. Catches stalls on the order of NVML's sample period or longer (a scheduler stall, a GC pause, a preempted launch thread), never launch-gap bubbles; idle with no requests queued is not a bubble. Compare with the holder's run-queue wait on the right.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
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
          expr: lib.withVendor(c, "(\n    max by (instance, gpu, uuid) (rate(numawatch_gpu_held_idle_seconds_total{%(N)s}[$__rate_interval]))\n  / (max by (instance, gpu, uuid) (rate(numawatch_gpu_sampled_seconds_total{%(N)s}[$__rate_interval])) > 0)\n)\n* on (instance, gpu, uuid) group_right () group by (instance, gpu, uuid, namespace, pod, container) (numawatch_gpu_processes{%(N)s, container!=\"\"})" % s),
          format: "time_series",
          instant: false,
          legendFormat: "{{instance}} {{gpu}} {{vendor}} held by {{namespace}}/{{pod}} {{container}}",
          range: true,
          refId: "A",
        },
      ],
      title: "GPU idle while held",
      type: "timeseries",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Seconds per second the threads of each GPU-holding container, summed, were runnable but waited for a CPU (task schedstat run delay): 5 % means 0.05 s of waiting per second, and it can exceed 100 % with many threads. docs/gpu.md starts to suspect a host-side bubble at 0.5 % next to 10 % idle while held.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          min: 0,
          thresholds: {
            mode: "absolute",
            steps: [
              { color: "green", value: null },
              { color: "orange", value: 0.005 },
              { color: "red", value: 0.05 },
            ],
          },
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
          expr: "sum by (instance, namespace, pod, container) (rate(numawatch_gpu_holder_run_delay_seconds_total{%(N)s}[$__rate_interval]))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{instance}} {{namespace}}/{{pod}} {{container}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Holder run-queue wait",
      type: "timeseries",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Preemptions per second of the threads of each GPU-holding container: another task took their CPU. A pinned holder on isolated CPUs should see almost none.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          min: 0,
          unit: "cps",
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
          expr: "sum by (instance, namespace, pod, container) (rate(numawatch_gpu_holder_involuntary_switches_total{%(N)s}[$__rate_interval]))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{instance}} {{namespace}}/{{pod}} {{container}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Holder involuntary context switches",
      type: "timeseries",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Moves between CPUs per second of the threads of each GPU-holding container (se.nr_migrations). No data where the kernel lacks CONFIG_SCHED_DEBUG.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          min: 0,
          unit: "cps",
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
          expr: "sum by (instance, namespace, pod, container) (rate(numawatch_gpu_holder_migrations_total{%(N)s}[$__rate_interval]))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{instance}} {{namespace}}/{{pod}} {{container}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Holder CPU migrations",
      type: "timeseries",
    }),
    lib.at(8, 8, {
      datasource: lib.datasource,
      description: "Interrupts per second on the CPUs of each GPU-holding container's cpuset, by kind (device IRQs, the local timer tick, IPIs). Only watched CPUs count (isolated, nohz_full or exclusive): a holder on the shared pool shows few or none.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
          min: 0,
          unit: "cps",
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
          expr: "sum by (instance, namespace, pod, container, kind) (rate(numawatch_gpu_holder_interrupts_total{%(N)s}[$__rate_interval]))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{instance}} {{namespace}}/{{pod}} {{container}} {{kind}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Interrupts on holder CPUs",
      type: "timeseries",
    }),
    lib.row("Inventory and holders"),
    lib.at(24, 8, {
      datasource: lib.datasource,
      description: "Every GPU: node, PCI address, NUMA node (empty = unknown), model, the container the kubelet's device checkpoint assigns it to, and whether NVML answers for it (empty when NVML is not used on the node).",
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
          expr: "max by (instance, gpu, uuid, numa_node, vendor, model, namespace, pod, container) (numawatch_gpu_info{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
        {
          datasource: lib.datasource,
          expr: "max by (instance, gpu, uuid, index) (numawatch_gpu_nvml_up{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "B",
        },
      ],
      title: "GPU inventory",
      transformations: [{ id: "merge", options: {} }] + lib.columns(
        ["instance", "gpu", "uuid", "numa_node", "vendor", "model", "namespace", "pod", "container", "index", "Value #B"],
        { "Value #B": "NVML", index: "NVML index", instance: "node" },
      ),
      type: "table",
    }),
    lib.at(12, 8, {
      datasource: lib.datasource,
      description: "The containers whose processes NVML lists on each GPU (empty holder: processes outside any container), how many processes, and their SM utilisation since the previous evaluation. Differs from the inventory's assignment when a GPU is used outside the device plugin (gpu_holder_mismatch).",
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
            matcher: { id: "byName", options: "SM utilisation" },
            properties: [
              { id: "unit", value: "percentunit" },
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
          expr: lib.withVendor(c, "max by (instance, gpu, uuid, namespace, pod, container) (numawatch_gpu_processes{%(N)s})" % s),
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
        {
          datasource: lib.datasource,
          expr: lib.withVendor(c, "max by (instance, gpu, uuid, namespace, pod, container) (numawatch_gpu_process_sm_utilization_ratio{%(N)s})" % s),
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "B",
        },
      ],
      title: "Compute processes per GPU",
      transformations: [{ id: "merge", options: {} }] + lib.columns(
        ["instance", "gpu", "vendor", "namespace", "pod", "container", "Value #A", "Value #B"],
        { "Value #A": "processes", "Value #B": "SM utilisation", instance: "node" },
      ),
      type: "table",
    }),
    lib.at(12, 8, {
      datasource: lib.datasource,
      description: "For each container holding a GPU: the share of its CPUs on the NUMA node of one of its GPUs (1 = aligned). Click the node for its dashboard.",
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
          expr: "(sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container, numa_node) numawatch_gpu_info{%(N)s}) or sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container) numawatch_gpu_info{%(N)s}) * 0) / sum by (instance, namespace, pod, container) (numawatch_container_cpus{%(N)s} and on (instance, namespace, pod, container) numawatch_gpu_info{%(N)s})" % s,
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "GPU-local CPU share per holder",
      transformations: [
        {
          id: "filterFieldsByName",
          options: {
            include: {
              names: ["instance", "namespace", "pod", "container", "Value"],
            },
          },
        },
        {
          id: "organize",
          options: {
            excludeByName: {},
            indexByName: { Value: 4, container: 3, instance: 0, namespace: 1, pod: 2 },
            renameByName: { Value: "local share", instance: "node" },
          },
        },
      ],
      type: "table",
    }),
    lib.at(24, 6, {
      datasource: lib.datasource,
      description: "Seconds per second numawatch's NVML calls took, per node: NVML calls serialise in the driver and can stutter GPU work, so this should stay far below 1 %.",
      fieldConfig: {
        defaults: {
          custom: { drawStyle: "line", fillOpacity: 10, lineWidth: 1, showPoints: "never", spanNulls: false },
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
          expr: "sum by (instance) (rate(numawatch_nvml_call_seconds_sum{%(N)s}[$__rate_interval]))" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{instance}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Time numawatch spends in NVML",
      type: "timeseries",
    }),
    lib.row("GPU interconnect"),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "Active NVLink links of each GPU as NVML enumerated them, and whether they lead to NVSwitches; 0 on a PCIe-only GPU. container_gpus_not_peered fires for a container holding GPUs that are not NVLink peers.",
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
          expr: lib.withVendor(c, "max by (instance, gpu, uuid, switch) (numawatch_gpu_nvlink_links{%(N)s})" % s),
          format: "table",
          instant: true,
          legendFormat: "__auto",
          range: false,
          refId: "A",
        },
      ],
      title: "NVLink links per GPU",
      transformations: lib.columns(["instance", "gpu", "uuid", "vendor", "switch", "Value"], { Value: "active links" }),
      type: "table",
    }),
    lib.at(12, 7, {
      datasource: lib.datasource,
      description: "Each GPU's PCIe paths to the RDMA NICs (nvidia-smi topo levels, PIX best, SYS worst); gpu_nic_path fires when a GPU's best path is worse than PXB where other GPUs do better, or no NIC is on its socket.",
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
      title: "Nearest RDMA NIC of each GPU",
      transformations: lib.columns(["instance", "gpu", "vendor", "nic", "level"]),
      type: "table",
    }),
    lib.row("GPU-related drift"),
    lib.at(24, 8, {
      datasource: lib.datasource,
      description: "DRIFT while a GPU holder's CPUs are off its GPU's NUMA node or span nodes, a GPU has no NUMA node, or a GPU is used by a container it was not assigned to.",
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
          expr: "max by (instance, namespace, pod, container, gpu, check) (numawatch_drift{%(N)s, check=~\"container_gpu_numa_mismatch|container_numa_split|gpu_numa_unknown|gpu_process_remote|gpu_holder_mismatch|container_gpus_not_peered|gpu_nic_path\"})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{instance}} {{namespace}}/{{pod}} {{container}}{{gpu}} {{check}}",
          range: true,
          refId: "A",
        },
      ],
      title: "GPU placement drift by container",
      type: "state-timeline",
    }),
    lib.at(24, 7, {
      datasource: lib.datasource,
      description: "Findings on containers that hold a GPU, per check: each one delays the host threads feeding a GPU.",
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
          expr: "count by (check) (numawatch_drift{%(N)s, container!=\"\"} and on (instance, namespace, pod, container) numawatch_gpu_info{%(N)s, container!=\"\"})" % s,
          format: "time_series",
          instant: false,
          legendFormat: "{{check}}",
          range: true,
          refId: "A",
        },
      ],
      title: "Pinning drift of GPU holders",
      type: "timeseries",
    }),
  ])
