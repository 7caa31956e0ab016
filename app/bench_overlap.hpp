// bench_overlap.hpp — `fsdplab bench --what overlap`: SYNC against ASYNC FSDP steps on the sim device's
// virtual clock, with the compute-only, communication-only and ideal times, the overlap efficiency, and
// sweeps of link bandwidth and prefetch policy (app/bench_overlap.cpp says what each number is).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/train/run_config.hpp"
#include "engine/runtime/sim_time.hpp"
#include "engine/trace/trace_recorder.hpp"

namespace fsdplab::app {

struct OverlapBenchOptions {
  std::string model = "gpt2";
  std::string preset = "gpt2";
  std::int64_t micro_batch = 4;  // sequences per rank; the global batch is W times this
  std::int64_t seq = 1024;
  int world = 2;
  std::string device_preset = "h100-sxm";
  std::string link_preset;  // empty: the device preset's default link
  // The sweep scales both links, and the free link stands in for both.
  NodePlacement nodes;
  std::string presets_file;  // empty: the built-in presets
  // The ASYNC configuration of the bandwidth sweep and the headline numbers (its mode is set to async);
  // the prefetch sweep varies it. SYNC is sync_schedule of it.
  FsdpOptions async;
  ImplChoice impl;  // --impl: the tasks every run uses
  std::vector<double> bandwidth_scales = {0.25, 0.5, 1, 2, 4};  // times the link preset's bandwidth
  std::string trace_path;  // when set: the headline ASYNC run's Chrome trace (both steps, every rank)
};

void bench_overlap(const OverlapBenchOptions& options);

// The bench's headline (the lines after "<link>, prefetch ..."), as numbers: the SYNC and ASYNC steps of
// options.async on the link preset, and the same ASYNC schedule on a free link. Virtual times, rank 0, step 2.
struct OverlapHeadline {
  std::int64_t parameters = 0;
  DevicePreset device;
  LinkPreset link;
  SimTime compute = 0;        // the step on a free link
  SimTime comm = 0;           // the link's busy time
  SimTime t_sync = 0, t_async = 0, ideal = 0;
  std::optional<double> eta;  // undefined when T_sync <= ideal
  SimTime sync_overlap = 0;   // |comm ∩ compute| of the SYNC step
  double overlap_percent = 0;                   // of the ASYNC step
  SimTime exposed = 0;                          // |comm| - |comm ∩ compute| of the ASYNC step
  std::int64_t gathered = 0;                    // peak param_full + grad_full of the ASYNC step, bytes
  std::int64_t sharded_state = 0;               // peak param_shard + grad_shard + optim_state of that step, bytes
  std::array<SimTime, kRankLinkCount> links{};  // each link's busy time in the ASYNC step, by RankLink
};
// `sync_trace` and `async_trace`, when given, receive every rank's trace of the two runs (both steps).
OverlapHeadline overlap_headline(const OverlapBenchOptions& options, TraceData* sync_trace = nullptr,
                                 TraceData* async_trace = nullptr);

}  // namespace fsdplab::app
