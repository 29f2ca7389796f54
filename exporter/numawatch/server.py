"""`numawatch serve`: the aiohttp exporter (``/metrics``, ``/healthz`` and a small landing page at ``/``).

A background sampler evaluates the host every ``interval`` seconds in a worker thread (file reads block; the event
loop never does) and builds its metric families once. Each format a scraper asks for (the text format or
OpenMetrics, plain or gzip, by its ``Accept`` and ``Accept-Encoding``) is written at most once per evaluation and
scrapes are answered from those bytes, so a scrape costs a memory copy however many Prometheus replicas scrape and
however big the host is. A format asked for since the previous evaluation is written with the next evaluation, in
its thread (the common case: Prometheus scraping at about the interval, answered at once); any other is written in
a worker thread by the first scrape that wants it. A format nobody scrapes costs nothing: Prometheus asks for
OpenMetrics first, ``curl`` gets the text format, and writing both every evaluation would double the exposition's
cost.

That departs from prometheus/docs writing_exporters' "scrape synchronously" on purpose: an evaluation reads
thousands of cgroup files on a large node and its cost must not multiply with scrapers, nor may two scrapes race
on the reader's cache. ``numawatch_last_evaluation_timestamp_seconds`` says how old the exposition is.

State lives on the ``Application`` under typed ``web.AppKey``s (aiohttp's "no singletons"), and the sampler's task
is started and stopped by a ``cleanup_ctx``, so tests build as many apps as they like. Other long-lived parts (an
NVML session, a udev monitor) hand their own ``cleanup_ctx`` to ``make_app(contexts=...)``: they start before the
first evaluation and stop after the last.

Lifecycle guarantees (docs/security.md):

- SIGHUP reloads the intent file (and the web config file): an invalid new file keeps the old one, logs why and
  sets ``numawatch_intent_reload_success`` to 0; either way the host is evaluated again at once. One reload runs at
  a time and SIGHUPs that arrive meanwhile fold into one that runs next, so the newest SIGHUP always reads the files
  last; each read runs in a daemon thread and is given up after ``RELOAD_SECONDS`` (a hung mount, a FIFO).
- A change to those files (or to the certificates the web config names), a Kubernetes ConfigMap or Secret update
  included, is the same reload, asked for by ``filewatch.FileWatch`` from its own thread: the kubelet sends no SIGHUP.
- SIGTERM and SIGINT stop within a second: requests in flight get ``SHUTDOWN_GRACE_SECONDS``, and an evaluation
  stuck in a read (a hung mount) is left behind in its daemon thread instead of being waited for.
- A request is authenticated (basic auth, client certificate names) before it takes one of the
  ``--web.max-requests`` slots or has its body read; over the limit it is answered 503 at once. bcrypt runs in
  ``passwords.VerifierPool``'s threads, and a password verified once is remembered, so wrong passwords cannot make
  right ones wait.
- A client has ``--web.read-timeout`` seconds to send each request's headers (``connection.Connection``; from the
  request's first byte, on a kept-alive connection too) and body, if it announces one, and ``--web.write-timeout``
  seconds to take the response; then the connection is closed. A stalled or slow client therefore holds a socket
  for a bounded time and no request slot while its headers are incomplete.
- With a web config file: TLS (optionally requiring verified client certificates), basic auth against bcrypt
  hashes (``/healthz`` excepted, so probes need no password) and the configured security headers on every answer,
  refusals and malformed requests included. Neither a password nor any header value is ever logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import signal
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from numawatch import __version__, metrics
from numawatch.allocator import release_free_memory
from numawatch.background import Repeating, in_daemon_thread
from numawatch.checks import Check, Evaluation, evaluate
from numawatch.collectors import Collectors
from numawatch.connection import Connection
from numawatch.descriptors import AcceptErrors, Connections, ReservingSocket, open_descriptors
from numawatch.filewatch import FileWatch
from numawatch.host import HostReader
from numawatch.hosttext import escaped
from numawatch.intent import Intent
from numawatch.logformat import fields
from numawatch.metrics import serving
from numawatch.passwords import PoolBusy, VerifierPool
from numawatch.refresh import DEFAULT_INTERVAL
from numawatch.report import subject, summary, timestamp
from numawatch.webconfig import (
    CLIENT_AUTH_TYPES,
    TLS_VERSIONS,
    BasicAuth,
    WebConfig,
    load_web_config,
    parse_basic_authorization,
    peer_allowed,
    ssl_context,
)

log = logging.getLogger(__name__)

# /healthz fails when the last evaluation is this many intervals old (and at least STALE_MIN_SECONDS): the sampler
# is stuck (a read blocked in the kernel, a hung mount), and a restart by the liveness probe is the cure.
STALE_INTERVALS = 5
STALE_MIN_SECONDS = 60.0

# node_exporter's --web.max-requests default. Scrapes are answered from memory in microseconds, so in practice only
# slow or stalled clients fill the slots, and they are bounded by the read and write timeouts.
DEFAULT_MAX_REQUESTS = 40
# Prometheus' default scrape_timeout: a client slower than that is not a scraper that will use the answer.
DEFAULT_READ_TIMEOUT = 10.0
DEFAULT_WRITE_TIMEOUT = 10.0
# What requests in flight get at SIGTERM before their connections are closed; the rest of the shutdown is
# cancelling the sampler, so the process is gone within a second.
SHUTDOWN_GRACE_SECONDS = 0.5
# Idle keep-alive connections between scrapes (Prometheus reuses them); well above every scrape interval in use.
KEEPALIVE_SECONDS = 75.0
# A GET has no business sending a body; one is read (to keep the connection usable) up to this size.
MAX_REQUEST_BODY = 64 * 1024
# zlib level of the compressed /metrics bodies: less than half the CPU of the default level 6 for a body only
# slightly larger (the exposition is repetitive text).
GZIP_LEVEL = 1
# How long a SIGHUP reload may take to read one file (the intent, the web config: a few hundred bytes from a
# ConfigMap or Secret) before it is given up as stuck in the kernel.
RELOAD_SECONDS = 5.0
# Reads given up but still stuck in their threads; while this many are, a reload fails at once rather than leave
# yet another thread behind.
MAX_STUCK_READS = 4

T = TypeVar("T")


@dataclass(frozen=True)
class BodyFormat:
    """One form of the /metrics body: text format or OpenMetrics, plain or gzip."""

    openmetrics: bool
    gzip: bool


BODY_FORMATS = tuple(BodyFormat(openmetrics, packed) for openmetrics in (False, True) for packed in (False, True))


class Bodies:
    """The /metrics bodies of one evaluation's families, each written (and compressed) on first demand, once.

    Thread-safe: scrapes ask from worker threads while the sampler may be writing the next evaluation's bodies;
    ``renderer`` locks each format's line cache and gzip parts, so it sees one write at a time.
    """

    def __init__(self, families: Sequence[metrics.Metric], renderer: metrics.Renderer) -> None:
        self._families = families
        self._renderer = renderer
        self._written: dict[BodyFormat, bytes] = {}
        # Each format's families' bytes, written once for its plain and gzip bodies alike. A gzip body is made from
        # them without the plain one being joined: a scraper asking for gzip only costs no plain copy of the body.
        self._segments: dict[bool, list[bytes]] = {}
        self._lock = threading.Lock()

    def ready(self, form: BodyFormat) -> bytes | None:
        """The body in ``form`` if it was written already (no work), else None."""
        return self._written.get(form)

    def get(self, form: BodyFormat) -> bytes:
        """The body in ``form``, written now when it was not yet (blocking: CPU only, never a host read)."""
        found = self._written.get(form)
        if found is not None:
            return found
        with self._lock:
            found = self._written.get(form)
            if found is None:
                segments = self._segments.get(form.openmetrics)
                if segments is None:
                    segments = self._renderer.write_segments(list(self._families), openmetrics=form.openmetrics)
                    self._segments[form.openmetrics] = segments
                # A gzip body: the renderer deflates only the families that changed since its last one of this form.
                found = (self._renderer.gzip(segments, openmetrics=form.openmetrics) if form.gzip
                         else b"".join(segments))
                self._written[form] = found
            return found


class Snapshot:
    """One finished evaluation and its exposition, each body written on first demand (``bodies``)."""

    def __init__(
        self,
        evaluation: Evaluation,
        bodies: Bodies,
        finished: float,  # Unix time
        duration_seconds: float,
    ) -> None:
        self.evaluation = evaluation
        self.bodies = bodies
        self.finished = finished
        self.duration_seconds = duration_seconds


@dataclass(frozen=True)
class ReloadStatus:
    """How the last intent reload went (start-up counts as a successful one)."""

    success: bool
    timestamp: float  # Unix time


@dataclass
class ReloadOutcomes:
    """How one configuration file's reloads went since start, for ``numawatch_config_*reload*``: whether the last
    one succeeded (start-up counts as a success) and how many failed or were refused."""

    succeeded: bool = True
    failures: int = 0

    def record(self, succeeded: bool) -> None:
        self.succeeded = succeeded
        if not succeeded:
            self.failures += 1


class Sampler:
    """Evaluates the host on a fixed schedule and keeps the latest ``Snapshot``."""

    def __init__(
        self,
        reader: HostReader,
        intent: Intent,
        interval: float = DEFAULT_INTERVAL,
        checks: Iterable[Check] | None = None,
        intent_loader: Callable[[], Intent] | None = None,
        collectors: Collectors | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.reader = reader
        self.intent = intent
        self.interval = interval
        self.checks = tuple(checks) if checks is not None else None
        # Loads the intent file again on SIGHUP (raises on an invalid file); None: the reference profile, no file.
        self.intent_loader = intent_loader
        self.collectors = collectors if collectors is not None else Collectors.defaults()
        self.reload_status = ReloadStatus(True, time.time())
        # Each configuration file's reloads by its ``file`` label: the intent's here, the web config's added by
        # ``make_app`` when the server has one.
        self.reload_outcomes: dict[str, ReloadOutcomes] = {"intent": ReloadOutcomes()}
        self.started = time.time()
        self.reads = BoundedReads()
        self._reloads_started = 0
        self._reloads_applied = 0  # the generation whose result is in force
        # Extra families rendered with every evaluation, by part (the server's own families: "http" is
        # Gate.metrics_families); one entry per part, so building a second app on this sampler never doubles a family.
        self.extra_metrics: dict[str, Callable[[], Iterable[metrics.Metric]]] = {}
        self.process = serving.ProcessFamilies()
        self.stats = metrics.EvaluationStats()
        self.renderer = metrics.Renderer(GZIP_LEVEL)  # locked per format (Bodies)
        # The body formats scrapes asked for since the last evaluation began: written with the next one.
        self._asked: set[BodyFormat] = set()
        self._asked_lock = threading.Lock()
        self._last_written: dict[BodyFormat, bytes] = {}  # for a body that cannot be written (write_body)
        self.latest: Snapshot | None = None
        # Why the last evaluation was not served (sources short of descriptors), None when it was.
        self.not_served: str | None = None
        self.failures = 0
        self._repeating: Repeating[Snapshot] | None = None  # run()'s evaluation thread, while it runs

    def evaluate_once(self) -> Snapshot:
        """Read, judge, build the families and write the bodies scraped since the previous evaluation (blocking:
        runs in a worker thread, one at a time)."""
        intent = self.intent  # read once: a reload may swap it while this evaluation runs
        start = time.perf_counter()
        host = self.reader.read()
        evaluation = evaluate(host, intent, self.checks)
        duration = time.perf_counter() - start
        finished = time.time()
        self.stats.observe(duration, finished)
        built = metrics.families(evaluation, self.stats, self.renderer.memory, self.collectors)
        families = [*built, *self.self_families()]
        bodies = Bodies(families, self.renderer)
        with self._asked_lock:
            asked, self._asked = self._asked, set()
        for form in BODY_FORMATS:  # a format's plain and gzip bodies are made from one write of its families
            if form in asked:
                bodies.get(form)
        release_free_memory()  # what the reading freed, back to the kernel (allocator.py)
        return Snapshot(evaluation, bodies, finished, duration)

    def body(self, snapshot: Snapshot, form: BodyFormat) -> bytes | None:
        """``snapshot``'s body in ``form`` if it is written (and remembered as asked for, so that the next
        evaluation writes it at once); None: ``write_body`` must write it first."""
        with self._asked_lock:
            self._asked.add(form)
        return snapshot.bodies.ready(form)

    async def write_body(self, snapshot: Snapshot, form: BodyFormat) -> bytes:
        """``snapshot``'s body in ``form``, written off the event loop. A body that cannot be written (a bug: the
        families are built already) is logged and answered with the last body of that form that could be."""
        def write() -> bytes:
            try:
                return snapshot.bodies.get(form)
            finally:
                release_free_memory()  # what writing freed (the line cache's last lines), as after an evaluation

        try:
            written = await in_daemon_thread(write, "numawatch-exposition")
        except Exception:
            self.failures += 1
            log.exception("writing the exposition failed; answering with the previous one")
            previous = self._last_written.get(form)
            if previous is None:
                raise
            return previous
        self._last_written[form] = written
        return written

    def self_families(self) -> list[metrics.Metric]:
        """The serve-only families: intent reloads, the server's parts (refused requests) and the process."""
        status = self.reload_status
        families = serving.intent_reload(status.success, status.timestamp)
        outcomes = {name: (outcome.succeeded, outcome.failures) for name, outcome in self.reload_outcomes.items()}
        families.extend(serving.config_reloads(outcomes, self.started))
        for extra in self.extra_metrics.values():
            families.extend(extra())
        families.extend(self.process.collect())
        return families

    async def refresh(self) -> Snapshot | None:
        """One evaluation off the event loop, now; on failure keep serving the previous snapshot."""
        try:
            snapshot = await in_daemon_thread(self.evaluate_once, "numawatch-evaluation")
        except Exception as error:
            self._failed(error)
            return None
        return self._take(snapshot)

    def _failed(self, error: Exception) -> None:
        self.failures += 1
        log.error("evaluation failed; still serving the previous one", exc_info=error)

    def _take(self, snapshot: Snapshot) -> Snapshot | None:
        """Serve ``snapshot`` from now on (on the event loop), unless sources were starved of descriptors."""
        starved = [status for status in snapshot.evaluation.host.statuses.values() if status.starved]
        if starved:
            # Sources down for want of a descriptor say nothing about the host: their findings would be missing,
            # and the node would look cleaner than it is.
            self.failures += 1
            self.not_served = (f"the evaluation at {timestamp(snapshot.finished)} was not served: source "
                               + "; ".join(f"{status.name}: {status.reason}" for status in starved))
            log.warning("%s; still serving the previous one", self.not_served)
            return None
        self.not_served = None
        previous = self.latest
        self.latest = snapshot
        _log_change(previous, snapshot)
        return snapshot

    async def run(self) -> None:
        """Evaluate now, then every ``interval`` seconds (start to start) or sooner when woken, until cancelled: in
        one daemon thread (``Repeating``), whose snapshots are taken here, on the event loop."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()  # only by an error that is not an Exception

        def take(snapshot: Snapshot | None, error: BaseException | None, seconds: float) -> None:
            if seconds > self.interval:
                log.warning("evaluation took %.2fs, longer than the %.2fs interval", seconds, self.interval)
            if isinstance(error, Exception):
                self._failed(error)
            elif error is not None:  # SystemExit and the like end the sampler, as they would end a task
                if not ended.done():
                    ended.set_exception(error)
            elif snapshot is not None:
                self._take(snapshot)

        repeating = Repeating(self.evaluate_once, self.interval, take, loop, "numawatch-evaluation")
        self._repeating = repeating
        repeating.start()
        try:
            await ended
        finally:
            repeating.stop()
            self._repeating = None

    def refresh_soon(self, sources: Iterable[str] | None = None) -> None:
        """Forget cached results (of ``sources``, or all) and evaluate as soon as possible: for SIGHUP and hotplug
        events. Call it on the event loop."""
        if sources is None:
            self.reader.invalidate()
        else:
            for name in sources:
                self.reader.invalidate(name)
        if self._repeating is not None:
            self._repeating.wake()

    async def reload(self) -> bool:
        """Load the intent file again (SIGHUP). An invalid file keeps the current intent; either way the host is
        evaluated again at once, so findings and ``numawatch_intent_reload_*`` follow right away.

        A reload that started before another one finished never overwrites it (``serve`` runs one at a time anyway;
        this holds for any caller): its result is dropped, and the status stays the newer one's.
        """
        self._reloads_started += 1
        generation = self._reloads_started
        success, failure, intent = True, "", None
        if self.intent_loader is not None:
            try:
                intent = await self.reads.read(self.intent_loader, "the intent file")
            except Exception as error:  # whatever is wrong with the new file, the old intent stays in force
                success, failure = False, " ".join(str(error).split())
        if generation < self._reloads_applied:
            log.info("an intent reload finished after a newer one; its result is dropped")
            return success
        self._reloads_applied = generation
        if not success:
            log.error("intent reload failed, still judging against %s: %s", self.intent.source, failure)
        elif intent is not None:
            self.intent = intent
            log.info("intent reloaded from %s", intent.source)
        self.reload_status = ReloadStatus(success, time.time())
        self.reload_outcomes["intent"].record(success)
        self.refresh_soon()
        return success

    def stale_after(self) -> float:
        return max(STALE_INTERVALS * self.interval, STALE_MIN_SECONDS)


REFUSAL_REASONS = ("max_requests", "read_timeout", "write_timeout", "password_checks", "descriptors")


class ReadTimedOut(Exception):
    """A reload's read did not finish in time (or too many earlier ones are still stuck); one line."""


class BoundedReads:
    """Blocking reads of files on SIGHUP (the intent, the web config), each in a daemon thread with a time limit.

    A read stuck in the kernel (a hung NFS or FUSE mount, a FIFO) is given up after ``seconds`` and its thread is left
    behind: it blocks neither shutdown nor the next reload, and what it returns some day is dropped. While
    ``max_stuck`` such threads are still stuck, a read fails at once instead of leaving one more.
    """

    def __init__(self, seconds: float = RELOAD_SECONDS, max_stuck: int = MAX_STUCK_READS) -> None:
        self.seconds = seconds
        self.max_stuck = max_stuck
        self._stuck: list[threading.Event] = []

    async def read(self, function: Callable[[], T], what: str) -> T:
        self._stuck = [done for done in self._stuck if not done.is_set()]
        if len(self._stuck) >= self.max_stuck:
            raise ReadTimedOut(f"not reading {what}: {len(self._stuck)} earlier reads are still stuck")
        done = threading.Event()

        def tracked() -> T:
            try:
                return function()
            finally:
                done.set()

        deadline = asyncio.timeout(self.seconds)
        try:
            async with deadline:
                return await in_daemon_thread(tracked, "numawatch-reload")
        except TimeoutError:
            if not deadline.expired():
                raise  # the read itself raised it (ETIMEDOUT from a network file system)
            self._stuck.append(done)
            raise ReadTimedOut(f"reading {what} did not finish within {self.seconds:g}s (a hung mount or a FIFO?); "
                               "given up") from None


def _log_change(previous: Snapshot | None, current: Snapshot) -> None:
    count = len(current.evaluation.findings)
    log.debug("evaluation finished in %.3fs with %d findings", current.duration_seconds, count)
    if previous is None or len(previous.evaluation.findings) != count:
        log.info("%s", summary(current.evaluation))


SAMPLER = web.AppKey("sampler", Sampler)


@dataclass(frozen=True)
class Limits:
    """What one client may cost: ``--web.max-requests`` (0: no limit) and the two timeouts."""

    max_requests: int = DEFAULT_MAX_REQUESTS
    read_timeout: float = DEFAULT_READ_TIMEOUT
    write_timeout: float = DEFAULT_WRITE_TIMEOUT


@dataclass
class Gate:
    """Everything a request passes before and after its handler: the concurrency limit, the request-read and
    response-write deadlines, basic auth, client certificate names and the configured security headers.

    ``web_config_path`` is re-read on SIGHUP or a change (``reload``): new certificates, users and headers apply to
    the next connection; a file that is now invalid, that turns TLS on or off, or that would remove authentication
    (every basic-auth user, or the requirement of a verified client certificate or of its names) is refused and the
    old one kept: a file emptied by mistake or by someone who can write it must not open the server. Only a restart
    takes authentication away.
    """

    limits: Limits = field(default_factory=Limits)
    web_config: WebConfig | None = None
    web_config_path: str | None = None
    in_flight: int = 0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSAL_REASONS, 0))
    counting_since: float = field(default_factory=time.time)  # Unix time ``refused`` started counting
    ssl_context: ssl.SSLContext | None = None
    passwords: VerifierPool = field(default_factory=VerifierPool)
    reads: BoundedReads = field(default_factory=BoundedReads)
    reload_outcomes: ReloadOutcomes = field(default_factory=ReloadOutcomes)
    # The connections and the descriptors they may take (descriptors.Connections), and accept errors.
    connections: Connections = field(default_factory=Connections.of_this_process)
    accept_errors: AcceptErrors = field(default_factory=lambda: AcceptErrors(DEFAULT_INTERVAL))
    _auth: BasicAuth | None = None
    _reloads_started: int = 0
    _reloads_applied: int = 0

    def __post_init__(self) -> None:
        if self.web_config is not None:
            if self.ssl_context is None:
                self.ssl_context = ssl_context(self.web_config)
            self._auth = BasicAuth(self.web_config.users) if self.web_config.users else None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def metrics_families(self) -> list[metrics.Metric]:
        refused = {**self.refused, "descriptors": self.connections.refused}
        return [serving.requests_refused(refused, self.counting_since),
                serving.accept_errors(self.accept_errors.count, self.counting_since)]

    async def reload(self) -> bool:
        """Re-read the web config file (SIGHUP); False, logged, when the new one is refused. As with
        ``Sampler.reload``, a reload that finishes after a newer one changes nothing."""
        if self.web_config_path is None:
            return True
        self._reloads_started += 1
        generation = self._reloads_started
        path = self.web_config_path
        try:
            config = await self.reads.read(lambda: load_web_config(path), "the web config file")
        except Exception as error:  # WebConfigError's message is one safe line; anything else is a bug, said so
            log.error("web config reload failed, keeping the previous one: %s", " ".join(str(error).split()))
            self.reload_outcomes.record(False)
            return False
        if generation < self._reloads_applied:
            log.info("a web config reload finished after a newer one; its result is dropped")
            return False
        refusal = self._refused_change(config)
        if refusal is not None:
            log.error("web config reload refused, keeping the previous one: %s needs a restart of numawatch", refusal)
            self.reload_outcomes.record(False)
            return False
        self._reloads_applied = generation
        self.reload_outcomes.record(True)
        if config.tls is not None and self.ssl_context is not None:
            _update_ssl_context(self.ssl_context, config)
        self.web_config = config
        self._auth = BasicAuth(config.users) if config.users else None
        log.info("web config reloaded from %s", self.web_config_path)
        return True

    def _refused_change(self, config: WebConfig) -> str | None:
        """What a reloaded ``config`` would change that only a restart may (None: nothing)."""
        if (config.tls is None) != (self.ssl_context is None):
            return "turning TLS on or off"
        if self._auth is not None and not config.users:
            return "removing basic auth (every user)"
        before = self.web_config.tls if self.web_config is not None else None
        after = config.tls
        if before is not None and after is not None:
            # CERT_NONE < CERT_OPTIONAL < CERT_REQUIRED: what a client must show.
            if CLIENT_AUTH_TYPES[after.client_auth_type] < CLIENT_AUTH_TYPES[before.client_auth_type]:
                return f"weakening client certificates from {before.client_auth_type} to {after.client_auth_type}"
            if before.client_allowed_sans and not after.client_allowed_sans:
                return "removing client_allowed_sans"
        return None

    def count_read_timeout(self) -> None:
        self.refused["read_timeout"] += 1

    def apply_headers(self, response: web.StreamResponse) -> None:
        """The configured security headers, on every answer numawatch gives (connection.Connection's too)."""
        if self.web_config is not None:
            for name, value in self.web_config.headers.items():
                response.headers[name] = value

    @web.middleware
    async def middleware(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        # Who is asking comes first: an unauthenticated client never holds a slot, nor makes numawatch read its body.
        refusal = await self._refusal(request)
        if refusal is not None:
            return await self._send(request, refusal, close=True)
        limit = self.limits.max_requests
        if limit and self.in_flight >= limit:
            self.refused["max_requests"] += 1
            response = web.Response(status=503, text=f"too many requests in flight (--web.max-requests={limit})\n",
                                    headers={"Retry-After": "1"})
            return await self._send(request, response)
        self.in_flight += 1
        try:
            return await self._handle(request, handler)
        finally:
            self.in_flight -= 1

    async def _refusal(self, request: web.Request) -> web.Response | None:
        """401, 403 or 503 (too many password checks waiting) for a request that may not go further; else None."""
        auth = self._auth
        if auth is not None and request.path != "/healthz":
            verdict = await self._password_verdict(request, auth)
            if verdict is None:
                self.refused["password_checks"] += 1
                return web.Response(status=503, text="too many password checks waiting\n",
                                    headers={"Retry-After": "1"})
            if not verdict:
                return web.Response(status=401, text="unauthorised\n",
                                    headers={"WWW-Authenticate": 'Basic realm="numawatch", charset="UTF-8"'})
        if self.web_config is not None and not peer_allowed(
            self.web_config, request.transport.get_extra_info("peercert") if request.transport else None
        ):
            return web.Response(status=403, text="client certificate not allowed\n")
        return None

    async def _password_verdict(self, request: web.Request, auth: BasicAuth) -> bool | None:
        """Whether the request's basic-auth credentials are right; None when the password pool is full."""
        credentials = parse_basic_authorization(request.headers.get("Authorization", ""))
        if credentials is None:
            return False
        user, password = credentials
        if auth.cached(user, password):
            return True
        client = request.remote or ""
        try:
            verified = await self.passwords.run(lambda: auth.verify(user, password), client)
        except PoolBusy:
            return None
        if verified:
            self.passwords.succeeded(client)
        else:
            self.passwords.failed(client)
        return verified

    async def _handle(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        response: web.StreamResponse
        if request.body_exists:
            # Read what the client announced before answering, under the read deadline: a client that sends
            # half a request holds its slot only this long.
            refusal = await self._read_body(request)
            if refusal is not None:
                return await self._send(request, refusal)
        try:
            response = await handler(request)
        except web.HTTPException as error:  # 404, 405: answered like the rest, with the headers
            response = web.Response(status=error.status, text=error.text, headers=error.headers)
        return await self._send(request, response)

    async def _read_body(self, request: web.Request) -> web.Response | None:
        """Read the announced body; an answer (408, 413, 400) when that fails, None when it is in."""
        try:
            async with asyncio.timeout(self.limits.read_timeout):
                await request.read()
        except TimeoutError:
            self.refused["read_timeout"] += 1
            log.debug("request body from %s not received within %gs", request.remote, self.limits.read_timeout)
            response = web.Response(status=408, text="request not received in time\n")
        except web.HTTPRequestEntityTooLarge:
            response = web.Response(status=413, text=f"request body larger than {MAX_REQUEST_BODY} bytes\n")
        except (web.RequestPayloadError, ConnectionError) as error:  # a malformed body, or the client went away
            log.debug("request body from %s not read: %s", request.remote, type(error).__name__)
            response = web.Response(status=400, text="malformed request body\n")
        else:
            return None
        response.force_close()
        return response

    async def _send(self, request: web.Request, response: web.StreamResponse, *,
                    close: bool = False) -> web.StreamResponse:
        """Send ``response`` with the security headers, under the write deadline; the connection is closed after it
        when the request's body was never read, or its end is not known (``connection.RequestFraming``), and
        with ``close`` (a refused client: 401, 403). A body left unread is never read afterwards either (aiohttp
        would linger, reading it for up to 10 s): the connection is closed as soon as the answer is written."""
        self.apply_headers(response)
        unread = (request.body_exists and not request.content.is_eof()) or "Transfer-Encoding" in request.headers
        if close or unread:
            response.force_close()
        if response.prepared:
            return response
        # Send it here, under the write deadline, rather than after the middleware returns: a client that does not
        # read its answer keeps its request slot only this long.
        try:
            async with asyncio.timeout(self.limits.write_timeout):
                await response.prepare(request)
                await response.write_eof()
        except TimeoutError:
            self.refused["write_timeout"] += 1
            log.debug("response to %s not taken within %gs; closing", request.remote, self.limits.write_timeout)
            if request.transport is not None:
                request.transport.abort()
        except ConnectionError:  # the client went away first: nobody to answer, nothing to log but that
            log.debug("%s closed the connection before its answer", request.remote)
        if (close or unread) and request.protocol is not None:
            request.protocol.force_close()  # the answer is in the transport's buffer: written, then closed
        return response


def _update_ssl_context(context: ssl.SSLContext, config: WebConfig) -> None:
    """Apply a reloaded web config to the listening socket's context (affects new connections only)."""
    tls = config.tls
    assert tls is not None
    ssl_context(config)  # validated already; builds a throwaway context so a bad pair never reaches the live one
    context.load_cert_chain(tls.cert_file, tls.key_file, password=lambda: b"")
    if tls.client_ca_file is not None:
        # OpenSSL can add trusted CAs to a live context but not remove them; a removed CA needs a restart.
        context.load_verify_locations(cafile=tls.client_ca_file)
    context.verify_mode = CLIENT_AUTH_TYPES[tls.client_auth_type]
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    context.maximum_version = TLS_VERSIONS[tls.max_version] if tls.max_version else ssl.TLSVersion.MAXIMUM_SUPPORTED


GATE = web.AppKey("gate", Gate)


async def _run_sampler(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[SAMPLER].run(), name="numawatch-sampler")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


CleanupContext = Callable[[web.Application], AsyncIterator[None]]


def make_app(
    sampler: Sampler,
    *,
    run_sampler: bool = True,
    gate: Gate | None = None,
    contexts: Iterable[CleanupContext] = (),
) -> web.Application:
    """The exporter's application; ``run_sampler=False`` leaves evaluating to the caller (tests).

    ``contexts`` are aiohttp cleanup contexts of parts that live as long as the server (an NVML session, a udev
    monitor): they are entered before the sampler starts and left after it stopped.
    """
    gate = gate if gate is not None else Gate()
    app = web.Application(middlewares=[gate.middleware], client_max_size=MAX_REQUEST_BODY)
    app[SAMPLER] = sampler
    app[GATE] = gate
    sampler.extra_metrics["http"] = gate.metrics_families
    if gate.web_config_path is not None:
        sampler.reload_outcomes["web"] = gate.reload_outcomes
    app.cleanup_ctx.extend(contexts)
    if run_sampler:
        app.cleanup_ctx.append(_run_sampler)
    app.router.add_get("/", landing_page)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    return app


async def reload(app: web.Application) -> None:
    """What SIGHUP does: the web config, then the intent (which also evaluates again at once)."""
    gate = app.get(GATE)
    if gate is not None:
        await gate.reload()
    await app[SAMPLER].reload()


class Reloader:
    """SIGHUP's reloads, one at a time: a SIGHUP that arrives while one runs is done once it finished, and several
    that arrive meanwhile fold into that one. So the newest SIGHUP's reload always reads the files last, after the
    change that prompted it, and its result is what stays in force."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._asked = 0
        self._lock = asyncio.Lock()

    async def reload(self) -> None:
        self._asked += 1
        mine = self._asked
        async with self._lock:
            if mine != self._asked:
                return  # a newer SIGHUP is waiting too: its reload, after this one would have, covers both
            await reload(self._app)


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


@dataclass(frozen=True)
class Exposition:
    """A format /metrics can answer in: whether it is OpenMetrics, and the Content-Type that says so."""

    openmetrics: bool
    content_type: str


TEXT = Exposition(False, metrics.CONTENT_TYPE)
OPENMETRICS = Exposition(True, metrics.OPENMETRICS_CONTENT_TYPE)
# OpenMetrics 0.0.1 is the draft Prometheus still lists after 1.0.0: the same text; the answer names the version asked.
OPENMETRICS_0_0_1 = Exposition(True, "application/openmetrics-text; version=0.0.1; charset=utf-8")


def _accepted(media_range: str) -> tuple[Exposition | None, float]:
    """What one media range of an Accept header asks for (None: nothing we write) and its quality."""
    kind, *params = (part.strip() for part in media_range.split(";"))
    parameters: dict[str, str] = {}
    for param in params:
        name, _, value = param.partition("=")
        parameters[name.strip().lower()] = value.strip().strip('"')
    try:
        quality = float(parameters.get("q", "1"))
    except ValueError:
        quality = 0.0
    kind = kind.lower()
    version = parameters.get("version", "")
    if kind == "application/openmetrics-text":
        if version in ("", "1.0.0"):
            return OPENMETRICS, quality
        if version == "0.0.1":
            return OPENMETRICS_0_0_1, quality
        return None, quality  # 2.0.0 and later: not written (yet)
    if kind == "text/plain":
        # 1.0.0 differs from 0.0.4 only in allowing quoted UTF-8 names, which numawatch never uses: 0.0.4 is valid.
        return (TEXT if version in ("", "0.0.4", "1.0.0") else None), quality
    if kind in ("*/*", "text/*"):
        return TEXT, quality
    return None, quality  # protobuf, JSON...


def negotiate(accept: str) -> Exposition:
    """The format to answer an ``Accept`` header with: the acceptable one of highest quality, the first listed among
    equals (RFC 9110 §12.5.1; ``q=0`` is "not acceptable"). Without a header, or when nothing listed is something
    we write, the text format: what every Prometheus reads, and what client_python and promhttp answer too."""
    best, best_quality = TEXT, 0.0
    for media_range in accept.split(","):
        if not media_range.strip():
            continue
        exposition, quality = _accepted(media_range)
        if exposition is not None and quality > best_quality:
            best, best_quality = exposition, quality
    return best


async def metrics_handler(request: web.Request) -> web.Response:
    snapshot = request.app[SAMPLER].latest
    if snapshot is None:
        return web.Response(
            status=503, text="the first evaluation has not finished yet\n", headers={"Retry-After": "1"}
        )
    chosen = negotiate(request.headers.get("Accept", ""))
    packed = accepts_gzip(request.headers.get("Accept-Encoding", ""))
    form = BodyFormat(chosen.openmetrics, packed)
    sampler = request.app[SAMPLER]
    body = sampler.body(snapshot, form)
    if body is None:
        body = await sampler.write_body(snapshot, form)
    # Headers set directly: aiohttp's content_type= argument rejects the ';' parameters of the exposition type.
    headers = {"Content-Type": chosen.content_type, "Vary": "Accept, Accept-Encoding"}
    if packed:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


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
    """A value as page text: control characters escaped (``hosttext.escaped``: a terminal may show the page's
    source), then HTML's characters."""
    return html.escape(escaped(str(value)), quote=True)


def render_landing_page(snapshot: Snapshot | None, not_served: str | None = None) -> str:
    """The HTML at ``/``: links, why the last evaluation was not served if it was not (``Sampler.not_served``),
    then the current findings and the sources (every value escaped)."""
    head = (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>numawatch</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:.2em .8em;text-align:left;"
        "vertical-align:top}</style></head>\n<body>\n"
        f"<h1>numawatch {_cell(__version__)}</h1>\n"
        "<p>NUMA pinning drift detector. <a href=\"metrics\">Metrics</a> &middot; "
        "<a href=\"healthz\">Health</a></p>\n"
    )
    if not_served is not None:
        head += f"<p><strong>{_cell(not_served)}</strong></p>\n"
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
    if evaluation.not_applicable:
        parts.append("<h2>Not applicable on this host</h2>\n<table>\n")
        for absent in evaluation.not_applicable:
            parts.append(f"<tr><td>{_cell(absent.check)}</td><td>{_cell(absent.reason)}</td></tr>\n")
        parts.append("</table>\n")
    parts.append("<h2>Sources</h2>\n<table>\n")
    for status in evaluation.host.statuses.values():
        state = "up" if status.up else "down"
        parts.append(f"<tr><td>{_cell(status.name)}</td><td>{state}</td><td>{_cell(status.reason)}</td></tr>\n")
    parts.append("</table>\n</body></html>\n")
    return "".join(parts)


async def landing_page(request: web.Request) -> web.Response:
    sampler = request.app[SAMPLER]
    body = render_landing_page(sampler.latest, sampler.not_served)
    return web.Response(text=body, content_type="text/html")


async def serve(app: web.Application, sockets: Sequence[socket.socket], *, watch: FileWatch | None = None) -> None:
    """Listen on ``sockets`` (bound, from ``listen.bind``) until SIGTERM or SIGINT, then shut down cleanly (the cleanup
    contexts run). SIGHUP reloads, and so does a change ``watch`` notices in the intent or web config files.

    The sockets are taken over (detached: closing them afterwards does nothing) and closed on the way out."""
    gate = app.get(GATE) or Gate()
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE_SECONDS, **_HANDLER_OPTIONS)
    await runner.setup()
    listeners: list[asyncio.Server] = []
    reloads: set[asyncio.Task[None]] = set()
    # The listening sockets' accept keeps the evaluation's descriptors from clients (descriptors.ReservingSocket).
    gate.connections.baseline(open_descriptors())
    reserving = [ReservingSocket.adopt(sock, gate.connections) for sock in sockets]
    try:
        loop = asyncio.get_running_loop()
        manager = runner.server
        assert manager is not None

        def protocol() -> asyncio.Protocol:
            return Connection(manager, loop=loop, read_timeout=gate.limits.read_timeout, answer=gate.apply_headers,
                              timed_out=gate.count_read_timeout, connections=gate.connections, **_HANDLER_OPTIONS)

        gate.accept_errors.interval = app[SAMPLER].interval
        loop.set_exception_handler(gate.accept_errors)
        # Our own listeners rather than web.TCPSite, to make every connection a connection.Connection.
        for sock in reserving:
            listeners.append(await loop.create_server(
                protocol, sock=sock, ssl=gate.ssl_context, backlog=128,
                ssl_handshake_timeout=gate.limits.read_timeout if gate.ssl_context is not None else None,
            ))
        stop = asyncio.Event()
        reloader = Reloader(app)

        def ask_reload(why: str) -> None:
            log.info("%s: reloading", why)
            task = loop.create_task(reloader.reload(), name="numawatch-reload")
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        def changed(files: tuple[str, ...]) -> None:  # on the watch's thread
            with contextlib.suppress(RuntimeError):  # the loop closed: shutting down, nothing to reload
                loop.call_soon_threadsafe(ask_reload, f"{', '.join(files)} changed")

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        loop.add_signal_handler(signal.SIGHUP, ask_reload, "SIGHUP")
        if watch is not None:
            watch.start(changed)
        # Last, so that once it is logged SIGHUP reloads and SIGTERM stops (before, SIGHUP is ignored).
        for sock in reserving:
            address = sock.getsockname()
            log.info("Listening on", extra=fields(address=_address(address), url=_url(address, gate.scheme),
                                                  tls=gate.ssl_context is not None))
        try:
            await stop.wait()
        finally:
            if watch is not None:
                watch.stop()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
        log.info("shutting down")
    finally:
        for task in reloads:
            task.cancel()  # a read stuck in the kernel stays behind in its daemon thread
        for listener in listeners:
            listener.close()  # stop accepting; open connections are closed by the runner below
        for sock in reserving:
            sock.close()  # closed with its listener already, unless that was never made
        await runner.cleanup()


# How aiohttp's protocol is set up, for the runner's server and for every connection.Connection alike: no access log
# (it would hold client addresses and paths for nothing), and keep-alive between Prometheus' scrapes.
_HANDLER_OPTIONS: dict[str, Any] = {"access_log": None, "keepalive_timeout": KEEPALIVE_SECONDS}


def _address(address: object) -> str:
    """host:port ([host]:port for IPv6) of a bound socket address (IPv4 pair or IPv6 4-tuple)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = str(address[0]), address[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(address)


def _url(address: object, scheme: str = "http") -> str:
    """scheme://host:port/ for a bound socket address."""
    return f"{scheme}://{_address(address)}/"
