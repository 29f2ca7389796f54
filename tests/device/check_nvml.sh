#!/usr/bin/env bash
# Device check of the GPU part of numawatch (issue 4), for a node with an NVIDIA GPU and driver. Run it from anywhere:
#
#     bash tests/device/check_nvml.sh            # OUT=<dir> keeps the logs there (default: a temporary directory)
#
# 1. installs numawatch into a virtual environment (system site-packages visible, so an offline machine with the
#    dependencies already installed works; otherwise pip fetches them);
# 2. starts a small load on GPU 0 (a matmul loop in PyTorch, if PyTorch with CUDA is importable; else no load);
# 3. runs `numawatch check` and one scrape of `numawatch serve`, and prints their GPU lines;
# 4. reads the host directly through the nvml and processes sources for ~10 s and prints the GPU snapshot and the cost
#    of every NVML call (count, total, mean, max; measured around each call on the NVML thread).
# Exits non-zero when NVML could not be used. docs/gpu.md says where its output goes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$(mktemp -d)}
PYTHON=${PYTHON:-python3}
PORT=${PORT:-10977}
mkdir -p "$OUT"
echo "== logs in $OUT"

echo "== the machine"
uname -r
if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L || true
    nvidia-smi --query-gpu=index,pci.bus_id,uuid,persistence_mode,driver_version --format=csv || true
    nvidia-smi topo -m || true
else
    echo "nvidia-smi not found"
fi

echo "== installing numawatch"
VENV="$OUT/venv"
"$PYTHON" -m venv --system-site-packages "$VENV"
PY="$VENV/bin/python"
if ! "$PY" -m pip install -q --no-deps --no-build-isolation -e "$ROOT" >"$OUT/pip.log" 2>&1; then
    "$PY" -m pip install -q -e "$ROOT" >>"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 2; }
fi
if ! "$PY" -c 'import prometheus_client, aiohttp, pyudev, yaml, psutil, pynvml' 2>>"$OUT/pip.log"; then
    "$PY" -m pip install -q -e "$ROOT" >>"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 2; }
fi
"$PY" -c 'import pynvml, numawatch; print("numawatch", numawatch.__version__, "nvidia-ml-py", getattr(pynvml, "__version__", "?"))'

LOAD_PID=""
SERVE_PID=""
cleanup() {
    [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null || true
    [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT

echo "== load on GPU 0"
if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    "$PY" - >"$OUT/load.log" 2>&1 <<'EOF' &
import time
import torch

a = torch.randn(4096, 4096, device="cuda:0")
end = time.time() + 120
while time.time() < end:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
    time.sleep(0.2)  # gaps, so busy time is not simply 100 %
print("load done", float(b[0, 0]))
EOF
    LOAD_PID=$!
    echo "PyTorch matmul loop started (pid $LOAD_PID)"
    sleep 5
else
    echo "PyTorch with CUDA is not available: no load (the GPU will read idle)"
fi

echo "== numawatch check"
set +e
"$VENV/bin/numawatch" check --format json >"$OUT/check.json" 2>"$OUT/check.err"
echo "exit code $? (0 clean, 1 findings, 2 could not run)"
set -e
"$PY" - "$OUT/check.json" <<'EOF'
import json, sys

report = json.load(open(sys.argv[1]))
for source in report.get("sources", []):
    if source.get("name") in ("gpus_sysfs", "nvml", "processes", "interrupts"):
        print("source", source.get("name"), "up" if source.get("up") else "DOWN", source.get("reason", ""))
for finding in report.get("findings", []):
    if finding["check"].startswith("gpu") or "gpu" in finding.get("labels", {}):
        print("finding", finding["check"], finding["labels"], finding["message"][:160])
for item in report.get("not_evaluated", []):
    if item.get("check", "").startswith("gpu"):
        print("not evaluated", item["check"], item.get("reason", ""))
EOF

echo "== numawatch serve: one scrape"
"$VENV/bin/numawatch" serve --listen "127.0.0.1:$PORT" --interval 5 >"$OUT/serve.log" 2>&1 &
SERVE_PID=$!
sleep 12  # two evaluations, so the busy counters have an interval to integrate
"$PY" - "$PORT" <<'EOF' | tee "$OUT/metrics.txt" | grep -E '^numawatch_(gpu|nvml)|^numawatch_source_up\{source="(nvml|processes|gpus_sysfs)"' || true
import sys, urllib.request

print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode())
EOF
kill "$SERVE_PID" 2>/dev/null || true
wait "$SERVE_PID" 2>/dev/null || true
SERVE_PID=""

echo "== the nvml and processes sources, read directly for ~10 s"
"$PY" - <<'EOF'
import sys
import time

from numawatch.host import HostReader
from numawatch.nvml_session import NvmlSession
from numawatch.paths import Paths
from numawatch.sources import SOURCES
from numawatch.sources.nvml import GpuReaders

session = NvmlSession()
start = time.perf_counter()
up = session.start()
print(f"nvmlInit: {'ok' if up else 'FAILED'} in {time.perf_counter() - start:.3f}s {session.reason}")
gpu = GpuReaders(session)
reader = HostReader(Paths.from_root("/"), gpu.bind(SOURCES))
host = None
for _ in range(20):
    host = reader.read()
    time.sleep(0.5)
for name in ("nvml", "processes"):
    status = host.statuses[name]
    print(f"source {name}: {'up' if status.up else 'DOWN'} {status.duration_seconds * 1000:.1f} ms {status.reason}")
snapshot = host.get("nvml")
if snapshot is not None:
    print("driver", snapshot.driver_version)
    for g in snapshot.gpus:
        print(f"GPU {g.index} {g.pci_address} {g.uuid} node={g.numa_node} up={g.up} util={g.utilization} "
              f"({g.utilization_source}) busy={g.busy_seconds:.2f}s sampled={g.sampled_seconds:.2f}s "
              f"held_idle={g.held_idle_seconds:.2f}s problems={list(g.problems)}")
        for p in g.processes or ():
            print(f"    pid {p.pid} container={p.container_id and p.container_id[:12]} pod={p.pod_uid} "
                  f"mem={p.used_memory_bytes} sm={p.sm_utilization}")
holders = host.get("processes")
if holders is not None:
    for cid, c in holders.containers.items():
        print(f"holder {cid[:12]} pids={c.pids} threads={c.threads} run_delay={c.run_delay_seconds} "
              f"preempt={c.involuntary_switches} migrations={c.migrations} truncated={c.truncated}")
print(f"{'NVML call':<45}{'count':>7}{'total ms':>11}{'mean us':>10}{'max us':>10}{'errors':>8}{'timeouts':>9}")
for call in session.calls():
    mean = call.seconds / call.count * 1e6 if call.count else 0.0
    print(f"{call.name:<45}{call.count:>7}{call.seconds * 1000:>11.3f}{mean:>10.1f}{call.max_seconds * 1e6:>10.1f}"
          f"{call.errors:>8}{call.timeouts:>9}")
session.close()
sys.exit(0 if snapshot is not None else 1)
EOF
echo "== done; logs in $OUT"
