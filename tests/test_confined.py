"""The confined opener (numawatch/confined.py): every host path resolved under its root, regular files only.

Each case runs twice, through openat2 (RESOLVE_IN_ROOT, where this kernel has it) and through the fallback walk that
kernels without openat2 use, and both must give the same answer. A canary outside the root holds bytes that must
never come back; the root holds a decoy at the place a confined resolution lands, which must.
"""

from __future__ import annotations

import errno
import gc
import os
import socket
import stat
import sys
import threading
from functools import partial
from pathlib import Path

import pytest
from numawatch import confined
from numawatch.paths import Paths

CANARY = b"CANARY-outside-the-root-5b1d9e\n"
DECOY = b"decoy-inside-the-root\n"


@pytest.fixture(params=["openat2", "fallback"])
def mode(request):
    if request.param == "openat2" and not confined._probe_openat2():
        pytest.skip("this kernel (or its seccomp profile) has no openat2")
    with confined.use_openat2(request.param == "openat2"):
        assert confined.openat2_available() == (request.param == "openat2")
        yield request.param


@pytest.fixture
def tree(tmp_path):
    """<tmp>/host: the root; <tmp>/outside: the canary. The root also holds <root>/<tmp>/outside: the decoy that an
    absolute link to the canary lands on when it is re-rooted."""
    root = tmp_path / "host"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(CANARY)
    (outside / "dir").mkdir()
    (outside / "dir/secret").write_bytes(CANARY)
    decoy = root / str(outside).lstrip("/")
    (decoy / "dir").mkdir(parents=True)
    (decoy / "secret").write_bytes(DECOY)
    (decoy / "dir/secret").write_bytes(DECOY)
    (root / "proc/sys/vm").mkdir(parents=True)
    (root / "proc/sys/vm/swappiness").write_bytes(b"60\n")
    (root / "etc").mkdir()
    return root, outside


def read(fs: confined.HostFs, path) -> bytes:
    fd = fs.open_file(path)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def escaping(link_dir: Path, target: Path) -> str:
    """A relative link from ``link_dir`` that reaches ``target`` on this machine: enough ``..`` to get to /."""
    return "../" * (len(link_dir.parts) + 3) + str(target).lstrip("/")


def test_a_plain_file_reads(tree, mode):
    root, _ = tree
    paths = Paths.from_root(root)
    assert read(paths.fs, paths.procfs / "sys/vm/swappiness") == b"60\n"


def test_an_absolute_link_is_re_rooted(tree, mode):
    root, outside = tree
    os.symlink(outside / "secret", root / "proc/sys/vm/numa")
    paths = Paths.from_root(root)
    assert read(paths.fs, paths.procfs / "sys/vm/numa") == DECOY


def test_a_relative_link_escaping_with_dotdot_stops_at_the_root(tree, mode):
    root, outside = tree
    link_dir = root / "proc/sys/vm"
    os.symlink(escaping(link_dir, outside / "secret"), link_dir / "numa")
    assert (link_dir / "numa").read_bytes() == CANARY  # what an unconfined open reads
    paths = Paths.from_root(root)
    assert read(paths.fs, paths.procfs / "sys/vm/numa") == DECOY


@pytest.mark.parametrize("absolute", [True, False])
def test_a_directory_link_is_followed_inside_the_root(tree, mode, absolute):
    root, outside = tree
    target = str(outside / "dir") if absolute else escaping(root / "proc", outside / "dir")
    os.symlink(target, root / "proc/linked")
    paths = Paths.from_root(root)
    assert read(paths.fs, paths.procfs / "linked/secret") == DECOY
    assert paths.fs.listdir(paths.procfs / "linked") == ["secret"]
    assert paths.fs.is_dir(paths.procfs / "linked")


def test_dotdot_in_the_path_stops_at_the_root(tree, mode):
    root, outside = tree
    paths = Paths.from_root(root)
    climbing = f"{root}/" + "../" * 12 + str(outside / "secret").lstrip("/")
    assert read(paths.fs, climbing) == DECOY
    assert read(paths.fs, paths.host_path("/../../../../" + str(outside / "secret").lstrip("/"))) == DECOY


def test_a_dangling_link_is_a_missing_file(tree, mode):
    root, _ = tree
    os.symlink("/nowhere/at/all", root / "etc/dangling")
    paths = Paths.from_root(root)
    with pytest.raises(FileNotFoundError) as raised:
        read(paths.fs, paths.etc / "dangling")
    assert raised.value.filename == str(paths.etc / "dangling")
    assert not paths.fs.exists(paths.etc / "dangling")
    assert paths.fs.lstat(paths.etc / "dangling").st_mode & stat.S_IFMT(0o170000) == stat.S_IFLNK


@pytest.mark.parametrize("target", ["loop-b", "/etc/loop-b"])
def test_a_link_loop_ends_with_eloop(tree, mode, target):
    root, _ = tree
    os.symlink(target, root / "etc/loop-a")
    os.symlink("loop-a", root / "etc/loop-b")
    paths = Paths.from_root(root)
    for call in (partial(read, paths.fs), paths.fs.listdir, paths.fs.stat_path):
        with pytest.raises(OSError) as raised:
            call(paths.etc / "loop-a")
        assert raised.value.errno == errno.ELOOP


def test_a_chain_longer_than_the_kernels_limit_ends_with_eloop(tree, mode):
    root, _ = tree
    (root / "etc/end").write_bytes(DECOY)
    os.symlink("end", root / "etc/link0")
    for index in range(1, confined.MAX_SYMLINKS + 2):
        os.symlink(f"link{index - 1}", root / f"etc/link{index}")
    paths = Paths.from_root(root)
    assert read(paths.fs, paths.etc / f"link{confined.MAX_SYMLINKS - 1}") == DECOY
    with pytest.raises(OSError) as raised:
        read(paths.fs, paths.etc / f"link{confined.MAX_SYMLINKS + 1}")
    assert raised.value.errno == errno.ELOOP


def test_a_root_reached_through_a_symlink_confines_to_its_target(tree, mode, tmp_path):
    root, outside = tree
    os.symlink(root, tmp_path / "root-link")
    os.symlink(outside / "secret", root / "etc/abs")
    os.symlink(escaping(root / "etc", outside / "secret"), root / "etc/rel")
    paths = Paths.from_root(tmp_path / "root-link")
    assert read(paths.fs, paths.etc / "abs") == DECOY
    assert read(paths.fs, paths.etc / "rel") == DECOY
    assert read(paths.fs, f"{os.path.realpath(root)}/etc/abs") == DECOY  # the resolved spelling is the same root


def test_a_fifo_is_refused_without_blocking(tree, mode):
    root, _ = tree
    os.mkfifo(root / "proc/sys/vm/fifo")
    paths = Paths.from_root(root)
    outcome: list[BaseException | bytes] = []

    def attempt() -> None:
        try:
            outcome.append(read(paths.fs, paths.procfs / "sys/vm/fifo"))
        except BaseException as error:  # handed to the test thread
            outcome.append(error)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "opening a FIFO blocked"
    assert isinstance(outcome[0], confined.NotRegularFile)
    assert "a FIFO" in str(outcome[0]) and str(paths.procfs / "sys/vm/fifo") in str(outcome[0])
    assert paths.fs.listdir(paths.procfs / "sys/vm") != []  # the directory itself is fine
    with pytest.raises(NotADirectoryError):
        paths.fs.listdir(paths.procfs / "sys/vm/fifo")


def test_a_socket_and_a_device_are_refused(tree, mode):
    root, _ = tree
    paths = Paths.from_root(root)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(root / "etc/sock"))
        with pytest.raises(OSError):
            read(paths.fs, paths.etc / "sock")
    finally:
        server.close()
    try:
        os.mknod(root / "etc/null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("no permission to create a device node here")
    with pytest.raises(confined.NotRegularFile, match="a character device"):
        read(paths.fs, paths.etc / "null")


def test_a_directory_opened_as_a_file_is_an_isadirectoryerror(tree, mode):
    root, _ = tree
    paths = Paths.from_root(root)
    with pytest.raises(IsADirectoryError):
        read(paths.fs, paths.etc)


def test_stat_lstat_readlink_and_exists(tree, mode):
    root, outside = tree
    os.symlink(outside / "secret", root / "etc/abs")
    paths = Paths.from_root(root)
    assert paths.fs.stat_path(paths.etc / "abs").st_size == len(DECOY)  # the decoy's size, not the canary's
    assert stat.S_ISLNK(paths.fs.lstat(paths.etc / "abs").st_mode)
    assert paths.fs.readlink(paths.etc / "abs") == str(outside / "secret")
    assert paths.fs.is_file(paths.etc / "abs") and not paths.fs.is_dir(paths.etc / "abs")
    assert paths.fs.exists(paths.root) and paths.fs.is_dir(paths.root)
    assert not paths.fs.exists(paths.etc / "missing")
    with pytest.raises(OSError) as raised:
        paths.fs.readlink(paths.procfs / "sys/vm/swappiness")
    assert raised.value.errno == errno.EINVAL


def test_scandir_lists_without_following_links(tree, mode):
    root, outside = tree
    os.symlink(outside / "dir", root / "etc/dirlink")
    (root / "etc/real").mkdir()
    paths = Paths.from_root(root)
    with paths.fs.scandir(paths.etc) as entries:
        found = {entry.name: (entry.is_dir(follow_symlinks=False), entry.is_symlink()) for entry in entries}
    assert found == {"dirlink": (False, True), "real": (True, False)}


def test_resolve_spells_the_result_under_the_root(tree, mode):
    root, outside = tree
    (root / "sys/devices/pci0000:17/0000:18:00.0").mkdir(parents=True)
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("/sys/devices/pci0000:17/0000:18:00.0", root / "sys/bus/pci/devices/a")
    os.symlink(escaping(root / "sys/bus/pci/devices", outside), root / "sys/bus/pci/devices/b")
    paths = Paths.from_root(root)
    assert paths.fs.resolve(paths.sysfs / "bus/pci/devices/a") == f"{root}/sys/devices/pci0000:17/0000:18:00.0"
    assert paths.fs.resolve(paths.sysfs / "bus/pci/devices/b") == f"{root}{outside}"
    assert paths.fs.resolve(paths.sysfs / "bus/pci/devices/a/../x/..") == f"{root}/sys/devices/pci0000:17"


def test_a_nul_in_a_path_is_refused(tree, mode):
    root, _ = tree
    paths = Paths.from_root(root)
    with pytest.raises(OSError) as raised:
        read(paths.fs, f"{root}/proc/sys/vm/swappiness\0/etc/passwd")
    assert raised.value.errno == errno.EINVAL


def test_an_override_outside_the_root_is_confined_to_its_own_base(tree, mode, tmp_path):
    root, outside = tree
    other = tmp_path / "other-proc"
    (other / str(outside).lstrip("/")).mkdir(parents=True)
    (other / str(outside).lstrip("/") / "secret").write_bytes(DECOY)
    os.symlink(outside / "secret", other / "abs")
    os.symlink(escaping(other, outside / "secret"), other / "rel")
    paths = Paths.from_root(root, procfs=other)
    assert read(paths.fs, paths.procfs / "abs") == DECOY
    assert read(paths.fs, paths.procfs / "rel") == DECOY


def test_the_real_root_still_refuses_fifos(tmp_path, mode):
    """With ``--host-root /`` the confinement changes nothing, but a FIFO is still never read."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_bytes(DECOY)
    os.symlink(tmp_path / "file", tmp_path / "link")
    paths = Paths.from_root("/")
    assert paths.root == Path("/")
    assert read(paths.fs, tmp_path / "link") == DECOY
    with pytest.raises(confined.NotRegularFile):
        read(paths.fs, tmp_path / "fifo")


def test_the_observer_and_the_audit_hook_see_every_use(tree, mode):
    root, _ = tree
    paths = Paths.from_root(root)
    seen: list[tuple[str, str]] = []
    with paths.fs.observe(lambda path, kind: seen.append((path, kind))):
        read(paths.fs, paths.procfs / "sys/vm/swappiness")
        paths.fs.listdir(paths.etc)
        paths.fs.is_dir(paths.procfs)
    assert seen == [
        (str(paths.procfs / "sys/vm/swappiness"), "opened"),
        (str(paths.etc), "listed"),
        (str(paths.procfs), "stated"),
    ]
    audited: list[str] = []
    hook_on = [True]

    def hook(event: str, args: tuple) -> None:
        if hook_on[0] and event == "open" and isinstance(args[0], str):
            audited.append(args[0])

    sys.addaudithook(hook)
    try:
        read(paths.fs, paths.procfs / "sys/vm/swappiness")
    finally:
        hook_on[0] = False  # audit hooks cannot be removed
    assert str(paths.procfs / "sys/vm/swappiness") in audited


def test_an_observer_sees_only_its_own_trees_reads(tree, mode, tmp_path):
    """A capture records what its own Paths reads: another tree read at the same time is not its business."""
    root, _ = tree
    (tmp_path / "other/etc").mkdir(parents=True)
    (tmp_path / "other/etc/name").write_bytes(b"other\n")
    paths, other = Paths.from_root(root), Paths.from_root(tmp_path / "other")
    seen: list[tuple[str, str]] = []
    with paths.fs.observe(lambda path, kind: seen.append((path, kind))):
        assert read(other.fs, other.etc / "name") == b"other\n"
        other.fs.listdir(other.etc)
        read(paths.fs, paths.procfs / "sys/vm/swappiness")
    read(paths.fs, paths.procfs / "sys/vm/swappiness")  # after the block: not seen
    assert seen == [(str(paths.procfs / "sys/vm/swappiness"), "opened")]


def open_descriptors() -> set[str]:
    """What this process's descriptors point at (``/proc/self/fd``), as the kernel names them."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return found


def test_a_hostfs_releases_its_descriptors_when_its_paths_is_collected(tree, mode, tmp_path):
    root, _ = tree
    other = tmp_path / "other-proc"
    (other / "sys/vm").mkdir(parents=True)
    (other / "sys/vm/swappiness").write_bytes(b"1\n")
    paths = Paths.from_root(root, procfs=other)
    assert read(paths.fs, paths.procfs / "sys/vm/swappiness") == b"1\n"
    assert read(paths.fs, paths.etc / "../proc/sys/vm/swappiness") == b"60\n"
    assert read(paths.fs, tmp_path / "other-proc/sys/vm/swappiness") == b"1\n"
    held = open_descriptors()
    assert {os.path.realpath(root), os.path.realpath(other)} <= held
    del paths
    gc.collect()
    released = open_descriptors()
    assert os.path.realpath(root) not in released and os.path.realpath(other) not in released


def test_a_closed_hostfs_refuses_to_read(tree, mode):
    root, _ = tree
    paths = Paths.from_root(root)
    assert read(paths.fs, paths.procfs / "sys/vm/swappiness") == b"60\n"
    paths.fs.close()
    assert os.path.realpath(root) not in open_descriptors()
    with pytest.raises(ValueError, match="closed"):
        read(paths.fs, paths.procfs / "sys/vm/swappiness")
    with pytest.raises(confined.ClosedHostFs):
        paths.fs.listdir(paths.etc)
    with pytest.raises(confined.ClosedHostFs):
        paths.fs.exists(paths.etc)  # never "absent"


@pytest.mark.parametrize("absolute", [True, False])
def test_two_trees_read_at_once_never_read_each_others_files(tmp_path, mode, absolute):
    """A link in one tree resolves in that tree's own root, even with the other tree's roots live beside it, and
    through either Paths a path in the other tree is confined to ``/``, never to the other tree's root."""
    first, second = tmp_path / "first", tmp_path / "second"
    for root, content in ((first, b"first\n"), (second, b"second\n")):
        (root / "etc").mkdir(parents=True)
        (root / "etc/name").write_bytes(content)
        (root / "sys/class").mkdir(parents=True)
        # An absolute link restarts at its own root; a relative one climbing out stops there.
        target = "/etc/name" if absolute else "../" * (len(root.parts) + 4) + "etc/name"
        os.symlink(target, root / "sys/class/name")
    one, two = Paths.from_root(first), Paths.from_root(second)
    for _ in range(2):  # interleaved, with both trees' descriptors open
        assert read(one.fs, one.sysfs / "class/name") == b"first\n"
        assert read(two.fs, two.sysfs / "class/name") == b"second\n"
        assert {os.path.realpath(first), os.path.realpath(second)} <= open_descriptors()
        assert one.fs.resolve(one.sysfs / "class/name") == f"{first}/etc/name"
        assert two.fs.resolve(two.sysfs / "class/name") == f"{second}/etc/name"
    # The other tree's path through this one's HostFs is under no root of its: confined to "/", its link
    # resolving on this machine's "/" (where /etc/name is not either tree's file).
    assert one.fs.resolve(two.sysfs / "class/name") == "/etc/name"


def test_an_override_outside_the_root_is_its_own_root(tree, mode, tmp_path):
    """``--path.sysfs`` outside the root: an absolute link in it restarts at the override, not at the host root, and
    ``..`` stops at the override."""
    root, _ = tree
    sysfs = tmp_path / "elsewhere/sys"
    (sysfs / "etc").mkdir(parents=True)
    (sysfs / "etc/name").write_bytes(b"the override\n")
    (root / "etc/name").write_bytes(b"the host root\n")
    os.symlink("/etc/name", sysfs / "absolute")
    os.symlink("../../../../../../../../../etc/name", sysfs / "relative")
    paths = Paths.from_root(root, sysfs=sysfs)
    assert read(paths.fs, paths.sysfs / "absolute") == b"the override\n"
    assert read(paths.fs, paths.sysfs / "relative") == b"the override\n"
    assert read(paths.fs, paths.etc / "name") == b"the host root\n"
    assert {os.path.realpath(sysfs), os.path.realpath(root)} <= open_descriptors()  # a descriptor each
    assert paths.fs.resolve(paths.sysfs / "absolute") == f"{sysfs}/etc/name"
    # The override's files are not the host root's: the same path under the root does not reach it.
    assert not paths.fs.exists(paths.root / "absolute")


def test_a_tree_rebuilt_in_place_is_read_anew(tree, tmp_path):
    root, _ = tree
    first = Paths.from_root(root)
    assert read(first.fs, first.procfs / "sys/vm/swappiness") == b"60\n"
    root.rename(tmp_path / "old-host")
    (root / "proc/sys/vm").mkdir(parents=True)
    (root / "proc/sys/vm/swappiness").write_bytes(b"10\n")
    second = Paths.from_root(root)  # while ``first`` still holds the old directory
    assert read(second.fs, second.procfs / "sys/vm/swappiness") == b"10\n"
    assert first.root == second.root


def test_permission_denied_is_not_absence(tmp_path, monkeypatch):
    """exists()/is_dir()/is_file() say "absent" only for what pathlib calls absent: a directory that cannot be
    entered raises, so a source reports "Permission denied: <path>" instead of "there is nothing here"."""
    import errno as errno_module

    from numawatch.paths import Paths

    (tmp_path / "etc").mkdir()
    paths = Paths.from_root(tmp_path)
    assert paths.fs.is_dir(paths.etc) and not paths.fs.exists(paths.etc / "missing")

    def denied(path, follow_symlinks=True, absent=frozenset()):
        raise PermissionError(errno_module.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(paths.fs, "_stat", denied)  # what stat_path and exists() resolve with
    with pytest.raises(PermissionError):
        paths.fs.is_dir(paths.etc)


def test_optional_reads_say_absent_without_raising_and_raise_for_everything_else(tree, mode):
    """The optional reads (read_small, read_optional_text, list_dir, stat_optional) answer None or [] for a path
    that does not exist (ENOENT) or runs through a file (ENOTDIR), and raise what any other failure is (a link loop:
    ELOOP), as the raising reads do; what exists reads as it does through them."""
    root, _ = tree
    fs = confined.HostFs([root])
    (root / "etc/loop").symlink_to("loop")
    (root / "etc/d").mkdir()
    (root / "etc/d/x").write_bytes(b"x\n")
    for absent in (root / "etc/missing", root / "etc/missing/deeper", root / "proc/sys/vm/swappiness/below"):
        assert fs.read_small(absent, 64) is None
        assert fs.read_optional_text(absent) is None
        assert fs.list_dir(absent) == []
        assert fs.stat_optional(absent) is None
        with pytest.raises((FileNotFoundError, NotADirectoryError)):
            fs.stat_path(absent)
    for call in (partial(fs.read_small, root / "etc/loop", 64), partial(fs.read_optional_text, root / "etc/loop"),
                 partial(fs.list_dir, root / "etc/loop"), partial(fs.stat_optional, root / "etc/loop")):  # fmt: skip
        with pytest.raises(OSError) as raised:
            call()
        assert raised.value.errno == errno.ELOOP
        assert raised.value.filename == str(root / "etc/loop")
    assert fs.read_small(root / "proc/sys/vm/swappiness", 64) == b"60\n"
    assert fs.read_optional_text(root / "proc/sys/vm/swappiness") == "60\n"
    assert fs.list_dir(root / "etc/d") == ["x"]
    found = fs.stat_optional(root / "etc/d/x")
    assert found is not None and found.st_size == 2 and found == fs.stat_path(root / "etc/d/x")
