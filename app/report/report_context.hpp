// report_context.hpp — what every section of `fsdplab report` reads and adds to: the options, the device
// the measurements that run on a device use, the figures to draw, and a scratch folder.
//
// A section is a function of the context returning its Markdown: each table under a fenced block of the
// fsdplab commands that regenerate it (markdown_table.hpp), a figure where one helps (figure() leaves a
// marker that cmd_report.cpp replaces by the image, or by why it was not drawn).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "app/bench_overlap.hpp"
#include "app/fsdp_cli_options.hpp"
#include "app/report/report_figures.hpp"
#include "engine/runtime/device_factory.hpp"

namespace fsdplab::app {

struct ReportOptions {
  std::string device = "sim";  // sim or cuda
  std::string out = "writeup";
  bool quick = false;
  std::vector<std::string> only;  // section names; empty: every section
};

struct ReportContext {
  ReportOptions options;
  // --device cuda (a GPU usable, checked before anything runs): trainings and collectives run on GPU
  // `gpu.gpu`; dry runs (shapes, time and memory only) are always the sim device's.
  bool cuda = false;
  DeviceSpec gpu;
  std::string gpu_name;  // "NVIDIA H100 80GB HBM3", empty on sim
  // The sim device's presets every simulated measurement uses: the lab's two-GPU workstation, where
  // communication is a visible share of a step.
  std::string device_preset = "rtx-4090";
  std::string link_preset = "pcie4-no-p2p";
  std::filesystem::path out_dir;
  std::filesystem::path work_dir;  // scratch (saved parameters); removed when the report is done
  std::vector<Figure> figures;

  // "sim" or "cuda": the --device of the commands a table cites.
  std::string device_flag() const { return cuda ? "cuda" : "sim"; }
  // Adds a figure and returns the marker its image (or the reason it is missing) replaces.
  std::string figure(Figure f);
};

// The report's sections, in the order of the assignment's writeup template, each by the name --only takes.
std::string report_tradeoffs(ReportContext& ctx);     // tradeoffs:     2.3, 2.4, 2.5
std::string report_correctness(ReportContext& ctx);   // correctness:   3.2, 3.3
std::string report_memory(ReportContext& ctx);        // memory:        4.1
std::string report_lecture(ReportContext& ctx);       // lecture:       4.1, the lecture's Llama 70B on 128 GPUs
std::string report_communication(ReportContext& ctx); // communication: 4.2
std::string report_end_to_end(ReportContext& ctx);    // end-to-end:    4.3
std::string report_scaling(ReportContext& ctx);       // scaling:       4.4
std::string report_hybrid(ReportContext& ctx);        // hybrid:        6.1, bonus task 8 on two nodes

// The header's facts about this machine (with the commit fsdplab was built from: build_commit.hpp).
std::string report_hostname();
std::string report_cpu();

// The GPT-2 size and per-rank batch of the memory (4.1), trade-off (2.3-2.5) and end-to-end (4.3) tables: one
// configuration measured three ways.
struct Gpt2Scale {
  std::string preset;
  long long micro_batch;
  long long seq;
  // "--preset gpt2 --micro-batch 4 --seq 1024": the scale on a bench's command line.
  std::string bench_flags() const {
    return "--preset " + preset + " --micro-batch " + std::to_string(micro_batch) + " --seq " + std::to_string(seq);
  }
};
Gpt2Scale gpt2_scale(const ReportContext& ctx);

// `bench --what overlap` at scale `s` on `world` ranks of the sim device (`device_preset`, `link_preset`) with
// FSDP as `fsdp` (default: fsdplab run's defaults): the runs of the end-to-end (4.3) and hybrid (6.1) sections.
OverlapBenchOptions gpt2_overlap_bench(const Gpt2Scale& s, int world, const std::string& device_preset,
                                       const std::string& link_preset, const FsdpFlags& fsdp = FsdpFlags{});

}  // namespace fsdplab::app
