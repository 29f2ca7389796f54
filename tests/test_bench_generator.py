"""bench/generate_host.py builds a node numawatch reads completely, with the counts it was asked for, and that gives
node_exporter's cpu, cpufreq, meminfo_numa and vmstat collectors what a real node gives them.

A small size (32 CPUs, 12 pods, 80 IRQs, 200 processes) keeps this fast; the benchmark runs the same code at 384.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from bench_modules import load_bench
from numawatch import metrics
from numawatch.checks import evaluate
from numawatch.host import HostReader, read_host
from numawatch.intent import REFERENCE
from numawatch.model.interrupts import KIND_DEVICE
from numawatch.paths import Paths
from numawatch.sources.kernel import parse_affected_cpus, parse_governor
from numawatch.sources.numastat import parse_numastat
from numawatch.sources.topology import parse_meminfo_total
from open_audit import FORBIDDEN_NAMES, recording

gen = load_bench("bench_generate_host", "generate_host.py")
nefiles = sys.modules["node_exporter_files"]  # the generator's helper, imported from bench/ by the generator
SMALL = gen.HostSpec(cpus=32, gpus=4, pods=12, irqs=80, processes=200)
NODE_EXPORTER = Path(os.environ.get("NODE_EXPORTER", "/tmp/nodeexp/root/usr/bin/prometheus-node-exporter"))


@pytest.fixture(scope="module")
def drifted(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-host")
    return gen.generate(root, SMALL)


@pytest.fixture(scope="module")
def drifted_host(drifted):
    return read_host(Paths.from_root(drifted.root))


# What a file tree can feed. Down by design: intersocket (no uncore PMUs, as on a VM) and the NVML-based sources
# (nvml, processes), which need a GPU driver.
TREE_SOURCES = ("topology", "cgroups", "names", "kubelet_config", "kubelet_state", "gpus_sysfs", "kernel", "numastat",
                "interrupts", "irqs", "irqbalance")  # fmt: skip


@pytest.mark.slow
def test_every_source_a_file_tree_can_feed_reads_the_generated_host(drifted_host):
    down = {name: drifted_host.statuses[name].reason for name in TREE_SOURCES if not drifted_host.statuses[name].up}
    assert down == {}


def test_topology_has_the_requested_cpus_with_all_but_the_housekeeping_cores_isolated(drifted, drifted_host):
    topology = drifted_host.topology
    assert len(topology.online) == 32
    assert len(topology.isolated) == drifted.isolated_cpus == 28  # one housekeeping core (2 threads) per socket
    assert sorted(topology.node_ids) == [0, 1]


def test_cgroups_hold_every_pod_and_container_with_one_pause_sandbox_each(drifted, drifted_host):
    pods = drifted_host.cgroups.pods
    containers = [container for pod in pods for container in pod.containers]
    assert len(pods) == drifted.pods == 12
    assert len(containers) == drifted.container_cgroups
    assert sum(container.is_sandbox for container in containers) == 12
    assert all(1 <= len(pod.containers) - 1 <= 4 for pod in pods)


def test_runtime_bundles_name_every_container(drifted, drifted_host):
    names = drifted_host.names
    cgroup_ids = {c.container_id for pod in drifted_host.cgroups.pods for c in pod.containers}
    assert cgroup_ids <= set(names.containers)


def test_kubelet_state_pins_the_guaranteed_pods_and_assigns_every_gpu(drifted, drifted_host):
    state = drifted_host.kubelet_state
    assert state.cpu.policy_name == "static"
    pinned = sum(len(containers) for containers in state.cpu.entries.values())
    assert pinned == drifted.pinned_containers
    assigned = {device for entry in state.devices.entries for ids in entry.devices_per_numa.values() for device in ids}
    assert len(assigned) == 4


def test_only_the_nvidia_functions_are_gpus(drifted_host):
    gpus = drifted_host.gpus.gpus
    assert len(gpus) == 4  # the NICs and NVMe drives on the same bus are filtered out
    assert sorted(gpu.numa_node for gpu in gpus) == [0, 0, 1, 1]


def test_interrupts_and_irq_directories_cover_the_requested_irqs(drifted, drifted_host):
    rows = [row for row in drifted_host.get("interrupts").rows if row.kind == KIND_DEVICE]
    assert len(rows) == drifted.irqs == 80
    assert len(drifted_host.get("interrupts").cpus) == 32
    assert len(drifted_host.get("irqs").irqs) == 80


def test_proc_has_the_requested_processes_with_their_five_files(drifted):
    proc = Path(drifted.root) / "proc"
    pids = [entry for entry in os.listdir(proc) if entry.isdigit()]
    assert len(pids) == drifted.processes == 200
    for pid in pids:
        assert {"stat", "status", "comm", "cgroup", "schedstat"} <= set(os.listdir(proc / pid)), pid
        stat = (proc / pid / "stat").read_text()
        assert stat.startswith(f"{pid} (") and len(stat.rsplit(")", 1)[1].split()) == 50


def test_planted_drift_fires_its_checks(drifted, drifted_host):
    fired = {finding.check for finding in evaluate(drifted_host, REFERENCE).findings}
    assert set(drifted.planted) == {
        "container_cpuset_drift", "container_memory_remote", "pod_not_guaranteed", "irq_on_isolated_cpu",
        "thp_enabled", "node_workload_not_isolated",
    }  # fmt: skip
    assert set(drifted.planted) <= fired


def test_the_clean_host_has_no_findings(tmp_path):
    found = gen.generate(tmp_path / "clean", gen.HostSpec(cpus=16, gpus=2, pods=6, irqs=40, processes=80, drift=False))
    evaluation = evaluate(read_host(Paths.from_root(found.root)), REFERENCE)
    assert found.planted == ()
    assert [f"{f.check}: {f.message}" for f in evaluation.findings] == []


@pytest.mark.slow
def test_the_same_seed_writes_the_same_tree(tmp_path):
    small = gen.HostSpec(cpus=16, gpus=2, pods=5, irqs=30, processes=60)
    first, second = gen.generate(tmp_path / "a", small), gen.generate(tmp_path / "b", small)
    for rel in ("proc/interrupts", "var/lib/kubelet/cpu_manager_state", "proc/100000/stat", "proc/stat", "proc/vmstat",
                "sys/devices/system/node/node1/meminfo", "sys/devices/system/node/node0/numastat",
                "sys/devices/system/cpu/cpufreq/policy5/scaling_cur_freq",
                "sys/devices/system/cpu/cpu7/thermal_throttle/core_throttle_count"):  # fmt: skip
        assert (Path(first.root) / rel).read_bytes() == (Path(second.root) / rel).read_bytes(), rel


def test_sizes_scale_from_the_384_cpu_host():
    assert gen.HostSpec.scaled(384) == gen.HostSpec(cpus=384, gpus=8, pods=300, irqs=2000, processes=5000)
    small = gen.HostSpec.scaled(32)
    assert (small.gpus, small.pods, small.irqs, small.processes) == (4, 25, 167, 417)


def test_too_few_cpus_for_the_gpus_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="GPUs need more than"):
        gen.generate(tmp_path / "tiny", gen.HostSpec(cpus=8, gpus=4, pods=4, irqs=20, processes=40))
    assert not (tmp_path / "tiny").exists()


def test_a_non_empty_output_directory_is_refused(tmp_path):
    (tmp_path / "keep").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        gen.generate(tmp_path, SMALL)


# ------------------------------------------------------------------------------------------ node_exporter's files
def _cpu_dir(found, rel: str = "") -> Path:
    return Path(found.root) / "sys/devices/system/cpu" / rel


def test_every_cpu_has_an_intel_pstate_policy_with_the_files_node_exporter_reads(drifted):
    for cpu in range(32):
        policy = _cpu_dir(drifted, f"cpu{cpu}/cpufreq")  # the link node_exporter goes through
        read = {name: (policy / name).read_text() for name in os.listdir(policy)}
        assert read["scaling_driver"] == "intel_pstate\n"
        assert parse_governor(read["scaling_governor"]) in read["scaling_available_governors"].split()
        assert parse_affected_cpus(read["affected_cpus"]) == parse_affected_cpus(read["related_cpus"]) == {cpu}
        assert read["scaling_setspeed"] == "<unsupported>\n"  # a setpolicy driver: no speed to set
        khz = {name: int(read[name]) for name in ("cpuinfo_min_freq", "scaling_min_freq", "scaling_cur_freq",
                                                  "scaling_max_freq", "cpuinfo_max_freq")}  # fmt: skip
        assert khz["cpuinfo_min_freq"] <= khz["scaling_min_freq"] <= khz["scaling_cur_freq"] <= khz["scaling_max_freq"]
        assert khz["scaling_max_freq"] <= khz["cpuinfo_max_freq"] == 3900000
        assert int(read["cpuinfo_transition_latency"]) == 0
        assert "cpuinfo_cur_freq" not in read and "stats" not in read  # intel_pstate in active mode has neither


def test_thermal_throttle_counts_are_per_core_and_per_package(drifted, drifted_host):
    topology = drifted_host.topology
    cores: dict[tuple[int, int], set[str]] = {}
    packages: dict[int, set[str]] = {}
    for cpu in range(32):
        directory = _cpu_dir(drifted, f"cpu{cpu}/thermal_throttle")
        counts = {name: (directory / name).read_text() for name in os.listdir(directory)}
        assert sorted(counts) == sorted(f"{scope}_throttle_{what}" for scope in ("core", "package")
                                        for what in ("count", "max_time_ms", "total_time_ms"))  # fmt: skip
        assert all(re.fullmatch(r"\d+\n", text) for text in counts.values()), counts
        package = int((_cpu_dir(drifted, f"cpu{cpu}/topology/physical_package_id")).read_text())
        core = int((_cpu_dir(drifted, f"cpu{cpu}/topology/core_id")).read_text())
        cores.setdefault((package, core), set()).add(counts["core_throttle_count"])
        packages.setdefault(package, set()).add(counts["package_throttle_count"])
    assert len(cores) == 16 and all(len(values) == 1 for values in cores.values())  # SMT siblings agree
    assert sorted(packages) == sorted(topology.node_ids) and all(len(v) == 1 for v in packages.values())


def test_proc_stat_has_every_line_and_field_the_kernel_prints(drifted):
    lines = (Path(drifted.root) / "proc/stat").read_text().splitlines()
    cpu_lines = [line.split() for line in lines if line.startswith("cpu")]
    assert [fields[0] for fields in cpu_lines] == ["cpu"] + [f"cpu{cpu}" for cpu in range(32)]
    assert all(len(fields) == 11 and all(f.isdigit() for f in fields[1:]) for fields in cpu_lines)
    assert [int(v) for v in cpu_lines[0][1:]] == [sum(int(f[i]) for f in cpu_lines[1:]) for i in range(1, 11)]
    per_cpu_ticks = {sum(map(int, fields[1:])) for fields in cpu_lines[1:]}
    assert max(per_cpu_ticks) - min(per_cpu_ticks) < 1000  # every CPU up as long, at USER_HZ
    rest = dict(line.split(" ", 1) for line in lines if not line.startswith("cpu"))
    assert list(rest) == ["intr", "ctxt", "btime", "processes", "procs_running", "procs_blocked", "softirq"]
    intr = [int(value) for value in rest["intr"].split()]
    interrupts = Path(drifted.root) / "proc/interrupts"
    highest = max(int(line.split(":")[0]) for line in interrupts.read_text().splitlines()[1:]
                  if line.split(":")[0].strip().isdigit())  # fmt: skip
    assert len(intr) - 1 == nefiles.nr_irqs(32, highest) > highest  # one count per IRQ number below nr_irqs
    assert intr[0] > sum(intr[1:]) > 0  # the total adds the architecture's LOC/NMI/... counts
    softirq = [int(value) for value in rest["softirq"].split()]
    assert len(softirq) == 11 and softirq[0] == sum(softirq[1:])
    assert int(rest["btime"]) == nefiles.BTIME


def test_proc_vmstat_has_a_real_kernels_keys_with_numastat_summed(drifted, drifted_host, realkernel_root):
    pairs = [line.split(" ") for line in (Path(drifted.root) / "proc/vmstat").read_text().splitlines()]
    keys = [key for key, _ in pairs]
    real = [line.split()[0] for line in (realkernel_root / "proc/vmstat").read_text().splitlines()]
    assert keys == list(nefiles.VMSTAT_KEYS) == real
    values = {key: int(value) for key, value in pairs}
    nodes = drifted_host.get("numastat").nodes
    assert values["numa_hit"] == sum(node.numastat["numa_hit"] for node in nodes.values())
    assert values["pswpin"] == values["pswpout"] == 0  # no swap on a GPU node


def test_node_meminfo_has_the_kernels_lines_and_numawatch_reads_memtotal(drifted, drifted_host, realkernel_root):
    real = [line.split()[2] for line in (realkernel_root / "sys/devices/system/node/node0/meminfo").read_text()
            .splitlines()]  # fmt: skip
    for node in drifted_host.topology.nodes.values():
        path = Path(drifted.root) / f"sys/devices/system/node/node{node.id}/meminfo"
        text = path.read_text()
        lines = text.splitlines()
        assert [line.split()[2] for line in lines] == real
        assert all(re.fullmatch(rf"Node {node.id} \S+: +\d+( kB)?", line) for line in lines), text
        values = {line.split()[2].rstrip(":"): int(line.split()[3]) for line in lines}
        assert values["MemUsed"] == values["MemTotal"] - values["MemFree"] > 0
        assert parse_meminfo_total(text) == node.mem_total_bytes == 64 << 30
        assert values["HugePages_Total"] == node.hugepages_total[1048576]  # default_hugepagesz=1G on this node


def test_numastat_counters_add_up_as_the_kernel_counts_them(drifted, drifted_host):
    counters = {}
    for node in (0, 1):
        path = Path(drifted.root) / f"sys/devices/system/node/node{node}/numastat"
        counters[node] = parse_numastat(path.read_text(), str(path))
        assert counters[node] == dict(drifted_host.get("numastat").nodes[node].numastat)
        assert counters[node]["local_node"] + counters[node]["other_node"] == (
            counters[node]["numa_hit"] + counters[node]["numa_miss"])  # fmt: skip
    assert counters[0]["numa_foreign"] == counters[1]["numa_miss"] > 0
    assert counters[1]["numa_foreign"] == counters[0]["numa_miss"] > 0


# --------------------------------------------------------------------------------------------------- isolated CPUs
def test_a_full_evaluation_of_the_generated_node_opens_no_frequency_file(drifted):
    root = Path(drifted.root)
    assert (root / "sys/devices/system/cpu/cpufreq/policy9/scaling_cur_freq").is_file()  # there to be avoided
    reader = HostReader(Paths.from_root(root))
    with recording() as opened:
        reader.read()
        metrics.render(evaluate(reader.read(), REFERENCE))  # two readings, as serve: the rate checks run too
    assert any(path.endswith("/scaling_governor") for path in opened)  # the recorder saw cpufreq being read
    names = {Path(path).name for path in opened}
    assert names.isdisjoint(FORBIDDEN_NAMES)


# --------------------------------------------------------------------------------------------------- node_exporter
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _scrape(port: int, process: subprocess.Popen) -> str:
    deadline = time.monotonic() + 30  # start-up, not a measurement
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                return response.read().decode()
        except (urllib.error.URLError, ConnectionError):
            if process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.skipif(not NODE_EXPORTER.is_file(), reason=f"no node_exporter at {NODE_EXPORTER} (bench/run.py gets it)")
def test_node_exporters_four_collectors_read_the_generated_node_without_error(drifted):
    port = _free_port()
    root = drifted.root
    process = subprocess.Popen(
        [str(NODE_EXPORTER), f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
         "--collector.cpu", "--collector.cpufreq", "--collector.meminfo_numa", "--collector.vmstat",
         f"--path.procfs={root}/proc", f"--path.sysfs={root}/sys", f"--path.rootfs={root}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        body = _scrape(port, process)
    finally:
        process.terminate()
        process.wait(timeout=10)
    success = dict(re.findall(r'^node_scrape_collector_success\{collector="(\w+)"\} (\d)$', body, re.MULTILINE))
    assert success == {"cpu": "1", "cpufreq": "1", "meminfo_numa": "1", "vmstat": "1"}

    def series(name: str) -> list[str]:
        return re.findall(rf"^{name}\{{.*$", body, re.MULTILINE)

    assert len(series("node_cpu_scaling_frequency_hertz")) == 32
    assert len(series("node_cpu_frequency_max_hertz")) == 32
    assert not series("node_cpu_frequency_hertz")  # from cpuinfo_cur_freq, which intel_pstate does not have
    assert len(series("node_cpu_seconds_total")) == 32 * 8
    assert len(series("node_cpu_core_throttles_total")) == 16 and len(series("node_cpu_package_throttles_total")) == 2
    assert len(series("node_memory_numa_MemTotal")) == 2 and len(series("node_memory_numa_numa_miss_total")) == 2
    assert re.search(r"^node_vmstat_pgfault \d", body, re.MULTILINE)
