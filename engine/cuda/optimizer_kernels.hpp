// optimizer_kernels.hpp — the optimizer steps on the GPU: fused kernels, each element read once and written
// once; AdamW updates many parameters in one launch. Plain C++17: optimizer_ops.cpp includes it on every build (the
// step factors below are also what its host loops read); the launchers exist only where the CUDA backend is built.
#pragma once
#include <cmath>
#include <cstdint>

struct CUstream_st;

namespace fsdplab {

// One step's per-element factors, computed once in double by the front-end and rounded to f32, as
// PyTorch applies Python-float scalars to f32 tensors. The host loop and the kernel read the same ones.
struct SgdStepFactors {
  float lr, weight_decay, momentum, one_minus_dampening;
  bool use_momentum, nesterov, first_step;
};

struct AdamWStepFactors {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bias_correction2_sqrt, eps;
};

// One parameter's device pointers for an AdamW step: n contiguous f32 elements each.
struct AdamWPointers {
  float* param;
  float* m;
  float* v;
  const float* grad;
  std::int64_t n;
};

// Gradient-norm clipping's scale, min(max_norm / (sqrt(squared_norm) + 1e-6), 1) in f32, each operation rounded
// once (sqrt correctly rounded), as PyTorch's clip_coef; the kernel and the host loop both call it. A NaN norm gives
// NaN (not 1, as fminf would): the comparison is written out.
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline float
    clip_coefficient(float squared_norm, float max_norm) {
#if defined(__CUDA_ARCH__)
  const float coef = __fdiv_rn(max_norm, __fadd_rn(sqrtf(squared_norm), 1e-6f));
#else
  const float coef = max_norm / (std::sqrt(squared_norm) + 1e-6f);
#endif
  return 1.f < coef ? 1.f : coef;
}

namespace cuda {

// Parameters a kernel launch updates: their pointers travel in the launch's arguments, which hold 4 KB.
constexpr int kAdamWTensorsPerLaunch = 64;

// The host loops of optimizer_ops.cpp, element by element, in their order of f32 operations (no FMA
// contraction), so a GPU step equals a host step bit for bit. momentum_buf is untouched (may be null)
// without momentum. Operands are n contiguous f32 elements on the device and do not overlap.
void sgd_update(CUstream_st* stream, float* param, float* momentum_buf, const float* grad, std::int64_t n,
                const SgdStepFactors& k);
// The AdamW step of `count` parameters, a launch per kAdamWTensorsPerLaunch of them.
void adamw_update(CUstream_st* stream, const AdamWPointers* each, std::int64_t count, const AdamWStepFactors& k);
// grad[i] *= clip_coefficient(*squared_norm, max_norm) for n contiguous f32 elements; squared_norm is one f32 on
// the device, read by the kernel (the host never waits for it).
void clip_grad_with_norm(CUstream_st* stream, float* grad, std::int64_t n, const float* squared_norm, float max_norm);

}  // namespace cuda
}  // namespace fsdplab
