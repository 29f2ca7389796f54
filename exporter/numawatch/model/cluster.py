"""The node's own objects as the Kubernetes API server holds them (sources/kubernetes_api.py), and who numawatch is.

Read only where numawatch has API access (a service account or ``--kubeconfig``); every value was validated as the
API server itself validates it (names, label keys and values, taints) before it got here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numawatch.model import frozen_map
from numawatch.taints import Taint


@dataclass(frozen=True)
class Toleration:
    key: str  # empty with operator Exists: tolerates every taint
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # empty: every effect


@dataclass(frozen=True)
class Owner:
    """One of a pod's ``metadata.ownerReferences``."""

    kind: str  # "DaemonSet", "ReplicaSet", "StatefulSet", "Job", "Node" (a static pod's mirror), ...
    name: str
    controller: bool


@dataclass(frozen=True)
class ApiPod:
    """A pod bound to this node (``spec.nodeName``), with what numawatch judges of it."""

    uid: str
    namespace: str
    name: str
    owners: tuple[Owner, ...]
    tolerations: tuple[Toleration, ...]
    # container name -> resource name -> quantity as the API spells it, for requests and limits
    requests: Mapping[str, Mapping[str, str]] = field(default_factory=frozen_map)
    limits: Mapping[str, Mapping[str, str]] = field(default_factory=frozen_map)
    phase: str | None = None  # status.phase

    @property
    def controller_kind(self) -> str | None:
        """The kind of the owner that controls the pod (``controller: true``), None for a bare pod."""
        for owner in self.owners:
            if owner.controller:
                return owner.kind
        return None

    @property
    def node_agent(self) -> bool:
        """A pod that runs on every node by design: one a DaemonSet controls, or a static pod's mirror (owned by the
        Node; its manifest lies on the node itself)."""
        return self.controller_kind in ("DaemonSet", "Node")


@dataclass(frozen=True)
class NodeObject:
    """This node's Node object: what the scheduler sees of it."""

    name: str
    taints: tuple[Taint, ...]  # spec.taints
    labels: Mapping[str, str]  # metadata.labels
    kubelet_version: str | None  # status.nodeInfo.kubeletVersion, e.g. "v1.31.4+rke2r1"; None when absent
    unschedulable: bool = False


@dataclass(frozen=True)
class ClusterView:
    """What the API server says of this node and its pods at one reading."""

    node: NodeObject
    pods: Mapping[str, ApiPod]  # by UID
    # Pods of the list that were left out because a field was not what the API server returns (one line each).
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class OwnPod:
    """The pod numawatch itself runs in, where it can tell (sources/own_pod.py): never a foreign workload."""

    uid: str | None  # None: numawatch does not run in a pod here (or cannot tell)
    # how it was learnt: "cgroup" (its cgroup names the pod), "mountinfo" (the kubelet's /etc/hosts mount), "none"
    origin: str
