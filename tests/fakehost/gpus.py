"""Fake PCI functions: NVIDIA and AMD GPUs, Intel Gaudi accelerators (and other devices, so the accelerator filter
is exercised) in the real sysfs shape.

Each device is a directory ``sys/devices/pci<domain>:<bus>/<bdf>/`` with ``vendor``, ``device``, ``class``,
``numa_node`` (``-1`` when unknown), ``local_cpulist``, ``local_cpus`` (hex mask), ``irq``, ``msi_irqs/<n>`` and
``config`` (the first 256 bytes of its configuration space: IDs, class, header type and, for a bridge, its primary,
secondary and subordinate bus numbers, which is what hwloc builds the hierarchy from), reached through the relative
link ``sys/bus/pci/devices/<bdf> -> ../../../devices/pci<domain>:<bus>/<bdf>`` as the kernel makes it. A device
behind bridges nests in their directories (``parent``): ``add_pcie_switch`` writes a root port and a PCIe switch
(upstream and downstream ports) the way a GPU baseboard has them. GPUs also get the driver's
``proc/driver/nvidia/gpus/<bdf>/information``; RDMA NICs (``add_rdma_nic``) their ``infiniband/<name>`` directory and
the ``sys/class/infiniband/<name>`` link.

AMD GPUs (``add_amd_gpu``) are laid out as amdgpu lays them out: the function bound to the driver
(``driver`` link, ``sys/bus/pci/drivers/amdgpu/<bdf>``), ``unique_id`` and ``product_name`` in its directory,
``drm/card<n>`` and ``drm/renderD<n>``, and a GPU node in the KFD topology (``add_kfd_cpu_node`` writes the CPU nodes
KFD lists first). Gaudi accelerators (``add_gaudi``) as habanalabs does: bound to ``habanalabs``, ``serial_number``,
``device_type``, ``pci_addr`` and ``module_id`` in the function's directory, and ``accel/accel<n>`` under it with
the ``sys/class/accel/accel<n>`` link.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from numawatch.cpuset import CPUSet, format_cpulist, parse_cpulist

from fakehost.topology import format_cpumask

if TYPE_CHECKING:
    from fakehost import FakeHost

NVIDIA = "0x10de"
AMD = "0x1002"
HABANA = "0x1da3"
MI300X = "0x74a1"  # Aqua Vanjaram [Instinct MI300X] (pci.ids)
MI250X = "0x740c"  # Aldebaran [Instinct MI250X]
GAUDI2 = "0x1020"  # Gaudi2 (HL-225)
CLASS_PROCESSING_ACCELERATOR = "0x120000"  # Instinct MI300, Gaudi
CLASS_DISPLAY_OTHER = "0x038000"  # Instinct MI100 / MI200
CLASS_AMD_AUDIO = "0x040300"  # the HDMI audio function of a Radeon card
CLASS_3D_CONTROLLER = "0x030200"  # data-centre GPUs (H100, A100, ...)
CLASS_VGA = "0x030000"
CLASS_ETHERNET = "0x020000"
CLASS_AUDIO = "0x040300"  # NVIDIA HDMI audio function on the same card as a VGA GPU
CLASS_BRIDGE_OTHER = "0x068000"  # NVSwitch
CLASS_PCI_BRIDGE = "0x060400"  # root ports and PCIe switch ports
CLASS_INFINIBAND = "0x020700"
MELLANOX = "0x15b3"
CONNECTX7 = "0x1021"

_BDF = re.compile(r"^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


@dataclass(frozen=True)
class FakeGpu:
    pci_address: str
    uuid: str
    model: str
    numa_node: int | None
    local_cpus: CPUSet | None
    device_dir: Path  # the real directory under sys/devices
    vendor: str = "nvidia"  # the vendor label: "nvidia", "amd", "habana"


def fake_uuid(pci_address: str) -> str:
    """A stable ``GPU-<uuid>`` for an address, so tests and benchmarks get the same UUIDs every run."""
    return f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'numawatch-fake-gpu:{pci_address}')}"


def _nr_cpu_ids(host: FakeHost, cpus: CPUSet) -> int:
    """The mask width: from the fake's cpu/possible when add_topology ran, else just wide enough."""
    possible = host.path("sys/devices/system/cpu/possible")
    if possible.is_file():
        ids = parse_cpulist(possible.read_text())
        if ids:
            return max(ids) + 1
    return max(cpus) + 1 if cpus else 1


def config_space(vendor_id: str, device_id: str, class_code: str, buses: tuple[int, int, int] | None = None) -> bytes:
    """The first 256 bytes of a function's configuration space: a type 0 header, or with ``buses`` (primary,
    secondary, subordinate) a type 1 (PCI-to-PCI bridge) header (PCI Local Bus Specification, 6.1)."""
    data = bytearray(256)
    data[0:2] = int(vendor_id, 16).to_bytes(2, "little")
    data[2:4] = int(device_id, 16).to_bytes(2, "little")
    data[0x09:0x0C] = int(class_code, 16).to_bytes(3, "little")  # prog-if, subclass, base class
    if buses is not None:
        data[0x0E] = 0x01
        data[0x18], data[0x19], data[0x1A] = buses
    return bytes(data)


def add_pci_device(
    host: FakeHost,
    pci_address: str,
    *,
    vendor_id: str,
    device_id: str,
    class_code: str,
    numa_node: int | None = None,
    local_cpus: Iterable[int] | str | None = None,
    msi_irqs: Iterable[int] = (),
    parent: str | None = None,
    buses: tuple[int, int, int] | None = None,
    config: bool = True,
) -> Path:
    """Write one PCI function and its ``sys/bus/pci/devices`` link; return its directory under sys/devices.

    ``numa_node`` None writes ``-1`` (firmware gave no locality). ``local_cpus`` is a CPU list string or CPU ids;
    None writes no local_cpulist/local_cpus (as on a kernel without NUMA). ``msi_irqs`` creates ``msi_irqs/<n>``
    entries (what the IRQ readers use to find a device's interrupts) and sets ``irq`` to the first one.
    ``parent``: the directory (relative to the host root) of the bridge it sits behind; None puts it on its bus's
    root (``sys/devices/pci<domain>:<bus>``). ``buses``: a bridge's (primary, secondary, subordinate) bus numbers
    for its configuration space; ``config`` False writes none (as the QEMU captures lack it).
    """
    address = pci_address.lower()
    match = _BDF.match(address)
    if match is None:
        raise ValueError(f"PCI address must look like 0000:18:00.0, not {pci_address!r}")
    domain, bus = match.group(1), match.group(2)
    parent_dir = parent if parent is not None else f"sys/devices/pci{domain}:{bus}"
    rel_dir = f"{parent_dir}/{address}"
    host.write(f"{rel_dir}/vendor", vendor_id)
    host.write(f"{rel_dir}/device", device_id)
    host.write(f"{rel_dir}/class", class_code)
    host.write(f"{rel_dir}/numa_node", str(-1 if numa_node is None else numa_node))
    if config:
        host.write(f"{rel_dir}/config", config_space(vendor_id, device_id, class_code, buses))
    if local_cpus is not None:
        cpus = parse_cpulist(local_cpus) if isinstance(local_cpus, str) else frozenset(local_cpus)
        host.write(f"{rel_dir}/local_cpulist", format_cpulist(cpus))
        host.write(f"{rel_dir}/local_cpus", format_cpumask(cpus, _nr_cpu_ids(host, cpus)))
    irqs = list(msi_irqs)
    host.write(f"{rel_dir}/irq", str(irqs[0] if irqs else 0))
    for irq in irqs:
        host.write(f"{rel_dir}/msi_irqs/{irq}", "msix")
    host.symlink(f"sys/bus/pci/devices/{address}", "../../../" + rel_dir.removeprefix("sys/"))
    return host.path(rel_dir)


def _bus(address: str) -> int:
    return int(address.split(":")[1], 16)


def add_pcie_switch(
    host: FakeHost,
    root_port: str,
    upstream: str,
    downstream: Iterable[str],
    *,
    numa_node: int | None,
    local_cpus: Iterable[int] | str | None,
    config: bool = True,
) -> dict[str, str]:
    """A root port of its host bridge with a PCIe switch behind it (a GPU baseboard's PEX switch): the upstream port
    on the root port's secondary bus, the downstream ports on the upstream port's, and behind them, in address
    order, the buses that follow: downstream ports ``0000:17:00.0`` and ``0000:17:01.0`` lead to buses 0x18 and
    0x19, where the caller puts the GPU and the NIC. Returns downstream port -> its directory (the ``parent`` of the
    device behind it)."""
    ports = sorted(address.lower() for address in downstream)
    first_behind = _bus(ports[0]) + 1 if ports else _bus(upstream) + 1
    behind = {port: first_behind + index for index, port in enumerate(ports)}
    last = max(behind.values(), default=_bus(upstream))
    common = {"numa_node": numa_node, "local_cpus": local_cpus, "config": config}
    rp_dir = add_pci_device(
        host, root_port, vendor_id="0x8086", device_id="0x352a", class_code=CLASS_PCI_BRIDGE,
        buses=(_bus(root_port), _bus(upstream), last), **common,
    )  # fmt: skip
    rp_rel = str(rp_dir.relative_to(host.root))
    usp_dir = add_pci_device(
        host, upstream, vendor_id="0x1000", device_id="0xc030", class_code=CLASS_PCI_BRIDGE, parent=rp_rel,
        buses=(_bus(upstream), _bus(ports[0]) if ports else _bus(upstream) + 1, last), **common,
    )  # fmt: skip
    usp_rel = str(usp_dir.relative_to(host.root))
    found = {}
    for port in ports:
        dsp_dir = add_pci_device(
            host, port, vendor_id="0x1000", device_id="0xc030", class_code=CLASS_PCI_BRIDGE, parent=usp_rel,
            buses=(_bus(port), behind[port], behind[port]), **common,
        )  # fmt: skip
        found[port] = str(dsp_dir.relative_to(host.root))
    return found


def add_rdma_nic(
    host: FakeHost,
    pci_address: str,
    *,
    name: str | None,
    numa_node: int | None,
    local_cpus: Iterable[int] | str | None,
    parent: str | None = None,
    class_code: str = CLASS_INFINIBAND,
    virtual_of: str | None = None,
    config: bool = True,
) -> Path:
    """A ConnectX NIC: class InfiniBand by default (``CLASS_ETHERNET`` for RoCE), and with ``name`` its RDMA device
    (``infiniband/<name>/`` in the function's directory and the ``sys/class/infiniband/<name>`` link the mlx5 driver
    makes); None: no driver bound. ``virtual_of``: the physical function's address, for an SR-IOV VF (``physfn``)."""
    directory = add_pci_device(
        host, pci_address, vendor_id=MELLANOX, device_id=CONNECTX7, class_code=class_code,
        numa_node=numa_node, local_cpus=local_cpus, parent=parent, config=config,
    )  # fmt: skip
    rel = str(directory.relative_to(host.root))
    if virtual_of is not None:
        host.symlink(f"{rel}/physfn", f"../{virtual_of.lower()}")
    if name is not None:
        add_rdma_device(host, directory, name)
    return directory


def add_rdma_device(host: FakeHost, directory: Path, name: str) -> None:
    """The RDMA device a driver (mlx5_ib) registers for the PCI function at ``directory``: ``infiniband/<name>/``
    with its ``device`` link back to the function, and ``sys/class/infiniband/<name>``."""
    rel = str(directory.relative_to(host.root))
    host.write(f"{rel}/infiniband/{name}/node_type", "1: CA")
    host.symlink(f"{rel}/infiniband/{name}/device", f"../../../{directory.name}")
    host.symlink(f"sys/class/infiniband/{name}", "../../" + rel.removeprefix("sys/") + f"/infiniband/{name}")


def add_gpu(
    host: FakeHost,
    pci_address: str,
    *,
    numa_node: int | None,
    local_cpus: Iterable[int] | str | None,
    uuid: str | None = None,
    model: str = "NVIDIA H100 80GB HBM3",
    nvidia_proc: bool = True,
    device_id: str = "0x2330",
    class_code: str = CLASS_3D_CONTROLLER,
    minor: int | None = None,
    msi_irqs: Iterable[int] = (),
    parent: str | None = None,
) -> FakeGpu:
    """Write an NVIDIA GPU at ``pci_address`` (``0000:18:00.0``).

    ``numa_node`` None means the kernel reports ``-1``; ``local_cpus`` as in ``add_pci_device``. ``uuid`` None
    derives a stable one from the address (``fake_uuid``). ``nvidia_proc`` False leaves out the driver's procfs
    entry (nvidia module not loaded: UUID and model unknown). ``minor`` is the ``Device Minor`` line (default: the
    number of GPUs already in proc/driver/nvidia/gpus). ``parent``: the bridge directory it sits behind (see
    ``add_pci_device``).
    """
    address = pci_address.lower()
    gpu_uuid = uuid if uuid is not None else fake_uuid(address)
    irqs = list(msi_irqs)
    device_dir = add_pci_device(
        host,
        address,
        vendor_id=NVIDIA,
        device_id=device_id,
        class_code=class_code,
        numa_node=numa_node,
        local_cpus=local_cpus,
        msi_irqs=irqs,
        parent=parent,
    )
    if nvidia_proc:
        gpus_dir = host.path("proc/driver/nvidia/gpus")
        if minor is None:
            minor = len(list(gpus_dir.iterdir())) if gpus_dir.is_dir() else 0
        host.write(
            f"proc/driver/nvidia/gpus/{address}/information",
            f"Model: \t\t {model}\n"
            f"IRQ:   \t\t {irqs[0] if irqs else 0}\n"
            f"GPU UUID: \t {gpu_uuid}\n"
            "Video BIOS: \t 96.00.74.00.0d\n"
            "Bus Type: \t PCIe\n"
            "DMA Size: \t 52 bits\n"
            "DMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {address}\n"
            f"Device Minor: \t {minor}\n"
            "GPU Excluded:\t No\n",
        )
    if local_cpus is None:
        cpus = None
    else:
        cpus = parse_cpulist(local_cpus) if isinstance(local_cpus, str) else frozenset(local_cpus)
    return FakeGpu(address, gpu_uuid, model, numa_node, cpus, device_dir)


def fake_amd_unique_id(pci_address: str) -> str:
    """A stable amdgpu ``unique_id`` (16 hex digits) for an address."""
    return uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"numawatch-fake-amd:{pci_address}").hex[:16]


def fake_gaudi_serial(pci_address: str) -> str:
    """A stable Gaudi board serial number (``AN`` and eight digits) for an address."""
    return f"AN{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'numawatch-fake-gaudi:{pci_address}').int % 10**8:08d}"


def _bind(host: FakeHost, device_dir: Path, driver: str) -> None:
    """The function bound to ``driver``: its ``driver`` link and ``sys/bus/pci/drivers/<driver>/<bdf>``."""
    rel_dir = device_dir.relative_to(host.root).as_posix()
    depth = rel_dir.count("/")
    host.symlink(f"{rel_dir}/driver", "../" * depth + f"bus/pci/drivers/{driver}")
    host.symlink(f"sys/bus/pci/drivers/{driver}/{device_dir.name}", "../../../../" + rel_dir.removeprefix("sys/"))


def add_kfd_cpu_node(host: FakeHost, node: int, cpu_cores: int) -> None:
    """A CPU node of the KFD topology (``sys/class/kfd/kfd/topology/nodes/<node>/properties``): KFD lists one per
    NUMA node with CPUs before the GPUs (kfd_topology.c)."""
    host.write(
        f"sys/class/kfd/kfd/topology/nodes/{node}/properties",
        f"cpu_cores_count {cpu_cores}\nsimd_count 0\nmem_banks_count 1\ncaches_count 0\nio_links_count 1\n"
        "cpu_core_id_base 0\nsimd_id_base 0\nmax_waves_per_simd 0\nlds_size_in_kb 0\ngds_size_in_kb 0\n"
        "num_gws 0\nwave_front_size 0\narray_count 0\nsimd_arrays_per_engine 0\ncu_per_simd_array 0\n"
        "simd_per_cu 0\nmax_slots_scratch_cu 0\ngfx_target_version 0\nvendor_id 0\ndevice_id 0\n"
        "location_id 0\ndomain 0\ndrm_render_minor 0\nhive_id 0\nnum_sdma_engines 0\n"
        "num_sdma_xgmi_engines 0\nnum_sdma_queues_per_engine 0\nnum_cp_queues 0\nmax_engine_clk_ccompute 3700\n",
    )


def add_amd_gpu(
    host: FakeHost,
    pci_address: str,
    *,
    numa_node: int | None,
    local_cpus: Iterable[int] | str | None,
    unique_id: str | None = None,
    model: str | None = "AMD Instinct MI300X",
    device_id: str = MI300X,
    class_code: str = CLASS_PROCESSING_ACCELERATOR,
    driver: bool = True,
    sysfs_unique_id: bool = True,
    kfd_node: int | None = None,
    card: int | None = None,
    msi_irqs: Iterable[int] = (),
    parent: str | None = None,
) -> FakeGpu:
    """Write an AMD Instinct GPU at ``pci_address`` as amdgpu lays it out.

    ``unique_id`` None derives a stable one (``fake_amd_unique_id``). ``driver`` False: amdgpu not loaded (no
    driver attributes, no KFD node). ``sysfs_unique_id`` False leaves ``unique_id`` out of the function's directory
    (older ASICs; only KFD's decimal one then). ``kfd_node``: its KFD topology node number (None: none written).
    ``card``: the DRM minor (default: the number of amdgpu functions already bound).
    """
    address = pci_address.lower()
    unique = unique_id if unique_id is not None else fake_amd_unique_id(address)
    device_dir = add_pci_device(
        host,
        address,
        vendor_id=AMD,
        device_id=device_id,
        class_code=class_code,
        numa_node=numa_node,
        local_cpus=local_cpus,
        msi_irqs=msi_irqs,
        parent=parent,
    )
    rel_dir = device_dir.relative_to(host.root).as_posix()
    if driver:
        bound = host.path("sys/bus/pci/drivers/amdgpu")
        minor = card if card is not None else (len(list(bound.iterdir())) if bound.is_dir() else 0)
        _bind(host, device_dir, "amdgpu")
        if sysfs_unique_id:
            host.write(f"{rel_dir}/unique_id", unique)
        if model is not None:
            host.write(f"{rel_dir}/product_name", model)
        host.write(f"{rel_dir}/drm/card{minor}/dev", f"226:{minor}")
        host.write(f"{rel_dir}/drm/renderD{128 + minor}/dev", f"226:{128 + minor}")
        if kfd_node is not None:
            match = _BDF.match(address)
            assert match is not None
            domain, bus, dev, fn = (int(part, 16) for part in match.groups())
            host.write(
                f"sys/class/kfd/kfd/topology/nodes/{kfd_node}/properties",
                "cpu_cores_count 0\nsimd_count 1216\nmem_banks_count 1\ncaches_count 0\nio_links_count 1\n"
                f"gfx_target_version 90402\nvendor_id 4098\ndevice_id {int(device_id, 16)}\n"
                f"location_id {(bus << 8) | (dev << 3) | fn}\ndomain {domain}\n"
                f"drm_render_minor {128 + minor}\nhive_id 0\nunique_id {int(unique, 16)}\n"
                "num_xcc 8\nmax_engine_clk_fcompute 2100\n",
            )
    if local_cpus is None:
        cpus = None
    else:
        cpus = parse_cpulist(local_cpus) if isinstance(local_cpus, str) else frozenset(local_cpus)
    return FakeGpu(address, unique if driver else "", model or "", numa_node, cpus, device_dir, vendor="amd")


def add_gaudi(
    host: FakeHost,
    pci_address: str,
    *,
    numa_node: int | None,
    local_cpus: Iterable[int] | str | None,
    serial: str | None = None,
    device_type: str = "GAUDI2",
    device_id: str = GAUDI2,
    driver: bool = True,
    accel: int | None = None,
    msi_irqs: Iterable[int] = (),
    parent: str | None = None,
) -> FakeGpu:
    """Write an Intel Gaudi accelerator at ``pci_address`` as habanalabs lays it out (sysfs-driver-habanalabs).

    ``serial`` None derives a stable one (``fake_gaudi_serial``). ``driver`` False: habanalabs not loaded.
    ``accel``: the accel minor (default: the number of functions already bound).
    """
    address = pci_address.lower()
    serial_number = serial if serial is not None else fake_gaudi_serial(address)
    device_dir = add_pci_device(
        host,
        address,
        vendor_id=HABANA,
        device_id=device_id,
        class_code=CLASS_PROCESSING_ACCELERATOR,
        numa_node=numa_node,
        local_cpus=local_cpus,
        msi_irqs=msi_irqs,
        parent=parent,
    )
    rel_dir = device_dir.relative_to(host.root).as_posix()
    if driver:
        bound = host.path("sys/bus/pci/drivers/habanalabs")
        minor = accel if accel is not None else (len(list(bound.iterdir())) if bound.is_dir() else 0)
        _bind(host, device_dir, "habanalabs")
        host.write(f"{rel_dir}/serial_number", serial_number)
        host.write(f"{rel_dir}/device_type", device_type)
        host.write(f"{rel_dir}/pci_addr", address)
        host.write(f"{rel_dir}/module_id", str(minor))
        host.write(f"{rel_dir}/status", "operational")
        host.write(f"{rel_dir}/accel/accel{minor}/dev", f"261:{minor}")
        host.symlink(f"sys/class/accel/accel{minor}", "../../" + rel_dir.removeprefix("sys/") + f"/accel/accel{minor}")
    if local_cpus is None:
        cpus = None
    else:
        cpus = parse_cpulist(local_cpus) if isinstance(local_cpus, str) else frozenset(local_cpus)
    return FakeGpu(address, serial_number if driver else "", device_type if driver else "", numa_node, cpus,
                   device_dir, vendor="habana")


def add_amd_partitions(
    host: FakeHost, gpu: FakeGpu, count: int, *, first_xcp: int, first_kfd_node: int, first_minor: int
) -> list[str]:
    """Split the AMD GPU ``gpu`` into ``count`` MI300 compute partitions as amdgpu and amdxcp lay them out: a platform
    device ``sys/devices/platform/amdgpu_xcp_<n>`` with its render node per partition, and a KFD node per partition
    whose ``drm_render_minor`` is that render node and whose ``location_id`` carries the partition's number in its
    function bits (kfd_topology.c). Returns the partitions' names (the AMD device plugin's device IDs)."""
    match = _BDF.match(gpu.pci_address)
    assert match is not None
    domain, bus, dev, fn = (int(part, 16) for part in match.groups())
    names = []
    for index in range(count):
        name = f"amdgpu_xcp_{first_xcp + index}"
        minor = first_minor + index
        host.write(f"sys/devices/platform/{name}/drm/renderD{minor}/dev", f"226:{minor}")
        host.write(f"sys/devices/platform/{name}/drm/card{minor - 128}/dev", f"226:{minor - 128}")
        host.write(
            f"sys/class/kfd/kfd/topology/nodes/{first_kfd_node + index}/properties",
            "cpu_cores_count 0\nsimd_count 304\nmem_banks_count 1\nio_links_count 1\ngfx_target_version 90402\n"
            f"vendor_id 4098\nlocation_id {(bus << 8) | (dev << 3) | (fn + index)}\ndomain {domain}\n"
            f"drm_render_minor {minor}\nnum_xcc 2\n",
        )
        names.append(name)
    return names
