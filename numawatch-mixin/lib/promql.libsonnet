// PromQL building blocks shared by the alerts, the recording rules and the dashboards. Every function takes the
// mixin's _config, so a selector or a cluster label set there reaches every expression.
{
  // A numawatch series selector: the configured numawatchSelector first, then the matchers given (a string).
  metric(c, name, matchers=''):: '%s{%s%s}' % [name, c.numawatchSelector, if matchers == '' then '' else ', ' + matchers],

  // The labels of one numawatch target in a fleet (`node`/the cluster label exist when relabelled).
  node(c):: '%s, node, instance' % c.clusterLabel,
  container(c):: self.node(c) + ', namespace, pod, container',
  gpu(c):: self.node(c) + ', gpu, uuid',

  // Nodes being drained or deleted are left out of every per-node alert (kube-state-metrics' series).
  excludeNodes(c)::
    'unless on (%(cl)s, node) (kube_node_spec_unschedulable == 1)\n' % { cl: c.clusterLabel }
    + 'unless on (%(cl)s, node) kube_node_spec_taint{key=~"%(taints)s"}' % { cl: c.clusterLabel, taints: c.ignoredTaints },

  // numawatch_drift of one check (`="x"`) or of several (`=~"x|y"`).
  drift(c, checks, extra='')::
    local check = if std.length(checks) == 1 then 'check="%s"' % checks[0] else 'check=~"%s"' % std.join('|', checks);
    self.metric(c, 'numawatch_drift', check + (if extra == '' then '' else ', ' + extra)),
}
