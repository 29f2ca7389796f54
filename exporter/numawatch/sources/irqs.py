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
host). ``serve`` keeps an ``IrqsReader`` (``SourceSpec.factory``) that stats only IRQs it has not seen in the previous
reading (the mode is fixed when the kernel creates the IRQ's directory), does not look again for an
``effective_affinity_list`` an IRQ did not have, and reuses an IRQ's parsed entry while its files read the same
bytes. Unstaggered (the default, and always in ``check`` and ``capture``) it reads both affinity files of every IRQ
every time. With ``set_stagger(k)`` (serve only, see ``HostReader``'s ``stagger``) it reads them for the IRQs whose
number is congruent to the reading counter modulo k, about 1/k of them, and carries the other IRQs' entries over
from the previous reading: an IRQ's placement is then at most k - 1 readings old, while the alerts on IRQ placement
wait 30 minutes. The directory listing is still taken every reading, so a new IRQ is read at once and a vanished one
drops out at once.
IRQs appear and vanish with drivers and hotplug: a directory gone mid-scan is skipped.
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
from numawatch.sources._stagger import Staggered

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


def _mode_writable(directory: str) -> bool | None:
    """Whether ``smp_affinity`` has its owner write bit; None when it cannot be stat'ed."""
    try:
        return bool(os.stat(f"{directory}/smp_affinity").st_mode & stat.S_IWUSR)
    except OSError:
        return None


def read_irq(directory: str, irq: int, cache: dict[bytes, CPUSet] | None = None) -> IrqAffinity | None:
    """One ``proc/irq/<n>`` directory (a string path, as the hot loop builds them), None when it vanished."""
    affinity_path = f"{directory}/smp_affinity_list"
    affinity_data = _read_small(affinity_path)
    if affinity_data is None:
        return None
    effective_path = f"{directory}/effective_affinity_list"
    effective_data = _read_small(effective_path)
    return IrqAffinity(
        irq=irq,
        affinity=parse_cpulist_file(affinity_data, affinity_path, cache),
        effective=None if effective_data is None else parse_cpulist_file(effective_data, effective_path, cache),
        writable=_mode_writable(directory),
    )


# What an IrqsReader keeps of an IRQ: its two files' bytes and the entry parsed from them (mode included).
_Seen = tuple[bytes, bytes | None, IrqAffinity]


def _read_all(
    paths: Paths, seen: dict[int, _Seen] | None, share: int = 1, turn: int = 0
) -> tuple[Irqs, dict[int, _Seen]]:
    """Every IRQ; with ``share`` > 1, the ones seen before whose number is not ``turn`` modulo ``share`` are carried
    over from ``seen`` instead of read."""
    irq_root = paths.procfs / "irq"
    try:
        entries = os.listdir(irq_root)
    except (FileNotFoundError, NotADirectoryError):
        raise SourceUnavailable(f"{irq_root} does not exist") from None
    root = str(irq_root)
    previous = seen or {}
    now: dict[int, _Seen] = {}
    irqs: dict[int, IrqAffinity] = {}
    cache: dict[bytes, CPUSet] = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        irq = int(entry)
        known = previous.get(irq)
        if known is not None and share > 1 and irq % share != turn:
            irqs[irq] = known[2]  # not its turn: the previous reading's (immutable) entry
            now[irq] = known
            continue
        directory = f"{root}/{entry}"
        affinity_path = f"{directory}/smp_affinity_list"
        affinity_data = _read_small(affinity_path)
        if affinity_data is None:
            continue  # vanished
        effective_path = f"{directory}/effective_affinity_list"
        # An IRQ's directory gets all its files when the IRQ is set up (register_irq_proc): one that had no
        # effective_affinity_list at the last reading has none now (kernels without GENERIC_IRQ_EFFECTIVE_AFF_MASK).
        effective_data = None if known is not None and known[1] is None else _read_small(effective_path)
        if known is not None and known[0] == affinity_data and known[1] == effective_data:
            found = known[2]  # same bytes as last time: the same (immutable) entry
        else:
            # The mode is set when the directory is created: an IRQ present in the previous reading keeps it.
            writable = known[2].writable if known is not None and known[2].writable is not None else None
            found = IrqAffinity(
                irq=irq,
                affinity=parse_cpulist_file(affinity_data, affinity_path, cache),
                effective=None if effective_data is None else parse_cpulist_file(effective_data, effective_path, cache),
                writable=writable if writable is not None else _mode_writable(directory),
            )
        irqs[irq] = found
        now[irq] = (affinity_data, effective_data, found)
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
    result = Irqs(
        irqs=frozen_map(dict(sorted(irqs.items()))),
        default_affinity=default,
        read_only_modes_seen=any(found.writable is False for found in irqs.values()),
    )
    return result, now


def read(paths: Paths) -> Irqs:
    """Every IRQ's requested and effective affinity and whether user space may set it."""
    return _read_all(paths, None)[0]


class IrqsReader(Staggered):
    """The irqs source as serve runs it (one per HostReader): remembers each IRQ's files and entry between readings,
    so an IRQ seen before is not stat'ed again and unchanged files are not parsed again. Reads the same as ``read``
    unless staggered (``set_stagger``)."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[int, _Seen] = {}

    def read(self, paths: Paths) -> Irqs:
        result, self._seen = _read_all(paths, self._seen, *self.next_turn())
        return result


SOURCE = SourceSpec(
    name="irqs",
    read=read,
    factory=IrqsReader,
    description="requested and effective affinity of every IRQ (/proc/irq/<n>)",
)

__all__ = ["SOURCE", "IrqsReader", "parse_cpulist_file", "read", "read_irq"]
