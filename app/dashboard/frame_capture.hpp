// frame_capture.hpp — frames of Dear ImGui drawn with OpenGL and written as PNG files: the dashboard's
// screenshots (gui_window.cpp) and the report's figures (app/report/report_figures.cpp) go through here.
//
// Frames are drawn offscreen (offscreen_gl.hpp: EGL, no window and no X server), read back from the
// framebuffer and encoded with stb_image_write; the file is written like every file a user names
// (engine/runtime/output_file.hpp: through a temporary name, renamed into place).
#pragma once
#include <filesystem>
#include <string_view>

#include "app/dashboard/headless_imgui.hpp"
#include "app/dashboard/offscreen_gl.hpp"

namespace fsdplab::app {

// ImGui's draw data (after ImGui::Render) into the current framebuffer, width x height, over the dashboard's
// background colour: a window's frames and captured ones alike.
void draw_imgui_frame(int width, int height);

// Frames of a fixed size drawn for files, with no one at them: no input, a fixed frame time (1/60 s, so a
// frame draws the same however long it took), each frame drawn to the end before render() returns, and an
// ImGui context of its own (current from the constructor on; the caller's, if any, current again when it goes).
class FrameCapture {
 public:
  // An Error when no offscreen OpenGL context can be had (OffscreenGl's, naming what to install).
  FrameCapture(int width, int height);
  ~FrameCapture();
  FrameCapture(const FrameCapture&) = delete;
  FrameCapture& operator=(const FrameCapture&) = delete;

  // Starts a frame; the caller then submits its widgets.
  void new_frame();
  // Ends the frame and draws it over the dashboard's background colour; returns once it is drawn.
  void render();
  // The frame render() drew, as a PNG at `path`. An Error naming `what` (e.g. "--screenshot", "figure") and the
  // path when it cannot be read or written.
  void write_png(const std::filesystem::path& path, std::string_view what) const;

 private:
  OffscreenGl gl_;  // first in, last out: the ImGui backend needs the context until it shuts down
  HeadlessImGui imgui_;
};

}  // namespace fsdplab::app
