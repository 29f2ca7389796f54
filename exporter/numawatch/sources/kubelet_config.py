"""The kubelet's effective CPU / Memory / Topology Manager configuration, from its files and flags.

The kubelet merges three layers, later ones winning (kubelet.md §7): the ``--config`` KubeletConfiguration file,
then the ``--config-dir`` drop-ins (``*.conf`` in lexical order, merged like a JSON merge patch: maps merge, lists
are replaced), then command-line flags. Where the flags live depends on the flavour:

- **kubeadm**: ``<kubelet root>/config.yaml`` (KubeletConfiguration) and flags in ``<kubelet root>/kubeadm-flags.env``
  (``KUBELET_KUBEADM_ARGS="--flag=value ..."``), then ``/etc/default/kubelet`` or ``/etc/sysconfig/kubelet``
  (``KUBELET_EXTRA_ARGS=...``), in that order on the kubelet's command line.
- **RKE2**: ``/etc/rancher/rke2/config.yaml`` then ``config.yaml.d/*.yaml`` in order (last value wins, ``key+:``
  appends); kubelet flags are the ``kubelet-arg`` list of ``flag=value`` strings without dashes, e.g.::

      kubelet-arg:
        - cpu-manager-policy=static
        - reserved-memory=0:memory=2Gi;1:memory=2Gi

  plus RKE2's own drop-in dir ``/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/`` (``00-rke2-defaults.conf``), and
  whatever ``config=`` / ``config-dir=`` name.

Defaults are the kubelet's (policy ``none``, scope ``container``, memory policy ``None``). Values are checked as the
kubelet checks them: a malformed file stops this source with one line naming the file and key, since the kubelet
would not start with it either.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from numawatch.confined import HostFs
from numawatch.cpuset import CPUListError, parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.hosttext import excerpt, one_of, printable, shown
from numawatch.model import frozen_map
from numawatch.model.kubelet import KubeletConfig
from numawatch.paths import Paths, joined
from numawatch.quantity import QuantityError, quantity_bytes
from numawatch.source import SourceSpec
from numawatch.sources import node_registration
from numawatch.sources._files import parse_env_file
from numawatch.sources.kubelet_state import host_name

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONFIG_LIMIT = 4 * 1024 * 1024  # configuration files are a few kB

RKE2_DROPIN = "agent/etc/kubelet.conf.d"  # under the RKE2 data dir
KUBEADM_FLAGS = (("kubeadm-flags.env", "KUBELET_KUBEADM_ARGS"),)  # under the kubelet root
EXTRA_FLAGS = (("default/kubelet", "KUBELET_EXTRA_ARGS"), ("sysconfig/kubelet", "KUBELET_EXTRA_ARGS"))  # under /etc

# KubeletConfiguration fields numawatch reads, by kind of value.
_STRING_FIELDS = (
    "cpuManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "memoryManagerPolicy",
    "reservedSystemCPUs",
    "cgroupDriver",
    "cgroupRoot",
)
_MAP_FIELDS = ("cpuManagerPolicyOptions", "topologyManagerPolicyOptions", "systemReserved", "kubeReserved")
# The values the kubelet accepts for the policy fields (it refuses to start with any other; kubelet.md §7): they
# become label values and message text, so nothing else is taken.
ALLOWED_VALUES = {
    "cpuManagerPolicy": frozenset({"none", "static"}),
    "topologyManagerPolicy": frozenset({"none", "best-effort", "restricted", "single-numa-node"}),
    "topologyManagerScope": frozenset({"container", "pod"}),
    "memoryManagerPolicy": frozenset({"None", "Static"}),
    "cgroupDriver": frozenset({"systemd", "cgroupfs"}),
}
_FREE_TEXT_LIMIT = 253  # a cgroupRoot, a policy option or a reserved quantity: short printable text

# Kubelet flag -> KubeletConfiguration field. Map flags (k=v,k=v) and reserved-memory accumulate when repeated.
FLAG_FIELDS = {
    "cpu-manager-policy": "cpuManagerPolicy",
    "cpu-manager-policy-options": "cpuManagerPolicyOptions",
    "topology-manager-policy": "topologyManagerPolicy",
    "topology-manager-scope": "topologyManagerScope",
    "topology-manager-policy-options": "topologyManagerPolicyOptions",
    "memory-manager-policy": "memoryManagerPolicy",
    "reserved-cpus": "reservedSystemCPUs",
    "reserved-memory": "reservedMemory",
    "system-reserved": "systemReserved",
    "kube-reserved": "kubeReserved",
    "cgroup-driver": "cgroupDriver",
    "cgroup-root": "cgroupRoot",
}
_FLAG_ONLY = ("root-dir", "config", "config-dir")


@dataclass(frozen=True)
class Flag:
    """One kubelet flag as found: name without dashes, value, and where it came from (for error messages)."""

    name: str
    value: str
    file: str  # host path of the file that set it
    origin: str  # how the file spells it: "kubelet-arg" or "KUBELET_EXTRA_ARGS"


# --------------------------------------------------------------------------------------------------- YAML files
def load_yaml(text: str, file: str) -> dict[str, Any]:
    """A YAML document that must be a mapping (an empty file is an empty mapping)."""
    try:
        document = yaml.load(text, Loader=_LOADER)  # CSafeLoader/SafeLoader: plain data only
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise MalformedFile(file, f"invalid YAML: {problem}{where}") from None
    except (ValueError, RecursionError) as error:
        # Raised by the YAML constructors rather than as YAMLError: a date no calendar has (2024-13-45), an integer
        # longer than int() converts (4,300 digits), nesting deeper than the recursion limit (pure-Python loader).
        raise MalformedFile(file, f"invalid YAML: {type(error).__name__}: {str(error)[:120]}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise MalformedFile(file, f"expected a mapping at the top level, got {_yaml_kind(document)}")
    return document


def _yaml_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    return "a string" if isinstance(value, str) else type(value).__name__


def parse_kubelet_configuration(text: str, file: str) -> dict[str, Any]:
    """A KubeletConfiguration YAML file, with the fields numawatch reads checked as the kubelet checks them.

    Field names are case-sensitive (the kubelet's decoder is); unknown fields are kept and ignored.
    """
    document = load_yaml(text, file)
    for key in _STRING_FIELDS:
        value = document.get(key)
        if value is not None and not isinstance(value, str):
            raise MalformedFile(file, f"{key}: expected a string, got {_yaml_kind(value)} {excerpt(value)}")
        if value:
            _check_value(key, value, file, key)
    if document.get("reservedSystemCPUs"):
        _check_cpulist(document["reservedSystemCPUs"], file, "reservedSystemCPUs")
    for key in _MAP_FIELDS:
        value = document.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise MalformedFile(file, f"{key}: expected a mapping, got {_yaml_kind(value)}")
        for name, item in value.items():
            if not isinstance(item, str):
                raise MalformedFile(
                    file, f"{key}.{name}: expected a string, got {_yaml_kind(item)} {excerpt(item)}"
                )
            _check_value(key, str(name), file, f"{key} key")
            _check_value(key, item, file, f"{key}.{name}")
    if document.get("reservedMemory") is not None:
        _reserved_memory_from_config(document["reservedMemory"], file)
    return document


def _check_value(field_name: str, value: str, file: str, where: str) -> None:
    """A policy must be one the kubelet accepts; other text must be short and printable (MalformedFile if not)."""
    try:
        allowed = ALLOWED_VALUES.get(field_name)
        if allowed is not None:
            one_of(value, allowed, "value")
        else:
            printable(value, "value", _FREE_TEXT_LIMIT)
    except ValueError as error:
        raise MalformedFile(file, f"{where}: {error}") from None


def _check_cpulist(text: str, file: str, key: str) -> None:
    try:
        parse_cpulist(text)
    except CPUListError as error:
        raise MalformedFile(file, f"{key}: {error}") from None


def _reserved_memory_from_config(value: Any, file: str) -> dict[int, dict[str, int]]:
    """``reservedMemory: [{numaNode: 0, limits: {memory: 1Gi, hugepages-1Gi: 2Gi}}]`` -> node -> resource -> bytes."""
    if not isinstance(value, list):
        raise MalformedFile(file, f"reservedMemory: expected a list, got {_yaml_kind(value)}")
    reserved: dict[int, dict[str, int]] = {}
    for index, item in enumerate(value):
        where = f"reservedMemory[{index}]"
        if not isinstance(item, dict):
            raise MalformedFile(file, f"{where}: expected a mapping, got {_yaml_kind(item)}")
        node = item.get("numaNode")
        if isinstance(node, bool) or not isinstance(node, int) or node < 0:
            raise MalformedFile(file, f"{where}.numaNode: expected a NUMA node number, got {excerpt(node)}")
        limits = item.get("limits")
        if not isinstance(limits, dict):
            raise MalformedFile(file, f"{where}.limits: expected a mapping, got {_yaml_kind(limits)}")
        for resource, quantity in limits.items():
            if isinstance(quantity, float):
                quantity = repr(quantity)  # YAML 1.5 -> "1.5", as the kubelet reads a JSON number
            reserved.setdefault(node, {})[str(resource)] = _memory_quantity(file, f"{where}.limits", resource, quantity)
    return reserved


def _memory_quantity(file: str, where: str, resource: Any, quantity: Any) -> int:
    if not isinstance(resource, str) or (resource != "memory" and not resource.startswith("hugepages-")):
        raise MalformedFile(
            file, f"{where}: unknown memory type {excerpt(resource)} (memory or hugepages-<size>)"
        )
    try:
        size = quantity_bytes(quantity)
    except QuantityError as error:
        raise MalformedFile(file, f"{where}.{resource}: {error}") from None
    if size < 0:
        raise MalformedFile(file, f"{where}.{resource}: negative quantity {excerpt(quantity)}")
    return size


def merge_patch(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A drop-in applied over the configuration: JSON merge patch (maps merge, lists replace, null deletes)."""
    merged = dict(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = value
    return merged


# --------------------------------------------------------------------------------------------------- flags
def parse_env_args(text: str, variable: str, file: str) -> list[str]:
    """The words of ``variable`` in a systemd EnvironmentFile (``KUBELET_EXTRA_ARGS="--a=b --c d"``).

    Later assignments win, as in the file. ``export`` and comments are tolerated.
    """
    value = parse_env_file(text).get(variable)
    if value is None:
        return []
    try:
        words = shlex.split(value)
    except ValueError as error:
        raise MalformedFile(file, f"{variable}: {error}") from None
    return words


def parse_flag_words(words: Iterable[str], file: str, origin: str) -> list[Flag]:
    """Kubelet command-line words -> flags: ``--name=value``, or ``--name value`` (the kubelet has no arguments,
    so a word after a flag that does not start with a dash is that flag's value); ``--name`` alone is ``true``.
    """
    flags: list[Flag] = []
    pending: str | None = None
    for word in words:
        if pending is not None and not word.startswith("-"):
            flags.append(Flag(pending, word, file, origin))
            pending = None
            continue
        if pending is not None:
            flags.append(Flag(pending, "true", file, origin))
            pending = None
        if not word.startswith("-"):
            continue  # a stray word: the kubelet would refuse it, nothing of ours to learn from it
        name, sep, value = word.lstrip("-").partition("=")
        if sep:
            flags.append(Flag(name, value, file, origin))
        else:
            pending = name
    if pending is not None:
        flags.append(Flag(pending, "true", file, origin))
    return flags


def parse_kubelet_arg(item: str, file: str) -> tuple[Flag, str | None]:
    """One RKE2 ``kubelet-arg`` item -> (flag, warning).

    RKE2 (k3s ``util.GetArgs``) strips one leading ``--`` and a trailing ``+``/``-`` from the name (append /
    prepend to its own default), and passes ``--name=value`` to the kubelet as one argv word, without a shell:
    quotes around the value reach the kubelet verbatim (rancher/rke2#2503), which then rejects the value. We read
    the value without them and return a warning saying so.
    """
    body = item[2:] if item.startswith("--") else item
    name, sep, value = body.partition("=")
    name = name.rstrip("+-")
    if not sep:
        value = "true"
    warning = None
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
        warning = (
            f"{file}: kubelet-arg {excerpt(item)} has a quoted value: RKE2 passes the quotes to the kubelet, "
            f"which then rejects the value; write {shown(f'{name}={value}')}"
        )
    return Flag(name, value, file, "kubelet-arg"), warning


def _map_flag(flag: Flag) -> dict[str, str]:
    """``k=v,k=v`` (cliflag MapStringString): pairs split on commas, whitespace trimmed, an empty value is {}."""
    result: dict[str, str] = {}
    for pair in flag.value.split(","):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        if not sep:
            raise MalformedFile(
                flag.file, f"{flag.origin} {flag.name}: malformed pair {excerpt(pair)}, expected key=value"
            )
        result[key.strip()] = value.strip()
    return result


def parse_reserved_memory_flag(flag: Flag) -> dict[int, dict[str, int]]:
    """``--reserved-memory 0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi`` -> node -> resource -> bytes."""
    reserved: dict[int, dict[str, int]] = {}
    where = f"{flag.origin} {flag.name}"
    for part in flag.value.split(";"):
        node_text, sep, limits = part.partition(":")
        if not sep or ":" in limits:
            raise MalformedFile(flag.file, f"{where}: {excerpt(part)} is not <numa node>:<type>=<quantity>[,...]")
        node_text = node_text.strip()
        if not node_text.isascii() or not node_text.isdigit() or len(node_text) > 9:  # int() refuses 4,300 digits
            raise MalformedFile(flag.file, f"{where}: NUMA node {node_text[:40]!r} is not a number")
        for limit in limits.split(","):
            resource, sep, quantity = limit.partition("=")
            if not sep or "=" in quantity:
                raise MalformedFile(flag.file, f"{where}: {excerpt(limit)} is not <type>=<quantity>")
            size = _memory_quantity(flag.file, where, resource.strip(), quantity.strip())
            reserved.setdefault(int(node_text), {})[resource.strip()] = size
    return reserved


def apply_flags(config: dict[str, Any], flags: Iterable[Flag]) -> tuple[dict[str, Any], set[str]]:
    """Flags over the merged configuration, as the kubelet applies them; returns (config, fields set).

    A scalar flag replaces the field (the last one wins). A map flag or ``reserved-memory`` replaces the file's
    value the first time it appears and merges with its own later repetitions (cliflag MapStringString,
    ReservedMemoryVar); ``--reserved-memory ""`` clears it.
    """
    merged = dict(config)
    started: set[str] = set()
    explicit: set[str] = set()
    for flag in flags:
        field_name = FLAG_FIELDS.get(flag.name)
        if field_name is None:
            continue
        explicit.add(field_name)
        if flag.name == "reserved-memory":
            if not flag.value.strip():
                merged[field_name] = []
                started.discard(field_name)  # the next one starts afresh
                continue
            current = _reserved_dict(merged.get(field_name)) if field_name in started else {}
            for node, limits in parse_reserved_memory_flag(flag).items():
                current.setdefault(node, {}).update(limits)
            merged[field_name] = _reserved_list(current)
        elif field_name in _MAP_FIELDS:
            entries = dict(merged.get(field_name) or {}) if field_name in started else {}
            for key, value in _map_flag(flag).items():
                _check_value(field_name, key, flag.file, f"{flag.origin} {flag.name} key")
                _check_value(field_name, value, flag.file, f"{flag.origin} {flag.name} {shown(key)}")
                entries[key] = value
            merged[field_name] = entries
        else:
            if field_name == "reservedSystemCPUs":
                _check_cpulist(flag.value, flag.file, f"{flag.origin} {flag.name}")
            elif flag.value:
                _check_value(field_name, flag.value, flag.file, f"{flag.origin} {flag.name}")
            merged[field_name] = flag.value
        started.add(field_name)
    return merged, explicit


def _reserved_list(reserved: Mapping[int, Mapping[str, int]]) -> list[dict[str, Any]]:
    return [{"numaNode": node, "limits": dict(limits)} for node, limits in sorted(reserved.items())]


def _reserved_dict(value: Any) -> dict[int, dict[str, int]]:
    """reservedMemory as already validated (from a file or a flag) -> node -> resource -> bytes."""
    if not value:
        return {}
    return _reserved_memory_from_config(value, "<merged configuration>")


# --------------------------------------------------------------------------------------------------- RKE2
def rke2_kubelet_args(documents: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[list[tuple[str, str]], str | None]:
    """The ``kubelet-arg`` items of RKE2's config files applied in order, with the file each came from, and the
    ``data-dir`` in effect. A later ``kubelet-arg`` replaces the list, ``kubelet-arg+`` appends to it.
    """
    items: list[tuple[str, str]] = []
    data_dir: str | None = None
    for file, document in documents:
        for key, value in document.items():
            if not isinstance(key, str):
                continue
            base = key.rstrip("+")
            if base == "data-dir":
                if not isinstance(value, str):
                    raise MalformedFile(file, f"{key}: expected a string, got {_yaml_kind(value)}")
                _named_path_text(value, file, key)
                data_dir = value
            if base != "kubelet-arg":
                continue
            if value is None:
                values: list[Any] = []
            elif isinstance(value, list):
                values = value
            else:
                values = [value]  # RKE2 takes a single string as a one-item list
            new = []
            for index, item in enumerate(values):
                if not isinstance(item, str):
                    hint = ""
                    if isinstance(item, dict) and len(item) == 1:
                        name, flag_value = next(iter(item.items()))
                        hint = f" (write it as '{name}={flag_value}')"
                    raise MalformedFile(
                        file, f"{key}[{index}]: expected a 'flag=value' string, got {_yaml_kind(item)}{hint}"
                    )
                new.append((file, item))
            items = [*items, *new] if key.endswith("+") else new
    return items, data_dir


# --------------------------------------------------------------------------------------------------- assembly
@dataclass
class _Inputs:
    """What one flavour found: where the KubeletConfiguration file and drop-ins are, and the flags."""

    flavor: str
    config_file: Path | None  # None: no --config
    config_required: bool  # named by a flag: its absence is an error, as for the kubelet
    dropin_dir: Path | None
    flags: list[Flag]
    flag_files: list[str]  # host paths of files that contributed flags, in order
    warnings: list[str]
    documents: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)  # RKE2's config files, parsed


def _last(flags: Iterable[Flag], name: str) -> Flag | None:
    found = None
    for flag in flags:
        if flag.name == name:
            found = flag
    return found


def _kubeadm_inputs(paths: Paths) -> _Inputs:
    flags: list[Flag] = []
    flag_files: list[str] = []
    sources = [(paths.kubelet / name, variable) for name, variable in KUBEADM_FLAGS]
    sources += [(paths.etc / name, variable) for name, variable in EXTRA_FLAGS]
    for path, variable in sources:
        text = paths.fs.read_optional_text(path, _CONFIG_LIMIT)
        if text is None:
            continue
        file = host_name(paths, path)
        words = parse_env_args(text, variable, file)
        if words:
            flags += parse_flag_words(words, file, variable)
            flag_files.append(file)
    config_flag = _last(flags, "config")
    config_file = _named_path(paths, config_flag) if config_flag else paths.kubelet / "config.yaml"
    dir_flag = _last(flags, "config-dir")
    dropin = _named_path(paths, dir_flag) if dir_flag and dir_flag.value else None
    _named_path(paths, _last(flags, "root-dir"))
    return _Inputs("kubeadm", config_file, config_flag is not None, dropin, flags, flag_files, [])


def _rke2_inputs(paths: Paths) -> _Inputs:
    documents: list[tuple[str, Mapping[str, Any]]] = []
    for path in _rke2_config_files(paths):
        text = paths.fs.read_optional_text(path, _CONFIG_LIMIT)
        if text is not None:
            file = host_name(paths, Path(path))
            documents.append((file, load_yaml(text, file)))
    items, data_dir = rke2_kubelet_args(documents)
    flags: list[Flag] = []
    warnings: list[str] = []
    flag_files: list[str] = []
    for file, item in items:
        flag, warning = parse_kubelet_arg(item, file)
        flags.append(flag)
        if warning:
            warnings.append(warning)
        if file not in flag_files:
            flag_files.append(file)
    config_flag = _last(flags, "config")
    # RKE2 passes --config-dir=<data-dir>/agent/etc/kubelet.conf.d itself; a user's config-dir= replaces it.
    dir_flag = _last(flags, "config-dir")
    if dir_flag is not None:
        dropin = _named_path(paths, dir_flag) if dir_flag.value else None
    else:
        dropin = (paths.host_path(data_dir) if data_dir else paths.rke2_data) / RKE2_DROPIN  # checked when read
    config_file = _named_path(paths, config_flag) if config_flag and config_flag.value else None
    _named_path(paths, _last(flags, "root-dir"))
    return _Inputs("rke2", config_file, config_file is not None, dropin, flags, flag_files, warnings, documents)


def _named_path(paths: Paths, flag: Flag | None) -> Path:
    """Where a path that a file names (``config=``, ``config-dir=``, ``data-dir``, ``root-dir=``) is read: under the
    root, ``..`` stopping there (``Paths.host_path``). The path is repeated in messages, so it must be printable."""
    if flag is None:
        return paths.root
    _named_path_text(flag.value, flag.file, flag.name)
    return paths.host_path(flag.value)


def _named_path_text(value: str, file: str, where: str) -> None:
    try:
        printable(value, "path", _PATH_LIMIT)
    except ValueError as error:
        raise MalformedFile(file, f"{where}: {error}") from None


_PATH_LIMIT = 4096  # PATH_MAX


def _rke2_config_files(paths: Paths) -> list[str]:
    rke2 = os.fspath(paths.rke2)  # strings, not pathlib: the fingerprint lists them at every reading
    dropins = sorted(n for n in paths.fs.list_dir(f"{rke2}/config.yaml.d") if n.endswith((".yaml", ".yml")))
    return [f"{rke2}/config.yaml", *(f"{rke2}/config.yaml.d/{n}" for n in dropins)]


def _dropin_files(fs: HostFs, directory: str | os.PathLike[str] | None) -> list[str]:
    if directory is None:
        return []
    return [joined(directory, name) for name in sorted(fs.list_dir(directory)) if name.endswith(".conf")]


def _assemble(paths: Paths, inputs: _Inputs) -> KubeletConfig:
    files: list[str] = []
    explicit: set[str] = set()
    config: dict[str, Any] = {}
    if inputs.config_file is not None:
        text = paths.fs.read_optional_text(inputs.config_file, _CONFIG_LIMIT)
        file = host_name(paths, inputs.config_file)
        if text is None and inputs.config_required:
            raise SourceUnavailable(f"the kubelet configuration file {file} named by a config flag does not exist")
        if text is not None:
            config = parse_kubelet_configuration(text, file)
            files.append(file)
            explicit |= _fields_of(config)
    for path in _dropin_files(paths.fs, inputs.dropin_dir):
        text = paths.fs.read_optional_text(path, _CONFIG_LIMIT)
        if text is None:
            continue  # removed while we listed the directory
        file = host_name(paths, Path(path))
        patch = parse_kubelet_configuration(text, file)
        config = merge_patch(config, patch)
        files.append(file)
        explicit |= _fields_of(patch)
    config_files = list(files)
    config, flag_fields = apply_flags(config, inputs.flags)
    files += [f for f in inputs.flag_files if f not in files]
    registration = node_registration.collect(inputs.flavor, config, config_files, inputs.flags, inputs.documents)
    root_dir = _last(inputs.flags, "root-dir")
    reserved_cpus = config.get("reservedSystemCPUs") or ""
    return KubeletConfig(
        flavor=inputs.flavor,
        cpu_manager_policy=config.get("cpuManagerPolicy") or "none",
        cpu_manager_policy_options=frozen_map(config.get("cpuManagerPolicyOptions")),
        topology_manager_policy=config.get("topologyManagerPolicy") or "none",
        topology_manager_scope=config.get("topologyManagerScope") or "container",
        topology_manager_policy_options=frozen_map(config.get("topologyManagerPolicyOptions")),
        memory_manager_policy=config.get("memoryManagerPolicy") or "None",
        reserved_cpus=parse_cpulist(reserved_cpus) if reserved_cpus.strip() else None,
        reserved_memory=frozen_map(
            {node: frozen_map(limits) for node, limits in _reserved_dict(config.get("reservedMemory")).items()}
        ),
        system_reserved=frozen_map(config.get("systemReserved")),
        kube_reserved=frozen_map(config.get("kubeReserved")),
        root_dir=root_dir.value if root_dir and root_dir.value else None,
        files=tuple(files),
        explicit=frozenset(explicit | flag_fields),
        warnings=tuple(inputs.warnings),
        registration=registration,
    )


def _fields_of(document: Mapping[str, Any]) -> set[str]:
    return {key for key in document if isinstance(key, str) and key not in ("apiVersion", "kind")}


def read(paths: Paths) -> KubeletConfig:
    if paths.fs.is_dir(paths.rke2):
        return _assemble(paths, _rke2_inputs(paths))
    if paths.fs.is_file(paths.kubelet / "config.yaml") or paths.fs.is_file(paths.kubelet / "kubeadm-flags.env"):
        return _assemble(paths, _kubeadm_inputs(paths))
    raise SourceUnavailable(f"no kubelet configuration found under {paths.rke2} or {paths.kubelet}")


# --------------------------------------------------------------------------------------------------- fingerprint
# config=, config-dir= (flags) and data-dir (RKE2) name more inputs; found with a regex so that the fingerprint
# does not parse YAML every 15 s. A miss only delays a re-read until the next change of a fixed file or SIGHUP.
_REFERENCE = re.compile(r"""(?<![\w-])(config-dir|config|data-dir)(?:=|:[ \t]*)["']?([^\s"',\]]+)""")


def _stat_key(fs: HostFs, path: str) -> Hashable:
    try:
        st = fs.stat_optional(path)
    except OSError:
        st = None
    if st is None:
        return (path, None)
    return (path, st.st_mtime_ns, st.st_size, st.st_ino)


def fingerprint(paths: Paths) -> Hashable:
    """The text of every flag file (kubeadm-flags.env, /etc's, RKE2's config.yaml and its drop-ins: read anyway for
    the files they name), and (path, mtime_ns, size, inode) of config.yaml, of the files the flags name and of the
    drop-in directories and their files."""
    # Strings, not pathlib: this runs at every reading. A path a file names may be the root itself ("/"): joined.
    kubelet, etc = os.fspath(paths.kubelet), os.fspath(paths.etc)
    flag_files = [f"{kubelet}/{name}" for name, _ in KUBEADM_FLAGS]
    flag_files += [f"{etc}/{name}" for name, _ in EXTRA_FLAGS]
    flag_files += _rke2_config_files(paths)
    files = [f"{kubelet}/config.yaml"]
    directories = [f"{os.fspath(paths.rke2_data)}/{RKE2_DROPIN}"]
    keys: list[Hashable] = []
    for path in flag_files:
        text = paths.fs.read_optional_text(path, _CONFIG_LIMIT)
        keys.append((path, text))
        for kind, value in _REFERENCE.findall(text or ""):
            target = os.fspath(paths.host_path(value))
            if kind == "config":
                files.append(target)
            elif kind == "config-dir":
                directories.append(target)
            else:
                directories.append(joined(target, RKE2_DROPIN))
    keys += [_stat_key(paths.fs, path) for path in files]
    for directory in directories:
        keys.append(_stat_key(paths.fs, directory))
        keys += [_stat_key(paths.fs, path) for path in _dropin_files(paths.fs, directory)]
    return tuple(keys)


SOURCE = SourceSpec(
    name="kubelet_config",
    read=read,
    fingerprint=fingerprint,
    description="kubelet configuration: KubeletConfiguration files, drop-ins, kubeadm flags, RKE2 kubelet-arg",
)
