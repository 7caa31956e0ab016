// nn_ops_testing.hpp — what the NnOps* tests share beyond test_support.hpp: leftover-filled
// outputs, bf16 and finite-difference tolerances, and checking error messages.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/tensor/bf16.hpp"
#include "test_support.hpp"

namespace fsdplab::testing {

// An output buffer holding leftovers, as a reused allocation does: a forward must overwrite all of it.
inline Tensor leftovers(Device& device, const Shape& shape, DType dtype = DType::f32) {
  return tensor_from(device, shape, random_values(static_cast<std::size_t>(shape_numel(shape)), 99, 5.f, 9.f),
                     dtype);
}

// Rounding to bf16 (8 significant bits) to nearest moves a value by at most half an ulp, which is
// 2^-8 of it at most; 1e-5 on top covers the f32 arithmetic before the rounding, which can push a
// value across a rounding boundary.
constexpr double kBf16Rtol = 1.0 / 256 + 1e-5;

// Central differences of a double-precision reference, so no f32 noise is divided by the step: with
// step 1e-3 the truncation error is about step^2 * f'''/6 (1e-6 for f''' ~ 6), and rounding x +- step
// to float changes the step by at most 6e-5 of itself for |x| <= 1 (more for larger x). Tests
// compare against these with atol 2e-4 and rtol 1e-3, far below what a wrong formula gives.
constexpr double kGradAtol = 2e-4;
constexpr double kGradRtol = 1e-3;

inline std::vector<double> numeric_grad(const std::function<double(std::span<const float>)>& f,
                                        const std::vector<float>& x) {
  return finite_difference(f, x, 1e-3);
}

inline std::vector<double> plus(const std::vector<float>& a, const std::vector<double>& b) {
  std::vector<double> out(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

// f throws fsdplab::Error and its message contains every one of `parts`.
inline ::testing::AssertionResult throws_error(const std::function<void()>& f,
                                               std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      if (message.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << part << "\": " << message;
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no fsdplab::Error thrown";
}

}  // namespace fsdplab::testing
