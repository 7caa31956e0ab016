#include "engine/tensor/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/cuda/attention_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

// The kernels work on one (batch, head) at a time, on that head's q, k, v copied out of qkv into
// contiguous f32 [T, hd] rows (the permute llm.c's CUDA attention does before its GEMMs): the inner
// loops then run over contiguous memory, and a bf16 qkv is widened once rather than per use.
struct QkvLayout {
  std::int64_t B, T, C, NH, hd;

  // Element (t, i) of part p (0 = q, 1 = k, 2 = v) of head h in batch b, in qkv [B, T, 3C].
  std::int64_t qkv_index(std::int64_t b, std::int64_t t, int p, std::int64_t h, std::int64_t i) const {
    return (b * T + t) * 3 * C + p * C + h * hd + i;
  }
  // Element (t, i) of head h in batch b, in out [B, T, C].
  std::int64_t out_index(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) const {
    return (b * T + t) * C + h * hd + i;
  }
  // Copies part p of head (b, h) into dst [T, hd] f32.
  template <class F>
  void gather_qkv(float* dst, const F* qkv, std::int64_t b, std::int64_t h, int p) const {
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t i = 0; i < hd; ++i) dst[t * hd + i] = load_f32(qkv[qkv_index(b, t, p, h, i)]);
  }
};

float dot(const float* a, const float* b, std::int64_t n) {
  float s = 0.f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One head: q, k, v [T, hd] -> att [T, T] (row t: the softmax over keys 0..t, zeros after it) and
// o [T, hd].
void head_forward(float* o, float* att, const float* q, const float* k, const float* v, std::int64_t T,
                  std::int64_t hd, float scale) {
  for (std::int64_t t = 0; t < T; ++t) {
    float* a = att + t * T;
    float max = -std::numeric_limits<float>::infinity();
    for (std::int64_t t2 = 0; t2 <= t; ++t2) {
      a[t2] = scale * dot(q + t * hd, k + t2 * hd, hd);
      max = std::max(max, a[t2]);
    }
    float sum = 0.f;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) {
      a[t2] = std::exp(a[t2] - max);
      sum += a[t2];
    }
    const float inv = 1.f / sum;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
    std::fill(a + t + 1, a + T, 0.f);

    float* ot = o + t * hd;
    std::fill(ot, ot + hd, 0.f);
    for (std::int64_t t2 = 0; t2 <= t; ++t2) {
      const float* vt2 = v + t2 * hd;
      for (std::int64_t i = 0; i < hd; ++i) ot[i] += a[t2] * vt2[i];
    }
  }
}

// One head's backward: dout [T, hd] and the forward's att -> dq, dk, dv [T, hd], which start at zero.
// datt is a scratch row of T floats.
void head_backward(float* dq, float* dk, float* dv, float* datt, const float* dout, const float* q, const float* k,
                   const float* v, const float* att, std::int64_t T, std::int64_t hd, float scale) {
  for (std::int64_t t = 0; t < T; ++t) {
    const float* a = att + t * T;
    const float* g = dout + t * hd;
    // Through o = att v: datt = dout v^T, dv = att^T dout.
    float a_dot_datt = 0.f;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) {
      datt[t2] = dot(g, v + t2 * hd, hd);
      a_dot_datt += a[t2] * datt[t2];
      float* dvt2 = dv + t2 * hd;
      for (std::int64_t i = 0; i < hd; ++i) dvt2[i] += a[t2] * g[i];
    }
    // Through the softmax (masked keys have att = 0 and get nothing), then the scaled q k^T.
    for (std::int64_t t2 = 0; t2 <= t; ++t2) {
      const float dscore = a[t2] * (datt[t2] - a_dot_datt) * scale;
      const float* kt2 = k + t2 * hd;
      const float* qt = q + t * hd;
      float* dqt = dq + t * hd;
      float* dkt2 = dk + t2 * hd;
      for (std::int64_t i = 0; i < hd; ++i) {
        dqt[i] += dscore * kt2[i];
        dkt2[i] += dscore * qt[i];
      }
    }
  }
}

template <class F>
void attention_forward(F* out, float* att, const F* qkv, const QkvLayout& layout) {
  const std::int64_t T = layout.T, hd = layout.hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const auto n = static_cast<std::size_t>(T * hd);
  std::vector<float> q(n), k(n), v(n), o(n);
  for (std::int64_t b = 0; b < layout.B; ++b) {
    for (std::int64_t h = 0; h < layout.NH; ++h) {
      layout.gather_qkv(q.data(), qkv, b, h, 0);
      layout.gather_qkv(k.data(), qkv, b, h, 1);
      layout.gather_qkv(v.data(), qkv, b, h, 2);
      head_forward(o.data(), att + (b * layout.NH + h) * T * T, q.data(), k.data(), v.data(), T, hd, scale);
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t i = 0; i < hd; ++i) store_f32(out[layout.out_index(b, t, h, i)], o[t * hd + i]);
    }
  }
}

template <class F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const float* att, const QkvLayout& layout) {
  const std::int64_t T = layout.T, hd = layout.hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const auto n = static_cast<std::size_t>(T * hd);
  std::vector<float> q(n), k(n), v(n), g(n), dq(n), dk(n), dv(n), datt(static_cast<std::size_t>(T));
  for (std::int64_t b = 0; b < layout.B; ++b) {
    for (std::int64_t h = 0; h < layout.NH; ++h) {
      layout.gather_qkv(q.data(), qkv, b, h, 0);
      layout.gather_qkv(k.data(), qkv, b, h, 1);
      layout.gather_qkv(v.data(), qkv, b, h, 2);
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t i = 0; i < hd; ++i) g[t * hd + i] = load_f32(dout[layout.out_index(b, t, h, i)]);
      std::fill(dq.begin(), dq.end(), 0.f);
      std::fill(dk.begin(), dk.end(), 0.f);
      std::fill(dv.begin(), dv.end(), 0.f);
      head_backward(dq.data(), dk.data(), dv.data(), datt.data(), g.data(), q.data(), k.data(), v.data(),
                    att + (b * layout.NH + h) * T * T, T, hd, scale);
      // dk and dv sum over every query: stored into dqkv only now, so bf16 rounds once per element.
      const float* parts[3] = {dq.data(), dk.data(), dv.data()};
      for (int p = 0; p < 3; ++p) {
        for (std::int64_t t = 0; t < T; ++t) {
          for (std::int64_t i = 0; i < hd; ++i) {
            store_f32(dqkv[layout.qkv_index(b, t, p, h, i)], parts[p][t * hd + i]);
          }
        }
      }
    }
  }
}

}  // namespace cpu

// Checks what the forward and the backward share and returns the sizes.
cpu::QkvLayout attention_sizes(std::string_view op, const Tensor& qkv, const Tensor& att, int n_head) {
  const QkvShape q = qkv_shape(op, qkv, n_head);
  expect_tensor(op, "att", att, {q.B, n_head, q.T, q.T}, DType::f32);
  return {q.B, q.T, q.C, q.n_head, q.hd};
}

}  // namespace

QkvShape qkv_shape(std::string_view op, const Tensor& qkv, int n_head) {
  expect_float(op, "qkv", qkv, 3, "[B, T, 3C]");
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1), C3 = qkv.dim(2);
  if (!(C3 % 3 == 0))
    fail(op, ": qkv must be [B, T, 3C] (q, k and v side by side), but its last dimension ", C3,
         " is not a multiple of 3: ", qkv.describe());
  const std::int64_t C = C3 / 3;
  if (!(n_head > 0 && C % n_head == 0))
    fail(op, ": n_head must divide C = ", C, " (from ", qkv.describe(), "), got n_head ", n_head);
  return {B, T, C, n_head, C / n_head};
}

// Costs count the full T x T products even though the causal mask makes half of them unused: a
// batched GEMM (llm.c's attention) computes them all.
void attention(Stream s, const Tensor& qkv, const Tensor& out, const Tensor& att, int n_head) {
  constexpr std::string_view op = "attention";
  const cpu::QkvLayout layout = attention_sizes(op, qkv, att, n_head);
  const DType dt = qkv.dtype();
  expect_tensor(op, "out", out, {layout.B, layout.T, layout.C}, dt);
  expect_disjoint(op, {{"qkv", &qkv}}, {{"out", &out}, {"att", &att}});

  const double es = static_cast<double>(dtype_size(dt));
  // The entries of all the att matrices.
  const double scores = static_cast<double>(layout.B * layout.NH * layout.T * layout.T);
  const double btc = static_cast<double>(layout.B * layout.T * layout.C);
  // Two GEMMs (q k^T and att v) of 2 * T * T * hd each per head, plus the scale and softmax (~5 per score).
  const OpCost cost{.flops = 2 * (2 * scores * static_cast<double>(layout.hd)) + 5 * scores,
                    .bytes = es * (3 * btc + btc) + 4 * scores,
                    .dtype = dt,
                    .matmul = true};
  launch_op(s, std::string(op), cost, {{&qkv}, {&out, &att}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     cpu::attention_forward(out.data<F>(), att.f32(), qkv.data<F>(), layout);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::attention_forward(stream, dt, out.raw(), att.f32(), qkv.raw(), layout.B, layout.T, layout.C,
                                       layout.NH);
             })});
}

void attention_backward(Stream s, const Tensor& dout, const Tensor& qkv, const Tensor& att, const Tensor& dqkv,
                        int n_head) {
  constexpr std::string_view op = "attention_backward";
  const cpu::QkvLayout layout = attention_sizes(op, qkv, att, n_head);
  const DType dt = qkv.dtype();
  expect_tensor(op, "dout", dout, {layout.B, layout.T, layout.C}, dt);
  expect_tensor(op, "dqkv", dqkv, {layout.B, layout.T, 3 * layout.C}, dt);
  expect_disjoint(op, {{"dout", &dout}, {"qkv", &qkv}, {"att", &att}}, {{"dqkv", &dqkv}});

  const double es = static_cast<double>(dtype_size(dt));
  const double scores = static_cast<double>(layout.B * layout.NH * layout.T * layout.T);
  const double btc = static_cast<double>(layout.B * layout.T * layout.C);
  // Four GEMMs (datt = dout v^T, dv = att^T dout, dq = dscore k, dk = dscore^T q) of 2 * T * T * hd
  // each per head, plus the softmax backward (~5 per score). Bytes: dout, qkv and att read, dqkv
  // written.
  const OpCost cost{.flops = 4 * (2 * scores * static_cast<double>(layout.hd)) + 5 * scores,
                    .bytes = es * (btc + 3 * btc + 3 * btc) + 4 * scores,
                    .dtype = dt,
                    .matmul = true};
  launch_op(s, std::string(op), cost, {{&dout, &qkv, &att}, {&dqkv}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     cpu::attention_backward(dqkv.data<F>(), dout.data<F>(), qkv.data<F>(), att.f32(), layout);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::attention_backward(stream, dt, dqkv.raw(), dout.raw(), qkv.raw(), att.f32(), layout.B, layout.T,
                                        layout.C, layout.NH);
             })});
}

}  // namespace fsdplab
