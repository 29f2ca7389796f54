"""The fake-host builder: writes complete host trees (proc, sys, cgroups, kubelet, runtime) for tests and benches.

``FakeHost`` is the base (a root directory plus write helpers); each domain has its own module that adds its part:
``topology`` (CPUs, NUMA nodes, isolation), ``gpus`` (NVIDIA PCI functions), ``pods`` (cgroups and runtime
bundles), ``kubelet`` (configuration and state files with valid checksums), ``reference`` (a clean reference GPU
node composed from all of them). Tests never copy trees around: they build what they need.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from numawatch.paths import Paths


class FakeHost:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    @property
    def paths(self) -> Paths:
        return Paths.from_root(self.root)

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def write(self, rel: str, content: str | bytes) -> Path:
        """Write a file (parents created); a str gets a trailing newline as kernel files have."""
        target = self.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            if content and not content.endswith("\n"):
                content += "\n"
            target.write_text(content)
        else:
            target.write_bytes(content)
        return target

    def mkdir(self, rel: str) -> Path:
        target = self.path(rel)
        target.mkdir(parents=True, exist_ok=True)
        return target

    def symlink(self, rel: str, target: str) -> Path:
        link = self.path(rel)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(target, link)
        return link

    def remove(self, rel: str) -> None:
        target = self.path(rel)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
