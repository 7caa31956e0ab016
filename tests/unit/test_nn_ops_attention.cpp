// attention and attention_backward against a double-precision reference of
// F.scaled_dot_product_attention(q, k, v, is_causal=True) on GPT-2's c_attn layout, and finite
// differences.
#include "engine/tensor/attention.hpp"

#include "causal_attention.hpp"
#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr int B = 2, T = 5, C = 8, NH = 2, HD = C / NH;

const reference::AttentionSizes kSizes{B, T, C, NH};

reference::AttentionForward attention_ref(std::span<const float> qkv) {
  return reference::causal_attention_forward(kSizes, reference::widened(qkv));
}

struct Outputs {
  std::vector<float> out, att, dqkv;
};

// The forward, then the backward from dout into a dqkv holding leftovers, which it must overwrite.
Outputs run(DeviceKind kind, const std::vector<float>& qkv, const std::vector<float>& dout, DType dt) {
  auto dev = make_test_device(kind);
  Tensor tqkv = tensor_from(*dev, {B, T, 3 * C}, qkv, dt);
  Tensor tout = leftovers(*dev, {B, T, C}, dt), tatt = leftovers(*dev, {B, NH, T, T});
  attention(compute(*dev), tqkv, tout, tatt, NH);
  Tensor tdout = tensor_from(*dev, {B, T, C}, dout, dt), tdqkv = leftovers(*dev, {B, T, 3 * C}, dt);
  attention_backward(compute(*dev), tdout, tqkv, tatt, tdqkv, NH);
  return {read(tout), read(tatt), read(tdqkv)};
}

std::vector<double> expected_dqkv(const std::vector<float>& qkv, const std::vector<float>& dout) {
  return numeric_grad(
      [&](std::span<const float> x) {
        const auto out = attention_ref(x).out;
        double s = 0;
        for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
        return s;
      },
      qkv);
}

const std::vector<float> kQkv = random_values(B * T * 3 * C, 21, -2.f, 2.f);
const std::vector<float> kDout = random_values(B * T * C, 22);

// The numerical tests run on every device; the errors on the sim device.
class NnOpsAttentionTest : public OnEachDevice {};

TEST_P(NnOpsAttentionTest, ForwardMatchesReference) {
  const Outputs got = run(GetParam(), kQkv, kDout, DType::f32);
  const reference::AttentionForward ref = attention_ref(kQkv);
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
  const Outputs got = run(GetParam(), qkv, kDout, DType::f32);
  EXPECT_TRUE(all_close(got.out, want, 1e-6, 1e-5));
}

TEST_P(NnOpsAttentionTest, BackwardWritesTheFiniteDifferenceGradients) {
  const Outputs got = run(GetParam(), kQkv, kDout, DType::f32);
  EXPECT_TRUE(all_close(got.dqkv, expected_dqkv(kQkv, kDout), kGradAtol, kGradRtol));
}

TEST_P(NnOpsAttentionTest, Bf16IsTheF32ResultRoundedOnce) {
  // The reference sees the same bf16-rounded inputs, att stays f32 and nothing else is rounded in
  // between, so out and dqkv may differ from it by one rounding (plus the finite differences' error).
  const auto qkv = rounded_to_bf16(kQkv), dout = rounded_to_bf16(kDout);
  const Outputs got = run(GetParam(), qkv, dout, DType::bf16);
  const reference::AttentionForward ref = attention_ref(qkv);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-6, kBf16Rtol));
  EXPECT_TRUE(all_close(got.att, ref.att, 1e-7, 1e-5));
  EXPECT_TRUE(all_close(got.dqkv, expected_dqkv(qkv, dout), kGradAtol, kBf16Rtol + kGradRtol));
}

TEST_P(NnOpsAttentionTest, LongSequencesMatchTheAnalyticGradients) {
  // Sequences long enough for a kernel to split them into many blocks of queries and keys, the last one
  // partial: the forward and the analytic backward in double (tests/reference/causal_attention.hpp); the
  // finite differences above check the formula itself.
  constexpr std::int64_t batch = 2, seq = 300, width = 48, heads = 3;
  const auto qkv = random_values(batch * seq * 3 * width, 31, -2.f, 2.f);
  const auto dout = random_values(batch * seq * width, 32);
  auto dev = device();
  Tensor tqkv = tensor_from(*dev, {batch, seq, 3 * width}, qkv);
  Tensor tout = leftovers(*dev, {batch, seq, width}), tatt = leftovers(*dev, {batch, heads, seq, seq});
  attention(compute(*dev), tqkv, tout, tatt, heads);
  Tensor tdout = tensor_from(*dev, {batch, seq, width}, dout);
  Tensor tdqkv = leftovers(*dev, {batch, seq, 3 * width});
  attention_backward(compute(*dev), tdout, tqkv, tatt, tdqkv, heads);
  const std::vector<float> got_out = read(tout), got_att = read(tatt), got_dqkv = read(tdqkv);

  const reference::AttentionSizes n{batch, seq, width, heads};
  const std::vector<double> qkv_d = reference::widened(qkv);
  const reference::AttentionForward want = reference::causal_attention_forward(n, qkv_d);
  const std::vector<double> want_dqkv =
      reference::causal_attention_backward(n, qkv_d, want.att, reference::widened(dout));
  EXPECT_TRUE(all_close(got_out, want.out, 1e-6, 1e-4));
  EXPECT_TRUE(all_close(got_att, want.att, 1e-7, 1e-4));  // including the zeros above the diagonal
  EXPECT_TRUE(all_close(got_dqkv, want_dqkv, 1e-5, 1e-4));

  // Every sum has one order: a second backward, into other leftovers, writes exactly the same gradient again.
  Tensor tdqkv2 = tensor_from(*dev, {batch, seq, 3 * width}, random_values(batch * seq * 3 * width, 33));
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
