"""Reading an intent file (docs/intent.md) into an ``Intent``: ``load_intent`` validates the file and rejects it with
the file, the key and what was expected, never a traceback.

A file may set the severity of any check or turn it off by its id: the reader knows every check id from the
registry (numawatch.checks), which itself reads what is intended from numawatch.intent.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from numawatch.boundedyaml import BoundedLoader
from numawatch.checks import SEVERITIES, all_checks
from numawatch.cpuset import CPUListError, CPUSet, parse_cpulist
from numawatch.intent import (
    CPU_MANAGER_POLICIES,
    CPUFREQ_GOVERNORS,
    HOUSEKEEPING,
    MEMORY_MANAGER_POLICIES,
    PCI_PATH_LEVELS,
    THP_DEFRAG,
    THP_ENABLED,
    TOPOLOGY_MANAGER_POLICIES,
    TOPOLOGY_MANAGER_SCOPES,
    GpuIntent,
    Intent,
    IntentError,
    KernelIntent,
    NodeIntent,
    PodSelector,
)
from numawatch.kubelet_version import parse_version
from numawatch.model import frozen_map
from numawatch.quantity import QuantityError, quantity_bytes
from numawatch.shapes import Shape, ShapeError, shapes_from_intent
from numawatch.taints import Taint, TaintError, parse_label, parse_taint

# An extended resource name: a domain prefix and a name (nvidia.com/gpu, amd.com/gpu, nvidia.com/mig-1g.10gb), or
# in gpuResources a prefix of one ending in "*" (nvidia.com/mig-*).
_RESOURCE_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", re.ASCII)
_RESOURCE_PREFIX = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?/([A-Za-z0-9][A-Za-z0-9._-]*)?\*", re.ASCII)
# A namespace is a DNS label (RFC 1123).
_NAMESPACE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)
_NAMESPACE_PREFIX = re.compile(r"[a-z0-9][a-z0-9-]{0,61}", re.ASCII)  # the start of a namespace name
# Intent files are small; a larger one is a mistake (a log, a binary), not an intent.
_MAX_INTENT_BYTES = 1 << 20


class _StrictLoader(BoundedLoader):
    """safe_load that refuses duplicate keys (the second one would silently win and the first do nothing) and
    nesting deeper than ``boundedyaml.MAX_DEPTH``."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # "<<" merges may be overridden on purpose
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, (str, int, float, bool)) or key is None:
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_intent(path: str | os.PathLike[str]) -> Intent:
    """Read and validate an intent YAML file (docs/intent.md); raise a one-line IntentError on any problem."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_INTENT_BYTES + 1)
    except OSError as error:
        raise IntentError(f"{path}: cannot read the intent file: {error.strerror or error}") from None
    if len(data) > _MAX_INTENT_BYTES:
        raise IntentError(f"{path}: larger than {_MAX_INTENT_BYTES} bytes, not an intent file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise IntentError(f"{path}: not UTF-8 text (byte {error.start})") from None
    return parse_intent(text, source=str(Path(path)))


def parse_intent(text: str, source: str = "<intent>") -> Intent:
    """Validate intent YAML text; ``source`` names it in errors and becomes ``Intent.source``."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise IntentError(_one_line(f"{source}: not valid YAML{where}: {problem}")) from None
    except ValueError as error:
        # The YAML constructors raise it, not YAMLError: a date no calendar has (2024-13-45), an integer longer
        # than int() converts. (Nesting is bounded by the loader, far below the recursion limit.)
        raise IntentError(_one_line(f"{source}: not valid YAML: {type(error).__name__}: {error}"[:300])) from None
    return _IntentReader(source).intent(data)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _found(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


class _IntentReader:
    """Walks the parsed YAML, checking each key against what it may hold; every error names the key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, expected: str, value: Any) -> IntentError:
        return IntentError(
            _one_line(f"{self.source}: {key or '(top level)'}: expected {expected}, found {_found(value)}")
        )

    def section(self, value: Any, key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        """A mapping whose keys must all be in ``allowed`` (typos must not silently do nothing)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, "a mapping", value)
        for name in value:
            if name not in allowed:
                raise self.unknown(key, name, allowed)
        return value

    def unknown(self, key: str, name: Any, allowed: tuple[str, ...] | list[str]) -> IntentError:
        path = f"{key}.{name}" if key else str(name)
        close = difflib.get_close_matches(str(name), [str(a) for a in allowed], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return IntentError(
            _one_line(f"{self.source}: {path}: unknown key{hint}; expected one of {', '.join(map(str, allowed))}")
        )

    def choice(self, value: Any, key: str, choices: tuple[str, ...]) -> str:
        if not isinstance(value, str) or value not in choices:
            raise self.fail(key, f"one of {', '.join(choices)}", value)
        return value

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, "true or false", value)
        return value

    def integer(self, value: Any, key: str, lo: int = 0, hi: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
            bounds = f"from {lo} to {hi}" if hi is not None else f"{lo} or more"
            raise self.fail(key, f"an integer {bounds}", value)
        return value

    def number(self, value: Any, key: str, lo: float = 0.0, hi: float | None = None) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or value != value  # NaN
            or value < lo
            or (hi is not None and value > hi)
        ):
            bounds = f"from {lo:g} to {hi:g}" if hi is not None else f"{lo:g} or more"
            raise self.fail(key, f"a number {bounds}", value)
        return float(value)

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, "a non-empty string", value)
        return value

    def string_list(self, value: Any, key: str, item: Callable[[Any, str], str]) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(key, "a list", value)
        return tuple(item(element, f"{key}[{index}]") for index, element in enumerate(value))

    def quantity(self, value: Any, key: str) -> int:
        expected = "a quantity of bytes such as 64Mi or 67108864"
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise self.fail(key, expected, value)
        try:
            amount = quantity_bytes(value)
        except QuantityError:
            raise self.fail(key, expected, value) from None
        if amount < 0:
            raise self.fail(key, expected, value)
        return amount

    def hugepage_size(self, value: Any, key: str) -> int:
        """A huge page size as the kubelet (2Mi, 1Gi) or sysfs (2048kB) spells it, in kB."""
        expected = "a huge page size such as 2Mi, 1Gi or 2048kB"
        if not isinstance(value, str):
            raise self.fail(key, expected, value)
        if value.endswith("kB") and value[:-2].isascii() and value[:-2].isdigit() and len(value) <= 20:
            size_kb = int(value[:-2])
        else:
            try:
                size = quantity_bytes(value)
            except QuantityError:
                raise self.fail(key, expected, value) from None
            if size % 1024:
                raise self.fail(key, expected, value)
            size_kb = size // 1024
        if size_kb <= 0:
            raise self.fail(key, expected, value)
        return size_kb

    def hugepages(self, value: Any, key: str) -> dict[int, int]:
        if not isinstance(value, dict):
            raise self.fail(key, "a mapping of huge page size to page count", value)
        pages: dict[int, int] = {}
        for size, count in value.items():
            size_kb = self.hugepage_size(size, f"{key}.{size}")
            if size_kb in pages:
                raise self.fail(f"{key}.{size}", "each huge page size once", size)
            pages[size_kb] = self.integer(count, f"{key}.{size}")
        return pages

    # ----------------------------------------------------------------------------------------------- sections
    def intent(self, data: Any) -> Intent:
        top = self.section(data, "", ("kubelet", "pinning", "thresholds", "checks", "kernel", "shapes", "node", "gpus"))
        values: dict[str, Any] = {"source": self.source}
        values.update(self.kubelet(top.get("kubelet")))
        values.update(self.pinning(top.get("pinning")))
        values.update(self.thresholds(top.get("thresholds")))
        values.update(self.checks(top.get("checks")))
        values["kernel"] = self.kernel(top.get("kernel"))
        values["shapes"] = self.shapes(top.get("shapes"))
        values["node"] = self.node(top.get("node"))
        values["gpus"] = self.gpus(top.get("gpus"))
        return Intent(**values)

    def node(self, value: Any) -> NodeIntent:
        key = "node"
        section = self.section(value, key, ("taints", "labels", "systemNamespaces", "agentNamespaces"))
        out: dict[str, Any] = {}
        if "taints" in section:
            out["taints"] = tuple(
                self.taint(item, f"{key}.taints[{index}]")
                for index, item in enumerate(self.list_of(section["taints"], f"{key}.taints"))
            )
        if "labels" in section:
            labels = section["labels"]
            if not isinstance(labels, dict):
                raise self.fail(f"{key}.labels", "a mapping of label key to value", labels)
            parsed: dict[str, str] = {}
            for name, label_value in labels.items():
                path = f"{key}.labels.{name}"
                if isinstance(label_value, bool):
                    label_value = "true" if label_value else "false"  # YAML's true is the label value "true"
                if not isinstance(name, str) or not isinstance(label_value, (str, int)):
                    raise self.fail(path, "a label key and a string value", label_value)
                try:
                    label_key, text = parse_label(f"{name}={label_value}")
                except TaintError as error:
                    raise self.fail(path, f"a Kubernetes label ({error})", label_value) from None
                parsed[label_key] = text
            out["labels"] = frozen_map(parsed)
        if "systemNamespaces" in section:
            out["system_namespaces"] = self.string_list(
                section["systemNamespaces"], f"{key}.systemNamespaces", self.namespace
            )
        if "agentNamespaces" in section:
            out["agent_namespaces"] = self.string_list(
                section["agentNamespaces"], f"{key}.agentNamespaces", self.namespace_pattern
            )
        return NodeIntent(**out)

    def list_of(self, value: Any, key: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(key, "a list", value)
        return value

    def taint(self, value: Any, key: str) -> Taint:
        expected = "a taint such as nvidia.com/gpu=present:NoSchedule"
        if not isinstance(value, str):
            raise self.fail(key, expected, value)
        try:
            return parse_taint(value)
        except TaintError as error:
            raise self.fail(key, f"{expected} ({error})", value) from None

    def namespace(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not _NAMESPACE.fullmatch(value):
            raise self.fail(key, "a namespace name (lower-case letters, digits and '-', at most 63)", value)
        return value

    def namespace_pattern(self, value: Any, key: str) -> str:
        """A namespace name, or ``prefix*``: the start of one (``cattle-*``)."""
        if isinstance(value, str) and value.endswith("*") and _NAMESPACE_PREFIX.fullmatch(value[:-1]):
            return value
        if not isinstance(value, str) or not _NAMESPACE.fullmatch(value):
            raise self.fail(key, "a namespace name, or the start of one followed by '*' (such as cattle-*)", value)
        return value

    def gpus(self, value: Any) -> GpuIntent:
        key = "gpus"
        section = self.section(value, key, ("maxNicPathLevel",))
        out: dict[str, Any] = {}
        if "maxNicPathLevel" in section:
            out["max_nic_path_level"] = self.choice(
                section["maxNicPathLevel"], f"{key}.maxNicPathLevel", PCI_PATH_LEVELS
            )
        return GpuIntent(**out)

    def shapes(self, value: Any) -> tuple[Shape, ...]:
        try:
            return shapes_from_intent(value, "shapes")
        except ShapeError as error:
            raise IntentError(_one_line(f"{self.source}: {error}")) from None

    def kubelet(self, value: Any) -> dict[str, Any]:
        key = "kubelet"
        section = self.section(
            value,
            key,
            (
                "cpuManagerPolicy",
                "topologyManagerPolicy",
                "topologyManagerScope",
                "memoryManagerPolicy",
                "reservedCPUs",
                "version",
            ),
        )
        out: dict[str, Any] = {}
        for name, attr, choices in (
            ("cpuManagerPolicy", "cpu_manager_policy", CPU_MANAGER_POLICIES),
            ("topologyManagerPolicy", "topology_manager_policy", TOPOLOGY_MANAGER_POLICIES),
            ("topologyManagerScope", "topology_manager_scope", TOPOLOGY_MANAGER_SCOPES),
            ("memoryManagerPolicy", "memory_manager_policy", MEMORY_MANAGER_POLICIES),
        ):
            if name in section:
                out[attr] = self.choice(section[name], f"{key}.{name}", choices)
        if "reservedCPUs" in section:
            out["reserved_cpus"] = self.reserved_cpus(section["reservedCPUs"], f"{key}.reservedCPUs")
        if "version" in section:
            value = section["version"]
            if not isinstance(value, str) or parse_version(value, "") is None:
                raise self.fail(f"{key}.version", 'a Kubernetes version such as "1.35" or "v1.36.2" (quoted)', value)
            out["kubelet_version"] = value
        return out

    def reserved_cpus(self, value: Any, key: str) -> CPUSet | None:
        expected = f'"{HOUSEKEEPING}" or a CPU list such as "0-1,32-33"'
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # reservedCPUs: 0 is a one-CPU list to YAML's eyes
        if not isinstance(value, str):
            raise self.fail(key, expected, value)
        if value == HOUSEKEEPING:
            return None
        try:
            cpus = parse_cpulist(value)
        except CPUListError:
            raise self.fail(key, expected, value) from None
        if not cpus:
            raise self.fail(key, expected, value)
        return cpus

    def pinning(self, value: Any) -> dict[str, Any]:
        key = "pinning"
        section = self.section(value, key, ("gpuContainers", "gpuResources", "pods"))
        out: dict[str, Any] = {}
        if "gpuContainers" in section:
            out["pin_gpu_containers"] = self.boolean(section["gpuContainers"], f"{key}.gpuContainers")
        if "gpuResources" in section:
            out["gpu_resources"] = self.string_list(
                section["gpuResources"], f"{key}.gpuResources", self.resource_or_prefix
            )
        if "pods" in section:
            pods = section["pods"]
            if not isinstance(pods, list):
                raise self.fail(f"{key}.pods", "a list of {namespace, pod, container} patterns", pods)
            out["pinned"] = tuple(self.selector(item, f"{key}.pods[{index}]") for index, item in enumerate(pods))
        return out

    def resource(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not _RESOURCE_NAME.fullmatch(value):
            raise self.fail(key, "an extended resource name such as nvidia.com/gpu", value)
        return value

    def resource_or_prefix(self, value: Any, key: str) -> str:
        if isinstance(value, str) and _RESOURCE_PREFIX.fullmatch(value):
            return value
        if not isinstance(value, str) or not _RESOURCE_NAME.fullmatch(value):
            expected = "an extended resource name such as nvidia.com/gpu, or a prefix such as nvidia.com/mig-*"
            raise self.fail(key, expected, value)
        return value

    def selector(self, value: Any, key: str) -> PodSelector:
        fields = ("namespace", "pod", "container")
        if not isinstance(value, dict) or not value:
            raise self.fail(key, "a mapping with namespace, pod and/or container patterns", value)
        section = self.section(value, key, fields)
        return PodSelector(**{name: self.string(section[name], f"{key}.{name}") for name in fields if name in section})

    def thresholds(self, value: Any) -> dict[str, Any]:
        key = "thresholds"
        section = self.section(value, key, ("remoteMemoryRatio", "remoteMemoryMinBytes"))
        out: dict[str, Any] = {}
        if "remoteMemoryRatio" in section:
            out["remote_memory_ratio"] = self.number(section["remoteMemoryRatio"], f"{key}.remoteMemoryRatio", 0.0, 1.0)
        if "remoteMemoryMinBytes" in section:
            out["remote_memory_min_bytes"] = self.quantity(
                section["remoteMemoryMinBytes"], f"{key}.remoteMemoryMinBytes"
            )
        return out

    def checks(self, value: Any) -> dict[str, Any]:
        key = "checks"
        known = tuple(check.id for check in all_checks())
        section = self.section(value, key, known)
        severities: dict[str, str] = {}
        disabled: set[str] = set()
        for check_id, settings in section.items():
            path = f"{key}.{check_id}"
            options = self.section(settings, path, ("enabled", "severity"))
            if "enabled" in options and not self.boolean(options["enabled"], f"{path}.enabled"):
                disabled.add(check_id)
            if "severity" in options:
                severities[check_id] = self.choice(options["severity"], f"{path}.severity", SEVERITIES)
        return {"severities": frozen_map(severities), "disabled": frozenset(disabled)}

    def kernel(self, value: Any) -> KernelIntent:
        key = "kernel"
        section = self.section(
            value,
            key,
            (
                "numaBalancing",
                "thpEnabled",
                "thpDefrag",
                "swappiness",
                "cpufreqGovernor",
                "hugepages",
                "hugepagesPerNode",
                "irqExempt",
                "irqActivityThresholdPerSecond",
                "tickThresholdPerSecond",
                "checkIrqbalance",
                "maxIdleExitLatencyUs",
            ),
        )
        out: dict[str, Any] = {}
        if "numaBalancing" in section:
            # 0 off, 1 NUMA balancing, 2 memory tiering, 3 both (Documentation/admin-guide/sysctl/kernel.rst)
            out["numa_balancing"] = self.integer(section["numaBalancing"], f"{key}.numaBalancing", 0, 3)
        for name, attr, choices in (
            ("thpEnabled", "thp_enabled", THP_ENABLED),
            ("thpDefrag", "thp_defrag", THP_DEFRAG),
        ):
            if name in section:
                path = f"{key}.{name}"
                values = self.string_list(section[name], path, functools.partial(self.choice, choices=choices))
                if not values:
                    raise self.fail(path, f"a non-empty list of {', '.join(choices)}", section[name])
                out[attr] = frozenset(values)
        if "swappiness" in section:
            out["swappiness"] = self.integer(section["swappiness"], f"{key}.swappiness", 0, 200)
        if "cpufreqGovernor" in section:
            out["cpufreq_governor"] = self.choice(
                section["cpufreqGovernor"], f"{key}.cpufreqGovernor", CPUFREQ_GOVERNORS
            )
        if "hugepages" in section:
            out["hugepages"] = frozen_map(self.hugepages(section["hugepages"], f"{key}.hugepages"))
        if "hugepagesPerNode" in section:
            out["hugepages_per_node"] = frozen_map(self.hugepages_per_node(section["hugepagesPerNode"]))
        if "irqExempt" in section:
            out["irq_exempt"] = self.string_list(section["irqExempt"], f"{key}.irqExempt", self.string)
        if "irqActivityThresholdPerSecond" in section:
            out["irq_activity_threshold_per_second"] = self.number(
                section["irqActivityThresholdPerSecond"], f"{key}.irqActivityThresholdPerSecond"
            )
        if "tickThresholdPerSecond" in section:
            out["tick_threshold_per_second"] = self.number(
                section["tickThresholdPerSecond"], f"{key}.tickThresholdPerSecond"
            )
        if "checkIrqbalance" in section:
            out["check_irqbalance"] = self.boolean(section["checkIrqbalance"], f"{key}.checkIrqbalance")
        if "maxIdleExitLatencyUs" in section:
            out["max_idle_exit_latency_us"] = self.integer(
                section["maxIdleExitLatencyUs"], f"{key}.maxIdleExitLatencyUs", 0, 1_000_000
            )
        return KernelIntent(**out)

    def hugepages_per_node(self, value: Any) -> dict[int, Mapping[int, int]]:
        key = "kernel.hugepagesPerNode"
        if not isinstance(value, dict):
            raise self.fail(key, "a mapping of NUMA node to {size: count}", value)
        nodes: dict[int, Mapping[int, int]] = {}
        for node, sizes in value.items():
            path = f"{key}.{node}"
            if isinstance(node, str) and node.isascii() and node.isdigit() and len(node) <= 9:
                node = int(node)
            if isinstance(node, bool) or not isinstance(node, int) or node < 0:
                raise self.fail(path, "a NUMA node number (0, 1, ...) as the key", node)
            if node in nodes:
                raise self.fail(path, "each NUMA node once", node)
            nodes[node] = frozen_map(self.hugepages(sizes, path))
        return nodes
