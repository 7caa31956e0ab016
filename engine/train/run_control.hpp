// run_control.hpp — step-through, pause, stop and pacing for FSDP runs, shared by the dashboard's
// thread and every rank thread of one or more concurrent runs (an A/B comparison runs two).
//
// The ranks call gate() at every FSDP event (fsdp_observer.hpp), after the run's observer got it; the
// UI calls the rest from any thread. All of it is under one mutex, with a condition variable the gates
// wait on, so it is data-race free and every change wakes whoever it concerns:
//   pause()       every rank stops at its next gate
//   resume()      they all go on
//   step_once()   they go on until the focus rank (set_focus: a run's source id and a rank) reaches a
//                 break event (set_break_on, set_break_on_task, with set_breaking on), then all stop
//                 again; with breaking off or nothing chosen, until the focus rank's next event of any kind
//   break events  an event is one when its kind is chosen (any kind, if only tasks are chosen) and its
//                 task is chosen (any task, if only kinds are): "every event of task 3's code" is
//                 set_break_on_task(3) alone, "task 3's post-forwards" adds set_break_on(post_forward)
//   breaking      while running, the focus rank's break events pause the world too; other ranks and
//                 other runs never break, they only pause
//   stop()        every gate throws RunStopped from then on, paused ones at once: the ranks unwind and
//                 train_fsdp rethrows the RunStopped
//   pacing        set_steps_per_second(n): at each optimizer step a rank sleeps (woken by any change)
//                 so that its run does at most n steps a wall second
//   holding       set_hold_others_from_step(s): every rank but the focus rank goes on to a place of its own
//                 and waits there until stop(), never pausing: its own break event in step s (the one the focus
//                 rank breaks at; with no break chosen, the other runs' ranks their first event of step s), or,
//                 for another run whose step s has no such event, the first event of step s + 1. A screenshot
//                 then shows every rank at one place, however far it would have got by the time the focus rank
//                 breaks: a reference beside a student's run, at the event the student's stopped at
// A rank waiting in a collective for a paused rank must not time out: holding() is the run's
// LocalWorldOptions::hold (train_fsdp sets it). A rank at its hold is not one of those: it waits until stop(), so a
// focus rank that waits in a collective for it before reaching its break (a collective only some ranks make) times
// out as it would without the hold, and the screenshot shows that failure instead of waiting for ever.
#pragma once
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "engine/fsdp/fsdp_observer.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {

// Thrown by RunControl::gate once stop() was called, and rethrown by train_fsdp.
struct RunStopped : Error {
  using Error::Error;
};

class RunControl {
 public:
  // ---- UI side (any thread) ---------------------------------------------------------------------
  void pause();
  void resume();
  // Lets the ranks run until the focus rank's next break event (see above), then pauses again.
  void step_once();
  // Every gate throws RunStopped from now on; wakes the paused ranks. There is no undoing it.
  void stop();
  bool paused() const;
  bool stopped() const;
  // Which events the focus rank breaks at (none by default), and the master switch (off by default).
  void set_break_on(FsdpEventKind kind, bool on);
  bool breaks_on(FsdpEventKind kind) const;
  // Which tasks' events the focus rank breaks at (FsdpEvent::task, 1..kTaskCount; none by default); an
  // Error for another number, or for turning on a task that reports no events (task_reports_events).
  void set_break_on_task(int task, bool on);
  bool breaks_on_task(int task) const;
  void set_breaking(bool on);
  bool breaking() const;
  // Break events of earlier steps pass by (0, the default: every step's). A screenshot of a world
  // stopped in step N sets N before the run starts, so where it stops does not depend on timing.
  void set_break_from_step(int step);
  // Every rank but the focus rank holds at its own break event of step `step`, or at the step's end (see above);
  // -1, the default, holds none. Set before the runs start.
  void set_hold_others_from_step(int step);
  // How many ranks of run `source` wait at that hold now.
  int held_ranks(int source) const;
  // The run (the source id its ranks pass to gate) and rank that breaks; the others only pause. (0, 0) by default.
  void set_focus(int source, int rank);
  std::pair<int, int> focus() const;  // (source, rank)
  // At most `limit` steps a wall second per run; 0 (the default) for no limit.
  void set_steps_per_second(double limit);
  // The event the world stopped at, while paused at a break (or at the end of a step_once).
  std::optional<FsdpEvent> last_break() const;
  // Increments on every pause, resume, step_once, break and stop, so a UI can notice changes cheaply.
  std::uint64_t generation() const;

  // ---- engine side (rank threads) ---------------------------------------------------------------
  // At every FSDP event of rank `event.rank` of run `source`: breaks there if it is the focus rank's
  // break event, paces at optimizer steps, then blocks while paused. Throws RunStopped once stopped.
  void gate(int source, const FsdpEvent& event);
  // True while the world is paused or a rank waits in a gate (paused or pacing, not at its hold): its peers'
  // collectives must wait for it without timing out.
  bool holding() const;

 private:
  // Whether the focus rank stops at `event` now (a break, or the end of a step_once).
  bool breaks_at(int source, const FsdpEvent& event) const;
  // Whether the event is a break event (kind and task chosen, from break_from_step on), for any rank.
  bool break_event(const FsdpEvent& event) const;
  // Whether rank `event.rank` of run `source` waits at the hold here (set_hold_others_from_step).
  bool holds(int source, const FsdpEvent& event) const;
  // Waits while paused or held and, for an optimizer step, until the pacing allows it. Throws once stopped.
  void wait_turn(std::unique_lock<std::mutex>& lock, int source, const FsdpEvent& event);
  void changed();  // under the lock: a new generation, and every waiting gate looks again

  using Clock = std::chrono::steady_clock;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool paused_ = false;
  bool stepping_ = false;  // between step_once and the stop it asked for
  bool stopped_ = false;
  bool breaking_ = false;
  std::array<bool, kFsdpEventKindCount> break_on_{};
  std::array<bool, kTaskCount> break_on_task_{};  // [task - 1]
  int focus_source_ = 0, focus_rank_ = 0;
  int break_from_step_ = 0;
  int hold_others_from_step_ = -1;
  std::map<int, int> held_ranks_;  // by source: its ranks waiting at the hold
  double steps_per_second_ = 0;
  std::optional<FsdpEvent> last_break_;
  std::uint64_t generation_ = 0;
  int waiting_ = 0;  // ranks inside a gate's wait
  std::map<std::pair<int, int>, Clock::time_point> last_step_;  // by (source, rank): its last optimizer step
};

}  // namespace fsdplab
