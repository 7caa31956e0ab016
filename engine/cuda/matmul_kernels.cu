// matmul_kernels.cu — the GEMM epilogue cuBLAS cannot do for matmul (see matmul_kernels.hpp):
// elementwise, grid-stride, f32 math in the host body's order (engine/tensor/matmul.cpp), one rounding at the
// store.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/gelu_tanh.cuh"
#include "engine/cuda/matmul_kernels.hpp"

namespace fsdplab::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 8192;

template <class Out>
__global__ void epilogue_kernel(Out* out, const float* __restrict__ acc, float beta, std::int64_t rows,
                                std::int64_t cols, const Out* bias, const Out* residual, Out* gelu_pre) {
  const std::int64_t n = rows * cols;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float old = beta != 0.f ? beta * to_f32(out[i]) : 0.f;
    float v = acc != nullptr ? acc[i] + old : old;
    if (bias != nullptr) v += to_f32(bias[i % cols]);
    if (gelu_pre != nullptr) {
      gelu_pre[i] = from_f32<Out>(v);
      v = gelu_tanh_f32(v);
    } else if (residual != nullptr) {
      v = to_f32(residual[i]) + v;
    }
    out[i] = from_f32<Out>(v);
  }
}

template <class Out>
void launch_epilogue(CUstream_st* stream, void* out, const float* acc, float beta, std::int64_t m, std::int64_t n,
                     const GemmEpilogue& e) {
  const int blocks = static_cast<int>(std::min((m * n + kThreads - 1) / kThreads, kMaxBlocks));
  epilogue_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<Out*>(out), acc, beta, m, n,
                                                   static_cast<const Out*>(e.bias), static_cast<const Out*>(e.residual),
                                                   static_cast<Out*>(e.gelu_pre));
}

}  // namespace

void gemm_epilogue(CUstream_st* stream, DType out_dtype, void* out, const float* acc, float beta, std::int64_t m,
                   std::int64_t n, const GemmEpilogue& epilogue) {
  if (m == 0 || n == 0) return;
  if (out_dtype == DType::bf16) {
    launch_epilogue<bf16>(stream, out, acc, beta, m, n, epilogue);
  } else {
    launch_epilogue<float>(stream, out, acc, beta, m, n, epilogue);
  }
  check_launch("gemm_epilogue");
}

}  // namespace fsdplab::cuda
