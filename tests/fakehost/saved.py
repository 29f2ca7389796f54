"""Files of a fake host's tree saved to be put back as they were: what the kernel restores on its own (a CPU brought
back online gives the topology, the nodes' lists, /proc/interrupts and every cpuset their CPU back), for tests that
change a live tree under ``numawatch serve``."""

from __future__ import annotations

from collections.abc import Iterable

from fakehost import FakeHost


class Saved:
    """The files under ``directories`` of the tree and the ``files`` named, to put back as they were (``restore``:
    files added under those directories since are removed)."""

    def __init__(self, host: FakeHost, directories: Iterable[str], files: Iterable[str] = ()) -> None:
        self.host = host
        self.directories = tuple(directories)
        self.files: dict[str, bytes] = {}
        for rel in files:
            self.files[rel] = host.path(rel).read_bytes()
        for rel in self.directories:
            for path in host.path(rel).rglob("*"):
                if path.is_file() and not path.is_symlink():
                    self.files[str(path.relative_to(host.root))] = path.read_bytes()

    def restore(self) -> None:
        for rel in self.directories:
            for path in list(self.host.path(rel).rglob("*")):
                if path.is_file() and not path.is_symlink() and str(path.relative_to(self.host.root)) not in self.files:
                    path.unlink()
        for rel, data in self.files.items():
            target = self.host.path(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
