// flash_attention_kernels.cu — the kernels of flash_attention_kernels.hpp: causal attention as
// FlashAttention-2 computes it, following [Note: the flash attention arithmetic] in
// engine/tensor/flash_attention.hpp. Every kernel is a template on the element type E of the tensors: bf16,
// whose products run on tensor cores, or float, whose products are plain f32 fused multiply-adds.
//
// Tiles. A block works on tiles of kTile = 64 query rows by 64 key rows of one head, 128 threads (4 warps).
// Operand tiles (q, k, v, dout, and p, ds) are staged in shared memory as E, the head dimension zero-padded
// up to a multiple of Tiles<E>::kHeadPad (hdp): a zero column adds nothing to a dot product, and the padded
// output columns are never stored. Rows past T load as zeros too, so a partial last tile needs masking only in
// the softmax. Two products do the work, each by one warp for its 16 rows r:
//   warp_product_nt:       S[r][c]   = sum_i A[r][i] B[c][i]   (scores q k^T, dp = dout v^T);
//   WarpSums::accumulate:  Acc[r][i] += sum_s M[r][s] X[s][i]   (p v, ds k), or with M transposed (p^T dout,
//                          ds^T q: the transposed operand is read in place).
// bf16 runs them on tensor cores through nvcuda::wmma (bf16 m16n16k16 fragments, f32 accumulation; the
// transposed operand is a column-major fragment); f32 as register blocks: see [Note: the f32 products].
// Each warp keeps its rows of the sums (out, dk, dv, dq) in registers across the tiles (WarpSums: wmma
// accumulator fragments in bf16, register blocks in f32), so every kernel is compiled for heads of up to 64 or
// up to 128 columns (kMaxHdp), which fixes a warp's count of fragments; the forward rescales out's rows in
// place: [Note: the forward's out in registers].
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
// Backward, with no atomic sums, in three kernels (bf16) or two (f32):
//   1. D_t = dout_t . out_t, a warp a row, into the op's scratch (B * NH * T floats);
//   2. the key pass, one block per (key tile j, head, batch), the lowest j (most query tiles) first: k_j and
//      v_j stay in shared memory while the query tiles i = j..NT-1 stream by; p = exp(s - lse_t) masked,
//      dp = dout v^T, ds = p (dp - D_t); dv += bf16(p)^T dout and dk += bf16(ds)^T q; at the end
//      dk *= scale, and both are stored into dqkv's k and v columns. In f32 the pass makes dq too: each query
//      tile's part ds k, added to the tile's dq in key-tile order ([Note: dq in key-tile order]);
//   3. bf16 only, the query pass, one block per (query tile i, head, batch), the highest i first: for the key
//      tiles j = 0..i the same p, dp, ds; dq += bf16(ds) k; at the end dq *= scale, stored into the q columns.
// dq sums over keys and dk, dv over queries: one pass owns both only if blocks add into one of them, and
// atomic adds land in whatever order the blocks finish, so a rerun would differ in the last bits. The query
// pass recomputes s and dp, 7 tile products a tile pair instead of 5; the f32 pass orders its adds instead.
// Each element of dqkv is rounded to its type once, by one thread, after a fixed order of sums.
//
// Shared memory, in bytes, for a padded head size hdp (row strides padded by 16 bytes so that the rows a
// fragment or float4 load touches fall in different banks):
//   forward     q, k, v [64][hdp+pad] E, S [64][68] f32, p [64][64+pad] E (f32: in S), a value a row
//               bf16 hd = 64: 54,528    hd = 128: 79,104     f32 hd = 64: 69,888
//   key pass    k, v, q, dout E, S and dp f32 (p and ds over them), lse and D rows (f32: and the work item)
//               bf16 hd = 64: 72,192    hd = 128: 104,960    f32 hd = 64: 105,088
//   query pass  q, dout, k, v E, S and dp f32 (ds over dp), lse and D rows
//               bf16 hd = 64: 72,192    hd = 128: 104,960
// Past the default 48 KiB a launcher opts in (sm_90 allows 227 KiB a block). An H100 SM holds 228 KiB, less
// 1 KiB the hardware keeps for each block: at hd = 64 that is four bf16 forward blocks at a time and three of
// either backward pass, at hd = 128 two of each; in f32, three forward blocks and two of the key pass. See [Note:
// the backward's probabilities over their scores] for why the backward's p and ds take the place of S and dp.
//
// [Note: the forward's out in registers]
// The online softmax rescales out's row r by c_r = exp(m - m') at every key tile, so the lane that holds an
// element of out must know its row. An f32 RegisterBlock knows (rows 4 (lane / 8) + 0..3). A wmma accumulator
// fragment's element i of a lane sits at a place wmma does not promise, but every accumulator fragment of the
// same shape in a kernel keeps its elements alike, and a lane may read and write its elements (x[i],
// num_elements) for element-wise work. So each warp loads, once, a fragment from a [16][16] tile whose row r
// holds r (SumRows): its element i is the row of element i of every other accumulator fragment of the lane. The
// softmax's lane pair writes c_r into a value a row in shared memory, and each lane multiplies its elements by
// the c of their rows, as the shared-memory accumulator before it did, bit for bit; at the end it divides by
// l the same way, and k and v, read by then, stage out on its way to memory. The CPU-thread kernels
// (tests/kernel_emulation/cuda/mma.h) scramble the elements of a fragment, so a kernel that assumed a layout
// instead would fail there.
//
// [Note: the backward's probabilities over their scores]
// p is made of S and ds of dp, element by element, and neither product is read again once they are made, so
// the backward passes write p and ds into the bytes of the f32 tiles they come from: row r of the E tile in the
// bytes of row r of the f32 one, at row stride kInPlaceLd<E> (68 floats, or 136 bf16 in the same 272 bytes).
// In f32 a lane overwrites the very element it read; in bf16 the element c of a row lands in the bytes of the
// row's float c / 2, which another lane reads, so warp_probabilities reads a row whole before the warp
// writes it (a __syncwarp between). The forward keeps bf16's p in a tile of its own: there two lanes make a row's
// 64 p between them, and a tile of 9 KiB changes no count of the forward's blocks an SM.
//
// [Note: where the f32 kernels keep what]
// An f32 tile takes twice a bf16 tile's bytes, so the f32 kernels keep less in shared memory, to fit two blocks
// (8 warps) an SM, which SIMT products need to hide their shared-memory latency: p takes the place of S in the
// forward too, element by element (the thread that reads s_tk writes p_tk), as p and ds do in the backward in
// either type ([Note: the backward's probabilities over their scores]); dk, dv and dq stay in the registers of
// the lanes that sum them (WarpSums), 64 floats a lane in the key pass, and so does the forward's out. f32 stops
// at hd = 64 (kFlashMaxHeadDimF32): a lane would hold twice the sums at hd = 128.
//
// [Note: the f32 products]
// An f32 product is a warp's 16 x 64 outputs, 32 a lane in a 4 x 8 block: rows 4 (lane / 8) .. + 3, and in
// warp_product_nt columns lane % 8 + 8 j (j = 0..7), in accumulate_block columns 4 (lane % 8) + 32 g .. + 3
// (g = 0, 1: hdp <= 64). Each step reads float4s from shared memory (four of A's rows and eight of B's along
// the head dimension, or four of M and two of X) and does 128 multiply-adds with them, three to four a float
// read; the row strides (a multiple of 4 floats plus 4) put the eight rows a step reads in different banks.
// Sums run in the host body's order (i ascending in a dot, keys or queries ascending in an accumulation, and
// the tiles in the order of [Note: dq in key-tile order]), so the f32 kernels differ from
// flash_attention_host.cpp only by fused multiply-adds.
//
// [Note: dq in key-tile order]
// In f32 the key pass makes dq as well, and the query pass, which recomputed s and dp for it, is gone: the
// H200's f32 backward took 15.3 ms a step in its two passes (8.8 + 6.5) where PyTorch's one kernel took 7.5.
// Each block, for each query tile i it visits, makes its key tile j's part of dq_i, ds k_j (the fifth product),
// and adds it to dq_i's sum in dqkv's q columns, in a fixed order, j = 0, 1, .., i: a counter for each query tile
// (`turns`, zeroed before the launch) holds the key tile whose turn it is. Block j waits, one thread polling,
// until the counter says j, reads the sum through the L2 (__ldcg: another SM wrote it, and this SM's L1 may
// hold an older copy), adds its part (key tile 0 stores its part as the sum; the last, the diagonal j = i,
// stores scale * the sum, the element's one rounding to its type), fences its stores and passes the turn to
// j + 1. So the sums run in one order on every run: bit-exact reruns, with no query pass.
// Two choices keep the waits short and make them end:
// - Each block visits its query tiles from the last down to its diagonal. Blocks j - 1 and j reach tile i at
//   the same step of theirs, the (NT - i)-th, so block j waits about an add behind block j - 1 at each; up
//   from the diagonal instead, block j's first tile would wait for the j blocks before it (a model of the
//   grid, 264 blocks at a time and a step's time its count of products, put the pass 16 % slower that way; this
//   way it took 25 % less time than the two passes).
// - A block takes its (key tile, head) in launch order from a counter (claim_work_item), not from blockIdx: the
//   GPU does not promise to start blocks in blockIdx order, and a block waits only for key tiles before its
//   own, so every wait is for a block already running or done, never for one that could not start.
// The waits and the adds cost less than the products saved if the sums stay in the L2 (GPT-2's 12 heads x 4 x
// 1024 rows of 64 floats: 12.6 MB) and neighbouring blocks keep in step; a profile will say. bf16 keeps its two
// passes: its key pass holds dk and dv in 254 registers at hd 128, with no room for a part of dq, and a GPU has
// yet to measure this pass in f32.
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
constexpr int kThreads = 128;         // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kFrag = 16;             // the wmma tile edge: m = n = k = 16
constexpr int kWarpRows = kTile / kWarps;  // the rows of a tile one warp owns
constexpr int kScoreLd = kTile + 4;   // row stride of the f32 [64][64] score tiles (S, dp)
static_assert(kWarpRows == kFrag, "a warp owns one fragment's rows");

// What the element type decides: the head dimension's padding (whole wmma fragments for bf16, whole float4s
// for f32), the padding of a row (16 bytes, so that consecutive rows start in different banks), the largest
// head dimension the kernels' shared memory holds (kFlashMaxHeadDim, kFlashMaxHeadDimF32), and where the
// probabilities and the backward's sums live ([Note: where the f32 kernels keep what]).
template <class E>
struct Tiles;
// kOneBackwardPass: the key pass makes dq too ([Note: dq in key-tile order]); else the query pass does.
template <>
struct Tiles<bf16> {
  static constexpr int kHeadPad = kFrag, kRowPad = 8, kMaxHeadDim = 128;
  static constexpr bool kForwardProbsOverScores = false, kOneBackwardPass = false;
};
template <>
struct Tiles<float> {
  static constexpr int kHeadPad = 4, kRowPad = 4, kMaxHeadDim = 64;
  static constexpr bool kForwardProbsOverScores = true, kOneBackwardPass = true;
};

// Row strides of the [64][hdp] tiles, E operands and f32 accumulators, and of the [64][64] E operand tiles: the
// forward's p, and the backward's p and ds over the f32 products they are made of ([Note: the backward's
// probabilities over their scores]).
template <class E>
__host__ __device__ inline int operand_ld(int hdp) {
  return hdp + Tiles<E>::kRowPad;
}
__host__ __device__ inline int accumulator_ld(int hdp) { return hdp + 4; }
template <class E>
constexpr int kForwardProbLd = kTile + Tiles<E>::kRowPad;
template <class E>
constexpr int kInPlaceLd = kScoreLd * static_cast<int>(sizeof(float) / sizeof(E));
static_assert(kForwardProbLd<float> == kInPlaceLd<float>, "f32 probabilities take the scores' place, row for row");

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBTransposed = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragAcc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// ---- shared memory layout -------------------------------------------------------------------------

// Hands out consecutive regions of a block's dynamic shared memory, each 128-byte aligned (wmma wants 32), as the
// tiles of element type E the kernels use. A kernel carves from its dynamic shared-memory array: pointers derived
// from it without a round trip through an integer stay in the shared address space, so the compiler emits shared
// loads and stores (LDS, STS) rather than generic ones. A launcher carves from the integer 0 only to learn the
// size (`used`).
template <class E, class Base>  // Base: unsigned char* in a kernel, std::uintptr_t in a launcher
struct SharedCarver {
  Base base;
  int hdp;
  std::size_t used = 0;

  // [64][hdp] operands (q, k, v, dout).
  __host__ __device__ E* operands() { return take<E>(kTile * operand_ld<E>(hdp)); }
  // A [64][64] f32 product (S, dp).
  __host__ __device__ float* scores() { return take<float>(kTile * kScoreLd); }
  // The backward's two products S and dp, one after the other: once the last tile's p and ds are read, they
  // `stage` the sums on their way out as a [64][hdp] f32 tile (row stride accumulator_ld(hdp)).
  __host__ __device__ void products(float*& s, float*& dp, float*& stage) {
    static_assert(kTile * kScoreLd * sizeof(float) % 128 == 0, "dp follows S with no gap");
    static_assert(kTile * (Tiles<bf16>::kMaxHeadDim + 4) <= 2 * kTile * kScoreLd, "S and dp hold a staged sum");
    s = scores();
    dp = scores();
    stage = s;
  }
  // The backward's [64][64] E operand made of a product (p of S, ds of dp), over it (row stride kInPlaceLd<E>).
  __host__ __device__ E* made_of(float* product) { return reinterpret_cast<E*>(product); }
  // The forward's p (row stride kForwardProbLd<E>): over S in f32, a tile of its own in bf16.
  __host__ __device__ E* forward_probs(float* scores) {
    if constexpr (Tiles<E>::kForwardProbsOverScores)
      return made_of(scores);
    else
      return take<E>(kTile * kForwardProbLd<E>);
  }
  // 64 f32 values (a tile's lse or D).
  __host__ __device__ float* rows() { return take<float>(kTile); }
  // One int, for a value every thread of the block reads (the block's work item).
  __host__ __device__ int* word() { return take<int>(1); }

 private:
  template <class T>
  __host__ __device__ T* take(int count) {
    T* at = reinterpret_cast<T*>(base + used);
    used = (used + sizeof(T) * static_cast<std::size_t>(count) + 127) / 128 * 128;
    return at;
  }
};

// Each kernel's tiles in shared memory; `bytes`, what its launch asks for.
template <class E>
struct ForwardShared {
  E *q, *k, *v, *probs;
  float *scores, *row_values, *stage;
  std::size_t bytes;
  template <class Base>
  __host__ __device__ ForwardShared(Base shared, int hdp) {
    SharedCarver<E, Base> c{shared, hdp};
    q = c.operands();
    k = c.operands();
    v = c.operands();
    scores = c.scores();
    probs = c.forward_probs(scores);
    row_values = c.rows();  // a value for each row of the tile: the rescale c, then l
    bytes = c.used;
    // Once the last key tile is read, k and v (one after the other) stage out on its way to memory as a
    // [64][hdp] f32 tile (row stride accumulator_ld(hdp)).
    static_assert(kTile * sizeof(E) % 128 == 0, "an operand tile is whole 128-byte units: v follows k with no gap");
    static_assert(kTile * (Tiles<E>::kMaxHeadDim + 4) * sizeof(float) <=
                      2 * kTile * (Tiles<E>::kMaxHeadDim + Tiles<E>::kRowPad) * sizeof(E),
                  "k and v hold a staged out");
    stage = reinterpret_cast<float*>(k);
  }
};

template <class E>
struct KeyPassShared {
  E *k, *v, *q, *dout, *probs, *dscores;
  float *scores, *dprobs, *lse_rows, *d_rows, *stage;
  int* work_item = nullptr;  // one pass only (claim_work_item)
  std::size_t bytes;
  template <class Base>
  __host__ __device__ KeyPassShared(Base shared, int hdp) {
    SharedCarver<E, Base> c{shared, hdp};
    k = c.operands();
    v = c.operands();
    q = c.operands();
    dout = c.operands();
    c.products(scores, dprobs, stage);
    probs = c.made_of(scores);
    dscores = c.made_of(dprobs);
    lse_rows = c.rows();
    d_rows = c.rows();
    if constexpr (Tiles<E>::kOneBackwardPass) work_item = c.word();
    bytes = c.used;
  }
};

template <class E>
struct QueryPassShared {
  E *q, *dout, *k, *v, *dscores;
  float *scores, *dprobs, *lse_rows, *d_rows, *stage;
  std::size_t bytes;
  template <class Base>
  __host__ __device__ QueryPassShared(Base shared, int hdp) {
    SharedCarver<E, Base> c{shared, hdp};
    q = c.operands();
    dout = c.operands();
    k = c.operands();
    v = c.operands();
    c.products(scores, dprobs, stage);
    dscores = c.made_of(dprobs);
    lse_rows = c.rows();
    d_rows = c.rows();
    bytes = c.used;
  }
};

// ---- block-wide tile moves ------------------------------------------------------------------------

// Elements of E in a 16-byte vector load.
template <class E>
constexpr int kPerVector = 16 / static_cast<int>(sizeof(E));

// dst[r][i] = src[(row0 + r) * stride + i] for the kTile rows from row0 and the hdp padded columns, with
// zeros past T and past hd, so padded rows and columns add nothing to a product. `vector_loads` (hd a
// multiple of kPerVector<E>, src 16-byte aligned) moves 16 bytes at a time.
template <class E>
__device__ void load_tile(E* dst, int ld, const E* src, std::int64_t stride, int row0, int T, int hd, int hdp,
                          bool vector_loads) {
  if (vector_loads) {
    constexpr int kPer = kPerVector<E>;
    const int chunks = hdp / kPer;
    for (int e = threadIdx.x; e < kTile * chunks; e += kThreads) {
      const int r = e / chunks, i = (e - r * chunks) * kPer, t = row0 + r;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (t < T && i < hd) v = *reinterpret_cast<const uint4*>(src + t * stride + i);
      *reinterpret_cast<uint4*>(dst + r * ld + i) = v;
    }
    return;
  }
  for (int e = threadIdx.x; e < kTile * hdp; e += kThreads) {
    const int r = e / hdp, i = e - r * hdp, t = row0 + r;
    dst[r * ld + i] = t < T && i < hd ? src[t * stride + i] : from_f32<E>(0.f);
  }
}

// rows[r] = src[row0 + r] for the kTile rows from row0, zeros past T.
__device__ void load_rows(float* rows, const float* src, int row0, int T) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) rows[r] = row0 + r < T ? src[row0 + r] : 0.f;
}

// ---- warp-level products: bf16 on tensor cores -------------------------------------------------------

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

// ---- warp-level products: f32 in registers (see [Note: the f32 products]) -------------------------------

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// acc += x . y over the four lanes of a float4, in their order.
__device__ __forceinline__ float fma4(const float4& x, const float4& y, float acc) {
  acc = fmaf(x.x, y.x, acc);
  acc = fmaf(x.y, y.y, acc);
  acc = fmaf(x.z, y.z, acc);
  return fmaf(x.w, y.w, acc);
}

// out[r][c] = sum_i a[r][i] b[c][i] for this warp's 16 rows r of `a` and the kTile rows c of `b` (f32 tiles
// with row stride ld and hdp columns, a multiple of 4), into `out` with row stride kScoreLd.
__device__ void warp_product_nt(float* out, const float* a, const float* b, int ld, int hdp) {
  const int lane = threadIdx.x % 32, r0 = 4 * (lane / 8), c0 = lane % 8;
  float s[4][8] = {};
  for (int i = 0; i < hdp; i += 4) {
    float4 x[4], y[8];
#pragma unroll
    for (int r = 0; r < 4; ++r) x[r] = load4(a + (r0 + r) * ld + i);
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = load4(b + (c0 + 8 * j) * ld + i);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 8; ++j) s[r][j] = fma4(x[r], y[j], s[r][j]);
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int j = 0; j < 8; ++j) out[(r0 + r) * kScoreLd + c0 + 8 * j] = s[r][j];
}

// A lane's part of a warp's 16 rows of an f32 sum (hdp <= 64 columns), in registers: rows r0 + r, r0 = 4 (lane / 8),
// and columns c0 + 32 g .. + 3, c0 = 4 (lane % 8).
struct RegisterBlock {
  static constexpr int kGroups = Tiles<float>::kMaxHeadDim / 32;
  float4 v[4][kGroups];
  __device__ static int r0() { return 4 * (threadIdx.x % 32 / 8); }
  __device__ static int c0() { return 4 * (threadIdx.x % 8); }
  // Whether column group g holds columns of the head (hdp of them).
  __device__ static bool in_head(int g, int hdp) { return c0() + 32 * g < hdp; }

  __device__ void zero() {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int g = 0; g < kGroups; ++g) v[r][g] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
};

// block[r][i] += sum_s M[r][s] x[s][i] over the kTile rows s of x, s ascending, for this warp's 16 rows r. M is
// the f32 tile m (row stride kScoreLd, the one f32 p and ds have) as it is (row_major: M[r][s] = m[r * kLd + s])
// or transposed (col_major: M[r][s] = m[s * kLd + r]).
template <class Layout>
__device__ void accumulate_block(RegisterBlock& block, const float* m, const float* x, int x_ld, int hdp) {
  constexpr bool kTransposed = std::is_same<Layout, wmma::col_major>::value;
  constexpr int kLd = kScoreLd;
  const int r0 = RegisterBlock::r0(), c0 = RegisterBlock::c0();
  for (int s = 0; s < kTile; s += 4) {
    float mv[4][4];  // mv[r][u] = M[r0 + r][s + u]
    if constexpr (kTransposed) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float4 column = load4(m + (s + u) * kLd + r0);  // M[r0 .. r0 + 3][s + u]
        mv[0][u] = column.x, mv[1][u] = column.y, mv[2][u] = column.z, mv[3][u] = column.w;
      }
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float4 row = load4(m + (r0 + r) * kLd + s);  // M[r0 + r][s .. s + 3]
        mv[r][0] = row.x, mv[r][1] = row.y, mv[r][2] = row.z, mv[r][3] = row.w;
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int g = 0; g < RegisterBlock::kGroups; ++g) {
        if (!RegisterBlock::in_head(g, hdp)) continue;
        const float4 xv = load4(x + (s + u) * x_ld + c0 + 32 * g);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          float4& a = block.v[r][g];
          a.x = fmaf(mv[r][u], xv.x, a.x);
          a.y = fmaf(mv[r][u], xv.y, a.y);
          a.z = fmaf(mv[r][u], xv.z, a.z);
          a.w = fmaf(mv[r][u], xv.w, a.w);
        }
      }
  }
}

// ---- softmax and stores -------------------------------------------------------------------------------

// For this warp's 16 query rows r (from row0) of query tile q0 against key tile k0, from the raw scores S
// and dp = dout v^T (f32, row stride kScoreLd):
//   p = exp(s * scale - lse_t),  ds = p (dp - D_t)   where key k <= query t < T, else 0,
// stored as E into probs (when given) and dscores, over S and dp (row stride kInPlaceLd<E>: [Note: the
// backward's probabilities over their scores]). A lane a column: no bank conflicts.
// __fmul_rn keeps s = raw * scale rounded on its own, as the forward's s is (never fused into the subtract).
template <class E>
__device__ void warp_probabilities(E* probs, E* dscores, const float* scores, const float* dprobs,
                                   const float* lse_rows, const float* d_rows, int row0, int q0, int k0, int T,
                                   float scale) {
  constexpr int kLd = kInPlaceLd<E>, kPerLane = kTile / 32;
  const int lane = threadIdx.x % 32;
  for (int r = row0; r < row0 + kWarpRows; ++r) {
    const int t = q0 + r;
    const float lse_t = lse_rows[r], d_t = d_rows[r];
    float p[kPerLane], ds[kPerLane];
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const int c = lane + 32 * u;
      const bool seen = t < T && k0 + c <= t;
      p[u] = seen ? expf(__fmul_rn(scores[r * kScoreLd + c], scale) - lse_t) : 0.f;
      ds[u] = seen ? p[u] * (dprobs[r * kScoreLd + c] - d_t) : 0.f;
    }
    __syncwarp();  // the row is read whole before p and ds overwrite its bytes
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const int c = lane + 32 * u;
      if (probs != nullptr) probs[r * kLd + c] = from_f32<E>(p[u]);
      dscores[r * kLd + c] = from_f32<E>(ds[u]);
    }
  }
}

// dst[(t0 + r) * stride + i] = E(factor * acc[r][i]) for this warp's 16 accumulator rows r (from row0) of
// the tile starting at sequence position t0, rows before T and the hd real columns only: the gradient is
// rounded once, after its sum.
template <class E>
__device__ void warp_store_rows(E* dst, std::int64_t stride, const float* acc, int acc_ld, int row0, int t0,
                                int T, int hd, float factor) {
  const int lane = threadIdx.x % 32;
  for (int r = row0; r < row0 + kWarpRows; ++r) {
    const int t = t0 + r;
    if (t >= T) break;
    E* row = dst + t * stride;
    for (int i = lane; i < hd; i += 32) row[i] = from_f32<E>(__fmul_rn(factor, acc[r * acc_ld + i]));
  }
}

// ---- the sums a warp keeps in registers ---------------------------------------------------------------

// A warp's 16 rows of a sum over the tiles that stream by (the forward's out, the backward's dk, dv or dq),
// stored once at the end, in the registers of the warp's lanes across the tiles: bf16's as wmma accumulator
// fragments, one for each 16 columns of a head of up to kMaxHdp columns; f32's as a RegisterBlock ([Note: where
// the f32 kernels keep what]). The forward's online softmax rescales its rows (update_rows), which needs to know
// which row each of a lane's elements is in: SumRows.
template <class E, int kMaxHdp>
class WarpSums;

// Which of the warp's 16 rows each element of a lane's sums is in. wmma does not say where a fragment keeps
// which element, but every accumulator fragment of a kernel keeps them alike, so the warp loads the answer once
// as a fragment, from a [16][16] tile of the row numbers (see [Note: the forward's out in registers]).
// `scratch`: 16 rows of 16 floats or more (row stride ld) that only this warp touches meanwhile.
template <class E>
struct SumRows;
template <>
struct SumRows<bf16> {
  FragAcc row;
  __device__ SumRows(float* scratch, int ld) {
    for (int e = threadIdx.x % 32; e < kFrag * kFrag; e += 32) scratch[e / kFrag * ld + e % kFrag] = e / kFrag;
    __syncwarp();
    wmma::load_matrix_sync(row, scratch, ld, wmma::mem_row_major);
    __syncwarp();  // read before the scratch is written again
  }
};
// An f32 RegisterBlock knows its rows.
template <>
struct SumRows<float> {
  __device__ SumRows(float*, int) {}
};

template <int kMaxHdp>
class WarpSums<bf16, kMaxHdp> {
 public:
  __device__ explicit WarpSums(int row0) : row0_(row0) {
#pragma unroll
    for (int n = 0; n < kFrags; ++n) wmma::fill_fragment(sums_[n], 0.f);
  }
  // += M x over x's kTile rows s, s ascending, for x's hdp columns. M is the warp's 16 rows of the bf16 tile m
  // (row stride kMLd) as it is (row_major: M[r][s] = m[r * kMLd + s]) or transposed (col_major:
  // M[r][s] = m[s * kMLd + r]), loaded once as fragments.
  template <class Layout, int kMLd>
  __device__ void accumulate(const bf16* m, const bf16* x, int x_ld, int hdp) {
    constexpr bool kTransposed = std::is_same<Layout, wmma::col_major>::value;
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, Layout> fm[kTile / kFrag];
#pragma unroll
    for (int f = 0; f < kTile / kFrag; ++f)
      wmma::load_matrix_sync(fm[f], m + (kTransposed ? f * kFrag * kMLd : f * kFrag), kMLd);
#pragma unroll
    for (int n = 0; n < kFrags; ++n) {
      if (n * kFrag >= hdp) continue;
#pragma unroll
      for (int f = 0; f < kTile / kFrag; ++f) {
        FragB fx;
        wmma::load_matrix_sync(fx, x + f * kFrag * x_ld + n * kFrag, x_ld);
        wmma::mma_sync(sums_[n], fm[f], fx, sums_[n]);
      }
    }
  }
  // x = op(x, r) for each element x of the warp's row r (0..15).
  template <class Op>
  __device__ void update_rows(const SumRows<bf16>& rows, Op op) {
#pragma unroll
    for (int n = 0; n < kFrags; ++n)
#pragma unroll
      for (int i = 0; i < FragAcc::num_elements; ++i)
        sums_[n].x[i] = op(sums_[n].x[i], static_cast<int>(rows.row.x[i]));
  }
  // dst row t0 + r = bf16(factor * sum), rows before T and the hd real columns only, through the warp's rows of
  // `stage`, a [kTile][stage_ld] f32 tile in shared memory that no other warp touches meanwhile.
  __device__ void store(bf16* dst, std::int64_t stride, int t0, int T, int hd, float factor, float* stage,
                        int stage_ld) const {
    float* rows = stage + row0_ * stage_ld;
#pragma unroll
    for (int n = 0; n < kFrags; ++n)
      if (n * kFrag < hd) wmma::store_matrix_sync(rows + n * kFrag, sums_[n], stage_ld, wmma::mem_row_major);
    __syncwarp();
    warp_store_rows(dst, stride, stage, stage_ld, row0_, t0, T, hd, factor);
    __syncwarp();  // read before the next sum is staged
  }

 private:
  static constexpr int kFrags = kMaxHdp / kFrag;
  FragAcc sums_[kFrags];
  int row0_;
};

template <int kMaxHdp>
class WarpSums<float, kMaxHdp> {
  static_assert(kMaxHdp == Tiles<float>::kMaxHeadDim, "an f32 RegisterBlock holds the widest f32 head");

 public:
  __device__ explicit WarpSums(int row0) : row0_(row0) { block_.zero(); }
  template <class Layout, int kMLd>
  __device__ void accumulate(const float* m, const float* x, int x_ld, int hdp) {
    static_assert(kMLd == kScoreLd, "an f32 M has the scores' rows");
    accumulate_block<Layout>(block_, m, x, x_ld, hdp);
  }
  template <class Op>
  __device__ void update_rows(const SumRows<float>&, Op op) {
    const int r0 = RegisterBlock::r0();
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int g = 0; g < RegisterBlock::kGroups; ++g) {
        float4& a = block_.v[r][g];
        a.x = op(a.x, r0 + r), a.y = op(a.y, r0 + r), a.z = op(a.z, r0 + r), a.w = op(a.w, r0 + r);
      }
  }
  // The warp's rows of `stage`, a [kTile][stage_ld] f32 tile (stage_ld a multiple of 4) in shared memory that no
  // other warp touches meanwhile, = the sums, for the warp to read in another order.
  __device__ void stage(float* stage, int stage_ld, int hdp) const {
    const int r0 = RegisterBlock::r0(), c0 = RegisterBlock::c0();
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int g = 0; g < RegisterBlock::kGroups; ++g)
        if (RegisterBlock::in_head(g, hdp))
          *reinterpret_cast<float4*>(stage + (row0_ + r0 + r) * stage_ld + c0 + 32 * g) = block_.v[r][g];
  }
  // Straight from the registers: the lanes' float4 columns need no staging.
  __device__ void store(float* dst, std::int64_t stride, int t0, int T, int hd, float factor, float*, int) const {
    const int r0 = RegisterBlock::r0(), c0 = RegisterBlock::c0();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int t = t0 + row0_ + r0 + r;
      if (t >= T) break;
      float* row = dst + t * stride;
#pragma unroll
      for (int g = 0; g < RegisterBlock::kGroups; ++g) {
        const float4& a = block_.v[r][g];
        const float lanes[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int i = c0 + 32 * g + j;
          if (i < hd) row[i] = __fmul_rn(factor, lanes[j]);
        }
      }
    }
  }

 private:
  RegisterBlock block_;
  int row0_;
};

// The head a block works on. Work items go (tile, b * NH + h), the tile varying slowest, so tile order is launch
// order; each kernel counts its tiles from the end it wants first. A block's item is its blockIdx.x, or, in the
// one-pass backward, the one it claims (claim_work_item).
struct HeadOfBlock {
  int tile;                  // which of the head's tiles, 0 .. tiles-1
  int tiles;                 // the head's tiles of kTile rows, the last one partial
  int bh;                    // b * NH + h: the head's rows of lse and D start at bh * T
  std::int64_t qkv_offset;   // its q columns at position 0 of qkv and dqkv (k at + C, v at + 2C)
  std::int64_t out_offset;   // its columns at position 0 of out and dout
  std::int64_t qkv_stride;   // 3C: one position to the next in qkv
};
__device__ __forceinline__ HeadOfBlock head_of_item(int x, int T, int C, int NH, int hd, int heads) {
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

// The blocks a kernel must fit on an SM by its registers (__launch_bounds__), where its shared memory lets in
// more than two (the table at the top): 65,536 / (128 x blocks) registers a thread at most, 128 for four and 170
// for three. Elsewhere 0, no bound: any count of registers (up to 255) lets in two blocks of 128 threads. The
// f32 forward fits three unbounded (128 registers with nvcc 13.0), and asking for three made it take 168.
template <class E, int kMaxHdp>
constexpr int kForwardMinBlocksAnSm = std::is_same<E, bf16>::value && kMaxHdp == 64 ? 4 : 0;

// heads = B * NH; scale = 1 / sqrt(hd). For heads of hdp <= kMaxHdp columns.
template <class E, int kMaxHdp>
__global__ void __launch_bounds__(kThreads, kForwardMinBlocksAnSm<E, kMaxHdp>)
    flash_forward_kernel(E* out, float* lse, const E* qkv, int T, int C, int NH, int hd, int hdp, int heads,
                         float scale, bool vector_loads) {
  extern __shared__ __align__(128) unsigned char shared[];
  const ForwardShared<E> sm(shared, hdp);
  const int ld = operand_ld<E>(hdp);

  const HeadOfBlock head = head_of_item(static_cast<int>(blockIdx.x), T, C, NH, hd, heads);
  const int qt = head.tiles - 1 - head.tile;  // the longest rows first
  const int q0 = qt * kTile;
  const std::int64_t C3 = head.qkv_stride;
  const E* q_base = qkv + head.qkv_offset;  // k at + C, v at + 2C
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * kWarpRows;

  load_tile(sm.q, ld, q_base, C3, q0, T, hd, hdp, vector_loads);
  const SumRows<E> sum_rows(sm.scores + row0 * kScoreLd, kScoreLd);  // S is not written yet
  WarpSums<E, kMaxHdp> acc(row0);
  const float* warp_values = sm.row_values + row0;

  // Lanes 2r and 2r+1 share row r of the warp, one the even columns and one the odd, and both hold its m, l.
  const int row = row0 + lane / 2, parity = lane % 2, t = q0 + row;
  float* s_row = sm.scores + row * kScoreLd;
  E* p_row = sm.probs + row * kForwardProbLd<E>;
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
      p_row[c] = from_f32<E>(p);              // the product takes it as stored (rounded, in bf16)
    }
    tile_sum += __shfl_xor_sync(kFullMask, tile_sum, 1);
    l = __fmul_rn(rescale, l) + tile_sum;  // c l + sum p, two roundings as written
    m = m_new;
    if (parity == 0) sm.row_values[row] = rescale;
    __syncwarp();

    // out = c out + p v, row by row.
    acc.update_rows(sum_rows, [&](float x, int r) { return x * warp_values[r]; });
    acc.template accumulate<wmma::row_major, kForwardProbLd<E>>(sm.probs + row0 * kForwardProbLd<E>, sm.v, ld, hdp);
  }
  __syncwarp();  // every lane has read the last rescales

  // out = E(out / l), lse = m + log(l), l and m from the row's lane pair.
  if (parity == 0) sm.row_values[row] = l;
  if (parity == 0 && t < T) lse[static_cast<std::int64_t>(head.bh) * T + t] = m + logf(l);
  __syncwarp();
  acc.update_rows(sum_rows, [&](float x, int r) { return x / warp_values[r]; });
  __syncthreads();  // every warp has read the last k and v: they stage out
  acc.store(out + head.out_offset, C, q0, T, hd, 1.f, sm.stage, accumulator_ld(hdp));
}

// ---- backward -------------------------------------------------------------------------------------

// As kForwardMinBlocksAnSm, for the two passes: three of bf16's at hd <= 64.
template <class E, int kMaxHdp>
constexpr int kBackwardMinBlocksAnSm = std::is_same<E, bf16>::value && kMaxHdp == 64 ? 3 : 0;

// D[(b * NH + h) * T + t] = dout_t . out_t over head h's hd columns, a warp a row.
template <class E>
__global__ void __launch_bounds__(kThreads)
    flash_backward_rowdot_kernel(float* D, const E* dout, const E* out, std::int64_t rows, int T, int C, int NH,
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

// What the one-pass backward orders its dq adds with ([Note: dq in key-tile order]), zeroed before the launch:
// the next work item to hand out, and a turn for each query tile of each head (b * NH + h) * NT + i, the key tile
// whose part of dq_i goes in next. Null in the two passes.
struct DqTurns {
  unsigned* next_item = nullptr;
  unsigned* turns = nullptr;
};

// The block's work item: the next in launch order, whichever block asks first, so every item before it is held by
// a block that is running or done, whatever order the GPU starts blocks in.
__device__ int claim_work_item(int* shared_item, unsigned* next_item) {
  if (threadIdx.x == 0) *shared_item = static_cast<int>(atomicAdd(next_item, 1u));
  __syncthreads();
  return *shared_item;
}

// Adds key tile kt's part of dq_qt (`part`, the warp's 16 query rows from row0) to the tile's sum in `dq` (f32, row
// stride `stride`: dqkv's q columns), once key tile kt - 1 has added its part: key tile 0 stores its part, the
// diagonal kt = qt stores scale * the sum. `stage` overlays the tile's p and ds. See [Note: dq in key-tile order].
template <int kMaxHdp>
__device__ void add_dq_in_key_order(const WarpSums<float, kMaxHdp>& part, unsigned* turn, float* dq,
                                    std::int64_t stride, int kt, int qt, int q0, int row0, int T, int hd, int hdp,
                                    float scale, float* stage, int stage_ld) {
  if (threadIdx.x == 0) {
    while (atomicAdd(turn, 0u) != static_cast<unsigned>(kt)) __nanosleep(64);
    __threadfence();  // the sum is read after the turn that says it is complete
  }
  __syncthreads();  // the turn is kt's; and every warp has read the tile's p and ds, which stage overlays
  part.stage(stage, stage_ld, hdp);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int r = row0; r < row0 + kWarpRows; ++r) {
    const int t = q0 + r;
    if (t >= T) break;
    float* row = dq + t * stride;
    for (int i = lane; i < hd; i += 32) {
      const float mine = stage[r * stage_ld + i];
      const float sum = kt == 0 ? mine : __ldcg(row + i) + mine;
      if (kt == qt)
        row[i] = __fmul_rn(scale, sum);
      else
        __stcg(row + i, sum);
    }
  }
  __threadfence();  // every thread's sums reach the L2 before the turn passes
  __syncthreads();
  if (threadIdx.x == 0) atomicExch(turn, static_cast<unsigned>(kt + 1));
}

// The key pass: dk and dv of key tile j over the query tiles i = j..NT-1 (and in f32 their parts of dq), for heads
// of hdp <= kMaxHdp columns. D is the rowdot kernel's.
template <class E, int kMaxHdp>
__global__ void __launch_bounds__(kThreads, kBackwardMinBlocksAnSm<E, kMaxHdp>)
    flash_backward_key_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* D,
                              DqTurns dq_turns, int T, int C, int NH, int hd, int hdp, int heads, float scale,
                              bool vector_loads) {
  extern __shared__ __align__(128) unsigned char shared[];
  const KeyPassShared<E> sm(shared, hdp);
  const int ld = operand_ld<E>(hdp), acc_ld = accumulator_ld(hdp);
  constexpr bool kOnePass = Tiles<E>::kOneBackwardPass;

  int item = static_cast<int>(blockIdx.x);
  if constexpr (kOnePass) item = claim_work_item(sm.work_item, dq_turns.next_item);
  const HeadOfBlock head = head_of_item(item, T, C, NH, hd, heads);
  const int kt = head.tile;  // the lowest key tile, with the most query tiles, first
  const int k0 = kt * kTile;
  const std::int64_t C3 = head.qkv_stride;
  const E* q_base = qkv + head.qkv_offset;  // k at + C, v at + 2C
  const E* g_base = dout + head.out_offset;
  const float* lse_bh = lse + static_cast<std::int64_t>(head.bh) * T;
  const float* d_bh = D + static_cast<std::int64_t>(head.bh) * T;
  const int row0 = threadIdx.x / 32 * kWarpRows;

  load_tile(sm.k, ld, q_base + C, C3, k0, T, hd, hdp, vector_loads);
  load_tile(sm.v, ld, q_base + 2 * C, C3, k0, T, hd, hdp, vector_loads);
  WarpSums<E, kMaxHdp> dk(row0), dv(row0);
  for (int step = 0; step < head.tiles - kt; ++step) {
    // Up from the diagonal; in one pass down to it ([Note: dq in key-tile order]).
    const int qt = kOnePass ? head.tiles - 1 - step : kt + step;
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
    dv.template accumulate<wmma::col_major, kInPlaceLd<E>>(sm.probs + row0, sm.dout, ld, hdp);
    dk.template accumulate<wmma::col_major, kInPlaceLd<E>>(sm.dscores + row0, sm.q, ld, hdp);
    if constexpr (kOnePass) {
      // Each warp: key tile kt's part of its 16 query rows of dq, ds k, into the tile's sum in turn.
      WarpSums<E, kMaxHdp> dq(row0);
      dq.template accumulate<wmma::row_major, kInPlaceLd<E>>(sm.dscores + row0 * kInPlaceLd<E>, sm.k, ld, hdp);
      add_dq_in_key_order(dq, dq_turns.turns + static_cast<std::int64_t>(head.bh) * head.tiles + qt,
                          dqkv + head.qkv_offset, C3, kt, qt, q0, row0, T, hd, hdp, scale, sm.stage, acc_ld);
    }
  }
  __syncthreads();  // every warp has read the last p and ds: S and dp stage the sums

  E* d_base = dqkv + head.qkv_offset;
  dk.store(d_base + C, C3, k0, T, hd, scale, sm.stage, acc_ld);
  dv.store(d_base + 2 * C, C3, k0, T, hd, 1.f, sm.stage, acc_ld);
}

// The query pass: dq of query tile i over the key tiles j = 0..i, for heads of hdp <= kMaxHdp columns.
template <class E, int kMaxHdp>
__global__ void __launch_bounds__(kThreads, kBackwardMinBlocksAnSm<E, kMaxHdp>)
    flash_backward_query_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* D, int T, int C,
                                int NH, int hd, int hdp, int heads, float scale, bool vector_loads) {
  extern __shared__ __align__(128) unsigned char shared[];
  const QueryPassShared<E> sm(shared, hdp);
  const int ld = operand_ld<E>(hdp), acc_ld = accumulator_ld(hdp);

  const HeadOfBlock head = head_of_item(static_cast<int>(blockIdx.x), T, C, NH, hd, heads);
  const int qt = head.tiles - 1 - head.tile;  // the longest rows first
  const int q0 = qt * kTile;
  const std::int64_t C3 = head.qkv_stride;
  const E* q_base = qkv + head.qkv_offset;  // k at + C, v at + 2C
  const E* g_base = dout + head.out_offset;
  const int row0 = threadIdx.x / 32 * kWarpRows;

  load_tile(sm.q, ld, q_base, C3, q0, T, hd, hdp, vector_loads);
  load_tile(sm.dout, ld, g_base, C, q0, T, hd, hdp, vector_loads);
  load_rows(sm.lse_rows, lse + static_cast<std::int64_t>(head.bh) * T, q0, T);
  load_rows(sm.d_rows, D + static_cast<std::int64_t>(head.bh) * T, q0, T);
  WarpSums<E, kMaxHdp> dq(row0);
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
    warp_probabilities<E>(nullptr, sm.dscores, sm.scores, sm.dprobs, sm.lse_rows, sm.d_rows, row0, q0, k0, T, scale);
    __syncwarp();
    dq.template accumulate<wmma::row_major, kInPlaceLd<E>>(sm.dscores + row0 * kInPlaceLd<E>, sm.k, ld, hdp);
  }
  __syncthreads();  // every warp has read its last ds: S and dp stage the sums

  dq.store(dqkv + head.qkv_offset, C3, q0, T, hd, scale, sm.stage, acc_ld);
}

// ---- launchers ------------------------------------------------------------------------------------

// What every launch of one call shares, checked: the head size (real and padded for E), the tile count, the
// blocks of a per-tile kernel (tiles x heads, all in gridDim.x) and the score scale.
struct Geometry {
  int T, C, NH, hd, hdp, heads;
  unsigned blocks;
  float scale;
};

template <class E>
Geometry geometry(const char* op, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t n_head) {
  if (n_head < 1 || C % n_head != 0)
    fail(op, ": n_head must be positive and divide C; got C = ", C, ", n_head = ", n_head);
  const std::int64_t hd = C / n_head;
  constexpr int kMaxHeadDim = Tiles<E>::kMaxHeadDim;
  if (hd < 1 || hd > kMaxHeadDim)
    fail(op, ": the head size C / n_head must be 1 to ", kMaxHeadDim, " in ",
         std::is_same<E, float>::value ? "f32" : "bf16", "; got ", C, " / ", n_head, " = ", hd);
  const std::int64_t tiles = (T + kTile - 1) / kTile;
  if (T > INT_MAX || 3 * C > INT_MAX || tiles * B * n_head > INT_MAX)
    fail(op, ": B = ", B, ", T = ", T, ", C = ", C, ", n_head = ", n_head, " is past the kernels' 32-bit grid");
  Geometry g;
  g.T = static_cast<int>(T);
  g.C = static_cast<int>(C);
  g.NH = static_cast<int>(n_head);
  g.hd = static_cast<int>(hd);
  g.hdp = (g.hd + Tiles<E>::kHeadPad - 1) / Tiles<E>::kHeadPad * Tiles<E>::kHeadPad;
  g.heads = static_cast<int>(B * n_head);
  g.blocks = static_cast<unsigned>(tiles * B * n_head);
  g.scale = 1.f / std::sqrt(static_cast<float>(hd));
  return g;
}

// What asks for the shared memory, for allow_shared_memory's error.
std::string head_size(const Geometry& g) { return "head size " + std::to_string(g.hd); }

// Calls launch(std::integral_constant<int, kMaxHdp>) for the kernels compiled for heads of hdp columns:
// up to 64, or up to 128 (bf16 only: an f32 head stops at 64).
template <class E, class Launch>
void with_head_capacity(int hdp, Launch&& launch) {
  static_assert(Tiles<bf16>::kMaxHeadDim == 128 && Tiles<float>::kMaxHeadDim == 64, "the capacities compiled");
  if (hdp <= 64) {
    launch(std::integral_constant<int, 64>{});
    return;
  }
  if constexpr (Tiles<E>::kMaxHeadDim > 64)
    launch(std::integral_constant<int, 128>{});
  else
    fail("flash attention: no f32 kernel for a head of ", hdp, " columns (64 at most)");
}

// The blocks of `kernel` that one SM of this GPU holds at once with `bytes` of shared memory a block.
template <class Kernel>
int blocks_an_sm(Kernel kernel, std::size_t bytes, const Geometry& g) {
  allow_shared_memory(kernel, bytes, "flash_attention_blocks_an_sm", head_size(g));
  int blocks = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, bytes),
             "flash_attention_blocks_an_sm: the occupancy of a kernel for ", head_size(g));
  return blocks;
}

// 16 bytes at a time where every row of every head starts on 16 bytes.
template <class E>
bool vector_loads(int hd, const void* a, const void* b) {
  return hd % kPerVector<E> == 0 && reinterpret_cast<std::uintptr_t>(a) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(b) % 16 == 0;
}

}  // namespace

void flash_attention_forward(CUstream_st* stream, DType dtype, void* out, float* lse, const void* qkv,
                             std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t n_head) {
  if (B == 0 || T == 0) return;
  dispatch_float(dtype, "flash_attention", [&](auto zero) {
    using E = decltype(zero);
    const Geometry g = geometry<E>("flash_attention", B, T, C, n_head);
    const std::size_t bytes = ForwardShared<E>(std::uintptr_t{0}, g.hdp).bytes;
    with_head_capacity<E>(g.hdp, [&](auto capacity) {
      constexpr int kMaxHdp = decltype(capacity)::value;
      allow_shared_memory(flash_forward_kernel<E, kMaxHdp>, bytes, "flash_attention", head_size(g));
      flash_forward_kernel<E, kMaxHdp><<<g.blocks, kThreads, bytes, stream>>>(
          static_cast<E*>(out), lse, static_cast<const E*>(qkv), g.T, g.C, g.NH, g.hd, g.hdp, g.heads, g.scale,
          vector_loads<E>(g.hd, qkv, qkv));
      check_launch("flash_attention_forward");
    });
  });
}

void flash_attention_backward(CUstream_st* stream, DType dtype, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse, std::int64_t B, std::int64_t T, std::int64_t C,
                              std::int64_t n_head) {
  if (B == 0 || T == 0) return;
  dispatch_float(dtype, "flash_attention_backward", [&](auto zero) {
    using E = decltype(zero);
    const Geometry g = geometry<E>("flash_attention_backward", B, T, C, n_head);
    auto* dqkv_e = static_cast<E*>(dqkv);
    const auto* dout_e = static_cast<const E*>(dout);
    const auto* qkv_e = static_cast<const E*>(qkv);
    const bool vectors = vector_loads<E>(g.hd, qkv, dout);

    // 1. D = rowsum(dout * out): lives only until the two passes have read it, so the op's scratch.
    const std::int64_t rows = B * n_head * T;
    auto* D =
        static_cast<float*>(op_scratch(static_cast<std::int64_t>(sizeof(float)) * rows, "the rows' dout . out"));
    const std::int64_t row_blocks = (rows + kWarps - 1) / kWarps;
    flash_backward_rowdot_kernel<E><<<static_cast<unsigned>(row_blocks < 65536 ? row_blocks : 65536), kThreads, 0,
                                      stream>>>(D, dout_e, static_cast<const E*>(out), rows, g.T, g.C, g.NH, g.hd);
    check_launch("flash_attention_backward (dout . out)");

    // In one pass, the turns of the dq adds and the work items' counter, all from 0.
    DqTurns dq_turns;
    if constexpr (Tiles<E>::kOneBackwardPass) {
      const std::int64_t words = static_cast<std::int64_t>(g.blocks) + 1;  // a turn for each (query tile, head)
      auto* counters = static_cast<unsigned*>(
          op_scratch(static_cast<std::int64_t>(sizeof(unsigned)) * words, "the dq adds' turns"));
      check_cuda(cudaMemsetAsync(counters, 0, sizeof(unsigned) * static_cast<std::size_t>(words), stream),
                 "flash_attention_backward: zeroing the dq adds' turns");
      dq_turns = {counters, counters + 1};
    }

    with_head_capacity<E>(g.hdp, [&](auto capacity) {
      constexpr int kMaxHdp = decltype(capacity)::value;
      // 2. dk, dv by key tiles (and in one pass dq).
      const std::size_t key_bytes = KeyPassShared<E>(std::uintptr_t{0}, g.hdp).bytes;
      allow_shared_memory(flash_backward_key_kernel<E, kMaxHdp>, key_bytes, "flash_attention_backward", head_size(g));
      flash_backward_key_kernel<E, kMaxHdp><<<g.blocks, kThreads, key_bytes, stream>>>(
          dqkv_e, dout_e, qkv_e, lse, D, dq_turns, g.T, g.C, g.NH, g.hd, g.hdp, g.heads, g.scale, vectors);
      check_launch("flash_attention_backward (dk, dv)");

      // 3. Else dq by query tiles.
      if constexpr (!Tiles<E>::kOneBackwardPass) {
        const std::size_t query_bytes = QueryPassShared<E>(std::uintptr_t{0}, g.hdp).bytes;
        allow_shared_memory(flash_backward_query_kernel<E, kMaxHdp>, query_bytes, "flash_attention_backward",
                            head_size(g));
        flash_backward_query_kernel<E, kMaxHdp><<<g.blocks, kThreads, query_bytes, stream>>>(
            dqkv_e, dout_e, qkv_e, lse, D, g.T, g.C, g.NH, g.hd, g.hdp, g.heads, g.scale, vectors);
        check_launch("flash_attention_backward (dq)");
      }
    });
  });
}

FlashAttentionBlocksAnSm flash_attention_blocks_an_sm(DType dtype, std::int64_t head_dim) {
  FlashAttentionBlocksAnSm blocks;
  dispatch_float(dtype, "flash_attention_blocks_an_sm", [&](auto zero) {
    using E = decltype(zero);
    const Geometry g = geometry<E>("flash_attention_blocks_an_sm", 1, 1, head_dim, 1);
    with_head_capacity<E>(g.hdp, [&](auto capacity) {
      constexpr int kMaxHdp = decltype(capacity)::value;
      const std::uintptr_t at = 0;
      blocks.forward = blocks_an_sm(flash_forward_kernel<E, kMaxHdp>, ForwardShared<E>(at, g.hdp).bytes, g);
      blocks.key_pass = blocks_an_sm(flash_backward_key_kernel<E, kMaxHdp>, KeyPassShared<E>(at, g.hdp).bytes, g);
      if constexpr (!Tiles<E>::kOneBackwardPass)
        blocks.query_pass =
            blocks_an_sm(flash_backward_query_kernel<E, kMaxHdp>, QueryPassShared<E>(at, g.hdp).bytes, g);
    });
  });
  return blocks;
}

}  // namespace fsdplab::cuda
