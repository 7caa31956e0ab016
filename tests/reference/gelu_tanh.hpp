// gelu_tanh.hpp — GELU's tanh approximation and its derivative in double, from the formula: the reference that
// the gelu ops' tests (tests/unit/test_ops_elementwise.cpp) and matmul's GELU epilogue test
// (tests/unit/test_ops_linear.cpp) check against.
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) u'
#pragma once
#include <cmath>
#include <numbers>

namespace fsdplab::reference {

inline double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

inline double gelu_tanh_derivative(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

}  // namespace fsdplab::reference
