"""The series selectors of a PromQL expression, for tests that check every selector carries some matcher.

A small tokenizer rather than a full parser: string literals and range/subquery brackets are skipped, the label
lists of ``by``/``without``/``on``/``ignoring``/``group_left``/``group_right`` are skipped, an identifier followed
by ``(`` (or by ``by``/``without``) is a function or an aggregation, and every other identifier (with its
``{...}``), or a bare ``{...}``, is a selector. tests/test_promql_selectors.py holds it on expressions of every
shape the rules and dashboards use. Grafana's variables only appear inside strings and brackets, so expressions
need no substitution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<braces>\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\})
  | (?P<brackets>\[[^\]]*\])
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)(?![\w:]))
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<space>\s+)
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Selector:
    metric: str  # "" for a bare {...}
    matchers: tuple[tuple[str, str, str], ...]  # (label, operator, value)

    def has(self, label: str, operator: str, value: str) -> bool:
        return (label, operator, value) in self.matchers


def parse_matchers(braces: str) -> tuple[tuple[str, str, str], ...]:
    body = braces[1:-1]
    found = []
    position = 0
    while position < len(body):
        if not body[position:].strip():
            break
        match = MATCHER.match(body, position)
        if match is None:
            raise ValueError(f"cannot read the matchers {braces!r}")
        found.append((match.group(1), match.group(2), match.group(3)))
        position = match.end()
    return tuple(found)


def selectors(expr: str) -> list[Selector]:
    tokens = [(m.lastgroup, m.group()) for m in TOKEN.finditer(expr) if m.lastgroup != "space"]
    found: list[Selector] = []
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else (None, "")
        if kind == "ident" and text in LABEL_LIST_KEYWORDS and following[1] == "(":
            close = next(i for i in range(index + 1, len(tokens)) if tokens[i][1] == ")")
            index = close + 1
            continue
        # a function or aggregation: `rate(`, `sum(`, and `sum by (...) (`
        if kind == "ident" and (text in KEYWORDS or following[1] == "(" or following[1] in ("by", "without")):
            index += 1
            continue
        if kind == "ident":
            if following[0] == "braces":
                found.append(Selector(text, parse_matchers(following[1])))
                index += 2
            else:
                found.append(Selector(text, ()))
                index += 1
            continue
        if kind == "braces":
            found.append(Selector("", parse_matchers(text)))
        index += 1
    return found
