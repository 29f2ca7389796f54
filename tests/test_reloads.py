"""SIGHUP reloads of a real ``numawatch serve`` against slow and hung files: one
reload at a time, the newest reads the file last and its result stands, and a hung intent file (a FIFO stands in for
a hung NFS or FUSE mount) never keeps SIGTERM from stopping the process."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fakehost.reference import reference_node
from prometheus_client.parser import text_string_to_metric_families
from serving import numawatch_serve

# The node runs best-effort: clean under BEST_EFFORT, a finding under the reference profile (single-numa-node).
BEST_EFFORT = "kubelet:\n  topologyManagerPolicy: best-effort\n"
REFERENCE = "# the reference profile: single-numa-node\n"
INVALID = "kubelet:\n  topologyManagerPolicy: sometimes\n"
POLICY_CHECK = "kubelet_topology_manager_policy"


def families(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url + "metrics", timeout=10) as response:
        body = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(body)}


def value(found: dict[str, list], name: str) -> float:
    [sample] = [sample for sample in found[name] if sample.name == name]
    return sample.value


def firing(found: dict[str, list]) -> set[str]:
    return {sample.labels["check"] for sample in found["numawatch_drift"]}


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "healthz", timeout=10) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False


def until(predicate, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


class Log:
    """Collects a process' stderr lines as they come (so a test can wait for one, and the pipe never fills)."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    def count(self, *fragments: str) -> int:
        return sum(1 for line in self.lines if any(fragment in line for fragment in fragments))

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "".join(self.lines)


def hang_in_a_read(path: Path, process) -> tuple[Path, int]:
    """Replace ``path`` by a FIFO, send SIGHUP and wait until numawatch has opened the FIFO: it then blocks in
    read() as it would on a hung mount. Returns another name of the FIFO (a hard link, which survives ``path`` being
    replaced) and the write end, whose bytes and close end the read."""
    path.unlink()
    os.mkfifo(path)
    other = path.with_name(path.name + ".fifo")
    os.link(path, other)
    process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while True:
        try:
            # Succeeds only once a reader has the FIFO open (ENXIO before).
            return other, os.open(other, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            assert time.monotonic() < deadline, "numawatch never opened the intent file"
            time.sleep(0.02)


# ------------------------------------------------------------------------------------------------ reproducer 6
@pytest.mark.slow
def test_sigterm_stops_the_process_while_a_reload_hangs_in_a_read(fake_host, tmp_path):
    reference_node(fake_host)
    intent = tmp_path / "intent.yaml"
    intent.write_text(BEST_EFFORT)
    with numawatch_serve(fake_host.root, "--intent", str(intent)) as (process, url):
        until(lambda: healthy(url), "the first evaluation")
        _, writer = hang_in_a_read(intent, process)
        try:
            process.send_signal(signal.SIGTERM)
            # Without the daemon thread the process waits for the read for ever (the default executor is joined).
            returncode = process.wait(timeout=10)
        finally:
            os.close(writer)
        stderr = process.stderr.read()

    assert returncode == 0
    assert "shutting down" in stderr
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_a_reload_that_hangs_is_given_up_after_its_time_limit_and_the_next_one_works(fake_host, tmp_path):
    node = reference_node(fake_host)
    node.set_topology_manager_policy("best-effort")
    intent = tmp_path / "intent.yaml"
    intent.write_text(BEST_EFFORT)
    with numawatch_serve(fake_host.root, "--intent", str(intent)) as (process, url):
        log = Log(process.stderr)
        until(lambda: healthy(url), "the first evaluation")
        _, writer = hang_in_a_read(intent, process)
        try:
            until(lambda: value(families(url), "numawatch_intent_reload_success") == 0, "the hung reload to fail")
            given_up = families(url)
            fresh = tmp_path / "fresh.yaml"
            fresh.write_text(REFERENCE)
            fresh.replace(intent)
            process.send_signal(signal.SIGHUP)
            until(lambda: POLICY_CHECK in firing(families(url)), "the next reload to apply")
            after = families(url)
        finally:
            os.close(writer)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        stderr = log.text()

    assert POLICY_CHECK not in firing(given_up)
    assert value(after, "numawatch_intent_reload_success") == 1
    [line] = [line for line in stderr.splitlines() if "intent reload failed" in line]
    assert str(intent) in line
    assert "did not finish within" in line


# ------------------------------------------------------------------------------------------------ reproducer 7
@pytest.mark.parametrize(("stale", "stale_valid"), [(BEST_EFFORT, True), (INVALID, False)],
                         ids=["stale-valid-intent", "stale-invalid-intent"])
@pytest.mark.slow
def test_of_two_overlapping_reloads_the_newer_file_wins(fake_host, tmp_path, stale, stale_valid):
    """The first SIGHUP's read is slow (a FIFO), the second's file is fresh. Whenever the slow read finishes, the
    intent in force at the end is the fresh one and numawatch_intent_reload_success is 1: the slow, older reload
    never lands after the newer one."""
    node = reference_node(fake_host)
    node.set_topology_manager_policy("best-effort")
    intent = tmp_path / "intent.yaml"
    intent.write_text(BEST_EFFORT)
    with numawatch_serve(fake_host.root, "--intent", str(intent)) as (process, url):
        log = Log(process.stderr)
        until(lambda: healthy(url), "the first evaluation")
        _, writer = hang_in_a_read(intent, process)
        try:
            fresh = tmp_path / "fresh.yaml"
            fresh.write_text(REFERENCE)
            fresh.replace(intent)  # the FIFO keeps its other name; the slow read goes on
            process.send_signal(signal.SIGHUP)
            time.sleep(0.3)  # gives a second, concurrent reload (the bug) the chance to finish first
            os.write(writer, stale.encode())
        finally:
            os.close(writer)
        until(lambda: log.count("intent reloaded from", "intent reload failed") >= 2, "both reloads to finish")
        finished = time.time()
        until(lambda: value(families(url), "numawatch_last_evaluation_timestamp_seconds") > finished,
              "an evaluation after both reloads")
        final = families(url)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        stderr = log.text()

    assert POLICY_CHECK in firing(final), "the older, slower reload overwrote the newer one"
    assert value(final, "numawatch_intent_reload_success") == 1
    assert "Traceback" not in stderr
    if not stale_valid:
        assert "topologyManagerPolicy" in stderr  # the stale file was read, refused and said so
