"""The Prometheus exposition of one evaluation: the only part of numawatch that imports prometheus_client.

``core`` builds the health, self and inventory families, ``drift`` the drift families and their label contract;
``host`` the host-layer ones (kernel knobs, isolation, IRQs); ``platform`` the idle states, GPU-NIC paths and NVLink.
``render`` turns one evaluation into the bytes ``/metrics`` serves, in the text format or OpenMetrics, written by
``exposition`` (the bytes prometheus_client's encoders would write, at a fraction of their cost). The server writes
each format at most once per evaluation and answers every scrape from those bytes, so scraping costs the same
however many scrapers there are; its ``Renderer`` keeps the last evaluation's families' bytes and, in ``gzipbody``,
the deflated parts of the last gzip body, so that an evaluation writes and compresses only what changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from prometheus_client.metrics_core import Metric

from numawatch.capacity import ReplicaAnswers
from numawatch.checks import Evaluation
from numawatch.collectors import Collectors
from numawatch.metrics import capacity, core, drift, exposition, gpu, gzipbody, host, platform, serving
from numawatch.metrics.core import EvaluationStats

# The classic text format. Pinned rather than taken from prometheus_client (whose CONTENT_TYPE_LATEST moved to
# version=1.0.0) because what we render is exactly this format, and every Prometheus since 2.0 reads it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# OpenMetrics 1.0.0, for scrapers that ask for it (Prometheus does, first, unless told otherwise).
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

__all__ = [
    "CONTENT_TYPE",
    "DECLARED",
    "OPENMETRICS_CONTENT_TYPE",
    "EvaluationStats",
    "Memory",
    "Metric",
    "Renderer",
    "drift",
    "families",
    "render",
]

# Every builder of a numawatch_* family, each declaring the names it makes and what it reads (numawatch.inputs.exposes):
# what ``numawatch explain`` answers for (tests/test_dataflow.py holds them to it).
DECLARED: tuple[Callable[..., object], ...] = (
    *core.PER_EVALUATION,
    *core.ACROSS_EVALUATIONS,
    *host.BUILDERS,
    *gpu.BUILDERS,
    capacity.families,
    *platform.BUILDERS,
    serving.intent_reload,
    serving.config_reloads,
    serving.accept_errors,
    serving.requests_refused,
)


class Memory:
    """What rendering a sequence of evaluations keeps between them (the server's, one per sampler): the replica
    counts of the last capacity seen and the labels already logged as outside their check's contract."""

    def __init__(self) -> None:
        self.replicas = ReplicaAnswers()
        self.unexported = drift.Unexported()


def families(
    evaluation: Evaluation,
    stats: EvaluationStats | None = None,
    memory: Memory | None = None,
    collectors: Collectors | None = None,
) -> list[Metric]:
    """Every family for this evaluation but those of the collectors turned off (``collectors``; None: all on), whose
    builders do not run; ``stats`` and ``memory`` span evaluations (the server's), else they are this one's alone."""
    stats = stats if stats is not None else EvaluationStats.of(evaluation)
    memory = memory if memory is not None else Memory()
    memory.unexported.warn(evaluation)
    return [
        *core.families(evaluation, stats, collectors),
        *core.safely(host.families, evaluation, collectors),
        *core.safely(gpu.families, evaluation, collectors),
        *core.safely(capacity.families, evaluation, None, memory.replicas),
        *core.safely(platform.families, evaluation, collectors),
    ]


def render(evaluation: Evaluation, stats: EvaluationStats | None = None, *, openmetrics: bool = False) -> bytes:
    """The exposition of one evaluation: the text format 0.0.4, or OpenMetrics 1.0.0."""
    # Families are built fresh for every render and nothing outlives it, so no series can go stale between
    # evaluations.
    return exposition.write(families(evaluation, stats), openmetrics=openmetrics)


class Renderer:
    """``render`` for a sequence of evaluations (the server's): a family made of the same rows or samples as in the
    last evaluation is the bytes it was written as then, and within a changed row family the lines of unchanged rows
    are reused instead of formatted again (most of a node's series are placement and configuration, which stay
    put); the gzip bodies deflate only the parts that changed (``gzipbody``). The bytes are exactly ``render``'s."""

    def __init__(self, gzip_level: int = 1) -> None:
        self._lines = exposition.LineCache()
        self._openmetrics_lines = exposition.LineCache()
        # One write at a time per format: the server writes a body on a scrape's demand while the next
        # evaluation's may be written in the sampler's thread (each SegmentedGzip locks itself the same way).
        self._locks = {False: threading.Lock(), True: threading.Lock()}
        self._gzips = {False: gzipbody.SegmentedGzip(gzip_level), True: gzipbody.SegmentedGzip(gzip_level)}
        self.memory = Memory()

    def render(self, evaluation: Evaluation, stats: EvaluationStats | None = None) -> bytes:
        return self.write(families(evaluation, stats, self.memory))

    def write(self, built: list[Metric], *, openmetrics: bool = False) -> bytes:
        """``exposition.write`` of families built from the evaluations of this sequence, in one format (each format
        keeps its own lines)."""
        return b"".join(self.write_segments(built, openmetrics=openmetrics))

    def write_segments(self, built: list[Metric], *, openmetrics: bool = False) -> list[bytes]:
        """``write``'s body cut family by family (``exposition.write_segments``), for ``gzip``."""
        cache = self._openmetrics_lines if openmetrics else self._lines
        with self._locks[openmetrics]:
            return exposition.write_segments(built, cache, openmetrics=openmetrics)

    def gzip(self, segments: list[bytes], body: bytes | None = None, *, openmetrics: bool = False) -> bytes:
        """The gzip member of the body ``b"".join(segments)`` (``segments`` from ``write_segments`` in that format;
        ``body``, that body when it is at hand)."""
        return self._gzips[openmetrics].compress(segments, body)
