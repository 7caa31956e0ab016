// headless_imgui.hpp — an ImGui context with no window: what the panel tests, `fsdplab bench --what ui` and
// FrameCapture (frame_capture.hpp: screenshots without a display) build frames in.
//
// ImGui needs a display size, a built font atlas with some texture id, and a frame time; the GLFW
// backend normally provides them. Here they are set by hand, so a frame's draw data can be built and
// inspected (or timed) on a machine without a display. Input is fed the 1.86 way, through io.MousePos
// and io.MouseDown (there is no AddMousePosEvent in 1.86).
#pragma once
#include <imgui.h>

namespace fsdplab::app {

class HeadlessImGui {
 public:
  explicit HeadlessImGui(float width = 1600, float height = 1000);
  ~HeadlessImGui();
  HeadlessImGui(const HeadlessImGui&) = delete;
  HeadlessImGui& operator=(const HeadlessImGui&) = delete;

  // Starts a frame with the mouse at (x, y), the left button held or not; -1,-1 is "no mouse".
  void new_frame(float mouse_x = -1, float mouse_y = -1, bool mouse_down = false);
  // Ends the frame; its draw data stays readable until the next new_frame.
  ImDrawData& render();

  // Moves the mouse to the centre of [min, max] and clicks there: a frame with the button down and one
  // with it up, each running `draw` (the code that submits the widgets).
  template <class Draw>
  void click(ImVec2 min, ImVec2 max, Draw&& draw) {
    const float x = (min.x + max.x) / 2, y = (min.y + max.y) / 2;
    // A second past the last frame first: two clicks on one spot within 0.3 s are a double click.
    ImGui::GetIO().DeltaTime = 1.0f;
    for (bool down : {false, true, false}) {
      new_frame(x, y, down);
      ImGui::GetIO().DeltaTime = 1.0f / 60.0f;
      draw();
      render();
    }
  }

  ImGuiContext* context() { return context_; }

 private:
  ImGuiContext* context_ = nullptr;
  ImGuiContext* previous_ = nullptr;
};

}  // namespace fsdplab::app
