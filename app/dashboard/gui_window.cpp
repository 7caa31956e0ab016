#include "app/dashboard/gui_window.hpp"

#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <GLFW/glfw3.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "app/dashboard/frame_capture.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/wall_clock.hpp"

namespace fsdplab::app {
namespace {

// Live screenshots wait for their moment: every run `steps` steps in (or ended), or the focus rank stopped at
// the session's break (SessionSettings::break_at, armed before the runs started, so the world stops at the
// same event every time) or its run ended, and every other rank held (BreakAt::others_hold: each at the same event,
// or where a run has none in that step, at the start of the next) or its run ended. Remote ones wait until a
// run streamed `steps` steps, or one failed (the shot shows why, as a live one does).
class ScreenshotMoment {
 public:
  explicit ScreenshotMoment(const WindowOptions& options) : options_(options) {}

  bool reached(Dashboard& dashboard) {
    if (LiveSession* session = dashboard.session(); session && !at_moment(*session)) return false;
    if (RemoteSession* remote = dashboard.remote();
        remote && remote->most_steps() < static_cast<std::size_t>(options_.screenshot_after_steps) &&
        std::none_of(remote->store().sources().begin(), remote->store().sources().end(),
                     [](const TraceSource& s) { return !s.failure.empty(); }))
      return false;
    return ++frames_ > 3;  // drawn a few times after the moment: the panels show what was drained last
  }
  // Whether the moment is still to come (reached() has not held yet).
  bool waiting() const { return frames_ == 0; }

 private:
  bool at_moment(LiveSession& session) const {
    // A run that failed never breaks: once every run ended, the shot shows why.
    if (const std::optional<BreakAt>& b = session.settings().break_at) {
      RunControl& control = session.control();
      const int focus = control.focus().first;
      const bool broke = control.paused() && control.last_break();
      const auto& runs = session.runs();
      // The focus run ended without reaching the break: the others are let go from their holds, and the shot waits
      // for every run to end (cmd_gui then says the runs finished without reaching it).
      if (!broke && std::any_of(runs.begin(), runs.end(),
                                [&](const auto& run) { return run->source() == focus && run->finished(); })) {
        control.set_hold_others_from_step(-1);
        return std::all_of(runs.begin(), runs.end(), [](const auto& run) { return run->finished(); });
      }
      bool focus_stopped = broke;
      for (const auto& run : session.runs()) {
        const int source = run->source();
        if (run->finished()) {
          focus_stopped = focus_stopped || source == focus;
          continue;
        }
        // The focus run's other ranks hold too, the focus rank itself stops at the break.
        const int holding = session.store().source(source).world - (source == focus ? 1 : 0);
        if (b->others_hold && control.held_ranks(source) < holding) return false;
      }
      return focus_stopped;
    }
    for (const auto& run : session.runs())
      if (!run->finished() &&
          static_cast<int>(session.store().source(run->source()).steps.size()) < options_.screenshot_after_steps)
        return false;
    return true;
  }

  const WindowOptions& options_;
  int frames_ = 0;
};

}  // namespace

std::optional<std::string> display_problem() {
  const char* x11 = std::getenv("DISPLAY");
  const char* wayland = std::getenv("WAYLAND_DISPLAY");
  if ((!x11 || !*x11) && (!wayland || !*wayland)) return "no display (DISPLAY and WAYLAND_DISPLAY are not set)";
  // GLFW stays initialised for run_window: closing the only connection makes an X server reset, and
  // connecting again at once can fail while it does (seen with Xvfb).
  if (!glfwInit()) return "GLFW cannot open the display '" + std::string(x11 ? x11 : wayland) + "'";
  return std::nullopt;
}

std::optional<std::string> window_problem(const WindowOptions& options) {
  if (!options.screenshot.empty()) return std::nullopt;
  return display_problem();
}

namespace {

// How often a screenshot waiting for its moment draws a frame: llvmpipe (Mesa's software OpenGL, what draws
// headless) spends milliseconds of a CPU core on each, and frames drawn back to back while runs had yet to connect
// or to do their steps kept a core busy for nothing. The runs never wait for frames: what they send meanwhile
// waits in their queues for the next frame's drain.
constexpr std::chrono::milliseconds kWaitingFramePeriod{50};

// A screenshot: frames drawn offscreen until its moment, the last one written.
void run_capture(Dashboard& dashboard, const WindowOptions& options) {
  FrameCapture capture(options.width, options.height);
  ScreenshotMoment moment(options);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto frame_start = std::chrono::steady_clock::now();
    capture.new_frame();
    dashboard.frame();
    capture.render();
    if (moment.reached(dashboard)) {
      capture.write_png(options.screenshot, "--screenshot");
      return;
    }
    const double waited = seconds_since(start);
    if (RemoteSession* remote = dashboard.remote())
      check(waited < options.timeout_seconds, "screenshot: no run streamed ", options.screenshot_after_steps,
            " steps to ", remote->listener().address(), " within ", options.timeout_seconds, " s (the most: ",
            remote->most_steps(), ")");
    const bool breaks = dashboard.session() && dashboard.session()->settings().break_at;
    check(waited < options.timeout_seconds, "screenshot: its moment did not come within ", options.timeout_seconds,
          " s (", options.screenshot_after_steps, " steps", breaks ? ", then a break" : "", ")");
    // The few frames after the moment come at once: the shot is due.
    if (moment.waiting()) std::this_thread::sleep_until(frame_start + kWaitingFramePeriod);
  }
}

// The dashboard in a window, until it is closed.
void run_interactive(Dashboard& dashboard, const WindowOptions& options) {
  if (const auto problem = display_problem()) fail("the dashboard's window needs a display: ", *problem);
  check(glfwInit(), "GLFW failed to initialise");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* window = glfwCreateWindow(options.width, options.height, "fsdplab", nullptr, nullptr);
  if (!window) {
    glfwTerminate();
    fail("cannot create a ", options.width, "x", options.height, " window with an OpenGL 3.3 core context");
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // the layout is fixed; no imgui.ini beside the user's files
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");
  const auto close = [&] {
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
    glfwDestroyWindow(window);
    glfwTerminate();
  };
  try {
    while (!glfwWindowShouldClose(window)) {
      glfwPollEvents();
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      ImGui::NewFrame();
      dashboard.frame();
      ImGui::Render();
      int width = 0, height = 0;
      glfwGetFramebufferSize(window, &width, &height);
      draw_imgui_frame(width, height);
      glfwSwapBuffers(window);
    }
  } catch (...) {
    close();
    throw;
  }
  close();
}

}  // namespace

void run_window(Dashboard& dashboard, const WindowOptions& options) {
  if (options.screenshot.empty()) {
    run_interactive(dashboard, options);
  } else {
    run_capture(dashboard, options);
  }
}

}  // namespace fsdplab::app
