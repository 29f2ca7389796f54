"""Blocking work off the event loop in daemon threads, which neither shutdown nor interpreter exit waits for."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


async def in_daemon_thread(function: Callable[[], T], name: str) -> T:
    """Run ``function`` in a new daemon thread and await its result.

    Not ``asyncio.to_thread``: the default executor's threads are joined when the loop and the interpreter shut
    down, so an evaluation stuck in a read (a hung NFS or FUSE mount, a wedged sysfs attribute) would keep numawatch
    from exiting on SIGTERM. A daemon thread is simply left behind.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # the awaiting task was cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            # result is a T whenever error is None; mypy cannot tie the two arguments together.
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = function(), None
        except BaseException as failure:  # handed to the awaiting task, which decides
            result, error = None, failure
        with contextlib.suppress(RuntimeError):  # the loop closed while we ran: nobody is waiting any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future


class Repeating(Generic[T]):
    """Calls ``function`` in one daemon thread now, then every ``interval`` seconds (start to start), or sooner when
    woken, until stopped; each outcome is handed to ``deliver(result, error, seconds)`` on ``loop``.

    One thread that sleeps between calls rather than a new thread per call started by a timer on the loop: the event
    loop then wakes once per call, to take its outcome, instead of three times (the timer, the new thread's start,
    the outcome), and no thread is made and torn down each time. On the benchmark's 32-CPU host that saved 2-5 %
    of serve's CPU (docs/performance.md). The thread is a daemon and nothing joins it, for the reason
    ``in_daemon_thread`` gives.
    """

    def __init__(
        self,
        function: Callable[[], T],
        interval: float,
        deliver: Callable[[T | None, BaseException | None, float], None],
        loop: asyncio.AbstractEventLoop,
        name: str,
    ) -> None:
        self._function = function
        self._interval = interval
        self._deliver = deliver
        self._loop = loop
        self._woken = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Call again at once: now if the thread sleeps, right after the call in flight otherwise (any thread)."""
        self._woken.set()

    def stop(self) -> None:
        """No call starts after this and no outcome is delivered any more; a call in flight runs to its end, not
        waited for (any thread)."""
        self._stopped = True
        self._woken.set()

    def _take(self, result: T | None, error: BaseException | None, seconds: float) -> None:
        if not self._stopped:  # on the loop: stop() may have come between the call's end and now
            self._deliver(result, error, seconds)

    def _run(self) -> None:
        while not self._stopped:
            started = time.monotonic()
            self._woken.clear()  # a wake-up during this call still leads to another one right after
            try:
                result, error = self._function(), None
            except BaseException as failure:  # handed to the loop, which decides
                result, error = None, failure
            seconds = time.monotonic() - started
            try:
                self._loop.call_soon_threadsafe(self._take, result, error, seconds)
            except RuntimeError:  # the loop closed: nobody takes outcomes any more
                return
            del result, error  # the loop holds them now; a sleeping thread keeps nothing alive
            self._woken.wait(max(0.0, self._interval - seconds))
