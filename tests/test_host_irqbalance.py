"""The irqbalance source (is it running, what does it ban) and the irqbalance_unbanned check."""

from __future__ import annotations

from functools import partial

import pytest
from fakehost.kernel import add_irqbalance, add_process
from fakehost.topology import add_topology
from numawatch.checks import evaluate
from numawatch.checks.host_irq import CHECK_BY_ID
from numawatch.dataflow import bound_of, worst_case_evaluations
from numawatch.host import HostReader
from numawatch.inputs import Source
from numawatch.intent import Intent, KernelIntent
from numawatch.paths import Paths
from numawatch.refresh import DAEMON_SEARCH
from numawatch.sources import irqbalance, topology
from numawatch.sources.irqbalance import config_from, parse_env_file, parse_environ, socket_pids
from source_inputs import Driven

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


# --------------------------------------------------------------------------------------------------- the reader
EMPTY_SOCKETS = "Num       RefCount Protocol Flags    Type St Inode Path\n"


def searches(monkeypatch) -> list[tuple[int, ...]]:
    """The searches for the daemon from now on, as the PIDs each found."""
    found: list[tuple[int, ...]] = []
    real = irqbalance.find_pids

    def recording(*args):
        pids = real(*args)
        found.append(pids)
        return pids

    monkeypatch.setattr(irqbalance, "find_pids", recording)
    return found


def test_the_reader_remembers_the_daemon_and_only_checks_it_still_runs(fake_host, monkeypatch):
    add_process(fake_host, 1, "systemd")
    add_irqbalance(fake_host, pid=812, socket=True, environ={"IRQBALANCE_BANNED_CPULIST": "2-7"})
    reader = Driven(
        "irqbalance", incremental=partial(irqbalance.read_incremental, rescan_every=2, rescan_running_every=5)
    )
    one_off = irqbalance.read(fake_host.paths)
    found = searches(monkeypatch)

    readings = [reader.read(fake_host.paths) for _ in range(5)]

    assert found == [(812,)]  # one search; the next four readings checked PID 812's comm and start time
    assert all(state == one_off for state in readings)
    reader.read(fake_host.paths)
    assert found[1:] == [(812,)]  # while it runs, every rescan_running_every-th reading searches again (not the
    # rescan_every-th: all a search could add is a second daemon)


def test_a_daemon_that_died_and_restarted_under_a_new_pid_is_found_at_the_next_reading(fake_host, monkeypatch):
    add_irqbalance(fake_host, pid=812, socket=True, environ={})
    reader = Driven("irqbalance")
    assert reader.read(fake_host.paths).pids == (812,)
    found = searches(monkeypatch)

    fake_host.remove("proc/812")
    add_irqbalance(fake_host, pid=1977, socket=True, environ={"IRQBALANCE_BANNED_CPULIST": "4"})

    state = reader.read(fake_host.paths)
    assert (state.pids, state.config.banned_cpulist) == ((1977,), frozenset({4}))
    assert found == [(1977,)]
    reader.read(fake_host.paths)
    assert found == [(1977,)]  # remembered again


def test_a_pid_reused_by_another_irqbalance_start_is_searched_again(fake_host, monkeypatch):
    add_irqbalance(fake_host, pid=812, socket=True, environ={}, started=1000)
    reader = Driven("irqbalance")
    reader.read(fake_host.paths)
    found = searches(monkeypatch)

    add_irqbalance(fake_host, pid=812, socket=True, environ={}, started=5000)  # same PID, another process
    reader.read(fake_host.paths)

    assert found == [(812,)]


def test_an_absent_daemon_is_searched_for_every_rescan_every_readings(fake_host, monkeypatch):
    fake_host.write("proc/1/net/unix", EMPTY_SOCKETS)
    add_process(fake_host, 1, "systemd")
    reader = Driven("irqbalance", incremental=partial(irqbalance.read_incremental, rescan_every=3))
    found = searches(monkeypatch)

    assert [reader.read(fake_host.paths).pids for _ in range(3)] == [(), (), ()]
    assert found == [()]
    add_irqbalance(fake_host, pid=812, socket=True, environ={})  # started without a socket file in run/irqbalance
    assert reader.read(fake_host.paths).pids == (812,)  # the third reading since the search: searched again
    assert found == [(), (812,)]


@pytest.mark.parametrize("stagger", [1, 4])
def test_the_refresh_tables_search_period_is_the_one_explain_counts(fake_host, monkeypatch, stagger):
    fake_host.write("proc/1/net/unix", EMPTY_SOCKETS)
    add_process(fake_host, 1, "systemd")
    reader = Driven("irqbalance", stagger=stagger)
    found = searches(monkeypatch)
    period = bound_of(Source("irqbalance", DAEMON_SEARCH), stagger).evaluations
    assert period > 1

    for _ in range(period):
        assert reader.read(fake_host.paths).pids == ()
    assert found == [()]  # the first reading's search, then none until the period has passed
    add_irqbalance(fake_host, pid=812, socket=True, environ={})  # started without a socket file in run/irqbalance
    assert reader.read(fake_host.paths).pids == (812,)
    assert found == [(), (812,)]
    assert worst_case_evaluations("irqbalance_unbanned", stagger) >= period


def test_a_socket_file_in_run_irqbalance_makes_the_reader_search_at_once_and_names_the_candidate(
    fake_host, monkeypatch
):
    fake_host.write("proc/1/net/unix", EMPTY_SOCKETS)  # listening outside the abstract namespace
    reader = Driven("irqbalance")
    assert reader.read(fake_host.paths).pids == ()
    found = searches(monkeypatch)

    add_irqbalance(fake_host, pid=2024, environ={})
    fake_host.write("run/irqbalance/irqbalance2024.sock", "")

    assert reader.read(fake_host.paths).pids == (2024,)
    assert found == [(2024,)]
    fake_host.remove("run/irqbalance/irqbalance2024.sock")  # stopped: its socket file goes with it
    fake_host.remove("proc/2024")
    assert reader.read(fake_host.paths).pids == ()


def test_a_refresh_searches_at_the_next_reading(fake_host, monkeypatch):
    add_irqbalance(fake_host, pid=812, socket=True, environ={})
    reader = Driven("irqbalance")
    reader.read(fake_host.paths)
    found = searches(monkeypatch)

    reader.refresh_all()  # SIGHUP
    reader.read(fake_host.paths)

    assert found == [(812,)]


@pytest.mark.parametrize(
    ("data", "identity"),
    [
        (b"812 (irqbalance) S 1 812 812 0 -1 4194560 8 0 0 0 1 1 0 0 20 0 1 0 4242 10948608 782\n",
         ("irqbalance", 4242)),
        (b"9 (a) b) (c) S 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0", ("a) b) (c", 77)),  # parentheses in comm
        (b"812 (irqbalance) S 1 812 812 0 -1", None),  # cut short: no start time
        (b"812 (irqbalance) S 1 812 812 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 x 0 0", None),
        (b"812 irqbalance S", None),
        (b"", None),
        (b"\0\0\0", None),
    ],
)
def test_stat_identity_is_comm_and_start_time(data, identity):
    assert irqbalance.parse_stat_identity(data) == identity


def test_hinted_pids_come_from_socket_file_names():
    assert irqbalance.hinted_pids(["irqbalance812.sock", "irqbalance.sock", "other", "irqbalance12x.sock"]) == [812]


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


FULL = 10  # readings between two scans of every process, in the test below


def test_without_the_socket_table_a_search_reads_only_the_comm_of_new_processes(fake_host):
    # No <procfs>/1/net/unix (the socket table cannot be read) and no irqbalance among 300 processes: the first
    # search reads every comm; the next ones only those of processes that appeared since, and every
    # search once FULL readings passed since the last full one all of them again (a process that exec'd irqbalance
    # under a PID already seen).
    from open_audit import recording

    for pid in range(1000, 1300):
        add_process(fake_host, pid, "worker")
    reader = Driven(
        "irqbalance",
        incremental=partial(
            irqbalance.read_incremental, rescan_every=1, rescan_running_every=1, full_scan_every=FULL
        ),
    )

    def comm_opens() -> int:
        with recording() as opened:
            state = reader.read(fake_host.paths)
        assert not state.running or state.pids == (4242,)
        return sum(1 for path in opened if path.endswith("/comm"))

    counts = [comm_opens()]
    counts.append(comm_opens())
    add_process(fake_host, 1300, "worker")
    counts.append(comm_opens())
    add_irqbalance(fake_host, pid=4242, environ={})  # a daemon started since: a new PID, found at the next search
    counts.append(comm_opens())
    assert reader.read(fake_host.paths).pids == (4242,)
    assert counts == [300, 0, 1, 1]
    for _ in range(FULL):
        counts.append(comm_opens())
    # The daemon found is looked at at every search; one search among them reads every process's comm again.
    assert sorted(counts[4:]) == [1] * (FULL - 1) + [302]
    assert reader.read(fake_host.paths).pids == (4242,)
