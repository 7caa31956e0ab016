// cuda_bf16.h for kernels run on the CPU (tests/kernel_emulation): bf16 as its bits, converted as CUDA
// converts (round to nearest even; NaN stays NaN).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  std::uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 b) {
  const std::uint32_t u = std::uint32_t{b.bits} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  if (std::isnan(f)) return {0x7fc0};
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<std::uint16_t>(u >> 16)};
}
