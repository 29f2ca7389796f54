"""Hostile network clients against a real ``numawatch serve``: floods of wrong
passwords and of trickled bodies must not starve a valid scrape, a pipelined half request is cut off after the read
timeout, and every refusal (401, 400, 413, 431, 503) carries the configured security headers without a traceback
or a header value in the log. Real processes and raw sockets on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import http.client
import select
import signal
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serving import numawatch_serve

PASSWORD = "correct horse battery staple"
WRONG = "Tr0ub4dor&3"
# More than --web.max-requests' default of 40: enough to take every slot if they could.
ATTACKERS = 48
READ_TIMEOUT = 10.0
TRICKLED_BODY = 60 * 1024


# ------------------------------------------------------------------------------------------------ helpers
def address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    return host, int(port)


def authorization(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def write_config(tmp_path: Path, *, rounds: int = 4, headers: bool = True) -> Path:
    """Basic auth for ``prometheus`` (bcrypt at ``rounds``; 10 is htpasswd's and the cost a real node pays) and two
    security headers."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=rounds)).decode()
    text = f"basic_auth_users:\n  prometheus: {hashed}\n"
    if headers:
        text += "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n"
    path = tmp_path / "web.yml"
    path.write_text(text)
    return path


def stop(process) -> str:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    return process.stderr.read()


def get(url: str, path: str = "/metrics", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    host, port = address(url)
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.headers), response.read()
    finally:
        connection.close()


def timed_scrape(url: str) -> tuple[int, float]:
    """A valid scrape over a fresh connection, as Prometheus makes one: (status, seconds)."""
    started = time.monotonic()
    status = get(url, headers={"Authorization": authorization("prometheus", PASSWORD)})[0]
    return status, time.monotonic() - started


def wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 30
    while get(url, "/healthz")[0] != 200:
        assert time.monotonic() < deadline, "numawatch serve never became healthy"
        time.sleep(0.05)


def parse_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip()] = value.strip()
    return status, headers, body


def exchange(url: str, data: bytes, seconds: float = 20) -> bytes:
    """Send ``data`` on a new connection and return the first response (status line, headers and the body its
    Content-Length announces), or what came before the server closed the connection. An answer cut short by a
    reset after it arrived counts as what the server sent."""
    with socket.create_connection(address(url)) as sock:
        sock.settimeout(seconds)
        # The server may answer and close before taking everything: then read what it said.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while not _complete(received) and (chunk := sock.recv(65536)):
                received += chunk
        return received


def _complete(data: bytes) -> bool:
    head, found, body = data.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return True


@contextlib.contextmanager
def flood(count: int, client: Callable[[threading.Event, list[int]], None]) -> Iterator[list[int]]:
    """``count`` threads running ``client(stop, started)`` until the block ends; ``started`` collects one entry per
    client that has sent its first request."""
    stop_event = threading.Event()
    started: list[int] = []
    threads = [threading.Thread(target=client, args=(stop_event, started), daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(started) < count:
            assert time.monotonic() < deadline, f"only {len(started)} of {count} flooding clients got going"
            time.sleep(0.02)
        yield started
    finally:
        stop_event.set()
        for thread in threads:
            thread.join(timeout=20)


def wrong_password_client(url: str, source: str | None = None) -> Callable[[threading.Event, list[int]], None]:
    """Guesses passwords over a keep-alive connection as fast as the server answers (from ``source``, another
    loopback address, to be another client than the scraper)."""
    host, port = address(url)

    def run(stop_event: threading.Event, started: list[int]) -> None:
        first = True
        while not stop_event.is_set():
            connection = http.client.HTTPConnection(host, port, timeout=30,
                                                    source_address=(source, 0) if source else None)
            try:
                while not stop_event.is_set():
                    connection.request("GET", "/metrics",
                                       headers={"Authorization": authorization("prometheus", WRONG)})
                    if first:
                        started.append(1)
                        first = False
                    connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                pass
            finally:
                connection.close()

    return run


def trickling_client(url: str) -> Callable[[threading.Event, list[int]], None]:
    """Announces a 60 KB body without credentials and sends it a byte at a time; reconnects once cut off."""

    def run(stop_event: threading.Event, started: list[int]) -> None:
        first = True
        while not stop_event.is_set():
            try:
                with socket.create_connection(address(url), timeout=30) as sock:
                    sock.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {TRICKLED_BODY}\r\n\r\n"
                                 .encode())
                    if first:
                        started.append(1)
                        first = False
                    for _ in range(TRICKLED_BODY):
                        if stop_event.wait(0.05):
                            return
                        readable, _, _ = select.select([sock], [], [], 0)
                        if readable:  # answered (refused) or closed: start over, as a real attacker would
                            break
                        sock.sendall(b"x")
            except OSError:
                time.sleep(0.01)

    return run


def measure_valid_scrapes(url: str, count: int = 15) -> tuple[list[int], list[float]]:
    statuses, seconds = [], []
    for _ in range(count):
        status, took = timed_scrape(url)
        statuses.append(status)
        seconds.append(took)
        time.sleep(0.1)
    return statuses, seconds


def describe(seconds: list[float]) -> str:
    return f"median {statistics.median(seconds):.3f}s, max {max(seconds):.3f}s over {len(seconds)} scrapes"


# ------------------------------------------------------------------------------------------------ reproducer 5
@pytest.mark.slow
def test_a_flood_of_wrong_passwords_does_not_delay_a_valid_scrape(fake_host, tmp_path):
    fake_host.mkdir("proc")
    config = write_config(tmp_path, rounds=10)
    with numawatch_serve(fake_host.root, "--web.config.file", str(config),
                         "--web.read-timeout", str(READ_TIMEOUT)) as (process, url):
        wait_healthy(url)
        assert timed_scrape(url)[0] == 200  # Prometheus had been scraping: its credentials were verified before
        with flood(ATTACKERS, wrong_password_client(url)):
            time.sleep(0.5)  # every guesser has a request in; bcrypt is saturated
            statuses, seconds = measure_valid_scrapes(url)
        print(f"\nvalid scrape under {ATTACKERS} wrong-password clients: {describe(seconds)}")
        assert statuses == [200] * len(statuses), f"valid scrapes refused under the flood: {statuses}"
        stderr = stop(process)

    # The acceptance criterion is 1 s; asserted as "well under the read timeout" (a loaded machine is slow).
    assert max(seconds) < READ_TIMEOUT / 2, describe(seconds)
    assert WRONG not in stderr
    assert authorization("prometheus", WRONG).split()[1] not in stderr


@pytest.mark.slow
def test_clients_trickling_a_body_do_not_take_the_request_slots(fake_host, tmp_path):
    fake_host.mkdir("proc")
    config = write_config(tmp_path)
    with numawatch_serve(fake_host.root, "--web.config.file", str(config),
                         "--web.read-timeout", str(READ_TIMEOUT)) as (process, url):
        wait_healthy(url)
        with flood(ATTACKERS, trickling_client(url)):
            time.sleep(0.5)
            statuses, seconds = measure_valid_scrapes(url)
        print(f"\nvalid scrape under {ATTACKERS} clients trickling a {TRICKLED_BODY}-byte body: {describe(seconds)}")
        assert statuses == [200] * len(statuses), f"valid scrapes refused under the flood: {statuses}"
        stderr = stop(process)

    assert max(seconds) < READ_TIMEOUT / 2, describe(seconds)
    assert "Traceback" not in stderr


# ------------------------------------------------------------------------------------------------ reproducer 8
@pytest.mark.slow
def test_a_pipelined_half_request_is_cut_off_after_the_read_timeout(fake_host):
    """One full request and the start of a second in one packet, then silence: the second request's clock runs
    from its first byte, and the connection is closed after --web.read-timeout, not after the keep-alive time."""
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--web.read-timeout", "0.5") as (process, url):
        wait_healthy(url)
        before = refused_counts(url)
        with socket.create_connection(address(url)) as sock:
            sock.settimeout(20)  # the keep-alive time is 75 s: a recv that times out here is the bug
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        deadline = time.monotonic() + 20  # the exposition is rendered once per evaluation
        while (after := refused_counts(url))["read_timeout"] == before["read_timeout"]:
            assert time.monotonic() < deadline, "the read timeout was never counted"
            time.sleep(0.05)
        stop(process)

    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.count(b"HTTP/1.1 ") == 1  # the half request was never answered
    assert after["read_timeout"] == before["read_timeout"] + 1


@pytest.mark.slow
def test_a_second_request_trickled_on_a_kept_alive_connection_is_cut_off_too(fake_host):
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--web.read-timeout", "0.5") as (process, url):
        wait_healthy(url)
        with socket.create_connection(address(url)) as sock:
            sock.settimeout(20)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            first = sock.recv(65536)
            sock.sendall(b"GET /metr")  # and nothing more
            rest = b""
            while chunk := sock.recv(65536):
                rest += chunk
        stop(process)

    assert first.startswith(b"HTTP/1.1 200")
    assert rest == b""


def refused_counts(url: str) -> dict[str, float]:
    status, _, body = get(url)
    assert status == 200
    for family in text_string_to_metric_families(body.decode()):
        if family.name == "numawatch_http_requests_refused":
            return {sample.labels["reason"]: sample.value for sample in family.samples}
    raise AssertionError("no numawatch_http_requests_refused_total")


# ------------------------------------------------------------------------------------------------ reproducer 10
@pytest.mark.slow
def test_every_refusal_carries_the_security_headers_and_logs_no_header_value(fake_host, tmp_path):
    fake_host.mkdir("proc")
    config = write_config(tmp_path)
    valid = authorization("prometheus", PASSWORD)
    huge_value = "hugeheadervalue" + "A" * (64 * 1024)
    # Oversized and without a scheme: the redacting log filter recognises neither "Basic" nor "Authorization:".
    bare_credentials = base64.b64encode(b"prometheus:" + PASSWORD.encode() * 3000).decode()
    with numawatch_serve(fake_host.root, "--log-level", "debug", "--web.config.file", str(config),
                         "--web.max-requests", "1", "--web.read-timeout", "3") as (process, url):
        wait_healthy(url)
        answers = {
            "401": exchange(url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            "413": exchange(url, f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {valid}\r\n"
                                 f"Content-Length: {100 * 1024}\r\n\r\n".encode() + b"x" * (100 * 1024)),
            "400": exchange(url, b"GET /metrics HTTP/1.1\r\nHost: x\r\nthis is no header\r\n\r\n"),
            "431": exchange(url, f"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {huge_value}\r\n\r\n".encode()),
            "431 count": exchange(url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                       + b"".join(b"X-H%d: v\r\n" % number for number in range(200)) + b"\r\n"),
            "431 authorization": exchange(
                url, f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {bare_credentials}\r\n\r\n".encode()),
        }
        with socket.create_connection(address(url)) as holder:
            # Authenticated, then a body that never comes: it holds the one request slot until the read timeout.
            holder.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {valid}\r\n"
                           "Content-Length: 10\r\n\r\n".encode())
            deadline = time.monotonic() + 10
            while True:
                status, headers, _ = get(url, headers={"Authorization": valid})
                if status == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            answers["503"] = b"HTTP/1.1 %d \r\n" % status + b"".join(
                f"{name}: {value}\r\n".encode() for name, value in headers.items()) + b"\r\n"
        stderr = stop(process)

    for expected, raw in answers.items():
        assert raw, f"no answer for the {expected} case"
        status, headers, _ = parse_response(raw)
        assert status == int(expected.split()[0]), (expected, raw[:200])
        assert headers.get("X-Frame-Options") == "deny", (expected, raw[:300])
        assert headers.get("X-Content-Type-Options") == "nosniff", (expected, raw[:300])
    assert "Traceback" not in stderr
    assert "level=error" not in stderr
    assert "hugeheadervalue" not in stderr
    assert bare_credentials[:60] not in stderr
    assert valid.split()[1] not in stderr


# ------------------------------------------------------------------------------------------------ memory under floods
def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def unauthenticated_post(url: str, body: bytes) -> tuple[bytes, float | None]:
    """A POST without credentials and its whole body at once; (the status line, seconds from the answer until the
    server closed the connection, None when it kept it open for 2 s)."""
    with socket.create_connection(address(url), timeout=10) as sock:
        head = f"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        with contextlib.suppress(ConnectionError):  # the server may close before the body is all sent: fine
            sock.sendall(head + body)
        received = b""
        with contextlib.suppress(ConnectionError):
            while b"\r\n\r\n" not in received:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
        answered = time.monotonic()
        sock.settimeout(2)
        try:
            while sock.recv(4096):
                pass
        except TimeoutError:
            return received.split(b"\r\n", 1)[0], None
        except ConnectionError:
            pass
        return received.split(b"\r\n", 1)[0], time.monotonic() - answered


def test_unauthenticated_bodies_are_not_read_and_their_connections_closed(fake_host, tmp_path):
    """With basic auth on, 2,000 unauthenticated 60 KB POSTs raised RSS from 48 to 190 MiB and their connections
    stayed open 40-80 s."""
    fake_host.mkdir("proc")
    config = write_config(tmp_path)
    body = b"x" * TRICKLED_BODY
    with numawatch_serve(fake_host.root, "--web.config.file", str(config)) as (process, url):
        wait_healthy(url)
        for _ in range(50):  # the allocator's and the interpreter's own first growth
            unauthenticated_post(url, body)
        before = rss_bytes(process.pid)
        outcomes: list[tuple[bytes, float | None]] = []
        lock = threading.Lock()

        def client(count: int) -> None:
            for _ in range(count):
                outcome = unauthenticated_post(url, body)
                with lock:
                    outcomes.append(outcome)

        threads = [threading.Thread(target=client, args=(100,)) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        after = rss_bytes(process.pid)
        stop(process)

    assert len(outcomes) == 2000
    statuses = {status for status, _ in outcomes}
    assert statuses <= {b"HTTP/1.1 401 Unauthorized", b""}, statuses
    assert sum(status == b"HTTP/1.1 401 Unauthorized" for status, _ in outcomes) >= 1900
    kept = [seconds for _, seconds in outcomes if seconds is None or seconds > 1.0]
    assert not kept, f"{len(kept)} connections stayed open after their 401"
    assert after - before < 32 * 1024 * 1024, f"RSS grew by {(after - before) / 2**20:.0f} MiB"


# ------------------------------------------------------------------------------------------------ restarts into floods
def test_after_a_restart_into_a_flood_of_wrong_passwords_an_uncached_valid_password_is_served_at_once(fake_host,
                                                                                                       tmp_path):
    """Right after a start nothing is cached: a valid password waited behind the guesses already queued, got 503 on
    2 of 16 scrapes and took up to 2.4 s. Sixteen users, each scraping once: every check is a first one."""
    fake_host.mkdir("proc")
    users = {f"scraper{number}": f"password {number}" for number in range(16)}
    config = tmp_path / "web.yml"
    config.write_text("basic_auth_users:\n" + "".join(
        f"  {user}: {bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()}\n"
        for user, password in users.items()))
    with numawatch_serve(fake_host.root, "--web.config.file", str(config)) as (process, url):
        wait_healthy(url)
        statuses, seconds = [], []
        with flood(ATTACKERS, wrong_password_client(url, source="127.0.0.2")):
            time.sleep(0.5)  # every guesser has a request in; bcrypt is saturated
            for user, password in users.items():
                started = time.monotonic()
                statuses.append(get(url, headers={"Authorization": authorization(user, password)})[0])
                seconds.append(time.monotonic() - started)
        print(f"\nfirst scrapes under {ATTACKERS} wrong-password clients: {describe(seconds)}")
        stop(process)

    assert statuses == [200] * len(users), statuses
    assert max(seconds) < 1.5, describe(seconds)
