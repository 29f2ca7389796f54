"""The intent (and web config) as a Kubernetes ConfigMap or Secret: an update is a ``..data`` symlink swap that the
kubelet announces to nobody, so ``numawatch serve`` notices it by itself and reloads as SIGHUP does.

The volumes here are written the way the kubelet's AtomicWriter writes them (pkg/volume/util/atomic_writer.go), and
the reloads are those of a real ``numawatch serve``, seen over HTTP: no SIGHUP is ever sent in this file."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import socket
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
import strict_logfmt
import trustme
from fakehost.reference import reference_node
from numawatch.filewatch import FileWatch, fingerprint
from prometheus_client.parser import text_string_to_metric_families
from serving import numawatch_serve

BEST_EFFORT = "kubelet:\n  topologyManagerPolicy: best-effort\n"
REFERENCE = "# the reference profile: single-numa-node\n"
INVALID = "kubelet:\n  topologyManagerPolicy: sometimes\n"
POLICY_CHECK = "kubelet_topology_manager_policy"
FIFO = None  # a file's content in ConfigMapVolume.write: a FIFO instead (a read of it blocks, as on a hung mount)
POLL = ("--config.auto-reload-interval", "0.2")


class ConfigMapVolume:
    """A directory as the kubelet projects a ConfigMap or Secret into it: the data in a timestamped directory,
    ``..data`` a symlink to it, each visible file a symlink through ``..data``; an update is AtomicWriter's steps."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir()

    def path(self, name: str) -> Path:
        return self.directory / name

    def write(self, files: dict[str, str | bytes | None]) -> Path:
        """Project ``files`` (None: a FIFO); returns the new timestamped directory."""
        data = self.directory / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        # (5) a new timestamped directory, as ioutil.TempDir(targetDir, "..2006_01_02_15_04_05.") names it
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        fresh = Path(tempfile.mkdtemp(prefix=stamp, dir=self.directory))
        fresh.chmod(0o755)
        # (6) the payload
        for name, content in files.items():
            target = fresh / name
            if content is None:
                os.mkfifo(target, 0o644)
            else:
                target.write_bytes(content.encode() if isinstance(content, str) else content)
                target.chmod(0o644)
        # (7) user-visible symlinks through ..data, for files that have none yet
        for name in files:
            if not self.path(name).is_symlink():
                os.symlink(f"..data/{name}", self.path(name))
        # (8) ..data_tmp -> the new directory, (9) renamed over ..data: the atomic switch
        os.symlink(fresh.name, self.directory / "..data_tmp")
        os.rename(self.directory / "..data_tmp", data)
        # (11) the previous timestamped directory goes
        if old is not None:
            shutil.rmtree(self.directory / old)
        return fresh


# ------------------------------------------------------------------------------------------------ FileWatch
def test_a_configmap_update_is_one_change_and_nothing_else_is(tmp_path):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write({"intent.yaml": BEST_EFFORT})
    intent = str(volume.path("intent.yaml"))
    watch = FileWatch(lambda: [intent], 5, initial=[intent])

    quiet = watch.poll()
    volume.write({"intent.yaml": REFERENCE})
    swapped = watch.poll()
    after = watch.poll()

    assert (quiet, swapped, after) == ((), (intent,), ())


def test_an_update_with_the_same_bytes_is_still_seen_as_one(tmp_path):
    """The kubelet writes only when the content differs; an identical file in a new directory (another writer, a
    restore) is a new inode, and reloading it is harmless."""
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write({"intent.yaml": BEST_EFFORT})
    intent = str(volume.path("intent.yaml"))
    watch = FileWatch(lambda: [intent], 5, initial=[intent])

    volume.write({"intent.yaml": BEST_EFFORT})

    assert watch.poll() == (intent,)


def test_plain_files_changed_in_place_replaced_removed_and_restored_are_each_a_change(tmp_path):
    path = tmp_path / "intent.yaml"
    path.write_text(BEST_EFFORT)
    watch = FileWatch(lambda: [str(path)], 5, initial=[str(path)])
    seen = []

    with path.open("a") as handle:  # in place: same inode, new size and mtime
        handle.write("# edited\n")
    seen.append(watch.poll())
    replacement = tmp_path / "intent.yaml.new"
    replacement.write_text(REFERENCE)
    replacement.replace(path)  # an editor's or kubectl cp's atomic rename: a new inode
    seen.append(watch.poll())
    path.unlink()
    seen.append(watch.poll())
    seen.append(watch.poll())  # still missing: nothing new
    path.write_text(REFERENCE)
    seen.append(watch.poll())

    assert seen == [(str(path),), (str(path),), (str(path),), (), (str(path),)]


def test_a_path_seen_for_the_first_time_is_recorded_not_reported(tmp_path):
    first, second = tmp_path / "web.yml", tmp_path / "tls.crt"
    first.write_text("a")
    second.write_text("b")
    names = [str(first)]
    watch = FileWatch(lambda: names, 5, initial=names)

    names.append(str(second))  # a reloaded web config now names a certificate
    introduced = watch.poll()
    second.write_text("renewed")
    renewed = watch.poll()

    assert (introduced, renewed) == ((), (str(second),))


def test_a_remembered_path_that_changes_before_the_first_poll_is_reported(tmp_path):
    """serve remembers the certificates its web config names before it loads them: a renewal in between is seen."""
    config, certificate = tmp_path / "web.yml", tmp_path / "tls.crt"
    config.write_text("a")
    certificate.write_text("first")
    names = [str(config)]
    watch = FileWatch(lambda: names, 5, initial=names)
    names.append(str(certificate))
    watch.remember(names)

    certificate.write_text("renewed")

    assert watch.poll() == (str(certificate),)


def test_a_fingerprint_names_the_resolved_target_and_a_missing_file_says_why(tmp_path):
    volume = ConfigMapVolume(tmp_path / "config")
    fresh = volume.write({"intent.yaml": BEST_EFFORT})

    found = fingerprint(str(volume.path("intent.yaml")))
    missing = fingerprint(str(tmp_path / "nope"))

    assert found.target == str(fresh / "intent.yaml")
    assert found.identity is not None and found.identity[2] == len(BEST_EFFORT)
    assert (missing.identity, missing.error) == (None, "No such file or directory")


def test_the_watch_thread_reports_a_swap_and_stops(tmp_path):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write({"intent.yaml": BEST_EFFORT})
    intent = str(volume.path("intent.yaml"))
    watch = FileWatch(lambda: [intent], 0.05, initial=[intent])
    reported: list[tuple[str, ...]] = []
    changed = threading.Event()

    def on_change(paths: tuple[str, ...]) -> None:
        reported.append(paths)
        changed.set()

    watch.start(on_change)
    try:
        volume.write({"intent.yaml": REFERENCE})
        assert changed.wait(30), "the swap was never reported"
    finally:
        watch.stop()
    assert reported[0] == (intent,)
    with pytest.raises(RuntimeError):
        watch.start(on_change)


# ------------------------------------------------------------------------------------------------ a real serve
def families(url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None) -> dict:
    request = urllib.request.Request(url + "metrics", headers=headers or {})
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        body = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(body)}


def value(found: dict, name: str) -> float:
    [sample] = [sample for sample in found[name] if sample.name == name]
    return sample.value


def firing(found: dict) -> set[str]:
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


def stop(process) -> list[dict[str, str]]:
    """SIGTERM, exit 0, and every stderr line as a strictly parsed logfmt record."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    return [strict_logfmt.parse(line) for line in process.stderr.read().splitlines()]


@pytest.fixture
def best_effort_node(fake_host):
    node = reference_node(fake_host)
    node.set_topology_manager_policy("best-effort")  # clean under BEST_EFFORT, a finding under REFERENCE
    return fake_host


@pytest.mark.slow
def test_a_configmap_update_of_the_intent_takes_effect_without_sighup(best_effort_node, tmp_path):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write({"intent.yaml": BEST_EFFORT})
    intent = volume.path("intent.yaml")
    with numawatch_serve(best_effort_node.root, "--intent", str(intent), *POLL) as (process, url):
        until(lambda: healthy(url), "the first evaluation")
        before = families(url)
        volume.write({"intent.yaml": REFERENCE})
        until(lambda: POLICY_CHECK in firing(families(url)), "the updated intent")
        after = families(url)
        records = stop(process)

    assert POLICY_CHECK not in firing(before)
    assert value(after, "numawatch_intent_reload_success") == 1
    assert value(after, "numawatch_intent_reload_timestamp_seconds") > value(
        before, "numawatch_intent_reload_timestamp_seconds")
    [info] = after["numawatch_intent_info"]
    assert info.labels["source"] == str(intent)
    messages = [record["msg"] for record in records]
    assert f"{intent} changed: reloading" in messages
    assert f"intent reloaded from {intent}" in messages
    assert "SIGHUP: reloading" not in messages


@pytest.mark.slow
def test_a_broken_configmap_update_keeps_the_old_intent_and_sets_the_failure_metric(best_effort_node, tmp_path):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write({"intent.yaml": REFERENCE})
    intent = volume.path("intent.yaml")
    with numawatch_serve(best_effort_node.root, "--intent", str(intent), *POLL) as (process, url):
        until(lambda: healthy(url), "the first evaluation")
        judged = families(url)
        volume.write({"intent.yaml": INVALID})
        until(lambda: value(families(url), "numawatch_intent_reload_success") == 0, "the failed reload")
        refused = families(url)
        volume.write({"intent.yaml": BEST_EFFORT})
        until(lambda: value(families(url), "numawatch_intent_reload_success") == 1, "the repaired reload")
        repaired = families(url)
        records = stop(process)

    assert POLICY_CHECK in firing(judged)
    assert POLICY_CHECK in firing(refused)  # the previous intent still judges the node
    assert POLICY_CHECK not in firing(repaired)
    [failed] = [record for record in records if record["msg"].startswith("intent reload failed")]
    assert failed["level"] == "error"
    assert str(intent) in failed["msg"]
    assert "topologyManagerPolicy" in failed["msg"]


@pytest.mark.slow
def test_a_hung_file_in_a_configmap_update_does_not_block_serving(best_effort_node, tmp_path):
    """The update's intent.yaml is a FIFO nobody writes: its read blocks as on a hung mount. Scrapes are answered
    meanwhile, the reload is given up at its time limit, and the next update applies."""
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write({"intent.yaml": BEST_EFFORT})
    intent = volume.path("intent.yaml")
    with numawatch_serve(best_effort_node.root, "--intent", str(intent), *POLL) as (process, url):
        until(lambda: healthy(url), "the first evaluation")
        fresh = volume.write({"intent.yaml": FIFO})
        other_name = tmp_path / "fifo"
        os.link(fresh / "intent.yaml", other_name)  # outlives the next update's removal of this directory
        writer = None
        try:
            while writer is None:  # the open succeeds once numawatch has the FIFO open for reading
                try:
                    writer = os.open(other_name, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:
                    time.sleep(0.02)
            during = families(url)  # numawatch is blocked in the read: /metrics is still answered
            until(lambda: value(families(url), "numawatch_intent_reload_success") == 0, "the hung reload to fail")
            volume.write({"intent.yaml": REFERENCE})
            until(lambda: POLICY_CHECK in firing(families(url)), "the next update")
            after = families(url)
        finally:
            if writer is not None:
                os.close(writer)
        records = stop(process)

    assert value(during, "numawatch_intent_reload_success") == 1
    assert value(after, "numawatch_intent_reload_success") == 1
    [failed] = [record for record in records if record["msg"].startswith("intent reload failed")]
    assert "did not finish within" in failed["msg"]


# ------------------------------------------------------------------------------------------------ web config
def fast_hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def status(url: str, headers: dict[str, str], context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "metrics", headers=headers), timeout=10,
                                    context=context) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow
def test_a_secret_update_of_the_web_config_takes_effect_without_sighup(fake_host, tmp_path):
    fake_host.mkdir("proc")
    volume = ConfigMapVolume(tmp_path / "web")
    volume.write({"web.yml": f"basic_auth_users:\n  prometheus: {fast_hash('old-password')}\n"})
    config = volume.path("web.yml")
    with numawatch_serve(fake_host.root, "--web.config.file", str(config), *POLL) as (process, url):
        until(lambda: status(url, basic("prometheus", "old-password")) == 200, "the first evaluation")
        volume.write({"web.yml": f"basic_auth_users:\n  prometheus: {fast_hash('new-password')}\n"})
        until(lambda: status(url, basic("prometheus", "new-password")) == 200, "the new password")
        old = status(url, basic("prometheus", "old-password"))
        records = stop(process)

    assert old == 401
    assert f"web config reloaded from {config}" in [record["msg"] for record in records]


def served_certificate(url: str) -> str:
    """SHA-256 of the certificate a new TLS connection to ``url`` is shown."""
    host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        certificate = tls.getpeercert(binary_form=True)
    assert certificate is not None
    return hashlib.sha256(certificate).hexdigest()


def digest(issued: trustme.LeafCert) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(issued.cert_chain_pems[0].bytes().decode())).hexdigest()


@pytest.mark.slow
def test_a_renewed_certificate_in_a_secret_is_served_without_sighup(fake_host, tmp_path):
    """cert-manager renews the Secret the web config's cert_file and key_file are in; the web config file itself
    does not change, and the next connection is shown the new certificate."""
    authority = trustme.CA()
    first, renewed = authority.issue_cert("127.0.0.1"), authority.issue_cert("127.0.0.1")
    secret = ConfigMapVolume(tmp_path / "tls")
    secret.write({"tls.crt": first.cert_chain_pems[0].bytes(), "tls.key": first.private_key_pem.bytes()})
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {secret.path('tls.crt')}\n"
                      f"  key_file: {secret.path('tls.key')}\n")
    fake_host.mkdir("proc")
    with numawatch_serve(fake_host.root, "--web.config.file", str(config), *POLL) as (process, url):
        shown_first = served_certificate(url)
        secret.write({"tls.crt": renewed.cert_chain_pems[0].bytes(), "tls.key": renewed.private_key_pem.bytes()})
        until(lambda: served_certificate(url) == digest(renewed), "the renewed certificate")
        records = stop(process)

    assert shown_first == digest(first)
    assert any(record["msg"].endswith("changed: reloading") and "tls.crt" in record["msg"] for record in records)
