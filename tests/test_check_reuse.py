"""A check's verdict reused between a HostReader's readings: it is the earlier one while every source the check
declares reading (``Check.inputs``) keeps its generation (for a rate, in the previous reading too) and the intent says
the same (``Intent.version``). A source read again and found equal keeps its generation. That a check reads nothing
it does not declare is tests/test_dataflow.py; the end-to-end proof that serve's reuse gives what a fresh evaluation
gives on a changing node is tests/test_render_reuse.py."""

from __future__ import annotations

from numawatch.checks import Check, NotEvaluated, evaluate, require
from numawatch.host import Host, HostReader, SourceSpec
from numawatch.inputs import SELF, Input, Rate, Source
from numawatch.intent import Intent
from numawatch.model import frozen_map
from numawatch.paths import Paths
from numawatch.refresh import EVERY

PATHS = Paths.from_root("/nonexistent")


class Files:
    """Sources whose readings are what the test says: ``values[name]`` (an exception raised as the source's)."""

    def __init__(self, **values: object) -> None:
        self.values = dict(values)
        self.reads = {name: 0 for name in values}

    def spec(self, name: str) -> SourceSpec:
        def read(paths: Paths) -> object:
            self.reads[name] += 1
            value = self.values[name]
            if isinstance(value, Exception):
                raise value
            return value

        return SourceSpec(name, read)

    def reader(self) -> HostReader:
        return HostReader(PATHS, [self.spec(name) for name in self.values],
                          policies=dict.fromkeys(self.values, EVERY))  # fmt: skip


def counting_check(check_id: str, judge, inputs: tuple[Input, ...] = (Source("a"),)) -> tuple[Check, list[int]]:
    runs: list[int] = []

    def run(host: Host, intent: Intent):
        runs.append(1)
        return judge(host, intent, CHECKS[check_id])

    check = Check(check_id, "warning", "a test check", "fix it", run, inputs=inputs)
    CHECKS[check_id] = check
    return check, runs


CHECKS: dict[str, Check] = {}


def reads_a(host: Host, intent: Intent, check: Check):
    value = require(host, "a")
    if value["v"] == "bad":
        yield check.finding(intent, {"cpus": "1"}, "a is bad")


def test_a_verdict_is_reused_while_what_the_check_declares_keeps_its_generation():
    files = Files(a={"v": "good"}, b={"v": 1})
    reader = files.reader()
    check, runs = counting_check("reads_a", reads_a)
    intent = Intent()

    first = evaluate(reader.read(), intent, [check])
    files.values["b"] = {"v": 2}  # a source the check does not read moves
    second = evaluate(reader.read(), intent, [check])
    files.values["a"] = {"v": "bad"}  # the one it reads moves
    third = evaluate(reader.read(), intent, [check])
    fourth = evaluate(reader.read(), intent, [check])

    assert len(runs) == 2  # the first and the third reading
    assert first.findings == second.findings == ()
    assert [finding.message for finding in third.findings] == ["a is bad"] and fourth.findings == third.findings
    assert third.findings == evaluate(files.reader().read(), intent, [check]).findings  # what a fresh reading says


def test_another_intent_or_a_host_without_generations_is_judged_anew():
    files = Files(a={"v": "bad"})
    reader = files.reader()
    check, runs = counting_check("reads_a_again", reads_a)
    host = reader.read()
    evaluate(host, Intent(), [check])
    evaluate(reader.read(), Intent(), [check])  # another object, equal (a reload that changed nothing): reused
    other = evaluate(reader.read(), Intent(severities=frozen_map({"reads_a_again": "info"})), [check])
    plain = Host(paths=PATHS, results={"a": {"v": "bad"}}, statuses={})
    evaluate(plain, Intent(), [check]), evaluate(plain, Intent(), [check])
    assert len(runs) == 4  # the first reading, the other intent, and the Host without generations twice
    assert [finding.severity for finding in other.findings] == ["info"]


def test_a_not_evaluated_verdict_is_reused_and_follows_its_source_coming_back():
    files = Files(a=OSError("gone"))
    reader = files.reader()
    check, runs = counting_check("reads_a_down", reads_a)
    intent = Intent()
    verdicts = []
    for value in (OSError("gone"), OSError("gone"), {"v": "bad"}, {"v": "bad"}):
        files.values["a"] = value
        evaluation = evaluate(reader.read(), intent, [check])
        verdicts.append((len(evaluation.findings), [n.reason for n in evaluation.not_evaluated]))
    assert verdicts == [(0, ["needs the a source: gone"])] * 2 + [(1, [])] * 2
    assert len(runs) == 2  # down for the same reason keeps the generation; back up moves it


def test_a_rate_is_judged_again_when_the_previous_reading_moves_and_a_failed_check_at_every_reading():
    files = Files(a={"v": 1})
    reader = files.reader()

    def rate_of_a(host: Host, intent: Intent, check: Check):
        if host.previous is None:
            raise NotEvaluated("needs two readings")
        now, before = require(host, "a")["v"], host.previous.get("a")["v"]
        return [check.finding(intent, {"cpus": "1"}, f"a moved by {now - before}")] if now != before else []

    def broken(host: Host, intent: Intent, check: Check):
        require(host, "a")
        raise RuntimeError("a bug")

    rate, rate_runs = counting_check("rate", rate_of_a, inputs=(Rate(Source("a")),))
    bug, bug_runs = counting_check("bug", broken)
    intent = Intent()
    messages = []
    for value in (1, 1, 1, 3, 3):
        files.values["a"] = {"v": value}
        evaluation = evaluate(reader.read(), intent, [rate, bug])
        messages.append([finding.message for finding in evaluation.findings])
    # Judged at the first reading (no previous), the second (the previous reading is there now), then reused until
    # a moves (the fourth) and once more when the previous reading is the one where it moved (the fifth).
    assert messages == [[], [], [], ["a moved by 2"], []]
    assert (len(rate_runs), len(bug_runs)) == (4, 5)
    assert [n.reason for n in evaluation.not_evaluated] == ["internal error: RuntimeError: a bug"]


def test_a_check_that_declares_numawatchs_own_state_is_judged_at_every_reading():
    files = Files(a={"v": "bad"})
    reader = files.reader()
    check, runs = counting_check("reads_a_and_its_own", reads_a, inputs=(Source("a"), SELF))
    for _ in range(3):
        evaluate(reader.read(), Intent(), [check])
    assert len(runs) == 3


def test_a_source_read_again_and_found_equal_keeps_its_generation_and_hands_out_the_last_snapshot():
    files = Files(a={"v": 1})
    reader = files.reader()
    hosts = [reader.read() for _ in range(2)]
    files.values["a"] = {"v": 2}
    hosts.append(reader.read())

    assert files.reads["a"] == 3  # read every time: only what it found decides
    assert [host.generation("a") for host in hosts] == [1, 1, 2]
    assert hosts[1].get("a") is hosts[0].get("a") and not hosts[1].statuses["a"].cached  # it was read
    assert hosts[2].get("a") == {"v": 2} and not hosts[2].statuses["a"].cached


def test_a_check_that_declares_nothing_of_the_host_is_judged_at_every_reading():
    files = Files(a={"v": "good"})
    reader = files.reader()
    outside = ["fires"]

    def elsewhere(host: Host, intent: Intent, check: Check):
        return [check.finding(intent, {"cpus": "1"}, "seen")] if outside else []

    check, runs = counting_check("elsewhere", elsewhere, inputs=())
    intent = Intent()
    first = evaluate(reader.read(), intent, [check])
    outside.clear()
    second = evaluate(reader.read(), intent, [check])
    assert len(runs) == 2 and len(first.findings) == 1 and second.findings == ()
