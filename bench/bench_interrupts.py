"""CPU cost of parsing /proc/interrupts on a large GPU node.

Generates a /proc/interrupts as a 2-socket, 384-CPU host with 2,000 IRQs prints it (~8 MB: 11 bytes per count),
then parses it with ``numawatch.sources.interrupts.parse_interrupts`` for several sets of watched CPUs and reports
the CPU time per parse (``time.process_time``, median of ``--repeat`` runs). Last, the file is written out and read
the way the source reads it (``read_interrupts``: 1 MiB blocks parsed as they arrive, and with the previous reading's
rows as serve keeps them) next to reading it whole first: CPU time and the tracemalloc peak of each.

The generated counts look like a host that has been up for months: every device IRQ has non-zero counts on a few
CPUs it was delivered to over time (irqbalance moved it, early boot placed it elsewhere), multi-queue devices spread
one vector per CPU, and the architecture rows (LOC, RES, CAL, TLB, ...) count on every CPU, one LOC count wider
than 10 digits (a 1000 Hz tick after ~4 months) so the slow path for shifted lines is exercised too.

    .venv/bin/python bench/bench_interrupts.py [--cpus 384] [--irqs 2000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import tracemalloc

from numawatch.confined import HostFs
from numawatch.sources.interrupts import Remembered, parse_interrupts, read_interrupts

NAMED_ROWS = (
    ("NMI", "Non-maskable interrupts"),
    ("LOC", "Local timer interrupts"),
    ("SPU", "Spurious interrupts"),
    ("PMI", "Performance monitoring interrupts"),
    ("IWI", "IRQ work interrupts"),
    ("RTR", "APIC ICR read retries"),
    ("RES", "Rescheduling interrupts"),
    ("CAL", "Function call interrupts"),
    ("TLB", "TLB shootdowns"),
    ("TRM", "Thermal event interrupts"),
    ("THR", "Threshold APIC interrupts"),
    ("DFR", "Deferred Error APIC interrupts"),
    ("MCE", "Machine check exceptions"),
    ("MCP", "Machine check polls"),
)


def generate(cpus: int = 384, irqs: int = 2000, seed: int = 1) -> bytes:
    """A /proc/interrupts text in the kernel's layout (``%*d:`` label, `` %10u`` per CPU, chip and name)."""
    rnd = random.Random(seed)
    prec = len(str(irqs + 100))
    lines = [" " * (prec + 8) + "".join(f"CPU{cpu:<8d}" for cpu in range(cpus)).rstrip()]
    for index in range(irqs):
        irq = 100 + index
        values = [0] * cpus
        if index % 3 == 0:
            # one vector of a multi-queue device (nvme, mlx5 comp): delivered to "its" CPU
            values[index % cpus] = rnd.randrange(1, 10**8)
            name = f"mlx5_comp{index % 64}@pci:0000:{0x18 + index // 512:02x}:00.0"
        else:
            for _ in range(rnd.randrange(1, 6)):
                values[rnd.randrange(cpus)] = rnd.randrange(1, 10**9)
            name = f"nvidia-{index}" if index % 7 == 0 else f"eth{index % 8}-TxRx-{index % 32}"
        counts = "".join(f" {value:10d}" for value in values)
        chip = f"IR-PCI-MSIX-0000:{0x18 + index // 512:02x}:00.0 {index}-edge"
        lines.append(f"{irq:{prec}d}:{counts}  {chip}      {name}")
    for key, description in NAMED_ROWS:
        values = [rnd.randrange(0, 10**9) if key in ("LOC", "RES", "CAL", "TLB") else 0 for _ in range(cpus)]
        if key == "LOC":
            values[0] = 12_345_678_901  # 11 digits: shifts the rest of the line, so it takes the slow path
        lines.append(f"{key:>{prec}}:" + "".join(f" {value:10d}" for value in values) + f"   {description}")
    lines.append(f"{'ERR':>{prec}}:          0")
    lines.append(f"{'MIS':>{prec}}:          0")
    return ("\n".join(lines) + "\n").encode()


def naive_parse(data: bytes) -> int:
    """The obvious way, for comparison: split every line and convert every count."""
    lines = data.split(b"\n")
    ncols = len(lines[0].split())
    total = 0
    for line in lines[1:]:
        fields = line.split()[1 : ncols + 1]
        if len(fields) == ncols:
            total += sum(map(int, fields))
    return total


def measure(parse, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        parse()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def peak_mib(work) -> float:
    """Peak Python memory (tracemalloc) of one call, MiB."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def measure_file(data: bytes, watched: frozenset[int], repeat: int) -> None:
    """The source's way (the file read in 1 MiB blocks, parsed as they come) against reading it whole first."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "interrupts")
        with open(path, "wb") as handle:
            handle.write(data)
        fs = HostFs([directory])
        _, known = read_interrupts(fs, path, watched, known=Remembered())
        ways = (
            ("whole file: read_bytes + parse_interrupts", lambda: parse_interrupts(fs.read_bytes(path), watched)),
            ("in 1 MiB blocks: read_interrupts (check)", lambda: read_interrupts(fs, path, watched)),
            (
                "in 1 MiB blocks, rows of the last reading (serve)",
                lambda: read_interrupts(fs, path, watched, known=known),
            ),
        )
        print(f"  reading the file, {len(watched)} watched CPUs:")
        for label, work in ways:
            seconds = measure(work, repeat)
            print(f"    {label:<53} {seconds * 1000:7.1f} ms CPU  {peak_mib(work):5.1f} MiB peak")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=384)
    parser.add_argument("--irqs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    data = generate(args.cpus, args.irqs)
    half = args.cpus // 2
    # Interleaved numbering: socket 0 owns 0..half/2-1 and half..half+half/2-1; keep 8 housekeeping CPUs per socket.
    housekeeping = frozenset(range(4)) | frozenset(range(half // 2, half // 2 + 4))
    housekeeping |= frozenset(cpu + half for cpu in housekeeping)
    cases = (
        ("nothing watched (no isolation, no pinned containers)", frozenset()),
        ("one GPU pod pinned: 16 CPUs", frozenset(range(8, 16)) | frozenset(range(8 + half, 16 + half))),
        ("half the CPUs isolated (contiguous per socket)", frozenset(range(half // 2, half))
         | frozenset(range(half + half // 2, args.cpus))),
        ("all but 8 housekeeping CPUs per socket", frozenset(range(args.cpus)) - housekeeping),
        ("every CPU (worst case)", frozenset(range(args.cpus))),
    )
    print(f"/proc/interrupts: {args.cpus} CPUs, {args.irqs} IRQs, {len(data) / 1e6:.1f} MB")
    for label, watched in cases:
        seconds = measure(lambda watched=watched: parse_interrupts(data, watched), args.repeat)
        print(f"  {label:<55} {len(watched):>4} watched  {seconds * 1000:7.1f} ms CPU per parse")
    seconds = measure(lambda: naive_parse(data), max(3, args.repeat // 5))
    print(f"  {'for comparison: split every line, int() every count':<55} {'':>4}          {seconds * 1000:7.1f} ms")
    measure_file(data, cases[3][1], args.repeat)


if __name__ == "__main__":
    main()
