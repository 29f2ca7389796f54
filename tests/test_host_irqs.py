"""The IRQ affinity source (/proc/irq), managed-IRQ recognition and the irq_on_isolated_cpu check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakehost.kernel import FakeIrq, add_irqs
from fakehost.kubelet import write_cpu_manager_state
from fakehost.topology import add_topology
from numawatch.checks import evaluate
from numawatch.checks.host_irq import CHECK_BY_ID
from numawatch.cpuset import parse_cpulist
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import HostReader, read_host
from numawatch.intent import Intent, KernelIntent
from numawatch.irqplacement import device_irqs, device_key, spread_vectors
from numawatch.model.interrupts import InterruptRow
from numawatch.paths import Paths
from numawatch.refresh import AFFINITIES
from numawatch.sources import interrupts, irqs, kubelet_state, topology
from source_inputs import Driven

SOURCES = (topology.SOURCE, kubelet_state.SOURCE, interrupts.SOURCE, irqs.SOURCE)
CPUS = list(range(8))
HOUSEKEEPING = frozenset({0, 1, 2, 3})


def placement(host_dir, intent: Intent | None = None):
    snapshot = HostReader(host_dir.paths, SOURCES).read()
    evaluation = evaluate(snapshot, intent or Intent(), [CHECK_BY_ID["irq_on_isolated_cpu"]])
    return list(evaluation.findings), [n.reason for n in evaluation.not_evaluated]


def eight_cpus(fake_host, cmdline="isolcpus=managed_irq,domain,4-7 nohz_full=4-7 rcu_nocbs=4-7"):
    return add_topology(fake_host, sockets=1, cores_per_socket=8, threads_per_core=1, cmdline=cmdline)


# --------------------------------------------------------------------------------------------------- source
def test_reads_requested_and_effective_affinity_and_the_mode(fake_host):
    add_irqs(
        fake_host,
        CPUS,
        [
            FakeIrq(30, "eth0", frozenset({0, 1}), frozenset({1})),
            FakeIrq(31, "nvme0q1", frozenset({4}), frozenset({4}), managed=True),
            FakeIrq(32, "old", frozenset({2, 3})),  # a kernel without effective_affinity
        ],
        default_affinity=HOUSEKEEPING,
    )

    found = irqs.read(fake_host.paths)

    assert (found.irqs[30].affinity, found.irqs[30].effective, found.irqs[30].writable) == ({0, 1}, {1}, True)
    assert (found.irqs[31].writable, found.read_only_modes_seen) == (False, True)
    assert (found.irqs[32].effective, found.irqs[32].delivered_to) == (None, {2, 3})
    assert found.default_affinity == HOUSEKEEPING


def test_a_capture_that_lost_every_write_bit_has_no_mode_information(realkernel_root):
    found = irqs.read(Paths.from_root(realkernel_root))

    assert {irq.writable for irq in found.irqs.values()} == {None}
    assert not found.read_only_modes_seen
    assert found.irqs[2].effective == frozenset()  # the cascade: an empty effective_affinity_list
    assert found.irqs[37].affinity == {7} and found.irqs[37].effective == {0}  # managed queue of offline CPU 7


@pytest.mark.parametrize("staggered", [False, True])
def test_a_malformed_affinity_leaves_that_irq_out_names_the_file_and_is_tried_again(fake_host, staggered):
    add_irqs(fake_host, CPUS, [FakeIrq(30, "eth0", frozenset({0}), frozenset({0})), FakeIrq(31, "x", frozenset({1}))])
    reader = Driven("irqs")
    if staggered:
        reader.set_stagger(3)
    reader.read(fake_host.paths)
    fake_host.write("proc/irq/30/effective_affinity_list", "0-x")
    fake_host.write("proc/irq/default_smp_affinity", "zz")

    found = reader.read(fake_host.paths) if not staggered else _reading_with_turn_of(reader, fake_host, 30)

    assert set(found.irqs) == {31}
    (problem,) = found.problems
    assert problem.startswith(str(fake_host.path("proc/irq/30/effective_affinity_list")) + ": bad element")
    assert found.default_affinity is None  # malformed: unknown, and no reason to leave any IRQ out
    fake_host.write("proc/irq/30/effective_affinity_list", "0")
    assert set(reader.read(fake_host.paths).irqs) == {30, 31}  # tried again at once, whatever the turn


def _reading_with_turn_of(reader: irqs.IrqsReader, host, irq: int):
    """Staggered readings until one reads ``irq`` in its turn (at most one round of the affinities' rotation)."""
    for _ in range(reader.readings_per_round(AFFINITIES)):
        found = reader.read(host.paths)
        if irq not in found.irqs:
            return found
    raise AssertionError(f"IRQ {irq} was never read again")


def test_a_malformed_affinity_is_still_an_error_for_a_direct_caller():
    with pytest.raises(MalformedFile, match="proc/irq/30/effective_affinity_list"):
        irqs.parse_cpulist_file(b"0-x", "proc/irq/30/effective_affinity_list")


def test_an_irq_directory_that_vanished_is_skipped(fake_host):
    add_irqs(fake_host, CPUS, [FakeIrq(30, "eth0", frozenset({0}), frozenset({0})), FakeIrq(31, "x", frozenset({1}))])
    fake_host.remove("proc/irq/31/smp_affinity_list")

    assert set(irqs.read(fake_host.paths).irqs) == {30}


def test_no_proc_irq_is_unavailable(tmp_path):
    with pytest.raises(SourceUnavailable, match="irq does not exist"):
        irqs.read(Paths.from_root(tmp_path))


@pytest.mark.realhost
def test_this_machine_irqs_are_delivered_to_online_cpus():
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())

    found = irqs.read(Paths.from_root("/"))

    assert found.irqs
    for irq in found.irqs.values():
        assert irq.effective is None or irq.effective <= online | (irq.affinity or frozenset()), irq
        assert irq.writable is not None or not os.access(f"/proc/irq/{irq.irq}/smp_affinity", os.F_OK)


# --------------------------------------------------------------------------------------------------- managed IRQs
def masks(*cpu_lists: str) -> list[tuple[int, frozenset[int]]]:
    return [(30 + index, parse_cpulist(cpus)) for index, cpus in enumerate(cpu_lists)]


def test_spread_of_an_nvme_device_excludes_its_admin_queue():
    vectors = masks("0,2-3", "1", "4", "5", "6", "8", "9", "7", "10", "11", "0", "2", "3")

    assert spread_vectors(vectors, frozenset(range(12))) == set(range(31, 43))


def test_vectors_that_do_not_cover_every_cpu_are_not_a_spread():
    vectors = masks("0", "1", "2", "3")  # one vector per CPU on 4 of 8 CPUs: a driver's hint, not the kernel's spread

    assert spread_vectors(vectors, frozenset(range(8))) == set()


def test_overlapping_masks_are_not_a_spread():
    assert spread_vectors(masks("0-7", "0-7"), frozenset(range(8))) == set()


def test_groups_of_several_cpus_per_vector_are_a_spread():
    assert spread_vectors(masks("0-2", "3-5", "6-7"), frozenset(range(8))) == {30, 31, 32}


def test_device_key_from_the_chip_column():
    def row(chip: str) -> InterruptRow:
        return InterruptRow(key="31", kind="device", name="q", chip=chip)

    assert device_key(row("PCI-MSI 34095105-edge")) == device_key(row("PCI-MSI 34095116-edge"))
    assert device_key(row("PCI-MSI 34095105-edge")) != device_key(row("PCI-MSI 50872321-edge"))
    assert device_key(row("PCI-MSIX-0000:41:00.0 3-edge")) == "0000:41:00.0"
    assert device_key(row("IR-PCI-MSI 524288-edge")) is not None
    assert device_key(row("IO-APIC 4-edge")) is None


# --------------------------------------------------------------------------------------------------- the check
def test_the_capture_flags_exactly_the_irqs_its_readme_lists(realkernel_root):
    host = read_host(Paths.from_root(realkernel_root), SOURCES)

    evaluation = evaluate(host, Intent(), [CHECK_BY_ID["irq_on_isolated_cpu"]])

    got = {(f.labels["irq"], f.labels["cpus"], f.labels["managed"]) for f in evaluation.findings}
    legacy = {("4", "3"), ("8", "2"), ("9", "2"), ("12", "3")}
    virtio = {("24", "10"), ("25", "10"), ("26", "11"), ("28", "4"), ("29", "5")}
    nvme_queues = {("32", "4"), ("33", "5"), ("35", "8"), ("36", "9"), ("38", "10"), ("39", "11"), ("41", "2"),
                   ("42", "3")}
    expected = {(*pair, "false") for pair in legacy | virtio} | {(*pair, "true") for pair in nvme_queues}
    assert got == expected


def test_device_irq_on_an_isolated_cpu_fires_and_names_it(fake_host):
    eight_cpus(fake_host)
    add_irqs(fake_host, CPUS, [FakeIrq(40, "eth0-TxRx-3", frozenset(range(8)), frozenset({6}))])

    findings, _ = placement(fake_host)

    assert [dict(f.labels) for f in findings] == [{"irq": "40", "name": "eth0-TxRx-3", "cpus": "6", "managed": "false"}]
    assert "echo 0-3 > /proc/irq/40/smp_affinity_list" in findings[0].remediation


def test_device_irqs_on_housekeeping_cpus_are_clean(fake_host):
    eight_cpus(fake_host)
    add_irqs(fake_host, CPUS, [FakeIrq(40, "eth0", HOUSEKEEPING, frozenset({2})), FakeIrq(41, "nvidia", {0}, {0})])

    assert placement(fake_host) == ([], [])


def test_without_effective_affinity_the_requested_mask_counts(fake_host):
    eight_cpus(fake_host)
    add_irqs(fake_host, CPUS, [FakeIrq(40, "eth0", frozenset({3, 4}))])

    findings, _ = placement(fake_host)

    assert [f.labels["cpus"] for f in findings] == ["4"]


def test_managed_irq_by_read_only_mode_is_labelled_and_explained(fake_host):
    eight_cpus(fake_host)
    add_irqs(
        fake_host,
        CPUS,
        [FakeIrq(40, "nvme0q5", frozenset({5}), frozenset({5}), managed=True), FakeIrq(41, "eth0", {0}, {0})],
    )

    findings, _ = placement(fake_host)

    assert [dict(f.labels) for f in findings] == [{"irq": "40", "name": "nvme0q5", "cpus": "5", "managed": "true"}]
    assert "smp_affinity is read-only" in findings[0].message
    assert "fires only for I/O issued from them" in findings[0].message
    assert "kernel.irq_exempt" in findings[0].remediation


def test_managed_irq_with_housekeeping_in_its_mask_asks_for_managed_irq(fake_host):
    eight_cpus(fake_host, cmdline="isolcpus=4-7 nohz_full=4-7 rcu_nocbs=4-7")
    add_irqs(
        fake_host,
        CPUS,
        [FakeIrq(40, "nvme0q1", frozenset({3, 4}), frozenset({4}), managed=True), FakeIrq(41, "eth0", {0}, {0})],
    )

    findings, _ = placement(fake_host)

    assert "isolcpus=managed_irq" in findings[0].message
    assert "add managed_irq to isolcpus=" in findings[0].remediation


def test_exempt_names_are_left_out(fake_host):
    eight_cpus(fake_host)
    add_irqs(fake_host, CPUS, [FakeIrq(40, "nvme0q5", {5}, {5}), FakeIrq(41, "ehci_hcd:usb1, i801_smbus", {6}, {6})])

    findings, _ = placement(fake_host, Intent(kernel=KernelIntent(irq_exempt=("nvme*", "i801_smbus"))))

    assert findings == []


def test_irq_directories_without_a_handler_are_ignored(fake_host):
    """Unused legacy lines keep a /proc/irq/<n>/ with an all-CPU mask but are not in /proc/interrupts."""
    eight_cpus(fake_host)
    add_irqs(fake_host, CPUS, [FakeIrq(40, "eth0", {0}, {0})])
    fake_host.write("proc/irq/5/smp_affinity_list", "0-7")
    fake_host.write("proc/irq/5/effective_affinity_list", "6")

    assert placement(fake_host) == ([], [])


def test_device_irqs_joins_device_rows_with_their_irq_entry_in_row_order_once_per_host(fake_host):
    eight_cpus(fake_host)
    add_irqs(fake_host, CPUS, [FakeIrq(41, "nvme0q1", {5}), FakeIrq(40, "eth0", frozenset(range(8)), {6})])
    fake_host.remove("proc/irq/41")  # in /proc/interrupts but its directory is gone: nothing to join
    snapshot = HostReader(fake_host.paths, SOURCES).read()

    joined = device_irqs(snapshot)

    assert [(row.key, irq, found.irq, delivered) for row, irq, found, delivered in joined] == [
        ("40", 40, 40, frozenset({6}))  # LOC, RES and other named rows are not device rows
    ]
    assert device_irqs(snapshot) is joined


def test_device_irqs_is_empty_without_the_irqs_source(fake_host):
    eight_cpus(fake_host)
    add_irqs(fake_host, CPUS, [FakeIrq(40, "eth0", {6}, {6})])
    fake_host.remove("proc/irq")

    assert device_irqs(HostReader(fake_host.paths, SOURCES).read()) == ()


def test_exclusive_cpus_of_pinned_containers_are_protected_on_a_node_without_isolcpus(fake_host):
    eight_cpus(fake_host, cmdline="ro quiet")
    write_cpu_manager_state(fake_host, default_cpuset="0-3,6-7", entries={"pod-a": {"vllm": "4-5"}})
    add_irqs(fake_host, CPUS, [FakeIrq(40, "mlx5_comp4", frozenset(range(8)), frozenset({5}))])

    findings, _ = placement(fake_host)

    assert [f.labels["cpus"] for f in findings] == ["5"]
    assert "CPU 5 (exclusive)" in findings[0].message


def test_offline_cpus_and_non_contiguous_numbering(fake_host):
    layout = add_topology(
        fake_host, sockets=2, cores_per_socket=2, threads_per_core=1, cpu_ids=[0, 10, 20, 30], offline=[30],
        cmdline="isolcpus=20,30 nohz_full=20,30 rcu_nocbs=20,30",
    )
    online = sorted(layout.online)
    add_irqs(fake_host, online, [FakeIrq(40, "eth0", frozenset({10, 20}), frozenset({20}))], nr_cpu_ids=31)

    findings, _ = placement(fake_host)

    assert [f.labels["cpus"] for f in findings] == ["20"]


def test_no_isolation_and_no_kubelet_state_is_not_evaluated(fake_host):
    eight_cpus(fake_host, cmdline="ro")
    add_irqs(fake_host, CPUS, [FakeIrq(40, "eth0", {0}, {0})])

    findings, reasons = placement(fake_host)

    assert findings == []
    assert "kubelet_state" in reasons[0]


def test_irq_sources_down_make_the_check_not_evaluated(fake_host):
    eight_cpus(fake_host)

    findings, reasons = placement(fake_host)

    assert findings == []
    assert reasons[0].startswith("needs the irqs source")
