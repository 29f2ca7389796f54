"""The kubelet's pod-resources API: what the live kubelet has handed out, from its own memory.

One reading asks the kubelet's ``v1.PodResourcesLister`` over its Unix socket (``--path.pod-resources-socket``,
by default ``<kubelet root>/pod-resources/kubelet.sock``), each call with a deadline (podresources.py):

- ``List``: every container's exclusive CPUs (``cpu_ids``; none for the shared pool), its devices with their NUMA
  nodes, its Memory Manager blocks;
- ``GetAllocatableResources``: what the kubelet may hand out (a kubelet before 1.21 does not serve it);
- ``Get``, for one listed pod: whether the kubelet serves it (1.27+ with the KubeletPodResourcesGet gate).

The socket is resolved inside the host root and connected to through the descriptor that resolution gave
(``HostFs.open_socket``). No socket, a refused connection or no answer within the deadline: the source is down
with a one-line reason, and what depends on it falls back on the checkpoint files (workloads.py). An answer that
is not the API's messages, or that names what the kubelet cannot (a pod name that is no DNS subdomain, a CPU
beyond any kernel's, a resource name Kubernetes would refuse), is ``MalformedFile`` naming the socket: nothing of
it reaches a label or a message unchecked.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from numawatch import podresources
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import excerpt, k8s_label, k8s_subdomain
from numawatch.model import frozen_map
from numawatch.model.kubelet import ContainerResources, MemoryBlock, PodResources, ResourceDevices
from numawatch.paths import Paths
from numawatch.refresh import FULL, Carried, Refresh
from numawatch.source import Inputs, SourceSpec
from numawatch.sources.kubelet_state import host_name

# The kernel's largest CONFIG_NR_CPUS and CONFIG_NODES_SHIFT (10): a CPU or NUMA node beyond these is no machine's.
MAX_CPUS = 8192
MAX_NUMA_NODES = 1024
# A resource name (k8s.io/apimachinery IsQualifiedName, as the kubelet validates extended resources): an optional
# DNS subdomain prefix and "/", then a name of at most 63 alphanumerics, "-", "_" or ".". Memory types are
# "memory" and "hugepages-<size>", which it also covers.
_RESOURCE = re.compile(
    r"(?:(?=[^/]{1,253}/)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
# A device ID as device plugins register them ("GPU-<uuid>", "MIG-...", "0000:3b:00.0"): printable ASCII without
# spaces, bounded (what the workloads join repeats as a label).
_DEVICE_ID = re.compile(r"[\x21-\x7e]{1,256}")
_MEMORY_LIMIT = 1 << 62  # no node holds an exabyte of memory: a larger size is no kubelet's answer


def _checked(value: str, pattern: re.Pattern[str], what: str) -> str:
    if pattern.fullmatch(value) is None:
        raise ValueError(f"{what} {excerpt(value)} is not one the kubelet would give")
    return value


def _cpus(ids: Iterable[int], what: str) -> frozenset[int]:
    cpus = frozenset(ids)
    for cpu in cpus:
        if not 0 <= cpu < MAX_CPUS:
            raise ValueError(f"{what}: CPU {cpu} is out of range")
    return cpus


def _nodes(nodes: tuple[int, ...] | None, what: str) -> tuple[int, ...] | None:
    if nodes is None:
        return None
    for node in nodes:
        if not 0 <= node < MAX_NUMA_NODES:
            raise ValueError(f"{what}: NUMA node {node} is out of range")
    return tuple(sorted(set(nodes)))


def _devices(listed: Iterable[podresources.Devices], what: str) -> tuple[ResourceDevices, ...]:
    """The devices by resource and NUMA node, as the device checkpoint files them: the API lists a device once per
    NUMA node of its topology, and without topology (no ``TopologyInfo``, or one with no nodes) under -1."""
    by_resource: dict[str, dict[int, set[str]]] = {}
    for devices in listed:
        resource = _checked(devices.resource_name, _RESOURCE, f"{what}: resource name")
        nodes = _nodes(devices.numa_nodes, f"{what}: {resource}") or (-1,)
        per_numa = by_resource.setdefault(resource, {})
        for device_id in devices.device_ids:
            _checked(device_id, _DEVICE_ID, f"{what}: {resource} device ID")
            for node in nodes:
                per_numa.setdefault(node, set()).add(device_id)
    return tuple(
        ResourceDevices(resource, frozen_map({node: tuple(sorted(ids)) for node, ids in sorted(per_numa.items())}))
        for resource, per_numa in sorted(by_resource.items())
    )


def _memory(listed: Iterable[podresources.Memory], what: str) -> tuple[MemoryBlock, ...]:
    blocks = []
    for memory in listed:
        kind = _checked(memory.memory_type, _RESOURCE, f"{what}: memory type")
        if memory.size > _MEMORY_LIMIT:
            raise ValueError(f"{what}: {kind} size {memory.size} is out of range")
        blocks.append(MemoryBlock(_nodes(memory.numa_nodes, f"{what}: {kind}") or (), kind, memory.size))
    return tuple(blocks)


def _container(container: podresources.Container, pod: str) -> tuple[str, ContainerResources]:
    name = k8s_label(container.name, f"pod {pod}: container name")
    what = f"container {pod}/{name}"
    return name, ContainerResources(
        exclusive_cpus=_cpus(container.cpu_ids, what),
        devices=_devices(container.devices, what),
        memory_blocks=_memory(container.memory, what),
    )


class CheckedPod(NamedTuple):
    """One listed pod, checked: its (namespace, name) and what each container holds."""

    key: tuple[str, str]  # (namespace, pod name): the snapshot's key
    containers: Mapping[str, ContainerResources]


def _checked_pod(pod: podresources.Pod) -> CheckedPod:
    """One listed pod, checked (ValueError naming what is wrong)."""
    namespace = k8s_label(pod.namespace, "namespace")
    name = k8s_subdomain(pod.name, f"namespace {namespace}: pod name")
    containers: dict[str, ContainerResources] = {}
    for container in pod.containers:
        container_name, resources = _container(container, f"{namespace}/{name}")
        if container_name in containers:
            raise ValueError(f"pod {namespace}/{name}: container {container_name} is listed twice")
        containers[container_name] = resources
    return CheckedPod((namespace, name), frozen_map(containers))


def _gathered(checked: Iterable[CheckedPod]) -> Mapping[tuple[str, str], Mapping[str, ContainerResources]]:
    pods: dict[tuple[str, str], Mapping[str, ContainerResources]] = {}
    for key, containers in checked:
        if key in pods:
            namespace, name = key
            raise ValueError(f"pod {namespace}/{name} is listed twice")
        pods[key] = containers
    return frozen_map(pods)


def pods_of(listed: Iterable[podresources.Pod]) -> Mapping[tuple[str, str], Mapping[str, ContainerResources]]:
    """List's pods, checked: (namespace, pod name) -> container name -> what it holds. ValueError names what is
    wrong (a name Kubernetes refuses, a pod or container listed twice, a CPU or NUMA node out of range)."""
    return _gathered(_checked_pod(pod) for pod in listed)


class ListParse(NamedTuple):
    """A List answer parsed: its pods, and each pod message's checked pod (what the next parse reuses)."""

    pods: Mapping[tuple[str, str], Mapping[str, ContainerResources]]
    checked: Mapping[bytes, CheckedPod]


def parse_list_answer(listed: bytes, previous: Mapping[bytes, CheckedPod] | None = None) -> ListParse:
    """The kubelet's List answer (its bytes on the wire), decoded and checked as ``pods_of`` checks it. Pure; a pod
    whose message is the same bytes as one of ``previous`` (the previous parse's ``checked``) is that checked pod,
    not decoded and checked again: 860 pods cost tens of milliseconds in Python, and a pod's message stays the same
    bytes while the pod does. podresources.WireError when the bytes are not an answer, ValueError naming what is
    wrong in one."""
    known = previous or {}
    messages = podresources.pod_messages(listed)
    checked: dict[bytes, CheckedPod] = {}
    for index, message in enumerate(messages):
        pod = known.get(message)
        if pod is None:
            pod = _checked_pod(podresources.decode_pod(message, f"List.pod_resources[{index}]"))
        checked[message] = pod
    return ListParse(_gathered(checked[message] for message in messages), checked)


def _with_allocatable(
    socket: str,
    pods: Mapping[tuple[str, str], Mapping[str, ContainerResources]],
    allocatable: podresources.Allocatable | None,
    get_served: bool | None,
) -> PodResources:
    if allocatable is None:
        return PodResources(socket, pods, get_served=get_served)
    return PodResources(
        socket,
        pods,
        allocatable_cpus=_cpus(allocatable.cpu_ids, "allocatable"),
        allocatable_devices=_devices(allocatable.devices, "allocatable"),
        allocatable_memory=_memory(allocatable.memory, "allocatable"),
        get_served=get_served,
    )


def snapshot(
    socket: str,
    listed: Iterable[podresources.Pod],
    allocatable: podresources.Allocatable | None,
    get_served: bool | None,
) -> PodResources:
    """The source's snapshot from the kubelet's answers (checked: ValueError naming what is wrong)."""
    return _with_allocatable(socket, pods_of(listed), allocatable, get_served)


@dataclass(frozen=True, eq=False)
class PodResourcesMemory:
    """What a reading leaves the next: the kubelet's answers as they came, what each pod's message was checked
    into, and the snapshot. Decoding and checking 860 pods costs tens of milliseconds in Python; the kubelet answers
    in the same bytes while nothing changed, and a pod's message stays the same bytes while the pod does."""

    list_answer: bytes
    allocatable_answer: bytes | None
    pods: Mapping[bytes, CheckedPod]  # by the pod's message (``ListParse.checked``)
    snapshot: PodResources


def _ask(client: podresources.Client, last: PodResourcesMemory | None) -> tuple[bytes, bytes | None, bool | None]:
    """The answers to List and GetAllocatableResources (None: not served), and whether the kubelet serves Get,
    asked again only when the List answer changed."""
    try:
        listed = client.list()
    except podresources.Unsupported:
        raise SourceUnavailable("the kubelet does not serve the pod-resources API v1 (before 1.20)") from None
    try:
        allocatable: bytes | None = client.allocatable()
    except podresources.Unsupported:
        allocatable = None
    if last is not None and last.list_answer == listed:
        return listed, allocatable, last.snapshot.get_served
    get_served: bool | None = None
    messages = podresources.pod_messages(listed)
    if messages:
        first = podresources.decode_pod(messages[0], "List.pod_resources[0]")
        try:
            client.get(first.name, first.namespace)
            get_served = True
        except podresources.Unsupported:
            get_served = False
    return listed, allocatable, get_served


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading that keeps what the previous one made of the answers that did not change (``PodResourcesMemory``):
    the whole snapshot when the kubelet answers as before, each unchanged pod's checked entries otherwise."""
    last: PodResourcesMemory | None = None if refresh.whole else refresh.memory
    socket = host_name(paths, paths.pod_resources)
    try:
        fd = paths.fs.open_socket(paths.pod_resources)
    except FileNotFoundError:
        raise SourceUnavailable(f"no pod-resources socket at {socket}") from None
    except OSError as error:
        raise SourceUnavailable(f"{error.strerror or error}: {socket}") from None  # as every source says it
    try:
        with podresources.Client("unix:" + paths.own_fd(fd)) as client:
            listed, allocatable, get_served = _ask(client, last)
    except podresources.Unreachable as error:
        raise SourceUnavailable(f"pod-resources socket {socket}: {error}") from None
    except podresources.WireError as error:
        raise MalformedFile(socket, f"not a pod-resources answer: {error}") from None
    finally:
        os.close(fd)
    if (
        last is not None
        and last.list_answer == listed
        and last.allocatable_answer == allocatable
        and last.snapshot.socket == socket
    ):
        return Carried(last.snapshot, last, unchanged=True)
    try:
        parsed = parse_list_answer(listed, last.pods if last is not None else None)
        decoded = None if allocatable is None else podresources.decode_allocatable_response(allocatable)
        made = _with_allocatable(socket, parsed.pods, decoded, get_served)
    except podresources.WireError as error:
        raise MalformedFile(socket, f"not a pod-resources answer: {error}") from None
    except ValueError as error:
        raise MalformedFile(socket, str(error)) from None
    return Carried(made, PodResourcesMemory(listed, allocatable, parsed.checked, made))


def read(paths: Paths) -> PodResources:
    snapshot: PodResources = read_incremental(paths, Inputs({}), FULL).snapshot
    return snapshot


# --------------------------------------------------------------------------------------------------- recording
class Recording:
    """``numawatch capture`` keeps the kubelet's answer (the socket is no file to copy): as JSON in the API's own
    shape, which ``check --from`` reads back through the same checks as a live answer (a bundle is hostile too)."""

    VERSION = 1

    def dump(self, result: PodResources) -> bytes:
        def devices(listed: tuple[ResourceDevices, ...]) -> list[dict[str, Any]]:
            return [
                {"resource_name": d.resource_name, "device_ids": list(ids), "topology": None if node < 0 else [node]}
                for d in listed
                for node, ids in d.devices_per_numa.items()
            ]

        def memory(blocks: tuple[MemoryBlock, ...]) -> list[dict[str, Any]]:
            return [{"memory_type": b.type, "size": b.size, "topology": list(b.numa_affinity)} for b in blocks]

        document: dict[str, Any] = {
            "version": self.VERSION,
            "socket": result.socket,
            "pod_resources": [
                {
                    "namespace": namespace,
                    "name": name,
                    "containers": [
                        {
                            "name": container,
                            "cpu_ids": sorted(held.exclusive_cpus),
                            "devices": devices(held.devices),
                            "memory": memory(held.memory_blocks),
                        }
                        for container, held in containers.items()
                    ],
                }
                for (namespace, name), containers in result.pods.items()
            ],
            "get_served": result.get_served,
        }
        if result.allocatable_cpus is not None:
            document["allocatable"] = {
                "cpu_ids": sorted(result.allocatable_cpus),
                "devices": devices(result.allocatable_devices),
                "memory": memory(result.allocatable_memory),
            }
        return json.dumps(document).encode()

    def load(self, data: bytes) -> PodResources:
        where = "recorded pod_resources reading"
        try:
            document = json.loads(data)
            if not isinstance(document, dict) or document.get("version") != self.VERSION:
                raise ValueError(f"expected a version {self.VERSION} recording")
            socket = _text(document.get("socket"), "socket")
            if not socket.isprintable() or len(socket) > 4096:
                raise ValueError("socket is not a path")
            pods = [_pod(raw) for raw in _list(document.get("pod_resources"), "pod_resources")]
            raw_allocatable = document.get("allocatable")
            allocatable = None
            if raw_allocatable is not None:
                if not isinstance(raw_allocatable, dict):
                    raise ValueError("allocatable: expected an object")
                allocatable = podresources.Allocatable(
                    devices=tuple(_recorded_devices(raw_allocatable.get("devices"))),
                    cpu_ids=_ints(raw_allocatable.get("cpu_ids"), "allocatable.cpu_ids"),
                    memory=tuple(_recorded_memory(raw_allocatable.get("memory"))),
                )
            get_served = document.get("get_served")
            if get_served is not None and not isinstance(get_served, bool):
                raise ValueError("get_served: expected a boolean or null")
            return snapshot(socket, pods, allocatable, get_served)
        except (ValueError, RecursionError) as error:
            raise MalformedFile(where, str(error)) from None


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected a list")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string")
    return value


def _ints(value: Any, what: str) -> tuple[int, ...]:
    items = _list(value, what)
    if not all(isinstance(item, int) and not isinstance(item, bool) for item in items):
        raise ValueError(f"{what}: expected whole numbers")
    return tuple(items)


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected an object")
    return value


def _topology(value: Any, what: str) -> tuple[int, ...] | None:
    return None if value is None else _ints(value, what)


def _recorded_devices(value: Any) -> list[podresources.Devices]:
    out = []
    for raw in _list(value, "devices"):
        item = _object(raw, "devices[]")
        out.append(
            podresources.Devices(
                _text(item.get("resource_name"), "resource_name"),
                tuple(_text(v, "device_ids[]") for v in _list(item.get("device_ids"), "device_ids")),
                _topology(item.get("topology"), "topology"),
            )
        )
    return out


def _recorded_memory(value: Any) -> list[podresources.Memory]:
    out = []
    for raw in _list(value, "memory"):
        item = _object(raw, "memory[]")
        size = item.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError("memory[].size: expected a whole number")
        out.append(
            podresources.Memory(
                _text(item.get("memory_type"), "memory_type"), size, _topology(item.get("topology"), "topology")
            )
        )
    return out


def _pod(raw: Any) -> podresources.Pod:
    item = _object(raw, "pod_resources[]")
    containers = []
    for raw_container in _list(item.get("containers"), "containers"):
        container = _object(raw_container, "containers[]")
        containers.append(
            podresources.Container(
                name=_text(container.get("name"), "containers[].name"),
                devices=tuple(_recorded_devices(container.get("devices"))),
                cpu_ids=_ints(container.get("cpu_ids"), "containers[].cpu_ids"),
                memory=tuple(_recorded_memory(container.get("memory"))),
            )
        )
    return podresources.Pod(
        _text(item.get("name"), "pod_resources[].name"),
        _text(item.get("namespace"), "pod_resources[].namespace"),
        tuple(containers),
    )


SOURCE = SourceSpec(
    name="pod_resources",
    read=read,
    incremental=read_incremental,
    recording=Recording(),
    description="the kubelet's pod-resources API (List, GetAllocatableResources, Get) over its Unix socket",
)
