// dtype.hpp — the element types the engine computes in.
//
// f32 and bf16 are the floating types; i32 holds token ids and class targets (indices never travel
// in a float). It lives in runtime/ (not tensor/) because the device's cost model needs it: a device
// preset states its peak FLOP/s per dtype. The bf16 bit conversions are in tensor/bf16.hpp.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace fsdplab {

enum class DType { f32, bf16, i32 };

constexpr std::size_t dtype_size(DType t) { return t == DType::bf16 ? 2 : 4; }
constexpr std::string_view dtype_name(DType t) {
  return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "i32";
}

// Parses "f32", "bf16" or "i32"; anything else is an Error naming what came.
DType parse_dtype(std::string_view name);

}  // namespace fsdplab
