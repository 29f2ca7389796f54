"""cpuidle: the source (fake trees and this machine's own /sys), cpuidle_deep_state firing and clean, the metric."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.kernel import INTEL_IDLE_STATES, add_cpuidle
from fakehost.reference import EXCLUSIVE, HOUSEKEEPING, ISOLATED, ONLINE, VLLM, reference_node
from fakehost.topology import add_topology
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.checks.cpuidle import CPUIDLE_DEEP_STATE, idle_parameters
from numawatch.confined import HostFs
from numawatch.cpuset import format_cpulist
from numawatch.host import HostReader, read_host
from numawatch.intent import REFERENCE
from numawatch.intentfile import parse_intent
from numawatch.paths import Paths
from numawatch.refresh import IDLE_STATES
from numawatch.sources import cpuidle
from numawatch.sources import topology as topology_source
from prometheus_client.parser import text_string_to_metric_families
from source_inputs import Driven

CPU = "sys/devices/system/cpu"


# --------------------------------------------------------------------------------------------------- parsers
@pytest.mark.parametrize(
    ("text", "name"),
    [("C6\n", "C6"), ("C1E\x00\n", "C1E"), ("haltpoll idle\n", "haltpoll idle"), ("C1-SKX", "C1-SKX"),
     ("POLL ", "POLL")],
)
def test_state_names_as_drivers_print_them(text, name):
    assert cpuidle.parse_state_name(text) == name


@pytest.mark.parametrize("text", ["", "\n", "a  b", "$(reboot)", "C6\nC7", "x" * 40, "é"])
def test_a_state_name_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="idle state name"):
        cpuidle.parse_state_name(text)


def test_latency_disable_and_resume_limit_parse_as_the_kernel_prints_them():
    assert cpuidle.parse_latency("290\n") == 290
    assert cpuidle.parse_latency("0") == 0
    assert cpuidle.parse_disable("1\n") is True and cpuidle.parse_disable("0") is False
    assert cpuidle.parse_resume_latency("0\n") is None  # no limit
    assert cpuidle.parse_resume_latency("n/a\n") == 0  # polling only
    assert cpuidle.parse_resume_latency("20") == 20
    for bad, parse in (("-1", cpuidle.parse_latency), ("1e3", cpuidle.parse_latency), ("2", cpuidle.parse_disable),
                       ("yes", cpuidle.parse_disable), ("-5", cpuidle.parse_resume_latency),
                       ("9" * 30, cpuidle.parse_latency)):  # fmt: skip
        with pytest.raises(ValueError):
            parse(bad)


def test_idle_parameters_of_the_command_line_last_one_winning():
    found = idle_parameters("ro intel_idle.max_cstate=6 quiet intel_idle.max_cstate=1 idle=poll processor.max_cstate=1")
    assert found == {"intel_idle.max_cstate": "1", "idle": "poll", "processor.max_cstate": "1"}


def test_the_cpu_listing_of_this_machines_sysfs_names_its_cpus_and_is_handed_back_while_the_same():
    names = sorted(os.listdir("/sys/devices/system/cpu"))

    listing = cpuidle.parse_cpu_listing(names)

    assert listing.cpus and listing.cpus == sorted(listing.cpus)
    assert {f"cpu{cpu}" for cpu in listing.cpus} <= set(names)
    assert cpuidle.parse_cpu_listing(list(names), listing) is listing


@pytest.mark.parametrize(
    ("names", "cpus"),
    [
        ([], []),
        (["cpu0", "cpu10", "cpu2", "cpufreq", "cpuidle", "online", "possible"], [0, 2, 10]),  # numbers, not text
        (["cpu", "cpu-1", "cpu1x", "CPU3", "cpu123456", "cpu7"], [7]),  # names that are no CPU's, and one that is
    ],
    ids=["empty", "real-names", "odd-names"],
)
def test_the_cpu_listing_with_or_without_a_previous_one(names, cpus):
    fresh = cpuidle.parse_cpu_listing(names)

    assert fresh.cpus == cpus
    for other in ([], ["cpu0", "cpu1"], [*names, "cpu99"]):
        assert cpuidle.parse_cpu_listing(names, cpuidle.parse_cpu_listing(other)) == fresh


# --------------------------------------------------------------------------------------------------- the source
def small_host(fake_host: FakeHost, **kwargs) -> FakeHost:
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=2, cmdline="ro isolcpus=1-3")
    add_cpuidle(fake_host, range(4), **kwargs)
    return fake_host


def test_the_source_reads_each_cpus_deep_states_and_leaves_polling_out(fake_host):
    small_host(fake_host, disabled={1: {"C6"}}, resume_latency={2: "5", 3: "n/a"})

    idle = cpuidle.read(fake_host.paths)

    assert (idle.driver, idle.governor, idle.problems) == ("intel_idle", "menu", ())
    assert sorted(idle.states) == [0, 1, 2, 3]
    assert [(s.index, s.name, s.exit_latency_us) for s in idle.states[0]] == [
        (1, "C1", 1), (2, "C1E", 2), (3, "C6", 290)
    ]  # fmt: skip
    assert [s.name for s in idle.enabled(0)] == ["C1", "C1E", "C6"]
    assert [s.name for s in idle.enabled(1)] == ["C1", "C1E"]  # C6 disabled
    assert [s.name for s in idle.enabled(2)] == ["C1", "C1E"]  # PM QoS limit of 5 µs
    assert idle.enabled(3) == ()  # n/a: polling only
    assert dict(idle.resume_latency_us) == {2: 5, 3: 0}


def test_without_cpuidle_the_driver_is_unknown_and_the_check_not_applicable(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=2, threads_per_core=1, cmdline="ro isolcpus=1")

    idle = cpuidle.read(fake_host.paths)
    evaluation = evaluate(read_host(fake_host.paths), REFERENCE, [CPUIDLE_DEEP_STATE])

    assert idle.driver is None and not idle.states
    assert [item.check for item in evaluation.not_applicable] == ["cpuidle_deep_state"]
    assert "CONFIG_CPU_IDLE" in evaluation.not_applicable[0].reason


def test_a_malformed_disable_file_makes_only_that_cpu_unknown(fake_host):
    small_host(fake_host)
    fake_host.write(f"{CPU}/cpu2/cpuidle/state3/disable", "maybe")

    idle = cpuidle.read(fake_host.paths)

    assert idle.enabled(2) is None and idle.enabled(1) is not None
    assert idle.problems == (f"{fake_host.path(CPU)}/cpu2/cpuidle/state3/disable: expected 0 or 1, got 'maybe'",)


def test_a_malformed_latency_or_limit_leaves_that_cpu_out(fake_host):
    small_host(fake_host)
    fake_host.write(f"{CPU}/cpu0/cpuidle/state2/latency", "fast")  # the CPU the driver's table is read from
    fake_host.write(f"{CPU}/cpu3/power/pm_qos_resume_latency_us", "soon")

    idle = cpuidle.read(fake_host.paths)

    assert sorted(idle.states) == [1, 2]  # cpu1's table is read instead and shared with cpu2
    assert len(idle.problems) == 2 and all("expected" in p for p in idle.problems)


def test_the_drivers_table_is_read_from_one_cpu_unless_each_cpu_has_its_own_driver(fake_host):
    small_host(fake_host)
    fake_host.write(f"{CPU}/cpu2/cpuidle/state3/latency", "500")  # a cluster with its own driver and table

    shared = cpuidle.read(fake_host.paths)
    for cpu in range(4):
        fake_host.write(f"{CPU}/cpu{cpu}/cpuidle/driver/name", "psci_idle")  # CONFIG_CPU_IDLE_MULTIPLE_DRIVERS
    per_cpu = cpuidle.read(fake_host.paths)

    assert shared.states[2][-1].exit_latency_us == 290
    assert per_cpu.states[2][-1].exit_latency_us == 500 and per_cpu.states[1][-1].exit_latency_us == 290


def test_serves_reader_reads_names_and_latencies_once_and_staggered_disable_files_in_turn(fake_host, monkeypatch):
    small_host(fake_host)
    reader = Driven("cpuidle")
    reader.set_stagger(2)
    opened: list[str] = []
    real = HostFs.read_attribute_text

    def spy(fs, path, limit):
        opened.append(os.fspath(path))
        return real(fs, path, limit)

    monkeypatch.setattr(HostFs, "read_attribute_text", spy)
    first = reader.read(fake_host.paths)  # turn 0 of 2, but nothing is known yet: every CPU is read
    assert sum(p.endswith("/name") for p in opened) == 4  # one CPU's table, POLL's too (to learn it is latency 0)
    assert sum(p.endswith("/disable") for p in opened) == 4 * 3
    opened.clear()
    fake_host.write(f"{CPU}/cpu1/cpuidle/state3/disable", "1")
    fake_host.write(f"{CPU}/cpu2/cpuidle/state3/disable", "1")

    second = reader.read(fake_host.paths)  # turn 1 of the round: the CPUs numbered 1 modulo its length
    length = reader.readings_per_round(IDLE_STATES)

    assert not any(p.endswith(("/name", "/latency")) for p in opened)
    in_turn = {str(cpu) for cpu in range(4) if cpu % length == 1}
    assert {re.search(r"/cpu(\d+)/cpuidle/", p).group(1) for p in opened if p.endswith("/disable")} == in_turn
    assert [s.name for s in second.enabled(1)] == ["C1", "C1E"]  # read now
    assert second.states[2] is first.states[2]  # carried: its change shows at its turn
    third = reader.read(fake_host.paths)
    assert [s.name for s in third.enabled(2)] == ["C1", "C1E"]


def test_a_rotating_reading_whose_turn_read_the_same_hands_the_previous_reading_out_unchanged(fake_host):
    small_host(fake_host, resume_latency={3: "5"})
    reader = Driven("cpuidle")
    reader.set_stagger(2)
    first = reader.read(fake_host.paths)
    length = reader.readings_per_round(IDLE_STATES)

    assert all(reader.read(fake_host.paths) is first for _ in range(length))  # a whole round of the same files
    fake_host.write(f"{CPU}/cpu1/cpuidle/state3/disable", "1")
    seen = [reader.read(fake_host.paths) for _ in range(length)]
    assert seen[-1] is not first and seen[-1] == cpuidle.read(fake_host.paths)  # within the round
    assert [s.name for s in seen[-1].enabled(1)] == ["C1", "C1E"]

    fake_host.write(f"{CPU}/cpu3/power/pm_qos_resume_latency_us", "soon")  # malformed at its turn: reported
    seen = [reader.read(fake_host.paths) for _ in range(length)]
    assert seen[-1].problems and 3 not in seen[-1].states
    assert seen[-1] == cpuidle.read(fake_host.paths)


def test_a_cpu_directory_that_comes_or_goes_between_rotating_readings_is_seen_at_the_next_one(fake_host):
    small_host(fake_host)
    reader = Driven("cpuidle")
    reader.set_stagger(2)
    first = reader.read(fake_host.paths)
    assert reader.read(fake_host.paths) is first  # the same listing: its CPUs are taken over, nothing moved

    add_cpuidle(fake_host, [4], disabled={4: {"C6"}})  # a CPU hot-added, with C6 disabled
    added = reader.read(fake_host.paths)
    assert sorted(added.states) == [0, 1, 2, 3, 4]
    assert [s.name for s in added.enabled(4)] == ["C1", "C1E"]
    assert added == cpuidle.read(fake_host.paths)

    fake_host.remove(f"{CPU}/cpu4")
    assert sorted(reader.read(fake_host.paths).states) == [0, 1, 2, 3]


@pytest.mark.skipif(not os.path.isfile("/sys/devices/system/cpu/cpuidle/current_driver"), reason="no cpuidle here")
def test_the_source_reads_this_machines_own_sysfs():
    idle = cpuidle.read(Paths.from_root("/"))

    online = topology_source.read(Paths.from_root("/")).online
    assert idle.problems == ()
    assert idle.driver == Path("/sys/devices/system/cpu/cpuidle/current_driver").read_text().strip()
    assert set(idle.states) <= set(online)
    for cpu, states in idle.states.items():
        for state in states:
            base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cpuidle/state{state.index}")
            assert state.exit_latency_us == int((base / "latency").read_text()) > 0
            assert state.disabled == ((base / "disable").read_text().strip() == "1")


# --------------------------------------------------------------------------------------------------- the check
def test_the_reference_node_with_c6_disabled_on_isolated_cpus_is_clean(fake_host):
    evaluation = evaluate(reference_node(fake_host).read(), REFERENCE, [CPUIDLE_DEEP_STATE])

    assert evaluation.findings == () and evaluation.not_evaluated == () and evaluation.not_applicable == ()


@pytest.mark.slow
def test_c6_enabled_on_isolated_cpus_fires_once_for_the_group_with_the_fix(fake_host):
    node = reference_node(fake_host)
    add_cpuidle(fake_host, sorted(ONLINE))  # cpupower idle-set -E: every state enabled again

    (finding,) = evaluate(node.read(), REFERENCE, [CPUIDLE_DEEP_STATE]).findings

    assert dict(finding.labels) == {"cpus": format_cpulist(ISOLATED), "name": "C6", "value": "290", "expected": "10"}
    assert "C6 (290 µs)" in finding.message and "driver intel_idle, governor menu" in finding.message
    assert "(exclusive)" in finding.message or "isolated, exclusive" in finding.message
    assert f"cpupower -c {format_cpulist(ISOLATED)} idle-set -D 11" in finding.remediation
    assert "intel_idle.max_cstate=2" in finding.remediation


@pytest.mark.slow
def test_housekeeping_cpus_may_sleep_deep(fake_host):
    node = reference_node(fake_host)
    add_cpuidle(fake_host, sorted(ONLINE), disabled={cpu: {"C6"} for cpu in ISOLATED})  # the reference, again

    assert evaluate(node.read(), REFERENCE, [CPUIDLE_DEEP_STATE]).findings == ()
    assert HOUSEKEEPING and not HOUSEKEEPING & ISOLATED


@pytest.mark.slow
def test_a_pm_qos_limit_within_the_intent_keeps_c6_out(fake_host):
    node = reference_node(fake_host)
    add_cpuidle(fake_host, sorted(ONLINE), resume_latency={cpu: "10" for cpu in ISOLATED})

    assert evaluate(node.read(), REFERENCE, [CPUIDLE_DEEP_STATE]).findings == ()


def test_the_intents_limit_decides_and_zero_asks_for_polling(fake_host):
    node = reference_node(fake_host)
    strict = parse_intent("kernel: {maxIdleExitLatencyUs: 1}")
    polling = parse_intent("kernel: {maxIdleExitLatencyUs: 0}")

    (finding,) = evaluate(node.read(), strict, [CPUIDLE_DEEP_STATE]).findings
    (only_poll,) = evaluate(node.read(), polling, [CPUIDLE_DEEP_STATE]).findings

    assert (finding.labels["name"], finding.labels["value"], finding.labels["expected"]) == ("C1E", "2", "1")
    assert "intel_idle.max_cstate=1" in finding.remediation
    assert only_poll.labels["name"] == "C1,C1E" and "idle=poll" in only_poll.remediation


@pytest.mark.slow
def test_exclusive_cpus_are_judged_without_isolcpus(fake_host):
    node = reference_node(fake_host)
    cmdline = fake_host.path("proc/cmdline").read_text().split()
    fake_host.write("proc/cmdline", " ".join(w for w in cmdline if not w.startswith(("isolcpus=", "nohz_full="))))
    fake_host.write(f"{CPU}/isolated", "")
    add_cpuidle(fake_host, sorted(ONLINE))

    (finding,) = evaluate(node.read(), REFERENCE, [CPUIDLE_DEEP_STATE]).findings

    assert finding.labels["cpus"] == format_cpulist(EXCLUSIVE)
    assert VLLM.exclusive <= EXCLUSIVE


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda host: host.write(f"{CPU}/cpuidle/current_driver", "none"), "current_driver none"),
        (lambda host: host.write("proc/cmdline", host.path("proc/cmdline").read_text().strip() + " idle=poll"),
         "idle=poll"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_no_idle_driver_or_idle_poll_is_not_applicable(fake_host, setup, reason):
    node = reference_node(fake_host)
    setup(fake_host)
    if "none" in reason:
        for cpu in ONLINE:
            fake_host.remove(f"{CPU}/cpu{cpu}/cpuidle")

    evaluation = evaluate(node.read(), REFERENCE, [CPUIDLE_DEEP_STATE])

    assert evaluation.findings == ()
    assert reason in evaluation.not_applicable[0].reason


def test_an_unreadable_disable_file_with_nothing_else_wrong_is_not_evaluated_naming_it(fake_host):
    node = reference_node(fake_host)
    fake_host.write(f"{CPU}/cpu5/cpuidle/state3/disable", "x")

    evaluation = evaluate(node.read(), REFERENCE, [CPUIDLE_DEEP_STATE])

    (item,) = evaluation.not_evaluated
    assert "CPUs 5" in item.reason and f"{fake_host.path(CPU)}/cpu5/cpuidle/state3/disable" in item.reason


# --------------------------------------------------------------------------------------------------- the metric
def test_the_metric_has_one_series_per_role_and_latency_never_per_cpu(fake_host):
    node = reference_node(fake_host)
    families = {
        f.name: f for f in text_string_to_metric_families(metrics.render(evaluate(node.read(), REFERENCE)).decode())
    }

    family = families["numawatch_cpuidle_exit_latency_max_seconds"]
    samples = {(s.labels["role"], s.labels["cpus"]): s.value for s in family.samples}
    info = [s.labels for s in families["numawatch_cpuidle_info"].samples]

    assert samples == {
        ("exclusive", format_cpulist(EXCLUSIVE)): 2e-6,
        ("isolated", format_cpulist(ISOLATED - EXCLUSIVE)): 2e-6,
        ("housekeeping", format_cpulist(HOUSEKEEPING)): INTEL_IDLE_STATES[-1][1] / 1e6,
    }
    assert info == [{"driver": "intel_idle", "governor": "menu"}]


@pytest.mark.slow
def test_the_metric_follows_what_a_staggered_serve_reads(fake_host):
    node = reference_node(fake_host)
    reader = HostReader(node.paths, stagger=1)
    reader.read()
    add_cpuidle(fake_host, sorted(ONLINE))

    evaluation = evaluate(reader.read(), REFERENCE, [CPUIDLE_DEEP_STATE])

    assert [f.labels["name"] for f in evaluation.findings] == ["C6"]
    assert Path(fake_host.path(CPU)).is_dir()


# --------------------------------------------------------------------------------------------------- the corpus
def corpus_trees_with_idle_states() -> list[str]:
    from corpus import corpus_root, tree_names

    return [name for name in tree_names() if list((corpus_root(name) / CPU).glob("cpu*/cpuidle/state*"))]


def test_the_corpus_trees_with_idle_states_are_the_ones_expected():
    # Old kernels (2.6 to 3.x) without the per-state disable attribute: 40intel64 (intel_idle's NHM-C*), 32em64t
    # (acpi_idle's C1-C3) and 2arm-2c (an ARM driver's C2-C6).
    assert corpus_trees_with_idle_states() == [
        "2arm-2c", "32em64t-2n8c+dax+nvme+mic+dimms", "40intel64-2g2n4c+pcilocality",
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["2arm-2c", "32em64t-2n8c+dax+nvme+mic+dimms", "40intel64-2g2n4c+pcilocality"])
def test_corpus_idle_states_read_as_their_files_say(name):
    from corpus import corpus_root

    root = corpus_root(name)
    idle = cpuidle.read(Paths.from_root(root))

    assert idle.problems == ()
    expected = {}
    for state_dir in sorted((root / CPU).glob("cpu*/cpuidle/state*")):
        cpu = int(state_dir.parent.parent.name[3:])
        latency = int((state_dir / "latency").read_text())
        if latency:
            expected.setdefault(cpu, []).append(((state_dir / "name").read_text().strip(), latency))
    assert {cpu: [(s.name, s.exit_latency_us) for s in states] for cpu, states in idle.states.items()} == expected
    assert all(state.disabled is False for states in idle.states.values() for state in states)  # no disable file


@pytest.mark.slow
def test_the_nehalem_capture_with_isolated_cpus_fires_and_a_looser_intent_is_clean(tmp_path):
    import shutil

    from corpus import corpus_root

    root = tmp_path / "tree"
    shutil.copytree(corpus_root("40intel64-2g2n4c+pcilocality"), root, symlinks=True)
    (root / "proc/cmdline").write_text("ro quiet isolcpus=2-7\n")
    host = read_host(Paths.from_root(root))

    (finding,) = evaluate(host, REFERENCE, [CPUIDLE_DEEP_STATE]).findings
    clean = evaluate(host, parse_intent("kernel: {maxIdleExitLatencyUs: 200}"), [CPUIDLE_DEEP_STATE])

    assert dict(finding.labels) == {"cpus": "2-7", "name": "NHM-C3,NHM-C6", "value": "200", "expected": "10"}
    assert "intel_idle.max_cstate=1" in finding.remediation
    assert clean.findings == () and clean.not_evaluated == ()


@pytest.mark.slow
def test_serves_reader_takes_the_idle_parameters_over_only_while_the_command_line_is_the_same(fake_host, monkeypatch):
    node = reference_node(fake_host)
    add_cpuidle(fake_host, sorted(ONLINE))  # firing: C6 enabled on the isolated CPUs
    reader = HostReader(node.paths, stagger=4)
    from numawatch.checks import cpuidle as check_module

    parsed: list[str] = []
    real = check_module.idle_parameters

    def spy(cmdline: str) -> dict[str, str]:
        parsed.append(cmdline)
        return real(cmdline)

    monkeypatch.setattr(check_module, "idle_parameters", spy)

    def judged(host):
        evaluation = evaluate(host, REFERENCE, [CPUIDLE_DEEP_STATE])
        return evaluation.findings, [n.reason for n in evaluation.not_applicable]

    first, second = judged(reader.read()), judged(reader.read())
    assert len(parsed) == 1  # the second evaluation took the first one's over
    assert first == second == judged(read_host(node.paths)) and len(first[0]) == 1
    cmdline = fake_host.path("proc/cmdline").read_text().strip()
    fake_host.write("proc/cmdline", cmdline + " idle=poll")
    polling = judged(reader.read())
    assert polling == judged(read_host(node.paths))
    assert polling[0] == () and "idle=poll" in polling[1][0]  # clean: not applicable
    fake_host.write("proc/cmdline", cmdline)
    again = judged(reader.read())
    assert again == first  # firing again, with the remediation the command line asks for
