"""Property tests: every parser returns its documented type or raises only its documented errors.

Each public parse function of ``numawatch/sources/*.py``, ``cpuset.py``, ``quantity.py``, ``checkpoint_checksum.py``
and ``intent.parse_intent`` is fed three kinds of input (hypothesis):

- near-valid input: a real sample of the file it parses (written by the fake-host builders of the reference node, or
  captured from a real kernel: the 4-node capture of tests/corpus) with one to three mutations: truncation, a flipped
  bit, an inserted token (NUL, huge, negative and non-ASCII numbers, JSON surrogate escapes, separators), a number
  replaced by a huge or negative one, a deleted span or a duplicated line;
- arbitrary bytes;
- arbitrary text.

The property: the parser either returns a value of its documented type, or raises one of its documented error types
(MalformedFile naming the file, CPUListError, QuantityError, IntentError, ValueError where the docstring says so).
IndexError, KeyError, TypeError, RecursionError, MemoryError, an undocumented ValueError (``int()``'s 4,300-digit
limit, a bad date in YAML) or a UnicodeError all fail the test: in a source they would turn into "internal error"
with no file named. A few round-trip and differential properties (CPU lists, quantities, the /proc/interrupts fast
path against a plain split) sit at the end.

Example counts are kept moderate (the whole file runs in well under a minute on two cores); raise them locally with
``--hypothesis-seed`` / a larger ``NUMAWATCH_HYPOTHESIS_EXAMPLES`` when hunting.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from corpus import REALKERNEL_4NODE, corpus_root
from fakehost import FakeHost
from fakehost.kernel import FakeIrq, format_interrupts
from fakehost.kubelet import write_cpu_manager_state, write_device_checkpoint, write_memory_manager_state
from fakehost.reference import machine_state_tables, reference_node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numawatch import checkpoint_checksum, cpuset, quantity
from numawatch.confined import HostFs
from numawatch.cpuset import MAX_CPU_ID, CPUListError
from numawatch.errors import MalformedFile
from numawatch.intent import Intent, IntentError
from numawatch.intentfile import parse_intent
from numawatch.model.gpu import Limit
from numawatch.model.interrupts import Interrupts, IrqbalanceConfig
from numawatch.model.kubelet import (
    CpuManagerState,
    DeviceAssignment,
    DeviceCheckpoint,
    MemoryBlock,
    MemoryManagerState,
    StateFileProblem,
)
from numawatch.model.topology import IsolationParams
from numawatch.model.workloads import ContainerIdentity, PodIdentity
from numawatch.quantity import QuantityError
from numawatch.sources import (
    cgroups,
    gpus_sysfs,
    interrupts,
    irqbalance,
    irqs,
    kernel,
    kubelet_config,
    kubelet_state,
    names,
    numastat,
    nvml,
    processes,
    topology,
)

EXAMPLES = int(os.environ.get("NUMAWATCH_HYPOTHESIS_EXAMPLES", "100"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
)
FILE = "/host/path/of/the/file"  # what parsers that take a file name are told; their MalformedFile must name it


# --------------------------------------------------------------------------------------------------- samples
def _read(root: Path, pattern: str) -> list[bytes]:
    return [path.read_bytes() for path in sorted(root.glob(pattern)) if path.is_file()][:3]


@cache
def samples() -> Mapping[str, tuple[bytes, ...]]:
    """Valid inputs per file kind, written by the fake-host builders (and, where present, a real kernel's files)."""
    base = Path(tempfile.mkdtemp(prefix="numawatch-hypothesis-"))
    rke2 = FakeHost(base / "rke2")
    reference_node(rke2)
    kubeadm = FakeHost(base / "kubeadm")
    reference_node(kubeadm, flavor="kubeadm", cgroup_version=1, driver="cgroupfs", runtime="crio")
    variants = FakeHost(base / "variants")
    found: dict[str, list[bytes]] = {}

    def add(kind: str, *values: bytes | str) -> None:
        found.setdefault(kind, []).extend(v.encode() if isinstance(v, str) else v for v in values)

    r, k = rke2.root, kubeadm.root
    real = corpus_root(REALKERNEL_4NODE)
    cg2, cg1 = r / "sys/fs/cgroup", k / "sys/fs/cgroup"
    add("numa_stat_v2", *_read(cg2, "kubepods.slice/**/cri-containerd-*.scope/memory.numa_stat"))
    add("numa_stat_v1", *_read(cg1, "memory/kubepods/**/crio-*/memory.numa_stat"))
    add("procs", *_read(cg2, "kubepods.slice/**/cri-containerd-*.scope/cgroup.procs"), "1\n2\n3\n")
    add("cpulist", *_read(cg2, "kubepods.slice/**/cpuset.cpus.effective"), "0-3,8,10-11\n", "0-15:2/4\n", "\n")
    add("cpumask", *_read(r, "proc/irq/*/smp_affinity"), "ff,00000001\n", "00000000,0000000f\n")
    add("config_json", *_read(r, "run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/*/config.json"))
    add("config_json", *_read(k, "run/containers/storage/overlay-containers/*/userdata/config.json"))
    add("dir_name", "cri-containerd-" + "ab" * 32 + ".scope", "crio-" + "cd" * 32, "ef" * 32, "crio-conmon-x")
    add("dir_name", "kubepods-burstable-pod0b6e1f2a_3c4d_4e5f_8a9b_0c1d2e3f4a5b.slice", "pod7f9c2a3e-5b1d-4c8e")
    add("dir_name", "inference_vllm-llama-0_7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57", "0000:18:00.0", "hugepages-2048kB")
    add("cmdline", *_read(r, "proc/cmdline"), *_read(real, "proc/cmdline"))
    add("cmdline", 'isolcpus=nohz,domain,2-N:1/2 "quoted=a b" rcu_nocbs hugepagesz=1G hugepages=0:4,1:4 -- x=y')
    add("meminfo", *_read(r, "sys/devices/system/node/node0/meminfo"), *_read(real, "proc/meminfo"))
    add("distance", *_read(r, "sys/devices/system/node/node*/distance"), "10 21 21 11\n")
    add("small_int", "0\n", "-1\n", "1\n", "60\n", *_read(r, "sys/bus/pci/devices/*/numa_node"))
    add("sys_cpulist", *_read(r, "sys/devices/system/cpu/isolated"), "(null)\n", "\n")
    add("size", "2M", "1G", "2097152", "1048576k")
    add("hugepages_count", "8", "0:4,1:4")
    add("isolcpus", "domain,managed_irq,1-7,9-15", "nohz,2-N", "managed_irq,all", "3")
    add("boot_cpulist", "1-7,9-15", "2-N", "all", "0-N:1/2", "N")
    add("pci_class", *_read(r, "sys/bus/pci/devices/*/class"), "0x030000\n")
    add("nvidia_info", *_read(r, "proc/driver/nvidia/gpus/*/information"))
    add("kubelet_yaml", *_read(r, "etc/rancher/rke2/config.yaml"), *_read(k, "var/lib/kubelet/config.yaml"))
    add("kubelet_yaml", *_read(r, "var/lib/rancher/rke2/agent/etc/kubelet.conf.d/*.conf"))
    add("kubelet_yaml", "reservedMemory:\n- numaNode: 0\n  limits: {memory: 1Gi, hugepages-1Gi: 2Gi}\n")
    add("env_file", *_read(k, "var/lib/kubelet/kubeadm-flags.env"))
    add("env_file", 'KUBELET_EXTRA_ARGS="--cpu-manager-policy=static --reserved-cpus 0,16"\n# comment\n')
    add("env_file", "IRQBALANCE_BANNED_CPULIST=1-7,9-15\nexport IRQBALANCE_ARGS='--policyscript=/x' # c\n")
    add("flag", "reserved-memory=0:memory=2Gi;1:memory=2Gi,hugepages-1Gi=4Gi", "--cpu-manager-policy=static")
    add("flag", "system-reserved=memory=2Gi,cpu=500m", 'reserved-cpus="0,16"', "kubelet-arg+=x")
    add("cpu_state", *_read(r, "var/lib/kubelet/cpu_manager_state"))
    add("memory_state", *_read(r, "var/lib/kubelet/memory_manager_state"))
    add("device_checkpoint", *_read(r, "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"))
    uid = "7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57"
    for version in (1, 3, 4):
        entries: dict[str, Any] = {"ab" * 32: "1-4"} if version == 1 else {uid: {"vllm": "1-4,17-20"}}
        path = write_cpu_manager_state(
            variants, default_cpuset="0,5-16", entries=entries, version=version, pod_entries={uid: "5-6"}
        )
        add("cpu_state", path.read_bytes())
    blocks = {uid: {"vllm": (MemoryBlock((0,), "memory", 1 << 30),)}}
    for version in (2, 3):
        path = write_memory_manager_state(
            variants, machine_state=machine_state_tables(), entries=blocks, version=version, pod_entries={uid: ()}
        )
        add("memory_state", path.read_bytes())
    assignment = DeviceAssignment(uid, "vllm", "nvidia.com/gpu", {0: ("GPU-a", "GPU-b")})
    path = write_device_checkpoint(
        variants, entries=[assignment], registered={"nvidia.com/gpu": ["GPU-a"]}, legacy=True
    )
    add("device_checkpoint", path.read_bytes())
    add("interrupts", *_read(r, "proc/interrupts"), *_read(real, "proc/interrupts"))
    add("interrupts", format_interrupts([0, 2, 3], [FakeIrq(24, "nvme0q1", frozenset({2}), counts={2: 10**11})]))
    add("bracketed", *_read(r, "sys/kernel/mm/transparent_hugepage/*"), "always defer [defer+madvise] madvise never")
    add("governor", *_read(r, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"))
    add("affected_cpus", "0 1 2 3\n", "16\n")
    add("interrupt_row", "LOC Local timer interrupts", "24 nvme0q1", "IPI3 Timer broadcast interrupts", "0 arch_timer")
    add("pmu_names", "uncore_upi_0 uncore_upi_1 cpu software amd_df", "uncore_qpi uncore_upi_12 uncore_imc_0")
    add("numastat", *_read(r, "sys/devices/system/node/node0/numastat"))
    add("numastat", *_read(real, "sys/devices/system/node/node0/numastat"))
    add("pmu_format", "config:0-7", "config:8-15,32-55", "config1:0")
    add("pmu_config_format", "config:0-7", "config:8-15,32-55")
    add("reserved_memory", "reserved-memory=0:memory=2Gi;1:memory=2Gi,hugepages-1Gi=4Gi", "reserved-memory=1:memory=1")
    add("proc_status", *_read(r, "proc/4100/status"), *_read(real, "proc/523/status"))
    add("proc_status", "Name:\tpython3\nCpus_allowed_list:\t1-4\nnonvoluntary_ctxt_switches:\t12\n")
    add("proc_cgroup", *_read(r, "proc/4100/cgroup"), *_read(k, "proc/4100/cgroup"))
    add("proc_cgroup", *_read(real, "proc/523/cgroup"))
    add("schedstat", *_read(real, "proc/523/schedstat"), "987654321 12345 4242\n")
    add("sched", *_read(real, "proc/523/sched"), "se.nr_migrations                             :    19\n")
    add("limits", "Limit   Soft Limit   Hard Limit   Units\nMax locked memory    65536    65536    bytes\n")
    add("limits", "Max locked memory         unlimited            unlimited            bytes     \n")
    add("net_unix", "Num RefCount Protocol Flags Type St Inode Path\n0: 2 0 10000 1 1 31337 @irqbalance4242.sock\n")
    add("environ", b"IRQBALANCE_BANNED_CPULIST=1-7\0PATH=/usr/bin\0IRQBALANCE_BANNED_CPUS=fffe\0")
    add("bus_id", "00000000:18:00.0", "00000000:8D:00.0", "0001A:03:00.1")
    add("quantity", "2Gi", "1.5", "100m", "1e3", "-512Mi", ".5", "1E", "0.1Gi", "+3k")
    add("intent", (Path(__file__).resolve().parents[1] / "docs/intent.example.yaml").read_bytes())
    add(
        "intent",
        "kernel:\n  hugepagesPerNode:\n    0: {1Gi: 4}\n  hugepages: {2048kB: 0}\nkubelet: {reservedCPUs: 0}\n",
    )
    shutil.rmtree(base)  # every sample is in memory now
    for kind, values in found.items():
        assert values, f"no sample for {kind}"
    return {kind: tuple(values) for kind, values in found.items()}


# --------------------------------------------------------------------------------------------------- strategies
HUGE = b"9" * 5000  # beyond int()'s 4,300-digit limit: int() raises a plain ValueError
NASTY = (
    b"\0",
    b"-1",
    b"-",
    b"+",
    b"9" * 25,
    HUGE,
    b"18446744073709551616",
    b"\xff\xfe",
    "é".encode(),
    "\u0663".encode(),  # ARABIC-INDIC DIGIT THREE: str.isdigit() is true, so is int()'s acceptance
    "\u00b2".encode(),  # SUPERSCRIPT TWO: str.isdigit() is true, int() refuses it
    b"\\ud800",  # a lone surrogate once JSON decodes it
    b"\\udfff",
    b"\n",
    b"\r\n",
    b" ",
    b"\t",
    b",",
    b":",
    b";",
    b"=",
    b"[",
    b"]",
    b"{",
    b"}",
    b'"',
    b"'",
    b"#",
    b"null",
    b"1e999",
    b"NaN",
    b"0x",
    b"(null)",
    b"2024-13-45",  # a YAML timestamp that no calendar has
    b"[" * 2000,  # deep nesting
)
NUMBERS = (b"0", b"-1", b"-9223372036854775809", b"4294967296", b"18446744073709551616", b"9" * 30, HUGE)
_DIGITS = re.compile(rb"[0-9]+")


@st.composite
def near_valid(draw: st.DrawFn, values: tuple[bytes, ...]) -> bytes:
    data = bytearray(draw(st.sampled_from(values)))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("truncate", "flip", "insert", "insert", "delete", "number", "number", "line")))
        pos = draw(st.integers(0, len(data)))
        if kind == "truncate":
            del data[pos:]
        elif kind == "flip" and data:
            data[min(pos, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[pos:pos] = draw(st.sampled_from(NASTY))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        elif kind == "number":
            match = _DIGITS.search(data, pos) or _DIGITS.search(data)
            if match is not None:
                data[match.start() : match.end()] = draw(st.sampled_from(NUMBERS))
        elif kind == "line":  # duplicate the line around pos (a key or row twice)
            start = data.rfind(b"\n", 0, pos) + 1
            end = data.find(b"\n", pos)
            end = len(data) if end < 0 else end + 1
            data[start:start] = data[start:end]
    return bytes(data)


def inputs(kind: str) -> st.SearchStrategy[bytes]:
    return st.one_of(
        near_valid(samples()[kind]),
        near_valid(samples()[kind]),
        st.binary(max_size=200),
        st.text(max_size=120).map(str.encode),
    )


def text(data: bytes) -> str:
    """How the sources turn file bytes into text (sources/_files.read_text)."""
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------------------- result checks
# Predicates on a parser's result: true when it has the documented type (and the invariants its docstring states).
def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_optional_int(value: Any) -> bool:
    return value is None or is_int(value)


def is_cpuset(value: Any) -> bool:
    return isinstance(value, frozenset) and all(is_int(cpu) and 0 <= cpu <= MAX_CPU_ID for cpu in value)


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_node_values(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and all(is_int(node) and is_int(count) and node >= 0 and count >= 0 for node, count in value.items())
    )


def is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def is_state(kind: type) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        state, problem = value
        assert state is not None or problem is not None, "neither a state nor the reason it is refused"
        assert state is None or isinstance(state, kind)
        if problem is not None:
            assert isinstance(problem, StateFileProblem)
            assert problem.file == FILE
            assert problem.reason in (kubelet_state.UNPARSABLE, kubelet_state.CHECKSUM_MISMATCH)
            assert problem.detail
        return True

    return check


def is_interrupts(value: Any) -> bool:
    return (
        isinstance(value, Interrupts)
        and all(row.key and all(count > 0 for count in row.counts.values()) for row in value.rows)
        and value.watched <= frozenset(value.cpus)
    )


# --------------------------------------------------------------------------------------------------- the parsers
@dataclass(frozen=True)
class Case:
    name: str
    sample: str  # the samples() kind mutated for it
    call: Callable[[bytes], Any]
    errors: tuple[type[BaseException], ...]  # what the parser documents it raises; () = never raises
    check: Callable[[Any], bool]  # true when the result has the documented type


def _flag(data: bytes) -> kubelet_config.Flag:
    flag, _ = kubelet_config.parse_kubelet_arg(text(data), FILE)
    return flag


def _rke2_args(data: bytes) -> Any:
    return kubelet_config.rke2_kubelet_args([(FILE, kubelet_config.load_yaml(text(data), FILE))])


def _apply_flags(data: bytes) -> Any:
    words = kubelet_config.parse_env_args(text(data), "KUBELET_EXTRA_ARGS", FILE)
    flags = kubelet_config.parse_flag_words(words, FILE, "KUBELET_EXTRA_ARGS")
    return kubelet_config.apply_flags({}, flags)


def _is_flags(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(f, kubelet_config.Flag) for f in value)


def _is_dir_name(value: Any) -> bool:
    return value is None or (isinstance(value, tuple) and value[0] in ("containerd", "crio") and len(value[1]) == 64)


CASES = (
    # cpuset.py / quantity.py / checkpoint_checksum.py / intent.py
    Case("cpuset.parse_cpulist", "cpulist", lambda d: cpuset.parse_cpulist(text(d)), (CPUListError,), is_cpuset),
    Case("cpuset.parse_cpumask", "cpumask", lambda d: cpuset.parse_cpumask(text(d)), (CPUListError,), is_cpuset),
    Case(
        "quantity.parse_quantity",
        "quantity",
        lambda d: quantity.parse_quantity(text(d)),
        (QuantityError,),
        lambda v: isinstance(v, Fraction),
    ),
    Case("quantity.quantity_bytes", "quantity", lambda d: quantity.quantity_bytes(text(d)), (QuantityError,), is_int),
    Case("quantity.quantity_millis", "quantity", lambda d: quantity.quantity_millis(text(d)), (QuantityError,), is_int),
    Case(
        "quantity.hugepage_size_bytes",
        "quantity",
        lambda d: quantity.hugepage_size_bytes("hugepages-" + text(d)),
        (),
        lambda v: v is None or (is_int(v) and v > 0),
    ),
    Case("checkpoint_checksum.fnv1a_32", "cpu_state", checkpoint_checksum.fnv1a_32, (), is_int),
    Case(
        "checkpoint_checksum.data_checksum",
        "cpu_state",
        lambda d: checkpoint_checksum.data_checksum(text(d)),
        (),
        is_int,
    ),
    Case(
        "intent.parse_intent",
        "intent",
        lambda d: parse_intent(text(d), source=FILE),
        (IntentError,),
        lambda v: isinstance(v, Intent),
    ),
    # sources/cgroups.py
    Case("cgroups.parse_container_dir", "dir_name", lambda d: cgroups.parse_container_dir(text(d)), (), _is_dir_name),
    Case(
        "cgroups.parse_pod_dir",
        "dir_name",
        lambda d: (
            cgroups.parse_pod_dir(text(d), "systemd", "burstable"),
            cgroups.parse_pod_dir(text(d), "cgroupfs", "guaranteed"),
        ),
        (),
        lambda v: all(uid is None or (isinstance(uid, str) and uid) for uid in v),
    ),
    Case("cgroups.parse_numa_stat_v2", "numa_stat_v2", cgroups.parse_numa_stat_v2, (ValueError,), is_node_values),
    Case("cgroups.parse_numa_stat_v1", "numa_stat_v1", cgroups.parse_numa_stat_v1, (ValueError,), is_node_values),
    Case(
        "cgroups.parse_procs",
        "procs",
        cgroups.parse_procs,
        (ValueError,),
        lambda v: isinstance(v, tuple) and len(v) <= cgroups.MAX_PIDS and all(is_int(p) for p in v),
    ),
    # sources/names.py
    Case("names.parse_annotations", "config_json", names.parse_annotations, (ValueError,), is_str_map),
    Case(
        "names.identity_from_annotations",
        "config_json",
        lambda d: [
            names.identity_from_annotations("ab" * 32, runtime, _annotations(d)) for runtime in ("containerd", "crio")
        ],
        (ValueError,),  # a name, UID or type the API server would not admit (never a label unchecked)
        lambda v: all(i is None or isinstance(i, ContainerIdentity) for i in v),
    ),
    Case(
        "names.parse_pod_log_dir",
        "dir_name",
        lambda d: names.parse_pod_log_dir(text(d)),
        (),
        lambda v: v is None or isinstance(v, PodIdentity),
    ),
    # sources/topology.py
    Case(
        "topology.parse_cmdline",
        "cmdline",
        lambda d: topology.last_values(topology.parse_cmdline(text(d))),
        (),
        lambda v: all(isinstance(k, str) and (x is None or isinstance(x, str)) for k, x in v.items()),
    ),
    Case(
        "topology.parse_isolation",
        "cmdline",
        lambda d: topology.parse_isolation(text(d), last_cpu=31, sys_isolated=frozenset({1}), path=FILE),
        (),
        lambda v: isinstance(v, IsolationParams) and all(p.startswith(FILE) and "\n" not in p for p in v.problems),
    ),
    Case(
        "topology.parse_cmdline_hugepages",
        "cmdline",
        lambda d: topology.parse_cmdline_hugepages(topology.parse_cmdline(text(d)), [], FILE),
        (),
        lambda v: all(is_int(k) and is_int(n) and k > 0 for k, n in v.items()),
    ),
    Case(
        "topology.parse_cmdline_hugepages (raising)",
        "cmdline",
        lambda d: topology.parse_cmdline_hugepages(topology.parse_cmdline(text(d))),
        (ValueError,),
        lambda v: isinstance(v, dict),
    ),
    Case(
        "topology.parse_cmdline_cpulist",
        "boot_cpulist",
        lambda d: topology.parse_cmdline_cpulist(text(d), 31),
        (CPUListError,),
        is_cpuset,
    ),
    Case(
        "topology.parse_isolcpus",
        "isolcpus",
        lambda d: topology.parse_isolcpus(text(d), 63),
        (CPUListError,),
        lambda v: is_cpuset(v[0]) and all(isinstance(f, str) for f in v[1]),
    ),
    Case("topology.parse_size_kb", "size", lambda d: topology.parse_size_kb(text(d)), (ValueError,), is_int),
    Case(
        "topology.parse_hugepages_count",
        "hugepages_count",
        lambda d: topology.parse_hugepages_count(text(d)),
        (ValueError,),
        is_int,
    ),
    Case(
        "topology.parse_sys_cpulist",
        "sys_cpulist",
        lambda d: topology.parse_sys_cpulist(text(d)),
        (CPUListError,),
        is_cpuset,
    ),
    Case(
        "topology.parse_meminfo_total",
        "meminfo",
        lambda d: topology.parse_meminfo_total(text(d)),
        (ValueError,),
        is_int,
    ),
    Case(
        "topology.parse_distance",
        "distance",
        lambda d: topology.parse_distance(text(d)),
        (ValueError,),
        lambda v: isinstance(v, tuple) and v and all(is_int(x) for x in v),
    ),
    Case(
        "topology.parse_int_attribute",
        "small_int",
        lambda d: topology.parse_int_attribute(text(d)),
        (ValueError,),
        is_int,
    ),
    Case("topology.hugepage_size_kb", "dir_name", lambda d: topology.hugepage_size_kb(text(d)), (), is_optional_int),
    # sources/kubelet_config.py
    Case(
        "kubelet_config.load_yaml",
        "kubelet_yaml",
        lambda d: kubelet_config.load_yaml(text(d), FILE),
        (MalformedFile,),
        lambda v: isinstance(v, dict),
    ),
    Case(
        "kubelet_config.parse_kubelet_configuration",
        "kubelet_yaml",
        lambda d: kubelet_config.parse_kubelet_configuration(text(d), FILE),
        (MalformedFile,),
        lambda v: isinstance(v, dict),
    ),
    Case(
        "kubelet_config.rke2_kubelet_args",
        "kubelet_yaml",
        _rke2_args,
        (MalformedFile,),
        lambda v: isinstance(v[0], list),
    ),
    Case(
        "kubelet_config.merge_patch",
        "kubelet_yaml",
        lambda d: kubelet_config.merge_patch(
            kubelet_config.load_yaml(text(samples()["kubelet_yaml"][0]), FILE), kubelet_config.load_yaml(text(d), FILE)
        ),
        (MalformedFile,),
        lambda v: isinstance(v, dict),
    ),
    Case(
        "kubelet_config.parse_env_args",
        "env_file",
        lambda d: kubelet_config.parse_env_args(text(d), "KUBELET_EXTRA_ARGS", FILE),
        (MalformedFile,),
        lambda v: isinstance(v, list) and all(isinstance(w, str) for w in v),
    ),
    Case(
        "kubelet_config.parse_flag_words",
        "env_file",
        lambda d: kubelet_config.parse_flag_words(text(d).split(), FILE, "KUBELET_EXTRA_ARGS"),
        (),
        _is_flags,
    ),
    Case(
        "kubelet_config.apply_flags",
        "env_file",
        _apply_flags,
        (MalformedFile,),
        lambda v: isinstance(v[0], dict) and isinstance(v[1], set),
    ),
    Case(
        "kubelet_config.parse_kubelet_arg",
        "flag",
        lambda d: kubelet_config.parse_kubelet_arg(text(d), FILE),
        (),
        lambda v: isinstance(v[0], kubelet_config.Flag) and (v[1] is None or isinstance(v[1], str)),
    ),
    Case(
        "kubelet_config.parse_reserved_memory_flag",
        "reserved_memory",
        lambda d: kubelet_config.parse_reserved_memory_flag(_flag(d)),
        (MalformedFile,),
        lambda v: all(is_int(n) and n >= 0 and all(b >= 0 for b in r.values()) for n, r in v.items()),
    ),
    Case(
        "kubelet_config.apply_flags (rke2 item)",
        "flag",
        lambda d: kubelet_config.apply_flags({}, [_flag(d)]),
        (MalformedFile,),
        lambda v: isinstance(v[0], dict),
    ),
    # sources/kubelet_state.py: never raise; a file the kubelet would refuse is a StateFileProblem
    Case(
        "kubelet_state.parse_cpu_manager_state",
        "cpu_state",
        lambda d: kubelet_state.parse_cpu_manager_state(d, FILE),
        (),
        is_state(CpuManagerState),
    ),
    Case(
        "kubelet_state.parse_memory_manager_state",
        "memory_state",
        lambda d: kubelet_state.parse_memory_manager_state(d, FILE),
        (),
        is_state(MemoryManagerState),
    ),
    Case(
        "kubelet_state.parse_device_checkpoint",
        "device_checkpoint",
        lambda d: kubelet_state.parse_device_checkpoint(d, FILE),
        (),
        is_state(DeviceCheckpoint),
    ),
    # sources/gpus_sysfs.py
    Case(
        "gpus_sysfs.parse_numa_node",
        "small_int",
        lambda d: gpus_sysfs.parse_numa_node(text(d)),
        (ValueError,),
        lambda v: v is None or (is_int(v) and v >= 0),
    ),
    Case("gpus_sysfs.parse_class", "pci_class", lambda d: gpus_sysfs.parse_class(text(d)), (ValueError,), is_int),
    Case(
        "gpus_sysfs.pci_sort_key",
        "dir_name",
        lambda d: sorted([gpus_sysfs.pci_sort_key(text(d)), gpus_sysfs.pci_sort_key("0000:18:00.0")]),
        (),
        lambda v: len(v) == 2,
    ),
    Case(
        "gpus_sysfs.parse_nvidia_information",
        "nvidia_info",
        lambda d: gpus_sysfs.parse_nvidia_information(text(d)),
        (),
        is_str_map,
    ),
    # sources/interrupts.py
    Case(
        "interrupts.parse_header",
        "interrupts",
        lambda d: interrupts.parse_header(d.split(b"\n", 1)[0], FILE),
        (MalformedFile,),
        lambda v: isinstance(v, tuple) and all(is_int(c) for c in v),
    ),
    Case(
        "interrupts.parse_interrupts (few watched)",
        "interrupts",
        lambda d: interrupts.parse_interrupts(d, {1, 2}, path=FILE),
        (MalformedFile,),
        is_interrupts,
    ),
    Case(
        "interrupts.parse_interrupts (many watched)",
        "interrupts",
        lambda d: interrupts.parse_interrupts(d, range(0, 64, 3), path=FILE),
        (MalformedFile,),
        is_interrupts,
    ),
    Case(
        "interrupts.classify",
        "interrupt_row",
        lambda d: interrupts.classify(*[*text(d).split(" ", 1), ""][:2]),
        (),
        lambda v: v in ("device", "local_timer", "ipi", "other"),
    ),
    Case(
        "interrupts.split_tail",
        "interrupts",
        lambda d: (interrupts.split_tail(d, True), interrupts.split_tail(d, False)),
        (),
        lambda v: all(isinstance(x, str) for pair in v for x in pair),
    ),
    # sources/irqbalance.py
    Case("irqbalance.parse_env_file", "env_file", lambda d: irqbalance.parse_env_file(text(d)), (), is_str_map),
    Case("irqbalance.parse_environ", "environ", irqbalance.parse_environ, (), is_str_map),
    Case(
        "irqbalance.config_from",
        "environ",
        lambda d: irqbalance.config_from(irqbalance.parse_environ(d), FILE, []),
        (),
        lambda v: isinstance(v, IrqbalanceConfig),
    ),
    Case(
        "irqbalance.socket_pids",
        "net_unix",
        lambda d: irqbalance.socket_pids(text(d)),
        (),
        lambda v: all(is_int(p) for p in v),
    ),
    # sources/irqs.py
    Case(
        "irqs.parse_cpulist_file",
        "cpulist",
        lambda d: irqs.parse_cpulist_file(d, FILE, {}),
        (MalformedFile,),
        is_cpuset,
    ),
    # sources/kernel.py
    Case(
        "kernel.parse_bracketed",
        "bracketed",
        lambda d: kernel.parse_bracketed(text(d)),
        (ValueError,),
        lambda v: isinstance(v[0], str) and v[0] in v[1],
    ),
    Case("kernel.parse_sysctl_int", "small_int", lambda d: kernel.parse_sysctl_int(text(d)), (ValueError,), is_int),
    Case("kernel.parse_governor", "governor", lambda d: kernel.parse_governor(text(d)), (ValueError,), is_str),
    Case(
        "kernel.parse_affected_cpus",
        "affected_cpus",
        lambda d: kernel.parse_affected_cpus(text(d)),
        (ValueError,),
        lambda v: isinstance(v, frozenset) and all(is_int(cpu) and cpu >= 0 for cpu in v),
    ),
    Case(
        "kernel.parse_cmdline_hugepages_per_node",
        "cmdline",
        lambda d: kernel.parse_cmdline_hugepages_per_node(text(d)),
        (),
        lambda v: all(is_int(n) and all(is_int(c) for c in s.values()) for n, s in v.items()),
    ),
    # sources/numastat.py
    Case(
        "numastat.parse_numastat",
        "numastat",
        lambda d: numastat.parse_numastat(text(d), FILE),
        (MalformedFile,),
        lambda v: bool(v) and all(isinstance(k, str) and is_int(x) for k, x in v.items()),
    ),
    Case(
        "numastat.parse_format",
        "pmu_format",
        lambda d: numastat.parse_format(text(d)),
        (ValueError,),
        lambda v: all(0 <= lo <= hi <= 63 for _, lo, hi in v),
    ),
    Case(
        "numastat.encode_event",
        "pmu_config_format",
        lambda d: numastat.encode_event({"event": numastat.parse_format(text(d))}, {"event": 0x02}),
        (ValueError,),
        is_int,
    ),
    Case(
        "numastat.find_link_pmus",
        "pmu_names",
        lambda d: numastat.find_link_pmus([name[:255] for name in text(d).split()]),  # directory names: NAME_MAX
        (),
        lambda v: all(isinstance(name, str) for names in v for name in names),
    ),
    Case(
        "numastat.parse_cap_eff",
        "proc_status",
        lambda d: numastat.parse_cap_eff(text(d)),
        (),
        is_optional_int,
    ),
    # sources/processes.py
    Case(
        "processes.parse_proc_cgroup",
        "proc_cgroup",
        lambda d: processes.parse_proc_cgroup(text(d)),
        (ValueError,),
        lambda v: v is None or (v[0] in (1, 2) and isinstance(v[1], str)),
    ),
    Case(
        "processes.cgroup_identity",
        "proc_cgroup",
        lambda d: processes.cgroup_identity(text(d)),
        (),
        lambda v: all(part is None or isinstance(part, str) for part in v),
    ),
    Case(
        "processes.parse_schedstat", "schedstat", lambda d: processes.parse_schedstat(d, FILE), (MalformedFile,), is_int
    ),
    Case(
        "processes.parse_thread_status",
        "proc_status",
        lambda d: processes.parse_thread_status(d, FILE),
        (MalformedFile,),
        lambda v: is_optional_int(v[0]) and (v[1] is None or is_cpuset(v[1])),
    ),
    Case(
        "processes.parse_nr_migrations",
        "sched",
        lambda d: processes.parse_nr_migrations(d, FILE),
        (MalformedFile,),
        is_optional_int,
    ),
    Case(
        "processes.parse_memlock",
        "limits",
        lambda d: processes.parse_memlock(d, FILE),
        (MalformedFile,),
        lambda v: v is None or (isinstance(v, Limit) and is_optional_int(v.soft) and is_optional_int(v.hard)),
    ),
    # sources/nvml.py (parsing of what NVML returns)
    Case(
        "nvml.normalise_bus_id",
        "bus_id",
        lambda d: (nvml.normalise_bus_id(d), nvml.normalise_bus_id(text(d))),
        (),
        lambda v: all(x is None or isinstance(x, str) for x in v),
    ),
)


def _annotations(data: bytes) -> dict[str, str]:
    try:
        return names.parse_annotations(data)
    except ValueError:
        return {"io.kubernetes.pod.uid": text(data)[:40], "io.kubernetes.cri.container-type": text(data)[-40:]}


def _check_error(case: Case, error: BaseException) -> None:
    """A documented error is also a usable one: a MalformedFile names the file it is about. (Its message may carry a
    newline from the file's own text; HostReader folds every down reason onto one line.)"""
    if isinstance(error, MalformedFile):
        assert error.path == FILE, f"{case.name}: MalformedFile names {error.path!r}, not the file read"
        assert str(error).startswith(FILE)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@pytest.mark.slow
def test_every_parser_accepts_its_unmutated_samples(case: Case) -> None:
    for sample in samples()[case.sample]:
        result = case.call(sample)
        assert case.check(result), f"{case.name}: unexpected result {result!r:.300}"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@SETTINGS
@given(data=st.data())
@pytest.mark.slow
def test_parser_returns_its_type_or_raises_only_its_documented_errors(case: Case, data: st.DataObject) -> None:
    raw = data.draw(inputs(case.sample), label="input")
    try:
        result = case.call(raw)
    except case.errors as error:
        _check_error(case, error)
        return
    assert case.check(result), f"{case.name}: unexpected result {result!r:.300}"


# --------------------------------------------------------------------------------------------------- kernel padding
# Single-value attributes, which real kernels print with padding (hosttext.py: "0-31\n\0" on ARM 5.15, "\0\n" and
# "  (null)\n" for an unset nohz_full): a parser gives the same value with it as without it.
PADDED_KINDS = frozenset(
    {"cpulist", "cpumask", "sys_cpulist", "meminfo", "distance", "small_int", "pci_class", "bracketed", "governor",
     "affected_cpus"}
)  # fmt: skip
LEADING_PADDING = (b" ", b"\0")
TRAILING_PADDING = (b"\0", b"\n", b" ", b"\t")


@pytest.mark.parametrize("case", [case for case in CASES if case.sample in PADDED_KINDS], ids=lambda case: case.name)
@SETTINGS
@given(data=st.data())
@pytest.mark.slow
def test_the_padding_kernels_print_around_a_value_changes_nothing(case: Case, data: st.DataObject) -> None:
    sample = data.draw(st.sampled_from(samples()[case.sample]), label="sample")
    before = b"".join(data.draw(st.lists(st.sampled_from(LEADING_PADDING), max_size=3), label="before"))
    after = b"".join(data.draw(st.lists(st.sampled_from(TRAILING_PADDING), max_size=4), label="after"))

    assert case.call(before + sample + after) == case.call(sample)


@SETTINGS
@given(
    st.lists(st.sampled_from(LEADING_PADDING), max_size=3),
    st.sampled_from((b"(null)", b"")),
    st.lists(st.sampled_from(TRAILING_PADDING), max_size=4),
)
def test_a_mask_the_kernel_never_set_reads_as_no_cpu(before: list[bytes], value: bytes, after: list[bytes]) -> None:
    assert topology.parse_sys_cpulist(text(b"".join(before) + value + b"".join(after))) == frozenset()


# --------------------------------------------------------------------------------------------------- round trips
@SETTINGS
@given(st.frozensets(st.integers(0, MAX_CPU_ID), max_size=200))
def test_cpu_lists_survive_formatting_and_parsing(cpus: frozenset[int]) -> None:
    assert cpuset.parse_cpulist(cpuset.format_cpulist(cpus)) == cpus


@SETTINGS
@given(st.frozensets(st.integers(0, 511), max_size=100), st.integers(16, 20))
def test_cpu_masks_decode_to_the_cpus_encoded(cpus: frozenset[int], words: int) -> None:
    value = sum(1 << cpu for cpu in cpus)
    mask = ",".join(f"{(value >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))
    assert cpuset.parse_cpumask(mask) == cpus


@SETTINGS
@given(st.integers(0, 1 << 70))
def test_byte_counts_survive_binary_formatting(value: int) -> None:
    assert quantity.quantity_bytes(quantity.format_binary(value)) == value


@SETTINGS
@given(
    st.lists(st.integers(0, 127), min_size=1, max_size=24, unique=True),
    st.lists(st.integers(0, 10**12), min_size=24 * 6, max_size=24 * 6),
    st.booleans(),
    st.frozensets(st.integers(0, 130), max_size=40),
)
@pytest.mark.slow
def test_interrupt_counts_of_the_fast_path_equal_a_plain_split(
    cpus: list[int], counts: list[int], old_layout: bool, watched: frozenset[int]
) -> None:
    """Whatever the column layout (offline CPUs, counts wider than their cell, old kernels' trailing space), the
    byte-range fast path reads the same counts as splitting every line."""
    columns = len(cpus)
    irqs = [
        FakeIrq(irq, f"dev{irq}", frozenset(cpus), counts=dict(zip(cpus, counts[i * columns :], strict=False)))
        for i, irq in enumerate((0, 9, 24, 130))
    ]
    named = {"LOC": dict(zip(cpus, counts[4 * columns :], strict=False)), "RES": {}}
    data = format_interrupts(cpus, irqs, named, old_layout=old_layout).encode()
    parsed = interrupts.parse_interrupts(data, watched, path=FILE)
    expected: dict[str, dict[int, int]] = {}
    for line in data.decode().splitlines()[1:]:
        key, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) < columns or not all(f.isdigit() for f in fields[:columns]):
            continue  # ERR / MIS
        expected[key.strip()] = {cpu: int(fields[i]) for i, cpu in enumerate(cpus) if cpu in watched and int(fields[i])}
    assert {row.key: dict(row.counts) for row in parsed.rows} == expected


@SETTINGS
@given(data=st.data(), block=st.integers(16, 600), watched=st.frozensets(st.integers(0, 40), max_size=12))
def test_reading_proc_interrupts_in_blocks_gives_what_parsing_it_whole_gives(
    data: st.DataObject, block: int, watched: frozenset[int]
) -> None:
    """Whatever the block boundaries cut (a header, a row, a cell), the streaming reader agrees with the whole-file
    parser: the same rows and counts, or the same refusal."""
    raw = data.draw(inputs("interrupts"), label="input")

    def outcome(parse: Callable[[], Interrupts]) -> Any:
        try:
            parsed = parse()
        except MalformedFile as error:
            return ("refused", error.path)
        return (parsed.cpus, parsed.watched, [(r.key, r.kind, r.name, r.chip, dict(r.counts)) for r in parsed.rows])

    with tempfile.NamedTemporaryFile(prefix="numawatch-interrupts-") as handle:
        handle.write(raw)
        handle.flush()
        streamed = outcome(lambda: interrupts.read_interrupts(HostFs(), handle.name, watched, block=block)[0])
        whole = outcome(lambda: interrupts.parse_interrupts(raw, watched, path=handle.name))
    assert streamed == whole


@SETTINGS
@given(st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=6), st.sampled_from(("cpu", "device")))
def test_state_files_with_any_strings_decode_and_verify(strings: dict[str, str], which: str) -> None:
    """Pod UIDs, container names and device IDs with any unicode (astral, combining, control characters, as the
    kubelet writes them unescaped) decode, and a file written with the kubelet's checksum verifies: the checksum
    is computed over the same UTF-8 bytes Go hashes. Lone surrogates, which only a JSON escape can carry, are the
    next test's."""
    with tempfile.TemporaryDirectory(prefix="numawatch-state-") as directory:
        host = FakeHost(directory)
        if which == "cpu":
            entries = {uid or "u": {name or "c": "1-2"} for uid, name in strings.items()}
            path = write_cpu_manager_state(host, default_cpuset="0,3", entries=entries)
            state, problem = kubelet_state.parse_cpu_manager_state(path.read_bytes(), FILE)
        else:
            assignments = [DeviceAssignment(u, n, "nvidia.com/gpu", {0: (n,)}) for u, n in strings.items()]
            path = write_device_checkpoint(host, entries=assignments, registered={"nvidia.com/gpu": list(strings)})
            state, problem = kubelet_state.parse_device_checkpoint(path.read_bytes(), FILE)
    assert problem is None and state is not None and state.checksum_ok


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\udc80", "\\ud83d"])
def test_a_lone_surrogate_escape_in_a_checkpoint_is_read_as_go_reads_it(escape: str) -> None:
    """Go's JSON decoder turns a lone UTF-16 surrogate escape into U+FFFD; the checksum is over that string."""
    document = {"policyName": "static", "defaultCpuSet": "0-3", "entries": {"pod\ufffd": {"c": "4"}}}
    checksum = checkpoint_checksum.cpu_manager_checksum("static", "0-3", {"pod\ufffd": {"c": "4"}})
    data = json.dumps({**document, "checksum": checksum}).replace("\\ufffd", escape).encode()
    state, problem = kubelet_state.parse_cpu_manager_state(data, FILE)
    assert problem is None
    assert state is not None and state.checksum_ok is True
    assert dict(state.entries) == {"pod\ufffd": {"c": frozenset({4})}}
