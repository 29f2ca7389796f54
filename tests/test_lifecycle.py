"""What ``numawatch serve`` guarantees over its life: SIGHUP reloads, SIGTERM stops at once even with a read stuck,
a request limit answered 503 at once, and stalled or slow clients cut off. Real processes on 127.0.0.1 and real
sockets, except where a response must be bigger than any socket buffer (then the app runs in-process)."""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from fakehost.reference import reference_node
from numawatch import metrics, server
from numawatch.host import HostReader, SourceSpec
from numawatch.intent import REFERENCE
from numawatch.intentfile import parse_intent
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.paths import Paths
from prometheus_client.parser import text_string_to_metric_families
from serving import numawatch_serve as serve

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


# ------------------------------------------------------------------------------------------------ helpers
def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept-Encoding": "gzip"}),
                                    timeout=10) as response:
            body = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            return response.status, body
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def until(predicate: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def families(url: str) -> dict[str, list]:
    status, body = get(url + "metrics")
    assert status == 200
    return {family.name: family.samples for family in text_string_to_metric_families(body.decode())}


def value(found: dict[str, list], name: str, **labels: str) -> float:
    [sample] = [s for s in found[name] if s.name in (name, name + "_total") and labels.items() <= s.labels.items()]
    return sample.value


def checks_firing(found: dict[str, list]) -> set[str]:
    return {sample.labels["check"] for sample in found["numawatch_drift"]}


def address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    return host, int(port)


def read_until_closed(sock: socket.socket, seconds: float = 20) -> bytes:
    """Everything the server sends until it closes the connection (fails if it is still open after ``seconds``)."""
    sock.settimeout(seconds)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


# ------------------------------------------------------------------------------------------------ SIGHUP
@pytest.mark.slow
def test_sighup_reloads_the_intent_and_an_invalid_file_keeps_the_previous_one(fake_host, tmp_path):
    node = reference_node(fake_host)
    node.set_topology_manager_policy("best-effort")
    intent = tmp_path / "intent.yaml"
    intent.write_text("kubelet:\n  topologyManagerPolicy: best-effort\n")

    with serve(fake_host.root, "--intent", str(intent)) as (process, url):
        until(lambda: get(url + "healthz")[0] == 200, "the first evaluation")
        accepted = families(url)
        started = value(accepted, "numawatch_intent_reload_timestamp_seconds")

        intent.write_text("# the reference profile: single-numa-node\n")
        process.send_signal(signal.SIGHUP)
        until(lambda: "kubelet_topology_manager_policy" in checks_firing(families(url)), "the reloaded intent")
        reloaded = families(url)

        intent.write_text("kubelet:\n  topologyManagerPolicy: sometimes\n")
        process.send_signal(signal.SIGHUP)
        until(lambda: value(families(url), "numawatch_intent_reload_success") == 0, "the failed reload to show")
        refused = families(url)

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        stderr = process.stderr.read()

    assert "kubelet_topology_manager_policy" not in checks_firing(accepted)
    assert value(accepted, "numawatch_intent_reload_success") == 1
    assert value(reloaded, "numawatch_intent_reload_success") == 1
    assert value(reloaded, "numawatch_intent_reload_timestamp_seconds") > started
    # The invalid file changed nothing but the reload metrics: the previous intent still judges the node.
    assert "kubelet_topology_manager_policy" in checks_firing(refused)
    assert value(refused, "numawatch_intent_reload_timestamp_seconds") >= value(
        reloaded, "numawatch_intent_reload_timestamp_seconds")
    [line] = [line for line in stderr.splitlines() if "intent reload failed" in line]
    assert str(intent) in line
    assert "topologyManagerPolicy" in line
    assert "Traceback" not in stderr


# ------------------------------------------------------------------------------------------------ SIGTERM
@pytest.mark.slow
def test_sigterm_stops_at_once_while_an_evaluation_is_stuck_in_a_read(fake_host):
    """A FIFO nobody writes to blocks open() for ever, as a hung mount would; the stuck reader thread is left
    behind rather than waited for."""
    reference_node(fake_host)
    cmdline = fake_host.path("proc/cmdline")
    cmdline.unlink()
    os.mkfifo(cmdline)

    with serve(fake_host.root) as (process, url):
        health = get(url + "healthz")
        process.send_signal(signal.SIGTERM)
        # The contract is one second; the slack is for a loaded test machine. Without the daemon thread the
        # process would wait for the read for ever.
        returncode = process.wait(timeout=5)
        stderr = process.stderr.read()

    assert health[0] == 503
    assert health[1].startswith(b"starting")
    assert returncode == 0
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_sigterm_stops_at_once_with_a_stalled_client_connected(fake_host):
    fake_host.mkdir("proc")
    with serve(fake_host.root, "--web.read-timeout", "60") as (process, url):
        until(lambda: get(url + "healthz")[0] == 200, "the first evaluation")
        with socket.create_connection(address(url)) as stalled:
            stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")  # the body never comes
            time.sleep(0.2)
            process.send_signal(signal.SIGTERM)
            returncode = process.wait(timeout=5)
        stderr = process.stderr.read()

    assert returncode == 0
    assert "Traceback" not in stderr


# ------------------------------------------------------------------------------------------------ slots and deadlines
@pytest.mark.slow
def test_requests_over_the_limit_get_503_at_once_until_the_stalled_one_times_out(fake_host):
    fake_host.mkdir("proc")
    with serve(fake_host.root, "--web.max-requests", "1", "--web.read-timeout", "2") as (process, url):
        until(lambda: get(url + "healthz")[0] == 200, "the first evaluation")
        with socket.create_connection(address(url)) as stalled:
            # Headers complete, body announced and never sent: the one slot is held while numawatch waits for it.
            stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
            until(lambda: get(url + "metrics")[0] == 503, "a request over the limit to be refused", seconds=10)
            refused = get(url + "metrics")
            answer = read_until_closed(stalled)
        until(lambda: get(url + "metrics")[0] == 200, "the slot to be free again", seconds=10)
        counted = families(url)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0

    assert refused[0] == 503
    assert b"--web.max-requests=1" in refused[1]
    assert answer.startswith(b"HTTP/1.1 408")
    assert value(counted, "numawatch_http_requests_refused", reason="max_requests") >= 1


@pytest.mark.slow
def test_a_client_sending_half_its_headers_is_cut_off_after_the_read_timeout(fake_host):
    fake_host.mkdir("proc")
    with serve(fake_host.root, "--web.read-timeout", "0.5", "--web.max-requests", "1") as (process, url):
        until(lambda: get(url + "healthz")[0] == 200, "the first evaluation")
        with socket.create_connection(address(url)) as stalled:
            stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line: the headers never end
            # Incomplete headers hold no request slot, even with the limit at 1.
            meanwhile = get(url + "metrics")[0]
            answer = read_until_closed(stalled)
        until(lambda: value(families(url), "numawatch_http_requests_refused", reason="read_timeout") >= 1,
              "the timeout to be counted")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0

    assert meanwhile == 200
    assert answer == b""  # closed without an answer


@pytest.mark.slow
def test_a_client_that_connects_and_says_nothing_is_cut_off_too(fake_host):
    fake_host.mkdir("proc")
    with serve(fake_host.root, "--web.read-timeout", "0.5") as (process, url):
        with socket.create_connection(address(url)) as silent:
            answer = read_until_closed(silent)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0

    assert answer == b""


# ------------------------------------------------------------------------------------------------ in-process
class OneCpuHost:
    def read(self, paths: Paths) -> Topology:
        cpus = {0: Cpu(0, True, 0, 0, 0)}
        return Topology(cpus=cpus, online=frozenset(cpus), nodes={0: NumaNode(0, frozenset(cpus))},
                        isolation=IsolationParams())

    def sampler(self, **kwargs) -> server.Sampler:
        reader = HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", self.read),))
        return server.Sampler(reader, REFERENCE, checks=(), **kwargs)


async def test_a_client_that_does_not_read_its_response_is_cut_off_after_the_write_timeout(aiohttp_server):
    """The response is far bigger than any socket buffer, so sending it blocks until the client reads."""
    gate = server.Gate(server.Limits(max_requests=1, read_timeout=5, write_timeout=0.3))
    app = server.make_app(OneCpuHost().sampler(), run_sampler=False, gate=gate)
    big = b"x" * (64 * 1024 * 1024)

    async def huge(request):
        return server.web.Response(body=big)

    app.router.add_get("/huge", huge)
    test_server = await aiohttp_server(app)
    reader, writer = await asyncio.open_connection(test_server.host, test_server.port)
    writer.write(b"GET /huge HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()

    async def closed() -> bool:
        return gate.refused["write_timeout"] == 1 and gate.in_flight == 0

    deadline = time.monotonic() + 20
    while not await closed():
        assert time.monotonic() < deadline, "the slow reader was never cut off"
        await asyncio.sleep(0.05)
    received = len(await asyncio.wait_for(reader.read(), 20))  # then the client finds the connection closed
    writer.close()

    assert received < len(big)
    assert gate.in_flight == 0


async def test_cleanup_contexts_start_before_the_first_evaluation_and_stop_after_the_last(aiohttp_client):
    events: list[str] = []
    host = OneCpuHost()

    def read(paths: Paths) -> Topology:
        events.append("read")
        return host.read(paths)

    sampler = server.Sampler(HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", read),)),
                             REFERENCE, interval=0.05, checks=())

    async def nvml(app):
        events.append("nvml start")
        yield
        events.append("nvml stop")

    client = await aiohttp_client(server.make_app(sampler, contexts=[nvml]))
    deadline = time.monotonic() + 20
    while "read" not in events:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await client.close()
    await asyncio.sleep(0.2)  # an evaluation caught in flight may still finish; none may start

    assert events[0] == "nvml start"
    assert events[-1] in ("nvml stop", "read")
    assert "nvml stop" in events
    assert events[events.index("nvml stop") + 1:].count("read") <= 1


async def test_refresh_soon_forgets_cached_results_and_evaluates_at_once(aiohttp_client):
    reads: list[float] = []
    host = OneCpuHost()

    def read(paths: Paths) -> Topology:
        reads.append(time.monotonic())
        return host.read(paths)

    spec = SourceSpec("topology", read, fingerprint=lambda paths: "never changes")
    sampler = server.Sampler(HostReader(Paths.from_root("/nonexistent"), (spec,)), REFERENCE, interval=3600,
                             checks=())
    client = await aiohttp_client(server.make_app(sampler))
    while sampler.latest is None:
        await asyncio.sleep(0.01)
    sampler.refresh_soon({"topology"})  # as the GPU hotplug monitor does
    deadline = time.monotonic() + 20
    while len(reads) < 2:
        assert time.monotonic() < deadline, "the sampler did not wake up"
        await asyncio.sleep(0.01)
    await client.close()

    assert len(reads) == 2


async def test_a_reload_without_an_intent_file_keeps_the_reference_profile_and_succeeds():
    sampler = OneCpuHost().sampler()

    assert await sampler.reload()
    assert sampler.intent is REFERENCE
    assert sampler.reload_status.success


async def test_a_reload_whose_loader_fails_keeps_the_intent_and_says_so(caplog):
    def broken():
        return parse_intent("kubelet: [unclosed\n", "/etc/numawatch/intent.yaml")

    sampler = OneCpuHost().sampler(intent_loader=broken)

    assert not await sampler.reload()
    assert sampler.intent is REFERENCE
    assert not sampler.reload_status.success
    assert "/etc/numawatch/intent.yaml" in caplog.text
    assert "numawatch_intent_reload_success 0.0" in metrics.exposition.write(sampler.self_families()).decode()


# ------------------------------------------------------------------------------------------------ docs
def test_the_serve_only_families_are_documented_with_their_type_and_help():
    """docs/metrics.md lists them as ``- `name` (type): help`` under "Served by numawatch serve" (a table row
    would make tests/test_docs_metrics.py look for them in ``numawatch check``'s rendering)."""
    text = DOCS.read_text()
    section = text.split("### Served by `numawatch serve` only", 1)[1].split("\n#", 1)[0]
    documented = {match[0]: (match[1], match[2].strip())
                  for match in re.findall(r"^- `(numawatch_\w+)` \((\w+)(?:, labels [^)]*)?\): (.+)$", section,
                                          re.MULTILINE)}
    sampler = OneCpuHost().sampler()
    server.make_app(sampler, run_sampler=False)
    exposed = metrics.exposition.write(sampler.self_families()).decode()
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", exposed, re.MULTILINE))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", exposed, re.MULTILINE))
    own = {name for name in helps if name.startswith("numawatch_")}

    assert set(documented) == own
    for name, (kind, help_text) in documented.items():
        assert (kind, help_text) == (types[name], helps[name])
    # The client library's process families, named (their help is the library's) with their types.
    process = {name for name in helps if not name.startswith("numawatch_")}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "python_info"} <= process
    bullets = section.split("\n- ")
    for name in process:
        (bullet,) = [text for text in bullets if f"`{name}`" in text]
        assert types[name] in bullet, name


@pytest.mark.parametrize("flag", ["--web.config.file", "--web.max-requests", "--web.read-timeout",
                                  "--web.write-timeout"])
def test_every_new_serve_flag_is_documented(flag):
    docs = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()

    assert f"`{flag}" in docs
