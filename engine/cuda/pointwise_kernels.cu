// pointwise_kernels.cu — the kernels of pointwise_kernels.hpp.
//
// Elementwise ops share one grid-stride kernel, map_kernel, parameterised by a functor that turns the f32
// values of an element's inputs into its outputs (the host body's formula, line for line). Where every
// pointer is aligned to 16 bytes it moves 16-byte packs (8 bf16 or 4 f32 elements, llm.c's Packed128);
// views may start at any element, so otherwise it goes element by element. Row ops (rope, the qkv packing)
// give a block a row. (The bias gradient, a column sum, is row_kernels.cu's.)

#include <cmath>
#include <cstdint>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/gelu_tanh.cuh"
#include "engine/cuda/pointwise_kernels.hpp"

namespace fsdplab::cuda {
namespace {


constexpr int kThreads = 256;
// Enough blocks to fill an H100 several times over; grid-stride loops cover the rest.
constexpr std::int64_t kMaxBlocks = 4096;




int grid_for(std::int64_t work, int threads = kThreads) {
  const std::int64_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

bool aligned(const void* p, std::size_t alignment) { return reinterpret_cast<std::uintptr_t>(p) % alignment == 0; }

// ---- the elementwise kernel -------------------------------------------------------------------------

template <class T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

// Up to a few pointers of one element type, passed by value in the kernel's parameters.
template <class T, int N>
struct Ptrs {
  T* p[N > 0 ? N : 1];
};

// For every element i < n: op(inputs' values at i, outputs' values at i), all in f32. An output may be one
// of the inputs (in place, or a gradient that is read and added to): each element, or pack, is read whole
// before it is written.
template <class Out, class In, int kOut, int kIn, class Op>
__global__ void map_kernel(Ptrs<Out, kOut> out, Ptrs<const In, kIn> in, std::int64_t n, bool packed, Op op) {
  constexpr int W = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::int64_t done = 0;
  if (packed) {
    const std::int64_t packs = n / W;
    for (std::int64_t p = first; p < packs; p += stride) {
      Pack<In, W> a[kIn > 0 ? kIn : 1];
#pragma unroll
      for (int k = 0; k < kIn; ++k) a[k] = reinterpret_cast<const Pack<In, W>*>(in.p[k])[p];
      Pack<Out, W> r[kOut];
#pragma unroll
      for (int j = 0; j < W; ++j) {
        float x[kIn > 0 ? kIn : 1];
        float y[kOut];
#pragma unroll
        for (int k = 0; k < kIn; ++k) x[k] = to_f32(a[k].v[j]);
        op(x, y);
#pragma unroll
        for (int o = 0; o < kOut; ++o) r[o].v[j] = from_f32<Out>(y[o]);
      }
#pragma unroll
      for (int o = 0; o < kOut; ++o) reinterpret_cast<Pack<Out, W>*>(out.p[o])[p] = r[o];
    }
    done = packs * W;
  }
  for (std::int64_t i = done + first; i < n; i += stride) {
    float x[kIn > 0 ? kIn : 1];
    float y[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = to_f32(in.p[k][i]);
    op(x, y);
#pragma unroll
    for (int o = 0; o < kOut; ++o) out.p[o][i] = from_f32<Out>(y[o]);
  }
}

template <class Out, class In, int kOut, int kIn, class Op>
void launch_map(CUstream_st* stream, const char* name, Ptrs<Out, kOut> out, Ptrs<const In, kIn> in, std::int64_t n,
                Op op) {
  if (n == 0) return;
  constexpr int W = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
  bool packed = true;
  for (int o = 0; o < kOut; ++o) packed = packed && aligned(out.p[o], sizeof(Out) * W);
  for (int k = 0; k < kIn; ++k) packed = packed && aligned(in.p[k], sizeof(In) * W);
  const std::int64_t work = packed ? (n + W - 1) / W : n;
  map_kernel<Out, In, kOut, kIn, Op><<<grid_for(work), kThreads, 0, stream>>>(out, in, n, packed, op);
  check_launch(name);
}

// out[i] += alpha * x[i]: an f32 accumulator and x of another dtype, which map_kernel's one input type does not
// take. A thread per element, strided.
template <class T>
__global__ void add_scaled_kernel(float* out, const T* x, float alpha, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] += alpha * to_f32(x[i]);
}

// out = op(x) over one dtype.
template <class Op>
void launch_unary(CUstream_st* stream, const char* name, DType dtype, void* out, const void* x, std::int64_t n,
                  Op op) {
  dispatch_float(dtype, name, [&](auto zero) {
    using T = decltype(zero);
    launch_map<T, T, 1, 1>(stream, name, Ptrs<T, 1>{{static_cast<T*>(out)}},
                           Ptrs<const T, 1>{{static_cast<const T*>(x)}}, n, op);
  });
}

// dx = op(x, dout, dx): an activation's backward, adding into dx.
template <class Op>
void launch_backward(CUstream_st* stream, const char* name, DType dtype, void* dx, const void* x, const void* dout,
                     std::int64_t n, Op op) {
  dispatch_float(dtype, name, [&](auto zero) {
    using T = decltype(zero);
    launch_map<T, T, 1, 3>(stream, name, Ptrs<T, 1>{{static_cast<T*>(dx)}},
                           Ptrs<const T, 3>{{static_cast<const T*>(x), static_cast<const T*>(dout),
                                             static_cast<const T*>(dx)}},
                           n, op);
  });
}

// ---- the elementwise formulas (engine/tensor/elementwise.cpp, silu_mul.cpp) ------------------------

struct GeluOp {
  __device__ void operator()(const float* in, float* out) const { out[0] = gelu_tanh_f32(in[0]); }
};

// in: x, dout, dx.
struct GeluBackwardOp {
  __device__ void operator()(const float* in, float* out) const {
    out[0] = in[2] + in[1] * gelu_tanh_derivative_f32(in[0]);
  }
};

// in: x, d; out: d.
struct GeluBackwardInPlaceOp {
  __device__ void operator()(const float* in, float* out) const { out[0] = in[1] * gelu_tanh_derivative_f32(in[0]); }
};

struct ReluOp {
  // NaN passes through (NaN <= 0 is false), as in PyTorch's relu.
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] <= 0.f ? 0.f : in[0]; }
};

struct ReluBackwardOp {
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] > 0.f ? in[2] + in[1] : in[2]; }
};

struct AddOp {
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] + in[1]; }
};

struct ScaleOp {
  float alpha;
  __device__ void operator()(const float* in, float* out) const { out[0] = alpha * in[0]; }
};

struct CastOp {
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0]; }
};

struct FillOp {
  float value;
  __device__ void operator()(const float*, float* out) const { out[0] = value; }
};

// expf, not __expf: the host body uses std::exp.
__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

struct SiluMulOp {
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0];
    out[0] = g * sigmoid(g) * in[1];
  }
};

// in: gate, up, dout; out: dgate, dup.
struct SiluMulBackwardOp {
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0];
    const float sg = sigmoid(g);
    const float d = in[2];
    out[0] = d * in[1] * sg * (1.f + g * (1.f - sg));
    out[1] = d * g * sg;
  }
};

// ---- bias ------------------------------------------------------------------------------------------

// bias_add: a thread per column, the block's rows strided by the grid's height, so the bias is read once per
// thread; op(i, b) writes element i = n * C + c given b = bias[c] in f32, reading x[i] before it writes out[i], so
// out may be x.
template <class T, class Op>
__global__ void bias_rows_kernel(const T* bias, std::int64_t N, std::int64_t C, Op op) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float b = to_f32(bias[c]);
  for (std::int64_t n = blockIdx.y; n < N; n += gridDim.y) op(n * C + c, b);
}

template <class T>
struct BiasAddOp {
  T* out;
  const T* x;
  __device__ void operator()(std::int64_t i, float b) const { out[i] = from_f32<T>(to_f32(x[i]) + b); }
};

// bias_rows_kernel over [N, C]: narrow rows get a narrow block, so few threads idle, and up to kMaxBlocks
// blocks share the rows.
template <class T, class Op>
void launch_bias_rows(CUstream_st* stream, const char* name, const void* bias, std::int64_t N, std::int64_t C,
                      Op op) {
  if (N == 0 || C == 0) return;
  const int threads = C >= kThreads ? kThreads : static_cast<int>((C + 31) / 32 * 32);
  const std::int64_t columns = (C + threads - 1) / threads;
  std::int64_t rows = kMaxBlocks / columns;
  rows = rows < 1 ? 1 : rows > 65535 ? 65535 : rows;
  const dim3 grid(static_cast<unsigned>(columns), static_cast<unsigned>(N < rows ? N : rows));
  bias_rows_kernel<<<grid, threads, 0, stream>>>(static_cast<const T*>(bias), N, C, op);
  check_launch(name);
}

// ---- rope ------------------------------------------------------------------------------------------

struct InvFreq {
  float v[kMaxRopePairs];
};

// A block per row (b, t): the row's cos and sin [hd/2] once into shared memory, then every head's pairs.
// Threads take consecutive i within a head, so both halves of a pair are read coalesced; a thread reads its
// pair whole before it writes it, so out may be x.
template <class T>
__global__ void rope_kernel(T* out, const T* x, std::int64_t rows, std::int64_t T_len, int H, int hd, InvFreq inv_freq,
                            bool backward) {
  extern __shared__ float table[];  // cos [half], then sin [half]
  const int half = hd / 2;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float t = static_cast<float>(row % T_len);
    __syncthreads();  // the previous row is done with the table
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      // cosf and sinf, not the fast intrinsics: the host body uses std::cos and std::sin.
      const float angle = t * inv_freq.v[i];
      table[i] = cosf(angle);
      table[half + i] = sinf(angle);
    }
    __syncthreads();
    const std::int64_t base = row * H * hd;
    for (int p = threadIdx.x; p < H * half; p += blockDim.x) {
      const int h = p / half, i = p - h * half;
      const std::int64_t e = base + static_cast<std::int64_t>(h) * hd + i;
      const float x1 = to_f32(x[e]);
      const float x2 = to_f32(x[e + half]);
      // The backward turns by the opposite angle (the sine negated, which is exact).
      const float c = table[i], s = backward ? -table[half + i] : table[half + i];
      out[e] = from_f32<T>(x1 * c - x2 * s);
      out[e + half] = from_f32<T>(x2 * c + x1 * s);
    }
  }
}

// ---- qkv packing -------------------------------------------------------------------------------------

// A block per row n: the q part copied, each query head's k and v copied from its group's head. Bits move
// unchanged.
template <class T>
__global__ void pack_qkv_kernel(T* qkv, const T* q, const T* k, const T* v, std::int64_t N, int H, int KV, int hd) {
  const int C = H * hd, KVW = KV * hd, R = H / KV;
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    T* row = qkv + n * 3 * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
      const int h = j / hd, i = j - h * hd;
      const std::int64_t src = n * KVW + (h / R) * hd + i;
      row[j] = q[n * C + j];
      row[C + j] = k[src];
      row[2 * C + j] = v[src];
    }
  }
}

// A block per row n: dq = the q part; dk and dv = the sum, in f32 in head order from zero, of the R query heads
// that share each key/value head, rounded once (the host body's order, so bit for bit the same).
template <class T>
__global__ void pack_qkv_backward_kernel(T* dq, T* dk, T* dv, const T* dqkv, std::int64_t N, int H, int KV, int hd) {
  const int C = H * hd, KVW = KV * hd, R = H / KV;
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* row = dqkv + n * 3 * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) dq[n * C + j] = row[j];
    for (int j = threadIdx.x; j < KVW; j += blockDim.x) {
      const int g = j / hd, i = j - g * hd;
      float sk = 0.f, sv = 0.f;
      for (int r = 0; r < R; ++r) {
        const int col = (g * R + r) * hd + i;
        sk += to_f32(row[C + col]);
        sv += to_f32(row[2 * C + col]);
      }
      dk[n * KVW + j] = from_f32<T>(sk);
      dv[n * KVW + j] = from_f32<T>(sv);
    }
  }
}

// Blocks for a kernel that strides a block per row.
int row_grid(std::int64_t rows) { return static_cast<int>(rows < 65535 ? rows : 65535); }

}  // namespace

void bias_add(CUstream_st* stream, DType dtype, void* out, const void* x, const void* bias, std::int64_t N,
              std::int64_t C) {
  dispatch_float(dtype, "bias_add", [&](auto zero) {
    using T = decltype(zero);
    launch_bias_rows<T>(stream, "bias_add", bias, N, C, BiasAddOp<T>{static_cast<T*>(out), static_cast<const T*>(x)});
  });
}

void gelu(CUstream_st* stream, DType dtype, void* out, const void* x, std::int64_t n) {
  launch_unary(stream, "gelu", dtype, out, x, n, GeluOp{});
}

void gelu_backward(CUstream_st* stream, DType dtype, void* dx, const void* x, const void* dout, std::int64_t n) {
  launch_backward(stream, "gelu_backward", dtype, dx, x, dout, n, GeluBackwardOp{});
}

void gelu_backward_in_place(CUstream_st* stream, DType dtype, void* d, const void* x, std::int64_t n) {
  dispatch_float(dtype, "gelu_backward_in_place", [&](auto zero) {
    using T = decltype(zero);
    launch_map<T, T, 1, 2>(stream, "gelu_backward_in_place", Ptrs<T, 1>{{static_cast<T*>(d)}},
                           Ptrs<const T, 2>{{static_cast<const T*>(x), static_cast<const T*>(d)}}, n,
                           GeluBackwardInPlaceOp{});
  });
}

void relu(CUstream_st* stream, DType dtype, void* out, const void* x, std::int64_t n) {
  launch_unary(stream, "relu", dtype, out, x, n, ReluOp{});
}

void relu_backward(CUstream_st* stream, DType dtype, void* dx, const void* x, const void* dout, std::int64_t n) {
  launch_backward(stream, "relu_backward", dtype, dx, x, dout, n, ReluBackwardOp{});
}

void add(CUstream_st* stream, DType dtype, void* out, const void* a, const void* b, std::int64_t n) {
  dispatch_float(dtype, "add", [&](auto zero) {
    using T = decltype(zero);
    launch_map<T, T, 1, 2>(stream, "add", Ptrs<T, 1>{{static_cast<T*>(out)}},
                           Ptrs<const T, 2>{{static_cast<const T*>(a), static_cast<const T*>(b)}}, n, AddOp{});
  });
}

void scale(CUstream_st* stream, DType dtype, void* out, const void* x, float alpha, std::int64_t n) {
  launch_unary(stream, "scale", dtype, out, x, n, ScaleOp{alpha});
}

void add_scaled(CUstream_st* stream, float* out, DType x_dtype, const void* x, float alpha, std::int64_t n) {
  if (n == 0) return;
  dispatch_float(x_dtype, "add_scaled", [&](auto zero) {
    using T = decltype(zero);
    add_scaled_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(out, static_cast<const T*>(x), alpha, n);
  });
  check_launch("add_scaled");
}

void cast(CUstream_st* stream, DType out_dtype, void* out, DType in_dtype, const void* in, std::int64_t n) {
  dispatch_float(in_dtype, "cast", [&](auto in_zero) {
    using In = decltype(in_zero);
    dispatch_float(out_dtype, "cast", [&](auto out_zero) {
      using Out = decltype(out_zero);
      launch_map<Out, In, 1, 1>(stream, "cast", Ptrs<Out, 1>{{static_cast<Out*>(out)}},
                                Ptrs<const In, 1>{{static_cast<const In*>(in)}}, n, CastOp{});
    });
  });
}

void fill(CUstream_st* stream, DType dtype, void* t, float value, std::int64_t n) {
  dispatch_float(dtype, "fill", [&](auto zero) {
    using T = decltype(zero);
    launch_map<T, T, 1, 0>(stream, "fill", Ptrs<T, 1>{{static_cast<T*>(t)}}, Ptrs<const T, 0>{}, n, FillOp{value});
  });
}

void silu_mul(CUstream_st* stream, DType dtype, void* out, const void* gate, const void* up, std::int64_t n) {
  dispatch_float(dtype, "silu_mul", [&](auto zero) {
    using T = decltype(zero);
    launch_map<T, T, 1, 2>(stream, "silu_mul", Ptrs<T, 1>{{static_cast<T*>(out)}},
                           Ptrs<const T, 2>{{static_cast<const T*>(gate), static_cast<const T*>(up)}}, n, SiluMulOp{});
  });
}

void silu_mul_backward(CUstream_st* stream, DType dtype, void* dgate, void* dup, const void* gate, const void* up,
                       const void* dout, std::int64_t n) {
  dispatch_float(dtype, "silu_mul_backward", [&](auto zero) {
    using T = decltype(zero);
    launch_map<T, T, 2, 3>(stream, "silu_mul_backward", Ptrs<T, 2>{{static_cast<T*>(dgate), static_cast<T*>(dup)}},
                           Ptrs<const T, 3>{{static_cast<const T*>(gate), static_cast<const T*>(up),
                                             static_cast<const T*>(dout)}},
                           n, SiluMulBackwardOp{});
  });
}

void rope(CUstream_st* stream, DType dtype, void* out, const void* x, std::int64_t B, std::int64_t T, std::int64_t H,
          std::int64_t hd, float theta, bool backward) {
  const char* name = backward ? "rope_backward" : "rope";
  const std::int64_t half = hd / 2;
  check(half <= kMaxRopePairs, name, ": the cuda device rotates heads of up to ", 2 * kMaxRopePairs,
        " elements, got head_dim ", hd);
  const std::int64_t rows = B * T;
  if (rows == 0 || H == 0 || half == 0) return;
  // The inverse frequencies exactly as the host body computes them (the same std::pow on the same floats),
  // so the angles t * inv_freq agree bit for bit and only cos and sin may differ by an ulp.
  InvFreq inv_freq{};
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq.v[i] = 1.f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
  const auto shared = static_cast<std::size_t>(2 * half) * sizeof(float);
  dispatch_float(dtype, name, [&](auto zero) {
    using E = decltype(zero);
    rope_kernel<<<row_grid(rows), kThreads, shared, stream>>>(static_cast<E*>(out), static_cast<const E*>(x), rows, T,
                                                              static_cast<int>(H), static_cast<int>(hd), inv_freq,
                                                              backward);
  });
  check_launch(name);
}

void pack_qkv(CUstream_st* stream, DType dtype, void* qkv, const void* q, const void* k, const void* v, std::int64_t N,
              std::int64_t H, std::int64_t KV, std::int64_t hd) {
  if (N == 0 || H * hd == 0) return;
  dispatch_float(dtype, "pack_qkv", [&](auto zero) {
    using T = decltype(zero);
    pack_qkv_kernel<<<row_grid(N), kThreads, 0, stream>>>(static_cast<T*>(qkv), static_cast<const T*>(q),
                                                          static_cast<const T*>(k), static_cast<const T*>(v), N,
                                                          static_cast<int>(H), static_cast<int>(KV),
                                                          static_cast<int>(hd));
  });
  check_launch("pack_qkv");
}

void pack_qkv_backward(CUstream_st* stream, DType dtype, void* dq, void* dk, void* dv, const void* dqkv, std::int64_t N,
                       std::int64_t H, std::int64_t KV, std::int64_t hd) {
  if (N == 0 || H * hd == 0) return;
  dispatch_float(dtype, "pack_qkv_backward", [&](auto zero) {
    using T = decltype(zero);
    pack_qkv_backward_kernel<<<row_grid(N), kThreads, 0, stream>>>(static_cast<T*>(dq), static_cast<T*>(dk),
                                                                   static_cast<T*>(dv), static_cast<const T*>(dqkv), N,
                                                                   static_cast<int>(H), static_cast<int>(KV),
                                                                   static_cast<int>(hd));
  });
  check_launch("pack_qkv_backward");
}

}  // namespace fsdplab::cuda
