"""The Prometheus exposition of one evaluation: the only part of numawatch that imports prometheus_client.

``core`` builds the drift, health, self and inventory families; ``host`` the host-layer ones (kernel knobs,
isolation, IRQs); ``platform`` the idle states, GPU-NIC paths and NVLink. ``render`` turns one evaluation into the
bytes ``/metrics`` serves, written by ``exposition`` (the bytes prometheus_client's generate_latest would write, at a
fraction of its cost). The server renders once per evaluation and answers every scrape from those bytes, so scraping
costs the same however many scrapers there are.
"""

from __future__ import annotations

from prometheus_client.metrics_core import Metric

from numawatch.checks import Evaluation
from numawatch.metrics import capacity, core, exposition, gpu, host, platform
from numawatch.metrics.core import EvaluationStats

# The classic text format. Pinned rather than taken from prometheus_client (whose CONTENT_TYPE_LATEST moved to
# version=1.0.0) because what we render is exactly this format, and every Prometheus since 2.0 reads it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

__all__ = ["CONTENT_TYPE", "EvaluationStats", "Renderer", "families", "render"]


def families(evaluation: Evaluation, stats: EvaluationStats | None = None) -> list[Metric]:
    """Every family for this evaluation; ``stats`` spans evaluations (the server's), else this one alone."""
    stats = stats if stats is not None else EvaluationStats.of(evaluation)
    return [
        *core.families(evaluation, stats),
        *core.safely(host.families, evaluation),
        *core.safely(gpu.families, evaluation),
        *core.safely(capacity.families, evaluation),
        *core.safely(platform.families, evaluation),
    ]


def render(evaluation: Evaluation, stats: EvaluationStats | None = None) -> bytes:
    """The text exposition (format 0.0.4) of one evaluation."""
    # Families are built fresh for every render and nothing outlives it, so no series can go stale between
    # evaluations.
    return exposition.write(families(evaluation, stats))


class Renderer:
    """``render`` for a sequence of evaluations (the server's): the lines of rows that did not change since the last
    evaluation are reused instead of formatted again (most of a node's series are placement and configuration,
    which stay put). The bytes are exactly ``render``'s."""

    def __init__(self) -> None:
        self._lines = exposition.LineCache()

    def render(self, evaluation: Evaluation, stats: EvaluationStats | None = None) -> bytes:
        return exposition.write(families(evaluation, stats), self._lines)
