"""allocator.release_free_memory hands glibc's free pages back (serve calls it after every evaluation)."""

from __future__ import annotations

import os
import subprocess
import sys

from numawatch import allocator, server
from test_server import Switchable


def _rss_kb() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def test_the_free_pages_of_the_heap_go_back_to_the_kernel():
    # 40 MB in blocks under glibc's mmap threshold, freed but for the last, which keeps the heap's top in place:
    # glibc keeps the freed 40 MB until asked.
    blocks = [bytearray(100_000) for _ in range(400)]
    for block in blocks:
        block[::4096] = b"\x01" * len(block[::4096])  # touched: resident
    pinned = blocks[-1]
    del blocks
    before = _rss_kb()
    assert allocator.release_free_memory()  # this machine's C library, as the image's, is glibc
    after = _rss_kb()
    assert before - after > 20_000, (before, after)
    assert len(pinned) == 100_000


def test_serve_releases_free_memory_after_every_evaluation(monkeypatch):
    released = []
    monkeypatch.setattr(server, "release_free_memory", lambda: released.append(1) or True)
    sampler = Switchable().sampler()
    sampler.evaluate_once()
    sampler.evaluate_once()
    assert len(released) == 2


# Threads allocating at once (each holds what it allocated until all have), then glibc's malloc_info: one <heap nr=
# element per arena.
ARENAS = """
import ctypes, sys, threading
from numawatch import allocator
if sys.argv[1] == "limited":
    assert allocator.limit_arenas()
barrier = threading.Barrier(4)
def work():
    held = [bytearray(100_000) for _ in range(50)]
    barrier.wait()
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(3)]
for thread in threads:
    thread.start()
barrier.wait()
libc = ctypes.CDLL("libc.so.6")
libc.fdopen.restype = ctypes.c_void_p
libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
stream = libc.fdopen(1, b"w")
libc.malloc_info(0, ctypes.c_void_p(stream))
libc.fflush(ctypes.c_void_p(stream))
barrier.wait()
for thread in threads:
    thread.join()
"""


def arenas(mode: str) -> int:
    env = {key: value for key, value in os.environ.items() if key not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, env=env, timeout=60,
                          check=True)
    return done.stdout.count("<heap nr=")


def test_with_the_arenas_limited_threads_allocating_at_once_share_one():
    assert arenas("default") > 1  # what glibc does by itself: an arena per thread that finds the main one busy
    assert arenas("limited") == 1


def test_the_environment_s_own_arena_limit_is_left_as_it_says(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert not allocator.limit_arenas()
