"""Render deploy/'s kustomizations with the real ``kubectl kustomize`` (tests/install-and-run.sh installs kubectl).

Components (``kind: Component``) need kustomize >= 3.7, which kubectl embeds since 1.21. Debian 12's own
kubernetes-client is kubectl 1.20 with kustomize 2.0.3, too old; tests/install-and-run.sh then adds a newer kubectl
to the virtual environment, which ``kubectl()`` prefers. Without a usable kubectl the tests that render skip, except
under CI (``CI`` set), where they fail: a missing renderer must not pass as a green run.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
# Every kustomization a user applies, by the name the docs give it.
OVERLAYS = {
    "deploy": DEPLOY,
    "base": DEPLOY / "base",
    "all-nodes": DEPLOY / "overlays/all-nodes",
    "prometheus-operator": DEPLOY / "overlays/prometheus-operator",
    "kube-prometheus-stack": DEPLOY / "overlays/kube-prometheus-stack",
    "node-problem-detector": DEPLOY / "overlays/node-problem-detector",
}
# Combinations no shipped overlay makes, so every component is rendered at least once: (resources, components).
COMBINATIONS = {
    "base+podmonitor": (["base"], ["components/podmonitor", "components/prometheus-rule"]),
    "npd+all-nodes": (["base"], ["npd", "components/all-nodes"]),
    "base+kubernetes-api": (["base"], ["components/kubernetes-api"]),
}


def _candidates() -> list[str]:
    found = [os.environ.get("NUMAWATCH_KUBECTL", "")]
    found.append(str(Path(sys.executable).parent / "kubectl"))  # the virtual environment's, if installed there
    found.append(shutil.which("kubectl") or "")
    return [path for path in found if path and os.access(path, os.X_OK)]


@functools.cache
def kubectl() -> str | None:
    """The first kubectl whose ``kubectl kustomize`` renders components, or None."""
    for path in _candidates():
        try:
            subprocess.run([path, "kustomize", str(OVERLAYS["node-problem-detector"])], check=True,
                           capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            continue
        return path
    return None


def require_kubectl() -> str:
    path = kubectl()
    if path is None:
        message = ("no kubectl whose 'kubectl kustomize' renders components (kustomize >= 3.7); "
                   "run tests/install-and-run.sh")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def kustomize(directory: Path) -> list[dict]:
    """The objects ``kubectl kustomize <directory>`` renders, in order."""
    return [dict(doc) for doc in _render(str(directory)) if doc]


@functools.cache
def _render(directory: str) -> tuple[dict, ...]:
    result = subprocess.run([require_kubectl(), "kustomize", directory], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"kubectl kustomize {directory} failed: {result.stderr.strip()}"
    return tuple(yaml.safe_load_all(result.stdout))


def render(name: str) -> list[dict]:
    """A shipped overlay (``OVERLAYS``) or a combination of base and components (``COMBINATIONS``), rendered."""
    if name in OVERLAYS:
        return kustomize(OVERLAYS[name])
    resources, components = COMBINATIONS[name]
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            # kustomize takes relative paths only
            "resources": [os.path.relpath(DEPLOY / path, scratch) for path in resources],
            "components": [os.path.relpath(DEPLOY / path, scratch) for path in components],
        }))
        return [dict(doc) for doc in yaml.safe_load_all(_render_uncached(scratch)) if doc]


def _render_uncached(directory: str) -> str:
    result = subprocess.run([require_kubectl(), "kustomize", directory], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"kubectl kustomize {directory} failed: {result.stderr.strip()}"
    return result.stdout


ALL_RENDERINGS = (*OVERLAYS, *COMBINATIONS)


def find(objects: list[dict], kind: str, name: str | None = None) -> dict:
    """The one object of ``kind`` (and ``name``) among ``objects``."""
    (found,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found
