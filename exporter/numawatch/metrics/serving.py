"""The families only ``numawatch serve`` has: configuration reloads, refused requests, and the process itself.

The process families are the standard ones every Prometheus client library exposes (client_python's
``ProcessCollector``, ``PlatformCollector`` and ``GCCollector``: ``process_cpu_seconds_total``,
``process_resident_memory_bytes``, ``process_open_fds``, ``python_info``, ``python_gc_*``...), so the dashboards and
alerts a fleet already has for its exporters work on numawatch unchanged. They describe this process (its own
``/proc/self``, never the host root) and are collected with every evaluation, like every other family: their values
are as old as ``numawatch_last_evaluation_timestamp_seconds`` says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import gc_collector, platform_collector, process_collector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from numawatch.inputs import RELOADS, SERVER, exposes

INTENT_RELOAD_SUCCESS_HELP = (
    "1 when the last intent reload (SIGHUP, or the intent or web config file changed) succeeded or none was asked "
    "for, 0 when the new file was invalid (or could not be read in time) and the previous intent is still in force."
)
INTENT_RELOAD_TIMESTAMP_HELP = (
    "Unix time of the last intent reload attempt (SIGHUP, or the intent or web config file changed), or of start-up "
    "before any."
)
CONFIG_RELOAD_SUCCESS_HELP = (
    "1 when the last reload of the configuration file named by file (intent or web: SIGHUP, or the file changed) "
    "succeeded or none was asked for, 0 when it failed or was refused and the previous configuration is still in "
    "force."
)
CONFIG_RELOAD_FAILURES_HELP = (
    "Reloads of the configuration file named by file (intent or web) that failed or were refused since start: an "
    "invalid, unreadable or stuck file, or a web config that would turn TLS on or off or remove authentication."
)
REQUESTS_REFUSED_HELP = (
    "HTTP requests refused since start: reason max_requests (answered 503 at once, --web.max-requests were in "
    "flight), read_timeout (request not received within --web.read-timeout), write_timeout (response not taken "
    "within --web.write-timeout), password_checks (answered 503 at once, too many bcrypt checks waiting) or "
    "descriptors (a new connection closed at once: the descriptors left are kept for the evaluation and no idle "
    "connection could make room)."
)


@exposes("numawatch_intent_reload_success", "numawatch_intent_reload_timestamp_seconds", inputs=(RELOADS,))
def intent_reload(success: bool, timestamp: float) -> list[Metric]:
    return [
        GaugeMetricFamily("numawatch_intent_reload_success", INTENT_RELOAD_SUCCESS_HELP, value=1 if success else 0),
        GaugeMetricFamily("numawatch_intent_reload_timestamp_seconds", INTENT_RELOAD_TIMESTAMP_HELP, value=timestamp),
    ]


@exposes("numawatch_config_last_reload_successful", "numawatch_config_reload_failures_total", inputs=(RELOADS,))
def config_reloads(outcomes: Mapping[str, tuple[bool, int]], since: float) -> list[Metric]:
    """``numawatch_config_last_reload_successful`` and ``numawatch_config_reload_failures_total`` per configuration
    file: ``outcomes`` maps the file's label value to (last reload succeeded, failures since ``since``)."""
    success = GaugeMetricFamily("numawatch_config_last_reload_successful", CONFIG_RELOAD_SUCCESS_HELP,
                                labels=("file",))
    failures = CounterMetricFamily("numawatch_config_reload_failures", CONFIG_RELOAD_FAILURES_HELP, labels=("file",))
    for name, (succeeded, failed) in outcomes.items():
        success.add_metric((name,), 1 if succeeded else 0)
        failures.add_metric((name,), failed, created=since)
    return [success, failures]


ACCEPT_ERRORS_HELP = (
    "Connections the listening sockets could not accept since start for lack of resources (descriptors, memory): "
    "accepting is retried each second, and each interval's errors are logged once."
)


@exposes("numawatch_http_accept_errors_total", inputs=(SERVER,))
def accept_errors(count: int, since: float) -> Metric:
    family = CounterMetricFamily("numawatch_http_accept_errors", ACCEPT_ERRORS_HELP)
    family.add_metric((), count, created=since)
    return family


@exposes("numawatch_http_requests_refused_total", inputs=(SERVER,))
def requests_refused(refused: Mapping[str, int], since: float) -> Metric:
    """``numawatch_http_requests_refused_total`` per reason; ``since`` (Unix time the counting began) is each
    series' OpenMetrics created timestamp."""
    family = CounterMetricFamily("numawatch_http_requests_refused", REQUESTS_REFUSED_HELP, labels=("reason",))
    for reason, count in refused.items():
        family.add_metric((reason,), count, created=since)
    return family


class ProcessFamilies:
    """The client library's process, platform and garbage-collector families of this process, in a registry of
    their own (never the library's global one): each ``collect`` builds them fresh, as numawatch's families are."""

    def __init__(self) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        process_collector.ProcessCollector(registry=self._registry)
        platform_collector.PlatformCollector(registry=self._registry)
        gc_collector.GCCollector(registry=self._registry)  # CPython only: registers nothing elsewhere

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()
