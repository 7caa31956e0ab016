// Step-through on a real FSDP run (gpt2 test-tiny, W = 2), driven from the test's thread as the dashboard
// drives it from its own, with a recording observer per rank:
//   pause       every rank stops (no event comes for longer than the world's timeout, set to 200 ms) even
//               with rank 1 inside a collective waiting for the paused rank 0 — the control's hold keeps
//               the world from timing out; resume finishes with the very losses of an uncontrolled run
//   break       on post-forward, focus rank 0: the world stops at rank 0's post-forward; step_once goes
//               exactly to rank 0's next post-forward; with breaking off it goes exactly one event
//   stop        while paused, train_fsdp throws RunStopped at once (well under the 5 s timeout)
//   pacing      20 steps a second: 6 steps take at least the 5 intervals between them (0.25 s)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/run_control.hpp"
#include "fsdp_event_recorder.hpp"
#include "fsdp_runs.hpp"

namespace fsdplab {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::losses_of;

FsdpRun tiny_run(int steps) {
  FsdpRun fsdp;
  fsdp.run = testing::gpt2_run(2, 4, 16, steps);
  return fsdp;
}

// train_fsdp on its own thread, as the dashboard runs it; finish() joins and rethrows what it threw.
class BackgroundRun {
 public:
  explicit BackgroundRun(const FsdpRun& fsdp)
      : thread_([this, fsdp] {
          try {
            reports_ = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
          } catch (...) {
            error_ = std::current_exception();
          }
          done_ = true;
        }) {}
  ~BackgroundRun() {
    if (thread_.joinable()) thread_.join();
  }
  bool done() const { return done_; }
  std::vector<StepReport> finish() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
    return reports_;
  }

 private:
  std::vector<StepReport> reports_;
  std::exception_ptr error_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

std::vector<std::size_t> counts(const std::vector<std::unique_ptr<testing::FsdpEventRecorder>>& recorders) {
  std::vector<std::size_t> out;
  for (const auto& r : recorders) out.push_back(r->count());
  return out;
}

TEST(FsdpStepThrough, PauseHoldsEveryRankPastTheTimeoutAndResumeFinishesTheSame) {
  const std::vector<double> uncontrolled = losses_of(train_fsdp(tiny_run(3), PresetCatalog::builtin(), nullptr));
  FsdpRun fsdp = tiny_run(3);
  // Long enough that rank 1, waiting in the first collective before the pause is set and again after the
  // resume until rank 0 gets there, never times out on a loaded machine under a sanitizer.
  fsdp.run.comm_timeout = 1s;
  RunControl control;
  fsdp.control = &control;
  auto recorders = testing::record_events(fsdp);
  // Rank 0 holds at its first event (before its gate) until the pause is set, while rank 1 goes on into
  // the first collective and waits there for rank 0.
  std::mutex mutex;
  std::condition_variable paused_cv;
  bool pause_set = false;
  recorders[0]->after_event = [&, first = true](const FsdpEvent&) mutable {
    if (!first) return;
    first = false;
    std::unique_lock lock(mutex);
    paused_cv.wait(lock, [&] { return pause_set; });
  };
  BackgroundRun run(fsdp);
  ASSERT_TRUE(eventually([&] { return recorders[0]->count() >= 1 && recorders[1]->count() >= 1; }));
  std::this_thread::sleep_for(20ms);  // rank 1 passes its gate into the collective
  control.pause();
  {
    const std::lock_guard lock(mutex);
    pause_set = true;
  }
  paused_cv.notify_all();
  EXPECT_TRUE(eventually([&] { return control.holding(); }));
  const std::vector<std::size_t> at_pause = counts(recorders);
  std::this_thread::sleep_for(2100ms);  // more than twice the world's timeout
  EXPECT_EQ(counts(recorders), at_pause);
  EXPECT_FALSE(run.done());
  EXPECT_TRUE(control.paused());
  EXPECT_FALSE(control.last_break().has_value());  // a pause, not a break

  control.resume();
  const std::vector<double> losses = losses_of(run.finish());
  EXPECT_EQ(losses, uncontrolled);
  EXPECT_GT(recorders[0]->count(), at_pause[0]);
}

TEST(FsdpStepThrough, BreakOnPostForwardStopsAtRank0AndStepOnceGoesToItsNext) {
  FsdpRun fsdp = tiny_run(2);
  RunControl control;
  control.set_breaking(true);
  control.set_break_on(FsdpEventKind::post_forward, true);
  fsdp.control = &control;
  auto recorders = testing::record_events(fsdp);
  BackgroundRun run(fsdp);
  const auto post_forwards = [&] {
    const std::vector<FsdpEvent> events = recorders[0]->events();
    return std::count_if(events.begin(), events.end(),
                         [](const FsdpEvent& e) { return e.kind == FsdpEventKind::post_forward; });
  };
  ASSERT_TRUE(eventually([&] { return control.paused(); }));
  std::optional<FsdpEvent> stop = control.last_break();
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->kind, FsdpEventKind::post_forward);
  EXPECT_EQ(stop->rank, 0);
  EXPECT_EQ(stop->step, 0);
  EXPECT_EQ(stop->unit, 1);  // the first Block's forward ends first; the root's encloses it
  EXPECT_EQ(post_forwards(), 1);
  // Rank 0's latest event is the one it stopped at.
  EXPECT_EQ(recorders[0]->events().back().host_time, stop->host_time);

  const std::uint64_t generation = control.generation();
  control.step_once();
  ASSERT_TRUE(eventually([&] { return control.generation() > generation + 1 && control.paused(); }));
  stop = control.last_break();
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->kind, FsdpEventKind::post_forward);
  EXPECT_EQ(stop->rank, 0);
  EXPECT_EQ(stop->unit, 2);
  EXPECT_EQ(post_forwards(), 2);
  EXPECT_EQ(recorders[0]->events().back().kind, FsdpEventKind::post_forward);

  // With breaking off, a step is one event of the focus rank.
  control.set_breaking(false);
  const std::size_t before = recorders[0]->count();
  const std::uint64_t g = control.generation();
  control.step_once();
  ASSERT_TRUE(eventually([&] { return control.generation() > g + 1 && control.paused(); }));
  EXPECT_EQ(recorders[0]->count(), before + 1);

  const auto asked = std::chrono::steady_clock::now();
  control.stop();
  EXPECT_THROW(run.finish(), RunStopped);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 2s);  // the world's timeout is 5 s: nobody waited for it
}

TEST(FsdpStepThrough, StopWhileRunningThrowsRunStopped) {
  FsdpRun fsdp = tiny_run(50);
  RunControl control;
  fsdp.control = &control;
  auto recorders = testing::record_events(fsdp);
  BackgroundRun run(fsdp);
  ASSERT_TRUE(eventually([&] { return recorders[1]->count() > 10; }));
  control.stop();
  try {
    run.finish();
    ADD_FAILURE() << "the stopped run finished";
  } catch (const RunStopped& e) {
    EXPECT_NE(std::string(e.what()).find("stopped (RunControl::stop) at rank"), std::string::npos) << e.what();
  }
}

TEST(FsdpStepThrough, PacingHoldsARunToItsStepsPerSecond) {
  FsdpRun fsdp = tiny_run(6);
  RunControl control;
  control.set_steps_per_second(20);
  fsdp.control = &control;
  const auto begin = std::chrono::steady_clock::now();
  EXPECT_EQ(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr).size(), 6u);
  EXPECT_GE(std::chrono::steady_clock::now() - begin, 245ms);  // 5 intervals of 50 ms, less clock slack
}

}  // namespace
}  // namespace fsdplab
