"""``numawatch capture`` and ``numawatch check --from``: a bundle of exactly what numawatch read, redacted, that
evaluates offline to the node's own result; and hostile bundles refused in one line."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from fakehost.reference import reference_node
from numawatch import capture
from numawatch.errors import SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.intent import REFERENCE
from numawatch.sources import SOURCES

SECRET = "sk-live-0a1b2c3d4e5f60718293"


def numawatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "numawatch", *args], capture_output=True, text=True, timeout=120)


def report(result: subprocess.CompletedProcess[str]) -> dict:
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def comparable(document: dict) -> dict:
    """What must be identical on the node and offline: findings, checks not evaluated and why, sources up or down
    and why, naming the node's paths even when cut at 300 characters (timings, timestamps and the host root
    naturally differ)."""
    return {
        "findings": document["findings"],
        "not_evaluated": document["not_evaluated"],
        "sources": [(source["name"], source["up"], source["reason"]) for source in document["sources"]],
        "intent": document["intent"],
    }


def known_then(document: dict, on_node: dict) -> dict:
    """``document`` restricted to the checks and sources the node's own report (``on_node``) had."""
    checks = set(on_node["checks"])
    sources = {source["name"] for source in on_node["sources"]}
    return {
        **document,
        "findings": [f for f in document["findings"] if f["check"] in checks],
        "not_evaluated": [item for item in document["not_evaluated"] if item["check"] in checks],
        "sources": [source for source in document["sources"] if source["name"] in sources],
    }


def members(bundle: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(bundle) as tar:
        return {member.name: member for member in tar.getmembers()}


def member_bytes(bundle: Path, name: str) -> bytes:
    with tarfile.open(bundle) as tar:
        handle = tar.extractfile(name)
        assert handle is not None
        return handle.read()


@pytest.fixture
def drifted(fake_host):
    """The reference node with drift of every layer: a split container, a kubelet policy, a GPU IRQ moved onto an
    isolated CPU whose smp_affinity is read-only (a managed IRQ: only its permission bits say so)."""
    node = reference_node(fake_host)
    node.split_across_nodes()
    node.set_topology_manager_policy("best-effort")
    fake_host.write("proc/irq/150/smp_affinity_list", "2")
    fake_host.write("proc/irq/150/effective_affinity_list", "2")
    os.chmod(fake_host.path("proc/irq/150/smp_affinity"), 0o444)
    return node


# ------------------------------------------------------------------------------------------------ round trip
@pytest.mark.slow
def test_check_from_a_capture_gives_the_nodes_findings(drifted, tmp_path):
    root = str(drifted.host.root)
    bundle = tmp_path / "node.tar.gz"

    on_node = numawatch("--host-root", root, "check", "--format", "json")
    captured = numawatch("--host-root", root, "capture", "-o", str(bundle))
    offline = numawatch("check", "--from", str(bundle), "--format", "json")
    table = numawatch("check", "--from", str(bundle))

    assert captured.returncode == 0, captured.stderr
    assert captured.stdout == ""
    [line] = captured.stderr.strip().splitlines()
    assert line.startswith("numawatch: captured ") and str(bundle) in line
    assert on_node.returncode == offline.returncode == table.returncode == 1
    expected = comparable(report(on_node))
    assert {"container_numa_split", "kubelet_topology_manager_policy", "irq_on_isolated_cpu"} <= {
        finding["check"] for finding in expected["findings"]}
    assert expected == comparable(report(offline))
    assert report(offline)["host_root"] == str(bundle)
    assert "container_numa_split" in table.stdout
    # The bundle carries the node's own report too, for whoever opens it by hand.
    assert expected == comparable(json.loads(member_bytes(bundle, "check.json")))


@pytest.mark.slow
def test_the_bundle_holds_what_numawatch_read_and_nothing_else(drifted, tmp_path):
    drifted.host.write("etc/shadow", f"root:{SECRET}:19000:0:99999:7:::\n")
    drifted.host.write("var/lib/kubelet/pki/kubelet.key", SECRET)
    bundle = tmp_path / "node.tar.gz"

    assert numawatch("--host-root", str(drifted.host.root), "capture", "-o", str(bundle)).returncode == 0
    found = members(bundle)
    everything = gzip.decompress(bundle.read_bytes())

    assert SECRET.encode() not in everything
    assert "host/etc/shadow" not in found
    assert "host/var/lib/kubelet/pki/kubelet.key" not in found
    assert found["host/proc/cmdline"].isreg()
    assert found["host/var/lib/kubelet/cpu_manager_state"].isreg()
    # sysfs keeps its shape: the PCI device links, relative and inside the bundle, with their targets.
    link = found["host/sys/bus/pci/devices/0000:18:00.0"]
    assert link.issym()
    gpu_dir = "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"  # behind its PCIe switch
    assert link.linkname == f"../../../{gpu_dir}"
    assert found[f"host/sys/{gpu_dir}"].isdir()
    # Permission bits are kept: they are how a managed IRQ is told apart.
    assert stat.S_IMODE(found["host/proc/irq/150/smp_affinity"].mode) == 0o444
    manifest = json.loads(member_bytes(bundle, "manifest.json"))
    assert manifest["format"] == "numawatch-capture"
    assert manifest["paths"]["procfs"] == "host/proc"
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o600


@pytest.mark.slow
def test_the_intent_travels_with_the_bundle_and_an_explicit_one_wins(drifted, tmp_path):
    intent = tmp_path / "intent.yaml"
    intent.write_text("kubelet:\n  topologyManagerPolicy: best-effort\n")
    bundle = tmp_path / "node.tar.gz"
    root = str(drifted.host.root)

    on_node = report(numawatch("--host-root", root, "--intent", str(intent), "check", "--format", "json"))
    assert numawatch("--host-root", root, "--intent", str(intent), "capture", "-o", str(bundle)).returncode == 0
    offline = report(numawatch("check", "--from", str(bundle), "--format", "json"))
    reference = tmp_path / "reference.yaml"
    reference.write_text("")  # an empty intent file is the reference profile
    overridden = report(numawatch("check", "--from", str(bundle), "--format", "json", "--intent", str(reference)))

    assert comparable(on_node) == comparable(offline)
    assert offline["intent"] == str(intent)
    assert "kubelet_topology_manager_policy" not in {finding["check"] for finding in offline["findings"]}
    assert "kubelet_topology_manager_policy" in {finding["check"] for finding in overridden["findings"]}


@pytest.mark.slow
def test_a_capture_with_sources_down_reproduces_them_and_their_reasons(fake_host, tmp_path):
    fake_host.mkdir("proc")  # nearly nothing: most sources are down, each with its reason
    bundle = tmp_path / "empty.tar.gz"
    root = str(fake_host.root)

    on_node = report(numawatch("--host-root", root, "check", "--format", "json"))
    assert numawatch("--host-root", root, "capture", "-o", str(bundle)).returncode == 0
    offline = report(numawatch("check", "--from", str(bundle), "--format", "json"))

    assert comparable(on_node) == comparable(offline)
    assert any(not source["up"] and root in source["reason"] for source in offline["sources"])


# ------------------------------------------------------------------------------------------------ redaction
def test_command_lines_environments_and_tokens_are_redacted_in_the_bundle(drifted, tmp_path):
    """A future source reading command lines, environments and RKE2's config: what it reads is captured, redacted."""
    host = drifted.host
    host.write("proc/4100/cmdline", f"python3\0-m\0vllm\0--api-key={SECRET}\0")
    host.write("proc/4100/task/4101/cmdline", f"python3\0--api-key={SECRET}\0")
    host.write("proc/4100/environ", f"HF_TOKEN={SECRET}\0IRQBALANCE_BANNED_CPULIST=2-7\0")
    config = host.path("etc/rancher/rke2/config.yaml")
    config.write_text(config.read_text() + f"token: {SECRET}\nagent-token: \"{SECRET}\"\n")

    def nosy(paths):
        for relative in ("4100/cmdline", "4100/task/4101/cmdline", "4100/environ"):
            (paths.procfs / relative).read_bytes()
        return None

    bundle = tmp_path / "node.tar.gz"
    result = capture.capture(drifted.paths, REFERENCE, bundle, sources=(*SOURCES, SourceSpec("nosy", nosy)))
    everything = gzip.decompress(bundle.read_bytes())

    assert SECRET.encode() not in everything
    assert member_bytes(bundle, "host/proc/4100/cmdline") == b"[redacted]"
    assert member_bytes(bundle, "host/proc/4100/task/4101/cmdline") == b"[redacted]"
    assert member_bytes(bundle, "host/proc/4100/environ") == b"IRQBALANCE_BANNED_CPULIST=2-7\0[redacted]\0"
    assert b'token: "[redacted]"' in member_bytes(bundle, "host/etc/rancher/rke2/config.yaml")
    oci = [name for name in members(bundle) if name.endswith("/config.json")]
    assert oci
    assert all(json.loads(member_bytes(bundle, name)).get("process", "[redacted]") == "[redacted]" for name in oci)
    assert result.redacted >= 4
    assert "host/proc/4100/environ" in json.loads(member_bytes(bundle, "manifest.json"))["redacted"]


def test_redaction_functions_keep_only_what_numawatch_reads():
    assert capture.redact_cmdline(b"a\0b\0") == b"[redacted]"
    keep = capture.environ_keep()
    assert capture.redact_environ(b"A=1\0IRQBALANCE_BANNED_CPUS=ff\0B=2\0", keep) == (
        b"IRQBALANCE_BANNED_CPUS=ff\0[redacted]\0")
    assert capture.redact_oci_config(b"not json") is None
    assert capture.redact_oci_config(b'{"annotations": {}}') is None  # not an OCI config
    redacted = json.loads(capture.redact_oci_config(b'{"ociVersion": "1.0", "process": {"env": ["K=v"]}, '
                                                    b'"annotations": {"a": "b"}}'))
    assert redacted == {"ociVersion": "1.0", "process": "[redacted]", "annotations": {"a": "b"}}
    assert capture.redact_secret_keys(b"kubelet-arg:\n  - cpu-manager-policy=static\ntoken: K10abc\n"
                                      b"etcd-s3-secret-key: xyz\n") == (
        b'kubelet-arg:\n  - cpu-manager-policy=static\ntoken: "[redacted]"\netcd-s3-secret-key: "[redacted]"\n')


# ------------------------------------------------------------------------------------------------ NVML hook
class JsonRecording:
    def dump(self, result: dict) -> bytes:
        return json.dumps(result).encode()

    def load(self, data: bytes) -> dict:
        return json.loads(data)


def test_a_source_with_a_recording_is_replayed_from_the_bundle_not_asked_again(drifted, tmp_path):
    """What the NVML source hooks into: its reading is stored on capture and given back offline."""
    answers = {"device": {"gpus": 8}}

    def device(paths):
        if answers["device"] is None:
            raise SourceUnavailable("no NVIDIA driver on this machine")
        return answers["device"]

    def broken(paths):
        raise SourceUnavailable("NVML call timed out")

    specs = (*SOURCES, SourceSpec("fake_nvml", device, recording=JsonRecording()),
             SourceSpec("fake_down", broken, recording=JsonRecording()))
    bundle = tmp_path / "node.tar.gz"
    capture.capture(drifted.paths, REFERENCE, bundle, sources=specs)
    answers["device"] = None  # the machine reading the bundle has no GPU
    evaluation = capture.evaluate_bundle(str(bundle), sources=specs)

    assert evaluation.host.get("fake_nvml") == {"gpus": 8}
    assert not evaluation.host.statuses["fake_down"].up
    assert evaluation.host.statuses["fake_down"].reason == "NVML call timed out"
    # amdsmi and hlml are up with no GPUs on this NVIDIA node (nothing to read): their empty readings are kept too
    assert json.loads(member_bytes(bundle, "manifest.json"))["readings"] == {
        "amdsmi": "readings/amdsmi", "hlml": "readings/hlml", "fake_nvml": "readings/fake_nvml"}


# ------------------------------------------------------------------------------------------------ hostile bundles
MANIFEST = json.dumps({
    "format": "numawatch-capture", "format_version": 1,
    "paths": {"root": "host", "procfs": "host/proc", "sysfs": "host/sys", "kubelet": "host/var/lib/kubelet",
              "rke2": "host/etc/rancher/rke2"},
    "intent": {"source": "reference profile", "file": None},
}).encode()


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **fields) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def write_tar(path: Path, entries: Iterable[tuple[tarfile.TarInfo, bytes]], *, manifest: bool = True) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        if manifest:
            tar.addfile(*_with_data(entry("manifest.json", data=MANIFEST)))
        for info, data in entries:
            tar.addfile(*_with_data((info, data)))
    return path


def _with_data(item: tuple[tarfile.TarInfo, bytes]) -> tuple[tarfile.TarInfo, io.BytesIO | None]:
    info, data = item
    return info, io.BytesIO(data) if info.isreg() else None


def huge_member_bundle(path: Path) -> Path:
    """A header that claims more than the member limit, followed by (far less) data: refused on the header."""
    raw = io.BytesIO()
    manifest, data = entry("manifest.json", data=MANIFEST)
    raw.write(manifest.tobuf(tarfile.PAX_FORMAT) + data + b"\0" * (-len(data) % 512))
    huge = tarfile.TarInfo("host/proc/interrupts")
    huge.size = capture.MAX_MEMBER_BYTES + 1
    raw.write(huge.tobuf(tarfile.PAX_FORMAT) + b"0" * 4096)
    path.write_bytes(gzip.compress(raw.getvalue()))
    return path


@pytest.mark.parametrize(
    ("entries", "reason"),
    [
        ([entry("/etc/cron.d/evil", data=b"* * * * * root sh\n")], "an absolute path"),
        ([entry("host/../../evil", data=b"x")], "'..'"),
        ([entry("host/proc", tarfile.SYMTYPE, linkname="/proc")], "a symlink to an absolute path"),
        ([entry("host/sys", tarfile.SYMTYPE, linkname="../../../../etc")], "a symlink pointing outside"),
        ([entry("host/link", tarfile.SYMTYPE, linkname="."), entry("host/link/x", data=b"x")],
         "a path through a symlink"),
        ([entry("host/dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3)], "a device node"),
        ([entry("host/fifo", tarfile.FIFOTYPE)], "a FIFO"),
        ([entry("host/a", data=b"x"), entry("host/hard", tarfile.LNKTYPE, linkname="host/a")], "a hard link"),
        ([entry("host/a", data=b"x"), entry("host/a", data=b"y")], "a second member with the same name"),
        # Each link stays inside on its own; once c exists, y climbs out through it.
        ([entry("host/y", tarfile.SYMTYPE, linkname="a/b/c/../../../.."),
          entry("host/a/b/c", tarfile.SYMTYPE, linkname="../../x")], "a symlink chain resolving outside"),
    ],
    ids=["absolute", "dotdot", "symlink-absolute", "symlink-out", "through-symlink", "device", "fifo", "hardlink",
         "duplicate", "symlink-chain"],
)
@pytest.mark.slow
def test_a_hostile_bundle_is_refused_in_one_line_with_exit_2(tmp_path, entries, reason):
    bundle = write_tar(tmp_path / "hostile.tar.gz", entries)

    result = numawatch("check", "--from", str(bundle))

    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"numawatch: error: bundle {bundle}: ")
    assert reason in line
    assert not (tmp_path.parent / "evil").exists()
    assert not Path("/etc/cron.d/evil").exists()


@pytest.mark.slow
def test_a_member_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    bundle = huge_member_bundle(tmp_path / "huge.tar.gz")

    result = numawatch("check", "--from", str(bundle))

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert f"member 'host/proc/interrupts': larger than {capture.MAX_MEMBER_BYTES} bytes" in line


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda path: write_tar(path, [entry("host/proc/cmdline", data=b"x")], manifest=False),
         "not a numawatch capture bundle (no manifest.json)"),
        (lambda path: path.write_bytes(b"this is not an archive\n" * 40) and path, "not a readable tar archive"),
        (lambda path: path.write_bytes(gzip.compress(b"\0" * 100)[:-10]) and path, "not a readable tar archive"),
        (lambda path: path, "cannot read it"),
    ],
    ids=["no-manifest", "not-a-tar", "truncated-gzip", "missing"],
)
@pytest.mark.slow
def test_something_that_is_not_a_bundle_is_refused_in_one_line(tmp_path, make, reason):
    bundle = make(tmp_path / "bundle.tar.gz")

    result = numawatch("check", "--from", str(bundle))

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert reason in line


def test_a_manifest_whose_paths_leave_the_bundle_is_refused(tmp_path):
    bad = json.loads(MANIFEST)
    bad["paths"]["procfs"] = "../../proc"
    with tarfile.open(tmp_path / "b.tar.gz", "w:gz") as tar:
        data = json.dumps(bad).encode()
        tar.addfile(*_with_data(entry("manifest.json", data=data)))

    with pytest.raises(capture.BundleError, match=r"paths\.procfs: expected a relative path inside the bundle"):
        capture.evaluate_bundle(str(tmp_path / "b.tar.gz"))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--host-root", "/srv", "check", "--from", "b.tar.gz"], "--host-root cannot be used with it"),
        (["check", "--from", "b.tar.gz", "--window", "1"], "--window cannot be used with it"),
        (["capture"], "the following arguments are required: -o/--output"),
    ],
)
@pytest.mark.slow
def test_flags_that_make_no_sense_with_bundles_are_refused(args, fragment):
    result = numawatch(*args)

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert fragment in line


@pytest.mark.slow
def test_capture_into_a_directory_that_does_not_exist_exits_2(fake_host, tmp_path):
    fake_host.mkdir("proc")

    result = numawatch("--host-root", str(fake_host.root), "capture", "-o", str(tmp_path / "no/such/dir/b.tar.gz"))

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("numawatch: error: cannot write ")


# ------------------------------------------------------------------------------------------------ this machine
@pytest.mark.realhost
@pytest.mark.slow
def test_capture_of_this_machine_evaluates_offline_with_the_same_sources_up(tmp_path):
    bundle = tmp_path / "this.tar.gz"

    captured = numawatch("capture", "-o", str(bundle))
    offline = numawatch("check", "--from", str(bundle), "--format", "json")

    assert captured.returncode == 0, captured.stderr
    assert offline.returncode in (0, 1), offline.stderr
    on_node = json.loads(member_bytes(bundle, "check.json"))
    document = report(offline)
    assert [(s["name"], s["up"]) for s in on_node["sources"]] == [(s["name"], s["up"]) for s in document["sources"]]
    assert [f["check"] for f in on_node["findings"]] == [f["check"] for f in document["findings"]]
    assert "host/proc/self" not in members(bundle) or members(bundle)["host/proc/self"].issym()


# --------------------------------------------------------------------------------------------------- a real GPU node
H200_BUNDLE = Path(__file__).parent / "data" / "h200-node.tar.gz"


@pytest.mark.slow
def test_a_bundle_captured_on_a_real_h200_evaluates_offline_as_it_did_there():
    # Captured by tests/device/check_nvml.sh (POD_CGROUP=1) on a one-H200 Firecracker VM, driver 580.159.04, with a
    # PyTorch process in a pod-shaped cgroup: real NVML answers and real /proc, /sys and cgroup files, so a change to
    # the bundle format or to the NVML reading's shape shows up here, not on an SRE's ticket (docs/gpu.md).
    offline = numawatch("check", "--from", str(H200_BUNDLE), "--format", "json")

    # Its one finding is Debian's default vm.swappiness, an info finding: below the default --fail-on (warning).
    assert offline.returncode == 0, offline.stderr
    assert numawatch("check", "--from", str(H200_BUNDLE), "--fail-on", "info").returncode == 1
    document = report(offline)
    on_node = json.loads(member_bytes(H200_BUNDLE, "check.json"))
    # Checks and sources added after the capture could not record their files on the node: compare what it knew.
    assert comparable(known_then(document, on_node)) == comparable(on_node)
    up = {source["name"]: source["up"] for source in document["sources"]}
    assert up["nvml"] and up["processes"] and up["cgroups"] and up["gpus_sysfs"]
    not_evaluated = {item["check"] for item in document["not_evaluated"]}
    assert {"gpu_process_remote", "gpu_process_memlock"}.isdisjoint(not_evaluated)
    assert [finding["check"] for finding in document["findings"]] == ["vm_swappiness"]
    reading = json.loads(member_bytes(H200_BUNDLE, "readings/nvml"))["result"]
    [gpu] = reading["gpus"]
    assert (gpu["name"], gpu["numa_node"], gpu["up"]) == ("NVIDIA H200", 0, True)
    assert [process["container_id"][:12] for process in gpu["processes"]] == ["c0dec0dec0de"]


def test_check_from_names_paths_as_the_node_did_in_labels_and_remediations_too(tmp_path):
    """A label or a remediation that names a file under the host root must not carry the analyst's temporary
    extraction directory after ``check --from``."""
    from numawatch.capture import _as_on_the_node
    from numawatch.checks import Evaluation, Finding
    from numawatch.host import Host
    from numawatch.intent import REFERENCE
    from numawatch.model import frozen_map
    from numawatch.paths import Paths

    extracted = str(tmp_path / "x/host")
    finding = Finding(
        check="irqbalance_unbanned",
        severity="warning",
        labels=frozen_map({"file": f"{extracted}/etc/default/irqbalance", "cpus": "2-3"}),
        message=f"see {extracted}/etc/default/irqbalance",
        remediation=f"edit {extracted}/etc/default/irqbalance",
    )
    host = Host(paths=Paths.from_root(extracted), results={}, statuses={})
    evaluation = Evaluation(host, REFERENCE, (finding,), (), ("irqbalance_unbanned",))

    (fixed,) = _as_on_the_node(evaluation, extracted, "/").findings

    assert dict(fixed.labels) == {"file": "/etc/default/irqbalance", "cpus": "2-3"}
    assert fixed.message == "see /etc/default/irqbalance"
    assert fixed.remediation == "edit /etc/default/irqbalance"


@pytest.mark.slow
def test_check_from_warnings_name_the_nodes_paths_not_the_temporary_directory(fake_host, tmp_path):
    reference_node(fake_host)
    broken = max(fake_host.root.glob("sys/fs/cgroup/kubepods.slice/**/memory.numa_stat"),
                 key=lambda path: len(path.parts))
    broken.write_text("garbage\n")
    bundle = tmp_path / "node.tar.gz"
    assert numawatch("--host-root", str(fake_host.root), "capture", "-o", str(bundle)).returncode == 0
    scratch = tmp_path / "tmp"
    scratch.mkdir()

    offline = subprocess.run([sys.executable, "-m", "numawatch", "check", "--from", str(bundle)], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "TMPDIR": str(scratch)})

    [warning] = [line for line in offline.stderr.splitlines() if "memory.numa_stat" in line]
    assert "level=warn" in warning
    assert str(broken) in warning
    assert str(scratch) not in offline.stderr
