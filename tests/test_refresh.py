"""The refresh table and the HostReader's one mechanism for incrementality: every registry source has its policy
there and it matches what the source offers; the turns, the share and the whole reading after an invalidation are
the HostReader's; a source holds nothing between readings (its memory is handed back by the HostReader); and what
the table does not rotate is read in full whatever the stagger."""

from __future__ import annotations

import pytest
from fakehost.kernel import FakeIrq, add_irqs
from numawatch.host import HostReader, Inputs, SourceSpec
from numawatch.paths import Paths
from numawatch.refresh import (
    AFFINITIES,
    BUNDLE_CONFIGS,
    EVERY,
    FULL,
    GOVERNORS,
    IDLE_STATES,
    PLACEMENT,
    POD_LOG_DIRS,
    POD_USAGE,
    POLICIES,
    REQUESTED_MASKS,
    SHARED_PODS,
    Carried,
    Policy,
    Refresh,
    Turns,
    policy_of,
    turn_since,
)
from numawatch.sources import SOURCES, irqs

K = 4
PATHS = Paths.from_root("/nonexistent")
# The sources whose per-HostReader object holds a per-process resource (a library session, perf events, the
# Kubernetes API session), not something a reading could carry.
PER_PROCESS = {"nvml", "amdsmi", "hlml", "processes", "intersocket", "kubernetes_api"}


def test_every_registry_source_has_a_policy_that_matches_what_it_offers():
    assert {spec.name for spec in SOURCES} == set(POLICIES)
    for spec in SOURCES:
        policy = POLICIES[spec.name]
        assert policy.on_change == (spec.fingerprint is not None), spec.name
        if policy.rotating:
            assert spec.incremental is not None, f"{spec.name} rotates but does not read incrementally"


def test_no_source_keeps_an_object_between_readings_but_those_holding_per_process_resources():
    assert {spec.name for spec in SOURCES if spec.factory is not None} == PER_PROCESS
    assert not any(spec.incremental is not None for spec in SOURCES if spec.name in PER_PROCESS)


def test_a_source_missing_from_the_table_is_read_on_change_with_a_fingerprint_and_else_every_time():
    assert policy_of("new", has_fingerprint=True, table={}) == Policy(on_change=True)
    assert policy_of("new", has_fingerprint=False, table={}) == EVERY
    with pytest.raises(ValueError, match="not both"):
        Policy(on_change=True, rotating=frozenset({"x"}))


def test_the_turn_comes_round_every_k_readings_and_a_family_not_rotated_is_read_whole():
    turns = Turns(K)
    policy = Policy(rotating=frozenset({"a"}))
    seen = []
    memory = object()
    for _ in range(2 * K):
        refresh = turns.refresh("s", policy, memory)
        seen.append(refresh.rotation("a"))
        assert refresh.rotation("b") == (1, 0) and refresh.due("b", 3)
        turns.advance()
    assert seen == [(K, turn % K) for turn in range(2 * K)]
    assert [Refresh(share=K, turn=t, rotating=frozenset({"a"})).due("a", 6) for t in range(K)] == [
        t == 6 % K for t in range(K)
    ]
    assert FULL.rotation("a") == (1, 0) and FULL.whole and FULL.memory is None


def test_an_object_visited_at_some_readings_only_is_due_at_the_first_visit_after_its_turn():
    turns = Turns(K)
    policy = Policy(rotating=frozenset({"a"}))
    memory = object()
    last, reads = 0, []
    for reading in range(1, 6 * K):
        turns.advance()
        refresh = turns.refresh("s", policy, memory)
        share, _ = refresh.rotation("a")
        if reading % 3 == 0 and turn_since(share, 1, refresh.readings, last):  # visited at one reading in three
            reads.append(reading)
            last = reading
    # its turns are readings 1, 5, 9, 13, 17, 21; it is read at the first visit after each
    assert reads == [3, 6, 9, 15, 18, 21]
    assert turn_since(FULL.rotation("a")[0], 1, FULL.readings, 10)  # not rotating: always due


def test_a_stretched_family_turns_over_its_multiple_of_k_readings_while_the_others_keep_k():
    turns = Turns(K)
    policy = Policy(rotating=frozenset({"slow", "fast"}), stretch={"slow": 3})
    memory = object()
    due_slow: dict[int, list[int]] = {key: [] for key in range(3 * K)}
    for reading in range(2 * 3 * K):
        refresh = turns.refresh("s", policy, memory)
        assert refresh.rotation("fast") == (K, reading % K)
        assert refresh.rotation("slow") == (3 * K, reading % (3 * K))
        assert refresh.round_of("slow") == reading // (3 * K) and refresh.round_of("fast") == reading // K
        for key in due_slow:
            if refresh.due("slow", key):
                due_slow[key].append(reading)
        turns.advance()
    # Each object of the stretched family is read exactly once per round of 3K readings, 3K readings apart.
    assert all(len(at) == 2 and at[1] - at[0] == 3 * K for at in due_slow.values())
    # Unstaggered, or a whole reading: the stretch changes nothing, everything is read.
    assert Turns(1).refresh("s", policy, memory).rotation("slow") == (1, 0)
    whole = Turns(K)
    whole.read_everything_next("s")
    assert whole.refresh("s", policy, memory).rotation("slow") == (1, 0)


def test_only_a_rotating_family_may_be_stretched_and_only_by_a_whole_number():
    with pytest.raises(ValueError, match="stretch"):
        Policy(rotating=frozenset({"a"}), stretch={"b": 2})
    with pytest.raises(ValueError, match="stretch"):
        Policy(rotating=frozenset({"a"}), stretch={"a": 0})
    stretched = {(name, family) for name, policy in POLICIES.items() for family in policy.stretch}
    assert stretched == {
        ("irqs", AFFINITIES),
        ("irqs", REQUESTED_MASKS),
        ("kernel", GOVERNORS),
        ("cpuidle", IDLE_STATES),
        ("cgroups", PLACEMENT),
        ("cgroups", SHARED_PODS),
        ("names", BUNDLE_CONFIGS),
        ("names", POD_LOG_DIRS),
        ("pod_usage", POD_USAGE),
    }


def test_an_irqs_requested_masks_round_is_a_whole_number_of_its_affinities_rounds_at_every_k():
    # A requested mask is read in one of its IRQ's affinity turns: a round that is not a multiple would leave some
    # IRQs' masks unread for good.
    policy = POLICIES["irqs"]
    for stagger in (2, 3, 4, 7, 16):
        refresh = Turns(stagger).refresh("irqs", policy, object())
        affinities, requested = refresh.share_of(AFFINITIES), refresh.share_of(REQUESTED_MASKS)
        assert requested > affinities and requested % affinities == 0


def test_a_periodic_look_keeps_its_period_whatever_k_and_is_refused_below_one_or_on_a_rotating_family():
    policy = Policy(periodic={"search": 20})
    for stagger in (1, 4):
        refresh = Turns(stagger).refresh("s", policy, object())
        assert refresh.period("search", 1) == 20
        assert refresh.period("other", 3) == 3  # not the policy's: the caller's default
    with pytest.raises(ValueError, match="period"):
        Policy(periodic={"search": 0})
    with pytest.raises(ValueError, match="period"):
        Policy(rotating=frozenset({"search"}), periodic={"search": 2})


def test_a_family_with_a_fixed_round_turns_over_it_whatever_k_and_reads_everything_with_k_1():
    policy = Policy(rotating=frozenset({"fixed", "plain"}), fixed={"fixed": 2})
    memory = object()
    for stagger in (2, 4, 16):
        turns = Turns(stagger)
        for reading in range(4):
            refresh = turns.refresh("s", policy, memory)
            assert refresh.rotation("fixed") == (2, reading % 2)
            assert refresh.rotation("plain") == (stagger, reading % stagger)
            assert refresh.due("fixed", reading) and not refresh.due("fixed", reading + 1)
            turns.advance()
    assert Turns(1).refresh("s", policy, memory).rotation("fixed") == (1, 0)


def test_a_fixed_round_must_name_a_rotating_family_and_a_wait_other_families():
    with pytest.raises(ValueError, match="fixed round"):
        Policy(rotating=frozenset({"a"}), fixed={"b": 2})
    with pytest.raises(ValueError, match="fixed round"):
        Policy(rotating=frozenset({"a"}), fixed={"a": 2}, stretch={"a": 2})
    with pytest.raises(ValueError, match="wait"):
        Policy(rotating=frozenset({"a", "b"}), waits={"a": ()})
    with pytest.raises(ValueError, match="wait"):
        Policy(rotating=frozenset({"a", "b"}), waits={"a": ("a",)})
    assert Policy(rotating=frozenset({"a", "b"}), waits={"a": ("b",)}).waits == {"a": ("b",)}
    # A table that stops rotating the family waited on (read at every reading) is still a table.
    assert Policy(rotating=frozenset({"a"}), waits={"a": ("b",)}).waits == {"a": ("b",)}


def test_a_whole_reading_asked_for_is_taken_by_the_next_reading_of_that_source_only():
    turns = Turns(K)
    policy = Policy(rotating=frozenset({"a"}))
    assert turns.refresh("s", policy, None).whole  # nothing remembered yet: everything is read
    turns.advance()
    assert not turns.refresh("s", policy, "memory").whole
    turns.advance()

    turns.read_everything_next("s")
    asked = turns.refresh("s", policy, "memory")
    other = turns.refresh("t", policy, "memory")
    assert (asked.whole, asked.rotation("a"), other.whole) == (True, (1, 0), False)
    turns.advance()
    assert not turns.refresh("s", policy, "memory").whole  # taken once

    turns.read_everything_next()  # SIGHUP, asked while a reading is under way: "s" was read before the request
    turns.advance()
    assert turns.refresh("s", policy, "memory").whole and turns.refresh("t", policy, "memory").whole
    assert not turns.refresh("s", policy, "memory").whole


def test_the_stagger_must_be_at_least_one():
    with pytest.raises(ValueError, match="at least 1"):
        Turns(0)


def test_the_host_reader_hands_a_source_its_previous_memory_and_its_turn():
    handed: list[Refresh] = []

    def incremental(paths, inputs, refresh):
        handed.append(refresh)
        count = (refresh.memory or 0) + 1
        return Carried({"count": count}, count)

    spec = SourceSpec("counter", lambda paths: {"count": 1}, incremental=incremental)
    reader = HostReader(PATHS, (spec,), stagger=K, policies={"counter": Policy(rotating=frozenset({"x"}))})
    results = [reader.read().get("counter")["count"] for _ in range(3)]
    reader.invalidate("counter")
    after = reader.read()

    assert results == [1, 2, 3] and after.get("counter") == {"count": 4}
    assert [refresh.memory for refresh in handed] == [None, 1, 2, 3]
    assert [refresh.turn for refresh in handed[:3]] == [0, 1, 2]
    assert (handed[3].whole, handed[3].share) == (True, 1)
    assert reader.memory("counter") == 4


def test_a_source_that_fails_keeps_the_memory_of_its_last_reading():
    calls: list[object] = []

    def incremental(paths, inputs, refresh):
        calls.append(refresh.memory)
        if len(calls) == 2:
            raise OSError("gone for a moment")
        return Carried("snapshot", len(calls))

    spec = SourceSpec("flaky", lambda paths: "snapshot", incremental=incremental)
    reader = HostReader(PATHS, (spec,))
    assert [reader.read().statuses["flaky"].up for _ in range(3)] == [True, False, True]
    assert calls == [None, 1, 1]


def test_an_unsettled_reading_is_read_again_whatever_its_fingerprint_says():
    readings: list[int] = []

    def incremental(paths, inputs, refresh):
        readings.append(1)
        return Carried("names", None, settled=len(readings) > 1)

    spec = SourceSpec("names", lambda paths: "names", fingerprint=lambda paths: "same", incremental=incremental)
    reader = HostReader(PATHS, (spec,), policies={"names": Policy(on_change=True)})
    statuses = [reader.read().statuses["names"].cached for _ in range(4)]
    assert statuses == [False, False, True, True]  # the second reading settled it; then its fingerprint holds


def test_what_the_table_does_not_rotate_is_read_in_full_whatever_the_stagger(fake_host):
    cpus = list(range(8))
    # One IRQ in each turn of the affinities' round.
    numbers = range(40, 40 + K * POLICIES["irqs"].stretch[AFFINITIES])
    add_irqs(fake_host, cpus, [FakeIrq(n, f"q{n}", frozenset({0, 1}), frozenset({0})) for n in numbers])
    unrotated = {**POLICIES, "irqs": Policy()}
    rotating = HostReader(fake_host.paths, (irqs.SOURCE,), stagger=K)
    whole = HostReader(fake_host.paths, (irqs.SOURCE,), stagger=K, policies=unrotated)
    rotating.read(), whole.read()

    add_irqs(fake_host, cpus, [FakeIrq(n, f"q{n}", frozenset({6, 7}), frozenset({6})) for n in numbers])
    partial, full = rotating.read().irqs, whole.read().irqs

    assert AFFINITIES in POLICIES["irqs"].rotating
    assert partial is not None and full is not None
    assert 0 < sum(entry.affinity == {6, 7} for entry in partial.irqs.values()) < len(numbers)
    assert full == irqs.read(fake_host.paths)
    assert full == irqs.read_incremental(fake_host.paths, Inputs({}), FULL).snapshot


def test_a_reading_the_source_finds_unchanged_keeps_its_generation_until_it_changes_or_was_down():
    outcomes = iter(["same", "same", "changed", "down", "same", "same"])

    def incremental(paths, inputs, refresh):
        outcome = next(outcomes)
        if outcome == "down":
            raise OSError("gone for a moment")
        previous = refresh.memory
        snapshot = previous if outcome == "same" and previous is not None else {"reading": outcome}
        return Carried(snapshot, snapshot, unchanged=outcome == "same" and previous is not None)

    spec = SourceSpec("steady", lambda paths: {}, incremental=incremental)
    reader = HostReader(PATHS, (spec,), policies={"steady": Policy(rotating=frozenset({"x"}))})
    hosts = [reader.read() for _ in range(6)]

    generations = [host.generation("steady") for host in hosts]
    # "same" keeps the number; a change, a failure and the reading after the failure (its snapshot reappears, though
    # the source finds it unchanged) move it.
    assert generations == [1, 1, 2, 3, 4, 4]
    assert [host.statuses["steady"].cached for host in hosts] == [False, True, False, False, False, True]
    assert hosts[1].get("steady") is hosts[0].get("steady")


def test_a_source_read_one_reading_in_several_hands_its_last_snapshot_out_between_and_reads_at_once_when_needed():
    calls: list[int] = []
    need_value = ["a"]

    def counter(paths, inputs=None):
        calls.append(len(calls) + 1)
        return {"reading": len(calls)}

    # A need read on change: its generation moves only when its fingerprint does.
    need = SourceSpec("need", lambda paths: need_value[0], fingerprint=lambda paths: need_value[0])
    spec = SourceSpec("counts", counter, needs=("need",))
    policies = {"need": Policy(on_change=True), "counts": Policy(every=2)}
    reader = HostReader(PATHS, (need, spec), stagger=K, policies=policies)
    hosts = [reader.read() for _ in range(4)]

    assert [host.get("counts")["reading"] for host in hosts] == [1, 1, 2, 2]
    assert [host.statuses["counts"].cached for host in hosts] == [False, True, False, True]
    assert [host.generation("counts") for host in hosts] == [1, 1, 2, 2]  # nothing derived from it is made again
    assert hosts[1].get("counts") is hosts[0].get("counts")

    need_value[0] = "b"  # reading 5 is its turn anyway; reading 6 is not, but the need changed there
    fifth = reader.read()
    need_value[0] = "c"
    sixth = reader.read()
    assert (fifth.statuses["counts"].cached, sixth.statuses["counts"].cached) == (False, False)
    assert sixth.get("counts")["reading"] == 4

    reader.invalidate("counts")  # a SIGHUP or a hotplug event: read at once, whatever the turn
    reader.read()  # reading 7: its turn
    assert reader.read().statuses["counts"].cached is True  # reading 8
    assert reader.read().statuses["counts"].cached is False  # reading 9: its turn
    reader.invalidate("counts")
    assert reader.read().statuses["counts"].cached is False  # reading 10 is not its turn, but it was invalidated


def test_a_source_that_says_what_it_uses_of_a_need_is_read_out_of_turn_only_when_that_changes():
    calls: list[int] = []
    need_value = [("a", 1)]

    def counter(paths, inputs=None):
        calls.append(len(calls) + 1)
        return {"reading": len(calls), "uses": inputs.get("need")[0]}

    need = SourceSpec("need", lambda paths: need_value[0], fingerprint=lambda paths: need_value[0])
    spec = SourceSpec("counts", counter, needs=("need",), uses=lambda inputs: inputs.get("need")[0])
    policies = {"need": Policy(on_change=True), "counts": Policy(every=2)}
    reader = HostReader(PATHS, (need, spec), stagger=K, policies=policies)
    reader.read()  # reading 1: its turn

    need_value[0] = ("a", 2)  # the need is read again (new generation), what counts uses of it is the same
    second = reader.read()
    assert second.generation("need") == 2
    assert second.statuses["counts"].cached is True and second.get("counts")["reading"] == 1
    reader.read()  # reading 3: its turn
    need_value[0] = ("b", 2)  # what it uses changed: read at once, out of its turn
    fourth = reader.read()
    assert fourth.statuses["counts"].cached is False and fourth.get("counts") == {"reading": 3, "uses": "b"}


def test_a_source_read_one_reading_in_several_is_read_at_every_reading_with_a_stagger_of_one():
    spec = SourceSpec("counts", lambda paths: object())
    reader = HostReader(PATHS, (spec,), stagger=1, policies={"counts": Policy(every=2)})
    assert [reader.read().statuses["counts"].cached for _ in range(3)] == [False, False, False]


def test_a_down_reading_is_never_handed_out_between_readings():
    outcomes = iter([OSError("gone"), "up", "up"])

    def flaky(paths):
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    reader = HostReader(PATHS, (SourceSpec("flaky", flaky),), stagger=K, policies={"flaky": Policy(every=2)})
    statuses = [reader.read().statuses["flaky"] for _ in range(3)]
    # Reading 1 was down: reading 2 (not its turn) reads, as nothing good is kept; reading 3 is its turn.
    assert [(status.up, status.cached) for status in statuses] == [(False, False), (True, False), (True, False)]


def test_a_policy_read_one_reading_in_several_is_neither_on_change_nor_rotating():
    with pytest.raises(ValueError, match="neither on change nor rotating"):
        Policy(every=2, on_change=True)
    with pytest.raises(ValueError, match="neither on change nor rotating"):
        Policy(every=2, rotating=frozenset({"x"}))
    with pytest.raises(ValueError, match="whole number"):
        Policy(every=0)
    assert POLICIES["interrupts"].every == 4  # once a minute at serve's defaults (docs/sources.md)
