"""NUMA memory counters per node, and inter-socket link traffic where the CPU's uncore PMUs can be read.

Two sources live here because they answer the same question, "how much memory traffic crosses sockets":

``numastat`` (always available on NUMA kernels):

- ``sys/devices/system/node/nodeN/numastat``: ``<field> <pages>`` per line, monotonic counters of *allocations*
  (numa_hit, numa_miss, numa_foreign, interleave_hit, local_node, other_node; Documentation/admin-guide/numastat.rst).
  They count where pages were allocated, not accesses: a rising ``other_node`` on a GPU's node is the cheap proxy
  for threads allocating from the wrong socket.
- ``sys/devices/system/node/nodeN/hugepages/hugepages-<kB>kB/{nr,free,surplus}_hugepages``: per-node pools
  (Documentation/ABI/stable/sysfs-devices-node), which catch 1 GiB pages reserved on the wrong socket.

``intersocket`` (real link bytes, only where the kernel exposes the PMUs and lets numawatch open them):

- ``sys/bus/event_source/devices/uncore_upi_<N>`` (Intel UPI; ``uncore_qpi_<N>`` before Skylake-SP) with ``type``,
  ``cpumask`` (one CPU per package) and ``format/{event,umask}``. The event is UNC_UPI_TxL_FLITS.ALL_DATA
  (event 0x02, umask 0x0f in perf's JSON tables for SKX/ICX/SPR): data flits sent, 9 flits carry 64 bytes.
  Counted with perf_event_open(2) through ctypes, one counter per link and package, opened on the PMU's cpumask CPU.
- ``sys/bus/event_source/devices/amd_df`` (AMD data fabric; ``type``, ``cpumask`` with one CPU per package,
  ``format/{event,umask}``). Its events change with every Zen generation, so the generation is read first:
  ``sys/devices/system/cpu/modalias`` (``cpu:type:x86,ven0002fam0019mod0011:feature:...``, hex vendor, family and
  model, drivers/base/cpu.c), or, only where that file is missing, the first block of ``proc/cpuinfo``
  (``vendor_id``, ``cpu family``, ``model``, decimal), read at most once per reader. modalias comes first because on
  many kernels opening /proc/cpuinfo IPIs every online CPU for its "cpu MHz" line (arch_freq_prepare_all,
  aperfmperf_snapshot_khz), isolated CPUs included. Family/model map to perf's
  tools/perf/pmu-events/arch/x86/amdzen<N> tables the way its mapfile.csv does. Counted, like UPI TxL on Intel, is
  the data each socket sends over its inter-socket (xGMI) links, summed over the links into one ``xgmi_out`` series:

  - Zen 2/3 (amdzen2/amdzen3 data-fabric.json): remote_outbound_data_controller_0..3, EventCode 0x7c7, 0x807,
    0x847, 0x887, UMask 0x02, 32 bytes per count (perf's metric all_remote_links_outbound, "approximate").
  - Zen 4 (amdzen4): local_socket_outbound_data_beats_link0..7, EventCode 0xb5f + 0x40 x link, UMask 0xf3e,
    64-byte beats (perf's metric local_socket_outbound_data_from_all_links).
  - Zen 5 (amdzen5): local_socket_outbound_data_beats_link_0..5, EventCode 0xd5f + 0x40 x link, UMask 0xf3e,
    64-byte beats.
  - Zen 1 and unknown families: not counted, the source says why.

  Four to eight events per package, so few that the data-fabric counters (4 per package before PerfMonV2, as many
  as CPUID reports with it) need little or no multiplexing. Not used: the DRAM-side Zen 4 events
  remote_processor_{read,write}_data_beats_cs* (Zen 5's table has no remote-only DRAM read event, and they miss
  cache-to-cache traffic) and the per-CPU-interface remote_socket_*_data_beats_ccm*/cfi* (32 events, heavy
  multiplexing, and blind to device DMA). Event codes above 0xff need the high event bits: the format files say
  where (event ``config:0-7,32-35,59-60`` before PerfMonV2; ``config:0-7,32-37`` and umask ``config:8-15,24-27``
  with it); a Zen 4/5 umask (0xf3e) does not fit an 8-bit umask format, which makes the source unavailable with
  that reason.
- ``proc/sys/kernel/perf_event_paranoid`` and ``CapEff`` of ``proc/self/status``: system-wide uncore counters need
  ``perf_event_paranoid <= 0`` or CAP_PERFMON (Linux >= 5.8) or CAP_SYS_ADMIN.

Virtual machines (and the CI machines: paranoid 2, no uncore PMUs) have none of it; the source then reports itself
down with the reason, and numastat remains the proxy.

Honest limits of the counter read: the counters are opened on first use and kept open for the life of the HostReader
(perf counts from the moment of opening, so a stateless re-open would always read ~0); the value is therefore
"bytes since numawatch started counting", exported as a counter. Encodings were taken from perf's event tables and
the kernels' format files (arch/x86/events/amd/uncore.c) and have run on neither UPI nor AMD hardware here.
Multiplexing is detected (time running < time enabled) and scaled; since a scaled estimate can dip between readings
and a counter that goes down reads as a reset, every exported series is kept monotonic.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from numawatch.confined import HostFs
from numawatch.cpuset import EMPTY, CPUListError, CPUSet, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.model import frozen_map
from numawatch.model.kernel import InterSocketTraffic, LinkTraffic, NodeCounters, NumaCounters
from numawatch.paths import Paths
from numawatch.source import SourceSpec
from numawatch.sources.kernel import read_hugepage_pool

_NUMASTAT_LIMIT = 1 << 16


# --------------------------------------------------------------------------------------------------- numastat
def parse_numastat(text: str, path: str = "numastat") -> dict[str, int]:
    """``numa_hit 24831`` lines -> {field: pages}. Unknown fields are kept; new kernels may add some."""
    counters: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split()
        # A u64 counter has at most 20 digits; int() would refuse a corrupt 4,300-digit one with a bare ValueError.
        if len(fields) != 2 or not fields[1].isascii() or not fields[1].isdigit() or len(fields[1]) > 20:
            raise MalformedFile(path, f"expected '<field> <pages>', got {line.strip()[:80]!r}")
        counters[fields[0]] = int(fields[1])
    if not counters:
        raise MalformedFile(path, "no counters")
    return counters


def _node_ids(fs: HostFs, node_dir: str) -> list[int]:
    ids = []
    for name in fs.list_dir(node_dir):
        suffix = name[4:]
        if name.startswith("node") and suffix.isascii() and suffix.isdigit():
            ids.append(int(suffix))
    return sorted(ids)


def read(paths: Paths) -> NumaCounters:
    root = f"{os.fspath(paths.sysfs)}/devices/system/node"  # strings, not pathlib: every node at every reading
    ids = _node_ids(paths.fs, root)
    if not ids:
        raise SourceUnavailable(f"no NUMA nodes under {root} (kernel without CONFIG_NUMA)")
    nodes: dict[int, NodeCounters] = {}
    for node in ids:
        path = f"{root}/node{node}/numastat"
        text = paths.fs.read_attribute_text(path, _NUMASTAT_LIMIT)
        if text is None:  # a node removed (memory hot-unplug) while we list them
            continue
        # The pools are optional: a malformed file leaves its pool out and says so, the counters stay.
        pools, problem = read_hugepage_pool(paths.fs, f"{root}/node{node}/hugepages")
        nodes[node] = NodeCounters(
            node=node,
            numastat=frozen_map(parse_numastat(text, path)),
            hugepages=frozen_map(pools),
            hugepages_problem=problem,
        )
    if not nodes:
        raise SourceUnavailable(f"no nodeN/numastat under {root}")
    return NumaCounters(nodes=frozen_map(nodes))


SOURCE = SourceSpec(
    name="numastat",
    read=read,
    description="per-node NUMA allocation counters and huge page pools (sysfs node/nodeN)",
)


# --------------------------------------------------------------------------------------------------- uncore PMUs
_INTEL_LINK_PMU = re.compile(r"uncore_(upi|qpi)(?:_(\d+))?\Z")
AMD_DATA_FABRIC_PMU = "amd_df"

# UNC_UPI_TxL_FLITS.ALL_DATA (tools/perf/pmu-events/arch/x86/{skylakex,icelakex,sapphirerapids}/uncore-io.json
# and uncore-interconnect.json): EventCode 0x02, UMask 0x0f. Nine data flits carry one 64-byte cache line.
UPI_EVENT = {"event": 0x02, "umask": 0x0F}
UPI_EVENT_NAME = "UNC_UPI_TxL_FLITS.ALL_DATA x 64/9"
UPI_BYTES_PER_FLIT = 64 / 9

CAP_SYS_ADMIN = 21
CAP_PERFMON = 38  # Linux >= 5.8


def find_link_pmus(names: list[str]) -> tuple[list[str], list[str]]:
    """PMU directory names -> (Intel UPI/QPI link PMUs sorted by link number, AMD data fabric PMUs)."""
    links = [(int(match.group(2) or 0), name) for name in names if (match := _INTEL_LINK_PMU.match(name))]
    intel = [name for _, name in sorted(links)]
    amd = [name for name in names if name == AMD_DATA_FABRIC_PMU]
    return intel, amd


def parse_format(text: str) -> list[tuple[str, int, int]]:
    """A PMU ``format/<field>`` file (``config:0-7``, ``config:8-15,32-55``, ``config1:0``) -> bit ranges.

    Returns (attribute, low bit, high bit) per range, in order: a value's low bits go into the first range.
    """
    attribute, colon, ranges = text.strip().partition(":")
    if not colon or attribute not in ("config", "config1", "config2"):
        raise ValueError(f"bad PMU format {text.strip()[:60]!r}")
    result = []
    for part in ranges.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"bad PMU format {text.strip()[:60]!r}")
        lo, hi = int(low), int(high) if dash else int(low)
        if hi < lo or hi > 63:
            raise ValueError(f"bad PMU format {text.strip()[:60]!r}")
        result.append((attribute, lo, hi))
    return result


def encode_event(formats: dict[str, list[tuple[str, int, int]]], values: dict[str, int]) -> int:
    """Place each field's value into ``config`` as the PMU's format files lay it out."""
    config = 0
    for name, value in values.items():
        layout = formats.get(name)
        if layout is None:
            raise ValueError(f"PMU has no format field {name!r}")
        remaining = value
        for attribute, low, high in layout:
            if attribute != "config":
                raise ValueError(f"field {name!r} lives in {attribute}, which numawatch does not set")
            width = high - low + 1
            config |= (remaining & ((1 << width) - 1)) << low
            remaining >>= width
        if remaining:
            raise ValueError(f"value {value:#x} does not fit field {name!r}")
    return config


def parse_cap_eff(status_text: str) -> int | None:
    """The effective capability mask from a /proc/<pid>/status text, or None when absent."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return None
    return None


def may_count_system_wide(paranoid: int | None, cap_eff: int | None) -> bool:
    """Whether CPU-wide perf events may be opened (kernel/events/core.c perf_allow_cpu)."""
    if paranoid is not None and paranoid <= 0:
        return True
    if cap_eff is None:
        return False
    return bool(cap_eff & (1 << CAP_PERFMON)) or bool(cap_eff & (1 << CAP_SYS_ADMIN))


# CPU identity: which AMD event table applies -------------------------------------------------------------------
# X86_VENDOR_* numbers of arch/x86/include/asm/processor.h, as modalias prints them.
X86_VENDORS = {0: "GenuineIntel", 2: "AuthenticAMD", 9: "HygonGenuine"}
_MODALIAS = re.compile(r"cpu:type:x86,ven([0-9A-Fa-f]{4})fam([0-9A-Fa-f]{4})mod([0-9A-Fa-f]{4}):")
# One processor block of /proc/cpuinfo is 1.5-3 KB; the fields needed are its first lines.
_CPUINFO_HEAD = 8192


@dataclass(frozen=True)
class CpuId:
    vendor: str  # the vendor_id string: "AuthenticAMD", "GenuineIntel", "HygonGenuine"
    family: int
    model: int

    def __str__(self) -> str:
        return f"{self.vendor} family {self.family:#x} model {self.model:#x}"


def parse_cpu_modalias(text: str, path: str = "modalias") -> CpuId:
    """``sys/devices/system/cpu/modalias`` (``cpu:type:x86,ven0002fam0019mod0011:feature:,...``, hex fields)."""
    match = _MODALIAS.match(text.strip())
    if match is None:
        raise MalformedFile(path, f"expected 'cpu:type:x86,venXXXXfamXXXXmodXXXX:...', got {text.strip()[:60]!r}")
    vendor = int(match.group(1), 16)
    return CpuId(X86_VENDORS.get(vendor, f"x86 vendor {vendor}"), int(match.group(2), 16), int(match.group(3), 16))


def parse_cpuinfo_id(text: str, path: str = "cpuinfo") -> CpuId:
    """The first processor block of ``proc/cpuinfo``: ``vendor_id``, ``cpu family`` and ``model`` (decimal)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the end of the first block; the others describe the same CPU model
            continue
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip(), value.strip())
    missing = [key for key in ("vendor_id", "cpu family", "model") if key not in fields]
    if missing:
        raise MalformedFile(path, f"no {', '.join(repr(key) for key in missing)} in the first processor block")
    numbers = []
    for key in ("cpu family", "model"):
        value = fields[key]
        if not value.isascii() or not value.isdigit() or len(value) > 6:
            raise MalformedFile(path, f"{key!r} is not a decimal number: {value[:40]!r}")
        numbers.append(int(value))
    return CpuId(fields["vendor_id"], numbers[0], numbers[1])


def read_cpu_id(paths: Paths) -> CpuId:
    """The boot CPU's vendor, family and model: modalias, else the head of /proc/cpuinfo (see the module notes)."""
    modalias = paths.sysfs / "devices/system/cpu/modalias"
    text = paths.fs.read_optional_text(modalias, 1 << 16)
    if text is not None:
        return parse_cpu_modalias(text, str(modalias))
    cpuinfo = paths.procfs / "cpuinfo"
    try:
        # Only the head: the fields needed are at the top, and every further block is formatted for nothing.
        head = paths.fs.read_file(cpuinfo, _CPUINFO_HEAD)
    except (FileNotFoundError, NotADirectoryError):
        raise SourceUnavailable(
            f"amd_df is present, but the CPU generation is unknown: neither {modalias} nor {cpuinfo} exists"
        ) from None
    return parse_cpuinfo_id(head.decode("utf-8", errors="replace"), str(cpuinfo))


def amd_zen_generation(cpu: CpuId) -> int | None:
    """The amdzen<N> table perf's mapfile.csv picks for this CPU, or None for another vendor or family.

    mapfile.csv: AuthenticAMD-23-([12][0-9A-F]|[0-9A-F]) amdzen1, AuthenticAMD-23-* amdzen2,
    AuthenticAMD-25-([245][[:xdigit:]]|[[:xdigit:]]) amdzen3, AuthenticAMD-25-* amdzen4, AuthenticAMD-26-* amdzen5
    (family in decimal, model in hex).
    """
    if cpu.vendor != "AuthenticAMD":
        return None
    if cpu.family == 0x17:
        return 1 if cpu.model < 0x30 else 2
    if cpu.family == 0x19:
        return 3 if cpu.model >> 4 in (0x0, 0x2, 0x4, 0x5) else 4
    if cpu.family == 0x1A:
        return 5
    return None


@dataclass(frozen=True)
class DataFabricCount:
    """Events summed into one ``link`` series: (EventCode, UMask) pairs from perf's data-fabric.json."""

    link: str
    events: tuple[tuple[int, int], ...]
    bytes_per_count: int


@dataclass(frozen=True)
class DataFabricTable:
    generation: int
    counts: tuple[DataFabricCount, ...]
    event: str  # InterSocketTraffic.event: what is counted


XGMI_OUT = "xgmi_out"
# "Remote Link Controller Outbound Packet Types: Data (32B): Remote Link Controller 0..3" (amdzen2 and amdzen3).
_REMOTE_LINK_CONTROLLERS = (
    DataFabricCount(XGMI_OUT, tuple((code, 0x02) for code in (0x7C7, 0x807, 0x847, 0x887)), 32),
)
_ZEN23_EVENT = "data fabric: remote_outbound_data_controller_{0..3} x 32 B (data sent over the xGMI links)"
AMD_DATA_FABRIC_TABLES = {
    2: DataFabricTable(2, _REMOTE_LINK_CONTROLLERS, f"AMD Zen 2 {_ZEN23_EVENT}"),
    3: DataFabricTable(3, _REMOTE_LINK_CONTROLLERS, f"AMD Zen 3 {_ZEN23_EVENT}"),
    # "Data beats (64 bytes) for local socket outbound data from inter-socket xGMI link 0..7".
    4: DataFabricTable(
        4,
        (DataFabricCount(XGMI_OUT, tuple((0xB5F + 0x40 * link, 0xF3E) for link in range(8)), 64),),
        "AMD Zen 4 data fabric: local_socket_outbound_data_beats_link{0..7} x 64 B (data sent over the xGMI links)",
    ),
    # "Outbound data beats (64 bytes) for transactions between local socket and remote socket over Cross-socket
    # Link 0..5".
    5: DataFabricTable(
        5,
        (DataFabricCount(XGMI_OUT, tuple((0xD5F + 0x40 * link, 0xF3E) for link in range(6)), 64),),
        "AMD Zen 5 data fabric: local_socket_outbound_data_beats_link_{0..5} x 64 B (data sent over the "
        "cross-socket links)",
    ),
}
AMD_UNCOUNTED = {
    1: "four dies per socket, each with its own data fabric; perf's amdzen1 table only repeats Zen 2's events",
}


def amd_data_fabric_table(cpu: CpuId) -> DataFabricTable:
    """The events to count on this CPU's amd_df, or SourceUnavailable naming the CPU and why none are known."""
    generation = amd_zen_generation(cpu)
    table = AMD_DATA_FABRIC_TABLES.get(generation) if generation is not None else None
    if table is not None:
        return table
    if generation in AMD_UNCOUNTED:
        why = f"Zen {generation}: {AMD_UNCOUNTED[generation]}"
    else:
        why = "numawatch knows AMD family 0x17 model >= 0x30, 0x19 and 0x1a"
    raise SourceUnavailable(
        f"amd_df is present, but no data-fabric event encoding is known for {cpu} ({why}); "
        "numastat counters remain the proxy"
    )


# perf_event_open(2) ---------------------------------------------------------------------------------------------
_PERF_SYSCALL = {"x86_64": 298, "aarch64": 241}
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to PERF_ATTR_SIZE_VER5 (112 bytes); the bit fields live in ``flags``."""

    _fields_ = (
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),  # bit 0 disabled, 1 inherit, ...; all 0: enabled at once, counting
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("reserved_2", ctypes.c_uint16),
    )


def perf_event_open(pmu_type: int, config: int, *, pid: int = -1, cpu: int = -1) -> int:
    """Open one counting perf event; returns its fd. Raises OSError (errno from the kernel) on refusal."""
    number = _PERF_SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(f"perf_event_open: unsupported architecture {platform.machine()}")
    attr = PerfEventAttr()
    attr.type = pmu_type
    attr.size = ctypes.sizeof(PerfEventAttr)
    attr.config = config
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(number, ctypes.byref(attr), pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"perf_event_open(type={pmu_type}, config={config:#x}, cpu={cpu}): {os.strerror(errno)}")
    return fd


def scale_count(value: int, enabled: int, running: int) -> int:
    """A count scaled up to the whole enabled time when the kernel multiplexed the counter (running < enabled).

    Integer arithmetic: a float loses the low bits of a 64-bit count. Never scheduled yet (running 0): the raw count.
    """
    if running and running < enabled:
        return value * enabled // running
    return value


def read_counter(fd: int) -> int:
    """Read a counter opened by perf_event_open (value, time enabled, time running), scaled when multiplexed."""
    data = os.read(fd, 24)
    if len(data) < 24:
        raise OSError(f"short read of a perf counter ({len(data)} bytes)")
    return scale_count(
        int.from_bytes(data[0:8], "little"), int.from_bytes(data[8:16], "little"), int.from_bytes(data[16:24], "little")
    )


@dataclass(frozen=True)
class _Counter:
    pmu: str
    cpu: int
    socket: int | None
    fd: int


@dataclass(frozen=True)
class _Series:
    """The counters summed into one (PMU, CPU, link) series, and how many bytes one count is."""

    pmu: str
    pmu_type: int
    cpu: int
    link: str
    configs: tuple[int, ...]
    bytes_per_count: float


class UncoreLinkCounters:
    """Open uncore counters (UPI, AMD data fabric), kept for the life of the process to accumulate between readings.

    A perf counter counts from the moment it is opened, so the descriptors must outlive one reading: each HostReader
    gets its own instance (``SourceSpec.factory``); ``close()``, or dropping the reader, releases them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, int, int, int], _Counter] = {}
        self._last: dict[tuple[str, int, str], int] = {}  # bytes last exported per series, to stay monotonic
        self._cpu_id: CpuId | None = None  # read once: the CPU model does not change under a running process

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for counter in self._counters.values():
                with contextlib.suppress(OSError):  # already closed: nothing left to release
                    os.close(counter.fd)
            self._counters.clear()
            self._last.clear()

    def read(self, paths: Paths) -> InterSocketTraffic:
        # Strings, not pathlib: this runs at every reading.
        devices = f"{os.fspath(paths.sysfs)}/bus/event_source/devices"
        procfs = os.fspath(paths.procfs)
        names = paths.fs.list_dir(devices)
        if not names:
            raise SourceUnavailable(
                f"no perf event sources under {devices}; numastat counters remain the proxy for cross-socket memory"
            )
        intel, amd = find_link_pmus(names)
        if not intel and not amd:
            raise SourceUnavailable(
                f"no inter-socket link PMU (uncore_upi_*, uncore_qpi_*, amd_df) under {devices}: a virtual machine "
                "or a CPU without exposed uncore counters; numastat counters remain the proxy for cross-socket memory"
            )
        paranoid = _optional_int(paths.fs, f"{procfs}/sys/kernel/perf_event_paranoid")
        cap_eff = parse_cap_eff(paths.fs.read_optional_text(f"{procfs}/self/status", 1 << 16) or "")
        if not may_count_system_wide(paranoid, cap_eff):
            raise SourceUnavailable(
                f"link PMUs {', '.join(intel + amd)} are present, but kernel.perf_event_paranoid={paranoid} and "
                "numawatch has neither CAP_PERFMON nor CAP_SYS_ADMIN: system-wide uncore counters need "
                "perf_event_paranoid <= 0 or one of those capabilities"
            )
        if intel:
            series, event = _intel_series(paths.fs, devices, intel), UPI_EVENT_NAME
        else:
            if self._cpu_id is None:
                self._cpu_id = read_cpu_id(paths)
            table = amd_data_fabric_table(self._cpu_id)
            series, event = _amd_series(paths.fs, f"{devices}/{amd[0]}", amd[0], table), table.event
        avoid = _isolated_cpus(paths)
        links: dict[tuple[int | None, str], LinkTraffic] = {}
        skipped: list[str] = []
        for one in series:
            if one.cpu in avoid:
                # The uncore driver polls overflow with an hrtimer on this CPU (Intel), perf's multiplexing timer
                # runs there, and reads from elsewhere send it an IPI: opening the counter would disturb an
                # isolated CPU.
                if (where := f"{one.pmu} on CPU {one.cpu}") not in skipped:
                    skipped.append(where)
                continue
            counters = [self._open(one.pmu, one.cpu, one.pmu_type, config, paths) for config in one.configs]
            count = sum(read_counter(counter.fd) for counter in counters)
            link = LinkTraffic(
                socket=counters[0].socket,
                link=one.link,
                pmu=one.pmu,
                bytes=self._monotonic((one.pmu, one.cpu, one.link), int(count * one.bytes_per_count)),
                cpu=one.cpu,
            )
            # Two cpumask CPUs in one package (kernels that gave each die its own data-fabric context) are summed:
            # one series per socket and link.
            key = (link.socket, link.link)
            prior = links.get(key)
            links[key] = link if prior is None else replace(prior, bytes=prior.bytes + link.bytes)
        if not links:
            if skipped:
                reason = f"every link PMU is served by an isolated CPU ({'; '.join(skipped)})"
            else:
                reason = f"no link PMU under {devices} has both a type and a cpumask"
            raise SourceUnavailable(f"inter-socket traffic not counted: {reason}")
        return InterSocketTraffic(links=tuple(links.values()), event=event)

    def _monotonic(self, key: tuple[str, int, str], value: int) -> int:
        with self._lock:
            value = max(value, self._last.get(key, 0))
            self._last[key] = value
            return value

    def _open(self, pmu: str, cpu: int, pmu_type: int, config: int, paths: Paths) -> _Counter:
        key = (pmu, cpu, pmu_type, config)
        with self._lock:
            counter = self._counters.get(key)
            if counter is None:
                package = paths.sysfs / f"devices/system/cpu/cpu{cpu}/topology/physical_package_id"
                socket = _optional_int(paths.fs, package)
                counter = _Counter(pmu, cpu, socket, perf_event_open(pmu_type, config, cpu=cpu))
                self._counters[key] = counter
            return counter


def _pmu_formats(fs: HostFs, directory: str, fields: Iterable[str]) -> dict[str, list[tuple[str, int, int]]]:
    """``format/<field>`` of a PMU directory, parsed; the Intel UPI umask is ``umask_ext`` on SKX and later."""
    formats = {}
    for field in fields:
        text = fs.read_optional_text(f"{directory}/format/{field}", 4096)
        if text is None and field == "umask":
            text = fs.read_optional_text(f"{directory}/format/umask_ext", 4096)
        if text is None:
            raise MalformedFile(f"{directory}/format", f"no format for {field}")
        try:
            formats[field] = parse_format(text)
        except ValueError as error:
            raise MalformedFile(f"{directory}/format/{field}", str(error)) from None
    return formats


def _intel_series(fs: HostFs, devices: str, pmus: list[str]) -> list[_Series]:
    """One UNC_UPI_TxL_FLITS.ALL_DATA counter per UPI link PMU and package (cpumask CPU)."""
    series: list[_Series] = []
    for pmu in pmus:
        directory = f"{devices}/{pmu}"
        pmu_type = _optional_int(fs, f"{directory}/type")
        cpumask = _optional_cpulist(fs, f"{directory}/cpumask")
        if pmu_type is None or not cpumask:
            continue
        try:
            config = encode_event(_pmu_formats(fs, directory, UPI_EVENT), UPI_EVENT)
        except ValueError as error:
            raise MalformedFile(f"{directory}/format", str(error)) from None
        series.extend(_Series(pmu, pmu_type, cpu, pmu, (config,), UPI_BYTES_PER_FLIT) for cpu in sorted(cpumask))
    return series


def _amd_series(fs: HostFs, directory: str, pmu: str, table: DataFabricTable) -> list[_Series]:
    """Per package (cpumask CPU), one series per link of the table, each the sum of its events."""
    pmu_type = _optional_int(fs, f"{directory}/type")
    cpumask = _optional_cpulist(fs, f"{directory}/cpumask")
    if pmu_type is None or not cpumask:
        return []
    formats = _pmu_formats(fs, directory, ("event", "umask"))
    configs: dict[str, tuple[int, ...]] = {}
    for count in table.counts:
        try:
            configs[count.link] = tuple(
                encode_event(formats, {"event": event, "umask": umask}) for event, umask in count.events
            )
        except ValueError as error:
            # A well-formed format too narrow for the events: Zen 4/5 umasks are 12 bits, and only kernels that
            # know PerfMonV2 data-fabric counters declare them (umask config:8-15,24-27). Not a corrupt file.
            layout = "; ".join(
                f"{name} {','.join(f'{low}-{high}' for _, low, high in ranges)}" for name, ranges in formats.items()
            )
            hint = "; Zen 4 and later need the PerfMonV2 data-fabric format" if table.generation >= 4 else ""
            raise SourceUnavailable(
                f"amd_df cannot encode the Zen {table.generation} data-fabric events: {error} in {directory}/format "
                f"(config bits {layout}){hint}"
            ) from None
    return [
        _Series(pmu, pmu_type, cpu, count.link, configs[count.link], count.bytes_per_count)
        for cpu in sorted(cpumask)
        for count in table.counts
    ]


def _optional_int(fs: HostFs, path: Path | str) -> int | None:
    text = fs.read_optional_text(path, 4096)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise MalformedFile(path, f"expected an integer, got {text.strip()[:60]!r}") from None


def _optional_cpulist(fs: HostFs, path: str) -> CPUSet | None:
    text = fs.read_optional_text(path, 1 << 16)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except CPUListError as error:
        raise MalformedFile(path, str(error)) from None


def _isolated_cpus(paths: Paths) -> CPUSet:
    cpus: CPUSet = EMPTY
    cpu_root = f"{os.fspath(paths.sysfs)}/devices/system/cpu"  # a string, not pathlib: this runs at every reading
    for name in ("isolated", "nohz_full"):
        text = paths.fs.read_optional_text(f"{cpu_root}/{name}", 1 << 16)
        if text is None or text.strip() == "(null)":
            continue
        try:
            cpus |= parse_cpulist(text)
        except CPUListError:
            continue
    return cpus


def read_intersocket(paths: Paths) -> InterSocketTraffic:
    """One reading with counters opened and closed on the spot: right for detection and the reasons it gives, but
    the bytes only cover the instant since opening. HostReader uses ``UncoreLinkCounters`` (the factory) instead."""
    counters = UncoreLinkCounters()
    try:
        return counters.read(paths)
    finally:
        counters.close()


INTERSOCKET = SourceSpec(
    name="intersocket",
    read=read_intersocket,
    description="inter-socket link bytes from uncore PMUs (Intel UPI, AMD data fabric) via perf_event_open "
    "(where permitted)",
    factory=lambda _context: UncoreLinkCounters(),  # the open counters live as long as the HostReader
)

__all__ = [
    "AMD_DATA_FABRIC_TABLES",
    "INTERSOCKET",
    "SOURCE",
    "CpuId",
    "DataFabricCount",
    "DataFabricTable",
    "UncoreLinkCounters",
    "amd_data_fabric_table",
    "amd_zen_generation",
    "encode_event",
    "find_link_pmus",
    "may_count_system_wide",
    "parse_cap_eff",
    "parse_cpu_modalias",
    "parse_cpuinfo_id",
    "parse_format",
    "parse_numastat",
    "perf_event_open",
    "read",
    "read_counter",
    "read_cpu_id",
    "read_intersocket",
    "scale_count",
]
