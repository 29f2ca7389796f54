"""Write numawatch's Prometheus rule files (alerts/numawatch-{alerts,rules,capacity.rules}.yml) from the mixin.

The rules live in the monitoring mixin, numawatch-mixin/ (jsonnet, the kube-prometheus layout): this script only
renders its default configuration with ``jsonnet`` and writes the groups as YAML, the capacity group to its own
file. tests/test_alerts.py holds that the committed files are what this script writes, and tests/test_mixin.py that
they are the mixin's output. Run ``python alerts/generate.py`` after editing the mixin, ``--check`` to only compare.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "numawatch-mixin"))
from generated_files import sync  # noqa: E402  (tools/ and the mixin are not packages)
from render import render  # noqa: E402

HERE = Path(__file__).resolve().parent
ALERTS_FILE = HERE / "numawatch-alerts.yml"
RULES_FILE = HERE / "numawatch-rules.yml"
CAPACITY_FILE = HERE / "numawatch-capacity.rules.yml"
CAPACITY_GROUP = "numawatch-capacity"

# jsonnet writes object fields sorted; a rule reads best name first, annotations last.
FIELD_ORDER = ("name", "alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations", "rules")
ANNOTATION_ORDER = ("summary", "description", "runbook_url")


def ordered(mapping: dict, order: tuple[str, ...]) -> dict:
    rank = {name: index for index, name in enumerate(order)}
    return dict(sorted(mapping.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])))


def tidy_rule(rule: dict) -> dict:
    rule = ordered(rule, FIELD_ORDER)
    if "annotations" in rule:
        rule["annotations"] = ordered(rule["annotations"], ANNOTATION_ORDER)
    if isinstance(rule.get("expr"), str):
        rule["expr"] = rule["expr"].rstrip("\n")  # a ||| block ends in a newline the rule does not need
    return rule


def document(groups: list[dict]) -> dict[str, object]:
    return {
        "groups": [{"name": group["name"], "rules": [tidy_rule(rule) for rule in group["rules"]]} for group in groups]
    }


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line PromQL reads best as a literal block; everything else stays a plain or quoted scalar.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)

HEADER = "# Rendered from numawatch-mixin/ by alerts/generate.py; edit the mixin and run it, never this file.\n"


def dump(data: dict[str, object]) -> str:
    return HEADER + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def outputs() -> dict[Path, str]:
    alerts = render("prometheusAlerts")["groups"]
    rules = render("prometheusRules")["groups"]
    return {
        ALERTS_FILE: dump(document(alerts)),
        RULES_FILE: dump(document([group for group in rules if group["name"] != CAPACITY_GROUP])),
        CAPACITY_FILE: dump(document([group for group in rules if group["name"] == CAPACITY_GROUP])),
    }


def main(argv: list[str] | None = None) -> int:
    return sync(outputs, "alerts/generate.py", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
