"""The numawatch benchmark: CPU and memory of ``check`` and ``serve`` on generated hosts (never a timed test).

    .venv/bin/python bench/run.py                        # the 384-CPU host of the "numawatch core" issue
    .venv/bin/python bench/run.py --sizes 32,384         # scaling from the small to the large host
    .venv/bin/python bench/run.py --host /tmp/host384    # a tree made by bench/generate_host.py (or any host root)
    .venv/bin/python bench/run.py --json                 # machine-readable results on stdout

For each size a fresh tree is generated (bench/generate_host.py, ``HostSpec.scaled``) and measured four ways:

1. ``check``: ``numawatch check --host-root DIR --format json`` as a subprocess, ``--checks`` times: wall time,
   user+sys CPU seconds and peak RSS (``ru_maxrss``) of that child alone: ``os.wait4``'s rusage, the same accounting
   as ``getrusage(RUSAGE_CHILDREN)`` deltas but per child, taken by a small fork-and-exec launcher because a child
   spawned from this harness would inherit the harness's peak RSS into its ``ru_maxrss`` (see ``_LAUNCHER``). A
   ``numawatch --version`` run gives the interpreter-and-import floor for comparison.
2. ``serve``: ``numawatch serve --interval 1 --listen 127.0.0.1:<free port>`` (``--stagger K`` when given; else
   serve's default, which re-reads containers' ``memory.numa_stat`` and the IRQ affinities for a rotating quarter of
   them per evaluation); after ``--warmup`` evaluations, the CPU seconds per evaluation are the delta of the
   process's CPU-time clock (``proc_cpu_seconds``) over ``--evaluations`` evaluations,
   counted with ``numawatch_evaluations_total`` from ``/metrics`` (read at the boundaries only: the harness sleeps
   until the last evaluation is due, then polls every 0.1 s, so scrapes add a few ms in all); peak RSS is
   ``VmHWM``; the series count is that of one uncompressed scrape; the scrape latency is measured with 1 and with
   ``--concurrency`` concurrent scrapers (aiohttp, keep-alive, gzip as Prometheus asks, ``--requests`` requests in
   all per run, evaluations still running every second). serve's own ``numawatch_source_duration_seconds`` are
   read after each of five more evaluations for (3).
3. where an evaluation goes, in this process: a ``HostReader`` (warm: fingerprinted sources cached and staggered
   as in serve, ``--stagger`` when given) read ``--evaluations`` times, each followed by the checks, the render and
   the gzip serve does; median milliseconds per source and phase, next to serve's own per-source medians.
4. optionally ``--node-exporter [BINARY]`` (Debian's ``prometheus-node-exporter``; without BINARY the package is
   fetched with ``apt-get download`` and unpacked with ``dpkg -x`` under /tmp/nodeexp, never installed) on the same
   tree through ``--path.procfs/--path.sysfs/--path.rootfs``, on 127.0.0.1, in its two configurations
   (``--collector.disable-defaults`` plus exactly cpu, cpufreq, meminfo_numa and vmstat; then the same with
   interrupts): CPU per scrape (it collects on every scrape; over ``--node-exporter-requests`` scrapes back to back,
   and for the small configuration also over ``--evaluations`` scrapes one per second, serve's pace, which is what
   the closing verdict compares serve's CPU per evaluation with), peak RSS,
   series and scrape latency with 1 and ``--concurrency`` concurrent scrapers. The interrupts configuration on a
   host of 128 CPUs or more (seconds of CPU and GBs of memory per scrape) gets ``--node-exporter-heavy-requests``
   scrapes (4) and at most 4 concurrent scrapers.

With ``--churn`` (off by default, so earlier figures stay reproducible) the tree's counters move between
evaluations as on a busy inference node (bench/churn.py says what moves: /proc/interrupts, every container's
``memory.numa_stat``, /proc/stat, /proc/vmstat, numastat, meminfo, ``scaling_cur_freq``), so that what numawatch
reuses when its inputs did not change is not reused every time: in (3) ``Churn.advance()`` runs before each
evaluation, outside the timed region; for (2) and (4) bench/churn.py runs as a child process advancing the tree every
``SERVE_INTERVAL`` while the program is measured (its CPU is its own: theirs comes from their /proc/<pid>/stat).
One advance stands for ``SERVE_INTERVAL`` of the node (not churn's default 15 s), so serve's rate checks see a
node's rates over their 1 s window and fire as they would there (the planted misrouted NIC vector does, the tick on
nohz_full CPUs does not). In (3) the two readings are only an evaluation apart, so rates there are inflated.
``--stray F`` makes that fraction of device IRQ rows also count on an isolated CPU at each advance. The churn changes
the tree in place (a ``--host`` tree too). ``numawatch check`` is a fresh process every time and is measured on the
tree as it stands.

The report is markdown tables, ending with the side-by-side table (docs/performance.md records it with the
command line and the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import aiohttp  # noqa: E402
import churn as bench_churn  # noqa: E402
import generate_host  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGET_CPU_PER_EVALUATION = 0.2  # seconds, on the 384-CPU host
TARGET_RSS_MB = 80.0
# A whole evaluation costs no more CPU than one node_exporter scrape with its cpu, cpufreq, meminfo_numa
# and vmstat collectors (~80 ms there), with p99 scrape latency under 100 ms for 20 concurrent scrapers.
TARGET_SIDE_BY_SIDE_CPU_PER_EVALUATION = 0.08
TARGET_SIDE_BY_SIDE_P99_MS = 100.0
SERVE_INTERVAL = 1.0  # seconds between serve's evaluations while measuring
_SAMPLE = re.compile(rb"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", re.MULTILINE)
_SOURCE_LABEL = re.compile(rb'source="([^"]*)"')
# The two node_exporter configurations, each run with --collector.disable-defaults and exactly these: "small"
# is the one the CPU target is quoted against; "interrupts" adds one series per /proc/interrupts row and CPU.
NODE_EXPORTER_CONFIGS: dict[str, tuple[str, ...]] = {
    "small": ("cpu", "cpufreq", "meminfo_numa", "vmstat"),
    "interrupts": ("cpu", "cpufreq", "meminfo_numa", "vmstat", "interrupts"),
}
# The interrupts configuration collects 773k series per scrape on the 384-CPU host (seconds of CPU and GBs of
# memory each): from this size on it gets a few scrapes and at most this many concurrent scrapers.
NODE_EXPORTER_HEAVY_CPUS = 128
NODE_EXPORTER_UNPACKED = Path("/tmp/nodeexp")
DEFAULT_NODE_EXPORTER = str(NODE_EXPORTER_UNPACKED / "root/usr/bin/prometheus-node-exporter")
NODE_EXPORTER_HEAVY_CONCURRENCY = 4


# --------------------------------------------------------------------------------------------------- helpers
def numawatch_binary() -> str:
    """The numawatch console script next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("numawatch")
    if beside.exists():
        return str(beside)
    found = shutil.which("numawatch")
    if found is None:
        raise SystemExit("bench/run.py: cannot find the numawatch command (install the package into this venv)")
    return found


def unpack_node_exporter() -> None:
    """Debian's prometheus-node-exporter, downloaded (``apt-get download``) and unpacked with ``dpkg -x`` under
    NODE_EXPORTER_UNPACKED: not installed system-wide, no service started."""
    NODE_EXPORTER_UNPACKED.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", "prometheus-node-exporter"], cwd=NODE_EXPORTER_UNPACKED, check=True)
    packages = sorted(NODE_EXPORTER_UNPACKED.glob("prometheus-node-exporter_*.deb"))
    if not packages:
        raise SystemExit(f"bench/run.py: apt-get download left no prometheus-node-exporter .deb in "
                         f"{NODE_EXPORTER_UNPACKED}")  # fmt: skip
    subprocess.run(["dpkg", "-x", str(packages[-1]), str(NODE_EXPORTER_UNPACKED / "root")], check=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (no interpolation: with 200 samples p99 is the second largest)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * fraction // 1))
    return ordered[int(rank) - 1]


def process_cpu_clock(pid: int) -> int:
    """The clock id of the CPU time of process ``pid``, all its threads, the exited ones included: what
    clock_getcpuclockid(3) returns, MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) in the kernel's
    include/linux/posix-timers.h."""
    return ((~pid) << 3) | 2


def proc_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process (all its threads, the exited ones included), to the nanosecond.

    From the process's CPU-time clock: /proc/<pid>/stat's utime + stime count the same time in clock ticks (10 ms),
    which on a window where an exporter uses 0.3 s is a 3 % step. The ticks are the fallback where the clock cannot
    be read (a kernel refusing another process's clock)."""
    try:
        return time.clock_gettime(process_cpu_clock(pid))
    except OSError:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15, counted after "pid (comm)"


def proc_status_kb(pid: int, key: str) -> int | None:
    with open(f"/proc/{pid}/status", "rb") as handle:
        for line in handle:
            if line.startswith(key.encode() + b":"):
                return int(line.split()[1])
    return None


def samples(body: bytes) -> Iterable[tuple[bytes, bytes, float]]:
    """(name, labels, value) of every sample in a text exposition."""
    for match in _SAMPLE.finditer(body):
        with contextlib.suppress(ValueError):
            yield match.group(1), match.group(2) or b"", float(match.group(3))


def sample_value(body: bytes, name: str) -> float | None:
    wanted = name.encode()
    for sample_name, _labels, value in samples(body):
        if sample_name == wanted:
            return value
    return None


def series_count(body: bytes) -> int:
    return sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))


def revision(tree: Path = BENCH) -> str:
    """The commit of the checkout ``tree`` is in (this bench's by default), and whether its working tree differs from
    it (read-only git commands)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=tree,
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} with uncommitted changes" if dirty else head


def load_average() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def machine_description() -> dict[str, object]:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    os_name = ""
    with contextlib.suppress(OSError), open("/etc/os-release") as handle:
        for line in handle:
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip().strip('"')
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "os": os_name,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "revision": revision(),
    }


# --------------------------------------------------------------------------------------------------- check
@dataclass(frozen=True)
class ChildRun:
    wall_seconds: float
    cpu_seconds: float  # user + sys
    max_rss_mb: float
    returncode: int
    errors: int = 0  # tracebacks and ERROR lines numawatch logged: figures from a broken run are no figures


def logged_errors(text: str) -> int:
    """Tracebacks and error lines in a numawatch log (a check or metric family that crashed); ``level=error`` (or
    ``"level":"error"``) since logs are logfmt, `` ERROR `` in earlier versions' logs."""
    return text.count("Traceback (most recent call last)") + sum(
        " ERROR " in line or "level=error" in line or '"level":"error"' in line for line in text.splitlines())


# Started with ``python -S``; forks (a real fork: the child's memory is a copy of this small process) and execs the
# command, then writes the child's own rusage from wait4 to the file named first. Linux carries the peak RSS of the
# memory a process had before exec into its ru_maxrss (exec_mmap -> setmax_mm_hiwater_rss), and subprocess spawns
# with vfork, sharing this harness's memory: spawned directly, every command would report at least the harness's
# peak RSS. Through this launcher the floor is that of a bare ``python -S`` (~6 MB).
_LAUNCHER = """
import json, os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_pid, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
with open(sys.argv[1], "w") as out:
    json.dump({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss,
               "rc": os.waitstatus_to_exitcode(status)}, out)
"""


def run_child(argv: Sequence[str], stdout_path: str | None = None) -> ChildRun:
    """Run a command and account for it alone (wall, user+sys CPU and peak RSS of that process; see _LAUNCHER)."""
    with (
        open(stdout_path or os.devnull, "wb") as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r", suffix=".json") as usage_file,
    ):
        launcher = [sys.executable, "-S", "-c", _LAUNCHER, usage_file.name, *argv]
        subprocess.run(launcher, stdout=out, stderr=err, check=True)
        usage = json.load(usage_file)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        if usage["rc"] not in (0, 1):
            raise RuntimeError(f"{' '.join(argv)} exited {usage['rc']}: {stderr[-2000:]}")
    return ChildRun(usage["wall"], usage["cpu"], usage["maxrss_kb"] / 1024, usage["rc"], logged_errors(stderr))


def measure_check(binary: str, root: str, runs: int) -> dict[str, object]:
    floor = run_child([binary, "--version"])
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        report = f"{scratch}/check.json"
        for _ in range(runs):
            results.append(run_child([binary, "check", "--host-root", root, "--format", "json"], report))
        with open(report, "rb") as handle:
            document = json.load(handle)
    internal = [item for item in document.get("not_evaluated", ()) if "internal error" in item.get("reason", "")]
    internal += [item for item in document.get("sources", ()) if "internal error" in item.get("reason", "")]
    return {
        "runs": runs,
        "wall_seconds": median([r.wall_seconds for r in results]),
        "cpu_seconds": median([r.cpu_seconds for r in results]),
        "cpu_seconds_all": [round(r.cpu_seconds, 3) for r in results],
        "max_rss_mb": max(r.max_rss_mb for r in results),
        "exit_code": results[-1].returncode,
        "findings": len(document.get("findings", ())),
        "checks_fired": sorted({finding["check"] for finding in document.get("findings", ())}),
        "startup_cpu_seconds": floor.cpu_seconds,
        "startup_max_rss_mb": floor.max_rss_mb,
        "errors": sum(r.errors for r in results) + len(internal),
    }


# --------------------------------------------------------------------------------------------------- servers
class Server:
    """A server subprocess on 127.0.0.1:<port>, stopped with SIGTERM on exit."""

    def __init__(self, argv: Sequence[str], port: int) -> None:
        self.argv = list(argv)
        self.port = port
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.stack = contextlib.ExitStack()
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.log = self.stack.enter_context(tempfile.TemporaryFile())
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.log)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def wait_for_line(self, needle: bytes, timeout: float) -> None:
        """Wait until the server prints a line containing ``needle`` on stdout."""
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + timeout
        buffer = b""
        while needle not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or self.process.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} did not start: {self.stderr()}")
            readable, _, _ = select.select([self.process.stdout], [], [], left)
            if readable:
                buffer += os.read(self.process.stdout.fileno(), 4096)

    def wait_for_log(self, needle: bytes, timeout: float) -> None:
        """Wait until the server logs a line containing ``needle`` (on stderr, which goes to ``self.log``)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while True:
            self.log.seek(0)
            if needle in self.log.read():
                return
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} did not start: {self.stderr()}")
            time.sleep(0.05)

    def stderr(self, limit: int = 2000) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-limit:]

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.stack.close()


async def fetch(session: aiohttp.ClientSession, url: str, *, compressed: bool = True) -> tuple[float, bytes]:
    """(seconds until the whole body arrived, body as sent)."""
    headers = {"Accept-Encoding": "gzip" if compressed else "identity"}
    start = time.perf_counter()
    async with session.get(url, headers=headers) as response:
        body = await response.read()
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}: {body[:200]!r}")
    return time.perf_counter() - start, body


def _session() -> aiohttp.ClientSession:
    # No decompression in the client: the latency is the server's, not this harness's gunzip.
    return aiohttp.ClientSession(
        auto_decompress=False,
        connector=aiohttp.TCPConnector(limit=1),
        timeout=aiohttp.ClientTimeout(total=60),
    )


async def scrape_latencies(url: str, scrapers: int, requests: int) -> dict[str, float | int | None]:
    """``requests`` scrapes shared among ``scrapers`` concurrent clients, each on its own keep-alive connection."""
    per_scraper = max(1, requests // scrapers)
    timings: list[float] = []

    async def scraper() -> None:
        async with _session() as session:
            for _ in range(per_scraper):
                seconds, _body = await fetch(session, url)
                timings.append(seconds)

    started = time.perf_counter()
    await asyncio.gather(*(scraper() for _ in range(scrapers)))
    elapsed = time.perf_counter() - started
    return {
        "scrapers": scrapers,
        "requests": len(timings),
        "p50_ms": _ms(percentile(timings, 0.50)),
        "p99_ms": _ms(percentile(timings, 0.99)),
        "max_ms": _ms(max(timings)),
        "scrapes_per_second": round(len(timings) / elapsed, 1),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


async def _measure_serve(
    server: Server, interval: float, warmup: int, evaluations: int, requests: int, concurrency: int
) -> dict:
    url = server.url
    source_durations: dict[str, list[float]] = {}

    async with _session() as session:

        async def count() -> tuple[int, bytes]:
            _seconds, body = await fetch(session, url)
            text = gzip.decompress(body)
            value = sample_value(text, "numawatch_evaluations_total")
            return (int(value) if value is not None else 0), text

        async def until(target: int, timeout: float) -> bytes:
            deadline = time.monotonic() + timeout
            while True:
                with contextlib.suppress(RuntimeError):  # 503 until the first evaluation is done
                    seen, text = await count()
                    if seen >= target:
                        return text
                if time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not reach {target} evaluations in {timeout:.0f}s")
                await asyncio.sleep(0.1)

        def keep_durations(text: bytes) -> None:
            for name, labels, value in samples(text):
                if name == b"numawatch_source_duration_seconds":
                    label = _SOURCE_LABEL.search(labels)
                    if label:
                        source_durations.setdefault(label.group(1).decode(), []).append(value)

        text = await until(warmup, 300)
        # Start on a fresh boundary: polled every 0.1 s, the count is seen to move right after an evaluation.
        text = await until(int(sample_value(text, "numawatch_evaluations_total") or 0) + 1, 120)
        start_count = int(sample_value(text, "numawatch_evaluations_total") or 0)
        start_cpu = proc_cpu_seconds(server.pid)
        start_sum = sample_value(text, "numawatch_evaluation_duration_seconds_sum") or 0.0
        # Then leave the server alone until the last evaluation is due, so polling adds next to nothing to its CPU.
        await asyncio.sleep(max(0.0, (evaluations - 0.5) * interval))
        text = await until(start_count + evaluations, 120)
        cpu = proc_cpu_seconds(server.pid) - start_cpu  # right after the count moved: the next one has not begun
        done = int(sample_value(text, "numawatch_evaluations_total") or 0) - start_count
        wall_sum = (sample_value(text, "numawatch_evaluation_duration_seconds_sum") or 0.0) - start_sum
        # Serve's own per-source durations, one reading per evaluation for a few more evaluations.
        seen = start_count + done
        for _ in range(min(evaluations, 5)):
            text = await until(seen + 1, 120)
            seen = int(sample_value(text, "numawatch_evaluations_total") or 0)
            keep_durations(text)
        _seconds, plain = await fetch(session, url, compressed=False)
        _seconds, packed = await fetch(session, url, compressed=True)

    single = await scrape_latencies(url, 1, requests)
    crowd = await scrape_latencies(url, concurrency, requests)
    return {
        "evaluations": done,
        "cpu_seconds_per_evaluation": cpu / done,
        "wall_seconds_per_evaluation": wall_sum / done,
        "vm_hwm_mb": (proc_status_kb(server.pid, "VmHWM") or 0) / 1024,
        "vm_rss_mb": (proc_status_kb(server.pid, "VmRSS") or 0) / 1024,
        "series": series_count(plain),
        "body_kb": round(len(plain) / 1024, 1),
        "body_gzip_kb": round(len(packed) / 1024, 1),
        "scrape_1": single,
        "scrape_many": crowd,
        "source_seconds": {name: median(values) for name, values in sorted(source_durations.items())},
    }


@contextlib.contextmanager
def churning(root: str, churn: bool, stray: float = 0.0, pods: float = 0.0, pinned_every: int = 0) -> Iterator[None]:
    """With ``churn``, bench/churn.py in a child process advancing the tree under ``root`` every ``SERVE_INTERVAL``
    until the block ends (a child, not a thread: this harness's GIL would slow the scrapers' event loop, and its CPU
    shows in no measured program's /proc/<pid>/stat); ``pods`` and ``pinned_every`` also replace pods at each
    advance (bench/pod_churn.py). The block starts once the child has read the tree."""
    if not churn:
        yield
        return
    argv = [sys.executable, str(BENCH / "churn.py"), "--root", root, "--every", str(SERVE_INTERVAL),
            "--seconds", str(SERVE_INTERVAL), "--stray", str(stray), "--pods", str(pods),
            "--pinned-every", str(pinned_every)]  # fmt: skip
    with Server(argv, 0) as mover:  # no port: Server is only the start / wait-for-a-line / SIGTERM here
        mover.wait_for_line(b"churning", 300)
        yield
        if mover.process is not None and mover.process.poll() is not None:
            raise RuntimeError(f"bench/churn.py stopped while measuring: {mover.stderr()}")


def measure_serve(
    binary: str,
    root: str,
    *,
    warmup: int,
    evaluations: int,
    requests: int,
    concurrency: int,
    stagger: int | None,
    churn: bool = False,
    stray: float = 0.0,
    pods: float = 0.0,
    pinned_every: int = 0,
) -> dict:
    """serve's CPU per evaluation, memory, series and scrape latency; with ``churn`` the tree's counters (and with
    ``pods``/``pinned_every`` its pods) move every ``SERVE_INTERVAL`` meanwhile (``churning``)."""
    port = free_port()
    # info: the "Listening on" line is what the harness waits for; serve logs little else at info (a summary when the
    # number of findings changes).
    argv = [binary, "serve", "--host-root", root, "--interval", str(SERVE_INTERVAL), "--web.listen-address",
            f"127.0.0.1:{port}", "--log.level", "info"]  # fmt: skip
    if stagger is not None:
        argv += ["--stagger", str(stagger)]
    with churning(root, churn, stray, pods, pinned_every), Server(argv, port) as server:
        server.wait_for_log(b'msg="Listening on"', 60)
        result = asyncio.run(_measure_serve(server, SERVE_INTERVAL, warmup, evaluations, requests, concurrency))
        result["errors"] = logged_errors(server.stderr(limit=1 << 24))
    result["churn"], result["stray"] = churn, stray if churn else 0.0
    return result


async def _measure_node_exporter(
    server: Server, scrapes: int, requests: int, concurrency: int, paced_scrapes: int = 0
) -> dict:
    url = server.url
    async with _session() as session:
        deadline = time.monotonic() + 30
        while True:
            try:
                await fetch(session, url)
                break
            except (aiohttp.ClientError, RuntimeError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node_exporter did not answer: {server.stderr()}") from None
                await asyncio.sleep(0.2)
        start_cpu = proc_cpu_seconds(server.pid)
        for _ in range(scrapes):
            await fetch(session, url)
        cpu = proc_cpu_seconds(server.pid) - start_cpu
        # The same scrapes at serve's pace: one every SERVE_INTERVAL, as serve evaluates once per interval. After an
        # idle interval a run costs more than back to back (cold caches; on a VM, memory the host took back), so
        # this, not the back-to-back figure, is what serve's CPU per evaluation compares with.
        paced = None
        if paced_scrapes:
            await asyncio.sleep(SERVE_INTERVAL)
            start_paced = proc_cpu_seconds(server.pid)
            for _ in range(paced_scrapes):
                began = time.monotonic()
                await fetch(session, url)
                await asyncio.sleep(max(0.0, SERVE_INTERVAL - (time.monotonic() - began)))
            paced = (proc_cpu_seconds(server.pid) - start_paced) / paced_scrapes
        _seconds, plain = await fetch(session, url, compressed=False)
        _seconds, packed = await fetch(session, url, compressed=True)
    single = await scrape_latencies(url, 1, requests)
    # Every concurrent scraper makes at least one request: fewer requests than scrapers would measure fewer scrapers.
    crowd = await scrape_latencies(url, concurrency, max(requests, concurrency))
    return {
        "scrapes": scrapes,
        "cpu_seconds_per_scrape": cpu / scrapes,
        "paced_scrapes": paced_scrapes,
        "cpu_seconds_per_paced_scrape": paced,
        "vm_hwm_mb": (proc_status_kb(server.pid, "VmHWM") or 0) / 1024,
        "series": series_count(plain),
        "body_kb": round(len(plain) / 1024, 1),
        "body_gzip_kb": round(len(packed) / 1024, 1),
        "scrape_1": single,
        "scrape_many": crowd,
    }


def measure_node_exporter(
    binary: str,
    root: str,
    collectors: Sequence[str],
    *,
    scrapes: int,
    requests: int,
    concurrency: int,
    churn: bool = False,
    stray: float = 0.0,
    paced_scrapes: int = 0,
) -> dict:
    """node_exporter's CPU per scrape, back to back and (``paced_scrapes`` > 0) one scrape per ``SERVE_INTERVAL``,
    memory, series and scrape latency; with ``churn`` the tree's counters move every ``SERVE_INTERVAL`` meanwhile
    (``churning``)."""
    port = free_port()
    argv = [
        binary,
        f"--path.procfs={root}/proc",
        f"--path.sysfs={root}/sys",
        f"--path.rootfs={root}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--collector.disable-defaults",
        *(f"--collector.{name}" for name in collectors),
    ]
    with churning(root, churn, stray), Server(argv, port) as server:
        result = asyncio.run(_measure_node_exporter(server, scrapes, requests, concurrency, paced_scrapes))
    result["collectors"] = list(collectors)
    result["churn"], result["stray"] = churn, stray if churn else 0.0
    return result


# --------------------------------------------------------------------------------------------------- in-process
def serve_reader(root: str, stagger: int | None = None):
    """A HostReader as ``numawatch serve`` makes it: staggered by ``stagger``, else by serve's default. Code from
    before staggered readings existed (measured through PYTHONPATH) gets a plain reader."""
    from numawatch import cli
    from numawatch.host import HostReader
    from numawatch.paths import Paths

    share = stagger if stagger is not None else getattr(cli, "DEFAULT_STAGGER", 1)
    return HostReader(Paths.from_root(root), **({"stagger": share} if share != 1 else {}))


def measure_in_process(
    root: str, evaluations: int, stagger: int | None = None, churn: bool = False, stray: float = 0.0
) -> dict[str, object]:
    """Median milliseconds per source (warm HostReader, as serve keeps it), checks, render and gzip. With ``churn``,
    ``Churn.advance()`` moves the tree's counters on by ``SERVE_INTERVAL`` of the node before each evaluation,
    outside the timed region (its own wall time is ``advance_ms``)."""
    from numawatch import metrics
    from numawatch.checks import evaluate
    from numawatch.intent import REFERENCE

    mover = bench_churn.Churn(root, stray=stray, seconds=SERVE_INTERVAL) if churn else None
    advances: list[float] = []
    reader = serve_reader(root, stagger)
    reader.read()  # fill the fingerprint caches, as serve's first evaluation does
    stats = metrics.EvaluationStats()
    # serve's renderer (reuses unchanged rows' lines); code from before it existed renders from scratch.
    render = metrics.Renderer().render if hasattr(metrics, "Renderer") else metrics.render
    phases: dict[str, list[float]] = {}
    sources: dict[str, list[float]] = {}
    cached: dict[str, bool] = {}
    for _ in range(evaluations):
        if mover is not None:
            advances.append(mover.advance().seconds)
        t0 = time.process_time()
        host = reader.read()
        t1 = time.process_time()
        evaluation = evaluate(host, REFERENCE)
        t2 = time.process_time()
        body = render(evaluation, stats)
        t3 = time.process_time()
        gzip.compress(body, compresslevel=1)
        t4 = time.process_time()
        for name, value in (("read", t1 - t0), ("checks", t2 - t1), ("render", t3 - t2), ("gzip", t4 - t3),
                            ("total", t4 - t0)):  # fmt: skip
            phases.setdefault(name, []).append(value)
        for status in host.statuses.values():
            sources.setdefault(status.name, []).append(status.duration_seconds)
            cached[status.name] = status.cached
    return {
        "evaluations": evaluations,
        "stagger": getattr(reader, "stagger", 1),
        "phase_ms": {name: round(median(values) * 1000, 2) for name, values in phases.items()},
        "source_ms": {name: round(median(values) * 1000, 2) for name, values in sources.items()},
        "source_cached": cached,
        "churn": churn,
        "stray": stray if churn else 0.0,
        "advance_ms": round(median(advances) * 1000, 2) if advances else None,
    }


# --------------------------------------------------------------------------------------------------- driver
@dataclass
class SizeResult:
    cpus: int
    host: dict[str, object]
    check: dict[str, object] = field(default_factory=dict)
    serve: dict[str, object] = field(default_factory=dict)
    in_process: dict[str, object] = field(default_factory=dict)
    node_exporter: dict[str, dict[str, object]] = field(default_factory=dict)  # by NODE_EXPORTER_CONFIGS name
    churn: dict[str, object] = field(default_factory=dict)  # churn_settings(): whether the counters moved


def host_summary(root: str) -> dict[str, object]:
    """What is in a tree not made here (``--host``): counted from the files numawatch reads."""
    proc = Path(root) / "proc"
    interrupts = proc / "interrupts"
    data = interrupts.read_bytes() if interrupts.exists() else b""  # procfs reports size 0: count what is read
    lines = data.split(b"\n")
    return {
        "root": root,
        "online_cpus": lines[0].count(b"CPU"),
        "irqs": sum(1 for line in lines[1:] if line.split(b":", 1)[0].strip().isdigit()),
        "processes": sum(1 for entry in os.listdir(proc) if entry.isdigit()) if proc.is_dir() else 0,
        "interrupts_bytes": len(data),
    }


def churn_settings(churn: bool, stray: float) -> dict[str, object]:
    """What the JSON and markdown say about the counters moving (bench/churn.py) or not."""
    if not churn:
        return {"enabled": False, "stray": 0.0}
    return {"enabled": True, "stray": stray, "every_seconds": SERVE_INTERVAL,
            "node_seconds_per_advance": SERVE_INTERVAL}  # fmt: skip


def run_size(args: argparse.Namespace, binary: str, cpus: int | None, work: str) -> SizeResult:
    if args.host:
        root = args.host
        summary = host_summary(root)
    else:
        root = f"{work}/host-{cpus}"
        spec = generate_host.HostSpec.scaled(cpus, seed=args.seed)
        found = generate_host.generate(root, spec)
        summary = {key: value for key, value in asdict(found).items() if key != "spec"}
        summary["planted"] = list(found.planted)
    size = int(summary.get("online_cpus") or cpus or 0)
    log(f"[{size} CPUs] host at {root}: {json.dumps({k: v for k, v in summary.items() if k != 'root'})}")
    result = SizeResult(size, summary, churn=churn_settings(args.churn, args.stray))
    log(f"[{size} CPUs] check x{args.checks}")
    result.check = measure_check(binary, root, args.checks)
    moving = f", counters moving (stray {args.stray})" if args.churn else ""
    log(f"[{size} CPUs] serve: {args.warmup} warm-up + {args.evaluations} evaluations, scrapes{moving}")
    result.serve = measure_serve(binary, root, warmup=args.warmup, evaluations=args.evaluations,
                                 requests=args.requests, concurrency=args.concurrency,
                                 stagger=args.stagger, churn=args.churn, stray=args.stray)  # fmt: skip
    log(f"[{size} CPUs] in-process breakdown x{args.evaluations}{moving}")
    result.in_process = measure_in_process(root, args.evaluations, args.stagger, args.churn, args.stray)
    if args.node_exporter:
        for config, collectors in NODE_EXPORTER_CONFIGS.items():
            if config == "interrupts" and size >= NODE_EXPORTER_HEAVY_CPUS:
                # Seconds of CPU and GBs of memory per scrape here: a few scrapes, a few concurrent scrapers.
                requests = min(args.node_exporter_requests, args.node_exporter_heavy_requests)
                concurrency = min(args.concurrency, NODE_EXPORTER_HEAVY_CONCURRENCY, requests)
            else:
                requests = args.node_exporter_requests
                concurrency = args.concurrency
            # CPU over as many scrapes as the latency runs make: /proc/<pid>/stat counts 10 ms ticks, and a small
            # scrape costs a few ms.
            scrapes = requests
            log(f"[{size} CPUs] node_exporter {config} ({','.join(collectors)}): {scrapes} scrapes for CPU, "
                f"{requests} with 1 and {max(requests, concurrency)} with {concurrency} concurrent scrapers{moving}")
            result.node_exporter[config] = measure_node_exporter(
                args.node_exporter, root, collectors, scrapes=scrapes, requests=requests, concurrency=concurrency,
                churn=args.churn, stray=args.stray,
                paced_scrapes=args.evaluations if config == "small" else 0,
            )  # fmt: skip
    return result


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------- report
def _f(value: object, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _latency(scrape: dict) -> str:
    return f"{_f(scrape['p50_ms'], 2)} / {_f(scrape['p99_ms'], 2)} ({scrape['scrapers']} x {scrape['requests']})"


def _growth(small: object, large: object) -> str:
    if not isinstance(small, (int, float)) or not isinstance(large, (int, float)) or not small:
        return "–"
    return f"x{large / small:.1f}"


def side_by_side(results: list[SizeResult]) -> list[str]:
    """The side-by-side table: numawatch serve per evaluation next to node_exporter per scrape, both configurations."""
    lines = [
        "**Side by side** (numawatch `serve --interval 1`: CPU per evaluation; prometheus-node-exporter with "
        "`--collector.disable-defaults` and the collectors named: CPU per scrape, since it collects on every scrape; "
        "latencies with gzip, (scrapers x requests)):",
        "",
        "| host | exporter | CPU s / evaluation or scrape | peak RSS MB | series | body KB (gzip) "
        "| scrape p50 / p99 ms, 1 scraper | scrape p50 / p99 ms, concurrent |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows: dict[str, list[tuple[int, dict]]] = {}
    for r in results:
        s = r.serve
        numawatch = {"cpu": s["cpu_seconds_per_evaluation"], "rss": s["vm_hwm_mb"], "series": s["series"],
                     "body": s["body_kb"], "gzip": s["body_gzip_kb"], "one": s["scrape_1"],
                     "many": s["scrape_many"]}  # fmt: skip
        rows.setdefault("numawatch", []).append((r.cpus, numawatch))
        lines.append(_side_row(r.cpus, "numawatch serve", numawatch))
        for config, n in r.node_exporter.items():
            entry = {"cpu": n["cpu_seconds_per_scrape"], "rss": n["vm_hwm_mb"], "series": n["series"],
                     "body": n["body_kb"], "gzip": n["body_gzip_kb"], "one": n["scrape_1"],
                     "many": n["scrape_many"]}  # fmt: skip
            rows.setdefault(config, []).append((r.cpus, entry))
            label = f"node_exporter {'+'.join(n.get('collectors', NODE_EXPORTER_CONFIGS[config]))}"
            lines.append(_side_row(r.cpus, label, entry))
    if len(results) > 1:
        first, last = results[0].cpus, results[-1].cpus
        for name, found in rows.items():
            by_size = dict(found)
            if first not in by_size or last not in by_size:
                continue
            a, b = by_size[first], by_size[last]
            label = "numawatch serve" if name == "numawatch" else f"node_exporter {name}"
            lines.append(
                f"| growth {first} -> {last} CPUs | {label} | {_growth(a['cpu'], b['cpu'])} "
                f"| {_growth(a['rss'], b['rss'])} | {_growth(a['series'], b['series'])} "
                f"| {_growth(a['body'], b['body'])} | {_growth(a['one']['p50_ms'], b['one']['p50_ms'])} "
                f"| {_growth(a['many']['p50_ms'], b['many']['p50_ms'])} |"
            )
    for r in results:
        small = r.node_exporter.get("small")
        if small:
            lines += ["", headline(r.cpus, r.serve["cpu_seconds_per_evaluation"], small)]
    return lines


def headline(cpus: int, serve_cpu: float, small: dict) -> str:
    """The side-by-side verdict: serve's CPU per evaluation at its 1 s interval against node_exporter's per scrape at
    the same pace (like against like: both pay what an idle second costs), with the back-to-back scrape for reference.
    Results from before the paced figure existed compare with the back-to-back one, and say so."""
    collectors = ", ".join(NODE_EXPORTER_CONFIGS["small"])
    back_to_back = small["cpu_seconds_per_scrape"]
    paced = small.get("cpu_seconds_per_paced_scrape")
    theirs, how = (paced, f"one scrape per {SERVE_INTERVAL:g} s") if paced else (back_to_back, "back to back")
    verdict = "at or under" if serve_cpu <= theirs else "ABOVE"
    text = (f"{cpus} CPUs: numawatch {serve_cpu:.3f} s CPU per evaluation (one per {SERVE_INTERVAL:g} s), {verdict} "
            f"node_exporter's {theirs:.3f} s per scrape with {collectors}, {how} (ratio {serve_cpu / theirs:.2f})")
    if paced:
        text += f"; back to back node_exporter costs {back_to_back:.3f} s per scrape"
    return text + "."


def _side_row(cpus: int, label: str, e: dict) -> str:
    return (
        f"| {cpus} CPUs | {label} | {_f(e['cpu'])} | {_f(e['rss'], 1)} | {e['series']} | {e['body']} ({e['gzip']}) "
        f"| {_latency(e['one'])} | {_latency(e['many'])} |"
    )


def churn_line(results: list[SizeResult]) -> str:
    """Which mode ran: counters moving between evaluations (bench/churn.py) or a static tree."""
    settings = results[0].churn if results else {}
    if not settings.get("enabled"):
        return ("Counters moving between evaluations: **no** (the tree is static: whatever numawatch reuses when its "
                "inputs did not change is reused at every evaluation; `--churn` moves them).")  # fmt: skip
    return (
        f"Counters moving between evaluations: **yes** (bench/churn.py: {settings['node_seconds_per_advance']:g} s "
        f"of a busy inference node per advance, before each in-process evaluation and every "
        f"{settings['every_seconds']:g} s in a child process while serve and node_exporter are measured; device "
        f"IRQ rows also counting on an isolated CPU: {float(settings['stray']):.0%})."
    )


def markdown(results: list[SizeResult], machine: dict[str, object], command: str, concurrency: int) -> str:
    lines = [
        f"Command: `{command}`",
        "",
        f"Machine: {machine['cpus']} vCPU {machine['cpu_model']}, {machine['os']}, Linux {machine['kernel']}, "
        f"Python {machine['python']}; load average {machine['load_average']}. numawatch at {machine['revision']}.",
        "",
        churn_line(results),
        "",
        "| host | online CPUs | pods | container cgroups | IRQs | processes | /proc/interrupts |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        h = r.host
        lines.append(
            f"| {r.cpus} CPUs | {h.get('online_cpus', '–')} | {h.get('pods', '–')} | {h.get('container_cgroups', '–')} "
            f"| {h.get('irqs', '–')} | {h.get('processes', '–')} | {int(h.get('interrupts_bytes', 0)) / 1e6:.1f} MB |"
        )
    lines += [
        "",
        "**`numawatch check`** (one fresh process; median of the runs, peak RSS the largest):",
        "",
        "| host | wall s | CPU s (user+sys) | peak RSS MB | findings (exit) | `--version` CPU s / RSS MB |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.check
        floor = f"{_f(c['startup_cpu_seconds'])} / {_f(c['startup_max_rss_mb'], 1)}"
        lines.append(
            f"| {r.cpus} CPUs | {_f(c['wall_seconds'])} | {_f(c['cpu_seconds'])} | {_f(c['max_rss_mb'], 1)} "
            f"| {c['findings']} ({c['exit_code']}) | {floor} |"
        )
    lines += [
        "",
        "**`numawatch serve --interval 1`** (per evaluation after warm-up; the wall time is serve's own "
        "`numawatch_evaluation_duration_seconds`, reading and checks without the render; scrapes with gzip while "
        "evaluations run):",
        "",
        f"| host | CPU s / evaluation | wall s / evaluation | peak RSS MB (VmHWM) | series | body KB (gzip) "
        f"| scrape p50 / p99 ms, 1 scraper | scrape p50 / p99 ms, {concurrency} scrapers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r.serve
        one, many = s["scrape_1"], s["scrape_many"]
        lines.append(
            f"| {r.cpus} CPUs | {_f(s['cpu_seconds_per_evaluation'])} | {_f(s['wall_seconds_per_evaluation'])} "
            f"| {_f(s['vm_hwm_mb'], 1)} | {s['series']} | {s['body_kb']} ({s['body_gzip_kb']}) "
            f"| {_f(one['p50_ms'], 2)} / {_f(one['p99_ms'], 2)} | {_f(many['p50_ms'], 2)} / {_f(many['p99_ms'], 2)} |"
        )
    lines += [
        "",
        "**Where an evaluation goes** (ms, median; in-process with a warm HostReader as serve keeps it, stagger "
        f"{'/'.join(sorted({str(r.in_process.get('stagger', 1)) for r in results}))}: CPU time per "
        "phase, wall time per source; `serve` = that source's median `numawatch_source_duration_seconds` in the "
        "server; (c) = reused from the fingerprint cache):",
        "",
        "| part | " + " | ".join(f"{r.cpus} CPUs | {r.cpus} CPUs, serve" for r in results) + " |",
        "|---|" + "---|---|" * len(results),
    ]
    names: list[str] = []
    for r in results:
        for name in r.in_process["source_ms"]:
            if name not in names:
                names.append(name)
    for name in names:
        cells = []
        for r in results:
            ms = r.in_process["source_ms"].get(name)
            mark = " (c)" if r.in_process["source_cached"].get(name) else ""
            served = r.serve["source_seconds"].get(name)
            cells += [f"{_f(ms, 2)}{mark}", _f(None if served is None else served * 1000, 2)]
        lines.append(f"| source `{name}` | " + " | ".join(cells) + " |")
    for phase in ("read", "checks", "render", "gzip", "total"):
        cells = []
        for r in results:
            cells += [_f(r.in_process["phase_ms"].get(phase), 2), ""]
        label = {"read": "all sources (CPU)", "checks": "checks (evaluate)", "render": "render /metrics",
                 "gzip": "gzip", "total": "**total CPU**"}[phase]  # fmt: skip
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if any(r.node_exporter for r in results):
        lines += ["", *side_by_side(results)]
    broken = [r for r in results if r.check.get("errors") or r.serve.get("errors")]
    for r in broken:
        lines += ["", f"**WARNING**: numawatch logged errors on the {r.cpus}-CPU host (check: {r.check.get('errors')}, "
                  f"serve: {r.serve.get('errors')}): these figures are not those of a working numawatch."]
    big = [r for r in results if r.cpus >= 384]
    if big:
        r = big[-1]
        cpu = r.serve["cpu_seconds_per_evaluation"]
        rss = max(r.serve["vm_hwm_mb"], r.check["max_rss_mb"])
        p99 = r.serve["scrape_many"]["p99_ms"]
        scrapers = r.serve["scrape_many"]["scrapers"]
        lines += [
            "",
            f"Targets on the {r.cpus}-CPU host: CPU per evaluation {cpu:.3f} s "
            f"({'met' if cpu < TARGET_CPU_PER_EVALUATION else 'NOT met'}, target < {TARGET_CPU_PER_EVALUATION} s; "
            f"side by side: {'met' if cpu <= TARGET_SIDE_BY_SIDE_CPU_PER_EVALUATION else 'NOT met'}, "
            f"target <= {TARGET_SIDE_BY_SIDE_CPU_PER_EVALUATION} s); "
            f"peak RSS {rss:.1f} MB ({'met' if rss < TARGET_RSS_MB else 'NOT met'}, target < {TARGET_RSS_MB:.0f} MB); "
            f"scrape p99 with {scrapers} scrapers {_f(p99, 2)} ms "
            f"({'met' if p99 is not None and p99 < TARGET_SIDE_BY_SIDE_P99_MS else 'NOT met'}, "
            f"target < {TARGET_SIDE_BY_SIDE_P99_MS:.0f} ms); {r.serve['series']} series.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="384", help="comma-separated CPU counts to generate (default: 384)")
    parser.add_argument("--host", metavar="DIR", help="measure this existing host root instead of generating")
    parser.add_argument("--work", metavar="DIR", help="where to generate the trees (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the generated trees")
    parser.add_argument("--seed", type=int, default=1, help="generator seed (default: 1)")
    parser.add_argument("--checks", type=int, default=3, help="numawatch check runs per size (default: 3)")
    parser.add_argument("--warmup", type=int, default=2, help="serve evaluations before measuring (default: 2)")
    parser.add_argument("--evaluations", type=int, default=10, help="evaluations measured per size (default: 10)")
    parser.add_argument("--requests", type=int, default=200, help="scrapes per latency run (default: 200)")
    parser.add_argument("--concurrency", type=int, default=20, help="concurrent scrapers (default: 20)")
    parser.add_argument("--stagger", type=int, default=None, metavar="K",
                        help="serve's --stagger, also for the in-process breakdown (default: serve's own; 1 reads "
                             "everything every evaluation)")  # fmt: skip
    parser.add_argument("--node-exporter", metavar="BINARY", nargs="?", const=DEFAULT_NODE_EXPORTER,
                        help="also measure this node_exporter on each tree; without BINARY, Debian's package unpacked "
                        f"at {DEFAULT_NODE_EXPORTER} (apt-get download + dpkg -x there when missing)")
    parser.add_argument("--node-exporter-requests", type=int, default=100, metavar="N",
                        help="scrapes per node_exporter latency run (it collects on every scrape; default: 100)")
    parser.add_argument("--node-exporter-heavy-requests", type=int, default=4, metavar="N",
                        help=f"the same for the interrupts configuration on hosts of {NODE_EXPORTER_HEAVY_CPUS} "
                        f"CPUs or more, where a scrape takes seconds (default: 4, at most "
                        f"{NODE_EXPORTER_HEAVY_CONCURRENCY} concurrent)")
    bench_churn.add_churn_arguments(parser, "between evaluations")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of markdown")
    parser.add_argument("--json-out", metavar="FILE", help="also write the JSON results to FILE")
    args = parser.parse_args(argv)
    if not 0.0 <= args.stray <= 1.0:
        parser.error(f"--stray {args.stray}: a fraction between 0 and 1")
    if args.stray and not args.churn:
        parser.error("--stray needs --churn")
    sizes = [None] if args.host else [int(size) for size in args.sizes.split(",") if size.strip()]
    binary = numawatch_binary()
    if args.node_exporter == DEFAULT_NODE_EXPORTER and not Path(DEFAULT_NODE_EXPORTER).exists():
        unpack_node_exporter()
    if args.node_exporter and shutil.which(args.node_exporter) is None:
        parser.error(f"--node-exporter {args.node_exporter}: not an executable")
    work = "" if args.host else args.work or tempfile.mkdtemp(prefix="numawatch-bench-")
    load_before = load_average()
    results = []
    try:
        for cpus in sizes:
            results.append(run_size(args, binary, cpus, work))
    finally:
        if work and not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
        elif work and not args.keep:
            for cpus in sizes:  # a --work directory given by the user stays; the trees made in it go
                shutil.rmtree(f"{work}/host-{cpus}", ignore_errors=True)
    machine = machine_description() | {"load_average": f"{load_before} before, {load_average()} after"}
    document = json.dumps({"machine": machine, "argv": sys.argv, "churn": churn_settings(args.churn, args.stray),
                           "results": [asdict(r) for r in results]}, indent=2)  # fmt: skip
    if args.json_out:
        Path(args.json_out).write_text(document + "\n")
    if args.json:
        print(document)
    else:
        command = " ".join(["python", "bench/run.py", *(argv if argv is not None else sys.argv[1:])])
        print(markdown(results, machine, command, args.concurrency), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
