// step_through_panel.hpp — break on FSDP events, see what just happened and which task's code did it,
// then continue or step to the next event.
//
// The break kinds are the lab's seams: pre/post forward and backward of a unit, a collective issued,
// a collective done, the optimizer step; breaks can also be narrowed to tasks: "break on my tasks" in
// one click stops at every event of the tasks the focus run takes from the student (--impl), or of the
// task chosen in the panel. The panel edits the session's RunControl (which rank of which run breaks,
// on which kinds and tasks) and shows the event the world stopped at: the task it belongs to, the exact
// code site (file:line of the implementing class, the student's in labs/ or the reference's), and the
// exercise's paragraph for that moment (exercise_notes.hpp); then the latest events of that run in order.
#pragma once
#include <imgui.h>

#include <optional>
#include <string>
#include <tuple>

#include "app/dashboard/live_session.hpp"

namespace fsdplab::app {

class StepThroughPanel {
 public:
  void draw(LiveSession& session);

  struct Rect {
    ImVec2 min, max;
  };
  Rect step_button() const { return step_; }
  Rect my_tasks_button() const { return my_tasks_; }
  Rect task_button() const { return task_; }
  Rect event_list() const { return events_; }  // the latest events' list, scrolled into or not
  static constexpr int kEventRows = 8;         // its least height, in rows
  // The task the "break on task N" button chooses: one that reports events (task_reports_events). Until one
  // is chosen, it is the focus run's first replaced task that reports events, else task 3.
  void set_chosen_task(int task);
  // Where the runs ended with breaking on and never stopped (a race, an error, or no such event before the end): why,
  // as the panel says it under its buttons; "" otherwise. Of the last frame.
  const std::string& never_stopped() const { return never_stopped_; }

 private:
  std::string never_stopped_;
  std::optional<int> chosen_task_;
  Rect step_, my_tasks_, task_, events_;
  // The last stop the panel scrolled to (rank, step, kind, unit, host time): each stop scrolls once.
  using StopKey = std::tuple<int, int, int, int, SimTime>;
  static std::optional<StopKey> stop_key(const std::optional<FsdpEvent>& stop);
  std::optional<StopKey> scrolled_to_;
  std::optional<StopKey> events_scrolled_to_;  // the stop the event list last went to its newest entry for
};

}  // namespace fsdplab::app
