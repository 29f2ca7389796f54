"""The taints and labels a node registers with, where a file numawatch reads declares them (part of kubelet_config).

- **RKE2**: ``node-taint`` and ``node-label`` in ``/etc/rancher/rke2/config.yaml`` and ``config.yaml.d/*.yaml`` (a
  later file's key replaces the list, ``node-taint+`` appends), which RKE2 hands to the kubelet as
  ``--register-with-taints`` and ``--node-labels``::

      node-taint:
        - "nvidia.com/gpu=present:NoSchedule"
      node-label:
        - "fibercli.local/numa-pinned=true"

  RKE2 registers the node with exactly these, so on an RKE2 node their absence is a declaration too: no taint.
- **kubelet** (any flavour): ``registerWithTaints`` in the KubeletConfiguration (``[{key, value, effect}]``) and the
  flags ``--register-with-taints=key=value:Effect,...`` and ``--node-labels=key=value,...`` (kubeadm-flags.env,
  KUBELET_EXTRA_ARGS, RKE2's ``kubelet-arg``); a flag replaces the configuration's field. kubeadm usually sets
  taints through the API (``nodeRegistration.taints``) instead, which no file on the node shows: then the taints are
  unknown (None), not empty.

Both are applied when the node registers: a changed file changes nothing until the Node object is re-created, and
``kubectl taint`` changes the API's view without any file. numawatch compares what the node declares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from numawatch.model import frozen_map
from numawatch.model.kubelet import NodeRegistration
from numawatch.taints import Taint, TaintError, parse_label, parse_labels, parse_taint, parse_taints

RKE2_TAINT = "node-taint"
RKE2_LABEL = "node-label"
TAINT_FLAG = "register-with-taints"
LABEL_FLAG = "node-labels"


def _items(file: str, key: str, value: Any, problems: list[str]) -> list[str] | None:
    """A config list (RKE2 also takes a single string as a one-item list); None when it is neither."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    problems.append(f"{file}: {key}: expected a list of strings")
    return None


def rke2_declarations(
    documents: Iterable[tuple[str, Mapping[str, Any]]], problems: list[str]
) -> tuple[list[tuple[str, str]] | None, list[tuple[str, str]] | None, list[str]]:
    """(taint items, label items) with the file each came from, as RKE2 applies its config files in order; None for
    one that a file spells wrongly. And the files that declared any."""
    found: dict[str, list[tuple[str, str]] | None] = {RKE2_TAINT: [], RKE2_LABEL: []}
    files: list[str] = []
    for file, document in documents:
        for key, value in document.items():
            if not isinstance(key, str) or key.rstrip("+") not in found:
                continue
            base = key.rstrip("+")
            items = _items(file, key, value, problems)
            if items is None:
                found[base] = None
                continue
            current = found[base]
            new = [(file, item) for item in items]
            found[base] = [*(current or []), *new] if key.endswith("+") and current is not None else new
            if file not in files:
                files.append(file)
    return found[RKE2_TAINT], found[RKE2_LABEL], files


def _config_taints(value: Any, files: Iterable[str], problems: list[str]) -> list[Taint] | None:
    """KubeletConfiguration ``registerWithTaints`` (``[{key, value, effect}]``)."""
    where = ", ".join(files) or "the kubelet configuration"
    if not isinstance(value, list):
        problems.append(f"{where}: registerWithTaints: expected a list of {{key, value, effect}}")
        return None
    taints = []
    for index, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            problems.append(f"{where}: registerWithTaints[{index}]: expected {{key, value, effect}}")
            return None
        text = f"{item['key']}={item.get('value') or ''}:{item.get('effect')}"
        try:
            taints.append(parse_taint(text))
        except TaintError as error:
            problems.append(f"{where}: registerWithTaints[{index}]: {error}")
            return None
    return taints


def collect(
    flavor: str,
    config: Mapping[str, Any],
    config_files: Iterable[str],
    flags: Iterable[Any],
    rke2_documents: Iterable[tuple[str, Mapping[str, Any]]] = (),
) -> NodeRegistration:
    """What the node registers with, from the merged KubeletConfiguration, the kubelet's flags (``Flag`` objects of
    kubelet_config) and, on RKE2, its config files. A declaration the kubelet (or RKE2) would refuse leaves that
    half unknown and is named in ``problems``."""
    taint_problems: list[str] = []
    label_problems: list[str] = []
    files: list[str] = []
    taints: list[Taint] | None = None
    labels: dict[str, str] | None = None
    if flavor == "rke2":
        shape_problems: list[str] = []
        taint_items, label_items, declaring = rke2_declarations(rke2_documents, shape_problems)
        for problem in shape_problems:
            (taint_problems if f": {RKE2_TAINT}" in problem else label_problems).append(problem)
        files += declaring
        taints = _parse_items(taint_items, parse_taint, RKE2_TAINT, taint_problems)
        parsed_labels = _parse_items(label_items, parse_label, RKE2_LABEL, label_problems)
        labels = dict(parsed_labels) if parsed_labels is not None else None
    if config.get("registerWithTaints") is not None:
        from_config = _config_taints(config["registerWithTaints"], config_files, taint_problems)
        taints = _merge(taints, from_config, flavor == "rke2")
        files += [f for f in config_files if f not in files]
    for flag in flags:
        if flag.name not in (TAINT_FLAG, LABEL_FLAG):
            continue
        if flag.file not in files:
            files.append(flag.file)
        try:
            if flag.name == TAINT_FLAG:
                # A flag replaces the configuration's field; on RKE2 its node-taint list is passed alongside.
                taints = _merge(taints if flavor == "rke2" else None, parse_taints(flag.value), flavor == "rke2")
            else:
                labels = {**(labels or {}), **parse_labels(flag.value)}
        except TaintError as error:
            problem = f"{flag.file}: {flag.origin} {flag.name}: {error}"
            (taint_problems if flag.name == TAINT_FLAG else label_problems).append(problem)
    return NodeRegistration(
        taints=tuple(sorted(set(taints))) if taints is not None and not taint_problems else None,
        labels=frozen_map(labels) if labels is not None and not label_problems else None,
        files=tuple(files),
        taint_problems=tuple(taint_problems[:8]),
        label_problems=tuple(label_problems[:8]),
    )


def _merge(current: list[Taint] | None, more: list[Taint] | None, keep: bool) -> list[Taint] | None:
    if more is None:
        return None
    return [*(current or []), *more] if keep else list(more)


def _parse_items(items: list[tuple[str, str]] | None, parse, key: str, problems: list[str]) -> list | None:
    if items is None:
        return None
    parsed = []
    for file, item in items:
        try:
            parsed.append(parse(item))
        except TaintError as error:
            problems.append(f"{file}: {key}: {error}")
            return None
    return parsed


__all__ = ["collect", "rke2_declarations"]
