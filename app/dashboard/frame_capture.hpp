// frame_capture.hpp — frames of Dear ImGui drawn with OpenGL and written as PNG files: the dashboard's
// screenshots (gui_window.cpp) and the report's figures (app/report/report_figures.cpp) go through here.
//
// A frame is rendered into the back buffer, read back before the buffers are swapped, and encoded with
// stb_image_write; the file is written like every file a user names (engine/runtime/output_file.hpp: through
// a temporary name, renamed into place). Under `xvfb-run` Mesa's llvmpipe renders them.
#pragma once
#include <filesystem>
#include <string_view>

struct GLFWwindow;
struct ImGuiContext;

namespace fsdplab::app {

// ImGui's draw data (after ImGui::Render) into the current context's back buffer, over the dashboard's
// background colour, at the window's framebuffer size.
void render_to_back_buffer();

// The current context's back buffer, once render_to_back_buffer drew into it, as a PNG at `path`. An Error
// naming `what` (e.g. "--screenshot", "figure") and the path when it cannot be read or written.
void write_back_buffer_png(const std::filesystem::path& path, std::string_view what);

// A window of a fixed size to draw frames in for files, with no one at it: not resizable, no input read,
// frames drawn as fast as they come, and an ImGui context of its own (made current; the caller's, if any,
// current again when it goes). GLFW must be initialised (display_problem(), gui_window.hpp) and is
// terminated when the window goes.
class CaptureWindow {
 public:
  // An Error when GLFW cannot create the window.
  CaptureWindow(int width, int height, const char* title);
  ~CaptureWindow();
  CaptureWindow(const CaptureWindow&) = delete;
  CaptureWindow& operator=(const CaptureWindow&) = delete;

  GLFWwindow* glfw() const { return window_; }

 private:
  GLFWwindow* window_ = nullptr;
  ImGuiContext* previous_ = nullptr;
  ImGuiContext* context_ = nullptr;
};

}  // namespace fsdplab::app
