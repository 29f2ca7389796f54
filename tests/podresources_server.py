"""A kubelet's pod-resources server for tests: grpcio on a Unix socket in a fake host tree, speaking the real
``v1.PodResourcesLister`` messages.

The messages come from the API's .proto (exporter/numawatch/podresources_v1.proto) compiled here with
grpcio-tools and the protobuf runtime, an implementation independent of numawatch's own codec
(numawatch/podresources.py), so every test that serves through it holds that codec to protobuf's. A kubelet cannot
run here; this is the fake, shaped as the kubelet's server answers (pkg/kubelet/apis/podresources/server_v1.go).
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from grpc_tools import protoc

PROTO = Path(__file__).resolve().parents[1] / "exporter/numawatch/podresources_v1.proto"
SOCKET = "var/lib/kubelet/pod-resources/kubelet.sock"

_compiled: ModuleType | None = None
_lock = threading.Lock()


def api() -> ModuleType:
    """The ``_pb2`` module protoc makes of the API's .proto (compiled once per test process)."""
    global _compiled
    with _lock:
        if _compiled is None:
            out = tempfile.mkdtemp(prefix="numawatch-pb2-")
            # protoc names the module after the file: podresources_v1.proto -> podresources_v1_pb2
            code = protoc.main(["protoc", f"-I{PROTO.parent}", f"--python_out={out}", PROTO.name])
            if code != 0:
                raise RuntimeError(f"protoc failed on {PROTO}")
            sys.path.insert(0, out)
            try:
                _compiled = importlib.import_module("podresources_v1_pb2")
            finally:
                sys.path.remove(out)
        return _compiled


@dataclass
class Held:
    """What one container holds, as the test states it: exclusive CPUs, devices (resource -> NUMA node or None ->
    IDs) and memory blocks ((type, size, NUMA nodes))."""

    cpus: Iterable[int] = ()
    devices: Mapping[str, Mapping[int | None, Iterable[str]]] = field(default_factory=dict)
    memory: Iterable[tuple[str, int, Iterable[int]]] = ()


def _topology(pb: ModuleType, nodes: Iterable[int] | None) -> Any:
    return None if nodes is None else pb.TopologyInfo(nodes=[pb.NUMANode(ID=node) for node in nodes])


def container_message(pb: ModuleType, name: str, held: Held) -> Any:
    devices = []
    for resource, per_node in held.devices.items():
        for node, ids in per_node.items():
            # One ContainerDevices per device and NUMA node, as the kubelet sends them
            # (containerDevicesFromResourceDeviceInstances)
            for device_id in ids:
                message = pb.ContainerDevices(resource_name=resource, device_ids=[device_id])
                if node is not None:
                    message.topology.CopyFrom(_topology(pb, [node]))
                devices.append(message)
    memory = []
    for kind, size, nodes in held.memory:
        block = pb.ContainerMemory(memory_type=kind, size=size)
        block.topology.CopyFrom(_topology(pb, nodes))
        memory.append(block)
    return pb.ContainerResources(name=name, devices=devices, cpu_ids=sorted(held.cpus), memory=memory)


def list_response(pods: Mapping[tuple[str, str], Mapping[str, Held]]) -> bytes:
    """A serialized ``ListPodResourcesResponse`` of (namespace, pod) -> container -> what it holds."""
    pb = api()
    return pb.ListPodResourcesResponse(
        pod_resources=[
            pb.PodResources(
                name=name,
                namespace=namespace,
                containers=[container_message(pb, container, held) for container, held in containers.items()],
            )
            for (namespace, name), containers in pods.items()
        ]
    ).SerializeToString()


def allocatable_response(cpus: Iterable[int], devices: Mapping[str, Mapping[int | None, Iterable[str]]]) -> bytes:
    pb = api()
    message = container_message(pb, "", Held(cpus=cpus, devices=devices))
    return pb.AllocatableResourcesResponse(devices=message.devices, cpu_ids=message.cpu_ids).SerializeToString()


@dataclass
class Behaviour:
    """What the fake kubelet answers. ``list_bytes``/``allocatable_bytes``: the serialized answers; ``get``:
    "served", "unimplemented" (a kubelet before 1.27) or "disabled" (the gate off: an error of its own); ``hang``:
    seconds each call sleeps before answering."""

    list_bytes: bytes = b""
    allocatable_bytes: bytes = b""
    get: str = "served"
    hang: float = 0.0
    calls: list[str] = field(default_factory=list)


class _Service(grpc.GenericRpcHandler):
    def __init__(self, behaviour: Behaviour, released: threading.Event) -> None:
        self.behaviour = behaviour
        self.released = released

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = details.method
        behaviour = self.behaviour

        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            behaviour.calls.append(method)
            if behaviour.hang:
                self.released.wait(behaviour.hang)
            if method == "/v1.PodResourcesLister/List":
                return behaviour.list_bytes
            if method == "/v1.PodResourcesLister/GetAllocatableResources":
                return behaviour.allocatable_bytes
            if method == "/v1.PodResourcesLister/Get":
                if behaviour.get == "unimplemented":
                    context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method Get for service v1.PodResourcesLister")
                if behaviour.get == "disabled":
                    context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
                pb = api()
                asked = pb.GetPodResourcesRequest.FromString(request)
                listed = pb.ListPodResourcesResponse.FromString(behaviour.list_bytes)
                for pod in listed.pod_resources:
                    if pod.name == asked.pod_name and pod.namespace == asked.pod_namespace:
                        return pb.GetPodResourcesResponse(pod_resources=pod).SerializeToString()
                context.abort(grpc.StatusCode.UNKNOWN, f"pod {asked.pod_name} not found")
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
            raise AssertionError("unreachable")

        identity: Callable[[bytes], bytes] = lambda data: data  # noqa: E731
        return grpc.unary_unary_rpc_method_handler(answer, request_deserializer=identity, response_serializer=identity)


@contextmanager
def serving(root: Path | str, behaviour: Behaviour, socket: str = SOCKET) -> Iterator[Behaviour]:
    """Serve ``behaviour`` on ``<root>/<socket>`` for the block. The socket is bound at a short path and moved into
    the tree (a socket address holds 107 bytes; a test's tree may be deeper)."""
    target = Path(root) / socket
    target.parent.mkdir(parents=True, exist_ok=True)
    short = tempfile.mkdtemp(prefix="nwpr-")
    bound = os.path.join(short, "k.sock")
    released = threading.Event()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((_Service(behaviour, released),))
    server.add_insecure_port(f"unix:{bound}")
    server.start()
    os.rename(bound, target)
    try:
        yield behaviour
    finally:
        released.set()
        server.stop(grace=None)
        if target.exists() or target.is_socket():
            target.unlink()
        os.rmdir(short)
