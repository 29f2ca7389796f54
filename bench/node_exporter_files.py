"""The files node_exporter's cpu, cpufreq, meminfo_numa and vmstat collectors read, as a real node holds them.

bench/generate_host.py writes these so that node_exporter (bench/run.py --node-exporter) does on the generated tree
the work it does on a real 2-socket, 384-CPU intel_pstate host, not less. What node_exporter 1.5.0 (Debian's
1.5.0-1+b6, procfs as vendored there) opens per scrape with ``--collector.disable-defaults --collector.cpu
--collector.cpufreq --collector.meminfo_numa --collector.vmstat`` (seen with strace on a generated tree, and in
collector/cpu_linux.go, cpufreq_linux.go, meminfo_numa_linux.go, vmstat_linux.go and procfs sysfs/system_cpu.go):

- cpu: ``/proc/stat`` (procfs parses every line, every count of ``intr`` included); per CPU
  ``topology/{physical_package_id,core_id}``; per core ``thermal_throttle/core_throttle_count`` and per package
  ``thermal_throttle/package_throttle_count``; ``cpu/isolated`` once at start. ``/proc/cpuinfo`` only with
  ``--collector.cpu.info``, which is off by default, so it is not written here.
- cpufreq: per CPU, through the ``cpuN/cpufreq`` link, ``cpuinfo_{cur,max,min}_freq``,
  ``cpuinfo_transition_latency``, ``scaling_{cur,max,min}_freq`` (each may be missing), then
  ``scaling_available_governors``, ``scaling_driver``, ``scaling_governor``, ``related_cpus`` and
  ``scaling_setspeed``, which must all exist: one missing file fails the whole collector for every CPU.
- meminfo_numa: ``nodeN/meminfo`` and ``nodeN/numastat``.
- vmstat: ``/proc/vmstat`` (every line is parsed; the default ``--collector.vmstat.fields`` keeps a few).

The layouts are the kernel's (6.1: drivers/base/node.c, fs/proc/stat.c, mm/vmstat.c, drivers/cpufreq/cpufreq.c and
intel_pstate.c, arch/x86/kernel/cpu/mce/therm_throt.c). An intel_pstate policy in active mode has no
``cpuinfo_cur_freq`` (the driver has no ``->get``) and no ``stats/`` (no frequency table), so neither is written;
``scaling_cur_freq`` is there, which numawatch must never open (tests/test_bench_generator.py checks it).
Values are seeded and plausible for a host up 41 days: a Xeon 6972P-like part (800 MHz - 3.9 GHz, base 2.4 GHz),
busy pinned CPUs, quiet housekeeping, no swap.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping, Sequence

UPTIME_S = 41 * 86400
BTIME = 1761900000
USER_HZ = 100  # /proc/stat ticks
PAGE_KB = 4

# intel_pstate on a 96-core Xeon 6 part, in kHz as cpufreq shows them.
CPUINFO_MIN_KHZ, BASE_KHZ, CPUINFO_MAX_KHZ = 800000, 2400000, 3900000
INTEL_PSTATE_GOVERNORS = "performance powersave"
EPP_AVAILABLE = "default performance balance_performance balance_power power "  # the kernel's trailing space

# IO-APIC pins (GSIs) of a 2-socket Intel server's PCH, and the legacy PIC's IRQs: they size nr_irqs.
GSI_TOP, LEGACY_IRQS = 120, 16

# /proc/vmstat keys of a real kernel (Linux 6.1, the realkernel-4node fixture), in the kernel's order.
_VMSTAT_KEYS_TEXT = (
    "nr_free_pages nr_zone_inactive_anon nr_zone_active_anon nr_zone_inactive_file nr_zone_active_file "
    "nr_zone_unevictable nr_zone_write_pending nr_mlock nr_bounce nr_zspages nr_free_cma numa_hit numa_miss "
    "numa_foreign numa_interleave numa_local numa_other nr_inactive_anon nr_active_anon nr_inactive_file "
    "nr_active_file nr_unevictable nr_slab_reclaimable nr_slab_unreclaimable nr_isolated_anon nr_isolated_file "
    "workingset_nodes workingset_refault_anon workingset_refault_file workingset_activate_anon "
    "workingset_activate_file workingset_restore_anon workingset_restore_file workingset_nodereclaim nr_anon_pages "
    "nr_mapped nr_file_pages nr_dirty nr_writeback nr_writeback_temp nr_shmem nr_shmem_hugepages "
    "nr_shmem_pmdmapped nr_file_hugepages nr_file_pmdmapped nr_anon_transparent_hugepages nr_vmscan_write "
    "nr_vmscan_immediate_reclaim nr_dirtied nr_written nr_throttled_written nr_kernel_misc_reclaimable "
    "nr_foll_pin_acquired nr_foll_pin_released nr_kernel_stack nr_page_table_pages nr_sec_page_table_pages "
    "nr_swapcached pgpromote_success pgpromote_candidate nr_dirty_threshold nr_dirty_background_threshold pgpgin "
    "pgpgout pswpin pswpout pgalloc_dma pgalloc_dma32 pgalloc_normal pgalloc_movable pgalloc_device allocstall_dma "
    "allocstall_dma32 allocstall_normal allocstall_movable allocstall_device pgskip_dma pgskip_dma32 pgskip_normal "
    "pgskip_movable pgskip_device pgfree pgactivate pgdeactivate pglazyfree pgfault pgmajfault pglazyfreed "
    "pgrefill pgreuse pgsteal_kswapd pgsteal_direct pgdemote_kswapd pgdemote_direct pgscan_kswapd pgscan_direct "
    "pgscan_direct_throttle pgscan_anon pgscan_file pgsteal_anon pgsteal_file zone_reclaim_failed pginodesteal "
    "slabs_scanned kswapd_inodesteal kswapd_low_wmark_hit_quickly kswapd_high_wmark_hit_quickly pageoutrun "
    "pgrotated drop_pagecache drop_slab oom_kill numa_pte_updates numa_huge_pte_updates numa_hint_faults "
    "numa_hint_faults_local numa_pages_migrated pgmigrate_success pgmigrate_fail thp_migration_success "
    "thp_migration_fail thp_migration_split compact_migrate_scanned compact_free_scanned compact_isolated "
    "compact_stall compact_fail compact_success compact_daemon_wake compact_daemon_migrate_scanned "
    "compact_daemon_free_scanned htlb_buddy_alloc_success htlb_buddy_alloc_fail unevictable_pgs_culled "
    "unevictable_pgs_scanned unevictable_pgs_rescued unevictable_pgs_mlocked unevictable_pgs_munlocked "
    "unevictable_pgs_cleared unevictable_pgs_stranded thp_fault_alloc thp_fault_fallback thp_fault_fallback_charge "
    "thp_collapse_alloc thp_collapse_alloc_failed thp_file_alloc thp_file_fallback thp_file_fallback_charge "
    "thp_file_mapped thp_split_page thp_split_page_failed thp_deferred_split_page thp_split_pmd "
    "thp_scan_exceed_none_pte thp_scan_exceed_swap_pte thp_scan_exceed_share_pte thp_split_pud "
    "thp_zero_page_alloc thp_zero_page_alloc_failed thp_swpout thp_swpout_fallback balloon_inflate balloon_deflate "
    "balloon_migrate swap_ra swap_ra_hit ksm_swpin_copy cow_ksm zswpin zswpout direct_map_level2_splits "
    "direct_map_level3_splits nr_unstable"
)
VMSTAT_KEYS = tuple(_VMSTAT_KEYS_TEXT.split())

# Counters that stay 0 on a node without swap, zswap, KSM, balloon, DMA zones in use or memory tiering.
_VMSTAT_ZERO_PREFIXES = ("pswp", "swap_ra", "zswp", "ksm_", "cow_ksm", "balloon_", "nr_zspages", "nr_swapcached",
                         "thp_swpout", "nr_bounce", "nr_unstable", "nr_writeback_temp", "pgdemote_", "pgpromote_",
                         "allocstall_dma", "allocstall_device", "pgskip_", "pgalloc_dma", "pgalloc_device",
                         "nr_free_cma", "drop_", "oom_kill", "nr_isolated_", "nr_sec_page", "pgscan_direct_throttle",
                         "htlb_buddy_alloc_fail", "thp_split_pud", "thp_zero_page_alloc_failed",
                         "nr_throttled_written", "zone_reclaim_failed", "pginodesteal", "kswapd_inodesteal",
                         "thp_file_", "nr_file_hugepages", "nr_file_pmdmapped", "nr_shmem_pmdmapped",
                         "nr_shmem_hugepages", "unevictable_pgs_stranded", "workingset_")  # fmt: skip

# drivers/base/node.c node_read_meminfo: the label with its padding, then %8lu kB (6.1, with CONFIG_TRANSPARENT_
# HUGEPAGE; the two File* labels are one space short in the kernel's own format string).
_NODE_MEMINFO_LABELS = (
    "MemTotal:       ", "MemFree:        ", "MemUsed:        ", "SwapCached:     ", "Active:         ",
    "Inactive:       ", "Active(anon):   ", "Inactive(anon): ", "Active(file):   ", "Inactive(file): ",
    "Unevictable:    ", "Mlocked:        ", "Dirty:          ", "Writeback:      ", "FilePages:      ",
    "Mapped:         ", "AnonPages:      ", "Shmem:          ", "KernelStack:    ", "PageTables:     ",
    "SecPageTables:  ", "NFS_Unstable:   ", "Bounce:         ", "WritebackTmp:   ", "KReclaimable:   ",
    "Slab:           ", "SReclaimable:   ", "SUnreclaim:     ", "AnonHugePages:  ", "ShmemHugePages: ",
    "ShmemPmdMapped: ", "FileHugePages: ", "FilePmdMapped: ",
)  # fmt: skip
SOFTIRQ_VECTORS = ("HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU")


def nr_irqs(nr_cpu_ids: int, highest_irq: int = 0) -> int:
    """The kernel's ``nr_irqs`` on x86 (arch_probe_nr_irqs with PCI MSI): the length of /proc/stat's IRQ list."""
    return max(GSI_TOP + LEGACY_IRQS + 8 * nr_cpu_ids + GSI_TOP * 16, highest_irq + 1)


# --------------------------------------------------------------------------------------------------- cpufreq
def cpufreq_policy(cpu: int, governor: str, rng: random.Random, *, busy: bool) -> dict[str, str]:
    """The files of an intel_pstate (active mode) ``cpufreq/policyN`` beside what add_kernel_settings writes
    (``scaling_governor``, ``affected_cpus``): one policy per CPU, frequencies in kHz."""
    low = BASE_KHZ if busy else CPUINFO_MIN_KHZ
    return {
        "base_frequency": f"{BASE_KHZ}\n",
        "cpuinfo_max_freq": f"{CPUINFO_MAX_KHZ}\n",
        "cpuinfo_min_freq": f"{CPUINFO_MIN_KHZ}\n",
        "cpuinfo_transition_latency": "0\n",  # intel_pstate sets none in active mode
        "energy_performance_available_preferences": EPP_AVAILABLE + "\n",
        "energy_performance_preference": ("performance" if governor == "performance" else "balance_performance") + "\n",
        "related_cpus": f"{cpu}\n",
        "scaling_available_governors": INTEL_PSTATE_GOVERNORS + "\n",
        "scaling_cur_freq": f"{rng.randrange(low, CPUINFO_MAX_KHZ + 1)}\n",  # APERF/MPERF average: any kHz value
        "scaling_driver": "intel_pstate\n",
        "scaling_max_freq": f"{CPUINFO_MAX_KHZ}\n",
        "scaling_min_freq": f"{CPUINFO_MIN_KHZ}\n",
        "scaling_setspeed": "<unsupported>\n",  # only the userspace governor has a speed to show
    }


def thermal_throttle(core_count: int, package_count: int) -> dict[str, str]:
    """``cpuN/thermal_throttle/`` (therm_throt.c): event counts and the longest / total throttled time in ms."""
    return {
        "core_throttle_count": f"{core_count}\n",
        "core_throttle_max_time_ms": f"{min(core_count, 1) * 12}\n",
        "core_throttle_total_time_ms": f"{core_count * 7}\n",
        "package_throttle_count": f"{package_count}\n",
        "package_throttle_max_time_ms": f"{min(package_count, 1) * 31}\n",
        "package_throttle_total_time_ms": f"{package_count * 19}\n",
    }


# --------------------------------------------------------------------------------------------------- /proc/stat
def proc_stat(
    rng: random.Random,
    online: Sequence[int],
    busy: Iterable[int],
    irq_counts: Mapping[int, int],
    arch_counts: int,
    nr_irqs: int,
    *,
    running: int,
) -> str:
    """/proc/stat as fs/proc/stat.c show_stat prints it: ``cpu`` and ``cpuN`` lines with the 10 tick fields (user
    nice system idle iowait irq softirq steal guest guest_nice), ``intr`` (the total, with the architecture's
    LOC/NMI/... counts, then one count per IRQ number below ``nr_irqs``), ``ctxt``, ``btime``, ``processes``,
    ``procs_running``, ``procs_blocked`` and ``softirq`` (total, then the 10 vectors)."""
    busy = frozenset(busy)
    ticks = UPTIME_S * USER_HZ
    rows = []
    for cpu in online:
        load = rng.uniform(0.88, 0.97) if cpu in busy else rng.uniform(0.04, 0.35)
        user = int(ticks * load * 0.86)
        nice = rng.randrange(0, ticks // 2000)
        system = int(ticks * load * 0.11)
        iowait = rng.randrange(0, ticks // 500)
        irq = int(ticks * load * 0.004)
        softirq = int(ticks * load * 0.012)
        idle = max(ticks - user - nice - system - iowait - irq - softirq, 0)
        rows.append((user, nice, system, idle, iowait, irq, softirq, 0, 0, 0))  # bare metal: no steal, no guests
    lines = ["cpu  " + " ".join(str(sum(row[i] for row in rows)) for i in range(10))]
    lines += [f"cpu{cpu} " + " ".join(map(str, row)) for cpu, row in zip(online, rows, strict=True)]
    per_irq = [irq_counts.get(number, 0) for number in range(nr_irqs)]
    lines.append(f"intr {sum(per_irq) + arch_counts} " + " ".join(map(str, per_irq)))
    softirqs = [rng.randrange(0, 10**3), rng.randrange(10**10, 10**11), rng.randrange(10**6, 10**8),
                rng.randrange(10**9, 10**10), rng.randrange(10**7, 10**9), 0, rng.randrange(10**5, 10**7),
                rng.randrange(10**9, 10**10), rng.randrange(10**6, 10**8), rng.randrange(10**9, 10**10)]  # fmt: skip
    lines += [
        f"ctxt {rng.randrange(10**12, 10**13)}",
        f"btime {BTIME}",
        f"processes {rng.randrange(2 * 10**8, 6 * 10**8)}",  # forks since boot
        f"procs_running {running}",
        f"procs_blocked {rng.randrange(0, 3)}",
        f"softirq {sum(softirqs)} " + " ".join(map(str, softirqs)),
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------- memory
def node_meminfo(node: int, total_kb: int, hugepages_total: int, hugepages_free: int, hugepage_kb: int,
                 rng: random.Random) -> tuple[str, dict[str, int]]:  # fmt: skip
    """``nodeN/meminfo`` in the kernel's layout (``Node 0 MemTotal:       %8lu kB``, then the default huge page
    size's ``HugePages_{Total,Free,Surp}: %5u``) and its values in kB (for /proc/vmstat's sums)."""
    hugetlb = hugepages_total * hugepage_kb
    usable = total_kb - hugetlb
    anon = int(usable * rng.uniform(0.15, 0.3))
    file = int(usable * rng.uniform(0.08, 0.2))
    shmem = rng.randrange(1 << 18, 1 << 21)
    slab = int(usable * rng.uniform(0.01, 0.03))
    sreclaimable = slab * 2 // 5
    kernel = slab + rng.randrange(1 << 17, 1 << 19)  # stacks, page tables, percpu
    free = max(usable - anon - file - kernel, 0)
    values = {
        "MemTotal": total_kb, "MemFree": free, "MemUsed": total_kb - free, "SwapCached": 0,
        "Active": anon * 9 // 10 + file // 2, "Inactive": anon // 10 + file // 2,
        "Active(anon)": anon * 9 // 10, "Inactive(anon)": anon // 10, "Active(file)": file // 2,
        "Inactive(file)": file - file // 2, "Unevictable": rng.randrange(0, 1 << 14),
        "Mlocked": rng.randrange(0, 1 << 14), "Dirty": rng.randrange(0, 1 << 12), "Writeback": 0,
        "FilePages": file + shmem, "Mapped": file // 6,
        "AnonPages": anon, "Shmem": shmem, "KernelStack": rng.randrange(1 << 14, 1 << 16),
        "PageTables": rng.randrange(1 << 16, 1 << 19), "SecPageTables": 0, "NFS_Unstable": 0, "Bounce": 0,
        "WritebackTmp": 0, "KReclaimable": sreclaimable, "Slab": slab, "SReclaimable": sreclaimable,
        "SUnreclaim": slab - sreclaimable, "AnonHugePages": anon // 3 // 2048 * 2048, "ShmemHugePages": 0,
        "ShmemPmdMapped": 0, "FileHugePages": 0, "FilePmdMapped": 0,
    }  # fmt: skip
    lines = [f"Node {node} {label}{values[label.split(':')[0]]:8d} kB\n" for label in _NODE_MEMINFO_LABELS]
    lines += [
        f"Node {node} HugePages_Total: {hugepages_total:5d}\n",
        f"Node {node} HugePages_Free:  {hugepages_free:5d}\n",
        f"Node {node} HugePages_Surp:  {0:5d}\n",
    ]
    return "".join(lines), values


def numastat(rng: random.Random, drawn: Mapping[int, tuple[int, int, int]]) -> dict[int, dict[str, int]]:
    """``nodeN/numastat`` counters (page allocations since boot) from each node's ``(numa_hit, other_node,
    interleave_hit)``, completed so that they add up as the kernel counts them: a page meant for node A but taken
    from node B is a ``numa_miss`` on B and a ``numa_foreign`` on A, and ``local_node + other_node`` (split by the
    allocating CPU's node) = ``numa_hit + numa_miss`` (the pages this node gave). Two nodes here, so one node's
    foreign is the other's miss."""
    nodes = sorted(drawn)
    misses = {node: rng.randrange(10**5, 10**7) for node in nodes}
    counters = {}
    for position, node in enumerate(nodes):
        hit, other, interleave = drawn[node]
        meant_here = misses[nodes[(position + 1) % len(nodes)]]
        counters[node] = {
            "numa_hit": hit, "numa_miss": misses[node], "numa_foreign": meant_here, "interleave_hit": interleave,
            "local_node": hit + misses[node] - other, "other_node": other,
        }  # fmt: skip
    return counters


def proc_vmstat(rng: random.Random, nodes_kb: Sequence[Mapping[str, int]], numa: Mapping[int, Mapping[str, int]],
                mem_total_kb: int) -> str:  # fmt: skip
    """/proc/vmstat with every key of VMSTAT_KEYS: page gauges from the nodes' meminfo (in pages), NUMA events
    summed from numastat, event counters of a host up for weeks, and 0 for what a node without swap never counts."""
    pages = {name: sum(node[name] for node in nodes_kb) // PAGE_KB for name in nodes_kb[0]}

    def summed(field: str) -> int:
        return sum(counters[field] for counters in numa.values())

    mem_pages = mem_total_kb // PAGE_KB
    derived = {
        "nr_free_pages": pages["MemFree"], "nr_zone_inactive_anon": pages["Inactive(anon)"],
        "nr_zone_active_anon": pages["Active(anon)"], "nr_zone_inactive_file": pages["Inactive(file)"],
        "nr_zone_active_file": pages["Active(file)"], "nr_zone_unevictable": pages["Unevictable"],
        "nr_zone_write_pending": pages["Dirty"], "nr_mlock": pages["Mlocked"],
        "nr_inactive_anon": pages["Inactive(anon)"], "nr_active_anon": pages["Active(anon)"],
        "nr_inactive_file": pages["Inactive(file)"], "nr_active_file": pages["Active(file)"],
        "nr_unevictable": pages["Unevictable"], "nr_slab_reclaimable": pages["SReclaimable"],
        "nr_slab_unreclaimable": pages["SUnreclaim"], "nr_anon_pages": pages["AnonPages"], "nr_mapped": pages["Mapped"],
        "nr_file_pages": pages["FilePages"], "nr_dirty": pages["Dirty"], "nr_shmem": pages["Shmem"],
        "nr_anon_transparent_hugepages": pages["AnonHugePages"] // 512,
        "nr_kernel_stack": pages["KernelStack"] * PAGE_KB,  # counted in kB, not pages
        "nr_page_table_pages": pages["PageTables"], "numa_hit": summed("numa_hit"), "numa_miss": summed("numa_miss"),
        "numa_foreign": summed("numa_foreign"), "numa_interleave": summed("interleave_hit"),
        "numa_local": summed("local_node"), "numa_other": summed("other_node"),
        "nr_dirty_threshold": mem_pages // 5, "nr_dirty_background_threshold": mem_pages // 10,
    }  # fmt: skip
    lines = []
    for key in VMSTAT_KEYS:
        if key in derived:
            value = derived[key]
        elif key.startswith(_VMSTAT_ZERO_PREFIXES):
            value = 0
        elif key.startswith("nr_"):
            value = rng.randrange(10**2, 10**6)
        else:  # an event counter since boot
            value = rng.randrange(10**5, 10**11)
        lines.append(f"{key} {value}\n")
    return "".join(lines)


# --------------------------------------------------------------------------------------------------- writing
def write_files(directory: str, files: Mapping[str, str]) -> None:
    """Plain writes (the tree has ~8,000 of these files at 384 CPUs; FakeHost.write's Path calls cost more)."""
    os.makedirs(directory, exist_ok=True)
    for name, text in files.items():
        with open(f"{directory}/{name}", "w") as handle:
            handle.write(text)


__all__ = [
    "BTIME",
    "UPTIME_S",
    "VMSTAT_KEYS",
    "cpufreq_policy",
    "node_meminfo",
    "nr_irqs",
    "numastat",
    "proc_stat",
    "proc_vmstat",
    "thermal_throttle",
    "write_files",
]
