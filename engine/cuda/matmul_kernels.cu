// matmul_kernels.cu — the GEMM epilogue cuBLAS cannot do for matmul (see matmul_kernels.hpp):
// elementwise, grid-stride, f32 math, one rounding at the store.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/matmul_kernels.hpp"

namespace fsdplab::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 8192;

template <class Out>
__global__ void epilogue_kernel(Out* out, const float* __restrict__ acc, float beta, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float old = beta != 0.f ? beta * to_f32(out[i]) : 0.f;
    out[i] = from_f32<Out>(acc != nullptr ? acc[i] + old : old);
  }
}

}  // namespace

void gemm_epilogue(CUstream_st* stream, DType out_dtype, void* out, const float* acc, float beta, std::int64_t n) {
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
  if (out_dtype == DType::bf16) {
    epilogue_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<bf16*>(out), acc, beta, n);
  } else {
    epilogue_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(out), acc, beta, n);
  }
  check_launch("gemm_epilogue");
}

}  // namespace fsdplab::cuda
