"""kubelet_reserved_incoherent: the CPU reservation stated twice, or split cores under full-pcpus-only."""

from __future__ import annotations

from fakehost.reference import HOUSEKEEPING, reference_node, reference_snapshot, replace_config
from numawatch.checks import evaluate
from numawatch.checks.kubelet_reserved import KUBELET_RESERVED_INCOHERENT
from numawatch.cpuset import parse_cpulist
from numawatch.intent import REFERENCE
from numawatch.model import frozen_map


def findings(host):
    evaluation = evaluate(host, REFERENCE, [KUBELET_RESERVED_INCOHERENT])
    assert evaluation.not_evaluated == ()
    return evaluation.findings


def test_the_reference_node_reserves_memory_in_the_quantities_and_cpus_in_the_list(fake_host):
    assert findings(reference_node(fake_host).read()) == ()
    assert findings(reference_snapshot()) == ()


def test_cpu_quantities_next_to_reserved_cpus_fire_from_the_files(fake_host):
    node = reference_node(fake_host)
    node.write_kubelet_config(system_reserved={"cpu": "500m", "memory": "2Gi"}, kube_reserved={"cpu": "1"})

    (finding,) = findings(node.read())

    assert dict(finding.labels) == {
        "reason": "cpu_reservation_ignored", "setting": "system-reserved,kube-reserved", "value": "500m,1",
        "cpus": "0,8,16,24",
    }  # fmt: skip
    assert "system-reserved cpu=500m and kube-reserved cpu=1 is set together with reserved-cpus=0,8,16,24 (4 CPUs)" in (
        finding.message
    )
    assert finding.severity == "info"


def test_without_reserved_cpus_the_quantities_are_the_reservation():
    host = replace_config(reference_snapshot(), reserved_cpus=None, system_reserved=frozen_map({"cpu": "500m"}))
    assert findings(host) == ()


def test_reserved_cpus_that_split_cores_fire_only_under_full_pcpus_only():
    split = replace_config(reference_snapshot(), reserved_cpus=parse_cpulist("0,8"))
    full = replace_config(split, cpu_manager_policy_options=frozen_map({"full-pcpus-only": "true"}))
    whole = replace_config(reference_snapshot(), cpu_manager_policy_options=frozen_map({"full-pcpus-only": "true"}))

    (finding,) = findings(full)

    assert findings(split) == () and findings(whole) == ()
    assert dict(finding.labels) == {
        "reason": "reserved_cpus_split_cores", "setting": "reserved-cpus", "value": "0,8", "cpus": "16,24",
        "expected": "0,8,16,24",
    }  # fmt: skip
    assert "their other threads 16,24 stay in the shared pool" in finding.message
    assert 'kubelet-arg "reserved-cpus=0,8,16,24"' in finding.remediation
    assert "rm /var/lib/kubelet/cpu_manager_state" in finding.remediation
    assert parse_cpulist("0,8,16,24") == HOUSEKEEPING


def test_without_the_kubelet_config_it_is_not_evaluated():
    host = reference_snapshot()
    from fakehost.reference import with_source_down

    evaluation = evaluate(with_source_down(host, "kubelet_config"), REFERENCE, [KUBELET_RESERVED_INCOHERENT])
    assert "needs the kubelet_config source" in evaluation.not_evaluated[0].reason
