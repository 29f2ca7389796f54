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

The machinery (thread, time limits, retries) is ``library_session.LibrarySession``, shared with AMD SMI and HLML;
this module says what is NVML's. The ``pynvml`` module comes from the ``nvidia-ml-py`` package (the PyPI ``pynvml``
package is a deprecated shim that warns on import). Tests inject a fake module through ``NvmlSession(nvml=...)``.
"""

from __future__ import annotations

from typing import Any

from numawatch.library_session import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_INIT_TIMEOUT,
    DEFAULT_RETRY_AFTER,
    DEFAULT_SHUTDOWN_TIMEOUT,
    Library,
    LibrarySession,
    LibraryTimeout,
    LibraryUnavailable,
    class_name,
    describe_class,
)

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


class NvmlUnavailable(LibraryUnavailable):
    """NVML cannot be used now (not installed, no driver, initialisation failed, session closed)."""


class NvmlTimeout(NvmlUnavailable, LibraryTimeout):
    """An NVML call did not return within its time limit, or an earlier one is still stuck."""


def describe(error: BaseException) -> str:
    """A one-line reason naming the NVML error class: ``NVMLError_GpuIsLost (the GPU fell off the bus)``."""
    return describe_class(error, _EXPLAINED)


def error_name(error: BaseException) -> str:
    return class_name(error)


NVML = Library(
    label="NVML",
    module="pynvml",
    package="nvidia-ml-py",
    init="nvmlInit",
    shutdown="nvmlShutdown",
    error_base="NVMLError",
    thread="numawatch-nvml",
    describe=describe,
    empty_answer=is_empty_answer,
    unavailable=NvmlUnavailable,
    timeout=NvmlTimeout,
)


class NvmlSession(LibrarySession):
    """NVML for the life of one numawatch process. Thread-safe: callers are serialised."""

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        init_timeout: float = DEFAULT_INIT_TIMEOUT,
        retry_after: float = DEFAULT_RETRY_AFTER,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            NVML,
            nvml,
            call_timeout=call_timeout,
            init_timeout=init_timeout,
            retry_after=retry_after,
            shutdown_timeout=shutdown_timeout,
            **kwargs,
        )

    @property
    def nvml(self) -> Any:
        """The pynvml module in use (loaded on first use)."""
        return self.module

    def is_nvml_error(self, error: BaseException) -> bool:
        return self.is_library_error(error)

    def __enter__(self) -> NvmlSession:
        return self


__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_INIT_TIMEOUT",
    "DEFAULT_RETRY_AFTER",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "NVML",
    "NvmlSession",
    "NvmlTimeout",
    "NvmlUnavailable",
    "describe",
    "error_name",
    "is_empty_answer",
]
