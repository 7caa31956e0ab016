// row_kernels.cu — the kernels of row_kernels.hpp.
//
// Row statistics: one block per row (a grid-stride loop over rows), its threads striding over the row so a
// warp reads consecutive elements; a row's sums go thread -> warp (xor shuffles) -> block (warp partials
// in shared memory, summed by one warp again), the same tree every run. Statistics are f32 as on the host,
// and the mean and variance are two passes, as the host computes them (the row is re-read from L1/L2).
//
// The bias gradient and the norms' weight and bias gradients are column sums over all rows, which the host adds
// into the gradient once per element. A block owns a strip of kStripCols columns and a chunk of rows: its
// threads are kStripCols columns by kStripRows row lanes (a warp reads 32 consecutive columns of a row), row
// lane r summing the chunk's rows r, r + kStripRows, ... in order, and the row lanes' partials are then summed in
// order by one thread per column. A strip walking every row gave GPT-2's C = 768 only 24 blocks on a 132-SM
// H100 (bias_add + bias_backward were 4.5 ms of the first run's 152 ms bf16 step), so the rows are chunked as
// well: N = 8192 is 64 chunks x 24 strips = 1536 blocks, whose f32 chunk sums (the op's scratch) a second pass
// adds up per column in chunk order, into the gradient once. The chunk size depends on N alone: every sum's
// order is fixed by (N, C), the same bits every run.

#include <cmath>
#include <cstdint>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/op_scratch.hpp"
#include "engine/cuda/row_kernels.hpp"

namespace fsdplab::cuda {
namespace {


// Rows handed out per launch at most; a grid-stride loop covers more.
constexpr std::int64_t kMaxRowBlocks = 1 << 20;
// The column-sum kernels' strip: kStripCols columns by kStripRows row lanes, one thread each.
constexpr int kStripCols = 32;
constexpr int kStripRows = 8;
constexpr int kStripThreads = kStripCols * kStripRows;
// A chunk is 16 rows a thread; the second pass's row lanes sum at most 16 chunks each, so past
// N = kMaxChunks * kChunkRows the chunks grow.
constexpr std::int64_t kChunkRows = 128;
constexpr std::int64_t kMaxChunks = 128;



// The block's total of every thread's `v`, returned to every thread. `red` is 32 floats of shared memory;
// blockDim.x is a multiple of 32. The leading barrier lets consecutive calls reuse `red`.
__device__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? red[lane] : 0.f);
}
__device__ float block_max(float v, float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? red[lane] : -INFINITY);
}

// About four elements a thread, in whole warps, at most 1024 threads.
int row_threads(std::int64_t C) {
  std::int64_t threads = (C + 3) / 4;
  threads = (threads + 31) / 32 * 32;
  return static_cast<int>(threads < 32 ? 32 : threads > 1024 ? 1024 : threads);
}
int row_blocks(std::int64_t N) { return static_cast<int>(N < kMaxRowBlocks ? N : kMaxRowBlocks); }
int strip_blocks(std::int64_t C) { return static_cast<int>((C + kStripCols - 1) / kStripCols); }
std::int64_t chunk_rows_for(std::int64_t N) {
  constexpr std::int64_t most = kMaxChunks * kChunkRows;
  return kChunkRows * (N > most ? (N + most - 1) / most : 1);
}


// ---- layernorm ------------------------------------------------------------------------------------

template <class F>
__global__ void layernorm_forward_kernel(F* out, float* mean, float* rstd, const F* x, const F* weight,
                                         const F* bias, std::int64_t N, int C, float eps) {
  __shared__ float red[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const F* xn = x + n * C;
    float sum = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) sum += to_f32(xn[i]);
    const float m = block_sum(sum, red) / static_cast<float>(C);
    // Two passes, as the host: E[x^2] - E[x]^2 cancels badly when the mean is large against the spread.
    float var = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
      const float d = to_f32(xn[i]) - m;
      var += d * d;
    }
    const float s = 1.f / sqrtf(block_sum(var, red) / static_cast<float>(C) + eps);
    F* on = out + n * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
      store(on + i, (to_f32(xn[i]) - m) * s * to_f32(weight[i]) + to_f32(bias[i]));
    if (threadIdx.x == 0) {
      mean[n] = m;
      rstd[n] = s;
    }
  }
}

// dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout, per row, that term
// rounded to F first.
template <class F>
__global__ void layernorm_dx_kernel(F* dx, const F* dout, const F* x, const F* weight, const float* mean,
                                    const float* rstd, std::int64_t N, int C) {
  __shared__ float red[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const F* xn = x + n * C;
    const F* gn = dout + n * C;
    const float m = mean[n];
    const float s = rstd[n];
    float dnorm_sum = 0.f, dnorm_norm_sum = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
      const float norm = (to_f32(xn[i]) - m) * s;
      const float dnorm = to_f32(weight[i]) * to_f32(gn[i]);
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
    }
    const float dnorm_mean = block_sum(dnorm_sum, red) / static_cast<float>(C);
    const float dnorm_norm_mean = block_sum(dnorm_norm_sum, red) / static_cast<float>(C);
    F* dxn = dx + n * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
      const float norm = (to_f32(xn[i]) - m) * s;
      const float dnorm = to_f32(weight[i]) * to_f32(gn[i]);
      // Rounded to F before the add (in f32 too: __fmul_rn keeps nvcc from fusing the product into the add), so
      // that adding into the residual stream's gradient is bit for bit a separate add.
      const F g = from_f32<F>(__fmul_rn(s, dnorm - dnorm_mean - norm * dnorm_norm_mean));
      store(dxn + i, to_f32(dxn[i]) + to_f32(g));
    }
  }
}

// ---- column sums: the bias and norm weight gradients ------------------------------------------------

// Up to two column sums at once over rows [chunk * chunk_rows, + chunk_rows) of a strip, chunk = blockIdx.y:
// terms(n, i, sum, second) adds row n's terms of column i. With one chunk, out (and second_out, where not null)
// get the totals added, rounded once; with several, part and second_part [chunks, C] get the chunk's sums.
// One block per strip of columns and chunk of rows; see the file's header.
template <class F, class Terms>
__global__ void __launch_bounds__(kStripThreads)
    column_sums_kernel(F* out, F* second_out, float* part, float* second_part, Terms terms, std::int64_t rows, int C,
                       std::int64_t chunk_rows) {
  __shared__ float lanes[kStripRows][kStripCols + 1];
  __shared__ float second_lanes[kStripRows][kStripCols + 1];
  const int col_lane = threadIdx.x % kStripCols, row_lane = threadIdx.x / kStripCols;
  const int i = blockIdx.x * kStripCols + col_lane;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t end = first + chunk_rows < rows ? first + chunk_rows : rows;
  float sum = 0.f, second = 0.f;
  if (i < C) {
    for (std::int64_t n = first + row_lane; n < end; n += kStripRows) terms(n, i, sum, second);
  }
  lanes[row_lane][col_lane] = sum;
  second_lanes[row_lane][col_lane] = second;
  __syncthreads();
  if (row_lane != 0 || i >= C) return;
  for (int r = 1; r < kStripRows; ++r) {
    sum += lanes[r][col_lane];
    second += second_lanes[r][col_lane];
  }
  if (gridDim.y == 1) {
    store(out + i, to_f32(out[i]) + sum);
    if (second_out != nullptr) store(second_out + i, to_f32(second_out[i]) + second);
  } else {
    const std::int64_t at = static_cast<std::int64_t>(blockIdx.y) * C + i;
    part[at] = sum;
    if (second_part != nullptr) second_part[at] = second;
  }
}

// Row n's terms of a norm's weight gradient, norm * dout, and of its bias gradient, dout (rmsnorm's mean is null:
// norm = x * rstd).
template <class F>
struct NormTerms {
  const F* dout;
  const F* x;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(std::int64_t n, int i, float& dweight, float& dbias) const {
    const float g = to_f32(dout[n * C + i]);
    const float xi = to_f32(x[n * C + i]);
    const float norm = mean != nullptr ? (xi - mean[n]) * rstd[n] : xi * rstd[n];
    dbias += g;
    dweight += norm * g;
  }
};

// Row n's term of a bias gradient: dout itself.
template <class F>
struct BiasTerms {
  const F* dout;
  int C;
  __device__ void operator()(std::int64_t n, int i, float& dbias, float&) const { dbias += to_f32(dout[n * C + i]); }
};

// The second pass's rows: the chunks' sums (second_part null where there is one sum).
struct ChunkTerms {
  const float* part;
  const float* second_part;
  int C;
  __device__ void operator()(std::int64_t chunk, int i, float& sum, float& second) const {
    sum += part[chunk * C + i];
    if (second_part != nullptr) second += second_part[chunk * C + i];
  }
};

// out += the column sums of terms over N rows, and second_out (where not null) += the second sums.
template <class F, class Terms>
void launch_column_sums(CUstream_st* stream, const char* name, F* out, F* second_out, Terms terms, std::int64_t N,
                        int C) {
  const std::int64_t chunk_rows = chunk_rows_for(N);
  const std::int64_t chunks = N > chunk_rows ? (N + chunk_rows - 1) / chunk_rows : 1;
  if (chunks == 1) {
    column_sums_kernel<F><<<strip_blocks(C), kStripThreads, 0, stream>>>(out, second_out, nullptr, nullptr, terms, N,
                                                                         C, chunk_rows);
    check_launch(name);
    return;
  }
  // The chunk sums live only between the two passes: the op's scratch, freed behind it on its stream.
  const std::int64_t sums = chunks * C;
  const std::int64_t bytes = (second_out != nullptr ? 2 : 1) * sums * static_cast<std::int64_t>(sizeof(float));
  auto* part = static_cast<float*>(op_scratch(bytes, "the column sums' chunk sums"));
  float* second_part = second_out != nullptr ? part + sums : nullptr;
  const dim3 grid(static_cast<unsigned>(strip_blocks(C)), static_cast<unsigned>(chunks));
  column_sums_kernel<F><<<grid, kStripThreads, 0, stream>>>(nullptr, nullptr, part, second_part, terms, N, C,
                                                            chunk_rows);
  check_launch(name, " (chunk sums)");
  column_sums_kernel<F><<<strip_blocks(C), kStripThreads, 0, stream>>>(out, second_out, nullptr, nullptr,
                                                                       ChunkTerms{part, second_part, C}, chunks, C,
                                                                       chunks);
  check_launch(name);
}

// ---- rmsnorm --------------------------------------------------------------------------------------

template <class F>
__global__ void rmsnorm_forward_kernel(F* out, float* rstd, const F* x, const F* weight, std::int64_t N, int C,
                                       float eps) {
  __shared__ float red[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const F* xn = x + n * C;
    float sum_sq = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
      const float v = to_f32(xn[i]);
      sum_sq += v * v;
    }
    const float s = 1.f / sqrtf(block_sum(sum_sq, red) / static_cast<float>(C) + eps);
    F* on = out + n * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) store(on + i, to_f32(xn[i]) * s * to_f32(weight[i]));
    if (threadIdx.x == 0) rstd[n] = s;
  }
}

// dx += rstd * (dnorm - norm * mean(dnorm * norm)), dnorm = weight * dout, norm = x * rstd, per row.
template <class F>
__global__ void rmsnorm_dx_kernel(F* dx, const F* dout, const F* x, const F* weight, const float* rstd,
                                  std::int64_t N, int C) {
  __shared__ float red[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const F* xn = x + n * C;
    const F* gn = dout + n * C;
    const float s = rstd[n];
    float dnorm_norm_sum = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
      dnorm_norm_sum += to_f32(weight[i]) * to_f32(gn[i]) * to_f32(xn[i]) * s;
    const float dnorm_norm_mean = block_sum(dnorm_norm_sum, red) / static_cast<float>(C);
    F* dxn = dx + n * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
      const float norm = to_f32(xn[i]) * s;
      const float dnorm = to_f32(weight[i]) * to_f32(gn[i]);
      // Rounded to F before the add, as layernorm_dx_kernel does (and why).
      const F g = from_f32<F>(__fmul_rn(s, dnorm - norm * dnorm_norm_mean));
      store(dxn + i, to_f32(dxn[i]) + to_f32(g));
    }
  }
}

// ---- softmax --------------------------------------------------------------------------------------

template <class F>
__global__ void softmax_forward_kernel(F* y, const F* x, std::int64_t N, int C) {
  __shared__ float red[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const F* xn = x + n * C;
    float max = -INFINITY;
    for (int i = threadIdx.x; i < C; i += blockDim.x) max = fmaxf(max, to_f32(xn[i]));
    max = block_max(max, red);
    float sum = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) sum += expf(to_f32(xn[i]) - max);
    // exp is evaluated again rather than kept in y: a bf16 y would round the unnormalised values.
    const float inv = 1.f / block_sum(sum, red);
    F* yn = y + n * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) store(yn + i, expf(to_f32(xn[i]) - max) * inv);
  }
}

template <class F>
__global__ void softmax_backward_kernel(F* dx, const F* y, const F* dy, std::int64_t N, int C) {
  __shared__ float red[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const F* yn = y + n * C;
    const F* gn = dy + n * C;
    float dot = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) dot += to_f32(yn[i]) * to_f32(gn[i]);
    const float y_dot_dy = block_sum(dot, red);
    F* dxn = dx + n * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
      store(dxn + i, to_f32(dxn[i]) + to_f32(yn[i]) * (to_f32(gn[i]) - y_dot_dy));
  }
}

}  // namespace

void layernorm_forward(CUstream_st* stream, DType dtype, void* out, float* mean, float* rstd, const void* x,
                       const void* weight, const void* bias, std::int64_t N, std::int64_t C, float eps) {
  if (N == 0) return;
  dispatch_float(dtype, "layernorm", [&](auto zero) {
    using F = decltype(zero);
    layernorm_forward_kernel<F><<<row_blocks(N), row_threads(C), 0, stream>>>(
        static_cast<F*>(out), mean, rstd, static_cast<const F*>(x), static_cast<const F*>(weight),
        static_cast<const F*>(bias), N, static_cast<int>(C), eps);
  });
  check_launch("layernorm_forward");
}

void layernorm_backward(CUstream_st* stream, DType dtype, void* dx, void* dweight, void* dbias, const void* dout,
                        const void* x, const void* weight, const float* mean, const float* rstd, std::int64_t N,
                        std::int64_t C) {
  if (N == 0 || C == 0) return;
  dispatch_float(dtype, "layernorm_backward", [&](auto zero) {
    using F = decltype(zero);
    layernorm_dx_kernel<F><<<row_blocks(N), row_threads(C), 0, stream>>>(
        static_cast<F*>(dx), static_cast<const F*>(dout), static_cast<const F*>(x), static_cast<const F*>(weight),
        mean, rstd, N, static_cast<int>(C));
    check_launch("layernorm_backward (dx)");
    launch_column_sums(
        stream, "layernorm_backward (dweight, dbias)", static_cast<F*>(dweight), static_cast<F*>(dbias),
        NormTerms<F>{static_cast<const F*>(dout), static_cast<const F*>(x), mean, rstd, static_cast<int>(C)}, N,
        static_cast<int>(C));
  });
}

void rmsnorm_forward(CUstream_st* stream, DType dtype, void* out, float* rstd, const void* x, const void* weight,
                     std::int64_t N, std::int64_t C, float eps) {
  if (N == 0) return;
  dispatch_float(dtype, "rmsnorm", [&](auto zero) {
    using F = decltype(zero);
    rmsnorm_forward_kernel<F><<<row_blocks(N), row_threads(C), 0, stream>>>(
        static_cast<F*>(out), rstd, static_cast<const F*>(x), static_cast<const F*>(weight), N, static_cast<int>(C),
        eps);
  });
  check_launch("rmsnorm_forward");
}

void rmsnorm_backward(CUstream_st* stream, DType dtype, void* dx, void* dweight, const void* dout, const void* x,
                      const void* weight, const float* rstd, std::int64_t N, std::int64_t C) {
  if (N == 0 || C == 0) return;
  dispatch_float(dtype, "rmsnorm_backward", [&](auto zero) {
    using F = decltype(zero);
    rmsnorm_dx_kernel<F><<<row_blocks(N), row_threads(C), 0, stream>>>(
        static_cast<F*>(dx), static_cast<const F*>(dout), static_cast<const F*>(x), static_cast<const F*>(weight),
        rstd, N, static_cast<int>(C));
    check_launch("rmsnorm_backward (dx)");
    launch_column_sums(stream, "rmsnorm_backward (dweight)", static_cast<F*>(dweight), static_cast<F*>(nullptr),
                       NormTerms<F>{static_cast<const F*>(dout), static_cast<const F*>(x), nullptr, rstd,
                                    static_cast<int>(C)},
                       N, static_cast<int>(C));
  });
}

void bias_backward(CUstream_st* stream, DType dtype, void* dbias, const void* dout, std::int64_t N, std::int64_t C) {
  if (C == 0) return;  // N == 0 still adds the empty sums, as the host does
  dispatch_float(dtype, "bias_backward", [&](auto zero) {
    using F = decltype(zero);
    launch_column_sums(stream, "bias_backward", static_cast<F*>(dbias), static_cast<F*>(nullptr),
                       BiasTerms<F>{static_cast<const F*>(dout), static_cast<int>(C)}, N, static_cast<int>(C));
  });
}

void softmax_forward(CUstream_st* stream, DType dtype, void* y, const void* x, std::int64_t N, std::int64_t C) {
  if (N == 0 || C == 0) return;
  dispatch_float(dtype, "softmax", [&](auto zero) {
    using F = decltype(zero);
    softmax_forward_kernel<F><<<row_blocks(N), row_threads(C), 0, stream>>>(
        static_cast<F*>(y), static_cast<const F*>(x), N, static_cast<int>(C));
  });
  check_launch("softmax_forward");
}

void softmax_backward(CUstream_st* stream, DType dtype, void* dx, const void* y, const void* dy, std::int64_t N,
                      std::int64_t C) {
  if (N == 0 || C == 0) return;
  dispatch_float(dtype, "softmax_backward", [&](auto zero) {
    using F = decltype(zero);
    softmax_backward_kernel<F><<<row_blocks(N), row_threads(C), 0, stream>>>(
        static_cast<F*>(dx), static_cast<const F*>(y), static_cast<const F*>(dy), N, static_cast<int>(C));
  });
  check_launch("softmax_backward");
}

}  // namespace fsdplab::cuda
