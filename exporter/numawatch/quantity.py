"""Kubernetes resource quantities ("2Gi", "512Mi", "1G", "100m", "1e3", plain numbers) as exact numbers.

Format (k8s.io/apimachinery/pkg/api/resource/quantity.go, ``ParseQuantity``)::

    <quantity> ::= <sign><digits><suffix>          e.g. "1.5Gi", "-100m", "+3"
    <digits>   ::= digits | digits.digits | .digits | digits.
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei          (powers of 1024)
                 | n | u | m | "" | k | M | G | T | P | E   (powers of 1000; note lowercase k, uppercase M)
                 | e<signed int> | E<signed int>        (decimal exponent: "1e3" = 1000, but "1E" = 10^18)

Values are kept as ``Fraction`` so "0.1Gi" or "1.5m" are exact; converting to an integer rounds *away from zero*,
as ``Quantity.Value()`` / ``MilliValue()`` do, so a request of "1.5" bytes is 2 bytes to the kubelet and to us.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = [
    "QuantityError",
    "format_binary",
    "hugepage_resource_name",
    "hugepage_size_bytes",
    "parse_quantity",
    "quantity_bytes",
    "quantity_millis",
]

_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# The number and the suffix, split the way the apimachinery parser does: a number made of ASCII digits with at most
# one dot (at least one digit somewhere), then everything else is the suffix.
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)", re.ASCII | re.DOTALL)
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)", re.ASCII)
# apimachinery refuses exponents this large as well (and 10**huge would be a memory bomb).
_MAX_EXPONENT = 100
# No resource comes near this many digits (apimachinery keeps 63-bit values plus a scale); a longer number is a
# corrupt file, and int() refuses more than 4,300 digits anyway.
_MAX_DIGITS = 100


class QuantityError(ValueError):
    """A string that is not a Kubernetes resource quantity."""


def parse_quantity(text: str | int) -> Fraction:
    """The exact value of a quantity: ``parse_quantity("1.5Gi") == 1610612736``. Raises QuantityError."""
    if isinstance(text, bool):  # bool is an int subclass; True is not a quantity
        raise QuantityError(f"expected a quantity, got {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if not isinstance(text, str):
        raise QuantityError(f"expected a quantity, got {type(text).__name__}")
    stripped = text.strip()
    match = _QUANTITY.fullmatch(stripped)
    if not stripped or match is None:
        raise QuantityError(f"quantity {text!r} is empty or not a number")
    sign, whole, fraction, suffix = match.groups()
    fraction = fraction or ""
    if not whole and not fraction:
        raise QuantityError(f"quantity {text!r} has no digits")
    if len(whole) + len(fraction) > _MAX_DIGITS:  # int() would refuse it with a bare ValueError
        raise QuantityError(f"quantity {text[:40]!r}... has more than {_MAX_DIGITS} digits")
    number = Fraction(int(whole or "0")) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
    if sign == "-":
        number = -number
    return number * _multiplier(suffix, text)


def _multiplier(suffix: str, text: str) -> Fraction:
    if suffix in _BINARY:
        return Fraction(_BINARY[suffix])
    if suffix in _DECIMAL:
        return _DECIMAL[suffix]
    exponent = _EXPONENT.fullmatch(suffix)
    if exponent is None:
        raise QuantityError(f"quantity {text!r} has an unknown suffix {suffix!r}")
    digits = exponent.group(1)
    power = int(digits) if len(digits) <= 6 else _MAX_EXPONENT + 1  # int() refuses 4,300 digits with a ValueError
    if abs(power) > _MAX_EXPONENT:
        raise QuantityError(f"quantity {text!r} has an exponent out of range")
    return Fraction(10) ** power


def _round_away_from_zero(value: Fraction) -> int:
    if value >= 0:
        return -((-value.numerator) // value.denominator)
    return -_round_away_from_zero(-value)


def quantity_bytes(text: str | int) -> int:
    """A quantity as an integer (bytes, pages, CPUs), rounded away from zero like ``Quantity.Value()``."""
    return _round_away_from_zero(parse_quantity(text))


def quantity_millis(text: str | int) -> int:
    """A quantity in thousandths ("100m" -> 100, "2" -> 2000), rounded away from zero like ``MilliValue()``."""
    return _round_away_from_zero(parse_quantity(text) * 1000)


def format_binary(value: int) -> str:
    """The canonical binary-SI form of a byte count: the largest power of 1024 that divides it (2097152 -> "2Mi").

    This is how the kubelet names huge page resources (``HugePageResourceName``) and how the fake host writes sizes.
    """
    if value == 0:
        return "0"
    suffix = ""
    for name in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if value % 1024:
            break
        value //= 1024
        suffix = name
    return f"{value}{suffix}"


def hugepage_resource_name(size_kb: int) -> str:
    """The resource name of a huge page size given in kB as sysfs does (2048 -> "hugepages-2Mi")."""
    return f"hugepages-{format_binary(size_kb * 1024)}"


def hugepage_size_bytes(resource: str) -> int | None:
    """The page size in bytes of a ``hugepages-<quantity>`` resource name, None for any other name."""
    prefix = "hugepages-"
    if not resource.startswith(prefix):
        return None
    try:
        size = quantity_bytes(resource[len(prefix) :])
    except QuantityError:
        return None
    return size if size > 0 else None
