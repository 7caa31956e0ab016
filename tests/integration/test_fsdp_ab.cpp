// A/B runs (FsdpRun::ab_block = k): the steps take turns, k at a time, between SYNC (sync_schedule of
// the options) and ASYNC (the options, prefetch included), starting with options.mode. gpt2 test-tiny,
// W = 2, 8 steps, k = 3, SYNC first (S S S A A A S S):
//   numerics  the modes are bit-identical in this engine, so the A/B losses equal plain SYNC's and ASYNC's
//   schedule  read from the op log's virtual times: steps 0-2 and 6-7 overlap no collective with compute
//             (SYNC), steps 3-5 do (ASYNC's backward prefetch); each SYNC step takes the virtual time the
//             same step takes in a plain SYNC run. ASYNC's next-step prefetch (the next step's root
//             gathered in this step's optimizer step) stops at the blocks' edges: the first ASYNC step
//             gathers its root itself, the last prepares nothing for the SYNC step after it, so only an
//             ASYNC step inside a block (step 4) takes a plain ASYNC step's time
//   memory    the buffers an ASYNC step parks are given back when SYNC comes: a SYNC step after ASYNC
//             holds the gathered memory of a plain SYNC run's step, no ASYNC leftovers
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/train/fsdp_trainer.hpp"
#include "fsdp_runs.hpp"

namespace fsdplab {
namespace {

constexpr int kSteps = 8;
constexpr int kBlock = 3;  // a block of three has an ASYNC step inside it, neither block's first nor its last

struct Schedule {
  std::vector<StepReport> steps;
  std::vector<std::vector<OpRecord>> ops;  // by rank
};

// A plain run of `options`, or an A/B run of them when ab_block > 0.
Schedule run_schedule(const FsdpOptions& options, int ab_block) {
  FsdpRun fsdp;
  fsdp.run = testing::gpt2_run(2, 4, 16, kSteps);
  fsdp.options = options;
  fsdp.ab_block = ab_block;
  fsdp.keep_op_log = true;
  Schedule out;
  out.ops.resize(2);
  std::mutex mutex;
  fsdp.on_rank_done = [&](int r, Device& device) {
    const std::lock_guard lock(mutex);
    out.ops[static_cast<std::size_t>(r)] = device.ops();
  };
  out.steps = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  return out;
}

// Whether `step`'s forward gathers the root (unit 0) itself.
bool gathers_root_in_forward(const std::vector<OpRecord>& ops, int step) {
  return std::any_of(ops.begin(), ops.end(), [&](const OpRecord& op) {
    return op.category == OpCategory::all_gather && op.labels.step == step && op.labels.unit == 0 &&
           op.labels.phase == "forward";
  });
}

// Whether `step`'s optimizer step gathers the next step's first unit (the next-step prefetch).
bool prepares_next_step(const std::vector<OpRecord>& ops, int step) {
  return std::any_of(ops.begin(), ops.end(), [&](const OpRecord& op) {
    return op.category == OpCategory::all_gather && op.labels.step == step && op.labels.phase == "optimizer";
  });
}

// Collectives of `step` that run while some compute op runs, on the device clock.
int overlapping_collectives(const std::vector<OpRecord>& ops, int step) {
  int n = 0;
  for (const OpRecord& op : ops) {
    if (!is_communication(op.category) || op.labels.step != step) continue;
    n += std::any_of(ops.begin(), ops.end(), [&](const OpRecord& c) {
      return c.category == OpCategory::compute && op.begin < c.end && c.begin < op.end;
    });
  }
  return n;
}

TEST(FsdpAB, AbModeAlternatesBlocksStartingWithTheFirst) {
  EXPECT_EQ(ab_mode(OverlapMode::sync, 0, 5), OverlapMode::sync);
  constexpr OverlapMode S = OverlapMode::sync, A = OverlapMode::async;
  const std::vector<OverlapMode> expected = {S, S, S, A, A, A, S, S};
  for (int step = 0; step < kSteps; ++step)
    EXPECT_EQ(ab_mode(OverlapMode::sync, kBlock, step), expected[static_cast<std::size_t>(step)]);
  EXPECT_EQ(ab_mode(OverlapMode::async, 2, 0), OverlapMode::async);
  EXPECT_EQ(ab_mode(OverlapMode::async, 2, 2), OverlapMode::sync);
  EXPECT_EQ(ab_mode(OverlapMode::async, 2, 4), OverlapMode::async);
}

TEST(FsdpAB, AlternatesSyncAndAsyncWithTheSameLosses) {
  const FsdpOptions async_options;  // PyTorch's defaults: backward prefetch in pre-backward
  FsdpOptions sync_first = async_options;
  sync_first.mode = OverlapMode::sync;  // the ASYNC blocks keep the prefetch
  const Schedule sync = run_schedule(sync_schedule(async_options), 0);
  const Schedule async = run_schedule(async_options, 0);
  const Schedule ab = run_schedule(sync_first, kBlock);
  const std::vector<double> losses = testing::losses_of(ab.steps);
  ASSERT_EQ(losses.size(), static_cast<std::size_t>(kSteps));
  EXPECT_EQ(losses, testing::losses_of(sync.steps));
  EXPECT_EQ(losses, testing::losses_of(async.steps));

  const auto sync_at = [](int step) {
    return step >= 0 && step < kSteps && ab_mode(OverlapMode::sync, kBlock, step) == OverlapMode::sync;
  };
  int async_steps_timed = 0;
  for (int step = 0; step < kSteps; ++step) {
    const bool is_sync = sync_at(step);
    const bool first_async = !is_sync && (step == 0 || sync_at(step - 1));
    const bool last_async = !is_sync && (step + 1 == kSteps || sync_at(step + 1));
    const Schedule& plain = is_sync ? sync : async;
    for (std::size_t r = 0; r < 2; ++r) {
      const int overlapping = overlapping_collectives(ab.ops[r], step);
      if (is_sync) {
        EXPECT_EQ(overlapping, 0) << "SYNC step " << step << " rank " << r;
        EXPECT_EQ(overlapping, overlapping_collectives(plain.ops[r], step)) << "step " << step << " rank " << r;
      } else {
        EXPECT_GT(overlapping, 0) << "ASYNC step " << step << " rank " << r;
      }
      EXPECT_EQ(gathers_root_in_forward(ab.ops[r], step), is_sync || first_async) << "step " << step << " rank " << r;
      EXPECT_EQ(prepares_next_step(ab.ops[r], step), !is_sync && !last_async) << "step " << step << " rank " << r;
    }
    const auto duration = [](const StepReport& s) { return s.end - s.begin; };
    if (is_sync || (!first_async && !last_async)) {
      EXPECT_EQ(duration(ab.steps[static_cast<std::size_t>(step)]),
                duration(plain.steps[static_cast<std::size_t>(step)]))
          << "step " << step << (is_sync ? " (SYNC)" : " (ASYNC)");
      async_steps_timed += is_sync ? 0 : 1;
    }
  }
  EXPECT_EQ(async_steps_timed, 1) << "the ASYNC step inside its block, step 4, is timed against plain ASYNC's";
}

// A rank's gathered parameters and gradients live together over time, from the ledger's counter samples.
class GatheredBytes final : public TraceSink {
 public:
  void on_event(const TraceEvent&) override {}
  void on_counter(const CounterSample& sample) override {
    if (sample.tag == MemTag::param_full) params_ = sample.tag_live;
    if (sample.tag == MemTag::grad_full) grads_ = sample.tag_live;
    samples_.push_back({sample.time, params_ + grads_});
  }
  // The peak over [begin, end] of the host clock.
  std::int64_t peak(SimTime begin, SimTime end) const {
    std::int64_t peak = 0;
    for (const auto& [time, live] : samples_)
      if (time >= begin && time <= end) peak = std::max(peak, live);
    return peak;
  }

 private:
  std::int64_t params_ = 0, grads_ = 0;
  std::vector<std::pair<SimTime, std::int64_t>> samples_;
};

// Rank 0's peak of gathered memory in each step of `fsdp`.
std::vector<std::int64_t> gathered_peaks(FsdpRun fsdp) {
  GatheredBytes rank0, rank1;
  fsdp.sinks = {&rank0, &rank1};
  std::vector<std::int64_t> peaks;
  for (const StepReport& s : train_fsdp(fsdp, PresetCatalog::builtin(), nullptr))
    peaks.push_back(rank0.peak(s.begin, s.end));
  return peaks;
}

TEST(FsdpAB, SyncStepsAfterAsyncHoldNoParkedBuffers) {
  FsdpRun fsdp;
  fsdp.run = testing::gpt2_run(2, 4, 16, kSteps);
  fsdp.ab_block = kBlock;  // ASYNC x 3, SYNC x 3, ASYNC x 2
  const std::vector<std::int64_t> ab = gathered_peaks(fsdp);
  fsdp.ab_block = 0;
  fsdp.options = sync_schedule(fsdp.options);
  const std::vector<std::int64_t> sync = gathered_peaks(fsdp);
  ASSERT_EQ(ab.size(), static_cast<std::size_t>(kSteps));
  for (int step = kBlock; step < 2 * kBlock; ++step)
    EXPECT_EQ(ab[static_cast<std::size_t>(step)], sync[static_cast<std::size_t>(step)]) << "SYNC step " << step;
}

}  // namespace
}  // namespace fsdplab
