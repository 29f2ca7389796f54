"""File descriptors of ``numawatch serve``: clients must never take the ones the evaluation needs to read the host.

Each client connection holds a descriptor, and so does each host file while the evaluation reads it. Under the common
soft limit of 1024, a client holding a thousand connections would leave the evaluation none: every source down,
no findings, the node looking clean. So:

- at start the soft ``RLIMIT_NOFILE`` is raised to the hard one (``raise_soft_limit``): what the administrator
  allows, used;
- connections may use descriptors only up to ``RESERVE`` below the limit (``Connections``). Linux hands out the
  lowest free descriptor, so an accepted socket numbered at or above that line proves the connections' share is
  full: the least recently active idle connection (no request being handled) is closed to make room, and when none
  is idle the new one is closed at once (``ReservingSocket``). A scraper's connection, which sends its request as
  soon as it is open, is therefore served, and a client holding idle connections loses the oldest of them. A
  closed connection gives its descriptor back only once the event loop gets round to it, so while ``EVICTING``
  are being closed nothing more is accepted (the clients wait in the listen backlog for a loop iteration or two):
  asyncio accepts up to its backlog in one go, and without that pause a burst would take the reserve;
- accept errors that happen anyway (descriptors taken by something else: the system-wide limit) are counted and
  logged at most once per interval, without a traceback each (``AcceptErrors``);
- an evaluation in which a source failed for lack of descriptors is not served (``starved``): the last good one
  stays, and the log says which sources failed and why.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

# Descriptors kept from connections for everything else: the evaluation's reads (a few at a time), NVML, the udev
# monitor, the log, and the connections being closed to make room (at most EVICTING at a time, and at most half
# the reserve).
RESERVE = 128
EVICTING = 32
# A connection closed to make room is counted as closing until it is gone, or at most this long: accepting must not
# wait for ever on one whose end was somehow never reported.
EVICTION_SECONDS = 5.0
_STARVED = (errno.EMFILE, errno.ENFILE)


def raise_soft_limit() -> int:
    """Raise the soft descriptor limit to the hard one (bounded by ``fs.nr_open`` when the hard one is unlimited);
    the soft limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open", "rb") as handle:
                target = int(handle.read(32))
        except (OSError, ValueError):
            return soft
    if soft != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as error:  # a sandbox that forbids it: work within the soft limit
            log.warning("could not raise the descriptor limit from %d to %d: %s", soft, target, error)
            return soft
        soft = target
    return soft


def reserve_for(limit: int) -> int:
    """Descriptors kept from connections under ``limit``: ``RESERVE``, or a quarter of a smaller limit."""
    return min(RESERVE, limit // 4)


def starved(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, is a lack of descriptors (EMFILE, ENFILE)."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError) and error.errno in _STARVED:
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


class Evictable(Protocol):
    def idle(self) -> bool:
        """No request is being handled: closing it loses no answer."""

    def evict(self) -> None:
        """Close it now."""


class Connections:
    """The open connections, least recently active first, and how many descriptors they may hold.

    Connection sockets are counted from their accept to their close (``ConnectionSocket``), whether or not they got
    as far as a protocol (a TLS handshake that fails never does). ``capacity`` is what the limit leaves them once
    the descriptors open when serving began (``baseline``) and the reserve are set aside.
    """

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        reserve = reserve_for(limit)
        self.line = limit - reserve
        self.capacity = self.line
        self.evicting_at_most = max(1, min(EVICTING, reserve // 2))
        self.sockets = 0  # connection sockets open
        self.refused = 0  # new connections closed at once: none idle to make room
        self._open: dict[Evictable, None] = {}
        self._evicting: dict[Evictable, float] = {}  # connection -> when it was closed to make room

    @classmethod
    def of_this_process(cls) -> Connections:
        return cls(resource.getrlimit(resource.RLIMIT_NOFILE)[0])

    def baseline(self, descriptors: int) -> None:
        """``descriptors`` are open before the first connection (listeners, the log, NVML...): not theirs."""
        self.capacity = max(1, self.line - descriptors)

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, connection: Evictable) -> None:
        self._open[connection] = None

    def active(self, connection: Evictable) -> None:
        """``connection`` started a request: the last to make room."""
        if connection in self._open:
            del self._open[connection]
            self._open[connection] = None

    def closed(self, connection: Evictable) -> None:
        self._open.pop(connection, None)
        self._evicting.pop(connection, None)

    def released(self) -> None:
        """A connection socket was closed."""
        self.sockets -= 1

    def waiting(self) -> bool:
        """Whether accepting must wait: as many connections as may be are being closed to make room."""
        if len(self._evicting) < self.evicting_at_most:
            return False
        stale = self._clock() - EVICTION_SECONDS
        for connection in [c for c, since in self._evicting.items() if since < stale]:
            del self._evicting[connection]
        return len(self._evicting) >= self.evicting_at_most

    def admit(self, descriptor: int) -> bool:
        """Whether a connection just accepted as ``descriptor`` may stay (an idle one closed for it if need be).
        Full is either count at its bound: the connection sockets, or the descriptors in use (at least
        ``descriptor`` + 1: Linux hands out the lowest free one), which something else may have taken."""
        if self.sockets < self.capacity and descriptor < self.line:
            return True
        if len(self._evicting) < self.evicting_at_most:
            for connection in self._open:
                if connection not in self._evicting and connection.idle():
                    self._evicting[connection] = self._clock()
                    connection.evict()
                    return True
        self.refused += 1
        return False


class ConnectionSocket(socket.socket):
    """An accepted socket that tells its ``Connections`` when it is closed."""

    _connections: Connections | None = None

    def close(self) -> None:
        counted, self._connections = self._connections, None
        if counted is not None:
            counted.released()
        super().close()


class ReservingSocket(socket.socket):
    """A listening socket whose ``accept`` applies ``Connections.admit``: a refused connection is closed before
    asyncio sees it (its ``ConnectionAbortedError`` ends that round of accepts; the next round takes the rest), and
    nothing is accepted while ``Connections.waiting``."""

    connections: Connections

    @classmethod
    def adopt(cls, sock: socket.socket, connections: Connections) -> ReservingSocket:
        """``sock`` (detached: use the result instead) as a ReservingSocket."""
        adopted = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        adopted.connections = connections
        return adopted

    def accept(self) -> tuple[socket.socket, Any]:
        connections = self.connections
        if connections.waiting():
            raise BlockingIOError(errno.EAGAIN, "connections are being closed to make room")  # ends this round
        descriptor, address = self._accept()  # type: ignore[attr-defined]
        if not connections.admit(descriptor):
            os.close(descriptor)
            raise ConnectionAbortedError(errno.ECONNABORTED, "refused: descriptors kept for the evaluation")
        sock = ConnectionSocket(self.family, self.type, self.proto, fileno=descriptor)
        connections.sockets += 1
        sock._connections = connections
        if socket.getdefaulttimeout() is None and self.gettimeout():
            sock.setblocking(True)
        return sock, address


def open_descriptors() -> int:
    """How many descriptors this process has open (its /proc/self/fd; 0 where there is none)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # listing it opens one
    except OSError:
        return 0


ACCEPT_OUT_OF_RESOURCES = "socket.accept() out of system resource"  # asyncio's message (base_events)


class AcceptErrors:
    """asyncio's exception handler for ``serve``: accept errors counted and logged at most once per ``interval``
    seconds (one line, no traceback); anything else to asyncio's default handler."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.count = 0
        self._clock = clock
        self._logged_at: float | None = None
        self._unlogged = 0

    def __call__(self, loop: Any, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if context.get("message") != ACCEPT_OUT_OF_RESOURCES or not isinstance(error, OSError):
            loop.default_exception_handler(context)
            return
        self.count += 1
        self._unlogged += 1
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= self.interval:
            log.warning("accepting connections failed %d times since last said: %s; retrying each second",
                        self._unlogged, error.strerror or error)
            self._logged_at = now
            self._unlogged = 0


__all__ = [
    "ACCEPT_OUT_OF_RESOURCES",
    "EVICTING",
    "EVICTION_SECONDS",
    "RESERVE",
    "AcceptErrors",
    "ConnectionSocket",
    "Connections",
    "Evictable",
    "ReservingSocket",
    "open_descriptors",
    "raise_soft_limit",
    "reserve_for",
    "starved",
]
