"""The NVML lifecycle: initialised once, every call on one dedicated thread with a time limit, shut down on exit.

Why a thread of its own (gpu-and-host.md §2.4, §2.5):

- NVML calls can hang: ``nvmlInit`` hung for hours on a 570.x driver (NVIDIA/go-nvml#152), and a GPU falling off the
  bus stalls calls on it. A call that does not return within ``call_timeout`` is abandoned: the caller gets
  ``NvmlTimeout`` (a ``SourceUnavailable``, so the nvml source is reported down with the reason) and every later
  call fails fast until the stuck one returns. Evaluations, and therefore ``/metrics`` and ``/healthz``, go on.
- The thread is a daemon thread of our own, not a ``concurrent.futures`` pool: the pool's workers are joined at
  interpreter exit, and a hung driver call would then keep numawatch from ever exiting.
- Shutting down at exit is bounded too: ``cleanup_ctx`` runs ``close()`` in a daemon thread and waits at most
  ``shutdown_timeout`` for it, so a hung ``nvmlShutdown`` (or a close waiting for a hung call to release the session)
  never keeps serve from exiting on SIGTERM.
- One thread serialises the calls. They are "pretty serializing" in the driver anyway (an NVIDIA engineer in
  flightlessmango/MangoHud#1307), and a single thread makes "the previous call is still stuck" a simple question.

Initialisation is lazy (the first call, or ``start()``) and happens once: without persistence mode ``nvmlInit``
costs seconds (NVIDIA/nvidia-docker#1279). When it fails (no driver: ``NVMLError_LibraryNotFound``, at once)
the reason is kept and another attempt is made at most every ``retry_after`` seconds, so a driver installed later is
picked up without a restart. ``request_restart()`` (called on GPU hotplug) makes the next call shut NVML down and
initialise it again, since NVML enumerates the GPUs at initialisation.

The ``pynvml`` module comes from the ``nvidia-ml-py`` package (the PyPI ``pynvml`` package is a deprecated shim that
warns on import). Tests inject a fake module through ``NvmlSession(nvml=...)``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import queue
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from numawatch.background import in_daemon_thread
from numawatch.errors import SourceUnavailable
from numawatch.model.gpu import NvmlCall

log = logging.getLogger(__name__)

# A healthy NVML query takes microseconds to milliseconds; two seconds is a hang, not a slow call. nvmlInit may take
# seconds legitimately (driver state is rebuilt when persistence mode is off).
DEFAULT_CALL_TIMEOUT = 2.0
DEFAULT_INIT_TIMEOUT = 20.0
DEFAULT_RETRY_AFTER = 60.0
# What serve's exit waits for NVML to shut down (nvmlShutdown takes milliseconds when the driver is healthy); SIGTERM
# must stop the process within a second, well inside the DaemonSet's termination grace period.
DEFAULT_SHUTDOWN_TIMEOUT = 0.5

# Error classes (pynvml generates them from NVML_ERROR_*) with a plain-words explanation for the one-line reason.
_EXPLAINED = {
    "NVMLError_LibraryNotFound": "no NVIDIA driver library (libnvidia-ml.so.1) here",
    "NVMLError_DriverNotLoaded": "the nvidia kernel module is not loaded",
    "NVMLError_LibRmVersionMismatch": "the driver library and the kernel module differ (reboot after a driver upgrade)",
    "NVMLError_NoPermission": "no permission to use NVML",
    "NVMLError_GpuIsLost": "the GPU fell off the bus",
    "NVMLError_ResetRequired": "the GPU needs a reset",
}


# The sampling calls answer "nothing buffered since lastSeen" with an error: NOT_FOUND (no sample newer than the
# timestamp; seen on an H200 with driver 580 for nvmlDeviceGetProcessUtilization's first call after a GPU sample),
# NO_DATA, or, from nvmlDeviceGetProcessUtilization, pynvml's NVMLError(SUCCESS) when the sizing call finds none.
# Those are answers, not failures: counting them would make a failure-rate alert fire on every idle GPU.
SAMPLING_CALLS = frozenset({"nvmlDeviceGetSamples", "nvmlDeviceGetProcessUtilization"})
EMPTY_ANSWERS = frozenset({"NVMLError_NotFound", "NVMLError_NoData"})


def is_empty_answer(call: str, error: BaseException) -> bool:
    """Whether a sampling call's error only says that no sample was buffered since the timestamp given."""
    if call not in SAMPLING_CALLS:
        return False
    return error_name(error) in EMPTY_ANSWERS or getattr(error, "value", None) == 0


class NvmlUnavailable(SourceUnavailable):
    """NVML cannot be used now (not installed, no driver, initialisation failed, session closed)."""


class NvmlTimeout(NvmlUnavailable):
    """An NVML call did not return within its time limit, or an earlier one is still stuck."""


def describe(error: BaseException) -> str:
    """A one-line reason naming the NVML error class: ``NVMLError_GpuIsLost (the GPU fell off the bus)``."""
    name = type(error).__name__
    text = " ".join(str(error).split())
    explained = _EXPLAINED.get(name)
    if explained:
        return f"{name} ({explained})"
    return f"{name}: {text}" if text and text != name else name


def error_name(error: BaseException) -> str:
    return type(error).__name__


@dataclass
class _Job:
    name: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    started: float = 0.0  # monotonic, when the NVML thread began it


@dataclass
class _CallStats:
    count: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0
    errors: int = 0
    timeouts: int = 0


class NvmlSession:
    """NVML for the life of one numawatch process. Thread-safe: callers are serialised."""

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        init_timeout: float = DEFAULT_INIT_TIMEOUT,
        retry_after: float = DEFAULT_RETRY_AFTER,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._module = nvml
        self.call_timeout = call_timeout
        self.init_timeout = init_timeout
        self.retry_after = retry_after
        self.shutdown_timeout = shutdown_timeout
        self._clock = clock
        self._lock = threading.RLock()  # one caller at a time (the sampler's thread, start/close from the loop)
        self._stats_lock = threading.Lock()  # the NVML thread updates stats while a caller may read them
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running: _Job | None = None  # the last job handed to the thread; stuck if not done
        self._initialised = False
        self._restart = False
        self._closed = False
        self._reason = "NVML has not been initialised yet"
        self._next_attempt = 0.0
        self._stats: dict[str, _CallStats] = {}

    # ----------------------------------------------------------------------------------------- state
    @property
    def up(self) -> bool:
        return self._initialised and not self._stuck()

    @property
    def reason(self) -> str:
        """Why NVML is not usable now ("" when it is)."""
        stuck = self._stuck()
        if stuck is not None:
            return self._stuck_reason(stuck)
        return "" if self._initialised else self._reason

    @property
    def nvml(self) -> Any:
        """The pynvml module in use (loaded on first use)."""
        return self._load()

    def is_nvml_error(self, error: BaseException) -> bool:
        module = self._module
        base = getattr(module, "NVMLError", None) if module is not None else None
        return base is not None and isinstance(error, base)

    def calls(self) -> tuple[NvmlCall, ...]:
        """What each NVML function has cost so far, by name."""
        with self._stats_lock:
            return tuple(
                NvmlCall(name, s.count, s.seconds, s.max_seconds, s.errors, s.timeouts)
                for name, s in sorted(self._stats.items())
            )

    # ----------------------------------------------------------------------------------------- lifecycle
    def start(self) -> bool:
        """Initialise NVML now (blocking for at most ``init_timeout``); True when it is up. Never raises."""
        try:
            self.ensure_started()
        except NvmlUnavailable as error:
            log.info("NVML is unavailable: %s", error)
            return False
        return True

    def ensure_started(self) -> None:
        """Initialise NVML if needed; raise ``NvmlUnavailable`` with the reason when it cannot be used."""
        with self._lock:
            if self._closed:
                raise NvmlUnavailable("the NVML session is closed")
            self._adopt_late_init()
            stuck = self._stuck()
            if stuck is not None:
                raise NvmlTimeout(self._stuck_reason(stuck))
            if self._restart and self._initialised:
                self._restart = False
                self._shutdown()
                self._next_attempt = 0.0
            if self._initialised:
                return
            if self._clock() < self._next_attempt:
                raise NvmlUnavailable(self._reason)
            module = self._load()
            try:
                self._run(module, "nvmlInit", (), self.init_timeout)
            except NvmlTimeout as error:
                self._reason = str(error)
                raise
            except Exception as error:
                self._reason = f"nvmlInit failed: {describe(error)}"
                self._next_attempt = self._clock() + self.retry_after
                raise NvmlUnavailable(self._reason) from None
            self._initialised = True
            self._reason = ""
            log.info("NVML initialised")

    def request_restart(self) -> None:
        """Shut NVML down and initialise it again before the next call (GPUs were added or removed).

        Only flags are set, without the lock: it is called from the event loop (udev events), which must not wait
        for an NVML call in progress.
        """
        self._restart = True
        self._next_attempt = 0.0

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until the NVML thread has finished the last call handed to it (a stuck one included); False when it
        is still running after ``timeout`` seconds."""
        job = self._running
        return job is None or job.done.wait(timeout)

    def close(self) -> None:
        """Shut NVML down (if it was initialised and is not stuck) and stop the NVML thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._initialised and self._stuck() is None:
                self._shutdown()
            elif self._initialised:
                log.warning("not shutting NVML down: %s", self._stuck_reason(self._stuck()))
            self._initialised = False
            self._reason = "the NVML session is closed"
            if self._thread is not None:
                self._jobs.put(None)

    def __enter__(self) -> NvmlSession:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def cleanup_ctx(self, app: object = None) -> AsyncIterator[None]:
        """For aiohttp's ``app.cleanup_ctx``: shut NVML down at exit, off the event loop, waiting at most
        ``shutdown_timeout`` seconds for it.

        Nothing happens at start-up: the first evaluation initialises NVML on the sampler's worker thread, so a slow
        ``nvmlInit`` (seconds without persistence mode, up to ``init_timeout`` when hung) never delays serving.
        """
        yield
        try:
            async with asyncio.timeout(self.shutdown_timeout):
                # Not asyncio.to_thread: the default executor is joined at exit, so a close() stuck behind a hung
                # call (it waits for the session lock, then for nvmlShutdown) would hold up the process' exit.
                await in_daemon_thread(self.close, "numawatch-nvml-close")
        except TimeoutError:
            log.warning("NVML did not shut down within %gs; exiting without it (the driver cleans up after the "
                        "process)", self.shutdown_timeout)

    # ----------------------------------------------------------------------------------------- calls
    def call(self, name: str, *args: Any) -> Any:
        """Run ``pynvml.<name>(*args)`` on the NVML thread and return its result.

        Raises the module's ``NVMLError`` subclasses as they are, ``NvmlTimeout`` when the call does not return within
        ``call_timeout`` (or an earlier call is still stuck), ``NvmlUnavailable`` when NVML cannot be initialised.
        """
        with self._lock:
            self.ensure_started()
            return self._run(self._load(), name, args, self.call_timeout)

    def _run(self, module: Any, name: str, args: tuple[Any, ...], timeout: float) -> Any:
        stuck = self._stuck()
        if stuck is not None:
            raise NvmlTimeout(self._stuck_reason(stuck))
        function = getattr(module, name, None)
        if function is None:
            raise NvmlUnavailable(f"this pynvml has no {name} (nvidia-ml-py too old)")
        job = _Job(name, function, args)
        self._running = job
        self._ensure_thread()
        self._jobs.put(job)
        if not job.done.wait(timeout):
            with self._stats_lock:
                self._stats.setdefault(name, _CallStats()).timeouts += 1
            log.error("NVML call %s did not return within %gs; NVML is down until it does", name, timeout)
            raise NvmlTimeout(
                f"NVML call {name} did not return within {timeout:g}s (hung driver?); no NVML calls until it does"
            )
        if job.error is not None:
            raise job.error
        return job.result

    def _shutdown(self) -> None:
        try:
            self._run(self._load(), "nvmlShutdown", (), self.call_timeout)
        except Exception as error:  # shutting down: nothing left to protect, just say what happened
            log.warning("nvmlShutdown failed: %s", describe(error))
        self._initialised = False

    def _adopt_late_init(self) -> None:
        # An nvmlInit that overran its time limit but then succeeded did initialise NVML; calling it again would only
        # raise the library's reference count.
        job = self._running
        if job is not None and job.name == "nvmlInit" and job.done.is_set() and job.error is None:
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
        return f"NVML call {job.name} has not returned for {age:.0f}s (hung driver?); no NVML calls until it does"

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="numawatch-nvml", daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        """The NVML thread: run jobs one by one until told to stop (a None job)."""
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
                if job.error is not None and not is_empty_answer(job.name, job.error):
                    stats.errors += 1
            job.done.set()

    def _load(self) -> Any:
        if self._module is None:
            with warnings.catch_warnings():
                # The deprecated PyPI "pynvml" shim, if something pulled it in, warns on import (gpu-and-host.md §2.1).
                warnings.simplefilter("ignore", FutureWarning)
                try:
                    self._module = importlib.import_module("pynvml")
                except ImportError:
                    self._reason = "the nvidia-ml-py package (module pynvml) is not installed"
                    raise NvmlUnavailable(self._reason) from None
        return self._module


__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_INIT_TIMEOUT",
    "DEFAULT_RETRY_AFTER",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "NvmlSession",
    "NvmlTimeout",
    "NvmlUnavailable",
    "describe",
    "error_name",
]
