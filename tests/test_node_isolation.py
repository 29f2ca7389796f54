"""Knob 10: taints and labels as the node declares them, node_taint_missing, foreign pods and what they use."""

from __future__ import annotations

import zlib

import pytest
from fakehost import FakeHost
from fakehost.kubelet import write_kubelet_config
from fakehost.pods import ContainerSpec, add_pod, set_pod_usage
from fakehost.reference import GPUS, NODE_EXPORTER, ONLINE, VLLM, reference_node
from fakehost.topology import add_topology
from numawatch.checks import evaluate
from numawatch.checks.node_isolation import NODE_TAINT_MISSING, NODE_WORKLOAD_NOT_ISOLATED
from numawatch.errors import SourceUnavailable
from numawatch.host import HostReader, Inputs, read_host
from numawatch.intent import REFERENCE
from numawatch.intentfile import parse_intent
from numawatch.model.workloads import QOS_BESTEFFORT, QOS_BURSTABLE
from numawatch.refresh import POD_USAGE
from numawatch.sources import cgroups, kubelet_config, pod_usage
from numawatch.sources.node_registration import collect
from numawatch.taints import Taint, TaintError, parse_label, parse_labels, parse_taint, parse_taints
from source_inputs import Driven

GIB = 1 << 30
FOREIGN_UID = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"


# --------------------------------------------------------------------------------------------------- parsers
def test_taints_and_labels_as_kubectl_writes_them():
    assert parse_taint("nvidia.com/gpu=present:NoSchedule") == Taint("nvidia.com/gpu", "present", "NoSchedule")
    assert parse_taint(" dedicated:NoExecute ") == Taint("dedicated", "", "NoExecute")
    assert str(parse_taint("a:PreferNoSchedule")) == "a:PreferNoSchedule"
    assert parse_taints("a=b:NoSchedule, c:NoExecute,") == [Taint("a", "b", "NoSchedule"), Taint("c", "", "NoExecute")]
    assert parse_label("fibercli.local/numa-pinned=true") == ("fibercli.local/numa-pinned", "true")
    assert parse_labels("a=1,b=,a=2") == {"a": "2", "b": ""}


@pytest.mark.parametrize(
    "text",
    ["nvidia.com/gpu=present", "x=y:NoSchdule", "bad key=v:NoSchedule", "a=b c:NoSchedule", "Nvidia.COM/gpu:NoSchedule",
     "=v:NoSchedule", f"a={'v' * 64}:NoSchedule", "a/b/c=d:NoSchedule", "$(x)=y:NoSchedule"],
)  # fmt: skip
def test_a_taint_kubernetes_would_refuse_is_refused(text):
    with pytest.raises(TaintError):
        parse_taint(text)


@pytest.mark.parametrize("text", ["no-value", "=x", "a=-b", "a=b c", "a=b\nc", "-a=b"])
def test_a_label_kubernetes_would_refuse_is_refused(text):
    with pytest.raises(TaintError):
        parse_label(text)


# --------------------------------------------------------------------------------------------------- declarations
class Flag:
    def __init__(self, name: str, value: str, file: str = "/var/lib/kubelet/kubeadm-flags.env") -> None:
        self.name, self.value, self.file, self.origin = name, value, file, "KUBELET_KUBEADM_ARGS"


def test_rke2_lists_replace_and_append_across_files_in_order():
    documents = [
        ("/etc/rancher/rke2/config.yaml", {"node-taint": ["a=b:NoSchedule"], "node-label": "x=1"}),
        ("/etc/rancher/rke2/config.yaml.d/10.yaml", {"node-taint+": ["c:NoExecute"]}),
        ("/etc/rancher/rke2/config.yaml.d/20.yaml", {"node-label": ["y=2"]}),
    ]

    found = collect("rke2", {}, [], [], documents)

    assert found.taints == (Taint("a", "b", "NoSchedule"), Taint("c", "", "NoExecute"))
    assert dict(found.labels) == {"y": "2"}
    assert found.files == tuple(file for file, _ in documents)


def test_on_rke2_no_node_taint_is_no_taint_and_on_kubeadm_unknown():
    assert collect("rke2", {}, [], [], [("/etc/rancher/rke2/config.yaml", {})]).taints == ()
    kubeadm = collect("kubeadm", {}, ["/var/lib/kubelet/config.yaml"], [])
    assert (kubeadm.taints, kubeadm.labels) == (None, None)


def test_kubelet_flags_replace_the_configurations_taints():
    config = {"registerWithTaints": [{"key": "old", "effect": "NoSchedule"}]}
    files = ["/var/lib/kubelet/config.yaml"]

    from_config = collect("kubeadm", config, files, [])
    flagged = collect("kubeadm", config, files, [Flag("register-with-taints", "new=1:NoExecute"),
                                                 Flag("node-labels", "a=b")])  # fmt: skip

    assert from_config.taints == (Taint("old", "", "NoSchedule"),)
    assert flagged.taints == (Taint("new", "1", "NoExecute"),)
    assert dict(flagged.labels) == {"a": "b"}


def test_a_declaration_kubernetes_would_refuse_leaves_that_half_unknown_naming_the_file():
    found = collect("rke2", {}, [], [], [("/etc/rancher/rke2/config.yaml", {"node-taint": ["gpu"], "node-label": 3})])
    bad_config = collect("kubeadm", {"registerWithTaints": [{"effect": "NoSchedule"}]}, ["/k/config.yaml"], [])

    assert (found.taints, found.labels) == (None, None)
    assert found.taint_problems == ("/etc/rancher/rke2/config.yaml: node-taint: taint 'gpu' has no effect "
                                    "(expected key=value:NoSchedule)",)  # fmt: skip
    assert found.label_problems == ("/etc/rancher/rke2/config.yaml: node-label: expected a list of strings",)
    assert bad_config.taints is None and "/k/config.yaml: registerWithTaints[0]" in bad_config.taint_problems[0]


def test_the_kubelet_config_source_reads_what_each_flavour_declares(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    write_kubelet_config(fake_host, "kubeadm", cpu_manager_policy="static", node_taints=("a=b:NoSchedule",),
                         node_labels=("c=d",), as_flags=False)  # fmt: skip

    registration = kubelet_config.read(fake_host.paths).registration

    assert registration.taints == (Taint("a", "b", "NoSchedule"),)
    assert dict(registration.labels) == {"c": "d"}
    assert registration.files == ("/var/lib/kubelet/config.yaml", "/var/lib/kubelet/kubeadm-flags.env")


# --------------------------------------------------------------------------------------------------- node_taint_missing
def taint_check(node):
    evaluation = evaluate(node.read(), REFERENCE, [NODE_TAINT_MISSING])
    return evaluation.findings, evaluation.not_evaluated, evaluation.not_applicable


@pytest.mark.slow
def test_the_reference_node_declares_the_seeds_taint_and_label(fake_host):
    assert taint_check(reference_node(fake_host)) == ((), (), ())


def test_an_rke2_node_without_node_taint_or_with_another_label_value_fires(fake_host):
    node = reference_node(fake_host)
    node.write_kubelet_config(node_taints=None, node_labels=("fibercli.local/numa-pinned=false",))

    findings, _, _ = taint_check(node)

    label, taint = sorted(findings, key=lambda f: f.labels["setting"])
    assert dict(taint.labels) == {
        "setting": "node-taint", "expected": "nvidia.com/gpu=present:NoSchedule",
        "file": "/etc/rancher/rke2/config.yaml",
    }  # fmt: skip
    assert dict(label.labels) == {
        "setting": "node-label", "expected": "fibercli.local/numa-pinned=true",
        "value": "fibercli.local/numa-pinned=false", "file": "/etc/rancher/rke2/config.yaml",
    }  # fmt: skip
    assert "declared: none" in taint.message
    assert "kubectl taint node <node> nvidia.com/gpu=present:NoSchedule" in taint.remediation


def test_a_taint_with_another_effect_is_not_the_taint(fake_host):
    node = reference_node(fake_host)
    node.write_kubelet_config(node_taints=("nvidia.com/gpu=present:PreferNoSchedule",))

    (finding,), _, _ = taint_check(node)

    assert finding.labels["value"] == "nvidia.com/gpu=present:PreferNoSchedule"


def test_a_kubeadm_node_whose_taints_are_set_through_the_api_is_not_evaluated(fake_host):
    node = reference_node(fake_host, flavor="kubeadm")
    node.write_kubelet_config(node_taints=None, node_labels=None)

    findings, (item,), _ = taint_check(node)

    assert findings == ()
    assert "kubeadm sets them through the API" in item.reason


def test_a_kubeadm_node_with_register_with_taints_is_judged(fake_host):
    node = reference_node(fake_host, flavor="kubeadm")
    node.write_kubelet_config(node_taints=("dedicated=batch:NoSchedule",))

    (finding,), _, _ = taint_check(node)

    assert (finding.labels["setting"], finding.labels["file"]) == ("registerWithTaints", "/var/lib/kubelet/config.yaml")


@pytest.mark.slow
def test_a_malformed_node_taint_is_not_evaluated_naming_its_file(fake_host):
    node = reference_node(fake_host)
    fake_host.write("etc/rancher/rke2/config.yaml.d/90-gpu.yaml", "node-taint: ['nvidia.com/gpu=present']\n")

    evaluation = node.evaluate()

    assert evaluation.findings == ()
    (item,) = [i for i in evaluation.not_evaluated if i.check == "node_taint_missing"]
    assert "/etc/rancher/rke2/config.yaml.d/90-gpu.yaml: node-taint: taint" in item.reason
    assert evaluation.host.statuses["kubelet_config"].up


def test_an_intent_asking_for_no_taint_and_a_node_without_gpus(fake_host):
    node = reference_node(fake_host)
    node.write_kubelet_config(node_taints=None, node_labels=None)
    none = parse_intent("node: {taints: [], labels: {}}")
    assert evaluate(node.read(), none, [NODE_TAINT_MISSING]).findings == ()
    for gpu in GPUS:
        fake_host.remove(f"sys/bus/pci/devices/{gpu.pci_address}")
    fake_host.write("var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
                    '{"Data": {"PodDeviceEntries": null, "RegisteredDevices": null}, "Checksum": 0}')
    evaluation = evaluate(read_host(fake_host.paths), REFERENCE, [NODE_TAINT_MISSING, NODE_WORKLOAD_NOT_ISOLATED])
    assert {item.check for item in evaluation.not_applicable} == {"node_taint_missing", "node_workload_not_isolated"}


# --------------------------------------------------------------------------------------------------- foreign pods
def add_clickhouse(node, qos: str = QOS_BURSTABLE, namespace: str = "analytics", name: str = "clickhouse-0"):
    shared = ONLINE - frozenset().union(*node.exclusive.values())
    return add_pod(
        node.host,
        uid=FOREIGN_UID,
        qos=qos,
        namespace=namespace,
        name=name,
        containers=[ContainerSpec("clickhouse", cpus=shared, mems={0, 1}, numa_bytes={0: 3 * GIB, 1: 3 * GIB})],
    )


@pytest.mark.slow
def test_the_reference_node_has_no_foreign_pod(fake_host):
    evaluation = evaluate(reference_node(fake_host).read(), REFERENCE, [NODE_WORKLOAD_NOT_ISOLATED])
    assert (evaluation.findings, evaluation.not_evaluated, evaluation.not_applicable) == ((), (), ())


def test_a_database_on_the_gpu_node_is_foreign_with_its_qos_and_use(fake_host):
    node = reference_node(fake_host)
    pod = add_clickhouse(node)
    set_pod_usage(fake_host, pod, cpu_seconds=1200.0, memory_bytes=6 * GIB)
    reader = HostReader(node.paths)
    reader.read()
    set_pod_usage(fake_host, pod, cpu_seconds=1230.0, memory_bytes=6 * GIB)

    host = reader.read()
    (finding,) = evaluate(host, REFERENCE, [NODE_WORKLOAD_NOT_ISOLATED]).findings

    assert dict(finding.labels) == {"namespace": "analytics", "pod": "clickhouse-0", "pod_uid": FOREIGN_UID,
                                    "value": "burstable"}  # fmt: skip
    assert "analytics/clickhouse-0 (Burstable) holds no GPU" in finding.message
    cores = host.get("pod_usage").pods[FOREIGN_UID].cpu_cores
    assert cores is not None and cores > 0  # 30 CPU-seconds over the (short) time between the two readings
    assert f"it uses {cores:.2f} CPUs and 6.00 GiB of memory" in finding.message
    assert "node.systemNamespaces" in finding.remediation


def test_one_reading_says_the_cpu_time_since_the_pod_started(fake_host):
    node = reference_node(fake_host)
    set_pod_usage(fake_host, add_clickhouse(node, QOS_BESTEFFORT), cpu_seconds=86400.0, memory_bytes=GIB)

    (finding,) = evaluate(node.read(), REFERENCE, [NODE_WORKLOAD_NOT_ISOLATED]).findings

    assert finding.labels["value"] == "besteffort"
    assert "used 86400 CPU-seconds since it started and 1.00 GiB of memory" in finding.message


@pytest.mark.parametrize(
    ("namespace", "intent"),
    [("inference", ""), ("kube-system", ""), ("gpu-operator", ""),
     ("analytics", "node: {systemNamespaces: [analytics]}")],
)
@pytest.mark.slow
def test_system_namespaces_and_the_gpu_pods_own_are_not_foreign(fake_host, namespace, intent):
    node = reference_node(fake_host)
    add_clickhouse(node, namespace=namespace, name="tokenizer-0")

    assert evaluate(node.read(), parse_intent(intent), [NODE_WORKLOAD_NOT_ISOLATED]).findings == ()
    assert VLLM.namespace == "inference" and NODE_EXPORTER.namespace == "kube-system"


def test_without_names_the_namespaces_are_unknown_and_the_check_not_evaluated(fake_host):
    node = reference_node(fake_host)
    add_clickhouse(node)
    for pattern in ("run/k3s", "var/log/pods"):
        fake_host.remove(pattern)

    evaluation = evaluate(node.read(), REFERENCE, [NODE_WORKLOAD_NOT_ISOLATED])

    assert evaluation.findings == ()
    assert "namespaces of" in evaluation.not_evaluated[0].reason


# --------------------------------------------------------------------------------------------------- pod_usage
def test_usage_files_parse_as_the_kernel_prints_them():
    assert pod_usage.parse_usage_usec("usage_usec 1500000\nuser_usec 1000000\n") == 1.5
    assert pod_usage.parse_nanoseconds("2500000000\n") == 2.5
    assert pod_usage.parse_bytes("4096\n") == 4096
    for parse, text in ((pod_usage.parse_usage_usec, "user_usec 5\n"), (pod_usage.parse_usage_usec, "usage_usec x"),
                        (pod_usage.parse_bytes, "max"), (pod_usage.parse_nanoseconds, "-1")):  # fmt: skip
        with pytest.raises(ValueError):
            parse(text)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.slow
def test_the_source_reads_each_pod_cgroup_on_both_cgroup_versions(fake_host, version):
    node = reference_node(fake_host, cgroup_version=version)
    set_pod_usage(fake_host, node.pod(NODE_EXPORTER), cpu_seconds=42.5, memory_bytes=123456789)

    usage = pod_usage.read(fake_host.paths)

    assert set(usage.pods) == {pod.uid for pod in (VLLM, NODE_EXPORTER)} | {node.pods["trtllm-mistral-0"].uid}
    found = usage.pods[NODE_EXPORTER.uid]
    assert (found.qos, found.cpu_seconds, found.memory_bytes, found.cpu_cores) == ("burstable", 42.5, 123456789, None)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.slow
def test_handed_the_cgroups_reading_the_source_lists_no_directory_and_reads_the_same(fake_host, version):
    node = reference_node(fake_host, cgroup_version=version)
    set_pod_usage(fake_host, node.pod(NODE_EXPORTER), cpu_seconds=42.5, memory_bytes=123456789)
    inputs = Inputs.of(cgroups=cgroups.read(fake_host.paths))
    used: list[tuple[str, str]] = []
    paths = fake_host.paths  # the reading's own HostFs is the one observed

    with paths.fs.observe(lambda path, kind: used.append((kind, path))):
        usage = pod_usage.read(paths, inputs)

    assert usage == pod_usage.read(fake_host.paths)  # the same pods as its own listing finds
    assert not [path for kind, path in used if kind == "listed"]
    assert sum(kind == "opened" for kind, _ in used) == 2 * len(usage.pods)  # two files per pod


def test_the_reader_rates_cpu_between_its_readings_and_staggers_pods(fake_host):
    node = reference_node(fake_host)
    clock = iter(range(100, 1000, 10))  # 10 s between readings
    reader = Driven(pod_usage.SOURCE, stagger=2, clock=lambda: float(next(clock)))
    length = reader.readings_per_round(POD_USAGE)  # the pod usage's round: K times its stretch
    set_pod_usage(fake_host, node.pod(NODE_EXPORTER), cpu_seconds=10.0, memory_bytes=GIB)
    reader.read(fake_host.paths)  # reading 0: every pod is new, read at once
    set_pod_usage(fake_host, node.pod(NODE_EXPORTER), cpu_seconds=30.0, memory_bytes=GIB)

    rates = [reader.read(fake_host.paths).pods[NODE_EXPORTER.uid].cpu_cores for _ in range(length)]

    # Its turn is its UID's CRC modulo the round: read then, 10 s per reading after the first; between turns its
    # last value is handed on (the first reading's, which has no rate).
    turn = zlib.crc32(NODE_EXPORTER.uid.encode()) % length or length  # reading 0's turn comes again at reading R
    expected = [None] * (turn - 1) + [20.0 / (10 * turn)] * (length - turn + 1)
    assert rates == pytest.approx(expected)


def test_a_malformed_usage_file_is_named_and_leaves_that_value_unknown(fake_host):
    node = reference_node(fake_host)
    fake_host.write(f"sys/fs/cgroup/{node.pod(NODE_EXPORTER).cgroup_path}/memory.current", "max")

    usage = pod_usage.read(fake_host.paths)

    assert usage.pods[NODE_EXPORTER.uid].memory_bytes is None
    assert "memory.current: expected a number of bytes, got 'max'" in usage.problems[NODE_EXPORTER.uid]


def test_without_kubepods_the_source_is_down(fake_host: FakeHost):
    add_topology(fake_host, sockets=1, cores_per_socket=1, threads_per_core=1)
    with pytest.raises(SourceUnavailable, match="no kubepods cgroup"):
        pod_usage.read(fake_host.paths)
