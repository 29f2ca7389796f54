"""Per-pod values declared as judges (numawatch.perpod): a judge sees nothing but its context, the intent, one pod's
workloads and, with ``pod_input``, that pod's own input; so a closure, a nested function or a lambda, which could
capture a value no one compares, is refused at declaration, and every registered judge is a module-level function.
Through a HostReader's readings of a tree, a pod's value is made again when the context moves (every pod), when its
own input moves (that pod) or when the pod does (that pod), and is the last reading's otherwise. That each judge's
context reads only what the checks and families using it declare is tests/test_dataflow.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.reference import TRTLLM, VLLM, reference_node
from numawatch import metrics
from numawatch.checks import all_checks
from numawatch.host import Host, HostReader, SourceSpec
from numawatch.intent import REFERENCE, Intent
from numawatch.perpod import JUDGES, PodJudge, module_level, no_context, pod_judge, pod_values
from numawatch.refresh import EVERY
from numawatch.sources import SOURCES
from numawatch.workloads import Workload

PACKAGE = Path(__file__).resolve().parents[1] / "exporter" / "numawatch"
PER_POD_CHECKS = (
    "pod_not_guaranteed",
    "container_cpuset_drift",
    "exclusive_cpu_overlap",
    "container_numa_split",
    "container_gpu_numa_mismatch",
    "container_memory_numa_mismatch",
    "container_memory_remote",
    "node_workload_not_isolated",
)
# What each test judge made, in order: (the judge, the pod UID).
MADE: list[tuple[str, str]] = []


def knob(host: Host, intent: Intent) -> int:
    """The test source's value: every pod's value reads it."""
    return host.get("knob")["v"]


def knob_and_pod(context: int, intent: Intent, pod: tuple[Workload, ...]) -> tuple[str, int, int]:
    MADE.append(("knob", pod[0].pod_uid))
    return pod[0].pod_uid, context, len(pod)


def marks(host: Host, intent: Intent) -> dict[str, int]:
    """Each pod's mark, by pod UID (none: 0)."""
    return host.get("knob")["marks"]


def mark_of(marks: dict[str, int], pod: tuple[Workload, ...]) -> int:
    return marks.get(pod[0].pod_uid, 0)


def marked(context: None, intent: Intent, pod: tuple[Workload, ...], mark: int) -> tuple[str, int]:
    MADE.append(("marked", pod[0].pod_uid))
    return pod[0].pod_uid, mark


KNOB = pod_judge("tests.perpod.knob", context=knob, judge=knob_and_pod, reads_numa_bytes=False)
MARKED = pod_judge(
    "tests.perpod.marked", context=no_context, judge=marked, pod_inputs=marks, pod_input=mark_of, reads_numa_bytes=False
)


class Knob:
    """A source whose reading the test sets, read at every reading beside the real ones."""

    def __init__(self) -> None:
        self.value: dict[str, object] = {"v": 1, "marks": {}}

    def reader(self, paths) -> HostReader:
        sources = [*SOURCES, SourceSpec("knob", lambda paths: dict(self.value))]
        return HostReader(paths, sources, policies={spec.name: EVERY for spec in sources})


@pytest.fixture
def node(fake_host: FakeHost):
    return reference_node(fake_host)


def made(name: str) -> list[str]:
    return sorted(uid for judge, uid in MADE if judge == name)


# ------------------------------------------------------------------------------------------------ reuse
def test_a_pods_value_is_made_again_when_the_context_or_the_pod_moves_and_reused_otherwise(node):
    knob_source = Knob()
    reader = knob_source.reader(node.paths)
    MADE.clear()
    first = pod_values(reader.read(), REFERENCE, KNOB)
    pods = sorted(uid for uid, _, _ in first)
    assert len(pods) > 2 and made("knob") == pods and {value for _, value, _ in first} == {1}

    MADE.clear()
    second = pod_values(reader.read(), REFERENCE, KNOB)
    assert MADE == [] and all(new is old for new, old in zip(second, first, strict=True))  # nothing moved

    knob_source.value = {"v": 2, "marks": {}}
    third = pod_values(reader.read(), REFERENCE, KNOB)
    assert made("knob") == pods and {value for _, value, _ in third} == {2}  # the context moved: every pod

    MADE.clear()
    node.widen_cpuset(VLLM)
    fourth = pod_values(reader.read(), REFERENCE, KNOB)
    assert made("knob") == [VLLM.uid]  # only the pod that moved
    assert [new is old for new, old in zip(fourth, third, strict=True)] == [uid != VLLM.uid for uid, _, _ in third]

    MADE.clear()
    other = Intent(pin_gpu_containers=False)
    pod_values(reader.read(), other, KNOB)
    assert made("knob") == pods  # another intent: every pod


def test_a_pods_own_input_decides_for_that_pod_alone(node):
    knob_source = Knob()
    reader = knob_source.reader(node.paths)
    MADE.clear()
    first = pod_values(reader.read(), REFERENCE, MARKED)
    pods = sorted(uid for uid, _ in first)
    assert made("marked") == pods and {mark for _, mark in first} == {0}

    MADE.clear()
    knob_source.value = {"v": 1, "marks": {TRTLLM.uid: 7}}
    second = pod_values(reader.read(), REFERENCE, MARKED)
    assert made("marked") == [TRTLLM.uid]
    assert dict(second)[TRTLLM.uid] == 7 and {mark for uid, mark in second if uid != TRTLLM.uid} == {0}

    MADE.clear()
    pod_values(reader.read(), REFERENCE, MARKED)
    assert MADE == []


# ------------------------------------------------------------------------------------------------ declaration
def _context(host: Host, intent: Intent) -> None:
    return None


def _judge(context: None, intent: Intent, pod: tuple[Workload, ...]) -> int:
    return len(pod)


def _closure_judge():
    captured = {"seen": 0}

    def judge(context: None, intent: Intent, pod: tuple[Workload, ...]) -> int:
        return captured["seen"] + len(pod)

    return judge


def _nested_judge():
    def judge(context: None, intent: Intent, pod: tuple[Workload, ...]) -> int:
        return len(pod)

    return judge


class _Judges:
    @staticmethod
    def judge(context: None, intent: Intent, pod: tuple[Workload, ...]) -> int:
        return len(pod)


NOT_MODULE_LEVEL = {
    "a closure": _closure_judge(),
    "a nested function": _nested_judge(),
    "a lambda": lambda context, intent, pod: len(pod),
    "a function in a class": _Judges.judge,
    "a callable object": len,
}


@pytest.mark.parametrize("what", sorted(NOT_MODULE_LEVEL))
@pytest.mark.parametrize("role", ["context", "judge", "pod_inputs", "pod_input"])
def test_a_judge_that_is_not_a_module_level_function_is_refused(role, what):
    functions = {"context": _context, "judge": _judge, "pod_inputs": marks, "pod_input": mark_of}
    functions[role] = NOT_MODULE_LEVEL[what]
    with pytest.raises(ValueError, match=f"its {role} must be a module-level function"):
        PodJudge("tests.perpod.refused", **functions)
    assert not module_level(NOT_MODULE_LEVEL[what])
    assert module_level(_judge) and module_level(marks)


def test_a_pod_input_without_where_it_is_looked_up_is_refused_and_two_judges_may_not_share_a_name():
    with pytest.raises(ValueError, match="pod_input and pod_inputs go together"):
        PodJudge("tests.perpod.half", _context, _judge, pod_input=mark_of)
    with pytest.raises(ValueError, match="pod_input and pod_inputs go together"):
        PodJudge("tests.perpod.half", _context, _judge, pod_inputs=marks)
    with pytest.raises(ValueError, match=r"two pod judges are named tests\.perpod\.knob"):
        pod_judge("tests.perpod.knob", context=_context, judge=_judge)


def test_every_registered_judge_is_a_module_level_function():
    assert all_checks() and metrics.DECLARED  # their modules, and so their judges, are loaded
    assert {name for name in JUDGES if not name.startswith("tests.")} == {
        *(f"findings.{check}" for check in PER_POD_CHECKS),
        "metrics.pod_rows.container_cpus",
        "metrics.pod_rows.container_numa_memory",
    }
    for name, judge in JUDGES.items():
        assert judge.name == name
        functions = [judge.context, judge.judge, judge.pod_inputs, judge.pod_input]
        assert all(module_level(function) for function in functions if function is not None), name


def test_only_the_judges_engine_makes_per_pod_tables():
    """No check or family calls ``workloads.per_pod`` itself: a value made pod by pod is a declared judge."""
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("workloads.py", "perpod.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            imported = isinstance(node, ast.ImportFrom) and any(alias.name == "per_pod" for alias in node.names)
            if imported or (isinstance(node, ast.Attribute) and node.attr == "per_pod"):
                callers.append(str(path.relative_to(PACKAGE)))
    assert callers == []
