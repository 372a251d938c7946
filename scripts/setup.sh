#!/usr/bin/env bash
# Installs evalpipe and what it needs. `scripts/setup.sh` for running evals,
# `scripts/setup.sh test` for the test suite too (browser and llama.cpp server).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="python3 -m pip --disable-pip-version-check --quiet"

# torch first, pinned to the CPU build that pip finds on this kind of machine: left
# to itself, pip would resolve torch from the package index as a multi-GB CUDA build.
python3 -c "import torch" 2>/dev/null || $PIP install "torch==2.13.0"

if [ "${1:-}" = "test" ]; then
  $PIP install -e ".[test]"
  for extra in .ci/setup-*.sh; do
    [ -f "$extra" ] && bash "$extra"
  done
else
  $PIP install -e .
fi
