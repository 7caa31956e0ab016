// flash_attention_kernels.cu — the kernels of flash_attention_kernels.hpp: causal attention as
// FlashAttention-2 computes it, on tensor cores, following [Note: the flash attention arithmetic] in
// engine/tensor/flash_attention.hpp.
//
// Tiles. A block works on tiles of kTile = 64 query rows by 64 key rows of one head, 128 threads (4 warps).
// Operand tiles (q, k, v, dout) are staged in shared memory as bf16, the head dimension zero-padded up to a
// multiple of 16 (hdp): a zero column adds nothing to a dot product, and the padded output columns are never
// stored. Rows past T load as zeros too, so a partial last tile needs masking only in the softmax. The
// products run on tensor cores through nvcuda::wmma (bf16 m16n16k16 fragments, f32 accumulation):
//   warp_product_nt:   S[r][c]   = sum_i A[r][i] B[c][i]   (scores q k^T, dp = dout v^T), a warp 16 rows r;
//   warp_accumulate:   Acc[r][i] += sum_s M[r][s] X[s][i]   (p v, ds k), or with M transposed (p^T dout,
//                      ds^T q: the transposed operand is read in place as a column-major fragment).
// The f32 accumulators (out, dq, dk, dv) live in shared memory rather than in fragments: the online softmax
// rescales them row by row, and which fragment element holds which row is not something wmma promises.
//
// Forward: one block per (query tile i, head, batch), the highest query tile (longest rows) first. Each
// warp owns 16 query rows, so the softmax state of a row never leaves its warp: two lanes a row keep the
// running max m and sum l in registers, and only __syncwarp orders a warp's steps; __syncthreads guards the
// block-wide loads of the key and value tiles j = 0..i. Per tile: S = q k^T * scale, keys after the query or
// past T masked to -inf; m' = max(m, row max); c = exp(m - m') (0 on the first tile); p = exp(s - m');
// l = c l + sum p (the unrounded p); acc = c acc + bf16(p) v. At the end out = bf16(acc / l) and
// lse = m + log(l). Every row of a tile i >= j sees key j*64 <= its own position, so no row is ever fully
// masked on a tile it visits; the -inf guards only make sure such a row could not turn into NaN. Masked
// pairs still enter the products, as p = 0 (the tensor cores multiply whole tiles): an inf or NaN in a key or
// value row that a query cannot see reaches it through 0 * inf, where attention_kernels.cu skips the pair.
//
// Backward, in three kernels, with no atomics:
//   1. D_t = dout_t . out_t, a warp a row, into the op's scratch (B * NH * T floats);
//   2. the key pass, one block per (key tile j, head, batch), the lowest j (most query tiles) first: k_j and
//      v_j stay in shared memory while the query tiles i = j..NT-1 stream by; p = exp(s - lse_t) masked,
//      dp = dout v^T, ds = p (dp - D_t); dv += bf16(p)^T dout and dk += bf16(ds)^T q; at the end
//      dk *= scale, and both are stored into dqkv's k and v columns;
//   3. the query pass, one block per (query tile i, head, batch), the highest i first: for the key tiles
//      j = 0..i the same p, dp, ds; dq += bf16(ds) k; at the end dq *= scale, stored into the q columns.
// dq sums over keys and dk, dv over queries: one pass cannot own both without atomics on one of them, and
// atomics add in whatever order the blocks finish, so a rerun would differ in the last bits. Recomputing s
// and dp in the query pass costs 7 tile products a tile pair instead of 5, and buys bit-exact reruns. Each
// element of dqkv is written and rounded to bf16 once, by one thread, after a fixed order of sums.
//
// Shared memory, in bytes, for a padded head size hdp (row strides padded by 16 bytes so that the rows a
// fragment load touches fall in different banks):
//   forward     q, k, v [64][hdp+8] bf16, S [64][68] f32, p [64][72] bf16, acc [64][hdp+4] f32
//               hd = 64: 71,680     hd = 128: 112,640
//   key pass    k, v, q, dout bf16, dk, dv f32, S and dp f32, p and ds bf16, lse and D rows
//               hd = 64: 125,440    hd = 128: 190,976
//   query pass  q, dout, k, v bf16, dq f32, S and dp f32, ds bf16, lse and D rows
//               hd = 64: 98,816     hd = 128: 147,968
// Past the default 48 KiB a launcher opts in (sm_90 allows 227 KiB a block). An H100 SM holds 228 KiB: at
// hd = 64 that is three forward blocks, two query-pass blocks or one key-pass block at a time.
#include <mma.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/flash_attention_kernels.hpp"
#include "engine/cuda/op_scratch.hpp"
#include "engine/cuda/shared_memory.cuh"

namespace fsdplab::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 64;             // query and key rows of a tile (kFlashTile)
constexpr int kMaxHeadDim = 128;      // kFlashMaxHeadDim
constexpr int kThreads = 128;         // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kFrag = 16;             // the wmma tile edge: m = n = k = 16
constexpr int kWarpRows = kTile / kWarps;  // the rows of a tile one warp owns
constexpr int kScoreLd = kTile + 4;   // row stride of the f32 [64][64] score tiles (S, dp)
constexpr int kProbLd = kTile + 8;    // row stride of the bf16 [64][64] operand tiles (p, ds)
static_assert(kWarpRows == kFrag, "a warp owns one fragment's rows");

// Row strides of the [64][hdp] tiles: bf16 operands and f32 accumulators.
__host__ __device__ inline int operand_ld(int hdp) { return hdp + 8; }
__host__ __device__ inline int accumulator_ld(int hdp) { return hdp + 4; }

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBTransposed = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragAcc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// ---- shared memory layout -------------------------------------------------------------------------

// Hands out consecutive regions of a block's dynamic shared memory, each 128-byte aligned (wmma wants 32). A
// kernel carves from its dynamic shared-memory array: pointers derived from it without a round trip through an
// integer stay in the shared address space, so the compiler emits shared loads and stores (LDS, STS) rather
// than generic ones. A launcher carves from the integer 0 only to learn the size (`used`).
template <class Base>  // unsigned char* in a kernel, std::uintptr_t in a launcher
struct SharedCarver {
  Base base;
  std::size_t used = 0;
  __host__ __device__ bf16* bf16s(int count) { return take<bf16>(count); }
  __host__ __device__ float* floats(int count) { return take<float>(count); }

 private:
  template <class E>
  __host__ __device__ E* take(int count) {
    E* at = reinterpret_cast<E*>(base + used);
    used = (used + sizeof(E) * static_cast<std::size_t>(count) + 127) / 128 * 128;
    return at;
  }
};

// Each kernel's tiles in shared memory; `bytes`, what its launch asks for.
struct ForwardShared {
  bf16 *q, *k, *v, *probs;
  float *scores, *acc;
  std::size_t bytes;
  template <class Base>
  __host__ __device__ ForwardShared(Base shared, int hdp) {
    SharedCarver<Base> c{shared};
    q = c.bf16s(kTile * operand_ld(hdp));
    k = c.bf16s(kTile * operand_ld(hdp));
    v = c.bf16s(kTile * operand_ld(hdp));
    scores = c.floats(kTile * kScoreLd);
    probs = c.bf16s(kTile * kProbLd);
    acc = c.floats(kTile * accumulator_ld(hdp));
    bytes = c.used;
  }
};

struct KeyPassShared {
  bf16 *k, *v, *q, *dout, *probs, *dscores;
  float *dk, *dv, *scores, *dprobs, *lse_rows, *d_rows;
  std::size_t bytes;
  template <class Base>
  __host__ __device__ KeyPassShared(Base shared, int hdp) {
    SharedCarver<Base> c{shared};
    k = c.bf16s(kTile * operand_ld(hdp));
    v = c.bf16s(kTile * operand_ld(hdp));
    q = c.bf16s(kTile * operand_ld(hdp));
    dout = c.bf16s(kTile * operand_ld(hdp));
    dk = c.floats(kTile * accumulator_ld(hdp));
    dv = c.floats(kTile * accumulator_ld(hdp));
    scores = c.floats(kTile * kScoreLd);
    dprobs = c.floats(kTile * kScoreLd);
    probs = c.bf16s(kTile * kProbLd);
    dscores = c.bf16s(kTile * kProbLd);
    lse_rows = c.floats(kTile);
    d_rows = c.floats(kTile);
    bytes = c.used;
  }
};

struct QueryPassShared {
  bf16 *q, *dout, *k, *v, *dscores;
  float *dq, *scores, *dprobs, *lse_rows, *d_rows;
  std::size_t bytes;
  template <class Base>
  __host__ __device__ QueryPassShared(Base shared, int hdp) {
    SharedCarver<Base> c{shared};
    q = c.bf16s(kTile * operand_ld(hdp));
    dout = c.bf16s(kTile * operand_ld(hdp));
    k = c.bf16s(kTile * operand_ld(hdp));
    v = c.bf16s(kTile * operand_ld(hdp));
    dq = c.floats(kTile * accumulator_ld(hdp));
    scores = c.floats(kTile * kScoreLd);
    dprobs = c.floats(kTile * kScoreLd);
    dscores = c.bf16s(kTile * kProbLd);
    lse_rows = c.floats(kTile);
    d_rows = c.floats(kTile);
    bytes = c.used;
  }
};

// ---- block-wide tile moves ------------------------------------------------------------------------

// dst[r][i] = src[(row0 + r) * stride + i] for the kTile rows from row0 and the hdp padded columns, with
// zeros past T and past hd, so padded rows and columns add nothing to a product. `vector_loads` (hd a
// multiple of 8, src 16-byte aligned) moves 8 bf16 at a time.
__device__ void load_tile(bf16* dst, int ld, const bf16* src, std::int64_t stride, int row0, int T, int hd, int hdp,
                          bool vector_loads) {
  if (vector_loads) {
    const int chunks = hdp / 8;
    for (int e = threadIdx.x; e < kTile * chunks; e += kThreads) {
      const int r = e / chunks, i = (e - r * chunks) * 8, t = row0 + r;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (t < T && i < hd) v = *reinterpret_cast<const uint4*>(src + t * stride + i);
      *reinterpret_cast<uint4*>(dst + r * ld + i) = v;
    }
    return;
  }
  for (int e = threadIdx.x; e < kTile * hdp; e += kThreads) {
    const int r = e / hdp, i = e - r * hdp, t = row0 + r;
    dst[r * ld + i] = t < T && i < hd ? src[t * stride + i] : __float2bfloat16_rn(0.f);
  }
}

// rows[r] = src[row0 + r] for the kTile rows from row0, zeros past T.
__device__ void load_rows(float* rows, const float* src, int row0, int T) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) rows[r] = row0 + r < T ? src[row0 + r] : 0.f;
}

__device__ void zero(float* p, int n) {
  for (int e = threadIdx.x; e < n; e += kThreads) p[e] = 0.f;
}

// ---- warp-level tensor-core products --------------------------------------------------------------

// out[r][c] = sum_i a[r][i] b[c][i] for this warp's 16 rows r of `a` and the kTile rows c of `b` (bf16 tiles
// with row stride ld and hdp columns), into f32 `out` with row stride kScoreLd. b is read transposed, as a
// column-major fragment.
__device__ void warp_product_nt(float* out, const bf16* a, const bf16* b, int ld, int hdp) {
  FragAcc acc[kTile / kFrag];
#pragma unroll
  for (int n = 0; n < kTile / kFrag; ++n) wmma::fill_fragment(acc[n], 0.f);
  for (int i = 0; i < hdp; i += kFrag) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + i, ld);
#pragma unroll
    for (int n = 0; n < kTile / kFrag; ++n) {
      FragBTransposed fb;
      wmma::load_matrix_sync(fb, b + n * kFrag * ld + i, ld);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kTile / kFrag; ++n)
    wmma::store_matrix_sync(out + n * kFrag, acc[n], kScoreLd, wmma::mem_row_major);
}

// acc[r][i] += sum_s M[r][s] x[s][i] over the kTile rows s of x, for this warp's 16 rows r of the f32
// accumulator (row stride acc_ld, hdp columns). M is the bf16 tile m (row stride kProbLd) as it is
// (row_major: M[r][s] = m[r * kProbLd + s]) or transposed (col_major: M[r][s] = m[s * kProbLd + r]).
template <class Layout>
__device__ void warp_accumulate(float* acc, int acc_ld, const bf16* m, const bf16* x, int x_ld, int hdp) {
  constexpr bool kTransposed = std::is_same<Layout, wmma::col_major>::value;
  wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, Layout> fm[kTile / kFrag];
#pragma unroll
  for (int s = 0; s < kTile / kFrag; ++s)
    wmma::load_matrix_sync(fm[s], m + (kTransposed ? s * kFrag * kProbLd : s * kFrag), kProbLd);
  for (int i = 0; i < hdp; i += kFrag) {
    FragAcc fa;
    wmma::load_matrix_sync(fa, acc + i, acc_ld, wmma::mem_row_major);
#pragma unroll
    for (int s = 0; s < kTile / kFrag; ++s) {
      FragB fx;
      wmma::load_matrix_sync(fx, x + s * kFrag * x_ld + i, x_ld);
      wmma::mma_sync(fa, fm[s], fx, fa);
    }
    wmma::store_matrix_sync(acc + i, fa, acc_ld, wmma::mem_row_major);
  }
}

// For this warp's 16 query rows r (from row0) of query tile q0 against key tile k0, from the raw scores S
// and dp = dout v^T (f32, row stride kScoreLd):
//   p = exp(s * scale - lse_t),  ds = p (dp - D_t)   where key k <= query t < T, else 0,
// rounded to bf16 into probs (when given) and dscores, row stride kProbLd. A lane a column: no bank conflicts.
// __fmul_rn keeps s = raw * scale rounded on its own, as the forward's s is (never fused into the subtract).
__device__ void warp_probabilities(bf16* probs, bf16* dscores, const float* scores, const float* dprobs,
                                   const float* lse_rows, const float* d_rows, int row0, int q0, int k0, int T,
                                   float scale) {
  const int lane = threadIdx.x % 32;
  for (int r = row0; r < row0 + kWarpRows; ++r) {
    const int t = q0 + r;
    const float lse_t = lse_rows[r], d_t = d_rows[r];
    for (int c = lane; c < kTile; c += 32) {
      const bool seen = t < T && k0 + c <= t;
      const float p = seen ? expf(__fmul_rn(scores[r * kScoreLd + c], scale) - lse_t) : 0.f;
      const float ds = seen ? p * (dprobs[r * kScoreLd + c] - d_t) : 0.f;
      if (probs != nullptr) probs[r * kProbLd + c] = __float2bfloat16_rn(p);
      dscores[r * kProbLd + c] = __float2bfloat16_rn(ds);
    }
  }
}

// dst[(t0 + r) * stride + i] = bf16(factor * acc[r][i]) for this warp's 16 accumulator rows r (from row0) of
// the tile starting at sequence position t0, rows before T and the hd real columns only: the gradient is
// rounded once, after its sum.
__device__ void warp_store_rows(bf16* dst, std::int64_t stride, const float* acc, int acc_ld, int row0, int t0,
                                int T, int hd, float factor) {
  const int lane = threadIdx.x % 32;
  for (int r = row0; r < row0 + kWarpRows; ++r) {
    const int t = t0 + r;
    if (t >= T) break;
    bf16* row = dst + t * stride;
    for (int i = lane; i < hd; i += 32)
      row[i] = __float2bfloat16_rn(__fmul_rn(factor, acc[r * acc_ld + i]));
  }
}

// The head a block works on. Blocks go (tile, b * NH + h), the tile varying slowest, so tile order is launch
// order; each kernel counts its tiles from the end it wants first.
struct HeadOfBlock {
  int tile;                  // which of the head's tiles, 0 .. tiles-1
  int tiles;                 // the head's tiles of kTile rows, the last one partial
  int bh;                    // b * NH + h: the head's rows of lse and D start at bh * T
  std::int64_t qkv_offset;   // its q columns at position 0 of qkv and dqkv (k at + C, v at + 2C)
  std::int64_t out_offset;   // its columns at position 0 of out and dout
  std::int64_t qkv_stride;   // 3C: one position to the next in qkv
};
__device__ __forceinline__ HeadOfBlock head_of_block(int T, int C, int NH, int hd, int heads) {
  const int x = static_cast<int>(blockIdx.x);
  HeadOfBlock head;
  head.tile = x / heads;
  head.tiles = (T + kTile - 1) / kTile;
  head.bh = x - head.tile * heads;
  const std::int64_t b = head.bh / NH, h = head.bh % NH;
  head.qkv_stride = 3 * static_cast<std::int64_t>(C);
  head.qkv_offset = b * T * head.qkv_stride + h * hd;
  head.out_offset = b * T * C + h * hd;
  return head;
}

// ---- forward --------------------------------------------------------------------------------------

// heads = B * NH; scale = 1 / sqrt(hd).
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int C, int NH, int hd, int hdp, int heads,
                         float scale, bool vector_loads) {
  extern __shared__ __align__(128) unsigned char shared[];
  const ForwardShared sm(shared, hdp);
  const int ld = operand_ld(hdp), acc_ld = accumulator_ld(hdp);

  const HeadOfBlock head = head_of_block(T, C, NH, hd, heads);
  const int qt = head.tiles - 1 - head.tile;  // the longest rows first
  const int q0 = qt * kTile;
  const std::int64_t C3 = head.qkv_stride;
  const bf16* q_base = qkv + head.qkv_offset;  // k at + C, v at + 2C
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * kWarpRows;

  load_tile(sm.q, ld, q_base, C3, q0, T, hd, hdp, vector_loads);
  zero(sm.acc, kTile * acc_ld);

  // Lanes 2r and 2r+1 share row r of the warp, one the even columns and one the odd, and both hold its m, l.
  const int row = row0 + lane / 2, parity = lane % 2, t = q0 + row;
  float* s_row = sm.scores + row * kScoreLd;
  bf16* p_row = sm.probs + row * kProbLd;
  float* acc_row = sm.acc + row * acc_ld;
  float m = -INFINITY, l = 0.f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous key and value tiles are no longer read
    load_tile(sm.k, ld, q_base + C, C3, k0, T, hd, hdp, vector_loads);
    load_tile(sm.v, ld, q_base + 2 * C, C3, k0, T, hd, hdp, vector_loads);
    __syncthreads();

    warp_product_nt(sm.scores + row0 * kScoreLd, sm.q + row0 * ld, sm.k, ld, hdp);
    __syncwarp();

    // Online softmax of the row: scaled scores with the unseen keys at -inf, then the new max.
    float tile_max = -INFINITY;
    for (int c = parity; c < kTile; c += 2) {
      const int k = k0 + c;
      const float s = k <= t && k < T ? __fmul_rn(s_row[c], scale) : -INFINITY;  // rounded: never fused
      s_row[c] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    // While a row has seen no key, m' = -inf and exp(m - m') would be NaN: nothing to rescale, no p.
    const float rescale = kt == 0 || m_new == -INFINITY ? 0.f : expf(m - m_new);
    float tile_sum = 0.f;
    for (int c = parity; c < kTile; c += 2) {
      const float p = s_row[c] == -INFINITY ? 0.f : expf(s_row[c] - m_new);
      tile_sum += p;                          // l sums the unrounded p
      p_row[c] = __float2bfloat16_rn(p);      // the product takes it rounded
    }
    tile_sum += __shfl_xor_sync(kFullMask, tile_sum, 1);
    l = __fmul_rn(rescale, l) + tile_sum;  // c l + sum p, two roundings as written
    m = m_new;
    for (int i = parity; i < hdp; i += 2) acc_row[i] *= rescale;
    __syncwarp();

    warp_accumulate<wmma::row_major>(sm.acc + row0 * acc_ld, acc_ld, sm.probs + row0 * kProbLd, sm.v, ld, hdp);
  }
  __syncwarp();

  // out = bf16(sm.acc / l), lse = m + log(l): the warp writes a row at a time, l and m from the row's lane pair.
  bf16* out_base = out + head.out_offset;
  float* lse_bh = lse + static_cast<std::int64_t>(head.bh) * T;
  for (int r = 0; r < kWarpRows; ++r) {
    const float l_r = __shfl_sync(kFullMask, l, 2 * r), m_r = __shfl_sync(kFullMask, m, 2 * r);
    const int tq = q0 + row0 + r;
    if (tq >= T) break;
    bf16* dst = out_base + static_cast<std::int64_t>(tq) * C;
    const float* src = sm.acc + (row0 + r) * acc_ld;
    for (int i = lane; i < hd; i += 32) dst[i] = __float2bfloat16_rn(src[i] / l_r);
    if (lane == 0) lse_bh[tq] = m_r + logf(l_r);
  }
}

// ---- backward -------------------------------------------------------------------------------------

// D[(b * NH + h) * T + t] = dout_t . out_t over head h's hd columns, a warp a row.
__global__ void __launch_bounds__(kThreads)
    flash_backward_rowdot_kernel(float* D, const bf16* dout, const bf16* out, std::int64_t rows, int T, int C, int NH,
                                 int hd) {
  const int lane = threadIdx.x % 32;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kWarps;
  for (std::int64_t row = first; row < rows; row += step) {
    const std::int64_t bh = row / T, b = bh / NH;
    const std::int64_t t = row - bh * T;
    const std::int64_t offset = (b * T + t) * C + (bh - b * NH) * hd;
    float sum = 0.f;
    for (int i = lane; i < hd; i += 32) sum += to_f32(dout[offset + i]) * to_f32(out[offset + i]);
    sum = warp_sum(sum);
    if (lane == 0) D[row] = sum;
  }
}

// The key pass: dk and dv of key tile j over the query tiles i = j..NT-1. D is the rowdot kernel's.
__global__ void __launch_bounds__(kThreads)
    flash_backward_key_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D, int T,
                              int C, int NH, int hd, int hdp, int heads, float scale, bool vector_loads) {
  extern __shared__ __align__(128) unsigned char shared[];
  const KeyPassShared sm(shared, hdp);
  const int ld = operand_ld(hdp), acc_ld = accumulator_ld(hdp);

  const HeadOfBlock head = head_of_block(T, C, NH, hd, heads);
  const int kt = head.tile;  // the lowest key tile, with the most query tiles, first
  const int k0 = kt * kTile;
  const std::int64_t C3 = head.qkv_stride;
  const bf16* q_base = qkv + head.qkv_offset;  // k at + C, v at + 2C
  const bf16* g_base = dout + head.out_offset;
  const float* lse_bh = lse + static_cast<std::int64_t>(head.bh) * T;
  const float* d_bh = D + static_cast<std::int64_t>(head.bh) * T;
  const int row0 = threadIdx.x / 32 * kWarpRows;

  load_tile(sm.k, ld, q_base + C, C3, k0, T, hd, hdp, vector_loads);
  load_tile(sm.v, ld, q_base + 2 * C, C3, k0, T, hd, hdp, vector_loads);
  zero(sm.dk, kTile * acc_ld);
  zero(sm.dv, kTile * acc_ld);
  for (int qt = kt; qt < head.tiles; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // the previous query tile's q, dout, p and ds are no longer read
    load_tile(sm.q, ld, q_base, C3, q0, T, hd, hdp, vector_loads);
    load_tile(sm.dout, ld, g_base, C, q0, T, hd, hdp, vector_loads);
    load_rows(sm.lse_rows, lse_bh, q0, T);
    load_rows(sm.d_rows, d_bh, q0, T);
    __syncthreads();

    // Each warp: its 16 query rows of s, dp, then p and ds.
    warp_product_nt(sm.scores + row0 * kScoreLd, sm.q + row0 * ld, sm.k, ld, hdp);
    warp_product_nt(sm.dprobs + row0 * kScoreLd, sm.dout + row0 * ld, sm.v, ld, hdp);
    __syncwarp();
    warp_probabilities(sm.probs, sm.dscores, sm.scores, sm.dprobs, sm.lse_rows, sm.d_rows, row0, q0, k0, T, scale);
    __syncthreads();  // dv and dk sum over all 64 query rows

    // Each warp: its 16 key rows of dv += p^T dout and dk += ds^T q.
    warp_accumulate<wmma::col_major>(sm.dv + row0 * acc_ld, acc_ld, sm.probs + row0, sm.dout, ld, hdp);
    warp_accumulate<wmma::col_major>(sm.dk + row0 * acc_ld, acc_ld, sm.dscores + row0, sm.q, ld, hdp);
  }
  __syncwarp();

  bf16* d_base = dqkv + head.qkv_offset;
  warp_store_rows(d_base + C, C3, sm.dk, acc_ld, row0, k0, T, hd, scale);
  warp_store_rows(d_base + 2 * C, C3, sm.dv, acc_ld, row0, k0, T, hd, 1.f);
}

// The query pass: dq of query tile i over the key tiles j = 0..i.
__global__ void __launch_bounds__(kThreads)
    flash_backward_query_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
                                int T, int C, int NH, int hd, int hdp, int heads, float scale, bool vector_loads) {
  extern __shared__ __align__(128) unsigned char shared[];
  const QueryPassShared sm(shared, hdp);
  const int ld = operand_ld(hdp), acc_ld = accumulator_ld(hdp);

  const HeadOfBlock head = head_of_block(T, C, NH, hd, heads);
  const int qt = head.tiles - 1 - head.tile;  // the longest rows first
  const int q0 = qt * kTile;
  const std::int64_t C3 = head.qkv_stride;
  const bf16* q_base = qkv + head.qkv_offset;  // k at + C, v at + 2C
  const bf16* g_base = dout + head.out_offset;
  const int row0 = threadIdx.x / 32 * kWarpRows;

  load_tile(sm.q, ld, q_base, C3, q0, T, hd, hdp, vector_loads);
  load_tile(sm.dout, ld, g_base, C, q0, T, hd, hdp, vector_loads);
  load_rows(sm.lse_rows, lse + static_cast<std::int64_t>(head.bh) * T, q0, T);
  load_rows(sm.d_rows, D + static_cast<std::int64_t>(head.bh) * T, q0, T);
  zero(sm.dq, kTile * acc_ld);
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous key and value tiles are no longer read
    load_tile(sm.k, ld, q_base + C, C3, k0, T, hd, hdp, vector_loads);
    load_tile(sm.v, ld, q_base + 2 * C, C3, k0, T, hd, hdp, vector_loads);
    __syncthreads();

    // Each warp, its 16 query rows only: s, dp, ds, then dq += ds k.
    warp_product_nt(sm.scores + row0 * kScoreLd, sm.q + row0 * ld, sm.k, ld, hdp);
    warp_product_nt(sm.dprobs + row0 * kScoreLd, sm.dout + row0 * ld, sm.v, ld, hdp);
    __syncwarp();
    warp_probabilities(nullptr, sm.dscores, sm.scores, sm.dprobs, sm.lse_rows, sm.d_rows, row0, q0, k0, T, scale);
    __syncwarp();
    warp_accumulate<wmma::row_major>(sm.dq + row0 * acc_ld, acc_ld, sm.dscores + row0 * kProbLd, sm.k, ld, hdp);
  }
  __syncwarp();

  warp_store_rows(dqkv + head.qkv_offset, C3, sm.dq, acc_ld, row0, q0, T, hd, scale);
}

// ---- launchers ------------------------------------------------------------------------------------

// What every launch of one call shares, checked: the head size (real and padded), the tile count, the
// blocks of a per-tile kernel (tiles x heads, all in gridDim.x) and the score scale.
struct Geometry {
  int T, C, NH, hd, hdp, heads;
  unsigned blocks;
  float scale;
};

Geometry geometry(const char* op, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t n_head) {
  if (n_head < 1 || C % n_head != 0)
    fail(op, ": n_head must be positive and divide C; got C = ", C, ", n_head = ", n_head);
  const std::int64_t hd = C / n_head;
  if (hd < 1 || hd > kMaxHeadDim)
    fail(op, ": the head size C / n_head must be 1 to ", kMaxHeadDim, "; got ", C, " / ", n_head, " = ", hd);
  const std::int64_t tiles = (T + kTile - 1) / kTile;
  if (T > INT_MAX || 3 * C > INT_MAX || tiles * B * n_head > INT_MAX)
    fail(op, ": B = ", B, ", T = ", T, ", C = ", C, ", n_head = ", n_head, " is past the kernels' 32-bit grid");
  Geometry g;
  g.T = static_cast<int>(T);
  g.C = static_cast<int>(C);
  g.NH = static_cast<int>(n_head);
  g.hd = static_cast<int>(hd);
  g.hdp = (g.hd + kFrag - 1) / kFrag * kFrag;
  g.heads = static_cast<int>(B * n_head);
  g.blocks = static_cast<unsigned>(tiles * B * n_head);
  g.scale = 1.f / std::sqrt(static_cast<float>(hd));
  return g;
}

// What asks for the shared memory, for allow_shared_memory's error.
std::string head_size(const Geometry& g) { return "head size " + std::to_string(g.hd); }

// 8 bf16 at a time where every row of every head starts on 16 bytes.
bool vector_loads(int hd, const void* a, const void* b) {
  return hd % 8 == 0 && reinterpret_cast<std::uintptr_t>(a) % 16 == 0 && reinterpret_cast<std::uintptr_t>(b) % 16 == 0;
}

}  // namespace

void flash_attention_forward(CUstream_st* stream, void* out, float* lse, const void* qkv, std::int64_t B,
                             std::int64_t T, std::int64_t C, std::int64_t n_head) {
  if (B == 0 || T == 0) return;
  const Geometry g = geometry("flash_attention", B, T, C, n_head);
  const std::size_t bytes = ForwardShared(std::uintptr_t{0}, g.hdp).bytes;
  allow_shared_memory(flash_forward_kernel, bytes, "flash_attention", head_size(g));
  flash_forward_kernel<<<g.blocks, kThreads, bytes, stream>>>(static_cast<bf16*>(out), lse,
                                                              static_cast<const bf16*>(qkv), g.T, g.C, g.NH, g.hd,
                                                              g.hdp, g.heads, g.scale, vector_loads(g.hd, qkv, qkv));
  check_launch("flash_attention_forward");
}

void flash_attention_backward(CUstream_st* stream, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, std::int64_t B, std::int64_t T, std::int64_t C,
                              std::int64_t n_head) {
  if (B == 0 || T == 0) return;
  const Geometry g = geometry("flash_attention_backward", B, T, C, n_head);
  auto* dqkv_bf = static_cast<bf16*>(dqkv);
  const auto* dout_bf = static_cast<const bf16*>(dout);
  const auto* qkv_bf = static_cast<const bf16*>(qkv);
  const bool vectors = vector_loads(g.hd, qkv, dout);

  // 1. D = rowsum(dout * out): lives only until the two passes have read it, so the op's scratch.
  const std::int64_t rows = B * n_head * T;
  auto* D = static_cast<float*>(op_scratch(static_cast<std::int64_t>(sizeof(float)) * rows, "the rows' dout . out"));
  const std::int64_t row_blocks = (rows + kWarps - 1) / kWarps;
  flash_backward_rowdot_kernel<<<static_cast<unsigned>(row_blocks < 65536 ? row_blocks : 65536), kThreads, 0,
                                 stream>>>(D, dout_bf, static_cast<const bf16*>(out), rows, g.T, g.C, g.NH, g.hd);
  check_launch("flash_attention_backward (dout . out)");

  // 2. dk, dv by key tiles.
  const std::size_t key_bytes = KeyPassShared(std::uintptr_t{0}, g.hdp).bytes;
  allow_shared_memory(flash_backward_key_kernel, key_bytes, "flash_attention_backward", head_size(g));
  flash_backward_key_kernel<<<g.blocks, kThreads, key_bytes, stream>>>(
      dqkv_bf, dout_bf, qkv_bf, lse, D, g.T, g.C, g.NH, g.hd, g.hdp, g.heads, g.scale, vectors);
  check_launch("flash_attention_backward (dk, dv)");

  // 3. dq by query tiles.
  const std::size_t query_bytes = QueryPassShared(std::uintptr_t{0}, g.hdp).bytes;
  allow_shared_memory(flash_backward_query_kernel, query_bytes, "flash_attention_backward", head_size(g));
  flash_backward_query_kernel<<<g.blocks, kThreads, query_bytes, stream>>>(
      dqkv_bf, dout_bf, qkv_bf, lse, D, g.T, g.C, g.NH, g.hd, g.hdp, g.heads, g.scale, vectors);
  check_launch("flash_attention_backward (dq)");
}

}  // namespace fsdplab::cuda
