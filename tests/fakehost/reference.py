"""The reference RKE2 GPU node: clean by construction, with one mutator per drift numawatch must catch.

The node (DOMAIN.md's reference profile): 2 sockets x 8 cores x SMT2 = 32 CPUs numbered interleaved as
fakehost.topology does (cpu = thread * 16 + socket * 8 + core: socket/NUMA node 0 is 0-7,16-23, node 1 is
8-15,24-31, CPU n and n+16 are SMT siblings), ``isolcpus=domain,managed_irq`` = every CPU but core 0 of each socket
(housekeeping 0,8,16,24) with ``nohz_full`` and ``rcu_nocbs`` equal, the kubelet on
static / single-numa-node / pod / Static with ``reserved-cpus`` = the housekeeping CPUs, registering with the seed's
taint and label (RKE2 ``node-taint``, ``node-label``), 4 GPUs (2 per NUMA node, registered with their node), each
behind a PCIe switch with a ConnectX NIC (GPU-NIC PIX), NVSwitch-connected (fake_pynvml), intel_idle with C6
disabled on the isolated CPUs, two Guaranteed GPU pods pinned on isolated CPUs of their GPUs' node with their memory
there, one Burstable system pod (kube-system) on the shared pool, and valid checkpoint files.

Two forms of the same node:
- ``reference_snapshot()``: the model objects (a ``Host`` with every source up), for check unit tests that need
  no files; tests derive drifted snapshots with ``dataclasses.replace`` and the helpers below.
- ``reference_node(host)``: the files of that node in a FakeHost tree, written with the domain builders
  (topology, gpus, pods, kubelet, kernel), for end-to-end tests (sources -> evaluate); ``ReferenceNode`` has one mutator
  per drift.

The numbers in both are spelled out here (not computed by numawatch's own code) so a test compares numawatch with
an independent statement of what the kubelet would write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from numawatch.checks import Evaluation, evaluate
from numawatch.cpuset import CPUSet, format_cpulist
from numawatch.host import Host, SourceStatus, read_host
from numawatch.intent import REFERENCE, Intent
from numawatch.model import frozen_map
from numawatch.model.gpu import GpuDevice, GpuInventory
from numawatch.model.kubelet import (
    CpuManagerState,
    DeviceAssignment,
    DeviceCheckpoint,
    KubeletConfig,
    KubeletState,
    MemoryBlock,
    MemoryManagerState,
    MemoryNodeState,
    MemoryTable,
)
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.model.workloads import (
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    Cgroups,
    ContainerCgroup,
    ContainerIdentity,
    Names,
    PodCgroup,
    PodIdentity,
)
from numawatch.paths import Paths

from fakehost import FakeHost
from fakehost.gpus import FakeGpu, add_amd_gpu, add_gaudi, add_gpu, add_kfd_cpu_node, add_pcie_switch, add_rdma_nic
from fakehost.hotplug import take_cpus_offline
from fakehost.kernel import FakeIrq, add_cpuidle, add_irqs, add_kernel_settings, add_numastat
from fakehost.kubelet import (
    write_cpu_manager_state,
    write_device_checkpoint,
    write_kubelet_config,
    write_memory_manager_state,
)
from fakehost.pods import (
    ContainerSpec,
    PodHandle,
    add_kubepods,
    add_pod,
    remove_pod,
    set_container_cpus,
    set_numa_bytes,
)
from fakehost.topology import TopologyLayout, add_topology, format_cpumask

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# --------------------------------------------------------------------------------------------- the machine
SOCKETS = 2
CORES_PER_SOCKET = 8
THREADS = SOCKETS * CORES_PER_SOCKET * 2  # 32
ONLINE = frozenset(range(THREADS))
NODE_CPUS = {0: frozenset({*range(0, 8), *range(16, 24)}), 1: frozenset({*range(8, 16), *range(24, 32)})}
HOUSEKEEPING = frozenset({0, 8, 16, 24})  # core 0 of each socket, both threads
ISOLATED = ONLINE - HOUSEKEEPING
ISOLCPUS_PARAM = f"domain,managed_irq,{format_cpulist(ISOLATED)}"
CMDLINE = (
    "BOOT_IMAGE=/vmlinuz-6.1.0-28-amd64 root=/dev/nvme0n1p2 ro quiet "
    f"isolcpus={ISOLCPUS_PARAM} nohz_full={format_cpulist(ISOLATED)} rcu_nocbs={format_cpulist(ISOLATED)} "
    "default_hugepagesz=1G hugepagesz=1G hugepages=8"
)
MEM_TOTAL = 64 * GiB  # per NUMA node (nodeN/meminfo MemTotal)
HUGE_1G = 1048576  # kB
HUGE_2M = 2048  # kB
HUGEPAGES_PER_NODE = {HUGE_2M: 0, HUGE_1G: 4}
RESERVED_MEMORY = {0: {"memory": 2 * GiB}, 1: {"memory": 2 * GiB}}


def cpu_node(cpu: int) -> int:
    return (cpu % (THREADS // 2)) // CORES_PER_SOCKET


def cpu_core(cpu: int) -> int:
    return cpu % CORES_PER_SOCKET


def siblings(cpu: int) -> frozenset[int]:
    first = cpu % (THREADS // 2)
    return frozenset({first, first + THREADS // 2})


# --------------------------------------------------------------------------------------------- GPUs
@dataclass(frozen=True)
class RefGpu:
    pci_address: str
    uuid: str
    numa_node: int


GPUS = (
    RefGpu("0000:18:00.0", "GPU-1a2b3c4d-0000-4000-8000-000000000000", 0),
    RefGpu("0000:2a:00.0", "GPU-1a2b3c4d-0000-4000-8000-000000000001", 0),
    RefGpu("0000:9a:00.0", "GPU-1a2b3c4d-0000-4000-8000-000000000002", 1),
    RefGpu("0000:ab:00.0", "GPU-1a2b3c4d-0000-4000-8000-000000000003", 1),
)
GPU_RESOURCE = "nvidia.com/gpu"
# The same node with another vendor's accelerators in the same slots (reference_node(vendor=...)): the device plugin's
# resource for each vendor (docs/gpu.md, "Device plugins").
VENDOR_RESOURCES = {"nvidia": GPU_RESOURCE, "amd": "amd.com/gpu", "habana": "habana.ai/gaudi"}


@dataclass(frozen=True)
class RefSlot:
    """Where a GPU sits on the PCIe fabric, as on an HGX baseboard: its host bridge's root port, a PCIe switch
    (upstream port, two downstream ports), the GPU behind one downstream port and its ConnectX NIC behind the other
    (nvidia-smi topo: GPU-NIC PIX)."""

    root_port: str
    upstream: str
    gpu_port: str
    nic_port: str
    nic: str
    rdma_device: str


SLOTS = (
    RefSlot("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:17:01.0", "0000:19:00.0", "mlx5_0"),
    RefSlot("0000:27:01.0", "0000:28:00.0", "0000:29:00.0", "0000:29:01.0", "0000:2b:00.0", "mlx5_1"),
    RefSlot("0000:97:01.0", "0000:98:00.0", "0000:99:00.0", "0000:99:01.0", "0000:9b:00.0", "mlx5_2"),
    RefSlot("0000:a8:01.0", "0000:a9:00.0", "0000:aa:00.0", "0000:aa:01.0", "0000:ac:00.0", "mlx5_3"),
)
NODE_TAINTS = ("nvidia.com/gpu=present:NoSchedule",)
NODE_LABELS = ("fibercli.local/numa-pinned=true",)


# --------------------------------------------------------------------------------------------- pods
@dataclass(frozen=True)
class RefContainer:
    name: str
    container_id: str
    sandbox: bool = False


@dataclass(frozen=True)
class RefPod:
    uid: str
    namespace: str
    name: str
    qos: str
    container: RefContainer
    sandbox: RefContainer
    exclusive: frozenset[int] = frozenset()  # empty: the shared pool
    numa_node: int | None = None  # where its GPUs, CPUs and memory are
    gpus: tuple[RefGpu, ...] = ()
    memory_blocks: tuple[MemoryBlock, ...] = ()
    numa_bytes: Mapping[int, int] = field(default_factory=dict)


def _cid(seed: str) -> str:
    return (seed * 64)[:64]


VLLM = RefPod(
    uid="7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57",
    namespace="inference",
    name="vllm-llama-0",
    qos=QOS_GUARANTEED,
    container=RefContainer("vllm", _cid("a1")),
    sandbox=RefContainer("", _cid("a0"), sandbox=True),
    exclusive=frozenset({1, 2, 3, 4, 17, 18, 19, 20}),  # cores 1-4 of socket 0, both threads
    numa_node=0,
    gpus=GPUS[:2],
    memory_blocks=(MemoryBlock((0,), "hugepages-1Gi", 2 * GiB), MemoryBlock((0,), "memory", 16 * GiB)),
    numa_bytes={0: 12 * GiB, 1: 100 * MiB},
)
TRTLLM = RefPod(
    uid="c41d8e2b-0a6f-4f3b-8d2e-6b9a1c7e3f05",
    namespace="inference",
    name="trtllm-mistral-0",
    qos=QOS_GUARANTEED,
    container=RefContainer("trtllm", _cid("b1")),
    sandbox=RefContainer("", _cid("b0"), sandbox=True),
    exclusive=frozenset({9, 10, 11, 12, 25, 26, 27, 28}),  # cores 1-4 of socket 1, both threads
    numa_node=1,
    gpus=GPUS[2:],
    memory_blocks=(MemoryBlock((1,), "memory", 16 * GiB),),
    numa_bytes={0: 50 * MiB, 1: 10 * GiB},
)
NODE_EXPORTER = RefPod(
    uid="0b6e1f2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
    namespace="kube-system",
    name="node-exporter-x7k2p",
    qos=QOS_BURSTABLE,
    container=RefContainer("node-exporter", _cid("c1")),
    sandbox=RefContainer("", _cid("c0"), sandbox=True),
    numa_bytes={0: 20 * MiB, 1: 15 * MiB},
)
PODS = (VLLM, TRTLLM, NODE_EXPORTER)
EXCLUSIVE = VLLM.exclusive | TRTLLM.exclusive
DEFAULT_CPUSET = ONLINE - EXCLUSIVE  # the shared pool: reserved CPUs stay in it (no strict-cpu-reservation)

KUBELET_ROOT = "/var/lib/kubelet"
CPU_STATE_FILE = f"{KUBELET_ROOT}/cpu_manager_state"
MEMORY_STATE_FILE = f"{KUBELET_ROOT}/memory_manager_state"
DEVICE_CHECKPOINT_FILE = f"{KUBELET_ROOT}/device-plugins/kubelet_internal_checkpoint"
RKE2_KUBELET_ARGS = (
    "cpu-manager-policy=static",
    "topology-manager-policy=single-numa-node",
    "topology-manager-scope=pod",
    "memory-manager-policy=Static",
    f"reserved-cpus={format_cpulist(HOUSEKEEPING)}",
    "system-reserved=memory=2Gi",
    "kube-reserved=memory=1536Mi",
    "eviction-hard=memory.available=512Mi",
    "reserved-memory=0:memory=2Gi;1:memory=2Gi",
)


def machine_state_tables() -> dict[int, MemoryNodeState]:
    """The memory_manager_state machineState the kubelet writes for the reference pods, worked out by hand.

    Per node: 64 GiB MemTotal, 4 x 1 GiB huge pages (none of 2 MiB), 2 GiB reserved-memory. So memory allocatable
    = 64 - 2 - 4 = 58 GiB. vllm takes 16 GiB memory and 2 GiB of 1 GiB pages on node 0 (two assignments),
    trtllm 16 GiB memory on node 1 (one assignment).
    """
    return {
        0: MemoryNodeState(
            number_of_assignments=2,
            memory_map=frozen_map(
                {
                    "hugepages-1Gi": MemoryTable(4 * GiB, 0, 4 * GiB, 2 * GiB, 2 * GiB),
                    "hugepages-2Mi": MemoryTable(0, 0, 0, 0, 0),
                    "memory": MemoryTable(64 * GiB, 2 * GiB, 58 * GiB, 16 * GiB, 42 * GiB),
                }
            ),
            cells=(0,),
        ),
        1: MemoryNodeState(
            number_of_assignments=1,
            memory_map=frozen_map(
                {
                    "hugepages-1Gi": MemoryTable(4 * GiB, 0, 4 * GiB, 0, 4 * GiB),
                    "hugepages-2Mi": MemoryTable(0, 0, 0, 0, 0),
                    "memory": MemoryTable(64 * GiB, 2 * GiB, 58 * GiB, 16 * GiB, 42 * GiB),
                }
            ),
            cells=(1,),
        ),
    }


# --------------------------------------------------------------------------------------------- model snapshot
def reference_topology() -> Topology:
    cpus = {
        cpu: Cpu(
            id=cpu,
            online=True,
            socket=cpu_node(cpu),
            core=cpu_core(cpu),
            numa_node=cpu_node(cpu),
            siblings=siblings(cpu),
        )
        for cpu in sorted(ONLINE)
    }
    nodes = {
        node: NumaNode(
            id=node,
            cpus=NODE_CPUS[node],
            distances=(10, 21) if node == 0 else (21, 10),
            mem_total_bytes=MEM_TOTAL,
            hugepages_total=frozen_map(HUGEPAGES_PER_NODE),
        )
        for node in (0, 1)
    }
    isolation = IsolationParams(
        cmdline=CMDLINE,
        isolcpus=ISOLATED,
        isolcpus_flags=("domain", "managed_irq"),
        nohz_full=ISOLATED,
        rcu_nocbs=ISOLATED,
        sys_isolated=ISOLATED,
        sys_nohz_full=ISOLATED,
        cmdline_hugepages=frozen_map({HUGE_1G: 8}),
    )
    return Topology(cpus=frozen_map(cpus), online=ONLINE, nodes=frozen_map(nodes), isolation=isolation)


def _cgroup_path(pod: RefPod, container: RefContainer) -> str:
    uid = pod.uid.replace("-", "_")
    if pod.qos == QOS_GUARANTEED:
        parent = f"kubepods.slice/kubepods-pod{uid}.slice"
    else:
        parent = f"kubepods.slice/kubepods-{pod.qos}.slice/kubepods-{pod.qos}-pod{uid}.slice"
    return f"{parent}/cri-containerd-{container.container_id}.scope"


def reference_cgroups() -> Cgroups:
    pods = []
    for pod in PODS:
        app = ContainerCgroup(
            container_id=pod.container.container_id,
            runtime="containerd",
            cgroup_path=_cgroup_path(pod, pod.container),
            cpus_effective=pod.exclusive or DEFAULT_CPUSET,
            mems_effective=frozenset({pod.numa_node}) if pod.numa_node is not None else frozenset({0, 1}),
            numa_bytes=frozen_map(pod.numa_bytes),
            pids=(4000 + len(pods),),
        )
        pause = ContainerCgroup(
            container_id=pod.sandbox.container_id,
            runtime="containerd",
            cgroup_path=_cgroup_path(pod, pod.sandbox),
            cpus_effective=DEFAULT_CPUSET,
            mems_effective=frozenset({0, 1}),
            numa_bytes=frozen_map({0: 100 * KiB}),
            is_sandbox=True,
        )
        pod_path = _cgroup_path(pod, pod.container).rsplit("/", 1)[0]
        pods.append(PodCgroup(uid=pod.uid, qos=pod.qos, cgroup_path=pod_path, containers=(pause, app)))
    return Cgroups(
        version=2, driver="systemd", pods=tuple(pods), root_cpus_effective=ONLINE
    )


def reference_names() -> Names:
    containers = {}
    pods = {}
    for pod in PODS:
        for container in (pod.sandbox, pod.container):
            containers[container.container_id] = ContainerIdentity(
                container_id=container.container_id,
                pod_uid=pod.uid,
                namespace=pod.namespace,
                pod_name=pod.name,
                container_name=container.name or None,
                container_type="sandbox" if container.sandbox else "container",
                origin="containerd",
            )
        pods[pod.uid] = PodIdentity(pod.uid, pod.namespace, pod.name)
    logs = {pod.uid: (pod.container.name,) for pod in PODS}
    return Names(containers=frozen_map(containers), pods=frozen_map(pods), pod_log_containers=frozen_map(logs))


def reference_kubelet_config() -> KubeletConfig:
    from numawatch.model.kubelet import NodeRegistration
    from numawatch.taints import parse_label, parse_taint

    return KubeletConfig(
        flavor="rke2",
        cpu_manager_policy="static",
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
        memory_manager_policy="Static",
        reserved_cpus=HOUSEKEEPING,
        reserved_memory=frozen_map({n: frozen_map(r) for n, r in RESERVED_MEMORY.items()}),
        system_reserved=frozen_map({"memory": "2Gi"}),
        kube_reserved=frozen_map({"memory": "1536Mi"}),
        files=("/etc/rancher/rke2/config.yaml",),
        explicit=frozenset(
            {
                "cpuManagerPolicy",
                "topologyManagerPolicy",
                "topologyManagerScope",
                "memoryManagerPolicy",
                "reservedSystemCPUs",
                "reservedMemory",
                "systemReserved",
                "kubeReserved",
            }
        ),
        registration=NodeRegistration(
            taints=tuple(parse_taint(taint) for taint in NODE_TAINTS),
            labels=frozen_map(dict(parse_label(label) for label in NODE_LABELS)),
            files=("/etc/rancher/rke2/config.yaml",),
        ),
    )


def reference_kubelet_state() -> KubeletState:
    gpu_pods = [pod for pod in PODS if pod.gpus]
    cpu = CpuManagerState(
        file=CPU_STATE_FILE,
        version=2,
        policy_name="static",
        default_cpuset=DEFAULT_CPUSET,
        entries=frozen_map({pod.uid: frozen_map({pod.container.name: pod.exclusive}) for pod in gpu_pods}),
        checksum_ok=True,
    )
    memory = MemoryManagerState(
        file=MEMORY_STATE_FILE,
        version=1,
        policy_name="Static",
        machine_state=frozen_map(machine_state_tables()),
        entries=frozen_map({pod.uid: frozen_map({pod.container.name: pod.memory_blocks}) for pod in gpu_pods}),
        checksum_ok=True,
    )
    devices = DeviceCheckpoint(
        file=DEVICE_CHECKPOINT_FILE,
        entries=tuple(
            DeviceAssignment(
                pod_uid=pod.uid,
                container_name=pod.container.name,
                resource_name=GPU_RESOURCE,
                devices_per_numa=frozen_map({pod.numa_node: tuple(g.uuid for g in pod.gpus)}),
            )
            for pod in gpu_pods
        ),
        registered=frozen_map({GPU_RESOURCE: tuple(g.uuid for g in GPUS)}),
        checksum_ok=True,
    )
    return KubeletState(cpu=cpu, memory=memory, devices=devices)


def reference_gpus() -> GpuInventory:
    return GpuInventory(
        gpus=tuple(
            GpuDevice(
                pci_address=gpu.pci_address,
                numa_node=gpu.numa_node,
                local_cpus=NODE_CPUS[gpu.numa_node],
                vendor_id="0x10de",
                device_id="0x2330",
                class_code="0x030200",
                uuid=gpu.uuid,
                model="NVIDIA H100 80GB HBM3",
            )
            for gpu in GPUS
        )
    )


def reference_snapshot(root: str | Path = "/nonexistent-numawatch-root") -> Host:
    """The reference node as model objects: every source up and clean."""
    results: dict[str, Any] = {
        "topology": reference_topology(),
        "cgroups": reference_cgroups(),
        "names": reference_names(),
        "kubelet_config": reference_kubelet_config(),
        "kubelet_state": reference_kubelet_state(),
        "gpus_sysfs": reference_gpus(),
    }
    statuses = {name: SourceStatus(name, True, 0.0) for name in results}
    return Host(paths=Paths.from_root(root), results=frozen_map(results), statuses=frozen_map(statuses))


def with_results(host: Host, **results: Any) -> Host:
    """A copy of ``host`` with some sources' snapshots replaced."""
    merged = dict(host.results)
    merged.update(results)
    return replace(host, results=frozen_map(merged))


def with_source_down(host: Host, name: str, reason: str = "planted: source down") -> Host:
    """A copy of ``host`` where one source is down with ``reason``."""
    results = {k: v for k, v in host.results.items() if k != name}
    statuses = dict(host.statuses)
    statuses[name] = SourceStatus(name, False, 0.0, reason)
    return replace(host, results=frozen_map(results), statuses=frozen_map(statuses))


def replace_container(host: Host, container_id: str, **changes: Any) -> Host:
    """A copy of ``host`` with one container cgroup changed (cpus_effective, mems_effective, numa_bytes...)."""
    cgroups: Cgroups = host.cgroups
    pods = []
    for pod in cgroups.pods:
        containers = tuple(replace(c, **changes) if c.container_id == container_id else c for c in pod.containers)
        pods.append(replace(pod, containers=containers))
    return with_results(host, cgroups=replace(cgroups, pods=tuple(pods)))


def replace_pod(host: Host, uid: str, **changes: Any) -> Host:
    """A copy of ``host`` with one pod cgroup changed (qos, containers...)."""
    cgroups: Cgroups = host.cgroups
    pods = tuple(replace(p, **changes) if p.uid == uid else p for p in cgroups.pods)
    return with_results(host, cgroups=replace(cgroups, pods=pods))


def replace_state(host: Host, **changes: Any) -> Host:
    """A copy of ``host`` with parts of the kubelet state replaced (cpu=..., memory=..., devices=..., problems=...)."""
    return with_results(host, kubelet_state=replace(host.kubelet_state, **changes))


def replace_config(host: Host, **changes: Any) -> Host:
    return with_results(host, kubelet_config=replace(host.kubelet_config, **changes))


# --------------------------------------------------------------------------------------------- the files
GPU_IRQ_BASE = 150  # one MSI-X vector per GPU, 150-153, routed to housekeeping CPUs


@dataclass
class ReferenceNode:
    """The reference node written into a FakeHost, with one mutator per drift numawatch must catch.

    Mutators change the files the way the drift happens on a real node (the kubelet config edited without deleting
    the checkpoint, a cpuset rewritten by someone else, ...) and keep everything else as it was, so a test asserts
    that the drift's own check fires. Most drifts have consequences other checks see too (a widened cpuset also
    overlaps other containers' exclusive CPUs): tests assert the target check, not silence elsewhere.
    """

    host: FakeHost
    layout: TopologyLayout
    flavor: str
    cgroup_version: int
    driver: str
    runtime: str
    gpus: tuple[FakeGpu, ...]
    pods: dict[str, PodHandle]  # by RefPod.name
    kubelet: dict[str, Any] = field(default_factory=dict)  # write_kubelet_config keyword arguments
    exclusive: dict[str, CPUSet] = field(default_factory=dict)  # pod UID -> the app container's exclusive CPUs
    device_numa: dict[str, int] = field(default_factory=dict)  # pod UID -> NUMA key the plugin files its GPUs under
    vendor: str = "nvidia"  # whose accelerators sit in the slots (VENDOR_RESOURCES)

    @property
    def resource(self) -> str:
        """The device plugin's resource for this node's accelerators."""
        return VENDOR_RESOURCES[self.vendor]

    def device_id(self, gpu: RefGpu) -> str:
        """The ID the vendor's device plugin registers the accelerator in ``gpu``'s slot under: NVIDIA's GPU UUID,
        the PCI address for AMD's plugin, HLML's id (the board serial) for Habana's."""
        if self.vendor == "nvidia":
            return gpu.uuid
        if self.vendor == "amd":
            return gpu.pci_address
        return next(fake.uuid for fake in self.gpus if fake.pci_address == gpu.pci_address)

    # ----------------------------------------------------------------------------------------- reading
    @property
    def paths(self) -> Paths:
        return self.host.paths

    def read(self) -> Host:
        return read_host(self.paths)

    def evaluate(self, intent: Intent = REFERENCE) -> Evaluation:
        return evaluate(self.read(), intent)

    def pod(self, ref: RefPod) -> PodHandle:
        return self.pods[ref.name]

    # ----------------------------------------------------------------------------------------- writers
    def write_kubelet_config(self, **changes: Any) -> None:
        """(Re)write the kubelet configuration with some settings changed (None: the setting is omitted)."""
        self.kubelet.update(changes)
        write_kubelet_config(self.host, self.flavor, **self.kubelet)

    def write_cpu_state(
        self,
        *,
        policy: str = "static",
        checksum: int | str = "valid",
        version: int = 2,
        pod_entries: Mapping[str, Iterable[int]] | None = None,
    ) -> None:
        entries = {uid: {_container_of(uid).name: cpus} for uid, cpus in sorted(self.exclusive.items())}
        default = ONLINE - frozenset().union(*self.exclusive.values())
        write_cpu_manager_state(
            self.host,
            policy=policy,
            default_cpuset=default,
            entries=entries,
            checksum=checksum,
            version=version,
            pod_entries=pod_entries,
        )

    def write_memory_state(self, *, policy: str = "Static") -> None:
        entries = {pod.uid: {pod.container.name: pod.memory_blocks} for pod in PODS if pod.memory_blocks}
        write_memory_manager_state(self.host, policy=policy, machine_state=machine_state_tables(), entries=entries)

    def write_device_checkpoint(self) -> None:
        entries = [
            DeviceAssignment(
                pod_uid=pod.uid,
                container_name=pod.container.name,
                resource_name=self.resource,
                devices_per_numa={self.device_numa[pod.uid]: tuple(self.device_id(g) for g in pod.gpus)},
            )
            for pod in PODS
            if pod.gpus
        ]
        registered = {self.resource: [self.device_id(g) for g in GPUS]}
        write_device_checkpoint(self.host, entries=entries, registered=registered)

    def pin(self, ref: RefPod, cpus: Iterable[int], mems: Iterable[int] | None = None) -> None:
        """Give a pod's app container other exclusive CPUs, consistently in cpu_manager_state and its cgroup."""
        cpus = frozenset(cpus)
        self.exclusive[ref.uid] = cpus
        self.write_cpu_state()
        set_container_cpus(self.host, self.pod(ref), ref.container.name, cpus, mems)
        # Shared-pool containers follow the new default set, as the kubelet's reconcile loop would make them.
        shared = ONLINE - frozenset().union(*self.exclusive.values())
        for pod in PODS:
            if pod.uid not in self.exclusive and pod.name in self.pods:
                set_container_cpus(self.host, self.pods[pod.name], pod.container.name, shared)

    # ----------------------------------------------------------------------------------------- drifts
    def set_cpu_manager_policy(self, policy: str = "none") -> None:
        """kubelet_cpu_manager_policy (and, as the checkpoint still says static, kubelet_state_stale)."""
        self.write_kubelet_config(cpu_manager_policy=policy)

    def set_topology_manager_policy(self, policy: str = "best-effort") -> None:
        """kubelet_topology_manager_policy."""
        self.write_kubelet_config(topology_manager_policy=policy)

    def set_topology_manager_scope(self, scope: str | None = None) -> None:
        """kubelet_topology_manager_scope: by default the setting is dropped, so the kubelet's "container" applies."""
        self.write_kubelet_config(topology_manager_scope=scope)

    def set_memory_manager_policy(self, policy: str = "None") -> None:
        """kubelet_memory_manager_policy (and kubelet_state_stale: the checkpoint says Static)."""
        self.write_kubelet_config(memory_manager_policy=policy)

    def set_reserved_cpus(self, cpus: str = "0-1,16-17") -> None:
        """kubelet_reserved_cpus_mismatch: by default the packed-numbering guess of "core 0 of each socket"."""
        self.write_kubelet_config(reserved_cpus=cpus)

    def fossilise_cpu_state(self) -> None:
        """kubelet_state_stale (policy_mismatch): the checkpoint of a node that ran with cpu-manager-policy=none."""
        self.write_cpu_state(policy="none")

    def corrupt_cpu_state_checksum(self) -> None:
        """kubelet_state_stale (checksum_mismatch): the file was edited by hand."""
        self.write_cpu_state(checksum=12345)

    def take_cpu_offline(self, cpu: int = 31) -> None:
        """kubelet_state_stale (online_cpus_changed): a CPU went offline after the state was written; the kernel
        takes it out of the topology, the node's cpulist, every cpuset and /proc/interrupts (fakehost.hotplug)."""
        take_cpus_offline(self.host, {cpu})
        self.layout = replace(self.layout, online=self.layout.online - {cpu}, offline=self.layout.offline | {cpu})

    def change_mem_total(self, delta_bytes: int = -4096) -> None:
        """kubelet_state_stale (machine_state_changed): a kernel update moved MemTotal by a page."""
        self._rewrite_topology(mem_per_node_bytes=MEM_TOTAL + delta_bytes)

    def make_burstable(self, ref: RefPod = TRTLLM) -> None:
        """pod_not_guaranteed and container_not_exclusive: requests != limits, so the pod runs on the shared pool."""
        remove_pod(self.host, self.pod(ref))
        self.exclusive.pop(ref.uid, None)
        self.write_cpu_state()
        shared = ONLINE - frozenset().union(*self.exclusive.values())
        self.pods[ref.name] = self._add_pod(replace(ref, qos=QOS_BURSTABLE, exclusive=frozenset()), shared)
        self.pin(VLLM, self.exclusive[VLLM.uid])  # refresh the shared pool of the other pods

    def widen_cpuset(self, ref: RefPod = VLLM) -> None:
        """container_cpuset_drift (and exclusive_cpu_overlap, ...): a daemon-reload reset the cpuset to every CPU."""
        set_container_cpus(self.host, self.pod(ref), ref.container.name, ONLINE)

    def intrude(self, cpus: Iterable[int] = (9, 10)) -> None:
        """exclusive_cpu_overlap: node-exporter's cpuset also covers two of trtllm's exclusive CPUs."""
        shared = ONLINE - frozenset().union(*self.exclusive.values())
        set_container_cpus(self.host, self.pod(NODE_EXPORTER), NODE_EXPORTER.container.name, shared | set(cpus))

    def split_across_nodes(self) -> None:
        """container_numa_split: best-effort admitted vllm on cores of both sockets (1-3 and 13-14 of node 1)."""
        self.pin(VLLM, {1, 2, 3, 13, 14, 17, 18, 19, 29, 30})

    def pin_away_from_gpus(self) -> None:
        """container_gpu_numa_mismatch: vllm pinned on node 1 while its GPUs sit on node 0 (memory moved along)."""
        self.pin(VLLM, {13, 14, 15, 29, 30, 31}, mems={1})

    def unbind_memory(self) -> None:
        """container_memory_numa_mismatch: vllm's cpuset.mems rewritten to every node (--membind forgotten)."""
        set_container_cpus(self.host, self.pod(VLLM), VLLM.container.name, self.exclusive[VLLM.uid], mems={0, 1})

    def spill_memory(self) -> None:
        """container_memory_remote: 6 of vllm's 8 GiB resident memory on the remote node."""
        set_numa_bytes(self.host, self.pod(VLLM), VLLM.container.name, {0: 2 * GiB, 1: 6 * GiB})

    def pin_on_housekeeping(self) -> None:
        """container_outside_isolated (and its cause, kubelet_reserved_cpus_mismatch): reserved-cpus names only
        socket 0's housekeeping core (0,16), so the CPU Manager hands socket 1's (8, 24) to trtllm as exclusive."""
        self.write_kubelet_config(reserved_cpus="0,16")
        self.pin(TRTLLM, {8, 9, 10, 11, 24, 25, 26, 27})

    def register_gpus_without_topology(self) -> None:
        """gpu_numa_unknown (device_plugin): the device plugin filed vllm's GPUs under NUMA -1."""
        self.device_numa[VLLM.uid] = -1
        self.write_device_checkpoint()

    def hide_gpu_numa_node(self, index: int = 3) -> None:
        """gpu_numa_unknown (sysfs): the firmware gives one GPU no NUMA node (numa_node -1).

        The kernel then also reports every online CPU as local to it: ``local_cpus`` is ``cpumask_of_pcibus()`` of
        its bus, which is ``cpu_online_mask`` for a bus without a node (arch/x86/include/asm/pci.h). The node comes
        from the host bridge's _PXM, so every function under that host bridge (root port, switch, NIC) loses it."""
        directory = self.gpus[index].device_dir
        bridge = next(p for p in directory.parents if p.name.startswith("pci") and p.parent.name == "devices")
        for function in (path.parent for path in bridge.rglob("numa_node")):
            (function / "numa_node").write_text("-1\n")
            (function / "local_cpulist").write_text(format_cpulist(self.layout.online) + "\n")
            (function / "local_cpus").write_text(format_cpumask(self.layout.online, max(self.layout.cpus) + 1) + "\n")

    # ----------------------------------------------------------------------------------------- building
    def _rewrite_topology(self, **changes: Any) -> None:
        arguments: dict[str, Any] = dict(_TOPOLOGY, **changes)
        self.layout = add_topology(self.host, **arguments)

    def _add_pod(self, ref: RefPod, cpus: CPUSet) -> PodHandle:
        mems = {ref.numa_node} if ref.numa_node is not None else {0, 1}
        return add_pod(
            self.host,
            uid=ref.uid,
            qos=ref.qos,
            namespace=ref.namespace,
            name=ref.name,
            containers=[
                ContainerSpec(
                    ref.container.name,
                    cpus=cpus,
                    mems=mems,
                    numa_bytes=dict(ref.numa_bytes),
                    container_id=ref.container.container_id,
                    pids=(_pid_of(ref),),
                )
            ],
            runtime=self.runtime,
            bundle_root=_bundle_root(self.flavor, self.runtime),
        )


_TOPOLOGY: dict[str, Any] = {
    "sockets": SOCKETS,
    "cores_per_socket": CORES_PER_SOCKET,
    "threads_per_core": 2,
    "numbering": "interleaved",
    "cmdline": CMDLINE,
    "mem_per_node_bytes": MEM_TOTAL,
    "hugepages_per_node": HUGEPAGES_PER_NODE,
}


def _container_of(uid: str) -> RefContainer:
    return next(pod.container for pod in PODS if pod.uid == uid)


def _pid_of(ref: RefPod) -> int:
    return 4100 + PODS.index(next(p for p in PODS if p.uid == ref.uid))


def _bundle_root(flavor: str, runtime: str) -> str:
    if runtime == "crio":
        return "run"
    return "k3s" if flavor == "rke2" else "containerd"


def reference_node(
    host: FakeHost,
    *,
    flavor: str = "rke2",
    cgroup_version: int = 2,
    driver: str = "systemd",
    runtime: str = "containerd",
    vendor: str = "nvidia",
) -> ReferenceNode:
    """Write the clean reference node into ``host`` and return it with its mutators.

    ``flavor`` "rke2" (kubelet-arg in /etc/rancher/rke2/config.yaml) or "kubeadm"; ``cgroup_version`` 1 or 2;
    ``driver`` "systemd" or "cgroupfs"; ``runtime`` "containerd" or "crio"; ``vendor`` "nvidia" (H100s), "amd"
    (Instinct MI300X, with the KFD topology) or "habana" (Gaudi2) in the GPU slots, registered by that vendor's
    device plugin.
    """
    layout = add_topology(host, **_TOPOLOGY)
    # Guard the hand-written constants of this module against the builder's numbering.
    assert layout.node_cpus(0) == NODE_CPUS[0] and layout.node_cpus(1) == NODE_CPUS[1]
    assert frozenset(layout.core_cpus(s, 0) for s in range(SOCKETS)) == {frozenset({0, 16}), frozenset({8, 24})}
    if vendor == "amd":
        for node_id in range(SOCKETS):
            add_kfd_cpu_node(host, node_id, len(NODE_CPUS[node_id]))
    gpus = tuple(_add_slot(host, index, gpu, SLOTS[index], vendor) for index, gpu in enumerate(GPUS))
    node = ReferenceNode(
        host=host,
        layout=layout,
        flavor=flavor,
        cgroup_version=cgroup_version,
        driver=driver,
        runtime=runtime,
        gpus=gpus,
        pods={},
        kubelet={
            "cpu_manager_policy": "static",
            "topology_manager_policy": "single-numa-node",
            "topology_manager_scope": "pod",
            "memory_manager_policy": "Static",
            "reserved_cpus": HOUSEKEEPING,
            "reserved_memory": RESERVED_MEMORY,
            "system_reserved": {"memory": "2Gi"},
            "kube_reserved": {"memory": "1536Mi"},
            "extra_args": ("eviction-hard=memory.available=512Mi",),
            "node_taints": NODE_TAINTS,
            "node_labels": NODE_LABELS,
        },
        exclusive={pod.uid: pod.exclusive for pod in PODS if pod.exclusive},
        device_numa={pod.uid: pod.numa_node for pod in PODS if pod.gpus and pod.numa_node is not None},
        vendor=vendor,
    )
    add_kubepods(host, version=cgroup_version, driver=driver, cpus=ONLINE, mems={0, 1})
    for pod in PODS:
        node.pods[pod.name] = node._add_pod(pod, pod.exclusive or DEFAULT_CPUSET)
    node.write_kubelet_config()
    node.write_cpu_state()
    node.write_memory_state()
    node.write_device_checkpoint()
    _add_host_layer(host)
    return node


def _add_slot(host: FakeHost, index: int, gpu: RefGpu, slot: RefSlot, vendor: str = "nvidia") -> FakeGpu:
    """One GPU (or AMD / Gaudi accelerator) with its switch and NIC (see RefSlot)."""
    cpus = NODE_CPUS[gpu.numa_node]
    ports = add_pcie_switch(
        host, slot.root_port, slot.upstream, (slot.gpu_port, slot.nic_port), numa_node=gpu.numa_node, local_cpus=cpus
    )
    add_rdma_nic(
        host, slot.nic, name=slot.rdma_device, numa_node=gpu.numa_node, local_cpus=cpus, parent=ports[slot.nic_port]
    )
    common: dict[str, Any] = {
        "numa_node": gpu.numa_node,
        "local_cpus": cpus,
        "msi_irqs": (GPU_IRQ_BASE + index,),
        "parent": ports[slot.gpu_port],
    }
    if vendor == "amd":
        return add_amd_gpu(host, gpu.pci_address, kfd_node=SOCKETS + index, **common)
    if vendor == "habana":
        return add_gaudi(host, gpu.pci_address, **common)
    return add_gpu(host, gpu.pci_address, uuid=gpu.uuid, **common)


def _add_host_layer(host: FakeHost) -> None:
    """Kernel knobs as the reference profile wants them, and device IRQs on housekeeping CPUs only.

    numa_balancing 0, swappiness 0, THP madvise / defrag madvise, the performance governor on every CPU, each
    GPU's MSI-X vector routed to a housekeeping CPU of its node (the default affinity is the housekeeping CPUs, as
    ``irqaffinity=`` would make it), no irqbalance running, NUMA allocation counters on both nodes.
    """
    online = sorted(ONLINE)
    add_kernel_settings(host, governors="performance", cpus=online)
    # intel_idle with C6 disabled on the isolated CPUs (cpupower idle-set -D 11 on them); housekeeping keeps it.
    add_cpuidle(host, online, disabled={cpu: {"C6"} for cpu in ISOLATED})
    housekeeping_of = {0: 0, 1: 8}
    irqs = [
        FakeIrq(0, "timer", HOUSEKEEPING, frozenset({0}), {0: 120}, chip="IO-APIC", hwirq="2-edge"),
        FakeIrq(9, "acpi", HOUSEKEEPING, frozenset({0}), {0: 3}, chip="IO-APIC", hwirq="9-fasteoi"),
    ]
    for index, gpu in enumerate(GPUS):
        target = housekeeping_of[gpu.numa_node]
        irqs.append(
            FakeIrq(
                GPU_IRQ_BASE + index,
                "nvidia",
                HOUSEKEEPING,
                frozenset({target}),
                {target: 1000},
                chip="PCI-MSIX-" + gpu.pci_address,
                hwirq="0-edge",
                node=gpu.numa_node,
            )
        )
    local_timer = {cpu: 5000 if cpu in HOUSEKEEPING else 1 for cpu in online}
    add_irqs(host, online, irqs, {"LOC": local_timer}, default_affinity=HOUSEKEEPING)
    for node in NODE_CPUS:
        add_numastat(host, node, numa_hit=52340112, local_node=52338001, other_node=2111, interleave_hit=2211)
