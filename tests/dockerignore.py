"""A build context as a ``.dockerignore`` file filters it, by the rules BuildKit, docker and buildah share
(github.com/moby/patternmatcher: ``ReadAll`` and ``MatchesOrParentMatches``).

- A line is trimmed; empty lines and lines starting with ``#`` are skipped. ``!`` in front makes an exception (a
  path it matches is put back). The rest is cleaned as a path (``filepath.Clean``: ``a//b/`` is ``a/b``, ``./a``
  is ``a``) and a leading ``/`` dropped: every pattern is relative to the context's root.
- ``*`` matches any run of characters but ``/``, ``?`` one character but ``/``, ``[...]`` a class, ``\\`` escapes
  the next character; ``**`` matches any number of whole path segments, none included (``**/x`` is ``x`` at any
  depth), and a trailing ``**`` everything below. A pattern matches the whole relative path.
- A path is excluded when the last pattern that matches it, or matches one of its parent directories, is not an
  exception: patterns are read in order, an exception only looked at once the path is excluded and a plain pattern
  only while it is not.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pattern:
    text: str
    exception: bool
    regex: re.Pattern[str]


def parse(text: str) -> list[Pattern]:
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        if exception:
            line = line[1:].strip()
            if not line:
                raise ValueError("illegal exclusion pattern: \"!\"")
        line = posixpath.normpath(line)
        if len(line) > 1 and line.startswith("/"):
            line = line[1:]
        patterns.append(Pattern(line, exception, re.compile(_regex(line))))
    return patterns


def _regex(pattern: str) -> str:
    """patternmatcher's ``compile``: the pattern as an anchored regular expression over ``/``-separated paths."""
    out = "^"
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            if pattern[i + 1:i + 2] == "*":
                i += 1
                if pattern[i + 1:i + 2] == "/":  # "**/" is read as "**"
                    i += 1
                if i + 1 == len(pattern):
                    out += ".*"  # a trailing "**": everything below
                else:
                    out += "(.*/)?"  # any number of segments, none included
            else:
                out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "\\":
            i += 1
            if i < len(pattern):
                out += re.escape(pattern[i])
        elif char == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                raise ValueError(f"syntax error in pattern {pattern!r}")
            body = pattern[i + 1:end]
            if body.startswith("^") or body.startswith("!"):
                body = "^" + body[1:]
            out += "[" + body.replace("\\", "\\\\") + "]"
            i = end
        else:
            out += re.escape(char)
        i += 1
    return out + "$"


def excluded(path: str, patterns: Iterable[Pattern]) -> bool:
    """Whether ``path`` (relative to the context's root, ``/``-separated) is left out of the build context."""
    parent = posixpath.dirname(path)
    parents = parent.split("/") if parent else []
    matched = False
    for pattern in patterns:
        if pattern.exception != matched:
            continue
        match = pattern.regex.match(path) is not None
        if not match:
            match = any(pattern.regex.match("/".join(parents[:depth])) for depth in range(1, len(parents) + 1))
        if match:
            matched = not pattern.exception
    return matched


def context(files: Iterable[str], ignore_text: str) -> set[str]:
    """The files of ``files`` that reach the build context."""
    patterns = parse(ignore_text)
    return {path for path in files if not excluded(path, patterns)}


__all__ = ["Pattern", "context", "excluded", "parse"]
