"""Where numawatch reads the host from.

Every host path hangs off ``--host-root`` (``/`` on the node, ``/host`` in the DaemonSet, a temporary tree in
tests, an extracted bundle for ``check --from``), with node_exporter-style overrides for procfs and sysfs.
Nothing else in numawatch spells ``/proc`` or ``/sys``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from numawatch import confined


def joined(base: str | os.PathLike[str], relative: str) -> str:
    """``str(Path(base) / relative)`` without building a Path (sources join paths at every reading), for a Path's
    text (or a Path) and a plain relative path: no empty, ``.`` or ``..`` part, no ``/`` at either end."""
    text = os.fspath(base)
    if text == ".":
        return relative
    return f"{text}{relative}" if text.endswith("/") else f"{text}/{relative}"


@dataclass(frozen=True)
class Paths:
    root: Path
    procfs: Path
    sysfs: Path
    kubelet: Path
    rke2: Path
    # The kubelet's pod-resources socket (``<kubelet>/pod-resources/kubelet.sock``, where the kubelet puts it under
    # its root directory).
    pod_resources: Path
    # Every host read goes through it: confined to the bases below (confined.py). Its descriptors are closed when
    # it goes, with this object.
    fs: confined.HostFs = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        bases = self.confinement_bases()
        object.__setattr__(self, "fs", confined.HostFs(bases))

    def confinement_bases(self) -> list[Path]:
        """The root, and each part given outside it (``--path.procfs=/other/proc``), which is then its own root."""
        bases = [self.root]
        root = os.path.abspath(self.root)
        root_real = os.path.realpath(self.root)
        # A socket given outside the root is confined to its directory.
        for part in (self.procfs, self.sysfs, self.kubelet, self.rke2, self.pod_resources.parent):
            given = os.path.abspath(part)
            if not any(given == base or given.startswith(base.rstrip("/") + "/") for base in (root, root_real)):
                bases.append(part)
        return bases

    @classmethod
    def from_root(
        cls,
        root: str | os.PathLike[str] = "/",
        *,
        procfs: str | os.PathLike[str] | None = None,
        sysfs: str | os.PathLike[str] | None = None,
        kubelet: str | os.PathLike[str] | None = None,
        rke2: str | os.PathLike[str] | None = None,
        pod_resources: str | os.PathLike[str] | None = None,
    ) -> Paths:
        base = Path(root)
        kubelet_root = Path(kubelet) if kubelet else base / "var/lib/kubelet"
        return cls(
            root=base,
            procfs=Path(procfs) if procfs else base / "proc",
            sysfs=Path(sysfs) if sysfs else base / "sys",
            kubelet=kubelet_root,
            rke2=Path(rke2) if rke2 else base / "etc/rancher/rke2",
            pod_resources=Path(pod_resources) if pod_resources else kubelet_root / "pod-resources/kubelet.sock",
        )

    # Derived locations. They are properties, not fields, so an override of sysfs moves cgroups with it; cached,
    # since the sources ask for them at every reading and the fields they derive from never change.
    @cached_property
    def cgroupfs(self) -> Path:
        return self.sysfs / "fs/cgroup"

    @cached_property
    def rke2_data(self) -> Path:
        return self.root / "var/lib/rancher/rke2"

    @cached_property
    def run(self) -> Path:
        return self.root / "run"

    @cached_property
    def pod_logs(self) -> Path:
        return self.root / "var/log/pods"

    @cached_property
    def etc(self) -> Path:
        return self.root / "etc"

    @staticmethod
    def own_fd(fd: int) -> str:
        """A path naming this process's open descriptor ``fd`` (its own procfs, never the host's): how a socket
        held open with ``O_PATH`` is connected to (``HostFs.open_socket``), whatever the length of its path."""
        return f"/proc/self/fd/{fd}"

    def host_path(self, absolute: str) -> Path:
        """Map a path as the host names it (``/var/lib/x``) to where we read it (``<root>/var/lib/x``).

        Such paths come from file content (a kubelet ``--config=``, a drop-in directory, a runtime's bundle path),
        so ``..`` is folded as the host's own ``/`` folds it: never above the root (``/../../tmp/x`` is
        ``<root>/tmp/x``). The confined opener would keep a read inside anyway; folding here keeps the path that
        errors and messages name the one that is read.
        """
        names: list[str] = []
        for name in absolute.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                if names:
                    names.pop()
                continue
            names.append(name)
        return self.root.joinpath(*names)

    def resolve(self, path: Path) -> Path:
        """Resolve symlinks in ``path`` as if its root were ``/`` (see ``HostFs.resolve``).

        sysfs links are relative (``../../../devices/pci0000:00/...``) and resolve fine, but an absolute link in
        a captured tree, or ``..`` past the top, must land inside the root, never on this machine's own ``/``.
        Like a chroot, ``..`` at the root stays at the root. Raises OSError as ``open`` would (a dangling link,
        a loop).
        """
        return Path(self.fs.resolve(path))
