// optimizer_kernels.cu — fused SGD and AdamW steps over flat f32 tensors, and gradient-norm clipping's scale.
//
// Both are memory bound (AdamW moves 28 bytes an element), so each is one pass: every element's
// param, grad and state are read once and written once, by one thread, in coalesced f32 accesses. No
// vector loads: shards of a FlatParameter start at any element offset.
//
// AdamW updates up to kAdamWTensorsPerLaunch parameters a launch (the single-rank baseline has one per
// module weight and bias: 148 for GPT-2 small). Each parameter is cut into chunks of kChunk elements and
// the launch has one block per chunk of any of them, so a 38M-element embedding and a 768-element bias
// share a launch without idle blocks: block b finds its parameter by the chunks' running sums, which
// travel with the pointers in the launch's arguments.
//
// The arithmetic is the host loop's, operation for operation, with the explicitly rounded
// intrinsics (__fmul_rn, __fadd_rn, ...): nvcc would otherwise contract a*b + c into one FMA, which
// rounds once where the host (x86-64 without FMA) rounds twice, and results would differ in the last
// bit. sqrtf and __fdiv_rn are IEEE correctly rounded, as std::sqrt and / on the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
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

__global__ void clip_kernel(float* __restrict__ grad, std::int64_t n, const float* __restrict__ squared_norm,
                            float max_norm) {
  const float coef = clip_coefficient(*squared_norm, max_norm);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    grad[i] = __fmul_rn(grad[i], coef);
}

// Elements of a parameter one AdamW block updates: 16 per thread.
constexpr std::int64_t kChunk = 16 * kThreads;

// What one AdamW launch is given: the parameters, and where each one's chunks start in the launch's
// blocks (chunk_start[i] = the chunks of parameters 0 .. i-1; chunk_start[count] = the blocks).
struct AdamWLaunch {
  AdamWPointers each[kAdamWTensorsPerLaunch];
  std::int64_t chunk_start[kAdamWTensorsPerLaunch + 1];
  int count;
};
static_assert(sizeof(AdamWLaunch) + sizeof(AdamWStepFactors) <= 4096, "a kernel's arguments hold 4 KB");

__global__ void adamw_kernel(const AdamWLaunch launch, AdamWStepFactors k) {
  const std::int64_t block = blockIdx.x;
  int t = 0;
  while (t + 1 < launch.count && launch.chunk_start[t + 1] <= block) ++t;
  const AdamWPointers a = launch.each[t];
  const std::int64_t begin = (block - launch.chunk_start[t]) * kChunk;
  const std::int64_t end = begin + kChunk < a.n ? begin + kChunk : a.n;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float g = a.grad[i];
    const float p = __fmul_rn(a.param[i], k.decay);  // decoupled weight decay first, as torch.optim.AdamW
    const float mi = __fadd_rn(__fmul_rn(k.beta1, a.m[i]), __fmul_rn(k.one_minus_beta1, g));
    const float vi = __fadd_rn(__fmul_rn(k.beta2, a.v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(sqrtf(vi), k.bias_correction2_sqrt), k.eps);
    a.m[i] = mi;
    a.v[i] = vi;
    a.param[i] = __fsub_rn(p, __fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
  }
}

}  // namespace

void sgd_update(CUstream_st* stream, float* param, float* momentum_buf, const float* grad, std::int64_t n,
                const SgdStepFactors& k) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, momentum_buf, grad, n, k);
  check_launch("sgd_update");
}

void adamw_update(CUstream_st* stream, const AdamWPointers* each, std::int64_t count, const AdamWStepFactors& k) {
  for (std::int64_t first = 0; first < count; first += kAdamWTensorsPerLaunch) {
    AdamWLaunch launch{};
    launch.count = static_cast<int>(std::min<std::int64_t>(kAdamWTensorsPerLaunch, count - first));
    for (int i = 0; i < launch.count; ++i) {
      launch.each[i] = each[first + i];
      launch.chunk_start[i + 1] = launch.chunk_start[i] + (launch.each[i].n + kChunk - 1) / kChunk;
    }
    const std::int64_t blocks = launch.chunk_start[launch.count];
    if (blocks == 0) continue;
    check(blocks <= INT_MAX, "adamw_update: ", blocks, " blocks of ", kChunk, " elements exceed a launch's grid");
    adamw_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(launch, k);
    check_launch("adamw_update");
  }
}

void clip_grad_with_norm(CUstream_st* stream, float* grad, std::int64_t n, const float* squared_norm, float max_norm) {
  if (n == 0) return;
  clip_kernel<<<blocks_for(n), kThreads, 0, stream>>>(grad, n, squared_norm, max_norm);
  check_launch("clip_grad_with_norm");
}

}  // namespace fsdplab::cuda
