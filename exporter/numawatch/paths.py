"""Where numawatch reads the host from.

Every host path hangs off ``--host-root`` (``/`` on the node, ``/host`` in the DaemonSet, a temporary tree in
tests, an extracted bundle for ``check --from``), with node_exporter-style overrides for procfs and sysfs.
Nothing else in numawatch spells ``/proc`` or ``/sys``.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

_MAX_SYMLINKS = 40  # the kernel's own limit (MAXSYMLINKS), so a link loop ends with an error, not a hang


@dataclass(frozen=True)
class Paths:
    root: Path
    procfs: Path
    sysfs: Path
    kubelet: Path
    rke2: Path

    @classmethod
    def from_root(
        cls,
        root: str | os.PathLike[str] = "/",
        *,
        procfs: str | os.PathLike[str] | None = None,
        sysfs: str | os.PathLike[str] | None = None,
        kubelet: str | os.PathLike[str] | None = None,
        rke2: str | os.PathLike[str] | None = None,
    ) -> Paths:
        base = Path(root)
        return cls(
            root=base,
            procfs=Path(procfs) if procfs else base / "proc",
            sysfs=Path(sysfs) if sysfs else base / "sys",
            kubelet=Path(kubelet) if kubelet else base / "var/lib/kubelet",
            rke2=Path(rke2) if rke2 else base / "etc/rancher/rke2",
        )

    # Derived locations. They are properties, not fields, so an override of sysfs moves cgroups with it.
    @property
    def cgroupfs(self) -> Path:
        return self.sysfs / "fs/cgroup"

    @property
    def rke2_data(self) -> Path:
        return self.root / "var/lib/rancher/rke2"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def pod_logs(self) -> Path:
        return self.root / "var/log/pods"

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    def host_path(self, absolute: str) -> Path:
        """Map a path as the host names it (``/var/lib/x``) to where we read it (``<root>/var/lib/x``)."""
        return self.root / absolute.lstrip("/")

    def resolve(self, path: Path) -> Path:
        """Resolve symlinks in ``path`` as if ``self.root`` were ``/``.

        sysfs links are relative (``../../../devices/pci0000:00/...``) and resolve fine, but an absolute link in
        a captured tree, or ``..`` past the top, must land inside the root, never on this machine's own ``/``.
        Like a chroot, ``..`` at the root stays at the root.
        """
        # Plain strings and os.path, not pathlib: readers resolve every entry of sys/bus/pci/devices on each scan,
        # and pathlib's object churn cost ~10x the lstat calls themselves.
        root = "/" if str(self.root) == "/" else os.path.realpath(self.root)
        text = os.fspath(path)
        if not text.startswith("/"):
            text = os.path.join(os.getcwd(), text)
        # Not os.path.abspath(path): it folds ``..`` lexically, before links are followed, and could walk out of
        # the root (``<root>/../../etc``). Only "." and empty parts are dropped here.
        names = [name for name in text.split("/") if name and name != "."]
        relative: list[str] | None = None
        # The root as given and as resolved: a root reached through a symlink (/host -> /mnt/host) still counts.
        for base in (os.path.abspath(self.root), root):
            base_names = [name for name in base.split("/") if name]
            if names[: len(base_names)] == base_names:
                relative = names[len(base_names) :]
                break
        if relative is None:
            return Path(os.path.realpath(path))  # a per-part override outside the root: plain resolution
        pending = relative[::-1]  # a stack: the next name to look at is last
        prefixes = [root.rstrip("/")]  # prefixes[-1] is the resolved path so far ("" stands for "/")
        links = 0
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if len(prefixes) > 1:
                    prefixes.pop()
                continue
            candidate = f"{prefixes[-1]}/{name}"
            if os.path.islink(candidate):
                links += 1
                if links > _MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "Too many levels of symbolic links", os.fspath(path))
                target = os.readlink(candidate)
                if target.startswith("/"):
                    del prefixes[1:]
                pending.extend(reversed(target.split("/")))
                continue
            prefixes.append(candidate)
        return Path(prefixes[-1] or "/")
