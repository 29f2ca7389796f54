"""numawatch: NUMA pinning drift detector and Prometheus exporter for Kubernetes GPU nodes."""

__version__ = "0.1.0"
