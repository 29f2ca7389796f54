// numawatch's recording rules: fleet roll-ups of the drift gauges (numawatch-recording), host-side GPU bubbles
// (numawatch-gpu), NUMA capacity (numawatch-capacity) and the UUID-keyed series that join dcgm-exporter's
// (numawatch-dcgm, docs/metrics.md "Joining dcgm-exporter"). Every fleet rule first takes the max per
// (cluster, instance, ...) so that a node scraped by two jobs is counted once.
local q = import '../lib/promql.libsonnet';

{
  prometheusRules+:: {
    local c = $._config,
    local cl = c.clusterLabel,
    local m(name, matchers='') = q.metric(c, name, matchers),

    local fleet = [
      {
        // Findings per check per cluster, de-duplicated across repeated scrapes of one target.
        record: 'cluster_check:numawatch_drift_findings:sum',
        expr: 'sum by (%(cl)s, check) (max by (%(cl)s, instance, check) (%(f)s))' % { cl: cl, f: m('numawatch_drift_findings') },
      },
      {
        record: 'cluster_check:numawatch_drift_nodes:count',
        expr: 'count by (%(cl)s, check) (max by (%(cl)s, instance, check) (%(f)s) > 0)' % { cl: cl, f: m('numawatch_drift_findings') },
      },
      {
        // Share of the cluster's nodes that evaluated the check and fail it (0 when none do). A node where the check
        // did not run has no numawatch_drift_findings for it, so it neither fails nor dilutes the share.
        record: 'cluster_check:numawatch_drift_nodes:ratio',
        expr: 'avg by (%(cl)s, check) (max by (%(cl)s, instance, check) (%(f)s) > bool 0)' % { cl: cl, f: m('numawatch_drift_findings') },
      },
      {
        record: 'cluster:numawatch_nodes:count',
        expr: 'count by (%(cl)s) (max by (%(cl)s, instance) (%(b)s))' % { cl: cl, b: m('numawatch_build_info') },
      },
      {
        // A GPU node is one whose numawatch sees a GPU; the node drifts when any check has a finding.
        record: 'cluster:numawatch_gpu_nodes_drifting:ratio',
        expr: |||
          avg by (%(cl)s) (
            (max by (%(cl)s, instance) (%(f)s) > bool 0)
            and on (%(cl)s, instance) max by (%(cl)s, instance) (%(g)s)
          )
        ||| % { cl: cl, f: m('numawatch_drift_findings'), g: m('numawatch_gpu_info') },
      },
    ],

    // Host-side GPU bubbles (docs/gpu.md "Correlating them in Prometheus"): the coarse idle-while-held share of each
    // GPU and the run-queue wait of the container holding it, recorded over 5 minutes under the same holder labels
    // (cluster, node, instance, namespace, pod, container) so a fleet view lists one next to the other and
    //   instance_gpu:numawatch_gpu_held_idle:ratio_rate5m > 0.1
    //   and on (cluster, node, instance, namespace, pod, container)
    //   instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m > 0.005
    // finds the suspects. `max by` folds duplicate scrapes of one target, as the fleet rules do.
    local gpu = q.gpu(c),
    local holder = q.container(c),
    local gpus = [
      {
        // One series per GPU and container holding it (holders from numawatch_gpu_processes; a time-sliced GPU has
        // one per sharing container). A GPU with no sampled time (lost, NVML down) has no series rather than NaN;
        // processes outside any container are left out: they have no host-side signals to put next to it.
        record: 'instance_gpu:numawatch_gpu_held_idle:ratio_rate5m',
        expr: |||
          (
              max by (%(gpu)s) (rate(%(idle)s[5m]))
            / (max by (%(gpu)s) (rate(%(sampled)s[5m])) > 0)
          )
          * on (%(gpu)s) group_right ()
            group by (%(gpu)s, namespace, pod, container) (%(processes)s)
        ||| % {
          gpu: gpu,
          idle: m('numawatch_gpu_held_idle_seconds_total'),
          sampled: m('numawatch_gpu_sampled_seconds_total'),
          processes: m('numawatch_gpu_processes', 'container!=""'),
        },
      },
      {
        // Seconds per second the holder's threads, summed, waited for a CPU (0.005 = 0.5 % of the time). pod_uid is
        // summed away: a pod re-created under the same name is the same holder for a fleet view.
        record: 'instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m',
        expr: |||
          sum by (%(holder)s) (
            max by (%(holder)s, pod_uid) (rate(%(delay)s[5m]))
          )
        ||| % { holder: holder, delay: m('numawatch_gpu_holder_run_delay_seconds_total') },
      },
      {
        // Share of the cluster's sampled GPU time that GPUs sat idle while held: the fleet's headline number.
        record: 'cluster:numawatch_gpu_held_idle:ratio_rate5m',
        expr: |||
          sum by (%(cl)s) (max by (%(cl)s, instance, gpu, uuid) (rate(%(idle)s[5m])))
          / (sum by (%(cl)s) (max by (%(cl)s, instance, gpu, uuid) (rate(%(sampled)s[5m]))) > 0)
        ||| % { cl: cl, idle: m('numawatch_gpu_held_idle_seconds_total'), sampled: m('numawatch_gpu_sampled_seconds_total') },
      },
    ],

    // NUMA capacity (docs/capacity.md).
    local capacity = [
      {
        // How many more replicas of each named pod shape fit in the cluster right now: the sum over nodes of what
        // each node's kubelet would still admit under its own Topology Manager policy and scope.
        record: 'cluster_shape:numawatch_capacity_shape_replicas:sum',
        expr: 'sum by (%(cl)s, shape) (max by (%(cl)s, instance, shape) (%(r)s))' % { cl: cl, r: m('numawatch_capacity_shape_replicas') },
      },
      {
        // Nodes that would admit at least one more replica of the shape.
        record: 'cluster_shape:numawatch_capacity_shape_nodes:count',
        expr: 'count by (%(cl)s, shape) (max by (%(cl)s, instance, shape) (%(r)s) > 0)' % { cl: cl, r: m('numawatch_capacity_shape_replicas') },
      },
    ] + [
      // Free exclusive CPUs, Memory Manager memory and huge pages, and devices, summed over every NUMA node; and the
      // largest request of each that one NUMA node somewhere in the cluster could still take alone. One rule per
      // unit, as the families are.
      {
        record: '%s:numawatch_capacity_%s_%s:%s' % [unit.prefix, quantity.name, unit.name, quantity.aggregation],
        expr: '%(agg)s by (%(by)s) (\n  max by (%(cl)s, instance, numa_node%(resource)s) (%(metric)s)\n)' % {
          agg: quantity.aggregation,
          by: std.join(', ', [cl] + unit.by),
          cl: cl,
          resource: std.join('', [', ' + label for label in unit.by]),
          metric: m('numawatch_capacity_%s_%s' % [quantity.name, unit.name]),
        },
      }
      for quantity in [{ name: 'free', aggregation: 'sum' }, { name: 'largest_fit', aggregation: 'max' }]
      for unit in [
        { name: 'cpus', prefix: 'cluster', by: [] },
        { name: 'bytes', prefix: 'cluster_resource', by: ['resource'] },
        { name: 'devices', prefix: 'cluster_resource', by: ['resource'] },
      ]
    ],

    // dcgm-exporter names a GPU by `UUID` (and `gpu`, its index, `pci_bus_id` as 00000000:18:00.0 in upper case);
    // numawatch by `uuid` and `gpu`, the PCI address as sysfs writes it (0000:18:00.0). PromQL cannot change case,
    // so the UUID is the join key: these rules carry both spellings, and a join is one `on (UUID)` from
    // dcgm-exporter's side or `on (uuid)` from numawatch's. GPUs whose UUID numawatch does not know (no NVML, no
    // device plugin UUID) have no series here.
    local dcgm = [
      {
        // One series per GPU (value 1): its NUMA node and PCI address, keyed by UUID.
        record: 'uuid:numawatch_gpu_numa_node:info',
        expr: |||
          max by (%(cl)s, node, UUID, uuid, pci_address, numa_node) (
            label_replace(
              label_replace(%(info)s, "UUID", "$1", "uuid", "(.+)"),
              "pci_address", "$1", "gpu", "(.+)"
            )
          )
        ||| % { cl: cl, info: m('numawatch_gpu_info', 'uuid!=""') },
      },
      {
        // Coarse idle-while-held share of each GPU over 5 minutes, keyed by UUID: next to dcgm-exporter's
        // DCGM_FI_PROF_GR_ENGINE_ACTIVE it tells a GPU starved by its host from one given too little work.
        record: 'uuid:numawatch_gpu_held_idle:ratio_rate5m',
        expr: |||
          label_replace(
              max by (%(cl)s, node, uuid) (rate(%(idle)s[5m]))
            / (max by (%(cl)s, node, uuid) (rate(%(sampled)s[5m])) > 0),
            "UUID", "$1", "uuid", "(.+)"
          )
        ||| % {
          cl: cl,
          idle: m('numawatch_gpu_held_idle_seconds_total', 'uuid!=""'),
          sampled: m('numawatch_gpu_sampled_seconds_total', 'uuid!=""'),
        },
      },
    ],

    groups+: [
      { name: 'numawatch-recording', rules: fleet },
      { name: 'numawatch-gpu', rules: gpus },
      { name: 'numawatch-dcgm', rules: dcgm },
      { name: 'numawatch-capacity', rules: capacity },
    ],
  },
}
