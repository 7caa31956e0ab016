// matmul: every transpose combination and alpha/beta against a plain loop in double, bf16 operands
// accumulating in f32, the backward as two accumulating matmuls against finite differences, the epilogues
// (bias, GELU, residual) against the same loop (all on each device), the cost it states, and the errors it
// gives for operands that do not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/tensor/bf16.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/matmul.hpp"
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

// alpha * op(a) @ op(b) + beta * c in double, with a stored [K, M] when transposed and b [N, K].
std::vector<double> reference_matmul(const std::vector<float>& a, const std::vector<float>& b,
                                     const std::vector<float>& c, int M, int N, int K, MatmulOptions opt) {
  std::vector<double> out(static_cast<std::size_t>(M * N));
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k) {
        const double av = opt.trans_a ? a[k * M + i] : a[i * K + k];
        const double bv = opt.trans_b ? b[j * K + k] : b[k * N + j];
        acc += av * bv;
      }
      out[i * N + j] = opt.alpha * acc + (opt.beta != 0 ? opt.beta * static_cast<double>(c[i * N + j]) : 0.0);
    }
  }
  return out;
}

// `values` in a tensor of `dtype` that starts `offset` elements into its storage, so its pointer need not be
// 16-byte aligned (FlatParameter shards start anywhere).
Tensor view_at(Device& dev, const Shape& shape, const std::vector<float>& values, DType dtype, int offset) {
  Tensor storage = Tensor::empty(dev, {shape_numel(shape) + offset}, dtype, MemTag::activation);
  Tensor view = storage.view(offset, shape);
  view.copy_from(values);
  return view;
}

// The numerics run on every device (the cuda device's GEMM is cuBLAS); the cost, dry-run and argument
// checks below are the sim device's alone.
class MatmulTest : public testing::OnEachDevice {};

TEST_P(MatmulTest, AllFourTransposeCombinations) {
  auto dev = device();
  const int M = 5, N = 3, K = 7;
  const auto av = random_values(M * K, 1);
  const auto bv = random_values(K * N, 2);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a ") + (ta ? "on" : "off") + ", trans_b " + (tb ? "on" : "off"));
      const MatmulOptions opt{.trans_a = ta, .trans_b = tb};
      Tensor a = tensor_from(*dev, ta ? Shape{K, M} : Shape{M, K}, av);
      Tensor b = tensor_from(*dev, tb ? Shape{N, K} : Shape{K, N}, bv);
      Tensor out = Tensor::empty(*dev, {M, N}, DType::f32, MemTag::activation);
      matmul(compute(*dev), a, b, out, opt);
      EXPECT_TRUE(all_close(read(out), reference_matmul(av, bv, {}, M, N, K, opt), 1e-5));
    }
  }
}

TEST_P(MatmulTest, AlphaScalesTheProductAndBetaTheOldOut) {
  auto dev = device();
  const int M = 4, N = 6, K = 3;
  const auto av = random_values(M * K, 3);
  const auto bv = random_values(N * K, 4);
  const auto cv = random_values(M * N, 5);
  Tensor a = tensor_from(*dev, {M, K}, av);
  Tensor b = tensor_from(*dev, {N, K}, bv);
  Tensor out = tensor_from(*dev, {M, N}, cv);
  const MatmulOptions opt{.trans_b = true, .alpha = 0.5f, .beta = -2.f};
  matmul(compute(*dev), a, b, out, opt);
  EXPECT_TRUE(all_close(read(out), reference_matmul(av, bv, cv, M, N, K, opt), 1e-5));
  EXPECT_EQ(dev->ops().back().reads.size(), 3u);  // beta != 0 reads out: the race detector must know
}

TEST_P(MatmulTest, BetaZeroNeverReadsOut) {
  auto dev = device();
  const auto av = random_values(6, 6);
  const auto bv = random_values(6, 7);
  Tensor a = tensor_from(*dev, {2, 3}, av);
  Tensor b = tensor_from(*dev, {3, 2}, bv);
  const std::vector<float> stale(4, std::numeric_limits<float>::quiet_NaN());
  for (DType out_dtype : {DType::f32, DType::bf16}) {
    Tensor out = tensor_from(*dev, {2, 2}, stale, out_dtype);
    matmul(compute(*dev), a, b, out);
    std::vector<double> expected = reference_matmul(av, bv, {}, 2, 2, 3, {});
    if (out_dtype == DType::bf16) {
      for (double& e : expected) e = round_to_bf16(static_cast<float>(e));
    }
    EXPECT_TRUE(all_close(read(out), expected, 1e-6)) << dtype_name(out_dtype);
    EXPECT_EQ(dev->ops().back().reads.size(), 2u);
  }
}

TEST_P(MatmulTest, ZeroInnerDimensionLeavesBetaTimesOut) {
  auto dev = device();
  Tensor a = Tensor::empty(*dev, {2, 0}, DType::f32, MemTag::activation);
  Tensor b = Tensor::empty(*dev, {0, 3}, DType::f32, MemTag::activation);
  Tensor out = tensor_from(*dev, {2, 3}, std::vector<float>(6, 1.5f));
  matmul(compute(*dev), a, b, out, {.beta = 2.f});
  EXPECT_EQ(read(out), std::vector<float>(6, 3.f));
  matmul(compute(*dev), a, b, out);
  EXPECT_EQ(read(out), std::vector<float>(6, 0.f));
}

// a = [1 ... 1], b = [1 + 2^-7 ...]: 300 products sum to 302.34375, exact in f32. A bf16
// accumulator would stall once the sum passes 256 (its spacing there is 2), far from the true sum.
TEST_P(MatmulTest, Bf16OperandsAccumulateInF32AndRoundOnce) {
  auto dev = device();
  const int K = 300;
  Tensor a = tensor_from(*dev, {1, K}, std::vector<float>(K, 1.f), DType::bf16);
  Tensor b = tensor_from(*dev, {K, 1}, std::vector<float>(K, 1.0078125f), DType::bf16);
  Tensor out32 = Tensor::empty(*dev, {1, 1}, DType::f32, MemTag::activation);
  Tensor out16 = Tensor::empty(*dev, {1, 1}, DType::bf16, MemTag::activation);
  matmul(compute(*dev), a, b, out32);
  matmul(compute(*dev), a, b, out16);
  EXPECT_EQ(read(out32)[0], 302.34375f);
  EXPECT_EQ(read(out16)[0], 302.f);  // the one rounding, to bf16's nearest
}

TEST_P(MatmulTest, Bf16MatchesTheReferenceOnRoundedInputs) {
  auto dev = device();
  const int M = 6, N = 5, K = 33;
  const auto av = rounded_to_bf16(random_values(M * K, 8));
  const auto bv = rounded_to_bf16(random_values(K * N, 9));
  const auto cv = rounded_to_bf16(random_values(M * N, 10));
  const MatmulOptions opt{.trans_a = true, .alpha = 1.5f, .beta = 1.f};
  Tensor a = tensor_from(*dev, {K, M}, av, DType::bf16);
  Tensor b = tensor_from(*dev, {K, N}, bv, DType::bf16);

  Tensor out32 = tensor_from(*dev, {M, N}, cv, DType::f32);
  matmul(compute(*dev), a, b, out32, opt);
  const std::vector<double> expected = reference_matmul(av, bv, cv, M, N, K, opt);
  EXPECT_TRUE(all_close(read(out32), expected, 1e-5));

  Tensor out16 = tensor_from(*dev, {M, N}, cv, DType::bf16);
  matmul(compute(*dev), a, b, out16, opt);
  EXPECT_TRUE(all_close(read(out16), expected, 1e-6, 1.0 / 256));  // half a bf16 ulp, plus slack
}

// y = a @ b with upstream gradient g: da = g @ b^T and db = a^T @ g, each one matmul with beta = 1
// so it adds to what the buffer held. Checked against central differences of sum(y * g).
TEST_P(MatmulTest, BackwardIsTwoAccumulatingMatmulsMatchingFiniteDifferences) {
  auto dev = device();
  const int M = 4, N = 5, K = 6;
  const auto av = random_values(M * K, 11);
  const auto bv = random_values(K * N, 12);
  const auto gv = random_values(M * N, 13);
  Tensor a = tensor_from(*dev, {M, K}, av);
  Tensor b = tensor_from(*dev, {K, N}, bv);
  Tensor g = tensor_from(*dev, {M, N}, gv);
  Tensor da = tensor_from(*dev, {M, K}, std::vector<float>(M * K, 1.f));  // an earlier contribution
  Tensor db = tensor_from(*dev, {K, N}, std::vector<float>(K * N, -1.f));
  matmul(compute(*dev), g, b, da, {.trans_b = true, .beta = 1.f});
  matmul(compute(*dev), a, g, db, {.trans_a = true, .beta = 1.f});

  const auto loss = [&](std::span<const float> x, std::span<const float> y) {
    Tensor ta = tensor_from(*dev, {M, K}, x);
    Tensor tb = tensor_from(*dev, {K, N}, y);
    Tensor out = Tensor::empty(*dev, {M, N}, DType::f32, MemTag::activation);
    matmul(compute(*dev), ta, tb, out);
    return testing::dot(read(out), gv);
  };
  std::vector<double> expected_da = testing::finite_difference([&](auto x) { return loss(x, bv); }, av);
  std::vector<double> expected_db = testing::finite_difference([&](auto y) { return loss(av, y); }, bv);
  for (double& e : expected_da) e += 1;
  for (double& e : expected_db) e -= 1;
  EXPECT_TRUE(all_close(read(da), expected_da, 1e-4));
  EXPECT_TRUE(all_close(read(db), expected_db, 1e-4));
}

TEST_P(MatmulTest, IsBitwiseDeterministic) {
  auto dev = device();
  const int M = 64, N = 48, K = 96;
  Tensor a = tensor_from(*dev, {M, K}, random_values(M * K, 14));
  Tensor b = tensor_from(*dev, {K, N}, random_values(K * N, 15));
  Tensor out1 = Tensor::empty(*dev, {M, N}, DType::f32, MemTag::activation);
  Tensor out2 = Tensor::empty(*dev, {M, N}, DType::f32, MemTag::activation);
  matmul(compute(*dev), a, b, out1);
  matmul(compute(*dev), a, b, out2);
  EXPECT_EQ(read(out1), read(out2));
}

// Every dtype pairing at a size where cuBLAS picks tensor-core and split-K kernels, on views that start one
// element into their storage (FlatParameter shards start anywhere, so pointers are not 16-byte aligned).
// An f32 GEMM into a bf16 out is the pairing cuBLAS lacks: the product is rounded once, after beta * out.
TEST_P(MatmulTest, EveryDtypePairingOnUnalignedViews) {
  auto dev = device();
  const int M = 37, N = 29, K = 300;
  const MatmulOptions opt{.trans_b = true, .alpha = 2.f, .beta = 0.5f};
  for (DType in : {DType::f32, DType::bf16}) {
    for (DType out_dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(in)) + " -> " + std::string(dtype_name(out_dtype)));
      auto av = random_values(M * K, 16);
      auto bv = random_values(N * K, 17);
      auto cv = rounded_to_bf16(random_values(M * N, 18));
      if (in == DType::bf16) {
        av = rounded_to_bf16(av);
        bv = rounded_to_bf16(bv);
      }
      Tensor a = view_at(*dev, {M, K}, av, in, 1);
      Tensor b = view_at(*dev, {N, K}, bv, in, 1);
      Tensor out = view_at(*dev, {M, N}, cv, out_dtype, 1);
      matmul(compute(*dev), a, b, out, opt);
      const std::vector<double> expected = reference_matmul(av, bv, cv, M, N, K, opt);
      // Sums of 300 products of magnitude <= 1 stay within ~30: f32 accumulation is good to 1e-4 there; a
      // bf16 out adds half a bf16 ulp (plus slack).
      EXPECT_TRUE(all_close(read(out), expected, 1e-4, out_dtype == DType::bf16 ? 1.0 / 256 : 0));
    }
  }
}

// ---- epilogues ---------------------------------------------------------------------------------------

// MatmulEpilogue's formulas over a double product p [M, N]; pre receives p + bias where there is a GELU.
struct EpilogueValues {
  std::vector<float> bias, residual;  // empty where absent
  bool gelu = false;
};
std::vector<double> reference_epilogue(std::vector<double> p, const EpilogueValues& e, int N,
                                       std::vector<double>* pre) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    double v = p[i] + (e.bias.empty() ? 0.0 : static_cast<double>(e.bias[i % static_cast<std::size_t>(N)]));
    if (e.gelu) {
      (*pre)[i] = v;
      v = reference::gelu_tanh(v);
    } else if (!e.residual.empty()) {
      v += e.residual[i];
    }
    p[i] = v;
  }
  return p;
}

// Every epilogue, in f32 and bf16, with b transposed (nn.Linear's layout) and not, at a shape cuBLASLt takes
// (multiples of 16), at odd ones on views one element into their storage, which it may refuse (the cuda
// device then runs the product and the epilogue kernel), and at the first shape with aligned matrices but a
// bias and GELU aux 2 elements into theirs (a FlatParameter's bias view can be; the cuda device must not hand
// cuBLASLt a bias its kernel would load misaligned): out and gelu_pre against the double loop.
TEST_P(MatmulTest, EpiloguesApplyBiasGeluOrResidualToTheProduct) {
  auto dev = device();
  struct Size {
    int M, N, K, offset, epilogue_offset;  // offset: of a, b, out and residual; epilogue_offset: bias, gelu_pre
  };
  for (const Size z : {Size{64, 48, 96, 0, 0}, Size{37, 29, 45, 1, 1}, Size{64, 48, 96, 0, 2}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      for (bool tb : {false, true}) {
        const auto round = [&](std::vector<float> v) { return dt == DType::bf16 ? rounded_to_bf16(v) : v; };
        const auto av = round(random_values(z.M * z.K, 21)), bv = round(random_values(z.K * z.N, 22));
        const auto bias = round(random_values(z.N, 23)), residual = round(random_values(z.M * z.N, 24, -4.f, 4.f));
        const std::vector<double> p = reference_matmul(av, bv, {}, z.M, z.N, z.K, {.trans_b = tb});
        const std::vector<EpilogueValues> kinds = {
            {bias, {}, false}, {bias, {}, true}, {bias, residual, false}, {{}, residual, false}, {{}, {}, true}};
        for (const EpilogueValues& kind : kinds) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " [" + std::to_string(z.M) + ", " + std::to_string(z.N) +
                       "], offsets " + std::to_string(z.offset) + "/" + std::to_string(z.epilogue_offset) +
                       ", trans_b " + (tb ? "on" : "off") + (kind.bias.empty() ? "" : ", bias") +
                       (kind.gelu ? ", gelu" : "") + (kind.residual.empty() ? "" : ", residual"));
          Tensor a = view_at(*dev, {z.M, z.K}, av, dt, z.offset);
          Tensor b = view_at(*dev, tb ? Shape{z.N, z.K} : Shape{z.K, z.N}, bv, dt, z.offset);
          const std::vector<float> stale(static_cast<std::size_t>(z.M * z.N), std::nanf(""));
          Tensor out = view_at(*dev, {z.M, z.N}, stale, dt, z.offset);
          MatmulEpilogue e;
          if (!kind.bias.empty()) e.bias = view_at(*dev, {z.N}, kind.bias, dt, z.epilogue_offset);
          if (!kind.residual.empty()) e.residual = view_at(*dev, {z.M, z.N}, kind.residual, dt, z.offset);
          if (kind.gelu) e.gelu_pre = view_at(*dev, {z.M, z.N}, stale, dt, z.epilogue_offset);
          matmul(compute(*dev), a, b, out, {.trans_b = tb}, e);

          std::vector<double> pre(p.size());
          const std::vector<double> expected = reference_epilogue(p, kind, z.N, &pre);
          // Sums of at most 96 products of magnitude <= 1 in f32, then a few more f32 operations: good to 1e-4;
          // a bf16 out adds the one rounding, half a bf16 ulp (2^-9 relative), with slack.
          const double rtol = dt == DType::bf16 ? 1.0 / 256 : 0;
          EXPECT_TRUE(all_close(read(out), expected, 1e-4, rtol));
          if (kind.gelu) {
            EXPECT_TRUE(all_close(read(e.gelu_pre), pre, 1e-4, rtol));
          }
        }
      }
    }
  }
}

// 300 products of 1 and 1 + 2^-7 sum to 302.34375, exact in f32; with a bias of 0.75 the f32 sum is 303.09375,
// whose bf16 is 304. Rounding the product first (to 302) and the biased sum again would give 302.
TEST_P(MatmulTest, Bf16EpilogueRoundsOnceAfterTheBias) {
  auto dev = device();
  const int K = 300;
  Tensor a = tensor_from(*dev, {1, K}, std::vector<float>(K, 1.f), DType::bf16);
  Tensor b = tensor_from(*dev, {K, 1}, std::vector<float>(K, 1.0078125f), DType::bf16);
  Tensor bias = tensor_from(*dev, {1}, std::vector<float>{0.75f}, DType::bf16);
  Tensor out = Tensor::empty(*dev, {1, 1}, DType::bf16, MemTag::activation);
  Tensor pre = Tensor::empty(*dev, {1, 1}, DType::bf16, MemTag::activation);
  matmul(compute(*dev), a, b, out, {}, {.bias = bias});
  EXPECT_EQ(read(out)[0], 304.f);
  matmul(compute(*dev), a, b, out, {}, {.bias = bias, .gelu_pre = pre});
  EXPECT_EQ(read(pre)[0], 304.f);
  EXPECT_EQ(read(out)[0], 304.f);  // gelu(v) = v to far below bf16's spacing here
}

FSDPLAB_ON_EACH_DEVICE(MatmulTest);

TEST(Matmul, StatesItsCost) {
  auto dev = make_sim_device();
  Tensor a = Tensor::empty(*dev, {8, 16}, DType::bf16, MemTag::activation);
  Tensor b = Tensor::empty(*dev, {16, 4}, DType::bf16, MemTag::activation);
  Tensor out = Tensor::empty(*dev, {8, 4}, DType::f32, MemTag::activation);
  matmul(compute(*dev), a, b, out);
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.name, "matmul");
  EXPECT_EQ(op.cost.flops, 2.0 * 8 * 4 * 16);
  EXPECT_EQ(op.cost.bytes, 8 * 16 * 2 + 16 * 4 * 2 + 8 * 4 * 4);
  EXPECT_EQ(op.cost.dtype, DType::bf16);
  EXPECT_TRUE(op.cost.matmul);
  EXPECT_EQ(op.writes.size(), 1u);
}

TEST(Matmul, DryRunKeepsTheCostAndSkipsTheNumerics) {
  auto dev = make_sim_device(0, {.dry_run = true});
  Tensor a = Tensor::empty(*dev, {1024, 4096}, DType::bf16, MemTag::activation);
  Tensor b = Tensor::empty(*dev, {4096, 1024}, DType::bf16, MemTag::activation);
  Tensor out = Tensor::empty(*dev, {1024, 1024}, DType::bf16, MemTag::activation);
  matmul(compute(*dev), a, b, out);
  EXPECT_EQ(dev->ops().back().cost.flops, 2.0 * 1024 * 1024 * 4096);
  EXPECT_GT(dev->ops().back().end, dev->ops().back().begin);
}

// The host body in f32 is the separate ops' arithmetic: a GEMM's f32 store, then each op's f32 sum. So moving
// the bias, GELU and residual into the epilogue changed no f32 run's bits.
TEST(Matmul, F32EpilogueIsTheSeparateOpsBitForBit) {
  auto dev = make_sim_device();
  const auto s = compute(*dev);
  const int M = 6, N = 5, K = 7;
  Tensor a = tensor_from(*dev, {M, K}, random_values(M * K, 31));
  Tensor b = tensor_from(*dev, {N, K}, random_values(N * K, 32));
  Tensor bias = tensor_from(*dev, {N}, random_values(N, 33));
  Tensor residual = tensor_from(*dev, {M, N}, random_values(M * N, 34, -40.f, 40.f));
  const auto empty = [&] { return Tensor::empty(*dev, {M, N}, DType::f32, MemTag::activation); };
  Tensor product = empty(), biased = empty(), activated = empty(), summed = empty();
  matmul(s, a, b, product, {.trans_b = true});
  bias_add(s, product, bias, biased);
  gelu(s, biased, activated);
  add(s, residual, biased, summed);

  Tensor out = empty(), pre = empty();
  matmul(s, a, b, out, {.trans_b = true}, {.bias = bias});
  EXPECT_EQ(read(out), read(biased));
  matmul(s, a, b, out, {.trans_b = true}, {.bias = bias, .gelu_pre = pre});
  EXPECT_EQ(read(pre), read(biased));
  EXPECT_EQ(read(out), read(activated));
  matmul(s, a, b, out, {.trans_b = true}, {.bias = bias, .residual = residual});
  EXPECT_EQ(read(out), read(summed));
}

// An epilogue's tensors are read and written where the race detector sees them, and their bytes count.
TEST(Matmul, EpilogueStatesItsOperandsAndBytes) {
  auto dev = make_sim_device();
  Tensor a = Tensor::empty(*dev, {8, 16}, DType::bf16, MemTag::activation);
  Tensor b = Tensor::empty(*dev, {16, 4}, DType::bf16, MemTag::activation);
  Tensor bias = Tensor::empty(*dev, {4}, DType::bf16, MemTag::activation);
  Tensor residual = Tensor::empty(*dev, {8, 4}, DType::bf16, MemTag::activation);
  Tensor pre = Tensor::empty(*dev, {8, 4}, DType::bf16, MemTag::activation);
  Tensor out = Tensor::empty(*dev, {8, 4}, DType::bf16, MemTag::activation);
  const double operands = 8 * 16 * 2 + 16 * 4 * 2 + 8 * 4 * 2;
  matmul(compute(*dev), a, b, out, {}, {.bias = bias, .gelu_pre = pre});
  EXPECT_EQ(dev->ops().back().reads.size(), 3u);
  EXPECT_EQ(dev->ops().back().writes.size(), 2u);
  EXPECT_EQ(dev->ops().back().cost.bytes, operands + 4 * 2 + 8 * 4 * 2);
  EXPECT_EQ(dev->ops().back().cost.flops, 2.0 * 8 * 4 * 16);
  matmul(compute(*dev), a, b, out, {}, {.bias = bias, .residual = residual});
  EXPECT_EQ(dev->ops().back().reads.size(), 4u);
  EXPECT_EQ(dev->ops().back().writes.size(), 1u);
  EXPECT_EQ(dev->ops().back().cost.bytes, operands + 4 * 2 + 8 * 4 * 2);
}

TEST(Matmul, RejectsEpiloguesThatDoNotFit) {
  auto dev = make_sim_device();
  const auto s = compute(*dev);
  const auto empty = [&](const Shape& shape, DType dtype = DType::f32) {
    return Tensor::empty(*dev, shape, dtype, MemTag::activation);
  };
  Tensor a = empty({2, 3}), b = empty({3, 4}), out = empty({2, 4}), bias = empty({4}), other = empty({2, 4});
  const auto error_with = [&](const MatmulOptions& opt, const MatmulEpilogue& e) {
    return error_of([&] { matmul(s, a, b, out, opt, e); });
  };

  std::string msg = error_with({.beta = 1}, {.bias = bias});
  EXPECT_TRUE(contains(msg, "epilogue") && contains(msg, "alpha 1 and beta 0") && contains(msg, "beta 1")) << msg;
  msg = error_with({}, {.residual = other, .gelu_pre = other});
  EXPECT_TRUE(contains(msg, "residual or applies a GELU, not both")) << msg;
  msg = error_with({}, {.bias = empty({3})});
  EXPECT_TRUE(contains(msg, "epilogue bias") && contains(msg, "[4] f32") && contains(msg, "[3]")) << msg;
  msg = error_with({}, {.bias = empty({4}, DType::bf16)});
  EXPECT_TRUE(contains(msg, "epilogue bias") && contains(msg, "[4] f32") && contains(msg, "bf16")) << msg;
  msg = error_with({}, {.residual = empty({4, 2})});
  EXPECT_TRUE(contains(msg, "epilogue residual") && contains(msg, "[2, 4]") && contains(msg, "[4, 2]")) << msg;
  msg = error_with({}, {.gelu_pre = out});
  EXPECT_TRUE(contains(msg, "gelu_pre") && contains(msg, "shares memory with") && contains(msg, "out")) << msg;
  msg = error_with({}, {.residual = out});
  EXPECT_TRUE(contains(msg, "out") && contains(msg, "shares memory with residual")) << msg;
}

TEST(Matmul, RejectsOperandsThatDoNotFit) {
  auto dev = make_sim_device();
  const auto s = compute(*dev);
  Tensor a = Tensor::empty(*dev, {2, 3}, DType::f32, MemTag::activation, "a");
  Tensor b = Tensor::empty(*dev, {4, 5}, DType::f32, MemTag::activation, "b");
  Tensor out = Tensor::empty(*dev, {2, 5}, DType::f32, MemTag::activation, "out");

  std::string msg = error_of([&] { matmul(s, a, b, out); });
  EXPECT_TRUE(contains(msg, "matmul") && contains(msg, "inner dimensions") && contains(msg, "[2, 3]") &&
              contains(msg, "[4, 5]"))
      << msg;

  Tensor b2 = Tensor::empty(*dev, {3, 4}, DType::f32, MemTag::activation, "b2");
  msg = error_of([&] { matmul(s, a, b2, out); });
  EXPECT_TRUE(contains(msg, "out") && contains(msg, "[2, 4]") && contains(msg, "[2, 5]")) << msg;

  Tensor batched = Tensor::empty(*dev, {2, 2, 3}, DType::f32, MemTag::activation, "batched");
  msg = error_of([&] { matmul(s, batched, b2, out); });
  EXPECT_TRUE(contains(msg, "2-D") && contains(msg, "[2, 2, 3]")) << msg;

  Tensor b16 = Tensor::empty(*dev, {3, 5}, DType::bf16, MemTag::activation, "b16");
  msg = error_of([&] { matmul(s, a, b16, out); });
  EXPECT_TRUE(contains(msg, "dtype") && contains(msg, "[3, 5] bf16") && contains(msg, "[2, 3] f32")) << msg;

  Tensor ids = Tensor::empty(*dev, {2, 3}, DType::i32, MemTag::activation, "ids");
  Tensor ids2 = Tensor::empty(*dev, {3, 5}, DType::i32, MemTag::activation, "ids2");
  msg = error_of([&] { matmul(s, ids, ids2, out); });
  EXPECT_TRUE(contains(msg, "i32")) << msg;

  Tensor out_i32 = Tensor::empty(*dev, {2, 5}, DType::i32, MemTag::activation, "out_i32");
  Tensor b3 = Tensor::empty(*dev, {3, 5}, DType::f32, MemTag::activation, "b3");
  msg = error_of([&] { matmul(s, a, b3, out_i32); });
  EXPECT_TRUE(contains(msg, "out") && contains(msg, "i32")) << msg;

  // Writing the product over an operand: out is a view of the same storage as a.
  Tensor square = Tensor::empty(*dev, {3, 3}, DType::f32, MemTag::activation, "square");
  msg = error_of([&] { matmul(s, square, square.view(0, {3, 3}), square); });
  EXPECT_TRUE(contains(msg, "overlaps")) << msg;

  EXPECT_THROW(matmul(s, Tensor::meta({2, 3}, DType::f32), b3, out), Error);
  EXPECT_TRUE(dev->ops().empty());  // nothing was launched
}

}  // namespace
}  // namespace fsdplab
