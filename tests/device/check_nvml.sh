#!/usr/bin/env bash
# Device check of the GPU part of numawatch, for a node with an NVIDIA GPU and driver. Run it from anywhere:
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
# What the inter-socket source would find here: uncore PMUs and the perf privilege.
echo "perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo absent)"
echo "PMUs: $(ls /sys/bus/event_source/devices 2>/dev/null | tr '\n' ' ')"
for gpu in /sys/bus/pci/devices/*; do
    [ "$(cat "$gpu/vendor" 2>/dev/null)" = 0x10de ] || continue
    echo "sysfs $(basename "$gpu") class=$(cat "$gpu/class") numa_node=$(cat "$gpu/numa_node" 2>/dev/null)" \
        "local_cpulist=$(cat "$gpu/local_cpulist" 2>/dev/null)"
done

echo "== installing numawatch"
# The venv sees the packages of the Python it was made from. When that Python is itself a venv (GPU images often keep
# PyTorch in one), --system-site-packages shows the base interpreter's packages, not that venv's: a .pth file hands
# the parent's site-packages down, so an offline machine that has the dependencies needs no index. WHEELS=<dir>
# installs the wheels found there first (packages the machine lacks), without an index.
VENV="$OUT/venv"
"$PYTHON" -m venv --system-site-packages --without-pip "$VENV"
PY="$VENV/bin/python"
"$PYTHON" -c '
import pathlib, site, sys
if sys.prefix != sys.base_prefix:
    parents = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    target = pathlib.Path(sys.argv[1], "lib", version, "site-packages", "_numawatch_parent.pth")
    target.write_text("".join(p + "\n" for p in parents))
    print("packages of the parent venv visible:", ", ".join(parents))
' "$VENV"
PIP=("$PY" -m pip)  # the parent's pip, through the .pth file or the system site-packages
: >"$OUT/pip.log"
if [ -n "${WHEELS:-}" ]; then
    "${PIP[@]}" install -q --no-index --no-deps "$WHEELS"/*.whl >>"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 2; }
fi
NUMAWATCH=("$VENV/bin/numawatch")
if ! "${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT" >>"$OUT/pip.log" 2>&1 \
    && ! "${PIP[@]}" install -q -e "$ROOT" >>"$OUT/pip.log" 2>&1; then
    # Offline with a setuptools older than the project's build needs: run the checkout itself.
    echo "pip could not install the checkout (last lines of $OUT/pip.log below): running it from the source tree"
    tail -n 3 "$OUT/pip.log"
    export PYTHONPATH="$ROOT/exporter${PYTHONPATH:+:$PYTHONPATH}"
    NUMAWATCH=("$PY" -m numawatch)
fi
"$PY" -c 'import prometheus_client, aiohttp, pyudev, yaml, pynvml, bcrypt' || {
    echo "dependencies missing (pass WHEELS=<dir of wheels> on an offline machine)"
    exit 2
}
"$PY" -c 'import importlib.metadata as m, numawatch; print("numawatch", numawatch.__version__, "nvidia-ml-py", m.version("nvidia-ml-py"))'

LOAD_PID=""
SERVE_PID=""
POD_DIR=""
cleanup() {
    [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null || true
    [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    if [ -n "$POD_DIR" ]; then  # the cgroups this script made, leaf first
        rmdir "$POD_DIR"/cri-containerd-*.scope "$POD_DIR" 2>/dev/null || true
        rmdir /sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice /sys/fs/cgroup/kubepods.slice 2>/dev/null || true
    fi
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
    # POD_CGROUP=1 on a machine without Kubernetes (cgroup v2, root): move the load into a cgroup laid out like a
    # BestEffort pod's container (systemd driver, containerd), so the process-to-container path and the holder
    # statistics run against a real GPU process. Never on a Kubernetes node: it would invent a pod there.
    if [ -n "${POD_CGROUP:-}" ] && [ -f /sys/fs/cgroup/cgroup.controllers ] && [ ! -d /sys/fs/cgroup/kubepods.slice ]; then
        POD_DIR=/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0d5e7a1c_6b2f_4c3e_9a1d_00000000c0de.slice
        CONTAINER_DIR="$POD_DIR/cri-containerd-$(printf 'c0de%.0s' $(seq 16)).scope"
        mkdir -p "$CONTAINER_DIR"
        for dir in /sys/fs/cgroup /sys/fs/cgroup/kubepods.slice /sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice "$POD_DIR"; do
            echo "+cpuset +memory" >"$dir/cgroup.subtree_control" 2>/dev/null || true
        done
        if echo "$LOAD_PID" >"$CONTAINER_DIR/cgroup.procs"; then
            echo "load moved into $CONTAINER_DIR"
        fi
    fi
    sleep 5
else
    echo "PyTorch with CUDA is not available: no load (the GPU will read idle)"
fi

echo "== numawatch check"
set +e
"${NUMAWATCH[@]}" check --format json >"$OUT/check.json" 2>"$OUT/check.err"
echo "exit code $? (0 clean, 1 findings, 2 unknown: could not run, or could not look; $OUT/check.err says why)"
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
"${NUMAWATCH[@]}" serve --listen "127.0.0.1:$PORT" --interval 5 >"$OUT/serve.log" 2>&1 &
SERVE_PID=$!
sleep 12  # two evaluations, so the busy counters have an interval to integrate
"$PY" - "$PORT" <<'EOF' | tee "$OUT/metrics.txt" | grep -E '^numawatch_(gpu|nvml)|^numawatch_source_up\{source="(nvml|processes|gpus_sysfs)"' || true
import sys, urllib.request

print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode())
EOF
kill "$SERVE_PID" 2>/dev/null || true
wait "$SERVE_PID" 2>/dev/null || true
SERVE_PID=""

echo "== numawatch capture, then check --from the bundle (offline evaluation of the same reading)"
set +e
"${NUMAWATCH[@]}" capture -o "$OUT/node.tar.gz" 2>"$OUT/capture.err"
echo "capture exit code $? ($(du -h "$OUT/node.tar.gz" 2>/dev/null | cut -f1))"
"${NUMAWATCH[@]}" check --from "$OUT/node.tar.gz" --format json >"$OUT/check-from.json" 2>>"$OUT/capture.err"
echo "check --from exit code $?"
set -e
"$PY" - "$OUT/check-from.json" <<'EOF'
import json, sys

report = json.load(open(sys.argv[1]))
for source in report.get("sources", []):
    print("source", source.get("name"), "up" if source.get("up") else "DOWN", source.get("reason", ""))
print("findings", sorted({finding["check"] for finding in report.get("findings", [])}))
EOF

echo "== the nvml and processes sources, read directly for ~10 s"
"$PY" - <<'EOF'
import sys
import time

from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import REFERENCE
from numawatch.metrics import render
from numawatch.nvml_session import NvmlSession
from numawatch.paths import Paths
session = NvmlSession()
start = time.perf_counter()
up = session.start()
print(f"nvmlInit: {'ok' if up else 'FAILED'} in {time.perf_counter() - start:.3f}s {session.reason}")
reader = HostReader(Paths.from_root("/"), nvml=session)
host = None
cpu: list[float] = []
for _ in range(20):
    began = time.process_time()  # a whole evaluation as serve does it: every source, the checks, the exposition
    host = reader.read()
    render(evaluate(host, REFERENCE))
    cpu.append(time.process_time() - began)
    time.sleep(0.5)
cpu.sort()
print(f"full evaluation CPU over {len(cpu)} readings: min {cpu[0] * 1000:.1f} ms median {cpu[len(cpu) // 2] * 1000:.1f} ms "
      f"max {cpu[-1] * 1000:.1f} ms (NVML calls included)")
for name, status in host.statuses.items():  # the last reading's cost of every source, on this machine
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
# The sample buffer itself, for the open questions of docs/gpu.md: its depth and spacing, and whether its
# timestamps and the per-process ones are wall-clock microseconds on one clock.
try:
    import statistics

    import pynvml

    handle = session.call("nvmlDeviceGetHandleByIndex", 0)
    _, samples = session.call("nvmlDeviceGetSamples", handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    stamps = sorted(int(sample.timeStamp) for sample in samples)
    gaps = [later - earlier for earlier, later in zip(stamps, stamps[1:])] or [0]
    print(f"GetSamples(lastSeen=0): {len(stamps)} samples over {(stamps[-1] - stamps[0]) / 1e6:.2f}s, gap median "
          f"{statistics.median(gaps) / 1000:.1f} ms min {min(gaps) / 1000:.1f} max {max(gaps) / 1000:.1f}; newest "
          f"{time.time() - stamps[-1] / 1e6:+.3f}s behind the wall clock")
    processes = session.call("nvmlDeviceGetProcessUtilization", handle, stamps[0])
    process_stamps = sorted(int(sample.timeStamp) for sample in processes)
    print(f"GetProcessUtilization(since the oldest GPU sample): {len(process_stamps)} samples, newest "
          f"{time.time() - process_stamps[-1] / 1e6:+.3f}s behind the wall clock, "
          f"{sum(stamps[0] <= stamp <= stamps[-1] for stamp in process_stamps)} inside the GPU samples' span")
except Exception as error:  # a device check: print what happened and go on
    print(f"sample buffer probe failed: {type(error).__name__}: {error}")
session.close()
sys.exit(0 if snapshot is not None else 1)
EOF
echo "== done; logs in $OUT"
