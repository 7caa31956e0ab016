#include "engine/tensor/flash_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/cuda/flash_attention_kernels.hpp"
#include "engine/tensor/attention.hpp"
#include "engine/tensor/bf16.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {

struct FlashLayout {
  std::int64_t B, T, C, NH, hd;

  std::int64_t qkv_index(std::int64_t b, std::int64_t t, int part, std::int64_t h) const {
    return (b * T + t) * 3 * C + part * C + h * hd;
  }
  std::int64_t out_index(std::int64_t b, std::int64_t t, std::int64_t h) const { return (b * T + t) * C + h * hd; }
  std::int64_t row_index(std::int64_t b, std::int64_t h, std::int64_t t) const { return (b * NH + h) * T + t; }
  // Tiles of kFlashTile rows, the last one partial.
  std::int64_t tiles() const { return (T + kFlashTile - 1) / kFlashTile; }
  float scale() const { return 1.f / std::sqrt(static_cast<float>(hd)); }
};

// ---- the host body: the GPU kernels' twin ---------------------------------------------------------------
// See [Note: the flash attention arithmetic] in flash_attention.hpp. The host goes query row by query row
// (rows are independent) and through the keys one tile at a time, which is where the online softmax
// rescales; inside a tile it sums in key order, where the GPU's tensor cores take their own order.
namespace cpu {

using Bits = std::uint16_t;  // bf16 storage

// One head's rows of part `part` (0 = q, 1 = k, 2 = v) of qkv, widened to f32 [T, hd] (exact).
std::vector<float> head_rows(const Bits* qkv, const FlashLayout& l, std::int64_t b, std::int64_t h, int part) {
  std::vector<float> rows(static_cast<std::size_t>(l.T * l.hd));
  for (std::int64_t t = 0; t < l.T; ++t) {
    const Bits* src = qkv + l.qkv_index(b, t, part, h);
    for (std::int64_t i = 0; i < l.hd; ++i) rows[t * l.hd + i] = bf16_to_float(src[i]);
  }
  return rows;
}

// One head's rows of out or dout [B, T, C], widened to f32 [T, hd].
std::vector<float> head_rows(const Bits* x, const FlashLayout& l, std::int64_t b, std::int64_t h) {
  std::vector<float> rows(static_cast<std::size_t>(l.T * l.hd));
  for (std::int64_t t = 0; t < l.T; ++t) {
    const Bits* src = x + l.out_index(b, t, h);
    for (std::int64_t i = 0; i < l.hd; ++i) rows[t * l.hd + i] = bf16_to_float(src[i]);
  }
  return rows;
}

float dot(const float* a, const float* b, std::int64_t n) {
  float s = 0.f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void forward(Bits* out, float* lse, const Bits* qkv, const FlashLayout& l) {
  const std::int64_t T = l.T, hd = l.hd;
  const float scale = l.scale();
  std::vector<float> s(static_cast<std::size_t>(kFlashTile)), acc(static_cast<std::size_t>(hd));
  for (std::int64_t b = 0; b < l.B; ++b) {
    for (std::int64_t h = 0; h < l.NH; ++h) {
      const std::vector<float> q = head_rows(qkv, l, b, h, 0), k = head_rows(qkv, l, b, h, 1),
                               v = head_rows(qkv, l, b, h, 2);
      for (std::int64_t t = 0; t < T; ++t) {
        float m = -std::numeric_limits<float>::infinity(), sum = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        // The key tiles at or before this query's: keys k0 .. k_end - 1 of each, none after t.
        for (std::int64_t k0 = 0; k0 <= t; k0 += kFlashTile) {
          const std::int64_t k_end = std::min(k0 + kFlashTile, t + 1);
          float tile_max = -std::numeric_limits<float>::infinity();
          for (std::int64_t key = k0; key < k_end; ++key) {
            s[key - k0] = scale * dot(&q[t * hd], &k[key * hd], hd);
            tile_max = std::max(tile_max, s[key - k0]);
          }
          const float m_new = std::max(m, tile_max);
          const float c = k0 == 0 ? 0.f : std::exp(m - m_new);
          float tile_sum = 0.f;
          for (float& a : acc) a *= c;
          for (std::int64_t key = k0; key < k_end; ++key) {
            const float p = std::exp(s[key - k0] - m_new);
            tile_sum += p;
            const float p_operand = round_to_bf16(p);
            for (std::int64_t i = 0; i < hd; ++i) acc[i] += p_operand * v[key * hd + i];
          }
          sum = c * sum + tile_sum;
          m = m_new;
        }
        Bits* dst = out + l.out_index(b, t, h);
        for (std::int64_t i = 0; i < hd; ++i) dst[i] = float_to_bf16(acc[i] / sum);
        lse[l.row_index(b, h, t)] = m + std::log(sum);
      }
    }
  }
}

void backward(Bits* dqkv, const Bits* dout, const Bits* qkv, const Bits* out, const float* lse, const FlashLayout& l) {
  const std::int64_t T = l.T, hd = l.hd;
  const float scale = l.scale();
  const auto n = static_cast<std::size_t>(T * hd);
  std::vector<float> dq(n), dk(n), dv(n), D(static_cast<std::size_t>(T));
  for (std::int64_t b = 0; b < l.B; ++b) {
    for (std::int64_t h = 0; h < l.NH; ++h) {
      const std::vector<float> q = head_rows(qkv, l, b, h, 0), k = head_rows(qkv, l, b, h, 1),
                               v = head_rows(qkv, l, b, h, 2), g = head_rows(dout, l, b, h),
                               o = head_rows(out, l, b, h);
      for (std::int64_t t = 0; t < T; ++t) D[t] = dot(&g[t * hd], &o[t * hd], hd);
      std::fill(dq.begin(), dq.end(), 0.f);
      std::fill(dk.begin(), dk.end(), 0.f);
      std::fill(dv.begin(), dv.end(), 0.f);
      for (std::int64_t t = 0; t < T; ++t) {
        const float lse_t = lse[l.row_index(b, h, t)];
        for (std::int64_t key = 0; key <= t; ++key) {
          const float p = std::exp(scale * dot(&q[t * hd], &k[key * hd], hd) - lse_t);
          const float dp = dot(&g[t * hd], &v[key * hd], hd);
          const float p_operand = round_to_bf16(p), ds_operand = round_to_bf16(p * (dp - D[t]));
          for (std::int64_t i = 0; i < hd; ++i) {
            dv[key * hd + i] += p_operand * g[t * hd + i];
            dk[key * hd + i] += ds_operand * q[t * hd + i];
            dq[t * hd + i] += ds_operand * k[key * hd + i];
          }
        }
      }
      // The scale after the sums, as the GPU's passes apply it; then each element rounded once.
      const float* parts[3] = {dq.data(), dk.data(), dv.data()};
      const float part_scale[3] = {scale, scale, 1.f};
      for (int p = 0; p < 3; ++p) {
        for (std::int64_t t = 0; t < T; ++t) {
          Bits* dst = dqkv + l.qkv_index(b, t, p, h);
          for (std::int64_t i = 0; i < hd; ++i)
            dst[i] = float_to_bf16(bf16_to_float(dst[i]) + part_scale[p] * parts[p][t * hd + i]);
        }
      }
    }
  }
}

}  // namespace cpu

// ---- the op front-ends --------------------------------------------------------------------------------

// Checks what the forward and the backward share and returns the sizes.
FlashLayout flash_sizes(std::string_view op, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head) {
  const QkvShape q = qkv_shape(op, qkv, n_head);
  if (qkv.dtype() != DType::bf16)
    fail(op, ": qkv must be bf16 (flash attention multiplies on bf16 tensor cores; f32 runs use attention), got ",
         qkv.describe());
  if (q.hd > kFlashMaxHeadDim)
    fail(op, ": the head dimension C / n_head must be at most ", kFlashMaxHeadDim,
         " (a tile of it lives in shared memory), got ", q.hd);
  expect_tensor(op, "out", out, {q.B, q.T, q.C}, DType::bf16);
  expect_tensor(op, "lse", lse, {q.B, n_head, q.T}, DType::f32);
  return {q.B, q.T, q.C, q.n_head, q.hd};
}

// The score pairs the kernels compute: every tile at or below the diagonal, whole (a partial tile is padded).
double computed_pairs(const FlashLayout& l) {
  const double tiles = static_cast<double>(l.tiles() * (l.tiles() + 1) / 2);
  return static_cast<double>(l.B * l.NH) * tiles * static_cast<double>(kFlashTile * kFlashTile);
}

}  // namespace

void flash_attention(Stream s, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head) {
  constexpr std::string_view op = "flash_attention";
  const FlashLayout layout = flash_sizes(op, qkv, out, lse, n_head);
  expect_disjoint(op, {{"qkv", &qkv}}, {{"out", &out}, {"lse", &lse}});

  // Two products (q k^T and p v) of 2 hd flops a score pair, and the online softmax (~5 a pair). Bytes: qkv
  // read, out and lse written; nothing of size T x T ever reaches memory.
  const double pairs = computed_pairs(layout);
  const double btc = static_cast<double>(layout.B * layout.T * layout.C);
  const double rows = static_cast<double>(layout.B * layout.NH * layout.T);
  const OpCost cost{.flops = 2 * (2 * static_cast<double>(layout.hd) * pairs) + 5 * pairs,
                    .bytes = 2 * (3 * btc + btc) + 4 * rows,
                    .dtype = DType::bf16,
                    .matmul = true};
  launch_op(s, std::string(op), cost, {{&qkv}, {&out, &lse}},
            {.host = [&] { cpu::forward(out.data<cpu::Bits>(), lse.f32(), qkv.data<cpu::Bits>(), layout); },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::flash_attention_forward(stream, out.raw(), lse.f32(), qkv.raw(), layout.B, layout.T, layout.C,
                                             layout.NH);
             })});
}

void flash_attention_backward(Stream s, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, int n_head) {
  constexpr std::string_view op = "flash_attention_backward";
  const FlashLayout layout = flash_sizes(op, qkv, out, lse, n_head);
  expect_tensor(op, "dout", dout, {layout.B, layout.T, layout.C}, DType::bf16);
  expect_tensor(op, "dqkv", dqkv, {layout.B, layout.T, 3 * layout.C}, DType::bf16);
  expect_disjoint(op, {{"dout", &dout}, {"qkv", &qkv}, {"out", &out}, {"lse", &lse}}, {{"dqkv", &dqkv}});

  // The pass over key tiles recomputes q k^T and does dout v^T, p^T dout and ds^T q; the pass over query
  // tiles recomputes q k^T and dout v^T and does ds k: seven products of 2 hd flops a pair, and ~10 a pair
  // for the softmax's backward. Bytes: dout and out read for D, qkv and dout read, dqkv read and written,
  // lse and D read (D once written).
  const double pairs = computed_pairs(layout);
  const double btc = static_cast<double>(layout.B * layout.T * layout.C);
  const double rows = static_cast<double>(layout.B * layout.NH * layout.T);
  const OpCost cost{.flops = 7 * (2 * static_cast<double>(layout.hd) * pairs) + 10 * pairs,
                    .bytes = 2 * (2 * btc + 3 * btc + btc + 2 * 3 * btc) + 4 * 3 * rows,
                    .dtype = DType::bf16,
                    .matmul = true};
  // dqkv is read-modify-write: listing it as a write covers the read for the race detector.
  launch_op(s, std::string(op), cost, {{&dout, &qkv, &out, &lse}, {&dqkv}},
            {.host =
                 [&] {
                   cpu::backward(dqkv.data<cpu::Bits>(), dout.data<cpu::Bits>(), qkv.data<cpu::Bits>(),
                                 out.data<cpu::Bits>(), lse.f32(), layout);
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::flash_attention_backward(stream, dqkv.raw(), dout.raw(), qkv.raw(), out.raw(), lse.f32(),
                                              layout.B, layout.T, layout.C, layout.NH);
             })});
}

}  // namespace fsdplab
