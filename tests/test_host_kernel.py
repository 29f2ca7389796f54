"""The kernel source (sysctls, THP, cpufreq, huge page pools) and the kernel tuning checks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.kernel import add_kernel_settings
from fakehost.topology import add_topology
from numawatch.checks import evaluate
from numawatch.checks.host_kernel import CHECK_BY_ID
from numawatch.errors import SourceUnavailable
from numawatch.host import HostReader, read_host
from numawatch.intent import REFERENCE, Intent, KernelIntent
from numawatch.model import frozen_map
from numawatch.paths import Paths
from numawatch.sources import kernel, numastat, topology
from numawatch.sources.kernel import (
    CmdlineRequests,
    parse_bracketed,
    parse_cmdline_hugepages_per_node,
    parse_governor,
    parse_per_node_requests,
    parse_sysctl_int,
)

HOST_SOURCES = (topology.SOURCE, kernel.SOURCE, numastat.SOURCE)


def run_check(host: FakeHost, check_id: str, intent: Intent | None = None):
    """(findings, not-evaluated reasons) of one check on a fake host."""
    snapshot = HostReader(host.paths, HOST_SOURCES).read()
    evaluation = evaluate(snapshot, intent or Intent(), [CHECK_BY_ID[check_id]])
    return list(evaluation.findings), [n.reason for n in evaluation.not_evaluated]


# --------------------------------------------------------------------------------------------------- parsers
def test_bracketed_mode_is_the_active_one_and_every_mode_is_kept():
    assert parse_bracketed("always [madvise] never\n") == ("madvise", ("always", "madvise", "never"))
    assert parse_bracketed("always inherit madvise [never]") == ("never", ("always", "inherit", "madvise", "never"))


@pytest.mark.parametrize("text", ["always madvise never", "[always] [madvise] never", "always [madvise never", ""])
def test_bracketed_file_without_exactly_one_active_mode_is_rejected(text):
    with pytest.raises(ValueError):
        parse_bracketed(text)


def test_sysctl_integers_accept_signs_and_reject_words():
    assert parse_sysctl_int("0\n") == 0
    assert parse_sysctl_int("-1") == -1
    for bad in ("", "abc", "1.5", "1 2", "+-3"):
        with pytest.raises(ValueError):
            parse_sysctl_int(bad)


def test_governor_names_are_single_words():
    assert parse_governor("performance\n") == "performance"
    for bad in ("", "per formance", "perf;rm"):
        with pytest.raises(ValueError):
            parse_governor(bad)


def test_per_node_hugepages_bind_to_the_preceding_size():
    cmdline = "default_hugepagesz=1G hugepages=0:2 hugepagesz=2M hugepages=0:512,1:256 hugepagesz=1G hugepages=16"

    assert parse_cmdline_hugepages_per_node(cmdline) == {0: {1048576: 2, 2048: 512}, 1: {2048: 256}}


def test_per_node_hugepages_skip_bad_values_and_sizes():
    assert parse_cmdline_hugepages_per_node("hugepagesz=bogus hugepages=0:4 hugepages=0:x,1:2 hugepages=8") == {}


def test_per_node_requests_of_a_real_command_line_are_frozen_and_handed_back_for_the_same_text(realkernel_root):
    cmdline = (realkernel_root / "proc/cmdline").read_text()

    first = parse_per_node_requests(cmdline)

    assert isinstance(first, CmdlineRequests) and first.cmdline == cmdline
    assert first.per_node == parse_cmdline_hugepages_per_node(cmdline)
    with pytest.raises(TypeError):
        first.per_node[0] = {}  # type: ignore[index]  # shared between snapshots: immutable
    assert parse_per_node_requests(cmdline, first) is first


@pytest.mark.parametrize(
    "cmdline",
    [
        "",  # a kernel booted without arguments
        "hugepages=0:4,1:x",  # a bad element: the whole request skipped, as the kernel skips it
        "hugepages=99999999999:4",  # a node past any there can be
        "hugepagesz=1G hugepages=0:2 hugepages=0:3",  # the last request for a size wins
    ],
)
def test_per_node_requests_with_or_without_a_previous_parse_are_the_same(cmdline):
    fresh = parse_per_node_requests(cmdline)

    for other in ("", "hugepagesz=1G hugepages=0:4,1:4", cmdline + " quiet"):
        assert parse_per_node_requests(cmdline, parse_per_node_requests(other)) == fresh
    assert dict(fresh.per_node) == parse_cmdline_hugepages_per_node(cmdline)


# --------------------------------------------------------------------------------------------------- reading
def test_reads_every_setting_from_a_fake_host(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1, hugepages_per_node={1048576: 4})
    add_kernel_settings(
        fake_host, numa_balancing=1, swappiness=60, thp_enabled="always", thp_defrag="defer",
        governors={0: "performance", 1: "powersave", 2: "performance", 3: "schedutil"},
    )

    settings = kernel.read(fake_host.paths)

    assert settings.numa_balancing == 1
    assert settings.swappiness == 60
    assert (settings.thp_enabled, settings.thp_defrag) == ("always", "defer")
    assert dict(settings.governors) == {0: "performance", 1: "powersave", 2: "performance", 3: "schedutil"}
    assert settings.hugepages[1048576].total == 8
    assert dict(settings.problems) == {}


def test_a_host_without_cpufreq_has_no_governors(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, governors=None)

    assert kernel.read(fake_host.paths).governors is None


def test_a_malformed_file_leaves_only_its_setting_unknown(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, swappiness=None)
    fake_host.write("proc/sys/vm/swappiness", "lots")

    settings = kernel.read(fake_host.paths)

    assert settings.swappiness is None
    assert settings.numa_balancing == 0
    assert "proc/sys/vm/swappiness" in settings.problems["swappiness"]
    assert "'lots'" in settings.problems["swappiness"]


def test_a_tree_without_sysctls_or_mm_is_unavailable(tmp_path):
    with pytest.raises(SourceUnavailable):
        kernel.read(Paths.from_root(tmp_path))


def test_the_realkernel_capture_reads_as_its_readme_says(realkernel_root):
    settings = kernel.read(Paths.from_root(realkernel_root))

    assert (settings.numa_balancing, settings.swappiness) == (0, 10)
    assert (settings.thp_enabled, settings.thp_defrag) == ("madvise", "madvise")
    assert settings.governors is None  # QEMU has no cpufreq
    assert settings.hugepages[2048].total == 32


@pytest.mark.realhost
def test_this_machine_sysctls_read_as_the_kernel_prints_them():
    settings = kernel.read(Paths.from_root("/"))

    assert int(Path("/proc/sys/vm/swappiness").read_text()) == settings.swappiness
    numa_balancing = Path("/proc/sys/kernel/numa_balancing")
    if numa_balancing.exists():
        assert int(numa_balancing.read_text()) == settings.numa_balancing
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():
        assert f"[{settings.thp_enabled}]" in thp.read_text()
    assert dict(settings.problems) == {}


# --------------------------------------------------------------------------------------------------- checks
def test_numa_balancing_on_fires_with_its_value(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, numa_balancing=1)

    findings, _ = run_check(fake_host, "kernel_numa_balancing")

    assert [dict(f.labels) for f in findings] == [{"setting": "kernel.numa_balancing", "value": "1", "expected": "0"}]


def not_applicable(host: FakeHost, check_id: str) -> list[str]:
    """The reasons one check gave for not applying to a fake host."""
    snapshot = HostReader(host.paths, HOST_SOURCES).read()
    return [item.reason for item in evaluate(snapshot, Intent(), [CHECK_BY_ID[check_id]]).not_applicable]


def test_numa_balancing_off_is_clean(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, numa_balancing=0)

    assert run_check(fake_host, "kernel_numa_balancing") == ([], [])
    assert not_applicable(fake_host, "kernel_numa_balancing") == []


def test_a_kernel_without_numa_balancing_is_not_applicable_not_clean_and_not_drift(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, numa_balancing=None)

    assert run_check(fake_host, "kernel_numa_balancing") == ([], [])
    (reason,) = not_applicable(fake_host, "kernel_numa_balancing")
    assert "the kernel has no NUMA balancing" in reason
    assert kernel.read(fake_host.paths).absent_features == {kernel.NUMA_BALANCING}


def test_numa_balancing_missing_with_its_whole_directory_is_not_evaluated(fake_host):
    """A tree without proc/sys/kernel (a partial capture) cannot tell whether the kernel has NUMA balancing."""
    add_topology(fake_host)
    fake_host.write("proc/sys/vm/swappiness", "0")

    findings, reasons = run_check(fake_host, "kernel_numa_balancing")

    assert findings == [] and not_applicable(fake_host, "kernel_numa_balancing") == []
    assert reasons == ["kernel.numa_balancing could not be read: proc/sys/kernel/numa_balancing is missing"]


def test_a_kernel_without_thp_makes_both_thp_checks_not_applicable(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, thp_enabled=None, thp_defrag=None)

    for check_id in ("thp_enabled", "thp_defrag"):
        assert run_check(fake_host, check_id) == ([], [])
        (reason,) = not_applicable(fake_host, check_id)
        assert "the kernel has no THP" in reason
    assert kernel.read(fake_host.paths).absent_features == {kernel.THP}


def test_thp_missing_with_sys_kernel_mm_missing_is_not_evaluated(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host)
    shutil.rmtree(fake_host.path("sys/kernel/mm"))

    findings, reasons = run_check(fake_host, "thp_enabled")

    assert findings == [] and not_applicable(fake_host, "thp_enabled") == []
    assert reasons == ["transparent_hugepage/enabled could not be read: the file is missing"]


def test_thp_always_fires_and_madvise_is_clean(fake_host, tmp_path):
    add_topology(fake_host)
    add_kernel_settings(fake_host, thp_enabled="always", thp_defrag="always")

    enabled, _ = run_check(fake_host, "thp_enabled")
    defrag, _ = run_check(fake_host, "thp_defrag")

    assert [(f.labels["value"], f.labels["expected"]) for f in enabled] == [("always", "madvise,never")]
    assert [(f.labels["value"], f.labels["expected"]) for f in defrag] == [("always", "madvise,never")]
    clean = FakeHost(tmp_path / "clean")
    add_topology(clean)
    add_kernel_settings(clean, thp_enabled="madvise", thp_defrag="never")
    assert run_check(clean, "thp_enabled") == ([], [])
    assert run_check(clean, "thp_defrag") == ([], [])


def test_thp_defrag_defer_fires_unless_the_intent_allows_it(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, thp_defrag="defer")
    lenient = Intent(kernel=KernelIntent(thp_defrag=frozenset({"defer", "madvise"})))

    assert len(run_check(fake_host, "thp_defrag")[0]) == 1
    assert run_check(fake_host, "thp_defrag", lenient) == ([], [])


def test_swappiness_differs_fires_and_equal_is_clean(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, swappiness=60)

    findings, _ = run_check(fake_host, "vm_swappiness")

    assert [(f.labels["value"], f.labels["expected"]) for f in findings] == [("60", "0")]
    assert findings[0].severity == "info"
    assert run_check(fake_host, "vm_swappiness", Intent(kernel=KernelIntent(swappiness=60))) == ([], [])


def test_malformed_swappiness_is_not_evaluated_with_the_file(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host)
    fake_host.write("proc/sys/vm/swappiness", "sixty")

    findings, reasons = run_check(fake_host, "vm_swappiness")

    assert findings == []
    assert "swappiness" in reasons[0] and "sixty" in reasons[0]


def test_governor_findings_name_each_governor_with_a_cpu_list_on_non_contiguous_ids(fake_host):
    # CPUs numbered 0,2,4,... (non-contiguous), one offline: only online CPUs are judged.
    layout = add_topology(
        fake_host, sockets=1, cores_per_socket=4, threads_per_core=1, cpu_ids=[0, 2, 4, 6], offline=[6]
    )
    add_kernel_settings(fake_host, governors={0: "performance", 2: "powersave", 4: "powersave", 6: "schedutil"})

    findings, _ = run_check(fake_host, "cpufreq_governor")

    assert frozenset({0, 2, 4}) == layout.online
    assert [dict(f.labels) for f in findings] == [{"governor": "powersave", "cpus": "2,4", "expected": "performance"}]


def test_governor_everywhere_performance_is_clean(fake_host):
    layout = add_topology(fake_host)
    add_kernel_settings(fake_host, governors="performance", cpus=layout.online)

    assert run_check(fake_host, "cpufreq_governor") == ([], [])


def test_governor_is_not_applicable_without_cpufreq(fake_host):
    add_topology(fake_host)
    add_kernel_settings(fake_host, governors=None)

    assert run_check(fake_host, "cpufreq_governor") == ([], [])
    assert not_applicable(fake_host, "cpufreq_governor") == [
        "no cpufreq policy on this host (no sys/devices/system/cpu/cpufreq/policy*)"
    ]


def test_kernel_checks_are_not_evaluated_when_the_source_is_down(tmp_path):
    host = FakeHost(tmp_path / "empty")

    findings, reasons = run_check(host, "kernel_numa_balancing")

    assert findings == []
    assert reasons and "kernel source" in reasons[0]


# --------------------------------------------------------------------------------------------------- isolation
def test_isolation_mismatch_in_the_capture_is_nohz_full_missing_10_11(realkernel_root):
    """isolcpus 2-5,8-11, nohz_full 2-5,8-9, rcu_nocbs 2-3,8-11: the kernel offloads nohz_full CPUs' callbacks too,
    so the effective RCU set equals isolcpus; only nohz_full really disagrees."""
    host = read_host(Paths.from_root(realkernel_root), HOST_SOURCES)

    evaluation = evaluate(host, Intent(), [CHECK_BY_ID["isolation_params_mismatch"]])

    assert [
        dict(f.labels) for f in evaluation.findings
    ] == [{"setting": "nohz_full", "cpus": "10-11", "value": "2-5,8-9", "expected": "2-5,8-11"}]


def test_isolation_params_naming_the_same_cpus_are_clean(fake_host):
    add_topology(fake_host, cmdline="isolcpus=managed_irq,domain,2-7 nohz_full=2-7 rcu_nocbs=2-7")

    assert run_check(fake_host, "isolation_params_mismatch") == ([], [])


def test_no_isolation_at_all_is_clean(fake_host):
    add_topology(fake_host)

    assert run_check(fake_host, "isolation_params_mismatch") == ([], [])


def test_rcu_nocbs_missing_a_cpu_outside_nohz_full_fires(fake_host):
    add_topology(fake_host, cmdline="isolcpus=2-7 nohz_full=2-5 rcu_nocbs=2-5")

    findings, _ = run_check(fake_host, "isolation_params_mismatch")

    assert {("nohz_full", "6-7"), ("rcu_nocbs", "6-7")} == {(f.labels["setting"], f.labels["cpus"]) for f in findings}


def test_nohz_full_without_isolcpus_fires_on_sub_numa_clusters(fake_host):
    """SNC: two nodes per socket; nohz_full alone does not remove CPUs from load balancing."""
    layout = add_topology(fake_host, sockets=2, cores_per_socket=4, nodes_per_socket=2, cmdline="nohz_full=1-3")

    findings, _ = run_check(fake_host, "isolation_params_mismatch")

    assert len(layout.cpu_nodes) == 4
    assert [
        (f.labels["setting"], f.labels["cpus"], f.labels.get("expected", "")) for f in findings
    ] == [("nohz_full", "1-3", "")]


# --------------------------------------------------------------------------------------------------- huge pages
def test_fewer_pages_than_the_command_line_asks_fires_per_size(fake_host):
    add_topology(
        fake_host, cmdline="default_hugepagesz=1G hugepagesz=1G hugepages=16", hugepages_per_node={1048576: 4}
    )

    findings, _ = run_check(fake_host, "hugepages_shortfall")

    assert [dict(f.labels) for f in findings] == [{"size": "1048576kB", "value": "8", "expected": "16"}]


def test_per_node_request_short_on_one_node_fires_with_the_node(fake_host):
    add_topology(
        fake_host,
        cmdline="hugepagesz=1G hugepages=0:4,1:4",
        hugepages_per_node=[{1048576: 4}, {1048576: 2}],
    )

    findings, _ = run_check(fake_host, "hugepages_shortfall")

    assert sorted(
        [
            {"size": "1048576kB", "value": "6", "expected": "8"},
            {"size": "1048576kB", "numa_node": "1", "value": "2", "expected": "4"},
        ],
        key=str,
    ) == sorted((dict(f.labels) for f in findings), key=str)


def test_intent_per_node_request_is_judged_on_sub_numa_nodes(fake_host):
    add_topology(fake_host, nodes_per_socket=2, hugepages_per_node={2048: 100})
    intent = Intent(kernel=KernelIntent(hugepages_per_node=frozen_map({3: frozen_map({2048: 128})})))

    findings, _ = run_check(fake_host, "hugepages_shortfall", intent)

    assert [(f.labels["numa_node"], f.labels["value"], f.labels["expected"]) for f in findings] == [("3", "100", "128")]


def test_enough_pages_reserved_is_clean(fake_host, realkernel_root):
    add_topology(fake_host, cmdline="hugepagesz=2M hugepages=64", hugepages_per_node={2048: 32})

    assert run_check(fake_host, "hugepages_shortfall") == ([], [])
    capture = read_host(Paths.from_root(realkernel_root), HOST_SOURCES)  # hugepages=32 of 2M, 32 reserved
    assert evaluate(capture, Intent(), [CHECK_BY_ID["hugepages_shortfall"]]).findings == ()


def test_serves_reader_parses_the_command_line_again_only_when_it_changes(fake_host, monkeypatch):
    """The per-node requests a reading takes over from the previous one are those a full read of the same command
    line finds, and a new command line is parsed again: the finding appears and goes as a full read says."""
    add_topology(fake_host, cmdline="hugepagesz=1G hugepages=0:4,1:4", hugepages_per_node=[{1048576: 4}, {1048576: 4}])
    reader = HostReader(fake_host.paths, HOST_SOURCES, stagger=4)
    parses: list[str] = []
    real = kernel.parse_cmdline_hugepages_per_node

    def spy(cmdline: str):
        parses.append(cmdline)
        return real(cmdline)

    monkeypatch.setattr(kernel, "parse_cmdline_hugepages_per_node", spy)

    def shortfall(host) -> list[dict[str, str]]:
        evaluation = evaluate(host, Intent(), [CHECK_BY_ID["hugepages_shortfall"]])
        return sorted((dict(f.labels) for f in evaluation.findings), key=str)

    first, second = reader.read(), reader.read()
    assert len(parses) == 1  # the second reading took the first one's parse over
    assert second.kernel == read_host(fake_host.paths, HOST_SOURCES).kernel
    assert second.kernel.cmdline_hugepages_per_node == {0: {1048576: 4}, 1: {1048576: 4}}
    assert shortfall(first) == shortfall(second) == []  # clean

    fake_host.write("proc/cmdline", "hugepagesz=1G hugepages=0:4,1:6")
    parses.clear()
    changed = reader.read()
    assert parses == ["hugepagesz=1G hugepages=0:4,1:6\n"]
    full = read_host(fake_host.paths, HOST_SOURCES)
    assert changed.kernel == full.kernel
    assert {"size": "1048576kB", "numa_node": "1", "value": "4", "expected": "6"} in shortfall(changed)
    assert shortfall(changed) == shortfall(full)  # firing, as a full read says


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_policy_governors_are_read_with_the_rest_of_the_kernel_source_missing(tmp_path):
    # A capture of the CPUs' sysfs only (a Grace-Blackwell machine's tree): no proc/sys, no sys/kernel/mm, but every
    # policy's scaling_governor. The governors are read; each other setting is unknown, and only its check degrades.
    for cpu in range(4):
        _write(tmp_path, f"sys/devices/system/cpu/cpufreq/policy{cpu}/affected_cpus", f"{cpu}\n")
        _write(tmp_path, f"sys/devices/system/cpu/cpufreq/policy{cpu}/scaling_governor", "schedutil\n")
    _write(tmp_path, "sys/devices/system/cpu/online", "0-3\n")

    evaluation = evaluate(read_host(Paths.from_root(tmp_path)), REFERENCE)

    assert evaluation.host.statuses["kernel"].up
    assert dict(evaluation.host.kernel.governors) == dict.fromkeys(range(4), "schedutil")
    assert [dict(f.labels) for f in evaluation.findings if f.check == "cpufreq_governor"] == [
        {"governor": "schedutil", "cpus": "0-3", "expected": "performance"}
    ]
    reasons = {item.check: item.reason for item in evaluation.not_evaluated}
    assert "swappiness" in reasons["vm_swappiness"] and "thp_enabled" in reasons


def test_the_kernel_source_is_down_without_any_of_its_directories(tmp_path):
    _write(tmp_path, "sys/devices/system/cpu/online", "0-3\n")

    with pytest.raises(SourceUnavailable, match="cpufreq"):
        kernel.read(Paths.from_root(tmp_path))


def test_per_cpu_cpufreq_of_kernels_before_policies_and_none_in_a_vm(tmp_path):
    # RHEL 7's 3.10: a real cpuN/cpufreq/ per CPU, no cpufreq/policyN; offline CPUs have none.
    _write(tmp_path, "proc/sys/vm/swappiness", "0\n")
    _write(tmp_path, "sys/devices/system/cpu/online", "0-1\n")
    for cpu, governor in ((0, "performance"), (1, "ondemand")):
        _write(tmp_path, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", f"{governor}\n")
    (tmp_path / "sys/devices/system/cpu/cpu2").mkdir()
    paths = Paths.from_root(tmp_path)

    assert dict(kernel.read(paths).governors) == {0: "performance", 1: "ondemand"}
    shutil.rmtree(tmp_path / "sys/devices/system/cpu/cpu0/cpufreq")
    shutil.rmtree(tmp_path / "sys/devices/system/cpu/cpu1/cpufreq")
    assert kernel.read(paths).governors is None  # a VM: no cpufreq at all, not applicable


def test_policy_governors_without_cpu_online_come_from_affected_cpus(tmp_path):
    _write(tmp_path, "proc/sys/vm/swappiness", "0\n")
    _write(tmp_path, "sys/devices/system/cpu/cpufreq/policy0/affected_cpus", "0 1\n")
    _write(tmp_path, "sys/devices/system/cpu/cpufreq/policy0/scaling_governor", "performance\n")
    _write(tmp_path, "sys/devices/system/cpu/cpufreq/policy2/affected_cpus", "\n")  # its CPUs are offline
    _write(tmp_path, "sys/devices/system/cpu/cpufreq/policy2/scaling_governor", "powersave\n")

    settings = kernel.read(Paths.from_root(tmp_path))

    assert dict(settings.governors) == {0: "performance", 1: "performance"}
    assert "cpufreq_governor" not in settings.problems
