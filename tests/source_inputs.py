"""Sources' readers driven directly, handed the snapshots they ``need`` as a HostReader hands them."""

from __future__ import annotations

from typing import Any

from numawatch.errors import SourceUnavailable
from numawatch.host import Inputs
from numawatch.model.kubelet import KubeletState
from numawatch.model.workloads import Cgroups
from numawatch.paths import Paths
from numawatch.sources import cgroups, kubelet_state


def kubelet_state_of(paths: Paths) -> KubeletState | None:
    """The kubelet_state source's reading, None when it is down (no kubelet directory)."""
    try:
        return kubelet_state.read(paths)
    except SourceUnavailable:
        return None


class CgroupsReaderWithState:
    """A ``cgroups.CgroupsReader`` whose every reading is handed the kubelet_state source's reading of that moment
    (whose CPU Manager state changing is when shared pods are read at every reading); everything else is the
    reader's own."""

    def __init__(self) -> None:
        self.reader = cgroups.CgroupsReader()

    def read(self, paths: Paths) -> Cgroups:
        return self.reader.read(paths, Inputs.of(kubelet_state=kubelet_state_of(paths)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reader, name)
