#include "app/dry_run_report.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>
#include <string>

#include "app/byte_unit.hpp"
#include "engine/fsdp/memory_model.hpp"
#include "engine/nn/causal_attention.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/host_memory_limit.hpp"
#include "engine/runtime/wall_clock.hpp"
#include "engine/train/expected_memory.hpp"
#include "engine/train/fsdp_run_plan.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_device.hpp"

namespace fsdplab::app {
namespace {

double gb(std::int64_t bytes) { return static_cast<double>(bytes) / 1e9; }
std::int64_t at(const TagBytes& bytes, MemTag tag) { return bytes[static_cast<std::size_t>(tag)]; }


// What the analytic model expects of this run, as far as it applies: the units as FSDP plans them,
// and the model's activations where memory_model.hpp counts them (gpt2, llama).
struct Expected {
  std::vector<UnitSize> units;
  std::optional<TagBytes> bytes;       // absent where the units cannot be modelled (nested units)
  bool activations_counted = false;
  std::int64_t root = 0;               // P of the root unit, 0 without one
  std::int64_t largest_layer = 0;      // P of the largest other unit
};

Expected expected_memory(const FsdpRun& fsdp, BuiltModel& built) {
  Expected e;
  FsdpMemoryInput input;
  try {
    input = fsdp_memory_input(fsdp.run, fsdp.options, built);
  } catch (const Error&) {
    return e;  // nested units: the formula does not describe them
  }
  e.units = input.units;
  for (const UnitSize& u : e.units) {
    if (u.root) {
      e.root = u.padded_numel;
    } else {
      e.largest_layer = std::max(e.largest_layer, u.padded_numel);
    }
  }
  e.activations_counted = built.batch.kind == BatchShape::Kind::tokens;
  e.bytes = fsdp_memory(input);
  return e;
}

// `text` after `first` (its first line's start), its words wrapped at 108 columns, each later line starting with
// `indent`. A word longer than a line gets a line of its own.
void print_wrapped(const std::string& first, const std::string& indent, const std::string& text) {
  constexpr std::size_t kWidth = 108;
  std::string line = first;
  bool line_has_words = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t next = text.find(' ', pos);
    if (next == std::string::npos) next = text.size();
    const std::string word = text.substr(pos, next - pos);
    if (line.size() + 1 + word.size() > kWidth && line_has_words) {
      std::printf("%s\n", line.c_str());
      line = indent;
    }
    line += " " + word;
    line_has_words = true;
    pos = next + 1;
  }
  std::printf("%s\n", line.c_str());
}

// `text` as a bullet ("  - ..."), its continuation lines indented under its first word.
void bullet(const std::string& text) { print_wrapped("  -", "   ", text); }

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// A dry run plans the run that drops --dry-run. On the sim device that run keeps its memory in this host's RAM and is
// refused before it starts where it would not fit (check_sim_host_memory, fsdp_run_plan.hpp): say which, with the
// same figures. Ranks as threads only: where ranks are processes, the processes on the host decide together.
void print_host_memory_fit(const FsdpRun& fsdp, const PresetCatalog& presets, BuiltModel& built) {
  const RunConfig& run = fsdp.run;
  double per_rank = 0;
  try {
    if (run.comm != "local" || run_device_spec(run, presets, /*dry_run=*/false).kind != DeviceKind::sim) return;
    FsdpOptions options = fsdp.options;
    if (fsdp.ab_block > 0) options.mode = OverlapMode::async;  // the A/B run's larger schedule, as the plan takes
    per_rank = sim_host_bytes_per_rank(run, options, built);
  } catch (const Error&) {
    return;  // no device to run it on here, or units the memory model does not describe
  }
  const double need = per_rank * run.world;
  const std::string who = "the " + std::to_string(run.world) + (run.world == 1 ? " rank" : " ranks");
  const ProcessMemoryRequest request = this_process_memory_request(need);
  const std::optional<std::string> refusal =
      host_memory_refusal({request}, who, "plan it with --dry-run, as here, or run it on a larger machine");
  if (refusal) {
    print_wrapped("host memory:", " ", "without --dry-run, on the sim device, the run would be refused: " + *refusal);
    return;
  }
  const HostMemoryLimit limit = host_memory_limit_of(request);  // the bounds the verdict read, not read again
  if (limit.bytes <= 0) return;  // nothing bounds it that can be read: the run is not checked either
  print_wrapped("host memory:", " ",
                "without --dry-run, on the sim device, " + who + " need about " + fixed(need / 1e9, 3) +
                    " GB of this host's memory (" + fixed(per_rank / 1e9, 3) +
                    " GB each: memory_model.hpp's bound, above the peak), and this process may use " +
                    fixed(limit.bytes / 1e9, 3) + " GB (" + limit.source + "): it fits");
}

// This run's figures for the lecture's slide, every one read from the ledger or the model.
LectureFigures lecture_figures(const FsdpRun& fsdp, BuiltModel& built, const Expected& e, const TagBytes& peaks) {
  const FsdpOptions& o = fsdp.options;
  const std::int64_t p = static_cast<std::int64_t>(dtype_size(o.param_dtype));
  LectureFigures f;
  f.params = static_cast<double>(built.model->parameter_count());
  f.layer = static_cast<double>(built.model->module("model.layers.0").parameter_count());
  f.root = static_cast<double>(e.root);
  f.flat_parameters = static_cast<int>(e.units.size());
  f.shard = gb(at(peaks, MemTag::param_shard));
  f.optim = gb(at(peaks, MemTag::optim_state));
  f.layer_buffer = gb(p * e.largest_layer);
  f.root_buffer = gb(p * e.root);
  f.param_full = gb(at(peaks, MemTag::param_full));
  f.grad_full = gb(at(peaks, MemTag::grad_full));
  f.grad_shard = gb(at(peaks, MemTag::grad_shard));
  f.comm_buffer = gb(at(peaks, MemTag::comm_buffer));
  f.activation = gb(at(peaks, MemTag::activation));
  // How many layers' buffers the peaks hold beside the root's (which stays gathered through backward).
  f.layers_gathered = (f.param_full - f.root_buffer) / f.layer_buffer;
  f.layers_grads = (f.grad_full - f.root_buffer) / f.layer_buffer;
  return f;
}

// The lecture's slide "FSDP for Llama 70B on 128 GPUs" (the FSDP lecture) beside this run, and where and why
// they differ, every figure of ours read from the ledger or the model.
void print_lecture_comparison(const FsdpRun& fsdp, BuiltModel& built, const Expected& e, const TagBytes& peaks) {
  const FsdpOptions& o = fsdp.options;
  const int world = fsdp.run.world;
  const std::int64_t p = static_cast<std::int64_t>(dtype_size(o.param_dtype));
  const std::string pd(dtype_name(o.param_dtype));
  const std::string rd(dtype_name(o.reduce_dtype));
  const LectureFigures f = lecture_figures(fsdp, built, e, peaks);
  const double params = f.params;
  const double layer = f.layer;
  const double shard = f.shard;
  const double optim = f.optim;
  const double layer_buffer = f.layer_buffer;
  const double root_buffer = f.root_buffer;
  const double param_full = f.param_full;
  const double grad_full = f.grad_full;
  const double layers_gathered = f.layers_gathered;
  const double layers_grads = f.layers_grads;

  // "80 FlatParams: 70B x 4 bytes / 128 = 2.1 GB"
  const auto slide = [](const lecture_slide::Line& line) {
    return std::string(line.what) + " = " + std::string(line.size);
  };
  std::printf(
      "\nThe lecture's \"%s\" (FSDP unit = 1 transformer layer, 0.9B parameters)\n"
      "beside this run (rank 0's ledger):\n",
      std::string(lecture_slide::kTitle).c_str());
  std::printf("  %-56s %s\n", "lecture", "this run");
  std::printf("  %-56s param_shard %.3f GB (%.2fB parameters x 4 bytes / %d, %d FlatParameters)\n",
              slide(lecture_slide::kFlatParams).c_str(), shard, params / 1e9, world, static_cast<int>(e.units.size()));
  std::printf("  %-56s exp_avg %.3f GB (half of optim_state %.3f GB)\n", slide(lecture_slide::kExpAvg).c_str(),
              optim / 2, optim);
  std::printf("  %-56s exp_avg_sq %.3f GB (the other half)\n", slide(lecture_slide::kExpAvgSq).c_str(), optim / 2);
  std::printf("  %-56s one layer %.3f GB (%.3fB x %lld bytes, %s); param_full peak %.3f GB\n",
              slide(lecture_slide::kWeightBuffer).c_str(), layer_buffer, layer / 1e9, static_cast<long long>(p),
              pd.c_str(), param_full);
  std::printf("  %-56s one layer %.3f GB; grad_full peak %.3f GB\n", slide(lecture_slide::kGradientBuffer).c_str(),
              layer_buffer, grad_full);

  std::printf("Where this run differs, and why:\n");
  bullet(fixed(params / 1e9, 2) + "B parameters (Llama-2-70B's exact count; a layer has " + fixed(layer / 1e9, 3) +
         "B, the slide's 0.9B), not 70B: " + fixed(shard, 3) + " GB per sharded f32 copy where 70B would give " +
         fixed(70e9 * 4 / world / 1e9, 3) + " (the slide writes 2.1).");
  bullet("One sharded f32 copy more than the slide lists: the gradient shard (grad_shard " +
         fixed(gb(at(peaks, MemTag::grad_shard)), 3) +
         " GB), which the reduce-scatter writes and AdamW reads; PyTorch keeps it too, as the FlatParameter's .grad.");
  bullet("An 81st FlatParameter: the root unit (embed_tokens, norm, lm_head; " +
         fixed(static_cast<double>(e.root) / 1e9, 3) +
         "B parameters) stays gathered from its forward to the end of backward, " + fixed(root_buffer, 3) + " GB of " +
         pd + " parameters and as much gradient beside the layers' buffers.");
  std::string why_params;
  if (o.mode == OverlapMode::sync) {
    why_params = "SYNC frees each layer before the next is gathered, the slide's single buffer.";
  } else if (o.buffers == UnshardBuffers::pool) {
    why_params = "--buffers pool keeps two layer buffers that even and odd layers take turns in.";
  } else {
    why_params = "ASYNC prefetch gathers the next layer while one computes, and the rate limiter allows " +
                 (o.max_inflight == 0 ? std::string("any number of") : std::to_string(o.max_inflight)) +
                 " gathered at once (--max-inflight); --max-inflight 1 or --mode sync keeps one.";
  }
  bullet("param_full peaks at the root + " + fixed(layers_gathered, 1) + " layers: " + why_params);
  bullet("grad_full peaks at the root's + " + fixed(layers_grads, 1) + " layers' gradients" +
         (o.mode == OverlapMode::async
              ? ": ASYNC lets compute run ahead of the reduce-scatters queued on the link, and a layer's gradient "
                "buffer stays parked until its reduce-scatter has read it; --mode sync frees each at once."
              : "."));
  const double comm = f.comm_buffer;
  if (o.reduce_dtype != o.param_dtype) {
    bullet("comm_buffer " + fixed(comm, 3) + " GB: --reduce-dtype " + rd + " widens each layer's " + pd +
           " gradient to " + rd + " before its reduce-scatter (" +
           fixed(static_cast<double>(e.largest_layer) / 1e9, 3) + "B x " + std::to_string(dtype_size(o.reduce_dtype)) +
           " bytes a layer); --reduce-dtype " + pd + " reduces in " + pd + ", as the slide's gradient buffer does.");
  } else {
    bullet("comm_buffer " + fixed(comm, 3) + " GB: collective staging, the " + pd +
           " copy of a shard before its gather and a reduce-scatter's " + pd + " output before the f32 shard.");
  }
  if (p != 2) bullet("--precision " + pd + ": the slide gathers and computes in bf16 (--precision bf16).");
  bullet(
      "activation " + fixed(gb(at(peaks, MemTag::activation)), 3) + " GB, which the slide leaves out: one rank's " +
      std::to_string(fsdp.run.batch / world / fsdp.run.accumulate) + " x " + std::to_string(built.batch.seq) +
      (fsdp.run.accumulate > 1 ? " tokens a micro-batch keep" : " tokens keep") +
      " 80 layers' saved tensors (no activation checkpointing), " +
      (uses_flash_attention(parse_attention_kind(fsdp.run.attention), o.param_dtype)
           ? std::string("each layer's attention only its rows' log-sum-exp (flash attention in ") + pd + ")."
           : std::string("each layer's attention probabilities [B, H, T, T] in f32 among them (exact attention in ") +
                 pd + "; flash attention, bf16's default and --attention flash, keeps O(T) a head)."));
}

}  // namespace

bool DryRunReport::lecture_applies(const RunConfig& run) {
  return run.model == "llama" && run.preset == "70b" && run.world == 128;
}

LectureFigures DryRunReport::lecture_figures(const FsdpRun& fsdp) const {
  check(captured_, "dry-run report: rank 0's ledger was not captured; watch() the run before it runs");
  check(lecture_applies(fsdp.run),
        "dry-run report: the lecture's figures are for --model llama --preset 70b --world 128");
  BuiltModel built = build_model(fsdp.run);
  const Expected e = expected_memory(fsdp, built);
  return app::lecture_figures(fsdp, built, e, peaks_);
}

void DryRunReport::watch(FsdpRun& fsdp) {
  fsdp.on_rank_done = [this](int rank, Device& device) {
    if (rank != 0) return;
    peaks_ = device.ledger().peak_by_tag();
    host_peaks_ = device.host_ledger().peak_by_tag();
    peak_total_ = device.ledger().peak_total();
    captured_ = true;
  };
  fsdp.observers.assign(static_cast<std::size_t>(fsdp.run.world), nullptr);
  fsdp.observers.front() = &collectives_;
}

void DryRunReport::CollectiveCount::on_fsdp_event(const FsdpEvent& event) {
  if (event.kind == FsdpEventKind::collective_issued) ++by_step[event.step][event.collective];
}

void DryRunReport::print(const FsdpRun& fsdp, const PresetCatalog& presets,
                         const std::vector<StepReport>& steps) const {
  check(captured_, "dry-run report: rank 0's ledger was not captured; watch() the run before it runs");
  const RunConfig& run = fsdp.run;
  BuiltModel built = build_model(run);
  const Expected e = expected_memory(fsdp, built);

  constexpr std::array<const char*, kMemTagCount> meaning = {
      "f32 master shards", "gathered parameters", "f32 gradient shards", "unsharded gradients",
      "optimizer state", "activations", "collective staging", "op scratch"};
  const ByteUnit unit = ByteUnit::for_largest(peak_total_);
  const auto size = [unit](std::int64_t bytes) { return unit.of(bytes); };
  std::printf("\nDry run: rank 0 of %d, peak of each memory-ledger tag over the run (%s)\n", run.world,
              unit.definition().c_str());
  // Under CPU offload the shards and the optimizer state leave the device for pinned host memory: a column of the
  // host ledger shows where they went, as the device's column shows them gone.
  const bool offload = fsdp.options.offload;
  if (offload) std::printf("(CPU offload: 'measured' is the device's ledger, 'host (CPU)' the host's pinned memory)\n");
  std::printf("%-12s %10s %10s%s   %s\n", "tag", "measured", "formula", offload ? " host (CPU)" : "", "what");
  std::int64_t sum = 0, formula_sum = 0, host_sum = 0;
  for (MemTag tag : kAllMemTags) {
    const std::int64_t got = at(peaks_, tag);
    sum += got;
    char want[32] = "-";
    const bool counted = e.bytes && (e.activations_counted || (tag != MemTag::activation && tag != MemTag::workspace));
    if (counted) {
      std::snprintf(want, sizeof want, "%.3f", size(at(*e.bytes, tag)));
      formula_sum += at(*e.bytes, tag);
    }
    std::string what = meaning[static_cast<std::size_t>(tag)];
    if (tag == MemTag::param_full || tag == MemTag::grad_full)
      what = std::string(dtype_name(fsdp.options.param_dtype)) + " " + what;
    if (tag == MemTag::param_shard)
      what += " (" + std::to_string(e.units.size()) + (e.units.size() == 1 ? " FlatParameter)" : " FlatParameters)");
    if (tag == MemTag::optim_state) what += " (" + run.optimizer + ")";
    if (tag == MemTag::activation && built.batch.kind == BatchShape::Kind::tokens)
      what += " (" + std::to_string(run.batch / run.world / run.accumulate) + " x " + std::to_string(built.batch.seq) +
              (run.accumulate > 1 ? " tokens a micro-batch on a rank)" : " tokens a rank)");
    char host[32] = "";
    if (offload) std::snprintf(host, sizeof host, " %10.3f", size(at(host_peaks_, tag)));
    host_sum += at(host_peaks_, tag);
    std::printf("%-12s %10.3f %10s%s   %s\n", std::string(mem_tag_name(tag)).c_str(), size(got), want, host,
                what.c_str());
  }
  char formula_total[32] = "-";
  if (e.bytes && e.activations_counted) std::snprintf(formula_total, sizeof formula_total, "%.3f", size(formula_sum));
  char host_total[32] = "";
  if (offload) std::snprintf(host_total, sizeof host_total, " %10.3f", size(host_sum));
  std::printf("%-12s %10.3f %10s%s\n", "sum of tags", size(sum), formula_total, host_total);
  std::printf("%-12s %10.3f %10s   the total at its peak (tags peak at different moments)\n", "peak total",
              size(peak_total_), "");
  const DevicePreset& device = presets.device(run.device_preset);
  const double capacity = device.memory_bytes;
  if (static_cast<double>(peak_total_) > capacity) {
    std::printf(
        "DOES NOT FIT: the peak total is %.3f GB, %.3f GB more than the %s's %.0f GB (a real run stops with\n"
        "out of memory); fewer tokens per rank (--batch, --seq), more ranks, or bf16 (--precision) would shrink it.\n",
        static_cast<double>(peak_total_) / 1e9, (static_cast<double>(peak_total_) - capacity) / 1e9,
        device.name.c_str(), capacity / 1e9);
  } else {
    std::printf("fits: the peak total is %.1f%% of the %s's %.0f GB\n",
                100.0 * static_cast<double>(peak_total_) / capacity, device.name.c_str(), capacity / 1e9);
  }
  std::printf(
      "formula: engine/fsdp/memory_model.hpp, the SYNC schedule (each buffer freed when its task returns); ASYNC\n"
      "also holds the units its prefetch and --max-inflight allow, and parks freed buffers until their last\n"
      "user is done%s.\n",
      e.activations_counted ? "" : "; '-': activations of this model are not counted there");
  print_host_memory_fit(fsdp, presets, built);

  std::printf("simulated step time (rank 0):");
  for (std::size_t i = 0; i < steps.size() && i < 5; ++i)
    std::printf(" step %d %.3f ms%s", steps[i].step + 1, ns_to_ms(steps[i].end - steps[i].begin),
                i + 1 < std::min<std::size_t>(steps.size(), 5) ? "," : "");
  if (steps.size() > 5) std::printf(" ...");
  const std::string link = presets.link_for(device, run.link_preset).name;
  if (run.nodes.ranks_per_node > 0) {
    std::printf("  (%s; %s)\n", device.name.c_str(), run.nodes.describe(link).c_str());
  } else {
    std::printf("  (%s, link %s)\n", device.name.c_str(), link.c_str());
  }
  // What a lab's schedule is checked by: how many gathers, reductions and all-reduces one step issues.
  std::printf("collectives issued (rank 0; a prefetch counts in the step that issues it):");
  for (const auto& [step, kinds] : collectives_.by_step) {
    if (step >= 5) {
      std::printf(" ...");
      break;
    }
    std::printf("%s step %d:", step == collectives_.by_step.begin()->first ? "" : ";", step + 1);
    for (const auto& [kind, count] : kinds) std::printf(" %d %s", count, kind.c_str());
  }
  std::printf("\n");
  std::printf("wall time: %.2f s on this host\n", seconds_since(start_));

  if (lecture_applies(run)) {
    print_lecture_comparison(fsdp, built, e, peaks_);
  } else if (run.model == "llama") {
    std::printf("(the lecture's figures are printed beside a dry run of --model llama --preset 70b --world 128)\n");
  }
}

}  // namespace fsdplab::app
