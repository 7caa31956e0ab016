// gelu_tanh.hpp — GELU's tanh approximation and its derivative on one f32 value, for the host bodies of the
// gelu ops (elementwise.cpp) and of matmul's GELU epilogue (matmul.cpp), so both round alike.
//
// PyTorch's constants and order of operations (aten/src/ATen/native/cpu/Activation.cpp), so the results agree
// with gelu(approximate='tanh') to rounding. The CUDA kernels write the same formulas (engine/cuda/gelu_tanh.cuh).
#pragma once
#include <cmath>

namespace fsdplab {

inline constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi) = M_SQRT2 * M_2_SQRTPI * 0.5
inline constexpr float kGeluKappa = 0.044715f;

// 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
inline float gelu_tanh(float v) {
  const float inner = kGeluBeta * (v + kGeluKappa * (v * v * v));
  return 0.5f * v * (1.f + std::tanh(inner));
}

// d/dv [0.5 v (1 + tanh(u))] = 0.5 (1 + tanh(u)) + 0.5 v (1 - tanh(u)^2) u'
inline float gelu_tanh_derivative(float v) {
  const float v_sq = v * v;
  const float tanh_inner = std::tanh(kGeluBeta * (v + kGeluKappa * (v_sq * v)));
  const float left_derivative = 0.5f * (1.f + tanh_inner);
  const float tanh_derivative = 1.f - tanh_inner * tanh_inner;
  const float inner_derivative = kGeluBeta * (1.f + 3.f * kGeluKappa * v_sq);
  const float right_derivative = 0.5f * v * tanh_derivative * inner_derivative;
  return left_derivative + right_derivative;
}

}  // namespace fsdplab
