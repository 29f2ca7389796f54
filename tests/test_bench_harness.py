"""The benchmark harness's own logic: bench/run.py's closing verdict (serve's CPU per evaluation against
node_exporter's per scrape at the same pace), the tree reading of bench/interleaved_side_by_side.py --hot-files, its
kept-alive scraper and the CPU-time reading every side by side divides."""

from __future__ import annotations

import http.server
import os
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from bench_modules import load_bench

run = load_bench("bench_run", "run.py")
interleaved = load_bench("bench_interleaved", "interleaved_side_by_side.py")


def test_the_verdict_compares_with_node_exporter_scraped_at_serves_pace():
    small = {"cpu_seconds_per_scrape": 0.048, "cpu_seconds_per_paced_scrape": 0.080}
    line = run.headline(384, 0.060, small)
    assert "at or under node_exporter's 0.080 s per scrape" in line
    assert "one scrape per 1 s" in line and "(ratio 0.75)" in line
    assert "back to back node_exporter costs 0.048 s per scrape" in line


def test_serve_above_the_paced_scrape_is_called_above():
    small = {"cpu_seconds_per_scrape": 0.048, "cpu_seconds_per_paced_scrape": 0.050}
    line = run.headline(384, 0.060, small)
    assert "ABOVE node_exporter's 0.050 s" in line and "(ratio 1.20)" in line


def test_results_without_a_paced_figure_compare_with_back_to_back_and_say_so():
    for small in ({"cpu_seconds_per_scrape": 0.048}, {"cpu_seconds_per_scrape": 0.048,
                                                      "cpu_seconds_per_paced_scrape": None}):  # fmt: skip
        line = run.headline(32, 0.030, small)
        assert "at or under node_exporter's 0.048 s per scrape" in line and "back to back (ratio 0.62)" in line
        assert "back to back node_exporter costs" not in line


def test_hot_files_are_the_trees_regular_files_outside_proc_pid(tmp_path):
    root = tmp_path / "host"
    for relative in ("proc/interrupts", "proc/irq/24/smp_affinity_list", "proc/1234/stat", "proc/1234/task/1/stat",
                     "sys/fs/cgroup/kubepods.slice/cpuset.cpus.effective", "var/lib/kubelet/cpu_manager_state"):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    (root / "proc" / "self").symlink_to("1234")
    (root / "sys" / "link").symlink_to(root / "proc" / "interrupts")
    found = {str(Path(path).relative_to(root)) for path in interleaved.tree_files(str(root))}
    assert found == {"proc/interrupts", "proc/irq/24/smp_affinity_list",
                     "sys/fs/cgroup/kubepods.slice/cpuset.cpus.effective", "var/lib/kubelet/cpu_manager_state"}


def test_reading_the_tree_skips_a_file_gone_since_it_was_listed(tmp_path):
    kept = tmp_path / "kept"
    kept.write_bytes(b"1" * (3 << 20))  # more than one read of 1 MiB
    assert interleaved.read_all([str(tmp_path / "gone"), str(kept)]) >= 0.0


class _Counting(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; counts connections; ``/close`` answers and closes, ``/drop`` closes without saying
    so, ``/missing`` is a 404."""

    protocol_version = "HTTP/1.1"
    connections = 0

    def setup(self) -> None:
        super().setup()
        type(self).connections += 1

    def do_GET(self) -> None:
        if self.path == "/missing":
            self.send_error(404)
            return
        body = f"{self.headers.get('Accept-Encoding')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if self.path == "/close":
            self.send_header("Connection", "close")
        if self.path in ("/close", "/drop"):
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def server_bind(self) -> None:
        # HTTPServer's own asks the resolver for the host's name (socket.getfqdn), which waits out its timeouts on
        # a machine without DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]


@pytest.fixture
def http_server():
    _Counting.connections = 0
    server = _Server(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_scraper_keeps_its_connection_as_prometheus_does(http_server):
    scraper = interleaved.Scraper(http_server, {"Accept-Encoding": "gzip"})
    bodies = [scraper.get() for _ in range(3)]
    scraper.close()
    assert bodies == [b"gzip\n"] * 3
    assert _Counting.connections == 1


def test_the_scraper_opens_a_new_connection_when_the_server_closed_one(http_server):
    scraper = interleaved.Scraper(http_server, {}, path="/close")
    assert scraper.get() == b"identity\n"
    assert scraper.get() == b"identity\n"
    scraper.close()
    assert _Counting.connections == 2


def test_the_scraper_tries_once_more_when_a_kept_connection_was_dropped(http_server):
    scraper = interleaved.Scraper(http_server, {}, path="/drop")
    assert scraper.get() == b"identity\n"
    assert scraper.get() == b"identity\n"  # the first try meets the closed connection, the second a new one
    scraper.close()
    assert _Counting.connections == 2


def test_the_scraper_stops_on_an_answer_that_is_not_200(http_server):
    scraper = interleaved.Scraper(http_server, {}, path="/missing")
    with pytest.raises(SystemExit, match="HTTP 404"):
        scraper.get()
    scraper.close()


# A child whose CPU is spent in a thread that has exited by the time it is read, as serve's evaluation threads have.
_BURN_IN_A_THREAD = """
import sys, threading, time
def burn():
    end = time.thread_time() + 0.15
    while time.thread_time() < end:
        pass
worker = threading.Thread(target=burn)
worker.start()
worker.join()
print("done", flush=True)
sys.stdin.read()
"""


def _ticks(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_cpu_seconds_count_exited_threads_finer_than_clock_ticks():
    child = subprocess.Popen([sys.executable, "-c", _BURN_IN_A_THREAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"done\n"
        precise, ticks = run.proc_cpu_seconds(child.pid), _ticks(child.pid)
        assert precise >= 0.15  # the exited thread's time is in it
        # The same time as the ticks count: utime and stime are each rounded down to a tick, so within two.
        assert abs(precise - ticks) <= 0.021
        assert precise != round(precise, 2)  # finer than the 10-ms tick (nanoseconds: never a round figure)
    finally:
        child.communicate(b"")


def test_cpu_seconds_fall_back_to_clock_ticks_where_the_clock_cannot_be_read(monkeypatch):
    def refused(clock: int) -> float:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(run.time, "clock_gettime", refused)
    pid = os.getpid()
    before = _ticks(pid)
    assert before <= run.proc_cpu_seconds(pid) <= _ticks(pid)


ab = load_bench("bench_ab_simultaneous", "ab_simultaneous.py")


def test_each_side_is_scraped_half_a_pace_after_each_of_its_evaluations_in_time_order():
    plan = ab.scrape_plan({"A": 100.0, "B": 100.0 + 1 / 3}, end=102.6)

    assert plan == [(100.5, "A"), (100.5 + 1 / 3, "B"), (101.5, "A"), (101.5 + 1 / 3, "B"), (102.5, "A")]


def test_the_side_started_first_alternates_from_round_to_round():
    a, b = ab.Side("A", "/a", "/tree-a", 1), ab.Side("B", "/b", "/tree-b", 2)

    assert [tuple(side.name for side in ab.first_sides((a, b), number)) for number in (1, 2, 3, 4)] == [
        ("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]
