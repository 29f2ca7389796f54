"""Running Python as another user (UID 65534, no capabilities) from wherever the clone is.

The clone may sit where only root can enter (``/root`` is 0700), and so may its ``.venv``: UID 65534 can then
neither start the virtual environment's interpreter nor import numawatch from it. ``as_nobody()`` gives a command
that runs the base interpreter (a symlink's target, such as Debian's ``/usr/bin/python3.11``) with a copy of the
numawatch package under test and of its runtime dependencies (``[project].dependencies`` and theirs, as installed) in
a world-readable temporary directory, made once per process and removed at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
DROP = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]


def available() -> str | None:
    """Why commands cannot run as UID 65534 here, or None."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "needs root and util-linux's setpriv to run numawatch as UID 65534"
    if not _reachable(Path(_interpreter())):
        return f"the base interpreter {_interpreter()} is not reachable by other users"
    return None


def _interpreter() -> str:
    return os.path.realpath(sys.executable)


def _reachable(path: Path) -> bool:
    """Whether any user may execute ``path`` (every directory above it searchable by others)."""
    try:
        if not path.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)
    except OSError:
        return False


def _runtime_distributions() -> list[metadata.Distribution]:
    """The installed distributions numawatch needs at run time: pyproject's dependencies and theirs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pending = [Requirement(text) for text in project["dependencies"]]
    found: dict[str, metadata.Distribution] = {}
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in found or (requirement.marker is not None and not requirement.marker.evaluate({"extra": ""})):
            continue
        distribution = metadata.distribution(requirement.name)
        found[name] = distribution
        pending.extend(Requirement(text) for text in distribution.requires or ())
    return list(found.values())


@cache
def _site() -> Path:
    import numawatch

    site = Path(tempfile.mkdtemp(prefix="numawatch-nobody-site-"))
    atexit.register(shutil.rmtree, site, ignore_errors=True)
    shutil.copytree(Path(numawatch.__file__).parent, site / "numawatch",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for distribution in _runtime_distributions():
        for name in distribution.files or ():
            if name.parts[0] == ".." or "__pycache__" in name.parts:
                continue  # scripts in bin/, byte code: not needed to import it
            source = Path(str(distribution.locate_file(name)))
            if source.is_file():
                (site / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, site / name)
    for directory, _, files in os.walk(site):
        os.chmod(directory, 0o755)
        for file in files:
            os.chmod(os.path.join(directory, file), 0o644)
    return site


def as_nobody(*args: str) -> list[str]:
    """``python ARGS`` as UID 65534 with numawatch importable, wherever the clone is (check ``available()`` first).
    The environment is set on the command line (``env``), so callers pass none."""
    return [*DROP, "env", f"PYTHONPATH={_site()}", "PYTHONNOUSERSITE=1", "PYTHONDONTWRITEBYTECODE=1",
            _interpreter(), *args]


__all__ = ["DROP", "as_nobody", "available"]
