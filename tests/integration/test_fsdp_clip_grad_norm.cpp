// Gradient-norm clipping across shards (--clip-grad-norm; [Note: clipping a sharded gradient] in
// engine/fsdp/sharded_optimizer_reference.cpp): every strategy, schedule and form trains like the single-rank
// baseline clipped the same way, step by step the same norm, with a clip that is really active (the clipped
// baseline leaves the unclipped one); the norm is one all-reduce over the shard group a step, and no update starts
// before the last reduction ends (read from the virtual clock).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "engine/train/model_factory.hpp"
#include "fsdp_runs.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;
using testing::losses_of;

constexpr double kMaxNorm = 0.5;  // gpt2 test-tiny's gradient starts near 1.3: every step clips

RunConfig clipped_gpt2(int world, const std::string& optimizer) {
  RunConfig run = testing::gpt2_run(world, 12, 16, 5);
  run.optimizer = optimizer;
  run.lr = optimizer == "sgd" ? 0.1 : 0.01;
  run.clip_grad_norm = kMaxNorm;
  return run;
}

std::vector<double> norms_of(const std::vector<StepReport>& reports) {
  std::vector<double> out;
  for (const StepReport& s : reports) out.push_back(s.grad_norm);
  return out;
}

double largest_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return largest;
}

struct Case {
  std::string name;
  int world = 2;
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  std::string optimizer = "sgd";
  OverlapMode mode = OverlapMode::async;
  bool offload = false;
  std::string wrap = "block";
  int accumulate = 1;
  EmbeddingGradient embedding_grad = EmbeddingGradient::table;
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.name; }

class FsdpClipGradNorm : public testing::TempDirTest, public ::testing::WithParamInterface<Case> {};

// The largest difference between two --save-final folders' parameters.
double largest_parameter_difference(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto want = testing::read_params(a);
  const auto got = testing::read_params(b);
  EXPECT_EQ(got.size(), want.size());
  double largest = 0;
  for (const auto& [name, values] : want) {
    EXPECT_EQ(got.at(name).size(), values.size()) << name;
    for (std::size_t i = 0; i < std::min(values.size(), got.at(name).size()); ++i)
      largest = std::max(largest, static_cast<double>(std::abs(got.at(name)[i] - values[i])));
  }
  return largest;
}

// Against the baseline clipped the same way: losses and norms within 1e-5 relative (the losses of FsdpEquivalence:
// the squares are summed per shard, then across ranks, in another order than the baseline's one sum), and the final
// parameters no further apart than the same pair of runs without clipping, which is what sharding's rounding alone
// gives (times 4: the norm's own rounding scales every element a little).
TEST_P(FsdpClipGradNorm, TrainsLikeTheClippedBaseline) {
  const Case& c = GetParam();
  const auto baseline = [&](double max_norm, const std::string& folder) {
    RunConfig base = clipped_gpt2(1, c.optimizer);
    base.clip_grad_norm = max_norm;
    base.save_final = path(folder).string();
    return train_baseline(base, PresetCatalog::builtin(), nullptr, nullptr);
  };
  const auto sharded = [&](double max_norm, const std::string& folder) {
    FsdpRun fsdp;
    fsdp.run = clipped_gpt2(c.world, c.optimizer);
    fsdp.run.clip_grad_norm = max_norm;
    fsdp.run.wrap = c.wrap;
    fsdp.run.accumulate = c.accumulate;
    fsdp.run.save_final = path(folder).string();
    fsdp.options.strategy = c.strategy;
    if (c.strategy == ShardingStrategy::hybrid_shard) fsdp.options.hybrid_group = 2;
    if (c.mode == OverlapMode::sync) fsdp.options = sync_schedule(fsdp.options);
    fsdp.options.offload = c.offload;
    fsdp.options.embedding_grad = c.embedding_grad;
    return train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  };
  const std::vector<StepReport> clipped_base = baseline(kMaxNorm, "baseline");
  const std::vector<StepReport> plain_base = baseline(0, "baseline_unclipped");
  // The clip is active: every step's norm above the limit, and the training another than without it.
  for (const StepReport& s : clipped_base) EXPECT_GT(s.grad_norm, kMaxNorm) << "step " << s.step;
  for (const StepReport& s : plain_base) EXPECT_TRUE(std::isnan(s.grad_norm)) << "step " << s.step;
  EXPECT_GT(largest_relative_difference(losses_of(clipped_base), losses_of(plain_base)), 1e-3);

  const std::vector<StepReport> clipped = sharded(kMaxNorm, "fsdp");
  ASSERT_EQ(clipped.size(), clipped_base.size());
  EXPECT_LE(largest_relative_difference(losses_of(clipped), losses_of(clipped_base)), 1e-5);
  EXPECT_LE(largest_relative_difference(norms_of(clipped), norms_of(clipped_base)), 1e-5);
  sharded(0, "fsdp_unclipped");
  const double rounding = largest_parameter_difference(path("baseline_unclipped"), path("fsdp_unclipped"));
  const double apart = largest_parameter_difference(path("baseline"), path("fsdp"));
  EXPECT_LE(apart, 4 * std::max(rounding, 1e-7)) << "the unclipped runs' parameters are " << rounding << " apart";
}

INSTANTIATE_TEST_SUITE_P(
    Runs, FsdpClipGradNorm,
    ::testing::Values(Case{.name = "full_w2_sgd"},
                      Case{.name = "full_w3_sgd_sync", .world = 3, .mode = OverlapMode::sync},
                      Case{.name = "full_w2_adamw", .optimizer = "adamw"},
                      Case{.name = "grad_op_w2_nested", .strategy = ShardingStrategy::shard_grad_op, .wrap = "nested"},
                      Case{.name = "hybrid_w4_s2", .world = 4, .strategy = ShardingStrategy::hybrid_shard},
                      Case{.name = "no_shard_w2", .strategy = ShardingStrategy::no_shard},
                      Case{.name = "zero1_w2", .strategy = ShardingStrategy::zero1},
                      Case{.name = "zero2_w3", .world = 3, .strategy = ShardingStrategy::zero2},
                      Case{.name = "full_w3_offload", .world = 3, .offload = true},
                      Case{.name = "full_w2_accumulate2", .accumulate = 2},
                      Case{.name = "full_w2_embedding_rows", .embedding_grad = EmbeddingGradient::rows}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The cost of clipping, from rank 0's op log: one all-reduce of the squared norm a step on the compute stream (beside
// the loss's), which starts only when every unit's reduce-scatter has ended, and every update after it. Without
// clipping, ASYNC's per-unit updates start while the root's reduce-scatter still runs.
TEST(FsdpClipGradNormSchedule, EveryUpdateWaitsForTheNormAndTheNormForEveryReduction) {
  struct Step0 {
    SimTime last_reduction_end = 0, norm_begin = 0, norm_end = 0, first_update_begin = 0;
    int all_reduces = 0;
  };
  const auto observe = [](double max_norm) {
    FsdpRun fsdp;
    fsdp.run = clipped_gpt2(2, "adamw");
    fsdp.run.steps = 2;
    fsdp.run.clip_grad_norm = max_norm;
    fsdp.keep_op_log = true;
    Step0 seen;
    std::mutex mutex;
    fsdp.on_rank_done = [&](int rank, Device& device) {
      if (rank != 0) return;
      const std::lock_guard<std::mutex> lock(mutex);
      seen.first_update_begin = std::numeric_limits<SimTime>::max();
      for (const OpRecord& op : device.ops()) {
        if (op.labels.step != 0) continue;
        if (op.category == OpCategory::reduce_scatter)
          seen.last_reduction_end = std::max(seen.last_reduction_end, op.end);
        if (op.category == OpCategory::all_reduce) {
          ++seen.all_reduces;
          if (op.lane == Lane::compute && seen.norm_end == 0 && op.labels.phase == "optimizer") {
            seen.norm_begin = op.begin;
            seen.norm_end = op.end;
          }
        }
        if (op.name.starts_with("adamw_update")) seen.first_update_begin = std::min(seen.first_update_begin, op.begin);
      }
    };
    train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
    return seen;
  };
  const Step0 clipped = observe(kMaxNorm);
  EXPECT_EQ(clipped.all_reduces, 2);  // the squared norm's and the loss's
  EXPECT_GE(clipped.norm_begin, clipped.last_reduction_end);
  EXPECT_GE(clipped.first_update_begin, clipped.norm_end);
  const Step0 plain = observe(0);
  EXPECT_EQ(plain.all_reduces, 1);  // the loss's
  EXPECT_LT(plain.first_update_begin, plain.last_reduction_end) << "no per-unit update overlapped a reduction";
}

TEST(FsdpClipGradNormSchedule, ANegativeOrNonFiniteNormIsRefused) {
  for (const double bad : {-1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    FsdpRun fsdp;
    fsdp.run = clipped_gpt2(2, "sgd");
    fsdp.run.clip_grad_norm = bad;
    const std::string e = testing::refusal_of(fsdp);
    EXPECT_TRUE(contains(e, "--clip-grad-norm") && contains(e, "expected a finite 2-norm > 0 (or 0: no clipping)"))
        << e;
  }
}

}  // namespace
}  // namespace fsdplab
