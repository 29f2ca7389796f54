"""Values made pod by pod (a check's findings, a metric family's rows), declared so that what each pod's value
depends on cannot be left out of what decides its reuse.

    def cpu_nodes(host: Host, intent: Intent) -> CpuNodes: ...  # all that every pod's value reads of the Host
    def gpu_mismatches(nodes: CpuNodes, intent: Intent, pod: tuple[Workload, ...]) -> tuple[Finding, ...]: ...

    GPU_MISMATCHES = pod_judge(
        "findings.container_gpu_numa_mismatch", context=cpu_nodes, judge=gpu_mismatches, reads_numa_bytes=False
    )

    pod_values(host, intent, GPU_MISMATCHES)  # one value per pod, in pod order (checks/pinning.py)

A judge sees nothing but its context (made from the Host and the intent at every reading, compared by equality with
the last reading's), the intent (compared by its version) and one pod's workloads (keyed by the engine:
``workloads.per_pod``); with ``pod_input``, also what that pure function picks for the pod out of ``pod_inputs``
(compared pod by pod). The judge and the functions beside it are module-level functions without closures, refused
at declaration otherwise: a value they could capture is a value the engine would not compare, and serve would hand
out a stale verdict. A pod whose key, context and own input are those of the last reading keeps the value made then.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from numawatch.host import Host
from numawatch.intent import Intent
from numawatch.workloads import Workload, per_pod

C = TypeVar("C", bound=Hashable)
T = TypeVar("T")
# A judge of tuples of findings is one of iterables of findings: PodJudge is read only.
C_co = TypeVar("C_co", bound=Hashable, covariant=True)
T_co = TypeVar("T_co", covariant=True)

Pod = tuple[Workload, ...]

# Every declared judge by name: a name is a store key (one per-pod table each), so two may not share one.
JUDGES: dict[str, PodJudge[Any, Any]] = {}


@dataclass(frozen=True)
class PodJudge(Generic[C_co, T_co]):
    """A per-pod value, declared.

    ``context(host, intent)``: everything every pod's value depends on besides its workloads and the intent, compared
    by equality (a frozen value: keep it to what the judge reads, since any change makes every pod's value again).
    ``judge(context, intent, workloads)``: one pod's value (``judge(context, intent, workloads, own)`` with
    ``pod_input``). ``pod_inputs(host, intent)`` and ``pod_input(looked_up, workloads)``: what one pod's value
    depends on besides (``own``, such as its usage reading), picked out of what ``pod_inputs`` made, which only
    ``pod_input`` sees. ``by_uid``: the pod cgroups of one UID are one pod. ``reads_numa_bytes=False``: the judge
    reads no ``Workload.numa_bytes`` (``workloads.per_pod`` says what these promise)."""

    name: str
    context: Callable[[Host, Intent], C_co]
    judge: Callable[..., T_co]
    pod_inputs: Callable[[Host, Intent], Any] | None = None
    pod_input: Callable[[Any, Pod], Hashable] | None = None
    by_uid: bool = False
    reads_numa_bytes: bool = True

    def __post_init__(self) -> None:
        for role in ("context", "judge", "pod_inputs", "pod_input"):
            function = getattr(self, role)
            if function is not None and not module_level(function):
                raise ValueError(
                    f"pod judge {self.name}: its {role} must be a module-level function without a closure (what a "
                    f"closure captures is compared by no one), not {function!r}"
                )
        if (self.pod_inputs is None) != (self.pod_input is None):
            raise ValueError(f"pod judge {self.name}: pod_input and pod_inputs go together")


def module_level(function: object) -> bool:
    """Whether ``function`` is a plain function defined at the top of its module: not a lambda, not nested in a
    function or a class, capturing nothing (``__closure__``)."""
    return (
        inspect.isfunction(function)
        and function.__closure__ is None
        and function.__name__ != "<lambda>"
        and function.__qualname__ == function.__name__
    )


def pod_judge(
    name: str,
    *,
    context: Callable[[Host, Intent], C],
    judge: Callable[..., T],
    pod_inputs: Callable[[Host, Intent], Any] | None = None,
    pod_input: Callable[[Any, Pod], Hashable] | None = None,
    by_uid: bool = False,
    reads_numa_bytes: bool = True,
) -> PodJudge[C, T]:
    """Declares (and registers in ``JUDGES``) the per-pod value ``name``: see ``PodJudge``."""
    if name in JUDGES:
        raise ValueError(f"two pod judges are named {name}")
    declared = JUDGES[name] = PodJudge(name, context, judge, pod_inputs, pod_input, by_uid, reads_numa_bytes)
    return declared


def no_context(host: Host, intent: Intent) -> None:
    """The context of a judge that reads nothing but each pod's workloads and the intent."""
    return None


def pod_values(host: Host, intent: Intent, judge: PodJudge[C, T]) -> tuple[T, ...]:
    """``judge``'s value for every pod with workloads, in the cgroups source's order (by UID with ``by_uid``), each
    made once for as long as its key, the context and its own input stay the same (``workloads.per_pod``)."""
    context = judge.context(host, intent)
    make: Callable[[Pod], T] = partial(judge.judge, context, intent)
    own: Callable[[Pod], Hashable] | None = None
    if judge.pod_inputs is not None and judge.pod_input is not None:
        own = partial(judge.pod_input, judge.pod_inputs(host, intent))
        make = partial(_with_own, judge.judge, context, intent, own)
    return per_pod(
        host,
        intent,
        judge.name,
        context,
        make,
        pod_input=own,
        by_uid=judge.by_uid,
        reads_numa_bytes=judge.reads_numa_bytes,
    )


def _with_own(
    judge: Callable[..., T], context: Hashable, intent: Intent, own: Callable[[Pod], Hashable], workloads: Pod
) -> T:
    return judge(context, intent, workloads, own(workloads))
