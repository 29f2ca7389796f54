"""What rendering a sequence of evaluations keeps between them lives in its owner (metrics.Memory, the server's
renderer), not in module globals: a label outside its check's contract is logged once per owner."""

from __future__ import annotations

import logging

from numawatch import metrics
from numawatch.checks import Evaluation, Finding
from numawatch.host import Host
from numawatch.intent import REFERENCE
from numawatch.paths import Paths


def evaluation_with(labels: dict[str, str]) -> Evaluation:
    host = Host(paths=Paths.from_root("/nonexistent"), results={}, statuses={})
    finding = Finding("container_not_exclusive", "warning", labels, "message", "remediation")
    return Evaluation(host=host, intent=REFERENCE, findings=(finding,), not_evaluated=(), checks=())


def test_a_label_outside_the_contract_is_logged_once_per_owner_and_not_exported(caplog):
    evaluation = evaluation_with({"namespace": "ns", "pod": "p", "container": "c", "surprise": "x"})
    memory = metrics.Memory()

    with caplog.at_level(logging.WARNING, logger="numawatch.metrics.drift"):
        text = metrics.exposition.write(metrics.families(evaluation, memory=memory)).decode()
        metrics.families(evaluation, memory=memory)
    assert caplog.text.count("label surprise is in no part of its label contract") == 1
    assert "surprise" not in text

    with caplog.at_level(logging.WARNING, logger="numawatch.metrics.drift"):
        metrics.families(evaluation, memory=metrics.Memory())  # another owner (another server) logs it too
    assert caplog.text.count("label surprise is in no part of its label contract") == 2


def test_labels_of_the_contract_are_not_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="numawatch.metrics.drift"):
        metrics.families(evaluation_with({"namespace": "ns", "pod": "p", "container": "c"}))
    assert "label contract" not in caplog.text
