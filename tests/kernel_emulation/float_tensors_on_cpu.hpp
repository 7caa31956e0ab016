// float_tensors_on_cpu.hpp — what the kernel tests share: f32 and bf16 tensors as plain vectors (bf16 as
// cuda/cuda_bf16.h's stand-in), filled with random values, a bit-for-bit comparison that names the first element
// that differs, and a launcher's refusal as text.
#pragma once
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/runtime/dtype.hpp"
#include "engine/runtime/error.hpp"

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

// The [N, C] rows the bias and row kernels take.
struct Rows {
  std::int64_t N, C;
};

inline std::string describe(Rows r) { return "N " + std::to_string(r.N) + ", C " + std::to_string(r.C); }

// n elements of NaN: what a kernel's output holds before it runs, so that an element it never wrote shows.
template <class T>
std::vector<T> unwritten(std::int64_t n) {
  return std::vector<T>(static_cast<std::size_t>(n), from_value<T>(std::numeric_limits<float>::quiet_NaN()));
}

// What a launcher's refusal says: the message of the Error `launch` throws, or "no error" where it launched.
inline std::string refusal_of(const std::function<void()>& launch) {
  try {
    launch();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
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
