// bench_cupti.hpp — `fsdplab bench --what cupti`: what CUPTI's live trace costs a training step on the GPU, and
// whether it tells the same overlap as the CUDA-event op spans of the same run.
#pragma once
#include "app/bench_train.hpp"

namespace fsdplab::app {

// FSDP training (ASYNC, `options.world` ranks sharing the GPU) with CUPTI off and on, alternating; the
// options are --what train's, the device is always cuda.
void bench_cupti(const TrainBenchOptions& options);

}  // namespace fsdplab::app
