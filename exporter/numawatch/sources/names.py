"""The names source: which pod and container each container ID belongs to, without the API server.

Read from the container runtime's OCI bundles (kubelet.md §6.6), whose ``config.json`` carries the CRI annotations:

- containerd: ``run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``, on RKE2/k3s
  ``run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``; annotations
  ``io.kubernetes.cri.container-type`` ("sandbox"/"container"), ``io.kubernetes.cri.sandbox-name``,
  ``…sandbox-namespace``, ``…sandbox-uid``, ``io.kubernetes.cri.container-name``.
- CRI-O: ``run/containers/storage/overlay-containers/<id>/userdata/config.json`` and the same under
  ``var/lib/containers/storage/``; annotations ``io.kubernetes.pod.name``, ``io.kubernetes.pod.namespace``,
  ``io.kubernetes.pod.uid``, ``io.kubernetes.container.name``, ``io.kubernetes.cri-o.ContainerType``.
- Fallback: ``var/log/pods/<namespace>_<pod>_<uid>/<container>/`` gives pods by UID and their container names
  (``_`` cannot occur in namespace or pod names, nor in UIDs).

A bundle's config.json never changes while its container lives, so parsed annotations are kept per file (keyed by
inode, mtime and size) and only new bundles are parsed; the fingerprint (the bundle directories' mtimes, their
listings while just modified; the pod log directories' mtimes) skips the whole read when no container came or went.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Hashable
from pathlib import Path

from numawatch import confined
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import Inputs, SourceSpec
from numawatch.hosttext import k8s_label, k8s_subdomain, one_of, pod_uid
from numawatch.model import frozen_map
from numawatch.model.workloads import ContainerIdentity, Names, PodIdentity
from numawatch.paths import Paths
from numawatch.refresh import Carried, Refresh
from numawatch.sources._files import list_dir, read_bytes

log = logging.getLogger(__name__)

# An OCI config.json with a large seccomp profile and many mounts is ~50 KB; a few MB means something is wrong.
CONFIG_READ_LIMIT = 4 * 1024 * 1024

# A directory modified this recently is fingerprinted by its listing, not its mtime (see _directory_state).
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
    )


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
# Parsed identities by config.json path, with the (inode, mtime, size) they were parsed at.
_Entries = dict[str, tuple[tuple[int, int, int], ContainerIdentity | None]]


class _BundleCache:
    """Parsed identities by config.json path, valid while (inode, mtime, size) is unchanged: one reading's, started
    from the previous reading's ``entries`` (its memory, which the HostReader keeps).

    Holds only the bundles seen in the latest read, so it is bounded by the number of live containers. ``pending``
    says the latest read met a bundle without its config.json yet (containerd writes it after creating the
    directory): the listing-based fingerprint would not notice it arriving, so the source is re-read meanwhile.
    """

    def __init__(self, entries: _Entries | None = None) -> None:
        self.entries: _Entries = entries if entries is not None else {}
        self.pending = False

    def read(self, reads: list[tuple[str, str, str]]) -> dict[str, ContainerIdentity]:
        """Identities for (container_id, runtime, config path) triples; the first location wins for an ID."""
        fresh: dict[str, tuple[tuple[int, int, int], ContainerIdentity | None]] = {}
        found: dict[str, ContainerIdentity] = {}
        pending = False
        for container_id, runtime, config in reads:
            if container_id in found:
                continue
            try:
                stat = confined.stat_path(config)
            except OSError:
                pending = True  # the bundle is being created (or removed)
                continue
            key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            cached = self.entries.get(config)
            if cached is not None and cached[0] == key:
                identity = cached[1]
            else:
                try:
                    identity = identity_from_annotations(
                        container_id, runtime, parse_annotations(read_bytes(config, CONFIG_READ_LIMIT))
                    )
                except OSError:
                    pending = True
                    continue
                except MalformedFile as error:
                    log.warning("%s", error)
                    identity = None  # remembered, so a broken file is reported once, not every scan
                except ValueError as error:
                    log.warning("%s", MalformedFile(config, str(error)))
                    identity = None
            fresh[config] = (key, identity)
            if identity is not None:
                found[container_id] = identity
        self.entries = fresh
        self.pending = pending
        return found


def _scan_pod_logs(root: Path) -> tuple[dict[str, PodIdentity], dict[str, tuple[str, ...]]]:
    pods: dict[str, PodIdentity] = {}
    containers: dict[str, tuple[str, ...]] = {}
    for name in list_dir(root):
        pod = parse_pod_log_dir(name)
        if pod is None:
            continue
        pods[pod.uid] = pod
        pod_dir = root / name
        try:
            with confined.scandir(pod_dir) as entries:
                # A link is followed under the root, never by the entry's own stat().
                names = [
                    entry.name
                    for entry in entries
                    if _is_container_name(entry.name)
                    and (
                        entry.is_dir(follow_symlinks=False)
                        or (entry.is_symlink() and confined.is_dir(pod_dir / entry.name))
                    )
                ]
        except NotADirectoryError:
            del pods[pod.uid]
            continue
        except OSError:
            names = []  # the pod's logs were removed while we looked
        containers[pod.uid] = tuple(sorted(names))
    return pods, containers


def read(paths: Paths, cache: _BundleCache | None = None) -> Names:
    """Container and pod identities from the runtime bundles and var/log/pods; SourceUnavailable if none exists.

    ``cache`` (started from the previous reading's entries, see ``read_incremental``) spares re-parsing bundles
    that did not change.
    """
    reads: list[tuple[str, str, str]] = []
    present = False
    for runtime, directory, config in bundle_locations(paths):
        if not confined.is_dir(directory):
            continue
        present = True
        for container_id in sorted(list_dir(directory)):
            reads.append((container_id, runtime, f"{directory}/{container_id}/{config}"))
    logs_present = confined.is_dir(paths.pod_logs)
    if not present and not logs_present:
        places = ", ".join(str(directory) for _, directory, _ in bundle_locations(paths))
        raise SourceUnavailable(f"no container runtime bundles ({places}) and no {paths.pod_logs}")
    containers = (cache if cache is not None else _BundleCache()).read(reads)
    pods: dict[str, PodIdentity] = {}
    for identity in containers.values():
        if identity.pod_uid and identity.namespace and identity.pod_name and identity.pod_uid not in pods:
            pods[identity.pod_uid] = PodIdentity(identity.pod_uid, identity.namespace, identity.pod_name)
    log_pods, log_containers = _scan_pod_logs(paths.pod_logs) if logs_present else ({}, {})
    for uid, pod in log_pods.items():
        pods.setdefault(uid, pod)
    return Names(
        containers=frozen_map(containers),
        pods=frozen_map(pods),
        pod_log_containers=frozen_map(log_containers),
    )


def _directory_state(directory: Path) -> Hashable:
    """What tells whether a bundle directory's entries changed: its inode and mtime, or its listing while it is new.

    A directory's mtime changes whenever an entry is added, removed or renamed in it, so (inode, mtime) stands for
    the listing without reading it (860 entries on a large node). Timestamps are coarse (a kernel tick), so two
    changes within one tick leave one mtime: while the mtime is within RACY_SECONDS of now (or in the future, after
    a clock step) the listing itself is the fingerprint. A later change then stamps a newer mtime than one that had
    already settled. A missing directory is ().
    """
    try:
        stat = confined.stat_path(directory)
    except OSError:
        return ()
    if time.time_ns() - stat.st_mtime_ns < RACY_SECONDS * 1_000_000_000:
        return ("listing", tuple(sorted(list_dir(directory))))
    return (stat.st_ino, stat.st_mtime_ns)


def fingerprint(paths: Paths) -> Hashable:
    """The bundle directories' states (``_directory_state``) and each pod log directory with its mtime (new
    container log dirs)."""
    parts: list[Hashable] = []
    for _, directory, _ in bundle_locations(paths):
        parts.append(_directory_state(directory))
    logs: list[tuple[str, int]] = []
    try:
        with confined.scandir(paths.pod_logs) as entries:
            for entry in entries:
                try:
                    if entry.is_symlink():  # followed under the root, never by the entry's own stat()
                        mtime = confined.stat_path(paths.pod_logs / entry.name).st_mtime_ns
                    else:
                        mtime = entry.stat(follow_symlinks=False).st_mtime_ns
                    logs.append((entry.name, mtime))
                except OSError:
                    continue
    except OSError:
        pass
    parts.append(tuple(sorted(logs)))
    return tuple(parts)


def read_incremental(paths: Paths, inputs: Inputs, refresh: Refresh) -> Carried:
    """A reading handed the previous one's parsed bundles: a bundle is parsed again only when it changed. While it
    saw a bundle whose config.json was not written yet, the reading is not settled: the HostReader reads it again
    next time whatever the fingerprint says (the listing would not change when the file arrives)."""
    cache = _BundleCache(refresh.memory)
    result = read(paths, cache)
    return Carried(result, cache.entries, settled=not cache.pending)


SOURCE = SourceSpec(
    name="names",
    read=read,
    fingerprint=fingerprint,
    incremental=read_incremental,
    description="pod and container names per container ID, from runtime bundle annotations and var/log/pods",
)
