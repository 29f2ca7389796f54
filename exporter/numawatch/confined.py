"""The confined opener: every host file numawatch opens, lists, stats or follows goes through here.

The host tree (``--host-root``: ``/``, the DaemonSet's ``/host``, an extracted capture bundle) is input numawatch
does not control. A symlink in it, or a ``..`` in a path taken from a file's content, must never make numawatch
read outside it, and nothing in it may make a read block. Every host path is therefore resolved *under a root*,
with the semantics of openat2(2)'s ``RESOLVE_IN_ROOT``: each component is looked up inside the root, an absolute
symlink restarts at the root (not at this machine's ``/``), and ``..`` at the root stays at the root, as in a chroot.

- Roots. A host tree is one ``HostFs`` value (``Paths`` holds its own: ``paths.fs``) owning its roots: the host
  root and each ``--path.*`` override outside it. A path names its root by spelling: the longest root whose
  spelling (as given, absolute, or with its symlinks resolved) is a prefix of the path. A path under no root is
  confined to ``/``, where the confinement does nothing but every other rule below still holds. Each root keeps one
  ``O_PATH`` descriptor, opened on first use and closed with its HostFs. Two trees read at once never share a root.
- Resolution. Where the kernel has openat2 (Linux 5.6+, called through ctypes: one system call per path), with
  ``RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS``; elsewhere, or where a seccomp filter refuses it, a walk of one
  component at a time from the root's descriptor with ``O_NOFOLLOW`` that follows each symlink itself by the same
  rules, at most ``MAX_SYMLINKS`` of them (ELOOP after that, as the kernel).
- Files. Opened ``O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY`` and refused unless the descriptor is a regular file
  (procfs, sysfs and cgroupfs files are), so a FIFO, socket or device planted in the tree is never read and never
  blocks: ``NotRegularFile``, an ``OSError`` naming the path and what it is.
- Errors are the ``OSError`` subclasses ``os.open`` raises (``FileNotFoundError``, ``NotADirectoryError``, ELOOP...),
  with ``filename`` the path as the caller spelled it.
- Auditing. ctypes calls raise no audit event, so opening a file raises the ``open`` event itself (as ``os.open``
  does) for the process's audit hooks, and a capture's recorder is told every path its HostFs opens, lists or
  stats (``HostFs.observe``).
- Bounded reads (``read_bytes``, ``read_small``, ``read_attribute_text``...): what the sources read files with,
  one system call where possible, a file past its limit ``MalformedFile``.

Callers pass the path strings they always built (``<root>/sys/...``) to their Paths' ``fs``: there is no
module-level registry of roots, so two host trees read at once (a test's, a bundle's) never meet.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from numawatch.errors import MalformedFile

__all__ = [
    "DEFAULT_READ_LIMIT",
    "MAX_SYMLINKS",
    "ClosedHostFs",
    "HostFs",
    "NotRegularFile",
    "openat2_available",
    "use_openat2",
]

MAX_SYMLINKS = 40  # the kernel's MAXSYMLINKS: a link loop ends with ELOOP, never a hang

FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_CLOEXEC
_PATH_NOFOLLOW = _PATH_FLAGS | os.O_NOFOLLOW
_PATH_DIR = _PATH_FLAGS | os.O_DIRECTORY
_STEP_FLAGS = _PATH_FLAGS | os.O_DIRECTORY | os.O_NOFOLLOW  # one directory of a walk, never through a link

# include/uapi/linux/openat2.h
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
# openat2 is 437 in the unified syscall table every 64-bit architecture numawatch may run on shares.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}
_RETRIES = 8  # EAGAIN: the kernel saw a rename or mount race during ".." resolution and asks to try again

# A FIFO held open by someone else, a device: named in the error so the operator knows what was planted.
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symlink",
}


class NotRegularFile(OSError):
    """A host path that should be a file is something else (a FIFO, socket, device or directory)."""

    def __init__(self, path: str, mode: int) -> None:
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", path)


class ClosedHostFs(ValueError):
    """A read through a ``HostFs`` after ``close()``."""


# --------------------------------------------------------------------------------------------------- openat2
class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_syscall() -> tuple[Any, Any] | None:
    """libc's ``syscall`` and openat2's number as ctypes objects, or None where there is no openat2 to call."""
    number = _SYS_OPENAT2.get(platform.machine())
    if number is None or not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    # No argtypes: arguments are passed as ready-made ctypes objects (and bytes), which ctypes then does not convert
    # one by one; that keeps a call as cheap as os.open.
    return function, ctypes.c_long(number)


_SYSCALL = _load_syscall()
_CALL: Any = _SYSCALL[0] if _SYSCALL is not None else None
_NR: Any = _SYSCALL[1] if _SYSCALL is not None else None
_HOWS: dict[int, Any] = {}
_HOW_SIZE = ctypes.c_long(ctypes.sizeof(_OpenHow))
_keep_hows: list[_OpenHow] = []  # the structures the byref()s in _HOWS point at
_audit = sys.audit


def _how(flags: int) -> Any:
    how = _HOWS.get(flags)
    if how is None:
        structure = _OpenHow(flags, 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
        _keep_hows.append(structure)
        how = _HOWS[flags] = ctypes.byref(structure)
    return how


def _probe_openat2() -> bool:
    """Whether openat2 with RESOLVE_IN_ROOT works here: absent before Linux 5.6, refused by some seccomp profiles."""
    if _CALL is None:
        return False
    fd = _CALL(_NR, ctypes.c_long(-100), b"/", _how(_PATH_DIR), _HOW_SIZE)  # AT_FDCWD
    if fd < 0:
        return False
    os.close(fd)
    return True


_OPENAT2 = _probe_openat2() and os.environ.get("NUMAWATCH_CONFINED_FALLBACK", "") != "1"
_FILE_HOW = _how(FILE_FLAGS)


def openat2_available() -> bool:
    """Whether paths are resolved by openat2 (else by the walk)."""
    return _OPENAT2


@contextlib.contextmanager
def use_openat2(enabled: bool) -> Iterator[None]:
    """Resolve with openat2 (where it exists) or with the walk inside the block; for tests of both."""
    global _OPENAT2
    previous = _OPENAT2
    _OPENAT2 = enabled and _probe_openat2()
    try:
        yield
    finally:
        _OPENAT2 = previous


# --------------------------------------------------------------------------------------------------- roots
class _Root:
    """One directory paths are confined to, with its ``O_PATH`` descriptor (opened on first use)."""

    __slots__ = ("_c_fd", "_closed", "_fd", "_lock", "path", "spellings")

    def __init__(self, path: str, spellings: tuple[str, ...]) -> None:
        self.path = path
        self.spellings = spellings  # each ends with "/"
        self._fd = -1
        self._c_fd: Any = None
        self._closed = False
        self._lock = threading.Lock()

    def fd(self, logical: str) -> int:
        fd = self._fd
        if fd >= 0:
            return fd
        with self._lock:
            if self._closed:
                raise ClosedHostFs(f"{logical}: read through a closed host file system")
            if self._fd < 0:
                try:
                    self._fd = os.open(self.path, _PATH_DIR)
                except OSError as error:
                    raise OSError(error.errno, error.strerror, logical) from None
                self._c_fd = ctypes.c_long(self._fd)
            return self._fd

    def c_fd(self, logical: str) -> Any:
        if self._fd < 0:
            self.fd(logical)
        return self._c_fd

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self._fd = -1
            self._c_fd = None


def _spellings(base: str) -> tuple[tuple[str, ...], str]:
    """The base's spellings (as given, made absolute without folding anything; fully resolved) and its real path."""
    given = base if base.startswith("/") else os.path.join(os.getcwd(), base)
    real = os.path.realpath(base)
    names = {given, os.path.abspath(base), real}
    return tuple(name.rstrip("/") + "/" for name in names), real


def _ordered(roots: Iterable[_Root], slash: _Root) -> tuple[tuple[str, _Root], ...]:
    """(spelling, root) for every spelling of ``roots``, longest first, then ``/``: the first prefix is the root."""
    pairs = [(spelling, root) for root in roots for spelling in root.spellings if spelling != "/"]
    pairs.sort(key=lambda pair: -len(pair[0]))
    return (*pairs, ("/", slash))


def _close_roots(roots: list[_Root]) -> None:
    for root in roots:
        root.close()


# --------------------------------------------------------------------------------------------------- resolving
def _fail(code: int | None, logical: str) -> OSError:
    code = code or errno.EIO
    return OSError(code, os.strerror(code), logical)


def _openat2(root: _Root, rel: str, flags: int, logical: str, absent: frozenset[int] = frozenset()) -> int:
    """openat2 of ``rel`` under ``root``; -1 when it fails with an error in ``absent`` (no exception made)."""
    if "\0" in rel:
        raise OSError(errno.EINVAL, "a NUL byte in the path", logical)
    encoded = rel.encode("utf-8", "surrogateescape")
    how = _HOWS.get(flags) or _how(flags)
    c_fd = root.c_fd(logical)
    for _ in range(_RETRIES):
        fd = _CALL(_NR, c_fd, encoded, how, _HOW_SIZE)
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code in absent:
            return -1
        if code not in (errno.EAGAIN, errno.EINTR):
            raise _fail(code, logical)
    raise _fail(errno.EAGAIN, logical)


def _walk(
    root: _Root, rel: str, flags: int, logical: str, follow_last: bool = True, missing_ok: bool = False
) -> tuple[int, list[str]]:
    """Open ``rel`` under ``root`` one component at a time, following links by RESOLVE_IN_ROOT's rules.

    Returns the descriptor (opened with ``flags``) and the resolved components below the root. Every directory is
    opened ``O_PATH | O_NOFOLLOW`` relative to the one before, so nothing is ever looked up outside the root.
    ``missing_ok``: where a component does not exist, the rest is taken as it is written (``..`` folded, never
    above the root) and the descriptor is -1."""
    if "\0" in rel:
        raise OSError(errno.EINVAL, "a NUL byte in the path", logical)
    root_fd = root.fd(logical)
    stack: list[int] = []  # descriptors of the directories in ``names``
    names: list[str] = []
    pending = rel.split("/")[::-1]  # a stack: the next name is last
    links = 0
    try:
        while True:
            while pending and pending[-1] in ("", "."):
                pending.pop()
            if not pending:
                # Everything was a directory step ("a/..", "."): the object is the current directory.
                return os.open(".", flags, dir_fd=stack[-1] if stack else root_fd), names
            name = pending.pop()
            if name == "..":
                if stack:
                    os.close(stack.pop())
                    names.pop()
                continue
            current = stack[-1] if stack else root_fd
            last = all(part in ("", ".") for part in pending)
            target: str | None = None
            if not last:
                try:
                    stack.append(os.open(name, _STEP_FLAGS, dir_fd=current))
                    names.append(name)
                    continue
                except FileNotFoundError:
                    if not missing_ok:
                        raise _fail(errno.ENOENT, logical) from None
                    return -1, _folded([*names, name, *pending[::-1]])
                except OSError as error:
                    if error.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise _fail(error.errno, logical) from None
                    target = _link_target(name, current, logical, error.errno)
            elif not follow_last:
                return os.open(name, flags | os.O_NOFOLLOW, dir_fd=current), [*names, name]
            else:
                try:
                    fd = os.open(name, flags | os.O_NOFOLLOW, dir_fd=current)
                except FileNotFoundError:
                    if not missing_ok:
                        raise _fail(errno.ENOENT, logical) from None
                    return -1, _folded([*names, name, *pending[::-1]])
                except OSError as error:
                    if error.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise _fail(error.errno, logical) from None
                    target = _link_target(name, current, logical, error.errno)
                else:
                    if not flags & os.O_PATH or not stat.S_ISLNK(os.fstat(fd).st_mode):
                        return fd, [*names, name]
                    os.close(fd)  # O_PATH | O_NOFOLLOW opened the link itself: follow it
                    target = _link_target(name, current, logical, errno.ELOOP)
            links += 1
            if links > MAX_SYMLINKS:
                raise _fail(errno.ELOOP, logical)
            if target.startswith("/"):
                while stack:
                    os.close(stack.pop())
                names.clear()
            pending.extend(target.split("/")[::-1])
    finally:
        for fd in stack:
            os.close(fd)


def _folded(parts: Iterable[str]) -> list[str]:
    """``parts`` with ``.`` and empty names dropped and ``..`` applied, never above the top (a chroot's rule)."""
    out: list[str] = []
    for name in parts:
        if name == "..":
            if out:
                out.pop()
        elif name not in ("", "."):
            out.append(name)
    return out


def _link_target(name: str, directory: int, logical: str, code: int) -> str:
    """The target of the link ``name`` in ``directory``; the original error when it is not a link."""
    try:
        return os.readlink(name, dir_fd=directory)
    except OSError as error:
        raise _fail(code if error.errno == errno.EINVAL else error.errno, logical) from None


def _mode_or_close(fd: int) -> int:
    """The mode of what ``fd`` is open on; ``fd`` closed when it cannot be had."""
    try:
        return os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise


def _open(root: _Root, rel: str, flags: int, logical: str, absent: frozenset[int] = frozenset()) -> int:
    """A descriptor of ``rel`` under ``root``; -1 when the error is one of ``absent``."""
    if _OPENAT2:
        return _openat2(root, rel, flags, logical, absent)
    try:
        return _walk(root, rel, flags, logical)[0]
    except OSError as error:
        if error.errno in absent:
            return -1
        raise


# --------------------------------------------------------------------------------------------------- the API
def _text(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return text if isinstance(text, str) else os.fsdecode(text)


# What "does not exist" means for exists()/is_dir()/is_file(), as pathlib decides it: anything else (permission
# denied above all) propagates, so a source says "Permission denied: <path>" instead of "there is nothing here".
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})
# What "does not exist" means for the optional reads (read_small, read_optional_text, list_dir, stat_optional): the
# errors of FileNotFoundError and NotADirectoryError. An optional file is looked for at every evaluation (a node
# without /etc/sysconfig, a runtime not installed), so its absence is told by a return value, not an exception.
_MISSING = frozenset({errno.ENOENT, errno.ENOTDIR})

# No file numawatch reads legitimately comes close to this; /proc/interrupts on a 384-CPU host with 2,000 IRQs is
# about 8 MB. A bigger file is corrupt or hostile, and reading it whole would blow the memory budget.
DEFAULT_READ_LIMIT = 16 * 1024 * 1024

# Bytes asked of the kernel per read(2). Python allocates the whole size asked for before the kernel fills it, so
# asking for the read limit (megabytes) would map and fault in a fresh buffer for every small file; procfs and sysfs
# files fit in one such read, and a larger file is gathered chunk by chunk.
_CHUNK = 1 << 16


def _read_whole(fd: int, path: str | os.PathLike[str], limit: int) -> bytes:
    """Everything ``fd`` reads up to EOF (procfs returns short reads), closed after; a file past ``limit`` bytes is
    ``MalformedFile`` (procfs reports size 0, so the reads are counted)."""
    parts: list[bytes] = []
    total = 0
    try:
        while chunk := os.read(fd, min(limit + 1 - total, _CHUNK)):
            total += len(chunk)
            if total > limit:
                raise MalformedFile(_text(path), f"larger than the {limit}-byte limit")
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts)  # one part is handed back as it is, not copied


class HostFs:
    """One host tree as numawatch reads it: its roots, and every open, listing and stat resolved under them.

    ``bases`` are the directories paths are confined to (``Paths.confinement_bases()``: the host root and each
    ``--path.*`` override outside it, which is then its own root). A path names its root by spelling: the longest
    base whose spelling (as given, absolute, or with its symlinks resolved) is a prefix of the path; a path under
    none of them is confined to ``/``. Each root's ``O_PATH`` descriptor is opened on first use and closed by
    ``close()``, or when the HostFs is collected (``Paths`` holds its own: ``paths.fs``)."""

    def __init__(self, bases: Iterable[str | os.PathLike[str]] = ()) -> None:
        self._slash = _Root("/", ("/",))
        roots: dict[str, _Root] = {}  # real path -> root
        for base in dict.fromkeys(os.fspath(item) for item in bases):
            spellings, real = _spellings(base)
            if real == "/":
                continue  # "/" is always a root
            root = roots.get(real)
            if root is None:
                roots[real] = _Root(real, spellings)
            else:
                root.spellings = tuple(dict.fromkeys((*root.spellings, *spellings)))
        self._roots = roots
        self._order = _ordered(roots.values(), self._slash)  # (spelling, root), longest spelling first
        self._observer: Callable[[str, str], None] | None = None
        # Closes the descriptors once nothing can use them any more: a finalizer of the HostFs itself, never of its
        # holder, so a call still running on it never meets a descriptor closed (and its number reused) under it.
        self._close = weakref.finalize(self, _close_roots, [self._slash, *roots.values()])

    def close(self) -> None:
        """Close the roots' descriptors (with no read running on them); a later read raises ``ClosedHostFs``."""
        self._close()

    def _locate(self, path: str | os.PathLike[str]) -> tuple[_Root, str, str]:
        """(root, path relative to it, the path as an absolute string) for a host path as callers spell it."""
        text = path if path.__class__ is str else _text(path)
        if not text.startswith("/"):
            text = os.path.join(os.getcwd(), text)  # not abspath: folding ".." here could leave the root
        for spelling, root in self._order:
            if text.startswith(spelling):
                return root, text[len(spelling) :] or ".", text
            if len(text) + 1 == len(spelling) and spelling.startswith(text):
                return root, ".", text  # the root itself
        return self._slash, text.lstrip("/") or ".", text  # unreachable: "/" is every path's prefix

    @contextlib.contextmanager
    def observe(self, observer: Callable[[str, str], None]) -> Iterator[None]:
        """Call ``observer(path, kind)`` for every host path used through this HostFs inside the block, before it is
        used: ``kind`` is ``opened`` (content read), ``listed`` or ``stated`` (stat, existence, a link followed or
        read). The path is the caller's spelling, absolute. For ``numawatch capture``, whose audit hook cannot see
        ctypes calls."""
        previous = self._observer
        self._observer = observer
        try:
            yield
        finally:
            self._observer = previous

    def open_file(self, path: str | os.PathLike[str]) -> int:
        """A descriptor of the regular file at ``path`` (confined, non-blocking); the caller closes it."""
        return self._open_regular(path)

    def _open_regular(self, path: str | os.PathLike[str], absent: frozenset[int] = frozenset()) -> int:
        """``open_file``, or -1 when opening fails with an error in ``absent``."""
        # The hot path of every source (about 2,000 calls an evaluation on a large node): _locate and _openat2
        # inlined.
        text = path if path.__class__ is str else _text(path)
        if text[:1] != "/":
            text = os.path.join(os.getcwd(), text)  # not abspath: folding ".." here could leave the root
        root, rel = self._slash, text[1:] or "."
        for spelling, candidate in self._order:
            if text.startswith(spelling):  # a file is never the root itself, so the spelling's "/" follows
                root, rel = candidate, text[len(spelling) :] or "."
                break
        observer = self._observer
        if observer is not None:
            observer(text, "opened")
        _audit("open", text, None, FILE_FLAGS)
        c_fd = root._c_fd
        if _OPENAT2 and c_fd is not None and "\0" not in rel:
            fd = _CALL(_NR, c_fd, rel.encode("utf-8", "surrogateescape"), _FILE_HOW, _HOW_SIZE)
            if fd < 0:
                code = ctypes.get_errno()
                if code in absent:
                    return -1
                if code != errno.EAGAIN and code != errno.EINTR:
                    raise OSError(code, os.strerror(code), text)
                fd = _openat2(root, rel, FILE_FLAGS, text, absent)  # a race the kernel asks to retry
        else:
            fd = _open(root, rel, FILE_FLAGS, text, absent)
        if fd < 0:
            return fd
        try:  # _mode_or_close inlined: this is the hot path
            mode = os.fstat(fd).st_mode
        except OSError:
            os.close(fd)
            raise
        if mode & 0o170000 != stat.S_IFREG:
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise _fail(errno.EISDIR, text)  # what open() says of a directory
            raise NotRegularFile(text, mode)
        return fd

    def read_file(self, path: str | os.PathLike[str], size: int) -> bytes:
        """At most ``size`` bytes of the file at ``path`` in one read (procfs and sysfs files fill it in one)."""
        fd = self.open_file(path)
        try:
            return os.read(fd, size)
        finally:
            os.close(fd)

    def _open_directory(self, path: str | os.PathLike[str], absent: frozenset[int] = frozenset()) -> int:
        """A descriptor of the directory at ``path`` (confined), told to the observer as listed; -1 when opening
        fails with an error in ``absent``."""
        root, rel, logical = self._locate(path)
        observer = self._observer
        if observer is not None:
            observer(logical, "listed")
        return _open(root, rel, _DIR_FLAGS, logical, absent)

    def listdir(self, path: str | os.PathLike[str]) -> list[str]:
        """The names in the directory at ``path`` (confined)."""
        fd = self._open_directory(path)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def scandir(self, path: str | os.PathLike[str]) -> Iterator[Iterator[os.DirEntry[str]]]:
        """``os.scandir`` of the directory at ``path`` (confined). Use ``entry.is_dir(follow_symlinks=False)``,
        ``entry.is_symlink()`` and ``entry.stat(follow_symlinks=False)``: following an entry's link goes through
        ``stat_path``/``is_dir`` of the joined path, never the entry's own ``stat()``."""
        fd = self._open_directory(path)
        try:
            with os.scandir(fd) as entries:  # it works on a duplicate of fd
                yield entries
        finally:
            os.close(fd)

    def stat_path(self, path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> os.stat_result:
        """``os.stat`` (or ``os.lstat``) of ``path``, resolved under its root."""
        found = self._stat(path, follow_symlinks)
        assert found is not None  # nothing is absent without an ``absent``
        return found

    def stat_optional(self, path: str | os.PathLike[str]) -> os.stat_result | None:
        """``stat_path``, or None when ``path`` does not exist (what FileNotFoundError and NotADirectoryError say)."""
        return self._stat(path, True, _MISSING)

    def _stat(
        self, path: str | os.PathLike[str], follow_symlinks: bool, absent: frozenset[int] = frozenset()
    ) -> os.stat_result | None:
        """``stat_path``, or None when resolving fails with an error in ``absent``."""
        root, rel, logical = self._locate(path)
        observer = self._observer
        if observer is not None:
            observer(logical, "stated")
        if follow_symlinks:
            fd = _open(root, rel, _PATH_FLAGS, logical, absent)
        elif _OPENAT2:
            fd = _openat2(root, rel, _PATH_NOFOLLOW, logical, absent)
        else:
            try:
                fd = _walk(root, rel, _PATH_FLAGS, logical, follow_last=False)[0]
            except OSError as error:
                if error.errno not in absent:
                    raise
                fd = -1
        if fd < 0:
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def lstat(self, path: str | os.PathLike[str]) -> os.stat_result:
        return self.stat_path(path, follow_symlinks=False)

    def open_socket(self, path: str | os.PathLike[str]) -> int:
        """An ``O_PATH`` descriptor of the Unix socket at ``path``, resolved under its root; the caller closes it.
        A connection made through it (``Paths.own_fd``) reaches the socket found inside the root, never one a
        symlink swapped in afterwards. Anything but a socket is ``NotRegularFile``-like: EINVAL naming what it is."""
        root, rel, logical = self._locate(path)
        observer = self._observer
        if observer is not None:
            observer(logical, "stated")
        fd = _open(root, rel, _PATH_FLAGS, logical)
        mode = _mode_or_close(fd)
        if not stat.S_ISSOCK(mode):
            os.close(fd)
            kind = _KINDS.get(stat.S_IFMT(mode), "a regular file" if stat.S_ISREG(mode) else "not a socket")
            raise OSError(errno.EINVAL, f"not a socket ({kind})", logical)
        return fd

    def _kind(self, path: str | os.PathLike[str]) -> int | None:
        try:
            found = self._stat(path, True, _ABSENT)
            return None if found is None else stat.S_IFMT(found.st_mode)
        except ClosedHostFs:
            raise
        except ValueError:  # a NUL byte in the path (the walk's os.open)
            return None
        except OSError as error:
            if error.errno in _ABSENT:
                return None
            raise

    def exists(self, path: str | os.PathLike[str]) -> bool:
        return self._kind(path) is not None

    def is_dir(self, path: str | os.PathLike[str]) -> bool:
        return self._kind(path) == stat.S_IFDIR

    def is_file(self, path: str | os.PathLike[str]) -> bool:
        return self._kind(path) == stat.S_IFREG

    def readlink(self, path: str | os.PathLike[str]) -> str:
        """The target of the symlink at ``path`` (its directory resolved under the root); EINVAL when not a link."""
        root, rel, logical = self._locate(path)
        observer = self._observer
        if observer is not None:
            observer(logical, "stated")
        parent, _, name = rel.rpartition("/")
        if name in ("", ".", ".."):
            raise _fail(errno.EINVAL, logical)
        fd = _open(root, parent or ".", _PATH_DIR, logical)
        try:
            return os.readlink(name, dir_fd=fd)
        except OSError as error:
            raise _fail(error.errno, logical) from None
        finally:
            os.close(fd)

    def resolve(self, path: str | os.PathLike[str]) -> str:
        """``path`` with every symlink resolved as if its root were ``/``, spelled under the root as the caller
        spells it (``<root>/sys/bus/pci/devices/X`` -> ``<root>/sys/devices/pci0000:00/.../X``). Like
        ``os.path.realpath``, a part that does not exist is kept as written; a link loop raises ELOOP."""
        root, rel, logical = self._locate(path)
        observer = self._observer
        if observer is not None:
            observer(logical, "stated")
        fd, names = _walk(root, rel, _PATH_FLAGS, logical, missing_ok=True)
        if fd >= 0:
            os.close(fd)
        # _locate cut the root's spelling off the front: what is left of the path is that spelling.
        base = logical if rel == "." else logical[: len(logical) - len(rel)]
        base = base.rstrip("/")
        return "/".join([base, *names]) if names else (base or "/")

    # ----------------------------------------------------------------------------------------------- bounded reads
    def read_bytes(self, path: str | os.PathLike[str], limit: int = DEFAULT_READ_LIMIT) -> bytes:
        """Read a whole file, refusing files larger than ``limit`` (procfs reports size 0, so we read and count)."""
        return _read_whole(self.open_file(path), path, limit)

    def read_small(self, path: str | os.PathLike[str], size: int, *, vanishing: bool = False) -> bytes | None:
        """One open and one read of at most ``size`` bytes: all of a small procfs or sysfs attribute, which the
        kernel fills in one read. None when the file does not exist; with ``vanishing``, also when the read itself
        fails (the object behind it, an IRQ or a process, was torn down between open and read: EIO, EINVAL, ESRCH).

        For the files read by the hundred at every reading (IRQ affinities, cpufreq policies): no loop, no limit
        check beyond ``size``."""
        fd = self._open_regular(path, _MISSING)
        if fd < 0:
            return None
        try:
            return os.read(fd, size)
        except OSError:
            if vanishing:
                return None
            raise
        finally:
            os.close(fd)

    def read_small_text(self, path: str | os.PathLike[str], size: int) -> str | None:
        """``read_small`` as text (invalid UTF-8 replaced): None when the file does not exist."""
        data = self.read_small(path, size)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_text(self, path: str | os.PathLike[str], limit: int = DEFAULT_READ_LIMIT) -> str:
        return self.read_bytes(path, limit).decode("utf-8", errors="replace")

    def read_optional_text(self, path: str | os.PathLike[str], limit: int = DEFAULT_READ_LIMIT) -> str | None:
        """The file's text, or None when it does not exist (a vanished cgroup, an absent sysfs attribute)."""
        fd = self._open_regular(path, _MISSING)
        if fd < 0:
            return None
        return _read_whole(fd, path, limit).decode("utf-8", errors="replace")

    def read_attribute_text(self, path: str | os.PathLike[str], limit: int) -> str | None:
        """``read_optional_text`` for a sysfs or sysctl attribute, in one read: the kernel fills such a file in one
        read (and a regular file, in a captured or generated tree, returns all it has up to the size asked), so the
        read that would only find the end of the file is left out. Refuses a file larger than ``limit`` as
        ``read_optional_text`` does; None when it does not exist."""
        data = self.read_small(path, limit + 1)
        if data is None:
            return None
        if len(data) > limit:
            raise MalformedFile(_text(path), f"larger than the {limit}-byte limit")
        return data.decode("utf-8", errors="replace")

    def list_dir(self, path: str | os.PathLike[str]) -> list[str]:
        """Directory entries, or [] when the directory vanished or never existed."""
        fd = self._open_directory(path, _MISSING)
        if fd < 0:
            return []
        try:
            return os.listdir(fd)
        except (FileNotFoundError, NotADirectoryError):  # removed between the open and the listing
            return []
        finally:
            os.close(fd)
