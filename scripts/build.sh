#!/usr/bin/env bash
# Configures and builds one CMake preset (default: "default"), finding nvcc where CUDA is installed
# but not on PATH. Idempotent: a second run rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
