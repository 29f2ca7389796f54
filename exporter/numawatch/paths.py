"""Where numawatch reads the host from.

Every host path hangs off ``--host-root`` (``/`` on the node, ``/host`` in the DaemonSet, a temporary tree in
tests, an extracted bundle for ``check --from``), with node_exporter-style overrides for procfs and sysfs.
Nothing else in numawatch spells ``/proc`` or ``/sys``.
"""

from __future__ import annotations

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
        root = self.root.resolve() if str(self.root) != "/" else Path("/")
        try:
            relative = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
        except ValueError:
            return Path(os.path.realpath(path))  # a per-part override outside the root: plain resolution
        parts = list(relative.parts)
        resolved: list[str] = []
        links = 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = root.joinpath(*resolved, part)
            if candidate.is_symlink():
                links += 1
                if links > _MAX_SYMLINKS:
                    raise OSError(f"too many levels of symbolic links under {path}")
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = []
                parts = list(Path(target).parts) + parts
                if target.startswith("/"):
                    parts = parts[1:]
                continue
            resolved.append(part)
        return root.joinpath(*resolved)
