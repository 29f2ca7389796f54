"""The names source: which pod and container each container ID belongs to, without the API server.

Read from the container runtime's OCI bundles (kubelet.md §6.6), whose ``config.json`` carries the CRI annotations:

- containerd: ``run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``, on RKE2/k3s
  ``run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``; annotations
  ``io.kubernetes.cri.container-type`` ("sandbox"/"container"), ``io.kubernetes.cri.sandbox-name``,
  ``…sandbox-namespace``, ``…sandbox-uid``, ``io.kubernetes.cri.container-name``.
- CRI-O: ``run/containers/storage/overlay-containers/<id>/userdata/config.json`` and the same under
  ``var/lib/containers/storage/``; annotations ``io.kubernetes.pod.name``, ``io.kubernetes.pod.namespace``,
  ``io.kubernetes.pod.uid``, ``io.kubernetes.container.name``, ``io.kubernetes.cri-o.ContainerType``; on a sandbox
  also ``io.kubernetes.cri-o.Labels``, the pod's labels as JSON, whose ``pod-template-generation`` (the DaemonSet
  controller's label) says that a DaemonSet made the pod. containerd keeps a pod's labels only in its metadata
  database, not in its bundles: there it is unknown.
- Fallback: ``var/log/pods/<namespace>_<pod>_<uid>/<container>/`` gives pods by UID and their container names
  (``_`` cannot occur in namespace or pod names, nor in UIDs).

A bundle's config.json is written when its container is created and kept until it goes, so a reading in serve costs
what changed (``read_incremental``): the bundle directories and pod log directories are listed again only when their
(inode, mtime) moved, a new bundle is parsed once, and a known bundle's config.json is stat'ed again only in its turn
of the refresh table's rotation (one rewritten in place shows within its round, 4K readings). var/log/pods is listed at
every reading (a pod log directory coming or going shows at once); a known pod log directory is stat'ed again in its
turn of another rotation (a container log directory added to one, which only names a container the bundles do not,
shows within 4K readings). ``read`` reads everything.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from numawatch.confined import HostFs
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import k8s_label, k8s_subdomain, one_of, pod_uid
from numawatch.model import frozen_map
from numawatch.model.workloads import ContainerIdentity, Names, PodIdentity
from numawatch.paths import Paths
from numawatch.refresh import BUNDLE_CONFIGS, POD_LOG_DIRS, Carried, Refresh
from numawatch.source import Inputs, SourceSpec

log = logging.getLogger(__name__)

# An OCI config.json with a large seccomp profile and many mounts is ~50 KB; a few MB means something is wrong.
CONFIG_READ_LIMIT = 4 * 1024 * 1024

# A directory modified this recently is judged by its listing, not its mtime (see _settled).
RACY_SECONDS = 2

_CONTAINERD_TASKS = "io.containerd.runtime.v2.task/k8s.io"

# containerd (CRI plugin) annotations
CRI_TYPE = "io.kubernetes.cri.container-type"
CRI_SANDBOX_NAME = "io.kubernetes.cri.sandbox-name"
CRI_SANDBOX_NAMESPACE = "io.kubernetes.cri.sandbox-namespace"
CRI_SANDBOX_UID = "io.kubernetes.cri.sandbox-uid"
CRI_CONTAINER_NAME = "io.kubernetes.cri.container-name"
# CRI-O annotations
CRIO_TYPE = "io.kubernetes.cri-o.ContainerType"
CRIO_POD_NAME = "io.kubernetes.pod.name"
CRIO_POD_NAMESPACE = "io.kubernetes.pod.namespace"
CRIO_POD_UID = "io.kubernetes.pod.uid"
CRIO_CONTAINER_NAME = "io.kubernetes.container.name"
# On a sandbox: the PodSandboxConfig's labels as JSON, i.e. the pod's labels (plus the kubelet's io.kubernetes.pod.*)
CRIO_LABELS = "io.kubernetes.cri-o.Labels"
# The label the DaemonSet controller puts on every pod it makes (with controller-revision-hash, which StatefulSets'
# pods carry too): a pod that has it is a DaemonSet's.
DAEMONSET_POD_LABEL = "pod-template-generation"
CONTAINER_TYPES = frozenset({"sandbox", "container"})  # both runtimes' values of their container-type annotation
SANDBOX_CONTAINER_NAME = "POD"  # what CRI-O names a pod's infra (sandbox) container


def bundle_locations(paths: Paths) -> tuple[tuple[str, Path, str], ...]:
    """(runtime, directory of per-container entries, path of config.json inside an entry), in order of preference."""
    return (
        ("containerd", paths.run / "containerd" / _CONTAINERD_TASKS, "config.json"),
        ("containerd", paths.run / "k3s/containerd" / _CONTAINERD_TASKS, "config.json"),
        ("crio", paths.run / "containers/storage/overlay-containers", "userdata/config.json"),
        ("crio", paths.host_path("/var/lib/containers/storage/overlay-containers"), "userdata/config.json"),
    )


# --------------------------------------------------------------------------------------------------- parsers
def parse_annotations(data: bytes) -> dict[str, str]:
    """The top-level ``annotations`` object of an OCI runtime ``config.json`` ({} when there is none).

    Raises ValueError when the file is not a JSON object or its annotations are not a string map.
    """
    try:
        spec = json.loads(data)
    except (ValueError, RecursionError) as error:  # RecursionError: absurdly deep nesting
        raise ValueError(f"not valid JSON ({error})") from None
    if not isinstance(spec, dict):
        raise ValueError(f"expected a JSON object, got {type(spec).__name__}")
    annotations = spec.get("annotations")
    if annotations is None:
        return {}
    if not isinstance(annotations, dict):
        raise ValueError(f"'annotations' is a {type(annotations).__name__}, not an object")
    return {key: value for key, value in annotations.items() if isinstance(value, str)}


def identity_from_annotations(container_id: str, runtime: str, annotations: dict[str, str]) -> ContainerIdentity | None:
    """The container's identity from its runtime's annotations; None when it is not a Kubernetes container.

    Raises ValueError when a name, UID or container type is not one the API server admits (a DNS-1123 namespace,
    pod and container name, a UUID): they become label values and message text."""
    if runtime == "crio":
        keys = (CRIO_POD_UID, CRIO_POD_NAMESPACE, CRIO_POD_NAME, CRIO_CONTAINER_NAME, CRIO_TYPE)
    else:
        keys = (CRI_SANDBOX_UID, CRI_SANDBOX_NAMESPACE, CRI_SANDBOX_NAME, CRI_CONTAINER_NAME, CRI_TYPE)
    uid, namespace, pod, container, kind = (annotations.get(key) for key in keys)
    if uid is None and pod is None and kind is None:
        return None  # e.g. a podman container in CRI-O's storage, or a non-CRI task in containerd's k8s.io
    # Each becomes a label value and message text: only what the API server admits (ValueError otherwise).
    if uid:
        pod_uid(uid)
    if namespace:
        k8s_label(namespace, "namespace")
    if pod:
        k8s_subdomain(pod, "pod name")
    if container and container != SANDBOX_CONTAINER_NAME:
        k8s_label(container, "container name")
    if kind:
        one_of(kind, CONTAINER_TYPES, "container type")
    return ContainerIdentity(
        container_id=container_id,
        pod_uid=uid,
        namespace=namespace,
        pod_name=pod,
        container_name=container,
        container_type=kind,
        origin=runtime,
        daemonset=_daemonset(annotations) if runtime == "crio" and kind == "sandbox" else None,
    )


def _daemonset(annotations: dict[str, str]) -> bool | None:
    """Whether a CRI-O sandbox's pod labels carry the DaemonSet controller's label; None when they cannot be read
    (only the presence of a key is used: no label value is repeated)."""
    text = annotations.get(CRIO_LABELS)
    if text is None:
        return None
    try:
        labels = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(labels, dict):
        return None
    return DAEMONSET_POD_LABEL in labels


def _is_container_name(name: str) -> bool:
    try:
        k8s_label(name, "container name")
    except ValueError:
        return False
    return True


def parse_pod_log_dir(name: str) -> PodIdentity | None:
    """``<namespace>_<pod>_<uid>`` (kubelet ``BuildPodLogsDirectory``) into a PodIdentity; None if not that shape."""
    parts = name.split("_")
    if len(parts) != 3 or not all(parts):
        return None
    namespace, pod, uid = parts
    try:
        k8s_label(namespace, "namespace")
        k8s_subdomain(pod, "pod name")
        pod_uid(uid)
    except ValueError:
        return None  # not a directory the kubelet made: nothing of it is repeated
    return PodIdentity(uid=uid, namespace=namespace, name=pod)


# --------------------------------------------------------------------------------------------------- reading
# What a reading keeps for the next (the HostReader holds it: ``NamesMemory``), so that a reading after a change
# costs what changed: the listings of the bundle directories and of the pod log directories are taken again only
# when their (inode, mtime) moved, a bundle's config.json is parsed once, and a known one is stat'ed again in its turn.
_State = tuple[int, int]  # a directory's (inode, mtime), trusted once settled (see _settled)


class _Read(NamedTuple):
    """A bundle directory's entry: a container and where its config.json is."""

    container_id: str
    runtime: str
    config: str  # the path of its config.json


class _Turns(NamedTuple):
    """The kept entries grouped by turn of the rotation."""

    share: int
    groups: tuple[tuple[_Read, ...], ...]


@dataclass(frozen=True, slots=True)
class _Bundle:
    """A config.json as parsed: its (inode, mtime, size) then and the identity it gave (None: not a Kubernetes
    container, or a malformed file, remembered so it is reported once, not at every reading)."""

    key: tuple[int, int, int]
    identity: ContainerIdentity | None
    turn: int  # a CRC-32 of the container ID: which turn of the rotation stats the file again


@dataclass(frozen=True, slots=True)
class _Listing:
    """A bundle directory's entries as read: (container ID, runtime, config path), sorted by ID."""

    state: _State | None  # the directory's, when it had settled before the listing; None: list it again
    reads: tuple[_Read, ...]


@dataclass(frozen=True, slots=True)
class _PodLogDir:
    """A ``var/log/pods/<namespace>_<pod>_<uid>`` entry as scanned."""

    pod: PodIdentity
    state: _State | None  # as _Listing.state; also None while it holds links (their targets move unseen)
    containers: tuple[str, ...] | None  # the container log directories' names, sorted; None: not a directory
    turn: int = 0  # a CRC-32 of its name: which turn of the rotation stats it again


@dataclass(frozen=True)
class NamesMemory:
    """What a names reading leaves for the next (``Carried.memory``)."""

    snapshot: Names
    listings: tuple[_Listing | None, ...]  # per bundle_locations() entry; None: no such directory
    bundles: Mapping[str, _Bundle]  # by config path: the bundles of the latest reading only
    kept: tuple[_Read, ...]  # the entries whose bundles are in ``bundles``, in order
    waiting: tuple[_Read, ...]  # the entries whose config.json was not there (yet)
    turns: _Turns | None  # ``kept`` by turn; None: not yet
    # var/log/pods' entries in listing order: a pod log directory, or None for a name that is not one; None: no
    # var/log/pods
    logs: Mapping[str, _PodLogDir | None] | None


def _settled(stat: os.stat_result, now_ns: int) -> _State | None:
    """A directory's (inode, mtime), which stands for its listing without reading it: its mtime changes whenever an
    entry is added, removed or renamed in it. Timestamps are coarse (a kernel tick), so two changes within one tick
    leave one mtime: while the mtime is within RACY_SECONDS of the reading's start (or in the future, after a clock
    step) it proves nothing (None), and the directory is listed again at every reading. A change after it settled
    stamps a newer mtime."""
    if now_ns - stat.st_mtime_ns < RACY_SECONDS * 1_000_000_000:
        return None
    return (stat.st_ino, stat.st_mtime_ns)


def _bundle_listing(
    fs: HostFs, directory: Path, runtime: str, config: str, known: _Listing | None, now_ns: int, trust: bool
) -> _Listing:
    """The bundle directory's entries: the known listing while the directory's settled (inode, mtime) is the one it
    was taken at (unless not ``trust``), else a new one."""
    try:
        state = _settled(fs.stat_path(directory), now_ns)
    except OSError:
        state = None
    if trust and state is not None and known is not None and known.state == state:
        return known
    # A changed directory (a container created or removed) keeps most entries: each is the known one where the
    # container was listed before (under pod churn, all but one or two of ~900).
    kept = {read.container_id: read for read in known.reads} if known is not None else {}
    return _Listing(
        state,
        tuple(
            kept.get(container_id) or _Read(container_id, runtime, f"{directory}/{container_id}/{config}")
            for container_id in sorted(fs.list_dir(directory))
        ),
    )


def _config_key(fs: HostFs, config: str) -> tuple[int, int, int] | None:
    """A config.json's (inode, mtime, size); None when it is not there."""
    try:
        stat = fs.stat_path(config)
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _parsed(fs: HostFs, container_id: str, runtime: str, config: str, known: _Bundle | None) -> _Bundle | None:
    """The bundle's config.json, parsed again only when its (inode, mtime, size) moved; None when it cannot be read
    (the bundle is being created, or removed)."""
    key = _config_key(fs, config)
    if key is None:
        return None
    if known is not None and known.key == key:
        return known
    try:
        identity = identity_from_annotations(
            container_id, runtime, parse_annotations(fs.read_bytes(config, CONFIG_READ_LIMIT))
        )
    except OSError:
        return None
    except MalformedFile as error:
        log.warning("%s", error)
        identity = None
    except ValueError as error:
        log.warning("%s", MalformedFile(config, str(error)))
        identity = None
    turn = known.turn if known is not None else zlib.crc32(container_id.encode())
    return _Bundle(key, identity, turn)


class _Identities:
    """One reading's container identities from the bundle directories' entries (``read``), or the previous
    reading's again when its entries are the same and no bundle due in this turn moved (``verified``).

    ``bundles`` are the parsed bundles by config path, ``found`` the identities by container ID (in the entries'
    order; the first location wins for an ID), ``kept`` the entries whose bundle is in ``bundles`` and ``waiting``
    those whose config.json could not be read: a bundle seen before containerd writes its config.json is not
    remembered, so every reading looks for it again. ``changed``: the identities may differ from the previous
    reading's (a bundle came, went, or was parsed into another identity). ``turns``: ``kept`` grouped by turn of
    the rotation, when worked out."""

    __slots__ = ("bundles", "changed", "found", "kept", "turns", "waiting")

    def __init__(
        self,
        bundles: Mapping[str, _Bundle],
        found: Mapping[str, ContainerIdentity],
        kept: tuple[_Read, ...],
        waiting: tuple[_Read, ...],
        changed: bool,
        turns: _Turns | None = None,
    ) -> None:
        self.bundles = bundles
        self.found = found
        self.kept = kept
        self.waiting = waiting
        self.changed = changed
        self.turns = turns

    @classmethod
    def read(cls, fs: HostFs, reads: list[_Read], known: Mapping[str, _Bundle], share: int, turn: int) -> _Identities:
        """From the entries: a bundle known from the previous reading is stat'ed again only in its turn of the
        rotation (``share``, ``turn``: every one when ``share`` is 1); one not parsed yet is stat'ed and parsed."""
        bundles: dict[str, _Bundle] = {}
        found: dict[str, ContainerIdentity] = {}
        kept: list[_Read] = []
        waiting: list[_Read] = []
        changed = False
        for entry in reads:
            container_id, runtime, config = entry
            if container_id in found:
                continue
            old = known.get(config)
            if old is not None and share > 1 and old.turn % share != turn:
                bundle = old  # not its turn: what it was parsed into stands
            else:
                parsed = _parsed(fs, container_id, runtime, config, old)
                if parsed is None:
                    waiting.append(entry)
                    continue
                if old is None or (parsed is not old and parsed.identity != old.identity):
                    changed = True
                bundle = parsed
            bundles[config] = bundle
            kept.append(entry)
            if bundle.identity is not None:
                found[container_id] = bundle.identity
        # Every bundle kept is one known before (else changed is set): as many means the same ones.
        return cls(bundles, found, tuple(kept), tuple(waiting), changed or len(bundles) != len(known))

    @classmethod
    def verified(cls, fs: HostFs, memory: NamesMemory, share: int, turn: int) -> _Identities | None:
        """The previous reading's identities, for entries that are the previous reading's: only the bundles due in
        this turn and those still waiting for their config.json are stat'ed. None when one of them moved (then
        ``read`` works it out)."""
        turns = memory.turns
        if turns is None or turns.share != share:
            groups: list[list[_Read]] = [[] for _ in range(share)]
            for entry in memory.kept:
                groups[memory.bundles[entry.config].turn % share].append(entry)
            turns = _Turns(share, tuple(tuple(group) for group in groups))
        bundles = memory.bundles
        for _, _, config in turns.groups[turn]:
            if _config_key(fs, config) != bundles[config].key:
                return None
        for _, _, config in memory.waiting:
            if _config_key(fs, config) is not None:
                return None
        return cls(memory.bundles, memory.snapshot.containers, memory.kept, memory.waiting, False, turns)


def _scan_pod_log_dir(fs: HostFs, pod_dir: Path, pod: PodIdentity, state: _State | None, turn: int = 0) -> _PodLogDir:
    """The container log directories in one pod's log directory (``turn``: see _PodLogDir)."""
    trusted = state
    try:
        with fs.scandir(pod_dir) as entries:
            names = []
            for entry in entries:
                if not _is_container_name(entry.name):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
                elif entry.is_symlink():
                    trusted = None  # its target may come or go without the directory's mtime moving
                    if fs.is_dir(pod_dir / entry.name):  # followed under the root, not by the entry's stat()
                        names.append(entry.name)
    except NotADirectoryError:
        return _PodLogDir(pod, state, None, turn)
    except OSError:
        names, trusted = [], None  # the pod's logs were removed while we looked (or are unreadable): look again
    return _PodLogDir(pod, trusted, tuple(sorted(names)), turn)


def _pod_log_dirs(
    fs: HostFs,
    root: Path,
    known: Mapping[str, _PodLogDir | None] | None,
    now_ns: int,
    trust: bool,
    share: int = 1,
    turn: int = 0,
) -> tuple[dict[str, _PodLogDir | None], bool]:
    """var/log/pods' entries (``NamesMemory.logs``), a pod log directory scanned again only when its settled (inode,
    mtime) is not the one it was scanned at (every one unless ``trust``); and whether the pod log directories, their
    order or their containers differ from ``known``'s. With ``share`` > 1 a settled one is stat'ed only in its
    ``turn`` of the rotation (its ``turn`` modulo ``share``)."""
    previous: Mapping[str, _PodLogDir | None] = known if known is not None else {}
    found: dict[str, _PodLogDir | None] = {}
    changed = known is None
    settled_before = now_ns - RACY_SECONDS * 1_000_000_000  # an mtime after it proves nothing (see _settled)
    root_stat = fs.stat_path
    try:
        with fs.scandir(root) as entries:
            for entry in entries:
                name = entry.name
                old = previous.get(name)
                if old is not None:
                    pod = old.pod
                elif name in previous:
                    found[name] = None  # not a pod log directory's name: it never becomes one
                    continue
                else:
                    parsed = parse_pod_log_dir(name)
                    if parsed is None:
                        found[name] = None
                        continue
                    pod = parsed
                if trust and share > 1 and old is not None and old.state is not None and old.turn % share != turn:
                    found[name] = old  # settled, and not its turn: its listing stands
                    continue
                try:  # a link is followed under the root, never by the entry's own stat()
                    stat = root_stat(f"{root}/{name}") if entry.is_symlink() else entry.stat(follow_symlinks=False)
                    state = (stat.st_ino, stat.st_mtime_ns) if stat.st_mtime_ns <= settled_before else None
                except OSError:
                    state = None
                if trust and state is not None and old is not None and old.state == state:
                    found[name] = old
                    continue
                turn_key = old.turn if old is not None else zlib.crc32(name.encode())
                scanned = found[name] = _scan_pod_log_dir(fs, root / name, pod, state, turn_key)
                if old is None or scanned.containers != old.containers:
                    changed = True
    except (FileNotFoundError, NotADirectoryError):
        found = {}  # removed since we looked
    # A pod log directory that went, or the order moved (it decides which wins for a UID named twice).
    if not changed and _pod_dir_names(found) != _pod_dir_names(previous):
        changed = True
    return found, changed


def _pod_dir_names(logs: Mapping[str, _PodLogDir | None]) -> list[str]:
    return [name for name, item in logs.items() if item is not None]


def _read(
    paths: Paths,
    memory: NamesMemory | None,
    share: int,
    turn: int,
    trust: bool = True,
    log_rotation: tuple[int, int] = (1, 0),
) -> tuple[Names, NamesMemory, bool, bool]:
    """The reading behind ``read`` and ``read_incremental``: (snapshot, memory, pending, unchanged). ``share`` and
    ``turn``: the bundle configs' rotation; ``log_rotation``: the pod log directories' (share, turn). With ``trust``
    False every directory is listed again whatever its (inode, mtime); the parsed bundles are still reused while
    their config.json's (inode, mtime, size) is the same."""
    fs = paths.fs
    now_ns = time.time_ns()
    listings: list[_Listing | None] = []
    present = False
    for index, (runtime, directory, config) in enumerate(bundle_locations(paths)):
        if not fs.is_dir(directory):
            listings.append(None)
            continue
        present = True
        known = memory.listings[index] if memory is not None else None
        listings.append(_bundle_listing(fs, directory, runtime, config, known, now_ns, trust))
    logs_present = fs.is_dir(paths.pod_logs)
    if not present and not logs_present:
        places = ", ".join(str(directory) for _, directory, _ in bundle_locations(paths))
        raise SourceUnavailable(f"no container runtime bundles ({places}) and no {paths.pod_logs}")
    same_entries = memory is not None and all(
        _reads(listing) == _reads(old) for listing, old in zip(listings, memory.listings, strict=True)
    )
    identities = _Identities.verified(fs, memory, share, turn) if memory is not None and same_entries else None
    if identities is None:
        reads = [read for listing in listings if listing is not None for read in listing.reads]
        identities = _Identities.read(fs, reads, memory.bundles if memory is not None else {}, share, turn)
    logs: dict[str, _PodLogDir | None] | None = None
    logs_changed = memory is not None and memory.logs is not None
    if logs_present:
        known_logs = memory.logs if memory is not None else None
        logs, logs_changed = _pod_log_dirs(fs, paths.pod_logs, known_logs, now_ns, trust, *log_rotation)
    if memory is not None and same_entries and not identities.changed and not logs_changed:
        return memory.snapshot, _memory(memory.snapshot, listings, identities, logs), bool(identities.waiting), True
    containers = identities.found
    pods: dict[str, PodIdentity] = {}
    for identity in containers.values():
        if identity.pod_uid and identity.namespace and identity.pod_name and identity.pod_uid not in pods:
            pods[identity.pod_uid] = PodIdentity(identity.pod_uid, identity.namespace, identity.pod_name)
    for identity in containers.values():  # what the pod's sandbox says of its owner
        pod_of = pods.get(identity.pod_uid or "")
        if identity.daemonset is not None and pod_of is not None and pod_of.daemonset is None:
            pods[pod_of.uid] = PodIdentity(pod_of.uid, pod_of.namespace, pod_of.name, identity.daemonset)
    log_pods: dict[str, PodIdentity] = {}
    log_containers: dict[str, tuple[str, ...]] = {}
    for item in (logs or {}).values():
        if item is None:
            continue
        log_pods[item.pod.uid] = item.pod
        if item.containers is None:  # not a directory: not a pod's, whatever its name
            del log_pods[item.pod.uid]
            continue
        log_containers[item.pod.uid] = item.containers
    for uid, pod in log_pods.items():
        pods.setdefault(uid, pod)
    snapshot = Names(
        containers=frozen_map(containers),
        pods=frozen_map(pods),
        pod_log_containers=frozen_map(log_containers),
    )
    return snapshot, _memory(snapshot, listings, identities, logs), bool(identities.waiting), False


def _memory(
    snapshot: Names,
    listings: list[_Listing | None],
    identities: _Identities,
    logs: Mapping[str, _PodLogDir | None] | None,
) -> NamesMemory:
    return NamesMemory(
        snapshot, tuple(listings), identities.bundles, identities.kept, identities.waiting, identities.turns, logs
    )


def _reads(listing: _Listing | None) -> tuple[_Read, ...]:
    return listing.reads if listing is not None else ()


def read(paths: Paths) -> Names:
    """Container and pod identities from the runtime bundles and var/log/pods; SourceUnavailable if none exists."""
    return _read(paths, None, 1, 0)[0]


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading handed the previous one's (``NamesMemory``): what gives the same result as ``read`` for the cost of
    what changed since. The bundle directories and pod log directories whose settled (inode, mtime) did not move
    keep their listings; a new bundle is parsed at once and a gone one dropped; a known bundle's config.json is
    stat'ed again in its turn of the ``BUNDLE_CONFIGS`` rotation (every one at a whole reading), and parsed again
    when it moved. When nothing differs the previous snapshot is handed out again, unchanged (its generation stays).
    A bundle seen without its config.json is not remembered: every reading looks for it again."""
    memory = refresh.memory if isinstance(refresh.memory, NamesMemory) else None
    share, turn = refresh.rotation(BUNDLE_CONFIGS)
    log_rotation = refresh.rotation(POD_LOG_DIRS)
    snapshot, kept, pending, unchanged = _read(paths, memory, share, turn, not refresh.whole, log_rotation)
    return Carried(snapshot, kept, settled=not pending, unchanged=unchanged)


SOURCE = SourceSpec(
    name="names",
    read=read,
    incremental=read_incremental,
    description="pod and container names per container ID, from runtime bundle annotations and var/log/pods",
)
