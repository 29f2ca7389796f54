"""Start a real ``numawatch serve`` process for a test: the one launcher every process-level test uses."""

from __future__ import annotations

import contextlib
import gzip
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from prometheus_client.parser import text_string_to_metric_families
from strict_logfmt import parse_any

# A finding as serve exports it: the labels of its numawatch_drift_info series.
Labels = frozenset[tuple[str, str]]


class ReplayedStream:
    """A process' stderr with the lines the launcher already read put back in front, so a test reading it (``read``,
    ``readline``, iteration) sees all of it."""

    def __init__(self, lines: list[str], stream: IO[str]) -> None:
        self._lines = lines
        self._stream = stream

    def readline(self) -> str:
        return self._lines.pop(0) if self._lines else self._stream.readline()

    def read(self) -> str:
        head = "".join(self._lines)
        self._lines.clear()
        return head + self._stream.read()

    def __iter__(self) -> Iterator[str]:
        return iter(self.readline, "")

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def closed(self) -> bool:  # Popen.communicate() asks
        return self._stream.closed

    def close(self) -> None:
        self._stream.close()


def listening_url(line: str) -> str | None:
    """The URL of serve's "Listening on" log line (logfmt or JSON); None for any other line. A line that is not valid
    logfmt or JSON fails the test: every line serve writes must be."""
    record = parse_any(line.rstrip("\n"))
    return str(record["url"]) if record.get("msg") == "Listening on" else None


@contextlib.contextmanager
def numawatch_serve(
    root: Path, *args: str, interval: str = "0.2", module: str = "numawatch", wrapper: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen, str]]:
    """``numawatch --host-root ROOT serve`` on 127.0.0.1 (port chosen by the kernel), yielding the process and URL.

    ``args`` go after ``serve``: the CLI takes global flags (``--intent``, ``--no-self-pin``) there too, and a flag
    given again wins. The file watch is off (``--config.auto-reload-interval 0``) unless ``args`` turn it on: the
    SIGHUP tests count reloads, and a poll would add reloads of the files they rewrite in place. The URL is the one
    serve logs once it listens; a process that does not get there within 30 s fails the test with its stderr. The
    process is killed on the way out whatever happened.
    """
    command = [*wrapper, sys.executable, "-m", module, "--host-root", str(root), "serve",
               "--web.listen-address", "127.0.0.1:0", "--config.auto-reload-interval", "0", "--interval", interval,
               *args]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    stderr = process.stderr
    seen: list[str] = []
    found: list[str] = []
    malformed: list[str] = []

    def wait_for_banner() -> None:
        for line in iter(stderr.readline, ""):
            seen.append(line)
            try:
                url = listening_url(line)
            except ValueError as error:
                malformed.append(f"{line!r}: {error}")
                return
            if url is not None:
                found.append(url)
                return

    reader = threading.Thread(target=wait_for_banner, daemon=True)
    reader.start()
    try:
        reader.join(30)
        if malformed:
            process.kill()
            raise AssertionError(f"numawatch serve wrote a line that is neither logfmt nor JSON: {malformed[0]}")
        if not found:
            process.kill()
            reader.join(10)
            raise AssertionError(f"numawatch serve did not start: {''.join(seen)}{stderr.read()}")
        process.stderr = ReplayedStream(seen, stderr)  # type: ignore[assignment]
        yield process, found[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        stderr.close()


def drift_info(url: str, keep: Callable[[Mapping[str, str]], bool]) -> tuple[int, set[Labels]]:
    """(the number of the evaluation serve at ``url`` exports now, the labels of its numawatch_drift_info series
    that ``keep`` keeps), from one scrape as Prometheus makes it (gzip asked for)."""
    request = urllib.request.Request(url + "metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    number = -1
    found: set[Labels] = set()
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "numawatch_evaluations_total":
                number = int(sample.value)
            elif sample.name == "numawatch_drift_info" and keep(sample.labels):
                found.add(frozenset(sample.labels.items()))
    assert number >= 0, "no numawatch_evaluations_total in the exposition"
    return number, found


def healthy(url: str) -> bool:
    """Whether serve at ``url`` answers /healthz with 200 (it has finished an evaluation)."""
    try:
        with urllib.request.urlopen(url + "healthz", timeout=60) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False
