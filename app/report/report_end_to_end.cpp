// Section 4.3 of the writeup: time per step of the baseline, of FSDP without prefetch (SYNC: every
// collective blocks compute) and with it (ASYNC: prefetch and overlap), the speedups and the share of the
// step spent in communication nothing hid. On sim the FSDP rows are `fsdplab bench --what overlap`'s
// headline (app/bench_overlap.hpp: the same dry runs, the same numbers) and the figures show the runs it
// measured: the dashboard's timeline and step-time panels, and its memory panel. On cuda they are `fsdplab
// bench --what train`'s measurement (app/bench_train.hpp), wall clock, the ranks sharing the GPU.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/bench_overlap.hpp"
#include "app/bench_train.hpp"
#include "app/fsdp_cli_options.hpp"
#include "app/dashboard/memory_panel.hpp"
#include "app/dashboard/step_time_panel.hpp"
#include "app/dashboard/timeline_panel.hpp"
#include "app/dashboard/trace_store.hpp"
#include "app/report/markdown_table.hpp"
#include "app/report/report_context.hpp"
#include "engine/fsdp/memory_model.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/train/expected_memory.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"

namespace fsdplab::app {
namespace {

constexpr int kWorld = 2;

RunConfig run_of(const ReportContext& ctx, const Gpt2Scale& s, int world) {
  RunConfig run;
  run.model = "gpt2";
  run.preset = s.preset;
  run.world = world;
  run.batch = s.micro_batch * world;
  run.seq = s.seq;
  run.device_preset = ctx.device_preset;
  run.link_preset = ctx.link_preset;
  return run;
}

// The baseline's step on the sim device: FSDP at W = 1 with no_shard (whole parameters, gradients and
// optimizer state on the one rank, no collective but the loss's), a dry run of 2 steps, the second's time as
// `fsdplab run --dry-run` prints it.
double baseline_step_ms(const ReportContext& ctx, const Gpt2Scale& s) {
  FsdpRun fsdp;
  fsdp.run = run_of(ctx, s, 1);
  fsdp.run.steps = 2;
  fsdp.options = parse_fsdp_flags(FsdpFlags{}).options;
  fsdp.options.strategy = ShardingStrategy::no_shard;
  fsdp.dry_run = true;
  const std::vector<StepReport> steps = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  return ns_to_ms(steps.back().end - steps.back().begin);
}

std::string percent(double part, double whole) { return whole > 0 ? format("%.1f%%", 100 * part / whole) : "-"; }

// The dashboard's panels on the SYNC and ASYNC runs: the timeline with the step times under it, and memory.
void add_figures(ReportContext& ctx, std::string& md, const Gpt2Scale& s, const TraceData& sync, const TraceData& async,
                 const FsdpOptions& async_options) {
  auto store = std::make_shared<TraceStore>();
  const int sync_source = store->add_source("SYNC", kWorld, true);
  store->add_trace(sync_source, sync);
  store->derive_steps(sync_source);
  const int async_source = store->add_source("ASYNC", kWorld, false);
  store->add_trace(async_source, async);
  store->derive_steps(async_source);

  // The formula's expectation, as the dashboard's memory panel shows it.
  auto expected = std::make_shared<std::vector<std::optional<TagBytes>>>();
  for (const FsdpOptions& o : {sync_schedule(async_options), async_options}) {
    RunConfig run = run_of(ctx, s, kWorld);
    BuiltModel built = build_model(run);
    expected->push_back(fsdp_memory(fsdp_memory_input(run, o, built)));
  }
  auto timeline = std::make_shared<TimelinePanel>();
  auto steps = std::make_shared<StepTimePanel>();
  auto memory = std::make_shared<MemoryPanel>();
  const std::string what = "GPT-2 '" + s.preset + "', W = " + std::to_string(kWorld) + ", " + ctx.device_preset +
                           " + " + ctx.link_preset + " (sim, virtual time), 2 steps";
  md += ctx.figure({"timeline_sync_async.png",
                    "The dashboard's timeline and step times, SYNC (no prefetch) above ASYNC (prefetch): " + what,
                    [store, timeline, steps] {
                      const float height = ImGui::GetContentRegionAvail().y;
                      timeline->draw(*store, ImVec2(0, height * 0.64f));
                      steps->draw(*store);
                    }});
  md += ctx.figure({"memory_panel.png",
                    "The dashboard's memory panel, each rank by ledger tag over time (yellow: the analytic "
                    "expectation): " + what,
                    [store, memory, expected] {
                      // "now": the moment rank 0 of the SYNC run peaked.
                      const SimTime now = store->source(0).memory.empty()
                                              ? store->last_time()
                                              : store->source(0).memory[0].total.peak_time();
                      memory->draw(*store, *expected, store->first_time(), store->last_time(), now);
                    }});
  md += "The ledger records an allocation at the host's time, when the op that needs it is issued. SYNC orders the "
        "streams by events without stopping the host, which issues a whole step far ahead of its device, so SYNC's "
        "memory rises and falls early in each step; ASYNC's rate limiter makes the host wait for the gathers, and its "
        "curve follows the device's progress.\n\n";
}

std::string sim_end_to_end(ReportContext& ctx) {
  const Gpt2Scale s = gpt2_scale(ctx);
  const OverlapBenchOptions bench = gpt2_overlap_bench(s, kWorld, ctx.device_preset, ctx.link_preset);
  TraceData sync_trace, async_trace;
  const OverlapHeadline h = overlap_headline(bench, &sync_trace, &async_trace);
  const double base = baseline_step_ms(ctx, s);
  const double t_sync = ns_to_ms(h.t_sync), t_async = ns_to_ms(h.t_async);
  const double exposed_sync = ns_to_ms(h.comm - h.sync_overlap), exposed_async = ns_to_ms(h.exposed);

  std::string md = format(
      "**Setup:**\n- Model: GPT-2 '%s' (%.2fM parameters)\n- Per rank: %lld sequences x %lld tokens; "
      "FSDP on W = %d ranks (full shard, f32, AdamW)\n- Device: sim, %s with link %s (%g GB/s, %g us "
      "a ring step); virtual time, the same on every machine\n- Measure: time per step, the second "
      "step of dry runs (the first records the forward order that prefetch replays; every later "
      "step but a run's last, which prefetches nothing for a next step, repeats the second exactly on the "
      "virtual clock, so the second is the step time of a long run)\n\n",
      s.preset.c_str(), static_cast<double>(h.parameters) / 1e6, s.micro_batch, s.seq, kWorld, h.device.name.c_str(),
      h.link.name.c_str(), h.link.bandwidth / 1e9, h.link.latency_us);
  md += command_block({"fsdplab run --dry-run --device sim --model gpt2 --preset " + s.preset +
                           " --world 1 --strategy no_shard --batch " + std::to_string(s.micro_batch) + " --seq " +
                           std::to_string(s.seq) + " --steps 2 --device-preset " + ctx.device_preset,
                       "fsdplab bench --what overlap " + s.bench_flags() + " --world " + std::to_string(kWorld) +
                           " --device-preset " + ctx.device_preset + " --link-preset " + ctx.link_preset});
  md += "\n**Results:**\n\n";
  MarkdownTable table({"Configuration", "Time/Step (ms)", "Speedup", "Throughput vs baseline", "Communication %",
                       "Link busy (ms)", "Overlap %"});
  table.add_row({"Baseline", format("%.3f", base), "1.00x", "1.00x", "0.0%", "0.000", "-"});
  table.add_row({"FSDP (no prefetch)", format("%.3f", t_sync), format("%.2fx", base / t_sync),
                 format("%.2fx", kWorld * base / t_sync), percent(exposed_sync, t_sync),
                 format("%.3f", ns_to_ms(h.comm)), percent(ns_to_ms(h.sync_overlap), ns_to_ms(h.comm))});
  table.add_row({"FSDP (with prefetch)", format("%.3f", t_async), format("%.2fx", base / t_async),
                 format("%.2fx", kWorld * base / t_async), percent(exposed_async, t_async),
                 format("%.3f", ns_to_ms(h.comm)), format("%.1f%%", h.overlap_percent)});
  md += table.str();
  md += format(
      "\nBaseline: one rank, the same %lld x %lld tokens a step (FSDP at W = 1 with no_shard: `run --dry-run`'s "
      "\"simulated step time\", step 2). FSDP (no prefetch) is the bench's T_sync (`--mode sync`), FSDP (with "
      "prefetch) its T_async (`--mode async`, prefetch %s, at most %d gathers in flight). Speedup = baseline "
      "time / this time with the same work per rank; throughput counts the W = %d ranks' tokens. "
      "Communication %% = exposed communication / step, exposed = |comm| - |comm ∩ compute| (HTA); link busy = "
      "the sum of rank 0's collectives; overlap %% = |comm ∩ compute| / |comm|.\n\n",
      s.micro_batch, s.seq, prefetch_name(bench.async.prefetch).c_str(), bench.async.max_inflight, kWorld);
  md += format(
      "The bench's line for the same runs: compute %.3f ms (the step on a free link), comm %.3f ms, T_sync %.3f "
      "ms, T_async %.3f ms, ideal max(compute, comm) %.3f ms, eta = (T_sync - T_async) / (T_sync - ideal) = %s.\n\n",
      ns_to_ms(h.compute), ns_to_ms(h.comm), t_sync, t_async, ns_to_ms(h.ideal),
      h.eta ? format("%.3f", *h.eta).c_str() : "undefined (T_sync <= ideal)");
  md += format(
      "**Analysis:**\n\n"
      "- FSDP is slower per step than the baseline with the same per-rank work: it adds the collectives (%.3f ms "
      "of link time a step), of which SYNC exposes %.3f ms. W ranks still do W times the work, so "
      "the throughput is %.2fx (SYNC) and %.2fx (ASYNC) the baseline's.\n"
      "- Prefetching hides %.1f%% of the communication behind compute: the step drops from %.3f to %.3f ms "
      "(%.2fx), %s of what perfect overlap (ideal %.3f ms) would save.\n"
      "- The communication overhead left: %.3f ms exposed a step with prefetch (%s of the step).\n\n",
      ns_to_ms(h.comm), exposed_sync, kWorld * base / t_sync, kWorld * base / t_async, h.overlap_percent, t_sync,
      t_async, t_sync / t_async, h.eta ? format("eta = %.2f", *h.eta).c_str() : "none", ns_to_ms(h.ideal),
      exposed_async, percent(exposed_async, t_async).c_str());
  add_figures(ctx, md, s, sync_trace, async_trace, bench.async);
  return md;
}

std::string cuda_end_to_end(ReportContext& ctx) {
  const Gpt2Scale s = gpt2_scale(ctx);
  TrainBenchOptions bench;
  bench.device = "cuda";
  bench.preset = s.preset;
  bench.micro_batch = s.micro_batch;
  bench.seq = s.seq;
  bench.steps = ctx.options.quick ? 5 : 20;
  bench.warmup = 3;
  const auto measure = [&](int world, const FsdpOptions* options) {
    TrainBenchOptions b = bench;
    b.world = world;
    RunConfig run = b.run_config("cuda");
    run.gpu = ctx.gpu.gpu;
    run.cupti = false;  // as bench_train: the op spans, untraced by CUPTI
    return measure_training(b, run, options);
  };
  FsdpOptions async_options;
  async_options.mode = OverlapMode::async;
  const FsdpOptions sync_options = sync_schedule(async_options);
  const TrainMeasurement base = measure(1, nullptr);
  const TrainMeasurement sync = measure(kWorld, &sync_options);
  const TrainMeasurement async = measure(kWorld, &async_options);

  const std::string common = "fsdplab bench --what train --device cuda " + s.bench_flags() + " --steps " +
                             std::to_string(bench.steps) + " --warmup " + std::to_string(bench.warmup);
  std::string md = format(
      "**Setup:**\n- Model: GPT-2 '%s'; per rank %lld sequences x %lld tokens, f32, AdamW\n- Device: "
      "%s, wall clock; FSDP's %d ranks are threads sharing the GPU (LocalComm), so they also share "
      "its compute: a step of W ranks does W times the baseline's work on one GPU\n- Measure: the "
      "mean of %d steps after %d of warm-up\n\n",
      s.preset.c_str(), s.micro_batch, s.seq, ctx.gpu_name.c_str(), kWorld, bench.steps, bench.warmup);
  md += command_block({common + " --world 1", common + " --world " + std::to_string(kWorld)});
  md += "\n**Results:**\n\n";
  MarkdownTable table({"Configuration", "Time/Step (ms)", "Speedup", "Throughput vs baseline", "Communication %",
                       "Link busy (ms)"});
  table.add_row({"Baseline", format("%.3f", base.step_ms), "1.00x", "1.00x", "0.0%", format("%.3f", base.comm_ms)});
  table.add_row({"FSDP (no prefetch)", format("%.3f", sync.step_ms), format("%.2fx", base.step_ms / sync.step_ms),
                 format("%.2fx", kWorld * base.step_ms / sync.step_ms), percent(sync.comm_ms, sync.step_ms),
                 format("%.3f", sync.comm_ms)});
  table.add_row({"FSDP (with prefetch)", format("%.3f", async.step_ms), format("%.2fx", base.step_ms / async.step_ms),
                 format("%.2fx", kWorld * base.step_ms / async.step_ms), percent(async.comm_ms, async.step_ms),
                 format("%.3f", async.comm_ms)});
  md += table.str();
  md += "\nTimes are bench --what train's \"step (ms)\" (host time from a step's start to its loss being read). "
        "Communication % = rank 0's collective time (CUDA-event spans) / step: on one GPU the collectives are "
        "device copies, so this is an upper bound of what a link would cost, and overlap is not separated from it "
        "here (`--emulate-link` and the sim rows do that).\n\n";
  // The dashboard's panels show the sim device's schedule of the same configuration (its virtual clock keeps
  // SYNC and ASYNC apart, which ranks sharing one GPU blur).
  const OverlapBenchOptions sim = gpt2_overlap_bench(s, kWorld, ctx.device_preset, ctx.link_preset);
  TraceData sync_trace, async_trace;
  overlap_headline(sim, &sync_trace, &async_trace);
  add_figures(ctx, md, s, sync_trace, async_trace, sim.async);
  return md;
}

}  // namespace

OverlapBenchOptions gpt2_overlap_bench(const Gpt2Scale& s, int world, const std::string& device_preset,
                                       const std::string& link_preset, const FsdpFlags& fsdp) {
  OverlapBenchOptions bench;
  bench.preset = s.preset;
  bench.micro_batch = s.micro_batch;
  bench.seq = s.seq;
  bench.world = world;
  bench.device_preset = device_preset;
  bench.link_preset = link_preset;
  bench.async = parse_fsdp_flags(fsdp).options;
  return bench;
}

std::string report_end_to_end(ReportContext& ctx) {
  std::string md = "### 4.3 End-to-End Training Performance\n\n";
  md += ctx.cuda ? cuda_end_to_end(ctx) : sim_end_to_end(ctx);
  return md;
}

}  // namespace fsdplab::app
