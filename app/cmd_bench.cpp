// `fsdplab bench` — benchmarks that print numbers. Wall-clock times here are the host's (this
// machine's CPU), not the sim device's virtual clock; ratios are measured side by side in one run.
//
//   --what ops   the sim device's matmul (the op path: checks, race detector, OpenBLAS inside)
//                against OpenBLAS's cblas_sgemm called directly, and gpt2 training steps/s.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "app/commands.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/sim_device.hpp"
#include "engine/tensor/matmul.hpp"
#include "engine/train/trainer.hpp"

namespace fsdplab::app {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
  const Stream s = device.stream(Lane::compute);
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  // Interleaved, so both see the same machine load.
  double sim = 1e30, blas = 1e30;
  for (int round = 0; round < 3; ++round) {
    sim = std::min(sim, best_seconds(2, [&] { matmul(s, a, b, c); }));
    blas = std::min(blas, best_seconds(2, [&] {
                      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                                  static_cast<int>(n), 1.f, a.f32(), static_cast<int>(n), b.f32(), static_cast<int>(n),
                                  0.f, c.f32(), static_cast<int>(n));
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
  auto* cmd = app.add_subcommand("bench", "Benchmarks that print numbers (host wall-clock times)");
  auto what = std::make_shared<std::string>("ops");
  cmd->add_option("--what", *what, "What to measure")->check(CLI::IsMember({"ops"}));
  cmd->callback([what] {
    std::printf("fsdplab bench --what %s (wall clock of this host; OpenBLAS single-threaded)\n", what->c_str());
    for (std::int64_t n : {256, 512, 1024}) bench_matmul(n);
    bench_training("test-tiny", 8, 16, 20);
    bench_training("gpt2", 1, 64, 2);
  });
}

}  // namespace fsdplab::app
