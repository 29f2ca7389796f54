"""``numawatch capture`` and ``numawatch check --from``: a node's inputs in one bundle, evaluated anywhere.

Capture evaluates the host once while recording what the sources touch, then copies exactly that into a .tar.gz:

- which files: sources read the host through the Paths' ``HostFs`` (``confined.py``), which tells the recorder every
  path it opens, lists or stats (``HostFs.observe``): its openat2 goes through ctypes, which no audit hook sees.
  Beside it, a ``sys.addaudithook`` sees every ``open`` (Python's ``open`` and ``os.open``) and every
  ``os.listdir``/``os.scandir`` of the evaluating thread that does not go through the opener, and ``os.stat`` and
  ``os.lstat`` (which raise no audit event) are wrapped for the duration of the recording. Relative names in audit
  events are ignored: one may be relative to a directory descriptor the event does not carry (the opener's own
  component-by-component walk).
- how: the recorded paths are resolved again, component by component, as if each base were ``/`` (links followed
  inside it), and read through the same HostFs, so nothing outside the root reaches the bundle.
- what is copied, under the same path relative to the host root (``host/...``; a ``--path.*`` outside the root
  under ``mounts/<name>/...``): opened files with their content, listed directories with every entry (directories as
  directories, files as empty placeholders, nobody read them), stat'ed paths as placeholders of the same type and
  permission bits, and every symlink met on the way, rewritten relative and inside the bundle (sysfs is made of
  them: ``sys/bus/pci/devices/*`` -> ``../../../devices/...``). Devices, FIFOs and sockets are never copied.
- redacted on the way in: ``/proc/<pid>/cmdline`` (and per-thread) becomes ``[redacted]``; ``/proc/<pid>/environ``
  keeps only the ``IRQBALANCE_*`` settings the irqbalance source reads; an OCI ``config.json`` loses ``process`` and
  ``hooks`` (arguments and environments); RKE2 config files lose the values of keys that name a token, secret,
  password or credential.
- beside the files: ``manifest.json`` (layout, versions, what was redacted or unreadable), the intent file as
  ``intent.yaml``, the node's own report as ``check.json``, and the readings of sources that read no files (NVML)
  through their ``SourceSpec.recording``.

``check --from`` treats the bundle as hostile input: only directories, regular files and relative symlinks that stay
inside are accepted; absolute names, ``..``, hard links, devices, FIFOs and sparse files, duplicate names, paths
through a symlink, members over ``MAX_MEMBER_BYTES`` and archives over ``MAX_TOTAL_BYTES`` or ``MAX_MEMBERS`` are
refused with one line, and every symlink is resolved again once all are in place (a chain may escape that no single
link did). The archive is read as a stream, by ``tarstream.TarReader`` rather than ``tarfile`` (which reads an
extended header whole before anyone can look at its size), so nothing depends on the interpreter's patch level
(``tarfile.data_filter`` came in 3.11.4); its decompressed size is capped and the whole extraction runs under
``EXTRACT_SECONDS``, into a temporary directory that every signal ending the process (SIGTERM, SIGINT, SIGHUP,
SIGQUIT) removes too (``_scratch_directory``). Nothing in extraction or clean-up recurses (``treewalk``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import logging
import os
import re
import select
import signal
import socket
import stat
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numawatch import __version__, confined, tarstream, treewalk
from numawatch.checks import Evaluation, NotEvaluatedCheck, evaluate
from numawatch.errors import MalformedFile, SourceUnavailable
from numawatch.host import Host, ReaderContext, SourceSpec, read_host
from numawatch.intent import REFERENCE, Intent, IntentError
from numawatch.intentfile import parse_intent
from numawatch.model import frozen_map
from numawatch.paths import Paths
from numawatch.tarstream import TarFormatError, TarReader

if TYPE_CHECKING:
    from numawatch.nvml_session import NvmlSession

FORMAT = "numawatch-capture"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
HOST_DIR = "host"
MOUNTS_DIR = "mounts"
READINGS_DIR = "readings"
INTENT_FILE = "intent.yaml"
REPORT_FILE = "check.json"
REDACTED = b"[redacted]"

# Bigger than any file numawatch reads (its own per-file limit is 16 MiB), so an oversized file is captured whole and
# the node's "larger than the limit" reproduces offline.
MAX_MEMBER_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024
# A 384-CPU node with ~860 containers lists a few hundred thousand cgroup and procfs entries at most.
MAX_MEMBERS = 1_000_000
MAX_NAME_BYTES = 4096
MAX_SYMLINKS = 40  # the kernel's MAXSYMLINKS
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
# What one pax header may hold: a member's path and link path (MAX_NAME_BYTES each) and a few numbers, with room.
MAX_PAX_BYTES = 64 * 1024
# Headers and padding come on top of the members' own sizes; a generous allowance for them.
MAX_STREAM_BYTES = MAX_TOTAL_BYTES + 1024 * MAX_MEMBERS
# How long check --from may take to extract a bundle: far more than the largest legitimate one needs
# (bench/bundle_extract.py; docs/capture.md has its figures); a pipe that stops sending, or a bundle made to be slow,
# is refused instead of waited on.
EXTRACT_SECONDS = 300.0


class CaptureError(Exception):
    """The bundle could not be written; one line."""


class BundleError(Exception):
    """The bundle cannot be read or is refused; one line naming the bundle and, where there is one, the member."""


# --------------------------------------------------------------------------------------------------- recording
@dataclass
class Recorded:
    """What one evaluation touched, as absolute path strings."""

    opened: set[str] = field(default_factory=set)
    listed: set[str] = field(default_factory=set)
    stated: set[str] = field(default_factory=set)


class _Recorder:
    """The one audit hook of the process and the recording it feeds.

    Audit hooks cannot be removed once added (PEP 578), so there is one per process, installed on first use, and it
    does nothing unless a recording is active for the calling thread. This is the only process-wide state in
    numawatch, and only ``capture`` (a one-shot command) and its tests ever create it.
    """

    def __init__(self) -> None:
        self.active: Recorded | None = None
        self.thread = 0
        self._lock = threading.Lock()
        self._installed = False

    def _observed(self, path: str, kind: str) -> None:
        """What the confined opener reports (an absolute path as the source spelled it)."""
        recording = self.active
        if recording is None or threading.get_ident() != self.thread:
            return
        if kind == "opened":
            recording.opened.add(path)
        elif kind == "listed":
            recording.listed.add(path)
        else:
            recording.stated.add(path)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        recording = self.active
        if recording is None or threading.get_ident() != self.thread:
            return
        try:  # a hook that raises would make the audited operation fail
            if event == "open":
                path, mode, flags = args
                if isinstance(mode, str):
                    if any(char in mode for char in "wax+"):
                        return
                elif isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR):
                    return
                text = _path_text(path)
                if text is not None:
                    recording.opened.add(text)
            elif event in ("os.listdir", "os.scandir"):
                text = _path_text(args[0] if args[0] is not None else ".")
                if text is not None:
                    recording.listed.add(text)
        except Exception:  # pragma: no cover - defensive: never break the reader being recorded
            return

    @contextlib.contextmanager
    def recording(self, fs: confined.HostFs) -> Iterator[Recorded]:
        with self._lock:
            if not self._installed:
                sys.addaudithook(self._hook)
                self._installed = True
            recorded = Recorded()
            real_stat, real_lstat = os.stat, os.lstat

            def recording_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
                if threading.get_ident() == self.thread and not kwargs.get("dir_fd"):
                    text = _path_text(path)
                    if text is not None:
                        recorded.stated.add(text)
                return real_stat(path, *args, **kwargs)

            def recording_lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
                if threading.get_ident() == self.thread and not kwargs.get("dir_fd"):
                    text = _path_text(path)
                    if text is not None:
                        recorded.stated.add(text)
                return real_lstat(path, *args, **kwargs)

            self.thread = threading.get_ident()
            self.active = recorded
            os.stat, os.lstat = recording_stat, recording_lstat
            try:
                with fs.observe(self._observed):
                    yield recorded
            finally:
                os.stat, os.lstat = real_stat, real_lstat
                self.active = None


_RECORDER = _Recorder()


def _path_text(path: Any) -> str | None:
    """The absolute path string an audited call was given; None for a file descriptor or a relative name (it may be
    relative to a directory descriptor that the event does not carry)."""
    if isinstance(path, int):
        return None
    text = os.fsdecode(os.fspath(path))
    return text if text.startswith("/") else None


def record_evaluation(
    paths: Paths,
    intent: Intent,
    sources: Iterable[SourceSpec] | None = None,
    *,
    nvml: NvmlSession | None = None,
    libraries: Mapping[str, Any] | None = None,
    kubernetes_api: Any = None,
) -> tuple[Evaluation, Recorded]:
    """Read and judge the host once (NVML through ``nvml``, AMD SMI and HLML through ``libraries``, the API through
    ``kubernetes_api``), recording what was touched (blocking; on the calling thread)."""
    with _RECORDER.recording(paths.fs) as recorded:
        host = read_host(paths, sources, nvml=nvml, libraries=libraries, kubernetes_api=kubernetes_api)
        evaluation = evaluate(host, intent)
    return evaluation, recorded


# --------------------------------------------------------------------------------------------------- redaction
_PID_FILE = re.compile(r"^[0-9]+/(?:task/[0-9]+/)?(cmdline|environ)$")
_SECRET_KEY = re.compile(
    r"^(?P<head>\s*-?\s*[\"']?[\w.-]*(?:token|secret|password|passwd|credential)[\w.-]*[\"']?\s*:\s*)\S.*$",
    re.IGNORECASE | re.MULTILINE,
)


def environ_keep() -> frozenset[str]:
    """The environment variables numawatch reads from a process (the irqbalance source's)."""
    from numawatch.sources import irqbalance

    return frozenset({irqbalance.BANNED_CPULIST, irqbalance.BANNED_CPUS, irqbalance.ARGS})


def redact_cmdline(data: bytes) -> bytes:
    """``/proc/<pid>/cmdline``: nothing of it is kept."""
    return REDACTED


def redact_environ(data: bytes, keep: frozenset[str]) -> bytes:
    """``/proc/<pid>/environ`` (NUL-separated ``KEY=VALUE``): the ``keep`` variables, then one ``[redacted]``."""
    kept = [item for item in data.split(b"\0") if item.partition(b"=")[0].decode("utf-8", "replace") in keep]
    return b"".join(item + b"\0" for item in kept) + REDACTED + b"\0"


def redact_oci_config(data: bytes) -> bytes | None:
    """An OCI runtime ``config.json`` without ``process`` and ``hooks`` (arguments, environment); None when the
    file is not an OCI config (left alone)."""
    try:
        spec = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(spec, dict) or "ociVersion" not in spec or not ({"process", "hooks"} & set(spec)):
        return None
    for key in ("process", "hooks"):
        if key in spec:
            spec[key] = REDACTED.decode()
    return json.dumps(spec, indent=1).encode()


def redact_secret_keys(data: bytes) -> bytes:
    """YAML ``key: value`` lines whose key names a token, secret, password or credential get ``"[redacted]"``."""
    text = data.decode("utf-8", errors="replace")
    return _SECRET_KEY.sub(lambda match: f'{match.group("head")}"[redacted]"', text).encode()


# --------------------------------------------------------------------------------------------------- the tree
@dataclass
class _Entry:
    kind: str  # "dir", "file", "link"
    mode: int = 0o755
    mtime: float = 0.0
    data: bytes | None = None  # file content; None: a placeholder (listed or stat'ed, never read)
    target: str = ""  # link target, relative


@dataclass(frozen=True)
class _Base:
    prefix: str  # in the bundle: "host" or "mounts/<name>"
    real: str  # on this machine, symlinks resolved
    spellings: tuple[tuple[str, ...], ...]  # the base's path components as given and as resolved


class _TreeBuilder:
    """Copies what was recorded into bundle entries, resolving symlinks as if each base were ``/``."""

    def __init__(self, fs: confined.HostFs, bases: list[_Base], redactor: Callable[[str, bytes], bytes | None]) -> None:
        self.fs = fs
        self.bases = sorted(bases, key=lambda base: -max(len(spelling) for spelling in base.spellings))
        self.entries: dict[str, _Entry] = {}
        self.redactor = redactor
        self.redacted: list[str] = []
        self.unreadable: dict[str, str] = {}
        self.total = 0

    def locate(self, path: str) -> tuple[_Base, list[str]] | None:
        names = [name for name in path.split("/") if name and name != "."]
        for base in self.bases:
            for spelling in base.spellings:
                if names[: len(spelling)] == list(spelling):
                    return base, names[len(spelling):]
        return None

    def _name(self, base: _Base, parts: list[str]) -> str:
        return "/".join([base.prefix, *parts])

    def _add(self, name: str, entry: _Entry) -> None:
        existing = self.entries.get(name)
        if existing is not None and (existing.kind != "file" or existing.data is not None or entry.data is None):
            return  # first one wins, except that content replaces a placeholder
        self.entries[name] = entry
        if len(self.entries) > MAX_MEMBERS:
            raise CaptureError(f"more than {MAX_MEMBERS} entries to capture; the bundle would be refused")

    def resolve(self, base: _Base, parts: list[str], follow_last: bool, budget: list[int]) -> list[str] | None:
        """The real location of ``parts`` under ``base`` (None when it does not exist), recording every directory
        and symlink on the way."""
        pending = parts[::-1]
        current: list[str] = []
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if current:
                    current.pop()
                continue
            real = os.path.join(base.real, *current, name)
            try:
                info = self.fs.lstat(real)
            except OSError:
                return None
            if stat.S_ISLNK(info.st_mode) and (pending or follow_last):
                budget[0] -= 1
                if budget[0] < 0:
                    return None
                try:
                    target = self.fs.readlink(real)
                except OSError:
                    return None
                target_parts = target.split("/")
                start = [] if target.startswith("/") else list(current)
                destination = self.resolve(base, start + target_parts, True, budget)
                lexical = destination if destination is not None else _lexical(start + target_parts)
                self._add(self._name(base, [*current, name]),
                          _Entry("link", mtime=info.st_mtime, target=_relative(lexical, current)))
                if destination is None:
                    return None
                current = destination
                continue
            if stat.S_ISLNK(info.st_mode):  # the last component, not followed (lstat)
                try:
                    target = self.fs.readlink(real)
                except OSError:
                    return None
                start = [] if target.startswith("/") else list(current)
                destination = self.resolve(base, start + target.split("/"), True, budget)
                lexical = destination if destination is not None else _lexical(start + target.split("/"))
                self._add(self._name(base, [*current, name]),
                          _Entry("link", mtime=info.st_mtime, target=_relative(lexical, current)))
                return [*current, name]
            if stat.S_ISDIR(info.st_mode):
                current.append(name)
                self._add(self._name(base, current), _Entry("dir", stat.S_IMODE(info.st_mode), info.st_mtime))
                continue
            if pending:
                return None  # a file where a directory was expected
            current.append(name)
        return current

    def record(self, path: str, *, content: bool = False, listing: bool = False, follow_last: bool = True) -> None:
        located = self.locate(path)
        if located is None:
            return
        base, parts = located
        if base.prefix not in self.entries:
            with contextlib.suppress(OSError):
                info = self.fs.stat_path(base.real)
                self._add(base.prefix, _Entry("dir", stat.S_IMODE(info.st_mode), info.st_mtime))
        resolved = self.resolve(base, parts, follow_last, [MAX_SYMLINKS])
        if resolved is None:
            return
        real = os.path.join(base.real, *resolved)
        try:
            info = self.fs.lstat(real)
        except OSError:
            return
        name = self._name(base, resolved)
        if stat.S_ISREG(info.st_mode):
            data = self._content(name, real) if content else None
            self._add(name, _Entry("file", stat.S_IMODE(info.st_mode), info.st_mtime, data))
        elif stat.S_ISDIR(info.st_mode) and listing:
            try:
                names = self.fs.listdir(real)
            except OSError as error:
                self.unreadable[name] = error.strerror or str(error)
                return
            for entry in names:
                self.record(os.path.join(real, entry), follow_last=True)

    def _content(self, name: str, real: str) -> bytes | None:
        try:
            fd = self.fs.open_file(real)  # never a FIFO or device, never through a link swapped in since
            try:
                chunks = []
                size = 0
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_MEMBER_BYTES:
                        self.unreadable[name] = f"larger than {MAX_MEMBER_BYTES} bytes"
                        return None
            finally:
                os.close(fd)
        except OSError as error:
            self.unreadable[name] = error.strerror or str(error)
            return None
        data = b"".join(chunks)
        redacted = self.redactor(name, data)
        if redacted is not None and redacted != data:
            self.redacted.append(name)
            data = redacted
        self.total += len(data)
        if self.total > MAX_TOTAL_BYTES:
            raise CaptureError(f"more than {MAX_TOTAL_BYTES} bytes to capture; the bundle would be refused")
        return data


def _lexical(parts: list[str]) -> list[str]:
    """``parts`` with ``.`` and ``..`` folded, never above the top (chroot semantics)."""
    out: list[str] = []
    for name in parts:
        if name in ("", "."):
            continue
        if name == "..":
            if out:
                out.pop()
            continue
        out.append(name)
    return out


def _relative(destination: list[str], link_dir: list[str]) -> str:
    """A link target that reaches ``destination`` from a link in ``link_dir`` (both relative to the same base)."""
    return os.path.relpath("/" + "/".join(destination), "/" + "/".join(link_dir))


# --------------------------------------------------------------------------------------------------- capture
@dataclass(frozen=True)
class CaptureResult:
    files: int
    bytes: int
    redacted: int
    summary: str
    evaluation: Evaluation


def _bases(paths: Paths) -> tuple[list[_Base], dict[str, str]]:
    """Where each part of the host goes in the bundle, and the manifest's ``paths``."""
    root = os.path.abspath(paths.root)
    root_real = os.path.realpath(root)
    bases = [_Base(HOST_DIR, root_real, _spellings(root, root_real))]
    layout: dict[str, str] = {"root": HOST_DIR}
    for name in ("procfs", "sysfs", "kubelet", "rke2"):
        given = os.path.abspath(getattr(paths, name))
        relative = _inside(given, root) if _inside(given, root) is not None else _inside(given, root_real)
        if relative is not None:
            layout[name] = "/".join(part for part in (HOST_DIR, relative) if part)
            continue
        prefix = f"{MOUNTS_DIR}/{name}"
        real = os.path.realpath(given)
        bases.append(_Base(prefix, real, _spellings(given, real)))
        layout[name] = prefix
    return bases, layout


def _spellings(given: str, real: str) -> tuple[tuple[str, ...], ...]:
    return tuple(dict.fromkeys(tuple(name for name in path.split("/") if name) for path in (given, real)))


def _inside(path: str, base: str) -> str | None:
    """``path`` relative to ``base`` ("" for the base itself), None when it is not under it."""
    if base == "/":
        return path.strip("/")
    if path == base:
        return ""
    if path.startswith(base.rstrip("/") + "/"):
        return path[len(base.rstrip("/")) + 1:]
    return None


def _excluded_prefixes(extra: Iterable[str], bases: Iterable[_Base]) -> tuple[str, ...]:
    """Python's own files, opened by lazy imports during the evaluation, are not the host's.

    A directory that holds a base (``python -m numawatch`` run from inside the host root puts the current directory
    on sys.path) is never excluded, or nothing would be captured.
    """
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.abspath(__file__))}
    candidates.update(entry for entry in sys.path if entry and os.path.isdir(entry))
    holders = [base.real.rstrip("/") + "/" for base in bases]
    prefixes = {os.path.abspath(path).rstrip("/") + "/" for path in candidates}
    prefixes = {prefix for prefix in prefixes if not any(holder.startswith(prefix) for holder in holders)}
    prefixes.update(os.path.abspath(path) for path in extra)
    return tuple(sorted(prefix for prefix in prefixes if prefix != "/"))


def capture(
    paths: Paths,
    intent: Intent,
    output: str | os.PathLike[str],
    *,
    intent_file: str | None = None,
    sources: Iterable[SourceSpec] | None = None,
    nvml: NvmlSession | None = None,
    libraries: Mapping[str, Any] | None = None,
    kubernetes_api: Any = None,
) -> CaptureResult:
    """Evaluate the host once (NVML through ``nvml``, AMD SMI and HLML through ``libraries``, the Kubernetes API
    through ``kubernetes_api``: a session that has read once), recording what it reads, and write the bundle to
    ``output``."""
    from numawatch import report
    from numawatch.sources import SOURCES

    specs = tuple(sources if sources is not None else SOURCES)
    evaluation, recorded = record_evaluation(paths, intent, specs, nvml=nvml, libraries=libraries,
                                             kubernetes_api=kubernetes_api)
    bases, layout = _bases(paths)
    procfs_prefix = layout["procfs"] + "/"
    rke2_prefix = layout["rke2"] + "/"
    keep = environ_keep()

    def redactor(name: str, data: bytes) -> bytes | None:
        if name.startswith(procfs_prefix):
            match = _PID_FILE.match(name[len(procfs_prefix):])
            if match is not None:
                return redact_cmdline(data) if match.group(1) == "cmdline" else redact_environ(data, keep)
        if name.endswith("/config.json"):
            return redact_oci_config(data)
        if name.startswith(rke2_prefix) and name.endswith((".yaml", ".yml")):
            return redact_secret_keys(data)
        return None

    excluded = _excluded_prefixes([os.path.abspath(intent_file)] if intent_file else [], bases)
    tree = _TreeBuilder(paths.fs, bases, redactor)
    for name in ("procfs", "sysfs", "kubelet", "rke2"):  # the layout's own directories, where they exist
        tree.record(os.path.abspath(getattr(paths, name)))

    def wanted(path: str) -> bool:
        return not path.startswith(excluded)

    for path in sorted(filter(wanted, recorded.stated)):
        tree.record(path)
    for path in sorted(filter(wanted, recorded.listed)):
        tree.record(path, listing=True)
    for path in sorted(filter(wanted, recorded.opened)):
        tree.record(path, content=True)

    extras: dict[str, bytes] = {}
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "numawatch_version": __version__,
        "created": report.timestamp(time.time()),
        "hostname": socket.gethostname(),
        "host_paths": {name: str(getattr(paths, name)) for name in ("root", "procfs", "sysfs", "kubelet", "rke2")},
        "paths": layout,
        "intent": {"source": intent.source, "file": None},
        "report": REPORT_FILE,
        "readings": {},
        "down": {},
        "redacted": sorted(tree.redacted),
        "unreadable": dict(sorted(tree.unreadable.items())),
    }
    if intent_file is not None:
        try:
            extras[INTENT_FILE] = Path(intent_file).read_bytes()
        except OSError as error:
            raise CaptureError(f"cannot read intent file {intent_file}: {error.strerror or error}") from None
        manifest["intent"]["file"] = INTENT_FILE
    for spec in specs:
        if spec.recording is None:
            continue
        result = evaluation.host.get(spec.name)
        if result is None:
            manifest["down"][spec.name] = evaluation.host.down_reason(spec.name)
            continue
        member = f"{READINGS_DIR}/{spec.name}"
        extras[member] = spec.recording.dump(result)
        manifest["readings"][spec.name] = member
    extras[REPORT_FILE] = report.render_json(evaluation, str(paths.root)).encode()
    extras = {MANIFEST: json.dumps(manifest, indent=1).encode() + b"\n", **extras}

    _write_bundle(output, extras, tree.entries)
    files = sum(1 for entry in tree.entries.values() if entry.kind == "file" and entry.data is not None)
    return CaptureResult(files, tree.total, len(tree.redacted), report.summary(evaluation), evaluation)


def _write_bundle(output: str | os.PathLike[str], extras: Mapping[str, bytes], entries: Mapping[str, _Entry]) -> None:
    target = os.fspath(output)
    directory = os.path.dirname(os.path.abspath(target))
    try:
        handle, temporary = tempfile.mkstemp(prefix=".numawatch-capture-", suffix=".tmp", dir=directory)
    except OSError as error:
        raise CaptureError(f"cannot write {target}: {error.strerror or error}") from None
    now = time.time()
    try:
        with os.fdopen(handle, "wb") as raw, tarfile.open(
            fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=6
        ) as tar:
            for name, data in extras.items():
                tar.addfile(_info(name, tarfile.REGTYPE, 0o644, now, len(data)), io.BytesIO(data))
            ordered = sorted(entries.items(), key=lambda item: (item[1].kind == "link", item[0].split("/")))
            for name, entry in ordered:
                if entry.kind == "dir":
                    tar.addfile(_info(name, tarfile.DIRTYPE, entry.mode, entry.mtime))
                elif entry.kind == "link":
                    info = _info(name, tarfile.SYMTYPE, 0o777, entry.mtime)
                    info.linkname = entry.target
                    tar.addfile(info)
                else:
                    data = entry.data or b""
                    tar.addfile(_info(name, tarfile.REGTYPE, entry.mode, entry.mtime, len(data)), io.BytesIO(data))
        os.chmod(temporary, 0o600)  # it holds a node's configuration: readable by whoever captured it
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise CaptureError(f"cannot write {target}: {error.strerror or error}") from None
        raise


def _info(name: str, kind: bytes, mode: int, mtime: float, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = int(mtime)
    info.size = size
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# --------------------------------------------------------------------------------------------------- reading
class _Deadline:
    """The time an extraction may take; ``left()`` raises once it is spent (checked at every read and member)."""

    def __init__(self, bundle: str, seconds: float) -> None:
        self.bundle = bundle
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise BundleError(f"bundle {self.bundle}: extraction did not finish within {self.seconds:g}s (a stalled "
                              "pipe, or a bundle made to be slow); refused")
        return left


class _RawBundle(io.RawIOBase):
    """The bundle's bytes from its file descriptor; a pipe or FIFO is waited on only as long as the deadline allows
    (it is open non-blocking, so neither a writer that never comes nor one that stops sending hangs the read)."""

    def __init__(self, fd: int, pipe: bool, deadline: _Deadline) -> None:
        self._fd = fd
        self._pipe = pipe
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            wait = self._deadline.left()
            if self._pipe and not select.select([self._fd], [], [], wait)[0]:
                continue  # nothing came in time: left() refuses on the next turn
            try:
                return os.readv(self._fd, [buffer])
            except BlockingIOError:
                continue

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class _Capped(io.RawIOBase):
    """A read-only stream that fails once more than ``limit`` bytes were read (a decompression bomb) or once the
    deadline is spent."""

    def __init__(self, inner: Any, limit: int, bundle: str, deadline: _Deadline) -> None:
        self._inner = inner
        self._left = limit
        self._bundle = bundle
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._deadline.left()
        data = self._inner.read(len(buffer))
        self._left -= len(data)
        if self._left < 0:
            raise BundleError(f"bundle {self._bundle}: more than {MAX_TOTAL_BYTES} bytes once decompressed")
        buffer[: len(data)] = data
        return len(data)


@dataclass(frozen=True)
class Manifest:
    directory: Path
    layout: Mapping[str, str]
    intent_source: str
    intent_file: str | None
    readings: Mapping[str, str]
    down: Mapping[str, str]
    host_root: str

    def paths(self) -> Paths:
        where = {name: self.directory / self.layout[name] for name in ("root", "procfs", "sysfs", "kubelet", "rke2")}
        return Paths.from_root(where["root"], procfs=where["procfs"], sysfs=where["sysfs"],
                               kubelet=where["kubelet"], rke2=where["rke2"])


def extract_bundle(
    bundle: str, destination: str | os.PathLike[str], *, time_limit: float = EXTRACT_SECONDS
) -> Manifest:
    """Check and extract ``bundle`` into ``destination`` (an empty directory) within ``time_limit`` seconds; its
    manifest."""
    dest = os.path.realpath(destination)
    deadline = _Deadline(bundle, time_limit)
    raw = _open_bundle(bundle, deadline)
    try:
        head = raw.peek(2)[:2]
        stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if head == b"\x1f\x8b" else raw
        capped = io.BufferedReader(_Capped(stream, MAX_STREAM_BYTES, bundle, deadline), 1 << 16)
        # Every member may come with a long name, a long link name and a pax header: those are headers too.
        reader = TarReader(capped, max_name_bytes=MAX_NAME_BYTES + 1, max_pax_bytes=MAX_PAX_BYTES,
                           max_headers=4 * MAX_MEMBERS)
        _extract_members(reader, bundle, dest, deadline)
    except BundleError:
        raise
    except TarFormatError as error:
        if error.member is not None:
            raise BundleError(f"bundle {bundle}: member {error.member[:200]!r}: {error.what}") from None
        raise BundleError(f"bundle {bundle}: not a readable tar archive ({error.what})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise BundleError(f"bundle {bundle}: not a readable tar archive ({_one_line(error)})") from None
    except OSError as error:
        raise BundleError(f"bundle {bundle}: cannot extract it: {error.strerror or error}") from None
    finally:
        raw.close()
    _check_links(bundle, dest)
    return _read_manifest(bundle, Path(dest))


def _open_bundle(bundle: str, deadline: _Deadline) -> io.BufferedReader:
    """The bundle file, buffered; a pipe or FIFO (``check --from <(curl ...)``) is read under the deadline."""
    try:
        fd = os.open(bundle, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise BundleError(f"bundle {bundle}: cannot read it: {error.strerror or error}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise BundleError(f"bundle {bundle}: cannot read it: it is a directory")
        pipe = not stat.S_ISREG(mode)
        if not pipe:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(_RawBundle(fd, pipe, deadline), 1 << 16)


def _extract_members(reader: TarReader, bundle: str, dest: str, deadline: _Deadline) -> None:
    seen: set[str] = set()
    links: set[str] = set()
    directories: set[str] = {""}  # relative directories that exist, given as members or made as parents
    directory_times: list[tuple[str, float]] = []
    total = 0
    for count, member in enumerate(reader, start=1):
        deadline.left()
        name = member.name
        refuse = _refusal(member, seen, links)
        if refuse is not None:
            raise BundleError(f"bundle {bundle}: member {name[:200]!r}: {refuse}")
        if count > MAX_MEMBERS:
            raise BundleError(f"bundle {bundle}: more than {MAX_MEMBERS} members")
        total += member.size
        if total > MAX_TOTAL_BYTES:
            raise BundleError(f"bundle {bundle}: members add up to more than {MAX_TOTAL_BYTES} bytes")
        clean = _clean_name(name)
        path = os.path.join(dest, clean)
        try:
            _make_parents(dest, clean, directories)
            if member.isdir():
                if clean not in directories:
                    os.mkdir(path, 0o700)
                    directories.add(clean)
                directory_times.append((path, member.mtime))
            elif member.issym():
                os.symlink(member.linkname, path)
            else:
                _write_member(path, member, reader)
        except OSError as error:
            raise BundleError(f"bundle {bundle}: member {name[:200]!r}: cannot extract it: "
                              f"{error.strerror or error}") from None
        seen.add(clean)
        if member.issym():
            links.add(clean)
    # Last, as tarfile's extractall does: creating what is inside a directory changes its mtime.
    for path, mtime in reversed(directory_times):
        os.utime(path, (mtime, mtime), follow_symlinks=False)


def _make_parents(dest: str, clean: str, directories: set[str]) -> None:
    """Create the directories above ``clean`` that do not exist yet. None of them can be a symlink: a path through
    a symlink member is refused, and nothing but this extraction writes into ``dest``."""
    parent = clean.rpartition("/")[0]
    missing: list[str] = []
    while parent not in directories:
        missing.append(parent)
        parent = parent.rpartition("/")[0]
    for directory in reversed(missing):
        os.mkdir(os.path.join(dest, directory), 0o700)
        directories.add(directory)


def _write_member(path: str, member: tarfile.TarInfo, reader: TarReader) -> None:
    """A regular file with the member's data, its captured permission bits (always owner-readable: sources look at
    them, an IRQ whose smp_affinity is read-only is a managed one) and its mtime."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        for chunk in reader.data():
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
        os.fchmod(fd, (member.mode & 0o777) | stat.S_IRUSR)
        os.utime(fd, (member.mtime, member.mtime))
    finally:
        os.close(fd)


def _clean_name(name: str) -> str:
    return "/".join(part for part in name.split("/") if part and part != ".")


def _refusal(member: tarfile.TarInfo, seen: set[str], links: set[str]) -> str | None:
    """Why ``member`` is refused, or None."""
    name = member.name
    if not name or "\0" in name or len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return "a name that is empty, too long or has a NUL"
    if name.startswith("/") or os.path.isabs(name):
        return "an absolute path"
    parts = [part for part in name.split("/") if part and part != "."]
    if not parts or ".." in parts:
        return "a path with '..'"
    clean = "/".join(parts)
    if clean in seen:
        return "a second member with the same name"
    for depth in range(1, len(parts)):
        if "/".join(parts[:depth]) in links:
            return "a path through a symlink"
    if member.islnk():
        return "a hard link"
    if member.type == tarfile.GNUTYPE_SPARSE or tarstream.SPARSE_RECORD in member.pax_headers:
        return "a sparse file"
    if member.ischr() or member.isblk():
        return "a device node"
    if member.isfifo():
        return "a FIFO"
    if not (member.isreg() or member.isdir() or member.issym()):
        return "an unsupported member type"
    if member.size > MAX_MEMBER_BYTES:
        return f"larger than {MAX_MEMBER_BYTES} bytes"
    if member.issym():
        target = member.linkname
        if not target or target.startswith("/"):
            return "a symlink to an absolute path"
        if _lexical_escapes(parts[:-1], target):
            return "a symlink pointing outside the bundle"
    return None


def _lexical_escapes(link_dir: list[str], target: str) -> bool:
    depth = len(link_dir)
    for name in target.split("/"):
        if name in ("", "."):
            continue
        depth = depth - 1 if name == ".." else depth + 1
        if depth < 0:
            return True
    return False


def _check_links(bundle: str, dest: str) -> None:
    """Once everything is in place, no symlink may resolve outside: a chain can escape that no single link did.
    Walked and resolved without recursion (``treewalk``): a bundle chooses its depth and its chains."""
    for path in treewalk.symlinks(dest):
        member = os.path.relpath(path, dest)
        try:
            inside = treewalk.resolve_inside(dest, member, MAX_SYMLINKS)
        except treewalk.LinkLoop:
            raise BundleError(f"bundle {bundle}: member {member[:200]!r}: a chain of more than {MAX_SYMLINKS} "
                              "symlinks") from None
        except OSError as error:
            raise BundleError(f"bundle {bundle}: member {member[:200]!r}: cannot resolve it: "
                              f"{error.strerror or error}") from None
        if inside is None:
            raise BundleError(f"bundle {bundle}: member {member[:200]!r}: a symlink chain resolving outside the "
                              "bundle")


def _read_manifest(bundle: str, dest: Path) -> Manifest:
    path = dest / MANIFEST
    if not path.is_file() or path.is_symlink():
        raise BundleError(f"bundle {bundle}: not a numawatch capture bundle (no {MANIFEST})")
    try:
        with open(path, "rb") as handle:
            document = json.loads(handle.read(MAX_MANIFEST_BYTES))
    except (ValueError, OSError, RecursionError):
        raise BundleError(f"bundle {bundle}: {MANIFEST} is not valid JSON") from None

    def fail(key: str, what: str) -> BundleError:
        return BundleError(f"bundle {bundle}: {MANIFEST}: {key}: {what}")

    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BundleError(f"bundle {bundle}: not a numawatch capture bundle ({MANIFEST} has another format)")
    if document.get("format_version") != FORMAT_VERSION:
        raise fail("format_version", f"expected {FORMAT_VERSION}, found {document.get('format_version')!r}; "
                                     "capture it again with this numawatch version")
    layout = document.get("paths")
    if not isinstance(layout, dict):
        raise fail("paths", "expected a mapping")
    for name in ("root", "procfs", "sysfs", "kubelet", "rke2"):
        value = layout.get(name)
        if not isinstance(value, str) or not _safe_relative(value):
            raise fail(f"paths.{name}", "expected a relative path inside the bundle")
    intent = document.get("intent") or {}
    intent_file = intent.get("file") if isinstance(intent, dict) else None
    if intent_file is not None and (not isinstance(intent_file, str) or not _safe_relative(intent_file)):
        raise fail("intent.file", "expected a relative path inside the bundle")
    readings = document.get("readings") or {}
    down = document.get("down") or {}
    if not isinstance(readings, dict) or not all(
        isinstance(value, str) and _safe_relative(value) for value in readings.values()
    ):
        raise fail("readings", "expected a mapping of source to a relative path inside the bundle")
    if not isinstance(down, dict):
        raise fail("down", "expected a mapping of source to reason")
    host_paths = document.get("host_paths") or {}
    return Manifest(
        directory=dest,
        layout={name: layout[name] for name in ("root", "procfs", "sysfs", "kubelet", "rke2")},
        intent_source=str(intent.get("source", "reference profile")) if isinstance(intent, dict) else "",
        intent_file=intent_file,
        readings={str(key): value for key, value in readings.items()},
        down={str(key): str(value) for key, value in down.items()},
        host_root=str(host_paths.get("root", "/")) if isinstance(host_paths, dict) else "/",
    )


def _safe_relative(value: str) -> bool:
    parts = value.split("/")
    return bool(value) and not value.startswith("/") and ".." not in parts and "\0" not in value


def _one_line(error: object) -> str:
    return " ".join(str(error).split())[:300]


# --------------------------------------------------------------------------------------------------- evaluating
def _replayed(specs: Iterable[SourceSpec], manifest: Manifest, extracted_root: str) -> tuple[SourceSpec, ...]:
    """The sources as they read a bundle: one with a recording reads the bundle's reading back instead of asking the
    device; every other one reads the extracted files, and names the node's paths in its errors."""
    translate = _Translator(extracted_root, manifest.host_root)
    out: list[SourceSpec] = []
    for spec in specs:
        recording = spec.recording
        if recording is None:
            factory = spec.factory
            out.append(dataclasses.replace(
                spec, read=translate.wrap(spec.read),
                incremental=translate.wrap(spec.incremental) if spec.incremental else None,
                factory=_translated_factory(factory, translate) if factory else None,
            ))
            continue
        member = manifest.readings.get(spec.name)
        if member is None:
            reason = manifest.down.get(spec.name, f"source {spec.name} was not recorded in the bundle")
            read = _down(reason)
        else:
            read = _reading(recording, manifest.directory / member)
        out.append(dataclasses.replace(spec, read=read, fingerprint=None, incremental=None, factory=None))
    return tuple(out)


class _Translator:
    """Rewrites a source's error so that it names the node's path, not the extraction directory.

    Done where the error is raised, before the host reader cuts the reason to one 300-character line, so a long
    reason is cut at the same place as on the node.
    """

    def __init__(self, extracted_root: str, host_root: str) -> None:
        self.extracted = extracted_root
        self.node = host_root.rstrip("/")

    def text(self, value: str) -> str:
        return value.replace(self.extracted, self.node) if self.extracted in value else value

    def wrap(self, read: Callable[..., Any]) -> Callable[..., Any]:
        def translated(paths: Paths, *inputs: Any) -> Any:
            try:
                return read(paths, *inputs)
            except MalformedFile as error:
                raise MalformedFile(self.text(error.path), self.text(error.what)) from None
            except SourceUnavailable as error:
                raise SourceUnavailable(self.text(str(error))) from None
            except OSError as error:
                if isinstance(error.filename, str):
                    error.filename = self.text(error.filename)
                raise

        return translated


class _TranslatedState:
    """A stateful source's per-reader object (``SourceSpec.factory``), its ``read`` translated."""

    def __init__(self, inner: Any, translate: _Translator) -> None:
        self.read = translate.wrap(inner.read)


def _translated_factory(
    factory: Callable[[ReaderContext], Any], translate: _Translator
) -> Callable[[ReaderContext], _TranslatedState | None]:
    """A ``SourceSpec.factory`` whose per-reader objects read the extracted files (see _TranslatedState)."""

    def make(context: ReaderContext) -> _TranslatedState | None:
        inner = factory(context)
        return _TranslatedState(inner, translate) if inner is not None else None

    return make


# A replayed source reads the bundle, whatever its needs hand it (``inputs``).
def _down(reason: str) -> Callable[..., Any]:
    def read(paths: Paths, *inputs: Any) -> Any:
        raise SourceUnavailable(reason)

    return read


def _reading(recording: Any, path: Path) -> Callable[..., Any]:
    def read(paths: Paths, *inputs: Any) -> Any:
        with open(path, "rb") as handle:
            return recording.load(handle.read(MAX_MEMBER_BYTES + 1))

    return read


def evaluate_bundle(
    bundle: str, intent: Intent | None = None, sources: Iterable[SourceSpec] | None = None
) -> Evaluation:
    """Evaluate a capture bundle offline: with ``intent``, else the intent captured with it, else the reference."""
    from numawatch.sources import SOURCES

    with _scratch_directory() as scratch:
        manifest = extract_bundle(bundle, scratch)
        if intent is None:
            intent = _bundled_intent(bundle, manifest)
        extracted_root = os.path.join(os.path.realpath(scratch), manifest.layout["root"])
        specs = _replayed(sources if sources is not None else SOURCES, manifest, extracted_root)
        with _logged_as_on_the_node(_Translator(extracted_root, manifest.host_root)):
            evaluation = evaluate(read_host(manifest.paths(), specs), intent)
        return _as_on_the_node(evaluation, extracted_root, manifest.host_root)


@contextlib.contextmanager
def _logged_as_on_the_node(translate: _Translator) -> Iterator[None]:
    """Log records made meanwhile (a source's warning about a malformed file) name the node's paths, not the
    extraction directory: records are rewritten as they are made, whatever logger or handler they go to."""
    make = logging.getLogRecordFactory()

    def translated(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: logging reports it where it formats the record, as it would anyway
            return record
        if translate.extracted in message:
            record.msg, record.args = translate.text(message), None
        return record

    logging.setLogRecordFactory(translated)
    try:
        yield
    finally:
        logging.setLogRecordFactory(make)


class Interrupted(KeyboardInterrupt):
    """SIGTERM, SIGINT, SIGHUP (a closed ssh session) or SIGQUIT arrived while a bundle was being read: raised in the
    main thread so that the temporary directory is removed on the way out. The CLI exits 128 + ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _scratch_directory() -> Iterator[str]:
    """A temporary directory removed on every way out: return, error, or a signal of ``_STOP_SIGNALS`` (which raise
    ``Interrupted`` meanwhile, where their handlers are still the default ones and this is the main thread)."""
    scratch = tempfile.mkdtemp(prefix="numawatch-bundle-")
    installed: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in _STOP_SIGNALS:
            current = signal.getsignal(signum)
            if current in (signal.SIG_DFL, signal.default_int_handler):
                installed[signum] = current
                signal.signal(signum, _raise_interrupted)
    try:
        yield scratch
    finally:
        # A second signal during the clean-up waits until it is done, then has its usual effect.
        if installed:
            signal.pthread_sigmask(signal.SIG_BLOCK, installed)
        try:
            treewalk.remove_tree(scratch)
        finally:
            for stopping, handler in installed.items():
                signal.signal(stopping, handler)
            if installed:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, installed)


def _bundled_intent(bundle: str, manifest: Manifest) -> Intent:
    if manifest.intent_file is None:
        return REFERENCE
    path = manifest.directory / manifest.intent_file
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise BundleError(f"bundle {bundle}: cannot read {manifest.intent_file}: {error.strerror or error}") from None
    try:
        return parse_intent(text, manifest.intent_source)
    except IntentError as error:
        raise BundleError(f"bundle {bundle}: {manifest.intent_file}: {_one_line(error)}") from None


def _as_on_the_node(evaluation: Evaluation, extracted_root: str, host_root: str) -> Evaluation:
    """Reasons, messages, remediations and labels that name a path under the extraction directory name it as the
    node did (a label must never carry the analyst's temporary directory)."""
    node_root = host_root.rstrip("/")

    def fix(text: str) -> str:
        return text.replace(extracted_root, node_root) if extracted_root in text else text

    host = evaluation.host
    statuses = {name: dataclasses.replace(status, reason=fix(status.reason)) for name, status in host.statuses.items()}
    fixed_host: Host = dataclasses.replace(host, statuses=statuses)
    findings = tuple(
        dataclasses.replace(
            finding,
            message=fix(finding.message),
            remediation=fix(finding.remediation),
            labels=frozen_map({key: fix(value) for key, value in finding.labels.items()}),
        )
        for finding in evaluation.findings
    )
    not_evaluated = tuple(NotEvaluatedCheck(item.check, fix(item.reason)) for item in evaluation.not_evaluated)
    return dataclasses.replace(evaluation, host=fixed_host, findings=findings, not_evaluated=not_evaluated)


__all__ = [
    "MAX_MEMBERS",
    "MAX_MEMBER_BYTES",
    "MAX_TOTAL_BYTES",
    "BundleError",
    "CaptureError",
    "CaptureResult",
    "Manifest",
    "Recorded",
    "capture",
    "evaluate_bundle",
    "extract_bundle",
    "record_evaluation",
    "redact_cmdline",
    "redact_environ",
    "redact_oci_config",
    "redact_secret_keys",
]
