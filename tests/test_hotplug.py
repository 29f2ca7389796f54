"""Hotplug: which uevents refresh which sources, and the monitor on this machine's real netlink socket.

The kernel turns a write of an action word to a device's ``uevent`` file into a synthetic uevent of that action
(Documentation/ABI/testing/sysfs-uevent): nothing is onlined or bound, but a real uevent travels the real netlink
socket, so the monitor is tested end to end without touching hardware.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from fake_pynvml import FakeGpu, FakeNvml
from numawatch.host import HostReader
from numawatch.hotplug import (
    CPU_SOURCES,
    GPU_SOURCES,
    MEMORY_SOURCES,
    HotplugMonitor,
    invalidator,
    sources_to_refresh,
)
from numawatch.nvml_session import NvmlSession
from numawatch.sources import nvml

NVIDIA_3D = {"PCI_ID": "10DE:2330", "PCI_CLASS": "30200", "PCI_SLOT_NAME": "0000:18:00.0"}


# --------------------------------------------------------------------------------------------------- classification
@pytest.mark.parametrize("action", ["add", "remove", "bind", "unbind"])
def test_an_nvidia_gpu_appearing_or_going_refreshes_the_gpu_inventory_and_nvml(action):
    assert sources_to_refresh(action, "pci", NVIDIA_3D) == GPU_SOURCES == {"gpus_sysfs", "nvml"}


def test_an_nvidia_vga_function_is_a_gpu_too():
    assert sources_to_refresh("add", "pci", {"PCI_ID": "10de:2204", "PCI_CLASS": "30000"}) == GPU_SOURCES


@pytest.mark.parametrize(
    "properties",
    [
        {"PCI_ID": "10DE:1AEF", "PCI_CLASS": "40300"},  # the HDMI audio function of an NVIDIA card
        {"PCI_ID": "10DE:22A3", "PCI_CLASS": "68000"},  # an NVSwitch
        {"PCI_ID": "15B3:1021", "PCI_CLASS": "20000"},  # a NIC
        {"PCI_ID": "10DE:2330", "PCI_CLASS": "not-hex"},
        {},
    ],
)
def test_other_pci_functions_refresh_nothing(properties):
    assert sources_to_refresh("add", "pci", properties) == frozenset()


def test_a_change_event_on_a_gpu_refreshes_nothing():
    assert sources_to_refresh("change", "pci", NVIDIA_3D) == frozenset()


@pytest.mark.parametrize("action", ["online", "offline", "add", "remove"])
def test_cpu_hotplug_refreshes_the_topology(action):
    assert sources_to_refresh(action, "cpu", {}) == CPU_SOURCES == {"topology", "irqs", "kernel"}


@pytest.mark.parametrize("action", ["online", "offline", "add", "remove"])
def test_memory_hotplug_refreshes_the_topology(action):
    # A memory block taken offline or added moves its node's MemTotal, which the Memory Manager's checkpoint is
    # judged against.
    assert sources_to_refresh(action, "memory", {}) == MEMORY_SOURCES == {"topology"}


def test_a_change_event_on_a_memory_block_refreshes_nothing():
    assert sources_to_refresh("change", "memory", {}) == frozenset()


def test_other_subsystems_refresh_nothing():
    assert sources_to_refresh("add", "usb", {"PRODUCT": "1d6b/2/604"}) == frozenset()
    assert sources_to_refresh(None, None, {}) == frozenset()


# --------------------------------------------------------------------------------------------------- the callback
def test_the_invalidator_forgets_cached_results_and_makes_nvml_enumerate_again(fake_host):
    fake = FakeNvml([FakeGpu("GPU-a", "00000000:18:00.0")])
    session = NvmlSession(nvml=fake)
    forgotten: list[str | None] = []

    class Reader(HostReader):
        def invalidate(self, name: str | None = None) -> None:
            forgotten.append(name)
            super().invalidate(name)

    reader = Reader(fake_host.paths, (nvml.SOURCE,), nvml=session)
    reader.read()
    fake.gpus.append(FakeGpu("GPU-b", "00000000:2a:00.0"))  # hot-added: NVML only sees it after initialising again
    invalidator(reader, reader.state("nvml"))(GPU_SOURCES)

    assert forgotten == ["gpus_sysfs", "nvml"]
    assert [g.uuid for g in reader.read().nvml.gpus] == ["GPU-a", "GPU-b"]
    assert (fake.init_calls, fake.shutdown_calls) == (2, 1)
    session.close()


def test_a_cpu_event_does_not_touch_nvml(fake_host):
    fake = FakeNvml([FakeGpu("GPU-a", "00000000:18:00.0")])
    session = NvmlSession(nvml=fake)
    reader = HostReader(fake_host.paths, (nvml.SOURCE,), nvml=session)
    reader.read()

    invalidator(reader, reader.state("nvml"))(CPU_SOURCES)
    reader.read()

    assert fake.init_calls == 1
    session.close()


def test_a_failing_callback_does_not_stop_the_monitor():
    class Device:
        action, subsystem, sys_name, properties = "online", "cpu", "cpu1", {}

    class Monitor:
        def __init__(self) -> None:
            self.pending = [Device(), Device()]

        def poll(self, timeout: float) -> Device | None:
            return self.pending.pop() if self.pending else None

    calls: list[frozenset[str]] = []

    def broken(names: frozenset[str]) -> None:
        calls.append(names)
        raise RuntimeError("bug in the callback")

    monitor = HotplugMonitor(broken)
    monitor._monitor = Monitor()  # a stand-in socket, to drive drain() directly

    monitor.drain()

    assert calls == [CPU_SOURCES]  # two events, one callback with their union
    assert monitor.events == 1 and monitor.running


def test_start_reports_false_when_uevents_cannot_be_read():
    monitor = HotplugMonitor(lambda names: None, context=object())  # not a udev context: from_netlink fails
    loop = asyncio.new_event_loop()
    try:
        assert monitor.start(loop) is False
    finally:
        loop.close()
    assert not monitor.running


# --------------------------------------------------------------------------------------------------- this machine
def _writable_uevent(path: Path) -> str | None:
    if os.geteuid() != 0:
        return "synthetic uevents need root"
    if not path.exists() or not os.access(path, os.W_OK):
        return f"{path} is not writable here"
    return None


def _cpu_uevent() -> Path:
    online = Path("/sys/devices/system/cpu/online").read_text().strip()
    last = online.replace(",", "-").split("-")[-1]
    return Path(f"/sys/devices/system/cpu/cpu{last}/uevent")


async def _heard(arrived: asyncio.Event) -> None:
    await asyncio.wait_for(arrived.wait(), timeout=10)  # a bound on a hang, not a timing assertion


@pytest.mark.realhost
async def test_a_real_cpu_online_uevent_refreshes_the_topology():
    uevent = _cpu_uevent()
    reason = _writable_uevent(uevent)
    if reason:
        pytest.skip(reason)
    calls: list[frozenset[str]] = []
    arrived = asyncio.Event()

    def on_change(names: frozenset[str]) -> None:
        calls.append(names)
        arrived.set()

    monitor = HotplugMonitor(on_change)
    if not monitor.start():
        pytest.skip("kernel uevents cannot be received here")
    try:
        uevent.write_text("online")  # synthetic: the CPU stays as it is
        await _heard(arrived)
    finally:
        monitor.stop()

    assert calls == [CPU_SOURCES]
    assert not monitor.running


@pytest.mark.realhost
async def test_a_real_memory_block_online_uevent_refreshes_the_topology():
    blocks = sorted(Path("/sys/devices/system/memory").glob("memory[0-9]*/uevent"))
    if not blocks:
        pytest.skip("this kernel has no memory blocks in sysfs (no CONFIG_MEMORY_HOTPLUG)")
    reason = _writable_uevent(blocks[-1])
    if reason:
        pytest.skip(reason)
    calls: list[frozenset[str]] = []
    arrived = asyncio.Event()

    def on_change(names: frozenset[str]) -> None:
        calls.append(names)
        arrived.set()

    monitor = HotplugMonitor(on_change)
    if not monitor.start():
        pytest.skip("kernel uevents cannot be received here")
    try:
        blocks[-1].write_text("online")  # synthetic: the block stays as it is
        await _heard(arrived)
    finally:
        monitor.stop()

    assert calls == [MEMORY_SOURCES]


@pytest.mark.realhost
async def test_a_real_pci_bind_uevent_of_a_non_nvidia_device_refreshes_nothing():
    pci = sorted(Path("/sys/bus/pci/devices").glob("*/uevent"))
    non_gpu = [path for path in pci if "PCI_ID=10DE" not in path.read_text().upper()]
    if not non_gpu:
        pytest.skip("no non-NVIDIA PCI device here")
    cpu = _cpu_uevent()
    reason = _writable_uevent(non_gpu[0]) or _writable_uevent(cpu)
    if reason:
        pytest.skip(reason)
    calls: list[frozenset[str]] = []
    arrived = asyncio.Event()

    def on_change(names: frozenset[str]) -> None:
        calls.append(names)
        arrived.set()

    monitor = HotplugMonitor(on_change)
    if not monitor.start():
        pytest.skip("kernel uevents cannot be received here")
    try:
        non_gpu[0].write_text("bind")  # a real PCI uevent, of a virtio/NIC/bridge function
        cpu.write_text("online")  # then one that does refresh: once it is heard, the PCI one has been too
        await _heard(arrived)
    finally:
        monitor.stop()

    assert GPU_SOURCES.isdisjoint(frozenset().union(*calls))
    assert frozenset().union(*calls) >= CPU_SOURCES


async def test_cleanup_ctx_listens_while_the_app_runs():
    monitor = HotplugMonitor(lambda names: None)
    context = monitor.cleanup_ctx(None)

    await context.__anext__()
    started = monitor.running
    with pytest.raises(StopAsyncIteration):
        await context.__anext__()

    assert not monitor.running
    if not started:
        pytest.skip("kernel uevents cannot be received here")
