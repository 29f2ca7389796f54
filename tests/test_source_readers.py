"""The stateful readers serve keeps per HostReader (SourceSpec.factory) for the large-node hot path: they read the
same as the one-off ``read(paths)`` of their source, remember only what cannot change (a sandbox stays a sandbox,
an IRQ keeps its mode, a cpufreq policy its CPUs while ``online`` does not change), and still see every change that
matters between readings. Also the block-wise /proc/interrupts reader against the whole-file parser."""

from __future__ import annotations

import os
import random
import tracemalloc
import types
import zlib

import pytest
from fakehost.kernel import FakeIrq, add_irqs, add_kernel_settings, format_interrupts
from fakehost.kubelet import write_cpu_manager_state
from fakehost.pods import ContainerSpec, add_pod, remove_pod, set_container_cpus, set_numa_bytes
from fakehost.topology import add_topology
from hypothesis import given, settings
from hypothesis import strategies as st
from numawatch import host as host_module
from numawatch.confined import HostFs
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import HostReader, Inputs, read_host_window
from numawatch.model.workloads import QOS_BURSTABLE, QOS_GUARANTEED
from numawatch.paths import Paths
from numawatch.refresh import (
    AFFINITIES,
    GOVERNORS,
    GUARANTEED_CONTAINERS,
    GUARANTEED_PODS,
    PLACEMENT,
    POLICIES,
    SHARED_PODS,
)
from numawatch.sources import cgroups, interrupts, irqs, kernel, kubelet_state, topology
from numawatch.sources._files import DEFAULT_READ_LIMIT
from numawatch.sources.cgroups import parse_numa_stat_v2
from numawatch.sources.kernel import parse_affected_cpus
from source_inputs import CgroupsReaderWithState, Driven

UID = "5f0c3a9e-7b21-4d8e-9c4a-1e2f3a4b5c6d"
OTHER_UID = "0b9e8d7c-6a5f-4e3d-8c2b-a1b2c3d4e5f6"
# The readers of files a test writes under its tmp_path, confined to "/" as a tree with no root of its own is.
HOST_FS = HostFs()


def factory_of(name: str):
    """The source read again and again as a HostReader reads it (its refresh policy, its memory handed on)."""
    return lambda: Driven(name)


def recording(monkeypatch, module, name: str) -> list[str]:
    """Record the path argument of every call of ``module.name``: its first, or the one after the HostFs (a
    ``HostFs`` method, or a helper handed the fs first)."""
    real = getattr(module, name)
    calls: list[str] = []

    def wrapper(*args, **kwargs):
        calls.append(os.fspath(args[1] if isinstance(args[0], HostFs) else args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


# --------------------------------------------------------------------------------------------------- cgroups
def two_pods(fake_host):
    guaranteed = add_pod(
        fake_host, uid=UID, qos=QOS_GUARANTEED, namespace="llm", name="vllm-0",
        containers=[ContainerSpec("vllm", cpus="4-7", mems="0", numa_bytes={0: 1 << 30}, pids=(4242,))],
    )  # fmt: skip
    burstable = add_pod(
        fake_host, uid=OTHER_UID, qos=QOS_BURSTABLE, namespace="web", name="api-0",
        containers=[ContainerSpec("api", cpus="0-3", mems="0", pids=(5151,)),
                    ContainerSpec("sidecar", cpus="0-3", mems="0", pids=(5152,))],
    )  # fmt: skip
    return guaranteed, burstable


def test_the_cgroups_reader_is_what_serve_uses_and_reads_the_same_as_a_one_off_read(fake_host):
    two_pods(fake_host)
    reader = factory_of("cgroups")()

    assert reader.spec.incremental is not None and reader.spec.factory is None
    for _ in range(3):
        assert reader.read(fake_host.paths) == cgroups.read(fake_host.paths)


def test_a_sandbox_verdict_is_remembered_so_comm_is_read_only_until_it_is_certain(fake_host, monkeypatch):
    two_pods(fake_host)
    reader = CgroupsReaderWithState()
    reads = recording(monkeypatch, cgroups, "_read")

    def comm_reads() -> int:
        count = sum(path.endswith("/comm") for path in reads)
        reads.clear()
        return count

    first = reader.read(fake_host.paths)
    assert comm_reads() == 5  # two sandboxes and three application containers
    reader.read(fake_host.paths)
    assert comm_reads() == 3  # sandboxes are known; "not pause" needs a second look (runtime init vs. app)
    third = reader.read(fake_host.paths)
    assert comm_reads() == 0
    assert third == first
    assert sum(c.is_sandbox for pod in third.pods for c in pod.containers) == 2


def test_a_sandbox_caught_while_its_runtime_init_runs_is_recognised_once_it_runs_pause(fake_host):
    guaranteed, _ = two_pods(fake_host)
    pause_pid = guaranteed.sandbox.pids[0]
    fake_host.write(f"proc/{pause_pid}/comm", "runc:[2:INIT]")
    reader = CgroupsReaderWithState()

    before = reader.read(fake_host.paths).pod(UID)
    fake_host.write(f"proc/{pause_pid}/comm", "pause")
    after = reader.read(fake_host.paths).pod(UID)

    sandbox_id = guaranteed.sandbox.container_id
    assert [c.is_sandbox for c in before.containers if c.container_id == sandbox_id] == [False]
    assert [c.is_sandbox for c in after.containers if c.container_id == sandbox_id] == [True]


def test_a_new_first_process_is_asked_again(fake_host):
    guaranteed, _ = two_pods(fake_host)
    sandbox = guaranteed.sandbox
    reader = CgroupsReaderWithState()
    reader.read(fake_host.paths)
    reader.read(fake_host.paths)

    # The pause process is gone and something else is the first process of that cgroup now.
    fake_host.write(f"sys/fs/cgroup/{sandbox.cgroup_path}/cgroup.procs", "7777")
    fake_host.write("proc/7777/comm", "sh")
    found = reader.read(fake_host.paths).pod(UID)

    assert [c.is_sandbox for c in found.containers if c.container_id == sandbox.container_id] == [False]


def test_the_reader_forgets_containers_that_are_gone(fake_host):
    guaranteed, burstable = two_pods(fake_host)
    reader = CgroupsReaderWithState()
    reader.read(fake_host.paths)
    remove_pod(fake_host, burstable)

    reader.read(fake_host.paths)

    kept = {guaranteed.sandbox.container_id, guaranteed.container("vllm").container_id}
    assert set(reader.sandboxes) == kept


def test_cpuset_changes_are_seen_on_the_next_reading_and_equal_lists_share_one_set(fake_host):
    guaranteed, _ = two_pods(fake_host)
    reader = CgroupsReaderWithState()
    first = reader.read(fake_host.paths)
    api, sidecar = (c for c in first.pod(OTHER_UID).containers if not c.is_sandbox)
    assert api.cpus_effective is sidecar.cpus_effective  # one object for one list: cheap to compare downstream

    set_container_cpus(fake_host, guaranteed, "vllm", "4-5")
    second = reader.read(fake_host.paths)

    (vllm,) = (c for c in second.pod(UID).containers if not c.is_sandbox)
    assert vllm.cpus_effective == frozenset({4, 5})


@pytest.mark.parametrize(
    "data",
    [
        b"anon N0=1 N1=2\nfile N0=10 N1=20\nkernel_stack N0=0 N1=0\n",
        b"anon N0=7\nfile N0=5\n",
        b"anon N1=3 N0=4\nfile N0=1 N1=1\nshmem N0=0 N1=0\n",
        b"anon N0=1 N2=2\nfile N0=10 N3=20\n",  # nodes listed differently in the two lines
        b"anon N0=1 N0=2\nfile N0=10\n",  # a node twice: the last one counts, as in the search by key
    ],
)
def test_numa_stat_v2_in_the_kernel_layout_parses_as_the_search_by_key_does(data):
    # A first line of another key forces the search by key; the result must be the same.
    assert parse_numa_stat_v2(data) == parse_numa_stat_v2(b"kernel N0=0\n" + data)


@pytest.mark.parametrize(
    "data",
    [b"anon N0=1  N1=2\nfile N0=1 N1=1\n", b"anon N0=x\nfile N0=1\n", b"anon N0=1\n\nfile N0=1\n", b"anon N0=1\n"],
)
def test_numa_stat_v2_outside_the_kernel_layout_takes_the_careful_path(data):
    try:
        fast = parse_numa_stat_v2(data)
    except ValueError as error:
        fast = str(error)
    try:
        slow = parse_numa_stat_v2(b"kernel N0=0\n" + data)
    except ValueError as error:
        slow = str(error)
    assert fast == slow


# --------------------------------------------------------------------------------------------------- irqs
IRQ_CPUS = list(range(8))


def some_irqs(fake_host, extra=()):
    add_irqs(
        fake_host,
        IRQ_CPUS,
        [
            FakeIrq(30, "eth0", frozenset({0, 1}), frozenset({1})),
            FakeIrq(31, "nvme0q1", frozenset({4}), frozenset({4}), managed=True),
            FakeIrq(32, "old", frozenset({2, 3})),
            *extra,
        ],
    )


def test_the_irqs_reader_reads_the_same_as_a_one_off_read(fake_host):
    some_irqs(fake_host)
    reader = factory_of("irqs")()

    assert reader.spec.incremental is not None and reader.spec.factory is None
    for _ in range(3):
        assert reader.read(fake_host.paths) == irqs.read(fake_host.paths)


def test_an_irq_seen_before_is_not_stat_ed_again_but_a_new_one_is(fake_host, monkeypatch):
    some_irqs(fake_host)
    reader = Driven("irqs")
    stats = recording(monkeypatch, irqs, "_mode_writable")

    reader.read(fake_host.paths)
    assert len(stats) == 3
    stats.clear()
    reader.read(fake_host.paths)
    assert stats == []

    some_irqs(fake_host, extra=[FakeIrq(33, "gpu", frozenset({0}), frozenset({0}), managed=True)])
    found = reader.read(fake_host.paths)
    assert [path.rsplit("/", 1)[1] for path in stats] == ["33"]
    assert found.irqs[33].writable is False


def test_an_irq_without_effective_affinity_is_not_asked_for_it_again(fake_host, monkeypatch):
    some_irqs(fake_host)  # IRQ 32 has no effective_affinity_list, as on kernels without the option
    reader = Driven("irqs")
    reads = recording(monkeypatch, HostFs, "read_small")
    reader.read(fake_host.paths)
    assert any(path.endswith("/32/effective_affinity_list") for path in reads)
    reads.clear()

    found = reader.read(fake_host.paths)

    assert not any(path.endswith("/32/effective_affinity_list") for path in reads)
    assert any(path.endswith("/32/smp_affinity_list") for path in reads)
    assert (found.irqs[32].affinity, found.irqs[32].effective) == ({2, 3}, None)
    assert found == irqs.read(fake_host.paths)


def test_affinity_moved_between_readings_is_seen_by_the_reader(fake_host):
    some_irqs(fake_host)
    reader = Driven("irqs")
    reader.read(fake_host.paths)

    fake_host.write("proc/irq/30/smp_affinity_list", "5")
    fake_host.write("proc/irq/30/effective_affinity_list", "5")
    found = reader.read(fake_host.paths)

    assert (found.irqs[30].affinity, found.irqs[30].effective, found.irqs[30].writable) == ({5}, {5}, True)


def test_an_irq_that_went_away_and_came_back_has_its_mode_read_again(fake_host):
    some_irqs(fake_host)
    reader = Driven("irqs")
    reader.read(fake_host.paths)
    fake_host.remove("proc/irq/30")
    assert 30 not in reader.read(fake_host.paths).irqs

    # Same number, another driver: now a managed (read-only) vector.
    add_irqs(fake_host, IRQ_CPUS, [FakeIrq(30, "mlx5_comp0", frozenset({6}), frozenset({6}), managed=True)])
    found = reader.read(fake_host.paths)

    assert found.irqs[30].writable is False


# --------------------------------------------------------------------------------------------------- interrupts
def varied_interrupts() -> bytes:
    """Device rows with counts on some CPUs, long names, a wide count that shifts its row, the old cell layout is
    not mixed in (one file has one layout), ERR/MIS and a row without a trailing newline."""
    cpus = [0, 1, 2, 3, 5, 6, 7, 9]  # CPUs 4 and 8 offline: columns map through the header
    rows = [FakeIrq(n, f"dev{n}-queue-with-a-long-name" * (n % 3 + 1), frozenset({0}),
                    counts={cpus[n % 8]: n * 1000, cpus[(n * 3) % 8]: n}) for n in range(24, 90)]  # fmt: skip
    named = {"LOC": {cpu: 12345678901 if cpu == 5 else 1000 + cpu for cpu in cpus}, "RES": {1: 5, 9: 7}, "CAL": {}}
    return format_interrupts(cpus, rows, named).rstrip("\n").encode()


@pytest.mark.parametrize("block", [1, 7, 11, 64, 100, 1000, 4096, 1 << 20])
def test_reading_in_blocks_gives_what_parsing_the_whole_file_gives(tmp_path, block):
    data = varied_interrupts()
    path = tmp_path / "interrupts"
    path.write_bytes(data)
    for watched in ({0, 1}, {2, 3, 5, 6, 7, 9}, set(), {4, 8, 100}):
        expected = interrupts.parse_interrupts(data, watched, path=str(path))

        found, _ = interrupts.read_interrupts(HOST_FS, str(path), watched, block=block)

        assert found == interrupts.parse_interrupts(data, watched, path=str(path), read_at=found.read_at)
        assert found.rows == expected.rows


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty header"),
        (b"           CPU0       CPU1\n  5:          1\n", "row 5: 1 counts for 2 CPUs"),
        (b"           CPU0       CPU1\n  5:          1          2\n  5:          1          2\n", "appears twice"),
        (b"           CPU0       CPU1\nno colon here\n", "line without ':'"),
    ],
)
def test_bad_content_read_in_blocks_fails_as_the_whole_file_parse_does(tmp_path, content, message):
    path = tmp_path / "interrupts"
    path.write_bytes(content)
    for block in (3, 1 << 20):
        with pytest.raises(MalformedFile, match=message):
            interrupts.read_interrupts(HOST_FS, str(path), {0}, block=block)
    with pytest.raises(MalformedFile, match=message):
        interrupts.parse_interrupts(content, {0}, path=str(path))


def test_a_header_without_rows_or_newline_is_an_empty_reading(tmp_path):
    path = tmp_path / "interrupts"
    path.write_bytes(b"           CPU0       CPU1")

    found, _ = interrupts.read_interrupts(HOST_FS, str(path), {0, 1}, block=4)

    assert (found.cpus, found.rows) == ((0, 1), ())


@pytest.mark.parametrize("size", [0, 1, 65535, 65536, 65537, 3 * 65536 + 17])
@pytest.mark.slow
def test_read_bytes_reads_a_file_whole_across_its_chunks(tmp_path, size):
    """read_bytes asks the kernel for a bounded chunk at a time, never the whole limit: every size reads back
    byte for byte, around the chunk's edges too, and exactly the limit is still allowed."""
    path = tmp_path / "file"
    content = bytes(random.Random(size).randrange(256) for _ in range(size))
    path.write_bytes(content)

    assert HOST_FS.read_bytes(path) == content
    assert HOST_FS.read_bytes(path, limit=size) == content
    if size:
        with pytest.raises(MalformedFile, match=f"larger than the {size - 1}-byte limit"):
            HOST_FS.read_bytes(path, limit=size - 1)


def test_read_bytes_reads_a_procfs_file_whole():
    """A real procfs file larger than one chunk (short reads, size 0 in its stat) reads whole: the same bytes as
    Python's own reading of it, give or take what changed in between (this process's own mappings: read twice)."""
    path = "/proc/self/smaps"
    ours = HOST_FS.read_bytes(path)
    assert len(ours) > 65536
    assert ours.count(b"\n") > 1000 and ours.endswith(b"\n")
    with open(path, "rb") as python:
        assert ours.splitlines()[0].split()[0] == python.read().splitlines()[0].split()[0]


def test_a_file_past_the_limit_is_refused(tmp_path):
    path = tmp_path / "interrupts"
    path.write_bytes(varied_interrupts())

    with pytest.raises(MalformedFile, match="larger than the 1000-byte limit"):
        interrupts.read_interrupts(HOST_FS, str(path), {0}, block=256, limit=1000)


def test_a_large_nodes_file_past_the_other_files_read_limit_is_read_whole(tmp_path):
    """768 CPUs and 2,100 IRQs print about 18 MB (more than the 16 MiB every other file may hold): the limit of this
    file follows its header, so a large node's is read, not refused."""
    cpus = list(range(768))
    irqs = [FakeIrq(n, f"q{n}", frozenset({n % 768}), counts={n % 768: n, 700: 1}) for n in range(2100)]
    content = format_interrupts(cpus, irqs).encode()
    assert len(content) > DEFAULT_READ_LIMIT
    path = tmp_path / "interrupts"
    path.write_bytes(content)

    found, _ = interrupts.read_interrupts(HOST_FS, str(path), {700, 5})

    assert len(found.rows) == 2100 + 1  # and LOC
    assert found == interrupts.parse_interrupts(content, {700, 5}, path=str(path), read_at=found.read_at)
    assert sum(row.counts.get(700, 0) for row in found.rows) == 2100
    assert interrupts.size_limit(content[: content.find(b"\n")]) > len(content)


def test_a_file_past_the_limit_its_header_allows_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(interrupts, "MAX_ROWS", 4)
    monkeypatch.setattr(interrupts, "DEFAULT_READ_LIMIT", 1000)
    path = tmp_path / "interrupts"
    header = b"           CPU0       CPU1\n"
    limit = interrupts.size_limit(header[:-1])
    rows = b"".join(b"%5d:          0          0  PCI-MSI %d-edge  q\n" % (n, n) for n in range(limit // 40 + 1))
    path.write_bytes(header + rows)

    with pytest.raises(MalformedFile, match=f"larger than the {limit}-byte limit"):
        interrupts.read_interrupts(HOST_FS, str(path), {0}, block=256)


def test_a_line_too_long_for_this_file_is_refused_without_gathering_it(tmp_path, monkeypatch):
    monkeypatch.setattr(interrupts, "MAX_LINE", 300)
    path = tmp_path / "interrupts"
    path.write_bytes(b"           CPU0       CPU1\n" + b"\0" * 10_000)

    with pytest.raises(MalformedFile, match="a line longer than the 300-byte limit"):
        interrupts.read_interrupts(HOST_FS, str(path), {0}, block=100)


def test_reading_in_blocks_never_holds_the_whole_file(tmp_path):
    cpus = list(range(256))
    rows = [FakeIrq(n, f"q{n}", frozenset({0}), counts={n % 256: n}) for n in range(1000)]
    data = format_interrupts(cpus, rows, {"LOC": dict.fromkeys(cpus, 1000)}).encode()  # ~2.8 MB
    path = tmp_path / "interrupts"
    path.write_bytes(data)
    watched = set(range(8, 256))

    tracemalloc.start()
    try:
        found, _ = interrupts.read_interrupts(HOST_FS, str(path), watched, block=1 << 18)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert found == interrupts.parse_interrupts(data, watched, read_at=found.read_at)
    assert peak < len(data) // 2  # the whole-file parse holds the file and its digit-marked copy: 2x the file


def interrupts_inputs(paths: Paths) -> Inputs:
    """What a HostReader hands the interrupts source: the topology and kubelet_state snapshots (None: down)."""
    try:
        state = kubelet_state.read(paths)
    except SourceUnavailable:
        state = None
    return Inputs.of(topology=topology.read(paths), kubelet_state=state)


def test_the_interrupts_reader_reuses_unchanged_rows_and_sees_changed_counts_and_names(fake_host):
    cpus = list(range(4))
    irq_rows = [FakeIrq(40, "eth0", frozenset({0}), counts={2: 5}), FakeIrq(41, "nvme0q1", frozenset({0}))]
    add_irqs(fake_host, cpus, irq_rows, {"LOC": {2: 100, 3: 100}})
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1, cmdline="isolcpus=2-3 nohz_full=2-3")
    reader = factory_of("interrupts")()
    assert reader.spec.incremental is not None and reader.spec.factory is None
    inputs = interrupts_inputs(fake_host.paths)

    first = reader.read(fake_host.paths, inputs)
    second = reader.read(fake_host.paths, inputs)
    assert second.rows == interrupts.read(fake_host.paths, inputs).rows
    assert all(a is b for a, b in zip(first.rows, second.rows, strict=True))

    irq_rows[0] = FakeIrq(40, "eth0-renamed", frozenset({0}), counts={2: 6})
    add_irqs(fake_host, cpus, irq_rows, {"LOC": {2: 100, 3: 250}})
    third = reader.read(fake_host.paths, inputs)

    rows = {row.key: row for row in third.rows}
    assert (rows["40"].name, dict(rows["40"].counts)) == ("eth0-renamed", {2: 6})
    assert dict(rows["LOC"].counts) == {2: 100, 3: 250}
    assert rows["41"] is {row.key: row for row in second.rows}["41"]
    assert third.rows == interrupts.read(fake_host.paths, inputs).rows


def test_the_interrupts_reader_reuses_its_columns_and_follows_a_newly_pinned_cpu_and_an_offline_one(
    fake_host, monkeypatch
):
    irq_rows = [FakeIrq(40, "eth0", frozenset({0}), counts={1: 5, 2: 7})]
    add_irqs(fake_host, [0, 1, 2, 3], irq_rows, {"LOC": dict.fromkeys(range(4), 100)})
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1, cmdline="isolcpus=2-3 nohz_full=2-3")
    reader = HostReader(fake_host.paths, (interrupts.SOURCE, topology.SOURCE, kubelet_state.SOURCE))
    reader.read()
    headers = recording(monkeypatch, interrupts, "parse_header")
    worked_out: list[object] = []
    real_watched = interrupts.watched_cpus
    monkeypatch.setattr(interrupts, "watched_cpus", lambda *args: worked_out.append(args) or real_watched(*args))

    found = reader.read().interrupts
    assert (headers, worked_out) == ([], [])  # same header, inputs not read again: the columns and CPUs of last time
    assert found is not None and found.watched == {2, 3}

    write_cpu_manager_state(fake_host, default_cpuset="0,2-3", entries={UID: {"app": "1"}})  # pinned to CPU 1
    found = reader.read().interrupts
    assert found is not None and found.watched == {1, 2, 3} and len(worked_out) == 1
    assert dict({row.key: row for row in found.rows}["40"].counts) == {1: 5, 2: 7}
    assert found.rows == interrupts.read(fake_host.paths, interrupts_inputs(fake_host.paths)).rows

    add_irqs(fake_host, [0, 2, 3], irq_rows, {"LOC": dict.fromkeys(range(4), 100)})  # CPU 1 went offline
    found = reader.read().interrupts
    assert found is not None and (found.cpus, found.watched) == ((0, 2, 3), {2, 3})
    assert dict({row.key: row for row in found.rows}["40"].counts) == {2: 7}
    assert found.rows == interrupts.read(fake_host.paths, interrupts_inputs(fake_host.paths)).rows


def two_readings(tmp_path, first: bytes, second: bytes, watched, *, block: int = 1 << 20):
    """What a reader's second reading gives (after reading ``first``), and the one-off parse of ``second``."""
    path = tmp_path / "interrupts"
    path.write_bytes(first)
    before, known = interrupts.read_interrupts(HOST_FS, str(path), watched, known=interrupts.Remembered(), block=block)
    path.write_bytes(second)
    after, _ = interrupts.read_interrupts(HOST_FS, str(path), watched, known=known, block=block)
    return before, after, interrupts.parse_interrupts(second, watched, read_at=after.read_at)


def eight_cpu_rows(nic_counts: dict[int, int], loc: dict[int, int], *, name: str = "eth0") -> bytes:
    cpus = list(range(8))
    rows = [FakeIrq(40, name, frozenset({0}), counts=nic_counts), FakeIrq(41, "nvme0q1", frozenset({1}),
                                                                          counts={1: 9})]  # fmt: skip
    return format_interrupts(cpus, rows, {"LOC": loc, "RES": {4: 2}}).encode()


def test_rows_counting_only_on_unwatched_cpus_are_the_previous_rows_without_being_searched(tmp_path, monkeypatch):
    watched = {2, 3, 4, 5}  # 0-1 and 6-7 are housekeeping: two runs of watched cells
    first = eight_cpu_rows({0: 100, 3: 1}, dict.fromkeys(range(8), 50))
    second = eight_cpu_rows({0: 900, 6: 40, 3: 1}, dict.fromkeys(range(8), 50))  # traffic on housekeeping only
    path = tmp_path / "interrupts"
    path.write_bytes(first)
    before, known = interrupts.read_interrupts(HOST_FS, str(path), watched, known=interrupts.Remembered())
    path.write_bytes(second)
    converted = []
    monkeypatch.setattr(interrupts, "_count", lambda cell, key, path: converted.append(key) or int(cell))
    after, _ = interrupts.read_interrupts(HOST_FS, str(path), watched, known=known)

    assert converted == []  # LOC and row 40 have non-zero watched counts: they were not searched for them again
    assert all(a is b for a, b in zip(before.rows, after.rows, strict=True))
    assert after == interrupts.parse_interrupts(second, watched, read_at=after.read_at)


def test_a_count_that_moves_on_a_watched_cpu_is_read_again(tmp_path):
    watched = {2, 3, 4, 5}
    first = eight_cpu_rows({0: 100}, dict.fromkeys(range(8), 50))
    second = eight_cpu_rows({0: 100, 5: 1}, {**dict.fromkeys(range(8), 50), 2: 51})
    before, after, expected = two_readings(tmp_path, first, second, watched)

    assert after == expected
    rows = {row.key: row for row in after.rows}
    assert dict(rows["40"].counts) == {5: 1}
    assert rows["LOC"].counts[2] == 51
    assert rows["41"] is before.rows[1]  # nothing moved there


def test_other_watched_cpus_read_every_row_again(tmp_path):
    first = eight_cpu_rows({0: 100, 6: 3}, dict.fromkeys(range(8), 50))
    path = tmp_path / "interrupts"
    path.write_bytes(first)
    _, known = interrupts.read_interrupts(HOST_FS, str(path), {2, 3}, known=interrupts.Remembered())
    # The same file, now with CPU 6 watched too (a container was pinned there): its counts must appear.
    after, _ = interrupts.read_interrupts(HOST_FS, str(path), {2, 3, 6}, known=known)

    assert after == interrupts.parse_interrupts(first, {2, 3, 6}, read_at=after.read_at)
    assert dict({row.key: row for row in after.rows}["40"].counts) == {6: 3}


def test_a_count_widening_past_ten_digits_is_read_again_not_taken_for_the_previous_row(tmp_path):
    watched = {2, 3, 4, 5}
    first = eight_cpu_rows({0: 100, 3: 7}, dict.fromkeys(range(8), 50))
    second = eight_cpu_rows({0: 10**11, 3: 7}, dict.fromkeys(range(8), 50))  # shifts the rest of row 40
    _, after, expected = two_readings(tmp_path, first, second, watched)

    assert after == expected
    assert dict({row.key: row for row in after.rows}["40"].counts) == {3: 7}


def test_a_row_repeated_in_the_next_reading_is_refused_even_when_unchanged(tmp_path):
    first = eight_cpu_rows({0: 100}, dict.fromkeys(range(8), 50))
    row_40 = next(line for line in first.split(b"\n") if line.lstrip().startswith(b"40:"))
    second = first.replace(row_40, row_40 + b"\n" + row_40)

    with pytest.raises(MalformedFile, match="row 40 appears twice"):
        two_readings(tmp_path, first, second, {2, 3, 4, 5})


@settings(max_examples=120, deadline=None)
@given(
    counts=st.lists(st.lists(st.integers(0, 10**11), min_size=8, max_size=8), min_size=2, max_size=2),
    moves=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(1, 10**6)), max_size=12),
    watched=st.sets(st.integers(0, 7)),
    block=st.sampled_from([13, 97, 1 << 20]),
    rename=st.booleans(),
)
@pytest.mark.slow
def test_a_readers_second_reading_equals_a_one_off_parse(tmp_path_factory, counts, moves, watched, block, rename):
    """Whatever moved between two readings (counts anywhere, widths, names), the reader's second reading is what
    parsing the second file alone gives."""
    tmp_path = tmp_path_factory.mktemp("interrupts")
    cpus = list(range(8))

    def render(rows_counts, name):
        rows = [FakeIrq(40 + index, f"{name}{index}", frozenset({0}), counts=dict(zip(cpus, values, strict=True)))
                for index, values in enumerate(rows_counts)]  # fmt: skip
        return format_interrupts(cpus, rows, {"LOC": dict(zip(cpus, rows_counts[0], strict=True))}).encode()

    later = [list(values) for values in counts]
    for row, cpu, step in moves:
        later[row % 2][cpu] += step
    _, after, expected = two_readings(
        tmp_path, render(counts, "dev"), render(later, "nic" if rename else "dev"), watched, block=block
    )

    assert after == expected


# A row counting on most watched CPUs (the tick, the IPIs) is converted run by run in C loops; a row whose cells
# are all unchanged is taken with one CRC-32 over its whole watched span, and one whose housekeeping cells between
# two runs of watched cells move is then checked run by run.
def loc_rows(loc: dict[int, int], nic_counts: dict[int, int]) -> bytes:
    cpus = list(range(8))
    rows = [FakeIrq(40, "eth0", frozenset({4}), counts=nic_counts), FakeIrq(41, "nvme0q1", frozenset({1}))]
    return format_interrupts(cpus, rows, {"LOC": loc, "RES": {}}).encode()


def counted(monkeypatch) -> list[str]:
    """The rows whose counts are converted one at a time (``_count``), by key."""
    converted: list[str] = []
    real = interrupts._count
    monkeypatch.setattr(interrupts, "_count", lambda cell, key, path: converted.append(key) or real(cell, key, path))
    return converted


def test_a_row_counting_on_every_watched_cpu_is_converted_run_by_run_as_a_one_off_parse_converts_it(
    tmp_path, monkeypatch
):
    watched = {2, 3, 5, 6}  # two runs of watched columns, 4 between them
    first = loc_rows({cpu: 1000 + cpu for cpu in range(8)}, {0: 5})
    second = loc_rows({**{cpu: 2000 + cpu for cpu in range(8)}, 3: 0, 6: 4_000_000_000}, {0: 5})
    path = tmp_path / "interrupts"
    path.write_bytes(first)
    _, known = interrupts.read_interrupts(HOST_FS, str(path), watched, known=interrupts.Remembered())
    path.write_bytes(second)
    converted = counted(monkeypatch)

    after, _ = interrupts.read_interrupts(HOST_FS, str(path), watched, known=known)

    assert converted == []  # LOC had a count on every watched CPU: its runs were converted whole
    expected = interrupts.parse_interrupts(second, watched, read_at=after.read_at)
    assert after == expected
    loc = {row.key: row for row in after.rows}["LOC"]
    assert list(loc.counts.items()) == [(2, 2002), (5, 2005), (6, 4_000_000_000)]  # zeros left out, in CPU order


@pytest.mark.parametrize(
    "cell",
    [b"        -5", b"  12    3", b"       abc1", b"12345678901", b"         1 "],
    ids=["negative", "two-numbers", "letters", "no-space", "ends-in-space"],
)
def test_run_by_run_conversion_leaves_a_cell_that_is_not_a_plain_count_to_the_cell_by_cell_search(cell):
    good = b"       1234"
    data = b"LOC:" + good + cell.rjust(11)[:11] + good + b"   Local timer interrupts"
    counts: dict[int, int] = {}
    runs = [(0, 33, (0, 1, 2), b"   ")]

    assert not interrupts._dense_counts(data, 4, runs, counts)
    assert counts == {}

    assert interrupts._dense_counts(b"LOC:" + good + b"          0" + good, 4, runs, counts)
    assert counts == {0: 1234, 2: 1234}


def test_a_malformed_cell_in_a_row_converted_run_by_run_is_refused_as_a_one_off_parse_refuses_it(tmp_path):
    watched = {2, 3, 5, 6}
    first = loc_rows({cpu: 1000 + cpu for cpu in range(8)}, {0: 5})
    second = loc_rows({**{cpu: 1000 + cpu for cpu in range(8)}, 5: -7}, {0: 5})  # "        -7": not a count

    with pytest.raises(MalformedFile, match="row LOC: bad count b'-7'"):
        two_readings(tmp_path, first, second, watched)
    with pytest.raises(MalformedFile, match="row LOC: bad count b'-7'"):
        interrupts.parse_interrupts(second, watched)


def crc_calls(monkeypatch) -> list[int]:
    """The sizes of the buffers the interrupts parser takes a CRC-32 of."""
    sizes: list[int] = []
    real = zlib.crc32

    def crc32(data, value=0):
        sizes.append(len(data))
        return real(data, value)

    monkeypatch.setattr(interrupts, "zlib", types.SimpleNamespace(crc32=crc32))
    return sizes


def test_unchanged_rows_take_one_crc_of_their_span_and_a_device_busy_between_watched_runs_is_checked_by_runs(
    tmp_path, monkeypatch
):
    watched = {2, 3, 5, 6}  # runs of columns 2-3 and 5-6; CPU 4 between them is housekeeping
    loc = {cpu: 1000 + cpu for cpu in range(8)}
    path = tmp_path / "interrupts"
    path.write_bytes(loc_rows(loc, {4: 100}))
    sizes = crc_calls(monkeypatch)
    first, known = interrupts.read_interrupts(HOST_FS, str(path), watched, known=interrupts.Remembered())
    span, run = 5 * interrupts.CELL, 2 * interrupts.CELL
    assert sorted(sizes) == [run] * 8 + [span] * 4  # each of 4 rows searched: runs and span taken for next time

    readings = []
    for nic in (200, 300, 300):  # eth0 counts on CPU 4 twice, then is idle
        sizes.clear()
        path.write_bytes(loc_rows(loc, {4: nic}))
        after, known = interrupts.read_interrupts(HOST_FS, str(path), watched, known=known)
        readings.append(sorted(sizes))
        assert all(a is b for a, b in zip(first.rows, after.rows, strict=True))  # no watched count moved
        assert after == interrupts.parse_interrupts(loc_rows(loc, {4: nic}), watched, read_at=after.read_at)

    assert readings == [
        [run, run, span, span, span, span],  # eth0's span moved, its runs did not: from now on only they are checked
        [run, run, span, span, span],
        [run, run, span, span, span],  # idle again, eth0 is still checked run by run until it is searched again
    ]


def test_a_row_checked_run_by_run_sees_its_watched_count_move_and_is_checked_by_its_span_again(tmp_path, monkeypatch):
    watched = {2, 3, 5, 6}
    loc = {cpu: 1000 + cpu for cpu in range(8)}
    path = tmp_path / "interrupts"
    known = interrupts.Remembered()
    for nic in ({4: 100}, {4: 200}):
        path.write_bytes(loc_rows(loc, nic))
        _, known = interrupts.read_interrupts(HOST_FS, str(path), watched, known=known)
    sizes = crc_calls(monkeypatch)
    span = 5 * interrupts.CELL

    moved = loc_rows(loc, {4: 300, 5: 7})  # a misrouted interrupt on CPU 5
    path.write_bytes(moved)
    after, known = interrupts.read_interrupts(HOST_FS, str(path), watched, known=known)
    assert after == interrupts.parse_interrupts(moved, watched, read_at=after.read_at)
    assert dict({row.key: row for row in after.rows}["40"].counts) == {5: 7}

    sizes.clear()
    after, _ = interrupts.read_interrupts(HOST_FS, str(path), watched, known=known)
    assert sorted(sizes) == [span] * 4  # eth0 was searched and had its span taken again: one CRC-32 per row
    assert after == interrupts.parse_interrupts(moved, watched, read_at=after.read_at)


@settings(max_examples=80, deadline=None)
@given(
    start=st.lists(st.integers(0, 10**6), min_size=8, max_size=8),
    moves=st.lists(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, 7), st.integers(1, 10**10)), max_size=6),
        min_size=2,
        max_size=5,
    ),
    watched=st.sets(st.integers(0, 7)),
    block=st.sampled_from([13, 97, 1 << 20]),
)
@pytest.mark.slow
def test_a_readers_every_reading_equals_a_one_off_parse(tmp_path_factory, start, moves, watched, block):
    """Over several readings (rows taken by their span, by their runs, searched, dense or not, counts widening past
    ten digits), each of a reader's readings is what parsing that file alone gives."""
    path = tmp_path_factory.mktemp("interrupts") / "interrupts"
    cpus = list(range(8))
    counts = [list(start), [value % 7 for value in start], [0] * 8]  # a dense row, a sparse one, an empty one

    def render() -> bytes:
        rows = [FakeIrq(40 + index, f"q{index}", frozenset({0}), counts=dict(zip(cpus, values, strict=True)))
                for index, values in enumerate(counts[1:])]  # fmt: skip
        return format_interrupts(cpus, rows, {"LOC": dict(zip(cpus, counts[0], strict=True))}).encode()

    known = interrupts.Remembered()
    for step in [[], *moves]:
        for row, cpu, amount in step:
            counts[row][cpu] += amount
        data = render()
        path.write_bytes(data)
        found, known = interrupts.read_interrupts(HOST_FS, str(path), watched, known=known, block=block)
        expected = interrupts.parse_interrupts(data, watched, read_at=found.read_at)
        assert found == expected
        assert [list(row.counts.items()) for row in found.rows] == [list(row.counts.items()) for row in expected.rows]


# --------------------------------------------------------------------------------------------------- kernel
def policy(fake_host, number: int, cpus: str, governor: str) -> None:
    fake_host.write(f"sys/devices/system/cpu/cpufreq/policy{number}/scaling_governor", governor)
    fake_host.write(f"sys/devices/system/cpu/cpufreq/policy{number}/affected_cpus", cpus)


def test_the_kernel_reader_reads_the_same_as_a_one_off_read(fake_host):
    add_topology(fake_host, sockets=2, cores_per_socket=2, threads_per_core=1)
    add_kernel_settings(fake_host, governors={0: "performance", 1: "powersave", 2: "performance", 3: "schedutil"})
    reader = factory_of("kernel")()

    assert reader.spec.incremental is not None and reader.spec.factory is None
    for _ in range(3):
        assert reader.read(fake_host.paths) == kernel.read(fake_host.paths)
    assert dict(reader.read(fake_host.paths).governors) == {
        0: "performance", 1: "powersave", 2: "performance", 3: "schedutil"
    }  # fmt: skip


def test_a_policy_shared_by_several_cpus_gives_each_its_governor_from_one_read(fake_host, monkeypatch):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1)
    add_kernel_settings(fake_host, governors=None)
    policy(fake_host, 0, "0 1 2 3", "schedutil")  # acpi-cpufreq on a shared clock domain
    reads = recording(monkeypatch, HostFs, "read_small_text")

    settings = kernel.read(fake_host.paths)

    assert dict(settings.governors) == {0: "schedutil", 1: "schedutil", 2: "schedutil", 3: "schedutil"}
    assert sum(path.endswith("scaling_governor") for path in reads) == 1


def test_the_reader_remembers_policy_cpus_until_a_cpu_goes_offline(fake_host, monkeypatch):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1)
    add_kernel_settings(fake_host, governors="performance", cpus=range(4))
    reader = Driven("kernel")
    reads = recording(monkeypatch, HostFs, "read_small_text")
    reader.read(fake_host.paths)
    reads.clear()

    reader.read(fake_host.paths)
    assert not any(path.endswith("affected_cpus") for path in reads)

    # CPU 3 goes offline: its policy lists no CPU any more, and the other policies are asked again.
    fake_host.write("sys/devices/system/cpu/online", "0-2")
    fake_host.write("sys/devices/system/cpu/cpufreq/policy3/affected_cpus", "")
    reads.clear()
    settings = reader.read(fake_host.paths)

    assert dict(settings.governors) == {0: "performance", 1: "performance", 2: "performance"}
    assert sum(path.endswith("affected_cpus") for path in reads) == 4
    assert not any(path.endswith("policy3/scaling_governor") for path in reads)


def test_policies_that_do_not_list_their_cpus_are_read_per_cpu(fake_host):
    add_topology(fake_host, sockets=1, cores_per_socket=4, threads_per_core=1)
    add_kernel_settings(fake_host, governors={0: "performance", 1: "powersave", 2: "performance", 3: "performance"})
    fake_host.remove("sys/devices/system/cpu/cpufreq/policy1/affected_cpus")

    for read in (kernel.read, Driven("kernel").read):
        settings = read(fake_host.paths)
        assert dict(settings.governors) == {0: "performance", 1: "powersave", 2: "performance", 3: "performance"}


def staggered_kernel(fake_host, cpus: int = 8):
    add_topology(fake_host, sockets=1, cores_per_socket=cpus, threads_per_core=1)
    add_kernel_settings(fake_host, governors="performance", cpus=range(cpus))
    reader = Driven("kernel")
    reader.set_stagger(4)
    return reader


def test_an_unstaggered_kernel_reader_reads_every_governor_every_time(fake_host, monkeypatch):
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1)
    add_kernel_settings(fake_host, governors="performance", cpus=range(8))
    reader = Driven("kernel")  # as check and capture read
    reads = recording(monkeypatch, HostFs, "read_small_text")

    for _ in range(3):
        reads.clear()
        reader.read(fake_host.paths)
        assert sum(path.endswith("/scaling_governor") for path in reads) == 8


def test_a_staggered_kernel_reader_reads_each_governor_once_in_k_readings(fake_host, monkeypatch):
    reader = staggered_kernel(fake_host)
    reads = recording(monkeypatch, HostFs, "read_small_text")
    reader.read(fake_host.paths)
    assert sum(path.endswith("/scaling_governor") for path in reads) == 8  # every policy is new: all read

    governor_reads: list[str] = []
    for _ in range(readings_per_turn("kernel", GOVERNORS, 4)):
        reads.clear()
        settings = reader.read(fake_host.paths)
        governor_reads += [path for path in reads if path.endswith("/scaling_governor")]
        assert settings == kernel.read(fake_host.paths)  # nothing changed: carrying over gives the same settings
    assert len(governor_reads) == len(set(governor_reads)) == 8


def test_a_changed_governor_shows_within_k_staggered_readings_but_not_necessarily_at_once(fake_host):
    reader = staggered_kernel(fake_host)
    reader.read(fake_host.paths)

    for number in range(8):
        policy(fake_host, number, str(number), "powersave")
    seen = [dict(reader.read(fake_host.paths).governors) for _ in range(readings_per_turn("kernel", GOVERNORS, 4))]

    assert 0 < list(seen[0].values()).count("powersave") < 8  # some carried over, some already read
    assert seen[-1] == dict.fromkeys(range(8), "powersave")
    for cpu in range(8):  # once picked up, it stays
        first = next(index for index, governors in enumerate(seen) if governors[cpu] == "powersave")
        assert all(governors[cpu] == "powersave" for governors in seen[first:])


def test_a_staggered_kernel_reader_reads_new_policies_at_once_and_forgets_removed_ones(fake_host):
    reader = staggered_kernel(fake_host, cpus=4)
    reader.read(fake_host.paths)

    fake_host.remove("sys/devices/system/cpu/cpufreq/policy2")
    fake_host.write("sys/devices/system/cpu/online", "0-1,3-4")
    policy(fake_host, 4, "4", "schedutil")
    governors = dict(reader.read(fake_host.paths).governors)

    assert governors == {0: "performance", 1: "performance", 3: "performance", 4: "schedutil"}
    assert "policy2" not in reader.memory.governors


def test_a_policy_that_comes_or_goes_while_the_online_cpus_stay_is_seen_at_the_next_staggered_reading(fake_host):
    reader = staggered_kernel(fake_host, cpus=4)
    reader.read(fake_host.paths)
    reader.read(fake_host.paths)  # settled: the next readings take the policies over while the listing is the same

    fake_host.remove("sys/devices/system/cpu/cpufreq/policy3")  # its driver unbound: CPU 3 stays online
    assert dict(reader.read(fake_host.paths).governors) == dict.fromkeys(range(3), "performance")
    policy(fake_host, 3, "3", "schedutil")  # bound again
    assert dict(reader.read(fake_host.paths).governors) == {**dict.fromkeys(range(3), "performance"), 3: "schedutil"}


def test_a_governor_that_was_unreadable_is_read_again_at_once(fake_host):
    reader = staggered_kernel(fake_host)
    fake_host.write("sys/devices/system/cpu/cpufreq/policy1/scaling_governor", "")
    first = reader.read(fake_host.paths)
    assert 1 not in first.governors and "cpufreq_governor" in first.problems

    policy(fake_host, 1, "1", "powersave")

    assert reader.read(fake_host.paths).governors[1] == "powersave"


def test_a_settled_governor_that_turns_unreadable_is_dropped_and_reported_at_its_turn(fake_host, monkeypatch):
    reader = staggered_kernel(fake_host)
    for _ in range(2):  # the second reading has every governor remembered: only a turn's policies are read
        reader.read(fake_host.paths)
    reads = recording(monkeypatch, HostFs, "read_small_text")
    fake_host.write("sys/devices/system/cpu/cpufreq/policy5/scaling_governor", "")

    seen = []
    for _ in range(readings_per_turn("kernel", GOVERNORS, 4)):
        reads.clear()
        settings = reader.read(fake_host.paths)
        seen.append(5 in settings.governors)
        assert ("cpufreq_governor" in settings.problems) == (not seen[-1])
        assert len([path for path in reads if path.endswith("/scaling_governor")]) <= 8
    assert seen[0] and not seen[-1] and all(not present for present in seen[seen.index(False) :])
    assert settings == kernel.read(fake_host.paths)


@pytest.mark.parametrize("text", ["0 1 x", "0,1", "-1", "1 2 3 4 5 6 7 8 9 1234567890"])
def test_affected_cpus_must_be_cpu_numbers_separated_by_spaces(text):
    with pytest.raises(ValueError, match="expected CPU numbers separated by spaces"):
        parse_affected_cpus(text)


def test_affected_cpus_of_a_policy_is_its_list_of_cpus():
    assert parse_affected_cpus("0 1 2 3 \n") == {0, 1, 2, 3}
    assert parse_affected_cpus("\n") == frozenset()


# --------------------------------------------------------------------------------------------------- together
def test_a_host_reader_with_every_stateful_reader_reads_what_one_off_reads_give(fake_host):
    two_pods(fake_host)
    some_irqs(fake_host)
    add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline="isolcpus=4-7 nohz_full=4-7")
    add_kernel_settings(fake_host, governors="performance", cpus=range(8))
    reader = HostReader(fake_host.paths)

    for _ in range(3):
        warm = reader.read()
        cold = HostReader(fake_host.paths).read()
        for name in ("cgroups", "irqs", "kernel"):
            assert warm.results[name] == cold.results[name], name
        assert warm.results["interrupts"].rows == cold.results["interrupts"].rows


# --------------------------------------------------------------------------------------------------- staggered (serve)
K = 4
NODES_0 = {0: 1 << 20}
NODES_1 = {0: 0, 1: 2 << 20}


def many_pods(fake_host, count: int = 8, version: int = 2, first: int = 0, pids: bool = True):
    """``count`` Guaranteed pods of one container each (with their sandboxes: twice as many containers); each
    application container runs one process unless ``pids`` is false (an empty ``cgroup.procs``)."""
    pods = []
    for index in range(first, first + count):
        app = ContainerSpec("app", cpus=f"{index}", mems="0", numa_bytes=NODES_0, pids=(7000 + index,) if pids else ())
        pods.append(add_pod(
            fake_host, uid=f"00000000-0000-4000-8000-{index:012d}", qos=QOS_GUARANTEED, namespace="ns",
            name=f"p{index}", containers=[app], version=version, driver="systemd" if version == 2 else "cgroupfs",
        ))  # fmt: skip
    return pods


def numa_of(result) -> dict[str, dict[int, int] | None]:
    return {
        c.container_id: dict(c.numa_bytes) if c.numa_bytes is not None else None
        for pod in result.pods
        for c in pod.containers
    }


def staggered(reader):
    reader.set_stagger(K)
    return reader


def every_pod_visited(reader):
    """A staggered reader that lists and reads every Guaranteed pod at every reading (its refresh table does not
    rotate GUARANTEED_PODS), so that the rules for one container's files are seen alone: with the table's rotation
    they apply at the pod's turns. Its Guaranteed pods' containers take PLACEMENT's round for their memory placement
    (``placement_rules_alone``)."""
    return placement_rules_alone(staggered(reader).without_rotation(GUARANTEED_PODS))


def placement_rules_alone(reader):
    """The reader with GUARANTEED_CONTAINERS (a Guaranteed pod's containers' cpusets and memory placement, every 2
    readings in the table) rotating over PLACEMENT's round, so that the placement rotation's rules, which the
    table applies to every other pod's containers, are seen on this file's Guaranteed pods alone."""
    return reader.rotating_like(GUARANTEED_CONTAINERS, PLACEMENT)


def readings_per_turn(source: str, family: str, stagger: int = K) -> int:
    """How many readings a rotating family's round takes: K, times the family's stretch in the refresh table."""
    return stagger * POLICIES[source].stretch.get(family, 1)


A = readings_per_turn("irqs", AFFINITIES)  # the IRQ affinities' round: every IRQ's turn comes once in A readings
IRQS = range(40, 40 + A)  # one IRQ in each turn of that round
P = readings_per_turn("cgroups", PLACEMENT)  # the containers' memory placement (and settled cgroup.procs) round
S = readings_per_turn("cgroups", SHARED_PODS)  # the Burstable and BestEffort pods' round
G = readings_per_turn("cgroups", GUARANTEED_PODS)  # the Guaranteed pods' round


def test_an_unstaggered_cgroups_reader_reads_every_containers_numa_stat_every_time(fake_host, monkeypatch):
    many_pods(fake_host)
    reader = CgroupsReaderWithState()
    reads = recording(monkeypatch, cgroups, "_read")

    for _ in range(3):
        reads.clear()
        reader.read(fake_host.paths)
        assert sum(path.endswith("/memory.numa_stat") for path in reads) == 16


@pytest.mark.parametrize("version", [1, 2])
def test_a_staggered_cgroups_reader_reads_each_numa_stat_and_mems_once_in_k_readings_and_cpus_every_time(
    fake_host, monkeypatch, version
):
    pods = many_pods(fake_host, version=version)
    apps = {pod.container("app").container_id for pod in pods}
    sandboxes = {pod.sandbox.container_id for pod in pods}
    reader = every_pod_visited(CgroupsReaderWithState())
    reads = recording(monkeypatch, cgroups, "_read")
    reader.read(fake_host.paths)
    assert sum(path.endswith("/memory.numa_stat") for path in reads) == 16  # every container is new: all read

    reader.read(fake_host.paths)  # the second reading settles the sandbox verdicts ("not pause" twice in a row)

    def of(ids: set[str], paths: list[str]) -> list[str]:
        return [cid for path in paths for cid in ids if cid in path]

    numa_reads: list[str] = []
    procs_reads: list[str] = []
    mems_reads: list[str] = []
    sandbox_cpus_reads: list[str] = []
    for _ in range(P):
        reads.clear()
        found = reader.read(fake_host.paths)
        cpus_reads = [path for path in reads if path.endswith(("/cpuset.cpus.effective", "/cpuset.effective_cpus"))]
        # every application container's CPUs at every reading, and the kubepods cgroup's own; a settled sandbox's
        # (no check or metric judges it) only in its turn, with its memory placement
        assert sorted(of(apps, cpus_reads)) == sorted(apps)
        assert len(cpus_reads) == len(apps) + len(of(sandboxes, cpus_reads)) + 1
        sandbox_cpus_reads += of(sandboxes, cpus_reads)
        mems_reads += [path for path in reads if path.endswith(("/cpuset.mems.effective", "/cpuset.effective_mems"))]
        numa_reads += [path for path in reads if path.endswith("/memory.numa_stat")]
        procs_reads += [path for path in reads if path.endswith("/cgroup.procs")]
        assert found == cgroups.read(fake_host.paths)  # nothing changed: carrying over gives the same snapshot
    assert len(numa_reads) == len(set(numa_reads)) == 16
    # memory placement: cpuset.mems.effective goes with memory.numa_stat, in the same turn
    assert len(mems_reads) == len(set(mems_reads)) == 16
    assert {path.split("/")[-2] for path in mems_reads} == {path.split("/")[-2] for path in numa_reads}
    # cgroup.procs only decides the sandbox verdict: once that is settled it is staggered as memory.numa_stat is
    assert len(procs_reads) == len(set(procs_reads)) == 16
    # ... in the same turn (v1 keeps them in two hierarchies: compare the container directories)
    assert {path.split("/")[-2] for path in procs_reads} == {path.split("/")[-2] for path in numa_reads}
    assert sorted(sandbox_cpus_reads) == sorted(sandboxes)  # each sandbox's CPUs once in the round


def test_a_changed_numa_stat_shows_within_k_staggered_readings_but_not_necessarily_at_once(fake_host):
    pods = many_pods(fake_host)
    reader = every_pod_visited(CgroupsReaderWithState())
    reader.read(fake_host.paths)

    for pod in pods:
        set_numa_bytes(fake_host, pod, "app", NODES_1)
    truth = numa_of(cgroups.read(fake_host.paths))
    seen = [numa_of(reader.read(fake_host.paths)) for _ in range(P)]

    changed = {cid for cid, numa in truth.items() if numa == {0: 0, 1: 2 << 20}}
    assert len(changed) == 8
    assert 0 < sum(seen[0][cid] == truth[cid] for cid in changed) < 8  # some are carried over, some already read
    assert seen[-1] == truth
    for cid in changed:  # once picked up, it stays
        first = next(index for index, numa in enumerate(seen) if numa[cid] == truth[cid])
        assert all(numa[cid] == truth[cid] for numa in seen[first:])


def test_a_staggered_cgroups_reader_reads_new_containers_at_once_and_drops_removed_ones_at_once(fake_host):
    pods = many_pods(fake_host, count=4)
    reader = staggered(CgroupsReaderWithState())
    reader.read(fake_host.paths)
    reader.read(fake_host.paths)

    remove_pod(fake_host, pods[0])
    (new,) = many_pods(fake_host, count=1, first=4)
    found = reader.read(fake_host.paths)

    assert found.pod(pods[0].uid) is None
    assert pods[0].container("app").container_id not in reader.containers
    added = found.pod(new.uid)
    assert added is not None
    assert [dict(c.numa_bytes) for c in added.containers if not c.is_sandbox] == [NODES_0]
    assert found == cgroups.read(fake_host.paths)


def test_a_staggered_cgroups_reader_sees_a_cpuset_change_at_once(fake_host):
    pods = many_pods(fake_host, count=4)
    reader = staggered(CgroupsReaderWithState())
    reader.read(fake_host.paths)

    set_container_cpus(fake_host, pods[2], "app", "5-6")
    found = reader.read(fake_host.paths)

    (app,) = (c for c in found.pod(pods[2].uid).containers if not c.is_sandbox)
    assert app.cpus_effective == frozenset({5, 6})


def test_a_settled_staggered_cgroups_reader_sees_every_cpuset_change_at_once_and_reuses_unchanged_containers(
    fake_host,
):
    pods = many_pods(fake_host)
    reader = every_pod_visited(CgroupsReaderWithState())
    for _ in range(3):  # the second reading settles the sandbox verdicts: most containers then skip all but cpus
        before = reader.read(fake_host.paths)

    for pod in pods[:4]:
        set_container_cpus(fake_host, pod, "app", "20-21")
    found = reader.read(fake_host.paths)

    assert found == cgroups.read(fake_host.paths)
    moved = {pod.uid for pod in pods[:4]}
    for pod, old in zip(found.pods, before.pods, strict=True):
        for container, previous in zip(pod.containers, old.containers, strict=True):
            if pod.uid in moved and not container.is_sandbox:
                assert container.cpus_effective == frozenset({20, 21})
            else:
                assert container is previous  # same files: the previous (immutable) snapshot itself


def test_a_container_whose_placement_was_unknown_is_read_again_at_once(fake_host):
    pods = many_pods(fake_host, count=4)
    app = pods[1].container("app")
    fake_host.write(f"sys/fs/cgroup/{app.cgroup_path}/memory.numa_stat", "garbage")
    reader = staggered(CgroupsReaderWithState())
    assert numa_of(reader.read(fake_host.paths))[app.container_id] is None

    set_numa_bytes(fake_host, pods[1], "app", NODES_1)

    assert numa_of(reader.read(fake_host.paths))[app.container_id] == {0: 0, 1: 2 << 20}


def test_an_unstaggered_cgroups_reader_reads_every_cgroup_procs_every_time(fake_host, monkeypatch):
    many_pods(fake_host)
    reader = CgroupsReaderWithState()  # as check and capture read: no stagger
    reads = recording(monkeypatch, cgroups, "_read")

    for _ in range(3):
        reads.clear()
        reader.read(fake_host.paths)
        assert sum(path.endswith("/cgroup.procs") for path in reads) == 16


def test_a_container_without_processes_has_its_cgroup_procs_read_every_time(fake_host, monkeypatch):
    pods = many_pods(fake_host, count=4, pids=False)
    reader = every_pod_visited(CgroupsReaderWithState())
    for _ in range(2):
        reader.read(fake_host.paths)
    reads = recording(monkeypatch, cgroups, "_read")
    apps = [f"/{pod.container('app').cgroup_path}/cgroup.procs" for pod in pods]

    for _ in range(K):
        reads.clear()
        reader.read(fake_host.paths)
        # no first process, no verdict: its first process may be the sandbox's pause, so it is asked every time
        assert all(any(path.endswith(app) for path in reads) for app in apps)


def test_a_settled_containers_new_processes_show_within_k_staggered_readings(fake_host):
    pods = many_pods(fake_host, count=8)
    reader = every_pod_visited(CgroupsReaderWithState())
    for _ in range(2):
        reader.read(fake_host.paths)  # verdicts settled: cgroup.procs is now staggered

    for pod in pods:
        app = pod.container("app")
        fake_host.write(f"sys/fs/cgroup/{app.cgroup_path}/cgroup.procs", f"{app.pids[0]}\n9999\n")
    seen = [reader.read(fake_host.paths) for _ in range(P)]

    def app_pids(result, pod):
        return next(c.pids for c in result.pod(pod.uid).containers if not c.is_sandbox)

    firsts = [next(i for i, found in enumerate(seen) if app_pids(found, pod)[-1:] == (9999,)) for pod in pods]
    assert len(set(firsts)) > 1  # each container's in its own turn, not all at once (some carried over meanwhile)
    assert seen[-1] == cgroups.read(fake_host.paths)
    assert all(app_pids(seen[-1], pod)[-1] == 9999 for pod in pods)


def test_a_settled_container_removed_between_readings_drops_out_at_once(fake_host, monkeypatch):
    pods = many_pods(fake_host, count=8)
    reader = staggered(CgroupsReaderWithState())
    for _ in range(2):
        reader.read(fake_host.paths)
    for pod in pods:
        remove_pod(fake_host, pod)  # the pod directories go: every container's cpusets fail to read
    reads = recording(monkeypatch, cgroups, "_read")

    found = reader.read(fake_host.paths)

    assert found.pods == ()
    assert reader.containers == {}
    assert not any(path.endswith("/cgroup.procs") for path in reads)


def test_a_container_whose_mems_could_not_be_read_has_them_read_again_at_every_reading(fake_host):
    pods = many_pods(fake_host, count=4)
    app = pods[1].container("app")
    fake_host.remove(f"sys/fs/cgroup/{app.cgroup_path}/cpuset.mems.effective")
    reader = every_pod_visited(CgroupsReaderWithState())
    for _ in range(3):  # settled, and its memory placement known: only an unknown mems keeps it off the short path
        found = reader.read(fake_host.paths)
    assert next(c for c in found.pod(pods[1].uid).containers if not c.is_sandbox).mems_effective is None

    fake_host.write(f"sys/fs/cgroup/{app.cgroup_path}/cpuset.mems.effective", "0-1\n")
    found = reader.read(fake_host.paths)

    assert next(c for c in found.pod(pods[1].uid).containers if not c.is_sandbox).mems_effective == {0, 1}


def test_a_staggered_reader_recognises_a_sandbox_caught_in_its_runtime_init_at_the_next_reading(fake_host):
    pods = many_pods(fake_host, count=8)
    sandboxes = {pod.sandbox.container_id: pod.sandbox.pids[0] for pod in pods}
    for pid in sandboxes.values():
        fake_host.write(f"proc/{pid}/comm", "runc:[2:INIT]")
    reader = staggered(CgroupsReaderWithState())
    first = reader.read(fake_host.paths)
    assert not any(c.is_sandbox for pod in first.pods for c in pod.containers)

    for pid in sandboxes.values():
        fake_host.write(f"proc/{pid}/comm", "pause")
    second = reader.read(fake_host.paths)

    # "not pause" seen once is not settled: every one of them is asked again, whatever its turn
    assert {c.container_id for pod in second.pods for c in pod.containers if c.is_sandbox} == set(sandboxes)


def _plant_a_change(fake_host, rng, pods, step):
    """One random change of the kind serve meets between readings (see the test below)."""
    pod = rng.choice(pods)
    app = pod.container("app")
    change = rng.choice(["cpus", "numa", "procs", "comm", "none", "none"])
    if change == "cpus":
        set_container_cpus(fake_host, pod, "app", rng.choice(["0-1", "2", "3-7", f"{step % 8}"]))
    elif change == "numa":
        set_numa_bytes(fake_host, pod, "app", rng.choice([NODES_0, NODES_1]))
    elif change == "procs":
        fake_host.write(f"sys/fs/cgroup/{app.cgroup_path}/cgroup.procs", f"{app.pids[0]}\n{9000 + step}\n")
    elif change == "comm":
        fake_host.write(f"proc/{pod.sandbox.pids[0]}/comm", rng.choice(["pause", "runc:[2:INIT]"]))


@pytest.mark.parametrize("seed", range(6))
def test_the_settled_containers_short_path_reads_what_the_general_path_reads(fake_host, monkeypatch, seed):
    rng = random.Random(seed)
    pods = many_pods(fake_host, count=6)
    fast, general = staggered(CgroupsReaderWithState()), staggered(Driven("cgroups"))

    def read_general():
        with monkeypatch.context() as patch:
            patch.setattr(cgroups, "_settled_unchanged", lambda *args: None)
            return general.read(fake_host.paths)

    for step in range(24):
        if step == 12:
            remove_pod(fake_host, pods.pop(rng.randrange(len(pods))))
            pods += many_pods(fake_host, count=1, first=6)
        elif step > 2:
            _plant_a_change(fake_host, rng, pods, step)
        assert fast.read(fake_host.paths) == read_general(), f"reading {step}"
        assert fast.containers == general.containers
        assert fast.sandboxes == general.sandboxes
        assert fast.lists == general.lists  # the parsed lists the next reading shares


def test_the_stagger_must_be_at_least_one():
    for reader in (CgroupsReaderWithState(), Driven("irqs"), Driven("kernel")):
        with pytest.raises(ValueError, match="at least 1"):
            reader.set_stagger(0)
    with pytest.raises(ValueError, match="at least 1"):
        HostReader(Paths.from_root("/nonexistent"), (), stagger=0)


def many_irqs(fake_host, affinity: frozenset[int] = frozenset({0, 1}), numbers=IRQS):
    add_irqs(fake_host, IRQ_CPUS, [FakeIrq(n, f"q{n}", affinity, frozenset({min(affinity)})) for n in numbers])


# Four IRQs per turn of the affinities' round, numbered so that half of each turn's have their requested mask read in
# a round (``irqs._requested_turn`` alternates by IRQ number and round).
ROUND_OF_IRQS = range(40, 40 + 4 * A)


def test_a_staggered_irqs_reader_reads_each_irq_once_in_k_readings(fake_host, monkeypatch):
    count = len(ROUND_OF_IRQS)
    many_irqs(fake_host, numbers=ROUND_OF_IRQS)
    reader = staggered(Driven("irqs"))
    reads = recording(monkeypatch, HostFs, "read_small")
    reader.read(fake_host.paths)
    assert sum(path.endswith("/smp_affinity_list") for path in reads) == count

    effective_reads: list[str] = []
    affinity_reads: list[str] = []
    for reading in range(2 * A):
        reads.clear()
        found = reader.read(fake_host.paths)
        effective_reads += [path for path in reads if path.endswith("/effective_affinity_list")]
        affinity_reads += [path for path in reads if path.endswith("/smp_affinity_list")]
        assert found == irqs.read(fake_host.paths)  # nothing changed: carrying over gives the same snapshot
        if reading == A - 1:  # each IRQ's effective affinity once in A readings, half of the requested masks
            assert len(effective_reads) == len(set(effective_reads)) == count
            assert len(affinity_reads) == len(set(affinity_reads)) == count // 2
    # ... and in 2A readings each effective affinity twice, each requested mask once
    assert len(effective_reads) == 2 * count and len(set(effective_reads)) == count
    assert len(affinity_reads) == len(set(affinity_reads)) == count


def test_a_changed_requested_mask_alone_shows_within_2k_staggered_readings(fake_host):
    many_irqs(fake_host, affinity=frozenset({0, 1}), numbers=ROUND_OF_IRQS)
    reader = staggered(Driven("irqs"))
    reader.read(fake_host.paths)

    many_irqs(fake_host, affinity=frozenset({0, 1, 2}), numbers=ROUND_OF_IRQS)  # requested 0-2, delivered to CPU 0
    truth = irqs.read(fake_host.paths)
    seen = [reader.read(fake_host.paths) for _ in range(2 * A)]

    half = len(ROUND_OF_IRQS) // 2
    assert sum(seen[A - 1].irqs[n].affinity == {0, 1, 2} for n in ROUND_OF_IRQS) == half  # half within A
    assert seen[-1] == truth


def test_an_irq_whose_effective_affinity_moved_has_its_requested_mask_read_in_the_same_turn(fake_host):
    many_irqs(fake_host)
    reader = staggered(Driven("irqs"))
    reader.read(fake_host.paths)

    many_irqs(fake_host, affinity=frozenset({6, 7}))
    seen = [reader.read(fake_host.paths) for _ in range(A)]

    for n in IRQS:  # within A readings every IRQ shows both files moved, whatever the turn of its mask
        assert (seen[-1].irqs[n].affinity, seen[-1].irqs[n].effective) == ({6, 7}, {6})


def test_a_moved_irq_shows_within_k_staggered_readings_but_not_necessarily_at_once(fake_host):
    many_irqs(fake_host)
    reader = staggered(Driven("irqs"))
    reader.read(fake_host.paths)

    many_irqs(fake_host, affinity=frozenset({6, 7}))
    truth = irqs.read(fake_host.paths)
    seen = [reader.read(fake_host.paths) for _ in range(A)]

    assert 0 < sum(seen[0].irqs[n].affinity == {6, 7} for n in IRQS) < 16
    assert seen[-1] == truth
    assert all(seen[-1].irqs[n].effective == {6} for n in IRQS)


def test_a_staggered_irqs_reader_reads_new_irqs_at_once_and_drops_removed_ones_at_once(fake_host):
    many_irqs(fake_host)
    reader = staggered(Driven("irqs"))
    reader.read(fake_host.paths)

    fake_host.remove("proc/irq/41")
    many_irqs(fake_host, affinity=frozenset({3}), numbers=[90, 91, 92, 93])
    found = reader.read(fake_host.paths)

    assert 41 not in found.irqs
    assert {n: found.irqs[n].affinity for n in (90, 91, 92, 93)} == {n: {3} for n in (90, 91, 92, 93)}


# The staggered irqs reader's fast path (the listing unchanged: carried IRQs copied in bulk) against the general path.
def failing_reads(monkeypatch) -> set[int]:
    """IRQs whose smp_affinity_list reads fail (vanished mid-read) while their number is in the returned set."""
    failing: set[int] = set()
    real = HostFs.read_small

    def read_small(fs: HostFs, path: str, *args, **kwargs) -> bytes | None:
        if path.endswith("/smp_affinity_list") and int(path.rsplit("/", 2)[1]) in failing:
            return None
        return real(fs, path, *args, **kwargs)

    monkeypatch.setattr(HostFs, "read_small", read_small)
    return failing


def fast_readings(monkeypatch) -> list[int]:
    """Count the readings that take the fast path."""
    taken: list[int] = []
    real = irqs._read_turn

    def read_turn(fs, memory, root, share, turn, *rest):
        taken.append(turn)
        return real(fs, memory, root, share, turn, *rest)

    monkeypatch.setattr(irqs, "_read_turn", read_turn)
    return taken


def outcome(reader, paths):
    try:
        return reader.read(paths)
    except MalformedFile as error:
        return str(error)


def random_irq(rng: random.Random, number: int, managed: float) -> FakeIrq:
    cpus = frozenset(rng.sample(IRQ_CPUS, rng.randint(1, 3)))
    return FakeIrq(number, f"q{number}", cpus, frozenset({min(cpus)}), managed=rng.random() < managed)


@pytest.mark.parametrize(("seed", "managed"), [(0, 1.0), (1, 0.9), (2, 0.9), (3, 0.3), (4, 0.0), (5, 0.5)])
def test_the_fast_path_reads_what_the_general_path_reads_on_the_same_history(fake_host, monkeypatch, seed, managed):
    rng = random.Random(seed)
    present = set(rng.sample(range(120), 30))
    add_irqs(fake_host, IRQ_CPUS, [random_irq(rng, n, managed) for n in sorted(present)])
    failing = failing_reads(monkeypatch)
    taken = fast_readings(monkeypatch)
    fast, general = staggered(Driven("irqs")), staggered(Driven("irqs"))
    broken: int | None = None

    for step in range(60):
        if broken is not None:  # a malformed file lasts one reading
            fake_host.write(f"proc/irq/{broken}/smp_affinity_list", "1")
            broken = None
        if rng.random() < 0.6:  # else the failing reads fail again
            failing.clear()
        action = rng.choice(["quiet", "move", "move", "fail", "fail", "add", "remove", "no effective", "malformed",
                             "refresh"])  # fmt: skip
        if action == "move":
            for n in rng.sample(sorted(present), 3):
                cpus = rng.sample(IRQ_CPUS, rng.randint(1, 3))
                fake_host.write(f"proc/irq/{n}/smp_affinity_list", ",".join(map(str, cpus)))
                if fake_host.path(f"proc/irq/{n}/effective_affinity_list").exists():  # the kernel never adds it
                    fake_host.write(f"proc/irq/{n}/effective_affinity_list", str(cpus[0]))
        elif action == "fail":
            failing.update(rng.sample(sorted(present), rng.randint(1, 4)))
        elif action == "add":
            new = rng.choice([n for n in range(120) if n not in present])
            add_irqs(fake_host, IRQ_CPUS, [random_irq(rng, new, managed)])
            present.add(new)
        elif action == "remove" and len(present) > 5:
            gone = rng.choice(sorted(present))
            fake_host.remove(f"proc/irq/{gone}")
            present.discard(gone)
        elif action == "no effective":
            fake_host.remove(f"proc/irq/{rng.choice(sorted(present))}/effective_affinity_list")
        elif action == "malformed":
            broken = rng.choice(sorted(present))
            fake_host.write(f"proc/irq/{broken}/smp_affinity_list", "3-x")
        elif action == "refresh":
            fast.refresh_all()
            general.refresh_all()

        found = outcome(fast, fake_host.paths)
        if general.memory is not None:  # no previous listing to match: the general path, on the same history
            general.memory = general.memory._replace(listing=None)
        expected = outcome(general, fake_host.paths)

        assert found == expected, f"reading {step} ({action})"
        if not isinstance(found, str):
            assert list(found.irqs) == sorted(found.irqs), f"reading {step} ({action})"
        assert (fast.memory.seen if fast.memory else None) == (general.memory.seen if general.memory else None)

    assert len(taken) > 20  # most readings kept the listing: the fast path was exercised
    failing.clear()
    if broken is not None:
        fake_host.write(f"proc/irq/{broken}/smp_affinity_list", "1")
    for _ in range(2 * A):  # two full rounds of quiet readings: every IRQ's requested mask read again too
        found = fast.read(fake_host.paths)
    assert found == irqs.read(fake_host.paths)


def warm_staggered_irqs(fake_host, numbers=IRQS):
    many_irqs(fake_host, numbers=numbers)
    reader = staggered(Driven("irqs"))
    reader.read(fake_host.paths)
    return reader


def in_turn_and_requested(reader, fake_host, numbers=IRQS) -> int:
    """Read until the next reading's turn holds an IRQ whose requested mask it reads; that IRQ."""
    while True:
        turn, round_ = reader.readings % A, reader.readings // A
        found = [n for n in numbers if n % A == turn and irqs._requested_turn(n, A, round_)]
        if found:
            return found[0]
        reader.read(fake_host.paths)


def test_the_fast_path_reads_only_the_irqs_in_their_turn(fake_host, monkeypatch):
    reader = warm_staggered_irqs(fake_host)
    taken = fast_readings(monkeypatch)
    reads = recording(monkeypatch, HostFs, "read_small")

    for _ in range(A):
        reads.clear()
        turn = reader.readings % A
        found = reader.read(fake_host.paths)
        read_irqs = {int(path.rsplit("/", 2)[1]) for path in reads if "/default_smp_affinity" not in path}
        assert read_irqs == {n for n in IRQS if n % A == turn}
        assert found == irqs.read(fake_host.paths)
    assert len(taken) == A


def test_an_irq_unreadable_at_some_readings_is_read_at_the_next_and_shows_in_sorted_order(fake_host, monkeypatch):
    reader = warm_staggered_irqs(fake_host)
    # In the next reading's turn, and one whose requested mask that reading reads (only that file's reads fail).
    vanishing = in_turn_and_requested(reader, fake_host)
    failing = failing_reads(monkeypatch)
    taken = fast_readings(monkeypatch)
    reads = recording(monkeypatch, HostFs, "read_small")

    failing.add(vanishing)
    for _ in range(2):  # vanished mid-read: drops out at once, and is not carried while unreadable
        assert vanishing not in reader.read(fake_host.paths).irqs
    failing.clear()
    reads.clear()
    found = reader.read(fake_host.paths)  # no longer its turn, but not carried: there is nothing to carry

    assert f"{fake_host.paths.procfs}/irq/{vanishing}/smp_affinity_list" in reads
    assert found.irqs[vanishing].affinity == {0, 1}
    assert list(found.irqs) == list(IRQS)
    assert found == irqs.read(fake_host.paths)
    assert len(taken) == 3


def test_an_irq_whose_files_vanish_in_its_turn_drops_out_at_once_while_its_directory_is_listed(fake_host):
    reader = warm_staggered_irqs(fake_host)
    in_turn = in_turn_and_requested(reader, fake_host)  # its requested mask is read: the file removed below
    carried = next(n for n in IRQS if n % A != in_turn % A)
    fake_host.remove(f"proc/irq/{in_turn}/smp_affinity_list")
    fake_host.write(f"proc/irq/{carried}/smp_affinity_list", "7")

    found = reader.read(fake_host.paths)

    assert in_turn not in found.irqs
    assert found.irqs[carried].affinity == {0, 1}  # not its turn: the previous reading's entry
    assert list(found.irqs) == sorted(found.irqs)


def test_an_added_irq_directory_shows_at_once_in_sorted_order(fake_host):
    reader = warm_staggered_irqs(fake_host, numbers=[40, 50, 60])

    many_irqs(fake_host, affinity=frozenset({5}), numbers=[45])
    found = reader.read(fake_host.paths)

    assert list(found.irqs) == [40, 45, 50, 60]
    assert found.irqs[45].affinity == {5}


@pytest.mark.parametrize("odd_one_managed", [False, True])
def test_the_fast_path_keeps_the_mode_rules_when_the_only_irq_of_its_kind_vanishes(
    fake_host, monkeypatch, odd_one_managed
):
    add_irqs(
        fake_host,
        IRQ_CPUS,
        [
            FakeIrq(n, f"q{n}", frozenset({n % 8}), frozenset({n % 8}), managed=(n == 41) == odd_one_managed)
            for n in range(40, 48)
        ],
    )
    reader = staggered(Driven("irqs"))
    assert reader.read(fake_host.paths).read_only_modes_seen
    failing = failing_reads(monkeypatch)
    while reader.readings % A != 41 % A or not irqs._requested_turn(41, A, reader.readings // A):
        reader.read(fake_host.paths)
    taken = fast_readings(monkeypatch)

    failing.add(41)  # vanishes mid-read, in its turn
    found = reader.read(fake_host.paths)
    assert not found.read_only_modes_seen
    if odd_one_managed:
        assert {entry.writable for entry in found.irqs.values()} == {True}
    else:  # no IRQ writable: the rest look like a capture that lost its modes
        assert {entry.writable for entry in found.irqs.values()} == {None}

    failing.clear()
    found = reader.read(fake_host.paths)
    assert found.irqs[41].writable is not odd_one_managed and found.irqs[40].writable is odd_one_managed
    assert found.read_only_modes_seen
    assert found == irqs.read(fake_host.paths)
    assert len(taken) == 2


def test_only_a_host_reader_asked_to_stagger_staggers_its_readers(fake_host):
    many_pods(fake_host, count=2)
    many_irqs(fake_host)
    for reader, share in ((HostReader(fake_host.paths), 1), (HostReader(fake_host.paths, stagger=K), K)):
        assert reader.turns.stagger == share
        # The refresh table says which sources rotate; the HostReader hands them its share.
        assert {"cgroups", "irqs", "kernel"} <= {name for name, policy in reader.policies.items() if policy.rotating}


def test_serve_staggers_by_default_and_can_be_told_not_to():
    from numawatch import cli

    parser = cli.build_parser()
    assert parser.parse_args(["serve"]).stagger == cli.DEFAULT_STAGGER == 4
    assert parser.parse_args(["serve", "--stagger", "1"]).stagger == 1


def test_check_window_reads_everything_in_both_readings(fake_host, monkeypatch):
    # numawatch check --window: two readings with a sleep between; every change made meanwhile is in the second.
    pods = many_pods(fake_host)
    many_irqs(fake_host)

    def change_everything(_seconds):
        for pod in pods:
            set_numa_bytes(fake_host, pod, "app", NODES_1)
        many_irqs(fake_host, affinity=frozenset({6, 7}))

    monkeypatch.setattr(host_module.time, "sleep", change_everything)
    host = read_host_window(fake_host.paths, 3.0, (cgroups.SOURCE, irqs.SOURCE))

    assert all(numa == {0: 0, 1: 2 << 20} for cid, numa in numa_of(host.cgroups).items() if cid in {
        pod.container("app").container_id for pod in pods})  # fmt: skip
    assert all(entry.affinity == {6, 7} for entry in host.get("irqs").irqs.values())
    assert host.previous is not None
    assert all(entry.affinity == {0, 1} for entry in host.previous.get("irqs").irqs.values())


def test_an_invalidated_source_reads_everything_at_its_next_staggered_reading(fake_host):
    # SIGHUP invalidates every source and a CPU hotplug event the irqs and kernel ones: what an operator or the kernel
    # just changed must not wait K readings.
    many_irqs(fake_host)
    reader = HostReader(fake_host.paths, (irqs.SOURCE, kernel.SOURCE), stagger=K)
    reader.read()

    many_irqs(fake_host, affinity=frozenset({6, 7}))
    reader.invalidate("kernel")  # another source: irqs stays staggered
    partial = reader.read().get("irqs")
    assert 0 < sum(partial.irqs[n].affinity == {6, 7} for n in IRQS) < 16

    many_irqs(fake_host, affinity=frozenset({4}))
    reader.invalidate("irqs")
    assert reader.read().get("irqs") == irqs.read(fake_host.paths)  # every IRQ read at once

    many_irqs(fake_host, affinity=frozenset({5}))
    reader.invalidate()  # SIGHUP: all of them
    assert reader.read().get("irqs") == irqs.read(fake_host.paths)
    many_irqs(fake_host, affinity=frozenset({2}))
    after = reader.read().get("irqs")  # and back to staggering afterwards
    assert 0 < sum(after.irqs[n].affinity == {2} for n in IRQS) < 16


# ------------------------------------------------------------------------- irqs: /proc/interrupts says what came
def irq_set(numbers) -> list[FakeIrq]:
    return [FakeIrq(n, f"q{n}", frozenset({0, 1}), frozenset({0})) for n in numbers]


def with_interrupts(paths: Paths) -> Inputs:
    return Inputs.of(interrupts=interrupts.read(paths))


def listings_of(monkeypatch) -> list[int]:
    """One entry per listing of proc/irq from now on."""
    taken: list[int] = []
    real = irqs._list_irq_root

    def list_irq_root(paths):
        taken.append(1)
        return real(paths)

    monkeypatch.setattr(irqs, "_list_irq_root", list_irq_root)
    return taken


def test_while_proc_interrupts_lists_the_same_irqs_proc_irq_is_listed_at_the_rounds_first_turn_only(
    fake_host, monkeypatch
):
    add_irqs(fake_host, IRQ_CPUS, irq_set(IRQS))
    reader = staggered(Driven("irqs", inputs=with_interrupts))
    reader.read(fake_host.paths)
    listings = listings_of(monkeypatch)

    taken = 0
    for _ in range(2 * A):
        before = len(listings)
        found = reader.read(fake_host.paths)
        taken += len(listings) - before
        assert found == irqs.read(fake_host.paths)  # (which lists proc/irq itself)

    assert taken == 2  # one per round, at its first turn

    without = staggered(Driven("irqs"))  # the interrupts source down: listed at every reading
    without.read(fake_host.paths)
    listings.clear()
    for _ in range(A):
        without.read(fake_host.paths)
    assert len(listings) == A


def test_an_irq_set_up_or_freed_shows_at_once_and_one_without_a_handler_within_the_round(fake_host, monkeypatch):
    add_irqs(fake_host, IRQ_CPUS, irq_set(IRQS))
    reader = staggered(Driven("irqs", inputs=with_interrupts))
    reader.read(fake_host.paths)
    reader.read(fake_host.paths)

    add_irqs(fake_host, IRQ_CPUS, irq_set([*IRQS, 99]))  # a handler requested: its row and directory
    assert 99 in reader.read(fake_host.paths).irqs

    add_irqs(fake_host, IRQ_CPUS, irq_set([*range(41, 56), 99]))
    fake_host.remove("proc/irq/40")  # freed: its row and its directory go
    assert 40 not in reader.read(fake_host.paths).irqs

    fake_host.write("proc/irq/120/smp_affinity_list", "2")  # a descriptor without a handler: no row
    fake_host.write("proc/irq/120/effective_affinity_list", "2")
    seen = [120 in reader.read(fake_host.paths).irqs for _ in range(A)]
    assert seen[-1]  # listed at the round's first turn at the latest, then kept
    assert reader.read(fake_host.paths) == irqs.read(fake_host.paths)


def test_a_staggered_irqs_reading_hands_its_snapshot_out_again_while_nothing_in_its_turns_moved(fake_host):
    many_irqs(fake_host, numbers=ROUND_OF_IRQS)
    reader = HostReader(fake_host.paths, [irqs.SOURCE], stagger=K)

    def read():
        return reader.read().get("irqs")

    read()
    previous = read()
    for _ in range(A):  # a whole round of turns reads the same bytes: the same (immutable) snapshot
        found = read()
        assert found is previous
    many_irqs(fake_host, affinity=frozenset({6, 7}), numbers=ROUND_OF_IRQS[:1])
    seen = [read() for _ in range(A)]

    assert seen[-1] is not previous and seen[-1] == irqs.read(fake_host.paths)  # the moved IRQ's turn came
    assert sum(found is not previous for found in seen) >= 1
    fake_host.write("proc/irq/default_smp_affinity", "ff\n")  # read at every reading: a change shows at once
    assert read().default_affinity == frozenset(range(8))


def test_the_irqs_reader_lists_the_rows_of_proc_interrupts_again_only_when_that_source_was_read_again(
    fake_host, monkeypatch
):
    add_irqs(fake_host, IRQ_CPUS, irq_set(IRQS))
    reading = interrupts.read(fake_host.paths)
    generation = {"interrupts": 1}
    reader = staggered(
        Driven("irqs", inputs=lambda paths: Inputs({"interrupts": reading}, generations=dict(generation)))
    )
    hints: list[int] = []
    real = irqs._rows_hint
    monkeypatch.setattr(irqs, "_rows_hint", lambda inputs: hints.append(1) or real(inputs))

    for _ in range(3):
        reader.read(fake_host.paths)
    assert len(hints) == 1  # the same interrupts reading (its generation): the hint it gave

    add_irqs(fake_host, IRQ_CPUS, irq_set([*IRQS, 99]))
    reading, generation["interrupts"] = interrupts.read(fake_host.paths), 2
    assert 99 in reader.read(fake_host.paths).irqs  # read again: a new row, and proc/irq listed at once
    assert len(hints) == 2


def test_a_cpu_hotplug_event_makes_the_irqs_and_kernel_readers_read_everything():
    from numawatch.hotplug import sources_to_refresh

    assert {"irqs", "kernel"} <= sources_to_refresh("offline", "cpu", {})


def test_a_changed_cpuset_mems_shows_within_k_staggered_readings_and_cpus_at_once(fake_host):
    pods = many_pods(fake_host)
    reader = every_pod_visited(CgroupsReaderWithState())
    reader.read(fake_host.paths)

    for pod in pods:  # --membind forgotten everywhere, and the CPUs moved too
        set_container_cpus(fake_host, pod, "app", {2, 3}, mems={0, 1})
    seen = [reader.read(fake_host.paths) for _ in range(P)]

    def containers(found):
        return [c for pod in found.pods for c in pod.containers if not c.is_sandbox]

    assert all(c.cpus_effective == {2, 3} for c in containers(seen[0]))  # the CPUs at once
    assert 0 < sum(c.mems_effective == {0, 1} for c in containers(seen[0])) < len(containers(seen[0]))
    assert seen[-1] == cgroups.read(fake_host.paths)


# ------------------------------------------------------------------------------------ cgroups: pods carried over
def shared_pods(fake_host, count: int = 8, first: int = 100):
    """``count`` Burstable pods of one container each on the shared pool (never exclusive CPUs), and a kubelet
    state file to watch."""
    write_cpu_manager_state(fake_host, default_cpuset="0-15")
    pods = []
    for index in range(first, first + count):
        app = ContainerSpec("app", cpus="0-15", mems="0", numa_bytes=NODES_0, pids=(7000 + index,))
        pods.append(add_pod(
            fake_host, uid=f"00000000-0000-4000-8000-{index:012d}", qos=QOS_BURSTABLE, namespace="ns",
            name=f"b{index}", containers=[app],
        ))  # fmt: skip
    return pods


def settled_reader(fake_host, configured=lambda reader: reader):
    """A staggered reader past the readings that follow its first look at the kubelet's state (``configured``: the
    reader as a test wants it, before its first reading)."""
    reader = configured(staggered(CgroupsReaderWithState()))
    for _ in range(K + 1):
        last = reader.read(fake_host.paths)
    return reader, last


def app_cpus(result, uid: str):
    return next(c for c in result.pod(uid).containers if not c.is_sandbox).cpus_effective


def test_a_burstable_pod_outside_its_turn_is_its_previous_snapshot_and_none_of_its_files_are_read(
    fake_host, monkeypatch
):
    shared_pods(fake_host)
    reader, before = settled_reader(fake_host)
    reads = recording(monkeypatch, cgroups, "_read")
    turns: dict[str, int] = {}

    for _ in range(S):
        reads.clear()
        found = reader.read(fake_host.paths)
        for pod in found.pods:
            if any(f"/{pod.cgroup_path}/" in path for path in reads):
                turns[pod.uid] = turns.get(pod.uid, 0) + 1
            else:
                assert any(pod is old for old in before.pods)  # not its turn: handed out again, whole
        assert found == cgroups.read(fake_host.paths)  # nothing changed: the same answer as reading everything

    assert turns == {pod.uid: 1 for pod in found.pods}  # each pod is read in one reading of every S


def test_a_rewritten_cpuset_shows_within_its_pods_round_guaranteed_or_burstable(fake_host):
    burstable = shared_pods(fake_host)
    guaranteed = many_pods(fake_host, count=4)
    reader, _ = settled_reader(fake_host)
    for pod in burstable:
        set_container_cpus(fake_host, pod, "app", "0-7")  # someone rewrote the shared containers' cpusets
    for pod in guaranteed:
        set_container_cpus(fake_host, pod, "app", "9")  # and the pinned ones'

    seen_at: dict[str, int] = {}
    for reading in range(S):
        found = reader.read(fake_host.paths)
        for pod in burstable:
            if app_cpus(found, pod.uid) == frozenset(range(8)):
                seen_at.setdefault(pod.uid, reading)
        for pod in guaranteed:
            if app_cpus(found, pod.uid) == {9}:
                seen_at.setdefault(pod.uid, reading)
            elif pod.uid in seen_at:
                raise AssertionError(f"{pod.uid}: the rewritten cpuset was seen, then lost")

    assert set(seen_at) == {pod.uid for pod in burstable + guaranteed}  # every one within S readings
    assert max(seen_at[pod.uid] for pod in guaranteed) < G  # a Guaranteed pod's within its own (shorter) round
    assert found == cgroups.read(fake_host.paths)


def test_a_guaranteed_pod_outside_its_turn_is_its_previous_snapshot_and_none_of_its_files_are_read(
    fake_host, monkeypatch
):
    pods = many_pods(fake_host)
    reader, before = settled_reader(fake_host, placement_rules_alone)
    reads = recording(monkeypatch, cgroups, "_read")
    listings = recording(monkeypatch, cgroups, "_container_entries")
    visits: dict[str, int] = {}
    numa_reads: list[str] = []

    for _ in range(P):
        reads.clear()
        listings.clear()
        found = reader.read(fake_host.paths)
        numa_reads += [path for path in reads if path.endswith("/memory.numa_stat")]
        for pod in found.pods:
            listed = any(path.endswith(f"/{pod.cgroup_path}") for path in listings)
            if any(f"/{pod.cgroup_path}/" in path for path in reads):
                assert listed  # read in its turn: listed too
                visits[pod.uid] = visits.get(pod.uid, 0) + 1
            else:
                assert not listed
                assert any(pod is old for old in before.pods)  # not its turn: handed out again, whole
        assert found == cgroups.read(fake_host.paths)  # nothing changed: the same answer as reading everything

    assert visits == {pod.uid: P // G for pod in pods}  # listed and its cpusets read once in G readings
    # Each container's memory placement still once in its round, though its pod is visited at some readings only:
    # a container is read at the first visit since its turn came.
    assert sorted(numa_reads) == sorted(
        f"{fake_host.root}/sys/fs/cgroup/{container.cgroup_path}/memory.numa_stat"
        for pod in pods
        for container in (pod.container("app"), pod.sandbox)
    )


def test_after_the_kubelets_cpu_state_changes_every_pod_is_read_at_every_reading_for_a_while(fake_host):
    burstable = shared_pods(fake_host)
    reader, _ = settled_reader(fake_host)
    write_cpu_manager_state(fake_host, default_cpuset="0-11")  # a Guaranteed pod took CPUs 12-15
    for pod in burstable:
        set_container_cpus(fake_host, pod, "app", "0-11")  # the kubelet's reconcile follows

    for _ in range(K):
        assert reader.read(fake_host.paths) == cgroups.read(fake_host.paths)


def test_a_removed_burstable_pod_is_gone_at_the_next_reading(fake_host):
    burstable = shared_pods(fake_host)
    reader, _ = settled_reader(fake_host)
    for pod in burstable[:4]:
        remove_pod(fake_host, pod)

    found = reader.read(fake_host.paths)

    assert {pod.uid for pod in found.pods} == {pod.uid for pod in burstable[4:]}


def test_a_refresh_reads_every_pod_at_once(fake_host):
    burstable = shared_pods(fake_host)
    reader, _ = settled_reader(fake_host)
    for pod in burstable:
        set_container_cpus(fake_host, pod, "app", "0-7")

    reader.refresh_all()  # SIGHUP, or a CPU came or went

    assert reader.read(fake_host.paths) == cgroups.read(fake_host.paths)


@pytest.mark.parametrize("seed", range(4))
def test_a_staggered_reader_settles_on_what_reading_everything_gives_within_the_stagger(fake_host, seed):
    """Random changes (cpusets, memory, pods coming and going), then a round of quiet readings: the reader's answer
    is the one-off reading's, whichever pods were carried over in between."""
    rng = random.Random(seed)
    burstable = shared_pods(fake_host, count=12)
    many_pods(fake_host, count=3)
    reader, _ = settled_reader(fake_host)
    alive = list(burstable)
    for step in range(6):
        for pod in rng.sample(alive, 3):
            set_container_cpus(fake_host, pod, "app", rng.choice(["0-7", "0-15", "8-15"]))
            set_numa_bytes(fake_host, pod, "app", {0: rng.randrange(1, 1 << 30)})
        if step == 2:
            remove_pod(fake_host, alive.pop(rng.randrange(len(alive))))
        reader.read(fake_host.paths)
    for _ in range(max(S, P)):
        found = reader.read(fake_host.paths)
    assert found == cgroups.read(fake_host.paths)


def test_an_attribute_read_in_one_read_is_what_reading_to_the_end_gives(fake_host):
    for name, content in (("short", "2048\n"), ("exact", "x" * 63 + "\n"), ("invalid", b"\xff1\n"), ("empty", b"")):
        fake_host.write(f"sys/a/{name}", content)
        path = fake_host.paths.sysfs / "a" / name
        assert HOST_FS.read_attribute_text(path, 64) == HOST_FS.read_optional_text(path, 64)
    assert HOST_FS.read_attribute_text(fake_host.paths.sysfs / "a/missing", 64) is None
    fake_host.write("sys/a/long", "x" * 65)
    for read in (HOST_FS.read_attribute_text, HOST_FS.read_optional_text):  # over the limit: refused the same way
        with pytest.raises(MalformedFile, match="larger than the 64-byte limit"):
            read(str(fake_host.paths.sysfs / "a/long"), 64)
