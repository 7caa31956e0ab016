// The row kernels' own source (engine/cuda/row_kernels.cu), run on the CPU by cuda_threads_on_cpu.hpp:
// layernorm's and rmsnorm's backwards into a gradient that is not zero, bit for bit against the backward into
// zeros and the add kernel (emulated in test_pointwise_kernels_on_cpu.cpp's translation unit, called through its
// header); the column sums of the bias and norm weight gradients, in chunks whose sums live in op scratch (whose
// 0xff bytes read as NaN where a pass reads what was never written), against a double reference.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include "row_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
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

}  // namespace
}  // namespace fsdplab
