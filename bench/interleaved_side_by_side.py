"""numawatch serve and node_exporter at the same pace, at the same time, interleaved: the cold-against-cold pair.

    python bench/generate_host.py --out /tmp/host384 --cpus 384
    python bench/interleaved_side_by_side.py --host /tmp/host384 --pace 1 --window 60 --rounds 3
    python bench/interleaved_side_by_side.py --host /tmp/host384 --pace 15 --window 300   # production's pace

Why: after an idle second an evaluation (or a scrape) on this benchmark VM costs 2-4 times what one run back to back
costs, and how much more moves from one minute to the next (other tenants, the host's caches), so two cold figures
taken a minute apart (bench/paced_side_by_side.py) can differ by half. Here both run in the same minutes: serve
evaluates every ``--pace`` seconds (``--interval``) and node_exporter (Debian's 1.5.0, the small configuration: cpu,
cpufreq, meminfo_numa, vmstat; gzip asked for) is scraped every ``--pace`` seconds, half a pace after each evaluation
starts, so they seldom overlap and see the same conditions. serve is scraped right after, as Prometheus scrapes it
(its Accept header, gzip): serve writes a body only in the formats scraped, so an unscraped serve would be measured
without its exposition. Each exporter is scraped over one kept-alive connection, made before the window, as
Prometheus keeps its connection to a target between scrapes (``Scraper``; before 2026-12-06 every scrape opened a new
one, which cost serve about 0.3 ms more a scrape after an idle second and node_exporter no measurable amount). CPU
seconds over the window (the process's CPU-time clock, to the nanosecond; before 2026-12-06 16:00 UTC
``/proc/<pid>/stat``'s utime+stime, in 10-ms ticks, a 3 % step on host32's window), divided by serve's
``numawatch_evaluations_total`` delta and by the scrapes taken. Each round starts both processes afresh.

``--hot-files``: the tree's files are regular page-cache files, and on this VM a page-cache page left idle for 15 s
costs ~20 us to touch again (the host takes idle guest memory back), so at a 15 s pace both exporters mostly pay for
the tree rather than for their own work: on the 384-CPU tree an in-process evaluation after 15 s idle cost 81-277 ms
with the tree cold and 29-62 ms with it freshly read by another process (26-33 ms back to back; see
bench/idle_file_pages.py). A real node's /proc, /sys
and cgroupfs have no page cache; the kernel generates them on each read. With ``--hot-files`` this script reads every
file of the tree outside /proc/<pid> (34k on the 384-CPU tree) just before each evaluation and each scrape, in its own
process, whose CPU counts for neither: what is left of the idle penalty is each exporter's own memory. Serve's
evaluations are placed from ``numawatch_last_evaluation_timestamp_seconds`` and its mean evaluation time, so both
exporters meet files read ``--lead`` seconds before.

A bench, not a test: the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
from paced_side_by_side import NODE_EXPORTER, NUMAWATCH, SMALL, cpu_seconds  # noqa: E402

# What Prometheus 2.x sends (scrape_protocols' default): OpenMetrics first.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


def _wait_for(url: str, headers: dict[str, str] | None = None, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Scraper:
    """GETs of one URL over one kept-alive connection, as Prometheus scrapes a target: its scrape client keeps the
    connection between scrapes (serve's keep-alive timeout, 75 s, is above every scrape interval in use; Go's
    server, node_exporter's, keeps an idle one open). A connection the server closed is opened again."""

    def __init__(self, port: int, headers: dict[str, str], path: str = "/metrics") -> None:
        self.port = port
        self.headers = headers
        self.path = path
        self.connection: http.client.HTTPConnection | None = None

    def get(self) -> bytes:
        try:
            return self._get()
        except (http.client.HTTPException, ConnectionError):
            # The server closed the kept-alive connection between two scrapes: once more, on a new one.
            self.close()
            return self._get()

    def _get(self) -> bytes:
        if self.connection is None:
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.connection.request("GET", self.path, headers=self.headers)
        response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"GET {self.path} on port {self.port}: HTTP {response.status}")
        if response.will_close:
            self.close()
        return body

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def _evaluations(url: str) -> float:
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    match = re.search(r"^numawatch_evaluations_total (\S+)", text, re.M)
    if match is None:
        raise SystemExit("no numawatch_evaluations_total in serve's exposition")
    return float(match.group(1))


def tree_files(root: str) -> list[str]:
    """Every regular file of the tree outside /proc/<pid>: what the two exporters read, and more."""
    found = []
    for directory, subdirectories, names in os.walk(root):
        if os.path.relpath(directory, root) == "proc":
            subdirectories[:] = [name for name in subdirectories if not name.isdigit()]
        for name in names:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(path)
    return found


def read_all(paths: list[str]) -> float:
    """Read every file of ``paths`` (their page-cache pages made recent); the seconds it took."""
    began = time.monotonic()
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            while os.read(fd, 1 << 20):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
    return time.monotonic() - began


def _serve_timing(url: str) -> tuple[float, float]:
    """(wall-clock end of serve's last evaluation, its mean evaluation wall time so far)."""
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    values = {}
    for name in ("numawatch_last_evaluation_timestamp_seconds", "numawatch_evaluation_duration_seconds_sum",
                 "numawatch_evaluation_duration_seconds_count"):  # fmt: skip
        match = re.search(rf"^{name} (\S+)", text, re.M)
        if match is None:
            raise SystemExit(f"no {name} in serve's exposition")
        values[name] = float(match.group(1))
    count = values["numawatch_evaluation_duration_seconds_count"] or 1.0
    mean = values["numawatch_evaluation_duration_seconds_sum"] / count
    return values["numawatch_last_evaluation_timestamp_seconds"], mean


def interleaved(numawatch: str, node_exporter: str, root: str, pace: float, window: float, warmup: float,
                ports: tuple[int, int] = (19918, 19919), hot: list[str] | None = None,
                lead: float = 0.3) -> tuple[float, float, int, int]:
    """(serve CPU seconds per evaluation, node_exporter CPU seconds per scrape, evaluations, scrapes). With ``hot``,
    those files are read ``lead`` seconds before each evaluation and each scrape (see ``--hot-files``)."""
    serve_port, exporter_port = ports
    serve_argv = [numawatch, "--log-level", "error", "serve", "--host-root", root, "--interval", str(pace),
                  "--listen", f"127.0.0.1:{serve_port}"]  # fmt: skip
    exporter_argv = [node_exporter, f"--path.procfs={root}/proc", f"--path.sysfs={root}/sys",
                     f"--path.rootfs={root}", f"--web.listen-address=127.0.0.1:{exporter_port}",
                     "--collector.disable-defaults", *(f"--collector.{name}" for name in SMALL)]  # fmt: skip
    exporter = subprocess.Popen(exporter_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    serve = None
    scrapers: tuple[Scraper, ...] = ()
    try:
        scrape_url = f"http://127.0.0.1:{exporter_port}/metrics"
        gzip_header = {"Accept-Encoding": "gzip"}
        _wait_for(scrape_url, gzip_header)
        serve_started = time.monotonic()  # serve evaluates at about this instant plus whole paces
        serve = subprocess.Popen(serve_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        serve_url = f"http://127.0.0.1:{serve_port}/metrics"
        _wait_for(serve_url)
        time.sleep(warmup)  # start-up, then serve's first staggered readings (complete ones) are over
        first_evaluations = _evaluations(serve_url)
        # The scrapers' connections are made before the window, as a Prometheus scraping for a while has them.
        exporter_scraper = Scraper(exporter_port, gzip_header)
        serve_scraper = Scraper(serve_port, {**gzip_header, "Accept": PROMETHEUS_ACCEPT})
        scrapers = (exporter_scraper, serve_scraper)
        for scraper in scrapers:
            scraper.get()
        serve_start, exporter_start = cpu_seconds(serve.pid), cpu_seconds(exporter.pid)
        scrapes = 0
        end = time.monotonic() + window
        if hot is None:
            while True:
                # Half a pace after serve's next evaluation starts.
                elapsed = time.monotonic() - serve_started
                next_at = serve_started + (int(elapsed / pace) + 1) * pace + pace / 2
                if next_at > end:
                    break
                time.sleep(max(0.0, next_at - time.monotonic()))
                exporter_scraper.get()
                serve_scraper.get()
                scrapes += 1
        else:
            finished, took = _serve_timing(serve_url)
            # serve's evaluations start a pace apart (start to start), the last one ``took`` before ``finished``.
            started = time.monotonic() - (time.time() - finished) - took
            reading = read_all(hot)  # also how long a reading of the tree takes
            while True:
                elapsed = time.monotonic() - started
                evaluation_at = started + (int(elapsed / pace) + 1) * pace
                scrape_at = evaluation_at + pace / 2
                if scrape_at > end:
                    break
                for event in (evaluation_at, scrape_at):
                    time.sleep(max(0.0, event - lead - reading - time.monotonic()))
                    reading = read_all(hot)
                    if event == scrape_at:
                        time.sleep(max(0.0, event - time.monotonic()))
                        exporter_scraper.get()
                        serve_scraper.get()
                        scrapes += 1
        time.sleep(max(0.0, end - time.monotonic()))
        serve_cpu, exporter_cpu = cpu_seconds(serve.pid) - serve_start, cpu_seconds(exporter.pid) - exporter_start
        evaluations = _evaluations(serve_url) - first_evaluations
        return serve_cpu / evaluations, exporter_cpu / scrapes, int(evaluations), scrapes
    finally:
        for scraper in scrapers:
            scraper.close()
        for process in (serve, exporter):
            if process is not None:
                process.terminate()
                process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True, metavar="DIR", help="host root (bench/generate_host.py output)")
    parser.add_argument("--pace", type=float, default=1.0, help="seconds between evaluations and between scrapes")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured per round")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds serve runs before it is measured")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hot-files", action="store_true",
                        help="read the tree's files just before each evaluation and scrape (see the docstring)")
    parser.add_argument("--lead", type=float, default=0.3,
                        help="with --hot-files: seconds between the reading and the evaluation or scrape")
    parser.add_argument("--node-exporter", default=NODE_EXPORTER, metavar="BINARY")
    parser.add_argument("--numawatch", default=str(NUMAWATCH), metavar="BINARY")
    args = parser.parse_args(argv)
    if not os.access(args.node_exporter, os.X_OK):
        raise SystemExit(f"{args.node_exporter}: not found; `python bench/run.py --node-exporter` unpacks it")
    hot = tree_files(args.host) if args.hot_files else None
    files = f"; tree files read {args.lead:g} s before each run ({len(hot)})" if hot is not None else ""
    print(f"host {args.host}; pace {args.pace:g} s; window {args.window:g} s; load average "
          f"{os.getloadavg()[0]:.2f}{files}")
    for round_number in range(1, args.rounds + 1):
        serve_cpu, exporter_cpu, evaluations, scrapes = interleaved(
            args.numawatch, args.node_exporter, args.host, args.pace, args.window, args.warmup, hot=hot, lead=args.lead
        )
        print(f"round {round_number}  serve {serve_cpu * 1000:6.1f} ms per evaluation ({evaluations}), "
              f"node_exporter {exporter_cpu * 1000:6.1f} ms per scrape ({scrapes}), "
              f"ratio {serve_cpu / exporter_cpu:.2f}")  # fmt: skip
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
