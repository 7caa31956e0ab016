// `fsdplab bench --what train` — steps per second of real training, on whichever device the run gets.
//
// Each configuration trains warmup + steps + 1 steps and reports the mean of the measured steps (the one
// after them only lets the last prepare the next as any other does):
//   step       the host's time from the start of a step to its loss being read (the step loop waits for
//              the device there), so on cuda it is wall-clock time including every launch;
//   tokens/s   the tokens of all ranks over the mean step;
//   GEMM %     the share of the step rank 0's matmuls take (their op times: CUDA events on cuda);
//   GEMM TFLOP/s and % of peak: the matmuls' FLOPs over their time, against the device preset's matmul
//              peak for the dtype (--device-preset: pick the one that matches the GPU).
// With W >= 2 (FSDP, ranks as threads; on cuda they share one GPU) it runs SYNC and ASYNC and, with an
// emulated link on cuda, the ASYNC schedule without it (compute: what the step takes when communication
// is nearly free) to give ideal = max(compute, comm) and eta = (T_sync - T_async) / (T_sync - ideal), with
// comm the link's busy time (the sum of rank 0's collectives, which take the link one at a time). Then where
// the ASYNC step's communication went unhidden, collective by collective (exposed_communication.hpp), and where its
// device work took longer than SYNC's, op by op (kernel_changes): ranks sharing one GPU slow each other's kernels.
#include "app/bench_train.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/trace/trace_metrics.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_device.hpp"
#include "engine/train/trainer.hpp"
#include "labs/student_tasks.hpp"

namespace fsdplab::app {

FsdpOptions TrainBenchOptions::async_fsdp_options() const {
  FsdpOptions options;
  options.param_dtype = parse_dtype(precision);
  options.reduce_dtype = parse_dtype(reduce_dtype);
  options.embedding_grad = parse_embedding_gradient(embedding_grad);
  options.mode = OverlapMode::async;
  return options;
}

RecordedTraining record_training(const TrainBenchOptions& bench, const RunConfig& run,
                                 const FsdpOptions* fsdp_options) {
  std::vector<TraceRecorder> recorders(static_cast<std::size_t>(run.world));
  std::vector<StepReport> reports;
  if (fsdp_options) {
    FsdpRun fsdp;
    fsdp.run = run;
    fsdp.options = *fsdp_options;
    fsdp.tasks = tasks_for(bench.impl);
    for (TraceRecorder& r : recorders) fsdp.sinks.push_back(&r);
    reports = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  } else {
    RunConfig baseline = run;
    baseline.baseline_precision = parse_dtype(bench.precision);  // bf16: mixed precision, as FSDP's rows
    reports = train_baseline(baseline, PresetCatalog::builtin(), nullptr, &recorders.front());
  }
  RecordedTraining out;
  out.rank0_events = recorders.front().data().events;
  for (const StepReport& r : reports)
    if (bench.measured(r.step)) out.step_ms += ns_to_ms(r.end - r.begin);
  out.step_ms /= static_cast<double>(bench.steps);
  return out;
}

TrainMeasurement measure_training(const TrainBenchOptions& bench, const RunConfig& run,
                                  const FsdpOptions* fsdp_options) {
  const RecordedTraining trained = record_training(bench, run, fsdp_options);
  TrainMeasurement m;
  m.step_ms = trained.step_ms;
  for (const TraceEvent& e : trained.rank0_events) {
    if (!bench.measured(e.step)) continue;
    if (e.lane != Lane::host && !is_communication(e.category)) m.compute_ms += ns_to_ms(e.end - e.begin);
    if (e.name == "matmul") {
      m.gemm_ms += ns_to_ms(e.end - e.begin);
      m.gemm_flops += e.flops;
    }
  }
  std::vector<int> measured_steps;
  for (int s = bench.warmup; s < bench.warmup + bench.steps; ++s) {
    m.comm_ms += ns_to_ms(communication_time(trained.rank0_events, 0, s));
    measured_steps.push_back(s);
  }
  m.exposed = exposed_communication(trained.rank0_events, 0, measured_steps);
  m.ops = kernel_breakdown(trained.rank0_events, 0, bench.warmup, bench.steps, op_group);
  const double n = static_cast<double>(bench.steps);
  m.compute_ms /= n;
  m.gemm_ms /= n;
  m.gemm_flops /= n;
  m.comm_ms /= n;
  return m;
}

namespace {

void print_row(const char* name, const TrainMeasurement& m, double tokens, double peak) {
  const double gemm_tflops = m.gemm_ms > 0 ? m.gemm_flops / (m.gemm_ms * 1e-3) / 1e12 : 0;
  std::printf("| %-7s | %9.3f | %11.0f | %6.1f | %12.1f | %9.1f | %9.3f |\n", name, m.step_ms,
              tokens / (m.step_ms * 1e-3), 100 * m.gemm_ms / m.step_ms, gemm_tflops, 100 * gemm_tflops * 1e12 / peak,
              m.comm_ms);
}

// Where ASYNC's device work took longer or shorter than SYNC's, op by op: on a GPU that ranks share, what running the
// collectives beside the compute costs the compute (the kernels contend for SMs, memory bandwidth and the L2). The
// ops whose time a step changed by 0.5 us or more (the table's last digit), the largest changes first.
void print_schedule_changes(const TrainMeasurement& sync, const TrainMeasurement& async, int steps, bool on_gpu) {
  constexpr std::size_t kRows = 8;
  std::vector<KernelChange> changes = kernel_changes(sync.ops, async.ops);
  std::erase_if(changes, [](const KernelChange& c) { return std::abs(c.change_ms()) < 0.0005; });
  std::printf(
      "\nRank 0's device time a step, SYNC against ASYNC (the mean of the %d measured steps, from its ops' %s; "
      "ops by name, collectives by kind): compute %.3f -> %.3f ms (%+.3f), collectives %.3f -> %.3f ms (%+.3f)",
      steps, on_gpu ? "CUDA-event spans" : "virtual times", sync.compute_ms, async.compute_ms,
      async.compute_ms - sync.compute_ms, sync.comm_ms, async.comm_ms, async.comm_ms - sync.comm_ms);
  if (changes.empty()) {
    std::printf("; no op's time changed.\n");
    return;
  }
  std::printf("; the %s:\n", changes.size() > kRows ? "largest changes" : "ops that changed");
  changes.resize(std::min(changes.size(), kRows));
  int width = 2;
  for (const KernelChange& c : changes) width = std::max(width, static_cast<int>(c.key.size()));
  std::printf("| %-*s | SYNC calls/step | SYNC ms/step | ASYNC calls/step | ASYNC ms/step | change (ms) |\n", width,
              "op");
  std::printf("|%s|-----------------|--------------|------------------|---------------|-------------|\n",
              std::string(static_cast<std::size_t>(width) + 2, '-').c_str());
  for (const KernelChange& c : changes)
    std::printf("| %-*s | %15.1f | %12.3f | %16.1f | %13.3f | %+11.3f |\n", width, c.key.c_str(), c.before_calls,
                c.before_ms, c.after_calls, c.after_ms, c.change_ms());
}

}  // namespace

RunConfig TrainBenchOptions::run_config(std::string device_choice) const {
  RunConfig run;
  run.device = std::move(device_choice);
  run.model = model;
  run.preset = model_has_named_sizes(model) ? preset : "";
  run.world = world;
  run.batch = micro_batch * world;
  run.seq = seq;
  run.vocab_multiple = vocab_multiple;
  run.attention = attention;
  run.steps = warmup + steps + 1;
  run.device_preset = device_preset;
  run.link_preset = link_preset;
  run.emulate_link = emulate_link;
  set_sm_split(run, sm_split);
  return run;
}

void TrainBenchOptions::check_runnable(std::string_view what) const {
  const bool baseline_at_one_rank = what != "cupti";  // cupti runs FSDP on every rank count
  check(steps >= 1 && warmup >= 0, "bench --what ", what, ": --steps ", steps, " --warmup ", warmup,
        "; expected >= 1 measured steps and >= 0 warmup steps");
  check(parse_dtype(precision) != DType::i32, "--precision i32: training computes in f32 or bf16");
  if (world == 1 && baseline_at_one_rank) {
    check(!impl.any_replaced(), "--impl ", impl_name(impl),
          " selects FSDP tasks; the single-rank baseline runs none (use --world 2 or more)");
    check(reduce_dtype == "f32", "--reduce-dtype ", reduce_dtype,
          " is FSDP's gradient reduction; the single-rank baseline reduces nothing (use --world 2 or more)");
    check(embedding_grad == "table", "--embedding-grad ", embedding_grad,
          " is where FSDP sends the embedding's gradient; the single-rank baseline reduces nothing (use --world 2 or "
          "more)");
  } else {
    validate_fsdp_options(async_fsdp_options(), world);
  }
  const RunConfig run = run_config(device);
  build_model(run);
  if (what == "cupti") {
    if (auto why = cuda_unavailable()) fail("bench --what cupti traces a GPU: ", *why);
    return;
  }
  const DeviceKind kind = run_device_spec(run, PresetCatalog::builtin(), false).kind;
  check(kind == DeviceKind::cuda || sm_split == "auto", "--sm-split ", sm_split,
        " splits a GPU's SMs between the ranks sharing it; this bench runs on the sim device: drop --sm-split or add "
        "--device cuda");
  const bool small = preset.starts_with("test-");  // the test sizes step in well under a second on a CPU
  check(device != "auto" || kind != DeviceKind::sim, "--device auto: ", cuda_unavailable().value_or("no usable GPU"),
        ". This bench measures the GPU it runs on; --device sim runs it on the sim device instead, which computes "
        "every value on this CPU",
        small ? ""
              : " (a step of " + model + " '" + preset +
                    "' takes minutes there; add --preset test-small "
                    "--micro-batch 2 --seq 64 for a quick look)");
}

void bench_train(const TrainBenchOptions& bench) {
  RunConfig run = bench.run_config(bench.device);
  // Throughput is measured untraced, and the GEMMs' times are read from the trace's op spans ("matmul"), which
  // CUPTI would replace by kernels; `bench --what cupti` measures what tracing costs.
  run.cupti = false;
  const DeviceSpec device = run_device_spec(run, PresetCatalog::builtin(), false);
  const bool on_gpu = device.kind == DeviceKind::cuda;
  const DType dtype = parse_dtype(bench.precision);
  const double tokens = static_cast<double>(run.batch * bench.seq);
  const double peak = device.preset.matmul_flops(dtype);

  std::printf("fsdplab bench --what train: %s %s, %d rank%s x %lld x %lld tokens, %s; %d steps after %d warmup; "
              "device %s%s; impl: %s\n",
              bench.model.c_str(), bench.preset.c_str(), bench.world, bench.world == 1 ? "" : "s",
              static_cast<long long>(bench.micro_batch), static_cast<long long>(bench.seq), bench.compute().c_str(),
              bench.steps, bench.warmup, on_gpu ? "cuda (GPU " : "sim (",
              on_gpu ? (std::to_string(device.gpu) +
                        (bench.world == 1 ? "" : ", " + std::string(sm_split_description(bench.sm_split))) +
                        ", wall clock)").c_str()
                     : (device.preset.name + ", virtual time)").c_str(),
              bench.world > 1 ? impl_name(bench.impl).c_str() : "none (the single-rank baseline)");
  std::printf(
      "GEMM peak: %.0f TFLOP/s (%s, %s)%s\n\n", peak / 1e12, device.preset.name.c_str(), bench.precision.c_str(),
      bench.world > 1 ? ("; link " + device.link.name +
                         (on_gpu ? (bench.emulate_link ? ", emulated" : ", not emulated (--emulate-link)") : ""))
                            .c_str()
                      : "");
  std::printf("| run     | step (ms) |    tokens/s | GEMM %% | GEMM TFLOP/s | %% of peak | comm (ms) |\n");
  std::printf("|---------|-----------|-------------|--------|--------------|-----------|-----------|\n");
  std::fflush(stdout);  // the header before the steps, which take a while
  if (bench.world == 1) {
    print_row("single", measure_training(bench, run, nullptr), tokens, peak);
    return;
  }
  const FsdpOptions async_options = bench.async_fsdp_options();
  const FsdpOptions sync_options = sync_schedule(async_options);
  const TrainMeasurement sync = measure_training(bench, run, &sync_options);
  const TrainMeasurement async = measure_training(bench, run, &async_options);
  print_row("SYNC", sync, tokens, peak);
  print_row("ASYNC", async, tokens, peak);
  const std::string exposed_heading = "\nExposed communication of rank 0's ASYNC step (the mean of the " +
                                      std::to_string(bench.steps) + " measured steps, from its ops' " +
                                      (on_gpu ? "CUDA-event spans)" : "virtual times)");
  if (!(on_gpu && bench.emulate_link)) {
    std::printf("\neta needs the step without communication: on cuda run with --emulate-link (the compute row is then "
                "the ASYNC step without it); on sim, `fsdplab bench --what overlap` measures it on a free link.\n");
    print_exposed_communication(async.exposed, exposed_heading);
    print_schedule_changes(sync, async, bench.steps, on_gpu);
    return;
  }
  RunConfig free_link = run;
  free_link.emulate_link = false;
  const TrainMeasurement compute = measure_training(bench, free_link, &async_options);
  print_row("compute", compute, tokens, peak);
  const double ideal = std::max(compute.step_ms, async.comm_ms);
  std::printf("\nT_sync %.3f ms, T_async %.3f ms, compute %.3f ms, comm %.3f ms, ideal %.3f ms: eta = %s\n",
              sync.step_ms, async.step_ms, compute.step_ms, async.comm_ms, ideal,
              sync.step_ms > ideal ? std::to_string((sync.step_ms - async.step_ms) / (sync.step_ms - ideal)).c_str()
                                   : "undefined (SYNC is not slower than ideal)");
  print_exposed_communication(async.exposed, exposed_heading);
  print_schedule_changes(sync, async, bench.steps, on_gpu);
}

}  // namespace fsdplab::app
