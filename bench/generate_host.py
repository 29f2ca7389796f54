"""Generate a large fake RKE2 GPU node for the benchmarks: sysfs, procfs, cgroups, kubelet files, runtime bundles.

    .venv/bin/python bench/generate_host.py --out /tmp/host384 --cpus 384 --gpus 8 --pods 300 --irqs 2000 \\
        --processes 5000

Only ``--out`` is required: ``--cpus`` defaults to 384 and every other size scales with it from the 384-CPU host of
the "numawatch core" benchmark (``HostSpec.scaled``), so ``--cpus 32`` alone gives the small end of its range.
The tree is written with the project's fake-host builders (tests/fakehost: topology, gpus, pods, kubelet, kernel),
so it has exactly the shapes the test suite checks numawatch against. The same seed gives the same tree.

What the node looks like (2 sockets x ``cpus / 4`` cores x SMT2, one NUMA node per socket, interleaved numbering):

- isolation: housekeeping = the first ``cores_per_socket // 24`` cores of each socket (at least one, both threads),
  ``isolcpus=domain,managed_irq``, ``nohz_full`` and ``rcu_nocbs`` on every other CPU; ``irqaffinity`` on the
  housekeeping CPUs; 1 GiB huge pages reserved at boot, as many per node as the node has GPUs x 4.
- kubelet (RKE2 ``kubelet-arg``): static / single-numa-node / pod / Static, ``reserved-cpus`` = housekeeping,
  ``reserved-memory`` coherent with system-/kube-reserved and the eviction threshold; valid ``cpu_manager_state``,
  ``memory_manager_state`` and device-plugin checkpoint.
- GPUs: NVIDIA H100s split evenly over the two nodes, one Guaranteed single-container GPU pod per GPU pinned on
  whole isolated cores of its GPU's node, memory (and 1 GiB pages) there. A few more Guaranteed CPU-only pods
  (tokenisers) are pinned on isolated cores; every other pod is Burstable or BestEffort on the shared pool, 1-4
  containers each plus the pause sandbox (300 pods -> 860 container cgroups).
- PCI: one ConnectX NIC per GPU (RoCE: an RDMA device ``mlx5_<n>`` each) plus a management NIC, and NVMe drives
  (not GPUs, so the GPU filter works). Each GPU and NIC sits on a host bridge of its own (GPU-NIC path NODE).
- cpuidle: intel_idle's POLL, C1, C1E and C6 on every CPU, C6 disabled on the isolated ones; the node registers with
  the reference taint and label (RKE2 ``node-taint``, ``node-label``); pods run in system namespaces or the
  inference pods' one.
- IRQs: ``--irqs`` rows in /proc/interrupts (the legacy IO-APIC lines, one MSI-X vector per GPU, per NVMe an admin
  queue and a managed spread of I/O queues, and the NICs' completion vectors making up the rest) with ``CPU<n>``
  columns for every online CPU (~8 MB at 384 CPUs x 2,000 IRQs) and ``/proc/irq/<n>/`` affinity files. Device IRQs
  are routed to housekeeping CPUs; some carry boot-time counts on isolated CPUs, as a host up for months does. The
  NVMe spread has one group per housekeeping core, so ``managed_irq`` steering always finds a housekeeping CPU and
  the clean host stays clean (a drive with more queues than housekeeping cores would put some on isolated CPUs).
- processes: ``--processes`` ``/proc/<pid>/`` entries with ``stat``, ``status``, ``comm``, ``cgroup`` and
  ``schedstat``: systemd, per-CPU kernel threads, host daemons (one containerd shim per pod), the pause processes
  and the containers' processes.
- kernel knobs as the reference profile wants them (numa_balancing 0, swappiness 0, THP madvise, the performance
  governor), per-node numastat; no irqbalance running and no uncore PMUs (the intersocket source reports itself
  down, as on a VM). ``/proc/{stat,meminfo,vmstat,loadavg}``, which numawatch does not read, are there for
  node_exporter, so bench/run.py can measure it on the same tree.
- what node_exporter's cpu, cpufreq, meminfo_numa and vmstat collectors read, complete as on a real intel_pstate
  node (bench/node_exporter_files.py): per CPU the intel_pstate policy files (frequencies, driver, governors,
  ``scaling_setspeed``...) and ``thermal_throttle/``, /proc/stat with every IRQ number below ``nr_irqs``, /proc/vmstat
  with a real kernel's 173 keys, complete ``nodeN/meminfo`` and ``numastat``. They come from a random stream of
  their own, so everything else is byte for byte what the same seed gave before they were added.

Planted drift (unless ``--clean``), so the checks do real work; ``GeneratedHost.planted`` lists the check IDs they
must fire: a GPU pod's cpuset reset to every CPU (``container_cpuset_drift``), a GPU pod with most of its memory on
the remote node (``container_memory_remote``), a Burstable pod holding a GPU (``pod_not_guaranteed``), a NIC vector
moved onto an isolated CPU (``irq_on_isolated_cpu``), THP set to ``always`` (``thp_enabled``) and one Burstable pod
in a namespace of its own (``node_workload_not_isolated``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
_TESTS = _BENCH.parent / "tests"
for _directory in (_TESTS, _BENCH):  # the fake-host builders live with the tests, node_exporter's files here
    if str(_directory) not in sys.path:
        sys.path.insert(0, str(_directory))

import node_exporter_files as nefiles  # noqa: E402
from fakehost import FakeHost  # noqa: E402
from fakehost.gpus import CLASS_ETHERNET, FakeGpu, add_gpu, add_pci_device, add_rdma_device  # noqa: E402
from fakehost.kernel import FakeIrq, add_cpuidle, add_irqs, add_kernel_settings, add_numastat  # noqa: E402
from fakehost.kubelet import (  # noqa: E402
    kubelet_memory_machine_state,
    write_cpu_manager_state,
    write_device_checkpoint,
    write_kubelet_config,
    write_memory_manager_state,
)
from fakehost.pods import ContainerSpec, PodHandle, add_kubepods, add_pod, set_container_cpus  # noqa: E402
from fakehost.topology import TopologyLayout, add_topology  # noqa: E402
from numawatch.cpuset import CPUSet, format_cpulist  # noqa: E402
from numawatch.model.kubelet import DeviceAssignment, MemoryBlock  # noqa: E402
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
GPU_RESOURCE = "nvidia.com/gpu"
SOCKETS = 2
THREADS_PER_CORE = 2
CLASS_NVME = "0x010802"
MELLANOX, CX7 = "0x15b3", "0x1021"
SAMSUNG, PM1743 = "0x144d", "0xa826"

# The large host; other sizes scale from it (HostSpec.scaled).
BASE_CPUS, BASE_GPUS, BASE_PODS, BASE_IRQS, BASE_PROCESSES = 384, 8, 300, 2000, 5000
# 1-4 application containers per Burstable/BestEffort pod, 28 per 15 pods: with the pinned pods' and the sandboxes,
# 300 pods make 860 container cgroups.
CONTAINERS_PER_POD = (1,) * 7 + (2,) * 5 + (3,) * 1 + (4,) * 2
APP_CONTAINERS_PER_POD = 28 / 15

# What runs on a GPU node kept for inference (knob 10): node agents in the system namespaces and the inference pods'
# helpers. Ten names, as many as the draw has always picked from, so the random stream is what it was.
_NAMESPACES = ("kube-system", "gpu-operator", "inference", "numawatch", "kube-system", "inference", "gpu-operator",
               "inference", "kube-system", "inference")  # fmt: skip
FOREIGN_NAMESPACE = "analytics"  # planted: a pod that does not belong on the node
_APPS = ("api", "worker", "cache", "indexer", "scheduler", "web", "router", "ingest", "exporter", "agent", "queue",
         "backend", "frontend", "sync", "compactor")  # fmt: skip
_SIDECARS = ("istio-proxy", "log-shipper", "metrics", "config-reloader")
_DAEMONS = ("rke2", "containerd", "kubelet", "systemd-journal", "systemd-udevd", "systemd-logind", "dbus-daemon",
            "chronyd", "sshd", "rsyslogd", "cron", "agetty", "nvidia-persiste", "nv-hostengine", "multipathd",
            "polkitd", "lldpd", "auditd", "node-problem-de", "fluent-bit")  # fmt: skip
# The daemon whose place irqbalance takes when it runs (lldpd is the least needed on a GPU node).
IRQBALANCE_SLOT = _DAEMONS.index("lldpd")

IRQBALANCE_MODES = {
    "none": "not running",
    "service": "running in irqbalance.service, its control socket @irqbalance<pid>.sock in /proc/1/net/unix",
    "unlisted": "running outside its unit (started from a login session) with no socket in /proc/1/net/unix (an "
                "irqbalance older than 1.4, or one in another network namespace)",
}  # fmt: skip
MANAGED_MODES = {
    "read-only": "managed IRQs' smp_affinity is read-only (0444), as Linux 6.12 and later show it",
    "writable": "every smp_affinity is 0644, as before Linux 6.12: managed IRQs are told by their vectors' spread",
}
NUMBERINGS = ("interleaved", "packed")
CGROUP_DRIVERS = ("systemd", "cgroupfs")
# Debian's /etc/default/irqbalance as the package installs it: every setting commented out, so irqbalance bans the
# isolated and nohz_full CPUs by itself.
DEBIAN_IRQBALANCE_DEFAULTS = (
    "# irqbalance is a daemon process that distributes interrupts across\n"
    "# CPUs on SMP systems.  The default is to rebalance once every 10\n"
    "# seconds.  This is the environment file that is specified to systemd via the\n"
    "# EnvironmentFile key in the service unit file (or via whatever method the init\n"
    "# system you're using has).\n"
    "#\n"
    "#IRQBALANCE_ONESHOT=\n"
    "#IRQBALANCE_BANNED_CPULIST=\n"
    "#IRQBALANCE_ARGS=\n"
)


@dataclass(frozen=True)
class HostSpec:
    """The size of the generated node. ``cpus`` must be a multiple of 4 (2 sockets x SMT2)."""

    cpus: int = BASE_CPUS
    gpus: int = BASE_GPUS
    pods: int = BASE_PODS
    irqs: int = BASE_IRQS
    processes: int = BASE_PROCESSES
    seed: int = 1
    drift: bool = True
    cgroup_version: int = 2
    # The layout (the defaults write one tree, byte for byte, that every figure compares with; SHAPES varies it).
    sockets: int = SOCKETS
    nodes_per_socket: int = 1  # sub-NUMA clustering (SNC / NPS) when more than 1
    numbering: str = "interleaved"  # or "packed" (SMT siblings adjacent): tests/fakehost/topology.py
    cgroup_driver: str = "systemd"  # or "cgroupfs"
    guaranteed: float = 0.0  # the share of pods that are Guaranteed (at least the GPU and tokeniser pods)
    irqbalance: str = "none"  # IRQBALANCE_MODES
    socket_table: bool = True  # /proc/1/net/unix present (where irqbalance's socket shows)
    # The pause sandboxes' memory.numa_stat: absent where the memory controller is not delegated to them.
    sandbox_numa_stat: bool = True
    managed_modes: str = "read-only"  # MANAGED_MODES: what smp_affinity's mode says about managed IRQs

    @classmethod
    def scaled(cls, cpus: int, **overrides: object) -> HostSpec:
        """A node of ``cpus`` CPUs with pods, IRQs and processes in the proportions of the 384-CPU host
        (32 CPUs: 4 GPUs, 25 pods, 167 IRQs, 417 processes)."""
        ratio = cpus / BASE_CPUS
        sizes: dict[str, object] = {
            "cpus": cpus,
            "gpus": BASE_GPUS if cpus >= 128 else 4,
            "pods": max(4, round(BASE_PODS * ratio)),
            "irqs": max(50, round(BASE_IRQS * ratio)),
            "processes": max(100, round(BASE_PROCESSES * ratio)),
        }
        sizes.update(overrides)
        return cls(**sizes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Shape:
    """A benchmark tree: a name, what it models, its size and layout, and whether its pods and counters
    move while it is measured (bench/churn.py ``--pods``)."""

    name: str
    description: str
    spec: HostSpec
    churn: bool = False


# The trees the engine is measured on (bench/shapes.py measures them all side by side with node_exporter).
# Their layouts differ on purpose, so that no optimisation can lean on one tree's shape: CPU numbering packed and
# interleaved, cgroup v1 and v2, the systemd and cgroupfs drivers, one and four NUMA nodes per socket, irqbalance not
# running, running as its unit with its socket listed, and running unseen (no socket, outside its unit), the socket
# table present or absent, managed IRQs told by their read-only mode or only by their vectors' spread. Every tree
# has intel_pstate policies per CPU and a share of Guaranteed pods as on a shared production node (a third).
SHAPES: dict[str, Shape] = {
    shape.name: shape
    for shape in (
        Shape("host32", "the 32-CPU host: 2 x 8 cores SMT2, packed numbering, cgroup v1 with the cgroupfs driver, "
                        "irqbalance not running",
              HostSpec(cpus=32, gpus=4, pods=25, irqs=167, processes=417, numbering="packed", cgroup_version=1,
                       cgroup_driver="cgroupfs", guaranteed=0.3)),
        Shape("a192", "(a) 192 CPUs (2 x 48 cores SMT2), 110 pods (the kubelet's default max-pods), 1,500 processes; "
                      "packed numbering, cgroup v2 with the cgroupfs driver, irqbalance as its unit with its socket "
                      "listed, a kernel before 6.12 (every smp_affinity writable)",
              HostSpec(cpus=192, gpus=8, pods=110, irqs=1000, processes=1500, numbering="packed",
                       cgroup_driver="cgroupfs", guaranteed=0.3, irqbalance="service", managed_modes="writable")),
        Shape("b384", "(b) 384 CPUs (2 x 96 cores SMT2), 300 pods / 860 container cgroups, 5,000 processes, 2,000 "
                      "IRQs, 8 GPUs: the issue's tree; interleaved numbering, cgroup v2 with the systemd driver, "
                      "irqbalance running outside its unit and no /proc/1/net/unix (found only by reading every "
                      "process's comm), a kernel before 6.12",
              HostSpec(cpus=384, gpus=8, pods=300, irqs=2000, processes=5000, guaranteed=0.3, irqbalance="unlisted",
                       socket_table=False, managed_modes="writable")),
        Shape("c768", "(c) 768 CPUs (2 sockets x 192 cores SMT2, SNC: 4 NUMA nodes per socket), 8 GPUs, 110 pods, "
                      "6,000 processes, 2,000 IRQs; interleaved numbering, cgroup v1 with the systemd driver, "
                      "irqbalance running outside its unit with the socket table present (today's source misses it), "
                      "managed IRQs read-only (6.12)",
              HostSpec(cpus=768, gpus=8, pods=110, irqs=2000, processes=6000, nodes_per_socket=4, cgroup_version=1,
                       guaranteed=0.3, irqbalance="unlisted")),
        Shape("b384nosandboxnuma", "the tree of (b) with no memory.numa_stat in the pause sandboxes (their memory "
                                   "controller not delegated): a missing optional file that once made serve read every "
                                   "cgroup file at every evaluation",
              HostSpec(cpus=384, gpus=8, pods=300, irqs=2000, processes=5000, guaranteed=0.3, irqbalance="unlisted",
                       socket_table=False, managed_modes="writable", sandbox_numa_stat=False)),
        Shape("e384noirqbalance12k", "384 CPUs, 300 pods, 12,000 processes, no irqbalance and no /proc/1/net/unix: "
                                     "the search for irqbalance may read only the comm of processes it has not seen",
              HostSpec(cpus=384, gpus=8, pods=300, irqs=2000, processes=12000, guaranteed=0.3, irqbalance="none",
                       socket_table=False, managed_modes="writable")),
        Shape("d384churn", "(d) the tree of (b) with pods coming and going (one replaced per second, a pinned one "
                           "every 30 s) and counters moving between evaluations",
              HostSpec(cpus=384, gpus=8, pods=300, irqs=2000, processes=5000, guaranteed=0.3, irqbalance="unlisted",
                       socket_table=False, managed_modes="writable"),
              churn=True),
    )
}  # fmt: skip


@dataclass(frozen=True)
class GeneratedHost:
    """What was written, for the harness and the test to compare numawatch's reading with."""

    root: str
    spec: HostSpec
    online_cpus: int
    isolated_cpus: int
    housekeeping_cpus: str
    gpus: int
    pods: int
    app_containers: int
    container_cgroups: int  # app containers + sandboxes
    pinned_containers: int  # containers with exclusive CPUs in cpu_manager_state
    irqs: int
    processes: int
    interrupts_bytes: int
    planted: tuple[str, ...] = ()  # check IDs the planted drift must fire
    seconds: float = 0.0
    qos: dict[str, int] = field(default_factory=dict)  # pods per QoS class
    numa_nodes: int = 0
    exclusive_cpus: int = 0  # CPUs held exclusively (cpu_manager_state entries)
    irqbalance_pid: int | None = None  # the running irqbalance's PID, None when it does not run
    managed_irqs: int = 0  # IRQs with a managed (kernel-owned) affinity
    files: int = 0  # files and links written
    bytes_on_disk: int = 0  # what they take on disk (allocated blocks)


@dataclass
class _Pod:
    uid: str
    namespace: str
    name: str
    qos: str
    containers: list[ContainerSpec]
    node: int | None = None  # NUMA node of a pinned pod
    gpu: int | None = None  # index of its GPU
    exclusive: dict[str, CPUSet] = field(default_factory=dict)  # container -> exclusive CPUs
    memory: dict[str, tuple[MemoryBlock, ...]] = field(default_factory=dict)  # container -> memory blocks


@dataclass(frozen=True)
class _Proc:
    pid: int
    comm: str
    ppid: int
    cpu: int  # the CPU it last ran on (stat field 39)
    kthread: bool = False
    cgroup: str = "/"
    allowed: CPUSet = frozenset()
    in_pod: bool = False  # add_pod already wrote its comm, status and cgroup


# --------------------------------------------------------------------------------------------------- layout
def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _suffix(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(length))


def _gpu_address(index: int, count: int) -> str:
    """PCI addresses as on an 8-GPU HGX board: the first half behind socket 0's root ports, the rest socket 1's."""
    buses = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
    if count <= len(buses):
        half = (count + 1) // 2
        bus = buses[index] if index < half else buses[4 + index - half]
    else:
        bus = 0x10 + index * 4
    return f"0000:{bus:02x}:00.0"


def _container_counts(rng: random.Random, pods: int, total: int) -> list[int]:
    """1-4 containers for each of ``pods`` pods, summing to ``total`` (within what 1-4 allows)."""
    counts = [rng.choice(CONTAINERS_PER_POD) for _ in range(pods)]
    total = min(max(total, pods), 4 * pods)
    while sum(counts) != total:
        index = rng.randrange(pods)
        if sum(counts) < total and counts[index] < 4:
            counts[index] += 1
        elif sum(counts) > total and counts[index] > 1:
            counts[index] -= 1
    return counts


def _numa_split(rng: random.Random, total: int, nodes: int) -> dict[int, int]:
    first = rng.randrange(nodes)
    share = rng.uniform(0.5, 0.9)
    split = {node: 0 for node in range(nodes)}
    split[first] = int(total * share)
    split[(first + 1) % nodes] += total - split[first]
    return split


def _remote_node(layout: TopologyLayout, node: int) -> int:
    """The node another socket's (same position) is for ``node``: where a pod's remote memory lands."""
    count = len(layout.cpu_nodes)
    return (node + layout.nodes_per_socket) % count if count > 1 else node


def _plan_pods(
    spec: HostSpec,
    rng: random.Random,
    layout: TopologyLayout,
    housekeeping_cores: int,
    gpu_nodes: list[int],
    mem_per_node: int,
) -> list[_Pod]:
    """Every pod with its containers, QoS and (for the pinned ones) exclusive cores and memory blocks.

    ``housekeeping_cores`` is per NUMA node (its first cores); a node's exclusive cores are taken after them, and one
    core per node stays in the shared pool."""
    nodes = list(layout.cpu_nodes)
    cores_per_node = layout.cores_per_socket // layout.nodes_per_socket
    isolated_cores = cores_per_node - housekeeping_cores
    gpus_per_node = max(gpu_nodes.count(node) for node in nodes) if gpu_nodes else 0
    gpu_cores = max(1, isolated_cores // max(1, gpus_per_node * 3))
    next_core = dict.fromkeys(nodes, housekeeping_cores)  # next free core index per node
    pods: list[_Pod] = []

    def take(node: int, cores: int) -> CPUSet:
        cpus = layout.whole_cores(node, cores, skip=next_core[node])
        next_core[node] += cores
        return cpus

    burstable_gpu = 2 if spec.drift and spec.gpus >= 3 else None
    for index, node in enumerate(gpu_nodes[: spec.pods]):
        name = f"vllm-{index}-{_suffix(rng, 5)}"
        uid = _uid(rng)
        block = mem_per_node // 16  # 32 GiB on the 384-CPU host's 512 GiB nodes
        remote = _remote_node(layout, node)
        numa = {node: block * 3 // 4, remote: min(200 * MiB, block // 20)}
        if spec.drift and index == 1:
            numa = {node: block // 4, remote: block // 2}  # planted: container_memory_remote
        if index == burstable_gpu:  # planted: pod_not_guaranteed (a limit forgotten: requests != limits)
            vllm = ContainerSpec("vllm", "", set(nodes), numa)
            pods.append(_Pod(uid, "inference", name, QOS_BURSTABLE, [vllm], gpu=index))
            continue
        cpus = take(node, gpu_cores)
        containers = [ContainerSpec("vllm", cpus, {node}, numa)]
        exclusive = {"vllm": cpus}
        memory = {"vllm": (MemoryBlock((node,), "hugepages-1Gi", 2 * GiB), MemoryBlock((node,), "memory", block))}
        pods.append(_Pod(uid, "inference", name, QOS_GUARANTEED, containers, node, index, exclusive, memory))

    pinned = max(1, spec.pods // 20) if spec.pods > len(pods) else 0
    for index in range(pinned):
        node = nodes[index % len(nodes)]
        cores = 2 if cores_per_node - next_core[node] >= 2 + 1 else 1
        if cores_per_node - next_core[node] < cores + 1:  # keep a free core per node in the shared pool
            break
        cpus = take(node, cores)
        block = mem_per_node // 128  # 4 GiB on 512 GiB nodes
        memory = {"tokenizer": (MemoryBlock((node,), "memory", block),)}
        pods.append(
            _Pod(_uid(rng), "inference", f"tokenizer-{index}-{_suffix(rng, 5)}", QOS_GUARANTEED,
                 [ContainerSpec("tokenizer", cpus, {node}, {node: block * 3 // 4})], node, None, {"tokenizer": cpus},
                 memory)
        )  # fmt: skip

    rest = spec.pods - len(pods)
    fixed = sum(len(pod.containers) for pod in pods)
    counts = _container_counts(rng, rest, round(spec.pods * APP_CONTAINERS_PER_POD) - fixed) if rest > 0 else []
    # More Guaranteed pods where the share asks for them, spread evenly among the others: platform and batch pods
    # with requests = limits. Every other one asks for a whole CPU (an exclusive core) while its node has cores to
    # spare; the others ask for fractions and share the pool. The Memory Manager binds each to one node.
    guaranteed_now = sum(pod.qos == QOS_GUARANTEED for pod in pods)
    extra = min(rest, max(0, round(spec.pods * spec.guaranteed) - guaranteed_now))
    guaranteed_at = {position * rest // extra for position in range(extra)} if extra else set()
    made = 0
    for position, count in enumerate(counts):
        namespace = rng.choice(_NAMESPACES)
        app = rng.choice(_APPS)
        if position in guaranteed_at:
            name = f"{app}-{_suffix(rng, 9)}-{_suffix(rng, 5)}"
            pods.append(_guaranteed_pod(rng, layout, nodes[made % len(nodes)], namespace, app, name, count,
                                        made % 2 == 0, take, next_core, cores_per_node))  # fmt: skip
            made += 1
            continue
        qos = QOS_BURSTABLE if rng.random() < 0.7 else QOS_BESTEFFORT
        containers = []
        for index in range(count):
            cname = app if index == 0 else _SIDECARS[(index - 1) % len(_SIDECARS)]
            quota = rng.choice((50000, 100000, 200000, 400000)) if qos == QOS_BURSTABLE else None
            numa = _numa_split(rng, rng.randrange(20, 2000) * MiB, len(nodes))
            containers.append(ContainerSpec(cname, "", set(nodes), numa, cpu_quota_us=quota))
        name = f"{app}-{_suffix(rng, 9)}-{_suffix(rng, 5)}"
        pods.append(_Pod(_uid(rng), namespace, name, qos, containers))
    return pods


def _guaranteed_pod(
    rng: random.Random,
    layout: TopologyLayout,
    node: int,
    namespace: str,
    app: str,
    name: str,
    count: int,
    wants_core: bool,
    take: Callable[[int, int], CPUSet],
    next_core: dict[int, int],
    cores_per_node: int,
) -> _Pod:
    """A Guaranteed pod of ``count`` containers bound to ``node``'s memory: its first container on an exclusive core
    when ``wants_core`` and the node keeps a spare core after it, every other container on the shared pool."""
    remote = _remote_node(layout, node)
    containers: list[ContainerSpec] = []
    exclusive: dict[str, CPUSet] = {}
    memory: dict[str, tuple[MemoryBlock, ...]] = {}
    for index in range(count):
        cname = app if index == 0 else _SIDECARS[(index - 1) % len(_SIDECARS)]
        size = rng.randrange(256, 4096) * MiB
        resident = size * rng.randrange(40, 90) // 100
        numa = {node: resident, remote: resident // 200} if remote != node else {node: resident}
        cpus: CPUSet | str = ""
        if index == 0 and wants_core and cores_per_node - next_core[node] >= 2:
            cpus = take(node, 1)
            exclusive[cname] = cpus
        quota = 100000 * (len(cpus) if cpus else 1) if cpus else rng.choice((20000, 50000, 250000))
        containers.append(ContainerSpec(cname, cpus, {node}, numa, cpu_quota_us=quota))
        memory[cname] = (MemoryBlock((node,), "memory", size),)
    return _Pod(_uid(rng), namespace, name, QOS_GUARANTEED, containers, node, None, exclusive, memory)


# --------------------------------------------------------------------------------------------------- processes
def _status(proc: _Proc, mems: str) -> str:
    """/proc/<pid>/status of a host process or kernel thread (kernel threads have no memory lines); ``mems``: the
    node list processes may allocate on."""
    memory = "" if proc.kthread else (
        "VmPeak:\t  812340 kB\nVmSize:\t  812340 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\n"
        "VmHWM:\t   40960 kB\nVmRSS:\t   40960 kB\nRssAnon:\t   30720 kB\nRssFile:\t   10240 kB\n"
        "RssShmem:\t       0 kB\nVmData:\t  120000 kB\nVmStk:\t     132 kB\nVmExe:\t   30000 kB\n"
        "VmLib:\t    8000 kB\nVmPTE:\t     400 kB\nVmSwap:\t       0 kB\nHugetlbPages:\t       0 kB\n"
    )
    cpus = proc.allowed
    return (
        f"Name:\t{proc.comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{proc.pid}\nNgid:\t0\nPid:\t{proc.pid}\n"
        f"PPid:\t{proc.ppid}\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t \n"
        f"NStgid:\t{proc.pid}\nNSpid:\t{proc.pid}\nNSpgid:\t{proc.pid}\nNSsid:\t{proc.pid}\n"
        f"Kthread:\t{int(proc.kthread)}\n{memory}"
        "CoreDumping:\t0\nTHP_enabled:\t1\nThreads:\t1\nSigQ:\t0/4125718\n"
        "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n"
        "SigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\nCapInh:\t0000000000000000\n"
        "CapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n"
        "CapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n"
        f"Cpus_allowed_list:\t{format_cpulist(cpus)}\nMems_allowed_list:\t{mems}\n"
        "voluntary_ctxt_switches:\t1843\nnonvoluntary_ctxt_switches:\t12\n"
    )


def _stat(proc: _Proc, rng: random.Random) -> str:
    """/proc/<pid>/stat: the 52 fields of fs/proc/array.c do_task_stat (ticks of 1/100 s)."""
    utime, stime = rng.randrange(0, 500000), rng.randrange(0, 100000)
    flags = 0x208040 if proc.kthread else 0x400100  # PF_KTHREAD | PF_NOFREEZE ... / PF_RANDOMIZE | PF_SUPERPRIV
    vsize, rss = (0, 0) if proc.kthread else (831836160, 10240)
    fields = [
        proc.pid, f"({proc.comm})", "S", proc.ppid, proc.pid, proc.pid, 0, -1, flags,
        rng.randrange(100, 100000), 0, rng.randrange(0, 50), 0, utime, stime, 0, 0, 20, 0, 1, 0,
        rng.randrange(100, 10**8), vsize, rss, "18446744073709551615", 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 17,
        proc.cpu, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]  # fmt: skip
    return " ".join(map(str, fields)) + "\n"


def _cgroup_line(version: int, path: str) -> str:
    if version == 2:
        return f"0::{path}\n"
    return f"12:cpuset:{path}\n11:memory:{path}\n4:cpu,cpuacct:{path}\n1:name=systemd:{path}\n0::/\n"


def _write_proc(root: str, proc: _Proc, version: int, rng: random.Random, *, full: bool, mems: str = "0-1") -> None:
    """``stat`` and ``schedstat`` (and, unless add_pod already wrote them, ``comm``, ``status``, ``cgroup``)."""
    directory = f"{root}/proc/{proc.pid}"
    os.makedirs(directory, exist_ok=True)
    files = {
        "stat": _stat(proc, rng),
        "schedstat": f"{rng.randrange(10**6, 10**12)} {rng.randrange(0, 10**9)} {rng.randrange(10, 10**6)}\n",
    }
    if full:
        files |= {"comm": proc.comm + "\n", "status": _status(proc, mems), "cgroup": _cgroup_line(version, proc.cgroup)}
    for name, text in files.items():
        with open(f"{directory}/{name}", "w") as handle:
            handle.write(text)


def _kernel_threads(layout: TopologyLayout, count: int, housekeeping: CPUSet) -> list[tuple[str, int, CPUSet]]:
    """(comm, cpu, allowed CPUs) of ``count`` kernel threads: the global ones, then per-CPU ones CPU by CPU."""
    online = sorted(layout.online)
    first = min(housekeeping)
    threads: list[tuple[str, int, CPUSet]] = [
        (name, first, housekeeping)
        for name in ("kthreadd", "rcu_gp", "rcu_par_gp", "slub_flushwq", "netns", "kauditd", "khungtaskd", "oom_reaper",
                     "writeback", "kcompactd0", "kcompactd1", "ksmd", "khugepaged", "kintegrityd", "kblockd",
                     "kswapd0", "kswapd1", "watchdogd", "nvme-wq", "jbd2/nvme0n1p2-", "ext4-rsv-conver")
    ]  # fmt: skip
    per_cpu = ("cpuhp/{}", "migration/{}", "ksoftirqd/{}", "kworker/{}:0H-kblockd", "rcuc/{}", "kworker/{}:1-events")
    for template in per_cpu:
        for cpu in online:
            threads.append((template.format(cpu)[:15], cpu, frozenset({cpu})))
    return threads[:count]


# --------------------------------------------------------------------------------------------------- IRQs
def _irq_rows(
    spec: HostSpec,
    rng: random.Random,
    layout: TopologyLayout,
    housekeeping: CPUSet,
    gpus: list[tuple[str, int]],
    nics: list[tuple[str, int]],
    nvmes: list[tuple[str, int]],
) -> tuple[list[FakeIrq], dict[str, list[int]]]:
    """``spec.irqs`` device IRQs and, per PCI address, the IRQ numbers of its MSI-X vectors."""
    isolated = sorted(layout.online - housekeeping)
    hk_of = {node: sorted(housekeeping & layout.node_cpus(node)) for node in layout.cpu_nodes}
    vectors: dict[str, list[int]] = {}
    rows: list[FakeIrq] = []

    def history(target: int) -> dict[int, int]:
        """Counts of a device IRQ: most on its CPU, some on other housekeeping CPUs, now and then a few from boot
        (before the affinity was set) on an isolated CPU."""
        counts = {target: rng.randrange(10**4, 10**9)}
        for _ in range(rng.randrange(0, 3)):
            counts[rng.choice(sorted(housekeeping))] = rng.randrange(1, 10**6)
        if isolated and rng.random() < 0.1:
            counts[rng.choice(isolated)] = rng.randrange(1, 50)
        return counts

    legacy = [(0, "timer", "2-edge"), (8, "rtc0", "8-edge"), (9, "acpi", "9-fasteoi")]
    for irq, name, hwirq in legacy[: spec.irqs]:
        rows.append(FakeIrq(irq, name, housekeeping, frozenset({min(housekeeping)}), history(min(housekeeping)),
                            chip="IO-APIC", hwirq=hwirq))  # fmt: skip
    next_irq = 24

    def device(address: str, node: int, name: str, affinity: CPUSet, target: int, *, managed: bool = False,
               vector: int = 0) -> None:  # fmt: skip
        nonlocal next_irq
        if len(rows) >= spec.irqs:
            return
        rows.append(FakeIrq(next_irq, name, affinity, frozenset({target}), history(target), managed=managed,
                            chip=f"IR-PCI-MSIX-{address}", hwirq=f"{vector}-edge", node=node))  # fmt: skip
        vectors.setdefault(address, []).append(next_irq)
        next_irq += 1

    for address, node in gpus:
        device(address, node, "nvidia", frozenset(hk_of[node]), hk_of[node][0])
    for number, (address, node) in enumerate(nvmes):
        device(address, node, f"nvme{number}q0", frozenset(hk_of[node]), hk_of[node][0])
        # A managed spread of I/O queues: one group per housekeeping core, each socket's isolated cores dealt out
        # among that socket's housekeeping cores (the kernel spreads node by node).
        hk_cores = sorted(layout.cores_of(housekeeping))
        groups: dict[tuple[int, int], set[int]] = {core: set(layout.core_cpus(*core)) for core in hk_cores}
        for socket in range(layout.sockets):
            mine = [core for core in hk_cores if core[0] == socket]
            theirs = sorted(core for core in layout.cores_of(isolated) if core[0] == socket)
            for position, core in enumerate(theirs):
                groups[mine[position % len(mine)]] |= layout.core_cpus(*core)
        for queue, core in enumerate(hk_cores, start=1):
            target = layout.cpu(*core)
            device(address, node, f"nvme{number}q{queue}", frozenset(groups[core]), target, managed=True, vector=queue)
    # The NICs' vectors fill the rest, dealt out round-robin; each is pinned to a housekeeping CPU of its node.
    per_nic = {address: 0 for address, _ in nics}
    while len(rows) < spec.irqs and nics:
        for address, node in nics:
            if len(rows) >= spec.irqs:
                break
            vector = per_nic[address]
            per_nic[address] += 1
            name = "mlx5_async" if vector == 0 else f"mlx5_comp{vector - 1}"
            name += f"@pci:{address}"
            cpus = hk_of[node]
            device(address, node, name, frozenset(cpus), cpus[vector % len(cpus)], vector=vector)
    return rows, vectors


def _named_rows(rng: random.Random, online: list[int], housekeeping: CPUSet) -> dict[str, dict[int, int]]:
    """The architecture rows: the tick busy on housekeeping CPUs, nearly silent on nohz_full ones; IPIs everywhere."""
    rows: dict[str, dict[int, int]] = {}
    for key, busy, quiet in (("NMI", 10**4, 10**3), ("LOC", 10**9, 10**6), ("SPU", 0, 0), ("PMI", 10**4, 10**3),
                             ("IWI", 10**6, 10**3), ("RTR", 0, 0), ("RES", 10**7, 10**4), ("CAL", 10**7, 10**5),
                             ("TLB", 10**6, 10**4), ("TRM", 0, 0), ("THR", 0, 0), ("DFR", 0, 0), ("MCE", 0, 0),
                             ("MCP", 10**4, 10**4)):  # fmt: skip
        rows[key] = {
            cpu: rng.randrange(busy // 2, busy) if cpu in housekeeping else rng.randrange(quiet // 2, quiet)
            for cpu in online
            if busy
        }
    return rows


# --------------------------------------------------------------------------------------------------- generate
def _validate(spec: HostSpec) -> None:
    """ValueError naming what about ``spec`` no node could have, before anything is written."""
    per_node = spec.sockets * THREADS_PER_CORE * spec.nodes_per_socket
    if spec.sockets < 1 or spec.nodes_per_socket < 1:
        raise ValueError(f"sockets and nodes per socket must be at least 1, not {spec.sockets}/{spec.nodes_per_socket}")
    if spec.cpus % per_node or spec.cpus < 4 * spec.sockets:
        raise ValueError(f"--cpus must be a multiple of {per_node} ({spec.sockets} sockets x SMT2 x "
                         f"{spec.nodes_per_socket} nodes per socket) and at least {4 * spec.sockets}, not "
                         f"{spec.cpus}")  # fmt: skip
    if spec.cgroup_version not in (1, 2):
        raise ValueError(f"cgroup version must be 1 or 2, not {spec.cgroup_version}")
    for what, value, allowed in (("numbering", spec.numbering, NUMBERINGS),
                                 ("cgroup driver", spec.cgroup_driver, CGROUP_DRIVERS),
                                 ("irqbalance", spec.irqbalance, tuple(IRQBALANCE_MODES)),
                                 ("managed modes", spec.managed_modes, tuple(MANAGED_MODES))):  # fmt: skip
        if value not in allowed:
            raise ValueError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")
    if not 0.0 <= spec.guaranteed <= 1.0:
        raise ValueError(f"the Guaranteed share must be a fraction between 0 and 1, not {spec.guaranteed}")


def cpu_id(spec: HostSpec, socket: int, core: int, thread: int) -> int:
    """The CPU number of a thread as add_topology numbers it for ``spec`` (``core``: index within its socket)."""
    cores_per_socket = spec.cpus // (spec.sockets * THREADS_PER_CORE)
    if spec.numbering == "interleaved":
        return thread * spec.sockets * cores_per_socket + socket * cores_per_socket + core
    return (socket * cores_per_socket + core) * THREADS_PER_CORE + thread


def housekeeping_cpus(spec: HostSpec) -> CPUSet:
    """The housekeeping CPUs: both threads of the first ``cores per node // 24`` cores (at least one) of each NUMA
    node, so that every node has CPUs for its devices' IRQs and its kernel threads."""
    cores_per_socket = spec.cpus // (spec.sockets * THREADS_PER_CORE)
    cores_per_node = cores_per_socket // spec.nodes_per_socket
    first = max(1, cores_per_node // 24)
    return frozenset(
        cpu_id(spec, socket, node * cores_per_node + core, thread)
        for socket in range(spec.sockets)
        for node in range(spec.nodes_per_socket)
        for core in range(first)
        for thread in range(THREADS_PER_CORE)
    )


def _add_pci_devices(
    host: FakeHost,
    layout: TopologyLayout,
    vectors: dict[str, list[int]],
    gpu_pci: list[tuple[str, int]],
    nic_pci: list[tuple[str, int]],
    nvme_pci: list[tuple[str, int]],
) -> list[FakeGpu]:
    """Write the GPUs, the NICs (an RDMA device on each rail NIC) and the NVMe drives, each with its MSI vectors."""
    gpu_handles = []
    for index, (address, node) in enumerate(gpu_pci):
        gpu_handles.append(
            add_gpu(host, address, numa_node=node, local_cpus=layout.node_cpus(node), msi_irqs=vectors.get(address, ()),
                    minor=index)
        )  # fmt: skip
    for index, (address, node) in enumerate(nic_pci):
        directory = add_pci_device(host, address, vendor_id=MELLANOX, device_id=CX7, class_code=CLASS_ETHERNET,
                                   numa_node=node, local_cpus=layout.node_cpus(node), msi_irqs=vectors.get(address, ()))
        if index < len(gpu_pci):  # the rail NICs run RoCE; the management NIC has no RDMA device
            add_rdma_device(host, directory, f"mlx5_{index}")
    for address, node in nvme_pci:
        add_pci_device(host, address, vendor_id=SAMSUNG, device_id=PM1743, class_code=CLASS_NVME, numa_node=node,
                       local_cpus=layout.node_cpus(node), msi_irqs=vectors.get(address, ()))  # fmt: skip
    return gpu_handles


def _make_managed_writable(host: FakeHost, irq_rows: list[FakeIrq]) -> None:
    """Show every managed IRQ's smp_affinity files writable, as kernels before 6.12 do."""
    for irq_row in irq_rows:
        if irq_row.managed:
            for name in ("smp_affinity", "smp_affinity_list"):
                os.chmod(host.path(f"proc/irq/{irq_row.irq}/{name}"), 0o644)


def generate(out: str | os.PathLike[str], spec: HostSpec) -> GeneratedHost:
    """Write the node described by ``spec`` under ``out`` (which must be empty or absent) and say what was written."""
    started = time.perf_counter()
    _validate(spec)
    sockets, nodes_per_socket = spec.sockets, spec.nodes_per_socket
    node_count = sockets * nodes_per_socket
    cores_per_socket = spec.cpus // (sockets * THREADS_PER_CORE)
    cores_per_node = cores_per_socket // nodes_per_socket
    housekeeping_cores = max(1, cores_per_node // 24)  # per node
    gpus_per_node = max(1, -(-spec.gpus // node_count))
    if gpus_per_node >= cores_per_node - housekeeping_cores:  # a pinned core per GPU, one spare for the shared pool
        raise ValueError(f"{spec.gpus} GPUs need more than {spec.cpus} CPUs (a pinned core each, one spare per node)")
    root = Path(out)
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"{root} is not empty (use --force to replace it)")
    rng = random.Random(spec.seed)
    host = FakeHost(root)

    # -- topology: isolation parameters in the command line, 1 GiB pages on each node
    online_all = frozenset(range(spec.cpus))
    housekeeping = housekeeping_cpus(spec)
    isolated_list = format_cpulist(online_all - housekeeping)
    pages_1g = 4 * gpus_per_node
    mem_per_node = (64 if spec.cpus <= 64 else 512) * GiB // nodes_per_socket
    cmdline = (
        "BOOT_IMAGE=/boot/vmlinuz-6.8.0-52-generic root=/dev/nvme0n1p2 ro quiet "
        f"isolcpus=domain,managed_irq,{isolated_list} nohz_full={isolated_list} rcu_nocbs={isolated_list} "
        f"irqaffinity={format_cpulist(housekeeping)} default_hugepagesz=1G hugepagesz=1G "
        f"hugepages={node_count * pages_1g}"
    )
    layout = add_topology(
        host,
        sockets=sockets,
        cores_per_socket=cores_per_socket,
        threads_per_core=THREADS_PER_CORE,
        nodes_per_socket=nodes_per_socket,
        numbering=spec.numbering,
        cmdline=cmdline,
        mem_per_node_bytes=mem_per_node,
        hugepages_per_node={2048: 0, 1048576: pages_1g},
    )
    assert housekeeping == frozenset().union(*(
        layout.core_cpus(socket, node * cores_per_node + core) for socket in range(sockets)
        for node in range(nodes_per_socket) for core in range(housekeeping_cores)
    ))  # fmt: skip
    online = sorted(layout.online)
    nodes = list(layout.cpu_nodes)
    mems_allowed = format_cpulist(nodes)

    # -- PCI devices: GPUs, one rail NIC per GPU plus a management NIC, NVMe drives
    gpu_nodes = [index * node_count // max(spec.gpus, 1) for index in range(spec.gpus)]
    gpu_pci = [(_gpu_address(index, spec.gpus), node) for index, node in enumerate(gpu_nodes)]
    nic_pci = [(f"0000:{int(address[5:7], 16) + 1:02x}:00.0", node) for address, node in gpu_pci]
    nic_pci.append(("0000:01:00.0", 0))
    nvme_pci = [(f"0000:{0x60 + 0x80 * (index % 2) + index // 2:02x}:00.0", (index % sockets) * nodes_per_socket)
                for index in range(4)]  # fmt: skip
    irq_rows, vectors = _irq_rows(spec, rng, layout, housekeeping, gpu_pci, nic_pci, nvme_pci)
    planted: list[str] = []
    if spec.drift:
        nic_rows = [i for i, row in enumerate(irq_rows) if row.name.startswith("mlx5_comp")]
        if nic_rows:
            isolated_cpu = max(layout.online - housekeeping)
            row = irq_rows[nic_rows[len(nic_rows) // 2]]
            counts = dict(row.counts) | {isolated_cpu: rng.randrange(10**5, 10**7)}
            irq_rows[nic_rows[len(nic_rows) // 2]] = FakeIrq(
                row.irq, row.name, frozenset({isolated_cpu}), frozenset({isolated_cpu}), counts, chip=row.chip,
                hwirq=row.hwirq, node=row.node,
            )  # planted: irq_on_isolated_cpu (a tuning script wrote an isolated CPU into smp_affinity)
            planted.append("irq_on_isolated_cpu")
    gpu_handles = _add_pci_devices(host, layout, vectors, gpu_pci, nic_pci, nvme_pci)
    named_rows = _named_rows(rng, online, housekeeping)
    add_irqs(host, online, irq_rows, named_rows, default_affinity=housekeeping, nr_cpu_ids=spec.cpus)
    if spec.managed_modes == "writable":  # a kernel before 6.12 shows every smp_affinity writable
        _make_managed_writable(host, irq_rows)
    interrupts_bytes = host.path("proc/interrupts").stat().st_size

    # -- kernel knobs, NUMA counters
    thp = "always" if spec.drift else "madvise"
    if spec.drift:
        planted.append("thp_enabled")
    add_kernel_settings(host, thp_enabled=thp, governors="performance", cpus=online)
    # intel_idle with C6 disabled on the isolated CPUs (cpupower idle-set -D 11 on them)
    add_cpuidle(host, online, disabled={cpu: {"C6"} for cpu in layout.online - housekeeping})
    # (numa_hit, other_node, interleave_hit) per node, drawn as before the tree was made realistic for node_exporter,
    # so that the main stream, and with it every pod, IRQ and process numawatch reads, stays what it was.
    numa_drawn = {
        node: (rng.randrange(10**9, 10**11) + rng.randrange(10**9, 10**11), rng.randrange(10**5, 10**7),
               rng.randrange(10**3, 10**5))
        for node in nodes
    }  # fmt: skip

    # -- pods and their cgroups, bundles, logs and processes
    plans = _plan_pods(spec, rng, layout, housekeeping_cores, gpu_nodes, mem_per_node)
    foreign = next((pod for pod in plans if pod.gpu is None and not pod.exclusive), None)
    if spec.drift and foreign is not None:
        foreign.namespace = FOREIGN_NAMESPACE  # planted: node_workload_not_isolated (a ClickHouse on the GPU node)
        planted.append("node_workload_not_isolated")
    exclusive_all = frozenset().union(*(cpus for pod in plans for cpus in pod.exclusive.values()))
    shared = layout.online - exclusive_all
    add_kubepods(host, version=spec.cgroup_version, driver=spec.cgroup_driver, cpus=layout.online, mems=set(nodes))
    app_containers = sum(len(pod.containers) for pod in plans)
    budget = spec.processes - 1 - len(plans) - app_containers  # pid 1, one pause per pod, one per container
    if budget < 0:
        raise ValueError(
            f"--processes {spec.processes} is too few for {len(plans)} pods with {app_containers} containers "
            f"(at least {spec.processes - budget})"
        )
    kthread_count = min(6 * len(online) + 20, budget * 2 // 3)
    daemon_count = min(len(plans) + len(_DAEMONS), (budget - kthread_count) // 2)
    extra = budget - kthread_count - daemon_count
    pids_per_container = [1] * app_containers
    for _ in range(extra if app_containers else 0):
        pids_per_container[rng.randrange(app_containers)] += 1

    procs: list[_Proc] = [_Proc(1, "systemd", 0, min(housekeeping), cgroup="/init.scope", allowed=layout.online)]
    for offset, (comm, cpu, allowed) in enumerate(_kernel_threads(layout, kthread_count, housekeeping)):
        procs.append(_Proc(2 + offset, comm, 2 if offset else 0, cpu, kthread=True, allowed=allowed))  # 2: kthreadd
    first_daemon = max(1000, 2 + kthread_count)
    irqbalance_pid = None
    if spec.irqbalance != "none":
        if daemon_count < 1:
            raise ValueError(f"--processes {spec.processes} leaves no room for irqbalance")
        irqbalance_pid = first_daemon + min(IRQBALANCE_SLOT, daemon_count - 1)
    for offset in range(daemon_count):
        comm = _DAEMONS[offset] if offset < len(_DAEMONS) else "containerd-shim"
        unit = "rke2-agent.service" if comm in ("containerd-shim", "rke2", "containerd", "kubelet") else "misc.service"
        cgroup = f"/system.slice/{unit}"
        if first_daemon + offset == irqbalance_pid:
            comm = "irqbalance"
            cgroup = ("/system.slice/irqbalance.service" if spec.irqbalance == "service"
                      else "/user.slice/user-0.slice/session-3.scope")  # fmt: skip
        procs.append(_Proc(first_daemon + offset, comm, 1, rng.choice(sorted(housekeeping)), cgroup=cgroup,
                           allowed=housekeeping))  # fmt: skip
    shim_pid = first_daemon

    handles: dict[str, PodHandle] = {}
    next_pid = 100000
    position = 0
    for pod in plans:
        specs = []
        for container in pod.containers:
            count = pids_per_container[position]
            position += 1
            pids = tuple(range(next_pid, next_pid + count))
            next_pid += count
            cpus = pod.exclusive.get(container.name, shared)
            mems = container.mems
            specs.append(ContainerSpec(container.name, cpus, mems, container.numa_bytes,
                                       cpu_quota_us=container.cpu_quota_us, pids=pids))  # fmt: skip
        handle = add_pod(host, uid=pod.uid, qos=pod.qos, namespace=pod.namespace, name=pod.name, containers=specs)
        handles[pod.uid] = handle
        if not spec.sandbox_numa_stat and handle.sandbox is not None:
            for hierarchy in ("", "memory/"):  # v2's one tree, v1's memory hierarchy
                Path(host.root, "sys/fs/cgroup", hierarchy + handle.sandbox.cgroup_path, "memory.numa_stat").unlink(
                    missing_ok=True
                )
        for container in ([handle.sandbox] if handle.sandbox else []) + list(handle.containers):
            cpu_pool = sorted(container.cpus)
            for pid in container.pids:
                comm = "pause" if container.is_sandbox else container.name[:15]
                procs.append(_Proc(pid, comm, shim_pid, rng.choice(cpu_pool), cgroup="/" + container.cgroup_path,
                                   allowed=container.cpus, in_pod=True))  # fmt: skip
    if spec.drift and len(gpu_pci) >= 1:
        gpu_pod = next(p for p in plans if p.gpu == 0)
        set_container_cpus(host, handles[gpu_pod.uid], "vllm", layout.online)  # planted: a daemon-reload reset it
        planted.append("container_cpuset_drift")
    if spec.drift and any(pod.gpu == 1 for pod in plans):
        planted.append("container_memory_remote")
    if spec.drift and any(pod.gpu is not None and pod.qos == QOS_BURSTABLE for pod in plans):
        planted.append("pod_not_guaranteed")

    root_text = str(host.root)
    for proc in procs:
        _write_proc(root_text, proc, spec.cgroup_version, rng, full=not proc.in_pod, mems=mems_allowed)
    sockets_text = _unix_sockets(rng, irqbalance_pid if spec.irqbalance == "service" else None)
    if spec.socket_table:
        host.write("proc/1/net/unix", sockets_text)
    if irqbalance_pid is not None:
        _add_irqbalance(host, spec, irqbalance_pid)
    host.write("proc/meminfo", _proc_meminfo(mem_per_node * len(nodes), pages_1g * len(nodes)))
    host.write("proc/loadavg", f"3.12 2.98 2.87 4/{len(procs) + 400} {next_pid}")
    _node_exporter_files(host, spec, layout, housekeeping, exclusive_all, irq_rows, named_rows, numa_drawn,
                         mem_per_node, pages_1g)  # fmt: skip

    # -- kubelet: configuration and the three checkpoints
    reserved_memory = {node: {"memory": 2 * GiB} for node in nodes}
    write_kubelet_config(
        host,
        "rke2",
        cpu_manager_policy="static",
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
        memory_manager_policy="Static",
        reserved_cpus=housekeeping,
        reserved_memory=reserved_memory,
        system_reserved={"memory": "2Gi"},
        kube_reserved={"memory": "1536Mi"},
        extra_args=("eviction-hard=memory.available=512Mi",
                    *(("cgroup-driver=cgroupfs",) if spec.cgroup_driver == "cgroupfs" else ())),
        node_taints=("nvidia.com/gpu=present:NoSchedule",),
        node_labels=("fibercli.local/numa-pinned=true",),
    )
    write_cpu_manager_state(
        host,
        policy="static",
        default_cpuset=shared,
        entries={pod.uid: dict(pod.exclusive) for pod in plans if pod.exclusive},
    )
    memory_entries = {pod.uid: dict(pod.memory) for pod in plans if pod.memory}
    machine = kubelet_memory_machine_state(
        dict.fromkeys(nodes, mem_per_node),
        hugepages={node: {2048: 0, 1048576: pages_1g} for node in nodes},
        reserved_memory=reserved_memory,
        entries=memory_entries,
    )
    write_memory_manager_state(host, policy="Static", machine_state=machine, entries=memory_entries)
    assignments = [
        DeviceAssignment(pod.uid, "vllm", GPU_RESOURCE, {gpu_nodes[pod.gpu]: (gpu_handles[pod.gpu].uuid,)})
        for pod in plans
        if pod.gpu is not None
    ]
    write_device_checkpoint(host, entries=assignments, registered={GPU_RESOURCE: [g.uuid for g in gpu_handles]})

    qos: dict[str, int] = {}
    for pod in plans:
        qos[pod.qos] = qos.get(pod.qos, 0) + 1
    seconds = round(time.perf_counter() - started, 2)
    files, bytes_on_disk = tree_size(root)
    return GeneratedHost(
        root=str(root),
        spec=spec,
        online_cpus=len(online),
        isolated_cpus=len(layout.online - housekeeping),
        housekeeping_cpus=format_cpulist(housekeeping),
        gpus=len(gpu_handles),
        pods=len(plans),
        app_containers=app_containers,
        container_cgroups=app_containers + len(plans),
        pinned_containers=sum(len(pod.exclusive) for pod in plans),
        irqs=len(irq_rows),
        processes=len(procs),
        interrupts_bytes=interrupts_bytes,
        planted=tuple(planted),
        seconds=seconds,
        qos=qos,
        numa_nodes=len(nodes),
        exclusive_cpus=len(exclusive_all),
        irqbalance_pid=irqbalance_pid,
        managed_irqs=sum(row.managed for row in irq_rows),
        files=files,
        bytes_on_disk=bytes_on_disk,
    )


def tree_size(root: str | os.PathLike[str]) -> tuple[int, int]:
    """(files and links, bytes allocated on disk) under ``root``: what a generated tree costs to keep."""
    files = allocated = 0
    for directory, _subdirectories, names in os.walk(root):
        for name in names:
            info = os.lstat(os.path.join(directory, name))
            files += 1
            allocated += info.st_blocks * 512
    return files, allocated


def _node_exporter_files(
    host: FakeHost,
    spec: HostSpec,
    layout: TopologyLayout,
    housekeeping: CPUSet,
    pinned: CPUSet,
    irq_rows: list[FakeIrq],
    named_rows: Mapping[str, Mapping[int, int]],
    numa_drawn: Mapping[int, tuple[int, int, int]],
    mem_per_node: int,
    pages_1g: int,
) -> None:
    """What node_exporter's cpu, cpufreq, meminfo_numa and vmstat collectors read, complete as on a real node
    (bench/node_exporter_files.py says what and why), so bench/run.py measures it doing its real work. numastat and
    nodeN/meminfo are numawatch's too (it reads MemTotal, which keeps its value, and the six counters); the rest is
    there for node_exporter only. Drawn from a stream of its own: the main one, and all numawatch reads besides,
    stays as it was."""
    rng = random.Random(f"{spec.seed}/node_exporter")
    root = str(host.root)
    online = sorted(layout.online)
    cpu_root = f"{root}/sys/devices/system/cpu"
    # Each core and each package throttled now and then in 41 days; most cores never.
    package_throttles = {socket: rng.randrange(0, 40) for socket in range(layout.sockets)}
    core_throttles = {(socket, core): (rng.randrange(1, 20) if rng.random() < 0.1 else 0)
                      for socket in range(layout.sockets) for core in range(layout.cores_per_socket)}  # fmt: skip
    for cpu in online:
        socket, core = layout.socket_of[cpu], layout.core_of[cpu]
        nefiles.write_files(f"{cpu_root}/cpufreq/policy{cpu}",
                            nefiles.cpufreq_policy(cpu, "performance", rng, busy=cpu in pinned))  # fmt: skip
        throttle = nefiles.thermal_throttle(core_throttles[(socket, core)], package_throttles[socket])
        nefiles.write_files(f"{cpu_root}/cpu{cpu}/thermal_throttle", throttle)

    numa = nefiles.numastat(rng, numa_drawn)
    nodes_kb = []
    for node, counters in numa.items():
        add_numastat(host, node, **counters)
        text, values = nefiles.node_meminfo(node, mem_per_node // 1024, pages_1g, pages_1g, 1048576, rng)
        host.write(f"sys/devices/system/node/node{node}/meminfo", text)  # default_hugepagesz=1G: 1 GiB pages
        nodes_kb.append(values)
    host.write("proc/vmstat", nefiles.proc_vmstat(rng, nodes_kb, numa, mem_per_node * len(numa) // 1024))

    irq_counts = {row.irq: sum(row.counts.values()) for row in irq_rows}
    arch_counts = sum(sum(counts.values()) for counts in named_rows.values())
    nr_irqs = nefiles.nr_irqs(spec.cpus, max(irq_counts, default=0))
    running = len(pinned) + rng.randrange(2, 12)  # the pinned workloads spin; a few others run
    host.write("proc/stat", nefiles.proc_stat(rng, online, pinned, irq_counts, arch_counts, nr_irqs, running=running))


def _proc_meminfo(total_bytes: int, hugepages_1g: int) -> str:
    kb = total_bytes // 1024
    free = kb // 3
    fields = [("MemTotal", kb), ("MemFree", free), ("MemAvailable", free + kb // 10), ("Buffers", 1048576),
              ("Cached", kb // 10), ("SwapCached", 0), ("Active", kb // 4), ("Inactive", kb // 8),
              ("SwapTotal", 0), ("SwapFree", 0), ("Dirty", 1024), ("AnonPages", kb // 4), ("Mapped", 4194304),
              ("Shmem", 65536), ("Slab", 8388608), ("PageTables", 524288), ("HugePages_Total", hugepages_1g),
              ("HugePages_Free", hugepages_1g), ("HugePages_Rsvd", 0), ("HugePages_Surp", 0),
              ("Hugepagesize", 1048576), ("Hugetlb", hugepages_1g * 1048576)]  # fmt: skip
    return "".join(
        f"{name + ':':<16}{value:>8}" + ("\n" if name.startswith("HugePages_") else " kB\n") for name, value in fields
    )


def _unix_sockets(rng: random.Random, irqbalance_pid: int | None = None) -> str:
    """proc/1/net/unix with the sockets of a node's daemons, irqbalance's control socket among them when its PID is
    given (irqbalance 1.4 and later listen on ``@irqbalance<pid>.sock``)."""
    lines = ["Num       RefCount Protocol Flags    Type St Inode Path"]
    for path in ("/run/k3s/containerd/containerd.sock", "/var/lib/kubelet/device-plugins/kubelet.sock",
                 "/var/lib/kubelet/pod-resources/kubelet.sock", "/run/systemd/journal/stdout",
                 "/run/dbus/system_bus_socket", "@/org/kernel/linux/storage/multipathd"):  # fmt: skip
        lines.append(f"0000000000000000: 00000002 00000000 00010000 0001 01 {rng.randrange(10**4, 10**6)} {path}")
    if irqbalance_pid is not None:
        lines.append(f"0000000000000000: 00000002 00000000 00010000 0001 01 {40000 + irqbalance_pid % 10**5} "
                     f"@irqbalance{irqbalance_pid}.sock")  # fmt: skip
    return "\n".join(lines)


def _add_irqbalance(host: FakeHost, spec: HostSpec, pid: int) -> None:
    """What a running irqbalance leaves: its environment (Debian's unit reads /etc/default/irqbalance, whose
    settings are all commented out: the automatic ban of isolated and nohz_full CPUs applies), that file, and, run as
    its systemd unit, the unit's ``cgroup.procs``."""
    environ = {"LANG": "C.UTF-8", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "INVOCATION_ID": f"{pid:032x}", "JOURNAL_STREAM": "8:23671", "SYSTEMD_EXEC_PID": str(pid)}  # fmt: skip
    if spec.irqbalance != "service":
        environ = {"LANG": "C.UTF-8", "PATH": environ["PATH"], "HOME": "/root", "SHELL": "/bin/bash", "USER": "root"}
    host.write(f"proc/{pid}/environ", b"".join(f"{key}={value}".encode() + b"\0" for key, value in environ.items()))
    host.write("etc/default/irqbalance", DEBIAN_IRQBALANCE_DEFAULTS)
    if spec.irqbalance == "service":
        unit = "system.slice/irqbalance.service/cgroup.procs"
        host.write(f"sys/fs/cgroup/{unit}" if spec.cgroup_version == 2 else f"sys/fs/cgroup/systemd/{unit}", f"{pid}\n")


def _summary(found: GeneratedHost) -> dict[str, object]:
    data = asdict(found)
    data["planted"] = list(found.planted)
    return data


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the host tree into (empty or absent)")
    parser.add_argument("--cpus", type=int, help="CPUs, a multiple of 4 x nodes per socket (default: 384, or the "
                                                 "shape's)")
    parser.add_argument("--gpus", type=int, help="NVIDIA GPUs (default: 8 from 128 CPUs up, else 4)")
    parser.add_argument("--pods", type=int, help="pods (default: 300 x cpus / 384)")
    parser.add_argument("--irqs", type=int, help="device IRQs in /proc/interrupts (default: 2000 x cpus / 384)")
    parser.add_argument("--processes", type=int, help="/proc/<pid> entries (default: 5000 x cpus / 384)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    parser.add_argument("--cgroup-version", type=int, choices=(1, 2), help="cgroup version (default: 2)")
    parser.add_argument("--shape", choices=sorted(SHAPES),
                        help="one of the benchmark trees (SHAPES); the other options override its settings")
    parser.add_argument("--nodes-per-socket", type=int, help="NUMA nodes per socket, >1 for SNC (default: 1)")
    parser.add_argument("--numbering", choices=NUMBERINGS, help="CPU numbering (default: interleaved)")
    parser.add_argument("--cgroup-driver", choices=CGROUP_DRIVERS,
                        help="the kubelet's cgroup driver (default: systemd)")
    parser.add_argument("--guaranteed", type=float, metavar="SHARE",
                        help="share of pods that are Guaranteed, 0-1 (default: only the GPU and tokeniser pods)")
    parser.add_argument("--irqbalance", choices=tuple(IRQBALANCE_MODES),
                        help="; ".join(f"{name}: {what}" for name, what in IRQBALANCE_MODES.items())
                        + " (default: none)")
    parser.add_argument("--no-socket-table", action="store_true", help="write no /proc/1/net/unix")
    parser.add_argument("--managed-modes", choices=tuple(MANAGED_MODES),
                        help="; ".join(f"{name}: {what}" for name, what in MANAGED_MODES.items()) +
                        " (default: read-only)")  # fmt: skip
    parser.add_argument("--clean", action="store_true", help="plant no drift")
    parser.add_argument("--force", action="store_true", help="delete --out first if it exists")
    args = parser.parse_args(list(argv) if argv is not None else None)
    overrides: dict[str, object] = {
        "gpus": args.gpus, "pods": args.pods, "irqs": args.irqs, "processes": args.processes,
        "cgroup_version": args.cgroup_version, "nodes_per_socket": args.nodes_per_socket, "numbering": args.numbering,
        "cgroup_driver": args.cgroup_driver, "guaranteed": args.guaranteed, "irqbalance": args.irqbalance,
        "managed_modes": args.managed_modes, "socket_table": False if args.no_socket_table else None,
    }  # fmt: skip
    given = {key: value for key, value in overrides.items() if value is not None}
    given |= {"seed": args.seed, "drift": not args.clean}
    if args.shape:
        base = SHAPES[args.shape].spec
        cpus = base.cpus if args.cpus is None else args.cpus
        spec = replace(base, cpus=cpus, **given)  # type: ignore[arg-type]
    else:
        spec = HostSpec.scaled(BASE_CPUS if args.cpus is None else args.cpus, **given)  # type: ignore[arg-type]
    if args.force and os.path.lexists(args.out):
        shutil.rmtree(args.out)
    try:
        found = generate(args.out, spec)
    except ValueError as error:
        print(f"generate_host: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(_summary(found), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
