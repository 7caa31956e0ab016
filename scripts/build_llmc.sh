#!/usr/bin/env bash
# llm.c's GPT-2 trainer (train_gpt2cu, github.com/karpathy/llm.c) for the llm.c row of scripts/bench_gpu.sh: built
# where fsdplab is built, so that a GPU lease spends none of its minutes on it, as the row is defined (bf16,
# cuBLAS(Lt) GEMMs, no cuDNN, one GPU), into .gpu/llmc/train_gpt2cu, which travels with the rest of .gpu/ (so run it
# after ../shared/gpu/pack.sh, which starts .gpu/ afresh).
#   bash scripts/build_llmc.sh LLMC_SRC
#     LLMC_SRC  a checkout of llm.c (measured: commit f1e2ace, 2025-05); it is copied, never changed
#   ARCH=nn     the GPU's compute capability (default 90: H100, H200)
# Two edits to the copy, neither on a timed path, each checked to apply:
#   - CUDA 13 takes a cudaMemLocation where CUDA 12 took a device number in cudaMemAdvise (llm.c calls it only when
#     a buffer falls back to managed memory after cudaMalloc runs out);
#   - NVML off: the toolkit here has no libnvidia-ml to link, and llm.c reads it only for `-lg` (GPU clock logging).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: bash scripts/build_llmc.sh LLMC_SRC (a checkout of github.com/karpathy/llm.c)}
arch=${ARCH:-90}
[[ -f $src/train_gpt2.cu && -f $src/llmc/cuda_utils.cuh && -f $src/llmc/mfu.h ]] ||
  { echo "build_llmc.sh: $src has no train_gpt2.cu, llmc/cuda_utils.cuh and llmc/mfu.h: expected a checkout of llm.c" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "build_llmc.sh: no nvcc on PATH (the CUDA toolkit builds llm.c)" >&2; exit 1; }
[[ -d .gpu ]] || { echo "build_llmc.sh: no .gpu/; run bash ../shared/gpu/pack.sh first" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
# edit FILE FROM TO: replaces FROM, which FILE must hold exactly once, or fails saying which edit no longer applies.
edit() {
  local file=$1 from=$2 to=$3
  [[ $(grep -cF -- "$from" "$work/$file") == 1 ]] ||
    { echo "build_llmc.sh: $file does not hold '$from' once; this llm.c differs from the one measured (f1e2ace)" >&2; exit 1; }
  FROM=$from TO=$to perl -0pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/' "$work/$file"
}
cuda_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
if ((cuda_major >= 13)); then
  edit llmc/cuda_utils.cuh 'cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)' \
    'cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})'
fi
edit llmc/mfu.h '#if __has_include(<nvml.h>)' '#if 0  // NVML off (scripts/build_llmc.sh)'

echo "build_llmc.sh: building train_gpt2cu for sm_$arch with $(nvcc --version | tail -1) (a few minutes)"
make -C "$work" train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 PRECISION=BF16 GPU_COMPUTE_CAPABILITY="$arch" \
  NVCC_LDFLAGS="-lcublas -lcublasLt" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
mkdir -p .gpu/llmc
cp "$work/train_gpt2cu" .gpu/llmc/train_gpt2cu
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
echo "$commit" >.gpu/llmc/commit
echo "build_llmc.sh: .gpu/llmc/train_gpt2cu ($(du -h .gpu/llmc/train_gpt2cu | cut -f1), llm.c $commit);" \
  "bash scripts/bench_gpu.sh runs it on the GPU machine"
