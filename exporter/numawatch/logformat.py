"""Log lines as node_exporter writes them (promslog's go-kit style): logfmt by default, JSON with ``--log.format=json``.

    ts=2026-12-01T22:00:00.000Z level=info caller=cli.py:412 msg="Listening on" address=[::]:10914

- Keys, in this order: ``ts`` (UTC, milliseconds, ``Z``: promslog's ``2006-01-02T15:04:05.000Z07:00`` on a UTC
  clock), ``level`` (``debug``, ``info``, ``warn``, ``error``: promslog's names; Python's CRITICAL is ``error``),
  ``caller`` (``file.py:line``), ``logger`` (only for a library's logger, e.g. ``aiohttp.server``), ``msg``, then the
  record's fields (``extra=fields(address=...)``) and ``err`` (a traceback, on one line).
- A logfmt value is bare when it is non-empty, printable and holds no space, ``=``, ``"`` or ``\\``; otherwise it is
  quoted, with ``"`` and ``\\`` escaped, ``\\n``, ``\\r``, ``\\t``, and every other character Python does not call
  printable (controls, format characters, line and paragraph separators, U+0085, surrogates, unassigned code points)
  as ``\\uXXXX`` (a surrogate pair above U+FFFF). These are the escapes JSON has, which go-logfmt's decoder (Loki's
  ``| logfmt``) and Go's strconv.Unquote both read; the JSON format uses the same string escaping.
- So whatever a value holds (a path, an error quoting a file, a library's message), a record is exactly one line,
  and a value can never end early and forge another key or line.
- Credentials (``Authorization`` headers, bare ``Basic``/``Bearer`` tokens) are removed from every value before it is
  escaped (``redact``): escaping first would let a later pass cut an escape in half.
"""

from __future__ import annotations

import logging
import math
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TextIO

LOG_FORMATS = ("logfmt", "json")
# promslog's level names; "warning" stays accepted on the command line as numawatch's earlier spelling.
LOG_LEVELS = ("debug", "info", "warn", "error")
LEVEL_ALIASES = {"warning": "warn"}
PYTHON_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}

# Where ``fields`` puts a record's key/value pairs (an attribute of the LogRecord, via ``extra=``).
FIELDS_ATTRIBUTE = "numawatch_fields"
_FIXED_KEYS = ("ts", "level", "caller", "logger", "msg", "err", "stack")
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_NEEDS_QUOTES = frozenset(' ="\\')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

Value = str | int | float | bool


def fields(**values: Value) -> dict[str, dict[str, Value]]:
    """``extra=`` for a log call: key/value pairs written after ``msg``, e.g. ``log.info("Listening on",
    extra=fields(address="[::]:10914"))``."""
    return {FIELDS_ATTRIBUTE: values}


# Credentials as they could appear in a message or a traceback: an Authorization header (any scheme) and a bare
# "Basic <base64>"/"Bearer <token>".
_CREDENTIALS = re.compile(
    r"(?i)((?:proxy-)?authorization['\"]?\s*[:=,]\s*['\"]?)[^'\"\r\n]*"
    r"|\b(basic|bearer)\s+[A-Za-z0-9+/=._~-]{6,}"
)


def redact(text: str) -> str:
    """``text`` with every credential replaced by ``[redacted]``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return f"{match.group(1)}[redacted]"
        return f"{match.group(2)} [redacted]"

    return _CREDENTIALS.sub(replace, text)


def escape(text: str) -> str:
    """``text`` as the inside of a double-quoted logfmt or JSON string: printable characters as they are."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return text
    out = []
    for char in text:
        short = _SHORT_ESCAPES.get(char)
        if short is not None:
            out.append(short)
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            if code > 0xFFFF:  # JSON's \u is four hex digits: a UTF-16 surrogate pair
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                out.append(f"\\u{code:04x}")
    return "".join(out)


def logfmt_value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    if value and value.isprintable() and _NEEDS_QUOTES.isdisjoint(value):
        return value
    return f'"{escape(value)}"'


def json_value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and math.isfinite(value):
        return _number(value)
    return f'"{escape(str(value))}"'


def _number(value: int | float) -> str:
    return str(value) if isinstance(value, int) else repr(value)


def safe_key(key: str) -> str:
    """A key as logfmt allows it (no space, ``=``, ``"`` or control character): anything else becomes ``_``."""
    return _KEY_UNSAFE.sub("_", key) or "_"


def encode(pairs: Iterable[tuple[str, Value]], style: str) -> str:
    """One record's line (without its newline) in ``style`` (``logfmt`` or ``json``)."""
    if style == "json":
        return "{" + ",".join(f'"{escape(key)}":{json_value(value)}' for key, value in pairs) + "}"
    return " ".join(f"{key}={logfmt_value(value)}" for key, value in pairs)


def timestamp(created: float) -> str:
    """promslog's go-kit ``ts``: RFC 3339 in UTC with exactly three decimals."""
    # Through whole microseconds: a float's fraction (.123 stored as .12299999) would otherwise truncate a
    # millisecond away.
    micros = round(created * 1_000_000)
    seconds, millis = divmod(micros // 1000, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def level_name(levelno: int) -> str:
    if levelno <= logging.DEBUG:
        return "debug"
    if levelno <= logging.INFO:
        return "info"
    if levelno <= logging.WARNING:
        return "warn"
    return "error"


class StructuredFormatter(logging.Formatter):
    """Formats a record as one logfmt (or JSON) line, every value redacted and escaped."""

    def __init__(self, style: str = "logfmt") -> None:
        super().__init__()
        if style not in LOG_FORMATS:
            raise ValueError(f"unknown log format {style!r}")
        self.style_name = style

    def format(self, record: logging.LogRecord) -> str:
        return encode(self.pairs(record), self.style_name)

    def pairs(self, record: logging.LogRecord) -> list[tuple[str, Value]]:
        pairs: list[tuple[str, Value]] = [
            ("ts", timestamp(record.created)),
            ("level", level_name(record.levelno)),
            ("caller", f"{record.filename}:{record.lineno}"),
        ]
        if record.name != "numawatch" and not record.name.startswith("numawatch."):
            pairs.append(("logger", record.name))
        pairs.append(("msg", redact(_message(record))))
        used = set(_FIXED_KEYS)
        extra = getattr(record, FIELDS_ATTRIBUTE, None)
        if isinstance(extra, Mapping):
            for key, value in extra.items():
                name = safe_key(str(key))
                while name in used:
                    name += "_"
                used.add(name)
                pairs.append((name, _field_value(value)))
        if record.exc_info:
            pairs.append(("err", redact(self.formatException(record.exc_info))))
        elif record.exc_text:
            pairs.append(("err", redact(record.exc_text)))
        if record.stack_info:
            pairs.append(("stack", redact(self.formatStack(record.stack_info))))
        return pairs


def _message(record: logging.LogRecord) -> str:
    """The record's message; a call whose arguments do not fit its format string still logs one line."""
    try:
        return record.getMessage()
    except Exception as error:  # logging's own fallback would print a traceback of many lines
        return f"{record.msg!s} (unformattable log arguments: {type(error).__name__})"


def _field_value(value: object) -> Value:
    if isinstance(value, bool | int | float):
        return value
    return redact(str(value))


def configure(level: str, style: str, stream: TextIO) -> None:
    """Every logger of the process writes through one handler on ``stream`` (stderr), at ``level`` and above."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(StructuredFormatter(style))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(PYTHON_LEVELS[LEVEL_ALIASES.get(level, level)])
    # A handler failing to write (stderr closed) must not print logging's multi-line "--- Logging error ---".
    logging.raiseExceptions = False
    # What Python would print on stderr past the logger (warnings, a thread's or the program's uncaught exception)
    # becomes a record too, so that every line on stderr is one.
    logging.captureWarnings(True)
    threading.excepthook = _log_thread_exception
    sys.excepthook = _log_uncaught


_crash_log = logging.getLogger("numawatch.crash")


def _log_thread_exception(hook: threading.ExceptHookArgs) -> None:
    if hook.exc_type is SystemExit:
        return
    name = hook.thread.name if hook.thread is not None else "a thread"
    exc_info = (hook.exc_type, hook.exc_value or hook.exc_type(), hook.exc_traceback)
    _crash_log.error("uncaught exception in thread %s", name, exc_info=exc_info)


def _log_uncaught(kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, traceback)
        return
    _crash_log.error("uncaught exception", exc_info=(kind, value, traceback))
