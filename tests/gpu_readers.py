"""The nvml and processes readers on one NVML session, for tests that drive the two readers directly.

A HostReader makes both from the session it is given (``HostReader(paths, nvml=session)``) and hands the nvml
source's snapshot to the processes source as its input; ``GpuReaders`` does the same by hand, one reading at a time:
``gpu.nvml.read(paths)`` then ``gpu.processes.read(paths)`` reads the holders of that NVML reading.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from numawatch.host import Inputs
from numawatch.model.gpu import GpuHolders, NvmlSnapshot
from numawatch.nvml_session import NvmlSession
from numawatch.paths import Paths
from numawatch.sources.nvml import NvmlReader
from numawatch.sources.processes import ProcessReader


class _LastReading(NvmlReader):
    """An NvmlReader that keeps its last snapshot (None after a reading that raised), as a HostReader's reading does."""

    latest: NvmlSnapshot | None = None

    def read(self, paths: Paths) -> NvmlSnapshot:
        self.latest = None
        self.latest = super().read(paths)
        return self.latest


class _Holders:
    def __init__(self, nvml: _LastReading) -> None:
        self._nvml = nvml
        self.reader = ProcessReader()

    def read(self, paths: Paths) -> GpuHolders:
        return self.reader.read(paths, Inputs.of(nvml=self._nvml.latest))


class GpuReaders:
    def __init__(self, session: NvmlSession, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.clock = clock
        self.nvml = _LastReading(session, clock=clock)
        self.processes = _Holders(self.nvml)
