// The knobs of the numawatch mixin. Override them where you import it, e.g.
//   (import 'numawatch-mixin/mixin.libsonnet') + { _config+:: { numawatchSelector: 'job="nw"', clusterLabel: 'k8s_cluster' } }
// The rendered files in alerts/ and dashboards/ of the repository are this default configuration.
{
  _config+:: {
    // Selects numawatch's series: added to every numawatch_* selector and to `up` in every alert, recording rule
    // and dashboard query. deploy/components/servicemonitor sets job="numawatch" through jobLabel.
    numawatchSelector: 'job="numawatch"',

    // The label your Prometheus (or its remote-write relabelling) puts the cluster's name in. It is used in every
    // `by`/`on` clause and matcher that means "the cluster"; a single-cluster Prometheus without it still works
    // (an absent label groups as one cluster).
    clusterLabel: 'cluster',
    // Show the dashboards' cluster picker. false hides it (the queries keep matching every cluster).
    showMultiCluster: true,

    // kube-state-metrics' GPU capacity series: a node is a GPU node when it advertises one of these resources
    // (kube-state-metrics spells nvidia.com/gpu nvidia_com_gpu): NVIDIA GPUs whole or as MIG slices, AMD GPUs and
    // Intel Gaudi, numawatch's default gpuResources.
    gpuCapacitySelector: 'resource=~"nvidia_com_gpu|nvidia_com_mig_.+|amd_com_gpu|habana_ai_gaudi"',
    // Nodes being drained or deleted drift as a matter of course; their alerts are noise (kubernetes-mixin's
    // kubeNodeUnreachableIgnoreKeys). Needs kube-state-metrics and a `node` label on numawatch's series (the
    // ServiceMonitor relabels it); without them nothing is excluded.
    ignoredTaints: 'ToBeDeletedByClusterAutoscaler|cloud.google.com/impending-node-termination|aws-node-termination-handler/spot-itn',

    // NumawatchDriftWidespread: a check failing on at least this many nodes *and* this share of a cluster's nodes.
    widespreadMinNodes: 3,
    widespreadMinRatio: 0.2,
    // NumawatchSourceDown watches the sources every node must have. Others are down by design on many nodes:
    // intersocket needs uncore PMUs and perf access (the DaemonSet drops every capability), nvml and processes
    // need NVML enabled in numawatch. A source added later is not watched until it is listed here: a missed
    // meta-alert is cheaper than a fleet-wide false one.
    requiredSources: 'topology|cgroups|names|kubelet_config|kubelet_state|gpus_sysfs|kernel|numastat|interrupts|irqs|irqbalance',
    // NumawatchEvaluationsStale: numawatch evaluates every 15 s; eight missed evaluations is not a hiccup.
    staleAfterSeconds: 120,

    // How long each alert's condition must hold before it fires (`for:`). An alert with a critical and a warning
    // rule (the GPU-holder split) has one duration per severity.
    alertFor: {
      NumawatchKubeletPolicyMismatch: '15m',
      NumawatchKubeletReservedCPUsMismatch: '15m',
      NumawatchKubeletStateStale: '5m',
      NumawatchKubeletCheckpointMismatch: '15m',
      NumawatchPodNotGuaranteed: '15m',
      NumawatchContainerNotExclusive: '15m',
      NumawatchContainerCPUSetDrift: { critical: '10m', warning: '15m' },
      NumawatchExclusiveCPUOverlap: { critical: '10m', warning: '15m' },
      NumawatchContainerNUMAMisaligned: { critical: '15m', warning: '30m' },
      NumawatchContainerMemoryNUMADrift: '30m',
      NumawatchContainerOutsideIsolated: '15m',
      NumawatchGPUNUMAUnknown: '15m',
      NumawatchGPUHolderMismatch: { critical: '10m', warning: '15m' },
      NumawatchNUMATopologyInconsistent: '30m',
      NumawatchHostTuningDrift: '15m',
      NumawatchCPUIsolationMismatch: '30m',
      NumawatchHugepagesShortfall: '15m',
      NumawatchIRQOnIsolatedCPU: '30m',
      NumawatchKubeletReservedIncoherent: '30m',
      NumawatchNodeNotIsolated: '30m',
      NumawatchGPUNICPathDegraded: '30m',
      NumawatchContainerGPUsNotPeered: '15m',
      NumawatchCPUIdleDeepState: '30m',
      NumawatchDriftDetected: '15m',
      NumawatchDriftWidespread: '10m',
      NumawatchDown: '15m',
      NumawatchMissingOnGPUNode: '15m',
      NumawatchSourceDown: '15m',
      NumawatchEvaluationsStale: '10m',
      NumawatchConfigReloadFailed: '15m',
    },

    // Every alert's runbook_url: the pattern with the alert name in place of %s.
    runbookURLPattern: 'https://github.com/numawatch/numawatch/blob/main/docs/runbooks/%s.md',
    checksDocURL: 'https://github.com/numawatch/numawatch/blob/main/docs/checks.md',

    // Dashboards: file name -> uid (kube-prometheus' convention). Links between the dashboards follow these.
    grafanaDashboardIDs: {
      'numawatch-fleet.json': 'numawatch-fleet',
      'numawatch-node.json': 'numawatch-node',
      'numawatch-gpu.json': 'numawatch-gpu',
    },
    dashboardTitlePrefix: 'numawatch / ',
    dashboardTags: ['numawatch'],
    dashboardTimezone: 'utc',
    dashboardRefresh: '1m',
  },
}
