"""tests/promql_selectors.py: the selectors found in expressions of every shape the rules and dashboards use."""

from __future__ import annotations

import pytest
from promql_selectors import Selector, selectors


def test_aggregations_joins_and_functions_are_not_selectors():
    expr = (
        'count by (cluster, node, instance, check) (numawatch_drift{job="numawatch", check=~"a|b"})\n'
        "unless on (cluster, node) (kube_node_spec_unschedulable == 1)\n"
        'unless on (cluster, node) kube_node_spec_taint{key=~"ToBeDeleted"}'
    )
    assert selectors(expr) == [
        Selector("numawatch_drift", (("job", "=", "numawatch"), ("check", "=~", "a|b"))),
        Selector("kube_node_spec_unschedulable", ()),
        Selector("kube_node_spec_taint", (("key", "=~", "ToBeDeleted"),)),
    ]


def test_strings_ranges_group_modifiers_and_numbers_are_skipped():
    expr = (
        "(max by (instance, gpu) (rate(numawatch_gpu_busy_seconds_total{instance=~\"$instance\"}[$__rate_interval]))"
        " > bool 0.5) * on (instance, gpu) group_right () "
        'label_replace(cluster:numawatch_nodes:count, "resource", "cpu", "", "") or vector(1e12) - time()'
    )
    assert [s.metric for s in selectors(expr)] == ["numawatch_gpu_busy_seconds_total", "cluster:numawatch_nodes:count"]
    assert selectors(expr)[0].has("instance", "=~", "$instance")


def test_a_bare_matcher_set_and_escaped_quotes():
    (found,) = selectors(r'{__name__=~"numawatch_.+", value="a \"quoted\" b, c"}')
    assert found == Selector("", (("__name__", "=~", "numawatch_.+"), ("value", "=", r"a \"quoted\" b, c")))


def test_unreadable_matchers_are_an_error_not_a_pass():
    with pytest.raises(ValueError):
        selectors("up{job=numawatch}")
