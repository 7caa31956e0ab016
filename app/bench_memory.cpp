// `fsdplab bench --what memory` — the writeup's memory table (section 4.1): per-rank peak memory of the
// baseline and of FSDP at W = 2, 4, 8 with the per-rank micro-batch fixed, and each tag's peak as the memory
// ledger measured it beside the analytic model (engine/fsdp/memory_model.hpp). Dry runs on the sim device:
// bytes, not wall-clock times, and the same on every machine.
#include "app/bench_memory.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "engine/fsdp/memory_model.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/runtime/wall_clock.hpp"
#include "engine/train/expected_memory.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "labs/student_tasks.hpp"

namespace fsdplab::app {
namespace {

using Clock = std::chrono::steady_clock;

MemoryRow measure_memory(std::string label, const MemoryBenchOptions& bench, int world, const FsdpOptions& options,
                         const ImplChoice& impl) {
  FsdpRun fsdp;
  fsdp.tasks = tasks_for(impl);
  fsdp.run.model = "gpt2";
  fsdp.run.preset = bench.preset;
  fsdp.run.world = world;
  fsdp.run.batch = bench.micro_batch * world;
  fsdp.run.seq = bench.seq;
  fsdp.run.steps = 1;  // nothing accumulates across steps (tests/integration/test_fsdp_memory.cpp runs two)
  // SYNC: every buffer is freed when its task returns, the schedule the formula describes (ASYNC adds up
  // to --max-inflight gathered units and buffers parked until their last user is done).
  fsdp.options = sync_schedule(options);
  fsdp.dry_run = true;
  MemoryRow row{std::move(label), world};
  std::mutex mutex;
  fsdp.on_rank_done = [&](int, Device& device) {
    const std::lock_guard<std::mutex> lock(mutex);
    for (MemTag tag : kAllMemTags) {
      std::int64_t& peak = row.measured[static_cast<std::size_t>(tag)];
      peak = std::max(peak, device.ledger().peak(tag));
    }
    row.peak_total = std::max(row.peak_total, device.ledger().peak_total());
  };
  train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);

  BuiltModel built = build_model(fsdp.run);
  row.parameters = built.model->parameter_count();
  row.formula = fsdp_memory(fsdp_memory_input(fsdp.run, options, built));
  return row;
}

}  // namespace

std::int64_t tag_bytes(const TagBytes& bytes, MemTag tag) { return bytes[static_cast<std::size_t>(tag)]; }

std::string_view breakdown_label(MemTag tag) {
  constexpr std::array<std::string_view, kMemTagCount> labels = {"Parameters: f32 shard", "Parameters: gathered units",
                                                                 "Gradients: f32 shard",  "Gradients: unsharded units",
                                                                 "Optimizer states",      "Activations",
                                                                 "Collective staging",    "Workspace"};
  return labels[static_cast<std::size_t>(tag)];
}
std::int64_t sharded_state(const TagBytes& bytes) {
  return tag_bytes(bytes, MemTag::param_shard) + tag_bytes(bytes, MemTag::grad_shard) +
         tag_bytes(bytes, MemTag::optim_state);
}

MemoryTable measure_memory_table(const MemoryBenchOptions& bench, const FsdpChoice& choice,
                                 std::initializer_list<int> worlds) {
  if (choice.options.strategy == ShardingStrategy::hybrid_shard) {
    // One group size for every W of the table: it must divide them all, so name the table's W and the sizes that do.
    int common = 0;
    std::string measured, sizes;
    for (int w : worlds) {
      common = std::gcd(common, w);
      measured += (measured.empty() ? "" : ", ") + std::to_string(w);
    }
    for (int s = 1; s <= common; ++s)
      if (common % s == 0) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
    const int group = choice.options.hybrid_group;
    check(group >= 1 && common % group == 0, "--strategy hybrid: the memory table measures W = ", measured,
          ", and --hybrid-group S (the ranks a unit is sharded over) must divide each: S = ", sizes, "; got ",
          group >= 1 ? "--hybrid-group " + std::to_string(group) : std::string("no --hybrid-group"));
  }
  MemoryTable table;
  FsdpOptions& fsdp = table.fsdp;
  fsdp.strategy = choice.options.strategy;
  fsdp.hybrid_group = choice.options.hybrid_group;
  fsdp.param_dtype = choice.options.param_dtype;
  fsdp.reduce_dtype = choice.options.reduce_dtype;
  fsdp.embedding_grad = choice.options.embedding_grad;
  FsdpOptions baseline = fsdp;
  baseline.strategy = ShardingStrategy::no_shard;
  baseline.hybrid_group = 0;
  baseline.embedding_grad = EmbeddingGradient::table;
  table.rows.push_back(measure_memory("Baseline (1 GPU)", bench, 1, baseline, choice.impl));
  for (int w : worlds)
    table.rows.push_back(measure_memory("FSDP (" + std::to_string(w) + " GPUs)", bench, w, fsdp, choice.impl));
  return table;
}

// `choice.options`: the strategy and precision of the FSDP rows (the baseline keeps the precision).
void bench_memory(const MemoryBenchOptions& bench, const FsdpChoice& choice) {
  const auto start = Clock::now();
  const MemoryTable table = measure_memory_table(bench, choice);
  const FsdpOptions& fsdp = table.fsdp;
  const std::vector<MemoryRow>& rows = table.rows;

  const ByteUnit unit = table.unit();
  const auto size = [unit](std::int64_t bytes) { return unit.of(bytes); };

  std::printf(
      "fsdplab bench --what memory: gpt2 '%s', strategy %s, %s parameters and compute, %s gradient "
      "reduction%s, AdamW; impl: %s\n",
      bench.preset.c_str(), std::string(strategy_name(fsdp.strategy)).c_str(),
      std::string(dtype_name(fsdp.param_dtype)).c_str(), std::string(dtype_name(fsdp.reduce_dtype)).c_str(),
      fsdp.embedding_grad == EmbeddingGradient::rows ? ", embedding gradient as rows" : "",
      impl_name(choice.impl).c_str());
  std::printf(
      "Per rank: micro-batch %lld x seq %lld (global batch = W x %lld). Dry runs of one step on the sim device\n"
      "(shapes and memory, no numerics). Baseline = FSDP at W = 1 with no_shard in the same precision: whole\n"
      "parameters, gradients and optimizer state on one rank, as the single-rank trainer holds them (the\n"
      "trainer itself runs real numerics only). %s.\n\n",
      static_cast<long long>(bench.micro_batch), static_cast<long long>(bench.seq),
      static_cast<long long>(bench.micro_batch), unit.definition().c_str());
  std::printf(
      "| Configuration    | Parameters | Memory (%s) | Reduction | Params + grads + optimizer (%s) "
      "| Reduction |\n",
      unit.name(), unit.name());
  std::printf("|------------------|------------|-------------|-----------|---------------------------------"
              "|-----------|\n");
  const MemoryRow& base = rows.front();
  for (const MemoryRow& row : rows) {
    char total_reduction[16] = "-", state_reduction[16] = "-";
    if (&row != &base) {
      std::snprintf(total_reduction, sizeof total_reduction, "%.2fx",
                    static_cast<double>(base.peak_total) / static_cast<double>(row.peak_total));
      std::snprintf(state_reduction, sizeof state_reduction, "%.2fx",
                    static_cast<double>(sharded_state(base.measured)) /
                        static_cast<double>(sharded_state(row.measured)));
    }
    std::printf("| %-16s | %9.2fM | %11.3f | %-9s | %31.3f | %-9s |\n", row.label.c_str(),
                static_cast<double>(row.parameters) / 1e6, size(row.peak_total), total_reduction,
                size(sharded_state(row.measured)), state_reduction);
  }
  std::printf(
      "Memory: the peak of the total on the fullest rank. Params + grads + optimizer: param_shard + grad_shard +\n"
      "optim_state, what FSDP shards.\n");

  // The writeup's breakdown: per configuration, each tag's peak as measured and by the formula.
  std::printf("\nPer-rank peak by tag, %s: measured by the ledger / formula (engine/fsdp/memory_model.hpp)\n",
              unit.name());
  std::printf("%-39s", "");
  for (const MemoryRow& row : rows) std::printf(" %18s", row.label.c_str());
  std::printf("\n");
  double worst = 0;
  for (MemTag tag : kAllMemTags) {
    std::printf("%-12s %-26s", std::string(mem_tag_name(tag)).c_str(), std::string(breakdown_label(tag)).c_str());
    for (const MemoryRow& row : rows) {
      const std::int64_t got = tag_bytes(row.measured, tag), want = tag_bytes(row.formula, tag);
      std::printf("  %7.3f / %7.3f", size(got), size(want));
      const double error = want == 0 ? (got == 0 ? 0.0 : 1.0)
                                     : std::abs(static_cast<double>(got - want)) / static_cast<double>(want);
      worst = std::max(worst, error);
    }
    std::printf("\n");
  }
  std::printf("%-39s", "sum of the tags' peaks");
  for (const MemoryRow& row : rows) {
    std::int64_t measured = 0, formula = 0;
    for (MemTag tag : kAllMemTags) measured += tag_bytes(row.measured, tag), formula += tag_bytes(row.formula, tag);
    std::printf("  %7.3f / %7.3f", size(measured), size(formula));
  }
  std::printf("\n%-39s", "peak of the total (one moment)");
  for (const MemoryRow& row : rows)
    std::printf("  %7.3f%s", size(row.peak_total), &row == &rows.back() ? "" : "          ");
  std::printf(
      "\n\nLargest |measured - formula| / formula over the tags of every configuration: %.2f%%.\n"
      "Tags peak at different moments (activations at the start of backward, a Block's gathered parameters and\n"
      "gradients inside its backward), so the total peaks below the sum of the tags' peaks. Wall time %.1f s.\n",
      100 * worst, seconds_since(start));
}

}  // namespace fsdplab::app
