// bench_kernels.hpp — `fsdplab bench --what kernels`: where a training step's GPU time goes, kernel by kernel,
// so the next bottleneck is one command away.
#pragma once
#include "app/bench_train.hpp"

namespace fsdplab::app {

// Trains as --what train does (one rank: the single-rank baseline; W >= 2: FSDP ASYNC) and prints rank 0's
// device work over the measured steps grouped by kernel, then by phase and by kind (engine/trace/kernel_breakdown.hpp):
// on cuda from CUPTI's kernel, copy and memset records, on sim from each op's virtual duration.
void bench_kernels(const TrainBenchOptions& options);

}  // namespace fsdplab::app
