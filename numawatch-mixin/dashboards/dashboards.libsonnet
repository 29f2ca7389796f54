// The dashboards, keyed by file name as kube-prometheus' grafanaDashboards are.
{
  grafanaDashboards+:: {
    'numawatch-fleet.json': (import 'fleet.libsonnet')($._config),
    'numawatch-node.json': (import 'node.libsonnet')($._config),
    'numawatch-gpu.json': (import 'gpu.libsonnet')($._config),
  },
}
