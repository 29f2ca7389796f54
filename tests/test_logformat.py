"""Logs as node_exporter writes them (promslog, go-kit style): logfmt by default, JSON on request; one line per
record and no forged key or line, whatever a value holds; credentials redacted. Checked byte for byte, with a strict
logfmt reader written from the format (tests/strict_logfmt.py), and on a real ``numawatch serve``'s stderr."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import strict_logfmt
from fakehost.reference import reference_node
from numawatch.logformat import StructuredFormatter, fields, timestamp
from serving import numawatch_serve

CREATED = 1796162400.123  # 2026-12-01T22:00:00.123Z
TS = "2026-12-01T22:00:00.123Z"


def record(msg: str, *args: object, level: int = logging.INFO, name: str = "numawatch.server",
           extra: dict | None = None, exc_info=None) -> logging.LogRecord:
    made = logging.LogRecord(name, level, "/usr/lib/numawatch/server.py", 321, msg, args, exc_info)
    made.created = CREATED
    for key, value in (extra or {}).items():
        setattr(made, key, value)
    return made


def logfmt(made: logging.LogRecord) -> str:
    return StructuredFormatter("logfmt").format(made)


def as_json(made: logging.LogRecord) -> str:
    return StructuredFormatter("json").format(made)


# ------------------------------------------------------------------------------------------------ byte for byte
def test_a_record_is_node_exporters_logfmt_line():
    made = record("Listening on", extra=fields(address="[::]:10914", url="http://[::]:10914/", tls=False))

    assert logfmt(made) == (f"ts={TS} level=info caller=server.py:321 msg=\"Listening on\" address=[::]:10914 "
                            "url=http://[::]:10914/ tls=false")


def test_a_record_is_node_exporters_json_line():
    made = record("Listening on", extra=fields(address="[::]:10914", url="http://[::]:10914/", tls=False))

    assert as_json(made) == (f'{{"ts":"{TS}","level":"info","caller":"server.py:321","msg":"Listening on",'
                             '"address":"[::]:10914","url":"http://[::]:10914/","tls":false}')


@pytest.mark.parametrize(
    ("level", "name"),
    [(logging.DEBUG, "debug"), (logging.INFO, "info"), (logging.WARNING, "warn"), (logging.ERROR, "error"),
     (logging.CRITICAL, "error"), (15, "info"), (5, "debug")],
)
def test_levels_have_promslogs_names(level, name):
    assert logfmt(record("x", level=level)) == f"ts={TS} level={name} caller=server.py:321 msg=x"


def test_a_librarys_record_names_its_logger():
    assert logfmt(record("Error handling request", name="aiohttp.server")) == (
        f'ts={TS} level=info caller=server.py:321 logger=aiohttp.server msg="Error handling request"')


def test_timestamps_are_utc_with_three_decimals_whatever_the_float():
    assert timestamp(CREATED) == TS
    assert timestamp(1796162400.0) == "2026-12-01T22:00:00.000Z"
    assert timestamp(1796162400.9999999) == "2026-12-01T22:00:01.000Z"  # rounds into the next second, not .1000
    assert timestamp(1796162400.0009) == "2026-12-01T22:00:00.000Z"  # truncated to the millisecond, as Go does


# ------------------------------------------------------------------------------------------------ hostile values
# (value, its logfmt spelling, its JSON spelling)
HOSTILE = [
    ("forged\nts=2026-12-01T22:00:00.000Z level=error msg=forged",
     '"forged\\nts=2026-12-01T22:00:00.000Z level=error msg=forged"',
     '"forged\\nts=2026-12-01T22:00:00.000Z level=error msg=forged"'),
    ('a" level=error msg="forged', '"a\\" level=error msg=\\"forged"', '"a\\" level=error msg=\\"forged"'),
    ("key=value", '"key=value"', '"key=value"'),
    ("carriage\rreturn", '"carriage\\rreturn"', '"carriage\\rreturn"'),
    ("tab\there", '"tab\\there"', '"tab\\there"'),
    ("back\\slash", '"back\\\\slash"', '"back\\\\slash"'),
    ("trailing\\", '"trailing\\\\"', '"trailing\\\\"'),
    ("nul\x00byte", '"nul\\u0000byte"', '"nul\\u0000byte"'),
    ("\x1b[31mred\x1b[0m", '"\\u001b[31mred\\u001b[0m"', '"\\u001b[31mred\\u001b[0m"'),
    ("del\x7f", '"del\\u007f"', '"del\\u007f"'),
    ("line\u2028separator", '"line\\u2028separator"', '"line\\u2028separator"'),
    ("next\x85line", '"next\\u0085line"', '"next\\u0085line"'),
    ("bidi\u202eoverride", '"bidi\\u202eoverride"', '"bidi\\u202eoverride"'),
    ("no-break\u00a0space", '"no-break\\u00a0space"', '"no-break\\u00a0space"'),
    ("tag\U000e0041", '"tag\\udb40\\udc41"', '"tag\\udb40\\udc41"'),  # a format character above U+FFFF
    ("surrogate\udcff", '"surrogate\\udcff"', '"surrogate\\udcff"'),  # a file name's undecodable byte
    ("", '""', '""'),
    ("NUMA-Knoten_0:ünd\U0001f600", "NUMA-Knoten_0:ünd\U0001f600", '"NUMA-Knoten_0:ünd\U0001f600"'),  # printable
]


@pytest.mark.parametrize(("value", "in_logfmt", "in_json"), HOSTILE, ids=[repr(v[0])[:24] for v in HOSTILE])
def test_a_hostile_message_is_one_quoted_value(value, in_logfmt, in_json):
    made = record("%s", value)

    line = logfmt(made)
    document = as_json(made)

    assert line == f"ts={TS} level=info caller=server.py:321 msg={in_logfmt}"
    assert document == f'{{"ts":"{TS}","level":"info","caller":"server.py:321","msg":{in_json}}}'
    assert strict_logfmt.parse(line) == {"ts": TS, "level": "info", "caller": "server.py:321", "msg": value}
    assert strict_logfmt.parse_json(document) == {"ts": TS, "level": "info", "caller": "server.py:321", "msg": value}


@pytest.mark.parametrize(("value", "in_logfmt", "in_json"), HOSTILE, ids=[repr(v[0])[:24] for v in HOSTILE])
def test_a_hostile_field_value_is_one_quoted_value(value, in_logfmt, in_json):
    made = record("Starting numawatch", extra=fields(intent=value, host_root="/host"))

    assert logfmt(made) == (f'ts={TS} level=info caller=server.py:321 msg="Starting numawatch" '
                            f"intent={in_logfmt} host_root=/host")
    assert as_json(made) == (f'{{"ts":"{TS}","level":"info","caller":"server.py:321","msg":"Starting numawatch",'
                             f'"intent":{in_json},"host_root":"/host"}}')
    assert strict_logfmt.parse(logfmt(made))["intent"] == value


def test_field_keys_cannot_forge_or_shadow_a_key():
    made = record("x", extra=fields(**{"a b=c": 1, "msg": "shadow", "level": "error", "msg_": 2, "x\n\"y": True}))

    line = logfmt(made)

    assert line == (f"ts={TS} level=info caller=server.py:321 msg=x a_b_c=1 msg_=shadow level_=error msg__=2 "
                    "x__y=true")
    assert list(strict_logfmt.parse(line)) == ["ts", "level", "caller", "msg", "a_b_c", "msg_", "level_", "msg__",
                                               "x__y"]
    assert strict_logfmt.parse_json(as_json(made))["level"] == "info"


def test_numbers_and_booleans_are_bare_in_logfmt_and_native_in_json():
    made = record("x", extra=fields(count=3, seconds=0.25, up=True, nan=float("nan")))

    assert logfmt(made).endswith("msg=x count=3 seconds=0.25 up=true nan=nan")
    assert strict_logfmt.parse_json(as_json(made)) == {
        "ts": TS, "level": "info", "caller": "server.py:321", "msg": "x", "count": 3, "seconds": 0.25, "up": True,
        "nan": "nan",  # JSON has no NaN: a string, so every JSON reader takes the line
    }


def test_a_traceback_is_one_escaped_err_value_after_the_fields():
    try:
        raise ValueError('bad "value"\nlevel=error msg=forged')
    except ValueError:
        made = record("evaluation failed", level=logging.ERROR, exc_info=sys.exc_info(), extra=fields(turn=2))

    line = logfmt(made)
    parsed = strict_logfmt.parse(line)

    assert "\n" not in line
    assert list(parsed) == ["ts", "level", "caller", "msg", "turn", "err"]
    assert parsed["err"].startswith("Traceback (most recent call last):\n")
    assert parsed["err"].endswith('ValueError: bad "value"\nlevel=error msg=forged')
    assert strict_logfmt.parse_json(as_json(made))["err"] == parsed["err"]


def test_a_call_whose_arguments_do_not_fit_still_logs_one_line():
    line = logfmt(record("%d reads of %s", "not a number"))

    assert strict_logfmt.parse(line)["msg"] == "%d reads of %s (unformattable log arguments: TypeError)"


# ------------------------------------------------------------------------------------------------ credentials
@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("header Authorization: Basic cHJvbWV0aGV1czpzZWNyZXQ=\nnext", "header Authorization: [redacted]\nnext"),
        ("authorization=\"Bearer abcdef123456\" level=error", 'authorization="[redacted]" level=error'),
        ("token Bearer abcdef123456 used", "token Bearer [redacted] used"),
        ("Proxy-Authorization: Negotiate abc", "Proxy-Authorization: [redacted]"),
    ],
)
def test_credentials_are_redacted_before_escaping(message, shown):
    made = record("%s", message, extra=fields(detail=message))
    try:
        raise RuntimeError(message)
    except RuntimeError:
        made.exc_info = sys.exc_info()

    for line in (logfmt(made), as_json(made)):
        parsed = strict_logfmt.parse_any(line)
        assert parsed["msg"] == shown
        assert parsed["detail"] == shown
        assert str(parsed["err"]).endswith(f"RuntimeError: {shown}")
        for secret in ("cHJvbWV0aGV1czpzZWNyZXQ=", "abcdef123456", "Negotiate abc"):
            assert secret not in line


# ------------------------------------------------------------------------------------------------ a real serve
HOSTILE_NAME = 'intent\nts=2026-12-01T22:00:00.000Z level=error msg="forged" key=value \x1b[2J.yaml'


@pytest.mark.parametrize("style", ["logfmt", "json"])
@pytest.mark.slow
def test_every_line_a_real_serve_writes_parses_even_with_a_hostile_intent_file_name(fake_host, tmp_path, style):
    node = reference_node(fake_host)
    node.set_topology_manager_policy("best-effort")
    intent = tmp_path / HOSTILE_NAME
    intent.write_text("kubelet:\n  topologyManagerPolicy: best-effort\n")
    with numawatch_serve(fake_host.root, "--intent", str(intent), "--log.format", style, "--log.level", "debug") \
            as (process, url):
        # Invalid now, quoting what it found: the reload fails and says so, naming the file.
        intent.write_text('kubelet:\n  topologyManagerPolicy: "x\\" level=error msg=forged\\nkey=value"\n')
        process.send_signal(signal.SIGHUP)
        stderr = wait_for(process, "intent reload failed")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        stderr += process.stderr.read()

    records = [strict_logfmt.parse_any(line) for line in stderr.splitlines()]  # every line parses, strictly
    assert len(records) == stderr.count("\n")
    assert {key for record in records for key in record} <= {"ts", "level", "caller", "logger", "msg", "err",
                                                             "version", "host_root", "intent", "address", "url",
                                                             "tls", "descriptor_limit"}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(record["ts"])) for record in records)
    assert all(record["level"] in ("debug", "info", "warn", "error") for record in records)
    assert "forged" not in [record["msg"] for record in records]
    [starting] = [record for record in records if record["msg"] == "Starting numawatch"]
    assert starting["intent"] == str(intent)
    assert starting["host_root"] == str(fake_host.root)
    [listening] = [record for record in records if record["msg"] == "Listening on"]
    assert listening["url"] == url
    [failed] = [record for record in records if str(record["msg"]).startswith("intent reload failed")]
    assert failed["level"] == "error"
    assert str(intent) in str(failed["msg"])  # the name, escaped on the way out, read back whole
    assert "topologyManagerPolicy" in str(failed["msg"])
    assert "\x1b" not in stderr  # no terminal escape reaches a terminal tailing the log
    assert [record["msg"] for record in records][-1] == "shutting down"


def wait_for(process: subprocess.Popen, fragment: str, seconds: float = 30) -> str:
    """Read stderr lines until one holds ``fragment``; everything read."""
    text = ""
    deadline = time.monotonic() + seconds
    while fragment not in text:
        assert time.monotonic() < deadline, f"gave up waiting for {fragment!r}: {text}"
        line = process.stderr.readline()
        assert line, f"stderr closed before {fragment!r}: {text}"
        text += line
    return text


def test_check_logs_in_the_format_asked_for_and_prints_its_report_on_stdout(fake_host):
    result = subprocess.run(
        [sys.executable, "-m", "numawatch", "--host-root", str(fake_host.root), "--log.format", "json",
         "--log.level", "debug", "check", "--format", "json"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "NUMAWATCH_CHECK_WINDOW": "0"},
    )

    assert result.returncode in (0, 1, 2), result.stderr
    assert result.stdout.startswith("{")
    for line in result.stderr.splitlines():
        if not line.startswith("numawatch: "):  # check's verdict line is for a person (or node-problem-detector)
            assert strict_logfmt.parse_json(line)["level"] in ("debug", "info", "warn", "error")


def test_the_parser_used_here_refuses_what_a_strict_reader_refuses():
    for line in ['msg="unterminated', 'msg="a"b', "msg=a=b", 'msg=a"b', "msg", "=x", 'msg="\\x41"', 'msg="\\u12"',
                 "a=1 a=2", 'msg="raw\ttab"', "msg=x\nts=y"]:
        with pytest.raises(ValueError):
            strict_logfmt.parse(line)
    assert strict_logfmt.parse('a= b="" c="\\/\\b\\f"') == {"a": "", "b": "", "c": "/\b\f"}


@pytest.mark.slow
def test_logs_are_written_to_stderr_only(tmp_path):
    result = subprocess.run([sys.executable, "-m", "numawatch", "--host-root", str(tmp_path / "nope"), "serve"],
                            capture_output=True, text=True, timeout=60)

    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert strict_logfmt.parse(line)["msg"] == f"host root {Path(tmp_path / 'nope')} does not exist"


def test_warnings_and_uncaught_exceptions_become_log_lines_too():
    """What Python itself prints on stderr (a warning, a thread's or the program's uncaught exception) is a record."""
    program = (
        "import sys, threading, warnings\n"
        "from numawatch import logformat\n"
        "logformat.configure('info', 'logfmt', sys.stderr)\n"
        "worker = threading.Thread(target=lambda: 1 / 0, name='worker\\nlevel=info')\n"
        "worker.start()\n"
        "worker.join()\n"
        "warnings.warn('careful\\nlevel=info msg=forged')\n"
        "raise RuntimeError('boom\\nlevel=info msg=forged')\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)

    records = [strict_logfmt.parse(line) for line in result.stderr.splitlines()]
    assert result.returncode == 1
    assert [(record["level"], record["msg"]) for record in records] == [
        ("error", "uncaught exception in thread worker\nlevel=info"),
        ("warn", "<string>:7: UserWarning: careful\nlevel=info msg=forged\n"),
        ("error", "uncaught exception"),
    ]
    assert records[0]["err"].endswith("ZeroDivisionError: division by zero")
    assert records[2]["err"].endswith("RuntimeError: boom\nlevel=info msg=forged")
