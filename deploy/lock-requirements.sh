#!/usr/bin/env bash
# Refreshes deploy/requirements.lock: numawatch's runtime dependencies (pyproject.toml's [project] dependencies and
# theirs), each pinned to one version with the sha256 of every file the index has for it, for
# `pip install --require-hashes -r deploy/requirements.lock` in deploy/Containerfile. Run it with the Python of the
# image (3.11: environment markers are resolved for the interpreter that runs pip-compile), from any directory:
#   bash deploy/lock-requirements.sh
# then rebuild the image and commit the lock. tests/test_image.py checks the lock still covers pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
    echo "lock-requirements.sh: run it with Python 3.11, the image's (set PYTHON=...)" >&2
    exit 2
}
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
"$python" -m venv "$tools"
"$tools/bin/pip" install -q pip-tools
# The public index only: no pip configuration file, no local wheel directories or extra indexes. A file from
# elsewhere would carry a hash the image build, which downloads from the index, never sees.
env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL PIP_CONFIG_FILE=/dev/null \
    CUSTOM_COMPILE_COMMAND="bash deploy/lock-requirements.sh" \
    "$tools/bin/pip-compile" --quiet --upgrade --generate-hashes --strip-extras --annotation-style=line \
    --output-file deploy/requirements.lock pyproject.toml
