// The lecture's slide "FSDP for Llama 70B on 128 GPUs" (the FSDP lecture) beside fsdplab's dry run of the same:
// Llama-2-70B's shapes on 128 simulated ranks, one transformer layer per FSDP unit, bf16 gathers, compute
// and reduction over f32 master shards, AdamW. The figures are `fsdplab run --dry-run`'s
// (app/dry_run_report.hpp: rank 0's ledger and the model's shapes).
#include <string>
#include <vector>

#include "app/dry_run_report.hpp"
#include "app/fsdp_cli_options.hpp"
#include "app/report/markdown_table.hpp"
#include "app/report/report_context.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/train/fsdp_trainer.hpp"

namespace fsdplab::app {

std::string report_lecture(ReportContext&) {
  FsdpRun fsdp;
  fsdp.run.model = "llama";
  fsdp.run.preset = "70b";
  fsdp.run.world = 128;
  fsdp.run.batch = 128;
  fsdp.run.seq = 1024;
  fsdp.run.steps = 1;
  FsdpFlags flags;
  flags.precision = "bf16";
  flags.reduce_dtype = "bf16";
  fsdp.options = parse_fsdp_flags(flags).options;
  validate_fsdp_options(fsdp.options, fsdp.run.world);
  fsdp.dry_run = true;
  DryRunReport dry;
  dry.watch(fsdp);
  const std::vector<StepReport> steps = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  const LectureFigures f = dry.lecture_figures(fsdp);
  const auto gb = [](double v) { return format("%.3f GB", v); };

  std::string md = "#### The lecture's Llama 70B on 128 GPUs, beside fsdplab's dry run\n\n";
  md += "The slide \"" + std::string(lecture_slide::kTitle) +
        "\" (FSDP unit: 1 transformer layer, 0.9B parameters) lists what one GPU holds. fsdplab plans the same on 128 "
        "simulated ranks of an H100 SXM (a dry run: shapes, time and memory, "
        "no numerics), with bf16 parameters, compute and gradient reduction over f32 master shards, and reads rank 0's "
        "memory ledger:\n\n";
  md +=
      command_block({"fsdplab run --dry-run --device sim --model llama --preset 70b --world 128 --batch 128 --seq 1024 "
                     "--steps 1 --precision bf16 --reduce-dtype bf16"});
  md += "\n";
  MarkdownTable table({"Slide", "Lecture", "fsdplab", "fsdplab's ledger"},
                      {MarkdownTable::Align::left, MarkdownTable::Align::right, MarkdownTable::Align::right,
                       MarkdownTable::Align::left});
  // A slide's line and its size, then fsdplab's figure and where it comes from.
  const auto row = [&table](const lecture_slide::Line& line, std::string ours, std::string source) {
    table.add_row({std::string(line.what), std::string(line.size), std::move(ours), std::move(source)});
  };
  row(lecture_slide::kFlatParams, gb(f.shard),
      format("param_shard: %.2fB parameters x 4 bytes / 128, %d FlatParameters", f.params / 1e9, f.flat_parameters));
  row(lecture_slide::kExpAvg, gb(f.optim / 2), "exp_avg: half of optim_state");
  row(lecture_slide::kExpAvgSq, gb(f.optim / 2), "exp_avg_sq: the other half");
  row(lecture_slide::kWeightBuffer, gb(f.layer_buffer),
      format("one layer (%.3fB x 2 bytes); param_full peaks at %.3f GB", f.layer / 1e9, f.param_full));
  row(lecture_slide::kGradientBuffer, gb(f.layer_buffer), format("one layer; grad_full peaks at %.3f GB", f.grad_full));
  table.add_row(
      {"(not on the slide) f32 gradient shard", "-", gb(f.grad_shard), "grad_shard: the reduce-scatter's output"});
  table.add_row({"(not on the slide) the root unit, gathered", "-", gb(f.root_buffer),
                 format("embed_tokens, norm, lm_head: %.3fB parameters in bf16", f.root / 1e9)});
  table.add_row({"(not on the slide) activations", "-", gb(f.activation),
                 "activation: 1 x 1024 tokens a rank, 80 layers' saved tensors"});
  md += table.str();
  md += format("\nSimulated step time on rank 0: %.3f ms (h100-sxm + nvlink4).\n\n",
               ns_to_ms(steps.back().end - steps.back().begin));
  md += format(
      "**Where they differ, and why:** Llama-2-70B has %.2fB parameters, not 70B (%.3fB a layer, the slide's "
      "0.9B), hence %.3f GB per sharded f32 copy where the slide rounds 70B x 4 / 128 to 2.1 GB. The slide "
      "leaves out the f32 gradient shard (which PyTorch keeps too, as the FlatParameter's .grad), the root unit "
      "(an 81st FlatParameter that stays gathered from its forward to the end of backward) and the activations. "
      "param_full and grad_full peak at the root plus %.1f and %.1f layers: ASYNC prefetch and the rate limiter "
      "hold more than the slide's single buffer (`--mode sync` keeps one). `fsdplab run --dry-run` with the "
      "command above prints each of these lines with its reason.\n\n",
      f.params / 1e9, f.layer / 1e9, f.shard, f.layers_gathered, f.layers_grads);
  return md;
}

}  // namespace fsdplab::app
