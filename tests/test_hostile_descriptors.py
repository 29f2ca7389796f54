"""Descriptor exhaustion against a real ``numawatch serve``: a client holding more
connections than the process may open descriptors must not make a scrape wait or fail, nor make the node look
cleaner than it is (fewer ``numawatch_drift`` series), nor flood the log. The server runs under a low soft limit,
set by a wrapper before it starts, as a node's default 1024 would be."""

from __future__ import annotations

import contextlib
import errno
import http.client
import resource
import select
import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from fakehost.reference import reference_node
from numawatch import server
from numawatch.descriptors import (
    EVICTION_SECONDS,
    AcceptErrors,
    Connections,
    ReservingSocket,
    reserve_for,
    starved,
)
from numawatch.host import HostReader, SourceSpec
from numawatch.intent import REFERENCE
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.paths import Paths
from prometheus_client.parser import text_string_to_metric_families
from serving import numawatch_serve

# Sets RLIMIT_NOFILE, then becomes the numawatch command that follows.
LIMITED = ("import os, resource, sys; "
           "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2]))); "
           "os.execv(sys.argv[3], sys.argv[3:])")


def limited(soft: int, hard: int) -> tuple[str, ...]:
    return (sys.executable, "-c", LIMITED, str(soft), str(hard))


def address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    return host, int(port)


def scrape(url: str, timeout: float) -> tuple[int, float, int]:
    """A scrape over a fresh connection: (status, seconds, numawatch_drift series)."""
    host, port = address(url)
    started = time.monotonic()
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read().decode()
    finally:
        connection.close()
    seconds = time.monotonic() - started
    if response.status != 200:
        return response.status, seconds, 0
    drift = sum(len(family.samples) for family in text_string_to_metric_families(body)
                if family.name == "numawatch_drift")
    return response.status, seconds, drift


@contextlib.contextmanager
def own_descriptors(count: int) -> Iterator[None]:
    """This test process may hold ``count`` descriptors (and a few for itself)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < count + 200:
        pytest.skip(f"the hard descriptor limit ({hard}) is too low to hold {count} connections here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, count + 200), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def holding(url: str, count: int) -> Iterator[list[int]]:
    """A client that keeps ``count`` idle connections open, opening a new one for each the server closes; yields
    [connections opened in all]."""
    opened = [0]
    stop = threading.Event()
    held: list[socket.socket] = []

    def hold() -> None:
        while not stop.is_set():
            while len(held) < count and not stop.is_set():
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.settimeout(2)
                try:
                    sock.connect(address(url))
                except OSError:
                    sock.close()
                    continue
                held.append(sock)
                opened[0] += 1
            for sock in _readable(held[:1000], 0.05):
                with contextlib.suppress(OSError):
                    if sock.recv(1, socket.MSG_DONTWAIT):
                        continue
                held.remove(sock)
                sock.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while opened[0] < count:
            assert time.monotonic() < deadline, f"only {opened[0]} of {count} connections opened"
            time.sleep(0.05)
        yield opened
    finally:
        stop.set()
        thread.join(timeout=10)
        for sock in held:
            sock.close()


# The bound, every scrape within 1 s, holds at a node's usual 1024 soft limit (raised at start). Where the
# hard limit is as low as the soft one and the flood far past it, each accept first closes an idle connection and the
# flooding client reconnects at once, so a scrape's connection may queue behind the flood's in the listen backlog:
# it must still be answered with every finding, within a few seconds rather than one (a 2-core CI machine under load
# took over 1 s once in 8 scrapes).
@pytest.mark.parametrize(
    ("soft", "hard", "connections", "within"),
    [(1024, 1 << 14, 1100, 1.0), (256, 256, 400, 10.0)],
    ids=["soft-1024-raised", "hard-256"],
)
def test_a_client_holding_more_connections_than_the_limit_changes_no_scrape(fake_host, soft, hard, connections,
                                                                           within):
    node = reference_node(fake_host)
    node.split_across_nodes()
    with own_descriptors(connections), numawatch_serve(fake_host.root, wrapper=limited(soft, hard)) as (process, url):
        deadline = time.monotonic() + 30
        while (before := scrape(url, 10))[0] != 200:
            assert time.monotonic() < deadline, "numawatch serve never answered"
            time.sleep(0.1)
        assert before[2] > 0, "the node must have findings for this test to mean anything"
        results = []
        with holding(url, connections) as opened:
            for _ in range(8):
                time.sleep(0.5)  # several evaluations (--interval 0.2) while the connections are held
                try:
                    results.append(scrape(url, within))
                except (OSError, http.client.HTTPException) as error:
                    results.append((type(error).__name__, within, 0))
        process.terminate()
        process.wait(timeout=20)
        log = process.stderr.read()

    assert [status for status, _, _ in results] == [200] * 8, results
    assert max(seconds for _, seconds, _ in results) < within, results
    assert min(drift for _, _, drift in results) >= before[2], (before, results)
    assert opened[0] >= connections
    assert "Traceback" not in log
    # The machine's own CPU hotplug events (other tests) may be logged too: they are not this test's.
    lines = [line for line in log.splitlines() if "caller=hotplug.py" not in line]
    assert len(lines) < 60, "\n".join(lines[-30:])


# ------------------------------------------------------------------------------------------------ the parts
class Idle:
    def __init__(self, idle: bool = True) -> None:
        self._idle = idle
        self.evicted = False

    def idle(self) -> bool:
        return self._idle

    def evict(self) -> None:
        self.evicted = True


def test_connections_below_the_line_are_admitted_and_above_it_make_room_from_the_longest_idle():
    connections = Connections(256)
    oldest, busy, recent = Idle(), Idle(idle=False), Idle()
    for connection in (oldest, busy, recent):
        connections.opened(connection)
    connections.active(oldest)  # started a request: now the most recent

    assert connections.line == 256 - reserve_for(256) == 192
    assert connections.admit(191)
    assert connections.admit(192)  # makes room: the least recently active idle one goes
    assert (oldest.evicted, busy.evicted, recent.evicted) == (False, False, True)
    assert connections.admit(193)
    assert oldest.evicted and not busy.evicted
    assert not connections.admit(194)  # nothing idle left to close: refused
    assert (oldest.evicted, busy.evicted, recent.evicted) == (True, False, True) and connections.refused == 1


def test_accepting_waits_while_connections_are_being_closed_and_never_for_ever():
    now = [0.0]
    connections = Connections(16, clock=lambda: now[0])  # a reserve of 4: at most 2 being closed at a time
    idle = [Idle() for _ in range(4)]
    for connection in idle:
        connections.opened(connection)

    assert connections.admit(12) and connections.admit(13)
    assert connections.waiting()
    connections.closed(idle[0])  # its end reported: room for one more
    assert not connections.waiting()
    assert connections.admit(13)
    assert connections.waiting()
    now[0] = EVICTION_SECONDS + 1  # ends never reported: not waited for any longer
    assert not connections.waiting()


def test_connection_sockets_are_counted_from_accept_to_close():
    connections = Connections(1024)
    connections.baseline(24)
    listener = ReservingSocket.adopt(socket.create_server(("127.0.0.1", 0)), connections)
    try:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        counted = connections.sockets
        accepted.close()
        accepted.close()  # a second close counts nothing
        client.close()
    finally:
        listener.close()

    assert (counted, connections.sockets) == (1, 0)
    assert connections.capacity == 1024 - 128 - 24


def test_a_small_limit_keeps_a_quarter_and_a_large_one_the_reserve():
    assert reserve_for(64) == 16
    assert reserve_for(1 << 20) == 128


def test_starved_finds_a_lack_of_descriptors_under_what_a_source_raised():
    try:
        try:
            raise OSError(24, "Too many open files", "/sys/fs/cgroup/kubepods.slice")
        except OSError as error:
            raise ValueError("cgroups: cannot read") from error
    except ValueError as wrapped:
        assert starved(wrapped)
    assert not starved(OSError(2, "No such file or directory"))
    assert not starved(None)


def test_accept_errors_are_counted_each_and_logged_once_per_interval(caplog):
    now = [0.0]
    errors = AcceptErrors(15.0, clock=lambda: now[0])
    context = {"message": "socket.accept() out of system resource", "exception": OSError(24, "Too many open files")}
    with caplog.at_level("WARNING"):
        for step in range(100):
            now[0] = step * 0.3  # 30 s of errors
            errors(None, context)

    assert errors.count == 100
    assert len(caplog.records) == 2
    assert "Too many open files" in caplog.records[0].getMessage()
    assert caplog.records[0].exc_info is None


async def test_an_evaluation_whose_sources_lacked_descriptors_never_replaces_the_last_good_one():
    """Every source down for EMFILE made one scrape show 0 numawatch_drift series: the node looked clean."""
    starving = [False]

    def topology(paths: Paths) -> Topology:
        if starving[0]:
            raise OSError(errno.EMFILE, "Too many open files", "/sys/devices/system/cpu")
        cpus = {0: Cpu(0, True, 0, 0, 0)}
        return Topology(cpus=cpus, online=frozenset(cpus), nodes={0: NumaNode(0, frozenset(cpus))},
                        isolation=IsolationParams())

    sampler = server.Sampler(HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", topology),)),
                             REFERENCE, checks=())
    good = await sampler.refresh()
    starving[0] = True
    starved_result = await sampler.refresh()
    page = server.render_landing_page(sampler.latest, sampler.not_served)
    starving[0] = False
    recovered = await sampler.refresh()

    assert good is not None and starved_result is None
    assert sampler.latest is recovered and recovered is not good
    assert "was not served: source topology: Too many open files: /sys/devices/system/cpu" in page
    assert sampler.not_served is None


def test_a_source_down_for_another_reason_is_served_as_down():
    def topology(paths: Paths) -> Topology:
        raise OSError(errno.EACCES, "Permission denied", "/sys/devices/system/cpu")

    reader = HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", topology),))
    status = reader.read().statuses["topology"]

    assert (status.up, status.starved) == (False, False)


def _readable(sockets: list[socket.socket], timeout: float) -> list[socket.socket]:
    """The sockets with something to read (or closed by the peer): poll(2), since with the soft limit raised their
    descriptors pass select(2)'s 1,024."""
    if not sockets:
        time.sleep(timeout)
        return []
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in sockets}
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    return [by_fd[fd] for fd, _ in poller.poll(timeout * 1000)]
