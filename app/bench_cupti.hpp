// bench_cupti.hpp — `fsdplab bench --what cupti`: what CUPTI's live trace costs a training step on the GPU, and
// whether it tells the same overlap as the CUDA-event op spans of the same run.
#pragma once
#include <cstdint>

#include "app/bench_train.hpp"

namespace fsdplab::app {

// CUPTI's records delivered and dropped so far in this process (engine/cuda/cupti_tracer.hpp); only reached on a
// GPU, so an Error in a build without the CUDA backend.
struct CuptiTotals {
  std::int64_t records = 0;
  std::int64_t dropped = 0;
};
CuptiTotals cupti_totals();

// FSDP training (ASYNC, `options.world` ranks sharing the GPU) with CUPTI off and on, alternating; the
// options are --what train's, the device is always cuda.
void bench_cupti(const TrainBenchOptions& options);

}  // namespace fsdplab::app
