// bench_overlap.hpp — `fsdplab bench --what overlap`: SYNC against ASYNC FSDP steps on the sim device's
// virtual clock, with the compute-only, communication-only and ideal times, the overlap efficiency, and
// sweeps of link bandwidth and prefetch policy (app/bench_overlap.cpp says what each number is).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/sharding.hpp"

namespace fsdplab::app {

struct OverlapBenchOptions {
  std::string model = "gpt2";
  std::string preset = "gpt2";
  std::int64_t micro_batch = 4;  // sequences per rank; the global batch is W times this
  std::int64_t seq = 1024;
  int world = 2;
  std::string device_preset = "h100-sxm";
  std::string link_preset;  // empty: the device preset's default link
  std::string presets_file;  // empty: the built-in presets
  // The ASYNC configuration of the bandwidth sweep and the headline numbers (its mode is set to async);
  // the prefetch sweep varies it. SYNC is sync_schedule of it.
  FsdpOptions async;
  ImplChoice impl;  // --impl: the tasks every run uses
  std::vector<double> bandwidth_scales = {0.25, 0.5, 1, 2, 4};  // times the link preset's bandwidth
  std::string trace_path;  // when set: the headline ASYNC run's Chrome trace (both steps, every rank)
};

void bench_overlap(const OverlapBenchOptions& options);

}  // namespace fsdplab::app
