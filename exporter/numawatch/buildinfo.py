"""What ``numawatch_build_info`` says about this installation: the version, the git revision it was built from and
the Python it runs on (node_exporter's ``version``/``revision``/``goversion``).

The revision is found, in this order:

1. ``numawatch/_revision``, written into the package when a wheel is built (setup.py's ``build_py``: from
   ``NUMAWATCH_REVISION`` in the environment, else ``git rev-parse HEAD`` of the source tree). This is what an
   image or a ``pip install .`` carries, where no git repository is left to ask.
2. PEP 610's ``direct_url.json`` of the installed distribution, when pip installed it from a VCS URL
   (``pip install git+https://...@<commit>``): its ``vcs_info.commit_id``.
3. For an editable install (a source checkout), ``git rev-parse HEAD`` of that checkout, asked once, with a time
   limit: the checkout moves, so nothing written at install time would stay true.
4. ``unknown``.

Whatever is found must look like a commit id (hexadecimal, 7 to 64 digits), or it is not used.
"""

from __future__ import annotations

import functools
import json
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

from numawatch import __version__

REVISION_FILE = "_revision"
UNKNOWN = "unknown"
_COMMIT = re.compile(r"[0-9a-f]{7,64}")
GIT_TIMEOUT_SECONDS = 2.0
PACKAGE_DIR = Path(__file__).resolve().parent


def _commit(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip().lower()
    return text if _COMMIT.fullmatch(text) else None


def _from_file(package_dir: Path) -> str | None:
    try:
        return _commit((package_dir / REVISION_FILE).read_text(encoding="ascii", errors="replace")[:128])
    except OSError:
        return None


def _direct_url(distribution: str) -> dict[str, object] | None:
    try:
        text = metadata.distribution(distribution).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _from_vcs_url(direct_url: dict[str, object] | None) -> str | None:
    vcs = direct_url.get("vcs_info") if direct_url is not None else None
    return _commit(str(vcs.get("commit_id"))) if isinstance(vcs, dict) else None


def _editable(direct_url: dict[str, object] | None) -> bool:
    info = direct_url.get("dir_info") if direct_url is not None else None
    return isinstance(info, dict) and info.get("editable") is True


def _from_git(package_dir: Path) -> str | None:
    """HEAD of the checkout the package sits in (exporter/numawatch -> the repository two levels up)."""
    checkout = package_dir.parent.parent
    if not (checkout / ".git").exists():
        return None
    try:
        result = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=GIT_TIMEOUT_SECONDS, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return _commit(result.stdout) if result.returncode == 0 else None


def find_revision(package_dir: Path = PACKAGE_DIR, distribution: str = "numawatch") -> str:
    """The git revision this installation was built from, or ``unknown`` (see the module docstring)."""
    found = _from_file(package_dir)
    if found is not None:
        return found
    direct_url = _direct_url(distribution)
    found = _from_vcs_url(direct_url)
    if found is not None:
        return found
    if _editable(direct_url) or direct_url is None:
        # Not installed at all (run from a source tree on PYTHONPATH) counts as a checkout too.
        found = _from_git(package_dir)
    return found if found is not None else UNKNOWN


@functools.cache
def revision() -> str:
    return find_revision()


def labels() -> tuple[str, str, str]:
    """(version, revision, python_version) for numawatch_build_info."""
    return __version__, revision(), platform.python_version()
