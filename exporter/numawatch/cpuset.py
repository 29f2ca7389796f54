"""The one parser and formatter for Linux CPU (and NUMA node) lists and masks.

Formats (Documentation/admin-guide/cgroup-v2.rst, "cpuset.cpus"; lib/bitmap.c `bitmap_parselist`):
- list: ``0-3,8,10-11``; ranges may carry a stride as in ``0-15:2/4`` (used in isolcpus= on some kernels);
  an empty string is the empty set.
- mask: comma-separated 32-bit hex words, most significant first (``/proc/irq/N/smp_affinity``):
  ``00000000,0000000f`` is CPUs 0-3.
"""

from __future__ import annotations

from collections.abc import Iterable

from numawatch.hosttext import excerpt, strip_value

CPUSet = frozenset[int]
EMPTY: CPUSet = frozenset()

# A cap so a hostile or corrupt file such as "0-4294967295" cannot make us allocate gigabytes.
MAX_CPU_ID = 65535
_HEX_DIGITS = "0123456789abcdefABCDEF"


class CPUListError(ValueError):
    """A CPU list or mask that is not in the kernel's format."""


def parse_cpulist(text: str) -> CPUSet:
    """Parse a kernel CPU list (``0-3,8,10-11``) into a frozenset; raise CPUListError on bad input.

    White space and NUL bytes around the list are what kernels print around values (hosttext.py), not part of it.
    """
    text = strip_value(text)
    if not text:
        return EMPTY
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CPUListError(f"empty element in CPU list {excerpt(text)}")
        stride_group = 1
        stride_used = 0
        if ":" in part:
            part, _, stride = part.partition(":")
            used, _, group = stride.partition("/")
            used_number, group_number = _decimal(used), _decimal(group)
            if used_number is None or group_number is None:
                raise CPUListError(f"bad stride {excerpt(stride)} in CPU list {excerpt(text)}")
            stride_used, stride_group = used_number, group_number
            if stride_used <= 0 or stride_group <= 0 or stride_used > stride_group:
                raise CPUListError(f"bad stride {excerpt(stride)} in CPU list {excerpt(text)}")
        lo_text, sep, hi_text = part.partition("-")
        lo = _decimal(lo_text)
        hi = _decimal(hi_text) if sep else lo
        if lo is None or hi is None:
            raise CPUListError(f"bad element {excerpt(part)} in CPU list {excerpt(text)}")
        if lo < 0 or hi < lo or hi > MAX_CPU_ID:
            raise CPUListError(f"bad range {excerpt(part)} in CPU list {excerpt(text)}")
        if stride_used:
            cpus.update(c for c in range(lo, hi + 1) if (c - lo) % stride_group < stride_used)
        else:
            cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def _decimal(text: str) -> int | None:
    """A plain ASCII decimal, or None. int() alone would also take "+3", "1_0" and non-ASCII digits."""
    text = text.strip()
    if not text or not text.isascii() or not text.isdigit():
        return None
    try:
        return int(text)
    except ValueError:  # more digits than int() converts (4,300): no CPU number, just a corrupt file
        return None


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPUs as the kernel does: sorted, consecutive runs collapsed (``0-3,8,10-11``)."""
    ordered = sorted(set(cpus))
    if not ordered:
        return ""
    parts: list[str] = []
    start = prev = ordered[0]
    for cpu in ordered[1:]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = cpu
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def parse_cpumask(text: str) -> CPUSet:
    """Parse a kernel hex CPU mask (``ff,00000001``) into a frozenset.

    Each comma-separated group is one 32-bit word; the kernel pads every group but the first to 8 digits, but the
    groups are decoded one by one so that a short group (``1,0``: CPU 32) is not silently shifted.
    """
    stripped = strip_value(text)
    if not stripped:
        return EMPTY
    groups = stripped.split(",")
    if len(groups) * 32 > MAX_CPU_ID + 1:
        raise CPUListError(f"CPU mask {excerpt(stripped)} is longer than {MAX_CPU_ID + 1} bits")
    value = 0
    for group in groups:
        if not 0 < len(group) <= 8 or not group.isascii() or group.strip(_HEX_DIGITS):
            raise CPUListError(f"bad CPU mask {excerpt(stripped)}")
        value = (value << 32) | int(group, 16)
    # bin() walks the bits in C; a Python shift loop is quadratic on the 384-bit masks of /proc/irq/*/smp_affinity.
    bits = bin(value)[:1:-1]
    return frozenset(cpu for cpu, bit in enumerate(bits) if bit == "1")

