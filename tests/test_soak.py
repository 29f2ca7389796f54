"""Soak: thousands of evaluations of one node whose pods come and go, in process, as ``numawatch serve`` runs them.

One ``HostReader`` (with its caches and stateful sources) reads the reference GPU node; between two readings a
Burstable pod is created or deleted (fakehost.pods add_pod / remove_pod: cgroups, runtime bundle, pod logs and
processes), then the host is evaluated and the exposition rendered, as every 15 s in production. Asserted on every
iteration:

- the exposition holds exactly the clean node's series plus a fixed number per live pod: the series count is a
  function of what is running now, never of what ran before (bounded and flat);
- a deleted pod's series are gone from the very next exposition, and a created pod's are there;
- no finding appears (pods come and go cleanly, so any finding would be stale).

Memory: every ``CHECKPOINT`` iterations all churn pods are deleted and the node is evaluated in its clean state; the
Python heap there (``sys.getallocatedblocks`` after a collection) and the RSS (``VmRSS`` of /proc/self/status) must
stay flat after a warm-up, within a small slack (no timing is asserted anywhere).

The default run does ``DEFAULT_ITERATIONS`` iterations (about 15-25 s on the 2-core CI machine). Set
``NUMAWATCH_SOAK_ITERATIONS`` for a longer soak, e.g. ``NUMAWATCH_SOAK_ITERATIONS=20000 pytest tests/test_soak.py``.
"""

from __future__ import annotations

import gc
import os
import random
import sys
import uuid

import pytest
from fakehost.pods import ContainerSpec, PodHandle, add_pod, remove_pod
from fakehost.reference import DEFAULT_CPUSET, reference_node
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE

DEFAULT_ITERATIONS = 1000
ITERATIONS = int(os.environ.get("NUMAWATCH_SOAK_ITERATIONS", DEFAULT_ITERATIONS))
CHECKPOINT = 100  # iterations between two clean-state memory samples
MAX_LIVE = 6  # churn pods alive at once
WARM_UP_CHECKPOINTS = 2
# Slack on the clean-state samples after warm-up. A leak of one object per evaluation would grow the heap by
# ITERATIONS blocks; the clean states differ by a few hundred (allocator and cache noise).
BLOCKS_SLACK = 2000
RSS_SLACK_KB = 8 * 1024


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def series(exposition: bytes) -> list[bytes]:
    return [line for line in exposition.splitlines() if line and not line.startswith(b"#")]


@pytest.mark.skipif(ITERATIONS < 2 * CHECKPOINT, reason="NUMAWATCH_SOAK_ITERATIONS is below two checkpoints")
@pytest.mark.slow
def test_pods_coming_and_going_leave_series_and_memory_flat(fake_host):
    node = reference_node(fake_host)
    reader = HostReader(node.paths)
    rng = random.Random(20240607)
    live: dict[str, PodHandle] = {}
    created = 0

    def scrape() -> list[bytes]:
        evaluation = evaluate(reader.read(), REFERENCE)
        assert evaluation.findings == (), [f.check for f in evaluation.findings]
        return series(metrics.render(evaluation))

    # The rate checks need two readings: from the second on they are evaluated and have their findings series.
    scrape()
    base = len(scrape())
    per_pod: int | None = None
    samples: list[tuple[int, int]] = []  # (heap blocks, RSS kB) in the clean state, one per checkpoint

    for iteration in range(1, ITERATIONS + 1):
        removed: PodHandle | None = None
        if live and (len(live) >= MAX_LIVE or rng.random() < 0.45):
            removed = live.pop(rng.choice(sorted(live)))
            remove_pod(node.host, removed)
        else:
            created += 1
            uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            live[uid] = add_pod(
                node.host,
                uid=uid,
                qos="burstable",
                namespace="inference",  # the GPU pods' namespace: helpers coming and going belong on the node
                name=f"soak-{created}",
                containers=[ContainerSpec("app", cpus=DEFAULT_CPUSET, mems={0, 1}, numa_bytes={0: 8 << 20})],
            )

        lines = scrape()
        text = b"\n".join(lines)
        if per_pod is None and live:
            per_pod = (len(lines) - base) // len(live)
            assert per_pod > 0, "a live pod has no series at all: nothing to check"
        assert len(lines) == base + len(live) * (per_pod or 0), f"iteration {iteration}: {len(live)} pods live"
        if removed is not None:
            assert removed.uid.encode() not in text and f'"{removed.name}"'.encode() not in text
        for handle in live.values():
            assert f'pod="{handle.name}"'.encode() in text

        if iteration % CHECKPOINT == 0:
            for handle in live.values():
                remove_pod(node.host, handle)
            live.clear()
            assert len(scrape()) == base
            gc.collect()
            samples.append((sys.getallocatedblocks(), rss_kb()))

    assert created > ITERATIONS // 3  # the node really churned
    settled = samples[WARM_UP_CHECKPOINTS:]
    blocks = [sample[0] for sample in settled]
    rss = [sample[1] for sample in settled]
    assert max(blocks) - blocks[0] <= BLOCKS_SLACK, f"heap blocks at clean checkpoints: {blocks}"
    assert max(rss) - rss[0] <= RSS_SLACK_KB, f"RSS (kB) at clean checkpoints: {rss}"
