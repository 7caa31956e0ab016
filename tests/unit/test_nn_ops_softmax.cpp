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
// n rows of c (the tests' N x C unless told).
Outputs run(DeviceKind kind, const std::vector<float>& x, const std::vector<float>& dy, const std::vector<float>& dx0,
            DType dt, std::int64_t n = N, std::int64_t c = C) {
  auto dev = make_test_device(kind);
  Tensor tx = tensor_from(*dev, {n, c}, x, dt), ty = leftovers(*dev, {n, c}, dt);
  softmax(compute(*dev), tx, ty);
  Tensor tdy = tensor_from(*dev, {n, c}, dy, dt), tdx = tensor_from(*dev, {n, c}, dx0, dt);
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

// The numerical tests run on every device; the errors on the sim device.
class NnOpsSoftmaxTest : public OnEachDevice {};

TEST_P(NnOpsSoftmaxTest, ForwardMatchesReferenceAndBackwardAddsFiniteDifferences) {
  const auto x = random_values(N * C, 11, -3.f, 3.f), dy = random_values(N * C, 12), dx0 = random_values(N * C, 13);
  const Outputs got = run(GetParam(), x, dy, dx0, DType::f32);
  EXPECT_TRUE(all_close(got.y, softmax_ref(x, N, C), 1e-7, 1e-5));
  EXPECT_TRUE(all_close(got.dx, expected_dx(x, dy, dx0), kGradAtol, kGradRtol));
}

TEST_P(NnOpsSoftmaxTest, LargeLogitsDoNotOverflow) {
  // exp(1000) is inf in f32: without the max subtracted every row would be NaN.
  auto x = random_values(N * C, 14, -3.f, 3.f);
  for (float& v : x) v += 1000.f;
  const Outputs got = run(GetParam(), x, random_values(N * C, 15), std::vector<float>(N * C), DType::f32);
  // 1000 +- 3 in f32 is only good to 6e-5, which exp carries into the result relatively.
  EXPECT_TRUE(all_close(got.y, softmax_ref(x, N, C), 1e-7, 1e-4));
}

TEST_P(NnOpsSoftmaxTest, Bf16IsTheF32ResultRoundedOnce) {
  // The reference sees the same bf16-rounded inputs, so y may differ from it by one rounding. The
  // backward reads the bf16 y the forward wrote, so its reference is dx0 + y * (dy - sum(y * dy))
  // from that y (the finite differences check the formula itself in f32 above); dx may differ from
  // it by one more rounding.
  const auto x = rounded_to_bf16(random_values(N * C, 16, -3.f, 3.f));
  const auto dy = rounded_to_bf16(random_values(N * C, 17));
  const auto dx0 = rounded_to_bf16(random_values(N * C, 18));
  const Outputs got = run(GetParam(), x, dy, dx0, DType::bf16);
  EXPECT_TRUE(all_close(got.y, softmax_ref(x, N, C), 1e-7, kBf16Rtol));
  std::vector<double> want(x.size());
  for (int n = 0; n < N; ++n) {
    double y_dot_dy = 0;
    for (int i = 0; i < C; ++i) y_dot_dy += static_cast<double>(got.y[n * C + i]) * dy[n * C + i];
    for (int i = 0; i < C; ++i) want[n * C + i] = dx0[n * C + i] + got.y[n * C + i] * (dy[n * C + i] - y_dot_dy);
  }
  EXPECT_TRUE(all_close(got.dx, want, 1e-6, kBf16Rtol));
}

TEST_P(NnOpsSoftmaxTest, WideRowsMatchTheReference) {
  // Rows of several thousand (a block of many warps per row): the reference forward, and the backward
  // dx0 + y * (dy - sum(y * dy)) in double from the reference y.
  constexpr int n = 40, c = 3000;
  const auto x = random_values(n * c, 19, -3.f, 3.f), dy = random_values(n * c, 20), dx0 = random_values(n * c, 21);
  const Outputs got = run(GetParam(), x, dy, dx0, DType::f32, n, c);
  const std::vector<double> y = softmax_ref(x, n, c);
  EXPECT_TRUE(all_close(got.y, y, 1e-8, 1e-5));
  std::vector<double> want(y.size());
  for (int r = 0; r < n; ++r) {
    double y_dot_dy = 0;
    for (int i = 0; i < c; ++i) y_dot_dy += y[r * c + i] * dy[r * c + i];
    for (int i = 0; i < c; ++i) want[r * c + i] = dx0[r * c + i] + y[r * c + i] * (dy[r * c + i] - y_dot_dy);
  }
  EXPECT_TRUE(all_close(got.dx, want, 1e-7, 1e-5));
  // Every sum has one order: a second run gives the same bits.
  const Outputs again = run(GetParam(), x, dy, dx0, DType::f32, n, c);
  EXPECT_EQ(again.y, got.y);
  EXPECT_EQ(again.dx, got.dx);
}

FSDPLAB_ON_EACH_DEVICE(NnOpsSoftmaxTest);

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
