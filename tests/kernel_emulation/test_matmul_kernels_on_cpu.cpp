// The GEMM epilogue kernel's own source (engine/cuda/matmul_kernels.cu), run on the CPU by
// cuda_threads_on_cpu.hpp: the kernel the cuda device runs after an f32 product where cuBLASLt has no algorithm
// for the epilogue, bit for bit against MatmulEpilogue's formulas written as a plain loop (the host body's).
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake.
#include "matmul_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tensor/gelu_tanh.hpp"
#include "float_tensors_on_cpu.hpp"

namespace fsdplab {
namespace {

using namespace emulated;

template <class T>
class MatmulKernelsOnCpu : public ::testing::Test {};
TYPED_TEST_SUITE(MatmulKernelsOnCpu, emulated::FloatTypes, emulated::FloatTypeNames);

// Each epilogue over an f32 product [N, C]: one column, a column past a warp, GPT-2's width; one row, a few, many.
TYPED_TEST(MatmulKernelsOnCpu, EpilogueIsTheHostFormulasBitForBit) {
  using T = TypeParam;
  struct Kind {
    bool bias, residual, gelu;
  };
  for (const Rows s : {Rows{1, 1}, Rows{5, 33}, Rows{64, 768}}) {
    for (const Kind kind : {Kind{true, false, false}, Kind{true, false, true}, Kind{true, true, false},
                            Kind{false, true, false}, Kind{false, false, true}}) {
      SCOPED_TRACE(describe(s) + (kind.bias ? ", bias" : "") + (kind.gelu ? ", gelu" : "") +
                   (kind.residual ? ", residual" : ""));
      const std::int64_t n = s.N * s.C;
      const auto product = random_values<float>(static_cast<std::size_t>(n), -5.f, 5.f, 1);
      const auto bias = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 2);
      const auto residual = random_values<T>(static_cast<std::size_t>(n), -40.f, 40.f, 3);
      auto want = unwritten<T>(n), want_pre = unwritten<T>(n);
      for (std::int64_t i = 0; i < n; ++i) {
        float v = product[i];
        if (kind.bias) v += value(bias[i % s.C]);
        if (kind.gelu) {
          want_pre[i] = from_value<T>(v);
          v = gelu_tanh(v);
        } else if (kind.residual) {
          v = value(residual[i]) + v;
        }
        want[i] = from_value<T>(v);
      }
      auto out = unwritten<T>(n), pre = unwritten<T>(n);
      const cuda::GemmEpilogue e{.bias = kind.bias ? bias.data() : nullptr,
                                 .residual = kind.residual ? residual.data() : nullptr,
                                 .gelu_pre = kind.gelu ? pre.data() : nullptr};
      cuda::gemm_epilogue(nullptr, dtype_of<T>(), out.data(), product.data(), 0.f, s.N, s.C, e);
      EXPECT_TRUE(same_bits(out, want));
      if (kind.gelu) {
        EXPECT_TRUE(same_bits(pre, want_pre));
      }
    }
  }
}

// No epilogue: acc + beta * out, the f32 GEMM into a bf16 out and the empty inner dimension.
TYPED_TEST(MatmulKernelsOnCpu, WithoutAnEpilogueItScalesTheOldOutAndAddsTheProduct) {
  using T = TypeParam;
  const Rows s{7, 45};
  const std::int64_t n = s.N * s.C;
  const auto product = random_values<float>(static_cast<std::size_t>(n), -5.f, 5.f, 4);
  const auto old = random_values<T>(static_cast<std::size_t>(n), -5.f, 5.f, 5);
  std::vector<T> want(static_cast<std::size_t>(n)), want_empty_sum(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    want[i] = from_value<T>(product[i] + 0.5f * value(old[i]));
    want_empty_sum[i] = from_value<T>(0.5f * value(old[i]));
  }
  std::vector<T> out = old, empty_sum = old;
  cuda::gemm_epilogue(nullptr, dtype_of<T>(), out.data(), product.data(), 0.5f, s.N, s.C);
  cuda::gemm_epilogue(nullptr, dtype_of<T>(), empty_sum.data(), nullptr, 0.5f, s.N, s.C);
  EXPECT_TRUE(same_bits(out, want));
  EXPECT_TRUE(same_bits(empty_sum, want_empty_sum));
}

}  // namespace
}  // namespace fsdplab
