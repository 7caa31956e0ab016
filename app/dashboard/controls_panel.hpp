// controls_panel.hpp — the run controls: what to train and how (model and preset, world size, device
// and link preset, on sim the ranks per node and the link between nodes, the comparison: SYNC/ASYNC or
// the reference beside --impl, which tasks run the student's code, prefetch, strategy with hybrid's shard
// group, reshard after forward, the wrap policy, precision and reduction dtype, gathered-parameter buffers and
// the in-flight limit, CPU offload), and run / pause / single step while the runs go (once they have all
// finished: run them again), restart with the edited settings; and the devices this machine offers.
//
// Edits go to a copy of the settings; nothing changes until "Restart with these settings", which
// starts new runs only if the settings can run (otherwise the error is shown and the runs go on).
#pragma once
#include <imgui.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "app/dashboard/live_session.hpp"

namespace fsdplab::app {

class ControlsPanel {
 public:
  void draw(LiveSession& session);

  // For tests: where the buttons and fields were drawn in the last frame.
  struct Rect {
    ImVec2 min, max;
  };
  Rect run_pause_button() const { return run_pause_; }
  // The first button's label in `session`'s state: "Run  " (paused), "Pause" (running) or "Run again" (finished).
  static std::string_view run_pause_label(LiveSession& session);
  Rect step_button() const { return step_; }
  Rect restart_button() const { return restart_; }
  Rect impl_field() const { return impl_; }
  Rect world_slider() const { return world_; }  // its frame, where a click sets the value; not its label
  Rect nodes_slider() const { return nodes_; }
  Rect shard_group_slider() const { return shard_group_; }  // empty unless the strategy is hybrid
  Rect wrap_combo() const { return wrap_; }
  Rect reduce_dtype_combo() const { return reduce_dtype_; }
  Rect embedding_grad_combo() const { return embedding_grad_; }
  Rect buffers_combo() const { return buffers_; }
  Rect max_inflight_field() const { return max_inflight_; }
  Rect offload_checkbox() const { return offload_; }
  SessionSettings& edited() { return edited_; }
  const std::vector<std::string>& devices() const { return devices_; }
  const std::string& message() const { return message_; }

 private:
  // Restarts the session with `settings`, or keeps the runs and shows why they cannot run.
  void restart(LiveSession& session, SessionSettings settings);

  bool initialised_ = false;
  SessionSettings edited_;
  std::string message_;  // the last restart's error, shown until the next try
  std::vector<std::string> devices_;  // probed once, on the first frame
  std::array<char, 128> impl_text_{};  // the impl field's text, from edited_.fsdp.impl each frame
  Rect run_pause_, step_, restart_, impl_, world_, nodes_, shard_group_;
  Rect wrap_, reduce_dtype_, embedding_grad_, buffers_, max_inflight_, offload_;
};

}  // namespace fsdplab::app
