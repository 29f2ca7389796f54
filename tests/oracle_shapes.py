"""The fake hosts the hwloc oracle reads (tests/test_corpus_oracle.py): one per shape of machine the builders make.

Each ``Shape`` writes a tree with the project's own builders (tests/fakehost, bench/generate_host.py): the
reference GPU node and its variants, bare topologies of other shapes (no SMT, SMT switched off at run time, sub-NUMA
clustering, CPU-less memory nodes, packed and sparse CPU numbering, a kernel without NUMA, four sockets), and the
benchmarks' generated node at two sizes. hwloc must read every one of them exactly as numawatch does; where it does
not, the builder writes something no kernel would, and the builder is what gets fixed.

``FIRMWARE_OVERLAP`` is the exception: a tree no sane kernel prints (every node's cpulist claims every CPU, a known
buggy-SRAT case), written on purpose to pin down how a CPU claimed by several nodes is mapped.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fakehost import FakeHost
from fakehost.gpus import add_gpu
from fakehost.reference import reference_node
from fakehost.topology import add_topology, format_cpumask
from numawatch.cpuset import format_cpulist

BENCH = Path(__file__).resolve().parents[1] / "bench"


@dataclass(frozen=True)
class Shape:
    name: str
    description: str
    build: Callable[[Path], None]


def _reference(root: Path) -> None:
    reference_node(FakeHost(root))


def _reference_amd(root: Path) -> None:
    reference_node(FakeHost(root), vendor="amd")


def _reference_gaudi(root: Path) -> None:
    reference_node(FakeHost(root), vendor="habana")


def _reference_gpu_numa_hidden(root: Path) -> None:
    reference_node(FakeHost(root)).hide_gpu_numa_node(3)


def _reference_cpu_offline(root: Path) -> None:
    reference_node(FakeHost(root)).take_cpu_offline(31)


def _topology(**arguments: object) -> Callable[[Path], None]:
    def build(root: Path) -> None:
        add_topology(FakeHost(root), **arguments)  # type: ignore[arg-type]

    return build


def _snc_with_gpus(root: Path) -> None:
    """Two sockets of two sub-NUMA nodes each, and a GPU local to each node (the PCI locality of SNC)."""
    host = FakeHost(root)
    layout = add_topology(host, sockets=2, cores_per_socket=8, nodes_per_socket=2)
    for node in layout.cpu_nodes:
        add_gpu(host, f"0000:{0x18 + 0x20 * node:02x}:00.0", numa_node=node, local_cpus=layout.node_cpus(node))


def _generated(cpus: int) -> Callable[[Path], None]:
    def build(root: Path) -> None:
        if str(BENCH) not in sys.path:
            sys.path.insert(0, str(BENCH))
        from generate_host import HostSpec, generate

        generate(root, HostSpec.scaled(cpus))

    return build


def _firmware_overlap(root: Path) -> None:
    """A 2-socket host whose firmware put every CPU in both NUMA nodes: each ``nodeN/cpulist`` (and ``cpumap``)
    names all online CPUs."""
    host = FakeHost(root)
    layout = add_topology(host, sockets=2, cores_per_socket=4)
    everything = sorted(layout.online)
    for node in layout.cpu_nodes:
        host.write(f"sys/devices/system/node/node{node}/cpulist", format_cpulist(everything))
        host.write(f"sys/devices/system/node/node{node}/cpumap", format_cpumask(everything, max(layout.cpus) + 1))


SHAPES: tuple[Shape, ...] = (
    Shape("reference", "the reference GPU node: 2 sockets x 8 cores x SMT2, 4 GPUs (tests/fakehost/reference.py)",
          _reference),
    Shape("reference-amd", "the reference node with 4 AMD Instinct MI300X (amdgpu's sysfs, the KFD topology)",
          _reference_amd),
    Shape("reference-gaudi", "the reference node with 4 Intel Gaudi2 (habanalabs' sysfs)", _reference_gaudi),
    Shape("reference-gpu-numa-hidden", "the reference node with one GPU's numa_node -1 (hide_gpu_numa_node)",
          _reference_gpu_numa_hidden),
    Shape("reference-cpu-offline", "the reference node with CPU 31 offline (take_cpu_offline)", _reference_cpu_offline),
    Shape("smt-switched-off", "2 x 8 x SMT2 with every second thread offline, as `smt/control off` leaves it",
          _topology(sockets=2, cores_per_socket=8, offline=range(16, 32))),
    Shape("no-smt", "2 sockets x 8 cores, one thread each", _topology(sockets=2, cores_per_socket=8,
                                                                    threads_per_core=1)),
    Shape("snc-4-nodes-gpus", "2 sockets x 2 sub-NUMA nodes, a GPU on each node", _snc_with_gpus),
    Shape("cpu-less-nodes", "2 sockets and 2 CPU-less memory nodes (HBM/CXL style)",
          _topology(sockets=2, cores_per_socket=4, memory_only_nodes=2)),
    Shape("offline-cpus", "2 x 4 x SMT2 with CPUs 3, 9 and 15 offline (one thread of partly offline cores)",
          _topology(sockets=2, cores_per_socket=4, offline=(3, 9, 15))),
    Shape("packed-numbering", "SMT siblings numbered next to each other (cpu = core * 2 + thread)",
          _topology(sockets=2, cores_per_socket=4, numbering="packed")),
    Shape("sparse-cpu-ids", "CPU ids with gaps (0, 2, 4, ...)", _topology(sockets=1, cores_per_socket=4,
                                                                         cpu_ids=[0, 2, 4, 6, 8, 10, 12, 14])),
    Shape("no-numa", "a CONFIG_NUMA=n kernel: no node/ directory", _topology(sockets=1, cores_per_socket=4,
                                                                            numa=False)),
    Shape("4-sockets-8-nodes", "4 sockets x 2 nodes x 4 cores x SMT2",
          _topology(sockets=4, cores_per_socket=4, nodes_per_socket=2)),
    Shape("generated-32", "bench/generate_host.py --cpus 32 (4 GPUs, NICs, NVMe drives)", _generated(32)),
    Shape("generated-128", "bench/generate_host.py --cpus 128 (8 GPUs, NICs, NVMe drives)", _generated(128)),
)  # fmt: skip

FIRMWARE_OVERLAP = Shape(
    "firmware-overlapping-nodes", "every NUMA node's cpulist claims every CPU (buggy SRAT)", _firmware_overlap
)
