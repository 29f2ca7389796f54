from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from fakehost.kubelet import write_cpu_manager_state, write_memory_manager_state, write_rke2_data_dir
from fakehost.reference import (
    CPU_STATE_FILE,
    HOUSEKEEPING,
    MEMORY_STATE_FILE,
    ONLINE,
    TRTLLM,
    VLLM,
    GiB,
    machine_state_tables,
    reference_node,
    reference_snapshot,
    replace_config,
    replace_state,
    with_results,
    with_source_down,
)
from numawatch.checks import SEVERITIES, SUBJECT_LABELS, all_checks, evaluate
from numawatch.checks.kubelet import machine_state_difference
from numawatch.intent import REFERENCE, Intent
from numawatch.kubelet_version import era_of, parse_version, running_kubelet_version
from numawatch.metrics import drift as metrics_drift
from numawatch.model import frozen_map
from numawatch.model.kubelet import (
    SINCE_1_36,
    UNTIL_1_35,
    MemoryBlock,
    MemoryManagerState,
    MemoryNodeState,
    MemoryTable,
    StateFileProblem,
)
from numawatch.model.topology import NumaNode

DOCS = Path(__file__).resolve().parents[1] / "docs"


def check(check_id: str):
    return next(c for c in all_checks() if c.id == check_id)


def findings(check_id, host, intent=REFERENCE):
    evaluation = evaluate(host, intent, [check(check_id)])
    assert evaluation.not_evaluated == (), evaluation.not_evaluated
    return evaluation.findings


def not_evaluated(check_id, host, intent=REFERENCE) -> str:
    evaluation = evaluate(host, intent, [check(check_id)])
    assert evaluation.findings == ()
    (reason,) = evaluation.not_evaluated
    assert not reason.reason.startswith("internal error"), reason.reason
    return reason.reason


# --------------------------------------------------------------------------------------------- policies
POLICIES = [
    ("kubelet_cpu_manager_policy", "cpu_manager_policy", "cpu-manager-policy", "none", "static"),
    (
        "kubelet_topology_manager_policy",
        "topology_manager_policy",
        "topology-manager-policy",
        "best-effort",
        "single-numa-node",
    ),
    ("kubelet_topology_manager_scope", "topology_manager_scope", "topology-manager-scope", "container", "pod"),
    ("kubelet_memory_manager_policy", "memory_manager_policy", "memory-manager-policy", "None", "Static"),
]


@pytest.mark.parametrize(("check_id", "attr", "flag", "drifted", "intended"), POLICIES)
def test_policy_check_is_clean_on_the_reference_node(check_id, attr, flag, drifted, intended):
    assert findings(check_id, reference_snapshot()) == ()


@pytest.mark.parametrize(("check_id", "attr", "flag", "drifted", "intended"), POLICIES)
def test_policy_check_fires_with_setting_value_and_expected(check_id, attr, flag, drifted, intended):
    host = replace_config(reference_snapshot(), **{attr: drifted})

    (finding,) = findings(check_id, host)

    assert dict(finding.labels) == {"setting": flag, "value": drifted, "expected": intended}
    assert drifted in finding.message and intended in finding.message
    assert f'kubelet-arg "{flag}={intended}"' in finding.remediation
    assert "/etc/rancher/rke2/config.yaml" in finding.remediation


@pytest.mark.parametrize(("check_id", "attr", "flag", "drifted", "intended"), POLICIES)
def test_policy_check_says_when_the_value_is_the_kubelets_default(check_id, attr, flag, drifted, intended):
    config = reference_snapshot().kubelet_config
    field_name = {
        "cpu_manager_policy": "cpuManagerPolicy",
        "topology_manager_policy": "topologyManagerPolicy",
        "topology_manager_scope": "topologyManagerScope",
        "memory_manager_policy": "memoryManagerPolicy",
    }[attr]
    host = replace_config(reference_snapshot(), **{attr: drifted}, explicit=config.explicit - {field_name})

    (finding,) = findings(check_id, host)

    assert "the kubelet's default" in finding.message


def test_cpu_policy_change_remediation_deletes_the_cpu_state_file_while_the_kubelet_is_stopped():
    host = replace_config(reference_snapshot(), cpu_manager_policy="none")

    (finding,) = findings("kubelet_cpu_manager_policy", host)

    steps = finding.remediation
    assert steps.index("drain") < steps.index("systemctl stop rke2-agent") < steps.index(f"rm {CPU_STATE_FILE}")
    assert steps.index(f"rm {CPU_STATE_FILE}") < steps.index("systemctl start rke2-agent")


def test_memory_policy_remediation_asks_for_reserved_memory_when_none_is_set():
    host = replace_config(reference_snapshot(), memory_manager_policy="None", reserved_memory=frozen_map())

    (finding,) = findings("kubelet_memory_manager_policy", host)

    assert f"rm {MEMORY_STATE_FILE}" in finding.remediation
    assert "reserved-memory=" in finding.remediation


def test_policy_remediation_on_a_kubeadm_node_names_the_kubelet_config_file():
    host = replace_config(
        reference_snapshot(),
        flavor="kubeadm",
        files=("/var/lib/kubelet/config.yaml",),
        topology_manager_scope="container",
    )

    (finding,) = findings("kubelet_topology_manager_scope", host)

    assert "topologyManagerScope: pod in /var/lib/kubelet/config.yaml" in finding.remediation
    assert "systemctl restart kubelet" in finding.remediation


def test_policy_check_compares_with_the_intents_value():
    host = replace_config(reference_snapshot(), topology_manager_policy="restricted")

    assert findings("kubelet_topology_manager_policy", host, Intent(topology_manager_policy="restricted")) == ()


def test_policy_check_is_not_evaluated_without_the_kubelet_config_and_says_why():
    host = with_source_down(reference_snapshot(), "kubelet_config", "no kubelet configuration found under /etc")

    reason = not_evaluated("kubelet_cpu_manager_policy", host)

    assert "kubelet_config" in reason and "no kubelet configuration found" in reason


# --------------------------------------------------------------------------------------------- reserved CPUs
def test_reserved_cpus_equal_to_housekeeping_is_clean():
    assert findings("kubelet_reserved_cpus_mismatch", reference_snapshot()) == ()


def test_reserved_cpus_that_are_not_the_housekeeping_cpus_fire_with_both_lists():
    # The seed's example: the host isolates one set, RKE2 reserves another (here: packed numbering assumed on an
    # interleaved host, so "core 0 of each socket" became 0-1,16-17).
    host = replace_config(reference_snapshot(), reserved_cpus=frozenset({0, 1, 16, 17}))

    (finding,) = findings("kubelet_reserved_cpus_mismatch", host)

    assert dict(finding.labels) == {"cpus": "0-1,16-17", "expected": "0,8,16,24"}
    assert "isolated CPUs 1,17 are kept for system daemons" in finding.message
    assert "CPUs 8,24 can be given exclusively to pods" in finding.message
    assert 'kubelet-arg "reserved-cpus=0,8,16,24"' in finding.remediation
    assert f"rm {CPU_STATE_FILE}" in finding.remediation


def test_unset_reserved_cpus_fire_and_name_the_cpu_reservation_the_kubelet_uses_instead():
    host = replace_config(
        reference_snapshot(), reserved_cpus=None, kube_reserved=frozen_map({"cpu": "1", "memory": "1536Mi"})
    )

    (finding,) = findings("kubelet_reserved_cpus_mismatch", host)

    assert dict(finding.labels) == {"expected": "0,8,16,24"}
    assert "not set" in finding.message and "kube-reserved=1" in finding.message


def test_reserved_cpus_are_compared_with_the_intents_list_when_it_gives_one():
    intent = Intent(reserved_cpus=frozenset({0, 1}))

    (finding,) = findings("kubelet_reserved_cpus_mismatch", reference_snapshot(), intent)

    assert dict(finding.labels) == {"cpus": "0,8,16,24", "expected": "0-1"}


def test_reserved_cpus_are_not_evaluated_when_the_node_isolates_nothing_and_intent_gives_no_list():
    host = reference_snapshot()
    topology = host.topology
    host = with_results(
        host,
        topology=replace(topology, isolation=replace(topology.isolation, isolcpus=None, sys_isolated=frozenset())),
    )

    assert "isolcpus" in not_evaluated("kubelet_reserved_cpus_mismatch", host)


# --------------------------------------------------------------------------------------------- stale state files
def stale(host):
    return {(f.labels["file"], f.labels["reason"]): f for f in findings("kubelet_state_stale", host)}


def test_valid_state_files_are_not_stale():
    assert stale(reference_snapshot()) == {}


def test_cpu_state_written_under_another_policy_is_stale():
    # The seed's gotcha: cpu-manager-policy changed to static without deleting cpu_manager_state.
    host = reference_snapshot()
    host = replace_state(host, cpu=replace(host.kubelet_state.cpu, policy_name="none"))

    finding = stale(host)[(CPU_STATE_FILE, "policy_mismatch")]

    assert 'configured policy "static" differs from state checkpoint policy "none"' in finding.message
    assert f"rm {CPU_STATE_FILE}" in finding.remediation
    assert finding.severity == "critical"


def test_memory_state_policy_is_compared_with_the_kubelets_capitalised_names():
    host = replace_config(reference_snapshot(), memory_manager_policy="None")

    finding = stale(host)[(MEMORY_STATE_FILE, "policy_mismatch")]

    assert '"None" differs from state checkpoint policy "Static"' in finding.message


def test_state_file_problems_reported_by_the_source_are_stale():
    problems = (
        StateFileProblem(CPU_STATE_FILE, "checksum_mismatch", "checksum 1 in the file, 2 computed"),
        StateFileProblem(MEMORY_STATE_FILE, "unparsable", "not JSON: line 1"),
    )
    host = replace_state(reference_snapshot(), problems=problems, cpu=None, memory=None)

    found = stale(host)

    assert set(found) == {(CPU_STATE_FILE, "checksum_mismatch"), (MEMORY_STATE_FILE, "unparsable")}
    assert "checksum 1 in the file" in found[(CPU_STATE_FILE, "checksum_mismatch")].message


def test_reserved_cpus_outside_the_default_set_are_stale():
    # reserved-cpus widened after the state was written: CPU 1 is now reserved but still exclusive to vllm.
    host = replace_config(reference_snapshot(), reserved_cpus=HOUSEKEEPING | {1})

    finding = stale(host)[(CPU_STATE_FILE, "reserved_cpus_missing")]

    assert 'not all reserved cpus "0-1,8,16,24" are present in defaultCpuSet' in finding.message


def test_reserved_cpus_are_expected_outside_the_default_set_under_strict_cpu_reservation():
    host = replace_config(
        reference_snapshot(), cpu_manager_policy_options=frozen_map({"strict-cpu-reservation": "true"})
    )

    found = stale(host)

    assert set(found) == {(CPU_STATE_FILE, "reserved_cpus_in_default")}


def test_online_cpus_that_changed_since_the_state_was_written_make_it_stale():
    host = reference_snapshot()
    host = with_results(host, topology=replace(host.topology, online=ONLINE - {31}))

    finding = stale(host)[(CPU_STATE_FILE, "online_cpus_changed")]

    assert 'current set of available CPUs "0-30"' in finding.message


def test_an_exclusive_entry_inside_the_default_set_is_stale():
    host = reference_snapshot()
    cpu = host.kubelet_state.cpu
    host = replace_state(host, cpu=replace(cpu, default_cpuset=cpu.default_cpuset | {2}))

    assert (CPU_STATE_FILE, "assignment_overlaps_default") in stale(host)


def test_an_empty_cpu_state_is_initialised_afresh_not_stale():
    host = reference_snapshot()
    cpu = replace(host.kubelet_state.cpu, default_cpuset=frozenset(), entries=frozen_map())
    host = with_results(replace_state(host, cpu=cpu), topology=replace(host.topology, online=ONLINE - {31}))

    assert stale(host) == {}


def test_cpu_state_checks_beyond_the_policy_apply_only_to_the_static_policy():
    host = replace_config(reference_snapshot(), cpu_manager_policy="none", reserved_cpus=frozenset({5}))
    host = replace_state(host, cpu=replace(host.kubelet_state.cpu, policy_name="none"))

    assert (CPU_STATE_FILE, "reserved_cpus_missing") not in stale(host)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({0: {"mem_total_bytes": 64 * GiB - 4096}}, id="MemTotal moved by one page after a kernel update"),
        pytest.param({1: {"hugepages_total": frozen_map({2048: 0, 1048576: 6})}}, id="more boot-time huge pages"),
        pytest.param({1: {"hugepages_total": frozen_map({1048576: 4})}}, id="a huge page size disappeared"),
    ],
)
def test_memory_state_is_stale_when_the_machine_changed(change):
    host = reference_snapshot()
    topology = host.topology
    nodes = {n: replace(node, **change.get(n, {})) for n, node in topology.nodes.items()}
    host = with_results(host, topology=replace(topology, nodes=frozen_map(nodes)))

    finding = stale(host)[(MEMORY_STATE_FILE, "machine_state_changed")]

    assert "the expected machine state is different from the real one" in finding.message


def test_memory_state_is_stale_when_reserved_memory_changed():
    host = replace_config(reference_snapshot(), reserved_memory=frozen_map({0: frozen_map({"memory": 4 * GiB})}))

    finding = stale(host)[(MEMORY_STATE_FILE, "machine_state_changed")]

    assert "NUMA node 0 memory systemReserved is 2147483648 in the checkpoint, 4294967296 on the machine" in (
        finding.message
    )


def test_memory_state_is_stale_when_its_assignment_counts_do_not_match_its_entries():
    host = reference_snapshot()
    memory = host.kubelet_state.memory
    entries = {uid: containers for uid, containers in memory.entries.items() if uid != TRTLLM.uid}
    host = replace_state(host, memory=replace(memory, entries=frozen_map(entries)))

    finding = stale(host)[(MEMORY_STATE_FILE, "machine_state_changed")]

    assert "NUMA node 1: 1 assignments in the checkpoint, 0 from its entries" in finding.message


def test_machine_state_replay_accepts_the_published_two_node_gpu_example():
    # kubelet.md §2.2, "Synthesized 2-NUMA GPU node": 256 GiB per node, 4 GiB reserved on NUMA0, two pods on NUMA1.
    zero = MemoryTable(0, 0, 0, 0, 0)
    recorded = MemoryManagerState(
        file=MEMORY_STATE_FILE,
        version=1,
        policy_name="Static",
        machine_state=frozen_map(
            {
                0: MemoryNodeState(
                    0,
                    frozen_map(
                        {
                            "hugepages-1Gi": zero,
                            "hugepages-2Mi": zero,
                            "memory": MemoryTable(274877906944, 4294967296, 270582939648, 0, 270582939648),
                        }
                    ),
                    (0,),
                ),
                1: MemoryNodeState(
                    2,
                    frozen_map(
                        {
                            "hugepages-1Gi": zero,
                            "hugepages-2Mi": zero,
                            "memory": MemoryTable(274877906944, 0, 274877906944, 103079215104, 171798691840),
                        }
                    ),
                    (1,),
                ),
            }
        ),
        entries=frozen_map(
            {
                "7f9c2a3e-5b1d-4c8e-9a0f-2d6b8e1c4a57": {"vllm": (MemoryBlock((1,), "memory", 68719476736),)},
                "c41d8e2b-0a6f-4f3b-8d2e-6b9a1c7e3f05": {"trtllm": (MemoryBlock((1,), "memory", 34359738368),)},
            }
        ),
    )
    nodes = {
        n: NumaNode(n, frozenset(), mem_total_bytes=274877906944, hugepages_total=frozen_map({2048: 0, 1048576: 0}))
        for n in (0, 1)
    }

    assert machine_state_difference(recorded, {0: {"memory": 4294967296}}, nodes) is None
    assert machine_state_difference(recorded, {0: {"memory": 2147483648}}, nodes) is not None


def test_a_multi_node_memory_assignment_is_compared_summed_over_its_cells():
    # One 70 GiB block with affinity [0, 1] on two 58 GiB-allocatable nodes: the kubelet fills one node then the
    # other, in whichever order; only the group's free/reserved totals are compared.
    host = reference_snapshot()
    memory = host.kubelet_state.memory
    block = MemoryBlock((0, 1), "memory", 70 * GiB)
    tables = {}
    for node, (reserved, free) in {0: (12 * GiB, 46 * GiB), 1: (58 * GiB, 0)}.items():  # filled 1 first, then 0
        base = memory.machine_state[node]
        table = MemoryTable(64 * GiB, 2 * GiB, 58 * GiB, reserved, free)
        tables[node] = MemoryNodeState(1, frozen_map({**base.memory_map, "memory": table}), (0, 1))
    tables = {
        n: replace(
            t, memory_map=frozen_map({**t.memory_map, "hugepages-1Gi": MemoryTable(4 * GiB, 0, 4 * GiB, 0, 4 * GiB)})
        )
        for n, t in tables.items()
    }
    host = replace_state(
        host,
        memory=replace(memory, machine_state=frozen_map(tables), entries=frozen_map({VLLM.uid: {"vllm": (block,)}})),
    )

    assert stale(host) == {}


def test_state_stale_is_not_evaluated_without_the_kubelet_state_source():
    host = with_source_down(reference_snapshot(), "kubelet_state", "no /var/lib/kubelet")

    assert "no /var/lib/kubelet" in not_evaluated("kubelet_state_stale", host)


# --------------------------------------------------------------------------------------------- the registry and docs
def test_every_check_has_a_known_severity_summary_remediation_and_unique_id():
    ids = [c.id for c in all_checks()]

    assert len(ids) == len(set(ids))
    for item in all_checks():
        assert item.severity in SEVERITIES, item.id
        assert item.summary and item.remediation, item.id
        assert re.fullmatch(r"[a-z][a-z0-9_]*", item.id), item.id


def test_the_core_checks_are_registered_with_the_ids_the_brief_names():
    core = {
        "kubelet_cpu_manager_policy", "kubelet_topology_manager_policy", "kubelet_topology_manager_scope",
        "kubelet_memory_manager_policy", "kubelet_reserved_cpus_mismatch", "kubelet_state_stale",
        "pod_not_guaranteed", "container_not_exclusive", "container_cpuset_drift", "exclusive_cpu_overlap",
        "container_numa_split", "container_gpu_numa_mismatch", "container_memory_numa_mismatch",
        "container_memory_remote", "container_outside_isolated", "gpu_numa_unknown",
    }  # fmt: skip

    assert core <= {c.id for c in all_checks()}


def documented_check_ids() -> list[str]:
    text = (DOCS / "checks.md").read_text()
    return re.findall(r"^### `([a-z0-9_]+)`", text, flags=re.MULTILINE)


def test_every_registered_check_has_a_section_in_docs_checks_md_and_every_section_a_check():
    documented = documented_check_ids()
    registered = [c.id for c in all_checks()]

    assert len(documented) == len(set(documented)), "a check is documented twice"
    assert sorted(documented) == sorted(registered)


def test_every_check_section_gives_severity_labels_and_a_fix():
    text = (DOCS / "checks.md").read_text()
    sections = re.split(r"^#{2,3} ", text, flags=re.MULTILINE)[1:]
    by_id = {c.id: c for c in all_checks()}
    for section in sections:
        match = re.match(r"`([a-z0-9_]+)`", section)
        if match is None or match.group(1) not in by_id:
            continue
        item = by_id[match.group(1)]
        assert f"**Severity:** {item.severity}" in section, item.id
        paragraph = re.search(r"\*\*Labels:\*\* (.*?)(?:\n\n|$)", section, re.S)
        assert paragraph is not None, item.id
        parts = documented_label_parts(paragraph.group(1))
        contract = metrics_drift.CONTRACT.get(item.id)
        assert contract is not None, f"{item.id} has no label contract in metrics/drift.py"
        assert parts["Labels"] == set(contract.identity), item.id
        assert parts["Details"] == set(contract.details), item.id
        assert parts["Readings"] == set(contract.readings), item.id
        for label in set().union(*parts.values()):
            assert label in SUBJECT_LABELS, (item.id, label)
        assert "**Fix:**" in section, item.id


def documented_label_parts(text: str) -> dict[str, set[str]]:
    """The label names of "**Labels:** ... · **Details:** ... · **Readings:** ..." (parentheses explain values)."""
    parts = {"Labels": set(), "Details": set(), "Readings": set()}
    for index, chunk in enumerate(re.split(r"\*\*(Details|Readings):\*\*", "Labels:" + text)):
        if index == 0:
            part, body = "Labels", chunk
        elif index % 2:
            part = chunk
            continue
        else:
            body = chunk
        named = re.sub(r"\([^)]*\)", "", body)
        parts[part] |= set(re.findall(r"`([a-z_]+)`", named)) - {"check", "severity"}
    return parts


def test_reference_profile_checks_pass_and_housekeeping_is_what_the_reference_reserves():
    # Guard for the fixture itself: the snapshot's reserved CPUs are its housekeeping CPUs.
    host = reference_snapshot()

    assert host.topology.housekeeping == HOUSEKEEPING == host.kubelet_config.reserved_cpus


# --------------------------------------------------------------------------------------------- end to end, from files
def planted(fake_host, drift: str, **variant):
    node = reference_node(fake_host, **variant)
    getattr(node, drift)()
    return node.evaluate().findings


def fired(found, check_id):
    return [f for f in found if f.check == check_id]


@pytest.mark.parametrize(
    ("drift", "check_id", "labels"),
    [
        ("set_cpu_manager_policy", "kubelet_cpu_manager_policy", {"value": "none", "expected": "static"}),
        ("set_topology_manager_policy", "kubelet_topology_manager_policy", {"value": "best-effort"}),
        ("set_topology_manager_scope", "kubelet_topology_manager_scope", {"value": "container", "expected": "pod"}),
        ("set_memory_manager_policy", "kubelet_memory_manager_policy", {"value": "None", "expected": "Static"}),
        ("set_reserved_cpus", "kubelet_reserved_cpus_mismatch", {"cpus": "0-1,16-17", "expected": "0,8,16,24"}),
        ("fossilise_cpu_state", "kubelet_state_stale", {"file": CPU_STATE_FILE, "reason": "policy_mismatch"}),
        ("corrupt_cpu_state_checksum", "kubelet_state_stale", {"reason": "checksum_mismatch"}),
        ("take_cpu_offline", "kubelet_state_stale", {"file": CPU_STATE_FILE, "reason": "online_cpus_changed"}),
        ("change_mem_total", "kubelet_state_stale", {"file": MEMORY_STATE_FILE, "reason": "machine_state_changed"}),
    ],
)
@pytest.mark.parametrize(
    "variant", [pytest.param({}, id="rke2"), pytest.param({"flavor": "kubeadm", "cgroup_version": 1}, id="kubeadm")]
)
@pytest.mark.slow
def test_planted_kubelet_drift_is_caught_reading_the_files(fake_host, drift, check_id, labels, variant):
    found = fired(planted(fake_host, drift, **variant), check_id)

    assert found, f"{drift} did not make {check_id} fire"
    assert any(labels.items() <= f.labels.items() for f in found), [dict(f.labels) for f in found]


def test_policy_change_without_deleting_the_checkpoint_is_caught_before_the_restart(fake_host):
    # The seed's gotcha end to end: cpu-manager-policy flipped in config.yaml, cpu_manager_state left behind.
    found = planted(fake_host, "set_cpu_manager_policy")

    (stale_state,) = fired(found, "kubelet_state_stale")
    assert 'configured policy "none" differs from state checkpoint policy "static"' in stale_state.message
    assert "rm /var/lib/kubelet/cpu_manager_state" in stale_state.remediation


# --------------------------------------------------------------------------------------------- checkpoints by version
def stale_on(node, version: str | None = None, intent=REFERENCE):
    """kubelet_state_stale's findings on the node, with RKE2's data directory naming the kubelet ``version``."""
    if version is not None:
        write_rke2_data_dir(node.host, version)
    return [f for f in node.evaluate(intent).findings if f.check == "kubelet_state_stale"]


def test_a_v2_file_hashed_over_the_v3_struct_is_read_back_by_a_1_36_kubelet(fake_host):
    # The file master's kubelet restores ("Restore checkpoint from v2 (migration)"): no podEntries key, its checksum
    # the v3 struct's with an empty podEntries map.
    node = reference_node(fake_host)
    node.write_cpu_state(version=3)
    assert '"podEntries"' not in fake_host.path("var/lib/kubelet/cpu_manager_state").read_text()

    assert stale_on(node, "v1.37.1") == []


def test_a_v2_file_hashed_over_the_v3_struct_is_refused_by_a_1_35_kubelet(fake_host):
    node = reference_node(fake_host)
    node.write_cpu_state(version=3)

    (finding,) = stale_on(node, "v1.35.4")

    assert (finding.labels["reason"], finding.severity) == ("checksum_mismatch", "critical")
    assert "kubelet v1.35.4, from RKE2's data directory /var/lib/rancher/rke2/data/v1.35.4-rke2r1-" in finding.message
    assert "will refuse to start" in finding.message


def test_with_no_kubelet_version_a_file_only_some_versions_refuse_is_a_lenient_warning(fake_host):
    node = reference_node(fake_host)
    node.write_cpu_state(version=3)

    (finding,) = stale_on(node)

    assert (finding.labels["reason"], finding.severity) == ("checksum_mismatch", "warning")
    assert finding.message.startswith("kubelet <=1.35 will refuse to start with /var/lib/kubelet/cpu_manager_state")
    assert "judged leniently: set kubelet.version in the intent" in finding.message


def test_the_intent_names_the_kubelet_version_when_the_node_does_not(fake_host):
    node = reference_node(fake_host)
    node.write_cpu_state(version=3)

    assert stale_on(node, intent=replace(REFERENCE, kubelet_version="1.36")) == []
    (finding,) = stale_on(node, intent=replace(REFERENCE, kubelet_version="1.35"))
    assert finding.severity == "critical"
    assert "from the intent's kubelet.version" in finding.message


def test_rke2s_data_directory_wins_over_the_intent(fake_host):
    node = reference_node(fake_host)
    node.write_cpu_state(version=3)

    assert stale_on(node, "v1.36.0", intent=replace(REFERENCE, kubelet_version="1.35")) == []


@pytest.mark.parametrize("version", ["v1.35.4", "v1.37.1", None])
def test_a_corrupt_v3_cpu_checksum_is_reported_whatever_the_version(fake_host, version):
    node = reference_node(fake_host)
    node.write_cpu_state(version=3, pod_entries={"0f0e0d0c-0000-4000-8000-00000000000b": [30, 31]}, checksum=12345)

    (finding,) = stale_on(node, version)

    assert (finding.labels["reason"], finding.severity) == ("checksum_mismatch", "critical")
    assert "checksum 12345 in the file" in finding.message


@pytest.mark.parametrize("version", ["v1.35.4", "v1.37.1", None])
def test_a_corrupt_v2_memory_checksum_with_pod_entries_is_reported(fake_host, version):
    node = reference_node(fake_host)
    write_memory_manager_state(
        fake_host,
        machine_state=machine_state_tables(),
        entries={VLLM.uid: {VLLM.container.name: VLLM.memory_blocks}},
        version=2,
        pod_entries={VLLM.uid: VLLM.memory_blocks},
        checksum=101010,
    )

    found = {f.labels["reason"]: f for f in stale_on(node, version)}

    assert found["checksum_mismatch"].severity == "critical"
    assert found["checksum_mismatch"].labels["file"] == MEMORY_STATE_FILE


def test_a_v1_cpu_file_is_refused_by_a_1_36_kubelet_and_read_by_a_1_35_one(fake_host):
    node = reference_node(fake_host)
    write_cpu_manager_state(fake_host, default_cpuset="0-29", entries={"c0ffee" * 10 + "abcd": "30-31"}, version=1)

    (finding,) = [f for f in stale_on(node, "v1.36.2") if f.labels["reason"] == "unparsable"]
    assert finding.severity == "critical"
    assert "v1 format of kubelets <= 1.17, which kubelet 1.36+ no longer reads" in finding.message
    assert [f for f in stale_on(node, "v1.35.0") if f.labels["reason"] in ("unparsable", "checksum_mismatch")] == []


def test_a_corrupt_device_checkpoint_is_a_warning_not_a_crash_loop(fake_host):
    node = reference_node(fake_host)
    node.write_device_checkpoint()
    device_file = "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    text = fake_host.path(device_file).read_text()
    fake_host.write(device_file, re.sub(r'"Checksum":\d+', '"Checksum":5', text))

    (finding,) = stale_on(node, "v1.37.1")

    assert finding.severity == "warning"
    assert finding.labels["file"] == "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert 'logs "Continue after failing to read checkpoint file" and starts without it' in finding.message
    assert "NotReady" not in finding.message and "refuse to start" not in finding.message


def test_the_node_objects_kubelet_version_wins_over_rke2_and_the_intent():
    rke2 = parse_version("v1.35.4", "RKE2's data directory")
    assert running_kubelet_version(rke2, "1.35", node_reported="v1.37.2+rke2r1").text == "v1.37.2+rke2r1"
    assert running_kubelet_version(rke2, "1.37").text == "v1.35.4"
    assert running_kubelet_version(None, "1.37").origin == "the intent's kubelet.version"
    assert running_kubelet_version(None, None, node_reported="not a version") is None
    assert running_kubelet_version(None, None) is None


@pytest.mark.parametrize(
    ("text", "era"),
    [("v1.35.9", UNTIL_1_35), ("1.36", SINCE_1_36), ("v1.37.0-alpha.1", SINCE_1_36), ("v2.0.0", SINCE_1_36)],
)
def test_versions_map_to_the_rule_set_they_follow(text, era):
    assert era_of(parse_version(text, "test")) == era
