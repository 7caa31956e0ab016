// Sections 2.3 to 2.5 of the writeup, measured: what reshard_after_forward costs and saves (FULL_SHARD
// against SHARD_GRAD_OP), reduce-scatter against all-reduce for the gradients (FULL_SHARD against NO_SHARD,
// i.e. DDP), and the optimizer state before and after sharding (the baseline, ZeRO-1 and FULL_SHARD).
// Memory is `fsdplab bench --what memory`'s measurement (app/bench_memory.hpp) of the W = 4 row of each
// strategy; the collectives are rank 0's in the trace of the same SYNC dry run of one step.
#include <map>
#include <string>
#include <vector>

#include "app/bench_memory.hpp"
#include "app/report/markdown_table.hpp"
#include "app/report/report_context.hpp"
#include "engine/runtime/cost_model.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/fsdp_trainer.hpp"

namespace fsdplab::app {
namespace {

constexpr int kTradeoffWorld = 4;

struct Volume {
  int count = 0;
  std::int64_t bytes = 0;  // full buffers
  double sent = 0;         // what each rank sends in a ring: ring_traffic_factor x bytes
};

struct StrategyCost {
  ShardingStrategy strategy;
  MemoryTable memory;                 // baseline and W = kTradeoffWorld
  std::map<OpCategory, Volume> comm;  // rank 0, one step; the loss's all-reduce left out
};

const MemoryRow& at_world(const MemoryTable& t) { return t.rows.back(); }

StrategyCost measure(const Gpt2Scale& scale, ShardingStrategy strategy) {
  StrategyCost m{strategy, {}, {}};
  FsdpChoice choice = parse_fsdp_flags(FsdpFlags{});
  choice.options.strategy = strategy;
  const MemoryBenchOptions bench{scale.preset, scale.micro_batch, scale.seq};
  m.memory = measure_memory_table(bench, choice, {kTradeoffWorld});

  FsdpRun fsdp;
  fsdp.run.model = "gpt2";
  fsdp.run.preset = scale.preset;
  fsdp.run.world = kTradeoffWorld;
  fsdp.run.batch = scale.micro_batch * kTradeoffWorld;
  fsdp.run.seq = scale.seq;
  fsdp.run.steps = 1;
  fsdp.options = sync_schedule(m.memory.fsdp);
  fsdp.dry_run = true;
  std::vector<TraceRecorder> recorders(kTradeoffWorld);
  for (TraceRecorder& r : recorders) fsdp.sinks.push_back(&r);
  train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  for (const TraceEvent& e : recorders.front().data().events) {
    if (!is_communication(e.category) || e.lane == Lane::host) continue;
    if (e.category == OpCategory::all_reduce && e.unit < 0) continue;  // the training loop's loss, 4 bytes
    Volume& v = m.comm[e.category];
    ++v.count;
    v.bytes += e.bytes;
    v.sent += ring_traffic_factor(e.category, kTradeoffWorld) * static_cast<double>(e.bytes);
  }
  return m;
}

std::string bench_command(const Gpt2Scale& s, ShardingStrategy strategy) {
  return "fsdplab bench --what memory " + s.bench_flags() + " --strategy " + std::string(strategy_name(strategy));
}

std::string trace_command(const Gpt2Scale& s, ShardingStrategy strategy) {
  return "fsdplab run --dry-run --device sim --model gpt2 --preset " + s.preset + " --world " +
         std::to_string(kTradeoffWorld) + " --batch " + std::to_string(s.micro_batch * kTradeoffWorld) + " --seq " +
         std::to_string(s.seq) + " --steps 1 --mode sync --strategy " + std::string(strategy_name(strategy)) +
         " --trace " + std::string(strategy_name(strategy)) + ".json";
}

}  // namespace

std::string report_tradeoffs(ReportContext& ctx) {
  const Gpt2Scale scale = gpt2_scale(ctx);
  const StrategyCost full = measure(scale, ShardingStrategy::full_shard);
  const StrategyCost grad_op = measure(scale, ShardingStrategy::shard_grad_op);
  const StrategyCost no_shard = measure(scale, ShardingStrategy::no_shard);
  const StrategyCost zero1 = measure(scale, ShardingStrategy::zero1);
  const MemoryTable& t = full.memory;
  const ByteUnit byte_unit = t.unit();
  const char* unit = byte_unit.name();
  const auto size = [byte_unit](std::int64_t b) { return format("%.3f", byte_unit.of(b)); };
  const std::int64_t n = t.rows.front().parameters;
  const auto comm = [](const StrategyCost& m, OpCategory c) {
    const auto it = m.comm.find(c);
    return it == m.comm.end() ? Volume{} : it->second;
  };

  std::string md = "## 2. Implementation Details: the trade-offs, measured\n\n";
  md += format(
      "GPT-2 '%s' (%.2fM parameters), %lld x %lld tokens per rank, W = %d, AdamW in f32. Memory: each tag's "
      "peak on the fullest rank, the W = %d row of `fsdplab bench --what memory` for the strategy (dry runs of "
      "one SYNC step on the sim device). Collectives: rank 0's in one step of the same dry run's trace, the "
      "training loop's 4-byte loss all-reduce left out; bytes are the full buffers, \"sent per rank\" is what a "
      "ring makes each rank send: (W - 1) / W of it for all-gather and reduce-scatter, 2 (W - 1) / W for "
      "all-reduce. %s.\n\n",
      scale.preset.c_str(), static_cast<double>(n) / 1e6, scale.micro_batch, scale.seq, kTradeoffWorld, kTradeoffWorld,
      byte_unit.definition().c_str());

  // ---- 2.3 ------------------------------------------------------------------------------------------
  md += "### 2.3 Task 3: Forward Pass - reshard_after_forward=True vs False\n\n";
  md += command_block(
      {bench_command(scale, ShardingStrategy::full_shard), bench_command(scale, ShardingStrategy::shard_grad_op),
       trace_command(scale, ShardingStrategy::full_shard), trace_command(scale, ShardingStrategy::shard_grad_op)});
  md += "\n";
  {
    MarkdownTable table({"Strategy", "reshard_after_forward", std::string("param_full peak (") + unit + ")",
                         std::string("grad_full peak (") + unit + ")", std::string("Peak total (") + unit + ")",
                         "All-gathers / step", std::string("All-gather sent / rank (") + unit + ")",
                         "Reduce-scatters / step"});
    for (const StrategyCost* m : {&full, &grad_op}) {
      const MemoryRow& r = at_world(m->memory);
      const Volume ag = comm(*m, OpCategory::all_gather);
      table.add_row({std::string(strategy_name(m->strategy)),
                     m->strategy == ShardingStrategy::full_shard ? "True" : "False",
                     size(tag_bytes(r.measured, MemTag::param_full)), size(tag_bytes(r.measured, MemTag::grad_full)),
                     size(r.peak_total), std::to_string(ag.count), size(static_cast<std::int64_t>(ag.sent)),
                     std::to_string(comm(*m, OpCategory::reduce_scatter).count)});
    }
    md += table.str();
  }
  md +=
      "\n**Trade-off:** resharding after forward frees each Block's gathered parameters as soon as its forward is "
      "done, so only the root and one Block are gathered at a time (param_full), at the price of gathering every Block "
      "again in backward: twice the all-gathers. Without it (grad_op, ZeRO-2) every unit stays gathered from its "
      "forward to its backward: one all-gather per unit a step, and memory for the whole unsharded model in the "
      "parameter dtype.\n\n";

  // ---- 2.4 ------------------------------------------------------------------------------------------
  md += "### 2.4 Task 4: Backward Pass - why reduce-scatter instead of all-reduce?\n\n";
  md += command_block(
      {bench_command(scale, ShardingStrategy::no_shard), bench_command(scale, ShardingStrategy::full_shard),
       trace_command(scale, ShardingStrategy::no_shard), trace_command(scale, ShardingStrategy::full_shard)});
  md += "\n";
  {
    MarkdownTable table({"Strategy", "Gradient reduction", std::string("Reduced gradient, grad_shard (") + unit + ")",
                         "Formula", std::string("Unsharded gradients, grad_full (") + unit + ")", "Reductions / step",
                         std::string("Reduction sent / rank (") + unit + ")",
                         std::string("All collectives sent / rank (") + unit + ")"});
    for (const StrategyCost* m : {&no_shard, &full}) {
      const MemoryRow& r = at_world(m->memory);
      const bool reduce_scatter = m->strategy != ShardingStrategy::no_shard;
      const Volume red = comm(*m, reduce_scatter ? OpCategory::reduce_scatter : OpCategory::all_reduce);
      double all = 0;
      for (const auto& [c, v] : m->comm) all += v.sent;
      table.add_row({std::string(strategy_name(m->strategy)), reduce_scatter ? "reduce-scatter" : "all-reduce",
                     size(tag_bytes(r.measured, MemTag::grad_shard)), reduce_scatter ? "4 N / W" : "4 N",
                     size(tag_bytes(r.measured, MemTag::grad_full)), std::to_string(red.count),
                     size(static_cast<std::int64_t>(red.sent)), size(static_cast<std::int64_t>(all))});
    }
    md += table.str();
  }
  md += format(
      "\nN = %.2fM parameters, so 4 N = %s %s. **Memory:** all-reduce leaves every rank the whole averaged "
      "gradient (N values), reduce-scatter only the shard its optimizer updates (N / W). **Volume:** a ring "
      "all-reduce is a reduce-scatter followed by an all-gather, 2 (W - 1) / W N per rank against (W - 1) / W N; "
      "FSDP spends the saving on gathering the parameters (forward and backward), so its total is 3 (W - 1) / W "
      "N against DDP's 2 (W - 1) / W N, and in exchange nothing is replicated.\n\n",
      static_cast<double>(n) / 1e6, size(4 * n).c_str(), unit);

  // ---- 2.5 ------------------------------------------------------------------------------------------
  md += "### 2.5 Task 5: Sharded Optimizer - memory savings\n\n";
  md += command_block(
      {bench_command(scale, ShardingStrategy::full_shard), bench_command(scale, ShardingStrategy::zero1)});
  md += "\n";
  {
    MarkdownTable table({"Configuration", std::string("optim_state measured (") + unit + ")",
                         std::string("Formula (") + unit + ")", "Adam: 2 states x 4 bytes x N / S",
                         std::string("Params + grads, every copy (") + unit + ")"});
    // param_shard + param_full + grad_shard + grad_full: ZeRO-1 keeps whole parameters and gradients as the
    // replicas param_full and grad_full, FULL_SHARD shards and one unit at a time gathered.
    const auto params_and_grads = [](const MemoryRow& r) {
      return tag_bytes(r.measured, MemTag::param_shard) + tag_bytes(r.measured, MemTag::param_full) +
             tag_bytes(r.measured, MemTag::grad_shard) + tag_bytes(r.measured, MemTag::grad_full);
    };
    const MemoryRow& base = t.rows.front();
    table.add_row({"Before sharding: baseline (1 GPU)", size(tag_bytes(base.measured, MemTag::optim_state)),
                   size(tag_bytes(base.formula, MemTag::optim_state)), "8 N", size(params_and_grads(base))});
    for (const StrategyCost* m : {&zero1, &full}) {
      const MemoryRow& r = at_world(m->memory);
      table.add_row({std::string("After: ") + std::string(strategy_name(m->strategy)) + " (" +
                         std::to_string(kTradeoffWorld) + " GPUs)",
                     size(tag_bytes(r.measured, MemTag::optim_state)), size(tag_bytes(r.formula, MemTag::optim_state)),
                     "8 N / " + std::to_string(kTradeoffWorld), size(params_and_grads(r))});
    }
    md += table.str();
  }
  md += format(
      "\nFor Adam with N parameters: before, 2 x 4 N = %s %s of exp_avg and exp_avg_sq on every rank; after "
      "sharding over W = %d, 8 N / W = %s %s (plus the padding of each FlatParameter to a multiple of W). "
      "ZeRO-1 shards only the optimizer state (parameters and gradients stay whole on every rank, the updated "
      "shards all-gathered after the step: the last column, the peaks of param_shard + param_full + grad_shard "
      "+ grad_full, stays the baseline's); FULL_SHARD shards all three.\n\n",
      size(8 * n).c_str(), unit, kTradeoffWorld, size(8 * n / kTradeoffWorld).c_str(), unit);
  md += "### 2.6 Task 6: Prefetching\n\nThe speedup from prefetching is measured in 4.3 (SYNC against ASYNC), with "
        "the dashboard's timeline of both.\n\n";
  return md;
}

}  // namespace fsdplab::app
