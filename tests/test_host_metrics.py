"""Host-layer metric families: what they expose, how many series, and that docs/metrics.md describes them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from fakehost.kernel import add_kernel_settings, host_layer_results
from fakehost.pods import ContainerSpec, add_pod
from fakehost.reference import reference_snapshot, with_results
from fakehost.topology import add_topology
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.cpuset import format_cpulist
from numawatch.host import Host, read_host
from numawatch.intent import REFERENCE, Intent
from numawatch.metrics import host as host_metrics
from numawatch.model import frozen_map
from numawatch.model.interrupts import IrqAffinity, Irqs
from numawatch.paths import Paths
from numawatch.sources.interrupts import parse_interrupts
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_interrupts import generate

HOST_FAMILIES = {
    "numawatch_kernel_setting_info", "numawatch_cpufreq_governor_info", "numawatch_hugepages",
    "numawatch_numa_node_hugepages", "numawatch_numastat_pages", "numawatch_container_memory_numa_bytes",
    "numawatch_intersocket_bytes", "numawatch_cpu_interrupts", "numawatch_irq_affinity_info",
    "numawatch_irqbalance_running", "numawatch_self_cpus",
}  # fmt: skip


def samples(evaluation) -> dict[str, list]:
    """Family name -> its samples, from the rendered exposition (what Prometheus would scrape)."""
    text = metrics.render(evaluation).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


@pytest.fixture(scope="module")
def capture(realkernel_root) -> dict[str, list]:
    return samples(evaluate(read_host(Paths.from_root(realkernel_root)), Intent()))


def test_every_host_family_is_exposed_even_without_data(tmp_path):
    empty = read_host(Paths.from_root(tmp_path))

    exposed = samples(evaluate(empty, Intent()))

    assert set(exposed) >= HOST_FAMILIES
    assert [s.name for s in exposed["numawatch_cpu_interrupts"]] == []


def test_interrupt_counters_exist_only_for_watched_cpus_and_four_kinds(capture):
    series = {(s.labels["cpu"], s.labels["kind"]): s.value for s in capture["numawatch_cpu_interrupts"]}

    assert {cpu for cpu, _ in series} == {"2", "3", "4", "5", "8", "9", "10", "11"}  # isolcpus; not offline 7
    assert len(series) == 8 * 4
    assert series[("3", "device")] == 149  # ttyS0 146 + i8042 3
    assert series[("8", "local_timer")] == 4254
    assert series[("8", "ipi")] == 10 + 463 + 82 + 46583  # RES + CAL + TLB + IWI


def test_irq_info_series_are_the_irqs_delivered_to_watched_cpus(capture):
    info = {s.labels["irq"]: s.labels for s in capture["numawatch_irq_affinity_info"]}

    assert set(info) == {"4", "8", "9", "12", "24", "25", "26", "28", "29", "32", "33", "35", "36", "38", "39", "41",
                         "42"}
    assert info["35"] == {"irq": "35", "name": "nvme0q5", "affinity": "8", "effective": "8", "managed": "true"}
    assert info["25"]["affinity"] == "0-6,8-11" and info["25"]["managed"] == "false"


def test_kernel_settings_and_numa_counters_of_the_capture(capture):
    settings = {s.labels["setting"]: s.labels["value"] for s in capture["numawatch_kernel_setting_info"]}
    numa = {(s.labels["numa_node"], s.labels["field"]): s.value for s in capture["numawatch_numastat_pages"]}
    pages = {(s.labels["numa_node"], s.labels["size"], s.labels["state"]): s.value
             for s in capture["numawatch_numa_node_hugepages"]}

    assert settings["vm.swappiness"] == "10"
    assert settings["transparent_hugepage/enabled"] == "madvise"
    assert (settings["isolcpus"], settings["nohz_full"], settings["rcu_nocbs"]) == ("2-5,8-11", "2-5,8-9", "2-3,8-11")
    assert settings["isolcpus_flags"] == "domain,managed_irq"
    assert numa[("2", "other_node")] == 1675
    assert pages[("1", "2048kB", "total")] == 8
    assert capture["numawatch_cpufreq_governor_info"] == []  # QEMU: no cpufreq


def test_governors_are_one_series_per_governor_with_a_cpu_list(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=2)
    governors = {cpu: "powersave" if cpu in (3, 5, 6, 7) else "performance" for cpu in layout.online}
    add_kernel_settings(fake_host, governors=governors)

    exposed = samples(evaluate(read_host(fake_host.paths), Intent()))

    assert sorted((s.labels["governor"], s.labels["cpus"]) for s in exposed["numawatch_cpufreq_governor_info"]) == [
        ("performance", "0-2,4,8-15"),
        ("powersave", "3,5-7"),
    ]


def test_container_memory_per_numa_node_on_cgroup_v1(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=1)
    page = os.sysconf("SC_PAGE_SIZE")
    add_pod(
        fake_host, uid="1f0e4d6a-1111-4222-8333-944455556666", qos="guaranteed", namespace="ml", name="vllm-0",
        containers=[ContainerSpec("vllm", cpus="4-7", mems="1", numa_bytes={0: 3 * page, 1: 1000 * page})],
        version=1, driver="cgroupfs",
    )

    exposed = samples(evaluate(read_host(fake_host.paths), Intent()))

    rows = {(s.labels["container"], s.labels["numa_node"]): s.value
            for s in exposed["numawatch_container_memory_numa_bytes"] if s.labels["namespace"] == "ml"}
    assert rows == {("vllm", "0"): 3 * page, ("vllm", "1"): 1000 * page}


def test_self_cpus_is_this_process_affinity():
    host = reference_snapshot()

    exposed = samples(evaluate(host, REFERENCE))

    (series,) = exposed["numawatch_self_cpus"]
    assert series.value == len(os.sched_getaffinity(0))
    assert series.labels["cpus"] == format_cpulist(os.sched_getaffinity(0))


def test_series_stay_in_the_hundreds_on_a_384_cpu_host_with_2000_irqs():
    """node_exporter makes one series per IRQ and CPU (768,000 here); numawatch's host families must not."""
    host = reference_snapshot()
    watched = frozenset(range(32, 64)) | frozenset(range(224, 256))
    parsed = parse_interrupts(generate(384, 2000), watched)
    # A badly placed host: every IRQ delivered round-robin over all CPUs, so 1 in 6 lands on a watched CPU.
    affinity = {
        row.irq: IrqAffinity(irq=row.irq, affinity=frozenset(range(384)), effective=frozenset({row.irq % 384}),
                             writable=True)
        for row in parsed.rows if row.irq is not None
    }
    big = with_results(host, interrupts=parsed, irqs=Irqs(irqs=frozen_map(affinity), read_only_modes_seen=True))

    families = list(host_metrics.families(evaluate(big, REFERENCE)))

    total = sum(len(family.samples) for family in families)
    interrupt_series = next(f for f in families if f.name == "numawatch_cpu_interrupts").samples
    assert len(interrupt_series) == 64 * 4
    assert total < 1000


def test_docs_metrics_describes_every_host_family_exactly():
    """The host families of a node with every host source up (and one IRQ planted on an isolated CPU) against the
    rows of docs/metrics.md: name, type, help text and labels."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_docs_metrics import documented, exposed, sample_labels

    host: Host = reference_snapshot()
    host = with_results(host, **host_layer_results(host.topology, irq_on_cpu=5))
    text = metrics.render(evaluate(host, REFERENCE)).decode()
    docs = documented()
    families = exposed(text)
    labels = sample_labels(text)

    for name in (f"{n}_total" if n in ("numawatch_numastat_pages", "numawatch_intersocket_bytes",
                                        "numawatch_cpu_interrupts") else n for n in HOST_FAMILIES):
        assert name in docs, name
        assert families[name] == (docs[name].type, docs[name].help), name
        assert frozenset(labels[name]) == docs[name].labels, name
