"""The C allocator's free memory handed back to the kernel after every evaluation (glibc's ``malloc_trim``).

An evaluation allocates and frees a reading's worth of buffers and containers larger than Python's small-object
allocator takes; glibc keeps what is freed in its arenas for reuse, and over a 30-minute soak the arenas' free part
grew by about 4 MB on b384 while what was in use stayed (docs/performance.md, "30-minute soak"). ``malloc_trim(0)``
returns the free pages of every arena; it costs about 0.1 ms after an evaluation of b384. Where the C library has no
``malloc_trim`` (musl), nothing is done.
"""

from __future__ import annotations

import ctypes
from typing import Any


def _load() -> Any | None:
    try:
        function = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


_MALLOC_TRIM = _load()


def release_free_memory() -> bool:
    """Hand the allocator's free pages back to the kernel; False where this C library cannot."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
