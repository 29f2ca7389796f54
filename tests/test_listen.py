"""``--web.listen-address``: every form node_exporter takes, served over real HTTP (and HTTPS) on 127.0.0.1 and ::1
by a real ``numawatch serve``."""

from __future__ import annotations

import errno
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import strict_logfmt
import trustme
from numawatch.listen import Listen, bind, parse_listen
from serving import numawatch_serve


def ipv6_loopback() -> str:
    """Why IPv6 cannot be tested here, or "" when it can (a socket bound to ::1)."""
    if not socket.has_ipv6:
        return "this Python has no IPv6"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError as error:
        return f"the kernel has no IPv6 loopback (binding ::1: {error.strerror})"
    return ""


NO_IPV6 = ipv6_loopback()
needs_ipv6 = pytest.mark.skipif(bool(NO_IPV6), reason=NO_IPV6)


def port_of(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1])


def answers(host: str, port: int, scheme: str = "http", context: ssl.SSLContext | None = None) -> bool:
    """Whether GET /healthz on host:port gets an answer; False when the connection is refused."""
    shown = f"[{host}]" if ":" in host else host
    try:
        with urllib.request.urlopen(f"{scheme}://{shown}:{port}/healthz", timeout=20, context=context) as response:
            return response.status in (200, 503)
    except urllib.error.HTTPError as error:
        return error.code == 503  # answered: the first evaluation is not done yet
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return False
        raise


def banners(process: subprocess.Popen) -> list[dict[str, str]]:
    """The "Listening on" records serve logged (all of them come before the first the launcher saw returned)."""
    process.send_signal(signal.SIGINT)  # stop, so that all of stderr can be read
    assert process.wait(timeout=20) == 0
    records = [strict_logfmt.parse(line) for line in process.stderr.read().splitlines()]
    return [record for record in records if record["msg"] == "Listening on"]


# ------------------------------------------------------------------------------------------------ forms
@needs_ipv6
@pytest.mark.parametrize("form", [":0", "[::]:0"])
@pytest.mark.slow
def test_every_interface_is_ipv4_and_ipv6_on_one_socket_and_one_port(fake_host, form):
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--web.listen-address", form) as (process, url):
        port = port_of(url)
        over_ipv4, over_ipv6 = answers("127.0.0.1", port), answers("::1", port)
        [banner] = banners(process)

    assert (over_ipv4, over_ipv6) == (True, True)
    assert banner["address"] == f"[::]:{port}"
    assert banner["url"] == f"http://[::]:{port}/"


@needs_ipv6
def test_ipv4_any_is_ipv4_only(fake_host):
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--web.listen-address", "0.0.0.0:0") as (process, url):
        port = port_of(url)
        over_ipv4, over_ipv6 = answers("127.0.0.1", port), answers("::1", port)
        [banner] = banners(process)

    assert (over_ipv4, over_ipv6) == (True, False)
    assert banner["address"] == f"0.0.0.0:{port}"


@needs_ipv6
@pytest.mark.slow
def test_an_ipv6_address_is_that_address_only(fake_host):
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--web.listen-address", "[::1]:0") as (_, url):
        port = port_of(url)
        over_ipv4, over_ipv6 = answers("127.0.0.1", port), answers("::1", port)

    assert url == f"http://[::1]:{port}/"
    assert (over_ipv4, over_ipv6) == (False, True)


@needs_ipv6
def test_an_ipv4_address_is_that_address_only(fake_host):
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--listen", "127.0.0.1:0") as (_, url):  # the earlier spelling
        port = port_of(url)
        over_ipv4, over_ipv6 = answers("127.0.0.1", port), answers("::1", port)

    assert url == f"http://127.0.0.1:{port}/"
    assert (over_ipv4, over_ipv6) == (True, False)


def test_a_host_name_listens_on_what_it_resolves_to(fake_host):
    fake_host.mkdir("proc")
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)}
    except socket.gaierror as error:  # a bare debootstrap root has no /etc/hosts, and no DNS answers for localhost
        pytest.skip(f"localhost does not resolve here: {error.strerror}")
    with numawatch_serve(fake_host.root, "--web.listen-address", "localhost:0") as (process, url):
        port = port_of(url)
        reached = {address for address in resolved if answers(address, port)}
        found = banners(process)

    assert reached == resolved
    assert {banner["address"] for banner in found} == {
        f"[{address}]:{port}" if ":" in address else f"{address}:{port}" for address in resolved}


@needs_ipv6
@pytest.mark.slow
def test_a_host_name_with_an_ipv4_and_an_ipv6_address_listens_on_both_on_one_port(fake_host, tmp_path):
    """A name that resolves to 127.0.0.1 and ::1, in a mount namespace of serve's own where /etc/hosts says so."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) (util-linux) to give serve an /etc/hosts of its own")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 dual.numawatch.test\n::1 dual.numawatch.test\n")
    wrapper = [unshare, "--mount", "--", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts)]
    probe = subprocess.run([*wrapper, "getent", "ahosts", "dual.numawatch.test"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot give a process its own /etc/hosts here: {probe.stderr.strip()[:200]}")
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--web.listen-address", "dual.numawatch.test:0", wrapper=wrapper) \
            as (process, url):
        port = port_of(url)
        over_ipv4, over_ipv6 = answers("127.0.0.1", port), answers("::1", port)
        found = banners(process)

    assert (over_ipv4, over_ipv6) == (True, True)
    assert sorted(banner["address"] for banner in found) == sorted([f"127.0.0.1:{port}", f"[::1]:{port}"])


# ------------------------------------------------------------------------------------------------ TLS
@needs_ipv6
@pytest.mark.slow
def test_tls_is_served_on_both_families_of_the_default_form(fake_host, tmp_path):
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1", "::1")
    (tmp_path / "tls.crt").write_bytes(certificate.cert_chain_pems[0].bytes())
    (tmp_path / "tls.key").write_bytes(certificate.private_key_pem.bytes())
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n")
    context = ssl.create_default_context()
    authority.configure_trust(context)
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--web.listen-address", ":0", "--web.config.file", str(config)) \
            as (process, url):
        port = port_of(url)
        over_ipv4 = answers("127.0.0.1", port, "https", context)
        over_ipv6 = answers("::1", port, "https", context)
        [banner] = banners(process)

    assert (over_ipv4, over_ipv6) == (True, True)
    assert banner["url"] == f"https://[::]:{port}/"
    assert banner["tls"] == "true"


# ------------------------------------------------------------------------------------------------ refusals
@needs_ipv6
@pytest.mark.slow
def test_a_port_taken_on_ipv4_alone_stops_the_dual_stack_default_with_one_line(fake_host):
    fake_host.mkdir("proc")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "numawatch", "--host-root", str(fake_host.root), "--log.level", "error", "serve",
             "--web.listen-address", f":{port}"], capture_output=True, text=True, timeout=60)

    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert strict_logfmt.parse(line)["msg"] == f"cannot listen on :{port}: Address already in use"


@pytest.mark.slow
def test_a_name_that_does_not_resolve_stops_serve_with_one_line(fake_host):
    result = subprocess.run(
        [sys.executable, "-m", "numawatch", "--host-root", str(fake_host.root), "--log.level", "error", "serve",
         "--web.listen-address", "no-such-host.invalid:10914"], capture_output=True, text=True, timeout=60)

    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert strict_logfmt.parse(line)["msg"].startswith("cannot listen on no-such-host.invalid:10914: ")


# ------------------------------------------------------------------------------------------------ the sockets
@needs_ipv6
def test_the_default_form_binds_one_ipv6_socket_that_takes_ipv4_too():
    [sock] = bind(parse_listen(":0"))
    with sock:
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        assert sock.getsockname()[0] == "::"


@needs_ipv6
def test_an_ipv6_address_binds_an_ipv6_only_socket():
    [sock] = bind(Listen("::1", 0))
    with sock:
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1


def test_an_address_of_no_interface_here_is_refused():
    with pytest.raises(OSError) as failure:
        bind(Listen("192.0.2.1", 0))  # TEST-NET-1
    assert failure.value.errno == errno.EADDRNOTAVAIL


def test_forms_print_as_they_are_written():
    for text in (":10914", "[::]:10914", "0.0.0.0:10914", "[::1]:10914", "node.example:10914"):
        assert str(parse_listen(text)) == text

