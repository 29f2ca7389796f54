"""Do not disturb the patient: keep numawatch's own threads on housekeeping CPUs.

numawatch runs on the very nodes whose isolated CPUs it guards. A DaemonSet in the shared pool may be allowed on
isolated CPUs (isolcpus only removes them from load balancing, it does not forbid them), and a runnable thread on a
nohz_full CPU restarts its tick. So at start-up numawatch restricts itself to the housekeeping CPUs: online CPUs minus
the isolated ones minus the nohz_full ones.

``os.sched_setaffinity(0, ...)`` changes only the calling thread, and threads inherit the affinity of the thread that
creates them: pinning the main thread before any thread starts covers every later thread, and threads that already
exist (an import that started one, a thread pool) are pinned one by one through ``/proc/self/task``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from numawatch.cpuset import EMPTY, CPUSet, format_cpulist
from numawatch.model.topology import Topology

# numawatch's own threads, in the /proc this process sees. Deliberately not Paths.procfs: that is the *host's* proc
# (possibly a capture, or /host/proc), while the threads to pin are this process's.
SELF_TASKS = Path("/proc/self/task")

# The CLI flag proposed for turning this off (cli.py is not part of this module).
NO_SELF_PIN_FLAG = "--no-self-pin"


@dataclass(frozen=True)
class PinResult:
    pinned: bool  # True when numawatch's affinity was narrowed to housekeeping CPUs
    cpus: CPUSet  # where numawatch may run now (the process's affinity after the attempt)
    housekeeping: CPUSet  # online minus isolated minus nohz_full; empty when unknown
    threads: int = 0  # threads whose affinity was set
    reason: str = ""  # what happened, one line (shown in logs and numawatch check)


def nohz_full_cpus(topology: Topology) -> CPUSet:
    isolation = topology.isolation
    return (isolation.sys_nohz_full or EMPTY) | (isolation.nohz_full or EMPTY)


def housekeeping_cpus(topology: Topology) -> CPUSet:
    """Online CPUs that are neither isolated (isolcpus) nor nohz_full: where numawatch may run."""
    return topology.online - topology.isolated - nohz_full_cpus(topology)


def current_cpus() -> CPUSet:
    """The CPUs this process may run on now (its main thread's affinity)."""
    return frozenset(os.sched_getaffinity(0))


def _thread_ids(tasks_dir: Path) -> Iterable[int]:
    try:
        return sorted(int(name) for name in os.listdir(tasks_dir) if name.isdigit())
    except OSError:
        return []


def pin_to_housekeeping(
    topology: Topology | None,
    *,
    tasks_dir: Path = SELF_TASKS,
    setaffinity: Callable[[int, Iterable[int]], None] = os.sched_setaffinity,
) -> PinResult:
    """Restrict every thread of this process to the housekeeping CPUs of ``topology``.

    Never raises: a host whose topology is unknown, with no housekeeping CPU, or a cpuset that excludes them all
    leaves the affinity as it is and says why in ``reason``.
    """
    before = current_cpus()
    if topology is None:
        return PinResult(False, before, EMPTY, reason="topology unknown: numawatch runs where the kernel puts it")
    target = housekeeping_cpus(topology)
    if not target:
        return PinResult(False, before, target, reason="no housekeeping CPU (every online CPU is isolated)")
    if before <= target:
        return PinResult(False, before, target, reason=f"already on housekeeping CPUs {format_cpulist(before)}")
    try:
        setaffinity(0, target)
    except OSError as error:
        # EINVAL: the container's cpuset holds none of the housekeeping CPUs.
        return PinResult(
            False,
            before,
            target,
            reason=f"could not pin to housekeeping CPUs {format_cpulist(target)}: {error.strerror or error}",
        )
    threads = 1
    calling = threading.get_native_id()
    for tid in _thread_ids(tasks_dir):
        if tid == calling:
            continue  # pid 0 above already covered the calling thread
        try:
            setaffinity(tid, target)
            threads += 1
        except (ProcessLookupError, PermissionError):
            continue  # the thread exited meanwhile
        except OSError:
            continue
    after = current_cpus()
    return PinResult(
        True,
        after,
        target,
        threads=threads,
        reason=f"pinned {threads} thread(s) to housekeeping CPUs {format_cpulist(after)}",
    )


__all__ = [
    "NO_SELF_PIN_FLAG",
    "SELF_TASKS",
    "PinResult",
    "current_cpus",
    "housekeeping_cpus",
    "nohz_full_cpus",
    "pin_to_housekeeping",
]
