"""Record every file the code under test opens: builtins.open, io.open and os.open all raise the ``open`` audit event.

One audit hook for the whole test process (hooks cannot be removed); it records only inside ``recording()``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Files whose read interrupts or stalls the workload (tests/test_host_forbidden_files.py says why each).
FORBIDDEN_NAMES = ("scaling_cur_freq", "cpuinfo_cur_freq", "numa_maps", "msr")

_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _opened is not None and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@contextmanager
def recording() -> Iterator[list[str]]:
    """The paths opened inside the ``with`` block, in order."""
    global _opened
    _opened = []
    try:
        yield _opened
    finally:
        _opened = None
