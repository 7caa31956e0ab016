// The loss kernels' own source (engine/cuda/loss_kernels.cu), run on the CPU by cuda_threads_on_cpu.hpp: the
// cross-entropy over a padded vocabulary ([Note: the padded vocabulary] in engine/nn/gpt2_model.hpp), whose rows
// are `stride` apart with V classes each, against a plain reference in double. The padding columns of the logits
// hold NaN: a kernel that read one would carry it into the loss or the gradient. The backward writes its gradient
// over a sentinel, and once more over the logits themselves (in place). The embedding's lookup, bit for bit, with NaN
// rows for ids outside the table; its backward, into the whole table and into slices of it, bit for bit against each
// id's rows summed in f32 in position order. The MSE loss and the sum to a scalar, which fold in another order than
// the host's loop: bit for bit where every order sums exactly (values on a grid), within their rounding of a double
// reference otherwise, the same bits run after run, through one block and through blocks' partials; the MSE
// backward, elementwise, bit for bit. The launchers refuse a dtype that is not floating, naming themselves.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include "loss_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "float_tensors_on_cpu.hpp"

namespace fsdplab {

namespace {

constexpr float kSentinel = 7.f;  // what a separate dlogits holds before the backward writes every element of it

struct CrossEntropyCase {
  std::int64_t N, V, stride;
  float dloss;
};

// loss, lse and dlogits = (softmax - onehot) * dloss / N, in double over the first V columns.
struct Reference {
  double loss = 0;
  std::vector<double> lse, dlogits;
};

Reference reference(const CrossEntropyCase& c, const std::vector<float>& logits,
                    const std::vector<std::int32_t>& targets) {
  Reference r{0, std::vector<double>(static_cast<std::size_t>(c.N)), std::vector<double>(logits.size(), 0.)};
  for (std::int64_t n = 0; n < c.N; ++n) {
    const float* row = logits.data() + n * c.stride;
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::int64_t v = 0; v < c.V; ++v) max = std::max(max, static_cast<double>(row[v]));
    for (std::int64_t v = 0; v < c.V; ++v) sum += std::exp(row[v] - max);
    r.lse[n] = max + std::log(sum);
    r.loss += (r.lse[n] - row[targets[n]]) / static_cast<double>(c.N);
    for (std::int64_t v = 0; v < c.V; ++v)
      r.dlogits[n * c.stride + v] = (std::exp(row[v] - r.lse[n]) - (v == targets[n] ? 1 : 0)) * c.dloss / c.N;
  }
  return r;
}

TEST(LossKernelsOnCpu, CrossEntropyOverAPaddedVocabularyReadsTheClassesOnlyAndZeroesThePadding) {
  // A vocabulary longer than a block's 512 threads, padded to a multiple of 128; and one padded by a single
  // column less than a warp.
  for (const CrossEntropyCase& c : {CrossEntropyCase{5, 1001, 1024, 0.7f}, CrossEntropyCase{3, 33, 34, 1.f}}) {
    SCOPED_TRACE("N " + std::to_string(c.N) + ", V " + std::to_string(c.V) + ", stride " + std::to_string(c.stride));
    std::mt19937 rng(static_cast<std::uint32_t>(c.V));
    std::uniform_real_distribution<float> u(-4.f, 4.f);
    std::vector<float> logits(static_cast<std::size_t>(c.N * c.stride), std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t n = 0; n < c.N; ++n)
      for (std::int64_t v = 0; v < c.V; ++v) logits[n * c.stride + v] = u(rng);
    std::vector<std::int32_t> targets(static_cast<std::size_t>(c.N));
    for (std::int64_t n = 0; n < c.N; ++n) targets[n] = static_cast<std::int32_t>(n == 0 ? c.V - 1 : (n * 37) % c.V);
    const Reference want = reference(c, logits, targets);

    float loss = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> lse(static_cast<std::size_t>(c.N), std::numeric_limits<float>::quiet_NaN());
    cuda::cross_entropy(nullptr, DType::f32, &loss, lse.data(), logits.data(), targets.data(), c.N, c.V, c.stride);
    std::vector<float> dlogits(logits.size(), kSentinel), in_place = logits;
    cuda::cross_entropy_backward(nullptr, DType::f32, dlogits.data(), logits.data(), targets.data(), lse.data(), c.N,
                                 c.V, c.stride, c.dloss);
    cuda::cross_entropy_backward(nullptr, DType::f32, in_place.data(), in_place.data(), targets.data(), lse.data(),
                                 c.N, c.V, c.stride, c.dloss);

    EXPECT_NEAR(loss, want.loss, 1e-5 * want.loss);
    for (std::int64_t n = 0; n < c.N; ++n)
      EXPECT_NEAR(lse[n], want.lse[n], 1e-5 * std::abs(want.lse[n])) << "row " << n;
    for (std::int64_t n = 0; n < c.N; ++n)
      for (std::int64_t v = 0; v < c.stride; ++v) {
        const std::size_t i = static_cast<std::size_t>(n * c.stride + v);
        if (v < c.V) {
          ASSERT_NEAR(dlogits[i], want.dlogits[i], 1e-6) << "row " << n << ", class " << v;
        } else {
          ASSERT_EQ(dlogits[i], 0.f) << "row " << n << ", padding column " << v << " not zeroed";
        }
        ASSERT_EQ(std::bit_cast<std::uint32_t>(in_place[i]), std::bit_cast<std::uint32_t>(dlogits[i]))
            << "row " << n << ", column " << v << ": in place differs from a separate dlogits";
      }
  }
}

// Each id's rows of dout summed in f32 in position order (the host body's order), as f32 sums per table element.
template <class T>
std::vector<float> sums_by_id(const std::vector<T>& dout, const std::vector<std::int32_t>& ids, std::int64_t V,
                              std::int64_t C) {
  std::vector<float> sums(static_cast<std::size_t>(V * C), 0.f);
  for (std::size_t n = 0; n < ids.size(); ++n)
    for (std::int64_t c = 0; c < C; ++c) sums[ids[n] * C + c] += emulated::value(dout[n * C + c]);
  return sums;
}

template <class T>
void expect_embedding_backward(std::int64_t N, std::int64_t V, std::int64_t C) {
  SCOPED_TRACE("N " + std::to_string(N) + ", V " + std::to_string(V) + ", C " + std::to_string(C));
  // Ids repeated at random distances, one (V - 1) never used; a repeat farther back than a block's tile.
  std::mt19937 rng(static_cast<std::uint32_t>(N + C));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(N));
  for (std::int32_t& id : ids) id = static_cast<std::int32_t>(rng() % (V - 1));
  ids.back() = ids.front();
  const auto dout = emulated::random_values<T>(static_cast<std::size_t>(N * C), -2.f, 2.f, 3);
  const std::vector<float> sums = sums_by_id(dout, ids, V, C);

  const auto table0 = emulated::random_values<T>(static_cast<std::size_t>(V * C), -1.f, 1.f, 4);
  std::vector<T> table = table0, want_table(table0.size());
  for (std::size_t i = 0; i < table0.size(); ++i)
    want_table[i] = emulated::from_value<T>(emulated::value(table0[i]) + sums[i]);
  cuda::embedding_backward(nullptr, emulated::dtype_of<T>(), table.data(), dout.data(), ids.data(), N, C, V);
  EXPECT_TRUE(emulated::same_bits(table, want_table));

  // Slices beginning and ending mid-row, as an FSDP shard cuts the table, and the whole of it.
  for (const auto& [first, count] : {std::pair{C + 3, 2 * C + 5}, std::pair<std::int64_t, std::int64_t>{0, V * C},
                                     std::pair{(V - 2) * C - 1, C + 1}}) {
    SCOPED_TRACE("slice [" + std::to_string(first) + ", " + std::to_string(first + count) + ")");
    const auto slice0 = emulated::random_values<float>(static_cast<std::size_t>(count), -1.f, 1.f, 5);
    std::vector<float> slice = slice0, want(slice0);
    for (std::int64_t i = 0; i < count; ++i) want[i] += 0.3f * sums[first + i];
    cuda::embedding_backward_slice(nullptr, emulated::dtype_of<T>(), slice.data(), first, count, 0.3f, dout.data(),
                                   ids.data(), N, C, V);
    EXPECT_TRUE(emulated::same_bits(slice, want));
  }
}

TEST(LossKernelsOnCpu, EmbeddingBackwardSumsEachIdOnceIntoTheTableOrASliceOfIt) {
  // More positions than a block scans at once (256), a row narrower than a block's columns, and one wider, in
  // two chunks of columns; both dtypes of dout.
  expect_embedding_backward<float>(300, 20, 70);
  expect_embedding_backward<__nv_bfloat16>(300, 20, 70);
  expect_embedding_backward<float>(40, 9, 1100);
}

template <class T>
class LossKernelsOnCpu : public ::testing::Test {};
TYPED_TEST_SUITE(LossKernelsOnCpu, emulated::FloatTypes, emulated::FloatTypeNames);

struct EmbeddingShape {
  std::int64_t N, V, C;
};

std::string describe(const EmbeddingShape& s) {
  return "N " + std::to_string(s.N) + ", V " + std::to_string(s.V) + ", C " + std::to_string(s.C);
}

TYPED_TEST(LossKernelsOnCpu, EmbeddingGathersEachIdsRowBitForBit) {
  using T = TypeParam;
  // One position of a one-column table; C = 33 (a block of 64 threads, one lane of the second warp at work); GPT-2's
  // C = 768, three columns for each of the block's 256 threads; C = 1000, no multiple of them.
  for (const EmbeddingShape s :
       {EmbeddingShape{1, 1, 1}, EmbeddingShape{7, 5, 33}, EmbeddingShape{9, 50, 768}, EmbeddingShape{3, 4, 1000}}) {
    SCOPED_TRACE(describe(s));
    // The table's first row and its last among the ids, repeated where there are more positions than rows.
    std::vector<std::int32_t> ids(static_cast<std::size_t>(s.N));
    for (std::int64_t n = 0; n < s.N; ++n) ids[n] = static_cast<std::int32_t>((n * 3 + s.V - 1) % s.V);
    ids.front() = static_cast<std::int32_t>(s.V - 1);
    ids.back() = 0;
    const auto table = emulated::random_values<T>(static_cast<std::size_t>(s.V * s.C), -1.f, 1.f, 40);
    std::vector<T> want(static_cast<std::size_t>(s.N * s.C));
    for (std::int64_t n = 0; n < s.N; ++n)
      for (std::int64_t c = 0; c < s.C; ++c) want[n * s.C + c] = table[ids[n] * s.C + c];
    auto out = emulated::unwritten<T>(s.N * s.C);
    cuda::embedding(nullptr, emulated::dtype_of<T>(), out.data(), table.data(), ids.data(), s.N, s.C, s.V);
    EXPECT_TRUE(emulated::same_bits(out, want));
  }
}

// The host body refuses an id outside [0, V); the kernel cannot see device memory's ids before it runs, so it writes
// NaN over that row (loss_kernels.hpp) and still gathers the others.
TYPED_TEST(LossKernelsOnCpu, EmbeddingWritesNaNOverTheRowOfAnIdOutsideTheTable) {
  using T = TypeParam;
  const std::int64_t N = 5, V = 6, C = 33;
  const std::vector<std::int32_t> ids = {-1, 2, 6, 5, std::numeric_limits<std::int32_t>::min()};
  const auto table = emulated::random_values<T>(static_cast<std::size_t>(V * C), -1.f, 1.f, 41);
  // Not NaN before: a kernel that skipped the bad rows would leave this.
  std::vector<T> out(static_cast<std::size_t>(N * C), emulated::from_value<T>(kSentinel));
  cuda::embedding(nullptr, emulated::dtype_of<T>(), out.data(), table.data(), ids.data(), N, C, V);
  for (std::int64_t n = 0; n < N; ++n) {
    const bool valid = ids[n] >= 0 && ids[n] < V;
    for (std::int64_t c = 0; c < C; ++c) {
      const T got = out[n * C + c];
      if (valid) {
        ASSERT_TRUE(emulated::same_bits(std::vector<T>{got}, std::vector<T>{table[ids[n] * C + c]}))
            << "row " << n << " (id " << ids[n] << "), column " << c;
      } else {
        ASSERT_TRUE(std::isnan(emulated::value(got))) << "row " << n << " (id " << ids[n] << "), column " << c;
      }
    }
  }
}

// f32's unit roundoff: a correctly rounded f32 operation's relative error is at most this.
constexpr double kU = 0x1p-24;

// The sizes the reductions to a scalar take: one element; a few per thread of the one block's 512; the most one
// block folds (2^18, 512 a thread); past it, partials of 37 blocks summed by a second one-block pass.
constexpr std::int64_t kReductionSizes[] = {1, 33, 4099, 1 << 18, 300000};

// n values in [-1, 1] on a grid of `step` = 2^-k, rounded to T, which keeps them on it: a grid value below 2^(8-k)
// needs at most the 8 significant bits bf16 keeps, and above it bf16's own steps are multiples of the grid's.
template <class T>
std::vector<T> grid_values(std::int64_t n, double step, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1., 1.);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (T& e : v) e = emulated::from_value<T>(static_cast<float>(std::round(u(rng) / step) * step));
  return v;
}

// A float's bits, so that a scalar compares as same_bits compares a tensor (NaN equal to NaN, -0 unequal to 0).
::testing::AssertionResult same_float_bits(float got, float want) {
  return emulated::same_bits(std::vector<float>{got}, std::vector<float>{want});
}

// pred and target on a grid of 1/2 in [-1, 1]: every squared error is a multiple of 1/4 up to 4, so every partial
// sum of up to 2^20 of them is a multiple of 1/4 below 2^22, exact in f32, in any order. The kernel's loss is then
// the host's: one exact sum, divided by n in f32 once.
TYPED_TEST(LossKernelsOnCpu, MseLossOfExactlySummableErrorsIsTheirExactSumOverNBitForBit) {
  using T = TypeParam;
  for (const std::int64_t n : kReductionSizes) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto pred = grid_values<T>(n, 0.5, 42), target = grid_values<T>(n, 0.5, 43);
    double exact = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double d = emulated::value(pred[i]) - emulated::value(target[i]);
      exact += d * d;
    }
    float loss = std::numeric_limits<float>::quiet_NaN();
    cuda::mse_loss(nullptr, emulated::dtype_of<T>(), &loss, pred.data(), target.data(), n);
    EXPECT_TRUE(same_float_bits(loss, static_cast<float>(exact) / static_cast<float>(n)));
  }
}

TYPED_TEST(LossKernelsOnCpu, MseLossIsTheMeanSquaredErrorWithinItsF32SumsRoundingTheSameBitsEveryRun) {
  using T = TypeParam;
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{33}, std::int64_t{4099}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto pred = emulated::random_values<T>(static_cast<std::size_t>(n), -2.f, 2.f, 44);
    const auto target = emulated::random_values<T>(static_cast<std::size_t>(n), -2.f, 2.f, 45);
    double want = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double d = emulated::value(pred[i]) - emulated::value(target[i]);
      want += d * d / static_cast<double>(n);
    }
    float loss = std::numeric_limits<float>::quiet_NaN(), again = loss;
    cuda::mse_loss(nullptr, emulated::dtype_of<T>(), &loss, pred.data(), target.data(), n);
    // Every term is >= 0, so the error is relative to the mean itself. A term errs by 3 u (the difference's rounding,
    // doubled by the square, and the square's own); each of the one block's 512 threads folds at most 9 terms, then
    // two shuffle trees of 5 and 4 levels fold the threads'; the mean divides once: by Higham's bound, below
    // (3 + 9 + 9 + 1) u < 24 u.
    EXPECT_NEAR(loss, want, 24 * kU * want);
    cuda::mse_loss(nullptr, emulated::dtype_of<T>(), &again, pred.data(), target.data(), n);
    EXPECT_TRUE(same_float_bits(again, loss));
  }
  // No elements: 0 / 0, NaN, as on the host.
  float empty = 7.f;
  cuda::mse_loss(nullptr, emulated::dtype_of<T>(), &empty, nullptr, nullptr, 0);
  EXPECT_TRUE(std::isnan(empty));
}

TYPED_TEST(LossKernelsOnCpu, MseLossBackwardAddsTwoDlossOverNTimesTheErrorBitForBit) {
  using T = TypeParam;
  // More elements than a block's 256 threads take.
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{33}, std::int64_t{4099}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto pred = emulated::random_values<T>(static_cast<std::size_t>(n), -2.f, 2.f, 46);
    const auto target = emulated::random_values<T>(static_cast<std::size_t>(n), -2.f, 2.f, 47);
    const auto dpred0 = emulated::random_values<T>(static_cast<std::size_t>(n), -1.f, 1.f, 48);
    const float dloss = 0.7f;
    // The host body's operations: the scale once, in f32, then each element's.
    const float scale = 2.f * dloss / static_cast<float>(n);
    std::vector<T> want(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      want[i] = emulated::from_value<T>(emulated::value(dpred0[i]) +
                                        scale * (emulated::value(pred[i]) - emulated::value(target[i])));
    std::vector<T> dpred = dpred0;
    cuda::mse_loss_backward(nullptr, emulated::dtype_of<T>(), dpred.data(), pred.data(), target.data(), n, dloss);
    EXPECT_TRUE(emulated::same_bits(dpred, want));
  }
}

// sum's values on a grid of 2^-20 in [-1, 1]: every partial sum of up to 2^19 of them is a multiple of 2^-20 below
// 2^19. sum_of_squares' on a grid of 2^-8: their squares are multiples of 2^-16 up to 1, and so is every partial sum.
// Both exact in double, so the kernel's double sum is the host's whatever its order, rounded once to f32.
TYPED_TEST(LossKernelsOnCpu, SumsWhoseDoubleSumIsExactAreThatSumRoundedOnceBitForBit) {
  using T = TypeParam;
  using Launcher = void (*)(CUstream_st*, DType, float*, const void*, std::int64_t);
  struct Reduction {
    const char* name;
    Launcher launch;
    double grid;
    bool squares;
  };
  for (const Reduction& r :
       {Reduction{"sum", cuda::sum, 0x1p-20, false}, Reduction{"sum_of_squares", cuda::sum_of_squares, 0x1p-8, true}}) {
    for (const std::int64_t n : kReductionSizes) {
      SCOPED_TRACE(std::string(r.name) + ", n " + std::to_string(n));
      const auto x = grid_values<T>(n, r.grid, 49);
      double exact = 0;
      for (const T& e : x) {
        const double v = emulated::value(e);
        exact += r.squares ? v * v : v;
      }
      float out = std::numeric_limits<float>::quiet_NaN();
      r.launch(nullptr, emulated::dtype_of<T>(), &out, x.data(), n);
      EXPECT_TRUE(same_float_bits(out, static_cast<float>(exact)));
      if constexpr (std::is_same_v<T, float>) {
        // out may be one of x's elements: every element is read before the one write.
        std::vector<float> in_x = x;
        r.launch(nullptr, DType::f32, &in_x[static_cast<std::size_t>(n / 2)], in_x.data(), n);
        EXPECT_TRUE(same_float_bits(in_x[static_cast<std::size_t>(n / 2)], static_cast<float>(exact)));
      }
    }
    // No elements: 0.
    float empty = std::numeric_limits<float>::quiet_NaN();
    r.launch(nullptr, emulated::dtype_of<T>(), &empty, nullptr, 0);
    EXPECT_TRUE(same_float_bits(empty, 0.f));
  }
}

TYPED_TEST(LossKernelsOnCpu, SumOfAnyValuesIsTheirSumRoundedOnceToF32TheSameBitsEveryRun) {
  using T = TypeParam;
  for (const std::int64_t n : kReductionSizes) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto x = emulated::random_values<T>(static_cast<std::size_t>(n), -1.f, 1.f, 50);
    double want = 0, magnitude = 0;
    for (const T& e : x) {
      want += emulated::value(e);
      magnitude += std::abs(emulated::value(e));
    }
    float out = std::numeric_limits<float>::quiet_NaN(), again = out;
    cuda::sum(nullptr, emulated::dtype_of<T>(), &out, x.data(), n);
    // The one rounding to f32 (half an ulp, u of the sum); the kernel's double sums and the reference's each err by
    // at most n 2^-53 of the sum of magnitudes, ~2^-35 of it here: far below that ulp, but counted.
    EXPECT_NEAR(out, want, kU * std::abs(want) + 2 * static_cast<double>(n) * 0x1p-53 * magnitude);
    cuda::sum(nullptr, emulated::dtype_of<T>(), &again, x.data(), n);
    EXPECT_TRUE(same_float_bits(again, out));
  }
}

// i32 (ids, targets) is no dtype these kernels compute in: each launcher refuses it by name before it launches.
TEST(LossKernelsOnCpu, TheLaunchersRefuseADtypeThatIsNotFloatingNamingThemselves) {
  std::vector<float> a(8, 1.f), b(8, 1.f), table(8, 1.f);
  std::vector<std::int32_t> ids(2, 0);
  float scalar = 1.f;
  const DType i32 = DType::i32;
  EXPECT_EQ(emulated::refusal_of([&] { cuda::embedding(nullptr, i32, a.data(), table.data(), ids.data(), 2, 4, 2); }),
            "embedding: i32 is not a floating dtype");
  EXPECT_EQ(emulated::refusal_of([&] { cuda::mse_loss(nullptr, i32, &scalar, a.data(), b.data(), 8); }),
            "mse_loss: i32 is not a floating dtype");
  EXPECT_EQ(emulated::refusal_of([&] { cuda::mse_loss_backward(nullptr, i32, a.data(), a.data(), b.data(), 8, 1.f); }),
            "mse_loss_backward: i32 is not a floating dtype");
  EXPECT_EQ(emulated::refusal_of([&] { cuda::sum(nullptr, i32, &scalar, a.data(), 8); }),
            "sum: i32 is not a floating dtype");
  EXPECT_EQ(emulated::refusal_of([&] { cuda::sum_of_squares(nullptr, i32, &scalar, a.data(), 8); }),
            "sum_of_squares: i32 is not a floating dtype");
  // Nothing ran: the outputs are as they were.
  EXPECT_EQ(a, std::vector<float>(8, 1.f));
  EXPECT_EQ(scalar, 1.f);
}

}  // namespace
}  // namespace fsdplab
