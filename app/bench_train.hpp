// bench_train.hpp — `fsdplab bench --what train`: training throughput on the device a run gets (cuda on a
// GPU: wall-clock steps timed by the host, ops by CUDA events; sim: virtual time), with the GEMMs' share
// of the step and of the device preset's peak, and for W >= 2 the SYNC and ASYNC steps and eta.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "app/exposed_communication.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/device.hpp"
#include "engine/trace/kernel_breakdown.hpp"
#include "engine/trace/trace_event.hpp"
#include "engine/train/run_config.hpp"

namespace fsdplab::app {

struct TrainBenchOptions {
  std::string device = "auto";
  std::string model = "gpt2";
  std::string preset = "gpt2";
  std::int64_t micro_batch = 4;  // sequences per rank
  std::int64_t seq = 1024;
  std::int64_t vocab_multiple = 0;  // gpt2: RunConfig::vocab_multiple (0: the preset's, 128 for gpt2)
  std::string attention = "auto";   // RunConfig::attention: auto, exact or flash
  int world = 1;
  int steps = 10;   // measured steps
  int warmup = 3;   // steps run first and not measured (allocator cache, cuBLAS heuristics)
  std::string precision = "f32";  // FSDP's param_dtype, or at W = 1 the baseline's compute dtype
  std::string reduce_dtype = "f32";        // FSDP's reduce_dtype (W >= 2: the baseline reduces nothing)
  std::string embedding_grad = "table";    // FSDP's --embedding-grad (W >= 2)
  std::string device_preset = "h100-sxm";  // the peak the GEMMs are compared with, and the link's preset
  std::string link_preset = "pcie4-no-p2p";
  bool emulate_link = false;
  std::string sm_split = "auto";  // cuda, W >= 2: --sm-split auto|on|off (set_sm_split, run_device.hpp)
  ImplChoice impl;  // --impl: the FSDP tasks (W >= 2; the single-rank baseline runs none)

  // The run these options measure: model, batch (micro_batch rows per rank), steps (warmup + measured +
  // one more), presets and link, on `device`. The step after the measured ones is run and not measured, so
  // the last measured step prepares the next one's forward as every step mid-training does (FSDP's
  // next-step prefetch, [Note: per-unit optimizer steps] in engine/fsdp/unit_lifecycle.cpp).
  RunConfig run_config(std::string device_choice) const;
  // An Error, before a bench prints anything, for options no run of `what` ("train", "kernels", "cupti") can take:
  // the steps, the precision, FSDP's options (validate_fsdp_options; where one rank runs the single-rank baseline,
  // as train and kernels do, --impl, --reduce-dtype and --embedding-grad have no FSDP to configure), a model they
  // cannot build (build_model: a --seq past the position table, ...), and the device: cupti's needs a GPU; on the sim
  // device, --sm-split has no SMs to split (--emulate-link is refused there by run_device_spec); and where --device
  // auto found no GPU, the Error says why and what to give for the sim device, which computes every value on this
  // CPU (a real model's step takes minutes there): a machine's figures were asked for, and a broken driver must not
  // pass for a long CPU run. `fsdplab bench` calls it before any bench, and before its warnings.
  void check_runnable(std::string_view what) const;
  // "f32", or "bf16, bf16 gradient reduction, embedding gradient as rows, flash attention" where --reduce-dtype,
  // --embedding-grad and --attention chose: the header's compute.
  std::string compute() const {
    return precision + (reduce_dtype == "f32" ? "" : ", " + reduce_dtype + " gradient reduction") +
           (embedding_grad == "table" ? "" : ", embedding gradient as " + embedding_grad) +
           (attention == "auto" ? "" : ", " + attention + " attention");
  }
  // Whether step `step` (0-based) is one of the measured steps.
  bool measured(int step) const { return step >= warmup && step < warmup + steps; }
  // The FSDP options of an ASYNC row: `precision` as the parameters' dtype, the rest the defaults.
  FsdpOptions async_fsdp_options() const;
};

void bench_train(const TrainBenchOptions& options);

// One training of `run` (bench.run_config(...)), every rank traced: FSDP with `fsdp_options` when given, else
// the single-rank baseline in bench.precision (bf16: mixed precision on f32 master weights, as torch.autocast).
struct RecordedTraining {
  std::vector<TraceEvent> rank0_events;  // what rank 0's trace sink got
  double step_ms = 0;                    // the mean of the measured steps (after bench.warmup)
};
RecordedTraining record_training(const TrainBenchOptions& bench, const RunConfig& run,
                                 const FsdpOptions* fsdp_options);

// What each row of bench_train's table reads from one record_training.
struct TrainMeasurement {
  double step_ms = 0;
  double gemm_ms = 0;   // per step, rank 0
  double gemm_flops = 0;
  double comm_ms = 0;   // per step, rank 0: the link's busy time
  double compute_ms = 0;         // per step, rank 0: the summed durations of its device work other than collectives
  ExposedCommunication exposed;  // rank 0's, the mean of the measured steps
  KernelBreakdown ops;           // rank 0's device work a step, ops by name, collectives by kind (op_group)
};
TrainMeasurement measure_training(const TrainBenchOptions& bench, const RunConfig& run,
                                  const FsdpOptions* fsdp_options);

}  // namespace fsdplab::app
