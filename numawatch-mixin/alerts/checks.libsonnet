// Check ids that share one alert. Every check id of the registry (checks.json) is covered by exactly one alert;
// tests/test_alerts.py and tests/test_mixin.py hold that.
{
  kubeletPolicy: [
    'kubelet_cpu_manager_policy',
    'kubelet_topology_manager_policy',
    'kubelet_topology_manager_scope',
    'kubelet_memory_manager_policy',
  ],
  hostTuning: ['kernel_numa_balancing', 'thp_enabled', 'thp_defrag', 'vm_swappiness', 'cpufreq_governor', 'gpu_process_memlock'],
  isolation: ['isolation_params_mismatch', 'tick_on_nohz_full'],
  irq: ['irq_on_isolated_cpu', 'irq_activity_on_isolated_cpu', 'irqbalance_unbanned'],
  numaPlacement: ['container_numa_split', 'container_gpu_numa_mismatch', 'gpu_process_remote'],
  memory: ['container_memory_numa_mismatch', 'container_memory_remote'],
  nodeIsolation: ['node_taint_missing', 'node_workload_not_isolated'],
}
