"""Checks and metric families declare their inputs (numawatch.inputs), and the declarations hold.

Every registered check and every builder of a family that reads the host is run on a variety of hosts (the reference
node's files read by the real sources, staggered and not, drifted, on other vendors' accelerators, with another
kubelet flavour and cgroup layout; model snapshots with each source down; a window without the source's previous
reading) on a copy of the Host that records the sources it reads (tests/recording.py): each one read must be one its
declaration names; so must each derivation (numawatch.derivation) the checks and builders use. A check or builder
declaring too little is caught (a deliberately wrong declaration is); every check and every metric name numawatch
exposes has a declaration, and a builder makes exactly the names it declares.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_amdsmi import reference_amdsmi
from fake_pyhlml import reference_hlml
from fake_pynvml import reference_nvml, write_reference_threads
from fakehost import FakeHost
from fakehost.reference import reference_node, reference_snapshot, with_source_down
from gpu_readers import GpuReaders
from numawatch import metrics
from numawatch.checks import Check, Evaluation, all_checks, evaluate, require
from numawatch.dataflow import metric_declarations
from numawatch.derivation import DERIVATIONS
from numawatch.host import Host, HostReader, read_host
from numawatch.inputs import KERNEL, SELF, TOPOLOGY, Input, Own, declaration_of, exposes, reads_previous, sources_of
from numawatch.intent import REFERENCE, Intent
from numawatch.metrics import capacity, core, gpu, platform
from numawatch.metrics import host as host_metrics
from numawatch.nvml_session import NvmlSession
from numawatch.paths import Paths
from numawatch.perpod import JUDGES, PodJudge, no_context
from numawatch.shapes import parse_shape
from numawatch.sources import SOURCES
from numawatch.sources.amdsmi import amdsmi_session
from numawatch.sources.hlml import hlml_session
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from recording import PREVIOUS, RecordingHost, reads_of, recording
from test_docs_metrics import documented

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
# The builders run on an evaluation (the others make numawatch's own families from its counters).
HOST_READING: tuple[Callable[..., object], ...] = (
    *core.PER_EVALUATION,
    *host_metrics.BUILDERS,
    *gpu.BUILDERS,
    capacity.families,
    *platform.BUILDERS,
)
# The reference profile, one with a named shape (capacity's replicas), one asking huge pages of a node (read from
# the numastat source) and one aligning containers rather than pods (container_numa_split judges them pod by pod).
INTENTS = (
    REFERENCE,
    replace(REFERENCE, shapes=(parse_shape("cpu=2,memory=4Gi", name="small"),)),
    replace(REFERENCE, kernel=replace(REFERENCE.kernel, hugepages_per_node={0: {2048: 4}})),
    replace(REFERENCE, topology_manager_scope="container"),
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 15.0
        return self.now


def undeclared(inputs: tuple[Input, ...], recorded: set[str]) -> set[str]:
    """What ``recorded`` (the names a RecordingHost noted) holds that ``inputs`` do not declare: a source read
    undeclared, or the previous Host read (``PREVIOUS``) without a declared rate."""
    allowed = set(sources_of(inputs)) | ({PREVIOUS} if reads_previous(inputs) else set())
    return recorded - allowed


def check_reads(check: Check, host: RecordingHost, intent: Intent) -> set[str]:
    """The sources ``check`` reads of ``host``, whatever its verdict."""
    return reads_of(host, lambda: list(check.run(host, intent)))


def family_reads(build: Callable[..., object], evaluation: Evaluation) -> tuple[set[str], set[str] | None]:
    """The sources ``build`` reads of the evaluation's host (a RecordingHost), and the metric names it made (None
    when it failed)."""
    host = evaluation.host
    assert isinstance(host, RecordingHost)
    made: list[object] = []
    read = reads_of(host, lambda: made.append(build(evaluation)))
    if not made:
        return read, None
    families = [made[0]] if isinstance(made[0], Metric) else list(made[0])  # type: ignore[call-overload]
    return read, {f"{family.name}_total" if family.type == "counter" else family.name for family in families}


# ------------------------------------------------------------------------------------------------- the hosts
def _gpu_node(root: Path) -> Iterator[Host]:
    """The reference node with drift planted, NVML (the fake) and the holders' threads: three staggered readings."""
    node = reference_node(FakeHost(root))
    node.split_across_nodes()
    node.spill_memory()
    node.host.write("proc/irq/150/smp_affinity_list", "2")
    node.host.write("proc/irq/150/effective_affinity_list", "2")
    write_reference_threads(node.host)
    readers = GpuReaders(NvmlSession(nvml=reference_nvml()))
    try:
        reader = HostReader(node.host.paths, stagger=4, nvml=readers.session, clock=readers.clock)
        for _ in range(3):
            yield reader.read()
    finally:
        readers.session.close()


def _drifting_node(root: Path) -> Iterator[Host]:
    """The reference node read by check's reader once, then after each of a series of drifts."""
    node = reference_node(FakeHost(root), flavor="kubeadm", cgroup_version=1, driver="cgroupfs", runtime="crio")
    yield read_host(node.paths)
    # A window without the source's own previous reading: the rate checks read the previous Host.
    yield replace(read_host(node.paths), previous=read_host(node.paths))
    for drift in (node.intrude, node.widen_cpuset, node.pin_away_from_gpus, node.unbind_memory, node.make_burstable,
                  node.hide_gpu_numa_node, node.register_gpus_without_topology, node.take_cpu_offline,
                  node.corrupt_cpu_state_checksum, node.set_reserved_cpus, node.fossilise_cpu_state):  # fmt: skip
        drift()
        yield read_host(node.paths)


def _vendor_node(root: Path, vendor: str) -> Iterator[Host]:
    node = reference_node(FakeHost(root), vendor=vendor)
    write_reference_threads(node.host)
    library = {"amd": ("amdsmi", amdsmi_session, reference_amdsmi), "habana": ("hlml", hlml_session, reference_hlml)}
    name, session, fake = library[vendor]
    reader = HostReader(node.host.paths, clock=Clock(), libraries={name: session(fake())})
    try:
        reader.read()
        yield reader.read()
    finally:
        for opened in reader.context.libraries.values():
            opened.close()


def _snapshots() -> Iterator[Host]:
    """The reference node as model objects, with each source down in turn, and a host with nothing read."""
    snapshot = reference_snapshot()
    yield snapshot
    for spec in SOURCES:
        yield with_source_down(snapshot, spec.name)
    yield Host(paths=Paths.from_root("/nonexistent"), results={}, statuses={})


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> dict[str, object]:
    """Per check id and per builder, the union of the sources it read on every host, and each builder's names."""
    reads: dict[str, set[str]] = {}
    made: dict[str, set[str]] = {}
    root = tmp_path_factory.mktemp("dataflow")
    hosts = [
        *_gpu_node(root / "gpu"),
        *_drifting_node(root / "drifting"),
        *_vendor_node(root / "amd", "amd"),
        *_vendor_node(root / "habana", "habana"),
        *_snapshots(),
    ]
    derivations: dict[str, set[str]] = {}
    # Per pod judge: who used it (a check id, a builder), and what its context and pod inputs read.
    judge_users: dict[str, set[str]] = {}
    judges: dict[str, set[str]] = {}

    def note_judges(recorder: RecordingHost, intent: Intent, user: str, since: int) -> None:
        for key in recorder.renewed[since:]:
            if isinstance(key, tuple) and key[0] == "per_pod" and key[1] in JUDGES:
                judge_users.setdefault(key[1], set()).add(user)
                judges.setdefault(key[1], set()).update(judge_reads(JUDGES[key[1]], recorder, intent))

    for host in hosts:
        recorder = recording(host)
        for intent in INTENTS:
            for check in all_checks():
                since = len(recorder.renewed)
                reads.setdefault(check.id, set()).update(check_reads(check, recorder, intent))
                note_judges(recorder, intent, check.id, since)
            evaluation = replace(evaluate(host, intent), host=recorder)
            for build in HOST_READING:
                since = len(recorder.renewed)
                read, names = family_reads(build, evaluation)
                note_judges(recorder, intent, build.__qualname__, since)
                reads.setdefault(build.__qualname__, set()).update(read)
                if names is not None:
                    made.setdefault(build.__qualname__, set()).update(names)
        for name, read in recorder.by_derivation.items():
            derivations.setdefault(name, set()).update(read)
    return {"reads": reads, "made": made, "derivations": derivations, "judge_users": judge_users, "judges": judges}


def judge_reads(judge: PodJudge[Any, Any], host: RecordingHost, intent: Intent) -> set[str]:
    """What a per-pod judge's context (and where its pods' own inputs are looked up) reads of ``host``: all that
    each pod's value depends on besides its workloads and the intent."""
    pod_inputs = judge.pod_inputs
    return reads_of(host, lambda: (judge.context(host, intent), pod_inputs and pod_inputs(host, intent)))


# ------------------------------------------------------------------------------------------------- checks
@pytest.mark.parametrize("check", all_checks(), ids=lambda check: check.id)
def test_a_check_reads_only_what_it_declares(check, observed):
    read = observed["reads"][check.id]
    assert read, f"{check.id} read nothing on any host: the proof would be empty"
    assert undeclared(check.inputs, read) == set(), f"{check.id} reads sources it does not declare"


def test_what_a_check_or_builder_declares_it_reads_on_some_host(observed):
    """Declarations stay tight (an input declared and never read would only loosen the bounds ``explain`` prints),
    and the hosts above are varied enough to exercise every declared read."""
    declared = {check.id: check.inputs for check in all_checks()}
    for build in HOST_READING:
        declaration = declaration_of(build)
        assert declaration is not None
        declared[build.__qualname__] = declaration.inputs
    never = {name: sorted(sources_of(inputs) - observed["reads"][name]) for name, inputs in declared.items()}
    assert {name: sources for name, sources in never.items() if sources} == {}


@pytest.mark.parametrize("name", sorted(DERIVATIONS))
def test_a_derivation_reads_only_what_it_declares(name, observed):
    derivation = DERIVATIONS[name]
    read = observed["derivations"].get(name, set())
    if name.startswith("tests."):
        pytest.skip("declared by a test")
    assert read, f"{name} was not made on any host: the proof would be empty"
    assert undeclared(derivation.inputs, read) == set(), f"{name} reads sources it does not declare"


@pytest.mark.parametrize("name", sorted(JUDGES))
def test_a_pod_judge_reads_only_what_each_check_or_family_using_it_declares(name, observed):
    if name.startswith("tests."):
        pytest.skip("declared by a test")
    judge = JUDGES[name]
    users = observed["judge_users"].get(name, set())
    assert users, f"{name} was used by no check or family on any host: the proof would be empty"
    read = observed["judges"][name]
    assert read or (judge.context is no_context and judge.pod_inputs is None), f"{name}'s context read nothing"
    declared = {check.id: check.inputs for check in all_checks()}
    for build in HOST_READING:
        declaration = declaration_of(build)
        assert declaration is not None
        declared[build.__qualname__] = declaration.inputs
    assert {user: undeclared(declared[user], read) for user in users} == {user: set() for user in users}


def test_every_registered_check_declares_its_inputs():
    assert [check.id for check in all_checks() if not check.inputs] == []


# ------------------------------------------------------------------------------------------------- families
@pytest.mark.parametrize("build", HOST_READING, ids=lambda build: build.__qualname__)
def test_a_family_builder_reads_only_what_it_declares_and_makes_the_names_it_declares(build, observed):
    declaration = declaration_of(build)
    assert declaration is not None, f"{build.__qualname__} declares nothing"
    assert undeclared(declaration.inputs, observed["reads"][build.__qualname__]) == set()
    assert observed["made"][build.__qualname__] == set(declaration.names)


def test_the_builders_of_numawatchs_own_families_declare_no_host_input():
    for build in metrics.DECLARED:
        if build not in HOST_READING:
            declaration = declaration_of(build)
            assert declaration is not None and all(isinstance(item, Own) for item in declaration.inputs), build


def test_every_metric_name_numawatch_exposes_has_a_declaration():
    text = DOCS.read_text()
    serve_only = set(re.findall(r"^- `(numawatch_\w+)` \(", text, re.MULTILINE))
    assert serve_only, "the serve-only list of docs/metrics.md moved: this test reads it"
    assert set(metric_declarations()) == set(documented()) | serve_only


def test_a_declaration_names_only_registry_sources():
    known = {spec.name for spec in SOURCES}
    declared = [*(check.inputs for check in all_checks()), *(inputs for _, inputs in metric_declarations().values())]
    assert {name for inputs in declared for name in sources_of(inputs)} <= known


# ------------------------------------------------------------------------------------------------- the proof works
def _reads_the_topology(host: Host, intent: Intent):
    require(host, "topology")
    return ()


def test_a_check_declaring_less_than_it_reads_is_caught():
    wrong = Check("declares_the_kernel", "warning", "a test check", "fix it", _reads_the_topology, inputs=(KERNEL,))
    host = recording(reference_snapshot())
    assert undeclared(wrong.inputs, check_reads(wrong, host, REFERENCE)) == {"topology"}
    right = replace(wrong, inputs=(KERNEL, TOPOLOGY))
    assert undeclared(right.inputs, check_reads(right, host, REFERENCE)) == set()


def test_a_rate_read_undeclared_is_caught():
    host = recording(replace(reference_snapshot(), previous=reference_snapshot()))

    def reads_previous(host: Host, intent: Intent):
        assert host.previous is not None
        return host.previous.topology.cpus

    check = Check("reads_previous", "warning", "a test check", "fix it", reads_previous, inputs=(SELF,))
    assert undeclared(check.inputs, check_reads(check, host, REFERENCE)) == {PREVIOUS}


def test_a_family_declaring_less_than_it_reads_or_other_names_than_it_makes_is_caught():
    @exposes("numawatch_test_cpus", inputs=(KERNEL,))
    def cpus(evaluation: Evaluation) -> Metric:
        family = GaugeMetricFamily("numawatch_test_online_cpus", "A test family.")
        family.add_metric((), len(evaluation.host.topology.cpus))
        return family

    evaluation = replace(evaluate(reference_snapshot(), REFERENCE, []), host=recording(reference_snapshot()))
    read, names = family_reads(cpus, evaluation)
    declaration = declaration_of(cpus)
    assert declaration is not None
    assert undeclared(declaration.inputs, read) == {"topology"}
    assert names != set(declaration.names)


def _online_cpus(host: Host, intent: Intent) -> int:
    return len(require(host, "topology").online)


def _pod_size(context: int, intent: Intent, pod: tuple) -> int:
    return len(pod)


def test_a_pod_judges_context_reading_more_than_its_user_declares_is_caught():
    judge = PodJudge("tests.dataflow.online_cpus", _online_cpus, _pod_size)
    host = recording(reference_snapshot())
    assert undeclared((KERNEL,), judge_reads(judge, host, REFERENCE)) == {"topology"}
    assert undeclared((KERNEL, TOPOLOGY), judge_reads(judge, host, REFERENCE)) == set()
