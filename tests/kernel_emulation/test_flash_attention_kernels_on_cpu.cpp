// The flash attention kernels' own source (engine/cuda/flash_attention_kernels.cu), run on CPU threads by
// cuda_threads_on_cpu.hpp, against the host body the sim device runs (flash_attention_host.hpp): every CI run,
// with no GPU, executes the kernels' index arithmetic, masks, partial tiles, zero-padded head dimensions, both
// load paths and their barriers (ThreadSanitizer watches those under the tsan preset). The emulated tensor
// cores sum in order, as the host does, so the two agree to about a bf16 rounding; on a GPU the tensor cores'
// own order makes the difference larger, which the op tests' cuda instances bound (tests/unit).
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
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/tensor/flash_attention_host.hpp"

namespace fsdplab {

namespace {

using Bits = std::uint16_t;

struct Sizes {
  std::int64_t B, T, C, NH;
};

struct Outputs {
  std::vector<Bits> out, dqkv;
  std::vector<float> lse;
};

std::vector<Bits> random_bf16(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<Bits> v(n);
  for (Bits& b : v) b = __float2bfloat16_rn(u(rng)).bits;
  return v;
}

float widen(Bits b) { return __bfloat162float(__nv_bfloat16{b}); }

struct Inputs {
  std::vector<Bits> qkv, dout;
};

Inputs inputs(const Sizes& n) {
  const auto btc = static_cast<std::size_t>(n.B * n.T * n.C);
  return {random_bf16(3 * btc, static_cast<std::uint32_t>(n.T), 2.f),
          random_bf16(btc, static_cast<std::uint32_t>(n.T) + 1, 1.f)};
}

// bf16 NaNs: a kernel or host body that leaves an element unwritten fails the comparison.
std::vector<Bits> unwritten(std::int64_t n) { return std::vector<Bits>(static_cast<std::size_t>(n), 0x7fc0); }

// The emulated kernels: forward, then backward, every output starting as NaN.
Outputs on_emulated_gpu(const Sizes& n, const Inputs& in) {
  Outputs r{unwritten(n.B * n.T * n.C), unwritten(3 * n.B * n.T * n.C),
            std::vector<float>(static_cast<std::size_t>(n.B * n.NH * n.T), NAN)};
  cuda::flash_attention_forward(nullptr, r.out.data(), r.lse.data(), in.qkv.data(), n.B, n.T, n.C, n.NH);
  cuda::flash_attention_backward(nullptr, r.dqkv.data(), in.dout.data(), in.qkv.data(), r.out.data(), r.lse.data(),
                                 n.B, n.T, n.C, n.NH);
  return r;
}

Outputs on_host(const Sizes& n, const Inputs& in) {
  Outputs r{unwritten(n.B * n.T * n.C), unwritten(3 * n.B * n.T * n.C),
            std::vector<float>(static_cast<std::size_t>(n.B * n.NH * n.T), NAN)};
  flash_attention_forward_host(r.out.data(), r.lse.data(), in.qkv.data(), n.B, n.T, n.C, n.NH);
  flash_attention_backward_host(r.dqkv.data(), in.dout.data(), in.qkv.data(), r.out.data(), r.lse.data(), n.B, n.T,
                                n.C, n.NH);
  return r;
}

// Each element within one bf16 rounding of the host's (2^-7 of the larger magnitude, bf16's widest ulp), plus
// 2^-12 of the largest element: the kernels sum D = dout . out in a tree where the host sums in order, and an
// f32 difference there can tip a rounded ds the other way, which moves a gradient that cancels to near zero by
// more than its own ulp. A wrong index or mask misses by the size of the elements themselves.
::testing::AssertionResult within_a_rounding(const std::vector<Bits>& got, const std::vector<Bits>& want) {
  float largest = 0.f;
  for (const Bits b : want) largest = std::max(largest, std::abs(widen(b)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float a = widen(got[i]), b = widen(want[i]);
    if (!(std::abs(a - b) <= std::ldexp(std::max(std::abs(a), std::abs(b)), -7) + std::ldexp(largest, -12)))
      return ::testing::AssertionFailure() << "[" << i << "] " << a << " against the host's " << b;
  }
  return ::testing::AssertionSuccess();
}

TEST(FlashAttentionKernelsOnCpu, AgreeWithTheHostBodyTileForTile) {
  // hd 4 (padded to 16, scalar loads), one partial tile; hd 12, not a multiple of 8 (scalar loads), two tiles;
  // hd 16 over three tiles, the last partial (the online softmax rescales twice); GPT-2's hd 64 with three
  // heads and two batches; the largest head, 128 (the most shared memory).
  const Sizes cases[] = {{2, 5, 8, 2}, {1, 67, 12, 1}, {1, 150, 32, 2}, {2, 70, 192, 3}, {1, 80, 256, 2}};
  for (const Sizes& n : cases) {
    SCOPED_TRACE("B " + std::to_string(n.B) + ", T " + std::to_string(n.T) + ", hd " + std::to_string(n.C / n.NH));
    const Inputs in = inputs(n);
    const Outputs gpu = on_emulated_gpu(n, in), host = on_host(n, in);
    EXPECT_TRUE(within_a_rounding(gpu.out, host.out));
    for (std::size_t i = 0; i < gpu.lse.size(); ++i)
      ASSERT_NEAR(gpu.lse[i], host.lse[i], 1e-5 * (1 + std::abs(host.lse[i]))) << "lse[" << i << "]";
    EXPECT_TRUE(within_a_rounding(gpu.dqkv, host.dqkv));
  }
}

TEST(FlashAttentionKernelsOnCpu, RerunsAreBitExact) {
  const Sizes n{1, 130, 64, 1};
  const Inputs in = inputs(n);
  const Outputs first = on_emulated_gpu(n, in), second = on_emulated_gpu(n, in);
  EXPECT_EQ(first.out, second.out);
  EXPECT_EQ(first.lse, second.lse);
  EXPECT_EQ(first.dqkv, second.dqkv);
}

TEST(FlashAttentionKernelsOnCpu, ALauncherRefusesWhatTheKernelsCannotHold) {
  std::vector<Bits> qkv(3 * 258), out(258);
  std::vector<float> lse(2);
  try {
    cuda::flash_attention_forward(nullptr, out.data(), lse.data(), qkv.data(), 1, 1, 258, 2);
    FAIL() << "a head of 129 columns was launched";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head size C / n_head must be 1 to 128; got 258 / 2 = 129"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fsdplab
