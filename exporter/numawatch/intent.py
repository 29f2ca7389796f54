"""What "correct" means on this node: the reference profile for GPU inference nodes, or an intent file.

The reference profile is ../shared/DOMAIN.md's table as data. An intent YAML file overrides any part of it; see
docs/intent.md for the format; numawatch.intentfile reads and validates one. The checks read what is intended from
here, and the intent file names the checks, so this module imports no check and the file's reader imports both.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from numawatch.cpuset import CPUSet
from numawatch.model import frozen_map
from numawatch.shapes import Shape
from numawatch.taints import Taint

REFERENCE_PROFILE = "reference profile"


class IntentError(ValueError):
    """An invalid intent file. The message is one line: file, key, what was expected, what was found."""


@dataclass(frozen=True)
class PodSelector:
    """Containers that must be exclusively pinned, by shell-style patterns on names."""

    namespace: str = "*"
    pod: str = "*"
    container: str = "*"

    def matches(self, namespace: str | None, pod: str | None, container: str | None) -> bool:
        return (
            fnmatch.fnmatchcase(namespace or "", self.namespace)
            and fnmatch.fnmatchcase(pod or "", self.pod)
            and fnmatch.fnmatchcase(container or "", self.container)
        )


@dataclass(frozen=True)
class KernelIntent:
    """Host-layer expectations: kernel knobs, isolation, IRQs, jitter thresholds."""

    numa_balancing: int = 0
    thp_enabled: frozenset[str] = frozenset({"madvise", "never"})
    thp_defrag: frozenset[str] = frozenset({"never", "madvise"})
    swappiness: int = 0
    cpufreq_governor: str = "performance"
    # huge page size in kB -> pages wanted in total; None per node means "whatever the command line asks"
    hugepages: Mapping[int, int] = field(default_factory=frozen_map)
    # NUMA node -> size in kB -> pages wanted on that node
    hugepages_per_node: Mapping[int, Mapping[int, int]] = field(default_factory=frozen_map)
    irq_exempt: tuple[str, ...] = ()  # IRQ name patterns (fnmatch) allowed on isolated CPUs
    irq_activity_threshold_per_second: float = 1.0  # device interrupts per second per isolated/exclusive CPU
    tick_threshold_per_second: float = 10.0  # local timer interrupts per second on a nohz_full CPU
    check_irqbalance: bool = True
    # The longest exit latency (µs) of an idle state that isolated and exclusive CPUs may enter: C1 and C1E are a
    # microsecond or two, C6 on a server 100 µs and more.
    max_idle_exit_latency_us: int = 10


# nvidia-smi topo's levels of a PCIe path, best first (see gpupaths.py).
PCI_PATH_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")

# Namespaces whose pods belong on every node whatever the taints (the kubelet's and Kubernetes' own, numawatch's as
# deploy/ installs it, and the NVIDIA GPU Operator's under its two usual names); node.systemNamespaces adds more.
BUILTIN_SYSTEM_NAMESPACES = ("kube-system", "numawatch", "gpu-operator", "nvidia-gpu-operator")

# Namespaces where the common distributions and operators install their node agents (DaemonSets: exporters, CNI and
# CSI node plugins, log shippers, device plugins). node_workload_not_isolated takes a pod there for a node agent only
# when neither the API (ownerReferences) nor the runtime's files (CRI-O's pod labels) say what owns it: the API or
# the runtime, where they answer, decide. ``prefix-*`` matches every namespace that starts with the prefix. Where
# each comes from: docs/checks.md ("node agents"); node.agentNamespaces adds more.
NODE_AGENT_NAMESPACES = (
    # monitoring: kube-prometheus and its prometheus-operator examples, the kube-prometheus-stack chart's usual
    # release namespaces, Grafana's and the cloud vendors' collectors
    "monitoring",
    "prometheus",
    "kube-prometheus-stack",
    "observability",
    "grafana-agent",
    "alloy",
    "gmp-system",
    "gke-gmp-system",
    "gke-managed-system",
    "amazon-cloudwatch",
    "amazon-guardduty",
    "datadog",
    "dynatrace",
    "newrelic",
    "elastic-system",
    # logging
    "logging",
    "fluent",
    "fluent-bit",
    "loki",
    "vector",
    # RKE2 / Rancher: cattle-system, cattle-monitoring-system, cattle-logging-system, cattle-fleet-system,
    # cattle-neuvector-system, ...
    "cattle-*",
    # accelerators and their operators (the GPU Operator's two usual names are system namespaces already)
    "nvidia-network-operator",
    "network-operator",
    "nvidia-dra-driver-gpu",
    "node-feature-discovery",
    "kube-amd-gpu",
    "intel-device-plugins",
    "habana-ai-operator",
    # CNI
    "calico-system",
    "tigera-operator",
    "kube-flannel",
    "cilium",
    "cilium-system",
    "kube-ovn",
    "antrea-system",
    "istio-system",
    "linkerd-cni",
    "metallb-system",
    # CSI and storage
    "longhorn-system",
    "rook-ceph",
    "openebs",
    "portworx",
    "trident",
    "velero",
    # security and policy agents
    "falco",
    "neuvector",
    "kube-bench",
    # OpenShift: every openshift-* namespace holds platform components (openshift-dns, openshift-multus,
    # openshift-ovn-kubernetes, openshift-monitoring, openshift-machine-config-operator, ...)
    "openshift-*",
)


@dataclass(frozen=True)
class NodeIntent:
    """What keeps other workloads off a GPU node (knob 10): its taints and labels, and who may run there anyway."""

    taints: tuple[Taint, ...] = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    labels: Mapping[str, str] = field(default_factory=lambda: frozen_map({"fibercli.local/numa-pinned": "true"}))
    system_namespaces: tuple[str, ...] = ()  # in addition to BUILTIN_SYSTEM_NAMESPACES
    agent_namespaces: tuple[str, ...] = ()  # names or prefix-* patterns, in addition to NODE_AGENT_NAMESPACES

    @property
    def allowed_namespaces(self) -> frozenset[str]:
        return frozenset(BUILTIN_SYSTEM_NAMESPACES) | frozenset(self.system_namespaces)

    def is_agent_namespace(self, namespace: str) -> bool:
        """Whether pods of ``namespace`` are taken for node agents when nothing says what owns them."""
        for pattern in (*NODE_AGENT_NAMESPACES, *self.agent_namespaces):
            if namespace == pattern or (pattern.endswith("*") and namespace.startswith(pattern[:-1])):
                return True
        return False


@dataclass(frozen=True)
class GpuIntent:
    """Where GPUs sit relative to what they talk to."""

    max_nic_path_level: str = "PXB"  # the worst acceptable PCIe path from a GPU to an RDMA NIC (PCI_PATH_LEVELS)


# The device plugins' accelerator resources (docs/gpu.md, "Device plugins"): NVIDIA's GPUs and MIG profiles, AMD's
# (ROCm k8s-device-plugin) and Intel Gaudi's (habanalabs device plugin).
DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-*", "amd.com/gpu", "habana.ai/gaudi")


@dataclass(frozen=True)
class Intent:
    source: str = REFERENCE_PROFILE  # the intent file's path, or "reference profile"
    cpu_manager_policy: str = "static"
    topology_manager_policy: str = "single-numa-node"
    topology_manager_scope: str = "pod"
    memory_manager_policy: str = "Static"
    # None: reserved CPUs must equal the housekeeping CPUs (online minus isolcpus), the seed's rule.
    reserved_cpus: CPUSet | None = None
    # The kubelet's version ("1.35", "v1.36.2"), for judging its checkpoints where neither the Node object nor RKE2's
    # data directory names it (kubelet_version.py); None: unknown there.
    kubelet_version: str | None = None
    # Containers holding one of these resources must be exclusively pinned on their accelerators' NUMA node. A name
    # ending in "*" is a prefix: "nvidia.com/mig-*" is every MIG profile (nvidia.com/mig-1g.10gb, ...).
    gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    pin_gpu_containers: bool = True
    pinned: tuple[PodSelector, ...] = ()  # more containers that must be pinned
    remote_memory_ratio: float = 0.10  # container_memory_remote fires above this share of resident memory
    remote_memory_min_bytes: int = 64 * 1024 * 1024  # ...and only when at least this much is remote
    severities: Mapping[str, str] = field(default_factory=frozen_map)
    disabled: frozenset[str] = frozenset()
    kernel: KernelIntent = field(default_factory=KernelIntent)
    # Named pod shapes whose remaining replicas the capacity metrics export (docs/capacity.md).
    shapes: tuple[Shape, ...] = ()
    node: NodeIntent = field(default_factory=NodeIntent)
    gpus: GpuIntent = field(default_factory=GpuIntent)

    @functools.cached_property
    def version(self) -> str:
        """A digest of everything this intent says, the same for equal intents and different for any other: what
        values derived for an intent are keyed on (an object's identity is not a value: a later intent may take over
        a collected one's). Intent holds mappings and is not hashable itself; worked out once per intent."""
        return hashlib.blake2b(repr(_canonical(self)).encode(), digest_size=16).hexdigest()

    def severity_for(self, check_id: str, default: str) -> str:
        return self.severities.get(check_id, default)

    def check_enabled(self, check_id: str) -> bool:
        return check_id not in self.disabled

    def is_gpu_resource(self, name: str) -> bool:
        """Whether ``name`` (a device-plugin resource) is one of ``gpu_resources``, exactly or by a ``*`` prefix."""
        for resource in self.gpu_resources:
            if resource.endswith("*"):
                prefix = resource[:-1]
                if name.startswith(prefix) and len(name) > len(prefix) and not name.endswith("*"):
                    return True
            elif resource == name:
                return True
        return False

    def must_pin(self, namespace: str | None, pod: str | None, container: str | None) -> bool:
        """Whether intent names this container as one that must be pinned (GPU holders are decided elsewhere)."""
        return any(selector.matches(namespace, pod, container) for selector in self.pinned)


REFERENCE = Intent()

_PLAIN = (str, int, float, bool, Fraction, type(None))


def _canonical(value: Any) -> Any:
    """``value`` as nested tuples of plain values, mappings and sets in a fixed order, so that equal intents give
    the same repr whatever order their mappings were filled in."""
    if isinstance(value, _PLAIN):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value).__name__, tuple((f.name, _canonical(getattr(value, f.name))) for f in fields))
    if isinstance(value, Mapping):
        return ("map", tuple(sorted(((_canonical(k), _canonical(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, frozenset | set):
        return ("set", tuple(sorted((_canonical(item) for item in value), key=repr)))
    if isinstance(value, tuple | list):
        return tuple(_canonical(item) for item in value)
    raise TypeError(f"an intent holds a {type(value).__name__}, which has no canonical form")


# --------------------------------------------------------------------------------------------------- intent files
CPU_MANAGER_POLICIES = ("none", "static")
TOPOLOGY_MANAGER_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_MANAGER_SCOPES = ("container", "pod")
MEMORY_MANAGER_POLICIES = ("None", "Static")
THP_ENABLED = ("always", "madvise", "never")
THP_DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")
CPUFREQ_GOVERNORS = ("performance", "powersave", "schedutil", "ondemand", "conservative", "userspace")
HOUSEKEEPING = "housekeeping"
