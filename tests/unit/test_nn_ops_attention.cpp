// attention and attention_backward against a double-precision reference of
// F.scaled_dot_product_attention(q, k, v, is_causal=True) on GPT-2's c_attn layout, and finite
// differences.
#include "engine/tensor/attention.hpp"

#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr int B = 2, T = 5, C = 8, NH = 2, HD = C / NH;

struct AttentionRef {
  std::vector<double> out, att;
};

// q, k, v = qkv.split(C, dim=-1); each viewed as [B, T, NH, HD] and transposed to [B, NH, T, HD];
// att = softmax(q k^T / sqrt(HD) with keys after the query masked out); out = att v, heads side by
// side again.
AttentionRef attention_ref(std::span<const float> qkv) {
  AttentionRef r{std::vector<double>(B * T * C, 0.0), std::vector<double>(B * NH * T * T, 0.0)};
  auto at = [&](int b, int t, int part, int h, int i) { return qkv[(b * T + t) * 3 * C + part * C + h * HD + i]; };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        std::vector<double> score(t + 1);
        double max = -1e300, sum = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          double d = 0;
          for (int i = 0; i < HD; ++i) d += static_cast<double>(at(b, t, 0, h, i)) * at(b, t2, 1, h, i);
          score[t2] = d / std::sqrt(static_cast<double>(HD));
          max = std::max(max, score[t2]);
        }
        for (int t2 = 0; t2 <= t; ++t2) sum += std::exp(score[t2] - max);
        for (int t2 = 0; t2 <= t; ++t2) {
          const double p = std::exp(score[t2] - max) / sum;
          r.att[((b * NH + h) * T + t) * T + t2] = p;
          for (int i = 0; i < HD; ++i) r.out[(b * T + t) * C + h * HD + i] += p * at(b, t2, 2, h, i);
        }
      }
    }
  }
  return r;
}

struct Outputs {
  std::vector<float> out, att, dqkv;
};

// The forward, then the backward from dout onto a dqkv that starts at dqkv0.
Outputs run(DeviceKind kind, const std::vector<float>& qkv, const std::vector<float>& dout,
            const std::vector<float>& dqkv0, DType dt) {
  auto dev = make_test_device(kind);
  Tensor tqkv = tensor_from(*dev, {B, T, 3 * C}, qkv, dt);
  Tensor tout = leftovers(*dev, {B, T, C}, dt), tatt = leftovers(*dev, {B, NH, T, T});
  attention(compute(*dev), tqkv, tout, tatt, NH);
  Tensor tdout = tensor_from(*dev, {B, T, C}, dout, dt), tdqkv = tensor_from(*dev, {B, T, 3 * C}, dqkv0, dt);
  attention_backward(compute(*dev), tdout, tqkv, tatt, tdqkv, NH);
  return {read(tout), read(tatt), read(tdqkv)};
}

std::vector<double> expected_dqkv(const std::vector<float>& qkv, const std::vector<float>& dout,
                                  const std::vector<float>& dqkv0) {
  return plus(dqkv0, numeric_grad(
                         [&](std::span<const float> x) {
                           const auto out = attention_ref(x).out;
                           double s = 0;
                           for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
                           return s;
                         },
                         qkv));
}

const std::vector<float> kQkv = random_values(B * T * 3 * C, 21, -2.f, 2.f);
const std::vector<float> kDout = random_values(B * T * C, 22);
const std::vector<float> kDqkv0 = random_values(B * T * 3 * C, 23);

// The numerical tests run on every device; the errors on the sim device.
class NnOpsAttentionTest : public OnEachDevice {};

TEST_P(NnOpsAttentionTest, ForwardMatchesReference) {
  const Outputs got = run(GetParam(), kQkv, kDout, kDqkv0, DType::f32);
  const AttentionRef ref = attention_ref(kQkv);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-6, 1e-5));
  EXPECT_TRUE(all_close(got.att, ref.att, 1e-7, 1e-5));  // including the zeros above the diagonal
}

TEST_P(NnOpsAttentionTest, QueriesFindTheirKeysInTheRightColumns) {
  // A check of the layout that does not trust the reference: all q and k are zero, so attention is
  // uniform over the past and out[t] is the mean of v[0..t] ... except that in head 1, query 3 of
  // each batch matches key 1 with score 20 * 1 / sqrt(HD) = 10.
  std::vector<float> qkv(B * T * 3 * C, 0.f);
  const auto v = random_values(B * T * C, 24);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) qkv[(b * T + t) * 3 * C + 2 * C + c] = v[(b * T + t) * C + c];
    qkv[(b * T + 3) * 3 * C + 0 * C + 1 * HD + 2] = 20.f;  // q, t = 3, head 1, element 2
    qkv[(b * T + 1) * 3 * C + 1 * C + 1 * HD + 2] = 1.f;   // k, t = 1, head 1, element 2
  }
  std::vector<double> want(B * T * C);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int c = 0; c < C; ++c) {
        const bool peaked = t == 3 && c / HD == 1;
        double num = 0, den = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const double w = peaked && t2 == 1 ? std::exp(10.0) : 1.0;
          num += w * v[(b * T + t2) * C + c];
          den += w;
        }
        want[(b * T + t) * C + c] = num / den;
      }
    }
  }
  const Outputs got = run(GetParam(), qkv, kDout, kDqkv0, DType::f32);
  EXPECT_TRUE(all_close(got.out, want, 1e-6, 1e-5));
}

TEST_P(NnOpsAttentionTest, BackwardAddsTheFiniteDifferenceGradients) {
  const Outputs got = run(GetParam(), kQkv, kDout, kDqkv0, DType::f32);
  EXPECT_TRUE(all_close(got.dqkv, expected_dqkv(kQkv, kDout, kDqkv0), kGradAtol, kGradRtol));
}

TEST_P(NnOpsAttentionTest, Bf16IsTheF32ResultRoundedOnce) {
  // The reference sees the same bf16-rounded inputs, att stays f32 and nothing else is rounded in
  // between, so out and dqkv may differ from it by one rounding (plus the finite differences' error).
  const auto qkv = rounded_to_bf16(kQkv), dout = rounded_to_bf16(kDout), dqkv0 = rounded_to_bf16(kDqkv0);
  const Outputs got = run(GetParam(), qkv, dout, dqkv0, DType::bf16);
  const AttentionRef ref = attention_ref(qkv);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-6, kBf16Rtol));
  EXPECT_TRUE(all_close(got.att, ref.att, 1e-7, 1e-5));
  EXPECT_TRUE(all_close(got.dqkv, expected_dqkv(qkv, dout, dqkv0), kGradAtol, kBf16Rtol + kGradRtol));
}

TEST_P(NnOpsAttentionTest, LongSequencesMatchTheAnalyticGradients) {
  // Sequences long enough for a kernel to split them into many blocks of queries and keys, the last one
  // partial: the forward against a double reference, the backward against the analytic gradients in
  // double (datt = dout v^T, dscore = att * (datt - rowsum(att * datt)) / sqrt(hd), dq = dscore k,
  // dk = dscore^T q, dv = att^T dout); the finite differences above check the formula itself.
  constexpr std::int64_t batch = 2, seq = 300, width = 48, heads = 3, hd = width / heads;
  const auto qkv = random_values(batch * seq * 3 * width, 31, -2.f, 2.f);
  const auto dout = random_values(batch * seq * width, 32), dqkv0 = random_values(batch * seq * 3 * width, 33);
  auto dev = device();
  Tensor tqkv = tensor_from(*dev, {batch, seq, 3 * width}, qkv);
  Tensor tout = leftovers(*dev, {batch, seq, width}), tatt = leftovers(*dev, {batch, heads, seq, seq});
  attention(compute(*dev), tqkv, tout, tatt, heads);
  Tensor tdout = tensor_from(*dev, {batch, seq, width}, dout);
  Tensor tdqkv = tensor_from(*dev, {batch, seq, 3 * width}, dqkv0);
  attention_backward(compute(*dev), tdout, tqkv, tatt, tdqkv, heads);
  const std::vector<float> got_out = read(tout), got_att = read(tatt), got_dqkv = read(tdqkv);

  // Element i of head h at position t of batch b: in part p (q, k, v) of qkv, and in out or dout.
  auto qkv_at = [&](std::int64_t b, std::int64_t t, int p, std::int64_t h, std::int64_t i) {
    return ((b * seq + t) * 3 + p) * width + h * hd + i;
  };
  auto out_at = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) {
    return (b * seq + t) * width + h * hd + i;
  };
  std::vector<double> out(got_out.size(), 0.0), att(got_att.size(), 0.0), dqkv(dqkv0.begin(), dqkv0.end());
  std::vector<double> datt(seq);
  const double scale = 1 / std::sqrt(static_cast<double>(hd));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t t = 0; t < seq; ++t) {
        double* a = &att[static_cast<std::size_t>(((b * heads + h) * seq + t) * seq)];
        double max = -1e300, sum = 0, a_dot_datt = 0;
        for (std::int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (std::int64_t i = 0; i < hd; ++i)
            d += static_cast<double>(qkv[qkv_at(b, t, 0, h, i)]) * qkv[qkv_at(b, j, 1, h, i)];
          a[j] = d * scale;
          max = std::max(max, a[j]);
        }
        for (std::int64_t j = 0; j <= t; ++j) sum += a[j] = std::exp(a[j] - max);
        for (std::int64_t j = 0; j <= t; ++j) {
          a[j] /= sum;
          datt[j] = 0;
          for (std::int64_t i = 0; i < hd; ++i) {
            out[out_at(b, t, h, i)] += a[j] * qkv[qkv_at(b, j, 2, h, i)];
            datt[j] += static_cast<double>(dout[out_at(b, t, h, i)]) * qkv[qkv_at(b, j, 2, h, i)];
          }
          a_dot_datt += a[j] * datt[j];
        }
        for (std::int64_t j = 0; j <= t; ++j) {
          const double dscore = a[j] * (datt[j] - a_dot_datt) * scale;
          for (std::int64_t i = 0; i < hd; ++i) {
            dqkv[qkv_at(b, t, 0, h, i)] += dscore * qkv[qkv_at(b, j, 1, h, i)];
            dqkv[qkv_at(b, j, 1, h, i)] += dscore * qkv[qkv_at(b, t, 0, h, i)];
            dqkv[qkv_at(b, j, 2, h, i)] += a[j] * dout[out_at(b, t, h, i)];
          }
        }
      }
    }
  }
  EXPECT_TRUE(all_close(got_out, out, 1e-6, 1e-4));
  EXPECT_TRUE(all_close(got_att, att, 1e-7, 1e-4));  // including the zeros above the diagonal
  EXPECT_TRUE(all_close(got_dqkv, dqkv, 1e-5, 1e-4));

  // Every sum has one order: a second backward adds exactly the same gradient again.
  Tensor tdqkv2 = tensor_from(*dev, {batch, seq, 3 * width}, dqkv0);
  attention_backward(compute(*dev), tdout, tqkv, tatt, tdqkv2, heads);
  EXPECT_EQ(read(tdqkv2), got_dqkv);
}

FSDPLAB_ON_EACH_DEVICE(NnOpsAttentionTest);

TEST(NnOpsAttention, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor qkv = zeros(*dev, {B, T, 3 * C}), out = zeros(*dev, {B, T, C}), att = zeros(*dev, {B, NH, T, T});
  Tensor qkv_odd = zeros(*dev, {B, T, 3 * C + 1}), out_bf16 = zeros(*dev, {B, T, C}, DType::bf16);
  Tensor att_bf16 = zeros(*dev, {B, NH, T, T}, DType::bf16), att_3 = zeros(*dev, {B, 3, T, T});
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { attention(s, qkv, out, att_3, 3); },
                           {"attention", "n_head must divide C = 8", "got n_head 3"}));
  EXPECT_TRUE(throws_error([&] { attention(s, qkv, out, att, 0); }, {"n_head must divide C = 8", "got n_head 0"}));
  EXPECT_TRUE(throws_error([&] { attention(s, qkv_odd, out, att, NH); },
                           {"qkv must be [B, T, 3C]", "25 is not a multiple of 3", "[2, 5, 25] f32"}));
  EXPECT_TRUE(throws_error([&] { attention(s, qkv, out_bf16, att, NH); },
                           {"attention", "out must be [2, 5, 8] f32", "[2, 5, 8] bf16"}));
  EXPECT_TRUE(throws_error([&] { attention(s, qkv, out, att_bf16, NH); }, {"att must be [2, 2, 5, 5] f32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { attention(s, out, out, att, NH); }, {"qkv must be [B, T, 3C]", "[2, 5, 8] f32"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(s, out, qkv, att, out, NH); },
                           {"attention_backward", "dqkv must be [2, 5, 24] f32", "[2, 5, 8] f32"}));
  EXPECT_TRUE(dev->ops().empty());
}

}  // namespace
}  // namespace fsdplab
