"""Pod shapes: the resources a pod asks for, as ``numawatch check --fit`` and the intent file's ``shapes:`` spell them.

Command-line form (``--fit``)::

    cpu=16,memory=200Gi,nvidia.com/gpu=2,hugepages-1Gi=16Gi
    cpu=8,memory=64Gi,nvidia.com/gpu=1+cpu=2,memory=4Gi        # two containers, joined by "+"

Intent-file form (``shapes:``), a mapping of shape name to one container's resources, or to a list of them::

    shapes:
      vllm-tp2: {cpu: 16, memory: 200Gi, nvidia.com/gpu: 2, hugepages-1Gi: 16Gi}
      sidecar-pair: [{cpu: 8, memory: 64Gi, nvidia.com/gpu: 1}, {cpu: 2, memory: 4Gi}]

Resources are ``cpu`` (a quantity: ``16``, ``16000m``, ``1.5``), ``memory`` and ``hugepages-<size>`` (byte
quantities: ``200Gi``), and device-plugin resources (``<domain>/<name>``, a whole number of devices). Every amount
is both request and limit: a shape is the pod as a Guaranteed pod would ask for it, and a container without ``cpu``
or ``memory`` makes the pod not Guaranteed, as the kubelet would judge it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from numawatch.model import frozen_map
from numawatch.quantity import QuantityError, hugepage_resource_name, hugepage_size_bytes, parse_quantity

__all__ = [
    "CPU",
    "MEMORY",
    "ContainerShape",
    "Shape",
    "ShapeError",
    "parse_shape",
    "shape_argument",
    "shapes_from_intent",
]

CPU = "cpu"
MEMORY = "memory"
# An extended (device-plugin) resource: a domain prefix and a name, as intent.py's gpuResources accepts them.
_DEVICE_RESOURCE = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", re.ASCII)
# Shape names become the ``shape`` label of numawatch_capacity_shape_replicas: keep them short and plain.
_SHAPE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?", re.ASCII)
# "+" joins containers only where a resource name follows: "1e+3" is a quantity's exponent, not a second container.
_CONTAINER_SEPARATOR = re.compile(r"\+(?=[A-Za-z])")
_MAX_CONTAINERS = 16
_EXPECTED_RESOURCE = "cpu, memory, hugepages-<size> or a device resource such as nvidia.com/gpu"


class ShapeError(ValueError):
    """A shape that cannot be read; the message is one line naming the part that is wrong."""


@dataclass(frozen=True)
class ContainerShape:
    """One container's requests (= limits). CPU in thousandths, memory and huge pages in bytes, devices in units."""

    cpu_millis: int = 0
    memory: int = 0
    hugepages: Mapping[str, int] = field(default_factory=frozen_map)  # canonical name ("hugepages-1Gi") -> bytes
    devices: Mapping[str, int] = field(default_factory=frozen_map)  # resource name -> devices

    @property
    def exclusive_cpus(self) -> int:
        """CPUs the static CPU Manager would pin: the whole CPU request, or 0 for a fractional one."""
        return self.cpu_millis // 1000 if self.cpu_millis % 1000 == 0 else 0

    def memory_requests(self) -> dict[str, int]:
        """What the Memory Manager allocates per NUMA node: ``memory`` and each huge page size, in bytes."""
        requests = dict(self.hugepages)
        if self.memory:
            requests[MEMORY] = self.memory
        return requests

    def amounts(self) -> dict[str, int | Fraction]:
        """Every resource with its amount (CPU as a number of CPUs, possibly fractional)."""
        out: dict[str, int | Fraction] = {}
        if self.cpu_millis:
            cpus = Fraction(self.cpu_millis, 1000)
            out[CPU] = int(cpus) if cpus.denominator == 1 else cpus
        if self.memory:
            out[MEMORY] = self.memory
        out.update(self.hugepages)
        out.update(self.devices)
        return out

    @property
    def text(self) -> str:
        parts = []
        if self.cpu_millis:
            millis = self.cpu_millis
            parts.append(f"cpu={millis // 1000}" if millis % 1000 == 0 else f"cpu={millis}m")
        if self.memory:
            parts.append(f"memory={_bytes_text(self.memory)}")
        parts += [f"{name}={_bytes_text(size)}" for name, size in sorted(self.hugepages.items())]
        parts += [f"{name}={count}" for name, count in sorted(self.devices.items())]
        return ",".join(parts)


@dataclass(frozen=True)
class Shape:
    """A named pod shape: its containers' requests, in order (the kubelet admits containers in spec order)."""

    name: str
    containers: tuple[ContainerShape, ...]

    @property
    def guaranteed(self) -> bool:
        """QoS Guaranteed: every container sets CPU and memory (requests = limits, as every shape amount is)."""
        return all(c.cpu_millis > 0 and c.memory > 0 for c in self.containers)

    @property
    def text(self) -> str:
        """The command-line spelling (``cpu=16,memory=200Gi,nvidia.com/gpu=2``), containers joined by ``+``."""
        return "+".join(c.text for c in self.containers)

    def total(self) -> ContainerShape:
        """The pod's requests summed over its containers (what pod-scope admission asks one placement for)."""
        hugepages: dict[str, int] = {}
        devices: dict[str, int] = {}
        for container in self.containers:
            for name, size in container.hugepages.items():
                hugepages[name] = hugepages.get(name, 0) + size
            for name, count in container.devices.items():
                devices[name] = devices.get(name, 0) + count
        return ContainerShape(
            cpu_millis=sum(c.cpu_millis for c in self.containers),
            memory=sum(c.memory for c in self.containers),
            hugepages=frozen_map(hugepages),
            devices=frozen_map(devices),
        )

    def pod_exclusive_cpus(self) -> int:
        """CPUs the CPU Manager pins for the whole pod: the sum over containers with an integer request, and none
        when the pod is not Guaranteed (only Guaranteed pods get exclusive CPUs)."""
        if not self.guaranteed:
            return 0
        return sum(c.exclusive_cpus for c in self.containers)


def _bytes_text(value: int) -> str:
    """A byte count in the largest binary unit that divides it (``214748364800`` -> ``200Gi``)."""
    for power, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        size = 1 << (10 * power)
        if value >= size and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


# --------------------------------------------------------------------------------------------------- parsing
def parse_shape(text: str, name: str = "") -> Shape:
    """Read the command-line form (see the module docstring); raise ShapeError with a one-line reason."""
    if not isinstance(text, str) or not text.strip():
        raise ShapeError("empty shape: expected resource=amount pairs such as cpu=16,memory=200Gi,nvidia.com/gpu=2")
    parts = _CONTAINER_SEPARATOR.split(text.strip())
    if len(parts) > _MAX_CONTAINERS:
        raise ShapeError(f"shape {text!r} has {len(parts)} containers; at most {_MAX_CONTAINERS}")
    containers = []
    for index, part in enumerate(parts):
        where = f"container {index + 1}: " if len(parts) > 1 else ""
        pairs: list[tuple[str, Any]] = []
        for item in part.split(","):
            item = item.strip()
            resource, equals, amount = item.partition("=")
            if not item or not equals or not resource.strip() or not amount.strip():
                raise ShapeError(f"{where}{item!r} in shape {text!r}: expected resource=amount, e.g. cpu=16")
            pairs.append((resource.strip(), amount.strip()))
        containers.append(_container(pairs, where))
    return Shape(name=name or text.strip(), containers=tuple(containers))


def shape_argument(text: str) -> Shape:
    """``parse_shape`` for argparse's ``type=``: the ShapeError message becomes argparse's one-line error."""
    try:
        return parse_shape(text)
    except ShapeError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def shapes_from_intent(value: Any, key: str = "shapes") -> tuple[Shape, ...]:
    """The intent file's ``shapes:`` value (already parsed YAML) as named shapes, in the file's order.

    Raises ShapeError whose message starts with the key path (``shapes.vllm-tp2.cpu: ...``) so intent.py can prefix
    the file name and raise its own IntentError.
    """
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ShapeError(f"{key}: expected a mapping of shape name to resources, found {_found(value)}")
    shapes = []
    for name, spec in value.items():
        path = f"{key}.{name}"
        if not isinstance(name, str) or not _SHAPE_NAME.fullmatch(name):
            raise ShapeError(
                f"{path}: a shape name is 1-64 letters, digits, '.', '_' or '-', starting and ending with a letter "
                "or digit"
            )
        if isinstance(spec, dict):
            specs = [spec]
        elif isinstance(spec, list) and spec and len(spec) <= _MAX_CONTAINERS:
            specs = spec
        else:
            raise ShapeError(
                f"{path}: expected a mapping of resource to amount (or a list of 1-{_MAX_CONTAINERS}, one per "
                f"container), found {_found(spec)}"
            )
        containers = []
        for index, container in enumerate(specs):
            where = f"{path}[{index}]" if isinstance(spec, list) else path
            if not isinstance(container, dict) or not container:
                raise ShapeError(f"{where}: expected a mapping of resource to amount, found {_found(container)}")
            containers.append(_container(list(container.items()), f"{where}."))
        shapes.append(Shape(name=name, containers=tuple(containers)))
    return tuple(shapes)


def _found(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if value is None:
        return "nothing (null)"
    return repr(value)[:60]


def _container(pairs: list[tuple[Any, Any]], where: str) -> ContainerShape:
    """Validate one container's resource=amount pairs. ``where`` prefixes every error (a key path or a position)."""
    cpu_millis = 0
    memory = 0
    hugepages: dict[str, int] = {}
    devices: dict[str, int] = {}
    seen: set[str] = set()
    for resource, amount in pairs:
        if not isinstance(resource, str):
            raise ShapeError(f"{where}{resource!r}: unknown resource; expected {_EXPECTED_RESOURCE}")
        label = f"{where}{resource}"
        if resource == CPU:
            canonical = CPU
            value = _positive(amount, label, "a CPU quantity such as 16 or 16000m")
            millis = value * 1000
            if millis.denominator != 1:
                raise ShapeError(f"{label}: {amount!r} is finer than a thousandth of a CPU")
            cpu_millis = int(millis)
        elif resource == MEMORY:
            canonical = MEMORY
            memory = _bytes(amount, label)
        elif resource.startswith("hugepages-"):
            size = hugepage_size_bytes(resource)
            if size is None or size % 1024:
                raise ShapeError(f"{label}: not a huge page size; expected hugepages-2Mi or hugepages-1Gi")
            # The kubelet names the resource by the canonical size (hugepages-1024Mi is hugepages-1Gi).
            canonical = hugepage_resource_name(size // 1024)
            hugepages[canonical] = _bytes(amount, label)
        elif _DEVICE_RESOURCE.fullmatch(resource):
            canonical = resource
            value = _positive(amount, label, "a whole number of devices")
            if value.denominator != 1:
                raise ShapeError(f"{label}: expected a whole number of devices, found {amount!r}")
            devices[resource] = int(value)
        else:
            raise ShapeError(f"{label}: unknown resource; expected {_EXPECTED_RESOURCE}")
        if canonical in seen:
            raise ShapeError(f"{label}: {canonical} is given twice")
        seen.add(canonical)
    return ContainerShape(cpu_millis, memory, frozen_map(hugepages), frozen_map(devices))


def _positive(amount: Any, label: str, expected: str) -> Fraction:
    if isinstance(amount, bool) or not isinstance(amount, (int, float, str)):
        raise ShapeError(f"{label}: expected {expected}, found {_found(amount)}")
    if isinstance(amount, float):
        amount = repr(amount)  # YAML reads "cpu: 1.5" as a float; its repr is an exact quantity ("1.5", "1e+20")
    try:
        value = parse_quantity(amount)
    except QuantityError:
        raise ShapeError(f"{label}: expected {expected}, found {amount!r}") from None
    if value <= 0:
        raise ShapeError(f"{label}: expected a positive amount, found {amount!r}")
    return value


def _bytes(amount: Any, label: str) -> int:
    value = _positive(amount, label, "a quantity of bytes such as 200Gi")
    # Rounded up, as Quantity.Value() does: "0.5" bytes is one byte to the kubelet.
    return -((-value.numerator) // value.denominator)
