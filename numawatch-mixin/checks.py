"""Write numawatch-mixin/checks.json: what the mixin needs from numawatch's code, as data jsonnet can import.

The mixin renders with nothing but ``jsonnet``, so the facts it takes from the exporter (the check ids in
documentation order with their one-line remediation, and the labels of numawatch_kubelet_config_info) are
written here from the checks registry and metrics/core.py. tests/test_mixin.py holds that the committed file is
what this script writes. Run ``python numawatch-mixin/checks.py`` after adding or renaming a check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from generated_files import sync

HERE = Path(__file__).resolve().parent
CHECKS_FILE = HERE / "checks.json"
# The dashboards' remediation column is one line: the first clause of the remediation, cut to what fits.
REMEDIATION_WIDTH = 200


def one_line(remediation: str) -> str:
    text = remediation.split("; ")[0]
    return text if len(text) <= REMEDIATION_WIDTH else text[: REMEDIATION_WIDTH - 3] + "..."


def document() -> dict[str, object]:
    from numawatch.checks import all_checks
    from numawatch.metrics.core import KUBELET_CONFIG_LABELS

    return {
        "checks": [{"id": check.id, "remediation": one_line(check.remediation)} for check in all_checks()],
        "kubeletConfigLabels": list(KUBELET_CONFIG_LABELS),
    }


def outputs() -> dict[Path, str]:
    return {CHECKS_FILE: json.dumps(document(), indent=2, ensure_ascii=False) + "\n"}


def main(argv: list[str] | None = None) -> int:
    return sync(outputs, "numawatch-mixin/checks.py", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
