// The pointwise kernels' own source (engine/cuda/pointwise_kernels.cu), run on CPU threads by
// cuda_threads_on_cpu.hpp: bias_add against a plain loop, and the in-place GELU backward bit for bit against
// gelu_backward into zeros.
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

// bias_add's shapes: one column, a column past a warp, GPT-2's width; one row, a few, many.
std::vector<Rows> bias_shapes() {
  std::vector<Rows> shapes;
  for (std::int64_t C : {1, 33, 768})
    for (std::int64_t N : {1, 5, 64}) shapes.push_back({N, C});
  return shapes;
}

TYPED_TEST(PointwiseKernelsOnCpu, BiasAddAddsTheBiasToEveryRow) {
  using T = TypeParam;
  for (const Rows s : bias_shapes()) {
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
