// optimizer_kernels.cu — fused SGD and AdamW steps over a flat f32 shard.
//
// Both are memory bound (AdamW moves 28 bytes an element), so each is one pass: every element's
// param, grad and state are read once and written once, by one thread, in a grid-stride loop of
// coalesced f32 accesses. No vector loads: shards of a FlatParameter start at any element offset.
//
// The arithmetic is the host loop's, operation for operation, with the explicitly rounded
// intrinsics (__fmul_rn, __fadd_rn, ...): nvcc would otherwise contract a*b + c into one FMA, which
// rounds once where the host (x86-64 without FMA) rounds twice, and results would differ in the last
// bit. sqrtf and __fdiv_rn are IEEE correctly rounded, as std::sqrt and / on the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/optimizer_kernels.hpp"

namespace fsdplab::cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU many times over; larger shards loop.
constexpr std::int64_t kMaxBlocks = 8192;

int blocks_for(std::int64_t n) { return static_cast<int>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks)); }

__global__ void sgd_kernel(float* __restrict__ param, float* __restrict__ buf, const float* __restrict__ grad,
                           std::int64_t n, SgdStepFactors k) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float p = param[i];
    float g = grad[i];
    if (k.weight_decay != 0.f) g = __fadd_rn(g, __fmul_rn(k.weight_decay, p));
    if (k.use_momentum) {
      const float b =
          k.first_step ? g : __fadd_rn(__fmul_rn(k.momentum, buf[i]), __fmul_rn(k.one_minus_dampening, g));
      buf[i] = b;
      g = k.nesterov ? __fadd_rn(g, __fmul_rn(k.momentum, b)) : b;
    }
    param[i] = __fsub_rn(p, __fmul_rn(k.lr, g));
  }
}

__global__ void adamw_kernel(float* __restrict__ param, float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ grad, std::int64_t n, AdamWStepFactors k) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = grad[i];
    const float p = __fmul_rn(param[i], k.decay);  // decoupled weight decay first, as torch.optim.AdamW
    const float mi = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, g));
    const float vi = __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(sqrtf(vi), k.bias_correction2_sqrt), k.eps);
    m[i] = mi;
    v[i] = vi;
    param[i] = __fsub_rn(p, __fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
  }
}

}  // namespace

void sgd_update(CUstream_st* stream, float* param, float* momentum_buf, const float* grad, std::int64_t n,
                const SgdStepFactors& k) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, momentum_buf, grad, n, k);
  check_launch("sgd_update");
}

void adamw_update(CUstream_st* stream, float* param, float* m, float* v, const float* grad, std::int64_t n,
                  const AdamWStepFactors& k) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, m, v, grad, n, k);
  check_launch("adamw_update");
}

}  // namespace fsdplab::cuda
