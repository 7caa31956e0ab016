// float_tensors_on_cpu.hpp — what the pointwise and row kernel tests share: f32 and bf16 tensors as plain
// vectors (bf16 as cuda/cuda_bf16.h's stand-in), filled with random values, and a bit-for-bit comparison that
// names the first element that differs.
#pragma once
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/runtime/dtype.hpp"

namespace fsdplab::emulated {

inline float value(float v) { return v; }
inline float value(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
T from_value(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __float2bfloat16_rn(v);
  }
}

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::bf16;
}

// n values uniform in [lo, hi), rounded to T.
template <class T>
std::vector<T> random_values(std::size_t n, float lo, float hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<T> v(n);
  for (T& e : v) e = from_value<T>(u(rng));
  return v;
}

template <class T>
std::vector<double> values(const std::vector<T>& v) {
  std::vector<double> d(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) d[i] = value(v[i]);
  return d;
}

// Equal bits in every element (so NaN == NaN, and 0 != -0).
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " elements, expected " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << "element " << i << " is " << value(got[i]) << ", expected "
                                           << value(want[i]) << " bit for bit";
  }
  return ::testing::AssertionSuccess();
}

// TYPED_TEST suites over both float dtypes, named f32 and bf16.
using FloatTypes = ::testing::Types<float, __nv_bfloat16>;
struct FloatTypeNames {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "f32" : "bf16";
  }
};

}  // namespace fsdplab::emulated
