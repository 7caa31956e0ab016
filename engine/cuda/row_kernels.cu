// row_kernels.cu — the kernels of row_kernels.hpp.
//
// Row statistics: one block per row (a grid-stride loop over rows), its threads striding over the row so a
// warp reads consecutive elements; a row's sums go thread -> warp (xor shuffles) -> block (warp partials
// in shared memory, summed by one warp again), the same tree every run. Statistics are f32 as on the host,
// and the mean and variance are two passes, as the host computes them (the row is re-read from L1/L2).
//
// The norms' weight and bias gradients are column sums over all rows, which the host adds into the
// gradient once per element. Without scratch memory (an op body may not allocate), no sum may be split
// across blocks, so a block owns a strip of kStripCols columns and walks every row: its threads are
// kStripCols columns by kStripRows row lanes, row lane r summing rows r, r + kStripRows, ... in order, and
// the row lanes' partials are then summed in order by one thread per column. Deterministic, and the
// strips keep warps reading whole 32-byte sectors; the parallelism is C / kStripCols blocks.

#include <cmath>
#include <cstdint>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/row_kernels.hpp"

namespace fsdplab::cuda {
namespace {


// Rows handed out per launch at most; a grid-stride loop covers more.
constexpr std::int64_t kMaxRowBlocks = 1 << 20;
// The column-sum kernels' strip: kStripCols columns by kStripRows row lanes, one thread each.
constexpr int kStripCols = 16;
constexpr int kStripRows = 64;
constexpr int kStripThreads = kStripCols * kStripRows;



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

// dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout, per row.
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
      store(dxn + i, to_f32(dxn[i]) + s * (dnorm - dnorm_mean - norm * dnorm_norm_mean));
    }
  }
}

// dweight += sum over rows of norm * dout, dbias += sum over rows of dout (dbias null for rmsnorm, whose
// mean is null too: norm = x * rstd). One block per strip of columns; see the header.
template <class F>
__global__ void __launch_bounds__(kStripThreads)
    norm_weight_grad_kernel(F* dweight, F* dbias, const F* dout, const F* x, const float* mean, const float* rstd,
                            std::int64_t N, int C) {
  __shared__ float dw_part[kStripRows][kStripCols + 1];
  __shared__ float db_part[kStripRows][kStripCols + 1];
  const int col_lane = threadIdx.x % kStripCols, row_lane = threadIdx.x / kStripCols;
  const int i = blockIdx.x * kStripCols + col_lane;
  float dw = 0.f, db = 0.f;
  if (i < C) {
    for (std::int64_t n = row_lane; n < N; n += kStripRows) {
      const float g = to_f32(dout[n * C + i]);
      const float xi = to_f32(x[n * C + i]);
      const float norm = mean != nullptr ? (xi - mean[n]) * rstd[n] : xi * rstd[n];
      db += g;
      dw += norm * g;
    }
  }
  dw_part[row_lane][col_lane] = dw;
  db_part[row_lane][col_lane] = db;
  __syncthreads();
  if (row_lane == 0 && i < C) {
    for (int r = 1; r < kStripRows; ++r) {
      dw += dw_part[r][col_lane];
      db += db_part[r][col_lane];
    }
    store(dweight + i, to_f32(dweight[i]) + dw);
    if (dbias != nullptr) store(dbias + i, to_f32(dbias[i]) + db);
  }
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
      store(dxn + i, to_f32(dxn[i]) + s * (dnorm - norm * dnorm_norm_mean));
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
    norm_weight_grad_kernel<F><<<strip_blocks(C), kStripThreads, 0, stream>>>(
        static_cast<F*>(dweight), static_cast<F*>(dbias), static_cast<const F*>(dout), static_cast<const F*>(x),
        mean, rstd, N, static_cast<int>(C));
    check_launch("layernorm_backward (dweight, dbias)");
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
    norm_weight_grad_kernel<F><<<strip_blocks(C), kStripThreads, 0, stream>>>(
        static_cast<F*>(dweight), nullptr, static_cast<const F*>(dout), static_cast<const F*>(x), nullptr, rstd, N,
        static_cast<int>(C));
    check_launch("rmsnorm_backward (dweight)");
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
