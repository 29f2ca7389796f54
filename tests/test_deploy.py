"""The Kubernetes manifests in deploy/: what each overlay renders, schema validity, security policy, wiring, and
generated content.

Every overlay is rendered with the real ``kubectl kustomize`` (tests/kustomize.py) and every object it renders is
validated: core kinds offline with kubernetes-validate (bundled OpenAPI schemas, strict: unknown fields fail), the
prometheus-operator kinds with jsonschema against deploy/schemas/.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
import unprivileged
import yaml
from kustomize import ALL_RENDERINGS, DEPLOY, OVERLAYS, find, kustomize, render
from numawatch.intent import REFERENCE
from numawatch.intentfile import load_intent

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = DEPLOY / "schemas"
# The oldest Kubernetes numawatch supports and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.27.0", "1.37.0")
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
METRICS_PORT = 10914
# What each shipped kustomization renders (deploy/README.md's table says the same).
RENDERED_KINDS = {
    "deploy": {"Namespace": 1, "ServiceAccount": 1, "DaemonSet": 1, "Service": 1, "NetworkPolicy": 1, "ConfigMap": 1},
    "base": {"Namespace": 1, "ServiceAccount": 1, "DaemonSet": 1, "Service": 1, "NetworkPolicy": 1, "ConfigMap": 1},
    "all-nodes": {"Namespace": 1, "ServiceAccount": 1, "DaemonSet": 1, "Service": 1, "NetworkPolicy": 1,
                  "ConfigMap": 1},
    "prometheus-operator": {"Namespace": 1, "ServiceAccount": 1, "DaemonSet": 1, "Service": 1, "NetworkPolicy": 1,
                            "ConfigMap": 2, "ServiceMonitor": 1, "PrometheusRule": 1},
    "kube-prometheus-stack": {"Namespace": 1, "ServiceAccount": 1, "DaemonSet": 1, "Service": 1, "NetworkPolicy": 1,
                              "ConfigMap": 2, "ServiceMonitor": 1, "PrometheusRule": 1},
    "node-problem-detector": {"Namespace": 1, "ServiceAccount": 2, "DaemonSet": 2, "Service": 1, "NetworkPolicy": 1,
                              "ConfigMap": 2, "ClusterRoleBinding": 1},
}
# The node labels that mark a GPU node (the base DaemonSet's required node affinity, one term each).
GPU_NODE_LABELS = {
    "nvidia.com/gpu.present",  # NVIDIA GPU Operator / GPU feature discovery
    "feature.node.kubernetes.io/pci-10de.present",  # NFD, vendor-only device labels (as the GPU Operator sets NFD)
    "feature.node.kubernetes.io/pci-0302_10de.present",  # NFD defaults (class_vendor): NVIDIA 3D controller
    "feature.node.kubernetes.io/pci-0300_10de.present",  # NFD defaults: NVIDIA VGA controller
    "feature.node.kubernetes.io/amd-gpu",  # AMD GPU Operator's NodeFeatureRule
    "feature.node.kubernetes.io/pci-1002.present",  # NFD vendor-only: AMD/ATI
    "feature.node.kubernetes.io/pci-0380_1002.present",  # NFD defaults: AMD display controller (Instinct)
    "feature.node.kubernetes.io/pci-1200_1002.present",  # NFD defaults: AMD processing accelerator
    "intel.feature.node.kubernetes.io/gpu",  # Intel device plugins operator's NodeFeatureRule
    "feature.node.kubernetes.io/pci-1da3.present",  # NFD vendor-only: Habana Labs (Gaudi)
    "feature.node.kubernetes.io/pci-1200_1da3.present",  # NFD defaults: Gaudi, a processing accelerator
}


@functools.cache
def load_generator():
    name = "numawatch_deploy_generate"
    spec = importlib.util.spec_from_file_location(name, DEPLOY / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def one(kind: str, name: str | None = None, rendering: str = "prometheus-operator") -> dict:
    return find(render(rendering), kind, name)


def daemonset(rendering: str = "base", name: str = "numawatch") -> dict:
    return find(render(rendering), "DaemonSet", name)


def pod_spec(rendering: str = "base", name: str = "numawatch") -> dict:
    return daemonset(rendering, name)["spec"]["template"]["spec"]


def container(rendering: str = "base", name: str = "numawatch") -> dict:
    (main,) = pod_spec(rendering, name)["containers"]
    return main


def crd_schema(kind: str) -> dict:
    return json.loads((SCHEMAS / f"monitoring.coreos.com_v1_{kind.lower()}.schema.json").read_text())


def kustomizations() -> list[Path]:
    return sorted(path for path in DEPLOY.rglob("kustomization.yaml") if "schemas" not in path.parts)


# --- what each overlay renders -------------------------------------------------------------------------------


@pytest.mark.parametrize("rendering", sorted(RENDERED_KINDS))
@pytest.mark.slow
def test_each_kustomization_renders_the_documented_objects(rendering):
    assert Counter(doc["kind"] for doc in render(rendering)) == RENDERED_KINDS[rendering]


def test_every_kustomization_lists_exactly_the_manifests_beside_it():
    for path in kustomizations():
        kustomization = yaml.safe_load(path.read_text())
        files = {p.name for p in path.parent.glob("*.yaml") if p.name != "kustomization.yaml"}
        generated_from = {f for generator in kustomization.get("configMapGenerator", []) for f in generator["files"]}
        listed = {r for r in kustomization.get("resources", []) if r.endswith(".yaml")}
        assert listed == files - generated_from, path
        for entry in (*kustomization.get("resources", []), *kustomization.get("components", [])):
            assert entry.endswith(".yaml") or (path.parent / entry / "kustomization.yaml").exists(), (path, entry)


def test_components_are_components_and_overlays_kustomizations():
    for path in kustomizations():
        kind = yaml.safe_load(path.read_text())["kind"]
        component = path.parent.parent.name == "components" or path.parent.name == "npd"
        assert kind == ("Component" if component else "Kustomization"), path


def test_the_images_the_kustomizations_set_are_the_containers_images():
    base = yaml.safe_load((DEPLOY / "base/kustomization.yaml").read_text())
    npd = yaml.safe_load((DEPLOY / "npd/kustomization.yaml").read_text())
    assert container()["image"] == f"{base['images'][0]['name']}:{base['images'][0]['newTag']}"
    npd_image = container("node-problem-detector", "numawatch-npd")["image"]
    assert npd_image == f"{npd['images'][0]['name']}:{npd['images'][0]['newTag']}"


@pytest.mark.parametrize("rendering", ALL_RENDERINGS)
def test_every_object_is_namespaced_to_numawatch_and_labelled(rendering):
    for doc in render(rendering):
        metadata = doc["metadata"]
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert metadata["namespace"] == "numawatch", doc["kind"]
        assert metadata["labels"]["app.kubernetes.io/name"] in ("numawatch", "numawatch-npd"), doc["kind"]
        assert metadata["labels"]["app.kubernetes.io/part-of"] == "numawatch", doc["kind"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("rendering", ALL_RENDERINGS)
@pytest.mark.slow
def test_core_objects_validate_strictly_against_the_kubernetes_schemas(rendering, version):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    if version not in kubernetes_validate.utils.all_versions():
        pytest.skip(f"this kubernetes-validate has no schemas for Kubernetes {version}")
    core = [doc for doc in render(rendering) if doc["kind"] not in CRD_KINDS]
    assert {doc["kind"] for doc in core} >= {"Namespace", "ServiceAccount", "DaemonSet", "Service", "NetworkPolicy"}
    for doc in core:
        kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_validate_rejects_a_misspelt_security_field():
    """Guards the test above: strict validation must fail on an unknown field, not pass it by."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    broken = copy.deepcopy(daemonset())
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


@pytest.mark.slow
def test_prometheus_operator_objects_validate_against_their_crd_schemas():
    seen = set()
    for rendering in ALL_RENDERINGS:
        for doc in render(rendering):
            if doc["kind"] in CRD_KINDS:
                jsonschema.validate(doc, crd_schema(doc["kind"]), cls=jsonschema.Draft202012Validator)
                seen.add(doc["kind"])
    assert seen == CRD_KINDS


@pytest.mark.parametrize(
    ("kind", "rendering", "mutate"),
    [
        ("ServiceMonitor", "prometheus-operator", lambda d: d["spec"]["endpoints"][0].update(intervall="15s")),
        ("ServiceMonitor", "prometheus-operator", lambda d: d["spec"]["endpoints"][0].update(interval="15 seconds")),
        ("ServiceMonitor", "prometheus-operator",
         lambda d: d["spec"]["endpoints"][0]["relabelings"][0].update(action="rename")),
        ("PodMonitor", "base+podmonitor", lambda d: d["spec"].update(endpoints=d["spec"]["podMetricsEndpoints"])),
        ("PodMonitor", "base+podmonitor", lambda d: d["spec"]["podMetricsEndpoints"][0].update(portNumber="metrics")),
        ("PrometheusRule", "prometheus-operator", lambda d: d["spec"]["groups"][0]["rules"][0].update(four="10m")),
        ("PrometheusRule", "prometheus-operator",
         lambda d: d["spec"]["groups"][1]["rules"][0].update(keep_firing_for="ten minutes")),
    ],
)
def test_crd_schemas_reject_unknown_fields_and_bad_values(kind, rendering, mutate):
    broken = copy.deepcopy(one(kind, rendering=rendering))
    mutate(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, crd_schema(kind), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("rendering", ["deploy", "base", "all-nodes", "node-problem-detector"])
def test_the_base_needs_no_prometheus_operator(rendering):
    """Installs on a cluster without the monitoring.coreos.com CRDs: no object of theirs."""
    assert not [doc for doc in render(rendering) if doc["apiVersion"].startswith("monitoring.coreos.com/")]


def test_rule_group_names_are_unique():
    # The CRD declares spec.groups a list-map keyed by name; the API server rejects duplicates.
    names = [group["name"] for group in one("PrometheusRule")["spec"]["groups"]]
    assert len(names) == len(set(names))


# --- generated content ---------------------------------------------------------------------------------------


def test_committed_generated_manifests_are_what_generate_py_writes():
    for path, text in load_generator().outputs().items():
        assert path.exists(), f"{path.name} missing: run python deploy/generate.py"
        assert path.read_text() == text, f"{path.name} is stale: run python deploy/generate.py"


def test_prometheus_rule_content_equals_the_rule_files_in_alerts():
    sources = sorted((ROOT / "alerts").glob("numawatch-*.yml"))
    assert {p.name for p in sources} >= {"numawatch-alerts.yml", "numawatch-rules.yml"}
    expected = [group for path in sources for group in yaml.safe_load(path.read_text())["groups"]]
    for rendering in ("prometheus-operator", "kube-prometheus-stack", "base+podmonitor"):
        assert one("PrometheusRule", rendering=rendering)["spec"]["groups"] == expected


def test_dashboards_configmap_holds_every_dashboard_for_the_grafana_sidecar():
    configmap = one("ConfigMap", "numawatch-dashboards")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert files
    assert sorted(configmap["data"]) == [path.name for path in files]
    for path in files:
        assert json.loads(configmap["data"][path.name]) == json.loads(path.read_text())
    # the API server rejects objects over 1 MiB
    assert len((DEPLOY / "components/grafana-dashboards/dashboards-configmap.yaml").read_bytes()) < 900 * 1024


# --- which Prometheus picks it up: a setting, not a hard-coded label ----------------------------------------


@pytest.mark.slow
def test_no_base_or_component_hard_codes_a_prometheus_selector_label():
    for path in [*(DEPLOY / "base").glob("*.yaml"), *(DEPLOY / "components").rglob("*.yaml"),
                 *(DEPLOY / "npd").glob("*.yaml")]:
        assert not re.search(r"^\s*release:", path.read_text(), re.MULTILINE), path
    for rendering in ALL_RENDERINGS:
        if rendering != "kube-prometheus-stack":
            assert not [doc for doc in render(rendering) if "release" in doc["metadata"]["labels"]], rendering


def release_setting(overlay_text: str) -> str:
    """The value of the one release-label patch in overlays/kube-prometheus-stack."""
    kustomization = yaml.safe_load(overlay_text)
    (patch,) = kustomization["patches"]
    (operation,) = yaml.safe_load(patch["patch"])
    assert operation["path"] == "/metadata/labels/release"
    return operation["value"]


@pytest.mark.slow
def test_the_kube_prometheus_stack_overlay_labels_every_monitoring_object_from_one_setting():
    overlay = OVERLAYS["kube-prometheus-stack"] / "kustomization.yaml"
    value = release_setting(overlay.read_text())
    assert value == "kube-prometheus-stack"  # the chart's default release name, as its docs install it
    for doc in render("kube-prometheus-stack"):
        monitoring = doc["apiVersion"].startswith("monitoring.coreos.com/")
        assert (doc["metadata"]["labels"].get("release") == value) is monitoring, doc["kind"]
    # change the one value, and every monitoring object follows
    with tempfile.TemporaryDirectory() as scratch:
        up = os.path.relpath(DEPLOY, scratch)
        text = overlay.read_text().replace("../../", f"{up}/").replace("value: kube-prometheus-stack", "value: prod")
        (Path(scratch) / "kustomization.yaml").write_text(text)
        relabelled = kustomize(Path(scratch))
    monitoring = [doc for doc in relabelled if doc["apiVersion"].startswith("monitoring.coreos.com/")]
    assert len(monitoring) == 2 and all(doc["metadata"]["labels"]["release"] == "prod" for doc in monitoring)


# --- security policy -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("rendering", "name"), [("base", "numawatch"), ("node-problem-detector", "numawatch-npd")])
def test_pod_runs_as_root_with_every_capability_dropped_and_nothing_added(rendering, name):
    context = container(rendering, name)["securityContext"]
    assert context["runAsUser"] == 0
    assert context["capabilities"]["drop"] == ["ALL"]
    assert not context["capabilities"].get("add")
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize(("rendering", "name"), [("base", "numawatch"), ("node-problem-detector", "numawatch-npd")])
def test_seccomp_runtime_default_on_pod_and_container(rendering, name):
    assert pod_spec(rendering, name)["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container(rendering, name)["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize(("rendering", "name"), [("base", "numawatch"), ("node-problem-detector", "numawatch-npd")])
def test_host_pid_without_host_network_or_host_ipc(rendering, name):
    spec = pod_spec(rendering, name)
    assert spec["hostPID"] is True
    assert spec.get("hostNetwork", False) is False
    assert spec.get("hostIPC", False) is False
    assert not any("hostPort" in port for port in container(rendering, name).get("ports", []))


def test_pod_keeps_the_host_user_namespace_so_kernel_uevents_reach_it():
    # A user-namespaced pod's network namespace hears no uevents (see the hotplug tests below); hostUsers: false
    # would silently turn hotplug off.
    assert pod_spec().get("hostUsers", True) is True


@pytest.mark.parametrize(("rendering", "name"), [("base", "numawatch"), ("node-problem-detector", "numawatch-npd")])
def test_host_root_is_mounted_read_only_at_host_with_host_to_container_propagation(rendering, name):
    volumes = {v["name"]: v for v in pod_spec(rendering, name)["volumes"]}
    mounts = {m["mountPath"]: m for m in container(rendering, name)["volumeMounts"]}
    host = mounts["/host"]
    assert host["readOnly"] is True
    assert host["mountPropagation"] == "HostToContainer"
    assert volumes[host["name"]]["hostPath"] == {"path": "/", "type": "Directory"}


@pytest.mark.parametrize(("rendering", "name"), [("base", "numawatch"), ("node-problem-detector", "numawatch-npd")])
def test_every_mount_is_read_only_and_a_directory_except_the_scratch_tmp(rendering, name):
    volumes = {v["name"]: v for v in pod_spec(rendering, name)["volumes"]}
    for mount in container(rendering, name)["volumeMounts"]:
        assert "subPath" not in mount and "subPathExpr" not in mount, mount["name"]
        if mount["mountPath"] == "/tmp":
            assert volumes[mount["name"]]["emptyDir"]["medium"] == "Memory"
            continue
        assert mount.get("readOnly") is True, mount["name"]
        host_path = volumes[mount["name"]].get("hostPath")
        # the kubelet replaces its state files and sockets by rename: a file mount would pin the old inode
        assert host_path is None or host_path.get("type") == "Directory", mount["name"]


def test_tolerates_every_taint_including_the_gpu_taint():
    assert {"operator": "Exists"} in pod_spec()["tolerations"]
    assert {"operator": "Exists"} in pod_spec("node-problem-detector", "numawatch-npd")["tolerations"]


def test_priority_class_is_system_node_critical():
    assert pod_spec()["priorityClassName"] == "system-node-critical"
    assert pod_spec("node-problem-detector", "numawatch-npd")["priorityClassName"] == "system-node-critical"


def test_no_service_account_token_is_mounted_and_numawatch_is_bound_to_no_role():
    assert pod_spec()["automountServiceAccountToken"] is False
    assert one("ServiceAccount", "numawatch")["automountServiceAccountToken"] is False
    # Only components/kubernetes-api gives numawatch API access (the next test): no shipped overlay does.
    for rendering in OVERLAYS:
        for doc in render(rendering):
            if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
                assert {"kind": "ServiceAccount", "name": "numawatch", "namespace": "numawatch"} not in doc["subjects"]
        assert {doc["kind"] for doc in render(rendering)}.isdisjoint({"Role", "ClusterRole"})


def test_the_kubernetes_api_component_grants_the_least_read_access_and_opens_only_the_api_servers_ports():
    rendering = "base+kubernetes-api"
    role = find(render(rendering), "ClusterRole", "numawatch")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    binding = find(render(rendering), "ClusterRoleBinding", "numawatch")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "numawatch"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "numawatch", "namespace": "numawatch"}]
    assert pod_spec(rendering)["automountServiceAccountToken"] is True
    assert find(render(rendering), "ServiceAccount", "numawatch")["automountServiceAccountToken"] is False
    egress = find(render(rendering), "NetworkPolicy", "numawatch")["spec"]["egress"]
    assert egress == [{"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}]
    for other in ALL_RENDERINGS:
        if other != rendering:
            assert find(render(other), "NetworkPolicy", "numawatch")["spec"]["egress"] == []


def test_the_node_name_comes_from_the_downward_api():
    env = {item["name"]: item for item in container()["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_namespace_allows_the_privileged_pod_security_level():
    labels = one("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_image_is_pinned_by_tag_or_digest():
    for image in (container()["image"], container("node-problem-detector", "numawatch-npd")["image"]):
        assert re.search(r"(:[\w][\w.-]*|@sha256:[0-9a-f]{64})$", image.rsplit("/", 1)[-1]), image
        assert not image.endswith(":latest")


# --- where it runs: GPU nodes by default, every node with the all-nodes overlay -----------------------------


def required_node_terms(spec: dict) -> list[dict]:
    return spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_the_base_runs_on_gpu_nodes_only():
    terms = required_node_terms(pod_spec())
    keys = []
    for term in terms:
        (expression,) = term["matchExpressions"]  # the terms are ORed: any one GPU label is enough
        assert expression["operator"] == "In" and expression["values"] == ["true"], expression
        keys.append(expression["key"])
    assert sorted(keys) == sorted(GPU_NODE_LABELS)
    assert pod_spec()["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_the_all_nodes_overlay_drops_only_the_gpu_affinity():
    every = copy.deepcopy(daemonset("all-nodes"))
    gpu_only = copy.deepcopy(daemonset("base"))
    del gpu_only["spec"]["template"]["spec"]["affinity"]
    assert "affinity" not in every["spec"]["template"]["spec"]
    assert every == gpu_only
    assert pod_spec("all-nodes")["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_node_problem_detector_runs_where_numawatch_does():
    npd = pod_spec("node-problem-detector", "numawatch-npd")
    assert npd["affinity"] == pod_spec("node-problem-detector")["affinity"] == pod_spec()["affinity"]
    assert npd["nodeSelector"] == pod_spec()["nodeSelector"]
    for name in ("numawatch", "numawatch-npd"):
        assert "affinity" not in pod_spec("npd+all-nodes", name)


# --- the intent file: a ConfigMap mounted as a directory ---------------------------------------------------


def intent_argument(args: list[str]) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in args if arg.startswith("--intent=")]
    return value


def test_the_intent_configmap_is_mounted_as_a_directory_and_keeps_its_name():
    spec = pod_spec()
    configmap = find(render("base"), "ConfigMap", "numawatch-intent")  # no hash suffix: edits update it in place
    (volume,) = [v for v in spec["volumes"] if "configMap" in v]
    assert volume["configMap"] == {"name": configmap["metadata"]["name"]}
    (mount,) = [m for m in container()["volumeMounts"] if m["name"] == volume["name"]]
    # a directory: the kubelet's ..data symlink swap reaches it; a subPath mount would keep the first version
    assert "subPath" not in mount and mount["readOnly"] is True
    intent = intent_argument(container()["args"])
    directory, _, key = intent.rpartition("/")
    assert directory == mount["mountPath"]
    assert list(configmap["data"]) == [key]


def test_the_base_intent_is_the_reference_profile(tmp_path):
    configmap = find(render("base"), "ConfigMap", "numawatch-intent")
    path = tmp_path / "intent.yaml"
    path.write_text(configmap["data"]["intent.yaml"])
    assert dataclasses.replace(load_intent(path), source=REFERENCE.source) == REFERENCE


def test_node_problem_detector_judges_with_the_same_intent():
    npd = container("node-problem-detector", "numawatch-npd")
    (mount,) = [m for m in npd["volumeMounts"] if m["name"] == "intent"]
    (volume,) = [v for v in pod_spec("node-problem-detector", "numawatch-npd")["volumes"] if v["name"] == "intent"]
    assert volume["configMap"]["name"] == "numawatch-intent"
    assert mount["mountPath"] == intent_argument(container()["args"]).rpartition("/")[0]


# --- what the container runs ---------------------------------------------------------------------------------


def test_container_serves_with_the_host_root_and_intent_on_port_10914_named_metrics():
    main = container()
    assert main["args"] == ["serve", "--host-root=/host", "--intent=/etc/numawatch/intent/intent.yaml"]
    assert main["ports"] == [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]


def test_liveness_and_readiness_probe_healthz_on_the_metrics_port():
    main = container()
    for probe in ("livenessProbe", "readinessProbe"):
        assert main[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe


def test_resources_request_a_fraction_of_a_cpu_and_limit_only_memory():
    resources = container()["resources"]
    assert resources["requests"] == {"cpu": "60m", "memory": "112Mi"}
    # no CPU limit: CFS throttling would stretch every evaluation burst (deploy/README.md)
    assert resources["limits"] == {"memory": "224Mi"}
    # a fractional CPU request keeps the pod Burstable, so the static CPU Manager never gives it exclusive CPUs
    assert resources["requests"]["cpu"].endswith("m")


def measured_serve_cost() -> tuple[float, float]:
    """The worst serve figures docs/performance.md states for the 384-CPU host: CPU-seconds per evaluation and peak
    RSS in MB (decimal, as VmHWM is reported there)."""
    text = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    cpu = re.search(r"serve spent [\d.]+-([\d.]+) s per evaluation", text)
    rss = re.search(r"serve peaked at [\d.]+-([\d.]+) MB", text)
    assert cpu and rss, "docs/performance.md no longer states serve's CPU and peak RSS the way this test reads them"
    return float(cpu.group(1)), float(rss.group(1))


def mebibytes(quantity: str) -> int:
    assert quantity.endswith("Mi"), quantity
    return int(quantity[:-2])


def test_resources_cover_the_measured_cost_of_serve():
    cpu_seconds, peak_mb = measured_serve_cost()
    resources = container()["resources"]
    # what the pod uses on average at the default 15 s interval, with at least 2x headroom for what the benchmark
    # leaves out (kernel time generating the files, NVML, scrapes)
    average_millicores = cpu_seconds / 15 * 1000
    assert int(resources["requests"]["cpu"].removesuffix("m")) >= 2 * average_millicores
    # never above its memory request at the measured peak (eviction order), and the limit well above that
    peak_mib = peak_mb * 1e6 / 2**20
    assert mebibytes(resources["requests"]["memory"]) >= 1.2 * peak_mib
    assert mebibytes(resources["limits"]["memory"]) >= 2 * mebibytes(resources["requests"]["memory"])


def test_serve_accepts_the_daemonset_arguments(capsys):
    cli = pytest.importorskip("numawatch.cli", reason="numawatch.cli has not landed yet")
    assert cli.main(["serve", "--help"]) == 0
    help_text = capsys.readouterr().out
    for arg in container()["args"][1:]:
        assert arg.split("=", 1)[0] in help_text
    # the port the DaemonSet, Service and probes use is serve's default
    assert f"(default: :{METRICS_PORT})" in help_text  # every interface, IPv4 and IPv6
    args = cli.build_parser().parse_args(container()["args"])
    assert (args.command, args.host_root, args.intent) == ("serve", "/host", "/etc/numawatch/intent/intent.yaml")


# --- wiring between the objects ------------------------------------------------------------------------------


def test_service_is_headless_and_selects_the_daemonset_pods():
    service = one("Service")
    pod_labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}
    ]


@pytest.mark.parametrize(("rendering", "name"), [("base", "numawatch"), ("node-problem-detector", "numawatch-npd")])
def test_daemonset_selector_matches_its_pod_template(rendering, name):
    found = daemonset(rendering, name)
    assert found["spec"]["selector"]["matchLabels"].items() <= found["spec"]["template"]["metadata"]["labels"].items()


def assert_job_instance_and_node(endpoint: dict) -> None:
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert targets["instance"] == ["__meta_kubernetes_pod_node_name"]
    assert targets["node"] == ["__meta_kubernetes_pod_node_name"]


def test_service_monitor_scrapes_the_service_port_and_sets_job_instance_and_node():
    monitor = one("ServiceMonitor")
    service = one("Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    # the alert rules select up{job="numawatch"}: jobLabel names the Service label whose value becomes job
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "numawatch"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert_job_instance_and_node(endpoint)


def test_pod_monitor_scrapes_the_pods_and_sets_the_same_job_instance_and_node():
    monitor = one("PodMonitor", rendering="base+podmonitor")
    pod_labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pod_labels[monitor["spec"]["jobLabel"]] == "numawatch"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert_job_instance_and_node(endpoint)
    assert {p["name"] for p in container()["ports"]} == {endpoint["port"]}


def test_alert_rules_select_the_job_the_service_monitor_produces():
    rules = (ROOT / "alerts" / "numawatch-alerts.yml").read_text()
    assert 'up{job="numawatch"}' in rules


def test_network_policy_admits_only_prometheus_on_the_metrics_port_and_denies_egress():
    policy = one("NetworkPolicy")["spec"]
    pod_labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    assert policy["egress"] == []
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": METRICS_PORT, "protocol": "TCP"}]
    (source,) = rule["from"]
    assert source["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}


def test_network_policy_leaves_node_problem_detector_its_way_to_the_api_server():
    policy = find(render("node-problem-detector"), "NetworkPolicy")["spec"]
    npd_labels = daemonset("node-problem-detector", "numawatch-npd")["spec"]["template"]["metadata"]["labels"]
    assert not policy["podSelector"]["matchLabels"].items() <= npd_labels.items()


# --- hotplug without hostNetwork: kernel uevents on a real kernel ----------------------------------------------

# Run in a new network namespace: report "listening" once the socket is bound to the kernel's uevent group, wait
# for a line on stdin (the test has written the synthetic uevent by then), then drain what is queued without
# waiting. netlink_broadcast() queues a uevent on every listening socket inside the writer's write(2), so after it
# returns the message is either already queued or will never come: no timing involved.
UEVENT_LISTENER = """
import socket, sys
mode, token = sys.argv[1], sys.argv[2]
found = False
if mode == "pyudev":  # what numawatch's HotplugMonitor opens
    import pyudev
    monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
    monitor.filter_by("mem")
    monitor.start()
    print("listening", flush=True)
    sys.stdin.readline()
    while (device := monitor.poll(timeout=0)) is not None:
        found = found or device.properties.get("SYNTH_UUID") == token
else:  # the raw socket: libudev would drop messages whose sender UID does not map, which must not decide the test
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, 15)  # NETLINK_KOBJECT_UEVENT
    sock.bind((0, 1))  # multicast group 1: the kernel's uevents
    print("listening", flush=True)
    sys.stdin.readline()
    while True:
        try:
            message = sock.recv(65536)
        except BlockingIOError:
            break
        found = found or ("SYNTH_UUID=" + token).encode() in message
print("received" if found else "nothing", flush=True)
"""
# A virtual device whose synthetic "change" uevent nothing acts on (the kernel's own selftest uses it too).
UEVENT_FILE = Path("/sys/devices/virtual/mem/full/uevent")


def uevent_heard(namespaces: list[str], mode: str) -> str:
    """Run the listener under ``unshare <namespaces>``, send one synthetic uevent tagged with a fresh UUID, and return
    what the listener heard ("received" or "nothing"). Outside a new user namespace the listener runs as UID 65534
    without capabilities; inside one it is that namespace's root, which has none in the initial namespace."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to create namespaces")
    if unprivileged.available() is not None:
        pytest.skip(unprivileged.available())
    if not os.access(UEVENT_FILE, os.W_OK):
        pytest.skip(f"{UEVENT_FILE} is not writable here: cannot send a synthetic uevent")
    token = str(uuid.uuid4())
    listener_args = ("-c", UEVENT_LISTENER, mode, token)
    python = [sys.executable, *listener_args] if "--user" in namespaces else unprivileged.as_nobody(*listener_args)
    argv = ["unshare", *namespaces, *python]
    listener = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None
        if listener.stdout.readline() != "listening\n":
            error = listener.communicate(timeout=30)[1].strip().splitlines()
            pytest.skip(f"cannot listen in {' '.join(namespaces)}: {error[-1] if error else 'no reason given'}")
        UEVENT_FILE.write_text(f"change {token}")
        out, err = listener.communicate("sent\n", timeout=30)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert listener.returncode == 0, err
    return out.strip()


@pytest.mark.parametrize("mode", ["pyudev", "raw"])
def test_kernel_uevents_reach_a_pods_network_namespace_so_hotplug_needs_no_host_network(mode):
    """A pod's network namespace is a new one owned by the initial user namespace; numawatch listens there as in
    the DaemonSet: pyudev's kernel monitor, no capabilities. (The raw socket guards the test below: it does hear
    uevents where the kernel sends them.)"""
    assert uevent_heard(["--net"], mode) == "received"


def test_kernel_uevents_never_reach_a_network_namespace_of_another_user_namespace():
    """Why the DaemonSet must not be user-namespaced (hostUsers: false): the kernel broadcasts uevents only into
    network namespaces owned by the initial user namespace."""
    assert uevent_heard(["--user", "--map-root-user", "--net"], "raw") == "nothing"



@pytest.mark.slow
def test_the_custom_overlay_in_deploy_readme_renders():
    """deploy/README.md's example of an overlay of one's own: every node, kube-prometheus-stack, node conditions."""
    text = (DEPLOY / "README.md").read_text()
    example = text.split("Your own overlay combines them", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    with tempfile.TemporaryDirectory() as scratch:
        up = os.path.relpath(DEPLOY, scratch)
        (Path(scratch) / "kustomization.yaml").write_text(example.replace("../../", f"{up}/"))
        objects = kustomize(Path(scratch))
    kinds = Counter(doc["kind"] for doc in objects)
    assert kinds["DaemonSet"] == 2 and kinds["ServiceMonitor"] == kinds["PrometheusRule"] == 1
    for doc in objects:
        if doc["kind"] == "DaemonSet":
            assert "affinity" not in doc["spec"]["template"]["spec"]
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            assert doc["metadata"]["labels"]["release"] == "my-release"
