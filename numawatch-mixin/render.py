"""Render the numawatch mixin with Debian's ``jsonnet`` (or any jsonnet on PATH) and return what it produced.

alerts/generate.py and dashboards/generate.py write the repository's rule files and dashboards from it; the tests
render it with other configurations. ``config`` overrides fields of the mixin's ``_config`` (JSON is jsonnet).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

MIXIN = Path(__file__).resolve().parent
# A rendering is pure computation on a few files; anything slower than this is a jsonnet that hangs.
RENDER_TIMEOUT_SECONDS = 120


class JsonnetMissing(RuntimeError):
    pass


def jsonnet_binary() -> str:
    found = shutil.which("jsonnet")
    if found is None:
        raise JsonnetMissing("jsonnet is not installed (apt-get install jsonnet)")
    return found


def render(field: str, config: dict[str, Any] | None = None) -> Any:
    """The mixin's ``field`` (prometheusAlerts, prometheusRules, grafanaDashboards) as parsed JSON."""
    overrides = json.dumps(config or {})
    expression = f"((import 'mixin.libsonnet') + {{ _config+:: {overrides} }}).{field}"
    result = subprocess.run(
        [jsonnet_binary(), "-J", str(MIXIN), "-e", expression],
        cwd=MIXIN,
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"jsonnet failed rendering {field}: {result.stderr.strip()}")
    return json.loads(result.stdout)
