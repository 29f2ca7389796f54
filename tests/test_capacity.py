"""NUMA capacity and ``check --fit`` answers on fake GPU nodes written as files and read by the real sources.

The node (unless a test says otherwise): 2 sockets x 8 cores x SMT2, interleaved numbering, so NUMA node 0 is CPUs
0-7,16-23 and node 1 is 8-15,24-31 (CPU n and n+16 are siblings); reserved-cpus 0,8,16,24 (core 0 of each socket),
so 14 exclusive CPUs per node; 64 GiB per node with 2 GiB reserved-memory and 4 x 1 GiB huge pages, so the Memory
Manager has 58 GiB of memory and 4 GiB of hugepages-1Gi per node; 4 GPUs, 0-1 on node 0 and 2-3 on node 1.
Every expected number below is worked out by hand from that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest
from fakehost import FakeHost
from fakehost.gpus import add_gpu
from fakehost.kubelet import (
    kubelet_memory_machine_state,
    write_cpu_manager_state,
    write_device_checkpoint,
    write_kubelet_config,
    write_memory_manager_state,
)
from fakehost.pods import ContainerSpec, add_kubepods, add_pod
from fakehost.reference import reference_snapshot, replace_config, with_results, with_source_down
from fakehost.topology import add_topology
from numawatch.capacity import (
    ADMISSION_ERROR,
    MAX_REPLICAS,
    SMT_ALIGNMENT_ERROR,
    TOPOLOGY_AFFINITY_ERROR,
    CapacityUnavailable,
    build_capacity,
    fit_answer,
    largest_fit,
    replicas,
)
from numawatch.cpuset import parse_cpulist
from numawatch.host import Host, read_host
from numawatch.intent import REFERENCE
from numawatch.model.kubelet import DeviceAssignment, MemoryBlock
from numawatch.paths import Paths
from numawatch.shapes import parse_shape

GiB = 1 << 30
HUGE_1G = 1048576  # kB
GPU = "nvidia.com/gpu"
GPU_ADDRESSES = ("0000:18:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:ab:00.0")
GPU_UUIDS = tuple(f"GPU-0c0ffee0-0000-4000-8000-00000000000{i}" for i in range(4))


@dataclass(frozen=True)
class Pod:
    """A Guaranteed single-container pod holding exclusive CPUs, GPUs and Memory Manager blocks."""

    name: str
    cpus: str = ""  # exclusive CPUs ("": the shared pool)
    gpus: tuple[int, ...] = ()  # indices into GPU_UUIDS
    memory: tuple[MemoryBlock, ...] = ()
    live: bool = True  # False: the pod is gone, its checkpoint entries are left behind
    gpu_key: int | None = None  # NUMA key the plugin filed its GPUs under (default: the GPUs' node)

    @property
    def uid(self) -> str:
        return f"00000000-0000-4000-8000-{abs(hash(self.name)) % 10**12:012d}"


@dataclass
class Node:
    sockets: int = 2
    cores: int = 8
    nodes_per_socket: int = 1
    reserved: str | None = "0,8,16,24"
    cpu_policy: str = "static"
    policy: str = "single-numa-node"
    scope: str = "pod"
    memory_policy: str = "Static"
    cpu_options: Mapping[str, str] | None = None
    topology_options: Mapping[str, str] | None = None
    kube_reserved: Mapping[str, str] | None = None
    system_reserved: Mapping[str, str] | None = None
    mem: int = 64 * GiB
    hugepages: Sequence[Mapping[int, int]] = ({HUGE_1G: 4}, {HUGE_1G: 4})
    gpu_nodes: Sequence[int | None] = (0, 0, 1, 1)
    pods: Sequence[Pod] = ()
    extra_kubelet: Mapping[str, object] = field(default_factory=dict)

    def write(self, host: FakeHost) -> Host:
        layout = add_topology(
            host,
            sockets=self.sockets,
            cores_per_socket=self.cores,
            threads_per_core=2,
            nodes_per_socket=self.nodes_per_socket,
            mem_per_node_bytes=self.mem,
            hugepages_per_node=list(self.hugepages),
        )
        nodes = layout.cpu_nodes
        for index, node in enumerate(self.gpu_nodes):
            cpus = layout.node_cpus(node) if node is not None else None
            add_gpu(host, GPU_ADDRESSES[index], numa_node=node, local_cpus=cpus, uuid=GPU_UUIDS[index])
        reserved_memory = {node: {"memory": 2 * GiB} for node in nodes}
        write_kubelet_config(
            host,
            "rke2",
            cpu_manager_policy=self.cpu_policy,
            topology_manager_policy=self.policy,
            topology_manager_scope=self.scope,
            memory_manager_policy=self.memory_policy,
            reserved_cpus=self.reserved,
            reserved_memory=reserved_memory,
            cpu_manager_policy_options=self.cpu_options,
            kube_reserved=self.kube_reserved,
            system_reserved=self.system_reserved,
            extra_args=tuple(
                f"topology-manager-policy-options={k}={v}" for k, v in (self.topology_options or {}).items()
            ),
            **self.extra_kubelet,
        )
        add_kubepods(host, cpus=layout.online, mems=set(nodes))
        exclusive = {pod.uid: {pod.name: pod.cpus} for pod in self.pods if pod.cpus}
        used = frozenset().union(*(parse_cpulist(pod.cpus) for pod in self.pods))
        for pod in self.pods:
            if pod.live:
                add_pod(
                    host,
                    uid=pod.uid,
                    qos="guaranteed",
                    namespace="inference",
                    name=pod.name,
                    containers=[ContainerSpec(pod.name, cpus=pod.cpus or (layout.online - used), mems=set(nodes))],
                )
        write_cpu_manager_state(host, default_cpuset=layout.online - used, entries=exclusive)
        blocks = {pod.uid: {pod.name: pod.memory} for pod in self.pods if pod.memory}
        machine = kubelet_memory_machine_state(
            dict.fromkeys(nodes, self.mem),
            hugepages={node: self.hugepages[node] for node in nodes},
            reserved_memory=reserved_memory,
            entries=blocks,
        )
        write_memory_manager_state(host, machine_state=machine, entries=blocks)
        assignments = []
        for pod in self.pods:
            if pod.gpus:
                key = pod.gpu_key if pod.gpu_key is not None else self.gpu_nodes[pod.gpus[0]]
                devices = {key if key is not None else -1: tuple(GPU_UUIDS[i] for i in pod.gpus)}
                assignments.append(DeviceAssignment(pod.uid, pod.name, GPU, devices))
        write_device_checkpoint(host, entries=assignments, registered={GPU: list(GPU_UUIDS[: len(self.gpu_nodes)])})
        return read_host(host.paths)


def answer(host: Host, text: str):
    return fit_answer(host, REFERENCE, parse_shape(text))


# Node 0 keeps 6 free exclusive CPUs (5-7,21-23), node 1 too (13-15,29-31): the reference node's pods.
FRAGMENTING = (
    Pod("vllm-0", cpus="1-4,17-20", gpus=(0,), memory=(MemoryBlock((0,), "memory", 16 * GiB),)),
    Pod("vllm-1", cpus="9-12,25-28", gpus=(2,), memory=(MemoryBlock((1,), "memory", 16 * GiB),)),
)


# --------------------------------------------------------------------------------------------- the model
def test_an_idle_node_offers_every_unreserved_cpu_memory_hugepage_and_gpu_per_numa_node(fake_host):
    host = Node().write(fake_host)

    capacity = build_capacity(host, REFERENCE)

    assert capacity.allocatable_cpus == {0: parse_cpulist("1-7,17-23"), 1: parse_cpulist("9-15,25-31")}
    assert capacity.free_cpus == capacity.allocatable_cpus
    assert capacity.reserved_cpus == {0, 8, 16, 24}
    assert capacity.threads_per_core == 2
    assert largest_fit(capacity) == {
        (0, "cpu"): 14,
        (1, "cpu"): 14,
        (0, "memory"): 58 * GiB,
        (1, "memory"): 58 * GiB,
        (0, "hugepages-1Gi"): 4 * GiB,
        (1, "hugepages-1Gi"): 4 * GiB,
        (0, "hugepages-2Mi"): 0,
        (1, "hugepages-2Mi"): 0,
        (0, GPU): 2,
        (1, GPU): 2,
    }
    assert capacity.unknown == {}


def test_exclusive_cpus_memory_and_gpus_of_running_pods_are_not_free(fake_host):
    capacity = build_capacity(Node(pods=FRAGMENTING).write(fake_host), REFERENCE)

    assert capacity.free_cpus == {0: parse_cpulist("5-7,21-23"), 1: parse_cpulist("13-15,29-31")}
    assert capacity.memory[0].memory_map["memory"].free == 42 * GiB
    assert capacity.devices[GPU].free == {GPU_UUIDS[1], GPU_UUIDS[3]}
    assert capacity.devices[GPU].aligned


def test_entries_of_pods_that_are_gone_count_as_free_as_the_kubelet_releases_them(fake_host):
    gone = Pod("old", cpus="1-4,17-20", gpus=(0, 1), memory=(MemoryBlock((0,), "memory", 16 * GiB),), live=False)

    capacity = build_capacity(Node(pods=(gone,)).write(fake_host), REFERENCE)

    assert len(capacity.free_cpus[0]) == 14
    assert capacity.memory[0].memory_map["memory"].free == 58 * GiB
    assert capacity.memory[0].number_of_assignments == 0
    assert capacity.devices[GPU].free == set(GPU_UUIDS)


def test_full_pcpus_only_counts_whole_cores_only(fake_host):
    # reserved-cpus 0,8 takes one thread of core 0 of each socket: its siblings 16 and 24 cannot be handed out
    # under full-pcpus-only; a pod holds cores 1-3 of socket 0.
    node = Node(reserved="0,8", pods=(Pod("a", cpus="1-3,17-19"),))

    plain = build_capacity(node.write(FakeHost(fake_host.root / "plain")), REFERENCE)
    node.cpu_options = {"full-pcpus-only": "true"}
    whole = build_capacity(node.write(FakeHost(fake_host.root / "whole")), REFERENCE)

    assert len(plain.allocatable_cpus[0]) == 15 and len(plain.free_cpus[0]) == 9
    assert 16 in plain.free_cpus[0]
    assert len(whole.allocatable_cpus[0]) == 14 and len(whole.free_cpus[0]) == 8
    assert 16 not in whole.free_cpus[0]
    assert whole.full_pcpus_only and not plain.full_pcpus_only


def test_gpus_filed_without_topology_make_the_resource_unaligned(fake_host):
    pods = (Pod("a", cpus="1-2,17-18", gpus=(0,), gpu_key=-1),)

    capacity = build_capacity(Node(pods=pods).write(fake_host), REFERENCE)

    assert not capacity.devices[GPU].aligned
    assert capacity.devices[GPU].without_topology == set(GPU_UUIDS)
    assert largest_fit(capacity)[(None, GPU)] == 3


def test_unassigned_gpus_take_their_numa_node_from_sysfs_and_an_unknown_one_has_none(fake_host):
    capacity = build_capacity(Node(gpu_nodes=(0, 0, 1, None)).write(fake_host), REFERENCE)

    assert capacity.devices[GPU].topology == {
        GPU_UUIDS[0]: {0},
        GPU_UUIDS[1]: {0},
        GPU_UUIDS[2]: {1},
        GPU_UUIDS[3]: frozenset(),
    }


def test_without_reserved_cpus_the_system_and_kube_reserved_cpu_count_is_taken_from_core_zero(fake_host):
    node = Node(reserved=None, system_reserved={"cpu": "500m"}, kube_reserved={"cpu": "1"})

    capacity = build_capacity(node.write(fake_host), REFERENCE)

    assert capacity.reserved_cpus == {0, 16}
    assert any("reservedSystemCPUs is not set" in note and "0,16" in note for note in capacity.notes)


def test_without_a_topology_there_is_no_capacity():
    host = with_source_down(reference_snapshot(), "topology", "planted: sysfs not mounted")

    with pytest.raises(CapacityUnavailable, match="planted: sysfs not mounted"):
        build_capacity(host, REFERENCE)


def test_an_unreadable_cpu_state_leaves_cpus_unknown_and_the_rest_counted():
    host = reference_snapshot()
    host = with_results(host, kubelet_state=replace(host.kubelet_state, cpu=None))

    capacity = build_capacity(host, REFERENCE)

    assert capacity.free_cpus is None
    assert "cpu_manager_state was not found" in capacity.unknown["cpu"]
    assert capacity.memory is not None


# --------------------------------------------------------------------------------------------- fit answers
def test_free_node_seats_the_pod_on_the_lowest_numa_node_that_fits(fake_host):
    result = answer(Node().write(fake_host), "cpu=8,memory=16Gi,nvidia.com/gpu=2")

    assert (result.fits, result.exit_code, result.error) == (True, 0, "")
    assert result.numa_nodes == (0, 1)
    assert result.placement == ((0,),)
    assert result.reason == "the kubelet would seat it on NUMA node 0"
    assert result.as_dict()["fit"]["per_node"] == [
        {"numa_node": 0, "free": {"cpu": 14, "memory": 58 * GiB, GPU: 2}},
        {"numa_node": 1, "free": {"cpu": 14, "memory": 58 * GiB, GPU: 2}},
    ]


def test_fragmented_cpus_are_rejected_by_single_numa_node_with_the_shortfall(fake_host):
    result = answer(Node(pods=FRAGMENTING).write(fake_host), "cpu=8,memory=8Gi")

    assert (result.fits, result.exit_code, result.error, result.never) == (False, 1, TOPOLOGY_AFFINITY_ERROR, False)
    assert result.numa_nodes == ()
    assert result.reason == (
        "single-numa-node needs one NUMA node for the pod: cpu needs 8 CPUs, at most 6 CPUs free on one NUMA node "
        "(node 0): 2 CPUs short"
    )


def test_fragmented_cpus_are_split_under_best_effort_and_refused_under_restricted(fake_host):
    best = answer(
        Node(pods=FRAGMENTING, policy="best-effort").write(FakeHost(fake_host.root / "b")), "cpu=8,memory=8Gi"
    )
    strict = answer(
        Node(pods=FRAGMENTING, policy="restricted").write(FakeHost(fake_host.root / "r")), "cpu=8,memory=8Gi"
    )

    assert best.fits and best.placement == ((0, 1),)
    assert "best-effort admits the split, single-numa-node would refuse it" in best.reason
    assert not strict.fits and strict.error == TOPOLOGY_AFFINITY_ERROR
    assert strict.reason.startswith("restricted admits the pod only on the narrowest NUMA placement possible")


def test_each_resource_fitting_on_a_different_node_names_what_each_node_lacks(fake_host):
    # node 0 has free CPUs but no free GPU; node 1 has a free GPU but its CPUs are taken.
    pods = (Pod("a", gpus=(0, 1)), Pod("b", cpus="9-15,25-31"))

    result = answer(Node(pods=pods).write(fake_host), "cpu=4,memory=8Gi,nvidia.com/gpu=1")

    assert not result.fits
    assert result.reason == (
        "single-numa-node needs one NUMA node for the pod: each resource fits on some node but none holds them all: "
        "node 0 lacks nvidia.com/gpu (needs 1, 0 free); node 1 lacks cpu (needs 4 CPUs, 0 CPUs free)"
    )


def test_a_full_node_rejects_even_a_small_pod(fake_host):
    pods = (Pod("a", cpus="1-7,17-23", gpus=(0, 1)), Pod("b", cpus="9-15,25-31", gpus=(2, 3)))
    host = Node(pods=pods).write(fake_host)

    result = answer(host, "cpu=2,memory=1Gi")

    assert (result.fits, result.exit_code, result.numa_nodes) == (False, 1, ())
    assert "cpu needs 2 CPUs, at most 0 CPUs free on one NUMA node (node 0): 2 CPUs short" in result.reason
    assert replicas(build_capacity(host, REFERENCE), parse_shape("cpu=2,memory=1Gi")) == 0


def test_full_pcpus_only_refuses_odd_cpu_counts_and_counts_whole_free_cores(fake_host):
    node = Node(reserved="0,8", pods=(Pod("a", cpus="1-3,17-19"), Pod("b", cpus="9-14,25-30")))
    plain = node.write(FakeHost(fake_host.root / "plain"))
    node.cpu_options = {"full-pcpus-only": "true"}
    whole = node.write(FakeHost(fake_host.root / "whole"))

    assert answer(plain, "cpu=9,memory=1Gi").placement == ((0,),)
    odd = answer(whole, "cpu=9,memory=1Gi")
    assert (odd.fits, odd.never, odd.error) == (False, True, SMT_ALIGNMENT_ERROR)
    assert "9 CPUs is not a multiple of the 2 threads per core that full-pcpus-only allocates" in odd.reason
    # Rejected is seated nowhere, although node 0 has 8 free CPUs: no NUMA node is offered in either format.
    small = answer(whole, "cpu=3,memory=1Gi")
    assert (small.never, small.error) == (True, SMT_ALIGNMENT_ERROR)
    assert small.numa_nodes == () and json.loads(small.as_json())["fit"]["numa_nodes"] == []
    assert "NUMA nodes that could seat it alone now: none\n" in small.as_text()
    assert [dict(free)["cpu"] for _, free in small.per_node] == [8, 2]
    short = answer(whole, "cpu=10,memory=1Gi")
    assert not short.fits and not short.never
    assert "cpu needs 10 CPUs, at most 8 CPUs free on one NUMA node (node 0): 2 CPUs short" in short.reason
    assert answer(whole, "cpu=8,memory=1Gi").placement == ((0,),)


def test_gpus_without_topology_do_not_stop_single_numa_node_but_land_anywhere(fake_host):
    # Only GPU 3 (on node 1) is free and node 1's CPUs are taken: the plugin's missing topology lets the pod in on
    # node 0 with a GPU of node 1; a plugin that reports topology would have it refused.
    pods = (
        Pod("a", gpus=(0, 1, 2), gpu_key=-1),
        Pod("b", cpus="9-15,25-31"),
    )
    unaligned = answer(Node(pods=pods).write(FakeHost(fake_host.root / "u")), "cpu=4,memory=8Gi,nvidia.com/gpu=1")
    aligned_pods = (replace(pods[0], gpu_key=None, gpus=(0, 1)), replace(pods[0], name="c", gpus=(2,)), pods[1])
    aligned = answer(Node(pods=aligned_pods).write(FakeHost(fake_host.root / "a")), "cpu=4,memory=8Gi,nvidia.com/gpu=1")

    assert unaligned.fits and unaligned.placement == ((0,),)
    assert unaligned.numa_nodes == (0,)
    assert GPU not in dict(unaligned.per_node)[0]
    assert any("registered without NUMA topology" in note and "1 free" in note for note in unaligned.notes)
    assert not aligned.fits and aligned.error == TOPOLOGY_AFFINITY_ERROR


def test_hugepages_short_on_one_node_send_the_pod_to_the_other(fake_host):
    pods = (Pod("a", cpus="1-2,17-18", memory=(MemoryBlock((0,), "hugepages-1Gi", 2 * GiB),)),)
    host = Node(pods=pods).write(fake_host)

    result = answer(host, "cpu=2,memory=4Gi,hugepages-1Gi=3Gi")

    assert result.fits and result.numa_nodes == (1,) and result.placement == ((1,),)
    assert [free["hugepages-1Gi"] for _, free in result.per_node] == [2 * GiB, 4 * GiB]
    never = answer(host, "cpu=2,memory=4Gi,hugepages-1Gi=5Gi")
    assert never.never and never.exit_code == 1
    assert never.reason == (
        "can never fit on this node: hugepages-1Gi 5Gi is more than one NUMA node has: the largest, node 0, has 4Gi "
        "allocatable"
    )


def test_pod_scope_needs_one_node_for_the_pod_container_scope_one_per_container(fake_host):
    # 8 free exclusive CPUs per node; two containers of 6 CPUs.
    pods = (Pod("a", cpus="1-3,17-19"), Pod("b", cpus="9-11,25-27"))
    shape = parse_shape("cpu=6,memory=4Gi+cpu=6,memory=4Gi", name="pair")
    pod_host = Node(pods=pods, scope="pod").write(FakeHost(fake_host.root / "pod"))
    container_host = Node(pods=pods, scope="container").write(FakeHost(fake_host.root / "container"))

    by_pod = fit_answer(pod_host, REFERENCE, shape)
    by_container = fit_answer(container_host, REFERENCE, shape)

    assert not by_pod.fits
    assert "cpu needs 12 CPUs, at most 8 CPUs free on one NUMA node (node 0): 4 CPUs short" in by_pod.reason
    assert by_container.fits and by_container.placement == ((0,), (1,))
    assert by_container.numa_nodes == ()
    assert by_container.reason == "the kubelet would seat container 1 on NUMA node 0; container 2 on NUMA node 1"
    assert replicas(build_capacity(pod_host, REFERENCE), shape) == 0
    assert replicas(build_capacity(container_host, REFERENCE), shape) == 1


def test_a_pod_larger_than_any_numa_node_never_fits_single_numa_node_but_restricted_spans_two(fake_host):
    # The seed's example: 80 cores asked of a 2 x 64-CPU machine (2 sockets x 32 cores x SMT2).
    node = Node(cores=32, reserved="0,32,64,96", gpu_nodes=())
    single = node.write(FakeHost(fake_host.root / "single"))
    node.policy = "restricted"
    restricted = node.write(FakeHost(fake_host.root / "restricted"))

    never = answer(single, "cpu=80,memory=100Gi")
    spanning = answer(restricted, "cpu=80,memory=100Gi")

    assert (never.fits, never.never, never.error, never.exit_code) == (False, True, TOPOLOGY_AFFINITY_ERROR, 1)
    assert never.reason == (
        "can never fit on this node: 80 exclusive CPUs is more than one NUMA node has: the largest, node 0, has 62 "
        "allocatable of 64 online CPUs"
    )
    assert spanning.fits and spanning.placement == ((0, 1),)


def test_prefer_closest_numa_nodes_picks_two_nodes_of_one_socket(fake_host):
    # 4 NUMA nodes (sub-NUMA clustering): 0,1 on socket 0 and 2,3 on socket 1, 8 CPUs each, none reserved. Node 0 is
    # full, so a 12-CPU pod needs two of 1, 2, 3: {1,2} is the lowest mask but crosses sockets; {2,3} does not.
    node = Node(nodes_per_socket=2, reserved=None, policy="restricted", memory_policy="None", gpu_nodes=())
    node.hugepages = ({}, {}, {}, {})
    node.pods = (Pod("a", cpus="0-3,16-19"),)
    plain = node.write(FakeHost(fake_host.root / "plain"))
    node.topology_options = {"prefer-closest-numa-nodes": "true"}
    closest = node.write(FakeHost(fake_host.root / "closest"))

    assert answer(plain, "cpu=12,memory=1Gi").placement == ((1, 2),)
    assert answer(closest, "cpu=12,memory=1Gi").placement == ((2, 3),)


def test_restricted_refuses_cpus_that_need_two_nodes_when_the_memory_prefers_one(fake_host):
    # The CPU Manager's preferred hints are two-node masks (no node has 12 CPUs), the Memory Manager's are single
    # nodes (1Gi fits one): no permutation is preferred, so restricted refuses what best-effort would split.
    node = Node(nodes_per_socket=2, reserved=None, policy="restricted", gpu_nodes=(), hugepages=({}, {}, {}, {}))
    node.pods = (Pod("a", cpus="0-3,16-19"),)

    result = answer(node.write(fake_host), "cpu=12,memory=1Gi")

    assert (result.fits, result.error) == (False, TOPOLOGY_AFFINITY_ERROR)
    assert result.reason.startswith("restricted admits the pod only on the narrowest NUMA placement possible")


def test_memory_grouped_across_nodes_cannot_seat_a_single_numa_pod(fake_host):
    # A pod admitted under best-effort took memory across both nodes: the Memory Manager groups them, so neither can
    # give a single-node placement any more.
    wide = Pod("wide", memory=(MemoryBlock((0, 1), "memory", 60 * GiB),))
    host = Node(pods=(wide,)).write(fake_host)

    result = answer(host, "cpu=2,memory=1Gi")

    assert not result.fits
    assert "grouped by an earlier multi-node memory allocation" in result.reason
    assert largest_fit(build_capacity(host, REFERENCE))[(0, "memory")] == 0


def test_policy_none_admits_without_alignment_and_says_where_the_cpus_land(fake_host):
    result = answer(Node(pods=FRAGMENTING, policy="none").write(fake_host), "cpu=8,memory=8Gi")

    assert result.fits and result.placement == ((0, 1),)
    assert result.reason == (
        "the kubelet would seat it on NUMA nodes 0,1 (split across nodes); topology-manager-policy none aligns nothing"
    )


def test_a_shape_without_exclusive_cpus_memory_or_aligned_devices_has_no_numa_node(fake_host):
    result = answer(Node(cpu_policy="none", memory_policy="None").write(fake_host), "cpu=2,memory=1Gi")

    assert result.fits and result.placement == (None,)
    assert (
        result.reason
        == "the kubelet would seat it on no particular NUMA node (nothing it asks for is placed per NUMA node)"
    )
    assert any("cpu-manager-policy is none" in note for note in result.notes)


def test_a_node_without_the_devices_rejects_with_the_admission_error(fake_host):
    result = answer(Node().write(fake_host), "cpu=2,memory=1Gi,amd.com/gpu=1")

    assert (result.fits, result.error) == (False, ADMISSION_ERROR)
    assert result.reason == "amd.com/gpu is not registered by any device plugin on this node"


def test_a_burstable_shape_gets_no_exclusive_cpus_and_says_so(fake_host):
    result = answer(Node(pods=FRAGMENTING).write(fake_host), "cpu=12,nvidia.com/gpu=1")

    assert result.fits and result.placement == ((0,),)
    assert any("not Guaranteed" in note for note in result.notes)


def test_missing_inputs_make_the_answer_undetermined_with_exit_2():
    host = reference_snapshot()
    no_state = with_source_down(host, "kubelet_state", "planted: /var/lib/kubelet not mounted")
    no_topology = with_source_down(host, "topology", "planted: sysfs not mounted")

    for broken in (no_state, no_topology):
        result = fit_answer(broken, REFERENCE, parse_shape("cpu=2,memory=1Gi"))
        assert (result.fits, result.determined, result.exit_code) == (False, False, 2)
        assert result.reason.startswith("cannot tell: ")
        assert "planted" in result.reason
        assert result.as_text().splitlines()[1] == "CANNOT TELL: " + result.reason.removeprefix("cannot tell: ")


def test_one_reason_behind_several_unknown_dimensions_is_said_once_in_text_and_json():
    host = with_source_down(reference_snapshot(), "kubelet_state", "planted: /var/lib/kubelet not mounted")

    result = fit_answer(host, REFERENCE, parse_shape("cpu=2,memory=1Gi,nvidia.com/gpu=1"))

    reason = (
        "cannot tell: cpu, devices, memory: the kubelet state could not be read: planted: /var/lib/kubelet not mounted"
    )
    assert result.reason == reason
    assert json.loads(result.as_json())["fit"]["reason"] == reason
    assert result.as_text().count("planted") == 1
    assert result.numa_nodes == ()


def test_an_unreadable_kubelet_configuration_falls_back_to_the_intents_policies():
    host = with_source_down(reference_snapshot(), "kubelet_config", "planted: no config")

    result = fit_answer(host, REFERENCE, parse_shape("cpu=6,memory=1Gi"))

    assert result.fits and result.policy == "single-numa-node" and result.scope == "pod"
    assert any("the intent's policies are assumed" in note for note in result.notes)


def test_the_reference_snapshot_has_room_for_a_six_cpu_pod_on_each_node_but_no_gpu():
    host = reference_snapshot()
    capacity = build_capacity(host, REFERENCE)

    assert replicas(capacity, parse_shape("cpu=6,memory=8Gi")) == 2
    assert replicas(capacity, parse_shape("cpu=2,memory=1Gi,hugepages-1Gi=2Gi")) == 3
    assert replicas(capacity, parse_shape("cpu=2,memory=1Gi,nvidia.com/gpu=1")) == 0


def test_replicas_are_counted_on_an_idle_node_until_the_scarcest_resource_runs_out(fake_host):
    capacity = build_capacity(Node().write(fake_host), REFERENCE)

    assert replicas(capacity, parse_shape("cpu=4,memory=8Gi,nvidia.com/gpu=1")) == 4  # GPUs: 2 per node
    assert replicas(capacity, parse_shape("cpu=8,memory=8Gi,nvidia.com/gpu=1")) == 2  # CPUs: one 8 per 14
    assert replicas(capacity, parse_shape("cpu=1,memory=20Gi")) == 4  # memory: two of 20 per 58 GiB
    assert replicas(capacity, parse_shape("cpu=1,memory=1Mi")) == 28  # every exclusive CPU


def test_a_shape_that_consumes_nothing_numawatch_counts_has_no_replica_count(fake_host):
    capacity = build_capacity(Node(cpu_policy="none", memory_policy="None").write(fake_host), REFERENCE)

    assert replicas(capacity, parse_shape("cpu=2,memory=1Gi")) is None
    assert MAX_REPLICAS == 1000


def test_json_answer_has_the_contract_keys_and_amounts_in_cpus_bytes_and_devices(fake_host):
    result = answer(Node(pods=FRAGMENTING).write(fake_host), "cpu=4,memory=8Gi,nvidia.com/gpu=1,hugepages-1Gi=1Gi")

    document = json.loads(result.as_json())

    assert document == {
        "fit": {
            "fits": True,
            "numa_nodes": [0, 1],
            "policy": "single-numa-node",
            "reason": "the kubelet would seat it on NUMA node 0",
            "per_node": [
                {"numa_node": 0, "free": {"cpu": 6, "hugepages-1Gi": 4 * GiB, "memory": 42 * GiB, GPU: 1}},
                {"numa_node": 1, "free": {"cpu": 6, "hugepages-1Gi": 4 * GiB, "memory": 42 * GiB, GPU: 1}},
            ],
            "scope": "pod",
            "shape": "cpu=4,memory=8Gi,hugepages-1Gi=1Gi,nvidia.com/gpu=1",
            "placement": [[0]],
            "never": False,
            "error": "",
            "determined": True,
            "notes": [],
        }
    }


def test_text_answer_reads_like_the_maitre_d(fake_host):
    result = answer(Node(pods=FRAGMENTING).write(fake_host), "cpu=8,memory=8Gi")

    assert result.as_text() == (
        "shape cpu=8,memory=8Gi under topology-manager-policy=single-numa-node, scope=pod\n"
        "REJECTED (TopologyAffinityError): single-numa-node needs one NUMA node for the pod: cpu needs 8 CPUs, at "
        "most 6 CPUs free on one NUMA node (node 0): 2 CPUs short\n"
        "NUMA nodes that could seat it alone now: none\n"
        "  node 0 free: 6 CPUs, memory 42Gi\n"
        "  node 1 free: 6 CPUs, memory 42Gi\n"
    )


def test_kubelet_config_options_given_as_yaml_booleans_are_honoured():
    host = replace_config(reference_snapshot(), cpu_manager_policy_options={"full-pcpus-only": True})

    assert build_capacity(host, REFERENCE).full_pcpus_only


def test_the_real_kernel_capture_without_a_kubelet_cannot_tell_and_exports_no_series(realkernel_root):
    """A real 4-node kernel's files (no kubelet on it): the topology is read, every kubelet input is missing."""
    host = read_host(Paths.from_root(realkernel_root))

    capacity = build_capacity(host, REFERENCE)
    result = fit_answer(host, REFERENCE, parse_shape("cpu=2,memory=1Gi"))

    assert capacity.node_ids == (0, 1, 2, 3)
    assert set(capacity.unknown) == {"cpu", "memory", "devices"}
    assert (result.determined, result.exit_code) == (False, 2)
    assert "no kubelet directory" in result.reason
