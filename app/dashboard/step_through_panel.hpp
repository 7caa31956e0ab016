// step_through_panel.hpp — break on FSDP events, see what just happened and which task's code did it,
// then continue or step to the next event.
//
// The break kinds are the lab's seams: pre/post forward and backward of a unit, a collective issued,
// a collective done, the optimizer step. The panel edits the session's RunControl (which rank of
// which run breaks, on which kinds) and shows the event the world stopped at with the task it belongs
// to, and the latest events of that run in order.
#pragma once
#include <imgui.h>

#include "app/dashboard/live_session.hpp"

namespace fsdplab::app {

// "Task 3 · forward: all-gather and reshard" — the writeup's seven tasks.
const char* task_title(int task);

class StepThroughPanel {
 public:
  void draw(LiveSession& session);

  struct Rect {
    ImVec2 min, max;
  };
  Rect continue_button() const { return continue_; }
  Rect step_button() const { return step_; }

 private:
  Rect continue_, step_;
};

}  // namespace fsdplab::app
