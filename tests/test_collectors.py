"""--collector.<name> / --no-collector.<name>: the families that grow with the node can be turned off (issue 18)."""

from __future__ import annotations

import re

import pytest
from numawatch import collectors
from numawatch.cli import build_parser
from numawatch.collectors import COLLECTORS, Collectors
from numawatch.intent import REFERENCE
from numawatch.server import Sampler
from serving import numawatch_serve
from test_docs_metrics import documented, exposition  # noqa: F401  (the fixture: the reference node with NVML)
from test_hostile_host import wait_until_ready


def parsed(*flags: str) -> Collectors:
    return collectors.from_args(build_parser().parse_args(["serve", *flags]))


def exposed_families(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


def series(text: str, but: re.Pattern[str] | None = None) -> list[str]:
    """The exposition's lines without their values, leaving out those ``but`` matches."""
    return [line.rsplit(" ", 1)[0] for line in text.splitlines() if but is None or not but.search(line)]


def as_exposed(family: str) -> set[str]:
    return {family, family + "_total"}


def test_every_collector_names_families_the_reference_node_exposes_and_the_docs_list(exposition):  # noqa: F811
    families = exposed_families(exposition)
    docs = documented()
    for collector in COLLECTORS:
        for family in collector.families:
            assert as_exposed(family) & families, f"{collector.name}: {family} is not exposed"
            assert as_exposed(family) & set(docs), f"{collector.name}: {family} is not in docs/metrics.md"
    owned = [family for collector in COLLECTORS for family in collector.families]
    assert len(owned) == len(set(owned))  # a family belongs to one collector


def test_by_default_every_collector_is_on_and_nothing_is_dropped():
    assert parsed() == Collectors.defaults()
    assert parsed().disabled == frozenset()


def test_no_collector_turns_one_off_and_collector_turns_it_back_on():
    assert parsed("--no-collector.cpu_interrupts").disabled == {"cpu_interrupts"}
    assert parsed("--no-collector.cpu_interrupts", "--collector.cpu_interrupts").disabled == frozenset()
    assert parsed("--collector.cpu_interrupts", "--no-collector.cpu_interrupts").disabled == {"cpu_interrupts"}


def test_disable_defaults_keeps_only_the_collectors_named():
    chosen = parsed("--collector.disable-defaults", "--collector.gpu_holders")
    assert chosen.enabled == {"gpu_holders"}


def test_an_unknown_collector_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--collector.bogus"])
    assert "unrecognized arguments: --collector.bogus" in capsys.readouterr().err


def test_the_sampler_drops_exactly_the_families_of_the_collectors_turned_off(fake_host):
    from fakehost.reference import reference_node
    from numawatch.host import HostReader

    node = reference_node(fake_host)
    off = parsed("--no-collector.cpu_info", "--no-collector.container_cpus", "--no-collector.gpu_nic_paths")
    full = Sampler(HostReader(node.paths), REFERENCE).evaluate_once().body.decode()
    trimmed = Sampler(HostReader(node.paths), REFERENCE, collectors=off).evaluate_once().body.decode()

    dropped = exposed_families(full) - exposed_families(trimmed)
    assert dropped == {"numawatch_cpu_info", "numawatch_container_cpus", "numawatch_gpu_nic_path_info"}
    assert exposed_families(trimmed) <= exposed_families(full)
    # every other series is still there (values aside: durations differ between two evaluations)
    turned_off = re.compile(r"numawatch_(cpu_info|container_cpus|gpu_nic_path_info)\b")
    assert series(full, but=turned_off) == series(trimmed)


def test_serve_takes_the_flags_and_drops_the_families_it_is_told_to(fake_host):
    from fakehost.reference import reference_node

    reference_node(fake_host)
    with numawatch_serve(fake_host.root, "--no-collector.cpu_interrupts", "--no-collector.irq_affinity") as (process,
                                                                                                               url):
        _, text = wait_until_ready(url + "metrics")
        process.terminate()
        process.wait(timeout=30)
        log = process.stderr.read()
    families = exposed_families(text)
    assert "numawatch_drift" in families and "numawatch_cpu_info" in families
    assert not {"numawatch_cpu_interrupts_total", "numawatch_irq_affinity_info"} & families
    assert "collectors=cpu_interrupts,irq_affinity" in log


def test_docs_metrics_lists_every_collector_with_its_families():
    from test_docs_metrics import DOCS

    rows = {line.split("|")[1].strip(): line for line in DOCS.read_text().splitlines() if line.startswith("| `")}
    for collector in COLLECTORS:
        row = rows.get(f"`{collector.name}`")
        assert row is not None, f"docs/metrics.md has no row for the {collector.name} collector"
        prefixes = re.findall(r"`(numawatch_\w+)\*`", row)  # `numawatch_gpu_holder_*` names a family per prefix
        for family in collector.families:
            assert family in row or any(family.startswith(prefix) for prefix in prefixes), (collector.name, family)
