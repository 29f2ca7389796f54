"""Checkpoint content reaching terminals and pages: a ``cpu_manager_state`` with a valid
checksum whose pod UID and container name carry terminal escape sequences, a BEL and a newline followed by a forged
line. ``check``'s table and JSON, ``check --from``, the ``kubelet_state_stale`` message and the landing page must
show them escaped (the identifiers outside their Kubernetes grammar as a short quoted excerpt) and never raw."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
from fakehost.kubelet import write_cpu_manager_state
from fakehost.reference import reference_node
from numawatch import hosttext
from serving import numawatch_serve

HOSTILE_UID = "x\x1b]0;pwned\x07\x1b[2J"
HOSTILE_CONTAINER = "c\nFAKE LINE: all clean\x1b[32m"
RAW = ("\x1b", "\x07")


def hostile_node(fake_host) -> None:
    """A checkpoint the kubelet would load (valid checksum) and refuse at its next start: the hostile container's
    CPUs overlap the shared pool, so kubelet_state_stale names it."""
    reference_node(fake_host)
    write_cpu_manager_state(fake_host, default_cpuset="0-31", entries={HOSTILE_UID: {HOSTILE_CONTAINER: "0-1"}})


def numawatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "numawatch", *args], capture_output=True, text=True, timeout=120)


def assert_nothing_raw(text: str) -> None:
    for raw in RAW:
        assert raw not in text
    assert not any(line.lstrip().startswith("FAKE LINE") for line in text.splitlines())


def test_check_shows_a_hostile_checkpoint_escaped_in_its_table_and_json(fake_host):
    hostile_node(fake_host)
    table = numawatch("--host-root", str(fake_host.root), "check")
    document = numawatch("--host-root", str(fake_host.root), "check", "--format", "json")

    assert_nothing_raw(table.stdout + table.stderr)
    assert_nothing_raw(document.stderr)
    [stale] = [f for f in json.loads(document.stdout)["findings"] if f["check"] == "kubelet_state_stale"]
    assert_nothing_raw(stale["message"])
    expected = "pod 'x\\x1b]0;pwned\\x07\\x1b[2J', container 'c\\nFAKE LINE: all clean\\x1b[32m' cpuset \"0-1\""
    assert expected in stale["message"]
    assert expected in table.stdout


def test_check_from_a_bundle_of_a_hostile_checkpoint_shows_it_escaped(fake_host, tmp_path):
    hostile_node(fake_host)
    bundle = tmp_path / "node.tar.gz"
    captured = numawatch("--host-root", str(fake_host.root), "capture", "--output", str(bundle))
    assert captured.returncode == 0, captured.stderr
    offline = numawatch("check", "--from", str(bundle))

    assert_nothing_raw(offline.stdout + offline.stderr)
    assert "container 'c\\nFAKE LINE: all clean\\x1b[32m'" in offline.stdout


def test_the_landing_page_shows_a_hostile_checkpoint_escaped(fake_host):
    hostile_node(fake_host)
    with numawatch_serve(fake_host.root) as (process, url):
        page = ""
        for _ in range(100):
            with urllib.request.urlopen(url, timeout=10) as response:
                page = response.read().decode()
            if "kubelet_state_stale" in page:
                break
        process.terminate()
        process.wait(timeout=20)

    assert "kubelet_state_stale" in page
    assert_nothing_raw(page)
    assert "container &#x27;c\\nFAKE LINE: all clean\\x1b[32m&#x27;" in page


# ------------------------------------------------------------------------------------------------ the sanitiser
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, quotes \" ' and all", "plain text, quotes \" ' and all"),
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("line\nFAKE", "line\\nFAKE"),
        ("bell\x07 tab\t nul\x00 del\x7f", "bell\\x07 tab\\t nul\\x00 del\\x7f"),
        ("bidi \u202e override, separator \u2028", "bidi \\u202e override, separator \\u2028"),
        ("naïve ünïcode ✓", "naïve ünïcode ✓"),
    ],
)
def test_escaped_writes_every_character_a_terminal_would_act_on_as_its_escape(text, shown):
    assert hosttext.escaped(text) == shown


def test_escaped_is_bounded():
    assert hosttext.escaped("x" * 5000) == "x" * hosttext.SHOWN_CHARS + "..."
    assert hosttext.escaped("\x1b" * 10, limit=3) == "\\x1b\\x1b\\x1b..."


def test_identifiers_are_shown_as_they_are_only_in_their_kubernetes_grammar():
    uid = "5a1c6f9e-1111-2222-3333-444455556666"

    assert hosttext.pod_uid_shown(uid) == uid
    assert hosttext.pod_uid_shown("0123456789abcdef0123456789abcdef") == "0123456789abcdef0123456789abcdef"
    assert hosttext.pod_uid_shown(HOSTILE_UID) == "'x\\x1b]0;pwned\\x07\\x1b[2J'"
    assert hosttext.k8s_label_shown("vllm") == "vllm"
    assert hosttext.k8s_label_shown(HOSTILE_CONTAINER) == "'c\\nFAKE LINE: all clean\\x1b[32m'"
    assert hosttext.k8s_label_shown("Upper") == "'Upper'"
    assert hosttext.k8s_subdomain_shown("vllm-llama-0.a") == "vllm-llama-0.a"
    assert hosttext.k8s_subdomain_shown("a" * 300).endswith("...")
    assert len(hosttext.k8s_subdomain_shown("a" * 300)) < 50
