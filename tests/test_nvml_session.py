"""NvmlSession: initialised once, shut down on exit, every call on its own thread under a time limit.

The real nvidia-ml-py module is used where this machine can answer (no driver: nvmlInit raises LibraryNotFound);
everything else uses the fake pynvml. Hangs are simulated with calls that block until released, so a test proves the
time limit was honoured by getting an answer while the call is still blocked, never by measuring time.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import weakref

import pytest
from fake_library import wait_idle
from fake_pynvml import FakeGpu, FakeNvml, NVMLError
from numawatch.errors import SourceUnavailable
from numawatch.nvml_session import NvmlSession, NvmlTimeout, NvmlUnavailable, describe


def one_gpu() -> FakeNvml:
    return FakeNvml([FakeGpu("GPU-0000", "00000000:18:00.0")])


@pytest.fixture
def clock():
    now = [1000.0]

    def read() -> float:
        return now[0]

    read.now = now  # type: ignore[attr-defined]
    return read


# --------------------------------------------------------------------------------------------------- this machine
def test_the_real_library_missing_makes_the_session_down_with_library_not_found():
    import pynvml

    session = NvmlSession(nvml=pynvml)
    try:
        if session.start():
            pytest.skip("this machine has an NVIDIA driver: tests/device/check_nvml.sh covers it")
        assert "NVMLError_LibraryNotFound" in session.reason
        with pytest.raises(SourceUnavailable, match="LibraryNotFound"):
            session.call("nvmlDeviceGetCount")
    finally:
        session.close()


def test_pynvml_is_loaded_from_nvidia_ml_py_when_no_module_is_given():
    session = NvmlSession()
    try:
        assert session.nvml.__name__ == "pynvml"
        assert hasattr(session.nvml, "nvmlDeviceGetSamples")
    finally:
        session.close()


# --------------------------------------------------------------------------------------------------- lifecycle
def test_nvml_is_initialised_once_for_many_calls_and_shut_down_on_close():
    fake = one_gpu()
    session = NvmlSession(nvml=fake)

    for _ in range(5):
        assert session.call("nvmlDeviceGetCount") == 1
    session.close()

    assert fake.init_calls == 1
    assert fake.shutdown_calls == 1
    assert fake.initialised == 0


def test_the_session_is_a_context_manager_that_shuts_nvml_down():
    fake = one_gpu()
    with NvmlSession(nvml=fake) as session:
        session.call("nvmlDeviceGetCount")

    assert fake.initialised == 0
    with pytest.raises(NvmlUnavailable, match="closed"):
        session.call("nvmlDeviceGetCount")


def test_close_without_any_call_never_touches_nvml():
    fake = one_gpu()
    NvmlSession(nvml=fake).close()

    assert fake.init_calls == 0 and fake.shutdown_calls == 0


def test_a_failed_initialisation_is_retried_only_after_retry_after(clock):
    fake = FakeNvml(library=False)
    session = NvmlSession(nvml=fake, retry_after=60.0, clock=clock)

    assert session.start() is False
    with pytest.raises(NvmlUnavailable, match="LibraryNotFound"):
        session.call("nvmlDeviceGetCount")
    assert fake.init_calls == 1  # the second call did not try again

    fake.library = True
    clock.now[0] += 61
    assert session.call("nvmlDeviceGetCount") == 0
    assert fake.init_calls == 2
    assert session.up and session.reason == ""
    session.close()


def test_request_restart_shuts_down_and_initialises_again_before_the_next_call():
    fake = one_gpu()
    session = NvmlSession(nvml=fake)
    session.call("nvmlDeviceGetCount")

    session.request_restart()
    session.call("nvmlDeviceGetCount")

    assert (fake.init_calls, fake.shutdown_calls, fake.initialised) == (2, 1, 1)
    session.close()


async def test_cleanup_ctx_leaves_initialisation_to_the_first_call_and_shuts_down_at_exit():
    fake = one_gpu()
    session = NvmlSession(nvml=fake)
    context = session.cleanup_ctx(None)

    await context.__anext__()
    assert fake.init_calls == 0  # start-up does not wait for nvmlInit
    session.call("nvmlDeviceGetCount")
    with pytest.raises(StopAsyncIteration):
        await context.__anext__()
    assert (fake.init_calls, fake.initialised) == (1, 0)


def run_to_exit(session: NvmlSession, before_exit=None) -> threading.Thread:
    """``asyncio.run`` of a program that enters and leaves the session's cleanup context, as serve does, in a thread
    of its own; the thread has ended once asyncio.run returned, its loop and default executor shut down."""

    async def program() -> None:
        context = session.cleanup_ctx(None)
        await context.__anext__()
        if before_exit is not None:
            await before_exit()
        with pytest.raises(StopAsyncIteration):
            await context.__anext__()

    thread = threading.Thread(target=asyncio.run, args=(program(),), daemon=True)
    thread.start()
    return thread


def test_exit_does_not_wait_for_a_hung_nvml_shutdown():
    """The call time limit is an hour here, so only a bounded exit can finish while nvmlShutdown still hangs (with
    asyncio.to_thread, asyncio.run waits for its default executor, whose thread waits in close())."""
    fake = one_gpu()
    session = NvmlSession(nvml=fake, call_timeout=3600, shutdown_timeout=0.1)
    session.call("nvmlDeviceGetCount")
    fake.hang("nvmlShutdown")
    try:
        program = run_to_exit(session)
        program.join(60)  # a deadline for the failure only: the exit takes shutdown_timeout
        assert not program.is_alive(), "the exit waited for the hung nvmlShutdown"
        assert fake.calls_to("nvmlShutdown")
        assert fake.shutdown_calls == 0  # still inside nvmlShutdown
    finally:
        fake.release()
    assert wait_idle(session, 60)
    assert (fake.shutdown_calls, fake.initialised) == (1, 0)  # released, the shutdown completes behind us


def test_exit_does_not_wait_for_a_close_blocked_behind_a_hung_initialisation():
    """An evaluation's nvmlInit hangs while it holds the session: close() waits for the session, the exit does not."""
    fake = one_gpu()
    session = NvmlSession(nvml=fake, init_timeout=3600, shutdown_timeout=0.1)
    fake.hang("nvmlInit")
    evaluation = threading.Thread(target=session.start, daemon=True)
    evaluation.start()

    async def while_init_hangs() -> None:
        while not fake.calls_to("nvmlInit"):
            await asyncio.sleep(0.01)

    try:
        program = run_to_exit(session, while_init_hangs)
        program.join(60)
        assert not program.is_alive(), "the exit waited for close(), which waits for the hung nvmlInit"
        assert evaluation.is_alive()  # nvmlInit is still hung
    finally:
        fake.release()
    evaluation.join(60)
    assert not evaluation.is_alive()


# --------------------------------------------------------------------------------------------------- errors
def test_nvml_errors_reach_the_caller_as_the_modules_own_classes():
    fake = one_gpu()
    fake.gpus[0].lost = True
    with NvmlSession(nvml=fake) as session:
        handle = session.call("nvmlDeviceGetHandleByIndex", 0)
        with pytest.raises(fake.NVMLError_GpuIsLost) as raised:
            session.call("nvmlDeviceGetUUID", handle)

    assert session.is_nvml_error(raised.value)
    assert describe(raised.value) == "NVMLError_GpuIsLost (the GPU fell off the bus)"
    assert [(c.name, c.errors) for c in session.calls() if c.name == "nvmlDeviceGetUUID"] == [("nvmlDeviceGetUUID", 1)]


def test_an_empty_sample_buffer_is_an_answer_not_a_failure_but_other_errors_of_the_same_call_are():
    # On a real H200 (driver 580) nvmlDeviceGetProcessUtilization answers NOT_FOUND when no process sample is newer
    # than the timestamp given: counted as a failure, an alert on the failure rate would fire on every idle GPU.
    fake = one_gpu()
    with NvmlSession(nvml=fake) as session:
        handle = session.call("nvmlDeviceGetHandleByIndex", 0)
        for call, args in (("nvmlDeviceGetSamples", (1, 0)), ("nvmlDeviceGetProcessUtilization", (0,))):
            with pytest.raises(fake.NVMLError_NotFound):
                session.call(call, handle, *args)  # nothing buffered: NOT_FOUND
        fake.gpus[0].errors["nvmlDeviceGetProcessUtilization"] = 0  # pynvml's NVMLError(SUCCESS): none either
        with pytest.raises(NVMLError):
            session.call("nvmlDeviceGetProcessUtilization", handle, 0)
        fake.gpus[0].errors["nvmlDeviceGetSamples"] = 999
        with pytest.raises(fake.NVMLError_Unknown):
            session.call("nvmlDeviceGetSamples", handle, 1, 0)
        fake.gpus[0].errors["nvmlDeviceGetUUID"] = 6  # NOT_FOUND from a call that is not a sampling call
        with pytest.raises(fake.NVMLError_NotFound):
            session.call("nvmlDeviceGetUUID", handle)

    calls = {c.name: (c.count, c.errors) for c in session.calls()}
    assert calls["nvmlDeviceGetProcessUtilization"] == (2, 0)
    assert calls["nvmlDeviceGetSamples"] == (2, 1)
    assert calls["nvmlDeviceGetUUID"] == (1, 1)


class _Reading:
    """Stands for what the caller's stack holds while it calls (in serve, the reading in progress)."""


def _freed_by_reference_counting(call) -> bool:
    """Whether what a caller held while ``call`` raised is freed as soon as the caller returns, the cyclic collector
    off: no reference cycle through the error's traceback keeps the caller's frame."""

    def caller(reading: _Reading) -> None:
        with contextlib.suppress(Exception):  # the failure is what is exercised; whether it leaks is asserted
            call()

    reading = _Reading()
    freed = weakref.ref(reading)
    enabled = gc.isenabled()
    gc.disable()
    try:
        caller(reading)
        del reading
        return freed() is None
    finally:
        if enabled:
            gc.enable()


def test_a_failed_initialisation_leaves_no_reference_cycle_holding_the_callers_frames(clock):
    session = NvmlSession(nvml=FakeNvml(library=False), retry_after=60.0, clock=clock)
    try:
        assert _freed_by_reference_counting(lambda: session.call("nvmlDeviceGetCount"))
        assert _freed_by_reference_counting(lambda: session.call("nvmlDeviceGetCount"))  # the remembered failure
        clock.now[0] += 61
        assert _freed_by_reference_counting(lambda: session.call("nvmlDeviceGetCount"))  # the retry
        assert "LibraryNotFound" in session.reason
    finally:
        session.close()


def test_a_failed_call_leaves_no_reference_cycle_holding_the_callers_frames():
    fake = one_gpu()
    fake.gpus[0].lost = True
    with NvmlSession(nvml=fake) as session:
        handle = session.call("nvmlDeviceGetHandleByIndex", 0)
        assert _freed_by_reference_counting(lambda: session.call("nvmlDeviceGetUUID", handle))
        with pytest.raises(fake.NVMLError_GpuIsLost):  # still the module's own error, raised to the caller
            session.call("nvmlDeviceGetUUID", handle)


def test_describe_names_the_error_class_and_its_text():
    assert describe(NVMLError(999)) == "NVMLError_Unknown: Unknown Error"
    assert describe(NVMLError(12)).startswith("NVMLError_LibraryNotFound (no NVIDIA driver library")


def test_a_function_the_bindings_lack_is_reported_not_raised_as_attribute_error():
    with NvmlSession(nvml=one_gpu()) as session, pytest.raises(NvmlUnavailable, match="nvmlDeviceGetGpmThing"):
        session.call("nvmlDeviceGetGpmThing")


# --------------------------------------------------------------------------------------------------- hangs
def test_a_hung_call_is_abandoned_at_the_time_limit_and_blocks_further_calls_until_it_returns():
    fake = one_gpu()
    session = NvmlSession(nvml=fake, call_timeout=0.2)
    session.call("nvmlDeviceGetCount")
    fake.hang("nvmlDeviceGetCount")
    try:
        with pytest.raises(NvmlTimeout, match=r"nvmlDeviceGetCount did not return within 0\.2s"):
            session.call("nvmlDeviceGetCount")
        # Still hung: the next call fails at once instead of queueing behind it.
        with pytest.raises(NvmlTimeout, match="has not returned"):
            session.call("nvmlDeviceGetName", fake.gpus[0])
        assert not session.up
        assert len(fake.calls_to("nvmlDeviceGetCount")) == 2
        assert fake.calls_to("nvmlDeviceGetName") == []
    finally:
        fake.release()

    assert wait_idle(session, 10)  # the released call finishes on the NVML thread
    assert session.call("nvmlDeviceGetCount") == 1
    assert session.up
    assert {c.name: c.timeouts for c in session.calls()}["nvmlDeviceGetCount"] == 1
    session.close()
    assert fake.initialised == 0


def test_a_hung_initialisation_is_abandoned_and_adopted_when_it_finally_succeeds():
    fake = one_gpu()
    fake.hang("nvmlInit")
    session = NvmlSession(nvml=fake, init_timeout=0.2)
    try:
        assert session.start() is False
        assert "NVML call nvmlInit has not returned" in session.reason
    finally:
        fake.release()
    assert wait_idle(session, 10)

    assert session.start()
    assert session.call("nvmlDeviceGetCount") == 1
    assert fake.init_calls == 1  # the late success counts; NVML is not initialised a second time
    session.close()
    assert fake.initialised == 0


def test_close_while_a_call_is_stuck_returns_without_shutting_nvml_down():
    fake = one_gpu()
    session = NvmlSession(nvml=fake, call_timeout=0.2)
    session.call("nvmlDeviceGetCount")
    fake.hang("nvmlDeviceGetCount")
    try:
        with pytest.raises(NvmlTimeout):
            session.call("nvmlDeviceGetCount")
        session.close()
        assert fake.shutdown_calls == 0
    finally:
        fake.release()
