"""What kernels print around an attribute's value, and how numawatch takes it off.

A sysfs or procfs attribute is its value and a newline, but real kernels add more, and all of it means nothing:

- trailing NUL bytes left in the page: every ``nodeN/cpulist`` and ``cpuN/topology/*_list`` of an ARM 5.15 kernel
  reads ``0-31\\n\\0`` (hwloc's ``128arm-2pa2n8cluster4co`` tree), ``node/online`` of several x86 kernels ``0-3\\n\\0``;
- a mask that was never allocated: ``cpu/nohz_full`` without the ``nohz_full=`` parameter reads ``\\0\\n`` on
  RHEL/CentOS 7 and ``  (null)\\n`` (printk of a NULL pointer, padded) on Debian's 6.1; a PCI device's
  ``driver_override`` reads ``(null)`` when none is set.

Parsers strip ``PADDING`` from both ends of a value (never from its inside: ``0-3\\0,5`` stays malformed) and treat
``NULL_VALUE`` as "none" where the kernel prints it for an unset value.
"""

from __future__ import annotations

PADDING = " \t\n\r\x0b\x0c\x00"
NULL_VALUE = "(null)"


def strip_value(text: str) -> str:
    """The value of an attribute without the white space and NUL bytes kernels put around it."""
    return text.strip(PADDING)


def is_null(text: str) -> bool:
    """True for what a kernel prints for a value it never set: nothing, NULs, ``(null)``."""
    stripped = strip_value(text)
    return not stripped or stripped == NULL_VALUE
