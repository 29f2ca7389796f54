"""The cgroups source against this machine's real cgroup v1 hierarchies and a real process.

Creates ``kubepods/pod<uid>/<64hex>`` (cgroupfs-driver naming) in the cpuset and memory hierarchies, starts a
``sleep`` inside it (plus a ``pause`` sandbox, a copy of sleep so its comm is "pause"), and checks that numawatch
reads back the kernel's own effective cpuset and memory placement, also as serve's staggered reader does.
Everything it creates is removed afterwards; it skips when it cannot write cgroups or when a kubepods cgroup already
exists (not ours to touch).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from numawatch.cpuset import format_cpulist, parse_cpulist
from numawatch.paths import Paths
from numawatch.refresh import GUARANTEED_CONTAINERS, GUARANTEED_PODS, PLACEMENT
from numawatch.sources import cgroups
from source_inputs import Driven

pytestmark = pytest.mark.realhost

CGROUP = Path("/sys/fs/cgroup")
HIERARCHIES = ("cpuset", "memory")
POD_UID = "7d1e5c2a-9f3b-4e8d-a6c1-0b2f4e6a8c0d"
APP_ID = "a0" * 32
SANDBOX_ID = "5a" * 32
KUBEPODS = "kubepods"
POD = f"{KUBEPODS}/pod{POD_UID}"


def _writable_v1() -> str | None:
    """Why the test cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    for hierarchy in HIERARCHIES:
        base = CGROUP / hierarchy
        marker = {"cpuset": "cpuset.cpus", "memory": "memory.numa_stat"}[hierarchy]
        if not (base / marker).exists():
            return f"no cgroup v1 {hierarchy} hierarchy at {base}"
        if not os.access(base, os.W_OK):
            return f"{base} is not writable"
    return None


def _remove_tree(base: Path) -> None:
    """rmdir the cgroup tree bottom-up (cgroup directories cannot be removed with rmtree: their files are not files)."""
    if not base.is_dir():
        return
    for directory, subdirs, _files in os.walk(base, topdown=False):
        for name in subdirs:
            os.rmdir(os.path.join(directory, name))
    os.rmdir(base)


@pytest.fixture
def real_pod(tmp_path):
    reason = _writable_v1()
    if reason:
        pytest.skip(reason)
    created: list[Path] = []
    processes: list[subprocess.Popen] = []
    try:
        for hierarchy in HIERARCHIES:
            try:
                os.mkdir(CGROUP / hierarchy / KUBEPODS)  # atomic: fails if anyone else has a kubepods cgroup
            except FileExistsError:
                pytest.skip(f"{CGROUP / hierarchy / KUBEPODS} already exists on this machine; not touching it")
            except OSError as error:
                pytest.skip(f"cannot create a cgroup in {CGROUP / hierarchy}: {error}")
            created.append(CGROUP / hierarchy / KUBEPODS)

        root_cpus = parse_cpulist((CGROUP / "cpuset/cpuset.cpus").read_text())
        root_mems = parse_cpulist((CGROUP / "cpuset/cpuset.mems").read_text())
        app_cpus = frozenset({max(root_cpus)})
        mems = frozenset({min(root_mems)})
        levels = [
            (KUBEPODS, root_cpus, root_mems),
            (POD, root_cpus, root_mems),
            (f"{POD}/{SANDBOX_ID}", root_cpus, root_mems),
            (f"{POD}/{APP_ID}", app_cpus, mems),
        ]
        for hierarchy in HIERARCHIES:
            for rel, cpus, level_mems in levels:
                directory = CGROUP / hierarchy / rel
                directory.mkdir(exist_ok=True)
                if hierarchy == "cpuset":  # v1 cpusets start empty: every level needs cpus and mems before tasks
                    (directory / "cpuset.cpus").write_text(format_cpulist(cpus))
                    (directory / "cpuset.mems").write_text(format_cpulist(level_mems))

        def starter(container_id):
            def join():  # runs in the child before exec, so everything sleep maps is charged to the container
                for hierarchy in HIERARCHIES:
                    with open(CGROUP / hierarchy / POD / container_id / "cgroup.procs", "w") as procs:
                        procs.write("0")

            return join

        pause = tmp_path / "pause"
        shutil.copy(shutil.which("sleep"), pause)
        processes.append(subprocess.Popen([str(pause), "300"], preexec_fn=starter(SANDBOX_ID)))
        # The app writes 8 MiB of anonymous memory after joining, so its cgroup is charged for pages it surely
        # touched (an exec'd binary's file pages may already sit in the page cache, charged to someone else).
        app = subprocess.Popen(
            [sys.executable, "-c", "import time; b = b'x' * (8 << 20); print('ready', flush=True); time.sleep(300)"],
            preexec_fn=starter(APP_ID),
            stdout=subprocess.PIPE,
            text=True,
        )
        processes.append(app)
        assert app.stdout is not None and app.stdout.readline().strip() == "ready"
        yield {"app_pid": processes[1].pid, "pause_pid": processes[0].pid, "cpus": app_cpus, "mems": mems}
    finally:
        for process in processes:
            process.kill()
            process.wait()
        for base in created:
            _remove_tree(base)
        leftovers = [str(base) for base in created if base.exists()]
        assert not leftovers, f"could not remove {leftovers}"


def _numa_bytes_from_file() -> dict[int, int]:
    """Read the kernel's memory.numa_stat independently of the source: total= line, pages times page size."""
    text = (CGROUP / "memory" / POD / APP_ID / "memory.numa_stat").read_text()
    total = next(line for line in text.splitlines() if line.startswith("total="))
    page = os.sysconf("SC_PAGE_SIZE")
    return {int(item[1 : item.index("=")]): int(item.split("=")[1]) * page for item in total.split()[1:]}


def test_reads_a_real_container_cgroup_with_its_kernel_cpuset_and_memory(tmp_path, real_pod):
    before = _numa_bytes_from_file()
    result = cgroups.read(Paths.from_root(tmp_path / "root", sysfs="/sys", procfs="/proc"))
    after = _numa_bytes_from_file()

    assert (result.version, result.driver) == (1, "cgroupfs")
    pod = result.pod(POD_UID)
    assert pod is not None and pod.qos == "guaranteed"
    assert pod.cgroup_path.startswith(f"{KUBEPODS}/")
    by_id = {container.container_id: container for container in pod.containers}
    assert set(by_id) == {APP_ID, SANDBOX_ID}

    app = by_id[APP_ID]
    assert app.cgroup_path == f"{POD}/{APP_ID}"
    assert app.cpus_effective == real_pod["cpus"]
    assert app.mems_effective == real_pod["mems"]
    assert app.pids == (real_pod["app_pid"],)
    assert app.is_sandbox is False
    assert dict(app.numa_bytes) in (before, after)
    assert sum(app.numa_bytes.values()) > 0  # the exec'd sleep's pages were charged to this cgroup
    assert set(app.numa_bytes) >= real_pod["mems"]

    sandbox = by_id[SANDBOX_ID]
    assert sandbox.is_sandbox is True
    assert sandbox.pids == (real_pod["pause_pid"],)


def test_the_real_kernel_agrees_with_the_process_view(tmp_path, real_pod):
    status = Path(f"/proc/{real_pod['app_pid']}/status").read_text()
    allowed = next(line.split(":", 1)[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list:"))
    result = cgroups.read(Paths.from_root(tmp_path / "root", sysfs="/sys", procfs="/proc"))
    app = next(c for c in result.pod(POD_UID).containers if c.container_id == APP_ID)
    assert app.cpus_effective == parse_cpulist(allowed)


def test_a_staggered_reader_reads_real_cpusets_in_the_pods_turns_and_each_memory_placement_once_in_its_round(
    tmp_path, real_pod, monkeypatch
):
    paths = Paths.from_root(tmp_path / "root", sysfs="/sys", procfs="/proc")
    share = 4
    # The Guaranteed pod's containers take PLACEMENT's round for their memory placement (the table reads them every
    # 2 readings: tests/test_cgroups_stagger.py), so that the placement
    # rotation's rules are seen on the real cgroups.
    reader = Driven("cgroups").rotating_like(GUARANTEED_CONTAINERS, PLACEMENT)
    reader.set_stagger(share)
    first = reader.read(paths)  # both containers are new: read in full
    assert all(c.numa_bytes is not None for c in first.pod(POD_UID).containers)
    reader.read(paths)  # the application's "not pause" verdict is settled by a second reading

    real_read = cgroups._read
    opened: list[str] = []
    monkeypatch.setattr(cgroups, "_read", lambda path, *args: opened.append(path) or real_read(path, *args))
    root_cpus = parse_cpulist((CGROUP / "cpuset/cpuset.cpus").read_text())
    moved = frozenset({min(root_cpus)})
    (CGROUP / "cpuset" / POD / APP_ID / "cpuset.cpus").write_text(format_cpulist(moved))

    seen = []
    for _ in range(reader.readings_per_round(PLACEMENT)):  # one round of the memory placement's rotation
        app = next(c for c in reader.read(paths).pod(POD_UID).containers if c.container_id == APP_ID)
        seen.append(app.cpus_effective == moved)
        assert app.numa_bytes is not None and sum(app.numa_bytes.values()) > 0
    # the kernel's new effective cpuset from the (Guaranteed) pod's turn on, within its round
    first = seen.index(True)
    assert first < reader.readings_per_round(GUARANTEED_PODS) and all(seen[first:])
    numa_reads = sorted(path.rsplit("/", 2)[1] for path in opened if path.endswith("/memory.numa_stat"))
    assert numa_reads == sorted([APP_ID, SANDBOX_ID])
    # cgroup.procs decides only the (settled) sandbox verdicts: read in the containers' turns, as memory.numa_stat
    procs_reads = sorted(path.rsplit("/", 2)[1] for path in opened if path.endswith("/cgroup.procs"))
    assert procs_reads == numa_reads
