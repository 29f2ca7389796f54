"""Placeholder: checks of this module land with their issue."""

from __future__ import annotations

from numawatch.checks import Check

CHECKS: tuple[Check, ...] = ()
