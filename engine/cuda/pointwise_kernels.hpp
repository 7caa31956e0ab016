// pointwise_kernels.hpp — the CUDA kernels of the memory-bound ops between the GEMMs: bias, activations,
// residual adds, scaling, casts and fills (engine/tensor/elementwise.hpp), SwiGLU's gate (silu_mul.hpp),
// rotary embeddings (rope.hpp) and grouped-query packing (pack_qkv.hpp). Plain C++: op front-ends include
// it; it is defined in pointwise_kernels.cu where the CUDA backend is built.
//
// Pointers are device pointers to contiguous elements of `dtype` (f32 or bf16); every kernel computes in
// f32 with the host body's formulas and rounds to bf16 once, at the store (nearest even). Each launcher
// enqueues on `stream` and returns at once. gelu_backward and relu_backward ADD into dx; the other backward
// kernels write their gradients; each as its host body does.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

// out[N, C] = x + bias[C]; out may be x.
void bias_add(CUstream_st* stream, DType dtype, void* out, const void* x, const void* bias, std::int64_t N,
              std::int64_t C);

void gelu(CUstream_st* stream, DType dtype, void* out, const void* x, std::int64_t n);
void gelu_backward(CUstream_st* stream, DType dtype, void* dx, const void* x, const void* dout, std::int64_t n);
// d = d * gelu'(x): bit for bit gelu_backward into zeros (a zero's sign aside).
void gelu_backward_in_place(CUstream_st* stream, DType dtype, void* d, const void* x, std::int64_t n);
void relu(CUstream_st* stream, DType dtype, void* out, const void* x, std::int64_t n);
void relu_backward(CUstream_st* stream, DType dtype, void* dx, const void* x, const void* dout, std::int64_t n);

void add(CUstream_st* stream, DType dtype, void* out, const void* a, const void* b, std::int64_t n);
void scale(CUstream_st* stream, DType dtype, void* out, const void* x, float alpha, std::int64_t n);
// out += alpha * x: out f32, x `x_dtype` (f32 or bf16).
void add_scaled(CUstream_st* stream, float* out, DType x_dtype, const void* x, float alpha, std::int64_t n);
// out (out_dtype) = in (in_dtype), f32 and bf16 either way.
void cast(CUstream_st* stream, DType out_dtype, void* out, DType in_dtype, const void* in, std::int64_t n);
void fill(CUstream_st* stream, DType dtype, void* t, float value, std::int64_t n);

void silu_mul(CUstream_st* stream, DType dtype, void* out, const void* gate, const void* up, std::int64_t n);
void silu_mul_backward(CUstream_st* stream, DType dtype, void* dgate, void* dup, const void* gate, const void* up,
                       const void* dout, std::int64_t n);

// The most rotated pairs a head may have (head_dim / 2): the inverse frequencies travel in the kernel's
// parameters, computed on the host exactly as the host body computes them.
constexpr int kMaxRopePairs = 256;

// x, out: [B, T, H * hd]; out may be x. Forward: out = R x. Backward: out = R^T x.
void rope(CUstream_st* stream, DType dtype, void* out, const void* x, std::int64_t B, std::int64_t T, std::int64_t H,
          std::int64_t hd, float theta, bool backward);

// q: [N, H * hd]; k, v: [N, KV * hd]; qkv: [N, 3 * H * hd]; query head h reads key/value head h / (H / KV).
void pack_qkv(CUstream_st* stream, DType dtype, void* qkv, const void* q, const void* k, const void* v, std::int64_t N,
              std::int64_t H, std::int64_t KV, std::int64_t hd);
void pack_qkv_backward(CUstream_st* stream, DType dtype, void* dq, void* dk, void* dv, const void* dqkv, std::int64_t N,
                       std::int64_t H, std::int64_t KV, std::int64_t hd);

}  // namespace fsdplab::cuda
