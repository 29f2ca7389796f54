"""numawatch_build_info's revision: written into the package at build time (setup.py's build_py), else PEP 610's
direct_url.json of a VCS install, else HEAD of an editable checkout, else "unknown"; never anything that is not a
commit id. Real files, a real git repository and setuptools' real build_py command on a small package."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from numawatch import buildinfo

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def load_setup():
    spec = importlib.util.spec_from_file_location("numawatch_setup_py", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() itself runs only as __main__
    return module


def distribution(tmp_path: Path, monkeypatch, name: str, direct_url: dict | None) -> str:
    """An installed distribution ``name`` (a dist-info directory on sys.path), with this direct_url.json."""
    site = tmp_path / "site"
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    monkeypatch.syspath_prepend(str(site))
    return name


def git_checkout(path: Path) -> str:
    """A git repository with exporter/numawatch in it and one commit; its HEAD."""
    package = path / "exporter" / "numawatch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin", "HOME": str(path)}
    for command in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", "-C", str(path), *command], check=True, env=env, capture_output=True)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


# ------------------------------------------------------------------------------------------------ reading it
def test_the_file_written_at_build_time_wins(tmp_path, monkeypatch):
    (tmp_path / buildinfo.REVISION_FILE).write_text(COMMIT + "\n")
    name = distribution(tmp_path, monkeypatch, "revtest_file", {"url": "https://x", "vcs_info": {
        "vcs": "git", "commit_id": "f" * 40}})

    assert buildinfo.find_revision(tmp_path, name) == COMMIT


@pytest.mark.parametrize("content", ["", "not a commit\n", "12345\n", "<script>\n", "g" * 40])
def test_a_file_that_does_not_hold_a_commit_id_is_not_used(tmp_path, monkeypatch, content):
    (tmp_path / buildinfo.REVISION_FILE).write_text(content)
    name = distribution(tmp_path, monkeypatch, "revtest_bad", {"url": "file:///x", "dir_info": {}})

    assert buildinfo.find_revision(tmp_path, name) == buildinfo.UNKNOWN


def test_a_vcs_install_says_its_commit_in_direct_url_json(tmp_path, monkeypatch):
    name = distribution(tmp_path, monkeypatch, "revtest_vcs", {
        "url": "https://github.com/numawatch/numawatch", "vcs_info": {"vcs": "git", "commit_id": COMMIT.upper()}})

    assert buildinfo.find_revision(tmp_path / "no-package-here", name) == COMMIT


@needs_git
def test_an_editable_install_asks_its_checkout(tmp_path, monkeypatch):
    head = git_checkout(tmp_path / "repo")
    name = distribution(tmp_path, monkeypatch, "revtest_editable", {"url": "file:///repo",
                                                                     "dir_info": {"editable": True}})

    assert buildinfo.find_revision(tmp_path / "repo" / "exporter" / "numawatch", name) == head


@needs_git
def test_a_regular_install_never_asks_a_git_repository_it_happens_to_sit_in(tmp_path, monkeypatch):
    git_checkout(tmp_path / "repo")
    name = distribution(tmp_path, monkeypatch, "revtest_plain", {"url": "file:///repo", "dir_info": {}})

    assert buildinfo.find_revision(tmp_path / "repo" / "exporter" / "numawatch", name) == buildinfo.UNKNOWN


def test_nothing_to_ask_is_unknown(tmp_path, monkeypatch):
    name = distribution(tmp_path, monkeypatch, "revtest_none", None)

    assert buildinfo.find_revision(tmp_path, name) == buildinfo.UNKNOWN


def test_this_checkout_reports_its_head_or_unknown():
    found = buildinfo.revision()

    if shutil.which("git") and (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0:  # git may refuse a repository owned by someone else ("dubious ownership")
            assert found == head.stdout.strip()
            return
    assert found == buildinfo.UNKNOWN or len(found) >= 7


def test_build_info_labels_are_version_revision_and_python_version():
    version, revision, python_version = buildinfo.labels()

    assert version == __import__("numawatch").__version__
    assert revision == buildinfo.revision()
    assert python_version == sys.version.split()[0]


# ------------------------------------------------------------------------------------------------ writing it
def test_the_build_takes_the_revision_from_the_environment_first(tmp_path):
    setup = load_setup()

    assert setup.revision_for_build(tmp_path, {"NUMAWATCH_REVISION": COMMIT}) == COMMIT
    assert setup.revision_for_build(tmp_path, {"NUMAWATCH_REVISION": "  " + COMMIT.upper() + "\n"}) == COMMIT
    assert setup.revision_for_build(tmp_path, {"NUMAWATCH_REVISION": "v1.2; rm -rf /"}) is None
    assert setup.revision_for_build(tmp_path, {}) is None  # no .git here either


@needs_git
def test_the_build_asks_git_without_the_environment(tmp_path):
    head = git_checkout(tmp_path / "repo")

    assert load_setup().revision_for_build(tmp_path / "repo", {}) == head


def test_build_py_writes_the_revision_into_the_built_package(tmp_path, monkeypatch):
    """setuptools' own build_py, subclassed by setup.py, on a one-module package."""
    from setuptools.dist import Distribution

    setup = load_setup()
    source = tmp_path / "src" / "numawatch"
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path / "src")
    monkeypatch.setenv("NUMAWATCH_REVISION", COMMIT)
    command = setup.BuildPyWithRevision(Distribution({"packages": ["numawatch"], "script_name": "setup.py"}))
    command.build_lib = str(tmp_path / "build")
    command.ensure_finalized()

    command.run()

    built = tmp_path / "build" / "numawatch"
    assert (built / "__init__.py").exists()
    assert (built / buildinfo.REVISION_FILE).read_text() == COMMIT + "\n"
    assert buildinfo.find_revision(built, "revtest-not-installed") == COMMIT
    assert not (source / buildinfo.REVISION_FILE).exists()  # the source tree is left alone


def test_an_editable_build_writes_nothing(tmp_path, monkeypatch):
    from setuptools.dist import Distribution

    setup = load_setup()
    (tmp_path / "src" / "numawatch").mkdir(parents=True)
    (tmp_path / "src" / "numawatch" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path / "src")
    monkeypatch.setenv("NUMAWATCH_REVISION", COMMIT)
    command = setup.BuildPyWithRevision(Distribution({"packages": ["numawatch"], "script_name": "setup.py"}))
    command.build_lib = str(tmp_path / "build")
    command.editable_mode = True
    command.ensure_finalized()

    command.run()

    assert not (tmp_path / "build" / "numawatch" / buildinfo.REVISION_FILE).exists()
