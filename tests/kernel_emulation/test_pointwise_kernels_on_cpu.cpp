// The pointwise kernels' own source (engine/cuda/pointwise_kernels.cu), run on CPU threads by
// cuda_threads_on_cpu.hpp: bias_add against a plain loop, and the fused epilogues and the in-place GELU backward
// bit for bit against the launches they replace, in place too.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include "pointwise_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "float_tensors_on_cpu.hpp"

namespace fsdplab {
namespace {

using namespace emulated;

template <class T>
class PointwiseKernelsOnCpu : public ::testing::Test {};
TYPED_TEST_SUITE(PointwiseKernelsOnCpu, emulated::FloatTypes, emulated::FloatTypeNames);

// The fused epilogues' shapes: one column, a column past a warp, GPT-2's width; one row, a few, many.
std::vector<Rows> epilogue_shapes() {
  std::vector<Rows> shapes;
  for (std::int64_t C : {1, 33, 768})
    for (std::int64_t N : {1, 5, 64}) shapes.push_back({N, C});
  return shapes;
}

TYPED_TEST(PointwiseKernelsOnCpu, BiasAddAddsTheBiasToEveryRow) {
  using T = TypeParam;
  for (const Rows s : epilogue_shapes()) {
    SCOPED_TRACE(describe(s));
    const auto x = random_values<T>(static_cast<std::size_t>(s.N * s.C), -5.f, 5.f, 1);
    const auto bias = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 2);
    std::vector<T> want(x.size());
    for (std::int64_t n = 0; n < s.N; ++n)
      for (std::int64_t c = 0; c < s.C; ++c) want[n * s.C + c] = from_value<T>(value(x[n * s.C + c]) + value(bias[c]));
    auto out = unwritten<T>(s.N * s.C);
    cuda::bias_add(nullptr, dtype_of<T>(), out.data(), x.data(), bias.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(out, want));
  }
}

TYPED_TEST(PointwiseKernelsOnCpu, BiasGeluIsBiasAddThenGeluBitForBit) {
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  for (const Rows s : epilogue_shapes()) {
    SCOPED_TRACE(describe(s));
    const std::int64_t n = s.N * s.C;
    const auto x = random_values<T>(static_cast<std::size_t>(n), -5.f, 5.f, 3);
    const auto bias = random_values<T>(static_cast<std::size_t>(s.C), -1.f, 1.f, 4);
    auto want_pre = unwritten<T>(n), want_out = unwritten<T>(n);
    cuda::bias_add(nullptr, dt, want_pre.data(), x.data(), bias.data(), s.N, s.C);
    cuda::gelu(nullptr, dt, want_out.data(), want_pre.data(), n);

    auto pre = unwritten<T>(n), out = unwritten<T>(n);
    cuda::bias_gelu(nullptr, dt, pre.data(), out.data(), x.data(), bias.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(pre, want_pre));
    EXPECT_TRUE(same_bits(out, want_out));

    // pre == x: the sum overwrites its input.
    std::vector<T> x_then_pre = x;
    auto out_in_place = unwritten<T>(n);
    cuda::bias_gelu(nullptr, dt, x_then_pre.data(), out_in_place.data(), x_then_pre.data(), bias.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(x_then_pre, want_pre));
    EXPECT_TRUE(same_bits(out_in_place, want_out));
  }
}

TYPED_TEST(PointwiseKernelsOnCpu, ResidualBiasAddIsBiasAddThenAddBitForBit) {
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  for (const Rows s : epilogue_shapes()) {
    SCOPED_TRACE(describe(s));
    const std::int64_t n = s.N * s.C;
    // A residual stream larger than the branch, so that rounding the bracket first shows in bf16.
    const auto residual = random_values<T>(static_cast<std::size_t>(n), -8.f, 8.f, 5);
    const auto x = random_values<T>(static_cast<std::size_t>(n), -1.f, 1.f, 6);
    const auto bias = random_values<T>(static_cast<std::size_t>(s.C), -0.3f, 0.3f, 7);
    auto branch = unwritten<T>(n), want = unwritten<T>(n);
    cuda::bias_add(nullptr, dt, branch.data(), x.data(), bias.data(), s.N, s.C);
    cuda::add(nullptr, dt, want.data(), residual.data(), branch.data(), n);

    auto out = unwritten<T>(n);
    cuda::residual_bias_add(nullptr, dt, out.data(), residual.data(), x.data(), bias.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(out, want));

    // out == residual (the stream updated in place) and out == x.
    std::vector<T> into_residual = residual;
    cuda::residual_bias_add(nullptr, dt, into_residual.data(), into_residual.data(), x.data(), bias.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(into_residual, want));
    std::vector<T> into_x = x;
    cuda::residual_bias_add(nullptr, dt, into_x.data(), residual.data(), into_x.data(), bias.data(), s.N, s.C);
    EXPECT_TRUE(same_bits(into_x, want));
  }
}

TYPED_TEST(PointwiseKernelsOnCpu, GeluBackwardInPlaceIsGeluBackwardIntoZerosBitForBit) {
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  // Odd lengths and a view one element in, so that both the 16-byte packs and the element-wise tail run.
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{37}, std::int64_t{4099}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto x = random_values<T>(static_cast<std::size_t>(n + 1), -5.f, 5.f, 8);
    const auto dout = random_values<T>(static_cast<std::size_t>(n + 1), -2.f, 2.f, 9);
    for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{1}}) {
      SCOPED_TRACE("offset " + std::to_string(offset));
      const std::int64_t len = n + 1 - offset;
      std::vector<T> want(static_cast<std::size_t>(len), from_value<T>(0.f));
      cuda::gelu_backward(nullptr, dt, want.data(), x.data() + offset, dout.data() + offset, len);
      std::vector<T> d(dout.begin() + offset, dout.end());
      cuda::gelu_backward_in_place(nullptr, dt, d.data(), x.data() + offset, len);
      EXPECT_TRUE(same_bits(d, want));
    }
  }
}

}  // namespace
}  // namespace fsdplab
