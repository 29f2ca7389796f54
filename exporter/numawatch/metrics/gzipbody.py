"""The gzip ``/metrics`` bodies, compressed by the part, so that an evaluation compresses only what changed.

A body is the concatenation of its families' bytes (``exposition.write_segments``). Consecutive families are
grouped into parts of at least ``GROUP_BYTES`` (a family that big is a part of its own, so a small family that
changes every evaluation never drags a big one along). Each part is deflated on its own by a fresh compressor and
ended with a sync flush: its blocks refer to nothing before it, none is marked final, and it ends on a byte
boundary, so raw deflate parts laid end to end are one deflate stream (RFC 1951 §3.2.3: a stream is a sequence of
blocks). The body is one gzip member (RFC 1952): header, the parts, an empty final block, the CRC-32 and length of
the whole body. A part made of the very segments the last compression had (``write_segments`` hands an unchanged
family back as the same bytes object) reuses its deflated bytes. Families that changed since the last compression
are grouped apart from those that did not: a family that changes at every evaluation (an evaluation's duration, the
process' CPU seconds) is then deflated alone from the next compression on, instead of making its neighbours' part
deflated again each time.

What it costs: every part starts with its own Huffman tables and without the previous part's window, so the body is
somewhat bigger than one deflate of the whole (docs/performance.md has the measured sizes); the parts' size is that
trade. Only the last compression's parts are kept.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Collection, Sequence

__all__ = ["GROUP_BYTES", "SegmentedGzip", "groups"]

# Bytes of a part: big enough that its Huffman tables and the window it lacks cost little, small enough that a
# changed family recompresses little besides itself.
GROUP_BYTES = 32 * 1024
# gzip's magic, method deflate, no flags (no name, no comment), no modification time; XFL and OS follow.
_MAGIC = b"\x1f\x8b\x08\x00\x00\x00\x00\x00"
_OS_UNKNOWN = b"\xff"
# An empty block with BFINAL set (fixed Huffman codes, only the end-of-block code): the end of the deflate stream.
_FINAL_BLOCK = b"\x03\x00"


def groups(
    segments: Sequence[bytes], limit: int = GROUP_BYTES, known: Collection[int] | None = None
) -> list[tuple[bytes, ...]]:
    """``segments`` in order, cut into parts of at least ``limit`` bytes (the last one may be smaller); a segment
    of ``limit`` bytes or more is a part of its own. With ``known`` (the ``id`` of every segment the last
    compression had, all still alive), a part holds either known segments only or new ones only: each run of
    either kind is cut on its own."""
    if known is None:
        return _cut(segments, limit)
    parts: list[tuple[bytes, ...]] = []
    start = 0
    for index in range(1, len(segments) + 1):
        if index == len(segments) or (id(segments[index]) in known) != (id(segments[start]) in known):
            parts.extend(_cut(segments[start:index], limit))
            start = index
    return parts


def _cut(segments: Sequence[bytes], limit: int) -> list[tuple[bytes, ...]]:
    parts: list[tuple[bytes, ...]] = []
    pending: list[bytes] = []
    size = 0
    for segment in segments:
        if len(segment) >= limit:
            if pending:
                parts.append(tuple(pending))
                pending, size = [], 0
            parts.append((segment,))
            continue
        pending.append(segment)
        size += len(segment)
        if size >= limit:
            parts.append(tuple(pending))
            pending, size = [], 0
    if pending:
        parts.append(tuple(pending))
    return parts


def _deflate(part: tuple[bytes, ...], level: int) -> bytes:
    """``part`` as raw deflate blocks that stand alone: a fresh compressor (no window before the part), a sync flush
    (no final block, ends on a byte boundary)."""
    packer = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    packed = [packer.compress(segment) for segment in part]
    packed.append(packer.flush(zlib.Z_SYNC_FLUSH))
    return b"".join(packed)


class SegmentedGzip:
    """The gzip bodies of one sequence of expositions in one format (the server's), each part deflated once while
    it stays the same. Thread-safe: a scrape may compress an older evaluation's body while the sampler compresses
    the next one; whichever finishes last leaves its parts for the next compression."""

    def __init__(self, level: int) -> None:
        self.level = level
        # RFC 1952's XFL: 4 for the fastest method, 2 for the slowest, as gzip(1) and Python's gzip write it.
        self._header = _MAGIC + (b"\x04" if level == 1 else b"\x02" if level == 9 else b"\x00") + _OS_UNKNOWN
        # Size: the parts of the last body compressed, no more (each compression replaces it with its own).
        self._previous: dict[tuple[bytes, ...], bytes] = {}
        self._lock = threading.Lock()

    def compress(self, segments: Sequence[bytes], body: bytes | None = None) -> bytes:
        """The gzip member of the body ``b"".join(segments)`` (``body``, when the caller has it joined already)."""
        with self._lock:
            previous = self._previous
            current: dict[tuple[bytes, ...], bytes] = {}
            packed = [self._header]
            # The last compression's segments are alive (its parts hold them), so their ids are theirs alone.
            known = {id(segment) for part in previous for segment in part}
            for part in groups(segments, GROUP_BYTES, known):
                deflated = current.get(part)
                if deflated is None:
                    deflated = previous.get(part)
                    if deflated is None:
                        deflated = _deflate(part, self.level)
                    current[part] = deflated
                packed.append(deflated)
            self._previous = current
        packed.append(_FINAL_BLOCK)
        if body is not None:
            crc, size = zlib.crc32(body), len(body)
        else:  # the CRC-32 of the body, segment after segment, without joining them
            crc, size = 0, 0
            for segment in segments:
                crc = zlib.crc32(segment, crc)
                size += len(segment)
        packed.append(struct.pack("<II", crc, size & 0xFFFFFFFF))
        return b"".join(packed)
