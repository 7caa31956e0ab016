// The flash attention kernels' own source (engine/cuda/flash_attention_kernels.cu), run on the CPU by
// cuda_threads_on_cpu.hpp, against the host body the sim device runs (flash_attention_host.hpp), in bf16 and in
// f32: every CI run, with no GPU, executes the kernels' index arithmetic, masks, partial tiles, zero-padded head
// dimensions, both load paths and their barriers (ThreadSanitizer watches those under the tsan preset). The
// emulated tensor cores and the f32 register products sum in order, as the host does, so the two agree to about
// a rounding; on a GPU the tensor cores' own order makes the bf16 difference larger, which the op tests' cuda
// instances bound (tests/unit).
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (op scratch: op_scratch_on_cpu.cpp).
#include "flash_attention_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/tensor/flash_attention_host.hpp"
#include "flash_attention_blocks_an_sm.hpp"

namespace fsdplab {

namespace {

using Bits = std::uint16_t;

struct Sizes {
  std::int64_t B, T, C, NH;
};

// A run's tensors in storage S: bf16's bits or f32.
template <class S>
struct Outputs {
  std::vector<S> out, dqkv;
  std::vector<float> lse;
};

template <class S>
struct Inputs {
  std::vector<S> qkv, dout;
};

float widen(Bits b) { return __bfloat162float(__nv_bfloat16{b}); }
float widen(float f) { return f; }

template <class S>
std::vector<S> random_values(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<S> v(n);
  for (S& x : v) {
    if constexpr (std::is_same_v<S, float>)
      x = u(rng);
    else
      x = __float2bfloat16_rn(u(rng)).bits;
  }
  return v;
}

template <class S>
Inputs<S> inputs(const Sizes& n) {
  const auto btc = static_cast<std::size_t>(n.B * n.T * n.C);
  return {random_values<S>(3 * btc, static_cast<std::uint32_t>(n.T), 2.f),
          random_values<S>(btc, static_cast<std::uint32_t>(n.T) + 1, 1.f)};
}

// NaNs: a kernel or host body that leaves an element unwritten fails the comparison.
template <class S>
std::vector<S> unwritten(std::int64_t n) {
  if constexpr (std::is_same_v<S, float>)
    return std::vector<S>(static_cast<std::size_t>(n), NAN);
  else
    return std::vector<S>(static_cast<std::size_t>(n), 0x7fc0);
}

template <class S>
constexpr DType kDType = std::is_same_v<S, float> ? DType::f32 : DType::bf16;

// The emulated kernels: forward, then backward, every output starting as NaN.
template <class S>
Outputs<S> on_emulated_gpu(const Sizes& n, const Inputs<S>& in) {
  Outputs<S> r{unwritten<S>(n.B * n.T * n.C), unwritten<S>(3 * n.B * n.T * n.C),
               std::vector<float>(static_cast<std::size_t>(n.B * n.NH * n.T), NAN)};
  cuda::flash_attention_forward(nullptr, kDType<S>, r.out.data(), r.lse.data(), in.qkv.data(), n.B, n.T, n.C, n.NH);
  cuda::flash_attention_backward(nullptr, kDType<S>, r.dqkv.data(), in.dout.data(), in.qkv.data(), r.out.data(),
                                 r.lse.data(), n.B, n.T, n.C, n.NH);
  return r;
}

template <class S>
Outputs<S> on_host(const Sizes& n, const Inputs<S>& in) {
  Outputs<S> r{unwritten<S>(n.B * n.T * n.C), unwritten<S>(3 * n.B * n.T * n.C),
               std::vector<float>(static_cast<std::size_t>(n.B * n.NH * n.T), NAN)};
  flash_attention_forward_host(r.out.data(), r.lse.data(), in.qkv.data(), n.B, n.T, n.C, n.NH);
  flash_attention_backward_host(r.dqkv.data(), in.dout.data(), in.qkv.data(), r.out.data(), r.lse.data(), n.B, n.T,
                                n.C, n.NH);
  return r;
}

// Each element within `ulps` roundings of the host's (2^-ulp_bits of the larger magnitude), plus 2^-floor_bits of
// the largest element: the kernels sum D = dout . out in a tree where the host sums in order, and an f32
// difference there can tip a rounded ds the other way (bf16), or reach a gradient that cancels to near zero
// (both), moving it by more than its own ulp. A wrong index or mask misses by the size of the elements themselves.
template <class S>
::testing::AssertionResult within_roundings(const std::vector<S>& got, const std::vector<S>& want, int ulp_bits,
                                            int floor_bits) {
  float largest = 0.f;
  for (const S x : want) largest = std::max(largest, std::abs(widen(x)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float a = widen(got[i]), b = widen(want[i]);
    if (!(std::abs(a - b) <= std::ldexp(std::max(std::abs(a), std::abs(b)), -ulp_bits) +
                                 std::ldexp(largest, -floor_bits)))
      return ::testing::AssertionFailure() << "[" << i << "] " << a << " against the host's " << b;
  }
  return ::testing::AssertionSuccess();
}

// bf16: one bf16 rounding (2^-7, bf16's widest ulp) plus 2^-12 of the largest. f32: the kernels fuse multiply-adds
// the host rounds, and sum D in a tree, about 2^-20 of the operands' size; 2^-16 of the larger magnitude plus
// 2^-18 of the largest leaves room for that and still catches a wrong element.
template <class S>
::testing::AssertionResult agree(const std::vector<S>& got, const std::vector<S>& want) {
  return std::is_same_v<S, float> ? within_roundings(got, want, 16, 18) : within_roundings(got, want, 7, 12);
}

template <class S>
void expect_kernels_agree_with_the_host() {
  // hd 4 (padded to 16 in bf16, scalar loads there), one partial tile; hd 12, not a multiple of 8 (scalar bf16
  // loads; f32 vector loads), two tiles; hd 6, not a multiple of 4 (scalar f32 loads, padded to 8); hd 16 over
  // three tiles, the last partial (the online softmax rescales twice); GPT-2's hd 64 with three heads and two
  // batches; in bf16 the largest head, 128 (the most shared memory), and hd 80, whose sums take 5 of the 8
  // fragments the kernels for heads up to 128 columns hold.
  std::vector<Sizes> cases = {{2, 5, 8, 2}, {1, 67, 12, 1}, {1, 70, 12, 2}, {1, 150, 32, 2}, {2, 70, 192, 3}};
  if constexpr (!std::is_same_v<S, float>) {
    cases.push_back({1, 80, 256, 2});
    cases.push_back({1, 70, 160, 2});
  }
  for (const Sizes& n : cases) {
    SCOPED_TRACE("B " + std::to_string(n.B) + ", T " + std::to_string(n.T) + ", hd " + std::to_string(n.C / n.NH));
    const Inputs<S> in = inputs<S>(n);
    const Outputs<S> gpu = on_emulated_gpu(n, in), host = on_host(n, in);
    EXPECT_TRUE(agree(gpu.out, host.out));
    for (std::size_t i = 0; i < gpu.lse.size(); ++i)
      ASSERT_NEAR(gpu.lse[i], host.lse[i], 1e-5 * (1 + std::abs(host.lse[i]))) << "lse[" << i << "]";
    EXPECT_TRUE(agree(gpu.dqkv, host.dqkv));
  }
}

TEST(FlashAttentionKernelsOnCpu, AgreeWithTheHostBodyTileForTile) { expect_kernels_agree_with_the_host<Bits>(); }

TEST(FlashAttentionKernelsOnCpu, TheF32KernelsAgreeWithTheHostBodyTileForTile) {
  expect_kernels_agree_with_the_host<float>();
}

template <class S>
void expect_reruns_bit_exact() {
  const Sizes n{1, 130, 64, 1};
  const Inputs<S> in = inputs<S>(n);
  const Outputs<S> first = on_emulated_gpu(n, in), second = on_emulated_gpu(n, in);
  EXPECT_EQ(first.out, second.out);
  EXPECT_EQ(first.lse, second.lse);
  EXPECT_EQ(first.dqkv, second.dqkv);
}

TEST(FlashAttentionKernelsOnCpu, RerunsAreBitExact) {
  expect_reruns_bit_exact<Bits>();
  expect_reruns_bit_exact<float>();
}

TEST(FlashAttentionKernelsOnCpu, TheTilesTakeTheSharedMemoryTheKernelsNotesSay) {
  // The table in flash_attention_kernels.cu, which decides how many blocks an SM holds (228 KiB on sm_90).
  using cuda::bf16;
  const std::uintptr_t at = 0;
  EXPECT_EQ(cuda::ForwardShared<bf16>(at, 64).bytes, 54528u);
  EXPECT_EQ(cuda::ForwardShared<bf16>(at, 128).bytes, 79104u);
  EXPECT_EQ(cuda::ForwardShared<float>(at, 64).bytes, 69888u);
  EXPECT_EQ(cuda::KeyPassShared<bf16>(at, 64).bytes, 72192u);
  EXPECT_EQ(cuda::KeyPassShared<bf16>(at, 128).bytes, 104960u);
  EXPECT_EQ(cuda::KeyPassShared<float>(at, 64).bytes, 105088u);  // and its work item (one pass)
  EXPECT_EQ(cuda::QueryPassShared<bf16>(at, 64).bytes, 72192u);
  EXPECT_EQ(cuda::QueryPassShared<bf16>(at, 128).bytes, 104960u);
}

// The blocks an SM holds by shared memory alone (an H100's, here): the table's last column. On a GPU,
// CudaDeviceTest.TheFlashAttentionKernelsHoldTheBlocksAnSmTheirTableSays counts the registers too.
TEST(FlashAttentionKernelsOnCpu, TheTilesLetInTheBlocksAnSmTheKernelsNotesSay) {
  expect_the_flash_attention_blocks_an_sm_of_the_table();
}

TEST(FlashAttentionKernelsOnCpu, ALauncherRefusesWhatTheKernelsCannotHold) {
  std::vector<Bits> qkv(3 * 258), out(258);
  std::vector<float> lse(2), qkv_f32(3 * 130), out_f32(130);
  try {
    cuda::flash_attention_forward(nullptr, DType::bf16, out.data(), lse.data(), qkv.data(), 1, 1, 258, 2);
    FAIL() << "a bf16 head of 129 columns was launched";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head size C / n_head must be 1 to 128 in bf16; got 258 / 2 = 129"),
              std::string::npos)
        << e.what();
  }
  try {
    cuda::flash_attention_forward(nullptr, DType::f32, out_f32.data(), lse.data(), qkv_f32.data(), 1, 1, 130, 2);
    FAIL() << "an f32 head of 65 columns was launched";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head size C / n_head must be 1 to 64 in f32; got 130 / 2 = 65"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fsdplab
