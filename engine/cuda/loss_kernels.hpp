// loss_kernels.hpp — the CUDA kernels of the embedding lookup (engine/tensor/embedding.hpp), the losses
// (loss.hpp) and the sums to a scalar (reduce.hpp). Plain C++: op front-ends include it; it is defined in
// loss_kernels.cu where the CUDA backend is built.
//
// Pointers are device pointers to contiguous elements of `dtype` (f32 or bf16); ids and targets are i32.
// Every reduction runs in a fixed order (no float atomics), so a result is the same run after run. Ids
// and targets live in device memory, where the host body's range check cannot see them without a sync:
// the kernels skip an id outside [0, V) and write NaN where its value would go (the gathered row, the
// loss), so a bad input shows instead of reading out of bounds.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

// out[n] = table[ids[n]]: table [V, C], out [N, C].
void embedding(CUstream_st* stream, DType dtype, void* out, const void* table, const std::int32_t* ids, std::int64_t N,
               std::int64_t C, std::int64_t V);
// dtable[ids[n]] += dout[n], the rows of one id summed in f32 in position order and added once.
void embedding_backward(CUstream_st* stream, DType dtype, void* dtable, const void* dout, const std::int32_t* ids,
                        std::int64_t N, std::int64_t C, std::int64_t V);
// The same sums, alpha times each added once into slice [count] f32: elements [first, first + count) of the [V, C]
// table flattened. dout is `dtype`.
void embedding_backward_slice(CUstream_st* stream, DType dtype, float* slice, std::int64_t first, std::int64_t count,
                              float alpha, const void* dout, const std::int32_t* ids, std::int64_t N, std::int64_t C,
                              std::int64_t V);

// lse[n] = logsumexp(logits[n, :V]); loss[0] = mean over rows of lse[n] - logits[n, targets[n]]. logits
// [N, stride], of which the first V columns are the classes and the rest a padded vocabulary's padding.
void cross_entropy(CUstream_st* stream, DType dtype, float* loss, float* lse, const void* logits,
                   const std::int32_t* targets, std::int64_t N, std::int64_t V, std::int64_t stride);
// dlogits[:, :V] = (exp(logits[:, :V] - lse) - onehot(targets)) * dloss / N, dlogits[:, V:] = 0; both [N, stride],
// dlogits may be the logits (in place).
void cross_entropy_backward(CUstream_st* stream, DType dtype, void* dlogits, const void* logits,
                            const std::int32_t* targets, const float* lse, std::int64_t N, std::int64_t V,
                            std::int64_t stride, float dloss);

// loss[0] = mean((pred - target)^2), summed in f32.
void mse_loss(CUstream_st* stream, DType dtype, float* loss, const void* pred, const void* target, std::int64_t n);
// dpred += 2 * dloss / n * (pred - target).
void mse_loss_backward(CUstream_st* stream, DType dtype, void* dpred, const void* pred, const void* target,
                       std::int64_t n, float dloss);

// out[0] = the sum of x's n elements, accumulated in double; out may be one of x's elements.
void sum(CUstream_st* stream, DType dtype, float* out, const void* x, std::int64_t n);
// out[0] = the sum of the squares of x's n elements, accumulated in double; out may be one of x's elements.
void sum_of_squares(CUstream_st* stream, DType dtype, float* out, const void* x, std::int64_t n);

}  // namespace fsdplab::cuda
