"""bcrypt checks for ``numawatch serve``'s basic auth: off the event loop, in a small pool of threads of its own.

A bcrypt check costs tens of milliseconds of CPU by design, so it must not run on the event loop (every other client
would wait) nor in the loop's default executor (shared with whatever else uses it, and its threads are joined at
exit). The pool has a few daemon threads, so guessing costs numawatch at most that many CPUs, and a bounded number
of checks may wait for them: beyond that a request is refused at once (``PoolBusy``) instead of queueing without
end. Successful checks are remembered by ``webconfig.BasicAuth``, so a scraper whose password was verified once is
answered without entering the pool at all: a flood of wrong passwords fills the pool, never the path of the right
ones.

A check whose requester went away before a thread took it is dropped unrun.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# bcrypt uses one CPU per check; numawatch runs on the node's housekeeping CPUs and must leave them to the node.
VERIFIER_THREADS = 2
# Checks that may wait (running ones included). Prometheus sends a verified password again and again, so only the
# first scrape after a start or a password change ever waits here; anything beyond is answered 503 at once.
MAX_WAITING = 16


class PoolBusy(Exception):
    """``MAX_WAITING`` checks are already waiting: refuse this request now rather than queue it."""


@dataclass
class _Job(Generic[T]):
    function: Callable[[], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    abandoned: bool = False


class VerifierPool:
    """Runs blocking checks in ``threads`` daemon threads, at most ``max_waiting`` at a time queued or running."""

    def __init__(self, threads: int = VERIFIER_THREADS, max_waiting: int = MAX_WAITING) -> None:
        if threads < 1 or max_waiting < threads:
            raise ValueError(f"need at least one thread and as many places, got {threads} and {max_waiting}")
        self.threads = threads
        self.max_waiting = max_waiting
        self.waiting = 0
        self._queue: queue.SimpleQueue[_Job[object]] = queue.SimpleQueue()
        self._started = False
        self._start_lock = threading.Lock()

    async def run(self, function: Callable[[], T]) -> T:
        """``function()`` in one of the pool's threads; raises ``PoolBusy`` when too many wait already."""
        if self.waiting >= self.max_waiting:
            raise PoolBusy()
        self._start()
        loop = asyncio.get_running_loop()
        job: _Job[T] = _Job(function, loop.create_future(), loop)
        self.waiting += 1
        self._queue.put(job)  # type: ignore[arg-type]  # the queue holds jobs of every result type
        try:
            return await job.future
        finally:
            self.waiting -= 1
            job.abandoned = True  # done, or the requester is gone: a thread that has not taken it yet skips it

    def _start(self) -> None:
        with self._start_lock:
            if self._started:
                return
            for number in range(self.threads):
                threading.Thread(target=self._work, name=f"numawatch-bcrypt-{number}", daemon=True).start()
            self._started = True

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job.abandoned:
                continue
            try:
                result, error = job.function(), None
            except Exception as failure:  # handed to the requester, which decides
                result, error = None, failure
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting any more
                job.loop.call_soon_threadsafe(_settle, job.future, result, error)


def _settle(future: asyncio.Future[object], result: object, error: Exception | None) -> None:
    if future.done():  # the requester was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


__all__ = ["MAX_WAITING", "VERIFIER_THREADS", "PoolBusy", "VerifierPool"]
