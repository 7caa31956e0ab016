#!/usr/bin/env bash
# Configures and builds one CMake preset (default: "default"), finding nvcc where CUDA is installed
# but not on PATH. Idempotent: a second run rebuilds only what changed.
#   scripts/build.sh [PRESET [TARGET...]]   TARGETs: build only those (scripts/run.sh builds `fsdplab` alone)
# FSDPLAB_CUDA=OFF in the environment leaves the CUDA backend out of the build (-DFSDPLAB_CUDA=OFF): a
# build without nvcc's minutes, as the handout's test (tests/smoke/handout.sh) builds.
# The GPUs the kernels are compiled for (CMAKE_CUDA_ARCHITECTURES): FSDPLAB_CUDA_ARCHITECTURES in the environment
# (e.g. "89" for an RTX 4090, "80;90"), else this machine's GPUs as nvidia-smi lists them, else CMakeLists.txt's
# default, sm_90 (H100, H200: a machine without a GPU builds for the GPU machine the build is carried to).
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
architectures="${FSDPLAB_CUDA_ARCHITECTURES:-}"
if [[ -z "$architectures" ]] && command -v nvidia-smi >/dev/null; then
  # "8.9" for each GPU -> "89"; one entry per kind of GPU.
  architectures="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' |
    grep -E '^[0-9]+$' | sort -u | paste -sd ';' || true)"
fi
if [[ -n "$architectures" ]]; then
  echo "build.sh: CUDA kernels for sm_${architectures//;/, sm_}"
  configure+=("-DCMAKE_CUDA_ARCHITECTURES=$architectures")
fi
cmake "${configure[@]}" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" "${targets[@]}"
