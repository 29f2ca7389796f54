"""Kubernetes resource quantities: every suffix family, exactness, rounding, and the strings that are refused."""

from __future__ import annotations

from fractions import Fraction

import pytest
from numawatch.quantity import (
    QuantityError,
    format_binary,
    hugepage_resource_name,
    hugepage_size_bytes,
    parse_quantity,
    quantity_bytes,
    quantity_millis,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2Gi", 2 * 1024**3),
        ("512Mi", 512 * 1024**2),
        ("1Ki", 1024),
        ("1Ti", 1024**4),
        ("1Pi", 1024**5),
        ("1Ei", 1024**6),
        ("1G", 10**9),
        ("1M", 10**6),
        ("1k", 1000),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),  # a bare E is exa, not an exponent
        ("1e3", 1000),
        ("1E3", 1000),
        ("2e+2", 200),
        ("1073741824", 1073741824),
        ("0", 0),
        ("+5", 5),
        ("1.5Gi", 1610612736),
        (".5Ki", 512),
        ("5.", 5),
        (" 4Gi ", 4 * 1024**3),
        (4096, 4096),
    ],
)
def test_quantity_bytes_reads_every_suffix_family(text, expected):
    assert quantity_bytes(text) == expected


def test_quantities_are_exact_fractions():
    assert parse_quantity("0.1") == Fraction(1, 10)
    assert parse_quantity("100m") == Fraction(1, 10)
    assert parse_quantity("1n") == Fraction(1, 10**9)
    assert parse_quantity("-1.5") == Fraction(-3, 2)


@pytest.mark.parametrize(
    ("text", "millis"),
    [("100m", 100), ("2", 2000), ("1.5", 1500), ("250u", 1), ("0", 0), ("1500m", 1500)],
)
def test_quantity_millis_rounds_up_like_milli_value(text, millis):
    assert quantity_millis(text) == millis


def test_fractional_bytes_round_away_from_zero_like_value():
    assert quantity_bytes("1.5") == 2
    assert quantity_bytes("100m") == 1
    assert quantity_bytes("-1.5") == -2


@pytest.mark.parametrize(
    "text",
    ["", "   ", "Gi", "1.2.3", "1K", "1gi", "1Gib", "1e", "1e1.5", "abc", "--1", "1 Gi", "0x10", "1e999", "١"],
)
def test_malformed_quantities_are_refused_with_the_text(text):
    with pytest.raises(QuantityError) as error:
        parse_quantity(text)
    assert repr(text) in str(error.value) or "empty" in str(error.value)


@pytest.mark.parametrize("value", [True, None, 1.5, ["1Gi"]])
def test_non_string_quantities_are_refused(value):
    with pytest.raises(QuantityError):
        parse_quantity(value)


@pytest.mark.parametrize(
    ("size", "text"),
    [(2 * 1024**2, "2Mi"), (1024**3, "1Gi"), (1536 * 1024**2, "1536Mi"), (65536, "64Ki"), (512, "512"), (0, "0")],
)
def test_format_binary_uses_the_largest_exact_binary_suffix(size, text):
    assert format_binary(size) == text
    assert quantity_bytes(text) == size


def test_hugepage_resource_names_follow_the_kubelet():
    assert hugepage_resource_name(2048) == "hugepages-2Mi"
    assert hugepage_resource_name(1048576) == "hugepages-1Gi"
    assert hugepage_size_bytes("hugepages-1Gi") == 1024**3
    assert hugepage_size_bytes("hugepages-2Mi") == 2 * 1024**2
    assert hugepage_size_bytes("memory") is None
    assert hugepage_size_bytes("hugepages-lots") is None
    assert hugepage_size_bytes("hugepages-0") is None
