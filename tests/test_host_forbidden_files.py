"""Do not disturb the patient: a full evaluation never opens files whose read interrupts or stalls the workload.

- ``scaling_cur_freq`` / ``cpuinfo_cur_freq``: the kernel asks the CPU itself for its frequency (an IPI to that
  CPU, up to tens of ms per read on some kernels), isolated CPUs included.
- MSRs (``/dev/cpu/<n>/msr``): rdmsr runs on the target CPU.
- ``/proc/<pid>/numa_maps``: takes the target's mmap lock and walks its page tables (seconds on large processes).

Every ``open`` (builtins.open, io.open and os.open all raise the ``open`` audit event) during reading every source,
running every check and rendering every metric family is recorded and compared with that list, on a fake host that
has all these files, on the real-kernel capture, and on this machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakehost.kernel import FakeIrq, add_irqbalance, add_irqs, add_kernel_settings, add_numastat
from fakehost.pods import ContainerSpec, add_pod
from fakehost.topology import add_topology
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader
from numawatch.intent import Intent
from numawatch.paths import Paths
from open_audit import FORBIDDEN_NAMES, recording


def full_evaluation(paths: Paths) -> None:
    reader = HostReader(paths)
    reader.read()
    host = reader.read()  # a second reading, as serve does, so the rate checks run too
    metrics.render(evaluate(host, Intent()))


def forbidden(opened: list[str]) -> list[str]:
    return [path for path in opened if Path(path).name in FORBIDDEN_NAMES or "/dev/cpu/" in path]


def test_a_fake_host_full_of_forbidden_files_has_none_opened(fake_host):
    layout = add_topology(fake_host, sockets=2, cores_per_socket=4, threads_per_core=1, cmdline="isolcpus=2-3,6-7")
    add_kernel_settings(fake_host, governors="performance", cpus=layout.online)
    for cpu in layout.online:
        fake_host.write(f"sys/devices/system/cpu/cpufreq/policy{cpu}/scaling_cur_freq", "3000000")
        fake_host.write(f"sys/devices/system/cpu/cpufreq/policy{cpu}/cpuinfo_cur_freq", "3000000")
        fake_host.write(f"dev/cpu/{cpu}/msr", b"\0" * 8)
    pod = add_pod(
        fake_host, uid="0d1e2f3a-1111-4222-8333-944455556666", qos="guaranteed", namespace="ml", name="vllm-0",
        containers=[ContainerSpec("vllm", cpus="2-3", mems="0", numa_bytes={0: 1 << 20}, pids=(5001, 5002))],
    )
    for handle in pod.containers:
        for pid in handle.pids:
            fake_host.write(f"proc/{pid}/numa_maps", "7f0000000000 default anon=1 N0=1 kernelpagesize_kB=4")
    add_irqs(fake_host, sorted(layout.online), [FakeIrq(40, "eth0", frozenset({0}), frozenset({0}))])
    for node in layout.nodes:
        add_numastat(fake_host, node, numa_hit=10)
    add_irqbalance(fake_host, pid=4242, environ={"IRQBALANCE_BANNED_CPULIST": "2-3,6-7"})

    with recording() as opened:
        full_evaluation(fake_host.paths)

    assert any(path.endswith("scaling_governor") for path in opened)  # the recorder works: cpufreq was looked at
    assert any(path.endswith("/proc/interrupts") for path in opened)
    assert forbidden(opened) == []


def test_the_real_kernel_capture_has_none_opened(realkernel_root):
    with recording() as opened:
        full_evaluation(Paths.from_root(realkernel_root))

    assert opened
    assert forbidden(opened) == []


@pytest.mark.realhost
def test_this_machine_has_none_opened():
    with recording() as opened:
        full_evaluation(Paths.from_root("/"))

    assert any(path == "/proc/interrupts" for path in opened)
    assert forbidden(opened) == []
