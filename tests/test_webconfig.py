"""``--web.config.file``: parsing and validation, then TLS, client certificates and basic auth on a real
``numawatch serve`` with certificates made here (trustme); and secrets that must never leave numawatch."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import bcrypt
import pytest
import strict_logfmt
import trustme
from fakehost.reference import VLLM, reference_node
from numawatch import metrics, server, webconfig
from numawatch.host import HostReader, SourceSpec
from numawatch.intent import REFERENCE
from numawatch.model.topology import Cpu, IsolationParams, NumaNode, Topology
from numawatch.paths import Paths
from numawatch.webconfig import BasicAuth, WebConfigError, load_web_config, parse_basic_authorization, parse_web_config
from prometheus_client.parser import text_string_to_metric_families
from serving import numawatch_serve

PASSWORD = "correct horse battery staple"
WRONG = "Tr0ub4dor&3"


def fast_hash(password: str) -> str:
    # Cost 4, bcrypt's minimum: the format and the check are the same as at cost 10, in a millisecond.
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


# ------------------------------------------------------------------------------------------------ parsing
def test_a_full_config_parses_with_paths_relative_to_the_file(tmp_path):
    text = f"""
tls_server_config:
  cert_file: certs/server.crt
  key_file: /abs/server.key
  client_ca_file: ca.crt
  client_auth_type: RequireAndVerifyClientCert
  client_allowed_sans: [prometheus.monitoring.svc]
  min_version: TLS13
http_server_config:
  http2: false
  headers:
    x-content-type-options: nosniff
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  prometheus: {fast_hash(PASSWORD)}
"""
    config = parse_web_config(text, "web.yml", base=tmp_path)

    assert config.tls == webconfig.TLSConfig(
        cert_file=tmp_path / "certs/server.crt",
        key_file=Path("/abs/server.key"),
        client_ca_file=tmp_path / "ca.crt",
        client_auth_type="RequireAndVerifyClientCert",
        client_allowed_sans=("prometheus.monitoring.svc",),
        min_version="TLS13",
    )
    assert dict(config.headers) == {"X-Content-Type-Options": "nosniff",
                                    "Strict-Transport-Security": "max-age=31536000"}
    assert set(config.users) == {"prometheus"}
    assert config.scheme == "https"


def test_an_empty_file_means_plain_http_without_auth():
    config = parse_web_config("", "web.yml")

    assert (config.tls, dict(config.users), dict(config.headers), config.scheme) == (None, {}, {}, "http")


TLS = "tls_server_config:\n  cert_file: s.crt\n  key_file: s.key\n"


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("tls_config:\n  cert_file: x\n", ["tls_config: unknown key"]),
        ("tls_server_config:\n  cert_file: s.crt\n", ["tls_server_config.key_file: required"]),
        (TLS + "  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.crt\n",
         ["tls_server_config.client_auth_type", "nobody verified"]),
        (TLS + "  client_auth_type: Sometimes\n", ["tls_server_config.client_auth_type", "'Sometimes'"]),
        (TLS + "  client_ca_file: ca.crt\n", ["tls_server_config.client_ca_file", "without a client_auth_type"]),
        (TLS + "  client_auth_type: RequireAndVerifyClientCert\n", ["tls_server_config.client_ca_file: required"]),
        (TLS + "  min_version: TLS14\n", ["tls_server_config.min_version", "'TLS14'"]),
        (TLS + "  min_version: null\n", ["tls_server_config.min_version", "found None"]),
        (TLS + "  min_version: [TLS12]\n", ["tls_server_config.min_version", "expected one of"]),
        (TLS + "  max_version: {TLS13: yes}\n", ["tls_server_config.max_version", "expected one of"]),
        (TLS + "  client_auth_type: [RequireAndVerifyClientCert]\n", ["tls_server_config.client_auth_type"]),
        (TLS + "  min_version: TLS13\n  max_version: TLS12\n", ["tls_server_config.max_version: lower"]),
        (TLS + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", ["tls_server_config.cipher_suites", "not supported"]),
        (TLS + "  key: '-----BEGIN PRIVATE KEY-----'\n", ["tls_server_config.key", "use key_file"]),
        ("rate_limit:\n  interval: 1s\n", ["rate_limit", "--web.max-requests"]),
        ("http_server_config:\n  headers:\n    Server: numawatch\n", ["http_server_config.headers.Server"]),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", ["X-Frame-Options", "deny"]),
        ("http_server_config:\n  http2: yes please\n", ["http_server_config.http2"]),
        ("basic_auth_users:\n  - prometheus\n", ["basic_auth_users: expected a mapping"]),
        ("- a list\n", ["expected a mapping"]),
        ("tls_server_config: [unclosed\n", ["not valid YAML"]),
    ],
)
def test_an_invalid_config_is_refused_in_one_line_naming_the_file_and_key(text, fragments):
    with pytest.raises(WebConfigError) as caught:
        parse_web_config(text, "/etc/numawatch/web.yml")

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("web config /etc/numawatch/web.yml: ")
    for fragment in fragments:
        assert fragment in message


def test_a_plain_text_password_in_basic_auth_users_is_refused_without_being_repeated():
    with pytest.raises(WebConfigError) as caught:
        parse_web_config(f"basic_auth_users:\n  prometheus: {PASSWORD}\n", "web.yml")

    assert "basic_auth_users.prometheus: expected a bcrypt hash" in str(caught.value)
    assert PASSWORD not in str(caught.value)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A server certificate for 127.0.0.1 from one CA, a client certificate from another, and a stranger's."""
    directory = tmp_path_factory.mktemp("pki")
    server_ca, client_ca, stranger_ca = trustme.CA(), trustme.CA(), trustme.CA()
    server = server_ca.issue_cert("127.0.0.1", "localhost")
    client = client_ca.issue_cert("prometheus.monitoring.svc")
    other_name = client_ca.issue_cert("grafana.monitoring.svc")
    stranger = stranger_ca.issue_cert("prometheus.monitoring.svc")
    files = {
        "server.crt": server.cert_chain_pems[0].bytes(),
        "server.key": server.private_key_pem.bytes(),
        "server-ca.crt": server_ca.cert_pem.bytes(),
        "client-ca.crt": client_ca.cert_pem.bytes(),
        "client.pem": client.private_key_and_cert_chain_pem.bytes(),
        "other-name.pem": other_name.private_key_and_cert_chain_pem.bytes(),
        "stranger.pem": stranger.private_key_and_cert_chain_pem.bytes(),
        "other.key": stranger.private_key_pem.bytes(),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return {name: directory / name for name in files}


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return path


def test_loading_a_config_loads_its_certificates(tmp_path, pki):
    path = write_config(tmp_path, f"tls_server_config:\n  cert_file: {pki['server.crt']}\n"
                                  f"  key_file: {pki['server.key']}\n")

    config = load_web_config(path)

    assert webconfig.ssl_context(config).verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(
    ("tls", "fragments"),
    [
        ("  cert_file: {missing}\n  key_file: {key}\n", ["tls_server_config.cert_file: cannot read"]),
        ("  cert_file: {cert}\n  key_file: {other}\n", ["tls_server_config.cert_file/key_file", "must match"]),
        ("  cert_file: {cert}\n  key_file: {key}\n  client_ca_file: {key}\n"
         "  client_auth_type: VerifyClientCertIfGiven\n", ["tls_server_config.client_ca_file: cannot load"]),
    ],
)
def test_certificates_that_cannot_be_loaded_are_refused_naming_the_key(tmp_path, pki, tls, fragments):
    text = "tls_server_config:\n" + tls.format(missing=tmp_path / "nope.crt", cert=pki["server.crt"],
                                               key=pki["server.key"], other=pki["other.key"])
    path = write_config(tmp_path, text)

    with pytest.raises(WebConfigError) as caught:
        load_web_config(path)

    assert str(caught.value).startswith(f"web config {path}: ")
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_a_missing_config_file_is_refused(tmp_path):
    with pytest.raises(WebConfigError, match="cannot read it"):
        load_web_config(tmp_path / "absent.yml")


# ------------------------------------------------------------------------------------------------ basic auth
@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Basic " + base64.b64encode(b"prometheus:pa:ss").decode(), ("prometheus", b"pa:ss")),
        ("basic " + base64.b64encode(b"u:").decode(), ("u", b"")),
        ("Bearer abc", None),
        ("Basic !!!notbase64", None),
        ("Basic " + base64.b64encode(b"no-colon").decode(), None),
        ("", None),
    ],
)
def test_basic_authorization_headers_are_parsed(header, expected):
    assert expected == parse_basic_authorization(header)


def test_basic_auth_accepts_the_password_refuses_others_and_remembers_only_successes():
    auth = BasicAuth({"prometheus": fast_hash(PASSWORD).encode()})

    assert auth.cached("prometheus", PASSWORD.encode()) is None
    assert auth.verify("prometheus", PASSWORD.encode())
    assert auth.cached("prometheus", PASSWORD.encode())
    assert not auth.verify("prometheus", WRONG.encode())
    assert auth.cached("prometheus", WRONG.encode()) is None
    assert not auth.verify("grafana", PASSWORD.encode())
    assert not auth.verify("prometheus", b"x" * 100)  # over bcrypt's 72 bytes: refused, not an exception


def test_client_allowed_sans_match_a_name_of_the_verified_certificate():
    config = parse_web_config(TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
                                    "  client_allowed_sans: [prometheus.monitoring.svc]\n", "web.yml")

    assert webconfig.peer_allowed(config, {"subjectAltName": (("DNS", "prometheus.monitoring.svc"),)})
    assert not webconfig.peer_allowed(config, {"subjectAltName": (("DNS", "grafana.monitoring.svc"),)})
    assert not webconfig.peer_allowed(config, None)


# ------------------------------------------------------------------------------------------------ the real server
def serve(root: Path, *extra: str) -> contextlib.AbstractContextManager[tuple[subprocess.Popen, str]]:
    # Debug logging: the tests read the log to prove that no secret reaches it.
    return numawatch_serve(root, "--log-level", "debug", *extra)


def stop(process: subprocess.Popen) -> str:
    """SIGTERM, wait, and the whole stderr."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    return process.stderr.read()


def client_context(pki: dict[str, Path], cert: str | None = None, **versions: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["server-ca.crt"]))
    if cert is not None:
        context.load_cert_chain(str(pki[cert]))
    for attribute, version in versions.items():
        setattr(context, attribute, version)
    return context


def request(url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None,
            path: str = "/metrics") -> tuple[int, dict[str, str], bytes]:
    """One GET over a fresh connection; raises what the TLS layer or the socket raises."""
    host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    if url.startswith("https"):
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(host, int(port), context=context,
                                                                           timeout=10)
    else:
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.headers), response.read()
    finally:
        connection.close()


def wait_healthy(url: str, **kwargs) -> None:
    deadline = time.monotonic() + 30
    while request(url, path="/healthz", **kwargs)[0] != 200:
        if time.monotonic() > deadline:
            raise AssertionError("numawatch serve never became healthy")
        time.sleep(0.05)


REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine, OSError)


@pytest.mark.slow
def test_mutual_tls_serves_a_client_with_a_certificate_and_refuses_the_rest(fake_host, pki, tmp_path):
    config = write_config(tmp_path, f"""
tls_server_config:
  cert_file: {pki['server.crt']}
  key_file: {pki['server.key']}
  client_ca_file: {pki['client-ca.crt']}
  client_auth_type: RequireAndVerifyClientCert
  client_allowed_sans: [prometheus.monitoring.svc]
""")
    with serve(fake_host.root, "--web.config.file", str(config)) as (process, url):
        wait_healthy(url, context=client_context(pki, "client.pem"))
        status, headers, body = request(url, client_context(pki, "client.pem"))
        # Verified, but not a name the config lets in.
        other_name = request(url, client_context(pki, "other-name.pem"))[0]
        with pytest.raises(REFUSED):
            request(url, client_context(pki))  # no client certificate
        with pytest.raises(REFUSED):
            request(url, client_context(pki, "stranger.pem"))  # signed by a CA numawatch does not trust
        with pytest.raises(REFUSED):
            request(url.replace("https://", "http://"))  # plain HTTP to the TLS port
        stderr = stop(process)

    assert url.startswith("https://127.0.0.1:")
    assert status == 200
    assert other_name == 403
    assert headers["Content-Type"] == metrics.CONTENT_TYPE
    assert b"numawatch_build_info" in body
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_min_version_tls13_refuses_a_tls12_client(fake_host, pki, tmp_path):
    config = write_config(tmp_path, f"tls_server_config:\n  cert_file: {pki['server.crt']}\n"
                                    f"  key_file: {pki['server.key']}\n  min_version: TLS13\n")
    with serve(fake_host.root, "--web.config.file", str(config)) as (process, url):
        wait_healthy(url, context=client_context(pki))
        with pytest.raises(REFUSED):
            request(url, client_context(pki, maximum_version=ssl.TLSVersion.TLSv1_2))
        stop(process)


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.slow
def test_basic_auth_over_tls_admits_the_right_password_only_and_never_logs_credentials(fake_host, pki, tmp_path):
    config = write_config(tmp_path, f"""
tls_server_config:
  cert_file: {pki['server.crt']}
  key_file: {pki['server.key']}
http_server_config:
  headers:
    X-Content-Type-Options: nosniff
    X-Frame-Options: deny
basic_auth_users:
  prometheus: {fast_hash(PASSWORD)}
""")
    context = client_context(pki)
    with serve(fake_host.root, "--web.config.file", str(config)) as (process, url):
        wait_healthy(url, context=context)  # /healthz needs no password: probes have none
        right = request(url, context, basic("prometheus", PASSWORD))
        again = request(url, context, basic("prometheus", PASSWORD))
        wrong = request(url, context, basic("prometheus", WRONG))
        stranger = request(url, context, basic("grafana", PASSWORD))
        anonymous = request(url, context)
        landing = request(url, context, path="/")
        # A malformed Authorization header: aiohttp's parser error quotes the offending line, credentials and all;
        # numawatch logs only that it answered 400, and why in its own words.
        with socket.create_connection(url.split("://")[1].rstrip("/").rsplit(":", 1)) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            header = basic("prometheus", PASSWORD)["Authorization"]
            tls.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {header}\x01\r\n\r\n".encode())
            malformed = tls.recv(1024)
        stderr = stop(process)

    assert (right[0], again[0]) == (200, 200)
    assert right[1]["X-Content-Type-Options"] == "nosniff"
    assert right[1]["X-Frame-Options"] == "deny"
    for refused in (wrong, stranger, anonymous, landing):
        assert refused[0] == 401
        assert refused[1]["WWW-Authenticate"].startswith("Basic realm=")
        assert refused[1]["X-Frame-Options"] == "deny"
    assert malformed.startswith(b"HTTP/1.0 400")
    assert "answered 400 to 127.0.0.1: malformed request" in stderr  # logged, without any of the header
    assert PASSWORD not in stderr
    assert WRONG not in stderr
    for user, password in (("prometheus", PASSWORD), ("prometheus", WRONG), ("grafana", PASSWORD)):
        assert basic(user, password)["Authorization"].split()[1] not in stderr


@pytest.mark.slow
def test_serve_refuses_to_start_on_an_invalid_web_config_naming_the_file_and_key(fake_host, tmp_path):
    config = write_config(tmp_path, "tls_server_config:\n  cert_file: s.crt\n  key_file: s.key\n"
                                    "  client_auth_type: RequireAnyClientCert\n")

    result = subprocess.run([sys.executable, "-m", "numawatch", "--host-root", str(fake_host.root), "serve",
                             "--listen", "127.0.0.1:0", "--web.config.file", str(config)],
                            capture_output=True, text=True, timeout=60)

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    record = strict_logfmt.parse(line)  # serve's last words are a log line like the rest
    assert record["level"] == "error"
    assert record["msg"].startswith(f"web config {config}: tls_server_config.client_auth_type: ")


@pytest.mark.slow
def test_sighup_reloads_the_web_config_and_a_broken_one_is_refused(fake_host, pki, tmp_path):
    config = write_config(tmp_path, f"basic_auth_users:\n  prometheus: {fast_hash(PASSWORD)}\n")
    with serve(fake_host.root, "--web.config.file", str(config)) as (process, url):
        wait_healthy(url)
        before = request(url, headers=basic("prometheus", PASSWORD))[0]
        config.write_text(f"basic_auth_users:\n  prometheus: {fast_hash(WRONG)}\n")
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while request(url, headers=basic("prometheus", WRONG))[0] != 200:
            assert time.monotonic() < deadline, "the new password never worked"
            time.sleep(0.05)
        old = request(url, headers=basic("prometheus", PASSWORD))[0]
        config.write_text("basic_auth_users:\n  prometheus: not-a-hash\n")
        process.send_signal(signal.SIGHUP)
        time.sleep(0.5)  # nothing to wait for: the broken file must change nothing
        kept = request(url, headers=basic("prometheus", WRONG))[0]
        stderr = stop(process)

    assert (before, old, kept) == (200, 401, 200)
    assert "web config reload failed, keeping the previous one" in stderr
    assert "not-a-hash" not in stderr


# ------------------------------------------------------------------------------------------------ secrets stay in
SECRET = "sk-live-9f8e7d6c5b4a39281706"


def plant_secrets(node) -> int:
    """A token in a GPU process' command line and environment, and in its OCI bundle's process args."""
    pid = 4100  # the vLLM pod's process in the reference node
    host = node.host
    host.write(f"proc/{pid}/cmdline", f"python3\0-m\0vllm.entrypoints.openai.api_server\0--api-key={SECRET}\0")
    host.write(f"proc/{pid}/environ", f"HF_TOKEN={SECRET}\0PATH=/usr/bin\0")
    for config in host.root.glob("run/**/config.json"):
        spec = json.loads(config.read_text())
        spec.setdefault("process", {})["args"] = ["vllm", f"--api-key={SECRET}"]
        spec["process"]["env"] = [f"OPENAI_API_KEY={SECRET}"]
        config.write_text(json.dumps(spec))
    return pid


@pytest.mark.slow
def test_command_lines_and_environments_never_reach_the_exposition_the_page_or_the_report(fake_host):
    node = reference_node(fake_host)
    node.split_across_nodes()  # findings name the workload: the secret must not come along
    plant_secrets(node)
    evaluation = node.evaluate()

    exposition = metrics.render(evaluation).decode()
    report = subprocess.run([sys.executable, "-m", "numawatch", "--host-root", str(fake_host.root), "check",
                             "--format", "json"], capture_output=True, text=True, timeout=60)
    with serve(fake_host.root) as (process, url):
        wait_healthy(url)
        served = request(url)[2].decode() + request(url, path="/")[2].decode()
        stderr = stop(process)

    assert "container_numa_split" in exposition
    assert VLLM.name in exposition
    for text in (exposition, report.stdout, report.stderr, served, stderr):
        assert SECRET not in text
        assert "api-key" not in text


def one_cpu_sampler() -> server.Sampler:
    def read(paths: Paths) -> Topology:
        cpus = {0: Cpu(0, True, 0, 0, 0)}
        return Topology(cpus=cpus, online=frozenset(cpus), nodes={0: NumaNode(0, frozenset(cpus))},
                        isolation=IsolationParams())

    reader = HostReader(Paths.from_root("/nonexistent"), (SourceSpec("topology", read),))
    return server.Sampler(reader, REFERENCE, checks=())


async def test_configured_headers_are_on_every_answer_errors_included(aiohttp_client):
    config = parse_web_config("http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                              "    Content-Security-Policy: default-src 'none'\n", "web.yml")
    sampler = one_cpu_sampler()
    client = await aiohttp_client(server.make_app(sampler, run_sampler=False, gate=server.Gate(web_config=config)))
    await sampler.refresh()

    answers = [await client.get("/metrics"), await client.get("/no/such/page"), await client.post("/metrics"),
               await client.head("/metrics")]

    assert [answer.status for answer in answers] == [200, 404, 405, 200]
    for answer in answers:
        assert answer.headers["X-Frame-Options"] == "deny"
        assert answer.headers["Content-Security-Policy"] == "default-src 'none'"


# ------------------------------------------------------------------------------------------------ exact bcrypt hashes
GOOD_HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


@pytest.mark.parametrize(
    "block",
    [
        f"  prometheus: |\n    {GOOD_HASH}\n",  # a YAML literal block keeps the line break
        f"  prometheus: \"{GOOD_HASH}\\n\"\n",
        f"  prometheus: \"{GOOD_HASH} \"\n",
        f"  prometheus: \" {GOOD_HASH}\"\n",
        f"  prometheus: \"{GOOD_HASH}\\t\"\n",
        f"  prometheus: \"{GOOD_HASH[:-1]}\"\n",  # one character short
        f"  prometheus: \"{GOOD_HASH}A\"\n",  # one too many
        f"  prometheus: \"{GOOD_HASH.replace('$2b$', '$2x$')}\"\n",  # not a variant bcrypt verifies
        f"  prometheus: \"{GOOD_HASH.replace('$04$', '$4$')}\"\n",
        f"  prometheus: \"{GOOD_HASH[:-1]}!\"\n",  # outside bcrypt's base64 alphabet
    ],
    ids=["literal-block", "newline", "trailing-space", "leading-space", "tab", "short", "long", "2x", "cost",
         "alphabet"],
)
def test_a_bcrypt_hash_that_is_not_exactly_one_is_refused_naming_the_user(block):
    with pytest.raises(WebConfigError) as caught:
        parse_web_config("basic_auth_users:\n" + block, "/etc/numawatch/web.yml")

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("web config /etc/numawatch/web.yml: basic_auth_users.prometheus: ")
    assert GOOD_HASH not in message


@pytest.mark.parametrize("prefix", ["$2a$", "$2b$", "$2y$"])
def test_every_bcrypt_variant_is_accepted_and_its_password_verifies(prefix):
    hashed = GOOD_HASH.replace("$2b$", prefix, 1)
    config = parse_web_config(f"basic_auth_users:\n  prometheus: '{hashed}'\n", "web.yml")

    assert config.users["prometheus"] == hashed.encode()
    assert BasicAuth(config.users).verify("prometheus", PASSWORD.encode())



# ------------------------------------------------------------------------------------------------ hostile files
def test_deeply_nested_yaml_is_one_line_error_at_little_cost():
    """1.9 KB of '[' ended ``serve`` with a RecursionError traceback."""
    started = time.process_time()
    with pytest.raises(WebConfigError) as caught:
        parse_web_config("[" * 1900, "/etc/numawatch/web.yml")
    spent = time.process_time() - started

    assert str(caught.value) == ("web config /etc/numawatch/web.yml: not valid YAML at line 1: nested deeper than 32 "
                                 "levels")
    assert spent < 1.0


def test_nesting_within_the_bound_still_parses():
    config = parse_web_config("http_server_config:\n  headers:\n    X-Frame-Options: deny\n", "web.yml")

    assert config.headers == {"X-Frame-Options": "deny"}


def test_an_unknown_key_that_is_a_line_of_a_password_file_is_described_not_repeated():
    line = "root:$6$Qz8cD1x9$Ld0uWqJ3kPz5Hc1oR2nV7gYbT4sE6fA8mX0iK9jU3wZ:19700:0:99999:7:::"
    with pytest.raises(WebConfigError) as caught:
        parse_web_config(f"{line}\nbin:*:19700:0:99999:7:::\n", "/etc/numawatch/web.yml")

    message = str(caught.value)
    assert "$6$" not in message and "Qz8cD1x9" not in message
    assert message == (f"web config /etc/numawatch/web.yml: <a key of {len(line) - 1} characters that is not a name>: "
                       "unknown key; expected one of tls_server_config, http_server_config, basic_auth_users, "
                       "rate_limit")


@pytest.mark.parametrize("cost", [17, 31])
def test_a_bcrypt_cost_no_scrape_can_wait_for_is_refused_at_start(cost):
    hashed = GOOD_HASH.replace("$04$", f"${cost}$", 1)
    with pytest.raises(WebConfigError) as caught:
        parse_web_config(f"basic_auth_users:\n  prometheus: '{hashed}'\n", "/etc/numawatch/web.yml")

    assert str(caught.value).startswith(
        f"web config /etc/numawatch/web.yml: basic_auth_users.prometheus: bcrypt cost {cost} is outside 4..16")
    assert hashed not in str(caught.value)


def test_serve_refuses_to_start_with_a_bcrypt_cost_of_31(fake_host, tmp_path):
    hashed = GOOD_HASH.replace("$04$", "$31$", 1)
    config = write_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    completed = subprocess.run(
        [sys.executable, "-m", "numawatch", "--host-root", str(fake_host.root), "serve", "--web.listen-address",
         "127.0.0.1:0", "--web.config.file", str(config)],
        capture_output=True, text=True, timeout=60,
    )

    assert completed.returncode != 0
    assert "bcrypt cost 31 is outside 4..16" in completed.stderr
    assert "Traceback" not in completed.stderr


def scrape_families(url: str, headers: dict[str, str]) -> dict[str, list]:
    status, _, body = request(url, headers=headers)
    assert status == 200
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        found[family.name] = family.samples
    return found


def sample(found: dict[str, list], name: str, **labels: str) -> float:
    """The value of the one sample called ``name`` with ``labels`` (a counter's family is named without _total)."""
    [value] = [s.value for samples in found.values() for s in samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return value


@pytest.mark.parametrize("emptied", ["", "basic_auth_users: {}\n", "basic_auth_users:\n"],
                         ids=["empty-file", "empty-users", "null-users"])
def test_a_reload_that_would_remove_basic_auth_is_refused_and_counted(fake_host, tmp_path, emptied):
    """Emptying the web config made a reload turn authentication off: unauthenticated /metrics answered 200."""
    config = write_config(tmp_path, f"basic_auth_users:\n  prometheus: {fast_hash(PASSWORD)}\n")
    good = basic("prometheus", PASSWORD)
    with serve(fake_host.root, "--web.config.file", str(config)) as (process, url):
        wait_healthy(url)
        before = scrape_families(url, good)
        config.write_text(emptied)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while sample(scrape_families(url, good), "numawatch_config_reload_failures_total", file="web") != 1:
            assert time.monotonic() < deadline, "the refused reload was never counted"
            time.sleep(0.05)
        after = scrape_families(url, good)
        anonymous = request(url)[0]
        stderr = stop(process)

    assert sample(before, "numawatch_config_last_reload_successful", file="web") == 1
    assert sample(before, "numawatch_config_reload_failures_total", file="web") == 0
    assert sample(after, "numawatch_config_last_reload_successful", file="web") == 0
    assert sample(after, "numawatch_config_last_reload_successful", file="intent") == 1
    assert anonymous == 401
    assert "web config reload refused, keeping the previous one: removing basic auth (every user) needs a restart" in (
        stderr)


def test_every_failed_web_config_reload_shows_in_its_metric_until_one_succeeds(fake_host, tmp_path):
    """A broken certificate rotation (a missing file, a directory in its place) was only logged: nothing to alert on."""
    config = write_config(tmp_path, f"basic_auth_users:\n  prometheus: {fast_hash(PASSWORD)}\n")
    good = basic("prometheus", PASSWORD)
    text = config.read_text()
    with serve(fake_host.root, "--web.config.file", str(config)) as (process, url):
        wait_healthy(url)
        failures = []
        for breakage in ("missing", "directory"):
            if breakage == "missing":
                config.unlink()
            else:
                config.mkdir()
            process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 20
            while (found := scrape_families(url, good)) and sample(
                    found, "numawatch_config_reload_failures_total", file="web") != len(failures) + 1:
                assert time.monotonic() < deadline, f"the {breakage} file's reload was never counted"
                time.sleep(0.05)
            failures.append(sample(found, "numawatch_config_last_reload_successful", file="web"))
            if breakage == "directory":
                config.rmdir()
        config.write_text(text)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while sample(scrape_families(url, good), "numawatch_config_last_reload_successful", file="web") != 1:
            assert time.monotonic() < deadline, "the good reload never showed"
            time.sleep(0.05)
        final = scrape_families(url, good)
        stop(process)

    assert failures == [0, 0]
    assert sample(final, "numawatch_config_reload_failures_total", file="web") == 2


def test_a_failed_intent_reload_is_counted_by_file(fake_host, tmp_path):
    intent = tmp_path / "intent.yaml"
    intent.write_text("kubelet:\n  topologyManagerPolicy: best-effort\n")
    with numawatch_serve(fake_host.root, "--intent", str(intent)) as (process, url):
        wait_healthy(url)
        intent.write_text("[" * 1900)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while sample(found := scrape_families(url, {}), "numawatch_config_reload_failures_total", file="intent") != 1:
            assert time.monotonic() < deadline, "the failed intent reload was never counted"
            time.sleep(0.05)
        stderr = stop(process)

    assert sample(found, "numawatch_config_last_reload_successful", file="intent") == 0
    assert {s.labels["file"] for s in found["numawatch_config_last_reload_successful"]} == {"intent"}
    assert "nested deeper than 32 levels" in stderr
    assert "RecursionError" not in stderr and "Traceback" not in stderr
