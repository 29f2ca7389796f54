"""Placeholder until the topology reader lands."""

from __future__ import annotations

from numawatch.errors import SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.paths import Paths


def read(paths: Paths) -> None:
    raise SourceUnavailable("the topology source is not implemented yet")


SOURCE = SourceSpec(name="topology", read=read)
