"""--collector.<name> / --no-collector.<name>: the families that grow with the node can be turned off."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest
from numawatch import collectors, metrics
from numawatch.checks import Evaluation
from numawatch.cli import build_parser
from numawatch.collectors import COLLECTORS, Collectors
from numawatch.intent import REFERENCE
from numawatch.metrics import capacity, core, gpu, platform
from numawatch.metrics import exposition as writer
from numawatch.metrics import host as host_metrics
from numawatch.model.interrupts import Interrupts
from numawatch.server import BodyFormat, Sampler
from numawatch.store import Store
from serving import numawatch_serve

# the fixtures: the reference node with NVML and planted drift, its evaluation and exposition
from test_docs_metrics import documented, exposition, reference_evaluation  # noqa: F401
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_sampler_drops_exactly_the_families_of_the_collectors_turned_off(fake_host):
    from fakehost.reference import reference_node
    from numawatch.host import HostReader

    node = reference_node(fake_host)
    TEXT = BodyFormat(openmetrics=False, gzip=False)
    off = parsed("--no-collector.cpu_info", "--no-collector.container_cpus", "--no-collector.gpu_nic_paths")
    full = Sampler(HostReader(node.paths), REFERENCE).evaluate_once().bodies.get(TEXT).decode()
    trimmed = Sampler(HostReader(node.paths), REFERENCE, collectors=off).evaluate_once().bodies.get(TEXT).decode()

    dropped = exposed_families(full) - exposed_families(trimmed)
    assert dropped == {"numawatch_cpu_info", "numawatch_container_cpus", "numawatch_gpu_nic_path_info"}
    assert exposed_families(trimmed) <= exposed_families(full)
    # every other series is still there (values aside: durations differ between two evaluations)
    turned_off = re.compile(r"numawatch_(cpu_info|container_cpus|gpu_nic_path_info)\b")
    assert series(full, but=turned_off) == series(trimmed)


@pytest.mark.slow
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


# Every builder of a family, by module; capacity.families is one builder of families that are always on.
BUILDERS = (*core.PER_EVALUATION, *host_metrics.BUILDERS, *gpu.BUILDERS, *platform.BUILDERS)
OWNER = {family: collector.name for collector in COLLECTORS for family in collector.families}
EVERY = frozenset(collector.name for collector in COLLECTORS)


def test_each_builder_of_a_collectors_families_is_marked_with_it_and_builds_nothing_else(
    reference_evaluation: Evaluation,  # noqa: F811
):
    """What lets a builder be skipped: a marked builder builds only its collector's families (so skipping it loses
    nothing else) and no unmarked builder builds one (which would be built while off)."""
    covered: set[str] = set()
    for build in BUILDERS:
        names = {family.name for family in core.safely(build, reference_evaluation)}
        assert names, f"{build.__qualname__} built nothing"
        owner = collectors.collector_of(build)
        if owner is None:
            assert not names & set(OWNER), f"{build.__qualname__} builds {names & set(OWNER)} but is not marked"
        else:
            assert names <= set(collectors.BY_NAME[owner].families), (build.__qualname__, owner, names)
            covered |= names
    built_always = core.safely(capacity.families, reference_evaluation, None, None)
    assert not {family.name for family in built_always} & set(OWNER)
    assert covered == set(OWNER), "every collector's family has a marked builder"


def test_the_reference_node_has_series_in_every_collectors_families(reference_evaluation: Evaluation):  # noqa: F811
    """The byte comparison below means something only if every collector has series to lose."""
    for collector in COLLECTORS:
        built = [f for f in metrics.families(reference_evaluation) if f.name in collector.families]
        assert any(family.samples for family in built), f"{collector.name} has no series on the reference node"


@pytest.mark.slow
def test_turned_off_collectors_leave_the_exposition_byte_for_byte_what_dropping_their_families_left(
    reference_evaluation: Evaluation,  # noqa: F811
):
    """Every combination of collectors on and off: building only the enabled families writes exactly the bytes
    that building them all and dropping the disabled ones' (what serve did before) writes, in both formats."""
    stats = metrics.EvaluationStats.of(reference_evaluation)
    full = metrics.families(reference_evaluation, stats, metrics.Memory())
    compared = 0
    for size in range(len(COLLECTORS) + 1):
        for off in itertools.combinations(sorted(EVERY), size):
            chosen = Collectors(EVERY - set(off))
            selected = metrics.families(reference_evaluation, stats, metrics.Memory(), chosen)
            for openmetrics in (False, True):
                expected = writer.write(chosen.keep(full), openmetrics=openmetrics)
                assert writer.write(selected, openmetrics=openmetrics) == expected, (off, openmetrics)
            compared += 1
    assert compared == 2 ** len(COLLECTORS)


def test_with_every_collector_off_the_joins_only_their_families_need_are_not_made(
    reference_evaluation: Evaluation, monkeypatch  # noqa: F811
):
    """The inputs the switchable families alone use: the per-pod rows, the holders' join by container, the per-CPU
    interrupt totals, the IRQ and PCIe path joins (the last two are shared with checks, memoised on the Host)."""
    calls: list[str] = []

    def spy(module: object, name: str) -> None:
        original = getattr(module, name)

        def counted(*args: object, **kwargs: object) -> object:
            calls.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    spy(core, "pod_rows")
    spy(host_metrics, "pod_rows")
    spy(host_metrics, "device_irqs")
    spy(gpu, "holders_by_container")
    spy(platform, "gpu_nic_paths")
    spy(Interrupts, "totals_per_kind")
    # The module's evaluation with nothing derived yet: its families built by another test would be handed out again
    # (``core.host_only``) without their joins being made.
    evaluation = replace(reference_evaluation, host=replace(reference_evaluation.host, store=Store()))
    off = metrics.families(evaluation, None, None, Collectors(frozenset()))
    assert calls == []
    assert not {family.name for family in off} & set(OWNER)
    metrics.families(evaluation, None, None, Collectors(EVERY))
    assert set(calls) == {"pod_rows", "device_irqs", "holders_by_container", "gpu_nic_paths", "totals_per_kind"}


def test_builds_refuses_a_collector_that_does_not_exist():
    with pytest.raises(ValueError, match="no collector is named 'bogus'"):
        collectors.builds("bogus")
