"""``check --from`` on hostile bundles, the costs side: memory stays small whatever a header
claims, extraction has a time limit, and the temporary directory goes away on every exit path, signals included.
Real ``numawatch`` processes; peak memory is the child's own maximum resident set (``os.wait4``)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from numawatch import capture

# The hostile bundle's long-name header claims this much; the bundle itself is about 1 MB.
CLAIMED = 3 << 30
# A behaviour bound, not a timing: the process stays in tens of MB where tarfile took gigabytes.
PEAK_RSS_LIMIT_BYTES = 300 * 1024 * 1024

MANIFEST = json.dumps({
    "format": "numawatch-capture", "format_version": 1,
    "paths": {"root": "host", "procfs": "host/proc", "sysfs": "host/sys", "kubelet": "host/var/lib/kubelet",
              "rke2": "host/etc/rancher/rke2"},
    "intent": {"source": "reference profile", "file": None},
}).encode()


def raw_header(name: bytes, kind: bytes, size: int, *, magic: bytes = b"ustar  \0") -> bytes:
    """A tar header block written by hand, so it can claim what ``tarfile`` would never write."""
    block = b"".join([
        name.ljust(100, b"\0"), b"0000644\0", b"0000000\0", b"0000000\0", b"%011o\0" % size, b"%011o\0" % 0,
        b" " * 8, kind, b"\0" * 100, magic, b"\0" * 32, b"\0" * 32, b"\0" * 8, b"\0" * 8, b"\0" * 167,
    ])
    assert len(block) == 512
    return block[:148] + b"%06o\0 " % sum(block) + block[156:]


def write_gzip_stream(path: Path, head: bytes, zeros: int) -> Path:
    """``head`` then ``zeros`` zero bytes, gzip-compressed without ever holding the zeros in memory."""
    chunk = bytes(1 << 20)
    with gzip.GzipFile(path, "wb", compresslevel=9) as out:
        out.write(head)
        for _ in range(zeros // len(chunk)):
            out.write(chunk)
    return path


@pytest.fixture(scope="module")
def long_name_bomb(tmp_path_factory) -> Path:
    """A GNU long-name header claiming 3 GiB, followed by 1 GiB of zeros: about 1 MB on disk."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.tar.gz"
    return write_gzip_stream(path, raw_header(b"././@LongLink", b"L", CLAIMED), 1 << 30)


def run_measured(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """``numawatch ARGS``: exit status, stderr and the process' peak resident set in bytes."""
    process = subprocess.Popen([sys.executable, "-m", "numawatch", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=env)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    process.stderr.close()
    return process.returncode, stderr, usage.ru_maxrss * 1024  # Linux reports kilobytes


@pytest.mark.slow
def test_a_long_name_header_claiming_gigabytes_is_refused_in_little_memory(long_name_bomb):
    returncode, stderr, peak = run_measured("check", "--from", str(long_name_bomb))

    print(f"\npeak RSS on a {long_name_bomb.stat().st_size}-byte bundle claiming {CLAIMED} bytes: {peak >> 20} MiB")
    assert long_name_bomb.stat().st_size < 2 << 20
    assert returncode == 2
    [line] = stderr.strip().splitlines()
    assert line.startswith(f"numawatch: error: bundle {long_name_bomb}: member '././@LongLink'")
    assert "long name" in line
    assert peak < PEAK_RSS_LIMIT_BYTES, f"peak RSS {peak >> 20} MiB"


@pytest.mark.parametrize("kind", [b"x", b"g", b"K"], ids=["pax", "pax-global", "long-link"])
@pytest.mark.slow
def test_other_extended_headers_over_their_limit_are_refused_before_they_are_read(tmp_path, kind):
    bundle = write_gzip_stream(tmp_path / "big-header.tar.gz", raw_header(b"././@PaxHeader", kind, 1 << 30), 1 << 20)

    returncode, stderr, peak = run_measured("check", "--from", str(bundle))

    assert returncode == 2
    [line] = stderr.strip().splitlines()
    assert line.startswith(f"numawatch: error: bundle {bundle}: member '././@PaxHeader'")
    assert "bytes" in line
    assert peak < PEAK_RSS_LIMIT_BYTES


# ------------------------------------------------------------------------------------------------ odd but valid
def bundle_entries() -> list[tuple[tarfile.TarInfo, bytes]]:
    deep = "host/sys/fs/cgroup/kubepods.slice/" + "/".join(["d" * 60] * 4)  # longer than ustar's 100 + 155
    files = [("manifest.json", MANIFEST, 0o644), (f"{deep}/cpuset.cpus", b"0-3\n", 0o444),
             ("host/proc/cmdline", b"ro quiet\n", 0o644), ("host/proc/é-non-ascii", b"x", 0o600)]
    entries = []
    for name, data, mode in files:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, 1_700_000_000
        entries.append((info, data))
    link = tarfile.TarInfo("host/sys/link")
    link.type, link.linkname = tarfile.SYMTYPE, "fs/cgroup/kubepods.slice/" + "/".join(["d" * 60] * 4)
    entries.append((link, b""))
    return entries


@pytest.mark.parametrize("form", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_long_names_in_pax_and_gnu_form_extract_with_their_bits_and_times(tmp_path, form):
    bundle = tmp_path / "odd.tar.gz"
    with tarfile.open(bundle, "w:gz", format=form) as tar:
        for info, data in bundle_entries():
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    destination = tmp_path / "out"
    destination.mkdir()

    capture.extract_bundle(str(bundle), destination)

    for info, data in bundle_entries():
        path = destination / info.name
        if info.issym():
            assert os.readlink(path) == info.linkname
            assert path.resolve().is_dir()
        else:
            assert path.read_bytes() == data
            assert path.stat().st_mode & 0o777 == info.mode
            assert path.stat().st_mtime == info.mtime


def test_a_ustar_name_split_into_prefix_and_name_is_joined(tmp_path):
    name = "host/sys/fs/cgroup/" + "d" * 60 + "/" + "e" * 60 + "/cpuset.cpus"  # over 100: prefix and name
    bundle = tmp_path / "ustar.tar"
    with tarfile.open(bundle, "w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in (("manifest.json", MANIFEST), (name, b"0-3\n")):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    destination = tmp_path / "out"
    destination.mkdir()

    capture.extract_bundle(str(bundle), destination)

    assert (destination / name).read_bytes() == b"0-3\n"


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[:100] + b"X" + data[101:], "a damaged header at byte 0"),
        (lambda data: data[:512 + 10], "ends inside member 'manifest.json'"),
        (lambda data: b"", "empty"),
    ],
    ids=["checksum", "truncated", "empty"],
)
def test_a_damaged_archive_is_refused_in_one_line(tmp_path, damage, reason):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(MANIFEST)
        tar.addfile(info, io.BytesIO(MANIFEST))
    bundle = tmp_path / "damaged.tar"
    bundle.write_bytes(damage(raw.getvalue()))

    with pytest.raises(capture.BundleError) as caught:
        capture.extract_bundle(str(bundle), tmp_path)

    assert str(caught.value).startswith(f"bundle {bundle}: ")
    assert reason in str(caught.value)


# ------------------------------------------------------------------------------------------------ time and signals
def valid_bundle_bytes(members: int) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(MANIFEST)
        tar.addfile(info, io.BytesIO(MANIFEST))
        for number in range(members):
            info = tarfile.TarInfo(f"host/proc/irq/{number}/smp_affinity_list")
            info.size = 2
            tar.addfile(info, io.BytesIO(b"0\n"))
    return raw.getvalue()


class Trickle:
    """Writes a bundle into a FIFO a few bytes at a time, as a stalled download or a hung mount would deliver it."""

    def __init__(self, fifo: Path, data: bytes) -> None:
        os.mkfifo(fifo)
        self.fifo, self.data = fifo, data
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with open(self.fifo, "wb", buffering=0) as out:
                for start in range(0, len(self.data), 64):
                    if self.stop.wait(0.02):
                        return
                    out.write(self.data[start:start + 64])
        except OSError:  # the reader went away
            return

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


@contextlib.contextmanager
def trickled(fifo: Path, data: bytes) -> Iterator[Trickle]:
    trickle = Trickle(fifo, data)
    try:
        yield trickle
    finally:
        trickle.close()


@pytest.mark.slow
def test_an_extraction_that_takes_longer_than_its_time_limit_is_refused(tmp_path):
    destination = tmp_path / "out"
    destination.mkdir()
    with trickled(tmp_path / "slow.tar.gz", valid_bundle_bytes(2000)):
        started = time.monotonic()
        with pytest.raises(capture.BundleError) as caught:
            capture.extract_bundle(str(tmp_path / "slow.tar.gz"), destination, time_limit=1.0)
        took = time.monotonic() - started

    message = str(caught.value)
    assert message.startswith(f"bundle {tmp_path / 'slow.tar.gz'}: ")
    assert "did not finish within 1s" in message
    assert took < 30  # a bound on the behaviour (it stopped), far above the limit


@pytest.fixture(scope="module")
def many_members(tmp_path_factory) -> Path:
    """A valid bundle of many tiny files: its extraction lasts long enough to be interrupted."""
    path = tmp_path_factory.mktemp("many") / "many.tar.gz"
    path.write_bytes(valid_bundle_bytes(100_000))
    return path


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT],
                         ids=["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"])
@pytest.mark.slow
def test_a_signal_during_check_from_removes_the_temporary_directory(tmp_path, many_members, signum):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # The signal's default disposition in the child, whatever this process inherited: a shell's background job
    # ignores SIGINT and SIGQUIT and nohup SIGHUP, and numawatch rightly leaves an ignored signal ignored.
    process = subprocess.Popen([sys.executable, "-m", "numawatch", "check", "--from", str(many_members)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(scratch)},
                               preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not any(scratch.glob("numawatch-bundle-*/host/proc/irq")):
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "the extraction never got going"
            time.sleep(0.01)
        process.send_signal(signum)
        returncode = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stdout, stderr = process.stdout.read(), process.stderr.read()
    process.stdout.close()
    process.stderr.close()

    assert list(scratch.iterdir()) == []
    assert returncode == 128 + signum
    assert stdout == ""
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) <= 1


# ------------------------------------------------------------------------------------------------ depth and piles
def check_from_in(scratch: Path, bundle: Path) -> subprocess.CompletedProcess[str]:
    """``numawatch check --from BUNDLE`` with its temporary directory under ``scratch``."""
    scratch.mkdir()
    return subprocess.run([sys.executable, "-m", "numawatch", "check", "--from", str(bundle)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "TMPDIR": str(scratch)})


def bundle_with(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in [(tarfile.TarInfo("manifest.json"), MANIFEST), *members]:
            if info.name == "manifest.json":
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


@pytest.mark.slow
def test_a_member_a_thousand_directories_deep_is_extracted_and_removed_without_recursion(tmp_path):
    deep = tarfile.TarInfo("host/" + "/".join(["d"] * 1000))
    deep.type = tarfile.DIRTYPE
    bundle = bundle_with(tmp_path / "deep.tar.gz", [(deep, b"")])

    done = check_from_in(tmp_path / "tmp", bundle)

    assert bundle.stat().st_size < 1024
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr
    # Read and evaluated: a host of nothing but directories leaves every source down.
    assert done.stderr.startswith("numawatch: unknown: no check could be evaluated ("), done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.slow
def test_a_chain_of_a_thousand_symlinks_is_refused_in_one_line_and_removed(tmp_path):
    links = []
    for number in range(1000):
        link = tarfile.TarInfo(f"host/l{number}")
        link.type, link.linkname = tarfile.SYMTYPE, f"l{number + 1}"
        links.append((link, b""))
    last = tarfile.TarInfo("host/l1000")
    last.type = tarfile.DIRTYPE
    bundle = bundle_with(tmp_path / "chain.tar.gz", [*links, (last, b"")])

    done = check_from_in(tmp_path / "tmp", bundle)

    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"numawatch: error: bundle {bundle}: member 'host/l")
    assert "a chain of more than 40 symlinks" in line
    assert list((tmp_path / "tmp").iterdir()) == []


class Headers:
    """A tar stream made on the fly from header blocks and their data: piles of headers no file holds."""

    def __init__(self, parts: Iterator[bytes]) -> None:
        self._parts = parts
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while len(self._buffer) < size:
            part = next(self._parts, None)
            if part is None:
                break
            self._buffer += part
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out


def pax_record(key: bytes, value: bytes) -> bytes:
    body = b" " + key + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length).encode()) + len(body) != length:
        length += 1
    return str(length).encode() + body


def extended(kind: bytes, data: bytes) -> bytes:
    return raw_header(b"././@PaxHeader", kind, len(data), magic=b"ustar\x0000") + data + bytes(-len(data) % 512)


def member_blocks(name: bytes) -> bytes:
    return raw_header(name, b"0", 2, magic=b"ustar\x0000") + b"0\n".ljust(512, b"\0")


def read_all(parts: Iterator[bytes]) -> tuple[list[tarfile.TarInfo], int, float]:
    """The members of the stream, the peak of Python allocations while reading it and the CPU seconds it took."""
    import tracemalloc

    tracemalloc.start()
    started = time.process_time()
    try:
        reader = capture.TarReader(Headers(parts), max_name_bytes=capture.MAX_NAME_BYTES + 1,
                                   max_pax_bytes=capture.MAX_PAX_BYTES, max_headers=4 * capture.MAX_MEMBERS)
        members = list(reader)
        return members, tracemalloc.get_traced_memory()[1], time.process_time() - started
    finally:
        tracemalloc.stop()


def test_local_pax_headers_with_distinct_keys_do_not_pile_up():
    """1,000 pax headers of one distinct 60 KB key each before one member: the reproducer kept them all (8,000 took
    490 MiB); one header at a time is held, and unknown keys are not kept."""
    def parts() -> Iterator[bytes]:
        for number in range(1000):
            yield extended(b"x", pax_record(b"k%05d" % number + b"k" * 60_000, b"v"))
        yield member_blocks(b"host/proc/cmdline")

    [member], peak, _ = read_all(parts())

    assert member.name == "host/proc/cmdline"
    assert member.pax_headers == {}
    assert peak < 4 << 20, f"peak {peak >> 20} MiB"


def test_records_kept_for_one_member_are_bounded_in_total():
    """The first record of a kind wins, and what the member keeps adds up to at most MAX_PAX_BYTES."""
    def parts() -> Iterator[bytes]:
        yield extended(b"x", pax_record(b"path", b"p" * 40_000))
        yield extended(b"x", pax_record(b"linkpath", b"l" * 40_000))
        yield member_blocks(b"host/proc/cmdline")

    with pytest.raises(capture.TarFormatError) as caught:
        read_all(parts())

    assert f"keeping more than {capture.MAX_PAX_BYTES} bytes" in caught.value.what


def test_global_pax_records_are_bounded_in_total():
    def parts() -> Iterator[bytes]:
        yield extended(b"g", pax_record(b"uname", b"u" * 40_000))
        yield extended(b"g", pax_record(b"gname", b"g" * 40_000))
        yield member_blocks(b"host/proc/cmdline")

    with pytest.raises(capture.TarFormatError) as caught:
        read_all(parts())

    assert "global pax headers keeping more than" in caught.value.what


@pytest.mark.slow
def test_global_pax_headers_do_not_make_every_member_cost_more():
    """20 global headers of 60 KB of small keys, then 300 members: the reproducer (100 and 2,000) burnt 300 s of CPU
    merging every global record into every member; only known records are kept, so a member costs the same."""
    records = b"".join(pax_record(b"k%06d" % number, b"") for number in range(5000))

    def parts() -> Iterator[bytes]:
        for number in range(20):
            yield extended(b"g", records.replace(b" k", b" %c" % (ord("a") + number)))
        for number in range(300):
            yield member_blocks(b"host/proc/irq/%d" % number)

    members, _, cpu = read_all(parts())

    assert len(members) == 300
    assert all(member.pax_headers == {} for member in members)
    assert cpu < 3.0, f"{cpu:.1f} s of CPU"  # a bound on the behaviour (it does not multiply), far above its cost
