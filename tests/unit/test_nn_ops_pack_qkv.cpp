// pack_qkv and pack_qkv_backward: grouped-query attention on the fused attention op. The packed layout
// (query head h reads key/value head h / R, as Hugging Face's repeat_kv), grouped attention through
// pack + attention against a double-precision reference that never repeats anything, its backward
// against finite differences (k and v summing over the heads that share them), and operand errors.
#include "engine/tensor/pack_qkv.hpp"

#include "engine/tensor/attention.hpp"
#include "engine/tensor/elementwise.hpp"
#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr int B = 2, T = 4, H = 4, KV = 2, R = H / KV, HD = 4, C = H * HD, K = KV * HD;

// The numerical tests run on every device; the errors on the sim device.
class NnOpsPackQkvTest : public OnEachDevice {};

TEST_P(NnOpsPackQkvTest, QueryHeadsReadTheirGroupsKeyAndValueHead) {
  auto dev = device();
  std::vector<float> q(B * T * C), k(B * T * K), v(B * T * K);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = 1000.f + static_cast<float>(i);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 2000.f + static_cast<float>(i);
  Tensor tq = tensor_from(*dev, {B, T, C}, q), tk = tensor_from(*dev, {B, T, K}, k),
         tv = tensor_from(*dev, {B, T, K}, v);
  Tensor qkv = leftovers(*dev, {B, T, 3 * C});
  pack_qkv(compute(*dev), tq, tk, tv, qkv, H, KV);
  const std::vector<float> got = read(qkv);
  for (int n = 0; n < B * T; ++n)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < HD; ++i) {
        EXPECT_EQ(got[n * 3 * C + h * HD + i], q[n * C + h * HD + i]);
        EXPECT_EQ(got[n * 3 * C + C + h * HD + i], k[n * K + (h / R) * HD + i]) << "head " << h;
        EXPECT_EQ(got[n * 3 * C + 2 * C + h * HD + i], v[n * K + (h / R) * HD + i]) << "head " << h;
      }
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.name, "pack_qkv");
  EXPECT_DOUBLE_EQ(op.cost.bytes, 4.0 * B * T * (C + 2 * K + 3 * C));
  EXPECT_EQ(op.reads.size(), 3u);
  EXPECT_EQ(op.writes.size(), 1u);
}

// Causal grouped attention in double, straight from the definition: query head h attends with key and
// value head h / R; out [B, T, C].
std::vector<double> gqa_ref(std::span<const float> q, std::span<const float> k, std::span<const float> v) {
  std::vector<double> out(B * T * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int g = h / R;
      for (int t = 0; t < T; ++t) {
        std::vector<double> p(t + 1);
        double max = -1e300, sum = 0;
        for (int s = 0; s <= t; ++s) {
          double d = 0;
          for (int i = 0; i < HD; ++i)
            d += static_cast<double>(q[(b * T + t) * C + h * HD + i]) * k[(b * T + s) * K + g * HD + i];
          p[s] = d / std::sqrt(static_cast<double>(HD));
          max = std::max(max, p[s]);
        }
        for (double& x : p) sum += std::exp(x - max);
        for (int s = 0; s <= t; ++s)
          for (int i = 0; i < HD; ++i)
            out[(b * T + t) * C + h * HD + i] += std::exp(p[s] - max) / sum * v[(b * T + s) * K + g * HD + i];
      }
    }
  return out;
}

const std::vector<float> kQ = random_values(B * T * C, 51, -2.f, 2.f);
const std::vector<float> kK = random_values(B * T * K, 52, -2.f, 2.f);
const std::vector<float> kV = random_values(B * T * K, 53, -2.f, 2.f);
const std::vector<float> kDout = random_values(B * T * C, 54);

struct Grads {
  std::vector<float> out, dq, dk, dv;
};

// pack, attention, and back through both, as LlamaAttention does; dq, dk, dv start as leftovers.
Grads run(DeviceKind kind) {
  auto dev = make_test_device(kind);
  const Stream s = compute(*dev);
  Tensor q = tensor_from(*dev, {B, T, C}, kQ), k = tensor_from(*dev, {B, T, K}, kK),
         v = tensor_from(*dev, {B, T, K}, kV);
  Tensor qkv = leftovers(*dev, {B, T, 3 * C}), out = leftovers(*dev, {B, T, C}), att = leftovers(*dev, {B, H, T, T});
  pack_qkv(s, q, k, v, qkv, H, KV);
  attention(s, qkv, out, att, H);
  Tensor dout = tensor_from(*dev, {B, T, C}, kDout), dqkv = zeros(*dev, {B, T, 3 * C});
  attention_backward(s, dout, qkv, att, dqkv, H);
  Tensor dq = leftovers(*dev, {B, T, C}), dk = leftovers(*dev, {B, T, K}), dv = leftovers(*dev, {B, T, K});
  pack_qkv_backward(s, dqkv, dq, dk, dv, H, KV);
  return {read(out), read(dq), read(dk), read(dv)};
}

TEST_P(NnOpsPackQkvTest, GroupedAttentionMatchesTheReference) {
  EXPECT_TRUE(all_close(run(GetParam()).out, gqa_ref(kQ, kK, kV), 1e-5, 1e-5));
}

TEST_P(NnOpsPackQkvTest, BackwardSumsOverTheRepeats) {
  const Grads got = run(GetParam());
  auto loss = [&](std::span<const float> q, std::span<const float> k, std::span<const float> v) {
    const auto out = gqa_ref(q, k, v);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * kDout[i];
    return s;
  };
  EXPECT_TRUE(all_close(got.dq, numeric_grad([&](std::span<const float> q) { return loss(q, kK, kV); }, kQ),
                        kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(got.dk, numeric_grad([&](std::span<const float> k) { return loss(kQ, k, kV); }, kK),
                        kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(got.dv, numeric_grad([&](std::span<const float> v) { return loss(kQ, kK, v); }, kV),
                        kGradAtol, kGradRtol));
}

TEST_P(NnOpsPackQkvTest, Bf16BackwardRoundsTheSumOnce) {
  // Two query heads share each key head: their gradients sum (in f32), and a bf16 dk holds that sum
  // rounded once.
  auto dev = device();
  std::vector<float> dqkv(B * T * 3 * C, 0.f);
  for (int n = 0; n < B * T; ++n)
    for (int h = 0; h < H; ++h) dqkv[n * 3 * C + C + h * HD] = h % R == 0 ? 1.f / 3 : 1.f / 3 + 1.f / 512;
  Tensor tdqkv = tensor_from(*dev, {B, T, 3 * C}, dqkv), dq = leftovers(*dev, {B, T, C}),
         dk = leftovers(*dev, {B, T, K}), dv = leftovers(*dev, {B, T, K});
  pack_qkv_backward(compute(*dev), tdqkv, dq, dk, dv, H, KV);
  const std::vector<float> f32 = read(dk);
  EXPECT_FLOAT_EQ(f32[0], 2.f / 3 + 1.f / 512);
  Tensor b_dqkv = tensor_from(*dev, {B, T, 3 * C}, dqkv, DType::bf16), b_dq = leftovers(*dev, {B, T, C}, DType::bf16),
         b_dk = leftovers(*dev, {B, T, K}, DType::bf16), b_dv = leftovers(*dev, {B, T, K}, DType::bf16);
  pack_qkv_backward(compute(*dev), b_dqkv, b_dq, b_dk, b_dv, H, KV);
  const std::vector<float> in = rounded_to_bf16(dqkv);
  EXPECT_EQ(read(b_dk)[0], round_to_bf16(in[C] + in[C + HD]));
}

TEST_P(NnOpsPackQkvTest, ManyRowsOfWideHeadsPackAndSumInHeadOrder) {
  // Rows wider than a block (3C = 1536), four query heads a key/value head: the pack moves bits, the
  // backward copies dq and sums each group's heads in f32 in head order from zero, bit for bit, over
  // gradients that start as leftovers.
  auto dev = device();
  const int n = 300, h = 8, kv = 2, hd = 64, c = h * hd, k = kv * hd, r = h / kv;
  const auto q = random_values(n * c, 58), kk = random_values(n * k, 59), v = random_values(n * k, 60);
  const auto dqkv = random_values(n * 3 * c, 61);
  std::vector<float> packed(n * 3 * c), dq_want(n * c), dk_want(n * k), dv_want(n * k);
  for (int row = 0; row < n; ++row) {
    for (int j = 0; j < c; ++j) {
      const int src = row * k + (j / hd / r) * hd + j % hd;
      packed[row * 3 * c + j] = q[row * c + j];
      packed[row * 3 * c + c + j] = kk[src];
      packed[row * 3 * c + 2 * c + j] = v[src];
      dq_want[row * c + j] = dqkv[row * 3 * c + j];
    }
    for (int j = 0; j < k; ++j) {
      float sk = 0.f, sv = 0.f;
      for (int head = (j / hd) * r; head < (j / hd + 1) * r; ++head) {
        sk += dqkv[row * 3 * c + c + head * hd + j % hd];
        sv += dqkv[row * 3 * c + 2 * c + head * hd + j % hd];
      }
      dk_want[row * k + j] = sk;
      dv_want[row * k + j] = sv;
    }
  }
  const Stream s = compute(*dev);
  Tensor tqkv = leftovers(*dev, {1, n, 3 * c});
  pack_qkv(s, tensor_from(*dev, {1, n, c}, q), tensor_from(*dev, {1, n, k}, kk), tensor_from(*dev, {1, n, k}, v), tqkv,
           h, kv);
  EXPECT_EQ(read(tqkv), packed);
  Tensor dq = leftovers(*dev, {1, n, c}), dk = leftovers(*dev, {1, n, k}), dv = leftovers(*dev, {1, n, k});
  pack_qkv_backward(s, tensor_from(*dev, {1, n, 3 * c}, dqkv), dq, dk, dv, h, kv);
  EXPECT_EQ(read(dq), dq_want);
  EXPECT_EQ(read(dk), dk_want);
  EXPECT_EQ(read(dv), dv_want);
}

TEST(NnOpsPackQkv, BackwardStatesItsCostAndAccesses) {
  auto dev = make_sim_device();
  Tensor dqkv = zeros(*dev, {B, T, 3 * C}, DType::bf16), dq = zeros(*dev, {B, T, C}, DType::bf16),
         dk = zeros(*dev, {B, T, K}, DType::bf16), dv = zeros(*dev, {B, T, K}, DType::bf16);
  pack_qkv_backward(compute(*dev), dqkv, dq, dk, dv, H, KV);
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.name, "pack_qkv_backward");
  EXPECT_DOUBLE_EQ(op.cost.bytes, 2.0 * B * T * (3 * C + C + 2 * K));  // dqkv read; dq, dk and dv written
  EXPECT_DOUBLE_EQ(op.cost.flops, 2.0 * B * T * C);                    // one sum per k and v element of dqkv
  EXPECT_EQ(op.reads.size(), 1u);
  EXPECT_EQ(op.writes.size(), 3u);
}

TEST(NnOpsPackQkv, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor q = zeros(*dev, {B, T, C}), k = zeros(*dev, {B, T, K}), v = zeros(*dev, {B, T, K}),
         qkv = zeros(*dev, {B, T, 3 * C});
  Tensor k_wide = zeros(*dev, {B, T, C}), qkv_short = zeros(*dev, {B, T, C + 2 * K});
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { pack_qkv(s, q, k, v, qkv, H, 3); },
                           {"pack_qkv", "n_kv_heads must divide n_heads = 4", "got 3"}));
  EXPECT_TRUE(throws_error([&] { pack_qkv(s, q, k, v, qkv, 3, 1); }, {"n_heads must divide", "16", "got n_heads 3"}));
  EXPECT_TRUE(
      throws_error([&] { pack_qkv(s, q, k_wide, v, qkv, H, KV); }, {"k must be [2, 4, 8] f32", "[2, 4, 16] f32"}));
  EXPECT_TRUE(throws_error([&] { pack_qkv(s, q, k, v, qkv_short, H, KV); },
                           {"qkv must be [2, 4, 48] f32", "[2, 4, 32] f32"}));
  EXPECT_TRUE(throws_error([&] { pack_qkv_backward(s, qkv, q, k, k, H, KV); },
                           {"pack_qkv_backward", "dk", "shares memory with", "dv"}));
  EXPECT_TRUE(dev->ops().empty());
}

FSDPLAB_ON_EACH_DEVICE(NnOpsPackQkvTest);

}  // namespace
}  // namespace fsdplab
