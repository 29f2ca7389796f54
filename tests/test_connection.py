"""``connection.RequestFraming`` (where a client's byte stream is, request by request: the read deadline depends on
it), the bcrypt pool and the basic-auth cache, and the generation rule of SIGHUP reloads, in-process."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import socket
import ssl
import threading

import bcrypt
import pytest
import trustme
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch import server
from numawatch.connection import RequestFraming
from numawatch.descriptors import ConnectionSocket
from numawatch.host import HostReader, SourceSpec
from numawatch.intent import REFERENCE
from numawatch.intentfile import parse_intent
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.passwords import PoolBusy, VerifierPool
from numawatch.paths import Paths
from numawatch.webconfig import BasicAuth, parse_web_config


# ------------------------------------------------------------------------------------------------ framing
def request(path: str = "/metrics", body: bytes = b"", headers: tuple[str, ...] = (), newline: bytes = b"\r\n",
            leading: bytes = b"") -> tuple[bytes, int]:
    """One request's bytes and where its head ends (just after the blank line)."""
    lines = [f"GET {path} HTTP/1.1".encode(), b"Host: x", *(header.encode() for header in headers)]
    if body:
        lines.append(f"Content-Length: {len(body)}".encode())
    head = leading + newline.join(lines) + newline + newline
    return head + body, len(head)


def positions(requests: list[tuple[bytes, int]]) -> tuple[bytes, list[tuple[int, int]]]:
    """The stream and each head's [first byte, end) in it."""
    stream, heads = b"", []
    for data, head_end in requests:
        heads.append((len(stream), len(stream) + head_end))
        stream += data
    return stream, heads


def test_a_whole_request_then_the_start_of_the_next_in_one_piece_leaves_the_second_incomplete():
    first, _ = request("/healthz")

    started, incomplete = RequestFraming().feed(first + b"GET /metrics HTTP/1.1\r\nHost:")

    assert (started, incomplete) == (True, True)


def test_a_body_is_not_taken_for_the_next_request():
    framing = RequestFraming()
    data, _ = request(body=b"GET / HTTP/1.1\r\n\r\n")  # a body that looks like a request

    assert framing.feed(data) == (True, False)
    assert framing.feed(b"G") == (True, True)


@pytest.mark.parametrize(
    "header",
    ["Transfer-Encoding: chunked", "Content-Length: 12abc", "Content-Length: -1", "Content-Length: " + "9" * 300],
    ids=["chunked", "not-a-number", "negative", "cut-off"],
)
def test_a_body_whose_end_is_not_known_makes_the_stream_opaque(header):
    framing = RequestFraming()
    data, _ = request(headers=(header,))

    assert framing.feed(data) == (True, False)
    # Opaque: nothing after it is taken for a request (Gate closes the connection after the answer).
    assert framing.feed(b"GET / HTTP/1.1\r\n") == (False, False)
    assert framing.feed(b"\r\nGET / HTTP/1.1\r\n") == (False, False)


def test_blank_lines_before_a_request_line_belong_to_that_request():
    framing = RequestFraming()

    assert framing.feed(b"\r\n\r\n") == (True, True)
    assert framing.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == (False, False)


def test_a_header_line_longer_than_what_is_kept_still_ends_where_it_ends():
    framing = RequestFraming()
    data, _ = request(headers=("X-Long: " + "a" * 100_000,), body=b"xyz")

    assert framing.feed(data) == (True, False)
    assert framing.feed(b"GET / HTTP/1.1\r\n") == (True, True)  # the next request is still seen


requests = st.builds(
    request,
    path=st.sampled_from(["/", "/metrics", "/healthz?x=1"]),
    body=st.binary(max_size=40),
    headers=st.lists(st.sampled_from(["Accept: */*", "X-Empty:", "Connection: keep-alive", "A:b"]), max_size=3)
    .map(tuple),
    newline=st.sampled_from([b"\r\n", b"\n"]),
    leading=st.sampled_from([b"", b"\r\n"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(requests, min_size=1, max_size=5), st.data())
@pytest.mark.slow
def test_framing_follows_any_split_of_any_sequence_of_requests(chosen, data):
    stream, heads = positions(chosen)
    cuts = [*sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))), len(stream)]
    framing = RequestFraming()
    done = 0
    for cut in cuts:
        if cut <= done:
            continue
        started, incomplete = framing.feed(stream[done:cut])
        assert started == any(done <= first < cut for first, _ in heads)
        assert incomplete == any(first < cut < end for first, end in heads)
        done = cut
    assert framing.feed(b"GET / HTTP/1.1\r\n\r\n") == (True, False)  # the stream is still followed


# ------------------------------------------------------------------------------------------------ passwords
async def test_the_pool_runs_checks_off_the_loop_and_refuses_more_than_may_wait():
    pool = VerifierPool(threads=1, max_waiting=2)
    release = threading.Event()
    threads: set[str] = set()

    def blocked() -> str:
        threads.add(threading.current_thread().name)
        release.wait(10)
        return "done"

    first = asyncio.create_task(pool.run(blocked))
    second = asyncio.create_task(pool.run(blocked))
    while pool.waiting < 2:
        await asyncio.sleep(0.01)
    with pytest.raises(PoolBusy):
        await pool.run(blocked)
    release.set()

    assert await first == "done" and await second == "done"
    assert threads == {"numawatch-bcrypt-0"}
    assert pool.waiting == 0


async def test_a_check_whose_requester_left_is_not_run():
    pool = VerifierPool(threads=1, max_waiting=4)
    taken, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocking() -> None:
        taken.set()
        release.wait(10)

    busy = asyncio.create_task(pool.run(blocking))
    while not taken.is_set():  # the one thread is busy: what comes next waits in the queue
        await asyncio.sleep(0.01)
    gone = asyncio.create_task(pool.run(lambda: ran.append("gone")))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    release.set()
    await busy
    await pool.run(lambda: ran.append("after"))

    assert ran == ["after"]


@pytest.mark.slow
def test_the_cache_keeps_recent_successes_only_and_guesses_cannot_evict_them():
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4))
    auth = BasicAuth({"prometheus": hashed})
    assert auth.verify("prometheus", b"right")
    for guess in range(3 * BasicAuth.MAX_CACHED):
        assert not auth.verify("prometheus", f"guess-{guess}".encode())

    assert auth.cached("prometheus", b"right")
    assert auth.cached("prometheus", b"guess-0") is None
    assert b"right" not in repr(auth.__dict__).encode()  # the password itself is not kept


def test_the_cache_forgets_the_least_recently_used_pair_first():
    users = {f"user{number}": bcrypt.hashpw(f"pw{number}".encode(), bcrypt.gensalt(rounds=4))
             for number in range(BasicAuth.MAX_CACHED + 1)}
    auth = BasicAuth(users)
    for number in range(BasicAuth.MAX_CACHED):
        assert auth.verify(f"user{number}", f"pw{number}".encode())
    assert auth.cached("user0", b"pw0")  # used again: now the most recent
    assert auth.verify(f"user{BasicAuth.MAX_CACHED}", f"pw{BasicAuth.MAX_CACHED}".encode())

    assert auth.cached("user0", b"pw0")
    assert auth.cached("user1", b"pw1") is None


# ------------------------------------------------------------------------------------------------ reload generations
def one_cpu(paths: Paths) -> Topology:
    cpus = {0: Cpu(0, True, 0, 0, 0)}
    return Topology(cpus=cpus, online=frozenset(cpus), nodes={0: NumaNode(0, frozenset(cpus))},
                    isolation=IsolationParams())


async def test_a_reload_that_finishes_after_a_newer_one_changes_nothing():
    slow_may_finish, slow_reading = threading.Event(), threading.Event()
    stale = parse_intent("kubelet:\n  topologyManagerPolicy: best-effort\n", "stale.yaml")
    fresh = parse_intent("kubelet:\n  topologyManagerPolicy: restricted\n", "fresh.yaml")
    answers = iter([("slow", stale), ("fast", fresh)])

    def loader():
        kind, intent = next(answers)
        if kind == "slow":
            slow_reading.set()
            slow_may_finish.wait(10)
        return intent

    sampler = server.Sampler(HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", one_cpu),)),
                             REFERENCE, checks=(), intent_loader=loader)
    slow = asyncio.create_task(sampler.reload())
    while not slow_reading.is_set():  # the slow reload has read its (stale) file and is held before returning
        await asyncio.sleep(0.01)
    assert await sampler.reload()
    slow_may_finish.set()
    await slow

    assert sampler.intent is fresh
    assert sampler.reload_status.success


async def test_sighups_during_a_reload_fold_into_one_that_runs_after_it():
    calls: list[str] = []
    first_may_finish = threading.Event()

    def loader():
        calls.append("read")
        if len(calls) == 1:
            first_may_finish.wait(10)
        return REFERENCE

    sampler = server.Sampler(HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", one_cpu),)),
                             REFERENCE, checks=(), intent_loader=loader)
    app = server.make_app(sampler, run_sampler=False)
    reloader = server.Reloader(app)
    tasks = [asyncio.create_task(reloader.reload())]
    await asyncio.sleep(0.05)
    tasks += [asyncio.create_task(reloader.reload()) for _ in range(3)]
    await asyncio.sleep(0.05)
    first_may_finish.set()
    await asyncio.gather(*tasks)

    assert calls == ["read", "read"]


async def test_with_the_pool_full_a_guess_is_refused_at_once_and_a_verified_scraper_still_gets_in(aiohttp_client):
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()
    config = parse_web_config(f"basic_auth_users:\n  prometheus: '{hashed}'\n"
                              "http_server_config:\n  headers:\n    X-Frame-Options: deny\n", "web.yml")
    gate = server.Gate(web_config=config, passwords=VerifierPool(threads=1, max_waiting=1))
    sampler = server.Sampler(HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", one_cpu),)),
                             REFERENCE, checks=())
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False, gate=gate))
    await sampler.refresh()
    right = {"Authorization": "Basic " + base64.b64encode(b"prometheus:right").decode()}
    wrong = {"Authorization": "Basic " + base64.b64encode(b"prometheus:guess").decode()}
    assert (await client.get("/metrics", headers=right)).status == 200  # verified once, as Prometheus' first scrape
    release = threading.Event()
    auth = gate._auth
    assert auth is not None
    real_verify = auth.verify
    auth.verify = lambda user, password: release.wait(10) and real_verify(user, password)  # a slow bcrypt

    guessing = asyncio.create_task(client.get("/metrics", headers=wrong))
    while gate.passwords.waiting < 1:
        await asyncio.sleep(0.01)
    refused = await client.get("/metrics", headers=wrong)
    scraped = await client.get("/metrics", headers=right)
    release.set()
    guessed = await guessing

    assert (refused.status, refused.headers["Retry-After"], refused.headers["X-Frame-Options"]) == (503, "1", "deny")
    assert scraped.status == 200
    assert guessed.status == 401
    assert gate.refused["password_checks"] == 1
    assert gate.in_flight == 0


async def test_a_client_that_gave_a_wrong_password_waits_for_everyone_else_and_each_client_for_its_turn():
    pool = VerifierPool(threads=1, max_waiting=16, per_client=3)
    taken, release = threading.Event(), threading.Event()
    order: list[str] = []

    def blocking() -> None:
        taken.set()
        release.wait(10)

    def check(name: str):
        return lambda: order.append(name)

    busy = asyncio.create_task(pool.run(blocking, "guesser"))
    while not taken.is_set():  # the one thread is busy: what comes next waits
        await asyncio.sleep(0.01)
    pool.failed("guesser")
    queued = [asyncio.create_task(pool.run(check(f"guess {n}"), "guesser")) for n in range(2)]
    queued += [asyncio.create_task(pool.run(check(f"a {n}"), "10.0.0.1")) for n in range(2)]
    queued += [asyncio.create_task(pool.run(check("b 0"), "10.0.0.2"))]
    while pool.waiting < 6:
        await asyncio.sleep(0.01)
    with pytest.raises(PoolBusy):  # the guesser's fourth: over its share
        await pool.run(check("guess 3"), "guesser")
    release.set()
    await busy
    await asyncio.gather(*queued)

    assert order == ["a 0", "b 0", "a 1", "guess 0", "guess 1"]
    assert pool.waiting == 0


# ------------------------------------------------------------------------------------------------ closed connections
def connection_sockets() -> int:
    return sum(isinstance(item, ConnectionSocket) for item in gc.get_objects())


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_a_closed_connection_leaves_nothing_for_the_collector(tls):
    """Scrapes over new connections against a real ``server.serve``, the collector off: every connection's socket,
    transport and protocol are freed by reference counting once it is closed (Prometheus scrapers that do not keep
    connections alive would otherwise leave a cycle per scrape until the collector's next pass over them)."""
    client_tls: ssl.SSLContext | None = None
    gate = server.Gate()
    if tls:
        authority = trustme.CA()
        gate.ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        authority.issue_cert("127.0.0.1").configure_cert(gate.ssl_context)
        client_tls = ssl.create_default_context()
        authority.configure_trust(client_tls)
    sampler = server.Sampler(HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", one_cpu),)),
                             REFERENCE, checks=())
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    serving = asyncio.create_task(server.serve(server.make_app(sampler, run_sampler=False, gate=gate), [listener]))
    gc.collect()
    gc.disable()
    already = connection_sockets()  # another test's, still referenced: not this one's to count
    try:
        for _ in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = await reader.read()  # to the server's close
            assert answer.startswith(b"HTTP/1.1 503 ")  # no evaluation yet: an answer all the same
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
        for _ in range(200):  # the server's side closes a moment after the client saw the answer
            if gate.connections.sockets == 0 and not len(gate.connections):
                break
            await asyncio.sleep(0.01)
        assert gate.connections.sockets == 0

        assert connection_sockets() == already
    finally:
        gc.enable()
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
