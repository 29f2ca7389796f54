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
shows within 4K readings). When a listing moved, only the containers listed or unlisted since, those whose
config.json moved in their turn and those still waiting for one are found again, and the snapshot is the previous one
with those containers, and the pods they or the pod log directories that moved name, made again: a container's or a
pod's value that did not change stays the same object. ``read`` reads everything: a reading from an empty memory.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from numawatch.confined import HostFs
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import k8s_label, k8s_subdomain, one_of, pod_uid
from numawatch.model import frozen_map
from numawatch.model.workloads import ContainerIdentity, Names, PodIdentity
from numawatch.paths import Paths, joined
from numawatch.refresh import BUNDLE_CONFIGS, POD_LOG_DIRS, Carried, Refresh
from numawatch.source import Inputs, SourceSpec

log = logging.getLogger(__name__)

_V = TypeVar("_V")

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


def bundle_locations(paths: Paths) -> tuple[tuple[str, str, str], ...]:
    """(runtime, directory of per-container entries, path of config.json inside an entry), in order of preference."""
    run = os.fspath(paths.run)  # strings, not pathlib: this runs at every reading
    return (
        ("containerd", f"{run}/containerd/{_CONTAINERD_TASKS}", "config.json"),
        ("containerd", f"{run}/k3s/containerd/{_CONTAINERD_TASKS}", "config.json"),
        ("crio", f"{run}/containers/storage/overlay-containers", "userdata/config.json"),
        ("crio", joined(paths.root, "var/lib/containers/storage/overlay-containers"), "userdata/config.json"),
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
# What a reading keeps for the next (the HostReader holds it: ``NamesMemory``), so that a reading costs what changed
# (under pod churn, one pod's bundles among ~900): a bundle directory is listed again only when its (inode, mtime)
# moved, and then only the containers listed or unlisted since are looked at; a bundle's config.json is parsed once
# and a known one stat'ed again in its turn; the snapshot is the previous one with the containers, pods and pod log
# directories that moved made again, every other value the same object. A first reading (``read``) is one from an
# empty memory: every container and pod log directory is new.
_State = tuple[int, int]  # a directory's (inode, mtime), trusted once settled (see _settled)


class _Location(NamedTuple):
    """One of bundle_locations(), as this reading spells its paths."""

    runtime: str
    directory: str
    config: str  # the path of config.json inside an entry

    def config_of(self, container_id: str) -> str:
        return f"{self.directory}/{container_id}/{self.config}"


@dataclass(frozen=True, slots=True)
class _Bundle:
    """A config.json as parsed: its (inode, mtime, size) then and the identity it gave (None: not a Kubernetes
    container, or a malformed file, remembered so it is reported once, not at every reading)."""

    key: tuple[int, int, int]
    identity: ContainerIdentity | None
    turn: int  # a CRC-32 of the container ID: which turn of the rotation stats the file again
    container_id: str


@dataclass(frozen=True, slots=True)
class _Listing:
    """A bundle directory's entries (container IDs) as listed."""

    state: _State | None  # the directory's, when it had settled before the listing; None: list it again
    ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class _PodLogDir:
    """A ``var/log/pods/<namespace>_<pod>_<uid>`` entry as scanned."""

    pod: PodIdentity
    state: _State | None  # as _Listing.state; also None while it holds links (their targets move unseen)
    containers: tuple[str, ...] | None  # the container log directories' names, sorted; None: not a directory
    turn: int = 0  # a CRC-32 of its name: which turn of the rotation stats it again


class _Turns(NamedTuple):
    """Keys (config paths, pod log directory names) grouped by turn of a rotation over ``share`` readings."""

    share: int
    groups: tuple[frozenset[str], ...]


_NO_TURNS = _Turns(0, ())  # grouped for no share: a reading groups them for its own first (_regrouped)


@dataclass(frozen=True)
class NamesMemory:
    """What a names reading leaves for the next (``Carried.memory``). Never changed once made: a reading that fails
    leaves the HostReader handing the same memory to the next."""

    snapshot: Names
    listings: tuple[_Listing | None, ...]  # per bundle_locations() entry; None: no such directory
    bundles: Mapping[str, _Bundle]  # by config path: the bundles the latest reading parsed or kept
    waiting: Mapping[str, str]  # config path -> container ID: listed, but its config.json was not there (yet)
    turns: _Turns  # the config paths in ``bundles`` by turn of the BUNDLE_CONFIGS rotation
    ranks: Mapping[str, int]  # per container in the snapshot: the index of the location its identity came from
    pod_containers: Mapping[str, frozenset[str]]  # pod UID -> the IDs of the containers whose identity names it
    logs: Mapping[str, _PodLogDir | None]  # var/log/pods' entries: a pod log directory, or None for another name
    log_names: Mapping[str, frozenset[str]]  # pod UID -> the names of the pod log directories naming it
    crowded: frozenset[str]  # the pod UIDs named by more than one pod log directory (their listing order decides)
    log_turns: _Turns  # the pod log directories' names by turn of the POD_LOG_DIRS rotation
    unsettled: frozenset[str]  # pod log directories scanned while their mtime proved nothing: stat'ed every reading


def _empty_memory(locations: int) -> NamesMemory:
    """The memory before a first reading: every container and pod log directory that reading finds is new."""
    nothing: Mapping = frozen_map()
    return NamesMemory(Names(nothing, nothing, nothing), (None,) * locations, nothing, nothing, _NO_TURNS, nothing,
                       nothing, nothing, nothing, frozenset(), _NO_TURNS, frozenset())  # fmt: skip


def _settled(stat: os.stat_result, now_ns: int) -> _State | None:
    """A directory's (inode, mtime), which stands for its listing without reading it: its mtime changes whenever an
    entry is added, removed or renamed in it. Timestamps are coarse (a kernel tick), so two changes within one tick
    leave one mtime: while the mtime is within RACY_SECONDS of the reading's start (or in the future, after a clock
    step) it proves nothing (None), and the directory is listed again at every reading. A change after it settled
    stamps a newer mtime."""
    if now_ns - stat.st_mtime_ns < RACY_SECONDS * 1_000_000_000:
        return None
    return (stat.st_ino, stat.st_mtime_ns)


def _regrouped(turns: _Turns, share: int, keys: Iterable[tuple[str, int]]) -> _Turns:
    """``turns`` for a rotation over ``share`` readings, grouped again from ``keys`` (key, turn number) when it was
    grouped for another share (a whole reading reads everything as one turn)."""
    if turns.share == share:
        return turns
    groups: list[set[str]] = [set() for _ in range(share)]
    for key, number in keys:
        groups[number % share].add(key)
    return _Turns(share, tuple(frozenset(group) for group in groups))


def _edited(turns: _Turns, removed: Iterable[tuple[str, int]], added: Iterable[tuple[str, int]]) -> _Turns:
    """``turns`` less ``removed`` and with ``added`` (key, turn number): the groups touched are copied, the others
    kept (the memory they come from is never changed)."""
    share = turns.share
    touched: dict[int, set[str]] = {}
    for keys, keep in ((removed, False), (added, True)):
        for key, number in keys:
            index = number % share
            group = touched.get(index)
            if group is None:
                group = touched[index] = set(turns.groups[index])
            if keep:
                group.add(key)
            else:
                group.discard(key)
    if not touched:
        return turns
    groups = list(turns.groups)
    for index, group in touched.items():
        groups[index] = frozenset(group)
    return _Turns(share, tuple(groups))


# ------------------------------------------------------------------------------------- containers from the bundles
def _bundle_listing(fs: HostFs, directory: str, known: _Listing | None, now_ns: int, trust: bool) -> _Listing:
    """The bundle directory's entries: the known listing while the directory's settled (inode, mtime) is the one it
    was taken at (unless not ``trust``), else a new one (holding the known set of IDs when they are the same, so
    that the next steps see at once that none came or went)."""
    try:
        found = fs.stat_optional(directory)
    except OSError:
        found = None
    state = None if found is None else _settled(found, now_ns)
    if trust and state is not None and known is not None and known.state == state:
        return known
    ids = frozenset(fs.list_dir(directory))
    if known is not None and known.ids == ids:
        ids = known.ids
    return _Listing(state, ids)


def _listings(
    fs: HostFs, locations: list[_Location], known: tuple[_Listing | None, ...], now_ns: int, trust: bool
) -> list[_Listing | None]:
    return [
        _bundle_listing(fs, location.directory, old, now_ns, trust) if fs.is_dir(location.directory) else None
        for location, old in zip(locations, known, strict=True)
    ]


def _listed_or_unlisted(listings: list[_Listing | None], known: tuple[_Listing | None, ...]) -> set[str]:
    """The container IDs listed now and not before, or before and not now, in some bundle directory."""
    moved: set[str] = set()
    for listing, old in zip(listings, known, strict=True):
        ids = listing.ids if listing is not None else frozenset()
        old_ids = old.ids if old is not None else frozenset()
        if ids is not old_ids:
            moved |= ids ^ old_ids
    return moved


def _config_key(fs: HostFs, config: str) -> tuple[int, int, int] | None:
    """A config.json's (inode, mtime, size); None when it is not there."""
    try:
        stat = fs.stat_optional(config)
    except OSError:
        return None
    return None if stat is None else (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _moved_in_turn(fs: HostFs, bundles: Mapping[str, _Bundle], turns: _Turns, turn: int) -> set[str]:
    """The IDs of the containers whose config.json, due to be stat'ed at this turn, moved (or went)."""
    moved: set[str] = set()
    for config in turns.groups[turn]:
        bundle = bundles[config]
        if _config_key(fs, config) != bundle.key:
            moved.add(bundle.container_id)
    return moved


def _parsed(fs: HostFs, container_id: str, runtime: str, config: str, known: _Bundle | None) -> _Bundle | None:
    """The bundle's config.json, parsed again only when its (inode, mtime, size) moved; None when it cannot be read
    (the bundle is being created, or removed). An identity parsed again into the same value is the known object."""
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
    if known is not None and identity == known.identity:
        identity = known.identity
    return _Bundle(key, identity, zlib.crc32(container_id.encode()), container_id)


class _Found(NamedTuple):
    """One container's bundles as a reading finds them, and the identity they give."""

    bundles: dict[str, _Bundle]  # by config path, those read or kept
    waiting: list[str]  # config paths listed whose file was not there
    identity: ContainerIdentity | None
    rank: int  # the index of the location the identity came from


def _found(
    fs: HostFs,
    container_id: str,
    locations: list[_Location],
    listings: list[_Listing | None],
    known: Mapping[str, _Bundle],
    rotation: tuple[int, int],
) -> _Found:
    """A container's identity: its bundles in the order of the locations, the first one that names a Kubernetes
    container wins and those after it are not looked at. A bundle known from the previous reading is stat'ed again
    only in its turn of the rotation (``rotation``: share, turn; every one when the share is 1)."""
    share, turn = rotation
    bundles: dict[str, _Bundle] = {}
    waiting: list[str] = []
    for index, (location, listing) in enumerate(zip(locations, listings, strict=True)):
        if listing is None or container_id not in listing.ids:
            continue
        config = location.config_of(container_id)
        old = known.get(config)
        if old is not None and share > 1 and old.turn % share != turn:
            bundle: _Bundle | None = old  # not its turn: what it was parsed into stands
        else:
            bundle = _parsed(fs, container_id, location.runtime, config, old)
        if bundle is None:
            waiting.append(config)
            continue
        bundles[config] = bundle
        if bundle.identity is not None:
            return _Found(bundles, waiting, bundle.identity, index)
    return _Found(bundles, waiting, None, -1)


def _kept_object(
    found: _Found, before: ContainerIdentity | None, bundles: dict[str, _Bundle]
) -> ContainerIdentity | None:
    """The identity found, or ``before`` where they are equal: the same value from another bundle (the container's
    bundle moved between locations) stays the same object, in the snapshot and in the bundle it came from (whose
    identity is then the snapshot's, so the next reading finds it the same object)."""
    identity = found.identity
    if identity is None or identity is before or identity != before:
        return identity
    config = next(reversed(found.bundles))  # the bundle the identity came from: the last one looked at
    bundles[config] = replace(bundles[config], identity=before)
    return before


class _Containers:
    """The containers' part of a reading: the previous reading's, made again for the containers that moved.

    Every mapping is a copy when changed (the memory's are never changed). ``changes``: (identity before, identity
    now) of every container whose identity is another object now (None: none)."""

    def __init__(self, memory: NamesMemory, share: int) -> None:
        self.bundles: Mapping[str, _Bundle] = memory.bundles
        self.waiting: Mapping[str, str] = memory.waiting
        self.turns = _regrouped(memory.turns, share, ((config, bundle.turn) for config, bundle in self.bundles.items()))
        self.containers: Mapping[str, ContainerIdentity] = memory.snapshot.containers
        self.ranks: Mapping[str, int] = memory.ranks
        self.changes: list[tuple[ContainerIdentity | None, ContainerIdentity | None]] = []

    def renew(
        self,
        fs: HostFs,
        moved: set[str],
        locations: list[_Location],
        listings: list[_Listing | None],
        rotation: tuple[int, int],
    ) -> None:
        """Each container of ``moved`` found again (see _found), in place of what the previous reading found."""
        if not moved:
            return
        known = self.bundles
        bundles, waiting = dict(known), dict(self.waiting)
        containers, ranks = _copy(self.containers), dict(self.ranks)
        gone: list[tuple[str, int]] = []
        came: list[tuple[str, int]] = []
        for container_id in moved:
            for location in locations:
                config = location.config_of(container_id)
                old = bundles.pop(config, None)
                if old is not None:
                    gone.append((config, old.turn))
                waiting.pop(config, None)
            found = _found(fs, container_id, locations, listings, known, rotation)
            bundles.update(found.bundles)
            came.extend((config, bundle.turn) for config, bundle in found.bundles.items())
            waiting.update(dict.fromkeys(found.waiting, container_id))
            before = containers.get(container_id)
            identity = _kept_object(found, before, bundles)
            if identity is before and (identity is None or ranks[container_id] == found.rank):
                continue
            self.changes.append((before, identity))  # a rank moved alone may change which container names the pod
            if identity is None:
                del containers[container_id], ranks[container_id]
            else:
                containers[container_id], ranks[container_id] = identity, found.rank
        self.bundles, self.waiting, self.containers, self.ranks = bundles, waiting, containers, ranks
        self.turns = _edited(self.turns, gone, came)


def _pod_containers(
    index: Mapping[str, frozenset[str]], changes: list[tuple[ContainerIdentity | None, ContainerIdentity | None]]
) -> tuple[Mapping[str, frozenset[str]], set[str]]:
    """The pod UID -> container IDs index after ``changes``, and the pod UIDs whose containers' identities moved."""
    if not changes:
        return index, set()
    renewed = dict(index)
    uids: set[str] = set()
    for before, after in changes:
        if before is not None and before.pod_uid:
            uids.add(before.pod_uid)
            left = renewed[before.pod_uid] - {before.container_id}
            if left:
                renewed[before.pod_uid] = left
            else:
                del renewed[before.pod_uid]
        if after is not None and after.pod_uid:
            uids.add(after.pod_uid)
            renewed[after.pod_uid] = renewed.get(after.pod_uid, frozenset()) | {after.container_id}
    return renewed, uids


def _pod_of_containers(
    uid: str, ids: Iterable[str], containers: Mapping[str, ContainerIdentity], ranks: Mapping[str, int]
) -> PodIdentity | None:
    """The pod as its containers' identities name it, in the order of a whole reading (by location, then container
    ID): the first that has a namespace and a name names it, the first whose sandbox says whether a DaemonSet made
    it says that. None when none names it."""
    identities = [containers[cid] for cid in sorted(ids, key=lambda cid: (ranks[cid], cid))]
    named = next((identity for identity in identities if identity.namespace and identity.pod_name), None)
    if named is None or named.namespace is None or named.pod_name is None:
        return None
    daemonset = next((identity.daemonset for identity in identities if identity.daemonset is not None), None)
    return PodIdentity(uid, named.namespace, named.pod_name, daemonset)


# ------------------------------------------------------------------------------------------- var/log/pods
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


def _visited(
    fs: HostFs, path: str, pod: PodIdentity, old: _PodLogDir | None, settled_before: int, trust: bool
) -> _PodLogDir:
    """A pod log directory (``old``: as the previous reading found it, None when new), scanned again unless its
    settled (inode, mtime) is the one it was scanned at (every one unless ``trust``)."""
    try:  # a link is followed under the root
        stat = fs.stat_optional(path)
    except OSError:
        stat = None
    state = (stat.st_ino, stat.st_mtime_ns) if stat is not None and stat.st_mtime_ns <= settled_before else None
    if trust and state is not None and old is not None and old.state == state:
        return old
    turn = old.turn if old is not None else zlib.crc32(path.rsplit("/", 1)[-1].encode())
    return _scan_pod_log_dir(fs, Path(path), pod, state, turn)


def _log_view(item: _PodLogDir | None) -> tuple[PodIdentity, tuple[str, ...] | None] | None:
    """What of a pod log directory the snapshot shows."""
    return None if item is None else (item.pod, item.containers)


class _Logs:
    """var/log/pods' part of a reading: the previous reading's, with the entries that came, went or were due to be
    looked at (new ones, those unsettled, those in their turn of the rotation; every one unless ``trust``) made
    again. ``uids``: the pod UIDs whose pod log directories moved (or whose order may decide)."""

    def __init__(self, memory: NamesMemory) -> None:
        self.logs = memory.logs
        self.log_names = memory.log_names
        self.crowded = memory.crowded
        self.turns = memory.log_turns
        self.unsettled = memory.unsettled
        self.uids: set[str] = set(memory.crowded)  # a crowded UID's winner may move with the listing's order alone
        self.order: list[str] = []

    def renew(self, fs: HostFs, root: Path | None, now_ns: int, trust: bool, rotation: tuple[int, int]) -> None:
        """var/log/pods (None: not there) read again: its names in listing order (which decides for a UID named
        twice), the entries to look at stat'ed by name (only they: a few in a listing of hundreds)."""
        entries = dict.fromkeys(fs.list_dir(root) if root is not None else ())
        previous = self.logs
        share, turn = rotation
        self.turns = _regrouped(self.turns, share, ((name, item.turn) for name, item in previous.items() if item))
        gone = previous.keys() - entries.keys()
        if trust:
            visit = (entries.keys() - previous.keys()) | (self.unsettled | self.turns.groups[turn]) & entries.keys()
        else:
            visit = set(entries)
        moved: list[tuple[str, _PodLogDir | None, _PodLogDir | None]] = []
        if visit or gone:
            logs = dict(previous)
            for name in gone:
                before = logs.pop(name)
                if before is not None:
                    moved.append((name, before, None))
            settled_before = now_ns - RACY_SECONDS * 1_000_000_000  # an mtime after it proves nothing (_settled)
            for name in visit:
                old = previous.get(name)
                pod = old.pod if old is not None else None if name in previous else parse_pod_log_dir(name)
                if pod is None:
                    logs[name] = None  # not a pod log directory's name: it never becomes one
                    continue
                logs[name] = item = _visited(fs, f"{root}/{name}", pod, old, settled_before, trust)
                moved.append((name, old, item))
            self.logs = logs
            self._index(moved)
        if self.crowded:  # their listing order decides
            self.order = list(entries)

    def _index(self, moved: list[tuple[str, _PodLogDir | None, _PodLogDir | None]]) -> None:
        """The indexes of the pod log directories after ``moved`` (name, before, now; one of them a directory)."""
        log_names = dict(self.log_names)
        unsettled = set(self.unsettled)
        gone: list[tuple[str, int]] = []
        came: list[tuple[str, int]] = []
        touched: set[str] = set()
        for name, before, now in moved:
            uid = (now.pod if now is not None else before.pod).uid  # type: ignore[union-attr]
            touched.add(uid)
            if _log_view(before) != _log_view(now):
                self.uids.add(uid)
            unsettled.discard(name)
            if now is not None and now.state is None:
                unsettled.add(name)
            if now is None:
                gone.append((name, before.turn))  # type: ignore[union-attr]
                _put(log_names, uid, log_names[uid] - {name})
            elif before is None:
                came.append((name, now.turn))
                log_names[uid] = log_names.get(uid, frozenset()) | {name}
        self.log_names = log_names
        self.unsettled = frozenset(unsettled)
        self.turns = _edited(self.turns, gone, came)
        self.crowded = frozenset(uid for uid in self.crowded | touched if len(log_names.get(uid, ())) > 1)

    def pod_of(self, uid: str) -> tuple[PodIdentity | None, tuple[str, ...] | None]:
        """The pod as its pod log directories name it and the container log directories they hold, as a whole
        reading takes them in listing order: the last directory's containers, and its pod unless the last entry for
        the UID is not a directory."""
        names_: Iterable[str] = self.log_names.get(uid, ())
        if len(self.log_names.get(uid, ())) > 1:
            position = {name: index for index, name in enumerate(self.order)}
            names_ = sorted(names_, key=lambda name: position.get(name, -1))
        pod: PodIdentity | None = None
        containers: tuple[str, ...] | None = None
        for name in names_:
            item = self.logs[name]
            assert item is not None
            pod = item.pod if item.containers is not None else None
            if item.containers is not None:
                containers = item.containers
        return pod, containers


def _copy(mapping: Mapping[str, _V]) -> dict[str, _V]:
    """A copy to change of a snapshot's mapping: a read-only view's is its dict's copy, made without a lookup per key
    (which ``dict(view)`` makes)."""
    return mapping.copy() if isinstance(mapping, MappingProxyType) else dict(mapping)


def _put(mapping: dict[str, Any], key: str, value: Any) -> None:
    """``mapping[key] = value``, or no ``key`` when ``value`` is None or empty."""
    if value is None or value == frozenset():
        mapping.pop(key, None)
    else:
        mapping[key] = value


def _renewed_pods(
    previous: Names, uids: Iterable[str], containers: _Containers, pod_index: Mapping[str, frozenset[str]], logs: _Logs
) -> tuple[Mapping[str, PodIdentity], Mapping[str, tuple[str, ...]]] | None:
    """The snapshot's pods and pod log containers with the pods of ``uids`` made again (the others, and those made
    again equal, the same objects); None when none moved. A pod's containers name it, else its pod log
    directories."""
    pods: dict[str, PodIdentity] | None = None
    listed: dict[str, tuple[str, ...]] | None = None
    for uid in uids:
        log_pod, log_containers = logs.pod_of(uid)
        pod = _pod_of_containers(uid, pod_index.get(uid, ()), containers.containers, containers.ranks) or log_pod
        if pod != previous.pods.get(uid):
            pods = pods if pods is not None else _copy(previous.pods)
            _put(pods, uid, pod)
        if log_containers != previous.pod_log_containers.get(uid):
            listed = listed if listed is not None else _copy(previous.pod_log_containers)
            _put(listed, uid, log_containers)
    if pods is None and listed is None:
        return None
    return (
        MappingProxyType(pods) if pods is not None else previous.pods,  # copies of this reading's, read-only
        MappingProxyType(listed) if listed is not None else previous.pod_log_containers,
    )


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
    locations = [_Location(runtime, directory, config) for runtime, directory, config in bundle_locations(paths)]
    last = memory if memory is not None else _empty_memory(len(locations))
    listings = _listings(fs, locations, last.listings, now_ns, trust)
    logs_present = fs.is_dir(paths.pod_logs)
    if not logs_present and all(listing is None for listing in listings):
        places = ", ".join(location.directory for location in locations)
        raise SourceUnavailable(f"no container runtime bundles ({places}) and no {paths.pod_logs}")
    containers = _Containers(last, share)
    moved = _listed_or_unlisted(listings, last.listings) | _moved_in_turn(fs, last.bundles, containers.turns, turn)
    moved.update(last.waiting.values())  # a bundle seen without its config.json: looked for at every reading
    containers.renew(fs, moved, locations, listings, (share, turn))
    pod_index, uids = _pod_containers(last.pod_containers, containers.changes)
    logs = _Logs(last)
    logs.renew(fs, paths.pod_logs if logs_present else None, now_ns, trust, log_rotation)
    pods = _renewed_pods(last.snapshot, uids | logs.uids, containers, pod_index, logs)
    snapshot = last.snapshot
    if containers.changes or pods is not None:
        pods_now, listed = pods if pods is not None else (snapshot.pods, snapshot.pod_log_containers)
        # this reading's own copy (a reading copies the previous one's before changing it): read-only as it is
        changed = MappingProxyType(containers.containers) if containers.changes else snapshot.containers
        snapshot = Names(containers=changed, pods=pods_now, pod_log_containers=listed)
    kept = NamesMemory(snapshot, tuple(listings), containers.bundles, containers.waiting, containers.turns,
                       containers.ranks, pod_index, logs.logs, logs.log_names, logs.crowded, logs.turns,
                       logs.unsettled)  # fmt: skip
    return snapshot, kept, bool(containers.waiting), memory is not None and snapshot is last.snapshot


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
