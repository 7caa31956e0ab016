// cross_entropy and mse_loss, forward and backward, against double-precision references and finite
// differences.
#include "engine/tensor/loss.hpp"

#include <limits>

#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr int N = 6, V = 9;
const std::vector<std::int32_t> kTargets = {0, 8, 3, 3, 5, 1};
constexpr float kDloss = 0.7f;  // not 1, so the backward must scale by it

Tensor targets_tensor(Device& dev, const std::vector<std::int32_t>& targets) {
  Tensor t =
      Tensor::empty(dev, {static_cast<std::int64_t>(targets.size())}, DType::i32, MemTag::activation, "targets");
  t.copy_from(std::span<const std::int32_t>(targets));
  return t;
}

struct CrossEntropyRef {
  double loss;
  std::vector<double> lse;
};

// F.cross_entropy(logits, targets), mean reduction: mean over rows of logsumexp(row) - row[target].
CrossEntropyRef cross_entropy_ref(std::span<const float> logits) {
  CrossEntropyRef r{0, std::vector<double>(N)};
  for (int n = 0; n < N; ++n) {
    double max = logits[n * V];
    for (int v = 0; v < V; ++v) max = std::max(max, static_cast<double>(logits[n * V + v]));
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(logits[n * V + v] - max);
    r.lse[n] = max + std::log(sum);
    r.loss += (r.lse[n] - logits[n * V + kTargets[n]]) / N;
  }
  return r;
}

struct CrossEntropyOutputs {
  float loss;
  std::vector<float> lse, dlogits;
};

// The forward, then the backward: into a separate dlogits that holds garbage (every element must be written),
// or `in_place` over the logits themselves, as LanguageModelLoss runs it.
CrossEntropyOutputs run_cross_entropy(const std::vector<float>& logits, DType dt, DeviceKind kind,
                                      bool in_place = false) {
  auto dev = make_test_device(kind);
  Tensor tlogits = tensor_from(*dev, {N, V}, logits, dt), targets = targets_tensor(*dev, kTargets);
  Tensor loss = leftovers(*dev, {1}), lse = leftovers(*dev, {N});
  Tensor dlogits = in_place ? tlogits : tensor_from(*dev, {N, V}, random_values(N * V, 40, -9.f, 9.f), dt);
  cross_entropy(compute(*dev), tlogits, V, targets, loss, lse);
  cross_entropy_backward(compute(*dev), tlogits, V, targets, lse, kDloss, dlogits);
  return {read(loss)[0], read(lse), read(dlogits)};
}

std::vector<double> expected_dlogits(const std::vector<float>& logits) {
  return numeric_grad([](std::span<const float> x) { return kDloss * cross_entropy_ref(x).loss; }, logits);
}

// The numerical tests run on every device; the errors, found by the host body's checks, on the sim device.
class NnOpsCrossEntropyTest : public OnEachDevice {};
class NnOpsMseLossTest : public OnEachDevice {};

TEST_P(NnOpsCrossEntropyTest, MatchesReferenceAndBackwardIsFiniteDifferences) {
  const auto logits = random_values(N * V, 41, -3.f, 3.f);
  const auto got = run_cross_entropy(logits, DType::f32, GetParam());
  const auto ref = cross_entropy_ref(logits);
  EXPECT_NEAR(got.loss, ref.loss, 1e-5 * ref.loss);
  EXPECT_TRUE(all_close(got.lse, ref.lse, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(got.dlogits, expected_dlogits(logits), kGradAtol, kGradRtol));
}

TEST_P(NnOpsCrossEntropyTest, InPlaceOverTheLogitsIsBitForBitTheSeparateGradient) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const auto logits = rounded_to_bf16(random_values(N * V, 42, -3.f, 3.f));
    const auto separate = run_cross_entropy(logits, dt, GetParam());
    const auto in_place = run_cross_entropy(logits, dt, GetParam(), true);
    EXPECT_EQ(in_place.loss, separate.loss);
    EXPECT_EQ(in_place.dlogits, separate.dlogits);
  }
}

TEST_P(NnOpsCrossEntropyTest, LargeLogitsDoNotOverflow) {
  // exp(500) overflows f32: the row's max must come out before exp. 500 +- 3 in f32 is good to 3e-5,
  // which bounds the loss's and the gradient's accuracy.
  auto logits = random_values(N * V, 43, -3.f, 3.f);
  for (float& v : logits) v += 500.f;
  const auto got = run_cross_entropy(logits, DType::f32, GetParam());
  EXPECT_NEAR(got.loss, cross_entropy_ref(logits).loss, 1e-4);
  std::vector<double> want(N * V);  // the analytic gradient: (softmax - onehot) / N * dloss
  const auto ref = cross_entropy_ref(logits);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v)
      want[n * V + v] = (std::exp(logits[n * V + v] - ref.lse[n]) - (v == kTargets[n])) / N * kDloss;
  EXPECT_TRUE(all_close(got.dlogits, want, 1e-5, 1e-4));
}

TEST_P(NnOpsCrossEntropyTest, Bf16LogitsGiveTheF32LossAndGradientsRoundedOnce) {
  // The reference sees the same bf16-rounded logits; the loss and lse stay f32, dlogits may differ
  // by one rounding (plus the finite differences' error).
  const auto logits = rounded_to_bf16(random_values(N * V, 44, -3.f, 3.f));
  const auto got = run_cross_entropy(logits, DType::bf16, GetParam());
  const auto ref = cross_entropy_ref(logits);
  EXPECT_NEAR(got.loss, ref.loss, 1e-5 * ref.loss);
  EXPECT_TRUE(all_close(got.lse, ref.lse, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(got.dlogits, expected_dlogits(logits), kGradAtol, kBf16Rtol + kGradRtol));
}

TEST_P(NnOpsCrossEntropyTest, AVocabularyOfThousandsMatchesTheReference) {
  // Rows far longer than a block: every thread folds many logits before the block's reduction.
  auto dev = device();
  const int rows = 5, vocab = 3001;
  const std::vector<std::int32_t> targets = {0, 3000, 1234, 7, 1234};
  const auto logits = random_values(rows * vocab, 46, -4.f, 4.f);
  double loss_want = 0;
  std::vector<double> lse_want(rows), dlogits_want(rows * vocab);
  for (int n = 0; n < rows; ++n) {
    double max = -1e300, sum = 0;
    for (int v = 0; v < vocab; ++v) max = std::max(max, static_cast<double>(logits[n * vocab + v]));
    for (int v = 0; v < vocab; ++v) sum += std::exp(logits[n * vocab + v] - max);
    lse_want[n] = max + std::log(sum);
    loss_want += (lse_want[n] - logits[n * vocab + targets[n]]) / rows;
    for (int v = 0; v < vocab; ++v)
      dlogits_want[n * vocab + v] = (std::exp(logits[n * vocab + v] - lse_want[n]) - (v == targets[n])) / rows * kDloss;
  }
  Tensor tlogits = tensor_from(*dev, {rows, vocab}, logits), ttargets = targets_tensor(*dev, targets);
  Tensor loss = leftovers(*dev, {1}), lse = leftovers(*dev, {rows}), dlogits = zeros(*dev, {rows, vocab});
  cross_entropy(compute(*dev), tlogits, vocab, ttargets, loss, lse);
  cross_entropy_backward(compute(*dev), tlogits, vocab, ttargets, lse, kDloss, dlogits);
  EXPECT_NEAR(read(loss)[0], loss_want, 1e-5 * loss_want);
  EXPECT_TRUE(all_close(read(lse), lse_want, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(read(dlogits), dlogits_want, 1e-8, 1e-4));
}

TEST_P(NnOpsCrossEntropyTest, APaddedVocabularyNeverReadsItsPaddingAndZeroesItsGradient) {
  // [Note: the padded vocabulary]: logits [N, Vp] with V classes. NaN in the padding columns would poison any
  // max or sum that read them; the backward writes 0 into dlogits' padding, so that the LM head's weight
  // gradient leaves the padding rows at 0. Both with dlogits separate (holding garbage) and in place.
  constexpr int Vp = 16;
  const auto logits = random_values(N * V, 47, -3.f, 3.f);
  const auto unpadded = run_cross_entropy(logits, DType::f32, GetParam());
  std::vector<float> padded_logits(N * Vp, std::numeric_limits<float>::quiet_NaN());
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) padded_logits[n * Vp + v] = logits[n * V + v];
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "separate");
    auto dev = device();
    Tensor tlogits = tensor_from(*dev, {N, Vp}, padded_logits), targets = targets_tensor(*dev, kTargets);
    Tensor loss = leftovers(*dev, {1}), lse = leftovers(*dev, {N});
    Tensor dlogits = in_place ? tlogits : tensor_from(*dev, {N, Vp}, random_values(N * Vp, 49));
    cross_entropy(compute(*dev), tlogits, V, targets, loss, lse);
    cross_entropy_backward(compute(*dev), tlogits, V, targets, lse, kDloss, dlogits);
    EXPECT_EQ(read(loss)[0], unpadded.loss) << "the same sums in the same order";
    EXPECT_EQ(read(lse), unpadded.lse);
    const std::vector<float> got = read(dlogits);
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < Vp; ++v) {
        const float want = v < V ? unpadded.dlogits[n * V + v] : 0.f;
        ASSERT_EQ(got[n * Vp + v], want) << "row " << n << ", column " << v << (v < V ? "" : " (padding)");
      }
  }
}

TEST(NnOpsCrossEntropy, BadOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor logits = zeros(*dev, {N, V}), targets = targets_tensor(*dev, kTargets), loss = zeros(*dev, {1});
  Tensor lse = zeros(*dev, {N}), dlogits = zeros(*dev, {N, V});
  Tensor bad_target = targets_tensor(*dev, {0, 1, 9, 0, 0, 0}), float_targets = zeros(*dev, {N});
  Tensor loss_2 = zeros(*dev, {2}), lse_bf16 = zeros(*dev, {N}, DType::bf16);
  Tensor dlogits_bf16 = zeros(*dev, {N, V}, DType::bf16);
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { cross_entropy(s, logits, V, bad_target, loss, lse); },
                           {"cross_entropy", "target 9 of row 2", "outside the vocabulary [0, 9)", "[6, 9] f32"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(s, logits, V, bad_target, lse, 1.f, dlogits); },
                           {"cross_entropy_backward", "target 9 of row 2"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy(s, logits, V, float_targets, loss, lse); },
                           {"targets must be [6] i32", "[6] f32"}));
  EXPECT_TRUE(
      throws_error([&] { cross_entropy(s, logits, V, targets, loss_2, lse); }, {"loss must be [1] f32", "[2] f32"}));
  EXPECT_TRUE(
      throws_error([&] { cross_entropy(s, logits, V, targets, loss, lse_bf16); }, {"lse must be [6] f32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(s, logits, V, targets, lse, 1.f, dlogits_bf16); },
                           {"dlogits must be [6, 9] f32", "[6, 9] bf16"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy(s, logits, V + 1, targets, loss, lse); },
                           {"cross_entropy", "expected a vocabulary of 1 to 9 classes", "got 10"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(s, logits, 0, targets, lse, 1.f, dlogits); },
                           {"cross_entropy_backward", "expected a vocabulary of 1 to 9 classes", "got 0"}));
  // In place means the very same elements: dlogits one row off the logits would read rows it already wrote.
  Tensor rows = zeros(*dev, {N + 1, V});
  EXPECT_TRUE(throws_error(
      [&] { cross_entropy_backward(s, rows.view(0, {N, V}), V, targets, lse, 1.f, rows.view(V, {N, V})); },
      {"cross_entropy_backward: dlogits", "partly overlaps logits", "in place"}));
  // A target in the padding is outside the vocabulary, though inside the logits.
  EXPECT_TRUE(throws_error([&] { cross_entropy(s, logits, 8, targets, loss, lse); },
                           {"target 8 of row 1", "outside the vocabulary [0, 8)"}));
  EXPECT_TRUE(dev->ops().empty());
}

// ---- mse_loss -----------------------------------------------------------------------------------

const Shape kMseShape = {3, 5};
constexpr int M = 15;

double mse_ref(std::span<const float> pred, std::span<const float> target) {
  double s = 0;
  for (int i = 0; i < M; ++i) s += (static_cast<double>(pred[i]) - target[i]) * (pred[i] - target[i]);
  return s / M;
}

struct MseOutputs {
  float loss;
  std::vector<float> dpred;
};

MseOutputs run_mse(const std::vector<float>& pred, const std::vector<float>& target, const std::vector<float>& dpred0,
                   DType dt, DeviceKind kind) {
  auto dev = make_test_device(kind);
  Tensor tpred = tensor_from(*dev, kMseShape, pred, dt), ttarget = tensor_from(*dev, kMseShape, target, dt);
  Tensor loss = leftovers(*dev, {1}), dpred = tensor_from(*dev, kMseShape, dpred0, dt);
  mse_loss(compute(*dev), tpred, ttarget, loss);
  mse_loss_backward(compute(*dev), tpred, ttarget, kDloss, dpred);
  return {read(loss)[0], read(dpred)};
}

std::vector<double> expected_dpred(const std::vector<float>& pred, const std::vector<float>& target,
                                   const std::vector<float>& dpred0) {
  return plus(dpred0, numeric_grad([&](std::span<const float> p) { return kDloss * mse_ref(p, target); }, pred));
}

TEST_P(NnOpsMseLossTest, MatchesReferenceAndBackwardAddsFiniteDifferences) {
  const auto pred = random_values(M, 51), target = random_values(M, 52), dpred0 = random_values(M, 53);
  const auto got = run_mse(pred, target, dpred0, DType::f32, GetParam());
  EXPECT_NEAR(got.loss, mse_ref(pred, target), 1e-6);
  EXPECT_TRUE(all_close(got.dpred, expected_dpred(pred, target, dpred0), kGradAtol, kGradRtol));
}

TEST_P(NnOpsMseLossTest, Bf16GivesTheF32LossAndGradientsRoundedOnce) {
  const auto pred = rounded_to_bf16(random_values(M, 54)), target = rounded_to_bf16(random_values(M, 55));
  const auto dpred0 = rounded_to_bf16(random_values(M, 56));
  const auto got = run_mse(pred, target, dpred0, DType::bf16, GetParam());
  EXPECT_NEAR(got.loss, mse_ref(pred, target), 1e-6);  // the loss is f32
  EXPECT_TRUE(all_close(got.dpred, expected_dpred(pred, target, dpred0), kGradAtol, kBf16Rtol + kGradRtol));
}

TEST_P(NnOpsMseLossTest, HalfAMillionElementsMatchTheReference) {
  // More elements than one block folds: partial sums per block, then one block over them.
  auto dev = device();
  const std::int64_t n = 500001;
  const auto pred = random_values(n, 57), target = random_values(n, 58);
  double want = 0;
  for (std::int64_t i = 0; i < n; ++i) want += (static_cast<double>(pred[i]) - target[i]) * (pred[i] - target[i]);
  want /= static_cast<double>(n);
  Tensor loss = leftovers(*dev, {1});
  mse_loss(compute(*dev), tensor_from(*dev, {n}, pred), tensor_from(*dev, {n}, target), loss);
  // A running f32 sum (the host's) rounds each add at the total's ulp and drifts; partial sums far less.
  EXPECT_NEAR(read(loss)[0], want, 1e-3 * want);
}

TEST(NnOpsMseLoss, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor pred = zeros(*dev, kMseShape), loss = zeros(*dev, {1});
  Tensor target_flat = zeros(*dev, {M}), target_bf16 = zeros(*dev, kMseShape, DType::bf16);
  Tensor ids = Tensor::empty(*dev, kMseShape, DType::i32, MemTag::activation);
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { mse_loss(s, pred, target_flat, loss); },
                           {"mse_loss", "target must be [3, 5] f32", "[15] f32"}));
  EXPECT_TRUE(throws_error([&] { mse_loss(s, pred, target_bf16, loss); }, {"target must be [3, 5] f32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { mse_loss(s, ids, ids, loss); }, {"pred must be any shape f32 or bf16", "[3, 5] i32"}));
  EXPECT_TRUE(throws_error([&] { mse_loss_backward(s, pred, pred, 1.f, target_flat); },
                           {"mse_loss_backward", "dpred must be [3, 5] f32", "[15] f32"}));
  EXPECT_TRUE(dev->ops().empty());
}

FSDPLAB_ON_EACH_DEVICE(NnOpsCrossEntropyTest);
FSDPLAB_ON_EACH_DEVICE(NnOpsMseLossTest);

}  // namespace
}  // namespace fsdplab
