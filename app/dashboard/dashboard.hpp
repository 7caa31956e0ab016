// dashboard.hpp — the whole dashboard in one ImGui window: run controls and step-through on the left,
// the timeline across the top right, memory, step times and the FlatParameter map below it.
//
// It shows a live session (runs on their own threads, drained once a frame), runs streamed from other
// processes (`fsdplab gui --listen`, a RemoteSession drained once a frame), or replayed trace files
// (`fsdplab view`), through the same panels; the live-only panels (controls, step-through) are
// replaced by the streams and their problems for remote runs, by the files' names and load errors in a
// replay. frame() builds one frame between
// ImGui::NewFrame and ImGui::Render and never blocks: the GLFW window, the headless tests and
// `fsdplab bench --what ui` all drive it the same way.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "app/dashboard/controls_panel.hpp"
#include "app/dashboard/flat_parameter_map.hpp"
#include "app/dashboard/live_session.hpp"
#include "app/dashboard/memory_panel.hpp"
#include "app/dashboard/remote_session.hpp"
#include "app/dashboard/replay.hpp"
#include "app/dashboard/step_through_panel.hpp"
#include "app/dashboard/step_time_panel.hpp"
#include "app/dashboard/timeline_panel.hpp"

namespace fsdplab::app {

class Dashboard {
 public:
  explicit Dashboard(std::unique_ptr<LiveSession> session);
  explicit Dashboard(std::unique_ptr<RemoteSession> remote);
  explicit Dashboard(Replay replay);

  // Drains the live runs or the remote streams (if any) and builds every panel for this frame.
  void frame();

  LiveSession* session() { return session_.get(); }
  RemoteSession* remote() { return remote_.get(); }
  const TraceStore& store() const;
  TimelinePanel& timeline() { return timeline_; }
  MemoryPanel& memory() { return memory_; }
  StepTimePanel& step_times() { return step_times_; }
  FlatParameterPanel& flat_parameters() { return flat_parameters_; }
  ControlsPanel& controls() { return controls_; }
  StepThroughPanel& step_through() { return step_through_; }
  // The title as the last frame drew it, a line each: wrapped at spaces to the window's width.
  const std::vector<std::string>& title_lines() const { return title_lines_; }

 private:
  void handle_keys();
  void draw_title();
  std::string title_text() const;
  void draw_left();
  void draw_right();

  std::unique_ptr<LiveSession> session_;
  std::unique_ptr<RemoteSession> remote_;
  Replay replay_;
  TimelinePanel timeline_;
  MemoryPanel memory_;
  StepTimePanel step_times_;
  FlatParameterPanel flat_parameters_;
  ControlsPanel controls_;
  StepThroughPanel step_through_;
  std::vector<std::string> title_lines_;
};

}  // namespace fsdplab::app
