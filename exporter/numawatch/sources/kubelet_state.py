"""Placeholder until the kubelet_state reader lands."""

from __future__ import annotations

from numawatch.errors import SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.paths import Paths


def read(paths: Paths) -> None:
    raise SourceUnavailable("the kubelet_state source is not implemented yet")


SOURCE = SourceSpec(name="kubelet_state", read=read)
