// row_kernels.hpp — the CUDA kernels of the row ops: layernorm, rmsnorm and softmax, forward and backward
// (engine/tensor/layernorm.hpp, rmsnorm.hpp, softmax.hpp), and the bias gradient, whose column sums the norms'
// weight gradients share (elementwise.hpp). Plain C++: op front-ends include it; it is defined in
// row_kernels.cu where the CUDA backend is built.
//
// Pointers are device pointers to contiguous [N, C] rows of `dtype` (f32 or bf16); mean and rstd are f32
// [N]. Every kernel computes in f32 with the host body's formulas and rounds to bf16 once, at the store.
// Each launcher enqueues on `stream` and returns at once; the backwards ADD into dx, dweight and dbias, as
// the host does. Every sum is computed in one fixed order, so results repeat bit for bit run after run.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

// out = (x - mean) * rstd * weight + bias per row; mean and rstd [N] saved for the backward.
void layernorm_forward(CUstream_st* stream, DType dtype, void* out, float* mean, float* rstd, const void* x,
                       const void* weight, const void* bias, std::int64_t N, std::int64_t C, float eps);
// dx += the input gradient rounded to dtype first, so that adding into a gradient that is not zero (the residual
// stream's) is bit for bit a separate add.
void layernorm_backward(CUstream_st* stream, DType dtype, void* dx, void* dweight, void* dbias, const void* dout,
                        const void* x, const void* weight, const float* mean, const float* rstd, std::int64_t N,
                        std::int64_t C);

// out = x * rstd * weight per row; rstd [N] saved for the backward. The backward rounds dx's term as
// layernorm_backward does.
void rmsnorm_forward(CUstream_st* stream, DType dtype, void* out, float* rstd, const void* x, const void* weight,
                     std::int64_t N, std::int64_t C, float eps);
void rmsnorm_backward(CUstream_st* stream, DType dtype, void* dx, void* dweight, const void* dout, const void* x,
                      const void* weight, const float* rstd, std::int64_t N, std::int64_t C);

// dbias[C] += column sums of dout[N, C], deterministic.
void bias_backward(CUstream_st* stream, DType dtype, void* dbias, const void* dout, std::int64_t N, std::int64_t C);

// y = softmax(x) per row (max subtracted); dx += y * (dy - sum(y * dy)) per row.
void softmax_forward(CUstream_st* stream, DType dtype, void* y, const void* x, std::int64_t N, std::int64_t C);
void softmax_backward(CUstream_st* stream, DType dtype, void* dx, const void* y, const void* dy, std::int64_t N,
                      std::int64_t C);

}  // namespace fsdplab::cuda
