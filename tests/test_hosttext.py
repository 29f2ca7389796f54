"""Values from host files never become label values, log text or messages unchecked.

Each field numawatch repeats is held to what the kernel or the kubelet can write there (hosttext.py); anything else
is reported as malformed, quoting only a short escaped excerpt, and never reaches a label. The hostile value below
carries an escape sequence, a newline and a marker: none of them may appear raw in ``/metrics`` or in a message.
"""

from __future__ import annotations

import json
import logging

import pytest
from fakehost.gpus import add_gpu
from fakehost.kernel import FakeIrq, add_irqs, add_kernel_settings
from fakehost.kubelet import write_device_checkpoint
from fakehost.reference import VLLM, reference_node
from fakehost.topology import add_topology
from numawatch import hosttext, metrics, report
from numawatch.checks import evaluate
from numawatch.errors import MalformedFile
from numawatch.host import read_host
from numawatch.intent import REFERENCE
from numawatch.model.kubelet import DeviceAssignment
from numawatch.sources import gpus_sysfs, interrupts, kernel, kubelet_config, names, topology

MARK = "HOSTILE7c2e"
HOSTILE = f"\x1b[31m{MARK}\nfake_metric 1"


def rendered(host) -> tuple[str, str]:
    """(/metrics, check's JSON) for the host."""
    evaluation = evaluate(read_host(host.paths), REFERENCE)
    return metrics.render(evaluation).decode(), report.render_json(evaluation, str(host.root))


def assert_not_repeated_raw(*texts: str) -> None:
    for text in texts:
        assert "\x1b" not in text and "\nfake_metric" not in text


# --------------------------------------------------------------------------------------------------- the helpers
def test_an_excerpt_is_short_escaped_and_says_it_was_cut():
    assert hosttext.excerpt("static") == "'static'"
    long = hosttext.excerpt("x" * 1000 + "\n")
    assert long == repr("x" * hosttext.EXCERPT_CHARS) + "..."
    assert hosttext.excerpt("\x1b[31m\n") == repr("\x1b[31m\n")
    assert hosttext.excerpt(b"\x00" * 100).startswith("b'\\x00")
    assert hosttext.excerpt(list(range(100))).endswith("...")


def test_shown_keeps_plain_text_and_escapes_the_rest():
    assert hosttext.shown("cpu-manager-policy=static") == "cpu-manager-policy=static"
    assert hosttext.shown("a\nb") == repr("a\nb")
    assert len(hosttext.shown("y" * 5000)) < 100


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (hosttext.k8s_label, ["inference", "vllm-0", "a"], ["Inference", "vllm_0", "-a", "a" * 64, "", HOSTILE]),
        (hosttext.k8s_subdomain, ["vllm-llama-0", "a.b-c.d"], ["A", "a..b", "a" * 254, ".a", HOSTILE]),
        (hosttext.pod_uid, ["7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57", "0" * 32],
         ["7F9C2A3E-5B1D-4C8E-9A0F-2D6B8E1C4A57", "pod1", "0" * 31, HOSTILE]),
    ],
)
def test_kubernetes_names_are_held_to_the_api_servers_formats(check, good, bad):
    for value in good:
        assert check(value, "name") == value
    for value in bad:
        with pytest.raises(ValueError) as raised:
            check(value, "name")
        assert "\x1b" not in str(raised.value) and "\n" not in str(raised.value)


def test_free_text_must_be_printable_and_short():
    assert hosttext.printable("NVIDIA H100 80GB HBM3", "model", 96) == "NVIDIA H100 80GB HBM3"
    assert hosttext.printable("eth\u00fc-TxRx-0", "name", 64)  # a renamed netdev: UTF-8 is what the kernel prints
    for value in ("a\tb", "a\nb", "\x1b[0m", "a\0"):
        with pytest.raises(ValueError, match="control characters"):
            hosttext.printable(value, "name", 64)
    with pytest.raises(ValueError, match="longer than 8"):
        hosttext.printable("123456789", "name", 8)


# --------------------------------------------------------------------------------------------------- the kernel
def test_a_governor_the_kernel_cannot_print_is_malformed_and_no_label(fake_host):
    layout = add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add_kernel_settings(fake_host, governors={0: "performance", 1: HOSTILE}, cpus=layout.online)
    settings = kernel.read(fake_host.paths)
    assert dict(settings.governors) == {0: "performance"}
    problem = settings.problems["cpufreq_governor"]
    assert "policy1/scaling_governor" in problem and "expected a governor name" in problem
    assert_not_repeated_raw(problem, *rendered(fake_host))
    assert MARK not in rendered(fake_host)[0]


def test_a_governor_longer_than_the_kernels_limit_is_malformed():
    assert kernel.parse_governor("x" * 15) == "x" * 15
    with pytest.raises(ValueError):
        kernel.parse_governor("x" * 16)


def test_a_thp_mode_the_kernel_cannot_print_is_malformed(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add_kernel_settings(fake_host)
    fake_host.write("sys/kernel/mm/transparent_hugepage/enabled", f"always [madvise] {HOSTILE}")
    settings = kernel.read(fake_host.paths)
    assert settings.thp_enabled is None
    assert "transparent_hugepage/enabled" in settings.problems["thp_enabled"]
    exposition, document = rendered(fake_host)
    assert_not_repeated_raw(settings.problems["thp_enabled"], exposition, document)
    assert MARK not in exposition


def test_an_isolcpus_flag_past_any_the_kernel_knows_is_a_problem_not_a_label(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1,
                 cmdline=f"isolcpus={'x' * 40},domain,2-3")  # fmt: skip
    isolation = topology.read(fake_host.paths).isolation
    assert isolation.isolcpus is None
    assert any("longer than 32 characters" in problem for problem in isolation.problems)


def test_a_long_bad_cpu_list_is_quoted_as_a_short_excerpt(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    fake_host.write("sys/devices/system/node/node0/cpulist", "0-1," + "x" * 100_000)
    with pytest.raises(MalformedFile) as raised:
        topology.read(fake_host.paths)
    assert len(str(raised.value)) < 400


# --------------------------------------------------------------------------------------------------- interrupts
def test_an_irq_name_with_control_characters_is_a_malformed_row_and_only_that_row(fake_host):
    """One action name with an ESC makes that row malformed, never the whole interrupts source."""
    layout = add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add_irqs(fake_host, sorted(layout.online), [FakeIrq(40, "eth0\x1b[31m", frozenset({0})),
                                                FakeIrq(41, "nvme0q1", frozenset({1}))])
    read = interrupts.read(fake_host.paths)

    bad, good = read.row("40"), read.row("41")
    assert bad is not None and good is not None
    assert (bad.name, bad.chip, bad.kind) == ("", "", "device")
    assert "row 40: name" in bad.problem and "control characters" in bad.problem
    assert "\x1b" not in bad.problem
    assert read.problems == (bad.problem,)
    assert (good.name, good.problem) == ("nvme0q1", "")
    assert read.row("LOC") is not None


def test_a_row_key_that_is_not_one_the_kernel_prints_is_refused(fake_host):
    text = "           CPU0\n  25:  1   PCI-MSI 1-edge  nvme0q1\nL\x1bOC:  5   Local timer interrupts\n"
    with pytest.raises(MalformedFile, match="bad row label"):
        interrupts.parse_interrupts(text.encode(), {0})


def test_an_irq_name_in_utf8_is_kept(fake_host):
    layout = add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1)
    add_irqs(fake_host, sorted(layout.online), [FakeIrq(40, "eth\u00fc-TxRx-0", frozenset({0}))])
    assert interrupts.read(fake_host.paths).row("40").name == "eth\u00fc-TxRx-0"


# --------------------------------------------------------------------------------------------------- names
def test_a_pod_name_the_api_server_would_refuse_never_becomes_a_label(fake_host, caplog):
    node = reference_node(fake_host)
    pod = next(iter(node.pods.values()))
    config = next(fake_host.root.glob(f"run/**/{pod.containers[0].container_id}/config.json"))
    spec = json.loads(config.read_text())
    spec["annotations"]["io.kubernetes.cri.sandbox-name"] = HOSTILE
    config.write_text(json.dumps(spec))
    with caplog.at_level(logging.WARNING):
        found = names.read(fake_host.paths)
    assert pod.containers[0].container_id not in found.containers
    warning = next(record.getMessage() for record in caplog.records if "pod name" in record.getMessage())
    assert str(config) in warning
    exposition, document = rendered(fake_host)
    assert_not_repeated_raw(warning, exposition, document)
    assert MARK not in exposition


def test_the_crio_sandbox_container_name_is_accepted():
    annotations = {names.CRIO_POD_UID: "7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57", names.CRIO_POD_NAME: "vllm-0",
                   names.CRIO_POD_NAMESPACE: "inference", names.CRIO_CONTAINER_NAME: "POD",
                   names.CRIO_TYPE: "sandbox"}  # fmt: skip
    identity = names.identity_from_annotations("ab" * 32, "crio", annotations)
    assert identity is not None and identity.container_name == "POD"


def test_pod_log_directories_of_another_shape_are_ignored():
    assert names.parse_pod_log_dir("inference_vllm-0_7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57") is not None
    assert names.parse_pod_log_dir(f"inference_{HOSTILE}_7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57") is None
    assert names.parse_pod_log_dir("inference_vllm-0_not-a-uid") is None


# --------------------------------------------------------------------------------------------------- kubelet
@pytest.mark.parametrize(
    ("field", "flag"),
    [("cpuManagerPolicy", "cpu-manager-policy"), ("topologyManagerPolicy", "topology-manager-policy"),
     ("topologyManagerScope", "topology-manager-scope"), ("memoryManagerPolicy", "memory-manager-policy"),
     ("cgroupDriver", "cgroup-driver")],
)  # fmt: skip
def test_a_policy_the_kubelet_would_refuse_is_malformed_in_a_file_and_in_a_flag(field, flag):
    header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    with pytest.raises(MalformedFile) as raised:
        kubelet_config.parse_kubelet_configuration(header + f"{field}: {json.dumps(HOSTILE)}\n", "/etc/k.yaml")
    assert "is not one of" in str(raised.value) and "\x1b" not in str(raised.value)
    allowed = sorted(kubelet_config.ALLOWED_VALUES[field])
    assert kubelet_config.parse_kubelet_configuration(header + f"{field}: {allowed[0]}\n", "/etc/k.yaml")
    flags = kubelet_config.parse_flag_words([f"--{flag}=Bogus"], "/etc/default/kubelet", "KUBELET_EXTRA_ARGS")
    with pytest.raises(MalformedFile, match="is not one of"):
        kubelet_config.apply_flags({}, flags)


def test_a_path_a_flag_names_must_be_printable(fake_host):
    reference_node(fake_host)
    fake_host.write("etc/rancher/rke2/config.yaml", "kubelet-arg:\n  - \"config=/etc/\\e[31mk.yaml\"\n")
    with pytest.raises(MalformedFile, match="control characters"):
        kubelet_config.read(fake_host.paths)


def test_a_checkpoint_policy_name_that_is_not_one_is_unparsable():
    from numawatch.sources import kubelet_state

    text = json.dumps({"policyName": HOSTILE, "defaultCpuSet": "0-3", "entries": {}, "checksum": 0})
    state, problem = kubelet_state.parse_cpu_manager_state(text, "/var/lib/kubelet/cpu_manager_state")
    assert state is None and problem is not None
    assert "policyName" in problem.detail and "\x1b" not in problem.detail


def test_a_device_id_no_plugin_registers_is_never_a_gpu_label(fake_host):
    reference_node(fake_host)
    entry = DeviceAssignment(VLLM.uid, VLLM.container.name, "nvidia.com/gpu", {0: (f"GPU-{HOSTILE}",)})
    write_device_checkpoint(fake_host, entries=[entry], registered={"nvidia.com/gpu": [f"GPU-{HOSTILE}"]})
    exposition, document = rendered(fake_host)
    assert MARK not in exposition
    assert_not_repeated_raw(exposition, document)


# --------------------------------------------------------------------------------------------------- GPUs
@pytest.mark.parametrize("line", [f"Model:           {HOSTILE.splitlines()[0]}", "GPU UUID:        GPU-not-a-uuid"])
def test_a_gpu_model_or_uuid_the_driver_cannot_print_is_malformed(fake_host, line):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    path = fake_host.path("proc/driver/nvidia/gpus/0000:18:00.0/information")
    key = line.split(":", 1)[0]
    rows = path.read_text().splitlines()
    path.write_text("".join((line if row.startswith(key) else row) + "\n" for row in rows))

    # A fault of that GPU: kept, with its UUID and model unknown and the file named, never repeated raw
    (gpu,) = gpus_sysfs.read(fake_host.paths).gpus

    assert (gpu.uuid, gpu.model, gpu.numa_node) == (None, None, 0)
    problem = gpu.problems["information"]
    assert problem.startswith(f"{path}: ") and "\x1b" not in problem


def test_a_pci_entry_of_another_shape_is_not_a_gpu(fake_host):
    add_gpu(fake_host, "0000:18:00.0", numa_node=0, local_cpus="0-7")
    fake_host.symlink(f"sys/bus/pci/devices/{MARK}", "../../../devices/pci0000:18/0000:18:00.0")
    assert [gpu.pci_address for gpu in gpus_sysfs.read(fake_host.paths).gpus] == ["0000:18:00.0"]
