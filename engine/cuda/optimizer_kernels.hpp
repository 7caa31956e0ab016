// optimizer_kernels.hpp — the optimizer steps on the GPU: fused kernels, each element read once and written
// once; AdamW updates many parameters in one launch. Plain C++17: optimizer_ops.cpp includes it on every build (the
// step factors below are also what its host loops read); the launchers exist only where the CUDA backend is built.
#pragma once
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

}  // namespace cuda
}  // namespace fsdplab
