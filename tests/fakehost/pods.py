"""Pods on the fake host: kubepods cgroups, container cgroup files, runtime bundles, pod log dirs and /proc entries.

Typical use::

    from fakehost.pods import ContainerSpec, add_kubepods, add_pod

    add_kubepods(host, cpus="2-63", mems="0-1")                       # cgroup v2, systemd driver (RKE2 default)
    pod = add_pod(host, uid="8b1c...", qos="guaranteed", namespace="llm", name="vllm-0",
                  containers=[ContainerSpec("vllm", cpus="4-11", mems="0", numa_bytes={0: 8 << 30}, pids=(4242,))])
    set_container_cpus(host, pod, "vllm", "0-63")                      # plant cpuset drift

What gets written (everything the cgroups, names and process sources read):

- cgroup v2 (``version=2``): one tree under ``sys/fs/cgroup/``; per cgroup ``cgroup.controllers``,
  ``cgroup.procs``, ``cpuset.cpus``/``.effective``, ``cpuset.mems``/``.effective``, ``cpu.max`` and, for
  containers, ``memory.numa_stat`` in bytes (``anon``/``file`` plus the other keys a 6.x kernel prints).
- cgroup v1 (``version=1``): the same relative paths under ``cpuset/`` (``cpuset.cpus``,
  ``cpuset.effective_cpus``, ``cpuset.mems``, ``cpuset.effective_mems``, ``cgroup.procs``, ``tasks``),
  ``memory/`` (``memory.numa_stat`` in pages of this machine's page size; bytes are rounded down to pages) and
  ``cpu,cpuacct/`` (``cpu.cfs_quota_us`` (-1 = none), ``cpu.cfs_period_us``).
- Naming per driver (kubelet.md §6.3): systemd ``kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope``; cgroupfs ``kubepods/burstable/pod<uid>/<id>``;
  Guaranteed pods directly under kubepods; CRI-O leaves ``crio-<id>.scope`` / ``crio-<id>``.
- The runtime's OCI bundle ``config.json`` with the CRI annotations (containerd under ``run/k3s/containerd/`` or
  ``run/containerd/``; CRI-O under ``run/containers/storage/`` or ``var/lib/containers/storage/``).
- ``var/log/pods/<ns>_<pod>_<uid>/<container>/0.log``.
- A sandbox (pause) container per pod, with one process whose ``proc/<pid>/comm`` is ``pause``, on the kubepods
  CPUs (the shared pool, as under the static CPU manager).
- ``proc/<pid>/{comm,status,cgroup}`` for every PID of ``ContainerSpec.pids`` (``comm`` is the container name).

Container IDs are derived from (pod UID, container name), so a test can compute them without the handle.
The writer uses plain ``os`` calls, not ``FakeHost.write``: 860 containers build in about a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from numawatch.cpuset import CPUSet, format_cpulist, parse_cpulist
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED

if TYPE_CHECKING:  # fakehost/__init__ may compose modules like this one: no import cycle at run time
    from fakehost import FakeHost

__all__ = [
    "ContainerHandle",
    "ContainerSpec",
    "PodHandle",
    "add_kubepods",
    "add_pod",
    "container_id_for",
    "remove_pod",
    "set_container_cpus",
    "set_numa_bytes",
]

CpuSpec = str | Iterable[int]  # "0-3,8" or {0, 1, 2, 3, 8}

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CONTROLLERS_V2 = "cpuset cpu io memory hugetlb pids rdma misc"
_QOS = (QOS_GUARANTEED, QOS_BURSTABLE, QOS_BESTEFFORT)
_PAUSE_NUMA_BYTES = 61440  # what a pause container keeps resident: a few pages of stack and data
_FIRST_AUTO_PID = 40000

# Keys a 6.x kernel prints in cgroup v2 memory.numa_stat besides anon/file (all zero here): the source must look
# anon and file up by key among them.
_V2_NUMA_EXTRA = (
    "kernel_stack", "pagetables", "sec_pagetables", "shmem", "file_mapped", "file_dirty", "file_writeback",
    "swapcached", "anon_thp", "file_thp", "shmem_thp", "inactive_anon", "active_anon", "inactive_file",
    "active_file", "unevictable", "slab_reclaimable", "slab_unreclaimable", "workingset_refault_anon",
    "workingset_refault_file", "workingset_activate_anon", "workingset_activate_file", "workingset_restore_anon",
    "workingset_restore_file", "workingset_nodereclaim",
)  # fmt: skip


@dataclass(frozen=True)
class ContainerSpec:
    """One application container of a pod.

    ``numa_bytes``: resident bytes per NUMA node as ``memory.numa_stat`` should report them (split 3:1 into anon and
    file); None writes no ``memory.numa_stat`` (memory controller off / old kernel: the source reports unknown).
    ``cpu_quota_us`` None means no CFS quota (``max`` / -1). ``container_id`` None derives a 64-hex ID from the pod
    UID and name. ``pids`` are the container's processes (``cgroup.procs`` and ``proc/<pid>/``).
    """

    name: str
    cpus: CpuSpec
    mems: CpuSpec
    numa_bytes: Mapping[int, int] | None = None
    cpu_quota_us: int | None = None
    cpu_period_us: int = 100000
    container_id: str | None = None
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ContainerHandle:
    name: str  # "POD" for the sandbox (as CRI-O names it)
    container_id: str
    cgroup_path: str  # relative to the cgroup mount (v2) or to each v1 hierarchy, as ContainerCgroup.cgroup_path
    pids: tuple[int, ...]
    cpus: CPUSet
    mems: frozenset[int]
    is_sandbox: bool = False


@dataclass(frozen=True)
class PodHandle:
    uid: str
    qos: str
    namespace: str
    name: str
    version: int
    driver: str
    runtime: str
    cgroup_path: str  # the pod cgroup, relative (e.g. "kubepods.slice/kubepods-pod<uid_>.slice")
    containers: tuple[ContainerHandle, ...]  # application containers, in the order given
    sandbox: ContainerHandle | None
    bundle_dirs: tuple[str, ...] = field(default=())  # host-relative dirs written for the runtime bundles
    log_dir: str | None = None  # host-relative var/log/pods/<ns>_<pod>_<uid>

    def container(self, name: str) -> ContainerHandle:
        for handle in self.containers:
            if handle.name == name:
                return handle
        raise KeyError(f"pod {self.namespace}/{self.name} has no container {name!r}")


# --------------------------------------------------------------------------------------------------- layout
def container_id_for(uid: str, container_name: str) -> str:
    """The deterministic 64-hex container ID add_pod gives a container that has no explicit ``container_id``."""
    return hashlib.sha256(f"{uid}/{container_name}".encode()).hexdigest()


def _cpus(spec: CpuSpec) -> CPUSet:
    return parse_cpulist(spec) if isinstance(spec, str) else frozenset(spec)


def _kubepods_rel(driver: str) -> str:
    return "kubepods.slice" if driver == "systemd" else "kubepods"


def _qos_rel(driver: str, qos: str) -> str:
    kubepods = _kubepods_rel(driver)
    if qos == QOS_GUARANTEED:
        return kubepods
    return f"{kubepods}/kubepods-{qos}.slice" if driver == "systemd" else f"{kubepods}/{qos}"


def _pod_rel(driver: str, qos: str, uid: str) -> str:
    parent = _qos_rel(driver, qos)
    if driver == "systemd":
        middle = "" if qos == QOS_GUARANTEED else f"{qos}-"
        return f"{parent}/kubepods-{middle}pod{uid.replace('-', '_')}.slice"
    return f"{parent}/pod{uid}"


def _leaf(driver: str, runtime: str, cid: str) -> str:
    if runtime == "crio":
        return f"crio-{cid}.scope" if driver == "systemd" else f"crio-{cid}"
    return f"cri-containerd-{cid}.scope" if driver == "systemd" else cid


def _cgroup(host: FakeHost) -> Path:
    return host.root / "sys/fs/cgroup"


def _v1_dirs(host: FakeHost, rel: str) -> tuple[str, str, str]:
    base = _cgroup(host)
    return f"{base}/cpuset/{rel}", f"{base}/memory/{rel}", f"{base}/cpu,cpuacct/{rel}"


def _existing_layout(host: FakeHost) -> tuple[int, str] | None:
    base = _cgroup(host)
    for version, driver in ((2, "systemd"), (2, "cgroupfs"), (1, "systemd"), (1, "cgroupfs")):
        rel = _kubepods_rel(driver)
        marker = base / rel / "cgroup.controllers" if version == 2 else base / "cpuset" / rel
        if marker.exists():
            return version, driver
    return None


# --------------------------------------------------------------------------------------------------- writing
def _put(directory: str, files: Mapping[str, str]) -> None:
    os.makedirs(directory, exist_ok=True)
    for name, text in files.items():
        with open(f"{directory}/{name}", "w") as handle:
            handle.write(text)


def _lines(values: Iterable[int]) -> str:
    return "".join(f"{value}\n" for value in values)


def _numa_stat_v2(numa_bytes: Mapping[int, int], nodes: Iterable[int]) -> str:
    nodes = sorted(nodes)
    anon = {node: numa_bytes.get(node, 0) - numa_bytes.get(node, 0) // 4 for node in nodes}
    file = {node: numa_bytes.get(node, 0) // 4 for node in nodes}

    def line(key: str, values: Mapping[int, int]) -> str:
        return key + "".join(f" N{node}={values.get(node, 0)}" for node in nodes) + "\n"

    return line("anon", anon) + line("file", file) + "".join(line(key, {}) for key in _V2_NUMA_EXTRA)


def _numa_stat_v1(numa_bytes: Mapping[int, int], nodes: Iterable[int]) -> str:
    nodes = sorted(nodes)
    pages = {node: numa_bytes.get(node, 0) // PAGE_SIZE for node in nodes}
    anon = {node: count - count // 4 for node, count in pages.items()}
    file = {node: count // 4 for node, count in pages.items()}

    def line(key: str, values: Mapping[int, int]) -> str:
        total = sum(values.values())
        return f"{key}={total}" + "".join(f" N{node}={values.get(node, 0)}" for node in nodes) + "\n"

    return "".join(
        line(prefix + key, values)
        for prefix in ("", "hierarchical_")
        for key, values in (("total", pages), ("file", file), ("anon", anon), ("unevictable", {}))
    )


def _write_cgroup(
    host: FakeHost,
    version: int,
    rel: str,
    *,
    cpus: CPUSet,
    mems: frozenset[int],
    requested_cpus: CPUSet | None = None,
    pids: tuple[int, ...] = (),
    quota: int | None = None,
    period: int = 100000,
    numa_bytes: Mapping[int, int] | None = None,
    numa_nodes: Iterable[int] = (),
) -> None:
    """Write one cgroup's files. ``requested_cpus`` is cpuset.cpus (defaults to the effective set)."""
    cpus_text = format_cpulist(cpus) + "\n"
    requested = format_cpulist(cpus if requested_cpus is None else requested_cpus) + "\n"
    mems_text = format_cpulist(mems) + "\n"
    procs = _lines(pids)
    nodes = set(numa_nodes) | set(mems) | set(numa_bytes or ())
    if version == 2:
        files = {
            "cgroup.controllers": CONTROLLERS_V2 + "\n",
            "cgroup.procs": procs,
            "cpuset.cpus": requested,
            "cpuset.cpus.effective": cpus_text,
            "cpuset.mems": mems_text,
            "cpuset.mems.effective": mems_text,
            "cpu.max": f"{'max' if quota is None else quota} {period}\n",
        }
        if numa_bytes is not None:
            files["memory.numa_stat"] = _numa_stat_v2(numa_bytes, nodes)
        _put(f"{_cgroup(host)}/{rel}", files)
        return
    cpuset_dir, memory_dir, cpu_dir = _v1_dirs(host, rel)
    _put(
        cpuset_dir,
        {
            "cgroup.procs": procs,
            "tasks": procs,
            "cpuset.cpus": requested,
            "cpuset.effective_cpus": cpus_text,
            "cpuset.mems": mems_text,
            "cpuset.effective_mems": mems_text,
        },
    )
    memory_files = {"cgroup.procs": procs}
    if numa_bytes is not None:
        memory_files["memory.numa_stat"] = _numa_stat_v1(numa_bytes, nodes)
    _put(memory_dir, memory_files)
    _put(
        cpu_dir,
        {
            "cgroup.procs": procs,
            "cpu.cfs_quota_us": f"{-1 if quota is None else quota}\n",
            "cpu.cfs_period_us": f"{period}\n",
        },
    )


def _mask(values: Iterable[int]) -> str:
    """A kernel hex mask: comma-separated 32-bit words, most significant first."""
    value = 0
    for bit in values:
        value |= 1 << bit
    words = max(1, (value.bit_length() + 31) // 32)
    text = f"{value:0{words * 8}x}"
    return ",".join(text[i : i + 8] for i in range(0, len(text), 8))


def _proc_status(pid: int, comm: str, cpus: CPUSet, mems: frozenset[int]) -> str:
    return (
        f"Name:\t{comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t1\n"
        "TracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t \n"
        f"NStgid:\t{pid}\t1\nNSpid:\t{pid}\t1\nNSpgid:\t{pid}\t1\nNSsid:\t{pid}\t1\n"
        "VmPeak:\t   10240 kB\nVmSize:\t   10240 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\n"
        "VmHWM:\t    1024 kB\nVmRSS:\t    1024 kB\nRssAnon:\t     768 kB\nRssFile:\t     256 kB\n"
        "RssShmem:\t       0 kB\nVmData:\t     512 kB\nVmStk:\t     132 kB\nVmExe:\t     600 kB\n"
        "VmLib:\t    1800 kB\nVmPTE:\t      48 kB\nVmSwap:\t       0 kB\nHugetlbPages:\t       0 kB\n"
        "CoreDumping:\t0\nTHP_enabled:\t1\nThreads:\t1\nSigQ:\t0/515037\n"
        "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n"
        "SigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\nCapInh:\t0000000000000000\n"
        "CapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\nCapBnd:\t00000000a80425fb\n"
        "CapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t2\nSeccomp_filters:\t1\n"
        f"Cpus_allowed:\t{_mask(cpus)}\nCpus_allowed_list:\t{format_cpulist(cpus)}\n"
        f"Mems_allowed:\t{_mask(mems)}\nMems_allowed_list:\t{format_cpulist(mems)}\n"
        "voluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"
    )


def _proc_cgroup(version: int, rel: str) -> str:
    if version == 2:
        return f"0::/{rel}\n"
    return f"12:cpuset:/{rel}\n11:memory:/{rel}\n4:cpu,cpuacct:/{rel}\n1:name=systemd:/{rel}\n0::/\n"


def _write_procs(
    host: FakeHost, version: int, rel: str, pids: Iterable[int], comm: str, cpus: CPUSet, mems: frozenset[int]
) -> None:
    for pid in pids:
        _put(
            f"{host.root}/proc/{pid}",
            {
                "comm": comm[:15] + "\n",  # TASK_COMM_LEN - 1
                "status": _proc_status(pid, comm[:15], cpus, mems),
                "cgroup": _proc_cgroup(version, rel),
            },
        )


_next_pid: dict[str, int] = {}


def _allocate_pid(host: FakeHost) -> int:
    key = str(host.root)
    pid = _next_pid.get(key, _FIRST_AUTO_PID)
    while (host.root / "proc" / str(pid)).exists():
        pid += 1
    _next_pid[key] = pid + 1
    return pid


def _read_list(path: Path) -> frozenset[int]:
    return parse_cpulist(path.read_text())


def _kubepods_sets(host: FakeHost, version: int, driver: str) -> tuple[CPUSet, frozenset[int]]:
    rel = _kubepods_rel(driver)
    if version == 2:
        base = _cgroup(host) / rel
        return _read_list(base / "cpuset.cpus.effective"), _read_list(base / "cpuset.mems.effective")
    base = _cgroup(host) / "cpuset" / rel
    return _read_list(base / "cpuset.effective_cpus"), _read_list(base / "cpuset.effective_mems")


# --------------------------------------------------------------------------------------------------- public API
def add_kubepods(host: FakeHost, *, version: int = 2, driver: str = "systemd", cpus: CpuSpec, mems: CpuSpec) -> str:
    """Create the kubepods cgroup and its Burstable/BestEffort children; returns its relative path.

    ``cpus``/``mems`` are what the kubelet's pods may use (the kubepods cgroup's effective cpuset).
    """
    if version not in (1, 2):
        raise ValueError(f"cgroup version must be 1 or 2, not {version!r}")
    if driver not in ("systemd", "cgroupfs"):
        raise ValueError(f"driver must be 'systemd' or 'cgroupfs', not {driver!r}")
    existing = _existing_layout(host)
    if existing is not None and existing != (version, driver):
        raise ValueError(f"this host already has a kubepods cgroup with version/driver {existing}")
    cpu_set, mem_set = _cpus(cpus), _cpus(mems)
    if version == 2:
        root = _cgroup(host)
        root.mkdir(parents=True, exist_ok=True)
        if not (root / "cgroup.controllers").exists():
            (root / "cgroup.controllers").write_text(CONTROLLERS_V2 + "\n")
    for qos in _QOS:
        _write_cgroup(host, version, _qos_rel(driver, qos), cpus=cpu_set, mems=mem_set)
    return _kubepods_rel(driver)


def add_pod(
    host: FakeHost,
    *,
    uid: str,
    qos: str,
    namespace: str,
    name: str,
    containers: list[ContainerSpec],
    version: int | None = None,
    driver: str | None = None,
    runtime: str = "containerd",
    bundle_root: str | None = "k3s",
    pod_logs: bool = True,
    sandbox: bool = True,
    pod_labels: Mapping[str, str] | None = None,
) -> PodHandle:
    """Add a pod: its cgroups, a pause sandbox, the runtime bundles, the pod log dirs and the processes.

    ``version``/``driver`` default to the existing kubepods cgroup's (else 2 / "systemd"); a kubepods cgroup is
    created on the union of the containers' CPUs and memory nodes when there is none yet. ``qos`` is one of
    "guaranteed", "burstable", "besteffort". ``runtime`` is "containerd" or "crio". ``bundle_root`` says where the
    runtime's bundle config.json goes: for containerd "k3s" (``run/k3s/containerd/``, RKE2) or "containerd"
    (``run/containerd/``); for CRI-O "run" (``run/containers/storage/``, also used when given "k3s" or
    "containerd") or "var" (``var/lib/containers/storage/``); None writes no bundle. ``pod_labels``: the pod's
    labels, which CRI-O records on the sandbox (``io.kubernetes.cri-o.Labels``, with the kubelet's
    ``io.kubernetes.pod.*``); not written when None.
    """
    if qos not in _QOS:
        raise ValueError(f"qos must be one of {_QOS}, not {qos!r}")
    if runtime not in ("containerd", "crio"):
        raise ValueError(f"runtime must be 'containerd' or 'crio', not {runtime!r}")
    if "_" in namespace or "_" in name or "_" in uid:
        raise ValueError("namespace, pod name and UID cannot contain '_' (Kubernetes forbids it)")
    existing = _existing_layout(host)
    if existing is None:
        version, driver = version or 2, driver or "systemd"
        add_kubepods(
            host,
            version=version,
            driver=driver,
            cpus=frozenset().union(*(_cpus(c.cpus) for c in containers)),
            mems=frozenset().union(*(_cpus(c.mems) for c in containers)),
        )
    elif (version or existing[0], driver or existing[1]) != existing:
        raise ValueError(f"asked for version/driver {(version, driver)} but kubepods exists as {existing}")
    else:
        version, driver = existing
    pool_cpus, pool_mems = _kubepods_sets(host, version, driver)
    pod_rel = _pod_rel(driver, qos, uid)
    _write_cgroup(host, version, pod_rel, cpus=pool_cpus, mems=pool_mems)

    handles: list[ContainerHandle] = []
    sandbox_handle = None
    if sandbox:
        sid = container_id_for(uid, "POD")
        pid = _allocate_pid(host)
        rel = f"{pod_rel}/{_leaf(driver, runtime, sid)}"
        numa = {min(pool_mems, default=0): _PAUSE_NUMA_BYTES}
        _write_cgroup(
            host, version, rel, cpus=pool_cpus, mems=pool_mems, pids=(pid,), numa_bytes=numa, numa_nodes=pool_mems
        )
        _write_procs(host, version, rel, (pid,), "pause", pool_cpus, pool_mems)
        sandbox_handle = ContainerHandle("POD", sid, rel, (pid,), pool_cpus, pool_mems, is_sandbox=True)
    for spec in containers:
        cid = spec.container_id or container_id_for(uid, spec.name)
        if len(cid) != 64 or any(ch not in "0123456789abcdef" for ch in cid):
            raise ValueError(f"container_id must be 64 lowercase hex digits, got {cid!r}")
        cpus, mems = _cpus(spec.cpus), _cpus(spec.mems)
        rel = f"{pod_rel}/{_leaf(driver, runtime, cid)}"
        _write_cgroup(
            host,
            version,
            rel,
            cpus=cpus,
            mems=mems,
            pids=spec.pids,
            quota=spec.cpu_quota_us,
            period=spec.cpu_period_us,
            numa_bytes=spec.numa_bytes,
            numa_nodes=pool_mems,
        )
        _write_procs(host, version, rel, spec.pids, spec.name, cpus, mems)
        handles.append(ContainerHandle(spec.name, cid, rel, tuple(spec.pids), cpus, mems))

    bundle_dirs: list[str] = []
    if bundle_root is not None:
        for handle in ([sandbox_handle] if sandbox_handle else []) + handles:
            bundle_dirs.append(
                _write_bundle(host, runtime, bundle_root, driver, uid, namespace, name, pod_rel, handle, sandbox_handle,
                              pod_labels)
            )
    log_dir = None
    if pod_logs:
        log_dir = f"var/log/pods/{namespace}_{name}_{uid}"
        for handle in handles:
            _put(f"{host.root}/{log_dir}/{handle.name}", {"0.log": ""})
    resident = sum(sum((spec.numa_bytes or {}).values()) for spec in containers)
    write_pod_usage(host, version, pod_rel, cpu_seconds=0.0, memory_bytes=resident)
    return PodHandle(
        uid=uid,
        qos=qos,
        namespace=namespace,
        name=name,
        version=version,
        driver=driver,
        runtime=runtime,
        cgroup_path=pod_rel,
        containers=tuple(handles),
        sandbox=sandbox_handle,
        bundle_dirs=tuple(bundle_dirs),
        log_dir=log_dir,
    )


def write_pod_usage(host: FakeHost, version: int, pod_rel: str, *, cpu_seconds: float, memory_bytes: int) -> None:
    """A pod cgroup's CPU time and memory charge, as the kernel keeps them at the pod level: cgroup v2 ``cpu.stat``
    and ``memory.current``; v1 ``cpu,cpuacct/<pod>/cpuacct.usage`` (ns) and ``memory/<pod>/memory.usage_in_bytes``."""
    base = host.path("sys/fs/cgroup")
    usec = round(cpu_seconds * 1e6)
    if version == 2:
        _put(f"{base}/{pod_rel}", {
            "cpu.stat": f"usage_usec {usec}\nuser_usec {usec * 4 // 5}\nsystem_usec {usec - usec * 4 // 5}\n"
                        "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n",
            "memory.current": f"{memory_bytes}\n",
        })  # fmt: skip
    else:
        _put(f"{base}/cpu,cpuacct/{pod_rel}", {"cpuacct.usage": f"{usec * 1000}\n"})
        _put(f"{base}/memory/{pod_rel}", {"memory.usage_in_bytes": f"{memory_bytes}\n"})


def set_pod_usage(host: FakeHost, pod: PodHandle, *, cpu_seconds: float, memory_bytes: int) -> None:
    """What a running pod has used since it started (see ``write_pod_usage``)."""
    write_pod_usage(host, pod.version, pod.cgroup_path, cpu_seconds=cpu_seconds, memory_bytes=memory_bytes)


def _write_bundle(
    host: FakeHost,
    runtime: str,
    bundle_root: str,
    driver: str,
    uid: str,
    namespace: str,
    pod_name: str,
    pod_rel: str,
    handle: ContainerHandle,
    sandbox: ContainerHandle | None,
    pod_labels: Mapping[str, str] | None = None,
) -> str:
    """Write an OCI config.json as the runtime does (abridged, with the annotations); returns its host-relative dir."""
    cid = handle.container_id
    sandbox_id = sandbox.container_id if sandbox else container_id_for(uid, "POD")
    if runtime == "crio":
        base = "var/lib/containers/storage" if bundle_root == "var" else "run/containers/storage"
        directory = f"{base}/overlay-containers/{cid}/userdata"
        annotations = {
            "io.kubernetes.cri-o.ContainerID": cid,
            "io.kubernetes.cri-o.ContainerType": "sandbox" if handle.is_sandbox else "container",
            "io.kubernetes.cri-o.SandboxID": sandbox_id,
            "io.kubernetes.container.name": handle.name,
            "io.kubernetes.pod.name": pod_name,
            "io.kubernetes.pod.namespace": namespace,
            "io.kubernetes.pod.uid": uid,
        }
        if handle.is_sandbox and pod_labels is not None:
            # CRI-O's sandbox: the PodSandboxConfig's labels, the pod's own and the kubelet's (server/sandbox_run)
            annotations["io.kubernetes.cri-o.Labels"] = json.dumps({
                **pod_labels, "io.kubernetes.container.name": "POD", "io.kubernetes.pod.name": pod_name,
                "io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.uid": uid,
            })  # fmt: skip
        cgroups_path = f"{pod_rel.rsplit('/', 1)[-1]}:crio:{cid}" if driver == "systemd" else f"/{pod_rel}/crio-{cid}"
    else:
        if bundle_root not in ("k3s", "containerd"):
            raise ValueError(f"bundle_root for containerd must be 'k3s', 'containerd' or None, not {bundle_root!r}")
        base = "run/k3s/containerd" if bundle_root == "k3s" else "run/containerd"
        directory = f"{base}/io.containerd.runtime.v2.task/k8s.io/{cid}"
        annotations = {
            "io.kubernetes.cri.container-type": "sandbox" if handle.is_sandbox else "container",
            "io.kubernetes.cri.sandbox-id": sandbox_id,
            "io.kubernetes.cri.sandbox-name": pod_name,
            "io.kubernetes.cri.sandbox-namespace": namespace,
            "io.kubernetes.cri.sandbox-uid": uid,
        }
        if handle.is_sandbox:
            annotations["io.kubernetes.cri.sandbox-log-directory"] = f"/var/log/pods/{namespace}_{pod_name}_{uid}"
        else:
            annotations["io.kubernetes.cri.container-name"] = handle.name
            annotations["io.kubernetes.cri.image-name"] = "registry.example/inference:1.0"
        cgroups_path = (
            f"{pod_rel.rsplit('/', 1)[-1]}:cri-containerd:{cid}" if driver == "systemd" else f"/{pod_rel}/{cid}"
        )
    spec = {
        "ociVersion": "1.2.0",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["/pause"] if handle.is_sandbox else ["python3", "-m", "server"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
        },
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"]}],
        "annotations": annotations,
        "linux": {
            "resources": {"cpu": {"cpus": format_cpulist(handle.cpus), "mems": format_cpulist(handle.mems)}},
            "cgroupsPath": cgroups_path,
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
        },
    }
    _put(f"{host.root}/{directory}", {"config.json": json.dumps(spec)})
    return directory.removesuffix("/userdata")


def set_container_cpus(
    host: FakeHost, pod: PodHandle, container: str, cpus: CpuSpec, mems: CpuSpec | None = None
) -> None:
    """Rewrite a container's cpuset (requested and effective, and its processes' allowed lists) to plant drift."""
    handle = pod.sandbox if container == "POD" and pod.sandbox else pod.container(container)
    cpu_set = _cpus(cpus)
    mem_set = handle.mems if mems is None else _cpus(mems)
    cpus_text, mems_text = format_cpulist(cpu_set) + "\n", format_cpulist(mem_set) + "\n"
    if pod.version == 2:
        files = {"cpuset.cpus": cpus_text, "cpuset.cpus.effective": cpus_text}
        if mems is not None:
            files |= {"cpuset.mems": mems_text, "cpuset.mems.effective": mems_text}
        _put(f"{_cgroup(host)}/{handle.cgroup_path}", files)
    else:
        files = {"cpuset.cpus": cpus_text, "cpuset.effective_cpus": cpus_text}
        if mems is not None:
            files |= {"cpuset.mems": mems_text, "cpuset.effective_mems": mems_text}
        _put(_v1_dirs(host, handle.cgroup_path)[0], files)
    for pid in handle.pids:
        comm = "pause" if handle.is_sandbox else handle.name
        _put(f"{host.root}/proc/{pid}", {"status": _proc_status(pid, comm[:15], cpu_set, mem_set)})


def set_numa_bytes(host: FakeHost, pod: PodHandle, container: str, numa_bytes: Mapping[int, int]) -> None:
    """Rewrite a container's memory.numa_stat (resident bytes per node) to plant remote memory."""
    handle = pod.sandbox if container == "POD" and pod.sandbox else pod.container(container)
    nodes = set(numa_bytes) | set(handle.mems) | set(_kubepods_sets(host, pod.version, pod.driver)[1])
    if pod.version == 2:
        _put(f"{_cgroup(host)}/{handle.cgroup_path}", {"memory.numa_stat": _numa_stat_v2(numa_bytes, nodes)})
    else:
        _put(_v1_dirs(host, handle.cgroup_path)[1], {"memory.numa_stat": _numa_stat_v1(numa_bytes, nodes)})


def remove_pod(host: FakeHost, pod: PodHandle) -> None:
    """Remove everything add_pod wrote for the pod (cgroups in every hierarchy, bundles, logs, processes)."""
    targets = [f"{_cgroup(host)}/{pod.cgroup_path}"] if pod.version == 2 else list(_v1_dirs(host, pod.cgroup_path))
    targets += [f"{host.root}/{directory}" for directory in pod.bundle_dirs]
    if pod.log_dir:
        targets.append(f"{host.root}/{pod.log_dir}")
    for handle in ([pod.sandbox] if pod.sandbox else []) + list(pod.containers):
        targets += [f"{host.root}/proc/{pid}" for pid in handle.pids]
    for target in targets:
        shutil.rmtree(target, ignore_errors=True)
