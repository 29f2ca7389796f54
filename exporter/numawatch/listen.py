"""``--web.listen-address``: what the address means, and the listening sockets it gives.

The forms, as node_exporter's (Go's ``net.Listen("tcp", ...)``) read them:

- ``:PORT`` (the default, ``:10914``) and ``[::]:PORT``: every interface, IPv4 and IPv6, on one socket (an IPv6
  socket with ``IPV6_V6ONLY`` off, so IPv4 clients arrive as ``::ffff:a.b.c.d``). Where the kernel has no IPv6, an
  IPv4 socket on ``0.0.0.0``.
- ``0.0.0.0:PORT``: every IPv4 interface only; ``[::1]:PORT``, ``127.0.0.1:PORT``: that address only.
- ``HOST:PORT``: every address the name resolves to (``localhost``: 127.0.0.1 and ::1), all on the same port.

Port 0 lets the kernel choose; when several sockets are bound they all get the port the first one got.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import socket
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_PORT = 10914
DEFAULT_LISTEN = f":{DEFAULT_PORT}"
# Both spellings of "every interface, both families".
_EVERY_INTERFACE = ("", "::")
# No IPv6 in this kernel (ipv6.disable=1) or on this host: fall back to IPv4.
_NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)


@dataclass(frozen=True)
class Listen:
    host: str  # "" : every interface, IPv4 and IPv6
    port: int

    def __str__(self) -> str:
        if not self.host:
            return f":{self.port}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (every interface, IPv4 and IPv6)."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host:
            raise argparse.ArgumentTypeError(f"empty brackets: write [::]:PORT or :PORT, got {text!r}")
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"write an IPv6 address in brackets, as in [::]:10914, got {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {text!r}")
    return Listen(host, port)


def bind(listen: Listen) -> list[socket.socket]:
    """Bound (not yet listening) sockets for ``listen``; ``OSError`` when one cannot be bound, with none left open."""
    if listen.host in _EVERY_INTERFACE:
        return [_every_interface(listen.port)]
    infos = socket.getaddrinfo(listen.host, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    addresses: list[tuple[socket.AddressFamily, tuple[Any, ...]]] = []
    for info in infos:
        family, address = info[0], tuple(info[4])
        if family in (socket.AF_INET, socket.AF_INET6) and (family, address) not in addresses:
            addresses.append((family, address))
    if not addresses:
        raise OSError(errno.EADDRNOTAVAIL, f"{listen.host} has no IPv4 or IPv6 address")
    sockets: list[socket.socket] = []
    port = listen.port
    try:
        for each_family, address in addresses:
            sock = _socket(each_family, v6only=True)
            sockets.append(sock)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]  # port 0: the rest take the port the first one got
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _every_interface(port: int) -> socket.socket:
    try:
        sock = _socket(socket.AF_INET6, v6only=False)
    except OSError as error:
        if error.errno not in _NO_IPV6:
            raise
        log.info("no IPv6 in this kernel (%s); listening on IPv4 only", error.strerror)
    else:
        try:
            sock.bind(("::", port))
            return sock
        except OSError as error:
            sock.close()
            if error.errno not in _NO_IPV6:
                raise
            log.info("cannot bind IPv6 here (%s); listening on IPv4 only", error.strerror)
    sock = _socket(socket.AF_INET, v6only=False)
    try:
        sock.bind(("0.0.0.0", port))
    except BaseException:
        sock.close()
        raise
    return sock


def _socket(family: socket.AddressFamily, *, v6only: bool) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # A restart can bind again at once while the previous process' connections sit in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # Set either way: the default comes from net.ipv6.bindv6only, which a distribution may have turned on.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v6only else 0)
    except BaseException:
        with contextlib.suppress(OSError):
            sock.close()
        raise
    return sock
