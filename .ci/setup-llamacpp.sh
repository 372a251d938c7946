#!/usr/bin/env bash
# Install llama-cpp-python with its OpenAI-compatible server, for the llamacpp
# backend and the HTTP backend's real-server tests (tests/test_llamacpp*.py).
# PyPI serves it as source only: the build compiles llama.cpp (about 5-10 min
# on 2 cores), so an installed copy of the pinned version is kept as it is.
set -euo pipefail

VERSION="0.3.16"
PY="${PYTHON:-python}"

have() {
  "$PY" - "$VERSION" <<'PYEOF'
import sys
try:
    import llama_cpp, uvicorn, fastapi, sse_starlette, starlette_context, pydantic_settings  # noqa
except Exception:
    sys.exit(1)
sys.exit(0 if llama_cpp.__version__ == sys.argv[1] else 1)
PYEOF
}

if have; then
  echo "llama-cpp-python $VERSION already installed"
  exit 0
fi

# One build at a time on this machine (another job may be installing it too).
exec 9>/tmp/evalpipe-llamacpp-build.lock
flock 9
if have; then
  echo "llama-cpp-python $VERSION installed by another job"
  exit 0
fi

# LLAVA_BUILD=OFF skips the multimodal helper library, which evalpipe does not use.
CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" \
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$PY" -m pip install --quiet "llama-cpp-python[server]==$VERSION"
have
echo "llama-cpp-python $VERSION installed"
