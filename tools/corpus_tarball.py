"""Pack a captured host tree into a deterministic tarball for tests/corpus/ (the same tree always gives the same bytes).

    python tools/corpus_tarball.py tests/corpus/realkernel-4node/root tests/corpus/realkernel-4node/root.tar.gz

Entries are sorted by name, every mtime is 0, owner and group are 0 with no names, and the gzip header carries no
file name or time, so re-packing an unchanged capture changes nothing in git. The tree's top directory is stored as
``root/`` (``--arcname`` changes it). Regular files keep their permission bits: a capture made with ``cat SRC >
DEST`` into read-only files has lost every write bit, and readers that look at modes (the IRQ source's
``smp_affinity`` mode) must see exactly that. Directories are stored ``0755`` so a test can copy a tree and add the
kubelet's files to it. Symbolic links are kept as links; nothing else (devices, FIFOs, sockets) belongs in a capture
and is refused.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import stat
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path


def _walk(top: Path) -> Iterator[Path]:
    """Every path under ``top`` (itself first), directories before their contents, names sorted at every level."""
    yield top
    if top.is_symlink() or not top.is_dir():
        return
    for name in sorted(os.listdir(top)):
        yield from _walk(top / name)


def _member(path: Path, name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
        info.mode = 0o777
    elif stat.S_ISDIR(mode):
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    elif stat.S_ISREG(mode):
        info.type = tarfile.REGTYPE
        info.size = os.lstat(path).st_size
        info.mode = stat.S_IMODE(mode) & 0o777
    else:
        raise ValueError(f"{path}: not a regular file, directory or symbolic link")
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack(source: Path, *, arcname: str = "root") -> bytes:
    """The gzip-compressed tarball of ``source`` stored under ``arcname/``."""
    if not source.is_dir() or source.is_symlink():
        raise ValueError(f"{source} is not a directory")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in _walk(source):
            relative = path.relative_to(source).as_posix()
            name = arcname if relative == "." else f"{arcname}/{relative}"
            info = _member(path, name)
            if info.type == tarfile.REGTYPE:
                with open(path, "rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=9) as stream:
        stream.write(raw.getvalue())
    return compressed.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("source", type=Path, help="the tree to pack (e.g. a capture's root/)")
    parser.add_argument("destination", type=Path, help="the .tar.gz to write")
    parser.add_argument("--arcname", default="root", help="the top directory's name in the tarball (default: root)")
    args = parser.parse_args(argv)
    try:
        data = pack(args.source, arcname=args.arcname)
    except (OSError, ValueError) as error:
        print(f"corpus_tarball: {error}", file=sys.stderr)
        return 1
    args.destination.write_bytes(data)
    print(f"{args.destination}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
