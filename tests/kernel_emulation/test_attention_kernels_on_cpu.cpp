// The exact attention kernels' own source (engine/cuda/attention_kernels.cu), run on the CPU by
// cuda_threads_on_cpu.hpp, against the plain double-precision reference (tests/reference/causal_attention.hpp):
// every CI run, with no GPU, executes the kernels' tiles, partial tiles, diagonal masks, softmax and both
// backward kernels with the row sums the second reads from the first's scratch (whose 0xff bytes read as NaN
// where a row was never written). The f32 path is the one the numerics tests compare against; a GPU run
// (tests/unit's cuda instances) is still the test that counts.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attention_kernels_on_cpu.inc"
#include "causal_attention.hpp"
#include "engine/runtime/error.hpp"
#include "float_tensors_on_cpu.hpp"

namespace fsdplab {
namespace {

using namespace emulated;

template <class T>
class AttentionKernelsOnCpu : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionKernelsOnCpu, emulated::FloatTypes, emulated::FloatTypeNames);

using Sizes = reference::AttentionSizes;

std::string describe(const Sizes& n) {
  return "B " + std::to_string(n.B) + ", T " + std::to_string(n.T) + ", hd " + std::to_string(n.hd()) + ", " +
         std::to_string(n.NH) + " heads";
}

template <class T>
struct Inputs {
  std::vector<T> qkv, dout;
};

template <class T>
Inputs<T> inputs(const Sizes& n, std::uint32_t seed) {
  return {random_values<T>(static_cast<std::size_t>(n.qkv()), -2.f, 2.f, seed),
          random_values<T>(static_cast<std::size_t>(n.out()), -1.f, 1.f, seed + 1)};
}

template <class T>
struct Outputs {
  std::vector<T> out, dqkv;
  std::vector<float> att;
};

// The emulated kernels: the forward, then the backward, each into NaN (an element it leaves unwritten shows).
template <class T>
Outputs<T> on_emulated_gpu(const Sizes& n, const Inputs<T>& in) {
  Outputs<T> r{unwritten<T>(n.out()), unwritten<T>(n.qkv()), unwritten<float>(n.att())};
  cuda::attention_forward(nullptr, dtype_of<T>(), r.out.data(), r.att.data(), in.qkv.data(), n.B, n.T, n.C, n.NH);
  cuda::attention_backward(nullptr, dtype_of<T>(), r.dqkv.data(), in.dout.data(), in.qkv.data(), r.att.data(), n.B, n.T,
                           n.C, n.NH);
  return r;
}

struct Reference {
  std::vector<double> out, att, dqkv;
};

// The forward in double; the backward in double from `att`, the kernels' own probabilities, so that it checks the
// backward kernels alone.
template <class F>
Reference reference_for(const Sizes& n, const Inputs<F>& in, const std::vector<float>& att) {
  const std::vector<double> qkv = values(in.qkv);
  reference::AttentionForward forward = reference::causal_attention_forward(n, qkv);
  return {std::move(forward.out), std::move(forward.att),
          reference::causal_attention_backward(n, qkv, values(att), values(in.dout))};
}

// Each element within `relative` of the larger magnitude plus 2^-16 of the largest reference element: the
// kernels sum in f32 (the backward's row sums and softmax in trees), and a difference of that size in
// datt - adot moves a gradient that cancels to near zero by more than its own ulp. A wrong index or mask
// misses by the size of the elements themselves.
template <class T>
::testing::AssertionResult close_to(const std::vector<T>& got, const std::vector<double>& want, const char* what) {
  const double relative = std::is_same_v<T, float> ? 0x1p-18 : 0x1p-8;  // bf16: one rounding of the store
  double largest = 0;
  for (const double w : want) largest = std::max(largest, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double a = value(got[i]), b = want[i];
    if (!(std::abs(a - b) <= relative * std::max(std::abs(a), std::abs(b)) + 0x1p-16 * largest))
      return ::testing::AssertionFailure() << what << "[" << i << "] is " << a << ", the reference " << b;
  }
  return ::testing::AssertionSuccess();
}

TYPED_TEST(AttentionKernelsOnCpu, AgreeWithTheFormulasTileForTile) {
  using T = TypeParam;
  // hd 4 and one partial tile; hd 3, rows padded to a float4; hd 12 over three forward tiles and two backward
  // ones, the last of each partial; hd 16 over three backward tiles; GPT-2's hd 64 with two heads and two
  // batches; hd 100, a second column group that is partly there; the largest head, 128.
  const Sizes cases[] = {{1, 5, 8, 2},    {1, 20, 6, 2},   {1, 67, 12, 1}, {1, 150, 16, 1},
                         {2, 70, 128, 2}, {1, 70, 200, 2}, {1, 40, 256, 2}};
  for (const Sizes& n : cases) {
    SCOPED_TRACE(describe(n));
    const Inputs<T> in = inputs<T>(n, static_cast<std::uint32_t>(n.T));
    const Outputs<T> gpu = on_emulated_gpu(n, in);
    const Reference want = reference_for(n, in, gpu.att);
    EXPECT_TRUE(close_to(gpu.att, want.att, "att"));  // zeros above the diagonal included
    EXPECT_TRUE(close_to(gpu.out, want.out, "out"));
    EXPECT_TRUE(close_to(gpu.dqkv, want.dqkv, "dqkv"));
  }
}

TYPED_TEST(AttentionKernelsOnCpu, RerunsAreBitExact) {
  using T = TypeParam;
  const Sizes n{1, 100, 64, 1};
  const Inputs<T> in = inputs<T>(n, 7);
  const Outputs<T> first = on_emulated_gpu(n, in), second = on_emulated_gpu(n, in);
  EXPECT_TRUE(same_bits(first.out, second.out));
  EXPECT_TRUE(same_bits(first.att, second.att));
  EXPECT_TRUE(same_bits(first.dqkv, second.dqkv));
}

// The last key's k and v made NaN: no earlier query sees that key, so its output row, its probabilities and
// its dq come out bit for bit as before (the diagonal tiles skip masked pairs rather than multiply them by 0).
TYPED_TEST(AttentionKernelsOnCpu, AFutureKeyNeverReachesAnEarlierQuery) {
  using T = TypeParam;
  const Sizes n{1, 45, 16, 2};
  const Inputs<T> clean = inputs<T>(n, 11);
  Inputs<T> poisoned = clean;
  const std::int64_t last = n.T - 1;
  for (std::int64_t i = n.C; i < 3 * n.C; ++i)
    poisoned.qkv[static_cast<std::size_t>(last * 3 * n.C + i)] = from_value<T>(std::numeric_limits<float>::quiet_NaN());
  const Outputs<T> a = on_emulated_gpu(n, clean), b = on_emulated_gpu(n, poisoned);
  for (std::int64_t t = 0; t < last; ++t) {
    SCOPED_TRACE("query " + std::to_string(t));
    const auto rows = [&](const std::vector<T>& v, std::int64_t width) {
      return std::vector<T>(v.begin() + t * width, v.begin() + (t + 1) * width);
    };
    EXPECT_TRUE(same_bits(rows(b.out, n.C), rows(a.out, n.C)));
    const std::vector<T> dq_b = rows(b.dqkv, 3 * n.C), dq_a = rows(a.dqkv, 3 * n.C);
    EXPECT_TRUE(
        same_bits(std::vector<T>(dq_b.begin(), dq_b.begin() + n.C), std::vector<T>(dq_a.begin(), dq_a.begin() + n.C)));
    for (std::int64_t h = 0; h < n.NH; ++h) {
      const auto row = [&](const std::vector<float>& att) {
        const auto* p = att.data() + (h * n.T + t) * n.T;
        return std::vector<float>(p, p + n.T);
      };
      EXPECT_TRUE(same_bits(row(b.att), row(a.att)));
    }
  }
}

// The first query's q and dout made NaN: every other row of out and of dqkv (dq, dk and dv: the key-tile kernel
// skips the queries before its keys on the diagonal, rather than multiply their zero weights) comes out bit for
// bit as before.
TYPED_TEST(AttentionKernelsOnCpu, AnEarlierQueryNeverReachesALaterKey) {
  using T = TypeParam;
  const Sizes n{1, 45, 16, 2};
  const Inputs<T> clean = inputs<T>(n, 13);
  Inputs<T> poisoned = clean;
  const T nan = from_value<T>(std::numeric_limits<float>::quiet_NaN());
  std::fill(poisoned.qkv.begin(), poisoned.qkv.begin() + n.C, nan);  // q of query 0
  std::fill(poisoned.dout.begin(), poisoned.dout.begin() + n.C, nan);
  const Outputs<T> a = on_emulated_gpu(n, clean), b = on_emulated_gpu(n, poisoned);
  const auto after_row_0 = [](const std::vector<T>& v, std::int64_t width) {
    return std::vector<T>(v.begin() + width, v.end());
  };
  EXPECT_TRUE(same_bits(after_row_0(b.out, n.C), after_row_0(a.out, n.C)));
  EXPECT_TRUE(same_bits(after_row_0(b.dqkv, 3 * n.C), after_row_0(a.dqkv, 3 * n.C)));
}

// A workstation GPU (sm_86, sm_89: RTX 3090, RTX 4090, L40) lets a block opt in to 99 KiB of shared memory, an
// H100 to 227: GPT-2's heads (hd 64) train there in both dtypes, with the same bits as on the H100's limits
// ([Note: dscore where dout^T was]). A head of 128 columns needs more than 99 KiB, and is refused saying so.
TYPED_TEST(AttentionKernelsOnCpu, GptTwosHeadsFitAWorkstationGpu) {
  using T = TypeParam;
  const Sizes n{1, 100, 128, 2};  // hd 64
  const Inputs<T> in = inputs<T>(n, 17);
  const Outputs<T> on_h100 = on_emulated_gpu(n, in);
  emulated_current_device = 1;
  std::optional<Outputs<T>> on_workstation;
  std::string refused;
  try {
    on_workstation = on_emulated_gpu(n, in);
    on_emulated_gpu(Sizes{1, 10, 256, 2}, inputs<T>(Sizes{1, 10, 256, 2}, 19));  // hd 128
  } catch (const Error& e) {
    refused = e.what();
  }
  emulated_current_device = 0;
  ASSERT_TRUE(on_workstation.has_value()) << "hd 64 was refused: " << refused;
  EXPECT_TRUE(same_bits(on_workstation->out, on_h100.out));
  EXPECT_TRUE(same_bits(on_workstation->dqkv, on_h100.dqkv));
  EXPECT_NE(refused.find("a head of 128 columns needs"), std::string::npos) << refused;
  EXPECT_NE(refused.find("this GPU has 101376"), std::string::npos) << refused;
}

TEST(AttentionKernelsOnCpu, TheLaunchersRefuseAHeadTheRegisterTilesCannotHold) {
  const Sizes n{1, 2, 258, 2};  // hd 129
  std::vector<float> qkv(static_cast<std::size_t>(n.qkv())), out(static_cast<std::size_t>(n.out())),
      att(static_cast<std::size_t>(n.att()));
  const auto refused = [](const auto& launch, const char* op) -> ::testing::AssertionResult {
    try {
      launch();
    } catch (const Error& e) {
      const std::string want =
          std::string(op) + ": the head size C / n_head must be 1 to 128 on the GPU; got 258 / 2 = 129";
      if (std::string(e.what()).find(want) != std::string::npos) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << "the error says: " << e.what();
    }
    return ::testing::AssertionFailure() << op << " launched a head of 129 columns";
  };
  EXPECT_TRUE(refused(
      [&] { cuda::attention_forward(nullptr, DType::f32, out.data(), att.data(), qkv.data(), n.B, n.T, n.C, n.NH); },
      "attention"));
  EXPECT_TRUE(refused(
      [&] {
        cuda::attention_backward(nullptr, DType::f32, qkv.data(), out.data(), qkv.data(), att.data(), n.B, n.T, n.C,
                                 n.NH);
      },
      "attention_backward"));
}

}  // namespace
}  // namespace fsdplab
