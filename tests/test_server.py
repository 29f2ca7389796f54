"""`numawatch serve`: the aiohttp app (through aiohttp's test client) and the real process over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fakehost.reference import VLLM, reference_node
from numawatch import server
from numawatch.checks import Check
from numawatch.host import Host, HostReader, SourceSpec
from numawatch.intent import REFERENCE, Intent
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.paths import Paths
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from serving import numawatch_serve

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# ------------------------------------------------------------------------------------------------ a controllable host
class Switchable:
    """A fake source plus a check that fires while ``drift`` is set; counts reads and remembers the reading thread."""

    def __init__(self) -> None:
        self.drift: dict[str, str] | None = {"namespace": "llm", "pod": "vllm-0", "container": "server"}
        self.message = "container spans NUMA nodes 0 and 1"
        self.reads = 0
        self.threads: set[int] = set()

    def read(self, paths: Paths) -> Topology:
        self.reads += 1
        self.threads.add(threading.get_ident())
        cpus = {cpu: Cpu(cpu, True, 0, cpu, 0) for cpu in range(2)}
        return Topology(cpus=cpus, online=frozenset(cpus), nodes={0: NumaNode(0, frozenset(cpus))},
                        isolation=IsolationParams())

    def check(self) -> Check:
        def run(host: Host, intent: Intent):
            if self.drift is None:
                return []
            return [check.finding(intent, self.drift, self.message)]

        check = Check(id="container_numa_split", severity="critical", summary="", remediation="repin it", run=run)
        return check

    def sampler(self, interval: float = 15.0) -> server.Sampler:
        reader = HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", self.read),))
        return server.Sampler(reader, REFERENCE, interval=interval, checks=(self.check(),))


@pytest.fixture
def host() -> Switchable:
    return Switchable()


def drift_series(text: str) -> list[dict[str, str]]:
    for family in text_string_to_metric_families(text):
        if family.name == "numawatch_drift":
            return [sample.labels for sample in family.samples]
    raise AssertionError("no numawatch_drift family in the exposition")


# ------------------------------------------------------------------------------------------------ app: health, metrics
async def test_healthz_is_503_until_the_first_evaluation_finished_then_ok(aiohttp_client, host):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))

    before = await client.get("/healthz")
    await sampler.refresh()
    after = await client.get("/healthz")

    assert before.status == 503
    assert after.status == 200
    assert await after.text() == "ok\n"


async def test_metrics_is_503_before_the_first_evaluation(aiohttp_client, host):
    client = await aiohttp_client(server.make_app(host.sampler(), run_sampler=False))

    response = await client.get("/metrics")

    assert response.status == 503


async def test_metrics_serves_the_exposition_with_the_text_format_content_type(aiohttp_client, host):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    await sampler.refresh()

    response = await client.get("/metrics")

    assert response.status == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE
    [drift] = drift_series(await response.text())
    assert {"check": "container_numa_split", "severity": "critical", "pod": "vllm-0"}.items() <= drift.items()


async def test_metrics_is_gzip_compressed_when_the_scraper_accepts_it(aiohttp_client, host):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False), auto_decompress=False)
    await sampler.refresh()

    zipped = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
    refused = await client.get("/metrics", headers={"Accept-Encoding": "gzip;q=0, identity"})

    assert zipped.headers["Content-Encoding"] == "gzip"
    assert zipped.headers["Vary"] == "Accept, Accept-Encoding"  # the answer depends on both
    assert await plain.read() == gzip.decompress(await zipped.read())
    assert "Content-Encoding" not in plain.headers
    assert "Content-Encoding" not in refused.headers


# What Prometheus sends (scrape_protocols' defaults): 2.x, and 3.x, which also offers the protobuf format first when
# native histograms are on.
PROMETHEUS_2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
PROMETHEUS_3_ACCEPT = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,"
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@pytest.mark.parametrize(
    ("accept", "openmetrics", "content_type"),
    [
        (PROMETHEUS_2_ACCEPT, True, OPENMETRICS_CONTENT_TYPE),
        (PROMETHEUS_3_ACCEPT, True, OPENMETRICS_CONTENT_TYPE),
        ("application/openmetrics-text; version=1.0.0", True, OPENMETRICS_CONTENT_TYPE),
        ("application/openmetrics-text", True, OPENMETRICS_CONTENT_TYPE),
        ("application/openmetrics-text; version=0.0.1", True,
         "application/openmetrics-text; version=0.0.1; charset=utf-8"),
        ("Application/OpenMetrics-Text; Version=1.0.0; q=0.9, text/plain; q=1", False, CONTENT_TYPE),
        ("text/plain;version=0.0.4;q=0.3,application/openmetrics-text;version=1.0.0;q=0", False, CONTENT_TYPE),
        ("application/openmetrics-text;version=2.0.0", False, CONTENT_TYPE),  # not written: the text format
        ("application/json", False, CONTENT_TYPE),
        ("", False, CONTENT_TYPE),
        ("*/*", False, CONTENT_TYPE),
        ("application/openmetrics-text;q=bogus, text/plain", False, CONTENT_TYPE),
    ],
)
def test_content_negotiation_picks_the_best_format_we_write(accept, openmetrics, content_type):
    chosen = server.negotiate(accept)

    assert (chosen.openmetrics, chosen.content_type) == (openmetrics, content_type)


async def test_metrics_answers_openmetrics_to_a_prometheus_accept_header_with_the_same_families(aiohttp_client, host):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False), auto_decompress=False)
    await sampler.refresh()

    om = await client.get("/metrics", headers={"Accept": PROMETHEUS_2_ACCEPT, "Accept-Encoding": "gzip"})
    text = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})

    assert om.headers["Content-Type"] == OPENMETRICS_CONTENT_TYPE
    assert om.headers["Content-Encoding"] == "gzip"
    body = gzip.decompress(await om.read()).decode()
    assert body.endswith("\n# EOF\n")
    # client_python's OpenMetrics parser is strict: it rejects a missing EOF, a counter without _total, duplicates.
    parsed = {family.name: family for family in parse_openmetrics(body)}
    plain = {family.name for family in text_string_to_metric_families(gzip.decompress(await text.read()).decode())}
    assert set(parsed) == plain
    assert parsed["numawatch_evaluations"].type == "counter"
    names = {sample.name for sample in parsed["numawatch_evaluations"].samples}
    assert names == {"numawatch_evaluations_total", "numawatch_evaluations_created"}
    refused = {sample.name for sample in parsed["numawatch_http_requests_refused"].samples}
    assert refused == {"numawatch_http_requests_refused_total", "numawatch_http_requests_refused_created"}
    assert "process_cpu_seconds" in parsed and "python_info" in parsed


async def test_scrapes_are_answered_from_the_last_evaluation_without_reading_the_host(aiohttp_client, host):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    await sampler.refresh()

    bodies = {await (await client.get("/metrics")).read() for _ in range(5)}

    assert host.reads == 1
    assert len(bodies) == 1


async def test_a_failed_evaluation_keeps_the_previous_exposition(aiohttp_client, host, monkeypatch, caplog):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    await sampler.refresh()
    good = await (await client.get("/metrics")).read()

    def broken(*args, **kwargs):
        raise RuntimeError("render exploded")

    monkeypatch.setattr(sampler.renderer, "write_segments", broken)
    assert await sampler.refresh() is None

    assert good == await (await client.get("/metrics")).read()
    assert sampler.failures == 1
    assert "render exploded" in caplog.text


class CountingWrites:
    """Wraps a sampler's renderer's ``write_segments`` (what Bodies writes a body with) to count the bodies written
    per format."""

    def __init__(self, sampler: server.Sampler, monkeypatch: pytest.MonkeyPatch) -> None:
        self.openmetrics = 0
        self.text = 0
        real = sampler.renderer.write_segments

        def counted(built, *, openmetrics=False):
            if openmetrics:
                self.openmetrics += 1
            else:
                self.text += 1
            return real(built, openmetrics=openmetrics)

        monkeypatch.setattr(sampler.renderer, "write_segments", counted)


async def test_a_body_format_nobody_scrapes_is_never_written(aiohttp_client, host, monkeypatch):
    sampler = host.sampler()
    writes = CountingWrites(sampler, monkeypatch)
    await aiohttp_client(server.make_app(sampler, run_sampler=False))

    snapshot = await sampler.refresh()
    await sampler.refresh()

    assert (writes.text, writes.openmetrics) == (0, 0)
    assert all(snapshot.bodies.ready(form) is None for form in server.BODY_FORMATS)


async def test_the_formats_scraped_are_written_with_the_next_evaluation_and_only_those(
    aiohttp_client, host, monkeypatch
):
    sampler = host.sampler()
    writes = CountingWrites(sampler, monkeypatch)
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    await sampler.refresh()

    first = await client.get("/metrics", headers={"Accept": PROMETHEUS_2_ACCEPT, "Accept-Encoding": "gzip"})
    assert first.headers["Content-Type"] == OPENMETRICS_CONTENT_TYPE
    await first.read()
    assert (writes.text, writes.openmetrics) == (0, 1)  # written on demand by that scrape

    snapshot = await sampler.refresh()

    assert (writes.text, writes.openmetrics) == (0, 2)  # written with the evaluation, before any scrape of it
    assert snapshot.bodies.ready(server.BodyFormat(openmetrics=True, gzip=True)) is not None
    assert snapshot.bodies.ready(server.BodyFormat(openmetrics=False, gzip=False)) is None
    again = await client.get("/metrics", headers={"Accept": PROMETHEUS_2_ACCEPT, "Accept-Encoding": "gzip"})
    assert await again.read() == snapshot.bodies.get(server.BodyFormat(openmetrics=True, gzip=False))
    assert writes.openmetrics == 2  # answered from the body written with the evaluation


async def test_a_scraper_asking_for_gzip_only_leaves_no_plain_body_written(aiohttp_client, host):
    """The plain body is not joined to make the gzip one: a gzip-only scraper (Prometheus) costs no plain copy."""
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False), auto_decompress=False)
    await sampler.refresh()
    await (await client.get("/metrics", headers={"Accept": PROMETHEUS_2_ACCEPT, "Accept-Encoding": "gzip"})).read()

    snapshot = await sampler.refresh()
    answer = await client.get("/metrics", headers={"Accept": PROMETHEUS_2_ACCEPT, "Accept-Encoding": "gzip"})
    packed = await answer.read()

    assert snapshot.bodies.ready(server.BodyFormat(openmetrics=True, gzip=False)) is None
    assert packed == snapshot.bodies.ready(server.BodyFormat(openmetrics=True, gzip=True))
    assert gzip.decompress(packed) == server.metrics.exposition.write(snapshot.bodies._families, openmetrics=True)


async def test_a_body_written_on_demand_hands_the_memory_it_freed_back(aiohttp_client, host, monkeypatch):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    await sampler.refresh()
    released: list[str] = []
    monkeypatch.setattr(server, "release_free_memory", lambda: released.append(threading.current_thread().name))

    await (await client.get("/metrics", headers={"Accept-Encoding": "identity"})).read()

    assert released == ["numawatch-exposition"]  # in the thread that wrote it, once written


async def test_concurrent_scrapes_of_an_unwritten_body_write_it_once_and_agree(aiohttp_client, host, monkeypatch):
    sampler = host.sampler()
    writes = CountingWrites(sampler, monkeypatch)
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    snapshot = await sampler.refresh()

    async def scrape() -> bytes:
        response = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        return await response.read()

    bodies = await asyncio.gather(*(scrape() for _ in range(20)))

    assert writes.text == 1
    assert set(bodies) == {server.metrics.exposition.write(snapshot.bodies._families)}


async def test_a_body_that_cannot_be_written_on_demand_is_answered_with_the_previous_one(
    aiohttp_client, host, monkeypatch, caplog
):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    await sampler.refresh()
    good = await (await client.get("/metrics", headers={"Accept-Encoding": "identity"})).read()
    sampler._asked.clear()  # as if the last scrape had come before the last evaluation began
    await sampler.refresh()

    def broken(*args, **kwargs):
        raise RuntimeError("write exploded")

    monkeypatch.setattr(sampler.renderer, "write_segments", broken)
    answer = await client.get("/metrics", headers={"Accept-Encoding": "identity"})

    assert answer.status == 200
    assert await answer.read() == good
    assert sampler.failures == 1
    assert "write exploded" in caplog.text


async def test_healthz_fails_when_the_last_evaluation_is_stale(aiohttp_client, host):
    sampler = host.sampler(interval=1.0)
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    snapshot = await sampler.refresh()
    stale = time.time() - 3600
    sampler.latest = server.Snapshot(snapshot.evaluation, snapshot.bodies, stale, snapshot.duration_seconds)

    response = await client.get("/healthz")

    assert response.status == 503
    assert (await response.text()).startswith("stale")


# ------------------------------------------------------------------------------------------------ app: landing page
async def test_landing_page_links_metrics_and_healthz_and_lists_findings(aiohttp_client, host):
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    await sampler.refresh()

    response = await client.get("/")
    page = await response.text()

    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/html")
    assert '<a href="metrics">' in page
    assert '<a href="healthz">' in page
    assert "container_numa_split" in page
    assert "llm/vllm-0/server" in page
    assert "container spans NUMA nodes 0 and 1" in page


async def test_landing_page_escapes_everything_it_shows(aiohttp_client, host):
    host.drift = {"namespace": "<script>alert(1)</script>", "pod": "p&q", "container": '"c"'}
    host.message = "<img src=x onerror=alert(2)>"
    sampler = host.sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False))
    await sampler.refresh()

    page = await (await client.get("/")).text()

    assert "<script>" not in page
    assert "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;/p&amp;q/&quot;c&quot;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page


async def test_landing_page_before_the_first_evaluation_says_so(aiohttp_client, host):
    client = await aiohttp_client(server.make_app(host.sampler(), run_sampler=False))

    page = await (await client.get("/")).text()

    assert "has not finished yet" in page


# -------------------------------------------------------------------------------------------- app: background sampler
async def _wait_for(predicate, what: str, deadline_seconds: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_seconds
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)


async def test_background_sampler_evaluates_in_a_worker_thread_and_drift_disappears_once_fixed(aiohttp_client, host):
    sampler = host.sampler(interval=0.05)
    client = await aiohttp_client(server.make_app(sampler))

    async def healthy() -> bool:
        return (await client.get("/healthz")).status == 200

    async def drift_gone() -> bool:
        return drift_series(await (await client.get("/metrics")).text()) == []

    await _wait_for(healthy, "the first evaluation")
    assert len(drift_series(await (await client.get("/metrics")).text())) == 1
    host.drift = None
    await _wait_for(drift_gone, "the repaired drift to disappear")

    assert threading.get_ident() not in host.threads
    assert sampler.stats.count >= 2


async def test_closing_the_app_stops_the_background_sampler(aiohttp_client, host):
    sampler = host.sampler(interval=0.05)
    client = await aiohttp_client(server.make_app(sampler))

    async def evaluated() -> bool:
        return sampler.latest is not None

    await _wait_for(evaluated, "the first evaluation")
    await client.close()
    reads = host.reads
    await asyncio.sleep(0.3)

    assert [task for task in asyncio.all_tasks() if task.get_name() == "numawatch-sampler"] == []
    assert reads == host.reads


async def test_a_failed_evaluation_in_the_background_keeps_the_previous_snapshot_and_is_counted(host, caplog):
    sampler = host.sampler(interval=0.01)
    evaluate = sampler.evaluate_once
    calls: list[int] = []

    def fails_once_after_the_first() -> server.Snapshot:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the evaluation broke")
        return evaluate()

    sampler.evaluate_once = fails_once_after_the_first  # type: ignore[method-assign]
    running = asyncio.create_task(sampler.run())
    try:
        async def first() -> bool:
            return sampler.latest is not None

        await _wait_for(first, "the first evaluation")
        served = sampler.latest

        async def failed() -> bool:
            return sampler.failures == 1

        await _wait_for(failed, "the failed evaluation")
        assert sampler.latest is served  # the failure served nothing new

        async def recovered() -> bool:
            return sampler.latest is not served

        await _wait_for(recovered, "the evaluation after the failure")
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running

    assert sampler.failures == 1
    assert "evaluation failed; still serving the previous one" in caplog.text
    assert "the evaluation broke" in caplog.text  # with its traceback


async def test_an_evaluation_longer_than_the_interval_is_warned_about(host, caplog):
    sampler = host.sampler(interval=0.01)
    evaluate = sampler.evaluate_once

    def slow() -> server.Snapshot:
        time.sleep(0.03)
        return evaluate()

    sampler.evaluate_once = slow  # type: ignore[method-assign]
    running = asyncio.create_task(sampler.run())
    try:
        async def warned() -> bool:
            return "longer than the 0.01s interval" in caplog.text

        await _wait_for(warned, "the warning")
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


def test_an_evaluation_that_raises_system_exit_ends_the_sampler_with_it(host):
    """As from a task of its own: asyncio hands SystemExit out of the loop (here, out of asyncio.run)."""
    sampler = host.sampler(interval=0.01)

    def exits() -> server.Snapshot:
        raise SystemExit(3)

    sampler.evaluate_once = exits  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        asyncio.run(asyncio.wait_for(sampler.run(), 10))  # a bound on a hang
    assert sampler.latest is None and sampler.failures == 0


def test_sampler_refuses_an_interval_that_is_not_positive(host):
    with pytest.raises(ValueError, match="interval must be positive"):
        host.sampler(interval=0)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("br;q=1.0, GZIP;q=0.5", True),
        ("*", True),
        ("identity", False),
        ("", False),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("gzip;q=nonsense", False),
    ],
)
def test_accepts_gzip_reads_the_accept_encoding_header(header, expected):
    assert expected == server.accepts_gzip(header)


# ------------------------------------------------------------------------------------------------ the real process
def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def wait_until_healthy(url: str) -> None:
    deadline = time.monotonic() + 30
    while get(url + "healthz")[0] != 200:
        if time.monotonic() > deadline:
            raise AssertionError("numawatch serve never became healthy")
        time.sleep(0.05)


@pytest.mark.slow
def test_serve_process_answers_metrics_healthz_and_landing_page_then_stops_on_sigterm(fake_host):
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root) as (process, url):
        assert url.startswith("http://127.0.0.1:")
        wait_until_healthy(url)
        status, headers, body = get(url + "metrics", {"Accept-Encoding": "gzip"})
        om_status, om_headers, om_body = get(url + "metrics", {"Accept": PROMETHEUS_2_ACCEPT})
        landing = get(url)

        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=20)

    assert status == 200
    assert headers["Content-Type"] == CONTENT_TYPE
    text = gzip.decompress(body).decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"numawatch_drift", "numawatch_source_up", "numawatch_build_info"} <= names
    assert "numawatch_source_up{source=\"cgroups\"} 0.0" in text
    assert (om_status, om_headers["Content-Type"]) == (200, OPENMETRICS_CONTENT_TYPE)
    assert {family.name for family in parse_openmetrics(om_body.decode())} == names
    assert landing[0] == 200
    assert b'<a href="metrics">' in landing[2]
    assert returncode == 0


def scrape(url: str) -> dict[str, list]:
    """Family name -> samples, scraped over HTTP as Prometheus would (gzip accepted)."""
    status, headers, body = get(url + "metrics", {"Accept-Encoding": "gzip"})
    assert status == 200
    text = gzip.decompress(body).decode() if headers.get("Content-Encoding") == "gzip" else body.decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def wait_for_scrape(url: str, predicate, what: str) -> dict[str, list]:
    deadline = time.monotonic() + 30
    while True:
        families = scrape(url)
        if predicate(families):
            return families
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def drifting_checks(families: dict[str, list]) -> set[str]:
    return {sample.labels["check"] for sample in families["numawatch_drift"]}


@pytest.mark.slow
def test_serve_process_exports_planted_drift_and_drops_it_once_the_tree_is_repaired(fake_host):
    node = reference_node(fake_host)
    node.split_across_nodes()
    node.set_topology_manager_policy("best-effort")

    with numawatch_serve(fake_host.root) as (process, url):
        wait_until_healthy(url)
        drifting = scrape(url)
        node.pin(VLLM, VLLM.exclusive, mems={0})
        node.set_topology_manager_policy("single-numa-node")
        repaired = wait_for_scrape(url, lambda families: not families["numawatch_drift"], "the drift to disappear")
        landing = get(url)[2].decode()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0

    assert {"container_numa_split", "kubelet_topology_manager_policy"} <= drifting_checks(drifting)
    split = next(s for s in drifting["numawatch_drift"] if s.labels["check"] == "container_numa_split")
    assert split.labels["pod"] == "vllm-llama-0"
    assert split.labels["severity"] == "critical"
    counts = {s.labels["check"]: s.value for s in repaired["numawatch_drift_findings"]}
    assert counts["container_numa_split"] == 0
    assert counts["kubelet_topology_manager_policy"] == 0
    vllm = {s.labels["numa_node"]: s.value for s in repaired["numawatch_container_cpus"]
            if s.labels["pod"] == "vllm-llama-0"}
    assert vllm == {"0": len(VLLM.exclusive)}
    [config] = repaired["numawatch_kubelet_config_info"]
    assert config.labels["topology_manager_policy"] == "single-numa-node"
    assert {s.labels["gpu"] for s in repaired["numawatch_gpu_info"] if s.labels["pod"] == "vllm-llama-0"} == {
        gpu.pci_address for gpu in VLLM.gpus
    }
    assert "No findings" in landing


@pytest.mark.slow
def test_serve_process_stops_cleanly_on_sigint(fake_host):
    with numawatch_serve(fake_host.root) as (process, url):
        wait_until_healthy(url)
        os.kill(process.pid, signal.SIGINT)
        returncode = process.wait(timeout=20)
        stderr = process.stderr.read()

    assert returncode == 0
    assert "Traceback" not in stderr


def _cpus_allowed(pid: int) -> frozenset[int]:
    from numawatch.cpuset import parse_cpulist

    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpulist(line.split(":", 1)[1])
    raise AssertionError(f"no Cpus_allowed_list in /proc/{pid}/status")


def _thread_cpus(pid: int) -> set[frozenset[int]]:
    return {_cpus_allowed_task(pid, tid) for tid in os.listdir(f"/proc/{pid}/task")}


def _cpus_allowed_task(pid: int, tid: str) -> frozenset[int]:
    from numawatch.cpuset import parse_cpulist

    text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    return parse_cpulist(text.split("Cpus_allowed_list:", 1)[1].splitlines()[0])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to tell pinned from unpinned")
@pytest.mark.slow
def test_serve_pins_every_thread_to_the_housekeeping_cpus_of_the_host_it_reads(fake_host):
    # The reference node isolates all but the first core of each socket: housekeeping CPUs 0, 8, 16 and 24. Of
    # those, this machine has CPU 0, so that is where every thread of numawatch must end up.
    node = reference_node(fake_host)
    housekeeping = node.read().topology.housekeeping
    expected = housekeeping & os.sched_getaffinity(0)
    assert expected and expected != os.sched_getaffinity(0)
    with numawatch_serve(fake_host.root) as (process, url):
        wait_until_healthy(url)
        assert _thread_cpus(process.pid) == {frozenset(expected)}
        exposition = get(url + "metrics")[2].decode()
    assert 'numawatch_self_cpus{' in exposition


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to tell pinned from unpinned")
@pytest.mark.slow
def test_serve_with_no_self_pin_keeps_the_affinity_it_was_started_with(fake_host):
    reference_node(fake_host)
    with numawatch_serve(fake_host.root, "--no-self-pin") as (process, url):
        wait_until_healthy(url)
        assert _cpus_allowed(process.pid) == frozenset(os.sched_getaffinity(0))
