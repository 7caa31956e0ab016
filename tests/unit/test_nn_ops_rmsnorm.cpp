// rmsnorm and rmsnorm_backward against a double-precision reference of Llama's RMSNorm and finite
// differences; its cost; bf16 rounding once; operand errors.
#include "engine/tensor/rmsnorm.hpp"

#include <bit>
#include <cstdint>

#include "engine/tensor/elementwise.hpp"

#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr float kEps = 1e-5f;

struct RmsNormRef {
  std::vector<double> out, rstd;
};

// LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight, per row.
RmsNormRef rmsnorm_ref(std::span<const float> x, std::span<const float> w, int N, int C) {
  RmsNormRef r{std::vector<double>(x.size()), std::vector<double>(N)};
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int i = 0; i < C; ++i) ss += static_cast<double>(x[n * C + i]) * x[n * C + i];
    const double s = 1 / std::sqrt(ss / C + kEps);
    for (int i = 0; i < C; ++i) r.out[n * C + i] = x[n * C + i] * s * w[i];
    r.rstd[n] = s;
  }
  return r;
}

struct Inputs {
  int N = 6, C = 16;
  std::vector<float> x = random_values(6 * 16, 1, -2.f, 2.f);
  std::vector<float> w = random_values(16, 2, 0.5f, 1.5f);
  std::vector<float> dout = random_values(6 * 16, 4);
  // Nonzero starting gradients: the backward must add to them.
  std::vector<float> dx0 = random_values(6 * 16, 5);
  std::vector<float> dw0 = random_values(16, 6);

  Inputs rounded_to_bf16() const {
    Inputs r = *this;
    for (auto* v : {&r.x, &r.w, &r.dout, &r.dx0, &r.dw0}) *v = testing::rounded_to_bf16(*v);
    return r;
  }
};

struct Outputs {
  std::vector<float> out, rstd, dx, dw;
};

Outputs run(DeviceKind kind, const Inputs& in, DType dt) {
  auto dev = make_test_device(kind);
  const std::int64_t N = in.N, C = in.C;
  Tensor x = tensor_from(*dev, {N, C}, in.x, dt), w = tensor_from(*dev, {C}, in.w, dt);
  Tensor out = leftovers(*dev, {N, C}, dt), rstd = leftovers(*dev, {N});
  rmsnorm(compute(*dev), x, w, out, rstd, kEps);
  Tensor dout = tensor_from(*dev, {N, C}, in.dout, dt), dx = tensor_from(*dev, {N, C}, in.dx0, dt),
         dw = tensor_from(*dev, {C}, in.dw0, dt);
  rmsnorm_backward(compute(*dev), dout, x, w, rstd, dx, dw);
  return {read(out), read(rstd), read(dx), read(dw)};
}

struct ExpectedGrads {
  std::vector<double> dx, dw;
};
// The gradients of sum(rmsnorm(x, w) * dout), numerically, plus the starting gradients.
ExpectedGrads expected_grads(const Inputs& in) {
  auto loss = [&](std::span<const float> x, std::span<const float> w) {
    const auto r = rmsnorm_ref(x, w, in.N, in.C);
    double s = 0;
    for (std::size_t i = 0; i < r.out.size(); ++i) s += r.out[i] * in.dout[i];
    return s;
  };
  return {plus(in.dx0, numeric_grad([&](std::span<const float> x) { return loss(x, in.w); }, in.x)),
          plus(in.dw0, numeric_grad([&](std::span<const float> w) { return loss(in.x, w); }, in.w))};
}

// The numerical tests run on every device; the cost and the errors on the sim device.
class NnOpsRmsNormTest : public OnEachDevice {};

TEST_P(NnOpsRmsNormTest, ForwardMatchesReference) {
  const Inputs in;
  const Outputs got = run(GetParam(), in, DType::f32);
  const auto ref = rmsnorm_ref(in.x, in.w, in.N, in.C);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got.rstd, ref.rstd, 1e-6, 1e-5));
}

TEST_P(NnOpsRmsNormTest, NoMeanIsSubtracted) {
  // A row of constants c normalises to sign(c) * weight (LayerNorm would give 0): RMSNorm only rescales.
  Inputs in;
  for (int n = 0; n < in.N; ++n)
    for (int i = 0; i < in.C; ++i) in.x[n * in.C + i] = static_cast<float>(n + 1);
  const Outputs got = run(GetParam(), in, DType::f32);
  for (int n = 0; n < in.N; ++n)
    for (int i = 0; i < in.C; ++i) EXPECT_NEAR(got.out[n * in.C + i], in.w[i], 1e-5) << n << ", " << i;
}

TEST_P(NnOpsRmsNormTest, BackwardAddsTheFiniteDifferenceGradients) {
  const Inputs in;
  const Outputs got = run(GetParam(), in, DType::f32);
  const ExpectedGrads want = expected_grads(in);
  EXPECT_TRUE(all_close(got.dx, want.dx, kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(got.dw, want.dw, kGradAtol, kGradRtol));
}

TEST_P(NnOpsRmsNormTest, Bf16IsTheF32ResultRoundedOnce) {
  const Inputs in = Inputs{}.rounded_to_bf16();
  const Outputs got = run(GetParam(), in, DType::bf16);
  const auto ref = rmsnorm_ref(in.x, in.w, in.N, in.C);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-5, kBf16Rtol));
  EXPECT_TRUE(all_close(got.rstd, ref.rstd, 1e-6, 1e-5));  // statistics stay f32
  const ExpectedGrads want = expected_grads(in);
  // dx: the input's gradient g is rounded before it is added into dx0 (bit for bit a separate add), so that
  // rounding is relative to g, not to the sum dx0 + g.
  for (std::size_t i = 0; i < got.dx.size(); ++i) {
    const double g = want.dx[i] - in.dx0[i];
    EXPECT_NEAR(got.dx[i], want.dx[i], kGradAtol + (kBf16Rtol + kGradRtol) * (std::abs(g) + std::abs(want.dx[i])))
        << "dx[" << i << "]";
  }
  EXPECT_TRUE(all_close(got.dw, want.dw, kGradAtol, kBf16Rtol + kGradRtol));
}

TEST_P(NnOpsRmsNormTest, AddingIntoAResidualGradientIsBitForBitASeparateAdd) {
  // Llama's RMSNorm backward_adding_to, as the LayerNorm's (test_nn_ops_layernorm.cpp).
  const Inputs in = Inputs{}.rounded_to_bf16();
  auto dev = make_test_device(GetParam());
  const Stream s = compute(*dev);
  const std::int64_t N = in.N, C = in.C;
  const std::vector<float> residual_grad = random_values(static_cast<std::size_t>(N * C), 8, -50.f, 50.f);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = tensor_from(*dev, {N, C}, in.x, dt), w = tensor_from(*dev, {C}, in.w, dt),
           dout = tensor_from(*dev, {N, C}, in.dout, dt);
    Tensor out = leftovers(*dev, {N, C}, dt), rstd = leftovers(*dev, {N});
    rmsnorm(s, x, w, out, rstd, kEps);
    Tensor dw = zeros(*dev, {C}, dt);  // live until the ops that write it are read
    Tensor fused = tensor_from(*dev, {N, C}, residual_grad, dt);
    rmsnorm_backward(s, dout, x, w, rstd, fused, dw);
    Tensor separate = zeros(*dev, {N, C}, dt);
    rmsnorm_backward(s, dout, x, w, rstd, separate, dw);
    add(s, separate, tensor_from(*dev, {N, C}, residual_grad, dt), separate);
    const std::vector<float> a = read(fused), e = read(separate);
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(e[i])) << "element " << i;
  }
}

TEST_P(NnOpsRmsNormTest, WideRowsMatchTheAnalyticGradients) {
  // Rows wider than a warp and more rows than the column sum's row lanes, C not a multiple of their
  // strips: the analytic gradients in double (the finite differences above check the formula itself).
  Inputs in;
  in.N = 150;
  in.C = 1000;
  const std::size_t nc = static_cast<std::size_t>(in.N * in.C), c = static_cast<std::size_t>(in.C);
  in.x = random_values(nc, 1, -2.f, 2.f);
  in.w = random_values(c, 2, 0.5f, 1.5f);
  in.dout = random_values(nc, 4);
  in.dx0 = random_values(nc, 5);
  in.dw0 = random_values(c, 6);
  const Outputs got = run(GetParam(), in, DType::f32);
  const auto ref = rmsnorm_ref(in.x, in.w, in.N, in.C);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got.rstd, ref.rstd, 1e-6, 1e-5));
  std::vector<double> dx(nc), dw(in.dw0.begin(), in.dw0.end());
  for (int n = 0; n < in.N; ++n) {
    double dnorm_norm_mean = 0;
    for (int i = 0; i < in.C; ++i) {
      const double norm = in.x[n * in.C + i] * ref.rstd[n], g = in.dout[n * in.C + i];
      dnorm_norm_mean += in.w[i] * g * norm / in.C;
      dw[i] += norm * g;
    }
    for (int i = 0; i < in.C; ++i) {
      const double norm = in.x[n * in.C + i] * ref.rstd[n];
      dx[n * in.C + i] =
          in.dx0[n * in.C + i] + ref.rstd[n] * (in.w[i] * in.dout[n * in.C + i] - norm * dnorm_norm_mean);
    }
  }
  EXPECT_TRUE(all_close(got.dx, dx, 1e-5, 1e-4));
  EXPECT_TRUE(all_close(got.dw, dw, 1e-4, 1e-4));
  // Every sum has one order: a second run gives the same bits.
  const Outputs again = run(GetParam(), in, DType::f32);
  EXPECT_EQ(again.out, got.out);
  EXPECT_EQ(again.dx, got.dx);
  EXPECT_EQ(again.dw, got.dw);
}

FSDPLAB_ON_EACH_DEVICE(NnOpsRmsNormTest);

TEST(NnOpsRmsNorm, StatesItsCostAndItsAccesses) {
  auto dev = make_sim_device();
  Tensor x = zeros(*dev, {64, 128}, DType::bf16), w = zeros(*dev, {128}, DType::bf16);
  Tensor out = zeros(*dev, {64, 128}, DType::bf16), rstd = zeros(*dev, {64});
  rmsnorm(compute(*dev), x, w, out, rstd, kEps);
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.name, "rmsnorm");
  EXPECT_DOUBLE_EQ(op.cost.flops, 4.0 * 64 * 128);
  EXPECT_DOUBLE_EQ(op.cost.bytes, 2.0 * (2 * 64 * 128 + 128) + 4.0 * 64);
  EXPECT_EQ(op.reads.size(), 2u);
  EXPECT_EQ(op.writes.size(), 2u);
}

TEST(NnOpsRmsNorm, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor x = zeros(*dev, {4, 8}), w = zeros(*dev, {8}), out = zeros(*dev, {4, 8}), rstd = zeros(*dev, {4});
  Tensor w_short = zeros(*dev, {6}), w_bf16 = zeros(*dev, {8}, DType::bf16), rstd_bf16 = zeros(*dev, {4}, DType::bf16);
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { rmsnorm(s, x, w_short, out, rstd, kEps); },
                           {"rmsnorm", "weight must be [8] f32", "[6] f32"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm(s, x, w_bf16, out, rstd, kEps); }, {"weight must be [8] f32", "[8] bf16"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm(s, x, w, out, rstd_bf16, kEps); }, {"rstd must be [4] f32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm(s, x, w, x, rstd, kEps); }, {"out", "shares memory with x"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm(s, x, w, out, rstd, -1.f); }, {"eps must be finite and >= 0", "-1"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm_backward(s, out, x, w, rstd, x, w); },
                           {"rmsnorm_backward", "dx", "shares memory with x"}));
  EXPECT_TRUE(dev->ops().empty());
}

}  // namespace
}  // namespace fsdplab
