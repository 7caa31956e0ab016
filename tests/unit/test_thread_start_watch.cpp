// The watch over the single-threaded test files (tests/thread_start_watch.cpp) fails a listed file's test that starts
// a thread: ctest's unit.thread_start_watch_fails_a_listed_file runs this test with FSDPLAB_START_A_THREAD=1 and
// expects the watch's failure; unit.thread_start_watch_leaves_cuda_instances_alone runs the cuda instance below the
// same way and expects it to pass. Elsewhere they have nothing to do.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "test_support.hpp"  // device_param_name

TEST(ThreadStartWatch, FailsAListedFilesTestThatStartsAThread) {
  if (std::getenv("FSDPLAB_START_A_THREAD") == nullptr) {
    GTEST_SKIP() << "run by ctest's unit.thread_start_watch_fails_a_listed_file";
  }
  std::thread([] {}).join();
}

// A test's cuda instance may start threads (the CUPTI tracer's flusher): a TSan build has no CUDA and never runs it.
class ThreadStartWatchInstance : public ::testing::TestWithParam<fsdplab::DeviceKind> {};

TEST_P(ThreadStartWatchInstance, OnCudaMayStartAThread) {
  if (std::getenv("FSDPLAB_START_A_THREAD") == nullptr) {
    GTEST_SKIP() << "run by ctest's unit.thread_start_watch_leaves_cuda_instances_alone";
  }
  std::thread([] {}).join();
}

INSTANTIATE_TEST_SUITE_P(Devices, ThreadStartWatchInstance, ::testing::Values(fsdplab::DeviceKind::cuda),
                         fsdplab::testing::device_param_name);
