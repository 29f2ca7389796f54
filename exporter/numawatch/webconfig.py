"""``--web.config.file``: TLS, client certificates, basic auth and security headers, in the exporter-toolkit format.

The file is the one Prometheus users already write for node_exporter (prometheus/exporter-toolkit
``docs/web-configuration.md``), so one Secret can serve both::

    tls_server_config:
      cert_file: server.crt            # relative paths are relative to this file's directory
      key_file: server.key
      client_ca_file: prometheus-ca.crt
      client_auth_type: RequireAndVerifyClientCert
      min_version: TLS12               # TLS10 .. TLS13; default TLS12
    http_server_config:
      headers:
        Strict-Transport-Security: max-age=31536000
    basic_auth_users:
      prometheus: $2y$10$...           # bcrypt (htpasswd -nBC 10 prometheus)

What numawatch does differently, on purpose, and refuses with a one-line error rather than ignores:

- ``client_auth_type`` ``RequestClientCert`` and ``RequireAnyClientCert`` accept certificates nobody verified (and
  Python's ssl module cannot ask for a certificate without verifying it); use ``VerifyClientCertIfGiven`` or
  ``RequireAndVerifyClientCert``.
- inline ``cert``/``key``/``client_ca``, ``cipher_suites``, ``curve_preferences`` and ``rate_limit`` are not
  supported: OpenSSL's defaults apply, certificates come from files (a Kubernetes Secret mounted as files), and
  ``--web.max-requests`` bounds concurrency.

Everything is validated when ``serve`` starts (the certificate and key are loaded, the CA is read, every hash is
checked to be bcrypt), so a bad file stops numawatch before it listens. Messages name the file and the key and never
repeat a secret: a wrong ``basic_auth_users`` value might be a plain-text password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import ssl
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from numawatch.boundedyaml import BoundedLoader, NestingTooDeep
from numawatch.model import frozen_map

# Config files are a few hundred bytes; anything near this is not a web config.
MAX_FILE_BYTES = 1 << 20

CLIENT_AUTH_TYPES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# The headers exporter-toolkit lets a user set (web/tls_config.go), with the values it accepts where it restricts them.
ALLOWED_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = (
    "cert_file", "key_file", "client_ca_file", "client_auth_type", "client_allowed_sans", "min_version",
    "max_version", "prefer_server_cipher_suites", "cert", "key", "client_ca", "cipher_suites", "curve_preferences",
)
_HTTP_KEYS = ("http2", "headers")
_UNSUPPORTED = {
    "rate_limit": "not supported by numawatch; --web.max-requests bounds concurrent requests",
    "tls_server_config.cert": "inline certificates are not supported by numawatch; use cert_file",
    "tls_server_config.key": "inline keys are not supported by numawatch; use key_file",
    "tls_server_config.client_ca": "an inline client CA is not supported by numawatch; use client_ca_file",
    "tls_server_config.cipher_suites": "not supported by numawatch (OpenSSL's defaults apply); remove it",
    "tls_server_config.curve_preferences": "not supported by numawatch (OpenSSL's defaults apply); remove it",
}

# $2a$/$2b$/$2y$, two-digit cost, 22 characters of salt and 31 of hash in bcrypt's base64 alphabet; nothing else
# (matched whole: "$" alone would let a trailing newline through, and bcrypt would then never match the password).
_BCRYPT = re.compile(r"\$2[aby]\$(?P<cost>[0-9]{2})\$[./A-Za-z0-9]{53}")
# The costs bcrypt itself accepts (golang.org/x/crypto/bcrypt's MinCost and MaxCost, which exporter-toolkit checks),
# of which numawatch takes those a scrape can wait for: each step doubles the time, cost 10 is about 50 ms, and a
# check at 17 would take seconds of a verifier thread (31: days), so one scraper's first request would time out.
MIN_BCRYPT_COST = 4
MAX_BCRYPT_COST = 16
# A key is repeated in a message only when it has the shape of one: anything else (a line of a password file that
# ended up here) is described, never quoted.
_KEY_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# User names end up in messages and in the cache key: printable, no ':' (basic auth's separator).
_USER = re.compile(r"[^\x00-\x1f\x7f:]+")

# Checked against when the user is unknown, so that a wrong user name costs the same bcrypt time as a wrong password
# and response times do not tell which user names exist. Hash of random bytes nobody knows, cost 10 like htpasswd.
_DUMMY_HASH = b"$2b$10$L3qMTk/y.7S.9sTwEo2BIuIRX2/0tCTBpIVT8U29erOnFHLAWwQyu"


class WebConfigError(ValueError):
    """An invalid web config file; the message is one line: the file, the key, what is wrong (never a secret)."""


@dataclass(frozen=True)
class TLSConfig:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str | None = None


@dataclass(frozen=True)
class WebConfig:
    source: str
    tls: TLSConfig | None = None
    # user -> bcrypt hash
    users: Mapping[str, bytes] = field(default_factory=frozen_map)
    headers: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"


# --------------------------------------------------------------------------------------------------- loading
def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read and validate a web config file, loading its certificates so that a bad one fails now, not at a scrape."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise WebConfigError(f"web config {source}: cannot read it: {error.strerror or error}") from None
    if len(data) > MAX_FILE_BYTES:
        raise WebConfigError(f"web config {source}: larger than {MAX_FILE_BYTES} bytes")
    config = parse_web_config(data.decode("utf-8", errors="replace"), source, base=Path(source).parent)
    if config.tls is not None:
        ssl_context(config)  # raises WebConfigError naming the key whose file could not be loaded
    return config


def parse_web_config(text: str, source: str = "<web config>", base: Path | None = None) -> WebConfig:
    """Validate the YAML text; file paths are resolved against ``base`` (the config file's directory)."""
    reader = _Reader(source, base or Path.cwd())
    try:
        data = yaml.load(text, Loader=BoundedLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as error:
        # The problem is not repeated (it may quote the file: a secret), except for what the depth bound says.
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        why = f": {error.problem}" if isinstance(error, NestingTooDeep) else ""
        raise WebConfigError(f"web config {source}: not valid YAML{where}{why}") from None
    except ValueError:  # a constructor's: a date no calendar has, an integer longer than int() converts
        raise WebConfigError(f"web config {source}: not valid YAML (a value no type can hold)") from None
    return reader.config(data)


class _Reader:
    def __init__(self, source: str, base: Path) -> None:
        self.source = source
        self.base = base

    def fail(self, key: str, what: str) -> WebConfigError:
        return WebConfigError(f"web config {self.source}: {key}: {what}")

    def mapping(self, value: Any, key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, found {_kind(value)}")
        for name in value:
            if name not in allowed:
                raise self.fail(_qualified(key, name), f"unknown key; expected one of {', '.join(allowed)}")
            qualified = f"{key}.{name}" if key else str(name)
            if qualified in _UNSUPPORTED:
                raise self.fail(qualified, _UNSUPPORTED[qualified])
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"expected a non-empty string, found {_kind(value)}")
        if "\n" in value or "\r" in value:
            raise self.fail(key, "expected one line")
        return value

    def file(self, value: Any, key: str) -> Path:
        path = Path(self.string(value, key))
        return path if path.is_absolute() else self.base / path

    def config(self, data: Any) -> WebConfig:
        top = self.mapping(data, "", _TOP_KEYS)
        tls = self.tls(top["tls_server_config"]) if top.get("tls_server_config") is not None else None
        http = self.mapping(top.get("http_server_config"), "http_server_config", _HTTP_KEYS)
        if "http2" in http and not isinstance(http["http2"], bool):
            raise self.fail("http_server_config.http2", f"expected true or false, found {_kind(http['http2'])}")
        headers = self.headers(http.get("headers"))
        users = self.users(top.get("basic_auth_users"))
        return WebConfig(self.source, tls, frozen_map(users), frozen_map(headers))

    def tls(self, value: Any) -> TLSConfig:
        section = self.mapping(value, "tls_server_config", _TLS_KEYS)
        for required in ("cert_file", "key_file"):
            if section.get(required) is None:
                raise self.fail(f"tls_server_config.{required}", "required when tls_server_config is given")
        auth = section.get("client_auth_type", "NoClientCert")
        if isinstance(auth, str) and auth in _UNVERIFIED_CLIENT_AUTH:
            raise self.fail(
                "tls_server_config.client_auth_type",
                f"{auth} accepts client certificates nobody verified and is not supported by numawatch; "
                "use VerifyClientCertIfGiven or RequireAndVerifyClientCert",
            )
        if not isinstance(auth, str) or auth not in CLIENT_AUTH_TYPES:
            raise self.fail(
                "tls_server_config.client_auth_type",
                f"expected one of {', '.join(CLIENT_AUTH_TYPES)}, found {_found(auth)}",
            )
        ca = self.file(section["client_ca_file"], "tls_server_config.client_ca_file") if section.get(
            "client_ca_file") is not None else None
        if ca is not None and auth == "NoClientCert":
            # exporter-toolkit refuses this too: a CA nobody is asked to match is a configuration mistake.
            raise self.fail("tls_server_config.client_ca_file",
                            "given without a client_auth_type that verifies client certificates")
        if ca is None and auth != "NoClientCert":
            raise self.fail("tls_server_config.client_ca_file", f"required with client_auth_type {auth}")
        sans = section.get("client_allowed_sans") or []
        if not isinstance(sans, list) or not all(isinstance(san, str) and san for san in sans):
            raise self.fail("tls_server_config.client_allowed_sans", "expected a list of non-empty strings")
        if sans and auth == "NoClientCert":
            raise self.fail("tls_server_config.client_allowed_sans", "needs a client_auth_type that verifies")
        # An explicit ``min_version: null`` is refused like any other unknown version (exporter-toolkit does the
        # same); only max_version may be left unset.
        min_version = section.get("min_version", "TLS12")
        if not isinstance(min_version, str) or min_version not in TLS_VERSIONS:
            raise self.fail("tls_server_config.min_version",
                            f"expected one of {', '.join(TLS_VERSIONS)}, found {_found(min_version)}")
        max_version = section.get("max_version")
        if max_version is not None and (not isinstance(max_version, str) or max_version not in TLS_VERSIONS):
            raise self.fail("tls_server_config.max_version",
                            f"expected one of {', '.join(TLS_VERSIONS)}, found {_found(max_version)}")
        if max_version is not None and TLS_VERSIONS[max_version] < TLS_VERSIONS[min_version]:
            raise self.fail("tls_server_config.max_version", "lower than min_version")
        if "prefer_server_cipher_suites" in section and not isinstance(section["prefer_server_cipher_suites"], bool):
            raise self.fail("tls_server_config.prefer_server_cipher_suites", "expected true or false")
        return TLSConfig(
            cert_file=self.file(section["cert_file"], "tls_server_config.cert_file"),
            key_file=self.file(section["key_file"], "tls_server_config.key_file"),
            client_ca_file=ca,
            client_auth_type=auth,
            client_allowed_sans=tuple(sans),
            min_version=min_version,
            max_version=max_version,
        )

    def headers(self, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail("http_server_config.headers", f"expected a mapping, found {_kind(value)}")
        canonical = {name.lower(): name for name in ALLOWED_HEADERS}
        headers: dict[str, str] = {}
        for name, text in value.items():
            key = _qualified("http_server_config.headers", name)
            proper = canonical.get(str(name).lower())
            if proper is None:
                raise self.fail(key, f"not a header numawatch sets; expected one of {', '.join(ALLOWED_HEADERS)}")
            text = self.string(text, key)
            allowed = ALLOWED_HEADERS[proper]
            if allowed is not None and text.lower() not in allowed:
                raise self.fail(key, f"expected one of {', '.join(allowed)}, found {_found(text)}")
            headers[proper] = text
        return headers

    def users(self, value: Any) -> dict[str, bytes]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail("basic_auth_users", f"expected a mapping of user to bcrypt hash, found {_kind(value)}")
        users: dict[str, bytes] = {}
        for user, hashed in value.items():
            if not isinstance(user, str) or not _USER.fullmatch(user):
                raise self.fail("basic_auth_users", "user names are non-empty strings without ':' or control "
                                                    "characters")
            # Never echo the value: someone may have pasted the password itself.
            key = _qualified("basic_auth_users", user)
            if isinstance(hashed, str) and hashed != hashed.strip() and _BCRYPT.fullmatch(hashed.strip()):
                raise self.fail(key,
                                "the bcrypt hash has a line break or spaces around it (a YAML '|' block keeps its "
                                "newline); write it on the key's line, quoted")
            matched = _BCRYPT.fullmatch(hashed) if isinstance(hashed, str) else None
            if matched is None:
                raise self.fail(key,
                                "expected a bcrypt hash ($2y$10$..., e.g. from htpasswd -nBC 10); the value is not one")
            cost = int(matched["cost"])
            if not MIN_BCRYPT_COST <= cost <= MAX_BCRYPT_COST:
                raise self.fail(key, f"bcrypt cost {cost} is outside {MIN_BCRYPT_COST}..{MAX_BCRYPT_COST} (each step "
                                     "doubles the time of a check; htpasswd -nBC 10 makes one of 10)")
            users[user] = matched.group().encode("ascii")
        return users


def _qualified(parent: str, name: Any) -> str:
    """``parent.name`` for a message; a ``name`` that does not look like a key is described, not quoted."""
    if not isinstance(name, str):
        shown = f"<a key that is {_kind(name)}>"
    elif _KEY_NAME.fullmatch(name):
        shown = name
    else:
        shown = f"<a key of {len(name)} characters that is not a name>"
    return f"{parent}.{shown}" if parent else shown


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def _found(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------------------- TLS
def ssl_context(config: WebConfig) -> ssl.SSLContext | None:
    """The server-side SSL context of ``config`` (None without TLS), certificates loaded."""
    tls = config.tls
    if tls is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    if tls.max_version is not None:
        context.maximum_version = TLS_VERSIONS[tls.max_version]
    context.set_alpn_protocols(["http/1.1"])
    for key, path in (("cert_file", tls.cert_file), ("key_file", tls.key_file)):
        if not os.access(path, os.R_OK):
            raise WebConfigError(f"web config {config.source}: tls_server_config.{key}: cannot read {path}")
    try:
        # A password callback that gives nothing: an encrypted key fails here instead of prompting on a terminal.
        context.load_cert_chain(tls.cert_file, tls.key_file, password=lambda: b"")
    except (ssl.SSLError, OSError) as error:
        raise WebConfigError(
            f"web config {config.source}: tls_server_config.cert_file/key_file: cannot load {tls.cert_file} with "
            f"{tls.key_file} ({_ssl_reason(error)}); they must be PEM, unencrypted, and the key must match"
        ) from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as error:
            raise WebConfigError(
                f"web config {config.source}: tls_server_config.client_ca_file: cannot load {tls.client_ca_file} "
                f"({_ssl_reason(error)})"
            ) from None
    context.verify_mode = CLIENT_AUTH_TYPES[tls.client_auth_type]
    return context


def _ssl_reason(error: Exception) -> str:
    if isinstance(error, ssl.SSLError):
        return error.reason or str(error)
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return str(error)


def peer_allowed(config: WebConfig, peercert: Mapping[str, Any] | None) -> bool:
    """Whether a verified client certificate carries one of ``client_allowed_sans`` (always true without a list)."""
    tls = config.tls
    if tls is None or not tls.client_allowed_sans:
        return True
    if not peercert:
        return False
    names = {value for _kind_, value in peercert.get("subjectAltName", ())}
    return any(san in names for san in tls.client_allowed_sans)


# --------------------------------------------------------------------------------------------------- basic auth
def parse_basic_authorization(header: str) -> tuple[str, bytes] | None:
    """``Basic base64(user:password)`` -> (user, password bytes), None when the header is anything else."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    return user.decode("utf-8", errors="replace"), password


class BasicAuth:
    """Checks user and password against the bcrypt hashes; remembers recent good pairs, never failures.

    bcrypt costs tens of milliseconds by design, and Prometheus sends the same credentials every scrape, so a
    verified pair is remembered, keyed by a SHA-256 of user, hash and password together, as exporter-toolkit's cache
    is (the password itself is never kept). Only successes are: guessing always pays bcrypt's price, and no amount of
    guessing can push a real scraper's entry out. ``verify`` blocks; ``numawatch serve`` runs it in
    ``passwords.VerifierPool``'s few threads, so a flood of guesses costs those CPUs and no more.
    """

    MAX_CACHED = 64

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = users
        self._verified: OrderedDict[bytes, None] = OrderedDict()  # least recently used first
        self._guard = threading.Lock()

    @staticmethod
    def _key(user: str, hashed: bytes, password: bytes) -> bytes:
        digest = hashlib.sha256()
        for part in (user.encode("utf-8", "surrogateescape"), hashed, password):
            digest.update(len(part).to_bytes(4, "big") + part)  # lengths first: no two triples hash alike
        return digest.digest()

    def cached(self, user: str, password: bytes) -> bool | None:
        """True when this pair was verified recently; None when bcrypt must decide."""
        hashed = self.users.get(user)
        if hashed is None:
            return None
        key = self._key(user, hashed, password)
        with self._guard:
            if key not in self._verified:
                return None
            self._verified.move_to_end(key)
            return True

    def verify(self, user: str, password: bytes) -> bool:
        """Blocking bcrypt check (call it off the event loop)."""
        import bcrypt

        hashed = self.users.get(user)
        try:
            ok = bcrypt.checkpw(password, hashed if hashed is not None else _DUMMY_HASH)
        except ValueError:  # longer than bcrypt's 72 bytes (bcrypt>=5 refuses), or a hash it cannot read
            ok = False
        if not ok or hashed is None:
            return False
        key = self._key(user, hashed, password)
        with self._guard:
            self._verified[key] = None
            self._verified.move_to_end(key)
            while len(self._verified) > self.MAX_CACHED:
                self._verified.popitem(last=False)
        return True


__all__ = [
    "ALLOWED_HEADERS",
    "CLIENT_AUTH_TYPES",
    "TLS_VERSIONS",
    "BasicAuth",
    "TLSConfig",
    "WebConfig",
    "WebConfigError",
    "load_web_config",
    "parse_basic_authorization",
    "parse_web_config",
    "peer_allowed",
    "ssl_context",
]
