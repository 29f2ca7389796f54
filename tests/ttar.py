"""A reader of ttar, the plain-text archive prometheus/procfs and node_exporter keep their fixture trees in.

An archive is a run of entries separated by ``# ttar - - -`` comment lines: ``Directory: P``, or ``Path: P`` followed
by ``Lines: N`` and N lines of content (``NULLBYTE`` stands for a NUL, a last line ending in ``EOF`` has no final
newline) or by ``SymlinkTo: T``; ``Mode: M`` (octal) gives the permission bits. This is what procfs's ``ttar`` script
writes and reads (github.com/ideaship/ttar).

Only what can stay inside the destination is made: a name that is absolute or climbs out with ``..`` is an error, and
a symbolic link whose target would leave the tree (procfs's ``/proc/<pid>/exe -> /usr/bin/vim``, ``root -> /``) is
left out and returned, so a reader of the tree never follows it to the test machine's own files.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path, PurePosixPath


class TtarError(ValueError):
    """The archive is not well formed: the line number and what was wrong."""


def _relative(name: str, number: int) -> PurePosixPath:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts:
        raise TtarError(f"line {number}: {name!r} would land outside the tree")
    return path


def _stays_inside(path: PurePosixPath, target: str) -> bool:
    if target.startswith("/"):
        return False
    joined = posixpath.normpath(posixpath.join(str(path.parent), target))
    return joined != ".." and not joined.startswith("../")


def extract(archive: Path, destination: Path) -> list[str]:
    """Unpack ``archive`` under ``destination`` (which exists); return the links left out (``NAME -> TARGET``)."""
    lines = archive.read_bytes().decode("utf-8", "surrogateescape").split("\n")  # no newline translation: a CR is data
    if lines and lines[-1] == "":
        lines.pop()
    skipped: list[str] = []
    modes: list[tuple[Path, int]] = []  # applied last, so a read-only directory is filled first
    current: Path | None = None
    index = 0
    while index < len(lines):
        line, number = lines[index], index + 1
        index += 1
        if not line or line.startswith("#"):
            continue
        key, colon, value = line.partition(": ")
        if not colon:
            raise TtarError(f"line {number}: expected 'Key: value', got {line[:60]!r}")
        if key == "Directory":
            current = destination / _relative(value, number)
            current.mkdir(parents=True, exist_ok=True)
        elif key == "Path":
            relative = _relative(value, number)
            current = destination / relative
            current.parent.mkdir(parents=True, exist_ok=True)
        elif key == "Lines":
            if current is None or not value.isdigit():
                raise TtarError(f"line {number}: 'Lines' without a Path or with a bad count {value!r}")
            count = int(value)
            if index + count > len(lines):
                raise TtarError(f"line {number}: {count} lines announced, the archive ends first")
            content = bytearray()
            for offset, text in enumerate(lines[index : index + count]):
                last = offset == count - 1
                ends = last and text.endswith("EOF")
                body = text[:-3] if ends else text
                content += body.replace("NULLBYTE", "\0").encode("utf-8", "surrogateescape")
                if not ends:
                    content += b"\n"
            index += count
            current.write_bytes(bytes(content))
        elif key == "SymlinkTo":
            if current is None:
                raise TtarError(f"line {number}: 'SymlinkTo' without a Path")
            relative = current.relative_to(destination)
            if _stays_inside(PurePosixPath(relative.as_posix()), value):
                os.symlink(value, current)
            else:
                skipped.append(f"{relative.as_posix()} -> {value}")
            current = None  # a link takes no mode
        elif key == "Mode":
            if current is None:
                continue
            try:
                modes.append((current, int(value, 8) & 0o777))
            except ValueError:
                raise TtarError(f"line {number}: bad mode {value!r}") from None
        else:
            raise TtarError(f"line {number}: unknown key {key!r}")
    for path, mode in sorted(modes, key=lambda item: len(item[0].parts), reverse=True):
        os.chmod(path, mode | 0o400 | (0o100 if path.is_dir() else 0))
    return skipped
