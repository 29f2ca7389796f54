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
- ``amd_df`` (AMD data fabric) is detected but not counted: its event encodings change with every Zen generation.
- ``proc/sys/kernel/perf_event_paranoid`` and ``CapEff`` of ``proc/self/status``: system-wide uncore counters need
  ``perf_event_paranoid <= 0`` or CAP_PERFMON (Linux >= 5.8) or CAP_SYS_ADMIN.

Virtual machines (and the CI machines: paranoid 2, no uncore PMUs) have none of it; the source then reports itself
down with the reason, and numastat remains the proxy.

Honest limits of the counter read: the counters are opened on first use and kept open for the life of the HostReader
(perf counts from the moment of opening, so a stateless re-open would always read ~0); the value is therefore
"bytes since numawatch started counting", exported as a counter. Encodings were taken from perf's event tables and
have not been checked on UPI hardware here; multiplexing is detected (time running < time enabled) and scaled.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from numawatch.cpuset import EMPTY, CPUListError, CPUSet, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.model import frozen_map
from numawatch.model_host import InterSocketTraffic, LinkTraffic, NodeCounters, NumaCounters
from numawatch.paths import Paths
from numawatch.sources._files import list_dir, read_optional_text
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


def _node_ids(node_dir: Path) -> list[int]:
    ids = []
    for name in list_dir(node_dir):
        suffix = name[4:]
        if name.startswith("node") and suffix.isascii() and suffix.isdigit():
            ids.append(int(suffix))
    return sorted(ids)


def read(paths: Paths) -> NumaCounters:
    node_dir = paths.sysfs / "devices/system/node"
    ids = _node_ids(node_dir)
    if not ids:
        raise SourceUnavailable(f"no NUMA nodes under {node_dir} (kernel without CONFIG_NUMA)")
    nodes: dict[int, NodeCounters] = {}
    for node in ids:
        path = node_dir / f"node{node}/numastat"
        text = read_optional_text(path, _NUMASTAT_LIMIT)
        if text is None:  # a node removed (memory hot-unplug) while we list them
            continue
        pools, problem = read_hugepage_pool(node_dir / f"node{node}/hugepages")
        if problem is not None:
            raise MalformedFile(path.parent / "hugepages", problem)
        nodes[node] = NodeCounters(
            node=node, numastat=frozen_map(parse_numastat(text, str(path))), hugepages=frozen_map(pools)
        )
    if not nodes:
        raise SourceUnavailable(f"no nodeN/numastat under {node_dir}")
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


# perf_event_open(2) ---------------------------------------------------------------------------------------------
_PERF_SYSCALL = {"x86_64": 298, "aarch64": 241}
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_TASK_CLOCK = 1


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


def read_counter(fd: int) -> int:
    """Read a counter opened by perf_event_open, scaled up when the kernel multiplexed it."""
    data = os.read(fd, 24)
    if len(data) < 24:
        raise OSError(f"short read of a perf counter ({len(data)} bytes)")
    value = int.from_bytes(data[0:8], "little")
    enabled = int.from_bytes(data[8:16], "little")
    running = int.from_bytes(data[16:24], "little")
    if running and running < enabled:
        value = int(value * enabled / running)
    return value


@dataclass(frozen=True)
class _Counter:
    pmu: str
    cpu: int
    socket: int | None
    fd: int


class UncoreLinkCounters:
    """Open UPI counters, kept for the life of the process so that they accumulate between readings.

    A perf counter counts from the moment it is opened, so the descriptors must outlive one reading: each HostReader
    gets its own instance (``SourceSpec.factory``); ``close()``, or dropping the reader, releases them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, int, int, int], _Counter] = {}

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for counter in self._counters.values():
                with contextlib.suppress(OSError):  # already closed: nothing left to release
                    os.close(counter.fd)
            self._counters.clear()

    def read(self, paths: Paths) -> InterSocketTraffic:
        devices = paths.sysfs / "bus/event_source/devices"
        names = list_dir(devices)
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
        paranoid = _optional_int(paths.procfs / "sys/kernel/perf_event_paranoid")
        cap_eff = parse_cap_eff(read_optional_text(paths.procfs / "self/status", 1 << 16) or "")
        if not may_count_system_wide(paranoid, cap_eff):
            raise SourceUnavailable(
                f"link PMUs {', '.join(intel + amd)} are present, but kernel.perf_event_paranoid={paranoid} and "
                "numawatch has neither CAP_PERFMON nor CAP_SYS_ADMIN: system-wide uncore counters need "
                "perf_event_paranoid <= 0 or one of those capabilities"
            )
        if not intel:
            raise SourceUnavailable(
                "amd_df is present, but AMD data-fabric event encodings differ per Zen generation and numawatch does "
                "not count them yet; numastat counters remain the proxy for cross-socket memory"
            )
        avoid = _isolated_cpus(paths)
        links: list[LinkTraffic] = []
        skipped: list[str] = []
        for pmu in intel:
            directory = devices / pmu
            pmu_type = _optional_int(directory / "type")
            cpumask = _optional_cpulist(directory / "cpumask")
            if pmu_type is None or not cpumask:
                continue
            formats = {}
            for field in UPI_EVENT:
                text = read_optional_text(directory / "format" / field, 4096)
                if text is None and field == "umask":
                    text = read_optional_text(directory / "format/umask_ext", 4096)
                if text is None:
                    raise MalformedFile(directory / "format", f"no format for {field}")
                try:
                    formats[field] = parse_format(text)
                except ValueError as error:
                    raise MalformedFile(directory / "format" / field, str(error)) from None
            try:
                config = encode_event(formats, UPI_EVENT)
            except ValueError as error:
                raise MalformedFile(directory / "format", str(error)) from None
            for cpu in sorted(cpumask):
                if cpu in avoid:
                    # The uncore driver polls overflow with an hrtimer on this CPU and reads from elsewhere send it
                    # an IPI: opening the counter would disturb an isolated CPU.
                    skipped.append(f"{pmu} on CPU {cpu}")
                    continue
                counter = self._open(pmu, cpu, pmu_type, config, paths)
                flits = read_counter(counter.fd)
                links.append(
                    LinkTraffic(
                        socket=counter.socket, link=pmu, pmu=pmu, bytes=int(flits * UPI_BYTES_PER_FLIT), cpu=cpu
                    )
                )
        if not links:
            reason = f"every link PMU is served by an isolated CPU ({'; '.join(skipped)})" if skipped else "no link"
            raise SourceUnavailable(f"inter-socket traffic not counted: {reason}")
        return InterSocketTraffic(links=tuple(links), event=UPI_EVENT_NAME)

    def _open(self, pmu: str, cpu: int, pmu_type: int, config: int, paths: Paths) -> _Counter:
        key = (pmu, cpu, pmu_type, config)
        with self._lock:
            counter = self._counters.get(key)
            if counter is None:
                socket = _optional_int(paths.sysfs / f"devices/system/cpu/cpu{cpu}/topology/physical_package_id")
                counter = _Counter(pmu, cpu, socket, perf_event_open(pmu_type, config, cpu=cpu))
                self._counters[key] = counter
            return counter


def _optional_int(path: Path) -> int | None:
    text = read_optional_text(path, 4096)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise MalformedFile(path, f"expected an integer, got {text.strip()[:60]!r}") from None


def _optional_cpulist(path: Path) -> CPUSet | None:
    text = read_optional_text(path, 1 << 16)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except CPUListError as error:
        raise MalformedFile(path, str(error)) from None


def _isolated_cpus(paths: Paths) -> CPUSet:
    cpus: CPUSet = EMPTY
    for name in ("isolated", "nohz_full"):
        text = read_optional_text(paths.sysfs / "devices/system/cpu" / name, 1 << 16)
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
    description="inter-socket link bytes from uncore UPI PMUs via perf_event_open (where permitted)",
    factory=UncoreLinkCounters,  # the open counters live as long as the HostReader
)

__all__ = [
    "INTERSOCKET",
    "SOURCE",
    "UncoreLinkCounters",
    "encode_event",
    "find_link_pmus",
    "may_count_system_wide",
    "parse_cap_eff",
    "parse_format",
    "parse_numastat",
    "perf_event_open",
    "read",
    "read_counter",
    "read_intersocket",
]
