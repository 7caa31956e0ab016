// attention_kernels.cu — the kernels of attention_kernels.hpp.
//
// Both kernels work on tiles of kTile query rows by kTile key rows of one head, staged in shared memory as
// f32 (a bf16 qkv is widened once per tile load), 256 threads a block. Two small products do the work:
//   nt_2x2:          S[q][k] = sum_i A[q][i] B[k][i]   (scores, datt), each thread a 2 x 2 block of S;
//   nn_accumulate:   Acc[r][i] += sum_s M[s][r] X[s][i] (att v, dscore k, dscore^T q, att^T dout), each
//                    warp 4 rows r (one float4 of M, broadcast) and its lanes the columns i.
// Every sum runs in the host body's order (i ascending in a dot, keys or queries ascending in an
// accumulation), so results differ from the host only by fused multiply-adds and by the tree the softmax's
// row sums take. Diagonal tiles skip the masked pairs outright, so a non-finite value in a key the query
// cannot see does not leak in through 0 * inf.
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
//         summed against att) into the op's scratch, [B, NH, T] floats, then dq_t += sum_j dscore_tj k_j
//         (datt recomputed: storing it would take T floats per row);
//   dkdv: one block per (b, h, key tile) reads those adot and sums dk_j += sum_t dscore_tj q_t and
//         dv_j += sum_t att_tj dout_t over t >= j.
// Both grids have B * NH * T / 32 blocks, enough to fill a GPU at batch 1, and start with their longest
// tiles, so the short ones fill the tail.
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/cuda/attention_kernels.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"
#include "engine/cuda/op_scratch.hpp"
#include "engine/cuda/shared_memory.cuh"

namespace fsdplab::cuda {
namespace {

constexpr int kTile = 32;    // query and key rows of a tile
constexpr int kThreads = 256;  // 8 warps: nt_2x2 is 16 x 16 threads, nn_accumulate 8 warps x 4 rows
constexpr int kTileLd = 36;   // row stride of the [32][32] att and dscore tiles: float4-aligned rows

// Which (r, s) pairs of a diagonal tile exist: queries see keys at or before them.
enum Mask { kNoMask, kKeyNotAfterQuery /* rows are queries, s keys: s <= r */,
            kQueryNotBeforeKey /* rows are keys, s queries: s >= r */ };

// Shared memory row stride of a [32][hd] tile: odd, so the 16 rows nt_2x2's lanes read fall in 16 banks.
__host__ __device__ inline int tile_ld(int hd) { return hd | 1; }

// dst[r][i] = src[(r0 + r) * stride + i] for the kTile rows from r0, zeros past T.
template <class F>
__device__ void load_rows(float* dst, int ld, const F* src, std::int64_t stride, int r0, int T, int hd) {
  for (int e = threadIdx.x; e < kTile * hd; e += kThreads) {
    const int r = e / hd, i = e - r * hd, t = r0 + r;
    dst[r * ld + i] = t < T ? to_f32(src[t * stride + i]) : 0.f;
  }
}

// The att tile of queries q0.. and keys k0.., as [q][k] or transposed [k][q]; zeros past T.
__device__ void load_att(float* dst, const float* att_bh, int q0, int k0, int T, bool transposed) {
  for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
    const int q = e / kTile, k = e % kTile, tq = q0 + q, tk = k0 + k;
    const float p = tq < T && tk < T ? att_bh[static_cast<std::int64_t>(tq) * T + tk] : 0.f;
    dst[transposed ? k * kTileLd + q : q * kTileLd + k] = p;
  }
}

// s[a][c] = sum_i A[ty + 16a][i] * B[tx + 16c][i] for this thread's (ty, tx) = (tid / 16, tid % 16),
// i ascending as the host's dot.
__device__ void nt_2x2(const float* A, const float* B, int ld, int hd, float (&s)[2][2]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const float* a0 = A + ty * ld;
  const float* a1 = a0 + 16 * ld;
  const float* b0 = B + tx * ld;
  const float* b1 = b0 + 16 * ld;
  float s00 = 0.f, s01 = 0.f, s10 = 0.f, s11 = 0.f;
  for (int i = 0; i < hd; ++i) {
    const float x0 = a0[i], x1 = a1[i], y0 = b0[i], y1 = b1[i];
    s00 += x0 * y0;
    s01 += x0 * y1;
    s10 += x1 * y0;
    s11 += x1 * y1;
  }
  s[0][0] = s00;
  s[0][1] = s01;
  s[1][0] = s10;
  s[1][1] = s11;
}

// dscore_tk = att_tk (datt_tk - adot_t) * scale for this thread's 2x2 of query tile q0 x key tile k0, where
// datt = dout v^T comes from the dout rows G and value rows V, att is P [32][kTileLd] and adot [32] holds the
// tile's rows; zero past the sequence and above the diagonal. D [32][kTileLd] gets it by query rows, or by key rows when `transposed`.
__device__ void store_dscore(float* D, const float* P, const float* G, const float* V, int ld, int hd,
                             const float* adot, float scale, int q0, int k0, int T, bool transposed) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float s[2][2];
  nt_2x2(G, V, ld, hd, s);
  for (int a = 0; a < 2; ++a) {
    for (int c = 0; c < 2; ++c) {
      const int q = ty + 16 * a, k = tx + 16 * c, tq = q0 + q, tk = k0 + k;
      const float dscore = tq < T && tk <= tq ? P[q * kTileLd + k] * (s[a][c] - adot[q]) * scale : 0.f;
      D[transposed ? k * kTileLd + q : q * kTileLd + k] = dscore;
    }
  }
}

// Acc[r][i] += sum_{s < ns} M[s][r] * X[s][i], s ascending; M is [32][kTileLd], X [32][ld], Acc [32][hd].
// Warp w owns rows 4w .. 4w+3, its lanes the columns i = lane, lane + 32, ...
__device__ void nn_accumulate(float* Acc, int hd, const float* M, const float* X, int ld, int ns, Mask mask) {
  const int r0 = 4 * (threadIdx.x / 32);
  for (int i = threadIdx.x % 32; i < hd; i += 32) {
    float a0 = Acc[r0 * hd + i], a1 = Acc[(r0 + 1) * hd + i], a2 = Acc[(r0 + 2) * hd + i],
          a3 = Acc[(r0 + 3) * hd + i];
    for (int s = 0; s < ns; ++s) {
      const float4 m = *reinterpret_cast<const float4*>(M + s * kTileLd + r0);
      const float x = X[s * ld + i];
      if (mask == kNoMask) {
        a0 += m.x * x;
        a1 += m.y * x;
        a2 += m.z * x;
        a3 += m.w * x;
      } else if (mask == kKeyNotAfterQuery) {
        if (s <= r0) a0 += m.x * x;
        if (s <= r0 + 1) a1 += m.y * x;
        if (s <= r0 + 2) a2 += m.z * x;
        if (s <= r0 + 3) a3 += m.w * x;
      } else {
        if (s >= r0) a0 += m.x * x;
        if (s >= r0 + 1) a1 += m.y * x;
        if (s >= r0 + 2) a2 += m.z * x;
        if (s >= r0 + 3) a3 += m.w * x;
      }
    }
    Acc[r0 * hd + i] = a0;
    Acc[(r0 + 1) * hd + i] = a1;
    Acc[(r0 + 2) * hd + i] = a2;
    Acc[(r0 + 3) * hd + i] = a3;
  }
}

__device__ void zero(float* p, int n) {
  for (int e = threadIdx.x; e < n; e += kThreads) p[e] = 0.f;
}

// dst[(r0 + r) * stride + i] (+)= Acc[r][i] for the rows before T.
template <class F>
__device__ void store_rows(F* dst, std::int64_t stride, const float* Acc, int r0, int T, int hd, bool add) {
  for (int e = threadIdx.x; e < kTile * hd; e += kThreads) {
    const int r = e / hd, i = e - r * hd, t = r0 + r;
    if (t >= T) continue;
    F* p = dst + t * stride + i;
    store(p, add ? to_f32(*p) + Acc[r * hd + i] : Acc[r * hd + i]);
  }
}

// ---- forward --------------------------------------------------------------------------------------

// Shared memory: PT [32][kTileLd] (att tile, transposed), Qs and KV [32][ld], Acc [32][hd].
std::size_t forward_shared_bytes(int hd) {
  return sizeof(float) * (kTile * kTileLd + 2 * kTile * tile_ld(hd) + kTile * hd);
}

template <class F>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(F* out, float* att, const F* qkv, int T, int C, int NH, int hd, float scale) {
  extern __shared__ float4 smem4[];
  const int ld = tile_ld(hd);
  float* PT = reinterpret_cast<float*>(smem4);
  float* Qs = PT + kTile * kTileLd;
  float* KV = Qs + kTile * ld;
  float* Acc = KV + kTile * ld;

  const int NT = (T + kTile - 1) / kTile;
  const int qt = NT - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int q0 = qt * kTile;
  const int h = static_cast<int>(blockIdx.y);
  const std::int64_t b = blockIdx.z;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const F* q_base = qkv + b * T * C3 + h * hd;  // k at + C, v at + 2C
  float* att_bh = att + (b * NH + h) * T * static_cast<std::int64_t>(T);

  // 1. Scaled scores of the keys at or before each query, into the att rows.
  load_rows(Qs, ld, q_base, C3, q0, T, hd);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous key tile is no longer read
    load_rows(KV, ld, q_base + C, C3, k0, T, hd);
    __syncthreads();
    float s[2][2];
    nt_2x2(Qs, KV, ld, hd, s);
    for (int a = 0; a < 2; ++a) {
      for (int c = 0; c < 2; ++c) {
        const int tq = q0 + ty + 16 * a, tk = k0 + tx + 16 * c;
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
  zero(Acc, kTile * hd);
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the att rows are final; the previous value tile is no longer read
    load_rows(KV, ld, q_base + 2 * C, C3, k0, T, hd);
    load_att(PT, att_bh, q0, k0, T, /*transposed=*/true);
    __syncthreads();
    const int ns = T - k0 < kTile ? T - k0 : kTile;
    nn_accumulate(Acc, hd, PT, KV, ld, ns, kt == qt ? kKeyNotAfterQuery : kNoMask);
  }
  __syncthreads();
  store_rows(out + b * T * C + h * hd, C, Acc, q0, T, hd, /*add=*/false);
}

// ---- backward -------------------------------------------------------------------------------------

// Shared memory of the query-tile kernel: P and D [32][kTileLd] (att tile; datt, then dscore), Gs (dout), Ks,
// Vs [32][ld], Acc [32][hd], adot [32].
std::size_t backward_dq_shared_bytes(int hd) {
  return sizeof(float) * (2 * kTile * kTileLd + 3 * kTile * tile_ld(hd) + kTile * hd + kTile);
}

// Shared memory of the key-tile kernel: P and D [32][kTileLd], Qs, Gs, Ks, Vs [32][ld], Acc0 and Acc1 [32][hd].
std::size_t backward_dkdv_shared_bytes(int hd) {
  return sizeof(float) * (2 * kTile * kTileLd + 4 * kTile * tile_ld(hd) + 2 * kTile * hd);
}

// One block per (b, h, query tile), the longest rows first:
//   A. adot_t = sum_j att_tj datt_tj over the tile's rows, datt = dout v^T a key tile at a time; into shared
//      memory and the op's scratch (the key-tile kernel reads every row's);
//   B. dq_t += sum_j dscore_tj k_j, keys ascending (datt recomputed: storing it would take T floats a row).
template <class F>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(F* dqkv, float* adot_all, const F* dout, const F* qkv, const float* att, int T,
                                 int C, int NH, int hd, float scale) {
  extern __shared__ float4 smem4[];
  const int ld = tile_ld(hd);
  float* P = reinterpret_cast<float*>(smem4);
  float* D = P + kTile * kTileLd;
  float* Gs = D + kTile * kTileLd;
  float* Ks = Gs + kTile * ld;
  float* Vs = Ks + kTile * ld;
  float* Acc = Vs + kTile * ld;
  float* adot = Acc + kTile * hd;

  const int NT = (T + kTile - 1) / kTile;
  const int qt = NT - 1 - static_cast<int>(blockIdx.x);
  const int q0 = qt * kTile;
  const int h = static_cast<int>(blockIdx.y);
  const std::int64_t b = blockIdx.z;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const F* q_base = qkv + b * T * C3 + h * hd;  // k at + C, v at + 2C
  const float* att_bh = att + (b * NH + h) * T * static_cast<std::int64_t>(T);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // A.
  load_rows(Gs, ld, dout + b * T * C + h * hd, C, q0, T, hd);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};  // rows 4 * warp + j, the same in every lane
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // Vs, P and D are no longer read
    load_rows(Vs, ld, q_base + 2 * C, C3, k0, T, hd);
    load_att(P, att_bh, q0, k0, T, /*transposed=*/false);
    __syncthreads();
    float s[2][2];
    nt_2x2(Gs, Vs, ld, hd, s);
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 2; ++c) D[(ty + 16 * a) * kTileLd + tx + 16 * c] = s[a][c];
    __syncthreads();
    for (int j = 0; j < 4; ++j) {
      const int r = 4 * warp + j, tq = q0 + r, tk = k0 + lane;
      acc[j] += warp_sum(tq < T && tk <= tq ? P[r * kTileLd + lane] * D[r * kTileLd + lane] : 0.f);
    }
  }
  if (lane == 0) {
    for (int j = 0; j < 4; ++j) {
      const int r = 4 * warp + j;
      adot[r] = acc[j];
      if (q0 + r < T) adot_all[(b * NH + h) * T + q0 + r] = acc[j];
    }
  }

  // B.
  zero(Acc, kTile * hd);
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // Ks, Vs, P and D are no longer read; adot is written
    load_rows(Ks, ld, q_base + C, C3, k0, T, hd);
    load_rows(Vs, ld, q_base + 2 * C, C3, k0, T, hd);
    load_att(P, att_bh, q0, k0, T, /*transposed=*/false);
    __syncthreads();
    // dscore^T: nn_accumulate takes the keys as its s.
    store_dscore(D, P, Gs, Vs, ld, hd, adot, scale, q0, k0, T, /*transposed=*/true);
    __syncthreads();
    const int ns = T - k0 < kTile ? T - k0 : kTile;
    nn_accumulate(Acc, hd, D, Ks, ld, ns, kt == qt ? kKeyNotAfterQuery : kNoMask);
  }
  __syncthreads();
  store_rows(dqkv + b * T * C3 + h * hd, C3, Acc, q0, T, hd, /*add=*/true);
}

// One block per (b, h, key tile), the longest columns (the first keys) first, after the query-tile kernel
// has written every adot: dk_j += sum_t dscore_tj q_t and dv_j += sum_t att_tj dout_t, queries ascending.
template <class F>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(F* dqkv, const float* adot_all, const F* dout, const F* qkv, const float* att,
                                   int T, int C, int NH, int hd, float scale) {
  extern __shared__ float4 smem4[];
  const int ld = tile_ld(hd);
  float* P = reinterpret_cast<float*>(smem4);
  float* D = P + kTile * kTileLd;
  float* Qs = D + kTile * kTileLd;
  float* Gs = Qs + kTile * ld;
  float* Ks = Gs + kTile * ld;
  float* Vs = Ks + kTile * ld;
  float* Acc0 = Vs + kTile * ld;
  float* Acc1 = Acc0 + kTile * hd;

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

  load_rows(Ks, ld, q_base + C, C3, k0, T, hd);
  load_rows(Vs, ld, q_base + 2 * C, C3, k0, T, hd);
  zero(Acc0, kTile * hd);
  zero(Acc1, kTile * hd);
  for (int qt = kt; qt < NT; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // Qs, Gs, P and D are no longer read
    load_rows(Qs, ld, q_base, C3, q0, T, hd);
    load_rows(Gs, ld, g_base, C, q0, T, hd);
    load_att(P, att_bh, q0, k0, T, /*transposed=*/false);
    __syncthreads();
    store_dscore(D, P, Gs, Vs, ld, hd, adot_bh + q0, scale, q0, k0, T, /*transposed=*/false);
    __syncthreads();
    const int ns = T - q0 < kTile ? T - q0 : kTile;
    const Mask mask = qt == kt ? kQueryNotBeforeKey : kNoMask;
    nn_accumulate(Acc0, hd, D, Qs, ld, ns, mask);
    nn_accumulate(Acc1, hd, P, Gs, ld, ns, mask);
  }
  __syncthreads();
  store_rows(d_base + C, C3, Acc0, k0, T, hd, /*add=*/true);
  store_rows(d_base + 2 * C, C3, Acc1, k0, T, hd, /*add=*/true);
}

// ---- launchers ------------------------------------------------------------------------------------

// What asks for the shared memory, for allow_shared_memory's error.
std::string tile_sizes(int hd) { return "tiles of " + std::to_string(kTile) + " rows of a head of " + std::to_string(hd); }

}  // namespace

void attention_forward(CUstream_st* stream, DType dtype, void* out, float* att, const void* qkv, std::int64_t B,
                       std::int64_t T, std::int64_t C, std::int64_t n_head) {
  if (B == 0 || T == 0) return;
  const int hd = static_cast<int>(C / n_head);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const std::size_t bytes = forward_shared_bytes(hd);
  const dim3 grid(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(n_head),
                  static_cast<unsigned>(B));
  dispatch_float(dtype, "attention", [&](auto zero) {
    using F = decltype(zero);
    allow_shared_memory(attention_forward_kernel<F>, bytes, "attention", tile_sizes(hd));
    attention_forward_kernel<F><<<grid, kThreads, bytes, stream>>>(
        static_cast<F*>(out), att, static_cast<const F*>(qkv), static_cast<int>(T), static_cast<int>(C),
        static_cast<int>(n_head), hd, scale);
  });
  check_launch("attention_forward");
}

void attention_backward(CUstream_st* stream, DType dtype, void* dqkv, const void* dout, const void* qkv,
                        const float* att, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t n_head) {
  if (B == 0 || T == 0) return;
  const int hd = static_cast<int>(C / n_head);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  auto* adot = static_cast<float*>(
      op_scratch(B * n_head * T * static_cast<std::int64_t>(sizeof(float)), "the rows' sums of att * datt"));
  const std::size_t dq_bytes = backward_dq_shared_bytes(hd), dkdv_bytes = backward_dkdv_shared_bytes(hd);
  const dim3 grid(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(n_head),
                  static_cast<unsigned>(B));
  dispatch_float(dtype, "attention_backward", [&](auto zero) {
    using F = decltype(zero);
    allow_shared_memory(attention_backward_dq_kernel<F>, dq_bytes, "attention_backward", tile_sizes(hd));
    allow_shared_memory(attention_backward_dkdv_kernel<F>, dkdv_bytes, "attention_backward", tile_sizes(hd));
    attention_backward_dq_kernel<F><<<grid, kThreads, dq_bytes, stream>>>(
        static_cast<F*>(dqkv), adot, static_cast<const F*>(dout), static_cast<const F*>(qkv), att,
        static_cast<int>(T), static_cast<int>(C), static_cast<int>(n_head), hd, scale);
    attention_backward_dkdv_kernel<F><<<grid, kThreads, dkdv_bytes, stream>>>(
        static_cast<F*>(dqkv), adot, static_cast<const F*>(dout), static_cast<const F*>(qkv), att,
        static_cast<int>(T), static_cast<int>(C), static_cast<int>(n_head), hd, scale);
  });
  check_launch("attention_backward");
}

}  // namespace fsdplab::cuda
