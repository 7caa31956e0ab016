// The elementwise ops and sum: each against a plain loop (and PyTorch's own numbers for GELU), the
// backward ops against central differences and for accumulating, bf16 rounding, in-place use, the
// ranges and costs they declare, and the errors they give.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/tensor/bf16.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/reduce.hpp"
#include "gelu_tanh.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::all_close;
using testing::compute;
using testing::read;
using testing::error_of;
using testing::contains;
using testing::rounded_to_bf16;
using testing::make_sim_device;
using testing::random_values;
using testing::tensor_from;
using testing::zeros;

// The numerical tests run on every device (the sim device, and the cuda device where there is a GPU).
class ElementwiseTest : public testing::OnEachDevice {};
class ElementwiseReduceTest : public testing::OnEachDevice {};

// ---- bias -------------------------------------------------------------------------------------------

TEST_P(ElementwiseTest, BiasAddBroadcastsOverRowsInPlaceAndInBf16) {
  auto dev = device();
  const int N = 3, C = 5;
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const auto xv = rounded_to_bf16(random_values(N * C, 1));
    const auto bv = rounded_to_bf16(random_values(C, 2));
    std::vector<double> expected(N * C);
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c) {
        const float sum = xv[n * C + c] + bv[c];
        expected[n * C + c] = dt == DType::bf16 ? round_to_bf16(sum) : sum;
      }
    }
    Tensor x = tensor_from(*dev, {N, C}, xv, dt);
    Tensor bias = tensor_from(*dev, {C}, bv, dt);
    Tensor out = Tensor::empty(*dev, {N, C}, dt, MemTag::activation);
    bias_add(compute(*dev), x, bias, out);
    EXPECT_TRUE(all_close(read(out), expected, 0));
    bias_add(compute(*dev), x, bias, x);  // in place
    EXPECT_TRUE(all_close(read(x), expected, 0));
  }
}

TEST_P(ElementwiseTest, BiasBackwardAddsColumnSumsMatchingFiniteDifferences) {
  auto dev = device();
  const int N = 4, C = 3;
  const auto xv = random_values(N * C, 3);
  const auto bv = random_values(C, 4);
  const auto gv = random_values(N * C, 5);
  Tensor g = tensor_from(*dev, {N, C}, gv);
  Tensor dbias = tensor_from(*dev, {C}, std::vector<float>{10.f, 20.f, 30.f});
  bias_backward(compute(*dev), g, dbias);

  Tensor x = tensor_from(*dev, {N, C}, xv);
  const auto loss = [&](std::span<const float> b) {
    Tensor tb = tensor_from(*dev, {C}, b);
    Tensor out = Tensor::empty(*dev, {N, C}, DType::f32, MemTag::activation);
    bias_add(compute(*dev), x, tb, out);
    return testing::dot(read(out), gv);
  };
  std::vector<double> expected = testing::finite_difference(loss, bv);
  for (int c = 0; c < C; ++c) expected[c] += 10.0 * (c + 1);
  EXPECT_TRUE(all_close(read(dbias), expected, 1e-4));
}

// ---- GELU ------------------------------------------------------------------------------------------

// torch.nn.functional.gelu(x, approximate='tanh') and its gradient (PyTorch 1.13, f32, CPU).
const std::vector<float> kGeluX = {-4, -2.5, -1, -0.5, -0.1, 0, 0.1, 0.5, 1, 2.5, 4};
const std::vector<float> kTorchGelu = {
    -7.02142715e-05f, -0.0150842965f, -0.158807993f, -0.154285997f, -0.0460172482f, 0.f,
    0.0539827533f,    0.345714003f,   0.841192007f,  2.48491573f,   3.9999299f};
const std::vector<float> kTorchGeluGrad = {-0.000334972079f, -0.037951652f, -0.0829640925f, 0.13263011f,
                                           0.420478195f,     0.5f,          0.579521775f,   0.86736989f,
                                           1.08296406f,      1.03795171f,   1.00033498f};

TEST_P(ElementwiseTest, GeluMatchesPyTorchsTanhApproximation) {
  auto dev = device();
  const Shape shape{static_cast<std::int64_t>(kGeluX.size())};
  Tensor x = tensor_from(*dev, shape, kGeluX);
  Tensor out = Tensor::empty(*dev, shape, DType::f32, MemTag::activation);
  gelu(compute(*dev), x, out);
  EXPECT_TRUE(all_close(read(out), kTorchGelu, 1e-7, 1e-6));

  Tensor dx = zeros(*dev, shape);
  gelu_backward(compute(*dev), x, tensor_from(*dev, shape, std::vector<float>(kGeluX.size(), 1.f)), dx);
  EXPECT_TRUE(all_close(read(dx), kTorchGeluGrad, 1e-7, 1e-6));
}

TEST_P(ElementwiseTest, GeluMatchesTheFormulaInF32AndBf16) {
  auto dev = device();
  const auto xv = rounded_to_bf16(random_values(257, 6, -6.f, 6.f));
  std::vector<double> expected(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) expected[i] = reference::gelu_tanh(xv[i]);
  const Shape shape{static_cast<std::int64_t>(xv.size())};

  Tensor out32 = Tensor::empty(*dev, shape, DType::f32, MemTag::activation);
  gelu(compute(*dev), tensor_from(*dev, shape, xv), out32);
  EXPECT_TRUE(all_close(read(out32), expected, 1e-6, 1e-6));

  Tensor x16 = tensor_from(*dev, shape, xv, DType::bf16);
  gelu(compute(*dev), x16, x16);  // in place
  EXPECT_TRUE(all_close(read(x16), expected, 1e-6, 1.0 / 256));
}

TEST_P(ElementwiseTest, GeluBackwardAddsAndMatchesFiniteDifferences) {
  auto dev = device();
  const int n = 40;
  const auto xv = random_values(n, 7, -4.f, 4.f);
  const auto gv = random_values(n, 8);
  Tensor x = tensor_from(*dev, {n}, xv);
  Tensor dx = tensor_from(*dev, {n}, std::vector<float>(n, 0.5f));
  gelu_backward(compute(*dev), x, tensor_from(*dev, {n}, gv), dx);

  const auto loss = [&](std::span<const float> v) {
    Tensor out = Tensor::empty(*dev, {n}, DType::f32, MemTag::activation);
    gelu(compute(*dev), tensor_from(*dev, {n}, v), out);
    return testing::dot(read(out), gv);
  };
  std::vector<double> expected = testing::finite_difference(loss, xv, 1e-2);
  std::vector<double> formula(n);
  for (int i = 0; i < n; ++i) {
    expected[i] += 0.5;
    formula[i] = 0.5 + gv[i] * reference::gelu_tanh_derivative(xv[i]);
  }
  EXPECT_TRUE(all_close(read(dx), expected, 2e-3));
  EXPECT_TRUE(all_close(read(dx), formula, 1e-6, 1e-6));
}

// ---- the in-place GELU backward ------------------------------------------------------------------

// Bit for bit, +0 and -0 told apart: what an in-place op promises against the op it replaces.
::testing::AssertionResult same_bits(const Tensor& in_place, const Tensor& separate) {
  const std::vector<float> a = read(in_place), b = read(separate);
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " elements against " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]))
      return ::testing::AssertionFailure() << "element " << i << ": in place " << a[i] << ", separate op " << b[i];
  }
  return ::testing::AssertionSuccess();
}

// gelu_backward_in_place against gelu_backward into zeros, in f32 and bf16.
TEST_P(ElementwiseTest, GeluBackwardInPlaceIsGeluBackwardIntoZerosBitForBit) {
  auto dev = device();
  const auto s = compute(*dev);
  struct Case {
    std::int64_t N, C;
  };
  for (const Case c : {Case{1, 1}, Case{5, 33}, Case{3, 768}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " [" + std::to_string(c.N) + ", " + std::to_string(c.C) + "]");
      const int n = static_cast<int>(c.N * c.C);
      const Shape shape{c.N, c.C};
      Tensor x = tensor_from(*dev, shape, random_values(n, 11, -3.f, 3.f), dt);
      const auto gv = random_values(n, 14);
      Tensor d = tensor_from(*dev, shape, gv, dt), dx = zeros(*dev, shape, dt);
      gelu_backward_in_place(s, x, d);
      gelu_backward(s, x, tensor_from(*dev, shape, gv, dt), dx);
      EXPECT_TRUE(same_bits(d, dx));
    }
  }
}

// ---- ReLU ------------------------------------------------------------------------------------------

TEST_P(ElementwiseTest, ReluForwardBackwardAndNaN) {
  auto dev = device();
  const std::vector<float> xv = {-2.f, -0.25f, 0.f, 0.25f, 3.f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> gv = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  Tensor x = tensor_from(*dev, {6}, xv);
  Tensor out = Tensor::empty(*dev, {6}, DType::f32, MemTag::activation);
  relu(compute(*dev), x, out);
  const auto y = read(out);
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 5), (std::vector<float>{0.f, 0.f, 0.f, 0.25f, 3.f}));
  EXPECT_TRUE(std::isnan(y[5]));  // as torch.relu: NaN propagates

  Tensor dx = tensor_from(*dev, {6}, std::vector<float>(6, 100.f));
  relu_backward(compute(*dev), x, tensor_from(*dev, {6}, gv), dx);
  EXPECT_EQ(read(dx), (std::vector<float>{100.f, 100.f, 100.f, 104.f, 105.f, 100.f}));
}

TEST_P(ElementwiseTest, ReluBackwardMatchesFiniteDifferencesInBf16) {
  auto dev = device();
  std::vector<float> xv = random_values(32, 9);
  for (float& v : xv) v = round_to_bf16(v + (v < 0 ? -0.1f : 0.1f));  // away from the kink
  const auto gv = rounded_to_bf16(random_values(32, 10));
  Tensor dx = zeros(*dev, {32}, DType::bf16);
  relu_backward(compute(*dev), tensor_from(*dev, {32}, xv, DType::bf16), tensor_from(*dev, {32}, gv, DType::bf16), dx);
  dev->synchronize();  // before the host writes buffers that may reuse the ones just read
  const auto loss = [&](std::span<const float> v) {
    Tensor t = tensor_from(*dev, {32}, v);
    relu(compute(*dev), t, t);
    return testing::dot(read(t), gv);
  };
  EXPECT_TRUE(all_close(read(dx), testing::finite_difference(loss, xv, 1e-2), 1e-4));
}

// ---- add, scale, cast, fill, copy ----------------------------------------------------------------

TEST_P(ElementwiseTest, AddAndScaleInPlaceAndInBf16) {
  auto dev = device();
  const auto av = random_values(20, 11);
  const auto bv = random_values(20, 12);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const auto ar = dt == DType::bf16 ? rounded_to_bf16(av) : av;
    const auto br = dt == DType::bf16 ? rounded_to_bf16(bv) : bv;
    std::vector<double> sum(20), scaled(20);
    for (int i = 0; i < 20; ++i) {
      const float s = ar[i] + br[i];
      sum[i] = dt == DType::bf16 ? round_to_bf16(s) : s;
      const float p = -3.f * static_cast<float>(sum[i]);
      scaled[i] = dt == DType::bf16 ? round_to_bf16(p) : p;
    }
    Tensor a = tensor_from(*dev, {4, 5}, av, dt);
    Tensor b = tensor_from(*dev, {4, 5}, bv, dt);
    add(compute(*dev), a, b, a);  // the residual stream, updated in place
    EXPECT_TRUE(all_close(read(a), sum, 0));
    Tensor out = Tensor::empty(*dev, {4, 5}, dt, MemTag::activation);
    scale(compute(*dev), a, -3.f, out);
    EXPECT_TRUE(all_close(read(out), scaled, 0));
  }
}

TEST_P(ElementwiseTest, AddScaledAccumulatesIntoF32FromEitherDtype) {
  auto dev = device();
  const auto xv = random_values(20, 14), acc = random_values(20, 15);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const auto xr = dt == DType::bf16 ? rounded_to_bf16(xv) : xv;
    std::vector<float> want(acc);
    for (int i = 0; i < 20; ++i) want[i] += 0.25f * xr[i];
    Tensor out = tensor_from(*dev, {4, 5}, acc);
    add_scaled(compute(*dev), tensor_from(*dev, {4, 5}, xv, dt), 0.25f, out);
    EXPECT_EQ(read(out), want);
  }
  Tensor self = tensor_from(*dev, {20}, acc);  // in place: out += alpha * out
  add_scaled(compute(*dev), self, -1.f, self);
  EXPECT_EQ(read(self), std::vector<float>(20, 0.f));
}

TEST_P(ElementwiseTest, CastRoundsToNearestEvenAndWidensExactly) {
  auto dev = device();
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: to the even one, 1. 1 + 3 * 2^-8 is halfway
  // between 1 + 2^-7 and 1 + 2^-6: to the even one, 1 + 2^-6. Just above a tie rounds up. PyTorch's
  // .to(torch.bfloat16) gives the same bits.
  const std::vector<float> v = {1.00390625f, 1.01171875f, std::nextafter(1.00390625f, 2.f), -1.00390625f, 3e38f, 0.1f};
  Tensor f = tensor_from(*dev, {6}, v);
  Tensor h = Tensor::empty(*dev, {6}, DType::bf16, MemTag::activation);
  cast(compute(*dev), f, h);
  // bf16 widens to f32 exactly, one value per bit pattern: comparing the widened values compares the bits.
  std::vector<float> want;
  for (std::uint16_t bits : {0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x7F62, 0x3DCD}) want.push_back(bf16_to_float(bits));
  EXPECT_EQ(read(h), want);

  Tensor back = Tensor::empty(*dev, {6}, DType::f32, MemTag::activation);
  cast(compute(*dev), h, back);
  EXPECT_EQ(read(back), read(h));
  Tensor same = Tensor::empty(*dev, {6}, DType::f32, MemTag::activation);
  cast(compute(*dev), f, same);
  EXPECT_EQ(read(same), v);
}

TEST_P(ElementwiseTest, FillAndCopy) {
  auto dev = device();
  Tensor f = Tensor::empty(*dev, {2, 3}, DType::f32, MemTag::activation);
  Tensor h = Tensor::empty(*dev, {6}, DType::bf16, MemTag::activation);
  fill(compute(*dev), f, 0.1f);
  fill(compute(*dev), h, 0.1f);
  EXPECT_EQ(read(f), std::vector<float>(6, 0.1f));
  EXPECT_EQ(read(h), std::vector<float>(6, round_to_bf16(0.1f)));

  const auto v = random_values(6, 13);
  Tensor src = tensor_from(*dev, {6}, v);
  copy(compute(*dev), src, f);  // same element count, another shape
  EXPECT_EQ(read(f), v);

  Tensor ids = Tensor::empty(*dev, {4}, DType::i32, MemTag::activation);
  Tensor ids2 = Tensor::empty(*dev, {2, 2}, DType::i32, MemTag::activation);
  ids.copy_from(std::vector<std::int32_t>{7, -1, 50256, 0});
  copy(compute(*dev), ids, ids2);
  dev->synchronize();
  EXPECT_EQ(ids2.to_indices(), (std::vector<std::int32_t>{7, -1, 50256, 0}));
}

// ---- sum -------------------------------------------------------------------------------------------

TEST_P(ElementwiseReduceTest, SumAccumulatesInDouble) {
  auto dev = device();
  // An f32 running sum stays at 1e8 (its spacing there is 8) and ends at 0; the exact sum is 1000.
  std::vector<float> v(1002, 1.f);
  v.front() = 1e8f;
  v.back() = -1e8f;
  Tensor out = Tensor::empty(*dev, {1}, DType::f32, MemTag::activation);
  sum(compute(*dev), tensor_from(*dev, {2, 501}, v), out);
  EXPECT_EQ(read(out)[0], 1000.f);

  const auto r = rounded_to_bf16(random_values(300, 14));
  double expected = 0;
  for (float x : r) expected += x;
  sum(compute(*dev), tensor_from(*dev, {300}, r, DType::bf16), out);
  EXPECT_EQ(read(out)[0], static_cast<float>(expected));
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.cost.bytes, 300 * 2 + 4);
  EXPECT_FALSE(op.cost.matmul);
}

// ---- long and unaligned tensors ----------------------------------------------------------------
// Sizes and offsets that take every path of a kernel: 16-byte packs and the tail after them, views that
// start off a 16-byte boundary (element by element), more elements than one wave of blocks, bias rows and
// columns that do not fill a block, and a sum spread over many blocks.

TEST_P(ElementwiseTest, LongAndUnalignedTensorsMatchTheFormula) {
  auto dev = device();
  const std::int64_t n = 300001;  // odd: a tail after the packs
  const auto xv = rounded_to_bf16(random_values(n + 1, 15, -6.f, 6.f));
  const auto yv = rounded_to_bf16(random_values(n + 1, 16));
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor xbuf = tensor_from(*dev, {n + 1}, xv, dt), ybuf = tensor_from(*dev, {n + 1}, yv, dt);
    for (std::int64_t offset : {0, 1}) {
      SCOPED_TRACE("offset " + std::to_string(offset));
      const Tensor x = xbuf.view(offset, {n}), y = ybuf.view(offset, {n});
      const Tensor out = Tensor::empty(*dev, {n + 1}, dt, MemTag::activation).view(offset, {n});
      std::vector<double> want(n), sum(n), narrowed(n);
      for (std::int64_t i = 0; i < n; ++i) {
        want[i] = reference::gelu_tanh(xv[offset + i]);
        const float s = xv[offset + i] + yv[offset + i];
        sum[i] = dt == DType::bf16 ? round_to_bf16(s) : s;
        narrowed[i] = round_to_bf16(xv[offset + i]);
      }
      gelu(compute(*dev), x, out);
      EXPECT_TRUE(all_close(read(out), want, 1e-6, dt == DType::bf16 ? 1.0 / 256 : 1e-6));
      add(compute(*dev), x, y, out);
      EXPECT_TRUE(all_close(read(out), sum, 0));
      const Tensor h = Tensor::empty(*dev, {n + 1}, DType::bf16, MemTag::activation).view(offset, {n});
      cast(compute(*dev), x, h);
      EXPECT_TRUE(all_close(read(h), narrowed, 0));
    }
  }
}

TEST_P(ElementwiseTest, BiasOverManyRowsAndAnOddNumberOfColumnsIsDeterministic) {
  auto dev = device();
  const int N = 1000, C = 77;
  const auto xv = rounded_to_bf16(random_values(N * C, 17)), bv = rounded_to_bf16(random_values(C, 18));
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::vector<double> out_want(N * C), sums(C, 0.0);
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c) {
        const float v = xv[n * C + c] + bv[c];
        out_want[n * C + c] = dt == DType::bf16 ? round_to_bf16(v) : v;
        sums[c] += xv[n * C + c];
      }
    }
    const Tensor x = tensor_from(*dev, {N, C}, xv, dt), bias = tensor_from(*dev, {C}, bv, dt);
    const Tensor out = Tensor::empty(*dev, {N, C}, dt, MemTag::activation);
    bias_add(compute(*dev), x, bias, out);
    EXPECT_TRUE(all_close(read(out), out_want, 0));
    // Summed in f32, 1000 rows: within 1e-4 of the exact sums, and the same bits every run.
    const Tensor first = zeros(*dev, {C}, dt), second = zeros(*dev, {C}, dt);
    bias_backward(compute(*dev), x, first);
    bias_backward(compute(*dev), x, second);
    EXPECT_TRUE(all_close(read(first), sums, 1e-4, dt == DType::bf16 ? 1.0 / 256 : 0));
    EXPECT_EQ(read(first), read(second));
  }
}

TEST_P(ElementwiseReduceTest, ALongSumIsExactAndMayWriteIntoItsInput) {
  auto dev = device();
  // bf16 values in [-1, 1]: the exact sum of half a million fits a double's mantissa, in any order.
  const std::int64_t n = (1 << 19) + 3;
  const auto v = rounded_to_bf16(random_values(n, 19));
  double expected = 0;
  for (float x : v) expected += x;
  Tensor out = Tensor::empty(*dev, {1}, DType::f32, MemTag::activation);
  sum(compute(*dev), tensor_from(*dev, {n}, v, DType::bf16), out);
  EXPECT_EQ(read(out)[0], static_cast<float>(expected));
  const Tensor x = tensor_from(*dev, {n}, v);
  sum(compute(*dev), x, x.view(0, {1}));  // every element is read before the one write
  EXPECT_EQ(read(x)[0], static_cast<float>(expected));
}

TEST_P(ElementwiseReduceTest, SumOfSquaresIsExactAndMayWriteIntoItsInput) {
  auto dev = device();
  // Multiples of 1/256 in [-1, 1] (bf16 holds them exactly): their squares are multiples of 2^-16, so the sum of half
  // a million fits a double's mantissa in any order, and every device must give the f32 rounding of the exact sum.
  const std::int64_t n = (1 << 19) + 3;
  std::vector<float> v = random_values(n, 23);
  for (float& x : v) x = std::round(x * 256) / 256;
  double expected = 0;
  for (float x : v) expected += static_cast<double>(x) * x;
  Tensor out = Tensor::empty(*dev, {1}, DType::f32, MemTag::activation);
  for (DType dt : {DType::f32, DType::bf16}) {
    sum_of_squares(compute(*dev), tensor_from(*dev, {n}, v, dt), out);
    EXPECT_EQ(read(out)[0], static_cast<float>(expected)) << dtype_name(dt);
  }
  const Tensor x = tensor_from(*dev, {n}, v);
  sum_of_squares(compute(*dev), x, x.view(0, {1}));  // every element is read before the one write
  EXPECT_EQ(read(x)[0], static_cast<float>(expected));
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.name, "sum_of_squares");
  EXPECT_EQ(op.cost.bytes, n * 4 + 4);
}

// ---- what ops declare --------------------------------------------------------------------------

TEST(Elementwise, OpsDeclareEveryTensorTheyTouchAndTheirBytes) {
  auto dev = make_sim_device();
  const auto s = compute(*dev);
  Tensor x = zeros(*dev, {8, 4}, DType::bf16);
  Tensor y = zeros(*dev, {8, 4}, DType::bf16);
  Tensor dx = zeros(*dev, {8, 4}, DType::bf16);
  Tensor bias = zeros(*dev, {4}, DType::bf16);
  Tensor x32 = zeros(*dev, {8, 4});
  struct Expect {
    std::function<void()> run;
    std::size_t reads, writes;
    double bytes;
  };
  const double n = 32;
  const std::vector<Expect> cases = {
      {[&] { bias_add(s, x, bias, y); }, 2, 1, (2 * n + 4) * 2},
      {[&] { bias_backward(s, y, bias); }, 2, 1, (n + 8) * 2},
      {[&] { gelu(s, x, y); }, 1, 1, 2 * n * 2},
      {[&] { gelu_backward(s, x, y, dx); }, 3, 1, 4 * n * 2},
      {[&] { gelu_backward_in_place(s, x, dx); }, 2, 1, 3 * n * 2},
      {[&] { relu(s, x, y); }, 1, 1, 2 * n * 2},
      {[&] { relu_backward(s, x, y, dx); }, 3, 1, 4 * n * 2},
      {[&] { add(s, x, y, dx); }, 2, 1, 3 * n * 2},
      {[&] { scale(s, x, 2.f, y); }, 1, 1, 2 * n * 2},
      {[&] { add_scaled(s, x, 2.f, x32); }, 2, 1, n * (2 + 8)},
      {[&] { cast(s, x, x32); }, 1, 1, n * (2 + 4)},
      {[&] { fill(s, x, 1.f); }, 0, 1, n * 2},
      {[&] { copy(s, x, y); }, 1, 1, 2 * n * 2},
      {[&] { sum(s, x32, x32.view(0, {1})); }, 1, 1, n * 4 + 4},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    cases[i].run();
    const OpRecord& op = dev->ops().back();
    SCOPED_TRACE(op.name);
    EXPECT_EQ(op.reads.size(), cases[i].reads);
    EXPECT_EQ(op.writes.size(), cases[i].writes);
    EXPECT_EQ(op.cost.bytes, cases[i].bytes);
    EXPECT_FALSE(op.cost.matmul);
  }
  EXPECT_EQ(dev->ops().size(), cases.size());

  // On a dry run the same ops keep their times and skip their numerics.
  auto dry = make_sim_device(0, {.dry_run = true});
  Tensor a = Tensor::empty(*dry, {8, 4}, DType::bf16, MemTag::activation);
  Tensor b = Tensor::empty(*dry, {4}, DType::bf16, MemTag::activation);
  bias_add(compute(*dry), a, b, a);
  gelu_backward(compute(*dry), a, a, a);
  EXPECT_EQ(dry->ops().size(), 2u);
}

// ---- errors ----------------------------------------------------------------------------------------

TEST(Elementwise, RejectsMismatchedOperands) {
  auto dev = make_sim_device();
  const auto s = compute(*dev);
  Tensor x = zeros(*dev, {2, 3});
  Tensor wide = zeros(*dev, {2, 4});
  Tensor x16 = zeros(*dev, {2, 3}, DType::bf16);
  Tensor ids = Tensor::empty(*dev, {2, 3}, DType::i32, MemTag::activation);

  std::string msg = error_of([&] { add(s, x, wide, x); });
  EXPECT_TRUE(contains(msg, "add") && contains(msg, "[2, 3]") && contains(msg, "[2, 4]")) << msg;
  msg = error_of([&] { add_scaled(s, x, 1.f, x16); });
  EXPECT_TRUE(contains(msg, "add_scaled: out must be f32 of x's shape tensor [2, 3] f32") &&
              contains(msg, "[2, 3] bf16"))
      << msg;
  msg = error_of([&] { add_scaled(s, x16, 1.f, wide); });
  EXPECT_TRUE(contains(msg, "add_scaled") && contains(msg, "[2, 4] f32")) << msg;
  msg = error_of([&] { gelu(s, x, x16); });
  EXPECT_TRUE(contains(msg, "gelu") && contains(msg, "[2, 3] f32") && contains(msg, "[2, 3] bf16")) << msg;
  msg = error_of([&] { relu(s, ids, ids); });
  EXPECT_TRUE(contains(msg, "relu") && contains(msg, "i32")) << msg;
  msg = error_of([&] { gelu_backward(s, x, wide, x); });
  EXPECT_TRUE(contains(msg, "dout") && contains(msg, "[2, 4]")) << msg;
  msg = error_of([&] { bias_add(s, x, zeros(*dev, {4}), x); });
  EXPECT_TRUE(contains(msg, "bias") && contains(msg, "[3]") && contains(msg, "[4]")) << msg;
  msg = error_of([&] { bias_add(s, zeros(*dev, {6}), zeros(*dev, {6}), x); });
  EXPECT_TRUE(contains(msg, "[N, C]") && contains(msg, "[6]")) << msg;
  msg = error_of([&] { bias_backward(s, x, zeros(*dev, {3}, DType::bf16)); });
  EXPECT_TRUE(contains(msg, "dbias") && contains(msg, "[3] bf16")) << msg;
  msg = error_of([&] { cast(s, x, zeros(*dev, {3, 2}, DType::bf16)); });
  EXPECT_TRUE(contains(msg, "cast") && contains(msg, "[3, 2]")) << msg;
  msg = error_of([&] { copy(s, x, zeros(*dev, {5})); });
  EXPECT_TRUE(contains(msg, "copy") && contains(msg, "[5]")) << msg;
  msg = error_of([&] { copy(s, x, x16); });
  EXPECT_TRUE(contains(msg, "copy") && contains(msg, "bf16")) << msg;
  msg = error_of([&] { sum(s, x, zeros(*dev, {2})); });
  EXPECT_TRUE(contains(msg, "sum") && contains(msg, "1-element") && contains(msg, "[2]")) << msg;
  msg = error_of([&] { fill(s, ids, 1.f); });
  EXPECT_TRUE(contains(msg, "fill") && contains(msg, "i32")) << msg;

  msg = error_of([&] { gelu_backward_in_place(s, x, x); });
  EXPECT_TRUE(contains(msg, "gelu_backward_in_place") && contains(msg, "overlaps")) << msg;

  // A shifted view of the same storage: element i would read what element i-1 has just written.
  Tensor buf = zeros(*dev, {8});
  msg = error_of([&] { scale(s, buf.view(0, {6}), 2.f, buf.view(1, {6})); });
  EXPECT_TRUE(contains(msg, "overlaps")) << msg;
  EXPECT_EQ(dev->ops().size(), 0u);  // nothing was launched
}

FSDPLAB_ON_EACH_DEVICE(ElementwiseTest);
FSDPLAB_ON_EACH_DEVICE(ElementwiseReduceTest);

}  // namespace
}  // namespace fsdplab
