"""Which kubelet runs on the node, and which of its checkpoint rules apply to it.

The kubelet's checkpoint rules changed in 1.36 (kubelet.md §1.1, §4.4; pkg/kubelet/cm/{cpu,memory}manager/state/
checkpoint.go and state_checkpoint.go): the CPU Manager no longer reads v1 files (entries keyed by container ID) and
hashes its v3 struct, ``podEntries`` included; the Memory Manager hashes its v2 struct and accepts a checksum of 0;
both read the ``data``/``dataChecksum`` format. A checkpoint is therefore judged under each rule set, and the node's
kubelet version picks the verdict. Where it comes from, strongest first:

1. the Node object's ``status.nodeInfo.kubeletVersion`` (when the Kubernetes API is read);
2. RKE2's versioned data directory, ``/var/lib/rancher/rke2/data/v1.31.4-rke2r1-<hash>/``, the one that
   ``/var/lib/rancher/rke2/bin`` links to (older directories stay behind after an upgrade);
3. the intent's ``kubelet.version``.

With none of them the version is unknown, and a file only one rule set refuses is reported leniently.
"""

from __future__ import annotations

import re

from numawatch.model.kubelet import ERAS, SINCE_1_36, UNTIL_1_35, KubeletVersion

__all__ = [
    "era_of",
    "era_text",
    "parse_version",
    "running_kubelet_version",
]

# "v1.31.4", "1.31", "v1.31.4+rke2r1", "v1.31.4-gke.100": Kubernetes' version strings (and the intent's short form).
_VERSION = re.compile(r"v?(?P<major>[0-9]{1,3})\.(?P<minor>[0-9]{1,3})(?:\.[0-9]{1,4})?(?:[-+][0-9A-Za-z.+-]{0,64})?")


def parse_version(text: str, origin: str) -> KubeletVersion | None:
    """A Kubernetes version string, or None when it is not one."""
    match = _VERSION.fullmatch(text)
    if match is None:
        return None
    return KubeletVersion(int(match["major"]), int(match["minor"]), text, origin)


def era_of(version: KubeletVersion | None) -> str | None:
    """The checkpoint rule set this kubelet follows; None when the version is unknown."""
    if version is None:
        return None
    return SINCE_1_36 if (version.major, version.minor) >= (1, 36) else UNTIL_1_35


def era_text(eras: frozenset[str]) -> str:
    """How a message names the kubelets that follow these rule sets."""
    if eras == ERAS:
        return "every kubelet version"
    return " and ".join(f"kubelet {era}" for era in sorted(eras))


def running_kubelet_version(
    rke2: KubeletVersion | None, intended: str | None, node_reported: str | None = None
) -> KubeletVersion | None:
    """The version of the kubelet that will read the checkpoints, from the strongest origin that names one.

    node_reported: the Node object's ``status.nodeInfo.kubeletVersion`` where the Kubernetes API is read (what the
    kubelet itself reported; it wins). rke2: from RKE2's data directory (KubeletState.rke2_version). intended: the
    intent's ``kubelet.version``.
    """
    if node_reported is not None:
        version = parse_version(node_reported, "the Node object's status.nodeInfo.kubeletVersion")
        if version is not None:
            return version
    if rke2 is not None:
        return rke2
    if intended is not None:
        return parse_version(intended, "the intent's kubelet.version")
    return None
