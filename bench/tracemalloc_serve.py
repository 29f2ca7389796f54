"""``numawatch`` with tracemalloc on, for finding what grows in a long ``serve`` (a benchmark aid, never production).

    PYTHONPATH=exporter NUMAWATCH_TRACEMALLOC_OUT=/tmp/grow /work/venv/bin/python bench/tracemalloc_serve.py serve ...
    kill -USR1 <pid>     # the first signal takes the baseline snapshot, every later one writes the growth since it

Each SIGUSR1 after the first writes ``$NUMAWATCH_TRACEMALLOC_OUT.<n>.txt``: the total traced, the top allocation
differences against the first snapshot grouped by traceback (``NUMAWATCH_TRACEMALLOC_FRAMES`` frames, 8 by default),
the same grouped by line, and the count of live objects per type with its change. bench/soak.py starts serve through
this with ``--serve-wrapper``. tracemalloc's own bookkeeping adds to RSS and slows every allocation: its figures say
where Python memory goes, not what serve's RSS is.
"""

from __future__ import annotations

import collections
import gc
import os
import signal
import sys
import tracemalloc
from types import FrameType

FRAMES = int(os.environ.get("NUMAWATCH_TRACEMALLOC_FRAMES", "8"))
OUT = os.environ.get("NUMAWATCH_TRACEMALLOC_OUT", "/tmp/numawatch-tracemalloc")
TOP = 40

_state: dict[str, object] = {"count": 0}


def _types() -> collections.Counter[str]:
    return collections.Counter(type(item).__qualname__ for item in gc.get_objects())


def _dump(_signum: int, _frame: FrameType | None) -> None:
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces((
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, __file__),
    ))
    types = _types()
    first = _state.get("first")
    if first is None:
        _state["first"] = snapshot
        _state["types"] = types
        return
    assert isinstance(first, tracemalloc.Snapshot)
    before = _state["types"]
    assert isinstance(before, collections.Counter)
    _state["count"] = count = int(_state["count"]) + 1  # type: ignore[call-overload]
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced now {current / 1e6:.1f} MB, peak {peak / 1e6:.1f} MB", "", "== by traceback =="]
    for diff in first.compare_to(snapshot, "traceback")[:TOP]:
        lines.append(f"{diff.size_diff / 1024:+.1f} KiB ({diff.size / 1024:.1f} KiB), {diff.count_diff:+d} blocks")
        lines.extend(f"    {line}" for line in diff.traceback.format(most_recent_first=True))
    lines += ["", "== by line =="]
    lines += [str(diff) for diff in first.compare_to(snapshot, "lineno")[:TOP]]
    lines += ["", "== live objects per type (now, change) =="]
    changes = sorted(types, key=lambda name: types[name] - before.get(name, 0), reverse=True)
    lines += [f"{name} {types[name]} {types[name] - before.get(name, 0):+d}" for name in changes[:TOP]]
    with open(f"{OUT}.{count}.txt", "w") as handle:
        handle.write("\n".join(lines) + "\n")


def main() -> int:
    tracemalloc.start(FRAMES)
    signal.signal(signal.SIGUSR1, _dump)
    from numawatch.cli import main as numawatch_main

    sys.argv[0] = "numawatch"
    return numawatch_main()


if __name__ == "__main__":
    sys.exit(main())
