// attention_kernels.hpp — the CUDA kernels of causal multi-head self-attention (engine/tensor/attention.hpp):
// qkv [B, T, 3C] (q, k, v side by side, head h in columns h*hd .. (h+1)*hd of each), out [B, T, C], att
// [B, NH, T, T] f32. Plain C++: the op front-end includes it; it is defined in attention_kernels.cu where
// the CUDA backend is built.
//
// qkv, out, dout and dqkv are device pointers of `dtype` (f32 or bf16), computed in f32 and rounded once at
// the store. The forward writes every element of att (zeros above the diagonal); the backward writes every
// element of dqkv (its earlier contents are never read), as the host does. Each launcher enqueues on `stream`
// and returns at once; results repeat bit for bit run after run.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

void attention_forward(CUstream_st* stream, DType dtype, void* out, float* att, const void* qkv, std::int64_t B,
                       std::int64_t T, std::int64_t C, std::int64_t n_head);
void attention_backward(CUstream_st* stream, DType dtype, void* dqkv, const void* dout, const void* qkv,
                        const float* att, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t n_head);

}  // namespace fsdplab::cuda
