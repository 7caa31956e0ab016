// gpu_runs.hpp — the trainings the GPU tests run, in one place, so that a sim test
// (tests/integration/test_gpu_fixtures.cpp) trains each of them on every CI run: a GPU machine must never be
// the first to find that a fixture is wrong (two once asked test-tiny for 32 tokens; its position table has 16).
//
// It also scales the GPU tests' time limits (collective timeouts, watchdogs): compute-sanitizer slows NCCL's
// join and every kernel many times over, so a run under it sets FSDPLAB_TEST_TIME_SCALE, e.g.
//   FSDPLAB_TEST_TIME_SCALE=20 compute-sanitizer --tool memcheck fsdplab_gpu_tests
#pragma once
#include <chrono>
#include <cstdlib>
#include <string>

#include "../integration/fsdp_runs.hpp"
#include "engine/comm/local_comm.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab::testing {

// FSDPLAB_TEST_TIME_SCALE, a number >= 1 (1 where unset); anything else is an Error naming what came.
inline double test_time_scale() {
  const char* text = std::getenv("FSDPLAB_TEST_TIME_SCALE");
  if (text == nullptr || *text == '\0') return 1.0;
  char* end = nullptr;
  const double scale = std::strtod(text, &end);
  check(*end == '\0' && scale >= 1.0 && scale <= 1000.0,
        "FSDPLAB_TEST_TIME_SCALE: expected a number from 1 to 1000 (how many times longer the GPU tests wait), got '",
        text, "'");
  return scale;
}

// A time limit of the GPU tests, times FSDPLAB_TEST_TIME_SCALE.
inline std::chrono::milliseconds scaled(std::chrono::milliseconds limit) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(limit.count()) * test_time_scale()));
}

// The options of a GPU test's world of ranks: the default collective timeout, scaled.
inline LocalWorldOptions scaled_world_options() { return {.timeout = scaled(LocalWorldOptions{}.timeout)}; }

// An FSDP training of a GPU test, its collective timeout scaled.
inline FsdpRun gpu_fsdp(RunConfig run) {
  FsdpRun fsdp;
  fsdp.run = std::move(run);
  fsdp.run.comm_timeout = scaled(fsdp.run.comm_timeout);
  return fsdp;
}

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
