"""Staggered refresh for the stateful readers serve keeps (cgroups, irqs, kernel).

A staggered reader re-reads its slow-drifting files for a rotating 1/``share`` of its objects per reading and carries
the rest over from the previous reading (HostReader's ``stagger``; serve only). ``refresh_all`` makes the next
reading complete once: HostReader calls it when the source is invalidated (SIGHUP, or a CPU coming or going, which
moves IRQs and cpufreq policies), so what an operator or the kernel just changed is not up to ``share - 1``
readings old.
"""

from __future__ import annotations


class Staggered:
    """The bookkeeping of a staggered reader: the share, the reading counter and a pending full reading."""

    def __init__(self) -> None:
        self.stagger = 1
        self.readings = 0
        self._full_next = False

    def set_stagger(self, share: int) -> None:
        """Read 1/``share`` of the staggered files per reading (1: all of them, the default)."""
        if share < 1:
            raise ValueError(f"stagger must be at least 1, got {share}")
        self.stagger = share

    def refresh_all(self) -> None:
        """Make the next reading read everything, whatever the stagger."""
        self._full_next = True

    def next_turn(self) -> tuple[int, int]:
        """(share, turn) for the reading about to start: objects whose turn it is are read, the others carried over;
        (1, 0) reads everything."""
        share = 1 if self._full_next else self.stagger
        self._full_next = False
        turn = self.readings % share
        self.readings += 1
        return share, turn


__all__ = ["Staggered"]
