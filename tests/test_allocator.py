"""allocator.release_free_memory hands glibc's free pages back (serve calls it after every evaluation)."""

from __future__ import annotations

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
