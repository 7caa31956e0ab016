// flash_attention and flash_attention_backward against the exact softmax in double precision, in bf16 and in
// f32. The bounds follow from [Note: the flash attention arithmetic] (flash_attention.hpp), element by element:
// every bf16 operand the arithmetic rounds (p before p v, ds before ds k and ds^T q, the stored out that D
// reads) moves its term by at most 2^-9 of it, and each output is rounded once more. The tests allow twice
// that, and a wrong formula, tile edge or mask misses by orders of magnitude more. In f32 nothing is rounded
// to bf16: what is left is f32's own rounding in sums of up to T terms, which 2^-16 of each term's size covers
// at these lengths.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor/flash_attention.hpp"
#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

// The relative error a term may carry: twice bf16's largest rounding, 2^-9; in f32 2^-16.
double rounding(DType dtype) { return dtype == DType::bf16 ? 1.0 / 256 : 1.0 / 65536; }

struct Sizes {
  std::int64_t B, T, C, NH;
  std::int64_t hd() const { return C / NH; }
};

// Inputs that bf16 holds exactly, so the reference and the device start equal.
struct Problem {
  Sizes n;
  std::vector<float> qkv, dout;
};

Problem problem(Sizes n, std::uint32_t seed) {
  return {n, rounded_to_bf16(random_values(static_cast<std::size_t>(n.B * n.T * 3 * n.C), seed, -2.f, 2.f)),
          rounded_to_bf16(random_values(static_cast<std::size_t>(n.B * n.T * n.C), seed + 1))};
}

// The exact values and, per element, how far the flash arithmetic may be from them.
struct Reference {
  std::vector<double> out, out_bound, lse, dqkv, dqkv_bound;
};

Reference reference(const Problem& pb, DType dtype) {
  const double kRounding = rounding(dtype);
  const Sizes& n = pb.n;
  const std::int64_t hd = n.hd();
  auto qkv_at = [&](std::int64_t b, std::int64_t t, int part, std::int64_t h, std::int64_t i) {
    return static_cast<std::size_t>((b * n.T + t) * 3 * n.C + part * n.C + h * hd + i);
  };
  auto out_at = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) {
    return static_cast<std::size_t>((b * n.T + t) * n.C + h * hd + i);
  };
  auto q = [&](std::int64_t b, std::int64_t t, int part, std::int64_t h, std::int64_t i) {
    return static_cast<double>(pb.qkv[qkv_at(b, t, part, h, i)]);
  };
  const double scale = 1 / std::sqrt(static_cast<double>(hd));
  Reference r;
  r.out.assign(pb.dout.size(), 0.0);
  r.out_bound.assign(pb.dout.size(), 0.0);
  r.lse.assign(static_cast<std::size_t>(n.B * n.NH * n.T), 0.0);
  std::vector<double> grad(pb.qkv.size(), 0.0), grad_bound(pb.qkv.size(), 0.0);
  std::vector<double> p(static_cast<std::size_t>(n.T)), ds(static_cast<std::size_t>(n.T));
  for (std::int64_t b = 0; b < n.B; ++b) {
    for (std::int64_t h = 0; h < n.NH; ++h) {
      for (std::int64_t t = 0; t < n.T; ++t) {
        double max = -1e300, sum = 0;
        for (std::int64_t j = 0; j <= t; ++j) {
          double s = 0;
          for (std::int64_t i = 0; i < hd; ++i) s += q(b, t, 0, h, i) * q(b, j, 1, h, i);
          p[j] = s * scale;
          max = std::max(max, p[j]);
        }
        for (std::int64_t j = 0; j <= t; ++j) sum += p[j] = std::exp(p[j] - max);
        r.lse[static_cast<std::size_t>((b * n.NH + h) * n.T + t)] = max + std::log(sum);
        for (std::int64_t j = 0; j <= t; ++j) p[j] /= sum;
        // out = p v: each p rounded before the product, then out rounded once.
        double D = 0, D_bound = 0;
        for (std::int64_t i = 0; i < hd; ++i) {
          double o = 0, magnitude = 0;
          for (std::int64_t j = 0; j <= t; ++j) {
            o += p[j] * q(b, j, 2, h, i);
            magnitude += p[j] * std::abs(q(b, j, 2, h, i));
          }
          r.out[out_at(b, t, h, i)] = o;
          r.out_bound[out_at(b, t, h, i)] = kRounding * (magnitude + std::abs(o)) + 1e-6;
          D += pb.dout[out_at(b, t, h, i)] * o;
          D_bound += std::abs(pb.dout[out_at(b, t, h, i)]) * r.out_bound[out_at(b, t, h, i)];
        }
        // ds = p (dout v^T - D); the D the device computes reads the bf16 out, so it is off by D_bound.
        for (std::int64_t j = 0; j <= t; ++j) {
          double dp = 0;
          for (std::int64_t i = 0; i < hd; ++i) dp += pb.dout[out_at(b, t, h, i)] * q(b, j, 2, h, i);
          ds[j] = p[j] * (dp - D);
          const double ds_bound = kRounding * std::abs(ds[j]) + 2 * p[j] * D_bound;
          for (std::int64_t i = 0; i < hd; ++i) {
            grad[qkv_at(b, t, 0, h, i)] += scale * ds[j] * q(b, j, 1, h, i);
            grad_bound[qkv_at(b, t, 0, h, i)] += scale * ds_bound * std::abs(q(b, j, 1, h, i));
            grad[qkv_at(b, j, 1, h, i)] += scale * ds[j] * q(b, t, 0, h, i);
            grad_bound[qkv_at(b, j, 1, h, i)] += scale * ds_bound * std::abs(q(b, t, 0, h, i));
            grad[qkv_at(b, j, 2, h, i)] += p[j] * pb.dout[out_at(b, t, h, i)];
            grad_bound[qkv_at(b, j, 2, h, i)] += kRounding * p[j] * std::abs(pb.dout[out_at(b, t, h, i)]);
          }
        }
      }
    }
  }
  r.dqkv = grad;
  r.dqkv_bound.resize(grad.size());
  for (std::size_t i = 0; i < grad.size(); ++i) r.dqkv_bound[i] = grad_bound[i] + kRounding * std::abs(grad[i]) + 1e-6;
  return r;
}

// Every element within its own bound; reports the first few offenders.
::testing::AssertionResult within(std::span<const float> got, std::span<const double> want,
                                  std::span<const double> bound) {
  int bad = 0;
  auto failure = ::testing::AssertionFailure();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(diff <= bound[i])) {
      if (bad < 5) failure << "[" << i << "] got " << got[i] << ", expected " << want[i] << " +- " << bound[i] << "; ";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return failure << bad << " of " << got.size() << " elements off";
}

struct Outputs {
  std::vector<float> out, lse, dqkv;
};

Outputs run(Device& dev, const Problem& pb, DType dtype) {
  const Sizes& n = pb.n;
  const int heads = static_cast<int>(n.NH);
  Tensor qkv = tensor_from(dev, {n.B, n.T, 3 * n.C}, pb.qkv, dtype);
  Tensor out = leftovers(dev, {n.B, n.T, n.C}, dtype), lse = leftovers(dev, {n.B, n.NH, n.T});
  flash_attention(compute(dev), qkv, out, lse, heads);
  Tensor dout = tensor_from(dev, {n.B, n.T, n.C}, pb.dout, dtype);
  Tensor dqkv = leftovers(dev, {n.B, n.T, 3 * n.C}, dtype);  // the backward overwrites every element
  flash_attention_backward(compute(dev), dout, qkv, out, lse, dqkv, heads);
  return {read(out), read(lse), read(dqkv)};
}

class NnOpsFlashAttentionTest : public OnEachDevice {};

void expect_the_exact_softmax_within_roundings(Device& dev, DType dtype, const std::vector<Sizes>& cases) {
  for (const Sizes& n : cases) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + ", B " + std::to_string(n.B) + ", T " + std::to_string(n.T) +
                 ", hd " + std::to_string(n.hd()));
    const Problem pb = problem(n, static_cast<std::uint32_t>(n.T));
    const Reference ref = reference(pb, dtype);
    const Outputs got = run(dev, pb, dtype);
    EXPECT_TRUE(within(got.out, ref.out, ref.out_bound));
    EXPECT_TRUE(all_close(got.lse, ref.lse, 1e-4, 1e-6));
    EXPECT_TRUE(within(got.dqkv, ref.dqkv, ref.dqkv_bound));
  }
}

TEST_P(NnOpsFlashAttentionTest, MatchesTheExactSoftmaxWithinItsRoundings) {
  // One partial tile with a head dimension the GPU pads (4); three tiles, the last partial, so the online
  // softmax rescales twice (hd 16); GPT-2's head dimension over two tiles (64); the largest (128).
  // On the GPU also GPT-2's shapes at its full context, 16 tiles (the host body loops the same way at any T), and
  // a head of 80, which the kernel built for heads up to 128 runs with its last columns unused.
  std::vector<Sizes> cases = {{2, 5, 8, 2}, {1, 150, 32, 2}, {2, 70, 192, 3}, {1, 80, 256, 2}};
  if (GetParam() == DeviceKind::cuda) cases.insert(cases.end(), {{1, 1024, 128, 2}, {1, 130, 160, 2}});
  auto dev = device();
  expect_the_exact_softmax_within_roundings(*dev, DType::bf16, cases);
}

TEST_P(NnOpsFlashAttentionTest, InF32MatchesTheExactSoftmaxWithinF32Roundings) {
  // The same shapes up to f32's largest head, 64; a head of 6 columns, which the GPU pads to 8 and loads a float
  // at a time; on the GPU GPT-2's hd at its full context, and 2 x 12 heads of 16 columns at that context: 384
  // blocks of the one-pass backward, more than an H100 or H200 holds at once (two an SM), so blocks wait for
  // their turns to add dq ([Note: dq in key-tile order]) beside blocks that have yet to start.
  std::vector<Sizes> cases = {{2, 5, 8, 2}, {1, 67, 12, 2}, {1, 150, 32, 2}, {2, 70, 192, 3}};
  if (GetParam() == DeviceKind::cuda) cases.insert(cases.end(), {{1, 1024, 128, 2}, {2, 1024, 192, 12}});
  auto dev = device();
  expect_the_exact_softmax_within_roundings(*dev, DType::f32, cases);
}

TEST_P(NnOpsFlashAttentionTest, QueriesSeeNoKeyAfterThem) {
  // A key after every query of the first tile carries a huge value in v and a score that would win the
  // softmax: if the mask leaked, the outputs of the queries before it would jump.
  const Sizes n{1, 100, 16, 1};
  Problem pb = problem(n, 5);
  const std::int64_t late = 90;
  for (std::int64_t i = 0; i < n.C; ++i) {
    pb.qkv[static_cast<std::size_t>(late * 3 * n.C + n.C + i)] = 8.f;        // k
    pb.qkv[static_cast<std::size_t>(late * 3 * n.C + 2 * n.C + i)] = 1000.f;  // v
  }
  const Reference ref = reference(pb, DType::bf16);
  auto dev = device();
  const Outputs got = run(*dev, pb, DType::bf16);
  EXPECT_TRUE(within(got.out, ref.out, ref.out_bound));
  for (std::int64_t t = 0; t < late; ++t)
    for (std::int64_t i = 0; i < n.C; ++i) ASSERT_LT(std::abs(got.out[static_cast<std::size_t>(t * n.C + i)]), 3.f);
}

TEST_P(NnOpsFlashAttentionTest, RerunsAreBitExact) {
  // No atomic sums on any device: the same inputs give the same bits, forward and backward. On the GPU also
  // GPT-2 124M's attention at 4 x 1024 tokens in f32, 768 blocks of the one-pass backward, whose dq adds wait
  // their turns in whatever order the GPU runs the blocks.
  auto dev = device();
  std::vector<std::pair<DType, Sizes>> cases = {{DType::bf16, {2, 130, 128, 2}}, {DType::f32, {2, 130, 64, 2}}};
  if (GetParam() == DeviceKind::cuda) cases.push_back({DType::f32, {4, 1024, 768, 12}});
  for (const auto& [dtype, n] : cases) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + ", B " + std::to_string(n.B) + ", T " + std::to_string(n.T));
    const Problem pb = problem(n, 7);
    const Outputs first = run(*dev, pb, dtype), second = run(*dev, pb, dtype);
    EXPECT_EQ(first.out, second.out);
    EXPECT_EQ(first.lse, second.lse);
    EXPECT_EQ(first.dqkv, second.dqkv);
  }
}

FSDPLAB_ON_EACH_DEVICE(NnOpsFlashAttentionTest);

TEST(NnOpsFlashAttention, TheSimDeviceKeepsNoScoreMatrix) {
  // What the forward writes is out and lse: O(T) per head. Its cost counts the tiles at or below the
  // diagonal only, so at T = 1024 it is well under the exact op's, which computes every score.
  auto dev = make_sim_device(0, SimDeviceOptions{.dry_run = true});
  const std::int64_t B = 1, T = 1024, C = 768, NH = 12;
  Tensor qkv = Tensor::empty(*dev, {B, T, 3 * C}, DType::bf16, MemTag::activation);
  Tensor out = Tensor::empty(*dev, {B, T, C}, DType::bf16, MemTag::activation);
  Tensor lse = Tensor::empty(*dev, {B, NH, T}, DType::f32, MemTag::activation);
  flash_attention(compute(*dev), qkv, out, lse, static_cast<int>(NH));
  ASSERT_EQ(dev->ops().size(), 1u);
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.name, "flash_attention");
  // Tiles (16 x 17 / 2 of 64 x 64 pairs) x 4 hd flops a pair, x 12 heads, plus the softmax.
  const double pairs = NH * (16.0 * 17 / 2) * 64 * 64;
  EXPECT_DOUBLE_EQ(op.cost.flops, 4 * 64 * pairs + 5 * pairs);
  EXPECT_DOUBLE_EQ(op.cost.bytes, 2 * (4.0 * B * T * C) + 4.0 * B * NH * T);
}

TEST(NnOpsFlashAttention, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  constexpr std::int64_t B = 2, T = 5, C = 8, NH = 2;
  Tensor qkv = zeros(*dev, {B, T, 3 * C}, DType::bf16), out = zeros(*dev, {B, T, C}, DType::bf16);
  Tensor lse = zeros(*dev, {B, NH, T}), qkv_f32 = zeros(*dev, {B, T, 3 * C}), out_f32 = zeros(*dev, {B, T, C});
  Tensor lse_t = zeros(*dev, {B, NH, T + 1});
  Tensor wide_qkv = zeros(*dev, {1, 2, 3 * 258}, DType::bf16), wide_out = zeros(*dev, {1, 2, 258}, DType::bf16);
  Tensor wide_lse = zeros(*dev, {1, 1, 2});
  Tensor wide_qkv_f32 = zeros(*dev, {1, 2, 3 * 130}), wide_out_f32 = zeros(*dev, {1, 2, 130});
  Tensor qkv_i32 = Tensor::empty(*dev, {B, T, 3 * C}, DType::i32, MemTag::activation);
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { flash_attention(s, qkv_i32, out, lse, NH); },
                           {"flash_attention", "qkv must be [B, T, 3C] f32 or bf16", "[2, 5, 24] i32"}));
  EXPECT_TRUE(throws_error([&] { flash_attention(s, qkv_f32, out, lse, NH); },
                           {"out must be [2, 5, 8] f32", "[2, 5, 8] bf16"}));
  EXPECT_TRUE(throws_error([&] { flash_attention(s, qkv, out_f32, lse, NH); },
                           {"out must be [2, 5, 8] bf16", "[2, 5, 8] f32"}));
  EXPECT_TRUE(
      throws_error([&] { flash_attention(s, qkv, out, lse_t, NH); }, {"lse must be [2, 2, 5] f32", "[2, 2, 6]"}));
  EXPECT_TRUE(
      throws_error([&] { flash_attention(s, qkv, out, lse, 3); }, {"n_head must divide C = 8", "got n_head 3"}));
  EXPECT_TRUE(throws_error([&] { flash_attention(s, wide_qkv, wide_out, wide_lse, 1); },
                           {"head dimension C / n_head of bf16 qkv must be at most 128", "got 258"}));
  EXPECT_TRUE(throws_error([&] { flash_attention(s, wide_qkv_f32, wide_out_f32, wide_lse, 2); },
                           {"head dimension C / n_head of f32 qkv must be at most 64", "got 65"}));
  EXPECT_TRUE(throws_error([&] { flash_attention_backward(s, out, qkv, out, lse, out, NH); },
                           {"flash_attention_backward", "dqkv must be [2, 5, 24] bf16", "[2, 5, 8] bf16"}));
  EXPECT_TRUE(dev->ops().empty());
}

}  // namespace
}  // namespace fsdplab
