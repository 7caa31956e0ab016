// Section 4.1 of the writeup: per-rank memory of the baseline and of FSDP at 2, 4 and 8 ranks, by tag as
// the memory ledger measured it beside the analytic model, from `fsdplab bench --what memory`'s own
// measurement (app/bench_memory.hpp): the numbers printed here are the bench's.
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "app/bench_memory.hpp"
#include "app/report/markdown_table.hpp"
#include "app/report/report_context.hpp"
#include "engine/nn/gpt2_model.hpp"

namespace fsdplab::app {
namespace {

constexpr double kScaleTolerance = 0.05;  // within 5 % of the ideal counts as scaling

std::string bench_command(const Gpt2Scale& s) { return "fsdplab bench --what memory " + s.bench_flags(); }

// "yes (0.98)": base / (W x value), 1.00 when value is exactly base / W.
std::string scales_as_one_over_w(std::int64_t base, std::int64_t value, int world) {
  if (base <= 0 || value <= 0) return "-";
  const double ratio = static_cast<double>(base) / (static_cast<double>(world) * static_cast<double>(value));
  return format("%s (%.2f)", std::abs(ratio - 1) <= kScaleTolerance ? "yes" : "no", ratio);
}

// A tag across W: "yes" when every FSDP row is base / W, "no: constant" when they are all the same.
std::string tag_scaling(const MemoryTable& t, MemTag tag) {
  const std::int64_t base = tag_bytes(t.rows.front().measured, tag);
  bool sharded = base > 0, constant = true;
  const std::int64_t first = tag_bytes(t.rows[1].measured, tag);
  for (std::size_t i = 1; i < t.rows.size(); ++i) {
    const double got = static_cast<double>(tag_bytes(t.rows[i].measured, tag));
    const double ideal = static_cast<double>(base) / t.rows[i].world;
    if (std::abs(got - ideal) > kScaleTolerance * ideal) sharded = false;
    if (std::abs(got - static_cast<double>(first)) > kScaleTolerance * std::max<double>(static_cast<double>(first), 1))
      constant = false;
  }
  if (sharded) return "yes";
  if (first == 0 && constant) return "- (none)";
  return constant ? "no: the same at every W" : "no";
}

}  // namespace

Gpt2Scale gpt2_scale(const ReportContext& ctx) {
  return ctx.options.quick ? Gpt2Scale{"test-small", 2, 64} : Gpt2Scale{"gpt2", 4, 1024};
}

std::string report_memory(ReportContext& ctx) {
  const Gpt2Scale scale = gpt2_scale(ctx);
  const MemoryBenchOptions bench{scale.preset, scale.micro_batch, scale.seq};
  const MemoryTable t = measure_memory_table(bench, parse_fsdp_flags(FsdpFlags{}));
  const Gpt2Config cfg = gpt2_preset(scale.preset);
  const ByteUnit byte_unit = t.unit();
  const char* unit = byte_unit.name();

  std::string md = "### 4.1 Memory Profiling\n\n";
  md += format("**Setup:**\n- Model: GPT-2 '%s' (%lld layers, d_model %lld, %lld heads, vocabulary %lld), %.2fM "
               "parameters\n- Batch size: %lld sequences per rank (the global batch is W x %lld)\n- Sequence length: "
               "%lld\n- AdamW, f32 parameters, gradients and optimizer state; FSDP: full shard, one unit per Block\n\n",
               scale.preset.c_str(), static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_embd),
               static_cast<long long>(cfg.n_head), static_cast<long long>(cfg.vocab_size),
               static_cast<double>(t.rows.front().parameters) / 1e6, scale.micro_batch, scale.micro_batch, scale.seq);
  md += "Dry runs of one SYNC step on the sim device (shapes, time and memory, no numerics): the memory ledger's peak "
        "of every tag on the fullest rank, beside the analytic model (engine/fsdp/memory_model.hpp). Bytes do not "
        "depend on the device preset. The baseline is FSDP at W = 1 with no_shard: whole parameters, gradients and "
        "optimizer state on one rank.\n\n";
  md += command_block({bench_command(scale)});
  md += "\n**Results:**\n\n";
  MarkdownTable table({"Configuration", "Parameters", std::string("Memory (") + unit + ")", "Reduction",
                       std::string("Params + grads + optimizer (") + unit + ")", "Reduction",
                       "Scales as 1/W? (params + grads + optimizer)", "Scales as 1/W? (memory)"});
  const MemoryRow& base = t.rows.front();
  for (const MemoryRow& row : t.rows) {
    const bool is_base = &row == &base;
    table.add_row(
        {row.label, format("%.2fM", static_cast<double>(row.parameters) / 1e6),
         format("%.3f", byte_unit.of(row.peak_total)),
         is_base ? "-" : format("%.2fx", static_cast<double>(base.peak_total) / static_cast<double>(row.peak_total)),
         format("%.3f", byte_unit.of(sharded_state(row.measured))),
         is_base ? "-"
                 : format("%.2fx", static_cast<double>(sharded_state(base.measured)) /
                                       static_cast<double>(sharded_state(row.measured))),
         is_base ? "-" : scales_as_one_over_w(sharded_state(base.measured), sharded_state(row.measured), row.world),
         is_base ? "-" : scales_as_one_over_w(base.peak_total, row.peak_total, row.world)});
  }
  md += table.str();
  md += format(
      "\nMemory: the peak of the total on the fullest rank (one moment). Params + grads + optimizer: "
      "param_shard + grad_shard + optim_state, what FSDP shards. Scales as 1/W?: baseline / (W x this) in "
      "brackets, 1.00 for exactly 1/W; \"yes\" within %.0f %%. %s.\n\n",
      100 * kScaleTolerance, byte_unit.definition().c_str());

  md += "**Breakdown** (per rank, each tag's peak: measured by the ledger / formula):\n\n";
  // The bench's labels, and what the writeup's template asks to be said of two of them.
  const auto label = [](MemTag tag) {
    const std::string_view note = tag == MemTag::optim_state  ? " (AdamW: exp_avg, exp_avg_sq)"
                                  : tag == MemTag::activation ? " (not sharded)"
                                                              : "";
    return std::string(breakdown_label(tag)) + std::string(note);
  };
  std::vector<std::string> header = {"Tag", "What"};
  for (const MemoryRow& row : t.rows) header.push_back(row.label + " (" + unit + ")");
  header.push_back("Scales as 1/W?");
  std::vector<MarkdownTable::Align> align(header.size(), MarkdownTable::Align::right);
  align[0] = align[1] = align.back() = MarkdownTable::Align::left;
  MarkdownTable breakdown(header, align);
  for (MemTag tag : kAllMemTags) {
    std::vector<std::string> cells = {std::string(mem_tag_name(tag)), label(tag)};
    for (const MemoryRow& row : t.rows)
      cells.push_back(
          format("%.3f / %.3f", byte_unit.of(tag_bytes(row.measured, tag)), byte_unit.of(tag_bytes(row.formula, tag))));
    cells.push_back(tag_scaling(t, tag));
    breakdown.add_row(cells);
  }
  md += breakdown.str();
  md += "\n**Analysis:**\n\n"
        "- The sharded state (param_shard, grad_shard, optim_state: 16 bytes a parameter with AdamW in f32) scales as "
        "1/W, up to the padding of each FlatParameter to a multiple of W.\n"
        "- What does not shard: the activations (every rank runs its own micro-batch through the whole model), the "
        "gathered units (param_full, grad_full: the root unit, gathered from its forward to the end of backward, plus "
        "one Block at a time under SYNC) and the staging buffers. They set a floor under the per-rank memory, so the "
        "total's reduction falls short of W once the sharded state is small beside them.\n"
        "- Tags peak at different moments (activations at the start of backward, a Block's gathered parameters and "
        "gradients inside its backward), so the total peaks below the sum of the tags' peaks.\n\n";
  return md;
}

}  // namespace fsdplab::app
