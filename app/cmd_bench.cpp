// `fsdplab bench` — benchmarks that print numbers. Wall-clock times here are the host's (this
// machine's CPU), not the sim device's virtual clock; ratios are measured side by side in one run.
//
//   --what ops     the sim device's matmul (the op path: checks, race detector, OpenBLAS inside)
//                  against OpenBLAS's cblas_sgemm called directly, and gpt2 training steps/s.
//   --what memory  the writeup's memory table (section 4.1): per-rank peak memory of the baseline and of
//                  FSDP at W = 2, 4, 8 with the per-rank micro-batch fixed, and each tag's peak as the
//                  memory ledger measured it beside the analytic model (engine/fsdp/memory_model.hpp).
//                  Dry runs on the sim device: bytes, not wall-clock times, and the same on every machine.
//   --what train   training throughput on the device a run gets (cuda: wall clock; sim: virtual time), the
//                  GEMMs' share of the step and of the preset's peak, and for W >= 2 SYNC and ASYNC and eta
//                  (app/bench_train.cpp).
//   --what overlap SYNC against ASYNC steps on the sim device's virtual clock: compute-only, comm-only and
//                  ideal times, overlap efficiency, and sweeps of link bandwidth and prefetch
//                  (app/bench_overlap.cpp). Virtual times: the same on every machine.
//   --what ui      the dashboard's frame build time (CPU, headless ImGui) over synthetic traces of 10k, 100k
//                  and 1M events: the timeline all in view and zoomed to 1 %, then every panel (app/bench_ui.cpp).
//   --what cupti   on a GPU, the same FSDP training step with CUPTI's live trace off and on: the step time
//                  each and their ratio, overlap % from CUPTI's records and from the CUDA-event op spans,
//                  records and dropped records (app/bench_cupti.cpp). Takes --what train's options.
//   --what kernels where a training step's GPU time goes: rank 0's kernels (CUPTI's records on cuda, the ops'
//                  virtual durations on sim) grouped by name, then by phase and by kind, each with its calls and
//                  ms per step and its share (app/bench_kernels.cpp). Takes --what train's options.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/bench_cupti.hpp"
#include "app/bench_kernels.hpp"
#include "app/bench_memory.hpp"
#include "app/bench_overlap.hpp"
#include "app/bench_train.hpp"
#include "app/bench_ui.hpp"
#include "app/cli_checks.hpp"
#include "app/commands.hpp"
#include "app/fsdp_cli_options.hpp"
#include "engine/nn/gpt2_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/sim_device.hpp"
#include "engine/runtime/wall_clock.hpp"
#include "engine/tensor/matmul.hpp"
#include "engine/train/run_device.hpp"
#include "engine/train/trainer.hpp"

namespace fsdplab::app {
namespace {

using Clock = std::chrono::steady_clock;

// Best of `repeats` timings of `f`: the least disturbed run on a shared machine.
template <class F>
double best_seconds(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t = Clock::now();
    f();
    best = std::min(best, seconds_since(t));
  }
  return best;
}

void bench_matmul(std::int64_t n) {
  const auto& presets = PresetCatalog::builtin();
  SimDevice device(0, presets.device("h100-sxm"), presets.link("nvlink4"));
  Tensor a = Tensor::empty(device, {n, n}, DType::f32, MemTag::workspace, "a");
  Tensor b = Tensor::empty(device, {n, n}, DType::f32, MemTag::workspace, "b");
  Tensor c = Tensor::empty(device, {n, n}, DType::f32, MemTag::workspace, "c");
  std::vector<float> values(static_cast<std::size_t>(n * n), 0.5f);
  a.copy_from(values);
  b.copy_from(values);
  // cblas_sgemm on host buffers of its own: the device tensors' memory is for ops (Device::check_raw_pointer).
  std::vector<float> host_c(values.size());
  const Stream s = device.stream(Lane::compute);
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  // Interleaved, so both see the same machine load.
  double sim = 1e30, blas = 1e30;
  for (int round = 0; round < 3; ++round) {
    sim = std::min(sim, best_seconds(2, [&] { matmul(s, a, b, c); }));
    blas = std::min(blas, best_seconds(2, [&] {
                      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                                  static_cast<int>(n), 1.f, values.data(), static_cast<int>(n), values.data(),
                                  static_cast<int>(n), 0.f, host_c.data(), static_cast<int>(n));
                    }));
  }
  std::printf("matmul %5lld^3 f32   sim op %7.1f GFLOP/s   cblas_sgemm %7.1f GFLOP/s   ratio %.3f\n",
              static_cast<long long>(n), flops / sim / 1e9, flops / blas / 1e9, blas / sim);
  device.synchronize();
}

void bench_training(const char* preset, std::int64_t batch, std::int64_t seq, int steps) {
  RunConfig run;
  run.model = "gpt2";
  run.preset = preset;
  run.batch = batch;
  run.seq = seq;
  run.steps = steps + 1;  // the first step warms up and is not timed
  Clock::time_point last = Clock::now();
  double timed = 0;
  train_baseline(run, PresetCatalog::builtin(), [&](const StepReport& r) {
    if (r.step > 0) timed += seconds_since(last);
    last = Clock::now();
  }, nullptr);
  std::printf("gpt2 %-10s batch %lld x seq %lld   %7.3f steps/s   (%.1f ms a step, %d steps)\n", preset,
              static_cast<long long>(batch), static_cast<long long>(seq), steps / timed, 1e3 * timed / steps, steps);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Benchmarks that print numbers (ops: host wall-clock times; memory: bytes; "
                                          "overlap: virtual times; train, kernels: the run's device, wall clock on "
                                          "cuda; cupti: tracing's cost on cuda)");
  auto what = std::make_shared<std::string>("ops");
  auto memory = std::make_shared<MemoryBenchOptions>();
  auto fsdp = std::make_shared<FsdpFlags>();
  auto overlap = std::make_shared<OverlapBenchOptions>();
  auto train = std::make_shared<TrainBenchOptions>();
  auto sm_split = std::make_shared<std::string>("auto");
  cmd->add_option("--what", *what, "What to measure: ops, memory, overlap, train, cupti, kernels or ui")
      ->check(CLI::IsMember({"ops", "memory", "overlap", "train", "cupti", "kernels", "ui"}));
  // The model's size and tokens, shared by every FSDP measurement (same defaults: gpt2 small, 4 x 1024 tokens per
  // rank); with --strategy and --hybrid-group below, what memory and overlap take and the others refuse.
  std::vector<CLI::Option*> memory_options = {
      cmd->add_option("--preset", memory->preset,
                      "memory, overlap, train, cupti, kernels: model size (test-tiny, test-small, gpt2, ...)")
          ->check(non_empty("a size's name (leave the option out for the default)")),
      cmd->add_option("--micro-batch", memory->micro_batch,
                      "memory, overlap, train, cupti, kernels: sequences per rank")
          ->check(CLI::Range(1, 1 << 16)),
      cmd->add_option("--seq", memory->seq,
                      "memory, overlap, train, cupti, kernels: tokens per sequence (default 1024, or a smaller gpt2 "
                      "preset's whole context)")
          ->check(CLI::Range(1, 1 << 20))};
  for (CLI::Option* o : add_fsdp_flags(*cmd, *fsdp, {FsdpFlag::strategy, FsdpFlag::hybrid_group}, "memory, overlap"))
    memory_options.push_back(o);
  // Shared by every FSDP measurement: memory, overlap, train, cupti and kernels (the last three: precision, reduction
  // dtype, the embedding's gradient and impl only).
  const std::vector<CLI::Option*> fsdp_options = add_fsdp_flags(
      *cmd, *fsdp, {FsdpFlag::precision, FsdpFlag::reduce_dtype, FsdpFlag::embedding_grad, FsdpFlag::impl},
      "memory, overlap, train, cupti, kernels");
  // Shared by overlap, train, cupti and kernels.
  const std::vector<CLI::Option*> model_options = {
      cmd->add_option("--model", overlap->model, "overlap, train, cupti, kernels: the model (gpt2, llama)")
          ->check(CLI::IsMember({"gpt2", "llama"})),
      cmd->add_option("--world", overlap->world, "overlap, cupti: ranks (default 2); train, kernels: ranks (default 1)")
          ->check(CLI::Range(1, 1024)),
      cmd->add_option("--device-preset", overlap->device_preset,
                      "overlap; train, kernels on sim: the device simulated (see `fsdplab presets`; default h100-sxm); "
                      "train on cuda: the GEMM peak its throughput is compared with")
          ->check(non_empty("a device preset's name")),
      cmd->add_option("--link-preset", overlap->link_preset,
                      "overlap: link preset, default the device preset's; train, kernels: the link simulated on sim, "
                      "emulated on cuda with --emulate-link (default pcie4-no-p2p)")
          ->check(non_empty("a link preset's name (leave the option out for the default)"))};
  const std::vector<CLI::Option*> train_options = {
      cmd->add_option("--device", train->device,
                      "train, kernels: auto (cuda where a GPU is usable, else an error saying why), sim or cuda")
          ->check(CLI::IsMember({"auto", "sim", "cuda"})),
      cmd->add_option("--steps", train->steps, "train, cupti, kernels: measured steps (default 10)")
          ->check(CLI::Range(1, 1 << 20)),
      cmd->add_option("--warmup", train->warmup, "train, cupti, kernels: steps before the measured ones (default 3)")
          ->check(CLI::Range(0, 1 << 20)),
      cmd->add_option(
             "--vocab-multiple", train->vocab_multiple,
             "train, cupti, kernels (gpt2): store the vocabulary padded to a multiple of this (default 128; 1: "
             "unpadded, to measure what the padding gains)")
          ->check(CLI::Range(1, 1 << 16)),
      cmd->add_option("--attention", train->attention,
                      "train, cupti, kernels: auto (flash attention in bf16, exact in f32; default), exact or flash "
                      "(in f32: an online softmax, as PyTorch's f32 SDPA)")
          ->check(CLI::IsMember({"auto", "exact", "flash"})),
      cmd->add_flag("--emulate-link", train->emulate_link,
                    "train, cupti, kernels (cuda, W >= 2): hold each collective for the link preset's time; train: "
                    "adds the compute row and eta"),
      cmd->add_option(
             "--sm-split", *sm_split,
             "train, cupti, kernels (cuda, W >= 2): each rank on its own equal share of the GPU's SMs, as on a "
             "GPU of its own, where the driver can split them (auto, default; on: split or fail), or the "
             "ranks' kernels share every SM (off)")
          ->check(CLI::IsMember({"auto", "on", "off"}))};
  std::vector<CLI::Option*> overlap_options = {
      cmd->add_option("--presets", overlap->presets_file, "overlap: preset file to use instead of the built-in one")
          ->check(non_empty("a preset file")),
      cmd->add_option(
             "--bandwidths", overlap->bandwidth_scales,
             "overlap: link bandwidths of the sweep, as multiples of the link preset's (default 0.25 0.5 1 2 4)")
          ->delimiter(',')
          ->check(finite_range(0.001, 1000, "a multiple of the link's bandwidth")),
      cmd->add_option("--trace", overlap->trace_path,
                      "overlap: write the headline ASYNC dry run's Chrome trace (both steps, every rank) here")
          ->check(non_empty("a file"))};
  for (CLI::Option* o : add_node_flags(*cmd, overlap->nodes, "overlap")) overlap_options.push_back(o);
  // The ASYNC configuration of overlap's headline and bandwidth sweep.
  for (CLI::Option* o : add_fsdp_flags(*cmd, *fsdp, {FsdpFlag::prefetch, FsdpFlag::max_inflight, FsdpFlag::buffers},
                                       "overlap"))
    overlap_options.push_back(o);
  cmd->callback([cmd, what, memory, fsdp, overlap, train, sm_split, memory_options, fsdp_options, model_options,
                 overlap_options, train_options] {
    if (*what != "overlap") {
      for (const CLI::Option* o : overlap_options)
        check(o->count() == 0, o->get_name(), " configures --what overlap; this run is --what ", *what);
    }
    const bool training = *what == "train" || *what == "cupti" || *what == "kernels";
    if (!training) {
      for (const CLI::Option* o : train_options)
        check(o->count() == 0, o->get_name(), " configures --what train, cupti or kernels; this run is --what ", *what);
    }
    if (*what != "overlap" && !training) {
      for (const CLI::Option* o : model_options)
        check(o->count() == 0, o->get_name(),
              " configures --what overlap, train, cupti or kernels; this run is --what ", *what);
    }
    // --seq left out: 1024 tokens, or a smaller GPT-2's whole position table (test-small's 64), so that a small preset
    // named alone runs rather than refusing a --seq nobody gave.
    const auto& gpt2_sizes = gpt2_preset_names();
    if (cmd->get_option("--seq")->count() == 0 && overlap->model == "gpt2" &&
        std::find(gpt2_sizes.begin(), gpt2_sizes.end(), memory->preset) != gpt2_sizes.end())
      memory->seq = std::min(memory->seq, gpt2_preset(memory->preset).n_positions);
    const FsdpChoice choice = parse_fsdp_flags(*fsdp);
    if (training) {
      TrainBenchOptions options = *train;
      options.impl = choice.impl;
      options.model = overlap->model;
      // train and kernels: one rank unless asked; cupti: two, so there is communication to overlap.
      options.world = cmd->get_option("--world")->count() ? overlap->world : *what == "cupti" ? 2 : 1;
      options.device_preset = overlap->device_preset;
      if (cmd->get_option("--link-preset")->count()) {
        check_link_used(overlap->link_preset, options.world);
        options.link_preset = overlap->link_preset;
      }
      options.preset = memory->preset;
      options.micro_batch = memory->micro_batch;
      options.seq = memory->seq;
      options.precision = fsdp->precision;
      options.reduce_dtype = fsdp->reduce_dtype;
      options.embedding_grad = fsdp->embedding_grad;
      options.sm_split = *sm_split;
      for (const char* flag : {"--strategy", "--hybrid-group"})
        check(cmd->get_option(flag)->count() == 0, flag, " configures --what memory or overlap; --what ", *what,
              " shards fully");
      check(*what != "cupti" || cmd->get_option("--device")->count() == 0 || options.device == "cuda", "--device ",
            options.device, " with --what cupti: CUPTI traces the cuda device");
      options.check_runnable(*what);  // the device's refusals too, before the warnings
      warn_of_impl_choice(choice, *fsdp);
      if (*what == "cupti") {
        bench_cupti(options);
      } else if (*what == "kernels") {
        bench_kernels(options);
      } else {
        bench_train(options);
      }
      return;
    }
    if (*what == "memory") {
      warn_of_impl_choice(choice, *fsdp);
      bench_memory(*memory, choice);
      return;
    }
    if (*what == "overlap") {
      check(overlap->world >= 2, "--world ", overlap->world,
            ": --what overlap compares SYNC and ASYNC over 2 or more ranks");
      warn_of_impl_choice(choice, *fsdp);
      OverlapBenchOptions options = *overlap;
      options.preset = memory->preset;
      options.micro_batch = memory->micro_batch;
      options.seq = memory->seq;
      options.async = choice.options;
      options.impl = choice.impl;
      bench_overlap(options);
      return;
    }
    for (const CLI::Option* o : memory_options)
      check(o->count() == 0, o->get_name(), " configures an FSDP measurement (--what memory, overlap, train, cupti or "
            "kernels); this run is --what ", *what);
    for (const CLI::Option* o : fsdp_options)
      check(o->count() == 0, o->get_name(), " configures FSDP: --what memory, overlap, train, cupti or kernels; this "
            "run is --what ", *what);
    if (*what == "ui") {
      bench_ui();
      return;
    }
    std::printf("fsdplab bench --what %s (wall clock of this host; OpenBLAS single-threaded)\n", what->c_str());
    for (std::int64_t n : {256, 512, 1024}) bench_matmul(n);
    bench_training("test-tiny", 8, 16, 20);
    bench_training("gpt2", 1, 64, 2);
  });
}

}  // namespace fsdplab::app
