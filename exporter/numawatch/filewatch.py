"""Noticing that a configuration file changed, the way a Kubernetes ConfigMap or Secret update changes it.

The kubelet projects a ConfigMap volume with its AtomicWriter: the files live in a timestamped directory
(``..2026_12_01_22_00_00.123456789``), ``..data`` is a symlink to it, and each visible file is a symlink through
``..data`` (``intent.yaml -> ..data/intent.yaml``). An update writes a new timestamped directory, points a new
``..data_tmp`` symlink at it, renames that over ``..data`` (atomic) and removes the old directory. Nothing is sent to
the pod: no SIGHUP, and no change to the file numawatch was given, which is still the same symlink.

So ``FileWatch`` polls: every ``interval`` seconds it resolves each path (``os.path.realpath``: an lstat per
component and a readlink per symlink) and stats the target (device, inode, size, mtime, ctime). The ``..data`` swap
changes the resolved name and the inode; a file edited in place changes size or mtime; an atomic rename (editors,
``kubectl cp``) changes the inode; a removed file changes to "missing". Polling rather than inotify: inotify on the
file would see nothing (it is never written; the directory's ``..data`` entry is renamed), watching directories
means re-arming watches as symlinks move, needs ctypes (the standard library has no inotify) and a per-user watch
budget, and buys nothing here: the kubelet already takes up to its sync period plus its cache TTL (a minute or more)
to project an update.

The polls run in one daemon thread of their own: a stat that hangs (a hung NFS or FUSE mount) stops the watching,
never the event loop or shutdown. What a change triggers is the caller's (``serve``: the SIGHUP reload, one at a time,
newest wins, each file read under a time limit; a FIFO put in the file's place only ever blocks that read).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fingerprint:
    """What a poll sees of one path: its resolved target and that file's identity, or why it could not be looked at."""

    target: str
    identity: tuple[int, int, int, int, int] | None  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns
    error: str = ""


def fingerprint(path: str) -> Fingerprint:
    """Resolve ``path`` and stat its target; never raises."""
    try:
        target = os.path.realpath(path)
        info = os.stat(target)
    except (OSError, ValueError) as error:
        return Fingerprint(path, None, getattr(error, "strerror", None) or type(error).__name__)
    return Fingerprint(target, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))


class FileWatch:
    """Polls the files ``paths()`` names and reports those whose fingerprint changed since the previous poll.

    ``paths`` is asked at every poll, so the set may change (the certificates a reloaded web config names); a path
    seen for the first time is recorded, not reported. ``initial`` are fingerprinted at construction (and more with
    ``remember``), before the caller reads them, so a change between that read and the first poll is reported too.
    """

    def __init__(self, paths: Callable[[], Iterable[str]], interval: float, initial: Iterable[str] = ()) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._paths = paths
        self.interval = interval
        self._seen = {path: fingerprint(path) for path in initial}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def remember(self, paths: Iterable[str]) -> None:
        """Fingerprint ``paths`` not seen yet now, before the caller reads them (so a later change is reported)."""
        for path in paths:
            if path not in self._seen:
                self._seen[path] = fingerprint(path)

    def poll(self) -> tuple[str, ...]:
        """Look once; the paths that changed since the last look, in ``paths()`` order."""
        changed = []
        seen = {}
        for path in dict.fromkeys(self._paths()):
            now = fingerprint(path)
            before = self._seen.get(path)
            if before is not None and before != now:
                changed.append(path)
            seen[path] = now
        self._seen = seen
        return tuple(changed)

    def start(self, on_change: Callable[[tuple[str, ...]], None]) -> None:
        """Poll every ``interval`` seconds in a daemon thread, calling ``on_change`` (from that thread) with the
        paths that changed."""
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._run, args=(on_change,), name="numawatch-filewatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self, on_change: Callable[[tuple[str, ...]], None]) -> None:
        while not self._stop.wait(self.interval):
            try:
                changed = self.poll()
                if changed:
                    on_change(changed)
            except Exception:  # a bug here must not end the watching silently
                log.exception("watching the configuration files failed; trying again in %gs", self.interval)
