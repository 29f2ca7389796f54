"""The corpus of real hosts (tests/corpus): complete, small, extracted safely, and its tarballs reproducible."""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
from pathlib import Path

import pytest
from corpus import CORPUS, HWLOC, REALKERNEL_4NODE, corpus_root, extract, tree, tree_names, trees

REPO = Path(__file__).resolve().parents[1]
# The corpus travels with every clone: keep it a few MB (it is ~0.6 MB).
MAX_CORPUS_BYTES = 4 << 20


def load_tarball_tool():
    spec = importlib.util.spec_from_file_location("numawatch_corpus_tarball", REPO / "tools" / "corpus_tarball.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_corpus_has_hwlocs_trees_and_the_real_kernel_capture_with_their_papers():
    names = tree_names()
    hwloc = [t for t in trees() if t.kind == "hwloc"]

    assert len(hwloc) == len(list(HWLOC.glob("*.tar.bz2"))) >= 14
    assert REALKERNEL_4NODE in names
    assert (HWLOC / "COPYING").read_text().startswith("SPDX-License-Identifier: BSD-3-Clause")
    for corpus_tree in trees():
        assert corpus_tree.readme.is_file(), corpus_tree.name
    realkernel = tree(REALKERNEL_4NODE)
    assert realkernel.console is not None and (realkernel.readme.parent / "build.sh").is_file()


def test_the_corpus_stays_small():
    size = sum(path.stat().st_size for path in CORPUS.rglob("*") if path.is_file())

    assert size < MAX_CORPUS_BYTES, f"tests/corpus holds {size} bytes"


@pytest.mark.parametrize(
    ("name", "directory"),
    [
        ("32amd64-4s2n4c-cgroup2", "32amd64-4s2n4c-cgroup"),
        ("32em64t-2n8c+dax+nvme+mic+dimms", "32em64t-2n8c+1mic"),
        ("40intel64-2g2n4c+pcilocality", "40intel64-2g2n4c+pci"),
        ("2arm-2c", "2arm-2c"),
        (REALKERNEL_4NODE, "root"),
    ],
)
@pytest.mark.slow
def test_a_tree_is_the_top_directory_whatever_the_tarball_is_called(name, directory):
    root = corpus_root(name)

    assert root.name == directory
    assert (root / "sys/devices/system/cpu").is_dir()
    assert corpus_root(name) == root  # extracted once


def test_a_capture_keeps_its_read_only_modes():
    cmdline = corpus_root(REALKERNEL_4NODE) / "proc/cmdline"

    assert cmdline.stat().st_mode & 0o777 == 0o444


def test_the_committed_capture_tarball_is_what_the_tool_packs_from_its_tree():
    packed = load_tarball_tool().pack(corpus_root(REALKERNEL_4NODE))

    assert packed == (tree(REALKERNEL_4NODE).archive or Path()).read_bytes()


def test_packing_is_deterministic_and_sorted(tmp_path):
    tool = load_tarball_tool()
    source = tmp_path / "root"
    (source / "b").mkdir(parents=True)
    (source / "b/z").write_text("z\n")
    (source / "a").write_text("a\n")
    (source / "b/link").symlink_to("z")

    first = tool.pack(source)
    (source / "a").touch()  # a new mtime changes nothing
    second = tool.pack(source)

    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == ["root", "root/a", "root/b", "root/b/link", "root/b/z"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert members[3].issym() and members[3].linkname == "z"


def test_packing_refuses_a_fifo(tmp_path):
    import os

    source = tmp_path / "root"
    source.mkdir()
    os.mkfifo(source / "pipe")

    with pytest.raises(ValueError, match="not a regular file"):
        load_tarball_tool().pack(source)


def _tarball(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> None:
    with tarfile.open(path, "w:gz") as archive:
        top = tarfile.TarInfo("tree")
        top.type = tarfile.DIRTYPE
        archive.addfile(top)
        archive.addfile(member, io.BytesIO(data) if data else None)


@pytest.mark.parametrize(
    ("name", "kind", "linkname"),
    [
        ("tree/../../escaped", tarfile.REGTYPE, ""),
        ("/tmp/absolute", tarfile.REGTYPE, ""),
        ("tree/etc", tarfile.SYMTYPE, "/etc"),
        ("tree/up", tarfile.SYMTYPE, "../../.."),
        ("tree/hard", tarfile.LNKTYPE, "../outside"),
        ("tree/console", tarfile.CHRTYPE, ""),
    ],
)
def test_extraction_refuses_what_could_leave_the_tree(tmp_path, name, kind, linkname):
    from corpus import CorpusTree

    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, linkname
    data = b"x" if kind == tarfile.REGTYPE else b""
    member.size = len(data)
    archive = tmp_path / "evil.tar.gz"
    _tarball(archive, member, data)
    destination = tmp_path / "out"
    destination.mkdir()

    with pytest.raises(ValueError, match=r"outside the tree|special file"):
        extract(CorpusTree("evil", "realkernel", archive, None, tmp_path / "README.md", None), destination)
    assert not (tmp_path / "escaped").exists()


def test_a_failed_extraction_leaves_nothing_behind_and_the_next_one_succeeds(tmp_path, monkeypatch):
    import corpus

    smallest = min(corpus.trees(), key=lambda found: found.source.stat().st_size)
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.setattr(corpus, "_base", [base])
    monkeypatch.setattr(corpus, "_extracted", {})
    real_extract = corpus.extract

    def half_then_fail(corpus_tree, destination):
        (destination / "half-written").write_text("x")
        raise OSError("disk full")

    monkeypatch.setattr(corpus, "extract", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        corpus.corpus_root(smallest.name)
    assert list(base.iterdir()) == []

    monkeypatch.setattr(corpus, "extract", real_extract)
    root = corpus.corpus_root(smallest.name)

    assert root.is_relative_to(base / smallest.name)
    assert (root / "sys").is_dir() or (root / "proc").is_dir()
    assert [path.name for path in base.iterdir()] == [smallest.name]
