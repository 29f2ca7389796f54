"""Blocking work off the event loop in daemon threads, which neither shutdown nor interpreter exit waits for."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

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
