// flash_attention_kernels.hpp — the CUDA kernels of causal flash attention (engine/tensor/flash_attention.hpp):
// bf16 operands on tensor cores, f32 accumulation, an online softmax over 64-key tiles, and no T x T matrix in
// memory. Plain C++: the op front-end includes it; it is defined in flash_attention_kernels.cu where the CUDA
// backend is built.
//
// qkv [B, T, 3C] (q, k, v side by side, head h in columns h*hd .. (h+1)*hd of each), out [B, T, C] and dout,
// dqkv of the same shapes are device pointers to bf16; lse [B, NH, T] is f32. hd = C / NH is at most 128.
// The arithmetic is the one flash_attention.hpp writes down, which the host body follows tile for tile; only
// the order of the sums inside a tile differs. The backward writes every element of dqkv and takes B * NH * T
// floats of op scratch (op_scratch.hpp). No atomics: each launcher enqueues on `stream`, returns at once, and its
// results repeat bit for bit run after run.
#pragma once
#include <cstdint>

struct CUstream_st;

namespace fsdplab::cuda {

void flash_attention_forward(CUstream_st* stream, void* out, float* lse, const void* qkv, std::int64_t B,
                             std::int64_t T, std::int64_t C, std::int64_t n_head);
void flash_attention_backward(CUstream_st* stream, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, std::int64_t B, std::int64_t T, std::int64_t C,
                              std::int64_t n_head);

}  // namespace fsdplab::cuda
