"""The one command-line behaviour of the repository's generators (alerts/, dashboards/, deploy/generate.py).

Each generator computes its outputs (path -> text); ``sync`` writes the ones that changed, or with ``--check``
writes nothing and exits 1 naming the stale files (the tests run that, so committed outputs never drift).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def sync(outputs: Callable[[], Mapping[Path, str]], script: str, doc: str | None, argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(description=(doc or script).splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if path.exists() and path.read_text() == text:
            continue
        if args.check:
            stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}; run python {script}", file=sys.stderr)
        return 1
    return 0
