"""`numawatch serve`: the aiohttp exporter (``/metrics``, ``/healthz`` and a small landing page at ``/``).

A background sampler evaluates the host every ``interval`` seconds in a worker thread (file reads block; the event
loop never does) and renders the exposition once per evaluation. Scrapes are answered from those bytes, plain or
gzip, so a scrape costs a memory copy however many Prometheus replicas scrape and however big the host is.

That departs from prometheus/docs writing_exporters' "scrape synchronously" on purpose: an evaluation reads
thousands of cgroup files on a large node and its cost must not multiply with scrapers, nor may two scrapes race
on the reader's cache. ``numawatch_last_evaluation_timestamp_seconds`` says how old the exposition is.

State lives on the ``Application`` under typed ``web.AppKey``s (aiohttp's "no singletons"), and the sampler's task
is started and stopped by a ``cleanup_ctx``, so tests build as many apps as they like.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import html
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from aiohttp import web

from numawatch import __version__, metrics
from numawatch.checks import Check, Evaluation, evaluate
from numawatch.host import HostReader
from numawatch.intent import Intent
from numawatch.report import subject, summary, timestamp

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 15.0
# /healthz fails when the last evaluation is this many intervals old (and at least STALE_MIN_SECONDS): the sampler
# is stuck (a read blocked in the kernel, a hung mount), and a restart by the liveness probe is the cure.
STALE_INTERVALS = 5
STALE_MIN_SECONDS = 60.0


@dataclass(frozen=True)
class Snapshot:
    """One finished evaluation and its exposition, rendered and compressed once."""

    evaluation: Evaluation
    body: bytes
    body_gzip: bytes
    finished: float  # Unix time
    duration_seconds: float


class Sampler:
    """Evaluates the host on a fixed schedule and keeps the latest ``Snapshot``."""

    def __init__(
        self,
        reader: HostReader,
        intent: Intent,
        interval: float = DEFAULT_INTERVAL,
        checks: Iterable[Check] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.reader = reader
        self.intent = intent
        self.interval = interval
        self.checks = tuple(checks) if checks is not None else None
        self.stats = metrics.EvaluationStats()
        self.latest: Snapshot | None = None
        self.failures = 0

    def evaluate_once(self) -> Snapshot:
        """Read, judge and render (blocking: runs in a worker thread, one at a time)."""
        start = time.perf_counter()
        host = self.reader.read()
        evaluation = evaluate(host, self.intent, self.checks)
        duration = time.perf_counter() - start
        finished = time.time()
        self.stats.observe(duration, finished)
        body = metrics.render(evaluation, self.stats)
        # Level 6 is zlib's default trade-off; the body is compressed once per evaluation, not per scrape.
        return Snapshot(evaluation, body, gzip.compress(body, compresslevel=6), finished, duration)

    async def refresh(self) -> Snapshot | None:
        """One evaluation off the event loop; on failure keep serving the previous snapshot."""
        try:
            snapshot = await asyncio.to_thread(self.evaluate_once)
        except Exception:
            self.failures += 1
            log.exception("evaluation failed; still serving the previous one")
            return None
        previous = self.latest
        self.latest = snapshot
        _log_change(previous, snapshot)
        return snapshot

    async def run(self) -> None:
        """Evaluate now, then every ``interval`` seconds (start to start) until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self.refresh()
            elapsed = loop.time() - started
            if elapsed > self.interval:
                log.warning("evaluation took %.2fs, longer than the %.2fs interval", elapsed, self.interval)
            await asyncio.sleep(max(0.0, self.interval - elapsed))

    def stale_after(self) -> float:
        return max(STALE_INTERVALS * self.interval, STALE_MIN_SECONDS)


def _log_change(previous: Snapshot | None, current: Snapshot) -> None:
    count = len(current.evaluation.findings)
    log.debug("evaluation finished in %.3fs with %d findings", current.duration_seconds, count)
    if previous is None or len(previous.evaluation.findings) != count:
        log.info("%s", summary(current.evaluation))


SAMPLER = web.AppKey("sampler", Sampler)


async def _run_sampler(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[SAMPLER].run(), name="numawatch-sampler")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def make_app(sampler: Sampler, *, run_sampler: bool = True) -> web.Application:
    """The exporter's application; ``run_sampler=False`` leaves evaluating to the caller (tests)."""
    app = web.Application()
    app[SAMPLER] = sampler
    if run_sampler:
        app.cleanup_ctx.append(_run_sampler)
    app.router.add_get("/", landing_page)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    return app


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding header allows gzip (RFC 9110 §12.5.3: ``q=0`` means "not acceptable")."""
    for item in header.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "*"):
            continue
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        return quality > 0
    return False


async def metrics_handler(request: web.Request) -> web.Response:
    snapshot = request.app[SAMPLER].latest
    if snapshot is None:
        return web.Response(
            status=503, text="the first evaluation has not finished yet\n", headers={"Retry-After": "1"}
        )
    # Headers set directly: aiohttp's content_type= argument rejects the ';' parameters of the exposition type.
    headers = {"Content-Type": metrics.CONTENT_TYPE, "Vary": "Accept-Encoding"}
    if accepts_gzip(request.headers.get("Accept-Encoding", "")):
        headers["Content-Encoding"] = "gzip"
        return web.Response(body=snapshot.body_gzip, headers=headers)
    return web.Response(body=snapshot.body, headers=headers)


async def healthz(request: web.Request) -> web.Response:
    sampler = request.app[SAMPLER]
    snapshot = sampler.latest
    if snapshot is None:
        return web.Response(status=503, text="starting: the first evaluation has not finished yet\n")
    age = time.time() - snapshot.finished
    if age > sampler.stale_after():
        return web.Response(status=503, text=f"stale: the last evaluation finished {age:.0f}s ago\n")
    return web.Response(text="ok\n")


def _cell(value: object) -> str:
    return html.escape(str(value), quote=True)


def render_landing_page(snapshot: Snapshot | None) -> str:
    """The HTML at ``/``: links, then the current findings and the sources (every value escaped)."""
    head = (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>numawatch</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:.2em .8em;text-align:left;"
        "vertical-align:top}</style></head>\n<body>\n"
        f"<h1>numawatch {_cell(__version__)}</h1>\n"
        "<p>NUMA pinning drift detector. <a href=\"metrics\">Metrics</a> &middot; "
        "<a href=\"healthz\">Health</a></p>\n"
    )
    if snapshot is None:
        return head + "<p>The first evaluation has not finished yet.</p>\n</body></html>\n"
    evaluation = snapshot.evaluation
    parts = [
        head,
        f"<p>{_cell(summary(evaluation))} Last evaluation: {_cell(timestamp(snapshot.finished))}, "
        f"intent: {_cell(evaluation.intent.source)}.</p>\n",
        "<h2>Findings</h2>\n",
    ]
    if evaluation.findings:
        parts.append("<table>\n<tr><th>severity</th><th>check</th><th>subject</th><th>message</th></tr>\n")
        for finding in evaluation.findings:
            parts.append(
                f"<tr><td>{_cell(finding.severity)}</td><td>{_cell(finding.check)}</td>"
                f"<td>{_cell(subject(finding.labels))}</td><td>{_cell(finding.message)}</td></tr>\n"
            )
        parts.append("</table>\n")
    else:
        parts.append("<p>None.</p>\n")
    if evaluation.not_evaluated:
        parts.append("<h2>Not evaluated</h2>\n<table>\n")
        for item in evaluation.not_evaluated:
            parts.append(f"<tr><td>{_cell(item.check)}</td><td>{_cell(item.reason)}</td></tr>\n")
        parts.append("</table>\n")
    parts.append("<h2>Sources</h2>\n<table>\n")
    for status in evaluation.host.statuses.values():
        state = "up" if status.up else "down"
        parts.append(f"<tr><td>{_cell(status.name)}</td><td>{state}</td><td>{_cell(status.reason)}</td></tr>\n")
    parts.append("</table>\n</body></html>\n")
    return "".join(parts)


async def landing_page(request: web.Request) -> web.Response:
    body = render_landing_page(request.app[SAMPLER].latest)
    return web.Response(text=body, content_type="text/html")


async def serve(
    app: web.Application, host: str, port: int, *, on_listening: Callable[[list[str]], None] | None = None
) -> None:
    """Listen until SIGTERM or SIGINT, then shut down cleanly (the sampler's cleanup_ctx runs)."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        if on_listening is not None:
            on_listening([_url(address) for address in runner.addresses])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            await stop.wait()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
        log.info("shutting down")
    finally:
        await runner.cleanup()


def _url(address: object) -> str:
    """http://host:port/ for a bound socket address (IPv4 pair or IPv6 4-tuple)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = str(address[0]), address[1]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
    return str(address)
