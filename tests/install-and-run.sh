#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine (as root) and runs it.
# README.md names this script as the test command and .ci/run runs exactly that command.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v python3 >/dev/null || need_apt+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v amtool >/dev/null || need_apt+=(prometheus-alertmanager)
command -v lstopo-no-graphics >/dev/null || need_apt+=(hwloc)  # the independent oracle of tests/hwloc_oracle.py
if ((${#need_apt[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
.venv/bin/ruff check -q .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
