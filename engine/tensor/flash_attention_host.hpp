// flash_attention_host.hpp — flash attention's host body on plain arrays: [Note: the flash attention
// arithmetic] (flash_attention.hpp) computed tile by tile on the CPU. The sim device runs it for the op, and
// the GPU kernels are checked against it (tests/kernel_emulation/). A bf16 run's tensors travel as their bits
// (std::uint16_t), an f32 run's as floats; the layouts are flash_attention.hpp's: qkv [B, T, 3C], out and dout
// [B, T, C], lse [B, NH, T] f32.
#pragma once
#include <cstdint>

namespace fsdplab {

// Query and key rows of a tile (see [Note: the flash attention arithmetic]).
inline constexpr std::int64_t kFlashTile = 64;
// The largest head dimension the GPU kernels hold in shared memory: bf16 tiles, and f32 tiles (twice the bytes
// an element, and four operand tiles and four f32 ones in the backward's key pass).
inline constexpr std::int64_t kFlashMaxHeadDim = 128;
inline constexpr std::int64_t kFlashMaxHeadDimF32 = 64;

void flash_attention_forward_host(std::uint16_t* out, float* lse, const std::uint16_t* qkv, std::int64_t B,
                                  std::int64_t T, std::int64_t C, std::int64_t n_head);
void flash_attention_forward_host(float* out, float* lse, const float* qkv, std::int64_t B, std::int64_t T,
                                  std::int64_t C, std::int64_t n_head);
// Writes the gradient into every element of dqkv, each rounded once.
void flash_attention_backward_host(std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                                   const std::uint16_t* out, const float* lse, std::int64_t B, std::int64_t T,
                                   std::int64_t C, std::int64_t n_head);
void flash_attention_backward_host(float* dqkv, const float* dout, const float* qkv, const float* out,
                                   const float* lse, std::int64_t B, std::int64_t T, std::int64_t C,
                                   std::int64_t n_head);

}  // namespace fsdplab
