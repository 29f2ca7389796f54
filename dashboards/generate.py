"""Write numawatch's Grafana dashboards (dashboards/numawatch-{fleet,node,gpu}.json) from the mixin.

The dashboards live in the monitoring mixin, numawatch-mixin/dashboards/ (plain jsonnet objects, no grafonnet):
this script renders its default configuration with ``jsonnet`` and writes each dashboard as sorted, indented JSON.
Run ``python dashboards/generate.py`` after editing the mixin, ``--check`` to only compare; tests/test_dashboards.py
lints the output and tests/test_e2e_prometheus.py runs every query against a real Prometheus that scraped numawatch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "numawatch-mixin"))
from generated_files import sync  # noqa: E402  (tools/ and the mixin are not packages)
from render import render  # noqa: E402

HERE = Path(__file__).resolve().parent


def dump(dashboard: dict) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def outputs() -> dict[Path, str]:
    return {HERE / name: dump(dashboard) for name, dashboard in render("grafanaDashboards").items()}


def main(argv: list[str] | None = None) -> int:
    return sync(outputs, "dashboards/generate.py", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
