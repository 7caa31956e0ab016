// softmax and softmax_backward against a double-precision reference and finite differences.
#include "engine/tensor/softmax.hpp"

#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

std::vector<double> softmax_ref(std::span<const float> x, int N, int C) {
  std::vector<double> y(x.size());
  for (int n = 0; n < N; ++n) {
    double max = x[n * C];
    for (int i = 0; i < C; ++i) max = std::max(max, static_cast<double>(x[n * C + i]));
    double sum = 0;
    for (int i = 0; i < C; ++i) sum += std::exp(x[n * C + i] - max);
    for (int i = 0; i < C; ++i) y[n * C + i] = std::exp(x[n * C + i] - max) / sum;
  }
  return y;
}

constexpr int N = 5, C = 12;

struct Outputs {
  std::vector<float> y, dx;
};

// Runs the forward and then the backward from dy onto a dx that starts at dx0.
Outputs run(const std::vector<float>& x, const std::vector<float>& dy, const std::vector<float>& dx0, DType dt) {
  auto dev = make_sim_device();
  Tensor tx = tensor_from(*dev, {N, C}, x, dt), ty = leftovers(*dev, {N, C}, dt);
  softmax(compute(*dev), tx, ty);
  Tensor tdy = tensor_from(*dev, {N, C}, dy, dt), tdx = tensor_from(*dev, {N, C}, dx0, dt);
  softmax_backward(compute(*dev), ty, tdy, tdx);
  return {read(ty), read(tdx)};
}

std::vector<double> expected_dx(const std::vector<float>& x, const std::vector<float>& dy,
                                const std::vector<float>& dx0) {
  return plus(dx0, numeric_grad(
                       [&](std::span<const float> v) {
                         const auto y = softmax_ref(v, N, C);
                         double s = 0;
                         for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * dy[i];
                         return s;
                       },
                       x));
}

TEST(NnOpsSoftmax, ForwardMatchesReferenceAndBackwardAddsFiniteDifferences) {
  const auto x = random_values(N * C, 11, -3.f, 3.f), dy = random_values(N * C, 12), dx0 = random_values(N * C, 13);
  const Outputs got = run(x, dy, dx0, DType::f32);
  EXPECT_TRUE(all_close(got.y, softmax_ref(x, N, C), 1e-7, 1e-5));
  EXPECT_TRUE(all_close(got.dx, expected_dx(x, dy, dx0), kGradAtol, kGradRtol));
}

TEST(NnOpsSoftmax, LargeLogitsDoNotOverflow) {
  // exp(1000) is inf in f32: without the max subtracted every row would be NaN.
  auto x = random_values(N * C, 14, -3.f, 3.f);
  for (float& v : x) v += 1000.f;
  const Outputs got = run(x, random_values(N * C, 15), std::vector<float>(N * C), DType::f32);
  // 1000 +- 3 in f32 is only good to 6e-5, which exp carries into the result relatively.
  EXPECT_TRUE(all_close(got.y, softmax_ref(x, N, C), 1e-7, 1e-4));
}

TEST(NnOpsSoftmax, Bf16IsTheF32ResultRoundedOnce) {
  // The reference sees the same bf16-rounded inputs, so y may differ from it by one rounding. The
  // backward reads the bf16 y the forward wrote, so its reference is dx0 + y * (dy - sum(y * dy))
  // from that y (the finite differences check the formula itself in f32 above); dx may differ from
  // it by one more rounding.
  const auto x = rounded_to_bf16(random_values(N * C, 16, -3.f, 3.f));
  const auto dy = rounded_to_bf16(random_values(N * C, 17));
  const auto dx0 = rounded_to_bf16(random_values(N * C, 18));
  const Outputs got = run(x, dy, dx0, DType::bf16);
  EXPECT_TRUE(all_close(got.y, softmax_ref(x, N, C), 1e-7, kBf16Rtol));
  std::vector<double> want(x.size());
  for (int n = 0; n < N; ++n) {
    double y_dot_dy = 0;
    for (int i = 0; i < C; ++i) y_dot_dy += static_cast<double>(got.y[n * C + i]) * dy[n * C + i];
    for (int i = 0; i < C; ++i) want[n * C + i] = dx0[n * C + i] + got.y[n * C + i] * (dy[n * C + i] - y_dot_dy);
  }
  EXPECT_TRUE(all_close(got.dx, want, 1e-6, kBf16Rtol));
}

TEST(NnOpsSoftmax, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor x = zeros(*dev, {N, C}), y_short = zeros(*dev, {N, C - 1}), y_bf16 = zeros(*dev, {N, C}, DType::bf16);
  Tensor x1 = zeros(*dev, {N * C});
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { softmax(s, x, y_short); }, {"softmax", "y must be [5, 12] f32", "[5, 11] f32"}));
  EXPECT_TRUE(throws_error([&] { softmax(s, x, y_bf16); }, {"softmax", "y must be [5, 12] f32", "[5, 12] bf16"}));
  EXPECT_TRUE(throws_error([&] { softmax(s, x1, x1); }, {"x must be [N, C] f32 or bf16", "[60] f32"}));
  EXPECT_TRUE(throws_error([&] { softmax_backward(s, x, x, y_bf16); },
                           {"softmax_backward", "dx must be [5, 12] f32", "[5, 12] bf16"}));
  EXPECT_TRUE(dev->ops().empty());
}

}  // namespace
}  // namespace fsdplab
