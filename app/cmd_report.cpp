// `fsdplab report` — the writeup's tables, measured: runs the experiments behind every table of the
// assignment's writeup template and writes them as Markdown, each under the fsdplab commands
// that regenerate it, with the figures as PNG files beside it (app/report/report_figures.hpp).
//
//   fsdplab report [--device sim|cuda] [--out DIR] [--quick] [--only SECTION,...]
//
// The sections (app/report/, one file each): tradeoffs (2.3-2.5), correctness (3.2, 3.3), memory (4.1),
// lecture (the lecture's Llama 70B on 128 GPUs), communication (4.2), end-to-end (4.3), scaling (4.4),
// hybrid (6.1, the bonus task 8 on two nodes).
// --quick (CI) runs the same tables at smaller sizes, fewer steps and shorter sweeps, within two minutes on
// two cores. --device cuda trains and times collectives on the GPU (refused where none is usable); dry runs
// (memory, scaling, the lecture, hybrid) are the sim device's on either.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "app/build_commit.hpp"
#include "app/cli_checks.hpp"
#include "app/commands.hpp"
#include "app/report/markdown_table.hpp"
#include "app/report/report_context.hpp"
#include "app/shell_quote.hpp"
#include "app/temporary_folders.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/output_file.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/runtime/wall_clock.hpp"
#include "engine/train/run_device.hpp"

#ifdef FSDPLAB_HAVE_CUDA
#include "engine/cuda/gpu_inventory.hpp"
#endif

namespace fsdplab::app {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Section {
  const char* name;
  std::string (*run)(ReportContext&);
};

// In the writeup template's order.
constexpr Section kSections[] = {
    {"tradeoffs", report_tradeoffs},         {"correctness", report_correctness}, {"memory", report_memory},
    {"lecture", report_lecture},             {"communication", report_communication},
    {"end-to-end", report_end_to_end},       {"scaling", report_scaling},         {"hybrid", report_hybrid},
};

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const Section& s : kSections) names.emplace_back(s.name);
  return names;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

std::string command_of(const ReportOptions& o, bool default_out) {
  std::string c = "fsdplab report --device " + o.device;
  if (!default_out) c += " --out " + shell_quote(o.out);
  if (o.quick) c += " --quick";
  if (!o.only.empty()) {
    std::string list;
    for (const std::string& s : o.only) list += (list.empty() ? "" : ",") + s;
    c += " --only " + list;
  }
  return c;
}

std::string header(const ReportContext& ctx, double seconds, const std::vector<FigureResult>& figures) {
  const PresetCatalog& presets = PresetCatalog::builtin();
  const DevicePreset& device = presets.device(ctx.device_preset);
  const LinkPreset& link = presets.link_for(device, ctx.link_preset);
  std::string md = "# fsdplab report: the writeup's tables, measured\n\n";
  md += "Every table below stands under the fsdplab commands that regenerate it; the section numbers are the writeup "
        "template's. Made by:\n\n";
  std::string out = ctx.options.out;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  md += command_block({command_of(ctx.options, out == "writeup")});
  md += "\n";
  MarkdownTable table({"", ""}, {MarkdownTable::Align::left, MarkdownTable::Align::left});
  table.add_row({"Machine", report_hostname() + ", " + report_cpu()});
  const std::string sim = "sim (host numerics with OpenBLAS on a virtual clock): " + device.name + " (" +
                          device.description + ") + link " + link.name + " (" + format("%g", link.bandwidth / 1e9) +
                          " GB/s, " + format("%g", link.latency_us) + " us a ring step)";
  if (ctx.cuda) {
    table.add_row({"Device", "cuda: " + ctx.gpu_name + " (GPU " + std::to_string(ctx.gpu.gpu) +
                                 "), for the trainings and collectives; dry runs on " + sim});
  } else {
    table.add_row({"Device", sim});
  }
  table.add_row({"Presets", "simulated times: " + device.name + " + " + link.name +
                                " (the lab's two-GPU workstation) unless a section names another; memory in bytes, "
                                "the same for every preset"});
  table.add_row({"fsdplab commit", build_commit()});
  table.add_row({"Form", ctx.options.quick ? "quick (`--quick`): the same tables at smaller sizes, fewer steps and "
                                             "shorter sweeps; `fsdplab report` without it makes the full one"
                                           : "full"});
  table.add_row(
      {"Run time", format("%.1f s on this machine (the report's own experiments, figures included)", seconds)});
  table.add_row({"Generated", utc_now()});
  md += table.str();
  md += "\n";
  int drawn = 0;
  for (const FigureResult& f : figures) drawn += f.drawn ? 1 : 0;
  md += format("**Figures:** %d of %zu drawn as PNG beside this file by the dashboard's rendering path (Dear ImGui on "
               "OpenGL).", drawn, figures.size());
  if (drawn < static_cast<int>(figures.size())) {
    md += " Not drawn:\n\n";
    for (const FigureResult& f : figures)
      if (!f.drawn) md += "- `" + f.file + "` (" + f.title + "): " + f.why + "\n";
  } else {
    md += "\n";
  }
  return md + "\n";
}

std::string figure_markdown(const FigureResult& f) {
  if (f.drawn) return "![" + f.title + "](" + f.file + ")\n\n*Figure: " + f.title + "*\n\n";
  return "> **Figure not drawn:** `" + f.file + "` (" + f.title + "): " + f.why + "\n\n";
}

void run_report(const ReportOptions& options) {
  const auto start = Clock::now();
  TemporaryFolders temporary("fsdplab report");
  ReportContext ctx;
  ctx.options = options;
  // Every refusal before anything runs: the device, then the folder.
  if (options.device == "cuda") {
    if (const auto why = cuda_unavailable())
      fail("--device cuda: ", *why,
           "; `fsdplab report --device sim` (the default) makes every table on the sim device");
    RunConfig probe;
    probe.device = "cuda";
    ctx.gpu = run_device_spec(probe, PresetCatalog::builtin(), false);
    ctx.cuda = true;
    ctx.gpu_name = "GPU " + std::to_string(ctx.gpu.gpu);
#ifdef FSDPLAB_HAVE_CUDA
    for (const GpuInfo& g : probe_gpus().gpus)
      if (g.index == ctx.gpu.gpu) ctx.gpu_name = g.name;
#endif
  }
  check_output_folder(options.out, "--out");
  ctx.out_dir = options.out;
  // A folder this report makes is its own to remove if it ends short; one that was there is the user's.
  const bool out_was_there = fs::exists(ctx.out_dir);
  std::error_code ec;
  fs::create_directories(ctx.out_dir, ec);
  check(!ec, "--out '", ctx.out_dir.string(), "': cannot create the folder: ", ec.message());
  if (!out_was_there) temporary.remove_at_end(ctx.out_dir);
  // The scratch folder of the runs' traces and checkpoints, removed however the report ends.
  ctx.work_dir = temporary.make_scratch("fsdplab-report-");

  std::printf("fsdplab report: %s form on %s, into %s\n", options.quick ? "quick" : "full",
              ctx.cuda ? ("cuda (" + ctx.gpu_name + ")").c_str() : "the sim device", ctx.out_dir.string().c_str());
  std::fflush(stdout);
  std::string body;
  for (const Section& s : kSections) {
    if (!options.only.empty() && std::find(options.only.begin(), options.only.end(), s.name) == options.only.end())
      continue;
    const auto t = Clock::now();
    body += s.run(ctx);
    std::printf("  %-14s %6.1f s\n", s.name, seconds_since(t));
    std::fflush(stdout);
  }
  const auto t = Clock::now();
  const std::vector<FigureResult> figures = render_figures(ctx.figures, ctx.out_dir);
  std::printf("  %-14s %6.1f s\n", "figures", seconds_since(t));
  for (std::size_t i = 0; i < figures.size(); ++i) {
    const std::string marker = "@@FIGURE:" + std::to_string(i) + "@@\n";
    const std::size_t at = body.find(marker);
    check(at != std::string::npos, "report: figure ", i, "'s marker is missing");
    body.replace(at, marker.size(), figure_markdown(figures[i]));
  }
  const double seconds = seconds_since(start);
  std::string name = "report";
  for (const std::string& s : options.only) name += "_" + s;
  const fs::path path = ctx.out_dir / (name + ".md");
  write_output_file(path, "--out", [&](std::ostream& out) { out << header(ctx, seconds, figures) << body; });
  temporary.keep(ctx.out_dir);
  int drawn = 0;
  for (const FigureResult& f : figures) drawn += f.drawn ? 1 : 0;
  std::printf("report: %s (%.1f s); figures: %d of %zu drawn%s\n", path.string().c_str(), seconds, drawn,
              figures.size(), drawn < static_cast<int>(figures.size()) ? " (the report says why)" : "");
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand("report", "Run the experiments behind the writeup's tables and write them as Markdown "
                                           "with figures (default: writeup/report.md)");
  cmd->add_option("--device", options->device,
                  "sim (default; virtual time) or cuda (trainings and collectives on the GPU)")
      ->check(CLI::IsMember({"sim", "cuda"}));
  cmd->add_option("--out", options->out,
                  "Folder for report.md and its figures (created if missing, and removed again if the report is "
                  "stopped or fails)")
      ->capture_default_str()
      ->check(non_empty("a folder"));
  cmd->add_flag("--quick", options->quick,
                "Smaller sizes, fewer steps, shorter sweeps: every table within ~2 minutes (CI)");
  cmd->add_option("--only", options->only, "Only these sections, written to report_<SECTION>.md: " + [] {
        std::string list;
        for (const std::string& s : section_names()) list += (list.empty() ? "" : ", ") + s;
        return list;
      }())
      ->delimiter(',')
      ->check(CLI::IsMember(section_names()));
  cmd->callback([options] { run_report(*options); });
}

}  // namespace fsdplab::app
