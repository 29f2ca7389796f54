"""Node conditions through node-problem-detector: ``numawatch check --format npd --group <condition>``.

NPD's custom-plugin protocol (pkg/custompluginmonitor in kubernetes/node-problem-detector): NPD runs the rule's
``path`` with its ``args``, reads at most 4 KiB of stdout, trims the white space around it (Go's
strings.TrimSpace), cuts it at ``max_output_length`` bytes (80 by default) and uses it as the condition's message;
exit 0 is OK (condition False), 1 NonOK (True), anything else Unknown. A permanent rule needs a default condition of
its type, a rule's timeout may not exceed the global one, and the path must exist. ``npd_result`` below does what
NPD does with a finished plugin; the tests run every rule of deploy/npd/numawatch-plugin-monitor.json as NPD would,
the real ``numawatch check`` process on fake hosts that are clean, drifted and unreadable.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import unprivileged
from fakehost import FakeHost
from fakehost.kernel import add_kernel_settings
from fakehost.reference import GPU_IRQ_BASE, ONLINE, reference_node
from kustomize import DEPLOY, find, render
from numawatch import cli, report
from numawatch.checks import Finding, registry
from numawatch.paths import Paths

CONFIG_PATH = DEPLOY / "npd/numawatch-plugin-monitor.json"
BASE_INTENT = DEPLOY / "base/intent.yaml"
NPD_STDOUT_LIMIT = 4096  # maxCustomPluginBufferBytes
NPD_DEFAULT_MAX_OUTPUT = 80
# Go's time.ParseDuration: a sequence of decimal numbers with units.
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
CAMEL_CASE = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def npd_config() -> dict:
    return json.loads(CONFIG_PATH.read_text())


@dataclass(frozen=True)
class NpdResult:
    status: str  # "OK", "NonOK", "Unknown"
    condition_status: str  # what NPD sets the node condition to: False, True, Unknown
    message: str


def npd_result(completed: subprocess.CompletedProcess[bytes], max_output_length: int) -> NpdResult:
    """What NPD makes of a finished plugin (plugin.go's run() and toConditionStatus())."""
    output = completed.stdout[:NPD_STDOUT_LIMIT].decode("utf-8", "replace").strip()
    message = output.encode()[:max_output_length].decode("utf-8", "replace")
    status = {0: "OK", 1: "NonOK"}.get(completed.returncode, "Unknown")
    return NpdResult(status, {"OK": "False", "NonOK": "True"}.get(status, "Unknown"), message)


def numawatch_command() -> list[str]:
    script = Path(sys.executable).parent / "numawatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "numawatch"]


def run_rule(rule: dict, host_root: Path) -> subprocess.CompletedProcess[bytes]:
    """One rule as NPD runs it, with the DaemonSet's paths moved to the test's: the host root and the intent file
    (the base's ConfigMap content) instead of /host and the ConfigMap mount, numawatch from this environment."""
    args = []
    for arg in rule["args"]:
        if arg.startswith("--host-root="):
            arg = f"--host-root={host_root}"
        elif arg.startswith("--intent="):
            arg = f"--intent={BASE_INTENT}"
        args.append(arg)
    return subprocess.run([*numawatch_command(), *args], capture_output=True, timeout=120)


def assert_npd_line(completed: subprocess.CompletedProcess[bytes], max_output_length: int) -> NpdResult:
    """The plugin's stdout is one printable-ASCII line NPD keeps whole; returns what NPD makes of it."""
    text = completed.stdout.decode("ascii")  # raises on anything but ASCII
    assert text.endswith("\n") and text.count("\n") == 1, text
    line = text[:-1]
    assert 0 < len(line) <= max_output_length, line
    assert all(" " <= char <= "~" for char in line), line
    assert line == line.strip(), line
    result = npd_result(completed, max_output_length)
    assert result.message == line  # nothing is lost to NPD's cut
    return result


# --- the groups ----------------------------------------------------------------------------------------------


def test_every_check_belongs_to_exactly_one_node_condition():
    grouped = [check for group in report.NODE_CONDITIONS for check in group.checks]
    assert sorted(grouped) == sorted(check.id for check in registry.CHECKS)
    assert len(grouped) == len(set(grouped))


def test_condition_types_and_reasons_are_camel_case_and_unique():
    names = [name for g in report.NODE_CONDITIONS for name in (g.condition, g.reason, g.healthy_reason)]
    assert all(CAMEL_CASE.match(name) for name in names), names
    assert len(names) == len(set(names))
    # none shadows a condition the kubelet or NPD's own monitors set
    assert not {g.condition for g in report.NODE_CONDITIONS} & {
        "Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable", "KernelDeadlock",
        "ReadonlyFilesystem", "FrequentKubeletRestart", "FrequentDockerRestart", "FrequentContainerdRestart",
    }
    for group in report.NODE_CONDITIONS:
        assert report.npd_line(group.healthy_message) == group.healthy_message


# --- the plugin configuration: what NPD's ApplyConfiguration() and Validate() require -----------------------


def test_the_plugin_config_is_what_npd_accepts():
    config = npd_config()
    assert config["plugin"] == "custom"
    plugin = config["pluginConfig"]
    assert plugin["max_output_length"] == report.NPD_MAX_OUTPUT == NPD_DEFAULT_MAX_OUTPUT
    for duration in (plugin["invoke_interval"], plugin["timeout"], *(r["timeout"] for r in config["rules"])):
        assert GO_DURATION.match(duration), duration
    global_timeout = float(plugin["timeout"].removesuffix("s"))
    defaults = {condition["type"] for condition in config["conditions"]}
    for rule in config["rules"]:
        assert rule["type"] == "permanent"
        assert rule["condition"] in defaults  # "Permanent problem ... does not have preset default condition"
        assert float(rule["timeout"].removesuffix("s")) <= global_timeout  # "plugin timeout is greater than global"
        assert rule["path"] == "/usr/local/bin/numawatch"  # where deploy/Containerfile installs it
    # one rule per condition: two rules would overwrite each other's status every round
    assert sorted(rule["condition"] for rule in config["rules"]) == sorted(defaults)
    assert [c["type"] for c in config["conditions"]] == [g.condition for g in report.NODE_CONDITIONS]
    # the sum of the rules' timeouts (concurrency 1: one after the other) fits in one interval
    assert plugin["concurrency"] == 1
    assert sum(float(r["timeout"].removesuffix("s")) for r in config["rules"]) <= float(
        plugin["invoke_interval"].removesuffix("s"))


def test_each_rule_runs_its_own_condition_as_one_npd_line():
    by_name = report.CONDITION_BY_NAME
    for rule in npd_config()["rules"]:
        args = cli.build_parser().parse_args(rule["args"])
        group = by_name[rule["condition"]]
        assert (args.command, args.format, args.groups) == ("check", "npd", [group.condition])
        assert rule["reason"] == group.reason
        assert args.window == group.window  # the rate checks of CPUIsolationDrift need two readings
        assert args.no_nvml is not group.nvml
        assert args.host_root == "/host"


def test_the_daemonset_gives_npd_the_config_the_host_root_and_the_intent_its_rules_name():
    objects = render("node-problem-detector")
    daemonset = find(objects, "DaemonSet", "numawatch-npd")
    spec = daemonset["spec"]["template"]["spec"]
    (main,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    flag = next(a for a in main["args"] if a.startswith("--config.custom-plugin-monitor="))
    directory, _, key = flag.split("=", 1)[1].rpartition("/")
    configmap = find(objects, "ConfigMap", volumes[mounts[directory]["name"]]["configMap"]["name"])
    assert json.loads(configmap["data"][key]) == npd_config()
    rules = npd_config()["rules"]
    intent = {a.split("=", 1)[1] for r in rules for a in r["args"] if a.startswith("--intent=")}
    (intent_path,) = intent
    assert intent_path.rpartition("/")[0] in mounts
    assert "/host" in mounts
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in main["env"]


def test_npd_is_bound_to_its_built_in_role_and_nothing_else():
    objects = render("node-problem-detector")
    spec = find(objects, "DaemonSet", "numawatch-npd")["spec"]["template"]["spec"]
    (binding,) = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "system:node-problem-detector"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": "numawatch"}]
    assert spec["automountServiceAccountToken"] is True  # NPD patches the node's status with it
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "Role")]  # no role of our own: NPD's only


# --- the protocol, on fake hosts -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> dict[str, Path]:
    """A clean reference node, the same node drifted in every group, and one whose topology cannot be read."""
    clean = FakeHost(tmp_path_factory.mktemp("clean"))
    reference_node(clean)
    drifted = FakeHost(tmp_path_factory.mktemp("drifted"))
    node = reference_node(drifted)
    node.set_topology_manager_policy("best-effort")  # KubeletPolicyDrift
    node.split_across_nodes()  # NUMAPinningDrift
    node.hide_gpu_numa_node()  # NUMATopologyInconsistent
    node.write_kubelet_config(node_taints=None)  # GPUNodeNotDedicated: the GPU taint is not declared
    node.fossilise_cpu_state()  # KubeletStateStale (last: the two above rewrite the checkpoint)
    drifted.write(f"proc/irq/{GPU_IRQ_BASE}/smp_affinity_list", "3")  # CPUIsolationDrift: a GPU IRQ on CPU 3
    drifted.write(f"proc/irq/{GPU_IRQ_BASE}/effective_affinity_list", "3")
    add_kernel_settings(drifted, numa_balancing=1, governors="performance", cpus=sorted(ONLINE))  # HostTuningDrift
    unreadable = FakeHost(tmp_path_factory.mktemp("unreadable"))
    reference_node(unreadable)
    unreadable.remove("sys/devices/system/cpu")
    return {"clean": clean.root, "drifted": drifted.root, "unreadable": unreadable.root}


RULES = {rule["condition"]: rule for rule in npd_config()["rules"]}


@pytest.mark.parametrize("condition", list(RULES))
@pytest.mark.slow
def test_on_a_clean_node_every_condition_is_false(hosts, condition):
    completed = run_rule(RULES[condition], hosts["clean"])
    result = assert_npd_line(completed, npd_config()["pluginConfig"]["max_output_length"])
    assert (result.status, result.condition_status) == ("OK", "False"), completed.stderr
    assert result.message.startswith("clean: no findings, ")


@pytest.mark.parametrize("condition", list(RULES))
@pytest.mark.slow
def test_on_a_drifted_node_every_condition_is_true_and_names_a_check_of_its_group(hosts, condition):
    completed = run_rule(RULES[condition], hosts["drifted"])
    result = assert_npd_line(completed, npd_config()["pluginConfig"]["max_output_length"])
    assert (result.status, result.condition_status) == ("NonOK", "True"), completed.stderr
    count, _, rest = result.message.partition(" finding")
    assert int(count) >= 1
    named = rest.split(": ", 1)[1].split()[0]
    assert named in report.CONDITION_BY_NAME[condition].checks
    assert str(hosts["drifted"]) not in result.message  # paths are shown as on the node, not under the host root


@pytest.mark.parametrize("condition", list(RULES))
@pytest.mark.slow
def test_where_the_topology_cannot_be_read_every_condition_is_unknown_and_says_why(hosts, condition):
    completed = run_rule(RULES[condition], hosts["unreadable"])
    result = assert_npd_line(completed, npd_config()["pluginConfig"]["max_output_length"])
    assert (result.status, result.condition_status) == ("Unknown", "Unknown")
    assert result.message == "unknown: topology source down: /sys/devices/system/cpu does not exist"
    # the whole reason goes to stderr, which NPD logs
    (line,) = completed.stderr.decode().splitlines()
    assert line.startswith("numawatch: unknown: ")


@pytest.mark.slow
def test_a_condition_whose_inputs_are_missing_is_unknown_naming_the_source(hosts, tmp_path):
    node = FakeHost(tmp_path / "host")
    reference_node(node)
    node.remove("var/lib/kubelet")
    completed = run_rule(RULES["KubeletStateStale"], node.root)
    result = assert_npd_line(completed, NPD_DEFAULT_MAX_OUTPUT)
    assert result.condition_status == "Unknown"
    assert result.message == "unknown: kubelet_state source down: no kubelet directory at /var/lib/kubelet"


@pytest.mark.slow
def test_a_host_root_numawatch_may_not_read_is_unknown_with_the_reason_on_stdout(hosts, tmp_path):
    """The unreadable host as NPD would meet it: numawatch runs as a user who may not enter the host root."""
    if unprivileged.available() is not None:
        pytest.skip(unprivileged.available())
    # The host root is not even reachable: the test's temporary directories are 0700 root.
    locked = tmp_path / "locked"
    shutil.copytree(hosts["clean"], locked, symlinks=True)
    rule = RULES["HostTuningDrift"]
    args = [a if not a.startswith("--host-root=") else f"--host-root={locked}" for a in rule["args"]]
    args = [a for a in args if not a.startswith("--intent=")]
    completed = subprocess.run(unprivileged.as_nobody("-m", "numawatch", *args), capture_output=True, timeout=120)
    result = assert_npd_line(completed, NPD_DEFAULT_MAX_OUTPUT)
    assert result.condition_status == "Unknown"
    assert result.message == report.npd_line(f"unknown: numawatch cannot run: host root {locked} is not readable")
    assert result.message.startswith("unknown: numawatch cannot run: host root /")


# --- the command line ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_usage_error_under_format_npd_still_prints_one_line_on_stdout():
    completed = subprocess.run([*numawatch_command(), "check", "--format=npd", "--group", "NoSuchCondition"],
                               capture_output=True, timeout=60)
    result = assert_npd_line(completed, NPD_DEFAULT_MAX_OUTPUT)
    assert result.condition_status == "Unknown"
    assert result.message.startswith("unknown: numawatch cannot run: argument --group: invalid choice: ")
    plain = subprocess.run([*numawatch_command(), "check", "--group", "NoSuchCondition"], capture_output=True,
                           timeout=60)
    assert (plain.returncode, plain.stdout) == (2, b"")


def test_group_restricts_the_table_and_the_json_too(hosts):
    completed = subprocess.run(
        [*numawatch_command(), "--host-root", str(hosts["drifted"]), "--no-nvml", "check", "--format", "json",
         "--group", "KubeletStateStale", "--group", "HostTuningDrift"], capture_output=True, timeout=60)
    document = json.loads(completed.stdout)
    groups = report.CONDITION_BY_NAME
    wanted = {*groups["KubeletStateStale"].checks, *groups["HostTuningDrift"].checks}
    assert set(document["checks"]) == wanted
    assert {finding["check"] for finding in document["findings"]} == {"kubelet_state_stale", "kernel_numa_balancing"}
    assert completed.returncode == 1


def test_fit_refuses_the_npd_format_and_groups(hosts, capsys):
    root = str(hosts["clean"])
    assert cli.main(["--host-root", root, "check", "--fit", "cpu=1", "--format", "npd"]) == 2
    assert "--fit answers for one pod shape" in capsys.readouterr().err


# --- the line itself -----------------------------------------------------------------------------------------


def finding(check: str, **labels: str) -> Finding:
    return Finding(check=check, severity="critical", labels=labels, message="m", remediation="r")


def test_the_first_finding_is_shortened_so_the_count_and_the_rest_survive():
    long = finding("container_numa_split", namespace="inference", pod="p" * 200, container="server")
    text = report._npd_findings((long, finding("container_cpuset_drift"), finding("pod_not_guaranteed")), "/")
    assert len(text) == 80
    assert text.startswith("3 findings: container_numa_split inference/ppp")
    assert text.endswith("... (+2 more)")


def test_npd_line_is_ascii_one_line_without_the_host_root_and_cut_at_80():
    assert report.npd_line("  a\n\tb  c ") == "a b c"
    assert report.npd_line("caf\u00e9 \x1b[31m") == "caf? ?[31m"
    assert report.npd_line("no /host/var/lib/kubelet/x in /host", "/host") == "no /var/lib/kubelet/x in /host"
    assert report.npd_line("/var/lib/kubelet", "/") == "/var/lib/kubelet"
    cut = report.npd_line("x" * 200)
    assert len(cut) == 80 and cut.endswith("...")


def test_check_pins_itself_when_its_host_root_shows_the_live_procfs(tmp_path):
    """In node-problem-detector's pod (hostPID, / at /host) numawatch reads this very machine and must stay off the
    CPUs it protects; a fake tree is not this machine."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "proc").symlink_to("/proc")
    (live / "sys").symlink_to("/sys")
    fake = FakeHost(tmp_path / "fake")
    reference_node(fake)
    assert cli._procfs_shows_this_process(Paths.from_root(live))
    assert not cli._procfs_shows_this_process(Paths.from_root(fake.root))
    assert not cli._procfs_shows_this_process(Paths.from_root(tmp_path / "nothing"))
