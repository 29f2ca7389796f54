"""A stand-in for the Kubernetes API server: what cannot run here, served over real HTTPS for the real client.

``ApiServer`` serves ``GET /api/v1/nodes/<name>`` and ``GET /api/v1/pods?fieldSelector=spec.nodeName=<name>`` from an
aiohttp app on its own event loop thread, with a certificate from a trustme CA, and refuses any request without its
bearer token (401), as the API server does. ``kubeconfig()`` writes the file ``--kubeconfig`` reads (the CA and the
token inline, as ``kubectl config view --raw`` shows them). ``status`` makes it answer with the API's ``Status``
object instead (403 for missing RBAC), ``delay`` makes it slow (timeouts).

``node_object`` and ``pod_object`` build objects shaped as the API server returns them (API reference v1.Node and
v1.Pod, with the fields the kubelet, the scheduler and the admission plugins fill in); numawatch reads only some.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web

TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.numawatch-test-token.c2lnbmF0dXJl"
CREATED = "2026-11-02T09:14:27Z"


def _owner(kind: str, name: str, uid: str) -> dict[str, Any]:
    api = {"DaemonSet": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "Job": "batch/v1",
           "Node": "v1"}.get(kind, "example.com/v1")  # fmt: skip
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}  # fmt: skip


def node_object(
    name: str = "gpu-node-1",
    *,
    taints: Sequence[Mapping[str, str]] = ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
    labels: Mapping[str, str] | None = None,
    kubelet_version: str = "v1.31.4+rke2r1",
) -> dict[str, Any]:
    """A v1.Node as ``GET /api/v1/nodes/<name>`` returns it."""
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": "3f2a9c1e-7b4d-4e8a-9c2f-1d5e6a7b8c9d",
            "resourceVersion": "48213377",
            "creationTimestamp": CREATED,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "rke2",
                "nvidia.com/gpu.present": "true",
                "fibercli.local/numa-pinned": "true",
                **(labels or {}),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "rke2.io/node-args": '["agent","--node-taint","nvidia.com/gpu=present:NoSchedule"]',
            },
        },
        "spec": {
            "podCIDR": "10.42.3.0/24",
            "podCIDRs": ["10.42.3.0/24"],
            "providerID": f"rke2://{name}",
            **({"taints": [dict(taint) for taint in taints]} if taints else {}),
        },
        "status": {
            "capacity": {"cpu": "32", "ephemeral-storage": "1919727640Ki", "hugepages-1Gi": "8Gi",
                         "hugepages-2Mi": "0", "memory": "527990844Ki", "nvidia.com/gpu": "4", "pods": "110"},
            "allocatable": {"cpu": "30", "ephemeral-storage": "1867496544158", "hugepages-1Gi": "8Gi",
                            "hugepages-2Mi": "0", "memory": "517505084Ki", "nvidia.com/gpu": "4", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2026-12-06T03:10:12Z",
                 "lastTransitionTime": CREATED, "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-06T03:10:12Z",
                 "lastTransitionTime": CREATED, "reason": "KubeletReady",
                 "message": "kubelet is posting ready status"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.12.31"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "5a8d3c1f9e2b4a7d8c6f1e3a5b7d9c2e",
                "systemUUID": "4c4c4544-0047-3510-8052-b4c04f4d3433",
                "bootID": "9b1f6c2d-8e3a-4f5b-a7c9-d1e2f3a4b5c6",
                "kernelVersion": "6.8.0-49-generic",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://1.7.23-k3s2",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": kubelet_version,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def pod_object(
    uid: str,
    namespace: str,
    name: str,
    *,
    owner: tuple[str, str] | None = ("ReplicaSet", "app-5d8f7c6b9"),
    node_name: str = "gpu-node-1",
    qos_class: str = "Burstable",
    resources: Mapping[str, Mapping[str, str]] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    container: str = "app",
) -> dict[str, Any]:
    """A v1.Pod as it appears in a PodList's items (no kind or apiVersion there)."""
    labels = {"app.kubernetes.io/name": name.rsplit("-", 1)[0]}
    if owner is not None and owner[0] == "DaemonSet":
        labels |= {"controller-revision-hash": "6c9b8f7d5c", "pod-template-generation": "3"}
    elif owner is not None and owner[0] == "ReplicaSet":
        labels |= {"pod-template-hash": owner[1].rsplit("-", 1)[-1]}
    return {
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "48211032",
            "creationTimestamp": CREATED,
            "labels": labels,
            **({"ownerReferences": [_owner(owner[0], owner[1], "8d2c4e6f-1a3b-4c5d-9e7f-0a1b2c3d4e5f")]}
               if owner is not None else {}),
        },
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "containers": [{
                "name": container,
                "image": "registry.example/app:1.0",
                "resources": {key: dict(value) for key, value in (resources or {}).items()},
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": node_name,
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                *[dict(toleration) for toleration in tolerations],
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": CREATED}],
            "hostIP": "10.0.12.31",
            "hostIPs": [{"ip": "10.0.12.31"}],
            "podIP": "10.42.3.17",
            "podIPs": [{"ip": "10.42.3.17"}],
            "startTime": CREATED,
            "containerStatuses": [{"name": container, "state": {"running": {"startedAt": CREATED}},
                                   "ready": True, "restartCount": 0, "image": "registry.example/app:1.0",
                                   "imageID": "registry.example/app@sha256:" + "ab" * 32,
                                   "containerID": "containerd://" + "cd" * 32, "started": True}],
            "qosClass": qos_class,
        },
    }


def pod_list(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "48213390"}, "items": list(items)}


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    """The API's v1.Status, as it refuses a request."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": {"kind": "nodes"}, "code": code}  # fmt: skip


class ApiServer:
    """The stand-in, running while the ``with`` block does. Its fields may be changed between readings."""

    def __init__(self, directory: Path, node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> None:
        self.directory = directory
        self.node: Any = node
        self.pods: list[Any] = list(pods)
        self.status: tuple[int, str, str] | None = None
        self.delay = 0.0
        self.requests: list[str] = []  # "GET <path>?<query>"
        self.ca = trustme.CA()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    # ------------------------------------------------------------------------------------------------ handlers
    def _refused(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response(status_object(401, "Unauthorized", "Unauthorized"), status=401)
        if self.status is not None:
            code, reason, message = self.status
            return web.json_response(status_object(code, reason, message), status=code)
        return None

    async def _node(self, request: web.Request) -> web.Response:
        self.requests.append(f"GET {request.path_qs}")
        await asyncio.sleep(self.delay)
        refused = self._refused(request)
        if refused is not None:
            return refused
        if request.match_info["name"] != self.node["metadata"]["name"]:
            name = request.match_info["name"]
            return web.json_response(status_object(404, "NotFound", f'nodes "{name}" not found'), status=404)
        return web.json_response(self.node)

    async def _pods(self, request: web.Request) -> web.Response:
        self.requests.append(f"GET {request.path_qs}")
        await asyncio.sleep(self.delay)
        refused = self._refused(request)
        if refused is not None:
            return refused
        selector = request.query.get("fieldSelector", "")
        wanted = selector.removeprefix("spec.nodeName=") if selector.startswith("spec.nodeName=") else None
        items = [pod for pod in self.pods if wanted is None or pod["spec"].get("nodeName") == wanted]
        return web.json_response(pod_list(items))

    # ------------------------------------------------------------------------------------------------ lifecycle
    def __enter__(self) -> ApiServer:
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="fake-apiserver", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the fake API server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stopped is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    def _run(self, started: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve(started))
        self._loop.close()

    async def _serve(self, started: threading.Event) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/nodes/{name}", self._node)
        app.router.add_get("/api/v1/pods", self._pods)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._stopped = asyncio.Event()
        started.set()
        await self._stopped.wait()
        await runner.cleanup()

    def kubeconfig(self, name: str = "kubeconfig", *, token: str = TOKEN, port: int | None = None) -> Path:
        """A kubeconfig naming this server, its CA and the token (``port``: another one, where nothing listens)."""
        import base64

        path = self.directory / name
        ca = base64.b64encode(self.ca.cert_pem.bytes()).decode()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test", "preferences": {},
            "clusters": [{"name": "test", "cluster": {"server": f"https://127.0.0.1:{port or self.port}",
                                                      "certificate-authority-data": ca}}],
            "users": [{"name": "numawatch", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "numawatch"}}],
        }  # fmt: skip
        path.write_text(json.dumps(config))
        return path


def wait_for(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def serving(directory: Path, node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Iterator[ApiServer]:
    with ApiServer(directory, node, pods) as server:
        yield server
