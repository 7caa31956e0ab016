#!/usr/bin/env bash
# Configures and builds one CMake preset (default: "default"), finding nvcc where CUDA is installed
# but not on PATH. Idempotent: a second run rebuilds only what changed.
#   scripts/build.sh [PRESET [TARGET...]]   TARGETs: build only those (scripts/run.sh builds `fsdplab` alone)
# FSDPLAB_CUDA=OFF in the environment leaves the CUDA backend out of the build (-DFSDPLAB_CUDA=OFF): a
# build without nvcc's minutes, as the handout's test (tests/smoke/handout.sh) builds.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
targets=()
if (($# > 1)); then
  targets=(--target "${@:2}")
fi
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
configure=(--preset "$preset")
if [[ -n "${FSDPLAB_CUDA:-}" ]]; then
  configure+=("-DFSDPLAB_CUDA=$FSDPLAB_CUDA")
fi
cmake "${configure[@]}" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" "${targets[@]}"
