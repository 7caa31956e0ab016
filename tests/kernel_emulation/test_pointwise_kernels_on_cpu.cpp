// The pointwise kernels' own source (engine/cuda/pointwise_kernels.cu), run on the CPU by
// cuda_threads_on_cpu.hpp: bias_add and add_scaled against plain loops, the in-place GELU backward bit for bit
// against gelu_backward into zeros, and Llama's backward kernels (SwiGLU's gate, the rotary embedding, the qkv
// packing), which write every element of their gradients: those start as NaN here.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include "pointwise_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <cmath>
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

TYPED_TEST(PointwiseKernelsOnCpu, AddScaledAddsAlphaTimesXIntoAnF32Accumulator) {
  using T = TypeParam;
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{37}, std::int64_t{4099}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto x = random_values<T>(static_cast<std::size_t>(n), -5.f, 5.f, 10);
    const auto out0 = random_values<float>(static_cast<std::size_t>(n), -1.f, 1.f, 11);
    std::vector<float> out = out0, want = out0;
    for (std::int64_t i = 0; i < n; ++i) want[i] += 0.3f * value(x[i]);
    cuda::add_scaled(nullptr, out.data(), dtype_of<T>(), x.data(), 0.3f, n);
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

TYPED_TEST(PointwiseKernelsOnCpu, SiluMulBackwardWritesBothGradientsFromTheFormula) {
  using T = TypeParam;
  // Odd lengths and a view one element in: the 16-byte packs and the element-wise tail.
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{37}, std::int64_t{4099}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto gate = random_values<T>(static_cast<std::size_t>(n + 1), -6.f, 6.f, 10);
    const auto up = random_values<T>(static_cast<std::size_t>(n + 1), -2.f, 2.f, 11);
    const auto dout = random_values<T>(static_cast<std::size_t>(n + 1), -2.f, 2.f, 12);
    for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{1}}) {
      SCOPED_TRACE("offset " + std::to_string(offset));
      const std::int64_t len = n + 1 - offset;
      std::vector<T> dgate_want(static_cast<std::size_t>(len)), dup_want(dgate_want.size());
      for (std::int64_t i = 0; i < len; ++i) {
        const float g = value(gate[offset + i]), d = value(dout[offset + i]);
        const float sg = 1.f / (1.f + std::exp(-g));
        dgate_want[i] = from_value<T>(d * value(up[offset + i]) * sg * (1.f + g * (1.f - sg)));
        dup_want[i] = from_value<T>(d * g * sg);
      }
      auto dgate = unwritten<T>(len), dup = unwritten<T>(len);
      cuda::silu_mul_backward(nullptr, dtype_of<T>(), dgate.data(), dup.data(), gate.data() + offset,
                              up.data() + offset, dout.data() + offset, len);
      EXPECT_TRUE(same_bits(dgate, dgate_want));
      EXPECT_TRUE(same_bits(dup, dup_want));
    }
  }
}

TYPED_TEST(PointwiseKernelsOnCpu, RopeBackwardTurnsBackInPlaceOrIntoAnotherBuffer) {
  using T = TypeParam;
  // Llama-sized heads (64 pairs) over 37 positions; a pair's halves are 64 elements apart.
  const std::int64_t B = 2, len = 37, H = 3, hd = 128, n = B * len * H * hd;
  const auto x = random_values<T>(static_cast<std::size_t>(n), -2.f, 2.f, 13);
  auto turned = unwritten<T>(n);
  cuda::rope(nullptr, dtype_of<T>(), turned.data(), x.data(), B, len, H, hd, 10000.f, false);
  auto back = unwritten<T>(n);
  cuda::rope(nullptr, dtype_of<T>(), back.data(), turned.data(), B, len, H, hd, 10000.f, true);
  std::vector<T> in_place = turned;
  cuda::rope(nullptr, dtype_of<T>(), in_place.data(), in_place.data(), B, len, H, hd, 10000.f, true);
  EXPECT_TRUE(same_bits(in_place, back));
  // The rotation is orthogonal: turning back restores x to the rounding of the two passes.
  const float tol = std::is_same_v<T, float> ? 1e-5f : 3e-2f;
  for (std::int64_t i = 0; i < n; ++i) ASSERT_NEAR(value(back[i]), value(x[i]), tol) << "element " << i;
}

TYPED_TEST(PointwiseKernelsOnCpu, PackQkvBackwardWritesEveryGradientSummingEachGroupInHeadOrder) {
  using T = TypeParam;
  // Rows wider than a block (C = 512), four query heads a key/value head.
  const int N = 5, H = 8, KV = 2, hd = 64, C = H * hd, K = KV * hd, R = H / KV;
  const auto dqkv = random_values<T>(static_cast<std::size_t>(N * 3 * C), -2.f, 2.f, 14);
  std::vector<T> dq_want(static_cast<std::size_t>(N * C)), dk_want(static_cast<std::size_t>(N * K)),
      dv_want(dk_want.size());
  for (int row = 0; row < N; ++row) {
    for (int j = 0; j < C; ++j) dq_want[row * C + j] = dqkv[row * 3 * C + j];
    for (int j = 0; j < K; ++j) {
      float sk = 0.f, sv = 0.f;
      for (int head = (j / hd) * R; head < (j / hd + 1) * R; ++head) {
        sk += value(dqkv[row * 3 * C + C + head * hd + j % hd]);
        sv += value(dqkv[row * 3 * C + 2 * C + head * hd + j % hd]);
      }
      dk_want[row * K + j] = from_value<T>(sk);
      dv_want[row * K + j] = from_value<T>(sv);
    }
  }
  auto dq = unwritten<T>(N * C), dk = unwritten<T>(N * K), dv = unwritten<T>(N * K);
  cuda::pack_qkv_backward(nullptr, dtype_of<T>(), dq.data(), dk.data(), dv.data(), dqkv.data(), N, H, KV, hd);
  EXPECT_TRUE(same_bits(dq, dq_want));
  EXPECT_TRUE(same_bits(dk, dk_want));
  EXPECT_TRUE(same_bits(dv, dv_want));
}

}  // namespace
}  // namespace fsdplab
