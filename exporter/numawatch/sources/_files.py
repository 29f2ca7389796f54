"""Small helpers every source uses to read host files: bounded, one syscall where possible, clear errors.

Every open, listing and stat goes through ``numawatch.confined``: confined to the host root, non-blocking, regular
files only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from numawatch import confined
from numawatch.errors import MalformedFile, SourceUnavailable

__all__ = ["MalformedFile", "SourceUnavailable"]

# No file numawatch reads legitimately comes close to this; /proc/interrupts on a 384-CPU host with 2,000 IRQs is
# about 8 MB. A bigger file is corrupt or hostile, and reading it whole would blow the memory budget.
DEFAULT_READ_LIMIT = 16 * 1024 * 1024


# Bytes asked of the kernel per read(2). Python allocates the whole size asked for before the kernel fills it, so
# asking for the read limit (megabytes) would map and fault in a fresh buffer for every small file; procfs and sysfs
# files fit in one such read, and a larger file is gathered chunk by chunk.
_CHUNK = 1 << 16


def read_bytes(path: Path | str, limit: int = DEFAULT_READ_LIMIT) -> bytes:
    """Read a whole file, refusing files larger than ``limit`` (procfs reports size 0, so we read and count)."""
    fd = confined.open_file(path)
    parts: list[bytes] = []
    total = 0
    try:
        # procfs files can return short reads; keep reading until EOF.
        while chunk := os.read(fd, min(limit + 1 - total, _CHUNK)):
            total += len(chunk)
            if total > limit:
                raise MalformedFile(path, f"larger than the {limit}-byte limit")
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts)  # one part is handed back as it is, not copied


def read_small(path: Path | str, size: int, *, vanishing: bool = False) -> bytes | None:
    """One open and one read of at most ``size`` bytes: all of a small procfs or sysfs attribute, which the kernel
    fills in one read. None when the file does not exist; with ``vanishing``, also when the read itself fails (the
    object behind it, an IRQ or a process, was torn down between open and read: EIO, EINVAL, ESRCH).

    For the files read by the hundred at every reading (IRQ affinities, cpufreq policies): no loop, no limit check
    beyond ``size``."""
    try:
        fd = confined.open_file(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return os.read(fd, size)
    except OSError:
        if vanishing:
            return None
        raise
    finally:
        os.close(fd)


def read_small_text(path: Path | str, size: int) -> str | None:
    """``read_small`` as text (invalid UTF-8 replaced): None when the file does not exist."""
    data = read_small(path, size)
    return None if data is None else data.decode("utf-8", errors="replace")


def read_text(path: Path | str, limit: int = DEFAULT_READ_LIMIT) -> str:
    return read_bytes(path, limit).decode("utf-8", errors="replace")


def read_optional_text(path: Path | str, limit: int = DEFAULT_READ_LIMIT) -> str | None:
    """The file's text, or None when it does not exist (a vanished cgroup, an absent sysfs attribute)."""
    try:
        return read_text(path, limit)
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_attribute_text(path: Path | str, limit: int) -> str | None:
    """``read_optional_text`` for a sysfs or sysctl attribute, in one read: the kernel fills such a file in one read
    (and a regular file, in a captured or generated tree, returns all it has up to the size asked), so the read
    that would only find the end of the file is left out. Refuses a file larger than ``limit`` as
    ``read_optional_text`` does; None when it does not exist."""
    data = read_small(path, limit + 1)
    if data is None:
        return None
    if len(data) > limit:
        raise MalformedFile(path, f"larger than the {limit}-byte limit")
    return data.decode("utf-8", errors="replace")


def list_dir(path: Path | str) -> list[str]:
    """Directory entries, or [] when the directory vanished or never existed."""
    try:
        return confined.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


_INLINE_COMMENT = re.compile(r"(?:^|\s)#")


def parse_env_file(text: str) -> dict[str, str]:
    """systemd EnvironmentFile lines -> {key: value}: ``KEY=value``, ``KEY="a b"``, ``export KEY=v``, comments."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals or not key.replace("_", "").isalnum():
            continue  # not an assignment: systemd ignores it with a warning, and so do we
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        else:
            # A "#" at the start of the value or after white space starts a comment, as when a shell sources it.
            value = _INLINE_COMMENT.split(value, maxsplit=1)[0].strip()
        values[key] = value
    return values


def line_after(data: bytes, key: bytes) -> bytes | None:
    """The rest of the line that starts with ``key``, or None when no line does.

    Lines are found by key, not position: cgroup and procfs files gain keys in the middle across kernel versions.
    """
    if data.startswith(key):
        start = len(key)
    else:
        found = data.find(b"\n" + key)
        if found < 0:
            return None
        start = found + 1 + len(key)
    end = data.find(b"\n", start)
    return data[start:] if end < 0 else data[start:end]
