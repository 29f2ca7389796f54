"""Errors shared by sources and the host reader."""

from __future__ import annotations

from pathlib import Path


class SourceUnavailable(Exception):
    """The source has nothing to read here (no kubelet, no cgroup mount, ...) or cannot read it.

    The message is the one-line reason shown in ``numawatch_source_up`` / ``check`` output.
    """


class MalformedFile(ValueError):
    """A file whose content is not in the expected format. The message names the file and what was wrong."""

    def __init__(self, path: Path | str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = str(path)
        self.what = what
