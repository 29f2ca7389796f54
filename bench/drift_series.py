"""Series counts of the exposition, and how stable the drift series stay: on generated hosts and the reference node.

    .venv/bin/python bench/drift_series.py --host /tmp/host32 --host /tmp/host384 [--churn 20] [--stray 0.05]
    .venv/bin/python bench/drift_series.py --reference          # the test suite's reference node, drift planted

For each tree: series per family of one exposition (``metrics.render`` of a warm serve reader's second reading),
its size, and for ``numawatch_drift`` the label names its series carry (empty values counted apart: Prometheus
treats an empty label as absent, but the exposition still carries it). With ``--churn N`` the tree's counters move
``N`` times (bench/churn.py, ``--stray`` of the device IRQ rows also counting on an isolated CPU, so the
interrupt-rate checks fire on CPUs that change from one evaluation to the next) and the distinct ``numawatch_drift``
series seen over the ``N + 1`` evaluations are counted: what Prometheus would store for one node over that time.
``--churn`` changes the tree in place; use a copy.

``--reference`` builds the reference node of tests/fakehost in a temporary directory with many drifts planted at
once (kubelet policy, NUMA split, cpuset widened, an intruder, remote memory, a GPU without NUMA node, an IRQ on an
isolated CPU, THP and swappiness off profile, a stale checkpoint, memlock limited, irqbalance with a ban list that
misses isolated CPUs in an environment file, NVML's fake GPUs).

Works on any numawatch version: it reads nothing but the exposition text.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

DRIFT = "numawatch_drift"


def families_of(text: str) -> dict[str, list]:
    """Family name as exposed -> its samples."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = list(family.samples)
    return out


def drift_identities(text: str) -> set[tuple[tuple[str, str], ...]]:
    """Every numawatch_drift series of an exposition, as Prometheus identifies it (empty labels dropped)."""
    found = set()
    for sample in families_of(text).get(DRIFT, []):
        if sample.name == DRIFT:
            found.add(tuple(sorted((k, v) for k, v in sample.labels.items() if v != "")))
    return found


def summarise(text: str) -> dict[str, object]:
    families = families_of(text)
    per_family = {name: len(samples) for name, samples in families.items()}
    drift = [s for s in families.get(DRIFT, []) if s.name == DRIFT]
    names: Counter[str] = Counter()
    empty = 0
    for sample in drift:
        for key, value in sample.labels.items():
            if value == "":
                empty += 1
            else:
                names[key] += 1
    lines = [line for line in text.splitlines() if line.startswith(DRIFT + "{") or line.startswith(DRIFT + " ")]
    return {
        "series": sum(per_family.values()),
        "bytes": len(text.encode()),
        "families": len(per_family),
        "drift_series": len(drift),
        "drift_label_names": sorted({key for sample in drift for key in sample.labels}),
        "drift_nonempty_label_names": sorted(names),
        "drift_empty_label_pairs": empty,
        "drift_bytes": sum(len(line) + 1 for line in lines),
        "drift_info_series": per_family.get("numawatch_drift_info", 0),
        "per_family": per_family,
    }


def render(evaluation) -> str:
    from numawatch import metrics

    return metrics.render(evaluation).decode()


def measure_tree(root: str, churn: int, stray: float) -> dict[str, object]:
    import run  # bench/run.py
    from numawatch.checks import evaluate
    from numawatch.intent import REFERENCE

    reader = run.serve_reader(root)
    reader.read()
    text = render(evaluate(reader.read(), REFERENCE))
    result = summarise(text)
    if churn:
        import churn as bench_churn

        mover = bench_churn.Churn(root, stray=stray, seconds=run.SERVE_INTERVAL)
        seen = drift_identities(text)
        checks: Counter[str] = Counter()
        for _ in range(churn):
            mover.advance()
            current = drift_identities(render(evaluate(reader.read(), REFERENCE)))
            for identity in current - seen:
                checks[dict(identity)["check"]] += 1
            seen |= current
        result["churn_evaluations"] = churn + 1
        result["drift_series_seen"] = len(seen)
        result["new_drift_series_by_check"] = dict(checks)
    return result


def reference_evaluation(root: Path):
    from fake_pynvml import reference_nvml, write_reference_threads
    from fakehost import FakeHost
    from fakehost.kernel import add_irqbalance
    from fakehost.reference import reference_node
    from numawatch.checks import evaluate
    from numawatch.host import HostReader
    from numawatch.intent import REFERENCE
    from numawatch.nvml_session import NvmlSession
    from numawatch.shapes import parse_shape
    node = reference_node(FakeHost(root))
    node.set_topology_manager_policy("best-effort")
    node.split_across_nodes()
    node.intrude()
    node.spill_memory()
    node.hide_gpu_numa_node()
    node.corrupt_cpu_state_checksum()
    node.host.write("proc/irq/150/smp_affinity_list", "2")
    node.host.write("proc/irq/150/effective_affinity_list", "2")
    node.host.write("proc/sys/vm/swappiness", "60\n")
    node.host.write("sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n")
    write_reference_threads(node.host, memlock=65536)
    add_irqbalance(node.host, pid=812, env_file="debian", file_text="IRQBALANCE_BANNED_CPULIST=2-5\n")
    session = NvmlSession(nvml=reference_nvml())
    try:
        reader = HostReader(node.host.paths, nvml=session)
        reader.read()
        host = reader.read()
    finally:
        session.close()
    intent = replace(REFERENCE, shapes=(parse_shape("cpu=2,memory=4Gi", name="small"),))
    return evaluate(host, intent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", action="append", default=[], help="a host tree (bench/generate_host.py)")
    parser.add_argument("--reference", action="store_true", help="the reference node with drift planted")
    parser.add_argument("--churn", type=int, default=0, help="advances of the tree's counters (changes it!)")
    parser.add_argument("--stray", type=float, default=0.05, help="share of device IRQs straying onto isolated CPUs")
    parser.add_argument("--families", action="store_true", help="also print the series of every family")
    args = parser.parse_args(argv)
    results: dict[str, object] = {}
    for root in args.host:
        results[root] = measure_tree(root, args.churn, args.stray)
    if args.reference:
        with tempfile.TemporaryDirectory(prefix="numawatch-reference-") as tmp:
            evaluation = reference_evaluation(Path(tmp) / "host")
            text = render(evaluation)
            summary = summarise(text)
            summary["findings"] = len(evaluation.findings)
            summary["root_in_exposition"] = tmp in text
            results["reference"] = summary
    if not args.families:
        for summary in results.values():
            summary.pop("per_family", None)  # type: ignore[union-attr]
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
