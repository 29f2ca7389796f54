"""Directory trees that a hostile bundle shaped, walked without recursion.

A bundle member may sit a thousand directories deep (its name is bounded in bytes, not in components) and a symlink
may point at another one a thousand times over. Python 3.11's ``os.walk``, ``shutil.rmtree`` and
``os.path.realpath`` recurse once per level or per link, so such a tree ends them with ``RecursionError``, and a
clean-up that raises leaves the tree behind. Everything here keeps an explicit stack instead, and never follows a
symlink it did not mean to.
"""

from __future__ import annotations

import collections
import os
import stat
from collections.abc import Iterator


class LinkLoop(Exception):
    """A symlink chain longer than the limit (the kernel's ``ELOOP``)."""


def symlinks(top: str) -> Iterator[str]:
    """Every symlink under ``top``, none of them followed."""
    pending = [top]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    yield entry.path
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)


def remove_tree(top: str) -> None:
    """Remove ``top`` and everything under it, as far as it can (errors are skipped, like ``shutil.rmtree``'s
    ``ignore_errors``). Directories are listed first and removed deepest first; a symlink is removed, never
    followed. Meant for a directory only this process writes (a scratch directory of mode 0700)."""
    order: list[str] = []
    pending = [top]
    while pending:
        directory = pending.pop()
        order.append(directory)
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                        else:
                            os.unlink(entry.path)
                    except OSError:
                        continue
        except OSError:
            continue
    for directory in reversed(order):  # every directory comes after its parent in ``order``
        try:
            os.rmdir(directory)
        except OSError:
            continue


def resolve_inside(root: str, relative: str, max_links: int) -> str | None:
    """Where ``relative`` (a path under ``root``) leads once every symlink on the way is followed, as a path relative
    to ``root``; None where it leaves ``root`` (``..`` above it, or an absolute link). A name that does not exist
    ends the following: the rest is taken as written, as ``os.path.realpath`` does. More than ``max_links`` links
    raise ``LinkLoop``."""
    parts: list[str] = []
    remaining = collections.deque(relative.split("/"))
    followed = 0
    while remaining:
        name = remaining.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            if not parts:
                return None
            parts.pop()
            continue
        candidate = os.path.join(root, *parts, name)
        try:
            mode = os.lstat(candidate).st_mode
        except OSError:
            parts.append(name)
            continue
        if not stat.S_ISLNK(mode):
            parts.append(name)
            continue
        followed += 1
        if followed > max_links:
            raise LinkLoop(relative)
        target = os.readlink(candidate)
        if target.startswith("/"):
            return None
        remaining.extendleft(reversed(target.split("/")))
    return "/".join(parts)


__all__ = ["LinkLoop", "remove_tree", "resolve_inside", "symlinks"]
