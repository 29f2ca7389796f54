"""Build hook: writes the git revision into the built package (``numawatch/_revision``) for numawatch_build_info.

Everything else about the package is in pyproject.toml. The revision comes from ``NUMAWATCH_REVISION`` in the
environment (a container build has no .git: ``podman build --build-arg NUMAWATCH_REVISION=$(git rev-parse HEAD)``),
else from ``git rev-parse HEAD`` of this tree; with neither, nothing is written and numawatch reports ``unknown``
(see exporter/numawatch/buildinfo.py for how an installed numawatch finds it). Editable installs write nothing:
numawatch asks git at run time there, because the checkout moves.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REVISION_FILE = "_revision"
_COMMIT = re.compile(r"[0-9a-f]{7,64}")


def revision_for_build(source: Path = HERE, environ: dict[str, str] | None = None) -> str | None:
    """The commit id to record, or None: NUMAWATCH_REVISION, else HEAD of ``source`` when it is a git checkout."""
    environ = dict(os.environ) if environ is None else environ
    given = environ.get("NUMAWATCH_REVISION", "").strip().lower()
    if given:
        return given if _COMMIT.fullmatch(given) else None
    if not (source / ".git").exists():
        return None
    try:
        result = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    head = result.stdout.strip().lower()
    return head if result.returncode == 0 and _COMMIT.fullmatch(head) else None


def write_revision(build_lib: Path, revision: str | None) -> Path | None:
    if revision is None:
        return None
    target = build_lib / "numawatch" / REVISION_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(revision + "\n", encoding="ascii")
    return target


class BuildPyWithRevision(build_py):
    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            write_revision(Path(self.build_lib), revision_for_build())


if __name__ == "__main__":
    setup(cmdclass={"build_py": BuildPyWithRevision})
