// Section 4.4 of the writeup: weak scaling, the model growing with the number of GPUs. fsdplab's deep
// residual MLP (--model mlp) takes its depth from the command line, so depth = k x W keeps the parameters per
// rank constant; each rank keeps its own rows. Dry runs on the sim device (shapes, time and memory): the
// memory ledger's peaks on rank 0 and the second of three steps' virtual time, as `fsdplab run --dry-run`
// prints them: the first step records the forward order and the last prepares no next step (its next-step
// prefetch gathers nothing), so the middle one is the step every later step of a training repeats.
#include <algorithm>
#include <string>
#include <vector>

#include "app/byte_unit.hpp"
#include "app/fsdp_cli_options.hpp"
#include "app/report/markdown_table.hpp"
#include "app/report/report_context.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/trace/trace_metrics.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"

namespace fsdplab::app {
namespace {

struct Point {
  int world = 1;
  int depth = 1;
  std::int64_t parameters = 0;
  TagBytes peaks{};
  std::int64_t peak_total = 0;
  double step_ms = 0;
  double compute_ms = 0;  // |union of compute| on rank 0 in step 2 (of 3)
  double comm_ms = 0;     // rank 0's link busy time in step 2 (of 3)
};

std::int64_t at(const TagBytes& b, MemTag t) { return b[static_cast<std::size_t>(t)]; }

}  // namespace

std::string report_scaling(ReportContext& ctx) {
  const bool quick = ctx.options.quick;
  const std::int64_t width = quick ? 256 : 1024;
  const int depth_per_rank = quick ? 2 : 4;
  const std::int64_t rows = quick ? 64 : 512;  // per rank
  const std::vector<int> worlds = quick ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 2, 4, 8};

  std::vector<Point> points;
  std::vector<std::string> commands;
  for (int w : worlds) {
    FsdpRun fsdp;
    fsdp.run.model = "mlp";
    fsdp.run.mlp_width = width;
    fsdp.run.mlp_depth = depth_per_rank * w;
    fsdp.run.world = w;
    fsdp.run.batch = rows * w;
    fsdp.run.steps = 3;
    fsdp.run.device_preset = ctx.device_preset;
    fsdp.options = parse_fsdp_flags(FsdpFlags{}).options;
    fsdp.dry_run = true;
    Point p{w, fsdp.run.mlp_depth};
    fsdp.on_rank_done = [&p](int rank, Device& device) {
      if (rank != 0) return;
      p.peaks = device.ledger().peak_by_tag();
      p.peak_total = device.ledger().peak_total();
    };
    std::vector<TraceRecorder> recorders(static_cast<std::size_t>(w));
    for (TraceRecorder& r : recorders) fsdp.sinks.push_back(&r);
    const std::vector<StepReport> steps = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
    const StepReport& middle = steps.at(1);
    p.step_ms = ns_to_ms(middle.end - middle.begin);
    const std::vector<TraceEvent>& events = recorders.front().data().events;
    for (const OverlapMetrics& m : metrics_per_step(events))
      if (m.rank == 0 && m.step == middle.step) p.compute_ms = ns_to_ms(m.compute);
    p.comm_ms = ns_to_ms(communication_time(events, 0, middle.step));
    const BuiltModel built = build_model(fsdp.run);
    p.parameters = built.model->parameter_count();
    points.push_back(p);
    commands.push_back(
        format("fsdplab run --dry-run --device sim --model mlp --mlp-width %lld --mlp-depth %d --world %d "
               "--batch %lld --steps 3 --device-preset %s --trace mlp_w%d.json",
               static_cast<long long>(width), fsdp.run.mlp_depth, w, static_cast<long long>(rows * w),
               ctx.device_preset.c_str(), w));
  }
  std::int64_t most = 0;
  for (const Point& p : points) most = std::max(most, p.peak_total);
  const ByteUnit byte_unit = ByteUnit::for_largest(most);
  const char* unit = byte_unit.name();
  const auto size = [byte_unit](std::int64_t b) { return format("%.3f", byte_unit.of(b)); };

  std::string md = "### 4.4 Scaling Analysis\n\n";
  md += format(
      "**Weak scaling:** model size grows with # GPUs. fsdplab's residual MLP (width %lld, %d blocks per rank: "
      "depth = %d x W, each block LayerNorm -> Linear(d, 4d) -> GELU -> Linear(4d, d)), %lld rows per rank, "
      "AdamW in f32, FSDP full shard with one unit per block, ASYNC (`fsdplab run`'s defaults). Dry runs on the "
      "sim device (%s + %s, virtual time): rank 0's ledger peaks and the time of step 2 of 3 (a step mid-training: "
      "the first records the forward order, the last prefetches nothing for a next step), as each command "
      "prints them, and the trace it writes.\n\n",
      static_cast<long long>(width), depth_per_rank, depth_per_rank, static_cast<long long>(rows),
      ctx.device_preset.c_str(), ctx.link_preset.c_str());
  md += command_block(commands);
  md += "\n";
  MarkdownTable table({"# GPUs", "Model Size (M params)", std::string("Memory/GPU (") + unit + ")",
                       std::string("Params + grads + optimizer/GPU (") + unit + ")",
                       std::string("Activations/GPU (") + unit + ")", std::string("Gathered units/GPU (") + unit + ")",
                       "Time/Step (ms)", "Compute (ms)", "Link busy (ms)"});
  for (const Point& p : points)
    table.add_row(
        {std::to_string(p.world), format("%.2f", static_cast<double>(p.parameters) / 1e6), size(p.peak_total),
         size(at(p.peaks, MemTag::param_shard) + at(p.peaks, MemTag::grad_shard) + at(p.peaks, MemTag::optim_state)),
         size(at(p.peaks, MemTag::activation)), size(at(p.peaks, MemTag::param_full) + at(p.peaks, MemTag::grad_full)),
         format("%.3f", p.step_ms), format("%.3f", p.compute_ms), format("%.3f", p.comm_ms)});
  md += table.str();
  const Point& first = points.front();
  const Point& last = points.back();
  md += format(
      "\nMemory/GPU: the peak of rank 0's total; the other memory columns are each tag's own peak (param_shard + "
      "grad_shard + optim_state; activation; param_full + grad_full). Compute: |union of rank 0's compute ops| in "
      "step 2 of the trace (`--trace`); link busy: the sum of its collectives there. %s.\n\n",
      byte_unit.definition().c_str());
  const auto state = [](const Point& p) {
    return at(p.peaks, MemTag::param_shard) + at(p.peaks, MemTag::grad_shard) + at(p.peaks, MemTag::optim_state);
  };
  const bool comm_bound = last.comm_ms > last.compute_ms;
  md += format(
      "**Analysis:**\n\n"
      "- Does memory per GPU stay constant? The sharded state does: 16 bytes a parameter / W with the parameters "
      "growing as W, %s %s at W = %d and %s %s at W = %d. The total grows (%s -> %s %s) with what is not "
      "sharded: the activations, since each rank runs its rows through all %d x W blocks (%s -> %s %s), and "
      "the gathered units in flight.\n"
      "- Time per step grows too (%.3f ms at W = %d, %.3f ms at W = %d). The compute per rank grows with the "
      "depth (%.3f -> %.3f ms), and so does the communication: every rank gathers each block twice and "
      "reduce-scatters its gradient, about 3 (W - 1) / W x 4 bytes x the parameters a step on its link, which "
      "grows as W under weak scaling (%.3f -> %.3f ms of link time), plus (W - 1) latencies per collective. "
      "On this link the step is %s at W = %d: %s.\n\n",
      size(state(first)).c_str(), unit, first.world, size(state(last)).c_str(), unit, last.world,
      size(first.peak_total).c_str(), size(last.peak_total).c_str(), unit, depth_per_rank,
      size(at(first.peaks, MemTag::activation)).c_str(), size(at(last.peaks, MemTag::activation)).c_str(), unit,
      first.step_ms, first.world, last.step_ms, last.world, first.compute_ms, last.compute_ms, first.comm_ms,
      last.comm_ms, comm_bound ? "communication-bound" : "compute-bound", last.world,
      comm_bound ? "prefetch hides the compute under the collectives, not the other way round, and a faster link "
                   "(NVLink) or more rows per rank would bring it back to compute"
                 : "prefetch hides the collectives behind compute");
  return md;
}

}  // namespace fsdplab::app
