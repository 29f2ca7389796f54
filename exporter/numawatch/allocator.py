"""The C allocator's free memory handed back to the kernel after every evaluation (glibc's ``malloc_trim``).

An evaluation allocates and frees a reading's worth of buffers and containers larger than Python's small-object
allocator takes; glibc keeps what is freed in its arenas for reuse, and over a 30-minute soak the arenas' free part
grew by about 4 MB on b384 while what was in use stayed (docs/performance.md, "30-minute soak"). ``malloc_trim(0)``
returns the free pages of every arena; it costs about 0.1 ms after an evaluation of b384. Where the C library has no
``malloc_trim`` (musl), nothing is done.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

# glibc's mallopt parameter for the most arenas (malloc.h's M_ARENA_MAX).
_M_ARENA_MAX = -8


def _load(name: str, argtypes: list[Any]) -> Any | None:
    try:
        function = getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):  # not glibc
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


_MALLOC_TRIM = _load("malloc_trim", [ctypes.c_size_t])
_MALLOPT = _load("mallopt", [ctypes.c_int, ctypes.c_int])


def release_free_memory() -> bool:
    """Hand the allocator's free pages back to the kernel; False where this C library cannot."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def limit_arenas(count: int = 1) -> bool:
    """Have glibc make no more than ``count`` arenas from now on (call it before threads start allocating); False
    where this C library cannot, or where the environment sets the limit itself (``MALLOC_ARENA_MAX``,
    ``GLIBC_TUNABLES``' ``glibc.malloc.arena_max``), which is then left as it says."""
    if _MALLOPT is None:
        return False
    if "MALLOC_ARENA_MAX" in os.environ or "arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return bool(_MALLOPT(_M_ARENA_MAX, count))
