// The memory ledger against the analytic memory model (engine/fsdp/memory_model.hpp): on GPT-2
// test-small, every tag's per-rank peak over two steps is within 5% of the formula for W = 1, 2, 4, 8
// under each strategy and precision, and the sharded state (parameters, gradients, optimizer state) on
// a rank at W is the W = 1 state over W up to padding. Dry runs (shapes and memory, no numerics) allocate
// exactly what real runs allocate, which one real run checks, so the sweep stays fast.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "engine/fsdp/memory_model.hpp"
#include "engine/train/baseline_parameters.hpp"
#include "engine/train/expected_memory.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"

namespace fsdplab {
namespace {

constexpr std::int64_t kMicroBatch = 2;  // rows per rank: the global batch grows with W, activations do not

struct RankMemory {
  TagBytes peaks{};
  std::int64_t peak_total = 0;
};

FsdpRun make_run(int world, const FsdpOptions& options, bool dry_run, const std::string& optimizer = "adamw",
                 double momentum = 0) {
  FsdpRun fsdp;
  fsdp.run.model = "gpt2";
  fsdp.run.preset = "test-small";
  fsdp.run.world = world;
  fsdp.run.batch = kMicroBatch * world;
  fsdp.run.steps = 2;  // the second step must peak no higher than the first: nothing accumulates
  fsdp.run.optimizer = optimizer;
  fsdp.run.momentum = momentum;
  fsdp.options = options;
  fsdp.dry_run = dry_run;
  return fsdp;
}

// Each rank's ledger after its last step. on_rank_done runs on the ranks' threads.
std::vector<RankMemory> measure(FsdpRun fsdp) {
  std::vector<RankMemory> ranks(static_cast<std::size_t>(fsdp.run.world));
  std::mutex mutex;
  fsdp.on_rank_done = [&](int rank, Device& device) {
    const std::lock_guard<std::mutex> lock(mutex);
    ranks[static_cast<std::size_t>(rank)] = {device.ledger().peak_by_tag(), device.ledger().peak_total()};
  };
  train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  return ranks;
}

FsdpMemoryInput memory_input(const FsdpRun& fsdp) {
  BuiltModel built = build_model(fsdp.run);
  return fsdp_memory_input(fsdp.run, fsdp.options, built);
}

TagBytes expected(const FsdpRun& fsdp) { return fsdp_memory(memory_input(fsdp)); }

std::int64_t at(const TagBytes& bytes, MemTag tag) { return bytes[static_cast<std::size_t>(tag)]; }

// Every tag within 5% of the formula. A tag the formula leaves at 0 must read exactly 0: no code path of
// the run allocates it, so even one byte there is a buffer the memory model does not know about.
void expect_matches(const TagBytes& formula, const TagBytes& measured, const std::string& what) {
  for (MemTag tag : kAllMemTags) {
    const std::int64_t want = at(formula, tag), got = at(measured, tag);
    if (want == 0) {
      EXPECT_EQ(got, 0) << what << ": " << mem_tag_name(tag) << " measured " << got << " bytes, formula 0";
    } else {
      EXPECT_LE(std::abs(static_cast<double>(got - want)), 0.05 * static_cast<double>(want))
          << what << ": " << mem_tag_name(tag) << " measured " << got << " bytes, formula " << want;
    }
  }
}

FsdpOptions options_of(ShardingStrategy strategy, DType param = DType::f32, DType reduce = DType::f32, int group = 0) {
  FsdpOptions o;
  o.strategy = strategy;
  o.param_dtype = param;
  o.reduce_dtype = reduce;
  o.hybrid_group = group;
  // The formula is SYNC's, where a buffer is freed when its task returns; ASYNC's extra units in flight
  // are bounded in test_fsdp_overlap.cpp.
  return sync_schedule(o);
}

struct Case {
  int world;
  FsdpOptions options;
};

class FsdpMemory : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpMemory, LedgerPeaksMatchTheFormula) {
  const FsdpRun fsdp = make_run(GetParam().world, GetParam().options, true);
  const TagBytes formula = expected(fsdp);
  const std::vector<RankMemory> ranks = measure(fsdp);
  const std::string what = describe(GetParam().options, GetParam().world);
  for (std::size_t r = 0; r < ranks.size(); ++r)
    expect_matches(formula, ranks[r].peaks, what + ", rank " + std::to_string(r));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int w : {1, 2, 4, 8}) {
    for (ShardingStrategy s : {ShardingStrategy::full_shard, ShardingStrategy::shard_grad_op,
                               ShardingStrategy::no_shard, ShardingStrategy::zero1, ShardingStrategy::zero2})
      out.push_back({w, options_of(s)});
    // Mixed precision: bf16 gathers, compute and activations; f32 or bf16 reductions.
    out.push_back({w, options_of(ShardingStrategy::full_shard, DType::bf16, DType::f32)});
    out.push_back({w, options_of(ShardingStrategy::full_shard, DType::bf16, DType::bf16)});
  }
  for (ShardingStrategy s : {ShardingStrategy::shard_grad_op, ShardingStrategy::no_shard, ShardingStrategy::zero1,
                             ShardingStrategy::zero2})
    out.push_back({4, options_of(s, DType::bf16, DType::f32)});
  out.push_back({4, options_of(ShardingStrategy::hybrid_shard, DType::f32, DType::f32, 2)});
  out.push_back({8, options_of(ShardingStrategy::hybrid_shard, DType::bf16, DType::f32, 4)});
  // --embedding-grad rows: the exchange's temporaries (comm_buffer) at the backward's end.
  for (const auto& [w, param] : {std::pair{2, DType::f32}, std::pair{3, DType::bf16}, std::pair{8, DType::f32}}) {
    FsdpOptions rows = options_of(ShardingStrategy::full_shard, param, DType::f32);
    rows.embedding_grad = EmbeddingGradient::rows;
    out.push_back({w, rows});
  }
  // --buffers pool: two buffers of the largest unit, held from the first gather to the run's end.
  for (const auto& [w, param] : {std::pair{2, DType::f32}, std::pair{4, DType::bf16}}) {
    FsdpOptions pool = options_of(ShardingStrategy::full_shard, param, DType::f32);
    pool.buffers = UnshardBuffers::pool;
    out.push_back({w, pool});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Strategies, FsdpMemory, ::testing::ValuesIn(cases()), [](const auto& info) {
  const FsdpOptions& o = info.param.options;
  std::string name = std::string(strategy_name(o.strategy)) + "_W" + std::to_string(info.param.world) + "_" +
                     std::string(dtype_name(o.param_dtype)) + "_reduce_" + std::string(dtype_name(o.reduce_dtype));
  if (o.hybrid_group) name += "_S" + std::to_string(o.hybrid_group);
  if (o.embedding_grad == EmbeddingGradient::rows) name += "_embedding_rows";
  if (o.buffers == UnshardBuffers::pool) name += "_pool";
  return name;
});

// Gradient accumulation: each unit's full gradient is kept from one micro-batch to the next (p·ΣP of grad_full, where
// one unit's is held at a time without it), and the activations are a micro-batch's (the formula once took the
// rank's whole batch: twice the ledger at --accumulate 2, and one unit's gradients).
TEST(FsdpMemory, AccumulationKeepsEveryUnitsGradientAndAMicroBatchsActivations) {
  for (const auto& [strategy, param] :
       {std::pair{ShardingStrategy::full_shard, DType::f32}, std::pair{ShardingStrategy::zero2, DType::bf16},
        std::pair{ShardingStrategy::hybrid_shard, DType::bf16}}) {
    FsdpRun fsdp =
        make_run(4, options_of(strategy, param, DType::f32, strategy == ShardingStrategy::hybrid_shard ? 2 : 0), true);
    fsdp.run.accumulate = 2;
    fsdp.run.batch *= 2;  // kMicroBatch rows a micro-batch
    const TagBytes formula = expected(fsdp);
    const std::string what = describe(fsdp.options, 4) + ", --accumulate 2";
    for (const RankMemory& rank : measure(fsdp)) expect_matches(formula, rank.peaks, what);
    FsdpRun single = make_run(4, fsdp.options, true);
    EXPECT_EQ(at(formula, MemTag::activation), at(expected(single), MemTag::activation)) << what;
  }
}

// --embedding-grad rows on Llama: the gathered ids and rows alone, no position table's sums (its positions are
// rotary); the formula's comm_buffer is then the rows' temporaries, which the ledger must read.
TEST(FsdpMemory, LlamaEmbeddingRowsHoldTheGatheredRowsAlone) {
  for (const auto& [w, param] : {std::pair{2, DType::f32}, std::pair{3, DType::bf16}}) {
    FsdpOptions rows = options_of(ShardingStrategy::full_shard, param, DType::f32);
    rows.embedding_grad = EmbeddingGradient::rows;
    FsdpRun fsdp = make_run(w, rows, true);
    fsdp.run.model = "llama";
    fsdp.run.preset = "test-tiny";
    fsdp.run.seq = 16;
    const FsdpMemoryInput input = memory_input(fsdp);
    const std::int64_t C = build_model(fsdp.run).model->input_embedding_tables().token->shape[1];
    EXPECT_EQ(input.embedding_rows, embedding_rows_staging(w, kMicroBatch * 16, C, 0, param));
    const TagBytes formula = fsdp_memory(input);
    EXPECT_GE(at(formula, MemTag::comm_buffer), input.embedding_rows);
    const std::vector<RankMemory> ranks = measure(fsdp);
    const std::string what = "llama " + describe(rows, w);
    for (std::size_t r = 0; r < ranks.size(); ++r)
      expect_matches(formula, ranks[r].peaks, what + ", rank " + std::to_string(r));
  }
}

TEST(FsdpMemory, OptimizerStatesCountedPerOptimizer) {
  for (const double momentum : {0.9, 0.0}) {
    const FsdpRun fsdp = make_run(4, options_of(ShardingStrategy::full_shard), true, "sgd", momentum);
    const TagBytes formula = expected(fsdp);
    EXPECT_EQ(at(formula, MemTag::optim_state), momentum != 0 ? at(formula, MemTag::param_shard) : 0);
    for (const RankMemory& rank : measure(fsdp))
      expect_matches(formula, rank.peaks, momentum != 0 ? "sgd with momentum" : "sgd");
  }
}

// A dry run skips numerics, never allocations: every rank's ledger reads the same as in a real run.
TEST(FsdpMemory, DryRunAllocatesWhatARealRunAllocates) {
  const FsdpOptions options = options_of(ShardingStrategy::full_shard, DType::bf16, DType::f32);
  const std::vector<RankMemory> real = measure(make_run(2, options, false));
  const std::vector<RankMemory> dry = measure(make_run(2, options, true));
  ASSERT_EQ(real.size(), dry.size());
  for (std::size_t r = 0; r < real.size(); ++r) {
    EXPECT_EQ(real[r].peaks, dry[r].peaks) << "rank " << r;
    EXPECT_EQ(real[r].peak_total, dry[r].peak_total) << "rank " << r;
  }
}

// FSDP's claim: parameters, gradients and optimizer state on a rank at W are the W = 1 amounts over W,
// up to the padding of each unit to a multiple of W (fewer than W elements per unit), while activations
// stay what one rank's micro-batch needs.
TEST(FsdpMemory, ShardedStateScalesAsOneOverW) {
  const auto state = [](const RankMemory& m) {
    return at(m.peaks, MemTag::param_shard) + at(m.peaks, MemTag::grad_shard) + at(m.peaks, MemTag::optim_state);
  };
  const BuiltModel built = build_model(make_run(1, {}, true).run);
  for (ShardingStrategy s : {ShardingStrategy::full_shard, ShardingStrategy::shard_grad_op}) {
    const RankMemory one = measure(make_run(1, options_of(s), true)).front();
    for (int w : {2, 4, 8}) {
      const std::size_t units = plan_unit_sizes(*built.model, built.unit_kinds, options_of(s), w).size();
      // param, grad, exp_avg and exp_avg_sq: 4 f32 buffers per element.
      const std::int64_t padding = 4 * 4 * static_cast<std::int64_t>(units) * (w - 1);
      for (const RankMemory& rank : measure(make_run(w, options_of(s), true))) {
        EXPECT_GE(state(rank) * w, state(one)) << strategy_name(s) << " W=" << w;
        EXPECT_LE(state(rank) * w, state(one) + padding) << strategy_name(s) << " W=" << w;
        EXPECT_EQ(at(rank.peaks, MemTag::activation), at(one.peaks, MemTag::activation))
            << strategy_name(s) << " W=" << w;
      }
    }
  }
}

// ---- the ASYNC bound (fsdp_memory_bound), what the host-memory check before a sim run counts -------------

struct AsyncCase {
  std::string name;
  int world = 2;
  FsdpOptions options;
  std::string link;  // slow-demo: compute runs far ahead of the collectives, which is when ASYNC holds the most
  std::string wrap = "block";
  int accumulate = 1;  // micro-batches a step: between them the host does not wait for the device
  friend void PrintTo(const AsyncCase& c, std::ostream* os) { *os << c.name; }
};

class FsdpMemoryBound : public ::testing::TestWithParam<AsyncCase> {};

// No tag on any rank peaks above the bound, nor the total above the bound's sum: a run the host-memory check
// lets start never holds more than the check counted.
TEST_P(FsdpMemoryBound, NoRankPeaksAboveTheBound) {
  const AsyncCase& c = GetParam();
  FsdpRun fsdp = make_run(c.world, c.options, true);
  fsdp.run.link_preset = c.link;
  fsdp.run.wrap = c.wrap;
  fsdp.run.accumulate = c.accumulate;
  fsdp.run.batch *= c.accumulate;
  const TagBytes bound = fsdp_memory_bound(memory_input(fsdp));
  const std::vector<RankMemory> ranks = measure(fsdp);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (MemTag tag : kAllMemTags)
      EXPECT_LE(at(ranks[r].peaks, tag), at(bound, tag)) << c.name << ", rank " << r << ": " << mem_tag_name(tag);
    EXPECT_LE(ranks[r].peak_total, tag_total(bound)) << c.name << ", rank " << r;
  }
}

std::vector<AsyncCase> async_cases() {
  const auto with = [](ShardingStrategy s, const std::string& prefetch, int max_inflight, DType param = DType::f32,
                       DType reduce = DType::f32) {
    FsdpOptions o;
    o.strategy = s;
    o.prefetch = parse_prefetch(prefetch);
    o.max_inflight = max_inflight;
    o.param_dtype = param;
    o.reduce_dtype = reduce;
    return o;
  };
  std::vector<AsyncCase> out;
  for (const std::string link : {"nvlink4", "slow-demo"}) {
    const auto add = [&](std::string name, int world, FsdpOptions o, const std::string& wrap = "block") {
      out.push_back({name + (link == "nvlink4" ? "_nvlink4" : "_slow_demo"), world, o, link, wrap});
    };
    using enum ShardingStrategy;
    add("full_default", 4, FsdpOptions{});
    add("full_all_limit1", 4, with(full_shard, "all", 1));
    add("full_all_unlimited", 4, with(full_shard, "all", 0));
    add("full_bf16_all", 4, with(full_shard, "all", 2, DType::bf16));
    add("full_bf16_reduce_bf16_unlimited", 4, with(full_shard, "all", 0, DType::bf16, DType::bf16));
    add("grad_op_all", 4, with(shard_grad_op, "all", 2));
    add("grad_op_bf16_unlimited", 2, with(shard_grad_op, "all", 0, DType::bf16));
    FsdpOptions hybrid = with(hybrid_shard, "all", 0, DType::bf16);
    hybrid.hybrid_group = 2;
    add("hybrid_bf16_unlimited", 4, hybrid);
    for (ShardingStrategy s : {no_shard, zero1, zero2}) {
      add(std::string(strategy_name(s)) + "_all", 4, with(s, "all", 2));
      add(std::string(strategy_name(s)) + "_bf16_all", 4, with(s, "all", 2, DType::bf16));
    }
    FsdpOptions pool = with(full_shard, "all", 2);
    pool.buffers = UnshardBuffers::pool;
    add("full_pool_all", 4, pool);
    FsdpOptions offload = with(full_shard, "all", 0, DType::bf16);
    offload.offload = true;
    add("full_bf16_offload_unlimited", 2, offload);
    add("full_nested_limit1", 2, with(full_shard, "all", 1), "nested");
    add("full_nested_unlimited", 2, with(full_shard, "all", 0), "nested");
    FsdpOptions rows = with(full_shard, "all", 0, DType::bf16, DType::bf16);
    rows.embedding_grad = EmbeddingGradient::rows;
    add("full_bf16_reduce_bf16_embedding_rows_unlimited", 2, rows);
    // Gradient accumulation: a unit's buffer from one micro-batch's backward may still be parked when the next
    // micro-batch's forward gathers it again (zero1 in bf16 once held 11 % of param_full above the bound).
    for (const auto& [strategy, param] : {std::pair{full_shard, DType::f32}, std::pair{shard_grad_op, DType::bf16},
                                          std::pair{zero1, DType::bf16}, std::pair{no_shard, DType::bf16}}) {
      add(std::string(strategy_name(strategy)) + "_" + std::string(dtype_name(param)) + "_accumulate2", 2,
          with(strategy, "backward-pre", 1, param));
      out.back().accumulate = 2;
    }
    // ... and with no rate limit, a unit's forward and backward copies of both micro-batches (gpt2 124M at W = 2
    // once held 1.506 GB of param_full against a bound of 0.838).
    add("full_accumulate2_unlimited", 2, with(full_shard, "forward", 0));
    out.back().accumulate = 2;
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Async, FsdpMemoryBound, ::testing::ValuesIn(async_cases()),
                         [](const auto& info) { return info.param.name; });

// The bound is not the formula in disguise: ASYNC without a rate limit on a slow link holds more than SYNC's
// formula, and the bound counts it.
TEST(FsdpMemoryBound, AsyncHoldsMoreThanTheSyncFormula) {
  FsdpOptions options;
  options.max_inflight = 0;
  options.prefetch = parse_prefetch("all");
  FsdpRun fsdp = make_run(4, options, true);
  fsdp.run.link_preset = "slow-demo";
  const TagBytes formula = fsdp_memory(memory_input(fsdp));
  const RankMemory rank = measure(fsdp).front();
  EXPECT_GT(rank.peak_total, tag_total(formula));
  EXPECT_GE(tag_total(fsdp_memory_bound(memory_input(fsdp))), rank.peak_total);
}

// The single-rank baseline's ledger, read from its memory counters (train_baseline keeps its device).
class PeakSink final : public TraceSink {
 public:
  void on_event(const TraceEvent&) override {}
  void on_counter(const CounterSample& s) override {
    std::int64_t& peak = peaks[static_cast<std::size_t>(s.tag)];
    peak = std::max(peak, s.tag_live);
  }
  TagBytes peaks{};
};

// The baseline's flat buffers' elements: every parameter starts at a multiple of the alignment
// (baseline_parameters.hpp).
std::int64_t flat_numel(Module& model) {
  constexpr std::int64_t align = BaselineParameters::kAlign;
  std::int64_t flat = 0;
  for (const Parameter* p : model.parameters()) flat += (p->numel() + align - 1) / align * align;
  return flat;
}

TEST(FsdpMemory, BaselineMatchesItsFormulaAndNoShardAtOneRank) {
  const RunConfig run = make_run(1, {}, false).run;
  PeakSink sink;
  train_baseline(run, PresetCatalog::builtin(), nullptr, &sink);
  const BuiltModel built = build_model(run);
  const TagBytes formula = baseline_memory(*built.model, optimizer_state_count(run.optimizer_spec()),
                                           model_memory(*built.model, run.batch, built.batch.seq, DType::f32),
                                           DType::f32);
  expect_matches(formula, sink.peaks, "baseline");
  // Exactly: one flat buffer each for the values and the gradients.
  EXPECT_EQ(at(sink.peaks, MemTag::param_shard), 4 * flat_numel(*built.model));
  EXPECT_EQ(at(sink.peaks, MemTag::grad_shard), 4 * flat_numel(*built.model));
  // What the bench shows as the baseline: FSDP at W = 1 without sharding holds the same, up to the
  // FlatParameter's alignment gaps and the 4 bytes of the loss's mean over ranks.
  const TagBytes no_shard = expected(make_run(1, options_of(ShardingStrategy::no_shard), true));
  for (MemTag tag : kAllMemTags)
    EXPECT_NEAR(static_cast<double>(at(no_shard, tag)), static_cast<double>(at(formula, tag)),
                0.001 * static_cast<double>(at(formula, tag)) + 4)
        << mem_tag_name(tag);
}

// The baseline in bf16 mixed precision (baseline_parameters.hpp) holds what the f32 baseline holds, f32
// masters, gradients and optimizer state under the same tags, plus a bf16 copy of every parameter under
// param_full and of every gradient under grad_full (FSDP's tags for the unsharded buffers), each exactly
// 2 bytes an element (up to the flat buffers' alignment gaps); its activations are counted in bf16.
TEST(FsdpMemory, MixedPrecisionBaselineHoldsBf16CopiesUnderTheFullTags) {
  RunConfig run = make_run(1, {}, false).run;
  run.baseline_precision = DType::bf16;
  PeakSink sink;
  train_baseline(run, PresetCatalog::builtin(), nullptr, &sink);
  const BuiltModel built = build_model(run);
  const TagBytes formula = baseline_memory(*built.model, optimizer_state_count(run.optimizer_spec()),
                                           model_memory(*built.model, run.batch, built.batch.seq, DType::bf16),
                                           DType::bf16);
  expect_matches(formula, sink.peaks, "bf16 baseline");
  // Exactly: one flat buffer each, the copies 2 bytes an element.
  const std::int64_t flat = flat_numel(*built.model);
  EXPECT_EQ(at(sink.peaks, MemTag::param_full), 2 * flat);
  EXPECT_EQ(at(sink.peaks, MemTag::grad_full), 2 * flat);
  EXPECT_EQ(at(sink.peaks, MemTag::param_shard), 4 * flat);
  EXPECT_EQ(at(sink.peaks, MemTag::grad_shard), 4 * flat);
}

}  // namespace
}  // namespace fsdplab
