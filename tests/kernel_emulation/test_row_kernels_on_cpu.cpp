// The row kernels' own source (engine/cuda/row_kernels.cu), run on the CPU by cuda_threads_on_cpu.hpp. The forwards
// of layernorm and rmsnorm: their saved row statistics against a double reference (a block sums a row in another
// order than the host's loop), and each output element bit for bit the host's formula with those statistics;
// softmax's forward and backward, whose row sums go into every element, against a double reference; each within
// the rounding its f32 sums can do, the same bits run after run, over one element, rows no multiple of a warp,
// GPT-2's width and rows wider than a block's 1024 threads take at four a thread. Layernorm's and rmsnorm's backwards
// into a gradient that is not zero, bit for bit against the backward into zeros and the add kernel (emulated in
// test_pointwise_kernels_on_cpu.cpp's translation unit, called through its header); the column sums of the bias and
// norm weight gradients, in chunks whose sums live in op scratch (whose 0xff bytes read as NaN where a pass reads what
// was never written), against a double reference. The launchers refuse a dtype that is not floating, naming
// themselves.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include "row_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cuda/pointwise_kernels.hpp"
#include "float_tensors_on_cpu.hpp"

namespace fsdplab {
namespace {

using namespace emulated;

constexpr float kEps = 1e-5f;

template <class T>
class RowKernelsOnCpu : public ::testing::Test {};
TYPED_TEST_SUITE(RowKernelsOnCpu, emulated::FloatTypes, emulated::FloatTypeNames);

// A forward's saved mean and rstd [N] (f32): the backward only reads them, so any plausible values do.
struct RowStatistics {
  std::vector<float> mean, rstd;
};

RowStatistics statistics(std::int64_t N, std::uint32_t seed) {
  return {random_values<float>(static_cast<std::size_t>(N), -0.5f, 0.5f, seed),
          random_values<float>(static_cast<std::size_t>(N), 0.5f, 2.f, seed + 1)};
}

TYPED_TEST(RowKernelsOnCpu, NormBackwardsIntoAGradientAreBackwardIntoZeroThenAddBitForBit) {
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  for (const Rows s : {Rows{3, 1}, Rows{5, 33}, Rows{8, 768}}) {
    SCOPED_TRACE(describe(s));
    const std::int64_t n = s.N * s.C;
    const auto x = random_values<T>(static_cast<std::size_t>(n), -2.f, 2.f, 11);
    const auto dout = random_values<T>(static_cast<std::size_t>(n), -1.f, 1.f, 12);
    const auto weight = random_values<T>(static_cast<std::size_t>(s.C), 0.5f, 1.5f, 13);
    const RowStatistics stats = statistics(s.N, 14);
    // The residual stream's gradient, which the branch's dx is added into.
    const auto dx0 = random_values<T>(static_cast<std::size_t>(n), -4.f, 4.f, 16);
    const auto dweight0 = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 17);
    const auto dbias0 = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 18);

    std::vector<T> branch(static_cast<std::size_t>(n), from_value<T>(0.f));
    std::vector<T> want_dweight = dweight0, want_dbias = dbias0;
    cuda::layernorm_backward(nullptr, dt, branch.data(), want_dweight.data(), want_dbias.data(), dout.data(), x.data(),
                             weight.data(), stats.mean.data(), stats.rstd.data(), s.N, s.C);
    auto want_dx = unwritten<T>(n);
    cuda::add(nullptr, dt, want_dx.data(), dx0.data(), branch.data(), n);

    std::vector<T> dx = dx0, dweight = dweight0, dbias = dbias0;
    cuda::layernorm_backward(nullptr, dt, dx.data(), dweight.data(), dbias.data(), dout.data(), x.data(),
                             weight.data(), stats.mean.data(), stats.rstd.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(dx, want_dx));
    EXPECT_TRUE(same_bits(dweight, want_dweight));
    EXPECT_TRUE(same_bits(dbias, want_dbias));

    // rmsnorm's the same way (Llama's residual stream).
    std::vector<T> rms_branch(static_cast<std::size_t>(n), from_value<T>(0.f));
    std::vector<T> rms_want_dweight = dweight0;
    cuda::rmsnorm_backward(nullptr, dt, rms_branch.data(), rms_want_dweight.data(), dout.data(), x.data(),
                           weight.data(), stats.rstd.data(), s.N, s.C);
    auto rms_want_dx = unwritten<T>(n);
    cuda::add(nullptr, dt, rms_want_dx.data(), dx0.data(), rms_branch.data(), n);
    std::vector<T> rms_dx = dx0, rms_dweight = dweight0;
    cuda::rmsnorm_backward(nullptr, dt, rms_dx.data(), rms_dweight.data(), dout.data(), x.data(), weight.data(),
                           stats.rstd.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(rms_dx, rms_want_dx));
    EXPECT_TRUE(same_bits(rms_dweight, rms_want_dweight));
  }
}

TYPED_TEST(RowKernelsOnCpu, BiasBackwardAddsEachColumnsSumOnceAsADoubleReferenceDoes) {
  using T = TypeParam;
  // One chunk (at most 128 rows); a last chunk cut short and columns no multiple of a strip's 32; GPT-2's C = 768
  // over 16 chunks; more rows than 128 chunks of 128 hold, so the chunks grow.
  for (const Rows s : {Rows{1, 1}, Rows{5, 33}, Rows{300, 33}, Rows{2000, 768}, Rows{16500, 3}}) {
    SCOPED_TRACE(describe(s));
    const auto dout = random_values<T>(static_cast<std::size_t>(s.N * s.C), -1.f, 1.f, 7);
    const auto dbias0 = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 8);
    std::vector<T> dbias = dbias0;
    cuda::bias_backward(nullptr, dtype_of<T>(), dbias.data(), dout.data(), s.N, s.C);
    for (std::int64_t c = 0; c < s.C; ++c) {
      double want = value(dbias0[c]), magnitude = std::abs(want);
      for (std::int64_t n = 0; n < s.N; ++n) {
        want += value(dout[n * s.C + c]);
        magnitude += std::abs(value(dout[n * s.C + c]));
      }
      // f32 sums at most ~50 deep, then (bf16) one rounding of the total to 8 significant bits.
      const double tolerance = 4e-6 * magnitude + (std::is_same_v<T, float> ? 0. : std::abs(want) / 256);
      ASSERT_NEAR(value(dbias[c]), want, tolerance) << "column " << c;
    }
    // The order of every sum depends on the shape alone: a second run from the same dbias gives the same bits.
    std::vector<T> again = dbias0;
    cuda::bias_backward(nullptr, dtype_of<T>(), again.data(), dout.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(again, dbias));
  }
}

TYPED_TEST(RowKernelsOnCpu, NormWeightGradientsAddEachColumnsSumOnceAsADoubleReferenceDoes) {
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  // One chunk (at most 128 rows); three, the last cut short, over columns no multiple of a strip's 32.
  for (const Rows s : {Rows{1, 1}, Rows{5, 17}, Rows{260, 33}}) {
    SCOPED_TRACE(describe(s));
    const std::int64_t n = s.N * s.C;
    const auto x = random_values<T>(static_cast<std::size_t>(n), -2.f, 2.f, 21);
    const auto dout = random_values<T>(static_cast<std::size_t>(n), -1.f, 1.f, 22);
    const auto weight = random_values<T>(static_cast<std::size_t>(s.C), 0.5f, 1.5f, 23);
    const RowStatistics stats = statistics(s.N, 24);
    const auto dweight0 = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 26);
    const auto dbias0 = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 27);

    std::vector<T> dx(static_cast<std::size_t>(n), from_value<T>(0.f));
    std::vector<T> dweight = dweight0, dbias = dbias0, rms_dweight = dweight0;
    cuda::layernorm_backward(nullptr, dt, dx.data(), dweight.data(), dbias.data(), dout.data(), x.data(),
                             weight.data(), stats.mean.data(), stats.rstd.data(), s.N, s.C);
    cuda::rmsnorm_backward(nullptr, dt, dx.data(), rms_dweight.data(), dout.data(), x.data(), weight.data(),
                           stats.rstd.data(), s.N, s.C);

    // f32 sums at most ~40 deep, then (bf16) one rounding of the total to 8 significant bits.
    const auto tolerance = [](double want, double magnitude) {
      return 4e-6 * magnitude + (std::is_same_v<T, float> ? 0. : std::abs(want) / 256);
    };
    for (std::int64_t c = 0; c < s.C; ++c) {
      double dw = value(dweight0[c]), db = value(dbias0[c]), rms_dw = dw;
      double dw_size = std::abs(dw), db_size = std::abs(db), rms_dw_size = dw_size;
      for (std::int64_t r = 0; r < s.N; ++r) {
        const double g = value(dout[r * s.C + c]), xi = value(x[r * s.C + c]);
        const double term = (xi - stats.mean[r]) * stats.rstd[r] * g, rms_term = xi * stats.rstd[r] * g;
        dw += term;
        db += g;
        rms_dw += rms_term;
        dw_size += std::abs(term);
        db_size += std::abs(g);
        rms_dw_size += std::abs(rms_term);
      }
      ASSERT_NEAR(value(dweight[c]), dw, tolerance(dw, dw_size)) << "layernorm dweight, column " << c;
      ASSERT_NEAR(value(dbias[c]), db, tolerance(db, db_size)) << "layernorm dbias, column " << c;
      ASSERT_NEAR(value(rms_dweight[c]), rms_dw, tolerance(rms_dw, rms_dw_size)) << "rmsnorm dweight, column " << c;
    }
    // The order of every sum depends on the shape alone: a second run from the same gradients gives the same bits.
    std::vector<T> again_dweight = dweight0, again_dbias = dbias0;
    cuda::layernorm_backward(nullptr, dt, dx.data(), again_dweight.data(), again_dbias.data(), dout.data(), x.data(),
                             weight.data(), stats.mean.data(), stats.rstd.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(again_dweight, dweight));
    EXPECT_TRUE(same_bits(again_dbias, dbias));
  }
}

// ---- the forwards --------------------------------------------------------------------------------------

// One element; three rows of 33 (a block of one warp, two elements for a thread and one for the rest); GPT-2's C =
// 768 (192 threads, four each); 1100, no multiple of a warp; 5000, wider than the block's 1024 threads take at four a
// thread.
std::vector<Rows> forward_shapes() { return {Rows{1, 1}, Rows{3, 33}, Rows{4, 768}, Rows{2, 1100}, Rows{2, 5000}}; }

// f32's unit roundoff: a correctly rounded f32 operation's relative error is at most this.
constexpr double kU = 0x1p-24;

// How far a row kernel's f32 result may be from the exact one, relative to what its sums add up (their terms'
// magnitudes). A block sums a row a thread's strided elements at a time (at most 5 in the shapes above), then two
// 5-level butterflies (lanes, then the warps' partials): 15 additions deep. By Higham's bound such a sum errs by at
// most 15 u of its terms' magnitudes; the formulas around it add at most 6 roundings of at most u each (a term's
// difference and product, or expf's half ulp; a division, a square root or reciprocal, the output's product): 21 u.
// kRowTolerance leaves a little over that. (Measured, the kernels stay within 4 u of these references.)
constexpr double kRowTolerance = 24 * kU;

// A bf16 output is the f32 one rounded once more: at most half its ulp, 2^-8 of its magnitude, further off.
template <class T>
double stored_tolerance(double want, double f32_tolerance) {
  return f32_tolerance + (std::is_same_v<T, float> ? 0. : (std::abs(want) + f32_tolerance) * 0x1p-8);
}

TYPED_TEST(RowKernelsOnCpu, LayernormForwardSavesTheRowStatisticsAndNormalisesWithThemBitForBit) {
  using T = TypeParam;
  for (const Rows s : forward_shapes()) {
    SCOPED_TRACE(describe(s));
    const std::int64_t n = s.N * s.C;
    // The odd rows' mean, 100, is far from 0 against their spread of +-2: E[x^2] - E[x]^2 would lose 13 of f32's 24
    // bits there to cancellation; the two passes (the mean, then the squared deviations) lose none.
    auto x = random_values<T>(static_cast<std::size_t>(n), -2.f, 2.f, 31);
    for (std::int64_t i = s.C; i < n; i += 2 * s.C)
      for (std::int64_t c = 0; c < s.C; ++c) x[i + c] = from_value<T>(value(x[i + c]) + 100.f);
    const auto weight = random_values<T>(static_cast<std::size_t>(s.C), 0.5f, 1.5f, 32);
    const auto bias = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 33);
    auto out = unwritten<T>(n);
    auto mean = unwritten<float>(s.N), rstd = unwritten<float>(s.N);
    cuda::layernorm_forward(nullptr, dtype_of<T>(), out.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                            bias.data(), s.N, s.C, kEps);
    std::vector<T> want(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < s.N; ++r) {
      double sum = 0, magnitude = 0;
      for (std::int64_t c = 0; c < s.C; ++c) {
        sum += value(x[r * s.C + c]);
        magnitude += std::abs(value(x[r * s.C + c]));
      }
      const double m = sum / static_cast<double>(s.C);
      double var = 0;
      for (std::int64_t c = 0; c < s.C; ++c) var += (value(x[r * s.C + c]) - m) * (value(x[r * s.C + c]) - m);
      const double rs = 1 / std::sqrt(var / static_cast<double>(s.C) + kEps);
      // The mean's sum errs relative to its terms' magnitudes; rstd's sum has terms >= 0, and its error halves
      // under the square root.
      ASSERT_NEAR(mean[r], m, kRowTolerance * magnitude / static_cast<double>(s.C)) << "row " << r;
      ASSERT_NEAR(rstd[r], rs, kRowTolerance * rs) << "row " << r;
      // The host body's element formula, in its order of f32 operations, with the statistics the kernel saved.
      for (std::int64_t c = 0; c < s.C; ++c) {
        const std::int64_t i = r * s.C + c;
        want[i] = from_value<T>((value(x[i]) - mean[r]) * rstd[r] * value(weight[c]) + value(bias[c]));
      }
    }
    EXPECT_TRUE(same_bits(out, want));
    // Every sum's order is fixed by the shape: a second run gives the same bits.
    auto again = unwritten<T>(n);
    auto again_mean = unwritten<float>(s.N), again_rstd = unwritten<float>(s.N);
    cuda::layernorm_forward(nullptr, dtype_of<T>(), again.data(), again_mean.data(), again_rstd.data(), x.data(),
                            weight.data(), bias.data(), s.N, s.C, kEps);
    EXPECT_TRUE(same_bits(again, out));
    EXPECT_TRUE(same_bits(again_mean, mean));
    EXPECT_TRUE(same_bits(again_rstd, rstd));
  }
}

TYPED_TEST(RowKernelsOnCpu, RmsnormForwardSavesRstdAndScalesWithItBitForBit) {
  using T = TypeParam;
  for (const Rows s : forward_shapes()) {
    SCOPED_TRACE(describe(s));
    const std::int64_t n = s.N * s.C;
    const auto x = random_values<T>(static_cast<std::size_t>(n), -3.f, 3.f, 34);
    const auto weight = random_values<T>(static_cast<std::size_t>(s.C), 0.5f, 1.5f, 35);
    auto out = unwritten<T>(n);
    auto rstd = unwritten<float>(s.N);
    cuda::rmsnorm_forward(nullptr, dtype_of<T>(), out.data(), rstd.data(), x.data(), weight.data(), s.N, s.C, kEps);
    std::vector<T> want(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < s.N; ++r) {
      double sum_sq = 0;
      for (std::int64_t c = 0; c < s.C; ++c) sum_sq += value(x[r * s.C + c]) * value(x[r * s.C + c]);
      const double rs = 1 / std::sqrt(sum_sq / static_cast<double>(s.C) + kEps);
      ASSERT_NEAR(rstd[r], rs, kRowTolerance * rs) << "row " << r;
      for (std::int64_t c = 0; c < s.C; ++c) {
        const std::int64_t i = r * s.C + c;
        want[i] = from_value<T>(value(x[i]) * rstd[r] * value(weight[c]));
      }
    }
    EXPECT_TRUE(same_bits(out, want));
    auto again = unwritten<T>(n);
    auto again_rstd = unwritten<float>(s.N);
    cuda::rmsnorm_forward(nullptr, dtype_of<T>(), again.data(), again_rstd.data(), x.data(), weight.data(), s.N, s.C,
                          kEps);
    EXPECT_TRUE(same_bits(again, out));
    EXPECT_TRUE(same_bits(again_rstd, rstd));
  }
}

TYPED_TEST(RowKernelsOnCpu, SoftmaxForwardIsEachRowsSoftmaxWithinItsF32RoundingTheSameBitsEveryRun) {
  using T = TypeParam;
  for (const Rows s : forward_shapes()) {
    SCOPED_TRACE(describe(s));
    const std::int64_t n = s.N * s.C;
    const auto x = random_values<T>(static_cast<std::size_t>(n), -8.f, 8.f, 36);
    auto y = unwritten<T>(n);
    cuda::softmax_forward(nullptr, dtype_of<T>(), y.data(), x.data(), s.N, s.C);
    for (std::int64_t r = 0; r < s.N; ++r) {
      // The row's max is the same in any order, and so is each x - max rounded to f32, the exponent both bodies take:
      // the reference sums exp of those in double.
      float max = -std::numeric_limits<float>::infinity();
      for (std::int64_t c = 0; c < s.C; ++c) max = std::max(max, value(x[r * s.C + c]));
      double sum = 0;
      for (std::int64_t c = 0; c < s.C; ++c) sum += std::exp(static_cast<double>(value(x[r * s.C + c]) - max));
      for (std::int64_t c = 0; c < s.C; ++c) {
        const std::int64_t i = r * s.C + c;
        // The sum's terms are all > 0: its error, and so y's, is relative to y.
        const double want = std::exp(static_cast<double>(value(x[i]) - max)) / sum;
        ASSERT_NEAR(value(y[i]), want, stored_tolerance<T>(want, kRowTolerance * want))
            << "row " << r << ", column " << c;
      }
    }
    auto again = unwritten<T>(n);
    cuda::softmax_forward(nullptr, dtype_of<T>(), again.data(), x.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(again, y));
  }
}

TYPED_TEST(RowKernelsOnCpu, SoftmaxBackwardAddsYTimesDyLessTheRowsDotWithinItsF32RoundingTheSameBitsEveryRun) {
  using T = TypeParam;
  for (const Rows s : forward_shapes()) {
    SCOPED_TRACE(describe(s));
    const std::int64_t n = s.N * s.C;
    const auto y = random_values<T>(static_cast<std::size_t>(n), 0.f, 1.f, 37);
    const auto dy = random_values<T>(static_cast<std::size_t>(n), -1.f, 1.f, 38);
    const auto dx0 = random_values<T>(static_cast<std::size_t>(n), -1.f, 1.f, 39);
    std::vector<T> dx = dx0;
    cuda::softmax_backward(nullptr, dtype_of<T>(), dx.data(), y.data(), dy.data(), s.N, s.C);
    for (std::int64_t r = 0; r < s.N; ++r) {
      double dot = 0, dot_magnitude = 0;
      for (std::int64_t c = 0; c < s.C; ++c) {
        dot += value(y[r * s.C + c]) * value(dy[r * s.C + c]);
        dot_magnitude += std::abs(value(y[r * s.C + c]) * value(dy[r * s.C + c]));
      }
      for (std::int64_t c = 0; c < s.C; ++c) {
        const std::int64_t i = r * s.C + c;
        const double yi = value(y[i]), term = yi * (value(dy[i]) - dot), want = value(dx0[i]) + term;
        // The dot's error (relative to its terms' magnitudes) carried by y, and the few roundings after it: the
        // difference, the product, the add into dx.
        const double f32_tolerance = kRowTolerance * (yi * dot_magnitude + std::abs(term) + std::abs(want));
        ASSERT_NEAR(value(dx[i]), want, stored_tolerance<T>(want, f32_tolerance)) << "row " << r << ", column " << c;
      }
    }
    std::vector<T> again = dx0;
    cuda::softmax_backward(nullptr, dtype_of<T>(), again.data(), y.data(), dy.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(again, dx));
  }
}

// i32 (ids, targets) is no dtype these kernels compute in: each launcher refuses it by name before it launches.
TEST(RowKernelsOnCpu, TheForwardsAndSoftmaxBackwardRefuseADtypeThatIsNotFloatingNamingThemselves) {
  std::vector<float> a(8, 1.f), b(8, 1.f), c(8, 1.f), w(8, 1.f), stats(2, 1.f), stats2(2, 1.f);
  const DType i32 = DType::i32;
  EXPECT_EQ(refusal_of([&] {
              cuda::layernorm_forward(nullptr, i32, a.data(), stats.data(), stats2.data(), b.data(), w.data(), c.data(),
                                      2, 4, kEps);
            }),
            "layernorm: i32 is not a floating dtype");
  EXPECT_EQ(
      refusal_of([&] { cuda::rmsnorm_forward(nullptr, i32, a.data(), stats.data(), b.data(), w.data(), 2, 4, kEps); }),
      "rmsnorm: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::softmax_forward(nullptr, i32, a.data(), b.data(), 2, 4); }),
            "softmax: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::softmax_backward(nullptr, i32, a.data(), b.data(), c.data(), 2, 4); }),
            "softmax_backward: i32 is not a floating dtype");
  // Nothing ran: the outputs are as they were.
  EXPECT_EQ(a, std::vector<float>(8, 1.f));
  EXPECT_EQ(stats, std::vector<float>(2, 1.f));
}

}  // namespace
}  // namespace fsdplab
