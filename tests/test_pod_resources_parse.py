"""The kubelet's List answer, ``parse_list_answer(listed, previous)``: answers as protobuf writes them, bad and odd
ones, and what a previous parse may change (only which checked pods are handed back)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch import podresources
from numawatch.sources.pod_resources import ListParse, parse_list_answer, pods_of
from podresources_server import Held, list_response

VLLM = Held(cpus=[2, 3, 130], devices={"nvidia.com/gpu": {0: ["GPU-0"]}}, memory=[("hugepages-1Gi", 2 << 30, [0])])
SIDECAR = Held()


def answer(*pods: tuple[str, str, dict[str, Held]]) -> bytes:
    return list_response({(namespace, name): containers for namespace, name, containers in pods})


def test_an_answer_as_protobuf_writes_it_is_checked_as_pods_of_checks_it():
    listed = answer(("ml", "vllm-0", {"vllm": VLLM, "sidecar": SIDECAR}), ("kube-system", "dns", {"coredns": SIDECAR}))

    parsed = parse_list_answer(listed)

    assert isinstance(parsed, ListParse)
    assert parsed.pods == pods_of(podresources.decode_pod(m) for m in podresources.pod_messages(listed))
    vllm = parsed.pods["ml", "vllm-0"]["vllm"]
    assert (vllm.exclusive_cpus, len(vllm.devices), len(vllm.memory_blocks)) == ({2, 3, 130}, 1, 1)
    assert sorted(pod.key for pod in parsed.checked.values()) == [("kube-system", "dns"), ("ml", "vllm-0")]
    assert all(parsed.pods[pod.key] is pod.containers for pod in parsed.checked.values())


def test_unchanged_pods_are_the_previous_checked_pods_and_a_changed_one_is_checked_again():
    first = parse_list_answer(answer(("ml", "a", {"app": VLLM}), ("ml", "b", {"app": SIDECAR})))

    second = parse_list_answer(answer(("ml", "a", {"app": VLLM}), ("ml", "b", {"app": Held(cpus=[7])})), first.checked)

    assert second.pods["ml", "a"] is first.pods["ml", "a"]
    assert second.pods["ml", "b"]["app"].exclusive_cpus == {7}
    assert second == parse_list_answer(answer(("ml", "a", {"app": VLLM}), ("ml", "b", {"app": Held(cpus=[7])})))


@pytest.mark.parametrize(
    ("listed", "error", "message"),
    [
        (b"\x08\x01", podresources.WireError, "has wire type 0, expected 2"),
        (answer(("ml", "a", {"app": SIDECAR})) * 2, ValueError, "pod ml/a is listed twice"),
        (answer(("Not A Namespace", "a", {"app": SIDECAR})), ValueError, "namespace"),
        (answer(("ml", "a", {"app": Held(cpus=[1 << 20])})), ValueError, "container ml/a/app"),
    ],
    ids=["not-an-answer", "pod-twice", "bad-namespace", "cpu-out-of-range"],
)
def test_a_bad_answer_is_refused_saying_what_with_or_without_a_previous_parse(listed, error, message):
    previous = parse_list_answer(answer(("ml", "a", {"app": SIDECAR})))

    for before in (None, previous.checked):
        with pytest.raises(error, match=message):
            parse_list_answer(listed, before)


@pytest.mark.parametrize(
    "listed",
    [b"", answer(("ml", "empty", {})), answer(("ml", "a", {"app": SIDECAR}), ("ml", "a2", {"app": SIDECAR}))],
    ids=["no-pods", "a-pod-without-containers", "two-pods-holding-the-same-nothing"],
)
def test_odd_but_valid_answers(listed):
    parsed = parse_list_answer(listed)

    assert len(parsed.pods) == len(podresources.pod_messages(listed))
    assert all(not any(c.exclusive_cpus for c in containers.values()) for containers in parsed.pods.values())


pods = st.dictionaries(
    st.tuples(st.sampled_from(["ml", "default"]), st.sampled_from(["a", "b", "c", "d"])),
    st.dictionaries(st.sampled_from(["app", "sidecar"]), st.sampled_from([VLLM, SIDECAR, Held(cpus=[9])]), max_size=2),
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(now=pods, before=pods)
def test_a_previous_parse_of_any_answer_changes_nothing_but_which_checked_pods_are_handed_back(now, before):
    listed = list_response(now)
    fresh = parse_list_answer(listed)

    after = parse_list_answer(listed, parse_list_answer(list_response(before)).checked)
    again = parse_list_answer(listed, after.checked)

    assert after == fresh and again == fresh
    assert all(again.pods[key] is after.pods[key] for key in after.pods)
