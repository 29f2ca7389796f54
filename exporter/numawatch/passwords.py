"""bcrypt checks for ``numawatch serve``'s basic auth: off the event loop, in a small pool of threads of its own.

A bcrypt check costs tens of milliseconds of CPU by design, so it must not run on the event loop (every other client
would wait) nor in the loop's default executor (shared with whatever else uses it, and its threads are joined at
exit). The pool has a few daemon threads, so guessing costs numawatch at most that many CPUs, and a bounded number
of checks may wait for them: beyond that a request is refused at once (``PoolBusy``) instead of queueing without
end. Successful checks are remembered by ``webconfig.BasicAuth``, so a scraper whose password was verified once is
answered without entering the pool at all.

That cache is empty after a restart, and a flood of wrong passwords may be running already: the scraper's first
check must not queue behind the guesses. So the waiting checks are kept per client (its address), at most
``PER_CLIENT`` each, and taken in turns, one client after another; and clients that gave a wrong password recently
(``failed``) wait until no other client has a check waiting. A scraper's first check therefore waits for the
checks already running and no more, however many guesses are queued.

A check whose requester went away before a thread took it is dropped unrun.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# bcrypt uses one CPU per check; numawatch runs on the node's housekeeping CPUs and must leave them to the node.
VERIFIER_THREADS = 2
# Checks that may wait (running ones included), and of them from one client. Prometheus sends a verified password
# again and again, so only the first scrape after a start or a password change ever waits here; anything beyond is
# answered 503 at once.
MAX_WAITING = 64
PER_CLIENT = 4
# Clients remembered as having given a wrong password (the most recent ones; an address is a few dozen bytes).
MAX_SUSPECTS = 4096


class PoolBusy(Exception):
    """Too many checks are waiting already, in all or from this client: refuse this request now."""


@dataclass
class _Job(Generic[T]):
    function: Callable[[], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    client: str
    abandoned: bool = False


class VerifierPool:
    """Runs blocking checks in ``threads`` daemon threads, at most ``max_waiting`` at a time queued or running
    (``per_client`` of one client), clients in turns and those that ``failed`` last."""

    def __init__(self, threads: int = VERIFIER_THREADS, max_waiting: int = MAX_WAITING,
                 per_client: int = PER_CLIENT) -> None:
        if threads < 1 or max_waiting < threads or per_client < 1:
            raise ValueError(f"need at least one thread and as many places, got {threads} and {max_waiting}")
        self.threads = threads
        self.max_waiting = max_waiting
        self.per_client = per_client
        self.waiting = 0
        self._by_client: dict[str, int] = {}  # waiting checks per client (on the event loop only)
        # Queued jobs per client, in the order clients take turns; suspects' apart. Under _ready.
        self._queued: OrderedDict[str, deque[_Job[object]]] = OrderedDict()
        self._suspected: OrderedDict[str, deque[_Job[object]]] = OrderedDict()
        self._suspects: OrderedDict[str, None] = OrderedDict()
        self._ready = threading.Condition()
        self._started = False
        self._start_lock = threading.Lock()

    async def run(self, function: Callable[[], T], client: str = "") -> T:
        """``function()`` in one of the pool's threads; raises ``PoolBusy`` when too many wait already."""
        if self.waiting >= self.max_waiting or self._by_client.get(client, 0) >= self.per_client:
            raise PoolBusy()
        self._start()
        loop = asyncio.get_running_loop()
        job: _Job[T] = _Job(function, loop.create_future(), loop, client)
        self.waiting += 1
        self._by_client[client] = self._by_client.get(client, 0) + 1
        with self._ready:
            queues = self._suspected if client in self._suspects else self._queued
            queues.setdefault(client, deque()).append(job)  # type: ignore[arg-type]  # jobs of every result type
            self._ready.notify()
        try:
            return await job.future
        finally:
            self.waiting -= 1
            left = self._by_client[client] - 1
            if left:
                self._by_client[client] = left
            else:
                del self._by_client[client]
            job.abandoned = True  # done, or the requester is gone: a thread that has not taken it yet skips it

    def failed(self, client: str) -> None:
        """``client`` gave a wrong password: its checks wait for everyone else's from now on."""
        with self._ready:
            self._suspects[client] = None
            self._suspects.move_to_end(client)
            while len(self._suspects) > MAX_SUSPECTS:
                self._suspects.popitem(last=False)
            moved = self._queued.pop(client, None)
            if moved:
                self._suspected.setdefault(client, deque()).extend(moved)

    def succeeded(self, client: str) -> None:
        """``client`` gave a right password: no longer a suspect."""
        with self._ready:
            self._suspects.pop(client, None)

    def _start(self) -> None:
        with self._start_lock:
            if self._started:
                return
            for number in range(self.threads):
                threading.Thread(target=self._work, name=f"numawatch-bcrypt-{number}", daemon=True).start()
            self._started = True

    def _next(self) -> _Job[object]:
        """The next job: the first client's in turn (not suspected first), that client then going last."""
        with self._ready:
            while not self._queued and not self._suspected:
                self._ready.wait()
            queues = self._queued if self._queued else self._suspected
            client, jobs = next(iter(queues.items()))
            job = jobs.popleft()
            del queues[client]
            if jobs:
                queues[client] = jobs
            return job

    def _work(self) -> None:
        while True:
            job = self._next()
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


__all__ = ["MAX_SUSPECTS", "MAX_WAITING", "PER_CLIENT", "VERIFIER_THREADS", "PoolBusy", "VerifierPool"]
