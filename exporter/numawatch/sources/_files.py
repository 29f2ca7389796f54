"""What the sources share besides reading: environment files, lines by key.

Every open, listing and stat goes through the Paths' ``HostFs`` (``paths.fs``, ``numawatch.confined``): confined
to the host root, non-blocking, regular files only, bounded.
"""

from __future__ import annotations

import re

from numawatch import confined
from numawatch.errors import MalformedFile, SourceUnavailable

__all__ = ["MalformedFile", "SourceUnavailable"]

DEFAULT_READ_LIMIT = confined.DEFAULT_READ_LIMIT


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
