"""The Kubernetes API session: read-only, optional, every call bounded in time.

Access, in this order: ``--kubeconfig FILE`` (its current context), else in-cluster (``KUBERNETES_SERVICE_HOST`` and
``_PORT`` set and the service account token mounted at /var/run/secrets/kubernetes.io/serviceaccount), else none:
then the session answers every reading with why it is not configured, and nothing else changes. ``KUBECONFIG`` and
``~/.kube/config`` are never looked at: a node agent talks to the cluster it runs in, or to the one it is told.

The client is kubernetes_asyncio (docs/sources.md says why): its REST layer is aiohttp, the HTTP stack serve already
runs, so its requests are tasks on serve's own event loop. Its config loaders handle kubeconfig credentials and the
in-cluster token (re-read as the kubelet rotates it); its generated models are not used: answers are taken as bytes
and checked by sources/kubernetes_api.py's parsers, as the API reference shapes them.

- ``serve``: ``cleanup_ctx`` runs a task that reads the Node and the node's pods at once and then every
  ``interval`` seconds (a bounded list, not a watch: two small requests a node, the pod list served from the API
  server's watch cache with ``resourceVersion=0``); an evaluation reads the last answer (``current``).
- ``check``: ``read_once`` reads once, before the host is read.

A request that does not answer within ``timeout`` seconds, a refusal (401, 403, 404), a connection error or an
answer that is not the API's makes the kubernetes_api source down with that reason until the next reading succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from numawatch.errors import SourceUnavailable
from numawatch.hosttext import excerpt, k8s_subdomain, shown
from numawatch.model.cluster import ClusterView

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0  # seconds per request
DEFAULT_INTERVAL = 30.0  # seconds between readings in serve
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"  # in the container: numawatch's own, not the host's
TOKEN_FILE = f"{SERVICE_ACCOUNT}/token"
CA_FILE = f"{SERVICE_ACCOUNT}/ca.crt"
NODE_NAME_ENV = "NODE_NAME"
MAX_ANSWER = 32 * 1024 * 1024  # a node's pod list is ~10 KB a pod: a few MB at most


@dataclass(frozen=True)
class ApiAccess:
    """Where and how to reach the API server."""

    node_name: str
    kubeconfig: str | None = None  # None: in-cluster
    timeout: float = DEFAULT_TIMEOUT
    interval: float = DEFAULT_INTERVAL
    # in-cluster: where the API server is (KUBERNETES_SERVICE_HOST/_PORT) and the service account's files
    environ: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    token_file: str = TOKEN_FILE
    ca_file: str = CA_FILE


def access_from(
    kubeconfig: str | None,
    node_name: str | None,
    environ: Mapping[str, str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    token_file: str = TOKEN_FILE,
    ca_file: str = CA_FILE,
) -> tuple[ApiAccess | None, str]:
    """(access, "") when numawatch has API access, else (None, why not) in one line."""
    env = os.environ if environ is None else environ
    if kubeconfig is None:
        if not env.get("KUBERNETES_SERVICE_HOST") or not env.get("KUBERNETES_SERVICE_PORT"):
            return None, (
                "not configured: no --kubeconfig, and not in a pod (KUBERNETES_SERVICE_HOST is not set); "
                "the node's taints and its pods' owners are not read from the API"
            )
        if not os.path.isfile(token_file):
            return None, (
                f"not configured: no --kubeconfig, and no service account token at {token_file} "
                "(automountServiceAccountToken is false?)"
            )
    name = node_name if node_name is not None else env.get(NODE_NAME_ENV)
    if not name:
        return None, (
            f"no node name: give --kubernetes.node-name or set {NODE_NAME_ENV} (the downward API's spec.nodeName)"
        )
    try:
        k8s_subdomain(name, "node name")
    except ValueError as error:
        return None, str(error)
    service = {key: env[key] for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") if key in env}
    return ApiAccess(node_name=name, kubeconfig=kubeconfig, timeout=timeout, interval=interval, environ=service,
                     token_file=token_file, ca_file=ca_file), ""  # fmt: skip


class ApiError(Exception):
    """A reading failed: the message is the source's one-line reason."""


class KubernetesApi:
    """The session: its last reading (or why there is none), kept for the kubernetes_api source.

    Thread-safe: the reading happens on an event loop, the source reads ``current()`` from the evaluation thread.
    """

    def __init__(self, access: ApiAccess | None, reason: str = "") -> None:
        self.access = access
        self._lock = threading.Lock()
        self._view: ClusterView | None = None
        self._reason = reason if access is None else "the Kubernetes API has not answered yet"
        self._client: Any = None
        self.readings = 0  # successful readings, for tests and logs

    def current(self) -> ClusterView:
        """The last reading; SourceUnavailable with the reason when there is none."""
        with self._lock:
            if self._view is None:
                raise SourceUnavailable(self._reason)
            return self._view

    def _store(self, view: ClusterView | None, reason: str) -> None:
        with self._lock:
            self._view, self._reason = view, reason

    # ------------------------------------------------------------------------------------------------- reading
    async def read(self) -> None:
        """One reading: the Node and the node's pods. Never raises for the API's sake: a failure is the reason."""
        if self.access is None:
            return
        from numawatch.sources.kubernetes_api import ApiShapeError, cluster_view, parse_json

        try:
            node_data = await self._get(f"/api/v1/nodes/{quote(self.access.node_name)}", {})
            pods_data = await self._get(
                "/api/v1/pods", {"fieldSelector": f"spec.nodeName={self.access.node_name}", "resourceVersion": "0"}
            )
            view = cluster_view(parse_json(node_data, "the Node"), parse_json(pods_data, "the pod list"))
        except ApiError as error:
            self._store(None, str(error))
            return
        except ApiShapeError as error:
            self._store(None, f"the API server's answer is not what the API returns: {error}")
            return
        self.readings += 1
        self._store(view, "")

    async def _get(self, path: str, query: Mapping[str, str]) -> bytes:
        assert self.access is not None
        where = f"GET {path}"
        timeout = self.access.timeout
        try:
            client = await asyncio.wait_for(self._api_client(), timeout)
            # The client's own call path (its authentication: bearer token, refreshed in-cluster token, exec
            # plugins), with the answer left as bytes: the parsers check it, not the generated models.
            response = await asyncio.wait_for(
                client.call_api(
                    path,
                    "GET",
                    query_params=list(query.items()) or None,
                    header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=timeout,
                ),
                timeout,
            )
            try:
                if not 200 <= response.status <= 299:
                    body = await asyncio.wait_for(response.content.read(4096), timeout)
                    raise ApiError(f"{where}: {_refusal(response.status, body)}")
                data = await asyncio.wait_for(_body(response.content), timeout)
            finally:
                response.release()
        except ApiError:
            raise
        except TimeoutError:
            raise ApiError(f"{where}: no answer within {timeout:g} s") from None
        except Exception as error:  # connection refused, TLS, DNS, a kubeconfig the loader refuses
            raise ApiError(f"{where}: {type(error).__name__}: {excerpt(str(error), 160)}") from None
        if data is None:
            raise ApiError(f"{where}: the answer is larger than {MAX_ANSWER} bytes")
        return data

    async def _api_client(self) -> Any:
        """The client, made on the running loop at the first request (aiohttp's session belongs to a loop)."""
        if self._client is not None:
            return self._client
        assert self.access is not None
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        if self.access.kubeconfig is not None:
            await config.load_kube_config(config_file=self.access.kubeconfig, client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration, environ=dict(self.access.environ),
                                         token_filename=self.access.token_file, cert_filename=self.access.ca_file)
        self._client = client.ApiClient(configuration=configuration)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await client.close()

    def read_once(self) -> None:
        """``check``: one reading on a loop of its own, bounded by twice the per-request limit plus the client's
        setup."""
        if self.access is None:
            return

        async def once() -> None:
            try:
                await asyncio.wait_for(self.read(), 3 * self.access.timeout)  # type: ignore[union-attr]
            except TimeoutError:
                self._store(None, "the Kubernetes API did not answer in time")
            finally:
                await self.close()

        asyncio.run(once())

    async def keep_current(self) -> None:
        """``serve``: read now and then every ``interval`` seconds, until cancelled."""
        assert self.access is not None
        interval = self.access.interval
        logged: str | None = ""  # the failure last logged; None: the last reading succeeded
        while True:
            started = time.monotonic()
            try:
                await asyncio.wait_for(self.read(), 3 * self.access.timeout)
            except TimeoutError:
                self._store(None, "the Kubernetes API did not answer in time")
            with self._lock:
                reason = self._reason if self._view is None else None
            if reason != logged:  # a change only: a missing role must not log every interval
                if reason is not None:
                    log.warning("Kubernetes API not read: %s", reason)
                else:
                    log.info("Kubernetes API read: node %s", self.access.node_name)
                logged = reason
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def cleanup_ctx(self, app: object = None) -> AsyncIterator[None]:
        """aiohttp's ``cleanup_ctx``: the reading task runs while serve does."""
        if self.access is None:
            yield
            return
        task = asyncio.get_running_loop().create_task(self.keep_current(), name="numawatch-kubernetes-api")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await self.close()


async def _body(stream: Any) -> bytes | None:
    """The whole body (a read returns what has arrived so far, not all of it); None past MAX_ANSWER."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await stream.read(1 << 16)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER:
            return None
        chunks.append(chunk)


def _refusal(status: int, body: bytes) -> str:
    """The API server's refusal in one line: its Status message when it sent one (checked, shortened)."""
    from numawatch.sources.kubernetes_api import ApiShapeError, parse_json

    meaning = {401: "unauthorized (the token is not accepted)", 403: "forbidden (RBAC: see deploy/README.md)",
               404: "not found"}.get(status, "refused")  # fmt: skip
    message = ""
    try:
        document = parse_json(body, "status")
        if isinstance(document, dict) and isinstance(document.get("message"), str):
            message = shown(document["message"], 200)
    except ApiShapeError:
        pass
    return f"HTTP {status} {meaning}" + (f": {message}" if message else "")
