// rope and rope_backward: Hugging Face's rotate_half convention checked element by element against a
// double-precision reference, the properties that make it a position encoding (position 0 is the
// identity, norms are kept, q.k depends only on the distance between positions), in place, the
// backward against finite differences, bf16 rounding once, and operand errors.
#include "engine/tensor/rope.hpp"

#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr int B = 2, T = 5, H = 3, HD = 8, W = H * HD;
constexpr float kTheta = 10000.f;

// apply_rotary_pos_emb(x, cos, sin) = x * cos + rotate_half(x) * sin with rotate_half(x) =
// cat(-x2, x1), cos and sin of t * theta^(-2i/hd) repeated over both halves.
std::vector<double> rope_ref(std::span<const float> x, double theta = kTheta) {
  std::vector<double> out(x.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < HD; ++i) {
          const int j = i % (HD / 2);
          const double angle = t * std::pow(theta, -2.0 * j / HD);
          const std::size_t base = static_cast<std::size_t>(((b * T + t) * H + h) * HD);
          const double rotated = i < HD / 2 ? -static_cast<double>(x[base + i + HD / 2]) : x[base + i - HD / 2];
          out[base + i] = x[base + i] * std::cos(angle) + rotated * std::sin(angle);
        }
  return out;
}

std::vector<float> run_forward(DeviceKind kind, const std::vector<float>& x, DType dt = DType::f32) {
  auto dev = make_test_device(kind);
  Tensor tx = tensor_from(*dev, {B, T, W}, x, dt), out = leftovers(*dev, {B, T, W}, dt);
  rope(compute(*dev), tx, out, H, kTheta);
  return read(out);
}

const std::vector<float> kX = random_values(B * T * W, 31, -2.f, 2.f);

// The numerical tests run on every device; the errors on the sim device.
class NnOpsRopeTest : public OnEachDevice {};

TEST_P(NnOpsRopeTest, ForwardMatchesHuggingFacesRotateHalf) {
  EXPECT_TRUE(all_close(run_forward(GetParam(), kX), rope_ref(kX), 2e-6, 1e-5));
}

TEST_P(NnOpsRopeTest, PositionZeroIsTheIdentityAndNormsAreKept) {
  const std::vector<float> out = run_forward(GetParam(), kX);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const std::size_t base = static_cast<std::size_t>(((b * T + t) * H + h) * HD);
        double before = 0, after = 0;
        for (int i = 0; i < HD; ++i) {
          before += static_cast<double>(kX[base + i]) * kX[base + i];
          after += static_cast<double>(out[base + i]) * out[base + i];
          if (t == 0) {
            EXPECT_EQ(out[base + i], kX[base + i]) << "position 0 rotates by angle 0";
          }
        }
        EXPECT_NEAR(after, before, 1e-5 * before) << "a rotation keeps the head's norm";
      }
}

TEST_P(NnOpsRopeTest, QueryKeyProductsDependOnlyOnTheDistance) {
  // The same q at every position and the same k at every position: after the rotation, q_t . k_s
  // is a function of t - s alone, which is what makes RoPE a relative position encoding.
  const std::vector<float> q = random_values(W, 41), k = random_values(W, 42);
  std::vector<float> qs, ks;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      qs.insert(qs.end(), q.begin(), q.end());
      ks.insert(ks.end(), k.begin(), k.end());
    }
  const std::vector<float> rq = run_forward(GetParam(), qs), rk = run_forward(GetParam(), ks);
  auto dot_at = [&](int t, int s, int h) {
    double d = 0;
    for (int i = 0; i < HD; ++i) d += static_cast<double>(rq[(t * H + h) * HD + i]) * rk[(s * H + h) * HD + i];
    return d;
  };
  for (int h = 0; h < H; ++h)
    for (int t = 1; t < T; ++t)
      for (int s = 1; s <= t; ++s) EXPECT_NEAR(dot_at(t, s, h), dot_at(t - s, 0, h), 1e-5) << t << ", " << s;
}

TEST_P(NnOpsRopeTest, InPlaceEqualsOutOfPlace) {
  auto dev = device();
  Tensor x = tensor_from(*dev, {B, T, W}, kX);
  rope(compute(*dev), x, x, H, kTheta);
  EXPECT_EQ(read(x), run_forward(GetParam(), kX));
}

TEST_P(NnOpsRopeTest, BackwardWritesTheFiniteDifferenceGradient) {
  const std::vector<float> dout = random_values(B * T * W, 32);
  auto dev = device();
  Tensor tdout = tensor_from(*dev, {B, T, W}, dout), tdx = leftovers(*dev, {B, T, W});
  rope_backward(compute(*dev), tdout, tdx, H, kTheta);
  const auto want = numeric_grad(
      [&](std::span<const float> x) {
        const auto out = rope_ref(x);
        double s = 0;
        for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
        return s;
      },
      kX);
  EXPECT_TRUE(all_close(read(tdx), want, kGradAtol, kGradRtol));
}

TEST_P(NnOpsRopeTest, BackwardInPlaceEqualsOutOfPlace) {
  // LlamaAttention turns dq and dk back in place.
  const std::vector<float> dout = random_values(B * T * W, 32);
  auto dev = device();
  Tensor d = tensor_from(*dev, {B, T, W}, dout), dx = leftovers(*dev, {B, T, W});
  rope_backward(compute(*dev), d, dx, H, kTheta);
  rope_backward(compute(*dev), d, d, H, kTheta);
  EXPECT_EQ(read(d), read(dx));
}

TEST_P(NnOpsRopeTest, Bf16IsTheF32ResultRoundedOnce) {
  const std::vector<float> x = rounded_to_bf16(kX);
  EXPECT_TRUE(all_close(run_forward(GetParam(), x, DType::bf16), rope_ref(x), 1e-6, kBf16Rtol));
}

TEST_P(NnOpsRopeTest, ThetaSetsTheFrequencies) {
  // With theta = 1 every pair turns by the angle t alone.
  auto dev = device();
  Tensor x = tensor_from(*dev, {B, T, W}, kX), out = leftovers(*dev, {B, T, W});
  rope(compute(*dev), x, out, H, 1.f);
  EXPECT_TRUE(all_close(read(out), rope_ref(kX, 1.0), 2e-6, 1e-5));
}

TEST_P(NnOpsRopeTest, LlamaSizedHeadsOverLongSequences) {
  // Head dim 128 (64 pairs), 300 positions: angles up to 300 radians, where the f32 angle itself is only
  // good to ~2e-5; the backward rotates back exactly what the forward turned.
  auto dev = device();
  const int b = 2, t = 300, h = 4, hd = 128, w = h * hd;
  const auto x = random_values(b * t * w, 34);
  std::vector<double> want(x.size());
  for (int row = 0; row < b * t; ++row) {
    const int pos = row % t;
    for (int head = 0; head < h; ++head)
      for (int i = 0; i < hd / 2; ++i) {
        const double angle = pos * std::pow(10000.0, -2.0 * i / hd);
        const std::size_t e = static_cast<std::size_t>((row * h + head) * hd + i);
        want[e] = x[e] * std::cos(angle) - x[e + hd / 2] * std::sin(angle);
        want[e + hd / 2] = x[e + hd / 2] * std::cos(angle) + x[e] * std::sin(angle);
      }
  }
  Tensor tx = tensor_from(*dev, {b, t, w}, x), out = leftovers(*dev, {b, t, w});
  rope(compute(*dev), tx, out, h, kTheta);
  EXPECT_TRUE(all_close(read(out), want, 1e-4));
  Tensor back = leftovers(*dev, {b, t, w});
  rope_backward(compute(*dev), out, back, h, kTheta);
  EXPECT_TRUE(all_close(read(back), x, 1e-5));
}

TEST(NnOpsRope, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor x = zeros(*dev, {B, T, W}), out = zeros(*dev, {B, T, W}), out_bf16 = zeros(*dev, {B, T, W}, DType::bf16);
  Tensor flat = zeros(*dev, {B * T, W});
  const Stream s = compute(*dev);
  EXPECT_TRUE(
      throws_error([&] { rope(s, x, out, 5, kTheta); }, {"rope", "n_heads must divide", "24", "got n_heads 5"}));
  EXPECT_TRUE(throws_error([&] { rope(s, x, out, 8, kTheta); }, {"head dimension must be even", "got 3"}));
  EXPECT_TRUE(throws_error([&] { rope(s, x, out_bf16, H, kTheta); }, {"out must be [2, 5, 24] f32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { rope(s, flat, flat, H, kTheta); }, {"x must be [B, T, H * head_dim]", "[10, 24]"}));
  Tensor both = zeros(*dev, {B * T * W + 1});
  EXPECT_TRUE(throws_error([&] { rope(s, both.view(0, {B, T, W}), both.view(1, {B, T, W}), H, kTheta); },
                           {"rope: out", "partly overlaps x"}));
  EXPECT_TRUE(throws_error([&] { rope(s, x, out, H, 0.f); }, {"theta must be finite and > 0"}));
  EXPECT_TRUE(throws_error([&] { rope_backward(s, both.view(1, {B, T, W}), both.view(0, {B, T, W}), H, kTheta); },
                           {"rope_backward: dx", "partly overlaps dout"}));
  EXPECT_TRUE(dev->ops().empty());
}

FSDPLAB_ON_EACH_DEVICE(NnOpsRopeTest);

}  // namespace
}  // namespace fsdplab
