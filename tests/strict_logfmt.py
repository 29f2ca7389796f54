"""A strict logfmt parser for the tests, written from the format as log shippers read it (go-logfmt's decoder,
behind Loki's ``| logfmt`` and Grafana's logfmt parsing; brandur.org/logfmt), not from numawatch's encoder.

- A line is pairs separated by spaces; a pair is ``key=value``. A key is one or more characters above the space
  other than ``=`` and ``"``.
- A value is bare (characters above the space other than ``=`` and ``"``, possibly none) or double-quoted. Inside
  quotes only JSON's escapes are allowed (``\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX``, surrogate pairs joined) and no
  raw control character; a quoted value ends the pair (a space or the end of the line must follow).

Stricter than go-logfmt on purpose, so what passes here passes everywhere: a key without ``=`` (which go-logfmt reads
as an empty value), a raw control character, an unknown escape, a duplicate key or a line break is an error.
"""

from __future__ import annotations

import json

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")


class LogfmtError(ValueError):
    pass


def parse(line: str) -> dict[str, str]:
    """The pairs of one logfmt line, in order; ``LogfmtError`` on anything a strict reader would refuse."""
    if any(char in line for char in "\n\r\x85\u2028\u2029"):
        raise LogfmtError("a line break inside the line")
    pairs: dict[str, str] = {}
    position, end = 0, len(line)
    while position < end:
        if line[position] == " ":
            position += 1
            continue
        key, position = _key(line, position)
        if position >= end or line[position] != "=":
            raise LogfmtError(f"column {position}: key {key!r} without '='")
        position += 1
        if position < end and line[position] == '"':
            value, position = _quoted(line, position + 1)
            if position < end and line[position] != " ":
                raise LogfmtError(f"column {position}: {line[position]!r} right after a quoted value")
        else:
            value, position = _bare(line, position)
        if key in pairs:
            raise LogfmtError(f"key {key!r} twice")
        pairs[key] = value
    return pairs


def _key(line: str, position: int) -> tuple[str, int]:
    start = position
    while position < len(line) and line[position] > " " and line[position] not in '="':
        position += 1
    if position == start:
        raise LogfmtError(f"column {position}: expected a key, found {line[position]!r}")
    return line[start:position], position


def _bare(line: str, position: int) -> tuple[str, int]:
    start = position
    while position < len(line) and line[position] != " ":
        if line[position] < " " or line[position] in '="':
            raise LogfmtError(f"column {position}: {line[position]!r} in a bare value")
        position += 1
    return line[start:position], position


def _quoted(line: str, position: int) -> tuple[str, int]:
    chars: list[str] = []
    while True:
        if position >= len(line):
            raise LogfmtError("unterminated quoted value")
        char = line[position]
        if char == '"':
            return "".join(chars), position + 1
        if char < " " or char == "\x7f":
            raise LogfmtError(f"column {position}: raw control character {char!r} in a quoted value")
        if char != "\\":
            chars.append(char)
            position += 1
            continue
        escape = line[position + 1: position + 2]
        if escape in _ESCAPES:
            chars.append(_ESCAPES[escape])
            position += 2
            continue
        if escape != "u":
            raise LogfmtError(f"column {position}: unknown escape \\{escape}")
        code, position = _hex4(line, position + 2)
        if 0xD800 <= code < 0xDC00 and line[position: position + 2] == "\\u":
            low, after = _hex4(line, position + 2)
            if 0xDC00 <= low < 0xE000:
                code, position = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), after
        chars.append(chr(code))


def _hex4(line: str, position: int) -> tuple[int, int]:
    digits = line[position: position + 4]
    if len(digits) != 4 or not _HEX.issuperset(digits):
        raise LogfmtError(f"column {position}: \\u needs four hex digits, found {digits!r}")
    return int(digits, 16), position + 4


def parse_json(line: str) -> dict[str, object]:
    """One JSON log line: an object, on one line, without duplicate keys."""
    if any(char in line for char in "\n\r\x85\u2028\u2029"):
        raise ValueError("a line break inside the line")

    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [key for key, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError(f"duplicate keys in {keys}")
        return dict(pairs)

    document = json.loads(line, object_pairs_hook=no_duplicates)
    if not isinstance(document, dict):
        raise ValueError("not an object")
    return document


def parse_any(line: str) -> dict[str, object]:
    """A log line in either of numawatch's formats."""
    return parse_json(line) if line.startswith("{") else dict(parse(line))
