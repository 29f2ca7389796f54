"""What the fake vendor libraries share (tests/fake_amdsmi.py, tests/fake_pyhlml.py; never imported by numawatch): a
module object that logs every call, and calls that hang until released, to test the time limit without waiting; and
waiting, after a release, for a session's thread to finish the released call."""

from __future__ import annotations

import threading
import types
from typing import Any

from numawatch.library_session import LibrarySession


class FakeLibrary(types.ModuleType):
    """A stand-in for a vendor's bindings module."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.log: list[tuple[str, tuple[Any, ...]]] = []
        self.init_calls = 0
        self.shutdown_calls = 0
        self.initialised = 0
        self._hangs: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def hang(self, name: str) -> None:
        """Make ``name`` block until ``release()`` (a hung driver call)."""
        self._hangs[name] = threading.Event()

    def release(self) -> None:
        for event in self._hangs.values():
            event.set()
        self._hangs.clear()

    def calls_to(self, name: str) -> list[tuple[Any, ...]]:
        with self._lock:
            return [args for called, args in self.log if called == name]

    def _enter(self, name: str, *args: Any) -> None:
        with self._lock:
            self.log.append((name, args))
        event = self._hangs.get(name)
        if event is not None:
            event.wait()


def wait_idle(session: LibrarySession, timeout: float) -> bool:
    """Wait until the session's thread has finished the last call handed to it (a released hung one included); False
    when it is still running after ``timeout`` seconds. The session never waits for it itself: it abandons a hung
    call at its time limit and refuses calls until it returns."""
    job = session._running
    return job is None or job.done.wait(timeout)
