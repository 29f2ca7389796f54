"""The host tree as an attacker writes it: links out of the root, ``..`` in paths taken from file content,
FIFOs where files should be. Nothing outside the root is read, nothing blocks, through every reader.

- ``test_a_link_out_of_the_root_is_not_read``: a link out of the root at a host file (relative ``../`` and
  absolute) is not followed out: its target's bytes reach neither ``check``'s JSON nor a capture bundle's
  ``check.json``.
- ``test_a_bundle_cannot_name_the_analysts_files``: a bundle whose RKE2 config says
  ``config=/../../../../tmp/elsewhere/kc.yaml`` (and ``config-dir=``) does not make ``check --from`` read the
  analyst's own files.
- ``test_a_fifo_does_not_*``: a FIFO at a host file: ``check`` finishes and ``serve`` becomes ready.
- the canary test: every file numawatch reads (as a capture recording lists them) replaced by a link out of the
  root, absolute, relative and through a linked directory, with a canary outside and the original content where
  the confined resolution lands; ``check``, ``serve`` (``/metrics`` and ``/``), ``capture`` and ``check --from``
  give the untouched tree's result and never a canary byte, in any output or log.
- a property test: random links, FIFOs and oversized files anywhere in a host tree; no canary, no hang.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fakehost import FakeHost
from fakehost.kernel import add_irqbalance, add_uncore_pmus
from fakehost.reference import reference_node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numawatch import capture, confined, metrics, report
from numawatch.checks import evaluate
from numawatch.host import read_host
from numawatch.intent import REFERENCE
from serving import numawatch_serve

CANARY = "CANARY-7e1f0c9a4b2d"  # a valid governor, integer-looking it is not: any read of it shows somewhere
TIMEOUT = 120  # seconds a subprocess may take on a loaded CI machine; a hang is what it catches, not slowness


def numawatch(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "numawatch", *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def comparable(document: dict) -> dict:
    """What must not change when every file is reached through a link: findings, checks not evaluated and why,
    sources up or down and why."""
    return {
        "findings": document["findings"],
        "not_evaluated": document["not_evaluated"],
        "sources": [(source["name"], source["up"], source["reason"]) for source in document["sources"]],
    }


def bundle_texts(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        out = {}
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isreg() else None
            out[member.name] = (handle.read() if handle else b"") + member.linkname.encode()
        return out


def escaping(link_dir: Path, target: Path) -> str:
    """A relative link from ``link_dir`` reaching ``target`` on this machine (enough ``..`` to get to /)."""
    return "../" * (len(link_dir.parts) + 3) + str(target).lstrip("/")


@pytest.fixture(params=["openat2", "fallback"])
def opener(request, monkeypatch):
    """Run numawatch's subprocesses with each way of resolving (NUMAWATCH_CONFINED_FALLBACK forces the walk)."""
    if request.param == "openat2" and not confined._probe_openat2():
        pytest.skip("this kernel (or its seccomp profile) has no openat2")
    monkeypatch.setenv("NUMAWATCH_CONFINED_FALLBACK", "1" if request.param == "fallback" else "0")
    return request.param


# ------------------------------------------------------------------------------------------------ reproducer 1
@pytest.mark.slow
def test_a_link_out_of_the_root_is_not_read(fake_host, tmp_path, opener):
    """``proc/sys/vm/swappiness -> ../../../../tmp/x/secret`` and an absolute link at a governor: on main the
    secret came back in a check reason (``expected an integer, got 'root:$6$...'``) and as a governor label."""
    reference_node(fake_host)
    outside = tmp_path / "x"
    outside.mkdir()
    (outside / "secret").write_text(f"root:$6${CANARY}:19000:0:99999:7:::\n")
    (outside / "governor").write_text(f"{CANARY}\n")
    swappiness = fake_host.path("proc/sys/vm/swappiness")
    swappiness.unlink()
    os.symlink(escaping(swappiness.parent, outside / "secret"), swappiness)
    governor = fake_host.path("sys/devices/system/cpu/cpufreq/policy1/scaling_governor")
    governor.unlink()
    os.symlink(outside / "governor", governor)
    assert CANARY in swappiness.read_text()  # what an unconfined read gets
    bundle = tmp_path / "node.tar.gz"

    checked = numawatch("--host-root", str(fake_host.root), "check", "--format", "json")
    captured = numawatch("--host-root", str(fake_host.root), "capture", "-o", str(bundle))

    assert CANARY not in checked.stdout + checked.stderr
    document = json.loads(checked.stdout)
    kernel = next(source for source in document["sources"] if source["name"] == "kernel")
    assert kernel["up"]
    assert captured.returncode == 0, captured.stderr
    assert CANARY not in captured.stdout + captured.stderr
    for name, data in bundle_texts(bundle).items():
        assert CANARY.encode() not in data, name


# ------------------------------------------------------------------------------------------------ reproducer 2
@pytest.mark.parametrize("flag", ["config", "config-dir"])
@pytest.mark.slow
def test_a_bundle_cannot_name_the_analysts_files(fake_host, tmp_path, opener, flag):
    """A bundle without a single link: its RKE2 config's ``kubelet-arg`` names ``/../../../..<analyst's file>``.
    On main ``check --from`` read it and reported ``CPU Manager policy is "<its content>"``."""
    reference_node(fake_host)
    elsewhere = Path(tempfile.mkdtemp(prefix="elsewhere-", dir=tmp_path))
    climb = "/.." * 40
    target = f"{climb}{elsewhere}/kc.yaml" if flag == "config" else f"{climb}{elsewhere}/dropins"
    # The only kubelet-arg: a policy given as a flag would win over the file's anyway.
    fake_host.write("etc/rancher/rke2/config.yaml", f"kubelet-arg:\n  - {flag}={target}\n")
    bundle = tmp_path / "node.tar.gz"
    captured = numawatch("--host-root", str(fake_host.root), "capture", "-o", str(bundle))
    assert captured.returncode == 0, captured.stderr
    with tarfile.open(bundle) as tar:
        assert not any(info.issym() for info in tar.getmembers() if "rancher" in info.name)
    # Now, on the analyst's machine, the file the bundle names exists.
    kubelet_configuration = f"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" \
                            f"cpuManagerPolicy: {CANARY}\n"  # fmt: skip
    (elsewhere / "kc.yaml").write_text(kubelet_configuration)
    (elsewhere / "dropins").mkdir()
    (elsewhere / "dropins/99-mine.conf").write_text(kubelet_configuration)

    offline = numawatch("check", "--from", str(bundle), "--format", "json")

    assert offline.returncode in (0, 1), offline.stderr
    assert CANARY not in offline.stdout + offline.stderr
    assert json.loads(offline.stdout)["findings"] is not None


# ------------------------------------------------------------------------------------------------ reproducer 3
FIFO_PLACES = (
    "proc/cmdline",
    "proc/interrupts",
    "sys/devices/system/cpu/online",
    "sys/kernel/mm/transparent_hugepage/enabled",
    "var/lib/kubelet/cpu_manager_state",
    "etc/rancher/rke2/config.yaml",
)


def fifo_everywhere(host: FakeHost) -> None:
    for rel in FIFO_PLACES:
        path = host.path(rel)
        path.unlink()
        os.mkfifo(path)


@pytest.mark.slow
def test_a_fifo_does_not_hang_check(fake_host, opener):
    """On main ``check`` blocked forever in open() of the first FIFO (the subprocess timeout is the assertion)."""
    reference_node(fake_host)
    fifo_everywhere(fake_host)
    checked = numawatch("--host-root", str(fake_host.root), "check", "--format", "json")
    document = json.loads(checked.stdout)
    down = {source["name"]: source["reason"] for source in document["sources"] if not source["up"]}
    assert "not a regular file (a FIFO)" in down["kubelet_config"]
    assert str(fake_host.path("etc/rancher/rke2/config.yaml")) in down["kubelet_config"]
    assert "interrupts" in down
    assert "Traceback" not in checked.stderr


@pytest.mark.slow
def test_a_fifo_does_not_keep_serve_starting(fake_host, opener):
    """On main serve answered 503 "starting" for ever: its first evaluation never finished."""
    reference_node(fake_host)
    fifo_everywhere(fake_host)
    with numawatch_serve(fake_host.root) as (_, url):
        status, body = wait_until_ready(url + "metrics")
        assert status == 200
        assert 'numawatch_source_up{source="interrupts"} 0' in body


def wait_until_ready(url: str, seconds: float = TIMEOUT) -> tuple[int, str]:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------------ the canary test
# Every kind of file numawatch reads, as the complete trees below have them (paths relative to the root, resolved):
# the canary test fails if one of them was not among the files it replaced by links. Two trees, because some
# readers exclude others: RKE2 with containerd and irqbalance's own environment, kubeadm with CRI-O and irqbalance's
# environment file (read only when no daemon's environment is readable).
KINDS = {
    "kernel command line": r"proc/cmdline",
    "/proc/interrupts": r"proc/interrupts",
    "IRQ affinity files": r"proc/irq/\d+/(smp|effective)_affinity_list",
    "IRQ smp_affinity mode": r"proc/irq/\d+/smp_affinity",
    "default IRQ affinity": r"proc/irq/default_smp_affinity",
    "sysctls": r"proc/sys/(vm/swappiness|kernel/numa_balancing)",
    "process comm": r"proc/\d+/comm",
    "socket table": r"proc/1/net/unix",
    "nvidia driver information": r"proc/driver/nvidia/gpus/[^/]+/information",
    "CPU lists": r"sys/devices/system/cpu/(online|present|possible|isolated|nohz_full)",
    "CPU topology": r"sys/devices/system/cpu/cpu\d+/topology/(core_id|physical_package_id|thread_siblings_list)",
    "NUMA node files": r"sys/devices/system/node/node\d+/(cpulist|distance|meminfo|numastat)",
    "per-node huge pages": r"sys/devices/system/node/node\d+/hugepages/hugepages-\d+kB/\w+",
    "THP": r"sys/kernel/mm/transparent_hugepage/(enabled|defrag)",
    "global huge pages": r"sys/kernel/mm/hugepages/hugepages-\d+kB/\w+",
    "cpufreq governor": r"sys/devices/system/cpu/cpufreq/policy\d+/scaling_governor",
    "cpufreq affected CPUs": r"sys/devices/system/cpu/cpufreq/policy\d+/affected_cpus",
    "PCI attributes": r"sys/devices/pci[^/]+/.*/(vendor|class|device)",
    "PCI numa_node": r"sys/devices/pci[^/]+/.*/numa_node",
    "PCI local_cpulist": r"sys/devices/pci[^/]+/.*/local_cpulist",
    "uncore PMU": r"sys/bus/event_source/devices/[^/]+/(type|cpumask|format/\w+)",
    "cgroup procs": r"sys/fs/cgroup/kubepods\.slice/.*/cgroup\.procs",
    "cgroup cpusets": r"sys/fs/cgroup/kubepods\.slice/.*cpuset\.(cpus|mems)\.effective",
    "cgroup memory.numa_stat": r"sys/fs/cgroup/kubepods\.slice/.*/memory\.numa_stat",
    "irqbalance unit cgroup": r"sys/fs/cgroup/system\.slice/irqbalance\.service/cgroup\.procs",
    "kubelet checkpoints": r"var/lib/kubelet/(cpu_manager_state|memory_manager_state|device-plugins/\w+)",
    "kubelet config-dir= drop-ins": r"etc/kubernetes/kubelet\.conf\.d/[^/]+\.conf",
}
VARIANT_KINDS = {
    "rke2": {
        "process environ": r"proc/\d+/environ",
        "RKE2 config": r"etc/rancher/rke2/config\.yaml",
        "RKE2 config drop-ins": r"etc/rancher/rke2/config\.yaml\.d/[^/]+\.yaml",
        "kubelet config= file": r"etc/kubernetes/kubelet-config\.yaml",
        "containerd runtime bundles": r"run/k3s/containerd/io\.containerd\.runtime\.v2\.task/k8s\.io/\w+/config\.json",
    },
    "kubeadm": {
        "kubeadm flags": r"var/lib/kubelet/kubeadm-flags\.env",
        "kubelet extra flags": r"etc/default/kubelet",
        "KubeletConfiguration": r"var/lib/kubelet/config\.yaml",
        "CRI-O runtime bundles": r"(run|var/lib)/containers/storage/overlay-containers/\w+/userdata/config\.json",
        "irqbalance environment file": r"etc/sysconfig/irqbalance",
    },
}
HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def complete_host(host: FakeHost, variant: str = "rke2") -> None:
    """The reference node plus what it lacks of the host numawatch reads: a running irqbalance (its environment, or
    its file), uncore PMUs, kubelet ``config=`` / ``config-dir=`` includes."""
    host.write("etc/kubernetes/kubelet.conf.d/10-numa.conf", HEADER + "topologyManagerScope: pod\n")
    add_uncore_pmus(host, paranoid=0)  # so that the PMU files are read (opening the counters then fails)
    host.write("sys/fs/cgroup/system.slice/irqbalance.service/cgroup.procs", "4242")
    if variant == "rke2":
        reference_node(host)
        add_irqbalance(host, pid=4242, environ={"IRQBALANCE_BANNED_CPULIST": "1-7,9-15", "PATH": "/usr/bin"},
                       socket=True)  # fmt: skip
        host.write("etc/kubernetes/kubelet-config.yaml", HEADER)
        host.write(
            "etc/rancher/rke2/config.yaml.d/50-includes.yaml",
            "kubelet-arg+:\n  - config=/etc/kubernetes/kubelet-config.yaml\n"
            "  - config-dir=/etc/kubernetes/kubelet.conf.d\n",
        )
    else:
        reference_node(host, flavor="kubeadm", runtime="crio")
        add_irqbalance(host, pid=4242, environ=None, env_file="rhel", file_text="IRQBALANCE_BANNED_CPULIST=1-7\n",
                       socket=True)  # fmt: skip
        host.write("etc/default/kubelet", 'KUBELET_EXTRA_ARGS="--config-dir=/etc/kubernetes/kubelet.conf.d"\n')


def read_files(host: FakeHost) -> set[str]:
    """Every regular file an evaluation opens or stats, relative to the root with its links resolved."""
    _, recorded = capture.record_evaluation(host.paths, REFERENCE)
    root = os.path.realpath(host.root)
    found = set()
    for path in recorded.opened | recorded.stated:
        real = os.path.realpath(path)
        if real.startswith(root + "/") and os.path.isfile(real) and not os.path.islink(real):
            found.add(os.path.relpath(real, root))
    return found


def has_links(directory: Path) -> bool:
    return any(os.path.islink(os.path.join(top, name)) for top, dirs, files in os.walk(directory)
               for name in dirs + files)  # fmt: skip


def plant_canaries(host: FakeHost, outside: Path, files: set[str]) -> list[str]:
    """Move every file in ``files`` (or a directory holding some) to where a confined resolution of a link to
    ``outside`` lands (``<root>/<outside>/...``), put the link in its place and the canary at the link's target
    outside the root. Returns what was linked, as "kind path"."""
    root = host.root
    decoy = root / str(outside).lstrip("/")
    planted: list[str] = []
    # Whole directories first: one in five of the directories holding read files, if nothing in it is a link (a
    # relative link inside would resolve from the decoy's place) and no chosen directory is above or below it.
    chosen: list[str] = []
    directories = sorted({os.path.dirname(rel) for rel in files}, key=lambda d: (-d.count("/"), d))
    for index, directory in enumerate(directories):
        if index % 5 or directory.count("/") < 2 or has_links(root / directory):
            continue
        if directory.startswith("sys/devices/pci"):
            # A PCI function's place under sys/devices is data (the pci_topology source reads the hierarchy from
            # it, as hwloc does): moved behind a link it is another hierarchy, not the same one reached otherwise.
            continue
        if any(directory.startswith(other + "/") or other.startswith(directory + "/") for other in chosen):
            continue
        chosen.append(directory)
    for index, directory in enumerate(chosen):
        source = root / directory
        (decoy / directory).parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, outside / directory)
        for top, _, names in os.walk(outside / directory):
            for name in names:
                Path(top, name).write_text(f"{CANARY}\n")
        source.rename(decoy / directory)
        target = str(outside / directory) if index % 2 else escaping(source.parent, outside / directory)
        os.symlink(target, source)
        planted.append(f"directory {directory}")
    for index, rel in enumerate(sorted(files)):
        if any(rel.startswith(directory + "/") for directory in chosen):
            continue
        source = root / rel
        (decoy / rel).parent.mkdir(parents=True, exist_ok=True)
        (outside / rel).parent.mkdir(parents=True, exist_ok=True)
        (outside / rel).write_text(f"{CANARY}\n")
        source.rename(decoy / rel)
        target = str(outside / rel) if index % 2 else escaping(source.parent, outside / rel)
        os.symlink(target, source)
        planted.append(f"{'absolute' if index % 2 else 'relative'} {rel}")
    return planted


@pytest.mark.parametrize("variant", ["rke2", "kubeadm"])
@pytest.mark.slow
def test_no_canary_behind_any_link_reaches_any_output(fake_host, tmp_path, opener, variant):
    complete_host(fake_host, variant)
    root = str(fake_host.root)
    baseline = numawatch("--host-root", root, "check", "--format", "json")
    files = read_files(fake_host)
    kinds = {**KINDS, **VARIANT_KINDS[variant]}
    missing = [kind for kind, pattern in kinds.items() if not any(re.fullmatch(pattern, rel) for rel in files)]
    assert missing == [], f"kinds of files the evaluation did not read: {missing}"
    outside = tmp_path / "outside"
    planted = plant_canaries(fake_host, outside, files)
    assert sum(item.startswith("directory ") for item in planted) >= 5
    assert sum(item.startswith("absolute ") for item in planted) > 50
    assert sum(item.startswith("relative ") for item in planted) > 50
    sample = next(item.split(" ", 1)[1] for item in planted if item.startswith("relative "))
    assert CANARY in fake_host.path(sample).read_text()  # an unconfined read would get the canary

    checked = numawatch("--host-root", root, "check", "--format", "json")
    bundle = tmp_path / "node.tar.gz"
    captured = numawatch("--host-root", root, "capture", "-o", str(bundle))
    offline = numawatch("check", "--from", str(bundle), "--format", "json")
    with numawatch_serve(fake_host.root, interval="0.5") as (process, url):
        _, exposition = wait_until_ready(url + "metrics")
        _, landing = wait_until_ready(url)
        process.terminate()
        process.wait(timeout=30)
        serve_log = process.stderr.read()  # the whole log: the replayed lines read before it listened, then the rest

    for name, text in (("check", checked.stdout + checked.stderr), ("capture", captured.stdout + captured.stderr),
                       ("check --from", offline.stdout + offline.stderr), ("/metrics", exposition),
                       ("landing page", landing), ("serve's log", serve_log)):  # fmt: skip
        assert CANARY not in text, name
    for name, data in bundle_texts(bundle).items():
        assert CANARY.encode() not in data, name
    # Every file was read through its link, inside the root: the result is the untouched tree's.
    assert comparable(json.loads(checked.stdout)) == comparable(json.loads(baseline.stdout))
    assert comparable(json.loads(offline.stdout)) == comparable(json.loads(baseline.stdout))
    assert 'numawatch_source_up{source="kernel"} 1' in exposition


PROCESS_KINDS = {
    "GPU process cgroup": r"proc/\d+/cgroup",
    "GPU process comm": r"proc/\d+/comm",
    "GPU process limits": r"proc/\d+/limits",
    "thread sched": r"proc/\d+/task/\d+/sched",
    "thread status": r"proc/\d+/task/\d+/status",
    "thread schedstat": r"proc/\d+/task/\d+/schedstat",
}


def test_no_canary_reaches_the_gpu_process_readings(fake_host, tmp_path):
    """The files read only for the processes NVML lists (``/proc/<pid>/{cgroup,comm,limits,task/*}``), through the
    fake pynvml in process (the CLI cannot take a fake NVML): behind links, the same result and no canary."""
    from fake_pynvml import reference_nvml, write_reference_threads
    from gpu_readers import GpuReaders
    from numawatch.host import HostReader
    from numawatch.nvml_session import NvmlSession

    complete_host(fake_host)
    write_reference_threads(fake_host)

    def evaluated() -> tuple[str, dict]:
        gpu = GpuReaders(NvmlSession(nvml=reference_nvml(), call_timeout=5))
        reader = HostReader(fake_host.paths, nvml=gpu.session, clock=gpu.clock)
        reader.read()
        evaluation = evaluate(reader.read(), REFERENCE)
        document = json.loads(report.render_json(evaluation, str(fake_host.root)))
        assert {"nvml", "processes"} <= {s["name"] for s in document["sources"] if s["up"]}
        return metrics.render(evaluation).decode() + json.dumps(document), comparable(document)

    _, baseline = evaluated()
    gpu = GpuReaders(NvmlSession(nvml=reference_nvml(), call_timeout=5))
    _, recorded = capture.record_evaluation(fake_host.paths, REFERENCE, nvml=gpu.session)
    root = os.path.realpath(fake_host.root)
    files = {os.path.relpath(os.path.realpath(path), root) for path in recorded.opened | recorded.stated
             if os.path.realpath(path).startswith(root + "/") and os.path.isfile(os.path.realpath(path))
             and re.fullmatch(r"proc/\d+/.*", os.path.relpath(os.path.realpath(path), root))}  # fmt: skip
    missing = [kind for kind, pattern in PROCESS_KINDS.items() if not any(re.fullmatch(pattern, f) for f in files)]
    assert missing == []
    plant_canaries(fake_host, tmp_path / "outside", files)

    output, linked = evaluated()

    assert CANARY not in output
    assert linked == baseline


@pytest.mark.slow
def test_a_fifo_at_every_kind_of_file_is_never_waited_for(fake_host, opener):
    """Not one FIFO: every file an evaluation reads is one; check finishes, each source down names its FIFO."""
    complete_host(fake_host)
    for rel in sorted(read_files(fake_host)):
        path = fake_host.path(rel)
        path.unlink()
        os.mkfifo(path)
    checked = numawatch("--host-root", str(fake_host.root), "check", "--format", "json")
    document = json.loads(checked.stdout)
    assert "Traceback" not in checked.stderr
    assert any("not a regular file (a FIFO)" in source["reason"] for source in document["sources"])
    with numawatch_serve(fake_host.root) as (_, url):
        assert wait_until_ready(url + "healthz")[0] == 200


# ------------------------------------------------------------------------------------------------ property test
MUTATIONS = ("absolute link", "relative link", "directory link", "fifo", "oversized", "empty", "link loop")


def evaluate_in_a_thread(paths, seconds: float = TIMEOUT) -> str:
    """Read, judge, render /metrics and the JSON report in a thread, with every log record; fails on a hang."""
    results: queue.Queue[str | BaseException] = queue.Queue()
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Collect()

    def work() -> None:
        try:
            evaluation = evaluate(read_host(paths), REFERENCE)
            results.put(metrics.render(evaluation).decode() + report.render_json(evaluation, str(paths.root)))
        except BaseException as error:  # handed to the test thread
            results.put(error)

    logging.getLogger().addHandler(handler)
    try:
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        worker.join(seconds)
        assert not worker.is_alive(), "the evaluation hung"
    finally:
        logging.getLogger().removeHandler(handler)
    outcome = results.get_nowait()
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome + "\n".join(records)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, list[str]]:
    """One complete host, built once for all examples, and the files an evaluation reads in it."""
    host = FakeHost(tmp_path_factory.mktemp("hostile-template") / "host")
    complete_host(host)
    return host.root, sorted(read_files(host))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), fallback=st.booleans())
@pytest.mark.slow
def test_random_links_fifos_and_sizes_never_leak_or_hang(template, data, fallback):
    template, files = template
    work = Path(tempfile.mkdtemp(prefix="numawatch-hostile-"))
    try:
        root, outside = work / "host", work / "outside"
        shutil.copytree(template, root, symlinks=True)
        outside.mkdir()
        picked = data.draw(st.lists(st.sampled_from(files), min_size=1, max_size=40, unique=True))
        for rel in picked:
            mutation = data.draw(st.sampled_from(MUTATIONS))
            path = root / rel
            if not os.path.realpath(path).startswith(os.path.realpath(root) + "/") or not path.is_file():
                continue  # under a directory an earlier mutation replaced, or replaced itself
            if mutation == "directory link":
                path = path.parent
                (outside / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(path)
                target = outside / os.path.dirname(rel)
                for name in ("secret", path.name):
                    (target / name).write_text(f"{CANARY}\n")
                os.symlink(target if data.draw(st.booleans()) else escaping(path.parent, target), path)
                continue
            path.unlink()
            if mutation in ("absolute link", "relative link"):
                (outside / rel).parent.mkdir(parents=True, exist_ok=True)
                (outside / rel).write_text(f"{CANARY}\n")
                target = str(outside / rel) if mutation == "absolute link" else escaping(path.parent, outside / rel)
                os.symlink(target, path)
            elif mutation == "fifo":
                os.mkfifo(path)
            elif mutation == "oversized":
                path.write_bytes(b"9" * data.draw(st.sampled_from([(1 << 16) + 1, (1 << 20) + 1])))
            elif mutation == "empty":
                path.write_bytes(b"")
            else:
                os.symlink(path.name, path)
        from numawatch.paths import Paths

        with confined.use_openat2(not fallback):
            output = evaluate_in_a_thread(Paths.from_root(root))
        assert CANARY not in output
    finally:
        shutil.rmtree(work, ignore_errors=True)
