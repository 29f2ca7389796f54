"""The platform README names: Debian 12's own Python 3.11.2 is the floor, CI tests with it, and the docs say so."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = (ROOT / "tests/install-and-run.sh").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_floor_is_debian_12s_python():
    assert PROJECT["project"]["requires-python"] == ">=3.11.2"
    assert sys.version_info >= (3, 11, 2)


def test_ci_makes_its_environment_with_debians_own_interpreter_by_path():
    assert re.search(r"^python=/usr/bin/python3$", SCRIPT, re.MULTILINE)
    assert '"$python" -m venv .venv' in SCRIPT
    assert not re.search(r"^\s*\[ -x \.venv/bin/python \] \|\| python3 ", SCRIPT, re.MULTILINE)
    assert SCRIPT.rstrip().endswith('exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"')
    assert subprocess.run(["bash", "-n", str(ROOT / "tests/install-and-run.sh")]).returncode == 0


def test_the_fast_tier_is_a_registered_marker_and_both_tiers_are_documented():
    markers = PROJECT["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)
    readme, developers = (ROOT / "README.md").read_text(), (ROOT / "DEVELOPERS.md").read_text()
    for text in (readme, developers):
        assert 'bash tests/install-and-run.sh -m "not slow"' in text
        assert "bash tests/install-and-run.sh" in text


def test_deploy_readme_names_the_kubectl_it_needs_and_how_the_intent_is_reloaded():
    text = " ".join((ROOT / "deploy/README.md").read_text().split())
    assert "Needs kubectl 1.21 or later" in text
    assert "SIGHUP today" not in text and "on its way" not in text
    assert "notices the swap by itself" in text and "--config.auto-reload-interval" in text
    cli = (ROOT / "exporter/numawatch/cli.py").read_text()
    assert "--config.auto-reload-interval" in cli


def test_the_bundle_readme_writes_is_git_ignored():
    readme = (ROOT / "README.md").read_text()
    assert "capture -o node.tar.gz" in readme
    assert "/node.tar.gz" in (ROOT / ".gitignore").read_text().splitlines()
    if shutil.which("git") is not None and (ROOT / ".git").exists():
        ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "node.tar.gz"], capture_output=True)
        assert ignored.returncode == 0
