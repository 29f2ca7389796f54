"""The corpus of real hosts in tests/corpus/: what trees there are, and each one extracted once per test session.

Three kinds of tree live there, each with the README that says where it comes from and what is true in it:

- ``tests/corpus/hwloc/NAME.tar.bz2``: real machines' ``/sys`` and ``/proc`` from hwloc's regression suite (BSD
  licence in ``COPYING`` beside them). The tree is the tarball's one top directory, whose name is not always
  ``NAME`` (``32amd64-4s2n4c-cgroup2.tar.bz2`` holds ``32amd64-4s2n4c-cgroup/``), so it is found, not assumed;
- ``tests/corpus/peers/``: node_exporter's and procfs's fixture trees (Apache-2.0, ``LICENSE`` beside them), kept
  as their projects keep them (ttar archives, a tarball): ``peer-node_exporter`` and ``peer-procfs``;
- ``tests/corpus/realkernel-*/``: kernels this project booted under QEMU, each with its ``build.sh``, ``README.md``
  and ``console.log``, the captured tree as ``root.tar.gz`` (``tools/corpus_tarball.py``; top directory ``root``)
  or, for a capture not packed yet, as a ``root/`` directory.

``corpus_root(name)`` gives a tree's host root, extracted on first use into one temporary directory per process
(on /dev/shm when it has room) and removed at exit; the session fixtures in conftest.py use it, and so do
module-level helpers that cannot take fixtures. The trees are shared by every test of the session: read them, never
write them (a test that needs to change one copies it first, as ``shutil.copytree(realkernel_root, ...)`` does).
"""

from __future__ import annotations

import atexit
import copy
import os
import posixpath
import shutil
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import ttar

CORPUS = Path(__file__).resolve().parent / "corpus"
HWLOC = CORPUS / "hwloc"
REALKERNEL_PREFIX = "realkernel-"
REALKERNEL_4NODE = "realkernel-4node"
PEERS = CORPUS / "peers"
PEER_NODE_EXPORTER = "peer-node_exporter"
PEER_PROCFS = "peer-procfs"
# (name, archives unpacked under one root, the tree's directory in it)
PEER_TREES = (
    (PEER_NODE_EXPORTER, ("node_exporter-sys.ttar", "node_exporter-proc.tar.gz"), ""),
    (PEER_PROCFS, ("procfs-fixtures.ttar",), "fixtures"),
)


@dataclass(frozen=True)
class CorpusTree:
    """One tree of the corpus: its name (``128arm-2pa2n8cluster4co``, ``realkernel-4node``), kind (``hwloc`` or
    ``realkernel``), where its files are, and the README and console log that describe it."""

    name: str
    kind: str
    archive: Path | None  # a tarball holding the tree
    directory: Path | None  # or the tree itself, unpacked in the repository
    readme: Path
    console: Path | None
    # A peer's tree comes in several archives (ttar or tarball) unpacked under one root; ``top`` is the directory
    # of that root the tree is in ("" for the root itself).
    parts: tuple[Path, ...] = ()
    top: str = ""

    @property
    def source(self) -> Path:
        found = self.archive or self.directory or (self.parts[0] if self.parts else None)
        assert found is not None
        return found


@cache
def trees() -> tuple[CorpusTree, ...]:
    """Every tree of the corpus: hwloc's, the real kernels' (each kind sorted by name), then the peers'."""
    found = []
    for archive in sorted(HWLOC.glob("*.tar.bz2")):
        name = archive.name.removesuffix(".tar.bz2")
        console = archive.with_name(f"{name}.console")
        readme, console_file = HWLOC / "README.md", console if console.is_file() else None
        found.append(CorpusTree(name, "hwloc", archive, None, readme, console_file))
    for directory in sorted(CORPUS.glob(f"{REALKERNEL_PREFIX}*")):
        archive, unpacked = directory / "root.tar.gz", directory / "root"
        if not archive.is_file() and not unpacked.is_dir():
            continue
        console = directory / "console.log"
        found.append(
            CorpusTree(
                directory.name,
                "realkernel",
                archive if archive.is_file() else None,
                None if archive.is_file() else unpacked,
                directory / "README.md",
                console if console.is_file() else None,
            )
        )
    for name, parts, top in PEER_TREES:
        archives = tuple(PEERS / part for part in parts)
        found.append(CorpusTree(name, "peer", None, None, PEERS / "README.md", None, archives, top))
    return tuple(found)


def tree_names() -> tuple[str, ...]:
    return tuple(tree.name for tree in trees())


def oracle_tree_names() -> tuple[str, ...]:
    """The trees hwloc can read (tests/hwloc_oracle.py): every one but the peers', whose captures lack the CPU
    topology files hwloc needs (``lstopo`` aborts: "failed to find sysfs cpu topology directory")."""
    return tuple(tree.name for tree in trees() if tree.kind != "peer")


def tree(name: str) -> CorpusTree:
    for candidate in trees():
        if candidate.name == name:
            return candidate
    raise KeyError(f"no corpus tree {name!r}; there are {', '.join(tree_names())}")


def _member_filter(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """Refuse what could land outside the destination (an absolute or ``..`` name, a link pointing out of the tree)
    and anything but files, directories and links; keep the permission bits as stored (a capture's read-only
    files are part of what it shows), drop owners. Written out rather than passed as ``extractall(filter=...)``:
    extraction filters came in Python 3.11.4, and Debian 12's Python, the project's floor, is 3.11.2. (tarfile's own
    ``data`` filter also resolves every path on disk, which makes unpacking a 10,000-file tree several times
    slower.)"""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise ValueError(f"tar member {member.name!r} would land outside the tree")
    if member.issym():
        target = posixpath.normpath(posixpath.join(str(name.parent), member.linkname))
        if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
            raise ValueError(f"tar member {member.name!r} links outside the tree ({member.linkname!r})")
    elif member.islnk():
        target = posixpath.normpath(member.linkname)
        if target.startswith("/") or target == ".." or target.startswith("../"):
            raise ValueError(f"tar member {member.name!r} links outside the tree ({member.linkname!r})")
    elif not (member.isfile() or member.isdir()):
        raise ValueError(f"tar member {member.name!r} is a device, FIFO or other special file")
    kept = copy.copy(member)
    kept.mode, kept.uid, kept.gid, kept.uname, kept.gname = member.mode & 0o777, 0, 0, "", ""
    return kept


# Where a Python has extraction filters, the members are already checked above: say so, or 3.12 and 3.13 warn and
# 3.14 applies the slow ``data`` filter on top.
_TRUSTED: dict[str, Any] = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


def extract(corpus_tree: CorpusTree, destination: Path) -> Path:
    """Unpack ``corpus_tree`` under ``destination`` (a new, empty directory) and return its host root."""
    if corpus_tree.parts:
        root = destination / corpus_tree.name
        root.mkdir()
        for part in corpus_tree.parts:
            if part.name.endswith(".ttar"):
                ttar.extract(part, root)
            else:
                with tarfile.open(part) as archive:
                    members = [_member_filter(member) for member in archive]
                    archive.extractall(root, members=members, numeric_owner=True, **_TRUSTED)
        return root / corpus_tree.top if corpus_tree.top else root
    if corpus_tree.directory is not None:
        root = destination / corpus_tree.name
        shutil.copytree(corpus_tree.directory, root, symlinks=True)
        return root
    assert corpus_tree.archive is not None
    with tarfile.open(corpus_tree.archive) as archive:
        members = [_member_filter(member) for member in archive]
        archive.extractall(destination, members=members, numeric_owner=True, **_TRUSTED)
    tops = [path for path in destination.iterdir() if path.is_dir() and not path.is_symlink()]
    if len(tops) != 1:
        raise ValueError(f"{corpus_tree.archive} must hold one top directory, found {sorted(p.name for p in tops)}")
    return tops[0]


_lock = threading.Lock()
_extracted: dict[str, Path] = {}
_base: list[Path] = []


# Unpacking writes ~30,000 small files (~130 MB on tmpfs): a tmpfs takes them in well under a second where a
# virtual disk can take a minute, so /dev/shm is used when it is there with room to spare (a container's default
# 64 MB /dev/shm is not).
_TMPFS = Path("/dev/shm")
_TMPFS_MIN_FREE = 1 << 30


def _scratch() -> str | None:
    try:
        if _TMPFS.is_dir() and os.access(_TMPFS, os.W_OK) and shutil.disk_usage(_TMPFS).free >= _TMPFS_MIN_FREE:
            return str(_TMPFS)
    except OSError:
        pass
    return None  # the default temporary directory


def _base_dir() -> Path:
    if not _base:
        base = Path(tempfile.mkdtemp(prefix="numawatch-corpus-", dir=_scratch()))
        atexit.register(shutil.rmtree, base, ignore_errors=True)
        _base.append(base)
    return _base[0]


def corpus_root(name: str) -> Path:
    """The host root of the corpus tree ``name``, extracted once per process (read it, never write it).

    Extracted into a temporary directory beside its place and renamed into place once complete: a failed extraction
    leaves nothing under the name (it is removed, and the next test asking for the tree tries again), so one failure
    never turns into every later test's ``FileExistsError``."""
    with _lock:
        if name not in _extracted:
            base = _base_dir()
            staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=base))
            try:
                staging.chmod(0o755)  # as a plain mkdir would make it
                root = extract(tree(name), staging)
                destination = base / name
                staging.rename(destination)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            _extracted[name] = destination / root.relative_to(staging)
        return _extracted[name]
