"""The kubernetes_api source: this node's Node object and the pods bound to it, as the API server returns them.

Optional and read-only. numawatch reads the API only where it is given access: in a pod whose service account token
is mounted (in-cluster: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and ``/var/run/secrets/kubernetes.io/serviceaccount``)
or with ``--kubeconfig FILE``. Two requests, each bounded in time (numawatch.kubeapi does the talking):

- ``GET /api/v1/nodes/<node>``: ``spec.taints`` (what ``node_taint_missing`` compares), ``metadata.labels``,
  ``status.nodeInfo.kubeletVersion``;
- ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>&resourceVersion=0``: per pod its ``metadata.uid``,
  ``namespace``, ``name``, ``ownerReferences`` (a DaemonSet's pod is a node agent, not a foreign workload),
  ``spec.tolerations`` and its containers' ``resources``.

This module holds the parsers (JSON in, model out, no I/O) and the source; the source reads what the session's last
reading holds, so an evaluation never waits on the network. Every value is checked as the API server validates it
(names are DNS-1123 labels or subdomains, UIDs UUIDs, label keys qualified names, taints kubectl's syntax) before it
can reach a label or a message: a Node that fails is a malformed reading (the source is down naming the field); a pod
that fails is left out and named in ``problems``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import excerpt, k8s_label, k8s_subdomain, one_of, pod_uid, printable
from numawatch.model import frozen_map
from numawatch.model.cluster import ApiPod, ClusterView, NodeObject, Owner, Toleration
from numawatch.paths import Paths
from numawatch.source import ReaderContext, SourceSpec
from numawatch.taints import TAINT_EFFECTS, Taint, TaintError, parse_label, parse_taint

OPERATORS = frozenset({"Equal", "Exists"})
PHASES = frozenset({"Pending", "Running", "Succeeded", "Failed", "Unknown"})
# An owner's kind is a CamelCase Go type name (DaemonSet, ReplicaSet, a custom resource's kind).
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
# A kubelet version as the kubelet reports it: v<major>.<minor>.<patch>, optional pre-release and build parts
# (v1.31.4+rke2r1, v1.30.2-eks-1552ad0, v1.32.0-alpha.1).
_VERSION = re.compile(r"v\d{1,3}\.\d{1,3}\.\d{1,4}(-[0-9A-Za-z.-]{1,64})?(\+[0-9A-Za-z.-]{1,64})?")
# A resource name (cpu, memory, nvidia.com/gpu, hugepages-1Gi) and a quantity as the API server prints it.
_RESOURCE = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?")
MAX_PODS = 5000  # a node runs at most a few hundred (the kubelet's maxPods is 110 by default)


class ApiShapeError(ValueError):
    """A field is not what the API server returns; the message names it."""


# --------------------------------------------------------------------------------------------------- parsers
def _object(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiShapeError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiShapeError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, where: str, *, optional: bool = False) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise ApiShapeError(f"{where}: expected a string, got {excerpt(value)}")
    return value


def _checked(check: Any, value: str, where: str) -> str:
    try:
        return check(value, where)
    except ValueError as error:
        raise ApiShapeError(str(error)) from None


def _labels(value: Any, where: str) -> Mapping[str, str]:
    labels: dict[str, str] = {}
    for key, text in _object(value, where).items():
        if not isinstance(text, str):
            raise ApiShapeError(f"{where}.{excerpt(key)}: expected a string, got {excerpt(text)}")
        try:
            parsed_key, parsed_value = parse_label(f"{key}={text}")
        except TaintError as error:
            raise ApiShapeError(f"{where}: {error}") from None
        labels[parsed_key] = parsed_value
    return frozen_map(labels)


def _taint(value: Any, where: str) -> Taint:
    item = _object(value, where)
    key = _string(item.get("key"), f"{where}.key")
    effect = _string(item.get("effect"), f"{where}.effect")
    text = _string(item.get("value"), f"{where}.value", optional=True)
    try:
        return parse_taint(f"{key}={text}:{effect}" if text else f"{key}:{effect}")
    except TaintError as error:
        raise ApiShapeError(f"{where}: {error}") from None


def parse_node(document: Any) -> NodeObject:
    """A ``v1.Node`` as ``GET /api/v1/nodes/<name>`` returns it -> NodeObject. Raises ApiShapeError."""
    node = _object(document, "Node")
    if node.get("kind") not in (None, "Node"):
        raise ApiShapeError(f"kind: expected Node, got {excerpt(node.get('kind'))}")
    metadata = _object(node.get("metadata"), "metadata")
    name = _checked(k8s_subdomain, _string(metadata.get("name"), "metadata.name"), "metadata.name")
    spec = _object(node.get("spec"), "spec")
    taints = tuple(_taint(item, f"spec.taints[{index}]") for index, item in enumerate(_list(spec.get("taints"),
                                                                                            "spec.taints")))
    unschedulable = spec.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        raise ApiShapeError(f"spec.unschedulable: expected a boolean, got {excerpt(unschedulable)}")
    info = _object(_object(node.get("status"), "status").get("nodeInfo"), "status.nodeInfo")
    version = info.get("kubeletVersion")
    if version is not None:
        version = _string(version, "status.nodeInfo.kubeletVersion")
        if _VERSION.fullmatch(version) is None:
            raise ApiShapeError(f"status.nodeInfo.kubeletVersion {excerpt(version)} is not a kubelet version")
    return NodeObject(
        name=name,
        taints=taints,
        labels=_labels(metadata.get("labels"), "metadata.labels"),
        kubelet_version=version or None,
        unschedulable=unschedulable,
    )


def _owner(value: Any, where: str) -> Owner:
    item = _object(value, where)
    kind = _string(item.get("kind"), f"{where}.kind")
    if _KIND.fullmatch(kind) is None:
        raise ApiShapeError(f"{where}.kind {excerpt(kind)} is not a Kubernetes kind")
    name = _string(item.get("name"), f"{where}.name")
    # A Node's and a workload controller's name is a DNS-1123 subdomain; a custom resource's may be any path segment.
    if kind in ("Node", "DaemonSet", "ReplicaSet", "StatefulSet", "Job", "ReplicationController"):
        _checked(k8s_subdomain, name, f"{where}.name")
    elif not name or "/" in name:
        raise ApiShapeError(f"{where}.name {excerpt(name)} is not a Kubernetes name")
    else:
        _checked(lambda text, what: printable(text, what, 253), name, f"{where}.name")
    controller = item.get("controller", False)
    if not isinstance(controller, bool):
        raise ApiShapeError(f"{where}.controller: expected a boolean, got {excerpt(controller)}")
    return Owner(kind=kind, name=name, controller=controller)


def _toleration(value: Any, where: str) -> Toleration:
    item = _object(value, where)
    key = _string(item.get("key"), f"{where}.key", optional=True)
    operator = _string(item.get("operator"), f"{where}.operator", optional=True) or "Equal"
    _checked(lambda text, what: one_of(text, OPERATORS, what), operator, f"{where}.operator")
    text = _string(item.get("value"), f"{where}.value", optional=True)
    effect = _string(item.get("effect"), f"{where}.effect", optional=True)
    if effect:
        _checked(lambda t, what: one_of(t, TAINT_EFFECTS, what), effect, f"{where}.effect")
    if key or text:
        try:
            parse_label(f"{key}={text}") if key else None
        except TaintError as error:
            raise ApiShapeError(f"{where}: {error}") from None
    return Toleration(key=key, operator=operator, value=text, effect=effect)


def _resources(containers: list[Any], where: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    requests: dict[str, Mapping[str, str]] = {}
    limits: dict[str, Mapping[str, str]] = {}
    for index, value in enumerate(containers):
        container = _object(value, f"{where}[{index}]")
        name = _checked(k8s_label, _string(container.get("name"), f"{where}[{index}].name"), f"{where}[{index}].name")
        resources = _object(container.get("resources"), f"{where}[{index}].resources")
        for field_name, into in (("requests", requests), ("limits", limits)):
            amounts: dict[str, str] = {}
            for resource, quantity in _object(resources.get(field_name), f"{where}[{index}].{field_name}").items():
                at = f"{where}[{index}].resources.{field_name}"
                if not isinstance(resource, str) or _RESOURCE.fullmatch(resource) is None:
                    raise ApiShapeError(f"{at}: {excerpt(resource)} is not a resource name")
                if not isinstance(quantity, str) or _QUANTITY.fullmatch(quantity) is None:
                    raise ApiShapeError(f"{at}.{resource}: {excerpt(quantity)} is not a quantity")
                amounts[resource] = quantity
            if amounts:
                into[name] = frozen_map(amounts)
    return frozen_map(requests), frozen_map(limits)


def parse_pod(document: Any) -> ApiPod:
    """One ``v1.Pod`` of a PodList -> ApiPod. Raises ApiShapeError."""
    pod = _object(document, "pod")
    metadata = _object(pod.get("metadata"), "metadata")
    uid = _checked(pod_uid, _string(metadata.get("uid"), "metadata.uid"), "metadata.uid")
    namespace = _checked(k8s_label, _string(metadata.get("namespace"), "metadata.namespace"), "metadata.namespace")
    name = _checked(k8s_subdomain, _string(metadata.get("name"), "metadata.name"), "metadata.name")
    owners = tuple(
        _owner(item, f"metadata.ownerReferences[{index}]")
        for index, item in enumerate(_list(metadata.get("ownerReferences"), "metadata.ownerReferences"))
    )
    spec = _object(pod.get("spec"), "spec")
    tolerations = tuple(
        _toleration(item, f"spec.tolerations[{index}]")
        for index, item in enumerate(_list(spec.get("tolerations"), "spec.tolerations"))
    )
    requests, limits = _resources(_list(spec.get("containers"), "spec.containers"), "spec.containers")
    status = _object(pod.get("status"), "status")
    phase = status.get("phase")
    if phase is not None:
        _checked(lambda text, what: one_of(text, PHASES, what), _string(phase, "status.phase"), "status.phase")
    return ApiPod(uid=uid, namespace=namespace, name=name, owners=owners,
                  tolerations=tolerations, requests=requests, limits=limits, phase=phase)  # fmt: skip


def parse_pod_list(document: Any) -> tuple[dict[str, ApiPod], list[str]]:
    """A ``v1.PodList`` -> (pods by UID, one line per pod left out because a field was not the API's)."""
    listing = _object(document, "PodList")
    if listing.get("kind") not in (None, "PodList"):
        raise ApiShapeError(f"kind: expected PodList, got {excerpt(listing.get('kind'))}")
    items = _list(listing.get("items"), "items")
    if len(items) > MAX_PODS:
        raise ApiShapeError(f"items: {len(items)} pods, more than the {MAX_PODS} a node can run")
    pods: dict[str, ApiPod] = {}
    problems: list[str] = []
    for index, item in enumerate(items):
        try:
            pod = parse_pod(item)
        except ApiShapeError as error:
            problems.append(f"items[{index}]: {error}")
            continue
        pods[pod.uid] = pod
    return pods, problems


def parse_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        raise ApiShapeError(f"{what}: not JSON ({excerpt(str(error), 80)})") from None


def cluster_view(node_document: Any, pods_document: Any) -> ClusterView:
    """The two answers -> ClusterView; ApiShapeError when the Node or the list itself is not the API's."""
    try:
        node = parse_node(node_document)
    except ApiShapeError as error:
        raise ApiShapeError(f"the Node: {error}") from None
    try:
        pods, problems = parse_pod_list(pods_document)
    except ApiShapeError as error:
        raise ApiShapeError(f"the pod list: {error}") from None
    return ClusterView(node=node, pods=frozen_map(pods), problems=tuple(problems[:8]))


# --------------------------------------------------------------------------------------------------- the source
NOT_GIVEN = (
    "the Kubernetes API is not configured for this reading (no --kubeconfig, no service account): the node's "
    "objects are not read"
)


def read(paths: Paths) -> ClusterView:
    """Without a session (a HostReader not given one: capture, bundles, tests) the API is not read."""
    raise SourceUnavailable(NOT_GIVEN)


class _SessionReader:
    """Reads what the session's last reading holds: the session (numawatch.kubeapi) talks to the API server on its
    own schedule, so an evaluation never waits on the network."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def read(self, paths: Paths) -> ClusterView:
        try:
            return self.session.current()
        except ApiShapeError as error:
            raise MalformedFile("the Kubernetes API's answer", str(error)) from None


def _reader(context: ReaderContext) -> _SessionReader | None:
    return _SessionReader(context.kubernetes_api) if context.kubernetes_api is not None else None


def node_document(node: NodeObject) -> dict[str, Any]:
    """A NodeObject as the API server returns a ``v1.Node`` (the fields numawatch reads): parse_node's inverse."""
    taints = [
        {"key": taint.key, **({"value": taint.value} if taint.value else {}), "effect": taint.effect}
        for taint in node.taints
    ]
    info = {"kubeletVersion": node.kubelet_version} if node.kubelet_version is not None else {}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": node.name, "labels": dict(node.labels)},
        "spec": {"taints": taints, **({"unschedulable": True} if node.unschedulable else {})},
        "status": {"nodeInfo": info},
    }


def pod_document(pod: ApiPod) -> dict[str, Any]:
    """An ApiPod as a ``v1.Pod`` of a PodList (the fields numawatch reads): parse_pod's inverse."""
    names = list(dict.fromkeys([*pod.requests, *pod.limits]))
    containers = [
        {"name": name, "resources": {
            **({"requests": dict(pod.requests[name])} if name in pod.requests else {}),
            **({"limits": dict(pod.limits[name])} if name in pod.limits else {}),
        }}
        for name in names
    ]  # fmt: skip
    status = {
        **({"phase": pod.phase} if pod.phase is not None else {}),
    }
    return {
        "metadata": {
            "uid": pod.uid, "namespace": pod.namespace, "name": pod.name,
            "ownerReferences": [{"kind": o.kind, "name": o.name, "controller": o.controller} for o in pod.owners],
        },
        "spec": {
            "containers": containers,
            "tolerations": [
                {key: value for key, value in
                 (("key", t.key), ("operator", t.operator), ("value", t.value), ("effect", t.effect)) if value}
                for t in pod.tolerations
            ],
        },
        "status": status,
    }  # fmt: skip


class Recording:
    """``numawatch capture`` keeps the API's answer (it is no file of the node): the Node and the pod list in the
    API's own shape, which ``check --from`` reads back through the same parsers as a live answer (a bundle is
    hostile too). A bundle captured without API access records why instead, and replays that reason."""

    VERSION = 1

    def dump(self, result: ClusterView) -> bytes:
        document = {
            "version": self.VERSION,
            "node": node_document(result.node),
            "pods": {"kind": "PodList", "apiVersion": "v1", "items": [pod_document(p) for p in result.pods.values()]},
            "problems": list(result.problems),
        }
        return json.dumps(document, sort_keys=True).encode()

    def load(self, data: bytes) -> ClusterView:
        where = "recorded kubernetes_api reading"
        try:
            document = parse_json(data, where)
            if not isinstance(document, dict) or document.get("version") != self.VERSION:
                raise ApiShapeError(f"expected a version {self.VERSION} recording")
            view = cluster_view(document.get("node"), document.get("pods"))
            problems = _list(document.get("problems"), "problems")
        except ApiShapeError as error:
            raise MalformedFile(where, str(error)) from None
        # The recorded problem lines are shown as they are only when they are short printable text.
        recorded = tuple(
            item if isinstance(item, str) and item.isprintable() and len(item) <= 300 else excerpt(item, 200)
            for item in problems[:8]
        )
        return ClusterView(node=view.node, pods=view.pods, problems=(recorded + view.problems)[:8])


SOURCE = SourceSpec(
    name="kubernetes_api",
    read=read,
    factory=_reader,
    recording=Recording(),
    description="this node's Node object (taints, labels, kubelet version) and the pods bound to it, from the "
    "Kubernetes API where numawatch has access (service account or --kubeconfig)",
)
