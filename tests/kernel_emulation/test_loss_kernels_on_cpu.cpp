// The loss kernels' own source (engine/cuda/loss_kernels.cu), run on the CPU by cuda_threads_on_cpu.hpp: the
// cross-entropy over a padded vocabulary ([Note: the padded vocabulary] in engine/nn/gpt2_model.hpp), whose rows
// are `stride` apart with V classes each, against a plain reference in double. The padding columns of the logits
// hold NaN: a kernel that read one would carry it into the loss or the gradient. The backward writes its gradient
// over a sentinel, and once more over the logits themselves (in place). The embedding's backward, into the whole
// table and into slices of it, bit for bit against each id's rows summed in f32 in position order.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "float_tensors_on_cpu.hpp"
#include "loss_kernels_on_cpu.inc"

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

}  // namespace
}  // namespace fsdplab
