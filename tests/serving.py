"""Start a real ``numawatch serve`` process for a test: the one launcher every process-level test uses."""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def numawatch_serve(
    root: Path, *args: str, interval: str = "0.2", module: str = "numawatch"
) -> Iterator[tuple[subprocess.Popen, str]]:
    """``numawatch --host-root ROOT serve`` on 127.0.0.1 (port chosen by the kernel), yielding the process and URL.

    ``args`` go after ``serve``: the CLI takes global flags (``--intent``, ``--no-self-pin``) there too. The URL is
    the one serve prints once it listens; a process that does not get there within 30 s fails the test with its
    stderr. The process is killed on the way out whatever happened.
    """
    command = [sys.executable, "-m", module, "--host-root", str(root), "serve", "--listen", "127.0.0.1:0",
               "--interval", interval, *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        line = process.stdout.readline() if ready else ""
        if "listening on " not in line:
            process.kill()
            raise AssertionError(f"numawatch serve did not start: {line!r} {process.stderr.read()}")
        yield process, line.split("listening on ", 1)[1].split()[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()
        process.stderr.close()
