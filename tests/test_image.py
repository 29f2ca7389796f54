"""The container image: deploy/Containerfile builds reproducibly, and what it may do without root, measured.

No registry can be reached here, so the image is never built in the tests: they parse the Containerfile (every
base pinned by digest, no package manager at build time, Python packages only from the hashed lock, a non-root
user) and check deploy/requirements.lock against pyproject.toml. What running as non-root costs is measured on this
machine instead: numawatch runs as UID 65534 without capabilities against the real /proc and /sys, next to a real
root process's environment, and on a node tree whose kubelet and containerd files have the modes those programs
give them.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import dockerignore
import pytest
import unprivileged
from fakehost import FakeHost
from fakehost.reference import reference_node
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from podresources_server import Behaviour, allocatable_response, serving

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
CONTAINERFILE = DEPLOY / "Containerfile"
NPD_CONTAINERFILE = DEPLOY / "npd/Containerfile"
LOCK = DEPLOY / "requirements.lock"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def instructions(path: Path) -> list[tuple[str, str]]:
    text = path.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def global_args(path: Path) -> dict[str, str | None]:
    """The ARGs before the first FROM, with their defaults (None: no default)."""
    found: dict[str, str | None] = {}
    for op, args in instructions(path):
        if op == "FROM":
            break
        if op == "ARG":
            name, _, default = args.partition("=")
            found[name] = default or None
    return found


def stages(path: Path) -> list[tuple[str, str | None, list[tuple[str, str]]]]:
    """(image as written, stage name, instructions) per FROM."""
    result: list[tuple[str, str | None, list[tuple[str, str]]]] = []
    for op, args in instructions(path):
        if op == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            result.append((words[0], name, []))
        elif result:
            result[-1][2].append((op, args))
    return result


def expand(image: str, args: dict[str, str | None]) -> str | None:
    match = re.fullmatch(r"\$\{?(\w+)\}?", image)
    return args.get(match.group(1)) if match else image


# --- the Containerfile ---------------------------------------------------------------------------------------


def test_every_base_image_is_pinned_by_digest():
    args = global_args(CONTAINERFILE)
    built = {name for _, name, _ in stages(CONTAINERFILE) if name}
    external = [expand(image, args) for image, _, _ in stages(CONTAINERFILE) if image not in built]
    assert external and all(image is not None and DIGEST.search(image) for image in external), external
    # Python 3.11 on Debian 12, the interpreter the lock was resolved for
    assert all(image and "python:3.11-slim-bookworm@" in image for image in external)


def test_no_package_manager_and_no_download_runs_at_build_time():
    for op, args in instructions(CONTAINERFILE):
        if op == "RUN":
            assert not re.search(r"\b(apt-get|apt|dpkg|apk|yum|dnf|microdnf|curl|wget|git)\b", args), args


def test_python_packages_come_only_from_the_hashed_lock():
    installs = [args for op, args in instructions(CONTAINERFILE) if op == "RUN" and "pip install" in args]
    (locked,) = [args for args in installs if "-r requirements.lock" in args]
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:"):
        assert flag in locked
    # the other install is numawatch itself: nothing it could resolve outside the lock
    (own,) = [args for args in installs if args is not locked]
    assert "--no-deps" in own and own.rstrip().endswith(" .")
    for install in installs:
        assert not re.search(r"(^|\s)(-e|--editable)(\s|$)", install), install
    copied = [args.split()[0] for op, args in instructions(CONTAINERFILE) if op == "COPY" and "--from" not in args]
    assert "deploy/requirements.lock" in copied


def test_the_image_runs_as_a_non_root_user_by_default():
    final = stages(CONTAINERFILE)[-1][2]
    users = [args for op, args in final if op == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric: runAsNonRoot can only verify a numeric user


def test_containerfile_entrypoint_is_the_numawatch_console_script():
    ops = instructions(CONTAINERFILE)
    (entrypoint,) = [args for op, args in ops if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["numawatch"]
    (cmd,) = [args for op, args in ops if op == "CMD"]
    assert json.loads(cmd) == ["serve", "--host-root=/host"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^numawatch = "numawatch\.cli:main"$', pyproject, re.MULTILINE)
    assert ("EXPOSE", "10914") in ops


def test_containerfile_copies_everything_the_package_build_needs():
    copied = [source for op, sources in copies(CONTAINERFILE) if op == "COPY" for source in sources]
    for needed in ("pyproject.toml", "setup.py", "README.md", "exporter", "deploy/requirements.lock"):
        assert needed in copied
    patterns = dockerignore.parse(ignore_file(CONTAINERFILE).read_text())
    assert patterns[0].text == "*" and not patterns[0].exception  # an allow-list: nothing else reaches the context


def repository_files() -> list[str]:
    """What a fresh clone holds: git's tracked files (without git, every file but caches and environments)."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True)
        return [name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]
    skipped = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
    found = []
    for directory, dirs, files in os.walk(ROOT):
        dirs[:] = [name for name in dirs if name not in skipped]
        found += [os.path.relpath(os.path.join(directory, name), ROOT) for name in files]
    return found


def ignore_file(containerfile: Path) -> Path:
    """The ignore file a build of ``containerfile`` from the repository root reads: ``<Containerfile>.dockerignore``
    beside it (BuildKit; podman and buildah are given it with --ignorefile, as the README says), else the root's."""
    beside = containerfile.with_name(containerfile.name + ".dockerignore")
    return beside if beside.exists() else ROOT / ".dockerignore"


def copies(containerfile: Path) -> list[tuple[str, list[str]]]:
    """(COPY or ADD, sources) of every instruction that reads the build context (not ``--from`` a stage)."""
    found = []
    for op, args in instructions(containerfile):
        if op not in ("COPY", "ADD"):
            continue
        words = args.split()
        while words and words[0].startswith("--"):
            if words[0].startswith("--from"):
                break
            words.pop(0)
        if words and words[0].startswith("--from"):
            continue
        if words and words[0].startswith("["):
            words = json.loads(" ".join(words))
        found.append((op, words[:-1]))
    return found


@pytest.mark.parametrize("containerfile", [CONTAINERFILE, NPD_CONTAINERFILE], ids=["numawatch", "npd"])
def test_every_copy_source_is_in_the_build_context_the_ignore_file_leaves(containerfile):
    """The context built exactly as the ignore file filters it (tests/dockerignore.py: the rules of moby's
    patternmatcher, exceptions included): every COPY and ADD source is in it, a file as itself, a directory with
    its files."""
    ignore = ignore_file(containerfile)
    context = dockerignore.context(repository_files(), ignore.read_text() if ignore.exists() else "")
    missing = []
    for _, sources in copies(containerfile):
        for source in sources:
            source = source.rstrip("/").removeprefix("./")
            if any(char in source for char in "*?["):
                present = any(fnmatch.fnmatchcase(path, source) for path in context)
            else:
                present = source in context or any(path.startswith(source + "/") for path in context)
            if not present:
                missing.append(source)
    assert not missing, f"{containerfile.relative_to(ROOT)} copies {missing}, which {ignore.name} leaves out"


def test_the_build_context_carries_the_whole_package_and_no_byte_code():
    context = dockerignore.context(repository_files(), ignore_file(CONTAINERFILE).read_text())
    package = {path for path in repository_files() if path.startswith("exporter/numawatch/")}
    assert package and package <= context
    assert not any("__pycache__" in path or path.startswith((".venv/", ".git/", "tests/")) for path in context)


@pytest.mark.parametrize(
    ("ignore", "path", "left_out"),
    [
        ("*\n!exporter/\n", "exporter/numawatch/cli.py", False),  # an exception for a directory covers its files
        ("*\n!exporter/\n", "setup.py", True),
        ("*\n!exporter/\n**/__pycache__\n", "exporter/numawatch/__pycache__/cli.pyc", True),
        ("*\n!exporter/\n**/__pycache__\n!exporter/numawatch/__pycache__/keep.pyc\n",
         "exporter/numawatch/__pycache__/keep.pyc", False),  # the last pattern that matches decides
        ("!setup.py\n*\n", "setup.py", True),  # an exception before the pattern it would undo does nothing
        ("/setup.py\n", "setup.py", True),  # a leading / is the context's root
        ("./docs//x.md\n", "docs/x.md", True),  # cleaned as a path
        ("docs\n", "docs/capture.md", True),  # a directory leaves out what it holds
        ("*.md\n", "docs/capture.md", False),  # "*" never crosses a "/"
        ("**/*.md\n", "docs/capture.md", True),
        ("**/*.md\n", "README.md", True),  # "**/" matches no directory too
        ("docs/**\n", "docs/a/b/c.md", True),
        ("docs/?.md\n", "docs/x.md", True),
        ("docs/?.md\n", "docs/xy.md", False),
        ("docs/[a-c].md\n", "docs/b.md", True),
        ("# *\n", "setup.py", False),  # a comment
        ("  setup.py  \n", "setup.py", True),  # trimmed
    ],
)
def test_the_ignore_file_is_read_by_the_rules_docker_and_buildkit_use(ignore, path, left_out):
    assert dockerignore.excluded(path, dockerignore.parse(ignore)) is left_out


def test_numawatch_lands_where_the_npd_rules_run_it():
    ops = instructions(CONTAINERFILE)
    assert any(op == "RUN" and "--prefix=/install" in args for op, args in ops)
    assert ("COPY", "--from=build /install /usr/local") in ops
    rules = json.loads((DEPLOY / "npd/numawatch-plugin-monitor.json").read_text())["rules"]
    assert {rule["path"] for rule in rules} == {"/usr/local/bin/numawatch"}


def test_the_npd_image_takes_both_images_by_digest_with_no_unpinned_default():
    args = global_args(NPD_CONTAINERFILE)
    assert args == {"NUMAWATCH_IMAGE": None, "NPD_IMAGE": None}
    assert [image for image, _, _ in stages(NPD_CONTAINERFILE)] == ["${NPD_IMAGE}", "${NUMAWATCH_IMAGE}"]
    final = stages(NPD_CONTAINERFILE)[-1][2]
    assert ("COPY", "--from=npd /node-problem-detector /node-problem-detector") in final
    assert not [args for op, args in final if op == "RUN"]
    usage = NPD_CONTAINERFILE.read_text()
    assert "NUMAWATCH_IMAGE=<registry>/numawatch@sha256:" in usage and ":<tag>@sha256:<digest>" in usage


# --- the lock ------------------------------------------------------------------------------------------------


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) from deploy/requirements.lock."""
    text = LOCK.read_text().replace("\\\n", " ")
    found = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, *options = line.split()
        name, _, version = requirement.partition("==")
        assert version, f"{requirement}: not pinned to one version"
        hashes = [option.removeprefix("--hash=sha256:") for option in options]
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), requirement
        found[canonicalize_name(name)] = (version, hashes)
    return found


def project_dependencies() -> list[Requirement]:
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
    assert block
    return [Requirement(item) for item in re.findall(r'"([^"]+)"', block.group(1))]


def test_the_lock_pins_every_runtime_dependency_with_hashes_at_a_version_pyproject_allows():
    lock = locked()
    for requirement in project_dependencies():
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{requirement.name} is not in deploy/requirements.lock: bash deploy/lock-requirements.sh"
        assert requirement.specifier.contains(lock[name][0]), (requirement, lock[name][0])


def test_the_lock_holds_no_test_or_build_tool():
    lock = locked()
    for tool in ("pytest", "ruff", "mypy", "hypothesis", "setuptools", "pip", "wheel", "kubernetes-validate"):
        assert tool not in lock


def test_the_lock_names_its_refresh_command_and_that_command_exists():
    assert "bash deploy/lock-requirements.sh" in LOCK.read_text()
    script = (DEPLOY / "lock-requirements.sh").read_text()
    assert "--generate-hashes" in script and "pyproject.toml" in script and "deploy/requirements.lock" in script
    assert subprocess.run(["bash", "-n", str(DEPLOY / "lock-requirements.sh")]).returncode == 0


# --- what needs root: measured ------------------------------------------------------------------------------


def as_nobody_available() -> None:
    why = unprivileged.available()
    if why is not None:
        pytest.skip(why)


def check_json(host_root: Path | str, *, nobody: bool) -> dict:
    args = ["-m", "numawatch", "--host-root", str(host_root), "--no-nvml", "check", "--format", "json", "--window",
            "0"]
    command = unprivileged.as_nobody(*args) if nobody else [sys.executable, *args]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/")
    assert completed.returncode in (0, 1, 2), completed.stderr
    assert "Traceback" not in completed.stderr
    return json.loads(completed.stdout)


def statuses(document: dict) -> dict[str, tuple[bool, str | None]]:
    return {source["name"]: (source["up"], source["reason"]) for source in document["sources"]}


# The kernel's own files numawatch reads are world-readable: these sources read the same as nobody.
KERNEL_SOURCES = ("topology", "kernel", "numastat", "interrupts", "irqs", "gpus_sysfs", "cgroups", "intersocket")


@pytest.mark.realhost
@pytest.mark.slow
def test_the_kernel_files_read_the_same_without_root():
    as_nobody_available()
    root, nobody = check_json("/", nobody=False), check_json("/", nobody=True)
    for name in KERNEL_SOURCES:
        assert statuses(nobody)[name] == statuses(root)[name], name
    kernel_checks = {"kernel_numa_balancing", "thp_enabled", "thp_defrag", "vm_swappiness", "cpufreq_governor",
                     "hugepages_shortfall", "isolation_params_mismatch", "irq_on_isolated_cpu",
                     "numa_topology_inconsistent"}
    assert ([f for f in root["findings"] if f["check"] in kernel_checks]
            == [f for f in nobody["findings"] if f["check"] in kernel_checks])


# Started as root: comm "irqbalance" and the abstract socket irqbalance >= 1.4 listens on, which is how the irqbalance
# source finds the daemon; its environment holds the setting numawatch reads from a running irqbalance.
FAKE_IRQBALANCE = """
import ctypes, os, socket, sys
ctypes.CDLL(None).prctl(15, b"irqbalance", 0, 0, 0)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(f"\\0irqbalance{os.getpid()}.sock")
listener.listen()
print("ready", flush=True)
sys.stdin.readline()
"""
READ_IRQBALANCE = """
import fnmatch
import json
from numawatch.paths import Paths
from numawatch.sources import irqbalance
state = irqbalance.read(Paths.from_root("/"))
print(json.dumps({"pids": list(state.pids), "origin": state.config.origin if state.config else None}))
"""


@pytest.mark.realhost
@pytest.mark.slow
def test_another_users_process_environment_needs_root():
    """/proc/<pid>/environ is the owner's (or CAP_SYS_PTRACE's) alone: as nobody numawatch still finds a root
    irqbalance but cannot read the ban list it runs with, and falls back to the environment files."""
    as_nobody_available()
    env = {**os.environ, "IRQBALANCE_BANNED_CPULIST": "1"}
    daemon = subprocess.Popen([sys.executable, "-c", FAKE_IRQBALANCE], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert daemon.stdout is not None and daemon.stdout.readline() == "ready\n"
        read = [sys.executable, "-c", READ_IRQBALANCE]
        as_root = json.loads(subprocess.run(read, capture_output=True, text=True, timeout=60, check=True).stdout)
        as_nobody = json.loads(subprocess.run(unprivileged.as_nobody(*read[1:]), capture_output=True, text=True,
                                              timeout=60, check=True, cwd="/").stdout)
    finally:
        daemon.communicate("done\n", timeout=30)
    assert daemon.pid in as_root["pids"] and daemon.pid in as_nobody["pids"]
    # another irqbalance may run on this machine: whichever numawatch reads first, as root it is an environment
    assert as_root["origin"].startswith("environment of irqbalance (PID ")
    assert as_nobody["origin"] is None or not as_nobody["origin"].startswith("environment of irqbalance")


@pytest.fixture
def reachable_tmp():
    """A temporary directory any user may enter (pytest's own are 0700 root)."""
    with tempfile.TemporaryDirectory(prefix="numawatch-nobody-") as directory:
        os.chmod(directory, 0o755)
        yield Path(directory)


@pytest.mark.parametrize(
    ("flavor", "lost_sources"),
    [
        ("rke2", {"kubelet_state", "names", "pod_resources"}),
        ("kubeadm", {"kubelet_state", "names", "kubelet_config", "pod_resources"}),
    ],
)
@pytest.mark.slow
def test_the_kubelet_and_containerd_files_need_root(reachable_tmp, flavor, lost_sources):
    """The node's files with the modes their owners create them with: the kubelet's root directory and pod log
    directory 0750 and its checkpoints 0600 (pkg/kubelet setupDataDirs, the checkpoint manager's file store),
    containerd's task bundles 0700 (since 1.4.11/1.5.7). As nobody, kubelet_state, names and pod_resources (its
    socket is in the kubelet's directory) go down, and on a kubeadm node (config.yaml in /var/lib/kubelet)
    kubelet_config too; RKE2's config.yaml is the admin's file."""
    as_nobody_available()
    node = FakeHost(reachable_tmp / "host")
    reference_node(node, flavor=flavor)
    node.root.chmod(0o755)
    for directory in ("var/lib/kubelet", "var/lib/kubelet/device-plugins", "var/log/pods"):
        node.path(directory).chmod(0o750)
    for checkpoint in ("var/lib/kubelet/cpu_manager_state", "var/lib/kubelet/memory_manager_state",
                       "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"):
        node.path(checkpoint).chmod(0o600)
    bundles = list(node.root.glob("run/**/io.containerd.runtime.v2.task/k8s.io/*"))
    assert bundles
    for bundle in bundles:
        bundle.chmod(0o700)
    # The kubelet's pod-resources socket, in its 0750 directory (a kubelet with no pods to list).
    with serving(node.root, Behaviour(allocatable_bytes=allocatable_response(range(32), {}))):
        root, nobody = check_json(node.root, nobody=False), check_json(node.root, nobody=True)
    assert all(statuses(root)[name][0] for name in lost_sources)
    changed = {name for name, status in statuses(nobody).items() if status != statuses(root)[name]}
    assert changed == lost_sources
    for name in changed:
        up, reason = statuses(nobody)[name]
        assert not up and reason.startswith("Permission denied: "), (name, reason)
    # what that costs: every check that needs the kubelet's checkpoints is not evaluated
    lost = {item["check"] for item in nobody["not_evaluated"]} - {item["check"] for item in root["not_evaluated"]}
    assert {"kubelet_state_stale", "container_numa_split", "container_not_exclusive"} <= lost


def test_docs_name_what_needs_root():
    section = (ROOT / "docs/security.md").read_text().split("## What needs root", 1)[1].split("\n## ", 1)[0]
    for needed in ("kubelet_state", "names", "irqbalance", "environ", "0600", "0750", "0700", "intersocket",
                   "CAP_PERFMON"):
        assert needed in section, needed
