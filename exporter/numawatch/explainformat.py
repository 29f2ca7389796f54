"""``numawatch explain``'s output: what checks and metric families read and how stale they may be
(numawatch.dataflow), as text for a person, a Markdown table (docs/sources.md's is this one) or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

from numawatch.dataflow import Bound, Explanation, inputs_of
from numawatch.inputs import Derived, Rate, Source
from numawatch.sources import SOURCES

_DESCRIPTIONS = {spec.name: spec.description for spec in SOURCES}


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _evaluations(count: int) -> str:
    return f"{count} evaluation{'s' * (count != 1)}"


def _what(bound: Bound) -> str:
    """What the input is, for a person: a source's description (a family's files are in its schedule)."""
    item = bound.input
    if isinstance(item, Source) and item.family is None:
        return _DESCRIPTIONS.get(item.name, "")
    return ""


def _settings(stagger: int, interval: float) -> str:
    return f"--interval {interval:g} and --stagger {stagger}"


def _text_bound(bound: Bound, interval: float, depth: int) -> list[str]:
    what = _what(bound)
    head = f"{'  ' * depth}- {bound.input}{f' ({what})' if what else ''}: {bound.schedule}"
    lines = [f"{head}; within {_evaluations(bound.evaluations)}, {_seconds(bound.seconds(interval))}"]
    if bound.why and bound.evaluations > 1:
        lines.append(f"{'  ' * (depth + 1)}why that is safe: {bound.why}")
    if isinstance(bound.input, (Derived, Rate)):
        for part in bound.parts:
            lines.extend(_text_bound(part, interval, depth + 1))
    return lines


def text(explanations: Sequence[Explanation], interval: float) -> str:
    """Each explanation: its name, what it is, its worst case and each input with its schedule and bound."""
    blocks = []
    for explanation in explanations:
        lines = [
            f"{explanation.name} ({explanation.kind}): {explanation.summary}",
            f"  worst-case staleness: {_evaluations(explanation.evaluations)}, "
            f"{_seconds(explanation.seconds(interval))} at {_settings(explanation.stagger, interval)}",
            "  reads:",
        ]
        for bound in explanation.bounds:
            lines.extend(_text_bound(bound, interval, 2))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _cell(value: str) -> str:
    """``value`` in a Markdown table cell: no column break, no HTML (``<pod>`` would be taken for a tag)."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def markdown(explanations: Sequence[Explanation], interval: float) -> str:
    """Two tables: every input read (its schedule and bound), then every check and metric (what it reads and its
    worst case)."""
    stagger = explanations[0].stagger if explanations else 1
    at = f"at {_settings(stagger, interval)}"
    lines = [
        f"| input | how it is read | worst case, evaluations | {at} |",
        "|---|---|---|---|",
    ]
    for bound in inputs_of(explanations):
        lines.append(f"| {_cell(str(bound.input))} | {_cell(bound.schedule)} | {bound.evaluations} | "
                     f"{_seconds(bound.seconds(interval))} |")  # fmt: skip
    lines += [
        "",
        f"| check or metric | reads | worst case, evaluations | {at} |",
        "|---|---|---|---|",
    ]
    for explanation in explanations:
        name = f"`{explanation.name}`"
        reads = ", ".join(str(bound.input) for bound in explanation.bounds)
        lines.append(f"| {name} | {_cell(reads)} | {explanation.evaluations} | "
                     f"{_seconds(explanation.seconds(interval))} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _json_bound(bound: Bound, interval: float) -> dict[str, object]:
    item = bound.input
    found: dict[str, object] = {
        "input": str(item),
        "schedule": bound.schedule,
        "evaluations": bound.evaluations,
        "seconds": bound.seconds(interval),
    }
    if isinstance(item, Source):
        found.update(source=item.name, family=item.family, description=_DESCRIPTIONS.get(item.name, ""), why=bound.why)
    if bound.parts:
        found["reads"] = [_json_bound(part, interval) for part in bound.parts]
    return found


def as_json(explanations: Sequence[Explanation], interval: float, api_interval: float) -> str:
    stagger = explanations[0].stagger if explanations else 1
    document = {
        "interval": interval,
        "stagger": stagger,
        "kubernetes_interval": api_interval,
        "explanations": [
            {
                "name": explanation.name,
                "kind": explanation.kind,
                "summary": explanation.summary,
                "evaluations": explanation.evaluations,
                "seconds": explanation.seconds(interval),
                "inputs": [_json_bound(bound, interval) for bound in explanation.bounds],
            }
            for explanation in explanations
        ],
    }
    return json.dumps(document, indent=2) + "\n"


__all__ = ["as_json", "markdown", "text"]
