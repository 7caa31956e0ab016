// causal_attention.hpp — causal self-attention on GPT-2's c_attn layout in double precision, written as plainly
// as the formulas: the one reference that the attention op's tests (tests/unit/test_nn_ops_attention.cpp) and
// its CUDA kernels' emulation tests (tests/kernel_emulation/test_attention_kernels_on_cpu.cpp) check against.
//
//   q, k, v = qkv.split(C, dim=-1), each [B, T, NH, hd] viewed as [B, NH, T, hd]     (hd = C / NH)
//   att     = softmax(q k^T / sqrt(hd)), a query's later keys masked out             [B, NH, T, T]
//   out     = att v, the heads side by side again                                    [B, T, C]
// and the backward from dout [B, T, C]:
//   datt = dout v^T,  dscore = att * (datt - rowsum(att * datt)) / sqrt(hd)
//   dq = dscore k,  dk = dscore^T q,  dv = att^T dout
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace fsdplab::reference {

struct AttentionSizes {
  std::int64_t B, T, C, NH;
  std::int64_t hd() const { return C / NH; }
  // Element counts.
  std::int64_t qkv() const { return B * T * 3 * C; }
  std::int64_t out() const { return B * T * C; }
  std::int64_t att() const { return B * NH * T * T; }
};

struct AttentionForward {
  std::vector<double> out, att;  // att holds zeros above the diagonal
};

inline std::vector<double> widened(std::span<const float> v) { return {v.begin(), v.end()}; }

namespace detail {
// Where element i of head h at position t of batch b sits: in part p (0 q, 1 k, 2 v) of qkv, and in out.
struct AttentionLayout {
  const AttentionSizes& n;
  std::size_t qkv(std::int64_t b, std::int64_t t, int p, std::int64_t h, std::int64_t i) const {
    return static_cast<std::size_t>(((b * n.T + t) * 3 + p) * n.C + h * n.hd() + i);
  }
  std::size_t out(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) const {
    return static_cast<std::size_t>((b * n.T + t) * n.C + h * n.hd() + i);
  }
  std::size_t att(std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t j) const {
    return static_cast<std::size_t>(((b * n.NH + h) * n.T + t) * n.T + j);
  }
};
}  // namespace detail

// out and att from qkv [B, T, 3C].
inline AttentionForward causal_attention_forward(const AttentionSizes& n, std::span<const double> qkv) {
  const detail::AttentionLayout at{n};
  const double scale = 1 / std::sqrt(static_cast<double>(n.hd()));
  AttentionForward r{std::vector<double>(static_cast<std::size_t>(n.out())),
                     std::vector<double>(static_cast<std::size_t>(n.att()))};
  std::vector<double> score(static_cast<std::size_t>(n.T));
  for (std::int64_t b = 0; b < n.B; ++b) {
    for (std::int64_t h = 0; h < n.NH; ++h) {
      for (std::int64_t t = 0; t < n.T; ++t) {
        for (std::int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (std::int64_t i = 0; i < n.hd(); ++i) d += qkv[at.qkv(b, t, 0, h, i)] * qkv[at.qkv(b, j, 1, h, i)];
          score[j] = d * scale;
        }
        const double max = *std::max_element(score.begin(), score.begin() + t + 1);
        double sum = 0;
        for (std::int64_t j = 0; j <= t; ++j) sum += score[j] = std::exp(score[j] - max);
        for (std::int64_t j = 0; j <= t; ++j) {
          const double p = score[j] / sum;
          r.att[at.att(b, h, t, j)] = p;
          for (std::int64_t i = 0; i < n.hd(); ++i) r.out[at.out(b, t, h, i)] += p * qkv[at.qkv(b, j, 2, h, i)];
        }
      }
    }
  }
  return r;
}

// The gradient that reaches qkv from dout, through the probabilities `att`: the forward's own, or a device's, to
// check a backward alone from the probabilities it was given.
inline std::vector<double> causal_attention_backward(const AttentionSizes& n, std::span<const double> qkv,
                                                     std::span<const double> att, std::span<const double> dout) {
  const detail::AttentionLayout at{n};
  const double scale = 1 / std::sqrt(static_cast<double>(n.hd()));
  std::vector<double> dqkv(qkv.size(), 0.0), datt(static_cast<std::size_t>(n.T));
  for (std::int64_t b = 0; b < n.B; ++b) {
    for (std::int64_t h = 0; h < n.NH; ++h) {
      for (std::int64_t t = 0; t < n.T; ++t) {
        const double* a = &att[at.att(b, h, t, 0)];
        double a_dot_datt = 0;
        for (std::int64_t j = 0; j <= t; ++j) {
          datt[j] = 0;
          for (std::int64_t i = 0; i < n.hd(); ++i) datt[j] += dout[at.out(b, t, h, i)] * qkv[at.qkv(b, j, 2, h, i)];
          a_dot_datt += a[j] * datt[j];
        }
        for (std::int64_t j = 0; j <= t; ++j) {
          const double dscore = a[j] * (datt[j] - a_dot_datt) * scale;
          for (std::int64_t i = 0; i < n.hd(); ++i) {
            dqkv[at.qkv(b, t, 0, h, i)] += dscore * qkv[at.qkv(b, j, 1, h, i)];
            dqkv[at.qkv(b, j, 1, h, i)] += dscore * qkv[at.qkv(b, t, 0, h, i)];
            dqkv[at.qkv(b, j, 2, h, i)] += a[j] * dout[at.out(b, t, h, i)];
          }
        }
      }
    }
  }
  return dqkv;
}

}  // namespace fsdplab::reference
