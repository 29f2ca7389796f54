"""Files serve opens per evaluation on a benchmark shape: a warm HostReader as serve keeps it (serve's stagger), the
checks and the metrics, ``--evaluations`` times after ``--warm`` evaluations that are not counted.

    .venv/bin/python bench/open_counts.py --work /var/tmp/numawatch-shapes --shape e384noirqbalance12k

Counts every ``open`` audit event (builtins.open, os.open and the confined opener all raise it) per evaluation and
reports the total, the ``/proc/<pid>/comm`` opens and the opens under ``sys/fs/cgroup`` (median, min, max over the
evaluations), with the CPU time of the process per evaluation. Open counts do not depend on the machine's load, which
is why this is the measure of a guarantee such as "a missing optional file does not make serve read every cgroup
file at every evaluation"; run it with ``PYTHONPATH`` pointing at another checkout's ``exporter`` to compare code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))

import generate_host as gen  # noqa: E402
from numawatch import cli, metrics  # noqa: E402
from numawatch.checks import evaluate  # noqa: E402
from numawatch.host import HostReader  # noqa: E402
from numawatch.intent import REFERENCE  # noqa: E402
from numawatch.paths import Paths  # noqa: E402
from shapes import ensure_tree  # noqa: E402

_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _opened is not None and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


def count(root: str, evaluations: int, warm: int) -> list[tuple[int, int, int, float]]:
    """(opens, comm opens, cgroup opens, CPU seconds) per counted evaluation."""
    global _opened
    paths = Paths.from_root(root)
    reader = HostReader(paths, stagger=getattr(cli, "DEFAULT_STAGGER", 1))
    renderer = metrics.Renderer()
    stats = metrics.EvaluationStats()
    cgroup = os.path.join(root, "sys/fs/cgroup") + "/"
    rows = []
    for index in range(warm + evaluations):
        opened: list[str] = []
        started = time.process_time()
        _opened = opened
        try:
            renderer.render(evaluate(reader.read(), REFERENCE), stats)
        finally:
            _opened = None
        spent = time.process_time() - started
        if index >= warm:
            comm = sum(1 for path in opened if path.endswith("/comm"))
            rows.append((len(opened), comm, sum(1 for path in opened if path.startswith(cgroup)), spent))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True, help="where shapes.py generates and keeps the trees")
    parser.add_argument("--shape", required=True, choices=list(gen.SHAPES))
    parser.add_argument("--evaluations", type=int, default=40, help="evaluations counted (default: 40)")
    parser.add_argument("--warm", type=int, default=5, help="evaluations before counting (default: 5)")
    args = parser.parse_args(argv)
    sys.addaudithook(_audit)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    tree = ensure_tree(Path(args.work), args.shape, gen.SHAPES[args.shape].spec)
    rows = count(str(tree.root), args.evaluations, args.warm)
    for label, column in (("opens", 0), ("/proc/<pid>/comm opens", 1), ("sys/fs/cgroup opens", 2)):
        values = [row[column] for row in rows]
        print(f"{label}: median {statistics.median(values):g}, min {min(values)}, max {max(values)}, "
              f"total {sum(values)} over {len(rows)} evaluations")  # fmt: skip
    print(f"CPU ms per evaluation: median {1000 * statistics.median(row[3] for row in rows):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
