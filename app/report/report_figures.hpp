// report_figures.hpp — the report's figures, drawn by the dashboard's own rendering path: Dear ImGui
// with OpenGL 3.3 in an offscreen framebuffer, the frame read back and written as a PNG, as the
// dashboard's screenshots are (app/dashboard/frame_capture.hpp). The dashboard's panels draw the timeline,
// the step times and the memory by tag; the line charts (loss curves, bandwidth against size) are drawn
// with the same ImGui draw lists the panels use, not a plotting library.
//
// They need no display. Without an offscreen OpenGL context (no EGL driver: app/dashboard/offscreen_gl.hpp)
// no figure is drawn and each says why, so the report states it.
#pragma once
#include <imgui.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace fsdplab::app {

struct Figure {
  std::string file;   // a name in the report's folder, e.g. "timeline_sync_async.png"
  std::string title;  // the caption, also drawn at the top of the figure
  // Submits the figure's widgets into an ImGui window that covers the whole frame, under the title.
  std::function<void()> draw;
};

struct FigureResult {
  std::string file;
  std::string title;
  bool drawn = false;
  std::string why;  // when not drawn
};

// The frame every figure is drawn in.
constexpr int kFigureWidth = 1400;
constexpr int kFigureHeight = 860;

// Draws each figure and writes it into `dir` (through a temporary name, renamed). Never throws for a
// figure: what kept one from being drawn is its FigureResult::why.
std::vector<FigureResult> render_figures(const std::vector<Figure>& figures, const std::filesystem::path& dir);

// A line chart drawn with ImGui's draw list into a region of `size` at the cursor (0: the rest of the window).
struct ChartSeries {
  std::string label;
  std::vector<double> x, y;
  ImU32 color = IM_COL32(255, 255, 255, 255);
  bool markers = true;
  bool dashed = false;
};
enum class LegendCorner { top_right, bottom_right };
struct LineChart {
  std::string x_label, y_label;
  bool log_x = false;  // base 2 ticks
  std::vector<ChartSeries> series;
  LegendCorner legend = LegendCorner::top_right;
  // How an x tick is labelled (default: %g).
  std::function<std::string(double)> x_tick;
};
void draw_line_chart(const LineChart& chart, ImVec2 size = ImVec2(0, 0));

}  // namespace fsdplab::app
