"""Knob 10: taints and labels keep everything that does not need a GPU off the GPU node.

"Un ClickHouse robando ancho de banda de memoria a un pod de vLLM cuidadosamente pinneado tira por tierra todo el
trabajo": exclusive CPUs do not share the memory channels, the last-level cache or the PCIe root, so a database on
the shared pool of an inference node slows the pinned pods anyway. Two checks:

- ``node_taint_missing``: the node lacks the intent's taint (``nvidia.com/gpu=present:NoSchedule``) or label. Judged
  from the Node object where the Kubernetes API is read (what the scheduler sees, kubeadm's API-set taints
  included); else from where a file declares them (RKE2 ``node-taint``/``node-label``, kubelet
  ``registerWithTaints``, ``--register-with-taints``, ``--node-labels``); taints that only the API holds are then
  not evaluated.
- ``node_workload_not_isolated``: a pod that holds no accelerator, in a namespace that is neither a system namespace
  nor one whose pods hold accelerators here, runs on the node, and is not a node agent: never numawatch's own pod
  (own_pod), nor a DaemonSet's or a static pod (the API's ownerReferences where it is read, else CRI-O's pod labels),
  nor, where neither says what owns it, a pod of a node-agent namespace (intent.NODE_AGENT_NAMESPACES and the
  intent's node.agentNamespaces).

A node without GPUs has nothing to keep others away from: both are not applicable there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

from numawatch.checks.check import Check, Finding, NotApplicable, NotEvaluated
from numawatch.checks.kubelet import RKE2_CONFIG, require
from numawatch.host import Host
from numawatch.inputs import GPUS, KUBELET_CONFIG, KUBELET_STATE, KUBERNETES_API, OWN_POD, POD_USAGES, WORKLOADS
from numawatch.intent import Intent
from numawatch.model.cluster import ClusterView, NodeObject
from numawatch.model.kubelet import KubeletConfig, KubeletState, NodeRegistration
from numawatch.model.workloads import Names, PodUsage
from numawatch.perpod import pod_judge, pod_values
from numawatch.workloads import Workload, workloads_by_pod

GiB = 1 << 30


def gpu_node(host: Host, intent: Intent) -> bool:
    """Whether this node has GPUs: on the PCI bus, or registered by a device plugin for a GPU resource."""
    inventory = host.gpus
    state: KubeletState | None = host.kubelet_state
    devices = state.devices if state is not None else None
    registered = devices is not None and any(
        ids for resource, ids in devices.registered.items() if intent.is_gpu_resource(resource)
    )
    if inventory is None and devices is None:
        raise NotEvaluated(
            f"whether the node has GPUs is unknown: needs the gpus_sysfs source ({host.down_reason('gpus_sysfs')}) "
            "or the device-plugin checkpoint"
        )
    return bool(inventory and inventory.gpus) or registered


# --------------------------------------------------------------------------------------------- taints and labels
def _where(config: KubeletConfig) -> tuple[str, str, str]:
    """(taint setting, label setting, file to edit) in the form this node's flavour uses."""
    if config.flavor == "rke2":
        return "node-taint", "node-label", RKE2_CONFIG
    kubelet_file = config.files[0] if config.files else "/var/lib/kubelet/config.yaml"
    return "registerWithTaints", "node-labels", kubelet_file


def check_node_taint_missing(host: Host, intent: Intent) -> Iterator[Finding]:
    cluster: ClusterView | None = host.kubernetes_api
    if cluster is not None:
        if not gpu_node(host, intent):
            raise NotApplicable("the node has no GPU: no taint is needed to keep other workloads off it")
        yield from _node_object_findings(cluster.node, intent)
        return
    config: KubeletConfig = require(host, "kubelet_config")
    if not gpu_node(host, intent):
        raise NotApplicable("the node has no GPU: no taint is needed to keep other workloads off it")
    registration: NodeRegistration = config.registration
    taint_setting, label_setting, file = _where(config)
    findings = []
    unknown = []
    if registration.taint_problems:
        unknown.append(registration.taint_problems[0])
    elif registration.taints is None:
        if intent.node.taints:
            unknown.append(
                "the node's taints are not declared in any file numawatch reads (no registerWithTaints or "
                "--register-with-taints: kubeadm sets them through the API, nodeRegistration.taints)"
            )
    else:
        for taint in intent.node.taints:
            if taint in registration.taints:
                continue
            same_key = [str(t) for t in registration.taints if t.key == taint.key]
            declared = ", ".join(str(t) for t in registration.taints) or "none"
            findings.append(
                NODE_TAINT_MISSING.finding(
                    intent,
                    {"setting": taint_setting, "expected": str(taint), "value": ",".join(same_key), "file": file},
                    f"the node does not register with the taint {taint} (declared: {declared}): pods that do not "
                    "need a GPU can be scheduled here and share memory bandwidth, cache and the shared CPU pool with "
                    "the pinned inference pods",
                    _taint_fix(config, str(taint), file),
                )
            )
    if registration.label_problems:
        unknown.append(registration.label_problems[0])
    elif registration.labels is None:
        if intent.node.labels:
            unknown.append("the node's labels are not declared in any file numawatch reads (no --node-labels)")
    else:
        for key, value in sorted(intent.node.labels.items()):
            if registration.labels.get(key) == value:
                continue
            found = registration.labels.get(key)
            findings.append(
                NODE_TAINT_MISSING.finding(
                    intent,
                    {
                        "setting": label_setting,
                        "expected": f"{key}={value}",
                        "value": f"{key}={found}" if found is not None else "",
                        "file": file,
                    },
                    f"the node does not register with the label {key}={value}"
                    + (f" (it says {key}={found})" if found is not None else "")
                    + ": the inference pods' node selectors or affinities cannot find it",
                    _label_fix(config, f"{key}={value}", file),
                )
            )
    if not findings and unknown:
        raise NotEvaluated(unknown[0])
    yield from findings


def _node_object_findings(node: NodeObject, intent: Intent) -> Iterator[Finding]:
    """The intent's taints and labels against the Node object's ``spec.taints`` and ``metadata.labels``."""
    where = f"Node {node.name}"
    declared = ", ".join(str(t) for t in node.taints) or "none"
    for taint in intent.node.taints:
        if taint in node.taints:
            continue
        same_key = [str(t) for t in node.taints if t.key == taint.key]
        yield NODE_TAINT_MISSING.finding(
            intent,
            {"setting": "spec.taints", "expected": str(taint), "value": ",".join(same_key), "file": where},
            f"the Node object {node.name} does not carry the taint {taint} (its taints: {declared}): pods that do not "
            "need a GPU can be scheduled here and share memory bandwidth, cache and the shared CPU pool with the "
            "pinned inference pods",
            f"kubectl taint node {node.name} {taint}, and declare it where the node registers (kubeadm's "
            "nodeRegistration.taints, registerWithTaints, RKE2's node-taint) so that a re-registered node keeps it; "
            "give the GPU pods a matching toleration",
        )
    for key, value in sorted(intent.node.labels.items()):
        found = node.labels.get(key)
        if found == value:
            continue
        yield NODE_TAINT_MISSING.finding(
            intent,
            {
                "setting": "metadata.labels",
                "expected": f"{key}={value}",
                "value": f"{key}={found}" if found is not None else "",
                "file": where,
            },
            f"the Node object {node.name} does not carry the label {key}={value}"
            + (f" (it says {key}={found})" if found is not None else "")
            + ": the inference pods' node selectors or affinities cannot find it",
            f"kubectl label node {node.name} {key}={value} --overwrite, and add --node-labels={key}={value} to the "
            "kubelet's flags (RKE2: node-label) so that a re-registered node keeps it",
        )


def _taint_fix(config: KubeletConfig, taint: str, file: str) -> str:
    if config.flavor == "rke2":
        return (
            f'add "{taint}" to node-taint in {file}; RKE2 applies it only when the node registers, so also '
            f"kubectl taint node <node> {taint} (and give the GPU pods a matching toleration)"
        )
    return (
        f"kubectl taint node <node> {taint}, and declare it for re-registration in registerWithTaints of {file} "
        "(or kubeadm's nodeRegistration.taints); give the GPU pods a matching toleration"
    )


def _label_fix(config: KubeletConfig, label: str, file: str) -> str:
    if config.flavor == "rke2":
        return f'add "{label}" to node-label in {file} and kubectl label node <node> {label}'
    return f"kubectl label node <node> {label}, and add --node-labels={label} to the kubelet's flags"


# --------------------------------------------------------------------------------------------- foreign pods
def _holds_gpu(pod: tuple[Workload, ...]) -> bool:
    return any(workload.gpus for workload in pod)


@dataclass(frozen=True)
class Neighbours:
    """What every pod's verdict reads besides its own workloads and witnesses (``foreign_pods``' context)."""

    allowed: frozenset[str]  # the namespaces whose pods may run here: the intent's and those of the GPU pods
    own_uid: str | None  # numawatch's own pod's
    usage_down: str | None  # why no pod's usage is known (the pod_usage source's down reason); None when it is up


def neighbours(host: Host, intent: Intent) -> Neighbours:
    pods = workloads_by_pod(host, intent)
    gpu_namespaces = {w.namespace for pod in pods if _holds_gpu(pod) for w in pod if w.namespace}
    own = host.own_pod
    usage_down = host.down_reason("pod_usage") if host.pod_usage is None else None
    return Neighbours(
        frozenset(intent.node.allowed_namespaces | gpu_namespaces), own.uid if own is not None else None, usage_down
    )


@dataclass(frozen=True)
class Witnesses:
    """Where each pod's own witnesses are looked up (``witnesses_of``): its usage, the API's and CRI-O's word."""

    usage: Mapping[str, PodUsage]
    problems: Mapping[str, str]  # pod UID -> a malformed usage file, named
    cluster: ClusterView | None
    names: Names | None


def witnesses(host: Host, intent: Intent) -> Witnesses:
    usage = host.pod_usage
    return Witnesses(
        usage.pods if usage is not None else {},
        usage.problems if usage is not None else {},
        host.kubernetes_api,
        host.names,
    )


class PodWitnesses(NamedTuple):
    """What one pod's verdict reads besides its join: its usage reading and the malformed file that hid the rest, what
    controls it as the API says (its controller's kind, whether it is a node agent) and whether CRI-O's pod labels
    call it a DaemonSet's."""

    used: PodUsage | None
    problem: str | None
    api: tuple[str | None, bool] | None  # None: the API does not list the pod, or is not read
    daemonset: bool | None


def witnesses_of(witnesses: Witnesses, pod: tuple[Workload, ...]) -> PodWitnesses:
    uid = pod[0].pod_uid
    used = witnesses.usage.get(uid)
    api_pod = witnesses.cluster.pods.get(uid) if witnesses.cluster is not None else None
    identity = witnesses.names.pods.get(uid) if witnesses.names is not None else None
    return PodWitnesses(
        used,
        witnesses.problems.get(used.uid) if used is not None else None,
        (api_pod.controller_kind, api_pod.node_agent) if api_pod is not None else None,
        identity.daemonset if identity is not None else None,
    )


def _node_agent(uid: str, namespace: str, own_uid: str | None, pod: PodWitnesses, intent: Intent) -> tuple[bool, str]:
    """(whether the pod is a node agent, what says who owns it), judged by the most direct witness that answers:
    numawatch's own pod; the API's ownerReferences; CRI-O's pod labels; the node-agent namespaces."""
    if own_uid is not None and uid == own_uid:
        return True, "numawatch's own pod"
    if pod.api is not None:
        kind, agent = pod.api
        return agent, (f"a {kind}'s pod, says the API" if kind else "a bare pod, says the API")
    if pod.daemonset is not None:
        return pod.daemonset, (
            "a DaemonSet's pod, says CRI-O" if pod.daemonset else "no DaemonSet's pod, say CRI-O's pod labels"
        )
    if intent.node.is_agent_namespace(namespace):
        return True, "a node-agent namespace's pod"
    return False, "what owns it is unknown"


def check_node_workload_not_isolated(host: Host, intent: Intent) -> Iterator[Finding]:
    require(host, "cgroups")
    state: KubeletState = require(host, "kubelet_state")
    if state.devices is None:
        raise NotEvaluated("the kubelet has no readable device-plugin checkpoint, so who holds accelerators is unknown")
    if not gpu_node(host, intent):
        raise NotApplicable("the node has no GPU: every workload may run here")
    findings = list(chain.from_iterable(pod_values(host, intent, FOREIGN_PODS)))
    if not findings:
        pods = [pod for pod in workloads_by_pod(host, intent) if pod]
        unnamed = [pod[0].pod_uid for pod in pods if pod[0].namespace is None and not _holds_gpu(pod)]
        if unnamed:
            raise NotEvaluated(
                f"the namespaces of {len(unnamed)} pod(s) are unknown (the names source: {host.down_reason('names')})"
                if host.names is None
                else f"the namespaces of {len(unnamed)} pod(s) are unknown, e.g. pod UID {unnamed[0]}"
            )
    yield from findings


def foreign_pods(
    neighbours: Neighbours, intent: Intent, pod: tuple[Workload, ...], witnessed: PodWitnesses
) -> tuple[Finding, ...]:
    """The finding of one pod that holds no GPU, runs outside the namespaces allowed here, and is no node agent."""
    first = pod[0]
    if _holds_gpu(pod) or first.namespace is None or first.namespace in neighbours.allowed:
        return ()
    agent, owner = _node_agent(first.pod_uid, first.namespace, neighbours.own_uid, witnessed, intent)
    if agent:
        return ()
    return (
        NODE_WORKLOAD_NOT_ISOLATED.finding(
            intent,
            {**first.pod_labels, "value": first.qos},
            f"pod {first.pod_display} ({first.qos.capitalize()}) holds no GPU and its namespace is neither a "
            f"system namespace nor one whose pods hold GPUs on this node, and it is no node agent ({owner}); "
            + _use(witnessed, neighbours.usage_down)
            + ", taking memory bandwidth, cache and shared-pool CPU time from the pinned inference pods",
            "keep it off the GPU node: taint the node (nvidia.com/gpu=present:NoSchedule) and remove the pod's "
            "toleration, or give it a nodeSelector/affinity for the nodes it belongs on; if it must run here, "
            "list its namespace in the intent's node.systemNamespaces",
        ),
    )


def _use(pod: PodWitnesses, usage_down: str | None) -> str:
    used = pod.used
    if used is None:
        why = usage_down if usage_down is not None else "its pod cgroup was not read"
        return f"its CPU and memory use are unknown ({why})"
    parts = []
    if used.cpu_cores is not None:
        parts.append(f"it uses {used.cpu_cores:.2f} CPUs")
    elif used.cpu_seconds is not None:
        parts.append(f"it has used {used.cpu_seconds:.0f} CPU-seconds since it started")
    if used.memory_bytes is not None:
        parts.append(f"{used.memory_bytes / GiB:.2f} GiB of memory")
    if pod.problem is not None:
        parts.append(f"the rest is unknown ({pod.problem})")
    return " and ".join(parts) if parts else "its CPU and memory use are unknown"


NODE_TAINT_MISSING = Check(
    id="node_taint_missing",
    severity="warning",
    summary="A GPU node lacks the intended taint or label (its Node object, else RKE2 node-taint/node-label, "
    "registerWithTaints).",
    remediation="declare the taint (nvidia.com/gpu=present:NoSchedule) and label where the node registers them",
    run=check_node_taint_missing,
    inputs=(KUBELET_CONFIG, KUBELET_STATE, GPUS, KUBERNETES_API),
    knob="10",
)
NODE_WORKLOAD_NOT_ISOLATED = Check(
    id="node_workload_not_isolated",
    severity="warning",
    summary="A pod holding no accelerator, no node agent, outside the system namespaces and the GPU pods' ones, runs "
    "on a GPU node.",
    remediation="keep the pod off the GPU node (taint and tolerations, node selectors), or list its namespace",
    run=check_node_workload_not_isolated,
    inputs=(WORKLOADS, KUBERNETES_API, OWN_POD, POD_USAGES),
    knob="10",
)

CHECKS: tuple[Check, ...] = (NODE_TAINT_MISSING, NODE_WORKLOAD_NOT_ISOLATED)

# Per pod: its workloads, the namespaces allowed here, who numawatch is, why usage is unknown (numawatch.perpod), and
# the pod's own usage reading and what says who owns it.
FOREIGN_PODS = pod_judge(
    f"findings.{NODE_WORKLOAD_NOT_ISOLATED.id}",
    context=neighbours,
    judge=foreign_pods,
    pod_inputs=witnesses,
    pod_input=witnesses_of,
    reads_numa_bytes=False,
)
