"""The gzip ``/metrics`` bodies, compressed by the part, so that an evaluation compresses only what changed.

A body is the concatenation of its segments (``exposition.write_segments``: a family each, a big row family cut
into chunks of rows). Each part, a run of consecutive segments, is deflated on its own by a fresh compressor and
ended with a sync flush: its blocks refer to nothing before it, none is marked final, and it ends on a byte
boundary, so raw deflate parts laid end to end are one deflate stream (RFC 1951 §3.2.3: a stream is a sequence of
blocks). The body is one gzip member (RFC 1952): header, the parts, an empty final block, the CRC-32 and length of
the whole body.

Which parts: a part of the last compression whose segments come back, the very same objects (``write_segments``
hands an unchanged family or chunk back as the same bytes object) one after another, is that part again, its
deflated bytes reused, wherever it now stands. The segments between such parts are grouped into new parts of at
least ``GROUP_BYTES`` (a segment that big is a part of its own), segments the last compression had (what is left
of a part that changed) apart from new ones: one new segment in the middle of the body makes only the part it
fell in deflated again, and a family that changes at every evaluation (an evaluation's duration, the process' CPU
seconds) is deflated alone from the next compression on, instead of making its neighbours' part deflated again
each time.

What it costs: every part starts with its own Huffman tables and without the previous part's window, so the body is
somewhat bigger than one deflate of the whole, and a part that comes back whole is never merged with its neighbours:
where changes keep landing, parts shrink towards the segments (docs/performance.md has the measured sizes). Only the
last compression's parts are kept.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Collection, Sequence
from operator import is_

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
    """``segments`` (those between the parts reused) in order, cut into parts of at least ``limit`` bytes (the last
    one may be smaller); a segment of ``limit`` bytes or more is a part of its own. With ``known`` (the ``id`` of
    every segment the last compression had, all still alive), a part holds either known segments only or new ones
    only: each run of either kind is cut on its own."""
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
        # Size: the parts of the last body compressed, in order, no more (each compression replaces it with its own).
        self._previous: list[tuple[tuple[bytes, ...], bytes]] = []
        self._lock = threading.Lock()

    def compress(self, segments: Sequence[bytes], body: bytes | None = None) -> bytes:
        """The gzip member of the body ``b"".join(segments)`` (``body``, when the caller has it joined already)."""
        with self._lock:
            previous = self._previous
            current: list[tuple[tuple[bytes, ...], bytes]] = []
            packed = [self._header]
            # The last compression's segments are alive (its parts hold them), so their ids are theirs alone.
            starts = {id(part[0]): (part, deflated) for part, deflated in previous}
            known = {id(segment) for part, _ in previous for segment in part}
            rest = 0  # the first segment not in a part yet
            index, count = 0, len(segments)
            while index < count:
                found = starts.get(id(segments[index]))
                if found is not None:
                    end = index + len(found[0])
                    if end <= count and all(map(is_, found[0], segments[index:end])):
                        self._pack(segments[rest:index], known, current, packed)
                        current.append(found)
                        packed.append(found[1])
                        index = rest = end
                        continue
                index += 1
            self._pack(segments[rest:], known, current, packed)
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

    def _pack(
        self,
        segments: Sequence[bytes],
        known: Collection[int],
        current: list[tuple[tuple[bytes, ...], bytes]],
        packed: list[bytes],
    ) -> None:
        """Deflate ``segments``, none of them in a part of the last compression that came back whole, as new
        parts."""
        for part in groups(segments, GROUP_BYTES, known):
            deflated = _deflate(part, self.level)
            current.append((part, deflated))
            packed.append(deflated)
