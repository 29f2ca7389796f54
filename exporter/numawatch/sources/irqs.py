"""IRQ affinity: where each interrupt may go and where the kernel actually delivers it.

Files read, per ``proc/irq/<n>/`` (Documentation/core-api/irq/irq-affinity.rst, kernel/irq/proc.c):

- ``smp_affinity_list``: the requested CPUs, a CPU list (``0-3,8``).
- ``effective_affinity_list``: the CPU(s) the interrupt is really routed to (usually one, picked by the vector
  allocator from the requested mask). Present with CONFIG_GENERIC_IRQ_EFFECTIVE_AFF_MASK (x86: always); an empty
  line for chained IRQs such as the cascade. None when the file does not exist.
- the mode of ``smp_affinity``: since Linux 6.12 the kernel creates it read-only (``0444``) when user space cannot
  set the affinity (``irq_can_set_affinity_usr``: managed IRQs, chips without ``irq_set_affinity``). On older
  kernels every IRQ shows ``0644`` and the mode says nothing; see checks/host_irq.py for how managed IRQs are then
  recognised. A tree where *no* IRQ is writable is a copy that lost its modes (``cat`` into files made read-only),
  and its modes are ignored.
- ``proc/irq/default_smp_affinity``: the hex mask new IRQs start with (``irqaffinity=`` sets it).

Which IRQs have a handler and what they are called comes from /proc/interrupts (the interrupts source): an IRQ
directory also exists for descriptors without any action (unused legacy lines), which deliver nothing.

Cost: one directory listing plus two small reads and one stat per IRQ, with raw ``os`` calls (2,000 IRQs on a large
host). IRQs appear and vanish with drivers and hotplug: a directory gone mid-scan is skipped.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from numawatch.cpuset import CPUListError, CPUSet, parse_cpulist, parse_cpumask
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import SourceSpec
from numawatch.model import frozen_map
from numawatch.model_host import IrqAffinity, Irqs
from numawatch.paths import Paths

_READ_SIZE = 1 << 16  # a CPU list of 8,192 CPUs in the worst (every other CPU) shape fits easily


def _read_small(path: str) -> bytes | None:
    """One read of a small procfs file; None when it (or its IRQ) vanished."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return os.read(fd, _READ_SIZE)
    except OSError:
        return None  # EIO/EINVAL from an IRQ torn down between open and read
    finally:
        os.close(fd)


def parse_cpulist_file(data: bytes, path: str, cache: dict[bytes, CPUSet] | None = None) -> CPUSet:
    """A CPU list file's bytes -> CPUs. ``cache`` (one per reading) reuses the result for identical contents: most
    IRQs share a handful of masks ("0-383", one CPU each), and parsing them again is most of this source's cost."""
    if cache is not None:
        found = cache.get(data)
        if found is not None:
            return found
    try:
        cpus = parse_cpulist(data.decode("ascii", errors="replace"))
    except CPUListError as error:
        raise MalformedFile(path, str(error)) from None
    if cache is not None:
        cache[data] = cpus
    return cpus


def read_irq(directory: str, irq: int, cache: dict[bytes, CPUSet] | None = None) -> IrqAffinity | None:
    """One ``proc/irq/<n>`` directory (a string path, as the hot loop builds them), None when it vanished."""
    affinity_path = f"{directory}/smp_affinity_list"
    affinity_data = _read_small(affinity_path)
    if affinity_data is None:
        return None
    effective_path = f"{directory}/effective_affinity_list"
    effective_data = _read_small(effective_path)
    try:
        mode = os.stat(f"{directory}/smp_affinity").st_mode
        writable: bool | None = bool(mode & stat.S_IWUSR)
    except OSError:
        writable = None
    return IrqAffinity(
        irq=irq,
        affinity=parse_cpulist_file(affinity_data, affinity_path, cache),
        effective=None if effective_data is None else parse_cpulist_file(effective_data, effective_path, cache),
        writable=writable,
    )


def read(paths: Paths) -> Irqs:
    irq_root = paths.procfs / "irq"
    try:
        entries = os.listdir(irq_root)
    except (FileNotFoundError, NotADirectoryError):
        raise SourceUnavailable(f"{irq_root} does not exist") from None
    root = str(irq_root)
    irqs: dict[int, IrqAffinity] = {}
    cache: dict[bytes, CPUSet] = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        irq = int(entry)
        found = read_irq(f"{root}/{entry}", irq, cache)
        if found is not None:
            irqs[irq] = found
    if irqs and not any(found.writable for found in irqs.values()):
        # Not one IRQ whose affinity may be set: a real kernel always has some (the legacy and timer lines), so
        # this is a copy of /proc that lost the modes (a capture made with cat); the modes then mean nothing.
        irqs = {irq: replace(found, writable=None) for irq, found in irqs.items()}
    default: CPUSet | None = None
    default_path = f"{root}/default_smp_affinity"
    default_data = _read_small(default_path)
    if default_data is not None:
        try:
            default = parse_cpumask(default_data.decode("ascii", errors="replace"))
        except CPUListError as error:
            raise MalformedFile(default_path, str(error)) from None
    return Irqs(
        irqs=frozen_map(dict(sorted(irqs.items()))),
        default_affinity=default,
        read_only_modes_seen=any(found.writable is False for found in irqs.values()),
    )


SOURCE = SourceSpec(
    name="irqs",
    read=read,
    description="requested and effective affinity of every IRQ (/proc/irq/<n>)",
)

__all__ = ["SOURCE", "parse_cpulist_file", "read", "read_irq"]
