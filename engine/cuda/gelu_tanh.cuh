// gelu_tanh.cuh — GELU's tanh approximation and its derivative on one f32 value, in device code: the formulas
// of engine/tensor/gelu_tanh.hpp line for line (tanhf for std::tanh), for the gelu kernels
// (pointwise_kernels.cu) and the fallback of matmul's GELU epilogue (matmul_kernels.cu).
#pragma once

namespace fsdplab::cuda {

constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

__device__ __forceinline__ float gelu_tanh_f32(float v) {
  const float inner = kGeluBeta * (v + kGeluKappa * (v * v * v));
  return 0.5f * v * (1.f + tanhf(inner));
}

__device__ __forceinline__ float gelu_tanh_derivative_f32(float v) {
  const float v_sq = v * v;
  const float tanh_inner = tanhf(kGeluBeta * (v + kGeluKappa * (v_sq * v)));
  const float left_derivative = 0.5f * (1.f + tanh_inner);
  const float tanh_derivative = 1.f - tanh_inner * tanh_inner;
  const float inner_derivative = kGeluBeta * (1.f + 3.f * kGeluKappa * v_sq);
  const float right_derivative = 0.5f * v * tanh_derivative * inner_derivative;
  return left_derivative + right_derivative;
}

}  // namespace fsdplab::cuda
