"""numawatch pins itself to housekeeping CPUs so that it never runs on the CPUs it guards."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from numawatch.model.topology import IsolationParams, Topology
from numawatch.selfpin import housekeeping_cpus, pin_to_housekeeping


def topology(online: set[int], isolcpus: set[int] | None = None, nohz_full: set[int] | None = None) -> Topology:
    isolation = IsolationParams(
        isolcpus=frozenset(isolcpus) if isolcpus is not None else None,
        nohz_full=frozenset(nohz_full) if nohz_full is not None else None,
    )
    return Topology(cpus={}, online=frozenset(online), nodes={}, isolation=isolation)


def test_housekeeping_is_online_minus_isolated_minus_nohz_full():
    assert housekeeping_cpus(topology(set(range(8)), {2, 3, 4}, {4, 5})) == {0, 1, 6, 7}


def test_every_existing_thread_is_pinned_and_vanished_threads_are_skipped(tmp_path, monkeypatch):
    tasks = tmp_path / "task"
    for tid in (os.getpid(), 111, 222, 333):
        (tasks / str(tid)).mkdir(parents=True)
    calls: list[tuple[int, frozenset[int]]] = []

    def setaffinity(tid: int, cpus) -> None:
        if tid == 222:
            raise ProcessLookupError(3, "No such process")
        calls.append((tid, frozenset(cpus)))

    monkeypatch.setattr("numawatch.selfpin.current_cpus", lambda: frozenset(range(8)))
    monkeypatch.setattr("threading.get_native_id", lambda: os.getpid())

    result = pin_to_housekeeping(topology(set(range(8)), {4, 5, 6, 7}), tasks_dir=tasks, setaffinity=setaffinity)

    assert calls == [(0, frozenset({0, 1, 2, 3})), (111, frozenset({0, 1, 2, 3})), (333, frozenset({0, 1, 2, 3}))]
    assert (result.pinned, result.threads, result.housekeeping) == (True, 3, frozenset({0, 1, 2, 3}))


def test_nothing_to_do_without_topology_without_housekeeping_or_when_already_there(monkeypatch):
    def refuse(tid, cpus):
        raise AssertionError("must not change the affinity")

    monkeypatch.setattr("numawatch.selfpin.current_cpus", lambda: frozenset({0, 1}))

    assert not pin_to_housekeeping(None, setaffinity=refuse).pinned
    assert "every online CPU is isolated" in pin_to_housekeeping(topology({0, 1}, {0, 1}), setaffinity=refuse).reason
    already = pin_to_housekeeping(topology({0, 1, 2, 3}, {2, 3}), setaffinity=refuse)
    assert (already.pinned, already.reason) == (False, "already on housekeeping CPUs 0-1")


def test_a_cpuset_without_housekeeping_cpus_leaves_the_affinity_and_says_why(monkeypatch):
    def einval(tid, cpus):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr("numawatch.selfpin.current_cpus", lambda: frozenset({4, 5}))

    result = pin_to_housekeeping(topology(set(range(8)), {4, 5, 6, 7}), setaffinity=einval)

    assert not result.pinned
    assert result.cpus == {4, 5}
    assert result.reason == "could not pin to housekeeping CPUs 0-3: Invalid argument"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin away from one")
def test_really_pins_existing_and_future_threads_of_a_process():
    """In a child process: a thread started before pinning and one started after both end up on housekeeping."""
    cpus = sorted(os.sched_getaffinity(0))
    keep, isolate = cpus[0], cpus[1:]
    script = textwrap.dedent(
        f"""
        import os, threading
        from numawatch.model.topology import IsolationParams, Topology
        from numawatch.selfpin import pin_to_housekeeping

        ready, stop = threading.Event(), threading.Event()
        def worker():
            ready.set(); stop.wait()
        early = threading.Thread(target=worker); early.start(); ready.wait()
        topo = Topology(cpus={{}}, online=frozenset({cpus}), nodes={{}},
                        isolation=IsolationParams(isolcpus=frozenset({isolate})))
        result = pin_to_housekeeping(topo)
        late_cpus = []
        late = threading.Thread(target=lambda: late_cpus.append(os.sched_getaffinity(0))); late.start(); late.join()
        print(result.pinned, result.threads, sorted(os.sched_getaffinity(early.native_id)), sorted(late_cpus[0]))
        stop.set(); early.join()
        """
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "exporter"))

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True).stdout

    assert out.split() == ["True", "2", f"[{keep}]", f"[{keep}]"]
