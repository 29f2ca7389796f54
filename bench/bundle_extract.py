"""What ``check --from`` pays per bundle member: ``capture.extract_bundle`` against ``tarfile``'s own extraction.

    .venv/bin/python bench/bundle_extract.py                       # 100,000 two-byte files, into $TMPDIR
    .venv/bin/python bench/bundle_extract.py --members 20000 --dir /dev/shm

Writes one bundle of ``--members`` tiny regular files (plus a manifest) spread over 1,000 directories, like a big
node's ``/proc/irq`` and cgroup files, then extracts it into a fresh directory under ``--dir`` twice: with
``capture.extract_bundle`` (numawatch's tar reader and checks) and with ``tarfile`` member by member through its
``data`` filter, as a plain ``tarfile`` reader would. Prints seconds and microseconds per member for each. On a
slow disk the file system's own cost of creating a file dominates both; tmpfs shows what the code costs. The
comparison needs ``tarfile``'s filters (Python 3.11.4 or later); on an older Python only numawatch's reader is timed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tarfile
import tempfile
import time

from numawatch import capture

MANIFEST = json.dumps({
    "format": capture.FORMAT, "format_version": capture.FORMAT_VERSION,
    "paths": {"root": "host", "procfs": "host/proc", "sysfs": "host/sys", "kubelet": "host/var/lib/kubelet",
              "rke2": "host/etc/rancher/rke2"},
    "intent": {"source": "reference profile", "file": None},
}).encode()


def write_bundle(path: str, members: int) -> None:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(capture.MANIFEST)
        info.size = len(MANIFEST)
        tar.addfile(info, io.BytesIO(MANIFEST))
        for number in range(members):
            info = tarfile.TarInfo(f"host/proc/irq/{number % 1000}/file{number}")
            info.size = 2
            tar.addfile(info, io.BytesIO(b"0\n"))


def with_tarfile(bundle: str, destination: str) -> None:
    with tarfile.open(bundle, "r|gz") as tar:
        for member in tar:
            tar.extract(member, destination, set_attrs=True, filter="data")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to extract (default: $TMPDIR)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="numawatch-bench-", dir=args.dir)
    try:
        bundle = os.path.join(scratch, "many.tar.gz")
        write_bundle(bundle, args.members)
        contenders = [("capture.extract_bundle", capture.extract_bundle)]
        if hasattr(tarfile, "data_filter"):
            contenders.append(("tarfile + data filter", with_tarfile))
        else:
            print("tarfile has no extraction filters in this Python: timing numawatch's reader alone")
        for label, extract in contenders:
            destination = tempfile.mkdtemp(dir=scratch)
            started = time.perf_counter()
            extract(bundle, destination)
            seconds = time.perf_counter() - started
            print(f"{label}: {args.members} members in {seconds:.2f} s, "
                  f"{seconds / args.members * 1e6:.0f} us a member (into {args.dir})")
            shutil.rmtree(destination)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
