// loss_kernels.cu — the kernels of loss_kernels.hpp.
//
// Row reductions (log-sum-exp) give a block a row: each thread folds a strided slice in order, then warp
// shuffles and one warp fold the block's partials in a fixed tree. Reductions to a scalar use a block count
// that depends on n alone, and a second one-block pass over the partials, so a result never depends on the
// GPU or on scheduling. The embedding's backward never lets two blocks write one element: the block of an
// id's first position sums all of that id's rows, in position order, and adds them to the table once.

#include <cmath>
#include <cstdint>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/loss_kernels.hpp"
#include "engine/cuda/op_scratch.hpp"

namespace fsdplab::cuda {
namespace {


constexpr int kThreads = 256;
constexpr int kRowThreads = 512;  // a log-sum-exp row: GPT-2's 50257 logits are ~100 a thread



__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }


// Blocks for a kernel that strides a block per row.
int row_grid(std::int64_t rows) { return static_cast<int>(rows < 65535 ? rows : 65535); }

int threads_for(std::int64_t columns) {
  const std::int64_t t = (columns + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : t > kThreads ? kThreads : t);
}

struct SumOp {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};
struct MaxOp {
  // fmaxf ignores a NaN operand, as the host's std::max(max, v) does when v is NaN.
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The whole block's fold of every thread's `v`, returned to every thread. A fixed tree: lanes by shuffles,
// then warp 0 over the warps' results. blockDim.x is a multiple of 32. The block may call it again at once.
template <class A, class Op>
__device__ A block_reduce(A v, Op op) {
  __shared__ A warp_results[32];
  __shared__ A result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_results[lane < warps ? lane : 0];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const A other = __shfl_down_sync(0xffffffffu, v, offset);
      if (lane + offset < warps) v = op(v, other);
    }
    if (lane == 0) result = v;
  }
  __syncthreads();
  v = result;
  __syncthreads();  // every thread has read `result` before a next call writes it
  return v;
}

// ---- reductions to a scalar (mse_loss, sum, sum_of_squares) -------------------------------------------------------

constexpr int kReduceThreads = 512;
// Up to this many elements one block does it all (one launch, no partials); above, up to kMaxPartials
// blocks of kReduceThreads, each thread folding at least 16 elements.
constexpr std::int64_t kOneBlockMax = 1 << 18;
constexpr std::int64_t kMaxPartials = 1024;

int reduce_blocks(std::int64_t n) {
  if (n <= kOneBlockMax) return 1;
  const std::int64_t blocks = (n + kReduceThreads * 16 - 1) / (kReduceThreads * 16);
  return static_cast<int>(blocks < kMaxPartials ? blocks : kMaxPartials);
}

// Folds term(i) for i < n. One block writes out[0] = total / divisor; several write their partials.
template <class A, class Term>
__global__ void reduce_kernel(float* out, A* partials, std::int64_t n, Term term, float divisor) {
  A acc = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    acc += term(i);
  acc = block_reduce(acc, SumOp{});
  if (threadIdx.x != 0) return;
  if (gridDim.x == 1) {
    *out = static_cast<float>(acc) / divisor;
  } else {
    partials[blockIdx.x] = acc;
  }
}

template <class A>
__global__ void finish_kernel(float* out, const A* partials, int count, float divisor) {
  A acc = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_reduce(acc, SumOp{});
  if (threadIdx.x == 0) *out = static_cast<float>(acc) / divisor;
}

// out[0] = (sum of term(i), i < n, accumulated in A) / divisor. Every element is read before out is
// written, so out may be one of them.
template <class A, class Term>
void reduce_to_scalar(CUstream_st* stream, const char* name, float* out, std::int64_t n, Term term, float divisor) {
  const int blocks = reduce_blocks(n);
  if (blocks == 1) {
    reduce_kernel<A><<<1, kReduceThreads, 0, stream>>>(out, static_cast<A*>(nullptr), n, term, divisor);
    check_launch(name);
    return;
  }
  // The partials live only between the two kernels: the op's scratch, freed behind it on its stream.
  void* partials = op_scratch(static_cast<std::int64_t>(sizeof(A)) * blocks, "the partial sums");
  reduce_kernel<A><<<blocks, kReduceThreads, 0, stream>>>(out, static_cast<A*>(partials), n, term, divisor);
  check_launch(name);
  finish_kernel<A><<<1, kReduceThreads, 0, stream>>>(out, static_cast<const A*>(partials), blocks, divisor);
  check_launch(name, " (the partial sums)");
}

template <class T>
struct ValueTerm {
  const T* x;
  __device__ double operator()(std::int64_t i) const { return to_f32(x[i]); }
};

template <class T>
struct SquareTerm {
  const T* x;
  __device__ double operator()(std::int64_t i) const {
    const double v = to_f32(x[i]);
    return v * v;
  }
};

template <class T>
struct SquaredErrorTerm {
  const T* pred;
  const T* target;
  __device__ float operator()(std::int64_t i) const {
    const float d = to_f32(pred[i]) - to_f32(target[i]);
    return d * d;
  }
};

template <class T>
__global__ void mse_backward_kernel(T* dpred, const T* pred, const T* target, std::int64_t n, float scale) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dpred[i] = from_f32<T>(to_f32(dpred[i]) + scale * (to_f32(pred[i]) - to_f32(target[i])));
}

// ---- cross-entropy ---------------------------------------------------------------------------------

// A block per row: the max, then the sum of exp(logit - max) (expf and logf, as the host's std::exp and
// std::log), then lse = max + log(sum). Rows are `stride` apart; columns from V on are padding, unread.
template <class T>
__global__ void logsumexp_kernel(float* lse, const T* logits, std::int64_t N, std::int64_t V, std::int64_t stride) {
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* row = logits + n * stride;
    float max = -INFINITY;
    for (std::int64_t v = threadIdx.x; v < V; v += blockDim.x) max = fmaxf(max, to_f32(row[v]));
    max = block_reduce(max, MaxOp{});
    float sum = 0.f;
    for (std::int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(to_f32(row[v]) - max);
    sum = block_reduce(sum, SumOp{});
    if (threadIdx.x == 0) lse[n] = max + logf(sum);
  }
}

// One block: loss = mean over rows of lse[n] - logits[n, targets[n]]. A target outside [0, V) makes it NaN.
template <class T>
__global__ void cross_entropy_mean_kernel(float* loss, const float* lse, const T* logits, const std::int32_t* targets,
                                          std::int64_t N, std::int64_t V, std::int64_t stride) {
  float total = 0.f;
  for (std::int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    const std::int32_t target = targets[n];
    const float logit = target >= 0 && target < V ? to_f32(logits[n * stride + target]) : quiet_nan();
    total += lse[n] - logit;
  }
  total = block_reduce(total, SumOp{});
  if (threadIdx.x == 0) *loss = total / static_cast<float>(N);
}

// dlogits may be the logits (in place): each element is read and then written by the same thread. The padding
// columns, from V to the stride, are written 0 and never read.
template <class T>
__global__ void cross_entropy_backward_kernel(T* dlogits, const T* logits, const std::int32_t* targets,
                                              const float* lse, std::int64_t N, std::int64_t V, std::int64_t stride,
                                              float scale) {
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* row = logits + n * stride;
    T* drow = dlogits + n * stride;
    const float row_lse = lse[n];
    const std::int64_t target = targets[n];
    for (std::int64_t v = threadIdx.x; v < stride; v += blockDim.x) {
      float d = 0.f;
      if (v < V) {
        const float p = expf(to_f32(row[v]) - row_lse);
        const float onehot = v == target ? 1.f : 0.f;
        d = (p - onehot) * scale;
      }
      drow[v] = from_f32<T>(d);
    }
  }
}

// ---- embedding ---------------------------------------------------------------------------------------

template <class T>
__global__ void embedding_kernel(T* out, const T* table, const std::int32_t* ids, std::int64_t N, std::int64_t C,
                                 std::int64_t V) {
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const std::int32_t id = ids[n];
    const bool valid = id >= 0 && id < V;
    const T* src = table + static_cast<std::int64_t>(valid ? id : 0) * C;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x)
      out[n * C + c] = valid ? src[c] : from_f32<T>(quiet_nan());
  }
}

constexpr int kEmbedColumns = 4;  // columns of dtable a thread of the backward accumulates

// Where the backward's sums go: elements [first, first + count) of the [V, C] table flattened, at `data`, each
// element getting alpha times its sum, rounded once to U. The whole table is first 0, count V·C, alpha 1.
template <class U>
struct TableSlice {
  U* data;
  std::int64_t first, count;
  float alpha;
};

// Block (t, chunk): if position t is the first with its id, sums dout's rows of every position with that
// id, in position order, over the chunk's columns, and adds the sums to the id's row of the slice once: the
// host body's order (a stable sort by id), so bit for bit its result. A block finds the later positions
// a tile at a time: each thread tests one id, and a ballot compacts the hits into shared memory in order.
// The scans cost O(N) ids per position, read from L2; the rows are read once, coalesced along columns.
// An id whose row lies outside the slice is skipped whole.
template <class T, class U>
__global__ void embedding_backward_kernel(TableSlice<U> slice, const T* dout, const std::int32_t* ids, std::int64_t N,
                                          std::int64_t C, std::int64_t V) {
  __shared__ std::int64_t members[kThreads];
  __shared__ int warp_hits[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * blockDim.x * kEmbedColumns + threadIdx.x;
  for (std::int64_t t = blockIdx.x; t < N; t += gridDim.x) {
    const std::int32_t id = ids[t];
    if (id < 0 || id >= V) continue;  // the same for the whole block
    const std::int64_t row = static_cast<std::int64_t>(id) * C - slice.first;  // the row's first element in the slice
    if (row + C <= 0 || row >= slice.count) continue;
    // Another block sums this id if it occurs earlier. Nearest first: a repeated id is usually close by.
    bool earlier = false;
    for (std::int64_t end = t; end > 0 && !earlier; end -= blockDim.x) {
      const std::int64_t s = end - 1 - threadIdx.x;
      earlier = __syncthreads_or(s >= 0 && ids[s] == id) != 0;
    }
    if (earlier) continue;
    float acc[kEmbedColumns] = {};
    for (std::int64_t begin = t; begin < N; begin += blockDim.x) {
      const std::int64_t s = begin + threadIdx.x;
      const bool hit = s < N && ids[s] == id;
      const unsigned mask = __ballot_sync(0xffffffffu, hit);
      if (lane == 0) warp_hits[warp] = __popc(mask);
      __syncthreads();
      int slot = __popc(mask & ((1u << lane) - 1u)), hits = 0;
      for (int w = 0; w < warps; ++w) {
        if (w < warp) slot += warp_hits[w];
        hits += warp_hits[w];
      }
      if (hit) members[slot] = s;
      __syncthreads();
      for (int m = 0; m < hits; ++m) {
        const T* src = dout + members[m] * C;
#pragma unroll
        for (int k = 0; k < kEmbedColumns; ++k) {
          const std::int64_t c = c0 + k * blockDim.x;
          if (c < C) acc[k] += to_f32(src[c]);
        }
      }
      __syncthreads();  // members and warp_hits are rewritten by the next tile
    }
#pragma unroll
    for (int k = 0; k < kEmbedColumns; ++k) {
      const std::int64_t e = row + c0 + k * blockDim.x;
      if (c0 + k * blockDim.x < C && e >= 0 && e < slice.count)
        slice.data[e] = from_f32<U>(to_f32(slice.data[e]) + slice.alpha * acc[k]);
    }
  }
}

// The backward's launch: a block per position (strided), a chunk of columns per grid row.
template <class T, class U>
void launch_embedding_backward(CUstream_st* stream, TableSlice<U> slice, const void* dout, const std::int32_t* ids,
                               std::int64_t N, std::int64_t C, std::int64_t V) {
  // GPT-2's C = 768: 192 threads of 4 columns, one chunk.
  const int threads = threads_for((C + kEmbedColumns - 1) / kEmbedColumns);
  const std::int64_t chunks = (C + threads * kEmbedColumns - 1) / (threads * kEmbedColumns);
  const dim3 grid(static_cast<unsigned>(row_grid(N)), static_cast<unsigned>(chunks));
  embedding_backward_kernel<T, U><<<grid, threads, 0, stream>>>(slice, static_cast<const T*>(dout), ids, N, C, V);
}

}  // namespace

void embedding(CUstream_st* stream, DType dtype, void* out, const void* table, const std::int32_t* ids, std::int64_t N,
               std::int64_t C, std::int64_t V) {
  if (N == 0 || C == 0) return;
  dispatch_float(dtype, "embedding", [&](auto zero) {
    using T = decltype(zero);
    embedding_kernel<<<row_grid(N), threads_for(C), 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(table),
                                                                 ids, N, C, V);
  });
  check_launch("embedding");
}

void embedding_backward(CUstream_st* stream, DType dtype, void* dtable, const void* dout, const std::int32_t* ids,
                        std::int64_t N, std::int64_t C, std::int64_t V) {
  if (N == 0 || C == 0) return;
  dispatch_float(dtype, "embedding_backward", [&](auto zero) {
    using T = decltype(zero);
    launch_embedding_backward<T>(stream, TableSlice<T>{static_cast<T*>(dtable), 0, V * C, 1.f}, dout, ids, N, C, V);
  });
  check_launch("embedding_backward");
}

void embedding_backward_slice(CUstream_st* stream, DType dtype, float* slice, std::int64_t first, std::int64_t count,
                              float alpha, const void* dout, const std::int32_t* ids, std::int64_t N, std::int64_t C,
                              std::int64_t V) {
  if (N == 0 || C == 0 || count == 0) return;
  dispatch_float(dtype, "embedding_backward_slice", [&](auto zero) {
    using T = decltype(zero);
    launch_embedding_backward<T>(stream, TableSlice<float>{slice, first, count, alpha}, dout, ids, N, C, V);
  });
  check_launch("embedding_backward_slice");
}

void cross_entropy(CUstream_st* stream, DType dtype, float* loss, float* lse, const void* logits,
                   const std::int32_t* targets, std::int64_t N, std::int64_t V, std::int64_t stride) {
  dispatch_float(dtype, "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    const auto* x = static_cast<const T*>(logits);
    if (N > 0) {
      logsumexp_kernel<<<row_grid(N), kRowThreads, 0, stream>>>(lse, x, N, V, stride);
      check_launch("cross_entropy (log-sum-exp)");
    }
    // Even with no rows: the loss is then 0 / 0, NaN, as on the host.
    cross_entropy_mean_kernel<<<1, 1024, 0, stream>>>(loss, lse, x, targets, N, V, stride);
    check_launch("cross_entropy (mean)");
  });
}

void cross_entropy_backward(CUstream_st* stream, DType dtype, void* dlogits, const void* logits,
                            const std::int32_t* targets, const float* lse, std::int64_t N, std::int64_t V,
                            std::int64_t stride, float dloss) {
  if (N == 0 || V == 0) return;
  const float scale = dloss / static_cast<float>(N);  // as the host body
  dispatch_float(dtype, "cross_entropy_backward", [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_backward_kernel<<<row_grid(N), kRowThreads, 0, stream>>>(
        static_cast<T*>(dlogits), static_cast<const T*>(logits), targets, lse, N, V, stride, scale);
  });
  check_launch("cross_entropy_backward");
}

void mse_loss(CUstream_st* stream, DType dtype, float* loss, const void* pred, const void* target, std::int64_t n) {
  dispatch_float(dtype, "mse_loss", [&](auto zero) {
    using T = decltype(zero);
    // Summed in f32 as the host body; n = 0 gives 0 / 0, NaN, as there.
    reduce_to_scalar<float>(stream, "mse_loss", loss, n,
                            SquaredErrorTerm<T>{static_cast<const T*>(pred), static_cast<const T*>(target)},
                            static_cast<float>(n));
  });
}

void mse_loss_backward(CUstream_st* stream, DType dtype, void* dpred, const void* pred, const void* target,
                       std::int64_t n, float dloss) {
  if (n == 0) return;
  const float scale = 2.f * dloss / static_cast<float>(n);  // as the host body
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  dispatch_float(dtype, "mse_loss_backward", [&](auto zero) {
    using T = decltype(zero);
    mse_backward_kernel<<<static_cast<int>(blocks < 4096 ? blocks : 4096), kThreads, 0, stream>>>(
        static_cast<T*>(dpred), static_cast<const T*>(pred), static_cast<const T*>(target), n, scale);
  });
  check_launch("mse_loss_backward");
}

void sum(CUstream_st* stream, DType dtype, float* out, const void* x, std::int64_t n) {
  dispatch_float(dtype, "sum", [&](auto zero) {
    using T = decltype(zero);
    // In double, as the host body: exact to f32 precision whatever the order.
    reduce_to_scalar<double>(stream, "sum", out, n, ValueTerm<T>{static_cast<const T*>(x)}, 1.f);
  });
}

void sum_of_squares(CUstream_st* stream, DType dtype, float* out, const void* x, std::int64_t n) {
  dispatch_float(dtype, "sum_of_squares", [&](auto zero) {
    using T = decltype(zero);
    reduce_to_scalar<double>(stream, "sum_of_squares", out, n, SquareTerm<T>{static_cast<const T*>(x)}, 1.f);
  });
}

}  // namespace fsdplab::cuda
