"""One client connection of ``numawatch serve``: aiohttp's ``RequestHandler`` with a request-read deadline, and
answers to malformed requests that carry the configured headers and put no header value in the log.

aiohttp has no request-read timeout (its keep-alive timeout covers idle connections between requests), so a client
sending half a request would hold its socket for ever. ``Connection`` keeps a deadline of its own: it runs from the
first byte of each request (from the connection itself for the first) until that request's headers are complete; a
body announced by ``Content-Length`` is read by ``server.Gate`` under the same limit. Which bytes start a request is
worked out by ``RequestFraming``, which follows the byte stream request by request, so a complete request and the
start of the next one in the same packet arm the deadline for the second (a client cannot slip a half request in
behind a whole one and keep the connection for the keep-alive time).

aiohttp answers a request it cannot parse from ``handle_error`` without passing through the application's
middlewares, and logs it as an error with the parser's message, which quotes up to 100 bytes of the offending line
(a header value: an ``Authorization`` header without a scheme is not recognised by the log filter). Here such a
request is answered ``431`` when a header line or the number of headers is over aiohttp's limits (as Go's net/http
answers node_exporter's), ``400`` otherwise, with the configured security headers, and logged at debug level as one
line naming the client and the kind of error only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from numawatch.descriptors import Connections

log = logging.getLogger(__name__)

# aiohttp's limits on a request's head (its defaults, spelled out): a line of the request line or of one header, and
# the number of headers. What is over them is answered 431.
MAX_LINE_BYTES = 8190
MAX_HEADERS = 128
# What RequestFraming keeps of a header line: enough for the names and values it reads.
_KEPT_LINE_BYTES = 256

_IDLE, _HEAD, _BODY, _OPAQUE = range(4)


class RequestFraming:
    """Where a connection's byte stream is: between requests, in a request's head (request line and headers), in a
    ``Content-Length`` body, or opaque.

    Opaque is for a request whose end this cannot know without parsing more than it does (a ``Transfer-Encoding``
    body, a ``Content-Length`` that is not a plain number): aiohttp refuses the second, and ``server.Gate`` closes
    the connection after answering the first, so nothing follows either.
    """

    def __init__(self) -> None:
        self._state = _IDLE
        self._line = bytearray()  # the current line's first _KEPT_LINE_BYTES
        self._line_cut = False
        self._request_line = False  # the current head's request line has been seen
        self._length = 0  # the current head's Content-Length
        self._remaining = 0  # body bytes still to come

    def feed(self, data: bytes) -> tuple[bool, bool]:
        """Follow ``data``: (whether a request started in it, whether a request's head is incomplete at its end)."""
        started = False
        position, size = 0, len(data)
        while position < size and self._state != _OPAQUE:
            if self._state == _BODY:
                taken = min(self._remaining, size - position)
                self._remaining -= taken
                position += taken
                if not self._remaining:
                    self._state = _IDLE
                continue
            if self._state == _IDLE:
                self._state = _HEAD
                self._request_line = False
                self._length = 0
                started = True
            newline = data.find(b"\n", position)
            end = size if newline < 0 else newline
            room = _KEPT_LINE_BYTES - len(self._line)
            if end - position > room:
                self._line_cut = True
            if room > 0:
                self._line += data[position:min(end, position + room)]
            if newline < 0:
                break
            position = newline + 1
            self._end_of_line()
        return started, self._state == _HEAD

    def _end_of_line(self) -> None:
        line = bytes(self._line).rstrip(b"\r")
        cut = self._line_cut
        self._line.clear()
        self._line_cut = False
        if not self._request_line:
            self._request_line = bool(line)  # empty lines before a request line are ignored (RFC 9112 2.2)
            return
        if line:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                self._length = -1
            elif name == b"content-length":
                value = value.strip()
                self._length = int(value) if value.isdigit() and not cut and self._length >= 0 else -1
            return
        if self._length < 0:
            self._state = _OPAQUE
        elif self._length:
            self._state, self._remaining = _BODY, self._length
        else:
            self._state = _IDLE


class Connection(web.RequestHandler):
    """aiohttp's protocol for one connection, with the request-read deadline and the error answers above.

    ``answer`` completes any response this class makes (the configured security headers); ``timed_out`` is called
    once for each connection closed by the deadline (the refused-requests counter). ``connections`` is told when it
    opens, starts a request and closes, and may close it (``evict``) to make room for a new one while it is ``idle``.
    """

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        read_timeout: float,
        answer: Callable[[web.StreamResponse], None],
        timed_out: Callable[[], None],
        connections: Connections | None = None,
        **options: Any,
    ) -> None:
        super().__init__(manager, loop=loop, max_line_size=MAX_LINE_BYTES, max_field_size=MAX_LINE_BYTES,
                         max_headers=MAX_HEADERS, **options)
        self._read_timeout = read_timeout
        self._answer = answer
        self._timed_out = timed_out
        self._framing = RequestFraming()
        self._timer: asyncio.TimerHandle | None = None
        self._first = True  # the first request's clock started at the connection
        self._connections = connections
        self._socket_transport: asyncio.BaseTransport | None = None

    # ----------------------------------------------------------------------------------------- the deadline
    def _arm(self) -> None:
        self._disarm()
        self._timer = self._loop.call_later(self._read_timeout, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        self._timed_out()
        transport = self.transport
        if transport is not None and not transport.is_closing():
            log.debug("closing the connection from %s: request not received within %gs",
                      transport.get_extra_info("peername"), self._read_timeout)
            self.force_close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._socket_transport = socket_transport(transport)
        super().connection_made(transport)
        if self._connections is not None:
            self._connections.opened(self)
        self._arm()

    def data_received(self, data: bytes) -> None:
        started, incomplete = self._framing.feed(data)
        if started and self._connections is not None:
            self._connections.active(self)
        if started and not self._first:
            self._arm()
        self._first = False
        if not incomplete:
            self._disarm()
        elif self._timer is None:
            self._arm()
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        if self._connections is not None:
            self._connections.closed(self)
        super().connection_lost(exc)
        transport, self._socket_transport = self._socket_transport, None
        drop_read_callback(transport)

    # ----------------------------------------------------------------------------------------- making room
    def idle(self) -> bool:
        return not self._request_in_progress

    def evict(self) -> None:
        log.debug("closing the idle connection from %s: its descriptor is needed",
                  self.transport.get_extra_info("peername") if self.transport is not None else None)
        self.force_close()

    # ----------------------------------------------------------------------------------------- errors
    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status == 500:  # an exception in numawatch's own code: aiohttp logs it with its traceback
            response = super().handle_error(request, status, exc, message)
        else:
            if _too_large(exc):
                status, what = 431, "request header fields too large"
            elif status == 400:
                what = f"malformed request ({type(exc).__name__})" if exc is not None else "malformed request"
            else:
                what = "request not handled in time"
            # Never the exception's message: aiohttp's quote the offending bytes, which may be a credential.
            log.debug("answered %d to %s: %s", status, request.remote, what)
            if request.writer.output_size > 0:
                raise ConnectionError("a response was sent already; the connection is broken")
            response = web.Response(status=status, text=what + "\n")
            response.force_close()
        self._answer(response)
        return response


def socket_transport(transport: asyncio.BaseTransport) -> asyncio.BaseTransport:
    """The socket's own transport under ``transport``: itself, or under TLS the one asyncio's SSL protocol reads from
    (which the connection's ``connection_lost`` comes after, when the SSL protocol has let go of it)."""
    ssl_protocol = getattr(transport, "_ssl_protocol", None)
    underlying = getattr(ssl_protocol, "_transport", None)
    return underlying if isinstance(underlying, asyncio.BaseTransport) else transport


def drop_read_callback(transport: asyncio.BaseTransport | None) -> None:
    """Break the reference cycle of a closed socket transport.

    CPython 3.11's selector transport keeps the callback it reads with as a bound method of itself
    (``_read_ready_cb``), which it never drops: each closed connection's transport, its extra information and the
    closed socket (``descriptors.ConnectionSocket``) stay until the collector's next pass over them, which serve's
    thresholds make rare. Once the connection is lost the transport reads no more, so the callback can go.
    """
    if transport is not None and getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None  # type: ignore[attr-defined]


def _too_large(error: BaseException | None) -> bool:
    """A header line or the request line over MAX_LINE_BYTES, or more than MAX_HEADERS headers."""
    if isinstance(error, LineTooLong):
        return True
    return isinstance(error, BadHttpMessage) and error.message == "Too many headers received"


__all__ = ["MAX_HEADERS", "MAX_LINE_BYTES", "Connection", "RequestFraming"]
