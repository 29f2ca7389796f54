"""What a value read from a host file may look like before numawatch repeats it.

Values from files become ``/metrics`` labels, landing-page rows, log lines, check messages and a capture bundle's
``check.json``. The host tree is input numawatch does not control (a bundle attached to a ticket, a compromised
container runtime writing its state), so no value is repeated unless it has the shape the kernel or the kubelet
can print for that field: an allow-list where the set is closed (policies), a strict pattern where it is not
(governor names, Kubernetes names). Anything else is malformed, and the message that says so carries only
``excerpt()``: an escaped, short ``repr()``.

Sources call these while parsing: a ``ValueError`` from here is what their parsers already turn into
``MalformedFile(path, what)``.

Before any of that, a value is taken off what real kernels print around it (``strip_value``), which means nothing:

- trailing NUL bytes left in the page: every ``nodeN/cpulist`` and ``cpuN/topology/*_list`` of an ARM 5.15 kernel
  reads ``0-31\\n\\0`` (hwloc's ``128arm-2pa2n8cluster4co`` tree), ``node/online`` of several x86 kernels
  ``0-3\\n\\0``;
- a mask that was never allocated: ``cpu/nohz_full`` without the ``nohz_full=`` parameter reads ``\\0\\n`` on
  RHEL/CentOS 7 and ``  (null)\\n`` (printk of a NULL pointer, padded) on Debian's 6.1; a PCI device's
  ``driver_override`` reads ``(null)`` when none is set (``is_null``).

Padding is taken off both ends of a value, never its inside: ``0-3\\0,5`` stays malformed.

Where a value is repeated although it was not checked (a checkpoint's pod UIDs and container names are decoded
as the kubelet decodes them: any string, for the checksum), it is named by ``pod_uid_shown``, ``k8s_label_shown``
or ``k8s_subdomain_shown``: the value when it fits its Kubernetes grammar, else its excerpt. And whatever reaches a
terminal or a page passes ``escaped`` last (``report``'s table, ``server``'s landing page; the log has
``logformat``'s escaping): no control character (ESC, BEL, a newline that would forge a line) is ever written raw.
"""

from __future__ import annotations

import re
from collections.abc import Collection

__all__ = [
    "EXCERPT_CHARS",
    "NULL_VALUE",
    "PADDING",
    "SHOWN_CHARS",
    "checked",
    "escaped",
    "excerpt",
    "is_null",
    "k8s_label",
    "k8s_label_shown",
    "k8s_subdomain",
    "k8s_subdomain_shown",
    "one_of",
    "pod_uid",
    "pod_uid_shown",
    "printable",
    "shown",
    "strip_value",
]

EXCERPT_CHARS = 40  # of the value itself; repr() escapes and quotes on top of that
# What a terminal line or a page cell takes of one text (a finding's message, a source's reason).
SHOWN_CHARS = 4096
PADDING = " \t\n\r\x0b\x0c\x00"
NULL_VALUE = "(null)"


def strip_value(text: str) -> str:
    """The value of an attribute without the white space and NUL bytes kernels put around it."""
    return text.strip(PADDING)


def is_null(text: str) -> bool:
    """True for what a kernel prints for a value it never set: nothing, NULs, ``(null)``."""
    stripped = strip_value(text)
    return not stripped or stripped == NULL_VALUE


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr()`` of the first ``limit`` characters (bytes) of ``value``, ``...`` after it when there was more: what
    a message may quote of a malformed value. Anything else (a number, a YAML list) is its ``repr()``, cut."""
    if isinstance(value, (str, bytes)):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}..."
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def shown(value: str, limit: int = 2 * EXCERPT_CHARS) -> str:
    """``value`` as it is when it is short printable text, else its ``excerpt()``: for messages that name a value
    the way the file spells it (``write cpu-manager-policy=static``)."""
    return value if len(value) <= limit and value.isprintable() else excerpt(value, limit)


def escaped(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` for a terminal or a page: every character Python does not call printable (control characters such as
    ESC, BEL, newline and tab; bidirectional overrides; line separators) written as its ``\\x``/``\\u`` escape, and at
    most ``limit`` characters of it (``...`` after a cut)."""
    if len(text) <= limit and text.isprintable():
        return text
    cut = text[:limit]
    shown = "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in cut)
    return shown + "..." if len(text) > limit else shown


def checked(value: str, pattern: re.Pattern[str], what: str) -> str:
    """``value`` when ``pattern`` matches all of it, else ValueError naming ``what`` with an excerpt."""
    if pattern.fullmatch(value) is None:
        raise ValueError(f"{what} {excerpt(value)} is not one the kernel or the kubelet would write")
    return value


def one_of(value: str, allowed: Collection[str], what: str) -> str:
    """``value`` when it is one of ``allowed``, else ValueError listing them."""
    if value not in allowed:
        raise ValueError(f"{what} {excerpt(value)} is not one of {', '.join(sorted(allowed))}")
    return value


def printable(value: str, what: str, limit: int) -> str:
    """``value`` when it is printable text (no control characters: no newline, tab, escape or NUL) of at most
    ``limit`` characters: the kernel's free-form names (IRQ actions, a device's model)."""
    if len(value) > limit:
        raise ValueError(f"{what} {excerpt(value)} is longer than {limit} characters")
    if not value.isprintable():
        raise ValueError(f"{what} {excerpt(value)} holds control characters")
    return value


# Kubernetes names (k8s.io/apimachinery validation): a namespace and a container name are DNS-1123 labels, a pod
# name a DNS-1123 subdomain. A pod UID is a UUID, or 32 hex digits for a static pod (a hash of its manifest).
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")


def k8s_label(value: str, what: str) -> str:
    """A namespace or container name (DNS-1123 label: lower-case alphanumerics and ``-``, at most 63)."""
    return checked(value, _LABEL, what)


def k8s_subdomain(value: str, what: str) -> str:
    """A pod name (DNS-1123 subdomain: labels joined by ``.``, at most 253 characters)."""
    return checked(value, _SUBDOMAIN, what)


def pod_uid(value: str, what: str = "pod UID") -> str:
    return checked(value, _UID, what)


def pod_uid_shown(value: str) -> str:
    """A pod UID as a message may name it: as it is when it is one, else its excerpt (escaped, quoted, short)."""
    return value if _UID.fullmatch(value) else excerpt(value)


def k8s_label_shown(value: str) -> str:
    """A namespace or container name as a message may name it (``pod_uid_shown``)."""
    return value if _LABEL.fullmatch(value) else excerpt(value)


def k8s_subdomain_shown(value: str) -> str:
    """A pod name as a message may name it (``pod_uid_shown``)."""
    return value if _SUBDOMAIN.fullmatch(value) else excerpt(value)
