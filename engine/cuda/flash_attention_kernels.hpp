// flash_attention_kernels.hpp — the CUDA kernels of causal flash attention (engine/tensor/flash_attention.hpp):
// an online softmax over 64-key tiles, f32 accumulation, and no T x T matrix in memory; bf16 operands on tensor
// cores, or f32 operands on plain f32 fused multiply-adds. Plain C++: the op front-end includes it; it is defined
// in flash_attention_kernels.cu where the CUDA backend is built.
//
// qkv [B, T, 3C] (q, k, v side by side, head h in columns h*hd .. (h+1)*hd of each), out [B, T, C] and dout,
// dqkv of the same shapes are device pointers of `dtype` (bf16 or f32); lse [B, NH, T] is f32. hd = C / NH is at
// most 128 in bf16, 64 in f32. The arithmetic is the one flash_attention.hpp writes down, which the host body
// follows tile for tile; only the order of the sums inside a tile differs. The backward writes every element of
// dqkv and takes B * NH * T floats of op scratch (op_scratch.hpp), and in f32 a counter for each query tile of
// each head. No sum is added atomically: each launcher enqueues on `stream`, returns at once, and its results
// repeat bit for bit run after run.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

void flash_attention_forward(CUstream_st* stream, DType dtype, void* out, float* lse, const void* qkv,
                             std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t n_head);
void flash_attention_backward(CUstream_st* stream, DType dtype, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse, std::int64_t B, std::int64_t T, std::int64_t C,
                              std::int64_t n_head);

// How many blocks of each kernel one SM of the current GPU holds at once for heads of head_dim columns, by CUDA's
// occupancy calculator (the kernels' shared memory and registers): what the table at the top of
// flash_attention_kernels.cu promises, for tests/gpu to hold it to. The blocks' time is for a profile to say.
struct FlashAttentionBlocksAnSm {
  int forward = 0, key_pass = 0, query_pass = 0;  // query_pass 0 in f32, which has none
};
FlashAttentionBlocksAnSm flash_attention_blocks_an_sm(DType dtype, std::int64_t head_dim);

}  // namespace fsdplab::cuda
