"""A vendor's GPU management library for the life of one numawatch process: loaded lazily, initialised once, every
call on one dedicated thread with a time limit, shut down on exit.

NVML (nvml_session.py), AMD SMI and HLML (sources/amdsmi.py, sources/hlml.py) are C libraries behind Python
bindings that talk to a kernel driver, and share the ways they fail: a call that never returns (a hung driver, a
device fallen off the bus), a library or driver that is not there, an initialisation that costs seconds. So each is
used the same way (``Library`` says what differs: the module, its init and shutdown functions, how its errors are
named):

- A call that does not return within ``call_timeout`` is abandoned: the caller gets the library's timeout error (a
  ``SourceUnavailable``, so the source is reported down with the reason) and every later call fails fast until the
  stuck one returns. Evaluations, and therefore ``/metrics`` and ``/healthz``, go on.
- The thread is a daemon thread of our own, not a ``concurrent.futures`` pool: the pool's workers are joined at
  interpreter exit, and a hung driver call would then keep numawatch from ever exiting.
- Shutting down at exit is bounded too: ``cleanup_ctx`` runs ``close()`` in a daemon thread and waits at most
  ``shutdown_timeout`` for it, so a hung shutdown never keeps serve from exiting on SIGTERM.
- One thread serialises the calls; the drivers serialise them anyway, and a single thread makes "the previous call
  is still stuck" a simple question.

Initialisation is lazy (the first call, or ``start()``) and happens once. When it fails (no library, no driver) the
reason is kept and another attempt is made at most every ``retry_after`` seconds, so a driver installed later is
picked up without a restart. ``request_restart()`` (GPU hotplug) makes the next call shut the library down and
initialise it again, since these libraries enumerate the devices at initialisation.

The module is imported only when first needed: none of the bindings is a dependency of numawatch (nvidia-ml-py is
installed with it; ``amdsmi`` and ``habana-pyhlml`` come with the vendors' drivers). Tests inject fake modules.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import queue
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from numawatch.background import in_daemon_thread
from numawatch.errors import SourceUnavailable
from numawatch.model.gpu import NvmlCall

log = logging.getLogger(__name__)

# A healthy query takes microseconds to milliseconds; two seconds is a hang, not a slow call. Initialisation may take
# seconds legitimately (driver state is rebuilt when persistence mode is off).
DEFAULT_CALL_TIMEOUT = 2.0
DEFAULT_INIT_TIMEOUT = 20.0
DEFAULT_RETRY_AFTER = 60.0
# What serve's exit waits for the library to shut down; SIGTERM must stop the process within a second, well inside
# the DaemonSet's termination grace period.
DEFAULT_SHUTDOWN_TIMEOUT = 0.5


class LibraryUnavailable(SourceUnavailable):
    """The library cannot be used now (not installed, no driver, initialisation failed, session closed)."""


class LibraryTimeout(LibraryUnavailable):
    """A call did not return within its time limit, or an earlier one is still stuck."""


def class_name(error: BaseException) -> str:
    return type(error).__name__


def describe_class(error: BaseException, explained: Mapping[str, str] | None = None) -> str:
    """A one-line reason naming the error class and its text (or a plain-words explanation of it)."""
    name = type(error).__name__
    text = " ".join(str(error).split())
    known = (explained or {}).get(name)
    if known:
        return f"{name} ({known})"
    return f"{name}: {text}" if text and text != name else name


def _never_empty(call: str, error: BaseException) -> bool:
    return False


@dataclass(frozen=True)
class Library:
    """What differs between the vendors' bindings."""

    label: str  # in messages: "NVML", "AMD SMI", "HLML"
    module: str  # the Python module: "pynvml", "amdsmi", "pyhlml"
    package: str  # the distribution that provides it, for the "not installed" reason
    init: str  # the initialisation function
    shutdown: str
    error_base: str  # the module attribute every error of the library derives from
    thread: str  # the name of the calling thread
    # The arguments of the init function, from the module (AMD SMI's flags are an enum of the module)
    init_args: Callable[[Any], tuple[Any, ...]] = lambda module: ()
    describe: Callable[[BaseException], str] = describe_class
    # Errors that only say "nothing new since the timestamp given": answers, not failures (NVML's sampling calls)
    empty_answer: Callable[[str, BaseException], bool] = _never_empty
    unavailable: type[LibraryUnavailable] = LibraryUnavailable
    timeout: type[LibraryTimeout] = LibraryTimeout


@dataclass
class _Job:
    name: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    started: float = 0.0  # monotonic, when the library's thread began it


@dataclass
class _CallStats:
    count: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0
    errors: int = 0
    timeouts: int = 0


class LibrarySession:
    """One vendor library for the life of one numawatch process. Thread-safe: callers are serialised."""

    def __init__(
        self,
        library: Library,
        module: Any | None = None,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        init_timeout: float = DEFAULT_INIT_TIMEOUT,
        retry_after: float = DEFAULT_RETRY_AFTER,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.library = library
        self._module = module
        self.call_timeout = call_timeout
        self.init_timeout = init_timeout
        self.retry_after = retry_after
        self.shutdown_timeout = shutdown_timeout
        self._clock = clock
        self._lock = threading.RLock()  # one caller at a time (the sampler's thread, start/close from the loop)
        self._stats_lock = threading.Lock()  # the library's thread updates stats while a caller may read them
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running: _Job | None = None  # the last job handed to the thread; stuck if not done
        self._initialised = False
        self._restart = False
        self._closed = False
        self._reason = f"{library.label} has not been initialised yet"
        self._next_attempt = 0.0
        self._stats: dict[str, _CallStats] = {}

    # ----------------------------------------------------------------------------------------- state
    @property
    def up(self) -> bool:
        return self._initialised and not self._stuck()

    @property
    def reason(self) -> str:
        """Why the library is not usable now ("" when it is)."""
        stuck = self._stuck()
        if stuck is not None:
            return self._stuck_reason(stuck)
        return "" if self._initialised else self._reason

    @property
    def module(self) -> Any:
        """The bindings' module in use (loaded on first use)."""
        return self._load()

    def is_library_error(self, error: BaseException) -> bool:
        """Whether ``error`` is one of the library's own (an answer about a device), not a bug of ours."""
        module = self._module
        base = getattr(module, self.library.error_base, None) if module is not None else None
        return isinstance(base, type) and isinstance(error, base)

    def calls(self) -> tuple[NvmlCall, ...]:
        """What each function has cost so far, by name."""
        with self._stats_lock:
            return tuple(
                NvmlCall(name, s.count, s.seconds, s.max_seconds, s.errors, s.timeouts)
                for name, s in sorted(self._stats.items())
            )

    # ----------------------------------------------------------------------------------------- lifecycle
    def start(self) -> bool:
        """Initialise the library now (blocking for at most ``init_timeout``); True when it is up. Never raises."""
        try:
            self.ensure_started()
        except LibraryUnavailable as error:
            log.info("%s is unavailable: %s", self.library.label, error)
            return False
        return True

    def ensure_started(self) -> None:
        """Initialise the library if needed; raise its unavailable error with the reason when it cannot be used."""
        library = self.library
        with self._lock:
            if self._closed:
                raise library.unavailable(f"the {library.label} session is closed")
            self._adopt_late_init()
            stuck = self._stuck()
            if stuck is not None:
                raise library.timeout(self._stuck_reason(stuck))
            if self._restart and self._initialised:
                self._restart = False
                self._shutdown()
                self._next_attempt = 0.0
            if self._initialised:
                return
            if self._clock() < self._next_attempt:
                raise library.unavailable(self._reason)
            module = self._load()
            try:
                self._run(module, library.init, library.init_args(module), self.init_timeout)
            except LibraryTimeout as error:
                self._reason = str(error)
                raise
            except Exception as error:
                self._reason = f"{library.init} failed: {library.describe(error)}"
                self._next_attempt = self._clock() + self.retry_after
                raise library.unavailable(self._reason) from None
            self._initialised = True
            self._reason = ""
            log.info("%s initialised", library.label)

    def request_restart(self) -> None:
        """Shut the library down and initialise it again before the next call (devices were added or removed).

        Only flags are set, without the lock: it is called from the event loop (udev events), which must not wait
        for a call in progress.
        """
        self._restart = True
        self._next_attempt = 0.0

    def close(self) -> None:
        """Shut the library down (if it was initialised and is not stuck) and stop its thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._initialised and self._stuck() is None:
                self._shutdown()
            elif self._initialised:
                log.warning("not shutting %s down: %s", self.library.label, self._stuck_reason(self._stuck()))
            self._initialised = False
            self._reason = f"the {self.library.label} session is closed"
            if self._thread is not None:
                self._jobs.put(None)

    def __enter__(self) -> LibrarySession:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def cleanup_ctx(self, app: object = None) -> AsyncIterator[None]:
        """For aiohttp's ``app.cleanup_ctx``: shut the library down at exit, off the event loop, waiting at most
        ``shutdown_timeout`` seconds for it.

        Nothing happens at start-up: the first evaluation initialises the library on the sampler's worker thread, so
        a slow initialisation never delays serving.
        """
        yield
        try:
            async with asyncio.timeout(self.shutdown_timeout):
                # Not asyncio.to_thread: the default executor is joined at exit, so a close() stuck behind a hung
                # call (it waits for the session lock, then for the shutdown call) would hold up the process' exit.
                await in_daemon_thread(self.close, f"{self.library.thread}-close")
        except TimeoutError:
            log.warning("%s did not shut down within %gs; exiting without it (the driver cleans up after the "
                        "process)", self.library.label, self.shutdown_timeout)

    # ----------------------------------------------------------------------------------------- calls
    def call(self, name: str, *args: Any) -> Any:
        """Run ``<module>.<name>(*args)`` on the library's thread and return its result.

        Raises the module's own errors as they are, the library's timeout error when the call does not return within
        ``call_timeout`` (or an earlier call is still stuck), its unavailable error when it cannot be initialised.
        """
        with self._lock:
            self.ensure_started()
            return self._run(self._load(), name, args, self.call_timeout)

    def _run(self, module: Any, name: str, args: tuple[Any, ...], timeout: float) -> Any:
        library = self.library
        stuck = self._stuck()
        if stuck is not None:
            raise library.timeout(self._stuck_reason(stuck))
        function = getattr(module, name, None)
        if function is None:
            raise library.unavailable(f"this {library.module} has no {name} ({library.package} too old)")
        job = _Job(name, function, args)
        self._running = job
        self._ensure_thread()
        self._jobs.put(job)
        if not job.done.wait(timeout):
            with self._stats_lock:
                self._stats.setdefault(name, _CallStats()).timeouts += 1
            log.error("%s call %s did not return within %gs; %s is down until it does", library.label, name,
                      timeout, library.label)
            raise library.timeout(
                f"{library.label} call {name} did not return within {timeout:g}s (hung driver?); no "
                f"{library.label} calls until it does"
            )
        if job.error is not None:
            # Raised here, the error's traceback holds this frame and every caller's up to the evaluation (with all
            # they hold: a reading in progress). Neither the job nor the session may keep the error, nor this frame
            # keep it in a variable, or that stack is a reference cycle the collector frees only at a full pass (a
            # failed initialisation is retried every minute: memory grew with every retry until it ran).
            error, job.error = job.error, None
            self._running = None  # the job finished: nothing is stuck, no late initialisation to adopt
            try:
                raise error
            finally:
                del error
        return job.result

    def _shutdown(self) -> None:
        try:
            self._run(self._load(), self.library.shutdown, (), self.call_timeout)
        except Exception as error:  # shutting down: nothing left to protect, just say what happened
            log.warning("%s failed: %s", self.library.shutdown, self.library.describe(error))
        self._initialised = False

    def _adopt_late_init(self) -> None:
        # An initialisation that overran its time limit but then succeeded did initialise the library; calling it
        # again would only raise the library's reference count.
        job = self._running
        if job is not None and job.name == self.library.init and job.done.is_set() and job.error is None:
            if not self._initialised:
                self._initialised = True
                self._reason = ""
            self._running = None

    def _stuck(self) -> _Job | None:
        job = self._running
        return job if job is not None and not job.done.is_set() else None

    def _stuck_reason(self, job: _Job | None) -> str:
        if job is None:
            return ""
        age = self._clock() - job.started if job.started else 0.0
        label = self.library.label
        return f"{label} call {job.name} has not returned for {age:.0f}s (hung driver?); no {label} calls until it does"

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name=self.library.thread, daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        """The library's thread: run jobs one by one until told to stop (a None job)."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job.started = self._clock()
            start = time.perf_counter()
            try:
                job.result = job.function(*job.args)
            except Exception as error:  # handed to the caller, who knows what an error of this call means
                job.error = error
            elapsed = time.perf_counter() - start
            with self._stats_lock:
                stats = self._stats.setdefault(job.name, _CallStats())
                stats.count += 1
                stats.seconds += elapsed
                stats.max_seconds = max(stats.max_seconds, elapsed)
                if job.error is not None and not self.library.empty_answer(job.name, job.error):
                    stats.errors += 1
            job.done.set()

    def _load(self) -> Any:
        if self._module is None:
            library = self.library
            with warnings.catch_warnings():
                # The deprecated PyPI "pynvml" shim, if something pulled it in, warns on import (gpu-and-host.md §2.1).
                warnings.simplefilter("ignore", FutureWarning)
                try:
                    self._module = importlib.import_module(library.module)
                except ImportError:
                    self._reason = f"the {library.package} package (module {library.module}) is not installed"
                    raise library.unavailable(self._reason) from None
                except Exception as error:  # bindings that load their C library at import (amdsmi): no library
                    self._reason = f"the {library.module} module cannot be loaded: {describe_class(error)}"
                    raise library.unavailable(self._reason) from None
        return self._module


__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_INIT_TIMEOUT",
    "DEFAULT_RETRY_AFTER",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "Library",
    "LibrarySession",
    "LibraryTimeout",
    "LibraryUnavailable",
    "class_name",
    "describe_class",
]
