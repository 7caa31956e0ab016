#include "engine/tensor/flash_attention_host.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/tensor/bf16.hpp"

namespace fsdplab {
namespace {

struct FlashLayout {
  std::int64_t B, T, C, NH, hd;

  std::int64_t qkv_index(std::int64_t b, std::int64_t t, int part, std::int64_t h) const {
    return (b * T + t) * 3 * C + part * C + h * hd;
  }
  std::int64_t out_index(std::int64_t b, std::int64_t t, std::int64_t h) const { return (b * T + t) * C + h * hd; }
  std::int64_t row_index(std::int64_t b, std::int64_t h, std::int64_t t) const { return (b * NH + h) * T + t; }
  float scale() const { return 1.f / std::sqrt(static_cast<float>(hd)); }
};

// See [Note: the flash attention arithmetic] in flash_attention.hpp. The host goes query row by query row
// (rows are independent) and through the keys one tile at a time, which is where the online softmax
// rescales; inside a tile it sums in key order, where the GPU's tensor cores take their own order.
//
// A body is a template on its storage S: std::uint16_t for bf16's bits, float for f32. `widen` reads an element
// (exact), `narrow` rounds a result once for storage, and `operand` is what a product takes: bf16(.) of the note
// in a bf16 run, the value itself in an f32 run (whose products are f32 fused multiply-adds).
float widen(std::uint16_t bits) { return bf16_to_float(bits); }
float widen(float value) { return value; }
template <class S>
S narrow(float value) {
  if constexpr (std::is_same_v<S, float>)
    return value;
  else
    return float_to_bf16(value);
}
template <class S>
float operand(float value) {
  return widen(narrow<S>(value));
}

// One head's rows of part `part` (0 = q, 1 = k, 2 = v) of qkv, widened to f32 [T, hd] (exact).
template <class S>
std::vector<float> head_rows(const S* qkv, const FlashLayout& l, std::int64_t b, std::int64_t h, int part) {
  std::vector<float> rows(static_cast<std::size_t>(l.T * l.hd));
  for (std::int64_t t = 0; t < l.T; ++t) {
    const S* src = qkv + l.qkv_index(b, t, part, h);
    for (std::int64_t i = 0; i < l.hd; ++i) rows[t * l.hd + i] = widen(src[i]);
  }
  return rows;
}

// One head's rows of out or dout [B, T, C], widened to f32 [T, hd].
template <class S>
std::vector<float> head_rows(const S* x, const FlashLayout& l, std::int64_t b, std::int64_t h) {
  std::vector<float> rows(static_cast<std::size_t>(l.T * l.hd));
  for (std::int64_t t = 0; t < l.T; ++t) {
    const S* src = x + l.out_index(b, t, h);
    for (std::int64_t i = 0; i < l.hd; ++i) rows[t * l.hd + i] = widen(src[i]);
  }
  return rows;
}

float dot(const float* a, const float* b, std::int64_t n) {
  float s = 0.f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <class S>
void forward(S* out, float* lse, const S* qkv, const FlashLayout& l) {
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
            const float p_operand = operand<S>(p);
            for (std::int64_t i = 0; i < hd; ++i) acc[i] += p_operand * v[key * hd + i];
          }
          sum = c * sum + tile_sum;
          m = m_new;
        }
        S* dst = out + l.out_index(b, t, h);
        for (std::int64_t i = 0; i < hd; ++i) dst[i] = narrow<S>(acc[i] / sum);
        lse[l.row_index(b, h, t)] = m + std::log(sum);
      }
    }
  }
}

// The GPU's backward passes ([Note: dq in key-tile order] in flash_attention_kernels.cu) decide the order of its
// sums, which the host keeps: bf16's key pass visits the query tiles up from the diagonal and its query pass sums
// dq over every key in one sum; the f32 pass visits them from the last down, and sums each key tile's part of dq
// on its own before adding it to the row's sum (the first part is the sum).
template <class S>
void backward(S* dqkv, const S* dout, const S* qkv, const S* out, const float* lse, const FlashLayout& l) {
  constexpr bool kOnePass = std::is_same_v<S, float>;
  const std::int64_t T = l.T, hd = l.hd;
  const std::int64_t tiles = (T + kFlashTile - 1) / kFlashTile;
  const float scale = l.scale();
  const auto n = static_cast<std::size_t>(T * hd);
  std::vector<float> dq(n), dk(n), dv(n), D(static_cast<std::size_t>(T)), dq_part(static_cast<std::size_t>(hd));
  for (std::int64_t b = 0; b < l.B; ++b) {
    for (std::int64_t h = 0; h < l.NH; ++h) {
      const std::vector<float> q = head_rows(qkv, l, b, h, 0), k = head_rows(qkv, l, b, h, 1),
                               v = head_rows(qkv, l, b, h, 2), g = head_rows(dout, l, b, h),
                               o = head_rows(out, l, b, h);
      for (std::int64_t t = 0; t < T; ++t) D[t] = dot(&g[t * hd], &o[t * hd], hd);
      std::fill(dq.begin(), dq.end(), 0.f);
      std::fill(dk.begin(), dk.end(), 0.f);
      std::fill(dv.begin(), dv.end(), 0.f);
      for (std::int64_t visit = 0; visit < tiles; ++visit) {
        const std::int64_t q_tile = kOnePass ? tiles - 1 - visit : visit;
        for (std::int64_t t = q_tile * kFlashTile; t < std::min(T, (q_tile + 1) * kFlashTile); ++t) {
          const float lse_t = lse[l.row_index(b, h, t)];
          float* dq_t = &dq[t * hd];
          for (std::int64_t k0 = 0; k0 <= t; k0 += kFlashTile) {
            float* sum = kOnePass ? dq_part.data() : dq_t;
            if (kOnePass) std::fill(dq_part.begin(), dq_part.end(), 0.f);
            for (std::int64_t key = k0; key < std::min(k0 + kFlashTile, t + 1); ++key) {
              const float p = std::exp(scale * dot(&q[t * hd], &k[key * hd], hd) - lse_t);
              const float dp = dot(&g[t * hd], &v[key * hd], hd);
              const float p_operand = operand<S>(p), ds_operand = operand<S>(p * (dp - D[t]));
              for (std::int64_t i = 0; i < hd; ++i) {
                dv[key * hd + i] += p_operand * g[t * hd + i];
                dk[key * hd + i] += ds_operand * q[t * hd + i];
                sum[i] += ds_operand * k[key * hd + i];
              }
            }
            if (kOnePass)
              for (std::int64_t i = 0; i < hd; ++i) dq_t[i] = k0 == 0 ? dq_part[i] : dq_t[i] + dq_part[i];
          }
        }
      }
      // The scale after the sums, as the GPU's passes apply it; then each element rounded once.
      const float* parts[3] = {dq.data(), dk.data(), dv.data()};
      const float part_scale[3] = {scale, scale, 1.f};
      for (int p = 0; p < 3; ++p) {
        for (std::int64_t t = 0; t < T; ++t) {
          S* dst = dqkv + l.qkv_index(b, t, p, h);
          for (std::int64_t i = 0; i < hd; ++i) dst[i] = narrow<S>(part_scale[p] * parts[p][t * hd + i]);
        }
      }
    }
  }
}
}  // namespace

void flash_attention_forward_host(std::uint16_t* out, float* lse, const std::uint16_t* qkv, std::int64_t B,
                                  std::int64_t T, std::int64_t C, std::int64_t n_head) {
  forward(out, lse, qkv, {B, T, C, n_head, C / n_head});
}

void flash_attention_backward_host(std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                                   const std::uint16_t* out, const float* lse, std::int64_t B, std::int64_t T,
                                   std::int64_t C, std::int64_t n_head) {
  backward(dqkv, dout, qkv, out, lse, {B, T, C, n_head, C / n_head});
}

void flash_attention_forward_host(float* out, float* lse, const float* qkv, std::int64_t B, std::int64_t T,
                                  std::int64_t C, std::int64_t n_head) {
  forward(out, lse, qkv, {B, T, C, n_head, C / n_head});
}

void flash_attention_backward_host(float* dqkv, const float* dout, const float* qkv, const float* out,
                                   const float* lse, std::int64_t B, std::int64_t T, std::int64_t C,
                                   std::int64_t n_head) {
  backward(dqkv, dout, qkv, out, lse, {B, T, C, n_head, C / n_head});
}

}  // namespace fsdplab
