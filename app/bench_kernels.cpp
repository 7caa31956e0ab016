// `fsdplab bench --what kernels` — a training step's GPU time, kernel by kernel.
//
// One training of warmup + steps + 1 steps (the last not measured; record_training, bench_train.hpp): one rank,
// the single-rank baseline; W >= 2, FSDP ASYNC, ranks as threads, on cuda sharing one GPU. Rank 0's device
// work in the measured steps is grouped three ways
// (engine/trace/kernel_breakdown.hpp), each group with
//   calls/step  how many kernels (copies, memsets) of the group ran a step
//   ms/step     their summed durations a step
//   share %     of the step's GPU time: the sum over every group, so kernels that ran at once on different
//               streams both count, the shares add up to 100 % and the GPU time may exceed the step;
// first by kernel, the table to read for the next bottleneck, then by phase (forward, backward, optimizer)
// and by kind (compute, each collective, copies).
// Where the times come from:
//   cuda  CUPTI's kernel, copy and memset records (engine/cuda/cupti_tracer.hpp), named as the GPU ran them
//         (cuBLAS's GEMM kernels, ours, "Memcpy DtoD"); where CUPTI cannot trace (Nsight holds it), each op's
//         CUDA-event span instead, and the header says so.
//   sim   each op's duration on the virtual clock, grouped by op name. A simulated collective is named after
//         its buffer (all_gather transformer.h.0.flat_param_full): it is grouped by its kind, as a GPU's
//         collective kernels are one kernel whatever buffer they move.
// The step is the host's time from a step's start to its loss being read, the mean of the measured steps, as
// in --what train; on cuda it includes what CUPTI's tracing costs (`--what cupti` measures that).
#include "app/bench_kernels.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "app/bench_cupti.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/trace/kernel_breakdown.hpp"
#include "engine/train/run_device.hpp"

namespace fsdplab::app {
namespace {

std::string kernel_group(const TraceEvent& e) { return e.name; }
std::string phase_group(const TraceEvent& e) { return e.phase.empty() ? "(no phase)" : e.phase; }
std::string kind_group(const TraceEvent& e) { return std::string(category_name(e.category)); }

void print_table(const char* what, const KernelBreakdown& breakdown) {
  int width = static_cast<int>(std::string_view(what).size());
  for (const KernelGroup& g : breakdown.groups) width = std::max(width, static_cast<int>(g.key.size()));
  std::printf("| %-*s | calls/step |  ms/step | share %% |\n", width, what);
  const std::string rule(static_cast<std::size_t>(width) + 2, '-');
  std::printf("|%s|------------|----------|---------|\n", rule.c_str());
  for (const KernelGroup& g : breakdown.groups)
    std::printf("| %-*s | %10.1f | %8.3f | %7.2f |\n", width, g.key.c_str(), g.calls_per_step, g.ms_per_step,
                100 * g.share);
}

}  // namespace

void bench_kernels(const TrainBenchOptions& bench) {
  RunConfig run = bench.run_config(bench.device);
  run.cupti = true;  // the kernels are CUPTI's records (cuda only)
  const DeviceSpec device = run_device_spec(run, PresetCatalog::builtin(), false);
  const bool on_gpu = device.kind == DeviceKind::cuda;

  std::printf(
      "fsdplab bench --what kernels: %s %s, %d rank%s x %lld x %lld tokens, %s%s; %d steps after %d warmup; "
      "device %s; impl: %s\n",
      bench.model.c_str(), bench.preset.c_str(), bench.world, bench.world == 1 ? "" : "s",
      static_cast<long long>(bench.micro_batch), static_cast<long long>(bench.seq), bench.compute().c_str(),
      bench.world > 1 ? ", FSDP ASYNC" : "", bench.steps, bench.warmup,
      on_gpu ? ("cuda (GPU " + std::to_string(device.gpu) + ", wall clock" +
                (bench.world == 1 ? ""
                                  : ", ranks sharing it (" + std::string(sm_split_description(bench.sm_split)) + ")") +
                (bench.emulate_link ? ", emulated link " + device.link.name : "") + ")")
                   .c_str()
             : ("sim (" + device.preset.name + ", virtual time)").c_str(),
      bench.world > 1 ? impl_name(bench.impl).c_str() : "none (the single-rank baseline)");
  std::fflush(stdout);  // the header before the steps, which take a while
  const CuptiTotals before = on_gpu ? cupti_totals() : CuptiTotals{};
  const FsdpOptions fsdp_options = bench.async_fsdp_options();
  const RecordedTraining trained = record_training(bench, run, bench.world > 1 ? &fsdp_options : nullptr);
  const bool kernels = on_gpu && cupti_totals().records > before.records;
  const char* source = kernels ? "CUPTI's kernel, copy and memset records"
                       : on_gpu ? "each op's CUDA-event span (CUPTI traced nothing: the warning above says why), ops "
                                  "grouped by name, collectives by kind"
                                : "each op's virtual duration, ops grouped by name, collectives by kind";
  const KernelBreakdown by_kernel =
      kernel_breakdown(trained.rank0_events, 0, bench.warmup, bench.steps, kernels ? kernel_group : op_group);
  check(!by_kernel.groups.empty(), "bench --what kernels: rank 0 traced no device work in steps ", bench.warmup,
        " to ", bench.warmup + bench.steps - 1);
  std::printf("Rank 0's device work in the measured steps, from %s.\n", source);
  std::printf("step %.3f ms; GPU time %.3f ms a step: the sum of the rows, where work that ran at once on different "
              "streams counts twice, so it may exceed the step.\n\n",
              trained.step_ms, by_kernel.gpu_ms_per_step);
  print_table("kernel", by_kernel);
  std::printf("\n");
  print_table("phase", kernel_breakdown(trained.rank0_events, 0, bench.warmup, bench.steps, phase_group));
  std::printf("\n");
  print_table("kind", kernel_breakdown(trained.rank0_events, 0, bench.warmup, bench.steps, kind_group));
}

}  // namespace fsdplab::app
