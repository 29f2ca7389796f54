"""background.Repeating: serve's evaluation thread, which keeps the schedule itself and hands outcomes to the loop.

Every wait below is a bound on a hang (10 s), never a timing assertion; the only time compared is that a call
starts no sooner than the interval after the one before, which the thread's sleep guarantees."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time

from numawatch.background import Repeating

HANG = 10.0  # seconds: a bound on a hang, not a timing assertion


class Outcomes:
    """What ``deliver`` was given, with the thread it ran on, and a way to wait for the n-th outcome."""

    def __init__(self) -> None:
        self.items: list[tuple[object, BaseException | None, float]] = []
        self.threads: set[int] = set()
        self.arrived = asyncio.Event()

    def deliver(self, result: object, error: BaseException | None, seconds: float) -> None:
        self.items.append((result, error, seconds))
        self.threads.add(threading.get_ident())
        self.arrived.set()

    async def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + HANG
        while len(self.items) < count:
            assert time.monotonic() < deadline, f"only {len(self.items)} of {count} outcomes came"
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), 0.1)


async def outcomes_of(function, interval: float, count: int, name: str = "t") -> Outcomes:
    """Run ``function`` repeatedly until ``count`` outcomes came, then stop."""
    outcomes = Outcomes()
    repeating = Repeating(function, interval, outcomes.deliver, asyncio.get_running_loop(), name)
    repeating.start()
    try:
        await outcomes.wait_for(count)
    finally:
        repeating.stop()
    return outcomes


class Held:
    """A call that says when it started; the first one then waits until ``release`` is set."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        self.entered.set()
        if self.calls == 1:
            assert self.release.wait(HANG)
        return self.calls


def _join(name: str) -> None:
    """Wait for the thread called ``name`` to end (it may have ended already)."""
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join(HANG)
            assert not thread.is_alive(), "the thread did not end"


async def test_it_calls_now_then_again_each_interval_start_to_start_and_delivers_on_the_loop():
    starts: list[float] = []

    def call() -> int:
        starts.append(time.monotonic())
        return len(starts)

    outcomes = await outcomes_of(call, 0.05, 3)

    assert [result for result, _, _ in outcomes.items[:3]] == [1, 2, 3]
    assert all(error is None and seconds >= 0 for _, error, seconds in outcomes.items)
    assert outcomes.threads == {threading.get_ident()}  # delivered on the loop's thread, not the caller's
    assert all(later - earlier >= 0.049 for earlier, later in itertools.pairwise(starts))


async def test_its_thread_is_one_named_daemon_for_every_call():
    threads: list[threading.Thread] = []
    await outcomes_of(lambda: threads.append(threading.current_thread()), 0.01, 3, "numawatch-evaluation")

    assert len(set(threads)) == 1
    assert threads[0].daemon and threads[0].name == "numawatch-evaluation"
    assert threads[0] is not threading.current_thread()


async def test_a_wake_calls_again_at_once_instead_of_after_the_interval():
    outcomes = Outcomes()
    repeating = Repeating(time.monotonic, 3600.0, outcomes.deliver, asyncio.get_running_loop(), "t")
    repeating.start()
    try:
        await outcomes.wait_for(1)
        repeating.wake()
        await outcomes.wait_for(2)
    finally:
        repeating.stop()

    assert len(outcomes.items) == 2


async def test_a_wake_during_a_call_leads_to_another_call_right_after_it():
    call = Held()
    outcomes = Outcomes()
    repeating = Repeating(call, 3600.0, outcomes.deliver, asyncio.get_running_loop(), "t")
    repeating.start()
    try:
        assert await asyncio.to_thread(call.entered.wait, HANG)
        repeating.wake()  # while the first call runs
        call.release.set()
        await outcomes.wait_for(2)
    finally:
        repeating.stop()

    assert [result for result, _, _ in outcomes.items] == [1, 2]


async def test_a_failing_call_is_delivered_as_its_error_and_the_calls_go_on():
    calls: list[int] = []

    def call() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        return len(calls)

    outcomes = await outcomes_of(call, 0.01, 2)

    (first, error, _), (second, no_error, _) = outcomes.items[:2]
    assert first is None and isinstance(error, OSError) and error.errno == 5
    assert second == 2 and no_error is None


async def test_stop_lets_the_call_in_flight_end_delivers_nothing_more_and_starts_no_other():
    call = Held()
    outcomes = Outcomes()
    repeating = Repeating(call, 0.0, outcomes.deliver, asyncio.get_running_loop(), "numawatch-test-stop")
    repeating.start()
    assert await asyncio.to_thread(call.entered.wait, HANG)
    repeating.stop()
    call.release.set()
    await asyncio.to_thread(_join, "numawatch-test-stop")
    await asyncio.sleep(0.05)  # the loop runs whatever the thread handed it before it ended

    assert call.calls == 1
    assert outcomes.items == []


def test_the_thread_ends_once_the_loop_is_closed():
    call = Held()
    loop = asyncio.new_event_loop()
    repeating: Repeating[int] = Repeating(call, 0.0, lambda *outcome: None, loop, "numawatch-test-closed")
    repeating.start()
    assert call.entered.wait(HANG)
    loop.close()
    call.release.set()

    _join("numawatch-test-closed")  # asserts that it ended
    assert call.calls == 1


async def test_each_outcome_says_how_long_its_call_took():
    outcomes = await outcomes_of(lambda: time.sleep(0.02), 0.0, 2)

    assert all(seconds >= 0.02 for _, _, seconds in outcomes.items)
