"""Write docs/sources.md's staleness tables: ``numawatch explain --format markdown`` at serve's defaults, between the
page's two marker comments. Run ``python tools/generate_staleness.py`` after changing the refresh table or what a
check or metric family declares it reads; ``--check`` only compares (tests/test_explain.py does).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _directory in (REPO / "tools", REPO / "exporter"):
    if str(_directory) not in sys.path:
        sys.path.insert(0, str(_directory))

from generated_files import sync  # noqa: E402
from numawatch import dataflow, explainformat, kubeapi  # noqa: E402
from numawatch.refresh import DEFAULT_INTERVAL, DEFAULT_STAGGER  # noqa: E402

OUTPUT = REPO / "docs" / "sources.md"
BEGIN = "<!-- numawatch explain --format markdown: begin -->\n"
END = "<!-- numawatch explain --format markdown: end -->\n"


def tables() -> str:
    """What ``numawatch explain --format markdown`` prints with its defaults."""
    explanations = dataflow.explain_all(DEFAULT_STAGGER, kubeapi.DEFAULT_INTERVAL)
    return explainformat.markdown(explanations, DEFAULT_INTERVAL)


def page(text: str, generated: str) -> str:
    """``text`` with what lies between the markers replaced by ``generated``."""
    head, found, rest = text.partition(BEGIN)
    _, ended, tail = rest.partition(END)
    if not found or not ended:
        raise SystemExit(f"{OUTPUT.name}: the markers {BEGIN.strip()} and {END.strip()} are missing")
    return f"{head}{BEGIN}{generated}{END}{tail}"


def outputs() -> Mapping[Path, str]:
    return {OUTPUT: page(OUTPUT.read_text(), tables())}


if __name__ == "__main__":
    sys.exit(sync(outputs, "tools/generate_staleness.py", __doc__, sys.argv[1:]))
