"""Put this directory on serve's PYTHONPATH to soak or time it as it runs on a real node: the kubelet's pod-resources
socket is there, so serve has imported grpcio (numawatch imports it with the first pod-resources connection, and
the benchmark trees have no socket)."""

import grpc  # noqa: F401
