"""A bounded reader of tar archives (POSIX ustar, GNU and pax headers) for bundles that may be hostile.

``tarfile`` reads an extended header's data whole before anything can look at it: a GNU long-name header (type
``L``) or a pax header (``x``) whose size field claims gigabytes makes it allocate gigabytes, whatever the caller
checks afterwards. This reader parses the 512-byte header blocks itself and refuses an extended header larger than
its limit before reading a byte of it, so memory stays at one block plus the largest header it accepts.

What it understands, as ``tarfile`` does (Python's ``Lib/tarfile.py`` and POSIX.1-2001 ``pax`` are the references):

- a header block: name, mode, uid, gid, size, mtime, checksum, type, link name, magic, owner names, device numbers
  and, with the POSIX magic ``ustar\\0``, the 155-byte name prefix. Numbers are octal, or GNU base-256 when the
  first byte is 0x80 or 0xff. The checksum is accepted computed over unsigned or signed bytes.
- GNU ``L`` and ``K`` (the next member's long name and link name), pax ``x`` (the next member's records) and ``g``
  (records for every following member); the first of several extended headers for one member wins, like
  ``tarfile``'s recursion.
- pax records ``path``, ``linkpath``, ``size``, ``mtime``, ``uid``, ``gid``, ``uname``, ``gname``, kept in
  ``TarInfo.pax_headers``; any ``GNU.sparse.*`` record is kept as ``GNU.sparse`` (it marks a sparse member, for the
  caller to refuse). Every other record is parsed and dropped.
- the archive ends at the first all-zero block or at the end of the stream between members.

What is kept between header blocks is bounded too, whatever their number: the records kept for the next member
(from every ``x``, ``L`` and ``K`` header before it) and the global records (from every ``g`` header so far) may
each add up to ``max_pax_bytes``, or the archive is refused. Only known keys are kept, so what each member costs
does not grow with the global headers before it.

Where ``tarfile`` quietly treats a damaged header after the first member as the end, this reader refuses it: a bundle
that is cut short or tampered with is not evaluated half-read.

Members come out as ``tarfile.TarInfo`` (the caller's policy applies to them as to tarfile's own); the
member's data is read with ``data()`` before asking for the next member, or skipped.
"""

from __future__ import annotations

import math
import tarfile
from collections.abc import Iterator
from typing import Protocol

BLOCK = 512
_POSIX_MAGIC = b"ustar\x00"
_EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
             tarfile.SOLARIS_XHDTYPE)
_CHUNK = 1 << 16
# The pax records applied to a member; every other one is dropped as it is parsed.
_KEPT = frozenset({b"path", b"linkpath", b"size", b"mtime", b"uid", b"gid", b"uname", b"gname"})
SPARSE_RECORD = "GNU.sparse"


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class TarFormatError(Exception):
    """The archive is damaged or refused. ``member`` names the header it happened at (None: the archive itself);
    ``what`` is one line that never quotes member data."""

    def __init__(self, what: str, member: str | None = None) -> None:
        super().__init__(what if member is None else f"member {member!r}: {what}")
        self.what = what
        self.member = member


class TarReader:
    """Iterates over a tar stream's members; an extended header over ``max_name_bytes`` (``L``, ``K``) or
    ``max_pax_bytes`` (``x``, ``g``) is refused from its header block, more than ``max_headers`` header blocks in all
    (extended ones included) are refused too, and so are records kept over ``max_pax_bytes`` (for one member, or
    global)."""

    def __init__(self, stream: Readable, *, max_name_bytes: int, max_pax_bytes: int, max_headers: int) -> None:
        self._stream = stream
        self._max_name = max_name_bytes
        self._max_pax = max_pax_bytes
        self._max_headers = max_headers
        self.offset = 0  # bytes of the archive consumed so far
        self.headers = 0
        self._global: dict[str, str] = {}
        self._current: tarfile.TarInfo | None = None
        self._unread = 0  # data bytes of the current member not read yet
        self._padding = 0

    # ----------------------------------------------------------------------------------------- reading
    def _read_exact(self, size: int, member: str | None) -> bytes:
        parts: list[bytes] = []
        left = size
        while left:
            chunk = self._stream.read(min(left, _CHUNK))
            if not chunk:
                where = f"ends inside member {member!r}" if member is not None else "ends inside a header"
                raise TarFormatError(f"the archive {where} (at byte {self.offset})")
            parts.append(chunk)
            left -= len(chunk)
            self.offset += len(chunk)
        return b"".join(parts)

    def _skip(self, size: int, member: str | None) -> None:
        while size:
            step = min(size, _CHUNK)
            self._read_exact(step, member)
            size -= step

    def data(self) -> Iterator[bytes]:
        """The current member's data in chunks (then its padding is skipped)."""
        member = self._current
        assert member is not None
        while self._unread:
            chunk = self._read_exact(min(self._unread, _CHUNK), member.name)
            self._unread -= len(chunk)
            yield chunk
        self._finish_member()

    def _finish_member(self) -> None:
        if self._current is None:
            return
        name = self._current.name
        if self._unread:
            self._skip(self._unread, name)
            self._unread = 0
        self._skip(self._padding, name)
        self._padding = 0
        self._current = None

    # ----------------------------------------------------------------------------------------- headers
    def __iter__(self) -> Iterator[tarfile.TarInfo]:
        local: dict[str, str] = {}  # what extended headers say about the next member; the first one wins
        while True:
            self._finish_member()
            start = self.offset
            block = self._stream.read(BLOCK)
            while block and len(block) < BLOCK:  # a stream may hand out a block in pieces
                more = self._stream.read(BLOCK - len(block))
                if not more:
                    break
                block += more
            if not block:
                if start == 0:
                    raise TarFormatError("an empty archive")
                if local:
                    raise TarFormatError(f"the archive ends after an extended header (at byte {start})")
                return
            self.offset += len(block)
            if len(block) < BLOCK:
                raise TarFormatError(f"the archive ends inside a header (at byte {start})")
            if block == bytes(BLOCK):
                if local:
                    raise TarFormatError(f"the archive ends after an extended header (at byte {start})")
                return
            self.headers += 1
            if self.headers > self._max_headers:
                raise TarFormatError(f"more than {self._max_headers} headers")
            member = _parse_block(block, start)
            size = member.size
            padding = -size % BLOCK
            if member.type in _EXTENDED:
                limit = self._max_name if member.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK) \
                    else self._max_pax
                if size > limit:
                    raise TarFormatError(f"{_describe(member.type)} of {size} bytes, more than the {limit} allowed",
                                         member.name)
                data = self._read_exact(size, member.name)
                self._skip(padding, member.name)
                self._extended(member, data, local)
                continue
            _apply(member, {**self._global, **local})
            local = {}
            if member.type == tarfile.AREGTYPE and member.name.endswith("/"):
                member.type = tarfile.DIRTYPE
            if member.isdir():
                member.name = member.name.rstrip("/")
            member.offset = start
            member.offset_data = self.offset
            self._current = member
            self._unread = member.size
            self._padding = -member.size % BLOCK
            yield member

    def _extended(self, header: tarfile.TarInfo, data: bytes, local: dict[str, str]) -> None:
        if header.type == tarfile.GNUTYPE_LONGNAME:
            records = {"path": _text(data.split(b"\0", 1)[0])}
        elif header.type == tarfile.GNUTYPE_LONGLINK:
            records = {"linkpath": _text(data.split(b"\0", 1)[0])}
        else:
            records = _pax_records(data, header.name)
        if header.type == tarfile.XGLTYPE:
            self._global.update(records)
            if _kept_bytes(self._global) > self._max_pax:
                raise TarFormatError(f"global pax headers keeping more than {self._max_pax} bytes", header.name)
            return
        for key, value in records.items():
            local.setdefault(key, value)
        if _kept_bytes(local) > self._max_pax:
            raise TarFormatError(f"extended headers for one member keeping more than {self._max_pax} bytes",
                                 header.name)


# --------------------------------------------------------------------------------------------------- fields
def _describe(kind: bytes) -> str:
    return {
        tarfile.GNUTYPE_LONGNAME: "a GNU long name header",
        tarfile.GNUTYPE_LONGLINK: "a GNU long link name header",
        tarfile.XGLTYPE: "a global pax header",
    }.get(kind, "a pax header")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _string(field: bytes) -> str:
    return _text(field.split(b"\0", 1)[0])


def _number(field: bytes, what: str, offset: int) -> int:
    if field[:1] in (b"\x80", b"\xff"):  # GNU base-256
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * (len(field) - 1))) if field[0] == 0xFF else value
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits:
        return 0
    if digits.strip(b"01234567"):  # int() alone would take a sign, underscores and spaces
        raise TarFormatError(f"a damaged header at byte {offset} ({what} is not a number)")
    return int(digits, 8)


def _parse_block(block: bytes, offset: int) -> tarfile.TarInfo:
    stored = _number(block[148:156], "the checksum", offset)
    unsigned = sum(block[:148]) + 8 * 0x20 + sum(block[156:])
    if stored != unsigned and stored != _signed_checksum(block, unsigned):
        raise TarFormatError(f"a damaged header at byte {offset} (bad checksum)")
    name = _string(block[0:100])
    prefix = _string(block[345:500]) if block[257:263] == _POSIX_MAGIC else ""
    member = tarfile.TarInfo(f"{prefix}/{name}" if prefix else name)
    member.mode = _number(block[100:108], "the mode", offset)
    member.uid = _number(block[108:116], "the uid", offset)
    member.gid = _number(block[116:124], "the gid", offset)
    member.size = _number(block[124:136], "the size", offset)
    member.mtime = _number(block[136:148], "the mtime", offset)
    member.type = block[156:157]
    member.linkname = _string(block[157:257])
    member.uname = _string(block[265:297])
    member.gname = _string(block[297:329])
    if member.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        member.devmajor = _number(block[329:337], "the device number", offset)
        member.devminor = _number(block[337:345], "the device number", offset)
    if member.size < 0:
        raise TarFormatError(f"a damaged header at byte {offset} (a negative size)", member.name)
    return member


def _signed_checksum(block: bytes, unsigned: int) -> int:
    """The checksum as some old tars computed it, over signed bytes."""
    return unsigned - 256 * sum(1 for byte in block[:148] + block[156:] if byte >= 0x80)


def _pax_records(data: bytes, member: str) -> dict[str, str]:
    """``"<length> <key>=<value>\\n"`` records; the length counts the whole record, its own digits included. Only
    the keys this reader applies are returned (and ``GNU.sparse`` for any sparse record)."""
    records: dict[str, str] = {}
    position = 0
    while position < len(data):
        if data[position:] == bytes(len(data) - position):
            break  # NUL padding after the last record
        space = data.find(b" ", position, position + 21)
        digits = data[position:space] if space > position else b""
        if not (digits.isascii() and digits.isdigit()):
            raise TarFormatError("a pax header with a malformed record", member)
        length = int(digits)
        record = data[position:position + length]
        if length <= len(digits) + 1 or len(record) != length or not record.endswith(b"\n"):
            raise TarFormatError("a pax header with a malformed record", member)
        key, equals, value = record[len(digits) + 1:-1].partition(b"=")
        if not equals or not key:
            raise TarFormatError("a pax header with a malformed record", member)
        if key in _KEPT:
            records[_text(key)] = _text(value)
        elif key.startswith(b"GNU.sparse."):
            records[SPARSE_RECORD] = ""
        position += length
    return records


def _kept_bytes(records: dict[str, str]) -> int:
    return sum(len(key) + len(value) for key, value in records.items())


def _apply(member: tarfile.TarInfo, records: dict[str, str]) -> None:
    for key, value in records.items():
        if key == "path":
            member.name = value
        elif key == "linkpath":
            member.linkname = value
        elif key in ("size", "uid", "gid"):
            if not (value.isascii() and value.isdigit()):
                raise TarFormatError(f"a pax header whose {key} is not a number", member.name)
            setattr(member, key, int(value))
        elif key == "mtime":
            try:
                mtime = float(value)
            except ValueError:
                mtime = math.nan
            if not math.isfinite(mtime):
                raise TarFormatError("a pax header whose mtime is not a number", member.name)
            member.mtime = mtime
        elif key in ("uname", "gname"):
            setattr(member, key, value)
    member.pax_headers = dict(records)


__all__ = ["BLOCK", "SPARSE_RECORD", "TarFormatError", "TarReader"]
