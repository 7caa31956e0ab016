// bf16.hpp — bfloat16 <-> float, bit-exact with PyTorch and CUDA's __float2bfloat16_rn.
//
// bf16 is the top 16 bits of an IEEE f32 (1 sign, 8 exponent, 7 mantissa bits). Rounding to
// nearest, ties to even: add 0x7FFF plus the lowest kept bit, then truncate. NaN is kept a (quiet)
// NaN, since the add could otherwise carry a NaN's payload into infinity.
#pragma once
#include <bit>
#include <cstdint>

namespace fsdplab {

inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const std::uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

inline float bf16_to_float(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

// The float nearest to `value` that bf16 can represent.
inline float round_to_bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

}  // namespace fsdplab
