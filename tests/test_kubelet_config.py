"""The kubelet_config source: RKE2 and kubeadm layouts, the kubelet's precedence (file < drop-ins < flags), and
malformed configuration reported in one line naming the file and the key."""

from __future__ import annotations

import pytest
from fakehost.kubelet import RKE2_CONFIG, RKE2_DROPIN_DIR, write_kubelet_config
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import HostReader, read_host
from numawatch.sources import kubelet_config
from numawatch.sources.kubelet_config import (
    Flag,
    apply_flags,
    merge_patch,
    parse_env_args,
    parse_flag_words,
    parse_kubelet_arg,
    parse_kubelet_configuration,
    parse_reserved_memory_flag,
    rke2_kubelet_args,
)

GiB = 1 << 30
HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
PROFILE = {
    "cpu_manager_policy": "static",
    "topology_manager_policy": "single-numa-node",
    "topology_manager_scope": "pod",
    "memory_manager_policy": "Static",
    "reserved_cpus": "0-1,64-65",
    "reserved_memory": {0: {"memory": "2Gi"}, 1: {"memory": 2 * GiB}},
    "cpu_manager_policy_options": {"full-pcpus-only": "true"},
}


def _assert_profile(config):
    assert config.cpu_manager_policy == "static"
    assert config.topology_manager_policy == "single-numa-node"
    assert config.topology_manager_scope == "pod"
    assert config.memory_manager_policy == "Static"
    assert config.reserved_cpus == frozenset({0, 1, 64, 65})
    assert config.reserved_memory == {0: {"memory": 2 * GiB}, 1: {"memory": 2 * GiB}}
    assert config.cpu_manager_policy_options == {"full-pcpus-only": "true"}


# --------------------------------------------------------------------------------------------------- flavours
def test_no_configuration_makes_the_source_unavailable(fake_host):
    with pytest.raises(SourceUnavailable, match="no kubelet configuration found under"):
        kubelet_config.read(fake_host.paths)


@pytest.mark.parametrize("flavor", ["rke2", "kubeadm"])
@pytest.mark.parametrize("as_flags", [True, False])
def test_the_reference_profile_reads_back_in_every_layout(fake_host, flavor, as_flags):
    write_kubelet_config(fake_host, flavor, as_flags=as_flags, **PROFILE)
    config = kubelet_config.read(fake_host.paths)
    assert config.flavor == flavor
    _assert_profile(config)
    assert {"cpuManagerPolicy", "reservedSystemCPUs", "reservedMemory", "topologyManagerScope"} <= config.explicit
    assert "cgroupDriver" in config.explicit


def test_defaults_are_the_kubelets_when_nothing_is_set(fake_host):
    write_kubelet_config(fake_host, "rke2", rke2_defaults=False)
    config = kubelet_config.read(fake_host.paths)
    assert (config.cpu_manager_policy, config.topology_manager_policy) == ("none", "none")
    assert (config.topology_manager_scope, config.memory_manager_policy) == ("container", "None")
    assert (config.reserved_cpus, dict(config.reserved_memory)) == (None, {})
    assert config.explicit == frozenset()
    assert config.files == ()


def test_rke2_files_are_recorded_in_the_order_applied(fake_host):
    write_kubelet_config(fake_host, "rke2", cpu_manager_policy="static")
    config = kubelet_config.read(fake_host.paths)
    assert config.files == (
        "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf",
        "/etc/rancher/rke2/config.yaml",
    )


def test_the_rke2_directory_wins_over_a_kubeadm_file(fake_host):
    write_kubelet_config(fake_host, "kubeadm", cpu_manager_policy="none")
    write_kubelet_config(fake_host, "rke2", cpu_manager_policy="static")
    assert kubelet_config.read(fake_host.paths).flavor == "rke2"


# --------------------------------------------------------------------------------------------------- RKE2 merging
def test_rke2_dropins_replace_or_append_kubelet_args_in_lexical_order(fake_host):
    fake_host.write(RKE2_CONFIG, "kubelet-arg:\n  - cpu-manager-policy=none\n  - reserved-cpus=0\n")
    fake_host.write(
        "etc/rancher/rke2/config.yaml.d/20-topology.yaml", "kubelet-arg+:\n  - topology-manager-scope=pod\n"
    )
    fake_host.write(
        "etc/rancher/rke2/config.yaml.d/10-cpu.yaml",
        "kubelet-arg:\n  - cpu-manager-policy=static\n  - reserved-cpus=0-1\n",
    )
    fake_host.write(
        "etc/rancher/rke2/config.yaml.d/30-single.yml", "kubelet-arg+: topology-manager-policy=restricted\n"
    )
    fake_host.write("etc/rancher/rke2/config.yaml.d/README", "kubelet-arg: [cpu-manager-policy=ignored]\n")
    config = kubelet_config.read(fake_host.paths)
    assert config.cpu_manager_policy == "static"
    assert config.reserved_cpus == frozenset({0, 1})
    assert config.topology_manager_scope == "pod"
    assert config.topology_manager_policy == "restricted"
    assert config.files == (
        "/etc/rancher/rke2/config.yaml.d/10-cpu.yaml",
        "/etc/rancher/rke2/config.yaml.d/20-topology.yaml",
        "/etc/rancher/rke2/config.yaml.d/30-single.yml",
    )


def test_rke2_append_in_the_same_file_adds_to_the_list():
    items, data_dir = rke2_kubelet_args(
        [("a.yaml", {"kubelet-arg": ["x=1"], "kubelet-arg+": ["y=2"]}), ("b.yaml", {"kubelet-arg+": "z=3"})]
    )
    assert items == [("a.yaml", "x=1"), ("a.yaml", "y=2"), ("b.yaml", "z=3")]
    assert data_dir is None


def test_rke2_config_file_dropins_and_flags_follow_the_kubelets_precedence(fake_host):
    fake_host.write(
        "etc/kubernetes/numa.yaml",
        HEADER + "cpuManagerPolicy: none\ntopologyManagerPolicy: best-effort\nsystemReserved:\n  cpu: 500m\n"
        "  memory: 1Gi\nreservedMemory:\n  - numaNode: 0\n    limits:\n      memory: 1Gi\n",
    )
    fake_host.write(
        f"{RKE2_DROPIN_DIR}/50-numa.conf",
        HEADER + "topologyManagerPolicy: single-numa-node\nsystemReserved:\n  memory: 2Gi\n"
        "reservedMemory:\n  - numaNode: 1\n    limits:\n      memory: 3Gi\n",
    )
    fake_host.write(f"{RKE2_DROPIN_DIR}/00-rke2-defaults.conf", HEADER + "cgroupDriver: systemd\n")
    fake_host.write(f"{RKE2_DROPIN_DIR}/60-not-a-conf.yaml", HEADER + "cpuManagerPolicy: ignored\n")
    fake_host.write(RKE2_CONFIG, "kubelet-arg:\n  - config=/etc/kubernetes/numa.yaml\n  - cpu-manager-policy=static\n")
    config = kubelet_config.read(fake_host.paths)
    assert config.cpu_manager_policy == "static"  # flag over file
    assert config.topology_manager_policy == "single-numa-node"  # drop-in over file
    assert config.system_reserved == {"cpu": "500m", "memory": "2Gi"}  # maps merge
    assert config.reserved_memory == {1: {"memory": 3 * GiB}}  # lists are replaced
    assert "cgroupDriver" in config.explicit  # the defaults drop-in
    assert config.files == (
        "/etc/kubernetes/numa.yaml",
        "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf",
        "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/50-numa.conf",
        "/etc/rancher/rke2/config.yaml",
    )


def test_rke2_config_flag_naming_a_missing_file_makes_the_source_unavailable(fake_host):
    fake_host.write(RKE2_CONFIG, "kubelet-arg: [config=/etc/kubernetes/gone.yaml]\n")
    with pytest.raises(SourceUnavailable, match=r"/etc/kubernetes/gone\.yaml"):
        kubelet_config.read(fake_host.paths)


def test_rke2_config_dir_flag_replaces_rke2s_own_dropin_dir(fake_host):
    fake_host.write(f"{RKE2_DROPIN_DIR}/50-x.conf", HEADER + "cpuManagerPolicy: none\n")
    fake_host.write("etc/kubelet.d/10-y.conf", HEADER + "cpuManagerPolicy: static\n")
    fake_host.write(RKE2_CONFIG, "kubelet-arg: [config-dir=/etc/kubelet.d]\n")
    config = kubelet_config.read(fake_host.paths)
    assert config.cpu_manager_policy == "static"
    assert config.files == ("/etc/kubelet.d/10-y.conf", "/etc/rancher/rke2/config.yaml")


def test_rke2_data_dir_moves_the_dropin_dir(fake_host):
    fake_host.write("data/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf", HEADER + "cpuManagerPolicy: static\n")
    fake_host.write(RKE2_CONFIG, "data-dir: /data/rke2\n")
    assert kubelet_config.read(fake_host.paths).cpu_manager_policy == "static"


def test_rke2_quoted_values_are_tolerated_and_reported(fake_host):
    write_kubelet_config(fake_host, "rke2", extra_args=('cpu-manager-policy="static"', "reserved-cpus='0-1'"))
    config = kubelet_config.read(fake_host.paths)
    assert config.cpu_manager_policy == "static"
    assert config.reserved_cpus == frozenset({0, 1})
    assert len(config.warnings) == 2
    assert config.warnings[0].startswith("/etc/rancher/rke2/config.yaml: kubelet-arg 'cpu-manager-policy=\"static\"'")
    assert "write cpu-manager-policy=static" in config.warnings[0]


def test_kubelet_arg_names_lose_dashes_and_append_markers():
    assert parse_kubelet_arg("--cpu-manager-policy=static", "f")[0] == Flag(
        "cpu-manager-policy", "static", "f", "kubelet-arg"
    )
    assert parse_kubelet_arg("system-reserved+=cpu=1", "f")[0].name == "system-reserved"
    assert parse_kubelet_arg("fail-swap-on", "f")[0].value == "true"
    assert parse_kubelet_arg("cpu-manager-policy=static", "f")[1] is None


def test_a_kubelet_arg_item_written_as_a_mapping_is_malformed(fake_host):
    fake_host.write(RKE2_CONFIG, "kubelet-arg:\n  - cpu-manager-policy: static\n")
    with pytest.raises(MalformedFile) as error:
        kubelet_config.read(fake_host.paths)
    assert str(error.value) == (
        "/etc/rancher/rke2/config.yaml: kubelet-arg[0]: expected a 'flag=value' string, got a mapping "
        "(write it as 'cpu-manager-policy=static')"
    )


# --------------------------------------------------------------------------------------------------- kubeadm
def test_kubeadm_flags_override_the_config_file(fake_host):
    fake_host.write(
        "var/lib/kubelet/config.yaml",
        HEADER + "cpuManagerPolicy: none\ntopologyManagerPolicy: best-effort\nreservedSystemCPUs: 0-3\n"
        "kubeReserved:\n  cpu: '1'\n  memory: 1Gi\ncgroupDriver: systemd\n",
    )
    fake_host.write(
        "var/lib/kubelet/kubeadm-flags.env",
        'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock '
        '--cpu-manager-policy static --kube-reserved=memory=2Gi --kube-reserved=pid=100"',
    )
    fake_host.write("etc/default/kubelet", "KUBELET_EXTRA_ARGS=--reserved-cpus=0-1 --root-dir=/data/kubelet\n")
    config = kubelet_config.read(fake_host.paths)
    assert config.flavor == "kubeadm"
    assert config.cpu_manager_policy == "static"
    assert config.topology_manager_policy == "best-effort"
    assert config.reserved_cpus == frozenset({0, 1})  # EXTRA_ARGS come after the kubeadm flags
    assert config.kube_reserved == {"memory": "2Gi", "pid": "100"}  # a map flag replaces the file's map
    assert config.root_dir == "/data/kubelet"
    assert config.files == (
        "/var/lib/kubelet/config.yaml",
        "/var/lib/kubelet/kubeadm-flags.env",
        "/etc/default/kubelet",
    )
    assert "topologyManagerPolicy" in config.explicit
    assert "memoryManagerPolicy" not in config.explicit


def test_kubeadm_config_flag_and_config_dir_dropins(fake_host):
    fake_host.write("etc/kubernetes/kubelet.yaml", HEADER + "cpuManagerPolicy: static\nmemoryManagerPolicy: None\n")
    fake_host.write("etc/kubernetes/kubelet.conf.d/20-b.conf", HEADER + "memoryManagerPolicy: Static\n")
    fake_host.write(
        "etc/kubernetes/kubelet.conf.d/10-a.conf", HEADER + "memoryManagerPolicy: None\ncpuManagerPolicy:\n"
    )
    fake_host.write(
        "etc/sysconfig/kubelet",
        "# RHEL\nKUBELET_EXTRA_ARGS='--config=/etc/kubernetes/kubelet.yaml"
        " --config-dir /etc/kubernetes/kubelet.conf.d'\n",
    )
    fake_host.write("var/lib/kubelet/kubeadm-flags.env", "KUBELET_KUBEADM_ARGS=\n")
    config = kubelet_config.read(fake_host.paths)
    assert config.memory_manager_policy == "Static"
    assert config.cpu_manager_policy == "none"  # a null in a drop-in deletes the field (merge patch)
    assert config.files[0] == "/etc/kubernetes/kubelet.yaml"
    assert config.files[1:3] == (
        "/etc/kubernetes/kubelet.conf.d/10-a.conf",
        "/etc/kubernetes/kubelet.conf.d/20-b.conf",
    )


def test_repeated_reserved_memory_flags_accumulate_and_replace_the_file(fake_host):
    fake_host.write(
        "var/lib/kubelet/config.yaml",
        HEADER
        + "reservedMemory:\n  - numaNode: 0\n    limits: {memory: 8Gi}\n  - numaNode: 2\n    limits: {memory: 1Gi}\n",
    )
    fake_host.write(
        "var/lib/kubelet/kubeadm-flags.env",
        "KUBELET_KUBEADM_ARGS=\"--reserved-memory=0:memory=1Gi,hugepages-1Gi=2Gi --reserved-memory '1:memory=2Gi'\"",
    )
    config = kubelet_config.read(fake_host.paths)
    assert config.reserved_memory == {0: {"memory": GiB, "hugepages-1Gi": 2 * GiB}, 1: {"memory": 2 * GiB}}


# --------------------------------------------------------------------------------------------------- malformed
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpuManagerPolicy: [static\n", "invalid YAML"),
        ("- cpuManagerPolicy: static\n", "expected a mapping at the top level, got a list"),
        ("systemReserved:\n  - cpu=1\n", "systemReserved: expected a mapping, got a list"),
        ("systemReserved:\n  cpu: 1\n", "systemReserved.cpu: expected a string, got a number 1"),
        ("cpuManagerPolicy: true\n", "cpuManagerPolicy: expected a string, got a boolean"),
        ("reservedSystemCPUs: 0-1,x\n", "reservedSystemCPUs: bad element 'x'"),
        ("reservedSystemCPUs: 0\n", "reservedSystemCPUs: expected a string, got a number"),
        ("reservedMemory:\n  numaNode: 0\n", "reservedMemory: expected a list, got a mapping"),
        ("reservedMemory:\n  - numaNode: '0'\n    limits: {memory: 1Gi}\n", "reservedMemory[0].numaNode"),
        ("reservedMemory:\n  - numaNode: 0\n    limits: {memory: lots}\n", "reservedMemory[0].limits.memory"),
        ("reservedMemory:\n  - numaNode: 0\n    limits: {cpu: 1}\n", "unknown memory type 'cpu'"),
        ("reservedMemory:\n  - numaNode: 0\n", "reservedMemory[0].limits: expected a mapping, got null"),
    ],
)
def test_malformed_kubelet_configuration_names_the_file_and_key(fake_host, text, message):
    fake_host.write("var/lib/kubelet/config.yaml", text)
    with pytest.raises(MalformedFile) as error:
        kubelet_config.read(fake_host.paths)
    assert str(error.value).startswith("/var/lib/kubelet/config.yaml: ")
    assert message in str(error.value)


def test_bad_yaml_takes_the_source_down_with_a_one_line_reason(fake_host):
    fake_host.write(RKE2_CONFIG, "kubelet-arg:\n  - cpu-manager-policy=static\n bad: [indent\n")
    host = read_host(fake_host.paths, [kubelet_config.SOURCE])
    status = host.statuses["kubelet_config"]
    assert not status.up
    assert status.reason.startswith("/etc/rancher/rke2/config.yaml: invalid YAML:")
    assert "line 3" in status.reason
    assert "\n" not in status.reason


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("reserved-cpus=0-1,64-", "kubelet-arg reserved-cpus: bad element"),
        ("reserved-memory=0=memory:1Gi", "kubelet-arg reserved-memory"),
        ("reserved-memory=x:memory=1Gi", "NUMA node 'x' is not a number"),
        ("reserved-memory=0:memory=1Gb", "unknown suffix"),
        ("system-reserved=cpu", "kubelet-arg system-reserved: malformed pair 'cpu'"),
    ],
)
def test_bad_flag_values_name_the_file_and_flag(fake_host, arg, message):
    write_kubelet_config(fake_host, "rke2", extra_args=(arg,))
    with pytest.raises(MalformedFile) as error:
        kubelet_config.read(fake_host.paths)
    assert str(error.value).startswith("/etc/rancher/rke2/config.yaml: ")
    assert message in str(error.value)


def test_unbalanced_quotes_in_an_environment_file_are_malformed():
    with pytest.raises(MalformedFile, match="KUBELET_EXTRA_ARGS: No closing quotation"):
        parse_env_args('KUBELET_EXTRA_ARGS="--a=\'b"', "KUBELET_EXTRA_ARGS", "/etc/default/kubelet")


# --------------------------------------------------------------------------------------------------- small parsers
def test_env_args_take_the_last_assignment_and_ignore_comments():
    text = "# comment\nexport KUBELET_EXTRA_ARGS=--a=1\nOTHER=--b=2\nKUBELET_EXTRA_ARGS='--c=3 --d 4'\n"
    assert parse_env_args(text, "KUBELET_EXTRA_ARGS", "f") == ["--c=3", "--d", "4"]
    assert parse_env_args("", "KUBELET_EXTRA_ARGS", "f") == []


def test_flag_words_take_values_after_a_space_and_default_booleans_to_true():
    flags = parse_flag_words(["--a=1", "--b", "2", "--fail-swap-on", "--c", "stray"], "f", "X")
    assert [(f.name, f.value) for f in flags] == [("a", "1"), ("b", "2"), ("fail-swap-on", "true"), ("c", "stray")]
    assert [(f.name, f.value) for f in parse_flag_words(["--x"], "f", "X")] == [("x", "true")]


def test_reserved_memory_flag_merges_resources_of_one_node():
    flag = Flag("reserved-memory", "0:memory=1Gi;0:hugepages-2Mi=512Mi; 1:memory=2048Mi", "f", "--")
    assert parse_reserved_memory_flag(flag) == {0: {"memory": GiB, "hugepages-2Mi": 512 << 20}, 1: {"memory": 2 * GiB}}


def test_map_flags_replace_the_file_then_merge_and_empty_reserved_memory_clears():
    base = {
        "systemReserved": {"cpu": "1", "memory": "1Gi"},
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": 1}}],
    }
    flags = [
        Flag("system-reserved", "memory=2Gi", "f", "--"),
        Flag("system-reserved", "pid=10", "f", "--"),
        Flag("reserved-memory", "", "f", "--"),
        Flag("unknown-flag", "x", "f", "--"),
    ]
    merged, explicit = apply_flags(base, flags)
    assert merged["systemReserved"] == {"memory": "2Gi", "pid": "10"}
    assert merged["reservedMemory"] == []
    assert explicit == {"systemReserved", "reservedMemory"}


def test_merge_patch_merges_maps_replaces_lists_and_deletes_nulls():
    base = {"a": {"x": 1, "y": 2}, "l": [1, 2], "gone": 1}
    assert merge_patch(base, {"a": {"y": 3}, "l": [9], "gone": None}) == {"a": {"x": 1, "y": 3}, "l": [9]}


def test_configuration_fields_are_case_sensitive_like_the_kubelets_decoder():
    document = parse_kubelet_configuration("cpumanagerpolicy: static\n", "f")
    assert document == {"cpumanagerpolicy": "static"}


# --------------------------------------------------------------------------------------------------- fingerprint
def test_fingerprint_changes_with_a_new_dropin_and_with_the_config_flag_target(fake_host):
    fake_host.write("etc/kubernetes/numa.yaml", HEADER + "cpuManagerPolicy: none\n")
    fake_host.write(RKE2_CONFIG, 'kubelet-arg:\n  - "config=/etc/kubernetes/numa.yaml"\n')
    first = kubelet_config.fingerprint(fake_host.paths)
    assert kubelet_config.fingerprint(fake_host.paths) == first
    fake_host.write(f"{RKE2_DROPIN_DIR}/50-x.conf", HEADER + "cpuManagerPolicy: static\n")
    second = kubelet_config.fingerprint(fake_host.paths)
    assert second != first
    fake_host.write("etc/kubernetes/numa.yaml", HEADER + "cpuManagerPolicy: static\ntopologyManagerScope: pod\n")
    assert kubelet_config.fingerprint(fake_host.paths) != second


def test_host_reader_reuses_the_configuration_until_a_file_changes(fake_host):
    write_kubelet_config(fake_host, "rke2", cpu_manager_policy="static")
    reader = HostReader(fake_host.paths, [kubelet_config.SOURCE])
    assert not reader.read().statuses["kubelet_config"].cached
    assert reader.read().statuses["kubelet_config"].cached
    write_kubelet_config(fake_host, "rke2", cpu_manager_policy="none", extra_args=("topology-manager-scope=pod",))
    host = reader.read()
    assert not host.statuses["kubelet_config"].cached
    assert host.kubelet_config.cpu_manager_policy == "none"
