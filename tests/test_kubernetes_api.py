"""The Kubernetes API source, through the real client (kubernetes_asyncio) and a kubeconfig, against a stand-in API
server over HTTPS (tests/kube_apiserver.py): the node's own objects, node agents, node_taint_missing from the Node.

Fakes only for what cannot run here: the API server. Every answer is shaped as the API server's (v1.Node, v1.PodList,
v1.Status)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fakehost.pods import ContainerSpec, add_pod
from fakehost.reference import NODE_EXPORTER, ONLINE, TRTLLM, VLLM, reference_node
from kube_apiserver import TOKEN, ApiServer, node_object, pod_object, wait_for
from numawatch.checks import all_checks, evaluate
from numawatch.checks.node_isolation import NODE_TAINT_MISSING, NODE_WORKLOAD_NOT_ISOLATED
from numawatch.host import HostReader
from numawatch.intent import REFERENCE, IntentError
from numawatch.intentfile import parse_intent
from numawatch.kubeapi import KubernetesApi, access_from
from numawatch.model.workloads import QOS_BURSTABLE
from numawatch.sources.kubernetes_api import ApiShapeError, parse_node, parse_pod, parse_pod_list
from numawatch.taints import Taint

ROOT = Path(__file__).resolve().parents[1]
NODE = "gpu-node-1"
GIB = 1 << 30
AGENT_UID = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
OWN_UID = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
DB_UID = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"


def reference_pods() -> list[dict]:
    """The reference node's pods as the API lists them: the inference StatefulSets and the node-exporter DaemonSet."""
    return [
        pod_object(VLLM.uid, VLLM.namespace, VLLM.name, owner=("StatefulSet", "vllm-llama"), qos_class="Guaranteed",
                   resources={"requests": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"},
                              "limits": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}},
                   tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        pod_object(TRTLLM.uid, TRTLLM.namespace, TRTLLM.name, owner=("StatefulSet", "trtllm-mistral"),
                   qos_class="Guaranteed"),
        pod_object(NODE_EXPORTER.uid, NODE_EXPORTER.namespace, NODE_EXPORTER.name,
                   owner=("DaemonSet", "node-exporter"), tolerations=[{"operator": "Exists"}]),
        pod_object("00000000-1111-4222-8333-444444444444", "analytics", "elsewhere-0", node_name="cpu-node-7"),
    ]  # fmt: skip


@pytest.fixture
def api(tmp_path):
    with ApiServer(tmp_path, node_object(NODE), reference_pods()) as server:
        yield server


def session(server: ApiServer | None, *, timeout: float = 5.0, kubeconfig: Path | None = None) -> KubernetesApi:
    """The session ``check --kubeconfig`` makes, after its one reading."""
    if server is None and kubeconfig is None:
        access, reason = access_from(None, None, {})
    else:
        access, reason = access_from(str(kubeconfig or server.kubeconfig()), NODE, {}, timeout=timeout)  # type: ignore[union-attr]
    made = KubernetesApi(access, reason)
    made.read_once()
    return made


def read(node, api_session: KubernetesApi | None = None):
    return HostReader(node.paths, kubernetes_api=api_session).read()


def add_foreign(node, uid: str, namespace: str, name: str, **kwargs):
    shared = ONLINE - frozenset().union(*node.exclusive.values())
    return add_pod(node.host, uid=uid, qos=QOS_BURSTABLE, namespace=namespace, name=name,
                   containers=[ContainerSpec("main", cpus=shared, mems={0, 1}, numa_bytes={0: GIB, 1: GIB})],
                   **kwargs)  # fmt: skip


def foreign(host, intent=REFERENCE):
    evaluation = evaluate(host, intent, [NODE_WORKLOAD_NOT_ISOLATED])
    return {finding.labels["pod"]: finding for finding in evaluation.findings}


# --------------------------------------------------------------------------------------------------- the client
def test_the_client_reads_the_node_and_its_pods_through_a_kubeconfig(api):
    reading = session(api)

    view = reading.current()
    assert view.node.name == NODE
    assert view.node.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert view.node.labels["fibercli.local/numa-pinned"] == "true"
    assert view.node.kubelet_version == "v1.31.4+rke2r1"  # for the checkpoint verdicts by kubelet version
    assert set(view.pods) == {VLLM.uid, TRTLLM.uid, NODE_EXPORTER.uid}  # the server's field selector, not ours
    vllm = view.pods[VLLM.uid]
    assert (vllm.namespace, vllm.name, vllm.controller_kind) == ("inference", "vllm-llama-0", "StatefulSet")
    assert vllm.requests["app"]["nvidia.com/gpu"] == "2" and vllm.limits["app"]["memory"] == "16Gi"
    assert vllm.tolerations[0].key == "nvidia.com/gpu" and vllm.tolerations[0].operator == "Exists"
    assert view.pods[NODE_EXPORTER.uid].node_agent and not vllm.node_agent
    assert view.problems == ()
    assert api.requests == [
        f"GET /api/v1/nodes/{NODE}",
        f"GET /api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}&resourceVersion=0",
    ]


def test_each_reading_asks_again_and_an_unchanged_answer_keeps_the_generation(api, fake_host):
    node = reference_node(fake_host)
    reading = session(api)
    reader = HostReader(node.paths, kubernetes_api=reading)
    first = reader.read()
    reading.read_once()
    second = reader.read()
    assert second.generation("kubernetes_api") == first.generation("kubernetes_api")
    api.pods.append(pod_object(DB_UID, "analytics", "clickhouse-0", node_name=NODE, owner=("StatefulSet", "ch")))
    reading.read_once()
    third = reader.read()
    assert third.generation("kubernetes_api") != first.generation("kubernetes_api")
    assert DB_UID in third.kubernetes_api.pods


async def test_serve_keeps_the_reading_current_on_its_event_loop(api):
    access, _ = access_from(str(api.kubeconfig()), NODE, {}, timeout=5.0, interval=0.05)
    reading = KubernetesApi(access)
    contexts = reading.cleanup_ctx()
    await contexts.__anext__()
    try:
        await asyncio.to_thread(wait_for, lambda: reading.readings >= 1)
        assert DB_UID not in reading.current().pods
        api.pods.append(pod_object(DB_UID, "analytics", "clickhouse-0", node_name=NODE))
        await asyncio.to_thread(wait_for, lambda: DB_UID in reading.current().pods)
        api.status = (403, "Forbidden", "pods is forbidden")
        await asyncio.to_thread(wait_for, lambda: reading._view is None)
        with pytest.raises(Exception, match="HTTP 403"):
            reading.current()
    finally:
        with pytest.raises(StopAsyncIteration):
            await contexts.__anext__()
    assert reading._client is None  # closed with serve


# --------------------------------------------------------------------------------------------------- no access
def test_without_a_kubeconfig_or_a_service_account_the_api_is_not_configured(tmp_path):
    access, reason = access_from(None, None, {})
    assert access is None and "not configured" in reason and "KUBERNETES_SERVICE_HOST" in reason
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.43.0.1", "KUBERNETES_SERVICE_PORT": "443", "NODE_NAME": NODE}
    access, reason = access_from(None, None, in_pod, token_file=str(tmp_path / "absent"))
    assert access is None and "no service account token" in reason
    (tmp_path / "token").write_text(TOKEN)
    access, reason = access_from(None, None, in_pod, token_file=str(tmp_path / "token"))
    assert access is not None and access.node_name == NODE and access.kubeconfig is None and reason == ""
    access, reason = access_from(str(tmp_path / "kubeconfig"), None, {})
    assert access is None and "no node name" in reason and "NODE_NAME" in reason
    access, reason = access_from(str(tmp_path / "kubeconfig"), "Not_A_Node", {})
    assert access is None and "node name" in reason


def test_without_api_access_everything_else_is_as_before(fake_host):
    node = reference_node(fake_host)
    add_foreign(node, DB_UID, "analytics", "clickhouse-0")
    before = evaluate(read(node), REFERENCE)
    after_host = read(node, session(None))

    after = evaluate(after_host, REFERENCE)
    assert not after_host.statuses["kubernetes_api"].up
    assert "not configured" in after_host.statuses["kubernetes_api"].reason
    assert after.findings == before.findings and after.not_evaluated == before.not_evaluated
    assert "clickhouse-0" in foreign(after_host)
    up = {name for name, status in after_host.statuses.items() if status.up}
    assert up == {name for name, status in read(node).statuses.items() if status.up}


@pytest.mark.parametrize(
    ("trouble", "reason"),
    [
        ("forbidden", 'HTTP 403 forbidden (RBAC: see deploy/README.md): nodes "gpu-node-1" is forbidden'),
        ("token", "HTTP 401 unauthorized"),
        ("slow", "no answer within 0.3 s"),
        ("down", "ClientConnectorError"),
        ("other-node", "HTTP 404 not found"),
    ],
)
def test_an_api_that_refuses_is_slow_or_down_is_the_sources_reason_and_nothing_else_changes(
    api, fake_host, trouble, reason
):
    node = reference_node(fake_host)
    add_foreign(node, DB_UID, "analytics", "clickhouse-0")
    kubeconfig = api.kubeconfig()
    if trouble == "forbidden":
        api.status = (403, "Forbidden", f'nodes "{NODE}" is forbidden: User "system:serviceaccount:numawatch:'
                                        'numawatch" cannot get resource "nodes" in API group "" at the cluster scope')
    elif trouble == "token":
        kubeconfig = api.kubeconfig("stale", token="expired")
    elif trouble == "slow":
        api.delay = 1.0
    elif trouble == "down":
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            free = closed.getsockname()[1]
        kubeconfig = api.kubeconfig("down", port=free)
    else:
        api.node = node_object("gpu-node-2")

    host = read(node, session(api, timeout=0.3, kubeconfig=kubeconfig))

    status = host.statuses["kubernetes_api"]
    assert not status.up and reason in status.reason and "\n" not in status.reason
    assert evaluate(host, REFERENCE).findings == evaluate(read(node), REFERENCE).findings
    assert {n for n, s in host.statuses.items() if s.up} == {n for n, s in read(node).statuses.items() if s.up}


# --------------------------------------------------------------------------------------------------- parsers
def test_odd_but_valid_objects_parse():
    bare = node_object(taints=(), kubelet_version="v1.32.0-alpha.1")
    del bare["metadata"]["labels"]
    del bare["status"]["nodeInfo"]["kubeletVersion"]
    node = parse_node(bare)
    assert (node.taints, dict(node.labels), node.kubelet_version) == ((), {}, None)
    assert parse_node(node_object(kubelet_version="v1.30.2-eks-1552ad0")).kubelet_version == "v1.30.2-eks-1552ad0"
    pending = pod_object(DB_UID, "analytics", "clickhouse-0", owner=None)
    del pending["status"]["qosClass"]
    pending["spec"]["tolerations"] = [{"operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoExecute"}]
    pod = parse_pod(pending)
    assert (pod.owners, pod.controller_kind, pod.node_agent) == ((), None, False)
    assert pod.tolerations[1].operator == "Equal"  # the API's default
    static = parse_pod(pod_object(DB_UID, "kube-system", "kube-proxy-gpu-node-1", owner=("Node", NODE)))
    assert static.node_agent  # a static pod's mirror


@pytest.mark.parametrize(
    ("where", "value", "what"),
    [
        (("metadata", "name"), "Gpu_Node", "metadata.name"),
        (("spec", "taints"), [{"key": "nvidia.com/gpu", "effect": "NoSchedul"}], "spec.taints[0]"),
        (("spec", "taints"), {"key": "x"}, "spec.taints: expected a list"),
        (("metadata", "labels"), {"a": 1}, "metadata.labels"),
        (("metadata", "labels"), {"bad key": "v"}, "metadata.labels"),
        (("status", "nodeInfo", "kubeletVersion"), "v1.31\n$(reboot)", "kubeletVersion"),
        (("kind",), "Pod", "kind: expected Node"),
    ],
)
def test_a_node_object_that_is_not_the_apis_is_refused_naming_the_field(where, value, what):
    document = node_object()
    target = document
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(ApiShapeError, match=None) as raised:
        parse_node(document)
    assert what in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("mutate", "what"),
    [
        (lambda pod: pod["metadata"].update(namespace="Kube_System"), "metadata.namespace"),
        (lambda pod: pod["metadata"].update(uid="not-a-uid"), "metadata.uid"),
        (lambda pod: pod["metadata"]["ownerReferences"][0].update(kind="Daemon Set"), "ownerReferences[0].kind"),
        (lambda pod: pod["metadata"]["ownerReferences"][0].update(controller="yes"), "controller"),
        (lambda pod: pod["spec"]["tolerations"][0].update(operator="In"), "tolerations[0].operator"),
        (lambda pod: pod["spec"]["containers"][0]["resources"].update(requests={"cpu": "lots"}), "quantity"),
    ],
)
def test_a_pod_that_is_not_the_apis_is_left_out_and_named(mutate, what):
    good = pod_object(VLLM.uid, "inference", "vllm-llama-0")
    bad = pod_object(DB_UID, "analytics", "clickhouse-0")
    mutate(bad)
    pods, problems = parse_pod_list({"kind": "PodList", "items": [good, bad]})
    assert set(pods) == {VLLM.uid}
    [problem] = problems
    assert problem.startswith("items[1]: ") and what in problem


def test_an_answer_that_is_not_the_apis_makes_the_source_down_naming_the_field(api, fake_host):
    api.node = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE}, "spec": {"taints": "all of them"}}
    host = read(reference_node(fake_host), session(api))
    status = host.statuses["kubernetes_api"]
    assert not status.up
    assert "not what the API returns: the Node: spec.taints: expected a list" in status.reason
    assert parse_pod_list({"kind": "PodList", "items": None}) == ({}, [])
    with pytest.raises(ApiShapeError, match="kind: expected PodList"):
        parse_pod_list({"kind": "NodeList", "items": []})


# --------------------------------------------------------------------------------------------------- node agents
def test_numawatch_never_reports_its_own_pod_known_by_its_cgroup(fake_host):
    node = reference_node(fake_host)
    own = add_foreign(node, OWN_UID, "observability-tools", "numawatch-7k2xq")
    assert "numawatch-7k2xq" in foreign(read(node))
    fake_host.write("proc/self/cgroup", f"0::/{own.containers[0].cgroup_path}\n")

    host = read(node)

    assert host.own_pod.uid == OWN_UID and host.own_pod.origin == "cgroup"
    assert foreign(host) == {}


def test_numawatch_knows_its_pod_by_the_kubelets_etc_hosts_mount_in_a_private_cgroup_namespace(fake_host):
    node = reference_node(fake_host)
    add_foreign(node, OWN_UID, "observability-tools", "numawatch-7k2xq")
    fake_host.write("proc/self/cgroup", "0::/\n")
    fake_host.write("proc/self/mountinfo", (
        "1391 1302 0:412 / / ro,relatime master:417 - overlay overlay rw,lowerdir=/var/lib/x\n"
        f"1402 1391 259:2 /var/lib/kubelet/pods/{OWN_UID}/etc-hosts /etc/hosts rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
        f"1403 1391 259:2 /var/lib/kubelet/pods/{OWN_UID}/containers/numawatch/3c1f /dev/termination-log rw - "
        "ext4 /dev/nvme0n1p2 rw\n"
    ))  # fmt: skip

    host = read(node)

    assert (host.own_pod.uid, host.own_pod.origin) == (OWN_UID, "mountinfo")
    assert foreign(host) == {}


def test_outside_a_pod_numawatch_is_nobody_and_a_malformed_cgroup_file_is_named(fake_host):
    node = reference_node(fake_host)
    fake_host.write("proc/self/cgroup", "0::/user.slice/user-0.slice/session-3.scope\n")
    assert read(node).own_pod.uid is None
    fake_host.write("proc/self/cgroup", "garbage\n")
    status = read(node).statuses["own_pod"]
    assert not status.up and "proc/self/cgroup" in status.reason


def test_a_daemonsets_pod_is_not_foreign_where_the_api_says_so(api, fake_host):
    node = reference_node(fake_host)
    add_foreign(node, AGENT_UID, "acme-agents", "log-shipper-q8w4z")
    assert "log-shipper-q8w4z" in foreign(read(node))  # unknown owner, a namespace on no list
    api.pods.append(pod_object(AGENT_UID, "acme-agents", "log-shipper-q8w4z", owner=("DaemonSet", "log-shipper")))

    assert foreign(read(node, session(api))) == {}


def test_a_real_foreign_pod_still_fires_with_the_api_even_in_a_node_agent_namespace(api, fake_host):
    node = reference_node(fake_host)
    add_foreign(node, DB_UID, "analytics", "clickhouse-0")
    add_foreign(node, AGENT_UID, "monitoring", "prometheus-k8s-0")
    assert set(foreign(read(node))) == {"clickhouse-0"}  # without the API, monitoring is taken for node agents
    api.pods += [pod_object(DB_UID, "analytics", "clickhouse-0", owner=("StatefulSet", "clickhouse")),
                 pod_object(AGENT_UID, "monitoring", "prometheus-k8s-0", owner=("StatefulSet", "prometheus-k8s"))]

    found = foreign(read(node, session(api)))

    assert set(found) == {"clickhouse-0", "prometheus-k8s-0"}
    assert "a StatefulSet's pod, says the API" in found["clickhouse-0"].message
    assert dict(found["clickhouse-0"].labels) == {"namespace": "analytics", "pod": "clickhouse-0", "pod_uid": DB_UID,
                                                  "value": "burstable"}  # fmt: skip


def test_a_pod_the_api_does_not_list_yet_is_judged_by_the_runtime_and_the_namespaces(api, fake_host):
    node = reference_node(fake_host)
    add_foreign(node, AGENT_UID, "cattle-system", "cattle-node-agent-x2x9d")
    add_foreign(node, DB_UID, "analytics", "clickhouse-0")
    assert set(foreign(read(node, session(api)))) == {"clickhouse-0"}


@pytest.mark.parametrize(
    ("labels", "namespace", "reported"),
    [
        ({"controller-revision-hash": "6c9b8f7d5c", "pod-template-generation": "3"}, "acme-agents", False),
        ({"app": "prometheus", "statefulset.kubernetes.io/pod-name": "prometheus-0",
          "controller-revision-hash": "prometheus-7d"}, "monitoring", True),
    ],
)  # fmt: skip
def test_on_cri_o_the_sandboxs_pod_labels_say_whether_a_daemonset_made_the_pod(fake_host, labels, namespace, reported):
    node = reference_node(fake_host, runtime="crio")
    add_foreign(node, AGENT_UID, namespace, "agent-0", runtime="crio", pod_labels=labels)

    host = read(node)

    assert host.names.pods[AGENT_UID].daemonset is (not reported)
    found = foreign(host)
    assert ("agent-0" in found) is reported
    if reported:
        assert "no DaemonSet's pod, say CRI-O's pod labels" in found["agent-0"].message


@pytest.mark.parametrize(
    "namespace",
    ["monitoring", "kube-prometheus-stack", "cattle-monitoring-system", "cattle-fleet-system", "calico-system",
     "tigera-operator", "kube-flannel", "cilium", "longhorn-system", "nvidia-network-operator", "network-operator",
     "openshift-dns"],
)  # fmt: skip
def test_where_nothing_says_who_owns_a_pod_the_node_agent_namespaces_are_its_agents(fake_host, namespace):
    node = reference_node(fake_host)
    add_foreign(node, AGENT_UID, namespace, "agent-x7k2p")
    assert foreign(read(node)) == {}


def test_the_intent_adds_node_agent_namespaces_and_patterns(fake_host):
    node = reference_node(fake_host)
    add_foreign(node, AGENT_UID, "acme-agents", "log-shipper-q8w4z")
    host = read(node)
    assert "log-shipper-q8w4z" in foreign(host)
    assert foreign(host, parse_intent("node: {agentNamespaces: [acme-agents]}")) == {}
    assert foreign(host, parse_intent("node: {agentNamespaces: ['acme-*']}")) == {}
    assert "log-shipper-q8w4z" in foreign(host, parse_intent("node: {agentNamespaces: ['acmex-*']}"))


@pytest.mark.parametrize("value", ["[Acme]", "['a*b']", "['*']", "acme", "[7]", "['-acme*']"])
def test_an_agent_namespace_kubernetes_could_not_name_is_refused(value):
    with pytest.raises(IntentError, match=r"node\.agentNamespaces"):
        parse_intent(f"node: {{agentNamespaces: {value}}}")


# --------------------------------------------------------------------------------------------------- taints
def kubeadm_node(fake_host):
    """A kubeadm node whose taints live only on the Node object (nodeRegistration.taints): no file declares them."""
    node = reference_node(fake_host, flavor="kubeadm")
    node.write_kubelet_config(node_taints=None, node_labels=None)
    return node


def test_node_taint_missing_is_evaluated_from_the_node_object_clean(api, fake_host):
    node = kubeadm_node(fake_host)
    assert evaluate(read(node), REFERENCE, [NODE_TAINT_MISSING]).not_evaluated  # without the API, as before

    evaluation = evaluate(read(node, session(api)), REFERENCE, [NODE_TAINT_MISSING])

    assert (evaluation.findings, evaluation.not_evaluated, evaluation.not_applicable) == ((), (), ())


def test_node_taint_missing_fires_from_the_node_object(api, fake_host):
    node = kubeadm_node(fake_host)
    api.node = node_object(NODE, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "PreferNoSchedule"}],
                           labels={"fibercli.local/numa-pinned": "false"})  # fmt: skip

    findings = evaluate(read(node, session(api)), REFERENCE, [NODE_TAINT_MISSING]).findings

    label, taint = sorted(findings, key=lambda f: f.labels["setting"])
    assert dict(taint.labels) == {"setting": "spec.taints", "expected": "nvidia.com/gpu=present:NoSchedule",
                                  "value": "nvidia.com/gpu=present:PreferNoSchedule", "file": f"Node {NODE}"}
    assert f"kubectl taint node {NODE} nvidia.com/gpu=present:NoSchedule" in taint.remediation
    assert dict(label.labels) == {"setting": "metadata.labels", "expected": "fibercli.local/numa-pinned=true",
                                  "value": "fibercli.local/numa-pinned=false", "file": f"Node {NODE}"}


# --------------------------------------------------------------------------------------------------- the CLI
def numawatch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_") and k != "NODE_NAME"}
    environment["PYTHONPATH"] = str(ROOT / "exporter")
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "numawatch", *args], capture_output=True, text=True, timeout=120,
                          env=environment, cwd="/")  # fmt: skip


def test_check_reads_the_api_once_with_a_kubeconfig_and_the_node_name_from_node_name(api, fake_host):
    node = kubeadm_node(fake_host)
    add_foreign(node, AGENT_UID, "acme-agents", "log-shipper-q8w4z")
    api.pods.append(pod_object(AGENT_UID, "acme-agents", "log-shipper-q8w4z", owner=("DaemonSet", "log-shipper")))
    common = ("--host-root", str(fake_host.root), "--no-nvml", "--no-self-pin", "check", "--format", "json",
              "--window", "0")  # fmt: skip

    without = json.loads(numawatch(*common).stdout)
    result = numawatch(*common, "--kubeconfig", str(api.kubeconfig()), env={"NODE_NAME": NODE})

    document = json.loads(result.stdout)
    sources = {source["name"]: source for source in document["sources"]}
    assert sources["kubernetes_api"]["up"], sources["kubernetes_api"]
    assert "not configured" in {s["name"]: s for s in without["sources"]}["kubernetes_api"]["reason"]
    checks_without = {f["check"] for f in without["findings"]}
    assert "node_workload_not_isolated" in checks_without
    assert {f["check"] for f in document["findings"]} == checks_without - {"node_workload_not_isolated"}
    assert len(api.requests) == 2
    assert "node_taint_missing" not in {item["check"] for item in document.get("not_evaluated", [])}


def test_serve_reads_the_api_on_its_event_loop_and_reports_the_source(api, fake_host):
    import urllib.request

    from serving import numawatch_serve

    reference_node(fake_host)

    def source_up() -> str | None:
        with urllib.request.urlopen(f"{url}metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith('numawatch_source_up{source="kubernetes_api"}'):
                    return str(int(float(line.rsplit(" ", 1)[1])))
        return None

    with numawatch_serve(fake_host.root, "--no-nvml", "--no-self-pin", "--kubeconfig", str(api.kubeconfig()),
                         "--kubernetes.node-name", NODE, "--kubernetes.interval", "0.2") as (process, url):  # fmt: skip
        wait_for(lambda: source_up() == "1", 30)
        api.status = (403, "Forbidden", "nodes is forbidden")
        wait_for(lambda: source_up() == "0", 30)
        seen = len(api.requests)
        wait_for(lambda: len(api.requests) >= seen + 6, 30)  # three more failed readings
        process.kill()
        process.wait(10)
        log = process.stderr.read()
    # Logged when the reason changes, not every interval. The first refused reading may fail on either request
    # (the 403 is set between them), so the 403 shows once or twice, never once per reading, and never twice alike
    # in a row.
    reasons = [line.split("msg=", 1)[1] for line in log.splitlines() if "Kubernetes API not read" in line]
    refused = [reason for reason in reasons if "HTTP 403 forbidden" in reason]
    assert 1 <= len(refused) <= 2, log
    assert all(one != next_one for one, next_one in itertools.pairwise(reasons)), log
    assert log.count("Kubernetes API read: node") == 1


def test_a_long_pod_list_arrives_whole(api):
    api.pods = [pod_object(f"{index:08x}-1111-4222-8333-444444444444", "batch", f"worker-{index}",
                           owner=("Job", f"job-{index}")) for index in range(400)]  # fmt: skip
    view = session(api).current()
    assert len(view.pods) == 400 and view.problems == ()
    assert len(json.dumps(api.pods)) > 1 << 19  # many reads of the stream


def test_in_a_pod_the_service_account_token_and_ca_reach_the_api_server(api, tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "ca.crt").write_bytes(api.ca.cert_pem.bytes())
    in_pod = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port), "NODE_NAME": NODE}
    access, reason = access_from(None, None, in_pod, token_file=str(tmp_path / "token"),
                                 ca_file=str(tmp_path / "ca.crt"))  # fmt: skip
    assert access is not None, reason
    reading = KubernetesApi(access)
    reading.read_once()
    assert set(reading.current().pods) == {VLLM.uid, TRTLLM.uid, NODE_EXPORTER.uid}
    (tmp_path / "token").write_text("rotated-and-not-accepted")  # the kubelet rotates it; numawatch reads it again
    reading.read_once()
    with pytest.raises(Exception, match="HTTP 401"):
        reading.current()


# --------------------------------------------------------------------------------------------------- kubelet version
KUBELET_STATE_STALE = next(check for check in all_checks() if check.id == "kubelet_state_stale")


@pytest.mark.parametrize(("node_version", "intended", "expected"),
                         [("v1.37.1", "1.35", []), ("v1.35.2+rke2r1", "1.37", [("critical", "checksum_mismatch")])])
def test_the_node_objects_kubelet_version_decides_how_checkpoints_are_judged(api, fake_host, node_version, intended,
                                                                              expected):
    # Master's v2 CPU checkpoint (checksum over the v3 struct): kubelet 1.37 restores it, 1.35 refuses it. What the
    # kubelet reports on its Node wins over the intent's kubelet.version.
    from test_kubelet_checkpoint_vectors import MASTER_V2

    node = reference_node(fake_host)
    fake_host.write("var/lib/kubelet/cpu_manager_state", MASTER_V2.content)
    api.node = node_object(NODE, kubelet_version=node_version)
    intent = dataclasses.replace(REFERENCE, kubelet_version=intended)

    findings = evaluate(read(node, session(api)), intent, [KUBELET_STATE_STALE]).findings

    found = [(f.severity, f.labels["reason"]) for f in findings
             if f.labels["reason"] in ("checksum_mismatch", "unparsable")]
    assert found == expected
    assert all(node_version in f.message for f in findings if f.labels["reason"] == "checksum_mismatch")


# --------------------------------------------------------------------------------------------------- capture bundles
def test_the_recording_gives_back_what_the_api_answered_and_refuses_what_the_api_would_not():
    from numawatch.errors import MalformedFile
    from numawatch.sources.kubernetes_api import Recording, cluster_view

    pods = reference_pods()
    pods[0]["spec"]["tolerations"].append({"operator": "Exists"})
    view = cluster_view(node_object(NODE, labels={"fibercli.local/numa-pinned": "true"}),
                        {"kind": "PodList", "items": pods})  # fmt: skip
    recording = Recording()

    assert recording.load(recording.dump(view)) == view

    tampered = json.loads(recording.dump(view))
    tampered["node"]["metadata"]["name"] = "x\x1b]0;pwned\x07"
    with pytest.raises(MalformedFile, match=r"metadata\.name"):
        recording.load(json.dumps(tampered).encode())
    with pytest.raises(MalformedFile, match="version 1 recording"):
        recording.load(b'{"version": 2}')


def test_a_capture_keeps_the_api_answer_and_check_from_judges_the_node_with_it(api, fake_host, tmp_path):
    node = kubeadm_node(fake_host)
    add_foreign(node, AGENT_UID, "acme-agents", "log-shipper-q8w4z")
    api.pods.append(pod_object(AGENT_UID, "acme-agents", "log-shipper-q8w4z", owner=("DaemonSet", "log-shipper")))
    bundle = tmp_path / "node.tar.gz"
    common = ("--host-root", str(fake_host.root), "--no-nvml", "--no-self-pin")
    kubeconfig = ("--kubeconfig", str(api.kubeconfig()))

    on_node = json.loads(numawatch(*common, "check", "--format", "json", "--window", "0", *kubeconfig,
                                   env={"NODE_NAME": NODE}).stdout)  # fmt: skip
    captured = numawatch(*common, "capture", "-o", str(bundle), *kubeconfig, env={"NODE_NAME": NODE})
    offline = json.loads(numawatch("check", "--from", str(bundle), "--format", "json").stdout)

    assert captured.returncode == 0, captured.stderr
    sources = {source["name"]: source for source in offline["sources"]}
    assert sources["kubernetes_api"]["up"], sources["kubernetes_api"]
    assert {f["check"] for f in offline["findings"]} == {f["check"] for f in on_node["findings"]}
    assert "node_workload_not_isolated" not in {f["check"] for f in offline["findings"]}  # the DaemonSet, from the API
    assert "node_taint_missing" not in {item["check"] for item in offline.get("not_evaluated", [])}
