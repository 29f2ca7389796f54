"""Placeholder until the gpus_sysfs reader lands."""

from __future__ import annotations

from numawatch.errors import SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.paths import Paths


def read(paths: Paths) -> None:
    raise SourceUnavailable("the gpus_sysfs source is not implemented yet")


SOURCE = SourceSpec(name="gpus_sysfs", read=read)
