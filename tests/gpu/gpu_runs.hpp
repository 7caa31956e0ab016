// gpu_runs.hpp — the trainings the GPU tests run, in one place, so that a sim test
// (tests/integration/test_gpu_fixtures.cpp) trains each of them on every CI run: a GPU machine must never be
// the first to find that a fixture is wrong (two once asked test-tiny for 32 tokens; its position table has 16).
#pragma once
#include "../integration/fsdp_runs.hpp"

namespace fsdplab::testing {

// FSDP with two ranks sharing one GPU over LocalComm, the link emulated (test_cuda_device.cpp).
inline RunConfig one_gpu_fsdp_run() {
  RunConfig run = gpt2_run(2, 8, 16, 10);
  run.device = "cuda";
  run.emulate_link = true;
  run.link_preset = "pcie4-no-p2p";
  return run;
}

// A short two-rank run whose CUPTI records are counted (test_cupti_tracing.cpp).
inline RunConfig cupti_fsdp_run() {
  RunConfig run = gpt2_run(2, 8, 16, 3);
  run.device = "cuda";
  return run;
}

// FSDP over NCCL, a GPU per rank (test_nccl_comm.cpp).
inline RunConfig nccl_run(int world) {
  RunConfig run = gpt2_run(world, 8, 16, 5);
  run.device = "cuda";
  run.comm = "nccl";
  return run;
}

// The same training on the sim device over LocalComm: what the fixture check trains.
inline RunConfig on_sim(RunConfig run) {
  run.device = "sim";
  run.comm = "local";
  run.emulate_link = false;
  return run;
}

}  // namespace fsdplab::testing
