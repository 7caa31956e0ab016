// The pointwise kernels' own source (engine/cuda/pointwise_kernels.cu), run on the CPU by
// cuda_threads_on_cpu.hpp. Each element is computed in f32 with the host body's operations in its order, so the
// kernels are checked bit for bit against plain loops of those operations: bias_add and add_scaled; GELU (the host's
// own gelu_tanh), ReLU and its backward, scale, SwiGLU's gate, casts either way (against the host's bf16 rounding)
// and fills, over lengths and views that take both the 16-byte packs and the element-wise path (fills past the grid's
// threads too); the in-place GELU backward against gelu_backward into zeros; Llama's backward kernels (SwiGLU's gate;
// the rotary embedding, turned back to within rounding) and the qkv packing both ways. Outputs start as NaN, so that
// an element a kernel never writes shows. The launchers refuse a dtype that is not floating, naming themselves.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include "pointwise_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/tensor/bf16.hpp"
#include "engine/tensor/gelu_tanh.hpp"
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

// The views a map kernel (pointwise_kernels.cu's grid-stride map_kernel) must cover: one element; 37, whose 16-byte
// packs leave an element-wise tail; 4099, more than a block's 256 threads take. Each from a 16-byte-aligned start
// (the packs) and from one element in, as a view that starts mid-pack is (element by element).
struct View {
  std::int64_t n, offset;
};

std::vector<View> map_views() {
  std::vector<View> views;
  for (const std::int64_t n : {1, 37, 4099})
    for (const std::int64_t offset : {0, 1}) views.push_back({n, offset});
  return views;
}

std::string describe_view(View v) { return "n " + std::to_string(v.n) + ", offset " + std::to_string(v.offset); }

// n + offset random values, of which a kernel is given the last n.
template <class T>
std::vector<T> view_values(View v, float lo, float hi, std::uint32_t seed) {
  return random_values<T>(static_cast<std::size_t>(v.n + v.offset), lo, hi, seed);
}

// `v` stored in T as the host's store_f32 stores it (engine/tensor/float_io.hpp: bf16.hpp's float_to_bf16), rather
// than as the kernels' own cuda_bf16.h stand-in rounds it.
template <class T>
T host_stored(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __nv_bfloat16{float_to_bf16(v)};
  }
}

TYPED_TEST(PointwiseKernelsOnCpu, GeluIsTheHostsTanhApproximationBitForBit) {
  using T = TypeParam;
  for (const View v : map_views()) {
    SCOPED_TRACE(describe_view(v));
    // Past +-4 tanh saturates: both the curve and its flat ends.
    const auto x = view_values<T>(v, -6.f, 6.f, 20);
    std::vector<T> want(static_cast<std::size_t>(v.n));
    for (std::int64_t i = 0; i < v.n; ++i) want[i] = from_value<T>(gelu_tanh(value(x[v.offset + i])));
    auto out = unwritten<T>(v.n);
    cuda::gelu(nullptr, dtype_of<T>(), out.data(), x.data() + v.offset, v.n);
    EXPECT_TRUE(same_bits(out, want));
  }
}

// x's edges first (where the view is long enough): both zeros (out +0), the infinities, and NaN, which passes
// through as in PyTorch's relu (the host writes `x <= 0 ? 0 : x`).
template <class T>
std::vector<T> relu_inputs(View v, std::uint32_t seed) {
  auto x = view_values<T>(v, -4.f, 4.f, seed);
  const float edges[] = {-0.f, 0.f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
  for (std::int64_t i = 0; i < 5 && i < v.n; ++i) x[v.offset + i] = from_value<T>(edges[i]);
  return x;
}

TYPED_TEST(PointwiseKernelsOnCpu, ReluZeroesWhatIsNotPositiveAndPassesNaNThroughIntoAnotherBufferOrInPlace) {
  using T = TypeParam;
  for (const View v : map_views()) {
    SCOPED_TRACE(describe_view(v));
    const auto x = relu_inputs<T>(v, 21);
    std::vector<T> want(static_cast<std::size_t>(v.n));
    for (std::int64_t i = 0; i < v.n; ++i) {
      const float xi = value(x[v.offset + i]);
      want[i] = from_value<T>(xi <= 0.f ? 0.f : xi);
    }
    auto out = unwritten<T>(v.n);
    cuda::relu(nullptr, dtype_of<T>(), out.data(), x.data() + v.offset, v.n);
    EXPECT_TRUE(same_bits(out, want));
    if (v.n >= 5) {
      EXPECT_TRUE(std::isnan(value(out[4])));
    }
    // out may be x (the front-end lets it): each element is read before it is written.
    std::vector<T> in_place = x;
    cuda::relu(nullptr, dtype_of<T>(), in_place.data() + v.offset, in_place.data() + v.offset, v.n);
    EXPECT_TRUE(same_bits(std::vector<T>(in_place.begin() + v.offset, in_place.end()), want));
  }
}

TYPED_TEST(PointwiseKernelsOnCpu, ReluBackwardAddsDoutWhereXIsPositiveAndLeavesDxAsItWasElsewhere) {
  using T = TypeParam;
  for (const View v : map_views()) {
    SCOPED_TRACE(describe_view(v));
    const auto x = relu_inputs<T>(v, 22);  // +-0 and NaN leave dx as it was, as on the host
    const auto dout = view_values<T>(v, -2.f, 2.f, 23);
    const auto dx0 = view_values<T>(v, -1.f, 1.f, 24);
    // The host body adds only where x > 0, and leaves dx (and the element before the view) alone elsewhere.
    std::vector<T> want = dx0, want_into_dout = dout;
    for (std::int64_t i = v.offset; i < v.offset + v.n; ++i) {
      if (value(x[i]) > 0.f) {
        want[i] = from_value<T>(value(dx0[i]) + value(dout[i]));
        want_into_dout[i] = from_value<T>(value(dout[i]) + value(dout[i]));
      }
    }
    std::vector<T> dx = dx0;
    cuda::relu_backward(nullptr, dtype_of<T>(), dx.data() + v.offset, x.data() + v.offset, dout.data() + v.offset, v.n);
    EXPECT_TRUE(same_bits(dx, want));
    // dx may be dout itself (the front-end lets it): each element is read whole before it is written.
    std::vector<T> d = dout;
    cuda::relu_backward(nullptr, dtype_of<T>(), d.data() + v.offset, x.data() + v.offset, d.data() + v.offset, v.n);
    EXPECT_TRUE(same_bits(d, want_into_dout));
  }
}

TYPED_TEST(PointwiseKernelsOnCpu, ScaleMultipliesByAlphaBitForBitIntoAnotherBufferOrInPlace) {
  using T = TypeParam;
  for (const View v : map_views()) {
    SCOPED_TRACE(describe_view(v));
    const auto x = view_values<T>(v, -5.f, 5.f, 25);
    const float alpha = -0.3f;  // not a power of two: the product rounds
    std::vector<T> want = x;
    for (std::int64_t i = v.offset; i < v.offset + v.n; ++i) want[i] = from_value<T>(alpha * value(x[i]));
    auto out = unwritten<T>(v.n);
    cuda::scale(nullptr, dtype_of<T>(), out.data(), x.data() + v.offset, alpha, v.n);
    EXPECT_TRUE(same_bits(out, std::vector<T>(want.begin() + v.offset, want.end())));
    std::vector<T> in_place = x;
    cuda::scale(nullptr, dtype_of<T>(), in_place.data() + v.offset, in_place.data() + v.offset, alpha, v.n);
    EXPECT_TRUE(same_bits(in_place, want));
  }
}

template <class In, class Out>
void expect_cast_is_the_hosts() {
  SCOPED_TRACE(std::string(dtype_name(dtype_of<In>())) + " to " + std::string(dtype_name(dtype_of<Out>())));
  // The edges of rounding to bf16 first: ties to even down and up, the largest float (to infinity), -0, and
  // subnormals (to 0, and up to the smallest normal).
  const std::uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x80000000u, 0x00000001u, 0x807fffffu};
  for (const View v : map_views()) {
    SCOPED_TRACE(describe_view(v));
    auto in = view_values<In>(v, -3.f, 3.f, 26);
    for (std::int64_t i = 0; i < 6 && i < v.n; ++i) in[v.offset + i] = from_value<In>(std::bit_cast<float>(edges[i]));
    std::vector<Out> want(static_cast<std::size_t>(v.n));
    for (std::int64_t i = 0; i < v.n; ++i) want[i] = host_stored<Out>(value(in[v.offset + i]));
    auto out = unwritten<Out>(v.n);
    cuda::cast(nullptr, dtype_of<Out>(), out.data(), dtype_of<In>(), in.data() + v.offset, v.n);
    EXPECT_TRUE(same_bits(out, want));
  }
}

// A cast between dtypes of different sizes packs 4 elements (16 bytes of f32, 8 of bf16) where one dtype alone
// would pack 4 or 8.
TEST(PointwiseKernelsOnCpu, CastIsTheHostsConversionBitForBitBetweenEitherDtypes) {
  expect_cast_is_the_hosts<float, float>();
  expect_cast_is_the_hosts<float, __nv_bfloat16>();
  expect_cast_is_the_hosts<__nv_bfloat16, float>();
  expect_cast_is_the_hosts<__nv_bfloat16, __nv_bfloat16>();
}

TYPED_TEST(PointwiseKernelsOnCpu, FillWritesTheValueRoundedOnceToEveryElementOfTheViewAndNothingAround) {
  using T = TypeParam;
  // 0.1 is no bf16 (nor f32): rounded once, as the host rounds it; -0 keeps its sign.
  for (const float fill_value : {0.1f, -0.f, 3.f}) {
    SCOPED_TRACE("value " + std::to_string(fill_value));
    for (const View v : map_views()) {
      SCOPED_TRACE(describe_view(v));
      // NaN before the view (where it starts one element in) and one element after it, which must stay so.
      auto t = unwritten<T>(v.offset + v.n + 1);
      std::vector<T> want = t;
      for (std::int64_t i = v.offset; i < v.offset + v.n; ++i) want[i] = host_stored<T>(fill_value);
      cuda::fill(nullptr, dtype_of<T>(), t.data() + v.offset, fill_value, v.n);
      EXPECT_TRUE(same_bits(t, want));
    }
  }
}

// More elements than the grid has threads (4,096 blocks of 256), element by element (a view one element in): the
// grid-stride loop takes the rest.
TEST(PointwiseKernelsOnCpu, FillCoversMoreElementsThanTheGridHasThreads) {
  const std::int64_t n = 4096 * 256 + 37;
  auto t = unwritten<__nv_bfloat16>(n + 1);
  std::vector<__nv_bfloat16> want(static_cast<std::size_t>(n + 1), host_stored<__nv_bfloat16>(0.1f));
  want[0] = t[0];
  cuda::fill(nullptr, DType::bf16, t.data() + 1, 0.1f, n);
  EXPECT_TRUE(same_bits(t, want));
}

TYPED_TEST(PointwiseKernelsOnCpu, SiluMulIsGateTimesItsSigmoidTimesUpBitForBit) {
  using T = TypeParam;
  for (const View v : map_views()) {
    SCOPED_TRACE(describe_view(v));
    const auto gate = view_values<T>(v, -6.f, 6.f, 27);
    const auto up = view_values<T>(v, -2.f, 2.f, 28);
    // The host body: g * sigmoid(g) * up, sigmoid(g) = 1 / (1 + exp(-g)), left to right in f32.
    std::vector<T> want(static_cast<std::size_t>(v.n));
    for (std::int64_t i = 0; i < v.n; ++i) {
      const float g = value(gate[v.offset + i]);
      want[i] = from_value<T>(g * (1.f / (1.f + std::exp(-g))) * value(up[v.offset + i]));
    }
    auto out = unwritten<T>(v.n);
    cuda::silu_mul(nullptr, dtype_of<T>(), out.data(), gate.data() + v.offset, up.data() + v.offset, v.n);
    EXPECT_TRUE(same_bits(out, want));
  }
}

struct PackShape {
  int N, H, KV, hd;
};

TYPED_TEST(PointwiseKernelsOnCpu, PackQkvCopiesQAndEachQueryHeadsKeyAndValueHeadBitForBit) {
  using T = TypeParam;
  // One element a row; a row of C = 33 (three heads of 11) sharing one key/value head; four query heads a key/value
  // head in rows wider than a block (C = 512); GPT-2's 12 heads of 64, each its own key/value head.
  for (const PackShape z :
       {PackShape{1, 1, 1, 1}, PackShape{3, 3, 1, 11}, PackShape{5, 8, 2, 64}, PackShape{2, 12, 12, 64}}) {
    SCOPED_TRACE("N " + std::to_string(z.N) + ", H " + std::to_string(z.H) + ", KV " + std::to_string(z.KV) + ", hd " +
                 std::to_string(z.hd));
    const int C = z.H * z.hd, K = z.KV * z.hd, R = z.H / z.KV;
    const auto q = random_values<T>(static_cast<std::size_t>(z.N * C), -2.f, 2.f, 29);
    const auto k = random_values<T>(static_cast<std::size_t>(z.N * K), -2.f, 2.f, 30);
    const auto v = random_values<T>(static_cast<std::size_t>(z.N * K), -2.f, 2.f, 31);
    // The host body's loop: the row's q, then each query head h's copy of key/value head h / R.
    std::vector<T> want(static_cast<std::size_t>(z.N * 3 * C));
    for (int n = 0; n < z.N; ++n) {
      for (int j = 0; j < C; ++j) want[n * 3 * C + j] = q[n * C + j];
      for (int h = 0; h < z.H; ++h)
        for (int i = 0; i < z.hd; ++i) {
          want[n * 3 * C + C + h * z.hd + i] = k[n * K + (h / R) * z.hd + i];
          want[n * 3 * C + 2 * C + h * z.hd + i] = v[n * K + (h / R) * z.hd + i];
        }
    }
    auto qkv = unwritten<T>(z.N * 3 * C);
    cuda::pack_qkv(nullptr, dtype_of<T>(), qkv.data(), q.data(), k.data(), v.data(), z.N, z.H, z.KV, z.hd);
    EXPECT_TRUE(same_bits(qkv, want));
  }
}

// i32 (ids, targets) is no dtype these kernels compute in: each launcher refuses it by name before it launches.
TEST(PointwiseKernelsOnCpu, TheLaunchersRefuseADtypeThatIsNotFloatingNamingThemselves) {
  std::vector<float> a(8, 1.f), b(8, 1.f), c(8, 1.f), qkv(24);
  const DType i32 = DType::i32;
  EXPECT_EQ(refusal_of([&] { cuda::gelu(nullptr, i32, a.data(), b.data(), 8); }), "gelu: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::relu(nullptr, i32, a.data(), b.data(), 8); }), "relu: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::relu_backward(nullptr, i32, a.data(), b.data(), c.data(), 8); }),
            "relu_backward: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::scale(nullptr, i32, a.data(), b.data(), 2.f, 8); }),
            "scale: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::cast(nullptr, DType::f32, a.data(), i32, b.data(), 8); }),
            "cast: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::cast(nullptr, i32, a.data(), DType::f32, b.data(), 8); }),
            "cast: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::fill(nullptr, i32, a.data(), 2.f, 8); }), "fill: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::silu_mul(nullptr, i32, a.data(), b.data(), c.data(), 8); }),
            "silu_mul: i32 is not a floating dtype");
  EXPECT_EQ(refusal_of([&] { cuda::pack_qkv(nullptr, i32, qkv.data(), a.data(), b.data(), c.data(), 1, 2, 1, 4); }),
            "pack_qkv: i32 is not a floating dtype");
  // Nothing ran: the outputs are as they were.
  EXPECT_EQ(a, std::vector<float>(8, 1.f));
  EXPECT_EQ(qkv, std::vector<float>(24, 0.f));
}

}  // namespace
}  // namespace fsdplab
