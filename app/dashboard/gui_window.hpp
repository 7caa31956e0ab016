// gui_window.hpp — the dashboard in a GLFW window with OpenGL 3.3, and screenshots of it.
//
// The window needs a display: without one (no DISPLAY or WAYLAND_DISPLAY, or glfwInit failing) nothing
// opens, and the caller is told so (display_problem) and points the user at the headless commands or a
// screenshot. Screenshots open no window: their frames are drawn offscreen and the last one written as a PNG
// (frame_capture.hpp), with or without a display.
#pragma once
#include <optional>
#include <string>

#include "app/dashboard/dashboard.hpp"

namespace fsdplab::app {

// Why no window can open here, or nullopt if one can (GLFW is then initialised, for run_window).
std::optional<std::string> display_problem();

struct WindowOptions {
  int width = 1600;
  int height = 1000;
  // Empty: interactive, until the window is closed. Otherwise the PNG to write, after which it returns.
  std::string screenshot;
  // Live sessions: the shot is taken once every run has done this many steps (or ended), or with the
  // session's break (SessionSettings::break_at, from step `screenshot_after_steps` on), once the world
  // stopped at it, the step-through panel showing it. Remote sessions: once a run streamed this many steps.
  int screenshot_after_steps = 0;
  double timeout_seconds = 300;  // a screenshot that cannot be taken by then is an Error
};

// Why run_window cannot run `options` here, or nullopt: a window needs a display (display_problem), a
// screenshot none. Callers ask before they start the runs the dashboard shows.
std::optional<std::string> window_problem(const WindowOptions& options);

// Runs `dashboard` in a window, or with options.screenshot offscreen until the shot is written. An Error
// without a display for the window, without an offscreen OpenGL context for a shot, or when the shot cannot
// be written or its moment never comes.
void run_window(Dashboard& dashboard, const WindowOptions& options);

}  // namespace fsdplab::app
