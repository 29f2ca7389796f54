"""The ``numawatch`` command: flags, exit codes (0 clean, 1 findings, 2 could not run) and one-line errors."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.reference import reference_node
from fakehost.topology import add_topology
from numawatch import __version__, cli
from numawatch.checks import Check, registry
from numawatch.host import Host
from numawatch.intent import Intent

INVALID_INTENT = "kubelet:\n  cpuManagerPolicy: dynamic\n"


def numawatch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m numawatch`` as a user would; returns the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "numawatch", *args], capture_output=True, text=True, timeout=timeout
    )


def assert_one_line_error(stderr: str, *fragments: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "error" in lines[0]
    for fragment in fragments:
        assert fragment in lines[0]


class Recorder:
    """Checks installed in the registry for one test: one that fires while ``fire`` is set, and that records the
    host it was given."""

    def __init__(self) -> None:
        self.fire = False
        self.hosts: list[Host] = []

    def check(self) -> Check:
        def run(host: Host, intent: Intent):
            self.hosts.append(host)
            if not self.fire:
                return []
            return [check.finding(intent, {"namespace": "llm", "pod": "vllm-0", "container": "server"},
                                  "container spans NUMA nodes 0 and 1")]

        check = Check(id="container_numa_split", severity="critical", summary="", remediation="repin it", run=run)
        return check


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(registry, "CHECKS", (recorder.check(),))
    return recorder


@pytest.fixture
def topology_host(fake_host: FakeHost) -> FakeHost:
    """A host with a CPU topology and nothing else: a clean check there is "clean", not "unknown"."""
    add_topology(fake_host, sockets=1, cores_per_socket=2)
    return fake_host


# ------------------------------------------------------------------------------------------------ exit codes
def test_version_prints_the_version_and_exits_0(capsys):
    assert cli.main(["--version"]) == 0
    assert f"numawatch {__version__}\n" == capsys.readouterr().out


def test_check_exits_0_when_nothing_drifted(recorder, topology_host, capsys):
    assert cli.main(["--host-root", str(topology_host.root), "check"]) == 0
    assert "Findings: none" in capsys.readouterr().out


def test_check_exits_1_when_there_are_findings(recorder, fake_host, capsys):
    recorder.fire = True

    assert cli.main(["--host-root", str(fake_host.root), "check"]) == 1
    out = capsys.readouterr().out
    assert "CRITICAL (1)" in out
    assert "container_numa_split  llm/vllm-0/server" in out


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["check", "--format", "xml"], ["numawatch check: error:", "invalid choice: 'xml'"]),
        (["--no-such-flag", "check"], ["unrecognized arguments: --no-such-flag"]),
        (["frobnicate"], ["invalid choice: 'frobnicate'"]),
        ([], ["the following arguments are required: COMMAND"]),
        (["serve", "--interval", "0"], ["must be a positive number of seconds"]),
        (["serve", "--interval", "soon"], ["expected seconds, got 'soon'"]),
        (["serve", "--listen", "localhost"], ["expected HOST:PORT"]),
        (["serve", "--listen", "127.0.0.1:99999"], ["port must be 0-65535"]),
        (["--log-level", "chatty", "check"], ["invalid choice: 'chatty'"]),
        (["--log.format", "xml", "check"], ["invalid choice: 'xml'"]),
        (["serve", "--config.auto-reload-interval", "-1"], ["must be 0 or a positive number of seconds"]),
        (["check", "--window", "-1"], ["must be 0 or a positive number of seconds"]),
        (["serve", "--stagger", "0"], ["argument --stagger: must be 1 or more, got '0'"]),
        (["serve", "--stagger", "some"], ["expected a whole number, got 'some'"]),
        (["serve", "--web.max-requests", "-1"], ["must be 0 or more, got '-1'"]),
    ],
)
@pytest.mark.slow
def test_a_bad_flag_exits_2_with_a_one_line_reason(args, fragments):
    result = numawatch(*args)

    assert result.returncode == 2
    assert result.stdout == ""
    assert_one_line_error(result.stderr, *fragments)


def test_a_missing_host_root_exits_2_with_a_one_line_reason(tmp_path):
    result = numawatch("--host-root", str(tmp_path / "nope"), "check")

    assert result.returncode == 2
    assert_one_line_error(result.stderr, f"host root {tmp_path / 'nope'} does not exist")


def test_a_host_root_that_is_a_file_exits_2(tmp_path):
    (tmp_path / "file").write_text("not a directory\n")

    result = numawatch("--host-root", str(tmp_path / "file"), "check")

    assert result.returncode == 2
    assert_one_line_error(result.stderr, "is not a directory")


def test_an_invalid_intent_file_exits_2_naming_the_file_and_the_key(tmp_path, fake_host):
    intent = tmp_path / "intent.yaml"
    intent.write_text(INVALID_INTENT)

    result = numawatch("--host-root", str(fake_host.root), "--intent", str(intent), "check")

    assert result.returncode == 2
    assert result.stdout == ""
    assert_one_line_error(result.stderr, str(intent), "cpuManagerPolicy", "dynamic")


def test_an_intent_file_that_is_not_yaml_exits_2(tmp_path, fake_host):
    intent = tmp_path / "intent.yaml"
    intent.write_text("kubelet: [unclosed\n")

    result = numawatch("--host-root", str(fake_host.root), "check", "--intent", str(intent))

    assert result.returncode == 2
    assert_one_line_error(result.stderr, str(intent), "YAML")


def test_a_missing_intent_file_exits_2(tmp_path, fake_host):
    result = numawatch("--host-root", str(fake_host.root), "--intent", str(tmp_path / "absent.yaml"), "check")

    assert result.returncode == 2
    assert_one_line_error(result.stderr, "absent.yaml")


def test_a_valid_intent_file_is_named_in_the_report(tmp_path, recorder, topology_host, capsys):
    intent = tmp_path / "intent.yaml"
    intent.write_text("kubelet:\n  cpuManagerPolicy: static\n")

    assert cli.main(["--host-root", str(topology_host.root), "--intent", str(intent), "check", "--format", "json"]) == 0
    assert str(intent) == json.loads(capsys.readouterr().out)["intent"]


# ------------------------------------------------------------------------------------------------ flags
def test_global_flags_work_after_the_subcommand_too(recorder, topology_host, capsys):
    assert cli.main(["check", "--host-root", str(topology_host.root), "--format", "json"]) == 0
    assert str(topology_host.root) == json.loads(capsys.readouterr().out)["host_root"]


def test_a_global_flag_before_the_subcommand_is_not_reset_by_the_subcommand(recorder, topology_host, capsys):
    assert cli.main(["--host-root", str(topology_host.root), "check", "--format", "json"]) == 0
    assert str(topology_host.root) == json.loads(capsys.readouterr().out)["host_root"]


def test_path_flags_default_under_the_host_root_and_can_each_be_moved(recorder, fake_host, tmp_path):
    root = fake_host.root
    cli.main(["--host-root", str(root), "check"])
    cli.main(["--host-root", str(root), "--path.procfs", str(tmp_path / "p"), "--path.sysfs", str(tmp_path / "s"),
              "--path.kubelet", str(tmp_path / "k"), "--path.rke2", str(tmp_path / "r"), "check"])

    default, moved = (host.paths for host in recorder.hosts)
    assert (default.procfs, default.sysfs, default.kubelet, default.rke2) == (
        root / "proc", root / "sys", root / "var/lib/kubelet", root / "etc/rancher/rke2"
    )
    assert (moved.procfs, moved.sysfs, moved.kubelet, moved.rke2) == (
        tmp_path / "p", tmp_path / "s", tmp_path / "k", tmp_path / "r"
    )


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("0.0.0.0:10914", "0.0.0.0", 10914),
        ("127.0.0.1:0", "127.0.0.1", 0),
        (":9000", "", 9000),
        ("[::]:10914", "::", 10914),
        ("[::1]:8080", "::1", 8080),
        ("node.example:10914", "node.example", 10914),
    ],
)
def test_listen_addresses_parse_into_host_and_port(text, host, port):
    assert cli.Listen(host, port) == cli.parse_listen(text)


@pytest.mark.parametrize("text", ["10914", "host:", "host:port", "::1:80", "[::1]:-1", "h:65536", "[]:80"])
def test_malformed_listen_addresses_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_listen(text)


def test_serve_listens_on_every_interface_ipv4_and_ipv6_on_the_documented_default_port_by_default():
    args = cli.build_parser().parse_args(["serve"])

    assert cli.Listen("", 10914) == args.listen
    assert str(args.listen) == ":10914"
    assert args.interval == 15.0


@pytest.mark.parametrize("flag", ["--web.listen-address", "--listen"])
def test_the_listen_address_has_node_exporters_flag_and_the_earlier_one(flag):
    assert cli.Listen("::1", 8080) == cli.build_parser().parse_args(["serve", flag, "[::1]:8080"]).listen
    assert cli.Listen("::1", 8080) == cli.build_parser().parse_args(["serve", f"{flag}=[::1]:8080"]).listen


@pytest.mark.parametrize(
    ("args", "level", "style"),
    [
        ([], "info", "logfmt"),
        (["--log.level", "debug"], "debug", "logfmt"),
        (["--log-level", "error"], "error", "logfmt"),
        (["--log-level", "WARNING"], "warn", "logfmt"),  # numawatch's earlier spelling of promslog's "warn"
        (["--log.level=warn", "--log.format=json"], "warn", "json"),
    ],
)
def test_log_flags_have_promslogs_names_and_values_and_the_earlier_spelling(args, level, style):
    before = cli.build_parser().parse_args([*args, "serve"])
    after = cli.build_parser().parse_args(["serve", *args])

    assert (before.log_level, before.log_format) == (after.log_level, after.log_format) == (level, style)


# ------------------------------------------------------------------------------------------------ serve refusals
@pytest.mark.slow
def test_serve_refuses_to_start_on_an_invalid_intent_file(tmp_path, fake_host):
    intent = tmp_path / "intent.yaml"
    intent.write_text(INVALID_INTENT)

    result = numawatch("--host-root", str(fake_host.root), "--intent", str(intent),
                       "serve", "--listen", "127.0.0.1:0")

    assert result.returncode == 2
    assert "listening" not in result.stdout
    assert_one_line_error(result.stderr, str(intent))


@pytest.mark.slow
def test_serve_exits_2_when_the_port_is_taken(fake_host):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # --log-level error: start-up logs (self-pinning, hotplug) are not part of the one-line error under test.
        result = numawatch("--host-root", str(fake_host.root), "--log-level", "error",
                           "serve", "--listen", f"127.0.0.1:{port}")

    assert result.returncode == 2
    assert_one_line_error(result.stderr, f"cannot listen on 127.0.0.1:{port}")


# ------------------------------------------------------------------------------------------------ JSON and real host
def test_check_json_has_findings_not_evaluated_and_sources(recorder, fake_host, capsys):
    recorder.fire = True

    assert cli.main(["--host-root", str(fake_host.root), "check", "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)

    assert list(document)[:2] == ["findings", "not_evaluated"]
    [finding] = document["findings"]
    assert finding == {
        "check": "container_numa_split", "severity": "critical",
        "labels": {"namespace": "llm", "pod": "vllm-0", "container": "server"},
        "message": "container spans NUMA nodes 0 and 1", "remediation": "repin it",
    }
    assert {"name", "up", "reason", "duration_seconds"} <= set(document["sources"][0])


@pytest.mark.slow
def test_check_on_the_clean_reference_node_exits_0(fake_host):
    reference_node(fake_host)

    result = numawatch("--host-root", str(fake_host.root), "check")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "Findings: none" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("No findings; ")


@pytest.mark.slow
def test_check_on_a_reference_node_with_planted_drift_exits_1_and_reports_it(fake_host):
    node = reference_node(fake_host)
    node.split_across_nodes()
    node.set_topology_manager_policy("best-effort")

    table = numawatch("--host-root", str(fake_host.root), "check")
    document = json.loads(numawatch("--host-root", str(fake_host.root), "check", "--format", "json").stdout)

    assert table.returncode == 1, table.stderr
    assert "container_numa_split" in table.stdout
    assert "inference/vllm-llama-0" in table.stdout
    checks = {finding["check"] for finding in document["findings"]}
    assert {"container_numa_split", "kubelet_topology_manager_policy"} <= checks
    policy = next(f for f in document["findings"] if f["check"] == "kubelet_topology_manager_policy")
    assert policy["labels"]["value"] == "best-effort"
    assert policy["remediation"]


@pytest.mark.slow
def test_check_with_a_window_reads_twice_so_rate_checks_are_evaluated(fake_host):
    reference_node(fake_host)

    once = json.loads(numawatch("--host-root", str(fake_host.root), "check", "--format", "json").stdout)
    twice = json.loads(
        numawatch("--host-root", str(fake_host.root), "check", "--format", "json", "--window", "0.2").stdout
    )

    assert "irq_activity_on_isolated_cpu" in {item["check"] for item in once["not_evaluated"]}
    assert "irq_activity_on_isolated_cpu" not in {item["check"] for item in twice["not_evaluated"]}
    assert once["window_seconds"] is None
    assert twice["window_seconds"] >= 0.2


@pytest.mark.slow
def test_check_reads_the_kubelet_from_where_path_kubelet_points(fake_host, tmp_path):
    """The checkpoint files moved elsewhere (a DaemonSet mounting the kubelet dir apart): --path.kubelet finds them."""
    node = reference_node(fake_host)
    node.fossilise_cpu_state()
    moved = tmp_path / "kubelet"
    fake_host.path("var/lib/kubelet").rename(moved)

    default = json.loads(numawatch("--host-root", str(fake_host.root), "check", "--format", "json").stdout)
    pointed = json.loads(numawatch("--host-root", str(fake_host.root), "--path.kubelet", str(moved),
                                   "check", "--format", "json").stdout)

    state = {source["name"]: source for source in default["sources"]}["kubelet_state"]
    assert not state["up"]
    assert "kubelet_state_stale" in {finding["check"] for finding in pointed["findings"]}


@pytest.mark.realhost
def test_check_on_this_machine_reports_sources_down_with_reasons_and_does_not_crash():
    result = numawatch("check", "--format", "json")

    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    document = json.loads(result.stdout)
    assert document["host_root"] == "/"
    sources = {source["name"]: source for source in document["sources"]}
    assert sources["topology"]["up"], sources["topology"]["reason"]
    for source in sources.values():
        if not source["up"]:
            assert source["reason"]
            assert "\n" not in source["reason"]
    if not Path("/var/lib/kubelet").exists():
        assert not sources["kubelet_state"]["up"]
    for item in document["not_evaluated"]:
        assert item["reason"]


@pytest.mark.realhost
@pytest.mark.slow
def test_check_table_on_this_machine_ends_with_a_summary():
    result = numawatch("check")

    assert result.returncode in (0, 1), result.stderr
    assert "Sources\n  topology" in result.stdout
    assert " checks evaluated, " in result.stdout.splitlines()[-1]


def test_python_dash_m_numawatch_is_the_console_script():
    result = numawatch("--version")

    assert result.returncode == 0
    assert f"numawatch {__version__}" == result.stdout.strip()


# ------------------------------------------------------------------------------------------------ could not look
@pytest.mark.parametrize("where", ["empty", "/tmp"])
@pytest.mark.slow
def test_check_where_nothing_can_be_read_exits_2_with_one_line_on_stderr(tmp_path, where):
    root = tmp_path / "empty" if where == "empty" else Path(where)
    root.mkdir(exist_ok=True)

    table = numawatch("--host-root", str(root), "--no-nvml", "check")
    document = numawatch("--host-root", str(root), "--no-nvml", "check", "--format", "json")

    reason = f"no check could be evaluated ({len(registry.CHECKS)} of {len(registry.CHECKS)} not evaluated; "
    for result in (table, document):
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"numawatch: unknown: {reason}"), line
    assert f"Result: unknown (exit 2): {reason}" in table.stdout
    parsed = json.loads(document.stdout)
    assert (parsed["status"], parsed["exit_code"]) == ("unknown", 2)
    assert parsed["status_reason"].startswith(reason)
    assert parsed["findings"] == [] and parsed["not_evaluated"]  # the existing fields stay


@pytest.mark.slow
def test_check_with_the_topology_down_exits_2_unless_something_was_found(fake_host):
    node = reference_node(fake_host)
    fake_host.remove("sys/devices/system/cpu")

    blind = numawatch("--host-root", str(fake_host.root), "--no-nvml", "check", "--format", "json")
    node.set_topology_manager_policy("best-effort")
    found = numawatch("--host-root", str(fake_host.root), "--no-nvml", "check", "--format", "json")

    assert blind.returncode == 2, blind.stdout
    assert json.loads(blind.stdout)["status_reason"].startswith("the topology source is down (")
    assert "the topology source is down" in blind.stderr and len(blind.stderr.strip().splitlines()) == 1
    assert found.returncode == 1, found.stderr
    assert json.loads(found.stdout)["status"] == "findings" and found.stderr == ""


def test_check_with_every_check_disabled_by_intent_exits_2(tmp_path, recorder, topology_host, capsys):
    intent = tmp_path / "intent.yaml"
    intent.write_text("checks:\n  container_numa_split: {enabled: false}\n")

    assert cli.main(["--host-root", str(topology_host.root), "--intent", str(intent), "check"]) == 2
    assert "1 disabled by intent" in capsys.readouterr().err


def test_check_help_documents_the_exit_codes():
    help_text = " ".join(numawatch("check", "--help").stdout.split())

    assert "Exit 0: clean; 1: findings (of --fail-on's severity or worse); 2: unknown" in help_text
    assert "the topology source is down" in help_text
    assert "(default: warning; info under --format npd" in help_text


# ------------------------------------------------------------------------------------------------ --fit and --window
@pytest.mark.slow
def test_check_fit_says_which_numa_node_would_seat_a_small_pod(fake_host):
    reference_node(fake_host)
    result = numawatch("--host-root", str(fake_host.root), "check", "--fit", "cpu=2,memory=1Gi", "--format", "json")

    answer = json.loads(result.stdout)["fit"]
    assert result.returncode == 0, result.stderr
    assert answer["fits"] is True
    assert answer["numa_nodes"]
    assert answer["policy"] == "single-numa-node"
    assert {entry["numa_node"] for entry in answer["per_node"]} == {0, 1}


@pytest.mark.slow
def test_check_fit_rejects_a_pod_larger_than_any_numa_node(fake_host):
    reference_node(fake_host)
    result = numawatch("--host-root", str(fake_host.root), "check", "--fit", "cpu=64,memory=1Gi")

    assert result.returncode == 1
    assert "cpu" in result.stdout


@pytest.mark.slow
def test_check_fit_with_a_malformed_shape_exits_2_with_one_line(fake_host):
    reference_node(fake_host)
    result = numawatch("--host-root", str(fake_host.root), "check", "--fit", "cpu=lots")

    assert result.returncode == 2
    assert_one_line_error(result.stderr, "--fit")


def test_check_watches_three_seconds_by_default_unless_the_environment_says_otherwise(monkeypatch):
    args = cli.build_parser().parse_args(["check"])
    monkeypatch.delenv(cli.WINDOW_ENV, raising=False)
    assert cli._window(args) == 3.0
    monkeypatch.setenv(cli.WINDOW_ENV, "0.5")
    assert cli._window(args) == 0.5
    assert cli._window(cli.build_parser().parse_args(["check", "--window", "1"])) == 1.0
    monkeypatch.setenv(cli.WINDOW_ENV, "soon")
    with pytest.raises(cli.UsageError, match=cli.WINDOW_ENV):
        cli._window(args)


@pytest.mark.slow
def test_serve_freezes_what_it_started_with_and_collects_young_objects_less_often():
    # In a child process: gc.freeze() in the test runner would keep every test's objects from the collector.
    code = (
        "import gc, json; from numawatch import cli; before = gc.get_freeze_count(); cli.tune_gc_for_serve(); "
        "print(json.dumps([before, gc.get_freeze_count(), gc.get_threshold()]))"
    )
    before, after, thresholds = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    assert before == 0 and after > 1000  # the modules and tables imported so far
    assert tuple(thresholds) == cli.SERVE_GC_THRESHOLDS != (700, 10, 10)


# ------------------------------------------------------------------------------------------------ --fail-on
@pytest.fixture
def debian_swappiness(fake_host: FakeHost) -> FakeHost:
    """The clean reference node but for Debian's default vm.swappiness (60): one info finding, nothing else."""
    reference_node(fake_host)
    fake_host.write("proc/sys/vm/swappiness", "60")
    return fake_host


def run_check(host: FakeHost, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "numawatch", "--host-root", str(host.root), "--no-nvml", "check",
                           "--window", "0", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_an_info_finding_alone_leaves_check_at_exit_0_and_is_still_shown(debian_swappiness):
    table = run_check(debian_swappiness)
    document = json.loads(run_check(debian_swappiness, "--format", "json").stdout)

    assert table.returncode == 0, table.stdout + table.stderr
    assert "INFO (1)" in table.stdout and "vm_swappiness" in table.stdout
    assert "Result: clean (exit 0; 1 finding below --fail-on warning)" in table.stdout
    assert [(f["check"], f["severity"]) for f in document["findings"]] == [("vm_swappiness", "info")]
    assert (document["status"], document["exit_code"], document["fail_on"]) == ("clean", 0, "warning")


@pytest.mark.parametrize(("fail_on", "expected"), [("info", 1), ("warning", 0), ("critical", 0)])
@pytest.mark.slow
def test_fail_on_names_the_least_severe_finding_that_makes_exit_1(debian_swappiness, fail_on, expected):
    done = run_check(debian_swappiness, "--fail-on", fail_on, "--format", "json")

    assert done.returncode == expected, done.stderr
    assert json.loads(done.stdout)["exit_code"] == expected


@pytest.mark.slow
def test_fail_on_critical_leaves_a_warning_at_exit_0_but_not_a_critical(debian_swappiness):
    debian_swappiness.write("proc/sys/kernel/numa_balancing", "1")  # kernel_numa_balancing: warning
    assert run_check(debian_swappiness, "--fail-on", "critical").returncode == 0
    assert run_check(debian_swappiness).returncode == 1


@pytest.mark.slow
def test_npd_still_sets_the_condition_on_an_info_finding(debian_swappiness):
    done = run_check(debian_swappiness, "--format", "npd", "--group", "HostTuningDrift")

    assert done.returncode == 1
    assert done.stdout == "1 finding: vm_swappiness setting=vm.swappiness value=60 expected=0\n"
