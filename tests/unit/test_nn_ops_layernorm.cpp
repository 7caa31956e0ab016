// layernorm and layernorm_backward against a double-precision reference and finite differences.
#include "engine/tensor/layernorm.hpp"

#include <bit>
#include <cstdint>

#include "engine/tensor/elementwise.hpp"

#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

struct LayerNormRef {
  std::vector<double> out, mean, rstd;
};

// nn.LayerNorm: biased variance, eps inside the square root.
LayerNormRef layernorm_ref(std::span<const float> x, std::span<const float> w, std::span<const float> b, int N,
                           int C, double eps = 1e-5) {
  LayerNormRef r{std::vector<double>(x.size()), std::vector<double>(N), std::vector<double>(N)};
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int i = 0; i < C; ++i) m += x[n * C + i];
    m /= C;
    for (int i = 0; i < C; ++i) v += (x[n * C + i] - m) * (x[n * C + i] - m);
    v /= C;
    const double s = 1 / std::sqrt(v + eps);
    for (int i = 0; i < C; ++i) r.out[n * C + i] = (x[n * C + i] - m) * s * w[i] + b[i];
    r.mean[n] = m;
    r.rstd[n] = s;
  }
  return r;
}

struct Inputs {
  int N = 6, C = 16;
  std::vector<float> x = random_values(6 * 16, 1, -2.f, 2.f);
  std::vector<float> w = random_values(16, 2, 0.5f, 1.5f);
  std::vector<float> b = random_values(16, 3);
  std::vector<float> dout = random_values(6 * 16, 4);
  // Nonzero starting gradients: the backward must add to them.
  std::vector<float> dx0 = random_values(6 * 16, 5);
  std::vector<float> dw0 = random_values(16, 6);
  std::vector<float> db0 = random_values(16, 7);

  Inputs rounded_to_bf16() const {
    Inputs r = *this;
    for (auto* v : {&r.x, &r.w, &r.b, &r.dout, &r.dx0, &r.dw0, &r.db0}) *v = testing::rounded_to_bf16(*v);
    return r;
  }
};

struct Outputs {
  std::vector<float> out, mean, rstd, dx, dw, db;
};

Outputs run(DeviceKind kind, const Inputs& in, DType dt) {
  auto dev = make_test_device(kind);
  const std::int64_t N = in.N, C = in.C;
  Tensor x = tensor_from(*dev, {N, C}, in.x, dt), w = tensor_from(*dev, {C}, in.w, dt),
         b = tensor_from(*dev, {C}, in.b, dt);
  Tensor out = leftovers(*dev, {N, C}, dt), mean = leftovers(*dev, {N}), rstd = leftovers(*dev, {N});
  layernorm(compute(*dev), x, w, b, out, mean, rstd);
  Tensor dout = tensor_from(*dev, {N, C}, in.dout, dt), dx = tensor_from(*dev, {N, C}, in.dx0, dt),
         dw = tensor_from(*dev, {C}, in.dw0, dt), db = tensor_from(*dev, {C}, in.db0, dt);
  layernorm_backward(compute(*dev), dout, x, w, mean, rstd, dx, dw, db);
  return {read(out), read(mean), read(rstd), read(dx), read(dw), read(db)};
}

// The gradients of sum(layernorm(x, w, b) * dout), numerically, plus the starting gradients.
struct ExpectedGrads {
  std::vector<double> dx, dw, db;
};
ExpectedGrads expected_grads(const Inputs& in) {
  auto loss = [&](std::span<const float> x, std::span<const float> w, std::span<const float> b) {
    const auto r = layernorm_ref(x, w, b, in.N, in.C);
    double s = 0;
    for (std::size_t i = 0; i < r.out.size(); ++i) s += r.out[i] * in.dout[i];
    return s;
  };
  return {plus(in.dx0, numeric_grad([&](std::span<const float> x) { return loss(x, in.w, in.b); }, in.x)),
          plus(in.dw0, numeric_grad([&](std::span<const float> w) { return loss(in.x, w, in.b); }, in.w)),
          plus(in.db0, numeric_grad([&](std::span<const float> b) { return loss(in.x, in.w, b); }, in.b))};
}

// The numerical tests run on every device; the errors on the sim device.
class NnOpsLayerNormTest : public OnEachDevice {};

TEST_P(NnOpsLayerNormTest, ForwardMatchesReference) {
  const Inputs in;
  const Outputs got = run(GetParam(), in, DType::f32);
  const auto ref = layernorm_ref(in.x, in.w, in.b, in.N, in.C);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got.mean, ref.mean, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(got.rstd, ref.rstd, 1e-6, 1e-5));
}

TEST_P(NnOpsLayerNormTest, LargeMeanKeepsItsPrecision) {
  // Rows at 1000 +- 1: E[x^2] - E[x]^2 in f32 would cancel to noise (x^2 ~ 1e6, float eps 1e-7 *
  // 1e6 = 0.1 against a variance of 0.3); the two-pass variance keeps rstd to f32 precision.
  Inputs in;
  for (float& v : in.x) v += 1000.f;
  const Outputs got = run(GetParam(), in, DType::f32);
  const auto ref = layernorm_ref(in.x, in.w, in.b, in.N, in.C);
  EXPECT_TRUE(all_close(got.rstd, ref.rstd, 0, 1e-4));
  EXPECT_TRUE(all_close(got.out, ref.out, 2e-4, 1e-4));
}

TEST_P(NnOpsLayerNormTest, BackwardAddsTheFiniteDifferenceGradients) {
  const Inputs in;
  const Outputs got = run(GetParam(), in, DType::f32);
  const ExpectedGrads want = expected_grads(in);
  EXPECT_TRUE(all_close(got.dx, want.dx, kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(got.dw, want.dw, kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(got.db, want.db, kGradAtol, kGradRtol));
}

TEST_P(NnOpsLayerNormTest, Bf16IsTheF32ResultRoundedOnce) {
  // The reference sees the same bf16-rounded inputs; outputs and gradients may differ from it by one
  // rounding (kBf16Rtol), plus the finite differences' own error for the gradients.
  const Inputs in = Inputs{}.rounded_to_bf16();
  const Outputs got = run(GetParam(), in, DType::bf16);
  const auto ref = layernorm_ref(in.x, in.w, in.b, in.N, in.C);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-5, kBf16Rtol));
  EXPECT_TRUE(all_close(got.mean, ref.mean, 1e-6, 1e-5));  // statistics stay f32
  EXPECT_TRUE(all_close(got.rstd, ref.rstd, 1e-6, 1e-5));
  const ExpectedGrads want = expected_grads(in);
  // dx: the input's gradient g is rounded before it is added into dx0, bit for bit a separate add (as autograd
  // sums two bf16 gradients), so that rounding is relative to g, not to the sum dx0 + g.
  for (std::size_t i = 0; i < got.dx.size(); ++i) {
    const double g = want.dx[i] - in.dx0[i];
    EXPECT_NEAR(got.dx[i], want.dx[i], kGradAtol + (kBf16Rtol + kGradRtol) * (std::abs(g) + std::abs(want.dx[i])))
        << "dx[" << i << "]";
  }
  EXPECT_TRUE(all_close(got.dw, want.dw, kGradAtol, kBf16Rtol + kGradRtol));
  EXPECT_TRUE(all_close(got.db, want.db, kGradAtol, kBf16Rtol + kGradRtol));
}

TEST_P(NnOpsLayerNormTest, WideRowsMatchTheAnalyticGradients) {
  // Rows wider than a warp and more rows than the column sums' row lanes, C not a multiple of their
  // strips: the analytic gradients in double (the finite differences above check the formula itself).
  Inputs in;
  in.N = 150;
  in.C = 1000;
  const std::size_t nc = static_cast<std::size_t>(in.N * in.C), c = static_cast<std::size_t>(in.C);
  in.x = random_values(nc, 1, -2.f, 2.f);
  in.w = random_values(c, 2, 0.5f, 1.5f);
  in.b = random_values(c, 3);
  in.dout = random_values(nc, 4);
  in.dx0 = random_values(nc, 5);
  in.dw0 = random_values(c, 6);
  in.db0 = random_values(c, 7);
  const Outputs got = run(GetParam(), in, DType::f32);
  const auto ref = layernorm_ref(in.x, in.w, in.b, in.N, in.C);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got.mean, ref.mean, 1e-6, 1e-5));
  EXPECT_TRUE(all_close(got.rstd, ref.rstd, 1e-6, 1e-5));
  std::vector<double> dx(nc), dw(in.dw0.begin(), in.dw0.end()), db(in.db0.begin(), in.db0.end());
  for (int n = 0; n < in.N; ++n) {
    double dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int i = 0; i < in.C; ++i) {
      const double norm = (in.x[n * in.C + i] - ref.mean[n]) * ref.rstd[n], g = in.dout[n * in.C + i];
      dnorm_mean += in.w[i] * g / in.C;
      dnorm_norm_mean += in.w[i] * g * norm / in.C;
      dw[i] += norm * g;
      db[i] += g;
    }
    for (int i = 0; i < in.C; ++i) {
      const double norm = (in.x[n * in.C + i] - ref.mean[n]) * ref.rstd[n];
      dx[n * in.C + i] = in.dx0[n * in.C + i] +
                         ref.rstd[n] * (in.w[i] * in.dout[n * in.C + i] - dnorm_mean - norm * dnorm_norm_mean);
    }
  }
  EXPECT_TRUE(all_close(got.dx, dx, 1e-5, 1e-4));
  EXPECT_TRUE(all_close(got.dw, dw, 1e-4, 1e-4));
  EXPECT_TRUE(all_close(got.db, db, 1e-4, 1e-4));
  // Every sum has one order: a second run gives the same bits.
  const Outputs again = run(GetParam(), in, DType::f32);
  EXPECT_EQ(again.out, got.out);
  EXPECT_EQ(again.dx, got.dx);
  EXPECT_EQ(again.dw, got.dw);
  EXPECT_EQ(again.db, got.db);
}

TEST_P(NnOpsLayerNormTest, AddingIntoAResidualGradientIsBitForBitASeparateAdd) {
  // LayerNorm::backward_adding_to: the input's gradient added into the residual stream's gradient (large
  // against it, so that bf16 sums round) must be what the backward into zeros and then add give.
  const Inputs in = Inputs{}.rounded_to_bf16();
  auto dev = make_test_device(GetParam());
  const Stream s = compute(*dev);
  const std::int64_t N = in.N, C = in.C;
  std::vector<float> residual_grad = random_values(static_cast<std::size_t>(N * C), 8, -50.f, 50.f);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = tensor_from(*dev, {N, C}, in.x, dt), w = tensor_from(*dev, {C}, in.w, dt),
           b = tensor_from(*dev, {C}, in.b, dt), dout = tensor_from(*dev, {N, C}, in.dout, dt);
    Tensor out = leftovers(*dev, {N, C}, dt), mean = leftovers(*dev, {N}), rstd = leftovers(*dev, {N});
    layernorm(s, x, w, b, out, mean, rstd);
    Tensor dw = zeros(*dev, {C}, dt), db = zeros(*dev, {C}, dt);  // live until the ops that write them are read
    const auto backward_into = [&](const Tensor& dx) { layernorm_backward(s, dout, x, w, mean, rstd, dx, dw, db); };
    Tensor fused = tensor_from(*dev, {N, C}, residual_grad, dt);
    backward_into(fused);
    Tensor separate = zeros(*dev, {N, C}, dt);
    backward_into(separate);
    add(s, separate, tensor_from(*dev, {N, C}, residual_grad, dt), separate);
    const std::vector<float> a = read(fused), e = read(separate);
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(e[i])) << "element " << i;
  }
}

FSDPLAB_ON_EACH_DEVICE(NnOpsLayerNormTest);

TEST(NnOpsLayerNorm, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor x = zeros(*dev, {4, 8}), w = zeros(*dev, {8}), b = zeros(*dev, {8});
  Tensor out = zeros(*dev, {4, 8}), mean = zeros(*dev, {4}), rstd = zeros(*dev, {4});
  Tensor w_short = zeros(*dev, {6}), w_bf16 = zeros(*dev, {8}, DType::bf16), mean_bf16 = zeros(*dev, {4}, DType::bf16);
  Tensor x3 = zeros(*dev, {2, 2, 8}), ids = Tensor::empty(*dev, {4, 8}, DType::i32, MemTag::activation);
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { layernorm(s, x, w_short, b, out, mean, rstd); },
                           {"layernorm", "weight must be [8] f32", "[6] f32"}));
  EXPECT_TRUE(throws_error([&] { layernorm(s, x, w_bf16, b, out, mean, rstd); },
                           {"layernorm", "weight must be [8] f32", "[8] bf16"}));
  EXPECT_TRUE(throws_error([&] { layernorm(s, x, w, b, out, mean_bf16, rstd); }, {"mean must be [4] f32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { layernorm(s, x3, w, b, out, mean, rstd); },
                           {"x must be [N, C] f32 or bf16", "[2, 2, 8] f32"}));
  EXPECT_TRUE(throws_error([&] { layernorm(s, ids, w, b, out, mean, rstd); }, {"x must be", "[4, 8] i32"}));
  EXPECT_TRUE(throws_error([&] { layernorm_backward(s, x, x, w, mean, rstd, out, w, w_short); },
                           {"layernorm_backward", "dbias must be [8] f32", "[6] f32"}));
  EXPECT_TRUE(dev->ops().empty()) << "nothing may launch when the operands are wrong";
}

}  // namespace
}  // namespace fsdplab
