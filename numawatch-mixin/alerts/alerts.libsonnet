// numawatch's alerting rules (groups numawatch-drift, numawatch-fleet, numawatch-meta).
//
// Severity policy (docs/runbooks/README.md): page (`critical`) only where a person must act now: pinning drift on
// a container that holds a GPU, a kubelet state file that will stop the next kubelet start, and one drift spreading
// over many nodes of a cluster. Everything else is a ticket (`warning`). Every alert has a runbook at
// docs/runbooks/<AlertName>.md (tests/test_alerts.py holds that).
local checkGroups = import 'checks.libsonnet';
local durations = import '../lib/durations.libsonnet';
local q = import '../lib/promql.libsonnet';

{
  prometheusAlerts+:: {
    local c = $._config,
    local node = q.node(c),
    local container = q.container(c),
    local exclude = q.excludeNodes(c),

    local onNode = '{{ $labels.instance }}',
    // Pod-level findings (container_numa_split under scope pod, pod_not_guaranteed) carry no container label.
    local inContainer = '{{ $labels.namespace }}/{{ $labels.pod }}{{ with $labels.container }} container {{ . }}{{ end }}',
    local seeCheck = 'The expected and actual values are in numawatch_drift_info (same labels) and in `numawatch check` on the node.',

    local forOf(name, severity) =
      local value = c.alertFor[name];
      if std.isObject(value) then value[severity] else value,
    // How long an alert's condition has held when it fires, in words: its `for:`, so the text stays true when
    // alertFor is changed.
    local heldFor(name, severity) = durations.words(forOf(name, severity)),

    local alert(name, expr, severity, summary, description, keepFiringFor=null, checks=[]) =
      { alert: name, expr: expr, 'for': forOf(name, severity) }
      + (if keepFiringFor != null then { keep_firing_for: keepFiringFor } else {})
      + {
        labels: { severity: severity },
        annotations: { summary: summary, description: description, runbook_url: c.runbookURLPattern % name },
      }
      // The check ids the alert covers: the catch-all excludes them. Hidden, so not rendered.
      + { checks:: checks },

    // One alert per node and check; the value is the number of findings (IRQs, GPUs, settings...).
    local perNode(checks) = 'count by (%s, check) (%s)\n%s' % [node, q.drift(c, checks), exclude],
    local perNodeOf(checks, matchers) = 'count by (%s, check) (%s)\n%s' % [node, q.drift(c, checks, matchers), exclude],
    // One alert per subject (pod or container) and check. `max` folds duplicate scrapes of one target.
    local perSubject(checks, by) = 'max by (%s, check) (%s)\n%s' % [by, q.drift(c, checks), exclude],

    // Two rules under one alert name: critical when the container holds a GPU, warning otherwise.
    // numawatch_gpu_info carries the holder of each GPU (namespace/pod/container, empty when free), so the join
    // tells the inference containers, whose drift stalls a GPU, from the rest. A pod-level finding (no container
    // label) joins with the holder's pod: the label_replace copy of the holders drops their container label.
    local gpuSplit(name, checks, summary, description) =
      local base = 'max by (%s, check) (%s)' % [container, q.drift(c, checks)];
      local holders = q.metric(c, 'numawatch_gpu_info', 'container!=""');
      local holdsGPU = 'on (%s) (\n  %s\n  or label_replace(%s, "container", "", "container", ".*")\n)' % [container, holders, holders];
      [
        alert(name, '%s\nand %s\n%s' % [base, holdsGPU, exclude], 'critical', summary,
              description + ' It holds a GPU, which idles while these host threads are delayed.', '10m', checks),
        alert(name, '%s\nunless %s\n%s' % [base, holdsGPU, exclude], 'warning', summary,
              description + ' It holds no GPU.', '10m', checks),
      ],

    // A GPU used outside the device plugin's assignment: critical when the GPU belongs to another container (or a
    // host process uses an assigned GPU), warning when the GPU is assigned to nobody yet.
    local gpuHolderAlerts =
      local checks = ['gpu_holder_mismatch'];
      local byGPU = 'max by (%s, check, gpu, reason)' % container;
      local user = '{{ with $labels.container }}{{ $labels.namespace }}/{{ $labels.pod }} container {{ . }}'
                   + '{{ else }}a process outside any container{{ end }}';
      local description = 'GPU {{ $labels.gpu }} on %s is used by %s, which the device plugin did not assign it to ' % [onNode, user]
                          + "({{ $labels.reason }}): the GPU is shared outside the kubelet's accounting. " + seeCheck;
      local summary = 'A GPU is used by a container the device plugin did not assign it to.';
      [
        alert('NumawatchGPUHolderMismatch', '%s (%s)\n%s' % [byGPU, q.drift(c, checks, 'reason!="unassigned"'), exclude],
              'critical', summary, description + ' The GPU belongs to another workload, which now shares it.', '10m', checks),
        alert('NumawatchGPUHolderMismatch', '%s (%s)\n%s' % [byGPU, q.drift(c, checks, 'reason="unassigned"'), exclude],
              'warning', summary, description + ' The GPU is assigned to nobody yet; the next pod given it will share it.',
              '10m', checks),
      ],

    // The knobs of issue 17: the CPU reservation stated twice, the node's taints and foreign pods, the GPUs'
    // PCIe path to the RDMA NICs, NVLink peering of a container's GPUs, and deep C-states on pinned CPUs.
    local platformAlerts = [
      alert('NumawatchKubeletReservedIncoherent', perNode(['kubelet_reserved_incoherent']), 'info',
            'The kubelet\'s CPU reservation is stated twice, or splits cores the CPU Manager hands out whole.',
            onNode + ': system-reserved/kube-reserved cpu is set next to reserved-cpus (which the kubelet uses instead), '
            + 'or reserved-cpus takes one thread of a core under full-pcpus-only. ' + seeCheck,
            '15m', ['kubelet_reserved_incoherent']),
      alert('NumawatchNodeNotIsolated', perNode(checkGroups.nodeIsolation), 'warning',
            'A GPU node lacks its taint or label, or runs pods that do not belong on it.',
            onNode + " fails {{ $labels.check }} ({{ $value }} finding(s)): workloads that need no GPU can share the node's "
            + 'memory bandwidth, cache and shared CPUs with the pinned inference pods. ' + seeCheck,
            '15m', checkGroups.nodeIsolation),
      alert('NumawatchGPUNICPathDegraded', perNode(['gpu_nic_path']), 'warning',
            "A GPU's nearest RDMA NIC is behind the host bridge or on the other socket.",
            onNode + ': {{ $value }} GPU(s) reach no RDMA NIC under their PCIe switch although others do, or none on their '
            + 'socket: their GPUDirect RDMA traffic crosses the host bridge or the inter-socket link. ' + seeCheck,
            '15m', ['gpu_nic_path']),
      alert('NumawatchContainerGPUsNotPeered', perSubject(['container_gpus_not_peered'], container + ', gpu'), 'warning',
            'A container holds GPUs that are not NVLink peers.',
            inContainer + ' on ' + onNode + ' holds GPUs {{ $labels.gpu }} that do not reach each other over NVLink: its '
            + 'tensor-parallel traffic goes over PCIe. ' + seeCheck,
            '10m', ['container_gpus_not_peered']),
      alert('NumawatchCPUIdleDeepState', perNode(['cpuidle_deep_state']), 'warning',
            'Isolated or pinned CPUs may enter deep idle states.',
            onNode + ': {{ $value }} group(s) of isolated or exclusive CPUs may enter idle states whose exit latency '
            + "exceeds the intent's limit: every wake-up between short CUDA launches pays it. " + seeCheck,
            '15m', ['cpuidle_deep_state']),
    ],

    // Per-node and per-container alerts, one family per check id (or per group of related check ids).
    local dedicated = [
      alert('NumawatchKubeletPolicyMismatch', perNode(checkGroups.kubeletPolicy), 'warning',
            "The kubelet's CPU, Memory or Topology Manager policy differs from the intended profile.",
            onNode + " fails {{ $labels.check }}: the kubelet runs with a policy other than the intent's, so new pods are "
            + 'admitted without the intended pinning. ' + seeCheck,
            '15m', checkGroups.kubeletPolicy),
      alert('NumawatchKubeletReservedCPUsMismatch', perNode(['kubelet_reserved_cpus_mismatch']), 'warning',
            "The kubelet's reserved CPUs differ from the host's housekeeping CPUs.",
            onNode + ": reserved-cpus and the kernel's isolcpus disagree, so isolated cores idle or housekeeping cores are "
            + 'handed out as exclusive CPUs. ' + seeCheck,
            '15m', ['kubelet_reserved_cpus_mismatch']),
      // Two rules under one name, by the finding's own severity: critical where the kubelet will refuse to start,
      // warning where only some kubelet versions would (version unknown) or where it starts and forgets its device
      // allocations (the device checkpoint).
      alert('NumawatchKubeletStateStale', perNodeOf(['kubelet_state_stale'], 'severity="critical"'), 'critical',
            "A kubelet checkpoint file no longer matches the kubelet's policy; the next kubelet start fails.",
            onNode + ': {{ $value }} kubelet state file(s) were written under another policy. The kubelet refuses to start '
            + 'with them: the next restart (upgrade, reboot, config change) takes the node out. Fix it before that '
            + 'happens. ' + seeCheck,
            '10m', ['kubelet_state_stale']),
      alert('NumawatchKubeletStateStale', perNodeOf(['kubelet_state_stale'], 'severity!="critical"'), 'warning',
            "A kubelet checkpoint file may not be read back at the kubelet's next start.",
            onNode + ': {{ $value }} kubelet state file(s) the kubelet may not read back at its next start: the device '
            + "checkpoint (the kubelet starts and forgets the devices its pods hold) or a file only some kubelet "
            + 'versions refuse, the version being unknown (set kubelet.version in the intent). ' + seeCheck,
            '10m', ['kubelet_state_stale']),
      alert('NumawatchKubeletCheckpointMismatch', perNode(['kubelet_podresources_checkpoint_mismatch']), 'warning',
            "The live kubelet and its checkpoint files disagree on what containers hold.",
            onNode + ': {{ $value }} container(s) hold other CPUs, memory or devices than the kubelet\'s checkpoints say. '
            + 'At its next start the kubelet restores the checkpoints, not what the containers hold. ' + seeCheck,
            '15m', ['kubelet_podresources_checkpoint_mismatch']),
      alert('NumawatchPodNotGuaranteed', perSubject(['pod_not_guaranteed'], node + ', namespace, pod'), 'warning',
            'A pod that should be pinned is not QoS Guaranteed, so the CPU Manager does not pin it.',
            '{{ $labels.namespace }}/{{ $labels.pod }} on ' + onNode + ' is not Guaranteed (requests must equal limits for '
            + 'CPU and memory): it runs on the shared CPU pool, unpinned.',
            '10m', ['pod_not_guaranteed']),
      alert('NumawatchContainerNotExclusive', perSubject(['container_not_exclusive'], container), 'warning',
            'A container that should hold exclusive CPUs runs on the shared pool.',
            inContainer + ' on ' + onNode + ' has no exclusive CPUs (a non-integer CPU request, or a non-static CPU Manager '
            + 'policy): it shares cores with everything else.',
            '10m', ['container_not_exclusive']),
    ] + gpuSplit(
      'NumawatchContainerCPUSetDrift', ['container_cpuset_drift'],
      "A container's cgroup cpuset differs from the CPUs the kubelet assigned it.",
      inContainer + ' on ' + onNode + ": its cpuset was rewritten behind the kubelet's back (systemd, an NRI plugin, a hand "
      + 'edit); the kubelet never corrects it. ' + seeCheck,
    ) + gpuSplit(
      'NumawatchExclusiveCPUOverlap', ['exclusive_cpu_overlap'],
      'Exclusive CPUs of a container are shared with another container.',
      inContainer + ' on ' + onNode + ' has exclusive CPUs that another container can also run on: a noisy neighbour on '
      + 'cores that were promised to it alone. ' + seeCheck,
    ) + gpuSplit(
      'NumawatchContainerNUMAMisaligned', checkGroups.numaPlacement,
      "A container's CPUs span NUMA nodes or sit on a NUMA node other than its GPU's.",
      inContainer + ' on ' + onNode + ' fails {{ $labels.check }}: its threads reach the GPU or their memory across the '
      + 'inter-socket link. ' + seeCheck,
    ) + [
      alert('NumawatchContainerMemoryNUMADrift', perSubject(checkGroups.memory, container), 'warning',
            "A pinned container's memory is not on the NUMA node of its CPUs.",
            inContainer + ' on ' + onNode + ' fails {{ $labels.check }}: memory is allowed on, or resident on, a remote '
            + 'NUMA node, so every access crosses the inter-socket link. ' + seeCheck,
            '15m', checkGroups.memory),
      alert('NumawatchContainerOutsideIsolated', perSubject(['container_outside_isolated'], container), 'warning',
            'A pinned container runs on CPUs outside the isolated set.',
            inContainer + ' on ' + onNode + ' holds exclusive CPUs that are not isolated (isolcpus): the kernel schedules '
            + 'housekeeping work and interrupts on them. ' + seeCheck,
            '10m', ['container_outside_isolated']),
      alert('NumawatchGPUNUMAUnknown', perNode(['gpu_numa_unknown']), 'warning',
            'GPUs are registered without a NUMA node, so the Topology Manager cannot align them.',
            onNode + ': {{ $value }} GPU(s) have no NUMA node (sysfs numa_node -1 or a device plugin without topology): '
            + 'CPUs and memory are aligned, the GPU is left to chance.',
            '10m', ['gpu_numa_unknown']),
    ] + gpuHolderAlerts + [
      alert('NumawatchNUMATopologyInconsistent', perNode(['numa_topology_inconsistent']), 'warning',
            "The firmware's NUMA topology contradicts itself, so every placement judgement rests on a guess.",
            onNode + ': {{ $value }} inconsistencies in the NUMA map (node CPU lists that overlap, an online CPU in no '
            + "node, a GPU's numa_node against its local_cpulist, or an asymmetric distance table). " + seeCheck,
            '15m', ['numa_topology_inconsistent']),
      alert('NumawatchHostTuningDrift', perNode(checkGroups.hostTuning), 'warning',
            'A kernel or process tuning knob differs from the intended profile.',
            onNode + ' fails {{ $labels.check }} ({{ $value }} finding(s)): NUMA balancing, THP, swappiness, the CPU '
            + 'frequency governor or memlock is not what the profile asks. ' + seeCheck,
            '15m', checkGroups.hostTuning),
      alert('NumawatchCPUIsolationMismatch', perNode(checkGroups.isolation), 'warning',
            'CPU isolation is not effective: boot parameters disagree or isolated cores still tick.',
            onNode + ' fails {{ $labels.check }} ({{ $value }} finding(s)): isolcpus, nohz_full and rcu_nocbs disagree, '
            + 'or nohz_full cores run more than one thread. ' + seeCheck,
            '10m', checkGroups.isolation),
      alert('NumawatchHugepagesShortfall', perNode(['hugepages_shortfall']), 'warning',
            'Fewer hugepages are reserved than the intended profile asks.',
            onNode + ': {{ $value }} hugepage pool(s) hold fewer pages than intended; pods asking for hugepages are not '
            + 'admitted, or host buffers fall back to small pages. ' + seeCheck,
            '15m', ['hugepages_shortfall']),
      alert('NumawatchIRQOnIsolatedCPU', perNode(checkGroups.irq), 'warning',
            'Device interrupts are routed to, or served on, isolated CPUs.',
            onNode + ' fails {{ $labels.check }} ({{ $value }} finding(s)): interrupts land on cores that feed GPUs and '
            + 'stall them. ' + seeCheck,
            '10m', checkGroups.irq),
    ] + platformAlerts,

    // Every check id some dedicated alert covers, in sorted order: the catch-all below takes the rest.
    local covered = std.set(std.flattenArrays([rule.checks for rule in dedicated])),
    local catchAll = alert(
      'NumawatchDriftDetected',
      'count by (%s, check) (%s)\n%s' % [node, q.metric(c, 'numawatch_drift', 'check!~"%s"' % std.join('|', covered)), exclude],
      'warning',
      'Drift reported for a check that has no dedicated alert.',
      onNode + ' fails {{ $labels.check }} ({{ $value }} finding(s)). ' + seeCheck,
      '10m',
    ),

    local fleetAlerts =
      local ratioOf = '{{ with printf `cluster_check:numawatch_drift_nodes:ratio{%(cl)s=%%q,check=%%q}` $labels.%(cl)s '
                      % { cl: c.clusterLabel } + '$labels.check | query }}{{ . | first | value | humanizePercentage }}{{ end }}';
      local versions = '{{ with printf `count(count by (version) (%s))` $labels.%s | query }}'
                       % [q.metric(c, 'numawatch_build_info', '%s=%%q' % c.clusterLabel), c.clusterLabel]
                       + '{{ . | first | value }}{{ end }}';
      [
        alert('NumawatchDriftWidespread',
              'cluster_check:numawatch_drift_nodes:count >= %g\nand cluster_check:numawatch_drift_nodes:ratio >= %g'
              % [c.widespreadMinNodes, c.widespreadMinRatio],
              'critical',
              'One drift check fails on many nodes of a cluster.',
              '{{ $value }} nodes (%s of those that evaluated it) in cluster "{{ $labels.%s }}" fail {{ $labels.check }}; '
              % [ratioOf, c.clusterLabel]
              + '%s numawatch version(s) are running. A rollout (kubelet config, node image, numawatch itself) most ' % versions
              + 'likely caused it.',
              '15m'),
      ],

    local metaAlerts = [
      alert('NumawatchDown', 'up{%s} == 0\n%s' % [c.numawatchSelector, exclude], 'warning',
            'Prometheus cannot scrape numawatch on a node.',
            'numawatch on %s has been unreachable for %s: drift there goes unseen.' % [onNode, heldFor('NumawatchDown', 'warning')]),
      alert('NumawatchMissingOnGPUNode',
            'max by (%(cl)s, node) (kube_node_status_capacity{%(gpu)s}) > 0\nunless on (%(cl)s, node) up{%(sel)s}\n%(ex)s'
            % { cl: c.clusterLabel, gpu: c.gpuCapacitySelector, sel: c.numawatchSelector, ex: exclude },
            'warning',
            'A GPU node has no numawatch target.',
            'GPU node {{ $labels.node }} has had no numawatch scrape target for %s ' % heldFor('NumawatchMissingOnGPUNode', 'warning')
            + '(the DaemonSet pod is missing, '
            + 'not scheduled, or not discovered): drift there goes unseen.'),
      alert('NumawatchSourceDown',
            'max by (%s, source) (%s) == 0\n%s'
            % [node, q.metric(c, 'numawatch_source_up', 'source=~"%s"' % c.requiredSources), exclude],
            'warning',
            'A numawatch source cannot read its host files.',
            'numawatch on ' + onNode + ' cannot read source {{ $labels.source }}: the checks that need it are not '
            + "evaluated. The reason is on numawatch's landing page and in its log."),
      alert('NumawatchEvaluationsStale',
            'time() - max by (%s) (%s)\n> %s'
            % [node, q.metric(c, 'numawatch_last_evaluation_timestamp_seconds'), c.staleAfterSeconds],
            'warning',
            'The numawatch exporter answers scrapes but has stopped evaluating.',
            'numawatch on ' + onNode + ' last finished an evaluation {{ $value | humanizeDuration }} ago: its findings are '
            + 'stale.'),
      alert('NumawatchConfigReloadFailed',
            'max by (%s, file) (%s) == 0'
            % [node, q.metric(c, 'numawatch_config_last_reload_successful')],
            'warning',
            'The numawatch exporter could not reload a configuration file.',
            'numawatch on ' + onNode + ' has failed to reload its {{ $labels.file }} configuration for '
            + heldFor('NumawatchConfigReloadFailed', 'warning') + ': the previous one is still in force (for the web '
            + 'config: certificates not rotated, users not changed). The reason is in its log.'),
    ],

    groups+: [
      { name: 'numawatch-drift', rules: dedicated + [catchAll] },
      { name: 'numawatch-fleet', rules: fleetAlerts },
      { name: 'numawatch-meta', rules: metaAlerts },
    ],
  },
}
