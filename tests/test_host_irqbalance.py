"""The irqbalance source (is it running, what does it ban) and the irqbalance_unbanned check."""

from __future__ import annotations

import pytest
from fakehost.kernel import add_irqbalance, add_process
from fakehost.topology import add_topology
from numawatch.checks import evaluate
from numawatch.checks.host_irq import CHECK_BY_ID
from numawatch.host import HostReader
from numawatch.intent import Intent, KernelIntent
from numawatch.paths import Paths
from numawatch.sources import irqbalance, topology
from numawatch.sources.irqbalance import config_from, parse_env_file, parse_environ, socket_pids

SOURCES = (topology.SOURCE, irqbalance.SOURCE)
ISOLATED = "isolcpus=domain,managed_irq,2-7 nohz_full=2-7 rcu_nocbs=2-7"


def check(fake_host, intent: Intent | None = None):
    snapshot = HostReader(fake_host.paths, SOURCES).read()
    evaluation = evaluate(snapshot, intent or Intent(), [CHECK_BY_ID["irqbalance_unbanned"]])
    return list(evaluation.findings), [n.reason for n in evaluation.not_evaluated]


# --------------------------------------------------------------------------------------------------- parsers
def test_env_file_lines_as_systemd_reads_them():
    text = (
        "# irqbalance settings\n"
        'IRQBALANCE_BANNED_CPULIST="2-7"\n'
        "export IRQBALANCE_ARGS='--policyscript=/x'\n"
        "IRQBALANCE_ONESHOT=  # inline comment\n"
        "not an assignment\n"
        "; another comment\n"
    )

    assert parse_env_file(text) == {
        "IRQBALANCE_BANNED_CPULIST": "2-7",
        "IRQBALANCE_ARGS": "--policyscript=/x",
        "IRQBALANCE_ONESHOT": "",
    }


def test_environ_is_nul_separated():
    assert parse_environ(b"PATH=/bin\0IRQBALANCE_BANNED_CPULIST=4-5\0junk\0") == {
        "PATH": "/bin",
        "IRQBALANCE_BANNED_CPULIST": "4-5",
    }


def test_socket_pids_from_proc_net_unix():
    text = "Num RefCount Protocol Flags Type St Inode Path\n0: 2 0 10000 1 1 31337 @irqbalance812.sock\n"

    assert socket_pids(text) == [812]


def test_unparsable_ban_values_are_problems_naming_the_origin():
    problems: list[str] = []

    values = {"IRQBALANCE_BANNED_CPULIST": "2-x", "IRQBALANCE_BANNED_CPUS": "zz"}
    config = config_from(values, "/etc/default/irqbalance", problems)

    assert (config.banned_cpulist, config.banned_cpus) == (None, None)
    assert len(problems) == 2 and all(p.startswith("/etc/default/irqbalance: IRQBALANCE_BANNED_") for p in problems)


# --------------------------------------------------------------------------------------------------- source
def test_running_daemon_is_found_by_comm_among_other_processes(fake_host):
    add_process(fake_host, 1, "systemd")
    add_process(fake_host, 300, "kubelet")
    add_irqbalance(fake_host, pid=812, environ={"IRQBALANCE_BANNED_CPULIST": "2-7"})

    state = irqbalance.read(fake_host.paths)

    assert state.pids == (812,)
    assert state.config.banned_cpulist == frozenset(range(2, 8))
    assert state.config.origin == "environment of irqbalance (PID 812)"


def test_socket_candidate_is_verified_by_comm(fake_host):
    add_irqbalance(fake_host, pid=812, socket=True, env_file="rhel", file_text="IRQBALANCE_BANNED_CPUS=000000fc\n")

    state = irqbalance.read(fake_host.paths)

    assert state.pids == (812,)
    assert state.config.banned_cpus == frozenset(range(2, 8))  # environ unreadable: the environment file


def test_a_socket_table_without_its_socket_means_not_running(fake_host):
    fake_host.write("proc/1/net/unix", "Num       RefCount Protocol Flags    Type St Inode Path\n")
    add_process(fake_host, 1, "systemd")

    assert irqbalance.read(fake_host.paths).pids == ()


def test_the_systemd_unit_cgroup_names_the_daemon(fake_host):
    fake_host.write("proc/1/net/unix", "Num       RefCount Protocol Flags    Type St Inode Path\n")
    fake_host.write("sys/fs/cgroup/system.slice/irqbalance.service/cgroup.procs", "977\n")
    add_irqbalance(fake_host, pid=977, environ={})

    assert irqbalance.read(fake_host.paths).pids == (977,)


def test_not_running_still_reads_the_file_settings(fake_host):
    add_process(fake_host, 1, "systemd")
    add_irqbalance(fake_host, pid=None, env_file="debian", file_text="IRQBALANCE_BANNED_CPULIST=4\n")

    state = irqbalance.read(fake_host.paths)

    assert (state.running, state.config.banned_cpulist) == (False, frozenset({4}))
    assert state.config.origin.endswith("etc/default/irqbalance")


@pytest.mark.realhost
def test_this_machine_irqbalance_state_reads():
    state = irqbalance.read(Paths.from_root("/"))

    assert all(pid > 0 for pid in state.pids)


# --------------------------------------------------------------------------------------------------- the check
def test_a_ban_list_that_misses_isolated_cpus_fires_because_it_replaces_the_automatic_ban(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline=ISOLATED)
    add_irqbalance(fake_host, pid=812, env_file="debian", file_text="IRQBALANCE_BANNED_CPULIST=2-5\n")

    findings, _ = check(fake_host)

    assert len(findings) == 1
    assert findings[0].labels["cpus"] == "6-7"
    assert findings[0].labels["reason"] == "banned_cpulist"
    assert findings[0].labels["file"] == "/etc/default/irqbalance"  # as the host names it, never under the root
    assert "replaces irqbalance's automatic ban" in findings[0].message


def test_the_deprecated_mask_is_judged_the_same_way(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline=ISOLATED)
    add_irqbalance(fake_host, pid=812, environ={"IRQBALANCE_BANNED_CPUS": "0000000c"})

    findings, _ = check(fake_host)

    assert [(f.labels["cpus"], f.labels["reason"], "file" in f.labels) for f in findings] == [
        ("4-7", "banned_cpus", False)
    ]


def test_a_ban_list_covering_every_isolated_cpu_is_clean(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline=ISOLATED)
    add_irqbalance(fake_host, pid=812, environ={"IRQBALANCE_BANNED_CPULIST": "2-7"})

    assert check(fake_host) == ([], [])


def test_the_automatic_ban_covers_what_sysfs_reports(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline=ISOLATED)
    add_irqbalance(fake_host, pid=812, environ={"PATH": "/usr/bin"})

    assert check(fake_host) == ([], [])


def test_the_automatic_ban_misses_isolated_cpus_on_a_kernel_without_the_sysfs_files(fake_host):
    add_topology(
        fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline=ISOLATED, write_sys_isolated=False
    )
    add_irqbalance(fake_host, pid=812, environ={})

    findings, _ = check(fake_host)

    assert [(f.labels["cpus"], f.labels["reason"]) for f in findings] == [("2-7", "automatic_ban")]


def test_silent_when_not_running_nothing_isolated_or_disabled(fake_host, tmp_path):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline=ISOLATED)
    add_irqbalance(fake_host, pid=None, env_file="debian", file_text="IRQBALANCE_BANNED_CPULIST=\n")
    assert check(fake_host) == ([], [])

    add_irqbalance(fake_host, pid=812, environ={"IRQBALANCE_BANNED_CPULIST": ""})
    assert check(fake_host, Intent(kernel=KernelIntent(check_irqbalance=False))) == ([], [])
    assert len(check(fake_host)[0]) == 1  # the same host, judged: an empty ban list bans nothing

    from fakehost import FakeHost

    plain = FakeHost(tmp_path / "plain")
    add_topology(plain, sockets=1, cores_per_socket=8, threads_per_core=1)
    add_irqbalance(plain, pid=812, environ={"IRQBALANCE_BANNED_CPULIST": ""})
    assert check(plain) == ([], [])


def test_an_unparsable_ban_list_is_not_evaluated(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline=ISOLATED)
    add_irqbalance(fake_host, pid=812, environ={"IRQBALANCE_BANNED_CPULIST": "two-seven"})

    findings, reasons = check(fake_host)

    assert findings == []
    assert "IRQBALANCE_BANNED_CPULIST='two-seven'" in reasons[0]
