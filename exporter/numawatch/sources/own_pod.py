"""The own_pod source: the pod numawatch itself runs in, so that it never reports itself as a foreign workload.

Read from this process's own entries in the host root's procfs (``<procfs>/self``, which is this process in the
procfs numawatch reads: the host's with the DaemonSet's ``hostPID``):

- ``self/cgroup``: a pod's cgroup (``kubepods…/pod<uid>…/<container>``, either driver) names the pod. Seen where
  the container shares the host's cgroup namespace (cgroup v1, or v2 with ``cgroupns=host``).
- ``self/mountinfo``: with a private cgroup namespace (the default with cgroup v2) ``self/cgroup`` reads ``0::/``;
  the kubelet bind-mounts every container's ``/etc/hosts`` from ``<kubelet root>/pods/<uid>/etc-hosts``, and
  mountinfo's root field shows that path (relative to the file system it lies on), so the UID is there whatever
  the cgroup namespace.

Neither naming a pod means numawatch does not run in one (``check`` on the node itself, a fake or captured tree):
the UID is None, and nothing is left out.
"""

from __future__ import annotations

import re

from numawatch.errors import MalformedFile
from numawatch.hosttext import pod_uid
from numawatch.model.cluster import OwnPod
from numawatch.paths import Paths
from numawatch.source import SourceSpec
from numawatch.sources.processes import cgroup_identity, parse_proc_cgroup

# mountinfo: "<id> <parent> <major:minor> <root> <mount point> ...": the root of /etc/hosts' bind mount
_ETC_HOSTS = re.compile(r"/pods/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})/etc-hosts")
MOUNTINFO_LIMIT = 1024 * 1024


def uid_from_cgroup(text: str) -> str | None:
    """The pod UID ``/proc/self/cgroup`` names, None when it names none. Raises ValueError on a malformed file."""
    found = parse_proc_cgroup(text)
    if found is None:
        return None
    _version, path = found
    _, uid = cgroup_identity(path)
    return pod_uid(uid) if uid is not None else None


def uid_from_mountinfo(text: str) -> str | None:
    """The pod UID of the kubelet's ``etc-hosts`` bind mount onto ``/etc/hosts``, None when there is none."""
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 5 or fields[4] != "/etc/hosts":
            continue
        match = _ETC_HOSTS.search(fields[3])
        if match is not None and fields[3].endswith(match.group(0)):
            return match.group(1)
    return None


def read(paths: Paths) -> OwnPod:
    own = paths.procfs / "self"
    cgroup_file = own / "cgroup"
    text = paths.fs.read_optional_text(cgroup_file)
    if text is not None:
        try:
            uid = uid_from_cgroup(text)
        except ValueError as error:
            raise MalformedFile(cgroup_file, str(error)) from None
        if uid is not None:
            return OwnPod(uid=uid, origin="cgroup")
    mountinfo = paths.fs.read_optional_text(own / "mountinfo", MOUNTINFO_LIMIT)
    if mountinfo is not None:
        uid = uid_from_mountinfo(mountinfo)
        if uid is not None:
            return OwnPod(uid=uid, origin="mountinfo")
    return OwnPod(uid=None, origin="none")


def _fingerprint(paths: Paths) -> str:
    """A process stays in its pod: read once per reader (per procfs)."""
    return str(paths.procfs)


SOURCE = SourceSpec(
    name="own_pod",
    read=read,
    fingerprint=_fingerprint,
    description="the pod numawatch runs in (its own cgroup, or the kubelet's /etc/hosts mount), never reported as a "
    "foreign workload",
)
