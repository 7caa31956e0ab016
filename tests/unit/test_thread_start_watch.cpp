// The watch over the single-threaded test files (tests/thread_start_watch.cpp) fails a listed file's test that starts
// a thread: ctest's unit.thread_start_watch_fails_a_listed_file runs this test with FSDPLAB_START_A_THREAD=1 and
// expects the watch's failure. Elsewhere it has nothing to do.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

TEST(ThreadStartWatch, FailsAListedFilesTestThatStartsAThread) {
  if (std::getenv("FSDPLAB_START_A_THREAD") == nullptr) {
    GTEST_SKIP() << "run by ctest's unit.thread_start_watch_fails_a_listed_file";
  }
  std::thread([] {}).join();
}
