// RunControl (engine/train/run_control.hpp) on its own, with threads standing in for ranks: gates pass
// while nothing is asked; a break pauses only at the focus rank's chosen events, and then every gate
// waits; resume lets them all go; stop makes every gate throw, waking the waiting ones; holding() is
// true while a rank is held, which keeps its peers' collectives from timing out.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/train/run_control.hpp"

namespace fsdplab {
namespace {

using namespace std::chrono_literals;

FsdpEvent event_of(int rank, FsdpEventKind kind, int step = 0, int task = 0) {
  FsdpEvent e;
  e.rank = rank;
  e.kind = kind;
  e.step = step;
  e.task = task;
  return e;
}

// Polls for up to 3 s; whether `condition` came true.
template <class Condition>
bool eventually(const Condition& condition) {
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(RunControl, GatesPassWhileNothingIsAsked) {
  RunControl control;
  for (std::size_t k = 0; k < kFsdpEventKindCount; ++k) control.gate(0, event_of(0, static_cast<FsdpEventKind>(k)));
  EXPECT_FALSE(control.paused());
  EXPECT_FALSE(control.holding());
  EXPECT_EQ(control.generation(), 0u);
  // Breaks chosen but breaking off: still nothing.
  control.set_break_on(FsdpEventKind::pre_forward, true);
  EXPECT_TRUE(control.breaks_on(FsdpEventKind::pre_forward));
  EXPECT_FALSE(control.breaks_on(FsdpEventKind::post_forward));
  control.gate(0, event_of(0, FsdpEventKind::pre_forward));
  EXPECT_FALSE(control.paused());
}

TEST(RunControl, OnlyTheFocusRankBreaksAndThenEveryGateWaits) {
  RunControl control;
  control.set_breaking(true);
  control.set_break_on(FsdpEventKind::post_forward, true);
  control.set_focus(1, 1);
  control.gate(0, event_of(1, FsdpEventKind::post_forward));  // another run
  control.gate(1, event_of(0, FsdpEventKind::post_forward));  // another rank
  control.gate(1, event_of(1, FsdpEventKind::pre_forward));   // another kind
  EXPECT_FALSE(control.paused());

  std::atomic<int> passed{0};
  std::thread focus([&] {
    control.gate(1, event_of(1, FsdpEventKind::post_forward, 3));
    ++passed;
  });
  ASSERT_TRUE(eventually([&] { return control.paused(); }));
  const std::optional<FsdpEvent> at = control.last_break();
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->rank, 1);
  EXPECT_EQ(at->step, 3);
  EXPECT_EQ(at->kind, FsdpEventKind::post_forward);
  std::thread other([&] {
    control.gate(0, event_of(0, FsdpEventKind::collective_done));
    ++passed;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(passed, 0);
  EXPECT_TRUE(control.holding());

  control.resume();
  focus.join();
  other.join();
  EXPECT_EQ(passed, 2);
  EXPECT_FALSE(control.paused());
  EXPECT_FALSE(control.last_break().has_value());
}

// Runs a gate on its own thread; whether it stopped there (a break), after which it is let go again.
bool breaks_at(RunControl& control, const FsdpEvent& event) {
  std::atomic<bool> passed{false};
  std::thread rank([&] {
    control.gate(0, event);
    passed = true;
  });
  const bool broke = eventually([&] { return control.paused() || passed; }) && control.paused();
  if (broke) {
    EXPECT_EQ(control.last_break()->task, event.task);
    control.resume();
  }
  rank.join();
  return broke;
}

TEST(RunControl, ATaskFilterBreaksOnEveryEventOfThoseTasksAndNarrowsTheKinds) {
  RunControl control;
  control.set_breaking(true);
  control.set_break_on_task(3, true);
  control.set_break_on_task(6, true);
  EXPECT_TRUE(control.breaks_on_task(3));
  EXPECT_FALSE(control.breaks_on_task(4));
  EXPECT_FALSE(control.breaks_on_task(0));  // "outside the tasks" is never one
  // Tasks alone: every kind of their events, and nothing of the other tasks.
  EXPECT_TRUE(breaks_at(control, event_of(0, FsdpEventKind::pre_forward, 0, 3)));
  EXPECT_TRUE(breaks_at(control, event_of(0, FsdpEventKind::collective_issued, 0, 6)));
  EXPECT_FALSE(breaks_at(control, event_of(0, FsdpEventKind::post_backward, 0, 4)));
  EXPECT_FALSE(breaks_at(control, event_of(0, FsdpEventKind::optimizer_step, 0, 0)));
  EXPECT_FALSE(breaks_at(control, event_of(1, FsdpEventKind::pre_forward, 0, 3)));  // not the focus rank
  // A kind as well: only that kind of those tasks' events.
  control.set_break_on(FsdpEventKind::post_forward, true);
  EXPECT_FALSE(breaks_at(control, event_of(0, FsdpEventKind::pre_forward, 0, 3)));
  EXPECT_TRUE(breaks_at(control, event_of(0, FsdpEventKind::post_forward, 0, 3)));
  EXPECT_FALSE(breaks_at(control, event_of(0, FsdpEventKind::post_forward, 0, 4)));
  // Tasks off again: the kind alone, of any task.
  control.set_break_on_task(3, false);
  control.set_break_on_task(6, false);
  EXPECT_TRUE(breaks_at(control, event_of(0, FsdpEventKind::post_forward, 0, 4)));
  // Stepping with a task chosen goes to that task's next event, passing the others.
  control.set_break_on(FsdpEventKind::post_forward, false);
  control.set_break_on_task(5, true);
  control.pause();
  control.step_once();
  control.gate(0, event_of(0, FsdpEventKind::pre_backward, 0, 4));
  EXPECT_FALSE(control.paused());
  EXPECT_TRUE(breaks_at(control, event_of(0, FsdpEventKind::optimizer_step, 0, 5)));
}

TEST(RunControl, RefusesATaskThatIsNotOneOfTheLabs) {
  RunControl control;
  EXPECT_THROW(control.set_break_on_task(0, true), Error);
  EXPECT_THROW(control.set_break_on_task(kTaskCount + 1, true), Error);
}

TEST(RunControl, RefusesToBreakOnATaskThatReportsNoEventsAndSaysWhy) {
  RunControl control;
  for (int task : {1, 2, 9}) {
    EXPECT_FALSE(task_reports_events(task));
    std::string why;
    try {
      control.set_break_on_task(task, true);
    } catch (const Error& e) {
      why = e.what();
    }
    EXPECT_NE(why.find("task " + std::to_string(task)), std::string::npos) << why;
    EXPECT_NE(why.find("no event"), std::string::npos) << why;
    control.set_break_on_task(task, false);  // turning it off is always fine: the panel clears every task
    EXPECT_FALSE(control.breaks_on_task(task));
  }
  for (int task = 3; task <= 8; ++task) {
    EXPECT_TRUE(task_reports_events(task));
    control.set_break_on_task(task, true);
    EXPECT_TRUE(control.breaks_on_task(task));
  }
}

// In a given run, task 6 reports events only where it gathers a unit ahead, and task 8 only with replica groups:
// each refusal names the setting that leaves the task nothing to do.
TEST(RunControl, SaysWhichRunsGiveATaskNoEventToStopAt) {
  const auto why = [](int task, const FsdpOptions& options, int world) {
    EXPECT_FALSE(task_reports_events(task, options, world));
    return why_task_reports_no_events(task, options, world);
  };
  FsdpOptions async;
  EXPECT_TRUE(task_reports_events(6, async, 2));
  EXPECT_TRUE(task_reports_events(3, sync_schedule(async), 2));
  EXPECT_NE(why(6, sync_schedule(async), 2).find("under SYNC"), std::string::npos);
  for (const ShardingStrategy replicated :
       {ShardingStrategy::no_shard, ShardingStrategy::zero1, ShardingStrategy::zero2}) {
    FsdpOptions o;
    o.strategy = replicated;
    EXPECT_NE(why(6, o, 2).find("--strategy " + std::string(strategy_name(replicated)) + " keeps the whole parameters"),
              std::string::npos);
    EXPECT_TRUE(task_reports_events(5, o, 2));
  }
  FsdpOptions none;
  none.prefetch = parse_prefetch("none");
  EXPECT_NE(why(6, none, 2).find("--prefetch none"), std::string::npos);
  // grad_op keeps the units gathered from the forward to the backward: a backward prefetch has nothing to fetch,
  // the next step's first gather (in the default) and the forward prefetch have.
  FsdpOptions grad_op;
  grad_op.strategy = ShardingStrategy::shard_grad_op;
  EXPECT_TRUE(task_reports_events(6, grad_op, 2));
  grad_op.prefetch = parse_prefetch("backward-post");
  EXPECT_NE(why(6, grad_op, 2).find("--prefetch backward-post), and under --strategy grad_op"), std::string::npos);
  grad_op.prefetch = parse_prefetch("forward");
  EXPECT_TRUE(task_reports_events(6, grad_op, 2));
  FsdpOptions hybrid;
  hybrid.strategy = ShardingStrategy::hybrid_shard;
  hybrid.hybrid_group = 2;
  EXPECT_NE(why(8, hybrid, 2).find("task 8 (hybrid shard)"), std::string::npos);
  EXPECT_TRUE(task_reports_events(8, hybrid, 4));
}

TEST(RunControl, StepOnceWithoutBreaksGoesOneEventOfTheFocusRank) {
  RunControl control;
  control.pause();
  EXPECT_TRUE(control.paused());
  EXPECT_FALSE(control.last_break().has_value());  // a pause, not a break
  control.step_once();
  EXPECT_FALSE(control.paused());
  control.gate(0, event_of(1, FsdpEventKind::pre_forward));  // not the focus: goes on
  EXPECT_FALSE(control.paused());
  std::thread focus([&] { control.gate(0, event_of(0, FsdpEventKind::collective_issued)); });
  ASSERT_TRUE(eventually([&] { return control.paused(); }));
  EXPECT_EQ(control.last_break()->kind, FsdpEventKind::collective_issued);
  control.resume();
  focus.join();
}

TEST(RunControl, StopWakesWaitingGatesAndEveryLaterOneThrows) {
  RunControl control;
  control.pause();
  std::atomic<bool> threw{false};
  std::thread rank([&] {
    try {
      control.gate(0, event_of(0, FsdpEventKind::pre_backward, 2));
    } catch (const RunStopped& e) {
      threw = std::string(e.what()) == "run 0 stopped (RunControl::stop) at rank 0's pre-backward of step 2";
    }
  });
  ASSERT_TRUE(eventually([&] { return control.holding(); }));
  const std::uint64_t generation = control.generation();
  control.stop();
  rank.join();
  EXPECT_TRUE(threw);
  EXPECT_TRUE(control.stopped());
  EXPECT_GT(control.generation(), generation);
  EXPECT_THROW(control.gate(0, event_of(1, FsdpEventKind::optimizer_step)), RunStopped);
}

TEST(RunControl, PacingSpacesOptimizerStepsAndStopCutsItShort) {
  RunControl control;
  control.set_steps_per_second(10);
  const auto begin = std::chrono::steady_clock::now();
  control.gate(0, event_of(0, FsdpEventKind::optimizer_step, 0));  // the first step waits for nothing
  control.gate(0, event_of(0, FsdpEventKind::pre_forward, 1));     // only optimizer steps are paced
  control.gate(0, event_of(0, FsdpEventKind::optimizer_step, 1));
  EXPECT_GE(std::chrono::steady_clock::now() - begin, 95ms);
  control.gate(1, event_of(0, FsdpEventKind::optimizer_step, 0));  // another run has its own pace

  control.set_steps_per_second(0.1);  // 10 s a step: cut short by stop
  std::thread rank([&] { EXPECT_THROW(control.gate(0, event_of(0, FsdpEventKind::optimizer_step, 2)), RunStopped); });
  ASSERT_TRUE(eventually([&] { return control.holding(); }));
  const auto asked = std::chrono::steady_clock::now();
  control.stop();
  rank.join();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 1s);
}

// A screenshot's holds (set_hold_others_from_step): another run's rank goes on past the events of the step that are
// not the break's, holds at the break event (where the focus rank stops), and at once in any later step; a rank at
// its hold is not one its peers' collectives wait for (holding() false), as a paused one is.
TEST(RunControl, AnotherRunHoldsAtTheBreakEventOfItsOwnAndIsNotWaitedFor) {
  RunControl control;
  control.set_focus(1, 0);
  control.set_break_on(FsdpEventKind::post_forward, true);
  control.set_breaking(true);
  control.set_break_from_step(1);
  control.set_hold_others_from_step(1);
  control.gate(0, event_of(0, FsdpEventKind::post_forward, 0));  // an earlier step's break event passes
  control.gate(0, event_of(0, FsdpEventKind::pre_forward, 1));   // so does another kind of event in the step
  std::thread at_break([&] { EXPECT_THROW(control.gate(0, event_of(0, FsdpEventKind::post_forward, 1)), RunStopped); });
  std::thread later([&] { EXPECT_THROW(control.gate(0, event_of(1, FsdpEventKind::pre_forward, 2)), RunStopped); });
  ASSERT_TRUE(eventually([&] { return control.held_ranks(0) == 2; }));
  EXPECT_FALSE(control.holding());
  control.stop();
  at_break.join();
  later.join();
}

TEST(RunControl, RefusesANegativePace) {
  RunControl control;
  EXPECT_THROW(control.set_steps_per_second(-1), Error);
}

}  // namespace
}  // namespace fsdplab
