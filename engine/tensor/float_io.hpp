// float_io.hpp — how a CPU kernel reads and writes floating tensors of either dtype.
//
// A kernel is a template on its storage type, `float` for f32 or `std::uint16_t` for bf16 bits, and
// always computes in f32: it reads elements through load_f32 and writes them through store_f32,
// which rounds to bf16 to nearest even. The op front-end picks the instantiation from a tensor's
// dtype with dispatch_float. (A CUDA kernel does the same with llm.c's floatX.)
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/bf16.hpp"

namespace fsdplab {

inline float load_f32(float value) { return value; }
inline float load_f32(std::uint16_t bits) { return bf16_to_float(bits); }
inline void store_f32(float& dst, float value) { dst = value; }
inline void store_f32(std::uint16_t& dst, float value) { dst = float_to_bf16(value); }
// `value` as storing it in F and loading it back gives it: a fused kernel rounds an intermediate where the
// separate ops it replaces would have stored it, so that it computes bit for bit what they do.
template <class F>
float round_as(float value) {
  F stored{};
  store_f32(stored, value);
  return load_f32(stored);
}

// Calls f(float{}) for f32 and f(std::uint16_t{}) for bf16; f takes the storage type from its
// argument: [&](auto zero) { using F = decltype(zero); kernel(x.data<F>(), ...); }.
template <class Fn>
void dispatch_float(DType dtype, Fn&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::bf16:
      f(std::uint16_t{});
      return;
    case DType::i32:
      break;
  }
  fail("dispatch_float: ", dtype_name(dtype), " is not a floating dtype");
}

}  // namespace fsdplab
