"""The names source's reading from the previous one plus what changed equals a one-off ``read`` of the same tree.

A property test applies random sequences of bundle additions and removals, config.json rewrites (malformed ones,
non-Kubernetes ones, files removed while their bundle stays), and pod log directories coming, going, turning into
files and gaining container log directories, to a tree; the pools of container IDs, pod UIDs and names are small, so
a UID named by several containers or pod log directories, an ID in two bundle locations and a pod's sandbox coming
after its containers all happen. Every directory the source judges by its mtime is stamped, after each step, with an
mtime of its own well in the past, as a kernel would stamp a change followed by quiet: the settled listings are
trusted, so what the reading keeps is what is tested. The focused tests below spell out the rules a reading from a
difference must keep, with the values a whole reading gives.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numawatch.model.workloads import ContainerIdentity, Names, PodIdentity
from numawatch.paths import Paths
from numawatch.refresh import BUNDLE_CONFIGS, POD_LOG_DIRS
from numawatch.sources import names
from source_inputs import Driven

EXAMPLES = int(os.environ.get("NUMAWATCH_HYPOTHESIS_EXAMPLES", "100"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CONTAINER_IDS = [f"{number:x}" * 64 for number in range(1, 7)]  # 64 hex digits, as the runtimes spell them
UIDS = [str(uuid.UUID(int=number, version=4)) for number in range(1, 4)]
NAMESPACES = ("web", "llm")
POD_NAMES = ("vllm-0", "nginx")
# Few names, so that a pod log directory changes again and again; three for one UID; one that is no pod's
LOG_NAMES = (f"web_nginx_{UIDS[0]}", f"llm_vllm-0_{UIDS[0]}", f"batch_job_{UIDS[0]}", f"web_nginx_{UIDS[1]}",
             f"batch_job_{UIDS[2]}", "lost+found")  # fmt: skip


class Tree:
    """A host tree under a temporary directory, changed by the test and stamped as a kernel would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = Paths.from_root(root)
        self.locations = [(runtime, Path(directory), config) for runtime, directory, config in
                          names.bundle_locations(self.paths)]  # fmt: skip
        self.pod_logs = Path(self.paths.pod_logs)
        self.stamps = 0
        self.stamped: dict[Path, int] = {}
        for _, directory, _ in self.locations[::2]:  # two of the four locations exist from the start
            directory.mkdir(parents=True)
        self.pod_logs.mkdir(parents=True)

    def _stamp(self, path: Path, racy: bool = False) -> None:
        """An mtime of its own for ``path``, an hour old (settled) and unlike any stamped before; ``racy``: now (a
        change within RACY_SECONDS of the reading, whose listing proves nothing)."""
        self.stamps += 1
        stamp = time.time_ns() if racy else time.time_ns() - 3600 * 1_000_000_000 + self.stamps * 1_000
        os.utime(path, ns=(stamp, stamp), follow_symlinks=False)
        self.stamped[path] = stamp

    def settle(self, racy: bool = False) -> None:
        """Every directory whose entries changed since its last stamp stamped anew (``racy``: see _stamp)."""
        directories = [directory for _, directory, _ in self.locations] + [self.pod_logs]
        if self.pod_logs.is_dir():
            directories += [entry for entry in self.pod_logs.iterdir() if entry.is_dir()]
        for directory in directories:
            if directory.is_dir() and self.stamped.get(directory) != directory.stat().st_mtime_ns:
                self._stamp(directory, racy)

    # ------------------------------------------------------------------------------------------------- changes
    def bundle(self, location: int, container_id: str, config: bytes | None) -> None:
        """A bundle made, or its config.json rewritten in place; ``config`` None: a bundle without one (yet), or one
        whose config.json went while its directory stays."""
        _, directory, inner = self.locations[location]
        path = directory / container_id / inner
        path.parent.mkdir(parents=True, exist_ok=True)
        if config is None:
            path.unlink(missing_ok=True)
            return
        with path.open("r+b" if path.exists() else "wb") as file:  # in place: same inode, new content
            file.truncate(0)
            file.write(config)
        self._stamp(path)  # its (inode, mtime, size) moves however fast the rewrites come

    def unbundle(self, location: int, container_id: str) -> None:
        shutil.rmtree(self.locations[location][1] / container_id, ignore_errors=True)

    def pod_log(self, name: str, containers: tuple[str, ...], as_file: bool) -> None:
        """A pod log directory (and container log directories in it), or a file of that name."""
        path = self.pod_logs / name
        if as_file:
            if not path.exists():
                path.write_text("x")
            return
        if path.is_file():
            return
        for container in containers or ("",):
            (path / container).mkdir(parents=True, exist_ok=True)

    def unlog(self, name: str) -> None:
        path = self.pod_logs / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def annotations(runtime: str, uid: str | None, namespace: str | None, pod: str | None, container: str, kind: str,
                labels: str | None) -> dict[str, str]:  # fmt: skip
    """A bundle's CRI annotations as ``runtime`` writes them (``labels``: a CRI-O sandbox's pod labels)."""
    if runtime == "crio":
        keys = (names.CRIO_POD_UID, names.CRIO_POD_NAMESPACE, names.CRIO_POD_NAME, names.CRIO_CONTAINER_NAME,
                names.CRIO_TYPE)  # fmt: skip
    else:
        keys = (names.CRI_SANDBOX_UID, names.CRI_SANDBOX_NAMESPACE, names.CRI_SANDBOX_NAME, names.CRI_CONTAINER_NAME,
                names.CRI_TYPE)  # fmt: skip
    values = (uid, namespace, pod, container, kind)
    found = {key: value for key, value in zip(keys, values, strict=True) if value is not None}
    if labels is not None:
        found[names.CRIO_LABELS] = labels
    return found


def config_json(runtime: str, **fields) -> bytes:
    return json.dumps({"ociVersion": "1.2.0", "annotations": annotations(runtime, **fields)}).encode()


LABELS = st.sampled_from([None, json.dumps({names.DAEMONSET_POD_LABEL: "3"}), json.dumps({"app": "x"}), "{broken"])


@st.composite
def configs(draw: st.DrawFn, runtime: str) -> bytes | None:
    """A config.json: a Kubernetes container's (some of its names missing), a malformed one, a non-Kubernetes
    container's, or none."""
    shape = draw(st.sampled_from(["container"] * 6 + ["malformed", "foreign", "none"]))
    if shape == "malformed":
        return b'{"annotations": {'
    if shape == "foreign":
        return b'{"annotations": {"org.opencontainers.image.title": "podman"}}'
    if shape == "none":
        return None
    kind = draw(st.sampled_from(["sandbox", "container"]))
    return config_json(
        runtime,
        uid=draw(st.sampled_from(UIDS)),
        namespace=draw(st.sampled_from([*NAMESPACES, None])),
        pod=draw(st.sampled_from([*POD_NAMES, None])),
        container=names.SANDBOX_CONTAINER_NAME if kind == "sandbox" and runtime == "crio" else draw(
            st.sampled_from(["app", "proxy"])),
        kind=kind,
        labels=draw(LABELS) if kind == "sandbox" and runtime == "crio" else None,
    )  # fmt: skip


@st.composite
def changes(draw: st.DrawFn) -> tuple:
    what = draw(st.sampled_from(["bundle"] * 4 + ["unbundle"] * 2 + ["pod_log"] * 2 + ["unlog", "whole"]))
    if what in ("bundle", "unbundle"):
        location = draw(st.integers(0, 3))
        container_id = draw(st.sampled_from(CONTAINER_IDS))
        if what == "unbundle":
            return (what, location, container_id)
        runtime = names.bundle_locations(Paths.from_root("/"))[location][0]
        return (what, location, container_id, draw(configs(runtime)))
    if what == "whole":
        return (what,)
    name = draw(st.sampled_from(LOG_NAMES))
    if what == "unlog":
        return (what, name)
    containers = tuple(draw(st.lists(st.sampled_from(["app", "proxy", "init"]), max_size=2, unique=True)))
    return (what, name, containers, draw(st.booleans().map(lambda flip: flip and containers == ())))


def reference(tree: Tree) -> Names:
    """What the tree says, by the rules spelt out plainly: a container's identity from the first location whose
    bundle names a Kubernetes container; a pod named by the first of its containers (by location, then ID) that has
    a namespace and a name, its DaemonSet owner by the first that says; pods no container names from var/log/pods,
    where for a UID named twice the last entry listed decides (a file: no pod)."""
    containers: dict[str, ContainerIdentity] = {}
    for runtime, directory, inner in tree.locations:
        for container_id in sorted(os.listdir(directory)) if directory.is_dir() else []:
            path = directory / container_id / inner
            if container_id in containers or not path.is_file():
                continue
            try:
                identity = names.identity_from_annotations(container_id, runtime,
                                                           names.parse_annotations(path.read_bytes()))  # fmt: skip
            except ValueError:
                continue
            if identity is not None:
                containers[container_id] = identity
    pods: dict[str, PodIdentity] = {}
    for identity in containers.values():
        if identity.pod_uid and identity.namespace and identity.pod_name and identity.pod_uid not in pods:
            pods[identity.pod_uid] = PodIdentity(identity.pod_uid, identity.namespace, identity.pod_name)
    for identity in containers.values():
        pod = pods.get(identity.pod_uid or "")
        if pod is not None and pod.daemonset is None and identity.daemonset is not None:
            pods[pod.uid] = PodIdentity(pod.uid, pod.namespace, pod.name, identity.daemonset)
    log_pods: dict[str, PodIdentity] = {}
    log_containers: dict[str, tuple[str, ...]] = {}
    for name in os.listdir(tree.pod_logs):
        pod = names.parse_pod_log_dir(name)
        if pod is None:
            continue
        if not (tree.pod_logs / name).is_dir():
            log_pods.pop(pod.uid, None)
            continue
        log_pods[pod.uid] = pod
        log_containers[pod.uid] = tuple(sorted(entry.name for entry in (tree.pod_logs / name).iterdir()))
    return Names(containers, {**log_pods, **pods}, log_containers)


def apply(tree: Tree, driven: Driven, change: tuple) -> None:
    what, *arguments = change
    if what == "whole":
        driven.refresh_all()  # SIGHUP: the next reading reads everything
        return
    getattr(tree, what)(*arguments)


@pytest.fixture
def tree() -> Iterator[Tree]:
    with tempfile.TemporaryDirectory() as root:
        yield Tree(Path(root) / "host")


def a_tree() -> Iterator[Tree]:
    """A fresh tree per example (hypothesis runs a test's examples within one call of a fixture)."""
    with tempfile.TemporaryDirectory() as root:
        yield Tree(Path(root) / "host")


# Steps of a few changes each, then the directories stamped: settled, or (True) racy
STEPS = st.lists(st.tuples(st.lists(changes(), min_size=1, max_size=3), st.booleans()), min_size=1, max_size=8)


@SETTINGS
@given(steps=STEPS)
def test_each_reading_from_the_last_equals_a_whole_reading_without_the_rotation(steps):
    for tree in a_tree():
        driven = Driven(names.SOURCE, stagger=1)  # no rotation: every bundle and pod log directory looked at
        tree.settle()
        driven.read(tree.paths)
        for step, racy in steps:
            for change in step:
                apply(tree, driven, change)
            tree.settle(racy)
            whole = names.read(tree.paths)
            assert whole == reference(tree), step
            assert driven.read(tree.paths) == whole, step


@SETTINGS
@given(steps=STEPS)
def test_each_reading_from_the_last_equals_a_whole_reading_after_a_turn_of_the_rotation(steps):
    for tree in a_tree():
        driven = Driven(names.SOURCE, stagger=4)
        turn = max(driven.readings_per_round(BUNDLE_CONFIGS), driven.readings_per_round(POD_LOG_DIRS))
        tree.settle()
        driven.read(tree.paths)
        for step, racy in steps:
            for change in step:
                apply(tree, driven, change)
            tree.settle(racy)
            for _ in range(turn):
                reading = driven.read(tree.paths)
            assert reading == names.read(tree.paths) == reference(tree), step


@SETTINGS
@given(steps=STEPS)
def test_what_did_not_move_stays_the_same_object(steps):
    """Identities and pods not touched by a step are the previous reading's objects (the workloads join compares
    them by identity first)."""
    for tree in a_tree():
        driven = Driven(names.SOURCE, stagger=1)  # no rotation: every bundle and pod log directory looked at
        tree.settle()
        before = driven.read(tree.paths)
        for step, racy in steps:
            for change in step:
                apply(tree, driven, change)
            tree.settle(racy)
            now = driven.read(tree.paths)
            for key, value in now.containers.items():
                if before.containers.get(key) == value:
                    assert before.containers[key] is value
            for key, pod in now.pods.items():
                if before.pods.get(key) == pod:
                    assert before.pods[key] is pod
            before = now


# ------------------------------------------------------------------------------------------------------ the rules
def reader(tree: Tree) -> Driven:
    driven = Driven(names.SOURCE, stagger=1)  # no rotation: every bundle and pod log directory looked at
    tree.settle()
    driven.read(tree.paths)
    return driven


def reading(tree: Tree, driven: Driven):
    """The next reading, checked against a whole one and the rules spelt out."""
    tree.settle()
    found = driven.read(tree.paths)
    assert found == names.read(tree.paths) == reference(tree)
    return found


def test_the_first_container_by_location_then_id_that_has_both_names_names_the_pod(tree):
    driven = reader(tree)
    uid = UIDS[0]
    first, second, third = CONTAINER_IDS[:3]
    tree.bundle(2, third, config_json("crio", uid=uid, namespace="llm", pod="vllm-0", container="app",
                                      kind="container", labels=None))  # fmt: skip
    assert reading(tree, driven).pods[uid] == PodIdentity(uid, "llm", "vllm-0")
    tree.bundle(0, second, config_json("containerd", uid=uid, namespace="web", pod="nginx", container="app",
                                       kind="container", labels=None))  # fmt: skip
    assert reading(tree, driven).pods[uid] == PodIdentity(uid, "web", "nginx")  # an earlier location
    tree.bundle(0, first, config_json("containerd", uid=uid, namespace=None, pod="other", container="proxy",
                                      kind="container", labels=None))  # fmt: skip
    assert reading(tree, driven).pods[uid] == PodIdentity(uid, "web", "nginx")  # no namespace: it names nothing
    tree.unbundle(0, second)
    assert reading(tree, driven).pods[uid] == PodIdentity(uid, "llm", "vllm-0")


def test_the_sandbox_says_whether_a_daemonset_made_the_pod_whenever_it_comes(tree):
    driven = reader(tree)
    uid = UIDS[1]
    app, sandbox, other_sandbox = CONTAINER_IDS[3], CONTAINER_IDS[0], CONTAINER_IDS[1]
    tree.bundle(2, app, config_json("crio", uid=uid, namespace="web", pod="nginx", container="app",
                                    kind="container", labels=None))  # fmt: skip
    assert reading(tree, driven).pods[uid].daemonset is None
    tree.bundle(2, sandbox, config_json("crio", uid=uid, namespace=None, pod=None, container="POD", kind="sandbox",
                                        labels=json.dumps({names.DAEMONSET_POD_LABEL: "2"})))  # fmt: skip
    assert reading(tree, driven).pods[uid] == PodIdentity(uid, "web", "nginx", True)
    tree.bundle(2, other_sandbox, config_json("crio", uid=uid, namespace="web", pod="nginx", container="POD",
                                              kind="sandbox", labels="{}"))  # fmt: skip
    assert reading(tree, driven).pods[uid].daemonset is True  # the first in order says it
    tree.unbundle(2, sandbox)
    assert reading(tree, driven).pods[uid].daemonset is False
    tree.unbundle(2, other_sandbox)
    assert reading(tree, driven).pods[uid].daemonset is None


def test_a_pod_log_directory_names_a_pod_no_container_names(tree):
    driven = reader(tree)
    uid = UIDS[2]
    tree.pod_log(f"batch_job-1_{uid}", ("main",), as_file=False)
    found = reading(tree, driven)
    assert (found.pods[uid], found.pod_log_containers[uid]) == (PodIdentity(uid, "batch", "job-1"), ("main",))
    tree.bundle(0, CONTAINER_IDS[4], config_json("containerd", uid=uid, namespace="web", pod="nginx",
                                                 container="main", kind="container", labels=None))  # fmt: skip
    found = reading(tree, driven)
    assert (found.pods[uid], found.pod_log_containers[uid]) == (PodIdentity(uid, "web", "nginx"), ("main",))
    tree.bundle(0, CONTAINER_IDS[4], b"{")
    assert reading(tree, driven).pods[uid] == PodIdentity(uid, "batch", "job-1")  # malformed: the logs again
    tree.unlog(f"batch_job-1_{uid}")
    assert uid not in reading(tree, driven).pods


def test_a_uid_named_by_several_pod_log_entries_is_the_last_listed(tree):
    """Whichever order the file system lists them in (four names: unlikely to be listed in the order of their
    names), the last listed decides; a file of that name then takes the UID's pod from the logs away."""
    driven = reader(tree)
    uid = UIDS[0]
    entries = {f"web_pod-{number}_{uid}": (f"c{number}",) for number in range(4)}
    for name, containers in entries.items():
        tree.pod_log(name, containers, as_file=False)
    found = reading(tree, driven)
    last = [name for name in os.listdir(tree.pod_logs) if name in entries][-1]
    assert (found.pods[uid], found.pod_log_containers[uid]) == (names.parse_pod_log_dir(last), entries[last])
    tree.unlog(last)
    found = reading(tree, driven)
    now_last = [name for name in os.listdir(tree.pod_logs) if name in entries][-1]
    assert (found.pods[uid], found.pod_log_containers[uid]) == (names.parse_pod_log_dir(now_last), entries[now_last])
    tree.pod_log(last, (), as_file=True)  # a file of that name: not a pod's, whatever its name
    found = reading(tree, driven)
    listed = [name for name in os.listdir(tree.pod_logs) if name in entries]
    directories = [name for name in listed if name != last]
    assert found.pod_log_containers[uid] == entries[directories[-1]]  # the last directory's containers
    if listed[-1] == last:
        assert uid not in found.pods
    else:
        assert found.pods[uid] == names.parse_pod_log_dir(listed[-1])


def test_an_id_in_two_locations_is_named_from_the_first_that_names_a_container(tree):
    driven = reader(tree)
    uid, container_id = UIDS[1], CONTAINER_IDS[5]
    (tree.locations[1][1]).mkdir(parents=True)
    tree.bundle(1, container_id, config_json("containerd", uid=uid, namespace="web", pod="nginx", container="b",
                                             kind="container", labels=None))  # fmt: skip
    tree.bundle(0, container_id, config_json("containerd", uid=uid, namespace="web", pod="nginx", container="a",
                                             kind="container", labels=None))  # fmt: skip
    assert reading(tree, driven).containers[container_id].container_name == "a"
    tree.bundle(0, container_id, b'{"annotations": {}}')  # not a Kubernetes container's: the next location's
    assert reading(tree, driven).containers[container_id].container_name == "b"
    tree.bundle(0, container_id, None)  # its config.json not there (yet): the next location's
    assert reading(tree, driven).containers[container_id].container_name == "b"
    tree.bundle(0, container_id, config_json("containerd", uid=uid, namespace="web", pod="nginx", container="a",
                                             kind="container", labels=None))  # fmt: skip
    assert reading(tree, driven).containers[container_id].container_name == "a"
    tree.unbundle(0, container_id)
    assert reading(tree, driven).containers[container_id].container_name == "b"
