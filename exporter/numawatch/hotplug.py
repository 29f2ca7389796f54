"""GPU, CPU and memory hotplug: refresh the inventory and topology when the kernel says they changed, not every
scrape.

A ``HotplugMonitor`` listens to the kernel's uevents on a netlink socket (pyudev ``Monitor.from_netlink`` with
``source="kernel"``: no udevd needed, which containers rarely have) for three subsystems:

- ``pci``: ``add``/``remove`` of a function, ``bind``/``unbind`` of its driver, for the accelerators ``gpus_sysfs``
  inventories (``gpus_sysfs.VENDORS``: NVIDIA ``PCI_ID`` vendor ``10DE`` with ``PCI_CLASS`` 0300xx VGA or 0302xx 3D
  controller, AMD ``1002`` with those or 0380xx / 1200xx, Habana ``1DA3`` with 1200xx; audio, USB and NVSwitch
  functions of the same cards have other classes). These change the sysfs inventory and NVML's enumeration, which
  NVML only makes at initialisation: ``gpus_sysfs`` and ``nvml`` are refreshed.
- ``cpu``: ``online``/``offline`` (and ``add``/``remove``): ``topology`` is refreshed.
- ``memory``: a memory block ``online``/``offline`` (and ``add``/``remove``): a NUMA node's MemTotal moves, which
  the kubelet's Memory Manager checkpoint is judged against: ``topology`` is refreshed.

The socket is watched with the event loop's ``add_reader``: no thread and no polling; an event costs one callback.
``on_change`` receives the names of the sources to refresh; ``invalidator`` builds the usual one (forget the
``HostReader``'s cached results and make NVML enumerate again).

The kernel broadcasts uevents to every network namespace owned by the initial user namespace
(``lib/kobject_uevent.c``), so a pod on the pod network hears them (tests/test_deploy.py checks it on this kernel).
A pod in its own user namespace (``hostUsers: false``) hears nothing: then a restart, or the topology source's own
fingerprint, is what picks a change up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Protocol

from numawatch.sources.gpus_sysfs import accelerator_vendor

log = logging.getLogger(__name__)

GPU_SOURCES = frozenset({"gpus_sysfs", "nvml"})
# A CPU coming or going changes the topology, and the kernel moves IRQs off an offlined CPU and adds or drops its
# cpufreq policy: the irqs and kernel sources read everything at their next reading (HostReader.invalidate).
CPU_SOURCES = frozenset({"topology", "irqs", "kernel"})
PCI_ACTIONS = frozenset({"add", "remove", "bind", "unbind"})
CPU_ACTIONS = frozenset({"add", "remove", "online", "offline"})
# Memory taken offline or added changes its node's MemTotal (the topology's NumaNode.mem_total_bytes).
MEMORY_SOURCES = frozenset({"topology"})
MEMORY_ACTIONS = CPU_ACTIONS
_MAX_EVENTS_PER_WAKEUP = 1024  # a burst (8 GPUs hot-added) is drained in one go, but never forever


def sources_to_refresh(action: str | None, subsystem: str | None, properties: Mapping[str, str]) -> frozenset[str]:
    """The sources a uevent invalidates (empty for events that change nothing numawatch reads).

    ``properties`` is the uevent environment: ``PCI_ID=10DE:2330``, ``PCI_CLASS=30200`` (hex, no leading zeros).
    """
    if subsystem == "pci" and action in PCI_ACTIONS:
        vendor = properties.get("PCI_ID", "").partition(":")[0].lower()
        try:
            class_code = int(properties.get("PCI_CLASS", ""), 16)
        except ValueError:
            return frozenset()
        if vendor and accelerator_vendor(f"0x{vendor}", class_code) is not None:
            return GPU_SOURCES
        return frozenset()
    if subsystem == "cpu" and action in CPU_ACTIONS:
        return CPU_SOURCES
    if subsystem == "memory" and action in MEMORY_ACTIONS:
        return MEMORY_SOURCES
    return frozenset()


class _Invalidates(Protocol):
    def invalidate(self, name: str | None = None) -> None: ...


class _GpuInvalidates(Protocol):
    def invalidate(self, names: Iterable[str]) -> None: ...


def invalidator(
    host_reader: _Invalidates, gpu_readers: _GpuInvalidates | None = None
) -> Callable[[frozenset[str]], None]:
    """The usual ``on_change``: drop the HostReader's cached results of those sources and re-enumerate NVML."""

    def on_change(names: frozenset[str]) -> None:
        for name in sorted(names):
            host_reader.invalidate(name)
        if gpu_readers is not None:
            gpu_readers.invalidate(names)

    return on_change


class HotplugMonitor:
    """Kernel uevents for PCI, CPU and memory devices, delivered to ``on_change`` on the event loop."""

    def __init__(self, on_change: Callable[[frozenset[str]], None], *, context: Any | None = None) -> None:
        self.on_change = on_change
        self._context = context
        self._monitor: Any | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.events = 0  # uevents that refreshed something, since start

    @property
    def running(self) -> bool:
        return self._monitor is not None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """Open the netlink socket and watch it on ``loop`` (the running loop by default); False when impossible."""
        if self._monitor is not None:
            return True
        try:
            import pyudev

            context = self._context if self._context is not None else pyudev.Context()
            monitor = pyudev.Monitor.from_netlink(context, source="kernel")
            monitor.filter_by("pci")
            monitor.filter_by("cpu")
            monitor.filter_by("memory")
            monitor.start()
        except Exception as error:  # no libudev, no netlink (seccomp, no CAP_NET_ADMIN): hotplug is just not seen
            log.warning("GPU, CPU and memory hotplug will not be noticed: cannot listen to kernel uevents: %s", error)
            return False
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._loop.add_reader(monitor.fileno(), self.drain)
        self._monitor = monitor
        log.info("listening to kernel uevents for GPU, CPU and memory hotplug")
        return True

    def stop(self) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(monitor.fileno())
        # pyudev has no close(): the netlink socket is closed when the last reference to the monitor goes (its
        # __del__ unrefs the libudev monitor), which is now.
        del monitor

    def drain(self) -> None:
        """Read every pending uevent and call ``on_change`` once with the union of what they refresh."""
        monitor = self._monitor
        if monitor is None:
            return
        names: set[str] = set()
        for _ in range(_MAX_EVENTS_PER_WAKEUP):
            try:
                device = monitor.poll(timeout=0)
            except Exception as error:  # a truncated or undecodable message: skip it, keep listening
                log.debug("unreadable uevent: %s", error)
                continue
            if device is None:
                break
            refresh = sources_to_refresh(device.action, device.subsystem, device.properties)
            if refresh:
                log.info(
                    "%s %s %s: refreshing %s",
                    device.subsystem,
                    device.action,
                    device.sys_name,
                    ", ".join(sorted(refresh)),
                )
                names |= refresh
        if names:
            self.events += 1
            try:
                self.on_change(frozenset(names))
            except Exception:  # the callback is the caller's; a bug there must not stop the monitor
                log.exception("hotplug callback failed")

    async def cleanup_ctx(self, app: object = None) -> AsyncIterator[None]:
        """For aiohttp's ``app.cleanup_ctx``: listen while the application runs."""
        self.start(asyncio.get_running_loop())
        yield
        self.stop()


__all__ = ["CPU_SOURCES", "GPU_SOURCES", "MEMORY_SOURCES", "HotplugMonitor", "invalidator", "sources_to_refresh"]
