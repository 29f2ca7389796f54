"""Node taints and labels as Kubernetes spells them: the one parser for ``key=value:Effect`` and ``key=value``.

The syntax is kubectl's and the kubelet's ``--register-with-taints`` / ``--node-labels`` (and RKE2's ``node-taint`` /
``node-label``, which RKE2 hands to the kubelet as those flags):

- a taint is ``key[=value]:Effect`` with Effect one of ``NoSchedule``, ``PreferNoSchedule``, ``NoExecute``;
- a label is ``key=value``; a key is a qualified name with an optional DNS-subdomain prefix
  (``nvidia.com/gpu``, ``node-role.kubernetes.io/worker``), a value at most 63 characters of ``[A-Za-z0-9._-]``
  starting and ending alphanumeric, or empty.

What these parsers accept is exactly what may reach a label or a message, so a value from a file is validated here
before numawatch says anything about it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_NAME = r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
_KEY = re.compile(rf"({_PREFIX}/)?{_NAME}\Z", re.ASCII)
_VALUE = re.compile(rf"({_NAME})?\Z", re.ASCII)


class TaintError(ValueError):
    """Not a taint or label Kubernetes would accept; the message says what was wrong."""


@dataclass(frozen=True, order=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def _key(key: str, what: str) -> str:
    if len(key) > 317 or not _KEY.match(key) or len(key.rpartition("/")[0]) > 253:
        raise TaintError(f"{what} key {key[:80]!r} is not a qualified name such as nvidia.com/gpu")
    return key


def _value(value: str, what: str) -> str:
    if not _VALUE.match(value):
        raise TaintError(f"{what} value {value[:80]!r} is not a label value (63 characters of A-Z a-z 0-9 . _ -)")
    return value


def parse_taint(text: str) -> Taint:
    """``nvidia.com/gpu=present:NoSchedule`` (or ``key:Effect``) -> Taint."""
    spec = text.strip()
    body, colon, effect = spec.rpartition(":")
    if not colon:
        raise TaintError(f"taint {spec[:80]!r} has no effect (expected key=value:NoSchedule)")
    if effect not in TAINT_EFFECTS:
        raise TaintError(f"taint {spec[:80]!r}: effect {effect[:40]!r} is not one of {', '.join(TAINT_EFFECTS)}")
    key, _, value = body.partition("=")
    return Taint(_key(key, "taint"), _value(value, "taint"), effect)


def parse_label(text: str) -> tuple[str, str]:
    """``fibercli.local/numa-pinned=true`` -> (key, value)."""
    spec = text.strip()
    key, equals, value = spec.partition("=")
    if not equals:
        raise TaintError(f"label {spec[:80]!r} has no value (expected key=value)")
    return _key(key, "label"), _value(value, "label")


def parse_taints(text: str) -> list[Taint]:
    """A comma-separated list, as ``--register-with-taints`` takes it."""
    return [parse_taint(part) for part in text.split(",") if part.strip()]


def parse_labels(text: str) -> dict[str, str]:
    """A comma-separated list, as ``--node-labels`` takes it (a later key wins)."""
    labels: dict[str, str] = {}
    for part in text.split(","):
        if part.strip():
            key, value = parse_label(part)
            labels[key] = value
    return labels


__all__ = ["TAINT_EFFECTS", "Taint", "TaintError", "parse_label", "parse_labels", "parse_taint", "parse_taints"]
