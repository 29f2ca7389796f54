"""The Kubernetes manifests in deploy/: schema validity, security policy, wiring, and generated content.

Core kinds are validated offline with kubernetes-validate (bundled OpenAPI schemas, strict: unknown fields fail);
the prometheus-operator kinds with jsonschema against deploy/schemas/.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SCHEMAS = DEPLOY / "schemas"
# The oldest Kubernetes numawatch supports and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.27.0", "1.37.0")
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
METRICS_PORT = 10914


@functools.cache
def load_generator():
    name = "numawatch_deploy_generate"
    spec = importlib.util.spec_from_file_location(name, DEPLOY / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def manifests() -> list[dict]:
    return [doc for path in manifest_files() for doc in yaml.safe_load_all(path.read_text()) if doc]


def one(kind: str) -> dict:
    (found,) = [m for m in manifests() if m["kind"] == kind]
    return found


def pod_spec() -> dict:
    return one("DaemonSet")["spec"]["template"]["spec"]


def container() -> dict:
    (main,) = pod_spec()["containers"]
    return main


def crd_schema(kind: str) -> dict:
    return json.loads((SCHEMAS / f"monitoring.coreos.com_v1_{kind.lower()}.schema.json").read_text())


# --- validity ------------------------------------------------------------------------------------------------


def test_kustomization_lists_exactly_the_manifests_in_deploy():
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert sorted(kustomization["resources"]) == [p.name for p in manifest_files()]
    image = container()["image"].rsplit(":", 1)[0]
    assert [i["name"] for i in kustomization["images"]] == [image]


def test_every_manifest_is_namespaced_to_numawatch_and_labelled():
    for doc in manifests():
        metadata = doc["metadata"]
        if doc["kind"] != "Namespace":
            assert metadata["namespace"] == "numawatch", doc["kind"]
        assert metadata["labels"]["app.kubernetes.io/name"] == "numawatch", doc["kind"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_core_manifests_validate_strictly_against_the_kubernetes_schemas(version):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    if version not in kubernetes_validate.utils.all_versions():
        pytest.skip(f"this kubernetes-validate has no schemas for Kubernetes {version}")
    core = [doc for doc in manifests() if doc["kind"] not in CRD_KINDS]
    assert {doc["kind"] for doc in core} >= {"Namespace", "ServiceAccount", "DaemonSet", "Service", "NetworkPolicy"}
    for doc in core:
        kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_validate_rejects_a_misspelt_security_field():
    """Guards the test above: strict validation must fail on an unknown field, not pass it by."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    broken = copy.deepcopy(one("DaemonSet"))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_prometheus_operator_resources_validate_against_their_crd_schemas():
    kinds = [doc for doc in manifests() if doc["kind"] in CRD_KINDS]
    assert {doc["kind"] for doc in kinds} == {"ServiceMonitor", "PrometheusRule"}
    for doc in kinds:
        jsonschema.validate(doc, crd_schema(doc["kind"]), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    ("kind", "mutate"),
    [
        ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(intervall="15s")),
        ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(interval="15 seconds")),
        ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0]["relabelings"][0].update(action="rename")),
        ("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update(four="10m")),
        ("PrometheusRule", lambda d: d["spec"]["groups"][1]["rules"][0].update(keep_firing_for="ten minutes")),
    ],
)
def test_crd_schemas_reject_unknown_fields_and_bad_values(kind, mutate):
    broken = copy.deepcopy(one(kind))
    mutate(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, crd_schema(kind), cls=jsonschema.Draft202012Validator)


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
    groups = one("PrometheusRule")["spec"]["groups"]
    sources = sorted((ROOT / "alerts").glob("numawatch-*.yml"))
    assert {p.name for p in sources} >= {"numawatch-alerts.yml", "numawatch-rules.yml"}
    expected = [group for path in sources for group in yaml.safe_load(path.read_text())["groups"]]
    assert groups == expected


def test_dashboards_configmap_holds_every_dashboard_for_the_grafana_sidecar():
    configmap = one("ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert files
    assert sorted(configmap["data"]) == [path.name for path in files]
    for path in files:
        assert json.loads(configmap["data"][path.name]) == json.loads(path.read_text())
    # the API server rejects objects over 1 MiB
    assert len((DEPLOY / "dashboards-configmap.yaml").read_bytes()) < 900 * 1024


def test_prometheus_rule_and_service_monitor_carry_the_selector_label():
    for kind in ("PrometheusRule", "ServiceMonitor"):
        assert one(kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"


# --- security policy -----------------------------------------------------------------------------------------


def test_pod_runs_as_root_with_every_capability_dropped_and_nothing_added():
    context = container()["securityContext"]
    assert context["runAsUser"] == 0
    assert context["capabilities"]["drop"] == ["ALL"]
    assert not context["capabilities"].get("add")
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True


def test_seccomp_runtime_default_on_pod_and_container():
    assert pod_spec()["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container()["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_host_pid_without_host_network_or_host_ipc():
    spec = pod_spec()
    assert spec["hostPID"] is True
    assert spec.get("hostNetwork", False) is False
    assert spec.get("hostIPC", False) is False
    assert not any("hostPort" in port for port in container()["ports"])


def test_pod_keeps_the_host_user_namespace_so_kernel_uevents_reach_it():
    # A user-namespaced pod's network namespace hears no uevents (see the hotplug tests below); hostUsers: false
    # would silently turn hotplug off.
    assert pod_spec().get("hostUsers", True) is True


def test_host_root_is_mounted_read_only_at_host_with_host_to_container_propagation():
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    mounts = {m["mountPath"]: m for m in container()["volumeMounts"]}
    host = mounts["/host"]
    assert host["readOnly"] is True
    assert host["mountPropagation"] == "HostToContainer"
    assert volumes[host["name"]]["hostPath"] == {"path": "/", "type": "Directory"}


def test_every_host_path_is_a_read_only_directory_never_a_single_file():
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    for mount in container()["volumeMounts"]:
        host_path = volumes[mount["name"]].get("hostPath")
        if host_path is None:
            continue
        assert mount.get("readOnly") is True, mount["name"]
        # the kubelet replaces its state files and sockets by rename: a file mount would pin the old inode
        assert host_path.get("type") == "Directory", mount["name"]


def test_tolerates_every_taint_including_the_gpu_taint():
    tolerations = pod_spec()["tolerations"]
    assert {"operator": "Exists"} in tolerations


def test_priority_class_is_system_node_critical():
    assert pod_spec()["priorityClassName"] == "system-node-critical"


def test_no_service_account_token_is_mounted():
    assert pod_spec()["automountServiceAccountToken"] is False
    assert one("ServiceAccount")["automountServiceAccountToken"] is False


def test_namespace_allows_the_privileged_pod_security_level():
    labels = one("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_image_is_pinned_by_tag_or_digest():
    image = container()["image"]
    assert re.search(r"(:[\w][\w.-]*|@sha256:[0-9a-f]{64})$", image.rsplit("/", 1)[-1]), image
    assert not image.endswith(":latest")


# --- what the container runs ---------------------------------------------------------------------------------


def test_container_serves_with_the_host_root_on_port_10914_named_metrics():
    main = container()
    assert main["args"] == ["serve", "--host-root=/host"]
    assert main["ports"] == [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]


def test_liveness_and_readiness_probe_healthz_on_the_metrics_port():
    main = container()
    for probe in ("livenessProbe", "readinessProbe"):
        assert main[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe


def test_resources_request_a_fraction_of_a_cpu_and_limit_only_memory():
    resources = container()["resources"]
    assert resources["requests"] == {"cpu": "60m", "memory": "96Mi"}
    # no CPU limit: CFS throttling would stretch every evaluation burst (deploy/README.md)
    assert resources["limits"] == {"memory": "192Mi"}
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


# --- wiring between the objects ------------------------------------------------------------------------------


def test_service_is_headless_and_selects_the_daemonset_pods():
    service = one("Service")
    pod_labels = one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_daemonset_selector_matches_its_pod_template():
    daemonset = one("DaemonSet")
    assert (
        daemonset["spec"]["selector"]["matchLabels"].items()
        <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    )


def test_service_monitor_scrapes_the_service_port_and_sets_job_instance_and_node():
    monitor = one("ServiceMonitor")
    service = one("Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    # the alert rules select up{job="numawatch"}: jobLabel names the Service label whose value becomes job
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "numawatch"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert targets["instance"] == ["__meta_kubernetes_pod_node_name"]
    assert targets["node"] == ["__meta_kubernetes_pod_node_name"]


def test_alert_rules_select_the_job_the_service_monitor_produces():
    rules = (ROOT / "alerts" / "numawatch-alerts.yml").read_text()
    assert 'up{job="numawatch"}' in rules


def test_network_policy_admits_only_prometheus_on_the_metrics_port_and_denies_egress():
    policy = one("NetworkPolicy")["spec"]
    pod_labels = one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    assert policy["egress"] == []
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": METRICS_PORT, "protocol": "TCP"}]
    (source,) = rule["from"]
    assert source["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}


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
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        pytest.skip("needs root and util-linux's unshare and setpriv to create namespaces")
    if not os.access(UEVENT_FILE, os.W_OK):
        pytest.skip(f"{UEVENT_FILE} is not writable here: cannot send a synthetic uevent")
    token = str(uuid.uuid4())
    drop = (
        []
        if "--user" in namespaces
        else ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    )
    argv = ["unshare", *namespaces, *drop, sys.executable, "-c", UEVENT_LISTENER, mode, token]
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


# --- the image -----------------------------------------------------------------------------------------------


def containerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Containerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_containerfile_builds_from_python_311_slim_with_a_non_editable_install():
    instructions = containerfile_instructions()
    bases = [args.split()[0] for op, args in instructions if op == "FROM"]
    assert bases and all(base == "python:3.11-slim" for base in bases)
    installs = [args for op, args in instructions if op == "RUN" and "pip install" in args]
    assert installs
    for install in installs:
        assert not re.search(r"(^|\s)(-e|--editable)(\s|$)", install), install


def test_containerfile_entrypoint_is_the_numawatch_console_script():
    instructions = containerfile_instructions()
    (entrypoint,) = [args for op, args in instructions if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["numawatch"]
    (cmd,) = [args for op, args in instructions if op == "CMD"]
    assert json.loads(cmd) == container()["args"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^numawatch = "numawatch\.cli:main"$', pyproject, re.MULTILINE)
    assert ("EXPOSE", str(METRICS_PORT)) in instructions


def test_containerfile_copies_everything_the_package_build_needs():
    copied = " ".join(args for op, args in containerfile_instructions() if op == "COPY")
    for needed in ("pyproject.toml", "README.md", "exporter"):
        assert needed in copied
