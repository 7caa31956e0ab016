// attention_kernels.cu — the kernels of attention_kernels.hpp.
//
// Every kernel works on tiles of kTile = 64 query or key rows of one head, staged in shared memory as f32 (a
// bf16 qkv is widened once per tile load), 256 threads a block. Two products do the work, both in registers:
// see [Note: register tiles]. Every sum runs in the host body's order (i ascending in a dot, keys or queries
// ascending in an accumulation), so results differ from the host only by fused multiply-adds and by the trees
// the softmax's row sums and the backward's row dots (adot) take. Diagonal tiles skip the masked pairs
// outright, so a non-finite value in a key the query cannot see does not leak in through 0 * inf.
//
// Forward: one block per (b, h, query tile), the longest rows first. Pass 1 writes the scaled scores
// q . k_j / sqrt(hd) of keys j <= t into the att rows (att is their scratch); pass 2 turns each row into its
// softmax (a warp a row: max, exp and sum, normalise, as the host, and zeros above the diagonal); pass 3
// accumulates out = att v over the key tiles.
//
// Backward: dq_t needs dscore_tj over the keys of row t, while dk_j and dv_j sum dscore_tj and att_tj over
// the queries of column j. Each is owned by one block (no atomics, so a rerun is bit-exact), but dscore_tj =
// att_tj * (datt_tj - adot_t) * scale needs adot_t = sum_j att_tj datt_tj, a full row's sum, in the blocks
// that own columns. So the backward is two kernels, one after the other on the stream:
//   dq:   one block per (b, h, query tile) computes its rows' adot (datt = dout v^T a key tile at a time,
//         summed against att) into the op's scratch, [B, NH, T] floats, then dq_t = sum_j dscore_tj k_j
//         (datt recomputed: storing it would take T floats per row);
//   dkdv: one block per (b, h, key tile) reads those adot and sums dk_j = sum_t dscore_tj q_t and
//         dv_j = sum_t att_tj dout_t over t >= j.
// Both grids have B * NH * T / 64 blocks and start with their longest tiles, so the short ones fill the tail.
//
// [Note: register tiles]
// Each of the 256 threads owns the 4 x 4 block of rows 4 ty .. 4 ty + 3 and columns 4 tx .. 4 tx + 3 of a
// product, (ty, tx) = (tid / 16, tid % 16), in registers. Each step of a product reads two float4s from shared
// memory, four rows' values and four columns', and does 16 multiply-adds with them: two a float read, eight
// a load instruction (a thread with a 2 x 2 block reads four floats for four multiply-adds, and leaves the
// FMA units waiting on shared memory). So each tile sits in shared memory in the layout that puts a thread's
// four rows or columns side by side:
//   dot_4x4, S[q][k] = sum_i At[i][q] Bt[i][k] (scores, datt): both operands transposed, [hd][kTileLd];
//   accumulate_4x4, Acc[r][i] += sum_s M[s][r] X[s][i] (att v, dscore k, dscore^T q, att^T dout): M [s][r]
//   as it is, X [s][i] with rows padded to a multiple of 4 columns (zeros); Acc stays in registers across all
//   the tiles, 4 rows by 4 columns per column group (columns 4 tx.. and, for hd > 64, 64 + 4 tx..).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "engine/cuda/attention_kernels.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/op_scratch.hpp"
#include "engine/cuda/shared_memory.cuh"

namespace fsdplab::cuda {
namespace {

constexpr int kThreads = 256;  // 16 x 16 threads, each a 4 x 4 block of a 64 x 64 tile

// Which (r, s) pairs of a diagonal tile exist: queries see keys at or before them.
enum Mask { kNoMask, kKeyNotAfterQuery /* rows are queries, s keys: s <= r */,
            kQueryNotBeforeKey /* rows are keys, s queries: s >= r */ };

// ---- register tiles -------------------------------------------------------------------------------

constexpr int kTile = 64;
constexpr int kTileLd = kTile + 4;  // row stride of the [.][64] tiles: float4-aligned rows
constexpr int kMaxHeadDim = 128;    // two column groups of 64

// Row stride of an X tile [64][hd]: hd rounded up to a float4.
__host__ __device__ inline int padded_cols(int hd) { return (hd + 3) / 4 * 4; }

// dst[i][r] = src[(r0 + r) * stride + i] for the kTile rows from r0, [hd][kTileLd]; zeros past T.
template <class F>
__device__ void load_transposed(float* dst, const F* src, std::int64_t stride, int r0, int T, int hd) {
  for (int e = threadIdx.x; e < kTile * hd; e += kThreads) {
    const int r = e / hd, i = e - r * hd, t = r0 + r;
    dst[i * kTileLd + r] = t < T ? to_f32(src[t * stride + i]) : 0.f;
  }
}

// dst[r][i] = src[(r0 + r) * stride + i], [kTile][padded_cols(hd)]; zeros past T and in the padding.
template <class F>
__device__ void load_padded(float* dst, const F* src, std::int64_t stride, int r0, int T, int hd) {
  const int ld = padded_cols(hd);
  for (int e = threadIdx.x; e < kTile * ld; e += kThreads) {
    const int r = e / ld, i = e - r * ld, t = r0 + r;
    dst[e] = t < T && i < hd ? to_f32(src[t * stride + i]) : 0.f;
  }
}

// The att tile of queries q0.. and keys k0.., as P[q][k] or transposed P[k][q], [kTile][kTileLd]; zeros past T.
__device__ void load_probabilities(float* P, const float* att_bh, int q0, int k0, int T, bool transposed) {
  for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
    const int q = e / kTile, k = e % kTile, tq = q0 + q, tk = k0 + k;
    const float p = tq < T && tk < T ? att_bh[static_cast<std::int64_t>(tq) * T + tk] : 0.f;
    P[transposed ? k * kTileLd + q : q * kTileLd + k] = p;
  }
}

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
// Element j of v (j a constant once the loops that call it are unrolled).
__device__ __forceinline__ float lane_of(const float4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// s[a][c] = sum_i At[i][4 ty + a] * Bt[i][4 tx + c], i ascending as the host's dot.
__device__ __forceinline__ void dot_4x4(const float* At, const float* Bt, int hd, float (&s)[4][4]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int c = 0; c < 4; ++c) s[a][c] = 0.f;
  for (int i = 0; i < hd; ++i) {
    const float4 x = load4(At + i * kTileLd + 4 * ty), y = load4(Bt + i * kTileLd + 4 * tx);
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[a][c] += lane_of(x, a) * lane_of(y, c);
  }
}

// A thread's accumulator: rows 4 ty + a, columns 64 g + 4 tx + j.
template <int kGroups>
struct RegisterTile {
  float v[4][kGroups][4] = {};
};

// acc[a][g][j] += sum_{s < ns} M[s][4 ty + a] X[s][64 g + 4 tx + j], s ascending, with M [s][kTileLd] and X
// [s][padded_cols(hd)]; on a diagonal tile, `mask` skips the pairs that do not exist.
template <int kGroups>
__device__ __forceinline__ void accumulate_4x4(RegisterTile<kGroups>& acc, const float* M, const float* X, int hd,
                                               int ns, Mask mask) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16, ld = padded_cols(hd);
  for (int s = 0; s < ns; ++s) {
    const float4 m = load4(M + s * kTileLd + 4 * ty);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int i0 = 64 * g + 4 * tx;
      if (i0 >= ld) continue;
      const float4 x = load4(X + s * ld + i0);
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const int r = 4 * ty + a;
        if (mask == kKeyNotAfterQuery ? s > r : mask == kQueryNotBeforeKey ? s < r : false) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) acc.v[a][g][j] += lane_of(m, a) * lane_of(x, j);
      }
    }
  }
}

// dst[(r0 + r) * stride + i] = acc for this thread's rows before T and columns before hd, rounded once.
template <int kGroups, class F>
__device__ void store_rows(F* dst, std::int64_t stride, const RegisterTile<kGroups>& acc, int r0, int T, int hd) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int t = r0 + 4 * ty + a;
    if (t >= T) continue;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = 64 * g + 4 * tx + j;
        if (i < hd) {
          store(dst + t * stride + i, acc.v[a][g][j]);
        }
      }
    }
  }
}

// ---- forward --------------------------------------------------------------------------------------

// Shared memory: Qt and Kt [hd][kTileLd] (q and k transposed), PT [kTile][kTileLd] (att tile, transposed) and
// Vs [kTile][padded_cols(hd)].
std::size_t forward_shared_bytes(int hd) {
  return sizeof(float) * (2 * hd * kTileLd + kTile * kTileLd + kTile * padded_cols(hd));
}

template <int kGroups, class F>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(F* out, float* att, const F* qkv, int T, int C, int NH, int hd, float scale) {
  extern __shared__ float4 smem4[];
  float* Qt = reinterpret_cast<float*>(smem4);
  float* Kt = Qt + hd * kTileLd;
  float* PT = Kt + hd * kTileLd;
  float* Vs = PT + kTile * kTileLd;

  const int NT = (T + kTile - 1) / kTile;
  const int qt = NT - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int q0 = qt * kTile;
  const int h = static_cast<int>(blockIdx.y);
  const std::int64_t b = blockIdx.z;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const F* q_base = qkv + b * T * C3 + h * hd;  // k at + C, v at + 2C
  float* att_bh = att + (b * NH + h) * T * static_cast<std::int64_t>(T);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  // 1. Scaled scores of the keys at or before each query, into the att rows.
  load_transposed(Qt, q_base, C3, q0, T, hd);
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous key tile is no longer read
    load_transposed(Kt, q_base + C, C3, k0, T, hd);
    __syncthreads();
    float s[4][4];
    dot_4x4(Qt, Kt, hd, s);
#pragma unroll
    for (int a = 0; a < 4; ++a) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int tq = q0 + 4 * ty + a, tk = k0 + 4 * tx + c;
        if (tq < T && tk <= tq) att_bh[static_cast<std::int64_t>(tq) * T + tk] = scale * s[a][c];
      }
    }
  }
  __syncthreads();  // every score of the tile's rows is written (and visible to the block)

  // 2. Softmax per row, a warp a row: max, then exp and its sum, then normalise, as the host.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < kTile; r += kThreads / 32) {
    const int tq = q0 + r;
    if (tq >= T) break;
    float* row = att_bh + static_cast<std::int64_t>(tq) * T;
    float max = -INFINITY;
    for (int j = lane; j <= tq; j += 32) max = fmaxf(max, row[j]);
    max = warp_max(max);
    float sum = 0.f;
    for (int j = lane; j <= tq; j += 32) {
      const float e = expf(row[j] - max);
      row[j] = e;
      sum += e;
    }
    const float inv = 1.f / warp_sum(sum);
    for (int j = lane; j <= tq; j += 32) row[j] *= inv;
    for (int j = tq + 1 + lane; j < T; j += 32) row[j] = 0.f;
  }

  // 3. out = att v, keys ascending.
  RegisterTile<kGroups> acc;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the att rows are final; the previous value tile is no longer read
    load_padded(Vs, q_base + 2 * C, C3, k0, T, hd);
    load_probabilities(PT, att_bh, q0, k0, T, /*transposed=*/true);
    __syncthreads();
    const int ns = T - k0 < kTile ? T - k0 : kTile;
    accumulate_4x4(acc, PT, Vs, hd, ns, kt == qt ? kKeyNotAfterQuery : kNoMask);
  }
  store_rows(out + b * T * C + h * hd, C, acc, q0, T, hd);
}

// ---- backward -------------------------------------------------------------------------------------

// The sum over the 16 lanes of a half warp (the threads of one ty), in a fixed butterfly.
__device__ __forceinline__ float half_warp_sum(float v) {
  for (int offset = 8; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// dscore[a][c] = att (datt - adot) * scale for query 4 ty + a and key 4 tx + c of tile q0 x k0, from datt in s,
// att in P [q][k], adot of the thread's rows; zero past the sequence and above the diagonal.
__device__ __forceinline__ void dscore_4x4(float (&ds)[4][4], const float (&s)[4][4], const float* P,
                                           const float (&adot)[4], float scale, int q0, int k0, int T) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int q = 4 * ty + a, tq = q0 + q;
    const float4 p = load4(P + q * kTileLd + 4 * tx);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int tk = k0 + 4 * tx + c;
      ds[a][c] = tq < T && tk <= tq ? lane_of(p, c) * (s[a][c] - adot[a]) * scale : 0.f;
    }
  }
}

// Shared memory of the query-tile kernel: P and D [64][kTileLd] (att; dscore^T), Gt and Vt [hd][kTileLd] (dout
// and v, transposed), Ks [64][padded_cols(hd)].
std::size_t backward_dq_shared_bytes(int hd) {
  return sizeof(float) * (2 * kTile * kTileLd + 2 * hd * kTileLd + kTile * padded_cols(hd));
}

// Shared memory of the key-tile kernel: P [64][kTileLd] (att), Gt [hd][kTileLd] and then, in the same memory, D
// [64][kTileLd] (dscore), Vt [hd][kTileLd], Qs and Gs [64][padded_cols(hd)]. See [Note: dscore where dout^T was].
std::size_t backward_dkdv_shared_bytes(int hd) {
  const int gt_or_d = (hd > kTile ? hd : kTile) * kTileLd;
  return sizeof(float) * (kTile * kTileLd + gt_or_d + hd * kTileLd + 2 * kTile * padded_cols(hd));
}

// One block per (b, h, query tile), the longest rows first:
//   A. adot_t = sum_j att_tj datt_tj over the tile's rows, datt = dout v^T a key tile at a time; kept in the
//      registers of the threads of each row, and written to the op's scratch for the key-tile kernel;
//   B. dq_t = sum_j dscore_tj k_j, keys ascending (datt recomputed: storing it would take T floats a row).
template <int kGroups, class F>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(F* dqkv, float* adot_all, const F* dout, const F* qkv, const float* att, int T,
                                 int C, int NH, int hd, float scale) {
  extern __shared__ float4 smem4[];
  float* P = reinterpret_cast<float*>(smem4);
  float* D = P + kTile * kTileLd;
  float* Gt = D + kTile * kTileLd;
  float* Vt = Gt + hd * kTileLd;
  float* Ks = Vt + hd * kTileLd;

  const int NT = (T + kTile - 1) / kTile;
  const int qt = NT - 1 - static_cast<int>(blockIdx.x);
  const int q0 = qt * kTile;
  const int h = static_cast<int>(blockIdx.y);
  const std::int64_t b = blockIdx.z;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const F* q_base = qkv + b * T * C3 + h * hd;  // k at + C, v at + 2C
  const float* att_bh = att + (b * NH + h) * T * static_cast<std::int64_t>(T);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  // A.
  load_transposed(Gt, dout + b * T * C + h * hd, C, q0, T, hd);
  float adot[4] = {0.f, 0.f, 0.f, 0.f};
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // Vt and P are no longer read
    load_transposed(Vt, q_base + 2 * C, C3, k0, T, hd);
    load_probabilities(P, att_bh, q0, k0, T, /*transposed=*/false);
    __syncthreads();
    float s[4][4];
    dot_4x4(Gt, Vt, hd, s);
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int q = 4 * ty + a, tq = q0 + q;
      const float4 p = load4(P + q * kTileLd + 4 * tx);
      float part = 0.f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int tk = k0 + 4 * tx + c;
        part += tq < T && tk <= tq ? lane_of(p, c) * s[a][c] : 0.f;
      }
      adot[a] += half_warp_sum(part);
    }
  }
  if (tx == 0) {
    for (int a = 0; a < 4; ++a) {
      const int tq = q0 + 4 * ty + a;
      if (tq < T) adot_all[(b * NH + h) * T + tq] = adot[a];
    }
  }

  // B.
  RegisterTile<kGroups> dq;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // Vt, Ks, P and D are no longer read
    load_transposed(Vt, q_base + 2 * C, C3, k0, T, hd);
    load_padded(Ks, q_base + C, C3, k0, T, hd);
    load_probabilities(P, att_bh, q0, k0, T, /*transposed=*/false);
    __syncthreads();
    float s[4][4], ds[4][4];
    dot_4x4(Gt, Vt, hd, s);
    dscore_4x4(ds, s, P, adot, scale, q0, k0, T);
    // D[k][q] = dscore^T: accumulate_4x4 takes the keys as its s.
#pragma unroll
    for (int c = 0; c < 4; ++c)
      *reinterpret_cast<float4*>(D + (4 * tx + c) * kTileLd + 4 * ty) =
          make_float4(ds[0][c], ds[1][c], ds[2][c], ds[3][c]);
    __syncthreads();
    const int ns = T - k0 < kTile ? T - k0 : kTile;
    accumulate_4x4(dq, D, Ks, hd, ns, kt == qt ? kKeyNotAfterQuery : kNoMask);
  }
  store_rows(dqkv + b * T * C3 + h * hd, C3, dq, q0, T, hd);
}

// One block per (b, h, key tile), the longest columns (the first keys) first, after the query-tile kernel has
// written every adot: dk_j = sum_t dscore_tj q_t and dv_j = sum_t att_tj dout_t, queries ascending.
//
// [Note: dscore where dout^T was]
// dout^T (Gt) is read only to make datt, and dscore (D) is written only once datt is in registers, so D takes
// Gt's memory, behind a barrier that lets every thread finish reading Gt first. Kept apart, the six tiles take
// 102,400 bytes at hd 64: past the 101,376 a block may opt in to on sm_86 and sm_89 GPUs (RTX 3090, RTX 4090,
// L40), so GPT-2's backward could not launch there; shared, 84,992. At hd 128 the 152,576 bytes fit an A100's
// 166,912, which 169,984 did not. The price is that barrier, once per query tile.
template <int kGroups, class F>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(F* dqkv, const float* adot_all, const F* dout, const F* qkv, const float* att,
                                   int T, int C, int NH, int hd, float scale) {
  extern __shared__ float4 smem4[];
  const int ld = padded_cols(hd);
  float* P = reinterpret_cast<float*>(smem4);
  float* Gt = P + kTile * kTileLd;
  float* D = Gt;  // once Gt is read: [Note: dscore where dout^T was]
  float* Vt = Gt + (hd > kTile ? hd : kTile) * kTileLd;
  float* Qs = Vt + hd * kTileLd;
  float* Gs = Qs + kTile * ld;

  const int NT = (T + kTile - 1) / kTile;
  const int kt = static_cast<int>(blockIdx.x);
  const int k0 = kt * kTile;
  const int h = static_cast<int>(blockIdx.y);
  const std::int64_t b = blockIdx.z;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const F* q_base = qkv + b * T * C3 + h * hd;  // k at + C, v at + 2C
  const F* g_base = dout + b * T * C + h * hd;
  F* d_base = dqkv + b * T * C3 + h * hd;
  const float* att_bh = att + (b * NH + h) * T * static_cast<std::int64_t>(T);
  const float* adot_bh = adot_all + (b * NH + h) * T;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  load_transposed(Vt, q_base + 2 * C, C3, k0, T, hd);
  RegisterTile<kGroups> dk, dv;
  for (int qt = kt; qt < NT; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // D (in Gt's memory), Qs, Gs and P are no longer read
    load_transposed(Gt, g_base, C, q0, T, hd);
    load_padded(Gs, g_base, C, q0, T, hd);
    load_padded(Qs, q_base, C3, q0, T, hd);
    load_probabilities(P, att_bh, q0, k0, T, /*transposed=*/false);
    __syncthreads();
    float s[4][4], ds[4][4], adot[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int tq = q0 + 4 * ty + a;
      adot[a] = tq < T ? adot_bh[tq] : 0.f;
    }
    dot_4x4(Gt, Vt, hd, s);
    dscore_4x4(ds, s, P, adot, scale, q0, k0, T);
    __syncthreads();  // Gt is no longer read: D takes its memory
#pragma unroll
    for (int a = 0; a < 4; ++a)
      *reinterpret_cast<float4*>(D + (4 * ty + a) * kTileLd + 4 * tx) =
          make_float4(ds[a][0], ds[a][1], ds[a][2], ds[a][3]);
    __syncthreads();
    const int ns = T - q0 < kTile ? T - q0 : kTile;
    const Mask mask = qt == kt ? kQueryNotBeforeKey : kNoMask;
    accumulate_4x4(dk, D, Qs, hd, ns, mask);
    accumulate_4x4(dv, P, Gs, hd, ns, mask);
  }
  store_rows(d_base + C, C3, dk, k0, T, hd);
  store_rows(d_base + 2 * C, C3, dv, k0, T, hd);
}

// ---- launchers ------------------------------------------------------------------------------------

// The head size, checked: the register tiles hold up to two column groups of 64.
int head_size(const char* op, std::int64_t C, std::int64_t n_head) {
  const std::int64_t hd = C / n_head;
  if (hd < 1 || hd > kMaxHeadDim)
    fail(op, ": the head size C / n_head must be 1 to ", kMaxHeadDim, " on the GPU; got ", C, " / ", n_head, " = ",
         hd);
  return static_cast<int>(hd);
}

// What asks for the shared memory, for allow_shared_memory's error.
std::string tile_sizes(int hd) { return "a head of " + std::to_string(hd) + " columns"; }

// Calls fn(std::integral_constant<int, G>{}, F{}) with the column groups G a thread needs for hd (1 up to 64, 2
// up to 128: no registers for columns the head does not have) and the storage type F of dtype.
template <class Fn>
void dispatch_tiles(DType dtype, const char* op, int hd, Fn&& fn) {
  dispatch_float(dtype, op, [&](auto zero) {
    if (hd <= 64)
      fn(std::integral_constant<int, 1>{}, zero);
    else
      fn(std::integral_constant<int, 2>{}, zero);
  });
}

}  // namespace

void attention_forward(CUstream_st* stream, DType dtype, void* out, float* att, const void* qkv, std::int64_t B,
                       std::int64_t T, std::int64_t C, std::int64_t n_head) {
  if (B == 0 || T == 0) return;
  const int hd = head_size("attention", C, n_head);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const std::size_t bytes = forward_shared_bytes(hd);
  const dim3 grid(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(n_head),
                  static_cast<unsigned>(B));
  dispatch_tiles(dtype, "attention", hd, [&](auto groups, auto zero) {
    constexpr int kGroups = decltype(groups)::value;
    using F = decltype(zero);
    allow_shared_memory(attention_forward_kernel<kGroups, F>, bytes, "attention", tile_sizes(hd));
    attention_forward_kernel<kGroups, F><<<grid, kThreads, bytes, stream>>>(
        static_cast<F*>(out), att, static_cast<const F*>(qkv), static_cast<int>(T), static_cast<int>(C),
        static_cast<int>(n_head), hd, scale);
  });
  check_launch("attention_forward");
}

void attention_backward(CUstream_st* stream, DType dtype, void* dqkv, const void* dout, const void* qkv,
                        const float* att, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t n_head) {
  if (B == 0 || T == 0) return;
  const int hd = head_size("attention_backward", C, n_head);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  auto* adot = static_cast<float*>(
      op_scratch(B * n_head * T * static_cast<std::int64_t>(sizeof(float)), "the rows' sums of att * datt"));
  const std::size_t dq_bytes = backward_dq_shared_bytes(hd), dkdv_bytes = backward_dkdv_shared_bytes(hd);
  const dim3 grid(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(n_head),
                  static_cast<unsigned>(B));
  dispatch_tiles(dtype, "attention_backward", hd, [&](auto groups, auto zero) {
    constexpr int kGroups = decltype(groups)::value;
    using F = decltype(zero);
    allow_shared_memory(attention_backward_dq_kernel<kGroups, F>, dq_bytes, "attention_backward", tile_sizes(hd));
    allow_shared_memory(attention_backward_dkdv_kernel<kGroups, F>, dkdv_bytes, "attention_backward",
                        tile_sizes(hd));
    attention_backward_dq_kernel<kGroups, F><<<grid, kThreads, dq_bytes, stream>>>(
        static_cast<F*>(dqkv), adot, static_cast<const F*>(dout), static_cast<const F*>(qkv), att,
        static_cast<int>(T), static_cast<int>(C), static_cast<int>(n_head), hd, scale);
    attention_backward_dkdv_kernel<kGroups, F><<<grid, kThreads, dkdv_bytes, stream>>>(
        static_cast<F*>(dqkv), adot, static_cast<const F*>(dout), static_cast<const F*>(qkv), att,
        static_cast<int>(T), static_cast<int>(C), static_cast<int>(n_head), hd, scale);
  });
  check_launch("attention_backward");
}

}  // namespace fsdplab::cuda
